//! What a program compiled against a kernel file depends on, as text, so that the runtime's hot
//! reload can tell whether a new version of the file still fits it.
//!
//! The macro emits [`kernel_interface`] of every kernel and [`file_interface`] of the file into
//! the generated module. At run time the runtime compiles the edited files with the same
//! [`compile`](crate::compile::compile) and compares: a kernel whose lines are unchanged can
//! take the new source; one whose lines differ cannot (the Rust function, its structs, its grid
//! and checks, the constants the host reads were generated from the old ones), and
//! [`mismatch`] reports what changed at the declaration that changed, rendered like the compile
//! error the rebuild would give.
//!
//! Each line is `key: value`, the key naming one item (`binding x`, `struct Params`,
//! `workgroup_size`), so two versions are compared item by item.

use crate::compile::{File, Kernel};
use crate::diagnostic::Diagnostic;
use crate::reflect::{Access, ResourceKind};
use crate::shape::GridSource;
use crate::source::{Location, SourceFile};
use crate::split;

/// What the Rust side of kernel `k` was generated from: bindings with their element and uniform
/// types and layouts, textures and samplers, the immediate, every struct's fields and offsets,
/// the overrides, the workgroup size, the `@grid` and `@requires` annotations and the constants
/// they name. `None` for a kernel without an interface (its source did not parse).
pub fn kernel_interface(k: &Kernel) -> Option<String> {
    let iface = k.interface.as_ref()?;
    let mut lines = Vec::new();
    let dims: Vec<String> = iface
        .workgroup_size
        .iter()
        .zip(&iface.workgroup_size_overrides)
        .map(|(d, o)| match o {
            Some(name) => format!("{name} (default {d})"),
            None => d.to_string(),
        })
        .collect();
    lines.push(format!("workgroup_size: {}", dims.join(" × ")));
    for b in &iface.bindings {
        let access = match b.access {
            Access::Read => "storage, read",
            Access::ReadWrite => "storage, read_write",
            Access::Uniform => "uniform",
        };
        let layout = match (b.access, &b.header) {
            (Access::Uniform, _) => format!("{} bytes", b.stride),
            (_, None) => {
                format!("elements {}, {} bytes each, at least {}", b.ty.describe(), b.stride, b.min_elems)
            }
            (_, Some(h)) => format!(
                "header {}, {} bytes, then elements {}, {} bytes each, at least {}",
                h.describe(),
                b.offset,
                b.ty.describe(),
                b.stride,
                b.min_elems
            ),
        };
        lines.push(format!(
            "binding {}: @group({}) @binding({}) var<{access}> {}: {} ({layout})",
            b.name, b.group, b.binding, b.name, b.wgsl,
        ));
    }
    for r in &iface.resources {
        let kind = match &r.kind {
            ResourceKind::Texture { dim, sample } => format!("texture {dim:?} {sample:?}"),
            ResourceKind::StorageTexture { dim, format, access } => {
                format!("storage texture {dim:?} {format} {access:?}")
            }
            ResourceKind::Sampler { comparison, filtering } => {
                format!("sampler (comparison: {comparison}, filtering: {filtering})")
            }
        };
        lines.push(format!("binding {}: @group({}) @binding({}) {} ({kind})", r.name, r.group, r.binding, r.wgsl));
    }
    if let Some(i) = &iface.immediate {
        lines.push(format!("immediate {}: {} ({} bytes)", i.name, i.ty.describe(), i.size));
    }
    for s in &iface.structs {
        let fields: Vec<String> = s
            .fields
            .iter()
            .map(|f| match (&f.name, &f.ty) {
                (Some(n), Some(t)) => format!("{n}: {} at {}", t.describe(), f.offset),
                _ => format!("{} bytes of padding at {}", f.size, f.offset),
            })
            .collect();
        lines.push(format!("struct {}: {} bytes {{ {} }}", s.name, s.size, fields.join(", ")));
    }
    for o in &iface.overrides {
        let id = o.id.map(|i| format!("@id({i}) ")).unwrap_or_default();
        let default = if o.has_default { "with a default" } else { "required" };
        lines.push(format!("override {}: {id}{} ({default})", o.name, o.ty));
    }
    match &k.shape.grid {
        GridSource::Annotation(g) => lines.push(format!("grid: @grid {}", g.text)),
        GridSource::Caller => lines.push("grid: given by the caller".into()),
        GridSource::Invalid => lines.push("grid: invalid".into()),
    }
    for (i, r) in k.shape.requires.iter().enumerate() {
        lines.push(format!("requires {}: @requires {}", i + 1, r.text));
    }
    for (name, ty, value) in &k.constants {
        lines.push(format!("const {name}: const {name}: {ty} = {value}"));
    }
    Some(lines.join("\n"))
}

