//! Times one kernel: of the library (`linear::matmul`) or of a WGSL file of yours
//! (`my_kernels.wgsl:blur`), on random inputs of the sizes you give, after a warm-up. Prints the
//! GPU time (timestamps where the adapter has them), the bandwidth of the bytes the kernel
//! reads and writes, FLOP/s when you say how many it does, and the variant that ran. With
//! `--watch` it times again after every save of the kernel's files: library kernels through the
//! runtime's hot reload (an edit runs without a rebuild), your own files compiled again by
//! `kernels!`'s own stages.
//!
//! ```text
//! cargo run --release --example time_kernel -- linear::matmul m=1024 n=1024 k=1024 --flops 2*m*n*k
//! cargo run --release --example time_kernel -- shaders/02_norm.wgsl:rmsnorm_forward rows=4096 cols=768 --watch
//! cargo run --release --example time_kernel -- --list
//! ```
//!
//! Values (`NAME=VALUE`) set a uniform's fields (`m=1024`, or `p.m=1024` where two uniforms have
//! an `m`), a scalar uniform (`n=1000`), an override (`G_BM=128`) or a buffer's length
//! (`len(x)=4096`). Buffer lengths follow from the `@requires` annotations (`len(x) >= p.n`);
//! integers the annotations use must be given, other fields default to 0 (integers) and 1.0
//! (floats). Floats are drawn from [-1, 1), integers from `--ints LO..HI` (0..64); the same
//! `--seed` gives the same inputs.
//!
//! Options: `--grid X[,Y[,Z]]` (kernels without `@grid`), `--flops EXPR` (an expression of the
//! values: `2*m*n*k`), `--repeats N` (timed dispatches; by default enough for about a second),
//! `--warmup-ms MS` (300), `--ints LO..HI`, `--seed N`, `--shared PATH|none` (a file's shared
//! preamble; `00_shared.wgsl` beside it if present), `--watch`, `--list`.

use kernels::{Arg, BindingKind, Call, Gpu, GpuOptions, Grid, GridKind, KernelDef, Record};
use kernels_codegen as cg;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn main() {
    match cli(std::env::args().skip(1).collect()) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("time_kernel: {e}");
            std::process::exit(2);
        }
    }
}

/// The command line, parsed.
#[derive(Clone, Debug, Default)]
struct Args {
    target: String,
    values: Vec<(String, String)>,
    grid: Option<[u32; 3]>,
    flops: Option<String>,
    repeats: Option<u32>,
    warmup_ms: u64,
    ints: (u32, u32),
    seed: u64,
    shared: Option<String>,
    watch: bool,
    list: bool,
}

fn parse_args(argv: Vec<String>) -> Result<Args, String> {
    let mut a = Args { warmup_ms: 300, ints: (0, 64), seed: 1, ..Args::default() };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--list" => a.list = true,
            "--watch" => a.watch = true,
            "--grid" => {
                let v = value("--grid")?;
                let dims: Vec<u32> = v
                    .split(',')
                    .map(|d| d.trim().parse().map_err(|_| format!("--grid {v}: expected X[,Y[,Z]]")))
                    .collect::<Result<_, _>>()?;
                if dims.is_empty() || dims.len() > 3 {
                    return Err(format!("--grid {v}: expected X[,Y[,Z]]"));
                }
                let mut g = [1; 3];
                g[..dims.len()].copy_from_slice(&dims);
                a.grid = Some(g);
            }
            "--flops" => a.flops = Some(value("--flops")?),
            "--repeats" => {
                let v = value("--repeats")?;
                a.repeats = Some(v.parse().ok().filter(|&n| n > 0).ok_or(format!("--repeats {v}: a positive count"))?);
            }
            "--warmup-ms" => {
                let v = value("--warmup-ms")?;
                a.warmup_ms = v.parse().map_err(|_| format!("--warmup-ms {v}: milliseconds"))?;
            }
            "--ints" => {
                let v = value("--ints")?;
                let bad = || format!("--ints {v}: expected LO..HI with LO < HI");
                let (lo, hi) = v.split_once("..").ok_or_else(bad)?;
                let (lo, hi) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
                if lo >= hi {
                    return Err(bad());
                }
                a.ints = (lo, hi);
            }
            "--seed" => {
                let v = value("--seed")?;
                a.seed = v.parse().map_err(|_| format!("--seed {v}: an integer"))?;
            }
            "--shared" => a.shared = Some(value("--shared")?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            s if s.contains('=') => {
                let (k, v) = s.split_once('=').expect("contains =");
                a.values.push((k.trim().to_string(), v.trim().to_string()));
            }
            s if a.target.is_empty() => a.target = s.to_string(),
            s => return Err(format!("a second kernel `{s}`: time one at a time\n{USAGE}")),
        }
    }
    if a.target.is_empty() && !a.list {
        return Err(USAGE.to_string());
    }
    Ok(a)
}

const USAGE: &str = "usage: time_kernel (module::kernel | FILE.wgsl[:kernel]) [NAME=VALUE ...] [--grid X,Y,Z] [--flops EXPR] [--repeats N] [--warmup-ms MS] [--ints LO..HI] [--seed N] [--shared PATH|none] [--watch] | --list";

