//! Helpers for tests that need real weights: resolve a model, or skip with a message that says how
//! to fetch it. With `ANEFORGE_REQUIRE_MODELS=1` (CI after fetching) a missing model fails instead.
//!
//! Every model a test asks for must be listed in `tools/test-models.txt`, the list `.ci/run`
//! fetches from, so that a test can never depend on a model that CI does not install.

use crate::resolve::{resolve, ResolvedModel};

/// The repository's list of real models the tests use (`tools/test-models.txt`).
const TEST_MODELS: &str = include_str!("../../../tools/test-models.txt");

/// `(fetch key, hub id)` for every model listed in `tools/test-models.txt`.
pub fn test_models() -> Vec<(&'static str, &'static str)> {
    TEST_MODELS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?, parts.next()?))
        })
        .collect()
}

/// The `ORG/NAME` part of a model spec such as `ORG/NAME@rev/file.gguf`.
fn repo_of(spec: &str) -> String {
    let mut parts = spec.split('/');
    let org = parts.next().unwrap_or_default();
    let name = parts.next().unwrap_or_default();
    let name = name.split('@').next().unwrap_or_default();
    format!("{org}/{name}")
}

/// The model, or `None` after printing why the calling test is skipped.
///
/// # Panics
/// When `spec` names a model that `tools/test-models.txt` does not list (CI would not fetch it),
/// and when the model is missing and `ANEFORGE_REQUIRE_MODELS` is set to a non-empty value other
/// than `0`: a CI run that fetched the models must not skip silently.
pub fn model_or_skip(spec: &str) -> Option<ResolvedModel> {
    let repo = repo_of(spec);
    let listed = test_models();
    assert!(
        listed.iter().any(|(_, id)| *id == repo),
        "test model {repo} is not listed in tools/test-models.txt, so CI would not fetch it: \
         add it there with its scripts/fetch-models.sh key"
    );
    match resolve(spec) {
        Ok(model) => Some(model),
        Err(e) => {
            let required = std::env::var("ANEFORGE_REQUIRE_MODELS")
                .map(|v| !v.is_empty() && v != "0")
                .unwrap_or(false);
            assert!(!required, "ANEFORGE_REQUIRE_MODELS is set but {e}");
            let key = listed
                .iter()
                .find(|(_, id)| *id == repo)
                .map_or("all", |(k, _)| k);
            eprintln!("SKIP (real weights absent; scripts/fetch-models.sh {key}): {e}");
            None
        }
    }
}

/// The shared speech clips (`ANEFORGE_SPEECH_DIR`, else `shared/data/speech` beside the
/// repository), or `None` after printing why the calling test is skipped.
///
/// # Panics
/// When the clips are missing and `ANEFORGE_REQUIRE_MODELS` is set (CI has them).
pub fn speech_dir_or_skip() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("ANEFORGE_SPEECH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/speech")
        });
    if dir.is_dir() {
        return Some(dir);
    }
    let required = std::env::var("ANEFORGE_REQUIRE_MODELS")
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false);
    assert!(
        !required,
        "ANEFORGE_REQUIRE_MODELS is set but the speech clips are not at {} (set ANEFORGE_SPEECH_DIR)",
        dir.display()
    );
    eprintln!(
        "SKIP: speech clips not found at {} (set ANEFORGE_SPEECH_DIR)",
        dir.display()
    );
    None
}

/// Copies the model directory `src` (its files at the top level) into `dst`, with every element
/// of safetensors tensor `tensor` in `model.safetensors` multiplied by `factor`: a model whose
/// activations leave a number format's range, for tests of what catches that.
pub fn copy_with_scaled_tensor(
    src: &std::path::Path,
    dst: &std::path::Path,
    tensor: &str,
    factor: f32,
) -> Result<(), String> {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", src.display());
    for entry in std::fs::read_dir(src).map_err(|e| err(&e))? {
        let path = entry.map_err(|e| err(&e))?.path();
        if path.is_file() && path.file_name().is_some_and(|n| n != "model.safetensors") {
            std::fs::copy(&path, dst.join(path.file_name().unwrap_or_default()))
                .map_err(|e| err(&e))?;
        }
    }
    let bytes = std::fs::read(src.join("model.safetensors")).map_err(|e| err(&e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| err(&e))?;
    let mut data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut found = false;
    for (name, view) in st.tensors() {
        let mut raw = view.data().to_vec();
        if name == tensor {
            if view.dtype() != Dtype::F32 {
                return Err(format!("{tensor} is {:?}, not F32", view.dtype()));
            }
            for c in raw.chunks_exact_mut(4) {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * factor;
                c.copy_from_slice(&v.to_le_bytes());
            }
            found = true;
        }
        data.push((name, view.dtype(), view.shape().to_vec(), raw));
    }
    if !found {
        return Err(format!("{} has no tensor {tensor}", src.display()));
    }
    let views = data
        .iter()
        .map(|(n, t, s, d)| Ok((n.clone(), TensorView::new(*t, s.clone(), d)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| err(&e))?;
    safetensors::serialize_to_file(views, None, &dst.join("model.safetensors")).map_err(|e| err(&e))
}

/// `let model = require_model!("sentence-transformers/all-MiniLM-L6-v2");` — returns from the
/// enclosing test (skipping it, with a message) when the model is not available locally.
#[macro_export]
macro_rules! require_model {
    ($spec:expr) => {
        match $crate::testing::model_or_skip($spec) {
            Some(model) => model,
            None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_and_names_repos() {
        let models = test_models();
        assert!(models.len() >= 2, "{models:?}");
        for (key, id) in models {
            assert!(!key.is_empty() && id.contains('/'), "{key} {id}");
        }
        assert_eq!(repo_of("org/name@abc/file.gguf"), "org/name");
        assert_eq!(repo_of("org/name"), "org/name");
    }
}
