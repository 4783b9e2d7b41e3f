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

/// The decoder families of the random-weight fixtures (`tools/fixtures/llm/tiny_models.py`): one
/// directory each under `tools/fixtures/llm/out/tiny`, used by every tiny-LLM test.
pub const TINY_LLM_FAMILIES: [&str; 14] = [
    "llama",
    "llama3",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gpt2",
    "gemma3",
    "qwen3_moe",
    "mixtral",
    "phi3",
    "gemma2",
    "qwen2_moe",
    "olmoe",
];

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

/// The speech clips with transcripts (`ANEFORGE_SPEECH_DIR`, else the repository's `data/speech`),
/// or `None` after printing why the calling test is skipped.
///
/// # Panics
/// When the clips are missing and `ANEFORGE_REQUIRE_MODELS` is set (CI has them).
pub fn speech_dir_or_skip() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("ANEFORGE_SPEECH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/speech")
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

/// splitmix64, the generator of [`write_reproducible_state_dict`]'s weights.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of element `e` of state_dict entry `t`, by the entry's name and shape.
fn values(seed: u64, t: u64, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
    let base = splitmix64(seed ^ (t << 32));
    let n: usize = shape.iter().product();
    let leaf = name.rsplit('.').next().unwrap_or_default();
    let fan_in: usize = shape.iter().skip(1).product();
    let rule: fn(f64, usize) -> f64 = match leaf {
        "running_mean" => |u, _| 0.1 * u,
        "running_var" => |u, _| 1.0 + 0.25 * u,
        "bias" => |u, _| 0.1 * u,
        "weight" if shape.len() == 1 => |u, _| 1.0 + 0.25 * u,
        "weight" => |u, fan_in| u * (3.0 / fan_in as f64).sqrt(),
        _ => return Err(format!("no rule for {name}")),
    };
    Ok((0..n as u64)
        .map(|e| {
            let h = splitmix64(base ^ e);
            let u = (h >> 11) as f64 * 2f64.powi(-53) * 2.0 - 1.0;
            rule(u, fan_in) as f32
        })
        .collect())
}

/// Writes the state_dict the fixture `doc` (its `seed` and `entries`: name, shape, dtype) of
/// `tools/fixtures/vision/torchvision_random.py` describes to the safetensors file `path`: the
/// same random weights torchvision ran, regenerated.
pub fn write_reproducible_state_dict(
    doc: &serde_json::Value,
    path: &std::path::Path,
) -> Result<(), String> {
    let seed = doc["seed"].as_u64().ok_or("the fixture has no seed")?;
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let entries = doc["entries"]
        .as_array()
        .ok_or("the fixture has no entries")?;
    for (t, e) in entries.iter().enumerate() {
        let name = e["name"]
            .as_str()
            .ok_or("an entry has no name")?
            .to_string();
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .ok_or("an entry has no shape")?
            .iter()
            .map(|d| {
                d.as_u64()
                    .map(|d| d as usize)
                    .ok_or("a dimension is not a number")
            })
            .collect::<Result<_, _>>()?;
        if e["dtype"] == "int64" {
            let n: usize = shape.iter().product();
            tensors.push((name, safetensors::Dtype::I64, shape, vec![0u8; 8 * n]));
        } else {
            let v = values(seed, t as u64, &name, &shape)?;
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            tensors.push((name, safetensors::Dtype::F32, shape, bytes));
        }
    }
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, dt, s, d)| {
            Ok((
                n.clone(),
                safetensors::tensor::TensorView::new(*dt, s.clone(), d)
                    .map_err(|e| format!("{n}: {e}"))?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    safetensors::serialize_to_file(views, None, path)
        .map_err(|e| format!("{}: {e}", path.display()))
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

/// A CTranslate2 `model.bin` (version 6, spec `WhisperSpec`, revision 3) holding `vars` as
/// `(name, dims, dtype code, bytes)` and `aliases` as `(name, target)`: synthetic files for
/// tests and fuzz seeds (layout in `whisper::ct2`).
pub fn ct2_bytes(vars: &[(&str, Vec<u32>, u8, Vec<u8>)], aliases: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    let s = |out: &mut Vec<u8>, v: &str| {
        out.extend_from_slice(&((v.len() + 1) as u16).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    };
    out.extend_from_slice(&6u32.to_le_bytes());
    s(&mut out, "WhisperSpec");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(vars.len() as u32).to_le_bytes());
    for (name, dims, dtype, bytes) in vars {
        s(&mut out, name);
        out.push(dims.len() as u8);
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.push(*dtype);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(&(aliases.len() as u32).to_le_bytes());
    for (a, t) in aliases {
        s(&mut out, a);
        s(&mut out, t);
    }
    out
}

/// A global allocator that counts live heap bytes and their peak, for tests that bound a
/// computation's memory. A test binary installs it with
/// `#[global_allocator] static A: CountingAllocator = CountingAllocator;` and holds one test, so
/// nothing else allocates meanwhile; [`CountingAllocator::measure`] gives the peak above the
/// bytes live when it starts. The CPU engine's large buffers, anonymous mappings rather than
/// heap ([`aneforge::engine::mapped_buffer_bytes`]), count with the heap, sampled whenever the
/// heap grows; mapped file pages are not counted.
pub struct CountingAllocator;

static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl CountingAllocator {
    fn grew(by: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = LIVE.fetch_add(by, Relaxed) + by;
        PEAK.fetch_max(now + aneforge::engine::mapped_buffer_bytes(), Relaxed);
    }

    /// Heap and engine buffer bytes live now.
    fn held() -> usize {
        LIVE.load(std::sync::atomic::Ordering::Relaxed) + aneforge::engine::mapped_buffer_bytes()
    }

    /// Runs `f`; returns its result and the peak of live heap and engine buffer bytes during it,
    /// above those live when it began.
    pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let base = Self::held();
        PEAK.store(base, Relaxed);
        let out = f();
        PEAK.fetch_max(Self::held(), Relaxed);
        (out, PEAK.load(Relaxed).saturating_sub(base))
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are kept.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                Self::grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(
                    layout.size() - new_size,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        p
    }
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
