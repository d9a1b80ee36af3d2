//! Attention forward + backward at GPT-2 small's training shape (batch 8, 12 heads, head dim 64)
//! at sequence 1024 and 4096, in FLOP/s: causal forward 2·B·H·S²·Dh (QKᵀ and P·V over the
//! lower triangle), backward 2.5× that (the usual count, recomputation not counted), the same
//! convention as `scripts/device/sdpa_baseline.py` (PyTorch's `scaled_dot_product_attention`). Five
//! paths: `streaming`, `fast` (f32, materialised P), `fast16` (the fast path with f16 operands
//! on tensor cores), `flash` (the fused f32 kernels) and `flash16` (the fused f16 kernels on
//! tensor cores, mixed precision's); a path whose workspace or kernels do not fit the adapter is
//! skipped, and the streaming kernels only run at 1024 (at 4096 one repeat takes most of a
//! second on an H200). Each path is timed right after ~300 ms of the same work (the H200's SM
//! clock falls between short bursts), median of the repeats, per dispatch.
//! `cargo bench --bench attention` (smaller shapes on a CPU adapter); `KERNELS_BENCH_JSON`.

use kernels::flash_attention::Params;
use kernels::ops::F16x4;
use kernels::{Batch, Buffer, Gpu};
use std::io::Write;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Median GPU time of each of the `per` dispatches one call of `f` records, over `repeats`
/// calls (the first discarded), timed right after ~300 ms of the same work in the preceding
/// submission (a pilot call measures how many calls that takes).
fn time(gpu: &Gpu, repeats: u32, per: usize, f: &mut dyn FnMut(&Batch<'_>)) -> Vec<f64> {
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
        assert_eq!(p.dispatches.len(), repeats as usize * per, "dispatches per call");
        let reps: Vec<&[kernels::DispatchTime]> = p.dispatches.chunks(per).skip(1).collect();
        (0..per).map(|i| median(reps.iter().map(|r| r[i].end_ns - r[i].start_ns).collect())).collect::<Vec<f64>>()
    };
    let pilot: f64 = timed(f, 0).iter().sum::<f64>().max(1.0);
    let warm = (300e6 / pilot).clamp(1.0, 2_000.0) as u32;
    timed(f, warm)
}

/// The tensors of one shape.
struct Tensors {
    q: Buffer<f32>,
    k: Buffer<f32>,
    v: Buffer<f32>,
    d_o: Buffer<f32>,
    o: Buffer<f32>,
    lse: Buffer<f32>,
    delta: Buffer<f32>,
    dq: Buffer<f32>,
    dk: Buffer<f32>,
    dv: Buffer<f32>,
    /// Q, K, V, dO in the f16x4 row layout (where the adapter has f16).
    half: Option<[Buffer<F16x4>; 4]>,
    /// O's f16 copy (the f16 flash forward's second output).
    o16: Buffer<F16x4>,
    flag: Buffer<u32>,
}

