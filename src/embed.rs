//! The embedding's backward, `d_table[v, c] += Σ_{r : ids[r] = v} d_out[r, c]`, in the form
//! that fills the GPU for the shape: one entry point, [`backward`], over the kernels of
//! `shaders/01_embedding.wgsl`.
//!
//! Each table row's sum is taken by the workgroups that own that row (key-major, no float
//! atomics), so its time is set by the longest chain of rows one workgroup adds. A large
//! vocabulary (GPT-2's 50304) already gives tens of thousands of workgroups and every row's
//! chain is short: [`backward`] records `embedding::embed_backward`, all rows at once into
//! `d_table`. A small one (the bytes tokenizer's 256) gives a few hundred, and a frequent byte
//! matches about one row in eight: there the rows are cut into slices ([`Params::slice_rows`]),
//! `embedding::embed_backward_slices` writes each slice's partial sums and hit counts to the
//! [`Scratch`], and `embedding::embed_backward_reduce` adds the slices in order into `d_table`.
//! Both forms are deterministic, bit for bit: a fixed order of summation (increasing row; with
//! slices, increasing row within a slice, then increasing slice): the two forms may differ in
//! the last bits on the same inputs, each repeats exactly. The form depends on the shape alone,
//! not on the adapter.
//!
//! ```no_run
//! use kernels::embed::{self, Params, Scratch};
//! # fn main() -> kernels::Result<()> {
//! let gpu = kernels::Gpu::new()?;
//! let p = Params::new(8192, 768, 256);
//! let (d_out, ids) = (gpu.zeros::<f32>(8192 * 768)?, gpu.zeros::<u32>(8192)?);
//! let mut d_table = gpu.zeros::<f32>(256 * 768)?;
//! let mut scratch = Scratch::new(&gpu, p)?;
//! let batch = gpu.batch();
//! embed::backward(&batch, &d_out, &ids, &mut d_table, &mut scratch, p)?;
//! batch.submit()?;
//! # Ok(()) }
//! ```

use crate::embedding::{embed_backward, embed_backward_reduce, embed_backward_slices};
use crate::fast_attention::check_len;
use crate::{Buffer, Error, Gpu, Record, Result};

/// The workgroups the sliced form aims for: a few per SM slot of a large GPU (an H200 keeps
/// about a thousand 256-wide workgroups resident), so the heaviest slices overlap the rest.
pub const TARGET_WORKGROUPS: u64 = 4096;
/// The fewest rows a slice is cut down to: below this a slice's walk is mostly its barriers.
pub const SLICE_ROWS_MIN: u32 = 256;
/// The most bytes of partial sums the sliced form uses (slices · vocab · dim floats).
pub const SCRATCH_BYTES_MAX: u64 = 64 << 20;
/// Columns one backward workgroup owns (`BWD_COLS` of the kernel file).
const COLS: u32 = 1024;

/// The shape of an embedding backward: `rows` token ids and dOut rows, `dim` columns, `vocab`
/// table rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Token rows (ids and dOut rows).
    pub rows: u32,
    /// Columns of dOut and of the table.
    pub dim: u32,
    /// Table rows; ids ≥ vocab are ignored.
    pub vocab: u32,
}

impl Params {
    /// The shape of `rows` ids into a `[vocab, dim]` table.
    pub fn new(rows: u32, dim: u32, vocab: u32) -> Params {
        Params { rows, dim, vocab }
    }

    /// Rows per slice of the sliced form, or `None` for the one-pass form: enough slices to
    /// bring vocab · ⌈dim / 1024⌉ workgroups up to [`TARGET_WORKGROUPS`], no slice under
    /// [`SLICE_ROWS_MIN`] rows, and the partial sums within [`SCRATCH_BYTES_MAX`].
    pub fn slice_rows(&self) -> Option<u32> {
        let groups = self.vocab as u64 * self.dim.div_ceil(COLS) as u64;
        if groups == 0 || self.rows == 0 {
            return None;
        }
        let by_grid = TARGET_WORKGROUPS.div_ceil(groups);
        let by_rows = self.rows.div_ceil(SLICE_ROWS_MIN) as u64;
        let by_bytes = SCRATCH_BYTES_MAX / (4 * self.vocab as u64 * self.dim as u64);
        let slices = by_grid.min(by_rows).min(by_bytes);
        (slices > 1).then(|| self.rows.div_ceil(slices as u32))
    }

