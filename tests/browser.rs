//! The kernels in a real browser. Builds the page crate (`web/`) for `wasm32-unknown-unknown`,
//! runs `wasm-bindgen` on it, writes the JavaScript export beside it
//! (`examples/export_web.rs`: WGSL, manifest.json, kernels.js), README's JavaScript example and
//! the Rust semantics of the export's expression trees and grids, serves the files from
//! 127.0.0.1, loads the page in headless Chromium with WebGPU on SwiftShader (Vulkan on the CPU:
//! subgroups of 4, no `shader-f16`), and fails unless every check in the page passed: the wasm
//! checks, and `web/export-checks.js` driving kernels through `kernels.js` from plain JavaScript.
//!
//! `the_export_manifest_is_complete_and_true` checks the manifest without a browser: against its
//! JSON Schema, the kernels compiled into this crate and the macro's compile stage.
//!
//! The tools, the site build, the server and the Chromium runner are `tests/browser_support`'s,
//! shared with `tests/browser_train.rs`: it needs `chromium`, the `wasm32-unknown-unknown` target
//! and `wasm-bindgen` (the CLI) at the version of the `wasm-bindgen` crate in Cargo.lock
//! (`.ci/run` installs all three). Without them the test fails under `CI=true` and is skipped with
//! the reason otherwise.

mod browser_support;
mod common;

use browser_support::{build_site, export_web, load_page, tools_or_skip, write_js_export};
use kernels_codegen::shape::{Expr, Op, Step};
use rand::Rng as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The most the whole browser run may take (the server stops by itself after it).
const BROWSER_LIMIT: Duration = Duration::from_secs(240);

/// What this test adds to the site `build_site` builds: the JavaScript export, README's
/// JavaScript example as a module (`readme.js`) and the Rust semantics of the export's
/// expression trees and grids (`semantics.json`).
fn add_test_files(site: &Path) {
    write_js_export(site);
    let (snippet, _) = readme_js();
    std::fs::write(site.join("readme.js"), format!("{snippet}\nexport {{ result }};\n")).expect("write readme.js");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(site.join("export/manifest.json")).expect("manifest"))
            .expect("manifest.json is JSON");
    std::fs::write(site.join("semantics.json"), semantics(&manifest).to_string()).expect("write semantics.json");
}

/// README's JavaScript example (the first `js` block after "From JavaScript, without Rust") and
/// the values its last line says it gives (`const result = …; // Float32Array [12, 24, 36]`).
fn readme_js() -> (String, Vec<f64>) {
    let readme = std::fs::read_to_string(Path::new(browser_support::ROOT).join("README.md")).expect("README.md");
    let from = readme.find("**From JavaScript, without Rust:**").expect("README's JavaScript section");
    let start = readme[from..].find("```js\n").expect("a ```js block in README's JavaScript section") + from + 6;
    let snippet = &readme[start..start + readme[start..].find("```").expect("the block's end")];
    let claim = snippet
        .lines()
        .find(|l| l.starts_with("const result"))
        .and_then(|l| l.split("// Float32Array ").nth(1))
        .expect("the example ends with `const result = …; // Float32Array [values]`");
    let values: Vec<f64> = serde_json::from_str(claim.trim()).expect("the claimed values are a JSON array");
    (snippet.to_string(), values)
}

/// An expression tree of the manifest as the macro's own type.
fn expr_from_json(v: &Value) -> Expr {
    if let Some(i) = v.get("int") {
        return Expr::Int(i.as_str().expect("int is a string").parse().expect("int is decimal"));
    }
    if let Some(b) = v.get("len") {
        return Expr::Len { binding: b.as_str().expect("len names a binding").into() };
    }
    if let Some(b) = v.get("uniform") {
        let path = v["path"]
            .as_array()
            .expect("path")
            .iter()
            .map(|s| match s {
                Value::String(f) => Step::Field(f.clone()),
                Value::Number(n) => Step::Component(n.as_u64().expect("component") as u32),
                other => panic!("path step {other}"),
            })
            .collect();
        return Expr::Uniform { binding: b.as_str().expect("uniform").into(), path };
    }
    let op = match v["op"].as_str().expect("op") {
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" => Op::Mul,
        "div" => Op::Div,
        "rem" => Op::Rem,
        "ceil_div" => Op::CeilDiv,
        "min" => Op::Min,
        "max" => Op::Max,
        other => panic!("unknown op {other}"),
    };
    let args = v["args"].as_array().expect("args");
    assert_eq!(args.len(), 2, "two operands: {v}");
    Expr::Binary { op, left: Box::new(expr_from_json(&args[0])), right: Box::new(expr_from_json(&args[1])) }
}

