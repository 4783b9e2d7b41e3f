//! The ANE engine: MIL program directories compiled and run by Apple's e5rt runtime (the Espresso
//! framework), bound at run time. On Linux the same code runs against `e5rt-sim` through
//! `ANEFORGE_E5RT_LIB`.
//!
//! Process-level limits of the runtime are handled here rather than hit:
//! - about 128 loaded programs per process: at most `max_loaded_programs` are loaded at once; the
//!   least recently used one is released (with a warning) and recompiled when next executed. Its
//!   port buffers — and so any resident state — are kept.
//! - one dispatch in flight: every `execute_sync` holds a process-wide lock.
//! - compiled programs are valid only in the compiling process: bundles go to a per-process
//!   directory; only program directories (MIL + weights) are cached on disk.
//! - compile failures back off: a program whose compile failed is not recompiled until a delay
//!   that doubles with every failure has passed.

use super::ane_ffi::{BufferMemory, Handle, Runtime, DEVICE_ANE};
use super::ane_layout::PortLayout;
use super::{
    codec, find_port, BufferMut, BufferRef, Direction, EngineError, Executable, HostSlice,
    HostTensor, Port, PortError,
};
use aneforge_mil::ProgramDir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Environment variable naming the e5rt library to load instead of the system framework.
pub const LIBRARY_ENV: &str = "ANEFORGE_E5RT_LIB";
/// The system framework that exports the e5rt C API on macOS.
pub const SYSTEM_LIBRARY: &str = "/System/Library/PrivateFrameworks/Espresso.framework/Espresso";
/// Environment variable naming the directory that caches program directories.
pub const CACHE_ENV: &str = "ANEFORGE_CACHE";

const UNAVAILABLE: &str = "the ANE engine needs macOS on Apple Silicon, or ANEFORGE_E5RT_LIB \
                           pointing at an e5rt implementation (such as this repo's simulator)";

#[derive(Clone, Debug, thiserror::Error)]
pub enum AneError {
    #[error("{UNAVAILABLE}{detail}")]
    Unavailable { detail: String },
    #[error("the process-wide ANE engine is already open on {}", library.display())]
    GlobalInUse { library: PathBuf },
    #[error("cannot load the e5rt library {}: {reason}", path.display())]
    Library { path: PathBuf, reason: String },
    #[error("{} does not export {symbol} (looked up with and without a leading underscore)", path.display())]
    MissingSymbol { path: PathBuf, symbol: &'static str },
    #[error(
        "{call} failed with error code {code}{}{}",
        paren(context),
        colon(message)
    )]
    Call {
        call: &'static str,
        code: i64,
        context: String,
        message: String,
    },
    #[error("{call} reported success but returned a null object{}", paren(context))]
    NullOut { call: &'static str, context: String },
    #[error("{what} {value:?} contains a NUL byte")]
    InvalidString { what: String, value: String },
    #[error("port `{port}`: unusable layout from the runtime: {message}")]
    BadLayout { port: String, message: String },
    #[error("{}: {message}", path.display())]
    Program { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(
        "{}: compiling failed {failures} time(s); not retrying for another {retry_in_ms} ms \
         (last error: {last_error})",
        path.display()
    )]
    CompileBackoff {
        path: PathBuf,
        failures: u32,
        retry_in_ms: u128,
        last_error: String,
    },
}

fn paren(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(" ({s})")
    }
}

fn colon(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

/// Where the e5rt library comes from: `ANEFORGE_E5RT_LIB` when set, the system framework on macOS,
/// and nothing elsewhere.
pub fn default_library_path() -> Result<PathBuf, AneError> {
    library_path(std::env::var_os(LIBRARY_ENV))
}

/// [`default_library_path`] for a given value of `ANEFORGE_E5RT_LIB`.
pub fn library_path(env_value: Option<std::ffi::OsString>) -> Result<PathBuf, AneError> {
    if let Some(path) = env_value.filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    if cfg!(target_os = "macos") {
        return Ok(PathBuf::from(SYSTEM_LIBRARY));
    }
    Err(AneError::Unavailable {
        detail: format!(" ({LIBRARY_ENV} is not set and this is not macOS)"),
    })
}

/// The program-directory cache: `ANEFORGE_CACHE`, else `$XDG_CACHE_HOME/aneforge`, else
/// `$HOME/.cache/aneforge`, else the temp directory.
pub fn default_cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env(CACHE_ENV)
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("aneforge")))
        .or_else(|| env("HOME").map(|d| d.join(".cache").join("aneforge")))
        .unwrap_or_else(|| std::env::temp_dir().join("aneforge-cache"))
}

