//! The GPU context: adapter choice, device with the adapter's real limits and the optional
//! features kernels use, and a report of what was found.

use crate::error::{Error, Result};
use crate::pipeline::PipelineCache;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Features the runtime asks for when the adapter has them.
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SUBGROUP
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// How to open a [`Gpu`].
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// Adapter to pick: a backend (`vulkan`, `metal`, `dx12`, `gl`), a part of the adapter's name
    /// (case-insensitive), or both as `backend:name`. `None` picks the most capable adapter.
    /// [`GpuOptions::from_env`] reads it from `KERNELS_ADAPTER`.
    pub adapter: Option<String>,
    /// Use subgroup operations where the adapter has them. With `false`, kernels run their
    /// tree-reduction variants (and kernels that have none report `SUBGROUP` as missing).
    /// [`GpuOptions::from_env`] sets it to `false` when `KERNELS_SUBGROUPS=0`.
    pub subgroups: bool,
    /// Optional features not to enable even where the adapter has them, to run as a smaller
    /// adapter would (`SHADER_F16` to test f16 errors, `SUBGROUP` to test the fallbacks).
    /// [`GpuOptions::from_env`] adds `SHADER_F16` when `KERNELS_F16=0`.
    pub without: wgpu::Features,
    /// A lower `max_compute_workgroups_per_dimension` than the adapter's, to run as a smaller
    /// device would: with a small value, every 1-D grid past it takes the 2-D fallback, which
    /// tests use to exercise that path without gigabytes of data.
    pub max_workgroups_per_dimension: Option<u32>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            adapter: None,
            subgroups: true,
            without: wgpu::Features::empty(),
            max_workgroups_per_dimension: None,
        }
    }
}

impl GpuOptions {
    /// Options from the environment: `KERNELS_ADAPTER`, `KERNELS_SUBGROUPS=0`, `KERNELS_F16=0`.
    pub fn from_env() -> Self {
        let off = |name: &str| std::env::var(name).is_ok_and(|v| v.trim() == "0");
        GpuOptions {
            adapter: std::env::var("KERNELS_ADAPTER").ok().filter(|s| !s.trim().is_empty()),
            subgroups: !off("KERNELS_SUBGROUPS"),
            without: if off("KERNELS_F16") { wgpu::Features::SHADER_F16 } else { wgpu::Features::empty() },
            max_workgroups_per_dimension: None,
        }
    }
}

/// What the runtime found: the adapter and the capabilities kernels depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterReport {
    /// Adapter name.
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, …).
    pub backend: String,
    /// Device type.
    pub device_type: String,
    /// Driver and version.
    pub driver: String,
    /// Smallest subgroup size the adapter reports.
    pub subgroup_min_size: u32,
    /// Largest subgroup size the adapter reports.
    pub subgroup_max_size: u32,
    /// `SUBGROUP` is enabled and used.
    pub subgroups: bool,
    /// `SHADER_F16` is enabled.
    pub f16: bool,
    /// Timestamp queries are enabled.
    pub timestamps: bool,
    /// `max_compute_workgroups_per_dimension`
    pub max_workgroups_per_dimension: u32,
    /// `max_storage_buffer_binding_size`
    pub max_storage_binding: u64,
    /// `max_buffer_size`
    pub max_buffer_size: u64,
    /// `max_compute_workgroup_storage_size`
    pub max_workgroup_memory: u32,
}

impl std::fmt::Display for AdapterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {}); subgroups: {}{}; f16: {}; {} workgroups per dimension; {} MiB per storage binding; {} KiB workgroup memory",
            self.name,
            self.backend,
            self.device_type,
            if self.driver.is_empty() { "?" } else { &self.driver },
            if self.subgroups { "on" } else { "off" },
            if self.subgroup_max_size > 0 {
                if self.subgroup_min_size == self.subgroup_max_size {
                    format!(" (size {})", self.subgroup_min_size)
                } else {
                    format!(" (sizes {}–{})", self.subgroup_min_size, self.subgroup_max_size)
                }
            } else {
                String::new()
            },
            if self.f16 { "yes" } else { "no" },
            self.max_workgroups_per_dimension,
            self.max_storage_binding >> 20,
            self.max_workgroup_memory >> 10,
        )
    }
}

/// Serialises creating and destroying instances and devices. NVIDIA's Vulkan driver (580, H200)
/// deadlocks when one thread destroys a device while another creates or destroys one (seen in
/// `vkDestroyDevice` against the driver's own lock), which a test harness running one context
/// per thread does all the time.
static LIFECYCLE: Mutex<()> = Mutex::new(());

