#![doc = include_str!("../README.md")]

extern crate self as kernels;

pub use kernels_macro::kernels;
pub use kernels_runtime::*;

/// The library's kernel files, listed once: each becomes a module through `kernels!` and
/// every kernel of each is in [`all_kernels`], so a file cannot be left out of warm-up, the web
/// export or the catalog.
macro_rules! kernel_files {
    ($($module:ident: $path:literal),* $(,)?) => {
        $(kernels!($path, module = $module);)*

        /// Every kernel of the library, for [`Gpu::warm_up`] and tools.
        pub fn all_kernels() -> impl Iterator<Item = &'static &'static KernelDef> {
            ::core::iter::empty()$(.chain($module::KERNELS))*
        }
    };
}

kernel_files! {
    infrastructure: "shaders/00_infrastructure.wgsl",
    embedding: "shaders/01_embedding.wgsl",
    norm: "shaders/02_norm.wgsl",
    linear: "shaders/03_linear.wgsl",
    rope: "shaders/04_rope.wgsl",
    attention: "shaders/05_attention.wgsl",
    activation: "shaders/06_activation.wgsl",
    loss: "shaders/07_loss.wgsl",
    cast: "shaders/08_cast.wgsl",
    backward_ffn: "shaders/09_backward_ffn.wgsl",
    backward_attention: "shaders/10_backward_attention.wgsl",
    optimizer: "shaders/12_optimizer.wgsl",
}

/// The guide's pages (`docs/guide/`) as doc tests: their Rust examples compile (and run where
/// they are not `no_run`), and `docs/guide/check.rs` compiles every WGSL example of a page
/// through the macro's own stages.
#[cfg(doctest)]
mod guide {
    /// A page whose Rust blocks are doc tests and whose WGSL blocks are checked.
    macro_rules! page {
        ($name:ident, $path:literal) => {
            #[doc = include_str!(concat!("../", $path))]
            #[doc = concat!("```\n", include_str!("../docs/guide/check.rs"), "\ncheck(\"", $path, "\");\n```")]
            mod $name {}
        };
    }
    page!(writing_kernels, "docs/guide/writing-kernels.md");
    page!(variants, "docs/guide/variants.md");
    page!(errors_and_threads, "docs/guide/errors-and-threads.md");
    // wgsl-support.md: its examples and their claims are checked by kernels-codegen/tests/guide.rs.
    /// Pages without WGSL examples: their Rust blocks only.
    #[doc = include_str!("../docs/guide/adapters.md")]
    mod adapters {}
    #[doc = include_str!("../docs/guide/products.md")]
    mod products {}
    #[doc = include_str!("../docs/guide/web.md")]
    mod web {}
    #[doc = include_str!("../docs/guide/edit-and-time.md")]
    mod edit_and_time {}
    /// The README is the crate's documentation (its Rust blocks run there); its WGSL blocks here.
    #[doc = concat!("```\n", include_str!("../docs/guide/check.rs"), "\ncheck(\"README.md\");\n```")]
    mod readme {}
}

pub mod embed;
pub mod fast_attention;
pub mod flash_attention;
pub mod gemm;
pub mod ops;

/// The kernel catalog in Markdown (docs/KERNELS.md): every kernel of the library with what it
/// computes, what it writes (overwrite or accumulate), its bindings and its grid.
pub fn catalog() -> String {
    let mut out = String::from(
        "# Kernels\n\nEvery kernel of the library, generated from the kernel files' own comments by \
         `cargo run --example catalog > docs/KERNELS.md` (a test checks that this file is current). \
         Each is `kernels::<module>::<kernel>(rec, bindings…)`; `rw` bindings are `&mut Buffer`, `r` \
         ones `&Buffer`, uniforms go by value. Shapes, layouts and limits are in each kernel's header \
         in `shaders/` and in its rustdoc. A kernel marked *(unchecked)* is annotated `// @unchecked`: \
         natively it runs without wgpu's runtime checks (`KERNELS_RUNTIME_CHECKS=all` puts them back).\n",
    );
    out.push_str(&catalog_tables(all_kernels().copied()));
    out
}

/// The tables of [`catalog`] for any kernels, a section per module in the order they come.
pub fn catalog_tables(kernels: impl IntoIterator<Item = &'static KernelDef>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut module = "";
    for k in kernels {
        if k.module != module {
            module = k.module;
            let _ = write!(
                out,
                "\n## `{module}` ({})\n\n| kernel | computes | writes | bindings | grid |\n|---|---|---|---|---|\n",
                k.file
            );
        }
        let text = k.doc.replace('\n', " ");
        // Sentences end at ". " before a capital or a backtick (not inside `a .. b`).
        let mut sentences: Vec<&str> = Vec::new();
        let mut start = 0;
        for (i, _) in text.match_indices(". ") {
            if text[i + 2..].starts_with(|c: char| c.is_uppercase() || c == '`') {
                sentences.push(text[start..=i].trim());
                start = i + 2;
            }
        }
        sentences.push(text[start..].trim());
        sentences.retain(|s| !s.is_empty());
        let first = sentences.first().copied().unwrap_or("").trim_end_matches('.');
        let writes: Vec<&str> = sentences
            .iter()
            .copied()
            .filter(|s| {
                let l = s.to_lowercase();
                l.contains("overwrite") || l.contains("accumulate") || l.contains("in place")
            })
            .collect();
        let bindings: Vec<String> = k
            .bindings
            .iter()
            .map(|b| {
                let kind = match b.kind {
                    BindingKind::Read => "r",
                    BindingKind::ReadWrite => "rw",
                    BindingKind::Uniform => "uniform",
                };
                format!("`{}` {kind} `{}`", b.name, b.wgsl_type)
            })
            .collect();
        let grid = if k.grid_expr.is_empty() { "caller".to_string() } else { format!("`{}`", k.grid_expr) };
        let cell = |s: &str| s.replace('|', "\\|");
        let unchecked = if k.unchecked { " *(unchecked)*" } else { "" };
        let _ = writeln!(
            out,
            "| `{}`{unchecked} | {} | {} | {} | {} |",
            k.name,
            cell(first),
            cell(&writes.join(" ")),
            bindings.join(", "),
            cell(&grid)
        );
    }
    out
}