/// How an [`AneEngine`] is set up.
#[derive(Clone, Debug)]
pub struct AneOptions {
    /// The e5rt library; `None` uses [`default_library_path`].
    pub library: Option<PathBuf>,
    /// Programs loaded in the runtime at once; the least recently used is released beyond this.
    /// Kept under the runtime's ~128 per process so other users of the runtime fit too.
    pub max_loaded_programs: usize,
    /// Where the runtime writes compiled bundles; `None` makes a per-process temp directory.
    pub bundle_dir: Option<PathBuf>,
    /// Where [`AneEngine::load`] caches program directories; `None` uses [`default_cache_dir`].
    pub program_cache: Option<PathBuf>,
    /// Delay after a first compile failure before the same program is compiled again; doubles
    /// with each further failure up to [`AneOptions::max_compile_backoff`].
    pub compile_backoff: Duration,
    pub max_compile_backoff: Duration,
}

impl Default for AneOptions {
    fn default() -> Self {
        AneOptions {
            library: None,
            max_loaded_programs: 120,
            bundle_dir: None,
            program_cache: None,
            compile_backoff: Duration::from_secs(1),
            max_compile_backoff: Duration::from_secs(60),
        }
    }
}

/// Counters describing what an engine has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AneStats {
    /// Programs currently loaded in the runtime.
    pub loaded: usize,
    /// Calls to `e5rt_e5_compiler_compile`, successful or not.
    pub compiles: u64,
    /// Programs released to stay under the loaded-program limit.
    pub evictions: u64,
}

/// One execution stream's worth of runtime objects for a loaded program. Dropping it releases
/// them in reverse order of creation.
struct Loaded {
    library: Option<Handle>,
    function: Option<Handle>,
    op_options: Option<Handle>,
    operation: Option<Handle>,
    ports: Vec<Handle>,
    event: Option<Handle>,
    stream: Option<Handle>,
    encoded: bool,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        drop(self.stream.take());
        drop(self.event.take());
        while let Some(port) = self.ports.pop() {
            drop(port);
        }
        drop(self.operation.take());
        drop(self.op_options.take());
        drop(self.function.take());
        drop(self.library.take());
    }
}

struct Slot {
    label: String,
    loaded: Option<Loaded>,
    last_used: u64,
}

struct CompileFailure {
    failures: u32,
    retry_at: Instant,
    message: String,
}

#[derive(Default)]
struct EngineState {
    slots: HashMap<u64, Slot>,
    next_id: u64,
    clock: u64,
    stats: AneStats,
    failures: HashMap<[u8; 32], CompileFailure>,
}

static GLOBAL: OnceLock<Result<Arc<AneEngine>, AneError>> = OnceLock::new();

/// The runtime accepts one dispatch at a time per process, whichever engine issues it.
static DISPATCH: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A loaded e5rt runtime and the programs it runs.
pub struct AneEngine {
    runtime: Arc<Runtime>,
    options: AneOptions,
    bundle_dir: PathBuf,
    owns_bundle_dir: bool,
    state: Mutex<EngineState>,
}

impl std::fmt::Debug for AneEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AneEngine")
            .field("library", &self.runtime.path())
            .field("bundle_dir", &self.bundle_dir)
            .finish()
    }
}

impl Drop for AneEngine {
    fn drop(&mut self) {
        if self.owns_bundle_dir {
            let _ = std::fs::remove_dir_all(&self.bundle_dir);
        }
    }
}