fn cli(argv: Vec<String>) -> Result<(), String> {
    let args = parse_args(argv)?;
    if args.list {
        for k in kernels::all_kernels() {
            println!("{:<40} {}:{}", k.qualified_name(), k.file, k.line);
        }
        return Ok(());
    }
    let library = !args.target.ends_with(".wgsl") && !args.target.contains(".wgsl:");
    let mut options = GpuOptions::from_env();
    if args.watch && library {
        options = options.hot_reload(true);
    }
    let gpu = Gpu::with_options_blocking(options).map_err(|e| e.to_string())?;
    println!("adapter: {}", gpu.report());
    if library {
        let target = Target::library(&args.target)?;
        let mut first = true;
        loop {
            if !first {
                println!();
            }
            first = false;
            match time(&gpu, &target, &args) {
                Ok(t) => print!("{t}"),
                Err(e) if args.watch => println!("error: {e}"),
                Err(e) => return Err(e),
            }
            if !args.watch {
                return Ok(());
            }
            // The runtime prints each report; time again once the kernel ran its new source.
            let name = target.def.qualified_name();
            println!("watching {} (Ctrl-C to stop)", target.def.source.map_or(target.def.file, |s| s.file.display));
            let mut seen = gpu.reload_generation();
            loop {
                let Some(r) = gpu.wait_for_reload(seen, Duration::from_secs(3600)) else { continue };
                seen = r.generation;
                if r.swapped.contains(&name) {
                    break;
                }
            }
        }
    }
    let (path, kernel) = match args.target.rsplit_once(".wgsl:") {
        Some((p, k)) => (format!("{p}.wgsl"), Some(k.to_string())),
        None => (args.target.clone(), None),
    };
    let mut stamps = Vec::new();
    loop {
        let compiled = Target::file(&path, kernel.as_deref(), args.shared.as_deref());
        let files = match &compiled {
            Ok(t) => t.files.clone(),
            Err((_, files)) => files.clone(),
        };
        match compiled {
            Ok(target) => match time(&gpu, &target, &args) {
                Ok(t) => print!("{t}"),
                Err(e) if args.watch => println!("error: {e}"),
                Err(e) => return Err(e),
            },
            Err((e, _)) if args.watch => println!("{e}"),
            Err((e, _)) => return Err(e),
        }
        if !args.watch {
            return Ok(());
        }
        println!("watching {path} (Ctrl-C to stop)");
        if stamps.is_empty() || files.len() != stamps.len() {
            stamps = files.iter().map(|f| stamp(f)).collect();
        }
        wait_for_change(&files, &mut stamps);
        println!();
    }
}

type Stamp = Option<(std::time::SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Returns once a file changed and then stayed unchanged for one poll (editors write in steps).
fn wait_for_change(files: &[PathBuf], stamps: &mut Vec<Stamp>) {
    let mut changed = false;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now: Vec<Stamp> = files.iter().map(|f| stamp(f)).collect();
        if now != *stamps {
            *stamps = now;
            changed = true;
        } else if changed {
            return;
        }
    }
}

/// The kernel to time: what runs it (a `KernelDef`) and what describes it (the compiled
/// kernel: interface and annotations).
struct Target {
    def: &'static KernelDef,
    kernel: cg::compile::Kernel,
    /// The files it was compiled from (watched for a file's kernel).
    files: Vec<PathBuf>,
}

impl Target {
    /// A library kernel: its compiled `KernelDef`, described by compiling its file again.
    fn library(name: &str) -> Result<Target, String> {
        let def = *kernels::all_kernels().find(|k| k.qualified_name() == name).ok_or_else(|| {
            let close: Vec<String> = kernels::all_kernels()
                .map(|k| k.qualified_name())
                .filter(|q| q.split("::").any(|part| name.contains(part) || part.contains(name)))
                .take(8)
                .collect();
            format!(
                "no library kernel `{name}`{} (--list lists them; a file of yours is FILE.wgsl[:kernel])",
                if close.is_empty() { String::new() } else { format!("; did you mean {}", close.join(", ")) }
            )
        })?;
        let source = def.source.ok_or_else(|| format!("`{name}` has no source to read"))?.file;
        let file = cg::reload::compile_again(
            source.manifest_dir.map(Path::new),
            Path::new(source.kernel_file),
            source.shared.map(Path::new),
            source.module,
        );
        let kernel = file.kernels.iter().find(|k| k.name == def.name).cloned();
        let Some(kernel) = kernel.filter(|k| k.errors.is_empty() && k.interface.is_some()) else {
            let errors: Vec<String> = file.all_errors().map(|d| format!("error: {}", d.render())).collect();
            return Err(format!(
                "cannot read `{name}`'s annotations from {}:\n{}",
                source.kernel_file,
                errors.join("\n")
            ));
        };
        Ok(Target { def, kernel, files: file.read.clone() })
    }

    /// A kernel of a file of the user's, compiled now by `kernels!`'s own stages.
    fn file(path: &str, kernel: Option<&str>, shared: Option<&str>) -> Result<Target, (String, Vec<PathBuf>)> {
        let cwd = std::env::current_dir().ok();
        let site = cg::CallSite { manifest_dir: cwd, calling_file: None };
        let beside = Path::new(path).parent().unwrap_or(Path::new("")).join("00_shared.wgsl");
        let shared = match shared {
            Some("none") => cg::input::Shared::None,
            Some(p) => cg::input::Shared::Path(p.to_string()),
            None if beside.exists() && beside != Path::new(path) => cg::input::Shared::Default,
            None => cg::input::Shared::None,
        };
        let file = cg::compile::compile(&site, path, &shared, None);
        let files = file.read.clone();
        let fail = |e: String| (e, files.clone());
        let name = match kernel {
            Some(k) => k.to_string(),
            None => match file.kernels.as_slice() {
                [one] => one.name.clone(),
                [] if !file.errors.is_empty() => String::new(),
                [] => return Err(fail(format!("{path} has no kernels (`// --- KERNEL: name ---` markers)"))),
                many => {
                    let names: Vec<&str> = many.iter().map(|k| k.name.as_str()).collect();
                    return Err(fail(format!("{path} has several kernels: name one, {path}:{}", names.join(" or :"))));
                }
            },
        };
        let errors: Vec<String> = cg::diagnostic::Diagnostic::merge(
            file.errors
                .iter()
                .chain(file.kernels.iter().filter(|k| k.name == name).flat_map(|k| k.errors.iter()))
                .cloned(),
        )
        .iter()
        .map(|d| format!("error: {}", d.render()))
        .collect();
        if !errors.is_empty() {
            return Err(fail(errors.join("\n")));
        }
        let kernel = file.kernels.iter().find(|k| k.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = file.kernels.iter().map(|k| k.name.as_str()).collect();
            fail(format!("{path} has no kernel `{name}` (it has {})", names.join(", ")))
        })?;
        let def = leak_def(&file, &kernel).map_err(fail)?;
        Ok(Target { def, kernel, files })
    }
}

