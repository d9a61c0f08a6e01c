//! Logit soft-capping (Gemma-2; Gemma-3 configs may set it).

/// `cap(z) = c · tanh(z / c)`: smooth, odd, `|cap(z)| < c`.
pub fn softcap(z: f32, c: f32) -> f32 {
    (z / c).tanh() * c
}