fn io_err(path: &Path, e: std::io::Error) -> AneError {
    AneError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn path_str(path: &Path) -> Result<&str, AneError> {
    path.to_str().ok_or_else(|| AneError::Io {
        path: path.to_path_buf(),
        message: "path is not valid UTF-8, which the e5rt C API needs".to_string(),
    })
}

/// Whether no process with this id exists (the process-wide engine is a static, never dropped,
/// so its directory outlives the process that made it).
#[cfg(unix)]
fn process_gone(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn process_gone(_pid: u32) -> bool {
    false
}

/// Removes per-process bundle directories (`aneforge-e5rt-PID-NONCE`) whose process has ended,
/// and any older than a day (a reused process id must not keep one forever).
fn sweep_stale_bundles(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let day = Duration::from_secs(24 * 3600);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("aneforge-e5rt-")) else {
            continue;
        };
        let owner_gone = rest
            .split('-')
            .next()
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| pid != std::process::id() && process_gone(pid));
        let stale = owner_gone
            || entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
        if stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl AneEngine {
    /// Loads the e5rt library and prepares the bundle directory.
    pub fn open(options: AneOptions) -> Result<Arc<AneEngine>, AneError> {
        let named = options.library.clone().or_else(|| {
            std::env::var_os(LIBRARY_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        });
        let path = match &named {
            Some(p) => p.clone(),
            None => default_library_path()?,
        };
        let runtime = Runtime::load(&path).map_err(|e| match e {
            // the system framework is missing or unusable: this is not an Apple Silicon Mac
            AneError::Library { path, reason } if named.is_none() => AneError::Unavailable {
                detail: format!(" (loading {}: {reason})", path.display()),
            },
            other => other,
        })?;
        let (bundle_dir, owns_bundle_dir) = match &options.bundle_dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let parent = std::env::temp_dir();
                sweep_stale_bundles(&parent);
                let nonce = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let dir = parent.join(format!("aneforge-e5rt-{}-{nonce}", std::process::id()));
                (dir, true)
            }
        };
        std::fs::create_dir_all(&bundle_dir).map_err(|e| io_err(&bundle_dir, e))?;
        Ok(Arc::new(AneEngine {
            runtime,
            options: AneOptions {
                max_loaded_programs: options.max_loaded_programs.max(1),
                ..options
            },
            bundle_dir,
            owns_bundle_dir,
            state: Mutex::new(EngineState::default()),
        }))
    }

    /// The process-wide engine (what [`crate::Engine::Ane`] runs on): opened on first use with
    /// [`AneOptions::default`] (the library from [`default_library_path`]) unless
    /// [`AneEngine::install_global`] opened it first.
    pub fn global() -> Result<Arc<AneEngine>, AneError> {
        GLOBAL
            .get_or_init(|| AneEngine::open(AneOptions::default()))
            .clone()
    }

    /// Opens the process-wide engine with `options` — for a process (such as a test binary) that
    /// must run [`crate::Engine::Ane`] on a particular e5rt library. If it is already open on the
    /// same library, that engine is returned; on another library (or failed), this is an error.
    pub fn install_global(options: AneOptions) -> Result<Arc<AneEngine>, AneError> {
        let wanted = options.library.clone();
        let mut opened_here = false;
        let global = GLOBAL.get_or_init(|| {
            opened_here = true;
            AneEngine::open(options)
        });
        match global {
            Ok(engine)
                if opened_here || wanted.as_deref().is_none_or(|w| w == engine.library_path()) =>
            {
                Ok(Arc::clone(engine))
            }
            Ok(engine) => Err(AneError::GlobalInUse {
                library: engine.library_path().to_path_buf(),
            }),
            Err(e) => Err(e.clone()),
        }
    }

    pub fn library_path(&self) -> &Path {
        self.runtime.path()
    }

    pub fn stats(&self) -> AneStats {
        lock(&self.state).stats
    }

    /// Saves `program` in the program cache, in a directory named by its content hash (kept
    /// across processes; compiled bundles are not), then loads it.
    pub fn load(self: &Arc<Self>, program: &ProgramDir) -> Result<AneProgram, AneError> {
        self.load_keyed(program, super::content_hash(program))
    }

    /// [`AneEngine::load`] for a program whose content hash `key` the caller already has (such as
    /// an artifact's).
    pub fn load_keyed(
        self: &Arc<Self>,
        program: &ProgramDir,
        key: [u8; 32],
    ) -> Result<AneProgram, AneError> {
        let root = self
            .options
            .program_cache
            .clone()
            .unwrap_or_else(default_cache_dir)
            .join("programs");
        let dir = root.join(hex(&key));
        if !dir.join("model.mil").is_file() {
            program.save(&dir).map_err(|e| AneError::Io {
                path: dir.clone(),
                message: e.to_string(),
            })?;
        }
        self.load_dir(&dir)
    }

    /// Compiles and loads a program directory (`model.mil` + `weights/weight.bin`) and binds a
    /// buffer to every port of its function `main`.
    pub fn load_dir(self: &Arc<Self>, dir: &Path) -> Result<AneProgram, AneError> {
        let mil_path = dir.join("model.mil");
        let text = std::fs::read_to_string(&mil_path).map_err(|e| io_err(&mil_path, e))?;
        let key = program_key(dir, &text);
        let (inputs, outputs) = main_ports(&mil_path, &text)?;
        let mil_path_str = path_str(&mil_path)?.to_string();
        let bindings = inputs
            .iter()
            .chain(&outputs)
            .map(|port| Binding {
                layout: PortLayout::dense(&port.shape, port.elem_bytes().unwrap_or(1)),
                buffer: usize::MAX,
                shared: false,
            })
            .collect();
        let mut program = AneProgram {
            engine: Arc::clone(self),
            id: 0,
            dir: dir.to_path_buf(),
            mil_path: mil_path_str,
            key,
            inputs,
            outputs,
            bindings,
            buffers: Vec::new(),
            executed: false,
        };
        let mut state = lock(&self.state);
        state.next_id += 1;
        program.id = state.next_id;
        let loaded = match self.load_program(&mut state, &mut program) {
            Ok(loaded) => loaded,
            Err(e) => {
                // dropping the program takes the state lock
                drop(state);
                return Err(e);
            }
        };
        state.clock += 1;
        let last_used = state.clock;
        state.stats.loaded += 1;
        state.slots.insert(
            program.id,
            Slot {
                label: program.dir.display().to_string(),
                loaded: Some(loaded),
                last_used,
            },
        );
        Ok(program)
    }

    /// Releases the least recently used loaded program other than `keep`.
    fn evict_one(&self, state: &mut EngineState, keep: u64) -> bool {
        let victim = state
            .slots
            .iter()
            .filter(|(&id, slot)| id != keep && slot.loaded.is_some())
            .min_by_key(|(_, slot)| slot.last_used)
            .map(|(&id, _)| id);
        let Some(id) = victim else {
            return false;
        };
        if let Some(slot) = state.slots.get_mut(&id) {
            slot.loaded = None;
            log::warn!(
                "ANE engine: {} programs loaded (limit {}); released the least recently used, {}; \
                 it is recompiled when next executed",
                state.stats.loaded,
                self.options.max_loaded_programs,
                slot.label
            );
        }
        state.stats.loaded -= 1;
        state.stats.evictions += 1;
        true
    }

    /// Compiles `program` and binds its ports; allocates its buffers on the first load.
    fn load_program(
        &self,
        state: &mut EngineState,
        program: &mut AneProgram,
    ) -> Result<Loaded, AneError> {
        if let Some(failure) = state.failures.get(&program.key) {
            let now = Instant::now();
            if now < failure.retry_at {
                return Err(AneError::CompileBackoff {
                    path: program.dir.clone(),
                    failures: failure.failures,
                    retry_in_ms: (failure.retry_at - now).as_millis().max(1),
                    last_error: failure.message.clone(),
                });
            }
        }
        while state.stats.loaded >= self.options.max_loaded_programs {
            if !self.evict_one(state, program.id) {
                break;
            }
        }
        state.stats.compiles += 1;
        let library = match self.compile(&program.mil_path) {
            Ok(library) => {
                state.failures.remove(&program.key);
                library
            }
            Err(e) => {
                let failures = state.failures.get(&program.key).map_or(0, |f| f.failures) + 1;
                let delay = self
                    .options
                    .compile_backoff
                    .saturating_mul(1u32 << (failures - 1).min(16))
                    .min(self.options.max_compile_backoff);
                state.failures.insert(
                    program.key,
                    CompileFailure {
                        failures,
                        retry_at: Instant::now() + delay,
                        message: e.to_string(),
                    },
                );
                return Err(e);
            }
        };
        let rt = &self.runtime;
        let mut loaded = Loaded {
            library: Some(library),
            function: None,
            op_options: None,
            operation: None,
            ports: Vec::with_capacity(program.bindings.len()),
            event: None,
            stream: None,
            encoded: false,
        };
        let function = loaded
            .function
            .insert(rt.retain_function(loaded.library.as_ref().expect("set above"), "main")?);
        let op_options = loaded.op_options.insert(rt.op_options(function, "main")?);
        let operation = &*loaded.operation.insert(rt.operation(op_options)?);
        let first_load = program.buffers.is_empty();
        for i in 0..program.bindings.len() {
            let (name, direction) = (program.port(i).name.clone(), program.direction(i));
            let port = rt.retain_port(operation, direction, &name)?;
            let binding = &program.bindings[i];
            let layout = match rt.port_layout(&port, &name)? {
                Some(reported) => PortLayout::from_reported(
                    &name,
                    &program.port(i).shape,
                    binding.layout.elem,
                    &reported,
                )?,
                None => binding.layout.clone(),
            };
            if first_load {
                let buffer = rt.buffer(layout.buffer_bytes())?;
                program.bindings[i].layout = layout;
                program.bindings[i].buffer = i;
                program.buffers.push(Some(buffer));
            } else if layout != binding.layout {
                return Err(AneError::BadLayout {
                    port: name,
                    message: format!(
                        "after recompiling, the runtime reports {layout:?}, earlier {:?}",
                        binding.layout
                    ),
                });
            }
            let buffer = program.bound_buffer(i)?;
            rt.bind(&port, buffer, &name)?;
            loaded.ports.push(port);
        }
        let event = loaded
            .event
            .insert(rt.event(&format!("aneforge.program{}", program.id))?);
        rt.bind_completion_event(operation, event)?;
        loaded.stream = Some(rt.stream()?);
        Ok(loaded)
    }

    /// Config → compiler → options (ANE device mask, forced recompilation, graph segmenter) →
    /// compile. The compile-time objects are released (in reverse) once the library exists.
    fn compile(&self, mil_path: &str) -> Result<Handle, AneError> {
        let rt = &self.runtime;
        let config = rt.compiler_config(path_str(&self.bundle_dir)?)?;
        let compiler = rt.compiler(&config)?;
        let options = rt.compiler_options(DEVICE_ANE, true, "graph")?;
        let library = rt.compile(&compiler, mil_path, &options);
        drop(options);
        drop(compiler);
        drop(config);
        library
    }

    fn execute(&self, program: &mut AneProgram) -> Result<(), AneError> {
        let mut state = lock(&self.state);
        let needs_load = state
            .slots
            .get(&program.id)
            .is_none_or(|s| s.loaded.is_none());
        if needs_load {
            let loaded = self.load_program(&mut state, program)?;
            state.stats.loaded += 1;
            let slot = state.slots.entry(program.id).or_insert_with(|| Slot {
                label: program.dir.display().to_string(),
                loaded: None,
                last_used: 0,
            });
            slot.loaded = Some(loaded);
        }
        state.clock += 1;
        let now = state.clock;
        let slot = state
            .slots
            .get_mut(&program.id)
            .expect("the program's slot exists once loaded");
        slot.last_used = now;
        let loaded = slot.loaded.as_mut().expect("loaded above");
        let (Some(stream), Some(operation)) = (&loaded.stream, &loaded.operation) else {
            unreachable!("a loaded program has a stream and an operation");
        };
        if !loaded.encoded {
            self.runtime.encode(stream, operation)?;
            loaded.encoded = true;
        }
        let _dispatch = lock(&DISPATCH);
        program.executed = true;
        self.runtime.execute_sync(stream, &program.mil_path)
    }

    /// Rebinds input port `input` (index) to `buffer` in the loaded operation, if loaded.
    fn rebind(&self, program: &AneProgram, input: usize) -> Result<(), AneError> {
        let state = lock(&self.state);
        if let Some(loaded) = state.slots.get(&program.id).and_then(|s| s.loaded.as_ref()) {
            let port = &loaded.ports[input];
            let name = &program.port(input).name;
            self.runtime
                .bind(port, program.bound_buffer(input)?, name)?;
        }
        Ok(())
    }

    fn unload(&self, id: u64) {
        let mut state = lock(&self.state);
        if let Some(slot) = state.slots.remove(&id) {
            if slot.loaded.is_some() {
                state.stats.loaded -= 1;
            }
        }
    }
}

