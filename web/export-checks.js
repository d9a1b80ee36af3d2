// The JavaScript export checked from plain JavaScript: the page (index.html) runs this after
// the wasm checks. Everything here goes through export/kernels.js and export/manifest.json, as
// an outside host would, and every result is compared with a float64 reference computed here
// on fresh random inputs (the seed is printed; `?seed=N` replays it), outputs poisoned with NaN
// first.

import { fetchManifest, deviceDescriptor, Kernels, KernelError, evaluate, dispatch1d } from './export/kernels.js';

// WGSL's accuracy of sin and cos on [−π, π] is 2⁻¹¹ absolute; a rotated pair of values in
// [−1, 1] may be off by twice that.
const SINCOS_TOL = 2 * 2 ** -11 + 1e-5;

// mulberry32: a small seeded generator.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs the checks, reporting each through `add(status, check, detail)`; resolves to success. */
export async function exportChecks(add) {
  const seedParam = new URLSearchParams(location.search).get('seed');
  // The page's seed is a u64 (the test passes KERNELS_TEST_SEED); this generator takes 32 bits.
  const seed = seedParam === null ? Math.floor(Math.random() * 2 ** 32)
    : /^\d+$/.test(seedParam) ? Number(BigInt.asUintN(32, BigInt(seedParam))) : Number(seedParam) >>> 0;
  add('info', 'js-export seed', `${seed} (replay with ?seed=${seed})`);
  const random = generator(seed);
  const uniform = (n, lo = -1, hi = 1) => Float32Array.from({ length: n }, () => lo + (hi - lo) * random());
  const integers = (n, below) => Uint32Array.from({ length: n }, () => Math.floor(random() * below));

  const manifest = await fetchManifest(new URL('export/', location.href));
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice(deviceDescriptor(adapter, manifest));
  const lost = [];
  device.addEventListener('uncapturederror', e => lost.push(e.error.message));
  const kernels = new Kernels(device, manifest);
  let ok = true;
  const result = (pass, check, detail) => { add(pass ? 'pass' : 'fail', `js-export ${check}`, detail); ok &&= pass; };

  // Every kernel's pipeline from the manifest: those this device cannot run must be exactly the
  // ones with no browser variant at all (tensor-core kernels, native only) and the ones whose
  // every variant needs shader-f16 (SwiftShader has no f16), each reported.
  const { built, unavailable } = await kernels.build();
  let pipelinesOk = true;
  for (const { name, error } of unavailable) {
    const k = kernels.kernel(name);
    const native = k.variants.length === 0;
    const f16 = k.features.includes('shader-f16') && !device.features.has('shader-f16');
    add(native ? 'native-only' : f16 ? 'needs-f16' : 'fail', `js-export pipeline ${name}`, error.message);
    const why = native ? 'no browser variant' : 'shader-f16';
    pipelinesOk &&= (native || f16) && error instanceof KernelError && error.message.includes(why);
  }
  result(pipelinesOk, 'pipelines', `${built.length} of ${manifest.kernels.length} kernels built from the manifest; ${unavailable.length} unavailable`);

  // Compares GPU results with a float64 reference: |got − want| ≤ tol · max(1, |want|).
  function compare(check, got, want, tol, detail = '') {
    let worst = 0, at = -1;
    for (let i = 0; i < want.length; i++) {
      const err = Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i]));
      if (!(err <= worst)) { worst = Number.isNaN(err) ? Infinity : err; at = i; }
    }
    const pass = worst <= tol;
    result(pass, check, `${detail}max relative error ${worst.toExponential(2)} (tolerance ${tol})${pass ? '' : ` at ${at}: ${got[at]} vs ${want[at]}`}`);
    return pass;
  }
  const poisoned = n => kernels.upload(new Float32Array(n).fill(NaN));
  const read = (b, T = Float32Array) => kernels.read(b, T);

  // Element-wise, accumulating: y += alpha·x over n of more elements (the rest untouched).
  {
    const n = 5000, alpha = 0.75;
    const x = uniform(n), y = uniform(n + 37);
    const xb = kernels.upload(x), yb = kernels.upload(y);
    const plan = await kernels.run('infrastructure::axpy', { x: xb, y: yb, p: { n, alpha } });
    const want = Float64Array.from(y, (v, i) => (i < n ? v + alpha * x[i] : v));
    compare('infrastructure::axpy', await read(yb), want, 1e-6, `${n} values, grid ${plan.workgroups.join('×')}; `);
  }

  // Clamp: NaN stays NaN (quiet, negative, with payloads), ±Inf go to the bounds. The kernel
  // tests NaN on the bits, since a `v != v` test may be folded away by the browser's compiler.
  {
    const n = 3000, lo = -0.25, hi = 0.5;
    const x = uniform(n, -1, 1);
    const bits = new Uint32Array(x.buffer);
    const specials = [0x7fc00000, 0xffc00000, 0x7f800001, 0xffc01234, 0x7f800000, 0xff800000];
    specials.forEach((b, k) => { bits[k * 500 + Math.floor(random() * 500)] = b; });
    const xb = kernels.upload(x);
    await kernels.run('infrastructure::clamp_inplace', { x: xb, p: { n, lo, hi } });
    const got = await read(xb);
    let bad = -1;
    for (let i = 0; i < n && bad < 0; i++) {
      const pass = Number.isNaN(x[i]) ? Number.isNaN(got[i]) : got[i] === Math.min(Math.max(x[i], lo), hi);
      if (!pass) bad = i;
    }
    result(bad < 0, 'infrastructure::clamp_inplace', bad < 0
      ? `${n} values with ${specials.length} NaN and ±Inf: exact, NaN kept`
      : `at ${bad}: ${x[bad]} (bits 0x${bits[bad].toString(16)}) became ${got[bad]}`);
  }

  // A reduction, in both variants (subgroups where the device has them, and the tree).
  for (const [label, ks] of [['', kernels], [' without subgroups', new Kernels(device, manifest, { subgroups: false })]]) {
    const n = 3 * 4096 + 100;
    const x = uniform(n);
    const out = poisoned(4);
    const chosen = ks.variant('infrastructure::reduce_sum').file;
    await ks.run('infrastructure::reduce_sum', { x: kernels.upload(x), out, n });
    const want = new Float64Array(4);
    for (let i = 0; i < n; i++) want[Math.floor(i / 4096)] += x[i];
    compare(`infrastructure::reduce_sum${label}`, await read(out), want, 1e-5, `${chosen}, ${n} values into 4 partials; `);
  }

  // Matmul: Y = X·W, sizes off the tiles.
  {
    const [m, n, k] = [70, 90, 33];
    const x = uniform(m * k), w = uniform(k * n);
    const y = poisoned(m * n);
    await kernels.run('linear::matmul', { x: kernels.upload(x), w: kernels.upload(w), y, p: { m, n, k } });
    const want = new Float64Array(m * n);
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
      let s = 0;
      for (let t = 0; t < k; t++) s += x[i * k + t] * w[t * n + j];
      want[i * n + j] = s;
    }
    compare('linear::matmul', await read(y), want, 1e-5, `${m}×${k} · ${k}×${n}; `);
  }

  // The split weight gradient: parts (matmul_at_split), then Y += Σ parts (matmul_parts_add).
  {
    const [m, k, n, parts, chunk] = [100, 20, 30, 3, 34];
    const x = uniform(m * k), b = uniform(m * n), y0 = uniform(k * n);
    const pb = poisoned(parts * k * n), yb = kernels.upload(y0);
    await kernels.run('linear::matmul_at_split', { x: kernels.upload(x), b: kernels.upload(b), parts: pb, p: { m, n, k, parts, chunk } });
    await kernels.run('linear::matmul_parts_add', { parts: pb, y: yb, p: { len: k * n, parts } });
    const wantParts = new Float64Array(parts * k * n);
    for (let r = 0; r < m; r++) {
      const s = Math.floor(r / chunk);
      for (let i = 0; i < k; i++) for (let j = 0; j < n; j++) wantParts[(s * k + i) * n + j] += x[r * k + i] * b[r * n + j];
    }
    const want = Float64Array.from(y0, (v, i) => { let s = v; for (let p = 0; p < parts; p++) s += wantParts[p * k * n + i]; return s; });
    compare('linear::matmul_at_split', await read(pb), wantParts, 1e-5, `${parts} parts of ${chunk} rows; `);
    compare('linear::matmul_parts_add', await read(yb), want, 1e-5, 'Y += Xᵀ·B; ');
  }

  // RMSNorm forward.
  {
    const [rows, d, eps] = [5, 300, 1e-5];
    const x = uniform(rows * d, -2, 2), gamma = uniform(d, 0.5, 1.5);
    const y = poisoned(rows * d), rrms = poisoned(rows);
    await kernels.run('norm::rmsnorm_forward', { x: kernels.upload(x), gamma: kernels.upload(gamma), y, rrms, p: { rows, d, eps } });
    const wantY = new Float64Array(rows * d), wantR = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      let ss = 0;
      for (let j = 0; j < d; j++) ss += x[r * d + j] ** 2;
      wantR[r] = 1 / Math.sqrt(ss / d + eps);
      for (let j = 0; j < d; j++) wantY[r * d + j] = x[r * d + j] * wantR[r] * gamma[j];
    }
    const a = compare('norm::rmsnorm_forward y', await read(y), wantY, 2e-5, `${rows}×${d}; `);
    const b = compare('norm::rmsnorm_forward rrms', await read(rrms), wantR, 2e-5);
    if (a && b) add('pass', 'js-export norm::rmsnorm_forward', 'y and rrms');
  }

  // Cross-entropy with smoothing and z-loss, one row ignored (target ≥ v).
  {
    const [rows, v, smoothing, zLoss, gradScale] = [6, 500, 0.1, 1e-4, 0.2];
    const logits = uniform(rows * v, -4, 4);
    const targets = integers(rows, v);
    targets[3] = v + 7;
    const lb = kernels.upload(logits), losses = poisoned(rows);
    await kernels.run('loss::cross_entropy', {
      logits: lb, targets: kernels.upload(targets), losses,
      p: { rows, v, smoothing, z_loss: zLoss, grad_scale: gradScale },
    });
    const wantLoss = new Float64Array(rows), wantGrad = new Float64Array(rows * v);
    for (let r = 0; r < rows; r++) {
      const t = targets[r];
      if (t >= v) continue;
      const l = Array.from(logits.subarray(r * v, (r + 1) * v));
      const mx = Math.max(...l);
      const sum = l.reduce((s, z) => s + Math.exp(z - mx), 0);
      const lse = mx + Math.log(sum);
      const total = l.reduce((s, z) => s + z, 0);
      wantLoss[r] = lse - (1 - smoothing) * l[t] - (smoothing / v) * total + zLoss * lse * lse;
      for (let j = 0; j < v; j++) {
        const p = Math.exp(l[j] - lse);
        wantGrad[r * v + j] = gradScale * ((1 + 2 * zLoss * lse) * p - (j === t ? 1 - smoothing : 0) - smoothing / v);
      }
    }
    const a = compare('loss::cross_entropy losses', await read(losses), wantLoss, 2e-5, `${rows} rows of ${v}, one ignored; `);
    const b = compare('loss::cross_entropy dlogits', await read(lb), wantGrad, 2e-5);
    if (a && b) add('pass', 'js-export loss::cross_entropy', 'losses and dlogits');
  }

  // RoPE on the queries, in place.
  {
    const [batch, seq, heads, headDim, posOffset, base] = [2, 5, 3, 8, 3, 10000];
    const n = batch * seq * heads * headDim;
    const q = uniform(n);
    const qb = kernels.upload(q);
    await kernels.run('rope::rope_q', { q: qb, p: { batch, seq, heads, head_dim: headDim, pos_offset: posOffset, base } });
    const want = new Float64Array(n);
    for (let row = 0; row < batch * seq * heads; row++) {
      const s = Math.floor(row / heads) % seq;
      for (let i = 0; i < headDim / 2; i++) {
        const theta = (s + posOffset) * base ** (-(2 * i) / headDim);
        const a = row * headDim + 2 * i;
        want[a] = q[a] * Math.cos(theta) - q[a + 1] * Math.sin(theta);
        want[a + 1] = q[a] * Math.sin(theta) + q[a + 1] * Math.cos(theta);
      }
    }
    // WGSL promises sin and cos only to 2⁻¹¹ absolute on [−π, π] (SwiftShader's are that
    // coarse): with |x| ≤ 1 each output may be off by 2·2⁻¹¹ ≈ 1e-3.
    compare('rope::rope_q', await read(qb), want, SINCOS_TOL, `[${batch}, ${seq}, ${heads}, ${headDim}]; `);
  }

  // Embedding lookup, one id past the vocabulary (a zero row).
  {
    const [rows, dim, vocab] = [9, 70, 11];
    const table = uniform(vocab * dim), ids = integers(rows, vocab);
    ids[4] = vocab + 2;
    const out = poisoned(rows * dim);
    await kernels.run('embedding::embed_lookup', { ids: kernels.upload(ids), table: kernels.upload(table), out, p: { rows, dim, vocab } });
    const want = new Float64Array(rows * dim);
    for (let r = 0; r < rows; r++) for (let c = 0; c < dim; c++) want[r * dim + c] = ids[r] < vocab ? table[ids[r] * dim + c] : 0;
    compare('embedding::embed_lookup', await read(out), want, 0, `${rows} rows of ${dim}; `);
  }

  // AdamW, one gradient NaN (that element keeps its state; every gradient is zeroed).
  {
    const n = 3000;
    const h = { n, lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.1, bias1: 1 - 0.9 ** 3, bias2: 1 - 0.999 ** 3 };
    const p = uniform(n), g = uniform(n), m = uniform(n, -0.1, 0.1), v = uniform(n, 0, 0.01);
    g[17] = NaN;
    const clip = 0.7;
    const [pb, gb, mb, vb] = [p, g, m, v].map(a => kernels.upload(a));
    await kernels.run('optimizer::adamw_update', { p: pb, g: gb, m: mb, v: vb, stats: kernels.upload(new Float32Array([1, clip, 1, 0])), h });
    const [wp, wm, wv] = [Float64Array.from(p), Float64Array.from(m), Float64Array.from(v)];
    for (let i = 0; i < n; i++) {
      if (!Number.isFinite(g[i])) continue;
      const gc = g[i] * clip;
      wm[i] = h.beta1 * m[i] + (1 - h.beta1) * gc;
      wv[i] = h.beta2 * v[i] + (1 - h.beta2) * gc * gc;
      wp[i] = p[i] - h.lr * ((wm[i] / h.bias1) / (Math.sqrt(wv[i] / h.bias2) + h.eps) + h.weight_decay * p[i]);
    }
    const checks = [
      compare('optimizer::adamw_update p', await read(pb), wp, 1e-5, `${n} values, one NaN gradient; `),
      compare('optimizer::adamw_update m', await read(mb), wm, 1e-5),
      compare('optimizer::adamw_update v', await read(vb), wv, 1e-5),
      compare('optimizer::adamw_update g', await read(gb), new Float64Array(n), 0),
    ];
    if (checks.every(Boolean)) add('pass', 'js-export optimizer::adamw_update', 'p, m, v and g');
  }

  // Attention forward with Dh = 48, S = 64: the grid B·H·⌈S / min(32, ⌊1024/48⌋)⌉ = 16
  // workgroups with integer division (JavaScript's `/` would give 12 and skip a head).
  {
    const [batch, seq, heads, kvHeads, headDim] = [1, 64, 4, 2, 48];
    const scale = 1 / Math.sqrt(headDim);
    const q = uniform(batch * seq * heads * headDim), k = uniform(batch * seq * kvHeads * headDim), v = uniform(batch * seq * kvHeads * headDim);
    const o = poisoned(batch * seq * heads * headDim), lse = poisoned(batch * heads * seq);
    const plan = await kernels.run('attention::attention_forward', {
      q: kernels.upload(q), k: kernels.upload(k), v: kernels.upload(v), o, lse,
      p: { batch, seq, heads, kv_heads: kvHeads, head_dim: headDim, scale },
    });
    const naive = batch * heads * Math.ceil(seq / Math.min(32, 1024 / headDim));
    result(plan.workgroups.join('×') === '16×1×1' && naive === 12, 'attention::attention_forward grid',
      `${plan.workgroups.join('×')} workgroups from the manifest's tree (floating-point division would give ${naive})`);
    const wantO = new Float64Array(o.size / 4), wantL = new Float64Array(lse.size / 4);
    const group = heads / kvHeads;
    for (let b = 0; b < batch; b++) for (let h = 0; h < heads; h++) for (let s = 0; s < seq; s++) {
      const kvh = Math.floor(h / group);
      const qo = ((b * seq + s) * heads + h) * headDim;
      const scores = [];
      for (let j = 0; j <= s; j++) {
        const ko = ((b * seq + j) * kvHeads + kvh) * headDim;
        let dot = 0;
        for (let d = 0; d < headDim; d++) dot += q[qo + d] * k[ko + d];
        scores.push(scale * dot);
      }
      const mx = Math.max(...scores);
      const sum = scores.reduce((a, z) => a + Math.exp(z - mx), 0);
      wantL[(b * heads + h) * seq + s] = mx + Math.log(sum);
      for (let j = 0; j <= s; j++) {
        const w = Math.exp(scores[j] - mx) / sum, vo = ((b * seq + j) * kvHeads + kvh) * headDim;
        for (let d = 0; d < headDim; d++) wantO[qo + d] += w * v[vo + d];
      }
    }
    const a = compare('attention::attention_forward o', await read(o), wantO, 2e-5, `B=${batch} S=${seq} H=${heads} Hkv=${kvHeads} Dh=${headDim}; `);
    const b = compare('attention::attention_forward lse', await read(lse), wantL, 2e-5);
    if (a && b) add('pass', 'js-export attention::attention_forward', 'o and lse');
  }

  // Past the 2-D split: a limit of 4 workgroups per dimension makes small grids two-dimensional.
  {
    const small = new Kernels(device, manifest, { maxWorkgroupsPerDimension: 4 });
    await small.build(['activation::swiglu_combine', 'rope::rope_k', 'loss::cross_entropy']);
    // Element-wise: 8 workgroups of 2048 → 4×2.
    const n = 7 * 2048 + 5;
    const gate = uniform(n, -3, 3), up = uniform(n);
    const out = poisoned(n);
    const plan = await small.run('activation::swiglu_combine', { gate: kernels.upload(gate), up: kernels.upload(up), out, p: { n } });
    const want = Float64Array.from(gate, (g, i) => (g / (1 + Math.exp(-g))) * up[i]);
    const twoD = plan.workgroups[1] > 1;
    compare('activation::swiglu_combine 2-D', await read(out), want, 1e-5, `grid ${plan.workgroups.join('×')} (limit 4); `);
    result(twoD && plan.workgroups.join('×') === '4×2×1', 'activation::swiglu_combine 2-D grid', `${plan.workgroups.join('×')}, dispatch_1d(8, 4)`);
    // threads(n): RoPE on the keys over 2·1000·1·4/2 = 4000 pairs = 16 workgroups → 4×4.
    const [batch, seq, kvHeads, headDim] = [2, 1000, 1, 4];
    const kk = uniform(batch * seq * kvHeads * headDim);
    const kb = kernels.upload(kk);
    const rplan = await small.run('rope::rope_k', { k: kb, p: { batch, seq, kv_heads: kvHeads, head_dim: headDim, pos_offset: 0, base: 10000 } });
    const wantK = new Float64Array(kk.length);
    for (let row = 0; row < batch * seq * kvHeads; row++) {
      const s = Math.floor(row / kvHeads) % seq;
      for (let i = 0; i < headDim / 2; i++) {
        const theta = s * 10000 ** (-(2 * i) / headDim);
        const a = row * headDim + 2 * i;
        wantK[a] = kk[a] * Math.cos(theta) - kk[a + 1] * Math.sin(theta);
        wantK[a + 1] = kk[a] * Math.sin(theta) + kk[a + 1] * Math.cos(theta);
      }
    }
    // Angles up to 1000 rad: the kernel's f32 angle is good to about 1e-7·θ = 1e-4, on top of
    // sin and cos to 2⁻¹¹.
    compare('rope::rope_k 2-D', await read(kb), wantK, SINCOS_TOL + 2e-4, `grid ${rplan.workgroups.join('×')}; `);
    result(rplan.workgroups.join('×') === '4×4×1', 'rope::rope_k 2-D grid', `${rplan.workgroups.join('×')} for threads(4000)`);
    // One workgroup per row: 7 rows → 4×2, one idle workgroup.
    const [rows, v] = [7, 40];
    const logits = uniform(rows * v, -2, 2), targets = integers(rows, v);
    const lb = kernels.upload(logits), losses = poisoned(rows);
    const cplan = await small.run('loss::cross_entropy', { logits: lb, targets: kernels.upload(targets), losses, p: { rows, v, smoothing: 0, z_loss: 0, grad_scale: 1 } });
    const wantLoss = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const l = Array.from(logits.subarray(r * v, (r + 1) * v));
      const mx = Math.max(...l);
      wantLoss[r] = mx + Math.log(l.reduce((s, z) => s + Math.exp(z - mx), 0)) - l[targets[r]];
    }
    compare('loss::cross_entropy 2-D', await read(losses), wantLoss, 2e-5, `grid ${cplan.workgroups.join('×')}; `);
  }

  // A kernel without `@grid` takes its grid from the caller: fill_const's entry under another
  // name with a `caller` grid, dispatched with { workgroups }, [x, y, z] and { threads }.
  {
    const entry = structuredClone(manifest.kernels.find(k => k.qualified_name === 'infrastructure::fill_const'));
    entry.qualified_name = 'test::fill_const_by_caller';
    entry.grid = { kind: 'caller', text: null };
    const custom = new Kernels(device, { ...manifest, kernels: [entry] });
    const n = 3 * 2048 + 11;
    let all = true;
    for (const [grid, workgroups] of [[{ workgroups: 4 }, '4×1×1'], [[2, 2, 1], '2×2×1'], [{ threads: 4 * 256 }, '4×1×1']]) {
      const x = poisoned(n);
      const plan = await custom.run('test::fill_const_by_caller', { x, p: { n, value: 2.5 } }, { grid });
      const got = await read(x);
      all &&= plan.workgroups.join('×') === workgroups && got.every(v => v === 2.5);
    }
    let refused = false;
    try { custom.check('test::fill_const_by_caller', { x: poisoned(4), p: { n: 4, value: 1 } }); } catch (e) { refused = e.message.includes('pass options.grid'); }
    result(all && refused, 'a caller-chosen grid', `${n} values filled with each grid form; a call without a grid is refused`);
  }

  // Misuse is refused with the Rust functions' messages, before anything is dispatched.
  {
    const x = kernels.upload(uniform(10)), y = kernels.upload(uniform(10));
    const expectError = (check, call, text) => {
      try {
        call();
        result(false, `refuses ${check}`, 'no error');
      } catch (e) {
        result(e instanceof KernelError && e.message.includes(text), `refuses ${check}`, e.message);
      }
    };
    const sumArgs = out => ({ losses: x, targets: kernels.upload(new Uint32Array(10)), out, p: { n: 10, v: 5 } });
    expectError('a short constant length', () => kernels.check('loss::sum_losses', sumArgs(kernels.upload(new Float32Array(1)))),
      'kernel `loss::sum_losses`: `len(out) >= 2` does not hold (len(out) = 1, 2 = 2)');
    expectError('an explicit length', () => kernels.check('infrastructure::axpy', { x, y: { buffer: y, length: 9 }, p: { n: 10, alpha: 1 } }),
      '`len(y) >= p.n` does not hold (len(y) = 9, p.n = 10)');
    expectError('aliasing', () => kernels.check('infrastructure::axpy', { x, y: x, p: { n: 10, alpha: 1 } }),
      'the same buffer is bound to `x` and `y`, and one of them is writable');
    expectError('a missing binding', () => kernels.check('infrastructure::axpy', { x, p: { n: 10, alpha: 1 } }), 'binding `y`');
    expectError('an unknown binding', () => kernels.check('infrastructure::axpy', { x, y, z: y, p: { n: 10, alpha: 1 } }), 'has no binding `z`');
    expectError('a negative u32', () => kernels.check('infrastructure::axpy', { x, y, p: { n: -1, alpha: 1 } }), '`p.n` must be a u32');
    expectError('a missing field', () => kernels.check('infrastructure::axpy', { x, y, p: { n: 10 } }), '`p.alpha` (f32) is missing');
    expectError('an odd head size', () => kernels.check('rope::rope_q', { q: x, p: { batch: 1, seq: 1, heads: 1, head_dim: 3, pos_offset: 0, base: 1 } }),
      '`p.head_dim % 2 == 0` does not hold (p.head_dim % 2 = 1, 0 = 0)');
    expectError('an unknown kernel', () => kernels.check('axpy', {}), 'did you mean `infrastructure::axpy`');
    expectError('a grid past max²', () => new Kernels(device, manifest, { maxWorkgroupsPerDimension: 1 }).check('infrastructure::fill_zero', { x: kernels.upload(new Float32Array(2 * 2048 + 1)), n: 2 * 2048 + 1 }),
      'grid of 3 workgroups (more than 1² even in two dimensions) is over the device\'s limit of 1 workgroups per dimension');
    // A zero-sized grid dispatches nothing and is no error.
    const plan = await kernels.run('infrastructure::fill_zero', { x, n: 0 });
    result(plan.workgroups.join('×') === '0×1×1', 'an empty grid', `${plan.workgroups.join('×')}: nothing dispatched`);
  }

  // The evaluator and the 1-D grid against the Rust reference (semantics.json, written by the
  // test from kernels_codegen's Expr::eval and the runtime's dispatch_1d).
  const sem = await fetch('semantics.json').catch(() => null);
  if (sem && sem.ok) {
    const cases = await sem.json();
    let bad = [];
    for (const c of cases.expressions) {
      const env = { len: b => BigInt(c.lengths[b]), uniform: (b, path) => BigInt(c.uniforms[[b, ...path].join('.')]) };
      const got = evaluate(c.expr, env);
      const want = c.value === null ? null : BigInt(c.value);
      if (got !== want) bad.push(`${JSON.stringify(c.expr)} = ${got} (Rust: ${want})`);
    }
    for (const [n, max, want] of cases.dispatch_1d) {
      const got = dispatch1d(BigInt(n), max);
      if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(`dispatch1d(${n}, ${max}) = ${JSON.stringify(got)} (Rust: ${JSON.stringify(want)})`);
    }
    result(bad.length === 0, 'semantics', `${cases.expressions.length} expressions and ${cases.dispatch_1d.length} grids as the Rust code evaluates them${bad.length ? `; differ: ${bad.slice(0, 5).join('; ')}` : ''}`);
  } else {
    add('info', 'js-export semantics', 'no semantics.json served here: skipped');
  }

  result(lost.length === 0, 'device errors', lost.length ? lost.join('; ') : 'none');
  device.destroy();
  return ok;
}

/** Runs README's JavaScript example (readme.js, written by the test from README.md). */
export async function readmeSnippet(add) {
  const served = await fetch('readme.js').then(r => r.ok, () => false);
  if (!served) { add('info', 'readme-snippet', 'no readme.js served here: skipped'); return true; }
  const module = await import('./readme.js');
  const values = Array.from(module.result);
  add('pass', 'readme-snippet', `result ${JSON.stringify(values)}`);
  return true;
}
