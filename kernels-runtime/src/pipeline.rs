//! Pipelines: built once per context and kernel (and override values), on first use or by
//! [`Gpu::warm_up`], from the variant the device can run.

use crate::context::Gpu;
use crate::disk::PipelineCacheFile;
use crate::error::{Error, Result};
use crate::kernel::{BindingKind, KernelDef, ResourceKind, SampleKind, TextureAccess, VariantDef};
use crate::options::RuntimeChecks;
use crate::variant::{Unmet, select};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) struct Compiled {
    pub(crate) kernel: &'static KernelDef,
    pub(crate) overrides_empty: bool,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

pub(crate) type Key = (usize, Vec<(&'static str, u64)>);
type Slot = Arc<OnceLock<Result<Arc<Compiled>>>>;

/// Pipelines by (kernel, override values), least recently used dropped past the capacity: a
/// library that compiles shapes in through `override` constants makes one pipeline per shape.
pub(crate) struct PipelineCache {
    state: Mutex<CacheState>,
    capacity: usize,
    built: AtomicU64,
}

#[derive(Default)]
struct CacheState {
    map: HashMap<Key, Entry>,
    /// Incremented on every lookup; an entry's `used` is the tick of its last lookup.
    tick: u64,
    evicted: u64,
    /// The sources hot reload put in place of the compiled ones, by kernel. Changed under this
    /// lock together with the pipelines, so a build that finds its slot after a swap sees the
    /// new source.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    swapped: HashMap<usize, Arc<crate::reload::Swapped>>,
}

struct Entry {
    slot: Slot,
    used: u64,
    /// Hot reload finds a kernel's pipelines by it.
    #[cfg_attr(not(all(feature = "hot-reload", not(target_arch = "wasm32"))), allow(dead_code))]
    kernel: &'static KernelDef,
}

impl PipelineCache {
    pub(crate) fn new(capacity: usize) -> PipelineCache {
        PipelineCache { state: Mutex::default(), capacity: capacity.max(1), built: AtomicU64::new(0) }
    }

    /// The slot of `key`, created (and the least recently used one dropped past the capacity)
    /// if absent. A pipeline dropped from the cache lives on while a batch still holds it.
    fn slot(&self, kernel: &'static KernelDef, key: Key) -> Result<Slot> {
        let mut state = self.state.lock().map_err(|_| Error::Gpu("pipeline cache poisoned".into()))?;
        state.tick += 1;
        let tick = state.tick;
        if let Some(entry) = state.map.get_mut(&key) {
            entry.used = tick;
            return Ok(entry.slot.clone());
        }
        if state.map.len() >= self.capacity {
            // A scan: this runs only when a pipeline is about to be built, which costs far more.
            let oldest = state.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                state.map.remove(&oldest);
                state.evicted += 1;
            }
        }
        let slot = Slot::default();
        state.map.insert(key, Entry { slot: slot.clone(), used: tick, kernel });
        Ok(slot)
    }

    /// Pipelines built so far.
    pub(crate) fn built(&self) -> u64 {
        self.built.load(Ordering::Relaxed)
    }

    /// The override values of every pipeline of `kernel` held now.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub(crate) fn keys_of(&self, kernel: &'static KernelDef) -> Vec<Key> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.map.iter().filter(|(_, e)| std::ptr::eq(e.kernel, kernel)).map(|(k, _)| k.clone()).collect()
    }

    /// The source hot reload put in place of `kernel`'s compiled one.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub(crate) fn swapped(&self, kernel: &KernelDef) -> Option<Arc<crate::reload::Swapped>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.swapped.get(&(kernel as *const KernelDef as usize)).cloned()
    }

    /// Puts `source` in place of `kernel`'s, with the pipelines built from it for the keys in
    /// `built`; `kernel`'s other pipelines (built meanwhile from the previous source) are
    /// dropped, to be built from the new one when next used. Calls that hold a pipeline already
    /// (a batch being recorded) keep it.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub(crate) fn swap(
        &self,
        kernel: &'static KernelDef,
        source: Arc<crate::reload::Swapped>,
        built: Vec<(Key, Arc<Compiled>)>,
    ) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.swapped.insert(kernel as *const KernelDef as usize, source);
        state.map.retain(|key, e| !std::ptr::eq(e.kernel, kernel) || built.iter().any(|(k, _)| k == key));
        for (key, compiled) in built {
            if let Some(e) = state.map.get_mut(&key) {
                let slot = Slot::default();
                let _ = slot.set(Ok(compiled));
                e.slot = slot;
            }
        }
    }

    fn stats(&self) -> PipelineStats {
        let (cached, evicted) = self.state.lock().map(|s| (s.map.len(), s.evicted)).unwrap_or((0, 0));
        PipelineStats { cached, capacity: self.capacity, built: self.built.load(Ordering::Relaxed), evicted }
    }
}

