//! Tensor-core (cooperative-matrix) GEMM sweep for the H200: generates the designs of
//! `benches/coop` (`coop/kernel.rs` documents the design space, `coop/plan.rs` the phases),
//! checks each against a float64 reference on fresh random inputs (outputs poisoned first) and
//! times it after a sustained warm-up in the same submission (GPU timestamps, median).
//!
//! ```text
//! coop_sweep [--quick] [--filter TEXT]... [--budget-s 240] [--json PATH] [--warmup-ms 40]
//!     [--phases edge,structure,tuning,shapes,split] [--seed N] [--no-smi]
//!     [--cpu-check] [--list]
//! ```
//! One JSON line per (design, shape, layout) on stdout (and in `--json PATH`), then a ranked
//! summary per shape. On an adapter without 16×16×16 f16→f32 cooperative matrices (lavapipe,
//! browsers, most GPUs) it says so and exits 0. `--cpu-check` checks every kernel of the sweep
//! with naga (SPIR-V included) and runs the CPU emulator of the kernels, no GPU needed.

#[path = "coop/mod.rs"]
mod coop;

use coop::kernel::{Design, Kernel, Layout, Shape};
use coop::num::{Operands, Rng, check, sample_points};
use coop::plan::{self, Plan};
use coop::run::{Gpu, Options, PHASES, POISON, Sweep};
use std::time::Instant;

