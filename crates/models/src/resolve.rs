//! Model id or path → a local snapshot: an existing directory, a `.gguf` file, or a snapshot in the
//! Hugging Face hub cache (`models--ORG--NAME/snapshots/REV`, found through `refs/main`).

use std::fmt;
use std::path::{Path, PathBuf};

/// Where the fetch script lives; named in every "model not found" error.
pub const FETCH_HINT: &str = "scripts/fetch-models.sh";

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("model '{spec}' not found; looked in:\n{tried}\n{hint}")]
    NotFound {
        spec: String,
        tried: TriedPlaces,
        hint: String,
    },
    #[error("'{spec}' is not a model id (expected ORG/NAME or NAME, optionally @REVISION)")]
    BadSpec { spec: String },
    #[error("{}: {reason}", path.display())]
    NotAModel { path: PathBuf, reason: String },
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} has no file '{file}'", dir.display())]
    MissingFile { dir: PathBuf, file: String },
    #[error("{}: expected exactly one .gguf file, found {}: {}", dir.display(), found.len(), list_paths(found))]
    AmbiguousGguf { dir: PathBuf, found: Vec<PathBuf> },
}

fn list_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "none".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The places a resolution attempt looked at, each with why it did not match.
#[derive(Debug, Clone, Default)]
pub struct TriedPlaces(pub Vec<(PathBuf, String)>);

impl fmt::Display for TriedPlaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (path, why)) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  - {}: {why}", path.display())?;
        }
        Ok(())
    }
}

/// A resolved model: a snapshot directory or a single GGUF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Dir(PathBuf),
    GgufFile(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    pub source: ModelSource,
    /// `ORG/NAME` when found in the hub cache.
    pub repo_id: Option<String>,
    /// The snapshot directory name (commit hash or revision) when found in the hub cache.
    pub revision: Option<String>,
}

impl ResolvedModel {
    /// The directory holding the model's files (the GGUF file's directory for a GGUF source).
    pub fn dir(&self) -> &Path {
        match &self.source {
            ModelSource::Dir(dir) => dir,
            ModelSource::GgufFile(file) => file.parent().unwrap_or(Path::new(".")),
        }
    }

    /// `dir()/name` if that file exists.
    pub fn file(&self, name: &str) -> Option<PathBuf> {
        let path = self.dir().join(name);
        path.is_file().then_some(path)
    }

    pub fn require_file(&self, name: &str) -> Result<PathBuf, ResolveError> {
        self.file(name).ok_or_else(|| ResolveError::MissingFile {
            dir: self.dir().to_path_buf(),
            file: name.to_string(),
        })
    }

    /// The GGUF file: the source itself, or the only `.gguf` file in the snapshot directory.
    pub fn gguf_file(&self) -> Result<PathBuf, ResolveError> {
        match &self.source {
            ModelSource::GgufFile(file) => Ok(file.clone()),
            ModelSource::Dir(dir) => {
                let mut found = gguf_files_in(dir)?;
                if found.len() == 1 {
                    Ok(found.remove(0))
                } else {
                    Err(ResolveError::AmbiguousGguf {
                        dir: dir.clone(),
                        found,
                    })
                }
            }
        }
    }
}

fn gguf_files_in(dir: &Path) -> Result<Vec<PathBuf>, ResolveError> {
    let io = |source| ResolveError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            && path.is_file()
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Which setting chose the hub cache directory (reported in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOrigin {
    HfHubCache,
    HuggingfaceHubCache,
    HfHome,
    XdgCacheHome,
    Home,
    Explicit,
}

impl fmt::Display for CacheOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CacheOrigin::HfHubCache => "$HF_HUB_CACHE",
            CacheOrigin::HuggingfaceHubCache => "$HUGGINGFACE_HUB_CACHE",
            CacheOrigin::HfHome => "$HF_HOME/hub",
            CacheOrigin::XdgCacheHome => "$XDG_CACHE_HOME/huggingface/hub",
            CacheOrigin::Home => "~/.cache/huggingface/hub",
            CacheOrigin::Explicit => "hub cache set by the caller",
        })
    }
}

