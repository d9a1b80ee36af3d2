//! Hot reload: the files a kernel module was assembled from are watched, compiled again on a
//! change by the macro's own stages (`kernels_codegen`), and each kernel whose interface still
//! matches the Rust function compiled against it runs its new source from the next dispatch on,
//! with the runtime checks the new source declares (`// @unchecked` may be added or removed).
//!
//! One thread per context polls the files' modification times and sizes (every
//! [`POLL`]); a change is compiled once the files have stayed unchanged for one poll (editors
//! write in steps). What the program was compiled against is the `interface` text the macro
//! emitted for each kernel and for the module (its constants); the new text comes from the same
//! function over the new compile, so an edit that changes a binding, a layout, the workgroup
//! size, an override, an annotation or a constant the host reads is refused, at the declaration
//! that changed, and the old pipeline keeps running. Kernels that pass have their pipelines
//! (one per set of override values in the cache) built from the new source first, then swapped
//! in under the cache's lock; a build that fails leaves the kernel as it was.
//!
//! The first call of a kernel starts watching its file, and the first pass compiles at once:
//! a program started after an edit it was not rebuilt for runs what is on disk.

use crate::context::{Gpu, Inner};
use crate::kernel::{CoopConfig, CoopScalar, FileSource, KernelDef};
use crate::variant::Needs;
use kernels_codegen as cg;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, SystemTime};

/// How often the files are looked at.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// How many reports a context keeps for [`Gpu::wait_for_reload`].
const KEPT: usize = 64;

/// A kernel's forms compiled at run time, in place of the generated `VariantDef`s, and
/// whether the new source is marked `// @unchecked` (in place of `KernelDef::unchecked`).
pub(crate) struct Swapped {
    pub(crate) variants: Vec<Form>,
    pub(crate) unchecked: bool,
}

/// One compiled form, as [`VariantDef`](crate::VariantDef) but owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Form {
    subgroups: bool,
    f16: bool,
    coop: Vec<CoopConfig>,
    features: Vec<&'static str>,
    pub(crate) wgsl: String,
    /// The keys of the `override` declarations `wgsl` has (`VariantDef::overrides`).
    pub(crate) overrides: Vec<String>,
}

impl Needs for Form {
    fn subgroups(&self) -> bool {
        self.subgroups
    }
    fn f16(&self) -> bool {
        self.f16
    }
    fn coop(&self) -> &[CoopConfig] {
        &self.coop
    }
    fn features(&self) -> &[&'static str] {
        &self.features
    }
}

impl Form {
    fn compiled(v: &crate::VariantDef) -> Form {
        Form {
            subgroups: v.subgroups,
            f16: v.f16,
            coop: v.coop.to_vec(),
            features: v.features.to_vec(),
            wgsl: v.wgsl.to_string(),
            overrides: v.overrides.iter().map(|o| o.to_string()).collect(),
        }
    }

    fn new(v: &cg::compile::Variant) -> Form {
        let scalar = |s: cg::validate::CoopScalar| match s {
            cg::validate::CoopScalar::F16 => CoopScalar::F16,
            cg::validate::CoopScalar::F32 => CoopScalar::F32,
        };
        Form {
            subgroups: v.subgroups,
            f16: v.f16,
            coop: v
                .coop
                .iter()
                .map(|c| CoopConfig { m: c.m, n: c.n, k: c.k, ab: scalar(c.ab), cr: scalar(c.cr) })
                .collect(),
            features: v.features.clone(),
            wgsl: v.wgsl.clone(),
            overrides: v.overrides.clone(),
        }
    }
}

/// What one compile of an edited kernel file did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadReport {
    /// Counts the context's reports, from 1.
    pub generation: u64,
    /// The kernel file, as shown in compile errors.
    pub file: String,
    /// Kernels (`module::kernel`) that run their new source from now on.
    pub swapped: Vec<String>,
    /// Kernels (`module::kernel`) whose edit was refused: they run the source they ran before.
    pub kept: Vec<String>,
    /// The errors, rendered as `kernels!` renders its compile errors (`┌─ file:line:column`,
    /// the line, the span underlined, notes).
    pub errors: Vec<String>,
    /// Things to know that are not errors (a kernel added to the file has no Rust function
    /// until the program is rebuilt).
    pub notes: Vec<String>,
}

