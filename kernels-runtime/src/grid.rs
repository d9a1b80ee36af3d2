//! Grids: how many workgroups a call dispatches, and the 2-D fallback of `dispatch_1d`.

use crate::error::{Error, Result};

/// The grid of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grid {
    /// `n` invocations in a 1-D layout: ⌈n / workgroup size⌉ workgroups through
    /// [`dispatch_1d`]. The kernel recovers its index with `flat_id` and guards the tail.
    Threads(u64),
    /// `n` workgroups through [`dispatch_1d`]; the kernel recovers its workgroup index as
    /// `wid.x + wid.y * nwg.x` and guards the tail.
    Workgroups(u64),
    /// An explicit grid; each dimension must be within the device's limit.
    Explicit([u32; 3]),
}

/// The dispatch for `n` workgroups: `(n, 1, 1)` up to `max` (the device's
/// `max_compute_workgroups_per_dimension`), otherwise two dimensions.
///
/// Past the limit the grid is `(x, y, 1)` with `y = ⌈n / max⌉` and `x = ⌈n / y⌉`: kernels
/// recover a linear index as `wid.x + wid.y · num_workgroups.x` and ignore indices ≥ n, and at
/// most `y - 1` workgroups are idle (where `(max, ⌈n / max⌉, 1)` would idle up to `max - 1`).
/// Past `max²` workgroups it is an error.
pub fn dispatch_1d(n: u64, max: u32) -> Option<[u32; 3]> {
    let max = max as u64;
    if n <= max {
        return Some([n as u32, 1, 1]);
    }
    let y = n.div_ceil(max);
    if y > max {
        return None;
    }
    let x = n.div_ceil(y);
    Some([x as u32, y as u32, 1])
}

impl Grid {
    /// The workgroup counts for a kernel with `threads_per_workgroup` invocations per
    /// workgroup on a device with `max` workgroups per dimension.
    pub fn resolve(self, kernel: impl Fn() -> String, threads_per_workgroup: u64, max: u32) -> Result<[u32; 3]> {
        let too_large = |detail: String| Error::GridTooLarge { kernel: kernel(), detail, limit: max };
        match self {
            Grid::Threads(n) => {
                let wg = n.div_ceil(threads_per_workgroup.max(1));
                dispatch_1d(wg, max).ok_or_else(|| {
                    too_large(format!("of {n} invocations ({wg} workgroups, more than {max}² even in two dimensions)"))
                })
            }
            Grid::Workgroups(n) => dispatch_1d(n, max)
                .ok_or_else(|| too_large(format!("of {n} workgroups (more than {max}² even in two dimensions)"))),
            Grid::Explicit(g) => {
                if g.iter().any(|&d| d > max) {
                    Err(too_large(format!("{}×{}×{}", g[0], g[1], g[2])))
                } else {
                    Ok(g)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_dimension_up_to_the_limit() {
        assert_eq!(dispatch_1d(0, 65535), Some([0, 1, 1]));
        assert_eq!(dispatch_1d(65535, 65535), Some([65535, 1, 1]));
    }

    #[test]
    fn two_dimensions_past_it_cover_every_workgroup() {
        for n in [65536u64, 65537, 131070, 131071, 1 << 24, 65535 * 65535] {
            let [x, y, z] = dispatch_1d(n, 65535).unwrap();
            assert_eq!(z, 1);
            assert!(x <= 65535 && y <= 65535);
            let total = x as u64 * y as u64;
            assert!(total >= n, "{n}: {x}×{y}");
            assert!(total - n < y as u64, "{n}: at most y-1 idle workgroups");
        }
        assert_eq!(dispatch_1d(65535 * 65535 + 1, 65535), None);
    }

    #[test]
    fn grids_are_checked() {
        assert_eq!(Grid::Threads(16_776_961).resolve(|| "k".into(), 256, 65535).unwrap(), [32768, 2, 1]);
        assert_eq!(Grid::Threads(1000).resolve(|| "k".into(), 256, 65535).unwrap(), [4, 1, 1]);
        assert!(Grid::Explicit([70000, 1, 1]).resolve(|| "k".into(), 1, 65535).is_err());
        assert!(Grid::Workgroups(u64::MAX).resolve(|| "k".into(), 1, 65535).is_err());
    }
}
