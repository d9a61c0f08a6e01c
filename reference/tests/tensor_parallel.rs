//! Tensor parallelism on the reference: the loopback communicator's collectives, the shard
//! plan's slices and errors, and — for every architecture's tiny checkpoint and GPT-OSS's
//! synthetic ones — the model sharded over 2 and 4 simulated ranks (8 where the heads allow)
//! gives the unsharded logits within `parallel::SHARDED_NMSE`, through a prefill and decode
//! steps on the ranks' KV caches. Run with `--release`.

use std::path::PathBuf;

use ndarray::Array2;
use reference::arch::model::{forward, new_cache, WeightsRef};
use reference::arch::{self, FfnSpec, ModelSpec};
use reference::gpt_oss::synthetic as gsyn;
use reference::parallel::{Communicator, ExpertCut, Loopback, LoopbackGroup, MoeSplit, ShardPlan, SHARDED_NMSE};

const IDS: [u32; 9] = [1, 5, 42, 7, 7, 90, 3, 0, 64];
/// Prefill this many of IDS, then decode the rest one at a time.
const PREFILL: usize = 6;

/// Every architecture's tiny HF checkpoint (GGUF twins load through the same spec).
const FIXTURES: [&str; 8] = ["llama3", "mistral_hd", "qwen2", "qwen3", "qwen3_yarn", "qwen3_moe", "gemma3", "phi3"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

fn nmse(got: &Array2<f32>, want: &Array2<f32>) -> f64 {
    assert_eq!(got.dim(), want.dim());
    let num: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    num / den
}

/// Unsharded logits of IDS: the prefill's rows, then each decode step's.
fn unsharded(spec: &ModelSpec, w: &dyn WeightsRef) -> Vec<Array2<f32>> {
    let mut cache = new_cache(spec);
    let mut out = vec![forward(spec, w, &IDS[..PREFILL], &mut cache, None, None).unwrap()];
    for id in &IDS[PREFILL..] {
        out.push(forward(spec, w, &[*id], &mut cache, None, None).unwrap());
    }
    out
}

/// The same through a group sharded by `plan`, each rank on its own cache.
fn sharded(spec: &ModelSpec, w: &dyn WeightsRef, plan: ShardPlan) -> Vec<Array2<f32>> {
    let g = LoopbackGroup::new(spec, w, plan).unwrap();
    let mut caches = g.new_caches();
    let mut out = vec![g.forward(&IDS[..PREFILL], &mut caches).unwrap()];
    for id in &IDS[PREFILL..] {
        out.push(g.forward(&[*id], &mut caches).unwrap());
    }
    out
}

/// Sharded over `n` ranks equals unsharded within the bound, at every step.
fn check(name: &str, spec: &ModelSpec, w: &dyn WeightsRef, n: usize, moe: Option<MoeSplit>) {
    let want = unsharded(spec, w);
    let plan = ShardPlan::with_moe(spec, n, moe).unwrap();
    let got = sharded(spec, w, plan);
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        let e = nmse(g, w);
        eprintln!("{name} TP {n} {moe:?} step {step}: NMSE {e:.1e}");
        assert!(e <= SHARDED_NMSE, "{name} TP {n} {moe:?} step {step}: NMSE {e:.2e} > {SHARDED_NMSE:.0e}");
    }
}

#[test]
fn every_architecture_sharded_equals_unsharded() {
    for name in FIXTURES {
        let m = arch::load(&fixture(name)).unwrap();
        let moe = matches!(m.spec.layers[0].ffn, FfnSpec::Moe { .. });
        for n in [1, 2, 4] {
            if moe {
                check(name, &m.spec, &m.weights, n, Some(MoeSplit::Experts));
                check(name, &m.spec, &m.weights, n, Some(MoeSplit::PerExpert));
            } else {
                check(name, &m.spec, &m.weights, n, None);
            }
        }
        // 4 query heads: 3 ranks is the clear error.
        let e = ShardPlan::new(&m.spec, 3).unwrap_err().to_string();
        assert!(e.contains("--tensor-parallel 3: 4 query heads do not split into 3 ranks"), "{name}: {e}");
    }
}

#[test]
fn llama_gguf_sharded_equals_unsharded() {
    // Adjacent-pair RoPE rows (llama GGUFs) stay whole within a head's rows.
    let m = arch::load(&fixture("llama3").join("model.gguf")).unwrap();
    check("llama3 gguf", &m.spec, &m.weights, 2, None);
}

#[test]
fn gpt_oss_sharded_equals_unsharded() {
    for (name, cfg) in gsyn::tiny_configs() {
        let w = gsyn::weights(&cfg, 3).unwrap();
        let spec = arch::gpt_oss::from_config(&cfg);
        for n in [2, 4] {
            check(name, &spec, &w, n, Some(MoeSplit::Experts));
            check(name, &spec, &w, n, Some(MoeSplit::PerExpert));
        }
        if cfg.n_heads == 8 {
            // V = 300 over 8 ranks: 38 token rows a rank, the last 34, padded in the gather;
            // 2 KV heads each on 4 ranks; one expert a rank.
            check(name, &spec, &w, 8, None);
        }
    }
}

