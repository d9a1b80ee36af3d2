//! The trainer as a binary of this crate, the same program as the workspace's
//! `cargo run --release --example train` (the process-level tests spawn it:
//! `tests/process.rs`). The command line is native only: built for wasm32 it does nothing.

fn main() {
    #[cfg(not(target_arch = "wasm32"))]
    kernels_train::cli::main();
}
