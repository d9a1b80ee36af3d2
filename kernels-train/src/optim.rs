//! Which optimizer a run updates its weights with, and the host form of the 8-bit one's state.
//!
//! - [`OptimizerKind::AdamW`]: AdamW with f32 moments (`kernels::optimizer::adamw_update`, or
//!   `kernels::optimizer::adamw_mixed` in mixed precision): 8 bytes of state per parameter.
//! - [`OptimizerKind::AdamW8bit`]: the same update with both moments stored as 8-bit codes in
//!   blocks of 256 values, each block with an f32 absmax scale for m and one for √v
//!   (`kernels::optimizer::adamw_8bit_update`): 2 bytes and 1/32 of a byte per parameter. f32
//!   precision only (the mixed path's fused update keeps f32 moments).

use crate::Error;

/// Values per block of one 8-bit scale pair (`QBLOCK` of `shaders/12_optimizer.wgsl`).
pub const QBLOCK: usize = 256;

/// The optimizer of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptimizerKind {
    /// AdamW with f32 moments.
    #[default]
    AdamW,
    /// AdamW with block-quantized 8-bit moments.
    AdamW8bit,
}

impl OptimizerKind {
    /// The name on the command line and in a checkpoint's `optimizer` metadata.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::AdamW8bit => "adamw-8bit",
        }
    }

    /// The kind named `name` ([`OptimizerKind::name`]).
    pub fn from_name(name: &str) -> Option<OptimizerKind> {
        [OptimizerKind::AdamW, OptimizerKind::AdamW8bit].into_iter().find(|k| k.name() == name)
    }

    /// Bytes of optimizer state a tensor of `n` values takes.
    pub fn state_bytes(self, n: usize) -> u64 {
        match self {
            OptimizerKind::AdamW => 8 * n as u64,
            OptimizerKind::AdamW8bit => 2 * 4 * n.div_ceil(4) as u64 + 8 * n.div_ceil(QBLOCK) as u64,
        }
    }
}

/// One tensor's 8-bit AdamW state: the m and √v codes, one byte per value in value order (the
/// bytes the kernel packs four to a word, little end first), and (m scale, √v scale) per block of
/// [`QBLOCK`] values (the kernel's `qscale`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Moments8 {
    /// Signed m codes (two's complement), one per value.
    pub mq: Vec<u8>,
    /// Unsigned √v codes, one per value.
    pub vq: Vec<u8>,
    /// `[2b]` = block b's max |m|, `[2b + 1]` = its max √v.
    pub qscale: Vec<f32>,
}

impl Moments8 {
    /// The state of a tensor of `n` values before its first step (all zeros).
    pub fn zeros(n: usize) -> Moments8 {
        Moments8 { mq: vec![0; n], vq: vec![0; n], qscale: vec![0.0; 2 * n.div_ceil(QBLOCK)] }
    }

    /// Whether this is the state of a tensor of `n` values.
    pub fn fits(&self, n: usize) -> bool {
        self.mq.len() == n && self.vq.len() == n && self.qscale.len() == 2 * n.div_ceil(QBLOCK)
    }

    /// The codes as the kernel's words (the last word's bytes past the end zero).
    pub fn words(codes: &[u8]) -> Vec<u32> {
        codes.chunks(4).map(|c| c.iter().enumerate().fold(0u32, |w, (k, &b)| w | (b as u32) << (8 * k))).collect()
    }

    /// The first `n` codes of the kernel's words.
    pub fn codes(words: &[u32], n: usize) -> Result<Vec<u8>, Error> {
        if words.len() < n.div_ceil(4) {
            return Err(Error::Config(format!("{} code words hold fewer than {n} codes", words.len())));
        }
        Ok(words.iter().flat_map(|w| w.to_le_bytes()).take(n).collect())
    }
}
