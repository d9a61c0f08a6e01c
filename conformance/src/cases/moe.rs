//! GPT-OSS's mixture of experts (`optimized::kernels::moe`) vs `reference::gpt_oss::ops::moe`,
//! stage by stage: the router's routes (ids exact, weights), the grouped MXFP4 gemvs (decode)
//! or the sort by expert (exact) and the grouped GEMMs (prefill) with their intermediate
//! activations, and the residual stream after the block. Intermediate outputs are NaN-poisoned
//! first. Also `route` alone on given logits (ties ranked by lower expert id) by each routing,
//! and `bias_add`. Experts stored as 16-bit values (Qwen3-MoE): [`dense`].

mod dense;

use ndarray::{Array2, Axis, Zip};
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::moe::{self, gemm::BM, gemm_tc, MoeGemv, MoePath, MoeWeights, Mxfp4Experts, RouteVersion, Routes};
use optimized::{Client, DeviceTensor};
use reference::gpt_oss::ops::linear_bias;
use reference::gpt_oss::ops::moe::{clamped_swiglu, route, router, weighted_sum};
use reference::gpt_oss::ExpertWeights;
use reference::quant::mxfp4;

use super::embedding::judge;
use super::outcome;
use crate::tolerance::{model_with_tc, tc_tolerance};
use crate::{compare_ids, rand_vec, round_to, tolerance, Case, Dtype, Metrics, Op, Outcome, Tolerance};

/// How the router's logits are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Random router weights and biases.
    Random,
    /// Biases push every token to experts 0 .. K: segments of T rows (several GEMM tiles).
    Skewed,
    /// Zero router weights, biases with ties: every token's ranks decided by the lower id.
    Ties,
}

/// One MoE block: T tokens of width C, E experts of width F, K per token.
#[derive(Debug, Clone)]
pub struct MoeCase {
    pub t: usize,
    pub c: usize,
    pub f: usize,
    pub e: usize,
    pub k: usize,
    pub routing: Routing,
    pub path: MoePath,
    /// V2: the production kernels; V1: those before route v3 and moe gemv v2 (route v2, and
    /// on the gemv path gemv v1).
    pub gemv: MoeGemv,
    /// The GEMM path's kernels: moe gemm v1 (`None`) or v2 on the tensor cores (or their
    /// emulation), which rounds each GEMM's input to 16 bits.
    pub tc: Option<TcMode>,
    /// The GEMM path on moe gemm v3 (warpgroup MMAs, pairs sorted in 128-row tiles) instead
    /// of v2 (with `tc: Some(Tensor)`: it rounds the same way).
    pub wg: bool,
    /// The GEMM path on moe gemm v4 (moe gemv v3's body over chunks of 8 sorted pairs) in
    /// `tc`'s mode instead of v2 (it rounds the same way).
    pub chunks: bool,
}

const LIMIT: f32 = 7.0;
const ALPHA: f32 = 1.702;

/// The block's inputs and weights.
struct Fixture {
    h: Array2<f32>,
    x0: Vec<f32>,
    router: Array2<f32>,
    router_bias: ndarray::Array1<f32>,
    experts: Vec<ExpertWeights>,
}

fn rand_array(rows: usize, cols: usize, salt: u32, scale: f32) -> Array2<f32> {
    Array2::from_shape_vec((rows, cols), rand_vec(rows * cols, salt).iter().map(|v| v * scale).collect())
        .unwrap_or_else(|_| Array2::zeros((rows, cols)))
}

