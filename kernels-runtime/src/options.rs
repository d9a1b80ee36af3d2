//! How to open a [`Gpu`](crate::Gpu): the options, the adapter filter parsed once into typed
//! values, and the one preference order among adapters.

/// The default of [`GpuOptions::pipeline_cache_capacity`]: room for every kernel of the library
/// and a few hundred shape-specialised pipelines.
pub const DEFAULT_PIPELINE_CACHE_CAPACITY: usize = 512;

/// How to open a [`Gpu`](crate::Gpu). Start from [`GpuOptions::default`] or
/// [`GpuOptions::from_env`] and change what you need:
///
/// ```
/// # use kernels_runtime::GpuOptions;
/// let options = GpuOptions::from_env().adapter("vulkan:nvidia").subgroups(false).cooperative_matrix(false);
/// assert!(!options.subgroups);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GpuOptions {
    /// The adapter to pick ([`GpuOptions::adapter`]); `None` picks the most capable one.
    pub adapter: Option<AdapterFilter>,
    /// Which of the adapters that pass [`GpuOptions::adapter`] to open, counted from 0 in the
    /// order they are tried ([`GpuOptions::adapter_index`]); `None` opens the first.
    pub adapter_index: Option<AdapterIndex>,
    /// Use subgroup operations where the adapter has them. With `false`, kernels run their
    /// tree-reduction variants (and kernels that have none report `SUBGROUP` as missing).
    pub subgroups: bool,
    /// Optional features not to enable even where the adapter has them, to run as a smaller
    /// adapter would (`SHADER_F16` to test f16 errors, `SUBGROUP` to test the fallbacks).
    pub without: wgpu::Features,
    /// A lower `max_compute_workgroups_per_dimension` than the adapter's, to run as a smaller
    /// device would: with a small value, every 1-D grid past it takes the 2-D fallback, which
    /// tests use to exercise that path without gigabytes of data.
    pub max_workgroups_per_dimension: Option<u32>,
    /// Use tensor cores (`EXPERIMENTAL_COOPERATIVE_MATRIX`) where the adapter offers a
    /// configuration WGSL can express. With `false`, kernels run their portable variants (and
    /// kernels that have none report the feature as missing).
    pub cooperative_matrix: bool,
    /// How many pipelines (one per kernel and set of override values) the context keeps; past
    /// it, the least recently used is dropped (and built again if called again).
    pub pipeline_cache_capacity: usize,
    /// Where the driver's compiled pipelines are kept between runs, where the backend can
    /// (Vulkan): a file per adapter in this directory, read when the device opens and written
    /// when pipelines were built ([`Gpu::save_pipeline_cache`](crate::Gpu::save_pipeline_cache)).
    /// `None`: no cache on disk. The default is [`cache_dir`](crate::cache_dir), unless
    /// `KERNELS_PIPELINE_CACHE=0`.
    pub pipeline_cache_dir: Option<std::path::PathBuf>,
    /// Watch the files each kernel module was assembled from and, on a change, compile them
    /// again as `kernels!` did and run the kernels that still fit their Rust functions
    /// ([`GpuOptions::hot_reload`]). Off unless asked for (`KERNELS_HOT_RELOAD=1`).
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub hot_reload: bool,
    /// Path prefixes to replace before hot reload reads a file: `(from, to)` pairs, the first
    /// whose `from` starts the path wins ([`GpuOptions::remap_sources`]).
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub source_remap: Vec<(std::path::PathBuf, std::path::PathBuf)>,
    /// Which kernels run with wgpu's runtime checks ([`GpuOptions::runtime_checks`]):
    /// [`RuntimeChecks::AsDeclared`] unless `KERNELS_RUNTIME_CHECKS=all`.
    pub runtime_checks: RuntimeChecks,
    /// A `KERNELS_RUNTIME_CHECKS` value that names no setting, refused when the GPU opens.
    pub(crate) runtime_checks_refused: Option<String>,
}

