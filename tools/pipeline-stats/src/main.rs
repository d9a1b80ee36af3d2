//! `pipeline-stats`: what the Vulkan driver makes of a kernel. The stages, in the order data
//! flows through them: [`cli`] (the command line) → [`select`] (which kernels and variants, the
//! override values) → [`spirv`] (the SPIR-V wgpu 30 would write, through the same options as the
//! build-time check) → [`vulkan`] (the pipeline built with ash, the driver's statistics and
//! internal representations) → [`report`] (text, JSON lines, files). See `--help`.

mod cli;
mod report;
mod select;
mod spirv;
mod vulkan;

use cli::{Args, Subject};
use kernels_codegen::validate::VulkanTarget;
use report::{Outcome, Row};
use select::{Form, Kernel};
use std::io::Write as _;
use std::process::ExitCode;

/// A reason to stop, with the exit status it gives.
struct Stop {
    code: u8,
    message: String,
}

fn stop(code: u8, message: impl Into<String>) -> Stop {
    Stop { code, message: message.into() }
}

fn main() -> ExitCode {
    let args = match cli::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(cli::ArgError::Help) => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(cli::ArgError::Bad(m)) => {
            eprintln!("pipeline-stats: {m}");
            return ExitCode::from(1);
        }
    };
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(s) => {
            eprintln!("pipeline-stats: {}", s.message);
            ExitCode::from(s.code)
        }
    }
}

/// The kernels named on the command line.
fn kernels(args: &Args) -> Result<Vec<Kernel>, Stop> {
    match &args.subject {
        Subject::Kernel(name) => Ok(vec![Kernel::from_def(select::find(name).map_err(|m| stop(1, m))?)]),
        Subject::File { path, entry } => {
            let shown = path.display().to_string();
            let source = std::fs::read_to_string(path).map_err(|e| stop(1, format!("cannot read {shown}: {e}")))?;
            Ok(vec![Kernel::from_file(&shown, source, entry).map_err(|m| stop(1, m))?])
        }
        Subject::All | Subject::List => {
            let all = select::library(&args.filters);
            if all.is_empty() {
                return Err(stop(1, format!("no library kernel's name contains any of: {}", args.filters.join(", "))));
            }
            // A name no selected kernel declares is a mistake, not someone else's override.
            for (name, _) in &args.overrides {
                if !all.iter().any(|k| k.overrides.iter().any(|o| &o.name == name || &o.key == name)) {
                    return Err(stop(1, format!("no selected kernel declares an override `{name}`")));
                }
            }
            Ok(all)
        }
    }
}

fn list(kernels: &[Kernel], json: bool) {
    for k in kernels {
        let overrides: Vec<String> = k
            .overrides
            .iter()
            .map(|o| format!("{}: {}{}", o.name, o.ty, if o.has_default { "" } else { " (required)" }))
            .collect();
        if json {
            let variants: Vec<serde_json::Value> = k
                .variants
                .iter()
                .map(|f| serde_json::json!({"variant": f.index, "form": f.kind(), "needs": f.needs()}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"kernel": k.name, "file": k.file, "overrides": overrides, "variants": variants})
            );
        } else {
            let forms: Vec<String> =
                k.variants.iter().map(|f| format!("v{} {} ({})", f.index, f.kind(), f.needs())).collect();
            let o = if overrides.is_empty() { String::new() } else { format!("; overrides {}", overrides.join(", ")) };
            println!("{}: {}{o}", k.name, forms.join(", "));
        }
    }
}

