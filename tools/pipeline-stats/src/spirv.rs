//! Stage 3: the SPIR-V wgpu 30 gives the driver for one variant: parsed and validated as
//! wgpu-core does, then [`kernels_codegen::validate::write_spirv`] (wgpu-hal's Vulkan options,
//! per entry point, overrides substituted), plus the descriptor layout the pipeline needs.

use crate::select::Form;
use kernels_codegen::validate::{self, VulkanTarget};

/// How a binding is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    Storage { read_only: bool },
    Uniform,
}

/// One binding of the pipeline layout, as wgpu-hal lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The descriptor set (`@group`).
    pub set: u32,
    /// The Vulkan binding: the position among the group's bindings in increasing order.
    pub binding: u32,
    /// The WGSL `@binding`.
    pub wgsl_binding: u32,
    pub kind: BindingKind,
}

/// A variant's SPIR-V and layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spirv {
    pub words: Vec<u32>,
    pub bindings: Vec<Binding>,
}

impl Spirv {
    /// The SPIR-V version, (major, minor), from the header.
    pub fn version(&self) -> (u32, u32) {
        self.words.get(1).map_or((0, 0), |v| ((v >> 16) & 0xff, (v >> 8) & 0xff))
    }

    /// The words as little-endian bytes (a `.spv` file).
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[cfg(test)]
    /// Whether the module declares the Vulkan memory model (`OpMemoryModel Logical Vulkan`),
    /// which naga uses for modules that hold cooperative matrices.
    pub fn vulkan_memory_model(&self) -> bool {
        self.instructions().any(|(op, operands)| op == 14 && operands.get(1) == Some(&3))
    }

    #[cfg(test)]
    /// The capabilities it declares (`OpCapability` operands).
    pub fn capabilities(&self) -> Vec<u32> {
        self.instructions().filter(|(op, _)| *op == 17).filter_map(|(_, o)| o.first().copied()).collect()
    }

    #[cfg(test)]
    /// (opcode, operands) of each instruction after the 5-word header.
    fn instructions(&self) -> impl Iterator<Item = (u32, &[u32])> {
        let mut at = 5;
        std::iter::from_fn(move || {
            let head = *self.words.get(at)?;
            let count = (head >> 16) as usize;
            if count == 0 || at + count > self.words.len() {
                return None;
            }
            let item = (head & 0xffff, &self.words[at + 1..at + count]);
            at += count;
            Some(item)
        })
    }
}

/// The naga capabilities wgpu-core validates with on a device with `target`'s features.
fn capabilities(target: &VulkanTarget) -> naga::valid::Capabilities {
    use naga::valid::Capabilities as C;
    let mut caps = validate::CAPABILITIES;
    for (on, cap) in
        [(target.subgroups, C::SUBGROUP), (target.f16, C::SHADER_FLOAT16), (target.coop, C::COOPERATIVE_MATRIX)]
    {
        if !on {
            caps -= cap;
        }
    }
    caps
}

