//! Stage 8: tokens. One `pub mod <file>` with one function per kernel, a companion module per
//! kernel (`<kernel>::WGSL`, `WORKGROUP_SIZE`, `KERNEL`, its types), the structs with WGSL
//! layout, `include_str!` lines for rebuild tracking, and a `compile_error!` per error — all
//! errors of the call, with the kernels that are fine still emitted. Everything was parsed and
//! checked by [`compile`](crate::compile); this stage only emits.
//!
//! **Names.** Generated code cannot collide with names from the WGSL (kernels, bindings,
//! structs, fields, constants, overrides) or the file, whatever they are:
//!
//! - a name from the WGSL is emitted as a raw identifier (`r#gen`, `r#matmul`), so every Rust
//!   keyword of every edition, reserved ones included, is an ordinary name; the few Rust cannot
//!   write even raw (`self`, `Self`, `super`, `crate`, `_`, which WGSL reserves anyway) become
//!   `__u_<name>`;
//! - WGSL identifiers cannot start with `__`, so the names the macro makes up for itself live
//!   under prefixes of their own, one per kind: `__k_` for items (padding fields, hidden
//!   modules, and the public words below where a WGSL name takes them), `__l_` for the local
//!   variables of generated function bodies (so no constant of the module turns a `let` into a
//!   pattern, and no renamed parameter is shadowed by a local), and `__u_<name>` for a WGSL name
//!   that must be renamed (a binding parameter shadowed by a constant of the module);
//! - the names of the public API (`KERNELS`, `Overrides`, the `rec`, `grid` and `overrides`
//!   parameters) are used as they are unless a WGSL name takes them in their namespace, then
//!   they become `__k_<name>`;
//! - each kind of item has its own place: structs live in hidden `__k_structs` modules and are
//!   re-exported into the companion modules that use them (and, for structs several kernels
//!   share, at file level unless a kernel's module has that name), so a struct and a kernel of
//!   the same name never meet; the file module has no implicit prelude (`#[no_implicit_prelude]`) and
//!   generated code spells every path and primitive type in full (`::core::primitive::u32`),
//!   so a WGSL name like `None`, `u8` or `Option` shadows nothing the code needs.

use crate::compile::{File, Kernel, Variant};
use crate::reflect::{
    Access, HostScalar, HostType, Interface, ResourceKind, SampleKind, StructDef, TextureAccess, TextureDim,
};
use crate::shape::{self, GridSource};
use crate::split::rust_name;
use crate::validate::CoopScalar;
use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote};

/// The Rust identifier for a name from the WGSL or the file system: raw, so that keywords of
/// every edition (`gen`, `try`, `type`, …) are plain names. Names Rust cannot write even raw
/// become `__u_<name>` (WGSL reserves those words).
pub fn ident(name: &str) -> Ident {
    // Normalized as rustc normalizes every identifier, so that what the expansion holds is
    // what rustc will see (and compare).
    let name = &rust_name(name);
    if syn::parse_str::<Ident>(&format!("r#{name}")).is_ok() {
        Ident::new_raw(name, Span::call_site())
    } else {
        let clean: String = name.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '_' }).collect();
        format_ident!("__u_{}", clean)
    }
}

/// Whether two names are one identifier in Rust.
fn same(a: &str, b: &str) -> bool {
    a == b || rust_name(a) == rust_name(b)
}

/// A local variable of generated code: `__l_<name>`. No WGSL name starts with `__`, and no
/// other generated name starts with `__l_`, so a local can neither be shadowed by a constant
/// of the module (which would make its `let` a pattern) nor shadow a parameter.
fn local(name: &str) -> Ident {
    format_ident!("__l_{}", name)
}

/// A name of the generated API: `word` unless a WGSL name takes it, then `__k_<word>`.
fn api_name(word: &str, taken: bool) -> Ident {
    if taken { format_ident!("__k_{}", word) } else { format_ident!("{}", word) }
}

