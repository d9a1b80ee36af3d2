//! The expansion of a small kernel file, compared with `tests/golden/01_demo.rs`: signatures,
//! structs with explicit padding, companion modules and the `include_str!` tracking lines.
//! `UPDATE_GOLDEN=1 cargo test -p kernels-codegen --test golden` rewrites the snapshot; read
//! the diff before committing it.

use kernels_codegen::CallSite;
use std::path::Path;

#[test]
fn expansion_matches_the_snapshot() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let site = CallSite { manifest_dir: Some(root.to_path_buf()), calling_file: None };
    let tokens = kernels_codegen::expand(quote::quote!("tests/fixtures/01_demo.wgsl"), &site);
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as Rust");
    let text = prettyplease::unparse(&file).replace(&root.display().to_string(), "$CRATE");
    let golden = root.join("tests/golden/01_demo.rs");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("snapshot exists (UPDATE_GOLDEN=1 creates it)");
    let compact: String = text.split_whitespace().collect();
    assert!(compact.contains("include_str!(\"$CRATE/tests/fixtures/01_demo.wgsl\")"));
    assert!(compact.contains("include_str!(\"$CRATE/tests/fixtures/00_shared.wgsl\")"));
    assert!(!text.contains("compile_error"), "the fixture is valid");
    if text != want {
        let first = text.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "expansion differs from tests/golden/01_demo.rs from line {}:\n  got:  {}\n  want: {}",
            first + 1,
            text.lines().nth(first).unwrap_or(""),
            want.lines().nth(first).unwrap_or("")
        );
    }
}
