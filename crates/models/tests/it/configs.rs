//! config.json, sentence-transformers files and tokenizer_config.json.

use std::path::Path;

use aneforge_models::config::{read_json, ConfigError, ModelConfig};
use aneforge_models::require_model;
use aneforge_models::sentence_transformers::{
    ModuleKind, PoolingConfig, PoolingMode, SentenceTransformerFiles,
};
use aneforge_models::tokenizer_config::TokenizerConfig;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn unknown_model_type_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        &tmp.path().join("config.json"),
        r#"{"model_type": "mamba9", "hidden_size": 8}"#,
    );
    let config = ModelConfig::load(tmp.path()).unwrap();
    assert_eq!(config.model_type(), Some("mamba9"));
    let msg = config
        .expect_model_type(&["bert", "llama"])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("mamba9") && msg.contains("bert, llama") && msg.contains("config.json"),
        "{msg}"
    );
    assert_eq!(config.require::<usize>("hidden_size").unwrap(), 8);
    let msg = config
        .require::<usize>("num_layers")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("num_layers") && msg.contains("missing"),
        "{msg}"
    );
    let msg = config
        .require::<String>("hidden_size")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("hidden_size"), "{msg}");

    write(&tmp.path().join("config.json"), r#"{"hidden_size": 8}"#);
    let msg = ModelConfig::load(tmp.path())
        .unwrap()
        .expect_model_type(&["bert"])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("<missing>"), "{msg}");
}

#[test]
fn json_errors_give_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.json");
    write(
        &path,
        "{\n  \"model_type\": \"bert\",\n  \"hidden_size\": ,\n}",
    );
    let err = ModelConfig::load(&path).unwrap_err();
    let ConfigError::Json { line, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*line, 3);
    assert!(
        err.to_string()
            .starts_with(&format!("{}:3:", path.display())),
        "{err}"
    );

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Needs {
        hidden_size: usize,
        num_hidden_layers: usize,
    }
    write(&path, r#"{"model_type": "bert", "hidden_size": 8}"#);
    let msg = ModelConfig::load(&path)
        .unwrap()
        .parse::<Needs>()
        .unwrap_err()
        .to_string();
    assert!(msg.contains("num_hidden_layers"), "{msg}");
    let msg = read_json::<Needs>(tmp.path().join("absent.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("absent.json"), "{msg}");
}

#[test]
fn pooling_config_current_and_legacy_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.json");
    write(
        &path,
        r#"{"embedding_dimension": 8, "pooling_mode": "cls", "include_prompt": false}"#,
    );
    let p = PoolingConfig::load(&path).unwrap();
    assert_eq!(
        (p.embedding_dimension, p.modes.as_slice(), p.include_prompt),
        (Some(8), &[PoolingMode::Cls][..], false)
    );

    write(&path, r#"{"pooling_mode": ["max", "mean"]}"#);
    assert_eq!(
        PoolingConfig::load(&path).unwrap().modes,
        vec![PoolingMode::Max, PoolingMode::Mean]
    );

    // Legacy flags concatenate in sentence-transformers' fixed order, whatever the key order.
    write(
        &path,
        r#"{"word_embedding_dimension": 4, "pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true,
            "pooling_mode_max_tokens": false}"#,
    );
    let p = PoolingConfig::load(&path).unwrap();
    assert_eq!(p.modes, vec![PoolingMode::Cls, PoolingMode::Mean]);
    assert_eq!(p.embedding_dimension, Some(4));

    write(
        &path,
        r#"{"word_embedding_dimension": 4, "pooling_mode_mean_tokens": false}"#,
    );
    assert_eq!(
        PoolingConfig::load(&path).unwrap().modes,
        vec![PoolingMode::Mean]
    );

    write(&path, r#"{"pooling_mode": "median"}"#);
    let msg = PoolingConfig::load(&path).unwrap_err().to_string();
    assert!(
        msg.contains("median") && msg.contains("pooling_mode"),
        "{msg}"
    );
}

#[test]
fn sentence_transformer_files_with_prompts_and_dense() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        &d.join("modules.json"),
        r#"[{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.Pooling"},
            {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}]"#,
    );
    write(
        &d.join("1_Pooling/config.json"),
        r#"{"embedding_dimension": 8, "pooling_mode": "lasttoken"}"#,
    );
    write(
        &d.join("2_Dense/config.json"),
        r#"{"in_features": 8, "out_features": 4, "bias": false, "activation_function": "torch.nn.modules.activation.Tanh"}"#,
    );
    write(
        &d.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 128, "do_lower_case": true}"#,
    );
    write(
        &d.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query", "similarity_fn_name": "dot"}"#,
    );
    let st = SentenceTransformerFiles::load(d).unwrap();
    let kinds: Vec<ModuleKind> = st.modules.iter().map(|m| m.kind()).collect();
    assert_eq!(
        kinds,
        [
            ModuleKind::Transformer,
            ModuleKind::Pooling,
            ModuleKind::Dense,
            ModuleKind::Normalize
        ]
    );
    assert_eq!(
        st.pooling.as_ref().unwrap().modes,
        vec![PoolingMode::LastToken]
    );
    assert!(st.normalizes());
    assert_eq!(
        (st.bert.max_seq_length, st.bert.do_lower_case),
        (Some(128), true)
    );
    assert_eq!(st.default_prompt(), Some("query: "));
    assert_eq!(st.st.similarity_fn_name.as_deref(), Some("dot"));
    let dense = st.dense_config(&st.modules[2]).unwrap();
    assert_eq!(
        (dense.in_features, dense.out_features, dense.bias),
        (8, 4, false)
    );

    write(
        &d.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "../elsewhere", "type": "sentence_transformers.models.Pooling"}]"#,
    );
    let msg = SentenceTransformerFiles::load(d).unwrap_err().to_string();
    assert!(msg.contains("leaves the model directory"), "{msg}");
}

