//! The trainer as a binary of this crate, the same program as the workspace's
//! `cargo run --release --example train` (the process-level tests spawn it:
//! `tests/process.rs`).

fn main() {
    kernels_train::cli::main();
}
