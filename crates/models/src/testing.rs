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
