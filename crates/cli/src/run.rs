//! `aneforge run DIR`: runs one function of a program directory (`model.mil` +
//! `weights/weight.bin`, as `aneforge compile` writes them) on an engine, with `.npy` inputs and
//! outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aneforge::engine::{self, codec, EngineKind, EngineOptions, Executable, HostTensor, Port};
use aneforge_mil::ProgramDir;
use anyhow::{bail, Context};

use aneforge_models::npy;

use serde_json::json;

use crate::model_hints::ModelKind;
use crate::output::{print_json, Format};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Program directory (model.mil and weights/weight.bin).
    pub dir: PathBuf,
    /// Function to run (default: main, or the program's only function).
    #[arg(long)]
    pub function: Option<String>,
    /// An input port and the .npy file that feeds it, as NAME=FILE.npy (one per input port).
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Write every output to DIR/<port>.npy (each file written atomically); without it the
    /// outputs are summarised on stdout.
    #[arg(long = "output", short = 'o', alias = "output-dir", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Engine that runs the program: cpu, ane (Apple's e5rt runtime, or the e5rt implementation
    /// ANEFORGE_E5RT_LIB names) or auto. The program's own dtypes fix its target.
    #[arg(long, default_value = "cpu")]
    pub engine: EngineKind,
    #[command(flatten)]
    pub threads: crate::engine_args::ThreadArgs,
    /// json and jsonl list the ports (with --ports) or the outputs: their files with --output,
    /// else every value.
    #[command(flatten)]
    pub format: crate::output::FormatArgs,
    /// List the function's ports and exit.
    #[arg(long)]
    pub ports: bool,
}

/// A program directory's chosen function and its ports, as `run` and `bench program` take them.
pub(crate) struct OpenedProgram {
    pub dir: PathBuf,
    pub program_dir: ProgramDir,
    pub function: String,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
}

impl OpenedProgram {
    /// Reads `dir` (refusing a model id, a plan of segments or a directory without `model.mil`)
    /// and picks `function`.
    pub fn open(dir: &Path, function: Option<&str>) -> anyhow::Result<OpenedProgram> {
        if !dir.join("model.mil").is_file() {
            not_a_program_dir(dir)?;
        }
        if !dir.join("model.mil").is_file() && dir.join("segment_0").is_dir() {
            bail!(
                "{} holds a plan of several programs: run each segment_N directory (plan.txt says \
                 which outputs feed which inputs)",
                dir.display()
            );
        }
        let program_dir = ProgramDir::load(dir)?;
        let function = choose_function(&program_dir, function, dir)?;
        // the ports come from the function's signature; loading checks the rest
        let (inputs, outputs) = Port::signature(
            program_dir
                .program
                .function(&function)
                .expect("choose_function returns a function of the program"),
        )
        .with_context(|| format!("{} ({function})", dir.display()))?;
        Ok(OpenedProgram {
            dir: dir.to_path_buf(),
            program_dir,
            function,
            inputs,
            outputs,
        })
    }

