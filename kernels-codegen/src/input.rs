//! Stage 0: the macro's arguments.
//!
//! ```text
//! kernels!("shaders/03_linear.wgsl")
//! kernels!("shaders/03_linear.wgsl", shared = "shaders/common.wgsl")
//! kernels!("shaders/03_linear.wgsl", shared = none, module = linear_algebra)
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
}

impl Parse for Input {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lit: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the kernel file's path as a string literal, like `kernels!(\"shaders/03_linear.wgsl\")`",
            )
        })?;
        let mut out = Input { path: lit.value(), span: lit.span(), shared: Shared::Default, module: None };
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
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
                            "unknown option `{key}`; the options are `shared = \"path\" | none` and `module = name`"
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
        assert!(syn::parse_str::<Input>("a").is_err());
    }
}
