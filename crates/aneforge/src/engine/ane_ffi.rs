//! The e5rt C API (Apple's Espresso runtime) bound at run time: the symbol table, owned handles
//! that release themselves, and the mapping of `int64` error codes to [`AneError`].
//!
//! Every `unsafe` block of the ANE engine is in this module. The signatures are the ones written
//! down, with their sources, in `docs/ane-runtime.md`; the invariant every block relies on is that
//! the loaded library implements those signatures.

use super::ane::AneError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

type Raw = *mut c_void;
type Code = i64;

/// Compute device mask bit for the Neural Engine (`0x1` CPU/BNNS, `0x2` GPU, `0x4` ANE).
pub(crate) const DEVICE_ANE: u64 = 0x4;
/// `e5rt_buffer_object_alloc` type 0: plain CPU-addressable memory.
const BUFFER_TYPE_CPU: u32 = 0;

macro_rules! symbol_table {
    (
        required { $($name:ident : fn($($arg:ty),*);)* }
        optional { $($oname:ident : fn($($oarg:ty),*);)* }
    ) => {
        /// Function pointers resolved from the runtime library; valid for the life of the
        /// process, which keeps the library loaded (see [`Runtime::load`]).
        #[allow(non_snake_case)]
        struct Symbols {
            $($name: unsafe extern "C" fn($($arg),*) -> Code,)*
            $($oname: Option<unsafe extern "C" fn($($oarg),*) -> Code>,)*
            e5rt_get_last_error_message: Option<unsafe extern "C" fn() -> *const c_char>,
        }

        impl Symbols {
            fn resolve(library: &libloading::Library, path: &Path) -> Result<Symbols, AneError> {
                Ok(Symbols {
                    $($name: lookup(library, stringify!($name)).ok_or_else(|| {
                        AneError::MissingSymbol {
                            path: path.to_path_buf(),
                            symbol: stringify!($name),
                        }
                    })?,)*
                    $($oname: lookup(library, stringify!($oname)),)*
                    e5rt_get_last_error_message: lookup(library, "e5rt_get_last_error_message"),
                })
            }
        }
    };
}

symbol_table! {
    required {
        e5rt_e5_compiler_config_options_create: fn(*mut Raw);
        e5rt_e5_compiler_config_options_set_cache_bundle_location: fn(Raw, *const c_char);
        e5rt_e5_compiler_config_options_release: fn(*mut Raw);
        e5rt_e5_compiler_create_with_config: fn(*mut Raw, Raw);
        e5rt_e5_compiler_release: fn(*mut Raw);
        e5rt_e5_compiler_options_create: fn(*mut Raw);
        e5rt_e5_compiler_options_set_compute_device_types_mask: fn(Raw, u64);
        e5rt_e5_compiler_options_set_force_recompilation: fn(Raw, c_int);
        e5rt_e5_compiler_options_set_segmenter: fn(Raw, *const c_char);
        e5rt_e5_compiler_options_release: fn(*mut Raw);
        e5rt_e5_compiler_compile: fn(Raw, *const c_char, Raw, *mut Raw);
        e5rt_program_library_retain_program_function: fn(Raw, *const c_char, *mut Raw);
        e5rt_program_library_release: fn(*mut Raw);
        e5rt_program_function_release: fn(*mut Raw);
        e5rt_precompiled_compute_op_create_options_create_with_program_function: fn(*mut Raw, Raw);
        e5rt_precompiled_compute_op_create_options_set_operation_name: fn(Raw, *const c_char);
        e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers: fn(Raw, c_int);
        e5rt_precompiled_compute_op_create_options_release: fn(*mut Raw);
        e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options: fn(*mut Raw, Raw);
        e5rt_execution_stream_operation_retain_input_port: fn(Raw, *const c_char, *mut Raw);
        e5rt_execution_stream_operation_retain_output_port: fn(Raw, *const c_char, *mut Raw);
        e5rt_execution_stream_operation_bind_completion_event: fn(Raw, Raw);
        e5rt_execution_stream_operation_release: fn(*mut Raw);
        e5rt_io_port_bind_buffer_object: fn(Raw, Raw);
        e5rt_io_port_release: fn(*mut Raw);
        e5rt_buffer_object_alloc: fn(*mut Raw, u64, u32);
        e5rt_buffer_object_get_data_ptr: fn(Raw, *mut *mut c_void);
        e5rt_buffer_object_release: fn(*mut Raw);
        e5rt_async_event_create: fn(*mut Raw, *const c_char, u64);
        e5rt_async_event_release: fn(*mut Raw);
        e5rt_execution_stream_create: fn(*mut Raw);
        e5rt_execution_stream_encode_operation: fn(Raw, Raw);
        e5rt_execution_stream_execute_sync: fn(Raw);
        e5rt_execution_stream_release: fn(*mut Raw);
    }
    optional {
        e5rt_io_port_retain_tensor_desc: fn(Raw, *mut Raw);
        e5rt_tensor_desc_get_shape: fn(Raw, *mut u64, *mut *const u64);
        e5rt_tensor_desc_get_strides: fn(Raw, *mut u64, *mut *const u64);
        e5rt_tensor_desc_release: fn(*mut Raw);
    }
}

