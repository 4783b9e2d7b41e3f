//! The ANE engine over ports the runtime lays out with padded rows (the simulator configured to
//! round rows up to 64 bytes). A test binary of its own: the simulator's layout is process-wide.

mod ane_support;

use ane_support::suite::{self, Agreement};
use ane_support::{sim_engine, simulator_library, write_program};
use aneforge::engine::{BufferMut, Executable, HostSlice};
use std::ffi::c_int;

type Configure = unsafe extern "C" fn(u64, c_int, u64) -> i64;

/// Pads rows to `row_alignment` bytes and reports strides in bytes or elements.
fn configure_simulator(row_alignment: u64, strides_in_bytes: bool) {
    // SAFETY: the simulator library exports `e5rt_sim_configure` with this signature; loading it
    // again returns the same (already loaded) library the engine uses.
    unsafe {
        let lib = libloading::Library::new(simulator_library()).unwrap();
        let configure = lib.get::<Configure>(b"e5rt_sim_configure").unwrap();
        assert_eq!(
            configure(row_alignment, c_int::from(strides_in_bytes), 0),
            0
        );
        // keep the library loaded for the rest of the process
        std::mem::forget(lib);
    }
}

const STATE: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [1, 3, 5]> x, tensor<fp16, [1, 3, 5]> acc) {
            tensor<fp16, [1, 3, 5]> acc_out = add(x = acc, y = x)[name = string("acc_out")];
        } -> (acc_out);
}
"#;

#[test]
fn padded_rows_are_scattered_gathered_and_executed_and_have_no_dense_view() {
    for strides_in_bytes in [false, true] {
        configure_simulator(64, strides_in_bytes);
        let scratch = tempfile::tempdir().unwrap();
        let engine = sim_engine(scratch.path());
        let dir = write_program(scratch.path(), "state", STATE, None);
        let mut program = engine.load_dir(&dir).unwrap();
        let values: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 3.0).collect();
        program.set_input("acc", HostSlice::F32(&values)).unwrap();
        let err = program.input_view_mut("acc").unwrap_err();
        assert!(
            err.to_string()
                .contains("padding (byte strides [192, 64, 2])"),
            "{err}"
        );
        // sharing copies the input's (padded) buffer into the output's: read back through it
        program.share_buffer("acc_out", "acc").unwrap();
        assert_eq!(program.read_output_f32("acc_out").unwrap(), values);
        let err = program.output_view("acc_out").unwrap_err();
        assert!(
            err.to_string().contains("use set_input/read_output"),
            "{err}"
        );

        // executing over padded buffers gives the CPU engine's results exactly
        let run = scratch.path().join("suite");
        std::fs::create_dir_all(&run).unwrap();
        suite::fp16_programs_match_the_cpu_engine(&engine, &run, Agreement::Identical);
        suite::accumulator(&engine, &run, Agreement::Identical);
        suite::kv_cache_slice_update(&engine, &run, Agreement::Identical);
        suite::training_step(&engine, &run, Agreement::Identical);
    }
    configure_simulator(0, false);
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = write_program(scratch.path(), "state", STATE, None);
    let mut program = engine.load_dir(&dir).unwrap();
    assert!(matches!(
        program.input_view_mut("acc").unwrap(),
        BufferMut::F16(v) if v.len() == 15
    ));
}
