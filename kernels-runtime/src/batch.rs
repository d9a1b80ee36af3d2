//! Recording calls: a [`Batch`] records many kernel calls into one command encoder and one
//! compute pass and submits them at once (a training step is hundreds of dispatches); a
//! [`Gpu`] used directly submits each call as it comes.

use crate::buffer::{Buffer, Element, StructBuffer};
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::grid::Grid;
use crate::kernel::{BindingKind, KernelDef, ResourceKind, SampleKind, TextureAccess, TextureDim};
use crate::texture::{ComparisonSampler, Dimension, Format, Sampler, Texture};
use smallvec::SmallVec;
use std::cell::RefCell;

/// Where a generated function records its call: `&Gpu` (submits at once) or `&Batch`.
pub trait Record {
    /// Records (or runs) one call.
    fn record(self, call: Call<'_>) -> Result<()>;

    /// The context the calls go to (for host code that chooses a kernel by what the device
    /// offers, such as `kernels::ops`' tensor-core products).
    fn gpu(&self) -> &Gpu;
}

/// One call of a kernel: what generated functions build, and the untyped API for tools
/// that load kernels by name (`Record::record(&gpu, Call { … })`). Every check of the typed
/// API happens here too, at run time.
pub struct Call<'a> {
    /// The kernel.
    pub kernel: &'static KernelDef,
    /// Its grid.
    pub grid: Grid,
    /// One argument per binding, in binding order.
    pub args: &'a [Arg<'a>],
    /// Override values by key.
    pub overrides: &'a [(&'static str, f64)],
}

/// One argument of a [`Call`].
pub enum Arg<'a> {
    /// A storage buffer.
    Storage {
        /// The buffer's allocation.
        raw: &'a wgpu::Buffer,
        /// The allocation's identity (for the aliasing check).
        id: u64,
        /// The bytes of `raw` bound, `[start, end)`.
        range: (u64, u64),
        /// The context it belongs to.
        gpu_id: u64,
        /// Bound writable.
        writable: bool,
    },
    /// Uniform bytes.
    Uniform(&'a [u8]),
    /// A texture, for a [`ResourceDef`](crate::ResourceDef) of kind `Texture` or
    /// `StorageTexture`.
    Texture {
        /// Its view.
        view: &'a wgpu::TextureView,
        /// Its identity (for the aliasing check).
        id: u64,
        /// The context it belongs to.
        gpu_id: u64,
        /// The view's dimension.
        dim: TextureDim,
        /// Its format.
        format: wgpu::TextureFormat,
        /// Bound writable (a storage texture with `write` or `read_write` access).
        writable: bool,
    },
    /// A sampler, for a resource of kind `Sampler`.
    Sampler {
        /// The sampler.
        raw: &'a wgpu::Sampler,
        /// The context it belongs to.
        gpu_id: u64,
        /// It filters (linear filtering).
        filtering: bool,
        /// It is a comparison sampler.
        comparison: bool,
    },
    /// The bytes of the kernel's `var<immediate>`: the last argument, where the kernel has one.
    Immediate(&'a [u8]),
}

impl<'a> Arg<'a> {
    /// A storage buffer argument.
    pub fn storage<T: Element>(buffer: &'a Buffer<T>, writable: bool) -> Self {
        Arg::Storage { raw: &buffer.raw, id: buffer.root, range: buffer.range(), gpu_id: buffer.gpu_id, writable }
    }

    /// A storage buffer argument holding a struct that ends in a runtime-sized array.
    pub fn storage_struct<H: Element, E: Element>(buffer: &'a StructBuffer<H, E>, writable: bool) -> Self {
        Arg::storage(&buffer.bytes, writable)
    }

    /// A uniform argument.
    pub fn uniform(bytes: &'a [u8]) -> Self {
        Arg::Uniform(bytes)
    }

    /// A texture argument, bound writable for a storage texture the kernel writes.
    pub fn texture<D: Dimension, F: Format>(texture: &'a Texture<D, F>, writable: bool) -> Self {
        Arg::Texture {
            view: &texture.view,
            id: texture.id,
            gpu_id: texture.gpu_id,
            dim: D::DIM,
            format: F::FORMAT,
            writable,
        }
    }

    /// A sampler argument.
    pub fn sampler(sampler: &'a Sampler) -> Self {
        Arg::Sampler { raw: &sampler.raw, gpu_id: sampler.gpu_id, filtering: sampler.filtering, comparison: false }
    }

    /// A comparison sampler argument.
    pub fn comparison_sampler(sampler: &'a ComparisonSampler) -> Self {
        Arg::Sampler { raw: &sampler.raw, gpu_id: sampler.gpu_id, filtering: false, comparison: true }
    }

    /// The immediate argument.
    pub fn immediate(bytes: &'a [u8]) -> Self {
        Arg::Immediate(bytes)
    }
}

/// Uniform data is packed into 64 KiB buffers and bound with dynamic offsets, so a batch of
/// hundreds of calls uploads its parameters in a few writes.
const CHUNK: u64 = 64 * 1024;

struct Chunk {
    buffer: wgpu::Buffer,
    data: Vec<u8>,
}

/// Timestamps around every dispatch of a profiled batch.
struct Timer {
    queries: wgpu::QuerySet,
    capacity: u32,
    kernels: Vec<&'static KernelDef>,
}

struct State {
    timer: Option<Timer>,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// The pipeline last set in `pass` (to skip setting it again).
    pass_pipeline: Option<usize>,
    /// The pipeline of the last call (to skip the cache lookup for the same kernel).
    last: Option<std::sync::Arc<crate::pipeline::Compiled>>,
    chunks: Vec<Chunk>,
    dispatches: usize,
    /// Each kernel recorded, once, in first-use order (named by a failed submit).
    kernels: Vec<&'static KernelDef>,
}

/// Calls recorded for one submission. Record into it with `&batch` (generated functions take
/// `impl Record`), then [`submit`](Batch::submit). Dropping a batch without submitting
/// discards what it recorded.
pub struct Batch<'g> {
    gpu: &'g Gpu,
    state: RefCell<State>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("dispatches", &self.dispatches()).finish_non_exhaustive()
    }
}

