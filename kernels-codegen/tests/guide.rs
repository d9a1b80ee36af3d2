//! The examples of `docs/guide/wgsl-support.md` are true: every `wgsl` block compiles cleanly
//! and its expansion holds each item a `// Rust:` line of it names; every `wgsl,compile_fail`
//! block fails with each text a `// error:` line of it gives.

mod common;

use common::dir;
use kernels_codegen::compile;
use kernels_codegen::input::Shared;
use std::path::Path;

/// The fenced blocks of a markdown text: (info string, body).
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(open.take().expect("open")),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed block");
    out
}

/// The expansion as one line of text without the runtime's paths, so that a claim reads like
/// the guide writes it (`src: &Texture<D2, impl FloatFormat>`).
fn expansion_text(file: &compile::File) -> String {
    let tokens = kernels_codegen::expand::expand(file, proc_macro2::Span::call_site(), &syn::parse_quote!(::kernels));
    let mut parsed: syn::File = syn::parse2(unquote(tokens)).expect("the expansion parses");
    // Without the docs, which quote the WGSL's comments (the claims among them).
    undocument(&mut parsed.items);
    let code = prettyplease::unparse(&parsed);
    squeeze(
        &code
            .replace("::kernels::texture::", "")
            .replace("::kernels::", "")
            .replace("::core::primitive::", "")
            .replace("::core::option::Option::", "")
            .replace("r#", ""),
    )
}

/// The tokens with every string literal that quotes the WGSL's comments (its sources, its
/// docs) emptied: the claims must be found in the code, not in the quotes of themselves.
fn unquote(tokens: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    use proc_macro2::{Group, Literal, TokenTree};
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), unquote(g.stream()));
                n.set_span(g.span());
                TokenTree::Group(n)
            }
            TokenTree::Literal(l) if l.to_string().contains("Rust:") => TokenTree::Literal(Literal::string("")),
            other => other,
        })
        .collect()
}

fn undocument(items: &mut [syn::Item]) {
    let strip = |attrs: &mut Vec<syn::Attribute>| attrs.retain(|a| !a.path().is_ident("doc"));
    for item in items {
        match item {
            syn::Item::Fn(f) => strip(&mut f.attrs),
            syn::Item::Const(c) => strip(&mut c.attrs),
            syn::Item::Static(c) => strip(&mut c.attrs),
            syn::Item::Struct(s) => {
                strip(&mut s.attrs);
                s.fields.iter_mut().for_each(|f| strip(&mut f.attrs));
            }
            syn::Item::Mod(m) => {
                strip(&mut m.attrs);
                if let Some((_, items)) = &mut m.content {
                    undocument(items);
                }
            }
            syn::Item::Impl(i) => {
                for it in &mut i.items {
                    if let syn::ImplItem::Fn(f) = it {
                        strip(&mut f.attrs);
                    }
                }
            }
            _ => {}
        }
    }
}

fn squeeze(s: &str) -> String {
    let spaced: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    // prettyplease breaks lines inside brackets; the guide writes them on one.
    spaced
        .replace("( ", "(")
        .replace(" )", ")")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace(", ]", "]")
        .replace(",]", "]")
        .replace(",)", ")")
        .replace("< ", "<")
        .replace(", >", ">")
        .replace(",>", ">")
        .replace(" >", ">")
}

#[test]
fn every_example_of_the_guide_is_what_it_says() {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/wgsl-support.md");
    let text = std::fs::read_to_string(&guide).expect("the guide");
    let examples: Vec<(String, String)> =
        blocks(&text).into_iter().filter(|(info, _)| info.starts_with("wgsl")).collect();
    assert!(examples.len() >= 8, "{} examples", examples.len());
    for (i, (info, body)) in examples.iter().enumerate() {
        let d = dir(&[("01_example.wgsl", body)]);
        let site = kernels_codegen::CallSite { manifest_dir: Some(d.clone()), calling_file: None };
        let f = compile::compile(&site, "01_example.wgsl", &Shared::None, None);
        let _ = std::fs::remove_dir_all(&d);
        let errors: Vec<String> = f.all_errors().map(|e| e.render()).collect();
        let claims = |prefix: &str| -> Vec<String> {
            body.lines().filter_map(|l| l.trim().strip_prefix(prefix).map(|c| squeeze(c.trim()))).collect()
        };
        if info == "wgsl,compile_fail" {
            let said = claims("// error:");
            assert!(!said.is_empty(), "example {i} claims no error");
            for claim in said {
                assert!(
                    errors.iter().any(|e| squeeze(e).contains(&claim)),
                    "example {i}: no error `{claim}` in {errors:?}"
                );
            }
            continue;
        }
        assert_eq!(info, "wgsl", "example {i}");
        assert!(errors.is_empty(), "example {i} does not compile:\n{}\n{body}", errors.join("\n"));
        let expanded = expansion_text(&f);
        let said = claims("// Rust:");
        assert!(!said.is_empty(), "example {i} claims nothing about its Rust");
        for claim in said {
            assert!(expanded.contains(&claim), "example {i}: `{claim}` is not in the expansion:\n{expanded}");
        }
    }
}
