//! Textures and samplers for kernels that bind them: created, uploaded and read back here,
//! typed by dimension and texel format so that a generated function takes exactly the
//! textures its WGSL declares.
//!
//! A WGSL `texture_2d<f32>` becomes a parameter `&Texture<D2, impl FloatFormat>` (any format
//! whose texels read as `f32`), `texture_storage_2d<rgba8unorm, write>` becomes
//! `&mut Texture<D2, Rgba8Unorm>` (`&` for `read` access), `sampler` becomes `&Sampler` and
//! `sampler_comparison` `&ComparisonSampler`. The same texture may be written through a
//! storage binding by one call and sampled by the next. What the types cannot say is checked
//! where a call binds them: that a sampled texture's format is filterable, that the adapter
//! allows the storage access, that a texture is not bound twice with one binding writable.

use crate::buffer::Element;
use crate::context::{Gpu, next_id};
use crate::error::{Error, Result};
use crate::kernel::TextureDim;
use std::marker::PhantomData;

/// A texture dimension, as a type: [`D1`], [`D2`], [`D2Array`], [`D3`], [`Cube`],
/// [`CubeArray`].
pub trait Dimension: Send + Sync + 'static {
    /// Which.
    const DIM: TextureDim;
}

macro_rules! dimensions {
    ($($name:ident => $dim:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;
        impl Dimension for $name {
            const DIM: TextureDim = TextureDim::$dim;
        }
    )*};
}

dimensions! {
    D1 => D1, "`texture_1d`, `texture_storage_1d`: size `[width, 1, 1]`.";
    D2 => D2, "`texture_2d`, `texture_storage_2d`: size `[width, height, 1]`.";
    D2Array => D2Array, "`texture_2d_array`: size `[width, height, layers]`.";
    D3 => D3, "`texture_3d`, `texture_storage_3d`: size `[width, height, depth]`.";
    Cube => Cube, "`texture_cube`: size `[width, width, 6]`.";
    CubeArray => CubeArray, "`texture_cube_array`: size `[width, width, 6 × cubes]`.";
}

/// A texel format, as a type: its wgpu format and the host type of one texel.
pub trait Format: Send + Sync + 'static {
    /// The format.
    const FORMAT: wgpu::TextureFormat;
    /// One texel as uploaded and read back (`[u8; 4]` for `Rgba8Unorm`, `f32` for `R32Float`).
    type Texel: Element;
}

/// A format whose texels a shader reads as `f32` (`texture_2d<f32>`): unorm, snorm and float
/// formats.
pub trait FloatFormat: Format {}
/// A format whose texels a shader reads as `i32` (`texture_2d<i32>`).
pub trait SintFormat: Format {}
/// A format whose texels a shader reads as `u32` (`texture_2d<u32>`).
pub trait UintFormat: Format {}
/// A depth format (`texture_depth_2d`).
pub trait DepthFormat: Format {}

macro_rules! formats {
    ($($name:ident: $texel:ty, $kind:ident, $wgsl:literal;)*) => {
        $(
            #[doc = concat!("`", $wgsl, "`: one texel is a `", stringify!($texel), "`.")]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
            pub struct $name;
            impl Format for $name {
                const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::$name;
                type Texel = $texel;
            }
            impl $kind for $name {}
        )*

        /// The marker type of a format, by its WGSL name (`rgba8unorm` → `Rgba8Unorm`): what
        /// `kernels!` names in a generated signature. `None` for a format without one.
        pub fn format_type_name(wgsl: &str) -> Option<&'static str> {
            match wgsl {
                $($wgsl => Some(stringify!($name)),)*
                _ => None,
            }
        }
    };
}

formats! {
    R8Unorm: u8, FloatFormat, "r8unorm";
    Rg8Unorm: [u8; 2], FloatFormat, "rg8unorm";
    Rgba8Unorm: [u8; 4], FloatFormat, "rgba8unorm";
    Rgba8UnormSrgb: [u8; 4], FloatFormat, "rgba8unorm-srgb";
    Rgba8Snorm: [i8; 4], FloatFormat, "rgba8snorm";
    Bgra8Unorm: [u8; 4], FloatFormat, "bgra8unorm";
    Rgba8Uint: [u8; 4], UintFormat, "rgba8uint";
    Rgba8Sint: [i8; 4], SintFormat, "rgba8sint";
    R16Float: crate::f16, FloatFormat, "r16float";
    Rg16Float: [crate::f16; 2], FloatFormat, "rg16float";
    Rgba16Float: [crate::f16; 4], FloatFormat, "rgba16float";
    Rgba16Uint: [u16; 4], UintFormat, "rgba16uint";
    Rgba16Sint: [i16; 4], SintFormat, "rgba16sint";
    R32Float: f32, FloatFormat, "r32float";
    R32Uint: u32, UintFormat, "r32uint";
    R32Sint: i32, SintFormat, "r32sint";
    Rg32Float: [f32; 2], FloatFormat, "rg32float";
    Rg32Uint: [u32; 2], UintFormat, "rg32uint";
    Rg32Sint: [i32; 2], SintFormat, "rg32sint";
    Rgba32Float: [f32; 4], FloatFormat, "rgba32float";
    Rgba32Uint: [u32; 4], UintFormat, "rgba32uint";
    Rgba32Sint: [i32; 4], SintFormat, "rgba32sint";
    Depth32Float: f32, DepthFormat, "depth32float";
}

