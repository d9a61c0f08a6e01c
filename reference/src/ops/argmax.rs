//! Greedy choice: the index of the largest logit (`kernels/argmax.rs` on the GPU).

/// Index of the largest logit; ties go to the lowest id. NaNs are never chosen.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best as u32
}
