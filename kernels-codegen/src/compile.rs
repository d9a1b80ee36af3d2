//! The pipeline for one kernel file: read (with includes) → split → lift directives → pick
//! variants → assemble → validate (naga, uniformity, SPIR-V) → reflect → shape annotations,
//! collecting every error with its original location. Everything the macro emits is decided
//! here; [`expand`](mod@crate::expand) only turns it into tokens. Nothing here panics on user
//! input.

use crate::annotate::{self, Notes};
use crate::assemble::{Assembled, Built, DeclId, NameIndex, Pieces, assemble, assemble_decls};
use crate::diagnostic::Diagnostic;
use crate::include::{self, Includes};
use crate::input::Shared;
use crate::outline::{self, Outline, Role};
use crate::reflect::{self, Interface};
use crate::shape::{self, GridSource, Located, Shape};
use crate::source::{CallSite, FileId, Location, SourceFile, Sources};
use crate::split::{self, Conditions, Split, UsedConditions};
use crate::validate::{self, CoopConfig, ENABLE_F16, RawError};

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;

/// One compiled form of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The `//#if` conditions it was built with.
    pub conditions: Conditions,
    /// Uses subgroup operations (needs `SUBGROUP`).
    pub subgroups: bool,
    /// Uses f16 (needs `SHADER_F16`).
    pub f16: bool,
    /// The cooperative-matrix configurations it uses; empty when it uses none. A variant that
    /// uses any needs `EXPERIMENTAL_COOPERATIVE_MATRIX`, and has no browser form.
    pub coop: Vec<CoopConfig>,
    /// The source for wgpu (no `enable subgroups;`: naga 30 rejects it; `enable f16;` and
    /// `enable wgpu_cooperative_matrix;` where used).
    pub wgsl: String,
    /// The other wgpu features it needs (`SHADER_INT64`, `SHADER_F64`, 64-bit atomics,
    /// `IMMEDIATES`; see [`validate::FEATURES`]). WebGPU has none of them.
    pub features: Vec<&'static str>,
    /// The source for a browser (with `enable subgroups;` where used, as WebGPU requires);
    /// empty for a variant that uses cooperative matrices or needs one of `features`, which
    /// WebGPU does not have.
    pub browser_wgsl: String,
    /// The keys (the `@id` if given, else the name) of the `override` declarations its source
    /// has, as naga parsed them: the values a pipeline of this form may be given (wgpu refuses
    /// one for an override the module does not declare).
    pub overrides: Vec<String>,
}

/// A kernel after compilation.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Its name.
    pub name: String,
    /// Doc text from its comments, one entry per line.
    pub doc: Vec<String>,
    /// Its interface, when the source parsed.
    pub interface: Option<Interface>,
    /// Its `@grid` and `@requires` annotations, checked against the interface.
    pub shape: Shape,
    /// Variants, preferred first. Empty when the kernel has errors.
    pub variants: Vec<Variant>,
    /// Errors in this kernel.
    pub errors: Vec<Diagnostic>,
    /// Where its marker is.
    pub marker: Location,
    /// The module constants of its source that its annotations name: (name, Rust type, value
    /// as a Rust literal), for hosts that read the annotations' text (a constant of its
    /// section or of a file only it includes is in no file's [`File::consts`]).
    pub constants: Vec<(String, &'static str, String)>,
}

