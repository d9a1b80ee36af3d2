//! Stage 2: the source format. Markers split a kernel file into its file preamble and one
//! section per kernel; leading `enable` directives are lifted out; `//#if subgroups` and
//! `//#if coop` blocks select a variant. Everything here keeps byte offsets intact (removed
//! text becomes spaces), so locations found later in a part map straight back to the original
//! file.

use crate::diagnostic::Diagnostic;
use crate::source::SourceFile;
use std::ops::Range;

/// The marker that starts a kernel: a whole line `// --- KERNEL: <name> ---`, the name without
/// whitespace (the regular expression `^// --- KERNEL: (\S+) ---$`, multi-line).
const MARKER_PREFIX: &str = "// --- KERNEL: ";
const MARKER_SUFFIX: &str = " ---";

/// One kernel's section of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The name written in the marker.
    pub name: String,
    /// The marker line (without its line break).
    pub marker: Range<usize>,
    /// The section's text: from the end of the marker line (its line break included) to the
    /// start of the next marker line or the end of the file.
    pub body: Range<usize>,
}

/// A kernel file split at its markers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The text before the first marker.
    pub preamble: Range<usize>,
    /// The kernels in file order.
    pub sections: Vec<Section>,
}

/// Finds every marker line: `(name, line range)`.
pub fn find_markers(text: &str) -> Vec<(String, Range<usize>)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line);
        // Files checked out with CRLF line ends keep their markers.
        let content = content.strip_suffix('\r').unwrap_or(content);
        if let Some(name) = marker_name(content) {
            out.push((name.to_string(), start..start + content.len()));
        }
        start += line.len();
    }
    out
}

/// The kernel name if `line` (without its `\n`) is a marker line.
pub fn marker_name(line: &str) -> Option<&str> {
    let name = line.strip_prefix(MARKER_PREFIX)?.strip_suffix(MARKER_SUFFIX)?;
    if !name.is_empty() && !name.chars().any(char::is_whitespace) { Some(name) } else { None }
}

/// Why `name` cannot name a WGSL declaration (and so a kernel), if it cannot: WGSL identifiers
/// are Unicode identifiers that are not a single `_`, do not start with `__`, and are not
/// keywords or reserved words. (Every such name is a Rust identifier, raw where it is a Rust
/// keyword.)
pub fn wgsl_ident_problem(name: &str) -> Option<String> {
    if name == "_" || syn::parse_str::<syn::Ident>(&format!("r#{name}")).is_err() && !is_rust_only_keyword(name) {
        return Some("is not an identifier".into());
    }
    if name.starts_with("__") {
        return Some("starts with `__`, which WGSL reserves".into());
    }
    if naga::keywords::wgsl::RESERVED.contains(&name) {
        return Some("is a WGSL keyword or reserved word".into());
    }
    None
}

/// A name as Rust sees it: in Unicode normalization form C. Rust normalizes identifiers (NFC)
/// and WGSL does not, so two WGSL names that differ only in their composition (`café` with a
/// precomposed `é` and with `e` + a combining accent, or the Kelvin sign and `K`) are one name
/// in the generated Rust: every duplicate check of names that become Rust identifiers compares
/// these.
pub fn rust_name(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfc().collect()
}

/// A name with its non-ASCII characters as `\u{…}` escapes, to show how two names that look
/// alike differ.
pub fn spelled(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii() { c.to_string() } else { c.escape_unicode().to_string() }).collect()
}

/// Words Rust cannot write even as raw identifiers (WGSL reserves them all).
fn is_rust_only_keyword(name: &str) -> bool {
    matches!(name, "self" | "Self" | "super" | "crate")
}

