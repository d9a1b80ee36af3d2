//! The pipeline for one kernel file: read → split → lift directives → pick variants →
//! assemble → validate (naga + uniformity) → reflect, collecting every error with its original
//! location. Nothing here panics on user input.

use crate::annotate::{self, Notes};
use crate::assemble::{Assembled, Piece, assemble};
use crate::diagnostic::Diagnostic;
use crate::input::Shared;
use crate::reflect::{self, Interface};
use crate::source::{CallSite, Location, Part, SourceFile};
use crate::split::{self, Conditions, Split, UsedConditions};
use crate::validate::{self, CoopConfig, ENABLE_F16, RawError};

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
    /// The source for a browser (with `enable subgroups;` where used, as WebGPU requires);
    /// empty for a variant that uses cooperative matrices, which WebGPU does not have.
    pub browser_wgsl: String,
}

/// A kernel after compilation.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Its name.
    pub name: String,
    /// Doc text and annotations.
    pub notes: Notes,
    /// Its interface, when the source parsed.
    pub interface: Option<Interface>,
    /// Variants, preferred first. Empty when the kernel has errors.
    pub variants: Vec<Variant>,
    /// Errors in this kernel.
    pub errors: Vec<Diagnostic>,
    /// Where its marker is.
    pub marker: Location,
    /// Where each of `notes.annotations` is.
    pub annotation_locations: Vec<Location>,
}

/// A kernel file after compilation.
#[derive(Clone, Debug, Default)]
pub struct File {
    /// The generated module's name.
    pub module: String,
    /// Files read (absolute), for rebuild tracking.
    pub read: Vec<PathBuf>,
    /// The kernel file as displayed.
    pub display: String,
    /// Kernels in file order.
    pub kernels: Vec<Kernel>,
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
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Box::new(
            Diagnostic::new(format!("cannot read {what} `{written}`: {e}"))
                .note(format!("looked for {}", path.display()))
                .note("paths are relative to the crate's manifest directory (where Cargo.toml is), or to the calling file when they start with `./` or `../`"),
        )
    })?;
    Ok(SourceFile::new(path.clone(), site.display(&path), text))
}

/// Compiles one kernel file.
pub fn compile(site: &CallSite, path: &str, shared: &Shared, module: Option<String>) -> File {
    let mut out = File::default();
    let file = match read(site, path, "kernel file") {
        Ok(f) => f,
        Err(e) => {
            out.errors.push(*e);
            return out;
        }
    };
    out.read.push(file.path.clone());
    out.display = file.display.clone();
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
    let shared = match shared {
        Shared::None => None,
        Shared::Path(p) => match read(site, p, "shared preamble") {
            Ok(f) => Some(f),
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
                Ok(f) => Some(f),
                Err(e) => {
                    out.errors
                        .push((*e).note("to build without a shared preamble, write `kernels!(\"…\", shared = none)`"));
                    return out;
                }
            }
        }
    };
    if let Some(s) = &shared {
        out.read.push(s.path.clone());
        out.errors.extend(split::check_shared(s));
    }
    let split = match split::split(&file) {
        Ok(s) => s,
        Err(e) => {
            out.errors.extend(e);
            return out;
        }
    };

    // Directives: only at the very top of a file; lifted out.
    // (Blanking keeps offsets, so the whole text can be edited in place.)
    let mut file_text = file.text.clone();
    if let Err(e) = split::take_directives(&file, split.preamble.clone(), &mut file_text, true) {
        out.errors.extend(e);
    }
    for section in &split.sections {
        if let Err(e) = split::take_directives(&file, section.body.clone(), &mut file_text, false) {
            out.errors.extend(e);
        }
    }
    let mut shared_text = shared.as_ref().map(|s| s.text.clone());
    if let (Some(s), Some(t)) = (&shared, &mut shared_text)
        && let Err(e) = split::take_directives(s, 0..s.text.len(), t, true)
    {
        out.errors.extend(e);
    }
    if !out.errors.is_empty() {
        return out;
    }

    let used =
        UsedConditions::of(&file.text).union(shared.as_ref().map(|s| UsedConditions::of(&s.text)).unwrap_or_default());
    let mut forms = Vec::new();
    for conditions in Conditions::combinations(used) {
        match texts(&file, &split, &file_text, shared.as_ref(), shared_text.as_deref(), conditions) {
            Ok(t) => forms.push((conditions, t)),
            Err(e) => {
                // Every combination reports the same structural errors: report them once.
                out.errors.extend(e);
                return out;
            }
        }
    }

    for (i, section) in split.sections.iter().enumerate() {
        let ctx = Ctx { file: &file, shared: shared.as_ref(), split: &split, index: i };
        out.kernels.push(ctx.kernel(&forms, section));
    }
    out
}

/// The processed text of every part for one variant.
struct Texts {
    shared: Option<String>,
    preamble: String,
    sections: Vec<String>,
}

