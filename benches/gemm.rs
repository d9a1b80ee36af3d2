//! SGEMM: `linear::matmul`, `matmul_t` and `matmul_at` at 4096³ and at GPT-2-small training
//! shapes (M = 8192 tokens: 768×768 one projection, 768×2304 QKV, 768×3072 and 3072×768 MLP,
//! 768×50304 the head), plus the trainer's weight-gradient path `ops::matmul_at_acc_split`
//! (layout `matmul_at_split`: the split contraction and its fixed-order sum, both dispatches
//! timed; the same as `matmul_at_acc` where the output has enough tiles).
//! GPU time from timestamps (median of the repeats after a warm-up), TFLOP/s = 2·M·N·K / t.
//! Random inputs. `cargo bench --bench gemm` (smaller shapes on a CPU adapter);
//! `KERNELS_BENCH_JSON=path` also writes JSON lines.
//!
//! Then the tensor-core products of `linear16` (`gemm16` lines): f16 operands (`matmul_t16`
//! X·Wᵀ, `matmul16` X·W, the split weight gradient `ops::weight_grad_f16`) and the f32-accurate
//! products (`ops::matmul_t_precise`, `ops::matmul_precise`, `ops::weight_grad_precise` at
//! `Precision::F32`: on tensor cores the scaled split of `kernels::precise`, its split passes
//! timed with the product), each followed by its error against float64 on 4096 sampled outputs
//! and, for X·Wᵀ, our SGEMM on the same inputs (time and error), at 4096³ and the trainer's
//! shapes, each with its shape compiled in (`ops`), the variant that ran named. These
//! are timed after a sustained warm-up in the same submission (about 0.2 s of work at 200
//! TFLOP/s; the H200's SM clock falls from 1980 to 345 MHz between short bursts) and
//! `KERNELS_BENCH_ONLY=gemm16` runs them alone.

use kernels::Gpu;
use kernels::linear::{matmul, matmul_at, matmul_t};
use std::io::Write;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn main() {
    let gpu = Gpu::new().expect("a GPU adapter");
    println!("adapter: {}", gpu.report());
    let only16 = std::env::var("KERNELS_BENCH_ONLY").is_ok_and(|v| v == "gemm16");
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());
    if !only16 {
        sgemm(&gpu, json.as_mut());
    }
    tensor_cores(&gpu, json.as_mut());
}