/// Resolves `name`, then `_name` (some symbol tools and older builds spell the Mach-O form).
fn lookup<T: Copy>(library: &libloading::Library, name: &str) -> Option<T> {
    [name.to_string(), format!("_{name}")]
        .iter()
        .find_map(|candidate| {
            // SAFETY: `T` is the function-pointer type the symbol table declares for `name`, which
            // is the signature documented in docs/ane-runtime.md. The pointer is copied out of the
            // `Symbol` borrow; it stays valid because a loaded runtime library is never unloaded.
            unsafe { library.get::<T>(candidate.as_bytes()).ok().map(|s| *s) }
        })
}

/// A loaded e5rt implementation.
pub(crate) struct Runtime {
    symbols: Symbols,
    path: PathBuf,
}

// SAFETY: the runtime's functions are plain C entry points; the engine serializes every call that
// touches shared runtime state behind its own locks (see `ane.rs`), and the symbol table itself is
// immutable after loading.
unsafe impl Send for Runtime {}
// SAFETY: as above; `&Runtime` only exposes immutable function pointers.
unsafe impl Sync for Runtime {}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("path", &self.path).finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    CompilerConfig,
    Compiler,
    CompilerOptions,
    Library,
    Function,
    OpOptions,
    Operation,
    Port,
    Buffer,
    Event,
    Stream,
    TensorDesc,
}

pub(crate) use aneforge_cpu::Direction;

/// The layout the runtime reports for a port: shape and per-dimension strides, as it gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReportedLayout {
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

/// An e5rt object this process owns one reference to; dropping it calls the matching release.
pub(crate) struct Handle {
    raw: NonNull<c_void>,
    kind: Kind,
    runtime: Arc<Runtime>,
}

// SAFETY: a handle is an opaque reference into the runtime with a single owner — the engine's
// state (used only under its lock) or a program's buffer list (used only through `&mut` or while no
// other borrow exists) — so no two threads call into the runtime with the same object at once.
unsafe impl Send for Handle {}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}@{:p}", self.kind, self.raw)
    }
}