/// Expands a compiled file. `span` is the path literal's (every `compile_error!` points at it);
/// `runtime` is the path generated code names the runtime by (`::kernels`).
pub fn expand(file: &File, span: Span, runtime: &syn::Path) -> TokenStream {
    let errors: Vec<TokenStream> = crate::diagnostic::Diagnostic::merge(file.all_errors().cloned())
        .iter()
        .map(|d| {
            let msg = d.render();
            quote::quote_spanned!(span=> ::core::compile_error!(#msg);)
        })
        .collect();
    if file.module.is_empty() {
        return quote!(#(#errors)*);
    }
    let e = Emitter::new(file, quote!(#runtime));
    let module = e.module();
    quote! {
        #(#errors)*
        #module
    }
}

struct Emitter<'a> {
    rt: TokenStream,
    file: &'a File,
    /// Structs identical in every kernel that uses them: `__k_structs` of the file module.
    shared: Vec<StructDef>,
    /// Constants every kernel sees with the same value: (name, Rust type, value).
    consts: Vec<(String, &'static str, String)>,
    /// The list of the file's kernels.
    registry: Ident,
}

impl<'a> Emitter<'a> {
    fn new(file: &'a File, rt: TokenStream) -> Self {
        let kernels: Vec<&Kernel> = file.kernels.iter().collect();
        let consts = file.consts.clone();
        let taken = |n: &str| consts.iter().any(|c| same(&c.0, n)) || file.kernels.iter().any(|k| same(&k.name, n));
        let registry = api_name("KERNELS", taken("KERNELS"));
        Emitter { rt, file, shared: shared_structs(&kernels), consts, registry }
    }

    /// A primitive type, spelled so that no WGSL struct name shadows it.
    fn primitive(&self, name: &str) -> TokenStream {
        let id = format_ident!("{}", name);
        quote!(::core::primitive::#id)
    }

    fn scalar(&self, s: HostScalar) -> TokenStream {
        let rt = &self.rt;
        match s {
            HostScalar::F32 => self.primitive("f32"),
            HostScalar::U32 => self.primitive("u32"),
            HostScalar::I32 => self.primitive("i32"),
            HostScalar::F16 => quote!(#rt::f16),
            HostScalar::U64 => self.primitive("u64"),
            HostScalar::I64 => self.primitive("i64"),
            HostScalar::F64 => self.primitive("f64"),
        }
    }

    fn ty(&self, t: &HostType, struct_path: &dyn Fn(&str) -> TokenStream) -> TokenStream {
        match t {
            HostType::Scalar(s) => self.scalar(*s),
            HostType::Array(inner, n) => {
                let inner = self.ty(inner, struct_path);
                let n = *n as usize;
                quote!([#inner; #n])
            }
            HostType::Struct(name) => struct_path(name),
        }
    }

    /// The whole file module.
    fn module(&self) -> TokenStream {
        let rt = &self.rt;
        let module = ident(&self.file.module);
        let includes = self.file.read.iter().map(|p| {
            let p = p.to_string_lossy().into_owned();
            quote!(
                const _: &::core::primitive::str = ::core::include_str!(#p);
            )
        });
        let consts = self.consts.iter().map(|(name, ty, value)| {
            let id = ident(name);
            let ty = self.primitive(ty);
            let value: TokenStream = value.parse().unwrap_or_default();
            let doc = format!("`const {name}` of the WGSL (shared or file preamble).");
            quote!(#[doc = #doc] pub const #id: #ty = #value;)
        });
        let shared = self.shared.iter().map(|s| {
            self.struct_def(s, &|n| {
                let i = ident(n);
                quote!(#i)
            })
        });
        // Shared structs also at file level, where no kernel's module has the name.
        let shared_aliases =
            self.shared.iter().filter(|s| !self.file.kernels.iter().any(|k| same(&k.name, &s.name))).map(|s| {
                let i = ident(&s.name);
                quote!(pub use self::__k_structs::#i;)
            });
        let kernels = self.file.kernels.iter().filter_map(|k| self.kernel(k));
        let registry = self.file.kernels.iter().filter(|k| k.errors.is_empty() && k.interface.is_some()).map(|k| {
            let name = ident(&k.name);
            quote!(&#name::KERNEL)
        });
        let name = &self.registry;
        let source = self.file_source();
        let mut doc = self.file.doc.join("\n");
        if !doc.is_empty() {
            doc.push_str("\n\n");
        }
        doc.push_str(&format!("Kernels of `{}`, generated by `kernels!`.", self.file.display));
        let warm_up = format!(
            "Every kernel of this file, for [`Gpu::warm_up`]({}::Gpu::warm_up) and tools.",
            rt.to_string().replace(' ', "")
        );
        quote! {
            #[doc = #doc]
            #[no_implicit_prelude]
            #[allow(
                non_snake_case,
                non_camel_case_types,
                non_upper_case_globals,
                unused_parens,
                clippy::too_many_arguments,
                clippy::needless_borrow,
                clippy::identity_op
            )]
            pub mod #module {
                // Rebuild when a file the macro read changes.
                #(#includes)*

                #(#consts)*

                /// Structs that several kernels use; each kernel's module re-exports those it uses.
                #[doc(hidden)]
                pub mod __k_structs {
                    #(#shared)*
                }
                #(#shared_aliases)*

                #(#kernels)*

                #source

                #[doc = #warm_up]
                pub static #name: &[&#rt::KernelDef] = &[#(#registry),*];
            }
        }
    }

    /// Where the module's source lives and what host code reads from it beside the kernels,
    /// for the runtime's hot reload: the `__k_source` static each `KernelDef` points to.
    fn file_source(&self) -> TokenStream {
        let Some(path) = &self.file.path else { return quote!() };
        let registry = self.file.kernels.iter().filter(|k| k.errors.is_empty() && k.interface.is_some()).map(|k| {
            let name = ident(&k.name);
            quote!(&#name::KERNEL)
        });
        let rt = &self.rt;
        let text = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let option = |p: Option<String>| match p {
            Some(p) => quote!(::core::option::Option::Some(#p)),
            None => quote!(::core::option::Option::None),
        };
        let manifest_dir = option(self.file.manifest_dir.as_deref().map(text));
        let shared = option(self.file.shared.as_deref().map(text));
        let kernel_file = text(path);
        let files = self.file.read.iter().map(|p| text(p));
        let (module, display, interface) =
            (&self.file.module, &self.file.display, crate::reload::file_interface(self.file));
        quote! {
            /// Where this module's WGSL lives, for hot reload.
            #[doc(hidden)]
            pub static __k_source: #rt::FileSource = #rt::FileSource {
                manifest_dir: #manifest_dir,
                kernel_file: #kernel_file,
                display: #display,
                shared: #shared,
                module: #module,
                files: &[#(#files),*],
                interface: #interface,
                kernels: &[#(#registry),*],
            };
        }
    }

    /// A struct with WGSL layout. `struct_path` names the structs its fields use.
    fn struct_def(&self, s: &StructDef, struct_path: &dyn Fn(&str) -> TokenStream) -> TokenStream {
        let rt = &self.rt;
        let name = ident(&s.name);
        let u8_t = self.primitive("u8");
        let mut fields = Vec::new();
        let mut ctor_args = Vec::new();
        let mut ctor_fields = Vec::new();
        let mut asserts = Vec::new();
        let mut pad = 0usize;
        for f in &s.fields {
            let size = f.size as usize;
            let offset = f.offset as usize;
            match (&f.name, &f.ty) {
                (Some(n), Some(ty)) => {
                    let id = ident(n);
                    let ty = self.ty(ty, struct_path);
                    let doc = format!("`{n}`: offset {offset}, {size} bytes.");
                    fields.push(quote!(#[doc = #doc] pub #id: #ty));
                    ctor_args.push(quote!(#id: #ty));
                    ctor_fields.push(quote!(#id));
                    asserts.push(quote!(::core::assert!(::core::mem::offset_of!(#name, #id) == #offset);));
                }
                _ => {
                    let id = format_ident!("__k_pad{}", pad);
                    pad += 1;
                    fields.push(quote!(#[doc(hidden)] pub #id: [#u8_t; #size]));
                    ctor_fields.push(quote!(#id: [0; #size]));
                }
            }
        }
        let size = s.size as usize;
        let doc = format!(
            "`struct {}` with its WGSL layout: {size} bytes, padding explicit (`__k_padN` fields are zero).",
            s.name
        );
        quote! {
            #[doc = #doc]
            #[repr(C)]
            #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::cmp::PartialEq)]
            pub struct #name { #(#fields,)* }

            impl #name {
                /// Builds the value with its padding zeroed.
                #[allow(clippy::too_many_arguments)]
                pub const fn new(#(#ctor_args),*) -> Self {
                    Self { #(#ctor_fields),* }
                }
            }

            impl ::core::default::Default for #name {
                fn default() -> Self {
                    #rt::__private::bytemuck::Zeroable::zeroed()
                }
            }

            // SAFETY: `repr(C)`, every field is `Pod`, and the assertions below prove the fields
            // tile the struct exactly (padding is explicit), so there are no uninitialised bytes.
            unsafe impl #rt::__private::bytemuck::Zeroable for #name {}
            // SAFETY: as above.
            unsafe impl #rt::__private::bytemuck::Pod for #name {}

            const _: () = {
                ::core::assert!(::core::mem::size_of::<#name>() == #size);
                #(#asserts)*
            };
        }
    }

    /// One kernel: its function and its companion module.
    fn kernel(&self, k: &Kernel) -> Option<TokenStream> {
        let iface = k.interface.as_ref()?;
        let rt = &self.rt;
        let name = ident(&k.name);
        let sig = self.signature(k, iface);
        let doc = self.docs(k, iface);
        let body = self.body(k, iface, &sig);
        let companion = self.companion(k, iface, &sig);
        let (rec, params) = (&sig.rec, &sig.params);
        let mut companion_doc =
            format!("Companion of [`{}`](fn@super::{}): its source, workgroup size and types.", k.name, ident(&k.name));
        companion_doc.push_str(&format!("\n\nFeatures: {}.", features_doc(&k.variants)));
        if k.shape.unchecked.is_some() {
            companion_doc.push_str("\n\nRuntime checks: off (`@unchecked`; `KERNEL.unchecked`).");
        }
        Some(quote! {
            #[doc = #doc]
            pub fn #name(#rec: impl #rt::Record, #(#params),*) -> ::core::result::Result<(), #rt::Error> {
                #body
            }

            #[doc = #companion_doc]
            pub mod #name {
                #companion
            }
        })
    }

    /// The function's parameters and the matching runtime arguments.
    fn signature(&self, k: &Kernel, iface: &Interface) -> Signature {
        let rt = &self.rt;
        let kname = ident(&k.name);
        // A parameter named like a constant or static of the module would be a pattern; the
        // generated parameters also give way to bindings.
        let module_value = |n: &str| self.consts.iter().any(|c| same(&c.0, n)) || same(&self.registry.to_string(), n);
        let binding_named = |w: &str| {
            iface.bindings.iter().any(|b| same(&b.name, w))
                || iface.resources.iter().any(|r| same(&r.name, w))
                || iface.immediate.as_ref().is_some_and(|i| same(&i.name, w))
                || module_value(w)
        };
        let param_id = |n: &str| if module_value(n) { format_ident!("__u_{}", rust_name(n)) } else { ident(n) };
        let struct_path = |n: &str| {
            let i = ident(n);
            quote!(#kname::#i)
        };
        let mut sig = Signature {
            rec: api_name("rec", binding_named("rec")),
            grid: None,
            overrides: None,
            overrides_type: api_name("Overrides", iface.structs.iter().any(|s| same(&s.name, "Overrides"))),
            bindings: Vec::new(),
            params: Vec::new(),
            args: Vec::new(),
        };
        // Parameters in binding order; the runtime's arguments are the buffers', then the
        // textures' and samplers', then the immediate.
        let mut params: Vec<(u32, TokenStream)> = Vec::new();
        for b in &iface.bindings {
            let id = param_id(&b.name);
            let value = self.ty(&b.ty, &struct_path);
            let ty = match &b.header {
                Some(h) => {
                    let h = self.ty(h, &struct_path);
                    quote!(#rt::StructBuffer<#h, #value>)
                }
                None => quote!(#rt::Buffer<#value>),
            };
            let storage = if b.header.is_some() { quote!(storage_struct) } else { quote!(storage) };
            match b.access {
                Access::Read => {
                    params.push((b.binding, quote!(#id: &#ty)));
                    sig.args.push(quote!(#rt::__private::Arg::#storage(#id, false)));
                }
                Access::ReadWrite => {
                    params.push((b.binding, quote!(#id: &mut #ty)));
                    sig.args.push(quote!(#rt::__private::Arg::#storage(&*#id, true)));
                }
                Access::Uniform => {
                    params.push((b.binding, quote!(#id: #value)));
                    sig.args.push(quote!(#rt::__private::Arg::uniform(#rt::__private::bytemuck::bytes_of(&#id))));
                }
            }
            sig.bindings.push((b.name.clone(), id));
        }
        for r in &iface.resources {
            let id = param_id(&r.name);
            let tex = |dim: TextureDim| {
                let d = format_ident!("{}", dim.rust());
                quote!(#rt::texture::#d)
            };
            let (param, arg) = match &r.kind {
                ResourceKind::Texture { dim, sample } => {
                    let d = tex(*dim);
                    let bound = format_ident!(
                        "{}",
                        match sample {
                            SampleKind::Float { .. } => "FloatFormat",
                            SampleKind::Sint => "SintFormat",
                            SampleKind::Uint => "UintFormat",
                            SampleKind::Depth => "DepthFormat",
                        }
                    );
                    (
                        quote!(#id: &#rt::Texture<#d, impl #rt::texture::#bound>),
                        quote!(#rt::__private::Arg::texture(#id, false)),
                    )
                }
                ResourceKind::StorageTexture { dim, format, access } => {
                    let (d, f) = (tex(*dim), format_ident!("{}", format));
                    let ty = quote!(#rt::Texture<#d, #rt::texture::#f>);
                    if *access == TextureAccess::Read {
                        (quote!(#id: &#ty), quote!(#rt::__private::Arg::texture(#id, false)))
                    } else {
                        (quote!(#id: &mut #ty), quote!(#rt::__private::Arg::texture(&*#id, true)))
                    }
                }
                ResourceKind::Sampler { comparison: false, .. } => {
                    (quote!(#id: &#rt::Sampler), quote!(#rt::__private::Arg::sampler(#id)))
                }
                ResourceKind::Sampler { comparison: true, .. } => {
                    (quote!(#id: &#rt::ComparisonSampler), quote!(#rt::__private::Arg::comparison_sampler(#id)))
                }
            };
            params.push((r.binding, param));
            sig.args.push(arg);
            sig.bindings.push((r.name.clone(), id));
        }
        params.sort_by_key(|(b, _)| *b);
        sig.params.extend(params.into_iter().map(|(_, p)| p));
        if let Some(i) = &iface.immediate {
            let id = param_id(&i.name);
            let ty = self.ty(&i.ty, &struct_path);
            sig.params.push(quote!(#id: #ty));
            sig.args.push(quote!(#rt::__private::Arg::immediate(#rt::__private::bytemuck::bytes_of(&#id))));
            sig.bindings.push((i.name.clone(), id));
        }
        if k.shape.grid == GridSource::Caller {
            let g = api_name("grid", binding_named("grid"));
            sig.params.push(quote!(#g: #rt::Grid));
            sig.grid = Some(g);
        }
        if !iface.overrides.is_empty() {
            let o = api_name("overrides", binding_named("overrides"));
            let ty = &sig.overrides_type;
            sig.params.push(quote!(#o: #kname::#ty));
            sig.overrides = Some(o);
        }
        sig
    }

    /// The parameter of binding `name`.
    fn param<'s>(&self, sig: &'s Signature, name: &str) -> &'s Ident {
        &sig.bindings.iter().find(|(n, _)| n == name).expect("shape expressions name checked bindings").1
    }

    /// Code that evaluates a shape expression to `Option<i128>`.
    fn shape_expr(&self, e: &shape::Expr, sig: &Signature) -> TokenStream {
        let rt = &self.rt;
        let i128_t = self.primitive("i128");
        match e {
            shape::Expr::Int(v) => {
                let v = Literal::i128_suffixed(*v);
                quote!(::core::option::Option::Some(#v))
            }
            shape::Expr::Len { binding } => {
                let p = self.param(sig, binding);
                quote!(::core::option::Option::Some(#p.len() as #i128_t))
            }
            shape::Expr::Uniform { binding, path } => {
                let mut access = {
                    let p = self.param(sig, binding);
                    quote!(#p)
                };
                for step in path {
                    access = match step {
                        shape::Step::Field(f) => {
                            let f = ident(f);
                            quote!(#access.#f)
                        }
                        shape::Step::Component(i) => {
                            let i = *i as usize;
                            quote!(#access[#i])
                        }
                    };
                }
                quote!(::core::option::Option::Some(#access as #i128_t))
            }
            shape::Expr::Binary { op, left, right } => {
                let f = format_ident!("{}", op.runtime_name());
                let (l, r) = (self.shape_expr(left, sig), self.shape_expr(right, sig));
                quote!(#rt::__private::shape::#f(#l, #r))
            }
        }
    }

    /// The function body: checks, grid, overrides, then the call. A kernel with errors gets a
    /// body that panics (its errors are already compile errors; the signature keeps call sites
    /// from failing too).
    fn body(&self, k: &Kernel, iface: &Interface, sig: &Signature) -> TokenStream {
        let rt = &self.rt;
        let kname = ident(&k.name);
        if !k.errors.is_empty() || k.variants.is_empty() {
            let name = &k.name;
            return quote!(::core::unimplemented!("kernel `{}` did not compile", #name));
        }
        let qualified = format!("{}::{}", self.file.module, k.name);
        let checks = k.shape.requires.iter().map(|r| {
            let req = &r.value;
            let (l, rr) = (self.shape_expr(&req.left, sig), self.shape_expr(&req.right, sig));
            let cmp = format_ident!("{}", req.cmp.runtime_name());
            let (text, lt, rtext) = (&r.text, &req.left_text, &req.right_text);
            quote! {
                #rt::__private::shape::require(#qualified, #text, #lt, #l, #rtext, #rr, #rt::__private::shape::#cmp)?;
            }
        });
        let grid = match (&k.shape.grid, &sig.grid) {
            (GridSource::Annotation(g), _) => {
                let text = &g.text;
                match &g.value {
                    shape::Grid::Threads(n) => {
                        let n = self.shape_expr(n, sig);
                        quote!(#rt::__private::shape::threads(#qualified, #text, #n)?)
                    }
                    shape::Grid::Workgroups(n) => {
                        let n = self.shape_expr(n, sig);
                        quote!(#rt::__private::shape::workgroups(#qualified, #text, #n)?)
                    }
                    shape::Grid::Explicit(v) => {
                        let [x, y, z] = [0, 1, 2].map(|i| self.shape_expr(&v[i], sig));
                        quote!(#rt::__private::shape::explicit(#qualified, #text, [#x, #y, #z])?)
                    }
                }
            }
            (_, Some(g)) => quote!(#g),
            (_, None) => return quote!(::core::unimplemented!()),
        };
        let str_t = self.primitive("str");
        let f64_t = self.primitive("f64");
        let list = local("overrides");
        let overrides = match &sig.overrides {
            Some(param) => {
                let pushes = iface.overrides.iter().map(|o| {
                    let id = ident(&o.name);
                    let key = o.id.map(|i| i.to_string()).unwrap_or_else(|| o.name.clone());
                    let v = local("v");
                    let value = if o.ty == "bool" { quote!(if #v { 1.0 } else { 0.0 }) } else { quote!(#v as #f64_t) };
                    quote! {
                        if let ::core::option::Option::Some(#v) = #param.#id { #list.push((#key, #value)); }
                    }
                });
                quote! {
                    let mut #list: ::std::vec::Vec<(&'static #str_t, #f64_t)> = ::std::vec::Vec::new();
                    #(#pushes)*
                }
            }
            None => quote!(let #list: [(&'static #str_t, #f64_t); 0] = [];),
        };
        let (rec, args) = (&sig.rec, &sig.args);
        let grid_local = local("grid");
        quote! {
            #(#checks)*
            let #grid_local: #rt::Grid = #grid;
            #overrides
            #rt::Record::record(#rec, #rt::__private::Call {
                kernel: &#kname::KERNEL,
                grid: #grid_local,
                args: &[#(#args),*],
                overrides: &#list,
            })
        }
    }

    /// The function's doc text: the WGSL comments, then what the macro knows.
    fn docs(&self, k: &Kernel, iface: &Interface) -> String {
        let dims: Vec<String> = iface
            .workgroup_size
            .iter()
            .zip(&iface.workgroup_size_overrides)
            .map(|(d, o)| match o {
                Some(name) if *d > 0 => format!("`{name}` (default {d})"),
                Some(name) => format!("`{name}`"),
                None => d.to_string(),
            })
            .collect();
        let size = dims.join("×");
        let mut doc = k.doc.join("\n");
        if !doc.is_empty() {
            doc.push_str("\n\n");
        }
        let mut bindings: Vec<(u32, String)> = iface
            .bindings
            .iter()
            .map(|b| {
                let what = match b.access {
                    Access::Read => format!("`{}`: read-only storage `{}`", b.name, b.wgsl),
                    Access::ReadWrite => format!("`{}`: read-write storage `{}`", b.name, b.wgsl),
                    Access::Uniform => format!("`{}`: uniform `{}`", b.name, b.wgsl),
                };
                (b.binding, what)
            })
            .collect();
        bindings.extend(iface.resources.iter().map(|r| (r.binding, format!("`{}`: `{}`", r.name, r.wgsl))));
        bindings.sort_by_key(|(b, _)| *b);
        let mut bindings: Vec<String> = bindings.into_iter().map(|(_, w)| w).collect();
        if let Some(i) = &iface.immediate {
            bindings.push(format!("`{}`: immediate `{}` ({} bytes)", i.name, i.wgsl, i.size));
        }
        let grid = match &k.shape.grid {
            GridSource::Annotation(g) => format!("`{}`, computed from the arguments", g.text),
            _ => "given by the caller".to_string(),
        };
        doc.push_str(&format!(
            "# Kernel\n- source: `{}`, line {} (`{}::WGSL` holds the assembled WGSL)\n- workgroup size: {size}; grid: {grid}\n- bindings: {}\n",
            k.marker.file,
            k.marker.line,
            k.name,
            bindings.join("; ")
        ));
        if !k.shape.requires.is_empty() {
            let checks: Vec<String> = k.shape.requires.iter().map(|r| format!("`{}`", r.text)).collect();
            doc.push_str(&format!("- checked before dispatch: {}\n", checks.join(", ")));
        }
        doc.push_str(&format!("- features: {}\n", features_doc(&k.variants)));
        if let Some(at) = &k.shape.unchecked {
            doc.push_str(&format!(
                "- runtime checks: off (`@unchecked`, line {}): the kernel keeps every access in range once \
                 its `@requires` hold, so natively its module is created without wgpu's clamping of array \
                 indices, loop bounding and integer-division guards (`KERNELS_RUNTIME_CHECKS=all` turns them \
                 back on)\n",
                at.line
            ));
        }
        doc.push_str(
            "\n# Errors\nReturns an error, without dispatching, if a `@requires` check fails, a buffer is \
             shorter than its binding needs, the grid is over the device's limits, or the adapter lacks a \
             feature the kernel needs.",
        );
        doc
    }

    /// The companion module's items: its types, and (for a kernel that compiled) its sources and
    /// `KernelDef`.
    fn companion(&self, k: &Kernel, iface: &Interface, sig: &Signature) -> TokenStream {
        let is_shared = |n: &str| self.shared.iter().any(|d| d.name == n);
        let own: Vec<TokenStream> = iface
            .structs
            .iter()
            .filter(|s| !is_shared(&s.name))
            .map(|s| {
                self.struct_def(s, &|n| {
                    let i = ident(n);
                    if is_shared(n) { quote!(super::super::__k_structs::#i) } else { quote!(#i) }
                })
            })
            .collect();
        let reexports = iface.structs.iter().map(|s| {
            let i = ident(&s.name);
            if is_shared(&s.name) {
                quote!(pub use super::__k_structs::#i;)
            } else {
                quote!(pub use self::__k_structs::#i;)
            }
        });
        let overrides = if iface.overrides.is_empty() {
            quote!()
        } else {
            let fields = iface.overrides.iter().map(|o| {
                let id = ident(&o.name);
                let ty = self.primitive(o.ty);
                let doc = format!(
                    "`override {}: {}`{}",
                    o.name,
                    o.ty,
                    if o.has_default { " (has a default)" } else { " (required)" }
                );
                quote!(#[doc = #doc] pub #id: ::core::option::Option<#ty>)
            });
            let ty = &sig.overrides_type;
            quote! {
                /// Values for the kernel's `override` constants; `None` keeps the WGSL default.
                #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default, ::core::cmp::PartialEq)]
                pub struct #ty { #(#fields,)* }
            }
        };
        let sources = if k.errors.is_empty() && !k.variants.is_empty() { self.sources(k, iface) } else { quote!() };
        let own = if own.is_empty() {
            quote!()
        } else {
            quote! {
                /// The structs only this kernel uses.
                #[doc(hidden)]
                pub mod __k_structs {
                    #(#own)*
                }
            }
        };
        quote! {
            #own
            #(#reexports)*
            #overrides
            #sources
        }
    }

    /// The sources and the `KernelDef` of a kernel that compiled.
    fn sources(&self, k: &Kernel, iface: &Interface) -> TokenStream {
        let rt = &self.rt;
        let str_t = self.primitive("str");
        let u32_t = self.primitive("u32");
        let variants = k.variants.iter().map(|v| {
            let (s, f, w, b) = (v.subgroups, v.f16, &v.wgsl, &v.browser_wgsl);
            let coop = v.coop.iter().map(|c| {
                let (m, n, kk) = (c.m, c.n, c.k);
                let scalar = |s: CoopScalar| match s {
                    CoopScalar::F16 => quote!(#rt::CoopScalar::F16),
                    CoopScalar::F32 => quote!(#rt::CoopScalar::F32),
                };
                let (ab, cr) = (scalar(c.ab), scalar(c.cr));
                quote!(#rt::CoopConfig { m: #m, n: #n, k: #kk, ab: #ab, cr: #cr })
            });
            let (features, declared) = (&v.features, &v.overrides);
            quote!(#rt::VariantDef {
                subgroups: #s, f16: #f, coop: &[#(#coop),*], wgsl: #w, browser_wgsl: #b, features: &[#(#features),*],
                overrides: &[#(#declared),*],
            })
        });
        let bindings = iface.bindings.iter().map(|b| {
            let (group, binding, name, wgsl, stride, min, offset) =
                (b.group, b.binding, &b.name, &b.wgsl, b.stride, b.min_elems, b.offset);
            let kind = match b.access {
                Access::Read => quote!(#rt::BindingKind::Read),
                Access::ReadWrite => quote!(#rt::BindingKind::ReadWrite),
                Access::Uniform => quote!(#rt::BindingKind::Uniform),
            };
            quote! {
                #rt::BindingDef {
                    group: #group, binding: #binding, name: #name, kind: #kind, wgsl_type: #wgsl,
                    stride: #stride, min_elems: #min, offset: #offset,
                }
            }
        });
        let resources = iface.resources.iter().map(|r| {
            let (group, binding, name, wgsl) = (r.group, r.binding, &r.name, &r.wgsl);
            let dim = |d: TextureDim| {
                let d = format_ident!("{}", d.rust());
                quote!(#rt::TextureDim::#d)
            };
            let kind = match &r.kind {
                ResourceKind::Texture { dim: d, sample } => {
                    let d = dim(*d);
                    let sample = match sample {
                        SampleKind::Float { filterable } => quote!(#rt::SampleKind::Float { filterable: #filterable }),
                        SampleKind::Sint => quote!(#rt::SampleKind::Sint),
                        SampleKind::Uint => quote!(#rt::SampleKind::Uint),
                        SampleKind::Depth => quote!(#rt::SampleKind::Depth),
                    };
                    quote!(#rt::ResourceKind::Texture { dim: #d, sample: #sample, multisampled: false })
                }
                ResourceKind::StorageTexture { dim: d, format, access } => {
                    let (d, f) = (dim(*d), format_ident!("{}", format));
                    let access = format_ident!("{}", format!("{access:?}"));
                    quote!(#rt::ResourceKind::StorageTexture {
                        dim: #d, format: #rt::wgpu::TextureFormat::#f, access: #rt::TextureAccess::#access,
                    })
                }
                ResourceKind::Sampler { comparison, filtering } => {
                    quote!(#rt::ResourceKind::Sampler { comparison: #comparison, filtering: #filtering })
                }
            };
            quote!(#rt::ResourceDef { group: #group, binding: #binding, name: #name, kind: #kind, wgsl_type: #wgsl })
        });
        let keys = iface.workgroup_size_overrides.iter().map(|o| match o {
            Some(name) => {
                let key = iface.overrides.iter().find(|d| &d.name == name).map_or_else(|| name.clone(), |d| d.key());
                quote!(::core::option::Option::Some(#key))
            }
            None => quote!(::core::option::Option::None),
        });
        let immediate_size = iface.immediate.as_ref().map_or(0, |i| i.size);
        let overrides = iface.overrides.iter().map(|o| {
            let (key, name, ty, has_default) = (o.key(), &o.name, o.ty, o.has_default);
            quote!(#rt::OverrideDef { name: #name, key: #key, ty: #ty, has_default: #has_default })
        });
        let (grid_kind, grid_text) = match &k.shape.grid {
            GridSource::Annotation(g) => (
                match g.value {
                    shape::Grid::Threads(_) => quote!(#rt::GridKind::Threads),
                    shape::Grid::Workgroups(_) => quote!(#rt::GridKind::Workgroups),
                    shape::Grid::Explicit(_) => quote!(#rt::GridKind::Explicit),
                },
                g.text.clone(),
            ),
            _ => (quote!(#rt::GridKind::Caller), String::new()),
        };
        let requires = k.shape.requires.iter().map(|r| &r.text);
        let wgsl = &k.variants[0].wgsl;
        let browser = k.variants.iter().find(|v| !v.browser_wgsl.is_empty()).map_or("", |v| v.browser_wgsl.as_str());
        let fallback = match k.variants.iter().skip(1).find(|v| !v.subgroups && v.coop.is_empty()) {
            Some(v) => {
                let w = &v.wgsl;
                quote!(::core::option::Option::Some(#w))
            }
            None => quote!(::core::option::Option::None),
        };
        let source = match (&self.file.path, crate::reload::kernel_interface(k)) {
            (Some(_), Some(interface)) => {
                quote!(::core::option::Option::Some(&#rt::KernelSource { file: &super::__k_source, interface: #interface }))
            }
            _ => quote!(::core::option::Option::None),
        };
        let [wx, wy, wz] = iface.workgroup_size;
        let (kname, module, file, line, doc) =
            (&k.name, &self.file.module, &k.marker.file, k.marker.line as u32, k.doc.join("\n"));
        let unchecked = k.shape.unchecked.is_some();
        quote! {
            /// The workgroup size, from `@workgroup_size`; a dimension an override gives holds
            /// the override's default (0 where it has none): see `KERNEL.workgroup_size_overrides`.
            pub const WORKGROUP_SIZE: [#u32_t; 3] = [#wx, #wy, #wz];
            /// The assembled source of the preferred variant, as wgpu takes it (with the
            /// `enable` directives it needs; it may use subgroups or cooperative matrices).
            pub const WGSL: &#str_t = #wgsl;
            /// The source of the portable variant, for adapters without subgroups or
            /// cooperative matrices: the first variant that needs neither (it may need
            /// `SHADER_F16`), where that is not [`WGSL`]; `None` where `WGSL` is already
            /// portable or the kernel has no such variant.
            pub const WGSL_WITHOUT_SUBGROUPS: ::core::option::Option<&#str_t> = #fallback;
            /// The source for a browser's WebGPU: the browser form of the first variant without
            /// cooperative matrices (WebGPU has none), with `enable subgroups;` where it uses
            /// subgroups; empty if every variant uses cooperative matrices.
            pub const BROWSER_WGSL: &#str_t = #browser;
            /// Everything the runtime knows about this kernel.
            pub static KERNEL: #rt::KernelDef = #rt::KernelDef {
                name: #kname,
                module: #module,
                file: #file,
                line: #line,
                doc: #doc,
                workgroup_size: [#wx, #wy, #wz],
                workgroup_size_overrides: [#(#keys),*],
                immediate_size: #immediate_size,
                bindings: &[#(#bindings),*],
                resources: &[#(#resources),*],
                overrides: &[#(#overrides),*],
                grid: #grid_kind,
                grid_expr: #grid_text,
                requires: &[#(#requires),*],
                variants: &[#(#variants),*],
                unchecked: #unchecked,
                source: #source,
            };
        }
    }
}

/// The parameters of one kernel's function.
struct Signature {
    /// The recorder parameter (`rec`).
    rec: Ident,
    /// The grid parameter, when the caller passes the grid.
    grid: Option<Ident>,
    /// The overrides parameter, when the kernel has overrides.
    overrides: Option<Ident>,
    /// The name of the companion's overrides struct.
    overrides_type: Ident,
    /// (WGSL binding name, parameter) in binding order.
    bindings: Vec<(String, Ident)>,
    /// Every parameter after `rec`, with its type.
    params: Vec<TokenStream>,
    /// The runtime arguments, in binding order.
    args: Vec<TokenStream>,
}

/// Struct definitions shared by every kernel that uses them go to the file module; names
/// with different layouts in different kernels stay in each kernel's module.
fn shared_structs(kernels: &[&Kernel]) -> Vec<StructDef> {
    let mut seen: Vec<(StructDef, bool)> = Vec::new();
    for k in kernels {
        let Some(i) = &k.interface else { continue };
        for s in &i.structs {
            match seen.iter_mut().find(|(d, _)| same(&d.name, &s.name)) {
                Some((d, same)) => *same &= d == s,
                None => seen.push((s.clone(), true)),
            }
        }
    }
    // A struct that contains a non-shared struct cannot be shared either.
    loop {
        let not_shared: Vec<String> = seen.iter().filter(|(_, s)| !s).map(|(d, _)| d.name.clone()).collect();
        let mut changed = false;
        for (d, same) in seen.iter_mut() {
            if *same && d.fields.iter().any(|f| f.ty.as_ref().is_some_and(|t| mentions(t, &not_shared))) {
                *same = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    seen.into_iter().filter(|(_, s)| *s).map(|(d, _)| d).collect()
}

fn mentions(t: &HostType, names: &[String]) -> bool {
    match t {
        HostType::Struct(n) => names.contains(n),
        HostType::Array(t, _) => mentions(t, names),
        HostType::Scalar(_) => false,
    }
}

/// The `features` line of a kernel's docs: what each variant needs, preferred first.
fn features_doc(variants: &[Variant]) -> String {
    let needs = |v: &Variant| {
        let mut out: Vec<String> = v
            .coop
            .iter()
            .map(|c| {
                let s = |s: CoopScalar| match s {
                    CoopScalar::F16 => "f16",
                    CoopScalar::F32 => "f32",
                };
                format!("cooperative matrices {}×{}×{} ({} A/B, {} C)", c.m, c.n, c.k, s(c.ab), s(c.cr))
            })
            .collect();
        if v.subgroups {
            out.push("`SUBGROUP`".into());
        }
        if v.f16 {
            out.push("`SHADER_F16`".into());
        }
        out.extend(v.features.iter().map(|f| format!("`{f}`")));
        if out.is_empty() { "no optional features".to_string() } else { out.join(", ") }
    };
    match variants {
        [] => "none (the kernel did not compile)".into(),
        [v] if v.coop.is_empty() && !v.subgroups && !v.f16 && v.features.is_empty() => "no optional features".into(),
        [v] => format!("needs {}", needs(v)),
        _ => format!(
            "variants, preferred first (the first the device supports runs): {}",
            variants
                .iter()
                .enumerate()
                .map(|(i, v)| format!("({}) {}", i + 1, needs(v)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}
