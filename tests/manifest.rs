//! The JavaScript export's manifest, without a browser: `examples/export_web.rs` writes it, and
//! it must follow its JSON Schema (`web/export/manifest.schema.json`, checked with the
//! `jsonschema` crate, every property documented) and say what the kernels compiled into this
//! crate and the macro's compile stage say: bindings, accesses, lengths, layouts, grids,
//! `@requires` trees, constants, variants and their limits.

mod browser_support;

use browser_support::{export_web, expr_from_json};
use kernels_codegen::shape::{Expr, Step};
use serde_json::{Value, json};
use std::path::Path;

/// Every property the schema declares says what it is.
fn documented(root: &Value, schema: &Value, at: &str) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, p) in props {
            let described = p.get("description").is_some()
                || p.get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .is_some_and(|d| root["$defs"][d].get("description").is_some());
            assert!(described, "schema property {at}.{key} has no description");
            documented(root, p, &format!("{at}.{key}"));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(s) = schema.get(key).filter(|s| s.is_object()) {
            documented(root, s, &format!("{at}.{key}"));
        }
    }
    for key in ["oneOf"] {
        for (i, s) in schema.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            documented(root, s, &format!("{at}.{key}[{i}]"));
        }
    }
    if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
        for (name, d) in defs {
            documented(root, d, &format!("$defs.{name}"));
        }
    }
}

/// A struct or array layout covers its bytes exactly; returns its size.
fn check_layout(layout: &Value, at: &str) -> u64 {
    let size = layout["size"].as_u64().expect("size");
    match layout["kind"].as_str().expect("kind") {
        "scalar" => assert_eq!(size, if layout["scalar"] == "f16" { 2 } else { 4 }, "{at}"),
        "vector" => {
            let s = if layout["scalar"] == "f16" { 2 } else { 4 };
            assert_eq!(size, s * layout["count"].as_u64().expect("count"), "{at}");
        }
        "matrix" => {
            assert_eq!(size, layout["columns"].as_u64().unwrap() * layout["column_stride"].as_u64().unwrap(), "{at}")
        }
        "array" => {
            let element = check_layout(&layout["element"], &format!("{at}[]"));
            let stride = layout["stride"].as_u64().expect("stride");
            assert!(element <= stride, "{at}: elements of {element} bytes {stride} apart");
            assert_eq!(size, stride * layout["count"].as_u64().expect("count"), "{at}");
        }
        "struct" => {
            let mut cursor = 0;
            for f in layout["fields"].as_array().expect("fields") {
                let (offset, fsize) = (f["offset"].as_u64().expect("offset"), f["size"].as_u64().expect("size"));
                assert_eq!(offset, cursor, "{at}: a gap or an overlap at byte {cursor}: {f}");
                if f.get("padding").is_none() {
                    let name = f["name"].as_str().expect("name");
                    assert_eq!(check_layout(&f["layout"], &format!("{at}.{name}")), fsize, "{at}.{name}");
                }
                cursor = offset + fsize;
            }
            assert_eq!(cursor, size, "{at}: the fields end at {cursor}, the struct at {size}");
        }
        other => panic!("{at}: layout kind {other}"),
    }
    size
}

