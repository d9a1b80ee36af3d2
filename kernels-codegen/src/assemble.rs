//! Stage 3: a kernel's source is the shared preamble + `\n` + the file preamble + its section,
//! with every `//#include`d file inserted after its include line (each file at most once per
//! kernel). The [`Assembled`] text remembers where each byte came from — which file and
//! where in it, or generated (the separator, the `enable` directives put in front later) — so
//! that an error naga finds in the concatenation is reported in the original file, line and
//! column. This is the one offset map of the macro.

use crate::include::Includes;
use crate::source::FileId;
use std::ops::Range;

/// Where a piece of assembled text came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Copied from a file, starting at this byte offset of it.
    File {
        /// The file.
        file: FileId,
        /// Offset of the piece's first byte in the file.
        start: usize,
    },
    /// Written by the macro (a separator, `enable` directives).
    Generated,
}

/// A piece of assembled text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Range in the assembled text.
    pub dst: Range<usize>,
    /// Where it came from.
    pub origin: Origin,
}

/// Assembled source with its map back to the original files. The segments cover the text
/// exactly, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assembled {
    /// The full WGSL source.
    pub text: String,
    /// Every piece of it, in order.
    pub segments: Vec<Segment>,
}

impl Assembled {
    fn push(&mut self, text: &str, origin: Origin) {
        if text.is_empty() {
            return;
        }
        let start = self.text.len();
        self.text.push_str(text);
        self.segments.push(Segment { dst: start..self.text.len(), origin });
    }

    /// The same source with `prefix` (generated `enable` directives) in front: the text naga
    /// saw, with every segment moved along, so its spans map back with the same lookup.
    pub fn prefixed(&self, prefix: &str) -> Assembled {
        let mut out = Assembled::default();
        out.push(prefix, Origin::Generated);
        let shift = out.text.len();
        out.text.push_str(&self.text);
        out.segments.extend(
            self.segments.iter().map(|s| Segment { dst: s.dst.start + shift..s.dst.end + shift, origin: s.origin }),
        );
        out
    }

    /// The segment holding `offset` (the end of the text belongs to the last segment).
    fn segment(&self, offset: usize) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.dst.end <= offset);
        self.segments.get(i).or_else(|| self.segments.last().filter(|s| offset == s.dst.end))
    }

    /// Maps an offset of the assembled text to (file, offset in that file). Offsets in
    /// generated text map to `None`.
    pub fn map(&self, offset: usize) -> Option<(FileId, usize)> {
        let s = self.segment(offset)?;
        match s.origin {
            Origin::File { file, start } => Some((file, start + offset - s.dst.start)),
            Origin::Generated => None,
        }
    }

    /// Maps a range; the end is clipped to the segment that holds the start.
    pub fn map_range(&self, range: Range<usize>) -> Option<(FileId, Range<usize>)> {
        let s = self.segment(range.start)?;
        let (file, start) = self.map(range.start)?;
        let end = range.end.clamp(range.start, s.dst.end);
        Some((file, start..start + (end - range.start)))
    }
}

/// What a kernel's source is built from, for one variant: each file's processed text (same
/// length as the original: processing only blanks bytes), by [`FileId`], and the include
/// lines.
#[derive(Clone, Copy, Debug)]
pub struct Pieces<'a> {
    /// Processed text of every file.
    pub texts: &'a [String],
    /// Include lines of every file.
    pub includes: &'a Includes,
}

/// Builds one kernel's source: `shared` (whole), a newline, then `parts` (ranges of files:
/// the file preamble and the section), each with its includes expanded.
pub fn assemble(pieces: Pieces<'_>, shared: Option<FileId>, parts: &[(FileId, Range<usize>)]) -> Assembled {
    let mut b = Builder { pieces, out: Assembled::default(), inserted: Vec::new() };
    if let Some(s) = shared {
        b.inserted.push(s);
        b.part(s, 0..pieces.texts[s].len());
        b.out.push("\n", Origin::Generated);
    }
    for (file, range) in parts {
        b.part(*file, range.clone());
    }
    b.out
}

struct Builder<'a> {
    pieces: Pieces<'a>,
    out: Assembled,
    inserted: Vec<FileId>,
}