impl Handle {
    fn raw(&self) -> Raw {
        self.raw.as_ptr()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let s = &self.runtime.symbols;
        let (call, release): (&'static str, unsafe extern "C" fn(*mut Raw) -> Code) =
            match self.kind {
                Kind::CompilerConfig => (
                    "e5rt_e5_compiler_config_options_release",
                    s.e5rt_e5_compiler_config_options_release,
                ),
                Kind::Compiler => ("e5rt_e5_compiler_release", s.e5rt_e5_compiler_release),
                Kind::CompilerOptions => (
                    "e5rt_e5_compiler_options_release",
                    s.e5rt_e5_compiler_options_release,
                ),
                Kind::Library => (
                    "e5rt_program_library_release",
                    s.e5rt_program_library_release,
                ),
                Kind::Function => (
                    "e5rt_program_function_release",
                    s.e5rt_program_function_release,
                ),
                Kind::OpOptions => (
                    "e5rt_precompiled_compute_op_create_options_release",
                    s.e5rt_precompiled_compute_op_create_options_release,
                ),
                Kind::Operation => (
                    "e5rt_execution_stream_operation_release",
                    s.e5rt_execution_stream_operation_release,
                ),
                Kind::Port => ("e5rt_io_port_release", s.e5rt_io_port_release),
                Kind::Buffer => ("e5rt_buffer_object_release", s.e5rt_buffer_object_release),
                Kind::Event => ("e5rt_async_event_release", s.e5rt_async_event_release),
                Kind::Stream => (
                    "e5rt_execution_stream_release",
                    s.e5rt_execution_stream_release,
                ),
                Kind::TensorDesc => match s.e5rt_tensor_desc_release {
                    Some(f) => ("e5rt_tensor_desc_release", f),
                    // A tensor descriptor is only created when its release was resolved too.
                    None => return,
                },
            };
        let mut raw = self.raw.as_ptr();
        // SAFETY: `raw` is a live object of `self.kind` that this handle owns exactly one
        // reference to (it came from the matching create/retain call and is released only here).
        let code = unsafe { release(&mut raw) };
        if code != 0 {
            let message = self.runtime.last_error_message();
            log::warn!(
                "{call} failed with error code {code}{}",
                message.map(|m| format!(": {m}")).unwrap_or_default()
            );
        }
    }
}

fn c_string(what: &str, value: &str) -> Result<CString, AneError> {
    CString::new(value).map_err(|_| AneError::InvalidString {
        what: what.to_string(),
        value: value.to_string(),
    })
}

impl Runtime {
    /// Loads the library at `path` and resolves every required `e5rt_*` symbol.
    pub(crate) fn load(path: &Path) -> Result<Arc<Runtime>, AneError> {
        // SAFETY: loading a shared library runs its initializers. The path is either Apple's
        // Espresso framework or a library the user named in ANEFORGE_E5RT_LIB to stand in for it;
        // both are trusted to be e5rt implementations (that is the configuration's meaning).
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| {
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                reason = format!("{reason}: {cause}");
                source = cause.source();
            }
            AneError::Library {
                path: path.to_path_buf(),
                reason,
            }
        })?;
        // A runtime library stays loaded for the life of the process: threads it started (the
        // simulator's worker pool) and its thread-local destructors can outlive every engine, and
        // unmapping their code under them is a crash (dlclose does not wait for them).
        let library: &'static libloading::Library = Box::leak(Box::new(library));
        let symbols = Symbols::resolve(library, path)?;
        Ok(Arc::new(Runtime {
            symbols,
            path: path.to_path_buf(),
        }))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn last_error_message(&self) -> Option<String> {
        let f = self.symbols.e5rt_get_last_error_message?;
        // SAFETY: `e5rt_get_last_error_message` takes no arguments and returns a NUL-terminated
        // string owned by the runtime (or null), valid until the next failing call on this thread;
        // it is copied before any other call.
        unsafe {
            let p = f();
            if p.is_null() {
                None
            } else {
                Some(CStr::from_ptr(p).to_string_lossy().into_owned())
            }
        }
    }

    fn check(&self, call: &'static str, code: Code, context: &str) -> Result<(), AneError> {
        if code == 0 {
            return Ok(());
        }
        let message = self.last_error_message().unwrap_or_default();
        Err(AneError::Call {
            call,
            code,
            context: context.to_string(),
            message,
        })
    }

