//! Build-time check of the tensor-core sweep's generated kernels (`benches/coop`): every kernel
//! the sweep can build parses, validates with naga's COOPERATIVE_MATRIX | SHADER_FLOAT16 |
//! SUBGROUP capabilities and goes through naga's SPIR-V writer (checked and unchecked options)
//! without a panic; the kernels' index arithmetic, run by a CPU emulator with the very
//! expressions printed into the WGSL, matches a float64 reference on fresh random inputs, with
//! no out-of-bounds access, misaligned coop pointer or race between barriers. No GPU needed.

#[path = "../benches/coop/mod.rs"]
mod coop;

use coop::emu::emulate;
use coop::kernel::{Design, Dims, Env, Epilogue, Kernel, Layout, Load, Prec, Shape, Staging, Step, c, v};
use coop::num::{Operands, Rng, check, f16_to_f32, f32_to_f16, sample_points};
use coop::plan;

fn seed(test: &str) -> u64 {
    let s = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: KERNELS_TEST_SEED={s}");
    s
}

#[test]
fn f16_conversion_round_trips_and_rounds_to_nearest_even() {
    // Every finite f16 survives f16 → f32 → f16.
    for h in 0..=u16::MAX {
        let x = f16_to_f32(h);
        if x.is_nan() {
            assert!(f16_to_f32(f32_to_f16(x)).is_nan());
            continue;
        }
        assert_eq!(f32_to_f16(x), h, "bits {h:#06x} ({x})");
    }
    // Ties go to even, above-ties up, in the normal and the subnormal range.
    assert_eq!(f16_to_f32(f32_to_f16(1.0 + 2f32.powi(-11))), 1.0);
    assert_eq!(f16_to_f32(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11))), 1.0 + 2f32.powi(-9));
    assert_eq!(f16_to_f32(f32_to_f16(1.0 + 2f32.powi(-11) + 2f32.powi(-20))), 1.0 + 2f32.powi(-10));
    assert_eq!(f16_to_f32(f32_to_f16(2f32.powi(-25))), 0.0);
    assert_eq!(f16_to_f32(f32_to_f16(3.0 * 2f32.powi(-25))), 2f32.powi(-23));
    assert_eq!(f16_to_f32(f32_to_f16(2f32.powi(-25) * 1.0001)), 2f32.powi(-24));
    assert_eq!(f16_to_f32(f32_to_f16(65504.0)), 65504.0);
    assert_eq!(f16_to_f32(f32_to_f16(65520.0)), f32::INFINITY);
    assert_eq!(f16_to_f32(f32_to_f16(-65519.0)), -65504.0);
    // Rounding error is at most half an ulp on random values.
    let mut rng = Rng::new(seed("f16"));
    for _ in 0..100_000 {
        let x = rng.sym() * 100.0;
        let q = f16_to_f32(f32_to_f16(x));
        let ulp = 2f32.powi((x.abs().log2().floor() as i32).max(-14) - 10);
        assert!((q - x).abs() <= ulp / 2.0, "{x} → {q}");
    }
}

#[test]
fn expressions_fold_print_and_evaluate() {
    let e = (v("a") + 0) * 1 + c(3) * 4;
    assert_eq!(e.wgsl(), "(a + 12u)");
    let mut env = Env::new();
    env.insert("a", 5);
    assert_eq!(e.eval(&env), Ok(17));
    assert!((c(1) - v("a")).eval(&env).is_err(), "underflow must be an error");
    assert!(v("b").eval(&env).is_err(), "unbound variable must be an error");
    let s = coop::kernel::sel(coop::kernel::lt(v("a"), c(4)), c(1), c(2));
    assert_eq!(s.wgsl(), "select(2u, 1u, (a < 4u))");
    assert_eq!(s.eval(&env), Ok(2));
}