fn lifecycle() -> std::sync::MutexGuard<'static, ()> {
    LIFECYCLE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    // The wgpu objects are dropped by hand, under `LIFECYCLE` (see `Drop`).
    pub(crate) instance: ManuallyDrop<Option<wgpu::Instance>>,
    pub(crate) device: ManuallyDrop<wgpu::Device>,
    pub(crate) queue: ManuallyDrop<wgpu::Queue>,
    pub(crate) adapter: ManuallyDrop<wgpu::Adapter>,
    pub(crate) pipelines: ManuallyDrop<PipelineCache>,
    pub(crate) uniform_pool: ManuallyDrop<Arc<Mutex<Vec<wgpu::Buffer>>>>,
    pub(crate) features: wgpu::Features,
    pub(crate) limits: wgpu::Limits,
    pub(crate) use_subgroups: bool,
    /// On wgpu's WebGPU backend (a browser): shader modules are made from `browser_wgsl`.
    pub(crate) browser: bool,
    pub(crate) report: AdapterReport,
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _guard = lifecycle();
        // Finish outstanding work so that nothing on the GPU refers to what is dropped. (A
        // browser keeps what is in flight alive itself, and the main thread must not block.)
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        // SAFETY: each field is dropped exactly once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.pipelines);
            ManuallyDrop::drop(&mut self.uniform_pool);
            ManuallyDrop::drop(&mut self.queue);
            ManuallyDrop::drop(&mut self.device);
            ManuallyDrop::drop(&mut self.adapter);
            ManuallyDrop::drop(&mut self.instance);
        }
    }
}

/// A GPU: device, queue, and the pipelines built on it. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Gpu {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.inner.report.name).finish_non_exhaustive()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?})", info.name, info.backend)
}

/// Whether `wanted` (`backend`, `name part` or `backend:name part`) selects this adapter.
fn matches(info: &wgpu::AdapterInfo, wanted: &str) -> bool {
    let wanted = wanted.trim().to_lowercase();
    let backend = format!("{:?}", info.backend).to_lowercase();
    let name = info.name.to_lowercase();
    let backend_ok =
        |b: &str| backend == b || (b == "gl" && backend == "gl") || (b == "webgpu" && backend == "browserwebgpu");
    match wanted.split_once(':') {
        Some((b, n)) => backend_ok(b) && name.contains(n.trim()),
        None => backend_ok(&wanted) || name.contains(&wanted),
    }
}

