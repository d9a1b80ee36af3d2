//! A CPU emulator of the generated kernels: it runs a kernel's schedule ([`Kernel::schedule`])
//! with the very index expressions printed into its WGSL, workgroup by workgroup, invocation by
//! invocation, fragment by fragment, and checks on the way what the GPU would not report:
//! out-of-bounds indices, coop pointers and strides off 16-byte alignment, reads of staged data
//! never written, and races between barriers (a staging element written and read, or written
//! by two invocations, between the same two barriers). Products are exact f16×f16 in f32 with
//! f32 accumulation, as on tensor cores. Used by the tests on small problems.
#![allow(dead_code, clippy::needless_range_loop)]

use super::kernel::{E, Env, Epilogue, Kernel, Operand, Prec, Staging, Step};
use super::num::{Operands, q16, split};

const NONE: u32 = u32::MAX;

/// Staged memory of one operand part, with the barrier interval of each element's last write
/// and read.
struct Smem {
    val: Vec<f32>,
    wseg: Vec<u32>,
    writer: Vec<u32>,
    rseg: Vec<u32>,
}

impl Smem {
    fn new(len: usize) -> Smem {
        Smem { val: vec![f32::NAN; len], wseg: vec![NONE; len], writer: vec![NONE; len], rseg: vec![NONE; len] }
    }
    fn write(&mut self, e: usize, x: f32, seg: u32, tid: u32) -> Result<(), String> {
        if e >= self.val.len() {
            return Err(format!("staging write out of bounds: {e} >= {}", self.val.len()));
        }
        if self.wseg[e] == seg && self.writer[e] != tid {
            return Err(format!(
                "race: staging element {e} written by invocations {} and {tid} between two barriers",
                self.writer[e]
            ));
        }
        if self.rseg[e] == seg {
            return Err(format!("race: staging element {e} read and written between two barriers"));
        }
        self.val[e] = x;
        self.wseg[e] = seg;
        self.writer[e] = tid;
        Ok(())
    }
    fn read(&mut self, e: usize, seg: u32) -> Result<f32, String> {
        if e >= self.val.len() {
            return Err(format!("staging read out of bounds: {e} >= {}", self.val.len()));
        }
        if self.wseg[e] == NONE {
            return Err(format!("staging element {e} read before any write"));
        }
        if self.wseg[e] == seg {
            return Err(format!("race: staging element {e} written and read between two barriers"));
        }
        self.rseg[e] = seg;
        Ok(self.val[e])
    }
}

type Frag = [f32; 256];