fn leak<T: ?Sized>(b: Box<T>) -> &'static T {
    Box::leak(b)
}

fn leak_str(s: &str) -> &'static str {
    leak(s.to_string().into_boxed_str())
}

/// A `KernelDef` for a kernel compiled at run time, as `kernels!` would emit it (buffers and
/// uniforms only: the tool makes no textures).
fn leak_def(file: &cg::compile::File, k: &cg::compile::Kernel) -> Result<&'static KernelDef, String> {
    let iface = k.interface.as_ref().ok_or("the kernel has no interface")?;
    if let Some(r) = iface.resources.first() {
        return Err(format!("binding `{}` is a {}: time_kernel binds buffers only", r.name, r.wgsl));
    }
    let bindings: Vec<kernels::BindingDef> = iface
        .bindings
        .iter()
        .map(|b| kernels::BindingDef {
            group: b.group,
            binding: b.binding,
            name: leak_str(&b.name),
            kind: match b.access {
                cg::reflect::Access::Read => BindingKind::Read,
                cg::reflect::Access::ReadWrite => BindingKind::ReadWrite,
                cg::reflect::Access::Uniform => BindingKind::Uniform,
            },
            wgsl_type: leak_str(&b.wgsl),
            stride: b.stride,
            min_elems: b.min_elems,
            offset: b.offset,
        })
        .collect();
    let key = |name: &str| {
        let o = iface.overrides.iter().find(|o| o.name == name);
        leak_str(&o.and_then(|o| o.id).map_or(name.to_string(), |i| i.to_string()))
    };
    let overrides: Vec<kernels::OverrideDef> = iface
        .overrides
        .iter()
        .map(|o| kernels::OverrideDef {
            name: leak_str(&o.name),
            key: key(&o.name),
            ty: o.ty,
            has_default: o.has_default,
        })
        .collect();
    let scalar = |s: cg::validate::CoopScalar| match s {
        cg::validate::CoopScalar::F16 => kernels::CoopScalar::F16,
        cg::validate::CoopScalar::F32 => kernels::CoopScalar::F32,
    };
    let variants: Vec<kernels::VariantDef> = k
        .variants
        .iter()
        .map(|v| kernels::VariantDef {
            subgroups: v.subgroups,
            f16: v.f16,
            coop: leak(
                v.coop
                    .iter()
                    .map(|c| kernels::CoopConfig { m: c.m, n: c.n, k: c.k, ab: scalar(c.ab), cr: scalar(c.cr) })
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            ),
            wgsl: leak_str(&v.wgsl),
            browser_wgsl: leak_str(&v.browser_wgsl),
            features: leak(v.features.clone().into_boxed_slice()),
            overrides: leak(v.overrides.iter().map(|o| leak_str(o)).collect::<Vec<_>>().into_boxed_slice()),
        })
        .collect();
    let (grid, grid_expr) = match &k.shape.grid {
        cg::shape::GridSource::Annotation(g) => (
            match g.value {
                cg::shape::Grid::Threads(_) => GridKind::Threads,
                cg::shape::Grid::Workgroups(_) => GridKind::Workgroups,
                cg::shape::Grid::Explicit(_) => GridKind::Explicit,
            },
            leak_str(&g.text),
        ),
        _ => (GridKind::Caller, ""),
    };
    let requires: Vec<&'static str> = k.shape.requires.iter().map(|r| leak_str(&r.text)).collect();
    Ok(leak(Box::new(KernelDef {
        name: leak_str(&k.name),
        module: leak_str(&file.module),
        file: leak_str(&k.marker.file),
        line: k.marker.line as u32,
        doc: leak_str(&k.doc.join("\n")),
        workgroup_size: iface.workgroup_size,
        workgroup_size_overrides: iface.workgroup_size_overrides.clone().map(|o| o.map(|n| key(&n))),
        immediate_size: iface.immediate.as_ref().map_or(0, |i| i.size),
        bindings: leak(bindings.into_boxed_slice()),
        resources: &[],
        overrides: leak(overrides.into_boxed_slice()),
        grid,
        grid_expr,
        requires: leak(requires.into_boxed_slice()),
        variants: leak(variants.into_boxed_slice()),
        unchecked: k.shape.unchecked.is_some(),
        source: None,
    })))
}

/// One scalar of a uniform or the immediate that a value can set.
#[derive(Clone, Debug)]
struct Leaf {
    /// `p.m`, `n` (a scalar uniform), `d.origin.y`.
    path: String,
    /// The binding and the steps to the scalar, as shape expressions name it.
    binding: String,
    steps: Vec<cg::shape::Step>,
    scalar: cg::reflect::HostScalar,
    offset: usize,
}

fn size_of(t: &cg::reflect::HostType, structs: &[cg::reflect::StructDef]) -> usize {
    match t {
        cg::reflect::HostType::Scalar(s) => s.size() as usize,
        cg::reflect::HostType::Array(inner, n) => size_of(inner, structs) * *n as usize,
        cg::reflect::HostType::Struct(name) => structs.iter().find(|s| s.name == *name).map_or(0, |s| s.size as usize),
    }
}

