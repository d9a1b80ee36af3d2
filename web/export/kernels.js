// kernels.js: runs the exported kernels on a WebGPU device from plain JavaScript.
//
// `cargo run --example export_web -- DIR` writes this file into DIR beside manifest.json (what
// every kernel needs, as data: manifest.schema.json documents each field) and the kernels'
// browser WGSL. This module reads only those files: given a GPUDevice and the manifest it picks
// each kernel's variant, builds pipelines, packs uniforms from plain objects, checks a call
// exactly as the generated Rust function does (the `@requires` checks, the grid, buffer sizes,
// limits, aliasing) and dispatches it.
//
//   import { fetchManifest, deviceDescriptor, Kernels } from './export/kernels.js';
//   const manifest = await fetchManifest();
//   const adapter = await navigator.gpu.requestAdapter();
//   const device = await adapter.requestDevice(deviceDescriptor(adapter, manifest));
//   const kernels = new Kernels(device, manifest);
//   await kernels.run('infrastructure::axpy', { x, y, p: { n, alpha } });  // x, y: GPUBuffers
//
// Every misuse throws a KernelError naming the kernel and what is wrong; nothing is dispatched
// then.

/** The manifest `format` this module reads. */
export const FORMAT = 'kernels-web-export';
/** The manifest `format_version` this module reads. */
export const FORMAT_VERSION = 2;

/** A call that cannot be made, or a kernel that cannot run on this device. */
export class KernelError extends Error {
  constructor(kernel, message) {
    super(kernel ? `kernel \`${kernel}\`: ${message}` : message);
    this.name = 'KernelError';
    this.kernel = kernel;
  }
}

const I128_MIN = -(1n << 127n);
const I128_MAX = (1n << 127n) - 1n;

/**
 * Evaluates an expression tree of the manifest (`grid.count`, `grid.dims[i]`,
 * `requires[i].left` / `.right`) to a BigInt, with the integer semantics of the Rust checks:
 * `div` and `rem` truncate toward zero and fail on a zero divisor, `ceil_div(a, b)` fails unless
 * a ≥ 0 and b > 0, and a result outside the 128-bit range fails (Rust's checked i128). A
 * failure anywhere is `null` for the whole expression. `env.len(name)` and
 * `env.uniform(name, path)` give the leaves as BigInts.
 */
export function evaluate(expr, env) {
  if ('int' in expr) return BigInt(expr.int);
  if ('len' in expr) return env.len(expr.len);
  if ('uniform' in expr) return env.uniform(expr.uniform, expr.path);
  const a = evaluate(expr.args[0], env);
  const b = evaluate(expr.args[1], env);
  if (a === null || b === null) return null;
  let v;
  switch (expr.op) {
    case 'add': v = a + b; break;
    case 'sub': v = a - b; break;
    case 'mul': v = a * b; break;
    case 'div': if (b === 0n) return null; v = a / b; break;
    case 'rem': if (b === 0n || (a === I128_MIN && b === -1n)) return null; v = a % b; break;
    case 'ceil_div': if (a < 0n || b <= 0n) return null; v = a / b + (a % b === 0n ? 0n : 1n); break;
    case 'min': v = a < b ? a : b; break;
    case 'max': v = a > b ? a : b; break;
    default: throw new KernelError(null, `unknown operation \`${expr.op}\` in the manifest`);
  }
  return v < I128_MIN || v > I128_MAX ? null : v;
}

const COMPARE = {
  '>=': (a, b) => a >= b, '>': (a, b) => a > b, '<=': (a, b) => a <= b,
  '<': (a, b) => a < b, '==': (a, b) => a === b, '!=': (a, b) => a !== b,
};

/**
 * The dispatch for `n` workgroups (a BigInt ≥ 0) on a device with `max` workgroups per
 * dimension: `[n, 1, 1]` up to `max`, past it `[⌈n/y⌉, y, 1]` with `y = ⌈n/max⌉` (kernels
 * recover a linear index as `wid.x + wid.y · num_workgroups.x` and skip indices ≥ n); `null`
 * past max² — the Rust runtime's `dispatch_1d`.
 */
export function dispatch1d(n, max) {
  const m = BigInt(max);
  if (n <= m) return [Number(n), 1, 1];
  const y = (n + m - 1n) / m;
  if (y > m) return null;
  const x = (n + y - 1n) / y;
  return [Number(x), Number(y), 1];
}

