//! The parameter set as the model keeps it on the GPU: the projections that read the same input
//! stacked into one weight, so that each is one product — `wqkv = [wq; wk; wv]`
//! (`[H·Dh + 2·Hkv·Dh, D]`, the rows of wq, then wk's, then wv's) and `w13 = [w1; w3]`
//! (`[2F, D]`, gate rows, then up rows). Every other tensor is as in [`super::layout`].
//!
//! This module is the one place where the two layouts meet. [`parts`] says where each tensor of
//! the LLaMA layout ([`ModelWeights`], the names and shapes of [`super::layout`]) lies in the
//! fused set ([`Fused`]): which fused tensor, from which element, how many. A PyTorch `[out, in]`
//! weight is row-major, so stacking rows is concatenating the flat values, and a part is a
//! contiguous range. [`fuse_with`] and [`unfuse`] convert whole sets with it, and [`layout`]
//! derives the fused tensors' descriptions from the parts'. The model converts at its boundary —
//! weights and moments in when it is built, out when they are read back
//! (`crate::model::Model::weights`, `gradients`, `moments`) — so checkpoints, exports and
//! everything else outside the model see only the LLaMA layout.
//!
//! A fused tensor takes its parts' kind (they have the same one: the parts of `wqkv` and `w13`
//! are all [`super::Kind::Projection`]), so initialisation and weight decay are the parts'; initial
//! values are drawn per part by [`super::init`] and then stacked, the bits of the unfused model.

use super::{Block, LayerWeights, ModelWeights, Param, layout as llama_layout};
use crate::Error;
use crate::config::ModelConfig;

/// Tensors per transformer block in the fused set.
pub const FUSED_LAYER_TENSORS: usize = 6;

/// One transformer block's tensors in the fused set (or whatever is kept per tensor).
#[derive(Clone, Debug, PartialEq)]
pub struct FusedLayer<T> {
    /// RMSNorm gain before attention, `[D]`.
    pub attn_norm: T,
    /// Query, key and value projections stacked by rows, `[H·Dh + 2·Hkv·Dh, D]`.
    pub wqkv: T,
    /// Attention output projection, `[D, H·Dh]`.
    pub wo: T,
    /// RMSNorm gain before the feed-forward, `[D]`.
    pub ffn_norm: T,
    /// SwiGLU gate and up projections stacked by rows, `[2F, D]`.
    pub w13: T,
    /// SwiGLU down projection, `[D, F]`.
    pub w2: T,
}

impl<T> FusedLayer<T> {
    /// From the tensors in the fused order.
    pub fn from_array(a: [T; FUSED_LAYER_TENSORS]) -> FusedLayer<T> {
        let [attn_norm, wqkv, wo, ffn_norm, w13, w2] = a;
        FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 }
    }

    /// The tensors in the fused order.
    pub fn into_array(self) -> [T; FUSED_LAYER_TENSORS] {
        let FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 } = self;
        [attn_norm, wqkv, wo, ffn_norm, w13, w2]
    }

    /// References to each tensor.
    pub fn as_ref(&self) -> FusedLayer<&T> {
        let FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 } = self;
        FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 }
    }

    /// Mutable references to each tensor.
    pub fn as_mut(&mut self) -> FusedLayer<&mut T> {
        let FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 } = self;
        FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 }
    }
}

impl<T> Block<T> for FusedLayer<T> {
    const TENSORS: usize = FUSED_LAYER_TENSORS;
    type Of<U> = FusedLayer<U>;
    fn tensors(self) -> Vec<T> {
        self.into_array().into()
    }
    fn from_tensors(t: Vec<T>) -> Option<Self> {
        t.try_into().ok().map(FusedLayer::from_array)
    }
    fn refs(&self) -> FusedLayer<&T> {
        self.as_ref()
    }
    fn refs_mut(&mut self) -> FusedLayer<&mut T> {
        self.as_mut()
    }
    fn try_map_tensors<U, E>(self, f: &mut impl FnMut(T) -> Result<U, E>) -> Result<FusedLayer<U>, E> {
        let FusedLayer { attn_norm, wqkv, wo, ffn_norm, w13, w2 } = self;
        // Fields are evaluated in the order written: the fused order, as in `into_array`.
        Ok(FusedLayer {
            attn_norm: f(attn_norm)?,
            wqkv: f(wqkv)?,
            wo: f(wo)?,
            ffn_norm: f(ffn_norm)?,
            w13: f(w13)?,
            w2: f(w2)?,
        })
    }
}

