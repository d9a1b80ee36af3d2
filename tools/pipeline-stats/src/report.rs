//! Stage 5: what was built, as text (a block per kernel, or a line per variant with `--all`),
//! JSON lines, and files under `--dump DIR`.

use crate::select::{Form, Kernel};
use crate::vulkan::{Built, DeviceInfo, Value};
use serde_json::{Map, Value as Json, json};
use std::path::{Path, PathBuf};

/// What happened to one variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Built on the device.
    Built { spirv_words: usize, spirv_version: (u32, u32), built: Built },
    /// SPIR-V written, no device (`--spirv-only`).
    Spirv { spirv_words: usize, spirv_version: (u32, u32) },
    /// The device cannot run it (what it lacks), or its overrides are incomplete.
    Skipped(String),
    /// SPIR-V generation or the driver failed.
    Failed(String),
}

/// One (kernel, variant) and its outcome.
pub struct Row<'a> {
    pub kernel: &'a Kernel,
    pub form: &'a Form,
    /// The override values it was built with (wgpu's keys).
    pub constants: Vec<(String, f64)>,
    /// Its SPIR-V has wgpu's runtime checks (off for an `@unchecked` kernel unless
    /// `KERNELS_RUNTIME_CHECKS=all`).
    pub runtime_checks: bool,
    pub outcome: Outcome,
    /// Files written under `--dump`.
    pub files: Vec<PathBuf>,
}

/// An override value as WGSL would write it: integers without a fraction.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

fn overrides_text(constants: &[(String, f64)]) -> String {
    constants.iter().map(|(k, v)| format!("{k}={}", number(*v))).collect::<Vec<_>>().join(" ")
}

fn value_json(v: Value) -> Json {
    match v {
        Value::Bool(b) => json!(b),
        Value::I64(i) => json!(i),
        Value::U64(u) => json!(u),
        Value::F64(f) => json!(f),
    }
}

/// The JSON object of a row (one line of `--json`).
pub fn json(row: &Row, device: Option<&DeviceInfo>) -> Json {
    let mut o = Map::new();
    if let Some(d) = device {
        o.insert("device".into(), json!(d.name));
        o.insert("driver".into(), json!(d.driver));
        o.insert("vulkan".into(), json!(format!("{}.{}.{}", d.api.0, d.api.1, d.api.2)));
    }
    o.insert("kernel".into(), json!(row.kernel.name));
    o.insert("file".into(), json!(row.kernel.file));
    o.insert("variant".into(), json!(row.form.index));
    o.insert("variants".into(), json!(row.kernel.variants.len()));
    o.insert("form".into(), json!(row.form.kind()));
    o.insert("needs".into(), json!(row.form.needs()));
    o.insert("runtime_checks".into(), json!(row.runtime_checks));
    let overrides: Map<String, Json> = row.constants.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    o.insert("overrides".into(), Json::Object(overrides));
    let (status, reason) = match &row.outcome {
        Outcome::Built { .. } => ("built", None),
        Outcome::Spirv { .. } => ("spirv", None),
        Outcome::Skipped(r) => ("skipped", Some(r)),
        Outcome::Failed(r) => ("failed", Some(r)),
    };
    o.insert("status".into(), json!(status));
    if let Some(r) = reason {
        o.insert("reason".into(), json!(r));
    }
    if let Outcome::Built { spirv_words, spirv_version, .. } | Outcome::Spirv { spirv_words, spirv_version } =
        &row.outcome
    {
        o.insert("spirv_words".into(), json!(spirv_words));
        o.insert("spirv_version".into(), json!(format!("{}.{}", spirv_version.0, spirv_version.1)));
    }
    if let Outcome::Built { built, .. } = &row.outcome {
        o.insert("build_ms".into(), json!((built.build_ms * 1000.0).round() / 1000.0));
        o.insert("captured".into(), json!(built.captured));
        let executables: Vec<Json> = built
            .executables
            .iter()
            .map(|e| {
                let stats: Map<String, Json> = e.statistics.iter().map(|s| (s.name.clone(), value_json(s.value))).collect();
                let described: Map<String, Json> =
                    e.statistics.iter().map(|s| (s.name.clone(), json!(s.description))).collect();
                let reps: Vec<Json> = e
                    .representations
                    .iter()
                    .map(|r| json!({"name": r.name, "description": r.description, "text": r.text, "bytes": r.data.len()}))
                    .collect();
                json!({
                    "name": e.name,
                    "description": e.description,
                    "stages": e.stages,
                    "subgroup_size": e.subgroup_size,
                    "statistics": stats,
                    "descriptions": described,
                    "representations": reps,
                })
            })
            .collect();
        o.insert("executables".into(), json!(executables));
    }
    if !row.files.is_empty() {
        o.insert("files".into(), json!(row.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>()));
    }
    Json::Object(o)
}

