// The check behind the guide's WGSL examples, run as a doc test of `kernels` (src/lib.rs, module
// `guide`): every ```wgsl block of a page compiles through the macro's own stages with the
// library's shared preamble, and a `wgsl,compile_fail` block fails with each text its
// `// error:` lines give. A block may hold several files, each after a line `// file: PATH`
// (the last one is the kernel file); a PATH that exists in the repository must hold exactly
// that text, so a page cannot drift from the file it shows.
fn check(page: &str) {
    use kernels_codegen::{CallSite, compile, input::Shared};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(page)).expect("the page");
    let shared = std::fs::read_to_string(root.join("shaders/00_shared.wgsl")).expect("the shared preamble");
    let mut lines = text.lines();
    let mut checked = 0;
    while let Some(line) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else { continue };
        let info = info.trim().to_string();
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
        if !info.starts_with("wgsl") {
            continue;
        }
        // The files of the block.
        let mut files: Vec<(String, String)> = Vec::new();
        for l in &body {
            match l.strip_prefix("// file: ") {
                Some(path) => files.push((path.trim().to_string(), String::new())),
                None => {
                    if files.is_empty() {
                        files.push(("01_example.wgsl".to_string(), String::new()));
                    }
                    let text = &mut files.last_mut().expect("a file").1;
                    text.push_str(l);
                    text.push('\n');
                }
            }
        }
        let dir = std::env::temp_dir().join(format!("kernels-guide-{}-{checked}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        for (path, text) in &files {
            if let Ok(real) = std::fs::read_to_string(root.join(path)) {
                assert_eq!(&real, text, "{page}: the block showing {path} differs from the file");
            }
            let name = std::path::Path::new(path).file_name().expect("a file name");
            // Included files keep their path relative to the kernel file's directory.
            let at = match path.split_once("lib/") {
                Some((_, rest)) => dir.join("lib").join(rest),
                None => dir.join(name),
            };
            std::fs::create_dir_all(at.parent().expect("a parent")).expect("a directory");
            std::fs::write(&at, text).expect("the example");
        }
        std::fs::write(dir.join("00_shared.wgsl"), &shared).expect("the shared preamble");
        let (kernel, _) = files.last().expect("a kernel file");
        let kernel = std::path::Path::new(kernel).file_name().expect("a name").to_str().expect("UTF-8");
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let file = compile::compile(&site, kernel, &Shared::Default, None);
        let errors: Vec<String> = file.all_errors().map(|e| e.render()).collect();
        let _ = std::fs::remove_dir_all(&dir);
        if info == "wgsl,compile_fail" {
            let said: Vec<&str> = body.iter().filter_map(|l| l.trim().strip_prefix("// error:")).map(str::trim).collect();
            assert!(!said.is_empty(), "{page}: a compile_fail block names no error");
            for claim in said {
                assert!(errors.iter().any(|e| e.contains(claim)), "{page}: no error `{claim}` in {errors:?}");
            }
        } else {
            assert_eq!(info, "wgsl", "{page}: unknown block kind");
            assert!(errors.is_empty(), "{page}: an example does not compile:\n{}", errors.join("\n"));
        }
        checked += 1;
    }
    assert!(checked > 0, "{page} has no WGSL example");
}