/// Which kernels get wgpu's runtime checks: naga's clamping of array indices, its loop bounding
/// and its integer-division guards ([`GpuOptions::runtime_checks`]). A browser's WebGPU checks
/// every kernel whatever this says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RuntimeChecks {
    /// Every kernel but those marked `// @unchecked` ([`KernelDef::unchecked`](crate::KernelDef::unchecked)),
    /// whose modules are created without them. The default; `KERNELS_RUNTIME_CHECKS=declared`.
    #[default]
    AsDeclared,
    /// Every kernel, `@unchecked` ones included: to rerun a program in which an `@unchecked`
    /// kernel is suspected of an out-of-range access (with the checks an index past an array
    /// reads or writes its last element instead, so a result that changes points at such a
    /// kernel). `KERNELS_RUNTIME_CHECKS=all`.
    All,
}

impl RuntimeChecks {
    /// The values `KERNELS_RUNTIME_CHECKS` takes, for messages.
    pub(crate) const VALUES: &'static str = "`all` (every kernel with wgpu's runtime checks, `@unchecked` ones too) or `declared` (the default: kernels marked `@unchecked` without them)";

    /// Reads a `KERNELS_RUNTIME_CHECKS` value: `all` or `declared`, in any case, blanks around
    /// it ignored; an empty value is the default. `Err` holds a value that is neither.
    pub fn parse(text: &str) -> Result<RuntimeChecks, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(RuntimeChecks::All),
            "declared" | "" => Ok(RuntimeChecks::AsDeclared),
            _ => Err(text.to_string()),
        }
    }
}

/// The defaults: the cache directory and `KERNELS_PIPELINE_CACHE` are read from the
/// environment (where to cache is the user's, like `HOME`), nothing else is.
impl Default for GpuOptions {
    fn default() -> Self {
        Self::defaults_from(|name| std::env::var(name).ok())
    }
}

/// Whether a switch variable is on (`1`, `true`, `on`, `yes`).
fn is_on(value: Option<String>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"))
}

impl GpuOptions {
    /// The defaults, changed by the environment: `KERNELS_ADAPTER` (as
    /// [`GpuOptions::adapter`]), `KERNELS_SUBGROUPS=0`, `KERNELS_F16=0` (adds `SHADER_F16` to
    /// [`GpuOptions::without`]), `KERNELS_COOPERATIVE_MATRIX=0`, `KERNELS_RUNTIME_CHECKS`
    /// (`all` or `declared`, as [`GpuOptions::runtime_checks`]; another value makes opening the
    /// GPU fail with [`Error::Environment`](crate::Error::Environment)), and with the
    /// `hot-reload` feature `KERNELS_HOT_RELOAD=1` and `KERNELS_SOURCE_REMAP` (without the
    /// feature, `KERNELS_HOT_RELOAD` only prints a warning).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`GpuOptions::default`] over any source of variables.
    fn defaults_from(var: impl Fn(&str) -> Option<String>) -> Self {
        let off = var("KERNELS_PIPELINE_CACHE").is_some_and(|v| v.trim() == "0");
        GpuOptions {
            adapter: None,
            adapter_index: None,
            subgroups: true,
            without: wgpu::Features::empty(),
            max_workgroups_per_dimension: None,
            cooperative_matrix: true,
            pipeline_cache_capacity: DEFAULT_PIPELINE_CACHE_CAPACITY,
            pipeline_cache_dir: if off { None } else { crate::disk::cache_dir_from(|n| var(n).map(Into::into)) },
            #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
            hot_reload: false,
            #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
            source_remap: Vec::new(),
            runtime_checks: RuntimeChecks::AsDeclared,
            runtime_checks_refused: None,
        }
    }

