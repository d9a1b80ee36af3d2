//! The seed's claim: the subgroup workgroup reduction is ~50% faster than a classic tree
//! reduction. Both variants of `wg_reduce_sum` (the same kernels, on a context with subgroups
//! and on one forced to the tree variant), on rows of 256, 768, 4096 and 50304 values (one
//! workgroup per row) and over one large array (`ops::reduce_sum_into`). GPU time from
//! timestamps, median of the repeats; bytes read per second.
//!
//! `cargo bench --bench reductions` (any adapter; smaller sizes on a CPU adapter).
//! `KERNELS_BENCH_JSON=path` also writes the rows as JSON lines.

use kernels::ops::{ReduceScratch, reduce_sum_into};
use kernels::{Gpu, GpuOptions};
use std::io::Write;

kernels::kernels!("benches/shaders/reduce_bench.wgsl", shared = "shaders/00_shared.wgsl");

const REPEATS: u32 = 15;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median GPU nanoseconds of `f` recorded `REPEATS` times in one profiled batch (the first
/// dispatch of each repeat is discarded as warm-up when there are several).
fn gpu_time(gpu: &Gpu, per_repeat: usize, f: &mut dyn FnMut(&kernels::Batch<'_>)) -> f64 {
    let batch = gpu.profiled_batch(REPEATS * per_repeat as u32 + 8).unwrap();
    for _ in 0..REPEATS {
        f(&batch);
    }
    let profile = batch.submit_profiled().unwrap();
    let per: Vec<f64> =
        profile.dispatches.chunks(per_repeat).skip(1).map(|c| c.last().unwrap().end_ns - c[0].start_ns).collect();
    median(per)
}

fn main() {
    let fast = Gpu::with_options_blocking(GpuOptions::from_env()).expect("a GPU adapter");
    let tree = Gpu::with_options_blocking(GpuOptions::from_env().subgroups(false)).unwrap();
    println!("adapter: {}", fast.report());
    let cpu = fast.report().device_type == "Cpu";
    let per_case: usize = if cpu { 1 << 22 } else { 1 << 26 };
    let whole: usize = if cpu { 1 << 24 } else { 1 << 28 };
    let mut json = std::env::var("KERNELS_BENCH_JSON").ok().map(|p| std::fs::File::create(p).unwrap());

    println!(
        "\n| case | subgroups (size {}) | tree | tree / subgroups | subgroups GB/s |",
        fast.report().subgroup_max_size
    );
    println!("|---|---|---|---|---|");
    let mut rows_out = Vec::new();
    for len in [256usize, 768, 4096, 50304] {
        let rows = (per_case / len).max(1);
        let n = rows * len;
        let data: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 1e-3).collect();
        let mut times = Vec::new();
        for gpu in [&fast, &tree] {
            let x = gpu.upload(&data).unwrap();
            let mut out = gpu.zeros::<f32>(rows).unwrap();
            let params = reduce_bench::row_sum::Params::new(rows as u32, len as u32);
            times.push(gpu_time(gpu, 1, &mut |b| reduce_bench::row_sum(b, &x, &mut out, params).unwrap()));
            // The two variants must agree (up to the order of additions).
            let got = out.read(gpu).unwrap();
            let want: f64 = data[..len].iter().map(|&v| v as f64).sum();
            assert!((got[0] as f64 - want).abs() <= 1e-4 * want.abs().max(1.0), "row 0: {} vs {want}", got[0]);
        }
        rows_out.push((format!("rows of {len} ({rows} rows)"), times[0], times[1], n * 4));
    }
    {
        let data: Vec<f32> = (0..whole).map(|i| ((i * 31) % 997) as f32 * 1e-3).collect();
        let mut times = Vec::new();
        for gpu in [&fast, &tree] {
            let x = gpu.upload(&data).unwrap();
            let mut out = gpu.zeros::<f32>(1).unwrap();
            let mut scratch = ReduceScratch::new(gpu, whole).unwrap();
            let passes = kernels::ops::reduce_passes(whole);
            times.push(gpu_time(gpu, passes, &mut |b| reduce_sum_into(b, &x, whole, &mut out, &mut scratch).unwrap()));
        }
        rows_out.push((format!("whole array of {}M values", whole >> 20), times[0], times[1], whole * 4));
    }
    for (case, t_sg, t_tree, bytes) in rows_out {
        println!(
            "| {case} | {:.1} µs | {:.1} µs | {:.2}× | {:.2} |",
            t_sg / 1e3,
            t_tree / 1e3,
            t_tree / t_sg,
            bytes as f64 / t_sg
        );
        if let Some(f) = json.as_mut() {
            writeln!(
                f,
                "{{\"bench\":\"reduction\",\"adapter\":{:?},\"case\":{case:?},\"subgroup_ns\":{t_sg},\"tree_ns\":{t_tree},\"bytes\":{bytes}}}",
                fast.report().name
            )
            .unwrap();
        }
    }
}
