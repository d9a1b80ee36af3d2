//! The parameters, typed: [`ModelWeights`] holds one value per parameter tensor — the weights,
//! their gradients, the two AdamW moments, host copies, or the layout below — so every use shares
//! one shape and nothing is found by index arithmetic. [`layout`] gives each tensor's name (those
//! of the LLaMA reference code, so a PyTorch `state_dict` can take them), shape and kind;
//! [`init`] the seeded initial values.
//!
//! | field | name | shape | use |
//! | --- | --- | --- | --- |
//! | `embedding` | `tok_embeddings.weight` | `[V, D]` | token embedding; also the output head (tied: logits = h · Eᵀ) |
//! | `attn_norm` | `layers.{i}.attention_norm.weight` | `[D]` | RMSNorm before attention |
//! | `wq` | `layers.{i}.attention.wq.weight` | `[H·Dh, D]` | query projection, `q = h · Wqᵀ` (PyTorch `nn.Linear` layout [out, in]) |
//! | `wk` | `layers.{i}.attention.wk.weight` | `[Hkv·Dh, D]` | key projection |
//! | `wv` | `layers.{i}.attention.wv.weight` | `[Hkv·Dh, D]` | value projection |
//! | `wo` | `layers.{i}.attention.wo.weight` | `[D, H·Dh]` | output projection |
//! | `ffn_norm` | `layers.{i}.ffn_norm.weight` | `[D]` | RMSNorm before the feed-forward |
//! | `w1` | `layers.{i}.feed_forward.w1.weight` | `[F, D]` | SwiGLU gate |
//! | `w3` | `layers.{i}.feed_forward.w3.weight` | `[F, D]` | SwiGLU up |
//! | `w2` | `layers.{i}.feed_forward.w2.weight` | `[D, F]` | SwiGLU down |
//! | `final_norm` | `norm.weight` | `[D]` | final RMSNorm |
//!
//! The order of this table is the checkpoint order: [`LayerWeights::into_array`] and
//! [`ModelWeights::into_vec`] define it (`from_array`, `from_vec` and `try_map` beside them
//! follow it); everything else iterates through them.
//!
//! Rotary embeddings rotate interleaved pairs (2i, 2i+1), as the original LLaMA code does.
//!
//! This layout is the trainer's outside: checkpoints, exports, [`init`] and every host copy of
//! the weights, gradients or moments use it. On the GPU the model keeps the projections that
//! share an input stacked into one weight each (`wqkv`, `w13`: [`fused`]), which converts
//! between the two.

pub mod fused;

use crate::Error;
use crate::config::ModelConfig;
use crate::rng::Rng;

/// Tensors per transformer block.
pub const LAYER_TENSORS: usize = 9;

/// One transformer block's tensors (or whatever is kept per tensor: gradients, moments, shapes).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights<T> {
    /// RMSNorm gain before attention, `[D]`.
    pub attn_norm: T,
    /// Query projection, `[H·Dh, D]`.
    pub wq: T,
    /// Key projection, `[Hkv·Dh, D]`.
    pub wk: T,
    /// Value projection, `[Hkv·Dh, D]`.
    pub wv: T,
    /// Attention output projection, `[D, H·Dh]`.
    pub wo: T,
    /// RMSNorm gain before the feed-forward, `[D]`.
    pub ffn_norm: T,
    /// SwiGLU gate, `[F, D]`.
    pub w1: T,
    /// SwiGLU up projection, `[F, D]`.
    pub w3: T,
    /// SwiGLU down projection, `[D, F]`.
    pub w2: T,
}

