//! The router on the device: logits, the top-K and the weights (route v1 on given logits;
//! route v2 fused with the router's matmul and bias, one cube per token; route v3 one cube per
//! router row, the last of a token to finish ranking). Every version takes the reference's
//! `Routing` as a comptime switch ([`routing_code`]): GPT-OSS's softmax over the K chosen
//! logits, or Qwen3-MoE's softmax over all E with the K largest kept (renormalised or not).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::gemv::{group_sum, GROUP};
use reference::ops::moe::Routing;

use super::{MoeWeights, Routes};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::swiglu::{check_f32, Elementwise};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Experts route v2 keeps in shared memory (above: the matmul + bias + route v1 path).
const V2_MAX_EXPERTS: usize = 1024;
/// Groups of [`GROUP`] lanes per route v2 cube (one router row per group at a time: all 32
/// of gpt-oss's at once). With 8 groups of 4 rows each the H200 took 35 µs a layer (each
/// lane's loads one after the other); v1's three launches took 13.
const V2_GROUPS: usize = 32;
/// Most tokens route v2 takes: every cube reads the whole router (368 KB for gpt-oss), which
/// for a prefill's thousands of tokens the matmul of v1 does far better.
const V2_MAX_T: usize = super::GEMV_MAX_T;

/// The kernels' comptime switch for `r`: 0 top-K then softmax over the K, 1 softmax over all
/// then top-K renormalised, 2 the same not renormalised.
pub(crate) fn routing_code(r: Routing) -> u32 {
    match r {
        Routing::TopKSoftmax => 0,
        Routing::SoftmaxTopK { renorm: true } => 1,
        Routing::SoftmaxTopK { renorm: false } => 2,
    }
}

/// The routes of one token from its logits `z[base .. base + E]`: rank r takes the largest
/// logit among those ranked after rank r − 1 in (value descending, index ascending) order —
/// the reference's stable sort — so equal logits rank the lower expert first. Then, by
/// `routing` ([`routing_code`]), in the reference's order of operations (z_0 is the maximum):
/// - 0: `w_r = e^(z_r − z_0) / Σ_r' e^(z_r' − z_0)` (the K in rank order);
/// - 1, 2: `p_r = e^(z_r − z_0) / S` with `S = Σ_j e^(z_j − z_0)` over all E in index order,
///   and with 1 `w_r = p_r / Σ_r' p_r'`, with 2 `w_r = p_r`.
///
/// The reference ranks softmax-first routing by p, not z: the same order (exp is monotone)
/// except where two different logits round to the same p, a tie it breaks by index.
/// Writes `ids[out ..+ K]`, `w[out ..+ K]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn top_k_softmax(z: &[f32], base: usize, e_n: usize, ids: &mut [u32], w: &mut [f32], out: usize, #[comptime] k: usize, #[comptime] routing: u32) {
    let mut sel = Array::<f32>::new(k);
    let mut prev_v = f32::new(0.0);
    let mut prev_i = 0usize;
    #[unroll]
    for r in 0..k {
        let mut best = f32::new(0.0);
        // A mutable run-time variable initialised by the literal itself (see docs/gpu-build.md).
        let mut bi = 4294967295u32;
        for j in 0..e_n {
            let v = z[base + j];
            let mut after = v < prev_v || (v == prev_v && j > prev_i);
            if r == 0 {
                after = true;
            }
            if after && (bi == 4294967295u32 || v > best) {
                best = v;
                bi = j as u32;
            }
        }
        ids[out + r] = bi;
        sel[r] = best;
        prev_v = best;
        prev_i = bi as usize;
    }
    let m = sel[0];
    let mut s = f32::new(0.0);
    if routing == 0 {
        #[unroll]
        for r in 0..k {
            let e = (sel[r] - m).exp();
            sel[r] = e;
            s += e;
        }
    } else {
        for j in 0..e_n {
            s += (z[base + j] - m).exp();
        }
        let mut ps = f32::new(0.0);
        #[unroll]
        for r in 0..k {
            let p = (sel[r] - m).exp() / s;
            sel[r] = p;
            ps += p;
        }
        s = f32::new(1.0);
        if routing == 1 {
            s = ps;
        }
    }
    #[unroll]
    for r in 0..k {
        w[out + r] = sel[r] / s;
    }
}

