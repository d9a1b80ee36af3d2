//! WGSL features of real-world compute shaders, run on the GPU against CPU references: structs
//! ending in runtime-sized arrays (boids), textures, storage textures and samplers (a blur, an
//! 8-bit storage write, a read-write storage texture), workgroup sizes from overrides, an
//! override with a pipeline id, immediates, 64-bit types, and a file that also holds a render
//! pipeline's shaders (game of life). Where the adapter lacks a feature a kernel needs, the call
//! must fail with `Error::MissingFeature` naming it.

mod common;

use common::{gpu, rng};
use kernels::texture::{D2, R32Float, R32Uint, Rgba8Unorm, Rgba32Float};
use kernels::{Error, Grid, Texture};
use rand::Rng;

kernels::kernels!("tests/shaders/features/01_boids.wgsl");
kernels::kernels!("tests/shaders/features/02_image.wgsl");
kernels::kernels!("tests/shaders/features/03_tuned.wgsl");
kernels::kernels!("tests/shaders/features/04_wide.wgsl");

/// f32's unit roundoff.
const U: f64 = f32::EPSILON as f64 / 2.0;

/// The blur's bound (see `a_blur_through_a_sampler_into_a_storage_texture`).
const BLUR_TOLERANCE: f64 = 1.0 / (9.0 * 255.0) / 16.0;

#[derive(Clone, Copy)]
struct P {
    pos: [f64; 2],
    vel: [f64; 2],
}

/// One boids step in float64, as `boids` computes it.
fn boids_reference(ps: &[P], s: &boids::boids::SimParams) -> Vec<P> {
    let dist = |a: [f64; 2], b: [f64; 2]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt();
    ps.iter()
        .enumerate()
        .map(|(i, me)| {
            let (mut mass, mut away, mut align) = ([0.0; 2], [0.0; 2], [0.0; 2]);
            let (mut nm, mut na) = (0u32, 0u32);
            for (j, o) in ps.iter().enumerate() {
                if i == j {
                    continue;
                }
                let d = dist(o.pos, me.pos);
                for c in 0..2 {
                    if d < s.rule1_distance as f64 {
                        mass[c] += o.pos[c];
                    }
                    if d < s.rule2_distance as f64 {
                        away[c] -= o.pos[c] - me.pos[c];
                    }
                    if d < s.rule3_distance as f64 {
                        align[c] += o.vel[c];
                    }
                }
                nm += u32::from(d < s.rule1_distance as f64);
                na += u32::from(d < s.rule3_distance as f64);
            }
            let mut vel = me.vel;
            for c in 0..2 {
                if nm > 0 {
                    mass[c] = mass[c] / nm as f64 - me.pos[c];
                }
                if na > 0 {
                    align[c] /= na as f64;
                }
                vel[c] +=
                    mass[c] * s.rule1_scale as f64 + away[c] * s.rule2_scale as f64 + align[c] * s.rule3_scale as f64;
            }
            let len = (vel[0] * vel[0] + vel[1] * vel[1]).sqrt();
            let v = [vel[0] / len * len.clamp(0.0, 0.1), vel[1] / len * len.clamp(0.0, 0.1)];
            P { pos: [me.pos[0] + v[0] * s.delta_t as f64, me.pos[1] + v[1] * s.delta_t as f64], vel: v }
        })
        .collect()
}

