//! The GPU context: adapter choice, device with the adapter's real limits and the optional
//! features kernels use, and a report of what was found.

use crate::disk::{DiskCache, PipelineCacheFile};
use crate::error::{Error, Result};
use crate::kernel::{CoopConfig, CoopScalar};
use crate::options::{GpuOptions, RuntimeChecks, describe, pick};
use crate::pipeline::PipelineCache;
use crate::variant::Capabilities;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Features the runtime asks for when the adapter has them.
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SUBGROUP
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SHADER_INT64)
    .union(wgpu::Features::SHADER_F64)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
    .union(wgpu::Features::IMMEDIATES)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// What the runtime found: the adapter and the capabilities kernels depend on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Tensor cores are on: `EXPERIMENTAL_COOPERATIVE_MATRIX` is enabled and kernels run their
    /// cooperative-matrix variants where the configurations they use are offered.
    pub cooperative_matrix: bool,
    /// The cooperative-matrix configurations the adapter offers that WGSL can express (with
    /// tensor cores on, exactly those kernels may use).
    pub cooperative_matrix_configs: Vec<CoopConfig>,
    /// Configurations the adapter offers that WGSL cannot express (e.g. `16×8×16 (A/B f16, C f32)`).
    pub cooperative_matrix_other: Vec<String>,
    /// Why tensor cores are off although the adapter offers configurations (turned off by the
    /// options, `SHADER_F16` off, or the device refused them).
    pub cooperative_matrix_off: Option<String>,
    /// Which kernels run with wgpu's runtime checks: as the options say natively
    /// ([`GpuOptions::runtime_checks`]), [`RuntimeChecks::All`] in a browser (WebGPU checks
    /// every module). Shown only when it is `All`.
    pub runtime_checks: RuntimeChecks,
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
        )?;
        let list = |configs: &[CoopConfig]| configs.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ");
        match (self.cooperative_matrix, &self.cooperative_matrix_off) {
            (true, _) => write!(f, "; tensor cores: on ({})", list(&self.cooperative_matrix_configs))?,
            (false, Some(why)) if !self.cooperative_matrix_configs.is_empty() => {
                write!(f, "; tensor cores: off ({why}; offered: {})", list(&self.cooperative_matrix_configs))?
            }
            (false, _) => write!(f, "; tensor cores: none")?,
        }
        if !self.cooperative_matrix_other.is_empty() {
            write!(f, " (also offered, not expressible in WGSL: {})", self.cooperative_matrix_other.join(", "))?;
        }
        if self.runtime_checks == RuntimeChecks::All {
            write!(f, "; runtime checks: every kernel, `@unchecked` ones too")?;
        }
        Ok(())
    }
}

/// Serialises creating and destroying instances and devices. NVIDIA's Vulkan driver (580, H200)
/// deadlocks when one thread destroys a device while another creates or destroys one (seen in
/// `vkDestroyDevice` against the driver's own lock), which a test harness running one context
/// per thread does all the time.
///
/// Two rules keep the lock itself harmless: it is never held while waiting for the GPU (a
/// context polls its work to completion *before* taking it, so another thread's `Gpu::new` is
/// not held up by a slow GPU), and a thread that holds it never waits for it again (dropping a
/// context can run wgpu callbacks that drop the last handle of another context; that nested
/// drop is already serialised by the outer one and takes nothing).
static LIFECYCLE: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds `LIFECYCLE`.
    static HOLDS_LIFECYCLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `LIFECYCLE`, or nothing if this thread holds it already.
