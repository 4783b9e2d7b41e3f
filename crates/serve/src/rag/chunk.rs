//! Cutting a document into chunks of whole lines, each at most `max_chars` long (a longer line is
//! split at whitespace), consecutive chunks sharing up to `overlap_chars` of lines so that a
//! passage cut by a chunk boundary is whole in one of the two chunks.
//!
//! Each chunk is cut again into units of at most `unit_chars` (whole pieces of lines, a blank line
//! ending a unit once it holds half of that). Units are what the index searches, chunks what it
//! cites ("small-to-big" retrieval): a unit's embedding and words are about a few lines, and the
//! chunk that holds it gives the LLM the surrounding text. A unit inside a paragraph opened by a
//! speaker label (a play's `Ham.` or `FIRST WITCH.` line) starts with that label, so every part of
//! a speech can be found by its speaker's name.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkOptions {
    pub max_chars: usize,
    pub overlap_chars: usize,
    /// The longest unit in bytes, not counting its speaker label.
    pub unit_chars: usize,
}

impl Default for ChunkOptions {
    /// About 200 MiniLM tokens of English per chunk, under its 256-token window; units of a few
    /// lines of verse.
    fn default() -> Self {
        ChunkOptions {
            max_chars: 800,
            overlap_chars: 200,
            unit_chars: 300,
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
        if self.unit_chars == 0 || self.unit_chars > self.max_chars {
            return Err(format!(
                "units need 0 < unit_chars <= max_chars, got {} with chunks of {}",
                self.unit_chars, self.max_chars
            ));
        }
        Ok(())
    }
}

/// A searched part of a chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// First and last line (1-based, inclusive) of the unit's text.
    pub start_line: usize,
    pub end_line: usize,
    /// What is embedded and indexed by words: the speaker label of the paragraph the unit starts
    /// in (when the unit does not start with it), then the unit's lines.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Position of the chunk in its document, from 0.
    pub seq: usize,
    /// First and last line (1-based, inclusive) the chunk's text comes from.
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// The chunk's text cut into units, in order; together they hold every line of the chunk.
    pub units: Vec<Unit>,
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

/// Whether pieces `a` and `b` (`a` before `b`) are separated by a blank line.
fn paragraph_break(a: &Piece<'_>, b: &Piece<'_>) -> bool {
    b.line > a.line + 1
}

/// Whether `text` reads as a speaker label: at most 40 bytes and four words, ending with a
/// period, each word letters, digits and apostrophes (then an optional `.` or `,`), capitalised
/// or starting with a digit, except `and` and `of` after the first (`Ham.`, `FIRST WITCH.`,
/// `Lady Capulet.`, `1 Clown.`, `Mar. and Ber.`).
pub fn is_speaker_label(text: &str) -> bool {
    let text = text.trim();
    let words: Vec<&str> = text.split_whitespace().collect();
    if text.len() > 40 || !text.ends_with('.') || words.is_empty() || words.len() > 4 {
        return false;
    }
    words.iter().enumerate().all(|(i, w)| {
        let core = w.trim_end_matches(['.', ',']);
        let Some(first) = core.chars().next() else {
            return false;
        };
        core.chars().all(|c| c.is_alphanumeric() || c == '\'')
            && (first.is_uppercase()
                || first.is_ascii_digit()
                || (i > 0 && (core == "and" || core == "of")))
    })
}

/// For each piece, the index of the speaker label opening its paragraph, if one does: a whole
/// line that reads as a label, first in its paragraph and followed by the paragraph's next line.
fn speakers(pieces: &[Piece<'_>]) -> Vec<Option<usize>> {
    let mut out = Vec::with_capacity(pieces.len());
    let mut current = None;
    for (i, p) in pieces.iter().enumerate() {
        let opens = i == 0 || paragraph_break(&pieces[i - 1], p);
        if opens {
            let continues = pieces.get(i + 1).is_some_and(|n| n.line == p.line + 1);
            current = (continues && is_speaker_label(p.text)).then_some(i);
        }
        out.push(current);
    }
    out
}

/// The units of the chunk made of `pieces[start..end]`: greedy runs of whole pieces of at most
/// `max` bytes (a single longer piece is a unit of its own), a blank line ending a run that holds
/// at least `max / 2`.
fn units(
    pieces: &[Piece<'_>],
    speakers: &[Option<usize>],
    start: usize,
    end: usize,
    max: usize,
) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut s = start;
    while s < end {
        let mut e = s;
        let mut len = 0;
        while e < end {
            let add = pieces[e].text.len() + usize::from(e > s);
            if e > s
                && (len + add > max
                    || (paragraph_break(&pieces[e - 1], &pieces[e]) && len >= max / 2))
            {
                break;
            }
            len += add;
            e += 1;
        }
        let mut text = String::new();
        if let Some(label) = speakers[s].filter(|&l| l != s) {
            text.push_str(pieces[label].text);
            text.push('\n');
        }
        let lines: Vec<&str> = pieces[s..e].iter().map(|p| p.text).collect();
        text.push_str(&lines.join("\n"));
        out.push(Unit {
            start_line: pieces[s].line,
            end_line: pieces[e - 1].line,
            text,
        });
        s = e;
    }
    out
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
    let speakers = speakers(&pieces);
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
            units: units(&pieces, &speakers, start, end, opts.unit_chars),
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
            unit_chars: max,
        }
    }