#[test]
fn boids_in_a_struct_ending_in_a_runtime_sized_array() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("boids");
    let params = boids::boids::SimParams::new(0.04, 0.1, 0.025, 0.025, 0.02, 0.05, 0.005);
    let thresholds = [params.rule1_distance as f64, params.rule2_distance as f64];
    // Particles drawn so that no pair is within 1e-4 of a rule's distance: which neighbours a
    // rule counts is then the same in f32 and f64 (a distance's f32 rounding is ~1e-7).
    let n = 150;
    let mut ps: Vec<P> = Vec::new();
    while ps.len() < n {
        let c = P {
            pos: [rng.random_range(-0.3..0.3f32) as f64, rng.random_range(-0.3..0.3f32) as f64],
            vel: [rng.random_range(-0.1..0.1f32) as f64, rng.random_range(-0.1..0.1f32) as f64],
        };
        let near = ps.iter().any(|p| {
            let d = ((p.pos[0] - c.pos[0]).powi(2) + (p.pos[1] - c.pos[1]).powi(2)).sqrt();
            thresholds.iter().any(|t| (d - t).abs() < 1e-4)
        });
        if !near {
            ps.push(c);
        }
    }
    let particle =
        |p: &P| boids::boids::Particle::new([p.pos[0] as f32, p.pos[1] as f32], [p.vel[0] as f32, p.vel[1] as f32]);
    let src = gpu
        .upload_struct(&boids::boids::Particles::new(n as u32), &ps.iter().map(particle).collect::<Vec<_>>())
        .unwrap();
    let poison = boids::boids::Particle::new([f32::NAN; 2], [f32::NAN; 2]);
    let mut dst = gpu.upload_struct(&boids::boids::Particles::new(u32::MAX), &vec![poison; n]).unwrap();
    assert_eq!(std::mem::size_of::<boids::boids::Particles>(), 8, "the count, padded to the array's offset");
    boids::boids(&gpu, params, &src, &mut dst).unwrap();
    let (header, got) = dst.read(&gpu).unwrap();
    assert_eq!(header.count, n as u32);
    let want = boids_reference(&ps, &params);
    // Each velocity component sums at most n terms of magnitude ≤ 0.6 (positions) and 0.1
    // (velocities), scaled by ≤ 0.05, then is normalised: f32 rounding of the sums is below
    // 4·n·u·0.6 ≈ 1.1e-5 before scaling, and the clamp keeps |v| ≤ 0.1.
    let tol = 4.0 * n as f64 * U * 0.6;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        for c in 0..2 {
            assert!((g.vel[c] as f64 - w.vel[c]).abs() <= tol, "particle {i} vel[{c}]: {} vs {}", g.vel[c], w.vel[c]);
            assert!((g.pos[c] as f64 - w.pos[c]).abs() <= tol, "particle {i} pos[{c}]: {} vs {}", g.pos[c], w.pos[c]);
        }
    }
    // A destination with more elements than the source is refused by `@requires`.
    let big = gpu.struct_zeros::<boids::boids::Particles, boids::boids::Particle>(n + 1).unwrap();
    let mut big_dst = gpu.struct_zeros::<boids::boids::Particles, boids::boids::Particle>(n + 1).unwrap();
    assert!(boids::boids(&gpu, params, &src, &mut big_dst).unwrap_err().to_string().contains("len(src) >= len(dst)"));
    drop(big);
}

#[test]
fn a_struct_of_the_array_alone_binds_as_the_array() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("wrapped array");
    let x: Vec<f32> = (0..1000).map(|_| rng.random_range(-4.0..4.0)).collect();
    let mut b = gpu.upload(&x).unwrap();
    boids::scale_all(&gpu, &mut b, 0.5).unwrap();
    // Halving is exact.
    assert_eq!(b.read(&gpu).unwrap(), x.iter().map(|v| v * 0.5).collect::<Vec<_>>());
}

/// Random RGBA8 texels.
fn rgba8(rng: &mut impl Rng, n: usize) -> Vec<[u8; 4]> {
    (0..n).map(|_| [rng.random(), rng.random(), rng.random(), rng.random()]).collect()
}