/// The whole model's tensors in the fused set (or whatever is kept per tensor): the GPU's
/// parameters, gradients, AdamW moments and f16 copies. The fused order — the embedding, each
/// block's `attn_norm wqkv wo ffn_norm w13 w2`, the final norm — is the order of
/// [`ModelWeights::iter`], [`ModelWeights::into_vec`] and [`ModelWeights::try_map`] on it, and
/// the indices of [`Part::tensor`].
pub type Fused<T> = ModelWeights<T, FusedLayer<T>>;

/// Where one tensor of the LLaMA layout lies in the fused set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The fused tensor holding it (its index in the fused order).
    pub tensor: usize,
    /// Its first element in that tensor (its first row times the row length).
    pub offset: usize,
    /// Its elements.
    pub len: usize,
}

/// Every LLaMA-layout tensor's place in the fused set: `wq`, `wk`, `wv` are consecutive row
/// ranges of their block's `wqkv`, `w1` and `w3` of its `w13`; every other tensor is a fused
/// tensor of its own, whole.
pub fn parts(c: &ModelConfig) -> ModelWeights<Part> {
    let l = llama_layout(c);
    let whole = |tensor: usize, p: &Param| Part { tensor, offset: 0, len: p.elements() };
    let layer = |i: usize, p: &LayerWeights<Param>| {
        let base = 1 + FUSED_LAYER_TENSORS * i;
        let (nq, nk, nf) = (p.wq.elements(), p.wk.elements(), p.w1.elements());
        LayerWeights {
            attn_norm: whole(base, &p.attn_norm),
            wq: Part { tensor: base + 1, offset: 0, len: nq },
            wk: Part { tensor: base + 1, offset: nq, len: nk },
            wv: Part { tensor: base + 1, offset: nq + nk, len: p.wv.elements() },
            wo: whole(base + 2, &p.wo),
            ffn_norm: whole(base + 3, &p.ffn_norm),
            w1: Part { tensor: base + 4, offset: 0, len: nf },
            w3: Part { tensor: base + 4, offset: nf, len: p.w3.elements() },
            w2: whole(base + 5, &p.w2),
        }
    };
    ModelWeights {
        embedding: whole(0, &l.embedding),
        layers: l.layers.iter().enumerate().map(|(i, p)| layer(i, p)).collect(),
        final_norm: whole(1 + FUSED_LAYER_TENSORS * c.layers, &l.final_norm),
    }
}

/// The LLaMA-layout tensors of each fused tensor, in the fused order, each list in row order:
/// (its index in checkpoint order, where it lies).
fn members(c: &ModelConfig) -> Vec<Vec<(usize, Part)>> {
    let mut out = vec![Vec::new(); 2 + FUSED_LAYER_TENSORS * c.layers];
    for (i, p) in parts(c).into_vec().into_iter().enumerate() {
        out[p.tensor].push((i, p));
    }
    for m in &mut out {
        m.sort_by_key(|(_, p)| p.offset);
    }
    out
}

