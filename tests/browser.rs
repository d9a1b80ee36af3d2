//! The kernels in a real browser. Builds the page crate (`web/`) for `wasm32-unknown-unknown`,
//! runs `wasm-bindgen` on it, writes the JavaScript export beside it
//! (`examples/export_web.rs`), serves the files from 127.0.0.1, loads the page in headless
//! Chromium with WebGPU on SwiftShader (Vulkan on the CPU: subgroups of 4, no `shader-f16`), and
//! fails unless every check in the page passed.
//!
//! Needs `chromium`, the `wasm32-unknown-unknown` target and `wasm-bindgen` (the CLI) at the
//! version of the `wasm-bindgen` crate in Cargo.lock (`.ci/run` installs all three). Without
//! them the test fails under `CI=true` and is skipped with the reason otherwise.

#[path = "../examples/export_web.rs"]
#[allow(dead_code)]
mod export_web;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most the whole browser run may take (the server stops by itself after it).
const BROWSER_LIMIT: Duration = Duration::from_secs(240);

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The `version` of package `name` in Cargo.lock.
fn locked_version(name: &str) -> Option<String> {
    let lock = std::fs::read_to_string(Path::new(ROOT).join("Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"") {
            let version = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(version.to_string());
        }
    }
    None
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if let Some(home) = std::env::var_os("CARGO_HOME").or_else(|| {
        std::env::var_os("HOME").map(|h| {
            let mut p = PathBuf::from(h);
            p.push(".cargo");
            p.into_os_string()
        })
    }) {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    names.iter().flat_map(|n| dirs.iter().map(move |d| d.join(n))).find(|p| p.is_file())
}

struct Tools {
    chromium: PathBuf,
    wasm_bindgen: PathBuf,
}

/// Finds the tools, or says which is missing.
fn tools() -> Result<Tools, String> {
    let chromium = match std::env::var_os("CHROMIUM") {
        Some(p) => PathBuf::from(p),
        None => on_path(&["chromium", "chromium-browser", "google-chrome"])
            .ok_or("no `chromium` on PATH (Debian: `apt-get install chromium`)")?,
    };
    let wasm_bindgen =
        on_path(&["wasm-bindgen"]).ok_or("no `wasm-bindgen` CLI (`cargo install --locked wasm-bindgen-cli`)")?;
    let want = locked_version("wasm-bindgen").ok_or("no `wasm-bindgen` in Cargo.lock")?;
    let out =
        Command::new(&wasm_bindgen).arg("--version").output().map_err(|e| format!("wasm-bindgen --version: {e}"))?;
    let have = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if have.split_whitespace().nth(1) != Some(want.as_str()) {
        return Err(format!(
            "`{have}` does not match the wasm-bindgen crate {want} in Cargo.lock (`cargo install --locked wasm-bindgen-cli --version {want}`)"
        ));
    }
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc --print sysroot: {e}"))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if !sysroot.join("lib/rustlib/wasm32-unknown-unknown").is_dir() {
        return Err(
            "the wasm32-unknown-unknown target is not installed (`rustup target add wasm32-unknown-unknown`)".into()
        );
    }
    Ok(Tools { chromium, wasm_bindgen })
}

