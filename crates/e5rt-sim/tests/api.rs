//! The simulator's C API: object lifetimes, ordering rules and error codes, called the way a C
//! client calls them (through the exported functions).

use e5rt_sim::*;
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::Mutex;

type H = *mut c_void;

// The error codes the simulator documents.
const INVALID_ARGUMENT: i64 = 1;
const INVALID_HANDLE: i64 = 2;
const INVALID_STATE: i64 = 3;
const NOT_FOUND: i64 = 4;
const COMPILE_FAILED: i64 = 5;

/// Tests share the process-wide handle registry; they run one at a time so handle counts are
/// exact.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn last_error() -> String {
    // SAFETY: returns a NUL-terminated string owned by the simulator.
    unsafe { CStr::from_ptr(e5rt_get_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn live_handles() -> u64 {
    let (mut handles, mut programs, mut compiles, mut executions) = (0, 0, 0, 0);
    // SAFETY: four valid out-pointers.
    let code =
        unsafe { e5rt_sim_stats(&mut handles, &mut programs, &mut compiles, &mut executions) };
    assert_eq!(code, 0);
    handles
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

#[track_caller]
fn ok(code: i64) {
    assert_eq!(code, 0, "call failed: {}", last_error());
}

#[track_caller]
fn fails(code: i64, expected: i64, needle: &str) {
    assert_eq!(
        code,
        expected,
        "unexpected code; last error: {}",
        last_error()
    );
    let message = last_error();
    assert!(
        message.contains(needle),
        "last error {message:?} does not mention {needle:?}"
    );
}

const ACCUMULATE: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 3]> x, tensor<fp16, [2, 3]> acc) {
            tensor<fp16, [2, 3]> acc_out = add(x = acc, y = x)[name = string("acc_out")];
        } -> (acc_out);
}
"#;

fn program_dir(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mil = dir.path().join("model.mil");
    std::fs::write(&mil, text).unwrap();
    (dir, mil)
}

/// The compile half of the sequence: a library for the program at `mil`.
unsafe fn compile(mil: &Path, cache: &Path) -> Result<H, i64> {
    let (mut config, mut compiler, mut options, mut library) =
        (null_mut(), null_mut(), null_mut(), null_mut());
    ok(e5rt_e5_compiler_config_options_create(&mut config));
    let cache = c(cache.to_str().unwrap());
    ok(e5rt_e5_compiler_config_options_set_cache_bundle_location(
        config,
        cache.as_ptr(),
    ));
    ok(e5rt_e5_compiler_create_with_config(&mut compiler, config));
    ok(e5rt_e5_compiler_options_create(&mut options));
    ok(e5rt_e5_compiler_options_set_compute_device_types_mask(
        options, 0x4,
    ));
    ok(e5rt_e5_compiler_options_set_force_recompilation(options, 1));
    let graph = c("graph");
    ok(e5rt_e5_compiler_options_set_segmenter(
        options,
        graph.as_ptr(),
    ));
    let path = c(mil.to_str().unwrap());
    let code = e5rt_e5_compiler_compile(compiler, path.as_ptr(), options, &mut library);
    ok(e5rt_e5_compiler_options_release(&mut options));
    ok(e5rt_e5_compiler_release(&mut compiler));
    ok(e5rt_e5_compiler_config_options_release(&mut config));
    if code == 0 {
        Ok(library)
    } else {
        Err(code)
    }
}

/// Library → function `main` → op options → operation.
struct Op {
    library: H,
    function: H,
    options: H,
    operation: H,
}

unsafe fn operation(library: H) -> Op {
    let mut op = Op {
        library,
        function: null_mut(),
        options: null_mut(),
        operation: null_mut(),
    };
    let main = c("main");
    ok(e5rt_program_library_retain_program_function(
        library,
        main.as_ptr(),
        &mut op.function,
    ));
    ok(
        e5rt_precompiled_compute_op_create_options_create_with_program_function(
            &mut op.options,
            op.function,
        ),
    );
    ok(e5rt_precompiled_compute_op_create_options_set_operation_name(op.options, main.as_ptr()));
    ok(e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers(op.options, 1));
    ok(
        e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options(
            &mut op.operation,
            op.options,
        ),
    );
    op
}

