//! Tokens of MIL text, each with the line and column (1-based, in characters) where it starts.

use super::ParseError;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    /// Decimal integer as written, sign included.
    Int(String),
    /// Hex or decimal float (or `-inf`) as written.
    Float(String),
    /// A string literal, escapes decoded.
    Str(String),
    Punct(char),
    Arrow,
    Eof,
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
    pub column: usize,
}

impl Tok {
    /// How an error message names this token.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => format!("'{}'", clip(s)),
            Tok::Str(s) => format!("string \"{}\"", clip(s)),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Arrow => "'->'".into(),
            Tok::Eof => "the end of the input".into(),
        }
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() > 40 {
        let head: String = s.chars().take(40).collect();
        format!("{head}...")
    } else {
        s.to_string()
    }
}

struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    src: &'a str,
    line: usize,
    column: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().map(|&(_, c)| c)
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.chars.clone();
        it.next();
        it.next().map(|(_, c)| c)
    }

    fn offset(&mut self) -> usize {
        self.chars.peek().map_or(self.src.len(), |&(i, _)| i)
    }

    fn bump(&mut self) -> Option<char> {
        let (_, c) = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.offset();
        while self.peek().is_some_and(&f) {
            self.bump();
        }
        let end = self.offset();
        &self.src[start..end]
    }
}

fn error(line: usize, column: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        column,
        message: message.into(),
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

pub fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut cur = Cursor {
        chars: src.char_indices().peekable(),
        src,
        line: 1,
        column: 1,
    };
    let mut out = Vec::new();
    loop {
        // Whitespace and `//` line comments.
        loop {
            match cur.peek() {
                Some(c) if c.is_whitespace() => {
                    cur.bump();
                }
                Some('/') if cur.peek2() == Some('/') => {
                    cur.take_while(|c| c != '\n');
                }
                _ => break,
            }
        }
        let (line, column) = (cur.line, cur.column);
        let Some(c) = cur.peek() else {
            out.push(Token {
                tok: Tok::Eof,
                line,
                column,
            });
            return Ok(out);
        };
        let tok = if is_ident_start(c) {
            Tok::Ident(cur.take_while(is_ident_char).to_string())
        } else if c.is_ascii_digit() || ((c == '-' || c == '+') && starts_number(cur.peek2())) {
            number(&mut cur, line, column)?
        } else if c == '-' && cur.peek2() == Some('>') {
            cur.bump();
            cur.bump();
            Tok::Arrow
        } else if c == '"' {
            Tok::Str(string(&mut cur, line, column)?)
        } else if "()[]{}<>,=;?".contains(c) {
            cur.bump();
            Tok::Punct(c)
        } else {
            return Err(error(line, column, format!("unexpected character {c:?}")));
        };
        out.push(Token { tok, line, column });
    }
}

fn starts_number(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_digit() || c == 'i' || c == 'n')
}

fn number(cur: &mut Cursor<'_>, line: usize, column: usize) -> Result<Tok, ParseError> {
    let start = cur.offset();
    if matches!(cur.peek(), Some('-' | '+')) {
        cur.bump();
    }
    if cur.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
        // `-inf`, `+inf`, `-nan`
        let word = cur.take_while(is_ident_char);
        if word != "inf" && word != "nan" {
            return Err(error(
                line,
                column,
                format!("expected a number after the sign, found '{word}'"),
            ));
        }
        let end = cur.offset();
        return Ok(Tok::Float(cur.src[start..end].to_string()));
    }
    let is_hex = cur.peek() == Some('0') && matches!(cur.peek2(), Some('x' | 'X'));
    let mut is_float = false;
    if is_hex {
        cur.bump();
        cur.bump();
        cur.take_while(|c| c.is_ascii_hexdigit() || c == '.');
        if !matches!(cur.peek(), Some('p' | 'P')) {
            return Err(error(
                line,
                column,
                "a hex float needs a 'p' exponent (as in 0x1.8p+1)",
            ));
        }
        cur.bump();
        if matches!(cur.peek(), Some('+' | '-')) {
            cur.bump();
        }
        cur.take_while(|c| c.is_ascii_digit());
        is_float = true;
    } else {
        cur.take_while(|c| c.is_ascii_digit());
        if cur.peek() == Some('.') {
            is_float = true;
            cur.bump();
            cur.take_while(|c| c.is_ascii_digit());
        }
        if matches!(cur.peek(), Some('e' | 'E')) {
            is_float = true;
            cur.bump();
            if matches!(cur.peek(), Some('+' | '-')) {
                cur.bump();
            }
            cur.take_while(|c| c.is_ascii_digit());
        }
    }
    if cur.peek().is_some_and(is_ident_char) {
        let bad = cur.peek().unwrap_or(' ');
        return Err(error(
            cur.line,
            cur.column,
            format!("unexpected {bad:?} in a number"),
        ));
    }
    let end = cur.offset();
    let text = cur.src[start..end].to_string();
    Ok(if is_float {
        Tok::Float(text)
    } else {
        Tok::Int(text)
    })
}

fn string(cur: &mut Cursor<'_>, line: usize, column: usize) -> Result<String, ParseError> {
    cur.bump();
    let mut out = String::new();
    loop {
        let (l, c) = (cur.line, cur.column);
        match cur.bump() {
            None => return Err(error(line, column, "unterminated string literal")),
            Some('"') => return Ok(out),
            Some('\n') => {
                return Err(error(
                    line,
                    column,
                    "unterminated string literal (newline before the closing '\"')",
                ))
            }
            Some('\\') => {
                let escaped = match cur.bump() {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('0') => '\0',
                    Some('x') => {
                        let hex: String = [cur.bump(), cur.bump()].into_iter().flatten().collect();
                        match u8::from_str_radix(&hex, 16) {
                            Ok(b) if hex.len() == 2 && b < 0x80 => b as char,
                            _ => {
                                return Err(error(
                                    l,
                                    c,
                                    "expected two hex digits (00-7f) after \\x in a string",
                                ))
                            }
                        }
                    }
                    other => {
                        return Err(error(
                            l,
                            c,
                            format!(
                                "unknown escape {} in a string",
                                other.map_or("at the end of the input".into(), |ch| format!(
                                    "'\\{ch}'"
                                ))
                            ),
                        ))
                    }
                };
                out.push(escaped);
            }
            Some(ch) => out.push(ch),
        }
    }
}

/// The string as a MIL string literal body (without quotes), escaping what [`lex`] decodes.
pub fn escape(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
}
