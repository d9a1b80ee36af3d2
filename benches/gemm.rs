//! Matrix products through `kernels::gemm`, and the tuner of its f16 core.
//!
//! ```text
//! gemm                       every core the adapter runs, at 4096³ and the trainer's shapes
//! gemm --tune [--budget-s S] [--table PATH] [--quick]
//!                            searches the f16 core's block shapes (F16Config) and splits on
//!                            this adapter; writes the tuning table's lines to PATH
//! gemm --configs LIST [--table PATH]
//!                            the f16 core at every shape of the bench with the plan's own block
//!                            shape and with each of LIST (`bm,bn,bk,tm,tn,prefetch,group,wg`
//!                            separated by spaces; the plan's split kept), the fastest of each
//!                            shape as a tuning-table line to PATH
//! gemm --fused               the fused epilogues (`gemm::gemm_swiglu`, `gemm::gemm_rope_qkv`) at
//!                            the trainer's shapes against the plain product alone and followed by
//!                            the separate kernel they replace
//! ```
//! Each measurement runs the library's own plan: a check on fresh random inputs first (the
//! largest error of 256 sampled outputs against float64, relative to Σ|a||b|, must be within
//! f32 rounding of K products; a block shape that fails is reported and never chosen), then a
//! sustained warm-up and the timed repeats in one submission (the H200's SM clock falls from
//! 1980 to 345 MHz between short bursts), GPU time from timestamps, median of the repeats.
//! TFLOP/s = 2·M·N·K / t. JSON lines go to stdout and to `KERNELS_BENCH_JSON` when set.
//! Shapes are M×N×K of C [M, N] = op(A) [M, K] · op(B) [K, N]; orientation `nt` is X·Wᵀ (B
//! stored [N, K]), `nn` dY·W, `tn` the weight gradient Xᵀ·B (A stored [K, M]). On a CPU adapter
//! the shapes are small (a smoke test of the bench itself).

use kernels::Gpu;
use kernels::gemm::{self, Core, Elem, F16Config, Gemm, GemmPlan, GemmWorkspace, Mat, Precision};
use kernels::ops::{self, F16x4};
use std::io::Write;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Deterministic values in [-1, 1) (xorshift).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// One product's inputs on the host and the GPU, and its sampled reference.
struct Problem {
    gemm: Gemm,
    a32: Option<kernels::Buffer<f32>>,
    b32: Option<kernels::Buffer<f32>>,
    a16: Option<kernels::Buffer<F16x4>>,
    b16: Option<kernels::Buffer<F16x4>>,
    /// (row, column, Σ a·b, Σ |a·b|) of the sampled outputs.
    samples: Vec<(usize, usize, f64, f64)>,
}

