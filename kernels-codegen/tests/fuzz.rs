//! Random edits of the project's own shader files through the whole macro
//! (`kernels_codegen::expand`): whatever the edit, no panic, and every error says something.
//! Sized for CI (a few seconds); `KERNELS_FUZZ_CASES` runs more.

use kernels_codegen::CallSite;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// The `.wgsl` files of `shaders/<sub>`, by name.
fn wgsl_files(sub: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shaders").join(sub);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wgsl"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    files
}

fn shaders() -> Vec<(String, String)> {
    wgsl_files("")
}

/// Text that matters to the format or to WGSL, to insert at random.
const SNIPPETS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    ";",
    "@",
    "<",
    ">",
    "//",
    "/*",
    "*/",
    "\n",
    "\r\n",
    "\u{feff}",
    "é",
    "\0",
    "// --- KERNEL: extra ---\n",
    "// --- KERNEL: fill_zero ---\n",
    "  // --- KERNEL: x ---\n",
    "//#if coop\n",
    "//#if !subgroups\n",
    "//#else\n",
    "//#endif\n",
    "//#include \"nope.wgsl\"\n",
    "//#include \"00_shared.wgsl\"\n",
    "enable f16;\n",
    "// @grid threads(p.n)\n",
    "// @requires len(x) >= 1\n",
    "// @grd x\n",
    "@compute @workgroup_size(1) fn extra() {}\n",
    "fn gen() {}\n",
    "var<workgroup> big: array<f32, 99999999>;\n",
    "coop_mat16x16<f16, A>",
    "subgroupAdd(1.0)",
    "workgroupBarrier();",
    "f16(1.0)",
    "return;",
    "loop { }",
];

#[derive(Clone, Debug)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, snippet: usize },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
}

fn apply(text: &str, edit: &Edit) -> String {
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match *edit {
        Edit::Delete { at, len } => {
            let (a, b) = (floor(at), floor(at + len));
            format!("{}{}", &text[..a], &text[b..])
        }
        Edit::Insert { at, snippet } => {
            let a = floor(at);
            format!("{}{}{}", &text[..a], SNIPPETS[snippet % SNIPPETS.len()], &text[a..])
        }
        Edit::DuplicateLine { line } => {
            let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
            if !lines.is_empty() {
                let l = line % lines.len();
                lines.insert(l, lines[l]);
            }
            lines.concat()
        }
        Edit::SwapLines { a, b } => {
            let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
            if !lines.is_empty() {
                let n = lines.len();
                lines.swap(a % n, b % n);
            }
            lines.concat()
        }
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0usize..40_000, 1usize..200).prop_map(|(at, len)| Edit::Delete { at, len }),
        (0usize..40_000, any::<usize>()).prop_map(|(at, snippet)| Edit::Insert { at, snippet }),
        any::<usize>().prop_map(|line| Edit::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines { a, b }),
    ]
}

fn cases() -> u32 {
    std::env::var("KERNELS_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

fn workdir() -> PathBuf {
    std::env::temp_dir().join(format!("kernels-fuzz-{}", std::process::id()))
}

/// The setup the fuzzer edits is sound: every kernel file, unedited, with the shared preamble and
/// the library copied beside it, expands without an error.
#[test]
fn unedited_shader_files_expand_cleanly() {
    let dir = std::env::temp_dir().join(format!("kernels-fuzz-clean-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    for (name, text) in wgsl_files("lib") {
        std::fs::write(dir.join("lib").join(name), text).unwrap();
    }
    let files = shaders();
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    for (name, _) in files.iter().filter(|(n, _)| n != "00_shared.wgsl") {
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let tokens = kernels_codegen::expand(quote::quote!(#name), &site).to_string();
        assert!(
            !tokens.contains("compile_error"),
            "{name} does not expand cleanly: {}",
            &tokens[..tokens.len().min(600)]
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// One to three edits of one kernel file and the shared preamble.
    #[test]
    fn edited_shader_files_never_panic(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
        shared_edits in prop::collection::vec(edit(), 0..2),
        lib_file in any::<prop::sample::Index>(),
        lib_edits in prop::collection::vec(edit(), 0..2),
    ) {
        let files = shaders();
        let kernel_files: Vec<&(String, String)> = files.iter().filter(|(n, _)| n != "00_shared.wgsl").collect();
        let (name, text) = kernel_files[file.index(kernel_files.len())];
        let shared = &files.iter().find(|(n, _)| n == "00_shared.wgsl").unwrap().1;
        let text = edits.iter().fold(text.clone(), |t, e| apply(&t, e));
        let shared = shared_edits.iter().fold(shared.clone(), |t, e| apply(&t, e));
        let dir = workdir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00_shared.wgsl"), &shared).unwrap();
        std::fs::write(dir.join(name), &text).unwrap();
        // The library the kernel files include (`//#include "lib/…"`), one of its files edited.
        let lib = wgsl_files("lib");
        let edited = lib_file.index(lib.len());
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        for (i, (lib_name, lib_text)) in lib.iter().enumerate() {
            let lib_text = if i == edited { lib_edits.iter().fold(lib_text.clone(), |t, e| apply(&t, e)) } else { lib_text.clone() };
            std::fs::write(dir.join("lib").join(lib_name), lib_text).unwrap();
        }
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let out = std::panic::catch_unwind(|| kernels_codegen::expand(quote::quote!(#name), &site));
        prop_assert!(
            out.is_ok(),
            "the macro panicked on {name} after {edits:?} (shared: {shared_edits:?}, lib/{}: {lib_edits:?})",
            lib[edited].0
        );
        // The expansion is Rust, errors included.
        let tokens = out.unwrap();
        prop_assert!(syn::parse2::<syn::File>(tokens).is_ok(), "the expansion does not parse after {edits:?}");
    }
}