#[test]
fn real_minilm_sentence_transformer_files() {
    let model = require_model!("sentence-transformers/all-MiniLM-L6-v2");
    let st = SentenceTransformerFiles::load(model.dir()).unwrap();
    let kinds: Vec<ModuleKind> = st.modules.iter().map(|m| m.kind()).collect();
    assert_eq!(
        kinds,
        [
            ModuleKind::Transformer,
            ModuleKind::Pooling,
            ModuleKind::Normalize
        ]
    );
    let pooling = st.pooling.clone().unwrap();
    assert_eq!(pooling.modes, vec![PoolingMode::Mean]);
    let config = ModelConfig::load(model.dir()).unwrap();
    assert_eq!(config.expect_model_type(&["bert"]).unwrap(), "bert");
    assert_eq!(
        pooling.embedding_dimension,
        config.get::<usize>("hidden_size").unwrap()
    );
    assert_eq!(st.default_prompt(), None);
    let tc = TokenizerConfig::load_dir(model.dir()).unwrap();
    assert_eq!(tc.pad_token.as_ref().map(|t| t.content()), Some("[PAD]"));
    assert_eq!(
        tc.max_length(),
        config.get::<usize>("max_position_embeddings").unwrap()
    );
}

#[test]
fn tokenizer_config_tokens_limits_and_chat_templates() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        &d.join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "<s>", "lstrip": false, "special": true}, "eos_token": "</s>",
            "pad_token": null, "model_max_length": 1000000000000000019884624838656,
            "chat_template": [{"name": "default", "template": "{{ messages }}"}, {"name": "tool_use", "template": "T"}],
            "added_tokens_decoder": {"0": {"content": "<s>", "special": true}}}"#,
    );
    let tc = TokenizerConfig::load_dir(d).unwrap();
    assert_eq!(tc.bos_token.as_ref().unwrap().content(), "<s>");
    assert_eq!(tc.eos_token.as_ref().unwrap().content(), "</s>");
    assert!(tc.pad_token.is_none());
    assert_eq!(tc.max_length(), None);
    assert_eq!(tc.chat_template(), Some("{{ messages }}"));
    assert_eq!(
        tc.chat_template.as_ref().unwrap().get(Some("tool_use")),
        Some("T")
    );
    assert!(tc.added_tokens_decoder["0"].special);

    write(&d.join("chat_template.jinja"), "JINJA");
    assert_eq!(
        TokenizerConfig::load_dir(d).unwrap().chat_template(),
        Some("JINJA")
    );

    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        TokenizerConfig::load_dir(empty.path())
            .unwrap()
            .chat_template(),
        None
    );
}

/// A config or tokenizer file that is a device (`/dev/zero`) is refused at once, not read until
/// memory runs out.
#[cfg(unix)]
#[test]
fn endless_json_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let err = ModelConfig::load(&config).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("NUL byte"),
        "{err}"
    );
    let tokenizer = dir.path().join("tokenizer.json");
    std::os::unix::fs::symlink("/dev/zero", &tokenizer).unwrap();
    let err = aneforge_models::TextTokenizer::from_file(&tokenizer)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("NUL byte"),
        "{err}"
    );
}
