//! Token embedding gather.

use ndarray::{Array2, ArrayView2};

use crate::error::{Error, Result};

/// `x[t, :] = E[ids[t], :]` — E `[V, C]`, ids `[T]` → x `[T, C]`.
pub fn embedding(table: ArrayView2<f32>, ids: &[u32]) -> Result<Array2<f32>> {
    let (v, c) = table.dim();
    let mut x = Array2::zeros((ids.len(), c));
    for (t, &id) in ids.iter().enumerate() {
        if id as usize >= v {
            return Err(Error::Input(format!("token id {id} at position {t} is outside the vocabulary (V = {v})")));
        }
        x.row_mut(t).assign(&table.row(id as usize));
    }
    Ok(x)
}
