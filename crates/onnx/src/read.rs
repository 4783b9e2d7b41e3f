//! Reading a `ModelProto` from a file, with the external data of its tensors loaded in place.

use crate::proto::{tensor_proto::DataLocation, GraphProto, ModelProto, TensorProto};
use crate::OnnxError;
use prost::Message;
use std::path::{Component, Path};

/// Decodes the model at `path` and loads every tensor stored in external files (locations are
/// relative to the model's directory, as the ONNX spec defines them).
pub fn read_model(path: &Path) -> Result<ModelProto, OnnxError> {
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut model = decode_model(&bytes).map_err(|message| OnnxError::Decode {
        path: path.to_path_buf(),
        message,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    if let Some(graph) = model.graph.as_mut() {
        load_graph_external(graph, base)?;
    }
    Ok(model)
}

/// Decodes a serialized model; an empty or graph-less message is rejected, since every byte
/// string of zero length is a valid (empty) protobuf.
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, String> {
    let model = ModelProto::decode(bytes).map_err(|e| e.to_string())?;
    if model.graph.is_none() {
        return Err("the message holds no graph".into());
    }
    Ok(model)
}

fn load_graph_external(graph: &mut GraphProto, base: &Path) -> Result<(), OnnxError> {
    for t in &mut graph.initializer {
        load_external(t, base)?;
    }
    for node in &mut graph.node {
        for a in &mut node.attribute {
            if let Some(t) = a.t.as_mut() {
                load_external(t, base)?;
            }
            for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                load_graph_external(g, base)?;
            }
        }
    }
    Ok(())
}

/// Replaces an externally stored tensor's location by its bytes (`raw_data`).
pub(crate) fn load_external(t: &mut TensorProto, base: &Path) -> Result<(), OnnxError> {
    if t.data_location != Some(DataLocation::External as i32) {
        return Ok(());
    }
    let tensor = t.name().to_string();
    let entry = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key() == key)
            .map(|e| e.value().to_string())
    };
    let location = entry("location").unwrap_or_default();
    let err = |message: String| OnnxError::ExternalData {
        tensor: tensor.clone(),
        location: location.clone(),
        message,
    };
    let number = |key: &str| -> Result<Option<u64>, OnnxError> {
        entry(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| err(format!("{key} {v:?} is not a non-negative integer")))
            })
            .transpose()
    };
    if location.is_empty() {
        return Err(err("no location entry".into()));
    }
    let rel = Path::new(&location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(err(
            "the location must be a relative path inside the model's directory".into(),
        ));
    }
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?;
    let file = base.join(rel);
    let bytes = std::fs::read(&file).map_err(|e| err(format!("{}: {e}", file.display())))?;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = match length {
        Some(n) => start.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)),
        None => bytes.len(),
    };
    if start > bytes.len() || end > bytes.len() {
        return Err(err(format!(
            "bytes {start}..{end} lie outside the {}-byte file",
            bytes.len()
        )));
    }
    t.raw_data = Some(bytes[start..end].to_vec());
    t.data_location = Some(DataLocation::Default as i32);
    t.external_data.clear();
    Ok(())
}