    /// [`GpuOptions::from_env`] over any source of variables.
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Self {
        let off = |name: &str| var(name).is_some_and(|v| v.trim() == "0");
        let mut options = GpuOptions {
            adapter: var("KERNELS_ADAPTER").filter(|s| !s.trim().is_empty()).map(|s| AdapterFilter::parse(&s, true)),
            adapter_index: var("KERNELS_ADAPTER_INDEX")
                .filter(|s| !s.trim().is_empty())
                .map(|s| AdapterIndex::parse(&s)),
            subgroups: !off("KERNELS_SUBGROUPS"),
            cooperative_matrix: !off("KERNELS_COOPERATIVE_MATRIX"),
            ..GpuOptions::defaults_from(&var)
        };
        if off("KERNELS_F16") {
            options.without |= wgpu::Features::SHADER_F16;
        }
        if let Some(text) = var("KERNELS_RUNTIME_CHECKS") {
            match RuntimeChecks::parse(&text) {
                Ok(checks) => options.runtime_checks = checks,
                Err(text) => options.runtime_checks_refused = Some(text),
            }
        }
        let hot = is_on(var("KERNELS_HOT_RELOAD"));
        #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
        {
            options.hot_reload = hot;
            if let Some(pairs) = var("KERNELS_SOURCE_REMAP") {
                options.source_remap = parse_remap(&pairs);
            }
        }
        #[cfg(not(all(feature = "hot-reload", not(target_arch = "wasm32"))))]
        if hot {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "kernels: KERNELS_HOT_RELOAD is set, but this program was built without the `hot-reload` feature of `kernels` (or `kernels-runtime`): kernels run as compiled"
                )
            });
        }
        options
    }

    /// Picks the adapter: a backend (`vulkan`, `metal`, `dx12`, `gl`, `webgpu`), a part of the
    /// adapter's name (case-insensitive) or its whole PCI bus id (`0000:41:00.0`, where the
    /// backend reports one), or both as `backend:name`. A word that names a backend
    /// is the backend.
    pub fn adapter(mut self, wanted: &str) -> Self {
        self.adapter = Some(AdapterFilter::parse(wanted, false));
        self
    }

    /// Opens the `index`-th of the adapters that pass [`GpuOptions::adapter`], counted from 0
    /// in the order they are tried (best kind first, then by PCI bus id where the backend
    /// reports one, then as the backend lists them): how one process per GPU picks its own
    /// among identical GPUs, which have one name. Overrides `KERNELS_ADAPTER_INDEX`.
    pub fn adapter_index(mut self, index: usize) -> Self {
        self.adapter_index = Some(AdapterIndex { index: Ok(index), from_env: false });
        self
    }

    /// Picks the most capable adapter (undoes [`GpuOptions::adapter`] and `KERNELS_ADAPTER`).
    pub fn any_adapter(mut self) -> Self {
        self.adapter = None;
        self
    }

    /// Sets [`GpuOptions::subgroups`](#structfield.subgroups).
    pub fn subgroups(mut self, on: bool) -> Self {
        self.subgroups = on;
        self
    }

    /// Adds `features` to [`GpuOptions::without`](#structfield.without).
    pub fn without(mut self, features: wgpu::Features) -> Self {
        self.without |= features;
        self
    }

    /// Sets [`GpuOptions::max_workgroups_per_dimension`](#structfield.max_workgroups_per_dimension).
    pub fn max_workgroups_per_dimension(mut self, max: u32) -> Self {
        self.max_workgroups_per_dimension = Some(max);
        self
    }

    /// Sets [`GpuOptions::cooperative_matrix`](#structfield.cooperative_matrix).
    pub fn cooperative_matrix(mut self, on: bool) -> Self {
        self.cooperative_matrix = on;
        self
    }

    /// Sets [`GpuOptions::pipeline_cache_capacity`](#structfield.pipeline_cache_capacity)
    /// (at least 1).
    pub fn pipeline_cache_capacity(mut self, pipelines: usize) -> Self {
        self.pipeline_cache_capacity = pipelines.max(1);
        self
    }

    /// Sets [`GpuOptions::pipeline_cache_dir`](#structfield.pipeline_cache_dir): `None` keeps
    /// no pipeline cache on disk.
    pub fn pipeline_cache_dir(mut self, dir: Option<impl Into<std::path::PathBuf>>) -> Self {
        self.pipeline_cache_dir = dir.map(Into::into);
        self
    }

    /// Turns hot reload on or off ([`GpuOptions::hot_reload`](#structfield.hot_reload)). With
    /// it on, the first call of a kernel starts watching the files its module was assembled
    /// from (the shared preamble, the kernel file and what they include); on every change they
    /// are compiled again by `kernels!`'s own stages, and each kernel whose interface still
    /// matches its compiled Rust function (bindings, element and uniform layouts, workgroup
    /// size, overrides, `@grid` and `@requires`) runs its new source from the next dispatch on.
    /// An edit that does not compile or no longer fits is reported as the compile error would
    /// be, and the pipeline compiled before keeps running. Reports go to stderr and to
    /// [`Gpu::wait_for_reload`](crate::Gpu::wait_for_reload).
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub fn hot_reload(mut self, on: bool) -> Self {
        self.hot_reload = on;
        self
    }

    /// Sets [`GpuOptions::runtime_checks`](#structfield.runtime_checks): with
    /// [`RuntimeChecks::All`], kernels marked `// @unchecked` are compiled with wgpu's runtime
    /// checks too. Overrides `KERNELS_RUNTIME_CHECKS`, a value of it that is refused included.
    pub fn runtime_checks(mut self, checks: RuntimeChecks) -> Self {
        self.runtime_checks = checks;
        self.runtime_checks_refused = None;
        self
    }

    /// The error opening a GPU with these options gives for a `KERNELS_RUNTIME_CHECKS` value
    /// that names no setting.
    pub(crate) fn refused(&self) -> Option<crate::Error> {
        self.runtime_checks_refused.as_ref().map(|value| crate::Error::Environment {
            variable: "KERNELS_RUNTIME_CHECKS",
            value: value.clone(),
            expected: RuntimeChecks::VALUES,
        })
    }

    /// Makes hot reload read files under `to` where the program was compiled with them under
    /// `from` (a program built in another directory or on another machine, or a test that edits
    /// a copy). Also `KERNELS_SOURCE_REMAP=from=to`.
    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    pub fn remap_sources(mut self, from: impl Into<std::path::PathBuf>, to: impl Into<std::path::PathBuf>) -> Self {
        self.source_remap.push((from.into(), to.into()));
        self
    }
}