#[test]
fn a_blur_through_a_sampler_into_a_storage_texture() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("blur");
    let (w, h) = (37u32, 21u32);
    let texels = rgba8(&mut rng, (w * h) as usize);
    let src: Texture<D2, Rgba8Unorm> = gpu.upload_texture([w, h, 1], &texels).unwrap();
    let sampler = gpu
        .sampler(&kernels::wgpu::SamplerDescriptor {
            mag_filter: kernels::wgpu::FilterMode::Linear,
            min_filter: kernels::wgpu::FilterMode::Linear,
            ..Default::default()
        })
        .unwrap();
    let mut dst: Texture<D2, Rgba32Float> =
        gpu.upload_texture([w, h, 1], &vec![[f32::NAN; 4]; (w * h) as usize]).unwrap();
    image::blur(&gpu, &src, &sampler, &mut dst, image::blur::Dims::new(w, h)).unwrap();
    let got = dst.read(&gpu).unwrap();
    let at = |x: i64, y: i64, c: usize| {
        let (x, y) = (x.clamp(0, w as i64 - 1), y.clamp(0, h as i64 - 1));
        texels[(y * w as i64 + x) as usize][c] as f64 / 255.0
    };
    // A sample at a texel centre reads that texel, up to how precisely the adapter converts
    // unorm8 and weighs the filter's taps (implementation-defined; SwiftShader measured 8.7·u
    // after the nine-term sum): the bound is a sixteenth of the least a wrong tap changes the
    // average, 1/(9·255), and some thousand times f32's rounding.
    for y in 0..h as i64 {
        for x in 0..w as i64 {
            for (c, &g) in got[(y * w as i64 + x) as usize].iter().enumerate() {
                let want: f64 = (-1..=1)
                    .flat_map(|dy| (-1..=1).map(move |dx| (dx, dy)))
                    .map(|(dx, dy)| at(x + dx, y + dy, c))
                    .sum::<f64>()
                    / 9.0;
                let g = g as f64;
                assert!((g - want).abs() <= BLUR_TOLERANCE, "({x}, {y})[{c}]: {g} vs {want}");
            }
        }
    }
}

#[test]
fn an_8_bit_storage_texture_written_from_a_sampled_one() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("invert");
    let (w, h) = (19u32, 45u32);
    let texels = rgba8(&mut rng, (w * h) as usize);
    let src: Texture<D2, Rgba8Unorm> = gpu.upload_texture([w, h, 1], &texels).unwrap();
    let mut dst: Texture<D2, Rgba8Unorm> = gpu.texture([w, h, 1]).unwrap();
    image::invert(&gpu, &src, &mut dst, image::invert::Dims::new(w, h)).unwrap();
    // 1 − k/255 is within f32 rounding of (255 − k)/255, which stores as 255 − k exactly.
    let want: Vec<[u8; 4]> = texels.iter().map(|t| t.map(|v| 255 - v)).collect();
    assert_eq!(dst.read(&gpu).unwrap(), want);
    // The same texture written, then sampled by the next call: a ping-pong.
    let mut back: Texture<D2, Rgba8Unorm> = gpu.texture([w, h, 1]).unwrap();
    image::invert(&gpu, &dst, &mut back, image::invert::Dims::new(w, h)).unwrap();
    assert_eq!(back.read(&gpu).unwrap(), texels);
}

#[test]
fn a_read_write_storage_texture_updated_in_place() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("accumulate");
    let (w, h) = (16u32, 9u32);
    let n = (w * h) as usize;
    let acc0: Vec<f32> = (0..n).map(|_| rng.random_range(-100.0..100.0f32).round()).collect();
    let counts: Vec<u32> = (0..n).map(|_| rng.random_range(0..1000)).collect();
    let mut acc: Texture<D2, R32Float> = gpu.upload_texture([w, h, 1], &acc0).unwrap();
    let counts_t: Texture<D2, R32Uint> = gpu.upload_texture([w, h, 1], &counts).unwrap();
    let result = image::accumulate(&gpu, &mut acc, &counts_t, image::accumulate::Dims::new(w, h));
    let offered = gpu.texture_format_features(kernels::wgpu::TextureFormat::R32Float).flags;
    if !offered.contains(kernels::wgpu::TextureFormatFeatureFlags::STORAGE_READ_WRITE) {
        assert!(matches!(result, Err(Error::MissingFeature { .. })), "{result:?}");
        eprintln!("adapter without read-write r32float storage: refused as it must be");
        return;
    }
    result.unwrap();
    // Integers below 2²⁴: exact.
    let want: Vec<f32> = acc0.iter().zip(&counts).map(|(a, c)| a * 2.0 + *c as f32).collect();
    assert_eq!(acc.read(&gpu).unwrap(), want);
}

