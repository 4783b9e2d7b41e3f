//! A closed stdout ends the process quietly, as it ends `cat` or `grep`: the default SIGPIPE
//! action instead of Rust's ignored signal, which turns every later `println!` into a panic.

#[cfg(unix)]
pub fn restore_default() {
    // SAFETY: setting a signal disposition to SIG_DFL before any other thread exists
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
pub fn restore_default() {}

/// Whether `error` comes from writing to a pipe whose reader has gone (where SIGPIPE does not
/// end the process first).
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
