//! Annotations as code: `// @requires len(x) >= p.m * p.k` becomes a check in the generated
//! function, `// @grid threads(p.n)` the grid it dispatches. The expressions are a small
//! integer language over the kernel's arguments:
//!
//! - `len(x)`: elements in storage binding `x`;
//! - `p.n`, `p.dims.x`: integer fields (and vector components) of a uniform `p`; `n` for a
//!   uniform that is a plain integer;
//! - module-scope integer constants (`WG`, `TILE`), integer literals;
//! - `+ - * / %`, `ceil_div(a, b)`, `min(a, b)`, `max(a, b)`, parentheses;
//! - `@requires` is one comparison (`>=`, `>`, `<=`, `<`, `==`, `!=`);
//! - `@grid` is `threads(n)` (1-D over n invocations), `workgroups(n)` (1-D over n
//!   workgroups, with the 2-D fallback past the per-dimension limit) or `workgroups(x, y)` /
//!   `workgroups(x, y, z)` (an explicit grid, checked against the limits).
//!
//! Arithmetic is done in `i128` with overflow and division by zero reported as errors.

use crate::reflect::{Access, HostScalar, HostType, Interface, StructDef};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{BinOp, Expr, Lit};

/// A translated expression: code that evaluates to `Option<i128>`.
pub struct Code {
    /// The tokens.
    pub tokens: TokenStream,
}

