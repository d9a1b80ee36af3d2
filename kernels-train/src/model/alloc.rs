//! Allocation: every buffer the model needs, sized once for batches of up to `batch` sequences.

use super::arena::{Pages, Placement};
use super::attention16::Attention16;
use super::products::{Deferral, Half, Kept, Plans, Prepared, Products, Transposed, rows_cols, scratch_bound};
use super::{Attention, B, Model, ModelOptions, Precision, StateRef, Tensors, fast_params};
use crate::Error;
use crate::config::ModelConfig;
use crate::optim::{Moments8, OptimizerKind};
use crate::params::fused::{self, Fused};
use crate::params::{self, ModelWeights};
use kernels::ops::{F16x4, f16x4_len};
use kernels::{Buffer, Gpu};

/// Activations one layer keeps for its backward pass.
/// In mixed precision every linear layer's input is kept only as its f16 copy ([`Kept::F16`]),
/// on the f32 split core the norms' and SwiGLU's outputs only as their halves ([`Kept::Split`]),
/// and the attention output in f32 (its backward reads it) and f16; on the f16 attention paths
/// Q, K and V too ([`Qkv::F16`]).
pub(super) struct Layer {
    pub x_in: B,
    /// The attention input (after RMSNorm).
    pub h1: Kept,
    pub rrms1: B,
    /// Q and K after RoPE, and V.
    pub qkv: Qkv,
    pub att: B,
    /// Mixed precision: `att`'s f16 copy, the output projection's input.
    pub att16: Option<Buffer<F16x4>>,
    pub lse: B,
    pub x_mid: B,
    /// The feed-forward input (after RMSNorm).
    pub h2: Kept,
    pub rrms2: B,
    /// The fused gate/up projection `h2·W13ᵀ` `[rows, 2F]`: each row's gate, then its up.
    pub gu: B,
    /// The SwiGLU output, W2's input.
    pub a: Kept,
    /// The fast path's probabilities (P, then dS in the backward); empty for the other paths.
    pub probs: Option<B>,
}

/// A layer's attention inputs: Q and K after RoPE, V, as its attention forward and backward
/// read them.
pub(super) enum Qkv {
    /// f32 `[rows, H·Dh]`, `[rows, Hkv·Dh]` (f32 precision, and mixed precision on the f32
    /// attention kernels); K and V of sequence 0 are also generation's cache.
    F32 { q: B, k: B, v: B },
    /// Mixed precision on the f16 attention paths (`attention16`): only the f16 copies (f16x4
    /// rows), which are all the f16 attention kernels read, written from the fused projection's
    /// f32 rows (`Scratch::qkv`) by `rope::rope_qkv_f16`. `cache_k` and `cache_v`
    /// (`[seq_len, Hkv·Dh]` f32) are generation's cache of sequence 0's keys and values, written
    /// only by generation's forwards (the f32 values the f32 layers would cache, so generation
    /// gives the same tokens).
    F16 { q: Buffer<F16x4>, k: Buffer<F16x4>, v: Buffer<F16x4>, cache_k: B, cache_v: B },
}

/// An f16 layer's Q, K, V.
pub(super) type Qkv16<'a> = (&'a Buffer<F16x4>, &'a Buffer<F16x4>, &'a Buffer<F16x4>);

impl Qkv {
    /// The f32 Q, K, V.
    pub fn f32(&self) -> Result<(&B, &B, &B), Error> {
        match self {
            Qkv::F32 { q, k, v } => Ok((q, k, v)),
            Qkv::F16 { .. } => Err(Error::Config("internal: f32 attention over a layer kept in f16".into())),
        }
    }

    /// The f16 Q, K, V.
    pub fn f16(&self) -> Result<Qkv16<'_>, Error> {
        match self {
            Qkv::F16 { q, k, v, .. } => Ok((q, k, v)),
            Qkv::F32 { .. } => Err(Error::Config("internal: f16 attention over a layer kept in f32".into())),
        }
    }
}

