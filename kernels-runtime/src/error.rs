//! Every way a call can fail, with messages a user can act on.

/// The runtime's error type.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No adapter matched.
    #[error("no GPU adapter{}: available adapters: {}", wanted.as_ref().map(|w| format!(" matches {w}")).unwrap_or_default(), if available.is_empty() { "none (on Linux without a GPU, install Mesa's lavapipe: `apt-get install mesa-vulkan-drivers`)".to_string() } else { available.join(", ") })]
    NoAdapter {
        /// What was asked for, and where: `KERNELS_ADAPTER="…"` or `GpuOptions::adapter("…")`.
        wanted: Option<String>,
        /// What exists.
        available: Vec<String>,
    },
    /// The adapter index asked for ([`GpuOptions::adapter_index`](crate::GpuOptions::adapter_index)
    /// or `KERNELS_ADAPTER_INDEX`) is past the adapters that match.
    #[error("adapter index {index} ({source_of}) is out of range: {} adapter{} match{}", matching.len(), if matching.len() == 1 { "" } else { "s" }, if matching.is_empty() { String::new() } else { format!(", indexed from 0 in the order they are tried: {}", matching.iter().enumerate().map(|(k, a)| format!("{k}: {a}")).collect::<Vec<_>>().join(", ")) })]
    AdapterIndex {
        /// The index asked for.
        index: usize,
        /// Where it came from: `KERNELS_ADAPTER_INDEX=…` or `GpuOptions::adapter_index(…)`.
        source_of: String,
        /// The adapters that match the filter, in the order indices count them.
        matching: Vec<String>,
    },
    /// The device could not be created.
    #[error("cannot open the GPU device: {0}")]
    Device(String),
    /// An environment variable the options read holds a value it does not take (the GPU is
    /// not opened: a setting asked for and not understood would otherwise be silently ignored).
    #[error("{variable}={value:?} is not a value it takes: it takes {expected}")]
    Environment {
        /// The variable (`KERNELS_RUNTIME_CHECKS`).
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
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
    /// One buffer bound twice with at least one writable binding, or parts of one allocation
    /// ([`Buffer::part`](crate::Buffer::part)) that overlap with one writable, or that are
    /// bound one read-only and one writable.
    #[error(
        "kernel `{kernel}`: `{first}` and `{second}` are bound to the same buffer (or to parts of one allocation that overlap, or of which one is read-only), and one of them is writable"
    )]
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
    #[error(
        "a buffer of {} bytes is over this device's limit of {limit} bytes",
        if *bytes == u64::MAX { format!("more than {bytes}") } else { bytes.to_string() }
    )]
    BufferTooLarge {
        /// Requested size (`u64::MAX`: more than a `u64` counts).
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
    /// wgpu rejected what a call did (validation, out of memory, internal error), e.g. a buffer
    /// destroyed through its raw handle. Only the call that caused it gets it.
    #[error("{during}: wgpu reported: {message}")]
    Wgpu {
        /// What the call was doing (`kernel \`m::k\``, `creating a buffer of 64 bytes`, …).
        during: String,
        /// wgpu's message.
        message: String,
    },
    /// A submission failed; names every kernel it held.
    #[error("submitting {}: wgpu reported: {message}", describe_kernels(kernels))]
    Submit {
        /// `module::kernel` of each kernel in the submission, in first-use order.
        kernels: Vec<String>,
        /// wgpu's message.
        message: String,
    },
    /// The device is lost (driver reset, out of memory, `destroy`): every call on this context
    /// fails from then on. Open a new [`Gpu`](crate::Gpu).
    #[error("the GPU device is lost ({message}); open a new Gpu")]
    DeviceLost {
        /// Why, as wgpu said.
        message: String,
    },
    /// An error reported by wgpu outside the runtime's calls (through the raw wgpu handles), or
    /// a failure of the runtime's plumbing.
    #[error("GPU error: {0}")]
    Gpu(String),
    /// GPU memory cannot be shared with another API here (exportable buffers): not Vulkan, an
    /// extension missing, or the driver refused.
    #[error("cannot share GPU memory with another API: {0}")]
    ExternalMemory(String),
}

/// "kernels `a::b`, `c::d`" (at most 8 named), or what a submission without kernels held.
fn describe_kernels(kernels: &[String]) -> String {
    match kernels {
        [] => "a submission of copies and clears".to_string(),
        [one] => format!("kernel `{one}`"),
        many => {
            let named: Vec<String> = many.iter().take(8).map(|k| format!("`{k}`")).collect();
            let more = if many.len() > 8 { format!(" and {} more", many.len() - 8) } else { String::new() };
            format!("kernels {}{more}", named.join(", "))
        }
    }
}

/// `Result` with the runtime's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
