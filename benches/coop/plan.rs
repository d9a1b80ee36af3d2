//! The sweep's plan: which designs, on which problems, in which order.
//!
//! Five phases, each with a share of the time budget (what a phase leaves is carried over):
//! - `edge` (10%): correctness on a problem that is a multiple of nothing (1000×770×1030), every
//!   layout, precision, epilogue and split-K path, masked kernels.
//! - `structure` (25%): the block/subgroup/staging structures below, f16, X·Wᵀ, on 4096³ and
//!   8192×768×3072, most promising first.
//! - `tuning` (17%): one-factor variations (pad, load width, shapes as uniform/const, runtime
//!   checks, block order, fragment prefetch, staging, BK) of the three best structures.
//! - `shapes` (24%): the three best designs on every shape and layout; split-K for the weight
//!   gradients; accumulate epilogues, masking cost and the fused cast for the best one.
//! - `split` (24%): f32-accurate (hi/lo) structures, then the two best on every shape.
#![allow(dead_code)]

use super::kernel::{Design, Dims, Epilogue, Kernel, Layout, Load, Prec, Shape, Staging};

/// A problem of the sweep: M×K×N in a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Case {
    pub m: u32,
    pub k: u32,
    pub n: u32,
    pub layout: Layout,
}

impl Case {
    pub const fn new(m: u32, k: u32, n: u32, layout: Layout) -> Case {
        Case { m, k, n, layout }
    }
    pub fn shape(&self) -> Shape {
        Shape::new(self.m, self.k, self.n, self.layout)
    }
    /// "xwt 8192x768x3072" (M×K×N).
    pub fn label(&self) -> String {
        format!("{} {}x{}x{}", self.layout.name(), self.m, self.k, self.n)
    }
}

use Layout::{DyW, XWt, XtB};

/// The problem not a multiple of any block.
pub const EDGE: (u32, u32, u32) = (1000, 770, 1030);

/// The shapes on which structures are ranked.
pub fn ranking_cases() -> Vec<Case> {
    vec![Case::new(4096, 4096, 4096, XWt), Case::new(8192, 768, 3072, XWt)]
}

/// Every f16 problem of the `shapes` phase, in order (8192³ last: optional if time is short).
pub fn all_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for layout in [XWt, DyW] {
        v.push(Case::new(4096, 4096, 4096, layout));
        for (m, k, n) in [(8192, 768, 2304), (8192, 768, 3072), (8192, 3072, 768)] {
            v.push(Case::new(m, k, n, layout));
        }
    }
    v.push(Case::new(4096, 4096, 4096, XtB));
    v.push(Case::new(768, 8192, 768, XtB));
    v.push(Case::new(768, 8192, 3072, XtB));
    v.push(Case::new(8192, 8192, 8192, XWt));
    v
}

/// Split-K factors tried on a weight-gradient problem (long K, few output blocks).
pub fn ksplits(case: &Case) -> Vec<u32> {
    if case.layout == XtB && case.k >= 4 * case.m.max(case.n) / 3 && case.m * case.n <= 768 * 3072 {
        if case.m * case.n <= 768 * 768 { vec![1, 2, 4, 8] } else { vec![1, 2, 4] }
    } else {
        vec![1]
    }
}