unsafe fn release_op(mut op: Op) {
    ok(e5rt_execution_stream_operation_release(&mut op.operation));
    ok(e5rt_precompiled_compute_op_create_options_release(
        &mut op.options,
    ));
    ok(e5rt_program_function_release(&mut op.function));
    ok(e5rt_program_library_release(&mut op.library));
}

unsafe fn port(op: &Op, input: bool, name: &str) -> H {
    let mut port = null_mut();
    let name = c(name);
    if input {
        ok(e5rt_execution_stream_operation_retain_input_port(
            op.operation,
            name.as_ptr(),
            &mut port,
        ));
    } else {
        ok(e5rt_execution_stream_operation_retain_output_port(
            op.operation,
            name.as_ptr(),
            &mut port,
        ));
    }
    port
}

unsafe fn buffer(bytes: u64) -> H {
    let mut buffer = null_mut();
    ok(e5rt_buffer_object_alloc(&mut buffer, bytes, 0));
    buffer
}

#[test]
fn the_whole_sequence_builds_and_releases_without_leaks() {
    let _serial = serial();
    let before = live_handles();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: every pointer passed is a valid local.
    unsafe {
        let library = compile(&mil, &dir.path().join("bundles")).unwrap();
        assert!(
            dir.path().join("bundles").is_dir(),
            "the cache bundle location is created"
        );
        let op = operation(library);
        let mut ports = [
            port(&op, true, "x"),
            port(&op, true, "acc"),
            port(&op, false, "acc_out"),
        ];
        let mut buffers = [buffer(64), buffer(64), buffer(64)];
        for (p, b) in ports.iter().zip(&buffers) {
            ok(e5rt_io_port_bind_buffer_object(*p, *b));
        }
        let mut data: *mut c_void = null_mut();
        ok(e5rt_buffer_object_get_data_ptr(buffers[0], &mut data));
        assert!(
            !data.is_null() && (data as usize).is_multiple_of(64),
            "buffers are 64-byte aligned"
        );
        let mut size = 0u64;
        ok(e5rt_buffer_object_get_size(buffers[0], &mut size));
        assert_eq!(size, 64);
        let mut event = null_mut();
        let name = c("done");
        ok(e5rt_async_event_create(&mut event, name.as_ptr(), 0));
        ok(e5rt_execution_stream_operation_bind_completion_event(
            op.operation,
            event,
        ));
        let mut stream = null_mut();
        ok(e5rt_execution_stream_create(&mut stream));
        ok(e5rt_execution_stream_encode_operation(stream, op.operation));
        ok(e5rt_execution_stream_release(&mut stream));
        ok(e5rt_async_event_release(&mut event));
        for b in buffers.iter_mut().rev() {
            ok(e5rt_buffer_object_release(b));
        }
        for p in ports.iter_mut().rev() {
            ok(e5rt_io_port_release(p));
        }
        release_op(op);
    }
    assert_eq!(live_handles(), before, "every handle issued was released");
}

#[test]
fn null_out_pointers_and_null_strings_are_invalid_arguments() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: the null pointers are the point; every other pointer is a valid local.
    unsafe {
        fails(
            e5rt_execution_stream_create(null_mut()),
            INVALID_ARGUMENT,
            "out-pointer is NULL",
        );
        fails(
            e5rt_buffer_object_alloc(null_mut(), 64, 0),
            INVALID_ARGUMENT,
            "NULL",
        );
        let mut event = null_mut();
        fails(
            e5rt_async_event_create(&mut event, std::ptr::null(), 0),
            INVALID_ARGUMENT,
            "eventName is NULL",
        );
        assert!(event.is_null());
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let name = c("x");
        fails(
            e5rt_execution_stream_operation_retain_input_port(
                op.operation,
                name.as_ptr(),
                null_mut(),
            ),
            INVALID_ARGUMENT,
            "NULL",
        );
        fails(
            e5rt_execution_stream_operation_retain_input_port(
                op.operation,
                std::ptr::null(),
                &mut event,
            ),
            INVALID_ARGUMENT,
            "port name is NULL",
        );
        fails(e5rt_io_port_release(null_mut()), INVALID_ARGUMENT, "NULL");
        release_op(op);
    }
}

