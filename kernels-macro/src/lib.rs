//! The `kernels!` macro. All the work happens in `kernels-codegen`; this crate only gathers
//! what the compiler knows about the call site.

use proc_macro::TokenStream;

/// Assembles, validates and types the kernels of a WGSL file at compile time.
///
/// ```ignore
/// kernels::kernels!("shaders/03_linear.wgsl");
/// // → pub mod linear { pub fn matmul(…) … }
/// ```
///
/// A plain relative path is relative to the calling crate's manifest directory (where its
/// `Cargo.toml` is); a path starting with `./` or `../` is relative to the file holding the
/// call. The shared preamble is `00_shared.wgsl` beside the kernel file unless
/// `shared = "path"` or `shared = none` says otherwise; `module = name` overrides the module
/// name; `crate = ::path` names the runtime for a crate that re-exports it
/// (`pub use kernels_runtime::*;`) instead of depending on `kernels`. Files the kernel files
/// `//#include` are read and tracked too. See the `kernels` crate for the format and the
/// generated API.
#[proc_macro]
pub fn kernels(input: TokenStream) -> TokenStream {
    let site = kernels_codegen::CallSite {
        manifest_dir: std::env::var_os("CARGO_MANIFEST_DIR").map(Into::into),
        calling_file: proc_macro::Span::call_site().local_file(),
    };
    kernels_codegen::expand(input.into(), &site).into()
}
