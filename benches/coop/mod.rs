//! Cooperative-matrix (tensor-core) GEMM kernels for the H200 sweep: the WGSL generator
//! (`kernel`), numbers and the float64 reference (`num`), a CPU emulator of the generated
//! kernels (`emu`), naga checks (`check`) and the sweep's plan (`plan`). Shared by
//! `benches/coop_sweep.rs` and `tests/coop_sweep_wgsl.rs` through `#[path]`.

pub mod check;
pub mod emu;
pub mod kernel;
pub mod num;
pub mod plan;