/// A kernel file after compilation.
#[derive(Clone, Debug, Default)]
pub struct File {
    /// The generated module's name.
    pub module: String,
    /// Files read (absolute): the kernel file, the shared preamble and every included file,
    /// for rebuild tracking and hot reload.
    pub read: Vec<PathBuf>,
    /// The kernel file (absolute), once it was found.
    pub path: Option<PathBuf>,
    /// The shared preamble (absolute), if the file has one.
    pub shared: Option<PathBuf>,
    /// The directory paths are shown relative to (the calling crate's manifest directory).
    pub manifest_dir: Option<PathBuf>,
    /// The kernel file as displayed.
    pub display: String,
    /// The kernel file's header comment, one entry per line
    /// ([`file_header`](crate::annotate::file_header)).
    pub doc: Vec<String>,
    /// Kernels in file order.
    pub kernels: Vec<Kernel>,
    /// The constants of the shared and file preambles (and the files they include), for the
    /// host: (name, Rust type, value as a Rust literal).
    pub consts: Vec<(String, &'static str, String)>,
    /// Errors that concern the whole file.
    pub errors: Vec<Diagnostic>,
}

impl File {
    /// Every error, file-level first.
    pub fn all_errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.errors.iter().chain(self.kernels.iter().flat_map(|k| k.errors.iter()))
    }
}

fn read(site: &CallSite, written: &str, what: &str) -> Result<SourceFile, Box<Diagnostic>> {
    let path = site.resolve(written).map_err(|e| Box::new(Diagnostic::new(e)))?;
    let text = crate::source::read_text(&path, &site.display(&path)).map_err(|e| {
        Box::new(match e {
            crate::source::ReadError::Io(e) => Diagnostic::new(format!("cannot read {what} `{written}`: {e}"))
                .note(format!("looked for {}", path.display()))
                .note("paths are relative to the crate's manifest directory (where Cargo.toml is), or to the calling file when they start with `./` or `../`"),
            crate::source::ReadError::Utf8(at) => Diagnostic::at(*at, format!("the {what} `{written}` is not UTF-8 text"))
                .label("this byte is not UTF-8")
                .note("WGSL source is UTF-8; save the file as UTF-8"),
        })
    })?;
    Ok(SourceFile::new(path.clone(), site.display(&path), text))
}