impl Gpu {
    /// Starts a batch.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            gpu: self,
            state: RefCell::new(State {
                timer: None,
                encoder: None,
                pass: None,
                pass_pipeline: None,
                last: None,
                chunks: Vec::new(),
                dispatches: 0,
                kernels: Vec::new(),
            }),
        }
    }

    /// Checks a call against the kernel and the device; returns the grid.
    fn prepare(&self, call: &Call<'_>) -> Result<[u32; 3]> {
        let k = call.kernel;
        let name = || k.qualified_name();
        let limits = &self.inner.limits;
        let immediates = usize::from(k.immediate_size > 0);
        if call.args.len() != k.bindings.len() + k.resources.len() + immediates {
            return Err(Error::BadArguments {
                kernel: name(),
                detail: format!(
                    "{} arguments for {} buffer bindings, {} textures and samplers{}",
                    call.args.len(),
                    k.bindings.len(),
                    k.resources.len(),
                    if immediates > 0 { " and the immediate" } else { "" }
                ),
            });
        }
        let (buffers, rest) = call.args.split_at(k.bindings.len());
        let (resources, immediate) = rest.split_at(k.resources.len());
        for (def, arg) in k.resources.iter().zip(resources) {
            self.check_resource(k, def, arg)?;
        }
        if let [arg] = immediate {
            match arg {
                Arg::Immediate(bytes) if bytes.len() as u64 == u64::from(k.immediate_size) => {}
                Arg::Immediate(bytes) => {
                    return Err(Error::BadArguments {
                        kernel: name(),
                        detail: format!("the immediate is {} bytes, not {}", bytes.len(), k.immediate_size),
                    });
                }
                _ => {
                    return Err(Error::BadArguments {
                        kernel: name(),
                        detail: "the last argument must be the immediate (`Arg::immediate`)".into(),
                    });
                }
            }
        }
        for (def, arg) in k.bindings.iter().zip(buffers) {
            match (def.kind, arg) {
                (BindingKind::Uniform, Arg::Uniform(bytes)) => {
                    if bytes.len() as u64 != def.stride as u64 {
                        return Err(Error::BadArguments {
                            kernel: name(),
                            detail: format!("uniform `{}` is {} bytes, not {}", def.name, bytes.len(), def.stride),
                        });
                    }
                    if bytes.len() as u64 > limits.max_uniform_buffer_binding_size {
                        return Err(Error::BindingTooLarge {
                            kernel: name(),
                            binding: def.name.into(),
                            bytes: bytes.len() as u64,
                            limit: limits.max_uniform_buffer_binding_size,
                            what: "uniform",
                        });
                    }
                }
                (BindingKind::Read | BindingKind::ReadWrite, Arg::Storage { range, gpu_id, writable, .. }) => {
                    let bytes = range.1 - range.0;
                    if *writable != (def.kind == BindingKind::ReadWrite) {
                        return Err(Error::BadArguments {
                            kernel: name(),
                            detail: format!(
                                "binding `{}` is {:?} but the argument is {}",
                                def.name,
                                def.kind,
                                if *writable { "writable" } else { "read-only" }
                            ),
                        });
                    }
                    if *gpu_id != self.inner.id {
                        return Err(Error::ForeignBuffer { kernel: name(), binding: def.name.into() });
                    }
                    let needed = u64::from(def.offset) + def.min_elems.max(1) * def.stride as u64;
                    if bytes < needed {
                        return Err(Error::BufferTooShort {
                            kernel: name(),
                            binding: def.name.into(),
                            needed,
                            got: bytes,
                        });
                    }
                    let limit = limits.max_storage_buffer_binding_size;
                    if bytes > limit {
                        return Err(Error::BindingTooLarge {
                            kernel: name(),
                            binding: def.name.into(),
                            bytes,
                            limit,
                            what: "storage",
                        });
                    }
                }
                _ => {
                    return Err(Error::BadArguments {
                        kernel: name(),
                        detail: format!("binding `{}` is {:?} but the argument is not", def.name, def.kind),
                    });
                }
            }
        }
        // One allocation (or texture) in two bindings is allowed when both only read it, or,
        // for disjoint parts of one buffer, when both write (graphics APIs track a dispatch's
        // usage per allocation: read-only beside writable conflicts even where the bytes do
        // not overlap).
        let binding_name = |i: usize| {
            if i < k.bindings.len() { k.bindings[i].name } else { k.resources[i - k.bindings.len()].name }
        };
        let identity = |a: &Arg<'_>| match a {
            Arg::Storage { id, writable, range, .. } => Some((0, *id, *writable, *range)),
            Arg::Texture { id, writable, .. } => Some((1, *id, *writable, (0, u64::MAX))),
            _ => None,
        };
        for (i, a) in call.args.iter().enumerate() {
            for (j, b) in call.args.iter().enumerate().skip(i + 1) {
                if let (Some((ka, ia, wa, ra)), Some((kb, ib, wb, rb))) = (identity(a), identity(b))
                    && (ka, ia) == (kb, ib)
                    && (wa || wb)
                    && (wa != wb || (ra.0 < rb.1 && rb.0 < ra.1))
                {
                    return Err(Error::Aliased {
                        kernel: name(),
                        first: binding_name(i).into(),
                        second: binding_name(j).into(),
                    });
                }
            }
        }
        let [x, y, z] = k.workgroup_size_with(call.overrides)?;
        let threads = u64::from(x) * u64::from(y) * u64::from(z);
        call.grid.resolve(name, threads, limits.max_compute_workgroups_per_dimension)
    }

    /// Checks a texture or sampler argument against its binding and the device.
    fn check_resource(&self, k: &KernelDef, def: &crate::kernel::ResourceDef, arg: &Arg<'_>) -> Result<()> {
        let bad = |detail: String| Error::BadArguments { kernel: k.qualified_name(), detail };
        let formats = |format: wgpu::TextureFormat| self.inner.adapter.get_texture_format_features(format);
        match (def.kind, arg) {
            (ResourceKind::Texture { dim, sample, .. }, Arg::Texture { dim: got, format, gpu_id, writable, .. }) => {
                self.same_context(k, def.name, *gpu_id)?;
                if *writable {
                    return Err(bad(format!("texture `{}` is sampled, so it is bound read-only", def.name)));
                }
                if dim != *got {
                    return Err(bad(format!("texture `{}` is `{}`, not a {got:?} texture", def.name, def.wgsl_type)));
                }
                let features = Some(self.inner.features);
                let kind = format.sample_type(None, features);
                let fits = match (sample, kind) {
                    (SampleKind::Float { .. }, Some(wgpu::TextureSampleType::Float { .. })) => true,
                    (SampleKind::Float { .. }, Some(wgpu::TextureSampleType::Depth)) => false,
                    (SampleKind::Sint, Some(wgpu::TextureSampleType::Sint)) => true,
                    (SampleKind::Uint, Some(wgpu::TextureSampleType::Uint)) => true,
                    (SampleKind::Depth, Some(wgpu::TextureSampleType::Depth)) => true,
                    _ => false,
                };
                if !fits {
                    return Err(bad(format!(
                        "texture `{}` is `{}`, which cannot read {format:?} texels",
                        def.name, def.wgsl_type
                    )));
                }
                // As the device validates it: with the features enabled (r32float filters only
                // with FLOAT32_FILTERABLE, whatever the adapter could do).
                let filterable = matches!(kind, Some(wgpu::TextureSampleType::Float { filterable: true }));
                if sample == (SampleKind::Float { filterable: true }) && !filterable {
                    return Err(bad(format!(
                        "texture `{}` is sampled through a sampler, and {format:?} is not filterable on this device",
                        def.name
                    )));
                }
            }
            (
                ResourceKind::StorageTexture { dim, format, access },
                Arg::Texture { dim: got, format: f, gpu_id, writable, .. },
            ) => {
                self.same_context(k, def.name, *gpu_id)?;
                if dim != *got || format != *f {
                    return Err(bad(format!(
                        "storage texture `{}` is `{}`, not a {got:?} {f:?} texture",
                        def.name, def.wgsl_type
                    )));
                }
                if *writable != (access != TextureAccess::Read) {
                    return Err(bad(format!(
                        "storage texture `{}` is {access:?} but the argument is {}",
                        def.name,
                        if *writable { "writable" } else { "read-only" }
                    )));
                }
                let flag = match access {
                    TextureAccess::Read => wgpu::TextureFormatFeatureFlags::STORAGE_READ_ONLY,
                    TextureAccess::Write => wgpu::TextureFormatFeatureFlags::STORAGE_WRITE_ONLY,
                    TextureAccess::ReadWrite => wgpu::TextureFormatFeatureFlags::STORAGE_READ_WRITE,
                };
                let features = formats(format);
                if !features.allowed_usages.contains(wgpu::TextureUsages::STORAGE_BINDING)
                    || !features.flags.contains(flag)
                {
                    return Err(Error::MissingFeature {
                        kernel: k.qualified_name(),
                        feature: "TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES",
                        adapter: self.inner.report.name.clone(),
                        reason: format!(
                            ": storage texture `{}` needs {access:?} storage access to {format:?}, which the adapter `{}` does not offer",
                            def.name, self.inner.report.name
                        ),
                    });
                }
            }
            (
                ResourceKind::Sampler { comparison, filtering },
                Arg::Sampler { gpu_id, comparison: c, filtering: f, .. },
            ) => {
                self.same_context(k, def.name, *gpu_id)?;
                if *f && !filtering {
                    return Err(bad(format!(
                        "sampler `{}` samples a depth texture, so it must not filter: give it nearest filters",
                        def.name
                    )));
                }
                if comparison != *c {
                    return Err(bad(format!(
                        "sampler `{}` is `{}`; the argument is {}",
                        def.name,
                        def.wgsl_type,
                        if *c { "a comparison sampler" } else { "not a comparison sampler" }
                    )));
                }
            }
            _ => return Err(bad(format!("binding `{}` is `{}` but the argument is not", def.name, def.wgsl_type))),
        }
        Ok(())
    }

    fn same_context(&self, k: &KernelDef, binding: &str, gpu_id: u64) -> Result<()> {
        if gpu_id != self.inner.id {
            return Err(Error::ForeignBuffer { kernel: k.qualified_name(), binding: binding.into() });
        }
        Ok(())
    }
}