/// The block/subgroup/staging structures of the `structure` phase (f16), most promising first.
/// Comments: subgroup tile, invocations, workgroup memory with pad 8 (X·Wᵀ).
pub fn structures() -> Vec<Design> {
    use Staging::*;
    let mut v = vec![
        Design::new(128, 128, 32, 2, 2, Double), // 64×64, 128, 40 KiB: CUTLASS-like, 2 WG/SM
        Design::new(128, 256, 32, 2, 4, Prefetch), // 64×64, 256, 30 KiB
        Design::new(128, 128, 64, 2, 2, Prefetch), // 64×64, 128, 36 KiB: half the barriers/FLOP
        Design::new(128, 128, 32, 2, 4, Double), // 64×32, 256, 40 KiB
        Design::new(128, 256, 32, 2, 8, Prefetch), // 64×32, 512: the probe's best structure
        Design::new(128, 128, 16, 2, 2, Double), // 64×64, 128, 24 KiB: many WGs per SM
        Design::new(256, 128, 32, 4, 2, Prefetch), // 64×64, 256, 30 KiB
        Design::new(256, 128, 16, 4, 2, Double), // 64×64, 256, 36 KiB
        Design::new(128, 64, 32, 2, 1, Double),  // 64×64, 64, 30 KiB: small WGs, 3+ per SM
        Design::new(128, 128, 32, 4, 2, Double), // 32×64, 256, 40 KiB
        Design::new(128, 256, 16, 2, 4, Double), // 64×64, 256, 36 KiB
        Design::new(128, 128, 32, 2, 2, Direct), // 64×64, 128, no staging, no barriers
        Design::new(64, 128, 32, 1, 2, Double),  // 64×64, 64, 30 KiB
        Design::new(64, 64, 32, 2, 2, Double),   // 32×32, 128, 20 KiB
        Design::new(64, 64, 32, 1, 1, Direct),   // 64×64, one subgroup
        Design::new(256, 64, 32, 4, 1, Prefetch), // 64×64, 128, 26 KiB
        Design::new(128, 128, 32, 2, 2, Single), // reference: no prefetch
        Design::new(128, 64, 32, 2, 2, Direct),  // 64×32, 128, no staging
        Design::new(256, 128, 32, 4, 4, Prefetch), // 64×32, 512
    ];
    // Double buffering of 128×256×32 fits only without padding (exactly 48 KiB).
    let mut d = Design::new(128, 256, 32, 2, 4, Double);
    d.pad = 0;
    v.insert(5, d);
    for d in v.iter_mut() {
        if d.staging == Direct {
            d.load = Load::V4;
            d.pad = 0;
        }
    }
    v
}

/// One-factor variations of a design (the `tuning` phase), most informative first; invalid
/// ones are dropped later.
pub fn variations(d: &Design) -> Vec<Design> {
    let mut v = Vec::new();
    let mut push = |f: &dyn Fn(&mut Design)| {
        let mut x = *d;
        f(&mut x);
        if x != *d && !v.contains(&x) {
            v.push(x);
        }
    };
    // Shapes from a uniform: the price of one pipeline for all shapes (probe: −29–48%).
    push(&|x| x.dims = Dims::Uniform);
    match d.staging {
        Staging::Double => push(&|x| x.staging = Staging::Prefetch),
        Staging::Prefetch => {
            push(&|x| x.staging = Staging::Double);
            push(&|x| {
                x.staging = Staging::Double;
                x.pad = 0;
            });
        }
        Staging::Single => push(&|x| x.staging = Staging::Prefetch),
        Staging::Direct => {}
    }
    push(&|x| x.bk *= 2);
    if d.staging != Staging::Direct {
        push(&|x| x.pad = if x.pad == 0 { 8 } else { 0 });
        push(&|x| x.load = if x.load == Load::V4 { Load::M2x4 } else { Load::V4 });
    }
    push(&|x| x.checked = true);
    push(&|x| x.swizzle = 8);
    if d.bk >= 32 {
        push(&|x| x.fragpf = true);
        push(&|x| x.bk /= 2);
    }
    if d.staging == Staging::Double {
        push(&|x| x.staging = Staging::Single);
    }
    push(&|x| x.dims = Dims::Const);
    v
}

