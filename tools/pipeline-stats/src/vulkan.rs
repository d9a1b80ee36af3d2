//! Stage 4: the driver. A Vulkan device opened with ash the way wgpu 30 opens it for the runtime
//! (the same features and robustness, plus `VK_KHR_pipeline_executable_properties`), the
//! compute pipeline built with `CAPTURE_STATISTICS` and `CAPTURE_INTERNAL_REPRESENTATIONS`, and
//! what the driver reports about each executable.

use crate::select::Offer;
use crate::spirv::{BindingKind, Spirv};
use ash::{ext, khr, vk};
use kernels::{CoopConfig, CoopScalar};
use kernels_codegen::validate::VulkanTarget;
use std::ffi::{CStr, CString};
use std::time::Instant;

/// Why no device could be opened.
#[derive(Debug)]
pub enum OpenError {
    /// No Vulkan loader, or no device (matching the filter).
    NoDevice(String),
    /// The device cannot report pipeline statistics (or is too old).
    Unsupported(String),
    /// A Vulkan call failed.
    Vulkan(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NoDevice(m) | OpenError::Unsupported(m) | OpenError::Vulkan(m) => f.write_str(m),
        }
    }
}

/// The device, as reported.
#[derive(Clone, Debug, Default)]
pub struct DeviceInfo {
    pub name: String,
    /// `driverName driverInfo`.
    pub driver: String,
    /// The device's Vulkan version.
    pub api: (u32, u32, u32),
    pub vendor_id: u32,
    pub device_id: u32,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub kind: &'static str,
    pub subgroup_size: u32,
    /// The subgroup sizes a pipeline may get (`ALLOW_VARYING_SUBGROUP_SIZE`).
    pub subgroup_sizes: (u32, u32),
    /// Every subgroup-scope cooperative-matrix configuration the driver lists.
    pub coop_listed: Vec<String>,
}

impl DeviceInfo {
    /// One line: name, driver, Vulkan version, subgroups, tensor cores.
    pub fn summary(&self, offer: &Offer) -> String {
        let coop = if offer.coop.is_empty() {
            format!("off ({})", offer.coop_off.as_deref().unwrap_or("not offered"))
        } else {
            offer.coop.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        };
        let listed = if self.coop_listed.is_empty() {
            String::new()
        } else {
            format!(" (the driver lists {})", self.coop_listed.join(", "))
        };
        format!(
            "{} ({}, {} {:04x}:{:04x}; Vulkan {}.{}.{}); subgroup size {} ({}–{}); tensor cores: {coop}{listed}",
            self.name,
            self.driver,
            self.kind,
            self.vendor_id,
            self.device_id,
            self.api.0,
            self.api.1,
            self.api.2,
            self.subgroup_size,
            self.subgroup_sizes.0,
            self.subgroup_sizes.1
        )
    }
}

/// A statistic's value, in the type the driver gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Statistic {
    pub name: String,
    pub description: String,
    pub value: Value,
}

/// An internal representation (an IR, assembly) of an executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Representation {
    pub name: String,
    pub description: String,
    pub text: bool,
    pub data: Vec<u8>,
}

/// One executable of a pipeline (a compute pipeline usually has one).
#[derive(Clone, Debug, PartialEq)]
pub struct Executable {
    pub name: String,
    pub description: String,
    /// The stages it implements (`compute`).
    pub stages: Vec<&'static str>,
    /// Its subgroup size (0 if the driver does not say).
    pub subgroup_size: u32,
    pub statistics: Vec<Statistic>,
    pub representations: Vec<Representation>,
}

/// What building one pipeline gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Built {
    /// Whether statistics were asked for (not with `--build-only`).
    pub captured: bool,
    /// Wall time of `vkCreateComputePipelines`, in milliseconds.
    pub build_ms: f64,
    pub executables: Vec<Executable>,
}

