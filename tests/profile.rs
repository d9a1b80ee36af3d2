//! Profiled batches: GPU timestamps around each dispatch.

mod common;

use common::gpu;
use kernels::infrastructure::{axpy, scale};

#[test]
fn dispatches_are_timed_in_order() {
    let Some(gpu) = gpu() else { return };
    let needed = kernels::wgpu::Features::TIMESTAMP_QUERY | kernels::wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    if !gpu.features().contains(needed) {
        let e = gpu.profiled_batch(8).unwrap_err();
        assert!(matches!(e, kernels::Error::MissingFeature { .. }), "{e:?}");
        eprintln!("adapter without timestamps inside passes: checked the error only");
        return;
    }
    let n = 1 << 20;
    let x = gpu.upload(&vec![1.0f32; n]).unwrap();
    let mut y = gpu.upload(&vec![2.0f32; n]).unwrap();
    let batch = gpu.profiled_batch(2).unwrap();
    axpy(&batch, &x, &mut y, axpy::Params::new(n as u32, 3.0)).unwrap();
    scale(&batch, &mut y, scale::Params::new(n as u32, 0.5)).unwrap();
    // Past the capacity: still runs, just not timed.
    scale(&batch, &mut y, scale::Params::new(n as u32, 2.0)).unwrap();
    let profile = batch.submit_profiled().unwrap();
    assert_eq!(profile.dispatches.len(), 2);
    let d = &profile.dispatches;
    assert_eq!(d[0].kernel.qualified_name(), "infrastructure::axpy");
    assert!(
        d[0].start_ns == 0.0 && d[0].end_ns > 0.0 && d[1].start_ns >= d[0].end_ns && d[1].end_ns > d[1].start_ns,
        "{d:?}"
    );
    assert!((0.0..1.0).contains(&profile.idle_fraction()));
    assert_eq!(profile.by_kernel().len(), 2);
    assert_eq!(y.read(&gpu).unwrap()[..4], [5.0; 4]);
    eprintln!("{:?}", profile.by_kernel());
}
