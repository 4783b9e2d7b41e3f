//! Helpers for tests that need real weights: resolve a model, or skip with a message that says how
//! to fetch it. With `ANEFORGE_REQUIRE_MODELS=1` (CI after fetching) a missing model fails instead.

use crate::resolve::{resolve, ResolvedModel};

/// The model, or `None` after printing why the calling test is skipped.
///
/// # Panics
/// When the model is missing and `ANEFORGE_REQUIRE_MODELS` is set to a non-empty value other
/// than `0`: a CI run that fetched the models must not skip silently.
pub fn model_or_skip(spec: &str) -> Option<ResolvedModel> {
    match resolve(spec) {
        Ok(model) => Some(model),
        Err(e) => {
            let required = std::env::var("ANEFORGE_REQUIRE_MODELS")
                .map(|v| !v.is_empty() && v != "0")
                .unwrap_or(false);
            assert!(!required, "ANEFORGE_REQUIRE_MODELS is set but {e}");
            eprintln!("SKIP (real weights absent): {e}");
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