impl Record for &Gpu {
    fn record(self, call: Call<'_>) -> Result<()> {
        let batch = self.batch();
        (&batch).record(call)?;
        batch.submit()
    }

    fn gpu(&self) -> &Gpu {
        self
    }
}

impl Record for &Batch<'_> {
    fn record(self, call: Call<'_>) -> Result<()> {
        let gpu = self.gpu;
        let [x, y, z] = gpu.prepare(&call)?;
        gpu.alive()?;
        let mut guard = self.state.borrow_mut();
        // What wgpu rejects here (a bind group over a destroyed buffer, say) is this call's. Only
        // validation errors are caught: one scope instead of three keeps a call within a few
        // tenths of a microsecond of hand-written wgpu; this call's rarer out-of-memory or
        // internal errors reach `wait`, and a bind group they break fails the submission.
        let (result, error) =
            gpu.scoped_by(&[wgpu::ErrorFilter::Validation], || record_into(gpu, &mut guard, &call, [x, y, z]));
        match (result, error) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(message)) => {
                Err(gpu.wgpu_error(|| format!("kernel `{}`", call.kernel.qualified_name()), message))
            }
            (Ok(()), None) => Ok(()),
        }
    }

    fn gpu(&self) -> &Gpu {
        self.gpu
    }
}