/** Fetches manifest.json from `base` (by default the directory this module was loaded from). */
export async function fetchManifest(base = new URL('.', import.meta.url)) {
  const url = new URL('manifest.json', base);
  const response = await fetch(url);
  if (!response.ok) throw new KernelError(null, `cannot fetch ${url}: HTTP ${response.status}`);
  return response.json();
}

// Limits whose need depends on the data, not on any kernel: asked for at the adapter's maximum.
const DATA_LIMITS = ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupsPerDimension'];

// WebGPU's default limits (every device has at least these): a need within them is not asked for.
const DEFAULT_LIMITS = {
  maxComputeWorkgroupStorageSize: 16384, maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupSizeX: 256, maxComputeWorkgroupSizeY: 256, maxComputeWorkgroupSizeZ: 64,
  maxStorageBuffersPerShaderStage: 8, maxUniformBuffersPerShaderStage: 12,
  maxUniformBufferBindingSize: 65536, maxBindingsPerBindGroup: 1000, maxBindGroups: 4,
};

/**
 * What to pass to `adapter.requestDevice`: the optional features the kernels' variants use
 * that the adapter has (`subgroups`, `shader-f16`), and for every limit a kernel variant needs
 * beyond WebGPU's default (manifest `variants[].limits`) the largest need, capped at what the
 * adapter offers, plus the adapter's maximum of the limits that grow with the data. A kernel
 * whose needs the device still lacks is reported by `variant`, `build` and `run`.
 */
export function deviceDescriptor(adapter, manifest) {
  checkFormat(manifest);
  const features = new Set();
  const limits = {};
  for (const k of manifest.kernels) {
    for (const v of k.variants) {
      for (const f of v.features) features.add(f);
      for (const [key, need] of Object.entries(v.limits)) limits[key] = Math.max(limits[key] ?? 0, need);
    }
  }
  const requiredLimits = {};
  for (const [key, need] of Object.entries(limits)) {
    if (key in adapter.limits && need > (DEFAULT_LIMITS[key] ?? 0)) requiredLimits[key] = Math.min(need, adapter.limits[key]);
  }
  for (const key of DATA_LIMITS) if (key in adapter.limits) requiredLimits[key] = adapter.limits[key];
  const requiredFeatures = [...features].filter(f => adapter.features.has(f));
  return { requiredFeatures, requiredLimits };
}

function checkFormat(manifest) {
  if (!manifest || manifest.format !== FORMAT || manifest.format_version !== FORMAT_VERSION) {
    throw new KernelError(null, `this kernels.js reads manifests of format ${FORMAT} version ${FORMAT_VERSION}, ` +
      `not ${manifest && manifest.format} version ${manifest && manifest.format_version}: export the kernels and this module together`);
  }
}