#[test]
fn textures_round_trip_and_are_checked_where_bound() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("texture round trip");
    // A width whose rows are not a multiple of 256 bytes: the read-back removes the padding.
    let (w, h) = (13u32, 7u32);
    let texels = rgba8(&mut rng, (w * h) as usize);
    let mut t: Texture<D2, Rgba8Unorm> = gpu.upload_texture([w, h, 1], &texels).unwrap();
    assert_eq!(t.read(&gpu).unwrap(), texels);
    let other = rgba8(&mut rng, (w * h) as usize);
    t.write(&gpu, &other).unwrap();
    assert_eq!(t.read(&gpu).unwrap(), other);
    assert!(matches!(t.write(&gpu, &other[1..]), Err(Error::LengthMismatch { .. })));
    assert!(matches!(gpu.texture::<D2, Rgba8Unorm>([4, 4, 2]), Err(Error::LengthMismatch { .. })), "2-D is one layer");
    assert!(gpu.upload_texture::<D2, Rgba8Unorm>([w, h, 1], &texels[1..]).is_err());
    // Through the untyped API: one texture as both the sampled source and the storage
    // destination is refused, and so is a format the binding does not take.
    let dims = image::invert::Dims::new(w, h);
    let call = |args: &[kernels::Arg<'_>]| {
        kernels::Record::record(
            &gpu,
            kernels::Call { kernel: &image::invert::KERNEL, grid: Grid::Explicit([2, 1, 1]), args, overrides: &[] },
        )
    };
    let bytes = bytemuck::bytes_of(&dims);
    let floats: Texture<D2, Rgba32Float> = gpu.texture([w, h, 1]).unwrap();
    let e = call(&[kernels::Arg::uniform(bytes), kernels::Arg::texture(&t, false), kernels::Arg::texture(&t, true)]);
    assert!(matches!(e, Err(Error::Aliased { .. })), "{e:?}");
    let e =
        call(&[kernels::Arg::uniform(bytes), kernels::Arg::texture(&t, false), kernels::Arg::texture(&floats, true)]);
    assert!(matches!(&e, Err(Error::BadArguments { detail, .. }) if detail.contains("rgba8unorm")), "{e:?}");
    let e = call(&[kernels::Arg::uniform(bytes), kernels::Arg::texture(&floats, false)]);
    assert!(matches!(&e, Err(Error::BadArguments { .. })), "{e:?}");
    // A texture the blur would sample through its linear sampler must be filterable.
    let unfilterable: Texture<D2, R32Float> = gpu.texture([w, h, 1]).unwrap();
    let filterable = gpu.features().contains(kernels::wgpu::Features::FLOAT32_FILTERABLE);
    let sampler = gpu.sampler(&Default::default()).unwrap();
    let mut out: Texture<D2, Rgba32Float> = gpu.texture([w, h, 1]).unwrap();
    let e = image::blur(&gpu, &unfilterable, &sampler, &mut out, image::blur::Dims::new(w, h));
    assert_eq!(e.is_ok(), filterable, "{e:?}");
    if let Err(e) = e {
        assert!(e.to_string().contains("not filterable"), "{e}");
    }
}

