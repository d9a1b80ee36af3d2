//! Stage 1b: `//#include "path"` lines. A line that is exactly `//#include "<path>"` (leading
//! and trailing spaces allowed) in the shared preamble, a file preamble, a kernel section or an
//! included file inserts that file's text after it. The path is relative to the including
//! file's directory (or absolute). Every file reachable this way is read once, here, and
//! checked: a missing file, a malformed line or an include cycle is an error at the include
//! line; an included file must not contain kernel markers or `enable` directives (it may
//! contain `//#if` blocks, which choose lines per variant like anywhere else).
//! [`assemble`](crate::assemble) inserts each file at most once per kernel's source.

use crate::diagnostic::Diagnostic;
use crate::source::{CallSite, FileId, SourceFile, Sources, normalize};
use std::ops::Range;
use std::path::Path;

/// One include line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Include {
    /// The line in the including file, without its line break.
    pub line: Range<usize>,
    /// The file it inserts.
    pub target: FileId,
}

/// The include lines of every file, by [`FileId`].
#[derive(Clone, Debug, Default)]
pub struct Includes {
    by_file: Vec<Vec<Include>>,
}

impl Includes {
    /// The include lines of `file`, in file order (none for a file that has none).
    pub fn of(&self, file: FileId) -> &[Include] {
        self.by_file.get(file).map_or(&[], Vec::as_slice)
    }
}

/// The path of an include line (`//#include "a/b.wgsl"` → `a/b.wgsl`), `Some(Err)` for a line
/// that starts like one but is malformed, `None` for any other line.
pub fn include_path(line: &str) -> Option<Result<&str, String>> {
    let rest = line.trim().strip_prefix("//#")?.trim_start();
    let rest = rest.strip_prefix("include")?;
    if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let quoted = rest.trim();
    let path = quoted.strip_prefix('"').and_then(|r| r.strip_suffix('"'));
    Some(match path {
        Some(p) if !p.is_empty() && !p.contains('"') => Ok(p),
        _ => Err(format!("expected `//#include \"path/to/file.wgsl\"`, found `{}`", line.trim())),
    })
}

/// Lines of `text` as (byte range without the line break, content).
fn lines(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    let mut start = 0;
    text.split_inclusive('\n').map(move |line| {
        let content = line.strip_suffix('\n').unwrap_or(line);
        let content = content.strip_suffix('\r').unwrap_or(content);
        let range = start..start + content.len();
        start += line.len();
        (range, content)
    })
}

/// Reads every file the `roots` include, directly or not, into `sources`, and finds their
/// include lines. Errors are at the include line (missing file, malformed line, cycle) or in
/// the included file (markers, `enable` directives).
pub fn load(site: &CallSite, sources: &mut Sources, roots: &[FileId]) -> (Includes, Vec<Diagnostic>) {
    let mut loader =
        Loader { site, roots: roots.to_vec(), includes: Includes::default(), errors: Vec::new(), done: Vec::new() };
    for &root in roots {
        loader.visit(sources, root, &mut vec![root]);
    }
    (loader.includes, loader.errors)
}

/// How deep includes may nest: far more than any real file needs, and few enough that
/// following them (recursively) cannot exhaust the compiler's stack.
pub const MAX_DEPTH: usize = 64;

struct Loader<'a> {
    site: &'a CallSite,
    /// The shared preamble and the kernel file.
    roots: Vec<FileId>,
    includes: Includes,
    errors: Vec<Diagnostic>,
    done: Vec<FileId>,
}

