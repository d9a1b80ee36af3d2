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