/// Compiles one kernel file.
pub fn compile(site: &CallSite, path: &str, shared: &Shared, module: Option<String>) -> File {
    let mut out = File { manifest_dir: site.manifest_dir.clone(), ..File::default() };
    let mut sources = Sources::default();
    let kernel_file = match read(site, path, "kernel file") {
        Ok(f) => sources.add(f),
        Err(e) => {
            out.errors.push(*e);
            return out;
        }
    };
    let file = sources.get(kernel_file).clone();
    out.path = Some(file.path.clone());
    out.display = file.display.clone();
    out.doc = annotate::file_header(&file.text);
    out.module = match module {
        Some(m) => m,
        None => match crate::source::module_name(&file.path) {
            Ok(m) => m,
            Err(e) => {
                out.errors.push(Diagnostic::new(e));
                String::new()
            }
        },
    };
    let shared_file = match shared {
        Shared::None => None,
        Shared::Path(p) => match read(site, p, "shared preamble") {
            Ok(f) => Some(sources.add(f)),
            Err(e) => {
                out.errors.push(*e);
                return out;
            }
        },
        Shared::Default => {
            let dir = file.path.parent().map(|d| d.to_path_buf()).unwrap_or_default();
            let default = dir.join("00_shared.wgsl");
            if default == file.path {
                out.errors.push(Diagnostic::new(
                    "this is the shared preamble itself; pass a kernel file (the shared preamble is read for it)",
                ));
                return out;
            }
            match read(site, &default.to_string_lossy(), "shared preamble") {
                Ok(f) => Some(sources.add(f)),
                Err(e) => {
                    out.errors
                        .push((*e).note("to build without a shared preamble, write `kernels!(\"…\", shared = none)`"));
                    return out;
                }
            }
        }
    };
    out.shared = shared_file.map(|s| sources.get(s).path.clone());
    let roots: Vec<FileId> = shared_file.into_iter().chain([kernel_file]).collect();
    let (includes, include_errors) = include::load(site, &mut sources, &roots);
    out.read = sources.iter().map(|(_, f)| f.path.clone()).collect();
    out.errors.extend(include_errors);
    if let Some(s) = shared_file {
        out.errors.extend(split::check_shared(sources.get(s)));
    }
    let split = match split::split(&file) {
        Ok(s) => s,
        Err(e) => {
            out.errors.extend(e);
            return out;
        }
    };

    // Directives: only at the very top of the kernel file and the shared preamble; lifted out
    // (blanking keeps offsets, so whole texts are edited in place). Included files were
    // checked when they were read.
    let mut lifted: Vec<String> = sources.iter().map(|(_, f)| f.text.clone()).collect();
    let mut lift = |id: FileId, range: Range<usize>, top: bool, errors: &mut Vec<Diagnostic>| {
        if let Err(e) = split::lift_directives(sources.get(id), range, &mut lifted[id], top) {
            errors.extend(e);
        }
    };
    lift(kernel_file, split.preamble.clone(), true, &mut out.errors);
    for section in &split.sections {
        lift(kernel_file, section.body.clone(), false, &mut out.errors);
    }
    if let Some(s) = shared_file {
        lift(s, 0..sources.get(s).text.len(), true, &mut out.errors);
    }
    if !out.errors.is_empty() {
        return out;
    }

    let used = sources.iter().fold(UsedConditions::default(), |u, (_, f)| u.union(UsedConditions::of(&f.text)));
    let mut forms = Vec::new();
    for conditions in Conditions::combinations(used) {
        match texts(&sources, kernel_file, &split, &lifted, conditions) {
            Ok(texts) => forms.push(Form::new(kernel_file, &split, conditions, texts)),
            Err(e) => {
                // Every combination reports the same structural errors: report them once.
                out.errors.extend(e);
                return out;
            }
        }
    }

    // What other text follows must close its brackets.
    for form in &forms {
        for (id, f) in sources.iter() {
            let range = if id == kernel_file { split.preamble.clone() } else { 0..f.text.len() };
            if let Some(e) = split::unbalanced(f, &form.texts[id], range)
                && !out.errors.contains(&e)
            {
                out.errors.push(e);
            }
        }
    }
    if !out.errors.is_empty() {
        return out;
    }

    let ctx = Ctx { sources: &sources, includes: &includes, kernel_file, shared: shared_file, split: &split };
    let mut dead = vec![DeadCode::default(); forms.len()];
    for section in &split.sections {
        out.kernels.push(ctx.kernel(&forms, section, &mut dead));
    }
    let mut values: Vec<(String, &'static str, String)> =
        out.kernels.iter().filter_map(|k| k.interface.as_ref()).flat_map(|i| i.exported.iter().cloned()).collect();
    for (form, dead) in forms.iter().zip(&dead) {
        let (errors, unused_values) = ctx.check_unused(form, dead);
        values.extend(unused_values);
        for e in errors {
            Diagnostic::push_once(&mut out.errors, e);
        }
    }
    // The host sees the constants every kernel could see: those of the common parts.
    for (form, dead) in forms.iter().zip(&dead) {
        for &(file, i) in &dead.decls {
            let Some(decl) = form.outlines[file].as_ref().map(|o| &o.decls[i]) else { continue };
            if let Role::Named("const", name) = &decl.role
                && out.consts.iter().all(|c| &c.0 != name)
                && let Some(v) = values.iter().find(|v| &v.0 == name)
            {
                // A name Rust reads as another's (NFC) would be a second item of that name.
                let at = || {
                    let range = split::find_word(&form.codes[file][decl.range.clone()], name)
                        .first()
                        .map_or(decl.range.clone(), |r| decl.range.start + r.start..decl.range.start + r.end);
                    sources.get(file).locate(range)
                };
                let key = split::rust_name(name);
                let other = out
                    .consts
                    .iter()
                    .map(|c| (&c.0, "constant"))
                    .chain(out.kernels.iter().map(|k| (&k.name, "kernel")))
                    .find(|(n, _)| split::rust_name(n) == key && *n != name);
                match other {
                    Some((other, what)) => Diagnostic::push_once(
                        &mut out.errors,
                        Diagnostic::at(at(), format!("constant `{name}` and {what} `{other}` are one name in the generated Rust"))
                            .label("a `pub const` of the file's module")
                            .note(format!(
                                "they differ only in Unicode composition (`{}` and `{}`), and Rust normalizes identifiers (NFC); rename one",
                                split::spelled(name),
                                split::spelled(other)
                            )),
                    ),
                    None => out.consts.push(v.clone()),
                }
            }
        }
    }
    out
}

/// One variant's texts of every file, with what assembly needs: comments masked and the
/// declarations of the parts kernels take only what they reach from.
struct Form {
    conditions: Conditions,
    texts: Vec<String>,
    codes: Vec<String>,
    outlines: Vec<Option<Outline>>,
    index: NameIndex,
}

impl Form {
    fn new(kernel_file: FileId, split: &Split, conditions: Conditions, texts: Vec<String>) -> Form {
        let codes: Vec<String> = texts.iter().map(|t| split::mask_comments(t)).collect();
        let outlines: Vec<Option<Outline>> = codes
            .iter()
            .enumerate()
            .map(|(id, code)| {
                let range = if id == kernel_file { split.preamble.clone() } else { 0..code.len() };
                Some(outline::outline(code, range))
            })
            .collect();
        let index = NameIndex::new(&outlines);
        Form { conditions, texts, codes, outlines, index }
    }

    fn pieces<'a>(&'a self, includes: &'a Includes) -> Pieces<'a> {
        Pieces { texts: &self.texts, codes: &self.codes, includes, outlines: &self.outlines }
    }
}

/// The declarations every kernel sees, for one variant, and whether any kernel keeps each.
#[derive(Clone, Debug, Default)]
struct DeadCode {
    decls: Vec<DeclId>,
    kept: Vec<bool>,
}

impl DeadCode {
    fn record(&mut self, common: &[(DeclId, bool)]) {
        if self.decls.is_empty() {
            self.decls = common.iter().map(|c| c.0).collect();
            self.kept = common.iter().map(|c| c.1).collect();
            return;
        }
        // Every kernel sees the same common parts, in the same order.
        if self.decls.len() == common.len() && self.decls.iter().zip(common).all(|(d, c)| *d == c.0) {
            for (k, c) in self.kept.iter_mut().zip(common) {
                *k |= c.1;
            }
        } else {
            for &(id, kept) in common {
                match self.decls.iter().position(|d| *d == id) {
                    Some(i) => self.kept[i] |= kept,
                    None => {
                        self.decls.push(id);
                        self.kept.push(kept);
                    }
                }
            }
        }
    }
}

/// Every file's text for one variant: directives lifted, the inactive `//#if` branches blanked.
/// The kernel file's conditionals are applied part by part (a branch may not span a marker).
fn texts(
    sources: &Sources,
    kernel_file: FileId,
    split: &Split,
    lifted: &[String],
    conditions: Conditions,
) -> Result<Vec<String>, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut out = Vec::with_capacity(lifted.len());
    for (id, file) in sources.iter() {
        let parts: Vec<Range<usize>> = if id == kernel_file {
            std::iter::once(split.preamble.clone()).chain(split.sections.iter().map(|s| s.body.clone())).collect()
        } else {
            std::iter::once(0..file.text.len()).collect()
        };
        let mut text = lifted[id].clone();
        for range in parts {
            let mut part = text[range.clone()].to_string();
            if let Err(e) = split::apply_conditionals(file, range.clone(), &mut part, conditions) {
                errors.extend(e);
            }
            text.replace_range(range, &part);
        }
        out.push(text);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        errors.dedup();
        Err(errors)
    }
}