pub(crate) struct LifecycleGuard(Option<std::sync::MutexGuard<'static, ()>>);

impl Drop for LifecycleGuard {
    fn drop(&mut self) {
        if self.0.take().is_some() {
            HOLDS_LIFECYCLE.with(|h| h.set(false));
        }
    }
}

pub(crate) fn lifecycle() -> LifecycleGuard {
    if HOLDS_LIFECYCLE.with(|h| h.get()) {
        return LifecycleGuard(None);
    }
    let guard = LIFECYCLE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HOLDS_LIFECYCLE.with(|h| h.set(true));
    LifecycleGuard(Some(guard))
}

/// Uniform buffers of finished submissions, ready for reuse (see `batch.rs`).
pub(crate) type UniformPool = Mutex<Vec<wgpu::Buffer>>;

pub(crate) struct Inner {
    pub(crate) id: u64,
    // The wgpu objects are dropped by hand, under `LIFECYCLE` (see `Drop`).
    pub(crate) instance: ManuallyDrop<Option<wgpu::Instance>>,
    pub(crate) device: ManuallyDrop<wgpu::Device>,
    pub(crate) queue: ManuallyDrop<wgpu::Queue>,
    pub(crate) adapter: ManuallyDrop<wgpu::Adapter>,
    pub(crate) pipelines: ManuallyDrop<PipelineCache>,
    /// The driver's pipeline cache and its file (holds the device: dropped with it).
    pub(crate) disk: ManuallyDrop<Option<DiskCache>>,
    pub(crate) disk_status: PipelineCacheFile,
    /// Watching kernel files, when hot reload is on.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub(crate) hot: Option<Arc<crate::reload::HotReload>>,
    /// The only strong reference: submissions' callbacks hold a `Weak` (a strong one in a
    /// callback that never runs would keep the device alive).
    pub(crate) uniform_pool: Arc<UniformPool>,
    pub(crate) features: wgpu::Features,
    pub(crate) limits: wgpu::Limits,
    /// What variants may use.
    pub(crate) caps: Capabilities,
    /// Features the adapter has that the options turned off.
    pub(crate) disabled: Vec<&'static str>,
    /// On wgpu's WebGPU backend (a browser): shader modules are made from `browser_wgsl`.
    pub(crate) browser: bool,
    /// Which kernels' modules get wgpu's runtime checks (`All` in a browser).
    pub(crate) runtime_checks: RuntimeChecks,
    pub(crate) report: AdapterReport,
    /// Errors wgpu raised outside the runtime's error scopes (through the raw wgpu handles, or
    /// on the web, where scopes cannot be awaited synchronously): reported by `wait`.
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    /// Set once when the device is lost; every call after reports it.
    pub(crate) lost: Arc<OnceLock<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Finish outstanding work so that nothing on the GPU refers to what is dropped, before
        // taking the lock: the wait may be long, and the callbacks it runs may drop other
        // contexts. (A browser keeps what is in flight alive itself, and must not block.)
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        // What this run compiled, for the next (a failed write only costs the next run time).
        if let Some(disk) = self.disk.as_ref()
            && let Err(e) = disk.save(self.pipelines.built())
        {
            eprintln!("kernels: cannot write the pipeline cache: {e}");
        }
        let _guard = lifecycle();
        let pooled = std::mem::take(&mut *self.uniform_pool.lock().unwrap_or_else(|p| p.into_inner()));
        drop(pooled);
        // SAFETY: each field is dropped exactly once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.pipelines);
            ManuallyDrop::drop(&mut self.disk);
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

/// Every kind of wgpu error, validation first (the most telling when several arise).
pub(crate) const ALL_ERRORS: &[wgpu::ErrorFilter] =
    &[wgpu::ErrorFilter::Validation, wgpu::ErrorFilter::OutOfMemory, wgpu::ErrorFilter::Internal];

/// The output of a future that is ready at once (wgpu-core's error scopes), without the
/// allocations of a general executor; one that is not is blocked on.
#[cfg(not(target_arch = "wasm32"))]
fn ready_now<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => pollster::block_on(future),
    }
}

/// wgpu's multi-line error text ("Validation Error\n\nCaused by:\n  In …\n    …") on one line.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && *l != "Caused by:").collect::<Vec<_>>().join(": ")
}

/// Tensor cores on one adapter: what it offers and what the runtime will enable.
struct CoopPlan {
    /// Offered configurations WGSL can express.
    expressible: Vec<CoopConfig>,
    /// Offered configurations it cannot, as text.
    other: Vec<String>,
    /// What to enable (empty: ask for no tensor cores).
    enabled: Vec<CoopConfig>,
    /// Why nothing is enabled although configurations are offered.
    off: Option<String>,
}