impl Problem {
    fn new(gpu: &Gpu, gemm: Gemm, seed: u64) -> Problem {
        let Gemm { m, n, k, a_t, b_t, .. } = gemm;
        let (ar, ac) = if a_t { (k, m) } else { (m, k) };
        let (br, bc) = if b_t { (n, k) } else { (k, n) };
        let mut a = random(ar * ac, seed);
        let mut b = random(br * bc, seed + 1);
        let half = gemm.a == Elem::F16;
        if half {
            for v in a.iter_mut().chain(b.iter_mut()) {
                *v = kernels::f16::from_f32(*v).to_f32();
            }
        }
        let at = |i: usize, l: usize| (if a_t { a[l * ac + i] } else { a[i * ac + l] }) as f64;
        let bt = |l: usize, j: usize| (if b_t { b[j * bc + l] } else { b[l * bc + j] }) as f64;
        let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut next = |bound: usize| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % bound as u64) as usize
        };
        let mut samples = Vec::new();
        for t in 0..256 {
            // The corners first (edge blocks), then anywhere.
            let (i, j) = match t {
                0 => (0, 0),
                1 => (m - 1, n - 1),
                2 => (m - 1, 0),
                3 => (0, n - 1),
                _ => (next(m), next(n)),
            };
            let (mut sum, mut abs) = (0.0, 0.0);
            for l in 0..k {
                let p = at(i, l) * bt(l, j);
                sum += p;
                abs += p.abs();
            }
            samples.push((i, j, sum, abs));
        }
        let mut pr = Problem { gemm, a32: None, b32: None, a16: None, b16: None, samples };
        if half {
            pr.a16 = Some(gpu.upload(&ops::to_f16x4(&a, ar, ac)).unwrap());
            pr.b16 = Some(gpu.upload(&ops::to_f16x4(&b, br, bc)).unwrap());
        } else {
            pr.a32 = Some(gpu.upload(&a).unwrap());
            pr.b32 = Some(gpu.upload(&b).unwrap());
        }
        pr
    }

    fn mats(&self) -> (Mat<'_>, Mat<'_>) {
        let Gemm { m, n, k, a_t, b_t, .. } = self.gemm;
        let (ar, ac) = if a_t { (k, m) } else { (m, k) };
        let (br, bc) = if b_t { (n, k) } else { (k, n) };
        let (a, b) = match (&self.a32, &self.b32, &self.a16, &self.b16) {
            (Some(a), Some(b), _, _) => (Mat::f32(a, ar, ac), Mat::f32(b, br, bc)),
            (_, _, Some(a), Some(b)) => (Mat::f16(a, ar, ac), Mat::f16(b, br, bc)),
            _ => unreachable!(),
        };
        (if a_t { a.t() } else { a }, if b_t { b.t() } else { b })
    }
}

struct Measured {
    ns: f64,
    tflops: f64,
    /// Largest |c − Σab| / Σ|a||b| of the samples.
    error: f64,
    /// Whether it is within f32 rounding (γ_{K+parts+3}) of the f16-rounded operands' product, or
    /// 1e-6 for the split core.
    ok: bool,
}

/// Checks `plan` on `pr`, then times it after a warm-up of about `warm_s` seconds of the same work.
fn measure(gpu: &Gpu, pr: &Problem, plan: &GemmPlan, warm_s: f64, repeats: usize) -> Result<Measured, String> {
    let g = *plan.gemm();
    let (m, n, k) = (g.m, g.n, g.k);
    let mut c = gpu.zeros::<f32>(m * n).map_err(|e| e.to_string())?;
    let mut ws = GemmWorkspace::new(gpu, &[plan]).map_err(|e| e.to_string())?;
    let (a, b) = pr.mats();
    let run = |rec: &kernels::Batch<'_>, c: &mut kernels::Buffer<f32>, ws: &mut GemmWorkspace| {
        gemm::gemm(rec, plan, a, b, None, c, ws).map_err(|e| e.to_string())
    };
    // The check: one product into zeros (so Store and Accumulate give the same).
    {
        let batch = gpu.batch();
        run(&batch, &mut c, &mut ws)?;
        batch.submit().map_err(|e| e.to_string())?;
    }
    let got = c.read(gpu).map_err(|e| e.to_string())?;
    let mut error = 0.0f64;
    let mut ok = true;
    let gamma = (k + plan.parts() + 3) as f64 * 2f64.powi(-24) + if plan.core() == Core::Split { 1e-6 } else { 0.0 };
    for &(i, j, want, abs) in &pr.samples {
        let e = (got[i * n + j] as f64 - want).abs() / abs.max(1e-30);
        if e.is_nan() || e > gamma {
            ok = false;
        }
        error = error.max(if e.is_nan() { f64::INFINITY } else { e });
    }
    // The timing: warm-up and repeats in one submission.
    let flops = 2.0 * (m * n * k) as f64;
    let guess = flops / 2e14; // seconds at 200 TFLOP/s
    let cpu = gpu.report().device_type == "Cpu";
    let warm = if cpu { 1 } else { ((warm_s / guess).ceil() as usize).clamp(3, 2000) };
    let ns = time_repeats(gpu, plan.dispatches(), warm, repeats, |rec| run(rec, &mut c, &mut ws))?;
    Ok(Measured { ns, tflops: flops / ns / 1e3, error, ok })
}

