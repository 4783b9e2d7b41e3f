//! The exported C functions: the `e5rt_*` subset aneforge uses (same names, argument orders and
//! `int64` return codes as the Espresso framework; see docs/ane-runtime.md) plus `e5rt_sim_*`
//! knobs for tests.
//!
//! Every export validates its pointers and handles and returns an error code instead of crashing
//! on misuse; the one thing it cannot check is that a non-null pointer is valid, which the C
//! caller guarantees (the `# Safety` sections).

use crate::config;
use crate::error::{guard, last_error_ptr, Code, Result, SimError};
use crate::memory::Memory;
use crate::objects::*;
use crate::registry::{self, Kind};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

type Handle = *mut c_void;

fn null(what: &str) -> SimError {
    SimError::new(Code::InvalidArgument, format!("{what} is NULL"))
}

/// Writes `value` through a caller-provided out-pointer.
fn put<T>(out: *mut T, what: &str, value: T) -> Result<()> {
    if out.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, and the C caller guarantees it points at writable storage for a `T`.
    unsafe { out.write(value) };
    Ok(())
}

fn string(p: *const c_char, what: &str) -> Result<String> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, and the C caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(str::to_string)
        .map_err(|_| SimError::new(Code::InvalidArgument, format!("{what} is not UTF-8")))
}

/// Issues a handle for a new object, written through `out` (checked before the object is made).
fn create<T: Kind>(out: *mut Handle, make: impl FnOnce() -> Result<T>) -> Result<()> {
    if out.is_null() {
        return Err(null("the out-pointer"));
    }
    let handle = registry::issue(Arc::new(make()?));
    put(out, "the out-pointer", handle)
}

fn retain<T: Kind>(out: *mut Handle, object: Arc<T>) -> Result<()> {
    if out.is_null() {
        return Err(null("the out-pointer"));
    }
    put(out, "the out-pointer", registry::issue(object))
}

/// Releases the handle `*obj` and nulls it, so a second release of the same variable fails.
fn release<T: Kind>(obj: *mut Handle) -> Result<()> {
    if obj.is_null() {
        return Err(null("the pointer to the handle"));
    }
    // SAFETY: non-null, and the C caller guarantees it points at a handle variable.
    let handle = unsafe { obj.read() };
    registry::release::<T>(handle)?;
    put(obj, "the pointer to the handle", std::ptr::null_mut())
}

macro_rules! export {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        /// # Safety
        /// Every non-null pointer argument must be valid for the access the e5rt API describes.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> i64 {
            guard(stringify!($name), || $body)
        }
    };
}

macro_rules! export_release {
    ($name:ident, $ty:ty) => {
        export!(
            fn $name(obj: *mut Handle) {
                release::<$ty>(obj)
            }
        );
    };
}

// ---- compiler configuration, compiler, options, compile ----

export!(
    fn e5rt_e5_compiler_config_options_create(out: *mut Handle) {
        create(out, || Ok(CompilerConfig::default()))
    }
);

export!(
    fn e5rt_e5_compiler_config_options_set_cache_bundle_location(
        config: Handle,
        path: *const c_char,
    ) {
        let config = registry::get::<CompilerConfig>(config)?;
        let path = string(path, "the cache bundle location")?;
        *lock(&config.cache_dir) = Some(PathBuf::from(path));
        Ok(())
    }
);

export_release!(e5rt_e5_compiler_config_options_release, CompilerConfig);

export!(
    fn e5rt_e5_compiler_create(out: *mut Handle) {
        create(out, || Ok(Compiler { cache_dir: None }))
    }
);

export!(
    fn e5rt_e5_compiler_create_with_config(out: *mut Handle, config: Handle) {
        let config = registry::get::<CompilerConfig>(config)?;
        let cache_dir = lock(&config.cache_dir).clone();
        create(out, || Ok(Compiler { cache_dir }))
    }
);

export_release!(e5rt_e5_compiler_release, Compiler);

export!(
    fn e5rt_e5_compiler_options_create(out: *mut Handle) {
        create(out, || Ok(CompilerOptions::default()))
    }
);

export!(
    fn e5rt_e5_compiler_options_set_compute_device_types_mask(options: Handle, mask: u64) {
        let options = registry::get::<CompilerOptions>(options)?;
        lock(&options.settings).device_mask = Some(mask);
        Ok(())
    }
);

export!(
    fn e5rt_e5_compiler_options_set_force_recompilation(options: Handle, value: c_int) {
        let options = registry::get::<CompilerOptions>(options)?;
        lock(&options.settings).force_recompilation = value != 0;
        Ok(())
    }
);

export!(
    fn e5rt_e5_compiler_options_set_segmenter(options: Handle, segmenter: *const c_char) {
        let options = registry::get::<CompilerOptions>(options)?;
        let segmenter = string(segmenter, "the segmenter")?;
        lock(&options.settings).segmenter = Some(segmenter);
        Ok(())
    }
);

