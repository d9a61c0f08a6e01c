use super::*;
use crate::kv_blocks::block_hashes;
use proptest::prelude::*;

fn layout(bs: usize, full: usize, local: Option<(usize, usize)>) -> KvLayout {
    KvLayout { block_size: bs, num_blocks: full, local: local.map(|(num_blocks, window)| LocalKv { num_blocks, window }) }
}

/// Live table entries of `s`'s local table (not dropped).
fn held(m: &KvBlocks, s: SeqId) -> usize {
    m.local_table(s).expect("live").iter().filter(|&&b| b != DROPPED).count()
}

#[test]
fn without_a_local_group_it_is_the_full_group() {
    let mut m = KvBlocks::new(layout(4, 6, None)).expect("groups");
    let s = m.add_sequence().expect("seq");
    assert_eq!(m.grow(s, 9).expect("3 blocks"), 0);
    m.slide(s, 9).expect("nothing to drop");
    assert_eq!(m.table(s).expect("s").blocks, vec![0, 1, 2]);
    assert!(m.local_table(s).expect("s").is_empty());
    assert_eq!((m.num_used(), m.num_free(), m.room(s).expect("s")), (3, 3, 3 + 12));
    m.check().expect("invariants");
}

#[test]
fn a_slide_drops_exactly_the_blocks_out_of_every_later_window() {
    // Blocks of 4, window 6: a query at 20 reads keys 15 ..= 20, so blocks 0, 1, 2 (positions
    // 0 .. 12) go, block 3 (12 .. 16) stays.
    let mut m = KvBlocks::new(layout(4, 16, Some((8, 6)))).expect("groups");
    let s = m.add_sequence().expect("seq");
    m.grow(s, 20).expect("5 blocks each");
    assert_eq!(m.local().expect("local").num_free(), 3);
    m.slide(s, 20).expect("slide");
    assert_eq!(&m.local_table(s).expect("s")[..4], &[DROPPED, DROPPED, DROPPED, 3]);
    assert_eq!(m.local().expect("local").num_free(), 6, "three blocks back");
    assert_eq!(m.table(s).expect("s").blocks.len(), 5, "the full table keeps every block");
    m.check().expect("invariants");
    // A query at 21 reads keys from 16: block 3 goes too; one at 22 (from 17) drops nothing
    // more (block 4 holds 16 .. 20).
    m.grow(s, 1).expect("a new block (block 2 again: freed last)");
    m.slide(s, 21).expect("slide");
    assert_eq!(&m.local_table(s).expect("s")[3..], &[DROPPED, 4, 2]);
    m.grow(s, 1).expect("same block");
    m.slide(s, 22).expect("slide");
    assert_eq!(held(&m, s), 2);
    // Going back below the dropped blocks' positions is refused.
    let err = m.truncate(s, 15).expect_err("below the floor");
    assert!(err.to_string().contains("below the 22"), "{err}");
    m.check().expect("invariants");
    m.free_sequence(s).expect("end");
    assert_eq!(m.num_used_all(), 0);
}

#[test]
fn grow_reserve_and_room_need_both_groups() {
    // The local group of 3 blocks runs out before the full group of 16.
    let mut m = KvBlocks::new(layout(4, 16, Some((3, 4)))).expect("groups");
    let s = m.add_sequence().expect("seq");
    m.grow(s, 12).expect("3 blocks each");
    assert!(!m.fits(s, 1).expect("s"));
    assert_eq!(m.room(s).expect("s"), 0, "no local block free");
    let err = m.grow(s, 1).expect_err("local group full");
    assert!(err.to_string().contains("local group"), "{err}");
    assert!(!m.reserve(s, 1).expect("no room is no error"));
    assert_eq!((m.num_used(), m.table(s).expect("s").blocks.len()), (3, 3), "nothing allocated by the refusals");
    // A query at 12 reads keys from 9: blocks 0 and 1 go, and there is room again.
    m.slide(s, 12).expect("slide");
    assert_eq!(m.room(s).expect("s"), 8);
    assert!(m.reserve(s, 1).expect("held a step early"));
    assert_eq!((m.table(s).expect("s").blocks.len(), m.local_table(s).expect("s").len()), (4, 4));
    assert_eq!(m.grow(s, 1).expect("the held block"), 12);
    m.check().expect("invariants");
}

