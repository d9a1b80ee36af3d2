//! The logic behind `kernels!`, as a plain library so it can be unit-tested without a compiler
//! in the loop and reused by tools.
//!
//! The stages, in the order data flows through them:
//! [`input`] (the macro's arguments) → [`source`] (resolve, read, line tables) → [`include`](mod@include)
//! (`//#include` lines: every file read once) → [`split`] (markers, directives, `//#if`
//! variants) → [`outline`] (module-scope declarations and the names they use) → [`assemble`]
//! (what the section reaches of the shared preamble, the file preamble and included files, with
//! one map back to the files) → [`validate`] (naga, plus [`uniformity`] for subgroup,
//! cooperative-matrix and barrier operations, and naga's SPIR-V backend) → [`reflect`]
//! (bindings, layouts, workgroup size) → [`annotate`] and [`shape`] (docs, `@grid` and
//! `@requires` as typed values) → [`expand`](mod@expand) (tokens). [`compile`] runs the stages
//! up to [`shape`] for one file and collects every error with its original location;
//! [`expand`](mod@expand) only emits what it decided. [`manifest`] turns compiled files into the
//! web export's data (browser WGSL and a JSON manifest) for hosts without Rust. [`reload`] is
//! what the runtime's hot reload shares with the macro: the interface a program was compiled
//! against, as text, and the errors for an edit that no longer fits it.

pub mod annotate;
pub mod assemble;
pub mod compile;
pub mod diagnostic;
pub mod expand;
pub mod include;
pub mod input;
pub mod manifest;
pub mod outline;
pub mod reflect;
pub mod reload;
pub mod shape;
pub mod source;
pub mod split;
pub mod uniformity;
pub mod validate;

use proc_macro2::TokenStream;
use syn::ext::IdentExt;

pub use source::CallSite;

/// The whole macro: arguments in, module (and `compile_error!`s) out. Never panics on user
/// input.
pub fn expand(input: TokenStream, site: &CallSite) -> TokenStream {
    let input: input::Input = match syn::parse2(input) {
        Ok(i) => i,
        Err(e) => return e.to_compile_error(),
    };
    let module = input.module.as_ref().map(|m| m.unraw().to_string());
    let file = compile::compile(site, &input.path, &input.shared, module);
    expand::expand(&file, input.span, &input.runtime)
}