/// `from=to` pairs separated by the platform's path-list separator (`:` on Unix, `;` on Windows).
#[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
fn parse_remap(text: &str) -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    std::env::split_paths(text)
        .filter_map(|pair| {
            let pair = pair.to_string_lossy().into_owned();
            let (from, to) = pair.split_once('=')?;
            Some((from.into(), to.into()))
        })
        .collect()
}

/// Which adapters to accept: a backend, a part of the name, or both; parsed once from text
/// (`KERNELS_ADAPTER` or [`GpuOptions::adapter`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterFilter {
    backend: Option<wgpu::Backend>,
    /// Lower-cased.
    name: Option<String>,
    /// As written, for messages.
    text: String,
    from_env: bool,
}

impl AdapterFilter {
    fn parse(text: &str, from_env: bool) -> AdapterFilter {
        let backend_named = |word: &str| wgpu::Backend::ALL.into_iter().find(|b| b.to_str() == word.trim());
        let lower = text.trim().to_lowercase();
        let name = |part: &str| Some(part.trim().to_string()).filter(|p| !p.is_empty());
        let (backend, name) = match lower.split_once(':') {
            Some((b, n)) if backend_named(b).is_some() => (backend_named(b), name(n)),
            _ => match backend_named(&lower) {
                Some(b) => (Some(b), None),
                None => (None, name(&lower)),
            },
        };
        AdapterFilter { backend, name, text: text.trim().to_string(), from_env }
    }

    /// The backend asked for, if any.
    pub fn backend(&self) -> Option<wgpu::Backend> {
        self.backend
    }