/// Identifies one version of a program directory (for the compile-failure backoff): the MIL
/// text and the size and modification time of the files under `weights/`.
fn program_key(dir: &Path, text: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&(text.len() as u64).to_le_bytes());
    h.update(text.as_bytes());
    let mut files: Vec<_> = std::fs::read_dir(dir.join("weights"))
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    files.sort_by_key(|e| e.file_name());
    for entry in files {
        h.update(entry.file_name().as_encoded_bytes());
        if let Ok(meta) = entry.metadata() {
            h.update(&meta.len().to_le_bytes());
            if let Ok(age) = meta
                .modified()
                .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default())
            {
                h.update(&age.as_nanos().to_le_bytes());
            }
        }
    }
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inputs and outputs of function `main`, from its signature.
fn main_ports(mil_path: &Path, text: &str) -> Result<(Vec<Port>, Vec<Port>), AneError> {
    let err = |message: String| AneError::Program {
        path: mil_path.to_path_buf(),
        message,
    };
    let program = aneforge_mil::parse(text).map_err(|e| err(e.to_string()))?;
    let main = program.function("main").ok_or_else(|| {
        let names: Vec<&str> = program.functions.iter().map(|f| f.name.as_str()).collect();
        err(format!(
            "no function `main` (functions: {})",
            names.join(", ")
        ))
    })?;
    Port::signature(main).map_err(|e| err(e.to_string()))
}

