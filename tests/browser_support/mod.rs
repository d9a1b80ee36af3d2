//! The infrastructure of the browser tests (`tests/browser.rs`, the kernel checks and the
//! JavaScript export; `tests/browser_train.rs`, the training page): finding the tools, building
//! the site (`web/` for `wasm32-unknown-unknown`, `wasm-bindgen`, the pages and scripts of `web/`,
//! and on request the JavaScript export), a file server on 127.0.0.1 that keeps the pages' posts
//! by path, and headless Chromium with WebGPU on SwiftShader (Vulkan on the CPU: subgroups of 4,
//! no `shader-f16`).
//!
//! The tools: `chromium`, the `wasm32-unknown-unknown` target and `wasm-bindgen` (the CLI) at the
//! version of the `wasm-bindgen` crate in Cargo.lock (`.ci/run` installs all three). Without
//! them a test fails under `CI=true` and is skipped with the reason otherwise ([`tools_or_skip`]).
#![allow(dead_code)]

#[path = "../../examples/export_web.rs"]
pub mod export_web;

use kernels_codegen::shape::{Expr, Op, Step};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Largest body a page may post.
const MAX_POST: usize = 64 << 20;

pub fn ci() -> bool {
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

pub struct Tools {
    pub chromium: PathBuf,
    pub wasm_bindgen: PathBuf,
}

/// Finds the tools, or says which is missing.
pub fn tools() -> Result<Tools, String> {
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

/// The tools, or `None` after saying why the test is skipped; under `CI=true` a missing tool
/// fails the test.
pub fn tools_or_skip() -> Option<Tools> {
    match tools() {
        Ok(t) => Some(t),
        Err(why) if ci() => panic!("CI=true, and the browser test cannot run: {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A fresh working directory for one browser test: `(work, site, profile)`, the last two under
/// the first.
fn workdir(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (site, profile) = (work.join("site"), work.join("profile"));
    std::fs::create_dir_all(&site).expect("site dir");
    std::fs::create_dir_all(&profile).expect("profile dir");
    (work, site, profile)
}

/// The files of `web/` the site serves as they are: the kernel-check page, the script of its
/// JavaScript export checks, and the training page.
pub const PAGES: [&str; 3] = ["index.html", "export-checks.js", "train.html"];

/// Builds the site both browser tests load: the wasm module of `web/` and its JavaScript glue,
/// and [`PAGES`]. The module goes to one target directory, `target/wasm`, for both tests (the
/// second build finds it done; cargo's lock orders two at once). The JavaScript export under
/// `export/` is [`write_js_export`]'s. Returns the fresh working directory of test `name`:
/// `(work, site, profile)` (see [`workdir`]).
pub fn build_site(tools: &Tools, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (work, site, profile) = workdir(name);
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
        .arg(&site)
        .arg(&wasm)
        .status()
        .expect("run wasm-bindgen");
    assert!(status.success(), "wasm-bindgen failed on {}", wasm.display());
    for page in PAGES {
        std::fs::copy(Path::new(ROOT).join("web").join(page), site.join(page))
            .unwrap_or_else(|e| panic!("copy web/{page}: {e}"));
    }
    (work, site, profile)
}

/// Writes the JavaScript export (`examples/export_web.rs`: WGSL, `manifest.json`, its schema,
/// `kernels.js`) to `site/export`, where `export-checks.js` loads it; checks it holds every
/// kernel compiled into this crate.
pub fn write_js_export(site: &Path) {
    let n = export_web::export(&site.join("export")).expect("write the JS export");
    assert_eq!(n, kernels::all_kernels().count(), "the JS export's kernels");
}

/// The bodies the page posted, by path (`/done`, `/checkpoint`, …).
type Posted = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// A static file server on 127.0.0.1 for the pages, plus `POST` to any path (kept, by path),
/// and `GET /hold`, answered once the page has posted `/done` (or at the deadline): a pending
/// request keeps headless Chromium's virtual clock from running out while the GPU works. Stops
/// when dropped or at the deadline, whichever comes first.
pub struct Server {
    pub port: u16,
    stop: Arc<AtomicBool>,
    posted: Posted,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start(root: PathBuf, limit: Duration) -> Server {
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

    /// The body last posted to `path` (e.g. `/done`).
    pub fn posted(&self, path: &str) -> Option<Vec<u8>> {
        self.posted.lock().unwrap_or_else(|p| p.into_inner()).get(path).cloned()
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
    let done = || posted.lock().unwrap_or_else(|p| p.into_inner()).contains_key("/done");
    match (method, path) {
        ("POST", path) => {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if length > MAX_POST {
                return respond(&mut stream, "413 Content Too Large", "text/plain", b"");
            }
            let mut body = data[head_end..].to_vec();
            while body.len() < length {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buf[..n]);
            }
            posted.lock().unwrap_or_else(|p| p.into_inner()).insert(path.to_string(), body);
            respond(&mut stream, "200 OK", "text/plain", b"")
        }
        ("GET", "/hold") => {
            while !done() && !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
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

/// What one page load left: the DOM Chromium dumped, the bodies the page posted (by path) and
/// the seconds Chromium ran.
pub struct PageRun {
    pub dom: String,
    pub posted: HashMap<String, Vec<u8>>,
    pub seconds: f64,
}

/// Serves `site` and loads `page` (its path and query, e.g. `index.html?report`) in headless
/// Chromium for at most `limit`; the server stops afterwards.
pub fn load_page(tools: &Tools, site: &Path, profile: &Path, page: &str, limit: Duration) -> PageRun {
    let server = Server::start(site.to_path_buf(), limit + Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{}/{page}", server.port);
    let started = Instant::now();
    let dom = chromium(tools, &url, profile, limit);
    let seconds = started.elapsed().as_secs_f64();
    let posted = std::mem::take(&mut *server.posted.lock().unwrap_or_else(|p| p.into_inner()));
    PageRun { dom, posted, seconds }
}

/// Runs headless Chromium on `url` (WebGPU on SwiftShader) for at most `limit` and returns the
/// DOM it dumps.
pub fn chromium(tools: &Tools, url: &str, profile: &Path, limit: Duration) -> String {
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
    let deadline = Instant::now() + limit;
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

/// An expression tree of the manifest as the macro's own type.
pub fn expr_from_json(v: &Value) -> Expr {
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
