//! `tandem bench --kernel moe`, second part: the MoE over 16-bit experts at Qwen3-30B-A3B's
//! shape (C = 2048, F = 768, E = 128, K = 8; random bf16 experts, f16 where the device has no
//! bf16; no biases, SiLU, softmax-then-top-K renormalised): route v2 / v3, moe gemv d1
//! gate|up and down (with its combine) for 1 and 8 tokens, in GB/s of the selected experts'
//! bytes; moe gemm v1 and v2 (tensor cores, where the device has them) over them at 64 / 256 /
//! 512 / 2048 tokens (sort excluded) in TFLOP/s; and `moe_into` whole for each (v1 and v2).

use optimized::config::KernelConfig;
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::moe::gemm_tc::{self, MoeTc};
use optimized::kernels::moe::{self, gemv_dense, DenseExperts, MoeGemm, MoePath, MoeWeights, RouteVersion};
use optimized::kernels::swiglu::GluAct;
use optimized::{Client, DeviceTensor, Dtype};
use rayon::prelude::*;
use reference::ops::moe::Routing;
use tandem_benches::gpu::attention::seconds_per_call;

use super::{bytes, time, Result};

const C: usize = 2048;
const F: usize = 768;
const E: usize = 128;
const K: usize = 8;

/// Values in ±1/32 (a trained expert's scale at this width), deterministic per salt.
fn values(n: usize, salt: u32) -> Vec<f32> {
    bytes(n, salt).par_iter().map(|&b| (b as f32 - 128.0) / 4096.0).collect()
}

fn weights(client: &Client, dtype: Dtype) -> Result<MoeWeights> {
    let mats = |out: usize, inp: usize, salt: u32| (0..E as u32).into_par_iter().map(|e| values(out * inp, salt + e)).collect::<Vec<_>>();
    let gate_up = {
        let (g, u) = (mats(F, C, 1000), mats(F, C, 2000));
        let (g, u): (Vec<&[f32]>, Vec<&[f32]>) = (g.iter().map(Vec::as_slice).collect(), u.iter().map(Vec::as_slice).collect());
        DenseExperts::upload_glu(client, "gate_up", F, C, &g, &u, None, dtype)?
    };
    let down = {
        let d = mats(C, F, 3000);
        DenseExperts::upload(client, "down", C, F, &d.iter().map(Vec::as_slice).collect::<Vec<_>>(), None, dtype)?
    };
    let router = DeviceTensor::from_f32(client, &values(E * C, 4000).iter().map(|v| v * 8.0).collect::<Vec<_>>(), &[E, C])?;
    Ok(MoeWeights::dense(client, router, None, gate_up, down, K, GluAct::Silu, Routing::SoftmaxTopK { renorm: true })?)
}

