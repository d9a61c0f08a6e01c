use super::*;
use proptest::prelude::*;

#[test]
fn allocator_rejects_double_free_and_foreign_ids() {
    let mut a = BlockAllocator::new(3).expect("3 blocks");
    let b = a.allocate().expect("free block");
    assert_eq!(b, 0);
    assert!(a.release(b).expect("live block"));
    assert!(matches!(a.release(b), Err(Error::KvCache(m)) if m.contains("double free")));
    assert!(a.release(7).is_err());
    assert!(a.retain(b).is_err(), "retain of a free block");
    a.check().expect("consistent after refused calls");
    for _ in 0..3 {
        a.allocate().expect("three blocks");
    }
    assert!(matches!(a.allocate(), Err(Error::PoolExhausted(_))));
}

#[test]
fn grow_is_all_or_nothing_and_names_the_shortfall() {
    let mut m = BlockManager::new(16, 4).expect("pool");
    let s = m.add_sequence();
    assert_eq!(m.grow(s, 17).expect("2 blocks"), 0);
    assert_eq!(m.table(s).expect("seq").blocks, vec![0, 1]);
    let t = m.add_sequence();
    let err = m.grow(t, 40).expect_err("needs 3 of 2 free");
    assert!(err.to_string().contains("needs 3 more blocks"), "{err}");
    assert_eq!(m.num_free(), 2, "nothing allocated by the refused grow");
    m.check().expect("invariants");
    // 15 more positions fit in block 1 (17 + 15 = 32): no new block.
    assert_eq!(m.grow(s, 15).expect("fits"), 17);
    assert_eq!(m.num_free(), 2);
}

#[test]
fn reserve_holds_the_next_block_without_moving_the_length() {
    let mut m = BlockManager::new(4, 3).expect("pool");
    let s = m.add_sequence();
    m.grow(s, 4).expect("1 block");
    assert!(m.reserve(s, 1).expect("a free block"));
    assert_eq!((m.len(s).expect("len"), m.table(s).expect("s").blocks.len(), m.num_free()), (4, 2, 1));
    // The next position uses the held block: no new allocation.
    assert_eq!(m.grow(s, 1).expect("held"), 4);
    assert_eq!(m.num_free(), 1);
    // Nothing to hold mid-block; a full pool is no error, just nothing held.
    assert!(m.reserve(s, 1).expect("room in block 1"));
    let t = m.add_sequence();
    m.grow(t, 4).expect("the last block");
    assert!(!m.reserve(t, 1).expect("a full pool"));
    assert_eq!(m.table(t).expect("t").blocks.len(), 1);
    m.check().expect("invariants");
    m.free_sequence(s).expect("end s");
    m.free_sequence(t).expect("end t");
    assert_eq!(m.num_free(), 3, "held blocks go back with their sequence");
}

#[test]
fn shared_prefix_blocks_survive_their_first_owner() {
    let mut m = BlockManager::new(4, 8).expect("pool");
    let a = m.add_sequence();
    m.grow(a, 10).expect("3 blocks");
    let b = m.share_prefix(a, 2).expect("2 full blocks");
    assert_eq!(m.table(b).expect("b").blocks, m.table(a).expect("a").blocks[..2]);
    m.grow(b, 1).expect("b appends into a block of its own");
    assert_ne!(m.table(b).expect("b").blocks[2], m.table(a).expect("a").blocks[2]);
    assert!(m.truncate(a, 6).is_err(), "would leave shared block partial");
    m.check().expect("invariants");
    m.free_sequence(a).expect("end a");
    m.check().expect("invariants");
    assert_eq!(m.num_free(), 8 - 3);
    m.free_sequence(b).expect("end b");
    assert_eq!(m.num_free(), 8, "no leak");
    assert!(m.free_sequence(b).is_err(), "ending twice");
}