impl ReloadReport {
    /// Whether every kernel of the file compiled and fits its Rust function.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernels: hot reload of {}: ", self.file)?;
        let names = |list: &[String]| list.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !self.swapped.is_empty() {
            parts.push(format!("{} swapped in", names(&self.swapped)));
        }
        if !self.kept.is_empty() {
            parts.push(format!("{} kept as before (errors below)", names(&self.kept)));
        }
        if parts.is_empty() {
            parts.push("no kernel changed".into());
        }
        write!(f, "{}", parts.join("; "))?;
        for e in &self.errors {
            write!(f, "\nerror: {e}")?;
        }
        for n in &self.notes {
            write!(f, "\nnote: {n}")?;
        }
        Ok(())
    }
}

/// A file's modification time and size; `None` when it cannot be read.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

struct Watched {
    source: &'static FileSource,
    /// The files as they are read (remapped), with their stamps at the last poll.
    files: Vec<(PathBuf, Stamp)>,
    /// Changed since the last compile.
    dirty: bool,
    /// The next compile is the first: quiet unless it finds something.
    first: bool,
}

struct Reports {
    generation: u64,
    recent: VecDeque<ReloadReport>,
}

/// A context's hot reload.
pub(crate) struct HotReload {
    remap: Vec<(PathBuf, PathBuf)>,
    watched: Mutex<Vec<Watched>>,
    started: std::sync::Once,
    reports: Mutex<Reports>,
    signal: Condvar,
}

impl HotReload {
    pub(crate) fn new(remap: Vec<(PathBuf, PathBuf)>) -> HotReload {
        HotReload {
            remap,
            watched: Mutex::new(Vec::new()),
            started: std::sync::Once::new(),
            reports: Mutex::new(Reports { generation: 0, recent: VecDeque::new() }),
            signal: Condvar::new(),
        }
    }

    /// `path` with the first matching prefix replaced.
    fn remapped(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        for (from, to) in &self.remap {
            if let Ok(rest) = path.strip_prefix(from) {
                return to.join(rest);
            }
        }
        path.to_path_buf()
    }

    /// Starts watching `source`'s files (once per file), and the watching thread (once).
    pub(crate) fn watch(&self, gpu: &Gpu, source: &'static FileSource) {
        {
            let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            if watched.iter().any(|w| std::ptr::eq(w.source, source)) {
                return;
            }
            let files = source
                .files
                .iter()
                .map(|f| {
                    let p = self.remapped(f);
                    let s = stamp(&p);
                    (p, s)
                })
                .collect();
            watched.push(Watched { source, files, dirty: true, first: true });
        }
        let weak = Arc::downgrade(&gpu.inner);
        self.started.call_once(|| {
            let spawned = std::thread::Builder::new().name("kernels-hot-reload".into()).spawn(move || run(weak));
            if let Err(e) = spawned {
                eprintln!("kernels: hot reload cannot start its thread: {e}");
            }
        });
    }

    /// One look at every watched file; compiles those that changed and have settled.
    fn poll(&self, gpu: &Gpu) {
        let due: Vec<(usize, &'static FileSource, bool)> = {
            let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            let mut due = Vec::new();
            for (i, w) in watched.iter_mut().enumerate() {
                let mut changed = false;
                for (path, old) in &mut w.files {
                    let now = stamp(path);
                    if now != *old {
                        *old = now;
                        changed = true;
                    }
                }
                if changed {
                    // Compiled at the next poll, if nothing changes meanwhile.
                    w.dirty = true;
                } else if w.dirty {
                    w.dirty = false;
                    due.push((i, w.source, std::mem::replace(&mut w.first, false)));
                }
            }
            due
        };
        for (i, source, first) in due {
            let (report, files) = self.reload(gpu, source);
            if let Some(files) = files {
                let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(w) = watched.get_mut(i) {
                    // Files added by an `//#include` are watched from now on; the stamps of
                    // files read meanwhile stay as they were, so their change is seen.
                    let old = std::mem::take(&mut w.files);
                    w.files = files
                        .into_iter()
                        .map(|p| {
                            let s = old.iter().find(|(q, _)| *q == p).map_or_else(|| stamp(&p), |(_, s)| *s);
                            (p, s)
                        })
                        .collect();
                }
            }
            let quiet = first && report.swapped.is_empty() && report.errors.is_empty() && report.notes.is_empty();
            if !quiet {
                self.publish(report);
            }
        }
    }

