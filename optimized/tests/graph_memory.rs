//! What recorded decode graphs hold on the device (`optimized::arena`, `runner::graphs`): the
//! recordings share one arena of activations, so recording the smaller buckets after the
//! largest adds no activation buffers, and the pools grow by the recordings' own input
//! buffers only. Runs on wgpu (lavapipe on machines without a GPU); a machine with no Vulkan
//! adapter skips with a message unless `TANDEM_REQUIRE_WGPU=1`.

use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use optimized::model::GpuModel;
use optimized::runner::{GpuRunner, BUCKETS};
use optimized::{client, memory_reserved, Backend, Client, Dtype};
use reference::synthetic;
use reference::weights::InMemory;

fn wgpu() -> Option<Client> {
    match client(Backend::Wgpu) {
        Ok(c) => Some(c),
        Err(e) if std::env::var_os("TANDEM_REQUIRE_WGPU").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("TANDEM_REQUIRE_WGPU is set but: {e}"),
    }
}

#[test]
fn smaller_recordings_lease_the_largest_ones_activations() {
    let Some(c) = wgpu() else { return };
    let (_, cfg) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").expect("tiny-gqa");
    let w = synthetic::weights(&cfg, 0).expect("weights");
    let m = GpuModel::load(c.clone(), Backend::Wgpu, &mut InMemory(&w), &reference::arch::llama::from_config(&cfg), Dtype::F32).expect("load");
    let top = 64;
    let mut r = GpuRunner::new(m, 4, top + 16).expect("runner");
    let arena = r.model.client.arena().clone();
    let before = memory_reserved(&c);
    // One decode step of `top` sequences (the GEMM path), greedy: recorded by the step itself,
    // its activations leased from the arena.
    let tokens: Vec<[u32; 1]> = (0..top as u32).map(|i| [i % 7]).collect();
    let blocks: Vec<[u32; 1]> = (0..top as u32).map(|i| [i]).collect();
    let greedy = SamplingParams::default();
    let plan = StepPlan {
        seqs: (0..top)
            .map(|i| SeqStep {
                tokens: &tokens[i],
                pos0: 0,
                blocks: &blocks[i],
                local_blocks: &[],
                samples: vec![SampleSpec { params: &greedy, counter: 0, counts: &[], want_logits: false, allowed: None }],
            })
            .collect(),
        continues: false,
        ..StepPlan::default()
    };
    let out = r.step(&plan).expect("step");
    assert_eq!(out.len(), top);
    assert_eq!(r.graph_recordings(), (0, 1), "the step recorded its graph");
    let first = arena.stats();
    let after_first = memory_reserved(&c);
    assert!(first.slots > 0 && first.bytes > 0, "the recording's activations come from the arena: {first:?}");
    // Every other bucket up to `top`, greedy and sampled, at the same table width.
    let made = r.prepare_decode(top, 32, false).expect("record") + r.prepare_decode(top, 32, true).expect("record");
    let rest = arena.stats();
    let after_rest = memory_reserved(&c);
    eprintln!(
        "the first recording: arena {first:?}, pools +{} B; {made} more: arena {rest:?}, pools +{} B",
        after_first as i64 - before as i64,
        after_rest as i64 - after_first as i64
    );
    let buckets = BUCKETS.iter().filter(|&&b| b <= top).count();
    assert_eq!(made, 2 * buckets - 1);
    // The smaller recordings' temporaries fit the buffers the largest one left free, except
    // the sampled draw's own (the largest sampled recording adds them once).
    assert!(rest.bytes < first.bytes * 2, "{first:?} then {rest:?}");
    assert!(rest.reused > 10 * first.reused.max(1), "{first:?} then {rest:?}");
}

/// Seats past the largest bucket (`serve --max-seqs 1024`) record every bucket: steps of up to
/// 512 rows replay, larger ones run eagerly — none is recorded in the request path, where the
/// pool sized around the recordings has no room for another.
#[test]
fn seats_past_the_largest_bucket_record_every_bucket() {
    let Some(c) = wgpu() else { return };
    let (_, cfg) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").expect("tiny-gqa");
    let w = synthetic::weights(&cfg, 0).expect("weights");
    let m = GpuModel::load(c, Backend::Wgpu, &mut InMemory(&w), &reference::arch::llama::from_config(&cfg), Dtype::F32).expect("load");
    let largest = *BUCKETS.last().expect("buckets");
    let mut r = GpuRunner::new(m, 4, 16).expect("runner");
    let made = r.prepare_decode(2 * largest, 4, false).expect("record");
    assert_eq!(made, BUCKETS.len(), "one recording a bucket at the one table width");
    assert_eq!(r.graph_recordings(), (made as u64, 0));
}
