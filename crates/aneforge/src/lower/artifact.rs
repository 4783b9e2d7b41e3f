//! The compiled artifact: a MIL program, its weights blob, its text, its content hash, and the
//! port list an engine binds.

use super::Target;
use crate::graph::{DType, HostArray};
use aneforge_mil as mil;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub(crate) fn blob_store(
    weights: &Arc<Vec<u8>>,
) -> Result<HashMap<String, mil::BlobFile>, mil::BlobError> {
    let file = mil::BlobFile::parse(super::BLOB_PATH, weights.clone())?;
    Ok([(super::BLOB_PATH.to_string(), file)].into_iter().collect())
}

#[derive(Clone, Debug, PartialEq)]
pub enum PortKind {
    /// Fed by the caller.
    Input,
    /// A parameter compiled as an input, loaded with its initial value when instantiated while
    /// the artifact holds that value; `None` once released
    /// ([`Artifact::release_parameter_values`]), when an instance must be fed it.
    Parameter(Option<HostArray>),
    Output,
}

/// One function input or output, with both its graph dtype and the MIL dtype that stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct PortSpec {
    pub name: String,
    pub dtype: DType,
    pub mil_dtype: mil::DType,
    pub shape: Vec<usize>,
    pub kind: PortKind,
}

impl PortSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The ports of one function of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionPorts {
    pub name: String,
    pub inputs: Vec<PortSpec>,
    pub outputs: Vec<PortSpec>,
    /// Graph outputs the program returns in tiles (vocabulary heads wider than an ANE family's
    /// dimension cap): the host concatenates the tile ports along the last axis.
    pub tiled: Vec<TiledOutput>,
}

/// A graph output returned as output ports `parts`, concatenated in order along the last axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TiledOutput {
    pub name: String,
    /// The assembled shape.
    pub shape: Vec<usize>,
    pub parts: Vec<String>,
}

#[derive(Debug)]
pub struct Artifact {
    program: mil::Program,
    weights: Arc<Vec<u8>>,
    /// `model.mil`, printed when first asked for (the runtimes work from `program`).
    text: OnceLock<String>,
    hash: [u8; 32],
    target: Target,
    /// At least one; the first is the default function.
    functions: Vec<FunctionPorts>,
}

impl Artifact {
    pub(crate) fn new(
        program: mil::Program,
        weights: Arc<Vec<u8>>,
        target: Target,
        functions: Vec<FunctionPorts>,
    ) -> Artifact {
        let digest = blake3::hash(weights.as_slice()).into();
        Artifact::with_digest(program, weights, digest, target, functions)
    }

    /// An artifact whose blob is identified by `digest` (with the program text, which places
    /// every entry): a hash of its bytes, or of its entries' content keys in blob order.
    pub(crate) fn with_digest(
        program: mil::Program,
        weights: Arc<Vec<u8>>,
        digest: [u8; 32],
        target: Target,
        functions: Vec<FunctionPorts>,
    ) -> Artifact {
        let text = mil::print(&program);
        let mut h = blake3::Hasher::new();
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
        h.update(&digest);
        Artifact {
            program,
            weights,
            text: OnceLock::new(),
            hash: h.finalize().into(),
            target,
            functions,
        }
    }

    pub fn program(&self) -> &mil::Program {
        &self.program
    }

    /// `model.mil` as text.
    pub fn mil_text(&self) -> &str {
        self.text.get_or_init(|| mil::print(&self.program))
    }

    /// `weights/weight.bin` bytes.
    pub fn weights(&self) -> &Arc<Vec<u8>> {
        &self.weights
    }

    /// BLAKE3 of the MIL text and the weights: equal programs hash equal.
    pub fn content_hash(&self) -> [u8; 32] {
        self.hash
    }

    pub fn content_hash_hex(&self) -> String {
        self.hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Bytes of the parameters' initial values the ports hold in memory (the graph the artifact
    /// was compiled from may share them).
    pub fn parameter_value_bytes(&self) -> usize {
        self.functions
            .iter()
            .flat_map(|f| &f.inputs)
            .filter_map(|p| match &p.kind {
                PortKind::Parameter(Some(init)) => Some(init.data().held_bytes()),
                _ => None,
            })
            .sum()
    }

    /// Drops the ports' initial values of the parameters (an engine instance that bound them
    /// holds its own copy); a model loaded from the artifact afterwards must be fed them.
    pub(crate) fn release_parameter_values(&mut self) {
        for p in self.functions.iter_mut().flat_map(|f| &mut f.inputs) {
            if let PortKind::Parameter(init) = &mut p.kind {
                *init = None;
            }
        }
    }

    /// The default (first) function's inputs.
    pub fn inputs(&self) -> &[PortSpec] {
        &self.functions[0].inputs
    }

    /// The default (first) function's outputs.
    pub fn outputs(&self) -> &[PortSpec] {
        &self.functions[0].outputs
    }

    /// Every function, the default one first.
    pub fn functions(&self) -> &[FunctionPorts] {
        &self.functions
    }

    pub fn function(&self, name: &str) -> Option<&FunctionPorts> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The parsed blob (sharing the weight bytes), keyed by the BLOBFILE path the program uses.
    pub fn blob_store(&self) -> Result<HashMap<String, mil::BlobFile>, mil::BlobError> {
        blob_store(&self.weights)
    }

    /// Writes the program directory (`model.mil`, `weights/weight.bin`), validated, replacing
    /// `dir` atomically.
    pub fn save(&self, dir: &Path) -> Result<(), mil::ProgramDirError> {
        self.program_dir()?.save(dir)
    }

    /// The program with its blob file (sharing the weight bytes), as a program directory.
    pub fn program_dir(&self) -> Result<mil::ProgramDir, mil::ProgramDirError> {
        self.dir_of(self.program.clone())
    }

    /// A program directory holding function `name` alone (the others are not copied), or the
    /// whole program when it has no such function.
    pub fn function_dir(&self, name: &str) -> Result<mil::ProgramDir, mil::ProgramDirError> {
        let program = &self.program;
        let Some(function) = program.function(name) else {
            return self.program_dir();
        };
        self.dir_of(mil::Program {
            version: program.version.clone(),
            attributes: program.attributes.clone(),
            functions: vec![function.clone()],
        })
    }

    fn dir_of(&self, program: mil::Program) -> Result<mil::ProgramDir, mil::ProgramDirError> {
        let file = mil::BlobFile::parse(super::BLOB_PATH, self.weights.clone())?;
        Ok(mil::ProgramDir {
            program,
            blobs: [(super::BLOB_PATH.to_string(), file)].into_iter().collect(),
        })
    }

    /// Writes the program as a Core ML `.mlpackage` directory.
    pub fn export_mlpackage(
        &self,
        dir: &Path,
        options: &mil::mlpackage::ExportOptions,
    ) -> Result<(), mil::mlpackage::ExportError> {
        let blob = mil::BlobFile::parse(super::BLOB_PATH, self.weights.clone())?;
        mil::mlpackage::export(&self.program, &[(super::BLOB_PATH, &blob)], dir, options)
    }
}
