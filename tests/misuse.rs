//! Every misuse the runtime can see returns `Err` with a message that names the problem: no
//! panics, no wgpu validation panics, and the context keeps working afterwards.

mod common;

use common::{gpu, gpu_with, has_f16};
use kernels::infrastructure::{axpy, copy, scale};
use kernels::{Arg, Call, Error, Gpu, GpuOptions, Grid, Record};

kernels::kernels!("tests/shaders/probe.wgsl", shared = "shaders/00_shared.wgsl");
use probe::{fixed_probe, grid_probe, half_roundtrip, subgroup_only};

/// The context still runs kernels correctly after an error.
fn still_works(gpu: &Gpu) {
    let mut x = gpu.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    scale(gpu, &mut x, scale::Params::new(3, 2.0)).unwrap();
    assert_eq!(x.read(gpu).unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn shape_requirement_fails_before_dispatch() {
    let Some(gpu) = gpu() else { return };
    let mut x = gpu.upload(&[1.0f32; 10]).unwrap();
    let e = scale(&gpu, &mut x, scale::Params::new(11, 2.0)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("infrastructure::scale")
            && msg.contains("len(x) >= p.n")
            && msg.contains("len(x) = 10")
            && msg.contains("p.n = 11"),
        "{msg}"
    );
    // Nothing ran.
    assert_eq!(x.read(&gpu).unwrap(), vec![1.0; 10]);
    let src = gpu.upload(&[1.0f32; 5]).unwrap();
    let mut dst = gpu.zeros::<f32>(8).unwrap();
    let e = copy(&gpu, &src, &mut dst, 8).unwrap_err();
    assert!(e.to_string().contains("len(src) >= n"), "{e}");
    still_works(&gpu);
}

#[test]
fn buffer_too_short_for_its_binding() {
    let Some(gpu) = gpu() else { return };
    let mut slots = gpu.zeros::<u32>(2).unwrap();
    let e = fixed_probe(&gpu, &mut slots, Grid::Workgroups(1)).unwrap_err();
    assert!(matches!(e, Error::BufferTooShort { needed: 16, got: 8, .. }), "{e:?}");
    assert!(e.to_string().contains("`slots`"), "{e}");
    let mut slots = gpu.zeros::<u32>(4).unwrap();
    fixed_probe(&gpu, &mut slots, Grid::Workgroups(1)).unwrap();
    assert_eq!(slots.read(&gpu).unwrap(), vec![1; 4]);
}

#[test]
fn grid_over_the_limits() {
    let Some(gpu) = gpu() else { return };
    let max = gpu.limits().max_compute_workgroups_per_dimension;
    let mut out = gpu.zeros::<u32>(4).unwrap();
    let mut hits = gpu.zeros::<u32>(4).unwrap();
    let e = grid_probe(&gpu, &mut out, &mut hits, 4, Grid::Explicit([max + 1, 1, 1])).unwrap_err();
    assert!(matches!(e, Error::GridTooLarge { .. }), "{e:?}");
    let e = grid_probe(&gpu, &mut out, &mut hits, 4, Grid::Workgroups(max as u64 * max as u64 + 1)).unwrap_err();
    assert!(matches!(e, Error::GridTooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains(&max.to_string()), "{e}");
    still_works(&gpu);
}

#[test]
fn kernel_needing_a_missing_feature() {
    // Without SHADER_F16 (even where the adapter has it).
    let Some(gpu) = gpu_with(GpuOptions::from_env().without(kernels::wgpu::Features::SHADER_F16)) else {
        return;
    };
    let x = gpu.upload(&[kernels::f16::from_f32(1.5); 4]).unwrap();
    let mut y = gpu.zeros::<f32>(4).unwrap();
    let e = half_roundtrip(&gpu, &x, &mut y, 4).unwrap_err();
    assert!(matches!(e, Error::MissingFeature { feature: "SHADER_F16", .. }), "{e:?}");
    assert!(e.to_string().contains("probe::half_roundtrip"), "{e}");
    // Kernels without f16 do not need it.
    still_works(&gpu);
    let warm = gpu.warm_up(probe::KERNELS).unwrap();
    assert!(warm.unsupported.iter().any(|u| u.contains("half_roundtrip")), "{warm:?}");

    // Without subgroups: a kernel with no tree variant says so; the others fall back.
    let Some(gpu) = gpu_with(GpuOptions::from_env().subgroups(false)) else {
        return;
    };
    let mut out = gpu.zeros::<u32>(256).unwrap();
    let e = subgroup_only(&gpu, &mut out, Grid::Workgroups(1)).unwrap_err();
    assert!(matches!(e, Error::MissingFeature { feature: "SUBGROUP", .. }), "{e:?}");
    still_works(&gpu);
}

#[test]
fn f16_kernel_runs_where_the_feature_exists() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "the f16 kernel") {
        return;
    }
    let vals = [0.5f32, -2.25, 1024.0, 3.0, 7.0];
    let x = gpu.upload(&vals.map(kernels::f16::from_f32)).unwrap();
    let mut y = gpu.filled(5, f32::NAN).unwrap();
    half_roundtrip(&gpu, &x, &mut y, 5).unwrap();
    assert_eq!(y.read(&gpu).unwrap(), vals.to_vec());
}

#[test]
fn same_buffer_in_a_writable_binding_twice() {
    // The typed API makes this a borrow error (tests/ui/aliased_buffer.rs); the untyped API
    // checks it at run time.
    let Some(gpu) = gpu() else { return };
    let mut y = gpu.upload(&[1.0f32; 8]).unwrap();
    let params = axpy::Params::new(8, 2.0);
    let call = Call {
        kernel: &axpy::KERNEL,
        grid: Grid::Threads(8),
        args: &[
            Arg::storage(&y, false),
            Arg::storage(&y, true),
            Arg::uniform(kernels::__private::bytemuck::bytes_of(&params)),
        ],
        overrides: &[],
    };
    let e = (&gpu).record(call).unwrap_err();
    assert!(matches!(e, Error::Aliased { .. }), "{e:?}");
    assert!(e.to_string().contains("`x` and `y`"), "{e}");
    assert_eq!(y.read(&gpu).unwrap(), vec![1.0; 8], "nothing ran");
    // Correct use of the untyped API works.
    let x = gpu.upload(&[1.0f32; 8]).unwrap();
    let call = Call {
        kernel: &axpy::KERNEL,
        grid: Grid::Threads(8),
        args: &[
            Arg::storage(&x, false),
            Arg::storage(&y, true),
            Arg::uniform(kernels::__private::bytemuck::bytes_of(&params)),
        ],
        overrides: &[],
    };
    (&gpu).record(call).unwrap();
    assert_eq!(y.read(&gpu).unwrap(), vec![3.0; 8]);
    scale(&gpu, &mut y, scale::Params::new(8, 1.0)).unwrap();
}

#[test]
fn untyped_calls_are_checked() {
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[1.0f32; 8]).unwrap();
    let y = gpu.upload(&[1.0f32; 8]).unwrap();
    let k = &axpy::KERNEL;
    let params = axpy::Params::new(8, 2.0);
    let bytes = kernels::__private::bytemuck::bytes_of(&params);
    let cases: Vec<(&str, Vec<Arg<'_>>)> = vec![
        ("too few arguments", vec![Arg::storage(&x, false)]),
        (
            "read-write binding given read-only",
            vec![Arg::storage(&x, false), Arg::storage(&y, false), Arg::uniform(bytes)],
        ),
        ("uniform of the wrong size", vec![Arg::storage(&x, false), Arg::storage(&y, true), Arg::uniform(&bytes[..4])]),
        ("buffer where a uniform goes", vec![Arg::storage(&x, false), Arg::storage(&y, true), Arg::storage(&x, false)]),
    ];
    for (what, args) in cases {
        let e = (&gpu).record(Call { kernel: k, grid: Grid::Threads(8), args: &args, overrides: &[] }).unwrap_err();
        assert!(matches!(e, Error::BadArguments { .. }), "{what}: {e:?}");
    }
    still_works(&gpu);
}

