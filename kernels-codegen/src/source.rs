//! Stage 1: the files a kernel file is built from (the kernel file, the shared preamble and
//! the files they `//#include`), each read once into a [`Sources`] table, with line tables for
//! mapping byte offsets back to `file:line:column`.

use std::path::{Path, PathBuf};

/// A file's index in [`Sources`].
pub type FileId = usize;

/// Every file one `kernels!` call read, each once.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    files: Vec<SourceFile>,
}

impl Sources {
    /// Adds a file; its id is its position.
    pub fn add(&mut self, file: SourceFile) -> FileId {
        self.files.push(file);
        self.files.len() - 1
    }

    /// The file with id `id`.
    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id]
    }

    /// The id of the file read from `path`, if it was read.
    pub fn find(&self, path: &Path) -> Option<FileId> {
        self.files.iter().position(|f| f.path == path)
    }

    /// How many files were read.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file was read.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The files in the order they were read.
    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files.iter().enumerate()
    }
}

/// One source file the macro read.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Absolute path, for `include_str!` tracking.
    pub path: PathBuf,
    /// The path as shown in diagnostics (relative to the manifest directory when inside it).
    pub display: String,
    /// The file's text with `\r\n` kept as is (offsets are into this text).
    pub text: String,
    line_starts: Vec<usize>,
}

/// A resolved position in an original file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file as displayed.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// The whole source line, without its line break.
    pub line_text: String,
    /// How many characters from `column` the highlighted span covers on this line (at least 1).
    pub width: usize,
}

impl SourceFile {
    /// Wraps text that was read from `path`. A UTF-8 byte-order mark is dropped (offsets and
    /// columns count from the first character after it).
    pub fn new(path: PathBuf, display: String, text: String) -> Self {
        let text = match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_string(),
            None => text,
        };
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile { path, display, text, line_starts }
    }

    /// Number of lines (a trailing newline does not start a new line).
    pub fn line_count(&self) -> usize {
        if self.text.ends_with('\n') { self.line_starts.len() - 1 } else { self.line_starts.len() }
    }

    /// 0-based line index of a byte offset (clamped to the text).
    pub fn line_index(&self, offset: usize) -> usize {
        let offset = offset.min(self.text.len());
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        }
    }

    /// Byte range of a 0-based line, without its line break.
    pub fn line_range(&self, index: usize) -> std::ops::Range<usize> {
        let start = self.line_starts[index.min(self.line_starts.len() - 1)];
        let end = self.line_starts.get(index + 1).map(|&next| next - 1).unwrap_or(self.text.len());
        let end = if end > start && self.text.as_bytes()[end - 1] == b'\r' { end - 1 } else { end };
        start..end.max(start)
    }

    /// Resolves a byte range of this file to a location (the start) and a width on that line.
    pub fn locate(&self, range: std::ops::Range<usize>) -> Location {
        let start = floor_char_boundary(&self.text, range.start.min(self.text.len()));
        let line = self.line_index(start);
        let line_range = self.line_range(line);
        let start = start.clamp(line_range.start, line_range.end);
        let line_text = &self.text[line_range.clone()];
        let column = self.text[line_range.start..start].chars().count() + 1;
        let end = floor_char_boundary(&self.text, range.end.clamp(start, line_range.end));
        let width = self.text[start..end].chars().count().max(1);
        Location { file: self.display.clone(), line: line + 1, column, line_text: line_text.to_string(), width }
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Why a file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    /// The file system said no.
    Io(std::io::Error),
    /// The bytes are not UTF-8: where the first bad byte is (the line shown as far as it
    /// decodes).
    Utf8(Box<Location>),
}

/// Reads `path` as UTF-8 text (WGSL source is UTF-8); shown as `display` in a location.
pub fn read_text(path: &Path, display: &str) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(ReadError::Io)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        // The text before the bad byte is valid, so its offsets are the file's.
        let lossy = String::from_utf8_lossy(e.as_bytes()).into_owned();
        let file = SourceFile::new(path.to_path_buf(), display.to_string(), lossy);
        let skipped = usize::from(e.as_bytes().starts_with(b"\xef\xbb\xbf")) * 3;
        ReadError::Utf8(Box::new(file.locate(at.saturating_sub(skipped)..at.saturating_sub(skipped) + 1)))
    })
}

/// Where the macro was called from: what relative paths resolve against.
#[derive(Clone, Debug, Default)]
pub struct CallSite {
    /// `CARGO_MANIFEST_DIR` of the crate being compiled.
    pub manifest_dir: Option<PathBuf>,
    /// The source file that holds the macro call, when the compiler knows it.
    pub calling_file: Option<PathBuf>,
}

