//! Trains a LLaMA-style byte-level language model on the GPU with the kernel library.
//!
//! `cargo run --release --example train` trains a small model on this project's own text
//! (about four minutes on a 2-core CPU adapter); `--preset gpt2-small` and `--preset gpt2-medium`
//! are for real GPUs; `--data FILE` trains on any text; `--resume` continues a checkpoint (Ctrl-C,
//! SIGTERM and SIGHUP save one); `--generate "prompt"` samples from one. `--help` lists
//! everything. The work is in `kernels-train` (`kernels_train::cli`).

fn main() {
    kernels_train::cli::main();
}
