//! Indexing a documents directory (or one file): each text file whose SHA-256 differs from the
//! index's record is chunked, its chunks' units embedded, and replaced in the store; files gone from the directory
//! are removed. Files are committed one at a time, so an interrupted run keeps its finished files
//! and the next run picks up the rest.

use std::path::{Path, PathBuf};

use aneforge_models::encoders::{EncodeOptions, SentenceEncoder};
use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

use super::chunk::{chunk, ChunkOptions};
use super::store::Store;

/// File extensions indexed as text.
pub const TEXT_EXTENSIONS: [&str; 5] = ["txt", "md", "markdown", "rst", "text"];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexReport {
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub removed: usize,
    /// Chunks written by this run.
    pub chunks: usize,
}

/// The documents under `root` as `(key, path)`: `root` itself when it is a file (keyed by its
/// file name), else every file with a [`TEXT_EXTENSIONS`] extension below it (keyed by its
/// `/`-separated path relative to `root`), hidden entries skipped, sorted by key.
pub fn documents(root: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let meta = std::fs::metadata(root)
        .with_context(|| format!("{}: cannot read the documents", root.display()))?;
    if meta.is_file() {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| root.display().to_string());
        return Ok(vec![(name, root.to_path_buf())]);
    }
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("{}: cannot list", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("{}: cannot list", dir.display()))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry
                .file_type()
                .with_context(|| format!("{}: cannot stat", path.display()))?;
            if kind.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| TEXT_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
            {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let key = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((key, path));
            }
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "{}: no documents (files ending in .{})",
            root.display(),
            TEXT_EXTENSIONS.join(", .")
        );
    }
    Ok(out)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Brings the index up to date with `root`. `progress` hears each file as it is committed.
pub fn index(
    root: &Path,
    store: &mut Store,
    encoder: &SentenceEncoder,
    opts: &ChunkOptions,
    progress: &mut dyn FnMut(&str, usize),
) -> anyhow::Result<IndexReport> {
    opts.validate().map_err(anyhow::Error::msg)?;
    store.check_chunking(opts)?;
    let docs = documents(root)?;
    let known: std::collections::BTreeMap<String, String> = store.files()?.into_iter().collect();
    let mut report = IndexReport::default();
    for (key, path) in &docs {
        let bytes =
            std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let hash = sha256_hex(&bytes);
        let previous = known.get(key);
        if previous == Some(&hash) {
            report.unchanged += 1;
            continue;
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{}: not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.valid_up_to()
            )
        })?;
        let chunks = chunk(text, opts);
        let texts: Vec<&str> = chunks
            .iter()
            .flat_map(|c| c.units.iter().map(|u| u.text.as_str()))
            .collect();
        let embeddings = if texts.is_empty() {
            None
        } else {
            Some(
                encoder
                    .encode_with(&texts, &EncodeOptions::default(), &mut |_| {})
                    .with_context(|| format!("embedding the units of {}", path.display()))?,
            )
        };
        let rows: Vec<&[f32]> = embeddings.iter().flat_map(|e| e.iter()).collect();
        store.replace_file(key, &hash, &chunks, &rows)?;
        report.chunks += chunks.len();
        if previous.is_some() {
            report.updated += 1;
        } else {
            report.added += 1;
        }
        progress(key, chunks.len());
    }
    for key in known.keys() {
        if !docs.iter().any(|(k, _)| k == key) {
            store.remove_file(key)?;
            report.removed += 1;
        }
    }
    Ok(report)
}
