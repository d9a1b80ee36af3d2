#![allow(dead_code)]
//! GPU access for the trainer's tests: a missing adapter is a failure under `CI=true`.

pub fn gpu() -> Option<kernels::Gpu> {
    match kernels::Gpu::new() {
        Ok(g) => Some(g),
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("CI=true but no GPU adapter: {e}");
            }
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
    }
}

/// The seed of a test's random inputs: `KERNELS_TEST_SEED`, or the clock; printed so that a
/// failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: KERNELS_TEST_SEED={seed}");
    seed
}

/// A fresh temporary directory for one test.
pub fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kernels-train-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The trainer's binary, for the tests that run it as a process.
pub const TRAINER: &str = env!("CARGO_BIN_EXE_train");

/// A tiny model's flags, for runs of the command line.
pub const SMALL: [&str; 12] =
    ["--dim", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--seq-len", "8", "--batch", "2"];

/// The most a run of the trainer may take to reach the point a test waits for (lavapipe on two
/// shared cores); a run past it is killed and fails, so a stuck run cannot hang the suite.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);