struct Ctx<'a> {
    sources: &'a Sources,
    includes: &'a Includes,
    kernel_file: FileId,
    shared: Option<FileId>,
    split: &'a Split,
}

impl Ctx<'_> {
    fn assemble(&self, form: &Form, section: &split::Section, roots: &[String]) -> Built {
        let outline = outline::outline(&form.codes[self.kernel_file], section.body.clone());
        assemble(
            form.pieces(self.includes),
            &form.index,
            self.shared,
            self.kernel_file,
            self.split.preamble.clone(),
            section.body.clone(),
            Some(&outline),
            roots,
        )
    }

    /// Checks, once, the declarations of the shared and file preambles (and what they include)
    /// that no kernel uses, with what they need.
    #[allow(clippy::type_complexity)]
    fn check_unused(&self, form: &Form, dead: &DeadCode) -> (Vec<Diagnostic>, Vec<(String, &'static str, String)>) {
        // naga's parser takes time quadratic in the number of declarations of a module, so
        // the unused ones are checked in chunks, each with what it names.
        const CHUNK: usize = 500;
        let common: HashMap<DeclId, usize> = dead.decls.iter().enumerate().map(|(i, d)| (*d, i)).collect();
        let decl = |(file, i): DeclId| &form.outlines[file].as_ref().expect("outlined").decls[i];
        let unused: Vec<usize> = (0..dead.decls.len()).filter(|&i| !dead.kept[i]).collect();
        let fallback = self.sources.get(self.kernel_file).locate(self.split.preamble.start..self.split.preamble.start);
        let mut errors: Vec<Diagnostic> = Vec::new();
        let mut values = Vec::new();
        for chunk in unused.chunks(CHUNK) {
            let mut take = vec![false; dead.decls.len()];
            let mut todo: Vec<usize> = chunk.to_vec();
            while let Some(i) = todo.pop() {
                if std::mem::replace(&mut take[i], true) {
                    continue;
                }
                for r in &decl(dead.decls[i]).refs {
                    for id in form.index.get(r) {
                        if let Some(&j) = common.get(id)
                            && !take[j]
                        {
                            todo.push(j);
                        }
                    }
                }
            }
            let decls: Vec<DeclId> = dead.decls.iter().zip(&take).filter(|(_, t)| **t).map(|(d, _)| *d).collect();
            let a = assemble_decls(form.pieces(self.includes), &decls);
            match validate::check(&a.text, "") {
                Ok(c) => values.extend(reflect::constants(&c.module).1),
                Err(failure) => {
                    let note = "in code of the shared or file preamble that no kernel of this file uses (checked once, on its own)";
                    let found = self.diagnostics(
                        &a.prefixed(&failure.prefix),
                        failure.errors,
                        &fallback,
                        "",
                        form.conditions.describe(),
                    );
                    for mut d in found {
                        d.kernel = None;
                        d.notes.push(note.to_string());
                        Diagnostic::push_once(&mut errors, d);
                    }
                }
            }
        }
        (errors, values)
    }

    fn locate(&self, a: &Assembled, range: Option<Range<usize>>, fallback: &Location) -> Location {
        range
            .and_then(|r| a.map_range(r))
            .map(|(file, r)| self.sources.get(file).locate(r))
            .unwrap_or_else(|| fallback.clone())
    }

    fn diagnostics(
        &self,
        a: &Assembled,
        raw: Vec<RawError>,
        marker: &Location,
        name: &str,
        variant_note: Option<String>,
    ) -> Vec<Diagnostic> {
        raw.into_iter()
            .map(|e| {
                let (range, label) = match e.primary {
                    Some((r, l)) => (Some(r), l),
                    None => (None, String::new()),
                };
                let loc = self.locate(a, range, marker);
                let mut d = Diagnostic::at(loc, e.message).label(label).in_kernel(name);
                for (r, note) in e.notes {
                    match r {
                        Some(r) => {
                            let l = self.locate(a, Some(r), marker);
                            d = d.note(format!("{note}: {}:{}:{}: `{}`", l.file, l.line, l.column, l.line_text.trim()));
                        }
                        None => d = d.note(note),
                    }
                }
                d.in_variant(variant_note.clone())
            })
            .collect()
    }

    /// The `@grid`, `@requires`, `@accumulates` and `@unchecked` annotations as typed values
    /// (errors at their lines).
    fn shape(&self, notes: &Notes, iface: &Interface, name: &str, errors: &mut Vec<Diagnostic>) -> Shape {
        let file = self.sources.get(self.kernel_file);
        let mut shape = Shape::default();
        let known = "the annotations are `// @grid …`, `// @requires …`, `// @accumulates …` and `// @unchecked`; other comment lines are doc text";
        for (range, word) in &notes.unknown {
            let d = if word == "unchecked" {
                // `@unchecked:`, `@unchecked(…)`: the word is right, and nothing may follow it.
                Diagnostic::at(file.locate(range.clone()), "malformed annotation `@unchecked`")
                    .label("`@unchecked` stands alone on its line: `// @unchecked`")
            } else if annotate::ANNOTATIONS.contains(&word.as_str()) {
                // The word is right; what follows it is not (`@requires:`, `@grid(…)`).
                Diagnostic::at(file.locate(range.clone()), format!("malformed annotation `@{word}`")).label(format!(
                    "the expression follows `@{word}` after a space, like `// @{word} {}`",
                    annotate::example(word)
                ))
            } else {
                Diagnostic::at(file.locate(range.clone()), format!("unknown annotation `@{word}`"))
                    .label(format!("did you mean `@{}`?", annotate::closest_annotation(word)))
            };
            errors.push(d.note(known).in_kernel(name));
        }
        for a in &notes.annotations {
            let location = file.locate(a.range.clone());
            match a.kind.as_str() {
                "requires" => match shape::requirement(&a.expr, iface) {
                    Ok(r) => {
                        shape.requires.push(Located { value: r, text: a.expr.clone(), location: location.clone() })
                    }
                    Err(e) => {
                        errors.push(Diagnostic::at(location.clone(), format!("in `@requires`: {e}")).in_kernel(name))
                    }
                },
                "accumulates" => match shape::accumulates(&a.expr, iface) {
                    Ok(names) => shape.accumulates.extend(names.into_iter().map(|value| Located {
                        value,
                        text: a.expr.clone(),
                        location: location.clone(),
                    })),
                    Err(e) => {
                        errors.push(Diagnostic::at(location.clone(), format!("in `@accumulates`: {e}")).in_kernel(name))
                    }
                },
                "unchecked" => {
                    if let Some(first) = &shape.unchecked {
                        errors.push(
                            Diagnostic::at(location.clone(), "more than one `@unchecked`")
                                .label("a second `@unchecked`")
                                .note(format!("the first is at line {}", first.line))
                                .in_kernel(name),
                        );
                        continue;
                    }
                    if !a.expr.is_empty() {
                        errors.push(
                            Diagnostic::at(location.clone(), "`@unchecked` takes no expression")
                                .label("`@unchecked` stands alone on its line: `// @unchecked`")
                                .note(
                                    "it states that the kernel keeps every array access in range once its \
                                     `@requires` hold, so it runs without wgpu's runtime checks; a condition \
                                     on the arguments is a `// @requires …` line of its own",
                                )
                                .in_kernel(name),
                        );
                    }
                    shape.unchecked = Some(location.clone());
                }
                _ => {
                    if shape.grid != GridSource::Caller {
                        errors.push(Diagnostic::at(location.clone(), "more than one `@grid`").in_kernel(name));
                        continue;
                    }
                    shape.grid = match shape::grid(&a.expr, iface) {
                        Ok(g) => GridSource::Annotation(Box::new(Located {
                            value: g,
                            text: a.expr.clone(),
                            location: location.clone(),
                        })),
                        Err(e) => {
                            errors.push(Diagnostic::at(location.clone(), format!("in `@grid`: {e}")).in_kernel(name));
                            GridSource::Invalid
                        }
                    };
                }
            }
        }
        shape
    }

    fn variant(&self, conditions: Conditions, a: &Assembled, c: &validate::Checked) -> Variant {
        let body = &a.text;
        let enable_sg = if c.subgroups { "enable subgroups;\n" } else { "" };
        let enable_f16 = if c.f16 { ENABLE_F16 } else { "" };
        Variant {
            conditions,
            subgroups: c.subgroups,
            f16: c.f16,
            coop: c.coop_configs.clone(),
            features: c.features.clone(),
            wgsl: format!("{}{body}", c.prefix),
            browser_wgsl: if c.coop || !c.features.is_empty() {
                String::new()
            } else {
                format!("{enable_f16}{enable_sg}{body}")
            },
            overrides: c
                .module
                .overrides
                .iter()
                .filter_map(|(_, o)| Some(crate::reflect::override_key(o.name.as_deref()?, o.id)))
                .collect(),
        }
    }

    fn kernel(&self, forms: &[Form], section: &split::Section, dead: &mut [DeadCode]) -> Kernel {
        let name = section.name.clone();
        let file = self.sources.get(self.kernel_file);
        let marker = file.locate(section.marker.clone());
        let notes = annotate::notes(&file.text, section);
        let mut k = Kernel {
            name: name.clone(),
            doc: notes.doc.clone(),
            interface: None,
            shape: Shape::default(),
            variants: Vec::new(),
            errors: Vec::new(),
            marker: marker.clone(),
            constants: Vec::new(),
        };

        // Every combination of the `//#if` conditions, preferred first; a combination whose
        // text equals a preferred one's is that variant.
        let mut checked: Vec<(Conditions, Assembled, validate::Checked)> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        // The names the annotations use must be in the source too (they are in comments).
        let roots: Vec<String> = notes.annotations.iter().flat_map(|a| outline::identifiers(&a.expr)).collect();
        let built: Vec<Built> = forms.iter().map(|f| self.assemble(f, section, &roots)).collect();
        for (d, b) in dead.iter_mut().zip(&built) {
            d.record(&b.common);
        }
        for (form, b) in forms.iter().zip(built) {
            let (conditions, a) = (&form.conditions, b.assembled);
            if seen.contains(&a.text) {
                continue;
            }
            seen.push(a.text.clone());
            let first = seen.len() == 1;
            let result = validate::check(&a.text, &name);
            if first {
                let module = match &result {
                    Ok(c) => Some(&c.module),
                    Err(f) => f.module.as_deref(),
                };
                // The marker's entry point must be in its own section, and be the only one.
                if let Some(m) = module {
                    let prefix = match &result {
                        Ok(c) => c.prefix.as_str(),
                        Err(f) => f.prefix.as_str(),
                    };
                    let seen_text = a.prefixed(prefix);
                    let own = m.entry_points.iter().any(|ep| ep.name == name);
                    for other in m.entry_points.iter().filter(|ep| own && ep.name != name) {
                        let loc =
                            self.locate(&seen_text, validate::fn_name_span(&seen_text.text, &other.name), &marker);
                        k.errors.push(
                            Diagnostic::at(loc, format!("a second entry point, `{}`, in the source of kernel `{name}`", other.name))
                                .label("another entry point")
                                .note(format!(
                                    "each kernel has exactly one entry point, `@compute fn {name}`; give `{}` a section of its own (`// --- KERNEL: {} ---`)",
                                    other.name, other.name
                                ))
                                .in_kernel(&name),
                        );
                    }
                    let has_ep =
                        m.entry_points.iter().any(|ep| ep.name == name && ep.stage == naga::ShaderStage::Compute);
                    if !has_ep || notes.entry.is_none() {
                        let mut d = Diagnostic::at(
                            marker.clone(),
                            format!("no `@compute fn {name}` in the section of kernel `{name}`"),
                        )
                        .label("this marker")
                        .note("each kernel's section (from its marker to the next) must define a compute entry point with the marker's name");
                        let found: Vec<String> = m.entry_points.iter().map(|ep| format!("`{}`", ep.name)).collect();
                        if !found.is_empty() {
                            d = d.note(format!("the section's source has the entry point {}", found.join(", ")));
                        }
                        k.errors.push(d.in_kernel(&name));
                    }
                }
            }
            match result {
                Err(failure) => {
                    let a = a.prefixed(&failure.prefix);
                    let note = if first { None } else { conditions.describe() };
                    for d in self.diagnostics(&a, failure.errors, &marker, &name, note) {
                        Diagnostic::push_once(&mut k.errors, d);
                    }
                    if first {
                        if let Some(m) = failure.module
                            && let Ok(i) = reflect::reflect(&m, None, &name)
                        {
                            let mut errors = Vec::new();
                            k.shape = self.shape(&notes, &i, &name, &mut errors);
                            k.errors.extend(errors);
                            k.interface = Some(i);
                        }
                        // The other forms would repeat these errors.
                        return k;
                    }
                }
                Ok(c) => {
                    if first {
                        match reflect::reflect(&c.module, Some(&c.info), &name) {
                            Ok(i) => {
                                let mut errors = Vec::new();
                                k.shape = self.shape(&notes, &i, &name, &mut errors);
                                k.errors.extend(errors);
                                k.constants = i.exported.iter().filter(|c| roots.contains(&c.0)).cloned().collect();
                                k.interface = Some(i);
                            }
                            Err(e) => {
                                if k.errors.is_empty() {
                                    // At the declaration, else at the attribute it names, else
                                    // at the entry point.
                                    let attribute = e.attribute.and_then(|word| {
                                        let end = notes.entry.as_ref().map_or(section.body.end, |r| r.start);
                                        let code = split::mask_comments(&file.text[section.body.start..end]);
                                        split::find_word(&code, word).last().map(|r| {
                                            section.body.start + r.start.saturating_sub(1)..section.body.start + r.end
                                        })
                                    });
                                    let entry = attribute
                                        .or_else(|| notes.entry.clone())
                                        .map(|r| file.locate(r))
                                        .unwrap_or_else(|| marker.clone());
                                    let loc = self.locate(&a.prefixed(&c.prefix), e.span, &entry);
                                    k.errors.push(Diagnostic::at(loc, e.message).in_kernel(&name));
                                }
                            }
                        }
                    }
                    checked.push((*conditions, a, c));
                }
            }
        }

        // A form built with a condition on whose entry point reaches nothing of it is the form
        // with the condition off, needing more: drop it where that form exists.
        let exists = |c: Conditions| checked.iter().any(|(x, _, _)| *x == c);
        let useful: Vec<bool> = checked
            .iter()
            .map(|(cond, _, c)| {
                let idle_coop = cond.coop && c.coop && !c.reaches_coop && exists(Conditions { coop: false, ..*cond });
                let idle_sg = cond.subgroups
                    && c.subgroups
                    && !c.reaches_subgroups
                    && exists(Conditions { subgroups: false, ..*cond });
                !idle_coop && !idle_sg
            })
            .collect();
        // The runtime takes the first variant the device can run, so a variant that needs all
        // an earlier one needs (and maybe more) would never run.
        let mut variants: Vec<(Variant, validate::Needs, &Assembled, &validate::Checked)> = Vec::new();
        for ((cond, a, c), useful) in checked.iter().zip(useful) {
            let needs =
                validate::Needs { subgroups: c.subgroups, f16: c.f16, coop: c.coop, features: c.features.clone() };
            let dominated = variants.iter().any(|(_, n, _, _)| needs.covers(n));
            if useful && !dominated {
                variants.push((self.variant(*cond, a, c), needs, a, c));
            }
        }
        // What wgpu does with each variant on Vulkan, now rather than at pipeline creation
        // (for kernels without other errors: a missing entry point has nothing to write).
        let clean = k.errors.is_empty();
        for (v, needs, a, c) in variants.iter().filter(|_| clean) {
            if let Err(e) = validate::spirv(c, &name, needs, k.shape.unchecked.is_none()) {
                let note = v.conditions.describe();
                for d in self.diagnostics(&a.prefixed(&c.prefix), vec![e], &marker, &name, note) {
                    Diagnostic::push_once(&mut k.errors, d);
                }
            }
        }
        if k.errors.is_empty() {
            k.variants = variants.into_iter().map(|(v, _, _, _)| v).collect();
        }
        k
    }
}