/// Every scalar inside a value of type `t` at `offset`.
fn leaves(
    t: &cg::reflect::HostType,
    structs: &[cg::reflect::StructDef],
    prefix: (&str, &str, Vec<cg::shape::Step>),
    offset: usize,
    out: &mut Vec<Leaf>,
) {
    let (path, binding, steps) = prefix;
    match t {
        cg::reflect::HostType::Scalar(s) => {
            out.push(Leaf { path: path.to_string(), binding: binding.to_string(), steps, scalar: *s, offset })
        }
        cg::reflect::HostType::Array(inner, n) => {
            let size = size_of(inner, structs);
            for i in 0..*n as usize {
                let name = if *n <= 4 { ["x", "y", "z", "w"][i].to_string() } else { i.to_string() };
                let mut steps = steps.clone();
                steps.push(cg::shape::Step::Component(i as u32));
                leaves(inner, structs, (&format!("{path}.{name}"), binding, steps), offset + i * size, out);
            }
        }
        cg::reflect::HostType::Struct(name) => {
            let Some(s) = structs.iter().find(|s| s.name == *name) else { return };
            for f in &s.fields {
                if let (Some(fname), Some(ft)) = (&f.name, &f.ty) {
                    let mut steps = steps.clone();
                    steps.push(cg::shape::Step::Field(fname.clone()));
                    leaves(ft, structs, (&format!("{path}.{fname}"), binding, steps), offset + f.offset as usize, out);
                }
            }
        }
    }
}

