//! Stage 2: what to build. A library kernel (its `KernelDef`: variants, overrides) or a WGSL
//! file's entry point, the override values checked against the declared types, and the variant
//! a device runs, chosen as the runtime chooses it.

use kernels::{CoopConfig, KernelDef};
use std::borrow::Cow;

/// An `override` a kernel declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// The WGSL name.
    pub name: String,
    /// The key wgpu takes: the `@id` if given, else the name.
    pub key: String,
    /// `bool`, `u32`, `i32`, `f32` or `f16`.
    pub ty: String,
    pub has_default: bool,
}

/// One compiled form of a kernel, with what it needs from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Form {
    /// Its index among the kernel's variants (0 = preferred).
    pub index: usize,
    /// The source wgpu is given, `enable` lines included.
    pub wgsl: Cow<'static, str>,
    pub subgroups: bool,
    pub f16: bool,
    /// Uses cooperative matrices.
    pub coop: bool,
    /// The configurations it multiplies with (a WGSL file's are not worked out: the driver
    /// rejects one it does not offer).
    pub coop_configs: Vec<CoopConfig>,
}

impl Form {
    /// A short name: `coop`, `subgroups` or `portable` (the form's fastest feature).
    pub fn kind(&self) -> &'static str {
        if self.coop {
            "coop"
        } else if self.subgroups {
            "subgroups"
        } else {
            "portable"
        }
    }

    /// What it needs, for messages and JSON: `coop 16×16×16 (A/B f16, C f32), subgroups, f16`.
    pub fn needs(&self) -> String {
        let mut parts = Vec::new();
        if self.coop {
            let configs: Vec<String> = self.coop_configs.iter().map(ToString::to_string).collect();
            parts.push(if configs.is_empty() { "coop".to_string() } else { format!("coop {}", configs.join(", ")) });
        }
        if self.subgroups {
            parts.push("subgroups".into());
        }
        if self.f16 {
            parts.push("f16".into());
        }
        if parts.is_empty() { "nothing optional".into() } else { parts.join(", ") }
    }
}

/// A kernel to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// `module::kernel`, or `file.wgsl:entry`.
    pub name: String,
    /// The entry point.
    pub entry: String,
    /// The file, as shown in messages.
    pub file: String,
    pub overrides: Vec<Override>,
    /// Variants, preferred first.
    pub variants: Vec<Form>,
    /// Uniform bindings take dynamic offsets (the runtime binds uniforms so); a WGSL file's
    /// uniforms are plain.
    pub dynamic_uniforms: bool,
    /// Marked `// @unchecked` (a library kernel's `KernelDef::unchecked`; a WGSL file's entry
    /// point is never): the runtime creates its module without wgpu's runtime checks.
    pub unchecked: bool,
}

impl Kernel {
    /// A library kernel.
    pub fn from_def(def: &'static KernelDef) -> Kernel {
        Kernel {
            name: def.qualified_name(),
            entry: def.name.to_string(),
            file: def.file.to_string(),
            overrides: def
                .overrides
                .iter()
                .map(|o| Override {
                    name: o.name.to_string(),
                    key: o.key.to_string(),
                    ty: o.ty.to_string(),
                    has_default: o.has_default,
                })
                .collect(),
            variants: def
                .variants
                .iter()
                .enumerate()
                .map(|(index, v)| Form {
                    index,
                    wgsl: Cow::Borrowed(v.wgsl),
                    subgroups: v.subgroups,
                    f16: v.f16,
                    coop: !v.coop.is_empty(),
                    coop_configs: v.coop.to_vec(),
                })
                .collect(),
            dynamic_uniforms: true,
            unchecked: def.unchecked,
        }
    }