/// Records one checked call into the batch's pass.
fn record_into(gpu: &Gpu, state: &mut State, call: &Call<'_>, [x, y, z]: [u32; 3]) -> Result<()> {
    // Disjoint borrows of the state's fields.
    let State { timer, encoder, pass, pass_pipeline, last, chunks, dispatches, kernels } = state;
    // Consecutive calls of one kernel skip the pipeline cache's lock.
    let reuse = last
        .as_ref()
        .is_some_and(|c| call.overrides.is_empty() && c.overrides_empty && std::ptr::eq(c.kernel, call.kernel));
    if !reuse {
        *last = Some(gpu.pipeline(call.kernel, call.overrides)?);
        if !kernels.iter().any(|k| std::ptr::eq(*k, call.kernel)) {
            kernels.push(call.kernel);
        }
    }
    let Some(compiled) = last.as_ref() else { unreachable!("set above") };
    if x == 0 || y == 0 || z == 0 {
        return Ok(());
    }
    let align = gpu.inner.limits.min_uniform_buffer_offset_alignment as u64;
    let mut offsets: SmallVec<[u32; 4]> = SmallVec::new();
    let mut slots: SmallVec<[(usize, u64); 4]> = SmallVec::new();
    for arg in call.args {
        if let Arg::Uniform(bytes) = arg {
            let size = (bytes.len() as u64).max(16).div_ceil(16) * 16;
            let (chunk, offset) = place_uniform(chunks, gpu, bytes, size, align);
            offsets.push(offset as u32);
            slots.push((chunk, size));
        }
    }
    let mut slots = slots.iter();
    let numbers = call.kernel.bindings.iter().map(|b| b.binding).chain(call.kernel.resources.iter().map(|r| r.binding));
    let mut immediate: Option<&[u8]> = None;
    let mut entries: SmallVec<[wgpu::BindGroupEntry<'_>; 8]> = SmallVec::new();
    for (binding, arg) in numbers.zip(call.args) {
        let resource = match arg {
            Arg::Storage { raw, range: (start, end), .. } => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: raw,
                offset: *start,
                size: std::num::NonZeroU64::new(end - start),
            }),
            Arg::Uniform(_) => {
                let &(chunk, size) = slots.next().expect("one slot per uniform");
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &chunks[chunk].buffer,
                    offset: 0,
                    size: std::num::NonZeroU64::new(size),
                })
            }
            Arg::Texture { view, .. } => wgpu::BindingResource::TextureView(view),
            Arg::Sampler { raw, .. } => wgpu::BindingResource::Sampler(raw),
            Arg::Immediate(_) => unreachable!("the immediate is past the bindings"),
        };
        entries.push(wgpu::BindGroupEntry { binding, resource });
    }
    if let Some(Arg::Immediate(bytes)) = call.args.last() {
        immediate = Some(bytes);
    }
    let bind_group = gpu.inner.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &compiled.layout,
        entries: &entries,
    });
    let pass = match pass {
        Some(p) => p,
        None => {
            let enc = encoder.get_or_insert_with(|| new_encoder(gpu));
            *pass_pipeline = None;
            pass.insert(
                enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("kernels"), timestamp_writes: None })
                    .forget_lifetime(),
            )
        }
    };
    let id = std::sync::Arc::as_ptr(compiled) as usize;
    if *pass_pipeline != Some(id) {
        pass.set_pipeline(&compiled.pipeline);
        *pass_pipeline = Some(id);
    }
    pass.set_bind_group(0, &bind_group, &offsets);
    if let Some(bytes) = immediate {
        // Immediates are set in words; the generated type is a multiple of 4 bytes.
        pass.set_immediates(0, bytes);
    }
    let timed = match timer {
        Some(t) if (t.kernels.len() as u32) < t.capacity / 2 => {
            pass.write_timestamp(&t.queries, 2 * t.kernels.len() as u32);
            Some(t)
        }
        _ => None,
    };
    pass.dispatch_workgroups(x, y, z);
    if let Some(t) = timed {
        pass.write_timestamp(&t.queries, 2 * t.kernels.len() as u32 + 1);
        t.kernels.push(call.kernel);
    }
    *dispatches += 1;
    Ok(())
}

