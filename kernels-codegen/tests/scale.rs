//! A large file with many kernels: the shared work (the file preamble) is parsed about once,
//! not once per kernel. Counted, not timed: bytes given to naga's parser. (Measured on a
//! 5 MB file with 100 kernels: see docs/DESIGN.md.)

use kernels_codegen::compile;
use kernels_codegen::input::Shared;
use kernels_codegen::source::CallSite;
use kernels_codegen::validate::parsed_bytes;

/// A preamble of `helpers` functions and `kernels` kernels, kernel `i` calling helper `i`.
pub fn big_file(helpers: usize, kernels: usize) -> (String, usize) {
    let mut text = String::new();
    for i in 0..helpers {
        text.push_str(&format!("// Helper {i}.\nfn helper_{i}(x: f32) -> f32 {{ return x * {i}.0 + 1.0; }}\n"));
    }
    let preamble = text.len();
    for k in 0..kernels {
        text.push_str(&format!(
            "// --- KERNEL: k{k} ---\n@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(64) fn k{k}(@builtin(global_invocation_id) g: vec3<u32>) {{ x[g.x] = helper_{k}(x[g.x]); }}\n"
        ));
    }
    (text, preamble)
}

#[test]
fn shared_work_is_parsed_once_per_file() {
    let (text, preamble) = big_file(4000, 100);
    let dir = std::env::temp_dir().join(format!("kernels-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("01_big.wgsl"), &text).unwrap();
    let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
    let before = parsed_bytes();
    let f = compile::compile(&site, "01_big.wgsl", &Shared::None, None);
    let parsed = parsed_bytes() - before;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(f.all_errors().count(), 0);
    assert_eq!(f.kernels.len(), 100);
    assert!(f.kernels.iter().all(|k| k.variants.len() == 1));
    // Each kernel's source holds its own helper only.
    assert!(
        f.kernels[7].variants[0].wgsl.contains("fn helper_7(")
            && !f.kernels[7].variants[0].wgsl.contains("fn helper_8(")
    );
    // The preamble (~330 KB) once for what no kernel uses, plus 100 small kernels: far from the
    // 100 × preamble that parsing it per kernel costs.
    let per_kernel = (text.len() - preamble) / 100;
    assert!(
        parsed < 2 * preamble + 100 * (per_kernel + 200),
        "parsed {parsed} bytes for a {preamble}-byte preamble and 100 kernels of {per_kernel} bytes"
    );
}
