//! Where the per-parameter buffers live: each kind (weights, gradients, AdamW's moments, the
//! f16 copies) in a few large allocations ("pages"), every fused tensor a part of one
//! (`kernels::Buffer::part`) at the same element start in each kind. The products, norms and
//! checkpoints bind the parts as before; the update and the gradient norm bind whole runs of
//! tensors instead, so a step spends a handful of dispatches on them rather than a few per
//! tensor.
//!
//! The tensors that decay come first, then those that do not (the norms' gains), so each page
//! holds at most two runs of one weight decay ([`Run`]). Pages close when the next tensor would
//! take one past what a storage binding may span (in a browser, 128 MiB by default), so a run is
//! always bindable. Starts lie on the device's storage offset alignment for f16 as well as f32
//! elements, so the f16 copies' parts start at the same element as their masters'.

use super::B;
use crate::Error;
use crate::params::Param;
use crate::params::fused::Fused;
use kernels::ops::{F16x4, Transpose, f16x4_len};
use kernels::{Buffer, Element, Gpu};
use std::ops::Range;

/// A run of consecutive tensors of one page with one weight decay: one dispatch of the update.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Run {
    pub page: usize,
    /// Elements of the page, from the first tensor's start to the end of the last one's slot.
    pub range: Range<usize>,
    pub decays: bool,
}

/// The norms' gains as one run at one stride ([`Placement::gains_run`]).
pub(super) struct GainsRun {
    pub gains: Vec<usize>,
    pub run: usize,
    pub stride: usize,
}

/// Where every fused tensor lies: its page and start, and each page's length, in f32 elements.
pub(super) struct Placement {
    /// Per tensor in the fused order: (page, start).
    at: Vec<(usize, usize)>,
    /// Per tensor: its slot (its elements; in mixed precision its f16x4 rows' span when that is
    /// larger).
    lens: Vec<usize>,
    pages: Vec<usize>,
    runs: Vec<Run>,
    /// Whether the runs may be updated as one vector each: every tensor's f16x4 rows are
    /// contiguous (its columns a multiple of 4), or there are no f16 copies.
    flat: bool,
}

impl Placement {
    /// Places `layout`'s tensors (with their f16 copies' padding when `half`).
    pub fn new(gpu: &Gpu, layout: &Fused<Param>, half: bool) -> Placement {
        let params: Vec<&Param> = layout.iter().collect();
        let lens: Vec<usize> = params
            .iter()
            .map(|p| {
                let (r, c) = super::products::rows_cols(&p.shape);
                // The f16 copy's padded rows, and a matrix's transposed copy's
                // ([`Placement::allocate_transposed`]).
                let t = if p.shape.len() == 2 { f16x4_len(c, r) } else { 0 };
                if half { p.elements().max(4 * f16x4_len(r, c)).max(4 * t) } else { p.elements() }
            })
            .collect();
        let flat = !half || params.iter().all(|p| super::products::rows_cols(&p.shape).1.is_multiple_of(4));
        // Aligned for f16 elements, which aligns f32 ones too.
        let step = (gpu.storage_alignment() as usize).div_ceil(2);
        let r = gpu.report();
        let limit = (r.max_storage_binding.min(r.max_buffer_size) / 4) as usize / step * step;
        let order: Vec<usize> = (0..params.len())
            .filter(|&i| params[i].decays())
            .chain((0..params.len()).filter(|&i| !params[i].decays()))
            .collect();
        let mut at = vec![(0, 0); params.len()];
        let mut pages: Vec<usize> = vec![0];
        let mut runs: Vec<Run> = Vec::new();
        for &i in &order {
            let slot = lens[i].next_multiple_of(step).max(step);
            let page = pages.len() - 1;
            if pages[page] > 0 && pages[page] + slot > limit {
                pages.push(0);
            }
            let page = pages.len() - 1;
            let start = pages[page];
            pages[page] += slot;
            at[i] = (page, start);
            let decays = params[i].decays();
            match runs.last_mut() {
                Some(run) if run.page == page && run.decays == decays => run.range.end = start + slot,
                _ => runs.push(Run { page, range: start..start + slot, decays }),
            }
        }
        Placement { at, lens, pages, runs, flat }
    }

    /// The runs of one weight decay, when every tensor can be updated in them; `None` when some
    /// must be updated on its own (f16 rows with padding).
    pub fn runs(&self) -> Option<&[Run]> {
        self.flat.then_some(&self.runs[..])
    }

    /// Where tensor `i` (fused order) lies: its page and its start in f32 elements.
    pub fn at(&self, i: usize) -> (usize, usize) {
        self.at[i]
    }

    /// Every run, whether or not the update may use them ([`Placement::runs`]).
    pub fn all_runs(&self) -> &[Run] {
        &self.runs
    }

    /// The run that holds every tensor that does not decay — the norms' gains, all of `len`
    /// elements — at one stride, when there is exactly one: the gains' indices (fused order, as
    /// they lie in the run), the run's index among [`Placement::all_runs`] and the stride in
    /// elements.
    pub fn gains_run(&self, layout: &Fused<Param>, len: usize) -> Option<GainsRun> {
        let gains: Vec<usize> = layout.iter().enumerate().filter(|(_, p)| !p.decays()).map(|(i, _)| i).collect();
        let runs: Vec<usize> = (0..self.runs.len()).filter(|&r| !self.runs[r].decays).collect();
        let (&[run], Some(&first)) = (&runs[..], gains.first()) else { return None };
        let stride = self.at.get(gains.get(1).copied()?).map_or(0, |a| a.1) - self.at[first].1;
        let even =
            gains.iter().enumerate().all(|(t, &i)| self.at[i] == (self.runs[run].page, self.at[first].1 + t * stride));
        (even && stride >= len).then_some(GainsRun { gains, run, stride })
    }

