//! The kernels in a real browser. Builds the page crate (`web/`) for `wasm32-unknown-unknown`,
//! runs `wasm-bindgen` on it, writes the JavaScript export beside it
//! (`examples/export_web.rs`: WGSL, manifest.json, kernels.js), README's JavaScript example and
//! the Rust semantics of the export's expression trees and grids, serves the files from
//! 127.0.0.1, loads the page in headless Chromium with WebGPU on SwiftShader (Vulkan on the CPU:
//! subgroups of 4, no `shader-f16`), and fails unless every check in the page passed: the wasm
//! checks, and `web/export-checks.js` driving kernels through `kernels.js` from plain JavaScript.
//!
//! The manifest's checks that need no browser are `tests/manifest.rs`'s.
//!
//! The tools, the site build, the server and the Chromium runner are `tests/browser_support`'s,
//! shared with `tests/browser_train.rs`: it needs `chromium`, the `wasm32-unknown-unknown` target
//! and `wasm-bindgen` (the CLI) at the version of the `wasm-bindgen` crate in Cargo.lock
//! (`.ci/run` installs all three). Without them the test fails under `CI=true` and is skipped with
//! the reason otherwise.

mod browser_support;
mod common;

use browser_support::{build_site, expr_from_json, load_page, tools_or_skip, write_js_export};
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
        "linear::precise_absmax (NaN, ±Inf left out)",
        "activation::gelu_inplace (NaN)",
    ];
    if !kernels::backward_attention::attention_ds_f16::KERNEL.needs_f16() {
        non_finite.extend([
            "backward_attention::attention_ds_f16 (NaN) flag",
            "backward_attention::attention_ds_f16 (+Inf) flag",
        ]);
    }
    for check in non_finite {
        assert!(text("pass", &format!("pass {check}:")), "{check}:\n{listing}");
    }
    // The JavaScript export, from plain JavaScript through kernels.js: its pipelines (exactly
    // the kernels with no browser variant, tensor-core ones, and those whose every variant needs
    // shader-f16 cannot run here)…
    assert!(text("pass", "pass js-export pipelines"), "the JS export's pipelines:\n{listing}");
    let js_status = |status: &str| -> Vec<&str> {
        let prefix = format!("{status} js-export pipeline ");
        lines
            .iter()
            .filter(|(s, _)| s == status)
            .filter_map(|(_, t)| t.strip_prefix(prefix.as_str())?.split(": ").next())
            .collect()
    };
    let names = |keep: &dyn Fn(&kernels::KernelDef) -> bool| -> Vec<String> {
        kernels::all_kernels().filter(|k| keep(k)).map(|k| k.qualified_name()).collect()
    };
    assert_eq!(js_status("native-only"), names(&|k| k.needs_tensor_cores()), "native-only kernels:\n{listing}");
    assert_eq!(
        js_status("needs-f16"),
        names(&|k| k.needs_f16() && !k.needs_tensor_cores()),
        "the kernels kernels.js could not build:\n{listing}"
    );
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