/// One line per (kernel, variant), for `--all`.
pub fn line(row: &Row) -> String {
    let mut s = format!("{} v{} {}", row.kernel.name, row.form.index, row.form.kind());
    if !row.runtime_checks {
        s += " unchecked";
    }
    if !row.constants.is_empty() {
        s += &format!(" [{}]", overrides_text(&row.constants));
    }
    match &row.outcome {
        Outcome::Built { built, .. } => {
            let execs: Vec<String> = built
                .executables
                .iter()
                .map(|e| {
                    let stats: Vec<String> =
                        e.statistics.iter().map(|st| format!("{}={}", st.name, st.value)).collect();
                    let size =
                        if e.subgroup_size > 0 { format!("subgroup {}, ", e.subgroup_size) } else { String::new() };
                    format!("{size}{}", if stats.is_empty() { "no statistics".into() } else { stats.join(", ") })
                })
                .collect();
            let execs = if built.captured { execs.join(" | ") } else { "built".to_string() };
            s += &format!(": {execs} ({:.0} ms)", built.build_ms);
        }
        Outcome::Spirv { spirv_words, spirv_version } => {
            s += &format!(": SPIR-V {}.{}, {spirv_words} words", spirv_version.0, spirv_version.1)
        }
        Outcome::Skipped(r) => s += &format!(": skipped: {r}"),
        Outcome::Failed(r) => s += &format!(": FAILED: {r}"),
    }
    s
}

/// A block for one kernel: what was built, then every executable's statistics and
/// representations.
pub fn block(row: &Row) -> String {
    let k = row.kernel;
    let mut s = format!(
        "{} ({}), variant {} of {}: {} (needs {})\n",
        k.name,
        k.file,
        row.form.index,
        k.variants.len(),
        row.form.kind(),
        row.form.needs()
    );
    if !row.runtime_checks {
        s += "runtime checks: off (`@unchecked`)\n";
    }
    if !row.constants.is_empty() {
        s += &format!("overrides: {}\n", overrides_text(&row.constants));
    }
    match &row.outcome {
        Outcome::Built { spirv_words, spirv_version, built } => {
            s += &format!(
                "SPIR-V {}.{}, {spirv_words} words; pipeline built in {:.1} ms\n",
                spirv_version.0, spirv_version.1, built.build_ms
            );
            if !built.captured {
                s += "statistics not asked for (--build-only)\n";
            } else if built.executables.is_empty() {
                s += "the driver reports no executables\n";
            }
            for (i, e) in built.executables.iter().enumerate() {
                s += &format!("executable {i}: {} ({}", e.name, e.stages.join(", "));
                if e.subgroup_size > 0 {
                    s += &format!(", subgroup size {}", e.subgroup_size);
                }
                s += ")";
                if !e.description.is_empty() && e.description != e.name {
                    s += &format!(": {}", e.description);
                }
                s += "\n";
                let width = e.statistics.iter().map(|st| st.name.chars().count()).max().unwrap_or(0);
                for st in &e.statistics {
                    let pad = width - st.name.chars().count();
                    s += &format!("  {}{} {:>12}", st.name, " ".repeat(pad), st.value.to_string());
                    if !st.description.is_empty() && st.description != st.name {
                        s += &format!("  {}", st.description);
                    }
                    s += "\n";
                }
                if e.statistics.is_empty() {
                    s += "  no statistics\n";
                }
                for r in &e.representations {
                    s += &format!(
                        "  internal representation `{}` ({}, {} bytes){}\n",
                        r.name,
                        if r.text { "text" } else { "binary" },
                        r.data.len(),
                        if r.description.is_empty() { String::new() } else { format!(": {}", r.description) }
                    );
                }
                if e.representations.is_empty() {
                    s += "  no internal representations\n";
                }
            }
        }
        Outcome::Spirv { spirv_words, spirv_version } => {
            s += &format!("SPIR-V {}.{}, {spirv_words} words (no device)\n", spirv_version.0, spirv_version.1)
        }
        Outcome::Skipped(r) => s += &format!("skipped: {r}\n"),
        Outcome::Failed(r) => s += &format!("FAILED: {r}\n"),
    }
    for f in &row.files {
        s += &format!("wrote {}\n", f.display());
    }
    s
}

