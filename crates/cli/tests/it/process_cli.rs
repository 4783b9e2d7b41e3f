//! What every command does as a Unix process: a closed stdout ends it quietly, no subcommand
//! prints the help to stderr with status 2, errors are one `error:` report (with the causes) and
//! status 1 without a backtrace, and shells get completion scripts.
#![cfg(unix)]

use crate::common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

fn aneforge() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aneforge"));
    c.env_remove("ANEFORGE_TARGET")
        .env_remove("ANEFORGE_E5RT_LIB")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    c
}

/// The write end of a pipe whose read end is already closed: the first write to it fails.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe() fills both descriptors, which this function then owns
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        Stdio::from(OwnedFd::from_raw_fd(fds[1]))
    }
}

fn into_closed_pipe(args: &[&str]) -> Output {
    aneforge()
        .args(args)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    let encoder = common::repo("tools/fixtures/out/st_tiny");
    let commands: [&[&str]; 6] = [
        &["targets"],
        &["ops", "--target", "h16", "--mil"],
        &["completions", "bash"],
        &["compile", "--list"],
        &["embed", "-m", &encoder, "a", "b"],
        &["generate", "-m", &llama, "hello", "-n", "8", "--temp", "0"],
    ];
    for args in commands {
        let out = into_closed_pipe(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
}

#[test]
fn no_subcommand_prints_the_help_to_stderr_and_exits_2() {
    let out = aneforge().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Usage: aneforge") && err.contains("generate"),
        "{err}"
    );
}

#[test]
fn errors_are_reported_once_with_their_causes_and_no_backtrace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), "program(1.3)\n{\n").unwrap();
    for backtrace in ["0", "1", "full"] {
        let out = aneforge()
            .args(["mil", "check", dir.to_str().unwrap()])
            .env("RUST_BACKTRACE", backtrace)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("is not a valid program directory"), "{err}");
        assert!(err.contains("\n  caused by: "), "{err}");
        assert!(
            !err.to_lowercase().contains("backtrace") && !err.contains("Error:"),
            "RUST_BACKTRACE={backtrace}: {err}"
        );
    }
    let out = aneforge()
        .args(["ops", "--target", "h99"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _aneforge"),
        ("zsh", "#compdef aneforge"),
        ("fish", "complete -c aneforge"),
    ] {
        let out = aneforge().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(marker),
            "{shell}: {}",
            &text[..200.min(text.len())]
        );
        assert!(
            text.contains("draft-model") && text.contains("threads"),
            "{shell}"
        );
    }
    let out = aneforge().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
