//! SGEMM: `linear::matmul`, `matmul_t` and `matmul_at` at 4096³ and at GPT-2-small training
//! shapes (M = 8192 tokens: 768×768 one projection, 768×2304 QKV, 768×3072 and 3072×768 MLP,
//! 768×50304 the head), plus the trainer's weight-gradient path `ops::matmul_at_acc_split`
//! (layout `matmul_at_split`: the split contraction and its fixed-order sum, both dispatches
//! timed; the same as `matmul_at_acc` where the output has enough tiles).
//! GPU time from timestamps (median of the repeats after a warm-up), TFLOP/s = 2·M·N·K / t.
//! Random inputs. `cargo bench --bench gemm` (smaller shapes on a CPU adapter);
//! `KERNELS_BENCH_JSON=path` also writes JSON lines.

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
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());
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
            if let Some(f) = json.as_mut() {
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
            if let Some(f) = json.as_mut() {
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
