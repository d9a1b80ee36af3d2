//! Stage 3: a kernel's source is `enable` directives + shared preamble + `\n` + file preamble +
//! section. The [`Assembled`] text remembers where each byte came from, so that an error naga
//! finds in the concatenation is reported in the original file, line and column.

use crate::source::Part;
use std::ops::Range;

/// A piece of assembled text copied from an original file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Range in the assembled text.
    pub dst: Range<usize>,
    /// Which part it came from.
    pub part: Part,
    /// Where the piece starts in that part's file.
    pub src_start: usize,
}

/// Assembled source with its map back to the original files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembled {
    /// The full WGSL source.
    pub text: String,
    /// The pieces that came from files (the injected directives and separator are not here).
    pub segments: Vec<Segment>,
}

/// One input of [`assemble`]: processed text of a part and where it starts in its file.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    /// The part's text (same length as the original: processing only blanks bytes).
    pub text: &'a str,
    /// Offset of the part in its original file.
    pub src_start: usize,
}

/// Builds a kernel's source. `prefix` holds the injected `enable` lines.
pub fn assemble(prefix: &str, shared: Option<Piece<'_>>, preamble: Piece<'_>, section: Piece<'_>) -> Assembled {
    let mut text = String::with_capacity(
        prefix.len() + shared.map_or(0, |s| s.text.len() + 1) + preamble.text.len() + section.text.len(),
    );
    let mut segments = Vec::new();
    text.push_str(prefix);
    let mut push = |text: &mut String, piece: Piece<'_>, part: Part| {
        let start = text.len();
        text.push_str(piece.text);
        segments.push(Segment { dst: start..text.len(), part, src_start: piece.src_start });
    };
    if let Some(shared) = shared {
        push(&mut text, shared, Part::Shared);
        text.push('\n');
    }
    push(&mut text, preamble, Part::FilePreamble);
    push(&mut text, section, Part::Section);
    Assembled { text, segments }
}

impl Assembled {
    /// The same source with `prefix` (injected `enable` directives) in front: the text naga
    /// saw, with every segment moved along, so its spans map back with the same lookup.
    pub fn prefixed(&self, prefix: &str) -> Assembled {
        let shift = prefix.len();
        Assembled {
            text: format!("{prefix}{}", self.text),
            segments: self
                .segments
                .iter()
                .map(|s| Segment { dst: s.dst.start + shift..s.dst.end + shift, ..s.clone() })
                .collect(),
        }
    }

    /// Maps an offset of the assembled text to (part, offset in that part's file).
    /// Offsets in injected text map to `None`.
    pub fn map(&self, offset: usize) -> Option<(Part, usize)> {
        self.segments
            .iter()
            .find(|s| s.dst.contains(&offset) || (offset == s.dst.end && s.dst.end == self.text.len()))
            .map(|s| (s.part, s.src_start + offset - s.dst.start))
    }

    /// Maps a range; the end is clipped to the segment that holds the start.
    pub fn map_range(&self, range: Range<usize>) -> Option<(Part, Range<usize>)> {
        let (part, start) = self.map(range.start)?;
        let seg = self.segments.iter().find(|s| s.dst.contains(&range.start) || range.start == s.dst.end)?;
        let end = range.end.min(seg.dst.end);
        Some((part, start..start + end.saturating_sub(range.start)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_each_part_back() {
        let shared = "const A = 1;\n";
        let file = "const B = 2;\n// --- KERNEL: k ---\nfn k() {}\n";
        let pre = &file[..13];
        let sec_start = file.find("\nfn").unwrap();
        let sec = &file[sec_start..];
        let a = assemble(
            "enable f16;\n",
            Some(Piece { text: shared, src_start: 0 }),
            Piece { text: pre, src_start: 0 },
            Piece { text: sec, src_start: sec_start },
        );
        assert_eq!(a.text, format!("enable f16;\n{shared}\n{pre}{sec}"));
        assert_eq!(a.map(0), None, "the injected directive");
        assert_eq!(a.map(12), Some((Part::Shared, 0)));
        let sep = 12 + shared.len();
        assert_eq!(a.map(sep), None, "the separator newline");
        assert_eq!(a.map(sep + 1), Some((Part::FilePreamble, 0)));
        let fn_at = a.text.find("fn k").unwrap();
        assert_eq!(a.map(fn_at), Some((Part::Section, file.find("fn k").unwrap())));
        assert_eq!(
            a.map_range(fn_at..fn_at + 4),
            Some((Part::Section, file.find("fn k").unwrap()..file.find("fn k").unwrap() + 4))
        );
    }
}