/// The SPIR-V of `form`'s entry point `entry` with `constants` (keys as wgpu takes them) for a
/// device with `target`'s features. Errors say which step failed, as wgpu would report it.
pub fn write(form: &Form, entry: &str, constants: &[(String, f64)], target: &VulkanTarget) -> Result<Spirv, String> {
    let module =
        naga::front::wgsl::parse_str(&form.wgsl).map_err(|e| format!("naga's WGSL parser: {}", e.message()))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities(target))
        .validate(&module)
        .map_err(|e| format!("naga's validator (with this device's features): {}", e.as_inner()))?;
    let mut bindings = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = var.binding else { continue };
        let kind = match var.space {
            naga::AddressSpace::Storage { access } => {
                BindingKind::Storage { read_only: !access.contains(naga::StorageAccess::STORE) }
            }
            naga::AddressSpace::Uniform => BindingKind::Uniform,
            _ => {
                return Err(format!(
                    "binding @group({}) @binding({}) is not a buffer: only storage and uniform buffers are supported",
                    rb.group, rb.binding
                ));
            }
        };
        bindings.push((rb, kind));
    }
    let map = validate::binding_map(&module);
    let mut bindings: Vec<Binding> = bindings
        .into_iter()
        .map(|(rb, kind)| Binding { set: rb.group, binding: map[&rb].binding, wgsl_binding: rb.binding, kind })
        .collect();
    bindings.sort_by_key(|b| (b.set, b.binding));
    let mut table = naga::back::PipelineConstants::default();
    for (key, value) in constants {
        table.insert(key.clone(), *value);
    }
    let written = std::panic::catch_unwind(|| validate::write_spirv(&module, &info, entry, &table, target));
    let words = match written {
        Ok(Ok(words)) => words,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(format!("naga's SPIR-V writer panicked: {text}"));
        }
    };
    Ok(Spirv { words, bindings })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::Kernel;

    /// The H200 as wgpu opens it for the runtime (driver 580: Vulkan 1.4, robustness2, every
    /// feature the runtime asks for).
    fn h200() -> VulkanTarget {
        VulkanTarget {
            api_version: (1, 4),
            subgroups: true,
            f16: true,
            coop: true,
            integer_dot_product: true,
            int8: true,
            robust_buffer_access2: true,
            robust_image_access: true,
            zero_initialize_workgroup_memory: true,
            storage_input_output_16: true,
            qualcomm: false,
            int64: false,
            float64: false,
            int64_atomics: false,
            runtime_checks: true,
        }
    }

    /// A Vulkan 1.1 device without robustness2 or native zero-initialisation: naga's bounds
    /// checks and zeroing code go into the SPIR-V.
    fn old() -> VulkanTarget {
        VulkanTarget {
            api_version: (1, 1),
            coop: false,
            robust_buffer_access2: false,
            zero_initialize_workgroup_memory: false,
            ..h200()
        }
    }

    const COOPERATIVE_MATRIX_KHR: u32 = 6022;
    const FLOAT16: u32 = 9;
    const GROUP_NON_UNIFORM: u32 = 61;

    /// Every variant of every library kernel, with its overrides set where it has any (a
    /// product's shape, the split flags), becomes SPIR-V for the H200 and for an older device;
    /// the header, memory model and capabilities say what the variant needs.
    #[test]
    fn every_library_variant_writes_spirv() {
        let mut variants = 0;
        let mut coop = 0;
        for kernel in crate::select::library(&[]) {
            let shape: Vec<(String, String)> = ["M_C=8192", "N_C=768", "K_C=3072", "SPLIT=false", "ACC=true"]
                .iter()
                .map(|a| a.split_once('=').map(|(n, v)| (n.to_string(), v.to_string())).unwrap())
                .collect();
            let sets = [kernel.constants(&[], false).unwrap(), kernel.constants(&shape, false).unwrap()];
            for form in &kernel.variants {
                variants += 1;
                for constants in &sets {
                    let s = write(form, &kernel.entry, constants, &h200())
                        .unwrap_or_else(|e| panic!("{} variant {}: {e}", kernel.name, form.index));
                    assert_eq!(s.words[0], 0x0723_0203, "{}: SPIR-V magic", kernel.name);
                    assert_eq!(s.version(), (1, 6), "{}", kernel.name);
                    let caps = s.capabilities();
                    assert_eq!(s.vulkan_memory_model(), form.coop, "{} variant {}", kernel.name, form.index);
                    assert_eq!(caps.contains(&COOPERATIVE_MATRIX_KHR), form.coop, "{}", kernel.name);
                    assert_eq!(caps.contains(&FLOAT16), form.f16, "{} variant {}", kernel.name, form.index);
                    if form.subgroups {
                        // GroupNonUniform and its Vote … Quad capabilities.
                        let subgroup_ops = GROUP_NON_UNIFORM..=GROUP_NON_UNIFORM + 7;
                        assert!(
                            caps.iter().any(|c| subgroup_ops.contains(c)),
                            "{} variant {}",
                            kernel.name,
                            form.index
                        );
                    }
                    // Dense Vulkan bindings per set, in WGSL binding order.
                    for (i, b) in s.bindings.iter().filter(|b| b.set == 0).enumerate() {
                        assert_eq!(b.binding, i as u32, "{}", kernel.name);
                    }
                }
                if form.coop {
                    coop += 1;
                } else {
                    let s = write(form, &kernel.entry, &sets[0], &old()).unwrap();
                    assert_eq!(s.version(), (1, 3), "{}", kernel.name);
                }
            }
        }
        assert!(variants > 100 && coop > 10, "{variants} variants, {coop} on tensor cores");
    }

    fn test_kernel(body: &str) -> Kernel {
        Kernel::from_file("t.wgsl", body.to_string(), "main").unwrap()
    }

    #[test]
    fn overrides_are_compiled_in() {
        let k = test_kernel(
            "override N: u32 = 0u;\n\
             @group(0) @binding(3) var<storage, read_write> y: array<u32>;\n\
             @group(0) @binding(1) var<storage, read> x: array<u32>;\n\
             @group(0) @binding(7) var<uniform> p: vec4<u32>;\n\
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n\
               y[g.x] = x[g.x] * select(p.x, N, N != 0u);\n}\n",
        );
        let form = &k.variants[0];
        let plain = write(form, "main", &[], &h200()).unwrap();
        let four = write(form, "main", &[("N".into(), 4096.0)], &h200()).unwrap();
        assert_ne!(plain.words, four.words, "the override value must reach the SPIR-V");
        // naga writes no specialization constants: the value is a plain constant.
        let spec_ops = [48u32, 49, 50, 51, 52];
        assert!(four.instructions().all(|(op, _)| !spec_ops.contains(&op)));
        assert!(four.instructions().any(|(op, o)| op == 43 && o.get(2) == Some(&4096)), "OpConstant 4096");
        assert_eq!(
            four.bindings,
            vec![
                Binding { set: 0, binding: 0, wgsl_binding: 1, kind: BindingKind::Storage { read_only: true } },
                Binding { set: 0, binding: 1, wgsl_binding: 3, kind: BindingKind::Storage { read_only: false } },
                Binding { set: 0, binding: 2, wgsl_binding: 7, kind: BindingKind::Uniform },
            ]
        );
        // The descriptor decorations are the dense numbers (OpDecorate id Binding n).
        let decorated: Vec<u32> =
            four.instructions().filter(|(op, o)| *op == 71 && o.get(1) == Some(&33)).map(|(_, o)| o[2]).collect();
        let mut sorted = decorated.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2]);
        let e = write(form, "main", &[("N".into(), -1.0)], &h200()).unwrap_err();
        assert!(e.contains("override values rejected"), "{e}");
    }

    #[test]
    fn the_device_shapes_the_spirv() {
        // Without robustness2 naga clamps buffer indices itself; without native zeroing it
        // writes the zeroing loop: both make the module larger.
        let k = test_kernel(
            "var<workgroup> t: array<f32, 256>;\n\
             @group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
             @compute @workgroup_size(64) fn main(@builtin(local_invocation_index) i: u32) {\n\
               t[i] = y[i * 3u];\n workgroupBarrier();\n y[i] = t[255u - i];\n}\n",
        );
        let new = write(&k.variants[0], "main", &[], &h200()).unwrap();
        let old = write(&k.variants[0], "main", &[], &old()).unwrap();
        assert_eq!((new.version(), old.version()), ((1, 6), (1, 3)));
        assert!(old.words.len() > new.words.len() + 10, "{} vs {} words", old.words.len(), new.words.len());
        let rejected = test_kernel(
            "enable f16;\n@group(0) @binding(0) var<storage, read_write> y: array<f16>;\n\
             @compute @workgroup_size(1) fn main() { y[0] = 1.0h; }\n",
        );
        let e = write(&rejected.variants[0], "main", &[], &VulkanTarget { f16: false, ..h200() }).unwrap_err();
        assert!(e.contains("validator"), "{e}");
        let texture = test_kernel(
            "@group(0) @binding(0) var t: texture_2d<f32>;\n@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n\
             @compute @workgroup_size(1) fn main() { y[0] = textureLoad(t, vec2<i32>(0), 0).x; }\n",
        );
        assert!(write(&texture.variants[0], "main", &[], &h200()).unwrap_err().contains("not a buffer"));
    }
}