    /// A WGSL file's compute entry point `entry`, its needs found as the build-time check finds
    /// them: what validation without a capability rejects.
    pub fn from_file(file: &str, source: String, entry: &str) -> Result<Kernel, String> {
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let module = naga::front::wgsl::parse_str(&source).map_err(|e| e.emit_to_string_with_path(&source, file))?;
        let all = kernels_codegen::validate::CAPABILITIES;
        Validator::new(ValidationFlags::all(), all)
            .validate(&module)
            .map_err(|e| e.emit_to_string_with_path(&source, file))?;
        let computes: Vec<&str> = module
            .entry_points
            .iter()
            .filter(|ep| ep.stage == naga::ShaderStage::Compute)
            .map(|ep| ep.name.as_str())
            .collect();
        if !computes.contains(&entry) {
            return Err(format!(
                "{file} has no compute entry point `{entry}`; it has: {}",
                if computes.is_empty() { "none".to_string() } else { computes.join(", ") }
            ));
        }
        let without = |cap: Capabilities| Validator::new(ValidationFlags::all(), all - cap).validate(&module).is_err();
        let form = Form {
            index: 0,
            subgroups: without(Capabilities::SUBGROUP),
            f16: without(Capabilities::SHADER_FLOAT16),
            coop: without(Capabilities::COOPERATIVE_MATRIX),
            coop_configs: Vec::new(),
            wgsl: Cow::Owned(source),
        };
        let overrides = module
            .overrides
            .iter()
            .filter_map(|(_, o)| {
                let name = o.name.clone()?;
                let ty = match module.types[o.ty].inner {
                    naga::TypeInner::Scalar(s) => match (s.kind, s.width) {
                        (naga::ScalarKind::Bool, _) => "bool",
                        (naga::ScalarKind::Uint, 4) => "u32",
                        (naga::ScalarKind::Sint, 4) => "i32",
                        (naga::ScalarKind::Float, 4) => "f32",
                        (naga::ScalarKind::Float, 2) => "f16",
                        _ => "f32",
                    },
                    _ => "f32",
                };
                Some(Override {
                    key: o.id.map(|id| id.to_string()).unwrap_or_else(|| name.clone()),
                    name,
                    ty: ty.to_string(),
                    has_default: o.init.is_some(),
                })
            })
            .collect();
        Ok(Kernel {
            name: format!("{file}:{entry}"),
            entry: entry.to_string(),
            file: file.to_string(),
            overrides,
            variants: vec![form],
            dynamic_uniforms: false,
            unchecked: false,
        })
    }

    /// The value wgpu is given for `text` as an override of type `ty`.
    fn value(o: &Override, text: &str) -> Result<f64, String> {
        let wrong = |what: &str| format!("override `{}` is {}: `{text}` is not {what}", o.name, o.ty);
        match o.ty.as_str() {
            "bool" => match text {
                "true" | "1" => Ok(1.0),
                "false" | "0" => Ok(0.0),
                _ => Err(wrong("true or false")),
            },
            "u32" => text
                .trim_end_matches('u')
                .parse::<u32>()
                .map(f64::from)
                .map_err(|_| wrong("an integer from 0 to 4294967295")),
            "i32" => text
                .trim_end_matches('i')
                .parse::<i32>()
                .map(f64::from)
                .map_err(|_| wrong("an integer from -2147483648 to 2147483647")),
            _ => {
                let limit = if o.ty == "f16" { 65504.0 } else { f32::MAX as f64 };
                match text.trim_end_matches(['f', 'h']).parse::<f64>() {
                    Ok(v) if v.is_finite() && v.abs() <= limit => Ok(v),
                    _ => Err(wrong(&format!("a finite {} number", o.ty))),
                }
            }
        }
    }