/// route v1: one unit per token over given logits `z [T, E]`; `ids` / `w` `[T, K]`.
#[cube(launch)]
pub fn moe_route_v1(z: &[f32], ids: &mut [u32], w: &mut [f32], n_tok: u32, n_exp: u32, #[comptime] k: usize, #[comptime] routing: u32) {
    let t = ABSOLUTE_POS;
    if t < n_tok as usize {
        let e_n = n_exp as usize;
        top_k_softmax(z, t * e_n, e_n, ids, w, t * k, k, routing);
    }
}

/// This unit's part of `h_t · Wr_e` (`cv` vectors of 4 a row): vectors `first + k·stride`,
/// four per step loaded before they are used (four loads in flight), four partial sums.
#[cube]
fn row_dot<N: Size>(h: &[Vector<f32, N>], wr: &[Vector<f32, N>], t: usize, e: usize, cv: usize, first: usize, stride: usize) -> f32 {
    let mut acc = Array::<f32>::new(4usize);
    #[unroll]
    for u in 0..4usize {
        acc[u] = 0.0f32;
    }
    row_dot_from(h, wr, t, e, cv, first, stride, &mut acc)
}

/// [`row_dot`] for route v3 under programmatic dependent launch (`pdl`): with `early` the
/// first step's router vectors (never written by a kernel) are loaded before the wait, h (the
/// previous kernel's) after it.
#[cube]
#[allow(clippy::too_many_arguments)]
fn row_dot_pdl<N: Size>(
    h: &[Vector<f32, N>],
    wr: &[Vector<f32, N>],
    t: usize,
    e: usize,
    cv: usize,
    first: usize,
    stride: usize,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) -> f32 {
    let mut acc = Array::<f32>::new(4usize);
    #[unroll]
    for u in 0..4usize {
        acc[u] = 0.0f32;
    }
    if early {
        let mut wv = Array::<Vector<f32, N>>::new(4usize);
        #[unroll]
        for u in 0..4usize {
            wv[u] = wr[e * cv + min(first + u * stride, cv - 1)];
        }
        await_predecessor(pdl);
        #[unroll]
        for u in 0..4usize {
            let cu = first + u * stride;
            if cu < cv {
                let a = h[t * cv + cu];
                let b = wv[u];
                #[unroll]
                for i in 0..4usize {
                    acc[u] += a.extract(i) * b.extract(i);
                }
            }
        }
        row_dot_from(h, wr, t, e, cv, first + 4 * stride, stride, &mut acc)
    } else {
        await_predecessor(pdl);
        row_dot_from(h, wr, t, e, cv, first, stride, &mut acc)
    }
}

/// The steps of [`row_dot`] from vector `start` on, into `acc`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn row_dot_from<N: Size>(
    h: &[Vector<f32, N>],
    wr: &[Vector<f32, N>],
    t: usize,
    e: usize,
    cv: usize,
    start: usize,
    stride: usize,
    acc: &mut Array<f32>,
) -> f32 {
    let mut c = start;
    while c < cv {
        #[unroll]
        for u in 0..4usize {
            let cu = c + u * stride;
            if cu < cv {
                let a = h[t * cv + cu];
                let b = wr[e * cv + cu];
                #[unroll]
                for i in 0..4usize {
                    acc[u] += a.extract(i) * b.extract(i);
                }
            }
        }
        c += 4 * stride;
    }
    acc[0] + acc[1] + acc[2] + acc[3]
}

/// route v2: one cube per token; its groups of `GROUP` lanes take router rows in turn
/// (`z_e = h·Wr_e + br_e`, h and Wr read as vectors of 4, lanes along C, a group sum), the
/// logits stay in shared memory, then one unit ranks them as v1 does. One launch where
/// matmul + bias + v1 took three. `h [T, C]`, `wr [E, C]` f32.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_route_v2<N: Size>(
    h: &[Vector<f32, N>],
    wr: &[Vector<f32, N>],
    br: &[f32],
    ids: &mut [u32],
    w: &mut [f32],
    n_tok: u32,
    cv: u32,
    n_exp: u32,
    #[comptime] k: usize,
    #[comptime] plane: bool,
    #[comptime] max_e: usize,
    #[comptime] routing: u32,
) {
    let t = min(CUBE_POS, n_tok as usize - 1);
    let lane = UNIT_POS_X as usize;
    let g = UNIT_POS_Y as usize;
    let groups = CUBE_DIM_Y as usize;
    let cv = cv as usize;
    let e_n = n_exp as usize;
    let mut z = Shared::<[f32]>::new_slice(max_e);
    let mut sh = Shared::<[f32]>::new_slice(GROUP * V2_GROUPS);
    let mut e0 = 0usize;
    while e0 < e_n {
        let e = e0 + g;
        let mut part = f32::new(0.0);
        if e < e_n {
            part = row_dot(h, wr, t, e, cv, lane, GROUP);
        }
        let s = group_sum(part, &mut sh, g * GROUP, lane, plane);
        if lane == 0 && e < e_n {
            z[e] = s + br[e];
        }
        e0 += groups;
    }
    sync_cube();
    // Cubes past the last token (the grid is spread over x/y/z) recompute its routes and
    // store nothing.
    if lane == 0 && g == 0 && CUBE_POS < n_tok as usize {
        top_k_softmax(&z, 0usize, e_n, ids, w, t * k, k, routing);
    }
}

