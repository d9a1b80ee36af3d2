//! The single-GPU half of the NCCL all-reduce, checked end to end on an NVIDIA GPU (Linux,
//! Vulkan): wgpu writes an exportable buffer with a kernel, CUDA reads the same bytes, a
//! one-rank NCCL all-reduce (average) leaves them as they were, CUDA writes and wgpu reads, the
//! small collectives work, and a 500 MB gradient all-reduce round trip (copy into the bucket,
//! host wait, NCCL, stream sync, copy back) is timed. Exits 1 on any mismatch.
//!
//! ```text
//! cargo build --release -p kernels-train --features nccl --example nccl_probe
//! LD_LIBRARY_PATH=<dir of libnccl.so.2> target/release/examples/nccl_probe [--mb 500] [--iters 5] [--seed N]
//! ```
//! `KERNELS_TEST_SEED` gives the seed too; it is printed either way.

use kernels::wgpu;
use kernels::wgpu::util::DeviceExt;
use kernels::{Buffer, Gpu};
use kernels_train::dist::Collective;
use kernels_train::dist::nccl::{DEFAULT_BUCKET_BYTES, NcclCollective};
use std::time::Instant;

/// The value the fill kernel writes at index `i`: a hash of `i` and the seed, as a float in
/// [-1, 1) on a 2⁻²² grid, so the GPU's result is exact and the host can recompute it.
fn value(i: u32, seed: u32) -> f32 {
    let mut x = i ^ seed.wrapping_mul(0x9e37_79b9);
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    (f32::from_bits((x >> 9) | 0x3f80_0000) - 1.0) * 2.0 - 1.0
}

