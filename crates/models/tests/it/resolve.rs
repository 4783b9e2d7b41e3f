//! Model resolution: local paths, the Hugging Face cache layout, and the errors for missing models.

use std::path::{Path, PathBuf};

use aneforge_models::resolve::{ModelSource, ResolveError, Resolver};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `models--org--name` with refs/main → `hash` and a snapshot holding config.json.
fn hub_repo(cache: &Path, repo: &str, hash: &str) -> PathBuf {
    let repo_dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    write(&repo_dir.join("refs/main"), hash);
    let snapshot = repo_dir.join("snapshots").join(hash);
    write(&snapshot.join("config.json"), "{}");
    snapshot
}

const HASH: &str = "0123456789abcdef0123456789abcdef01234567";

#[test]
fn hub_cache_snapshot_via_refs_main() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = hub_repo(tmp.path(), "org/model", HASH);
    let model = Resolver::with_hub_cache(tmp.path())
        .resolve("org/model")
        .unwrap();
    assert_eq!(model.source, ModelSource::Dir(snapshot.clone()));
    assert_eq!(model.repo_id.as_deref(), Some("org/model"));
    assert_eq!(model.revision.as_deref(), Some(HASH));
    assert_eq!(
        model.file("config.json"),
        Some(snapshot.join("config.json"))
    );
    assert!(model.file("absent.json").is_none());
    let err = model.require_file("absent.json").unwrap_err().to_string();
    assert!(err.contains("absent.json") && err.contains(HASH), "{err}");
}

#[test]
fn revision_by_ref_name_or_snapshot_name() {
    let tmp = tempfile::tempdir().unwrap();
    hub_repo(tmp.path(), "gpt2", HASH);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let repo_dir = tmp.path().join("models--gpt2");
    write(
        &repo_dir.join("snapshots").join(other).join("config.json"),
        "{}",
    );
    write(&repo_dir.join("refs/v1"), other);
    let resolver = Resolver::with_hub_cache(tmp.path());
    assert_eq!(
        resolver.resolve("gpt2").unwrap().revision.as_deref(),
        Some(HASH)
    );
    assert_eq!(
        resolver.resolve("gpt2@v1").unwrap().revision.as_deref(),
        Some(other)
    );
    assert_eq!(
        resolver
            .resolve(&format!("gpt2@{other}"))
            .unwrap()
            .revision
            .as_deref(),
        Some(other)
    );
    let err = resolver.resolve("gpt2@v2").unwrap_err().to_string();
    assert!(err.contains("refs/v2") || err.contains("v2"), "{err}");
}

#[test]
fn gguf_file_inside_a_hub_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = hub_repo(tmp.path(), "org/model", HASH);
    write(&snapshot.join("model.Q4_0.gguf"), "GGUF");
    let resolver = Resolver::with_hub_cache(tmp.path());
    let model = resolver.resolve("org/model/model.Q4_0.gguf").unwrap();
    assert_eq!(
        model.source,
        ModelSource::GgufFile(snapshot.join("model.Q4_0.gguf"))
    );
    assert_eq!(model.repo_id.as_deref(), Some("org/model"));
    let model = resolver
        .resolve(&format!("org/model@{HASH}/model.Q4_0.gguf"))
        .unwrap();
    assert_eq!(model.revision.as_deref(), Some(HASH));
    let msg = resolver
        .resolve("org/model/other.gguf")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("other.gguf") && msg.contains(HASH), "{msg}");
}

#[test]
fn missing_model_lists_every_place_tried_and_how_to_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let resolver = Resolver::with_hub_cache(tmp.path());
    let err = resolver
        .resolve("sentence-transformers/all-MiniLM-L6-v2")
        .unwrap_err();
    let ResolveError::NotFound { tried, .. } = &err else {
        panic!("expected NotFound, got {err}");
    };
    assert_eq!(tried.0.len(), 2, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("local path"), "{msg}");
    assert!(
        msg.contains(
            &tmp.path()
                .join("models--sentence-transformers--all-MiniLM-L6-v2")
                .display()
                .to_string()
        ),
        "{msg}"
    );
    assert!(msg.contains("scripts/fetch-models.sh minilm"), "{msg}");
    assert!(msg.contains("feature `hub`"), "{msg}");

    let msg = resolver.resolve("someone/unknown").unwrap_err().to_string();
    assert!(msg.contains("scripts/fetch-models.sh"), "{msg}");
}

