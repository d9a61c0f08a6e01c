//! `tandem bench --kernel moe`: GPT-OSS's MoE decode kernels alone at gpt-oss-20b's shape
//! (C = F = 2880, E = 32, K = 4; random MXFP4 experts, no model to build): route v2 / v3,
//! gate|up and down by moe gemv v1 / v2 / v3 (v3 where the device has tensor cores; the downs
//! include their combine), for 1 and 8 tokens.
//! µs per call from a replayed graph (eagerly timed where the backend cannot capture), GB/s of
//! the expert bytes the routes select, % of the copy rate measured in the same run. Then the
//! grouped GEMMs of many tokens (64: a batch of 64 sequences; 512: a prefill), moe gemm v1
//! (CUDA cores, f32) and v2 (tensor cores), in TFLOP/s of the pairs' `2·P·N·K`. The same for
//! 16-bit experts at Qwen3-30B-A3B's shape ([`dense`]) runs first; an expert-parallel rank's
//! share of the whole MoE of many tokens ([`ranks`]) last.

mod dense;
mod large;
mod ranks;

use optimized::config::KernelConfig;
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::moe::{self, MoeGemm, MoeGemv, MoeWeights, Mxfp4Experts, RouteVersion, Routes};
use optimized::{Backend, Client, DeviceTensor, Error};
use rayon::prelude::*;
use reference::quant::mxfp4::Mxfp4Weight;
use tandem_benches::gpu::attention::{seconds_per_call, seconds_per_call_graph};

use super::Result;

const C: usize = 2880;
const F: usize = 2880;
const E: usize = 32;
const K: usize = 4;
const TOKENS: [usize; 2] = [1, 8];
const GEMM_TOKENS: [usize; 5] = [64, 256, 512, 1024, 2048];

/// Deterministic bytes (lowbias32 of the index and a salt).
fn bytes(n: usize, salt: u32) -> Vec<u8> {
    (0..n).into_par_iter().map(|i| (reference::synthetic::hash(i as u32 ^ salt.wrapping_mul(0x9E37_79B9)) >> 7) as u8).collect()
}

/// A random `[out, in]` MXFP4 matrix with scales 2^-8 .. 2^-1 (finite, like trained weights).
fn matrix(out: usize, in_dim: usize, salt: u32) -> Result<Mxfp4Weight> {
    let nb = out * in_dim / 32;
    let scales = bytes(nb, salt ^ 0x5CA1E).into_iter().map(|b| 119 + b % 8).collect();
    Ok(Mxfp4Weight::from_parts("bench expert", out, in_dim, bytes(nb * 16, salt), scales)?)
}

fn weights(client: &Client) -> Result<MoeWeights> {
    weights_holding(client, 0..E)
}

/// The bench's MoE block holding the experts `held` of its E (an expert-parallel rank's share,
/// or all): the router whole, each expert the same bytes whatever share holds it.
fn weights_holding(client: &Client, held: std::ops::Range<usize>) -> Result<MoeWeights> {
    weights_of(client, E, held)
}

/// [`weights_holding`] with a router over `e` experts (gpt-oss-120b's 128: [`large`]).
fn weights_of(client: &Client, e: usize, held: std::ops::Range<usize>) -> Result<MoeWeights> {
    let mats =
        |salt: u32, out: usize, inp: usize| held.clone().into_par_iter().map(|e| matrix(out, inp, salt + e as u32)).collect::<Result<Vec<_>>>();
    let (gate, up, down) = (mats(100, F, C)?, mats(200, F, C)?, mats(300, C, F)?);
    let bias = |n: usize, salt: u32| -> Vec<f32> { bytes(n, salt).iter().map(|&b| (b as f32 - 128.0) / 1024.0).collect() };
    let (bg, bu, bd) = (
        held.clone().map(|e| bias(F, 400 + e as u32)).collect::<Vec<_>>(),
        held.clone().map(|e| bias(F, 500 + e as u32)).collect::<Vec<_>>(),
        held.clone().map(|e| bias(C, 600 + e as u32)).collect::<Vec<_>>(),
    );
    let g: Vec<_> = gate.iter().zip(&bg).map(|(m, b)| (m, b.as_slice())).collect();
    let u: Vec<_> = up.iter().zip(&bu).map(|(m, b)| (m, b.as_slice())).collect();
    let router: Vec<f32> = bytes(e * C, 700).iter().map(|&b| (b as f32 - 128.0) / 4096.0).collect();
    Ok(MoeWeights::mxfp4(
        client,
        DeviceTensor::from_f32(client, &router, &[e, C])?,
        DeviceTensor::from_f32(client, &bias(e, 800), &[e])?,
        Mxfp4Experts::upload_glu(client, "gate_up", &g, &u)?,
        Mxfp4Experts::upload(client, "down", &down.iter().collect::<Vec<_>>(), &bd.iter().map(Vec::as_slice).collect::<Vec<_>>())?,
        K,
        7.0,
        1.702,
        true,
        Some(held.start),
    )?)
}

