//! Stage 1: the command line, parsed into what to build and how to report it. No I/O.

use std::path::PathBuf;

pub const USAGE: &str = "\
pipeline-stats: builds a kernel's compute pipeline on the Vulkan driver from the SPIR-V wgpu 30
would write for it, and prints the driver's statistics (NVIDIA: register count and more) and
internal representations (VK_KHR_pipeline_executable_properties).

usage:
  pipeline-stats [options] KERNEL           a library kernel: module::kernel, or kernel if unique
  pipeline-stats [options] FILE.wgsl ENTRY  a WGSL file (with its own `enable` lines) and entry point
  pipeline-stats [options] --all            every kernel and variant of the library, one line each
  pipeline-stats --list                     the library's kernels, variants and overrides (no GPU)

options:
  -o, --override NAME=VALUE[,NAME=VALUE...]  override values (repeatable); with --all, each kernel
                             takes those it declares
  --variant N                the variant to build (0 = the preferred one); default: the first
                             the device runs, as the runtime picks it
  --filter PAT[,PAT...]      with --all or --list: only kernels whose module::kernel contains a PAT
  --device NAME              the Vulkan device whose name contains NAME (default: a discrete GPU,
                             then integrated, virtual, CPU)
  --json                     JSON lines (one object per kernel and variant) instead of text
  --dump DIR                 also write each variant's WGSL, SPIR-V, statistics and internal
                             representations under DIR
  --build-only               build the pipelines without asking for statistics: for drivers
                             without VK_KHR_pipeline_executable_properties (lavapipe), to
                             check that the driver takes the SPIR-V and time the build
  --spirv-only               write SPIR-V only (into --dump DIR), for the target the build-time
                             check assumes (Vulkan 1.3 with the variant's features); no GPU
  -h, --help                 this text

environment: KERNELS_COOPERATIVE_MATRIX=0, KERNELS_SUBGROUPS=0 and KERNELS_F16=0 act as they do
for the runtime (which variant runs, which features the device gets).

exit status: 0 built and reported; 1 bad arguments or input; 2 no Vulkan device, or the device
cannot report pipeline statistics; 3 a variant could not be built (the others are still reported).";

/// What to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A library kernel by name.
    Kernel(String),
    /// A WGSL file and one of its compute entry points.
    File { path: PathBuf, entry: String },
    /// Every kernel of the library (filtered).
    All,
    /// List the library (filtered), build nothing.
    List,
}

/// The parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    pub subject: Subject,
    /// `NAME=VALUE` pairs in the order given (values checked against each kernel's types later).
    pub overrides: Vec<(String, String)>,
    pub variant: Option<usize>,
    pub filters: Vec<String>,
    pub device: Option<String>,
    pub json: bool,
    pub dump: Option<PathBuf>,
    pub spirv_only: bool,
    pub build_only: bool,
}

/// Why the command line was not understood, or a request for help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    Help,
    Bad(String),
}

fn bad<T>(message: impl Into<String>) -> Result<T, ArgError> {
    Err(ArgError::Bad(message.into()))
}