fn orient(g: &Gemm) -> &'static str {
    match (g.a_t, g.b_t) {
        (false, true) => "nt",
        (false, false) => "nn",
        (true, false) => "tn",
        (true, true) => "tt",
    }
}

struct Out {
    json: Option<std::fs::File>,
    adapter: String,
}

impl Out {
    fn line(&mut self, fields: &str) {
        let l = format!("{{\"bench\":\"gemm\",\"adapter\":{:?},{fields}}}", self.adapter);
        println!("{l}");
        if let Some(f) = self.json.as_mut() {
            writeln!(f, "{l}").unwrap();
        }
    }
}

fn record(out: &mut Out, what: &str, pr: &Problem, plan: &GemmPlan, r: &Result<Measured, String>) {
    let g = pr.gemm;
    let head = format!(
        "\"what\":{what:?},\"layout\":\"{}\",\"m\":{},\"n\":{},\"k\":{},\"plan\":{:?}",
        orient(&g),
        g.m,
        g.n,
        g.k,
        plan.describe()
    );
    match r {
        Ok(x) => out.line(&format!(
            "{head},\"ns\":{:.0},\"tflops\":{:.2},\"error\":{:.3e},\"ok\":{}",
            x.ns, x.tflops, x.error, x.ok
        )),
        Err(e) => out.line(&format!("{head},\"failed\":{e:?}")),
    }
}

/// One measured product as a row of the printed table.
fn print_row(g: &Gemm, plan: &GemmPlan, x: &Measured) {
    println!(
        "| {} | {}×{}×{} | {} | {:.1} | {:.1e}{} |",
        orient(g),
        g.m,
        g.n,
        g.k,
        plan.describe(),
        x.tflops,
        x.error,
        if x.ok { "" } else { " WRONG" }
    );
}

/// A tuning table's first lines: the adapter, and which mode of this bench measured it.
fn table_head(gpu: &Gpu, mode: &str) -> Vec<String> {
    let r = gpu.report();
    vec![
        format!("# {} ({}, {}), measured by benches/gemm.rs {mode}", r.name, r.backend, r.driver),
        "# core a_t b_t m n k bm bn bk tm tn pad prefetch group wg parts".to_string(),
    ]
}

/// Prints the table's lines and writes them to `path` when given.
fn write_table(lines: &[String], path: Option<&str>) {
    println!("\n{}", lines.join("\n"));
    if let Some(path) = path {
        std::fs::write(path, lines.join("\n") + "\n").unwrap();
    }
}

/// The products measured: 4096³ and the GPT-2 shapes of the issue (MLP 3072, fused QKV 2304)
/// in each orientation, then the trainer's own (`gpt2-small`: ffn 2048, separate q/k/v, vocab 256).
fn shapes(cpu: bool) -> Vec<(bool, bool, usize, usize, usize)> {
    if cpu {
        return vec![(false, true, 256, 256, 128), (false, false, 256, 192, 160), (true, false, 192, 128, 512)];
    }
    let mut v = Vec::new();
    for (a_t, b_t) in [(false, true), (false, false)] {
        v.push((a_t, b_t, 4096, 4096, 4096));
        for (n, k) in [(2304, 768), (3072, 768), (768, 3072), (768, 768), (2048, 768), (768, 2048)] {
            v.push((a_t, b_t, 8192, n, k));
        }
    }
    v.push((true, false, 4096, 4096, 4096));
    for (m, n) in [(768, 768), (768, 3072), (3072, 768), (2304, 768), (2048, 768), (768, 2048), (256, 768)] {
        v.push((true, false, m, n, 8192));
    }
    v
}