impl<T> LayerWeights<T> {
    /// From the tensors in checkpoint order.
    pub fn from_array(a: [T; LAYER_TENSORS]) -> LayerWeights<T> {
        let [attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2] = a;
        LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 }
    }

    /// The tensors in checkpoint order.
    pub fn into_array(self) -> [T; LAYER_TENSORS] {
        let LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 } = self;
        [attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2]
    }

    /// References to each tensor.
    pub fn as_ref(&self) -> LayerWeights<&T> {
        let LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 } = self;
        LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 }
    }

    /// Mutable references to each tensor.
    pub fn as_mut(&mut self) -> LayerWeights<&mut T> {
        let LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 } = self;
        LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 }
    }

    /// Applies a fallible `f` to each tensor in checkpoint order, stopping at the first error.
    pub fn try_map<U, E>(self, mut f: impl FnMut(T) -> Result<U, E>) -> Result<LayerWeights<U>, E> {
        let LayerWeights { attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2 } = self;
        // Fields are evaluated in the order written: checkpoint order, as in `into_array`.
        Ok(LayerWeights {
            attn_norm: f(attn_norm)?,
            wq: f(wq)?,
            wk: f(wk)?,
            wv: f(wv)?,
            wo: f(wo)?,
            ffn_norm: f(ffn_norm)?,
            w1: f(w1)?,
            w3: f(w3)?,
            w2: f(w2)?,
        })
    }

    /// Applies `f` to each tensor, in checkpoint order.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> LayerWeights<U> {
        LayerWeights::from_array(self.into_array().map(f))
    }
}

/// What [`ModelWeights`] needs of a transformer block's tensors in one of the model's layouts:
/// the LLaMA one ([`LayerWeights`], checkpoint order) or the fused one the GPU keeps
/// ([`fused::FusedLayer`]).
pub trait Block<T>: Sized {
    /// Tensors per block.
    const TENSORS: usize;
    /// The same block holding `U`s.
    type Of<U>: Block<U>;
    /// The tensors in the block's order.
    fn tensors(self) -> Vec<T>;
    /// From exactly [`Block::TENSORS`] tensors in that order (`None` for another count).
    fn from_tensors(t: Vec<T>) -> Option<Self>;
    /// References to each tensor.
    fn refs(&self) -> Self::Of<&T>;
    /// Mutable references to each tensor.
    fn refs_mut(&mut self) -> Self::Of<&mut T>;
    /// Applies a fallible `f` to each tensor in the block's order, stopping at the first error.
    fn try_map_tensors<U, E>(self, f: &mut impl FnMut(T) -> Result<U, E>) -> Result<Self::Of<U>, E>;
}

impl<T> Block<T> for LayerWeights<T> {
    const TENSORS: usize = LAYER_TENSORS;
    type Of<U> = LayerWeights<U>;
    fn tensors(self) -> Vec<T> {
        self.into_array().into()
    }
    fn from_tensors(t: Vec<T>) -> Option<Self> {
        t.try_into().ok().map(LayerWeights::from_array)
    }
    fn refs(&self) -> LayerWeights<&T> {
        self.as_ref()
    }
    fn refs_mut(&mut self) -> LayerWeights<&mut T> {
        self.as_mut()
    }
    fn try_map_tensors<U, E>(self, f: &mut impl FnMut(T) -> Result<U, E>) -> Result<LayerWeights<U>, E> {
        self.try_map(f)
    }
}

/// The whole model's tensors (or whatever is kept per tensor), generic over what each slot
/// holds: `ModelWeights<Buffer<f32>>` on the GPU, `ModelWeights<Vec<f32>>` on the host,
/// `ModelWeights<Param>` for names and shapes ([`layout`]); and over the blocks' layout, the
/// LLaMA one by default (the fused one: [`fused::Fused`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelWeights<T, L = LayerWeights<T>> {
    /// Token embedding, tied to the output head, `[V, D]`.
    pub embedding: T,
    /// The transformer blocks, first to last.
    pub layers: Vec<L>,
    /// RMSNorm gain before the head, `[D]`.
    pub final_norm: T,
}

impl<T, L: Block<T>> ModelWeights<T, L> {
    /// Number of tensors.
    pub fn count(&self) -> usize {
        2 + L::TENSORS * self.layers.len()
    }