impl Builder<'_> {
    fn part(&mut self, file: FileId, range: Range<usize>) {
        let text = &self.pieces.texts[file];
        let mut cursor = range.start;
        for inc in self.pieces.includes.of(file) {
            if inc.line.start < range.start || inc.line.end > range.end {
                continue;
            }
            // A line an inactive `//#if` branch blanked includes nothing.
            if text[inc.line.clone()].trim().is_empty() {
                continue;
            }
            // The include line stays (a comment), the file follows it.
            let after = text[inc.line.end..].find('\n').map_or(text.len(), |i| inc.line.end + i + 1).min(range.end);
            self.out.push(&text[cursor..after], Origin::File { file, start: cursor });
            cursor = after;
            if !self.out.text.ends_with('\n') {
                self.out.push("\n", Origin::Generated);
            }
            if !self.inserted.contains(&inc.target) {
                self.inserted.push(inc.target);
                self.part(inc.target, 0..self.pieces.texts[inc.target].len());
                if !self.out.text.ends_with('\n') {
                    self.out.push("\n", Origin::Generated);
                }
            }
        }
        self.out.push(&text[cursor..range.end], Origin::File { file, start: cursor });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{CallSite, SourceFile, Sources};

    #[test]
    fn maps_each_file_back() {
        let shared = "const A = 1;\n";
        let file = "const B = 2;\n// --- KERNEL: k ---\nfn k() {}\n";
        let texts = vec![shared.to_string(), file.to_string()];
        let includes = Includes::default();
        let sec_start = file.find("\nfn").unwrap();
        let a =
            assemble(Pieces { texts: &texts, includes: &includes }, Some(0), &[(1, 0..13), (1, sec_start..file.len())])
                .prefixed("enable f16;\n");
        assert_eq!(a.text, format!("enable f16;\n{shared}\n{}{}", &file[..13], &file[sec_start..]));
        assert_eq!(a.map(0), None, "the injected directive");
        assert_eq!(a.map(12), Some((0, 0)));
        let sep = 12 + shared.len();
        assert_eq!(a.map(sep), None, "the separator newline");
        assert_eq!(a.map(sep + 1), Some((1, 0)));
        let fn_at = a.text.find("fn k").unwrap();
        let src = file.find("fn k").unwrap();
        assert_eq!(a.map(fn_at), Some((1, src)));
        assert_eq!(a.map_range(fn_at..fn_at + 4), Some((1, src..src + 4)));
        assert_eq!(a.map(a.text.len()), Some((1, file.len())), "the end maps to the end of the last file");
    }

    #[test]
    fn includes_are_inserted_once_after_their_line() {
        let dir = std::env::temp_dir().join(format!("kernels-assemble-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/a.wgsl"), "fn a() {}\n//#include \"b.wgsl\"").unwrap();
        std::fs::write(dir.join("lib/b.wgsl"), "fn b() {}").unwrap();
        let kernel =
            "//#include \"lib/a.wgsl\"\nconst X = 1;\n// --- KERNEL: k ---\n//#include \"lib/b.wgsl\"\nfn k() {}\n";
        std::fs::write(dir.join("k.wgsl"), kernel).unwrap();
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let mut sources = Sources::default();
        let k = sources.add(SourceFile::new(dir.join("k.wgsl"), "k.wgsl".into(), kernel.into()));
        let (includes, errors) = crate::include::load(&site, &mut sources, &[k]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(sources.len(), 3);
        let texts: Vec<String> = sources.iter().map(|(_, f)| f.text.clone()).collect();
        let marker = kernel.find("// --- KERNEL").unwrap();
        let section = kernel.find("\n//#include \"lib/b").unwrap();
        let a = assemble(
            Pieces { texts: &texts, includes: &includes },
            None,
            &[(k, 0..marker), (k, section..kernel.len())],
        );
        assert_eq!(a.text.matches("fn b()").count(), 1, "b is inserted once:\n{}", a.text);
        assert!(a.text.find("fn a()").unwrap() < a.text.find("fn b()").unwrap());
        assert!(a.text.find("fn b()").unwrap() < a.text.find("const X").unwrap(), "after the include line");
        // Every byte of an included file maps back to it.
        let at = a.text.find("fn b()").unwrap();
        let (file, offset) = a.map(at).unwrap();
        assert_eq!(sources.get(file).display, "lib/b.wgsl");
        assert_eq!(offset, 0);
        // The segments cover the text exactly.
        let mut end = 0;
        for s in &a.segments {
            assert_eq!(s.dst.start, end);
            end = s.dst.end;
        }
        assert_eq!(end, a.text.len());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