#[test]
fn a_cached_prefix_is_taken_only_as_far_as_the_local_group_still_holds_its_window() {
    let bs = 4;
    // Window 6: the query at h·4 reads blocks from (h·4 − 5) / 4.
    let mut m = KvBlocks::new(layout(bs, 32, Some((10, 6)))).expect("groups");
    let prompt: Vec<u32> = (0..25).collect();
    let hashes = block_hashes(&prompt, bs);
    assert_eq!(hashes.len(), 6);
    let (a, cached) = m.add_sequence_cached(&hashes).expect("seq");
    assert_eq!(cached, 0);
    m.grow(a, 25).expect("7 blocks");
    m.register_blocks(a, 0, &hashes).expect("6 full blocks");
    // A query at 24 reads keys from 19: blocks 0 ..= 3 go, to the local cache (registered).
    m.slide(a, 24).expect("slide");
    assert_eq!(m.local().expect("local").num_cached(), 4);
    m.check().expect("invariants");
    m.free_sequence(a).expect("end a");
    // Everything cached: the whole prefix, the local entries before block 4 dropped.
    let (b, cached) = m.add_sequence_cached(&hashes).expect("seq");
    assert_eq!(cached, 24);
    assert_eq!(&m.local_table(b).expect("b")[..4], &[DROPPED; 4]);
    assert_eq!(held(&m, b), 2);
    m.check().expect("invariants");
    m.free_sequence(b).expect("end b");
    // 8 more local blocks: the 4 free ones, then the 4 least recently released cached ones
    // (blocks 0 ..= 3, released before 4 and 5).
    let filler = m.add_sequence().expect("seq");
    m.grow(filler, 4 * 8).expect("8 local blocks: 4 free, then 4 evicted");
    let local = m.local().expect("local").allocator();
    let gone: Vec<bool> = hashes.iter().map(|&h| local.lookup(h).is_none()).collect();
    assert_eq!(gone, [true, true, true, true, false, false], "the oldest released go first");
    m.free_sequence(filler).expect("end");
    // The whole prefix still serves (a query at 24 reads blocks 4 and 5); a prefix of 5
    // blocks does not (a query at 20 reads block 3), nor any shorter one (each reads an
    // evicted block).
    let (c, cached) = m.add_sequence_cached(&hashes).expect("seq");
    assert_eq!(cached, 24);
    m.free_sequence(c).expect("end c");
    let (d, cached) = m.add_sequence_cached(&hashes[..5]).expect("seq");
    assert_eq!(cached, 0);
    m.free_sequence(d).expect("end d");
    m.check().expect("invariants");
    assert_eq!(m.num_used_all(), 0);
}

#[derive(Debug, Clone)]
enum Op {
    Add(usize),
    /// A step of n tokens of a live sequence from the positions it has (slide, then grow).
    Step(usize, usize),
    /// A verification: k speculative positions after one, then back to 1 + accepted.
    Verify(usize, usize, usize),
    Reserve(usize),
    Register(usize),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3).prop_map(Op::Add),
        (0usize..5, 1usize..14).prop_map(|(s, n)| Op::Step(s, n)),
        (0usize..5, 1usize..6, 0usize..6).prop_map(|(s, k, a)| Op::Verify(s, k, a)),
        (0usize..5).prop_map(Op::Reserve),
        (0usize..5).prop_map(Op::Register),
        (0usize..5).prop_map(Op::Free),
    ]
}

proptest! {
    /// Engine-like use of both groups (slides before each step, speculation rolled back,
    /// reservations, prefix caching) keeps every invariant of both groups ([`KvBlocks::check`]:
    /// a dropped entry is always out of every later query's window, every held block is
    /// referenced exactly); a slide leaves no block that could have gone; a grow succeeds
    /// exactly when both groups have the blocks; ending every sequence leaks nothing.
    #[test]
    fn both_groups_stay_consistent_under_engine_like_use(
        bs in 1usize..6, full in 4usize..40, local in 2usize..24, window in 1usize..20,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut m = KvBlocks::new(layout(bs, full, Some((local, window)))).expect("groups");
        let prompts: Vec<Vec<u64>> = (0..3u32).map(|p| block_hashes(&(0..96).map(|i| i % (p + 3)).collect::<Vec<u32>>(), bs)).collect();
        // Live sequences: (id, prompt).
        let mut live: Vec<(SeqId, usize)> = Vec::new();
        for o in ops {
            match o {
                Op::Add(p) => {
                    let (s, len) = m.add_sequence_cached(&prompts[p]).expect("never fails");
                    prop_assert_eq!(len % bs, 0);
                    prop_assert!(len <= prompts[p].len() * bs);
                    live.push((s, p));
                }
                Op::Step(i, n) => if let Some(&(s, _)) = live.get(i) {
                    let pos0 = m.len(s).expect("live");
                    m.slide(s, pos0).expect("slide");
                    let first = (pos0 + 1).saturating_sub(window) / bs;
                    let t = m.local_table(s).expect("live");
                    prop_assert!(t[..first.min(t.len())].iter().all(|&b| b == DROPPED), "a block out of the window kept");
                    let need = |g: &BlockManager| g.blocks_needed(s, n).expect("live");
                    let fits = need(m.full()) <= m.full().num_free() && need(m.local().expect("local")) <= m.local().expect("local").num_free();
                    prop_assert_eq!(m.fits(s, n).expect("live"), fits);
                    prop_assert_eq!(m.grow(s, n).is_ok(), fits);
                },
                Op::Verify(i, k, a) => if let Some(&(s, _)) = live.get(i) {
                    let pos0 = m.len(s).expect("live");
                    m.slide(s, pos0).expect("slide");
                    if m.fits(s, 1 + k).expect("live") {
                        m.grow(s, 1 + k).expect("fits");
                        // The verified step keeps its first position and the accepted ones.
                        m.truncate(s, pos0 + 1 + a.min(k)).expect("never below pos0 + 1");
                    }
                },
                Op::Reserve(i) => if let Some(&(s, _)) = live.get(i) {
                    m.reserve(s, 1).expect("never an error");
                },
                Op::Register(i) => if let Some(&(s, p)) = live.get(i) {
                    let n = (m.len(s).expect("live") / bs).min(prompts[p].len());
                    m.register_blocks(s, 0, &prompts[p][..n]).expect("computed full blocks");
                },
                Op::Free(i) => if i < live.len() {
                    let (s, _) = live.remove(i);
                    m.free_sequence(s).expect("live");
                },
            }
            prop_assert!(m.check().is_ok(), "{:?}", m.check());
        }
        for (s, _) in live { m.free_sequence(s).expect("live"); }
        prop_assert_eq!(m.num_used_all(), 0);
        prop_assert_eq!(m.local().expect("local").num_free(), local);
        prop_assert!(m.check().is_ok());
    }
}
