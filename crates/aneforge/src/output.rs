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
    write_output_with(path, |w| w.write_all(bytes))
}

/// [`write_output`] of the bytes `write` produces, streamed to the destination (through a buffer)
/// instead of assembled in memory first.
pub fn write_output_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        write(&mut out)?;
        return out.flush();
    }
    let target = resolve_symlinks(path)?;
    match std::fs::metadata(&target) {
        Ok(meta) if !meta.is_file() => {
            let file = std::fs::OpenOptions::new().write(true).open(&target)?;
            let mut out = std::io::BufWriter::new(file);
            write(&mut out)?;
            out.flush()
        }
        _ => replace_atomically(&target, write),
    }
}

/// Writes f32 tensors `(name, shape, values)` to `path` as a safetensors file with `metadata`
/// (with [`write_output_with`], so the values are streamed, not copied): byte for byte what
/// `safetensors::serialize` writes (tensors ordered by name, the header padded with spaces to a
/// multiple of 8 bytes). A shape that does not hold its values is an error naming the tensor.
pub fn write_safetensors_f32(
    path: &Path,
    tensors: &[(&str, &[usize], &[f32])],
    metadata: std::collections::HashMap<String, String>,
) -> std::io::Result<()> {
    let layout: Vec<(&str, &[usize])> = tensors.iter().map(|&(n, s, _)| (n, s)).collect();
    write_safetensors_f32_with(path, &layout, metadata, |i| {
        Ok(std::borrow::Cow::Borrowed(tensors[i].2))
    })
}

/// [`write_safetensors_f32`] of tensors `(name, shape)` whose values `values(i)` gives for
/// tensor `i` when the file reaches it, one tensor at a time.
pub fn write_safetensors_f32_with<'a>(
    path: &Path,
    tensors: &[(&str, &[usize])],
    metadata: std::collections::HashMap<String, String>,
    mut values: impl FnMut(usize) -> std::io::Result<std::borrow::Cow<'a, [f32]>>,
) -> std::io::Result<()> {
    use safetensors::tensor::{Dtype, Metadata, TensorInfo};
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| tensors[a].0.cmp(tensors[b].0));
    let mut infos = Vec::with_capacity(tensors.len());
    let mut offset = 0;
    for &i in &order {
        let (name, shape) = tensors[i];
        let bytes = 4 * shape.iter().product::<usize>();
        infos.push((
            name.to_string(),
            TensorInfo {
                dtype: Dtype::F32,
                shape: shape.to_vec(),
                data_offsets: (offset, offset + bytes),
            },
        ));
        offset += bytes;
    }
    let header = Metadata::new(Some(metadata), infos).map_err(std::io::Error::other)?;
    let mut header = serde_json::to_string(&header)?.into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    write_output_with(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        for &i in &order {
            let (name, shape) = tensors[i];
            let v = values(i)?;
            if v.len() != shape.iter().product::<usize>() {
                return Err(std::io::Error::other(format!(
                    "tensor {name}: shape {shape:?} does not hold its {} values",
                    v.len()
                )));
            }
            if cfg!(target_endian = "little") {
                w.write_all(bytemuck::cast_slice(&v))?;
            } else {
                for chunk in v.chunks(1 << 14) {
                    let le: Vec<u8> = chunk.iter().flat_map(|x| x.to_le_bytes()).collect();
                    w.write_all(&le)?;
                }
            }
        }
        Ok(())
    })
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

fn replace_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    let mut out = std::io::BufWriter::new(tmp.as_file_mut());
    write(&mut out)?;
    out.flush()?;
    drop(out);
    tmp.as_file().sync_all()?;
    // dropping `tmp` on an error removes it
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