    /// The tensors in order: the embedding, each block's, the final norm (checkpoint order for
    /// the LLaMA layout).
    pub fn into_vec(self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.count());
        out.push(self.embedding);
        for layer in self.layers {
            out.extend(layer.tensors());
        }
        out.push(self.final_norm);
        out
    }

    /// From the tensors of a model of `layers` blocks in that order; an error when the count is
    /// not `2 + (tensors a block)·layers`.
    pub fn from_vec(tensors: Vec<T>, layers: usize) -> Result<Self, Error> {
        let found = tensors.len();
        let wrong = || Error::Config(format!("{found} tensors for a model of {layers} layers"));
        if Some(found) != L::TENSORS.checked_mul(layers).and_then(|n| n.checked_add(2)) {
            return Err(wrong());
        }
        let mut it = tensors.into_iter();
        let embedding = it.next().ok_or_else(wrong)?;
        let mut blocks = Vec::with_capacity(layers);
        for _ in 0..layers {
            blocks.push(L::from_tensors(it.by_ref().take(L::TENSORS).collect()).ok_or_else(wrong)?);
        }
        let final_norm = it.next().ok_or_else(wrong)?;
        Ok(ModelWeights { embedding, layers: blocks, final_norm })
    }

    /// References to each tensor.
    pub fn as_ref(&self) -> ModelWeights<&T, L::Of<&T>> {
        ModelWeights {
            embedding: &self.embedding,
            layers: self.layers.iter().map(L::refs).collect(),
            final_norm: &self.final_norm,
        }
    }

    /// Mutable references to each tensor.
    pub fn as_mut(&mut self) -> ModelWeights<&mut T, L::Of<&mut T>> {
        ModelWeights {
            embedding: &mut self.embedding,
            layers: self.layers.iter_mut().map(L::refs_mut).collect(),
            final_norm: &mut self.final_norm,
        }
    }

    /// The tensors in order.
    pub fn iter(&self) -> std::vec::IntoIter<&T> {
        self.as_ref().into_vec().into_iter()
    }

    /// The tensors in order, mutably.
    pub fn iter_mut(&mut self) -> std::vec::IntoIter<&mut T> {
        self.as_mut().into_vec().into_iter()
    }

    /// Applies a fallible `f` to each tensor in order, stopping at the first error.
    pub fn try_map<U, E>(self, mut f: impl FnMut(T) -> Result<U, E>) -> Result<ModelWeights<U, L::Of<U>>, E> {
        let embedding = f(self.embedding)?;
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in self.layers {
            layers.push(layer.try_map_tensors(&mut f)?);
        }
        Ok(ModelWeights { embedding, layers, final_norm: f(self.final_norm)? })
    }

    /// Applies `f` to each tensor, in order.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> ModelWeights<U, L::Of<U>> {
        let r: Result<_, std::convert::Infallible> = self.try_map(|t| Ok(f(t)));
        r.unwrap_or_else(|e| match e {})
    }
}

/// What a parameter tensor is (it decides initialisation and weight decay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The token embedding (and output head).
    Embedding,
    /// An RMSNorm gain: starts at 1, no weight decay.
    Norm,
    /// A projection into the heads or the feed-forward (`wq wk wv w1 w3`).
    Projection,
    /// A projection back into the residual stream (`wo w2`): its initial values are scaled by
    /// 1/√(2·layers).
    OutputProjection,
}

/// One parameter tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Its checkpoint name.
    pub name: String,
    /// Its shape (`[out, in]` for matrices).
    pub shape: Vec<usize>,
    /// What it is.
    pub kind: Kind,
    /// Its position in checkpoint order (seeds its initial values).
    pub index: usize,
}

impl Param {
    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether weight decay applies (matrices and the embedding; not the norms).
    pub fn decays(&self) -> bool {
        self.kind != Kind::Norm
    }
}

/// Every parameter's name, shape and kind.
pub fn layout(c: &ModelConfig) -> ModelWeights<Param> {
    let (d, v, f) = (c.dim, c.vocab, c.ffn_hidden);
    let q = c.heads * c.head_dim();
    let kv = c.kv_dim();
    let layer = |i: usize| {
        let t = |name: &str, shape: Vec<usize>, kind: Kind| (format!("layers.{i}.{name}"), shape, kind);
        LayerWeights {
            attn_norm: t("attention_norm.weight", vec![d], Kind::Norm),
            wq: t("attention.wq.weight", vec![q, d], Kind::Projection),
            wk: t("attention.wk.weight", vec![kv, d], Kind::Projection),
            wv: t("attention.wv.weight", vec![kv, d], Kind::Projection),
            wo: t("attention.wo.weight", vec![d, q], Kind::OutputProjection),
            ffn_norm: t("ffn_norm.weight", vec![d], Kind::Norm),
            w1: t("feed_forward.w1.weight", vec![f, d], Kind::Projection),
            w3: t("feed_forward.w3.weight", vec![f, d], Kind::Projection),
            w2: t("feed_forward.w2.weight", vec![d, f], Kind::OutputProjection),
        }
    };
    let described = ModelWeights {
        embedding: ("tok_embeddings.weight".to_string(), vec![v, d], Kind::Embedding),
        layers: (0..c.layers).map(layer).collect(),
        final_norm: ("norm.weight".to_string(), vec![d], Kind::Norm),
    };
    let mut index = 0;
    described.map(|(name, shape, kind)| {
        index += 1;
        Param { name, shape, kind, index: index - 1 }
    })
}

