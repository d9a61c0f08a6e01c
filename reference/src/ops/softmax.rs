//! Softmax over one row.

/// `p_i = e^(z_i − max z) / Σ_j e^(z_j − max z)`, in place. Entries equal to −∞ get 0.
/// A row that is all −∞ (no visible key) becomes all 0.
pub fn softmax(z: &mut [f32]) {
    let m = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if m == f32::NEG_INFINITY {
        z.iter_mut().for_each(|v| *v = 0.0);
        return;
    }
    let mut s = 0.0;
    for v in z.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    z.iter_mut().for_each(|v| *v /= s);
}