/// Everything the forward pass writes.
pub(super) struct Activations {
    pub layers: Vec<Layer>,
    /// The last layer's output.
    pub xf: B,
    /// The final norm's output (the head's input) and its reciprocal RMS.
    pub hf: Kept,
    pub rrms_f: B,
    /// Logits; after the loss, in f32 precision, their gradient (in place).
    pub logits: B,
    /// Mixed precision: the gradient of the logits times the loss scale, in f16 (f16x4 rows),
    /// which the loss writes (`loss::cross_entropy_f16`) and the head's backward reads; the
    /// logits stay as they are.
    pub dlogits16: Option<Buffer<F16x4>>,
    /// Per-row losses.
    pub losses: B,
}

/// Scratch for the backward pass.
pub(super) struct Scratch {
    pub dx: B,
    pub da: B,
    pub ma: B,
    pub mb: B,
    /// SwiGLU's fused gradient `[rows, 2F]` (d_gate, then d_up of each row), W13's output
    /// gradient: in mixed precision only its f16 copy (`backward_ffn::ffn_swiglu_backward_gu_f16`).
    pub dgu: Kept,
    pub datt: B,
    /// The fused attention projection `h1·Wqkvᵀ` `[rows, H·Dh + 2·Hkv·Dh]`, which RoPE splits into
    /// the layer's Q, K, V; in f32 precision the backward's fused gradient dqkv too (Wqkv's output
    /// gradient, which RoPE's backward gathers from dq, dk, dv).
    pub qkv: B,
    /// Attention's input gradients; on the f16 attention paths generation's f32 Q, K, V too (the
    /// new token's query, and the keys and values that go into the cache).
    pub dq: B,
    pub dk: B,
    pub dv: B,
    /// Mixed precision: the f16 output gradients that their producers write beside (dx, by
    /// the norms' backward) or instead of (dqkv, by RoPE's) the f32 values.
    pub dy16: Option<Dy16>,
    pub delta: B,
    /// RMSNorm backward's partial dγ sums `[⌈rows / NORM_BLOCK⌉, dim]` per norm.
    pub norms: NormPartials,
    /// The layers' split weight gradients' sums, one dispatch a layer, where the products split.
    pub layer_sums: Option<LayerSums>,
    /// The embedding backward's slices (`kernels::embed::Scratch`).
    pub embed: kernels::embed::Scratch,
    pub fast_delta: Option<B>,
    /// Mixed precision on the f16 attention paths: dO's f16 copy and (the fast path's) dP/dS
    /// workspace.
    pub att16: Option<Attention16>,
    /// The f32 split core: the norms' and SwiGLU's f32 output `[rows, max(dim, ffn)]`, split
    /// at once into the kept halves ([`Kept::write_f32`]).
    pub kept32: Option<B>,
}

/// Mixed precision where the products split weight gradients into parts: each layer's sums of
/// them in one dispatch (`products::Deferral`) into the layer's part of the gradient pages.
pub(super) struct LayerSums {
    pub deferral: Deferral,
    /// Per layer: the part of the gradient pages that spans its weight matrices, and each
    /// matrix's (fused index, start in that part).
    layers: Vec<(B, Vec<(usize, usize)>)>,
}

impl LayerSums {
    /// Where tensor `index` (fused order) of layer `l` starts in the layer's part, if it is one of
    /// its matrices.
    pub fn dst(&self, l: usize, index: usize) -> Option<usize> {
        self.layers.get(l)?.1.iter().find(|&&(i, _)| i == index).map(|&(_, dst)| dst)
    }

    /// Adds layer `l`'s waiting parts into its gradients.
    pub fn add(&mut self, b: &kernels::Batch<'_>, l: usize) -> Result<(), Error> {
        let (grads, _) =
            self.layers.get_mut(l).ok_or_else(|| Error::Config(format!("internal: no gradient span for layer {l}")))?;
        self.deferral.add(b, grads)
    }