#[test]
fn the_joined_cache_equals_the_ranks_caches() {
    let m = arch::load(&fixture("qwen3")).unwrap();
    let want = unsharded(&m.spec, &m.weights);
    for n in [2, 4] {
        let g = LoopbackGroup::new(&m.spec, &m.weights, ShardPlan::new(&m.spec, n).unwrap()).unwrap();
        let hkv = g.joined_kv_heads();
        // 2 KV heads: split over 2 ranks, one copy a rank over 4.
        assert_eq!(hkv, if n == 2 { 2 } else { 4 });
        let mut cache = reference::kv_cache::KvCache::new(m.spec.n_layers(), hkv, m.spec.layers[0].attn.head_dim);
        let mut got = vec![g.forward_joined(&IDS[..PREFILL], &mut cache).unwrap()];
        for id in &IDS[PREFILL..] {
            got.push(g.forward_joined(&[*id], &mut cache).unwrap());
        }
        assert_eq!(cache.len(), IDS.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(nmse(g, w) <= SHARDED_NMSE);
        }
    }
}

#[test]
fn plan_slices_heads_kv_groups_ffn_experts_and_vocab() {
    let m = arch::load(&fixture("qwen3_moe")).unwrap();
    // 4 query heads, 2 KV heads, 8 experts of width 32, V = 256.
    let p = ShardPlan::new(&m.spec, 2).unwrap();
    assert_eq!(p.moe, Some(MoeSplit::Experts));
    assert_eq!((p.ranks[1].q_heads.clone(), p.ranks[1].kv_heads.clone(), p.ranks[1].vocab.clone()), (2..4, 1..2, 128..256));
    assert_eq!(p.ranks[1].experts, Some(ExpertCut::Whole(4..8)));
    let p = ShardPlan::new(&m.spec, 4).unwrap();
    // Fewer KV heads than ranks: ranks 0, 1 read KV head 0, ranks 2, 3 KV head 1.
    let kv: Vec<_> = p.ranks.iter().map(|r| r.kv_heads.clone()).collect();
    assert_eq!(kv, [0..1, 0..1, 1..2, 1..2]);
    let p = ShardPlan::with_moe(&m.spec, 4, Some(MoeSplit::PerExpert)).unwrap();
    assert_eq!(p.ranks[3].experts, Some(ExpertCut::Rows { rows: 24..32, bias: false }));
    assert_eq!(p.ranks[0].experts, Some(ExpertCut::Rows { rows: 0..8, bias: true }));
    let local = p.local_spec(&m.spec, 3).unwrap();
    assert_eq!((local.layers[0].attn.n_heads, local.layers[0].attn.n_kv_heads), (1, 1));
    assert!(matches!(local.layers[0].ffn, FfnSpec::Moe { n_experts: 8, expert_ffn: 8, .. }));
    // A W8A8 checkpoint's per-token scales span o's and down's whole inputs: refused on ranks
    // (one rank keeps the whole row and runs).
    let w8a8 = arch::load(&fixture("qwen3_fp8")).unwrap().spec;
    let e = ShardPlan::new(&w8a8, 2).unwrap().local_spec(&w8a8, 0).unwrap_err().to_string();
    assert!(e.contains("quantize their inputs per token") && e.contains("one GPU"), "{e}");
    assert!(ShardPlan::new(&w8a8, 1).unwrap().local_spec(&w8a8, 0).is_ok());
}