fn bench(gpu: &Gpu, out: &mut Out) {
    let cpu = gpu.report().device_type == "Cpu";
    let has_f16 = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    let repeats = if cpu { 3 } else { 20 };
    println!("\n| layout | M×N×K | plan | TFLOP/s | error |\n|---|---|---|---|---|");
    for (i, &(a_t, b_t, m, n, k)) in shapes(cpu).iter().enumerate() {
        let mut precisions = vec![(Elem::F32, Precision::F32), (Elem::F32, Precision::F32Simt)];
        if has_f16 {
            precisions.insert(0, (Elem::F16, Precision::F16));
        }
        for (e, precision) in precisions {
            let g = Gemm::new(m, n, k).a_t(a_t).b_t(b_t).elems(e, e).precision(precision);
            let plan = g.plan(gpu).unwrap();
            if precision == Precision::F32Simt && plan.core() == Core::Simt && i > 0 && !cpu && m * n * k > 1 << 33 {
                continue; // the SIMT product at 4096³ once is enough
            }
            let pr = Problem::new(gpu, g, 7 + i as u64);
            let r = measure(gpu, &pr, &plan, 0.2, repeats);
            if let Ok(x) = &r {
                print_row(&g, &plan, x);
            }
            record(out, "bench", &pr, &plan, &r);
        }
    }
}

/// The f16 core's block shapes worth trying on an adapter with tensor cores: each subgroup (of the
/// adapter's size) takes one or two of the block's tile groups.
fn structures(subgroup: u32) -> Vec<F16Config> {
    let mut v = Vec::new();
    for wg in [256, 128, 512] {
        for (bm, bn) in [(128, 128), (128, 256), (256, 128), (128, 64), (256, 64)] {
            for bk in [32, 64] {
                for (tm, tn) in [(4, 4), (4, 2), (2, 4)] {
                    let c = F16Config { bm, bn, bk, tm, tn, pad: 8, prefetch: false, group: 1, wg };
                    let nsg = (wg / subgroup.max(1)).max(1);
                    let fits = c.groups().is_multiple_of(nsg) && c.groups() / nsg <= 2;
                    if fits
                        && [(false, true), (false, false), (true, false)]
                            .iter()
                            .all(|&(a, b)| c.validate(a, b, true).is_ok())
                    {
                        v.push(c);
                    }
                }
            }
        }
    }
    v
}