    /// The pipeline constants for `given` (`NAME=VALUE`, by WGSL name or key), each checked
    /// against its type, in declaration order, keyed as wgpu keys them. `strict`: a name the
    /// kernel does not declare is an error (with `--all`, each kernel takes the names it
    /// declares). An override without a default that is not given is an error.
    pub fn constants(&self, given: &[(String, String)], strict: bool) -> Result<Vec<(String, f64)>, String> {
        if strict {
            for (name, _) in given {
                if !self.overrides.iter().any(|o| &o.name == name || &o.key == name) {
                    let declared: Vec<&str> = self.overrides.iter().map(|o| o.name.as_str()).collect();
                    return Err(format!(
                        "{} has no override `{name}`; it declares: {}",
                        self.name,
                        if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
                    ));
                }
            }
        }
        let mut out = Vec::new();
        for o in &self.overrides {
            // The last one given wins, as later flags override earlier ones.
            match given.iter().rev().find(|(name, _)| name == &o.name || name == &o.key) {
                Some((_, text)) => out.push((o.key.clone(), Self::value(o, text)?)),
                None if !o.has_default => {
                    return Err(format!(
                        "override `{}` of {} has no default: give it with --override {}=VALUE",
                        o.name, self.name, o.name
                    ));
                }
                None => {}
            }
        }
        Ok(out)
    }
}

/// What a device offers kernels, as the runtime enables it (`GpuOptions` switches applied).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    pub subgroups: bool,
    pub f16: bool,
    /// The cooperative-matrix configurations enabled; empty: tensor cores off.
    pub coop: Vec<CoopConfig>,
    /// Why tensor cores are off, if they are.
    pub coop_off: Option<String>,
}

impl Offer {
    /// What `form` needs that is not offered, or `None`.
    pub fn lacks(&self, form: &Form) -> Option<String> {
        if form.f16 && !self.f16 {
            return Some("SHADER_F16, which is off or absent on this device".into());
        }
        if form.subgroups && !self.subgroups {
            return Some("SUBGROUP, which is off or absent on this device".into());
        }
        if form.coop {
            let why = self.coop_off.clone().unwrap_or_else(|| "not offered".into());
            if self.coop.is_empty() {
                return Some(format!("cooperative matrices ({why})"));
            }
            let missing: Vec<String> =
                form.coop_configs.iter().filter(|c| !self.coop.contains(c)).map(ToString::to_string).collect();
            if !missing.is_empty() {
                return Some(format!(
                    "cooperative-matrix configurations the device does not offer: {}",
                    missing.join(", ")
                ));
            }
        }
        None
    }

    /// The variant to build: `requested`, or the first the device runs (as the runtime picks).
    pub fn choose<'k>(&self, kernel: &'k Kernel, requested: Option<usize>) -> Result<&'k Form, String> {
        if let Some(i) = requested {
            let Some(form) = kernel.variants.get(i) else {
                return Err(format!(
                    "{} has {} variant{} (0 to {}), not {i}",
                    kernel.name,
                    kernel.variants.len(),
                    if kernel.variants.len() == 1 { "" } else { "s" },
                    kernel.variants.len().saturating_sub(1)
                ));
            };
            return match self.lacks(form) {
                None => Ok(form),
                Some(why) => Err(format!("variant {i} of {} needs {why}", kernel.name)),
            };
        }
        if let Some(form) = kernel.variants.iter().find(|f| self.lacks(f).is_none()) {
            return Ok(form);
        }
        let last = kernel.variants.last().and_then(|f| self.lacks(f)).unwrap_or_else(|| "a variant".into());
        Err(format!("no variant of {} runs on this device: the most portable one needs {last}", kernel.name))
    }
}

/// The library kernel called `name`: `module::kernel`, or `kernel` where one module has it.
pub fn find(name: &str) -> Result<&'static KernelDef, String> {
    let all: Vec<&'static KernelDef> = kernels::all_kernels().copied().collect();
    if let Some(k) = all.iter().find(|k| k.qualified_name() == name) {
        return Ok(k);
    }
    let named: Vec<&&KernelDef> = all.iter().filter(|k| k.name == name).collect();
    match named.as_slice() {
        [one] => return Ok(one),
        [] => {}
        many => {
            let names: Vec<String> = many.iter().map(|k| k.qualified_name()).collect();
            return Err(format!("`{name}` is in several modules: {}", names.join(", ")));
        }
    }
    let close: Vec<String> =
        all.iter().map(|k| k.qualified_name()).filter(|q| q.contains(name.trim_start_matches(':'))).take(12).collect();
    Err(if close.is_empty() {
        format!("no library kernel is called `{name}` (--list lists them)")
    } else {
        format!("no library kernel is called `{name}`; did you mean: {}", close.join(", "))
    })
}

