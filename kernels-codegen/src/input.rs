//! Stage 0: the macro's arguments.
//!
//! ```text
//! kernels!("shaders/03_linear.wgsl")
//! kernels!("shaders/03_linear.wgsl", shared = "shaders/common.wgsl")
//! kernels!("shaders/03_linear.wgsl", shared = none, module = linear_algebra)
//! kernels!("shaders/03_linear.wgsl", crate = ::my_gpu)   // a crate re-exporting the runtime
//! ```

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token};

/// Where the shared preamble comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shared {
    /// `00_shared.wgsl` beside the kernel file.
    Default,
    /// A path, resolved like the kernel file's.
    Path(String),
    /// No shared preamble.
    None,
}

/// The parsed arguments.
#[derive(Clone, Debug)]
pub struct Input {
    /// The kernel file as written.
    pub path: String,
    /// The literal's span: every error of this call points here.
    pub span: Span,
    /// The shared preamble.
    pub shared: Shared,
    /// An explicit module name.
    pub module: Option<Ident>,
    /// The path generated code names the runtime by: `::kernels` unless `crate = path` says
    /// otherwise (a crate that re-exports `kernels_runtime` with `pub use kernels_runtime::*;`).
    pub runtime: syn::Path,
}

impl Parse for Input {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lit: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the kernel file's path as a string literal, like `kernels!(\"shaders/03_linear.wgsl\")`",
            )
        })?;
        let mut out = Input {
            path: lit.value(),
            span: lit.span(),
            shared: Shared::Default,
            module: None,
            runtime: syn::parse_quote!(::kernels),
        };
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            if input.peek(Token![crate]) {
                input.parse::<Token![crate]>()?;
                input.parse::<Token![=]>()?;
                let path: syn::Path = input.parse()?;
                let absolute =
                    path.leading_colon.is_some() || path.segments.first().is_some_and(|s| s.ident == "crate");
                if !absolute {
                    return Err(syn::Error::new_spanned(
                        &path,
                        "`crate = ` takes an absolute path to the runtime, like `::my_gpu` or `crate::gpu`",
                    ));
                }
                out.runtime = path;
                continue;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match key.to_string().as_str() {
                "shared" => {
                    if input.peek(LitStr) {
                        out.shared = Shared::Path(input.parse::<LitStr>()?.value());
                    } else {
                        let v: Ident = input.parse()?;
                        if v != "none" {
                            return Err(syn::Error::new(v.span(), "expected a path string or `none`"));
                        }
                        out.shared = Shared::None;
                    }
                }
                "module" => out.module = Some(input.parse()?),
                _ => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown option `{key}`; the options are `shared = \"path\" | none`, `module = name` and `crate = path::to::runtime`"
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let i: Input = syn::parse_str(r#""a.wgsl", shared = none, module = m"#).unwrap();
        assert_eq!(i.path, "a.wgsl");
        assert_eq!(i.shared, Shared::None);
        assert_eq!(i.module.unwrap(), "m");
        let i: Input = syn::parse_str(r#""a.wgsl", shared = "s.wgsl","#).unwrap();
        assert_eq!(i.shared, Shared::Path("s.wgsl".into()));
        assert!(syn::parse_str::<Input>(r#""a.wgsl", color = red"#).is_err());
        let i: Input = syn::parse_str(r#""a.wgsl", crate = ::my_gpu::rt"#).unwrap();
        let rt = &i.runtime;
        assert_eq!(quote::quote!(#rt).to_string(), quote::quote!(::my_gpu::rt).to_string());
        let i: Input = syn::parse_str(r#""a.wgsl""#).unwrap();
        let rt = &i.runtime;
        assert_eq!(quote::quote!(#rt).to_string(), ":: kernels");
        assert!(syn::parse_str::<Input>(r#""a.wgsl", crate = my_gpu"#).is_err(), "relative paths are refused");
        assert!(syn::parse_str::<Input>("a").is_err());
    }
}
