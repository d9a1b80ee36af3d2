//! Dynamic loss scaling for mixed precision: the state, its rule (the same as
//! `kernels::optimizer::scaler_update`, which applies it on the GPU inside every step, and as
//! PyTorch's GradScaler), and its settings.
//!
//! The loss gradient is multiplied by the scale S before the backward pass, so that small
//! gradients survive the f16 casts of the backward products; the optimizer divides by S again.
//! A step whose scaled gradients hold a NaN or an infinity, or overflow f16 where they are cast,
//! is skipped (weights and moments unchanged) and S halves; after `growth_interval` clean steps
//! in a row S doubles. The state lives in a GPU buffer (`optimizer::scaler_update`'s layout, below) and is
//! read back only for logging and checkpoints.

/// The initial loss scale (2¹⁶, PyTorch's default).
pub const INITIAL_SCALE: f32 = 65536.0;
/// Clean steps before the scale doubles (PyTorch's default).
pub const DEFAULT_GROWTH_INTERVAL: u32 = 1000;
/// Smallest scale (2⁻²⁴).
pub const MIN_SCALE: f32 = 5.960_464_5e-8;
/// Largest scale (2²⁴).
pub const MAX_SCALE: f32 = 16_777_216.0;
/// Floats of the GPU state buffer.
pub const STATE_LEN: usize = 8;

/// The loss scaler's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerState {
    /// The scale the next step's loss gradient is multiplied by.
    pub scale: f32,
    /// Clean steps since the scale last changed.
    pub clean_steps: u32,
    /// Steps skipped so far (non-finite or overflowing gradients).
    pub skipped: u32,
    /// Whether the last step was skipped.
    pub last_skipped: bool,
}

impl Default for ScalerState {
    fn default() -> Self {
        ScalerState { scale: INITIAL_SCALE, clean_steps: 0, skipped: 0, last_skipped: false }
    }
}

impl ScalerState {
    /// One step of the rule: `overflow` (non-finite or f16-overflowing scaled gradients) skips
    /// the step and halves the scale; otherwise the step counts as clean, and the
    /// `growth_interval`-th clean step in a row doubles it. Returns whether the step was applied.
    pub fn step(&mut self, overflow: bool, growth_interval: u32) -> bool {
        if overflow {
            self.scale = (self.scale * 0.5).max(MIN_SCALE);
            self.clean_steps = 0;
            self.skipped += 1;
            self.last_skipped = true;
            return false;
        }
        self.last_skipped = false;
        self.clean_steps += 1;
        if self.clean_steps >= growth_interval {
            self.scale = (self.scale * 2.0).min(MAX_SCALE);
            self.clean_steps = 0;
        }
        true
    }

    /// The GPU buffer's values (`optimizer::scaler_update`'s layout).
    pub fn to_gpu(&self) -> [f32; STATE_LEN] {
        let mut s = [0.0; STATE_LEN];
        s[0] = self.scale;
        s[1] = self.clean_steps as f32;
        s[2] = self.skipped as f32;
        s[3] = if self.last_skipped { 1.0 } else { 0.0 };
        s
    }

    /// From the GPU buffer's values; an error message when they cannot be a scaler's state.
    pub fn from_gpu(s: &[f32]) -> Result<ScalerState, String> {
        let [scale, clean, skipped, last, ..] = s[..] else {
            return Err(format!("a loss-scaler state of {} values (needs 4)", s.len()));
        };
        let count = |x: f32, what: &str| {
            if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 16_777_216.0 {
                Ok(x as u32)
            } else {
                Err(format!("the loss scaler's {what} is {x}, not a count"))
            }
        };
        let state = ScalerState {
            scale,
            clean_steps: count(clean, "clean-step count")?,
            skipped: count(skipped, "skip count")?,
            last_skipped: last != 0.0,
        };
        state.check()?;
        Ok(state)
    }

    /// Checks the scale is a power of two within [MIN_SCALE, MAX_SCALE].
    pub fn check(&self) -> Result<(), String> {
        let s = self.scale;
        if !(s.is_finite() && (MIN_SCALE..=MAX_SCALE).contains(&s) && s.log2().fract() == 0.0) {
            return Err(format!("the loss scale {s} is not a power of two in [2^-24, 2^24]"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_skips_and_halves() {
        let mut s = ScalerState { clean_steps: 7, ..ScalerState::default() };
        assert!(!s.step(true, 1000));
        assert_eq!(s, ScalerState { scale: 32768.0, clean_steps: 0, skipped: 1, last_skipped: true });
        assert!(!s.step(true, 1000));
        assert_eq!((s.scale, s.skipped), (16384.0, 2));
        assert!(s.step(false, 1000));
        assert_eq!(s, ScalerState { scale: 16384.0, clean_steps: 1, skipped: 2, last_skipped: false });
        let mut floor = ScalerState { scale: MIN_SCALE, ..ScalerState::default() };
        floor.step(true, 1000);
        assert_eq!(floor.scale, MIN_SCALE, "the scale never goes below 2^-24");
    }

    #[test]
    fn grows_after_the_interval_of_clean_steps() {
        let mut s = ScalerState { scale: 4.0, ..ScalerState::default() };
        for k in 1..3 {
            assert!(s.step(false, 3));
            assert_eq!((s.scale, s.clean_steps), (4.0, k));
        }
        s.step(false, 3);
        assert_eq!((s.scale, s.clean_steps), (8.0, 0));
        // An overflow restarts the count.
        s.step(false, 3);
        s.step(true, 3);
        s.step(false, 3);
        s.step(false, 3);
        assert_eq!((s.scale, s.clean_steps), (4.0, 2));
        s.step(false, 3);
        assert_eq!(s.scale, 8.0);
        let mut top = ScalerState { scale: MAX_SCALE, ..ScalerState::default() };
        top.step(false, 1);
        assert_eq!(top.scale, MAX_SCALE, "the scale never goes above 2^24");
    }

    #[test]
    fn gpu_layout_round_trips_and_bad_states_are_refused() {
        let s = ScalerState { scale: 1024.0, clean_steps: 12, skipped: 3, last_skipped: true };
        assert_eq!(ScalerState::from_gpu(&s.to_gpu()), Ok(s));
        assert!(ScalerState::from_gpu(&[1.0, 2.0]).is_err());
        assert!(ScalerState::from_gpu(&[3.0, 0.0, 0.0, 0.0]).is_err(), "not a power of two");
        assert!(ScalerState::from_gpu(&[f32::NAN, 0.0, 0.0, 0.0]).is_err());
        assert!(ScalerState::from_gpu(&[1.0, -1.0, 0.0, 0.0]).is_err());
        assert!(ScalerState::from_gpu(&[1.0, 0.5, 0.0, 0.0]).is_err());
    }
}
