//! The one loader: a function of a program directory (`model.mil` + `weights/weight.bin`, parsed
//! as an `aneforge_mil::ProgramDir`) into an engine. `aneforge run`, [`crate::Model`] and the
//! model runtimes all load through [`load_program`]; the e5rt simulator reads program
//! directories the same way (`ProgramDir::load`, ports from `Port::signature`).

use super::{cache, AneEngine, Engine, EngineError, EngineOptions, Executable};
use crate::lower::Artifact;
use aneforge_mil::{self as mil, ProgramDir};

/// BLAKE3 of a program directory's contents (its MIL text and blob files): equal programs hash
/// equal. The CPU plan cache and the ANE program cache are keyed by it.
pub fn content_hash(program: &ProgramDir) -> [u8; 32] {
    let text = mil::print(&program.program);
    let mut h = blake3::Hasher::new();
    h.update(&(text.len() as u64).to_le_bytes());
    h.update(text.as_bytes());
    for (path, blob) in &program.blobs {
        h.update(&(path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update(&(blob.bytes().len() as u64).to_le_bytes());
        h.update(blob.bytes());
    }
    h.finalize().into()
}

fn find<'a>(program: &'a ProgramDir, function: &str) -> Result<&'a mil::Function, EngineError> {
    program
        .program
        .function(function)
        .ok_or_else(|| EngineError::UnknownFunction {
            name: function.to_string(),
            available: program
                .program
                .functions
                .iter()
                .map(|f| f.name.clone())
                .collect(),
        })
}

/// Loads `function` of `program` into `engine`. `key` is the program's [`content_hash`] (or
/// another hash that changes whenever the contents do, such as an artifact's) when the caller has
/// it or will load the program again: the CPU engine then plans it once per process. Without one
/// the CPU plans afresh and the ANE engine hashes the program for its program cache.
pub fn load_program(
    program: &ProgramDir,
    key: Option<[u8; 32]>,
    function: &str,
    engine: Engine,
    options: EngineOptions,
) -> Result<Box<dyn Executable>, EngineError> {
    let f = find(program, function)?;
    match engine {
        Engine::Cpu => {
            let plan = match key {
                Some(key) => cache::cpu_plan(program, key, function, options)?,
                None => cache::compile(program, function, options)?,
            };
            Ok(Box::new(plan.instantiate()))
        }
        Engine::Ane => {
            // the ANE runtime retains function `main`: a one-function view over the same blobs,
            // keyed by the program and the function
            let ane = AneEngine::global()?;
            let key = key.unwrap_or_else(|| content_hash(program));
            if program.program.functions.len() == 1 && function == "main" {
                return Ok(Box::new(ane.load_keyed(program, key)?));
            }
            let mut main = f.clone();
            main.name = "main".into();
            let single = ProgramDir {
                program: mil::Program {
                    version: program.program.version.clone(),
                    attributes: program.program.attributes.clone(),
                    functions: vec![main],
                },
                blobs: program.blobs.clone(),
            };
            let mut h = blake3::Hasher::new();
            h.update(&key);
            h.update(function.as_bytes());
            Ok(Box::new(ane.load_keyed(&single, h.finalize().into())?))
        }
    }
}

/// Loads an artifact's default function into the chosen engine.
pub fn load(artifact: &Artifact, engine: Engine) -> Result<Box<dyn Executable>, EngineError> {
    let main = artifact.functions()[0].name.clone();
    load_function(artifact, &main, engine)
}

/// Loads one function of an artifact into the chosen engine.
pub fn load_function(
    artifact: &Artifact,
    function: &str,
    engine: Engine,
) -> Result<Box<dyn Executable>, EngineError> {
    load_function_with(artifact, function, engine, EngineOptions::default())
}

/// [`load_function`] with engine options.
pub fn load_function_with(
    artifact: &Artifact,
    function: &str,
    engine: Engine,
    options: EngineOptions,
) -> Result<Box<dyn Executable>, EngineError> {
    load_program(
        &artifact.function_dir(function)?,
        Some(artifact.content_hash()),
        function,
        engine,
        options,
    )
}