/// A file-name part: letters, digits, `.`, `_`, `-` and `=`; anything else becomes `_`.
fn clean(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '=') { c } else { '_' })
        .collect();
    s.trim_matches('_').to_string()
}

/// The stem of a row's files: `module.kernel.vN`, the override values after it
/// (`.M_C=4096`), so that runs with other values can share a folder.
pub fn stem(kernel: &Kernel, form: &Form, constants: &[(String, f64)]) -> String {
    let base = match kernel.name.split_once("::") {
        Some((module, name)) => format!("{module}.{name}"),
        None => {
            let file = Path::new(&kernel.file).file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
            format!("{file}.{}", kernel.entry)
        }
    };
    let mut s = format!("{}.v{}", clean(&base), form.index);
    for (k, v) in constants {
        s += &format!(".{}", clean(&format!("{k}={}", number(*v))));
    }
    s
}

/// What `--dump` writes for a row besides the JSON: (file name, bytes): the WGSL, the SPIR-V
/// and each internal representation (`.e0.<name>.txt` or `.bin`).
pub fn dump_files(stem: &str, form: &Form, spirv: Option<&[u8]>, built: Option<&Built>) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![(format!("{stem}.wgsl"), form.wgsl.as_bytes().to_vec())];
    if let Some(bytes) = spirv {
        out.push((format!("{stem}.spv"), bytes.to_vec()));
    }
    for (i, e) in built.map(|b| b.executables.as_slice()).unwrap_or_default().iter().enumerate() {
        let mut used = Vec::new();
        for r in &e.representations {
            let mut name = clean(&r.name.to_lowercase().replace(' ', "-"));
            if name.is_empty() {
                name = "ir".into();
            }
            // Two representations with one name keep both.
            let mut unique = name.clone();
            let mut n = 1;
            while used.contains(&unique) {
                n += 1;
                unique = format!("{name}-{n}");
            }
            used.push(unique.clone());
            out.push((format!("{stem}.e{i}.{unique}.{}", if r.text { "txt" } else { "bin" }), r.data.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vulkan::{Executable, Representation, Statistic};
    use std::borrow::Cow;

    fn kernel() -> Kernel {
        Kernel {
            name: "linear::gemm16".into(),
            entry: "gemm16".into(),
            file: "shaders/03_linear.wgsl".into(),
            overrides: Vec::new(),
            variants: vec![
                Form {
                    index: 0,
                    wgsl: Cow::Borrowed("// coop"),
                    subgroups: true,
                    f16: true,
                    coop: true,
                    coop_configs: Vec::new(),
                },
                Form {
                    index: 1,
                    wgsl: Cow::Borrowed("// plain"),
                    subgroups: false,
                    f16: true,
                    coop: false,
                    coop_configs: Vec::new(),
                },
            ],
            dynamic_uniforms: true,
            unchecked: false,
        }
    }

    fn built() -> Built {
        let rep = |name: &str, text: bool| Representation {
            name: name.into(),
            description: "d".into(),
            text,
            data: b"x".to_vec(),
        };
        Built {
            captured: true,
            build_ms: 12.5,
            executables: vec![Executable {
                name: "Compute".into(),
                description: "compute shader".into(),
                stages: vec!["compute"],
                subgroup_size: 32,
                statistics: vec![
                    Statistic {
                        name: "Register Count".into(),
                        description: "registers per thread".into(),
                        value: Value::U64(128),
                    },
                    Statistic { name: "Spills".into(), description: String::new(), value: Value::Bool(false) },
                ],
                representations: vec![rep("SASS Code", true), rep("SASS Code", false), rep("/", true)],
            }],
        }
    }

    #[test]
    fn rows_as_json_lines_and_text() {
        let k = kernel();
        let constants = vec![("M_C".to_string(), 4096.0), ("SPLIT".to_string(), 0.0)];
        let row = Row {
            kernel: &k,
            form: &k.variants[0],
            constants: constants.clone(),
            outcome: Outcome::Built { spirv_words: 1000, spirv_version: (1, 6), built: built() },
            files: Vec::new(),
            runtime_checks: true,
        };
        let device = DeviceInfo {
            name: "NVIDIA H200".into(),
            driver: "NVIDIA 580.95".into(),
            api: (1, 4, 312),
            ..Default::default()
        };
        let j = json(&row, Some(&device));
        let text = j.to_string();
        assert!(!text.contains('\n'), "one line");
        assert_eq!(j["device"], "NVIDIA H200");
        assert_eq!(j["vulkan"], "1.4.312");
        assert_eq!(j["kernel"], "linear::gemm16");
        assert_eq!(j["form"], "coop");
        assert_eq!(j["status"], "built");
        assert_eq!(j["overrides"]["M_C"], 4096.0);
        assert_eq!(j["executables"][0]["statistics"]["Register Count"], 128);
        assert_eq!(j["executables"][0]["statistics"]["Spills"], false);
        assert_eq!(j["executables"][0]["subgroup_size"], 32);
        assert_eq!(j["executables"][0]["representations"].as_array().unwrap().len(), 3);
        assert_eq!(
            line(&row),
            "linear::gemm16 v0 coop [M_C=4096 SPLIT=0]: subgroup 32, Register Count=128, Spills=false (12 ms)"
        );
        let b = block(&row);
        assert!(b.contains("variant 0 of 2: coop") && b.contains("overrides: M_C=4096 SPLIT=0"), "{b}");
        assert!(b.contains("Register Count          128  registers per thread"), "{b}");
        assert!(b.contains("internal representation `SASS Code` (text, 1 bytes)"), "{b}");
        let skipped = Row { outcome: Outcome::Skipped("cooperative matrices (not offered)".into()), ..row };
        assert!(line(&skipped).ends_with(": skipped: cooperative matrices (not offered)"));
        let j = json(&skipped, None);
        assert_eq!(j["status"], "skipped");
        assert!(j.get("device").is_none() && j.get("executables").is_none());
    }

    #[test]
    fn dump_file_names_are_unique_and_clean() {
        let k = kernel();
        let s = stem(&k, &k.variants[1], &[("M_C".into(), 8192.0), ("SCALE".into(), 0.5)]);
        assert_eq!(s, "linear.gemm16.v1.M_C=8192.SCALE=0.5");
        let file =
            Kernel { name: "dir/t.wgsl:main".into(), entry: "main".into(), file: "dir/t.wgsl".into(), ..kernel() };
        assert_eq!(stem(&file, &file.variants[0], &[]), "t.main.v0");
        let b = built();
        let names: Vec<String> =
            dump_files("s", &k.variants[0], Some(&[1, 2, 3, 4]), Some(&b)).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["s.wgsl", "s.spv", "s.e0.sass-code.txt", "s.e0.sass-code-2.bin", "s.e0.ir.txt"]);
    }
}
