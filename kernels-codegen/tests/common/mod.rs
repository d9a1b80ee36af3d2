//! Helpers shared by the codegen tests that compile files written on the fly.
#![allow(dead_code)] // each test binary uses its own subset

use kernels_codegen::compile::{self, File};
use kernels_codegen::input::Shared;
use kernels_codegen::source::CallSite;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory holding `files` (names may hold subfolders: `lib/x.wgsl`).
pub fn dir(files: &[(&str, &str)]) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kernels-codegen-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// Compiles `kernel` in `dir` with `shared` as the shared preamble.
pub fn compile_with(dir: &Path, kernel: &str, shared: &Shared) -> File {
    let site = CallSite { manifest_dir: Some(dir.to_path_buf()), calling_file: None };
    compile::compile(&site, kernel, shared, None)
}

/// Compiles `kernel` in `dir` with the default shared preamble (`00_shared.wgsl` beside it).
pub fn compile_in(dir: &Path, kernel: &str) -> File {
    compile_with(dir, kernel, &Shared::Default)
}