/// The leaves of a tree: (`len` bindings, uniform keys `binding.path…`).
fn leaves(e: &Expr, lens: &mut Vec<String>, uniforms: &mut Vec<String>) {
    match e {
        Expr::Int(_) => {}
        Expr::Len { binding } => lens.push(binding.clone()),
        Expr::Uniform { binding, path } => uniforms.push(uniform_key(binding, path)),
        Expr::Binary { left, right, .. } => {
            leaves(left, lens, uniforms);
            leaves(right, lens, uniforms);
        }
    }
}

fn uniform_key(binding: &str, path: &[Step]) -> String {
    std::iter::once(binding.to_string())
        .chain(path.iter().map(|s| match s {
            Step::Field(f) => f.clone(),
            Step::Component(i) => i.to_string(),
        }))
        .collect::<Vec<_>>()
        .join(".")
}

/// Test vectors for kernels.js's `evaluate` and `dispatch1d`, computed by the Rust reference
/// (`Expr::eval`, the runtime's `dispatch_1d`): every grid and `@requires` tree of the manifest
/// under random leaf values (edge values included), and trees built to fail or to truncate.
fn semantics(manifest: &Value) -> Value {
    let mut rng = common::rng("semantics.json");
    let mut trees: Vec<Expr> = Vec::new();
    for k in manifest["kernels"].as_array().expect("kernels") {
        for r in k["requires"].as_array().expect("requires") {
            trees.push(expr_from_json(&r["left"]));
            trees.push(expr_from_json(&r["right"]));
        }
        if let Some(c) = k["grid"].get("count") {
            trees.push(expr_from_json(c));
        }
        if let Some(dims) = k["grid"].get("dims") {
            trees.extend(dims.as_array().expect("dims").iter().map(expr_from_json));
        }
    }
    let int = |v: i128| Box::new(Expr::Int(v));
    let bin = |op: Op, l: Box<Expr>, r: Box<Expr>| Expr::Binary { op, left: l, right: r };
    let n = || Box::new(Expr::Uniform { binding: "p".into(), path: vec![Step::Field("n".into())] });
    trees.extend([
        bin(Op::Div, int(-7), int(2)),
        bin(Op::Rem, int(-7), int(2)),
        bin(Op::Rem, int(7), int(-2)),
        bin(Op::Div, n(), int(0)),
        bin(Op::Rem, n(), int(0)),
        bin(Op::CeilDiv, int(-1), n()),
        bin(Op::CeilDiv, n(), int(0)),
        bin(Op::CeilDiv, n(), int(-3)),
        bin(Op::Add, int(i128::MAX), int(1)),
        bin(Op::Sub, int(i128::MIN), int(1)),
        bin(Op::Mul, int(i128::MAX / 2 + 1), int(2)),
        bin(Op::Div, int(i128::MIN), int(-1)),
        bin(Op::Rem, int(i128::MIN), int(-1)),
        bin(Op::Min, int(-5), n()),
        bin(Op::Max, int(-5), n()),
        bin(
            Op::Mul,
            Box::new(bin(Op::Div, int(1024), n())),
            Box::new(bin(
                Op::CeilDiv,
                int(64),
                Box::new(bin(Op::Min, int(32), Box::new(bin(Op::Div, int(1024), n())))),
            )),
        ),
    ]);
    let edges: [i128; 8] = [0, 1, 2, 3, 48, 4096, 65535, u32::MAX as i128];
    let mut expressions = Vec::new();
    for tree in &trees {
        for round in 0..6 {
            let (mut lens, mut uniforms) = (Vec::new(), Vec::new());
            leaves(tree, &mut lens, &mut uniforms);
            let mut pick = || match round {
                0..=2 => edges[rng.random_range(0..edges.len())],
                3 => rng.random_range(0..100i128),
                _ => rng.random_range(0..=u32::MAX as i128),
            };
            let lens: BTreeMap<String, i128> = lens.into_iter().map(|b| (b, pick())).collect();
            let uniforms: BTreeMap<String, i128> = uniforms.into_iter().map(|u| (u, pick())).collect();
            let value = tree.eval(&|b| lens.get(b).copied(), &|b, path| uniforms.get(&uniform_key(b, path)).copied());
            expressions.push(json!({
                "expr": kernels_codegen::manifest::expr_json(tree).compact().parse::<Value>().expect("tree JSON"),
                "lengths": lens.iter().map(|(k, v)| (k.clone(), json!(*v as u64))).collect::<serde_json::Map<_, _>>(),
                "uniforms": uniforms.iter().map(|(k, v)| (k.clone(), json!(*v as u64))).collect::<serde_json::Map<_, _>>(),
                "value": value.map(|v| v.to_string()),
            }));
        }
    }
    let mut grids = Vec::new();
    for max in [1u32, 3, 4, 65535] {
        let m = max as u64;
        for n in [0, 1, m - 1, m, m + 1, 2 * m + 1, m * m - 1, m * m, m * m + 1, rng.random_range(0..m * m + 2)] {
            grids.push(json!([n, max, kernels::dispatch_1d(n, max)]));
        }
    }
    json!({ "expressions": expressions, "dispatch_1d": grids })
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in a start tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
    tag[start..].split('"').next()
}

