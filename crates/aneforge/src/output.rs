//! Writing an output file the user named: regular files (and new paths) are replaced atomically,
//! anything else (`-` for stdout, a FIFO, a character device) is written directly, and a symlink
//! is written through rather than replaced by a file.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path`.
///
/// - `-`: standard output.
/// - a regular file or a path that does not exist yet: a uniquely named temporary file in the
///   same directory, synced, then renamed over `path`, so readers see the old or the new content
///   and an unrelated sibling (`X.tmp`) is never touched; on failure the temporary file is
///   removed.
/// - a symlink: the same, applied to the file it points to (the link stays a link).
/// - anything else (FIFO, character device, socket): opened and written directly.
pub fn write_output(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)?;
        return out.flush();
    }
    let target = resolve_symlinks(path)?;
    match std::fs::metadata(&target) {
        Ok(meta) if !meta.is_file() => {
            let mut file = std::fs::OpenOptions::new().write(true).open(&target)?;
            file.write_all(bytes)?;
            file.flush()
        }
        _ => replace_atomically(&target, bytes),
    }
}

/// `path` with every symlink along its final component followed (the link's target, relative
/// links taken from the link's directory); a missing path is returned as it is.
fn resolve_symlinks(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

fn replace_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    // dropping `tmp` on an error removes it
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