    /// The slices of the sliced form (1 for the one-pass form).
    pub fn slices(&self) -> u32 {
        self.slice_rows().map_or(1, |s| self.rows.div_ceil(s))
    }

    /// Dispatches [`backward`] records: 2 for the sliced form, 1 for the one-pass form.
    pub fn dispatches(&self) -> usize {
        if self.slice_rows().is_some() { 2 } else { 1 }
    }

    /// Floats of partial sums and u32 hit counts [`Scratch`] needs for this shape (both 0 for
    /// the one-pass form).
    pub fn scratch_len(&self) -> (usize, usize) {
        match self.slice_rows() {
            Some(_) => {
                let sv = self.slices() as usize * self.vocab as usize;
                (sv * self.dim as usize, sv)
            }
            None => (0, 0),
        }
    }
}

/// The sliced form's workspace: partial sums `[slices, vocab, dim]` and hit counts `[slices,
/// vocab]`. Allocate once per shape; its contents between calls do not matter.
pub struct Scratch {
    partial: Buffer<f32>,
    hits: Buffer<u32>,
}

impl Scratch {
    /// The workspace for shape `p` (one-element buffers where the one-pass form runs).
    pub fn new(gpu: &Gpu, p: Params) -> Result<Scratch> {
        Scratch::for_shapes(gpu, [p])
    }

    /// One workspace large enough for each of `shapes`.
    pub fn for_shapes(gpu: &Gpu, shapes: impl IntoIterator<Item = Params>) -> Result<Scratch> {
        let (floats, counts) =
            shapes.into_iter().map(|p| p.scratch_len()).fold((1, 1), |(f, c), (pf, pc)| (f.max(pf), c.max(pc)));
        Ok(Scratch { partial: gpu.zeros(floats)?, hits: gpu.zeros(counts)? })
    }

    /// Whether this workspace is large enough for shape `p`.
    pub fn fits(&self, p: Params) -> bool {
        let (floats, counts) = p.scratch_len();
        self.partial.len() >= floats && self.hits.len() >= counts
    }
}

/// `d_table[v, c] += Σ_{r : ids[r] = v} d_out[r, c]` for v < vocab, c < dim: `d_out [rows,
/// dim]`, `ids [rows]`, `d_table [vocab, dim]`, accumulated into (the tied head's gradient may
/// already be there). Ids ≥ vocab are ignored; rows of `d_table` whose id does not occur are
/// not written. Records [`Params::dispatches`] dispatches; every length (the scratch's for the
/// shape too) is checked before anything is recorded.
pub fn backward(
    rec: impl Record + Copy,
    d_out: &Buffer<f32>,
    ids: &Buffer<u32>,
    d_table: &mut Buffer<f32>,
    scratch: &mut Scratch,
    p: Params,
) -> Result<()> {
    let what = "embed::backward";
    let (rows, dim, vocab) = (p.rows as usize, p.dim as usize, p.vocab as usize);
    check_len(what, "d_out", d_out.len(), rows * dim, "rows·dim")?;
    check_len(what, "ids", ids.len(), rows, "rows")?;
    check_len(what, "d_table", d_table.len(), vocab * dim, "vocab·dim")?;
    match p.slice_rows() {
        None => embed_backward(rec, d_out, ids, d_table, embed_backward::Params::new(p.rows, p.dim, p.vocab)),
        Some(slice_rows) => {
            if !scratch.fits(p) {
                let (floats, counts) = p.scratch_len();
                return Err(Error::Shape {
                    kernel: what.to_string(),
                    requirement: format!("a Scratch of {floats} partial sums and {counts} counts"),
                    detail: format!(
                        "it holds {} and {}: make it with Scratch::new for this shape",
                        scratch.partial.len(),
                        scratch.hits.len()
                    ),
                });
            }
            let sp = embed_backward_slices::Params::new(p.rows, p.dim, p.vocab, slice_rows);
            embed_backward_slices(rec, d_out, ids, &mut scratch.partial, &mut scratch.hits, sp)?;
            let rp = embed_backward_reduce::Params::new(p.dim, p.vocab, p.slices());
            embed_backward_reduce(rec, &scratch.partial, &scratch.hits, d_table, rp)
        }
    }
}
