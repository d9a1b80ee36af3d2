//! The kernels in a real browser. Builds the page crate (`web/`) for `wasm32-unknown-unknown`,
//! runs `wasm-bindgen` on it, writes the JavaScript export beside it
//! (`examples/export_web.rs`), serves the files from 127.0.0.1, loads the page in headless
//! Chromium with WebGPU on SwiftShader (Vulkan on the CPU: subgroups of 4, no `shader-f16`), and
//! fails unless every check in the page passed.
//!
//! The tools, the site build, the server and Chromium are in `browser_support` (shared with
//! `tests/browser_train.rs`): without the tools the test fails under `CI=true` and is skipped
//! with the reason otherwise.

#[path = "../examples/export_web.rs"]
#[allow(dead_code)]
mod export_web;

mod browser_support;

use browser_support::{Server, build_site, chromium, tools_or_skip, workdir};
use std::path::Path;
use std::time::{Duration, Instant};

/// The most the whole browser run may take (the server stops by itself after it).
const BROWSER_LIMIT: Duration = Duration::from_secs(240);

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
    let (work, site, profile) = workdir("browser");
    build_site(&tools, &site);
    let n = export_web::export(&site.join("export")).expect("write the JS export");
    assert_eq!(n, kernels::all_kernels().count());

    let server = Server::start(site.clone(), BROWSER_LIMIT + Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{}/index.html?report", server.port);
    let browser_started = Instant::now();
    let dom = chromium(&tools, &url, &profile, BROWSER_LIMIT);
    eprintln!("chromium: {:.1} s", browser_started.elapsed().as_secs_f64());
    let posted = server.posted("/done").map(|b| String::from_utf8_lossy(&b).into_owned());
    drop(server);
    let _ = std::fs::remove_dir_all(&work);

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
    assert!(text("pass", "pass js-export pipelines"), "the JS export's pipelines:\n{listing}");
    assert!(text("pass", "pass js-export infrastructure::axpy"), "axpy from JavaScript:\n{listing}");
    eprintln!("browser test: {:.1} s in all", started.elapsed().as_secs_f64());
}

#[test]
fn the_export_manifest_describes_every_kernel() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let n = export_web::export(&dir).expect("export");
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    let manifest: serde_json::Value = serde_json::from_str(&text).expect("manifest.json is JSON");
    assert_eq!(manifest["format"], export_web::FORMAT);
    let entries = manifest["kernels"].as_array().expect("kernels array");
    assert_eq!(entries.len(), kernels::all_kernels().count());
    for (k, e) in kernels::all_kernels().zip(entries) {
        let name = k.qualified_name();
        assert_eq!(e["qualified_name"], name.as_str());
        assert_eq!(e["doc"], k.doc, "{name}");
        assert_eq!(e["workgroup_size"], serde_json::json!(k.workgroup_size), "{name}");
        assert_eq!(e["grid"]["kind"], k.grid.as_str(), "{name}");
        assert_eq!(e["grid"]["expr"], k.grid_expr, "{name}");
        assert_eq!(e["requires"], serde_json::json!(k.requires), "{name}");
        let needs_f16 = e["features"].as_array().expect("features").iter().any(|f| f == "shader-f16");
        assert_eq!(needs_f16, k.needs_f16(), "{name}");
        let bindings = e["bindings"].as_array().expect("bindings");
        assert_eq!(bindings.len(), k.bindings.len(), "{name}");
        for (b, j) in k.bindings.iter().zip(bindings) {
            assert_eq!(j["binding"], b.binding, "{name}");
            assert_eq!(j["name"], b.name, "{name}");
            assert_eq!(j["wgsl_type"], b.wgsl_type, "{name}");
            assert_eq!(j["stride"], b.stride, "{name}");
            assert_eq!(j["min_length"], b.min_elems, "{name}");
            let kind = match b.kind {
                kernels::BindingKind::Read => ("read", "read-only-storage"),
                kernels::BindingKind::ReadWrite => ("read_write", "storage"),
                kernels::BindingKind::Uniform => ("uniform", "uniform"),
            };
            assert_eq!((j["kind"].as_str(), j["buffer_type"].as_str()), (Some(kind.0), Some(kind.1)), "{name}");
        }
        let variants = e["variants"].as_array().expect("variants");
        let web = export_web::web_variants(k);
        assert_eq!(variants.len(), web.len(), "{name}");
        let native_only = e["native_only_variants"].as_array().expect("native_only_variants");
        assert_eq!(native_only.len(), k.variants.len() - web.len(), "{name}");
        for (i, (v, j)) in web.into_iter().zip(variants).enumerate() {
            let file = export_web::variant_file(k, i);
            assert_eq!(j["file"], file.as_str());
            let source = std::fs::read_to_string(dir.join(&file)).expect("wgsl");
            assert_eq!(source, v.browser_wgsl, "{file}");
            // The browser form declares exactly what the variant needs.
            assert_eq!(source.lines().any(|l| l.trim() == "enable f16;"), v.f16, "{file}");
            assert_eq!(source.lines().any(|l| l.trim() == "enable subgroups;"), v.subgroups, "{file}");
            let has = |f: &str| j["features"].as_array().expect("features").iter().any(|x| x == f);
            assert_eq!((has("subgroups"), has("shader-f16")), (v.subgroups, v.f16), "{file}");
        }
    }
    assert_eq!(n, kernels::all_kernels().count());
    let _ = std::fs::remove_dir_all(&dir);
}