/// Resolves model ids against the local filesystem and one Hugging Face hub cache directory.
#[derive(Debug, Clone)]
pub struct Resolver {
    hub_cache: Option<(PathBuf, CacheOrigin)>,
}

impl Resolver {
    /// The hub cache the `huggingface_hub` library would use, from the process environment.
    pub fn from_env() -> Self {
        Self::from_vars(|key| {
            std::env::var_os(key)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }

    /// As [`Resolver::from_env`], with the environment given as a lookup function.
    pub fn from_vars(var: impl Fn(&str) -> Option<PathBuf>) -> Self {
        let hub_cache = if let Some(p) = var("HF_HUB_CACHE") {
            Some((p, CacheOrigin::HfHubCache))
        } else if let Some(p) = var("HUGGINGFACE_HUB_CACHE") {
            Some((p, CacheOrigin::HuggingfaceHubCache))
        } else if let Some(p) = var("HF_HOME") {
            Some((p.join("hub"), CacheOrigin::HfHome))
        } else if let Some(p) = var("XDG_CACHE_HOME") {
            Some((p.join("huggingface").join("hub"), CacheOrigin::XdgCacheHome))
        } else {
            var("HOME").map(|home| {
                (
                    home.join(".cache").join("huggingface").join("hub"),
                    CacheOrigin::Home,
                )
            })
        };
        Resolver { hub_cache }
    }

    pub fn with_hub_cache(dir: impl Into<PathBuf>) -> Self {
        Resolver {
            hub_cache: Some((dir.into(), CacheOrigin::Explicit)),
        }
    }

    pub fn hub_cache(&self) -> Option<&Path> {
        self.hub_cache.as_ref().map(|(p, _)| p.as_path())
    }

    /// `spec` is a path (directory or `.gguf` file), a hub id `ORG/NAME[@REVISION]`, or a GGUF file
    /// in a hub snapshot, `ORG/NAME[@REVISION]/FILE.gguf`; an existing path wins over a hub id of
    /// the same spelling.
    pub fn resolve(&self, spec: &str) -> Result<ResolvedModel, ResolveError> {
        let mut tried = TriedPlaces::default();
        let path = Path::new(spec);
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                return Ok(ResolvedModel {
                    source: ModelSource::Dir(path.to_path_buf()),
                    repo_id: None,
                    revision: None,
                })
            }
            Ok(_) if is_gguf_name(path) => {
                return Ok(ResolvedModel {
                    source: ModelSource::GgufFile(path.to_path_buf()),
                    repo_id: None,
                    revision: None,
                })
            }
            Ok(_) => {
                return Err(ResolveError::NotAModel {
                    path: path.to_path_buf(),
                    reason: "is a file but not a .gguf file; pass the model's directory".into(),
                })
            }
            Err(e) => tried
                .0
                .push((path.to_path_buf(), format!("local path: {e}"))),
        }

        if let Some((repo_spec, file)) = hub_spec(spec) {
            let (repo_id, revision) = parse_repo_id(repo_spec)?;
            match &self.hub_cache {
                Some((cache, origin)) => {
                    match find_snapshot(cache, &repo_id, revision.unwrap_or("main")) {
                        Ok((dir, rev)) => {
                            let source = match file {
                                None => ModelSource::Dir(dir),
                                Some(file) if dir.join(file).is_file() => {
                                    ModelSource::GgufFile(dir.join(file))
                                }
                                Some(file) => {
                                    return Err(ResolveError::MissingFile {
                                        dir,
                                        file: file.to_string(),
                                    })
                                }
                            };
                            return Ok(ResolvedModel {
                                source,
                                repo_id: Some(repo_id),
                                revision: Some(rev),
                            });
                        }
                        Err((place, why)) => tried.0.push((place, format!("{why} ({origin})"))),
                    }
                }
                None => tried.0.push((
                    PathBuf::from("<hub cache>"),
                    "no HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME is set".into(),
                )),
            }
        }

        Err(ResolveError::NotFound {
            spec: spec.to_string(),
            tried,
            hint: not_found_hint(spec),
        })
    }
}