    fn own(
        self: &Arc<Self>,
        call: &'static str,
        kind: Kind,
        raw: Raw,
        context: &str,
    ) -> Result<Handle, AneError> {
        let raw = NonNull::new(raw).ok_or_else(|| AneError::NullOut {
            call,
            context: context.to_string(),
        })?;
        Ok(Handle {
            raw,
            kind,
            runtime: Arc::clone(self),
        })
    }

    fn expect(handle: &Handle, kind: Kind) {
        debug_assert_eq!(handle.kind, kind, "handle of the wrong kind");
    }

    /// Compiler configuration with the bundle cache directory set.
    pub(crate) fn compiler_config(self: &Arc<Self>, cache_dir: &str) -> Result<Handle, AneError> {
        let s = &self.symbols;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_e5_compiler_config_options_create";
        // SAFETY: out-pointer-first create; `raw` is a valid place for the new object.
        let code = unsafe { (s.e5rt_e5_compiler_config_options_create)(&mut raw) };
        self.check(call, code, "")?;
        let config = self.own(call, Kind::CompilerConfig, raw, "")?;
        let dir = c_string("cache bundle location", cache_dir)?;
        let call = "e5rt_e5_compiler_config_options_set_cache_bundle_location";
        // SAFETY: `config` is a live compiler config; `dir` is NUL-terminated and outlives the call.
        let code = unsafe {
            (s.e5rt_e5_compiler_config_options_set_cache_bundle_location)(
                config.raw(),
                dir.as_ptr(),
            )
        };
        self.check(call, code, cache_dir)?;
        Ok(config)
    }

    pub(crate) fn compiler(self: &Arc<Self>, config: &Handle) -> Result<Handle, AneError> {
        Self::expect(config, Kind::CompilerConfig);
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_e5_compiler_create_with_config";
        // SAFETY: out-pointer first, then a live compiler config.
        let code =
            unsafe { (self.symbols.e5rt_e5_compiler_create_with_config)(&mut raw, config.raw()) };
        self.check(call, code, "")?;
        self.own(call, Kind::Compiler, raw, "")
    }

    pub(crate) fn compiler_options(
        self: &Arc<Self>,
        device_mask: u64,
        force_recompilation: bool,
        segmenter: &str,
    ) -> Result<Handle, AneError> {
        let s = &self.symbols;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_e5_compiler_options_create";
        // SAFETY: out-pointer-first create.
        let code = unsafe { (s.e5rt_e5_compiler_options_create)(&mut raw) };
        self.check(call, code, "")?;
        let options = self.own(call, Kind::CompilerOptions, raw, "")?;
        // SAFETY: `options` is a live compiler options object; the mask is passed by value.
        let code = unsafe {
            (s.e5rt_e5_compiler_options_set_compute_device_types_mask)(options.raw(), device_mask)
        };
        self.check(
            "e5rt_e5_compiler_options_set_compute_device_types_mask",
            code,
            &format!("mask {device_mask:#x}"),
        )?;
        // SAFETY: as above; the flag is an int 0/1.
        let code = unsafe {
            (s.e5rt_e5_compiler_options_set_force_recompilation)(
                options.raw(),
                c_int::from(force_recompilation),
            )
        };
        self.check("e5rt_e5_compiler_options_set_force_recompilation", code, "")?;
        let segmenter_c = c_string("segmenter", segmenter)?;
        // SAFETY: as above; `segmenter_c` is NUL-terminated and outlives the call.
        let code = unsafe {
            (s.e5rt_e5_compiler_options_set_segmenter)(options.raw(), segmenter_c.as_ptr())
        };
        self.check("e5rt_e5_compiler_options_set_segmenter", code, segmenter)?;
        Ok(options)
    }