/// Every fused tensor's name, shape and kind: a whole tensor's are its own; a stacked one is
/// named `layers.{i}.attention.wqkv.weight` or `layers.{i}.feed_forward.w13.weight` (names that
/// never leave the trainer), its rows are its parts' rows, its kind theirs. `index` is the fused
/// order's.
pub fn layout(c: &ModelConfig) -> Fused<Param> {
    let llama = llama_layout(c).into_vec();
    let mut out = Vec::new();
    for (index, m) in members(c).into_iter().enumerate() {
        let first = &llama[m[0].0];
        let (name, shape) = match m.len() {
            1 => (first.name.clone(), first.shape.clone()),
            _ => {
                let rows = m.iter().map(|(i, _)| llama[*i].shape[0]).sum();
                let name = first.name.replace(".wq.", ".wqkv.").replace(".w1.", ".w13.");
                (name, vec![rows, first.shape[1]])
            }
        };
        let kind = first.kind;
        debug_assert!(m.iter().all(|(i, _)| llama[*i].kind == kind), "a fused tensor's parts differ in kind");
        out.push(Param { name, shape, kind, index });
    }
    // `members` has one list per fused tensor, so the count is right.
    Fused::from_vec(out, c.layers).unwrap_or_else(|e| unreachable!("{e}"))
}

/// The fused set of `w` (LLaMA layout, of the model `c`): `f` is applied to each fused tensor's
/// values in the fused order — a whole tensor's own slice, a stacked one's parts concatenated (a
/// copy, made one tensor at a time) — stopping at the first error. `w` must have the shapes of
/// `c` (checked by the caller: a part of the wrong length is not caught here).
pub fn fuse_with<T: Clone, U, E>(
    c: &ModelConfig,
    w: &ModelWeights<Vec<T>>,
    mut f: impl FnMut(&[T]) -> Result<U, E>,
) -> Result<Fused<U>, E> {
    let tensors = w.as_ref().into_vec();
    let mut out = Vec::new();
    for m in members(c) {
        out.push(match &m[..] {
            [(i, _)] => f(tensors[*i])?,
            _ => {
                let joined: Vec<T> = m.iter().flat_map(|(i, _)| tensors[*i].iter().cloned()).collect();
                f(&joined)?
            }
        });
    }
    Ok(Fused::from_vec(out, c.layers).unwrap_or_else(|e| unreachable!("{e}")))
}

/// The fused set of `w` (LLaMA layout, of the model `c`), copied.
pub fn fuse<T: Clone>(c: &ModelConfig, w: &ModelWeights<Vec<T>>) -> Fused<Vec<T>> {
    let r: Result<_, std::convert::Infallible> = fuse_with(c, w, |s| Ok(s.to_vec()));
    r.unwrap_or_else(|e| match e {})
}

