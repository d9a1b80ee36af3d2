//! The comments around a kernel: its doc text, and the annotations `// @grid …` and
//! `// @requires …` that let the generated function compute its own grid and check buffer
//! lengths before dispatching, `// @accumulates …` (which bindings it adds into, for hosts), and
//! `// @unchecked` (its module is created without wgpu's runtime checks; see
//! [`Shape::unchecked`](crate::shape::Shape::unchecked)).

use crate::split::{Section, find_word, mask_comments};
use std::ops::Range;

/// One annotation line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Annotation {
    /// `grid`, `requires`, `accumulates` or `unchecked`.
    pub kind: String,
    /// The expression text after the keyword (empty for a lone `@unchecked`).
    pub expr: String,
    /// The line's byte range in the kernel file.
    pub range: Range<usize>,
}

/// What the comments say about a kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notes {
    /// Doc text, one entry per line.
    pub doc: Vec<String>,
    /// `@grid`, `@requires`, `@accumulates` and `@unchecked` lines.
    pub annotations: Vec<Annotation>,
    /// Lines that look like an annotation but name none (`// @require …`, `// @grd …`): the
    /// line's byte range and the word written.
    pub unknown: Vec<(Range<usize>, String)>,
    /// Byte offset of `fn <name>` in the file, if found.
    pub entry: Option<Range<usize>>,
}

/// A comment line's text, if `line` is a `//` comment.
fn comment_text(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t.strip_prefix("///").or_else(|| t.strip_prefix("//"))?;
    if rest.starts_with('#') {
        // `//#if` and friends are directives, not prose.
        return None;
    }
    Some(rest.strip_prefix(' ').unwrap_or(rest).trim_end())
}

/// The header of a kernel file: the comment lines it starts with (up to the first line that
/// is not a `//` comment, or is a `//#` directive or a marker), one entry per line. Kernel docs
/// refer to it ("the update is in the file header"), so hosts get it with them.
pub fn file_header(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        match comment_text(line) {
            Some(t) if crate::split::marker_name(line).is_none() => out.push(t.to_string()),
            _ => break,
        }
    }
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

/// Where the block of comment lines right above `pos` (a line start) begins.
fn block_above(text: &str, pos: usize) -> usize {
    let mut start = pos;
    while start > 0 {
        let prev_end = start - 1;
        let prev_start = text[..prev_end].rfind('\n').map_or(0, |i| i + 1);
        let line = text[prev_start..prev_end].trim_end_matches('\r');
        if comment_text(line).is_some() && crate::split::marker_name(line).is_none() {
            start = prev_start;
        } else {
            break;
        }
    }
    start
}

/// Lines of `text[range]` as (byte range in `text` without the line break, content).
fn lines(text: &str, range: Range<usize>) -> Vec<(Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut start = range.start;
    for line in text[range].split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line);
        let content = content.strip_suffix('\r').unwrap_or(content);
        out.push((start..start + content.len(), content));
        start += line.len();
    }
    out
}

/// WGSL attributes: a commented-out declaration in a doc block is prose, not an annotation.
const WGSL_ATTRIBUTES: [&str; 17] = [
    "align",
    "binding",
    "blend_src",
    "builtin",
    "compute",
    "const",
    "diagnostic",
    "fragment",
    "group",
    "id",
    "interpolate",
    "invariant",
    "location",
    "must_use",
    "size",
    "vertex",
    "workgroup_size",
];

/// The annotation words.
pub const ANNOTATIONS: [&str; 4] = ["grid", "requires", "accumulates", "unchecked"];

/// An example expression for an annotation word, for messages (`@unchecked` takes none).
pub fn example(word: &str) -> &'static str {
    match word {
        "grid" => "threads(p.n)",
        "requires" => "len(x) >= p.n",
        "accumulates" => "y",
        _ => "",
    }
}

/// The annotation a misspelled word was probably meant to be (`require` → `requires`).
pub fn closest_annotation(word: &str) -> &'static str {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    ANNOTATIONS.into_iter().min_by_key(|a| distance(word, a)).unwrap_or("grid")
}