    /// The sums when every layer's matrices lie in one page (and the products split any).
    fn new(
        gpu: &Gpu,
        plans: &Plans,
        rows: usize,
        layout: &Fused<crate::params::Param>,
        placement: &Placement,
        grad_pages: &[B],
    ) -> Result<Option<LayerSums>, Error> {
        let align = (gpu.storage_alignment() as usize).div_ceil(4);
        let Some(first) = layout.layers.first() else { return Ok(None) };
        let matrices = |l: &crate::params::fused::FusedLayer<crate::params::Param>| -> Vec<(usize, usize, usize)> {
            [&l.wqkv, &l.wo, &l.w13, &l.w2]
                .iter()
                .filter_map(|p| match p.shape[..] {
                    [out, inp] => Some((p.index, out, inp)),
                    _ => None,
                })
                .collect()
        };
        let shapes: Vec<(usize, usize)> = matrices(first).iter().map(|&(_, o, i)| (o, i)).collect();
        let len = plans.deferred_len(gpu, rows, &shapes, align)?;
        let r = gpu.report();
        if len == 0 || (len * 4) as u64 > r.max_storage_binding.min(r.max_buffer_size) {
            return Ok(None);
        }
        let mut layers = Vec::new();
        for l in &layout.layers {
            let m = matrices(l);
            let pages: Vec<usize> = m.iter().map(|&(i, _, _)| placement.at(i).0).collect();
            if pages.iter().any(|&p| p != pages[0]) {
                return Ok(None);
            }
            let start = m.iter().map(|&(i, _, _)| placement.at(i).1).min().unwrap_or(0);
            let end = m.iter().map(|&(i, o, n)| placement.at(i).1 + o * n).max().unwrap_or(0);
            let span = grad_pages[pages[0]].part(start..end)?;
            layers.push((span, m.iter().map(|&(i, _, _)| (i, placement.at(i).1 - start)).collect()));
        }
        Ok(Some(LayerSums { deferral: Deferral::new(gpu.zeros(len)?, align), layers }))
    }
}

/// Where the norms' backward kernels write their partial dγ sums.
pub(super) enum NormPartials {
    /// One buffer per norm, parts of one allocation `stride` floats apart (by the norm's index
    /// in the fused order), all reduced by one dispatch at the end of the backward
    /// (`norm::rmsnorm_dgamma_reduce_all`) into the run `run` of the gradient pages, which holds
    /// the gains `gstride` floats apart.
    All { whole: B, parts: Vec<Option<B>>, stride: usize, run: usize, gstride: usize },
    /// Four buffers that the norms take in turn, reduced four at a time
    /// (`norm::rmsnorm_dgamma_reduce4`): where the gains are not one run at one stride, or all
    /// partials would not fit one binding.
    Four(Box<[B; 4]>),
}

/// Mixed precision's f16 output gradients (f16x4 rows), each with the loss scaler's overflow
/// check made by the kernel that writes it.
pub(super) struct Dy16 {
    /// dx's copy `[rows, dim]` (`norm::rmsnorm_backward_f16`, `rmsnorm_backward_acc_f16`): W2's and
    /// Wo's output gradient.
    pub dx: Buffer<F16x4>,
    /// The fused dqkv `[rows, H·Dh + 2·Hkv·Dh]` after RoPE's backward
    /// (`rope::rope_qkv_backward_f16`): Wqkv's output gradient.
    pub dqkv: Buffer<F16x4>,
}

/// The optimizer's per-parameter state.
pub(super) enum State {
    /// AdamW: first and second moments in f32, one pair per fused tensor.
    AdamW { m: Fused<B>, v: Fused<B> },
    /// AdamW-8bit: m and √v codes four to a word, and each block's two scales
    /// (`kernels::optimizer::adamw_8bit_update`), per LLaMA-layout tensor: its blocks of 256
    /// are those of the checkpoint's tensors, so a checkpoint holds the state exactly; each
    /// tensor's update runs over its part of the fused weight (`params::fused::parts`).
    AdamW8bit { mq: ModelWeights<Buffer<u32>>, vq: ModelWeights<Buffer<u32>>, qscale: ModelWeights<B> },
}