const SCALAR_SIZE = { f32: 4, u32: 4, i32: 4, f16: 2 };
const INT_RANGE = { u32: [0n, 0xffffffffn], i32: [-0x80000000n, 0x7fffffffn] };

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** The bits of the f16 nearest to `v` (rounded to f32 first, then to nearest even). */
export function f16Bits(v) {
  f32Scratch[0] = v;
  const x = u32Scratch[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rest = mant & ((1 << shift) - 1), half = 1 << (shift - 1);
    if (rest > half || (rest === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return sign | h;
}

/** Writes `value` at `offset` by `layout` (manifest layouts); `where` names it in errors. */
function writeValue(view, offset, layout, value, where, fail) {
  switch (layout.kind) {
    case 'scalar': {
      const s = layout.scalar;
      if (s === 'u32' || s === 'i32') {
        const [lo, hi] = INT_RANGE[s];
        const ok = typeof value === 'bigint' || (typeof value === 'number' && Number.isInteger(value));
        if (!ok || BigInt(value) < lo || BigInt(value) > hi) {
          fail(`\`${where}\` must be a ${s} (an integer from ${lo} to ${hi}), not ${describe(value)}`);
        }
        if (s === 'u32') view.setUint32(offset, Number(value), true);
        else view.setInt32(offset, Number(value), true);
      } else {
        if (typeof value !== 'number') fail(`\`${where}\` must be a number (${s}), not ${describe(value)}`);
        if (s === 'f32') view.setFloat32(offset, value, true);
        else view.setUint16(offset, f16Bits(value), true);
      }
      return;
    }
    case 'vector':
    case 'array': {
      const count = layout.count;
      const step = layout.kind === 'vector' ? SCALAR_SIZE[layout.scalar] : layout.stride;
      const element = layout.kind === 'vector' ? { kind: 'scalar', scalar: layout.scalar } : layout.element;
      if (!isList(value) || value.length !== count) {
        fail(`\`${where}\` must be an array of ${count} values, not ${describe(value)}`);
      }
      for (let i = 0; i < count; i++) writeValue(view, offset + i * step, element, value[i], `${where}[${i}]`, fail);
      return;
    }
    case 'matrix': {
      const column = { kind: 'vector', scalar: layout.scalar, count: layout.rows };
      if (!isList(value) || value.length !== layout.columns) {
        fail(`\`${where}\` must be an array of ${layout.columns} columns of ${layout.rows} values, not ${describe(value)}`);
      }
      for (let c = 0; c < layout.columns; c++) {
        writeValue(view, offset + c * layout.column_stride, column, value[c], `${where}[${c}]`, fail);
      }
      return;
    }
    case 'struct': {
      if (value === null || typeof value !== 'object' || isList(value)) {
        fail(`\`${where}\` must be an object with the fields of \`${layout.name}\`, not ${describe(value)}`);
      }
      const fields = layout.fields.filter(f => !f.padding);
      const names = fields.map(f => f.name);
      for (const key of Object.keys(value)) {
        if (!names.includes(key)) fail(`\`${layout.name}\` has no field \`${key}\` (its fields: ${names.join(', ')})`);
      }
      for (const f of fields) {
        if (!(f.name in value)) fail(`\`${where}.${f.name}\` (${f.type}) is missing`);
        writeValue(view, offset + f.offset, f.layout, value[f.name], `${where}.${f.name}`, fail);
      }
      return;
    }
    default:
      fail(`unknown layout kind \`${layout.kind}\` in the manifest`);
  }
}

function isList(v) {
  return Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView));
}

function describe(v) {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `an array of ${v.length}`;
  if (v && typeof v === 'object') return 'an object';
  return String(v);
}

/** The integer at `path` (field names, vector components) in a uniform's value, as a BigInt. */
function readPath(value, path) {
  let v = value;
  for (const step of path) v = v[step];
  return BigInt(v);
}

function isBuffer(b) {
  return b !== null && typeof b === 'object' && typeof b.size === 'number' && typeof b.usage === 'number' &&
    typeof b.mapAsync === 'function';
}

function isTexture(t) {
  return t !== null && typeof t === 'object' && typeof t.createView === 'function' && typeof t.format === 'string';
}

function isTextureView(v) {
  return v !== null && typeof v === 'object' && typeof v.createView !== 'function' && typeof v.label === 'string' &&
    !isBuffer(v) && v.__proto__ && v.__proto__.constructor && v.__proto__.constructor.name === 'GPUTextureView';
}

function isSampler(s) {
  return s !== null && typeof s === 'object' && s.__proto__ && s.__proto__.constructor && s.__proto__.constructor.name === 'GPUSampler';
}

/** The bind group layout entry of a manifest binding. */
function layoutEntry(b) {
  const entry = { binding: b.binding, visibility: GPUShaderStage.COMPUTE };
  switch (b.kind) {
    case 'texture': entry.texture = b.texture; break;
    case 'storage_texture': entry.storageTexture = b.storage_texture; break;
    case 'sampler': entry.sampler = b.sampler; break;
    default: entry.buffer = { type: b.buffer_type, minBindingSize: b.offset + b.min_length * b.stride };
  }
  return entry;
}

const roundUp = (n, to) => Math.ceil(n / to) * to;

/** The kernels of a manifest on one device. */
export class Kernels {
  /**
   * `options`:
   * - `base`: the URL the manifest's `.wgsl` paths are relative to (default: the directory
   *   this module was loaded from, where export_web writes them);
   * - `source(file)`: an async function giving a variant's WGSL instead of fetching it;
   * - `maxWorkgroupsPerDimension`: a lower limit than the device's for the 1-D grids' 2-D
   *   split (like the Rust `GpuOptions::max_workgroups_per_dimension`; for tests);
   * - `subgroups: false` / `f16: false`: never choose variants that need that feature.
   */
  constructor(device, manifest, options = {}) {
    checkFormat(manifest);
    this.device = device;
    this.manifest = manifest;
    this.base = options.base ?? new URL('.', import.meta.url);
    this.source = options.source ?? (async file => {
      const url = new URL(file, this.base);
      const response = await fetch(url);
      if (!response.ok) throw new KernelError(null, `cannot fetch ${url}: HTTP ${response.status}`);
      return response.text();
    });
    const deviceMax = device.limits.maxComputeWorkgroupsPerDimension;
    const max = options.maxWorkgroupsPerDimension ?? deviceMax;
    if (!Number.isInteger(max) || max < 1 || max > deviceMax) {
      throw new KernelError(null, `maxWorkgroupsPerDimension must be an integer from 1 to the device's ${deviceMax}, not ${max}`);
    }
    this.maxWorkgroupsPerDimension = max;
    this.disabled = new Set([options.subgroups === false && 'subgroups', options.f16 === false && 'shader-f16'].filter(Boolean));
    this.kernels = new Map(manifest.kernels.map(k => [k.qualified_name, k]));
    this.pipelines = new Map();
    this.ready = new Map();
  }

  /** The manifest entry of kernel `name` (`module::kernel`). */
  kernel(name) {
    const k = this.kernels.get(name);
    if (!k) {
      const near = [...this.kernels.keys()].filter(q => q.endsWith(`::${name}`));
      throw new KernelError(null, `no kernel \`${name}\` in the manifest${near.length ? ` (did you mean ${near.map(n => `\`${n}\``).join(' or ')}?)` : ''}`);
    }
    return k;
  }

  /** The module constants of a kernel file (`norm`, `optimizer`, …) by name, as numbers. */
  constants(module) {
    const file = this.manifest.files.find(f => f.module === module);
    if (!file) throw new KernelError(null, `no module \`${module}\` in the manifest`);
    return Object.fromEntries(Object.entries(file.constants).map(([n, c]) => [n, c.value]));
  }

  /** The browser variant this device runs for kernel `name` (the first it can), or throws why none. */
  variant(name) {
    const k = this.kernel(name);
    const reasons = [];
    for (const v of k.variants) {
      const missing = v.features.filter(f => !this.device.features.has(f) || this.disabled.has(f));
      if (missing.length) { reasons.push(`the \`${missing.join('`, `')}\` feature${missing.length > 1 ? 's' : ''}`); continue; }
      const short = Object.entries(v.limits).filter(([key, need]) => key in this.device.limits && this.device.limits[key] < need);
      if (short.length) { reasons.push(short.map(([key, need]) => `${key} ≥ ${need} (the device has ${this.device.limits[key]})`).join(', ')); continue; }
      return v;
    }
    if (!k.variants.length) {
      throw new KernelError(name, `has no browser variant (${k.native_only_variants.map(v => v.reason).join('; ')})`);
    }
    throw new KernelError(name, `needs ${[...new Set(reasons)].join(', or ')}, which this device lacks`);
  }

  /** Builds kernel `name`'s pipeline (once); resolves to `{ pipeline, layout, variant }`. */
  pipeline(name) {
    let p = this.pipelines.get(name);
    if (!p) {
      p = this.#build(name);
      this.pipelines.set(name, p);
      p.then(built => this.ready.set(name, built), () => {});
    }
    return p;
  }

  async #build(name) {
    const k = this.kernel(name);
    const variant = this.variant(name);
    const needed = k.overrides.filter(o => !o.has_default);
    if (needed.length) {
      throw new KernelError(name, `needs values for its override constants ${needed.map(o => o.name).join(', ')}, which kernels.js does not pass`);
    }
    if (k.immediate) throw new KernelError(name, `takes immediates (\`var<immediate> ${k.immediate.name}\`), which WebGPU does not have`);
    const code = await this.source(variant.file);
    const device = this.device;
    // No error scopes: builds run concurrently, and a scope would catch another build's errors.
    // A rejected pipeline says why (with the shader's compilation messages).
    const module = device.createShaderModule({ code, label: name });
    const layout = device.createBindGroupLayout({ label: name, entries: k.bindings.map(layoutEntry) });
    let pipeline;
    try {
      pipeline = await device.createComputePipelineAsync({
        label: name,
        layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: k.name },
      });
    } catch (e) {
      const info = await module.getCompilationInfo();
      const messages = info.messages.map(m => `${variant.file}:${m.lineNum}:${m.linePos}: ${m.message}`).join('; ');
      throw new KernelError(name, `cannot build its pipeline: ${e.message}${messages ? ` (${messages})` : ''}`);
    }
    return { pipeline, layout, variant };
  }

  /**
   * Builds the pipelines of `names` (default: every kernel) at once. Resolves to
   * `{ built: [names], unavailable: [{ name, error }] }`: a kernel this device cannot run is
   * listed with the reason, not thrown.
   */
  async build(names = [...this.kernels.keys()]) {
    const results = await Promise.allSettled(names.map(n => this.pipeline(n)));
    const built = [], unavailable = [];
    results.forEach((r, i) => (r.status === 'fulfilled' ? built.push(names[i]) : unavailable.push({ name: names[i], error: r.reason })));
    return { built, unavailable };
  }

  /**
   * Checks a call of kernel `name` as the Rust function does, without any GPU work, and
   * returns its plan: `{ workgroups: [x, y, z], lengths: { binding: elements }, ... }`.
   * `args` has one entry per binding, by name: a storage binding takes a GPUBuffer (its length
   * is `(size − offset) / stride` elements) or `{ buffer, length }` (binds the first `length`
   * elements); a uniform takes a plain value by its layout — an object for a struct, a number or
   * BigInt for an integer or float, an array for a vector or array; a texture or storage
   * texture takes a GPUTexture (viewed with the binding's dimension) or a GPUTextureView; a
   * sampler a GPUSampler. `options.grid` is the grid of a kernel whose manifest grid is
   * `caller`: `{ threads: n }`, `{ workgroups: n }` or `[x, y, z]`.
   */
  check(name, args, options = {}) {
    const k = this.kernel(name);
    const fail = message => { throw new KernelError(name, message); };
    if (args === null || typeof args !== 'object') fail('the arguments must be an object with one entry per binding');
    const names = k.bindings.map(b => b.name);
    for (const key of Object.keys(args)) {
      if (!names.includes(key)) fail(`has no binding \`${key}\` (its bindings: ${names.join(', ')})`);
    }
    const lengths = {}, entries = [], uniforms = [], resources = [];
    for (const b of k.bindings) {
      if (!(b.name in args)) fail(`binding \`${b.name}\` (${b.kind} \`${b.wgsl_type}\`) is missing`);
      const arg = args[b.name];
      if (b.kind === 'sampler') {
        if (!isSampler(arg)) fail(`binding \`${b.name}\` (\`${b.wgsl_type}\`) takes a GPUSampler, not ${describe(arg)}`);
        resources.push({ binding: b, resource: arg });
        continue;
      }
      if (b.kind === 'texture' || b.kind === 'storage_texture') {
        const dimension = (b.texture || b.storage_texture).viewDimension;
        let view = arg;
        if (isTexture(arg)) {
          if (b.kind === 'storage_texture' && arg.format !== b.storage_texture.format) {
            fail(`storage texture \`${b.name}\` is \`${b.wgsl_type}\`, not of format ${arg.format}`);
          }
          const usage = b.kind === 'texture' ? GPUTextureUsage.TEXTURE_BINDING : GPUTextureUsage.STORAGE_BINDING;
          if (!(arg.usage & usage)) {
            fail(`texture \`${b.name}\` was not created with GPUTextureUsage.${b.kind === 'texture' ? 'TEXTURE_BINDING' : 'STORAGE_BINDING'}`);
          }
          view = arg.createView({ dimension });
        } else if (!isTextureView(arg)) {
          fail(`binding \`${b.name}\` (\`${b.wgsl_type}\`) takes a GPUTexture or a GPUTextureView, not ${describe(arg)}`);
        }
        resources.push({ binding: b, resource: view, texture: isTexture(arg) ? arg : null });
        continue;
      }
      if (b.buffer_type === 'uniform') {
        const bytes = new ArrayBuffer(roundUp(Math.max(b.stride, 16), 16));
        writeValue(new DataView(bytes), 0, b.layout, arg, b.name, m => fail(`uniform \`${b.name}\`: ${m}`));
        uniforms.push({ binding: b, bytes, value: arg });
        continue;
      }
      const explicit = !isBuffer(arg) && arg !== null && typeof arg === 'object' && 'length' in arg;
      const buffer = isBuffer(arg) ? arg : arg && arg.buffer;
      if (!isBuffer(buffer)) fail(`binding \`${b.name}\` takes a GPUBuffer or { buffer, length }, not ${describe(arg)}`);
      if (!(buffer.usage & GPUBufferUsage.STORAGE)) fail(`buffer \`${b.name}\` was not created with GPUBufferUsage.STORAGE`);
      const fit = Math.max(0, Math.floor((buffer.size - b.offset) / b.stride));
      let length = fit;
      if (explicit) {
        length = arg.length;
        if (!Number.isInteger(length) || length < 0 || length > fit) {
          fail(`buffer \`${b.name}\`: length ${describe(length)} is not a whole number of elements from 0 to the ${fit} its ${buffer.size} bytes hold`);
        }
      }
      lengths[b.name] = length;
      const size = explicit ? Math.min(roundUp(b.offset + length * b.stride, 4), buffer.size) : buffer.size;
      entries.push({ binding: b, buffer, size });
    }

    // The `@requires` checks, in order: exactly the Rust function's.
    const env = {
      len: binding => BigInt(lengths[binding]),
      uniform: (binding, path) => readPath(args[binding], path),
    };
    const show = v => (v === null ? 'overflow or division by zero' : String(v));
    for (const r of k.requires) {
      const l = evaluate(r.left, env), rv = evaluate(r.right, env);
      if (l === null || rv === null || !COMPARE[r.cmp](l, rv)) {
        fail(`\`${r.text}\` does not hold (${r.left_text} = ${show(l)}, ${r.right_text} = ${show(rv)})`);
      }
    }

    // The grid's size, then the device's limits.
    const max = this.maxWorkgroupsPerDimension;
    const tooLarge = detail => fail(`grid ${detail} is over the device's limit of ${max} workgroups per dimension`);
    const count = expr => {
      const v = evaluate(expr, env);
      if (v === null || v < 0n) fail(`\`@grid ${k.grid.text}\` does not hold (the grid size is ${show(v)})`);
      return v;
    };
    let kind = k.grid.kind, size;
    if (kind === 'caller') {
      const g = options.grid;
      if (Array.isArray(g) && g.length === 3 && g.every(d => Number.isInteger(d) && d >= 0)) { kind = 'explicit'; size = g.map(BigInt); }
      else if (g && Number.isInteger(g.threads) && g.threads >= 0) { kind = 'threads'; size = BigInt(g.threads); }
      else if (g && Number.isInteger(g.workgroups) && g.workgroups >= 0) { kind = 'workgroups'; size = BigInt(g.workgroups); }
      else fail(`has no \`@grid\`: pass options.grid, { threads: n }, { workgroups: n } or [x, y, z], not ${describe(g)}`);
    } else if (kind === 'explicit') {
      size = k.grid.dims.map(count);
      for (const d of size) if (d > 0xffffffffn) fail(`grid \`${k.grid.text}\` = ${d} in one dimension is over the device's limit of ${0xffffffff} workgroups per dimension`);
    } else {
      size = count(k.grid.count);
    }

    const limits = this.device.limits;
    for (const u of uniforms) {
      if (u.binding.stride > limits.maxUniformBufferBindingSize) {
        fail(`buffer \`${u.binding.name}\` is ${u.binding.stride} bytes, over this device's limit of ${limits.maxUniformBufferBindingSize} bytes per uniform binding`);
      }
    }
    for (const e of entries) {
      const needed = e.binding.offset + e.binding.min_length * e.binding.stride;
      if (e.size < needed) fail(`buffer \`${e.binding.name}\` holds ${e.size} bytes but the binding needs at least ${needed}`);
      if (e.size > limits.maxStorageBufferBindingSize) {
        fail(`buffer \`${e.binding.name}\` is ${e.size} bytes, over this device's limit of ${limits.maxStorageBufferBindingSize} bytes per storage binding`);
      }
    }
    // One texture in two bindings only when neither is a storage binding that writes.
    for (let i = 0; i < resources.length; i++) {
      for (let j = i + 1; j < resources.length; j++) {
        const [a, b] = [resources[i], resources[j]];
        const writes = r => r.binding.kind === 'storage_texture' && r.binding.storage_texture.access !== 'read-only';
        if (a.texture && a.texture === b.texture && (writes(a) || writes(b))) {
          fail(`the same texture is bound to \`${a.binding.name}\` and \`${b.binding.name}\`, and one of them is writable`);
        }
      }
    }
    // One buffer in two bindings only when both only read it.
    for (let i = 0; i < entries.length; i++) {
      for (let j = i + 1; j < entries.length; j++) {
        const [a, b] = [entries[i], entries[j]];
        if (a.buffer === b.buffer && (a.binding.buffer_type === 'storage' || b.binding.buffer_type === 'storage')) {
          fail(`the same buffer is bound to \`${a.binding.name}\` and \`${b.binding.name}\`, and one of them is writable`);
        }
      }
    }

    let workgroups;
    if (kind === 'explicit') {
      if (size.some(d => d > BigInt(max))) tooLarge(size.join('×'));
      workgroups = size.map(Number);
    } else {
      // kernels.js builds pipelines without override values: a workgroup size an override
      // gives is its default.
      const tpw = BigInt(k.workgroup_size[0] * k.workgroup_size[1] * k.workgroup_size[2]);
      const n = kind === 'threads' ? (size + tpw - 1n) / tpw : size;
      workgroups = dispatch1d(n, max);
      if (!workgroups) {
        tooLarge(kind === 'threads'
          ? `of ${size} invocations (${n} workgroups, more than ${max}² even in two dimensions)`
          : `of ${size} workgroups (more than ${max}² even in two dimensions)`);
      }
    }
    return { kernel: k, workgroups, lengths, entries, uniforms, resources };
  }

  /**
   * Checks a call and records it into `pass` (a GPUComputePassEncoder) of the caller's
   * encoder; the pipeline must be built (`await kernels.build([name])`). Returns the plan.
   */
  encode(pass, name, args, options = {}) {
    const plan = this.check(name, args, options);
    const built = this.ready.get(name);
    if (!built) throw new KernelError(name, 'its pipeline is not built yet: `await kernels.build([name])` (or use `run`) first');
    const [x, y, z] = plan.workgroups;
    if (x === 0 || y === 0 || z === 0) return plan;
    const device = this.device;
    const entries = plan.entries.map(e => ({ binding: e.binding.binding, resource: { buffer: e.buffer, offset: 0, size: e.size } }));
    for (const u of plan.uniforms) {
      const buffer = device.createBuffer({ label: `${name} ${u.binding.name}`, size: u.bytes.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      device.queue.writeBuffer(buffer, 0, u.bytes);
      entries.push({ binding: u.binding.binding, resource: { buffer } });
    }
    for (const r of plan.resources) entries.push({ binding: r.binding.binding, resource: r.resource });
    const group = device.createBindGroup({ label: name, layout: built.layout, entries });
    pass.setPipeline(built.pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(x, y, z);
    return plan;
  }

  /** Checks and runs one call in a submission of its own; resolves to its plan. */
  async run(name, args, options = {}) {
    this.check(name, args, options); // misuse is reported before any pipeline is built
    await this.pipeline(name);
    const encoder = this.device.createCommandEncoder({ label: name });
    const pass = encoder.beginComputePass({ label: name });
    const plan = this.encode(pass, name, args, options);
    pass.end();
    this.device.queue.submit([encoder.finish()]);
    return plan;
  }

  /** A storage buffer holding `data` (a typed array), usable as a kernel argument and by `read`. */
  upload(data, usage = 0) {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const buffer = this.device.createBuffer({
      size: roundUp(Math.max(bytes.byteLength, 4), 4),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST | usage,
      mappedAtCreation: true,
    });
    new Uint8Array(buffer.getMappedRange()).set(bytes);
    buffer.unmap();
    return buffer;
  }

  /** A storage buffer of `length` elements of `Type` (a typed-array class), each set to `fill`. */
  buffer(Type, length, fill = 0) {
    return this.upload(new Type(length).fill(fill));
  }

  /** Reads a buffer back (after the work queued before): a new `Type` array over its bytes. */
  async read(buffer, Type = Float32Array) {
    const size = buffer.size;
    const staging = this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
    this.device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const copy = staging.getMappedRange().slice(0);
    staging.unmap();
    staging.destroy();
    return new Type(copy, 0, Math.floor(size / Type.BYTES_PER_ELEMENT));
  }
}