impl CoopPlan {
    fn new(adapter: &wgpu::Adapter, browser: bool, features: wgpu::Features, options: &GpuOptions) -> CoopPlan {
        let mut plan = CoopPlan { expressible: Vec::new(), other: Vec::new(), enabled: Vec::new(), off: None };
        // WebGPU has no cooperative matrices.
        if browser {
            return plan;
        }
        for p in adapter.cooperative_matrix_properties() {
            let scalar = |t: wgpu::CooperativeScalarType| match t {
                wgpu::CooperativeScalarType::F16 => Some(CoopScalar::F16),
                wgpu::CooperativeScalarType::F32 => Some(CoopScalar::F32),
                _ => None,
            };
            let config = match (scalar(p.ab_type), scalar(p.cr_type)) {
                (Some(ab), Some(cr)) => Some(CoopConfig { m: p.m_size, n: p.n_size, k: p.k_size, ab, cr }),
                _ => None,
            };
            match config {
                Some(c) if c.expressible_in_wgsl() => {
                    if !plan.expressible.contains(&c) {
                        plan.expressible.push(c)
                    }
                }
                _ => {
                    let name = |t: wgpu::CooperativeScalarType| match t {
                        wgpu::CooperativeScalarType::F16 => "f16",
                        wgpu::CooperativeScalarType::F32 => "f32",
                        wgpu::CooperativeScalarType::I32 => "i32",
                        wgpu::CooperativeScalarType::U32 => "u32",
                    };
                    let (ab, cr) = (name(p.ab_type), name(p.cr_type));
                    plan.other.push(format!("{}×{}×{} (A/B {ab}, C {cr})", p.m_size, p.n_size, p.k_size))
                }
            }
        }
        if plan.expressible.is_empty() {
            return plan;
        }
        let needs_f16 = |c: &CoopConfig| c.ab == CoopScalar::F16 || c.cr == CoopScalar::F16;
        let usable: Vec<CoopConfig> = plan
            .expressible
            .iter()
            .filter(|c| features.contains(wgpu::Features::SHADER_F16) || !needs_f16(c))
            .copied()
            .collect();
        plan.off = if !options.cooperative_matrix {
            Some("turned off by KERNELS_COOPERATIVE_MATRIX=0 or GpuOptions::cooperative_matrix".into())
        } else if !adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            Some("the adapter does not expose EXPERIMENTAL_COOPERATIVE_MATRIX".into())
        } else if usable.is_empty() {
            Some("they need SHADER_F16, which is off".into())
        } else {
            plan.enabled = usable;
            None
        };
        plan
    }
}

