//! Stage 3: a kernel's source is the shared preamble + `\n` + the file preamble + its section,
//! with every `//#include`d file inserted after its include line (each file at most once per
//! kernel). The [`Assembled`] text remembers where each byte came from — which file and
//! where in it, or generated (the separator, the `enable` directives put in front later) — so
//! that an error naga finds in the concatenation is reported in the original file, line and
//! column. This is the one offset map of the macro.

use crate::include::Includes;
use crate::outline::{Outline, Role, identifiers};
use crate::source::FileId;
use std::collections::{HashMap, HashSet};
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
/// length as the original: processing only blanks bytes) and the same with comments masked,
/// the include lines, and the outline of each part whose declarations are kept only where
/// reached, all by [`FileId`].
#[derive(Clone, Copy, Debug)]
pub struct Pieces<'a> {
    /// Processed text of every file.
    pub texts: &'a [String],
    /// The same with comments masked.
    pub codes: &'a [String],
    /// Include lines of every file.
    pub includes: &'a Includes,
    /// The declarations of every file's shakeable part (the shared preamble, included files,
    /// the kernel file's preamble); `None` for a file kept whole.
    pub outlines: &'a [Option<Outline>],
}

/// A declaration of an outlined file: the file and its index in that file's [`Outline`].
pub type DeclId = (FileId, usize);

/// Every named declaration of the outlined files, by name: built once per variant, used by
/// every kernel's [`assemble`].
#[derive(Clone, Debug, Default)]
pub struct NameIndex {
    by_name: HashMap<String, Vec<DeclId>>,
}

impl NameIndex {
    /// Indexes the named declarations of `outlines`.
    pub fn new(outlines: &[Option<Outline>]) -> NameIndex {
        let mut by_name: HashMap<String, Vec<DeclId>> = HashMap::new();
        for (file, o) in outlines.iter().enumerate() {
            for (i, d) in o.iter().flat_map(|o| o.decls.iter().enumerate()) {
                if let Role::Named(_, name) = &d.role {
                    by_name.entry(name.clone()).or_default().push((file, i));
                }
            }
        }
        NameIndex { by_name }
    }

    /// The declarations named `name`.
    pub fn get(&self, name: &str) -> &[DeclId] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }
}

/// A kernel's source and what it was built from.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// The source.
    pub assembled: Assembled,
    /// The named declarations of the parts every kernel sees (the shared preamble, the file
    /// preamble and the files they include), in order, and whether this kernel keeps each.
    pub common: Vec<(DeclId, bool)>,
}

/// Assembles a list of declarations as they are (for checking code no kernel uses).
pub fn assemble_decls(pieces: Pieces<'_>, decls: &[DeclId]) -> Assembled {
    let mut out = Assembled::default();
    for &(file, i) in decls {
        let Some(d) = pieces.outlines[file].as_ref().and_then(|o| o.decls.get(i)) else { continue };
        out.push(&pieces.texts[file][d.range.clone()], Origin::File { file, start: d.range.start });
        if !out.text.ends_with('\n') {
            out.push("\n", Origin::Generated);
        }
    }
    out
}

/// Builds one kernel's source: `shared`, a newline, the kernel file's `preamble`, then its
/// `section`, each with its includes expanded. Declarations of the shared preamble, the file
/// preamble and included files are kept only where the section, `roots` (names the kernel's
/// annotations use) or a kept declaration names them (`index` finds them by name); the
/// section is kept whole.
///
/// Entry points of other stages (`@vertex`, `@fragment`) are left out wherever they are, and
/// so is what only they reach: the declarations of the common parts by the usual rule, the
/// section's own where only they reach them (`section_outline` is the section's outline).
#[allow(clippy::too_many_arguments)]
pub fn assemble(
    pieces: Pieces<'_>,
    index: &NameIndex,
    shared: Option<FileId>,
    kernel_file: FileId,
    preamble: Range<usize>,
    section: Range<usize>,
    section_outline: Option<&Outline>,
    roots: &[String],
) -> Built {
    let mut b = Builder { pieces, items: Vec::new(), inserted: Vec::new(), common: true, section: Vec::new() };
    if let Some(s) = shared {
        b.inserted.push(s);
        b.part(s, 0..pieces.texts[s].len(), false);
        b.items.push(Item::Generated("\n"));
    }
    b.part(kernel_file, preamble, false);
    b.common = false;
    b.section(kernel_file, section, section_outline);
    b.finish(index, roots)
}