    fn publish(&self, mut report: ReloadReport) {
        let mut reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        reports.generation += 1;
        report.generation = reports.generation;
        eprintln!("{report}");
        if reports.recent.len() == KEPT {
            reports.recent.pop_front();
        }
        reports.recent.push_back(report);
        self.signal.notify_all();
    }

    /// Compiles `source` again and swaps in what passes: the report, and the files the
    /// compile read (`None` when it could not read the kernel file).
    fn reload(&self, gpu: &Gpu, source: &'static FileSource) -> (ReloadReport, Option<Vec<PathBuf>>) {
        let manifest_dir = source.manifest_dir.map(|d| self.remapped(d));
        let kernel_file = self.remapped(source.kernel_file);
        let shared = source.shared.map(|s| self.remapped(s));
        let file = cg::reload::compile_again(manifest_dir.as_deref(), &kernel_file, shared.as_deref(), source.module);
        let files = (!file.read.is_empty()).then(|| file.read.clone());
        let mut report = ReloadReport {
            generation: 0,
            file: source.display.to_string(),
            swapped: Vec::new(),
            kept: Vec::new(),
            errors: Vec::new(),
            notes: Vec::new(),
        };
        let qualified = |k: &KernelDef| format!("{}::{}", source.module, k.name);
        let mut errors: Vec<cg::diagnostic::Diagnostic> = file.all_errors().cloned().collect();
        // Constants the host reads: a change there is a change of every kernel's host code.
        let consts = cg::reload::changes(source.interface, &cg::reload::file_interface(&file));
        if !consts.is_empty() && file.errors.is_empty() {
            errors.push(cg::reload::mismatch(&file, None, &consts));
        }
        let file_ok = file.errors.is_empty() && consts.is_empty();
        let mut to_swap: Vec<(&'static KernelDef, Swapped)> = Vec::new();
        for &def in source.kernels {
            let Some(k) = file.kernels.iter().find(|k| k.name == def.name) else {
                if file.errors.is_empty() {
                    errors.push(
                        cg::diagnostic::Diagnostic::new(format!(
                            "kernel `{}` is no longer in `{}` (its marker `// --- KERNEL: {} ---` is gone)",
                            def.name, source.display, def.name
                        ))
                        .note("its Rust function still calls it: the pipeline compiled before keeps running")
                        .in_kernel(def.name),
                    );
                }
                report.kept.push(qualified(def));
                continue;
            };
            if !file_ok || !k.errors.is_empty() {
                report.kept.push(qualified(def));
                continue;
            }
            let compiled = def.source.map_or("", |s| s.interface);
            let changes = cg::reload::changes(compiled, &cg::reload::kernel_interface(k).unwrap_or_default());
            if !changes.is_empty() {
                errors.push(cg::reload::mismatch(&file, Some(k), &changes));
                report.kept.push(qualified(def));
                continue;
            }
            // `@unchecked` is a property of the source, like its text: the new source runs
            // with what it declares.
            let forms: Vec<Form> = k.variants.iter().map(Form::new).collect();
            let unchecked = k.shape.unchecked.is_some();
            let current: (Vec<Form>, bool) = match gpu.inner.pipelines.swapped(def) {
                Some(s) => (s.variants.clone(), s.unchecked),
                None => (def.variants.iter().map(Form::compiled).collect(), def.unchecked),
            };
            if (&forms, unchecked) != (&current.0, current.1) {
                to_swap.push((def, Swapped { variants: forms, unchecked }));
            }
        }
        for k in &file.kernels {
            if k.errors.is_empty() && !source.kernels.iter().any(|d| d.name == k.name) {
                report.notes.push(format!(
                    "kernel `{}::{}` is new in `{}`: rebuild the program to call it",
                    source.module, k.name, source.display
                ));
            }
        }
        for (def, swapped) in to_swap {
            match self.rebuild(gpu, def, swapped) {
                Ok(()) => report.swapped.push(qualified(def)),
                Err(e) => {
                    report.kept.push(qualified(def));
                    report
                        .errors
                        .push(format!("kernel `{}`: {e}; the pipeline compiled before keeps running", def.name));
                }
            }
        }
        let mut rendered: Vec<String> =
            cg::diagnostic::Diagnostic::merge(errors).iter().map(cg::diagnostic::Diagnostic::render).collect();
        rendered.append(&mut report.errors);
        report.errors = rendered;
        (report, files)
    }

    /// Builds `def`'s cached pipelines from `swapped` (its forms, with the runtime checks its
    /// source declares), then swaps them (and the source) in.
    fn rebuild(&self, gpu: &Gpu, def: &'static KernelDef, swapped: Swapped) -> crate::Result<()> {
        let form =
            crate::variant::select_in(&swapped.variants, &gpu.inner.caps).map_err(|unmet| gpu.missing(def, unmet))?;
        let mut built = Vec::new();
        for key in gpu.inner.pipelines.keys_of(def) {
            let overrides: Vec<(&'static str, f64)> =
                key.1.iter().map(|&(k, bits)| (k, f64::from_bits(bits))).collect();
            let source = crate::pipeline::Buildable {
                wgsl: form.wgsl.clone().into(),
                unchecked: swapped.unchecked,
                declared: form.overrides.clone(),
            };
            built.push((key, gpu.build_from(def, &overrides, &source)?));
        }
        gpu.inner.pipelines.swap(def, Arc::new(swapped), built);
        Ok(())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.reports.lock().unwrap_or_else(|p| p.into_inner()).generation
    }

    /// The first report after `after`, waiting up to `timeout` for it.
    pub(crate) fn wait(&self, after: u64, timeout: Duration) -> Option<ReloadReport> {
        let deadline = std::time::Instant::now() + timeout;
        let mut reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = reports.recent.iter().find(|r| r.generation > after) {
                return Some(r.clone());
            }
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            reports = self.signal.wait_timeout(reports, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// The watching thread: polls until the context is gone.
fn run(context: Weak<Inner>) {
    loop {
        std::thread::sleep(POLL);
        let Some(inner) = context.upgrade() else { return };
        let gpu = Gpu { inner };
        if let Some(hot) = gpu.inner.hot.clone() {
            hot.poll(&gpu);
        }
    }
}

impl Gpu {
    /// Whether hot reload is on for this context ([`GpuOptions::hot_reload`](crate::GpuOptions::hot_reload)).
    pub fn hot_reload(&self) -> bool {
        self.inner.hot.is_some()
    }

    /// How many hot reload reports this context has made: pass it to
    /// [`Gpu::wait_for_reload`] to wait for the next one.
    pub fn reload_generation(&self) -> u64 {
        self.inner.hot.as_ref().map_or(0, |h| h.generation())
    }

    /// The first hot reload report after generation `after` (see
    /// [`Gpu::reload_generation`]), waiting up to `timeout` for it; `None` when none came (or
    /// hot reload is off). A report is made for every compile of an edited file (and for the
    /// first compile of a file when it found the file changed or broken), after the kernels
    /// that passed were swapped in.
    pub fn wait_for_reload(&self, after: u64, timeout: Duration) -> Option<ReloadReport> {
        self.inner.hot.as_ref()?.wait(after, timeout)
    }
}