    /// The part of the adapter's name asked for (lower case), if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether this adapter passes.
    pub fn matches(&self, info: &wgpu::AdapterInfo) -> bool {
        self.backend.is_none_or(|b| b == info.backend)
            && self.name.as_deref().is_none_or(|n| {
                info.name.to_lowercase().contains(n)
                    || (!info.device_pci_bus_id.is_empty() && info.device_pci_bus_id.to_lowercase() == n)
            })
    }
}

/// Where the filter came from, as a user would write it: `KERNELS_ADAPTER="…"` or
/// `GpuOptions::adapter("…")`.
impl std::fmt::Display for AdapterFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from_env {
            write!(f, "KERNELS_ADAPTER={:?}", self.text)
        } else {
            write!(f, "GpuOptions::adapter({:?})", self.text)
        }
    }
}

/// An adapter index asked for, and where ([`GpuOptions::adapter_index`] or
/// `KERNELS_ADAPTER_INDEX`); text that is not a number is kept to be refused when the GPU opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterIndex {
    index: Result<usize, String>,
    from_env: bool,
}

impl AdapterIndex {
    fn parse(text: &str) -> AdapterIndex {
        AdapterIndex { index: text.trim().parse().map_err(|_| text.trim().to_string()), from_env: true }
    }

    /// The index, or the text that is not one.
    pub fn index(&self) -> Result<usize, &str> {
        self.index.as_ref().copied().map_err(String::as_str)
    }
}

impl std::fmt::Display for AdapterIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match &self.index {
            Ok(i) => i.to_string(),
            Err(t) => format!("{t:?}"),
        };
        if self.from_env {
            write!(f, "KERNELS_ADAPTER_INDEX={text}")
        } else {
            write!(f, "GpuOptions::adapter_index({text})")
        }
    }
}

/// Which of `candidates` (adapter infos that passed the filter) to open: sorted into the order
/// they are tried (best kind first, then by PCI bus id, stably), then the `index`-th (the first
/// without one). `Ok(None)`: there is none.
pub(crate) fn pick(
    candidates: &[wgpu::AdapterInfo],
    index: Option<&AdapterIndex>,
) -> Result<Option<usize>, crate::Error> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&candidates[a], &candidates[b]);
        preference(x).cmp(&preference(y)).then_with(|| x.device_pci_bus_id.cmp(&y.device_pci_bus_id))
    });
    let Some(wanted) = index else { return Ok(order.first().copied()) };
    let matching = || order.iter().map(|&k| describe(&candidates[k])).collect::<Vec<_>>();
    let k = wanted.index().map_err(|text| crate::Error::AdapterIndex {
        index: usize::MAX,
        source_of: format!("{wanted}: not a number: {text:?}"),
        matching: matching(),
    })?;
    match order.get(k) {
        Some(&i) => Ok(Some(i)),
        None if order.is_empty() => Ok(None),
        None => Err(crate::Error::AdapterIndex { index: k, source_of: wanted.to_string(), matching: matching() }),
    }
}

/// The order adapters are preferred in, best first: real GPUs (discrete, integrated, virtual,
/// other, CPU), then any backend over GL.
pub(crate) fn preference(info: &wgpu::AdapterInfo) -> (u8, bool) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    (kind, info.backend == wgpu::Backend::Gl)
}