/// A line that looks like a marker but is not one (indented, lower case, missing spaces or
/// dashes): the marker it was probably meant to be.
fn near_marker(line: &str) -> Option<String> {
    let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_lowercase();
    let rest = squeezed.strip_prefix("//--")?.trim_start_matches('-');
    let rest = rest.strip_prefix("kernel")?.strip_prefix(':')?;
    let name = rest.trim_end_matches('-');
    // Take the name from the line as written (case kept).
    let written = line.split_once(':').map(|(_, n)| n).unwrap_or("");
    let written = written.trim().trim_end_matches('-').trim();
    let name = if written.is_empty() { name } else { written };
    Some(format!("{MARKER_PREFIX}{}{MARKER_SUFFIX}", if name.is_empty() { "<name>" } else { name }))
}

/// Splits a kernel file, enforcing the format's rules on it.
pub fn split(file: &SourceFile) -> Result<Split, Vec<Diagnostic>> {
    let text = &file.text;
    let markers = find_markers(text);
    let mut errors = Vec::new();

    // A line that looks like a marker but is not one would silently merge two kernels.
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line);
        let content = content.strip_suffix('\r').unwrap_or(content);
        if marker_name(content).is_none()
            && let Some(suggestion) = near_marker(content)
        {
            errors.push(
                Diagnostic::at(file.locate(offset..offset + content.len()), "malformed kernel marker")
                    .label("not a marker")
                    .note(format!("did you mean `{suggestion}`?"))
                    .note("a marker is a whole line `// --- KERNEL: <name> ---`, from the first column, with no other text"),
            );
        }
        offset += line.len();
    }

    if markers.is_empty() {
        errors.push(Diagnostic::new(format!(
            "`{}` has no kernel markers: start each kernel with a line `// --- KERNEL: <name> ---`",
            file.display
        )));
        return Err(errors);
    }

    let mut sections: Vec<Section> = Vec::new();
    for (i, (name, marker)) in markers.iter().enumerate() {
        // The section starts right after the marker text (its line break included).
        let body_start = marker.end;
        let end = markers.get(i + 1).map(|m| m.1.start).unwrap_or(text.len());
        if let Some(why) = wgsl_ident_problem(name) {
            errors.push(
                Diagnostic::at(file.locate(marker.clone()), format!("kernel name `{name}` {why}"))
                    .label("the name of the entry point and of the generated function")
                    .note("a kernel is named by its `@compute fn`, so its name is a WGSL identifier, like `matmul_t`"),
            );
        }
        if let Some(first) = sections.iter().find(|s| rust_name(&s.name) == rust_name(name)) {
            let first_line = file.locate(first.marker.clone()).line;
            let mut d = Diagnostic::at(file.locate(marker.clone()), format!("duplicate kernel `{name}`"))
                .label("second definition")
                .note(format!("first defined on line {first_line}"));
            if &first.name != name {
                d = d.note(format!(
                    "the names are written with different Unicode code points (`{}` and `{}`) but are one \
                     identifier in Rust, which normalizes identifiers (NFC)",
                    spelled(&first.name),
                    spelled(name)
                ));
            }
            errors.push(d);
        }
        sections.push(Section { name: name.clone(), marker: marker.clone(), body: body_start..end });
    }

    if errors.is_empty() { Ok(Split { preamble: 0..markers[0].1.start, sections }) } else { Err(errors) }
}

/// A `{` left open at the end of `range` of `file`, or a `}` without its `{`. Text that other
/// text follows (the shared preamble, a file preamble, an included file) is checked on its own,
/// so that a missing `}` is reported where it is missing rather than as a confusing error in
/// the next file. (Parentheses are left to naga: an unclosed one fails at the next `;`, in the
/// same file.)
///
/// `text` is the file's text as one variant sees it (same length as the file's).
pub fn unbalanced(file: &SourceFile, text: &str, range: Range<usize>) -> Option<Diagnostic> {
    let code = mask_comments(&text[range.clone()]);
    let mut open: Vec<usize> = Vec::new();
    for (i, b) in code.bytes().enumerate() {
        let at = range.start + i;
        match b {
            b'{' => open.push(at),
            b'}' if open.pop().is_none() => {
                return Some(Diagnostic::at(file.locate(at..at + 1), "unmatched `}`").label("nothing opens this"));
            }
            _ => {}
        }
    }
    open.pop().map(|at| {
        Diagnostic::at(file.locate(at..at + 1), "unclosed `{`")
            .label("not closed before the text that follows")
            .note("the text after this part (the next file or kernel) would otherwise be read as its continuation")
    })
}

