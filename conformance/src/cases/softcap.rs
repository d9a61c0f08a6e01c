//! `softcap(T, V, c)`: `optimized::kernels::softcap_inplace` vs `reference::ops::softcap::softcap`
//! per value. In place (the logits are the output); logits spread to `±4c` so tanh runs from
//! its linear part into saturation.

use optimized::{Client, DeviceTensor};

use super::outcome;
use crate::{compare, rand_vec, Case, Op, Outcome};

#[derive(Debug, Clone)]
pub struct SoftcapCase {
    pub t: usize,
    pub v: usize,
    pub cap: f32,
}

impl Case for SoftcapCase {
    fn op(&self) -> Op {
        Op::Softcap
    }
    fn name(&self) -> String {
        format!("softcap(T={},V={},c={},f32)", self.t, self.v, self.cap)
    }
    fn run(&self, client: &Client) -> Outcome {
        let n = self.t * self.v;
        let z: Vec<f32> = rand_vec(n, 91).iter().map(|x| x * 4.0 * self.cap).collect();
        let want: Vec<f32> = z.iter().map(|&x| reference::ops::softcap::softcap(x, self.cap)).collect();
        outcome((|| {
            let zd = DeviceTensor::from_f32(client, &z, &[self.t, self.v])?;
            optimized::kernels::softcap_inplace(client, &zd, self.cap)?;
            // A cap that is not a positive number is refused, naming it.
            match optimized::kernels::softcap_inplace(client, &zd, 0.0) {
                Err(optimized::Error::Shape(m)) if m.contains("cap 0") => {}
                other => return Ok(Outcome::Fail(format!("cap 0 not refused: {other:?}"))),
            }
            Ok(match compare(&zd.to_f32(client)?, &want, crate::tolerance::softcap(self.cap).0) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// Gemma-2's final cap 30 and attention cap 50, a cap of 1; T = 1 decode, odd V, a Gemma-size
/// vocabulary row.
pub fn cases() -> Vec<Box<dyn Case>> {
    [(1, 1, 30.0), (1, 262_144, 30.0), (7, 577, 50.0), (3, 1000, 1.0), (17, 33, 30.0)]
        .into_iter()
        .map(|(t, v, cap)| Box::new(SoftcapCase { t, v, cap }) as Box<dyn Case>)
        .collect()
}
