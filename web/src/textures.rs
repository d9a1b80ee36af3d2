//! Textures in the browser: the blur of `tests/shaders/features/02_image.wgsl` (a sampled
//! 8-bit texture through a linear sampler into an `rgba32float` storage texture) and its
//! `invert` (an 8-bit storage texture written from a sampled one, then sampled in turn),
//! against the CPU, as `tests/wgsl_features.rs` checks them natively.

use super::{Report, Rng, Status};
use kernels::texture::{D2, Rgba8Unorm, Rgba32Float};
use kernels::{Gpu, Result, Texture};

kernels::kernels!("../../tests/shaders/features/02_image.wgsl");

/// The blur's bound: a sixteenth of the least a wrong tap changes a 3×3 average of 8-bit
/// texels.
const TOLERANCE: f64 = 1.0 / (9.0 * 255.0) / 16.0;

/// Random RGBA8 texels.
fn texels(rng: &mut Rng, n: usize) -> Vec<[u8; 4]> {
    let v = rng.uniform(4 * n, 0.0, 256.0);
    v.chunks(4).map(|c| [c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8]).collect()
}

pub(crate) async fn textures(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    let (w, h) = (37u32, 21u32);
    let n = (w * h) as usize;
    let src_texels = texels(rng, n);
    let src: Texture<D2, Rgba8Unorm> = gpu.upload_texture([w, h, 1], &src_texels)?;
    let sampler = gpu.sampler(&kernels::wgpu::SamplerDescriptor {
        mag_filter: kernels::wgpu::FilterMode::Linear,
        min_filter: kernels::wgpu::FilterMode::Linear,
        ..Default::default()
    })?;
    for kernel in [&image::blur::KERNEL, &image::invert::KERNEL] {
        gpu.build_async(kernel).await?;
    }
    let mut dst: Texture<D2, Rgba32Float> = gpu.upload_texture([w, h, 1], &vec![[f32::NAN; 4]; n])?;
    image::blur(gpu, &src, &sampler, &mut dst, image::blur::Dims::new(w, h))?;
    gpu.wait_async().await?;
    let got: Vec<f32> = dst.read_async(gpu).await?.into_iter().flatten().collect();
    let at = |x: i64, y: i64, c: usize| {
        let (x, y) = (x.clamp(0, w as i64 - 1), y.clamp(0, h as i64 - 1));
        src_texels[(y * w as i64 + x) as usize][c] as f64 / 255.0
    };
    let mut want = Vec::with_capacity(4 * n);
    for y in 0..h as i64 {
        for x in 0..w as i64 {
            for c in 0..4 {
                let taps = (-1..=1).flat_map(|dy| (-1..=1).map(move |dx| (dx, dy)));
                want.push(taps.map(|(dx, dy)| at(x + dx, y + dy, c)).sum::<f64>() / 9.0);
            }
        }
    }
    // As natively (tests/wgsl_features.rs): a sixteenth of the least a wrong tap changes
    // the average, well above the rounding of the conversion, the filter and the sum.
    r.compare("image::blur (sampler, storage texture)", &got, &want, TOLERANCE);

    let mut inverted: Texture<D2, Rgba8Unorm> = gpu.texture([w, h, 1])?;
    image::invert(gpu, &src, &mut inverted, image::invert::Dims::new(w, h))?;
    let mut back: Texture<D2, Rgba8Unorm> = gpu.texture([w, h, 1])?;
    image::invert(gpu, &inverted, &mut back, image::invert::Dims::new(w, h))?;
    gpu.wait_async().await?;
    let once = inverted.read_async(gpu).await?;
    let twice = back.read_async(gpu).await?;
    let want_once: Vec<[u8; 4]> = src_texels.iter().map(|t| t.map(|v| 255 - v)).collect();
    let ok = once == want_once && twice == src_texels;
    let detail = match once.iter().zip(&want_once).position(|(a, b)| a != b) {
        Some(i) => format!("texel {i}: {:?}, CPU {:?}", once[i], want_once[i]),
        None if twice != src_texels => "inverting twice does not give the source back".to_string(),
        None => format!("{n} texels written, then sampled and written again, bit for bit"),
    };
    r.check(ok, "image::invert (8-bit storage texture)", detail);
    r.line(Status::Info, "textures", format!("{w}×{h} rgba8unorm source"));
    Ok(())
}
