//! Chat templates (Jinja, as Hugging Face tokenizers ship them) rendered with minijinja, set up as
//! transformers renders them: `trim_blocks` and `lstrip_blocks`, loop controls, Python string
//! methods, `raise_exception`, `strftime_now`, a `tojson` that prints like Python's `json.dumps`,
//! and the variables `messages`, `add_generation_prompt`, `bos_token`, `eos_token`. A template that
//! fails to compile or render is an error (execution is bounded, so a runaway loop is one too).

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("chat template does not compile: {0}")]
    Compile(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
    #[error("chat template output exceeds {limit} bytes (the cap for these messages); a template that grows its text without bound?")]
    TooLong { limit: usize },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// Execution budget of one render (template instructions).
const FUEL: u64 = 5_000_000;

/// Rendered text allowed beyond twice the messages' own bytes: fuel bounds the instructions of a
/// render but not the text one instruction can produce (a string doubled 64 times).
const OUTPUT_ALLOWANCE: usize = 16 << 20;

/// A `Write` that refuses to grow past `limit` bytes.
struct CappedOutput {
    text: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len().saturating_add(buf.len()) > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("chat template output too long"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    bos: Option<String>,
    eos: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

fn describe(e: &JinjaError) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=..., separators=...)`.
fn to_json(
    value: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> Result<(), JinjaError> {
    let (item_sep, key_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(value.clone()) {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
                let s = serde_json::to_string(&f).unwrap_or_else(|_| "NaN".into());
                out.push_str(&s);
            }
        }
        ValueKind::String => {
            let s = serde_json::to_string(value.as_str().unwrap_or("")).unwrap_or_default();
            out.push_str(&s);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                to_json(item, indent, level + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, level);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = value.try_iter()?.collect();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                let key = k
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| k.to_string());
                out.push_str(&serde_json::to_string(&key).unwrap_or_default());
                out.push_str(key_sep);
                to_json(&value.get_item(k)?, indent, level + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, level);
            }
            out.push('}');
        }
        _ => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialise a {}", value.kind()),
            ))
        }
    }
    Ok(())
}

fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    to_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// `strftime_now(format)`: the current UTC time with the common `strftime` codes.
fn strftime_now(format: String) -> Result<Value, JinjaError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(Value::from(strftime(&format, secs)))
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31): Howard Hinnant's civil_from_days.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub(crate) fn strftime(format: &str, unix_secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('B') => out.push_str(month),
            Some('b') | Some('h') => out.push_str(&month[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the texts of the special tokens templates refer to.
    pub fn new(
        source: &str,
        bos: Option<String>,
        eos: Option<String>,
    ) -> Result<ChatTemplate, ChatTemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| ChatTemplateError::Compile(describe(&e)))?;
        Ok(ChatTemplate { env, bos, eos })
    }

    /// The prompt text for `messages`; `add_generation_prompt` opens the assistant's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| ChatTemplateError::Compile(describe(&e)))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.clone().unwrap_or_default(),
            eos_token => self.eos.clone().unwrap_or_default(),
            tools => Value::from(()),
            documents => Value::from(()),
        };
        let message_bytes: usize = messages
            .iter()
            .map(|m| m.role.len() + m.content.len())
            .sum();
        let mut out = CappedOutput {
            text: Vec::new(),
            limit: message_bytes
                .saturating_mul(2)
                .saturating_add(OUTPUT_ALLOWANCE),
            exceeded: false,
        };
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.text)
                .map_err(|e| ChatTemplateError::Render(format!("output is not UTF-8: {e}"))),
            Err(_) if out.exceeded => Err(ChatTemplateError::TooLong { limit: out.limit }),
            Err(e) => Err(ChatTemplateError::Render(describe(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday
        let t = 1_709_211_909;
        assert_eq!(strftime("%d %b %Y", t), "29 Feb 2024");
        assert_eq!(
            strftime("%A %B %e %H:%M:%S %y %%", t),
            "Thursday February 29 13:05:09 24 %"
        );
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
    }
}