#[test]
fn unknown_port_and_function_names_are_not_found() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: valid locals throughout.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let mut function = null_mut();
        let other = c("other");
        fails(
            e5rt_program_library_retain_program_function(library, other.as_ptr(), &mut function),
            NOT_FOUND,
            "no function `other` (functions: main)",
        );
        let op = operation(library);
        let mut port = null_mut();
        let name = c("acc_out");
        fails(
            e5rt_execution_stream_operation_retain_input_port(
                op.operation,
                name.as_ptr(),
                &mut port,
            ),
            NOT_FOUND,
            "no input port named `acc_out` (inputs: x, acc)",
        );
        let name = c("x");
        fails(
            e5rt_execution_stream_operation_retain_output_port(
                op.operation,
                name.as_ptr(),
                &mut port,
            ),
            NOT_FOUND,
            "no output port named `x` (outputs: acc_out)",
        );
        assert!(port.is_null());
        release_op(op);
    }
}

#[test]
fn releasing_twice_and_stale_or_mistyped_handles_are_invalid_handles() {
    let _serial = serial();
    // SAFETY: valid locals; stale handles are never dereferenced by the simulator.
    unsafe {
        let mut buffer = buffer(128);
        let copy = buffer;
        ok(e5rt_buffer_object_release(&mut buffer));
        assert!(buffer.is_null(), "release nulls the caller's handle");
        fails(
            e5rt_buffer_object_release(&mut buffer),
            INVALID_HANDLE,
            "handle is null",
        );
        let mut stale = copy;
        fails(
            e5rt_buffer_object_release(&mut stale),
            INVALID_HANDLE,
            "not a live buffer object",
        );
        let mut data = null_mut();
        fails(
            e5rt_buffer_object_get_data_ptr(copy, &mut data),
            INVALID_HANDLE,
            "not a live",
        );

        let mut stream = null_mut();
        ok(e5rt_execution_stream_create(&mut stream));
        let mut wrong = stream;
        fails(
            e5rt_buffer_object_release(&mut wrong),
            INVALID_HANDLE,
            "is a execution stream, expected a buffer object",
        );
        assert_eq!(wrong, stream, "a failed release leaves the handle alone");
        ok(e5rt_execution_stream_release(&mut stream));
    }
}

#[test]
fn ordering_rules_bind_encode_execute() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: valid locals throughout.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let mut stream = null_mut();
        ok(e5rt_execution_stream_create(&mut stream));
        fails(
            e5rt_execution_stream_execute_sync(stream),
            INVALID_STATE,
            "no encoded operation",
        );
        fails(
            e5rt_execution_stream_reset(stream),
            INVALID_STATE,
            "no encoded operation",
        );
        fails(
            e5rt_execution_stream_operation_prepare_op_for_encode(op.operation),
            INVALID_STATE,
            "has not been encoded",
        );
        let mut ports = [
            port(&op, true, "x"),
            port(&op, true, "acc"),
            port(&op, false, "acc_out"),
        ];
        let mut small = buffer(8);
        fails(
            e5rt_io_port_bind_buffer_object(ports[0], small),
            INVALID_ARGUMENT,
            "too small for port `x`, which needs 12",
        );
        ok(e5rt_buffer_object_release(&mut small));
        let mut shared = buffer(64);
        let mut x = buffer(64);
        ok(e5rt_io_port_bind_buffer_object(ports[0], x));
        ok(e5rt_io_port_bind_buffer_object(ports[1], shared));
        fails(
            e5rt_execution_stream_encode_operation(stream, op.operation),
            INVALID_STATE,
            "port `acc_out` has no buffer bound",
        );
        // two ports bound to one buffer object
        ok(e5rt_io_port_bind_buffer_object(ports[2], shared));
        ok(e5rt_execution_stream_encode_operation(stream, op.operation));
        fails(
            e5rt_execution_stream_encode_operation(stream, op.operation),
            INVALID_STATE,
            "already encoded",
        );
        fails(
            e5rt_io_port_bind_buffer_object(ports[0], shared),
            INVALID_STATE,
            "cannot bind port `x`",
        );
        let mut event = null_mut();
        let name = c("late");
        ok(e5rt_async_event_create(&mut event, name.as_ptr(), 0));
        fails(
            e5rt_execution_stream_operation_bind_completion_event(op.operation, event),
            INVALID_STATE,
            "already encoded",
        );
        // reset detaches the operation; it must be prepared before binding or encoding again
        ok(e5rt_execution_stream_reset(stream));
        fails(
            e5rt_io_port_bind_buffer_object(ports[0], x),
            INVALID_STATE,
            "prepare_op_for_encode",
        );
        ok(e5rt_execution_stream_operation_prepare_op_for_encode(
            op.operation,
        ));
        ok(e5rt_io_port_bind_buffer_object(ports[0], x));
        ok(e5rt_execution_stream_operation_bind_completion_event(
            op.operation,
            event,
        ));
        ok(e5rt_execution_stream_encode_operation(stream, op.operation));

        ok(e5rt_execution_stream_release(&mut stream));
        ok(e5rt_async_event_release(&mut event));
        ok(e5rt_buffer_object_release(&mut x));
        ok(e5rt_buffer_object_release(&mut shared));
        for p in ports.iter_mut().rev() {
            ok(e5rt_io_port_release(p));
        }
        release_op(op);
    }
}