/// What the file's Rust module holds beside its kernels: the constants of the shared and file
/// preambles (`linear::TILE_M`), which host code computes with.
pub fn file_interface(file: &File) -> String {
    let lines: Vec<String> =
        file.consts.iter().map(|(name, ty, value)| format!("const {name}: const {name}: {ty} = {value}")).collect();
    lines.join("\n")
}

/// One item that differs between the compiled interface and the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The item's key (`binding x`, `struct Params`, `workgroup_size`).
    pub key: String,
    /// What the program was compiled with (`None`: the item is new).
    pub compiled: Option<String>,
    /// What the file says now (`None`: the item is gone).
    pub now: Option<String>,
}

/// The items of `now` that differ from `compiled` (both from [`kernel_interface`] or
/// [`file_interface`]), in the order of `compiled`, new items last.
pub fn changes(compiled: &str, now: &str) -> Vec<Change> {
    let parse = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once(": ") {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (l.to_string(), String::new()),
            })
            .collect()
    };
    let (old, new) = (parse(compiled), parse(now));
    let mut out = Vec::new();
    for (key, value) in &old {
        match new.iter().find(|(k, _)| k == key) {
            Some((_, v)) if v == value => {}
            found => {
                out.push(Change { key: key.clone(), compiled: Some(value.clone()), now: found.map(|f| f.1.clone()) })
            }
        }
    }
    for (key, value) in &new {
        if !old.iter().any(|(k, _)| k == key) {
            out.push(Change { key: key.clone(), compiled: None, now: Some(value.clone()) });
        }
    }
    out
}

/// The error for a kernel (or, with `kernel == None`, the file's constants) whose interface
/// changed: at the declaration that changed in the new text (the kernel's marker when it
/// cannot be found), saying what the program was compiled with and what the file says now.
pub fn mismatch(file: &File, kernel: Option<&Kernel>, changes: &[Change]) -> Diagnostic {
    let texts = Texts::read(file);
    let first = changes.first();
    let location = first.and_then(|c| texts.declaration(kernel, &c.key)).or_else(|| kernel.map(|k| k.marker.clone()));
    let what = match kernel {
        Some(_) => "its interface changed since the program was compiled".to_string(),
        None => format!("a constant of `{}` that the program reads changed", file.display),
    };
    let mut d = match location {
        Some(l) => Diagnostic::at(l, what),
        None => Diagnostic::new(what),
    };
    d = d.label(match first {
        Some(c) if c.now.is_none() => format!("`{}` is gone from here", c.key),
        Some(c) => format!("`{}` changed", c.key),
        None => String::new(),
    });
    for c in changes {
        d = d.note(match (&c.compiled, &c.now) {
            (Some(old), Some(new)) => format!("{}: compiled as `{old}`, now `{new}`", c.key),
            (Some(old), None) => format!("{}: compiled as `{old}`, now absent", c.key),
            (None, Some(new)) => format!("{}: new, `{new}`", c.key),
            (None, None) => c.key.clone(),
        });
    }
    d = d.note(
        "the running program's Rust code was generated from the compiled interface: rebuild it to use the new one; until then the pipeline compiled from the old source keeps running",
    );
    match kernel {
        Some(k) => d.in_kernel(&k.name),
        None => d,
    }
}

/// The files of a compiled kernel file, read again to place an error.
struct Texts {
    files: Vec<SourceFile>,
}

impl Texts {
    fn read(file: &File) -> Texts {
        let display = |p: &std::path::Path| match file.manifest_dir.as_deref().and_then(|d| p.strip_prefix(d).ok()) {
            Some(rel) => rel.to_string_lossy().replace('\\', "/"),
            None => p.to_string_lossy().into_owned(),
        };
        let files = file
            .read
            .iter()
            .filter_map(|p| {
                let text = std::fs::read_to_string(p).ok()?;
                Some(SourceFile::new(p.clone(), display(p), text))
            })
            .collect();
        Texts { files }
    }

