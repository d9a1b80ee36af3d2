//! Cooperative-matrix (tensor-core) GEMM kernels for the H200 sweep: the WGSL generator
//! (`kernel`), numbers and the float64 reference (`num`), a CPU emulator of the generated
//! kernels (`emu`), naga checks (`check`), the sweep's plan (`plan`) and its GPU runner
//! (`run`). Shared by `benches/coop_sweep.rs` and `tests/coop_sweep_wgsl.rs` through `#[path]`.

pub mod check;
pub mod emu;
pub mod kernel;
pub mod num;
pub mod plan;
pub mod run;
