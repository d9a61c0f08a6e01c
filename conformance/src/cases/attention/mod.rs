//! `attention(h, kv, d, T, S, pos0, window)`: `optimized::kernels::attention_into` vs
//! `reference::ops::attention::attention`. The device caches have 5 rows more than S, filled
//! with NaN (a kernel reading past `s_len` fails), and are written with
//! `optimized::kernels::kv_append` in two pieces (rows `0..S/2`, then `S/2..S`). The output is
//! NaN-poisoned.

pub mod flash;
pub mod kv_e4m3;

use ndarray::Array3;
use optimized::kernels::{attention_into, kv_append};
use optimized::{Client, DeviceTensor};

use super::embedding::judge;
use super::outcome;
use crate::{rand_vec, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct AttentionCase {
    pub h: usize,
    pub kv: usize,
    pub d: usize,
    pub t: usize,
    pub s: usize,
    pub pos0: usize,
    pub window: Option<usize>,
}

/// Spare cache rows past S (NaN).
const SPARE: usize = 5;

impl Case for AttentionCase {
    fn op(&self) -> Op {
        Op::Attention
    }
    fn name(&self) -> String {
        let w = self.window.map_or(String::new(), |w| format!(",window={w}"));
        format!("attention(h={},kv={},d={},T={},S={},pos0={},causal{w},f32)", self.h, self.kv, self.d, self.t, self.s, self.pos0)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (h, kv, d, t, s) = (self.h, self.kv, self.d, self.t, self.s);
        // Wider than U[-1,1) so the softmax is peaked enough to notice a wrong key.
        let q: Vec<f32> = rand_vec(t * h * d, 71).iter().map(|x| x * 2.0).collect();
        let k = rand_vec(s * kv * d, 72);
        let v = rand_vec(s * kv * d, 73);
        let (Ok(qa), Ok(ka), Ok(va)) = (
            Array3::from_shape_vec((t, h, d), q.clone()),
            Array3::from_shape_vec((s, kv, d), k.clone()),
            Array3::from_shape_vec((s, kv, d), v.clone()),
        ) else {
            return Outcome::Fail("bad case shape".into());
        };
        let want: Vec<f32> = reference::ops::attention::attention(qa.view(), ka.view(), va.view(), self.pos0, self.window).iter().copied().collect();
        outcome((|| {
            let cap = s + SPARE;
            let row = kv * d;
            let nan = vec![f32::NAN; cap * row];
            let kc = DeviceTensor::from_f32(client, &nan, &[cap, kv, d])?;
            let vc = DeviceTensor::from_f32(client, &nan, &[cap, kv, d])?;
            let split = s / 2;
            for (lo, hi) in [(0, split), (split, s)] {
                let kn = DeviceTensor::from_f32(client, &k[lo * row..hi * row], &[hi - lo, kv, d])?;
                let vn = DeviceTensor::from_f32(client, &v[lo * row..hi * row], &[hi - lo, kv, d])?;
                kv_append(client, &kc, &kn, lo)?;
                kv_append(client, &vc, &vn, lo)?;
            }
            let qd = DeviceTensor::from_f32(client, &q, &[t, h, d])?;
            let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * h * d], &[t, h, d])?;
            attention_into(client, &qd, &kc, &vc, s, self.pos0, self.window, &out)?;
            Ok(judge(&out.to_f32(client)?, &want, Op::Attention, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let mut add = |h, kv, d, t, s, pos0, window| v.push(Box::new(AttentionCase { h, kv, d, t, s, pos0, window }) as Box<dyn Case>);
    // Decode: one query after S − 1 cached keys.
    for (h, kv, d, s, window) in [
        (8, 8, 64, 1, None),
        (16, 2, 128, 15, None),
        (8, 1, 48, 16, None),
        (9, 3, 64, 17, Some(8)),
        (8, 8, 128, 257, None),
        (16, 2, 64, 1000, None),
        (8, 1, 128, 1000, Some(256)),
        (32, 8, 64, 4096, None),
        (16, 8, 256, 1030, Some(1024)),
    ] {
        add(h, kv, d, 1, s, s - 1, window);
    }
    // Prefill and chunked prefill (queries after cached keys).
    add(9, 3, 64, 17, 40, 23, Some(8));
    add(9, 3, 64, 17, 40, 23, None);
    add(8, 1, 20, 17, 17, 0, None);
    add(8, 8, 64, 33, 33, 0, Some(5));
    add(8, 2, 64, 9, 9, 0, Some(1));
    add(16, 2, 128, 64, 300, 236, Some(100));
    add(12, 4, 96, 31, 131, 100, None);
    add(8, 4, 256, 40, 90, 50, Some(32));
    // Keys past the queries (masked by causality), too few keys, none visible, none at all.
    add(4, 2, 64, 5, 30, 10, None);
    add(2, 2, 20, 6, 3, 0, None);
    add(4, 1, 48, 8, 4, 6, Some(3));
    add(4, 2, 64, 2, 0, 0, None);
    v.extend(flash::cases());
    v.push(Box::new(kv_e4m3::E4m3CodesCase));
    v
}