    /// Compiles the `model.mil` at `mil_path` into a program library.
    pub(crate) fn compile(
        self: &Arc<Self>,
        compiler: &Handle,
        mil_path: &str,
        options: &Handle,
    ) -> Result<Handle, AneError> {
        Self::expect(compiler, Kind::Compiler);
        Self::expect(options, Kind::CompilerOptions);
        let path = c_string("model.mil path", mil_path)?;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_e5_compiler_compile";
        // SAFETY: a live compiler, a NUL-terminated path, live options, and the out-pointer last.
        let code = unsafe {
            (self.symbols.e5rt_e5_compiler_compile)(
                compiler.raw(),
                path.as_ptr(),
                options.raw(),
                &mut raw,
            )
        };
        self.check(call, code, mil_path)?;
        self.own(call, Kind::Library, raw, mil_path)
    }

    pub(crate) fn retain_function(
        self: &Arc<Self>,
        library: &Handle,
        name: &str,
    ) -> Result<Handle, AneError> {
        Self::expect(library, Kind::Library);
        let name_c = c_string("function name", name)?;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_program_library_retain_program_function";
        // SAFETY: a live library, a NUL-terminated name, and the out-pointer last.
        let code = unsafe {
            (self.symbols.e5rt_program_library_retain_program_function)(
                library.raw(),
                name_c.as_ptr(),
                &mut raw,
            )
        };
        self.check(call, code, name)?;
        self.own(call, Kind::Function, raw, name)
    }

    /// Precompiled compute-op options for `function`, with the operation name set and
    /// intermediate buffers allocated by the runtime.
    pub(crate) fn op_options(
        self: &Arc<Self>,
        function: &Handle,
        operation_name: &str,
    ) -> Result<Handle, AneError> {
        Self::expect(function, Kind::Function);
        let s = &self.symbols;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_precompiled_compute_op_create_options_create_with_program_function";
        // SAFETY: out-pointer first, then a live program function.
        let code = unsafe {
            (s.e5rt_precompiled_compute_op_create_options_create_with_program_function)(
                &mut raw,
                function.raw(),
            )
        };
        self.check(call, code, "")?;
        let options = self.own(call, Kind::OpOptions, raw, "")?;
        let name_c = c_string("operation name", operation_name)?;
        // SAFETY: live op options and a NUL-terminated name that outlives the call.
        let code = unsafe {
            (s.e5rt_precompiled_compute_op_create_options_set_operation_name)(
                options.raw(),
                name_c.as_ptr(),
            )
        };
        self.check(
            "e5rt_precompiled_compute_op_create_options_set_operation_name",
            code,
            operation_name,
        )?;
        // SAFETY: live op options; the flag is an int 0/1.
        let code = unsafe {
            (s.e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers)(
                options.raw(),
                1,
            )
        };
        self.check(
            "e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers",
            code,
            "",
        )?;
        Ok(options)
    }

    pub(crate) fn operation(self: &Arc<Self>, op_options: &Handle) -> Result<Handle, AneError> {
        Self::expect(op_options, Kind::OpOptions);
        let mut raw: Raw = std::ptr::null_mut();
        let call =
            "e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options";
        // SAFETY: out-pointer first, then live op options.
        let code = unsafe {
            (self
                .symbols
                .e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options)(
                &mut raw,
                op_options.raw(),
            )
        };
        self.check(call, code, "")?;
        self.own(call, Kind::Operation, raw, "")
    }

    pub(crate) fn retain_port(
        self: &Arc<Self>,
        operation: &Handle,
        direction: Direction,
        name: &str,
    ) -> Result<Handle, AneError> {
        Self::expect(operation, Kind::Operation);
        let name_c = c_string("port name", name)?;
        let (call, f) = match direction {
            Direction::Input => (
                "e5rt_execution_stream_operation_retain_input_port",
                self.symbols
                    .e5rt_execution_stream_operation_retain_input_port,
            ),
            Direction::Output => (
                "e5rt_execution_stream_operation_retain_output_port",
                self.symbols
                    .e5rt_execution_stream_operation_retain_output_port,
            ),
        };
        let mut raw: Raw = std::ptr::null_mut();
        // SAFETY: a live operation, a NUL-terminated port name, and the out-pointer last.
        let code = unsafe { f(operation.raw(), name_c.as_ptr(), &mut raw) };
        self.check(call, code, name)?;
        self.own(call, Kind::Port, raw, name)
    }