/// (`data-result` of `#result`, the page's lines as (status, text)).
fn parse(dom: &str) -> (Option<String>, Vec<(String, String)>) {
    let result = dom
        .find("id=\"result\"")
        .and_then(|i| dom[..i].rfind('<').map(|s| &dom[s..]))
        .and_then(|tag| attribute(&tag[..tag.find('>').unwrap_or(tag.len())], "data-result"))
        .map(str::to_string);
    let mut lines = Vec::new();
    for item in dom.split("<li ").skip(1) {
        let Some(end) = item.find("</li>") else { continue };
        let Some(open) = item.find('>') else { continue };
        let status = attribute(&item[..open], "data-status").unwrap_or("?").to_string();
        lines.push((status, unescape(&item[open + 1..end])));
    }
    (result, lines)
}

#[test]
fn every_check_passes_in_headless_chromium() {
    let Some(tools) = tools_or_skip() else { return };
    let started = Instant::now();
    let (work, site, profile) = build_site(&tools, "browser");
    add_test_files(&site);

    // The page's checks (the wasm ones and export-checks.js) draw their inputs from this seed.
    let seed = common::seed("the page's checks");
    let run = load_page(&tools, &site, &profile, &format!("index.html?report&seed={seed}"), BROWSER_LIMIT);
    eprintln!("chromium: {:.1} s", run.seconds);
    let _ = std::fs::remove_dir_all(&work);
    let (dom, posted) = (run.dom, run.posted.get("/done").map(|body| String::from_utf8_lossy(body).into_owned()));

    let (result, lines) = parse(&dom);
    let listing = if lines.is_empty() {
        format!("(no lines in the page; posted: {posted:?}; DOM: {} bytes)\n{}", dom.len(), &dom[..dom.len().min(4000)])
    } else {
        lines.iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("\n")
    };
    let failures: Vec<&str> = lines.iter().filter(|(s, _)| s == "fail").map(|(_, t)| t.as_str()).collect();
    let text = |status: &str, prefix: &str| lines.iter().any(|(s, t)| s == status && t.starts_with(prefix));
    eprintln!("{listing}");
    assert_eq!(result.as_deref(), Some("pass"), "the page did not pass:\n{listing}");
    assert!(failures.is_empty(), "failed checks:\n{}", failures.join("\n"));

    // What SwiftShader is known to offer: subgroups of 4 (the reductions must be right there)
    // and no shader-f16, so exactly the library's f16 kernels are reported as needing it.
    assert!(text("info", "info subgroups: on, subgroup size in use: 4"), "expected subgroups of 4:\n{listing}");
    assert!(text("pass", "pass probe Σ0..255: 32640"), "the reduction probe:\n{listing}");
    for k in kernels::all_kernels() {
        let name = k.qualified_name();
        let (status, what) = if k.needs_f16() { ("needs-f16", "needs shader-f16") } else { ("pass", "built") };
        assert!(
            text(status, &format!("{status} pipeline {name}: {what}")),
            "pipeline {name}: expected {status}:\n{listing}"
        );
    }
    // NaN and ±Inf where WGSL lets a compiler fold a `v != v` test away (SwiftShader folded the
    // one clamp_inplace had): every kernel without f16 whose doc says what they do, given them.
    let mut non_finite = vec![
        "infrastructure::clamp_inplace",
        "optimizer::reduce_norm_sq + finalize_grad_stats (NaN, ±Inf)",
        "optimizer::adamw_update p (NaN, ±Inf gradients skipped)",
        "optimizer::adamw_8bit_update p (NaN, ±Inf gradients skipped)",
        "precise::precise_absmax (NaN, ±Inf left out)",
        "activation::gelu_inplace (NaN)",
    ];
    if !kernels::attention16::attention16_ds::KERNEL.needs_f16() {
        non_finite.extend(["attention16::attention16_ds (NaN) flag", "attention16::attention16_ds (+Inf) flag"]);
    }
    for check in non_finite {
        assert!(text("pass", &format!("pass {check}:")), "{check}:\n{listing}");
    }
    // The JavaScript export, from plain JavaScript through kernels.js: its pipelines (exactly
    // the kernels whose every variant needs shader-f16 cannot run here, as in the wasm build)…
    assert!(text("pass", "pass js-export pipelines"), "the JS export's pipelines:\n{listing}");
    let js_f16: Vec<&str> = lines
        .iter()
        .filter(|(s, _)| s == "needs-f16")
        .filter_map(|(_, t)| t.strip_prefix("needs-f16 js-export pipeline ")?.split(": ").next())
        .collect();
    let f16: Vec<String> = kernels::all_kernels().filter(|k| k.needs_f16()).map(|k| k.qualified_name()).collect();
    assert_eq!(js_f16, f16, "the kernels kernels.js could not build:\n{listing}");
    // … and kernels of every kind against float64 references in JavaScript, one with a grid
    // that needs integer division, several past the 2-D split, and the misuse it must refuse.
    for check in [
        "infrastructure::axpy",
        "infrastructure::clamp_inplace",
        "infrastructure::reduce_sum",
        "infrastructure::reduce_sum without subgroups",
        "linear::matmul",
        "linear::matmul_at_split",
        "linear::matmul_parts_add",
        "norm::rmsnorm_forward",
        "loss::cross_entropy",
        "rope::rope_q",
        "embedding::embed_lookup",
        "optimizer::adamw_update",
        "attention::attention_forward grid",
        "attention::attention_forward",
        "activation::swiglu_combine 2-D grid",
        "activation::swiglu_combine 2-D",
        "rope::rope_k 2-D grid",
        "rope::rope_k 2-D",
        "loss::cross_entropy 2-D",
        "a caller-chosen grid",
        "refuses a short constant length",
        "refuses an explicit length",
        "refuses aliasing",
        "refuses a missing binding",
        "refuses an unknown binding",
        "refuses a negative u32",
        "refuses a missing field",
        "refuses an odd head size",
        "refuses an unknown kernel",
        "refuses a grid past max²",
        "an empty grid",
        "semantics",
        "device errors",
    ] {
        assert!(text("pass", &format!("pass js-export {check}:")), "js-export {check}:\n{listing}");
    }
    // README's example ran and gave what README says.
    let (_, claimed) = readme_js();
    let ran = lines
        .iter()
        .find_map(|(s, t)| (s == "pass").then(|| t.strip_prefix("pass readme-snippet: result ")).flatten())
        .unwrap_or_else(|| panic!("README's JavaScript example did not run:\n{listing}"));
    let got: Vec<f64> = serde_json::from_str(ran).expect("the example's result");
    assert_eq!(got, claimed, "README's JavaScript example gives {got:?}, README says {claimed:?}");
    eprintln!("browser test: {:.1} s in all", started.elapsed().as_secs_f64());
}