fn eval_lets(lets: &[(&'static str, E)], env: &mut Env) -> Result<(), String> {
    for (n, e) in lets {
        let x = e.eval(env).map_err(|m| format!("let {n}: {m}"))?;
        env.insert(n, x);
    }
    Ok(())
}

/// The operand arrays as the GPU sees them (elements), one or two parts (hi, lo) each.
fn device_arrays(k: &Kernel, ops: &Operands) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let p = k.d.prec;
    let conv = |x: &[f32]| -> Vec<Vec<f32>> {
        match p {
            Prec::F16 => vec![x.iter().map(|&v| q16(v)).collect()],
            Prec::Cast | Prec::Split | Prec::SplitScaled => vec![x.to_vec()],
            Prec::Pre | Prec::PreScaled => {
                let (h, l): (Vec<f32>, Vec<f32>) = x.iter().map(|&v| split(v, p.lo_scale())).unzip();
                vec![h, l]
            }
        }
    };
    (conv(&ops.a), conv(&ops.b))
}

struct Wg<'a> {
    k: &'a Kernel,
    env: Env,
    seg: u32,
    /// [operand][part]
    sm: [Vec<Smem>; 2],
    /// [tid][operand][slot][part] → up to 8 values
    regs: Vec<[Vec<Vec<[f32; 8]>>; 2]>,
    /// [subgroup][i*tn + j]
    acc: Vec<Vec<Frag>>,
    accx: Vec<Vec<Frag>>,
    sg_env: Vec<Env>,
    glob: [&'a [Vec<f32>]; 2],
}

fn mma(a: &Frag, b: &Frag, acc: &mut Frag) {
    for r in 0..16 {
        for col in 0..16 {
            let mut s = acc[r * 16 + col] as f64;
            for x in 0..16 {
                s += a[r * 16 + x] as f64 * b[x * 16 + col] as f64;
            }
            acc[r * 16 + col] = s as f32;
        }
    }
}

impl Wg<'_> {
    fn run(&mut self, steps: &[Step]) -> Result<(), String> {
        for st in steps {
            self.step(st)?;
        }
        Ok(())
    }

    fn step(&mut self, st: &Step) -> Result<(), String> {
        let k = self.k;
        let threads = k.threads();
        let gw = k.gw() as usize;
        let p = k.d.prec;
        match st {
            Step::Barrier => self.seg += 1,
            Step::IfLt { a, b, body } => {
                if a.eval(&self.env)? < b.eval(&self.env)? {
                    self.run(body)?;
                }
            }
            Step::Load { kt } => {
                let kb = k.kb(kt).eval(&self.env)?;
                self.env.insert("kb", kb);
                let kbv = E::V("kb");
                for (oi, op) in [Operand::A, Operand::B].into_iter().enumerate() {
                    for slot in 0..k.slots(op) {
                        let x = k.slot(op, slot, &kbv);
                        for tid in 0..threads {
                            self.env.insert("tid", tid);
                            let g = x.gidx.eval(&self.env);
                            let ok = x.ok.eval(&self.env)? != 0;
                            let idx = if k.masked {
                                if ok { g? } else { 0 }
                            } else {
                                if !ok {
                                    return Err(format!(
                                        "unmasked kernel loads outside the problem ({op:?} slot {slot}, tid {tid})"
                                    ));
                                }
                                g?
                            } as usize;
                            let parts = self.glob[oi];
                            for (pi, arr) in parts.iter().enumerate() {
                                if (idx + 1) * gw > arr.len() {
                                    return Err(format!(
                                        "global load out of bounds: {op:?} vector {idx} of {}",
                                        arr.len() / gw
                                    ));
                                }
                                let mut vals = [0f32; 8];
                                for e in 0..gw {
                                    let keep = !k.masked || x.elems[e].eval(&self.env)? != 0;
                                    vals[e] = if keep { arr[idx * gw + e] } else { 0.0 };
                                }
                                self.regs[tid as usize][oi][slot as usize][pi] = vals;
                            }
                        }
                    }
                }
            }
            Step::Store { buf } => {
                let bufv = buf.eval(&self.env)?;
                for (oi, op) in [Operand::A, Operand::B].into_iter().enumerate() {
                    let base = bufv * k.buf_vec4s(op);
                    for slot in 0..k.slots(op) {
                        let x = k.slot(op, slot, &E::C(0));
                        for tid in 0..threads {
                            self.env.insert("tid", tid);
                            let v4 = (base + x.sidx.eval(&self.env)?) as usize;
                            let regs = &self.regs[tid as usize][oi][slot as usize];
                            for e in 0..gw {
                                let el = v4 * 4 + e;
                                match p {
                                    Prec::F16 => self.sm[oi][0].write(el, regs[0][e], self.seg, tid)?,
                                    Prec::Cast => self.sm[oi][0].write(el, q16(regs[0][e]), self.seg, tid)?,
                                    Prec::Split | Prec::SplitScaled => {
                                        let (h, l) = split(regs[0][e], p.lo_scale());
                                        self.sm[oi][0].write(el, h, self.seg, tid)?;
                                        self.sm[oi][1].write(el, l, self.seg, tid)?;
                                    }
                                    Prec::Pre | Prec::PreScaled => {
                                        self.sm[oi][0].write(el, regs[0][e], self.seg, tid)?;
                                        self.sm[oi][1].write(el, regs[1][e], self.seg, tid)?;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Step::Compute { buf } => {
                let bufv = buf.eval(&self.env)?;
                self.compute(Some(bufv))?;
            }
            Step::ComputeDirect { kt } => {
                let kb = k.kb(kt).eval(&self.env)?;
                self.env.insert("kb", kb);
                self.compute(None)?;
            }
        }
        Ok(())
    }

    /// Fragment (i) of an operand at slice kk for subgroup s, every part.
    fn fragment(&mut self, s: usize, op: Operand, i: u32, kk: u32, buf: Option<u32>) -> Result<Vec<Frag>, String> {
        let k = self.k;
        let (off, st, row_major) = k.frag(op, i, kk);
        let mut env = self.sg_env[s].clone();
        if let Some(kb) = self.env.get("kb") {
            env.insert("kb", *kb);
        }
        let oi = (op == Operand::B) as usize;
        let off = off.eval(&env)? + buf.map_or(0, |b| b * k.buf_vec4s(op));
        let st = st.eval(&env)?;
        if !(off * 4).is_multiple_of(8) || !(st * 4).is_multiple_of(8) {
            return Err(format!("coop load of {op:?} off 16-byte alignment: offset {off}, stride {st} (vec4 units)"));
        }
        let nparts = if k.d.prec.split() { 2 } else { 1 };
        let mut out = Vec::with_capacity(nparts);
        for part in 0..nparts {
            let mut f = [0f32; 256];
            for r in 0..16usize {
                for col in 0..16usize {
                    let e = off as usize * 4
                        + if row_major { r * st as usize * 4 + col } else { col * st as usize * 4 + r };
                    f[r * 16 + col] = match buf {
                        Some(_) => self.sm[oi][part].read(e, self.seg)?,
                        None => {
                            let arr = &self.glob[oi][part];
                            *arr.get(e)
                                .ok_or_else(|| format!("direct coop load out of bounds: {e} >= {}", arr.len()))?
                        }
                    };
                }
            }
            out.push(f);
        }
        Ok(out)
    }

    fn compute(&mut self, buf: Option<u32>) -> Result<(), String> {
        let k = self.k;
        let (tm, tn) = (k.d.tm(), k.d.tn());
        let p = k.d.prec;
        for s in 0..k.d.subgroups() as usize {
            for kk in 0..k.d.bk / 16 {
                let fa: Vec<Vec<Frag>> =
                    (0..tm).map(|i| self.fragment(s, Operand::A, i, kk, buf)).collect::<Result<_, _>>()?;
                let fb: Vec<Vec<Frag>> =
                    (0..tn).map(|j| self.fragment(s, Operand::B, j, kk, buf)).collect::<Result<_, _>>()?;
                for i in 0..tm as usize {
                    for j in 0..tn as usize {
                        let a = i * tn as usize + j;
                        if p.split() {
                            let x = if p.scaled() { &mut self.accx[s][a] } else { &mut self.acc[s][a] };
                            mma(&fa[i][0], &fb[j][1], x);
                            mma(&fa[i][1], &fb[j][0], x);
                            mma(&fa[i][0], &fb[j][0], &mut self.acc[s][a]);
                        } else {
                            mma(&fa[i][0], &fb[j][0], &mut self.acc[s][a]);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn load_c(out: &[f32], off: u32, st: u32) -> Result<Frag, String> {
    if !off.is_multiple_of(4) || !st.is_multiple_of(4) {
        return Err(format!("f32 coop access off 16-byte alignment: offset {off}, stride {st}"));
    }
    let mut f = [0f32; 256];
    for r in 0..16 {
        for col in 0..16 {
            let e = (off + r * st + col) as usize;
            f[(r * 16 + col) as usize] =
                *out.get(e).ok_or_else(|| format!("C access out of bounds: {e} >= {}", out.len()))?;
        }
    }
    Ok(f)
}

fn store_c(out: &mut [f32], off: u32, st: u32, f: &Frag) -> Result<(), String> {
    if !off.is_multiple_of(4) || !st.is_multiple_of(4) {
        return Err(format!("f32 coop store off 16-byte alignment: offset {off}, stride {st}"));
    }
    let len = out.len();
    for r in 0..16 {
        for col in 0..16 {
            let e = (off + r * st + col) as usize;
            *out.get_mut(e).ok_or_else(|| format!("C store out of bounds: {e} >= {len}"))? = f[(r * 16 + col) as usize];
        }
    }
    Ok(())
}

/// Runs kernel `k` (and, with split-K, the reduction) on `ops`; `c` holds C before the run
/// ([M, ldc]) and the result after it. `schedule` replaces the kernel's own (to test the
/// emulator's race detection).
pub fn emulate(
    k: &Kernel,
    ops: &Operands,
    c: &mut [f32],
    schedule: Option<(Vec<Step>, Vec<Step>)>,
) -> Result<(), String> {
    let s = ops.shape;
    k.check(48 * 1024, 1024)?;
    k.supports(&s)?;
    if ops.layout != k.layout {
        return Err("operands in another layout".into());
    }
    let (ga, gb) = device_arrays(k, ops);
    let mut part = vec![f32::NAN; k.part_len(&s)];
    let mut scratch = vec![f32::NAN; k.scratch_len(&s)];
    let [gx_n, gy_n, gz_n] = k.grid(&s);
    let gx = s.n.div_ceil(k.d.bn);
    let gy = s.m.div_ceil(k.d.bm);
    let mut seen = vec![false; (gx * gy * k.ksplit) as usize];
    let (pro, body) = schedule.unwrap_or_else(|| k.schedule());
    let threads = k.threads();
    let nparts = if k.d.prec.split() { 2 } else { 1 };
    let nbuf = match k.d.staging {
        Staging::Direct => 0,
        Staging::Single | Staging::Prefetch => 1,
        Staging::Double => 2,
    };
    let (tm, tn) = (k.d.tm(), k.d.tn());
    let acc_mode = k.epi.accumulates() && k.ksplit == 1;
    for z in 0..gz_n {
        for y in 0..gy_n {
            for x in 0..gx_n {
                let mut env = Env::new();
                for (n, val) in super::kernel::DIM_NAMES.iter().zip(k.dim_values(&s)) {
                    env.insert(n, val);
                }
                env.insert("wg.x", x);
                env.insert("wg.y", y);
                env.insert("wg.z", z);
                eval_lets(&k.wg_lets(), &mut env)?;
                let (bx, by) = (env["bx"], env["by"]);
                if bx >= gx || by >= gy {
                    return Err(format!(
                        "workgroup ({x}, {y}, {z}) maps to block ({bx}, {by}) outside the {gx}×{gy} grid"
                    ));
                }
                let id = ((z * gy + by) * gx + bx) as usize;
                if seen[id] {
                    return Err(format!("block ({bx}, {by}, {z}) computed twice"));
                }
                seen[id] = true;
                let sg_env: Vec<Env> = (0..k.d.subgroups())
                    .map(|sgi| {
                        let mut e = env.clone();
                        e.insert("sg_id", sgi);
                        eval_lets(&k.sg_lets(), &mut e).map(|_| e)
                    })
                    .collect::<Result<_, _>>()?;
                let smem = |op: Operand| {
                    (0..nparts).map(|_| Smem::new((nbuf * k.buf_vec4s(op) * 4) as usize)).collect::<Vec<_>>()
                };
                let regs = (0..threads)
                    .map(|_| {
                        [
                            vec![vec![[0f32; 8]; nparts]; k.slots(Operand::A) as usize],
                            vec![vec![[0f32; 8]; nparts]; k.slots(Operand::B) as usize],
                        ]
                    })
                    .collect();
                let zero = vec![[0f32; 256]; (tm * tn) as usize];
                let mut wg = Wg {
                    k,
                    env,
                    seg: 0,
                    sm: [smem(Operand::A), smem(Operand::B)],
                    regs,
                    acc: vec![zero.clone(); k.d.subgroups() as usize],
                    accx: vec![zero; k.d.subgroups() as usize],
                    sg_env,
                    glob: [&ga, &gb],
                };
                let full = !k.masked || wg.env["full"] != 0;
                let out: &mut [f32] = if k.ksplit > 1 { &mut part } else { c };
                if k.epi == Epilogue::AccInit && k.ksplit == 1 && full {
                    for sgi in 0..k.d.subgroups() as usize {
                        for i in 0..tm {
                            for j in 0..tn {
                                let (off, st) = k.out_frag(i, j);
                                let f = load_c(out, off.eval(&wg.sg_env[sgi])?, st.eval(&wg.sg_env[sgi])?)?;
                                wg.acc[sgi][(i * tn + j) as usize] = f;
                            }
                        }
                    }
                }
                wg.run(&pro)?;
                let nk = wg.env["nk"];
                for t in 0..nk {
                    wg.env.insert("t", t);
                    wg.run(&body)?;
                }
                if k.d.prec.scaled() {
                    let inv = 1.0 / k.d.prec.lo_scale();
                    for sgi in 0..k.d.subgroups() as usize {
                        for a in 0..(tm * tn) as usize {
                            for e in 0..256 {
                                wg.acc[sgi][a][e] += inv * wg.accx[sgi][a][e];
                            }
                        }
                    }
                }
                // Epilogue.
                for sgi in 0..k.d.subgroups() as usize {
                    for i in 0..tm {
                        for j in 0..tn {
                            let a = (i * tn + j) as usize;
                            let env = &wg.sg_env[sgi];
                            if full {
                                let (off, st) = k.out_frag(i, j);
                                let (off, st) = (off.eval(env)?, st.eval(env)?);
                                let mut f = wg.acc[sgi][a];
                                if k.epi == Epilogue::AccEnd && k.ksplit == 1 {
                                    let prev = load_c(out, off, st)?;
                                    for e in 0..256 {
                                        f[e] += prev[e];
                                    }
                                }
                                store_c(out, off, st, &f)?;
                            } else {
                                let (off, st) = k.scratch_frag(i, j);
                                store_c(&mut scratch, off.eval(env)?, st.eval(env)?, &wg.acc[sgi][a])?;
                            }
                        }
                    }
                }
                if !full {
                    let (src, dst, ok, count) = k.edge_copy();
                    let count = count.eval(&wg.env)?;
                    for e in 0..count {
                        wg.env.insert("e", e);
                        for tid in 0..threads {
                            wg.env.insert("tid", tid);
                            if ok.eval(&wg.env)? != 0 {
                                let d = dst.eval(&wg.env)? as usize;
                                let sv =
                                    *scratch.get(src.eval(&wg.env)? as usize).ok_or("scratch read out of bounds")?;
                                let len = out.len();
                                let slot =
                                    out.get_mut(d).ok_or_else(|| format!("edge copy out of bounds: {d} >= {len}"))?;
                                *slot = if acc_mode { *slot + sv } else { sv };
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(format!("block {i} never computed"));
    }
    if k.ksplit > 1 {
        // The reduction kernel (`reduce_wgsl`).
        let len = s.c_len();
        for i in 0..len {
            if (i % s.ldc as usize) >= s.n as usize {
                continue;
            }
            let mut sum = 0f32;
            for z in 0..k.ksplit as usize {
                sum += part[z * len + i];
            }
            c[i] = if k.epi.accumulates() { c[i] + sum } else { sum };
        }
    }
    Ok(())
}
