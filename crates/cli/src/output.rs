//! `--format text|json|jsonl`: how every command with structured output prints it (`--json` is
//! kept as a hidden spelling of `--format jsonl`).

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Lines for people.
    Text,
    /// One JSON document.
    Json,
    /// One JSON object per line.
    Jsonl,
}

#[derive(clap::Args, Clone, Debug)]
pub struct FormatArgs {
    /// Output format: text, json (one document) or jsonl (one object per line).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[arg(long, hide = true, conflicts_with = "format")]
    json: bool,
}

impl FormatArgs {
    pub fn get(&self) -> Format {
        if self.json {
            Format::Jsonl
        } else {
            self.format
        }
    }

    pub fn is_text(&self) -> bool {
        self.get() == Format::Text
    }
}

/// Prints `items` as one JSON array (json) or one object per line (jsonl).
pub fn print_json<T: serde::Serialize>(format: Format, items: &[T]) -> anyhow::Result<()> {
    if format == Format::Json {
        println!("{}", serde_json::to_string(items)?);
    } else {
        for item in items {
            println!("{}", serde_json::to_string(item)?);
        }
    }
    Ok(())
}