fn new_encoder(gpu: &Gpu) -> wgpu::CommandEncoder {
    gpu.inner.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kernels batch") })
}

impl State {
    /// The encoder, with any open compute pass ended (for copies and clears).
    fn encoder(&mut self, gpu: &Gpu) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.pass_pipeline = None;
        self.encoder.get_or_insert_with(|| new_encoder(gpu))
    }
}

/// Places uniform bytes; returns the chunk's index and the dynamic offset.
fn place_uniform(chunks: &mut Vec<Chunk>, gpu: &Gpu, bytes: &[u8], size: u64, align: u64) -> (usize, u64) {
    let fits = |c: &Chunk| {
        let offset = (c.data.len() as u64).div_ceil(align) * align;
        offset + size <= c.buffer.size()
    };
    if !chunks.last().is_some_and(fits) {
        let capacity = CHUNK.max(size);
        let take = || gpu.inner.uniform_pool.lock().ok().and_then(|mut p| p.pop());
        let pooled = if capacity == CHUNK {
            take().or_else(|| {
                // Run the callbacks of finished submissions, which return their chunks.
                let _ = gpu.inner.device.poll(wgpu::PollType::Poll);
                take()
            })
        } else {
            None
        };
        let buffer = pooled.unwrap_or_else(|| {
            gpu.inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kernels uniforms"),
                size: capacity,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        chunks.push(Chunk { buffer, data: Vec::with_capacity(CHUNK as usize) });
    }
    let index = chunks.len() - 1;
    let chunk = &mut chunks[index];
    let offset = (chunk.data.len() as u64).div_ceil(align) * align;
    chunk.data.resize(offset as usize, 0);
    chunk.data.extend_from_slice(bytes);
    chunk.data.resize((offset + size) as usize, 0);
    (index, offset)
}

/// GPU time of one dispatch of a profiled batch.
#[derive(Clone, Debug)]
pub struct DispatchTime {
    /// The kernel.
    pub kernel: &'static KernelDef,
    /// Start, in nanoseconds from the batch's first timestamp.
    pub start_ns: f64,
    /// End, in nanoseconds from the batch's first timestamp.
    pub end_ns: f64,
}

/// Where the GPU's time went in a profiled batch.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Every timed dispatch, in order.
    pub dispatches: Vec<DispatchTime>,
}

impl Profile {
    /// From the first dispatch's start to the last one's end.
    pub fn span_ns(&self) -> f64 {
        match (self.dispatches.first(), self.dispatches.last()) {
            (Some(a), Some(b)) => b.end_ns - a.start_ns,
            _ => 0.0,
        }
    }

    /// Time inside dispatches.
    pub fn busy_ns(&self) -> f64 {
        self.dispatches.iter().map(|d| d.end_ns - d.start_ns).sum()
    }

    /// The fraction of the span with no dispatch running (gaps between dispatches).
    pub fn idle_fraction(&self) -> f64 {
        let span = self.span_ns();
        if span <= 0.0 { 0.0 } else { ((span - self.busy_ns()) / span).max(0.0) }
    }

    /// Total time and count per kernel (`module::kernel`), largest first.
    pub fn by_kernel(&self) -> Vec<(String, f64, usize)> {
        let mut out: Vec<(String, f64, usize)> = Vec::new();
        for d in &self.dispatches {
            let name = d.kernel.qualified_name();
            match out.iter_mut().find(|(n, _, _)| *n == name) {
                Some(e) => {
                    e.1 += d.end_ns - d.start_ns;
                    e.2 += 1;
                }
                None => out.push((name, d.end_ns - d.start_ns, 1)),
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }
}

impl Gpu {
    /// A batch that timestamps every dispatch (up to `max_dispatches`, and at most
    /// `wgpu::QUERY_SET_MAX_QUERIES / 2` = 2048: later dispatches run untimed); submit it with
    /// [`Batch::submit_profiled`]. Needs `TIMESTAMP_QUERY_INSIDE_PASSES` (which wgpu does not
    /// offer in a browser).
    pub fn profiled_batch(&self, max_dispatches: u32) -> Result<Batch<'_>> {
        let needed = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        if !self.inner.features.contains(needed) {
            return Err(Error::MissingFeature {
                kernel: "profiling".into(),
                feature: "TIMESTAMP_QUERY_INSIDE_PASSES",
                adapter: self.inner.report.name.clone(),
                reason: format!(", which the adapter `{}` does not offer", self.inner.report.name),
            });
        }
        self.alive()?;
        let capacity = max_dispatches.max(1).saturating_mul(2).min(wgpu::QUERY_SET_MAX_QUERIES);
        let (queries, error) = self.scoped(|| {
            self.inner.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernels profile"),
                ty: wgpu::QueryType::Timestamp,
                count: capacity,
            })
        });
        if let Some(message) = error {
            return Err(self.wgpu_error(|| format!("creating a query set of {capacity} timestamps"), message));
        }
        let batch = self.batch();
        batch.state.borrow_mut().timer = Some(Timer { queries, capacity, kernels: Vec::new() });
        Ok(batch)
    }
}