fn main() {
    let gpu = Gpu::new().expect("a GPU adapter");
    println!("adapter: {}", gpu.report());
    let small = gpu.report().device_type == "Cpu";
    let f16 = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    let shapes: &[(u32, u32, u32, u32)] =
        if small { &[(1, 256, 2, 64), (1, 1024, 2, 64)] } else { &[(8, 1024, 12, 64), (8, 4096, 12, 64)] };
    let reps = if small { 3 } else { 10 };
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());
    for &(b, s, h, dh) in shapes {
        let n = (b * s * h * dh) as usize;
        let rows = (b * h * s) as usize;
        let up = |seed: u64| gpu.upload(&random(n, seed)).unwrap();
        let up16 = |seed: u64| {
            gpu.upload(&kernels::ops::to_f16x4(&random(n, seed), (b * s * h) as usize, dh as usize)).unwrap()
        };
        let mut t = Tensors {
            q: up(1),
            k: up(2),
            v: up(3),
            d_o: up(4),
            o: gpu.zeros(n).unwrap(),
            lse: gpu.zeros(rows).unwrap(),
            delta: gpu.zeros(rows).unwrap(),
            dq: gpu.zeros(n).unwrap(),
            dk: gpu.zeros(n).unwrap(),
            dv: gpu.zeros(n).unwrap(),
            half: f16.then(|| [up16(1), up16(2), up16(3), up16(4)]),
            o16: gpu.zeros(kernels::ops::f16x4_len((b * s * h) as usize, dh as usize)).unwrap(),
            flag: gpu.zeros(1).unwrap(),
        };
        let p = Params::new(b, s, h, h, dh, 1.0 / (dh as f32).sqrt());
        let fwd_flops = 2.0 * (b as f64) * (h as f64) * (s as f64).powi(2) * dh as f64;
        let flops = 3.5 * fwd_flops;
        println!("\n### B={b} S={s} H={h} Dh={dh}\n");
        println!("| path | forward | backward | forward + backward | TFLOP/s |");
        println!("|---|---|---|---|---|");
        let mut report = |path: &str, fwd: f64, bwd: f64, tc: bool, detail: String| {
            let total = fwd + bwd;
            println!(
                "| {path} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2} |",
                fwd / 1e6,
                bwd / 1e6,
                total / 1e6,
                flops / total / 1e3
            );
            println!("  {path}: {detail}");
            if let Some(f) = json.as_mut() {
                writeln!(
                    f,
                    "{{\"bench\":\"attention\",\"path\":\"{path}\",\"adapter\":{:?},\"batch\":{b},\"seq\":{s},\"heads\":{h},\"head_dim\":{dh},\"fwd_ns\":{fwd},\"bwd_ns\":{bwd},\"flops\":{flops},\"tensor_cores\":{tc}}}",
                    gpu.report().name
                )
                .unwrap();
            }
        };
        let detail = |names: &[&str], parts: &[f64]| {
            names.iter().zip(parts).map(|(n, t)| format!("{n} {:.3} ms", t / 1e6)).collect::<Vec<_>>().join(", ")
        };

        // The streaming kernels: forward, dQ (+Δ), dK/dV; no workspace.
        if s <= 1024 {
            let (bb, ss, hh, dd, sc) = (b, s, h, dh, p.scale);
            let parts = time(&gpu, reps, 3, &mut |bt| {
                let fp = kernels::attention::attention_forward::Params::new(bb, ss, hh, hh, dd, sc);
                kernels::attention::attention_forward(bt, &t.q, &t.k, &t.v, &mut t.o, &mut t.lse, fp).unwrap();
                let qp = kernels::backward_attention::attention_backward_dq::Params::new(bb, ss, hh, hh, dd, sc);
                kernels::backward_attention::attention_backward_dq(
                    bt,
                    &t.q,
                    &t.k,
                    &t.v,
                    &t.o,
                    &t.d_o,
                    &t.lse,
                    &mut t.dq,
                    &mut t.delta,
                    qp,
                )
                .unwrap();
                let kp = kernels::backward_attention::attention_backward_dkdv::Params::new(bb, ss, hh, hh, dd, sc);
                kernels::backward_attention::attention_backward_dkdv(
                    bt, &t.q, &t.k, &t.v, &t.d_o, &t.lse, &t.delta, &mut t.dk, &mut t.dv, kp,
                )
                .unwrap();
            });
            report("streaming", parts[0], parts[1] + parts[2], false, detail(&["forward", "dQ", "dK/dV"], &parts));
        }

        // The fast path: 3 dispatches forward through a materialised [B, H, S, S] P, 5 backward;
        // its f16 form 3 forward, 6 backward (dP into a second S×S workspace). Not counted: the
        // trainer's casts of Q, K, V and dO to f16.
        if p.fits(&gpu) {
            let mut ws = kernels::fast_attention::Workspace::new(&gpu, &p).unwrap();
            let names = ["scores", "softmax", "P·V", "Δ", "Pᵀ·dO", "dS", "dS·K", "dSᵀ·Q"];
            let parts = time(&gpu, reps, 8, &mut |bt| {
                kernels::fast_attention::forward(bt, &t.q, &t.k, &t.v, &mut t.o, &mut t.lse, &mut ws.probs, p).unwrap();
                kernels::fast_attention::backward(
                    bt,
                    &t.q,
                    &t.k,
                    &t.v,
                    &t.o,
                    &t.d_o,
                    &mut ws.probs,
                    &mut ws.delta,
                    &mut t.dq,
                    &mut t.dk,
                    &mut t.dv,
                    p,
                )
                .unwrap();
            });
            report("fast", parts[..3].iter().sum(), parts[3..].iter().sum(), false, detail(&names, &parts));
            drop(ws);
            if let Some([q16, k16, v16, d_o16]) = &t.half {
                let tc = kernels::ops::on_tensor_cores(&gpu, &kernels::attention::attention_scores_f16::KERNEL);
                let mut ws = kernels::fast_attention::Workspace16::new(&gpu, &p).unwrap();
                let names = ["scores", "softmax", "P·V", "Δ", "Pᵀ·dO", "dP", "dS", "dS·K", "dSᵀ·Q"];
                let parts = time(&gpu, reps, 9, &mut |bt| {
                    kernels::fast_attention::forward16(bt, q16, k16, v16, &mut t.o, &mut t.lse, &mut ws.probs, p)
                        .unwrap();
                    kernels::fast_attention::backward16(
                        bt,
                        q16,
                        k16,
                        v16,
                        &t.o,
                        &t.d_o,
                        d_o16,
                        &ws.probs,
                        &mut ws.ds,
                        &mut ws.delta,
                        &mut t.flag,
                        &mut t.dq,
                        &mut t.dk,
                        &mut t.dv,
                        p,
                    )
                    .unwrap();
                });
                report("fast16", parts[..3].iter().sum(), parts[3..].iter().sum(), tc, detail(&names, &parts));
            }
        } else {
            println!("  fast, fast16: the [B, H, S, S] workspace does not fit this adapter; skipped");
        }

        // Flash attention: 1 dispatch forward, 3 backward (Δ, dK/dV, dQ); no workspace.
        let names = ["forward", "Δ", "dK/dV", "dQ"];
        if p.flash_fits(&gpu, false) {
            let parts = time(&gpu, reps, 4, &mut |bt| {
                kernels::flash_attention::forward(bt, &t.q, &t.k, &t.v, &mut t.o, &mut t.lse, p).unwrap();
                kernels::flash_attention::backward(
                    bt,
                    &t.q,
                    &t.k,
                    &t.v,
                    &t.o,
                    &t.d_o,
                    &t.lse,
                    &mut t.delta,
                    &mut t.dq,
                    &mut t.dk,
                    &mut t.dv,
                    p,
                )
                .unwrap();
            });
            report("flash", parts[0], parts[1..].iter().sum(), false, detail(&names, &parts));
        } else {
            println!("  flash: its kernels do not fit this adapter's workgroup memory; skipped");
        }
        if let (Some([q16, k16, v16, d_o16]), true) = (&mut t.half, p.flash_fits(&gpu, true)) {
            let (q16, k16, v16) = (&*q16, &*k16, &*v16);
            let tc = kernels::flash_attention::on_tensor_cores(&gpu, &kernels::attention::flash_forward16::KERNEL);
            let parts = time(&gpu, reps, 4, &mut |bt| {
                kernels::flash_attention::forward16(bt, q16, k16, v16, &mut t.o, &mut t.o16, &mut t.lse, p).unwrap();
                kernels::flash_attention::backward16(
                    bt,
                    q16,
                    k16,
                    v16,
                    &t.o,
                    &t.d_o,
                    d_o16,
                    &t.lse,
                    &mut t.delta,
                    &mut t.flag,
                    &mut t.dq,
                    &mut t.dk,
                    &mut t.dv,
                    p,
                )
                .unwrap();
            });
            let form = kernels::flash_attention::backward16_form(&gpu, &p);
            let fform = kernels::flash_attention::forward16_form(&gpu, &p);
            let d = format!(
                "tensor cores: {}; forward {fform:?}, backward {form:?}; {}",
                if tc { "yes" } else { "no (portable)" },
                detail(&names, &parts)
            );
            report("flash16", parts[0], parts[1..].iter().sum(), tc, d);
            // Where `forward16` and `backward16` record the tensor-core kernels, the sliced ones
            // too, for the ratio in the same run.
            if form == kernels::flash_attention::Flash16Form::TensorCores {
                use kernels::attention::flash_forward16;
                use kernels::backward_attention::{attention_fast_delta, flash_backward_dkdv16, flash_backward_dq16};
                let (b, s, h, hkv, dh) = (p.batch, p.seq, p.heads, p.kv_heads, p.head_dim);
                let parts = time(&gpu, reps, 4, &mut |bt| {
                    let fp = flash_forward16::Params::new(b, s, h, hkv, dh, p.scale);
                    let fo = flash_forward16::Overrides { FL_DH: Some(dh) };
                    flash_forward16(bt, q16, k16, v16, &mut t.o, &mut t.lse, &mut t.o16, fp, fo).unwrap();
                    let dp = attention_fast_delta::Params::new(b, s, h, dh);
                    attention_fast_delta(bt, &t.o, &t.d_o, &mut t.delta, dp).unwrap();
                    let kp = flash_backward_dkdv16::Params::new(b, s, h, hkv, dh, p.scale);
                    let ko = flash_backward_dkdv16::Overrides { FL_DH: Some(dh) };
                    let (lse, delta) = (&t.lse, &t.delta);
                    flash_backward_dkdv16(
                        bt,
                        q16,
                        k16,
                        v16,
                        d_o16,
                        lse,
                        delta,
                        &mut t.dk,
                        &mut t.dv,
                        &mut t.flag,
                        kp,
                        ko,
                    )
                    .unwrap();
                    let qp = flash_backward_dq16::Params::new(b, s, h, hkv, dh, p.scale);
                    let qo = flash_backward_dq16::Overrides { FL_DH: Some(dh) };
                    flash_backward_dq16(bt, q16, k16, v16, d_o16, lse, delta, &mut t.dq, qp, qo).unwrap();
                });
                let d = format!("tensor cores: yes; forward and backward Sliced; {}", detail(&names, &parts));
                report("flash16-sliced", parts[0], parts[1..].iter().sum(), tc, d);
            }
        }
    }
}
