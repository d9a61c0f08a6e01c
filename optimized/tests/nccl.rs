//! NCCL (`optimized::nccl`): on a machine with 2 GPUs and libnccl, the all-reduce and
//! all-gather of two ranks, and a tiny model sharded over the two GPUs' ranks giving the
//! loopback group's logits; elsewhere those print why they are skipped (a skip is not a pass),
//! and asking for a group without NCCL is a clear error. Run with `--release`.

use std::path::PathBuf;

use optimized::nccl::{self, NcclComm, NcclHost};
use reference::parallel::{Communicator, LoopbackGroup, ShardPlan};

/// `None` where 2 GPUs and NCCL are present; else why not.
fn skip_reason() -> Option<String> {
    let n = nccl::device_count();
    if n < 2 {
        return Some(format!("{n} CUDA devices visible, 2 needed"));
    }
    nccl::available().err().map(|e| e.to_string())
}

fn two_ranks() -> Option<Vec<NcclHost>> {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (not a pass): {why}");
        return None;
    }
    Some(NcclComm::all_devices(2).unwrap().into_iter().map(|c| NcclHost::new(c).unwrap()).collect())
}

#[test]
fn two_gpus_all_reduce_and_all_gather() {
    let Some(ranks) = two_ranks() else { return };
    let got: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let r = c.rank() as f32;
                    let mut b: Vec<f32> = (0..1000).map(|i| i as f32 + r * 0.5).collect();
                    c.all_reduce_sum(&mut b).unwrap();
                    (b, c.all_gather(&[r, r + 10.0]).unwrap())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (sum, gathered) in &got {
        assert!(sum.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 0.5));
        assert_eq!(gathered, &vec![0.0, 10.0, 1.0, 11.0]);
    }
}

#[test]
fn a_model_sharded_over_two_gpus_matches_the_loopback_group() {
    let Some(ranks) = two_ranks() else { return };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/fixtures/tiny/qwen3_moe");
    let m = reference::arch::load(&dir).unwrap();
    let g = LoopbackGroup::new(&m.spec, &m.weights, ShardPlan::new(&m.spec, 2).unwrap()).unwrap();
    let ids = [1, 5, 42, 7, 7, 90];
    let want = g.forward(&ids, &mut g.new_caches()).unwrap();
    let g = &g;
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> =
            ranks.iter().enumerate().map(|(r, c)| s.spawn(move || g.forward_rank(r, c, &ids, &mut g.new_caches()[r]).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for l in &got {
        // A sum of two is the same either way round: NCCL gives the loopback group's bits, up to
        // its reduction kernels' own arithmetic.
        let d = l.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(d <= 1e-5, "NCCL vs loopback logits differ by {d}");
    }
}

#[test]
fn without_nccl_a_group_is_a_clear_error() {
    if nccl::available().is_ok() {
        eprintln!("SKIPPED (not a pass): libnccl is present here");
        return;
    }
    let e = NcclComm::all_devices(2).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("libnccl was not found: tensor parallelism over GPUs needs NCCL"), "{e}");
}