    /// A unit's lines, without the speaker label it may start with.
    fn own_text<'a>(u: &'a Unit, chunk_text: &str) -> &'a str {
        match u.text.split_once('\n') {
            Some((first, rest)) if !chunk_text.contains(&u.text) => {
                assert!(is_speaker_label(first), "{:?}", u.text);
                rest
            }
            _ => &u.text,
        }
    }

    #[test]
    fn units_cut_each_chunk_in_order_and_fit() {
        let text: String = (1..=300)
            .map(|i| {
                let blank = if i % 7 == 0 { "\n" } else { "" };
                format!("verse line {i} of the play{blank}\n")
            })
            .collect();
        let o = ChunkOptions {
            max_chars: 400,
            overlap_chars: 100,
            unit_chars: 120,
        };
        let chunks = chunk(&text, &o);
        assert!(chunks.len() > 10);
        for c in &chunks {
            assert!(c.units.len() > 1);
            assert_eq!(c.units[0].start_line, c.start_line);
            assert_eq!(c.units.last().unwrap().end_line, c.end_line);
            let mut rebuilt = Vec::new();
            for (i, u) in c.units.iter().enumerate() {
                assert!(u.text.len() <= o.unit_chars, "{}", u.text.len());
                assert!(
                    c.text.contains(&u.text),
                    "a unit is a run of its chunk's lines"
                );
                if i > 0 {
                    assert!(
                        u.start_line > c.units[i - 1].end_line,
                        "units do not overlap"
                    );
                }
                rebuilt.push(u.text.as_str());
            }
            assert_eq!(rebuilt.join("\n"), c.text);
        }
        // a blank line ends a unit holding at least half of unit_chars: line 7 ends a paragraph
        // after 7 lines of about 27 bytes
        let first = &chunks[0].units[0];
        assert_eq!((first.start_line, first.end_line), (1, 4));
        let o = ChunkOptions {
            unit_chars: 200,
            ..o
        };
        let first = chunk(&text, &o)[0].units[0].clone();
        assert_eq!((first.start_line, first.end_line), (1, 7));
    }

    #[test]
    fn speaker_labels_are_short_capitalised_lines_ending_with_a_period() {
        for label in [
            "Ham.",
            "FIRST WITCH.",
            "Lady Capulet.",
            "1 Clown.",
            "Mar. and Ber.",
            "DUNCAN, King of Scotland.",
            "  Lear.  ",
        ] {
            assert!(is_speaker_label(label), "{label}");
        }
        for line in [
            "To be, or not to be,--that is the question:--",
            "O heavy burden!",
            "Double, double, toil and trouble;",
            "[Exit.]",
            "and so.",
            "Farewell, my lord",
            "Thus Says The Longest Label Of All.",
            "Ham",
            "",
            "Mr. Smith's 2nd chapter of many words.",
        ] {
            assert!(!is_speaker_label(line), "{line}");
        }
    }

    #[test]
    fn a_unit_inside_a_speech_starts_with_its_speaker() {
        let speech: String = (1..=12)
            .map(|i| format!("the {i}th line of a long speech in verse\n"))
            .collect();
        let text = format!(
            "[Enter Hamlet.]\n\nHam.\n{speech}\nFIRST WITCH.\nRound about the caldron go;\n\n\
             [Exeunt.]\nNo label opens this paragraph\nand it goes on here\n"
        );
        let o = ChunkOptions {
            max_chars: 300,
            overlap_chars: 80,
            unit_chars: 100,
        };
        let chunks = chunk(&text, &o);
        let mut headed = 0;
        for c in &chunks {
            for u in &c.units {
                let own = own_text(u, &c.text);
                assert!(c.text.contains(own));
                let header = u.text.strip_suffix(own).map(|h| h.trim_end());
                // lines 4-15 are Hamlet's speech after his label on line 3, line 18 the witch's
                let want = match u.start_line {
                    4..=15 => "Ham.",
                    18 => "FIRST WITCH.",
                    _ => "",
                };
                assert_eq!(header, Some(want), "{u:?}");
                headed += usize::from(!want.is_empty());
            }
        }
        assert!(headed >= 4, "{chunks:#?}");
        // a unit that holds the label line does not repeat it
        let all: Vec<&Unit> = chunks.iter().flat_map(|c| &c.units).collect();
        assert!(all
            .iter()
            .any(|u| u.text.starts_with("[Enter Hamlet.]\nHam.\nthe 1th")));
        assert!(all.iter().all(|u| u.text.matches("Ham.").count() <= 1));
        assert!(all
            .iter()
            .any(|u| u.text.contains("FIRST WITCH.\nRound about")));
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
