//! Attention forward + backward at sequence 1024, head dim 64, 12 heads, batch 8 (GPT-2
//! small's training shape), in FLOP/s: causal forward 2·B·H·S²·Dh (QKᵀ and P·V over the lower
//! triangle), backward 2.5× that (the usual count, recomputation not counted). Compare with
//! the SGEMM rate of `benches/gemm.rs`. Three paths: `streaming`, `fast` (f32, materialised P)
//! and `fast16` (the fast path with f16 operands on tensor cores, mixed precision's).
//! `cargo bench --bench attention`; `KERNELS_BENCH_JSON`.

use kernels::Gpu;
use kernels::attention::attention_forward;
use kernels::backward_attention::{attention_backward_dkdv, attention_backward_dq};
use std::io::Write;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let gpu = Gpu::new().expect("a GPU adapter");
    println!("adapter: {}", gpu.report());
    let small = gpu.report().device_type == "Cpu";
    let (b, s, h, dh) = if small { (1usize, 256usize, 2usize, 64usize) } else { (8, 1024, 12, 64) };
    let n = b * s * h * dh;
    let rnd = |seed: u64| {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect::<Vec<f32>>()
    };
    let (q, k, v, d_o) = (
        gpu.upload(&rnd(1)).unwrap(),
        gpu.upload(&rnd(2)).unwrap(),
        gpu.upload(&rnd(3)).unwrap(),
        gpu.upload(&rnd(4)).unwrap(),
    );
    let mut o = gpu.zeros::<f32>(n).unwrap();
    let mut lse = gpu.zeros::<f32>(b * h * s).unwrap();
    let mut dq = gpu.zeros::<f32>(n).unwrap();
    let mut dk = gpu.zeros::<f32>(n).unwrap();
    let mut dv = gpu.zeros::<f32>(n).unwrap();
    let mut delta = gpu.zeros::<f32>(b * h * s).unwrap();
    let (bb, ss, hh, dd) = (b as u32, s as u32, h as u32, dh as u32);
    let scale = 1.0 / (dh as f32).sqrt();
    let reps = if small { 3 } else { 10 };
    let fwd_flops = 2.0 * (b * h * s * s * dh) as f64;
    let bwd_flops = 2.5 * fwd_flops;
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());
    println!("\n| path | forward | backward | forward + backward | TFLOP/s |");
    println!("|---|---|---|---|---|");
    let mut report = |path: &str, fwd: f64, bwd: f64, parts: &str| {
        let total = fwd + bwd;
        println!(
            "| {path} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2} |",
            fwd / 1e6,
            bwd / 1e6,
            total / 1e6,
            (fwd_flops + bwd_flops) / total / 1e3
        );
        println!("  {path}: {parts}");
        if let Some(f) = json.as_mut() {
            writeln!(
                f,
                "{{\"bench\":\"attention\",\"path\":\"{path}\",\"adapter\":{:?},\"batch\":{b},\"seq\":{s},\"heads\":{h},\"head_dim\":{dh},\"fwd_ns\":{fwd},\"bwd_ns\":{bwd},\"flops\":{}}}",
                gpu.report().name,
                fwd_flops + bwd_flops
            )
            .unwrap();
        }
    };

    // The streaming kernels: forward, dQ (+Δ), dK/dV; no workspace.
    let batch = gpu.profiled_batch(3 * reps).unwrap();
    for _ in 0..reps {
        attention_forward(
            &batch,
            &q,
            &k,
            &v,
            &mut o,
            &mut lse,
            kernels::attention::attention_forward::Params::new(bb, ss, hh, hh, dd, scale),
        )
        .unwrap();
        let p = kernels::backward_attention::attention_backward_dq::Params::new(bb, ss, hh, hh, dd, scale);
        attention_backward_dq(&batch, &q, &k, &v, &o, &d_o, &lse, &mut dq, &mut delta, p).unwrap();
        let p = kernels::backward_attention::attention_backward_dkdv::Params::new(bb, ss, hh, hh, dd, scale);
        attention_backward_dkdv(&batch, &q, &k, &v, &d_o, &lse, &delta, &mut dk, &mut dv, p).unwrap();
    }
    let prof = batch.submit_profiled().unwrap();
    let times = per_rep(&prof, reps as usize);
    let part = |i: usize| median(times.iter().map(|r| r[i]).collect());
    let (fwd, bdq, bkv) = (part(0), part(1), part(2));
    report("streaming", fwd, bdq + bkv, &format!("dQ {:.3} ms, dK/dV {:.3} ms", bdq / 1e6, bkv / 1e6));

    // The fast path (`kernels::fast_attention`, the trainer's default): 3 dispatches forward
    // through a materialised [B, H, S, S] P, 5 backward.
    let fp = kernels::fast_attention::Params::new(bb, ss, hh, hh, dd, scale);
    if !fp.fits(&gpu) {
        println!("  fast path: its workspace does not fit this adapter; skipped");
        return;
    }
    let mut ws = kernels::fast_attention::Workspace::new(&gpu, &fp).unwrap();
    let batch = gpu.profiled_batch(8 * reps).unwrap();
    for _ in 0..reps {
        kernels::fast_attention::forward(&batch, &q, &k, &v, &mut o, &mut lse, &mut ws.probs, fp).unwrap();
        kernels::fast_attention::backward(
            &batch,
            &q,
            &k,
            &v,
            &o,
            &d_o,
            &mut ws.probs,
            &mut ws.delta,
            &mut dq,
            &mut dk,
            &mut dv,
            fp,
        )
        .unwrap();
    }
    let prof = batch.submit_profiled().unwrap();
    let times = per_rep(&prof, reps as usize);
    let names = prof.dispatches[..8].iter().map(|d| d.kernel.name).collect::<Vec<_>>();
    let parts: Vec<f64> = (0..8).map(|i| median(times.iter().map(|r| r[i]).collect())).collect();
    let detail = names.iter().zip(&parts).map(|(n, t)| format!("{n} {:.3} ms", t / 1e6)).collect::<Vec<_>>().join(", ");
    report("fast", parts[..3].iter().sum(), parts[3..].iter().sum(), &detail);
    drop(ws);

    // The fast path with f16 operands (`fast_attention::forward16` / `backward16`, the trainer's
    // in mixed precision): the six products on tensor cores where the adapter has them (their
    // portable f32-FMA bodies otherwise), 3 dispatches forward, 6 backward (dP into a second
    // S×S workspace). Not counted: the trainer's casts of Q, K, V and dO to f16 (four
    // memory-bound passes over B·S·H·Dh floats per layer).
    if !gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        println!("  fast16 path: the adapter has no SHADER_F16; skipped");
        return;
    }
    let tensor_cores = kernels::ops::on_tensor_cores(&gpu, &kernels::linear16::attention_scores16::KERNEL);
    let up16 = |seed: u64| gpu.upload(&kernels::ops::to_f16x4(&rnd(seed), b * s * h, dh)).unwrap();
    let (q16, k16, v16, d_o16) = (up16(1), up16(2), up16(3), up16(4));
    let mut ws = kernels::fast_attention::Workspace16::new(&gpu, &fp).unwrap();
    let mut flag = gpu.zeros::<u32>(1).unwrap();
    let batch = gpu.profiled_batch(9 * reps).unwrap();
    for _ in 0..reps {
        kernels::fast_attention::forward16(&batch, &q16, &k16, &v16, &mut o, &mut lse, &mut ws.probs, fp).unwrap();
        kernels::fast_attention::backward16(
            &batch,
            &q16,
            &k16,
            &v16,
            &o,
            &d_o,
            &d_o16,
            &ws.probs,
            &mut ws.ds,
            &mut ws.delta,
            &mut flag,
            &mut dq,
            &mut dk,
            &mut dv,
            fp,
        )
        .unwrap();
    }
    let prof = batch.submit_profiled().unwrap();
    let times = per_rep(&prof, reps as usize);
    let names = prof.dispatches[..9].iter().map(|d| d.kernel.name).collect::<Vec<_>>();
    let parts: Vec<f64> = (0..9).map(|i| median(times.iter().map(|r| r[i]).collect())).collect();
    let detail = names.iter().zip(&parts).map(|(n, t)| format!("{n} {:.3} ms", t / 1e6)).collect::<Vec<_>>().join(", ");
    let detail = format!("tensor cores: {}; {detail}", if tensor_cores { "yes" } else { "no (portable bodies)" });
    report("fast16", parts[..3].iter().sum(), parts[3..].iter().sum(), &detail);
}

/// The dispatch times of each repeat after the first (a warm-up).
fn per_rep(prof: &kernels::Profile, reps: usize) -> Vec<Vec<f64>> {
    let per = prof.dispatches.len() / reps;
    prof.dispatches.chunks(per).skip(1).map(|c| c.iter().map(|d| d.end_ns - d.start_ns).collect()).collect()
}