impl MoeCase {
    fn fixture(&self) -> Result<Fixture, String> {
        let (t, c, f, e, k) = (self.t, self.c, self.f, self.e, self.k);
        let fan = |n: usize| 3f32.sqrt() / (n as f32).sqrt();
        // Scaled so that some gates and ups reach the clamp (|·| > 7).
        let h = rand_array(t, c, 1, 4.0);
        let mut router = rand_array(e, c, 2, fan(c));
        let mut router_bias = ndarray::Array1::from_vec(rand_vec(e, 3).iter().map(|v| v * 0.1).collect());
        match self.routing {
            Routing::Random => {}
            Routing::Skewed => (0..k).for_each(|j| router_bias[j] += 40.0 - j as f32),
            Routing::Ties => {
                router.fill(0.0);
                router_bias = (0..e).map(|j| [0.5f32, 1.0, 1.0, 0.25][j % 4]).collect();
            }
        }
        let matrix = |salt: u32, out: usize, inp: usize| {
            mxfp4::quantize(&rand_vec(out * inp, salt).iter().map(|v| v * fan(inp) * 6.0).collect::<Vec<_>>(), out, inp).map_err(|e| e.to_string())
        };
        let bias = |salt: u32, n: usize| ndarray::Array1::from_vec(rand_vec(n, salt).iter().map(|v| v * 0.5).collect());
        let experts = (0..e as u32)
            .map(|x| {
                let s = 100 + 8 * x;
                Ok(ExpertWeights {
                    gate: matrix(s, f, c)?,
                    gate_bias: bias(s + 1, f),
                    up: matrix(s + 2, f, c)?,
                    up_bias: bias(s + 3, f),
                    down: matrix(s + 4, c, f)?,
                    down_bias: bias(s + 5, c),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Fixture { h, x0: rand_vec(t * c, 7), router, router_bias, experts })
    }

    fn upload(&self, client: &Client, fx: &Fixture) -> Result<MoeWeights, optimized::Error> {
        // The biases are built contiguous (a view that is not fails the upload's length check).
        fn s(a: &ndarray::Array1<f32>) -> &[f32] {
            a.as_slice().unwrap_or(&[])
        }
        let gate: Vec<_> = fx.experts.iter().map(|x| (&x.gate, s(&x.gate_bias))).collect();
        let up: Vec<_> = fx.experts.iter().map(|x| (&x.up, s(&x.up_bias))).collect();
        let down: Vec<_> = fx.experts.iter().map(|x| &x.down).collect();
        let down_b: Vec<&[f32]> = fx.experts.iter().map(|x| s(&x.down_bias)).collect();
        MoeWeights::mxfp4(
            client,
            DeviceTensor::from_f32(client, fx.router.as_slice().unwrap_or(&[]), &[self.e, self.c])?,
            DeviceTensor::from_f32(client, &fx.router_bias.to_vec(), &[self.e])?,
            Mxfp4Experts::upload_glu(client, "gate_up", &gate, &up)?,
            Mxfp4Experts::upload(client, "down", &down, &down_b)?,
            self.k,
            LIMIT,
            ALPHA,
            false,
            None,
        )
    }
}

/// The reference, pair by pair (pair p = t·K + rank): routes, activations `a [P, F]`, expert
/// outputs `y [P, C]` (bias added, unweighted) and `x0 + MoE(h)`.
struct Want {
    routes: Vec<Vec<(usize, f32)>>,
    a: Vec<f32>,
    y: Vec<f32>,
    out: Vec<f32>,
}

fn reference_moe(fx: &Fixture, k: usize) -> Result<Want, String> {
    let routes = router(fx.h.view(), fx.router.view(), fx.router_bias.view(), k).map_err(|e| e.to_string())?;
    let dense = fx.experts.iter().map(|x| x.dequant().map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()?;
    let (mut a, mut y, mut out) = (vec![], vec![], fx.x0.clone());
    let c = fx.h.ncols();
    for (t, r) in routes.iter().enumerate() {
        let ht = fx.h.select(Axis(0), &[t]);
        let mut ys = vec![];
        for &(e, _) in r {
            let d = &dense[e];
            let g = linear_bias(ht.view(), d.gate.view(), d.gate_bias.view()).map_err(|e| e.to_string())?;
            let u = linear_bias(ht.view(), d.up.view(), d.up_bias.view()).map_err(|e| e.to_string())?;
            let act = Zip::from(&g).and(&u).map_collect(|&g, &u| clamped_swiglu(g, u, LIMIT, ALPHA));
            let ye = linear_bias(act.view(), d.down.view(), d.down_bias.view()).map_err(|e| e.to_string())?;
            a.extend(act.iter());
            y.extend(ye.iter());
            ys.push(ye.row(0).to_owned());
        }
        let terms: Vec<_> = r.iter().zip(&ys).map(|(&(_, w), yk)| (w, yk.view())).collect();
        for (o, m) in out[t * c..(t + 1) * c].iter_mut().zip(weighted_sum(&terms, c)) {
            *o += m;
        }
    }
    Ok(Want { routes, a, y, out })
}

/// Compare, keeping the worst metrics; `Err` carries the failure's text.
fn check(got: &[f32], want: &[f32], op: Op, what: &str, worst: &mut Metrics) -> Result<(), String> {
    check_tol(got, want, tolerance(op, Dtype::F32).0, what, worst)
}

/// [`check`] under a given bound.
fn check_tol(got: &[f32], want: &[f32], tol: Tolerance, what: &str, worst: &mut Metrics) -> Result<(), String> {
    super::arch::check(worst, got, want, tol, what)
}

fn dev(e: optimized::Error) -> String {
    format!("error: {e}")
}

fn poisoned(client: &Client, shape: &[usize]) -> Result<DeviceTensor, String> {
    DeviceTensor::from_f32(client, &vec![f32::NAN; shape.iter().product()], shape).map_err(dev)
}

impl MoeCase {
    /// The 16-bit type moe gemm v2 rounds its inputs to (`None`: v1, f32), or why it cannot run.
    fn tc_dtype(&self, client: &Client) -> Result<Option<Dtype>, optimized::Error> {
        let Some(mode) = self.tc else { return Ok(None) };
        if self.wg {
            moe::gemm_wg::require(client)?;
        }
        let e = match self.path {
            MoePath::Gemm if self.chunks => moe::gemv_tc::require(client, mode, self.c.max(self.f))?,
            MoePath::Gemm => gemm_tc::require(client, mode, self.c.max(self.f))?,
            _ => moe::gemv_tc::require(client, mode, self.c.max(self.f))?,
        };
        Ok(Some(e.into()))
    }

    fn body(&self, client: &Client, e16: Option<Dtype>) -> Result<Metrics, String> {
        let mut fx = self.fixture()?;
        // moe gemm v2 rounds h to 16 bits: the reference reads the same rounded values.
        if let Some(e) = e16 {
            let (r, c) = fx.h.dim();
            fx.h = Array2::from_shape_vec((r, c), round_to(fx.h.as_slice().unwrap_or(&[]), e)).map_err(|e| e.to_string())?;
        }
        let want = reference_moe(&fx, self.k)?;
        let w = self.upload(client, &fx).map_err(dev)?;
        let (t, c, f, k) = (self.t, self.c, self.f, self.k);
        let h = DeviceTensor::from_f32(client, fx.h.as_slice().unwrap_or(&[]), &[t, c]).map_err(dev)?;
        let x = DeviceTensor::from_f32(client, &fx.x0, &[t, c]).map_err(dev)?;
        // The v1 variant runs the kernels before route v3 / moe gemv v2 (route v2, gemv v1).
        let cfg = match self.gemv {
            MoeGemv::V1 => optimized::config::KernelConfig { moe_gemv: MoeGemv::V1, moe_route: RouteVersion::V2, ..Default::default() },
            MoeGemv::V2 | MoeGemv::V3 => optimized::config::KernelConfig::default(),
        };
        // The routing and the gemvs launch with the variant's choices.
        let variant = client.with_kernels(cfg);
        let routes = moe::route_tokens(&variant, &h, &w).map_err(dev)?;
        let want_ids: Vec<u32> = want.routes.iter().flatten().map(|&(e, _)| e as u32).collect();
        compare_ids(&routes.ids.to_u32(client).map_err(dev)?, &want_ids).map_err(|e| format!("expert ids: {e}"))?;
        let mut worst = Metrics::default();
        // Weights after the device's router matmul: its rounding moves them (matmul tolerance).
        let want_w: Vec<f32> = want.routes.iter().flatten().map(|&(_, w)| w).collect();
        check(&routes.weights.to_f32(client).map_err(dev)?, &want_w, Op::Moe, "route weights", &mut worst)?;
        match self.path {
            MoePath::Gemm => self.gemm_stages(client, &fx, e16, &h, &x, &w, &routes, &want, &mut worst)?,
            _ if self.gemv == MoeGemv::V3 => self.gemv_tc_stages(client, &fx, e16, &h, &x, &w, &routes, &want, &mut worst)?,
            _ => {
                let a = poisoned(client, &[t * k, f])?;
                moe::moe_gemv_glu_into(&variant, &h, &routes, w.gate_up.mxfp4().map_err(dev)?, LIMIT, ALPHA, &a).map_err(dev)?;
                check(&a.to_f32(client).map_err(dev)?, &want.a, Op::Moe, "activations", &mut worst)?;
                moe::moe_gemv_down_into(&variant, &a, &routes, w.down.mxfp4().map_err(dev)?, &x).map_err(dev)?;
            }
        }
        // moe gemm v2 also rounds the activations before down (relative u once: one layer's
        // share of the whole-model bound with tensor cores).
        let final_tol = match e16 {
            Some(e) => model_with_tc(tolerance(Op::Moe, Dtype::F32).0, e, 1).0,
            None => tolerance(Op::Moe, Dtype::F32).0,
        };
        check_tol(&x.to_f32(client).map_err(dev)?, &want.out, final_tol, "x + MoE(h)", &mut worst)?;
        Ok(worst)
    }

    /// Sort (exact against the host's stable grouping), GEMMs (poisoned outputs), combine. With
    /// moe gemm v2 (`e16`), each GEMM against the reference on the same 16-bit-rounded inputs
    /// (h rounded in the fixture; down's reference reads the device's activations rounded).
    #[allow(clippy::too_many_arguments)]
    fn gemm_stages(
        &self,
        client: &Client,
        fx: &Fixture,
        e16: Option<Dtype>,
        h: &DeviceTensor,
        x: &DeviceTensor,
        w: &MoeWeights,
        routes: &Routes,
        want: &Want,
        worst: &mut Metrics,
    ) -> Result<(), String> {
        let (c, f) = (self.c, self.f);
        // moe gemm v2 sorts into its tile's rows (16 or 64 by the pairs per expert).
        let bm = match self.tc {
            _ if self.wg => moe::gemm_wg::BM,
            Some(_) if self.chunks => moe::gemv_tc::CHUNK,
            Some(mode) => gemm_tc::MoeTc::pick(mode, self.t * self.k, self.e, client.kernels().moe_tile).bm(),
            None => BM,
        };
        let kernel = match self.tc {
            _ if self.wg => moe::GemmKernel::Wg,
            Some(mode) if self.chunks => moe::GemmKernel::Chunks(mode),
            tc => tc.into(),
        };
        let sorted = moe::sort_by_expert(client, routes, self.e, bm).map_err(dev)?;
        let ids: Vec<usize> = want.routes.iter().flatten().map(|&(e, _)| e).collect();
        let p = ids.len();
        let mut order: Vec<usize> = (0..p).collect();
        order.sort_by_key(|&i| ids[i]);
        let counts: Vec<u32> = (0..self.e).map(|e| ids.iter().filter(|&&x| x == e).count() as u32).collect();
        let (mut offsets, mut tiles) = (vec![0u32], vec![0u32]);
        for &n in &counts {
            offsets.push(offsets[offsets.len() - 1] + n);
            tiles.push(tiles[tiles.len() - 1] + n.div_ceil(bm as u32));
        }
        let mut slot = vec![0u32; p];
        for (s, &i) in order.iter().enumerate() {
            slot[i] = s as u32;
        }
        let sorted_ids: Vec<u32> = order.iter().map(|&i| i as u32).collect();
        for (what, got, want) in [
            ("counts", &sorted.counts, &counts),
            ("offsets", &sorted.offsets, &offsets),
            ("tile offsets", &sorted.tile_offsets, &tiles),
            ("sorted", &sorted.sorted, &sorted_ids),
            ("slots", &sorted.slot, &slot),
        ] {
            let got = got.to_u32(client).map_err(dev)?;
            compare_ids(got.get(..want.len()).unwrap_or(&got), want).map_err(|e| format!("sort {what}: {e}"))?;
        }
        let by_sorted = |v: &[f32], n: usize| -> Vec<f32> { order.iter().flat_map(|&i| v[i * n..(i + 1) * n].iter().copied()).collect() };
        let a = poisoned(client, &[p, f])?;
        let y = poisoned(client, &[p, c])?;
        match (self.tc, e16) {
            (Some(_), Some(e)) => {
                moe::moe_gemm_glu_into(client, h, &sorted, routes, w.gate_up.mxfp4().map_err(dev)?, LIMIT, ALPHA, &a, kernel).map_err(dev)?;
                let got_a = a.to_f32(client).map_err(dev)?;
                check_tol(&got_a, &by_sorted(&want.a, f), tc_tolerance().0, "activations (sorted, tensor cores)", worst)?;
                moe::moe_gemm_down_into(client, &a, &sorted, routes, w.down.mxfp4().map_err(dev)?, &y, kernel).map_err(dev)?;
                // down's reference: the device's activations rounded as the kernel rounds them.
                let want_y = down_reference(fx, &round_to(&got_a, e), order.iter().map(|&i| ids[i]), f)?;
                check_tol(&y.to_f32(client).map_err(dev)?, &want_y, tc_tolerance().0, "expert outputs (sorted, tensor cores)", worst)?;
            }
            _ => {
                moe::moe_gemm_glu_into(client, h, &sorted, routes, w.gate_up.mxfp4().map_err(dev)?, LIMIT, ALPHA, &a, None).map_err(dev)?;
                check(&a.to_f32(client).map_err(dev)?, &by_sorted(&want.a, f), Op::Moe, "activations (sorted)", worst)?;
                moe::moe_gemm_down_into(client, &a, &sorted, routes, w.down.mxfp4().map_err(dev)?, &y, None).map_err(dev)?;
                check(&y.to_f32(client).map_err(dev)?, &by_sorted(&want.y, c), Op::Moe, "expert outputs (sorted)", worst)?;
            }
        }
        moe::moe_combine_into(client, &y, &sorted, routes, x).map_err(dev)
    }
}

impl MoeCase {
    /// moe gemv v3 (`e16`: the 16-bit type it rounds x to): gate|up against the reference on
    /// the rounded h (the fixture's), down per pair (poisoned) against the reference on the
    /// device's activations rounded, then the combine into x.
    #[allow(clippy::too_many_arguments)]
    fn gemv_tc_stages(
        &self,
        client: &Client,
        fx: &Fixture,
        e16: Option<Dtype>,
        h: &DeviceTensor,
        x: &DeviceTensor,
        w: &MoeWeights,
        routes: &Routes,
        want: &Want,
        worst: &mut Metrics,
    ) -> Result<(), String> {
        let (Some(mode), Some(e)) = (self.tc, e16) else { return Err("moe gemv v3 runs only as a tensor-core case".into()) };
        let (c, f, p) = (self.c, self.f, self.t * self.k);
        let a = poisoned(client, &[p, f])?;
        moe::gemv_tc::moe_gemv_glu_tc_into(client, h, routes, w.gate_up.mxfp4().map_err(dev)?, LIMIT, ALPHA, &a, mode).map_err(dev)?;
        let got_a = a.to_f32(client).map_err(dev)?;
        check_tol(&got_a, &want.a, tc_tolerance().0, "activations (gemv v3)", worst)?;
        let yp = poisoned(client, &[p, c])?;
        moe::gemv_tc::moe_gemv_down_tc_pairs(client, &a, routes, w.down.mxfp4().map_err(dev)?, &yp, mode).map_err(dev)?;
        let ids = want.routes.iter().flatten().map(|&(e, _)| e);
        let want_y = down_reference(fx, &round_to(&got_a, e), ids, f)?;
        check_tol(&yp.to_f32(client).map_err(dev)?, &want_y, tc_tolerance().0, "expert outputs (gemv v3)", worst)?;
        moe::moe_combine_pairs_into(client, &yp, routes, x).map_err(dev)
    }
}

/// `W_down a_i + b_down` of expert `experts[i]` for each activation row `a_i` of `a16` (`f` wide).
fn down_reference(fx: &Fixture, a16: &[f32], experts: impl Iterator<Item = usize>, f: usize) -> Result<Vec<f32>, String> {
    let dense = fx.experts.iter().map(|x| x.dequant().map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for (s, ex) in experts.enumerate() {
        let d = &dense[ex];
        let xs = ndarray::ArrayView2::from_shape((1, f), &a16[s * f..(s + 1) * f]).map_err(|e| e.to_string())?;
        out.extend(linear_bias(xs, d.down.view(), d.down_bias.view()).map_err(|e| e.to_string())?.iter());
    }
    Ok(out)
}

impl Case for MoeCase {
    fn op(&self) -> Op {
        Op::Moe
    }
    fn name(&self) -> String {
        let v1 = match self.gemv {
            MoeGemv::V1 => ",v1",
            MoeGemv::V2 => "",
            MoeGemv::V3 => ",v3",
        };
        let tc = match self.tc {
            Some(TcMode::Tensor) if self.wg => ",wg",
            Some(TcMode::Tensor) if self.chunks => ",chunks",
            Some(TcMode::Tensor) => ",tc",
            Some(TcMode::Emulated) if self.chunks => ",chunks-emu",
            Some(TcMode::Emulated) => ",tc-emu",
            None => "",
        };
        format!("moe(T={},C={},F={},E={},K={},{:?},{:?}{v1}{tc},f32)", self.t, self.c, self.f, self.e, self.k, self.routing, self.path).to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        match self.tc_dtype(client) {
            Ok(e16) => self.body(client, e16).map_or_else(Outcome::Fail, Outcome::Pass),
            Err(optimized::Error::Unsupported(why)) => Outcome::Skip(why),
            Err(e) => Outcome::Fail(dev(e)),
        }
    }
}

/// route v1 alone on given logits `z [T, E]` (with ties), against the reference's routing
/// (`reference … route` for GPT-OSS's, `ops::moe::Routing::route` for the others).
#[derive(Debug, Clone)]
pub struct RouteCase {
    pub t: usize,
    pub e: usize,
    pub k: usize,
    pub routing: reference::ops::moe::Routing,
}

impl Case for RouteCase {
    fn op(&self) -> Op {
        Op::MoeRoute
    }
    fn name(&self) -> String {
        let routing = match self.routing {
            reference::ops::moe::Routing::TopKSoftmax => "",
            reference::ops::moe::Routing::SoftmaxTopK { renorm: true } => ",softmax-topk-renorm",
            reference::ops::moe::Routing::SoftmaxTopK { renorm: false } => ",softmax-topk",
        };
        format!("moe_route(T={},E={},K={},ties{routing})", self.t, self.e, self.k)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, e, k) = (self.t, self.e, self.k);
        // Every third logit repeats its left neighbour: ties inside and across the top K.
        let mut z: Vec<f32> = rand_vec(t * e, 21).iter().map(|v| (v * 8.0).round() / 2.0).collect();
        for i in (0..z.len()).filter(|i| i % 3 == 2 && i % e != 0) {
            z[i] = z[i - 1];
        }
        let want: Vec<(usize, f32)> = match self.routing {
            reference::ops::moe::Routing::TopKSoftmax => z.chunks(e).flat_map(|row| route(row, k)).collect(),
            r => z.chunks(e).flat_map(|row| r.route(row, k)).collect(),
        };
        outcome((|| {
            let zd = DeviceTensor::from_f32(client, &z, &[t, e])?;
            let r = moe::route_with(client, &zd, k, self.routing)?;
            let want_ids: Vec<u32> = want.iter().map(|&(e, _)| e as u32).collect();
            if let Err(e) = compare_ids(&r.ids.to_u32(client)?, &want_ids) {
                return Ok(Outcome::Fail(format!("ids: {e}")));
            }
            let want_w: Vec<f32> = want.iter().map(|&(_, w)| w).collect();
            Ok(judge(&r.weights.to_f32(client)?, &want_w, Op::MoeRoute, Dtype::F32))
        })())
    }
}

/// `bias_add` on `y [T, n]`: bit-identical to the reference's `y += b`.
#[derive(Debug, Clone)]
pub struct BiasCase {
    pub t: usize,
    pub n: usize,
}

impl Case for BiasCase {
    fn op(&self) -> Op {
        Op::Bias
    }
    fn name(&self) -> String {
        format!("bias_add(T={},n={},f32)", self.t, self.n)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (y, b) = (rand_array(self.t, self.n, 31, 3.0), ndarray::Array1::from_vec(rand_vec(self.n, 32)));
        let want: Vec<f32> = (&y + &b).iter().copied().collect();
        outcome((|| {
            let yd = DeviceTensor::from_f32(client, y.as_slice().unwrap_or(&[]), &[self.t, self.n])?;
            optimized::kernels::bias::bias_add(client, &yd, &DeviceTensor::from_f32(client, &b.to_vec(), &[self.n])?)?;
            Ok(judge(&yd.to_f32(client)?, &want, Op::Bias, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (t, n) in [(1, 4), (3, 7), (5, 576), (17, 4096 + 1024)] {
        v.push(Box::new(BiasCase { t, n }));
    }
    for routing in [
        reference::ops::moe::Routing::TopKSoftmax,
        reference::ops::moe::Routing::SoftmaxTopK { renorm: true },
        reference::ops::moe::Routing::SoftmaxTopK { renorm: false },
    ] {
        for (t, e, k) in [(1, 4, 2), (5, 32, 4), (33, 8, 8), (7, 128, 4), (3, 3, 3)] {
            v.push(Box::new(RouteCase { t, e, k, routing }));
        }
    }
    let mut add = |t, c, f, e, k, routing, path| {
        v.push(Box::new(MoeCase { t, c, f, e, k, routing, path, gemv: MoeGemv::V2, tc: None, wg: false, chunks: false }) as Box<dyn Case>);
        if path == MoePath::Gemv || t <= moe::GEMV_MAX_T {
            v.push(Box::new(MoeCase { t, c, f, e, k, routing, path, gemv: MoeGemv::V1, tc: None, wg: false, chunks: false }) as Box<dyn Case>);
        }
        if path == MoePath::Gemm {
            v.push(Box::new(MoeCase { t, c, f, e, k, routing, path, gemv: MoeGemv::V2, tc: Some(TcMode::Tensor), wg: false, chunks: false })
                as Box<dyn Case>);
        } else {
            v.push(Box::new(MoeCase { t, c, f, e, k, routing, path, gemv: MoeGemv::V3, tc: Some(TcMode::Tensor), wg: false, chunks: false })
                as Box<dyn Case>);
        }
    };
    use MoePath::{Gemm, Gemv};
    use Routing::{Random, Skewed, Ties};
    // Decode: grouped gemvs (T ≤ 8), odd block counts (C = 96 = 3 blocks), rows not a
    // multiple of a cube's 16, GPT-OSS's width.
    for (t, c, f, e, k) in [(1, 64, 64, 4, 2), (3, 96, 160, 8, 4), (8, 288, 96, 5, 3), (1, 2880, 2880, 4, 2), (3, 2880, 2880, 4, 2)] {
        add(t, c, f, e, k, Random, Gemv);
    }
    add(4, 64, 96, 6, 2, Ties, Gemv);
    // Prefill: sort + grouped GEMMs; T = 1 and 9 through the GEMMs too, segments past one
    // 64-row tile (skewed: every token on the same K experts), experts without a token, odd
    // tile edges (C = 96, F = 160: 2F = 320).
    for (t, c, f, e, k, routing) in [
        (1, 64, 64, 4, 2, Random),
        (9, 96, 160, 8, 4, Random),
        (67, 288, 96, 8, 4, Random),
        (130, 96, 64, 6, 2, Skewed),
        (40, 64, 96, 32, 4, Random),
        (20, 64, 64, 6, 3, Ties),
    ] {
        add(t, c, f, e, k, routing, Gemm);
    }
    // moe gemm v2's indexing where there are no tensor cores (an MMA through shared memory
    // costs seconds a case on lavapipe): a tile edge inside an MXFP4 k-block pair (F = 160)
    // and odd N, and segments past one tile.
    for (t, c, f, e, k, routing) in [(9, 96, 160, 8, 4, Random), (130, 96, 64, 6, 2, Skewed)] {
        v.push(Box::new(MoeCase { t, c, f, e, k, routing, path: Gemm, gemv: MoeGemv::V2, tc: Some(TcMode::Emulated), wg: false, chunks: false }));
    }
    // moe gemm v3 (warpgroup MMAs: sm_90 only, skipped elsewhere): segments of several 128-row
    // tiles with a partial last one (skewed), experts without a pair, K past whole 64-value
    // k-blocks (C = 96, F = 160), a partial last 128-column tile (C = 2880 and 96 for down),
    // and GPT-OSS's width at ~100 pairs an expert.
    for (t, c, f, e, k, routing) in [
        (9, 96, 160, 8, 4, Random),
        (300, 96, 64, 6, 2, Skewed),
        (200, 288, 160, 40, 4, Random),
        (20, 64, 64, 6, 3, Ties),
        (100, 2880, 2880, 4, 4, Random),
    ] {
        v.push(Box::new(MoeCase { t, c, f, e, k, routing, path: Gemm, gemv: MoeGemv::V2, tc: Some(TcMode::Tensor), wg: true, chunks: false }));
    }
    // moe gemv v3's indexing without tensor cores (8 warps a tile here: the sums meet in
    // shared memory). One small case: an emulated MMA costs a barrier per 256 products.
    v.push(Box::new(MoeCase {
        t: 1,
        c: 64,
        f: 64,
        e: 4,
        k: 2,
        routing: Random,
        path: Gemv,
        gemv: MoeGemv::V3,
        tc: Some(TcMode::Emulated),
        wg: false,
        chunks: false,
    }));
    // moe gemm v4 (chunks of 8 sorted pairs on moe gemv v3's body): segments of many chunks
    // with a partial last one (skewed), experts without a pair, odd block counts (C = 96: 3
    // blocks; F = 160: 5) and rows not a multiple of 16, ties, GPT-OSS's width; the first two
    // also emulated (lavapipe checks the indexing).
    for (t, c, f, e, k, routing) in [
        (9, 96, 160, 8, 4, Random),
        (130, 96, 64, 6, 2, Skewed),
        (40, 64, 96, 32, 4, Random),
        (20, 64, 64, 6, 3, Ties),
        (100, 2880, 2880, 4, 4, Random),
        (64, 2880, 2880, 32, 4, Random),
    ] {
        for mode in [TcMode::Tensor, TcMode::Emulated] {
            if mode == TcMode::Emulated && t * c > 130 * 96 {
                continue;
            }
            v.push(Box::new(MoeCase { t, c, f, e, k, routing, path: Gemm, gemv: MoeGemv::V2, tc: Some(mode), wg: false, chunks: true }));
        }
    }
    v.extend(dense::cases());
    v
}