/// The shared preamble must not hold markers: it would be split like a kernel file.
pub fn check_shared(file: &SourceFile) -> Vec<Diagnostic> {
    find_markers(&file.text)
        .into_iter()
        .map(|(_, range)| {
            Diagnostic::at(file.locate(range), "the shared preamble must not contain kernel markers")
                .label("marker in the shared preamble")
                .note("the shared preamble is prepended to every kernel; put kernels in a kernel file")
        })
        .collect()
}

/// Replaces comments with spaces (line breaks kept), so that searches see only code.
/// Handles `//` line comments and nested `/* */` block comments.
pub fn mask_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                out[i] = b' ';
                i += 1;
            }
        } else if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
            let mut depth = 0usize;
            while i < bytes.len() {
                if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 2;
                } else if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if bytes[i] != b'\n' {
                        out[i] = b' ';
                    }
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    // Only ASCII bytes were replaced, each whole character of a comment became spaces
    // (multi-byte characters are replaced byte by byte), so the result is valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Byte ranges of whole-word occurrences of `word` in `code` (comments already masked).
pub fn find_word(code: &str, word: &str) -> Vec<Range<usize>> {
    let bytes = code.as_bytes();
    code.match_indices(word)
        .filter(|(i, _)| {
            let before = i.checked_sub(1).map(|j| bytes[j]);
            let after = bytes.get(i + word.len()).copied();
            !before.is_some_and(is_ident_byte) && !after.is_some_and(is_ident_byte)
        })
        .map(|(i, _)| i..i + word.len())
        .collect()
}

/// The extensions an `enable` directive at the top of a file may name. They are lifted out:
/// `kernels!` writes the directives each kernel needs itself.
pub const KNOWN_EXTENSIONS: [&str; 3] = ["f16", "subgroups", "wgpu_cooperative_matrix"];