fn run(args: &Args) -> Result<u8, Stop> {
    let kernels = kernels(args)?;
    if args.subject == Subject::List {
        list(&kernels, args.json);
        return Ok(0);
    }
    let all = args.subject == Subject::All;
    // The override values: for one kernel, every name must be its own.
    let mut constants = Vec::new();
    for k in &kernels {
        constants.push(match k.constants(&args.overrides, !all) {
            Ok(c) => Ok(c),
            Err(m) if all => Err(m),
            Err(m) => return Err(stop(1, m)),
        });
    }
    if let Some(dir) = &args.dump {
        std::fs::create_dir_all(dir).map_err(|e| stop(1, format!("cannot create {}: {e}", dir.display())))?;
    }
    let gpu = if args.spirv_only {
        None
    } else {
        let options = kernels::GpuOptions::from_env();
        let gpu = vulkan::Gpu::open(args.device.as_deref(), &options, !args.build_only)
            .map_err(|e| stop(2, e.to_string()))?;
        let summary = format!("device: {}", gpu.info.summary(&gpu.offer));
        // JSON lines stay parseable: the summary goes to stderr there.
        if args.json {
            eprintln!("{summary}")
        } else {
            println!("{summary}")
        }
        Some(gpu)
    };
    // `KERNELS_RUNTIME_CHECKS=all` writes `@unchecked` kernels with the checks, as the runtime
    // then builds them.
    let checks_all = match std::env::var("KERNELS_RUNTIME_CHECKS") {
        Ok(text) => {
            kernels::RuntimeChecks::parse(&text).map_err(|text| {
                stop(1, format!("KERNELS_RUNTIME_CHECKS={text:?} is not a value it takes: `all` or `declared`"))
            })? == kernels::RuntimeChecks::All
        }
        Err(_) => false,
    };
    let mut failed = false;
    for (k, constants) in kernels.iter().zip(constants) {
        let forms: Vec<&Form> = if all {
            k.variants.iter().collect()
        } else {
            let form = match (&gpu, args.variant) {
                (Some(g), requested) => g.offer.choose(k, requested).map_err(|m| stop(3, m))?,
                (None, Some(i)) => k.variants.get(i).ok_or_else(|| {
                    stop(
                        1,
                        format!(
                            "{} has {} variants (0 to {}), not {i}",
                            k.name,
                            k.variants.len(),
                            k.variants.len() - 1
                        ),
                    )
                })?,
                (None, None) => &k.variants[0],
            };
            vec![form]
        };
        for form in forms {
            let row = build(args, gpu.as_ref(), k, form, &constants, checks_all);
            failed |= matches!(row.outcome, Outcome::Failed(_));
            let text = if args.json {
                report::json(&row, gpu.as_ref().map(|g| &g.info)).to_string()
            } else if all {
                report::line(&row)
            } else {
                report::block(&row)
            };
            println!("{text}");
            let _ = std::io::stdout().flush();
        }
    }
    Ok(if failed { 3 } else { 0 })
}

/// One variant: its SPIR-V, then (with a device) its pipeline; files under `--dump`.
fn build<'k>(
    args: &Args,
    gpu: Option<&vulkan::Gpu>,
    kernel: &'k Kernel,
    form: &'k Form,
    constants: &Result<Vec<(String, f64)>, String>,
    checks_all: bool,
) -> Row<'k> {
    let mut row = Row {
        kernel,
        form,
        constants: constants.clone().unwrap_or_default(),
        outcome: Outcome::Skipped(String::new()),
        files: Vec::new(),
        runtime_checks: !kernel.unchecked || checks_all,
    };
    let values = match constants {
        Ok(c) => c,
        Err(m) => {
            row.outcome = Outcome::Skipped(m.clone());
            return row;
        }
    };
    let target = match gpu {
        Some(g) => {
            if let Some(why) = g.offer.lacks(form) {
                row.outcome = Outcome::Skipped(format!("needs {why}"));
                return row;
            }
            g.target
        }
        None => VulkanTarget::build_time(&kernels_codegen::validate::Needs {
            subgroups: form.subgroups,
            f16: form.f16,
            coop: form.coop,
            features: Vec::new(),
        }),
    };
    let target = VulkanTarget { runtime_checks: row.runtime_checks, ..target };
    let spirv = match spirv::write(form, &kernel.entry, values, &target) {
        Ok(s) => s,
        Err(m) => {
            row.outcome = Outcome::Failed(m);
            return row;
        }
    };
    let (words, version) = (spirv.words.len(), spirv.version());
    row.outcome = match gpu {
        Some(g) => match g.build(&spirv, &kernel.entry, kernel.dynamic_uniforms) {
            Ok(built) => Outcome::Built { spirv_words: words, spirv_version: version, built },
            Err(m) => Outcome::Failed(format!("the driver did not build the pipeline: {m}")),
        },
        None => Outcome::Spirv { spirv_words: words, spirv_version: version },
    };
    if let Some(dir) = &args.dump {
        let stem = report::stem(kernel, form, values);
        let built = match &row.outcome {
            Outcome::Built { built, .. } => Some(built),
            _ => None,
        };
        let mut files = report::dump_files(&stem, form, Some(&spirv.bytes()), built);
        let json = report::json(&row, gpu.map(|g| &g.info));
        files.push((format!("{stem}.json"), format!("{json}\n").into_bytes()));
        for (name, bytes) in files {
            let path = dir.join(name);
            match std::fs::write(&path, bytes) {
                Ok(()) => row.files.push(path),
                Err(e) => {
                    row.outcome = Outcome::Failed(format!("cannot write {}: {e}", path.display()));
                    break;
                }
            }
        }
    }
    row
}
