//! The runtime under `kernels!`: a GPU context, typed buffers, pipelines built once per
//! context, grids with the 2-D fallback, and batches of calls. Generated code calls into it;
//! most users reach it through the `kernels` crate.

mod batch;
mod buffer;
mod context;
mod disk;
mod error;
mod grid;
#[cfg(all(feature = "external-memory", target_os = "linux"))]
mod interop;
mod kernel;
mod options;
mod pipeline;
#[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
mod reload;
#[doc(hidden)]
pub mod shape;
pub mod texture;
mod variant;
#[cfg(target_arch = "wasm32")]
mod web;

pub use batch::{Arg, Batch, Call, DispatchTime, Profile, Record};
pub use buffer::{Buffer, Element, StructBuffer};
pub use context::{AdapterReport, Gpu, OPTIONAL_FEATURES};
pub use disk::{PipelineCacheFile, cache_dir, write_atomically};
pub use error::{Error, Result};
pub use grid::{Grid, dispatch_1d};
pub use half::f16;
#[cfg(all(feature = "external-memory", target_os = "linux"))]
pub use interop::{ExportableBuffer, MemoryInfo};
pub use kernel::{
    BindingDef, BindingKind, CoopConfig, CoopScalar, FileSource, GridKind, KernelDef, KernelSource, OverrideDef,
    ResourceDef, ResourceKind, SampleKind, TextureAccess, TextureDim, VariantDef,
};
pub use options::{AdapterFilter, AdapterIndex, DEFAULT_PIPELINE_CACHE_CAPACITY, GpuOptions, RuntimeChecks};
pub use pipeline::{PipelineStats, WarmUp};
#[cfg(all(feature = "hot-reload", not(target_arch = "wasm32")))]
pub use reload::ReloadReport;
pub use texture::{ComparisonSampler, Sampler, Texture};
pub use wgpu;

/// Used by generated code; not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::batch::{Arg, Call};
    pub use crate::shape;
    pub use bytemuck;
}