    /// The shape and strides the runtime reports for `port`, when it exports the descriptor API.
    pub(crate) fn port_layout(
        self: &Arc<Self>,
        port: &Handle,
        name: &str,
    ) -> Result<Option<ReportedLayout>, AneError> {
        Self::expect(port, Kind::Port);
        let s = &self.symbols;
        let (Some(retain), Some(get_shape), Some(get_strides), Some(_)) = (
            s.e5rt_io_port_retain_tensor_desc,
            s.e5rt_tensor_desc_get_shape,
            s.e5rt_tensor_desc_get_strides,
            s.e5rt_tensor_desc_release,
        ) else {
            return Ok(None);
        };
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_io_port_retain_tensor_desc";
        // SAFETY: a live port and the out-pointer last.
        let code = unsafe { retain(port.raw(), &mut raw) };
        self.check(call, code, name)?;
        let desc = self.own(call, Kind::TensorDesc, raw, name)?;
        let shape = self.read_dims("e5rt_tensor_desc_get_shape", get_shape, &desc, name)?;
        let strides = self.read_dims("e5rt_tensor_desc_get_strides", get_strides, &desc, name)?;
        Ok(Some(ReportedLayout { shape, strides }))
    }

    fn read_dims(
        &self,
        call: &'static str,
        f: unsafe extern "C" fn(Raw, *mut u64, *mut *const u64) -> Code,
        desc: &Handle,
        name: &str,
    ) -> Result<Vec<u64>, AneError> {
        const MAX_RANK: u64 = 16;
        let mut rank: u64 = 0;
        let mut dims: *const u64 = std::ptr::null();
        // SAFETY: a live tensor descriptor; `rank` and `dims` are valid places for the results.
        let code = unsafe { f(desc.raw(), &mut rank, &mut dims) };
        self.check(call, code, name)?;
        if rank > MAX_RANK || (rank > 0 && dims.is_null()) {
            return Err(AneError::BadLayout {
                port: name.to_string(),
                message: format!("{call} reported rank {rank} with dims at {dims:p}"),
            });
        }
        // SAFETY: the runtime returned `rank` dimensions at `dims` (non-null when rank > 0),
        // owned by the descriptor, which is alive for the duration of this copy.
        let out = unsafe { std::slice::from_raw_parts(dims, rank as usize) }.to_vec();
        Ok(out)
    }

    /// A CPU-addressable buffer object of `bytes` bytes, zero-filled.
    pub(crate) fn buffer(self: &Arc<Self>, bytes: usize) -> Result<BufferMemory, AneError> {
        let s = &self.symbols;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_buffer_object_alloc";
        let context = format!("{bytes} bytes");
        // SAFETY: out-pointer first, then the size and the buffer type by value.
        let code = unsafe { (s.e5rt_buffer_object_alloc)(&mut raw, bytes as u64, BUFFER_TYPE_CPU) };
        self.check(call, code, &context)?;
        let buffer = self.own(call, Kind::Buffer, raw, &context)?;
        let mut data: *mut c_void = std::ptr::null_mut();
        let call = "e5rt_buffer_object_get_data_ptr";
        // SAFETY: a live buffer object and the out-pointer last.
        let code = unsafe { (s.e5rt_buffer_object_get_data_ptr)(buffer.raw(), &mut data) };
        self.check(call, code, &context)?;
        let data = NonNull::new(data.cast::<u8>()).ok_or_else(|| AneError::NullOut {
            call,
            context: context.clone(),
        })?;
        let mut memory = BufferMemory {
            handle: buffer,
            data,
            len: bytes,
        };
        memory.bytes_mut().fill(0);
        Ok(memory)
    }

