//! The per-process program limit (a test binary of its own: the limit is process-wide).

use e5rt_sim::*;
use std::ffi::{c_void, CStr, CString};
use std::ptr::null_mut;

const RESOURCE_LIMIT: i64 = 6;

const PROGRAM: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp32, [4]> x) {
            tensor<fp32, [4]> y = relu(x = x)[name = string("y")];
        } -> (y);
}
"#;

/// # Safety
/// `mil` must be a valid C string.
unsafe fn compile(mil: &CString) -> (i64, *mut c_void) {
    let (mut compiler, mut options, mut library) = (null_mut(), null_mut(), null_mut());
    assert_eq!(e5rt_e5_compiler_create(&mut compiler), 0);
    assert_eq!(e5rt_e5_compiler_options_create(&mut options), 0);
    assert_eq!(
        e5rt_e5_compiler_options_set_compute_device_types_mask(options, 0x4),
        0
    );
    let code = e5rt_e5_compiler_compile(compiler, mil.as_ptr(), options, &mut library);
    assert_eq!(e5rt_e5_compiler_options_release(&mut options), 0);
    assert_eq!(e5rt_e5_compiler_release(&mut compiler), 0);
    (code, library)
}

fn live_programs() -> u64 {
    let (mut a, mut programs, mut c, mut d) = (0, 0, 0, 0);
    // SAFETY: four valid out-pointers.
    assert_eq!(
        unsafe { e5rt_sim_stats(&mut a, &mut programs, &mut c, &mut d) },
        0
    );
    programs
}

#[test]
fn the_program_past_the_limit_fails_until_one_is_released() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.mil"), PROGRAM).unwrap();
    let mil = CString::new(dir.path().join("model.mil").to_str().unwrap()).unwrap();
    // SAFETY: valid locals throughout.
    unsafe {
        assert_eq!(e5rt_sim_configure(0, 0, 3), 0);
        let mut libraries: Vec<*mut c_void> = (0..3)
            .map(|_| {
                let (code, library) = compile(&mil);
                assert_eq!(code, 0);
                library
            })
            .collect();
        assert_eq!(live_programs(), 3);
        let (code, library) = compile(&mil);
        assert_eq!(code, RESOURCE_LIMIT);
        assert!(library.is_null());
        let message = CStr::from_ptr(e5rt_get_last_error_message()).to_string_lossy();
        assert!(
            message.contains("already has 3 programs loaded"),
            "{message}"
        );

        // a library kept alive only by its function still occupies its slot
        let mut function = null_mut();
        let main = CString::new("main").unwrap();
        assert_eq!(
            e5rt_program_library_retain_program_function(
                libraries[0],
                main.as_ptr(),
                &mut function
            ),
            0
        );
        assert_eq!(e5rt_program_library_release(&mut libraries[0]), 0);
        assert_eq!(compile(&mil).0, RESOURCE_LIMIT);
        assert_eq!(e5rt_program_function_release(&mut function), 0);
        assert_eq!(live_programs(), 2);

        let (code, mut again) = compile(&mil);
        assert_eq!(code, 0);
        assert_eq!(e5rt_program_library_release(&mut again), 0);
        for library in libraries.iter_mut().skip(1) {
            assert_eq!(e5rt_program_library_release(library), 0);
        }
        assert_eq!(live_programs(), 0);
    }
}