/// A small JSON Schema validator: the keywords `web/export/manifest.schema.json` uses (and
/// nothing silently ignored). Returns the first errors found.
fn validate(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = schema.as_object().unwrap_or_else(|| panic!("schema at {at} is not an object"));
    let fail = |errors: &mut Vec<String>, e: String| {
        if errors.len() < 20 {
            errors.push(format!("{at}: {e}"));
        }
    };
    for key in schema.keys() {
        assert!(
            [
                "$schema",
                "$id",
                "title",
                "description",
                "$ref",
                "$defs",
                "type",
                "const",
                "enum",
                "properties",
                "required",
                "additionalProperties",
                "items",
                "minItems",
                "maxItems",
                "minimum",
                "maximum",
                "pattern",
                "oneOf",
            ]
            .contains(&key.as_str()),
            "the schema uses `{key}`, which this validator does not know"
        );
    }
    if let Some(r) = schema.get("$ref") {
        let name = r.as_str().and_then(|r| r.strip_prefix("#/$defs/")).expect("$ref to #/$defs/…");
        validate(root, &root["$defs"][name], v, at, errors);
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => panic!("type at {at}"),
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            other => panic!("type {other}"),
        });
        if !ok {
            fail(errors, format!("{v} is not {types:?}"));
        }
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        fail(errors, format!("{v} is not {c}"));
    }
    if let Some(e) = schema.get("enum")
        && !e.as_array().expect("enum").contains(v)
    {
        fail(errors, format!("{v} is not one of {e}"));
    }
    if let Some(n) = v.as_f64() {
        if schema.get("minimum").and_then(Value::as_f64).is_some_and(|m| n < m) {
            fail(errors, format!("{v} is below the minimum"));
        }
        if schema.get("maximum").and_then(Value::as_f64).is_some_and(|m| n > m) {
            fail(errors, format!("{v} is over the maximum"));
        }
    }
    if let Some(p) = schema.get("pattern") {
        assert_eq!(p, "^-?[0-9]+$", "the only pattern this validator knows");
        let s = v.as_str().unwrap_or("");
        let digits = s.strip_prefix('-').unwrap_or(s);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            fail(errors, format!("{v} is not a decimal integer"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !obj.contains_key(r.as_str().expect("required")) {
                fail(errors, format!("`{r}` is missing"));
            }
        }
        for (key, value) in obj {
            match (props.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
                (Some(p), _) => validate(root, p, value, &format!("{at}.{key}"), errors),
                (None, Some(Value::Bool(false))) => {
                    fail(errors, format!("`{key}` is not in the schema (undocumented)"))
                }
                (None, Some(extra)) => validate(root, extra, value, &format!("{at}.{key}"), errors),
                (None, None) => {}
            }
        }
    }
    if let Some(items) = v.as_array() {
        if let Some(item) = schema.get("items") {
            for (i, x) in items.iter().enumerate() {
                validate(root, item, x, &format!("{at}[{i}]"), errors);
            }
        }
        if schema.get("minItems").and_then(Value::as_u64).is_some_and(|m| (items.len() as u64) < m) {
            fail(errors, format!("fewer than {} items", schema["minItems"]));
        }
        if schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| items.len() as u64 > m) {
            fail(errors, format!("more than {} items", schema["maxItems"]));
        }
    }
    if let Some(options) = schema.get("oneOf") {
        let matching = options
            .as_array()
            .expect("oneOf")
            .iter()
            .filter(|o| {
                let mut e = Vec::new();
                validate(root, o, v, at, &mut e);
                e.is_empty()
            })
            .count();
        if matching != 1 {
            fail(errors, format!("{} matches {matching} of the oneOf alternatives, not exactly one", v));
        }
    }
}

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
    let mut errors = Vec::new();
    validate(&schema, &schema, &manifest, "manifest", &mut errors);
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
        let mut errors = Vec::new();
        validate(&schema, &schema, &m, "manifest", &mut errors);
        assert!(!errors.is_empty(), "the schema check misses {what}");
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
        let needs_f16 = e["features"].as_array().unwrap().iter().any(|f| f == "shader-f16");
        assert_eq!(needs_f16, def.needs_f16(), "{name}");

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
