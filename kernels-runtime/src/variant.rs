//! Which compiled form of a kernel a device runs: a pure function of the kernel's variants and
//! what the device offers, so that it is unit-tested over synthetic kernels.

use crate::kernel::{CoopConfig, KernelDef, VariantDef};

/// What a device offers kernels (after the options have turned things off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// `SUBGROUP` is enabled and subgroup variants are wanted.
    pub(crate) subgroups: bool,
    /// `SHADER_F16` is enabled.
    pub(crate) f16: bool,
    /// The cooperative-matrix configurations enabled (empty: tensor cores off, always so in a
    /// browser).
    pub(crate) coop: Vec<CoopConfig>,
    /// Every feature enabled on the device (for [`VariantDef::features`]).
    pub(crate) features: wgpu::Features,
}

/// Why no variant of a kernel can run: what the most portable variant still lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unmet {
    /// The wgpu feature's name.
    pub(crate) feature: &'static str,
    /// The cooperative-matrix configurations missing (for `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    pub(crate) configs: Vec<CoopConfig>,
}

/// What a compiled form needs from the device: a [`VariantDef`] of the generated code, or a
/// form hot reload compiled at run time.
pub(crate) trait Needs {
    fn subgroups(&self) -> bool;
    fn f16(&self) -> bool;
    fn coop(&self) -> &[CoopConfig];
    fn features(&self) -> &[&'static str];
}

impl Needs for VariantDef {
    fn subgroups(&self) -> bool {
        self.subgroups
    }
    fn f16(&self) -> bool {
        self.f16
    }
    fn coop(&self) -> &[CoopConfig] {
        self.coop
    }
    fn features(&self) -> &[&'static str] {
        self.features
    }
}

/// What `variant` needs that `caps` does not offer, most basic first.
fn unmet(variant: &impl Needs, caps: &Capabilities) -> Vec<Unmet> {
    let mut out = Vec::new();
    if variant.f16() && !caps.f16 {
        out.push(Unmet { feature: "SHADER_F16", configs: Vec::new() });
    }
    if variant.subgroups() && !caps.subgroups {
        out.push(Unmet { feature: "SUBGROUP", configs: Vec::new() });
    }
    let missing: Vec<CoopConfig> = variant.coop().iter().filter(|c| !caps.coop.contains(c)).copied().collect();
    if !missing.is_empty() {
        out.push(Unmet { feature: "EXPERIMENTAL_COOPERATIVE_MATRIX", configs: missing });
    }
    for &name in variant.features() {
        // A name this wgpu does not know is a feature no device has.
        if !wgpu::Features::from_name(name).is_some_and(|f| caps.features.contains(f)) {
            out.push(Unmet { feature: name, configs: Vec::new() });
        }
    }
    out
}

/// The first variant (variants are listed preferred first) whose every need is offered: its
/// subgroups, its f16, and each of its cooperative-matrix configurations. Without one, what the
/// variant that lacks the least is missing (the most portable variant on ties, the last).
pub(crate) fn select(kernel: &KernelDef, caps: &Capabilities) -> Result<&'static VariantDef, Unmet> {
    select_in(kernel.variants, caps)
}

