//! Texts and prompts from the command line, a file, or stdin (`-` names stdin wherever a file is
//! taken, and stdin is read when neither texts nor a file are given).

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;

/// The texts of `embed` and the passages of `rerank`: `--file` (one per line), else the arguments,
/// else stdin (one per line); a lone `-` argument is stdin too.
pub fn texts(args: &[String], file: Option<&Path>, what: &str) -> anyhow::Result<Vec<String>> {
    match (file, args) {
        (Some(path), _) => read_lines(path),
        (None, [only]) if only == "-" => read_lines(Path::new("-")),
        (None, []) => {
            hint_terminal(&format!("{what}, one per line"));
            read_lines(Path::new("-"))
        }
        (None, _) => Ok(args.to_vec()),
    }
}

/// The prompt of `generate`: the argument (`-` is stdin), else `--file`, else stdin; the final
/// line ending of a file or stdin is dropped.
pub fn prompt(arg: Option<&str>, file: Option<&Path>) -> anyhow::Result<String> {
    let mut text = match (arg, file) {
        (Some(p), _) if p != "-" => return Ok(p.to_string()),
        (Some(_), _) => read_text(Path::new("-"))?,
        (None, Some(path)) => read_text(path)?,
        (None, None) => {
            hint_terminal("the prompt");
            read_text(Path::new("-"))?
        }
    };
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

fn hint_terminal(what: &str) {
    if std::io::stdin().is_terminal() {
        eprintln!("reading {what} from stdin (Ctrl-D ends)");
    }
}

/// The largest text input (prompts, texts to embed) read from a file or stdin.
const MAX_TEXT_BYTES: u64 = 256 << 20;

fn read_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    use aneforge_mil::bounded::{any_start, read_file, read_stream};
    if path == Path::new("-") {
        read_stream(
            std::io::stdin().lock(),
            MAX_TEXT_BYTES,
            "text input",
            any_start,
        )
        .context("cannot read stdin")
    } else {
        read_file(path, MAX_TEXT_BYTES, "text input", any_start)
            .with_context(|| format!("cannot read {}", path.display()))
    }
}

fn display_name(path: &Path) -> String {
    if path == Path::new("-") {
        "<stdin>".into()
    } else {
        path.display().to_string()
    }
}

/// A whole UTF-8 file (`-`: stdin).
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    String::from_utf8(read_bytes(path)?).map_err(|e| {
        anyhow::anyhow!(
            "{}: invalid UTF-8 at byte {}",
            display_name(path),
            e.utf8_error().valid_up_to()
        )
    })
}

/// One text per line (`-`: stdin): every line is a text (empty lines are empty texts), a final
/// newline does not start another; `\r\n` endings are accepted. Invalid UTF-8 is an error naming
/// the line.
pub fn read_lines(path: &Path) -> anyhow::Result<Vec<String>> {
    let bytes = read_bytes(path)?;
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    body.split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            std::str::from_utf8(line).map(str::to_string).map_err(|e| {
                anyhow::anyhow!(
                    "{}:{}: invalid UTF-8 at byte {} of the line",
                    display_name(path),
                    i + 1,
                    e.valid_up_to()
                )
            })
        })
        .collect()
}