/// Planes of [`GROUP`] lanes per route v3 cube: one router row per cube, 256 lanes along C,
/// so each lane has at most a few loads, all in flight at once (v2's lanes each walk a
/// whole row's 23 vectors of gpt-oss in six dependent rounds: 11.9 µs a layer on the H200,
/// 11% of a decode step; splitting v2's rows over 16 cubes of 2 rows left it at 11.7).
pub const V3_PLANES: usize = 8;

/// route v3: cube `t·E + e` computes router logit `z_e = h_t·Wr_e + br_e` (lanes along C,
/// four vector loads each per round, plane sums, the planes' partials added in order) into
/// `z [T, E]`; the last cube of the token to arrive (a device-scope counter, `arrivals[t]`,
/// reset by that cube for the next launch) copies the token's logits to shared memory and
/// ranks them as v1. Under programmatic dependent launch (`pdl`) it waits for the previous kernel
/// before reading h (with `early`, after loading its first router vectors).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_route_v3<N: Size>(
    h: &[Vector<f32, N>],
    wr: &[Vector<f32, N>],
    br: &[f32],
    z: &mut [f32],
    arrivals: &mut [Atomic<u32>],
    ids: &mut [u32],
    w: &mut [f32],
    n_tok: u32,
    cv: u32,
    n_exp: u32,
    #[comptime] k: usize,
    #[comptime] plane: bool,
    #[comptime] max_e: usize,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
    #[comptime] routing: u32,
) {
    let e_n = n_exp as usize;
    let t = CUBE_POS / e_n;
    if t < n_tok as usize {
        let lane = UNIT_POS_X as usize;
        let g = UNIT_POS_Y as usize;
        let units = CUBE_DIM_X as usize * CUBE_DIM_Y as usize;
        let tid = g * GROUP + lane;
        let cv = cv as usize;
        let e = CUBE_POS % e_n;
        let mut sh = Shared::<[f32]>::new_slice(GROUP * V3_PLANES);
        let mut parts = Shared::<[f32]>::new_slice(V3_PLANES);
        let mut zs = Shared::<[f32]>::new_slice(max_e);
        let s = group_sum(row_dot_pdl(h, wr, t, e, cv, tid, units, pdl, early), &mut sh, g * GROUP, lane, plane);
        if lane == 0 {
            parts[g] = s;
        }
        sync_cube();
        if tid == 0 {
            let mut tot = f32::new(0.0);
            for p in 0..CUBE_DIM_Y as usize {
                tot += parts[p];
            }
            z[t * e_n + e] = tot + br[e];
        }
        // Release this cube's logit, count arrivals, acquire the others' (device scope).
        let mut arrived = Shared::<u32>::new();
        sync_storage();
        if tid == 0 {
            *arrived = arrivals[t].fetch_add(1u32);
        }
        sync_storage();
        if *arrived == n_exp - 1u32 {
            let mut j = tid;
            while j < e_n {
                zs[j] = z[t * e_n + j];
                j += units;
            }
            sync_cube();
            if tid == 0 {
                top_k_softmax(&zs, 0usize, e_n, ids, w, t * k, k, routing);
                arrivals[t].store(0u32);
            }
        }
    }
}

fn check_k(op: &str, k: usize, e: usize) -> Result<(), Error> {
    if k == 0 || k > e || k > super::MAX_K {
        return Err(Error::Shape(format!("{op}: top-{k} of {e} experts (1 ≤ K ≤ min(E, {}))", super::MAX_K)));
    }
    Ok(())
}

