//! The sweep on a GPU: opens the adapter, builds each kernel, checks it against float64 on
//! fresh random inputs (outputs poisoned first), times it after a sustained warm-up in the same
//! submission, and writes one JSON line per (kernel, problem), then a ranked summary.
#![allow(dead_code, clippy::needless_range_loop)]

use super::kernel::{Binding, Design, Dims, Epilogue, Kernel, Layout, Prec, grid_1d, reduce_wgsl, split_wgsl};
use super::num::{Operands, Rng, check, f32_to_f16, sample_points};
use super::plan::{self, Case, Plan};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Poison for outputs and scratch: a NaN as f32 (0x7fc07fc0) and as each f16 half (0x7fc0).
pub const POISON: u32 = 0x7fc0_7fc0;
/// The phases in order, with their share of the time budget (time a phase leaves goes to the
/// next).
pub const PHASES: [(&str, f64); 5] =
    [("edge", 0.10), ("structure", 0.25), ("tuning", 0.17), ("shapes", 0.24), ("split", 0.24)];

/// How a sweep runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub budget_s: f64,
    pub warmup_ms: f64,
    /// Substrings every measured "kernel-label problem" must contain.
    pub filter: Vec<String>,
    pub phases: Vec<String>,
    pub seed: u64,
    /// Sample SM clock and power with nvidia-smi.
    pub smi: bool,
    pub json: Option<String>,
    pub plan_name: String,
    /// No JSON on stdout (still in `json`).
    pub quiet: bool,
}

/// What a sweep did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub measured: usize,
    pub correct: usize,
    /// "label problem" of each measurement that failed to build, run or be right.
    pub not_ok: Vec<String>,
    pub skipped: usize,
    pub device_lost: bool,
}

pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    /// The adapter's subgroup size.
    pub sg: u32,
    period_ns: f64,
    queries: wgpu::QuerySet,
    lost: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
    coop_props: Vec<String>,
}

const MAX_QUERIES: u32 = 4096;

