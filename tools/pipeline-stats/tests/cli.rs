//! The binary as a user runs it: arguments, the SPIR-V it writes without a device, and, on the
//! machine's Vulkan device (lavapipe in CI), the pipelines it builds and what it says when the
//! driver cannot report statistics. Without a Vulkan device the device tests fail under
//! `CI=true` and are skipped (saying so) elsewhere.

use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The binary cargo built, or, where only the packed binaries were carried (scripts/device/pack.sh:
/// `tests/pipeline-stats.cli` beside `pipeline-stats`), the one next to the tests folder.
fn binary() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_BIN_EXE_pipeline-stats"));
    if built.exists() {
        return built;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors().skip(1).take(3).map(|d| d.join("pipeline-stats")).find(|p| p.exists()).unwrap_or(built)
}

fn run(args: &[&str]) -> Run {
    let out = Command::new(binary())
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()))
        .env_remove("KERNELS_COOPERATIVE_MATRIX")
        .env_remove("KERNELS_SUBGROUPS")
        .env_remove("KERNELS_F16")
        .output()
        .expect("the binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Whether a Vulkan device is there; without one, fails under `CI=true`.
fn device_or_skip(r: &Run, test: &str) -> bool {
    if r.code == 2 && (r.stderr.contains("no Vulkan device") || r.stderr.contains("no Vulkan loader")) {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "no Vulkan device under CI=true: {}", r.stderr);
        eprintln!("{test}: skipped, no Vulkan device: {}", r.stderr.trim());
        return false;
    }
    true
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pipeline-stats-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn help_and_argument_errors() {
    let r = run(&["--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("usage:") && r.stdout.contains("--override"), "{}", r.stdout);
    let r = run(&["--all", "--variant", "1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.starts_with("pipeline-stats: --variant picks one"), "{}", r.stderr);
    let r = run(&["no_such_kernel"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no library kernel is called `no_such_kernel`"), "{}", r.stderr);
    let r = run(&["linear::matmul", "--spirv-only", "--dump", "/tmp/x", "-o", "M_C=1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("linear::matmul has no override `M_C`"), "{}", r.stderr);
    let r = run(&["--all", "--spirv-only", "--dump", "/tmp/x", "-o", "M_c=1"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no selected kernel declares an override `M_c`"), "{}", r.stderr);
    let r = run(&["--list", "--filter", "nothing_is_called_this"]);
    assert_eq!(r.code, 1);
    let r = run(&["missing.wgsl", "main", "--spirv-only", "--dump", "/tmp/x"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("cannot read missing.wgsl"), "{}", r.stderr);
}

#[test]
fn list_names_every_kernel_with_its_variants() {
    let r = run(&["--list", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<serde_json::Value> = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), kernels::all_kernels().count());
    let g16 = lines.iter().find(|l| l["kernel"] == "linear::gemm16").expect("gemm16 listed");
    assert_eq!(g16["variants"][0]["form"], "coop");
    assert!(g16["overrides"].as_array().unwrap().iter().any(|o| o == "M_C: u32"), "{g16}");
}

/// Without a device: the SPIR-V of a product at a trainer's shape, its WGSL and JSON.
#[test]
fn spirv_only_writes_the_files() {
    let dir = temp_dir("spirv");
    let d = dir.to_str().unwrap();
    let r = run(&["linear::gemm16", "--spirv-only", "--dump", d, "-o", "M_C=8192,N_C=2304,K_C=768", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(
        (j["status"].as_str(), j["form"].as_str(), j["spirv_version"].as_str()),
        (Some("spirv"), Some("coop"), Some("1.6"))
    );
    let file = |ext: &str| dir.join(format!("linear.gemm16.v0.M_C=8192.N_C=2304.K_C=768.{ext}"));
    let spv = std::fs::read(file("spv")).unwrap();
    assert_eq!(&spv[..4], &0x0723_0203u32.to_le_bytes());
    assert_eq!(spv.len() / 4, j["spirv_words"].as_u64().unwrap() as usize);
    let wgsl = std::fs::read_to_string(file("wgsl")).unwrap();
    assert!(wgsl.contains("enable wgpu_cooperative_matrix;"));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file("json")).unwrap()).unwrap();
    assert_eq!(saved["overrides"]["N_C"], 2304.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// On the machine's device: either the driver reports statistics (a GPU driver), or it says
/// clearly that it cannot (lavapipe) and exits with 2.
#[test]
fn statistics_or_a_clear_refusal() {
    let r = run(&["linear::matmul"]);
    if !device_or_skip(&r, "statistics_or_a_clear_refusal") {
        return;
    }
    match r.code {
        0 => {
            assert!(r.stdout.contains("executable 0:"), "{}", r.stdout);
            assert!(!r.stdout.contains("no statistics"), "{}", r.stdout);
        }
        2 => {
            assert!(
                r.stderr.contains("does not implement VK_KHR_pipeline_executable_properties")
                    && r.stderr.contains("cannot report pipeline statistics")
                    && r.stderr.contains("--build-only"),
                "{}",
                r.stderr
            );
            assert!(r.stdout.is_empty(), "nothing is reported as built: {}", r.stdout);
        }
        c => panic!("exit {c}: {}{}", r.stdout, r.stderr),
    }
}

/// Every kernel of the library builds on the driver in the variant the device runs (the
/// others are skipped with the reason), at default and at product shapes.
#[test]
fn every_kernel_builds_on_the_device() {
    for overrides in [None, Some("M_C=256,N_C=192,K_C=320,G_ACC=true,ACC=true")] {
        let mut args = vec!["--all", "--build-only", "--json"];
        if let Some(o) = overrides {
            args.extend(["-o", o]);
        }
        let r = run(&args);
        if !device_or_skip(&r, "every_kernel_builds_on_the_device") {
            return;
        }
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        assert!(r.stderr.starts_with("device: "), "the summary goes to stderr with --json: {}", r.stderr);
        let rows: Vec<serde_json::Value> = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let variants: usize = kernels::all_kernels().map(|k| k.variants.len()).sum();
        assert_eq!(rows.len(), variants);
        for k in kernels::all_kernels() {
            let name = k.qualified_name();
            let mine: Vec<&serde_json::Value> = rows.iter().filter(|r| r["kernel"] == name.as_str()).collect();
            // A kernel with only tensor-core forms builds where the device has tensor cores; on
            // one without them (lavapipe) it is skipped with that reason.
            let tensor_cores_only = k.needs_tensor_cores();
            let skipped_for_coop =
                |r: &&&serde_json::Value| r["reason"].as_str().is_some_and(|why| why.contains("cooperative matrices"));
            assert!(
                mine.iter().any(|r| r["status"] == "built")
                    || (tensor_cores_only && mine.iter().all(|r| r["status"] == "skipped" && skipped_for_coop(&r))),
                "{name}: {mine:?}"
            );
            for row in &mine {
                match row["status"].as_str() {
                    Some("built") => {
                        assert!(row["build_ms"].as_f64().unwrap() > 0.0);
                        assert_eq!(row["captured"], false);
                    }
                    Some("skipped") => assert!(row["reason"].as_str().unwrap().starts_with("needs "), "{row}"),
                    other => panic!("{name}: {other:?}: {row}"),
                }
            }
            if overrides.is_some() && k.overrides.iter().any(|o| o.name == "M_C") {
                assert!(mine.iter().all(|r| r["overrides"]["M_C"] == 256.0), "{name}: {mine:?}");
            }
        }
    }
}

/// A WGSL file of one's own, built on the device with an override it must be given.
#[test]
fn a_wgsl_file_builds_with_its_overrides() {
    let dir = temp_dir("file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scale.wgsl");
    std::fs::write(
        &file,
        "override S: f32;\n@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
         @group(0) @binding(1) var<uniform> n: vec4<u32>;\n\
         @compute @workgroup_size(64) fn scale(@builtin(global_invocation_id) g: vec3<u32>) {\n\
           if (g.x < n.x) { y[g.x] = y[g.x] * S; }\n}\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let r = run(&[f, "scale", "--build-only"]);
    if !device_or_skip(&r, "a_wgsl_file_builds_with_its_overrides") {
        return;
    }
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("override `S`") && r.stderr.contains("has no default"), "{}", r.stderr);
    let r = run(&[f, "scale", "--build-only", "-o", "S=2.5", "--dump", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("overrides: S=2.5") && r.stdout.contains("pipeline built in"), "{}", r.stdout);
    assert!(dir.join("scale.scale.v0.S=2.5.spv").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