/// f32-accurate structures of the `split` phase, most promising first.
pub fn split_structures() -> Vec<Design> {
    use Staging::*;
    let s = |bm, bn, bk, sgm, sgn, st, p| Design::new(bm, bn, bk, sgm, sgn, st).with_prec(p);
    // Comments: subgroup tile, invocations, workgroup memory, estimated registers a lane.
    let mut v = vec![
        s(128, 128, 32, 2, 4, Prefetch, Prec::Pre), // 64×32, 256, 40 KiB, ~168: no conversion in the loop
        s(128, 128, 32, 2, 4, Prefetch, Prec::Split), // same, split while staging
        s(128, 128, 16, 2, 2, Double, Prec::Pre),   // 64×64, 128, 48 KiB, ~248
        s(128, 128, 16, 2, 2, Double, Prec::Split), // 64×64, 128, 48 KiB, ~248
        s(128, 256, 16, 2, 4, Prefetch, Prec::Pre), // 64×64, 256, 36 KiB, ~240
        s(128, 128, 32, 2, 4, Prefetch, Prec::PreScaled), // lo scaled, own accumulators, ~232
        s(128, 128, 32, 2, 4, Prefetch, Prec::SplitScaled), // ~232
        s(128, 128, 32, 4, 2, Prefetch, Prec::Pre), // 32×64, 256, 40 KiB, ~168
        s(128, 128, 32, 2, 2, Single, Prec::Pre),   // 64×64, 128, 40 KiB, ~216
        s(128, 64, 32, 2, 2, Prefetch, Prec::Split), // 64×32, 128, 30 KiB, ~184
        s(64, 64, 32, 2, 2, Double, Prec::Split),   // 32×32, 128, 40 KiB, ~120
        s(128, 128, 32, 2, 2, Direct, Prec::Pre),   // no staging: hi/lo straight from memory, ~216
    ];
    for d in v.iter_mut() {
        if d.staging == Direct {
            d.load = Load::V4;
            d.pad = 0;
        }
    }
    v
}

/// The correctness kernels of the `edge` phase (masked) with their layouts.
pub fn edge_kernels(sg: u32) -> Vec<Kernel> {
    let st = structures();
    let sp = split_structures();
    let mut small = st.iter().copied().find(|d| d.bk == 16).unwrap_or(st[0]);
    small.load = Load::V4;
    small.pad = 0;
    small.swizzle = 8;
    edge_set(st[0], st[4], small, [sp[0], sp[1], sp[5]], sg)
}

/// Edge kernels from a base design, a large one, a small one (BK 16, other options) and three
/// split designs (pre, split, scaled).
fn edge_set(base: Design, large: Design, small: Design, sp: [Design; 3], sg: u32) -> Vec<Kernel> {
    let mut v = Vec::new();
    let mk =
        |d: Design, layout: Layout, epi: Epilogue, ksplit: u32| Kernel { d, layout, epi, masked: true, ksplit, sg };
    // Kind by kind, every layout, so a cut budget still covers every layout.
    let kinds: [(Design, Epilogue, u32); 10] = [
        (base, Epilogue::Store, 1),
        (sp[0], Epilogue::Store, 1),
        (base, Epilogue::Store, 3),
        (base, Epilogue::AccInit, 1),
        (base, Epilogue::AccEnd, 1),
        (large, Epilogue::Store, 1),
        (small, Epilogue::Store, 1),
        (sp[1], Epilogue::Store, 1),
        (sp[2], Epilogue::AccEnd, 1),
        (base.with_prec(Prec::Cast), Epilogue::Store, 1),
    ];
    for (d, epi, ks) in kinds {
        for layout in Layout::ALL {
            v.push(mk(d, layout, epi, ks));
        }
    }
    v.push(mk(base, XtB, Epilogue::AccInit, 3));
    v.push(mk(sp[1], XtB, Epilogue::AccEnd, 2));
    let mut uni = base;
    uni.dims = Dims::Uniform;
    v.push(mk(uni, XWt, Epilogue::Store, 1));
    let mut chk = base;
    chk.checked = true;
    v.push(mk(chk, DyW, Epilogue::Store, 1));
    v
}

/// Everything a sweep runs, phase by phase.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The `edge` problem (M, K, N) and its kernels.
    pub edge: (u32, u32, u32),
    pub edge_kernels: Vec<Kernel>,
    /// `structure`: designs, ranked on `ranking`.
    pub structures: Vec<Design>,
    pub ranking: Vec<Case>,
    /// `tuning`: variations of the best `tune` structures.
    pub tune: usize,
    /// `shapes`: the best `top_f16` designs on `all` (split-K by [`ksplits`]); the best one's
    /// accumulate epilogues on `acc_cases`, masked on `square`, fused cast on `cast_cases`.
    pub top_f16: usize,
    pub all: Vec<Case>,
    pub acc_cases: Vec<Case>,
    pub square: Case,
    pub cast_cases: Vec<Case>,
    /// `split`: f32-accurate designs ranked on `ranking`, the best `top_split` on `split_all`.
    pub split_structures: Vec<Design>,
    pub top_split: usize,
    pub split_all: Vec<Case>,
}