/// Builds the page: the wasm module, its JavaScript glue, `index.html` and the JS export.
fn build_site(tools: &Tools, site: &Path) {
    // A target directory of its own: the outer `cargo test` holds the lock on the usual one.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("wasm");
    let started = Instant::now();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(ROOT)
        .args(["build", "--locked", "-p", "kernels-web", "--lib", "--target", "wasm32-unknown-unknown"])
        .args(["--profile", "wasm-page", "--target-dir"])
        .arg(&target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(status.success(), "the wasm build of web/ failed");
    eprintln!("wasm build: {:.1} s", started.elapsed().as_secs_f64());

    let wasm = target_dir.join("wasm32-unknown-unknown/wasm-page/kernels_web.wasm");
    let status = Command::new(&tools.wasm_bindgen)
        .args(["--target", "web", "--no-typescript", "--out-dir"])
        .arg(site)
        .arg(&wasm)
        .status()
        .expect("run wasm-bindgen");
    assert!(status.success(), "wasm-bindgen failed on {}", wasm.display());
    std::fs::copy(Path::new(ROOT).join("web/index.html"), site.join("index.html")).expect("copy index.html");
    let n = export_web::export(&site.join("export")).expect("write the JS export");
    assert_eq!(n, kernels::all_kernels().count());
}

/// What the page posted to `/done`.
type Posted = Arc<Mutex<Option<String>>>;

/// A static file server on 127.0.0.1 for the page, plus `GET /hold` (answered once the page
/// has posted `/done`, or at the deadline) and `POST /done`. Stops when dropped or at the
/// deadline, whichever comes first.
struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    posted: Posted,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(root: PathBuf, limit: Duration) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let port = listener.local_addr().expect("address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let posted: Posted = Arc::default();
        let deadline = Instant::now() + limit;
        let (stop2, posted2) = (stop.clone(), posted.clone());
        let thread = std::thread::spawn(move || {
            let mut handlers = Vec::new();
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (root, stop, posted) = (root.clone(), stop2.clone(), posted2.clone());
                        handlers.push(std::thread::spawn(move || {
                            let _ = serve(stream, &root, &stop, &posted, deadline);
                        }));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => break,
                }
            }
            for h in handlers {
                let _ = h.join();
            }
        });
        Server { port, stop, posted, thread: Some(thread) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request on `stream` (one request per connection).
fn serve(
    mut stream: TcpStream,
    root: &Path,
    stop: &AtomicBool,
    posted: &Posted,
    deadline: Instant,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 || data.len() > 1 << 16 {
            return Ok(());
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or("/"));
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let respond = |stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]| -> std::io::Result<()> {
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            body.len()
        )?;
        stream.write_all(body)?;
        stream.flush()
    };
    match (method, path) {
        ("POST", "/done") => {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0)
                .min(1 << 22);
            let mut body = data[head_end..].to_vec();
            while body.len() < length {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buf[..n]);
            }
            *posted.lock().unwrap_or_else(|p| p.into_inner()) = Some(String::from_utf8_lossy(&body).into_owned());
            respond(&mut stream, "200 OK", "text/plain", b"")
        }
        ("GET", "/hold") => {
            while posted.lock().unwrap_or_else(|p| p.into_inner()).is_none()
                && !stop.load(Ordering::Relaxed)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            respond(&mut stream, "200 OK", "text/plain", b"ok")
        }
        ("GET", path) => {
            let relative = path.trim_start_matches('/');
            let relative = if relative.is_empty() { "index.html" } else { relative };
            if relative.split('/').any(|part| part == ".." || part.is_empty()) {
                return respond(&mut stream, "404 Not Found", "text/plain", b"not found");
            }
            let kind = match relative.rsplit('.').next() {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => "text/javascript",
                Some("wasm") => "application/wasm",
                Some("json") => "application/json",
                _ => "text/plain; charset=utf-8",
            };
            match std::fs::read(root.join(relative)) {
                Ok(body) => respond(&mut stream, "200 OK", kind, &body),
                Err(_) => respond(&mut stream, "404 Not Found", "text/plain", b"not found"),
            }
        }
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", b""),
    }
}

/// Runs headless Chromium on `url` and returns the DOM it dumps.
fn chromium(tools: &Tools, url: &str, profile: &Path) -> String {
    let mut child = Command::new(&tools.chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-unsafe-webgpu",
            "--enable-features=Vulkan",
            "--use-vulkan=swiftshader",
            "--use-webgpu-adapter=swiftshader",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=60000", "--dump-dom", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        let _ = stdout.read_to_string(&mut dom);
        dom
    });
    let deadline = Instant::now() + BROWSER_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    reader.join().unwrap_or_default()
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
    let tools = match tools() {
        Ok(t) => t,
        Err(why) if ci() => panic!("CI=true, and the browser test cannot run: {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let started = Instant::now();
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (site, profile) = (work.join("site"), work.join("profile"));
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::create_dir_all(&profile).expect("profile dir");
    build_site(&tools, &site);

    let server = Server::start(site.clone(), BROWSER_LIMIT + Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{}/index.html?report", server.port);
    let browser_started = Instant::now();
    let dom = chromium(&tools, &url, &profile);
    eprintln!("chromium: {:.1} s", browser_started.elapsed().as_secs_f64());
    let posted = server.posted.lock().unwrap_or_else(|p| p.into_inner()).clone();
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
