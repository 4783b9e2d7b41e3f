//! Error codes, the per-thread last error message, and the guard every export runs its body in.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// The simulator's error codes. Apple's numeric codes are not public; these are our own, and the
/// engine only relies on "0 is success".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum Code {
    /// A null pointer, a string that is not UTF-8, or a value out of range.
    InvalidArgument = 1,
    /// A handle that is null, released, never issued, or of another object kind.
    InvalidHandle = 2,
    /// A call in the wrong order: binding after encode, executing before encode, ...
    InvalidState = 3,
    /// A function or port name the program does not have.
    NotFound = 4,
    /// The program could not be read, parsed or planned.
    CompileFailed = 5,
    /// Too many programs loaded in this process.
    ResourceLimit = 6,
    /// Running an encoded operation failed.
    ExecutionFailed = 7,
    /// A buffer could not be allocated.
    OutOfMemory = 8,
    /// A Rust panic inside the simulator (a bug); caught at the C boundary.
    Internal = 9,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError {
    pub code: Code,
    pub message: String,
}

impl SimError {
    pub fn new(code: Code, message: impl Into<String>) -> SimError {
        SimError {
            code,
            message: message.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, SimError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(call: &str, message: &str) {
    let text = format!("{message} @ {call}").replace('\0', " ");
    let text = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// The calling thread's last error text; valid until the next failing call on this thread.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs an export's body: returns 0 on success, the error's code otherwise (recording its text
/// for `e5rt_get_last_error_message`). Panics are caught here so none crosses the C boundary.
pub fn guard(call: &str, body: impl FnOnce() -> Result<()>) -> i64 {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    let error = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            SimError::new(Code::Internal, format!("internal error: {what}"))
        }
    };
    set_last_error(call, &error.message);
    error.code as i64
}