impl CallSite {
    /// Resolves a path written in the macro call.
    ///
    /// Absolute paths are used as they are. A path starting with `./` or `../` is relative to the
    /// file that contains the macro call; any other relative path is relative to the calling
    /// crate's manifest directory (where its `Cargo.toml` is), like `include_str!` in build
    /// scripts and like askama and sqlx.
    pub fn resolve(&self, written: &str) -> Result<PathBuf, String> {
        let path = Path::new(written);
        if path.is_absolute() {
            return Ok(path.to_path_buf());
        }
        if written.starts_with("./") || written.starts_with("../") {
            let file = self.calling_file.as_ref().ok_or_else(|| {
                format!(
                    "`{written}` is relative to the calling file, but the compiler did not say \
                     which file this is; write the path relative to the crate's manifest directory instead"
                )
            })?;
            let file = if file.is_absolute() {
                file.clone()
            } else {
                // rustc reports paths relative to the directory cargo runs it in, the
                // workspace root; try the manifest directory's ancestors until one exists.
                self.find_relative(file).unwrap_or_else(|| file.clone())
            };
            let dir = file.parent().unwrap_or(Path::new("."));
            return Ok(normalize(&dir.join(path)));
        }
        let dir = self
            .manifest_dir
            .as_ref()
            .ok_or_else(|| "CARGO_MANIFEST_DIR is not set: build with cargo, or give an absolute path".to_string())?;
        Ok(normalize(&dir.join(path)))
    }

    fn find_relative(&self, file: &Path) -> Option<PathBuf> {
        let mut dir = self.manifest_dir.clone()?;
        loop {
            let candidate = dir.join(file);
            if candidate.exists() {
                return Some(candidate);
            }
            if !dir.pop() {
                return None;
            }
        }
    }

    /// How a path is shown in messages: relative to the manifest directory when inside it.
    pub fn display(&self, path: &Path) -> String {
        if let Some(dir) = &self.manifest_dir
            && let Ok(rel) = path.strip_prefix(dir)
        {
            return rel.to_string_lossy().replace('\\', "/");
        }
        path.to_string_lossy().into_owned()
    }
}

/// Removes `.` and `..` components without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The Rust module name of a kernel file: `03_linear.wgsl` → `linear`.
///
/// The leading numeric prefix and its underscore are dropped, `-` becomes `_`; the rest must be
/// an identifier (Rust keywords are fine: the module is emitted as a raw identifier).
pub fn module_name(path: &Path) -> Result<String, String> {
    let stem =
        path.file_stem().and_then(|s| s.to_str()).ok_or_else(|| format!("`{}` has no file name", path.display()))?;
    let trimmed = stem.trim_start_matches(|c: char| c.is_ascii_digit());
    let name = if trimmed.len() != stem.len() { trimmed.strip_prefix('_').unwrap_or(trimmed) } else { stem };
    let name = name.replace('-', "_");
    // Any identifier works, Rust keywords too (the module becomes `r#type`), except the few
    // Rust cannot write even raw.
    if name.starts_with("__") || syn::parse_str::<syn::Ident>(&format!("r#{name}")).is_err() {
        return Err(format!(
            "the file name `{stem}` does not give a Rust module name (after dropping the numeric \
             prefix it is `{name}`); rename the file or pass `module = some_name`"
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_maps_offsets_to_lines_and_columns() {
        let f = SourceFile::new("a".into(), "a.wgsl".into(), "ab\ncdé\r\nfg".into());
        assert_eq!(f.line_count(), 3);
        let loc = f.locate(4..5);
        assert_eq!((loc.line, loc.column, loc.line_text.as_str()), (2, 2, "cdé"));
        let loc = f.locate(8..9);
        assert_eq!((loc.line, loc.column), (2, 4), "offset in \\r\\n clamps to the line end");
        let loc = f.locate(9..11);
        assert_eq!((loc.line, loc.column, loc.width), (3, 1, 2));
        let loc = f.locate(100..200);
        assert_eq!(loc.line, 3);
    }

    #[test]
    fn a_byte_order_mark_is_not_text() {
        let f = SourceFile::new("a".into(), "a.wgsl".into(), "\u{feff}// --- KERNEL: k ---\nx".into());
        assert!(f.text.starts_with("// --- KERNEL"));
        assert_eq!(crate::split::find_markers(&f.text).len(), 1);
        assert_eq!(f.locate(0..2).column, 1);
    }

    #[test]
    fn module_names_drop_the_numeric_prefix() {
        assert_eq!(module_name(Path::new("shaders/03_linear.wgsl")).unwrap(), "linear");
        assert_eq!(module_name(Path::new("10_backward_attention.wgsl")).unwrap(), "backward_attention");
        assert_eq!(module_name(Path::new("plain.wgsl")).unwrap(), "plain");
        assert!(module_name(Path::new("03_.wgsl")).is_err());
        assert_eq!(module_name(Path::new("03_fn.wgsl")).unwrap(), "fn", "keywords become raw identifiers");
        assert_eq!(module_name(Path::new("01_gen.wgsl")).unwrap(), "gen");
        assert!(module_name(Path::new("03_self.wgsl")).is_err());
        assert!(module_name(Path::new("03_a.b.wgsl")).is_err());
    }

    #[test]
    fn paths_resolve_against_manifest_or_calling_file() {
        let site = CallSite { manifest_dir: Some("/crate".into()), calling_file: Some("/crate/tests/ui/x.rs".into()) };
        assert_eq!(site.resolve("shaders/a.wgsl").unwrap(), Path::new("/crate/shaders/a.wgsl"));
        assert_eq!(site.resolve("./f/a.wgsl").unwrap(), Path::new("/crate/tests/ui/f/a.wgsl"));
        assert_eq!(site.resolve("../a.wgsl").unwrap(), Path::new("/crate/tests/a.wgsl"));
        assert_eq!(site.resolve("/abs/a.wgsl").unwrap(), Path::new("/abs/a.wgsl"));
        assert_eq!(site.display(Path::new("/crate/shaders/a.wgsl")), "shaders/a.wgsl");
    }
}