enum Item {
    Generated(&'static str),
    /// Kept: its identifiers are roots.
    Keep {
        file: FileId,
        range: Range<usize>,
    },
    /// Kept where its name is reached: declaration `decl` of `file`, from `start` (after the
    /// include lines before it).
    Named {
        file: FileId,
        decl: usize,
        start: usize,
        common: bool,
    },
    /// A declaration of the section that an entry point of another stage reaches: kept where
    /// the rest reaches its name (`Builder::section[index]`).
    SectionNamed {
        index: usize,
    },
}

/// A declaration of a section kept only where reached: (file, range, name, names it uses).
type SectionDecl = (FileId, Range<usize>, String, Vec<String>);

struct Builder<'a> {
    pieces: Pieces<'a>,
    items: Vec<Item>,
    inserted: Vec<FileId>,
    /// Whether the text being added is seen by every kernel (shared and file preamble).
    common: bool,
    /// The section's declarations kept only where reached.
    section: Vec<SectionDecl>,
}

impl Builder<'_> {
    /// Adds `range` of `file`: whole, or declaration by declaration where the file is outlined.
    fn part(&mut self, file: FileId, range: Range<usize>, whole: bool) {
        let pieces = self.pieces;
        let Some(outline) = pieces.outlines[file].as_ref().filter(|_| !whole) else {
            let start = self.includes(file, range.clone());
            self.items.push(Item::Keep { file, range: start..range.end });
            return;
        };
        for (i, d) in outline.decls.iter().enumerate() {
            if d.range.start < range.start || d.range.end > range.end {
                continue;
            }
            // Include lines sit in the comments before a declaration: they always count.
            let start = self.includes(file, d.range.clone());
            match &d.role {
                Role::Named(..) => self.items.push(Item::Named { file, decl: i, start, common: self.common }),
                // Comments after the last declaration: no names, kept as they are.
                Role::Always | Role::Trailing => self.items.push(Item::Keep { file, range: start..d.range.end }),
                Role::OtherStage(_) => {}
            }
        }
    }

    /// Adds a kernel's section: whole, unless it holds entry points of other stages. Those are
    /// left out, and so is every declaration of the section that they reach and nothing else
    /// does; the rest of the section is kept whole.
    fn section(&mut self, file: FileId, range: Range<usize>, outline: Option<&Outline>) {
        let Some(outline) = outline.filter(|o| o.decls.iter().any(|d| matches!(d.role, Role::OtherStage(_)))) else {
            self.part(file, range, true);
            return;
        };
        let decls = &outline.decls;
        let inside = |d: &crate::outline::Decl| d.range.start >= range.start && d.range.end <= range.end;
        // What the other stages reach among the section's named declarations.
        let mut reached = vec![false; decls.len()];
        let mut todo: Vec<&String> = decls
            .iter()
            .filter(|d| inside(d) && matches!(d.role, Role::OtherStage(_)))
            .flat_map(|d| d.refs.iter())
            .collect();
        while let Some(name) = todo.pop() {
            for (i, d) in decls.iter().enumerate() {
                if let Role::Named(_, n) = &d.role
                    && n == name
                    && inside(d)
                    && !std::mem::replace(&mut reached[i], true)
                {
                    todo.extend(d.refs.iter());
                }
            }
        }
        for (i, d) in decls.iter().enumerate() {
            if !inside(d) {
                continue;
            }
            let start = self.includes(file, d.range.clone());
            match &d.role {
                Role::OtherStage(_) => {}
                Role::Named(_, name) if reached[i] => {
                    self.section.push((file, start..d.range.end, name.clone(), d.refs.clone()));
                    self.items.push(Item::SectionNamed { index: self.section.len() - 1 });
                }
                _ => self.items.push(Item::Keep { file, range: start..d.range.end }),
            }
        }
    }

    /// Adds the text of `range` up to and including its last include line, with each included
    /// file after its line; returns where the rest of `range` starts.
    fn includes(&mut self, file: FileId, range: Range<usize>) -> usize {
        let pieces = self.pieces;
        let lines = pieces.includes.of(file);
        if lines.is_empty() {
            return range.start;
        }
        let text = &pieces.texts[file];
        let mut cursor = range.start;
        for inc in lines {
            if inc.line.start < range.start || inc.line.end > range.end {
                continue;
            }
            // A line an inactive `//#if` branch blanked includes nothing.
            if text[inc.line.clone()].trim().is_empty() {
                continue;
            }
            // The include line stays (a comment), the file follows it.
            let after = text[inc.line.end..].find('\n').map_or(text.len(), |i| inc.line.end + i + 1).min(range.end);
            self.items.push(Item::Keep { file, range: cursor..after });
            cursor = after;
            if !text[..after].ends_with('\n') {
                self.items.push(Item::Generated("\n"));
            }
            if !self.inserted.contains(&inc.target) {
                self.inserted.push(inc.target);
                self.part(inc.target, 0..pieces.texts[inc.target].len(), false);
                if !pieces.texts[inc.target].ends_with('\n') {
                    self.items.push(Item::Generated("\n"));
                }
            }
        }
        cursor
    }

    /// Keeps what is reached, in order.
    fn finish(self, index: &NameIndex, roots: &[String]) -> Built {
        let Builder { pieces, items, section, .. } = self;
        let mut section_kept = vec![false; section.len()];
        // The declarations this kernel's source may hold (an included file may be in some
        // kernels' sources only).
        let mut present: Vec<Vec<bool>> =
            pieces.outlines.iter().map(|o| vec![false; o.as_ref().map_or(0, |o| o.decls.len())]).collect();
        let mut reached: HashSet<String> = roots.iter().cloned().collect();
        let mut todo: Vec<String> = roots.to_vec();
        for item in &items {
            match item {
                Item::Keep { file, range } => {
                    for w in identifiers(&pieces.codes[*file][range.clone()]) {
                        if reached.insert(w.clone()) {
                            todo.push(w);
                        }
                    }
                }
                Item::Named { file, decl, .. } => present[*file][*decl] = true,
                Item::Generated(_) | Item::SectionNamed { .. } => {}
            }
        }
        let mut kept: Vec<Vec<bool>> = present.iter().map(|p| vec![false; p.len()]).collect();
        while let Some(name) = todo.pop() {
            for (j, (_, _, n, refs)) in section.iter().enumerate() {
                if *n == name && !std::mem::replace(&mut section_kept[j], true) {
                    for r in refs {
                        if reached.insert(r.clone()) {
                            todo.push(r.clone());
                        }
                    }
                }
            }
            for &(file, i) in index.get(&name) {
                if !present[file][i] || kept[file][i] {
                    continue;
                }
                kept[file][i] = true;
                let decl = &pieces.outlines[file].as_ref().expect("indexed files are outlined").decls[i];
                for r in &decl.refs {
                    if reached.insert(r.clone()) {
                        todo.push(r.clone());
                    }
                }
            }
        }
        let mut out = Built::default();
        for item in &items {
            match item {
                Item::Generated(t) => out.assembled.push(t, Origin::Generated),
                Item::Keep { file, range } => out
                    .assembled
                    .push(&pieces.texts[*file][range.clone()], Origin::File { file: *file, start: range.start }),
                Item::SectionNamed { index } => {
                    if section_kept[*index] {
                        let (file, range, _, _) = &section[*index];
                        out.assembled.push(
                            &pieces.texts[*file][range.clone()],
                            Origin::File { file: *file, start: range.start },
                        );
                    }
                }
                Item::Named { file, decl, start, common } => {
                    let k = kept[*file][*decl];
                    if *common {
                        out.common.push(((*file, *decl), k));
                    }
                    if k {
                        let end = pieces.outlines[*file].as_ref().expect("outlined").decls[*decl].range.end;
                        out.assembled
                            .push(&pieces.texts[*file][*start..end], Origin::File { file: *file, start: *start });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outline::outline;
    use crate::source::{CallSite, SourceFile, Sources};
    use crate::split::mask_comments;

    fn built(
        texts: &[String],
        includes: &Includes,
        outlined: &[bool],
        kernel: FileId,
        marker: usize,
        section: Range<usize>,
        shared: Option<FileId>,
    ) -> Built {
        let codes: Vec<String> = texts.iter().map(|t| mask_comments(t)).collect();
        let outlines: Vec<Option<Outline>> = codes
            .iter()
            .enumerate()
            .map(|(i, c)| outlined[i].then(|| outline(c, if i == kernel { 0..marker } else { 0..c.len() })))
            .collect();
        let pieces = Pieces { texts, codes: &codes, includes, outlines: &outlines };
        assemble(pieces, &NameIndex::new(&outlines), shared, kernel, 0..marker, section, None, &[])
    }

    #[test]
    fn maps_each_file_back() {
        let shared = "const A = 1;\n";
        let file = "const B = 2;\n// --- KERNEL: k ---\nfn k() { _ = A + B; }\n";
        let texts = vec![shared.to_string(), file.to_string()];
        let sec_start = file.find("\nfn").unwrap();
        let a = built(&texts, &Includes::default(), &[true, true], 1, 13, sec_start..file.len(), Some(0))
            .assembled
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
    fn keeps_what_the_section_reaches() {
        let shared = "// Unused.\nfn unused() -> f32 { return 0.5h; }\n// Used.\nfn used() -> f32 { return HALF; }\nconst HALF: f32 = 0.5;\n";
        let file = "const B = 2;\n// --- KERNEL: k ---\nfn k() { _ = used(); }\n";
        let texts = vec![shared.to_string(), file.to_string()];
        let sec_start = file.find("\nfn").unwrap();
        let b = built(&texts, &Includes::default(), &[true, true], 1, 13, sec_start..file.len(), Some(0));
        let t = &b.assembled.text;
        assert!(t.contains("// Used.\nfn used()") && t.contains("const HALF"), "{t}");
        assert!(!t.contains("unused") && !t.contains("const B"), "{t}");
        let kept: Vec<(DeclId, bool)> = b.common.clone();
        // shared: comment+unused, comment+used, HALF; kernel file: B.
        assert_eq!(kept, vec![((0, 0), false), ((0, 1), true), ((0, 2), true), ((1, 0), false)]);
        // Each kept byte maps back to where it came from.
        let at = t.find("const HALF").unwrap();
        assert_eq!(b.assembled.map(at), Some((0, shared.find("const HALF").unwrap())));
        // A file kept whole keeps everything.
        let b = built(&texts, &Includes::default(), &[false, false], 1, 13, sec_start..file.len(), Some(0));
        assert!(b.assembled.text.contains("unused") && b.assembled.text.contains("const B"));
    }

    #[test]
    fn includes_are_inserted_once_after_their_line() {
        let dir = std::env::temp_dir().join(format!("kernels-assemble-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/a.wgsl"), "fn a() { b(); }\n//#include \"b.wgsl\"").unwrap();
        std::fs::write(dir.join("lib/b.wgsl"), "fn b() {}").unwrap();
        let kernel = "//#include \"lib/a.wgsl\"\nconst X = 1;\n// --- KERNEL: k ---\n//#include \"lib/b.wgsl\"\nfn k() { a(); _ = X; }\n";
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
        let a = built(&texts, &includes, &[true, true, true], k, marker, section..kernel.len(), None).assembled;
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
