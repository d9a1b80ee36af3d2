//! Properties of the source handling: no input text makes splitting, directive handling,
//! conditionals, comment masking or the whole compile panic; and every byte of an assembled
//! kernel maps back to the file and line it came from.

use kernels_codegen::assemble::{NameIndex, Pieces, assemble};
use kernels_codegen::include::Includes;
use kernels_codegen::source::{CallSite, SourceFile};
use kernels_codegen::{annotate, compile, input::Shared, split};
use proptest::prelude::*;

/// Text made of the pieces that matter to the format, glued at random.
fn wgsl_soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("// --- KERNEL: a ---\n".to_string()),
        Just("// --- KERNEL: b ---\n".to_string()),
        Just("// --- KERNEL: a b ---\n".to_string()),
        Just("// --- KERNEL: 9x ---".to_string()),
        Just("enable f16;\n".to_string()),
        Just("enable subgroups, f16;".to_string()),
        Just("requires x;\n".to_string()),
        Just("//#if subgroups\n".to_string()),
        Just("//#else\n".to_string()),
        Just("//#endif\n".to_string()),
        Just("//#if nope\n".to_string()),
        Just("/* nested /* comment */ still */".to_string()),
        Just("/* unterminated".to_string()),
        Just("// @grid threads(n)\n".to_string()),
        Just("// @requires len(x) >= n\n".to_string()),
        Just("@compute @workgroup_size(1) fn a() {}\n".to_string()),
        Just("fn b(".to_string()),
        Just("\r\n".to_string()),
        Just("é✓\n".to_string()),
        "[ -~]{0,12}",
        "\\PC{0,4}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

fn file(text: &str) -> SourceFile {
    SourceFile::new("f.wgsl".into(), "f.wgsl".into(), text.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn source_handling_never_panics(text in wgsl_soup()) {
        let f = file(&text);
        let _ = split::find_markers(&text);
        let _ = split::check_shared(&f);
        let masked = split::mask_comments(&text);
        prop_assert_eq!(masked.len(), text.len());
        let mut t = text.clone();
        let _ = split::lift_directives(&f, 0..text.len(), &mut t, true);
        prop_assert_eq!(t.len(), text.len());
        let mut t = text.clone();
        let _ = split::apply_conditionals(&f, 0..text.len(), &mut t, split::Conditions { coop: true, subgroups: true });
        prop_assert_eq!(t.lines().count(), text.lines().count());
        if let Ok(s) = split::split(&f) {
            for section in &s.sections {
                let _ = annotate::notes(&text, section);
            }
        }
        for i in 0..=text.len() {
            let _ = f.locate(i..i + 3);
        }
    }

    #[test]
    fn compile_never_panics(text in wgsl_soup(), shared in wgsl_soup()) {
        let dir = std::env::temp_dir().join(format!("kernels-prop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00_shared.wgsl"), &shared).unwrap();
        std::fs::write(dir.join("01_k.wgsl"), &text).unwrap();
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let out = compile::compile(&site, "01_k.wgsl", &Shared::Default, None);
        // Either it compiled or it says why; errors carry a message.
        for e in out.all_errors() {
            prop_assert!(!e.message.is_empty());
            let _ = e.render();
        }
        let _ = kernels_codegen::expand::expand(&out, proc_macro2::Span::call_site(), &syn::parse_quote!(::kernels));
    }

    /// Tag every line with its origin, assemble, and check that each tag maps back to the
    /// file and line it was written on.
    #[test]
    fn locations_map_to_the_original_line(
        shared_lines in 0usize..6,
        pre_lines in 0usize..6,
        sec_lines in 1usize..6,
        indent in 0usize..5,
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let pad = " ".repeat(indent);
        let shared: String = (0..shared_lines).map(|i| format!("{pad}tag_s{i};{eol}")).collect();
        let mut kernel: String = (0..pre_lines).map(|i| format!("{pad}tag_p{i};{eol}")).collect();
        kernel.push_str(&format!("// --- KERNEL: k ---{eol}"));
        kernel.extend((0..sec_lines).map(|i| format!("{pad}tag_k{i};{eol}")));
        let sf = SourceFile::new("s".into(), "s.wgsl".into(), shared.clone());
        let kf = SourceFile::new("k".into(), "k.wgsl".into(), kernel.clone());
        let s = split::split(&kf).unwrap();
        let sec = &s.sections[0];
        let texts = vec![shared.clone(), kernel.clone()];
        let codes: Vec<String> = texts.iter().map(|t| split::mask_comments(t)).collect();
        let includes = Includes::default();
        // Kept whole (no outlines): every line is there to map back.
        let a = assemble(
            Pieces { texts: &texts, codes: &codes, includes: &includes, outlines: &[None, None] },
            &NameIndex::default(),
            Some(0),
            1,
            s.preamble.clone(),
            sec.body.clone(),
            None,
            &[],
        )
        .assembled
        .prefixed("enable f16;\n");
        for (prefix, part, file, count, first_line) in [
            ("tag_s", 0, &sf, shared_lines, 1),
            ("tag_p", 1, &kf, pre_lines, 1),
            ("tag_k", 1, &kf, sec_lines, pre_lines + 2),
        ] {
            for i in 0..count {
                let tag = format!("{prefix}{i};");
                let at = a.text.find(&tag).unwrap();
                let (p, off) = a.map(at).unwrap();
                prop_assert_eq!(p, part);
                let loc = file.locate(off..off + tag.len());
                prop_assert_eq!(loc.line, first_line + i);
                prop_assert_eq!(loc.column, indent + 1);
                prop_assert_eq!(loc.width, tag.len());
            }
        }
    }
}