/// Where a port's data lives: its layout and the buffer bound to it.
struct Binding {
    layout: PortLayout,
    /// Index into `AneProgram::buffers` of the buffer bound to this port.
    buffer: usize,
    shared: bool,
}

/// A program loaded in the ANE engine, run through [`Executable`] over e5rt buffers.
///
/// Port buffers are allocated once and live as long as the program, also across a release and
/// reload forced by the loaded-program limit, so views and resident state stay valid.
pub struct AneProgram {
    engine: Arc<AneEngine>,
    id: u64,
    dir: PathBuf,
    mil_path: String,
    key: [u8; 32],
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    /// One per port: inputs, then outputs, in function order.
    bindings: Vec<Binding>,
    buffers: Vec<Option<BufferMemory>>,
    executed: bool,
}

impl std::fmt::Debug for AneProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AneProgram")
            .field("dir", &self.dir)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl Drop for AneProgram {
    fn drop(&mut self) {
        self.engine.unload(self.id);
        while let Some(buffer) = self.buffers.pop() {
            drop(buffer);
        }
    }
}

impl AneProgram {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn engine(&self) -> &Arc<AneEngine> {
        &self.engine
    }

    /// Port `i` of the bindings' order (inputs, then outputs).
    fn port(&self, i: usize) -> &Port {
        self.inputs
            .get(i)
            .unwrap_or_else(|| &self.outputs[i - self.inputs.len()])
    }