impl Gpu {
    /// Opens the best adapter, honouring the `KERNELS_*` variables ([`GpuOptions::from_env`]).
    /// Not on the web, where nothing may block: use [`Gpu::with_options`] there.
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
        if let Some(e) = options.refused() {
            return Err(e);
        }
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        // OpenGL is a last resort (and probing it prints noise on headless Linux): only when
        // asked for, or when no primary backend has an adapter.
        #[cfg(not(target_arch = "wasm32"))]
        let adapters = {
            let wants_gl = options.adapter.as_ref().is_some_and(|f| f.backend() == Some(wgpu::Backend::Gl));
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
        let (infos, mut candidates): (Vec<wgpu::AdapterInfo>, Vec<Option<wgpu::Adapter>>) = adapters
            .into_iter()
            .map(|a| (a.get_info(), Some(a)))
            .filter(|(info, _)| options.adapter.as_ref().is_none_or(|f| f.matches(info)))
            .unzip();
        let Some(adapter) = pick(&infos, options.adapter_index.as_ref())?.and_then(|k| candidates[k].take()) else {
            return Err(Error::NoAdapter { wanted: options.adapter.as_ref().map(ToString::to_string), available });
        };
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
        if let Some(e) = options.refused() {
            return Err(e);
        }
        let info = adapter.get_info();
        let browser = info.backend == wgpu::Backend::BrowserWebGpu;
        let runtime_checks = if browser { RuntimeChecks::All } else { options.runtime_checks };
        let mut features = adapter.features() & (OPTIONAL_FEATURES - options.without);
        // The driver's pipeline cache, where wgpu has one for the backend (Vulkan).
        let disk_dir = match (&options.pipeline_cache_dir, wgpu::util::pipeline_cache_key(&info)) {
            (None, _) => {
                Err("turned off (KERNELS_PIPELINE_CACHE=0, GpuOptions::pipeline_cache_dir, or no cache directory)")
            }
            (Some(_), None) => Err("the backend has no pipeline cache"),
            (Some(_), Some(_)) if !adapter.features().contains(wgpu::Features::PIPELINE_CACHE) => {
                Err("the adapter has no pipeline cache")
            }
            (Some(dir), Some(_)) => Ok(dir.clone()),
        };
        if disk_dir.is_ok() {
            features |= wgpu::Features::PIPELINE_CACHE;
        }
        let mut limits = adapter.limits();
        if let Some(max) = options.max_workgroups_per_dimension {
            limits.max_compute_workgroups_per_dimension = limits.max_compute_workgroups_per_dimension.min(max.max(1));
        }
        let coop = CoopPlan::new(&adapter, browser, features, options);
        // Asked for with tensor cores first where planned; if the device refuses them, again
        // without (the portable variants still run).
        let mut coop_off = coop.off.clone();
        let mut attempts: Vec<bool> = if coop.enabled.is_empty() { vec![false] } else { vec![true, false] };
        let (device, queue, coop_enabled) = loop {
            let with_coop = attempts.remove(0);
            let required =
                if with_coop { features | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX } else { features };
            let descriptor = wgpu::DeviceDescriptor {
                label: Some("kernels"),
                required_features: required,
                required_limits: limits.clone(),
                experimental_features: if with_coop {
                    // SAFETY: wgpu marks its experimental features `unsafe` because their
                    // implementation may still have bugs that reach undefined behaviour from
                    // safe code. The one asked for here, cooperative matrices, switches naga's
                    // SPIR-V for the modules that use them to the Vulkan memory model, and naga
                    // 30 does not emit the availability/visibility operations that model
                    // formally needs around workgroup memory (gfx-rs/wgpu#8805): a driver may
                    // then legally reorder a coop kernel's workgroup-memory traffic across its
                    // barriers and produce wrong numbers. It is accepted because (a) it is asked
                    // for only where the adapter lists a configuration WGSL can express, and
                    // only kernels that declare cooperative-matrix variants use it (every other
                    // module compiles as before); (b) on the H200 (driver 580) about 60 coop
                    // kernel designs with workgroup staging and barriers gave correct results,
                    // and the library's coop kernels are checked against float64 references;
                    // (c) `KERNELS_COOPERATIVE_MATRIX=0` / `GpuOptions::cooperative_matrix`
                    // turn it off, leaving the portable variants.
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            };
            #[cfg(not(target_arch = "wasm32"))]
            let request = adapter.request_device(&descriptor);
            // wgpu's WebGPU backend neither asks for nor reports `subgroups`: ask for it here.
            #[cfg(target_arch = "wasm32")]
            let request = {
                let wanted: &[&str] =
                    if options.without.contains(wgpu::Features::SUBGROUP) { &[] } else { &["subgroups"] };
                crate::web::requesting_features(wanted, || adapter.request_device(&descriptor))
            };
            match request.await {
                Ok((device, queue)) => break (device, queue, with_coop),
                Err(e) if !attempts.is_empty() => {
                    coop_off = Some(format!("the device refused them: {e}"));
                }
                Err(e) => return Err(Error::Device(e.to_string())),
            }
        };
        if coop_enabled {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
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
        let lost: Arc<OnceLock<String>> = Arc::default();
        let sink = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let reason = match reason {
                wgpu::DeviceLostReason::Destroyed => "destroyed".to_string(),
                other => format!("{other:?}"),
            };
            let _ = sink.set(if message.is_empty() { reason } else { format!("{reason}: {message}") });
        });
        let caps = Capabilities {
            subgroups: options.subgroups && features.contains(wgpu::Features::SUBGROUP),
            f16: features.contains(wgpu::Features::SHADER_F16),
            coop: if coop_enabled { coop.enabled.clone() } else { Vec::new() },
            features,
        };
        // Features the adapter has that the options turned off (for error messages).
        let offered = adapter.features();
        let mut disabled = Vec::new();
        if offered.contains(wgpu::Features::SUBGROUP) && !caps.subgroups {
            disabled.push("SUBGROUP");
        }
        if offered.contains(wgpu::Features::SHADER_F16) && !caps.f16 {
            disabled.push("SHADER_F16");
        }
        let report = AdapterReport {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            subgroup_min_size: if features.contains(wgpu::Features::SUBGROUP) { info.subgroup_min_size } else { 0 },
            subgroup_max_size: if features.contains(wgpu::Features::SUBGROUP) { info.subgroup_max_size } else { 0 },
            subgroups: caps.subgroups,
            f16: caps.f16,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            max_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            max_workgroup_memory: limits.max_compute_workgroup_storage_size,
            cooperative_matrix: coop_enabled,
            cooperative_matrix_configs: coop.expressible,
            cooperative_matrix_other: coop.other,
            cooperative_matrix_off: if coop_enabled { None } else { coop_off },
            runtime_checks,
        };
        let (disk, disk_status) = match disk_dir {
            Ok(dir) => {
                let (cache, status) = DiskCache::open(&device, &info, &dir);
                (Some(cache), status)
            }
            Err(reason) => (None, PipelineCacheFile::Off { reason: reason.into() }),
        };
        #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
        let hot = options.hot_reload.then(|| Arc::new(crate::reload::HotReload::new(options.source_remap.clone())));
        Ok(Gpu {
            inner: Arc::new(Inner {
                id: next_id(),
                instance: ManuallyDrop::new(instance),
                device: ManuallyDrop::new(device),
                queue: ManuallyDrop::new(queue),
                adapter: ManuallyDrop::new(adapter),
                pipelines: ManuallyDrop::new(PipelineCache::new(options.pipeline_cache_capacity)),
                disk: ManuallyDrop::new(disk),
                disk_status,
                #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
                hot,
                uniform_pool: Arc::default(),
                features,
                limits,
                caps,
                disabled,
                browser,
                runtime_checks,
                report,
                errors,
                lost,
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
        self.inner.caps.subgroups
    }

    /// The cooperative-matrix configurations (tensor cores) enabled on this device: kernels run
    /// a variant that uses them when each configuration it uses is listed. Empty when tensor
    /// cores are off or absent (always in a browser).
    pub fn cooperative_matrices(&self) -> &[CoopConfig] {
        &self.inner.caps.coop
    }

    /// Blocks until all submitted work has finished. Reports a lost device, and errors wgpu
    /// raised outside the runtime's own calls (through [`Gpu::device`], [`Gpu::queue`] or
    /// [`Buffer::raw`](crate::Buffer::raw)); each runtime call reports its own errors itself.
    /// Not on the web: use [`Gpu::wait_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&self) -> Result<()> {
        self.alive()?;
        self.poll_wait()?;
        self.take_errors()
    }

    /// Waits, without blocking a thread, until all submitted work has finished; reports what
    /// [`Gpu::wait`] reports, and on the web every error wgpu raised meanwhile (a browser
    /// reports them asynchronously). The form of [`Gpu::wait`] for the web.
    pub async fn wait_async(&self) -> Result<()> {
        self.alive()?;
        let (tx, rx) = futures_channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        // Native backends run the callback while polled; a browser runs it by itself.
        #[cfg(not(target_arch = "wasm32"))]
        self.poll_wait()?;
        let done = rx.await;
        self.alive()?;
        done.map_err(|_| Error::Gpu("the queue never reported its work done".into()))?;
        self.take_errors()
    }

    /// Polls until the queue is idle; a device lost meanwhile is reported as such.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn poll_wait(&self) -> Result<()> {
        let polled = self.inner.device.poll(wgpu::PollType::wait_indefinitely());
        self.alive()?;
        polled.map(|_| ()).map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))
    }