/// A texture on one [`Gpu`]: `D` its dimension, `F` its texel format. Usable wherever its
/// format allows: sampled, as a storage texture, and copied to and from the host.
///
/// Not `Clone`, like [`Buffer`](crate::Buffer): writable storage bindings take `&mut`.
pub struct Texture<D: Dimension, F: Format> {
    pub(crate) raw: wgpu::Texture,
    pub(crate) view: wgpu::TextureView,
    size: [u32; 3],
    pub(crate) gpu_id: u64,
    pub(crate) id: u64,
    _t: PhantomData<(D, F)>,
    // Declared last, dropped last (see `Buffer`).
    _owner: Gpu,
}

impl<D: Dimension, F: Format> std::fmt::Debug for Texture<D, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Texture")
            .field("dim", &D::DIM)
            .field("format", &F::FORMAT)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// A sampler (WGSL `sampler`).
pub struct Sampler {
    pub(crate) raw: wgpu::Sampler,
    /// Whether it filters (a linear filter): such a sampler may only sample filterable formats.
    pub(crate) filtering: bool,
    pub(crate) gpu_id: u64,
    _owner: Gpu,
}

/// A comparison sampler (WGSL `sampler_comparison`), for depth textures.
pub struct ComparisonSampler {
    pub(crate) raw: wgpu::Sampler,
    pub(crate) gpu_id: u64,
    _owner: Gpu,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("filtering", &self.filtering).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ComparisonSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComparisonSampler").finish_non_exhaustive()
    }
}

/// Layers (array layers or depth) and the wgpu dimension of a texture of dimension `dim`.
fn shape(dim: TextureDim, size: [u32; 3]) -> std::result::Result<wgpu::TextureDimension, String> {
    let [w, h, l] = size;
    if w == 0 || h == 0 || l == 0 {
        return Err(format!("a texture of size {w}×{h}×{l}: every dimension must be at least 1"));
    }
    match dim {
        TextureDim::D1 if h != 1 || l != 1 => Err(format!("a 1-D texture is [width, 1, 1], not {size:?}")),
        TextureDim::D2 if l != 1 => Err(format!("a 2-D texture is [width, height, 1], not {size:?}")),
        TextureDim::Cube if w != h || l != 6 => Err(format!("a cube texture is [width, width, 6], not {size:?}")),
        TextureDim::CubeArray if w != h || l % 6 != 0 => {
            Err(format!("a cube array texture is [width, width, 6 × cubes], not {size:?}"))
        }
        TextureDim::D1 => Ok(wgpu::TextureDimension::D1),
        TextureDim::D3 => Ok(wgpu::TextureDimension::D3),
        _ => Ok(wgpu::TextureDimension::D2),
    }
}

impl Gpu {
    /// A texture of `size` (see the dimension types for its meaning), zeroed: usable as a
    /// sampled texture and, where the adapter allows it for the format, as a storage texture.
    pub fn texture<D: Dimension, F: Format>(&self, size: [u32; 3]) -> Result<Texture<D, F>> {
        self.new_texture(size, None)
    }

    /// A texture of `size` holding `texels` (width × height × layers of them, rows first).
    pub fn upload_texture<D: Dimension, F: Format>(
        &self,
        size: [u32; 3],
        texels: &[F::Texel],
    ) -> Result<Texture<D, F>> {
        self.new_texture(size, Some(texels))
    }