impl Plan {
    /// The full H200 sweep.
    pub fn h200(sg: u32) -> Plan {
        Plan {
            edge: EDGE,
            edge_kernels: edge_kernels(sg),
            structures: structures(),
            ranking: ranking_cases(),
            tune: 3,
            top_f16: 3,
            all: all_cases(),
            acc_cases: vec![Case::new(8192, 3072, 768, DyW), Case::new(8192, 768, 3072, DyW)],
            square: Case::new(4096, 4096, 4096, XWt),
            cast_cases: vec![Case::new(4096, 4096, 4096, XWt), Case::new(8192, 768, 3072, XWt)],
            split_structures: split_structures(),
            top_split: 2,
            split_all: all_cases()
                .into_iter()
                .filter(|c| (c.m as u64) * (c.n as u64) * (c.k as u64) < 1 << 39)
                .collect(),
        }
    }

    /// A first look in about a minute: a few designs of each phase.
    pub fn quick(sg: u32) -> Plan {
        let mut p = Plan::h200(sg);
        p.edge_kernels.truncate(6);
        p.structures.truncate(4);
        p.ranking.truncate(1);
        p.tune = 0;
        p.top_f16 = 1;
        p.all = vec![Case::new(8192, 768, 3072, XWt), Case::new(8192, 3072, 768, DyW), Case::new(768, 8192, 768, XtB)];
        p.acc_cases.truncate(1);
        p.cast_cases.truncate(1);
        p.split_structures.truncate(3);
        p.top_split = 1;
        p.split_all = vec![Case::new(768, 8192, 768, XtB)];
        p
    }
}

/// Every kernel any phase can build, whatever wins (for the build-time check), with a problem
/// it supports: all structures and their variations in every layout, masked and not, the
/// epilogue and split-K forms, the split structures, and the edge kernels.
pub fn every_kernel(sg: u32) -> Vec<(Kernel, Shape)> {
    let mut out: Vec<(Kernel, Shape)> = Vec::new();
    let add = |k: Kernel, out: &mut Vec<(Kernel, Shape)>| {
        if k.check(48 * 1024, 1024).is_err() {
            return;
        }
        let shape = if k.masked {
            Shape::new(EDGE.0, EDGE.1, EDGE.2, k.layout)
        } else {
            Shape::new(4096, 4096, 4096, k.layout)
        };
        if k.supports(&shape).is_ok() && !out.iter().any(|(x, _)| *x == k) {
            out.push((k, shape));
        }
    };
    let mut designs: Vec<Design> = Vec::new();
    for d in structures() {
        designs.push(d);
        designs.extend(variations(&d));
    }
    for d in split_structures() {
        designs.push(d);
    }
    let first = structures()[0];
    designs.push(first.with_prec(Prec::Cast));
    for d in designs {
        for layout in Layout::ALL {
            for masked in [false, true] {
                add(Kernel { d, layout, epi: Epilogue::Store, masked, ksplit: 1, sg }, &mut out);
            }
        }
    }
    for d in structures().into_iter().chain(split_structures()) {
        for layout in Layout::ALL {
            for epi in [Epilogue::AccInit, Epilogue::AccEnd] {
                for masked in [false, true] {
                    add(Kernel { d, layout, epi, masked, ksplit: 1, sg }, &mut out);
                }
            }
            for ks in [2, 4, 8] {
                add(Kernel { d, layout, epi: Epilogue::Store, masked: false, ksplit: ks, sg }, &mut out);
            }
        }
    }
    for k in edge_kernels(sg) {
        add(k, &mut out);
    }
    out
}