/// An open device.
pub struct Gpu {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    /// Absent with `--build-only`.
    executables: Option<khr::pipeline_executable_properties::Device>,
    pub info: DeviceInfo,
    /// What the SPIR-V is written for.
    pub target: VulkanTarget,
    /// What the runtime would enable for kernels (its variant choice).
    pub offer: Offer,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

fn text(c: Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    c.map(|s| s.to_string_lossy().trim().to_string()).unwrap_or_default()
}

fn vk_err(what: &str) -> impl Fn(vk::Result) -> OpenError + '_ {
    move |e| OpenError::Vulkan(format!("{what} failed: {e}"))
}

fn kind_of(t: vk::PhysicalDeviceType) -> (&'static str, u8) {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => ("discrete", 0),
        vk::PhysicalDeviceType::INTEGRATED_GPU => ("integrated", 1),
        vk::PhysicalDeviceType::VIRTUAL_GPU => ("virtual", 2),
        vk::PhysicalDeviceType::CPU => ("cpu", 3),
        _ => ("other", 4),
    }
}

fn coop_scalar(t: vk::ComponentTypeKHR) -> Option<CoopScalar> {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => Some(CoopScalar::F16),
        vk::ComponentTypeKHR::FLOAT32 => Some(CoopScalar::F32),
        _ => None,
    }
}

/// A subgroup-scope cooperative-matrix configuration the driver lists: M, N, K and the A, B,
/// C, result component types.
struct Listed {
    mnk: [u32; 3],
    types: [vk::ComponentTypeKHR; 4],
}

/// What the physical device supports, read once.
#[derive(Default)]
struct Support {
    core: vk::PhysicalDeviceFeatures,
    storage_buffer_16: bool,
    uniform_and_storage_buffer_16: bool,
    storage_input_output_16: bool,
    float16: bool,
    int8: bool,
    memory_model: bool,
    memory_model_device_scope: bool,
    zero_initialize_workgroup_memory: bool,
    robust_image_access: bool,
    integer_dot_product: bool,
    robust_buffer_access2: bool,
    robust_image_access2: bool,
    cooperative_matrix: bool,
    executable_info: bool,
}