    fn new_texture<D: Dimension, F: Format>(
        &self,
        size: [u32; 3],
        texels: Option<&[F::Texel]>,
    ) -> Result<Texture<D, F>> {
        let dimension = shape(D::DIM, size).map_err(|detail| Error::LengthMismatch { detail })?;
        let limits = &self.inner.limits;
        let max = match dimension {
            wgpu::TextureDimension::D1 => [limits.max_texture_dimension_1d, 1, 1],
            wgpu::TextureDimension::D2 => {
                [limits.max_texture_dimension_2d, limits.max_texture_dimension_2d, limits.max_texture_array_layers]
            }
            wgpu::TextureDimension::D3 => [limits.max_texture_dimension_3d; 3],
        };
        if size.iter().zip(max).any(|(s, m)| *s > m) {
            return Err(Error::LengthMismatch {
                detail: format!("a texture of size {size:?} is over this device's limits {max:?}"),
            });
        }
        let allowed = self.inner.adapter.get_texture_format_features(F::FORMAT).allowed_usages;
        let mut usage = wgpu::TextureUsages::COPY_SRC | wgpu::TextureUsages::COPY_DST;
        for u in [wgpu::TextureUsages::TEXTURE_BINDING, wgpu::TextureUsages::STORAGE_BINDING] {
            if allowed.contains(u) {
                usage |= u;
            }
        }
        if let Some(t) = texels {
            let want = size.iter().map(|&d| d as usize).product::<usize>();
            if t.len() != want {
                return Err(Error::LengthMismatch {
                    detail: format!("{} texels for a texture of {}×{}×{} = {want}", t.len(), size[0], size[1], size[2]),
                });
            }
        }
        self.alive()?;
        let ((raw, view), error) = self.scoped(|| {
            let raw = self.inner.device.create_texture(&wgpu::TextureDescriptor {
                label: Some("kernels texture"),
                size: wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: size[2] },
                mip_level_count: 1,
                sample_count: 1,
                dimension,
                format: F::FORMAT,
                usage,
                view_formats: &[],
            });
            if let Some(t) = texels {
                write_texels::<F>(self, &raw, size, t);
            }
            let view = raw.create_view(&wgpu::TextureViewDescriptor {
                dimension: Some(D::DIM.view_dimension()),
                ..Default::default()
            });
            (raw, view)
        });
        if let Some(message) = error {
            return Err(self.wgpu_error(|| format!("creating a {:?} texture of {size:?}", F::FORMAT), message));
        }
        Ok(Texture { raw, view, size, gpu_id: self.inner.id, id: next_id(), _t: PhantomData, _owner: self.clone() })
    }

    /// What the adapter allows for textures of `format` (sampling, filtering, storage
    /// access).
    pub fn texture_format_features(&self, format: wgpu::TextureFormat) -> wgpu::TextureFormatFeatures {
        self.inner.adapter.get_texture_format_features(format)
    }

    /// A sampler. A descriptor with `compare` set is refused: that is a
    /// [`comparison_sampler`](Gpu::comparison_sampler).
    pub fn sampler(&self, descriptor: &wgpu::SamplerDescriptor<'_>) -> Result<Sampler> {
        if descriptor.compare.is_some() {
            return Err(Error::BadArguments {
                kernel: "sampler".into(),
                detail: "a descriptor with `compare` makes a comparison sampler: use Gpu::comparison_sampler".into(),
            });
        }
        let filtering = [descriptor.mag_filter, descriptor.min_filter].contains(&wgpu::FilterMode::Linear)
            || descriptor.mipmap_filter == wgpu::MipmapFilterMode::Linear;
        let raw = self.new_sampler(descriptor)?;
        Ok(Sampler { raw, filtering, gpu_id: self.inner.id, _owner: self.clone() })
    }

    /// A comparison sampler comparing with `compare`; the rest of `descriptor` as given.
    pub fn comparison_sampler(
        &self,
        compare: wgpu::CompareFunction,
        descriptor: &wgpu::SamplerDescriptor<'_>,
    ) -> Result<ComparisonSampler> {
        let raw = self.new_sampler(&wgpu::SamplerDescriptor { compare: Some(compare), ..descriptor.clone() })?;
        Ok(ComparisonSampler { raw, gpu_id: self.inner.id, _owner: self.clone() })
    }

    fn new_sampler(&self, descriptor: &wgpu::SamplerDescriptor<'_>) -> Result<wgpu::Sampler> {
        self.alive()?;
        let (raw, error) = self.scoped(|| self.inner.device.create_sampler(descriptor));
        match error {
            Some(message) => Err(self.wgpu_error(|| "creating a sampler".into(), message)),
            None => Ok(raw),
        }
    }
}

/// Bytes of one texel of `F`.
fn texel_bytes<F: Format>() -> u32 {
    std::mem::size_of::<F::Texel>() as u32
}