#[test]
fn buffers_of_another_context() {
    let (Some(a), Some(b)) = (gpu(), gpu()) else {
        return;
    };
    let mut x = a.upload(&[1.0f32; 4]).unwrap();
    let e = scale(&b, &mut x, scale::Params::new(4, 2.0)).unwrap_err();
    assert!(matches!(e, Error::ForeignBuffer { .. }), "{e:?}");
    assert!(x.read(&b).is_err());
    still_works(&a);
    still_works(&b);
}

#[test]
fn buffers_over_the_device_limits() {
    let Some(gpu) = gpu() else { return };
    let limits = gpu.limits().clone();
    let e = gpu.zeros::<f32>((limits.max_buffer_size / 4 + 1) as usize).unwrap_err();
    assert!(matches!(e, Error::BufferTooLarge { .. }), "{e:?}");
    let binding = limits.max_storage_buffer_binding_size;
    if binding < limits.max_buffer_size && binding <= 1 << 30 {
        let n = (binding / 4 + 1) as usize;
        let mut x = gpu.zeros::<f32>(n).unwrap();
        let e = scale(&gpu, &mut x, scale::Params::new(1, 2.0)).unwrap_err();
        assert!(matches!(e, Error::BindingTooLarge { what: "storage", .. }), "{e:?}");
    }
    still_works(&gpu);
}