/// The LLaMA-layout tensors of the fused set `f` (of the model `c`): each stacked tensor split
/// into its parts (without copying the first part); an error when a fused tensor's length is not
/// its parts' total.
pub fn unfuse<T>(c: &ModelConfig, f: Fused<Vec<T>>) -> Result<ModelWeights<Vec<T>>, Error> {
    let parts = parts(c).into_vec();
    let mut tensors = f.into_vec();
    let mut out: Vec<Option<Vec<T>>> = (0..parts.len()).map(|_| None).collect();
    // A fused tensor's parts are consecutive in checkpoint order and in row order: from the last,
    // each `split_off` takes the tail that is that part.
    for (i, p) in parts.iter().enumerate().rev() {
        let t = tensors
            .get_mut(p.tensor)
            .ok_or_else(|| Error::Config(format!("no fused tensor {} in a set of {}", p.tensor, parts.len())))?;
        if t.len() != p.offset + p.len {
            return Err(Error::Config(format!(
                "fused tensor {} holds {} values where its parts end at {}",
                p.tensor,
                t.len(),
                p.offset + p.len
            )));
        }
        out[i] = Some(t.split_off(p.offset));
    }
    let out: Vec<Vec<T>> = out.into_iter().map(|t| t.unwrap_or_default()).collect();
    ModelWeights::from_vec(out, c.layers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Kind;

    #[test]
    fn the_fused_layout_stacks_rows_and_round_trips() {
        // Grouped heads (Hkv < H), an ffn width that is not a multiple of 4.
        let mut c = ModelConfig::new(16, 2, 4, 2, 8);
        c.ffn_hidden = 22;
        let (d, hq, kv, f) = (16, 16, c.kv_dim(), 22);
        let lay = layout(&c);
        assert_eq!(lay.count(), 2 + 6 * 2);
        assert_eq!(lay.layers[1].wqkv.shape, vec![hq + 2 * kv, d]);
        assert_eq!(lay.layers[1].wqkv.name, "layers.1.attention.wqkv.weight");
        assert_eq!(lay.layers[0].w13.shape, vec![2 * f, d]);
        assert_eq!(lay.layers[0].w13.name, "layers.0.feed_forward.w13.weight");
        assert_eq!(lay.layers[0].w2.name, "layers.0.feed_forward.w2.weight");
        for (i, p) in lay.iter().enumerate() {
            assert_eq!(p.index, i, "{}", p.name);
        }
        assert_eq!(lay.layers[1].wqkv.kind, Kind::Projection);
        assert_eq!(lay.iter().filter(|p| !p.decays()).count(), 1 + 2 * 2);
        // Every value of every LLaMA tensor distinct: where each lands is checked by value.
        let mut next = 0.0f32;
        let w = llama_layout(&c).map(|p| {
            (0..p.elements())
                .map(|_| {
                    next += 1.0;
                    next
                })
                .collect::<Vec<f32>>()
        });
        let fused = fuse(&c, &w);
        let l = &w.layers[1];
        let stacked: Vec<f32> = [&l.wq, &l.wk, &l.wv].into_iter().flatten().copied().collect();
        assert_eq!(fused.layers[1].wqkv, stacked, "wqkv = [wq; wk; wv]");
        // Row r of wk is row H·Dh + r of wqkv.
        assert_eq!(fused.layers[1].wqkv[(hq + 3) * d..(hq + 4) * d], l.wk[3 * d..4 * d]);
        let l0 = &w.layers[0];
        assert_eq!(fused.layers[0].w13[..f * d], l0.w1[..]);
        assert_eq!(fused.layers[0].w13[f * d..], l0.w3[..]);
        assert_eq!(fused.final_norm, w.final_norm);
        for (t, p) in fused.iter().zip(lay.iter()) {
            assert_eq!(t.len(), p.elements(), "{}", p.name);
        }
        assert_eq!(unfuse(&c, fused.clone()).unwrap(), w);
        // `fuse_with` hands each fused tensor over in the fused order and stops at an error.
        let mut seen = Vec::new();
        let lens = fuse_with(&c, &w, |s| {
            seen.push(s.len());
            Ok::<_, ()>(s.len())
        });
        assert_eq!(lens.unwrap().into_vec(), lay.iter().map(|p| p.elements()).collect::<Vec<_>>());
        assert_eq!(seen.len(), lay.count());
        let mut calls = 0;
        let stop = fuse_with(&c, &w, |_| {
            calls += 1;
            if calls == 3 { Err(calls) } else { Ok(()) }
        });
        assert_eq!(stop, Err(3));
        // A fused tensor of the wrong length is an error, not a wrong split.
        let mut short = fused;
        short.layers[0].w13.pop();
        assert!(unfuse(&c, short).is_err());
    }

    #[test]
    fn parts_cover_each_fused_tensor_exactly() {
        let c = ModelConfig::new(24, 3, 6, 2, 8);
        let lay = layout(&c).into_vec();
        let mut covered = vec![0usize; lay.len()];
        for p in parts(&c).iter() {
            assert_eq!(p.offset, covered[p.tensor], "parts of tensor {} are not consecutive", p.tensor);
            covered[p.tensor] += p.len;
        }
        for (n, p) in covered.iter().zip(&lay) {
            assert_eq!(*n, p.elements(), "{}", p.name);
        }
        assert!(Fused::from_vec(vec![0u8; 2 + 6 * 3], 2).is_err());
    }
}