impl Gpu {
    /// Opens the device whose name contains `filter` (case-insensitive), else the first
    /// discrete GPU, integrated GPU, virtual GPU, CPU, in that order. The features enabled are
    /// those wgpu enables for the runtime's device (`options`: `KERNELS_*` switches).
    /// Without `statistics` (`--build-only`) the device needs no
    /// `VK_KHR_pipeline_executable_properties` and pipelines are built without capture.
    pub fn open(filter: Option<&str>, options: &kernels::GpuOptions, statistics: bool) -> Result<Gpu, OpenError> {
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            OpenError::NoDevice(format!(
                "no Vulkan loader ({e}): install libvulkan1 and a Vulkan driver (Mesa's lavapipe on a machine without a GPU)"
            ))
        })?;
        let version = unsafe { entry.try_enumerate_instance_version() }.ok().flatten().unwrap_or(vk::API_VERSION_1_0);
        let api = if version >= vk::API_VERSION_1_3 { vk::API_VERSION_1_3 } else { version };
        let app = vk::ApplicationInfo::default().application_name(c"pipeline-stats").api_version(api);
        let instance =
            unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) }
                .map_err(|e| OpenError::NoDevice(format!("no Vulkan instance: {e}")))?;
        match Self::open_on(entry.clone(), &instance, filter, options, statistics) {
            Ok(gpu) => Ok(gpu),
            Err(e) => {
                unsafe { instance.destroy_instance(None) };
                Err(e)
            }
        }
    }

    fn open_on(
        entry: ash::Entry,
        instance: &ash::Instance,
        filter: Option<&str>,
        options: &kernels::GpuOptions,
        statistics: bool,
    ) -> Result<Gpu, OpenError> {
        let physical =
            unsafe { instance.enumerate_physical_devices() }.map_err(vk_err("vkEnumeratePhysicalDevices"))?;
        let mut devices: Vec<(vk::PhysicalDevice, vk::PhysicalDeviceProperties)> =
            physical.into_iter().map(|p| (p, unsafe { instance.get_physical_device_properties(p) })).collect();
        let names: Vec<String> = devices.iter().map(|(_, p)| text(p.device_name_as_c_str())).collect();
        if let Some(f) = filter {
            let f = f.to_lowercase();
            devices.retain(|(_, p)| text(p.device_name_as_c_str()).to_lowercase().contains(&f));
        }
        devices.sort_by_key(|(_, p)| kind_of(p.device_type).1);
        let Some(&(pd, props)) = devices.first() else {
            let available = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            return Err(OpenError::NoDevice(match filter {
                Some(f) => format!("no Vulkan device's name contains `{f}`; available: {available}"),
                None => "no Vulkan device (install a driver; Mesa's lavapipe on a machine without a GPU)".to_string(),
            }));
        };
        let name = text(props.device_name_as_c_str());
        let api = (
            vk::api_version_major(props.api_version),
            vk::api_version_minor(props.api_version),
            vk::api_version_patch(props.api_version),
        );
        let mut driver_props = vk::PhysicalDeviceDriverProperties::default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut sizes = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        if api >= (1, 2, 0) {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver_props).push_next(&mut subgroup);
            if api >= (1, 3, 0) {
                p2 = p2.push_next(&mut sizes);
            }
            unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        }
        let driver =
            format!("{} {}", text(driver_props.driver_name_as_c_str()), text(driver_props.driver_info_as_c_str()))
                .trim()
                .to_string();
        let described = format!("`{name}` ({driver})");
        if api < (1, 3, 0) {
            return Err(OpenError::Unsupported(format!(
                "the device {described} has Vulkan {}.{}: pipeline-stats writes SPIR-V as wgpu does for a Vulkan 1.3 device and needs one",
                api.0, api.1
            )));
        }
        let extensions: Vec<String> = unsafe { instance.enumerate_device_extension_properties(pd) }
            .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?
            .iter()
            .map(|e| text(e.extension_name_as_c_str()))
            .collect();
        let has = |n: &CStr| extensions.iter().any(|e| e.as_str() == n.to_string_lossy());
        let executable_properties = has(khr::pipeline_executable_properties::NAME);
        if statistics && !executable_properties {
            return Err(OpenError::Unsupported(format!(
                "the device {described} does not implement VK_KHR_pipeline_executable_properties, so its driver \
                 cannot report pipeline statistics (NVIDIA's, AMD's and Intel's drivers do; --build-only builds the \
                 pipelines without them, --spirv-only writes the SPIR-V without a device)"
            )));
        }
        let robustness2 = has(ext::robustness2::NAME);
        let coop_extension = has(khr::cooperative_matrix::NAME);
        let support = Self::support(instance, pd, robustness2, coop_extension, executable_properties);
        if statistics && !support.executable_info {
            return Err(OpenError::Unsupported(format!(
                "the device {described} lists VK_KHR_pipeline_executable_properties but not its pipelineExecutableInfo feature"
            )));
        }

        // The configurations wgpu accepts (subgroup scope, sizes 8 or 16, A = B and C = result
        // types), then those WGSL can express (square, f16/f32), as the runtime plans them.
        let listed: Vec<Listed> = if coop_extension {
            let coop = khr::cooperative_matrix::Instance::new(&entry, instance);
            unsafe { coop.get_physical_device_cooperative_matrix_properties(pd) }
                .unwrap_or_default()
                .iter()
                .filter(|p| p.scope == vk::ScopeKHR::SUBGROUP)
                .map(|p| Listed {
                    mnk: [p.m_size, p.n_size, p.k_size],
                    types: [p.a_type, p.b_type, p.c_type, p.result_type],
                })
                .collect()
        } else {
            Vec::new()
        };
        let coop_listed: Vec<String> = listed
            .iter()
            .map(|p| {
                let [m, n, k] = p.mnk;
                let [a, b, c, r] = p.types;
                format!("{m}×{n}×{k} {a:?}·{b:?}+{c:?}→{r:?}")
            })
            .collect();
        let accepted: Vec<&Listed> = listed
            .iter()
            .filter(|p| p.mnk.iter().all(|s| matches!(s, 8 | 16)))
            .filter(|p| p.types[0] == p.types[1] && p.types[2] == p.types[3])
            .collect();
        let expressible: Vec<CoopConfig> = accepted
            .iter()
            .filter(|p| p.mnk[0] == p.mnk[1] && p.mnk[1] == p.mnk[2])
            .filter_map(|p| {
                let [m, n, k] = p.mnk;
                Some(CoopConfig { m, n, k, ab: coop_scalar(p.types[0])?, cr: coop_scalar(p.types[2])? })
            })
            .collect();

        // wgpu's features, then the runtime's choice among them.
        let has_f16 = support.float16 && support.storage_buffer_16 && support.uniform_and_storage_buffer_16;
        let ops = vk::SubgroupFeatureFlags::BASIC
            | vk::SubgroupFeatureFlags::VOTE
            | vk::SubgroupFeatureFlags::ARITHMETIC
            | vk::SubgroupFeatureFlags::BALLOT
            | vk::SubgroupFeatureFlags::SHUFFLE
            | vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE
            | vk::SubgroupFeatureFlags::QUAD;
        let has_subgroups = subgroup.supported_operations.contains(ops)
            && subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE | vk::ShaderStageFlags::FRAGMENT);
        let has_coop = !accepted.is_empty()
            && support.cooperative_matrix
            && support.memory_model
            && support.memory_model_device_scope;
        let f16 = has_f16 && !options.without.contains(kernels::wgpu::Features::SHADER_F16);
        let subgroups = has_subgroups && !options.without.contains(kernels::wgpu::Features::SUBGROUP);
        let usable: Vec<CoopConfig> = expressible
            .iter()
            .filter(|c| f16 || (c.ab != CoopScalar::F16 && c.cr != CoopScalar::F16))
            .copied()
            .collect();
        let coop_off = if expressible.is_empty() {
            Some(if coop_listed.is_empty() {
                "the device lists no cooperative-matrix configuration".to_string()
            } else {
                "none of the device's configurations is expressible in WGSL".to_string()
            })
        } else if !options.cooperative_matrix {
            Some("turned off by KERNELS_COOPERATIVE_MATRIX=0".to_string())
        } else if !has_coop {
            Some("the device lacks the Vulkan memory model with device scope".to_string())
        } else if usable.is_empty() {
            Some("they need SHADER_F16, which is off".to_string())
        } else {
            None
        };
        let coop = coop_off.is_none();

        let family = unsafe { instance.get_physical_device_queue_family_properties(pd) }
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| OpenError::Unsupported(format!("the device {described} has no compute queue")))?;
        let priorities = [1.0f32];
        let queues =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(family as u32).queue_priorities(&priorities)];
        let mut names: Vec<*const std::ffi::c_char> = Vec::new();
        if statistics {
            names.push(khr::pipeline_executable_properties::NAME.as_ptr());
        }
        if robustness2 {
            names.push(ext::robustness2::NAME.as_ptr());
        }
        if coop {
            names.push(khr::cooperative_matrix::NAME.as_ptr());
        }
        // The features wgpu-hal enables (`PhysicalDeviceFeatures::from_extensions_and_requested_features`)
        // for the runtime's request: those that change how the driver compiles a kernel.
        let core =
            vk::PhysicalDeviceFeatures::default().robust_buffer_access(support.core.robust_buffer_access == vk::TRUE);
        let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default()
            .storage_buffer16_bit_access(true)
            .uniform_and_storage_buffer16_bit_access(true)
            .storage_input_output16(support.storage_input_output_16);
        let mut float16_int8 =
            vk::PhysicalDeviceShaderFloat16Int8Features::default().shader_float16(f16).shader_int8(support.int8);
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default()
            .vulkan_memory_model(coop)
            .vulkan_memory_model_device_scope(coop);
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlFeatures::default().subgroup_size_control(true);
        let mut zero = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default()
            .shader_zero_initialize_workgroup_memory(support.zero_initialize_workgroup_memory);
        let robust_image = if robustness2 { support.robust_image_access2 } else { support.robust_image_access };
        let mut image_robustness =
            vk::PhysicalDeviceImageRobustnessFeatures::default().robust_image_access(robust_image);
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(support.integer_dot_product);
        let mut robust2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default()
            .robust_buffer_access2(support.robust_buffer_access2)
            .robust_image_access2(support.robust_image_access2);
        let mut coop_features = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut exec =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&names)
            .enabled_features(&core)
            .push_next(&mut memory_model)
            .push_next(&mut size_control)
            .push_next(&mut zero)
            .push_next(&mut image_robustness)
            .push_next(&mut dot);
        if statistics {
            create = create.push_next(&mut exec);
        }
        if f16 {
            create = create.push_next(&mut storage16);
        }
        if f16 || support.int8 {
            create = create.push_next(&mut float16_int8);
        }
        if robustness2 {
            create = create.push_next(&mut robust2);
        }
        if coop {
            create = create.push_next(&mut coop_features);
        }
        let device = unsafe { instance.create_device(pd, &create, None) }.map_err(vk_err("vkCreateDevice"))?;
        let executables = statistics.then(|| khr::pipeline_executable_properties::Device::new(instance, &device));
        let info = DeviceInfo {
            name,
            driver,
            api,
            vendor_id: props.vendor_id,
            device_id: props.device_id,
            kind: kind_of(props.device_type).0,
            subgroup_size: subgroup.subgroup_size,
            subgroup_sizes: (sizes.min_subgroup_size, sizes.max_subgroup_size),
            coop_listed,
        };
        let target = VulkanTarget {
            api_version: (api.0, api.1),
            subgroups,
            f16,
            coop,
            integer_dot_product: support.integer_dot_product,
            int8: support.int8,
            robust_buffer_access2: robustness2 && support.robust_buffer_access2,
            robust_image_access: robust_image,
            zero_initialize_workgroup_memory: support.zero_initialize_workgroup_memory,
            storage_input_output_16: support.storage_input_output_16,
            qualcomm: props.vendor_id == 0x5143,
            // The runtime does not ask for 64-bit types unless a kernel needs them; the
            // library's kernels do not.
            int64: false,
            float64: false,
            int64_atomics: false,
            // Set per kernel: an `@unchecked` one's SPIR-V is written without them.
            runtime_checks: true,
        };
        let offer = Offer {
            subgroups: options.subgroups && subgroups,
            f16,
            coop: if coop { usable } else { Vec::new() },
            coop_off,
        };
        Ok(Gpu { _entry: entry, instance: instance.clone(), device, executables, info, target, offer })
    }

    fn support(
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        robustness2: bool,
        coop: bool,
        exec_ext: bool,
    ) -> Support {
        let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default();
        let mut float16_int8 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
        let mut zero = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
        let mut image = vk::PhysicalDeviceImageRobustnessFeatures::default();
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut robust2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
        let mut coop_features = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let core = {
            let mut f2 = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut storage16)
                .push_next(&mut float16_int8)
                .push_next(&mut memory_model)
                .push_next(&mut zero)
                .push_next(&mut image)
                .push_next(&mut dot);
            if exec_ext {
                f2 = f2.push_next(&mut exec);
            }
            if robustness2 {
                f2 = f2.push_next(&mut robust2);
            }
            if coop {
                f2 = f2.push_next(&mut coop_features);
            }
            unsafe { instance.get_physical_device_features2(pd, &mut f2) };
            f2.features
        };
        let on = |b: vk::Bool32| b == vk::TRUE;
        Support {
            core,
            storage_buffer_16: on(storage16.storage_buffer16_bit_access),
            uniform_and_storage_buffer_16: on(storage16.uniform_and_storage_buffer16_bit_access),
            storage_input_output_16: on(storage16.storage_input_output16),
            float16: on(float16_int8.shader_float16),
            int8: on(float16_int8.shader_int8),
            memory_model: on(memory_model.vulkan_memory_model),
            memory_model_device_scope: on(memory_model.vulkan_memory_model_device_scope),
            zero_initialize_workgroup_memory: on(zero.shader_zero_initialize_workgroup_memory),
            robust_image_access: on(image.robust_image_access),
            integer_dot_product: on(dot.shader_integer_dot_product),
            robust_buffer_access2: robustness2 && on(robust2.robust_buffer_access2),
            robust_image_access2: robustness2 && on(robust2.robust_image_access2),
            cooperative_matrix: coop && on(coop_features.cooperative_matrix),
            executable_info: on(exec.pipeline_executable_info),
        }
    }

    /// Builds the compute pipeline of `spirv`'s entry point `entry` as wgpu-hal does (its
    /// descriptor layout, `ALLOW_VARYING_SUBGROUP_SIZE` where subgroups are enabled, no
    /// pipeline cache), capturing statistics and internal representations, and reads them
    /// (none with `--build-only`).
    pub fn build(&self, spirv: &Spirv, entry: &str, dynamic_uniforms: bool) -> Result<Built, String> {
        let d = &self.device;
        let mut sets: Vec<vk::DescriptorSetLayout> = Vec::new();
        let mut layout = vk::PipelineLayout::null();
        let mut module = vk::ShaderModule::null();
        let result = (|| {
            let groups = spirv.bindings.iter().map(|b| b.set + 1).max().unwrap_or(0);
            for set in 0..groups {
                let bindings: Vec<vk::DescriptorSetLayoutBinding> = spirv
                    .bindings
                    .iter()
                    .filter(|b| b.set == set)
                    .map(|b| {
                        vk::DescriptorSetLayoutBinding::default()
                            .binding(b.binding)
                            .descriptor_type(match b.kind {
                                BindingKind::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
                                BindingKind::Uniform if dynamic_uniforms => vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC,
                                BindingKind::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
                            })
                            .descriptor_count(1)
                            .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    })
                    .collect();
                let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
                sets.push(
                    unsafe { d.create_descriptor_set_layout(&info, None) }
                        .map_err(|e| format!("vkCreateDescriptorSetLayout: {e}"))?,
                );
            }
            let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
            layout =
                unsafe { d.create_pipeline_layout(&info, None) }.map_err(|e| format!("vkCreatePipelineLayout: {e}"))?;
            let info = vk::ShaderModuleCreateInfo::default().code(&spirv.words);
            module =
                unsafe { d.create_shader_module(&info, None) }.map_err(|e| format!("vkCreateShaderModule: {e}"))?;
            let name = CString::new(entry).map_err(|_| format!("entry point `{entry}` holds a NUL"))?;
            let flags = if self.target.subgroups {
                vk::PipelineShaderStageCreateFlags::ALLOW_VARYING_SUBGROUP_SIZE
            } else {
                vk::PipelineShaderStageCreateFlags::empty()
            };
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .flags(flags)
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(&name);
            let capture = if self.executables.is_some() {
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
            } else {
                vk::PipelineCreateFlags::empty()
            };
            let info = vk::ComputePipelineCreateInfo::default().flags(capture).stage(stage).layout(layout);
            let start = Instant::now();
            let pipeline = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) }
                .map_err(|(_, e)| format!("vkCreateComputePipelines: {e}"))?[0];
            let build_ms = start.elapsed().as_secs_f64() * 1e3;
            let executables = self.read(pipeline);
            unsafe { d.destroy_pipeline(pipeline, None) };
            Ok(Built { captured: self.executables.is_some(), build_ms, executables: executables? })
        })();
        unsafe {
            if module != vk::ShaderModule::null() {
                d.destroy_shader_module(module, None);
            }
            if layout != vk::PipelineLayout::null() {
                d.destroy_pipeline_layout(layout, None);
            }
            for s in sets {
                d.destroy_descriptor_set_layout(s, None);
            }
        }
        result
    }

    fn read(&self, pipeline: vk::Pipeline) -> Result<Vec<Executable>, String> {
        let Some(x) = &self.executables else { return Ok(Vec::new()) };
        let props = unsafe { x.get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline)) }
            .map_err(|e| format!("vkGetPipelineExecutablePropertiesKHR: {e}"))?;
        let mut out = Vec::new();
        for (i, p) in props.iter().enumerate() {
            let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i as u32);
            let statistics = unsafe { x.get_pipeline_executable_statistics(&info) }
                .map_err(|e| format!("vkGetPipelineExecutableStatisticsKHR: {e}"))?
                .iter()
                .map(|s| Statistic {
                    name: text(s.name_as_c_str()),
                    description: text(s.description_as_c_str()),
                    value: unsafe {
                        match s.format {
                            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => Value::Bool(s.value.b32 == vk::TRUE),
                            vk::PipelineExecutableStatisticFormatKHR::INT64 => Value::I64(s.value.i64),
                            vk::PipelineExecutableStatisticFormatKHR::UINT64 => Value::U64(s.value.u64),
                            _ => Value::F64(s.value.f64),
                        }
                    },
                })
                .collect();
            let mut stages = Vec::new();
            for (flag, name) in [
                (vk::ShaderStageFlags::COMPUTE, "compute"),
                (vk::ShaderStageFlags::VERTEX, "vertex"),
                (vk::ShaderStageFlags::FRAGMENT, "fragment"),
            ] {
                if p.stages.contains(flag) {
                    stages.push(name);
                }
            }
            out.push(Executable {
                name: text(p.name_as_c_str()),
                description: text(p.description_as_c_str()),
                stages,
                subgroup_size: p.subgroup_size,
                statistics,
                representations: self.representations(x, &info)?,
            });
        }
        Ok(out)
    }

    /// The internal representations: counted, sized (`pData` null), then filled.
    fn representations(
        &self,
        x: &khr::pipeline_executable_properties::Device,
        info: &vk::PipelineExecutableInfoKHR,
    ) -> Result<Vec<Representation>, String> {
        let fp = x.fp().get_pipeline_executable_internal_representations_khr;
        let handle = self.device.handle();
        let call = |count: &mut u32, data: *mut vk::PipelineExecutableInternalRepresentationKHR| {
            let r = unsafe { fp(handle, info, count, data) };
            match r {
                vk::Result::SUCCESS | vk::Result::INCOMPLETE => Ok(()),
                e => Err(format!("vkGetPipelineExecutableInternalRepresentationsKHR: {e}")),
            }
        };
        let mut count = 0u32;
        call(&mut count, std::ptr::null_mut())?;
        let mut reps = vec![vk::PipelineExecutableInternalRepresentationKHR::default(); count as usize];
        call(&mut count, reps.as_mut_ptr())?;
        reps.truncate(count as usize);
        let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
        for (r, b) in reps.iter_mut().zip(buffers.iter_mut()) {
            r.p_data = b.as_mut_ptr().cast();
        }
        call(&mut count, reps.as_mut_ptr())?;
        Ok(reps
            .iter()
            .zip(buffers)
            .map(|(r, mut data)| {
                data.truncate(r.data_size);
                // Text comes NUL-terminated.
                let is_text = r.is_text == vk::TRUE;
                if is_text {
                    while data.last() == Some(&0) {
                        data.pop();
                    }
                }
                Representation {
                    name: text(r.name_as_c_str()),
                    description: text(r.description_as_c_str()),
                    text: is_text,
                    data,
                }
            })
            .collect())
    }
}