#[test]
fn zero_sized_work_is_a_no_op() {
    let Some(gpu) = gpu() else { return };
    let mut x = gpu.upload(&[5.0f32; 3]).unwrap();
    scale(&gpu, &mut x, scale::Params::new(0, 2.0)).unwrap();
    assert_eq!(x.read(&gpu).unwrap(), vec![5.0; 3]);
    let mut empty = gpu.zeros::<f32>(0).unwrap();
    assert!(empty.is_empty());
    scale(&gpu, &mut empty, scale::Params::new(0, 2.0)).unwrap();
    assert_eq!(empty.read(&gpu).unwrap(), Vec::<f32>::new());
}

#[test]
fn writes_of_the_wrong_length() {
    let Some(gpu) = gpu() else { return };
    let mut x = gpu.zeros::<f32>(4).unwrap();
    assert!(matches!(x.write(&gpu, &[1.0; 3]), Err(Error::LengthMismatch { .. })));
    x.write(&gpu, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(x.read(&gpu).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn read_ranges() {
    let Some(gpu) = gpu() else { return };
    let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let x = gpu.upload(&data).unwrap();
    assert_eq!(x.read_range(&gpu, 10..13).unwrap(), vec![10.0, 11.0, 12.0]);
    assert_eq!(x.read_range(&gpu, 99..100).unwrap(), vec![99.0]);
    assert!(x.read_range(&gpu, 5..5).unwrap().is_empty());
    assert!(matches!(x.read_range(&gpu, 90..101), Err(Error::LengthMismatch { .. })));
    // Elements narrower than the 4-byte copy unit.
    let h: Vec<kernels::f16> = (0..9).map(|i| kernels::f16::from_f32(i as f32)).collect();
    let hb = gpu.upload(&h).unwrap();
    assert_eq!(hb.read_range(&gpu, 3..6).unwrap(), h[3..6].to_vec());
    assert_eq!(hb.read_range(&gpu, 8..9).unwrap(), h[8..9].to_vec());
}

/// `scale` as a kernel whose first variant needs tensor cores (16×16×16, f16 A/B, f32 C), with
/// scale's own variants as the fallback, and a kernel with only that variant. The coop variant's
/// source is not WGSL: building it would fail, so a run proves the fallback was chosen.
fn coop_kernels() -> (&'static kernels::KernelDef, &'static kernels::KernelDef) {
    use kernels::{CoopConfig, CoopScalar, KernelDef, VariantDef};
    const C16: CoopConfig = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };
    let coop = VariantDef {
        subgroups: false,
        f16: true,
        coop: &[C16],
        wgsl: "not WGSL",
        browser_wgsl: "",
        features: &[],
        overrides: &[],
    };
    let k = &scale::KERNEL;
    let def = |variants: Vec<VariantDef>| -> &'static KernelDef {
        Box::leak(Box::new(KernelDef {
            name: k.name,
            module: "coop_probe",
            file: k.file,
            line: k.line,
            doc: k.doc,
            workgroup_size: k.workgroup_size,
            workgroup_size_overrides: k.workgroup_size_overrides,
            immediate_size: k.immediate_size,
            bindings: k.bindings,
            resources: k.resources,
            overrides: k.overrides,
            grid: k.grid,
            grid_expr: k.grid_expr,
            requires: k.requires,
            variants: Box::leak(variants.into_boxed_slice()),
            unchecked: k.unchecked,
            source: None,
        }))
    };
    let with_fallback = def([coop].into_iter().chain(k.variants.iter().copied()).collect());
    (with_fallback, def(vec![coop]))
}

/// Runs `kernel` (scale's bindings) on 5 values through the untyped API.
fn run_scale(gpu: &Gpu, kernel: &'static kernels::KernelDef) -> Result<Vec<f32>, Error> {
    let y = gpu.upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
    let params = scale::Params::new(5, 3.0);
    let args = [Arg::storage(&y, true), Arg::uniform(kernels::__private::bytemuck::bytes_of(&params))];
    gpu.record(Call { kernel, grid: Grid::Threads(5), args: &args, overrides: &[] })?;
    y.read(gpu)
}

#[test]
fn tensor_core_variants_only_where_offered() {
    let (with_fallback, coop_only) = coop_kernels();
    let check_off = |gpu: &Gpu, why: &str| {
        assert!(gpu.variant_for(with_fallback).unwrap().coop.is_empty(), "{why}: the fallback is chosen");
        assert_eq!(run_scale(gpu, with_fallback).unwrap(), vec![3.0, 6.0, 9.0, 12.0, 15.0], "{why}");
        let e = gpu.variant_for(coop_only).unwrap_err();
        assert!(matches!(e, Error::MissingFeature { feature: "EXPERIMENTAL_COOPERATIVE_MATRIX", .. }), "{why}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains("coop_probe::scale") && msg.contains("16×16×16 (A/B f16, C f32)"), "{why}: {msg}");
        let e = run_scale(gpu, coop_only).unwrap_err();
        assert!(matches!(e, Error::MissingFeature { .. }), "{why}: {e:?}");
        let warm = gpu.warm_up([&coop_only, &with_fallback]).unwrap();
        assert_eq!((warm.built, warm.unsupported.len()), (1, 1), "{why}: {warm:?}");
        still_works(gpu);
    };
    let Some(gpu) = gpu() else { return };
    let c16 = kernels::CoopConfig { m: 16, n: 16, k: 16, ab: kernels::CoopScalar::F16, cr: kernels::CoopScalar::F32 };
    if gpu.cooperative_matrices().contains(&c16) {
        // Tensor cores here (an H200): the coop variant is the one chosen.
        assert!(gpu.features().contains(kernels::wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX));
        assert_eq!(gpu.variant_for(with_fallback).unwrap().coop, &[c16]);
        assert_eq!(gpu.variant_for(coop_only).unwrap().coop, &[c16]);
    } else {
        // lavapipe, and every adapter without that configuration.
        check_off(&gpu, "no tensor cores");
    }
    // Turned off by the options: the fallback everywhere, and the message says so where the
    // adapter has them.
    let Some(off) = gpu_with(GpuOptions::from_env().cooperative_matrix(false)) else { return };
    assert!(off.cooperative_matrices().is_empty() && !off.report().cooperative_matrix);
    assert!(!off.features().contains(kernels::wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX));
    check_off(&off, "tensor cores turned off");
    if off.report().cooperative_matrix_configs.contains(&c16) {
        let msg = off.variant_for(coop_only).unwrap_err().to_string();
        assert!(msg.contains("turned off by KERNELS_COOPERATIVE_MATRIX=0"), "{msg}");
    }
}

/// wgpu's errors go to the call that caused them: one thread uses a buffer destroyed through its
/// raw handle in every kind of call (each must fail), while others run correct calls, checked
/// against the CPU, that must never fail.
#[test]
fn errors_stay_with_the_call_that_caused_them() {
    let Some(gpu) = gpu() else { return };
    let done = std::sync::atomic::AtomicBool::new(false);
    let wgpu_error = |e: &Error| matches!(e, Error::Wgpu { .. } | Error::Submit { .. });
    std::thread::scope(|s| {
        let misuse = s.spawn(|| {
            let mut failures = 0;
            for round in 0..200 {
                let mut bad = gpu.upload(&[1.0f32; 64]).unwrap();
                bad.raw().destroy();
                let e = scale(&gpu, &mut bad, scale::Params::new(64, 2.0)).unwrap_err();
                if round == 0 {
                    eprintln!("a call: {e}");
                }
                assert!(wgpu_error(&e) && e.to_string().contains("infrastructure::scale"), "round {round}: {e}");
                let e = bad.read(&gpu).unwrap_err();
                assert!(wgpu_error(&e) && e.to_string().contains("reading a buffer"), "round {round}: {e}");
                assert!(wgpu_error(&bad.write(&gpu, &[0.0; 64]).unwrap_err()), "round {round}");
                assert!(wgpu_error(&bad.read_range(&gpu, 3..9).unwrap_err()), "round {round}");
                // In a batch with a correct call: the batch fails as a whole, naming its kernels.
                let good = gpu.upload(&[1.0f32; 64]).unwrap();
                let batch = gpu.batch();
                let recorded = copy(&batch, &good, &mut bad, 64).and_then(|()| batch.submit());
                let e = recorded.unwrap_err();
                if round == 0 {
                    eprintln!("a batch: {e}");
                }
                assert!(wgpu_error(&e) && e.to_string().contains("infrastructure::copy"), "round {round}: {e}");
                failures += 5;
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            failures
        });
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let (gpu, done) = (&gpu, &done);
                s.spawn(move || {
                    let mut rng = common::rng(&format!("errors per call, thread {t}"));
                    let mut calls = 0;
                    // At least 20 rounds, and on until the misusing thread is through.
                    while calls < 20 * 6 || !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let n = 1 + rand::Rng::random_range(&mut rng, 0..3000usize);
                        let alpha: f32 = rand::Rng::random_range(&mut rng, -2.0..2.0);
                        let xs = common::uniform(&mut rng, n, -1.0, 1.0);
                        let ys = common::uniform(&mut rng, n, -1.0, 1.0);
                        let x = gpu.upload(&xs).unwrap();
                        let mut y = gpu.upload(&ys).unwrap();
                        let batch = gpu.batch();
                        axpy(&batch, &x, &mut y, axpy::Params::new(n as u32, alpha)).unwrap();
                        scale(&batch, &mut y, scale::Params::new(n as u32, 0.5)).unwrap();
                        batch.submit().unwrap();
                        let mut z = gpu.filled(n, f32::NAN).unwrap();
                        copy(gpu, &y, &mut z, n as u32).unwrap();
                        let got = z.read(gpu).unwrap();
                        assert_eq!(z.read_range(gpu, 0..1).unwrap()[0], got[0]);
                        gpu.wait().unwrap();
                        // Each element within the rounding of its own arithmetic: `y + αx` can
                        // nearly cancel, so a bound relative to the result's size cannot hold.
                        let exact = |v: f32| common::Rounded::exact(v as f64);
                        let want: Vec<common::Rounded> = xs
                            .iter()
                            .zip(&ys)
                            .map(|(&x, &y)| exact(y).add(exact(alpha).mul(exact(x))).mul(exact(0.5)))
                            .collect();
                        common::assert_within("axpy then scale", &got, &want);
                        calls += 6;
                    }
                    calls
                })
            })
            .collect();
        let failures = misuse.join().unwrap();
        let calls: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        eprintln!("{failures} failing calls on one thread, {calls} correct calls on three");
    });
    still_works(&gpu);
}

