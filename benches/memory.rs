//! Memory-bound kernels in bytes moved per second: the whole-array sum, cross-entropy
//! (forward and backward in one pass; and mixed precision's loss head, f16 dlogits × the loss
//! scale, beside the three kernels it replaces), RMSNorm, SwiGLU, AdamW (f32 and mixed precision), the
//! embedding lookup and backward, the casts, at GPT-2-small training sizes; the fused f16-output kernels
//! (the f16-output kernels `norm::rmsnorm_f16`, `activation::swiglu_f16`, `optimizer::adamw_mixed`, `cast::cast_f16x4`, …) beside the kernels or kernel pairs they replace. Bytes count each input read once and each output written
//! once. GPU time from timestamps, median of the repeats. Compare with the device's copy
//! bandwidth and PyTorch eager (`scripts/device/torch_baselines.py`, same sizes).
//! `cargo bench --bench memory` (smaller sizes on a CPU adapter); `KERNELS_BENCH_JSON=path`.

use kernels::{Batch, Buffer, Gpu};
use std::io::Write;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

/// Median GPU time of one repeat of `f` (`per` dispatches each), first repeat discarded. The
/// repeats run right after ~150 ms of the same work (a pilot measures how many repeats that
/// takes, capped at 20,000): a GPU whose clock falls between bursts of work (the H200's SM clock
/// drops from 1980 to 345 MHz within a second of idling) is timed at its
/// working clock, not on the way up.
fn time(gpu: &Gpu, repeats: u32, per: usize, f: &mut dyn FnMut(&Batch<'_>)) -> f64 {
    let timed = |f: &mut dyn FnMut(&Batch<'_>), warm: u32| {
        if warm > 0 {
            let b = gpu.batch();
            for _ in 0..warm {
                f(&b);
            }
            b.submit().unwrap();
        }
        let b = gpu.profiled_batch(repeats * per as u32).unwrap();
        for _ in 0..repeats {
            f(&b);
        }
        let p = b.submit_profiled().unwrap();
        median(p.dispatches.chunks(per).skip(1).map(|c| c.last().unwrap().end_ns - c[0].start_ns).collect())
    };
    let pilot = timed(f, 0).max(1.0);
    let warm = (150e6 / pilot).clamp(1.0, 20_000.0) as u32;
    timed(f, warm)
}

fn main() {
    let gpu = Gpu::new().expect("a GPU adapter");
    println!("adapter: {}", gpu.report());
    let small = gpu.report().device_type == "Cpu";
    let div = if small { 64 } else { 1 };
    let reps = if small { 3 } else { 12 };
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());
    let mut rows_out: Vec<(String, u64, f64)> = Vec::new();

    // Whole-array sum of 256M values.
    {
        let n = (1usize << 28) / div;
        let x = gpu.upload(&random(n, 1, 1.0)).unwrap();
        let mut out = gpu.zeros::<f32>(1).unwrap();
        let mut s = kernels::ops::ReduceScratch::new(&gpu, n).unwrap();
        let passes = kernels::ops::reduce_passes(n);
        let t = time(&gpu, reps, passes, &mut |b| kernels::ops::reduce_sum_into(b, &x, n, &mut out, &mut s).unwrap());
        rows_out.push(("reduce_sum".into(), 4 * n as u64, t));
    }
    // Cross-entropy: logits → dlogits in place, loss per row.
    for v in [256usize, 50304] {
        let rows = 8192 / div;
        let mut logits = gpu.upload(&random(rows * v, 2, 8.0)).unwrap();
        let targets: Buffer<u32> =
            gpu.upload(&(0..rows as u32).map(|i| (i * 7919) % v as u32).collect::<Vec<_>>()).unwrap();
        let mut losses = gpu.zeros::<f32>(rows).unwrap();
        let p = kernels::loss::cross_entropy::Params::new(rows as u32, v as u32, 0.0, 0.0, 1.0 / rows as f32);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::loss::cross_entropy(b, &mut logits, &targets, &mut losses, p).unwrap()
        });
        rows_out.push((format!("cross_entropy V={v}"), (8 * rows * v + 8 * rows) as u64, t));
        // The mixed-precision loss head at the same shape (`loss::cross_entropy_f16`: logits read,
        // dlogits × S written as f16x4 rows), beside the three kernels it replaces
        // (cross_entropy, the scale, the gradient cast). The logits are read only, so the
        // head's repeats see the same values.
        let cq = v.div_ceil(4);
        let fresh = gpu.upload(&random(rows * v, 2, 8.0)).unwrap();
        let mut d16 = gpu.zeros::<kernels::ops::F16x4>(rows * cq).unwrap();
        let mut flag = gpu.zeros::<u32>(1).unwrap();
        let state = gpu.upload(&[1024.0f32]).unwrap();
        let p16 = kernels::loss::cross_entropy_f16::Params::new(rows as u32, v as u32, 0.0, 0.0, 1.0 / rows as f32);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::loss::cross_entropy_f16(b, &fresh, &targets, &mut losses, &mut d16, &mut flag, &state, p16)
                .unwrap()
        });
        rows_out.push((format!("loss::cross_entropy_f16 V={v}"), (4 * rows * v + 8 * rows * cq + 8 * rows) as u64, t));
        let sp = kernels::optimizer::scale_by_state::ScaleParams::new((rows * v) as u32);
        let cp = kernels::cast::cast_grad_f16x4::CastParams::new(rows as u32, v as u32);
        let t = time(&gpu, reps, 3, &mut |b| {
            kernels::loss::cross_entropy(b, &mut logits, &targets, &mut losses, p).unwrap();
            kernels::optimizer::scale_by_state(b, &mut logits, &state, sp).unwrap();
            kernels::cast::cast_grad_f16x4(b, &logits, &mut d16, &mut flag, cp).unwrap();
        });
        let chain = format!("cross_entropy + scale_by_state + cast_grad_f16x4 V={v}");
        rows_out.push((chain, (22 * rows * v + 8 * rows) as u64, t));
    }
    // RMSNorm forward, 8192 × 768.
    {
        let (rows, d) = (8192 / div, 768);
        let x = gpu.upload(&random(rows * d, 3, 2.0)).unwrap();
        let g = gpu.upload(&random(d, 4, 1.0)).unwrap();
        let mut y = gpu.zeros::<f32>(rows * d).unwrap();
        let mut r = gpu.zeros::<f32>(rows).unwrap();
        let p = kernels::norm::rmsnorm_forward::Params::new(rows as u32, d as u32, 1e-5);
        let t = time(&gpu, reps, 1, &mut |b| kernels::norm::rmsnorm_forward(b, &x, &g, &mut y, &mut r, p).unwrap());
        rows_out.push(("rmsnorm_forward 8192×768".into(), (8 * rows * d + 4 * rows) as u64, t));
    }
    // The fused f16-output norms at the same shape (`norm::rmsnorm_f16`, `norm::residual_rmsnorm_f16`), beside the pair they
    // replace (rmsnorm_forward's f32 output, then the cast to the f16x4 operand). Bytes: x read
    // (and for the residual form res read and x written), the f16 rows written, rrms; γ once.
    {
        let (rows, d) = (8192 / div, 768usize);
        let cq = d.div_ceil(4);
        let mut x = gpu.upload(&random(rows * d, 3, 2.0)).unwrap();
        let res = gpu.upload(&random(rows * d, 9, 0.01)).unwrap();
        let g = gpu.upload(&random(d, 4, 1.0)).unwrap();
        let mut y = gpu.zeros::<f32>(rows * d).unwrap();
        let mut y16 = gpu.zeros::<kernels::ops::F16x4>(rows * cq).unwrap();
        let mut r = gpu.zeros::<f32>(rows).unwrap();
        let p = kernels::norm::rmsnorm_forward::Params::new(rows as u32, d as u32, 1e-5);
        let t = time(&gpu, reps, 2, &mut |b| {
            kernels::norm::rmsnorm_forward(b, &x, &g, &mut y, &mut r, p).unwrap();
            kernels::ops::cast_f16x4(b, &y, &mut y16, rows, d).unwrap();
        });
        rows_out.push(("rmsnorm_forward + cast_f16x4 8192×768".into(), (14 * rows * d + 4 * rows) as u64, t));
        let p = kernels::norm::rmsnorm_f16::NormParams::new(rows as u32, d as u32, 1e-5);
        let t = time(&gpu, reps, 1, &mut |b| kernels::norm::rmsnorm_f16(b, &x, &g, &mut y16, &mut r, p).unwrap());
        rows_out.push((
            "norm::rmsnorm_f16 8192×768".into(),
            (4 * rows * d + 8 * rows * cq + 4 * rows + 4 * d) as u64,
            t,
        ));
        // x drifts by the small residual each repeat: the values stay finite over the repeats.
        let p = kernels::norm::residual_rmsnorm_f16::NormParams::new(rows as u32, d as u32, 1e-5);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::norm::residual_rmsnorm_f16(b, &mut x, &res, &g, &mut y16, &mut r, p).unwrap()
        });
        rows_out.push((
            "norm::residual_rmsnorm_f16 8192×768".into(),
            (12 * rows * d + 8 * rows * cq + 4 * rows + 4 * d) as u64,
            t,
        ));
    }
    // RMSNorm backward at the same shape: the trainer's forms (dx stored; dx accumulated; dx
    // accumulated with its f16 copy and the overflow flag), then the dγ reduction of their
    // partials. Bytes: x and dy read, dx written (and read, accumulating), dx16 written, rrms,
    // γ once, the ⌈rows/NORM_BLOCK⌉·d partials written; the reduction reads the partials and
    // reads and writes dγ. dy is small so that the accumulating repeats keep dx finite.
    {
        let (rows, d) = (8192 / div, 768usize);
        let cq = d.div_ceil(4);
        let blocks = rows.div_ceil(kernels::norm::NORM_BLOCK as usize);
        let x = gpu.upload(&random(rows * d, 3, 2.0)).unwrap();
        let dy = gpu.upload(&random(rows * d, 5, 1e-3)).unwrap();
        let g = gpu.upload(&random(d, 4, 1.0)).unwrap();
        let rr = gpu.upload(&vec![1.0f32; rows]).unwrap();
        let mut dx = gpu.zeros::<f32>(rows * d).unwrap();
        let mut dx16 = gpu.zeros::<kernels::ops::F16x4>(rows * cq).unwrap();
        let mut flag = gpu.zeros::<u32>(1).unwrap();
        let mut parts = gpu.zeros::<f32>(blocks * d).unwrap();
        let mut dg = gpu.zeros::<f32>(d).unwrap();
        let (r, dd) = (rows as u32, d as u32);
        let fixed = (4 * rows + 4 * d + 4 * blocks * d) as u64;
        let p = kernels::norm::rmsnorm_backward::Params::new(r, dd);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::norm::rmsnorm_backward(b, &x, &g, &rr, &dy, &mut dx, &mut parts, p).unwrap()
        });
        rows_out.push(("norm::rmsnorm_backward 8192×768".into(), 12 * (rows * d) as u64 + fixed, t));
        let p = kernels::norm::rmsnorm_backward_acc::Params::new(r, dd);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::norm::rmsnorm_backward_acc(b, &x, &g, &rr, &dy, &mut dx, &mut parts, p).unwrap()
        });
        rows_out.push(("norm::rmsnorm_backward_acc 8192×768".into(), 16 * (rows * d) as u64 + fixed, t));
        let p = kernels::norm::rmsnorm_backward_acc_f16::Params::new(r, dd);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::norm::rmsnorm_backward_acc_f16(b, &x, &g, &rr, &dy, &mut dx, &mut parts, &mut dx16, &mut flag, p)
                .unwrap()
        });
        let bytes = 16 * (rows * d) as u64 + 8 * (rows * cq) as u64 + fixed;
        rows_out.push(("norm::rmsnorm_backward_acc_f16 8192×768".into(), bytes, t));
        let p = kernels::norm::rmsnorm_dgamma_reduce::Params::new(r, dd);
        let t = time(&gpu, reps, 1, &mut |b| kernels::norm::rmsnorm_dgamma_reduce(b, &parts, &mut dg, p).unwrap());
        rows_out.push(("norm::rmsnorm_dgamma_reduce 8192×768".into(), (4 * blocks * d + 8 * d) as u64, t));
    }
    // SwiGLU 8192 × 3072: the f32 combine, the combine + cast pair, and activation::swiglu_f16.
    {
        let (rows, f) = (8192 / div, 3072);
        let n = rows * f;
        let gate = gpu.upload(&random(n, 10, 8.0)).unwrap();
        let up = gpu.upload(&random(n, 11, 4.0)).unwrap();
        let mut a = gpu.zeros::<f32>(n).unwrap();
        let mut a16 = gpu.zeros::<kernels::ops::F16x4>(n / 4).unwrap();
        let p = kernels::activation::swiglu_combine::Params::new(n as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::activation::swiglu_combine(b, &gate, &up, &mut a, p).unwrap());
        rows_out.push(("swiglu_combine 8192×3072".into(), 12 * n as u64, t));
        let t = time(&gpu, reps, 2, &mut |b| {
            kernels::activation::swiglu_combine(b, &gate, &up, &mut a, p).unwrap();
            kernels::ops::cast_f16x4(b, &a, &mut a16, rows, f).unwrap();
        });
        rows_out.push(("swiglu_combine + cast_f16x4 8192×3072".into(), 18 * n as u64, t));
        let p = kernels::activation::swiglu_f16::RowsParams::new(rows as u32, f as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::activation::swiglu_f16(b, &gate, &up, &mut a16, p).unwrap());
        rows_out.push(("activation::swiglu_f16 8192×3072".into(), 10 * n as u64, t));
    }
    // AdamW over 124M values (one tensor): reads p, g, m, v; writes p, m, v and zeroes g.
    {
        let n = 124_000_000 / div;
        let mut p = gpu.upload(&random(n, 5, 0.04)).unwrap();
        let mut g = gpu.upload(&random(n, 6, 0.002)).unwrap();
        let mut m = gpu.zeros::<f32>(n).unwrap();
        let mut v = gpu.zeros::<f32>(n).unwrap();
        let stats = gpu.upload(&[1.0f32, 1.0, 1.0, 0.0]).unwrap();
        let h = kernels::optimizer::adamw_update::Params::new(n as u32, 1e-4, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::optimizer::adamw_update(b, &mut p, &mut g, &mut m, &mut v, &stats, h).unwrap()
        });
        rows_out.push(("adamw_update 124M".into(), 32 * n as u64, t));
    }
    // The mixed-precision AdamW over 124M values (one [n/768, 768] tensor): reads p, g, m, v;
    // writes p, m, v, the f16 copy, and zeroes g: 34 bytes a value (optimizer::adamw_mixed).
    {
        let cols = 768;
        let rows = 124_000_000 / div / cols;
        let n = rows * cols;
        let mut p = gpu.upload(&random(n, 5, 0.04)).unwrap();
        let mut g = gpu.upload(&random(n, 6, 0.002)).unwrap();
        let mut m = gpu.zeros::<f32>(n).unwrap();
        let mut v = gpu.zeros::<f32>(n).unwrap();
        let mut p16 = gpu.zeros::<kernels::ops::F16x4>(n / 4).unwrap();
        // Loss scale 1, clean step, factor 1.
        let state = gpu.upload(&[1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]).unwrap();
        let (r32, c32) = (rows as u32, cols as u32);
        let (l1, l2) = (0.9f64.ln() as f32, 0.95f64.ln() as f32);
        let h = kernels::optimizer::adamw_mixed::AdamParams::new(r32, c32, 1e-4, 0.9, 0.95, 1e-8, 0.1, 7, l1, l2);
        let t = time(&gpu, reps, 1, &mut |b| {
            kernels::optimizer::adamw_mixed(b, &mut p, &mut g, &mut m, &mut v, &mut p16, &state, h).unwrap()
        });
        rows_out.push(("optimizer::adamw_mixed 124M".into(), 34 * n as u64, t));
    }
    // Embedding lookup: 8192 rows of 768 from a 50304 × 768 table.
    {
        let (rows, d, vocab) = (8192 / div, 768, 50304 / div);
        let table = gpu.upload(&random(vocab * d, 7, 1.0)).unwrap();
        let ids: Buffer<u32> =
            gpu.upload(&(0..rows as u32).map(|i| (i * 7919) % vocab as u32).collect::<Vec<_>>()).unwrap();
        let mut out = gpu.zeros::<f32>(rows * d).unwrap();
        let p = kernels::embedding::embed_lookup::Params::new(rows as u32, d as u32, vocab as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::embedding::embed_lookup(b, &ids, &table, &mut out, p).unwrap());
        rows_out.push(("embed_lookup 8192×768".into(), (8 * rows * d + 4 * rows) as u64, t));
    }
    // Embedding backward (`kernels::embed::backward`) at the trainer's shapes, into a table gradient that already holds
    // values (it accumulates). Bytes tokenizer: 8192 rows of 768 into 256 table rows, ids the
    // bytes of this repository's README cycled (a text's byte histogram: a few bytes, the space
    // first, take most rows), at full size on every adapter since the skew is the point; GPT-2's
    // BPE: 16384 rows into 50304 table rows (both / div), ids a Zipf-like draw. Bytes: dOut and
    // the ids read once, each table row that occurs read and written.
    {
        let text = include_bytes!("../README.md");
        let zipf = |n: usize, vocab: usize| -> Vec<u32> {
            // Rank k with probability about ∝ 1/(k+1): (V+1)^u − 1 for u uniform in [0, 1).
            let top = (vocab as f64 + 1.0).ln();
            let draw = |u: f32| (((u as f64 + 0.5) * top).exp() as usize).clamp(1, vocab) as u32 - 1;
            random(n, 11, 1.0).into_iter().map(draw).collect()
        };
        let shapes = [
            (
                "bytes 8192×768 V=256",
                8192,
                768,
                256,
                text.iter().cycle().take(8192).map(|&b| b as u32).collect::<Vec<_>>(),
            ),
            ("BPE 16384×768 V=50304", 16384 / div, 768, 50304 / div, zipf(16384 / div, 50304 / div)),
        ];
        for (name, rows, d, vocab, ids) in shapes {
            let mut seen = vec![false; vocab];
            ids.iter().for_each(|&i| seen[i as usize] = true);
            let distinct = seen.iter().filter(|&&s| s).count();
            let d_out = gpu.upload(&random(rows * d, 12, 1.0)).unwrap();
            let ids_b: Buffer<u32> = gpu.upload(&ids).unwrap();
            let mut d_table = gpu.upload(&random(vocab * d, 13, 1.0)).unwrap();
            let p = kernels::embed::Params::new(rows as u32, d as u32, vocab as u32);
            let mut s = kernels::embed::Scratch::new(&gpu, p).unwrap();
            let t = time(&gpu, reps, p.dispatches(), &mut |b| {
                kernels::embed::backward(b, &d_out, &ids_b, &mut d_table, &mut s, p).unwrap()
            });
            rows_out.push((format!("embed_backward {name}"), (4 * rows * d + 4 * rows + 8 * distinct * d) as u64, t));
        }
    }
    // Casts of 64M values.
    {
        let n = (1usize << 26) / div;
        let x = gpu.upload(&random(n, 8, 100.0)).unwrap();
        let mut h = gpu.zeros::<kernels::f16>(n).unwrap();
        let mut back = gpu.zeros::<f32>(n).unwrap();
        let p = kernels::cast::cast_f32_to_f16::Params::new(n as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::cast::cast_f32_to_f16(b, &x, &mut h, p).unwrap());
        rows_out.push(("cast_f32_to_f16 64M".into(), 6 * n as u64, t));
        let p = kernels::cast::cast_f16_to_f32::Params::new(n as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::cast::cast_f16_to_f32(b, &h, &mut back, p).unwrap());
        rows_out.push(("cast_f16_to_f32 64M".into(), 6 * n as u64, t));
        // The f16x4-row casts of the products' operands, [n/1024, 1024].
        let (rows, cols) = (n / 1024, 1024);
        let mut h4 = gpu.zeros::<kernels::ops::F16x4>(n / 4).unwrap();
        let p = kernels::cast::cast_f16x4::RowsParams::new(rows as u32, cols as u32);
        let t = time(&gpu, reps, 1, &mut |b| kernels::cast::cast_f16x4(b, &x, &mut h4, p).unwrap());
        rows_out.push(("cast::cast_f16x4 64M".into(), 6 * n as u64, t));
    }
    println!("\n| kernel | bytes | time | GB/s |");
    println!("|---|---|---|---|");
    for (name, bytes, t) in rows_out {
        println!("| {name} | {:.1} MB | {:.1} µs | {:.0} |", bytes as f64 / 1e6, t / 1e3, bytes as f64 / t);
        if let Some(f) = json.as_mut() {
            writeln!(
                f,
                "{{\"bench\":\"memory\",\"adapter\":{:?},\"op\":{name:?},\"bytes\":{bytes},\"ns\":{t}}}",
                gpu.report().name
            )
            .unwrap();
        }
    }
}