    /// `Err(DeviceLost)` once the device is lost: every call checks this first.
    pub(crate) fn alive(&self) -> Result<()> {
        match self.inner.lost.get() {
            Some(message) => Err(Error::DeviceLost { message: message.clone() }),
            None => Ok(()),
        }
    }

    /// Runs `f` inside wgpu error scopes (out of memory, validation, internal) and returns the
    /// first error that what `f` did raised. wgpu keeps error scopes per thread (its `std`
    /// feature: `ErrorSinkRaw::scopes` is keyed by thread id), so errors of calls on other
    /// threads never land here, and these never reach other threads' calls. On the web scopes
    /// resolve asynchronously: there `f` runs unscoped and its errors reach the uncaptured
    /// handler, reported by [`Gpu::wait_async`].
    pub(crate) fn scoped<R>(&self, f: impl FnOnce() -> R) -> (R, Option<String>) {
        self.scoped_by(ALL_ERRORS, f)
    }

    /// [`Gpu::scoped`] catching only the errors `filters` name (the others reach the uncaptured
    /// handler): each scope costs two locks of wgpu's error sink, which a call in a batch of
    /// hundreds notices.
    pub(crate) fn scoped_by<R>(&self, filters: &[wgpu::ErrorFilter], f: impl FnOnce() -> R) -> (R, Option<String>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let device = &self.inner.device;
            let scopes: smallvec::SmallVec<[wgpu::ErrorScopeGuard; 3]> =
                filters.iter().map(|&filter| device.push_error_scope(filter)).collect();
            let out = f();
            // Popped innermost first (natively the futures are ready at once); the first filter's
            // error wins.
            let mut first = None;
            for scope in scopes.into_iter().rev() {
                if let Some(e) = ready_now(scope.pop()) {
                    first = Some(e);
                }
            }
            (out, first.map(|e| one_line(&e.to_string())))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = filters;
            (f(), None)
        }
    }

    /// The error for a wgpu error raised during `during`: the lost device if it is lost by now.
    pub(crate) fn wgpu_error(&self, during: impl FnOnce() -> String, message: String) -> Error {
        match self.alive() {
            Err(lost) => lost,
            Ok(()) => Error::Wgpu { during: during(), message },
        }
    }

    /// Returns (and clears) errors wgpu reported outside the runtime's scopes.
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

    #[test]
    fn the_lifecycle_lock_is_not_taken_twice_by_one_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let outer = lifecycle();
            let inner = lifecycle();
            let nested = inner.0.is_none();
            drop(inner);
            // Still held after the nested guard is gone: another thread cannot take it.
            let still_held = std::thread::scope(|s| s.spawn(|| LIFECYCLE.try_lock().is_err()).join().unwrap());
            drop(outer);
            let released = std::thread::scope(|s| s.spawn(|| LIFECYCLE.try_lock().is_ok()).join().unwrap());
            let _ = tx.send((nested, still_held, released, lifecycle().0.is_some()));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the lifecycle lock deadlocked");
        assert_eq!(got, (true, true, true, true));
    }

    fn report() -> AdapterReport {
        AdapterReport {
            name: "GPU".into(),
            backend: "Vulkan".into(),
            device_type: "DiscreteGpu".into(),
            driver: String::new(),
            subgroup_min_size: 32,
            subgroup_max_size: 32,
            subgroups: true,
            f16: true,
            timestamps: true,
            max_workgroups_per_dimension: 65535,
            max_storage_binding: 1 << 30,
            max_buffer_size: 1 << 40,
            max_workgroup_memory: 48 << 10,
            cooperative_matrix: false,
            cooperative_matrix_configs: Vec::new(),
            cooperative_matrix_other: Vec::new(),
            cooperative_matrix_off: None,
            runtime_checks: RuntimeChecks::AsDeclared,
        }
    }

    #[test]
    fn the_report_says_whether_tensor_cores_are_on() {
        let c16 = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };
        let none = report().to_string();
        assert!(none.ends_with("; tensor cores: none"), "{none}");
        assert!(none.contains("48 KiB workgroup memory"), "{none}");

        let mut on = report();
        on.cooperative_matrix = true;
        on.cooperative_matrix_configs = vec![c16];
        on.cooperative_matrix_other = vec!["16×8×16 (A/B f16, C f32)".into()];
        let text = on.to_string();
        assert!(
            text.contains(
                "; tensor cores: on (16×16×16 (A/B f16, C f32)) (also offered, not expressible in WGSL: 16×8×16"
            ),
            "{text}"
        );

        assert!(!text.contains("runtime checks"), "{text}");
        let mut all = on.clone();
        all.runtime_checks = RuntimeChecks::All;
        assert!(all.to_string().ends_with("; runtime checks: every kernel, `@unchecked` ones too"), "{all}");

        let mut off = on.clone();
        off.cooperative_matrix = false;
        off.cooperative_matrix_off = Some("turned off by KERNELS_COOPERATIVE_MATRIX=0".into());
        let text = off.to_string();
        assert!(
            text.contains(
                "; tensor cores: off (turned off by KERNELS_COOPERATIVE_MATRIX=0; offered: 16×16×16 (A/B f16, C f32))"
            ),
            "{text}"
        );
    }
}