/// The routes of `z [T, E]` (router logits, f32): each token's `k` largest logits, their
/// experts and softmax weights (route v1, GPT-OSS's routing).
pub fn route(client: &Client, z: &DeviceTensor, k: usize) -> Result<Routes, Error> {
    route_with(client, z, k, Routing::TopKSoftmax)
}

/// [`route`] by `routing`: each token's K experts and weights as `reference::ops::moe`'s
/// `Routing::route` makes them.
pub fn route_with(client: &Client, z: &DeviceTensor, k: usize, routing: Routing) -> Result<Routes, Error> {
    check_f32("moe_route", "z", z)?;
    let [t, e] = z.shape[..] else {
        return Err(Error::Shape(format!("moe_route: z {:?}, expected [T, E]", z.shape)));
    };
    check_k("moe_route", k, e)?;
    // ids are u32 words in an f32-sized buffer (as `DeviceTensor::from_u32` makes them).
    let routes = Routes { ids: DeviceTensor::empty_f32(client, &[t * k]), weights: DeviceTensor::empty_f32(client, &[t * k]), tokens: t, k };
    if t == 0 {
        return Ok(routes);
    }
    let g = Elementwise::with_vec(client, "moe_route", t, 1)?;
    unsafe {
        moe_route_v1::launch(
            client,
            g.count,
            g.dim,
            z.as_arg(1),
            routes.ids.as_arg(1),
            routes.weights.as_arg(1),
            t as u32,
            e as u32,
            k,
            routing_code(routing),
        );
    }
    Ok(routes)
}

/// The routes of `h [T, C]` (the MoE block's normed input) by `w`'s router: route v2 for a
/// decode step (T ≤ 8) where the experts fit its shared memory and the device its cube, else
/// the dense matmul + bias kernels and route v1.
pub fn route_tokens(client: &Client, h: &DeviceTensor, w: &MoeWeights) -> Result<Routes, Error> {
    let [t, c] = h.shape[..] else {
        return Err(Error::Shape(format!("moe_route: h {:?}, expected [T, C]", h.shape)));
    };
    let [e, rc] = w.router.shape[..] else {
        return Err(Error::Shape(format!("moe_route: router {:?}, expected [E, C]", w.router.shape)));
    };
    let hw = &client.properties().hardware;
    let fits = t <= V2_MAX_T
        && e <= V2_MAX_EXPERTS
        && (GROUP * V2_GROUPS) as u32 <= hw.max_units_per_cube
        && V2_GROUPS as u32 <= hw.max_cube_dim.1
        && hw.max_vector_size >= 4
        && (V2_MAX_EXPERTS + GROUP * V2_GROUPS) * 4 <= hw.max_shared_memory_size;
    if !fits || w.router.dtype != Dtype::F32 || h.dtype != Dtype::F32 || rc != c || c == 0 || !c.is_multiple_of(4) || w.router_bias.shape != [e] {
        let z = crate::kernels::matmul::linear(client, h, &w.router)?;
        crate::kernels::bias::bias_add(client, &z, &w.router_bias)?;
        return route_with(client, &z, w.k, w.routing);
    }
    check_k("moe_route", w.k, e)?;
    let routes = Routes { ids: DeviceTensor::empty_f32(client, &[t * w.k]), weights: DeviceTensor::empty_f32(client, &[t * w.k]), tokens: t, k: w.k };
    if t == 0 {
        return Ok(routes);
    }
    let plane = crate::kernels::uniform_plane_size(client) == Some(GROUP as u32);
    if client.kernels().moe_route == RouteVersion::V3
        && v3_supported(client)
        && w.arrivals.numel() >= t
        && (GROUP * V3_PLANES) as u32 <= hw.max_units_per_cube
        && V3_PLANES as u32 <= hw.max_cube_dim.1
    {
        let cubes = u32::try_from(t * e).map_err(|_| Error::Shape(format!("moe_route: {t} tokens × {e} experts")))?;
        let z = DeviceTensor::empty_f32(client, &[t, e]);
        // The router and its bias are never written by a kernel.
        let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
        unsafe {
            moe_route_v3::launch(
                client,
                CubeCountSelection::new(client, cubes).cube_count(),
                CubeDim::new_2d(GROUP as u32, V3_PLANES as u32),
                4,
                h.as_arg(4),
                w.router.as_arg(4),
                w.router_bias.as_arg(1),
                z.as_arg(1),
                w.arrivals.as_arg(1),
                routes.ids.as_arg(1),
                routes.weights.as_arg(1),
                t as u32,
                (c / 4) as u32,
                e as u32,
                w.k,
                plane,
                V2_MAX_EXPERTS,
                pdl,
                early,
                routing_code(w.routing),
            );
        }
        return Ok(routes);
    }
    unsafe {
        moe_route_v2::launch(
            client,
            CubeCountSelection::new(client, u32::try_from(t).map_err(|_| Error::Shape(format!("moe_route: {t} tokens")))?).cube_count(),
            CubeDim::new_2d(GROUP as u32, V2_GROUPS as u32),
            4,
            h.as_arg(4),
            w.router.as_arg(4),
            w.router_bias.as_arg(1),
            routes.ids.as_arg(1),
            routes.weights.as_arg(1),
            t as u32,
            (c / 4) as u32,
            e as u32,
            w.k,
            plane,
            V2_MAX_EXPERTS,
            routing_code(w.routing),
        );
    }
    Ok(routes)
}