/// Inputs for one timing: values, lengths, grid, overrides, uniform bytes.
struct Plan {
    /// Per binding of `def.bindings`: storage elements, or a uniform's bytes.
    lengths: Vec<u64>,
    uniforms: Vec<Option<Vec<u8>>>,
    immediate: Option<Vec<u8>>,
    grid: Grid,
    overrides: Vec<(&'static str, f64)>,
    /// Every value used, as `name=value`, for the printout.
    shown: Vec<String>,
    values: BTreeMap<String, f64>,
}

fn encode(scalar: cg::reflect::HostScalar, v: f64, out: &mut [u8]) {
    use cg::reflect::HostScalar as S;
    match scalar {
        S::F32 => out[..4].copy_from_slice(&(v as f32).to_le_bytes()),
        S::U32 => out[..4].copy_from_slice(&(v as u32).to_le_bytes()),
        S::I32 => out[..4].copy_from_slice(&(v as i32).to_le_bytes()),
        S::F16 => out[..2].copy_from_slice(&kernels::f16::from_f64(v).to_le_bytes()),
        S::U64 => out[..8].copy_from_slice(&(v as u64).to_le_bytes()),
        S::I64 => out[..8].copy_from_slice(&(v as i64).to_le_bytes()),
        S::F64 => out[..8].copy_from_slice(&v.to_le_bytes()),
    }
}

fn plan(target: &Target, args: &Args) -> Result<Plan, String> {
    let k = &target.kernel;
    let iface = k.interface.as_ref().ok_or("the kernel has no interface")?;
    let structs = &iface.structs;
    // The scalars values can set.
    let mut all = Vec::new();
    for b in iface.bindings.iter().filter(|b| b.access == cg::reflect::Access::Uniform) {
        leaves(&b.ty, structs, (&b.name, &b.name, Vec::new()), 0, &mut all);
    }
    if let Some(i) = &iface.immediate {
        leaves(&i.ty, structs, (&i.name, &i.name, Vec::new()), 0, &mut all);
    }
    let mut values: BTreeMap<String, f64> = BTreeMap::new();
    let mut lengths_given: BTreeMap<String, u64> = BTreeMap::new();
    let mut overrides: Vec<(&'static str, f64)> = Vec::new();
    let mut shown = Vec::new();
    for (name, text) in &args.values {
        if let Some(b) = name.strip_prefix("len(").and_then(|n| n.strip_suffix(')')) {
            if !iface.bindings.iter().any(|x| x.name == b && x.access != cg::reflect::Access::Uniform) {
                return Err(format!("`{name}`: the kernel has no storage binding `{b}`"));
            }
            let n = text.parse().map_err(|_| format!("`{name}={text}`: a length is a whole number"))?;
            lengths_given.insert(b.to_string(), n);
            continue;
        }
        let v: f64 = text.parse().map_err(|_| format!("`{name}={text}`: not a number"))?;
        if let Some(o) = target.def.overrides.iter().find(|o| o.name == name || o.key == name) {
            overrides.push((o.key, v));
            shown.push(format!("{}={text} (override)", o.name));
            continue;
        }
        let matches: Vec<&Leaf> = all
            .iter()
            .filter(|l| {
                l.path == *name || l.path.rsplit('.').next() == Some(name) || l.path.ends_with(&format!(".{name}"))
            })
            .collect();
        let exact: Vec<&Leaf> = matches.iter().copied().filter(|l| l.path == *name).collect();
        let leaf = match (exact.as_slice(), matches.as_slice()) {
            ([one], _) | ([], [one]) => *one,
            ([], []) => {
                let known: Vec<&str> =
                    all.iter().map(|l| l.path.as_str()).chain(target.def.overrides.iter().map(|o| o.name)).collect();
                return Err(format!(
                    "`{name}` is none of the kernel's values: {} (and len(binding) for a buffer's length)",
                    if known.is_empty() { "it has none".to_string() } else { known.join(", ") }
                ));
            }
            _ => {
                let names: Vec<&str> = matches.iter().map(|l| l.path.as_str()).collect();
                return Err(format!("`{name}` could be {}: write the whole name", names.join(" or ")));
            }
        };
        values.insert(leaf.path.clone(), v);
    }
    // Integers the annotations read must be given; the rest default.
    let mut needed = Vec::new();
    let mut uses = |e: &cg::shape::Expr| collect_uniforms(e, &mut needed);
    for r in &k.shape.requires {
        uses(&r.value.left);
        uses(&r.value.right);
    }
    if let cg::shape::GridSource::Annotation(g) = &k.shape.grid {
        match &g.value {
            cg::shape::Grid::Threads(n) | cg::shape::Grid::Workgroups(n) => uses(n),
            cg::shape::Grid::Explicit(v) => v.iter().for_each(&mut uses),
        }
    }
    let missing: Vec<&str> = all
        .iter()
        .filter(|l| !values.contains_key(&l.path) && needed.iter().any(|(b, s)| *b == l.binding && *s == l.steps))
        .map(|l| l.path.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "give {} (the kernel's annotations use them): e.g. `{}=1024`",
            missing.join(", "),
            missing[0]
        ));
    }
    for l in &all {
        let v = *values.entry(l.path.clone()).or_insert(if l.scalar.is_integer() { 0.0 } else { 1.0 });
        shown.push(format!("{}={v}", l.path));
    }
    let uniform = |binding: &str, steps: &[cg::shape::Step]| -> Option<i128> {
        let l = all.iter().find(|l| l.binding == binding && l.steps == steps)?;
        let v = values.get(&l.path)?;
        (v.fract() == 0.0).then_some(*v as i128)
    };
    // Lengths: given, else the least every `len(x) >= …` and `len(x) == …` allows, to a fixed
    // point (a length may follow from another).
    let storage: Vec<&cg::reflect::Binding> =
        iface.bindings.iter().filter(|b| b.access != cg::reflect::Access::Uniform).collect();
    let mut lengths: BTreeMap<String, i128> = lengths_given.iter().map(|(k, v)| (k.clone(), *v as i128)).collect();
    for _ in 0..=storage.len() {
        let mut changed = false;
        for r in &k.shape.requires {
            let req = &r.value;
            let (len_side, other, cmp) = match (&req.left, &req.right) {
                (cg::shape::Expr::Len { binding }, other) => (binding, other, req.cmp),
                (other, cg::shape::Expr::Len { binding }) => (binding, other, flip(req.cmp)),
                _ => continue,
            };
            if lengths_given.contains_key(len_side) {
                continue;
            }
            let known = |b: &str| lengths.get(b).copied();
            let Some(v) = other.eval(&known, &uniform) else { continue };
            let least = match cmp {
                cg::shape::Cmp::Ge | cg::shape::Cmp::Eq => v,
                cg::shape::Cmp::Gt => v + 1,
                _ => continue,
            };
            let entry = lengths.entry(len_side.clone()).or_insert(0);
            if least > *entry {
                *entry = least;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut out_lengths = Vec::new();
    let mut uniforms = Vec::new();
    let encode_value = |ty: &cg::reflect::HostType, name: &str| -> Vec<u8> {
        let mut bytes = vec![0u8; size_of(ty, structs)];
        for l in all.iter().filter(|l| l.binding == name) {
            encode(l.scalar, values[&l.path], &mut bytes[l.offset..]);
        }
        bytes
    };
    for b in &iface.bindings {
        if b.access == cg::reflect::Access::Uniform {
            out_lengths.push(0);
            uniforms.push(Some(encode_value(&b.ty, &b.name)));
            continue;
        }
        let n = match lengths.get(&b.name) {
            Some(&n) if n >= 0 => n.max(b.min_elems as i128) as u64,
            Some(&n) => return Err(format!("the annotations give `{}` a negative length ({n})", b.name)),
            None if b.min_elems > 0 => b.min_elems,
            None => {
                return Err(format!(
                    "no `@requires len({}) …` says how long `{}` is: give `len({})=N`",
                    b.name, b.name, b.name
                ));
            }
        };
        shown.push(format!("len({})={n}", b.name));
        out_lengths.push(n);
        uniforms.push(None);
    }
    let immediate = iface.immediate.as_ref().map(|i| encode_value(&i.ty, &i.name));
    let len_of = |b: &str| lengths.get(b).copied();
    let count = |e: &cg::shape::Expr, what: &str| -> Result<u64, String> {
        let v = e.eval(&len_of, &uniform).ok_or_else(|| format!("the grid's {what} cannot be computed"))?;
        u64::try_from(v).map_err(|_| format!("the grid's {what} is negative ({v})"))
    };
    let grid = match (&k.shape.grid, args.grid) {
        (_, Some(g)) => Grid::Explicit(g),
        (cg::shape::GridSource::Annotation(g), None) => match &g.value {
            cg::shape::Grid::Threads(n) => Grid::Threads(count(n, "size")?),
            cg::shape::Grid::Workgroups(n) => Grid::Workgroups(count(n, "size")?),
            cg::shape::Grid::Explicit(v) => {
                let mut out = [0u32; 3];
                for (o, e) in out.iter_mut().zip(v) {
                    *o = u32::try_from(count(e, "dimension")?).map_err(|_| "a grid dimension over u32")?;
                }
                Grid::Explicit(out)
            }
        },
        _ => return Err("the kernel has no `@grid`: give --grid X,Y,Z (workgroups)".into()),
    };
    let mut all_values: BTreeMap<String, f64> = values.clone();
    for (b, n) in &lengths {
        all_values.insert(format!("len({b})"), *n as f64);
    }
    for (k, v) in &overrides {
        let name = target.def.overrides.iter().find(|o| o.key == *k).map_or(*k, |o| o.name);
        all_values.insert(name.to_string(), *v);
    }
    Ok(Plan { lengths: out_lengths, uniforms, immediate, grid, overrides, shown, values: all_values })
}

fn flip(c: cg::shape::Cmp) -> cg::shape::Cmp {
    use cg::shape::Cmp;
    match c {
        Cmp::Ge => Cmp::Le,
        Cmp::Gt => Cmp::Lt,
        Cmp::Le => Cmp::Ge,
        Cmp::Lt => Cmp::Gt,
        other => other,
    }
}

fn collect_uniforms(e: &cg::shape::Expr, out: &mut Vec<(String, Vec<cg::shape::Step>)>) {
    match e {
        cg::shape::Expr::Uniform { binding, path } => out.push((binding.clone(), path.clone())),
        cg::shape::Expr::Binary { left, right, .. } => {
            collect_uniforms(left, out);
            collect_uniforms(right, out);
        }
        _ => {}
    }
}

/// A small generator (xorshift*), so that a seed gives the same inputs everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random bytes for `count` values of `t` (floats in [-1, 1), integers in `ints`).
fn random_values(
    t: &cg::reflect::HostType,
    structs: &[cg::reflect::StructDef],
    count: u64,
    rng: &mut Rng,
    ints: (u32, u32),
    out: &mut Vec<u8>,
) {
    let mut leaves_of = Vec::new();
    leaves(t, structs, ("", "", Vec::new()), 0, &mut leaves_of);
    let size = size_of(t, structs);
    for _ in 0..count {
        let start = out.len();
        out.resize(start + size, 0);
        for l in &leaves_of {
            let v = if l.scalar.is_integer() {
                (ints.0 as u64 + rng.next() % (ints.1 - ints.0) as u64) as f64
            } else {
                rng.unit() * 2.0 - 1.0
            };
            encode(l.scalar, v, &mut out[start + l.offset..]);
        }
    }
}

/// What one timing found.
struct Timing {
    name: String,
    place: String,
    variant: String,
    workgroup: String,
    grid: String,
    shown: Vec<String>,
    buffers: Vec<String>,
    median_ns: f64,
    min_ns: f64,
    max_ns: f64,
    repeats: usize,
    timestamps: bool,
    moved_bytes: f64,
    flops: Option<(String, f64)>,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "kernel: {} ({}), variant {}", self.name, self.place, self.variant)?;
        writeln!(f, "workgroup {}, grid {}", self.workgroup, self.grid)?;
        writeln!(f, "values: {}", self.shown.join(" "))?;
        writeln!(f, "buffers: {}", self.buffers.join(", "))?;
        let ms = |ns: f64| ns / 1e6;
        writeln!(
            f,
            "time: {:.4} ms median of {} dispatches (min {:.4}, max {:.4}), {}",
            ms(self.median_ns),
            self.repeats,
            ms(self.min_ns),
            ms(self.max_ns),
            if self.timestamps { "GPU timestamps" } else { "wall clock per dispatch (no timestamp queries)" }
        )?;
        writeln!(
            f,
            "bandwidth: {:.2} GB/s ({:.1} MB read and written once)",
            self.moved_bytes / self.median_ns,
            self.moved_bytes / 1e6
        )?;
        if let Some((expr, flops)) = &self.flops {
            writeln!(f, "compute: {:.3} GFLOP/s ({expr} = {flops:.4e} FLOP)", flops / self.median_ns)?;
        }
        Ok(())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Random inputs per the plan, a warm-up, then the timed dispatches.
fn time(gpu: &Gpu, target: &Target, args: &Args) -> Result<Timing, String> {
    time_with_buffers(gpu, target, args).map(|(t, _)| t)
}

/// The buffers a timed kernel bound, one per binding (`None` for a uniform), as words.
type Bound = Vec<Option<kernels::Buffer<u32>>>;

/// [`time`], with the storage buffers it bound.
fn time_with_buffers(gpu: &Gpu, target: &Target, args: &Args) -> Result<(Timing, Bound), String> {
    let def = target.def;
    let p = plan(target, args)?;
    let iface = target.kernel.interface.as_ref().expect("planned");
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut buffers = Vec::new();
    let mut described = Vec::new();
    let mut moved = 0.0;
    for (b, &len) in iface.bindings.iter().zip(&p.lengths) {
        if b.access == cg::reflect::Access::Uniform {
            buffers.push(None);
            continue;
        }
        let mut bytes = Vec::new();
        if let Some(h) = &b.header {
            random_values(h, &iface.structs, 1, &mut rng, args.ints, &mut bytes);
            bytes.resize(b.offset as usize, 0);
        }
        random_values(&b.ty, &iface.structs, len, &mut rng, args.ints, &mut bytes);
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4"))).collect();
        let buf = gpu.upload(&words).map_err(|e| e.to_string())?;
        let usage = iface.usage.iter().find(|(n, _)| *n == b.name).map(|u| u.1);
        let (r, w) = usage.map_or((true, b.access == cg::reflect::Access::ReadWrite), |u| (u.read, u.written));
        moved += bytes.len() as f64 * (r as u8 + w as u8) as f64;
        let how = match (r, w) {
            (true, true) => "read and written",
            (false, true) => "written",
            (true, false) => "read",
            (false, false) => "unused",
        };
        described.push(format!("{} {} ({how})", b.name, human(bytes.len() as f64)));
        buffers.push(Some(buf));
    }
    let call_args: Vec<Arg<'_>> = def
        .bindings
        .iter()
        .zip(&buffers)
        .zip(&p.uniforms)
        .map(|((b, buf), u)| match (buf, u) {
            (Some(buf), _) => Arg::storage(buf, b.kind == BindingKind::ReadWrite),
            (None, Some(bytes)) => Arg::uniform(bytes),
            (None, None) => unreachable!("a binding is storage or uniform"),
        })
        .chain(p.immediate.as_deref().map(Arg::immediate))
        .collect();
    let call = || Call { kernel: def, grid: p.grid, args: &call_args, overrides: &p.overrides };
    let variant = gpu.variant_for(def).map_err(|e| e.to_string())?;
    let index = def.variants.iter().position(|v| std::ptr::eq(v, variant)).unwrap_or(0);
    let workgroup = def.workgroup_size_with(&p.overrides).map_err(|e| e.to_string())?;
    let dims = p
        .grid
        .resolve(
            || def.qualified_name(),
            workgroup.iter().map(|&d| d as u64).product(),
            gpu.limits().max_compute_workgroups_per_dimension,
        )
        .map_err(|e| e.to_string())?;

    // Warm-up: the pipeline, the driver, the clocks.
    let start = Instant::now();
    let mut runs = 0u32;
    while runs < 3 || start.elapsed() < Duration::from_millis(args.warmup_ms) {
        gpu.record(call()).map_err(|e| e.to_string())?;
        gpu.wait().map_err(|e| e.to_string())?;
        runs += 1;
    }
    let per_run = start.elapsed().as_secs_f64() / runs as f64;
    let repeats = args.repeats.unwrap_or(((1.0 / per_run.max(1e-6)) as u32).clamp(5, 1000));
    let timestamps = gpu.report().timestamps;
    let mut times: Vec<f64> = if timestamps {
        let batch = gpu.profiled_batch(repeats).map_err(|e| e.to_string())?;
        for _ in 0..repeats {
            (&batch).record(call()).map_err(|e| e.to_string())?;
        }
        let profile = batch.submit_profiled().map_err(|e| e.to_string())?;
        profile.dispatches.iter().map(|d| d.end_ns - d.start_ns).collect()
    } else {
        let mut t = Vec::new();
        for _ in 0..repeats {
            let s = Instant::now();
            gpu.record(call()).map_err(|e| e.to_string())?;
            gpu.wait().map_err(|e| e.to_string())?;
            t.push(s.elapsed().as_secs_f64() * 1e9);
        }
        t
    };
    let (min, max) = times.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let median_ns = median(&mut times);
    let flops = match &args.flops {
        Some(expr) => Some((expr.clone(), arithmetic(expr, &p.values)?)),
        None => None,
    };
    let needs = {
        let mut n = Vec::new();
        if !variant.coop.is_empty() {
            n.push("cooperative matrices".to_string());
        }
        if variant.subgroups {
            n.push("subgroups".into());
        }
        if variant.f16 {
            n.push("f16".into());
        }
        n.extend(variant.features.iter().map(|f| f.to_string()));
        let mut needs = if n.is_empty() { "portable".to_string() } else { n.join(", ") };
        if !gpu.runtime_checks_for(def) {
            needs.push_str("; without wgpu's runtime checks (`@unchecked`)");
        }
        needs
    };
    let timing = Timing {
        name: def.qualified_name(),
        place: format!("{}:{}", def.file, def.line),
        variant: format!("{} of {} ({needs})", index + 1, def.variants.len()),
        workgroup: format!("{}×{}×{}", workgroup[0], workgroup[1], workgroup[2]),
        grid: format!("{}×{}×{} workgroups", dims[0], dims[1], dims[2]),
        shown: p.shown,
        buffers: described,
        median_ns,
        min_ns: min,
        max_ns: max,
        repeats: times.len(),
        timestamps,
        moved_bytes: moved,
        flops,
    };
    drop(call_args);
    Ok((timing, buffers))
}

fn human(bytes: f64) -> String {
    if bytes >= 1e9 {
        format!("{:.2} GB", bytes / 1e9)
    } else if bytes >= 1e6 {
        format!("{:.2} MB", bytes / 1e6)
    } else if bytes >= 1e3 {
        format!("{:.1} kB", bytes / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// `+ - * /`, parentheses, numbers and names of `values` (`2*m*n*k`, `len(x)` included).
fn arithmetic(text: &str, values: &BTreeMap<String, f64>) -> Result<f64, String> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
        values: &'a BTreeMap<String, f64>,
        text: &'a str,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
        }
        fn err(&self, what: &str) -> String {
            format!("--flops {}: {what} at character {}", self.text, self.i + 1)
        }
        fn sum(&mut self) -> Result<f64, String> {
            let mut v = self.product()?;
            loop {
                self.ws();
                match self.s.get(self.i) {
                    Some(b'+') => {
                        self.i += 1;
                        v += self.product()?
                    }
                    Some(b'-') => {
                        self.i += 1;
                        v -= self.product()?
                    }
                    _ => return Ok(v),
                }
            }
        }
        fn product(&mut self) -> Result<f64, String> {
            let mut v = self.atom()?;
            loop {
                self.ws();
                match self.s.get(self.i) {
                    Some(b'*') => {
                        self.i += 1;
                        v *= self.atom()?
                    }
                    Some(b'/') => {
                        self.i += 1;
                        v /= self.atom()?
                    }
                    _ => return Ok(v),
                }
            }
        }
        fn atom(&mut self) -> Result<f64, String> {
            self.ws();
            let start = self.i;
            match self.s.get(self.i) {
                Some(b'(') => {
                    self.i += 1;
                    let v = self.sum()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b')') {
                        return Err(self.err("expected `)`"));
                    }
                    self.i += 1;
                    Ok(v)
                }
                Some(b'-') => {
                    self.i += 1;
                    Ok(-self.atom()?)
                }
                Some(c) if c.is_ascii_digit() || *c == b'.' => {
                    while self.s.get(self.i).is_some_and(|c| c.is_ascii_digit() || *c == b'.' || *c == b'e') {
                        self.i += 1;
                    }
                    let t = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
                    t.parse().map_err(|_| self.err("a malformed number"))
                }
                Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                    while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || b"_.".contains(c)) {
                        self.i += 1;
                    }
                    if self.s.get(self.i) == Some(&b'(') {
                        // len(x)
                        while self.s.get(self.i).is_some_and(|&c| c != b')') {
                            self.i += 1;
                        }
                        self.i += 1;
                    }
                    let name = std::str::from_utf8(&self.s[start..self.i.min(self.s.len())]).expect("ASCII");
                    let found = self.values.get(name).or_else(|| {
                        let mut m = self.values.iter().filter(|(k, _)| k.rsplit('.').next() == Some(name));
                        match (m.next(), m.next()) {
                            (Some((_, v)), None) => Some(v),
                            _ => None,
                        }
                    });
                    found.copied().ok_or_else(|| {
                        let names: Vec<&str> = self.values.keys().map(String::as_str).collect();
                        format!("--flops {}: no value `{name}` (the values are {})", self.text, names.join(", "))
                    })
                }
                _ => Err(self.err("expected a number, a name or `(`")),
            }
        }
    }
    let mut p = P { s: text.as_bytes(), i: 0, values, text };
    let v = p.sum()?;
    p.ws();
    if p.i != text.len() {
        return Err(p.err("unexpected text"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        parse_args(list.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    #[test]
    fn the_command_line() {
        let a = args(&["linear::matmul", "m=64", "len(a)=9", "--grid", "2,3", "--flops", "2*m", "--ints", "1..5"]);
        assert_eq!(a.target, "linear::matmul");
        assert_eq!(a.values, vec![("m".into(), "64".into()), ("len(a)".into(), "9".into())]);
        assert_eq!(a.grid, Some([2, 3, 1]));
        assert_eq!((a.flops.as_deref(), a.ints), (Some("2*m"), (1, 5)));
        for bad in [&["k", "--grid", "a"][..], &["k", "--ints", "5..5"], &["k", "--bogus"], &["a", "b"], &[]] {
            assert!(parse_args(bad.iter().map(|s| s.to_string()).collect()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flop_expressions() {
        let values: BTreeMap<String, f64> =
            [("p.m", 3.0), ("p.n", 5.0), ("len(x)", 7.0)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(arithmetic("2*m*n", &values), Ok(30.0));
        assert_eq!(arithmetic("(p.m + 1) * len(x) / 2 - -1", &values), Ok(15.0));
        assert!(arithmetic("2*q", &values).unwrap_err().contains("no value `q`"));
        assert!(arithmetic("2*(m", &values).is_err());
        assert!(arithmetic("2 m", &values).is_err());
    }

    /// The tool's inputs are what it says: the product it timed is the product of the buffers
    /// it made (read back and compared in float64; the kernel overwrites `y`, so every repeat
    /// leaves the same result).
    #[test]
    fn a_library_kernel_runs_on_the_inputs_it_reports() {
        let Ok(gpu) = Gpu::with_options_blocking(GpuOptions::from_env()) else {
            assert!(std::env::var("CI").is_err(), "CI=true but no GPU adapter");
            eprintln!("SKIPPED: no GPU adapter");
            return;
        };
        let target = Target::library("linear::matmul").unwrap();
        let (m, n, k) = (33usize, 20usize, 17usize);
        let a = args(&[
            "linear::matmul",
            "m=33",
            "n=20",
            "k=17",
            "--repeats",
            "3",
            "--warmup-ms",
            "0",
            "--flops",
            "2*m*n*k",
        ]);
        let p = plan(&target, &a).unwrap();
        let lens: Vec<(&str, u64)> = target.def.bindings.iter().zip(&p.lengths).map(|(b, &n)| (b.name, n)).collect();
        assert_eq!(lens, [("x", 33 * 17), ("w", 17 * 20), ("y", 33 * 20), ("p", 0)]);
        let (t, buffers) = time_with_buffers(&gpu, &target, &a).unwrap();
        assert!(t.median_ns > 0.0 && t.min_ns <= t.median_ns && t.median_ns <= t.max_ns, "{t}");
        assert_eq!(t.flops.as_ref().map(|f| f.1), Some(2.0 * 33.0 * 20.0 * 17.0));
        assert_eq!(t.repeats, 3);
        let text = t.to_string();
        assert!(text.contains("kernel: linear::matmul (shaders/03_linear.wgsl:") && text.contains("p.m=33"), "{text}");
        let read = |i: usize| -> Vec<f32> {
            buffers[i].as_ref().unwrap().read(&gpu).unwrap().into_iter().map(f32::from_bits).collect()
        };
        let (x, w, y) = (read(0), read(1), read(2));
        assert!(x.iter().chain(&w).all(|v| (-1.0..1.0).contains(v)), "floats drawn from [-1, 1)");
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| x[i * k + l] as f64 * w[l * n + j] as f64).sum();
                let bound: f64 = (0..k).map(|l| (x[i * k + l] as f64 * w[l * n + j] as f64).abs()).sum::<f64>()
                    * k as f64
                    * f32::EPSILON as f64;
                let got = y[i * n + j] as f64;
                assert!((got - want).abs() <= bound, "y[{i}, {j}] = {got}, want {want}");
            }
        }
    }

    /// A file of the user's: compiled now, lengths from its annotations, errors rendered as
    /// compile errors.
    #[test]
    fn a_file_kernel_is_compiled_and_timed() {
        let dir = std::env::temp_dir().join(format!("time-kernel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mine.wgsl");
        std::fs::write(
            &path,
            "struct P { n: u32, s: f32 }\n// --- KERNEL: scale2 ---\n// @grid threads(p.n)\n// @requires len(y) >= p.n\n@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n@group(0) @binding(1) var<uniform> p: P;\n@compute @workgroup_size(64)\nfn scale2(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < p.n) { y[g.x] = y[g.x] * p.s; } }\n",
        )
        .unwrap();
        let file = path.to_string_lossy().into_owned();
        let target = Target::file(&file, None, Some("none")).map_err(|e| e.0).unwrap();
        let a = args(&[&file, "n=1000", "s=0.5", "--repeats", "2", "--warmup-ms", "0"]);
        let p = plan(&target, &a).unwrap();
        assert_eq!(p.lengths[0], 1000);
        assert_eq!(p.uniforms[1].as_deref(), Some(&[232, 3, 0, 0, 0, 0, 0, 63][..]), "n = 1000, s = 0.5");
        // Without the size the annotations need: an error naming it.
        let e = plan(&target, &args(&[&file, "s=2"])).err().unwrap();
        assert!(e.contains("give p.n"), "{e}");
        if let Ok(gpu) = Gpu::with_options_blocking(GpuOptions::from_env()) {
            let t = time(&gpu, &target, &a).unwrap();
            assert!(t.median_ns > 0.0 && t.variant.starts_with("1 of 1"), "{t}");
            assert_eq!(t.moved_bytes, 8000.0, "read and written once");
        }
        std::fs::write(&path, "// --- KERNEL: broken ---\n@compute @workgroup_size(64)\nfn broken() { let x = y; }\n")
            .unwrap();
        let e = Target::file(&file, None, Some("none")).err().unwrap().0;
        assert!(e.contains("error: kernel `broken`") && e.contains("mine.wgsl:3:") && e.contains("let x = y;"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