#[test]
fn programs_the_parser_rejects_fail_to_compile_with_the_reason() {
    let _serial = serial();
    let (dir, mil) = program_dir("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n      nonsense\n    } -> (x);\n}\n");
    // SAFETY: valid locals.
    unsafe {
        let code = compile(&mil, &dir.path().join("b")).unwrap_err();
        assert_eq!(code, COMPILE_FAILED);
        let message = last_error();
        assert!(message.contains("model.mil"), "{message}");
        assert!(message.contains("line 4"), "names the line: {message}");

        let missing = dir.path().join("absent").join("model.mil");
        assert_eq!(
            compile(&missing, &dir.path().join("b")).unwrap_err(),
            COMPILE_FAILED
        );
        assert!(last_error().contains("No such file"), "{}", last_error());
    }
}

#[test]
fn blob_files_resolve_relative_to_the_program_directory() {
    let _serial = serial();
    let text = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2]> x) {
            tensor<fp16, [2]> w = const()[name = string("w"), val = tensor<fp16, [2]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];
            tensor<fp16, [2]> y = add(x = x, y = w)[name = string("y")];
        } -> (y);
}
"#;
    let (dir, mil) = program_dir(text);
    // SAFETY: valid locals.
    unsafe {
        assert_eq!(
            compile(&mil, &dir.path().join("b")).unwrap_err(),
            COMPILE_FAILED
        );
        assert!(last_error().contains("weight.bin"), "{}", last_error());
        let mut writer = aneforge_mil::BlobWriter::new();
        writer.add_f16(&[half::f16::ONE, half::f16::ONE]);
        std::fs::create_dir_all(dir.path().join("weights")).unwrap();
        std::fs::write(dir.path().join("weights/weight.bin"), writer.finish()).unwrap();
        let mut library = compile(&mil, &dir.path().join("b")).unwrap();
        ok(e5rt_program_library_release(&mut library));
    }
}

