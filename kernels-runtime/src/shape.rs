//! Arithmetic for the checks and grids that `@requires` / `@grid` annotations compile to.
//! `None` stands for an overflow or a division by zero.

use crate::error::{Error, Result};
use crate::grid::Grid;

type N = Option<i128>;

/// `a + b`
pub fn add(a: N, b: N) -> N {
    a?.checked_add(b?)
}
/// `a - b`
pub fn sub(a: N, b: N) -> N {
    a?.checked_sub(b?)
}
/// `a * b`
pub fn mul(a: N, b: N) -> N {
    a?.checked_mul(b?)
}
/// `a / b`
pub fn div(a: N, b: N) -> N {
    a?.checked_div(b?)
}
/// `a % b`
pub fn rem(a: N, b: N) -> N {
    a?.checked_rem(b?)
}
/// `⌈a / b⌉` for non-negative operands.
pub fn ceil_div(a: N, b: N) -> N {
    let (a, b) = (a?, b?);
    if b <= 0 || a < 0 {
        return None;
    }
    Some(a / b + i128::from(a % b != 0))
}
/// `min(a, b)`
pub fn min(a: N, b: N) -> N {
    Some(a?.min(b?))
}
/// `max(a, b)`
pub fn max(a: N, b: N) -> N {
    Some(a?.max(b?))
}

/// `>=`
pub fn ge(a: i128, b: i128) -> bool {
    a >= b
}
/// `>`
pub fn gt(a: i128, b: i128) -> bool {
    a > b
}
/// `<=`
pub fn le(a: i128, b: i128) -> bool {
    a <= b
}
/// `<`
pub fn lt(a: i128, b: i128) -> bool {
    a < b
}
/// `==`
pub fn eq(a: i128, b: i128) -> bool {
    a == b
}
/// `!=`
pub fn ne(a: i128, b: i128) -> bool {
    a != b
}

fn show(v: N) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "overflow or division by zero".into())
}

/// Checks one `@requires`.
pub fn require(
    kernel: &str,
    text: &str,
    ltext: &str,
    l: N,
    rtext: &str,
    r: N,
    op: fn(i128, i128) -> bool,
) -> Result<()> {
    match (l, r) {
        (Some(a), Some(b)) if op(a, b) => Ok(()),
        _ => Err(Error::Shape {
            kernel: kernel.to_string(),
            requirement: text.to_string(),
            detail: format!("{ltext} = {}, {rtext} = {}", show(l), show(r)),
        }),
    }
}

fn count(kernel: &str, text: &str, v: N) -> Result<u64> {
    v.and_then(|v| u64::try_from(v).ok()).ok_or_else(|| Error::Shape {
        kernel: kernel.to_string(),
        requirement: format!("@grid {text}"),
        detail: format!("the grid size is {}", show(v)),
    })
}

/// `@grid threads(n)`
pub fn threads(kernel: &str, text: &str, n: N) -> Result<Grid> {
    Ok(Grid::Threads(count(kernel, text, n)?))
}

/// `@grid workgroups(n)`
pub fn workgroups(kernel: &str, text: &str, n: N) -> Result<Grid> {
    Ok(Grid::Workgroups(count(kernel, text, n)?))
}

/// `@grid workgroups(x, y, z)`
pub fn explicit(kernel: &str, text: &str, g: [N; 3]) -> Result<Grid> {
    let mut out = [0u32; 3];
    for (o, v) in out.iter_mut().zip(g) {
        let c = count(kernel, text, v)?;
        *o = u32::try_from(c).map_err(|_| Error::GridTooLarge {
            kernel: kernel.to_string(),
            detail: format!("`{text}` = {c} in one dimension"),
            limit: u32::MAX,
        })?;
    }
    Ok(Grid::Explicit(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_arithmetic() {
        assert_eq!(ceil_div(Some(7), Some(2)), Some(4));
        assert_eq!(ceil_div(Some(8), Some(2)), Some(4));
        assert_eq!(ceil_div(Some(8), Some(0)), None);
        assert_eq!(mul(Some(i128::MAX), Some(2)), None);
        assert!(require("m::k", "len(x) >= n", "len(x)", Some(3), "n", Some(4), ge).is_err());
        assert!(require("m::k", "len(x) >= n", "len(x)", Some(4), "n", Some(4), ge).is_ok());
        let e = require("m::k", "a == b", "a", None, "b", Some(1), eq).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
        assert!(explicit("k", "w", [Some(1), Some(-1), Some(1)]).is_err());
    }
}