#[test]
fn the_export_manifest_is_complete_and_true() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let n = export_web::export(&dir).expect("export");
    assert_eq!(n, kernels::all_kernels().count());
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let manifest: Value = serde_json::from_str(&read("manifest.json")).expect("manifest.json is JSON");
    let schema: Value = serde_json::from_str(&read("manifest.schema.json")).expect("the schema is JSON");
    assert_eq!(read("kernels.js"), export_web::KERNELS_JS);

    // Every field present, typed and documented.
    documented(&schema, &schema, "manifest");
    let validator = jsonschema::validator_for(&schema).expect("manifest.schema.json is a valid JSON Schema");
    let errors: Vec<String> =
        validator.iter_errors(&manifest).take(20).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "manifest.json does not follow its schema:\n{}", errors.join("\n"));
    // The validator catches what it is there for.
    type Corrupt = fn(&mut Value);
    let corruptions: [(&str, Corrupt); 6] = [
        ("a missing access", |m| {
            m["kernels"][0]["bindings"][0].as_object_mut().unwrap().remove("access");
        }),
        ("an unknown access", |m| m["kernels"][0]["bindings"][0]["access"] = json!("sometimes")),
        ("an undocumented field", |m| m["kernels"][0]["extra"] = json!(1)),
        ("an unknown operation", |m| {
            m["kernels"][0]["grid"]["count"] = json!({"op": "pow", "args": [{"int": "2"}, {"int": "3"}]})
        }),
        ("an integer that is not decimal", |m| m["kernels"][0]["grid"]["count"] = json!({"int": "0x10"})),
        ("a float where an integer belongs", |m| m["kernels"][0]["bindings"][0]["stride"] = json!(4.5)),
    ];
    for (what, corrupt) in corruptions {
        let mut m = manifest.clone();
        corrupt(&mut m);
        assert!(!validator.is_valid(&m), "the schema check misses {what}");
    }
    assert_eq!(manifest["format_version"], kernels_codegen::manifest::FORMAT_VERSION);
    assert!(read("kernels.js").contains(&format!("FORMAT_VERSION = {};", kernels_codegen::manifest::FORMAT_VERSION)));

    // A layout with a gap is caught.
    let gap = json!({"kind": "struct", "name": "P", "size": 8, "fields": [
        {"name": "a", "offset": 0, "size": 4, "type": "u32", "layout": {"kind": "scalar", "scalar": "u32", "size": 4}}]});
    assert!(
        std::panic::catch_unwind(|| check_layout(&gap, "P")).is_err(),
        "a struct whose fields do not reach its end"
    );

    // The constants: the macro's, per file (the same name may differ between files).
    let files = export_web::compile_library().expect("compile the library");
    let entries = manifest["files"].as_array().expect("files");
    assert_eq!(entries.len(), files.len());
    for (f, e) in files.iter().zip(entries) {
        assert_eq!(e["module"], f.module.as_str());
        assert_eq!(e["doc"], f.doc.join("\n"), "{}", f.module);
        let constants = e["constants"].as_object().expect("constants");
        assert_eq!(constants.len(), f.consts.len(), "{}", f.module);
        for (name, ty, value) in &f.consts {
            let c = &constants[name];
            assert_eq!(c["type"], *ty, "{}::{name}", f.module);
            let parsed: Value = serde_json::from_str(value).expect("a constant's value");
            assert_eq!(c["value"], parsed, "{}::{name}", f.module);
        }
    }
    let constant = |module: &str, name: &str| {
        entries.iter().find(|e| e["module"] == module).expect("module")["constants"][name]["value"].as_u64()
    };
    for (module, name, value) in [
        ("norm", "NORM_BLOCK", kernels::norm::NORM_BLOCK),
        ("optimizer", "NORM_BLOCK", kernels::optimizer::NORM_BLOCK),
        ("infrastructure", "EW_CHUNK", kernels::infrastructure::EW_CHUNK),
        ("infrastructure", "REDUCE_CHUNK", kernels::infrastructure::REDUCE_CHUNK),
        ("linear", "TILE_M", kernels::linear::TILE_M),
        ("linear", "TILE_N", kernels::linear::TILE_N),
        ("attention", "FWD_Q_FLOATS", kernels::attention::FWD_Q_FLOATS),
        ("attention", "FWD_BQ_MAX", kernels::attention::FWD_BQ_MAX),
    ] {
        assert_eq!(constant(module, name), Some(u64::from(value)), "{module}::{name}");
    }
    assert_ne!(kernels::norm::NORM_BLOCK, kernels::optimizer::NORM_BLOCK);

    // Every kernel: the facts of the kernel compiled into this crate and of the compile stage.
    let compiled: Vec<(&str, &kernels_codegen::compile::Kernel)> =
        files.iter().flat_map(|f| f.kernels.iter().map(move |k| (f.module.as_str(), k))).collect();
    let entries = manifest["kernels"].as_array().expect("kernels");
    assert_eq!(entries.len(), kernels::all_kernels().count());
    let mut accumulated = Vec::new();
    for ((def, (module, ck)), e) in kernels::all_kernels().zip(&compiled).zip(entries) {
        let name = def.qualified_name();
        assert_eq!(
            (e["qualified_name"].as_str(), *module, ck.name.as_str()),
            (Some(name.as_str()), def.module, def.name)
        );
        assert_eq!(e["doc"], def.doc, "{name}");
        assert_eq!(e["source"]["line"], def.line, "{name}");
        assert_eq!(e["workgroup_size"], json!(def.workgroup_size), "{name}");
        assert_eq!(e["grid"]["kind"], def.grid.as_str(), "{name}");
        let texts: Vec<&str> = e["requires"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
        assert_eq!(texts, def.requires, "{name}");
        // The trees are the ones the generated Rust checks are emitted from.
        for (r, cr) in e["requires"].as_array().unwrap().iter().zip(&ck.shape.requires) {
            assert_eq!(expr_from_json(&r["left"]), cr.value.left, "{name}: {}", r["text"]);
            assert_eq!(expr_from_json(&r["right"]), cr.value.right, "{name}: {}", r["text"]);
            assert_eq!(r["cmp"], kernels_codegen::manifest::cmp_name(cr.value.cmp), "{name}");
        }
        match (&ck.shape.grid, def.grid) {
            (kernels_codegen::shape::GridSource::Annotation(g), _) => {
                assert_eq!(e["grid"]["text"], def.grid_expr, "{name}");
                match &g.value {
                    kernels_codegen::shape::Grid::Threads(n) | kernels_codegen::shape::Grid::Workgroups(n) => {
                        assert_eq!(&expr_from_json(&e["grid"]["count"]), n, "{name}")
                    }
                    kernels_codegen::shape::Grid::Explicit(dims) => {
                        let got: Vec<Expr> = e["grid"]["dims"].as_array().unwrap().iter().map(expr_from_json).collect();
                        assert_eq!(got, dims.to_vec(), "{name}");
                    }
                }
            }
            (_, kernels::GridKind::Caller) => assert!(e["grid"]["text"].is_null(), "{name}"),
            (other, kind) => panic!("{name}: grid {other:?} but {kind:?}"),
        }
        // A kernel with only tensor-core forms has no browser variant: its entry lists the
        // native ones and the features of none.
        let browser_variants = e["variants"].as_array().expect("variants");
        assert_eq!(browser_variants.is_empty(), def.needs_tensor_cores(), "{name}");
        if def.needs_tensor_cores() {
            assert!(!e["native_only_variants"].as_array().expect("native_only_variants").is_empty(), "{name}");
        } else {
            let needs_f16 = e["features"].as_array().unwrap().iter().any(|f| f == "shader-f16");
            assert_eq!(needs_f16, def.needs_f16(), "{name}");
        }

        let bindings = e["bindings"].as_array().expect("bindings");
        assert_eq!(bindings.len(), def.bindings.len(), "{name}");
        for (b, j) in def.bindings.iter().zip(bindings) {
            let at = format!("{name}.{}", b.name);
            assert_eq!((j["binding"].as_u64(), j["name"].as_str()), (Some(u64::from(b.binding)), Some(b.name)), "{at}");
            assert_eq!(
                (j["wgsl_type"].as_str(), j["stride"].as_u64()),
                (Some(b.wgsl_type), Some(u64::from(b.stride))),
                "{at}"
            );
            let (kind, buffer_type) = match b.kind {
                kernels::BindingKind::Read => ("read", "read-only-storage"),
                kernels::BindingKind::ReadWrite => ("read_write", "storage"),
                kernels::BindingKind::Uniform => ("uniform", "uniform"),
            };
            assert_eq!((j["kind"].as_str(), j["buffer_type"].as_str()), (Some(kind), Some(buffer_type)), "{at}");
            // What the kernel does with it: only writable bindings are written.
            let access = j["access"].as_str().expect("access");
            if b.kind != kernels::BindingKind::ReadWrite {
                assert_eq!(access, "read", "{at}");
            }
            if access == "accumulated" {
                accumulated.push(at.clone());
            }
            // The fewest elements: never below the WGSL type's, and every constant `@requires`.
            let min = j["min_length"].as_u64().expect("min_length");
            assert!(min >= b.min_elems.max(1), "{at}");
            for r in &ck.shape.requires {
                if let (Expr::Len { binding }, kernels_codegen::shape::Cmp::Ge, Expr::Int(c)) =
                    (&r.value.left, r.value.cmp, &r.value.right)
                    && binding == b.name
                {
                    assert!(min as i128 >= *c, "{at}: min_length {min} but `{}`", r.text);
                }
            }
            // The layout covers the element or the uniform exactly, as the Rust side lays it out.
            let size = check_layout(&j["layout"], &at);
            if b.kind == kernels::BindingKind::Uniform {
                assert_eq!(size, u64::from(b.stride), "{at}");
                let iface = ck.interface.as_ref().expect("interface");
                if let Some(s) = iface.structs.iter().find(|s| s.name == b.wgsl_type) {
                    let named: Vec<(String, u64, u64)> = s
                        .fields
                        .iter()
                        .filter_map(|f| Some((f.name.clone()?, u64::from(f.offset), u64::from(f.size))))
                        .collect();
                    let manifest_fields: Vec<(String, u64, u64)> = j["layout"]["fields"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|f| f.get("padding").is_none())
                        .map(|f| {
                            (
                                f["name"].as_str().unwrap().into(),
                                f["offset"].as_u64().unwrap(),
                                f["size"].as_u64().unwrap(),
                            )
                        })
                        .collect();
                    assert_eq!(manifest_fields, named, "{at}: the layout of the Rust `{}`", s.name);
                }
            } else {
                assert!(size <= u64::from(b.stride), "{at}");
            }
        }
        assert_eq!(
            accumulated.iter().filter(|a| a.starts_with(&format!("{name}."))).count(),
            ck.shape.accumulates.len(),
            "{name}: `accumulated` is what `@accumulates` says"
        );
        // …and `@accumulates` is on every kernel whose doc says "Accumulates into `b`".
        let doc = def.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        for said in doc.split("ccumulates into `").skip(1) {
            let b: String = said.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            assert!(
                accumulated.contains(&format!("{name}.{b}")),
                "{name}: the doc says it accumulates into `{b}`, but it has no `@accumulates {b}`"
            );
        }

        // Every constant the grid and requires texts name is in the kernel's `constants`, with
        // the value its expression trees hold; a doc that points at the file header has one.
        // Names in a text that are neither fields (after `.`) nor functions (before `(`).
        let named = |text: &str| -> Vec<String> {
            let chars: Vec<char> = text.chars().collect();
            let mut out = Vec::new();
            let mut i = 0;
            while i < chars.len() {
                if chars[i].is_ascii_digit() {
                    while i < chars.len() && chars[i].is_alphanumeric() {
                        i += 1;
                    }
                    continue;
                }
                if !(chars[i].is_alphabetic() || chars[i] == '_') {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let before = chars[..start].iter().rev().find(|c| !c.is_whitespace());
                let after = chars[i..].iter().find(|c| !c.is_whitespace());
                if before != Some(&'.') && after != Some(&'(') {
                    out.push(chars[start..i].iter().collect());
                }
            }
            out
        };
        let texts: Vec<&str> = std::iter::once(e["grid"]["text"].as_str().unwrap_or(""))
            .chain(e["requires"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()))
            .collect();
        let constants = e["constants"].as_object().expect("constants");
        for word in texts.iter().flat_map(|t| named(t)) {
            if def.bindings.iter().any(|b| b.name == word) {
                continue;
            }
            let c =
                constants.get(&word).unwrap_or_else(|| panic!("{name}: `{word}` of {texts:?} is not in its constants"));
            let value = ck.interface.as_ref().unwrap().consts.iter().find(|(n, _)| *n == word).map(|(_, v)| *v);
            assert_eq!(c["value"].as_i64().map(i128::from), value, "{name}: {word}");
        }
        if def.doc.contains("file header") {
            let file = manifest["files"].as_array().unwrap().iter().find(|f| f["module"] == def.module).unwrap();
            assert!(!file["doc"].as_str().unwrap().is_empty(), "{name} points at an empty file header");
        }

        // Variants: the files hold exactly the kernel's browser WGSL; features and limits.
        let variants = e["variants"].as_array().expect("variants");
        let web: Vec<&kernels::VariantDef> = def.variants.iter().filter(|v| !v.browser_wgsl.is_empty()).collect();
        assert_eq!(variants.len(), web.len(), "{name}");
        assert_eq!(e["native_only_variants"].as_array().unwrap().len(), def.variants.len() - web.len(), "{name}");
        for (v, j) in web.iter().zip(variants) {
            let file = j["file"].as_str().expect("file");
            let source = read(file);
            assert_eq!(source, v.browser_wgsl, "{file}");
            assert_eq!(source.lines().any(|l| l.trim() == "enable f16;"), v.f16, "{file}");
            assert_eq!(source.lines().any(|l| l.trim() == "enable subgroups;"), v.subgroups, "{file}");
            let has = |f: &str| j["features"].as_array().unwrap().iter().any(|x| x == f);
            assert_eq!((has("subgroups"), has("shader-f16")), (v.subgroups, v.f16), "{file}");
            let limits = &j["limits"];
            let [x, y, z] = def.workgroup_size;
            assert_eq!(limits["maxComputeInvocationsPerWorkgroup"], x * y * z, "{file}");
            assert_eq!(
                [
                    &limits["maxComputeWorkgroupSizeX"],
                    &limits["maxComputeWorkgroupSizeY"],
                    &limits["maxComputeWorkgroupSizeZ"]
                ],
                [x, y, z],
                "{file}"
            );
            let storage = def.bindings.iter().filter(|b| b.kind != kernels::BindingKind::Uniform).count();
            assert_eq!(limits["maxStorageBuffersPerShaderStage"], storage, "{file}");
            assert_eq!(limits["maxUniformBuffersPerShaderStage"], def.bindings.len() - storage, "{file}");
            assert_eq!(
                limits["maxBindingsPerBindGroup"],
                def.bindings.iter().map(|b| b.binding + 1).max().unwrap_or(0),
                "{file}"
            );
            assert_eq!(limits["maxComputeWorkgroupStorageSize"].as_u64().unwrap() % 16, 0, "{file}");
        }
    }

    // The facts the issue named, spelled out.
    let kernel = |q: &str| entries.iter().find(|e| e["qualified_name"] == q).unwrap_or_else(|| panic!("{q}"));
    let binding = |q: &str, b: &str| {
        kernel(q)["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == b)
            .unwrap_or_else(|| panic!("{q}.{b}"))
            .clone()
    };
    for (q, b, min) in [
        ("loss::sum_losses", "out", 2),
        ("optimizer::finalize_grad_stats", "stats", 4),
        ("optimizer::adamw_update", "stats", 2),
        ("optimizer::adamw_8bit_update", "stats", 2),
        ("infrastructure::axpy", "y", 1),
    ] {
        assert_eq!(binding(q, b)["min_length"], min, "{q}.{b}");
    }
    for (q, b, access) in [
        ("infrastructure::axpy", "x", "read"),
        ("infrastructure::axpy", "y", "accumulated"),
        ("infrastructure::axpy", "p", "read"),
        ("infrastructure::scale", "x", "read_write"),
        ("infrastructure::fill_zero", "x", "written"),
        ("linear::matmul", "y", "written"),
        ("linear::matmul_at_acc", "y", "accumulated"),
        ("linear::matmul_parts_add", "y", "accumulated"),
        ("embedding::embed_backward", "d_table", "accumulated"),
        ("norm::rmsnorm_dgamma_reduce", "dgamma", "accumulated"),
        ("loss::cross_entropy", "logits", "read_write"),
        ("optimizer::adamw_update", "g", "read_write"),
    ] {
        assert_eq!(binding(q, b)["access"], access, "{q}.{b}");
    }
    // Grids with integer division: 16 workgroups for Dh = 48, S = 64, B·H = 4 (not 12).
    let attention = expr_from_json(&kernel("attention::attention_forward")["grid"]["count"]);
    let p = |path: &[Step]| match path {
        [Step::Field(f)] => Some(match f.as_str() {
            "batch" => 1,
            "heads" => 4,
            "seq" => 64,
            "head_dim" => 48,
            _ => return None,
        }),
        _ => None,
    };
    assert_eq!(attention.eval(&|_| None, &|_, path| p(path)), Some(16));
    // Workgroup memory, by hand from the WGSL: none for fill_zero, the reduction scratch
    // (256 f32) for reduce_sum.
    let wg_memory = |q: &str| kernel(q)["variants"][0]["limits"]["maxComputeWorkgroupStorageSize"].as_u64();
    assert_eq!(wg_memory("infrastructure::fill_zero"), Some(0));
    assert_eq!(wg_memory("infrastructure::reduce_sum"), Some(1024));
    let _ = std::fs::remove_dir_all(&dir);
}