#[test]
fn swizzled_block_order_covers_every_block_once() {
    let mut d = Design::new(64, 64, 32, 2, 2, Staging::Double);
    for g in [0u32, 1, 3, 8] {
        d.swizzle = g;
        for (m, n) in [(64 * 5, 64 * 7), (64 * 8, 64 * 3), (64 * 13, 64), (64, 64 * 9)] {
            let k = Kernel::new(d, Layout::XWt);
            let s = Shape::new(m, 64, n, Layout::XWt);
            let [gx, gy, _] = k.grid(&s);
            let (bx_n, by_n) = (n / 64, m / 64);
            let mut seen = vec![0u32; (bx_n * by_n) as usize];
            for y in 0..gy {
                for x in 0..gx {
                    let mut env = Env::new();
                    for (name, val) in coop::kernel::DIM_NAMES.iter().zip(k.dim_values(&s)) {
                        env.insert(name, val);
                    }
                    env.insert("wg.x", x);
                    env.insert("wg.y", y);
                    env.insert("wg.z", 0);
                    for (name, e) in k.wg_lets() {
                        let val = e.eval(&env).unwrap();
                        env.insert(name, val);
                    }
                    let (bx, by) = (env["bx"], env["by"]);
                    assert!(bx < bx_n && by < by_n, "G={g} {m}x{n}: ({x},{y}) → ({bx},{by})");
                    seen[(by * bx_n + bx) as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "G={g} {m}x{n}: {seen:?}");
        }
    }
}

/// A seeded sample of `n` items (all of them with `KERNELS_SWEEP_ALL=1`): the whole sweep takes
/// minutes in a debug build, and the sweep binary checks every kernel itself before it runs
/// (`coop_sweep --cpu-check`), so CI checks a fresh sample each run.
fn sample<T>(items: Vec<T>, n: usize, test: &str) -> Vec<T> {
    if std::env::var("KERNELS_SWEEP_ALL").is_ok_and(|v| v == "1") || items.len() <= n {
        return items;
    }
    let mut rng = Rng::new(seed(test));
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let len = slots.len();
    // A partial Fisher–Yates shuffle: the first n slots become the sample.
    for i in 0..n {
        let j = i + (rng.next_u64() as usize) % (len - i);
        slots.swap(i, j);
    }
    slots.into_iter().take(n).map(|t| t.expect("each slot taken once")).collect()
}

#[test]
fn every_sweep_kernel_validates_and_writes_spirv() {
    let all = plan::every_kernel(32);
    assert!(all.len() > 300, "only {} kernels", all.len());
    let kernels = sample(all, 40, "sweep sample");
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let chunk = kernels.len().div_ceil(threads);
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = kernels
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|(k, shape)| {
                            coop::check::check_kernel(k, shape).err().map(|e| format!("{}: {e}", k.label()))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let helpers = coop::check::check_helpers().expect("helper kernels");
    eprintln!("{} sweep kernels and {helpers} helper kernels checked", kernels.len());
    assert!(failures.is_empty(), "{} of {} kernels fail:\n{}", failures.len(), kernels.len(), failures.join("\n"));
}

#[test]
fn generated_wgsl_obeys_the_naga_pitfalls() {
    for (k, shape) in sample(plan::every_kernel(32), 80, "pitfalls sample") {
        let src = k.wgsl(Some(&shape)).unwrap();
        let label = k.label();
        assert!(src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;"), "{label}");
        // Every coop access goes through let-bound index and stride (naga 30.0.2 writer bug).
        for line in src.lines() {
            for f in ["coopStoreT(", "coopStore(", "coopLoadT<", "coopLoad<"] {
                if let Some(at) = line.find(f) {
                    let rest = &line[at..];
                    let args = &rest[rest.find('(').unwrap()..];
                    assert!(
                        args.contains("[o") && (args.contains(", s)") || args.contains(", s") && args.contains("_")),
                        "{label}: coop access without let-bound index/stride: {line}"
                    );
                }
            }
            assert!(!line.contains("f32(f16("), "{label}: f32(f16(x)) round trip: {line}");
        }
        // No module-scope A, B or C.
        for name in ["A", "B", "C"] {
            for decl in [format!("var<storage, read> {name}:"), format!("const {name}:"), format!("override {name}:")] {
                assert!(!src.contains(&decl), "{label}: module-scope {name}");
            }
        }
        // Split kernels use quantizeToF16 for the hi part.
        if k.d.prec.split() && k.d.prec.f32_inputs() {
            assert!(src.contains("quantizeToF16"), "{label}");
        }
    }
}

#[test]
fn spirv_check_reports_the_coop_store_writer_panic() {
    // naga 30.0.2 validates this but its SPIR-V writer panics ("Expression [N] is not cached"):
    // the coopStoreT stride is an inline expression (an inline index was written fine here). The
    // check must turn the panic into an error.
    let src = "enable f16;\nenable wgpu_cooperative_matrix;\n\
               @group(0) @binding(0) var<storage, read_write> out_c: array<f32>;\n\
               @compute @workgroup_size(32)\n\
               fn gemm(@builtin(workgroup_id) wg: vec3<u32>) {\n\
               \x20   var acc = coop_mat16x16<f32, C>();\n\
               \x20   let o = wg.x * 256u;\n\
               \x20   coopStoreT(acc, &out_c[o], wg.y + 16u);\n}\n";
    let (module, info) = coop::check::validate(src).expect("naga validates it");
    for checked in [false, true] {
        let err = coop::check::spirv(&module, &info, "gemm", &[], checked).expect_err("the writer must fail");
        assert!(err.contains("panicked") && err.contains("not cached"), "{err}");
    }
    // The same store with the stride bound to a let is fine.
    let fixed =
        src.replace("coopStoreT(acc, &out_c[o], wg.y + 16u);", "let s = wg.y + 16u; coopStoreT(acc, &out_c[o], s);");
    let (module, info) = coop::check::validate(&fixed).unwrap();
    coop::check::spirv(&module, &info, "gemm", &[], false).expect("let-bound stride");
}

/// Emulates `k` on fresh random operands of `shape`, C poisoned (NaN) or random (accumulate),
/// and checks every output against float64.
fn emulate_and_check(k: &Kernel, shape: Shape, rng: &mut Rng) -> Result<f64, String> {
    let ops = Operands::random(shape, k.layout, rng, 1.0);
    let before: Vec<f32> = if k.epi.accumulates() { ops.c0.clone() } else { vec![f32::NAN; shape.c_len()] };
    let mut c = before.clone();
    emulate(k, &ops, &mut c, None)?;
    let pts = sample_points(&shape, 4096, rng);
    let r = check(&ops, &c, &before, k.epi.accumulates(), &pts, 2);
    let tol = k.d.prec.tolerance(shape.k);
    if !r.ok(tol) {
        return Err(format!(
            "error {:.3e} (tolerance {tol:.0e}), {} non-finite, {} padding values changed; worst {}",
            r.max_err, r.nonfinite, r.pad_changed, r.worst
        ));
    }
    Ok(r.max_err)
}

/// A problem with a few k-tiles that the kernel covers exactly (unmasked) or one that is a
/// multiple of nothing (masked: partial block rows and columns, K and N off multiples of 8).
fn problem(k: &Kernel, masked: bool) -> Shape {
    let d = &k.d;
    let kk = 3 * d.bk * k.ksplit;
    if masked { Shape::new(d.bm + 40, kk - 10, d.bn + 36, k.layout) } else { Shape::new(2 * d.bm, kk, d.bn, k.layout) }
}

fn emulation_set() -> Vec<Kernel> {
    use Staging::*;
    let sg = 32;
    let mut out = Vec::new();
    let structures = [
        Design::new(128, 128, 32, 2, 2, Double),
        Design::new(128, 256, 32, 2, 4, Prefetch),
        Design::new(64, 64, 32, 2, 2, Single),
        Design::new(128, 128, 16, 2, 2, Double),
        Design::new(128, 256, 32, 2, 8, Prefetch),
        Design::new(256, 128, 32, 4, 2, Prefetch),
    ];
    for d in structures {
        for layout in Layout::ALL {
            for masked in [false, true] {
                out.push(Kernel { d, layout, epi: Epilogue::Store, masked, ksplit: 1, sg });
            }
        }
    }
    let mut direct = Design::new(64, 64, 32, 1, 1, Direct);
    direct.load = Load::V4;
    direct.pad = 0;
    let mut direct2 = Design::new(128, 64, 32, 2, 2, Direct);
    direct2.load = Load::V4;
    direct2.pad = 0;
    for layout in Layout::ALL {
        out.push(Kernel { d: direct, layout, epi: Epilogue::Store, masked: false, ksplit: 1, sg });
        out.push(Kernel { d: direct2, layout, epi: Epilogue::AccEnd, masked: false, ksplit: 2, sg });
    }
    // Precisions, on a small double-buffered design.
    let small = Design::new(64, 64, 32, 2, 2, Double);
    for p in [Prec::Cast, Prec::Split, Prec::SplitScaled, Prec::Pre, Prec::PreScaled] {
        for layout in Layout::ALL {
            out.push(Kernel { d: small.with_prec(p), layout, epi: Epilogue::Store, masked: true, ksplit: 1, sg });
        }
    }
    let mut pre_direct = Design::new(64, 64, 32, 2, 2, Direct).with_prec(Prec::PreScaled);
    pre_direct.load = Load::V4;
    pre_direct.pad = 0;
    out.push(Kernel { d: pre_direct, layout: Layout::DyW, epi: Epilogue::Store, masked: false, ksplit: 1, sg });
    out.push(Kernel {
        d: Design::new(64, 64, 32, 2, 2, Prefetch).with_prec(Prec::Split),
        layout: Layout::XWt,
        epi: Epilogue::Store,
        masked: false,
        ksplit: 1,
        sg,
    });
    // Epilogues and split-K.
    for layout in Layout::ALL {
        for epi in [Epilogue::AccInit, Epilogue::AccEnd] {
            for masked in [false, true] {
                out.push(Kernel { d: small, layout, epi, masked, ksplit: 1, sg });
            }
        }
        for (ks, epi, masked) in
            [(2, Epilogue::Store, false), (3, Epilogue::AccInit, true), (4, Epilogue::AccEnd, true)]
        {
            out.push(Kernel { d: small, layout, epi, masked, ksplit: ks, sg });
        }
    }
    // Options: block order, shapes as uniform / const, pad 0, 8-byte loads, fragment prefetch.
    let mut opts = Vec::new();
    let mut x = small;
    x.swizzle = 3;
    opts.push(x);
    x = small;
    x.dims = Dims::Uniform;
    opts.push(x);
    x = small;
    x.dims = Dims::Const;
    opts.push(x);
    x = small;
    x.pad = 0;
    x.load = Load::V4;
    opts.push(x);
    x = Design::new(64, 64, 64, 2, 2, Prefetch);
    x.fragpf = true;
    opts.push(x);
    for d in opts {
        for layout in Layout::ALL {
            out.push(Kernel { d, layout, epi: Epilogue::Store, masked: true, ksplit: 1, sg });
        }
    }
    out
}

#[test]
fn emulated_kernels_match_the_float64_reference() {
    let base = seed("emulation");
    let set = sample(emulation_set(), 24, "emulation sample");
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let chunk = set.len().div_ceil(threads);
    let results: Vec<Result<String, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = set
            .chunks(chunk)
            .enumerate()
            .map(|(ci, part)| {
                s.spawn(move || {
                    let mut rng = Rng::new(base ^ ((ci as u64 + 1) * 0x1234_5678));
                    part.iter()
                        .map(|k| {
                            let shape = problem(k, k.masked);
                            emulate_and_check(k, shape, &mut rng)
                                .map(|e| format!("{} on {}: {e:.2e}", k.label(), shape.label()))
                                .map_err(|e| format!("{} on {}: {e}", k.label(), shape.label()))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    eprintln!("{} kernels emulated, {} failures", results.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"));
}

#[test]
fn emulator_finds_a_missing_barrier_and_an_unmasked_edge() {
    let mut rng = Rng::new(seed("emulator negatives"));
    let k = Kernel::new(Design::new(64, 64, 32, 2, 2, Staging::Double), Layout::XWt);
    let shape = problem(&k, false);
    let ops = Operands::random(shape, k.layout, &mut rng, 1.0);
    // The double-buffered loop without its barrier: a staging buffer is written while read.
    let (pro, body) = k.schedule();
    let body: Vec<Step> = body.into_iter().filter(|s| !matches!(s, Step::Barrier)).collect();
    let mut cbuf = vec![f32::NAN; shape.c_len()];
    let err = emulate(&k, &ops, &mut cbuf, Some((pro, body))).expect_err("race expected");
    assert!(err.contains("race"), "{err}");
    // Reading the buffer that is being filled (compute on the next buffer) is caught as well.
    let (pro, mut body) = k.schedule();
    for s in body.iter_mut() {
        if let Step::Compute { buf } = s {
            *buf = (v("t") + 1) % 2;
        }
    }
    let mut cbuf = vec![f32::NAN; shape.c_len()];
    assert!(emulate(&k, &ops, &mut cbuf, Some((pro, body))).is_err());
    // An unmasked kernel refuses a problem it does not tile.
    let edge = problem(&k, true);
    let ops = Operands::random(edge, k.layout, &mut rng, 1.0);
    let mut cbuf = vec![f32::NAN; edge.c_len()];
    assert!(emulate(&k, &ops, &mut cbuf, None).is_err());
    // And the reference check flags a wrong value, a NaN and a changed pad.
    let mut k2 = k;
    k2.masked = true;
    let mut cbuf = vec![f32::NAN; edge.c_len()];
    let before = cbuf.clone();
    emulate(&k2, &ops, &mut cbuf, None).unwrap();
    let pts = sample_points(&edge, 100, &mut rng);
    assert!(check(&ops, &cbuf, &before, false, &pts, 1).ok(Prec::F16.tolerance(edge.k)));
    let mut bad = cbuf.clone();
    bad[3] += 0.5;
    assert!(!check(&ops, &bad, &before, false, &pts, 1).ok(Prec::F16.tolerance(edge.k)));
    let mut bad = cbuf.clone();
    bad[edge.ldc as usize + 1] = f32::NAN;
    assert_eq!(check(&ops, &bad, &before, false, &pts, 1).nonfinite, 1);
    let mut bad = cbuf;
    bad[edge.ldc as usize - 1] = 0.0;
    assert_eq!(check(&ops, &bad, &before, false, &pts, 1).pad_changed, 1);
}

#[test]
fn the_plan_fits_the_h200() {
    let st = plan::structures();
    assert!(st.len() >= 16);
    for d in st.iter().chain(plan::split_structures().iter()) {
        for layout in Layout::ALL {
            let k = Kernel::new(*d, layout);
            k.check(48 * 1024, 1024).unwrap_or_else(|e| panic!("{}: {e}", k.label()));
            assert!(k.est_regs() <= 255, "{}: ~{} registers", k.label(), k.est_regs());
        }
    }
    // Every structure is timed on both ranking problems.
    for case in plan::ranking_cases() {
        for d in &st {
            Kernel::new(*d, case.layout).supports(&case.shape()).unwrap();
        }
    }
    let edge = plan::edge_kernels(32);
    assert!(edge.len() >= 30);
    for k in &edge {
        k.check(48 * 1024, 1024).unwrap();
        k.supports(&Shape::new(plan::EDGE.0, plan::EDGE.1, plan::EDGE.2, k.layout)).unwrap();
    }
    // The weight gradients get split-K; the square problem does not.
    assert_eq!(plan::ksplits(&plan::Case::new(768, 8192, 768, Layout::XtB)), vec![1, 2, 4, 8]);
    assert_eq!(plan::ksplits(&plan::Case::new(4096, 4096, 4096, Layout::XtB)), vec![1]);
    // Variations differ from their design in one respect and are mostly buildable.
    for d in &st[..3] {
        let vars = plan::variations(d);
        assert!(vars.len() >= 8, "{}", d.name());
        let ok = vars.iter().filter(|x| Kernel::new(**x, Layout::XWt).check(48 * 1024, 1024).is_ok()).count();
        assert!(ok >= 6, "{}: {ok} buildable variations", d.name());
    }
}

#[test]
fn expression_printing_matches_evaluation_on_samples() {
    // The printed WGSL of a slot's index and the evaluated value agree on a tiny interpreter of
    // the printed form (+, -, *, /, %, min, max on u32).
    let k = Kernel { masked: true, ..Kernel::new(Design::new(128, 128, 32, 2, 2, Staging::Double), Layout::XtB) };
    let s = Shape::new(1000, 770, 1030, Layout::XtB);
    let mut env = Env::new();
    for (n, val) in coop::kernel::DIM_NAMES.iter().zip(k.dim_values(&s)) {
        env.insert(n, val);
    }
    for (n, val) in [("wg.x", 3u32), ("wg.y", 2), ("wg.z", 0)] {
        env.insert(n, val);
    }
    for (n, e) in k.wg_lets() {
        let x = e.eval(&env).unwrap();
        env.insert(n, x);
    }
    env.insert("kb", 64);
    env.insert("tid", 77);
    for op in [coop::kernel::Operand::A, coop::kernel::Operand::B] {
        for slot in 0..k.slots(op) {
            let x = k.slot(op, slot, &v("kb"));
            for e in [&x.gidx, &x.sidx] {
                assert_eq!(interpret(&e.wgsl(), &env), e.eval(&env).unwrap(), "{}", e.wgsl());
            }
        }
    }
}

/// Evaluates a printed u32 expression (the subset `E::wgsl` prints for arithmetic).
fn interpret(src: &str, env: &Env) -> u32 {
    fn expr(t: &[String], i: &mut usize, env: &Env) -> u32 {
        let tok = t[*i].clone();
        *i += 1;
        if tok == "(" {
            let a = expr(t, i, env);
            let op = t[*i].clone();
            *i += 1;
            let b = expr(t, i, env);
            assert_eq!(t[*i], ")");
            *i += 1;
            match op.as_str() {
                "+" => a + b,
                "-" => a - b,
                "*" => a * b,
                "/" => a / b,
                "%" => a % b,
                _ => panic!("op {op}"),
            }
        } else if tok == "min" || tok == "max" {
            assert_eq!(t[*i], "(");
            *i += 1;
            let a = expr(t, i, env);
            assert_eq!(t[*i], ",");
            *i += 1;
            let b = expr(t, i, env);
            assert_eq!(t[*i], ")");
            *i += 1;
            if tok == "min" { a.min(b) } else { a.max(b) }
        } else if let Some(n) = tok.strip_suffix('u').and_then(|n| n.parse().ok()) {
            n
        } else {
            *env.get(tok.as_str()).unwrap_or_else(|| panic!("unbound {tok}"))
        }
    }
    let mut toks = Vec::new();
    let mut cur = String::new();
    for ch in src.chars() {
        if "(),+-*/%".contains(ch) || ch == ' ' {
            if !cur.is_empty() {
                toks.push(std::mem::take(&mut cur));
            }
            if ch != ' ' {
                toks.push(ch.to_string());
            }
        } else {
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        toks.push(cur);
    }
    let mut i = 0;
    let r = expr(&toks, &mut i, env);
    assert_eq!(i, toks.len(), "{src}");
    r
}
