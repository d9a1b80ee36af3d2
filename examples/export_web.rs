//! Exports the kernels for JavaScript engines: every kernel's browser WGSL, a JSON manifest of
//! everything a host needs to run them, and an ES module that does it, so a WebGPU page can use
//! the kernels without any of our Rust code.
//!
//! `cargo run --example export_web -- DIR` writes
//!
//! - `DIR/<module>/<kernel>.wgsl`: the preferred browser variant (with `enable subgroups;` where
//!   it uses subgroups, `enable f16;` where it uses f16), and
//!   `DIR/<module>/<kernel>.no-subgroups.wgsl` for kernels that also have a variant without
//!   subgroups. Variants that use cooperative matrices (tensor cores) are native only — WebGPU
//!   has no cooperative matrices — so they are left out (the manifest lists them and why);
//! - `DIR/manifest.json`: per kernel file its module constants; per kernel its bindings (WebGPU
//!   binding type, access, element or uniform layout with every field, fewest elements), grid
//!   and `@requires` checks as expression trees with integer semantics, variants with the
//!   WebGPU features and device limits each needs, and doc text. Every field is documented in
//!   `DIR/manifest.schema.json` (from `web/export/`);
//! - `DIR/kernels.js` (from `web/export/`): the host, an ES module that builds pipelines, packs
//!   uniforms from plain objects, checks calls as the Rust functions do and dispatches them.
//!
//! The manifest comes from the macro's own compile stage (`kernels_codegen::compile` and
//! `kernels_codegen::manifest`) run on the library's kernel files — the list of
//! `kernels::all_kernels()` — and the export refuses to write one whose kernels differ from
//! those compiled into this binary.

use kernels_codegen::compile::File;
use kernels_codegen::input::Shared;
use kernels_codegen::manifest;
use kernels_codegen::source::CallSite;
use std::path::{Path, PathBuf};

/// The ES module written beside the manifest.
pub const KERNELS_JS: &str = include_str!("../web/export/kernels.js");

/// The manifest's JSON Schema, written beside it.
pub const SCHEMA: &str = include_str!("../web/export/manifest.schema.json");

/// The repository root: the `kernels` crate's directory, which its kernel paths are relative to.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles the library's kernel files as `kernels!` does, in the order of
/// `kernels::all_kernels()`, and checks that they give the kernels compiled into this binary.
pub fn compile_library() -> Result<Vec<File>, String> {
    let root = root();
    let site = CallSite { manifest_dir: Some(root.clone()), calling_file: Some(root.join("src/lib.rs")) };
    let mut list: Vec<(&str, &str)> = Vec::new();
    for k in kernels::all_kernels() {
        if !list.contains(&(k.module, k.file)) {
            list.push((k.module, k.file));
        }
    }
    let mut files = Vec::new();
    for (module, path) in list {
        let file = kernels_codegen::compile::compile(&site, path, &Shared::Default, Some(module.to_string()));
        if let Some(e) = file.all_errors().next() {
            return Err(format!("{path}: {}", e.message));
        }
        let compiled: Vec<_> = kernels::all_kernels().filter(|k| k.module == module).collect();
        let same = compiled.len() == file.kernels.len()
            && compiled.iter().zip(&file.kernels).all(|(def, k)| {
                def.name == k.name
                    && def.variants.len() == k.variants.len()
                    && def
                        .variants
                        .iter()
                        .zip(&k.variants)
                        .all(|(a, b)| a.wgsl == b.wgsl && a.browser_wgsl == b.browser_wgsl)
            });
        if !same {
            return Err(format!(
                "{path} no longer gives the kernels compiled into this program: rebuild it (`cargo run --example export_web`)"
            ));
        }
        files.push(file);
    }
    Ok(files)
}

/// Writes the WGSL files, `manifest.json`, `manifest.schema.json` and `kernels.js` under `dir`;
/// returns the number of kernels.
pub fn export(dir: &Path) -> Result<usize, String> {
    let files = compile_library()?;
    let export = manifest::export(&files)?;
    let write = |relative: &str, text: &str| -> Result<(), String> {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    for (path, source) in &export.sources {
        write(path, source)?;
    }
    write("manifest.json", &export.manifest.pretty())?;
    write("manifest.schema.json", SCHEMA)?;
    write("kernels.js", KERNELS_JS)?;
    Ok(files.iter().map(|f| f.kernels.len()).sum())
}

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: cargo run --example export_web -- DIR");
        std::process::exit(2);
    };
    let dir = Path::new(&dir);
    match export(dir) {
        Ok(n) => println!(
            "{n} kernels exported to {} (manifest.json, manifest.schema.json, kernels.js and one .wgsl per browser variant)",
            dir.display()
        ),
        Err(e) => {
            eprintln!("cannot export to {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}