/// Translates an expression against a kernel's interface.
pub fn expr(e: &Expr, iface: &Interface, rust_name: &dyn Fn(&str) -> proc_macro2::Ident) -> Result<Code, String> {
    let k = quote!(::kernels::__private::shape);
    let tokens = match e {
        Expr::Paren(p) => return expr(&p.expr, iface, rust_name),
        Expr::Group(g) => return expr(&g.expr, iface, rust_name),
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => {
                let v: i128 = i.base10_parse().map_err(|e| e.to_string())?;
                quote!(::core::option::Option::Some(#v))
            }
            _ => return Err("only integer literals are allowed".into()),
        },
        Expr::Path(p) => {
            let name = p.path.get_ident().ok_or("expected a name")?.to_string();
            if let Some((_, v)) = iface.consts.iter().find(|(n, _)| *n == name) {
                quote!(::core::option::Option::Some(#v))
            } else if let Some(b) = iface.bindings.iter().find(|b| b.name == name) {
                match (&b.access, &b.ty) {
                    (Access::Uniform, HostType::Scalar(s)) if s.is_integer() => {
                        let id = rust_name(&name);
                        quote!(::core::option::Option::Some(#id as i128))
                    }
                    (Access::Uniform, _) => {
                        return Err(format!(
                            "uniform `{name}` is not an integer; name one of its integer fields, like `{name}.n`"
                        ));
                    }
                    _ => return Err(format!("`{name}` is a storage buffer; use `len({name})` for its length")),
                }
            } else {
                return Err(format!(
                    "unknown name `{name}`: expected a uniform, a uniform's field, `len(buffer)` or a module-scope integer constant"
                ));
            }
        }
        Expr::Field(_) => {
            let (root, path) = field_path(e)?;
            let b = iface
                .bindings
                .iter()
                .find(|b| b.name == root && b.access == Access::Uniform)
                .ok_or_else(|| format!("`{root}` is not a uniform of this kernel"))?;
            let mut ty = b.ty.clone();
            let root_id = rust_name(&root);
            let mut access = quote!(#root_id);
            for part in &path {
                match &ty {
                    HostType::Struct(sname) => {
                        let s: &StructDef = iface.structs.iter().find(|s| &s.name == sname).ok_or("unknown struct")?;
                        let f = s
                            .fields
                            .iter()
                            .find(|f| f.name.as_deref() == Some(part.as_str()))
                            .ok_or_else(|| format!("`{sname}` has no field `{part}`"))?;
                        let fid = rust_name(part);
                        access = quote!(#access.#fid);
                        ty = f.ty.clone().ok_or("padding")?;
                    }
                    HostType::Array(inner, n) => {
                        let i = match part.as_str() {
                            "x" | "r" => 0usize,
                            "y" | "g" => 1,
                            "z" | "b" => 2,
                            "w" | "a" => 3,
                            _ => return Err(format!("`.{part}` is not a vector component")),
                        };
                        if i as u32 >= *n {
                            return Err(format!("`.{part}` is past the vector's end"));
                        }
                        access = quote!(#access[#i]);
                        ty = (**inner).clone();
                    }
                    HostType::Scalar(_) => return Err(format!("`.{part}` on a scalar")),
                }
            }
            match ty {
                HostType::Scalar(s) if s.is_integer() => quote!(::core::option::Option::Some(#access as i128)),
                HostType::Scalar(HostScalar::F32 | HostScalar::F16) => {
                    return Err("only integer fields can be used in shapes".into());
                }
                _ => return Err("name an integer field, not a struct or vector".into()),
            }
        }
        Expr::Call(c) => {
            let f = match &*c.func {
                Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()).unwrap_or_default(),
                _ => String::new(),
            };
            let args: Vec<&Expr> = c.args.iter().collect();
            match (f.as_str(), args.as_slice()) {
                ("len", [Expr::Path(p)]) => {
                    let name = p.path.get_ident().ok_or("expected a buffer name")?.to_string();
                    let b = iface
                        .bindings
                        .iter()
                        .find(|b| b.name == name)
                        .ok_or_else(|| format!("`{name}` is not a binding of this kernel"))?;
                    if b.access == Access::Uniform {
                        return Err(format!("`{name}` is a uniform; `len` takes a storage buffer"));
                    }
                    let id = rust_name(&name);
                    quote!(::core::option::Option::Some(#id.len() as i128))
                }
                ("ceil_div" | "min" | "max", [a, b]) => {
                    let a = expr(a, iface, rust_name)?.tokens;
                    let b = expr(b, iface, rust_name)?.tokens;
                    let f = format_ident!("{f}");
                    quote!(#k::#f(#a, #b))
                }
                _ => {
                    return Err(format!(
                        "unknown function `{f}` (or wrong arguments): the functions are `len(buffer)`, `ceil_div(a, b)`, `min(a, b)` and `max(a, b)`"
                    ));
                }
            }
        }
        Expr::Binary(b) => {
            let f = match b.op {
                BinOp::Add(_) => "add",
                BinOp::Sub(_) => "sub",
                BinOp::Mul(_) => "mul",
                BinOp::Div(_) => "div",
                BinOp::Rem(_) => "rem",
                _ => return Err("comparisons belong only at the top of a `@requires`".into()),
            };
            let l = expr(&b.left, iface, rust_name)?.tokens;
            let r = expr(&b.right, iface, rust_name)?.tokens;
            let f = format_ident!("{f}");
            quote!(#k::#f(#l, #r))
        }
        _ => {
            return Err(
                "unsupported expression: use integers, names, `len(x)`, `+ - * / %`, `ceil_div`, `min`, `max`".into()
            );
        }
    };
    Ok(Code { tokens })
}

fn field_path(e: &Expr) -> Result<(String, Vec<String>), String> {
    match e {
        Expr::Field(f) => {
            let (root, mut path) = field_path(&f.base)?;
            match &f.member {
                syn::Member::Named(n) => path.push(n.to_string()),
                syn::Member::Unnamed(_) => return Err("use field names".into()),
            }
            Ok((root, path))
        }
        Expr::Path(p) => Ok((p.path.get_ident().ok_or("expected a name")?.to_string(), Vec::new())),
        _ => Err("expected `uniform.field`".into()),
    }
}

/// A parsed `@requires`: the comparison's two sides and operator.
pub fn requirement(
    text: &str,
    iface: &Interface,
    rust_name: &dyn Fn(&str) -> proc_macro2::Ident,
) -> Result<(TokenStream, TokenStream, &'static str, String, String), String> {
    let e: Expr = syn::parse_str(text).map_err(|e| format!("cannot parse `{text}`: {e}"))?;
    let Expr::Binary(b) = &e else {
        return Err("a `@requires` is one comparison, like `len(x) >= p.n`".into());
    };
    let op = match b.op {
        BinOp::Ge(_) => "ge",
        BinOp::Gt(_) => "gt",
        BinOp::Le(_) => "le",
        BinOp::Lt(_) => "lt",
        BinOp::Eq(_) => "eq",
        BinOp::Ne(_) => "ne",
        _ => return Err("a `@requires` is one comparison, like `len(x) >= p.n`".into()),
    };
    let l = expr(&b.left, iface, rust_name)?.tokens;
    let r = expr(&b.right, iface, rust_name)?.tokens;
    let (left, right) = (&b.left, &b.right);
    Ok((l, r, op, tidy(&quote!(#left).to_string()), tidy(&quote!(#right).to_string())))
}

/// Token text back to how a person writes it: `len (x)` → `len(x)`, `p . n` → `p.n`.
fn tidy(s: &str) -> String {
    s.replace(" . ", ".").replace(" (", "(").replace("( ", "(").replace(" )", ")").replace(" ,", ",")
}

/// The kinds of grid an annotation can give.
pub enum Grid {
    /// `threads(n)`
    Threads(TokenStream),
    /// `workgroups(n)`
    Workgroups(TokenStream),
    /// `workgroups(x, y[, z])`
    Explicit(Vec<TokenStream>),
}

/// Parses a `@grid`.
pub fn grid(text: &str, iface: &Interface, rust_name: &dyn Fn(&str) -> proc_macro2::Ident) -> Result<Grid, String> {
    let e: Expr = syn::parse_str(text).map_err(|e| format!("cannot parse `{text}`: {e}"))?;
    let Expr::Call(c) = &e else {
        return Err("a `@grid` is `threads(n)`, `workgroups(n)` or `workgroups(x, y[, z])`".into());
    };
    let f = match &*c.func {
        Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()).unwrap_or_default(),
        _ => String::new(),
    };
    let args = c.args.iter().map(|a| expr(a, iface, rust_name).map(|c| c.tokens)).collect::<Result<Vec<_>, _>>()?;
    match (f.as_str(), args.len()) {
        ("threads", 1) => Ok(Grid::Threads(args.into_iter().next().unwrap_or_default())),
        ("workgroups", 1) => Ok(Grid::Workgroups(args.into_iter().next().unwrap_or_default())),
        ("workgroups", 2 | 3) => Ok(Grid::Explicit(args)),
        _ => Err("a `@grid` is `threads(n)`, `workgroups(n)` or `workgroups(x, y[, z])`".into()),
    }
}