export_release!(e5rt_e5_compiler_options_release, CompilerOptions);

export!(
    fn e5rt_e5_compiler_compile(
        compiler: Handle,
        path: *const c_char,
        options: Handle,
        out: *mut Handle,
    ) {
        let compiler = registry::get::<Compiler>(compiler)?;
        let path = string(path, "the MIL path")?;
        let settings = lock(&registry::get::<CompilerOptions>(options)?.settings).clone();
        create(out, || compiler.compile(&path, &settings))
    }
);

// ---- program library and function ----

export!(
    fn e5rt_program_library_retain_program_function(
        library: Handle,
        name: *const c_char,
        out: *mut Handle,
    ) {
        let library = registry::get::<Library>(library)?;
        let name = string(name, "the function name")?;
        let compiled = library.program.function(&name).cloned().ok_or_else(|| {
            let names: Vec<&str> = library
                .program
                .functions
                .iter()
                .map(|f| f.name.as_str())
                .collect();
            SimError::new(
                Code::NotFound,
                format!(
                    "{}: no function `{name}` (functions: {})",
                    library.program.path.display(),
                    names.join(", ")
                ),
            )
        })?;
        retain(
            out,
            Arc::new(Function {
                _library: library,
                compiled,
            }),
        )
    }
);

export_release!(e5rt_program_library_release, Library);
export_release!(e5rt_program_function_release, Function);

// ---- precompiled compute operation ----

export!(
    fn e5rt_precompiled_compute_op_create_options_create_with_program_function(
        out: *mut Handle,
        function: Handle,
    ) {
        let function = registry::get::<Function>(function)?;
        create(out, || {
            Ok(OpOptions {
                function,
                settings: Mutex::new(OpSettings::default()),
            })
        })
    }
);

export!(
    fn e5rt_precompiled_compute_op_create_options_set_operation_name(
        options: Handle,
        name: *const c_char,
    ) {
        let options = registry::get::<OpOptions>(options)?;
        let name = string(name, "the operation name")?;
        lock(&options.settings).operation_name = Some(name);
        Ok(())
    }
);

export!(
    fn e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers(
        options: Handle,
        value: c_int,
    ) {
        let options = registry::get::<OpOptions>(options)?;
        lock(&options.settings).allocate_intermediate_buffers = value != 0;
        Ok(())
    }
);

export_release!(
    e5rt_precompiled_compute_op_create_options_release,
    OpOptions
);

export!(
    fn e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options(
        out: *mut Handle,
        options: Handle,
    ) {
        let options = registry::get::<OpOptions>(options)?;
        create(out, || Operation::create(&options))
    }
);

fn retain_port(
    operation: Handle,
    name: *const c_char,
    out: *mut Handle,
    input: bool,
) -> Result<()> {
    let operation = registry::get::<Operation>(operation)?;
    let name = string(name, "the port name")?;
    let index = operation.port_index(input, &name)?;
    retain(out, Arc::new(Port { operation, index }))
}

export!(
    fn e5rt_execution_stream_operation_retain_input_port(
        operation: Handle,
        name: *const c_char,
        out: *mut Handle,
    ) {
        retain_port(operation, name, out, true)
    }
);

export!(
    fn e5rt_execution_stream_operation_retain_output_port(
        operation: Handle,
        name: *const c_char,
        out: *mut Handle,
    ) {
        retain_port(operation, name, out, false)
    }
);

export!(
    fn e5rt_execution_stream_operation_bind_completion_event(operation: Handle, event: Handle) {
        let operation = registry::get::<Operation>(operation)?;
        let event = registry::get::<Event>(event)?;
        operation.bind_completion_event(event)
    }
);

export!(
    fn e5rt_execution_stream_operation_prepare_op_for_encode(operation: Handle) {
        registry::get::<Operation>(operation)?.prepare_for_encode()
    }
);

export_release!(e5rt_execution_stream_operation_release, Operation);

// ---- ports and tensor descriptors ----

export!(
    fn e5rt_io_port_bind_buffer_object(port: Handle, buffer: Handle) {
        let port = registry::get::<Port>(port)?;
        let buffer = registry::get::<Buffer>(buffer)?;
        port.operation.bind(port.index, buffer)
    }
);

export!(
    fn e5rt_io_port_retain_tensor_desc(port: Handle, out: *mut Handle) {
        let port = registry::get::<Port>(port)?;
        let (spec, layout) = port.spec_and_layout();
        create(out, || Ok(TensorDesc::for_port(&spec, &layout)))
    }
);

export_release!(e5rt_io_port_release, Port);

fn dims(desc: Handle, rank: *mut u64, out: *mut *const u64, strides: bool) -> Result<()> {
    let desc = registry::get::<TensorDesc>(desc)?;
    let values = if strides { &desc.strides } else { &desc.shape };
    if out.is_null() {
        return Err(null("the out-pointer"));
    }
    put(rank, "the rank out-pointer", values.len() as u64)?;
    // The array lives in the descriptor object, which the caller holds a reference to.
    put(out, "the out-pointer", values.as_ptr())
}