/// The optimizer's state and the gradient-norm reduction's buffers.
pub(super) struct Optimizer {
    pub state: State,
    /// The gradient pages' partial sums of squares, page after page.
    pub norm_partials: B,
    pub norm_bad: Buffer<u32>,
    /// The global gradient norm, its clip factor and the non-finite flag.
    pub stats: B,
}

/// Every buffer's size class (what, elements), for [`Model::check_fits`]: the parameter
/// tensors (gradients and moments have their shapes), the activations and the scratch.
fn buffer_sizes(gpu: &Gpu, cfg: &ModelConfig, batch: usize, fast: bool) -> Vec<(String, u64)> {
    let u = |n: usize| n as u64;
    let rows = u(batch) * u(cfg.seq_len);
    let (d, f, hq, kv) = (u(cfg.dim), u(cfg.ffn_hidden), u(cfg.heads * cfg.head_dim()), u(cfg.kv_dim()));
    // The weights as the GPU keeps them: the fused set.
    let mut out: Vec<(String, u64)> = fused::layout(cfg)
        .into_vec()
        .into_iter()
        .map(|p| (format!("the weight {} {:?}", p.name, p.shape), p.shape.iter().map(|&n| u(n)).product()))
        .collect();
    let mut wgrad = 0;
    for p in fused::layout(cfg).iter() {
        if let [out_dim, in_dim] = p.shape[..] {
            wgrad = wgrad.max(u(scratch_bound(gpu, batch * cfg.seq_len, out_dim, in_dim)));
        }
    }
    let heads_rows = u(batch) * u(cfg.heads) * u(cfg.seq_len);
    out.extend([
        (format!("the activations [batch·seq_len = {rows}, dim = {d}]"), rows * d),
        (format!("the feed-forward activations [batch·seq_len = {rows}, 2·ffn = {}]", 2 * f), rows * 2 * f),
        (format!("the attention projections [batch·seq_len = {rows}, {}]", hq + 2 * kv), rows * (hq + 2 * kv)),
        (format!("the logits [batch·seq_len = {rows}, vocab = {}]", cfg.vocab), rows * u(cfg.vocab)),
        ("the attention statistics [batch, heads, seq_len]".to_string(), heads_rows),
        ("the products' scratch (split weight gradients)".to_string(), wgrad),
        (
            "the embedding backward's slices".to_string(),
            u(kernels::embed::Params::new(
                u32::try_from(rows).unwrap_or(u32::MAX),
                u32::try_from(d).unwrap_or(u32::MAX),
                u32::try_from(cfg.vocab).unwrap_or(u32::MAX),
            )
            .scratch_len()
            .0),
        ),
    ]);
    if fast {
        let probs = u(fast_params(cfg, batch, cfg.seq_len).probs_len());
        out.push(("the fast attention path's probabilities [batch, heads, seq_len, seq_len]".to_string(), probs));
    }
    out
}

impl Model {
    /// Checks, before anything is allocated, that every buffer of a model of this shape fits
    /// the device: one storage binding (`max_storage_buffer_binding_size`), one buffer
    /// (`max_buffer_size`), and the kernels' 32-bit element counts. The error names the buffer
    /// and the limit.
    pub fn check_fits(gpu: &Gpu, cfg: &ModelConfig, batch: usize, attention: Attention) -> Result<(), Error> {
        cfg.validate()?;
        if batch == 0 || batch > crate::config::MAX_WIDTH {
            return Err(Error::Config(format!("a batch of {batch} sequences is out of bounds")));
        }
        let fast = attention.resolve(gpu, cfg, batch)? == Attention::Fast;
        let r = gpu.report();
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        for (what, elements) in buffer_sizes(gpu, cfg, batch, fast) {
            let bytes = elements.saturating_mul(4);
            let over = |limit: &str, value: u64| {
                Err(Error::Config(format!(
                    "{what} needs {:.1} MiB, over this device's {limit} ({:.1} MiB): use a smaller --dim, --ffn, --batch or --seq-len",
                    mib(bytes),
                    mib(value)
                )))
            };
            if bytes > r.max_storage_binding {
                return over("max_storage_buffer_binding_size", r.max_storage_binding);
            }
            if bytes > r.max_buffer_size {
                return over("max_buffer_size", r.max_buffer_size);
            }
            if elements > u32::MAX as u64 {
                return Err(Error::Config(format!(
                    "{what} has {elements} elements, over the kernels' 32-bit counts (4294967295): use a smaller --dim, --ffn, --batch or --seq-len"
                )));
            }
        }
        Ok(())
    }