/// Blanks the `enable` directives at the very top of a part (the macro injects what each
/// kernel needs itself) and reports any `enable` or `requires` directive that is not at the
/// very top, and unknown extensions. With `lift == false` (kernel sections, included files)
/// every directive is an error: such text never starts a kernel's source.
pub fn lift_directives(
    file: &SourceFile,
    part: Range<usize>,
    text: &mut String,
    lift: bool,
) -> Result<(), Vec<Diagnostic>> {
    let code = mask_comments(&file.text[part.clone()]);
    let mut errors = Vec::new();
    let mut pos = 0;
    // The leading block: whitespace and comments (already spaces), then directives.
    if lift {
        loop {
            let rest = &code[pos..];
            pos += rest.len() - rest.trim_start().len();
            let rest = &code[pos..];
            let is_directive = ["enable", "requires"]
                .iter()
                .any(|w| rest.starts_with(w) && !rest.as_bytes().get(w.len()).copied().is_some_and(is_ident_byte));
            let Some(semi) = rest.find(';').filter(|_| is_directive) else { break };
            let body = &rest[..semi];
            let (kind, list) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
            let range = part.start + pos..part.start + pos + semi + 1;
            if kind == "requires" {
                errors.push(
                    Diagnostic::at(file.locate(range.clone()), "`requires` directives are not supported")
                        .label("remove this directive"),
                );
            }
            for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if kind == "enable" && !KNOWN_EXTENSIONS.contains(&name) {
                    errors.push(
                        Diagnostic::at(file.locate(range.clone()), format!("unsupported extension `{name}`")).note(
                            "kernels! knows `f16`, `subgroups` and `wgpu_cooperative_matrix`, and adds each to the kernels that need it",
                        ),
                    );
                }
            }
            blank(text, range);
            pos += semi + 1;
        }
    }
    for word in ["enable", "requires"] {
        for hit in find_word(&code[pos..], word) {
            let range = part.start + pos + hit.start..part.start + pos + hit.end;
            errors.push(
                Diagnostic::at(file.locate(range), format!("`{word}` directive in the middle of a file"))
                    .label("not at the top")
                    .note(
                        "WGSL requires directives before everything else, and a kernel's source is the \
                     shared preamble + the file preamble + its section (+ included files): kernels! writes \
                     the `enable` directives each kernel needs at the very top, so leave them out (or put \
                     them at the very top of a kernel file or the shared preamble)",
                    ),
            );
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Replaces a byte range with spaces, keeping line breaks (so offsets and lines stay put).
pub fn blank(text: &mut String, range: Range<usize>) {
    let mut bytes = std::mem::take(text).into_bytes();
    for b in &mut bytes[range] {
        if *b != b'\n' && *b != b'\r' {
            *b = b' ';
        }
    }
    *text = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
}

/// The values of the `//#if` conditions for one variant of a kernel.
///
/// WGSL has no preprocessor; this one exists so that a kernel (or a preamble it uses) can carry
/// a fast form for adapters with an optional feature and a portable form for the rest:
/// `//#if subgroups` (subgroup operations) and `//#if coop` (cooperative matrices, that is
/// tensor cores), each with its negation, `//#else` and `//#endif`. Conditionals only ever
/// blank lines, so offsets and line numbers are unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conditions {
    /// `//#if coop` holds.
    pub coop: bool,
    /// `//#if subgroups` holds.
    pub subgroups: bool,
}

/// The condition names `//#if` knows.
pub const CONDITION_NAMES: [&str; 2] = ["coop", "subgroups"];

impl Conditions {
    /// The value of a condition as written after `//#if` (`coop`, `!subgroups`, …).
    pub fn value(self, written: &str) -> Option<bool> {
        let (negated, name) = match written.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, written),
        };
        let v = match name {
            "coop" => self.coop,
            "subgroups" => self.subgroups,
            _ => return None,
        };
        Some(v != negated)
    }

    /// The combinations of the conditions that `used` names, preferred first: cooperative
    /// matrices before none, then subgroups before none. A condition no text tests keeps the
    /// value `true` (it changes nothing).
    pub fn combinations(used: UsedConditions) -> Vec<Conditions> {
        let coop: &[bool] = if used.coop { &[true, false] } else { &[true] };
        let subgroups: &[bool] = if used.subgroups { &[true, false] } else { &[true] };
        coop.iter().flat_map(|&c| subgroups.iter().map(move |&s| Conditions { coop: c, subgroups: s })).collect()
    }

    /// How a message names this variant, if it is not the preferred one: "the variant without
    /// cooperative matrices (`//#if !coop` / `//#else` branches)".
    pub fn describe(self) -> Option<String> {
        let off: Vec<(&str, &str)> =
            [(self.coop, "cooperative matrices", "coop"), (self.subgroups, "subgroups", "subgroups")]
                .into_iter()
                .filter(|(on, _, _)| !on)
                .map(|(_, what, name)| (what, name))
                .collect();
        if off.is_empty() {
            return None;
        }
        let what: Vec<&str> = off.iter().map(|(w, _)| *w).collect();
        let branches: Vec<String> = off.iter().map(|(_, n)| format!("`//#if !{n}`")).collect();
        Some(format!(
            "in the variant without {} ({} / `//#else` branches)",
            what.join(" and without "),
            branches.join(", ")
        ))
    }
}

/// Which conditions some text tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsedConditions {
    /// `//#if coop` or `//#if !coop` appears.
    pub coop: bool,
    /// `//#if subgroups` or `//#if !subgroups` appears.
    pub subgroups: bool,
}