/// Reads the comments of one kernel. `text` is the whole kernel file; only the section and the
/// comment lines right above its marker are read.
pub fn notes(text: &str, section: &Section) -> Notes {
    let all = lines(text, block_above(text, section.marker.start)..section.body.end);
    let marker_line = all.iter().position(|(r, _)| r.start == section.marker.start).unwrap_or(0);
    let mut blocks: Vec<Vec<usize>> = Vec::new();

    // 1. The header: comment lines right after the marker.
    let mut header = Vec::new();
    for (i, (_, l)) in all.iter().enumerate().skip(marker_line + 1) {
        if comment_text(l).is_some() && crate::split::marker_name(l).is_none() {
            header.push(i);
        } else {
            break;
        }
    }
    blocks.push(header);

    // 2. The block right above `@compute` / `fn name`.
    let code = mask_comments(&text[section.body.clone()]);
    let entry = find_word(&code, "fn").into_iter().find_map(|r| {
        let after = code[r.end..].trim_start();
        let name_ok = after.starts_with(section.name.as_str())
            && !after[section.name.len()..].chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_');
        name_ok.then(|| {
            let name_start = section.body.start + r.end + (code[r.end..].len() - after.len());
            name_start..name_start + section.name.len()
        })
    });
    if let Some(entry_range) = &entry {
        // Walk back over attribute lines (`@compute`, `@workgroup_size(…)`) to the comments.
        let compute = find_word(&code[..entry_range.start - section.body.start], "compute")
            .last()
            .map(|r| section.body.start + r.start)
            .unwrap_or(entry_range.start);
        let first = all.iter().position(|(r, _)| r.contains(&compute) || r.end >= compute).unwrap_or(0);
        let mut block = Vec::new();
        let mut i = first;
        while i > marker_line + 1 {
            i -= 1;
            let l = all[i].1;
            if comment_text(l).is_some() {
                block.push(i);
            } else {
                break;
            }
        }
        block.reverse();
        if !blocks[0].contains(block.first().unwrap_or(&usize::MAX)) {
            blocks.push(block);
        }
    }

    let mut used: Vec<usize> = blocks.concat();
    // 3. Otherwise the block right above the marker.
    if used.iter().all(|&i| comment_text(all[i].1).is_some_and(str::is_empty)) {
        let mut block = Vec::new();
        let mut i = marker_line;
        while i > 0 {
            i -= 1;
            let l = all[i].1;
            if comment_text(l).is_some() && crate::split::marker_name(l).is_none() {
                block.push(i);
            } else {
                break;
            }
        }
        block.reverse();
        used = block;
    }

    let mut out = Notes { entry, ..Notes::default() };
    for i in used {
        let (range, line) = &all[i];
        let Some(t) = comment_text(line) else {
            continue;
        };
        let annotation = ANNOTATIONS.iter().find_map(|k| {
            let rest = t.strip_prefix('@')?.strip_prefix(k)?;
            (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| (k.to_string(), rest.trim().to_string()))
        });
        match annotation {
            Some((kind, expr)) => out.annotations.push(Annotation { kind, expr, range: range.clone() }),
            None => {
                let word: String = t
                    .strip_prefix('@')
                    .map(|r| r.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
                    .unwrap_or_default();
                if !word.is_empty() && !WGSL_ATTRIBUTES.contains(&word.as_str()) {
                    out.unknown.push((range.clone(), word));
                }
                out.doc.push(t.to_string());
            }
        }
    }
    while out.doc.last().is_some_and(|l| l.is_empty()) {
        out.doc.pop();
    }
    while out.doc.first().is_some_and(|l| l.is_empty()) {
        out.doc.remove(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    fn first(text: &str) -> Notes {
        let f = SourceFile::new("f".into(), "f".into(), text.to_string());
        let s = crate::split::split(&f).unwrap();
        notes(text, &s.sections[0])
    }

    #[test]
    fn header_and_annotations() {
        let n = first(
            "// --- KERNEL: scale ---\n// Scales x.\n//\n// In place.\n// @grid threads(p.n)\n// @requires len(x) >= p.n\n\
             struct P { n: u32 }\n// entry\n@compute @workgroup_size(64)\nfn scale() {}\n",
        );
        assert_eq!(n.doc, vec!["Scales x.", "", "In place.", "entry"]);
        assert_eq!(n.annotations.len(), 2);
        assert_eq!(n.annotations[0].kind, "grid");
        assert_eq!(n.annotations[0].expr, "threads(p.n)");
        assert_eq!(n.annotations[1].expr, "len(x) >= p.n");
        assert!(n.entry.is_some());
    }

    #[test]
    fn misspelled_annotations_are_found_commented_code_is_not() {
        let n = first(
            "// --- KERNEL: k ---\n// @require len(x) >= 1\n// @grd threads(1)\n// @group(0) @binding(0) is prose\n\
             @compute @workgroup_size(1) fn k() {}\n",
        );
        let words: Vec<&str> = n.unknown.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(words, vec!["require", "grd"]);
        assert_eq!(closest_annotation("require"), "requires");
        assert_eq!(closest_annotation("grd"), "grid");
        assert!(n.annotations.is_empty());
    }

    #[test]
    fn unchecked_is_an_annotation_without_an_expression() {
        let n = first(
            "// --- KERNEL: k ---\n// Doc.\n// @unchecked\n// @unchecked len(x) >= 1\n// @unchecked: yes\n// @uncheked\n\
             @compute @workgroup_size(1) fn k() {}\n",
        );
        assert_eq!(n.doc, vec!["Doc.", "@unchecked: yes", "@uncheked"]);
        let found: Vec<(&str, &str)> = n.annotations.iter().map(|a| (a.kind.as_str(), a.expr.as_str())).collect();
        assert_eq!(found, vec![("unchecked", ""), ("unchecked", "len(x) >= 1")]);
        // `@unchecked:` names the annotation but is malformed; `@uncheked` is a misspelling.
        let words: Vec<&str> = n.unknown.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(words, vec!["unchecked", "uncheked"]);
        assert_eq!(closest_annotation("uncheked"), "unchecked");
        assert_eq!(closest_annotation("checked"), "unchecked");
    }

    #[test]
    fn the_file_header_is_the_leading_comment_block() {
        let text = "// What the file does.\n//\n// The layout.\n//#include \"x.wgsl\"\n// Not the header.\n";
        assert_eq!(file_header(text), vec!["What the file does.", "", "The layout."]);
        assert_eq!(file_header("// --- KERNEL: k ---\n// doc of k\n"), Vec::<String>::new());
        assert_eq!(file_header("const A = 1;\n// late\n"), Vec::<String>::new());
    }

    #[test]
    fn doc_above_marker_when_nothing_else() {
        let n = first("// Above.\n// --- KERNEL: k ---\n@compute @workgroup_size(1) fn k() {}\n");
        assert_eq!(n.doc, vec!["Above."]);
        let n = first("// --- KERNEL: k ---\n@compute @workgroup_size(1) fn kk() {}\n");
        assert!(n.entry.is_none(), "`fn kk` is not `fn k`");
    }
}