pub(super) fn run(client: &Client, rate: f64, reps: usize) -> Result<()> {
    let dtype = if Dtype::BF16.supported(client) { Dtype::BF16 } else { Dtype::F16 };
    println!();
    println!("Qwen3-30B-A3B's MoE (C = {C}, F = {F}, E = {E}, K = {K}), random {} experts, softmax-top-K renormalised", dtype.name());
    let w = weights(client, dtype)?;
    let (gu, dn) = (w.gate_up.dense()?, w.down.dense()?);
    println!("{:>6} {:>22} {:>9} {:>9} {:>8} {:>7}", "tokens", "kernel", "µs/call", "GB/s", "% copy", "timing");
    for t in [1usize, 8] {
        let h = DeviceTensor::from_f32(client, &values(t * C, 900).iter().map(|v| v * 256.0).collect::<Vec<_>>(), &[t, C])?;
        let x = DeviceTensor::from_f32(client, &vec![0.0; t * C], &[t, C])?;
        let routes = moe::route_tokens(client, &h, &w)?;
        let mut ids = routes.ids.to_u32(client)?;
        ids.sort_unstable();
        ids.dedup();
        let distinct = ids.len();
        let a = DeviceTensor::empty_f32(client, &[t * K, F]);
        let size = dtype.size();
        let (glu_b, down_b) = ((distinct * 2 * F * C * size) as f64, (distinct * C * F * size) as f64);
        let line = |name: &str, bytes: f64, (s, how): (f64, &str)| {
            let gbs = bytes / s / 1e9;
            println!("{t:>6} {name:>22} {:>9.2} {:>9.1} {:>7.1}% {how:>7}", s * 1e6, gbs, 100.0 * gbs * 1e9 / rate);
        };
        for (name, route) in [("route v2", RouteVersion::V2), ("route v3", RouteVersion::V3)] {
            let cfg = KernelConfig { moe_route: route, ..KernelConfig::default() };
            line(name, (E * C * 4) as f64, time(client, &cfg, reps, |c| moe::route_tokens(c, &h, &w).map(|_| ()))?);
        }
        let cfg = KernelConfig::default();
        line("gemv d1 gate|up", glu_b, time(client, &cfg, reps, |c| gemv_dense::moe_gemv_dense_glu_into(c, &h, &routes, gu, w.act, &a))?);
        line("gemv d1 down", down_b, time(client, &cfg, reps, |c| gemv_dense::moe_gemv_dense_down_into(c, &a, &routes, dn, &x))?);
        line("moe_into", glu_b + down_b, time(client, &cfg, reps, |c| moe::moe_into(c, &h, &w, &x, MoePath::Auto).map(|_| ()))?);
        println!("{t:>6} {:>22} {distinct} distinct of {} pairs", "experts", t * K);
    }
    let tc = [C, F].iter().try_for_each(|&k| gemm_tc::require_dense(client, TcMode::Tensor, k, dtype).map(|_| ()));
    if let Err(why) = &tc {
        println!("moe gemm v2 not timed: {why}");
    }
    println!("{:>6} {:>28} {:>9} {:>9} {:>7}", "tokens", "kernel", "µs/call", "TFLOP/s", "timing");
    for t in [64usize, 256, 512, 2048] {
        let h = DeviceTensor::from_f32(client, &values(t * C, 901).iter().map(|v| v * 256.0).collect::<Vec<_>>(), &[t, C])?;
        let x = DeviceTensor::from_f32(client, &vec![0.0; t * C], &[t, C])?;
        let routes = moe::route_tokens(client, &h, &w)?;
        let p = t * K;
        let (a, y) = (DeviceTensor::empty_f32(client, &[p, F]), DeviceTensor::empty_f32(client, &[p, C]));
        let line = |name: &str, flop: f64, s: f64| println!("{t:>6} {name:>28} {:>9.1} {:>9.1} {:>7}", s * 1e6, flop / s / 1e12, "eager");
        let (glu_f, down_f) = (2.0 * (p * 2 * F * C) as f64, 2.0 * (p * C * F) as f64);
        // moe gemm v1, then v2 in the tile the production pick takes (its own sort).
        let mut kernels = vec![(None, moe::gemm::BM, "v1".to_string())];
        if tc.is_ok() {
            let tile = MoeTc::pick(TcMode::Tensor, p, E, client.kernels().moe_tile);
            kernels.push((Some(TcMode::Tensor), tile.bm(), format!("v2 {}", tile.name())));
        }
        for (kernel, bm, name) in kernels {
            let sorted = moe::sort_by_expert(client, &routes, E, bm)?;
            let glu = || moe::dense::moe_gemm_dense_glu_into(client, &h, &sorted, &routes, gu, w.act, &a, kernel);
            line(&format!("gemm {name} gate|up"), glu_f, seconds_per_call(client, 1, 3 * reps, glu)?);
            let down = || moe::dense::moe_gemm_dense_down_into(client, &a, &sorted, &routes, dn, &y, kernel);
            line(&format!("gemm {name} down"), down_f, seconds_per_call(client, 1, 3 * reps, down)?);
        }
        for (name, moe_gemm) in [("moe_into v1 (route+sort+gemms)", MoeGemm::V1), ("moe_into (route+sort+gemms)", MoeGemm::V2)] {
            let c = client.with_kernels(KernelConfig { moe_gemm, ..KernelConfig::default() });
            line(name, glu_f + down_f, seconds_per_call(&c, 1, 3 * reps, || moe::moe_into(&c, &h, &w, &x, MoePath::Auto).map(|_| ()))?);
        }
    }
    Ok(())
}
