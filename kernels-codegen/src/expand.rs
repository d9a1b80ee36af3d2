//! Stage 6: tokens. One `pub mod <file>` with one function per kernel, a companion module per
//! kernel (`<kernel>::WGSL`, `WORKGROUP_SIZE`, `KERNEL`, its types), the structs with WGSL
//! layout, `include_str!` lines for rebuild tracking, and a `compile_error!` per error — all
//! errors of the call, with the kernels that are fine still emitted.

use crate::compile::{File, Kernel, Variant};
use crate::reflect::{Access, HostScalar, HostType, Interface, StructDef};
use crate::shape;
use crate::validate::CoopScalar;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// Paths in generated code go through the facade crate's hidden module.
fn rt() -> TokenStream {
    quote!(::kernels)
}

/// A Rust identifier for a WGSL name (raw if it is a Rust keyword).
pub fn ident(name: &str) -> Ident {
    if syn::parse_str::<Ident>(name).is_ok() {
        Ident::new(name, Span::call_site())
    } else if syn::parse_str::<Ident>(&format!("r#{name}")).is_ok() {
        Ident::new_raw(name, Span::call_site())
    } else {
        format_ident!("{}_", name.replace(|c: char| !c.is_alphanumeric() && c != '_', "_"))
    }
}

fn scalar_tokens(s: HostScalar) -> TokenStream {
    let rt = rt();
    match s {
        HostScalar::F32 => quote!(f32),
        HostScalar::U32 => quote!(u32),
        HostScalar::I32 => quote!(i32),
        HostScalar::F16 => quote!(#rt::f16),
    }
}

fn type_tokens(t: &HostType, struct_path: &dyn Fn(&str) -> TokenStream) -> TokenStream {
    match t {
        HostType::Scalar(s) => scalar_tokens(*s),
        HostType::Array(inner, n) => {
            let inner = type_tokens(inner, struct_path);
            let n = *n as usize;
            quote!([#inner; #n])
        }
        HostType::Struct(name) => struct_path(name),
    }
}

fn struct_tokens(s: &StructDef) -> TokenStream {
    let rt = rt();
    let name = ident(&s.name);
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
                let ty = type_tokens(ty, &|n| {
                    let i = ident(n);
                    quote!(#i)
                });
                let doc = format!("`{n}`: offset {offset}, {size} bytes.");
                fields.push(quote!(#[doc = #doc] pub #id: #ty));
                ctor_args.push(quote!(#id: #ty));
                ctor_fields.push(quote!(#id));
                asserts.push(quote!(assert!(::core::mem::offset_of!(#name, #id) == #offset);));
            }
            _ => {
                let id = format_ident!("_pad{}", pad);
                pad += 1;
                fields.push(quote!(#[doc(hidden)] pub #id: [u8; #size]));
                ctor_fields.push(quote!(#id: [0u8; #size]));
            }
        }
    }
    let size = s.size as usize;
    let doc =
        format!("`struct {}` with its WGSL layout: {size} bytes, padding explicit (`_padN` fields are zero).", s.name);
    quote! {
        #[doc = #doc]
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
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
            assert!(::core::mem::size_of::<#name>() == #size);
            #(#asserts)*
        };
    }
}

/// Struct definitions shared by every kernel that uses them go to the file module; names
/// with different layouts in different kernels stay in each kernel's module.
fn shared_structs(kernels: &[&Kernel]) -> Vec<StructDef> {
    let mut seen: Vec<(StructDef, bool)> = Vec::new();
    for k in kernels {
        let Some(i) = &k.interface else { continue };
        for s in &i.structs {
            match seen.iter_mut().find(|(d, _)| d.name == s.name) {
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

/// Constants every kernel of the file sees with the same value (those of the shared and file
/// preambles), for the host: block sizes the caller must know, tile shapes.
fn shared_consts(kernels: &[&Kernel]) -> Vec<(String, &'static str, String)> {
    let ifaces: Vec<&Interface> = kernels.iter().filter_map(|k| k.interface.as_ref()).collect();
    let Some(first) = ifaces.first() else { return Vec::new() };
    first
        .exported
        .iter()
        .filter(|c| ifaces.iter().all(|i| i.exported.contains(c)))
        .filter(|c| syn::parse_str::<Ident>(&c.0).is_ok())
        .cloned()
        .collect()
}

fn mentions(t: &HostType, names: &[String]) -> bool {
    match t {
        HostType::Struct(n) => names.contains(n),
        HostType::Array(t, _) => mentions(t, names),
        HostType::Scalar(_) => false,
    }
}

/// Expands a compiled file. `span` is the path literal's.
pub fn expand(file: &File, span: Span) -> TokenStream {
    let rt = rt();
    let errors: Vec<TokenStream> = file
        .all_errors()
        .map(|d| {
            let msg = d.render();
            quote::quote_spanned!(span=> ::core::compile_error!(#msg);)
        })
        .collect();
    if file.module.is_empty() {
        return quote!(#(#errors)*);
    }
    let module = ident(&file.module);
    let includes = file.read.iter().map(|p| {
        let p = p.to_string_lossy().into_owned();
        quote!(
            const _: &str = ::core::include_str!(#p);
        )
    });
    let kernels: Vec<&Kernel> = file.kernels.iter().collect();
    let shared = shared_structs(&kernels);
    let shared_defs = shared.iter().map(struct_tokens);
    let consts = shared_consts(&kernels).into_iter().map(|(name, ty, value)| {
        let id = ident(&name);
        let ty = format_ident!("{}", ty);
        let value: TokenStream = value.parse().unwrap_or_default();
        let doc = format!("`const {name}` of the WGSL (shared preamble or file preamble).");
        quote!(#[doc = #doc] pub const #id: #ty = #value;)
    });
    let mut items = Vec::new();
    let mut registry = Vec::new();
    let mut annotation_errors = Vec::new();
    for k in &kernels {
        let Some(iface) = &k.interface else { continue };
        match kernel_tokens(file, k, iface, &shared) {
            Ok(t) => {
                items.push(t);
                if k.errors.is_empty() {
                    let name = ident(&k.name);
                    registry.push(quote!(&#name::KERNEL));
                }
            }
            Err(e) => annotation_errors.extend(e),
        }
    }
    let annotation_errors = annotation_errors.into_iter().map(|d| {
        let msg = d.render();
        quote::quote_spanned!(span=> ::core::compile_error!(#msg);)
    });
    let doc = format!("Kernels of `{}`, generated by `kernels!`.", file.display);
    quote! {
        #(#errors)*
        #(#annotation_errors)*
        #[doc = #doc]
        #[allow(clippy::too_many_arguments, clippy::needless_borrow, clippy::identity_op, unused_parens)]
        pub mod #module {
            // Rebuild when a file the macro read changes.
            #(#includes)*

            #(#consts)*

            #(#shared_defs)*

            #(#items)*

            /// Every kernel of this file, for [`Gpu::warm_up`](::kernels::Gpu::warm_up) and tools.
            pub static KERNELS: &[&#rt::KernelDef] = &[#(#registry),*];
        }
    }
}

fn kernel_tokens(
    file: &File,
    k: &Kernel,
    iface: &Interface,
    shared: &[StructDef],
) -> Result<TokenStream, Vec<crate::diagnostic::Diagnostic>> {
    let rt = rt();
    let name = ident(&k.name);
    let kname = &k.name;
    let qualified = format!("{}::{}", file.module, k.name);
    let mut diags = Vec::new();

    // Names we add must not collide with binding names.
    let taken = |n: &str| iface.bindings.iter().any(|b| b.name == n);
    let own = |n: &str| {
        if taken(n) { format_ident!("{}_", n) } else { format_ident!("{}", n) }
    };
    let rec = own("rec");
    let grid_param = own("grid");
    let overrides_param = own("overrides");

    let struct_path = |n: &str| {
        let i = ident(n);
        quote!(#name::#i)
    };
    let rust_name = |n: &str| ident(n);

    // Parameters and arguments.
    let mut params = Vec::new();
    let mut args = Vec::new();
    let mut binding_defs = Vec::new();
    let mut binding_docs = Vec::new();
    for b in &iface.bindings {
        let id = ident(&b.name);
        let ty = type_tokens(&b.ty, &struct_path);
        let (gb, bb, bname, wgsl) = (b.group, b.binding, &b.name, &b.wgsl);
        let stride = b.stride;
        let min_elems = b.min_elems;
        let (kind, doc) = match b.access {
            Access::Read => {
                params.push(quote!(#id: &#rt::Buffer<#ty>));
                args.push(quote!(#rt::__private::Arg::storage(#id, false)));
                (quote!(#rt::BindingKind::Read), format!("`{bname}`: read-only storage `{wgsl}`"))
            }
            Access::ReadWrite => {
                params.push(quote!(#id: &mut #rt::Buffer<#ty>));
                args.push(quote!(#rt::__private::Arg::storage(&*#id, true)));
                (quote!(#rt::BindingKind::ReadWrite), format!("`{bname}`: read-write storage `{wgsl}`"))
            }
            Access::Uniform => {
                params.push(quote!(#id: #ty));
                args.push(quote!(#rt::__private::Arg::uniform(#rt::__private::bytemuck::bytes_of(&#id))));
                (quote!(#rt::BindingKind::Uniform), format!("`{bname}`: uniform `{wgsl}`"))
            }
        };
        binding_docs.push(doc);
        binding_defs.push(quote! {
            #rt::BindingDef {
                group: #gb, binding: #bb, name: #bname, kind: #kind, wgsl_type: #wgsl,
                stride: #stride, min_elems: #min_elems,
            }
        });
    }

    // Annotations.
    let mut checks = Vec::new();
    let mut requires_text = Vec::new();
    let mut grid_expr: Option<TokenStream> = None;
    let mut grid_text = String::from("given by the caller");
    let mut grid_kind = quote!(#rt::GridKind::Caller);
    for (a, loc) in k.notes.annotations.iter().zip(&k.annotation_locations) {
        let ann_loc = |_: &std::ops::Range<usize>| loc.clone();
        match a.kind.as_str() {
            "requires" => match shape::requirement(&a.expr, iface, &rust_name) {
                Ok((l, r, op, lt, rtext)) => {
                    let op_id = format_ident!("{}", op);
                    let text = a.expr.clone();
                    checks.push(quote! {
                        #rt::__private::shape::require(#qualified, #text, #lt, #l, #rtext, #r, #rt::__private::shape::#op_id)?;
                    });
                    requires_text.push(a.expr.clone());
                }
                Err(e) => diags.push(
                    crate::diagnostic::Diagnostic::at(ann_loc(&a.range), format!("in `@requires`: {e}"))
                        .in_kernel(kname),
                ),
            },
            "grid" => {
                if grid_expr.is_some() {
                    diags.push(
                        crate::diagnostic::Diagnostic::at(ann_loc(&a.range), "more than one `@grid`").in_kernel(kname),
                    );
                    continue;
                }
                match shape::grid(&a.expr, iface, &rust_name) {
                    Ok(shape::Grid::Threads(n)) => {
                        let [_, y, z] = iface.workgroup_size;
                        if y != 1 || z != 1 {
                            diags.push(crate::diagnostic::Diagnostic::at(ann_loc(&a.range), "`threads(n)` needs a one-dimensional workgroup (`@workgroup_size(x)`), since the kernel recovers its index with `flat_id`").in_kernel(kname));
                        }
                        let text = a.expr.clone();
                        grid_expr = Some(quote!(#rt::__private::shape::threads(#qualified, #text, #n)?));
                        grid_kind = quote!(#rt::GridKind::Threads);
                    }
                    Ok(shape::Grid::Workgroups(n)) => {
                        let text = a.expr.clone();
                        grid_expr = Some(quote!(#rt::__private::shape::workgroups(#qualified, #text, #n)?));
                        grid_kind = quote!(#rt::GridKind::Workgroups);
                    }
                    Ok(shape::Grid::Explicit(v)) => {
                        let text = a.expr.clone();
                        let (x, y) = (&v[0], &v[1]);
                        let z = v.get(2).cloned().unwrap_or(quote!(::core::option::Option::Some(1i128)));
                        grid_expr = Some(quote!(#rt::__private::shape::explicit(#qualified, #text, [#x, #y, #z])?));
                        grid_kind = quote!(#rt::GridKind::Explicit);
                    }
                    Err(e) => {
                        diags.push(
                            crate::diagnostic::Diagnostic::at(ann_loc(&a.range), format!("in `@grid`: {e}"))
                                .in_kernel(kname),
                        );
                        grid_expr = Some(quote!(::core::unimplemented!()));
                    }
                }
                grid_text = format!("`{}`, computed from the arguments", a.expr);
            }
            _ => {}
        }
    }
    let grid_value = match grid_expr {
        Some(g) => g,
        None => {
            params.push(quote!(#grid_param: #rt::Grid));
            quote!(#grid_param)
        }
    };

    // Overrides.
    let mut override_fields = Vec::new();
    let mut override_pushes = Vec::new();
    let mut override_defs = Vec::new();
    for o in &iface.overrides {
        let id = ident(&o.name);
        let ty = format_ident!("{}", o.ty);
        let key = o.id.map(|i| i.to_string()).unwrap_or_else(|| o.name.clone());
        let oname = &o.name;
        let oty = o.ty;
        let has_default = o.has_default;
        let doc = format!(
            "`override {}: {}`{}",
            o.name,
            o.ty,
            if o.has_default { " (has a default)" } else { " (required)" }
        );
        override_fields.push(quote!(#[doc = #doc] pub #id: ::core::option::Option<#ty>));
        let value = if o.ty == "bool" { quote!(if v { 1.0 } else { 0.0 }) } else { quote!(v as f64) };
        override_pushes.push(quote! {
            if let ::core::option::Option::Some(v) = #overrides_param.#id { __k_overrides.push((#key, #value)); }
        });
        override_defs.push(quote!(#rt::OverrideDef { name: #oname, key: #key, ty: #oty, has_default: #has_default }));
    }
    let has_overrides = !iface.overrides.is_empty();
    if has_overrides {
        params.push(quote!(#overrides_param: #name::Overrides));
    }
    let overrides_code = if has_overrides {
        quote! {
            let mut __k_overrides: ::std::vec::Vec<(&'static str, f64)> = ::std::vec::Vec::new();
            #(#override_pushes)*
        }
    } else {
        quote!(let __k_overrides: [(&'static str, f64); 0] = [];)
    };
    let overrides_struct = if has_overrides {
        quote! {
            /// Values for the kernel's `override` constants; `None` keeps the WGSL default.
            #[derive(Clone, Copy, Debug, Default, PartialEq)]
            pub struct Overrides { #(#override_fields,)* }
        }
    } else {
        quote!()
    };

    // Structs: shared ones are re-exported, the rest defined here.
    let mut struct_items = Vec::new();
    for s in &iface.structs {
        if shared.iter().any(|d| d.name == s.name) {
            let i = ident(&s.name);
            struct_items.push(quote!(pub use super::#i;));
        } else {
            struct_items.push(struct_tokens(s));
        }
    }

    // Docs.
    let [wx, wy, wz] = iface.workgroup_size;
    let mut doc = k.notes.doc.join("\n");
    if !doc.is_empty() {
        doc.push_str("\n\n");
    }
    doc.push_str(&format!(
        "# Kernel\n- source: `{}`, line {} (`{}::WGSL` holds the assembled WGSL)\n- workgroup size: {wx}×{wy}×{wz}; grid: {grid_text}\n- bindings: {}\n",
        k.marker.file,
        k.marker.line,
        k.name,
        binding_docs.join("; ")
    ));
    if !requires_text.is_empty() {
        doc.push_str(&format!(
            "- checked before dispatch: {}\n",
            requires_text.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    doc.push_str(&format!("- features: {}\n", features_doc(&k.variants)));
    doc.push_str(
        "\n# Errors\nReturns an error, without dispatching, if a `@requires` check fails, a buffer is \
         shorter than its binding needs, the grid is over the device's limits, or the adapter lacks a \
         feature the kernel needs.",
    );

    let ok = k.errors.is_empty() && diags.is_empty();
    let body = if ok {
        quote! {
            #(#checks)*
            let __k_grid: #rt::Grid = #grid_value;
            #overrides_code
            #rt::Record::record(#rec, #rt::__private::Call {
                kernel: &#name::KERNEL,
                grid: __k_grid,
                args: &[#(#args),*],
                overrides: &__k_overrides,
            })
        }
    } else {
        quote!(::core::unimplemented!("kernel `{}` did not compile", #kname))
    };

    let companion = if ok {
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
            quote!(#rt::VariantDef { subgroups: #s, f16: #f, coop: &[#(#coop),*], wgsl: #w, browser_wgsl: #b })
        });
        let wgsl = &k.variants[0].wgsl;
        let browser = k.variants.iter().find(|v| v.coop.is_empty()).map_or("", |v| v.browser_wgsl.as_str());
        let fallback = match k.variants.iter().skip(1).find(|v| !v.subgroups && v.coop.is_empty()) {
            Some(v) => {
                let w = &v.wgsl;
                quote!(::core::option::Option::Some(#w))
            }
            None => quote!(::core::option::Option::None),
        };
        let file_display = &k.marker.file;
        let line = k.marker.line as u32;
        let module_name = &file.module;
        let kdoc = k.notes.doc.join("\n");
        let grid_src =
            k.notes.annotations.iter().find(|a| a.kind == "grid").map(|a| a.expr.clone()).unwrap_or_default();
        quote! {
            /// The workgroup size, from `@workgroup_size`.
            pub const WORKGROUP_SIZE: [u32; 3] = [#wx, #wy, #wz];
            /// The assembled source of the preferred variant, as wgpu takes it (with the
            /// `enable` directives it needs; it may use subgroups or cooperative matrices).
            pub const WGSL: &str = #wgsl;
            /// The source of the portable variant, for adapters without subgroups or
            /// cooperative matrices: the first variant that needs neither (it may need
            /// `SHADER_F16`), where that is not [`WGSL`]; `None` where `WGSL` is already
            /// portable or the kernel has no such variant.
            pub const WGSL_WITHOUT_SUBGROUPS: ::core::option::Option<&str> = #fallback;
            /// The source for a browser's WebGPU: the browser form of the first variant without
            /// cooperative matrices (WebGPU has none), with `enable subgroups;` where it uses
            /// subgroups; empty if every variant uses cooperative matrices.
            pub const BROWSER_WGSL: &str = #browser;
            /// Everything the runtime knows about this kernel.
            pub static KERNEL: #rt::KernelDef = #rt::KernelDef {
                name: #kname,
                module: #module_name,
                file: #file_display,
                line: #line,
                doc: #kdoc,
                workgroup_size: [#wx, #wy, #wz],
                bindings: &[#(#binding_defs),*],
                overrides: &[#(#override_defs),*],
                grid: #grid_kind,
                grid_expr: #grid_src,
                requires: &[#(#requires_text),*],
                variants: &[#(#variants),*],
            };
        }
    } else {
        quote!()
    };

    let companion_doc = format!("Companion of [`{kname}`](fn@super::{kname}): its source, workgroup size and types.");
    let diags_ok = diags.is_empty();
    let out = quote! {
        #[doc = #doc]
        pub fn #name(#rec: impl #rt::Record, #(#params),*) -> ::core::result::Result<(), #rt::Error> {
            #body
        }

        #[doc = #companion_doc]
        pub mod #name {
            #(#struct_items)*
            #overrides_struct
            #companion
        }
    };
    if diags_ok { Ok(out) } else { Err(diags) }
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
        if out.is_empty() { "no optional features".to_string() } else { out.join(", ") }
    };
    match variants {
        [] => "none (the kernel did not compile)".into(),
        [v] if v.coop.is_empty() && !v.subgroups && !v.f16 => "no optional features".into(),
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
