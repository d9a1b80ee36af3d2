//! Exports the kernels for JavaScript engines: every kernel's browser-form WGSL and a JSON
//! manifest describing how to bind and dispatch it, so a WebGPU host in JavaScript can load
//! them without any of our Rust code.
//!
//! `cargo run --example export_web -- DIR` writes
//!
//! - `DIR/<module>/<kernel>.wgsl`: the preferred browser variant (with `enable subgroups;` where
//!   it uses subgroups, `enable f16;` where it uses f16), and
//!   `DIR/<module>/<kernel>.no-subgroups.wgsl` for kernels that also have a variant without
//!   subgroups. Variants that use cooperative matrices (tensor cores) are native only — WebGPU
//!   has no cooperative matrices — so they are left out; the kernel's fallback is exported;
//! - `DIR/manifest.json`: per kernel its bindings (kind, WebGPU buffer binding type, WGSL type,
//!   bytes per element or of the uniform, fewest elements), workgroup size, grid (`kind`:
//!   `threads` = one invocation per item, `workgroups` = one workgroup per item, both 1-D with
//!   the 2-D fallback past `maxComputeWorkgroupsPerDimension`; `explicit`; `caller`) and its
//!   `@grid` expression, `@requires` checks, required WebGPU features (`subgroups`,
//!   `shader-f16`), browser variants in order of preference, the native-only variants that were
//!   left out (`native_only_variants`: the cooperative-matrix configurations each uses),
//!   override constants and doc text.
//!
//! A host picks the first variant whose `features` its device has, creates a bind group layout
//! from `bindings` (all in group 0) and dispatches per `grid`. The data come from
//! `kernels::all_kernels()`.

use kernels::{BindingKind, CoopScalar, KernelDef, VariantDef};
use std::fmt::Write as _;
use std::path::Path;

/// The manifest's `format`.
pub const FORMAT: &str = "kernels-web-export/1";

/// WebGPU feature names a variant needs.
fn features(v: &VariantDef) -> Vec<&'static str> {
    let mut out = Vec::new();
    if v.subgroups {
        out.push("subgroups");
    }
    if v.f16 {
        out.push("shader-f16");
    }
    out
}

/// The variants a browser can run, preferred first: those without cooperative matrices.
pub fn web_variants(kernel: &KernelDef) -> Vec<&'static VariantDef> {
    kernel.variants.iter().filter(|v| v.coop.is_empty()).collect()
}

/// The file of browser variant `index` (into [`web_variants`]) of `kernel`, relative to the
/// export directory.
pub fn variant_file(kernel: &KernelDef, index: usize) -> String {
    let web = web_variants(kernel);
    let first = web[0];
    let v = web[index];
    let suffix = if index == 0 {
        String::new()
    } else if first.subgroups && !v.subgroups && first.f16 == v.f16 {
        ".no-subgroups".into()
    } else {
        format!(".variant{index}")
    };
    format!("{}/{}{suffix}.wgsl", kernel.module, kernel.name)
}

/// A JSON string literal.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    format!("[{}]", items.into_iter().map(string).collect::<Vec<_>>().join(", "))
}