/// The state of a context's pipeline cache ([`Gpu::pipeline_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PipelineStats {
    /// Pipelines held now.
    pub cached: usize,
    /// The most it holds ([`GpuOptions::pipeline_cache_capacity`](crate::GpuOptions)).
    pub capacity: usize,
    /// Pipelines built so far (a pipeline dropped and needed again is built again).
    pub built: u64,
    /// Pipelines dropped to stay within the capacity.
    pub evicted: u64,
}

/// What [`Gpu::warm_up`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WarmUp {
    /// Pipelines built (or found already built).
    pub built: usize,
    /// Kernels this device cannot run, with the reason.
    pub unsupported: Vec<String>,
    /// Wall time, in seconds.
    pub seconds: f64,
}

impl Gpu {
    /// The variant of `kernel` this device runs: the first whose subgroups, f16 and
    /// cooperative-matrix configurations are all enabled. None is [`Error::MissingFeature`],
    /// naming what the most portable variant lacks.
    pub fn variant_for(&self, kernel: &KernelDef) -> Result<&'static VariantDef> {
        select(kernel, &self.inner.caps).map_err(|unmet| self.missing(kernel, unmet))
    }

    pub(crate) fn missing(&self, kernel: &KernelDef, unmet: Unmet) -> Error {
        let report = &self.inner.report;
        let adapter = &report.name;
        let configs = unmet.configs.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let mut reason = if configs.is_empty() { String::new() } else { format!(" ({})", configs.join(", ")) };
        let coop = unmet.feature == "EXPERIMENTAL_COOPERATIVE_MATRIX";
        let offered = unmet.configs.iter().all(|c| report.cooperative_matrix_configs.contains(c));
        match (coop, &report.cooperative_matrix_off) {
            _ if coop && self.inner.browser => reason.push_str(", which browsers (WebGPU) do not offer"),
            (true, Some(why)) if offered => {
                reason.push_str(&format!(", which is off on the adapter `{adapter}`: {why}"))
            }
            (false, _) if self.inner.disabled.contains(&unmet.feature) => {
                let switch = if unmet.feature == "SUBGROUP" { "KERNELS_SUBGROUPS=0" } else { "KERNELS_F16=0" };
                reason.push_str(&format!(", which is turned off on the adapter `{adapter}` ({switch} or GpuOptions)"))
            }
            _ => reason.push_str(&format!(", which the adapter `{adapter}` does not offer")),
        }
        Error::MissingFeature {
            kernel: kernel.qualified_name(),
            feature: unmet.feature,
            adapter: adapter.clone(),
            reason,
        }
    }

    /// The state of the pipeline cache.
    pub fn pipeline_stats(&self) -> PipelineStats {
        self.inner.pipelines.stats()
    }

    /// Whether `kernel`'s shader module is created with wgpu's runtime checks on this context:
    /// `false` only for a kernel marked `// @unchecked` ([`KernelDef::unchecked`], or the
    /// source hot reload swapped in) natively, with
    /// [`GpuOptions::runtime_checks`](crate::GpuOptions::runtime_checks) at
    /// [`RuntimeChecks::AsDeclared`].
    pub fn runtime_checks_for(&self, kernel: &KernelDef) -> bool {
        self.checks(self.declared_unchecked(kernel))
    }

    /// Whether a module declared `unchecked` (or not) gets the runtime checks here.
    fn checks(&self, unchecked: bool) -> bool {
        !unchecked || cfg!(target_arch = "wasm32") || self.inner.runtime_checks == RuntimeChecks::All
    }

    /// Whether the source `kernel` runs (hot reload's where it swapped one in) is marked `@unchecked`.
    fn declared_unchecked(&self, kernel: &KernelDef) -> bool {
        #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
        if let Some(s) = self.inner.pipelines.swapped(kernel) {
            return s.unchecked;
        }
        kernel.unchecked
    }

    pub(crate) fn pipeline(
        &self,
        kernel: &'static KernelDef,
        overrides: &[(&'static str, f64)],
    ) -> Result<Arc<Compiled>> {
        self.slot(kernel, overrides)?.get_or_init(|| self.build(kernel, overrides)).clone()
    }

    fn slot(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Slot> {
        self.inner.pipelines.slot(kernel, key(kernel, overrides))
    }

    /// What to build `kernel` from (hot reload's source where it replaced the compiled one),
    /// once the overrides are known to be complete.
    pub(crate) fn buildable(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Buildable> {
        let source = match self.swapped_source(kernel) {
            Some(source) => source?,
            None => {
                let v = self.variant_for(kernel)?;
                Buildable {
                    wgsl: Cow::Borrowed(if self.inner.browser { v.browser_wgsl } else { v.wgsl }),
                    unchecked: kernel.unchecked,
                    declared: v.overrides.iter().map(|o| o.to_string()).collect(),
                }
            }
        };
        let limit = self.inner.limits.max_immediate_size;
        if kernel.immediate_size > limit {
            return Err(Error::MissingFeature {
                kernel: kernel.qualified_name(),
                feature: "IMMEDIATES",
                adapter: self.inner.report.name.clone(),
                reason: format!(
                    " with {} bytes of immediates, and the adapter `{}` offers {limit} (max_immediate_size)",
                    kernel.immediate_size, self.inner.report.name
                ),
            });
        }
        kernel.workgroup_size_with(overrides)?;
        for o in kernel.overrides {
            if !o.has_default && !overrides.iter().any(|(k, _)| *k == o.key) {
                return Err(Error::BadArguments {
                    kernel: kernel.qualified_name(),
                    detail: format!("override `{}` has no default: set it in the overrides argument", o.name),
                });
            }
        }
        Ok(source)
    }

    /// The source hot reload put in place of `kernel`'s, of the variant this device runs, and
    /// whether it is marked `@unchecked`.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    fn swapped_source(&self, kernel: &'static KernelDef) -> Option<Result<Buildable>> {
        let s = self.inner.pipelines.swapped(kernel)?;
        Some(
            crate::variant::select_in(&s.variants, &self.inner.caps)
                .map(|v| Buildable {
                    wgsl: Cow::Owned(v.wgsl.clone()),
                    unchecked: s.unchecked,
                    declared: v.overrides.clone(),
                })
                .map_err(|unmet| self.missing(kernel, unmet)),
        )
    }

    #[cfg(not(all(feature = "hot-reload", not(target_arch = "wasm32"))))]
    fn swapped_source(&self, _kernel: &'static KernelDef) -> Option<Result<Buildable>> {
        None
    }

    fn build(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Arc<Compiled>> {
        let built = self.build_from(kernel, overrides, &self.buildable(kernel, overrides)?);
        #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
        if let (Some(hot), Some(src)) = (&self.inner.hot, kernel.source) {
            hot.watch(self, src.file);
        }
        built
    }

    /// Builds a pipeline of `kernel` from `source`, inside error scopes (natively).
    pub(crate) fn build_from(
        &self,
        kernel: &'static KernelDef,
        overrides: &[(&'static str, f64)],
        source: &Buildable,
    ) -> Result<Arc<Compiled>> {
        #[cfg(not(target_arch = "wasm32"))]
        let scopes = (
            self.inner.device.push_error_scope(wgpu::ErrorFilter::Validation),
            self.inner.device.push_error_scope(wgpu::ErrorFilter::Internal),
        );
        let (compiled, _module) = self.create(kernel, overrides, source);
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (validation, internal) = scopes;
            let internal = pollster::block_on(internal.pop());
            let validation = pollster::block_on(validation.pop());
            if let Some(e) = validation.or(internal) {
                return Err(Error::Pipeline { kernel: kernel.qualified_name(), message: e.to_string() });
            }
        }
        Ok(Arc::new(compiled))
    }

    /// Creates the layout, shader module and pipeline of one variant; the module without
    /// wgpu's runtime checks where the source is `@unchecked` and the options allow it.
    fn create(
        &self,
        kernel: &'static KernelDef,
        overrides: &[(&'static str, f64)],
        source: &Buildable,
    ) -> (Compiled, wgpu::ShaderModule) {
        let device = &self.inner.device;
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = kernel
            .bindings
            .iter()
            .map(|b| wgpu::BindGroupLayoutEntry {
                binding: b.binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: match b.kind {
                        BindingKind::Read => wgpu::BufferBindingType::Storage { read_only: true },
                        BindingKind::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                        BindingKind::Uniform => wgpu::BufferBindingType::Uniform,
                    },
                    has_dynamic_offset: b.kind == BindingKind::Uniform,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        entries.extend(kernel.resources.iter().map(|r| wgpu::BindGroupLayoutEntry {
            binding: r.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: resource_type(r.kind),
            count: None,
        }));
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(kernel.name), entries: &entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: kernel.immediate_size,
        });
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            // A browser compiles the WGSL itself and needs `enable subgroups;`, which naga
            // rejects: `wgsl` is the browser form there.
            source: wgpu::ShaderSource::Wgsl(source.wgsl.clone()),
        };
        let module = if self.checks(source.unchecked) {
            device.create_shader_module(descriptor)
        } else {
            // SAFETY: `create_shader_module_trusted` asks that the shader never index out of
            // bounds, loop forever or divide an integer by zero (or `i32` minimum by −1). The
            // kernel's author states exactly that with `// @unchecked` in its file, given its
            // `@requires`, which its generated function checks (buffer lengths included)
            // before every dispatch. Buffers stay behind the driver's robust buffer access where
            // wgpu enables it (Vulkan), workgroup memory is still zeroed, and
            // `KERNELS_RUNTIME_CHECKS=all` takes this path out to test the statement.
            unsafe { device.create_shader_module_trusted(descriptor, wgpu::ShaderRuntimeChecks::unchecked()) }
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(kernel.name),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &declared_overrides(&source.declared, overrides),
                zero_initialize_workgroup_memory: true,
            },
            cache: self.inner.disk.as_ref().map(|d| &d.cache),
        });
        self.inner.pipelines.built.fetch_add(1, Ordering::Relaxed);
        (Compiled { kernel, overrides_empty: overrides.is_empty(), pipeline, layout }, module)
    }

    /// Builds the pipeline of `kernel` (without override values) unless it is built already,
    /// and waits for the device's verdict without blocking. On the web, where a pipeline cannot
    /// be checked synchronously, this is how to learn that a kernel compiles before calling it
    /// (its errors include the browser's shader compiler messages); natively it is the same as
    /// the build on the first call. A kernel the device cannot run is
    /// [`Error::MissingFeature`].
    pub async fn build_async(&self, kernel: &'static KernelDef) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.pipeline(kernel, &[]).map(|_| ())
        }
        #[cfg(target_arch = "wasm32")]
        {
            let slot = self.slot(kernel, &[])?;
            if slot.get().is_none() {
                let built = self.build_checked(kernel).await;
                // Another task may have built it meanwhile: the first result stays.
                let _ = slot.set(built);
            }
            match slot.get() {
                Some(built) => built.clone().map(|_| ()),
                None => Err(Error::Gpu("pipeline cache slot empty after a build".into())),
            }
        }
    }

    /// `build` with the error scopes awaited instead of blocked on.
    #[cfg(target_arch = "wasm32")]
    async fn build_checked(&self, kernel: &'static KernelDef) -> Result<Arc<Compiled>> {
        let source = self.buildable(kernel, &[])?;
        let device = &self.inner.device;
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let (compiled, module) = self.create(kernel, &[], &source);
        // Popped in reverse order, at once; the futures resolve when the browser has decided.
        let internal = internal.pop();
        let validation = validation.pop();
        let (internal, validation) = (internal.await, validation.await);
        if let Some(e) = validation.or(internal) {
            let mut message = e.to_string();
            for m in module.get_compilation_info().await.messages {
                if m.message_type == wgpu::CompilationMessageType::Error {
                    let at = m.location.map(|l| format!(" (line {}:{})", l.line_number, l.line_position));
                    message.push_str(&format!("; shader: {}{}", m.message, at.unwrap_or_default()));
                }
            }
            return Err(Error::Pipeline { kernel: kernel.qualified_name(), message });
        }
        Ok(Arc::new(compiled))
    }

    /// [`Gpu::warm_up`] without blocking: builds the pipelines of `kernels` one after another
    /// with [`Gpu::build_async`]. Kernels the device cannot run are listed, not errors.
    pub async fn warm_up_async<'k>(&self, kernels: impl IntoIterator<Item = &'k &'static KernelDef>) -> Result<WarmUp> {
        let start = Stopwatch::start();
        let mut out = WarmUp::default();
        for &kernel in kernels {
            if !kernel.overrides.iter().all(|o| o.has_default) {
                continue;
            }
            match self.build_async(kernel).await {
                Ok(()) => out.built += 1,
                Err(e @ Error::MissingFeature { .. }) => out.unsupported.push(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        out.seconds = start.seconds();
        Ok(out)
    }

    /// Builds the pipelines of `kernels` ahead of their first call (in parallel where threads
    /// exist). Kernels the device cannot run are listed, not errors.
    pub fn warm_up<'k>(&self, kernels: impl IntoIterator<Item = &'k &'static KernelDef>) -> Result<WarmUp> {
        let start = Stopwatch::start();
        let kernels: Vec<&'static KernelDef> =
            kernels.into_iter().copied().filter(|k| k.overrides.iter().all(|o| o.has_default)).collect();
        #[cfg(not(target_arch = "wasm32"))]
        let results: Vec<Result<Arc<Compiled>>> = {
            let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(kernels.len().max(1));
            let chunks: Vec<Vec<&'static KernelDef>> =
                (0..threads).map(|t| kernels.iter().copied().skip(t).step_by(threads).collect()).collect();
            std::thread::scope(|s| {
                let handles: Vec<_> = chunks
                    .iter()
                    .map(|chunk| s.spawn(move || chunk.iter().map(|k| self.pipeline(k, &[])).collect::<Vec<_>>()))
                    .collect();
                handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
            })
        };
        #[cfg(target_arch = "wasm32")]
        let results: Vec<Result<Arc<Compiled>>> = kernels.iter().map(|k| self.pipeline(k, &[])).collect();
        let mut out = WarmUp::default();
        for r in results {
            match r {
                Ok(_) => out.built += 1,
                Err(e @ Error::MissingFeature { .. }) => out.unsupported.push(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        out.seconds = start.seconds();
        // A program may never drop its context (it exits): keep what warm-up compiled now.
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.save_pipeline_cache() {
            eprintln!("kernels: cannot write the pipeline cache: {e}");
        }
        Ok(out)
    }

    /// What became of the pipeline cache file when the context was opened: read and used,
    /// ignored (and why), new, or off.
    pub fn pipeline_cache_file(&self) -> &PipelineCacheFile {
        &self.inner.disk_status
    }

    /// Writes the driver's pipeline cache to its file now, if pipelines were built since it was
    /// read or last written and the driver's data changed; the file's path when written. The
    /// context also does this when [`Gpu::warm_up`] finishes and when it is dropped.
    pub fn save_pipeline_cache(&self) -> Result<Option<std::path::PathBuf>> {
        match self.inner.disk.as_ref() {
            None => Ok(None),
            Some(d) => d
                .save(self.inner.pipelines.built())
                .map_err(|e| Error::Gpu(format!("cannot write the pipeline cache: {e}"))),
        }
    }
}

/// What a pipeline of a kernel is built from.
pub(crate) struct Buildable {
    /// The source of the variant the device runs.
    pub(crate) wgsl: Cow<'static, str>,
    /// Whether it is marked `// @unchecked`.
    pub(crate) unchecked: bool,
    /// The keys of the `override` declarations it has (`VariantDef::overrides`).
    pub(crate) declared: Vec<String>,
}

/// The values of `overrides` (by wgpu's key: an `@id` or the name) whose overrides the variant
/// declares (`declared`, by the same keys). A kernel's generated `Overrides` are its preferred
/// variant's, and another variant may not use them all (a shape compiled in for a tensor-core
/// loop that the portable loop reads from a uniform): its source, compacted to what it uses,
/// then lacks their declarations, and wgpu refuses a value for an override the module does not
/// have. So each variant gets the values it declares and the rest keep no meaning there.
fn declared_overrides(declared: &[String], overrides: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
    overrides.iter().filter(|(key, _)| declared.iter().any(|d| d == key)).copied().collect()
}

/// The cache key of `kernel` with `overrides`.
pub(crate) fn key(kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Key {
    (kernel as *const KernelDef as usize, overrides.iter().map(|(k, v)| (*k, v.to_bits())).collect())
}

/// The bind group layout entry of a texture or sampler.
fn resource_type(kind: ResourceKind) -> wgpu::BindingType {
    match kind {
        ResourceKind::Texture { dim, sample, multisampled } => wgpu::BindingType::Texture {
            sample_type: match sample {
                SampleKind::Float { filterable } => wgpu::TextureSampleType::Float { filterable },
                SampleKind::Sint => wgpu::TextureSampleType::Sint,
                SampleKind::Uint => wgpu::TextureSampleType::Uint,
                SampleKind::Depth => wgpu::TextureSampleType::Depth,
            },
            view_dimension: dim.view_dimension(),
            multisampled,
        },
        ResourceKind::StorageTexture { dim, format, access } => wgpu::BindingType::StorageTexture {
            access: match access {
                TextureAccess::Read => wgpu::StorageTextureAccess::ReadOnly,
                TextureAccess::Write => wgpu::StorageTextureAccess::WriteOnly,
                TextureAccess::ReadWrite => wgpu::StorageTextureAccess::ReadWrite,
            },
            format,
            view_dimension: dim.view_dimension(),
        },
        ResourceKind::Sampler { comparison: true, .. } => {
            wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Comparison)
        }
        ResourceKind::Sampler { filtering: true, .. } => {
            wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering)
        }
        ResourceKind::Sampler { filtering: false, .. } => {
            wgpu::BindingType::Sampler(wgpu::SamplerBindingType::NonFiltering)
        }
    }
}

/// Wall time: `std::time::Instant` natively, `Date.now()` on the web (where `Instant` panics).
struct Stopwatch {
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
    #[cfg(target_arch = "wasm32")]
    start_ms: f64,
}

impl Stopwatch {
    fn start() -> Self {
        Stopwatch {
            #[cfg(not(target_arch = "wasm32"))]
            start: std::time::Instant::now(),
            #[cfg(target_arch = "wasm32")]
            start_ms: crate::web::now_ms(),
        }
    }

    fn seconds(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.start.elapsed().as_secs_f64()
        }
        #[cfg(target_arch = "wasm32")]
        {
            (crate::web::now_ms() - self.start_ms) / 1000.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::declared_overrides;

    #[test]
    fn a_variant_gets_the_override_values_it_declares() {
        // G_BM has `@id(3)`: both lists name it by that key, as the generated code does.
        let declared = ["A_T".to_string(), "3".to_string()];
        let given = [("A_T", 1.0), ("K_C", 4096.0), ("3", 256.0), ("G_B", 1.0)];
        assert_eq!(declared_overrides(&declared, &given), vec![("A_T", 1.0), ("3", 256.0)]);
        assert!(declared_overrides(&declared, &[]).is_empty());
        assert!(declared_overrides(&[], &given).is_empty());
    }
}