/// [`select`] over any list of forms.
pub(crate) fn select_in<'v, V: Needs>(variants: &'v [V], caps: &Capabilities) -> Result<&'v V, Unmet> {
    let mut closest: Option<Vec<Unmet>> = None;
    for variant in variants {
        let missing = unmet(variant, caps);
        if missing.is_empty() {
            return Ok(variant);
        }
        if closest.as_ref().is_none_or(|c| missing.len() <= c.len()) {
            closest = Some(missing);
        }
    }
    Err(closest.and_then(|c| c.into_iter().next()).unwrap_or(Unmet { feature: "(a variant)", configs: Vec::new() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CoopScalar, GridKind};

    const C16: CoopConfig = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };
    const C8: CoopConfig = CoopConfig { m: 8, n: 8, k: 8, ab: CoopScalar::F16, cr: CoopScalar::F16 };

    const fn variant(subgroups: bool, f16: bool, coop: &'static [CoopConfig], wgsl: &'static str) -> VariantDef {
        VariantDef { subgroups, f16, coop, wgsl, browser_wgsl: wgsl, features: &[], overrides: &[] }
    }

    const fn kernel(variants: &'static [VariantDef]) -> KernelDef {
        KernelDef {
            name: "k",
            module: "m",
            file: "m.wgsl",
            line: 1,
            doc: "",
            workgroup_size: [64, 1, 1],
            workgroup_size_overrides: [None; 3],
            immediate_size: 0,
            bindings: &[],
            resources: &[],
            overrides: &[],
            grid: GridKind::Caller,
            grid_expr: "",
            requires: &[],
            variants,
            unchecked: false,
            source: None,
        }
    }

    /// Tensor cores with subgroups, subgroups alone, then the portable tree.
    static LADDER: KernelDef = kernel(&[
        variant(true, true, &[C16], "coop"),
        variant(true, false, &[], "subgroups"),
        variant(false, false, &[], "tree"),
    ]);
    /// Tensor cores or a plain f32 fallback.
    static COOP_OR_PLAIN: KernelDef =
        kernel(&[variant(false, true, &[C16], "coop"), variant(false, false, &[], "plain")]);
    /// Tensor cores only, two configurations.
    static COOP_ONLY: KernelDef = kernel(&[variant(false, true, &[C16, C8], "coop")]);

    fn caps(subgroups: bool, f16: bool, coop: &[CoopConfig]) -> Capabilities {
        Capabilities { subgroups, f16, coop: coop.to_vec(), features: wgpu::Features::empty() }
    }

    fn pick(k: &'static KernelDef, c: &Capabilities) -> &'static str {
        select(k, c).map(|v| v.wgsl).unwrap_or("none")
    }

    #[test]
    fn lavapipe_takes_the_fallbacks() {
        // lavapipe: subgroups and f16, no cooperative matrices.
        let lavapipe = caps(true, true, &[]);
        assert_eq!(pick(&LADDER, &lavapipe), "subgroups");
        assert_eq!(pick(&COOP_OR_PLAIN, &lavapipe), "plain");
        assert_eq!(pick(&LADDER, &caps(false, true, &[])), "tree");
    }

    #[test]
    fn tensor_cores_are_taken_where_every_configuration_is_offered() {
        let h200 = caps(true, true, &[C16]);
        assert_eq!(pick(&LADDER, &h200), "coop");
        assert_eq!(pick(&COOP_OR_PLAIN, &h200), "coop");
        // One of the two configurations is missing: not runnable.
        assert_eq!(pick(&COOP_ONLY, &h200), "none");
        assert_eq!(pick(&COOP_ONLY, &caps(false, true, &[C8, C16])), "coop");
        // The coop variant also needs what its other flags say.
        assert_eq!(pick(&LADDER, &caps(false, true, &[C16])), "tree");
        assert_eq!(pick(&COOP_OR_PLAIN, &caps(true, false, &[C16])), "plain");
    }

    #[test]
    fn a_coop_only_kernel_names_the_missing_configurations() {
        let e = select(&COOP_ONLY, &caps(true, true, &[])).unwrap_err();
        assert_eq!(e, Unmet { feature: "EXPERIMENTAL_COOPERATIVE_MATRIX", configs: vec![C16, C8] });
        let e = select(&COOP_ONLY, &caps(true, true, &[C8])).unwrap_err();
        assert_eq!(e.configs, vec![C16]);
        // Without f16 that comes first.
        let e = select(&COOP_ONLY, &caps(true, false, &[])).unwrap_err();
        assert_eq!(e.feature, "SHADER_F16");
        // Only a kernel with no form but tensor cores needs them.
        assert!(COOP_ONLY.needs_tensor_cores());
        assert!(!COOP_OR_PLAIN.needs_tensor_cores() && !LADDER.needs_tensor_cores());
    }

    #[test]
    fn other_features_are_needed_by_name() {
        static INT64: KernelDef = kernel(&[VariantDef {
            subgroups: false,
            f16: false,
            coop: &[],
            wgsl: "i64",
            browser_wgsl: "",
            features: &["SHADER_INT64", "SHADER_INT64_ATOMIC_MIN_MAX"],
            overrides: &[],
        }]);
        let mut c = caps(true, true, &[]);
        assert_eq!(select(&INT64, &c).unwrap_err().feature, "SHADER_INT64");
        c.features = wgpu::Features::SHADER_INT64;
        assert_eq!(select(&INT64, &c).unwrap_err().feature, "SHADER_INT64_ATOMIC_MIN_MAX");
        c.features |= wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX;
        assert_eq!(pick(&INT64, &c), "i64");
    }

    #[test]
    fn the_closest_variant_explains_a_failure() {
        static SUBGROUP_ONLY: KernelDef = kernel(&[variant(true, false, &[], "s")]);
        static F16_FORMS: KernelDef = kernel(&[variant(true, true, &[], "s"), variant(false, true, &[], "t")]);
        assert_eq!(select(&SUBGROUP_ONLY, &caps(false, true, &[])).unwrap_err().feature, "SUBGROUP");
        // The tree form lacks only f16; the subgroup form lacks both.
        assert_eq!(select(&F16_FORMS, &caps(false, false, &[])).unwrap_err().feature, "SHADER_F16");
        static NONE: KernelDef = kernel(&[]);
        assert!(select(&NONE, &caps(true, true, &[C16])).is_err());
    }
}