#[test]
fn dangling_refs_main_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let repo_dir = tmp.path().join("models--org--model");
    write(&repo_dir.join("refs/main"), HASH);
    let msg = Resolver::with_hub_cache(tmp.path())
        .resolve("org/model")
        .unwrap_err()
        .to_string();
    assert!(msg.contains(HASH) && msg.contains("missing"), "{msg}");
}

#[test]
fn local_directory_and_gguf_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("model");
    write(&dir.join("weights.gguf"), "GGUF");
    let resolver = Resolver::with_hub_cache(tmp.path().join("no-cache"));
    let model = resolver.resolve(dir.to_str().unwrap()).unwrap();
    assert_eq!(model.source, ModelSource::Dir(dir.clone()));
    assert_eq!(model.gguf_file().unwrap(), dir.join("weights.gguf"));

    let file = dir.join("weights.gguf");
    let model = resolver.resolve(file.to_str().unwrap()).unwrap();
    assert_eq!(model.source, ModelSource::GgufFile(file.clone()));
    assert_eq!(model.dir(), dir.as_path());

    write(&dir.join("other.gguf"), "GGUF");
    let msg = resolver
        .resolve(dir.to_str().unwrap())
        .unwrap()
        .gguf_file()
        .unwrap_err()
        .to_string();
    assert!(msg.contains("found 2"), "{msg}");

    write(&dir.join("notes.txt"), "x");
    let msg = resolver
        .resolve(dir.join("notes.txt").to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("notes.txt") && msg.contains(".gguf"), "{msg}");

    let missing = dir.join("missing.gguf");
    let msg = resolver
        .resolve(missing.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("missing.gguf") && !msg.contains("models--"),
        "{msg}"
    );
}

#[test]
fn malformed_ids_are_rejected() {
    let resolver = Resolver::with_hub_cache("/nonexistent");
    for spec in [
        "org/",
        "org/na me",
        "org/model@",
        "a/b@..",
        "org/..",
        "a@b@c",
    ] {
        let err = resolver.resolve(spec).unwrap_err();
        assert!(matches!(err, ResolveError::BadSpec { .. }), "{spec}: {err}");
    }
}

#[test]
fn hub_cache_location_follows_huggingface_hub() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| PathBuf::from(v))
        }
    };
    let cache = |pairs| {
        Resolver::from_vars(vars(pairs))
            .hub_cache()
            .map(Path::to_path_buf)
    };
    assert_eq!(
        cache(&[("HOME", "/h")]),
        Some(PathBuf::from("/h/.cache/huggingface/hub"))
    );
    assert_eq!(
        cache(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]),
        Some(PathBuf::from("/x/huggingface/hub"))
    );
    assert_eq!(
        cache(&[("HOME", "/h"), ("HF_HOME", "/hf")]),
        Some(PathBuf::from("/hf/hub"))
    );
    assert_eq!(
        cache(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")]),
        Some(PathBuf::from("/c"))
    );
    assert_eq!(
        cache(&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/old")]),
        Some(PathBuf::from("/old"))
    );
    assert_eq!(cache(&[]), None);
    let msg = Resolver::from_vars(vars(&[]))
        .resolve("org/model")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("HF_HUB_CACHE"), "{msg}");
}

#[test]
fn the_fetched_models_resolve_from_the_default_cache() {
    let Some(model) =
        aneforge_models::testing::model_or_skip("HuggingFaceTB/SmolLM2-135M-Instruct")
    else {
        return;
    };
    let gguf = model.gguf_file().unwrap();
    let name = gguf.file_name().unwrap().to_str().unwrap();
    let direct =
        aneforge_models::resolve(&format!("HuggingFaceTB/SmolLM2-135M-Instruct/{name}")).unwrap();
    assert_eq!(direct.gguf_file().unwrap(), gguf);
}
