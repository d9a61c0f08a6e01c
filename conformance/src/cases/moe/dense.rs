//! The MoE over experts stored as 16-bit (or f32) values — Qwen3-MoE's block — against the
//! reference's ops (`reference::ops::moe::Routing::route`, `ops::mlp` gating, `weighted_sum`)
//! on the same rounded weights, stage by stage: routes (ids exact), the grouped gemvs (decode)
//! or the sort + grouped GEMMs (many tokens) with their NaN-poisoned intermediates, the
//! combine into the residual stream; then `moe_into` whole on a fresh residual. The GEMMs are
//! moe gemm v1 (f32 CUDA cores), or v2 on the tensor cores (`tc`: real or emulated), which
//! rounds each GEMM's input to the experts' 16-bit type: h is rounded in the fixture, and
//! down's reference reads the device's activations rounded, so each GEMM is held to tc v1's
//! accumulation bound.

use ndarray::{Array1, Array2, ArrayView2, Axis};
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::moe::gemm_tc::{self, MoeTc};
use optimized::kernels::moe::{self, gemm::BM, gemv_dense, DenseExperts, MoeGemm, MoePath, MoeWeights, RouteVersion};
use optimized::kernels::swiglu::GluAct;
use optimized::{Client, DeviceTensor};
use reference::ops::matmul::linear;
use reference::ops::mlp::{gated, Activation};
use reference::ops::moe::{weighted_sum, Routing};

use super::{check, check_tol, dev, poisoned, rand_array};
use crate::tolerance::{model_with_tc, tc_tolerance};
use crate::{compare_ids, rand_vec, round_to, tolerance, Case, Dtype, Metrics, Op, Outcome};

/// One block: T tokens of width C, E experts of width F, K per token.
#[derive(Debug, Clone)]
pub struct DenseMoeCase {
    pub t: usize,
    pub c: usize,
    pub f: usize,
    pub e: usize,
    pub k: usize,
    pub routing: Routing,
    pub path: MoePath,
    /// The experts' storage type.
    pub dtype: Dtype,
    pub act: Activation,
    /// Router and expert biases (Qwen3-MoE has none).
    pub bias: bool,
    /// The fused router of steps of ≤ 8 tokens.
    pub route: RouteVersion,
    /// The GEMM path's kernels: moe gemm v1 (`None`) or v2 on the tensor cores (or their
    /// emulation); 16-bit experts only.
    pub tc: Option<TcMode>,
}

/// The block's inputs and weights (expert matrices already rounded to the case's dtype).
struct Fixture {
    h: Array2<f32>,
    x0: Vec<f32>,
    router: Array2<f32>,
    router_bias: Option<Array1<f32>>,
    /// Per expert: gate `[F, C]`, up `[F, C]`, down `[C, F]`.
    mats: Vec<[Array2<f32>; 3]>,
    /// Per expert: gate, up `[F]`, down `[C]` biases.
    biases: Option<Vec<[Array1<f32>; 3]>>,
}

/// The reference, pair by pair (pair p = t·K + rank).
struct Want {
    routes: Vec<Vec<(usize, f32)>>,
    a: Vec<f32>,
    y: Vec<f32>,
    out: Vec<f32>,
}

fn plus(mut m: Array2<f32>, b: Option<&Array1<f32>>) -> Array2<f32> {
    if let Some(b) = b {
        m += b;
    }
    m
}

impl DenseMoeCase {
    fn fixture(&self) -> Fixture {
        let (t, c, f, e) = (self.t, self.c, self.f, self.e);
        let fan = |n: usize| 3f32.sqrt() / (n as f32).sqrt();
        let rounded = |rows: usize, cols: usize, salt: u32, scale: f32| {
            let m = rand_array(rows, cols, salt, scale);
            Array2::from_shape_vec((rows, cols), round_to(m.as_slice().unwrap_or(&[]), self.dtype)).unwrap_or(m)
        };
        let vec1 = |n: usize, salt: u32| Array1::from_vec(rand_vec(n, salt).iter().map(|v| v * 0.3).collect());
        let mats = (0..e as u32)
            .map(|x| [rounded(f, c, 100 + 8 * x, 2.0 * fan(c)), rounded(f, c, 101 + 8 * x, 2.0 * fan(c)), rounded(c, f, 102 + 8 * x, fan(f))])
            .collect();
        let biases = self.bias.then(|| (0..e as u32).map(|x| [vec1(f, 103 + 8 * x), vec1(f, 104 + 8 * x), vec1(c, 105 + 8 * x)]).collect());
        // moe gemm v2 rounds h to the experts' type: the reference reads the same values.
        let h = rand_array(t, c, 1, 2.0);
        let h = match self.tc {
            Some(_) => Array2::from_shape_vec((t, c), round_to(h.as_slice().unwrap_or(&[]), self.dtype)).unwrap_or(h),
            None => h,
        };
        Fixture { h, x0: rand_vec(t * c, 7), router: rand_array(e, c, 2, fan(c)), router_bias: self.bias.then(|| vec1(e, 3)), mats, biases }
    }