/// Every parameter's name and shape, in checkpoint order.
pub fn shapes(c: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    layout(c).into_vec().into_iter().map(|p| (p.name, p.shape)).collect()
}

/// A zeroed host vector of `n` floats, or an error (not an abort) when memory runs out.
pub fn host_vec(n: usize, what: &str) -> Result<Vec<f32>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::Config(format!("{what}: cannot allocate {:.1} MiB of host memory", n as f64 * 4.0 / (1 << 20) as f64))
    })?;
    v.resize(n, 0.0);
    Ok(v)
}

/// Initial values: norms 1; matrices N(0, 0.02²), the output projections (`wo`, `w2`) scaled by
/// 1/√(2·layers) so the residual stream's variance does not grow with depth. Each tensor draws
/// from its own stream of the seed. Host memory is allocated fallibly (an error, not an abort).
pub fn init(c: &ModelConfig, seed: u64) -> Result<ModelWeights<Vec<f32>>, Error> {
    layout(c).try_map(|p| {
        let mut w = host_vec(p.elements(), &p.name)?;
        let std = match p.kind {
            Kind::Norm => {
                w.fill(1.0);
                return Ok(w);
            }
            Kind::Embedding | Kind::Projection => 0.02,
            Kind::OutputProjection => 0.02 / (2.0 * c.layers as f64).sqrt(),
        };
        let mut rng = Rng::for_step(seed, 1000 + p.index as u64, 0);
        for x in &mut w {
            *x = (rng.normal() * std) as f32;
        }
        Ok(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_order_round_trips_and_matches_the_names() {
        let c = ModelConfig::new(16, 3, 2, 1, 8);
        let lay = layout(&c);
        assert_eq!(lay.count(), 2 + 9 * 3);
        let flat = lay.clone().into_vec();
        for (i, p) in flat.iter().enumerate() {
            assert_eq!(p.index, i, "{}", p.name);
        }
        assert_eq!(flat[0].name, "tok_embeddings.weight");
        assert_eq!(flat[1 + 9 + 4].name, "layers.1.attention.wo.weight");
        assert_eq!(lay.layers[1].wo.name, "layers.1.attention.wo.weight");
        assert_eq!(lay.layers[2].w3.shape, vec![c.ffn_hidden, 16]);
        assert_eq!(flat.last().map(|p| p.name.as_str()), Some("norm.weight"));
        assert_eq!(ModelWeights::from_vec(flat.clone(), 3).unwrap(), lay);
        assert!(ModelWeights::<Param>::from_vec(flat.clone(), 2).is_err());
        assert!(ModelWeights::<Param>::from_vec(flat[..flat.len() - 1].to_vec(), 3).is_err());
        assert!(ModelWeights::<Param>::from_vec(Vec::<Param>::new(), usize::MAX).is_err());
        let mut seen = Vec::new();
        let indices = lay.clone().try_map(|p| {
            seen.push(p.index);
            Ok::<_, ()>(p.index)
        });
        assert_eq!(indices.unwrap().into_vec(), (0..29).collect::<Vec<_>>());
        assert_eq!(seen, (0..29).collect::<Vec<_>>(), "try_map visits in checkpoint order");
        let mut calls = 0;
        assert_eq!(
            lay.clone().try_map(|p| {
                calls += 1;
                if p.index == 3 { Err(p.index) } else { Ok(()) }
            }),
            Err(3)
        );
        assert_eq!(calls, 4, "try_map stops at the first error");
        assert_eq!(lay.iter().filter(|p| !p.decays()).count(), 1 + 2 * 3);
    }
}