#[test]
fn a_workgroup_size_from_an_override_is_the_one_dispatched() {
    let Some(gpu) = gpu() else { return };
    let n = 1000;
    for block in [None, Some(16), Some(128)] {
        let mut x = gpu.filled(n, f32::NAN).unwrap();
        tuned::iota(&gpu, &mut x, tuned::iota::Overrides { BLOCK: block }).unwrap();
        // With the default's grid, 16-wide workgroups would cover a quarter of the elements.
        assert_eq!(x.read(&gpu).unwrap(), (0..n).map(|i| i as f32).collect::<Vec<_>>(), "BLOCK = {block:?}");
    }
    let mut x = gpu.filled(n, f32::NAN).unwrap();
    let e = tuned::iota_required(&gpu, &mut x, tuned::iota_required::Overrides { SIZE: None }).unwrap_err();
    assert!(e.to_string().contains("`@workgroup_size` takes dimension x from override `SIZE`"), "{e}");
    let e = tuned::iota_required(&gpu, &mut x, tuned::iota_required::Overrides { SIZE: Some(0) }).unwrap_err();
    assert!(e.to_string().contains("must be a positive integer"), "{e}");
    tuned::iota_required(&gpu, &mut x, tuned::iota_required::Overrides { SIZE: Some(32) }).unwrap();
    assert_eq!(x.read(&gpu).unwrap(), (0..n).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(tuned::iota::KERNEL.workgroup_size_overrides, [Some("BLOCK"), None, None]);
}

#[test]
fn overrides_take_the_values_of_the_call_by_id_and_over_lines() {
    let Some(gpu) = gpu() else { return };
    let n = 300;
    let (step, offset) = (2.5f32, -7.0f32);
    let mut x = gpu.filled(n, f32::NAN).unwrap();
    let both = tuned::scaled_iota::Overrides { STEP: Some(step), OFFSET: Some(offset) };
    tuned::scaled_iota(&gpu, &mut x, both).unwrap();
    // One multiplication and one addition of small integers and halves: exact in f32.
    assert_eq!(x.read(&gpu).unwrap(), (0..n).map(|i| step * i as f32 + offset).collect::<Vec<_>>());
    tuned::scaled_iota(&gpu, &mut x, tuned::scaled_iota::Overrides::default()).unwrap();
    assert_eq!(x.read(&gpu).unwrap(), (0..n).map(|i| i as f32).collect::<Vec<_>>());
}

#[test]
fn immediates_are_a_typed_parameter() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("immediates");
    let push = tuned::affine::Push::new(rng.random_range(-2.0..2.0), rng.random_range(-10.0..10.0));
    let n = 300;
    let mut y = gpu.filled(n, f32::NAN).unwrap();
    let result = tuned::affine(&gpu, &mut y, push);
    if !gpu.features().contains(kernels::wgpu::Features::IMMEDIATES) {
        assert!(matches!(&result, Err(Error::MissingFeature { feature: "IMMEDIATES", .. })), "{result:?}");
        return;
    }
    result.unwrap();
    // One multiplication and one addition in f32: within 2u of |scale·i| + |offset|.
    for (i, g) in y.read(&gpu).unwrap().iter().enumerate() {
        let want = push.scale as f64 * i as f64 + push.offset as f64;
        let bound = 2.0 * U * ((push.scale as f64 * i as f64).abs() + (push.offset as f64).abs());
        assert!((*g as f64 - want).abs() <= bound, "[{i}]: {g} vs {want}");
    }
    assert_eq!(tuned::affine::KERNEL.immediate_size, 8);
}

#[test]
fn immediates_past_the_devices_limit_are_a_missing_feature() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("many immediates");
    // Small integers: every partial sum is exact in f32.
    let v: [[[f32; 4]; 4]; 4] =
        std::array::from_fn(|_| std::array::from_fn(|_| std::array::from_fn(|_| rng.random_range(-100..100) as f32)));
    let mut out = gpu.filled(1, f32::NAN).unwrap();
    let result = tuned::many_immediates(&gpu, &mut out, tuned::many_immediates::Many::new(v), Grid::Workgroups(1));
    let enough = gpu.features().contains(kernels::wgpu::Features::IMMEDIATES) && gpu.limits().max_immediate_size >= 256;
    if !enough {
        let e = result.unwrap_err();
        assert!(matches!(e, Error::MissingFeature { feature: "IMMEDIATES", .. }), "{e}");
        eprintln!("{e}");
        return;
    }
    result.unwrap();
    assert_eq!(out.read(&gpu).unwrap(), [v.iter().flatten().flatten().sum::<f32>()]);
}