fn texts(
    file: &SourceFile,
    split: &Split,
    file_text: &str,
    shared: Option<&SourceFile>,
    shared_text: Option<&str>,
    conditions: Conditions,
) -> Result<Texts, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut part = |src: &SourceFile, text: &str, range: std::ops::Range<usize>| {
        let mut t = text[range.clone()].to_string();
        if let Err(e) = split::apply_conditionals(src, range, &mut t, conditions) {
            errors.extend(e);
        }
        t
    };
    let shared = match (shared, shared_text) {
        (Some(s), Some(t)) => Some(part(s, t, 0..t.len())),
        _ => None,
    };
    let preamble = part(file, file_text, split.preamble.clone());
    let sections = split.sections.iter().map(|s| part(file, file_text, s.body.clone())).collect();
    if errors.is_empty() {
        Ok(Texts { shared, preamble, sections })
    } else {
        errors.dedup();
        Err(errors)
    }
}

struct Ctx<'a> {
    file: &'a SourceFile,
    shared: Option<&'a SourceFile>,
    split: &'a Split,
    index: usize,
}

impl Ctx<'_> {
    fn assemble(&self, t: &Texts, section: &split::Section) -> Assembled {
        assemble(
            "",
            t.shared.as_deref().map(|text| Piece { text, src_start: 0 }),
            Piece { text: &t.preamble, src_start: self.split.preamble.start },
            Piece { text: &t.sections[self.index], src_start: section.body.start },
        )
    }

    fn locate(&self, a: &Assembled, range: Option<std::ops::Range<usize>>, fallback: &Location) -> Location {
        range
            .and_then(|r| a.map_range(r))
            .map(|(part, r)| match part {
                Part::Shared => self.shared.map(|s| s.locate(r.clone())).unwrap_or_else(|| fallback.clone()),
                _ => self.file.locate(r),
            })
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
                if let Some(v) = &variant_note {
                    d = d.note(v.clone());
                }
                d
            })
            .collect()
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
            wgsl: format!("{}{body}", c.prefix),
            browser_wgsl: if c.coop { String::new() } else { format!("{enable_f16}{enable_sg}{body}") },
        }
    }

    fn kernel(&self, forms: &[(Conditions, Texts)], section: &split::Section) -> Kernel {
        let name = section.name.clone();
        let marker = self.file.locate(section.marker.clone());
        let notes = annotate::notes(&self.file.text, section);
        let annotation_locations = notes.annotations.iter().map(|a| self.file.locate(a.range.clone())).collect();
        let mut k = Kernel {
            name: name.clone(),
            notes,
            annotation_locations,
            interface: None,
            variants: Vec::new(),
            errors: Vec::new(),
            marker: marker.clone(),
        };

        // Every combination of the `//#if` conditions, preferred first; a combination whose
        // text equals a preferred one's is that variant.
        let mut checked: Vec<(Conditions, Assembled, validate::Checked)> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        for (conditions, texts) in forms {
            let a = self.assemble(texts, section);
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
                // The marker's entry point must be in its own section.
                if let Some(m) = module {
                    let has_ep =
                        m.entry_points.iter().any(|ep| ep.name == name && ep.stage == naga::ShaderStage::Compute);
                    if !has_ep || k.notes.entry.is_none() {
                        k.errors.push(
                            Diagnostic::at(marker.clone(), format!("no `@compute fn {name}` in the section of kernel `{name}`"))
                                .label("this marker")
                                .note("each kernel's section (from its marker to the next) must define a compute entry point with the marker's name")
                                .in_kernel(&name),
                        );
                    }
                }
            }
            match result {
                Err(failure) => {
                    let a = a.prefixed(&failure.prefix);
                    let note = if first { None } else { conditions.describe() };
                    k.errors.extend(self.diagnostics(&a, failure.errors, &marker, &name, note));
                    if first {
                        if let Some(m) = failure.module
                            && let Ok(i) = reflect::reflect(&m, None, &name)
                        {
                            k.interface = Some(i);
                        }
                        // The other forms would repeat these errors.
                        return k;
                    }
                }
                Ok(c) => {
                    if first {
                        match reflect::reflect(&c.module, Some(&c.info), &name) {
                            Ok(i) => k.interface = Some(i),
                            Err(e) => {
                                if k.errors.is_empty() {
                                    let loc = k
                                        .notes
                                        .entry
                                        .clone()
                                        .map(|r| self.file.locate(r))
                                        .unwrap_or_else(|| marker.clone());
                                    k.errors.push(Diagnostic::at(loc, e).in_kernel(&name));
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
            let needs = validate::Needs { subgroups: c.subgroups, f16: c.f16, coop: c.coop };
            let dominated = variants.iter().any(|(_, n, _, _)| {
                (!n.subgroups || needs.subgroups) && (!n.f16 || needs.f16) && (!n.coop || needs.coop)
            });
            if useful && !dominated {
                variants.push((self.variant(*cond, a, c), needs, a, c));
            }
        }
        // What wgpu does with each variant on Vulkan, now rather than at pipeline creation
        // (for kernels without other errors: a missing entry point has nothing to write).
        let clean = k.errors.is_empty();
        for (v, needs, a, c) in variants.iter().filter(|_| clean) {
            if let Err(e) = validate::spirv(c, &name, *needs) {
                let note = v.conditions.describe();
                k.errors.extend(self.diagnostics(&a.prefixed(&c.prefix), vec![e], &marker, &name, note));
            }
        }
        if k.errors.is_empty() {
            k.variants = variants.into_iter().map(|(v, _, _, _)| v).collect();
        }
        k
    }
}