fn sgemm(gpu: &Gpu, mut json: Option<&mut std::fs::File>) {
    // Tensor cores through Vulkan's cooperative matrices, if the driver offers any shape (not
    // used: their inputs are f16 or narrower, outside the f32 kernels' tolerance).
    let coop = gpu.adapter().cooperative_matrix_properties();
    println!(
        "cooperative matrix shapes offered: {}",
        if coop.is_empty() {
            "none".to_string()
        } else {
            coop.iter()
                .map(|c| format!("{}x{}x{} {:?}->{:?}", c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let cpu = gpu.report().device_type == "Cpu";
    let shapes: Vec<(usize, usize, usize)> = if cpu {
        vec![(256, 256, 256), (512, 192, 576)]
    } else {
        vec![
            (4096, 4096, 4096),
            (8192, 768, 768),
            (8192, 768, 2304),
            (8192, 768, 3072),
            (8192, 3072, 768),
            (8192, 768, 50304),
        ]
    };
    let repeats = if cpu { 3 } else { 12 };
    println!("\n| kernel | M×K×N | time | TFLOP/s |");
    println!("|---|---|---|---|");
    for (m, k, n) in shapes {
        let a = gpu.upload(&random(m * k, 1)).unwrap(); // X [M,K]
        let w = gpu.upload(&random(k * n, 2)).unwrap(); // W [K,N] or [N,K]
        let b = gpu.upload(&random(m * n, 3)).unwrap(); // B [M,N]
        let mut y = gpu.zeros::<f32>(m * n).unwrap();
        let mut yt = gpu.zeros::<f32>(k * n).unwrap();
        let mut scratch = gpu.zeros::<f32>(kernels::ops::weight_grad_scratch_len(m, n, k).max(1)).unwrap();
        for name in ["matmul", "matmul_t", "matmul_at", "matmul_at_split"] {
            let batch = gpu.profiled_batch(2 * (repeats + 1)).unwrap();
            for _ in 0..=repeats {
                let p = kernels::linear::matmul::Params::new(m as u32, n as u32, k as u32);
                match name {
                    "matmul" => matmul(&batch, &a, &w, &mut y, p),
                    "matmul_t" => matmul_t(&batch, &a, &w, &mut y, p),
                    "matmul_at" => matmul_at(&batch, &a, &b, &mut yt, p),
                    _ => kernels::ops::matmul_at_acc_split(&batch, &a, &b, &mut yt, &mut scratch, m, n, k),
                }
                .unwrap();
            }
            let t = repeat_ns(batch, repeats);
            let tflops = 2.0 * m as f64 * n as f64 * k as f64 / t / 1e3;
            println!("| {name} | {m}×{k}×{n} | {:.3} ms | {tflops:.2} |", t / 1e6);
            if let Some(f) = json.as_deref_mut() {
                writeln!(
                    f,
                    "{{\"bench\":\"gemm\",\"adapter\":{:?},\"layout\":\"{name}\",\"m\":{m},\"n\":{n},\"k\":{k},\"ns\":{t},\"tflops\":{tflops}}}",
                    gpu.report().name
                )
                .unwrap();
            }
        }
    }

    // How many parts the weight-gradient contraction should be split into, per shape: the data
    // behind `ops::weight_grad_parts` (1 = the unsplit `matmul_at_acc`).
    let wgrad: Vec<(usize, usize, usize)> = if cpu {
        vec![(1024, 64, 64)]
    } else {
        vec![(8192, 256, 768), (8192, 768, 768), (8192, 768, 2048), (8192, 2048, 768), (8192, 768, 2304)]
    };
    println!("\n| weight gradient Xᵀ·B, M×K×N | parts | chosen | time | TFLOP/s |");
    println!("|---|---|---|---|---|");
    for (m, k, n) in wgrad {
        let a = gpu.upload(&random(m * k, 4)).unwrap();
        let b = gpu.upload(&random(m * n, 5)).unwrap();
        let mut yt = gpu.zeros::<f32>(k * n).unwrap();
        let mut scratch = gpu.zeros::<f32>(16 * k * n).unwrap();
        let chosen = kernels::ops::weight_grad_parts(m, n, k);
        for parts in [1usize, 2, 4, 8, 16] {
            let batch = gpu.profiled_batch(2 * (repeats + 1)).unwrap();
            for _ in 0..=repeats {
                kernels::ops::matmul_at_acc_parts(&batch, &a, &b, &mut yt, &mut scratch, m, n, k, parts).unwrap();
            }
            let t = repeat_ns(batch, repeats);
            let tflops = 2.0 * m as f64 * n as f64 * k as f64 / t / 1e3;
            let mark = if parts == chosen { "yes" } else { "" };
            println!("| {m}×{k}×{n} | {parts} | {mark} | {:.3} ms | {tflops:.2} |", t / 1e6);
            if let Some(f) = json.as_deref_mut() {
                writeln!(
                    f,
                    "{{\"bench\":\"gemm_parts\",\"adapter\":{:?},\"m\":{m},\"n\":{n},\"k\":{k},\"parts\":{parts},\"chosen\":{chosen},\"ns\":{t},\"tflops\":{tflops}}}",
                    gpu.report().name
                )
                .unwrap();
            }
        }
    }
}

/// Submits a profiled batch of `repeats + 1` equal repeats (one dispatch each, or two for a
/// split contraction) and returns the median GPU time of a repeat, the first (a warm-up) left out.
fn repeat_ns(batch: kernels::Batch<'_>, repeats: u32) -> f64 {
    let prof = batch.submit_profiled().unwrap();
    let per = prof.dispatches.len() / (repeats as usize + 1);
    median(prof.dispatches.chunks(per).skip(1).map(|c| c.iter().map(|d| d.end_ns - d.start_ns).sum()).collect())
}

/// Submits a profiled batch of `warm + repeats` equal repeats (one or more dispatches each) and
/// returns the median GPU time of a timed repeat: the first `warm` (the sustained warm-up, in
/// the same submission, so the clock is up when timing starts) left out.
fn timed_ns(batch: kernels::Batch<'_>, warm: usize, repeats: usize) -> f64 {
    let prof = batch.submit_profiled().unwrap();
    let per = prof.dispatches.len() / (warm + repeats);
    median(prof.dispatches.chunks(per).skip(warm).map(|c| c.iter().map(|d| d.end_ns - d.start_ns).sum()).collect())
}

/// The tensor-core products (`gemm16` JSON lines). Shapes M×K×N as above; the weight gradients
/// are Y [K, N] += Xᵀ·B over M tokens.
fn tensor_cores(gpu: &Gpu, mut json: Option<&mut std::fs::File>) {
    use kernels::ops::{self, Precision};
    let cpu = gpu.report().device_type == "Cpu";
    let has_f16 = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    let shapes: Vec<(usize, usize, usize)> = if cpu {
        vec![(256, 256, 256)]
    } else {
        vec![(4096, 4096, 4096), (8192, 768, 2304), (8192, 768, 3072), (8192, 3072, 768)]
    };
    // (tokens, out, in): the trainer's dW [out, in] += dYᵀ·X for the projections, QKV, MLP up
    // and down.
    let wgrad: Vec<(usize, usize, usize)> = if cpu {
        vec![(512, 128, 64)]
    } else {
        vec![(8192, 768, 768), (8192, 2304, 768), (8192, 3072, 768), (8192, 768, 3072)]
    };
    let repeats = if cpu { 3 } else { 20 };
    // About 0.2 s of sustained work at 200 TFLOP/s before timing.
    let warm_for = |flops: f64| if cpu { 1 } else { ((4e13 / flops).ceil() as usize).clamp(4, 400) };
    let variant = |k: &kernels::KernelDef| match gpu.variant_for(k) {
        Ok(v) if !v.coop.is_empty() => "coop",
        Ok(_) => "portable",
        Err(_) => "none",
    };
    println!("\n| tensor-core product | variant | M×K×N | time | TFLOP/s |");
    println!("|---|---|---|---|---|");
    let mut report = |name: &str, var: &str, (m, k, n): (usize, usize, usize), warm: usize, t: f64| {
        let tflops = 2.0 * m as f64 * n as f64 * k as f64 / t / 1e3;
        println!("| {name} | {var} | {m}×{k}×{n} | {:.3} ms | {tflops:.2} |", t / 1e6);
        if let Some(f) = json.as_deref_mut() {
            writeln!(
                f,
                "{{\"bench\":\"gemm16\",\"adapter\":{:?},\"layout\":\"{name}\",\"variant\":\"{var}\",\"m\":{m},\"n\":{n},\"k\":{k},\"warmup\":{warm},\"ns\":{t},\"tflops\":{tflops}}}",
                gpu.report().name
            )
            .unwrap();
        }
    };
    for (m, k, n) in shapes {
        let flops = 2.0 * (m * n * k) as f64;
        let warm = warm_for(flops);
        let total = warm + repeats;
        let (a_host, wt_host, w_host) = (random(m * k, 11), random(n * k, 12), random(k * n, 13));
        let a32 = gpu.upload(&a_host).unwrap(); // X [M,K]
        let wt32 = gpu.upload(&wt_host).unwrap(); // W [N,K]
        let w32 = gpu.upload(&w_host).unwrap(); // W [K,N]
        let mut y = gpu.zeros::<f32>(m * n).unwrap();
        if has_f16 {
            let a16 = gpu.upload(&ops::to_f16x4(&random(m * k, 11), m, k)).unwrap();
            let wt16 = gpu.upload(&ops::to_f16x4(&random(n * k, 12), n, k)).unwrap();
            let w16 = gpu.upload(&ops::to_f16x4(&random(k * n, 13), k, n)).unwrap();
            let batch = gpu.profiled_batch(total as u32).unwrap();
            for _ in 0..total {
                ops::matmul_t_f16(&batch, &a16, &wt16, &mut y, m, n, k).unwrap();
            }
            report(
                "matmul_t16",
                variant(&kernels::linear16::matmul_t16::KERNEL),
                (m, k, n),
                warm,
                timed_ns(batch, warm, repeats),
            );
            let batch = gpu.profiled_batch(total as u32).unwrap();
            for _ in 0..total {
                ops::matmul_f16(&batch, &a16, &w16, None, &mut y, m, n, k).unwrap();
            }
            report(
                "matmul16",
                variant(&kernels::linear16::matmul16::KERNEL),
                (m, k, n),
                warm,
                timed_ns(batch, warm, repeats),
            );
        }
        // f32-accurate: on tensor cores the scaled split (`precise`: clear, 2 × max, 2 × split,
        // the product: 6 dispatches, all timed), else the f32 SGEMM.
        let warm3 = (warm / 3).max(1);
        let mut ws = ops::PreciseWorkspace::for_product(gpu, Precision::F32, m, n, k).unwrap();
        let batch = gpu.profiled_batch(6 * (warm3 + repeats) as u32).unwrap();
        for _ in 0..warm3 + repeats {
            ops::matmul_t_precise(&batch, &a32, &wt32, &mut y, &mut ws, m, n, k, Precision::F32).unwrap();
        }
        let path = format!("{:?}", ops::product_path(gpu, Precision::F32));
        report("matmul_t_precise", &path, (m, k, n), warm3, timed_ns(batch, warm3, repeats));
        precise_error(gpu, "matmul_t_precise", &y, (m, k, n), |i, p| a_host[i * k + p], |p, j| wt_host[j * k + p]);
        let batch = gpu.profiled_batch(6 * (warm3 + repeats) as u32).unwrap();
        for _ in 0..warm3 + repeats {
            ops::matmul_precise(&batch, &a32, &w32, &mut y, &mut ws, m, n, k, Precision::F32).unwrap();
        }
        report("matmul_precise", &path, (m, k, n), warm3, timed_ns(batch, warm3, repeats));
        precise_error(gpu, "matmul_precise", &y, (m, k, n), |i, p| a_host[i * k + p], |p, j| w_host[p * n + j]);
        // Our SGEMM on the same shapes, for the comparison (`linear::matmul_t`, `linear::matmul`).
        let batch = gpu.profiled_batch((warm3 + repeats) as u32).unwrap();
        for _ in 0..warm3 + repeats {
            matmul_t(&batch, &a32, &wt32, &mut y, matmul_t::Params::new(m as u32, n as u32, k as u32)).unwrap();
        }
        report("sgemm matmul_t (same run)", "f32", (m, k, n), warm3, timed_ns(batch, warm3, repeats));
        precise_error(gpu, "sgemm matmul_t", &y, (m, k, n), |i, p| a_host[i * k + p], |p, j| wt_host[j * k + p]);
    }
    for (m, k, n) in wgrad {
        let flops = 2.0 * (m * n * k) as f64;
        let warm = warm_for(flops);
        let x32 = gpu.upload(&random(m * k, 14)).unwrap();
        let b32 = gpu.upload(&random(m * n, 15)).unwrap();
        let mut y = gpu.zeros::<f32>(k * n).unwrap();
        if has_f16 {
            let x16 = gpu.upload(&ops::to_f16x4(&random(m * k, 14), m, k)).unwrap();
            let b16 = gpu.upload(&ops::to_f16x4(&random(m * n, 15), m, n)).unwrap();
            let mut scratch = gpu.zeros::<f32>(ops::weight_grad_f16_scratch_len(m, n, k).max(1)).unwrap();
            let batch = gpu.profiled_batch(2 * (warm + repeats) as u32).unwrap();
            for _ in 0..warm + repeats {
                ops::weight_grad_f16(&batch, &x16, &b16, &mut y, &mut scratch, m, n, k).unwrap();
            }
            let name = format!("weight_grad_f16 ({} parts)", ops::weight_grad_f16_parts(m, n, k));
            let var = variant(&kernels::linear16::matmul_at16_split::KERNEL);
            report(&name, var, (k, m, n), warm, timed_ns(batch, warm, repeats));
            let batch = gpu.profiled_batch(2 * (warm + repeats) as u32).unwrap();
            for _ in 0..warm + repeats {
                ops::weight_grad_f16_from_f32(&batch, &x32, &b32, &mut y, &mut scratch, m, n, k).unwrap();
            }
            let var = variant(&kernels::linear16::matmul_at16_split_f32::KERNEL);
            report("weight_grad_f16_from_f32", var, (k, m, n), warm, timed_ns(batch, warm, repeats));
        }
        let len = ops::weight_grad_precise_scratch_len(gpu, Precision::F32, m, n, k).max(1);
        let mut scratch = gpu.zeros::<f32>(len).unwrap();
        let mut ws = ops::PreciseWorkspace::for_product(gpu, Precision::F32, m, n, k).unwrap();
        let warm3 = (warm / 3).max(1);
        // 7 dispatches a repeat on the split path (clear, 2 × max, 2 × split, parts, their sum).
        let batch = gpu.profiled_batch(7 * (warm3 + repeats) as u32).unwrap();
        for _ in 0..warm3 + repeats {
            ops::weight_grad_precise(&batch, &x32, &b32, &mut y, &mut scratch, &mut ws, m, n, k, Precision::F32)
                .unwrap();
        }
        let path = match ops::product_path(gpu, Precision::F32) {
            ops::ProductPath::TensorCoresSplit => {
                format!("TensorCoresSplit ({} parts)", ops::weight_grad_split_parts(m, n, k).0)
            }
            other => format!("{other:?}"),
        };
        report("weight_grad_precise", &path, (k, m, n), warm3, timed_ns(batch, warm3, repeats));
        // The error of one product from zero against float64.
        let mut y0 = gpu.zeros::<f32>(k * n).unwrap();
        ops::weight_grad_precise(gpu, &x32, &b32, &mut y0, &mut scratch, &mut ws, m, n, k, Precision::F32).unwrap();
        let (xh, bh) = (random(m * k, 14), random(m * n, 15));
        precise_error(gpu, "weight_grad_precise", &y0, (k, m, n), |i, p| xh[p * k + i], |p, j| bh[p * n + j]);
    }
}

/// Prints (and nothing else) the error of an f32-accurate product `y` [m, n] = Σₚ a(i, p)·b(p, j)
/// over p < k against float64 on 4096 sampled outputs: max |y − Σab| / Σ|a||b| (issue 12's
/// metric; cuBLAS SGEMM gives 1.5e-7 to 3.6e-7 on these distributions, TENSOR_CORES.md).
fn precise_error(
    gpu: &Gpu,
    name: &str,
    y: &kernels::Buffer<f32>,
    (m, k, n): (usize, usize, usize),
    a: impl Fn(usize, usize) -> f32,
    b: impl Fn(usize, usize) -> f32,
) {
    let got = y.read(gpu).unwrap();
    let mut worst = 0.0f64;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..4096.min(m * n) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let (i, j) = ((s % m as u64) as usize, ((s >> 32) % n as u64) as usize);
        let (mut v, mut scale) = (0.0f64, 0.0f64);
        for p in 0..k {
            let t = a(i, p) as f64 * b(p, j) as f64;
            v += t;
            scale += t.abs();
        }
        let e = (got[i * n + j] as f64 - v).abs();
        worst = worst.max(if scale > 0.0 { e / scale } else { e });
    }
    println!("|   {name}: max error {worst:.2e} of Σ|a||b| (4096 sampled outputs) | | | | |");
}