/// The library's kernels whose `module::kernel` contains one of `filters` (all without filters).
pub fn library(filters: &[String]) -> Vec<Kernel> {
    kernels::all_kernels()
        .filter(|k| {
            let q = k.qualified_name();
            filters.is_empty() || filters.iter().any(|f| q.contains(f.as_str()))
        })
        .map(|k| Kernel::from_def(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels::CoopScalar;

    const C16: CoopConfig = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };

    fn form(index: usize, coop: bool, subgroups: bool, f16: bool) -> Form {
        Form {
            index,
            wgsl: Cow::Borrowed(""),
            subgroups,
            f16,
            coop,
            coop_configs: if coop { vec![C16] } else { Vec::new() },
        }
    }

    fn kernel(overrides: Vec<Override>) -> Kernel {
        Kernel {
            name: "m::k".into(),
            entry: "k".into(),
            file: "m.wgsl".into(),
            overrides,
            variants: vec![form(0, true, true, true), form(1, false, true, false), form(2, false, false, false)],
            dynamic_uniforms: true,
            unchecked: false,
        }
    }

    fn o(name: &str, key: &str, ty: &str, has_default: bool) -> Override {
        Override { name: name.into(), key: key.into(), ty: ty.into(), has_default }
    }

    fn given(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn override_values_are_checked_against_their_types() {
        let k = kernel(vec![
            o("M_C", "M_C", "u32", true),
            o("SPLIT", "SPLIT", "bool", true),
            o("SCALE", "7", "f32", false),
            o("OFF", "OFF", "i32", true),
        ]);
        let c =
            k.constants(&given(&[("M_C", "4096"), ("SPLIT", "false"), ("SCALE", "0.5"), ("OFF", "-3")]), true).unwrap();
        assert_eq!(
            c,
            vec![
                ("M_C".to_string(), 4096.0),
                ("SPLIT".to_string(), 0.0),
                ("7".to_string(), 0.5),
                ("OFF".to_string(), -3.0)
            ]
        );
        // By @id key, a later value winning, suffixes as WGSL writes literals.
        let c = k.constants(&given(&[("7", "2f"), ("M_C", "1"), ("M_C", "8u")]), true).unwrap();
        assert_eq!(c, vec![("M_C".to_string(), 8.0), ("7".to_string(), 2.0)]);
        let err = |pairs: &[(&str, &str)]| k.constants(&given(pairs), true).unwrap_err();
        assert!(err(&[("SCALE", "1"), ("M_C", "-1")]).contains("not an integer from 0"), "{}", err(&[("M_C", "-1")]));
        assert!(err(&[("SCALE", "1"), ("M_C", "4294967296")]).contains("M_C"));
        assert!(err(&[("SCALE", "1"), ("M_C", "1.5")]).contains("u32"));
        assert!(err(&[("SCALE", "1"), ("SPLIT", "yes")]).contains("true or false"));
        assert!(err(&[("SCALE", "1"), ("OFF", "2147483648")]).contains("i32"));
        assert!(err(&[("SCALE", "inf")]).contains("finite f32"));
        assert!(err(&[("SCALE", "1e39")]).contains("finite f32"));
        assert!(err(&[]).contains("`SCALE` of m::k has no default"));
        let unknown = err(&[("SCALE", "1"), ("N_C", "2")]);
        assert!(unknown.contains("no override `N_C`") && unknown.contains("M_C, SPLIT, SCALE, OFF"), "{unknown}");
        // With --all, names a kernel does not declare are someone else's.
        assert_eq!(k.constants(&given(&[("SCALE", "1"), ("N_C", "2")]), false).unwrap(), vec![("7".to_string(), 1.0)]);
        let f16 = kernel(vec![o("H", "H", "f16", true)]);
        assert!(f16.constants(&given(&[("H", "70000")]), true).is_err());
        assert_eq!(f16.constants(&given(&[("H", "1.5h")]), true).unwrap(), vec![("H".to_string(), 1.5)]);
    }

    #[test]
    fn the_variant_is_the_runtimes_choice_unless_one_is_asked_for() {
        let k = kernel(Vec::new());
        let h200 = Offer { subgroups: true, f16: true, coop: vec![C16], coop_off: None };
        let lavapipe = Offer { subgroups: true, f16: true, coop: Vec::new(), coop_off: Some("not offered".into()) };
        let bare = Offer::default();
        assert_eq!(h200.choose(&k, None).unwrap().index, 0);
        assert_eq!(lavapipe.choose(&k, None).unwrap().index, 1);
        assert_eq!(bare.choose(&k, None).unwrap().index, 2);
        assert_eq!(h200.choose(&k, Some(2)).unwrap().index, 2);
        let e = lavapipe.choose(&k, Some(0)).unwrap_err();
        assert!(e.contains("variant 0 of m::k needs cooperative matrices (not offered)"), "{e}");
        assert!(h200.choose(&k, Some(3)).unwrap_err().contains("has 3 variants (0 to 2), not 3"));
        // A device offering another configuration only.
        let c8 = CoopConfig { m: 8, n: 8, k: 8, ..C16 };
        let other = Offer { coop: vec![c8], ..h200.clone() };
        assert!(other.lacks(&k.variants[0]).unwrap().contains("16×16×16"));
        assert_eq!(other.choose(&k, None).unwrap().index, 1);
        let only_coop = Kernel { variants: vec![form(0, true, false, true)], ..kernel(Vec::new()) };
        let e = lavapipe.choose(&only_coop, None).unwrap_err();
        assert!(e.contains("no variant of m::k runs") && e.contains("cooperative matrices"), "{e}");
        assert!(Offer { f16: false, ..h200 }.lacks(&k.variants[0]).unwrap().contains("SHADER_F16"));
    }

    #[test]
    fn library_kernels_are_found_by_qualified_or_unique_name() {
        let first = kernels::all_kernels().next().unwrap();
        assert!(std::ptr::eq(find(&first.qualified_name()).unwrap(), *first));
        let e = find("no_such_kernel_anywhere").unwrap_err();
        assert!(e.contains("--list"), "{e}");
        // A name two modules share must be qualified.
        let mut seen = std::collections::HashMap::new();
        for k in kernels::all_kernels() {
            seen.entry(k.name).or_insert_with(Vec::new).push(k.qualified_name());
        }
        if let Some((name, modules)) = seen.iter().find(|(_, m)| m.len() > 1) {
            let e = find(name).unwrap_err();
            assert!(modules.iter().all(|m| e.contains(m.as_str())), "{e}");
        }
        if let Some((name, _)) = seen.iter().find(|(_, m)| m.len() == 1) {
            assert_eq!(find(name).unwrap().name, *name);
        }
        let filtered = library(&["cast::".to_string()]);
        assert!(!filtered.is_empty() && filtered.iter().all(|k| k.name.starts_with("cast::")));
        assert_eq!(library(&[]).len(), kernels::all_kernels().count());
    }

    #[test]
    fn a_wgsl_file_gives_its_needs_and_overrides() {
        let src = "enable f16;\noverride N: u32;\n@id(3) override S: f32 = 1.0;\n\
            @group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
            @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n\
              y[g.x] = f32(f16(S)) + f32(N) + subgroupAdd(1.0);\n}\n";
        let k = Kernel::from_file("t.wgsl", src.to_string(), "main").unwrap();
        let f = &k.variants[0];
        assert!(f.f16 && f.subgroups && !f.coop && !k.dynamic_uniforms);
        assert_eq!(k.overrides, vec![o("N", "N", "u32", false), o("S", "3", "f32", true)]);
        let e = Kernel::from_file("t.wgsl", src.to_string(), "other").unwrap_err();
        assert!(e.contains("no compute entry point `other`; it has: main"), "{e}");
        let e = Kernel::from_file("t.wgsl", "fn (".to_string(), "main").unwrap_err();
        assert!(e.contains("t.wgsl"), "{e}");
    }
}