const FILL: &str = "
struct Params { seed: u32, base: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;
fn value(i: u32, seed: u32) -> f32 {
    var x = i ^ (seed * 0x9e3779b9u);
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return (bitcast<f32>((x >> 9u) | 0x3f800000u) - 1.0) * 2.0 - 1.0;
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let n = arrayLength(&out);
    let stride = groups.x * 256u;
    for (var i = gid.x; i < n; i += stride) {
        out[i] = value(p.base + i, p.seed);
    }
}
";

/// Fills `buffer[i]` with `value(base + i, seed)` on the GPU.
fn fill(gpu: &Gpu, buffer: &Buffer<f32>, seed: u32, base: u32) -> Result<(), String> {
    let device = gpu.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fill"),
        source: wgpu::ShaderSource::Wgsl(FILL.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fill"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("fill params"),
        contents: bytemuck::cast_slice(&[seed, base]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: buffer.raw().as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: params.as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        let groups = buffer.len().div_ceil(256).clamp(1, 65535) as u32;
        pass.dispatch_workgroups(groups, 1, 1);
    }
    gpu.queue().submit([encoder.finish()]);
    gpu.wait().map_err(|e| format!("the fill kernel: {e}"))
}

/// The first index where `got` and `want` differ in bits, with both values.
fn first_difference(got: &[f32], want: impl Iterator<Item = f32>) -> Option<(usize, f32, f32)> {
    got.iter().zip(want).enumerate().find(|(_, (g, w))| g.to_bits() != w.to_bits()).map(|(i, (&g, w))| (i, g, w))
}

struct Probe {
    failures: Vec<String>,
}

impl Probe {
    /// Records a check's outcome.
    fn check(&mut self, name: &str, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => println!("ok    {name}"),
            Err(e) => {
                println!("FAIL  {name}: {e}");
                self.failures.push(name.to_string());
            }
        }
    }
}

/// `Err` describing the first difference, if any.
fn same(what: &str, got: &[f32], want: impl Iterator<Item = f32>) -> Result<(), String> {
    match first_difference(got, want) {
        None => Ok(()),
        Some((i, g, w)) => {
            Err(format!("{what}: element {i} is {g:e} ({:#010x}), expected {w:e} ({:#010x})", g.to_bits(), w.to_bits()))
        }
    }
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    if let Err(e) = run() {
        eprintln!("nccl_probe: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut mb, mut iters, mut seed) = (500usize, 5usize, None::<u64>);
    while let Some(a) = args.next() {
        let mut next =
            |name: &str| args.next().and_then(|v| v.parse::<u64>().ok()).ok_or(format!("{name} needs a number"));
        match a.as_str() {
            "--mb" => mb = next("--mb")? as usize,
            "--iters" => iters = (next("--iters")? as usize).max(1),
            "--seed" => seed = Some(next("--seed")?),
            other => return Err(format!("unknown argument `{other}` (--mb N, --iters N, --seed N)")),
        }
    }
    let seed =
        seed.or_else(|| std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok())).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        });
    println!("seed {seed} (--seed {seed} or KERNELS_TEST_SEED={seed} repeats this run)");
    let seed32 = (seed ^ (seed >> 32)) as u32;
    println!(
        "NCCL_NVLS_ENABLE before: {}",
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "unset (set to 0 by the collective)".into())
    );

    let gpu = Gpu::new().map_err(|e| e.to_string())?;
    println!("adapter: {}", gpu.report());
    let mut nccl = NcclCollective::single(&gpu).map_err(|e| e.to_string())?;
    println!("{}; CUDA device {}", nccl.library(), nccl.cuda_ordinal());
    println!("NCCL_NVLS_ENABLE now: {}", std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default());
    let mut probe = Probe { failures: Vec::new() };

    // wgpu writes, CUDA reads. An odd length, poisoned (NaN) first so that a kernel that wrote
    // nothing cannot pass.
    let n = (1 << 22) + 7;
    let mut shared = nccl.shared_buffer(&gpu, n).map_err(|e| e.to_string())?;
    println!("shared buffer: {shared:?}");
    let want = || (0..n as u32).map(|i| value(i, seed32));
    let outcome = (|| {
        shared.buffer_mut().write(&gpu, &vec![f32::NAN; n]).map_err(|e| e.to_string())?;
        fill(&gpu, shared.buffer(), seed32, 0)?;
        same("wgpu's read", &shared.buffer().read(&gpu).map_err(|e| e.to_string())?, want())?;
        same("CUDA's read", &shared.cuda_read().map_err(|e| e.to_string())?, want())
    })();
    probe.check("CUDA sees what a wgpu kernel wrote", outcome);

    // One rank: the average is the value itself, bit for bit, seen by CUDA and by wgpu.
    let outcome = (|| {
        nccl.average_shared(&gpu, &mut shared, n).map_err(|e| e.to_string())?;
        same("CUDA's read", &shared.cuda_read().map_err(|e| e.to_string())?, want())?;
        same("wgpu's read", &shared.buffer().read(&gpu).map_err(|e| e.to_string())?, want())
    })();
    probe.check("one-rank NCCL all-reduce (average) of the imported memory", outcome);

    // CUDA writes, wgpu reads (the copy runs on the Vulkan queue after cuStreamSynchronize).
    let other = seed32.wrapping_add(0x5bd1_e995);
    let written: Vec<f32> = (0..n as u32).map(|i| value(i, other)).collect();
    let outcome = (|| {
        shared.cuda_write(&written).map_err(|e| e.to_string())?;
        same("wgpu's read", &shared.buffer().read(&gpu).map_err(|e| e.to_string())?, written.iter().copied())
    })();
    probe.check("wgpu sees what CUDA wrote", outcome);
    drop(shared);

    // The gradient path on per-tensor buffers through a small bucket: pieces straddle buckets.
    let lens = [1000usize, 70_001, 3, 250_000, 0, 123_457];
    let outcome = (|| {
        let mut base = 0u32;
        let mut grads = Vec::new();
        for &len in &lens {
            let g = gpu.zeros::<f32>(len).map_err(|e| e.to_string())?;
            if len > 0 {
                fill(&gpu, &g, seed32, base)?;
            }
            grads.push(g);
            base += len as u32;
        }
        nccl.set_bucket_bytes(4 * 65_536);
        let refs: Vec<&Buffer<f32>> = grads.iter().collect();
        nccl.average_gradients(&gpu, &refs).map_err(|e| e.to_string())?;
        let mut base = 0u32;
        for (g, &len) in grads.iter().zip(&lens) {
            let from = base;
            same(
                &format!("gradient of {len}"),
                &g.read(&gpu).map_err(|e| e.to_string())?,
                (0..len as u32).map(|i| value(from + i, seed32)),
            )?;
            base += len as u32;
        }
        Ok(())
    })();
    probe.check("average_gradients over 6 buffers through a 256 KiB bucket (one rank: unchanged)", outcome);

    // The small collectives on one rank.
    let outcome = (|| {
        let mut v = [1.5, -2.25, 1e300, f64::MIN_POSITIVE];
        let before = v;
        nccl.sum_f64(&mut v).map_err(|e| e.to_string())?;
        if v.map(f64::to_bits) != before.map(f64::to_bits) {
            return Err(format!("sum_f64 over one rank gave {v:?} for {before:?}"));
        }
        let mut bytes: Vec<u8> = (0..1000u32).map(|i| (i.wrapping_mul(seed32) >> 3) as u8).collect();
        let sent = bytes.clone();
        nccl.broadcast(0, &mut bytes).map_err(|e| e.to_string())?;
        if bytes != sent {
            return Err("broadcast from rank 0 changed the bytes".into());
        }
        if nccl.broadcast(1, &mut bytes).is_ok() {
            return Err("a broadcast from rank 1 of 1 was accepted".into());
        }
        nccl.barrier().map_err(|e| e.to_string())
    })();
    probe.check("sum_f64, broadcast and barrier on one rank", outcome);

    // The timed round trip: `mb` MB of gradients in 8 buffers, the default bucket and one bucket
    // holding everything.
    let total = mb * 1_000_000 / 4;
    let per = total.div_ceil(8);
    let lens: Vec<usize> = (0..8).map(|k| per.min(total - (k * per).min(total))).collect();
    let mut grads = Vec::new();
    let mut base = 0u32;
    for &len in &lens {
        let g = gpu.zeros::<f32>(len).map_err(|e| e.to_string())?;
        fill(&gpu, &g, seed32, base)?;
        grads.push(g);
        base = base.wrapping_add(len as u32);
    }
    let refs: Vec<&Buffer<f32>> = grads.iter().collect();
    let bytes = 4.0 * total as f64;
    for (label, bucket) in [("default bucket", DEFAULT_BUCKET_BYTES), ("one bucket", 4 * total)] {
        nccl.set_bucket_bytes(bucket);
        let mut times = Vec::new();
        // The first call allocates and imports the bucket: not timed.
        let outcome = (|| {
            nccl.average_gradients(&gpu, &refs).map_err(|e| e.to_string())?;
            for _ in 0..iters {
                let t = Instant::now();
                nccl.average_gradients(&gpu, &refs).map_err(|e| e.to_string())?;
                times.push(t.elapsed().as_secs_f64());
            }
            Ok(())
        })();
        if outcome.is_ok() {
            let m = median(&mut times);
            println!(
                "time  {mb} MB all-reduce round trip, {label} ({} MiB): median {:.2} ms of {iters} ({:.1} GB/s of gradients); all: {}",
                bucket.min(4 * total) >> 20,
                m * 1e3,
                bytes / m / 1e9,
                times.iter().map(|t| format!("{:.2}", t * 1e3)).collect::<Vec<_>>().join(" ")
            );
        }
        probe.check(&format!("{mb} MB round trips, {label}"), outcome);
    }
    // Only the NCCL call and its sync, on memory CUDA already holds.
    let outcome = (|| {
        let mut big = nccl.shared_buffer(&gpu, total).map_err(|e| e.to_string())?;
        nccl.average_shared(&gpu, &mut big, total).map_err(|e| e.to_string())?;
        let mut times = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            nccl.average_shared(&gpu, &mut big, total).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        let m = median(&mut times);
        println!(
            "time  {mb} MB NCCL all-reduce alone (one rank) + sync: median {:.2} ms ({:.1} GB/s)",
            m * 1e3,
            bytes / m / 1e9
        );
        Ok(())
    })();
    probe.check(&format!("{mb} MB NCCL all-reduce alone"), outcome);
    // The gradients came back unchanged after every round trip.
    let outcome = (|| {
        let mut base = 0u32;
        for (k, (g, &len)) in grads.iter().zip(&lens).enumerate() {
            let from = base;
            same(
                &format!("gradient buffer {k}"),
                &g.read(&gpu).map_err(|e| e.to_string())?,
                (0..len as u32).map(|i| value(from.wrapping_add(i), seed32)),
            )?;
            base = base.wrapping_add(len as u32);
        }
        Ok(())
    })();
    probe.check(&format!("{mb} MB of gradients unchanged after {} round trips", 2 * (iters + 1)), outcome);

    if probe.failures.is_empty() {
        println!("nccl_probe: PASS");
        Ok(())
    } else {
        Err(format!("FAILED: {}", probe.failures.join("; ")))
    }
}