impl Loader<'_> {
    fn visit(&mut self, sources: &mut Sources, file: FileId, stack: &mut Vec<FileId>) {
        if self.done.contains(&file) {
            return;
        }
        self.done.push(file);
        let found: Vec<(Range<usize>, Result<String, String>)> = lines(&sources.get(file).text)
            .filter_map(|(range, line)| include_path(line).map(|p| (range, p.map(str::to_string))))
            .collect();
        for (line, path) in found {
            let here = sources.get(file).locate(line.clone());
            let written = match path {
                Ok(p) => p,
                Err(e) => {
                    self.errors.push(Diagnostic::at(here, "malformed include").label(e));
                    continue;
                }
            };
            let dir = sources.get(file).path.parent().map(Path::to_path_buf).unwrap_or_default();
            let path = normalize(&dir.join(&written));
            if stack.len() > MAX_DEPTH {
                let chain: Vec<String> =
                    stack.iter().take(3).map(|&f| format!("`{}`", sources.get(f).display)).collect();
                self.errors.push(
                    Diagnostic::at(here, format!("includes nest more than {MAX_DEPTH} files deep"))
                        .label("one include too many")
                        .note(format!("the chain starts {} → …", chain.join(" → ")))
                        .note("kernels! follows at most this many nested includes; flatten the chain"),
                );
                continue;
            }
            let target = match sources.find(&path) {
                Some(t) => t,
                None => match crate::source::read_text(&path, &self.site.display(&path)) {
                    Ok(text) => {
                        let display = self.site.display(&path);
                        let id = sources.add(SourceFile::new(path.clone(), display, text));
                        self.check_included(sources.get(id));
                        id
                    }
                    Err(crate::source::ReadError::Utf8(at)) => {
                        self.errors.push(
                            Diagnostic::at(*at, format!("the included file `{written}` is not UTF-8 text"))
                                .label("this byte is not UTF-8")
                                .note(format!("included at {}:{}", here.file, here.line))
                                .note("WGSL source is UTF-8; save the file as UTF-8"),
                        );
                        continue;
                    }
                    Err(crate::source::ReadError::Io(e)) => {
                        self.errors.push(
                            Diagnostic::at(here, format!("cannot read included file `{written}`: {e}"))
                                .label("included here")
                                .note(format!("looked for {}", path.display()))
                                .note("an include path is relative to the directory of the file that includes it"),
                        );
                        continue;
                    }
                },
            };
            // The kernel file was read as a root, so its markers were never checked as an
            // included file's: it would be inserted whole, every kernel in every kernel.
            if self.roots.contains(&target)
                && let Some((_, marker)) = crate::split::find_markers(&sources.get(target).text).into_iter().next()
            {
                let m = sources.get(target).locate(marker);
                self.errors.push(
                    Diagnostic::at(here, format!("`{written}` is the kernel file, which cannot be included"))
                        .label("includes the kernel file")
                        .note(format!("it holds kernel markers (the first at {}:{})", m.file, m.line))
                        .note("included text is inserted into each kernel's source; put what the kernels share in a file of its own and include that"),
                );
                continue;
            }
            if let Some(at) = stack.iter().position(|&f| f == target) {
                let chain: Vec<String> =
                    stack[at..].iter().chain([&target]).map(|&f| format!("`{}`", sources.get(f).display)).collect();
                self.errors.push(
                    Diagnostic::at(here, "include cycle")
                        .label("includes a file that includes this one")
                        .note(format!("the cycle: {}", chain.join(" → "))),
                );
                continue;
            }
            if self.includes.by_file.len() <= file {
                self.includes.by_file.resize(file + 1, Vec::new());
            }
            self.includes.by_file[file].push(Include { line: line.clone(), target });
            stack.push(target);
            self.visit(sources, target, stack);
            stack.pop();
        }
    }

    /// An included file is WGSL only: no markers, no directives.
    fn check_included(&mut self, file: &SourceFile) {
        for (_, range) in crate::split::find_markers(&file.text) {
            self.errors.push(
                Diagnostic::at(file.locate(range), "an included file must not contain kernel markers")
                    .label("marker in an included file")
                    .note("included text is inserted into each kernel's source; put kernels in a kernel file"),
            );
        }
        let mut scratch = file.text.clone();
        if let Err(e) = crate::split::lift_directives(file, 0..file.text.len(), &mut scratch, false) {
            self.errors.extend(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_lines() {
        assert_eq!(include_path("//#include \"a/b.wgsl\""), Some(Ok("a/b.wgsl")));
        assert_eq!(include_path("  //#include   \"x.wgsl\"  "), Some(Ok("x.wgsl")));
        assert!(matches!(include_path("//#include a.wgsl"), Some(Err(_))));
        assert!(matches!(include_path("//#include \"\""), Some(Err(_))));
        assert_eq!(include_path("//#included"), None);
        assert_eq!(include_path("// #include \"a\""), None);
        assert_eq!(include_path("//#if coop"), None);
    }
}
