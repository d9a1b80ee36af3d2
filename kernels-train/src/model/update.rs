//! The update: global gradient-norm clipping and AdamW (f32 or 8-bit state), which also zeroes
//! the gradients.

use super::alloc::State;
use super::arena::Pages;
use super::products::rows_cols;
use super::{B, Model};
use crate::Error;
use crate::config::TrainConfig;
use kernels::Batch;
use kernels::optimizer::{adamw_8bit_update, adamw_update, adamw_update_absmax, finalize_grad_stats, reduce_norm_sq};

impl Model {
    /// Records global-norm clipping and AdamW for step `step` (0-based); zeroes the gradients.
    pub(super) fn record_update(&mut self, b: &Batch<'_>, t: &TrainConfig, step: u64) -> Result<(), Error> {
        let Model { cfg, layout, params, grads, pages, opt, half, w16, wt16, halves, .. } = self;
        // The gradients' partial sums of squares, one dispatch per page (the gaps between
        // tensors hold zeros).
        let mut offset = 0u32;
        for g in &pages.grad_pages {
            let np = kernels::optimizer::reduce_norm_sq::Params::new(g.len() as u32, offset);
            reduce_norm_sq(b, g, &mut opt.norm_partials, &mut opt.norm_bad, np)?;
            offset += g.len().div_ceil(kernels::optimizer::NORM_BLOCK as usize) as u32;
        }
        let count = opt.norm_partials.len() as u32;
        let fp = kernels::optimizer::finalize_grad_stats::Params::new(count, t.clip);
        finalize_grad_stats(b, &opt.norm_partials, &opt.norm_bad, &mut opt.stats, fp)?;
        let tt = (step + 1) as i32;
        let bias1 = (1.0 - (t.beta1 as f64).powi(tt)) as f32;
        let bias2 = (1.0 - (t.beta2 as f64).powi(tt)) as f32;
        let lr = t.lr_at(step as usize);
        let (m, v) = match &mut opt.state {
            State::AdamW { m, v } => (m, v),
            State::AdamW8bit { mq, vq, qscale } => {
                if half.is_some() {
                    return Err(Error::Config("AdamW-8bit runs in f32 precision only".into()));
                }
                // Each LLaMA-layout tensor's update over its range of the fused weight, with its
                // own 8-bit state (`alloc::State::AdamW8bit`).
                let (mut fused_w, mut fused_g): (Vec<&mut B>, Vec<&mut B>) =
                    (params.iter_mut().collect(), grads.iter_mut().collect());
                let llama = crate::params::layout(cfg);
                let parts = crate::params::fused::parts(cfg);
                let state = mq.iter_mut().zip(vq.iter_mut()).zip(qscale.iter_mut());
                for ((p, part), ((mq, vq), qs)) in llama.iter().zip(parts.iter()).zip(state) {
                    let wd = if p.decays() { t.weight_decay } else { 0.0 };
                    let (n, at) = (part.len as u32, part.offset as u32);
                    let h = adamw_8bit_update::Params::new(n, lr, t.beta1, t.beta2, t.eps, wd, bias1, bias2, at);
                    let (w, g) = (&mut *fused_w[part.tensor], &mut *fused_g[part.tensor]);
                    adamw_8bit_update(b, w, g, mq, vq, qs, &opt.stats, h)?;
                }
                if let Some(h) = halves {
                    h.record(b, params)?;
                }
                return Ok(());
            }
        };
        if let (Some(h), Some(w16)) = (half.as_mut(), w16.as_mut()) {
            // Mixed precision: the scaler decides skip or not and this step's gradient factor
            // (clip / loss scale), then AdamW updates the masters and rewrites the f16 copies.
            // `optimizer::adamw_mixed` takes Adam's step count as this step's number less the steps
            // the scaler has skipped (its state on the GPU), so a skipped step does not advance
            // the bias correction, as PyTorch's GradScaler skips `optimizer.step()`; the learning
            // rate follows the step number, skipped steps included (PyTorch's scheduler steps).
            let sp = kernels::optimizer::scaler_update::ScalerParams::new(h.growth_interval, t.clip);
            kernels::optimizer::scaler_update(b, &opt.stats, &mut h.flag, &mut h.state, sp)?;
            let number = u32::try_from(step + 1).ok().filter(|&n| n < 1 << 24).ok_or_else(|| {
                Error::Config(format!("mixed precision counts steps below 2^24; this is step {}", step + 1))
            })?;
            let (ln1, ln2) = ((t.beta1 as f64).ln() as f32, (t.beta2 as f64).ln() as f32);
            let adam = |rows: usize, cols: usize, decays: bool| {
                let wd = if decays { t.weight_decay } else { 0.0 };
                let (rows, cols) = (rows as u32, cols as u32);
                kernels::optimizer::adamw_mixed::AdamParams::new(
                    rows, cols, lr, t.beta1, t.beta2, t.eps, wd, number, ln1, ln2,
                )
            };
            if let Some(runs) = pages.placement.runs() {
                // Each run as one row: its tensors' f16x4 rows are contiguous, and the gaps
                // between them stay zero (zero weight, gradient and moments).
                let Pages { params, grads, m, v, w16, .. } = pages;
                let all =
                    params.iter_mut().zip(grads.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut()).zip(w16.iter_mut());
                for (((((w, g), m), v), w16), run) in all.zip(runs) {
                    let a = adam(1, run.range.len(), run.decays);
                    kernels::optimizer::adamw_mixed(b, w, g, m, v, w16, &h.state, a)?;
                }
            } else {
                let tensors = params.iter_mut().zip(grads.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut());
                for (((((w, g), m), v), w16), p) in tensors.zip(w16.iter_mut()).zip(layout.iter()) {
                    let (rows, cols) = rows_cols(&p.shape);
                    kernels::optimizer::adamw_mixed(b, w, g, m, v, w16, &h.state, adam(rows, cols, p.decays()))?;
                }
            }
            // The transposed copies from the new f16 copies (a skipped step rewrites the same).
            if let Some(t) = wt16 {
                t.record(b)?;
            }
            return Ok(());
        }
        // The split mode: each matrix's update folds its new largest magnitude into its scale
        // word (cleared first), and its halves for the next step's products are split by it.
        if let Some(h) = halves.as_mut() {
            h.clear(b)?;
        }
        let step_of = |decays: bool, n: usize| {
            let wd = if decays { t.weight_decay } else { 0.0 };
            kernels::optimizer::adamw_update::Params::new(n as u32, lr, t.beta1, t.beta2, t.eps, wd, bias1, bias2)
        };
        if let (None, Some(runs)) = (halves.as_ref(), pages.placement.runs()) {
            // The SGEMM's f32 update: one dispatch per run.
            let Pages { params, grads, m, v, .. } = pages;
            let all = params.iter_mut().zip(grads.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut());
            for ((((w, g), m), v), run) in all.zip(runs) {
                adamw_update(b, w, g, m, v, &opt.stats, step_of(run.decays, run.range.len()))?;
            }
            return Ok(());
        }
        let tensors = params.iter_mut().zip(grads.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut());
        for (i, ((((w, g), m), v), p)) in tensors.zip(layout.iter()).enumerate() {
            let wd = if p.decays() { t.weight_decay } else { 0.0 };
            let n = w.len() as u32;
            match halves.as_mut().and_then(|h| h.slot(i).map(|slot| (h, slot))) {
                Some((h, slot)) => {
                    let a = kernels::optimizer::adamw_update_absmax::AbsmaxParams::new(
                        n,
                        lr,
                        t.beta1,
                        t.beta2,
                        t.eps,
                        wd,
                        bias1,
                        bias2,
                        slot as u32,
                    );
                    adamw_update_absmax(b, w, g, m, v, &opt.stats, &mut h.scales, a)?;
                }
                None => adamw_update(b, w, g, m, v, &opt.stats, step_of(p.decays(), n as usize))?,
            }
        }
        if let Some(h) = halves {
            h.split_scaled(b, params)?;
        }
        Ok(())
    }
}