struct Args {
    quick: bool,
    filter: Vec<String>,
    budget_s: f64,
    warmup_ms: f64,
    json: Option<String>,
    phases: Vec<String>,
    seed: u64,
    smi: bool,
    cpu_check: bool,
    list: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        filter: Vec::new(),
        budget_s: 240.0,
        warmup_ms: 40.0,
        json: None,
        phases: PHASES.iter().map(|p| p.0.to_string()).collect(),
        seed: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
        smi: true,
        cpu_check: false,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {} // passed by `cargo bench`
            "--quick" => a.quick = true,
            "--filter" => a.filter.push(value("--filter")?),
            "--budget-s" => a.budget_s = value("--budget-s")?.parse().map_err(|e| format!("--budget-s: {e}"))?,
            "--warmup-ms" => a.warmup_ms = value("--warmup-ms")?.parse().map_err(|e| format!("--warmup-ms: {e}"))?,
            "--json" => a.json = Some(value("--json")?),
            "--phases" => a.phases = value("--phases")?.split(',').map(|s| s.trim().to_string()).collect(),
            "--seed" => a.seed = value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--no-smi" => a.smi = false,
            "--cpu-check" => a.cpu_check = true,
            "--list" => a.list = true,
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("coop_sweep.rs")
                        .lines()
                        .take(14)
                        .map(|l| l.trim_start_matches("//!"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    for p in &a.phases {
        if !PHASES.iter().any(|x| x.0 == p) {
            return Err(format!("unknown phase {p:?}; phases: edge, structure, tuning, shapes, split"));
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("coop_sweep: {e}");
            std::process::exit(2);
        }
    };
    if args.cpu_check {
        std::process::exit(cpu_check(&args));
    }
    if args.list {
        list(&args);
        return;
    }
    let gpu = match Gpu::open() {
        Ok(g) => g,
        Err(msg) => {
            println!("coop_sweep: {msg}");
            println!(
                "coop_sweep: nothing to measure here; `--cpu-check` checks every kernel of the sweep without a GPU."
            );
            return;
        }
    };
    let plan = if args.quick { Plan::quick(gpu.sg) } else { Plan::h200(gpu.sg) };
    let opts = Options {
        budget_s: args.budget_s,
        warmup_ms: args.warmup_ms,
        filter: args.filter.clone(),
        phases: args.phases.clone(),
        seed: args.seed,
        smi: args.smi,
        json: args.json.clone(),
        plan_name: if args.quick { "quick" } else { "h200" }.into(),
        quiet: false,
    };
    let outcome = Sweep::new(gpu, opts, plan).run();
    if outcome.device_lost {
        std::process::exit(3);
    }
}

// ---------------------------------------------------------------------------------------------
// Without a GPU
// ---------------------------------------------------------------------------------------------

fn list(args: &Args) {
    let sg = 32;
    let show = |title: &str, ds: &[Design]| {
        println!("{title}:");
        for d in ds {
            let k = Kernel { sg, ..Kernel::new(*d, Layout::XWt) };
            let ok = k.check(48 * 1024, 1024).map_or_else(|e| format!("invalid: {e}"), |_| "ok".into());
            println!(
                "  {:<58} {:>4} inv {:>6} B  ~{:>3} regs  {ok}",
                d.name(),
                k.threads(),
                k.wg_mem_bytes(),
                k.est_regs()
            );
        }
    };
    show("structures (f16, ranked on xwt 4096³ and 8192×768×3072)", &plan::structures());
    show("split structures", &plan::split_structures());
    println!("variations of the first structure:");
    for d in plan::variations(&plan::structures()[0]) {
        println!("  {}", d.name());
    }
    println!("edge kernels ({}x{}x{}):", plan::EDGE.0, plan::EDGE.1, plan::EDGE.2);
    for k in plan::edge_kernels(sg) {
        println!("  {}", k.label());
    }
    println!("shapes: {}", plan::all_cases().iter().map(|c| c.label()).collect::<Vec<_>>().join(", "));
    // Measurements of the full plan if nothing is cut (variations counted for the first
    // `tune` structures, standing in for the winners).
    let p = Plan::h200(sg);
    let ks_cases = |cases: &[plan::Case]| cases.iter().map(|c| plan::ksplits(c).len()).sum::<usize>();
    let tuning: usize =
        p.structures.iter().take(p.tune).map(|d| plan::variations(d).len()).sum::<usize>() * p.ranking.len();
    let counts = [
        ("edge", p.edge_kernels.len()),
        ("structure", p.structures.len() * p.ranking.len()),
        ("tuning", tuning),
        ("shapes", p.top_f16 * ks_cases(&p.all) + 2 * p.acc_cases.len() + 1 + p.cast_cases.len() + 3),
        ("split", p.split_structures.len() * p.ranking.len() + p.top_split * ks_cases(&p.split_all)),
    ];
    let total: usize = counts.iter().map(|c| c.1).sum();
    println!(
        "measurements planned (each one pipeline): {} = {total}",
        counts.iter().map(|(n, c)| format!("{n} {c}")).collect::<Vec<_>>().join(" + ")
    );
    let n = plan::every_kernel(sg).len();
    println!("{n} distinct kernels can be built (the sweep builds far fewer: see --budget-s {}).", args.budget_s);
}

fn cpu_check(args: &Args) -> i32 {
    let t0 = Instant::now();
    let kernels = plan::every_kernel(32);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = kernels.len().div_ceil(threads);
    let failures: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = kernels
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|(k, shape)| {
                            coop::check::check_kernel(k, shape).err().map(|e| format!("{}: {e}", k.label()))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let helpers = coop::check::check_helpers();
    println!(
        "naga: {} kernels parsed, validated and written as SPIR-V (checked and unchecked) in {:.1} s; {} failures; helpers: {:?}",
        kernels.len(),
        t0.elapsed().as_secs_f64(),
        failures.len(),
        helpers
    );
    for f in &failures {
        println!("  {f}");
    }
    // Emulate the edge kernels and the first structures on small problems.
    let mut rng = Rng::new(args.seed);
    println!("emulating (seed {}):", args.seed);
    let mut bad = 0;
    let mut todo: Vec<Kernel> = plan::edge_kernels(32);
    for d in plan::structures().into_iter().chain(plan::split_structures()) {
        todo.push(Kernel { sg: 32, ..Kernel::new(d, Layout::XWt) });
    }
    for k in todo {
        let d = k.d;
        let shape = if k.masked {
            Shape::new(d.bm + 40, 3 * d.bk * k.ksplit - 10, d.bn + 36, k.layout)
        } else {
            Shape::new(2 * d.bm, 3 * d.bk * k.ksplit, d.bn, k.layout)
        };
        let ops = Operands::random(shape, k.layout, &mut rng, 1.0);
        let before = if k.epi.accumulates() { ops.c0.clone() } else { vec![f32::from_bits(POISON); shape.c_len()] };
        let mut c = before.clone();
        let r = coop::emu::emulate(&k, &ops, &mut c, None).map(|_| {
            let pts = sample_points(&shape, 4096, &mut rng);
            check(&ops, &c, &before, k.epi.accumulates(), &pts, threads)
        });
        let tol = k.d.prec.tolerance(shape.k);
        match r {
            Ok(ch) if ch.ok(tol) => println!("  ok    {:<70} {} err {:.2e}", k.label(), shape.label(), ch.max_err),
            Ok(ch) => {
                bad += 1;
                println!("  WRONG {:<70} {} {:?}", k.label(), shape.label(), ch)
            }
            Err(e) => {
                bad += 1;
                println!("  ERROR {:<70} {} {e}", k.label(), shape.label())
            }
        }
    }
    let fail = !failures.is_empty() || helpers.is_err() || bad > 0;
    println!("cpu check {} in {:.1} s", if fail { "FAILED" } else { "passed" }, t0.elapsed().as_secs_f64());
    fail as i32
}