    /// Each page's length in f32 elements.
    pub fn pages(&self) -> &[usize] {
        &self.pages
    }

    /// One kind's pages, zeroed or holding `data` (per tensor in the fused order, each of the
    /// tensor's elements), and each tensor's part.
    pub fn allocate(
        &self,
        gpu: &Gpu,
        layout: &Fused<Param>,
        data: Option<&Fused<Vec<f32>>>,
    ) -> Result<Kind<f32>, Error> {
        let mut kind = self.pages_of::<f32>(gpu, layout, 1, |p| p.elements())?;
        if let Some(d) = data {
            for (part, v) in kind.parts.iter_mut().zip(d.iter()) {
                part.write(gpu, v)?;
            }
        }
        Ok(kind)
    }

    /// The f16 copies' pages (f16x4 units, a quarter of the f32 elements) and each tensor's part
    /// (its f16x4 rows).
    pub fn allocate_f16(&self, gpu: &Gpu, layout: &Fused<Param>) -> Result<Kind<F16x4>, Error> {
        self.pages_of::<F16x4>(gpu, layout, 4, |p| {
            let (r, c) = super::products::rows_cols(&p.shape);
            f16x4_len(r, c)
        })
    }

    /// The transposed f16 copies of the weight matrices `which` marks (fused order): pages as
    /// the f16 copies' (f16x4 units; a page with none of them gets a placeholder), each marked
    /// matrix `[rows, cols]`'s copy `[cols, rows]` starting at the element its f16 copy starts
    /// at, and per page the transposes that make the copies from the f16 copies' page.
    #[allow(clippy::type_complexity)]
    pub fn allocate_transposed(
        &self,
        gpu: &Gpu,
        layout: &Fused<Param>,
        which: &[bool],
    ) -> Result<(Vec<Buffer<F16x4>>, Fused<Option<Buffer<F16x4>>>, Vec<Vec<Transpose>>), Error> {
        let mut items: Vec<Vec<Transpose>> = vec![Vec::new(); self.pages.len()];
        let mut spans: Vec<Option<(usize, std::ops::Range<usize>)>> = Vec::new();
        for (i, p) in layout.iter().enumerate() {
            let span = match (&p.shape[..], which.get(i)) {
                (&[rows, cols], Some(true)) => {
                    let (page, start) = self.at[i];
                    debug_assert!(4 * f16x4_len(cols, rows) <= self.lens[i]);
                    items[page].push(Transpose { src: start / 4, dst: start / 4, rows, cols });
                    Some((page, start / 4..start / 4 + f16x4_len(cols, rows)))
                }
                _ => None,
            };
            spans.push(span);
        }
        let whole: Vec<Buffer<F16x4>> = self
            .pages
            .iter()
            .zip(&items)
            .map(|(&n, items)| gpu.zeros::<F16x4>(if items.is_empty() { 1 } else { n / 4 }))
            .collect::<Result<_, _>>()?;
        let mut spans = spans.into_iter();
        let parts = layout.as_ref().try_map(|_| -> Result<Option<Buffer<F16x4>>, Error> {
            match spans.next().flatten() {
                Some((page, range)) => Ok(Some(whole[page].part(range)?)),
                None => Ok(None),
            }
        })?;
        Ok((whole, parts, items))
    }

    /// Zeroed pages of `T`, each tensor's part at its start divided by `per` (the f32 elements
    /// one `T` stands for), `len` long.
    fn pages_of<T: Element>(
        &self,
        gpu: &Gpu,
        layout: &Fused<Param>,
        per: usize,
        len: impl Fn(&Param) -> usize,
    ) -> Result<Kind<T>, Error> {
        let whole: Vec<Buffer<T>> = self.pages.iter().map(|&n| gpu.zeros::<T>(n / per)).collect::<Result<_, _>>()?;
        let mut i = 0;
        let parts = layout.as_ref().try_map(|p| -> Result<Buffer<T>, Error> {
            let (page, start) = self.at[i];
            debug_assert!(len(p) * per <= self.lens[i].next_multiple_of(per));
            i += 1;
            Ok(whole[page].part(start / per..start / per + len(p))?)
        })?;
        Ok(Kind { whole, parts })
    }
}

/// One kind of per-parameter buffer: its pages and each tensor's part of them.
pub(super) struct Kind<T> {
    pub whole: Vec<Buffer<T>>,
    pub parts: Fused<Buffer<T>>,
}

impl<T: Element> Kind<T> {
    /// The parts of the pages that `runs` span, elements divided by `per` (4 for f16x4 pages).
    pub fn runs(&self, runs: &[Run], per: usize) -> Result<Vec<Buffer<T>>, Error> {
        runs.iter().map(|r| Ok(self.whole[r.page].part(r.range.start / per..r.range.end / per)?)).collect()
    }
}

/// The update's view of the pages: per run of the placement, the part of each kind's page it
/// spans; and the gradients' whole pages, which the gradient norm reads.
pub(super) struct Pages {
    pub placement: Placement,
    pub grad_pages: Vec<B>,
    pub params: Vec<B>,
    /// Every run's gradients ([`Placement::all_runs`]; the other kinds' runs are those of
    /// [`Placement::runs`], empty when it is `None`).
    pub grads: Vec<B>,
    /// AdamW's moments (empty for AdamW-8bit, whose state is per LLaMA-layout tensor).
    pub m: Vec<B>,
    pub v: Vec<B>,
    /// Mixed precision: the f16 copies.
    pub w16: Vec<Buffer<F16x4>>,
}