/// `name (backend)`, for the list of adapters in an error.
pub(crate) fn describe(info: &wgpu::AdapterInfo) -> String {
    if info.device_pci_bus_id.is_empty() {
        format!("{} ({})", info.name, info.backend.to_str())
    } else {
        format!("{} ({}, PCI {})", info.name, info.backend.to_str(), info.device_pci_bus_id)
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
    fn the_filter_is_parsed_once_into_a_backend_and_a_name() {
        let parse = |t| AdapterFilter::parse(t, false);
        assert_eq!((parse("Vulkan").backend(), parse("Vulkan").name()), (Some(wgpu::Backend::Vulkan), None));
        assert_eq!((parse("nvidia").backend(), parse("nvidia").name()), (None, Some("nvidia")));
        let both = parse(" gl : LLVMpipe ");
        assert_eq!((both.backend(), both.name()), (Some(wgpu::Backend::Gl), Some("llvmpipe")));
        assert_eq!(parse("webgpu").backend(), Some(wgpu::Backend::BrowserWebGpu));
        // Not a backend before the colon: all of it is a name part.
        assert_eq!((parse("foo:bar").backend(), parse("foo:bar").name()), (None, Some("foo:bar")));
        assert_eq!(parse("dx12:").name(), None);
    }

    #[test]
    fn adapter_selection_by_backend_name_or_both() {
        let lavapipe = info("llvmpipe (LLVM 15.0.6, 256 bits)", wgpu::Backend::Vulkan);
        let parse = |t| AdapterFilter::parse(t, false);
        assert!(parse("vulkan").matches(&lavapipe));
        assert!(parse("LLVMpipe").matches(&lavapipe));
        assert!(parse("vulkan:llvm").matches(&lavapipe));
        assert!(!parse("gl:llvm").matches(&lavapipe));
        assert!(!parse("nvidia").matches(&lavapipe));
        assert!(!parse("gl").matches(&lavapipe));
        let h200 = gpu("NVIDIA H200", "0000:41:00.0", wgpu::DeviceType::DiscreteGpu);
        assert!(parse("0000:41:00.0").matches(&h200));
        assert!(parse("vulkan:0000:41:00.0").matches(&h200));
        assert!(!parse("0000:c1:00.0").matches(&h200));
        assert!(parse("gl").matches(&info("llvmpipe", wgpu::Backend::Gl)));
    }

    fn gpu(name: &str, bus: &str, kind: wgpu::DeviceType) -> wgpu::AdapterInfo {
        let mut i = wgpu::AdapterInfo::new(kind, wgpu::Backend::Vulkan);
        i.name = name.into();
        i.device_pci_bus_id = bus.into();
        i
    }

    #[test]
    fn identical_adapters_are_told_apart_by_index_in_bus_order() {
        let cpu = gpu("llvmpipe", "", wgpu::DeviceType::Cpu);
        let h1 = gpu("NVIDIA H200", "0000:c1:00.0", wgpu::DeviceType::DiscreteGpu);
        let h0 = gpu("NVIDIA H200", "0000:41:00.0", wgpu::DeviceType::DiscreteGpu);
        let found = [cpu, h1, h0];
        let at = |i: usize| AdapterIndex { index: Ok(i), from_env: false };
        // Discrete GPUs first, by PCI bus id; the CPU adapter last.
        assert_eq!(pick(&found, None).unwrap(), Some(2));
        assert_eq!(pick(&found, Some(&at(0))).unwrap(), Some(2));
        assert_eq!(pick(&found, Some(&at(1))).unwrap(), Some(1));
        assert_eq!(pick(&found, Some(&at(2))).unwrap(), Some(0));
        let e = pick(&found, Some(&at(3))).unwrap_err().to_string();
        assert!(e.contains("adapter index 3 (GpuOptions::adapter_index(3)) is out of range: 3 adapters match"), "{e}");
        assert!(e.contains("0: NVIDIA H200 (vulkan, PCI 0000:41:00.0), 1: NVIDIA H200 (vulkan, PCI 0000:c1:00.0), 2: llvmpipe (vulkan)"), "{e}");
        // No adapter at all is the no-adapter error's to report.
        assert_eq!(pick(&[], Some(&at(1))).unwrap(), None);
    }

    #[test]
    fn the_index_comes_from_the_environment_and_bad_text_is_refused() {
        let env = |value: &'static str| move |name: &str| (name == "KERNELS_ADAPTER_INDEX").then(|| value.to_string());
        let o = GpuOptions::from_lookup(env(" 1 "));
        assert_eq!(o.adapter_index.as_ref().and_then(|i| i.index().ok()), Some(1));
        assert_eq!(o.adapter_index.as_ref().unwrap().to_string(), "KERNELS_ADAPTER_INDEX=1");
        assert_eq!(GpuOptions::from_lookup(env("")).adapter_index, None);
        assert_eq!(GpuOptions::from_lookup(env("1")).adapter_index(0).adapter_index.unwrap().index(), Ok(0));
        let bad = GpuOptions::from_lookup(env("first"));
        let e =
            pick(&[gpu("llvmpipe", "", wgpu::DeviceType::Cpu)], bad.adapter_index.as_ref()).unwrap_err().to_string();
        assert!(e.contains("KERNELS_ADAPTER_INDEX=\"first\": not a number"), "{e}");
    }

    #[test]
    fn messages_say_where_the_filter_came_from() {
        assert_eq!(AdapterFilter::parse("nvidia", true).to_string(), "KERNELS_ADAPTER=\"nvidia\"");
        assert_eq!(AdapterFilter::parse(" nvidia ", false).to_string(), "GpuOptions::adapter(\"nvidia\")");
    }

    #[test]
    fn real_gpus_first_then_anything_over_gl() {
        let mut adapters = [
            (wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan),
            (wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Gl),
            (wgpu::DeviceType::IntegratedGpu, wgpu::Backend::Vulkan),
            (wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Vulkan),
        ]
        .map(|(t, b)| wgpu::AdapterInfo::new(t, b));
        adapters.sort_by_key(preference);
        let order: Vec<_> = adapters.iter().map(|i| (i.device_type, i.backend)).collect();
        assert_eq!(
            order,
            [
                (wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Vulkan),
                (wgpu::DeviceType::DiscreteGpu, wgpu::Backend::Gl),
                (wgpu::DeviceType::IntegratedGpu, wgpu::Backend::Vulkan),
                (wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan),
            ]
        );
    }

    #[test]
    fn options_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let default = GpuOptions::from_lookup(vars(&[]));
        assert!(default.cooperative_matrix && default.subgroups && default.adapter.is_none());
        assert_eq!(default.pipeline_cache_capacity, DEFAULT_PIPELINE_CACHE_CAPACITY);
        let off = GpuOptions::from_lookup(vars(&[("KERNELS_COOPERATIVE_MATRIX", " 0 "), ("KERNELS_F16", "0")]));
        assert!(!off.cooperative_matrix && off.subgroups);
        assert_eq!(off.without, wgpu::Features::SHADER_F16);
        let on = GpuOptions::from_lookup(vars(&[("KERNELS_COOPERATIVE_MATRIX", "1"), ("KERNELS_ADAPTER", " ")]));
        assert!(on.cooperative_matrix && on.adapter.is_none());
        let picked = GpuOptions::from_lookup(vars(&[("KERNELS_ADAPTER", "vulkan"), ("KERNELS_SUBGROUPS", "0")]));
        assert_eq!(picked.adapter.as_ref().and_then(AdapterFilter::backend), Some(wgpu::Backend::Vulkan));
        assert!(!picked.subgroups);
        // The builder overrides what the environment said, and says so in messages.
        let coded = picked.adapter("nvidia").subgroups(true).without(wgpu::Features::SUBGROUP);
        assert_eq!(coded.adapter.as_ref().map(ToString::to_string).as_deref(), Some("GpuOptions::adapter(\"nvidia\")"));
        assert!(coded.subgroups && coded.without == wgpu::Features::SUBGROUP);
        assert!(coded.any_adapter().adapter.is_none());
    }

    #[test]
    fn runtime_checks_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let checks = |value: &'static str| {
            let pairs: &'static [(&'static str, &'static str)] =
                Box::leak(Box::new([("KERNELS_RUNTIME_CHECKS", value)]));
            GpuOptions::from_lookup(vars(pairs))
        };
        let unset = GpuOptions::from_lookup(vars(&[]));
        assert_eq!((unset.runtime_checks, unset.refused()), (RuntimeChecks::AsDeclared, None));
        assert_eq!(GpuOptions::default().runtime_checks, RuntimeChecks::AsDeclared);
        for all in ["all", " ALL ", "All"] {
            let o = checks(all);
            assert_eq!((o.runtime_checks, o.refused()), (RuntimeChecks::All, None), "{all:?}");
        }
        for declared in ["declared", "Declared", "", "  "] {
            let o = checks(declared);
            assert_eq!((o.runtime_checks, o.refused()), (RuntimeChecks::AsDeclared, None), "{declared:?}");
        }
        // A value that names no setting (a switch's `1`, a typo) is refused when the GPU opens,
        // naming the variable, the value and what it takes; the checks meanwhile stay as declared.
        for unknown in ["1", "on", "none", "al"] {
            let o = checks(unknown);
            assert_eq!(o.runtime_checks, RuntimeChecks::AsDeclared);
            let e = o.refused().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.starts_with(&format!("KERNELS_RUNTIME_CHECKS={unknown:?} is not a value it takes")), "{e}");
            assert!(e.contains("`all`") && e.contains("`declared`"), "{e}");
        }
        assert_eq!(RuntimeChecks::parse(" x "), Err(" x ".to_string()));
        // The builder decides over the environment, a refused value included.
        let coded = checks("al").runtime_checks(RuntimeChecks::All);
        assert_eq!((coded.runtime_checks, coded.refused()), (RuntimeChecks::All, None));
        assert_eq!(checks("all").runtime_checks(RuntimeChecks::AsDeclared).runtime_checks, RuntimeChecks::AsDeclared);
    }

    /// Refused before any adapter is looked at, so without a GPU too.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_refused_value_stops_the_gpu_from_opening() {
        let options = GpuOptions::from_lookup(|name| (name == "KERNELS_RUNTIME_CHECKS").then(|| "yes".to_string()));
        match crate::Gpu::with_options_blocking(options) {
            Err(crate::Error::Environment { variable, value, .. }) => {
                assert_eq!((variable, value.as_str()), ("KERNELS_RUNTIME_CHECKS", "yes"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_pipeline_cache_directory_and_its_switch() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let dir = |o: GpuOptions| o.pipeline_cache_dir.map(|d| d.to_string_lossy().into_owned());
        assert_eq!(dir(GpuOptions::from_lookup(vars(&[("KERNELS_CACHE_DIR", "/c")]))).as_deref(), Some("/c"));
        let off = GpuOptions::from_lookup(vars(&[("KERNELS_CACHE_DIR", "/c"), ("KERNELS_PIPELINE_CACHE", "0")]));
        assert_eq!(dir(off), None);
        assert_eq!(dir(GpuOptions::from_lookup(vars(&[]))), None, "no directory known: no cache");
        let coded = GpuOptions::from_lookup(vars(&[("KERNELS_CACHE_DIR", "/c")])).pipeline_cache_dir(None::<String>);
        assert_eq!(dir(coded), None);
        assert_eq!(dir(GpuOptions::from_lookup(vars(&[])).pipeline_cache_dir(Some("/d"))).as_deref(), Some("/d"));
    }

    #[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
    #[test]
    fn hot_reload_only_when_asked_for() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert!(!GpuOptions::from_lookup(vars(&[])).hot_reload);
        assert!(!GpuOptions::from_lookup(vars(&[("KERNELS_HOT_RELOAD", "0")])).hot_reload);
        for on in ["1", "true", " on "] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([("KERNELS_HOT_RELOAD", on)]));
            assert!(GpuOptions::from_lookup(vars(pairs)).hot_reload, "{on}");
        }
        let sep = if cfg!(windows) { ";" } else { ":" };
        let text: &'static str = Box::leak(format!("/build=/home/me{sep}/x=/y").into_boxed_str());
        let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([("KERNELS_SOURCE_REMAP", text)]));
        let remap = GpuOptions::from_lookup(vars(pairs)).source_remap;
        assert_eq!(remap, vec![("/build".into(), "/home/me".into()), ("/x".into(), "/y".into())]);
        assert!(GpuOptions::default().hot_reload(true).remap_sources("/a", "/b").hot_reload);
    }
}