    /// [`Model::new`] with a chosen attention path (f32 precision).
    pub fn with_attention(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &Tensors,
        moments: Option<(&Tensors, &Tensors)>,
        attention: Attention,
    ) -> Result<Model, Error> {
        let options = ModelOptions { attention, ..ModelOptions::default() };
        Model::with_options(gpu, cfg, batch, weights, moments, options)
    }

    /// [`Model::new`] with a chosen attention path, precision and loss-scaler state (AdamW's
    /// moments, when given, for [`OptimizerKind::AdamW`]).
    pub fn with_options(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &Tensors,
        moments: Option<(&Tensors, &Tensors)>,
        options: ModelOptions,
    ) -> Result<Model, Error> {
        Model::with_state(gpu, cfg, batch, weights, moments.map(|(m, v)| StateRef::AdamW(m, v)), options)
    }

    /// [`Model::with_options`] with the optimizer state to start from (`None`: fresh), which must
    /// be of `options.optimizer`. AdamW-8bit runs in f32 precision only.
    pub fn with_state(
        gpu: &Gpu,
        cfg: &ModelConfig,
        batch: usize,
        weights: &Tensors,
        state: Option<StateRef<'_>>,
        options: ModelOptions,
    ) -> Result<Model, Error> {
        let ModelOptions {
            attention,
            precision,
            scaler,
            growth_interval,
            optimizer,
            split_products,
            transposed_weights,
        } = options;
        Model::check_fits(gpu, cfg, batch, attention)?;
        let eight = optimizer == OptimizerKind::AdamW8bit;
        // The mixed path's update is fused with the f16 copies' refresh and keeps f32 moments.
        let precision = match precision {
            Precision::Auto if eight => Precision::F32,
            Precision::Mixed if eight => {
                return Err(Error::Config(
                    "--optimizer adamw-8bit runs in f32 precision only; use --precision f32 (or auto), or --optimizer adamw"
                        .into(),
                ));
            }
            p => p.resolve(gpu)?,
        };
        let given = match state {
            None => optimizer,
            Some(StateRef::AdamW(..)) => OptimizerKind::AdamW,
            Some(StateRef::AdamW8bit(_)) => OptimizerKind::AdamW8bit,
        };
        if given != optimizer {
            return Err(Error::Config(format!(
                "the optimizer state is {}'s, the model is asked to use {}",
                given.name(),
                optimizer.name()
            )));
        }
        if growth_interval == 0 {
            return Err(Error::Config("the loss scale's growth interval must be at least 1 step".into()));
        }
        if let Some(s) = scaler {
            s.check().map_err(Error::Config)?;
        }
        let products = match precision {
            Precision::Mixed => Products::Half,
            // f32: the scaled-split products where they run on tensor cores (f32-accurate over
            // the f32 range, faster than the SGEMM there), else the SGEMM.
            _ if split_products => Products::Split,
            _ if kernels::gemm::Gemm::new(1, 1, 1).plan(gpu)?.core() == kernels::gemm::Core::Split => Products::Split,
            _ => Products::Sgemm,
        };
        let attention = attention.resolve_for(gpu, cfg, batch, precision == Precision::Mixed)?;
        let fast = attention == Attention::Fast;
        let flash = attention == Attention::Flash;
        // The caller's tensors are in the LLaMA layout; the GPU keeps the fused set.
        let llama = params::layout(cfg);
        let fits = |t: &Tensors| {
            t.layers.len() == cfg.layers && t.iter().zip(llama.iter()).all(|(w, p)| w.len() == p.elements())
        };
        let fits8 = |q: &ModelWeights<Moments8>| {
            q.layers.len() == cfg.layers && q.iter().zip(llama.iter()).all(|(t, p)| t.fits(p.elements()))
        };
        let state_fits = match state {
            None => true,
            Some(StateRef::AdamW(m, v)) => fits(m) && fits(v),
            Some(StateRef::AdamW8bit(q)) => fits8(q),
        };
        if !fits(weights) || !state_fits {
            return Err(Error::Config("weights do not match the model's parameter shapes".into()));
        }
        let layout = fused::layout(cfg);
        let z = |n: usize| gpu.zeros::<f32>(n);
        let half = products == Products::Half;
        // Every per-parameter kind in pages, each tensor a part (`arena`).
        let placement = Placement::new(gpu, &layout, half);
        let kind = |w: Option<&Tensors>| placement.allocate(gpu, &layout, w.map(|w| fused::fuse(cfg, w)).as_ref());
        let params = kind(Some(weights))?;
        let grads = kind(None)?;
        let mut moments = None;
        let fresh8;
        let state = match (optimizer, state) {
            (OptimizerKind::AdamW, given) => {
                let (m, v) = match given {
                    Some(StateRef::AdamW(m, v)) => (kind(Some(m))?, kind(Some(v))?),
                    _ => (kind(None)?, kind(None)?),
                };
                let runs = placement.runs().unwrap_or(&[]);
                moments = Some((m.runs(runs, 1)?, v.runs(runs, 1)?));
                State::AdamW { m: m.parts, v: v.parts }
            }
            (OptimizerKind::AdamW8bit, given) => {
                let q = match given {
                    Some(StateRef::AdamW8bit(q)) => q,
                    _ => {
                        fresh8 = llama.as_ref().map(|p| Moments8::zeros(p.elements()));
                        &fresh8
                    }
                };
                let words = |c: &Vec<u8>| gpu.upload(&Moments8::words(c));
                State::AdamW8bit {
                    mq: q.as_ref().try_map(|t| words(&t.mq))?,
                    vq: q.as_ref().try_map(|t| words(&t.vq))?,
                    qscale: q.as_ref().try_map(|t| gpu.upload(&t.qscale))?,
                }
            }
        };

        let (d, f, s) = (cfg.dim, cfg.ffn_hidden, cfg.seq_len);
        let (hq, kv) = (cfg.heads * cfg.head_dim(), cfg.kv_dim());
        let rows = batch * s;
        let probs_len = fast_params(cfg, batch, cfg.seq_len).probs_len();
        let kept = |cols: usize| Kept::zeros(gpu, half, rows, cols);
        // A linear layer's input that only products read: its halves on the split core.
        let input = |cols: usize| {
            if products == Products::Split { Kept::halves(gpu, rows, cols) } else { kept(cols) }
        };
        let att16 = if (fast || flash) && half && Attention16::applies(gpu, cfg, batch, flash) {
            Some(Attention16::new(gpu, cfg, batch, fast)?)
        } else {
            None
        };
        let qkv = || -> Result<Qkv, Error> {
            Ok(if att16.is_some() {
                let f16 = |cols: usize| gpu.zeros::<F16x4>(f16x4_len(rows, cols));
                let (q, k, v) = (f16(hq)?, f16(kv)?, f16(kv)?);
                Qkv::F16 { q, k, v, cache_k: z(s * kv)?, cache_v: z(s * kv)? }
            } else {
                Qkv::F32 { q: z(rows * hq)?, k: z(rows * kv)?, v: z(rows * kv)? }
            })
        };
        let mut layers = Vec::new();
        for _ in 0..cfg.layers {
            layers.push(Layer {
                x_in: z(rows * d)?,
                h1: input(d)?,
                rrms1: z(rows)?,
                qkv: qkv()?,
                att: z(rows * hq)?,
                att16: if half { Some(gpu.zeros(f16x4_len(rows, hq))?) } else { None },
                lse: z(batch * cfg.heads * s)?,
                x_mid: z(rows * d)?,
                h2: input(d)?,
                rrms2: z(rows)?,
                gu: z(rows * 2 * f)?,
                a: input(f)?,
                probs: if fast { Some(z(probs_len)?) } else { None },
            });
        }
        let acts = Activations {
            layers,
            xf: z(rows * d)?,
            hf: input(d)?,
            rrms_f: z(rows)?,
            logits: z(rows * cfg.vocab)?,
            dlogits16: if half { Some(gpu.zeros(f16x4_len(rows, cfg.vocab))?) } else { None },
            losses: z(rows)?,
        };
        let shapes: Vec<(usize, usize)> = layout
            .iter()
            .filter_map(|p| match p.shape[..] {
                [out, inp] => Some((out, inp)),
                _ => None,
            })
            .collect();
        // The widest output gradient of a block's linear layers (not the tied head's).
        let dy_cols = layout.layers.iter().flat_map(|l| [&l.wqkv, &l.wo, &l.w13, &l.w2]).map(|p| p.shape[0]).max();
        let plans = Plans::new(gpu, products, rows, &shapes, dy_cols.unwrap_or(0))?;
        let halves = if products == Products::Split { Some(Prepared::new(gpu, &layout)?) } else { None };
        let norm_block = kernels::norm::NORM_BLOCK as usize;
        let scratch = Scratch {
            dx: z(rows * d)?,
            da: z(rows * f)?,
            ma: z(rows * d)?,
            mb: z(rows * d)?,
            dgu: kept(2 * f)?,
            datt: z(rows * hq)?,
            qkv: z(rows * (hq + 2 * kv))?,
            dq: z(rows * hq)?,
            dk: z(rows * kv)?,
            dv: z(rows * kv)?,
            dy16: if half {
                let f16 = |cols: usize| gpu.zeros::<F16x4>(f16x4_len(rows, cols));
                Some(Dy16 { dx: f16(d)?, dqkv: f16(hq + 2 * kv)? })
            } else {
                None
            },
            delta: z(batch * cfg.heads * s)?,
            norms: {
                let n = rows.div_ceil(norm_block) * d;
                let step = (gpu.storage_alignment() as usize).div_ceil(4);
                let stride = n.next_multiple_of(step);
                let report = gpu.report();
                let limit = report.max_storage_binding.min(report.max_buffer_size);
                match placement.gains_run(&layout, d) {
                    Some(g) if (g.gains.len() * stride * 4) as u64 <= limit => {
                        let whole = z(g.gains.len() * stride)?;
                        let mut parts: Vec<Option<B>> = (0..layout.count()).map(|_| None).collect();
                        for (t, &i) in g.gains.iter().enumerate() {
                            parts[i] = Some(whole.part(t * stride..t * stride + n)?);
                        }
                        NormPartials::All { whole, parts, stride, run: g.run, gstride: g.stride }
                    }
                    _ => NormPartials::Four(Box::new([z(n)?, z(n)?, z(n)?, z(n)?])),
                }
            },
            layer_sums: if half { LayerSums::new(gpu, &plans, rows, &layout, &placement, &grads.whole)? } else { None },
            embed: kernels::embed::Scratch::new(
                gpu,
                kernels::embed::Params::new(rows as u32, d as u32, cfg.vocab as u32),
            )?,
            fast_delta: if fast { Some(z(batch * cfg.heads * s)?) } else { None },
            att16,
            kept32: if products == Products::Split { Some(z(rows * d.max(f))?) } else { None },
        };
        // Each gradient page's partial sums of squares, one per NORM_BLOCK elements, side by side.
        let block = kernels::optimizer::NORM_BLOCK as usize;
        let total: usize = placement.pages().iter().map(|n| n.div_ceil(block)).sum();
        let opt =
            Optimizer { state, norm_partials: z(total.max(1))?, norm_bad: gpu.zeros(total.max(1))?, stats: z(4)? };
        let runs = placement.runs().unwrap_or(&[]);
        let (w16, w16_runs, half, wt16) = if half {
            let w16 = placement.allocate_f16(gpu, &layout)?;
            let half =
                Half { flag: gpu.zeros(1)?, state: gpu.upload(&scaler.unwrap_or_default().to_gpu())?, growth_interval };
            let w16_runs = w16.runs(runs, 4)?;
            // The matrices whose input gradients read a transposed copy
            // (`KERNELS_TRANSPOSED_WEIGHTS=0`: none unless asked, for same-binary baselines).
            let transposed_weights = transposed_weights.or(transposed_off().then_some(false));
            let which = layout
                .iter()
                .map(|p| match (&p.shape[..], transposed_weights) {
                    (&[_, _], Some(on)) => Ok(on),
                    (&[out, inp], None) => plans.transposed_pays(gpu, rows, out, inp),
                    _ => Ok(false),
                })
                .collect::<Result<Vec<bool>, Error>>()?;
            let wt16 = if which.contains(&true) {
                let (dst, parts, items) = placement.allocate_transposed(gpu, &layout, &which)?;
                let src = w16.whole.iter().map(|p| p.part(0..p.len())).collect::<Result<Vec<_>, _>>()?;
                Some(Transposed::new(gpu, (src, dst), parts, &items)?)
            } else {
                None
            };
            (Some(w16.parts), w16_runs, Some(half), wt16)
        } else {
            (None, Vec::new(), None, None)
        };
        let (m, v) = moments.unwrap_or_default();
        let pages = Pages {
            params: params.runs(runs, 1)?,
            grads: grads.runs(placement.all_runs(), 1)?,
            grad_pages: grads.whole,
            m,
            v,
            w16: w16_runs,
            placement,
        };
        let (params, grads) = (params.parts, grads.parts);
        let mut model = Model {
            cfg: cfg.clone(),
            batch,
            attention,
            precision,
            w16,
            wt16,
            half,
            plans,
            halves,
            gpu: gpu.clone(),
            layout,
            params,
            grads,
            pages,
            opt,
            ids: gpu.zeros(rows)?,
            targets: gpu.zeros(rows)?,
            acts,
            loss_out: z(2)?,
            s: scratch,
            cache: Vec::new(),
        };
        model.refresh_f16()?;
        model.refresh_halves()?;
        Ok(model)
    }