/// The manifest entry of one kernel.
fn kernel_json(k: &KernelDef) -> String {
    let bindings: Vec<String> = k
        .bindings
        .iter()
        .map(|b| {
            let (kind, buffer_type) = match b.kind {
                BindingKind::Read => ("read", "read-only-storage"),
                BindingKind::ReadWrite => ("read_write", "storage"),
                BindingKind::Uniform => ("uniform", "uniform"),
            };
            format!(
                "{{\"group\": {}, \"binding\": {}, \"name\": {}, \"kind\": {}, \"buffer_type\": {}, \"wgsl_type\": {}, \"stride\": {}, \"min_length\": {}}}",
                b.group,
                b.binding,
                string(b.name),
                string(kind),
                string(buffer_type),
                string(b.wgsl_type),
                b.stride,
                b.min_elems
            )
        })
        .collect();
    let web = web_variants(k);
    let variants: Vec<String> = web
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{{\"file\": {}, \"features\": {}}}", string(&variant_file(k, i)), strings(features(v))))
        .collect();
    let native_only: Vec<String> = k
        .variants
        .iter()
        .filter(|v| !v.coop.is_empty())
        .map(|v| {
            let scalar = |s: CoopScalar| match s {
                CoopScalar::F16 => "f16",
                CoopScalar::F32 => "f32",
            };
            let configs: Vec<String> = v
                .coop
                .iter()
                .map(|c| {
                    format!(
                        "{{\"m\": {}, \"n\": {}, \"k\": {}, \"ab\": {}, \"cr\": {}}}",
                        c.m,
                        c.n,
                        c.k,
                        string(scalar(c.ab)),
                        string(scalar(c.cr))
                    )
                })
                .collect();
            format!("{{\"cooperative_matrix\": [{}], \"features\": {}}}", configs.join(", "), strings(features(v)))
        })
        .collect();
    let overrides: Vec<String> = k
        .overrides
        .iter()
        .map(|o| {
            format!(
                "{{\"name\": {}, \"key\": {}, \"type\": {}, \"has_default\": {}}}",
                string(o.name),
                string(o.key),
                string(o.ty),
                o.has_default
            )
        })
        .collect();
    // Features every browser variant needs (what a device must have to run the kernel at all).
    let required: Vec<&str> = ["subgroups", "shader-f16"]
        .into_iter()
        .filter(|f| !web.is_empty() && web.iter().all(|v| features(v).contains(f)))
        .collect();
    let [x, y, z] = k.workgroup_size;
    format!(
        "    {{\n      \"module\": {}, \"name\": {}, \"qualified_name\": {},\n      \"source\": {{\"file\": {}, \"line\": {}}},\n      \"doc\": {},\n      \"workgroup_size\": [{x}, {y}, {z}],\n      \"grid\": {{\"kind\": {}, \"expr\": {}}},\n      \"requires\": {},\n      \"features\": {},\n      \"variants\": [{}],\n      \"native_only_variants\": [{}],\n      \"bindings\": [\n        {}\n      ],\n      \"overrides\": [{}]\n    }}",
        string(k.module),
        string(k.name),
        string(&k.qualified_name()),
        string(k.file),
        k.line,
        string(k.doc),
        string(k.grid.as_str()),
        string(k.grid_expr),
        strings(k.requires.iter().copied()),
        strings(required),
        variants.join(", "),
        native_only.join(", "),
        bindings.join(",\n        "),
        overrides.join(", "),
    )
}

/// The manifest of `kernels`, as JSON.
pub fn manifest<'k>(kernels: impl IntoIterator<Item = &'k &'static KernelDef>) -> String {
    let entries: Vec<String> = kernels.into_iter().map(|k| kernel_json(k)).collect();
    format!("{{\n  \"format\": {},\n  \"kernels\": [\n{}\n  ]\n}}\n", string(FORMAT), entries.join(",\n"))
}

/// Writes the WGSL files and `manifest.json` of every kernel of the library under `dir`;
/// returns the number of kernels.
pub fn export(dir: &Path) -> std::io::Result<usize> {
    let kernels: Vec<&&'static KernelDef> = kernels::all_kernels().collect();
    for k in &kernels {
        for (i, v) in web_variants(k).into_iter().enumerate() {
            let path = dir.join(variant_file(k, i));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, v.browser_wgsl)?;
        }
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("manifest.json"), manifest(kernels.iter().copied()))?;
    Ok(kernels.len())
}

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: cargo run --example export_web -- DIR");
        std::process::exit(2);
    };
    let dir = Path::new(&dir);
    match export(dir) {
        Ok(n) => println!("{n} kernels exported to {} (manifest.json and one .wgsl per variant)", dir.display()),
        Err(e) => {
            eprintln!("cannot export to {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}
