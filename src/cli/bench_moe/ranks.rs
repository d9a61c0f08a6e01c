//! An expert-parallel rank's MoE of many tokens (`moe_into` on the grouped GEMMs' path: route,
//! the rank's routes, sort, gate|up and down, combine) at gpt-oss-20b's shape, rank 0 of N
//! holding E/N experts, against the whole block on one device: the other ranks' pairs left out
//! of the sort (what runs), and — the way it ran before — kept in, weighted 0, on the rank's
//! first expert. µs per call, eagerly timed; a rank's share of the work is ideally 1/N.

use optimized::kernels::moe::{self, route, MoePath, MoeWeights};
use optimized::{Client, DeviceTensor, Error};
use tandem_benches::gpu::attention::seconds_per_call;

use super::{bytes, weights_holding, Result, C, E, GEMM_TOKENS};

/// The block of `w` over `h` with the other ranks' pairs kept in the sort, weighted 0 on the
/// rank's first expert: [`moe::experts_into`] on the grouped GEMMs' path over routes that do
/// not drop them.
fn kept_in(c: &Client, h: &DeviceTensor, w: &MoeWeights, x: &DeviceTensor) -> std::result::Result<(), Error> {
    let routes = route::routes_local(c, &moe::route_tokens(c, h, w)?, &w.held, false)?;
    moe::experts_into(c, h, w, &routes, x, false)
}

pub fn run(client: &Client, reps: usize) -> Result<()> {
    println!("expert parallelism: rank 0's share of the whole MoE (route + sort + grouped GEMMs + combine), E = {E}");
    println!("{:>6} {:>5} {:>8} {:>11} {:>9} {:>11} {:>9}", "tokens", "ranks", "experts", "µs dropped", "× whole", "µs kept in", "× whole");
    // The whole block's time per token count (the N = 1 rows), for the ratios.
    let mut whole: Vec<(usize, f64)> = vec![];
    for n in [1, 2, 4] {
        let w = weights_holding(client, 0..E / n)?;
        for &t in &GEMM_TOKENS {
            let h = DeviceTensor::from_f32(client, &bytes(t * C, 902).iter().map(|&b| (b as f32 - 128.0) / 32.0).collect::<Vec<_>>(), &[t, C])?;
            let x = DeviceTensor::from_f32(client, &vec![0.0; t * C], &[t, C])?;
            let dropped = seconds_per_call(client, 1, 3 * reps, || moe::moe_into(client, &h, &w, &x, MoePath::Gemm).map(|_| ()))?;
            let kept = match n {
                1 => dropped,
                _ => seconds_per_call(client, 1, 3 * reps, || kept_in(client, &h, &w, &x))?,
            };
            if n == 1 {
                whole.push((t, dropped));
            }
            let base = whole.iter().find(|(tt, _)| *tt == t).map_or(dropped, |x| x.1);
            println!("{t:>6} {n:>5} {:>8} {:>11.1} {:>9.2} {:>11.1} {:>9.2}", E / n, dropped * 1e6, dropped / base, kept * 1e6, kept / base);
        }
    }
    Ok(())
}