fn tune(gpu: &Gpu, out: &mut Out, budget_s: f64, table: Option<&str>, quick: bool) {
    let start = Instant::now();
    let tc = ops::on_tensor_cores(gpu, &kernels::linear::gemm16::KERNEL);
    let cpu = gpu.report().device_type == "Cpu";
    let repeats = if cpu { 2 } else { 10 };
    let warm = if quick { 0.05 } else { 0.12 };
    let left = || budget_s - start.elapsed().as_secs_f64();
    let mut cand: Vec<F16Config> = if tc {
        structures(gpu.report().subgroup_max_size)
    } else {
        vec![F16Config::default_for(false), F16Config { bn: 128, ..F16Config::default_for(false) }]
    };
    if quick {
        cand.truncate(4);
    }
    let f16 =
        |m, n, k, a_t, b_t| Gemm::new(m, n, k).a_t(a_t).b_t(b_t).elems(Elem::F16, Elem::F16).precision(Precision::F16);
    // Phase 1: every structure on a large square product; keep the fastest correct ones.
    let big = if cpu { 256 } else { 4096 };
    let pr = Problem::new(gpu, f16(big, big, big, false, true), 3);
    let mut scored: Vec<(f64, F16Config)> = Vec::new();
    for c in &cand {
        if left() < 0.0 {
            break;
        }
        let plan = match pr.gemm.plan_with(gpu, *c, 1) {
            Ok(p) => p,
            Err(e) => {
                out.line(&format!("\"what\":\"tune-structure\",\"config\":{c:?},\"failed\":{:?}", e.to_string()));
                continue;
            }
        };
        let r = measure(gpu, &pr, &plan, warm, repeats);
        record(out, "tune-structure", &pr, &plan, &r);
        if let Ok(x) = r
            && x.ok
        {
            scored.push((x.tflops, *c));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    // Phase 2: staging and launch order on the best four.
    let mut full: Vec<(f64, F16Config)> = scored.iter().take(1).cloned().collect();
    for &(_, c) in scored.iter().take(4) {
        for (prefetch, group, pad) in [(true, 1, 8), (false, 8, 8), (true, 8, 8), (false, 4, 8), (false, 8, 16)] {
            if left() < 0.0 {
                break;
            }
            let v = F16Config { prefetch, group, pad, ..c };
            let Ok(plan) = pr.gemm.plan_with(gpu, v, 1) else { continue };
            let r = measure(gpu, &pr, &plan, warm, repeats);
            record(out, "tune-staging", &pr, &plan, &r);
            if let Ok(x) = r
                && x.ok
            {
                full.push((x.tflops, v));
            }
        }
        full.push(scored.iter().find(|s| s.1 == c).copied().unwrap());
    }
    full.sort_by(|a, b| b.0.total_cmp(&a.0));
    full.dedup_by(|a, b| a.1 == b.1);
    let finalists: Vec<F16Config> = full.iter().take(if quick { 2 } else { 4 }).map(|s| s.1).collect();
    // Phase 3: every product shape and orientation over the finalists (and splits for the
    // weight gradients); the best of each is a table line.
    let mut lines = table_head(gpu, "--tune");
    for (i, &(a_t, b_t, m, n, k)) in shapes(cpu).iter().enumerate() {
        let g = f16(m, n, k, a_t, b_t);
        let pr = Problem::new(gpu, g, 100 + i as u64);
        let mut best: Option<(f64, F16Config, usize)> = None;
        let parts_list: Vec<usize> = if a_t { vec![1, 2, 4, 8] } else { vec![1] };
        for &c in &finalists {
            for &parts in &parts_list {
                if left() < 0.0 {
                    break;
                }
                let Ok(plan) = g.plan_with(gpu, c, parts) else { continue };
                let r = measure(gpu, &pr, &plan, warm, repeats);
                record(out, "tune-shape", &pr, &plan, &r);
                if let Ok(x) = r
                    && x.ok
                    && best.is_none_or(|b| x.tflops > b.0)
                {
                    best = Some((x.tflops, c, plan.parts()));
                }
            }
        }
        if let Some((t, c, parts)) = best {
            lines.push(format!("{}  # {:.1} TFLOP/s", gemm::table_line(&g, &c, parts), t));
        }
    }
    write_table(&lines, table);
    println!("tuning took {:.0} s", start.elapsed().as_secs_f64());
}

/// `bm,bn,bk,tm,tn,prefetch,group,wg` (padding 8).
fn parse_config(text: &str) -> F16Config {
    let f: Vec<u32> = text.split(',').map(|v| v.trim().parse().expect("a number in --configs")).collect();
    assert_eq!(f.len(), 8, "--configs takes bm,bn,bk,tm,tn,prefetch,group,wg: {text:?}");
    F16Config { bm: f[0], bn: f[1], bk: f[2], tm: f[3], tn: f[4], pad: 8, prefetch: f[5] != 0, group: f[6], wg: f[7] }
}

/// Every f16 shape of the bench with the plan's own choice and with each of `configs` (the
/// plan's split kept); the fastest correct one of each shape as a table line.
fn compare(gpu: &Gpu, out: &mut Out, configs: &[F16Config], table: Option<&str>) {
    let cpu = gpu.report().device_type == "Cpu";
    let repeats = if cpu { 2 } else { 20 };
    let mut lines = table_head(gpu, "--configs");
    println!("\n| layout | M×N×K | plan | TFLOP/s | error |\n|---|---|---|---|---|");
    for (i, &(a_t, b_t, m, n, k)) in shapes(cpu).iter().enumerate() {
        let g = Gemm::new(m, n, k).a_t(a_t).b_t(b_t).elems(Elem::F16, Elem::F16).precision(Precision::F16);
        let pr = Problem::new(gpu, g, 200 + i as u64);
        let Ok(own) = g.plan(gpu) else { continue };
        let mut plans = vec![own.clone()];
        for c in configs {
            if !c.covers(m, n) {
                continue;
            }
            match g.plan_with(gpu, *c, own.parts()) {
                Ok(p) => plans.push(p),
                Err(e) => out.line(&format!("\"what\":\"compare\",\"config\":{c:?},\"failed\":{:?}", e.to_string())),
            }
        }
        let mut best: Option<(f64, F16Config, usize)> = None;
        for plan in &plans {
            let r = measure(gpu, &pr, plan, 0.15, repeats);
            record(out, "compare", &pr, plan, &r);
            if let Ok(x) = &r {
                print_row(&g, plan, x);
                if let Core::F16 { config, .. } = plan.core()
                    && x.ok
                    && best.is_none_or(|b| x.tflops > b.0)
                {
                    best = Some((x.tflops, config, plan.parts()));
                }
            }
        }
        if let Some((t, c, parts)) = best {
            lines.push(format!("{}  # {:.1} TFLOP/s", gemm::table_line(&g, &c, parts), t));
        }
    }
    write_table(&lines, table);
}

/// GPU time of one repeat of `run` (`per` dispatches): `warm` repeats submitted unprofiled (a
/// batch's timestamps are bounded), then `repeats` timed in one submission right after, so the
/// GPU never idles between them; the median repeat's sum of its dispatches' durations.
fn time_repeats<E: std::fmt::Display>(
    gpu: &Gpu,
    per: usize,
    warm: usize,
    repeats: usize,
    mut run: impl FnMut(&kernels::Batch<'_>) -> Result<(), E>,
) -> Result<f64, String> {
    let warmup = gpu.batch();
    for _ in 0..warm {
        run(&warmup).map_err(|e| e.to_string())?;
    }
    warmup.submit().map_err(|e| e.to_string())?;
    let batch = gpu.profiled_batch((repeats * per) as u32).map_err(|e| e.to_string())?;
    for _ in 0..repeats {
        run(&batch).map_err(|e| e.to_string())?;
    }
    let prof = batch.submit_profiled().map_err(|e| e.to_string())?;
    if prof.dispatches.len() != repeats * per {
        return Err(format!("{} dispatches timed, {} recorded", prof.dispatches.len(), repeats * per));
    }
    Ok(median(prof.dispatches.chunks(per).map(|c| c.iter().map(|d| d.end_ns - d.start_ns).sum()).collect()))
}

/// [`time_repeats`] after a warm-up of about `warm_s` seconds (at least 3 repeats), sized by one
/// timed repeat.
fn time_warm(
    gpu: &Gpu,
    per: usize,
    warm_s: f64,
    repeats: usize,
    mut run: impl FnMut(&kernels::Batch<'_>) -> kernels::Result<()>,
) -> f64 {
    let one = time_repeats(gpu, per, 0, 1, &mut run).unwrap();
    let warm = ((warm_s * 1e9 / one.max(1.0)).ceil() as usize).clamp(3, 5000);
    time_repeats(gpu, per, warm, repeats, run).unwrap()
}

/// The fused epilogues at the trainer's shapes (gpt2-small, 8 × 1024 rows: the gate/up product
/// 8192×4096×768 with SwiGLU, the attention projection 8192×2304×768 with RoPE and Q/K/V's f16
/// copies): the plain product, the product and the separate kernel (`swiglu_gu_f16`,
/// `rope_qkv_f16`), and the fused product, each its GPU time.
fn fused(gpu: &Gpu, out: &mut Out) {
    use kernels::gemm::RopeQkv;
    let cpu = gpu.report().device_type == "Cpu";
    let (batch, seq, d, f, heads, dh) = if cpu { (2, 64, 64, 128, 2, 16) } else { (8, 1024, 768, 2048, 12, 64) };
    let rows = batch * seq;
    let repeats = if cpu { 3 } else { 20 };
    let warm_s = if cpu { 0.0 } else { 0.3 };
    println!("\n| product | M×N×K | plan | product alone | + separate kernel | fused | fused / (product + kernel) |");
    println!("|---|---|---|---|---|---|---|");
    for (i, swiglu) in [true, false].into_iter().enumerate() {
        let n = if swiglu { 2 * f } else { 3 * heads * dh };
        let g = Gemm::new(rows, n, d).elems(Elem::F16, Elem::F16).b_t(true);
        let plan = g.plan(gpu).unwrap();
        let what = if swiglu { "gate/up + SwiGLU" } else { "QKV + RoPE" };
        if !plan.fuses_epilogue() {
            println!("| {what} | {rows}×{n}×{d} | {} | (the plan does not fuse) | | | |", plan.describe());
            continue;
        }
        let pr = Problem::new(gpu, g, 40 + i as u64);
        let (a, b) = pr.mats();
        let mut c = gpu.zeros::<f32>(rows * n).unwrap();
        let mut ws = GemmWorkspace::new(gpu, &[&plan]).unwrap();
        let mut o1 = gpu.zeros::<F16x4>(ops::f16x4_len(rows, if swiglu { f } else { heads * dh })).unwrap();
        let mut o2 = gpu.zeros::<F16x4>(ops::f16x4_len(rows, heads * dh)).unwrap();
        let mut o3 = gpu.zeros::<F16x4>(ops::f16x4_len(rows, heads * dh)).unwrap();
        let u = |x: usize| x as u32;
        let rope = RopeQkv { batch, seq, heads, kv_heads: heads, head_dim: dh, pos_offset: 0, base: 10000.0 };
        let plain = time_warm(gpu, 1, warm_s, repeats, |rec| gemm::gemm(rec, &plan, a, b, None, &mut c, &mut ws));
        let separate = time_warm(gpu, 2, warm_s, repeats, |rec| {
            gemm::gemm(rec, &plan, a, b, None, &mut c, &mut ws)?;
            if swiglu {
                let p = kernels::activation::swiglu_gu_f16::RowsParams::new(u(rows), u(f));
                kernels::activation::swiglu_gu_f16(rec, &c, &mut o1, p)
            } else {
                let p =
                    kernels::rope::rope_qkv_f16::Params::new(u(batch), u(seq), u(heads), u(heads), u(dh), 0, 10000.0);
                kernels::rope::rope_qkv_f16(rec, &c, &mut o1, &mut o2, &mut o3, p)
            }
        });
        let fused = time_warm(gpu, 1, warm_s, repeats, |rec| {
            if swiglu {
                gemm::gemm_swiglu(rec, &plan, a, b, &mut c, &mut o1)
            } else {
                gemm::gemm_rope_qkv(rec, &plan, a, b, &mut c, rope, &mut o1, &mut o2, &mut o3)
            }
        });
        let us = |ns: f64| ns / 1e3;
        println!(
            "| {what} | {rows}×{n}×{d} | {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.2} |",
            plan.describe(),
            us(plain),
            us(separate),
            us(fused),
            fused / separate
        );
        out.line(&format!(
            "\"what\":\"fused\",\"epilogue\":{what:?},\"m\":{rows},\"n\":{n},\"k\":{d},\"plan\":{:?},\"plain_ns\":{plain:.0},\"separate_ns\":{separate:.0},\"fused_ns\":{fused:.0}",
            plan.describe()
        ));
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let (mut tune_mode, mut budget, mut table, mut quick) = (false, 300.0, None, false);
    let mut fused_mode = false;
    let mut configs: Option<Vec<F16Config>> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--configs" => {
                let list = args.next().expect("--configs LIST");
                configs = Some(list.split_whitespace().map(parse_config).collect());
            }
            "--tune" => tune_mode = true,
            "--fused" => fused_mode = true,
            "--quick" => quick = true,
            "--budget-s" => budget = args.next().and_then(|v| v.parse().ok()).expect("--budget-s SECONDS"),
            "--table" => table = Some(args.next().expect("--table PATH")),
            other => panic!("unknown argument {other:?} (see the doc comment of benches/gemm.rs)"),
        }
    }
    let gpu = Gpu::new().expect("a GPU adapter");
    println!("adapter: {}", gpu.report());
    let mut out = Out {
        json: std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap()),
        adapter: gpu.report().name.clone(),
    };
    if fused_mode {
        fused(&gpu, &mut out);
    } else if let Some(c) = configs {
        compare(&gpu, &mut out, &c, table.as_deref());
    } else if tune_mode {
        tune(&gpu, &mut out, budget, table.as_deref(), quick);
    } else {
        bench(&gpu, &mut out);
    }
}