    /// Where the item `key` is declared: in the kernel's own section first, then anywhere in
    /// the kernel file and the files it reads.
    fn declaration(&self, kernel: Option<&Kernel>, key: &str) -> Option<Location> {
        if let Some(k) = kernel {
            match key {
                "grid" => {
                    if let GridSource::Annotation(g) = &k.shape.grid {
                        return Some(g.location.clone());
                    }
                    return None;
                }
                "workgroup_size" => return self.find(kernel, "workgroup_size", &["@"]),
                _ => {}
            }
            if let Some(n) = key.strip_prefix("requires ").and_then(|n| n.parse::<usize>().ok()) {
                return k.shape.requires.get(n.wrapping_sub(1)).map(|r| r.location.clone());
            }
        }
        let (kind, name) = key.split_once(' ')?;
        let before: &[&str] = match kind {
            "binding" | "immediate" => &["var", ">"],
            "struct" => &["struct"],
            "override" => &["override"],
            "const" => &["const"],
            _ => return None,
        };
        self.find(kernel, name, before)
    }

    /// The first whole-word `word` preceded (after blanks) by one of `before`, searched in
    /// `kernel`'s section of the kernel file, then in every file.
    fn find(&self, kernel: Option<&Kernel>, word: &str, before: &[&str]) -> Option<Location> {
        let matches = |file: &SourceFile, code: &str, range: std::ops::Range<usize>| {
            split::find_word(&code[range.clone()], word)
                .into_iter()
                .map(move |r| r.start + range.start..r.end + range.start)
                .find(|r| {
                    let head = code[..r.start].trim_end();
                    before.iter().any(|b| head.ends_with(b))
                })
                .map(|r| file.locate(r))
        };
        let kernel_file = self.files.first()?;
        let code = split::mask_comments(&kernel_file.text);
        if let Some(k) = kernel {
            let markers = split::find_markers(&kernel_file.text);
            let own = markers.iter().position(|(name, _)| *name == k.name);
            if let Some(i) = own {
                let start = markers[i].1.end;
                let end = markers.get(i + 1).map_or(code.len(), |m| m.1.start);
                if let Some(l) = matches(kernel_file, &code, start..end) {
                    return Some(l);
                }
            }
        }
        for f in &self.files {
            let code = split::mask_comments(&f.text);
            if let Some(l) = matches(f, &code, 0..code.len()) {
                return Some(l);
            }
        }
        None
    }
}

/// Compiles a kernel file again as the macro did: `kernel_file` and `shared` are the absolute
/// paths the macro resolved ([`File::path`], [`File::shared`]), `module` the module it named,
/// and paths are shown relative to `manifest_dir`, as in the compile errors.
pub fn compile_again(
    manifest_dir: Option<&std::path::Path>,
    kernel_file: &std::path::Path,
    shared: Option<&std::path::Path>,
    module: &str,
) -> File {
    let site = crate::CallSite { manifest_dir: manifest_dir.map(Into::into), calling_file: None };
    let shared = match shared {
        Some(p) => crate::input::Shared::Path(p.to_string_lossy().into_owned()),
        None => crate::input::Shared::None,
    };
    crate::compile::compile(&site, &kernel_file.to_string_lossy(), &shared, Some(module.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_pair_items_by_key() {
        let old = "workgroup_size: 64 × 1 × 1\nbinding x: a\nbinding y: b\ngrid: given by the caller";
        let new = "workgroup_size: 128 × 1 × 1\nbinding y: b\nbinding z: c\ngrid: given by the caller";
        let c = changes(old, new);
        assert_eq!(
            c,
            vec![
                Change {
                    key: "workgroup_size".into(),
                    compiled: Some("64 × 1 × 1".into()),
                    now: Some("128 × 1 × 1".into())
                },
                Change { key: "binding x".into(), compiled: Some("a".into()), now: None },
                Change { key: "binding z".into(), compiled: None, now: Some("c".into()) },
            ]
        );
        assert!(changes(old, old).is_empty());
    }
}