#[test]
fn cached_blocks_come_back_for_the_same_prefix_and_are_evicted_last_released_last() {
    let bs = 4;
    let mut m = BlockManager::new(bs, 6).expect("pool");
    let prompt: Vec<u32> = (0..10).collect();
    let hashes = block_hashes(&prompt, bs);
    assert_eq!(hashes.len(), 2, "two full blocks of 4 in 10 tokens");
    let (a, cached) = m.add_sequence_cached(&hashes).expect("seq");
    assert_eq!(cached, 0, "empty cache");
    m.grow(a, 10).expect("3 blocks");
    m.register_blocks(a, 0, &hashes).expect("register 2 full blocks");
    let a_blocks = m.table(a).expect("a").blocks.clone();
    m.free_sequence(a).expect("end a");
    assert_eq!(m.num_cached(), 2);
    assert_eq!(m.num_free(), 6, "cached blocks still count as available");
    m.check().expect("invariants");
    // Same prefix: both blocks come back.
    let (b, cached) = m.add_sequence_cached(&hashes).expect("seq");
    assert_eq!(cached, 8);
    assert_eq!(m.table(b).expect("b").blocks, a_blocks[..2]);
    assert_eq!(m.num_cached(), 0);
    m.check().expect("invariants");
    // Another prefix with the same first block shares only that one.
    let mut other = prompt.clone();
    other[5] = 99;
    let (c, cached) = m.add_sequence_cached(&block_hashes(&other, bs)).expect("seq");
    assert_eq!(cached, 4);
    assert_eq!(m.allocator().refcount(a_blocks[0]), 2);
    m.free_sequence(b).expect("end b");
    m.free_sequence(c).expect("end c");
    m.check().expect("invariants");
    // Filling the pool evicts the cached blocks rather than failing.
    let d = m.add_sequence();
    m.grow(d, 6 * bs).expect("all 6 blocks, evicting the cached ones");
    assert_eq!(m.num_cached(), 0);
    assert!(m.allocator().lookup(hashes[0]).is_none(), "evicted hash forgotten");
    m.check().expect("invariants");
}

#[test]
fn hashes_chain_over_the_whole_prefix() {
    let a = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4);
    let b = block_hashes(&[9, 2, 3, 4, 5, 6, 7, 8], 4);
    assert_eq!(a.len(), 2);
    assert_ne!(a[1], b[1], "same second block, different first: different hash");
    assert_eq!(block_hashes(&[1, 2, 3], 4).len(), 0, "no full block");
}

#[derive(Debug, Clone)]
enum Step {
    Add,
    AddCached(usize),
    Grow(usize, usize),
    Truncate(usize, usize),
    Share(usize, usize),
    Register(usize),
    Free(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Add),
        (0usize..4).prop_map(Step::AddCached),
        (0usize..6, 0usize..40).prop_map(|(s, n)| Step::Grow(s, n)),
        (0usize..6, 0usize..40).prop_map(|(s, n)| Step::Truncate(s, n)),
        (0usize..6, 0usize..4).prop_map(|(s, n)| Step::Share(s, n)),
        (0usize..6).prop_map(Step::Register),
        (0usize..6).prop_map(Step::Free),
    ]
}

proptest! {
    /// Any sequence of operations (refused ones included) keeps every invariant; ending all
    /// sequences makes every block available; and a grow succeeds exactly when enough blocks
    /// are available (no fragmentation).
    #[test]
    fn invariants_hold_under_random_use(bs in 1usize..9, n in 1usize..24, steps in proptest::collection::vec(step(), 1..60)) {
        let mut m = BlockManager::new(bs, n).expect("pool");
        let mut live: Vec<SeqId> = Vec::new();
        // A few fixed "prompts" whose block hashes sequences register and look up.
        let prompts: Vec<Vec<u64>> = (0..4u32).map(|p| block_hashes(&(0..64).map(|i| i % (p + 2)).collect::<Vec<u32>>(), bs)).collect();
        let mut prompt_of: std::collections::HashMap<SeqId, usize> = Default::default();
        for st in steps {
            match st {
                Step::Add => live.push(m.add_sequence()),
                Step::AddCached(p) => {
                    let (s, len) = m.add_sequence_cached(&prompts[p]).expect("never fails");
                    prop_assert_eq!(len % bs, 0);
                    prompt_of.insert(s, p);
                    live.push(s);
                }
                Step::Grow(i, k) => if let Some(&s) = live.get(i) {
                    let need = m.blocks_needed(s, k).expect("live");
                    let free = m.num_free();
                    prop_assert_eq!(m.grow(s, k).is_ok(), need <= free);
                },
                Step::Truncate(i, k) => if let Some(&s) = live.get(i) { let _ = m.truncate(s, k); },
                Step::Share(i, k) => if let Some(&s) = live.get(i) {
                    if let Ok(id) = m.share_prefix(s, k) { live.push(id); }
                },
                Step::Register(i) => if let Some(&s) = live.get(i) {
                    if let Some(&p) = prompt_of.get(&s) {
                        let full = (m.len(s).expect("live") / bs).min(prompts[p].len());
                        m.register_blocks(s, 0, &prompts[p][..full]).expect("full computed blocks");
                    }
                },
                Step::Free(i) => if i < live.len() { let s = live.remove(i); m.free_sequence(s).expect("live sequence"); },
            }
            prop_assert!(m.check().is_ok(), "{:?}", m.check());
        }
        for s in live { m.free_sequence(s).expect("live"); }
        prop_assert_eq!(m.num_free(), n);
        prop_assert_eq!(m.num_used(), 0);
        prop_assert!(m.check().is_ok());
    }
}