    fn reference(&self, fx: &Fixture) -> Result<Want, String> {
        let err = |e: reference::Error| e.to_string();
        let z = plus(linear(fx.h.view(), fx.router.view()).map_err(err)?, fx.router_bias.as_ref());
        let routes: Vec<Vec<(usize, f32)>> = z.rows().into_iter().map(|r| self.routing.route(&r.to_vec(), self.k)).collect();
        let (mut a, mut y, mut out) = (vec![], vec![], fx.x0.clone());
        let c = self.c;
        for (t, r) in routes.iter().enumerate() {
            let ht = fx.h.select(Axis(0), &[t]);
            let mut ys = vec![];
            for &(e, _) in r {
                let [wg, wu, wd] = &fx.mats[e];
                let b = fx.biases.as_ref().map(|b| &b[e]);
                let g = plus(linear(ht.view(), wg.view()).map_err(err)?, b.map(|b| &b[0]));
                let u = plus(linear(ht.view(), wu.view()).map_err(err)?, b.map(|b| &b[1]));
                let act = gated(g.view(), u.view(), self.act);
                let ye = plus(linear(act.view(), wd.view()).map_err(err)?, b.map(|b| &b[2]));
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

    /// `W_down a_s (+ b_down)` of expert `experts[s]` for each row `a_s` of `a16` (`[_, F]`).
    fn down_reference(&self, fx: &Fixture, a16: &[f32], experts: impl Iterator<Item = usize>) -> Result<Vec<f32>, String> {
        let f = self.f;
        let mut out = Vec::new();
        for (s, e) in experts.enumerate() {
            let xs = ArrayView2::from_shape((1, f), &a16[s * f..(s + 1) * f]).map_err(|e| e.to_string())?;
            let y = plus(linear(xs, fx.mats[e][2].view()).map_err(|e| e.to_string())?, fx.biases.as_ref().map(|b| &b[e][2]));
            out.extend(y.iter());
        }
        Ok(out)
    }

    fn upload(&self, client: &Client, fx: &Fixture) -> Result<MoeWeights, optimized::Error> {
        fn s<D: ndarray::Dimension>(a: &ndarray::Array<f32, D>) -> &[f32] {
            a.as_slice().unwrap_or(&[])
        }
        let part = |i: usize| fx.mats.iter().map(|m| s(&m[i])).collect::<Vec<_>>();
        let bias = |i: usize| fx.biases.as_ref().map(|b| b.iter().map(|b| s(&b[i])).collect::<Vec<_>>());
        let dt = self.dtype.device();
        let (bg, bu, bd) = (bias(0), bias(1), bias(2));
        let gate_up = DenseExperts::upload_glu(client, "gate_up", self.f, self.c, &part(0), &part(1), bg.as_deref().zip(bu.as_deref()), dt)?;
        let down = DenseExperts::upload(client, "down", self.c, self.f, &part(2), bd.as_deref(), dt)?;
        let router = DeviceTensor::from_f32(client, s(&fx.router), &[self.e, self.c])?;
        let router_bias = fx.router_bias.as_ref().map(|b| DeviceTensor::from_f32(client, s(b), &[self.e])).transpose()?;
        MoeWeights::dense(client, router, router_bias, gate_up, down, self.k, GluAct::of(self.act)?, self.routing)
    }

    fn body(&self, client: &Client) -> Result<Metrics, String> {
        let fx = self.fixture();
        let want = self.reference(&fx)?;
        let w = self.upload(client, &fx).map_err(dev)?;
        let (t, c, f, k) = (self.t, self.c, self.f, self.k);
        // Without `tc` moe_into keeps moe gemm v1 (the tensor cores would round h).
        let moe_gemm = if self.tc.is_some() { MoeGemm::V2 } else { MoeGemm::V1 };
        let variant = client.with_kernels(optimized::config::KernelConfig { moe_route: self.route, moe_gemm, ..Default::default() });
        let h = DeviceTensor::from_f32(client, fx.h.as_slice().unwrap_or(&[]), &[t, c]).map_err(dev)?;
        let x = DeviceTensor::from_f32(client, &fx.x0, &[t, c]).map_err(dev)?;
        let routes = moe::route_tokens(&variant, &h, &w).map_err(dev)?;
        let want_ids: Vec<u32> = want.routes.iter().flatten().map(|&(e, _)| e as u32).collect();
        compare_ids(&routes.ids.to_u32(client).map_err(dev)?, &want_ids).map_err(|e| format!("expert ids: {e}"))?;
        let mut worst = Metrics::default();
        let want_w: Vec<f32> = want.routes.iter().flatten().map(|&(_, w)| w).collect();
        check(&routes.weights.to_f32(client).map_err(dev)?, &want_w, Op::Moe, "route weights", &mut worst)?;
        let (gu, dn) = (w.gate_up.dense().map_err(dev)?, w.down.dense().map_err(dev)?);
        let p = t * k;
        match self.path {
            MoePath::Gemm => {
                // moe gemm v2 sorts into its tile's rows (16 or 64 by the pairs per expert).
                let bm = self.tc.map_or(BM, |mode| MoeTc::pick(mode, p, self.e, client.kernels().moe_tile).bm());
                let sorted = moe::sort_by_expert(client, &routes, self.e, bm).map_err(dev)?;
                let mut order: Vec<usize> = (0..p).collect();
                order.sort_by_key(|&i| want_ids[i]);
                let by_sorted = |v: &[f32], n: usize| -> Vec<f32> { order.iter().flat_map(|&i| v[i * n..(i + 1) * n].iter().copied()).collect() };
                let (a, y) = (poisoned(client, &[p, f])?, poisoned(client, &[p, c])?);
                moe::dense::moe_gemm_dense_glu_into(client, &h, &sorted, &routes, gu, w.act, &a, self.tc).map_err(dev)?;
                let got_a = a.to_f32(client).map_err(dev)?;
                moe::dense::moe_gemm_dense_down_into(client, &a, &sorted, &routes, dn, &y, self.tc).map_err(dev)?;
                let got_y = y.to_f32(client).map_err(dev)?;
                if self.tc.is_some() {
                    check_tol(&got_a, &by_sorted(&want.a, f), tc_tolerance().0, "activations (sorted, tensor cores)", &mut worst)?;
                    // down's reference: the device's activations rounded as the kernel rounds them.
                    let want_y = self.down_reference(&fx, &round_to(&got_a, self.dtype), order.iter().map(|&i| want_ids[i] as usize))?;
                    check_tol(&got_y, &want_y, tc_tolerance().0, "expert outputs (sorted, tensor cores)", &mut worst)?;
                } else {
                    check(&got_a, &by_sorted(&want.a, f), Op::Moe, "activations (sorted)", &mut worst)?;
                    check(&got_y, &by_sorted(&want.y, c), Op::Moe, "expert outputs (sorted)", &mut worst)?;
                }
                moe::moe_combine_into(client, &y, &sorted, &routes, &x).map_err(dev)?;
            }
            _ => {
                let (a, yp) = (poisoned(client, &[p, f])?, poisoned(client, &[p, c])?);
                gemv_dense::moe_gemv_dense_glu_into(client, &h, &routes, gu, w.act, &a).map_err(dev)?;
                check(&a.to_f32(client).map_err(dev)?, &want.a, Op::Moe, "activations", &mut worst)?;
                gemv_dense::moe_gemv_dense_down_pairs(client, &a, &routes, dn, &yp).map_err(dev)?;
                check(&yp.to_f32(client).map_err(dev)?, &want.y, Op::Moe, "expert outputs", &mut worst)?;
                moe::moe_combine_pairs_into(client, &yp, &routes, &x).map_err(dev)?;
            }
        }
        // moe gemm v2 also rounds the activations before down (relative u once: one layer's
        // share of the whole-model bound with tensor cores).
        let final_tol = match self.tc {
            Some(_) => model_with_tc(tolerance(Op::Moe, Dtype::F32).0, self.dtype, 1).0,
            None => tolerance(Op::Moe, Dtype::F32).0,
        };
        check_tol(&x.to_f32(client).map_err(dev)?, &want.out, final_tol, "x + MoE(h)", &mut worst)?;
        // The dispatcher end to end, on a fresh residual stream.
        let x2 = DeviceTensor::from_f32(client, &fx.x0, &[t, c]).map_err(dev)?;
        moe::moe_into(&variant, &h, &w, &x2, self.path).map_err(dev)?;
        check_tol(&x2.to_f32(client).map_err(dev)?, &want.out, final_tol, "moe_into", &mut worst)?;
        Ok(worst)
    }
}

impl Case for DenseMoeCase {
    fn op(&self) -> Op {
        Op::Moe
    }
    fn name(&self) -> String {
        let routing = match self.routing {
            Routing::TopKSoftmax => "topk-softmax",
            Routing::SoftmaxTopK { renorm: true } => "softmax-topk-renorm",
            Routing::SoftmaxTopK { renorm: false } => "softmax-topk",
        };
        let route = if self.route == RouteVersion::V2 { ",route-v2" } else { "" };
        let bias = if self.bias { ",bias" } else { "" };
        let tc = match self.tc {
            Some(TcMode::Tensor) => ",tc",
            Some(TcMode::Emulated) => ",tc-emu",
            None => "",
        };
        format!(
            "moe_dense(T={},C={},F={},E={},K={},{routing},{:?},{:?}{bias}{route}{tc},{})",
            self.t,
            self.c,
            self.f,
            self.e,
            self.k,
            self.act,
            self.path,
            self.dtype.name()
        )
        .to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        if !self.dtype.device().supported(client) {
            return Outcome::Skip(format!("{} experts: the device has no {} arithmetic", self.dtype.name(), self.dtype.name()));
        }
        if let Some(mode) = self.tc {
            for k in [self.c, self.f] {
                match gemm_tc::require_dense(client, mode, k, self.dtype.device()) {
                    Ok(_) => {}
                    Err(optimized::Error::Unsupported(why)) => return Outcome::Skip(why),
                    Err(e) => return Outcome::Fail(dev(e)),
                }
            }
        }
        self.body(client).map_or_else(Outcome::Fail, Outcome::Pass)
    }
}

/// Bad 16-bit expert weights: each is refused with an error naming what is wrong (no panic,
/// nothing launched).
#[derive(Debug, Clone)]
pub struct DenseBadInputCase;

/// `Ok(())` when `r` is an error whose text holds `needle`.
fn refused<T>(what: &str, r: Result<T, optimized::Error>, needle: &str) -> Result<(), String> {
    match r {
        Ok(_) => Err(format!("{what}: accepted")),
        Err(err) if err.to_string().contains(needle) => Ok(()),
        Err(err) => Err(format!("{what}: error `{err}` does not name `{needle}`")),
    }
}

impl DenseBadInputCase {
    fn body(&self, client: &Client) -> Result<(), String> {
        let (c, f, e) = (8usize, 4usize, 3usize);
        let dt = optimized::Dtype::F32;
        let m = |n: usize| vec![0.5f32; n];
        let (g, d, b) = (m(f * c), m(c * f), m(c - 1));
        let up = |n: usize| DenseExperts::upload_glu(client, "gate_up", f, c, &vec![g.as_slice(); n], &vec![g.as_slice(); e], None, dt);
        let down = || DenseExperts::upload(client, "down", c, f, &vec![d.as_slice(); e], None, dt);
        let dense = |gu, dn, k| -> Result<MoeWeights, optimized::Error> {
            let router = DeviceTensor::from_f32(client, &m(e * c), &[e, c])?;
            MoeWeights::dense(client, router, None, gu, dn, k, GluAct::Silu, Routing::SoftmaxTopK { renorm: true })
        };
        // A short matrix, more gates than ups, a bias of the wrong length.
        refused(
            "short expert matrix",
            DenseExperts::upload(client, "down", c, f, &[d.as_slice(), &d[1..], d.as_slice()], None, dt),
            "down: expert 1",
        )?;
        refused("gates without ups", up(e + 1), "gate_up: as many gates as ups")?;
        refused("short bias", DenseExperts::upload(client, "down", c, f, &vec![d.as_slice(); e], Some(&vec![b.as_slice(); e]), dt), "down: biases")?;
        // Shapes that disagree, and K outside 1 ..= min(E, MAX_K).
        refused("gate|up and down swapped", dense(down().map_err(dev)?, up(e).map_err(dev)?, 2), "moe weights: router")?;
        for k in [0, e + 1] {
            refused(&format!("top-{k}"), dense(up(e).map_err(dev)?, down().map_err(dev)?, k), &format!("top-{k} of {e} experts"))?;
        }
        Ok(())
    }
}

impl Case for DenseBadInputCase {
    fn op(&self) -> Op {
        Op::Moe
    }
    fn name(&self) -> String {
        "moe_dense(bad input)".into()
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).map_or_else(Outcome::Fail, |()| Outcome::Pass(Metrics::default()))
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = vec![Box::new(DenseBadInputCase)];
    let routings = [Routing::SoftmaxTopK { renorm: true }, Routing::SoftmaxTopK { renorm: false }, Routing::TopKSoftmax];
    let case =
        |t, c, f, e, k, routing, path, dtype, act, bias, route| DenseMoeCase { t, c, f, e, k, routing, path, dtype, act, bias, route, tc: None };
    // Qwen3-MoE's block in small: no biases, SiLU, each routing × both paths × rows 1, 3, 8
    // (gemvs) and 9, 40 (sort + GEMMs; 40 · 4 pairs over 8 experts: segments past one tile).
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for routing in routings {
            for (t, f, k) in [(1, 32, 2), (3, 96, 4), (8, 64, 3)] {
                v.push(Box::new(case(t, 64, f, 8, k, routing, MoePath::Gemv, dtype, Activation::Silu, false, RouteVersion::V3)));
            }
            for (t, f, k) in [(9, 96, 2), (40, 64, 4)] {
                v.push(Box::new(case(t, 64, f, 8, k, routing, MoePath::Gemm, dtype, Activation::Silu, false, RouteVersion::V3)));
            }
        }
    }
    // Route v2 (the fused router before v3), biases everywhere, GELU-tanh gating; a block of
    // 3 through the GEMMs and 40 through the gemvs (both paths take any T).
    for (t, path) in [(3, MoePath::Gemv), (8, MoePath::Gemv), (3, MoePath::Gemm), (40, MoePath::Gemv)] {
        for routing in routings {
            v.push(Box::new(case(t, 96, 64, 8, 4, routing, path, Dtype::F16, Activation::Silu, true, RouteVersion::V2)));
        }
        v.push(Box::new(case(
            t,
            64,
            32,
            8,
            2,
            Routing::SoftmaxTopK { renorm: true },
            path,
            Dtype::F16,
            Activation::GeluTanh,
            false,
            RouteVersion::V3,
        )));
    }
    // moe gemm v2 over 16-bit experts, Qwen3-MoE's block scaled down (SiLU, softmax-top-K
    // renormalised, no biases): 16-row tiles (pairs ≤ 16 an expert on average) and 64-row
    // ones with segments past a tile; experts without a token (E = 128, few pairs); an input
    // width that ends inside a k-block (F = 96, 192). Then biases with GELU-tanh.
    let renorm = Routing::SoftmaxTopK { renorm: true };
    let tc = |t, c, f, e, k, dtype, mode| DenseMoeCase {
        tc: Some(mode),
        ..case(t, c, f, e, k, renorm, MoePath::Gemm, dtype, Activation::Silu, false, RouteVersion::V3)
    };
    let biased = |t, c, f, mode| DenseMoeCase {
        tc: Some(mode),
        ..case(t, c, f, 8, 2, Routing::SoftmaxTopK { renorm: false }, MoePath::Gemm, Dtype::F16, Activation::GeluTanh, true, RouteVersion::V3)
    };
    // Emulated (lavapipe: an MMA through shared memory costs a barrier per 256 products).
    for (t, c, f, e, k) in [(9, 64, 96, 8, 4), (70, 64, 32, 8, 8), (5, 64, 32, 128, 8)] {
        v.push(Box::new(tc(t, c, f, e, k, Dtype::F16, TcMode::Emulated)));
    }
    v.push(Box::new(biased(9, 96, 64, TcMode::Emulated)));
    // On the tensor cores, both 16-bit types; Qwen3-30B-A3B's widths (C = 2048, F = 768).
    for dtype in [Dtype::F16, Dtype::BF16] {
        for (t, c, f, e, k) in [(67, 512, 192, 128, 8), (301, 256, 96, 8, 8), (9, 2048, 768, 16, 8)] {
            v.push(Box::new(tc(t, c, f, e, k, dtype, TcMode::Tensor)));
        }
    }
    v.push(Box::new(tc(130, 2048, 768, 16, 8, Dtype::F16, TcMode::Tensor)));
    v.push(Box::new(biased(33, 128, 64, TcMode::Tensor)));
    v
}