impl Gpu {
    /// Opens the best adapter, honouring `KERNELS_ADAPTER` and `KERNELS_SUBGROUPS`. Not on the
    /// web, where nothing may block: use [`Gpu::with_options`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Gpu> {
        pollster::block_on(Self::with_options(GpuOptions::from_env()))
    }

    /// Opens an adapter with explicit options (blocking; not on the web).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options_blocking(options: GpuOptions) -> Result<Gpu> {
        pollster::block_on(Self::with_options(options))
    }

    /// Opens an adapter with explicit options.
    pub async fn with_options(options: GpuOptions) -> Result<Gpu> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            // Native adapters and devices are created synchronously (wgpu-core's futures are
            // ready at once), so the lifecycle lock is never held across an await.
            let _guard = lifecycle();
            pollster::block_on(Self::open(options))
        }
        #[cfg(target_arch = "wasm32")]
        {
            Self::open(options).await
        }
    }

    async fn open(options: GpuOptions) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        // OpenGL is a last resort (and probing it prints noise on headless Linux): only when
        // asked for, or when no primary backend has an adapter.
        #[cfg(not(target_arch = "wasm32"))]
        let adapters = {
            let wants_gl = options.adapter.as_deref().is_some_and(|w| w.trim().to_lowercase().starts_with("gl"));
            let mut adapters =
                if wants_gl { Vec::new() } else { instance.enumerate_adapters(wgpu::Backends::PRIMARY).await };
            if adapters.is_empty() {
                adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
            }
            adapters
        };
        // A browser offers one adapter, through `navigator.gpu.requestAdapter`.
        #[cfg(target_arch = "wasm32")]
        let adapters: Vec<wgpu::Adapter> = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .into_iter()
            .collect();
        let available: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
        let mut candidates: Vec<wgpu::Adapter> = adapters
            .into_iter()
            .filter(|a| options.adapter.as_deref().is_none_or(|w| matches(&a.get_info(), w)))
            .collect();
        candidates.sort_by_key(|a| {
            let info = a.get_info();
            // Prefer real GPUs, then Vulkan/Metal/DX12 over GL.
            (rank(info.device_type), matches!(info.backend, wgpu::Backend::Gl) as u8)
        });
        let adapter =
            candidates.into_iter().next().ok_or(Error::NoAdapter { wanted: options.adapter.clone(), available })?;
        Self::open_adapter(Some(instance), adapter, &options).await
    }

    /// Opens a device on a given adapter (`options.adapter` is not consulted).
    pub async fn from_adapter(adapter: wgpu::Adapter, options: &GpuOptions) -> Result<Gpu> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _guard = lifecycle();
            pollster::block_on(Self::open_adapter(None, adapter, options))
        }
        #[cfg(target_arch = "wasm32")]
        {
            Self::open_adapter(None, adapter, options).await
        }
    }

    async fn open_adapter(
        instance: Option<wgpu::Instance>,
        adapter: wgpu::Adapter,
        options: &GpuOptions,
    ) -> Result<Gpu> {
        let subgroups = options.subgroups;
        let info = adapter.get_info();
        #[allow(unused_mut)]
        let mut features = adapter.features() & (OPTIONAL_FEATURES - options.without);
        let mut limits = adapter.limits();
        if let Some(max) = options.max_workgroups_per_dimension {
            limits.max_compute_workgroups_per_dimension = limits.max_compute_workgroups_per_dimension.min(max.max(1));
        }
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("kernels"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        #[cfg(not(target_arch = "wasm32"))]
        let request = adapter.request_device(&descriptor);
        // wgpu's WebGPU backend neither asks for nor reports `subgroups`: ask for it here.
        #[cfg(target_arch = "wasm32")]
        let request = {
            let wanted: &[&str] = if options.without.contains(wgpu::Features::SUBGROUP) { &[] } else { &["subgroups"] };
            crate::web::requesting_features(wanted, || adapter.request_device(&descriptor))
        };
        let (device, queue) = request.await.map_err(|e| Error::Device(e.to_string()))?;
        #[cfg(target_arch = "wasm32")]
        if crate::web::device_has(&device, "subgroups") {
            features |= wgpu::Features::SUBGROUP;
        }
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost = errors.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut v) = lost.lock() {
                v.push(format!("device lost ({reason:?}): {message}"));
            }
        });
        let use_subgroups = subgroups && features.contains(wgpu::Features::SUBGROUP);
        let report = AdapterReport {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            subgroup_min_size: if features.contains(wgpu::Features::SUBGROUP) { info.subgroup_min_size } else { 0 },
            subgroup_max_size: if features.contains(wgpu::Features::SUBGROUP) { info.subgroup_max_size } else { 0 },
            subgroups: use_subgroups,
            f16: features.contains(wgpu::Features::SHADER_F16),
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            max_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            max_workgroup_memory: limits.max_compute_workgroup_storage_size,
        };
        Ok(Gpu {
            inner: Arc::new(Inner {
                id: next_id(),
                instance: ManuallyDrop::new(instance),
                device: ManuallyDrop::new(device),
                queue: ManuallyDrop::new(queue),
                adapter: ManuallyDrop::new(adapter),
                pipelines: ManuallyDrop::new(PipelineCache::default()),
                uniform_pool: ManuallyDrop::new(Arc::default()),
                features,
                limits,
                use_subgroups,
                browser: info.backend == wgpu::Backend::BrowserWebGpu,
                report,
                errors,
            }),
        })
    }

    /// The adapter and its capabilities.
    pub fn report(&self) -> &AdapterReport {
        &self.inner.report
    }

    /// The wgpu device (for code that mixes hand-written wgpu with kernels).
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// The wgpu adapter.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }

    /// The device's limits (the adapter's own, not wgpu's defaults).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }

    /// The optional features enabled on the device.
    pub fn features(&self) -> wgpu::Features {
        self.inner.features
    }

    /// Whether kernels run their subgroup variants.
    pub fn uses_subgroups(&self) -> bool {
        self.inner.use_subgroups
    }

    /// Blocks until all submitted work has finished; reports errors wgpu raised meanwhile.
    /// Not on the web: use [`Gpu::wait_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&self) -> Result<()> {
        self.inner.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()))?;
        self.take_errors()
    }

    /// Waits, without blocking a thread, until all submitted work has finished; reports errors
    /// wgpu raised meanwhile. The form of [`Gpu::wait`] for the web.
    pub async fn wait_async(&self) -> Result<()> {
        let (tx, rx) = futures_channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        // Native backends run the callback while polled; a browser runs it by itself.
        #[cfg(not(target_arch = "wasm32"))]
        self.inner.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()))?;
        rx.await.map_err(|_| Error::Gpu("the queue never reported its work done".into()))?;
        self.take_errors()
    }

    /// Returns (and clears) errors wgpu reported outside any call.
    pub(crate) fn take_errors(&self) -> Result<()> {
        let mut errors = self.inner.errors.lock().map_err(|_| Error::Gpu("error log poisoned".into()))?;
        if errors.is_empty() {
            Ok(())
        } else {
            let all = std::mem::take(&mut *errors);
            Err(Error::Gpu(all.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, backend: wgpu::Backend) -> wgpu::AdapterInfo {
        let mut i = wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, backend);
        i.name = name.into();
        i
    }

    #[test]
    fn adapter_selection_by_backend_name_or_both() {
        let lavapipe = info("llvmpipe (LLVM 15.0.6, 256 bits)", wgpu::Backend::Vulkan);
        assert!(matches(&lavapipe, "vulkan"));
        assert!(matches(&lavapipe, "LLVMpipe"));
        assert!(matches(&lavapipe, "vulkan:llvm"));
        assert!(!matches(&lavapipe, "gl:llvm"));
        assert!(!matches(&lavapipe, "nvidia"));
    }
}
