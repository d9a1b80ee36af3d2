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
        if let Some(v) = kernel.variants.iter().find(|v| (!v.subgroups || sg) && (!v.f16 || f16)) {
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
        let key: Key =
            (kernel as *const KernelDef as usize, overrides.iter().map(|(k, v)| (*k, v.to_bits())).collect());
        let slot = {
            let mut map = self.inner.pipelines.map.lock().map_err(|_| Error::Gpu("pipeline cache poisoned".into()))?;
            map.entry(key).or_default().clone()
        };
        slot.get_or_init(|| self.build(kernel, overrides)).clone()
    }

    fn build(&self, kernel: &'static KernelDef, overrides: &[(&'static str, f64)]) -> Result<Arc<Compiled>> {
        let name = kernel.qualified_name();
        let variant = self.variant_for(kernel)?;
        for o in kernel.overrides {
            if !o.has_default && !overrides.iter().any(|(k, _)| *k == o.key) {
                return Err(Error::BadArguments {
                    kernel: name,
                    detail: format!("override `{}` has no default: set it in the overrides argument", o.name),
                });
            }
        }
        let device = &self.inner.device;
        #[cfg(not(target_arch = "wasm32"))]
        let scopes = (
            device.push_error_scope(wgpu::ErrorFilter::Validation),
            device.push_error_scope(wgpu::ErrorFilter::Internal),
        );
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
            source: wgpu::ShaderSource::Wgsl(variant.wgsl.into()),
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
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (validation, internal) = scopes;
            let internal = pollster::block_on(internal.pop());
            let validation = pollster::block_on(validation.pop());
            if let Some(e) = validation.or(internal) {
                return Err(Error::Pipeline { kernel: name, message: e.to_string() });
            }
        }
        Ok(Arc::new(Compiled { kernel, overrides_empty: overrides.is_empty(), pipeline, layout, variant }))
    }

    /// Builds the pipelines of `kernels` ahead of their first call (in parallel where threads
    /// exist). Kernels the device cannot run are listed, not errors.
    pub fn warm_up<'k>(&self, kernels: impl IntoIterator<Item = &'k &'static KernelDef>) -> Result<WarmUp> {
        let start = std::time::Instant::now();
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
        out.seconds = start.elapsed().as_secs_f64();
        Ok(out)
    }
}