/// Seconds per call of `f` on `client` with `cfg`'s kernel choices: from a replayed graph,
/// else eagerly.
fn time(
    client: &Client,
    cfg: &KernelConfig,
    reps: usize,
    mut f: impl FnMut(&Client) -> std::result::Result<(), Error>,
) -> Result<(f64, &'static str)> {
    let c = client.with_kernels(*cfg);
    let mut f = || f(&c);
    Ok(match seconds_per_call_graph(&c, 20 * reps, &mut f)? {
        Some(t) => (t, "graph"),
        None => (seconds_per_call(&c, 1, 5 * reps, &mut f)?, "eager"),
    })
}

/// Every section at gpt-oss-20b's shape, then gpt-oss-120b's block ([`large`]); `only_120b`:
/// that block alone.
pub fn run(backend: Backend, gate: &str, reps: usize, only_120b: bool) -> Result<()> {
    let client = optimized::client(backend)?;
    if only_120b {
        println!("tandem bench --kernel moe --shapes gpt-oss-120b — {backend} — {gate}");
        return large::run(&client, reps);
    }
    let rate = optimized::bandwidth::copy_rate(&client, 1 << 30, 10)?;
    println!("tandem bench --kernel moe — {backend} — gpt-oss-20b's MoE (C = F = {C}, E = {E}, K = {K}), random MXFP4 experts — {gate}");
    println!("device copy rate {:.1} GB/s (read+write); GB/s of the selected experts' bytes (nibbles + scales)", rate / 1e9);
    // The 16-bit experts first: their weights are freed before GPT-OSS's are made.
    dense::run(&client, rate, reps)?;
    let w = weights(&client)?;
    let (gu, dn) = (w.gate_up.mxfp4()?, w.down.mxfp4()?);
    let per_row = |inp: usize| inp / 2 + inp / 32;
    println!("{:>6} {:>22} {:>9} {:>9} {:>8} {:>7}", "tokens", "kernel", "µs/call", "GB/s", "% copy", "timing");
    for &t in &TOKENS {
        let h = DeviceTensor::from_f32(&client, &bytes(t * C, 900).iter().map(|&b| (b as f32 - 128.0) / 32.0).collect::<Vec<_>>(), &[t, C])?;
        let x = DeviceTensor::from_f32(&client, &vec![0.0; t * C], &[t, C])?;
        let routes: Routes = moe::route_tokens(&client, &h, &w)?;
        let ids = routes.ids.to_u32(&client)?;
        let distinct = {
            let mut v = ids.clone();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        let a = DeviceTensor::empty_f32(&client, &[t * K, F]);
        let (glu_b, down_b) = ((distinct * 2 * F * per_row(C)) as f64, (distinct * C * per_row(F)) as f64);
        let line = |name: &str, bytes: f64, (s, how): (f64, &str)| {
            let gbs = bytes / s / 1e9;
            println!("{t:>6} {name:>22} {:>9.2} {:>9.1} {:>7.1}% {how:>7}", s * 1e6, gbs, 100.0 * gbs * 1e9 / rate);
        };
        for (name, route) in [("route v2", RouteVersion::V2), ("route v3", RouteVersion::V3)] {
            let cfg = KernelConfig { moe_route: route, ..KernelConfig::default() };
            line(name, (E * C * 4) as f64, time(&client, &cfg, reps, |c| moe::route_tokens(c, &h, &w).map(|_| ()))?);
        }
        for (v, gemv) in [("v1", MoeGemv::V1), ("v2", MoeGemv::V2)] {
            let cfg = KernelConfig { moe_gemv: gemv, ..KernelConfig::default() };
            line(&format!("gemv {v} gate|up"), glu_b, time(&client, &cfg, reps, |c| moe::moe_gemv_glu_into(c, &h, &routes, gu, 7.0, 1.702, &a))?);
            line(&format!("gemv {v} down"), down_b, time(&client, &cfg, reps, |c| moe::moe_gemv_down_into(c, &a, &routes, dn, &x))?);
        }
        // moe gemv v3 (tensor cores; x rounded to 16 bits), where the device has them.
        match moe::gemv_tc::require(&client, TcMode::Tensor, C.max(F)) {
            Ok(_) => {
                let cfg = KernelConfig::default();
                line(
                    "gemv v3 gate|up",
                    glu_b,
                    time(&client, &cfg, reps, |c| moe::gemv_tc::moe_gemv_glu_tc_into(c, &h, &routes, gu, 7.0, 1.702, &a, TcMode::Tensor))?,
                );
                line(
                    "gemv v3 down",
                    down_b,
                    time(&client, &cfg, reps, |c| moe::gemv_tc::moe_gemv_down_tc_into(c, &a, &routes, dn, &x, TcMode::Tensor))?,
                );
            }
            Err(why) => println!("{t:>6} gemv v3 not timed: {why}"),
        }
        println!("{t:>6} {:>22} {distinct} distinct of {} pairs", "experts", t * K);
    }
    gemms(&client, &w, reps)?;
    drop(w);
    ranks::run(&client, reps)?;
    large::run(&client, reps)
}

/// moe gemm v2's tiles the bench sweeps (`moe-tile=` specs; `auto` the production pick).
/// (H200: the seven others of the earlier sweep were never ahead of these three's best.)
const TILES: [&str; 3] = ["auto", "1.8.1.2.4p", "2.4.2.4.4p"];

/// The grouped GEMMs (sort excluded) at [`GEMM_TOKENS`]: v1, and v2 (where the device has
/// tensor cores) under each of [`TILES`]; µs per call and TFLOP/s of the pairs' work.
fn gemms(client: &Client, w: &MoeWeights, reps: usize) -> Result<()> {
    use optimized::kernels::moe::gemm_tc::MoeTc;
    let (gu, dn) = (w.gate_up.mxfp4()?, w.down.mxfp4()?);
    let tc = moe::gemm_tc::require(client, TcMode::Tensor, C.max(F));
    if let Err(why) = &tc {
        println!("moe gemm v2 not timed: {why}");
    }
    println!("{:>6} {:>28} {:>9} {:>9} {:>7}", "tokens", "kernel", "µs/call", "TFLOP/s", "timing");
    for &t in &GEMM_TOKENS {
        let h = DeviceTensor::from_f32(client, &bytes(t * C, 901).iter().map(|&b| (b as f32 - 128.0) / 32.0).collect::<Vec<_>>(), &[t, C])?;
        let routes = moe::route_tokens(client, &h, w)?;
        let p = t * K;
        let (a, y) = (DeviceTensor::empty_f32(client, &[p, F]), DeviceTensor::empty_f32(client, &[p, C]));
        let line = |name: &str, n: usize, k: usize, s: f64| {
            println!("{t:>6} {name:>28} {:>9.1} {:>9.1} {:>7}", s * 1e6, 2.0 * (p * n * k) as f64 / s / 1e12, "eager");
        };
        // Seconds per call of `f` on `client` with `cfg`'s kernel choices.
        let eager = |cfg: &KernelConfig, f: &mut dyn FnMut(&Client) -> std::result::Result<(), Error>| {
            let c = client.with_kernels(*cfg);
            seconds_per_call(&c, 1, 3 * reps, || f(&c))
        };
        let v1 = KernelConfig::default();
        let sorted = moe::sort_by_expert(client, &routes, E, moe::gemm::BM)?;
        line("gemm v1 gate|up", 2 * F, C, eager(&v1, &mut |c| moe::moe_gemm_glu_into(c, &h, &sorted, &routes, gu, 7.0, 1.702, &a, None))?);
        line("gemm v1 down", C, F, eager(&v1, &mut |c| moe::moe_gemm_down_into(c, &a, &sorted, &routes, dn, &y, None))?);
        if tc.is_err() {
            continue;
        }
        for spec in TILES {
            let cfg = KernelConfig::parse(&format!("moe-tile={spec}")).map_err(|e| super::CliError::Usage(e.to_string()))?;
            let tile = MoeTc::pick(TcMode::Tensor, p, E, cfg.moe_tile);
            let sorted = moe::sort_by_expert(client, &routes, E, tile.bm())?;
            let m = TcMode::Tensor;
            let name = |what: &str| format!("v2 {spec} ({}) {what}", tile.name());
            line(&name("gate|up"), 2 * F, C, eager(&cfg, &mut |c| moe::moe_gemm_glu_into(c, &h, &sorted, &routes, gu, 7.0, 1.702, &a, Some(m)))?);
            line(&name("down"), C, F, eager(&cfg, &mut |c| moe::moe_gemm_down_into(c, &a, &sorted, &routes, dn, &y, Some(m)))?);
        }
        // moe gemm v4 (moe gemv v3's body over chunks of 8 sorted pairs).
        if moe::gemv_tc::require(client, TcMode::Tensor, C.max(F)).is_ok() {
            let sorted = moe::sort_by_expert(client, &routes, E, moe::gemv_tc::CHUNK)?;
            let v4 = moe::GemmKernel::Chunks(TcMode::Tensor);
            let d = KernelConfig::default();
            line("v4 gate|up", 2 * F, C, eager(&d, &mut |c| moe::moe_gemm_glu_into(c, &h, &sorted, &routes, gu, 7.0, 1.702, &a, v4))?);
            line("v4 down", C, F, eager(&d, &mut |c| moe::moe_gemm_down_into(c, &a, &sorted, &routes, dn, &y, v4))?);
        }
        // moe gemm v3 (warpgroup MMAs) where the device has them.
        if let Err(why) = moe::gemm_wg::require(client) {
            println!("{t:>6} moe gemm v3 not timed: {why}");
            continue;
        }
        let sorted = moe::sort_by_expert(client, &routes, E, moe::gemm_wg::BM)?;
        let v3 = KernelConfig::default();
        let wg = moe::GemmKernel::Wg;
        line("v3 gate|up", 2 * F, C, eager(&v3, &mut |c| moe::moe_gemm_glu_into(c, &h, &sorted, &routes, gu, 7.0, 1.702, &a, wg))?);
        line("v3 down", C, F, eager(&v3, &mut |c| moe::moe_gemm_down_into(c, &a, &sorted, &routes, dn, &y, wg))?);
        // The whole block (route, sort, both GEMMs, combine) under each choice.
        let x = DeviceTensor::from_f32(client, &vec![0.0; t * C], &[t, C])?;
        for (name, moe_gemm) in [
            ("moe_into v2", MoeGemm::V2),
            ("moe_into v3-always", MoeGemm::V3Always),
            ("moe_into v3", MoeGemm::V3),
            ("moe_into v4-always", MoeGemm::V4Always),
            ("moe_into v4 (default)", MoeGemm::V4),
        ] {
            let cfg = KernelConfig { moe_gemm, ..KernelConfig::default() };
            line(name, 3 * F, C, eager(&cfg, &mut |c| moe::moe_into(c, &h, w, &x, moe::MoePath::Gemm).map(|_| ()))?);
        }
    }
    Ok(())
}