/// Which fused router a decode step runs (`moe-route=` in the kernel configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouteVersion {
    V2,
    #[default]
    V3,
}

/// Whether route v3's last-cube ranking works here (device-scope storage sync and u32 atomic
/// adds, as flash decode v3 needs).
pub fn v3_supported(client: &Client) -> bool {
    crate::kernels::attention::DecodeVersion::V3.supported(client)
}

/// local v1: one unit per (token, rank) pair. An expert-parallel rank holds experts
/// `lo .. hi` (global ids) as its experts `0 .. hi − lo`: a pair routed to one of them keeps its
/// weight under the local id; any other pair (another rank's expert) gets local expert `other`
/// and weight 0 — the rank's share of the MoE output is its own experts' terms, and the
/// all-reduce after the FFN adds the other ranks' shares. `other` = 0 (an expert the rank holds:
/// the pair adds `0 · y = 0`, for kernels that run every pair) or `hi − lo` (no expert: the sort
/// leaves the pair out, so the grouped GEMMs never run it).
#[cube(launch)]
pub fn moe_routes_local_v1(
    ids: &[u32],
    weights: &[f32],
    ids_out: &mut [u32],
    weights_out: &mut [f32],
    lo: u32,
    hi: u32,
    other: u32,
    pairs: u32,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < pairs as usize {
        let id = ids[i];
        let mut local = other;
        let mut w = 0.0f32;
        if id >= lo && id < hi {
            local = id - lo;
            w = weights[i];
        }
        ids_out[i] = local;
        weights_out[i] = w;
    }
}

/// `routes` (global expert ids) as the routes of the experts `held` (global ids) of an
/// expert-parallel rank ([`moe_routes_local_v1`]): ids `0 .. |held|`, weight 0 for the pairs of
/// other ranks' experts, which get id `|held|` where `drop` (the sort leaves them out: only the
/// grouped GEMMs' path, whose combine skips weight-0 pairs) and id 0 otherwise (the gemvs run
/// every pair). The ranks' routes are the same (the router is replicated), so every pair is
/// counted on exactly one rank.
pub fn routes_local(client: &Client, routes: &Routes, held: &std::ops::Range<usize>, drop: bool) -> Result<Routes, Error> {
    let pairs = routes.tokens * routes.k;
    let out = Routes { ids: DeviceTensor::empty_f32(client, &[pairs]), weights: DeviceTensor::empty_f32(client, &[pairs]), ..routes.clone() };
    if pairs == 0 {
        return Ok(out);
    }
    let u32_of = |what: &str, n: usize| u32::try_from(n).map_err(|_| Error::Shape(format!("moe_routes_local: {what} = {n} exceeds the u32 range")));
    let (lo, hi, n) = (u32_of("first expert", held.start)?, u32_of("last expert", held.end)?, u32_of("pairs", pairs)?);
    let other = if drop { hi - lo } else { 0 };
    let g = Elementwise::with_vec(client, "moe_routes_local", pairs, 1)?;
    unsafe {
        moe_routes_local_v1::launch(
            client,
            g.count,
            g.dim,
            routes.ids.as_arg(1),
            routes.weights.as_arg(1),
            out.ids.as_arg(1),
            out.weights.as_arg(1),
            lo,
            hi,
            other,
            n,
            crate::kernels::pdl::enabled(client),
        );
    }
    Ok(out)
}