    pub(crate) fn bind(
        &self,
        port: &Handle,
        buffer: &BufferMemory,
        port_name: &str,
    ) -> Result<(), AneError> {
        Self::expect(port, Kind::Port);
        let buffer = &buffer.handle;
        // SAFETY: a live port and a live buffer object.
        let code =
            unsafe { (self.symbols.e5rt_io_port_bind_buffer_object)(port.raw(), buffer.raw()) };
        self.check("e5rt_io_port_bind_buffer_object", code, port_name)
    }

    pub(crate) fn event(self: &Arc<Self>, name: &str) -> Result<Handle, AneError> {
        let name_c = c_string("event name", name)?;
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_async_event_create";
        // SAFETY: out-pointer first, a NUL-terminated name, and 0 by value (the third argument is
        // 0 in every public call sequence; it is passed as a full 64-bit register).
        let code = unsafe { (self.symbols.e5rt_async_event_create)(&mut raw, name_c.as_ptr(), 0) };
        self.check(call, code, name)?;
        self.own(call, Kind::Event, raw, name)
    }

    pub(crate) fn bind_completion_event(
        &self,
        operation: &Handle,
        event: &Handle,
    ) -> Result<(), AneError> {
        Self::expect(operation, Kind::Operation);
        Self::expect(event, Kind::Event);
        // SAFETY: a live operation and a live event.
        let code = unsafe {
            (self
                .symbols
                .e5rt_execution_stream_operation_bind_completion_event)(
                operation.raw(),
                event.raw(),
            )
        };
        self.check(
            "e5rt_execution_stream_operation_bind_completion_event",
            code,
            "",
        )
    }

    pub(crate) fn stream(self: &Arc<Self>) -> Result<Handle, AneError> {
        let mut raw: Raw = std::ptr::null_mut();
        let call = "e5rt_execution_stream_create";
        // SAFETY: out-pointer-first create.
        let code = unsafe { (self.symbols.e5rt_execution_stream_create)(&mut raw) };
        self.check(call, code, "")?;
        self.own(call, Kind::Stream, raw, "")
    }

    pub(crate) fn encode(&self, stream: &Handle, operation: &Handle) -> Result<(), AneError> {
        Self::expect(stream, Kind::Stream);
        Self::expect(operation, Kind::Operation);
        // SAFETY: a live stream and a live operation whose ports are all bound.
        let code = unsafe {
            (self.symbols.e5rt_execution_stream_encode_operation)(stream.raw(), operation.raw())
        };
        self.check("e5rt_execution_stream_encode_operation", code, "")
    }

    pub(crate) fn execute_sync(&self, stream: &Handle, context: &str) -> Result<(), AneError> {
        Self::expect(stream, Kind::Stream);
        // SAFETY: a live stream with an encoded operation; the caller holds the process-wide
        // dispatch lock and no host code touches the bound buffers during the call.
        let code = unsafe { (self.symbols.e5rt_execution_stream_execute_sync)(stream.raw()) };
        self.check("e5rt_execution_stream_execute_sync", code, context)
    }
}

/// A buffer object and the CPU memory behind it (`len` bytes at `data`).
pub(crate) struct BufferMemory {
    handle: Handle,
    data: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is owned by the buffer object this value owns; access goes through `&self`
// / `&mut self`, so Rust's borrow rules serialize it like any owned allocation.
unsafe impl Send for BufferMemory {}

impl std::fmt::Debug for BufferMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({} bytes)", self.handle, self.len)
    }
}

impl BufferMemory {
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `data` points at `len` bytes owned by `handle`'s buffer object, which lives as
        // long as `self`. The runtime writes them only inside `execute_sync`, which the engine
        // calls through `&mut` access to the program owning this buffer, so no shared borrow is
        // alive then.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only borrow of the memory.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}