#[test]
fn compile_needs_a_valid_device_mask() {
    let _serial = serial();
    let (_dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: valid locals.
    unsafe {
        let (mut compiler, mut options, mut library) = (null_mut(), null_mut(), null_mut());
        ok(e5rt_e5_compiler_create(&mut compiler));
        ok(e5rt_e5_compiler_options_create(&mut options));
        let path = c(mil.to_str().unwrap());
        fails(
            e5rt_e5_compiler_compile(compiler, path.as_ptr(), options, &mut library),
            INVALID_ARGUMENT,
            "mask was not set",
        );
        ok(e5rt_e5_compiler_options_set_compute_device_types_mask(
            options, 0x10,
        ));
        fails(
            e5rt_e5_compiler_compile(compiler, path.as_ptr(), options, &mut library),
            INVALID_ARGUMENT,
            "0x10",
        );
        assert!(library.is_null());
        ok(e5rt_e5_compiler_options_release(&mut options));
        ok(e5rt_e5_compiler_release(&mut compiler));
    }
}

#[test]
fn tensor_descriptors_report_dense_shapes_and_strides() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: valid locals; the dims arrays are read while the descriptor is alive.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let mut p = port(&op, true, "x");
        let mut desc = null_mut();
        ok(e5rt_io_port_retain_tensor_desc(p, &mut desc));
        let (mut rank, mut dims) = (0u64, std::ptr::null());
        ok(e5rt_tensor_desc_get_shape(desc, &mut rank, &mut dims));
        assert_eq!(std::slice::from_raw_parts(dims, rank as usize), [2, 3]);
        ok(e5rt_tensor_desc_get_strides(desc, &mut rank, &mut dims));
        assert_eq!(std::slice::from_raw_parts(dims, rank as usize), [3, 1]);
        fails(
            e5rt_tensor_desc_get_shape(desc, null_mut(), &mut dims),
            INVALID_ARGUMENT,
            "rank",
        );
        ok(e5rt_tensor_desc_release(&mut desc));
        ok(e5rt_io_port_release(&mut p));
        release_op(op);
    }
}

#[test]
fn handles_keep_what_they_depend_on_alive() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    // SAFETY: valid locals.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let mut p = port(&op, false, "acc_out");
        // releasing everything above the port first is allowed: the port keeps its operation
        release_op(op);
        let mut b = buffer(64);
        ok(e5rt_io_port_bind_buffer_object(p, b));
        ok(e5rt_buffer_object_release(&mut b));
        ok(e5rt_io_port_release(&mut p));
    }
}

#[test]
fn two_ports_on_one_buffer_read_the_old_value_and_write_the_new() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    let to16 = |v: &[f32]| {
        v.iter()
            .map(|&x| half::f16::from_f32(x))
            .collect::<Vec<_>>()
    };
    let x = to16(&[1.0, 2.0, 3.0, -4.0, 0.5, 0.25]);
    let initial = to16(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    // SAFETY: valid locals; buffer memory is written only between executions, within its size.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let mut ports = [
            port(&op, true, "x"),
            port(&op, true, "acc"),
            port(&op, false, "acc_out"),
        ];
        let mut x_buffer = buffer(64);
        let mut state = buffer(64);
        ok(e5rt_io_port_bind_buffer_object(ports[0], x_buffer));
        ok(e5rt_io_port_bind_buffer_object(ports[1], state));
        ok(e5rt_io_port_bind_buffer_object(ports[2], state));
        let (mut x_ptr, mut state_ptr) = (null_mut(), null_mut());
        ok(e5rt_buffer_object_get_data_ptr(x_buffer, &mut x_ptr));
        ok(e5rt_buffer_object_get_data_ptr(state, &mut state_ptr));
        let x_mem = std::slice::from_raw_parts_mut(x_ptr.cast::<half::f16>(), 6);
        let state_mem = std::slice::from_raw_parts_mut(state_ptr.cast::<half::f16>(), 6);
        x_mem.copy_from_slice(&x);
        state_mem.copy_from_slice(&initial);

        let mut event = null_mut();
        let name = c("done");
        ok(e5rt_async_event_create(&mut event, name.as_ptr(), 0));
        ok(e5rt_execution_stream_operation_bind_completion_event(
            op.operation,
            event,
        ));
        let mut stream = null_mut();
        ok(e5rt_execution_stream_create(&mut stream));
        ok(e5rt_execution_stream_encode_operation(stream, op.operation));
        let mut expected: Vec<f64> = initial.iter().map(|v| v.to_f64()).collect();
        for step in 1..=3u64 {
            ok(e5rt_execution_stream_execute_sync(stream));
            for (e, xv) in expected.iter_mut().zip(&x) {
                *e = half::f16::from_f64(*e + xv.to_f64()).to_f64();
            }
            let got: Vec<f64> = state_mem.iter().map(|v| v.to_f64()).collect();
            assert_eq!(got, expected, "after {step} executions");
            let mut signaled = 0;
            ok(e5rt_async_event_get_last_signaled_value(
                event,
                &mut signaled,
            ));
            assert_eq!(signaled, step);
        }
        ok(e5rt_execution_stream_release(&mut stream));
        ok(e5rt_async_event_release(&mut event));
        ok(e5rt_buffer_object_release(&mut x_buffer));
        ok(e5rt_buffer_object_release(&mut state));
        for p in ports.iter_mut().rev() {
            ok(e5rt_io_port_release(p));
        }
        release_op(op);
    }
}

