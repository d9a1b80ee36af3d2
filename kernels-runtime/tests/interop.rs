//! Exportable buffers on the test adapter (lavapipe in CI): allocated cleared, written by a
//! compute kernel, exported as file descriptors and imported into a second device, which reads
//! the same bytes. Integer words make every check exact.
#![cfg(target_os = "linux")]

use kernels_runtime::{Buffer, Error, Gpu, GpuOptions, wgpu};

/// The test GPU, or `None` with a loud message; under `CI=true` a missing adapter fails.
fn gpu() -> Option<Gpu> {
    match Gpu::with_options_blocking(GpuOptions::from_env()) {
        Ok(g) => Some(g),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI=true but no GPU adapter: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: no GPU adapter ({e}); install mesa-vulkan-drivers for lavapipe");
            None
        }
    }
}

/// `KERNELS_TEST_SEED`, or the clock; printed so a failure can be replayed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: KERNELS_TEST_SEED={seed}");
    seed
}

/// `n` random words (splitmix64).
fn words(state: &mut u64, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 32) as u32
        })
        .collect()
}

/// The index of the first word that differs, and both words, or `None` when all are equal.
fn first_difference(got: &[u32], want: &[u32]) -> Option<(usize, u32, u32)> {
    assert_eq!(got.len(), want.len(), "lengths differ");
    got.iter().zip(want).enumerate().find(|(_, (g, w))| g != w).map(|(i, (&g, &w))| (i, g, w))
}

/// The kernel's function of a word and its index.
fn mix(word: u32, i: u32) -> u32 {
    word ^ i.wrapping_mul(0x9e37_79b9)
}

const SHADER: &str = "
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&src)) {
        dst[i] = src[i] ^ (i * 0x9e3779b9u);
    }
}
";

/// `dst[i] = mix(src[i], i)` through a compute pipeline built with plain wgpu.
fn run_mix(gpu: &Gpu, src: &Buffer<u32>, dst: &Buffer<u32>) {
    let device = gpu.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mix"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("mix"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: src.raw().as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: dst.raw().as_entire_binding() },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(src.len().div_ceil(64) as u32, 1, 1);
    }
    gpu.queue().submit([encoder.finish()]);
    gpu.wait().unwrap();
}

#[test]
fn exported_memory_holds_what_a_kernel_wrote_and_an_importer_sees_the_same_bytes() {
    let Some(gpu) = gpu() else { return };
    let mut state = seed("exported_memory_holds_what_a_kernel_wrote_and_an_importer_sees_the_same_bytes");
    // Not a multiple of the workgroup: the kernel's bounds check matters.
    let n = (1 << 20) + 13;
    let mut shared = gpu.exportable_zeros::<u32>(n).unwrap();
    let info = shared.info();
    assert!(info.dedicated && info.buffer_size == 4 * n as u64 && info.allocation_size >= info.buffer_size, "{info:?}");
    assert_eq!(shared.len(), n);
    assert!(shared.read(&gpu).unwrap().iter().all(|&w| w == 0), "a new exportable buffer is not zeroed");

    // Poisoned (NaN bits), then overwritten by the kernel.
    shared.write(&gpu, &vec![0x7fc0_0000; n]).unwrap();
    let input = words(&mut state, n);
    let src = gpu.upload(&input).unwrap();
    run_mix(&gpu, &src, &shared);
    let want: Vec<u32> = input.iter().enumerate().map(|(i, &w)| mix(w, i as u32)).collect();
    let got = shared.read(&gpu).unwrap();
    assert_eq!(first_difference(&got, &want), None, "the kernel's words (index, got, want)");

    // Each export is a new descriptor.
    let (a, b) = (shared.export_fd().unwrap(), shared.export_fd().unwrap());
    {
        use std::os::fd::AsRawFd;
        assert_ne!(a.as_raw_fd(), b.as_raw_fd());
    }
    drop(b);

    // A second device on the same GPU imports the memory and reads the kernel's words. Only the
    // bytes at the time of the import are checked: lavapipe (Mesa 22.3) gives the importer a
    // copy, so later writes on either side are not seen by the other there. That the memory is
    // live on both sides is what the NCCL probe checks on an NVIDIA GPU, with CUDA.
    let other = Gpu::with_options_blocking(GpuOptions::from_env()).unwrap();
    let imported = other.import_buffer::<u32>(a, &info, n).unwrap();
    let seen = imported.read(&other).unwrap();
    assert_eq!(first_difference(&seen, &want), None, "the importer reads other bytes than the exporter wrote");

    // A prefix of the memory may be imported; more than it holds may not.
    let prefix = other.import_buffer::<u32>(shared.export_fd().unwrap(), &info, 1000).unwrap();
    assert_eq!(first_difference(&prefix.read(&other).unwrap(), &want[..1000]), None);
    let over = other.import_buffer::<u32>(shared.export_fd().unwrap(), &info, n + 1).unwrap_err();
    assert!(matches!(&over, Error::ExternalMemory(m) if m.contains("holds")), "{over}");
    let mut elsewhere = info;
    elsewhere.device_uuid[0] ^= 0xff;
    let foreign = other.import_buffer::<u32>(shared.export_fd().unwrap(), &elsewhere, n).unwrap_err();
    assert!(matches!(&foreign, Error::ExternalMemory(m) if m.contains("another GPU")), "{foreign}");

    // The memory outlives the exporter's buffer while an import holds it.
    drop(shared);
    drop(gpu);
    assert_eq!(first_difference(&imported.read(&other).unwrap(), &want), None);
}

#[test]
fn an_exportable_buffer_is_a_buffer_kernels_and_copies_take() {
    let Some(gpu) = gpu() else { return };
    let mut state = seed("an_exportable_buffer_is_a_buffer_kernels_and_copies_take");
    let n = 4099;
    let values: Vec<f32> = words(&mut state, n).iter().map(|&w| (w as f32 / u32::MAX as f32) * 2.0 - 1.0).collect();
    let src = gpu.upload(&values).unwrap();
    let flat = gpu.exportable_zeros::<f32>(2 * n).unwrap();
    let dst = gpu.filled(n, f32::NAN).unwrap();
    // In at an offset, and back out, as the gradient all-reduce packs buffers.
    let mut encoder = gpu.device().create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(src.raw(), 0, flat.raw(), 4 * n as u64, 4 * n as u64);
    encoder.copy_buffer_to_buffer(flat.raw(), 4 * n as u64, dst.raw(), 0, 4 * n as u64);
    gpu.queue().submit([encoder.finish()]);
    let got = dst.read(&gpu).unwrap();
    assert!(
        got.iter().zip(&values).all(|(g, v)| g.to_bits() == v.to_bits()),
        "the copies through the buffer changed bits"
    );
    let whole = flat.read(&gpu).unwrap();
    assert!(whole[..n].iter().all(|&x| x.to_bits() == 0), "the copy wrote outside its range");
    assert_eq!(
        whole[n..].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        values.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );

    // The device's buffer-size limit is checked before anything is allocated.
    let too_big = gpu.exportable_zeros::<f32>((gpu.limits().max_buffer_size / 4 + 1) as usize).unwrap_err();
    assert!(matches!(too_big, Error::BufferTooLarge { .. }), "{too_big}");
}
