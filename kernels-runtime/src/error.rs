//! Every way a call can fail, with messages a user can act on.

/// The runtime's error type.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No adapter matched.
    #[error("no GPU adapter{}: available adapters: {}", wanted.as_ref().map(|w| format!(" matches KERNELS_ADAPTER={w:?}")).unwrap_or_default(), if available.is_empty() { "none (on Linux without a GPU, install Mesa's lavapipe: `apt-get install mesa-vulkan-drivers`)".to_string() } else { available.join(", ") })]
    NoAdapter {
        /// What was asked for.
        wanted: Option<String>,
        /// What exists.
        available: Vec<String>,
    },
    /// The device could not be created.
    #[error("cannot open the GPU device: {0}")]
    Device(String),
    /// The kernel needs a feature the device lacks (or the options turned off).
    #[error("kernel `{kernel}` needs the `{feature}` feature{reason}")]
    MissingFeature {
        /// `module::kernel`
        kernel: String,
        /// `SUBGROUP`, `SHADER_F16`, `EXPERIMENTAL_COOPERATIVE_MATRIX`, …
        feature: &'static str,
        /// Adapter name.
        adapter: String,
        /// The rest of the message: the configurations needed, and whether the adapter lacks
        /// the feature or the options turned it off.
        reason: String,
    },
    /// A `@requires` check failed.
    #[error("kernel `{kernel}`: `{requirement}` does not hold ({detail})")]
    Shape {
        /// `module::kernel`
        kernel: String,
        /// The requirement as written.
        requirement: String,
        /// The values.
        detail: String,
    },
    /// A buffer is smaller than its binding needs.
    #[error("kernel `{kernel}`: buffer `{binding}` holds {got} bytes but the binding needs at least {needed}")]
    BufferTooShort {
        /// `module::kernel`
        kernel: String,
        /// Binding name.
        binding: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes the buffer has.
        got: u64,
    },
    /// A buffer is larger than one binding may be on this device.
    #[error(
        "kernel `{kernel}`: buffer `{binding}` is {bytes} bytes, over this device's limit of {limit} bytes per {what} binding"
    )]
    BindingTooLarge {
        /// `module::kernel`
        kernel: String,
        /// Binding name.
        binding: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
        /// `storage` or `uniform`.
        what: &'static str,
    },
    /// One buffer bound twice with at least one writable binding.
    #[error("kernel `{kernel}`: the same buffer is bound to `{first}` and `{second}`, and one of them is writable")]
    Aliased {
        /// `module::kernel`
        kernel: String,
        /// First binding.
        first: String,
        /// Second binding.
        second: String,
    },
    /// The grid does not fit the device's limits.
    #[error("kernel `{kernel}`: grid {detail} is over the device's limit of {limit} workgroups per dimension")]
    GridTooLarge {
        /// `module::kernel`
        kernel: String,
        /// The grid asked for.
        detail: String,
        /// `max_compute_workgroups_per_dimension`.
        limit: u32,
    },
    /// Arguments that do not match the kernel (only through the untyped API).
    #[error("kernel `{kernel}`: {detail}")]
    BadArguments {
        /// `module::kernel`
        kernel: String,
        /// What is wrong.
        detail: String,
    },
    /// A buffer was created on another [`Gpu`](crate::Gpu).
    #[error("kernel `{kernel}`: buffer `{binding}` belongs to another GPU context")]
    ForeignBuffer {
        /// `module::kernel`
        kernel: String,
        /// Binding name.
        binding: String,
    },
    /// A buffer larger than the device allows.
    #[error("a buffer of {bytes} bytes is over this device's limit of {limit} bytes")]
    BufferTooLarge {
        /// Requested size.
        bytes: u64,
        /// `max_buffer_size`.
        limit: u64,
    },
    /// Data of the wrong length for a buffer.
    #[error("{detail}")]
    LengthMismatch {
        /// What is wrong.
        detail: String,
    },
    /// The pipeline could not be built.
    #[error("kernel `{kernel}`: cannot build its pipeline: {message}")]
    Pipeline {
        /// `module::kernel`
        kernel: String,
        /// wgpu's message.
        message: String,
    },
    /// An error reported by wgpu outside any call (validation, out of memory, device lost).
    #[error("GPU error: {0}")]
    Gpu(String),
}

/// `Result` with the runtime's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
