//! Output paths: atomic replace for regular files only, with a unique temporary name; FIFOs are
//! written directly; symlinks are written through, never replaced. All inside a temporary
//! directory (never the real /dev).

use aneforge::output::write_output;
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn regular_files_are_replaced_and_unrelated_siblings_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("X.json");
    let sibling = dir.path().join("X.tmp");
    std::fs::write(&sibling, "unrelated").unwrap();
    write_output(&out, b"one").unwrap();
    write_output(&out, b"two").unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"two");
    assert_eq!(std::fs::read(&sibling).unwrap(), b"unrelated");
    assert_eq!(names(dir.path()), ["X.json", "X.tmp"]);
}

#[cfg(unix)]
#[test]
fn symlinks_are_written_through() {
    let is_link = |p: &Path| {
        std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_symlink()
    };
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.json");
    std::fs::write(&real, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    write_output(&link, b"new").unwrap();
    assert!(is_link(&link));
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
    // a dangling link creates its target
    let dangling = dir.path().join("dangling.json");
    std::os::unix::fs::symlink("made.json", &dangling).unwrap();
    write_output(&dangling, b"made").unwrap();
    assert!(is_link(&dangling));
    assert_eq!(
        std::fs::read(dir.path().join("made.json")).unwrap(),
        b"made"
    );
}

#[cfg(unix)]
#[test]
fn fifos_are_written_directly() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    write_output(&fifo, b"through the pipe").unwrap();
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(names(dir.path()), ["pipe"]);
}
