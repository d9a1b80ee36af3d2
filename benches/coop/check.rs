//! What the build machine can check of a generated kernel without tensor cores: naga parses
//! it, validates it with the capabilities the H200 run will have, resolves its overrides and
//! writes SPIR-V — with the options wgpu's Vulkan backend uses, checked and unchecked — under
//! `catch_unwind`, since naga 30.0.2's SPIR-V writer panics on code its validator accepts.
#![allow(dead_code)]

use super::kernel::{Dims, Kernel, Shape};
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// naga capabilities of the sweep's kernels.
pub fn capabilities() -> Capabilities {
    // quantizeToF16 needs SHADER_FLOAT16_IN_FLOAT32 (wgpu grants it from the downlevel flag
    // SHADER_F16_IN_F32, present on Vulkan).
    Capabilities::COOPERATIVE_MATRIX
        | Capabilities::SHADER_FLOAT16
        | Capabilities::SHADER_FLOAT16_IN_FLOAT32
        | Capabilities::SUBGROUP
}

/// Parses and validates `src`.
pub fn validate(src: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| format!("parse: {}", e.emit_to_string(src)))?;
    let info = Validator::new(ValidationFlags::all(), capabilities())
        .validate(&module)
        .map_err(|e| format!("validation: {}", e.emit_to_string(src)))?;
    Ok((module, info))
}

/// SPIR-V options as wgpu-hal's Vulkan backend sets them on a Vulkan 1.3 device with
/// cooperative matrices, with wgpu's runtime checks on (`checked`) or off.
pub fn spv_options(checked: bool) -> naga::back::spv::Options<'static> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let policy = if checked { BoundsCheckPolicy::Restrict } else { BoundsCheckPolicy::Unchecked };
    spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::empty(),
        capabilities: None,
        bounds_check_policies: BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: if checked {
            spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
        } else {
            spv::ZeroInitializeWorkgroupMemoryMode::None
        },
        force_loop_bounding: checked,
        use_storage_input_output_16: true,
        ..spv::Options::default()
    }
}

/// Resolves overrides and writes SPIR-V for `entry`, catching a writer panic. Returns words.
pub fn spirv(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    constants: &[(&str, f64)],
    checked: bool,
) -> Result<usize, String> {
    let mut pc = naga::back::PipelineConstants::default();
    for (n, v) in constants {
        pc.insert((*n).to_string(), *v);
    }
    let (module, info) =
        naga::back::pipeline_constants::process_overrides(module, info, Some((naga::ShaderStage::Compute, entry)), &pc)
            .map_err(|e| format!("overrides: {e}"))?;
    let options = spv_options(checked);
    let pipeline =
        naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: entry.to_string() };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
    }));
    match result {
        Ok(Ok(words)) => Ok(words.len()),
        Ok(Err(e)) => Err(format!("SPIR-V writer: {e}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".into());
            Err(format!("naga's SPIR-V writer panicked: {msg}"))
        }
    }
}

/// Full check of one kernel for one shape: WGSL, validation, SPIR-V checked and unchecked.
pub fn check_kernel(k: &Kernel, shape: &Shape) -> Result<(), String> {
    let src = k.wgsl(Some(shape))?;
    let (module, info) = validate(&src)?;
    let constants = k.overrides(shape);
    for checked in [false, true] {
        spirv(&module, &info, "gemm", &constants, checked)?;
    }
    if k.d.dims == Dims::Override {
        // The module must name every override the host sets, and nothing else.
        let names: Vec<&str> = module.overrides.iter().filter_map(|(_, o)| o.name.as_deref()).collect();
        for (n, _) in &constants {
            if !names.contains(n) {
                return Err(format!("override {n} missing"));
            }
        }
    }
    Ok(())
}

/// Checks the helper kernels (split-K reduction, hi/lo split, fill).
pub fn check_helpers() -> Result<usize, String> {
    let mut n = 0;
    for ks in [2u32, 3, 4, 8] {
        for acc in [false, true] {
            let src = super::kernel::reduce_wgsl(ks, acc);
            let (m, i) = validate(&src)?;
            spirv(&m, &i, "reduce", &[("RED_N4", 1024.0), ("RED_LDC", 64.0), ("RED_NCOL", 60.0)], true)?;
            n += 1;
        }
    }
    for scale in [1.0f32, 2048.0] {
        let src = super::kernel::split_wgsl(scale);
        let (m, i) = validate(&src)?;
        spirv(&m, &i, "split", &[("SPLIT_N4", 1024.0)], true)?;
        n += 1;
    }
    let src = super::kernel::fill_wgsl();
    let (m, i) = validate(&src)?;
    spirv(&m, &i, "fill", &[("FILL_N4", 1024.0), ("FILL_BITS", 2143289344.0)], true)?;
    Ok(n + 1)
}
