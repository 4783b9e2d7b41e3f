//! Cutting a document into chunks of whole lines, each at most `max_chars` long (a longer line is
//! split at whitespace), consecutive chunks sharing up to `overlap_chars` of lines so that a
//! passage cut by a chunk boundary is whole in one of the two chunks.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkOptions {
    pub max_chars: usize,
    pub overlap_chars: usize,
}

impl Default for ChunkOptions {
    /// About 200 MiniLM tokens of English per chunk, under its 256-token window.
    fn default() -> Self {
        ChunkOptions {
            max_chars: 800,
            overlap_chars: 200,
        }
    }
}

impl ChunkOptions {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_chars == 0 || self.overlap_chars >= self.max_chars {
            return Err(format!(
                "chunks need max_chars > 0 and overlap_chars < max_chars, got {} and {}",
                self.max_chars, self.overlap_chars
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Position of the chunk in its document, from 0.
    pub seq: usize,
    /// First and last line (1-based, inclusive) the chunk's text comes from.
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
}

/// A piece of one line, at most `max_chars` long.
struct Piece<'a> {
    line: usize,
    text: &'a str,
}

/// Splits `line` at whitespace (or, for a word longer than `max`, at a character boundary) into
/// pieces of at most `max` bytes (a single character longer than `max` is a piece of its own).
fn split_line<'a>(line: &'a str, max: usize, out: &mut Vec<&'a str>) {
    let mut rest = line;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut == 0 {
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let at = match rest[..cut].rfind(char::is_whitespace) {
            Some(i) if i > 0 => i,
            _ => cut,
        };
        out.push(&rest[..at]);
        rest = rest[at..].trim_start();
    }
    if !rest.is_empty() {
        out.push(rest);
    }
}

/// The chunks of `text`; blank lines separate but never start or end a chunk, and a document
/// without text has no chunks.
pub fn chunk(text: &str, opts: &ChunkOptions) -> Vec<Chunk> {
    let mut pieces = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = Vec::new();
        split_line(line, opts.max_chars, &mut parts);
        pieces.extend(parts.into_iter().map(|p| Piece {
            line: i + 1,
            text: p,
        }));
    }
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < pieces.len() {
        // take pieces while they fit (the first always does)
        let mut end = start;
        let mut len = 0;
        while end < pieces.len() {
            let add = pieces[end].text.len() + usize::from(end > start);
            if end > start && len + add > opts.max_chars {
                break;
            }
            len += add;
            end += 1;
        }
        let text = pieces[start..end]
            .iter()
            .map(|p| p.text)
            .collect::<Vec<_>>()
            .join("\n");
        chunks.push(Chunk {
            seq: chunks.len(),
            start_line: pieces[start].line,
            end_line: pieces[end - 1].line,
            text,
        });
        if end == pieces.len() {
            break;
        }
        // the next chunk repeats the last pieces that fit in the overlap, and always advances
        let mut next = end;
        let mut overlap = 0;
        while next > start + 1 {
            let add = pieces[next - 1].text.len() + 1;
            if overlap + add > opts.overlap_chars {
                break;
            }
            overlap += add;
            next -= 1;
        }
        start = next;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(max: usize, overlap: usize) -> ChunkOptions {
        ChunkOptions {
            max_chars: max,
            overlap_chars: overlap,
        }
    }

    #[test]
    fn every_line_is_in_a_chunk_and_chunks_fit_and_overlap() {
        let text: String = (1..=200)
            .map(|i| format!("line number {i} of the text\n"))
            .collect();
        let o = opts(120, 40);
        let chunks = chunk(&text, &o);
        assert!(chunks.len() > 10);
        let mut covered = vec![false; 201];
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c.seq, i);
            assert!(c.text.len() <= o.max_chars, "{}", c.text.len());
            for (l, seen) in covered
                .iter_mut()
                .enumerate()
                .take(c.end_line + 1)
                .skip(c.start_line)
            {
                *seen = true;
                assert!(c.text.contains(&format!("line number {l} of")));
            }
            if i > 0 {
                let prev = &chunks[i - 1];
                assert!(c.start_line > prev.start_line, "chunks advance");
                assert!(c.start_line <= prev.end_line, "consecutive chunks overlap");
            }
        }
        assert!(covered[1..].iter().all(|&c| c));
    }

    #[test]
    fn long_lines_split_at_whitespace_and_blank_documents_have_no_chunks() {
        let line = "word ".repeat(100);
        let chunks = chunk(&line, &opts(64, 0));
        assert!(chunks
            .iter()
            .all(|c| c.text.len() <= 64 && !c.text.is_empty()));
        let words: usize = chunks
            .iter()
            .map(|c| c.text.split_whitespace().count())
            .sum();
        assert_eq!(words, 100);
        assert!(chunk("\n  \n\n", &opts(64, 0)).is_empty());
        let unbroken = "é".repeat(100);
        let chunks = chunk(&unbroken, &opts(33, 0));
        assert_eq!(
            chunks.iter().map(|c| c.text.chars().count()).sum::<usize>(),
            100
        );
    }
}