#[test]
fn a_file_with_a_render_pipelines_shaders_builds_its_kernel() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("life");
    let (w, h) = (23usize, 17usize);
    let cells: Vec<u32> = (0..w * h).map(|_| u32::from(rng.random_bool(0.35))).collect();
    let current = gpu.upload(&cells).unwrap();
    let mut next = gpu.filled(w * h, u32::MAX).unwrap();
    tuned::life(&gpu, [w as u32, h as u32], &current, &mut next).unwrap();
    let cell = |x: i64, y: i64| cells[(y.rem_euclid(h as i64) as usize) * w + x.rem_euclid(w as i64) as usize];
    let want: Vec<u32> = (0..h as i64)
        .flat_map(|y| (0..w as i64).map(move |x| (x, y)))
        .map(|(x, y)| {
            let n: u32 = (-1..=1)
                .flat_map(|dy| (-1..=1).map(move |dx| (dx, dy)))
                .filter(|d| *d != (0, 0))
                .map(|(dx, dy)| cell(x + dx, y + dy))
                .sum();
            u32::from(n == 3 || (n == 2 && cell(x, y) == 1))
        })
        .collect();
    assert_eq!(next.read(&gpu).unwrap(), want);
    assert!(!tuned::life::WGSL.contains("vert_main"));
}

#[test]
fn sixty_four_bit_types_need_their_features() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("64-bit");
    let n = 500;
    let a: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let b: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let (ab, bb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let mut p = gpu.filled(n, u64::MAX).unwrap();
    let mut q = gpu.filled(n, i64::MIN).unwrap();
    let mut r = gpu.filled(n, f64::NAN).unwrap();
    let features = gpu.features();
    let result = wide::wide(&gpu, &ab, &bb, &mut p, &mut q, &mut r);
    if !features.contains(kernels::wgpu::Features::SHADER_INT64 | kernels::wgpu::Features::SHADER_F64) {
        assert!(matches!(&result, Err(Error::MissingFeature { .. })), "{result:?}");
    } else {
        result.unwrap();
        let want_p: Vec<u64> = a.iter().zip(&b).map(|(x, y)| *x as u64 * *y as u64).collect();
        let want_q: Vec<i64> = a.iter().zip(&b).map(|(x, y)| *x as i64 - *y as i64).collect();
        assert_eq!(p.read(&gpu).unwrap(), want_p);
        assert_eq!(q.read(&gpu).unwrap(), want_q);
        // One f64 division, correctly rounded as WGSL's f64 `/` is (within 2.5 ulp at most).
        for (i, g) in r.read(&gpu).unwrap().iter().enumerate() {
            let want = a[i] as f64 / (b[i] as f64 + 1.0);
            assert!((g - want).abs() <= 3.0 * f64::EPSILON * want.abs(), "[{i}]: {g} vs {want}");
        }
    }
    let mut top = gpu.zeros::<u64>(1).unwrap();
    let result = wide::wide_max(&gpu, &ab, &bb, &mut top);
    let atomics = kernels::wgpu::Features::SHADER_INT64 | kernels::wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX;
    if !features.contains(atomics)
        && !features
            .contains(kernels::wgpu::Features::SHADER_INT64 | kernels::wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
    {
        assert!(matches!(&result, Err(Error::MissingFeature { .. })), "{result:?}");
        return;
    }
    result.unwrap();
    let want = a.iter().zip(&b).map(|(x, y)| *x as u64 * *y as u64).max().unwrap();
    assert_eq!(top.read(&gpu).unwrap(), [want]);
}