/// A submission wgpu rejects (a buffer destroyed after its calls were recorded) is
/// `Error::Submit`, naming every kernel in it.
#[test]
fn a_failed_submission_names_its_kernels() {
    let Some(gpu) = gpu() else { return };
    let x = gpu.upload(&[1.0f32; 32]).unwrap();
    let mut y = gpu.upload(&[1.0f32; 32]).unwrap();
    let batch = gpu.batch();
    axpy(&batch, &x, &mut y, axpy::Params::new(32, 1.0)).unwrap();
    scale(&batch, &mut y, scale::Params::new(32, 2.0)).unwrap();
    axpy(&batch, &x, &mut y, axpy::Params::new(32, 1.0)).unwrap();
    y.raw().destroy();
    let e = batch.submit().unwrap_err();
    let Error::Submit { kernels, .. } = &e else { panic!("{e:?}") };
    assert_eq!(kernels, &["infrastructure::axpy", "infrastructure::scale"]);
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(
        msg.starts_with("submitting kernels `infrastructure::axpy`, `infrastructure::scale`: wgpu reported: "),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
    still_works(&gpu);
}

/// After the device is lost every call says so, not only the first; a new context works.
#[test]
fn a_lost_device_is_reported_by_every_later_call() {
    let Some(gpu) = gpu() else { return };
    let mut x = gpu.upload(&[1.0f32; 16]).unwrap();
    scale(&gpu, &mut x, scale::Params::new(16, 2.0)).unwrap();
    gpu.device().destroy();
    // wgpu reports the loss once the queue is idle, which a wait makes it.
    let lost = |what: &str, r: Result<(), Error>| {
        let e = r.expect_err(what);
        assert!(matches!(e, Error::DeviceLost { .. }), "{what}: {e:?}");
        assert!(e.to_string().contains("device is lost") && e.to_string().contains("open a new Gpu"), "{e}");
    };
    lost("wait", gpu.wait());
    for round in 0..3 {
        eprintln!("round {round}: {}", gpu.wait().unwrap_err());
        lost("wait", gpu.wait());
        lost("upload", gpu.upload(&[1.0f32; 4]).map(drop));
        lost("zeros", gpu.zeros::<f32>(4).map(drop));
        lost("filled", gpu.filled(4, 1u32).map(drop));
        lost("call", scale(&gpu, &mut x, scale::Params::new(16, 2.0)));
        let batch = gpu.batch();
        lost("recording", scale(&batch, &mut x, scale::Params::new(16, 2.0)));
        lost("submit", batch.submit());
        lost("read", x.read(&gpu).map(drop));
        lost("read_range", x.read_range(&gpu, 1..3).map(drop));
        lost("write", x.write(&gpu, &[0.0; 16]));
        lost("wait_async", pollster::block_on(gpu.wait_async()));
        if gpu.features().contains(kernels::wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES) {
            lost("profiled_batch", gpu.profiled_batch(4).map(drop));
        }
    }
    drop((x, gpu));
    let Some(fresh) = common::gpu() else { return };
    still_works(&fresh);
}

/// Sizes past the device's limit, or past `u64`, are errors before anything is allocated on
/// the host or the GPU.
#[test]
fn sizes_are_checked_before_allocation() {
    let Some(gpu) = gpu() else { return };
    let limit = gpu.limits().max_buffer_size;
    let too_large = |what: &str, e: Error| {
        assert!(matches!(e, Error::BufferTooLarge { .. }), "{what}: {e:?}");
        assert!(e.to_string().contains(&limit.to_string()), "{what}: {e}");
        e
    };
    // The padded size overflows u64.
    let e = too_large("zeros f32 usize::MAX", gpu.zeros::<f32>(usize::MAX).unwrap_err());
    assert!(e.to_string().contains("more than 18446744073709551615 bytes"), "{e}");
    too_large("zeros u8 usize::MAX", gpu.zeros::<u8>(usize::MAX).unwrap_err());
    too_large("zeros [f32; 4]", gpu.zeros::<[f32; 4]>(usize::MAX / 8).unwrap_err());
    // The host vector of copies is not built first.
    too_large("filled usize::MAX", gpu.filled(usize::MAX, 1.0f32).unwrap_err());
    let e = too_large("filled past the limit", gpu.filled((limit / 4 + 1) as usize, 1.0f32).unwrap_err());
    assert!(e.to_string().contains(&((limit / 4 + 1) * 4).to_string()), "{e}");
    // Timestamps for u32::MAX dispatches: capped, not an overflow.
    match gpu.profiled_batch(u32::MAX) {
        Ok(batch) => {
            let mut x = gpu.upload(&[1.0f32; 8]).unwrap();
            for _ in 0..3 {
                scale(&batch, &mut x, scale::Params::new(8, 2.0)).unwrap();
            }
            assert_eq!(batch.submit_profiled().unwrap().dispatches.len(), 3);
            assert_eq!(x.read(&gpu).unwrap(), vec![8.0; 8]);
        }
        Err(e) => assert!(matches!(e, Error::MissingFeature { .. }), "{e:?}"),
    }
    still_works(&gpu);
}

/// `filled` writes through a few MiB at a time: lengths past one chunk, odd lengths of 2-byte
/// elements, and the empty buffer all come back whole.
#[test]
fn filled_buffers_past_one_chunk() {
    let Some(gpu) = gpu() else { return };
    let mut rng = common::rng("filled");
    let v: f32 = rand::Rng::random_range(&mut rng, -9.0..9.0);
    for n in [0, 1, 5, (1 << 20) + 3] {
        assert!(gpu.filled(n, v).unwrap().read(&gpu).unwrap().iter().all(|&x| x == v), "f32 n={n}");
    }
    let h = kernels::f16::from_f32(v);
    for n in [3, (2 << 20) + 5] {
        let got = gpu.filled(n, h).unwrap().read(&gpu).unwrap();
        assert!(got.len() == n && got.iter().all(|&x| x == h), "f16 n={n}");
    }
}

/// No adapter matches: the message says what was asked for where it was asked (here the
/// options, not `KERNELS_ADAPTER`) and lists the adapters there are.
#[test]
fn no_adapter_names_the_option_that_asked() {
    if gpu().is_none() {
        return;
    }
    let e = Gpu::with_options_blocking(GpuOptions::default().adapter("vulkan:no-such-adapter")).unwrap_err();
    let msg = e.to_string();
    let Error::NoAdapter { available, .. } = &e else { panic!("{e:?}") };
    assert!(msg.starts_with("no GPU adapter matches GpuOptions::adapter(\"vulkan:no-such-adapter\"): "), "{msg}");
    assert!(!msg.contains("KERNELS_ADAPTER"), "{msg}");
    assert!(!available.is_empty() && available.iter().all(|a| msg.contains(a.as_str())), "{msg}");
}

mod coop {
    kernels::kernels!("tests/shaders/coop_probe.wgsl", shared = none);
}

/// Kernels the macro gives a tensor-core variant: where 16×16×16 (f16 A/B, f32 C) is enabled
/// the coop variant runs, elsewhere (lavapipe, `cooperative_matrix(false)`) the portable one;
/// either way the tile is right. A kernel with no fallback is `MissingFeature` there.
#[test]
fn macro_coop_variants_run_where_offered_and_fall_back_elsewhere() {
    use coop::coop_probe::{tile, tile_coop_only};
    let c16 = kernels::CoopConfig { m: 16, n: 16, k: 16, ab: kernels::CoopScalar::F16, cr: kernels::CoopScalar::F32 };
    assert_eq!(tile::KERNEL.variants[0].coop, &[c16], "the macro declares the configuration");
    let check = |gpu: &Gpu, what: &str| {
        if !gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
            eprintln!("{what}: no SHADER_F16, nothing to run");
            return;
        }
        let offered = gpu.cooperative_matrices().contains(&c16);
        assert_eq!(!gpu.variant_for(&tile::KERNEL).unwrap().coop.is_empty(), offered, "{what}");
        let mut rng = common::rng(what);
        let xs: Vec<kernels::f16> =
            common::uniform(&mut rng, 512, -2.0, 2.0).into_iter().map(kernels::f16::from_f32).collect();
        let (av, bv) = xs.split_at(256);
        let (a, b) = (gpu.upload(av).unwrap(), gpu.upload(bv).unwrap());
        let term = |e: usize, k: usize| av[(e / 16) * 16 + k].to_f64() * bv[k * 16 + e % 16].to_f64();
        let want: Vec<f64> = (0..256).map(|e| (0..16).map(|k| term(e, k)).sum()).collect();
        // Each f16·f16 product is exact in f32; the 16-term f32 sum is within 16 roundings of
        // Σ|ab|, whatever order the variant adds in — 2⁻²³ each, so that tensor cores that
        // round toward zero are bounded too.
        let bound: Vec<f64> =
            (0..256).map(|e| 16.0 * 2f64.powi(-23) * (0..16).map(|k| term(e, k).abs()).sum::<f64>()).collect();
        let within = |label: &str, got: &[f32]| {
            for (i, ((g, w), b)) in got.iter().zip(&want).zip(&bound).enumerate() {
                assert!((*g as f64 - w).abs() <= *b, "{what}: {label}: element {i} is {g}, want {w} within {b:e}");
            }
        };
        let mut c = gpu.filled(256, f32::NAN).unwrap();
        tile(gpu, &a, &b, &mut c, Grid::Workgroups(1)).unwrap();
        within("tile", &c.read(gpu).unwrap());
        let mut c = gpu.filled(256, f32::NAN).unwrap();
        match tile_coop_only(gpu, &a, &b, &mut c, Grid::Workgroups(1)) {
            Ok(()) => {
                assert!(offered, "{what}: a coop-only kernel ran without tensor cores");
                within("coop only", &c.read(gpu).unwrap());
            }
            Err(e) => {
                assert!(!offered, "{what}: {e}");
                assert!(matches!(e, Error::MissingFeature { feature: "EXPERIMENTAL_COOPERATIVE_MATRIX", .. }), "{e:?}");
                assert!(e.to_string().contains("16×16×16 (A/B f16, C f32)"), "{e}");
                assert!(c.read(gpu).unwrap().iter().all(|v| v.is_nan()), "{what}: nothing ran");
            }
        }
    };
    let Some(gpu) = gpu() else { return };
    check(&gpu, "coop tile");
    let Some(off) = gpu_with(GpuOptions::from_env().cooperative_matrix(false)) else { return };
    check(&off, "coop tile, tensor cores off");
}