export!(
    fn e5rt_tensor_desc_get_shape(desc: Handle, rank: *mut u64, shape: *mut *const u64) {
        dims(desc, rank, shape, false)
    }
);

export!(
    fn e5rt_tensor_desc_get_strides(desc: Handle, rank: *mut u64, strides: *mut *const u64) {
        dims(desc, rank, strides, true)
    }
);

export_release!(e5rt_tensor_desc_release, TensorDesc);

// ---- buffer objects ----

export!(
    fn e5rt_buffer_object_alloc(out: *mut Handle, size: u64, buffer_type: u32) {
        if buffer_type > 2 {
            return Err(SimError::new(
                Code::InvalidArgument,
                format!("invalid buffer type {buffer_type} (0, 1 or 2)"),
            ));
        }
        if size == 0 {
            return Err(SimError::new(Code::InvalidArgument, "buffer size is 0"));
        }
        let size = usize::try_from(size).map_err(|_| {
            SimError::new(
                Code::InvalidArgument,
                format!("buffer size {size} is too large"),
            )
        })?;
        create(out, || {
            Ok(Buffer {
                memory: Memory::zeroed(size)?,
            })
        })
    }
);

export!(
    fn e5rt_buffer_object_get_data_ptr(buffer: Handle, out: *mut *mut c_void) {
        let buffer = registry::get::<Buffer>(buffer)?;
        put(
            out,
            "the out-pointer",
            buffer.memory.as_ptr().cast::<c_void>(),
        )
    }
);

export!(
    fn e5rt_buffer_object_get_size(buffer: Handle, out: *mut u64) {
        let buffer = registry::get::<Buffer>(buffer)?;
        put(out, "the out-pointer", buffer.memory.len() as u64)
    }
);

export_release!(e5rt_buffer_object_release, Buffer);

// ---- async events ----

export!(
    fn e5rt_async_event_create(out: *mut Handle, name: *const c_char, _initial: u64) {
        let name = string(name, "eventName")?;
        create(out, || {
            Ok(Event {
                _name: name,
                signaled: Default::default(),
            })
        })
    }
);

export!(
    fn e5rt_async_event_get_last_signaled_value(event: Handle, out: *mut u64) {
        let event = registry::get::<Event>(event)?;
        put(
            out,
            "the out-pointer",
            event.signaled.load(Ordering::SeqCst),
        )
    }
);

export_release!(e5rt_async_event_release, Event);

// ---- execution streams ----

export!(
    fn e5rt_execution_stream_create(out: *mut Handle) {
        create(out, || Ok(Stream::default()))
    }
);

export!(
    fn e5rt_execution_stream_encode_operation(stream: Handle, operation: Handle) {
        let stream = registry::get::<Stream>(stream)?;
        let operation = registry::get::<Operation>(operation)?;
        stream.encode(operation)
    }
);

export!(
    fn e5rt_execution_stream_execute_sync(stream: Handle) {
        registry::get::<Stream>(stream)?.execute_sync()
    }
);

export!(
    fn e5rt_execution_stream_reset(stream: Handle) {
        registry::get::<Stream>(stream)?.reset()
    }
);

export_release!(e5rt_execution_stream_release, Stream);

/// The calling thread's last error text (or an empty string); valid until its next failing call.
#[no_mangle]
pub extern "C" fn e5rt_get_last_error_message() -> *const c_char {
    last_error_ptr()
}

// ---- simulator knobs (not part of the e5rt API) ----

export!(
    /// Port layout for operations created from now on — rows padded to `row_alignment` bytes
    /// (0 = dense; otherwise a multiple of 4), strides reported in bytes (`strides_in_bytes`
    /// non-zero) or elements — and the process's program limit (0 keeps the current one).
    fn e5rt_sim_configure(row_alignment: u64, strides_in_bytes: c_int, max_programs: u64) {
        if !row_alignment.is_multiple_of(4) {
            return Err(SimError::new(
                Code::InvalidArgument,
                format!("row alignment {row_alignment} is not a multiple of 4 bytes"),
            ));
        }
        config::set_layout(row_alignment as usize, strides_in_bytes != 0);
        if max_programs > 0 {
            config::set_max_programs(max_programs as usize);
        }
        Ok(())
    }
);

export!(
    /// Live handles, loaded programs, compile calls and operation executions so far.
    fn e5rt_sim_stats(
        live_handles: *mut u64,
        live_programs: *mut u64,
        compiles: *mut u64,
        executions: *mut u64,
    ) {
        put(
            live_handles,
            "live_handles",
            registry::live_handles() as u64,
        )?;
        put(
            live_programs,
            "live_programs",
            config::live_programs() as u64,
        )?;
        put(compiles, "compiles", config::compiles())?;
        put(executions, "executions", config::executions())
    }
);
