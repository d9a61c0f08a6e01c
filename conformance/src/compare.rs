//! Comparing a kernel's output with the reference's under a [`Tolerance`].

use crate::tolerance::Tolerance;

/// What a comparison measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics {
    pub max_abs: f64,
    pub nmse: f64,
    /// Elements compared.
    pub n: usize,
}

impl Metrics {
    /// Takes `m` in: the worst of each bound, the elements added up.
    pub fn fold(&mut self, m: Metrics) {
        self.nmse = self.nmse.max(m.nmse);
        self.max_abs = self.max_abs.max(m.max_abs);
        self.n += m.n;
    }
}

/// Compare `got` with `want`. Fails on a length mismatch, on NaN/∞ where the reference is
/// finite (so a poisoned, unwritten element fails), and when the tolerance is exceeded.
pub fn compare(got: &[f32], want: &[f32], tol: Tolerance) -> Result<Metrics, String> {
    if got.len() != want.len() {
        return Err(format!("length {} != reference length {}", got.len(), want.len()));
    }
    let (mut num, mut den, mut max_abs) = (0f64, 0f64, 0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !g.is_finite() && w.is_finite() {
            return Err(format!("element {i} is {g} (reference {w})"));
        }
        if g.is_nan() || w.is_nan() {
            return Err(format!("element {i}: NaN (got {g}, reference {w})"));
        }
        if !w.is_finite() {
            if g != w {
                return Err(format!("element {i} is {g}, reference {w}"));
            }
            continue;
        }
        let (g, w) = (g as f64, w as f64);
        let d = (g - w).abs();
        max_abs = max_abs.max(d);
        num += d * d;
        den += w * w;
        match tol {
            Tolerance::Exact if d != 0.0 => return Err(format!("element {i}: {g} != {w} (exact)")),
            Tolerance::Elementwise { atol, rtol } if d > atol + rtol * w.abs() => {
                return Err(format!("element {i}: |{g} − {w}| = {d:.3e} > atol {atol:.1e} + rtol {rtol:.1e}·|want|"));
            }
            _ => {}
        }
    }
    if let Tolerance::NmseOfTerms { scale, .. } = tol {
        den = den.max(got.len() as f64 * scale * scale);
    }
    let nmse = if den > 0.0 {
        num / den
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    if let Tolerance::Nmse { max } | Tolerance::NmseOfTerms { max, .. } = tol {
        if nmse > max || nmse.is_nan() {
            return Err(format!("NMSE {nmse:.3e} > {max:.1e} (max |Δ| {max_abs:.3e})"));
        }
    }
    Ok(Metrics { max_abs, nmse, n: got.len() })
}

/// Exact comparison of integer outputs (ids).
pub fn compare_ids(got: &[u32], want: &[u32]) -> Result<Metrics, String> {
    if got.len() != want.len() {
        return Err(format!("length {} != reference length {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Err(format!("id {i}: {} != {}", got[i], want[i])),
        None => Ok(Metrics { n: got.len(), ..Default::default() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_and_unwritten_fail() {
        let tol = Tolerance::Nmse { max: 1.0 };
        assert!(compare(&[1.0, f32::NAN], &[1.0, 2.0], tol).is_err());
        assert!(compare(&[1.0, f32::INFINITY], &[1.0, 2.0], tol).is_err());
        assert!(compare(&[f32::NAN], &[f32::NAN], tol).is_err(), "NaN fails even where the reference is NaN");
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(compare(&[1.0], &[1.0], Tolerance::Exact).is_ok());
        assert!(compare(&[1.0 + 1e-7], &[1.0], Tolerance::Exact).is_err());
        let ew = Tolerance::Elementwise { atol: 1e-3, rtol: 0.0 };
        assert!(compare(&[1.0005], &[1.0], ew).is_ok());
        assert!(compare(&[1.002], &[1.0], ew).is_err());
        let nm = Tolerance::Nmse { max: 1e-4 };
        assert!(compare(&[1.0, 2.001], &[1.0, 2.0], nm).is_ok());
        assert!(compare(&[1.0, 2.1], &[1.0, 2.0], nm).is_err());
        assert!(compare(&[1.0], &[1.0, 2.0], nm).is_err());
    }
}
