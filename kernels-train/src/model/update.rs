//! The update: global gradient-norm clipping and AdamW (f32 or 8-bit state), which also zeroes
//! the gradients.

use super::alloc::State;
use super::products::rows_cols;
use super::{B, Model};
use crate::Error;
use crate::config::TrainConfig;
use kernels::Batch;
use kernels::optimizer::{
    adamw_8bit_update, adamw_update, adamw_update_absmax, finalize_grad_stats, reduce_norm_sq, reduce_norm_sq4,
};

impl Model {
    /// Records global-norm clipping and AdamW for step `step` (0-based); zeroes the gradients.
    pub(super) fn record_update(&mut self, b: &Batch<'_>, t: &TrainConfig, step: u64) -> Result<(), Error> {
        let Model { cfg, layout, params, grads, opt, half, w16, halves, .. } = self;
        // The gradients' partial sums of squares, four tensors a dispatch (their partials are
        // consecutive, as `reduce_norm_sq4` writes them); the rest one at a time.
        let gs: Vec<&B> = grads.iter().collect();
        let offsets: Vec<u32> = opt.norm_offsets.iter().copied().collect();
        let mut four = gs.chunks_exact(4);
        for (g, &offset) in four.by_ref().zip(offsets.iter().step_by(4)) {
            let n = |k: usize| g[k].len() as u32;
            let np = kernels::optimizer::reduce_norm_sq4::Params::new(n(0), n(1), n(2), n(3), offset);
            reduce_norm_sq4(b, g[0], g[1], g[2], g[3], &mut opt.norm_partials, &mut opt.norm_bad, np)?;
        }
        let done = gs.len() - four.remainder().len();
        for (gr, &offset) in four.remainder().iter().zip(&offsets[done..]) {
            let np = kernels::optimizer::reduce_norm_sq::Params::new(gr.len() as u32, offset);
            reduce_norm_sq(b, gr, &mut opt.norm_partials, &mut opt.norm_bad, np)?;
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
            let tensors = params.iter_mut().zip(grads.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut());
            for (((((w, g), m), v), w16), p) in tensors.zip(w16.iter_mut()).zip(layout.iter()) {
                let wd = if p.decays() { t.weight_decay } else { 0.0 };
                let (rows, cols) = rows_cols(&p.shape);
                let a = kernels::optimizer::adamw_mixed::AdamParams::new(
                    rows as u32,
                    cols as u32,
                    lr,
                    t.beta1,
                    t.beta2,
                    t.eps,
                    wd,
                    number,
                    ln1,
                    ln2,
                );
                kernels::optimizer::adamw_mixed(b, w, g, m, v, w16, &h.state, a)?;
            }
            return Ok(());
        }
        // The split mode: each matrix's update folds its new largest magnitude into its scale
        // word (cleared first), and its halves for the next step's products are split by it.
        if let Some(h) = halves.as_mut() {
            h.clear(b)?;
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
                None => {
                    let a =
                        kernels::optimizer::adamw_update::Params::new(n, lr, t.beta1, t.beta2, t.eps, wd, bias1, bias2);
                    adamw_update(b, w, g, m, v, &opt.stats, a)?;
                }
            }
        }
        if let Some(h) = halves {
            h.split_scaled(b, params)?;
        }
        Ok(())
    }
}
