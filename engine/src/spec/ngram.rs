//! Prompt lookup (n-gram) proposals: find the last `n` tokens of a sequence earlier in its
//! prompt + output and propose the tokens that followed them there.
//!
//! One backward pass over the sequence: every earlier position `j` whose preceding tokens
//! match the sequence's last tokens is a candidate with match length `m(j)` (capped at
//! `max_n`; at least `min_n` to count). The longest match wins — "n from a max down to a min"
//! — and among equally long ones the latest with the most of `k` tokens after it. Cost: O(len) comparisons of one token plus O(max_n) per candidate, a few µs for a
//! few thousand tokens.

/// Up to `k` tokens proposed to follow `tokens` (empty when no n-gram of length
/// `min_n ..= max_n` ending the sequence occurs earlier in it).
pub fn propose(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    let len = tokens.len();
    let min_n = min_n.max(1);
    if k == 0 || len <= min_n || max_n < min_n {
        return Vec::new();
    }
    let Some(&last) = tokens.last() else { return Vec::new() };
    // best: (match length, continuation start j), preferring length, then more of the k
    // tokens after j (scanning backward, the first of equal ones is the latest).
    let mut best: Option<(usize, usize)> = None;
    let after = |j: usize| (len - j).min(k);
    for j in (min_n..len).rev() {
        // Candidate: tokens[j - m .. j] == tokens[len - m .. len]; j < len so one token follows.
        if tokens[j - 1] != last {
            continue;
        }
        let cap = max_n.min(j).min(len - 1);
        let m = (1..=cap).take_while(|&i| tokens[j - i] == tokens[len - i]).count();
        if m < min_n {
            continue;
        }
        let better = match best {
            None => true,
            Some((bm, bj)) => m > bm || (m == bm && after(j) > after(bj)),
        };
        if better {
            best = Some((m, j));
            if m == max_n.min(len - 1) && after(j) == k {
                break;
            }
        }
    }
    best.map_or_else(Vec::new, |(_, j)| tokens[j..(j + k).min(len)].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_longest_latest_match() {
        // ... 5 6 7 8 9 ... 1 6 7 | → "6 7" matched (n = 2) → propose 8 9.
        let t = [5, 6, 7, 8, 9, 3, 1, 6, 7];
        assert_eq!(propose(&t, 1, 4, 2), vec![8, 9]);
        assert_eq!(propose(&t, 1, 4, 5), vec![8, 9, 3, 1, 6], "continuation runs to the sequence end");
        assert_eq!(propose(&t, 3, 4, 2), Vec::<u32>::new(), "no 3-gram match");
        // The longer match wins over a later shorter one: "1 2 3" at 0 vs "3" at 6.
        let t = [1, 2, 3, 40, 41, 9, 3, 50, 1, 2, 3];
        assert_eq!(propose(&t, 1, 3, 2), vec![40, 41]);
        // Equal lengths: the latest one with k tokens after it.
        let t = [7, 8, 1, 7, 8, 2, 7, 8];
        assert_eq!(propose(&t, 2, 2, 1), vec![2]);
        assert_eq!(propose(&t, 2, 2, 2), vec![2, 7]);
    }

    #[test]
    fn short_or_matchless_sequences_propose_nothing() {
        assert!(propose(&[], 1, 3, 4).is_empty());
        assert!(propose(&[4], 1, 3, 4).is_empty());
        assert!(propose(&[1, 2, 3, 4], 1, 3, 4).is_empty());
        assert!(propose(&[1, 2, 1], 1, 3, 0).is_empty());
        // A run of one token: the match may overlap itself.
        assert_eq!(propose(&[5, 5, 5, 5], 1, 2, 3), vec![5, 5]);
    }
}