    /// The split mode: makes every weight matrix's halves from the f32 masters before the first
    /// forward (the update remakes them each step after that).
    fn refresh_halves(&mut self) -> Result<(), Error> {
        let Some(h) = &mut self.halves else { return Ok(()) };
        let b = self.gpu.batch();
        h.record(&b, &self.params)?;
        b.submit()?;
        Ok(())
    }

    /// Mixed precision: writes the weights' f16 copies from the f32 masters (the optimizer keeps
    /// them current after that).
    fn refresh_f16(&mut self) -> Result<(), Error> {
        let Some(w16) = &mut self.w16 else { return Ok(()) };
        let b = self.gpu.batch();
        for ((w, w16), p) in self.params.iter().zip(w16.iter_mut()).zip(self.layout.iter()) {
            let (r, c) = rows_cols(&p.shape);
            kernels::ops::cast_f16x4(&b, w, w16, r, c)?;
        }
        if let Some(t) = &mut self.wt16 {
            t.record(&b)?;
        }
        b.submit()?;
        Ok(())
    }
}

/// Whether `KERNELS_TRANSPOSED_WEIGHTS=0` turns the transposed weight copies' default off
/// ([`ModelOptions::transposed_weights`]).
fn transposed_off() -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    return std::env::var("KERNELS_TRANSPOSED_WEIGHTS").is_ok_and(|v| v.trim() == "0");
    #[cfg(target_arch = "wasm32")]
    false
}