impl Gpu {
    /// Opens the first Vulkan adapter with 16×16×16 f16→f32 cooperative matrices, SHADER_F16,
    /// SUBGROUP and timestamps.
    pub fn open() -> Result<Gpu, String> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let describe = |a: &wgpu::Adapter| {
            let i = a.get_info();
            format!("{} ({:?}, {:?}, driver {} {})", i.name, i.device_type, i.backend, i.driver, i.driver_info)
        };
        if adapters.is_empty() {
            return Err("no Vulkan adapter".into());
        }
        let wanted =
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        let mut report = Vec::new();
        let mut chosen = None;
        for a in adapters {
            let props = a.cooperative_matrix_properties();
            let has = props.iter().any(|p| {
                p.m_size == 16
                    && p.n_size == 16
                    && p.k_size == 16
                    && p.ab_type == wgpu::CooperativeScalarType::F16
                    && p.cr_type == wgpu::CooperativeScalarType::F32
            });
            let feats = a.features();
            report.push(format!(
                "{}: cooperative matrices {}; features {}",
                describe(&a),
                if props.is_empty() {
                    "none".to_string()
                } else {
                    props
                        .iter()
                        .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                if feats.contains(wanted) { "ok" } else { "missing some of COOPERATIVE_MATRIX/SHADER_F16/SUBGROUP" }
            ));
            if has && feats.contains(wanted | wgpu::Features::TIMESTAMP_QUERY) && chosen.is_none() {
                chosen = Some((a, props));
            }
        }
        for r in &report {
            println!("adapter: {r}");
        }
        let (adapter, props) = chosen.ok_or_else(|| {
            "no adapter offers 16×16×16 f16→f32 cooperative matrices with SHADER_F16, SUBGROUP and timestamps (tensor cores through Vulkan)".to_string()
        })?;
        let info = adapter.get_info();
        if info.subgroup_min_size != info.subgroup_max_size {
            return Err(format!(
                "subgroup size varies ({}..{}): the kernels assume one size",
                info.subgroup_min_size, info.subgroup_max_size
            ));
        }
        let features = adapter.features()
            & (wanted | wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: cooperative matrices are experimental in wgpu 30 (naga's SPIR-V omits the
            // Vulkan memory model's availability/visibility operations, wgpu issue 8805); this
            // benchmark checks every result against float64 and records what fails.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("coop_sweep"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| format!("request_device: {e}"))?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost = Arc::new(AtomicBool::new(false));
        let l2 = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            eprintln!("DEVICE LOST ({reason:?}): {msg}");
            l2.store(true, Ordering::SeqCst);
        });
        let queries = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: MAX_QUERIES,
        });
        let period_ns = queue.get_timestamp_period() as f64;
        let coop_props = props
            .iter()
            .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
            .collect();
        Ok(Gpu {
            device,
            queue,
            sg: info.subgroup_min_size,
            info,
            limits,
            period_ns,
            queries,
            lost,
            errors,
            coop_props,
        })
    }

    fn storage(&self, bytes: &[u8], label: &str) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        })
    }

    fn empty(&self, bytes: u64, usage: wgpu::BufferUsages, label: &str) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(16),
            usage,
            mapped_at_creation: false,
        })
    }

    /// Builds a compute pipeline, catching validation/internal errors and panics.
    fn pipeline(
        &self,
        src: &str,
        entry: &str,
        constants: &[(&str, f64)],
        checked: bool,
    ) -> Result<(wgpu::ComputePipeline, f64), String> {
        let t0 = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
            let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let desc =
                wgpu::ShaderModuleDescriptor { label: Some(entry), source: wgpu::ShaderSource::Wgsl(src.into()) };
            let module = if checked {
                self.device.create_shader_module(desc)
            } else {
                // SAFETY: the kernels' index arithmetic is proven in bounds by the CPU emulator
                // (tests/coop_sweep_wgsl.rs) and their loops are bounded by uniform trip counts.
                unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
            };
            let p = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    zero_initialize_workgroup_memory: checked,
                },
                cache: None,
            });
            let v = pollster::block_on(validation.pop());
            let i = pollster::block_on(internal.pop());
            let o = pollster::block_on(oom.pop());
            match v.or(i).or(o) {
                Some(e) => Err(e.to_string()),
                None => Ok(p),
            }
        }));
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(Ok(p)) => Ok((p, ms)),
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(format!(
                "panic while building: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }

    fn wait(&self, idx: wgpu::SubmissionIndex, secs: u64) -> Result<(), String> {
        self.device
            .poll(wgpu::PollType::Wait { submission_index: Some(idx), timeout: Some(Duration::from_secs(secs)) })
            .map(|_| ())
            .map_err(|e| format!("GPU wait: {e}"))
    }

    /// Reads `bytes` of a MAP_READ buffer (after a submission that filled it completed).
    fn read(&self, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>, String> {
        let slice = buf.slice(..bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| format!("map wait: {e}"))?;
        rx.recv().map_err(|e| e.to_string())?.map_err(|e| format!("map: {e}"))?;
        let out = slice.get_mapped_range().map_err(|e| format!("mapped range: {e:?}"))?.to_vec();
        buf.unmap();
        Ok(out)
    }
}

/// One dispatch.
struct Disp {
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    grid: [u32; 3],
}

/// Times of one measurement, ns per repeat (each pass's median and the total's).
struct Timing {
    total: Vec<f64>,
    per_pass: Vec<Vec<f64>>,
    window: (Instant, Instant),
    warm: u32,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// A problem's data on the host and the GPU.
struct Problem {
    ops: Operands,
    a16: wgpu::Buffer,
    b16: wgpu::Buffer,
    a32: Option<wgpu::Buffer>,
    b32: Option<wgpu::Buffer>,
    c: wgpu::Buffer,
    c0: wgpu::Buffer,
    readback: wgpu::Buffer,
    hilo: HashMap<u32, [wgpu::Buffer; 4]>,
    pts: Vec<(usize, usize)>,
}

/// nvidia-smi sampling in the background: (time, SM MHz, W).
struct Smi {
    child: std::process::Child,
    samples: Arc<Mutex<Vec<(Instant, f64, f64)>>>,
}

impl Smi {
    fn start() -> Option<Smi> {
        let mut child = std::process::Command::new("nvidia-smi")
            .args(["--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let out = child.stdout.take()?;
        let samples: Arc<Mutex<Vec<(Instant, f64, f64)>>> = Arc::default();
        let s2 = samples.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let f: Vec<f64> = line.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                if f.len() == 2
                    && let Ok(mut v) = s2.lock()
                {
                    v.push((Instant::now(), f[0], f[1]));
                }
            }
        });
        Some(Smi { child, samples })
    }
    /// (median SM MHz in the last 60% of the window, min SM MHz, max W), if sampled.
    fn window(&self, from: Instant, to: Instant) -> Option<(f64, f64, f64)> {
        let v = self.samples.lock().ok()?;
        let all: Vec<&(Instant, f64, f64)> = v.iter().filter(|s| s.0 >= from && s.0 <= to).collect();
        if all.is_empty() {
            return None;
        }
        let late_from = from + (to - from).mul_f64(0.4);
        let late: Vec<f64> = all.iter().filter(|s| s.0 >= late_from).map(|s| s.1).collect();
        let med = if late.is_empty() { median(&all.iter().map(|s| s.1).collect::<Vec<_>>()) } else { median(&late) };
        let min = all.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
        let pmax = all.iter().map(|s| s.2).fold(0.0, f64::max);
        Some((med, min, pmax))
    }
}

impl Drop for Smi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The outcome of one (kernel, problem).
#[derive(Clone)]
struct Record {
    phase: &'static str,
    kernel: Kernel,
    case: Case,
    ok: bool,
    tflops: f64,
    err: f64,
}

pub struct Sweep {
    gpu: Gpu,
    opts: Options,
    plan: Plan,
    problems: HashMap<Case, Problem>,
    poison: Option<(wgpu::Buffer, u64)>,
    helpers: HashMap<String, wgpu::ComputePipeline>,
    aux: HashMap<u64, wgpu::Buffer>,
    records: Vec<Record>,
    json: Option<std::fs::File>,
    smi: Option<Smi>,
    start: Instant,
    rng: Rng,
    threads: usize,
    stopped: bool,
    skipped: usize,
}

impl Sweep {
    pub fn new(gpu: Gpu, opts: Options, plan: Plan) -> Sweep {
        let json = opts.json.as_ref().and_then(|p| match std::fs::File::create(p) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("--json {p}: {e}; JSON goes to stdout only");
                None
            }
        });
        let smi = if opts.smi { Smi::start() } else { None };
        let rng = Rng::new(opts.seed);
        Sweep {
            gpu,
            problems: HashMap::new(),
            poison: None,
            helpers: HashMap::new(),
            aux: HashMap::new(),
            records: Vec::new(),
            json,
            smi,
            start: Instant::now(),
            rng,
            threads: std::thread::available_parallelism().map_or(4, |n| n.get()),
            stopped: false,
            skipped: 0,
            opts,
            plan,
        }
    }

    fn emit(&mut self, v: Value) {
        let line = v.to_string();
        if !self.opts.quiet {
            println!("{line}");
        }
        if let Some(f) = self.json.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }

    /// Runs the phases within the budget; prints and returns the outcome.
    pub fn run(&mut self) -> Outcome {
        let g = &self.gpu;
        let header = json!({
            "kind": "adapter",
            "name": g.info.name, "driver": g.info.driver, "driver_info": g.info.driver_info,
            "subgroup": g.sg, "coop": g.coop_props,
            "max_workgroup_storage": g.limits.max_compute_workgroup_storage_size,
            "max_invocations": g.limits.max_compute_invocations_per_workgroup,
            "timestamp_period_ns": g.period_ns, "seed": self.opts.seed, "budget_s": self.opts.budget_s,
            "plan": self.opts.plan_name, "filter": self.opts.filter, "smi": self.smi.is_some(),
        });
        self.emit(header);
        eprintln!("seed {} (replay with --seed {})", self.opts.seed, self.opts.seed);
        let mut cum = 0.0;
        for (name, share) in PHASES {
            cum += share;
            if !self.opts.phases.iter().any(|p| p == name) || self.stopped {
                continue;
            }
            let deadline = self.start + Duration::from_secs_f64(self.opts.budget_s * cum);
            let t0 = Instant::now();
            eprintln!("== phase {name} (until {:.0} s)", (deadline - self.start).as_secs_f64());
            match name {
                "edge" => self.phase_edge(deadline),
                "structure" => self.phase_structure(deadline),
                "tuning" => self.phase_tuning(deadline),
                "shapes" => self.phase_shapes(deadline),
                _ => self.phase_split(deadline),
            }
            let n = self.records.iter().filter(|r| r.phase == name).count();
            self.emit(json!({"kind": "phase", "phase": name, "measured": n, "seconds": t0.elapsed().as_secs_f64()}));
        }
        self.summary()
    }

    fn wanted(&self, k: &Kernel, case: &Case) -> bool {
        let label = format!("{} {}", k.label(), case.label());
        self.opts.filter.iter().all(|f| label.contains(f.as_str()))
    }

    /// A kernel of design `d` in `layout` as this sweep builds it.
    fn kernel(&self, d: Design, layout: Layout) -> Kernel {
        Kernel { sg: self.gpu.sg, ..Kernel::new(d, layout) }
    }

    /// A kernel of design `d` for `case`: unmasked where the design tiles it, else masked.
    fn kernel_for(&self, d: Design, case: &Case, ksplit: u32, epi: Epilogue) -> Kernel {
        let mut k = Kernel { ksplit, epi, ..self.kernel(d, case.layout) };
        if k.supports(&case.shape()).is_err() {
            k.masked = true;
        }
        k
    }

    // ---- phases --------------------------------------------------------------------------

    fn phase_edge(&mut self, deadline: Instant) {
        let (m, k, n) = self.plan.edge;
        for mut kern in self.plan.edge_kernels.clone() {
            kern.sg = self.gpu.sg;
            self.measure("edge", kern, Case::new(m, k, n, kern.layout), deadline);
        }
    }

    fn phase_structure(&mut self, deadline: Instant) {
        for d in self.plan.structures.clone() {
            for case in self.plan.ranking.clone() {
                let k = self.kernel(d, case.layout);
                self.measure("structure", k, case, deadline);
            }
        }
    }

    /// Designs ranked by the geometric mean of TFLOP/s over `cases` (all must be correct).
    fn ranked(&self, designs: &[Design], cases: &[Case]) -> Vec<(Design, f64)> {
        let mut out: Vec<(Design, f64)> = designs
            .iter()
            .filter_map(|d| {
                let mut logs = 0.0;
                for c in cases {
                    let r = self.records.iter().find(|r| {
                        r.kernel.d == *d
                            && r.case == *c
                            && r.kernel.ksplit == 1
                            && r.kernel.epi == Epilogue::Store
                            && !r.kernel.masked
                    })?;
                    if !r.ok || !r.tflops.is_finite() {
                        return None;
                    }
                    logs += r.tflops.ln();
                }
                Some((*d, (logs / cases.len() as f64).exp()))
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    /// Every design measured so far, f16 or split.
    fn tested_designs(&self, split: bool) -> Vec<Design> {
        let mut v: Vec<Design> = Vec::new();
        for r in &self.records {
            if r.kernel.d.prec.split() == split && r.kernel.d.prec != Prec::Cast && !v.contains(&r.kernel.d) {
                v.push(r.kernel.d);
            }
        }
        v
    }

    fn phase_tuning(&mut self, deadline: Instant) {
        let ranking = self.plan.ranking.clone();
        let top: Vec<Design> =
            self.ranked(&self.plan.structures, &ranking).into_iter().take(self.plan.tune).map(|x| x.0).collect();
        eprintln!("tuning around: {}", top.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "));
        // Variation-major: the most informative variations of every top design first.
        let vars: Vec<Vec<Design>> = top.iter().map(plan::variations).collect();
        let longest = vars.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            for vs in &vars {
                let Some(&v) = vs.get(i) else { continue };
                for case in &ranking {
                    let k = self.kernel(v, case.layout);
                    self.measure("tuning", k, *case, deadline);
                }
            }
        }
    }

    /// The best f16 designs so far (the first structure if nothing ranked).
    fn best_f16(&self, n: usize) -> Vec<Design> {
        let designs = self.tested_designs(false);
        let mut top: Vec<Design> = self.ranked(&designs, &self.plan.ranking).into_iter().take(n).map(|x| x.0).collect();
        if top.is_empty() {
            top.extend(self.plan.structures.first().copied());
        }
        top
    }

    fn phase_shapes(&mut self, deadline: Instant) {
        let top = self.best_f16(self.plan.top_f16);
        eprintln!("shapes for: {}", top.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "));
        let cases = self.plan.all.clone();
        for d in &top {
            for case in &cases {
                for ks in plan::ksplits(case) {
                    let k = self.kernel_for(*d, case, ks, Epilogue::Store);
                    self.measure("shapes", k, *case, deadline);
                }
            }
        }
        // The best design's other forms: accumulate epilogues, masking cost, fused cast.
        let Some(&best) = top.first() else { return };
        let mut specials = vec![];
        for case in self.plan.acc_cases.clone() {
            for epi in [Epilogue::AccInit, Epilogue::AccEnd] {
                specials.push((self.kernel_for(best, &case, 1, epi), case));
            }
        }
        let square = self.plan.square;
        let mut masked = self.kernel_for(best, &square, 1, Epilogue::Store);
        masked.masked = true;
        specials.push((masked, square));
        for case in self.plan.cast_cases.clone() {
            specials.push((self.kernel_for(best.with_prec(Prec::Cast), &case, 1, Epilogue::Store), case));
        }
        // The winner on the edge problem (masked), every layout.
        let (m, kk, n) = self.plan.edge;
        for layout in Layout::ALL {
            let case = Case::new(m, kk, n, layout);
            specials.push((self.kernel_for(best, &case, 1, Epilogue::Store), case));
        }
        for (k, case) in specials {
            self.measure("shapes", k, case, deadline);
        }
    }

    fn phase_split(&mut self, deadline: Instant) {
        let ranking = self.plan.ranking.clone();
        let designs = self.plan.split_structures.clone();
        for d in &designs {
            for case in &ranking {
                let k = self.kernel(*d, case.layout);
                self.measure("split", k, *case, deadline);
            }
        }
        let top: Vec<Design> =
            self.ranked(&designs, &ranking).into_iter().take(self.plan.top_split).map(|x| x.0).collect();
        eprintln!("split shapes for: {}", top.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "));
        for d in top {
            for case in self.plan.split_all.clone() {
                for ks in plan::ksplits(&case) {
                    let k = self.kernel_for(d, &case, ks, Epilogue::Store);
                    self.measure("split", k, case, deadline);
                }
            }
        }
    }

    // ---- one measurement -------------------------------------------------------------------

    fn problem(&mut self, case: Case) -> &mut Problem {
        if !self.problems.contains_key(&case) {
            let t0 = Instant::now();
            let shape = case.shape();
            let ops = Operands::random(shape, case.layout, &mut self.rng, 1.0);
            let to16 = |x: &[f32]| -> Vec<u8> { x.iter().flat_map(|v| f32_to_f16(*v).to_le_bytes()).collect() };
            let g = &self.gpu;
            let a16 = g.storage(&to16(&ops.a), "a16");
            let b16 = g.storage(&to16(&ops.b), "b16");
            let c = g.empty(
                4 * shape.c_len() as u64,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                "c",
            );
            let c0 = g.storage(bytemuck::cast_slice(&ops.c0), "c0");
            let readback = g.empty(
                4 * shape.c_len() as u64,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                "readback",
            );
            let pts = sample_points(&shape, 4096, &mut self.rng);
            eprintln!("  data for {} ready in {:.2} s", case.label(), t0.elapsed().as_secs_f64());
            self.problems.insert(
                case,
                Problem { ops, a16, b16, a32: None, b32: None, c, c0, readback, hilo: HashMap::new(), pts },
            );
        }
        self.problems.get_mut(&case).unwrap()
    }

    /// A poison buffer of at least `bytes`.
    fn poison(&mut self, bytes: u64) -> &wgpu::Buffer {
        if self.poison.as_ref().is_none_or(|p| p.1 < bytes) {
            let words = (bytes / 4).max(4) as usize;
            let data = vec![POISON; words];
            let b = self.gpu.storage(bytemuck::cast_slice(&data), "poison");
            self.poison = Some((b, 4 * words as u64));
        }
        &self.poison.as_ref().unwrap().0
    }

    fn helper(
        &mut self,
        key: String,
        src: String,
        entry: &str,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline, String> {
        if let Some(p) = self.helpers.get(&key) {
            return Ok(p.clone());
        }
        let (p, _) = self.gpu.pipeline(&src, entry, constants, true)?;
        self.helpers.insert(key, p.clone());
        Ok(p)
    }

    fn measure(&mut self, phase: &'static str, k: Kernel, case: Case, deadline: Instant) {
        if self.stopped || !self.wanted(&k, &case) {
            return;
        }
        if Instant::now() > deadline {
            self.skipped += 1;
            return;
        }
        if self.records.iter().any(|r| r.kernel == k && r.case == case) {
            return;
        }
        if let Err(e) = k.supports(&case.shape()) {
            eprintln!("  skip {} on {}: {e}", k.label(), case.label());
            return;
        }
        let shape = case.shape();
        let mut line = json!({
            "kind": "result", "phase": phase, "design": k.d.name(), "label": k.label(),
            "layout": case.layout.name(), "m": case.m, "k": case.k, "n": case.n, "shape": shape.label(),
            "prec": k.d.prec.name(), "bm": k.d.bm, "bn": k.d.bn, "bk": k.d.bk, "sgm": k.d.sgm, "sgn": k.d.sgn,
            "sg_tile": format!("{}x{}", k.d.tm() * 16, k.d.tn() * 16), "invocations": k.threads(),
            "staging": k.d.staging.name(), "pad": k.d.pad, "load": format!("{:?}", k.d.load), "dims": k.d.dims.name(),
            "checked": k.d.checked, "swizzle": k.d.swizzle, "fragpf": k.d.fragpf, "epilogue": k.epi.name(),
            "masked": k.masked, "ksplit": k.ksplit, "wg_mem_bytes": k.wg_mem_bytes(), "est_regs": k.est_regs(),
            "t_s": self.start.elapsed().as_secs_f64(),
        });
        let mut record = Record { phase, kernel: k, case, ok: false, tflops: f64::NAN, err: f64::NAN };
        let outcome = self.measure_inner(&k, case, &mut line);
        match outcome {
            Ok((ok, tflops, err)) => {
                record.ok = ok;
                record.tflops = tflops;
                record.err = err;
            }
            Err(e) => {
                if line.get("status").is_none() {
                    line["status"] = json!("failed");
                }
                line["error_message"] = json!(e.chars().take(3000).collect::<String>());
            }
        }
        let errs: Vec<String> = self.gpu.errors.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        if !errs.is_empty() {
            line["uncaptured_errors"] = json!(errs);
        }
        if self.gpu.lost.load(Ordering::SeqCst) {
            line["device_lost"] = json!(true);
            self.stopped = true;
        }
        eprintln!(
            "  {:<9} {:<70} {:<22} {:>8} {}",
            phase,
            k.label(),
            case.label(),
            if record.tflops.is_finite() { format!("{:.1}", record.tflops) } else { "-".into() },
            line["status"].as_str().unwrap_or("?")
        );
        self.emit(line);
        self.records.push(record);
    }

    /// Builds, checks and times; fills `line`; returns (correct, TFLOP/s, error).
    fn measure_inner(&mut self, k: &Kernel, case: Case, line: &mut Value) -> Result<(bool, f64, f64), String> {
        let limits = &self.gpu.limits;
        k.check(limits.max_compute_workgroup_storage_size, limits.max_compute_invocations_per_workgroup)
            .map_err(|e| format!("not buildable here: {e}"))?;
        let shape = case.shape();
        k.supports(&shape).map_err(|e| format!("unsupported problem: {e}"))?;
        let src = k.wgsl(Some(&shape))?;
        let (pipeline, build_ms) = self
            .gpu
            .pipeline(&src, "gemm", &k.overrides(&shape), k.d.checked)
            .inspect_err(|_| line["status"] = json!("build_failed"))?;
        line["build_ms"] = json!(build_ms);
        self.problem(case);
        let passes = self.passes(k, case, pipeline)?;
        // Correctness: poison the outputs (or load C0), one run, read back, compare.
        let c_bytes = 4 * shape.c_len() as u64;
        let part_bytes = 4 * k.part_len(&shape) as u64;
        let scratch_bytes = 4 * k.scratch_len(&shape) as u64;
        let hilo_bytes = 2 * shape.a_len(case.layout).max(shape.b_len(case.layout)) as u64;
        self.poison(c_bytes.max(part_bytes).max(scratch_bytes).max(hilo_bytes));
        let (part, scratch) = self.aux_buffers(k, case);
        let prob = &self.problems[&case];
        let poison = &self.poison.as_ref().unwrap().0;
        let g = &self.gpu;
        let mut enc = g.device.create_command_encoder(&Default::default());
        if k.epi.accumulates() {
            enc.copy_buffer_to_buffer(&prob.c0, 0, &prob.c, 0, c_bytes);
        } else {
            enc.copy_buffer_to_buffer(poison, 0, &prob.c, 0, c_bytes);
        }
        if let Some(p) = &part {
            enc.copy_buffer_to_buffer(poison, 0, p, 0, part_bytes);
        }
        if let Some(s) = &scratch {
            enc.copy_buffer_to_buffer(poison, 0, s, 0, scratch_bytes);
        }
        for hl in prob.hilo.values() {
            for b in hl {
                enc.copy_buffer_to_buffer(poison, 0, b, 0, b.size());
            }
        }
        let pilot = self.time(enc, &passes, 0, 1, Some((&prob.c, &prob.readback, c_bytes)))?;
        let t_pilot = median(&pilot.total);
        let got: Vec<f32> = bytemuck::cast_slice(&g.read(&prob.readback, c_bytes)?).to_vec();
        let before: Vec<f32> =
            if k.epi.accumulates() { prob.ops.c0.clone() } else { vec![f32::from_bits(POISON); shape.c_len()] };
        let ch = check(&prob.ops, &got, &before, k.epi.accumulates(), &prob.pts, self.threads);
        let tol = k.d.prec.tolerance(shape.k);
        let ok = ch.ok(tol);
        line["error"] = json!(ch.max_err);
        line["tolerance"] = json!(tol);
        line["samples"] = json!(ch.samples);
        line["nonfinite"] = json!(ch.nonfinite);
        line["pad_changed"] = json!(ch.pad_changed);
        line["pilot_ns"] = json!(t_pilot);
        if !ok {
            line["status"] = json!("wrong");
            line["worst"] = json!(ch.worst);
            return Ok((false, f64::NAN, ch.max_err));
        }
        // Timing: sustained warm-up in the same submission, then timed repeats.
        let warm_target = self.opts.warmup_ms * 1e6;
        let warm = ((4.0 * warm_target / t_pilot).ceil() as u32).clamp(3, 4000);
        let npass = passes.len() as u32;
        let reps = ((60e6 / t_pilot).ceil() as u32).clamp(20, 400).min(MAX_QUERIES / (2 * npass));
        let enc = g.device.create_command_encoder(&Default::default());
        let t = self.time(enc, &passes, warm, reps, None)?;
        let med = median(&t.total);
        let flops = shape.flops();
        let tflops = flops / med / 1e3;
        let half = t.total.len() / 2;
        let drift = median(&t.total[half..]) / median(&t.total[..half]) - 1.0;
        line["status"] = json!("ok");
        line["ns_median"] = json!(med);
        line["ns_min"] = json!(t.total.iter().copied().fold(f64::INFINITY, f64::min));
        line["ns_pass_medians"] = json!(t.per_pass.iter().map(|p| median(p)).collect::<Vec<_>>());
        line["tflops"] = json!(tflops);
        if npass > 1 {
            // The hi/lo split pass is timed with the product; this is the product alone.
            line["tflops_gemm_only"] = json!(flops / median(t.per_pass.last().unwrap()) / 1e3);
        }
        line["reps"] = json!(reps);
        line["warmup_dispatches"] = json!(t.warm);
        line["drift"] = json!(drift);
        if let Some(smi) = &self.smi
            && let Some((mhz, min, w)) = smi.window(t.window.0, t.window.1)
        {
            line["sm_mhz"] = json!(mhz);
            line["sm_mhz_min"] = json!(min);
            line["power_w_max"] = json!(w);
        }
        Ok((true, tflops, ch.max_err))
    }

    /// Split-K partials and edge scratch of a kernel on a problem (created on demand, shared
    /// by every kernel that needs the same size).
    fn aux_buffers(&mut self, k: &Kernel, case: Case) -> (Option<wgpu::Buffer>, Option<wgpu::Buffer>) {
        let shape = case.shape();
        let part = (k.part_len(&shape) > 0).then(|| self.aux(4 * k.part_len(&shape) as u64));
        let scratch = (k.scratch_len(&shape) > 0).then(|| self.aux(4 * k.scratch_len(&shape) as u64));
        (part, scratch)
    }

    fn aux(&mut self, bytes: u64) -> wgpu::Buffer {
        let g = &self.gpu;
        self.aux
            .entry(bytes)
            .or_insert_with(|| g.empty(bytes, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST, "aux"))
            .clone()
    }

    /// The passes of a kernel on a problem: [hi/lo split] then the product (+ reduction).
    fn passes(&mut self, k: &Kernel, case: Case, pipeline: wgpu::ComputePipeline) -> Result<Vec<Vec<Disp>>, String> {
        let shape = case.shape();
        let p = k.d.prec;
        // Inputs of the right kind.
        if p.f32_inputs() || p.presplit() {
            let prob = self.problems.get(&case).unwrap();
            if prob.a32.is_none() {
                let a32 = self.gpu.storage(bytemuck::cast_slice(&prob.ops.a), "a32");
                let b32 = self.gpu.storage(bytemuck::cast_slice(&prob.ops.b), "b32");
                let prob = self.problems.get_mut(&case).unwrap();
                prob.a32 = Some(a32);
                prob.b32 = Some(b32);
            }
        }
        let scale = p.lo_scale();
        let mut out = Vec::new();
        if p.presplit() {
            let key = scale.to_bits();
            if !self.problems[&case].hilo.contains_key(&key) {
                let (al, bl) = (shape.a_len(case.layout) as u64 * 2, shape.b_len(case.layout) as u64 * 2);
                let mk = |n: u64| self.gpu.empty(n, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST, "hilo");
                let bufs = [mk(al), mk(al), mk(bl), mk(bl)];
                self.problems.get_mut(&case).unwrap().hilo.insert(key, bufs);
            }
            let mut pass = Vec::new();
            for (src_is_a, len) in [(true, shape.a_len(case.layout)), (false, shape.b_len(case.layout))] {
                let n4 = (len / 4) as u32;
                let pipe =
                    self.helper(format!("split{scale}-{n4}"), split_wgsl(scale), "split", &[("SPLIT_N4", n4 as f64)])?;
                let prob = &self.problems[&case];
                let hl = &prob.hilo[&key];
                let (src, hi, lo) = if src_is_a {
                    (prob.a32.as_ref().unwrap(), &hl[0], &hl[1])
                } else {
                    (prob.b32.as_ref().unwrap(), &hl[2], &hl[3])
                };
                let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipe.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: hi.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 2, resource: lo.as_entire_binding() },
                    ],
                });
                pass.push(Disp { pipeline: pipe, bind, grid: grid_1d(n4) });
            }
            out.push(pass);
        }
        let (part, scratch) = self.aux_buffers(k, case);
        let uniform = (k.d.dims == Dims::Uniform).then(|| {
            use wgpu::util::DeviceExt;
            self.gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("dims"),
                contents: bytemuck::cast_slice(&k.uniform_words(&shape)),
                usage: wgpu::BufferUsages::UNIFORM,
            })
        });
        let prob = &self.problems[&case];
        let key = scale.to_bits();
        let entries: Vec<wgpu::BindGroupEntry> = k
            .bindings()
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let buf = match b {
                    Binding::A => {
                        if p.f32_inputs() {
                            prob.a32.as_ref().unwrap()
                        } else {
                            &prob.a16
                        }
                    }
                    Binding::B => {
                        if p.f32_inputs() {
                            prob.b32.as_ref().unwrap()
                        } else {
                            &prob.b16
                        }
                    }
                    Binding::AHi => &prob.hilo[&key][0],
                    Binding::ALo => &prob.hilo[&key][1],
                    Binding::BHi => &prob.hilo[&key][2],
                    Binding::BLo => &prob.hilo[&key][3],
                    Binding::Out => part.as_ref().unwrap_or(&prob.c),
                    Binding::Scratch => scratch.as_ref().unwrap(),
                    Binding::Dims => uniform.as_ref().unwrap(),
                };
                wgpu::BindGroupEntry { binding: i as u32, resource: buf.as_entire_binding() }
            })
            .collect();
        let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut pass = vec![Disp { pipeline, bind, grid: k.grid(&shape) }];
        if k.ksplit > 1 {
            let n4 = (shape.c_len() / 4) as u32;
            let acc = k.epi.accumulates();
            let pipe = self.helper(
                format!("reduce{}-{acc}-{n4}-{}-{}", k.ksplit, shape.ldc, shape.n),
                reduce_wgsl(k.ksplit, acc),
                "reduce",
                &[("RED_N4", n4 as f64), ("RED_LDC", shape.ldc as f64), ("RED_NCOL", shape.n as f64)],
            )?;
            let prob = &self.problems[&case];
            let bind = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipe.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: part.as_ref().unwrap().as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: prob.c.as_entire_binding() },
                ],
            });
            pass.push(Disp { pipeline: pipe, bind, grid: grid_1d(n4) });
        }
        out.push(pass);
        Ok(out)
    }

    /// Records `warm` untimed repeats (one pass) and `reps` timed repeats (a pass each per
    /// element of `passes`) into `enc` after what it holds, submits, waits, reads timestamps.
    fn time(
        &self,
        mut enc: wgpu::CommandEncoder,
        passes: &[Vec<Disp>],
        warm: u32,
        reps: u32,
        copy: Option<(&wgpu::Buffer, &wgpu::Buffer, u64)>,
    ) -> Result<Timing, String> {
        let g = &self.gpu;
        let np = passes.len() as u32;
        let nq = 2 * reps * np;
        if warm > 0 {
            let mut cp =
                enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("warm-up"), timestamp_writes: None });
            for _ in 0..warm {
                for pass in passes {
                    for d in pass {
                        cp.set_pipeline(&d.pipeline);
                        cp.set_bind_group(0, &d.bind, &[]);
                        cp.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
                    }
                }
            }
        }
        for r in 0..reps {
            for (pi, pass) in passes.iter().enumerate() {
                let q = 2 * (r * np + pi as u32);
                let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("timed"),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &g.queries,
                        beginning_of_pass_write_index: Some(q),
                        end_of_pass_write_index: Some(q + 1),
                    }),
                });
                for d in pass {
                    cp.set_pipeline(&d.pipeline);
                    cp.set_bind_group(0, &d.bind, &[]);
                    cp.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
                }
            }
        }
        if let Some((src, dst, bytes)) = copy {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
        }
        let qbytes = 8 * nq as u64;
        let resolve = g.empty(qbytes, wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC, "resolve");
        let qread = g.empty(qbytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, "qread");
        enc.resolve_query_set(&g.queries, 0..nq, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &qread, 0, qbytes);
        let scope = g.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let t0 = Instant::now();
        let idx = g.queue.submit([enc.finish()]);
        let err = pollster::block_on(scope.pop());
        if let Some(e) = err {
            return Err(format!("submission: {e}"));
        }
        g.wait(idx, 120)?;
        let t1 = Instant::now();
        let raw = g.read(&qread, qbytes)?;
        let ts: &[u64] = bytemuck::cast_slice(&raw);
        let mut per_pass = vec![Vec::new(); np as usize];
        let mut total = Vec::new();
        for r in 0..reps as usize {
            let mut sum = 0.0;
            for p in 0..np as usize {
                let q = 2 * (r * np as usize + p);
                let ns = ts[q + 1].wrapping_sub(ts[q]) as f64 * g.period_ns;
                per_pass[p].push(ns);
                sum += ns;
            }
            total.push(sum);
        }
        Ok(Timing { total, per_pass, window: (t0, t1), warm })
    }

    // ---- summary ---------------------------------------------------------------------------

    fn summary(&mut self) -> Outcome {
        let mut cases: Vec<Case> = Vec::new();
        for r in &self.records {
            if !cases.contains(&r.case) {
                cases.push(r.case);
            }
        }
        println!("\n# Ranked results (TFLOP/s = 2·M·N·K / median GPU time; error = max |c − Σab| / Σ|a||b|)");
        let mut lines = Vec::new();
        for case in &cases {
            for split in [false, true] {
                let mut rs: Vec<&Record> = self
                    .records
                    .iter()
                    .filter(|r| r.case == *case && r.kernel.d.prec.split() == split && r.ok)
                    .collect();
                if rs.is_empty() {
                    continue;
                }
                rs.sort_by(|a, b| b.tflops.total_cmp(&a.tflops));
                println!("\n## {} ({})", case.label(), if split { "f32-accurate hi/lo split" } else { "f16 operands" });
                println!("| rank | TFLOP/s | error | kernel |\n|---|---|---|---|");
                for (i, r) in rs.iter().take(10).enumerate() {
                    println!("| {} | {:.1} | {:.1e} | {} |", i + 1, r.tflops, r.err, r.kernel.label());
                }
                lines.push(json!({
                    "kind": "summary", "case": case.label(), "layout": case.layout.name(),
                    "m": case.m, "k": case.k, "n": case.n, "class": if split { "split" } else { "f16" },
                    "ranked": rs.iter().take(10).map(|r| json!({"label": r.kernel.label(), "tflops": r.tflops, "error": r.err})).collect::<Vec<_>>(),
                }));
            }
        }
        let failed: Vec<String> =
            self.records.iter().filter(|r| !r.ok).map(|r| format!("{} {}", r.kernel.label(), r.case.label())).collect();
        println!(
            "\n{} measurements, {} correct, {} not (build failure or wrong result), {} skipped for time; {:.0} s",
            self.records.len(),
            self.records.iter().filter(|r| r.ok).count(),
            failed.len(),
            self.skipped,
            self.start.elapsed().as_secs_f64()
        );
        for f in failed.iter().take(50) {
            println!("  not ok: {f}");
        }
        for l in lines {
            self.emit(l);
        }
        let end = json!({"kind": "end", "measured": self.records.len(), "correct": self.records.iter().filter(|r| r.ok).count(),
            "skipped": self.skipped, "seconds": self.start.elapsed().as_secs_f64(), "device_lost": self.stopped});
        self.emit(end);
        Outcome {
            measured: self.records.len(),
            correct: self.records.iter().filter(|r| r.ok).count(),
            not_ok: failed,
            skipped: self.skipped,
            device_lost: self.stopped,
        }
    }
}