fn write_texels<F: Format>(gpu: &Gpu, raw: &wgpu::Texture, size: [u32; 3], texels: &[F::Texel]) {
    gpu.inner.queue.write_texture(
        wgpu::TexelCopyTextureInfo {
            texture: raw,
            mip_level: 0,
            origin: wgpu::Origin3d::ZERO,
            aspect: wgpu::TextureAspect::All,
        },
        bytemuck::cast_slice(texels),
        wgpu::TexelCopyBufferLayout {
            offset: 0,
            bytes_per_row: Some(size[0] * texel_bytes::<F>()),
            rows_per_image: Some(size[1]),
        },
        wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: size[2] },
    );
}

impl<D: Dimension, F: Format> Texture<D, F> {
    /// `[width, height, layers or depth]`.
    pub fn size(&self) -> [u32; 3] {
        self.size
    }

    /// Texels in all (width × height × layers).
    pub fn texel_count(&self) -> usize {
        self.size.iter().map(|&d| d as usize).product()
    }

    /// The wgpu texture.
    pub fn raw(&self) -> &wgpu::Texture {
        &self.raw
    }

    /// The view kernels bind (of dimension `D`).
    pub fn view(&self) -> &wgpu::TextureView {
        &self.view
    }

    /// Overwrites every texel (rows first, then layers). Ordered before work submitted after.
    pub fn write(&mut self, gpu: &Gpu, texels: &[F::Texel]) -> Result<()> {
        self.same_gpu(gpu)?;
        if texels.len() != self.texel_count() {
            return Err(Error::LengthMismatch {
                detail: format!("writing {} texels into a texture of {}", texels.len(), self.texel_count()),
            });
        }
        gpu.alive()?;
        let ((), error) = gpu.scoped(|| write_texels::<F>(gpu, &self.raw, self.size, texels));
        match error {
            Some(message) => Err(gpu.wgpu_error(|| "writing a texture".into(), message)),
            None => Ok(()),
        }
    }

    fn same_gpu(&self, gpu: &Gpu) -> Result<()> {
        if self.gpu_id != gpu.inner.id {
            return Err(Error::Gpu("this texture belongs to another GPU context".into()));
        }
        Ok(())
    }

    /// Row pitch of the read-back copy: wgpu copies rows at multiples of 256 bytes.
    fn padded_row(&self) -> u32 {
        (self.size[0] * texel_bytes::<F>()).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)
    }

    /// A mappable copy of every texel, submitted.
    fn copy_to_staging(&self, gpu: &Gpu) -> Result<wgpu::Buffer> {
        self.same_gpu(gpu)?;
        gpu.alive()?;
        let row = self.padded_row();
        let bytes = u64::from(row) * u64::from(self.size[1]) * u64::from(self.size[2]);
        let device = &gpu.inner.device;
        let (staging, error) = gpu.scoped(|| {
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kernels texture readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            encoder.copy_texture_to_buffer(
                self.raw.as_image_copy(),
                wgpu::TexelCopyBufferInfo {
                    buffer: &staging,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: 0,
                        bytes_per_row: Some(row),
                        rows_per_image: Some(self.size[1]),
                    },
                },
                wgpu::Extent3d { width: self.size[0], height: self.size[1], depth_or_array_layers: self.size[2] },
            );
            gpu.inner.queue.submit([encoder.finish()]);
            staging
        });
        match error {
            Some(message) => Err(gpu.wgpu_error(|| "reading a texture".into(), message)),
            None => Ok(staging),
        }
    }

    /// The texels of a mapped staging copy, without the row padding.
    fn unpack(&self, staging: &wgpu::Buffer) -> Result<Vec<F::Texel>> {
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("cannot read the mapped texture copy: {e}")))?;
        let (row, width) = (self.padded_row() as usize, self.size[0] as usize * texel_bytes::<F>() as usize);
        let mut out: Vec<F::Texel> = vec![bytemuck::Zeroable::zeroed(); self.texel_count()];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        for (r, dst) in bytes.chunks_exact_mut(width.max(1)).enumerate() {
            dst.copy_from_slice(&view[r * row..r * row + width]);
        }
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Copies every texel back to the host (rows first, then layers). Waits for all work
    /// submitted before. Not on the web: use [`Texture::read_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<F::Texel>> {
        let staging = self.copy_to_staging(gpu)?;
        crate::buffer::map_blocking(gpu, &staging)?;
        self.unpack(&staging)
    }

    /// Copies every texel back to the host without blocking (for the web).
    pub async fn read_async(&self, gpu: &Gpu) -> Result<Vec<F::Texel>> {
        let staging = self.copy_to_staging(gpu)?;
        crate::buffer::map_async(gpu, &staging).await?;
        self.unpack(&staging)
    }
}