    /// The function loaded on `engine`.
    pub fn load(&self, engine: EngineKind) -> anyhow::Result<Box<dyn Executable>> {
        let engine = engine.select()?;
        engine::load_program(
            &self.program_dir,
            None,
            &self.function,
            engine,
            EngineOptions::default(),
        )
        .with_context(|| format!("loading {} on the {engine:?} engine", self.dir.display()))
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    args.threads.apply()?;
    let opened = OpenedProgram::open(&args.dir, args.function.as_deref())?;
    let OpenedProgram {
        function,
        inputs,
        outputs,
        ..
    } = &opened;
    let function = function.clone();
    let format = args.format.get();
    if args.ports && format != Format::Text {
        let rows: Vec<serde_json::Value> = [("input", &inputs), ("output", &outputs)]
            .into_iter()
            .flat_map(|(role, ports)| ports.iter().map(move |p| (role, p)))
            .map(|(role, p)| {
                json!({"function": function, "role": role, "name": p.name,
                       "dtype": p.dtype.to_string(), "shape": p.shape})
            })
            .collect();
        return print_json(format, &rows);
    }
    if args.ports {
        println!("function {function}");
        inputs.iter().for_each(|p| println!("input {p}"));
        outputs.iter().for_each(|p| println!("output {p}"));
        return Ok(());
    }
    let feeds = read_inputs(&args.inputs, inputs)?;
    let mut loaded = opened.load(args.engine)?;
    for port in inputs {
        let tensor = &feeds[&port.name];
        loaded
            .set_input(&port.name, tensor.as_slice())
            .with_context(|| format!("input {}", port.name))?;
    }
    loaded
        .execute()
        .with_context(|| format!("executing {} ({function})", args.dir.display()))?;
    if let Some(dir) = &args.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut rows = Vec::new();
    for port in outputs {
        let tensor = loaded.read_output(&port.name)?;
        let mut row =
            json!({"name": port.name, "dtype": port.dtype.to_string(), "shape": port.shape});
        match &args.output_dir {
            Some(dir) => {
                if port.name.contains(['/', '\\']) || port.name.starts_with('.') {
                    bail!(
                        "output {:?} cannot name a file in {}",
                        port.name,
                        dir.display()
                    );
                }
                let path = dir.join(format!("{}.npy", port.name));
                npy::write_tensor(&path, &port.shape, &tensor)?;
                row["file"] = json!(path);
                if format == Format::Text {
                    println!("{port} -> {}", path.display());
                }
            }
            None if format == Format::Text => println!("{port}: {}", preview(&tensor)),
            None => row["values"] = values(&tensor),
        }
        rows.push(row);
    }
    if format != Format::Text {
        print_json(format, &rows)?;
    }
    Ok(())
}

/// The error for a `run` argument that names a model instead of a program directory.
fn not_a_program_dir(dir: &Path) -> anyhow::Result<()> {
    let spec = dir.to_string_lossy();
    let command = match crate::model_hints::kind(&spec) {
        Some(ModelKind::Decoder(_)) => format!("aneforge generate -m {spec} PROMPT"),
        Some(ModelKind::Encoder(_)) => format!("aneforge embed -m {spec} TEXT"),
        None if !dir.exists() && looks_like_model_id(&spec) => bail!(
            "{spec}: no such program directory; if it is a model id, `aneforge generate -m \
             {spec}` runs a decoder LLM and `aneforge embed -m {spec}` a text encoder"
        ),
        None => return Ok(()),
    };
    bail!(
        "{spec} is a model, not a program directory (model.mil + weights/weight.bin): run it with \
         `{command}`, or compile a program directory with `aneforge compile`"
    )
}

/// `ORG/NAME` as the Hugging Face hub spells model ids. A two-part relative path reads the same,
/// so this only words a message.
fn looks_like_model_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

fn choose_function(
    program_dir: &ProgramDir,
    wanted: Option<&str>,
    dir: &Path,
) -> anyhow::Result<String> {
    let names: Vec<&str> = program_dir
        .program
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    match wanted {
        Some(name) if names.contains(&name) => Ok(name.to_string()),
        Some(name) => bail!(
            "{} has no function {name:?}; its functions are {names:?}",
            dir.display()
        ),
        None if names.contains(&"main") => Ok("main".into()),
        None => match names.as_slice() {
            [only] => Ok(only.to_string()),
            _ => bail!(
                "{} has several functions and none is main: choose one of {names:?} with \
                 --function",
                dir.display()
            ),
        },
    }
}

/// Parses `NAME=FILE` pairs and reads every file, checking names, shapes and dtypes against the
/// ports.
pub(crate) fn read_inputs(
    specs: &[String],
    ports: &[Port],
) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    let listing = || {
        ports
            .iter()
            .map(Port::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut feeds = BTreeMap::new();
    for spec in specs {
        let Some((name, file)) = spec.split_once('=') else {
            bail!("--input {spec}: expected NAME=FILE.npy");
        };
        let Some(port) = ports.iter().find(|p| p.name == name) else {
            bail!(
                "--input {spec}: the function has no input {name:?}; its inputs are {}",
                listing()
            );
        };
        let path = Path::new(file);
        let (shape, tensor) = read_npy(path)?;
        if shape != port.shape {
            bail!(
                "{}: shape {shape:?}, but input {} is {:?}",
                path.display(),
                port.name,
                port.shape
            );
        }
        if !codec::accepts(port.dtype, &tensor.as_slice()) {
            bail!(
                "{}: {} data, but input {} is {}",
                path.display(),
                tensor.numpy_dtype(),
                port.name,
                port.dtype
            );
        }
        if feeds.insert(name.to_string(), tensor).is_some() {
            bail!("--input {name}=... is given twice");
        }
    }
    let missing: Vec<String> = ports
        .iter()
        .filter(|p| !feeds.contains_key(&p.name))
        .map(Port::to_string)
        .collect();
    if !missing.is_empty() {
        bail!(
            "no --input for {}; every input needs NAME=FILE.npy",
            missing.join(", ")
        );
    }
    Ok(feeds)
}

/// A `.npy` file as an engine input: float64 data (NumPy's default) is converted to float32 with
/// a warning, every other dtype is read as the file stores it.
pub(crate) fn read_npy(path: &Path) -> anyhow::Result<(Vec<usize>, HostTensor)> {
    let bytes = aneforge_models::npy::read_bytes(path)?;
    if let Some((shape, data)) = float64_npy(&bytes) {
        eprintln!(
            "warning: {}: float64 data converted to float32 (save float32 to skip this)",
            path.display()
        );
        return Ok((shape, HostTensor::F32(data)));
    }
    Ok(npy::read_tensor(path)?)
}

/// The shape and values of a little-endian C-order float64 `.npy` file, as float32; `None` for
/// anything else.
fn float64_npy(bytes: &[u8]) -> Option<(Vec<usize>, Vec<f32>)> {
    let (len, start) = match (bytes.get(..6)?, bytes.get(6)?) {
        (b"\x93NUMPY", 1) => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        (b"\x93NUMPY", 2 | 3) => {
            let l = bytes.get(8..12)?;
            (u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize, 12)
        }
        _ => return None,
    };
    let header = std::str::from_utf8(bytes.get(start..start + len)?).ok()?;
    let compact: String = header.chars().filter(|c| !c.is_whitespace()).collect();
    if !compact.contains("'descr':'<f8'") || !compact.contains("'fortran_order':False") {
        return None;
    }
    let dims = compact.split("'shape':(").nth(1)?.split(')').next()?;
    let shape = dims
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().ok())
        .collect::<Option<Vec<_>>>()?;
    let data = &bytes[start + len..];
    if data.len() != shape.iter().product::<usize>() * 8 {
        return None;
    }
    let values = data
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()) as f32)
        .collect();
    Some((shape, values))
}

fn values(tensor: &HostTensor) -> serde_json::Value {
    match tensor {
        HostTensor::F32(v) => json!(v),
        HostTensor::F16(v) => json!(v.iter().map(|x| x.to_f32()).collect::<Vec<_>>()),
        HostTensor::I32(v) => json!(v),
        HostTensor::I8(v) => json!(v),
        HostTensor::U8(v) => json!(v),
        HostTensor::Bool(v) => json!(v),
    }
}

/// The first few values of an output.
fn preview(tensor: &HostTensor) -> String {
    const SHOWN: usize = 8;
    fn list<T: std::fmt::Display>(v: &[T]) -> String {
        let items: Vec<String> = v.iter().take(SHOWN).map(|x| x.to_string()).collect();
        let more = if v.len() > SHOWN {
            format!(", … ({} values)", v.len())
        } else {
            String::new()
        };
        format!("[{}{more}]", items.join(", "))
    }
    match tensor {
        HostTensor::F32(v) => list(v),
        HostTensor::F16(v) => list(v),
        HostTensor::I32(v) => list(v),
        HostTensor::I8(v) => list(v),
        HostTensor::U8(v) => list(v),
        HostTensor::Bool(v) => list(v),
    }
}
