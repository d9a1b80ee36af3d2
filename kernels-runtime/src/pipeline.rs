//! Pipelines: built once per context and kernel (and override values), on first use or by
//! [`Gpu::warm_up`], from the variant the device can run.

use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::kernel::{BindingKind, KernelDef, VariantDef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) struct Compiled {
    pub(crate) kernel: &'static KernelDef,
    pub(crate) overrides_empty: bool,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    #[allow(dead_code)]
    pub(crate) variant: &'static VariantDef,
}

type Key = (usize, Vec<(&'static str, u64)>);
type Slot = Arc<OnceLock<Result<Arc<Compiled>>>>;

#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<HashMap<Key, Slot>>,
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
    /// The variant of `kernel` this device runs.
    pub fn variant_for(&self, kernel: &KernelDef) -> Result<&'static VariantDef> {
        let f = self.inner.features;
        let sg = self.inner.use_subgroups;
        let f16 = f.contains(wgpu::Features::SHADER_F16);
        if let Some(v) = kernel.variants.iter().find(|v| (!v.subgroups || sg) && (!v.f16 || f16) && v.coop.is_empty()) {
            return Ok(v);
        }
        let feature = if kernel.variants.iter().all(|v| v.f16) && !f16 { "SHADER_F16" } else { "SUBGROUP" };
        Err(Error::MissingFeature { kernel: kernel.qualified_name(), feature, adapter: self.inner.report.name.clone() })
    }

    pub(crate) fn pipeline(
        &self,
        kernel: &'static KernelDef,
        overrides: &[(&'static str, f64)],
    ) -> Result<Arc<Compiled>> {
        self.slot(kernel, overrides)?.get_or_init(|| self.build(kernel, overrides)).clone()
    }

    fn slot(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Slot> {
        let key: Key =
            (kernel as *const KernelDef as usize, overrides.iter().map(|(k, v)| (*k, v.to_bits())).collect());
        let mut map = self.inner.pipelines.map.lock().map_err(|_| Error::Gpu("pipeline cache poisoned".into()))?;
        Ok(map.entry(key).or_default().clone())
    }

    /// The variant to build, once the overrides are known to be complete.
    fn buildable(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<&'static VariantDef> {
        let variant = self.variant_for(kernel)?;
        for o in kernel.overrides {
            if !o.has_default && !overrides.iter().any(|(k, _)| *k == o.key) {
                return Err(Error::BadArguments {
                    kernel: kernel.qualified_name(),
                    detail: format!("override `{}` has no default: set it in the overrides argument", o.name),
                });
            }
        }
        Ok(variant)
    }

    fn build(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Arc<Compiled>> {
        let variant = self.buildable(kernel, overrides)?;
        #[cfg(not(target_arch = "wasm32"))]
        let scopes = (
            self.inner.device.push_error_scope(wgpu::ErrorFilter::Validation),
            self.inner.device.push_error_scope(wgpu::ErrorFilter::Internal),
        );
        let (compiled, _module) = self.create(kernel, overrides, variant);
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

    /// Creates the layout, shader module and pipeline of one variant.
    fn create(
        &self,
        kernel: &'static KernelDef,
        overrides: &[(&'static str, f64)],
        variant: &'static VariantDef,
    ) -> (Compiled, wgpu::ShaderModule) {
        let device = &self.inner.device;
        let entries: Vec<wgpu::BindGroupLayoutEntry> = kernel
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
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(kernel.name), entries: &entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            // A browser compiles the WGSL itself and needs `enable subgroups;`, which naga rejects.
            source: wgpu::ShaderSource::Wgsl(
                if self.inner.browser { variant.browser_wgsl } else { variant.wgsl }.into(),
            ),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(kernel.name),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: overrides,
                zero_initialize_workgroup_memory: true,
            },
            cache: None,
        });
        (Compiled { kernel, overrides_empty: overrides.is_empty(), pipeline, layout, variant }, module)
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
        let variant = self.buildable(kernel, &[])?;
        let device = &self.inner.device;
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let (compiled, module) = self.create(kernel, &[], variant);
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
        Ok(out)
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