#[test]
fn programs_the_cpu_engine_cannot_plan_fail_to_compile_naming_the_op() {
    let _serial = serial();
    let text = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 8]> x, tensor<fp16, [4, 8]> w) {
            tensor<fp16, [2, 4]> h = linear(x = x, weight = w)[name = string("h")];
        } -> (h);
}
"#;
    let (dir, mil) = program_dir(text);
    // SAFETY: valid locals.
    unsafe {
        assert_eq!(
            compile(&mil, &dir.path().join("b")).unwrap_err(),
            COMPILE_FAILED
        );
    }
    let message = last_error();
    assert!(message.contains("op `h` (linear)"), "{message}");
}

/// Random call sequences over live, released, mistyped, null and never-issued handles: every call
/// returns 0 or a documented error code, and none is an internal error (a caught panic).
#[test]
fn random_misuse_never_crashes_and_never_panics_inside() {
    let _serial = serial();
    let (dir, mil) = program_dir(ACCUMULATE);
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let names = [c("x"), c("acc"), c("acc_out"), c("main"), c("nope")];
    // SAFETY: every out-pointer is a valid local; handles are never dereferenced by the simulator.
    unsafe {
        let library = compile(&mil, &dir.path().join("b")).unwrap();
        let op = operation(library);
        let mut pool: Vec<H> = vec![
            null_mut(),
            0x5100_0008 as H, // never issued (ids step by 16)
            0xdead_beef as H,
            op.library,
            op.function,
            op.options,
            op.operation,
        ];
        let mut codes = std::collections::BTreeMap::new();
        for _ in 0..3000 {
            let a = pool[next(pool.len())];
            let b = pool[next(pool.len())];
            let name = &names[next(names.len())];
            let mut out: H = null_mut();
            let code = match next(14) {
                0 => e5rt_execution_stream_create(&mut out),
                1 => e5rt_buffer_object_alloc(&mut out, [0, 8, 64, 128][next(4)], next(4) as u32),
                2 => e5rt_execution_stream_operation_retain_input_port(a, name.as_ptr(), &mut out),
                3 => e5rt_execution_stream_operation_retain_output_port(a, name.as_ptr(), &mut out),
                4 => e5rt_io_port_bind_buffer_object(a, b),
                5 => e5rt_execution_stream_encode_operation(a, b),
                6 => e5rt_execution_stream_execute_sync(a),
                7 => e5rt_execution_stream_reset(a),
                8 => e5rt_execution_stream_operation_prepare_op_for_encode(a),
                9 => {
                    let mut h = a;
                    [
                        e5rt_io_port_release,
                        e5rt_buffer_object_release,
                        e5rt_execution_stream_release,
                        e5rt_async_event_release,
                    ][next(4)](&mut h)
                }
                10 => e5rt_async_event_create(&mut out, name.as_ptr(), 0),
                11 => e5rt_execution_stream_operation_bind_completion_event(a, b),
                12 => {
                    let mut ptr = null_mut();
                    e5rt_buffer_object_get_data_ptr(a, &mut ptr)
                }
                _ => e5rt_io_port_retain_tensor_desc(a, &mut out),
            };
            assert!((0..=8).contains(&code), "code {code}: {}", last_error());
            *codes.entry(code).or_insert(0) += 1;
            if !out.is_null() {
                pool.push(out);
            }
        }
        assert!(codes.get(&0).copied().unwrap_or(0) > 100, "{codes:?}");
        assert!(codes.len() >= 4, "a variety of outcomes: {codes:?}");
        // handles issued by the run are left to the process; the operation chain is released
        release_op(op);
    }
}
