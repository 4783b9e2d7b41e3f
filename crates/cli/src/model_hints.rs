//! What to tell someone whose `-m MODEL` or program directory did not load: a model of the wrong
//! kind for the command names the command that takes it, and a bare name that is not found is
//! matched against the Hugging Face cache's `ORG/NAME` ids.

use std::path::Path;

use aneforge_models::resolve::{resolve, Resolver};
use aneforge_models::ModelConfig;

/// What a model directory holds, as far as its `config.json` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// A decoder LLM (`generate`, `chat`), with its architecture or model type.
    Decoder(String),
    /// A text encoder (`embed`, or `rerank` for a sequence classifier).
    Encoder(String),
}

/// Decoder model types besides those aneforge runs ([`aneforge_models::llm::Family::SUPPORTED_HF`]).
const DECODER_TYPES: &[&str] = &[
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2", "phi",
    "phi3", "falcon", "gpt_neox", "olmo", "smollm3", "granite",
];

/// The kind of model `spec` resolves to; `None` when it does not resolve or says nothing known.
pub fn kind(spec: &str) -> Option<ModelKind> {
    let resolved = resolve(spec).ok()?;
    if matches!(
        resolved.source,
        aneforge_models::resolve::ModelSource::GgufFile(_)
    ) {
        return Some(ModelKind::Decoder("GGUF".into()));
    }
    let Some(config) = resolved.file("config.json") else {
        return resolved
            .gguf_file()
            .ok()
            .map(|_| ModelKind::Decoder("GGUF".into()));
    };
    let config = ModelConfig::load(config).ok()?;
    let archs: Vec<&str> = config.architectures().iter().map(String::as_str).collect();
    let model_type = config.model_type().unwrap_or_default();
    if let Some(arch) = archs
        .iter()
        .find(|a| a.ends_with("ForCausalLM") || a.ends_with("LMHeadModel"))
    {
        return Some(ModelKind::Decoder(arch.to_string()));
    }
    if DECODER_TYPES.contains(&model_type)
        || aneforge_models::llm::Family::SUPPORTED_HF.contains(&model_type)
    {
        return Some(ModelKind::Decoder(model_type.to_string()));
    }
    let name = archs.first().copied().unwrap_or(model_type);
    (!name.is_empty()).then(|| ModelKind::Encoder(name.to_string()))
}

/// Hub-cache ids whose NAME matches a bare `spec` (no `/`), case-insensitively; exact matches
/// first, else names containing it.
pub fn similar_ids(spec: &str) -> Vec<String> {
    if spec.contains(['/', '\\']) || spec.len() < 3 {
        return Vec::new();
    }
    let Some(cache) = Resolver::from_env().hub_cache().map(Path::to_path_buf) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&cache) else {
        return Vec::new();
    };
    let ids: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            let (org, name) = n.strip_prefix("models--")?.split_once("--")?;
            Some(format!("{org}/{name}"))
        })
        .collect();
    let wanted = spec.to_ascii_lowercase();
    let name_of = |id: &str| id.rsplit('/').next().unwrap_or(id).to_ascii_lowercase();
    let mut exact: Vec<String> = ids
        .iter()
        .filter(|id| name_of(id) == wanted)
        .cloned()
        .collect();
    if exact.is_empty() {
        exact = ids
            .into_iter()
            .filter(|id| name_of(id).contains(&wanted))
            .collect();
    }
    exact.sort();
    exact
}

/// The commands a model is for, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    Encoder,
    Decoder,
}

/// `error` from loading `spec` for a command that wants `wants`, with a first line saying what to
/// do instead when that is known.
pub fn explain(error: anyhow::Error, spec: &str, wants: Wants) -> anyhow::Error {
    match (kind(spec), wants) {
        (Some(ModelKind::Decoder(arch)), Wants::Encoder) => error.context(format!(
            "{spec} is a decoder LLM ({arch}), not a text encoder: `aneforge generate -m {spec} \
             PROMPT` continues a prompt and `aneforge chat -m {spec}` talks with it"
        )),
        (Some(ModelKind::Encoder(arch)), Wants::Decoder) => error.context(format!(
            "{spec} is a text encoder ({arch}), not a decoder LLM: `aneforge embed -m {spec}` \
             embeds texts and `aneforge rerank -m {spec}` scores passages"
        )),
        (None, _) => match similar_ids(spec).as_slice() {
            [] => error,
            [one] => error.context(format!(
                "model '{spec}' not found; did you mean {one}? (-m {one})"
            )),
            many => error.context(format!(
                "model '{spec}' not found; did you mean one of {}?",
                many.join(", ")
            )),
        },
        _ => error,
    }
}