/// Splits `NAME=VALUE[,NAME=VALUE...]`.
pub fn parse_assignments(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let Some((name, value)) = part.split_once('=') else {
            return Err(format!("`{part}` is not NAME=VALUE"));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() || value.is_empty() {
            return Err(format!("`{part}` is not NAME=VALUE"));
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`{name}` is not an override name (letters, digits and `_`)"));
        }
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgError> {
    let mut positional = Vec::new();
    let mut overrides = Vec::new();
    let (mut variant, mut device, mut dump) = (None, None, None);
    let mut filters = Vec::new();
    let (mut json, mut all, mut list, mut spirv_only, mut build_only) = (false, false, false, false, false);
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        // `--name=value` is the same as `--name value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let takes_value =
            matches!(flag.as_str(), "-o" | "--override" | "--variant" | "--filter" | "--device" | "--dump");
        let value = if takes_value {
            match inline.or_else(|| it.next()) {
                Some(v) => Some(v),
                None => return bad(format!("{flag} needs a value")),
            }
        } else {
            if inline.is_some() {
                return bad(format!("{flag} takes no value"));
            }
            None
        };
        match flag.as_str() {
            "-h" | "--help" => return Err(ArgError::Help),
            "-o" | "--override" => {
                overrides.extend(parse_assignments(&value.unwrap_or_default()).map_err(ArgError::Bad)?)
            }
            "--variant" => {
                let v = value.unwrap_or_default();
                variant = Some(v.parse::<usize>().or_else(|_| bad(format!("--variant takes a number, not `{v}`")))?);
            }
            "--filter" => filters.extend(
                value.unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from),
            ),
            "--device" => device = value,
            "--dump" => dump = value.map(PathBuf::from),
            "--json" => json = true,
            "--all" => all = true,
            "--list" => list = true,
            "--spirv-only" => spirv_only = true,
            "--build-only" => build_only = true,
            f if f.starts_with('-') && f.len() > 1 => return bad(format!("unknown option `{f}` (see --help)")),
            _ => positional.push(arg),
        }
    }
    let subject = match (all, list, positional.as_slice()) {
        (true, true, _) => return bad("--all and --list exclude each other"),
        (true, false, []) => Subject::All,
        (false, true, []) => Subject::List,
        (true, _, _) | (_, true, _) => {
            return bad(format!("--all and --list take no kernel (got `{}`)", positional.join(" ")));
        }
        (false, false, []) => return bad("no kernel given (see --help)"),
        (false, false, [name]) if name.ends_with(".wgsl") => {
            return bad(format!("`{name}` is a WGSL file: give its entry point too (`{name} ENTRY`)"));
        }
        (false, false, [name]) => Subject::Kernel(name.clone()),
        (false, false, [path, entry]) if path.ends_with(".wgsl") => {
            Subject::File { path: PathBuf::from(path), entry: entry.clone() }
        }
        (false, false, [first, _]) => {
            return bad(format!(
                "two arguments are a WGSL file and an entry point, and `{first}` does not end in .wgsl"
            ));
        }
        (false, false, more) => return bad(format!("too many arguments: {}", more.join(" "))),
    };
    if variant.is_some() && matches!(subject, Subject::All | Subject::List) {
        return bad("--variant picks one variant of one kernel; --all reports every variant");
    }
    if !filters.is_empty() && !matches!(subject, Subject::All | Subject::List) {
        return bad("--filter selects kernels for --all or --list");
    }
    if spirv_only && dump.is_none() {
        return bad("--spirv-only writes SPIR-V files: give the folder with --dump DIR");
    }
    if spirv_only && build_only {
        return bad("--spirv-only builds no pipeline; --build-only builds them without statistics: pick one");
    }
    if matches!(subject, Subject::List) && (spirv_only || build_only || dump.is_some() || !overrides.is_empty()) {
        return bad("--list builds nothing: it takes only --filter and --json");
    }
    Ok(Args { subject, overrides, variant, filters, device, json, dump, spirv_only, build_only })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, ArgError> {
        parse(s.split_whitespace().map(String::from))
    }

    fn bad_text(s: &str) -> String {
        match args(s) {
            Err(ArgError::Bad(m)) => m,
            other => panic!("`{s}` should be rejected, got {other:?}"),
        }
    }

    #[test]
    fn a_library_kernel_with_overrides_and_a_variant() {
        let a = args("linear::gemm16 -o M_C=4096,N_C=768 --override K_C=768 --variant 1 --json").unwrap();
        assert_eq!(a.subject, Subject::Kernel("linear::gemm16".into()));
        let expected: Vec<(String, String)> = [("M_C", "4096"), ("N_C", "768"), ("K_C", "768")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(a.overrides, expected);
        assert_eq!(a.variant, Some(1));
        assert!(a.json && !a.spirv_only && a.dump.is_none() && a.device.is_none());
    }

    #[test]
    fn inline_values_and_files() {
        let a = args("k.wgsl main --override=SPLIT=false --dump=/tmp/d --device=H200").unwrap();
        assert_eq!(a.subject, Subject::File { path: "k.wgsl".into(), entry: "main".into() });
        assert_eq!(a.overrides, vec![("SPLIT".to_string(), "false".to_string())]);
        assert_eq!(a.dump, Some(PathBuf::from("/tmp/d")));
        assert_eq!(a.device.as_deref(), Some("H200"));
    }

    #[test]
    fn all_and_list_with_filters() {
        let a = args("--all --filter attention::,linear::precise_ --filter attention -o M_C=8192").unwrap();
        assert_eq!(a.subject, Subject::All);
        assert_eq!(a.filters, vec!["attention::", "linear::precise_", "attention"]);
        assert_eq!(args("--list --filter attention --json").unwrap().subject, Subject::List);
    }

    #[test]
    fn help_and_mistakes() {
        assert_eq!(args("--help"), Err(ArgError::Help));
        assert_eq!(args("matmul -h"), Err(ArgError::Help));
        assert!(bad_text("").contains("no kernel given"));
        assert!(bad_text("--all matmul").contains("take no kernel"));
        assert!(bad_text("--all --list").contains("exclude"));
        assert!(bad_text("k.wgsl").contains("entry point too"));
        assert!(bad_text("a b").contains("does not end in .wgsl"));
        assert!(bad_text("a b c").contains("too many"));
        assert!(bad_text("matmul --variant x").contains("takes a number"));
        assert!(bad_text("matmul --variant").contains("needs a value"));
        assert!(bad_text("matmul --json=1").contains("takes no value"));
        assert!(bad_text("matmul --frobnicate").contains("unknown option"));
        assert!(bad_text("--all --variant 0").contains("--variant picks one"));
        assert!(bad_text("matmul --filter x").contains("--filter selects"));
        assert!(bad_text("matmul --spirv-only").contains("--dump DIR"));
        assert!(bad_text("--list -o M_C=1").contains("builds nothing"));
        assert!(bad_text("matmul --spirv-only --build-only --dump d").contains("pick one"));
        assert!(args("--all --build-only").unwrap().build_only);
        assert!(bad_text("matmul -o M_C").contains("not NAME=VALUE"));
        assert!(bad_text("matmul -o M_C=").contains("not NAME=VALUE"));
        assert!(bad_text("matmul -o M-C=1").contains("not an override name"));
    }

    #[test]
    fn assignments_split_on_commas_and_trim() {
        assert_eq!(
            parse_assignments(" A=1 , B_2=true").unwrap(),
            vec![("A".to_string(), "1".to_string()), ("B_2".to_string(), "true".to_string())]
        );
        assert!(parse_assignments("A=1,,B=2").is_err());
    }
}