#[test]
fn plan_errors_name_what_does_not_divide() {
    let base = arch::load(&fixture("qwen3")).unwrap().spec;
    let with = |f: &dyn Fn(&mut ModelSpec)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    let err = |s: &ModelSpec, n: usize| ShardPlan::new(s, n).unwrap_err().to_string();
    assert_eq!(err(&base, 0), "invalid input: --tensor-parallel 0: needs at least 1 rank");
    let s32 = with(&|s| s.layers.iter_mut().for_each(|l| (l.attn.n_heads, l.attn.n_kv_heads) = (32, 8)));
    assert!(err(&s32, 3).contains("--tensor-parallel 3: 32 query heads do not split into 3 ranks"));
    let s6 = with(&|s| s.layers.iter_mut().for_each(|l| (l.attn.n_heads, l.attn.n_kv_heads) = (12, 6)));
    assert!(err(&s6, 4).contains("--tensor-parallel 4: 6 kv heads do not split into 4 ranks"));
    // 12 heads over 3 ranks is 4 a rank, but a KV head serves 6: rank 1 would need two.
    let s2 = with(&|s| s.layers.iter_mut().for_each(|l| (l.attn.n_heads, l.attn.n_kv_heads) = (12, 2)));
    assert!(err(&s2, 3).contains("2 kv heads cannot be replicated evenly over 3 ranks"));
    let f = with(&|s| s.layers.iter_mut().for_each(|l| l.ffn = FfnSpec::Dense { ffn: 130, act: reference::ops::mlp::Activation::Silu }));
    assert!(err(&f, 4).contains("--tensor-parallel 4: FFN width 130 does not split into 4 ranks"));
    let moe = arch::load(&fixture("qwen3_moe")).unwrap().spec;
    let odd = |e, f| {
        let mut s = moe.clone();
        for l in &mut s.layers {
            if let FfnSpec::Moe { n_experts, expert_ffn, .. } = &mut l.ffn {
                (*n_experts, *expert_ffn) = (e, f);
            }
        }
        s
    };
    assert!(err(&odd(6, 30), 4).contains("--tensor-parallel 4: 6 experts do not split into 4 ranks, nor their width 30"));
    // 6 experts of width 32: split per expert where they do not divide.
    assert_eq!(ShardPlan::new(&odd(6, 32), 4).unwrap().moe, Some(MoeSplit::PerExpert));
    let e = ShardPlan::with_moe(&odd(6, 32), 4, Some(MoeSplit::Experts)).unwrap_err().to_string();
    assert!(e.contains("6 experts do not split into 4 ranks"), "{e}");
}

/// Runs `f(rank's communicator)` on every rank of a loopback group of `n`, in threads.
fn on_ranks<T: Send>(n: usize, f: impl Fn(&Loopback) -> T + Sync) -> Vec<T> {
    let comms = Loopback::group(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn loopback_all_reduce_sums_in_rank_order_on_every_rank() {
    // 1e8 + 1 − 1e8 is 0 in f32 left to right, 1 in another order: every rank gets rank
    // order's sum, whichever thread arrives first.
    for _ in 0..20 {
        let got = on_ranks(3, |c| {
            let mut b = vec![[1e8f32, 1.0, -1e8][c.rank()], c.rank() as f32];
            for _ in 0..3 {
                // Several rounds in a row reuse the slots.
                b = vec![[1e8f32, 1.0, -1e8][c.rank()], c.rank() as f32];
                c.all_reduce_sum(&mut b).unwrap();
            }
            b
        });
        for b in &got {
            assert_eq!(b, &vec![0.0, 3.0]);
        }
    }
}

#[test]
fn loopback_gathers_and_exchanges_in_rank_order() {
    let got = on_ranks(4, |c| c.all_gather(&[c.rank() as f32, 10.0 + c.rank() as f32]).unwrap());
    for g in &got {
        assert_eq!(g, &vec![0.0, 10.0, 1.0, 11.0, 2.0, 12.0, 3.0, 13.0]);
    }
    // Rank s sends rank d the values [s, d] repeated s + 1 times.
    let got = on_ranks(3, |c| {
        let s = c.rank();
        c.all_to_all((0..3).map(|d| [s as f32, d as f32].repeat(s + 1)).collect()).unwrap()
    });
    for (d, recv) in got.iter().enumerate() {
        for (s, m) in recv.iter().enumerate() {
            assert_eq!(m, &[s as f32, d as f32].repeat(s + 1), "rank {d} from rank {s}");
        }
    }
    let e = on_ranks(2, |c| c.all_gather(&vec![0.0; c.rank() + 1]).map(|_| ()));
    assert!(e.iter().all(|r| r.as_ref().unwrap_err().to_string().contains("all-gather: a rank sent")));
}

#[test]
fn a_failed_rank_stops_the_group_instead_of_hanging_it() {
    let got = on_ranks(3, |c| {
        if c.rank() == 1 {
            c.fail("bad shard");
            return Err(reference::Error::Input("rank 1's own error".into()));
        }
        c.all_reduce_sum(&mut [1.0])
    });
    for (r, g) in got.iter().enumerate() {
        let e = g.as_ref().unwrap_err().to_string();
        assert!(if r == 1 { e.contains("own error") } else { e.contains("rank 1 failed: bad shard") }, "rank {r}: {e}");
    }
    // Through the group: an out-of-vocabulary id fails on every rank, and is named.
    let m = arch::load(&fixture("llama3")).unwrap();
    let g = LoopbackGroup::new(&m.spec, &m.weights, ShardPlan::new(&m.spec, 2).unwrap()).unwrap();
    let e = g.forward(&[1, 999], &mut g.new_caches()).unwrap_err().to_string();
    assert!(e.contains("token id 999 at position 1 is outside the vocabulary (V = 256)"), "{e}");
    assert!(g.forward(&[1], &mut g.new_caches()[..1].to_vec()).unwrap_err().to_string().contains("1 caches for 2 ranks"));
}