impl Batch<'_> {
    /// Submits a batch from [`Gpu::profiled_batch`], waits for it, and returns the GPU time of
    /// each dispatch. Not on the web (it blocks).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn submit_profiled(self) -> Result<Profile> {
        let gpu = self.gpu;
        let Some(timer) = self.state.borrow_mut().timer.take() else {
            return Err(Error::Gpu("submit_profiled on a batch that is not profiled (use Gpu::profiled_batch)".into()));
        };
        let count = 2 * timer.kernels.len() as u32;
        if count == 0 {
            self.submit()?;
            return Ok(Profile::default());
        }
        let bytes = count as u64 * 8;
        let device = &gpu.inner.device;
        gpu.alive()?;
        let ((resolve, readback), error) = gpu.scoped(|| {
            let buffer = |label, usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: bytes,
                    usage,
                    mapped_at_creation: false,
                })
            };
            (
                buffer("kernels profile resolve", wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
                buffer("kernels profile readback", wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
            )
        });
        if let Some(message) = error {
            return Err(gpu.wgpu_error(|| "creating the timestamp buffers".into(), message));
        }
        {
            let mut state = self.state.borrow_mut();
            let encoder = state.encoder(gpu);
            encoder.resolve_query_set(&timer.queries, 0..count, &resolve, 0);
            encoder.copy_buffer_to_buffer(&resolve, 0, &readback, 0, bytes);
        }
        self.submit()?;
        let (tx, rx) = std::sync::mpsc::channel();
        readback.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        gpu.poll_wait()?;
        rx.recv()
            .map_err(|_| Error::Gpu("timestamp readback never completed".into()))?
            .map_err(|e| gpu.wgpu_error(|| "reading timestamps".into(), format!("cannot map them: {e}")))?;
        let view = readback.slice(..).get_mapped_range().map_err(|e| Error::Gpu(e.to_string()))?;
        let mut ticks = vec![0u64; count as usize];
        bytemuck::cast_slice_mut::<u64, u8>(&mut ticks).copy_from_slice(&view);
        drop(view);
        readback.unmap();
        let period = gpu.inner.queue.get_timestamp_period() as f64;
        let t0 = ticks[0];
        let ns = |t: u64| t.wrapping_sub(t0) as i64 as f64 * period;
        Ok(Profile {
            dispatches: timer
                .kernels
                .iter()
                .enumerate()
                .map(|(i, &kernel)| DispatchTime { kernel, start_ns: ns(ticks[2 * i]), end_ns: ns(ticks[2 * i + 1]) })
                .collect(),
        })
    }

    /// Number of dispatches recorded.
    pub fn dispatches(&self) -> usize {
        self.state.borrow().dispatches
    }

    /// Records a copy of `src` into `dst` (same length).
    pub fn copy<T: Element>(&self, src: &Buffer<T>, dst: &mut Buffer<T>) -> Result<()> {
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch {
                detail: format!("copying {} elements into a buffer of {}", src.len(), dst.len()),
            });
        }
        if src.gpu_id != self.gpu.inner.id || dst.gpu_id != self.gpu.inner.id {
            return Err(Error::Gpu("copy between buffers of different GPU contexts".into()));
        }
        let size = src.size.min(dst.size);
        self.copy_bytes(src, src.offset, dst, dst.offset, size);
        Ok(())
    }

    /// Records a copy of `len` elements of `src` from element `src_start` into `dst` from element
    /// `dst_start` (`src` and `dst` distinct, as Rust's borrows make them). Both ranges must lie
    /// inside their buffers and be whole 4-byte words (any range of 4-byte elements is).
    pub fn copy_range<T: Element>(
        &self,
        src: &Buffer<T>,
        src_start: usize,
        dst: &mut Buffer<T>,
        dst_start: usize,
        len: usize,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let fits = |start: usize, total: usize| start.checked_add(len).is_some_and(|end| end <= total);
        if !fits(src_start, src.len()) || !fits(dst_start, dst.len()) {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "copying {len} elements from element {src_start} of a buffer of {} into element {dst_start} of a buffer of {}",
                    src.len(),
                    dst.len()
                ),
            });
        }
        let aligned = |elements: usize| (elements * size).is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT as usize);
        if !aligned(src_start) || !aligned(dst_start) || !aligned(len) {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "a copy of {len} elements of {size} bytes from element {src_start} to element {dst_start} is not made of whole 4-byte words"
                ),
            });
        }
        if src.gpu_id != self.gpu.inner.id || dst.gpu_id != self.gpu.inner.id {
            return Err(Error::Gpu("copy between buffers of different GPU contexts".into()));
        }
        if len == 0 {
            return Ok(());
        }
        let (from, to, bytes) =
            (src.offset + (src_start * size) as u64, dst.offset + (dst_start * size) as u64, (len * size) as u64);
        self.copy_bytes(src, from, dst, to, bytes);
        Ok(())
    }

    /// Records a copy of `bytes` from byte `from` of `src`'s allocation to byte `to` of `dst`'s.
    /// Parts of one allocation copy through a temporary buffer: wgpu copies only between
    /// distinct buffers.
    fn copy_bytes<T>(&self, src: &Buffer<T>, from: u64, dst: &Buffer<T>, to: u64, bytes: u64) {
        let mut state = self.state.borrow_mut();
        let encoder = state.encoder(self.gpu);
        if src.root != dst.root {
            encoder.copy_buffer_to_buffer(&src.raw, from, &dst.raw, to, bytes);
            return;
        }
        let temp = self.gpu.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernels copy between parts"),
            size: bytes,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&src.raw, from, &temp, 0, bytes);
        encoder.copy_buffer_to_buffer(&temp, 0, &dst.raw, to, bytes);
    }

    /// Records zeroing `buffer`.
    pub fn clear<T: Element>(&self, buffer: &mut Buffer<T>) -> Result<()> {
        if buffer.gpu_id != self.gpu.inner.id {
            return Err(Error::Gpu("this buffer belongs to another GPU context".into()));
        }
        let (offset, size) = (buffer.offset, buffer.size);
        self.state.borrow_mut().encoder(self.gpu).clear_buffer(&buffer.raw, offset, Some(size));
        Ok(())
    }

    /// Submits everything recorded. Does not wait for the GPU. An error wgpu raises for the
    /// submission is [`Error::Submit`], naming its kernels.
    pub fn submit(self) -> Result<()> {
        let gpu = self.gpu;
        gpu.alive()?;
        let mut state = self.state.into_inner();
        let kernels = std::mem::take(&mut state.kernels);
        let ((), error) = gpu.scoped(|| submit_state(gpu, state));
        #[cfg(target_arch = "wasm32")]
        gpu.take_errors()?;
        match error {
            Some(message) => Err(match gpu.alive() {
                Err(lost) => lost,
                Ok(()) => Error::Submit { kernels: kernels.iter().map(|k| k.qualified_name()).collect(), message },
            }),
            None => Ok(()),
        }
    }
}

/// Ends the pass, writes the uniforms, submits, and returns the uniform chunks to the pool when
/// the GPU is done with them.
fn submit_state(gpu: &Gpu, mut state: State) {
    state.pass = None;
    let Some(encoder) = state.encoder.take() else { return };
    let queue = &gpu.inner.queue;
    let mut returned = Vec::new();
    for chunk in state.chunks {
        let mut data = chunk.data;
        data.resize(data.len().div_ceil(4) * 4, 0);
        if !data.is_empty() {
            queue.write_buffer(&chunk.buffer, 0, &data);
        }
        if chunk.buffer.size() == CHUNK {
            returned.push(chunk.buffer);
        }
    }
    queue.submit([encoder.finish()]);
    if !returned.is_empty() {
        // A weak reference: a callback that never runs must not keep the pool (and through its
        // buffers the device) alive.
        let pool = std::sync::Arc::downgrade(&gpu.inner.uniform_pool);
        queue.on_submitted_work_done(move || {
            if let Some(pool) = pool.upgrade()
                && let Ok(mut p) = pool.lock()
            {
                p.extend(returned);
            }
        });
    }
}