impl UsedConditions {
    /// The conditions tested by `//#if` lines of `text` (unknown ones are reported by
    /// [`apply_conditionals`]).
    pub fn of(text: &str) -> UsedConditions {
        let mut used = UsedConditions::default();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("//#") else { continue };
            let mut words = rest.split_whitespace();
            if words.next() != Some("if") {
                continue;
            }
            match words.next().map(|w| w.trim_start_matches('!')) {
                Some("coop") => used.coop = true,
                Some("subgroups") => used.subgroups = true,
                _ => {}
            }
        }
        used
    }

    /// Both sets together.
    pub fn union(self, other: UsedConditions) -> UsedConditions {
        UsedConditions { coop: self.coop || other.coop, subgroups: self.subgroups || other.subgroups }
    }
}

/// Blanks the lines a variant leaves out. `range` is the part of `file` that `text` covers
/// (`text` has the same length as that part).
pub fn apply_conditionals(
    file: &SourceFile,
    range: Range<usize>,
    text: &mut String,
    conditions: Conditions,
) -> Result<(), Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut open: Option<(bool, bool, Range<usize>)> = None; // (condition, in_else, if line)
    let mut to_blank = Vec::new();
    let mut offset = 0;
    let source = text.clone();
    for line in source.split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line).trim_end_matches('\r');
        let trimmed = content.trim();
        let line_range = offset..offset + content.len();
        let here = range.start + line_range.start..range.start + line_range.end;
        if let Some(directive) = trimmed.strip_prefix("//#").filter(|_| crate::include::include_path(trimmed).is_none())
        {
            let directive = directive.trim();
            match directive.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["if", cond] => match (conditions.value(cond), &open) {
                    (_, Some(_)) => errors.push(
                        Diagnostic::at(file.locate(here.clone()), "nested `//#if` is not supported")
                            .label("inside another `//#if`"),
                    ),
                    (None, None) => errors.push(
                        Diagnostic::at(file.locate(here.clone()), format!("unknown condition `{cond}`"))
                            .note("the conditions are `coop`, `subgroups` and their negations `!coop`, `!subgroups`"),
                    ),
                    (Some(v), None) => open = Some((v, false, here.clone())),
                },
                ["else"] => match &mut open {
                    Some((_, in_else, _)) if !*in_else => *in_else = true,
                    _ => errors.push(Diagnostic::at(file.locate(here.clone()), "`//#else` without `//#if`")),
                },
                ["endif"] => {
                    if open.take().is_none() {
                        errors.push(Diagnostic::at(file.locate(here.clone()), "`//#endif` without `//#if`"));
                    }
                }
                _ => errors.push(
                    Diagnostic::at(file.locate(here.clone()), format!("unknown directive `//#{directive}`"))
                        .note("the directives are `//#include \"file\"`, `//#if <condition>`, `//#else` and `//#endif`, with the conditions `coop`, `!coop`, `subgroups` and `!subgroups`"),
                ),
            }
        } else if let Some((cond, in_else, _)) = &open {
            let active = if *in_else { !cond } else { *cond };
            if !active {
                to_blank.push(line_range);
            }
        }
        offset += line.len();
    }
    if let Some((_, _, if_line)) = open {
        errors.push(Diagnostic::at(file.locate(if_line), "`//#if` without `//#endif`"));
    }
    for r in to_blank {
        blank(text, r);
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile::new("f.wgsl".into(), "f.wgsl".into(), text.to_string())
    }

    #[test]
    fn splits_at_markers() {
        let text = "const A = 1;\n// --- KERNEL: a ---\nfn a() {}\n// --- KERNEL: b ---\nfn b() {}\n";
        let f = file(text);
        let s = split(&f).unwrap();
        assert_eq!(&text[s.preamble.clone()], "const A = 1;\n");
        assert_eq!(s.sections.len(), 2);
        assert_eq!(s.sections[0].name, "a");
        assert_eq!(&text[s.sections[0].body.clone()], "\nfn a() {}\n");
        assert_eq!(&text[s.sections[1].body.clone()], "\nfn b() {}\n");
        assert_eq!(&text[s.sections[1].marker.clone()], "// --- KERNEL: b ---");
    }

    #[test]
    fn marker_rules() {
        assert_eq!(marker_name("// --- KERNEL: x ---"), Some("x"));
        assert_eq!(marker_name(" // --- KERNEL: x ---"), None);
        assert_eq!(marker_name("// --- KERNEL: x y ---"), None);
        assert_eq!(marker_name("// --- KERNEL:  ---"), None);
        assert_eq!(marker_name("// --- KERNEL: x --- "), None);
        // A marker at the very end of a file without a trailing newline still counts.
        let f = file("// --- KERNEL: a ---");
        let s = split(&f).unwrap();
        assert_eq!(s.sections[0].body, 20..20);
    }

    #[test]
    fn format_errors() {
        let no_marker = split(&file("fn a() {}\n")).unwrap_err();
        assert!(no_marker[0].message.contains("no kernel markers"));
        let dup = split(&file("// --- KERNEL: a ---\n// --- KERNEL: a ---\n")).unwrap_err();
        assert!(dup[0].message.contains("duplicate kernel `a`"));
        assert_eq!(dup[0].location.as_ref().unwrap().line, 2);
        let bad = split(&file("// --- KERNEL: my-kernel ---\n")).unwrap_err();
        assert!(bad[0].message.contains("is not an identifier"));
        let kw = split(&file("// --- KERNEL: loop ---\n")).unwrap_err();
        assert!(kw[0].message.contains("WGSL keyword"));
        // Rust keywords that WGSL allows are fine (the function becomes `r#gen`).
        assert!(split(&file("// --- KERNEL: gen ---\n// --- KERNEL: dyn ---\n")).is_ok());
        let reserved = split(&file("// --- KERNEL: __k_rec ---\n")).unwrap_err();
        assert!(reserved[0].message.contains("starts with `__`"));
        // Equal once normalized (NFC), as Rust compares identifiers.
        let nfd = split(&file("// --- KERNEL: caf\u{e9} ---\n// --- KERNEL: cafe\u{301} ---\n")).unwrap_err();
        assert!(nfd[0].message.contains("duplicate kernel"), "{nfd:?}");
        assert!(nfd[0].notes[1].contains("normalizes identifiers"), "{nfd:?}");
        assert_eq!(rust_name("\u{212a}ERNELS"), "KERNELS", "the Kelvin sign is K");
        let malformed = split(&file("// --- KERNEL: a ---\n// --- KERNEL: b c ---\n")).unwrap_err();
        assert!(malformed[0].message.contains("malformed"));
        // Indented or lower-case markers would silently merge kernels: errors with a suggestion.
        for line in ["  // --- KERNEL: b ---", "// --- kernel: b ---", "//--- KERNEL: b ---", "// --- KERNEL: b"] {
            let e = split(&file(&format!("// --- KERNEL: a ---\n{line}\n"))).unwrap_err();
            assert_eq!(e.len(), 1, "{line}: {e:?}");
            assert!(e[0].notes[0].contains("did you mean `// --- KERNEL: b ---`"), "{line}: {:?}", e[0].notes);
            assert_eq!(e[0].location.as_ref().unwrap().line, 2);
        }
        // Prose about kernels is not a marker.
        assert!(split(&file("// Kernels: a, b.\n// --- KERNEL: a ---\n")).is_ok());
        let shared = check_shared(&file("// a comment about // --- KERNEL: x ---\n// --- KERNEL: y ---\n"));
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].location.as_ref().unwrap().line, 2);
    }

    #[test]
    fn masks_nested_comments() {
        let t = "a /* b /* c */ d */ e // f\ng";
        let m = mask_comments(t);
        assert_eq!(m.len(), t.len());
        assert_eq!(m.replace(' ', ""), "ae\ng");
    }

    #[test]
    fn directives_at_top_are_lifted_elsewhere_rejected() {
        let t = "// c\nenable f16;\nenable subgroups, f16;\nconst a = 1;\n";
        let f = file(t);
        let mut text = t.to_string();
        lift_directives(&f, 0..t.len(), &mut text, true).unwrap();
        assert_eq!(text.len(), t.len());
        assert!(!text.contains("enable"));
        assert!(text.ends_with("const a = 1;\n"));
        let t = "enable f16, wat;\n";
        let mut text = t.to_string();
        let e = lift_directives(&file(t), 0..t.len(), &mut text, true).unwrap_err();
        assert!(e[0].message.contains("unsupported extension `wat`"));

        let t = "const a = 1;\n  enable f16;\n// enable x; is fine in a comment\n";
        let f = file(t);
        let mut text = t.to_string();
        let e = lift_directives(&f, 0..t.len(), &mut text, true).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].location.as_ref().unwrap().line, 2);
        assert_eq!(e[0].location.as_ref().unwrap().column, 3);
        // `enabled` is just a word.
        let t = "const enabled_x = 1;\n";
        let mut text = t.to_string();
        lift_directives(&file(t), 0..t.len(), &mut text, true).unwrap();
        // In a section nothing is lifted.
        let t = "enable f16;\n";
        let mut text = t.to_string();
        assert!(lift_directives(&file(t), 0..t.len(), &mut text, false).is_err());
    }

    #[test]
    fn conditionals_blank_the_inactive_branch() {
        let t = "a\n//#if subgroups\nsg\n//#else\ntree\n//#endif\nb\n";
        let f = file(t);
        let on = Conditions { coop: true, subgroups: true };
        let mut with = t.to_string();
        apply_conditionals(&f, 0..t.len(), &mut with, on).unwrap();
        assert!(with.contains("sg") && !with.contains("tree"));
        let mut without = t.to_string();
        apply_conditionals(&f, 0..t.len(), &mut without, Conditions { subgroups: false, ..on }).unwrap();
        assert!(!without.contains("sg") && without.contains("tree"));
        assert_eq!(with.len(), t.len());
        assert_eq!(with.lines().count(), t.lines().count());

        let t = "//#if subgroups\nx\n";
        let mut s = t.to_string();
        let e = apply_conditionals(&file(t), 0..t.len(), &mut s, on).unwrap_err();
        assert!(e[0].message.contains("without `//#endif`"));
        let t = "//#if wat\n//#endif\n";
        let mut s = t.to_string();
        assert!(apply_conditionals(&file(t), 0..t.len(), &mut s, on).is_err());
    }

    #[test]
    fn coop_conditions_and_their_combinations() {
        let t = "//#if coop\ntensor\n//#else\nportable\n//#endif\n//#if !subgroups\ntree\n//#endif\n";
        let used = UsedConditions::of(t);
        assert_eq!(used, UsedConditions { coop: true, subgroups: true });
        let combos = Conditions::combinations(used);
        let as_pairs: Vec<(bool, bool)> = combos.iter().map(|c| (c.coop, c.subgroups)).collect();
        assert_eq!(as_pairs, vec![(true, true), (true, false), (false, true), (false, false)]);
        let texts: Vec<String> = combos
            .iter()
            .map(|&c| {
                let mut s = t.to_string();
                apply_conditionals(&file(t), 0..t.len(), &mut s, c).unwrap();
                s.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("//#"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(texts, vec!["tensor", "tensor tree", "portable", "portable tree"]);
        // Only the conditions a text tests make variants.
        let only_coop = Conditions::combinations(UsedConditions::of("//#if !coop\nx\n//#endif\n"));
        assert_eq!(only_coop.len(), 2);
        assert!(only_coop[0].coop && !only_coop[1].coop);
        assert_eq!(Conditions::combinations(UsedConditions::default()).len(), 1);
        assert_eq!(Conditions { coop: true, subgroups: true }.describe(), None);
        let d = Conditions { coop: false, subgroups: false }.describe().unwrap();
        assert!(
            d.contains("cooperative matrices") && d.contains("`//#if !coop`") && d.contains("`//#if !subgroups`"),
            "{d}"
        );
    }
}