    fn direction(&self, i: usize) -> Direction {
        if i < self.inputs.len() {
            Direction::Input
        } else {
            Direction::Output
        }
    }

    fn input_index(&self, name: &str) -> Result<usize, PortError> {
        find_port(&self.inputs, Direction::Input, name)
    }

    fn output_index(&self, name: &str) -> Result<usize, PortError> {
        find_port(&self.outputs, Direction::Output, name).map(|j| self.inputs.len() + j)
    }

    fn unbound(&self, i: usize) -> PortError {
        PortError::View {
            port: self.port(i).name.clone(),
            message: "no buffer is bound".to_string(),
        }
    }

    fn bound_buffer(&self, i: usize) -> Result<&BufferMemory, PortError> {
        self.buffers
            .get(self.bindings[i].buffer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.unbound(i))
    }

    /// The index of the buffer bound to port `i`, checked to be there.
    fn bound_index(&self, i: usize) -> Result<usize, PortError> {
        let b = self.bindings[i].buffer;
        match self.buffers.get(b) {
            Some(Some(_)) => Ok(b),
            _ => Err(self.unbound(i)),
        }
    }

    fn bound_buffer_mut(&mut self, i: usize) -> Result<&mut BufferMemory, PortError> {
        let b = self.bound_index(i)?;
        Ok(self.buffers[b].as_mut().expect("bound_index checked it"))
    }