/// Resolves with [`Resolver::from_env`].
pub fn resolve(spec: &str) -> Result<ResolvedModel, ResolveError> {
    Resolver::from_env().resolve(spec)
}

/// A hub id (`ORG/NAME[@REV]` or `NAME[@REV]`), optionally followed by `/FILE.gguf`; `None` for
/// anything that reads as a filesystem path.
fn hub_spec(spec: &str) -> Option<(&str, Option<&str>)> {
    if spec.starts_with(['.', '/', '~']) || spec.contains('\\') {
        return None;
    }
    let slashes = spec.matches('/').count();
    match spec.rsplit_once('/') {
        Some((repo, file)) if slashes == 2 && is_gguf_name(Path::new(file)) => {
            Some((repo, Some(file)))
        }
        _ if slashes <= 1 && !is_gguf_name(Path::new(spec)) => Some((spec, None)),
        _ => None,
    }
}

fn is_gguf_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

fn not_found_hint(spec: &str) -> String {
    let hub = if cfg!(feature = "hub") {
        "downloading from the Hugging Face hub is not implemented yet (feature `hub`)"
    } else {
        "downloading from the Hugging Face hub is not compiled in (cargo feature `hub`)"
    };
    let fetch = match fetch_target_for(spec) {
        Some(target) => format!("run `{FETCH_HINT} {target}` to fetch it"),
        None => format!(
            "{FETCH_HINT} fetches the models available here; others must be placed in the hub cache \
             or passed as a directory"
        ),
    };
    format!("{hub}; {fetch}")
}

/// The fetch script's target name for the models it provides.
pub fn fetch_target_for(spec: &str) -> Option<&'static str> {
    let repo = spec.split('@').next().unwrap_or(spec);
    match repo {
        "sentence-transformers/all-MiniLM-L6-v2" => Some("minilm"),
        "sentence-transformers/all-mpnet-base-v2" => Some("mpnet"),
        "HuggingFaceTB/SmolLM2-135M-Instruct" => Some("smollm2"),
        "openai/whisper-tiny.en" => Some("whisper-tiny-en"),
        "openai/whisper-base" => Some("whisper-base"),
        "ml-illustrated/efficientnet-lite0" => Some("efficientnet-lite0"),
        _ => None,
    }
}

fn parse_repo_id(spec: &str) -> Result<(String, Option<&str>), ResolveError> {
    let bad = || ResolveError::BadSpec {
        spec: spec.to_string(),
    };
    let (repo, revision) = match spec.split_once('@') {
        Some((repo, rev)) if !rev.is_empty() && is_safe_component(rev) => (repo, Some(rev)),
        Some(_) => return Err(bad()),
        None => (spec, None),
    };
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.is_empty() || parts.len() > 2 || !parts.iter().all(|p| is_safe_component(p)) {
        return Err(bad());
    }
    Ok((repo.to_string(), revision))
}

fn is_safe_component(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `models--ORG--NAME/refs/REV` → `snapshots/<hash>`, or `snapshots/REV` directly.
fn find_snapshot(
    cache: &Path,
    repo_id: &str,
    revision: &str,
) -> Result<(PathBuf, String), (PathBuf, String)> {
    let repo_dir = cache.join(format!("models--{}", repo_id.replace('/', "--")));
    if !repo_dir.is_dir() {
        return Err((repo_dir, "no such directory in the hub cache".into()));
    }
    let ref_file = repo_dir.join("refs").join(revision);
    let snapshot_name = match std::fs::read_to_string(&ref_file) {
        Ok(text) => {
            let name = text.trim().to_string();
            if !is_safe_component(&name) {
                return Err((ref_file, format!("holds '{name}', not a revision name")));
            }
            name
        }
        Err(_) => revision.to_string(),
    };
    let snapshot = repo_dir.join("snapshots").join(&snapshot_name);
    if snapshot.is_dir() {
        Ok((snapshot, snapshot_name))
    } else if ref_file.is_file() {
        Err((
            snapshot,
            format!("named by {} but missing", ref_file.display()),
        ))
    } else {
        Err((
            repo_dir,
            format!("has neither refs/{revision} nor snapshots/{revision}"),
        ))
    }
}