    /// Dense views need a dense layout; padded ports go through the codec's copies.
    fn check_dense(&self, i: usize) -> Result<(), PortError> {
        let layout = &self.bindings[i].layout;
        if layout.is_dense() {
            return Ok(());
        }
        Err(PortError::View {
            port: self.port(i).name.clone(),
            message: format!(
                "the runtime lays this port out with padding (byte strides {:?}), so it has no \
                 dense view; use set_input/read_output",
                layout.strides
            ),
        })
    }
}

impl Executable for AneProgram {
    fn inputs(&self) -> &[Port] {
        &self.inputs
    }

    fn outputs(&self) -> &[Port] {
        &self.outputs
    }

    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError> {
        let i = self.input_index(name)?;
        let b = self.bound_index(i)?;
        let (port, layout) = (&self.inputs[i], &self.bindings[i].layout);
        let buffer = self.buffers[b].as_mut().expect("bound").bytes_mut();
        if layout.is_dense() {
            codec::encode(port, data, &mut buffer[..layout.dense_bytes()])?;
        } else {
            let mut dense = vec![0u8; layout.dense_bytes()];
            codec::encode(port, data, &mut dense)?;
            layout.scatter(&dense, buffer);
        }
        Ok(())
    }

    /// Runs the program once; encodes it into its execution stream on the first call (and again
    /// after a release forced by the loaded-program limit).
    fn execute(&mut self) -> Result<(), EngineError> {
        let engine = Arc::clone(&self.engine);
        Ok(engine.execute(self)?)
    }

    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError> {
        let i = self.output_index(name)?;
        let layout = &self.bindings[i].layout;
        let buffer = self.bound_buffer(i)?.bytes();
        if layout.is_dense() {
            return Ok(codec::decode(
                self.port(i),
                &buffer[..layout.dense_bytes()],
            )?);
        }
        let mut dense = vec![0u8; layout.dense_bytes()];
        layout.gather(buffer, &mut dense);
        Ok(codec::decode(self.port(i), &dense)?)
    }

    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError> {
        let i = self.input_index(name)?;
        self.check_dense(i)?;
        let b = self.bound_index(i)?;
        let n = self.bindings[i].layout.dense_bytes();
        let buffer = self.buffers[b].as_mut().expect("bound").bytes_mut();
        Ok(codec::view_mut(&self.inputs[i], &mut buffer[..n])?)
    }

    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError> {
        let i = self.output_index(name)?;
        self.check_dense(i)?;
        let n = self.bindings[i].layout.dense_bytes();
        Ok(codec::view(
            self.port(i),
            &self.bound_buffer(i)?.bytes()[..n],
        )?)
    }

    /// Binds input port `input` to output `output`'s buffer; the input's current contents become
    /// the initial state.
    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError> {
        let err = |message: &str| PortError::Share {
            output: output.to_string(),
            input: input.to_string(),
            message: message.to_string(),
        };
        if self.executed {
            return Err(err("must be called before the first execute").into());
        }
        let o = self.output_index(output)?;
        let i = self.input_index(input)?;
        let (op, ip) = (self.port(o), self.port(i));
        if op.dtype != ip.dtype || op.shape != ip.shape {
            return Err(err(&format!(
                "output is {} {:?} but input is {} {:?}",
                op.dtype, op.shape, ip.dtype, ip.shape
            ))
            .into());
        }
        let (ob, ib) = (&self.bindings[o], &self.bindings[i]);
        if ob.layout != ib.layout {
            return Err(err(&format!(
                "the runtime lays the ports out differently (byte strides {:?} and {:?})",
                ob.layout.strides, ib.layout.strides
            ))
            .into());
        }
        if ib.shared {
            return Err(err("the input is already shared").into());
        }
        if ob.shared {
            return Err(err("the output is already shared").into());
        }
        let (from, to) = (ib.buffer, ob.buffer);
        let current = self.bound_buffer(i)?.bytes().to_vec();
        self.bound_buffer_mut(o)?.bytes_mut()[..current.len()].copy_from_slice(&current);
        self.bindings[i].buffer = to;
        let engine = Arc::clone(&self.engine);
        if let Err(e) = engine.rebind(self, i) {
            self.bindings[i].buffer = from;
            return Err(e.into());
        }
        self.bindings[i].shared = true;
        self.bindings[o].shared = true;
        if let Some(old) = self.buffers.get_mut(from) {
            drop(old.take());
        }
        Ok(())
    }
}
