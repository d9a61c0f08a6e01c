//! tc v1's tile shapes ([`TcConfig`]: presets, the pick from the issue-22 sweep, the shared
//! memory and the checks a launch needs) and the split-K rules the tensor-core GEMMs share
//! ([`one_cube_splits`], [`splits_with`]). Moved out of `tc.rs`, unchanged.

use super::tc_kernel::{BK, EMU_SCRATCH, SA};
use crate::{Client, Error};

/// Tile shape and pipeline depth of one tc v1 launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcConfig {
    /// Warps along M and N.
    pub wm: usize,
    pub wn: usize,
    /// m16 tiles and n8 tiles per warp (tn even).
    pub tm: usize,
    pub tn: usize,
    /// k-blocks of x16 (and of dense W) in flight.
    pub stages: usize,
    /// Split-K: K cut into this many slices, each cube summing one into a partial `[M, N]`,
    /// added in slice order by `tc_reduce` (deterministic); 1: none.
    pub splits: usize,
    /// The next k-step's fragments loaded before this step's MMAs (two register sets).
    pub pipe: bool,
}

impl TcConfig {
    const fn preset(wm: usize, wn: usize, tm: usize, tn: usize, stages: usize) -> Self {
        Self { wm, wn, tm, tn, stages, splits: 1, pipe: false }
    }
    pub const T128X256: Self = Self::preset(2, 4, 4, 8, 3);
    pub const T128X128: Self = Self::preset(2, 4, 4, 4, 4);
    /// 128×128 with 3 stages (110.6 KB: two cubes per SM).
    pub const T128X128S3: Self = Self::preset(2, 4, 4, 4, 3);
    /// 256×128 (8 warps of 64×64), fragments a k-step ahead.
    pub const T256X128P: Self = Self::preset(4, 2, 4, 8, 3).with_pipe();
    pub const T64X128: Self = Self::preset(2, 4, 2, 4, 4);
    pub const T32X128: Self = Self::preset(2, 4, 1, 4, 4);
    pub const T64X64: Self = Self::preset(2, 2, 2, 4, 4);
    /// Small enough for lavapipe's 32 KiB of shared memory (emulation tests).
    pub const T32X32: Self = Self::preset(2, 2, 1, 2, 2);
    /// The presets [`Self::pick`] chooses from, the others the bench sweeps, and the
    /// emulation-sized one: every format's conformance cases run each.
    pub const ALL: [Self; 8] =
        [Self::T128X256, Self::T128X128, Self::T128X128S3, Self::T256X128P, Self::T64X128, Self::T32X128, Self::T64X64, Self::T32X32];
    /// Shapes and depths measured against the presets (`tandem bench --kernel matmul`; dense
    /// conformance cases run each).
    pub const VARIANTS: [Self; 5] =
        [Self::preset(2, 4, 4, 8, 4), Self::preset(4, 2, 4, 8, 3), Self::T128X256.with_pipe(), Self::T128X128.with_pipe(), Self::T64X128.with_pipe()];

    /// The presets [`Self::pick`] chooses from: for dense weights, and for quantized ones. The
    /// other presets and the variants are the bench's sweep (`lab`: their conformance cases and
    /// timings need `--features lab`).
    pub const PICKED_DENSE: [Self; 3] = [Self::T32X128, Self::T64X128, Self::T128X128S3];
    pub const PICKED_QUANT: [Self; 4] = [Self::T32X128, Self::T64X128, Self::T256X128P, Self::T128X128];

    /// Whether production launches this tile shape (any split) for dense or quantized (`quant`)
    /// weights: one of [`Self::PICKED_DENSE`] / [`Self::PICKED_QUANT`].
    pub fn picked(&self, quant: bool) -> bool {
        let set: &[Self] = if quant { &Self::PICKED_QUANT } else { &Self::PICKED_DENSE };
        set.iter().any(|p| p.with_splits(self.splits) == *self)
    }

    pub fn bm(&self) -> usize {
        16 * self.wm * self.tm
    }
    pub fn bn(&self) -> usize {
        8 * self.wn * self.tn
    }
    pub fn threads(&self) -> usize {
        32 * self.wm * self.wn
    }
    pub fn name(&self) -> String {
        let split = if self.splits > 1 { format!("k{}", self.splits) } else { String::new() };
        let pipe = if self.pipe { "p" } else { "" };
        format!("{}x{}s{}{split}{pipe}", self.bm(), self.bn(), self.stages)
    }

    /// This shape with K split `splits` ways.
    pub const fn with_splits(self, splits: usize) -> Self {
        Self { splits, ..self }
    }

    /// This shape with the fragment loads one k-step ahead.
    pub const fn with_pipe(self) -> Self {
        Self { pipe: true, ..self }
    }

    /// The tile shape and split [`super::linear`] launches for an (m, n, k) product on a device
    /// of `sms` multiprocessors (`quant`: W dequantized in the tile loads). Rules from the H200
    /// sweeps of `tandem bench --kernel matmul` (run 2 of issue 22, numbers in this file's
    /// header; dense: `--shapes` over the prefill and batched-decode layers of TinyLlama
    /// and Mistral at M = 64 … 512):
    /// - M ≤ 32: 32×128; M ≤ 64: 64×128 (4 stages).
    /// - dense, M > 64: 128×128 with 3 stages (two cubes per SM) — best or within 7% of the
    ///   best preset × split at every swept shape; 128×256 was never best.
    ///   K split where the tiles number under half the SMs (or under the SMs, with K ≥ 8192): s
    ///   ways, s the largest ≤ 8 with ≤ 2 cubes per SM (tiles·s ≤ 2·SMs), ≥ 8 k-blocks (512
    ///   of K) per slice, and ≥ 16 (1024) once the cubes outnumber the SMs — a split adds a
    ///   reduce launch, which costs more than it gains at 88 tiles of a K of 2048 when steps
    ///   launch eagerly (TinyLlama prefill of 128: 4.1 → 4.8–5.5 ms with gate|up split 2):
    ///   128 × 2048 × 5632 92.0 TFLOP/s at s = 8 vs 65.7 with 128×256 split 8; 128 × 4096 ×
    ///   4096 112.2 at s = 4 vs 99.0 at 8; 512 × 4096 × 14336 257.7 at s = 2 vs 214.1 unsplit.
    /// - quantized, M > 64: 256×128 (fragments a k-step ahead: the B tile's decode serves 256
    ///   rows) where its tiles fill the SMs, else 128×128 with 4 stages; split-K where the
    ///   tiles number under half the SMs: the most slices ≤ 8 that keep ≤ one cube per SM and
    ///   ≥ 8 k-blocks per slice.
    pub fn pick(m: usize, n: usize, k: usize, sms: usize, quant: bool) -> Self {
        let sms = sms.max(1);
        let tiles = |c: Self| m.div_ceil(c.bm()) * n.div_ceil(c.bn());
        let nkb = k.div_ceil(BK);
        if !quant && m > 64 {
            let t = tiles(Self::T128X128S3);
            let mut splits = 1;
            // Each split costs a reduce launch: worth it where the tiles leave over half the
            // SMs idle, or leave some idle over a long K.
            let split = 2 * t < sms || (t < sms && nkb >= 128);
            while split && splits < 8 {
                let s = splits + 1;
                let cubes = t * s;
                let per_slice = nkb / s;
                if cubes > 2 * sms || per_slice < 8 || (cubes > sms && per_slice < 16) {
                    break;
                }
                splits = s;
            }
            return Self::T128X128S3.with_splits(splits);
        }
        let cfg = match m {
            0..=32 => Self::T32X128,
            33..=64 => Self::T64X128,
            _ if tiles(Self::T256X128P) >= sms => Self::T256X128P,
            _ => Self::T128X128,
        };
        cfg.with_splits(one_cube_splits(tiles(cfg), nkb, sms))
    }

    /// Shared memory of a launch (`quant`: the B tile double-buffered, not `stages` deep).
    pub(super) fn shared_bytes(&self, quant: bool, emu: bool) -> usize {
        let b_slots = if quant { 2 } else { self.stages };
        let scratch = if emu { self.wm * self.wn * EMU_SCRATCH * 4 } else { 0 };
        (self.stages * self.bm() + b_slots * self.bn()) * SA * 2 + scratch
    }

    pub(super) fn check(&self, client: &Client, quant: bool, emu: bool) -> Result<(), Error> {
        let hw = &client.properties().hardware;
        let bytes = self.shared_bytes(quant, emu);
        if self.tn % 2 != 0 || self.stages < 2 || self.wm * self.wn == 0 || self.tm == 0 || self.splits == 0 {
            return Err(Error::Shape(format!("tc v1: config {self:?}: tn must be even, stages ≥ 2, splits ≥ 1")));
        }
        if self.threads() > hw.max_units_per_cube as usize || bytes > hw.max_shared_memory_size {
            return Err(Error::Unsupported(format!(
                "tc v1 {}: {} units and {bytes} B of shared memory per cube; the device allows {} and {} B",
                self.name(),
                self.threads(),
                hw.max_units_per_cube,
                hw.max_shared_memory_size
            )));
        }
        Ok(())
    }
}

/// Split-K for `tiles` output tiles over `nkb` k-blocks on `sms` multiprocessors, at most one
/// cube per SM: none unless the tiles leave over half the SMs idle, then the most slices (≤ 8)
/// that keep ≤ one cube per SM and ≥ 8 k-blocks a slice (tc v1's quantized tiles, tc v2, tc
/// v3).
pub(crate) fn one_cube_splits(tiles: usize, nkb: usize, sms: usize) -> usize {
    splits_with(tiles, nkb, sms, 8)
}

/// [`one_cube_splits`] keeping ≥ `min_kb` k-blocks a slice.
pub(crate) fn splits_with(tiles: usize, nkb: usize, sms: usize, min_kb: usize) -> usize {
    let mut splits = 1;
    if 2 * tiles < sms {
        while splits < 8 && tiles * (splits + 1) <= sms && nkb >= min_kb * (splits + 1) {
            splits += 1;
        }
    }
    splits
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every preset fits an H200-class cube (1024 units, 227 KiB) and its loaders divide the
    /// tile evenly enough (chunks ≥ units is not required: the loops guard the tail).
    #[test]
    fn presets_are_well_formed() {
        for c in TcConfig::ALL.iter().chain(&TcConfig::VARIANTS).copied() {
            assert!(c.tn % 2 == 0 && c.stages >= 2, "{c:?}");
            assert!(c.threads() <= 1024, "{c:?}");
            assert!(c.shared_bytes(true, false) <= c.shared_bytes(false, false));
            assert!(c.shared_bytes(false, false) <= 227 * 1024, "{c:?}: {}", c.shared_bytes(false, false));
        }
        assert!(TcConfig::T32X32.shared_bytes(true, true) <= 32 * 1024);
        assert!(TcConfig::T32X32.shared_bytes(false, true) <= 32 * 1024);
    }

    /// The pick chooses only the presets `picked` names (the ones the default gate covers).
    #[test]
    fn pick_stays_in_the_picked_presets() {
        for quant in [false, true] {
            for m in [1usize, 9, 32, 33, 64, 65, 127, 300, 513, 2048, 8192] {
                for (n, k) in [(72usize, 136usize), (1031, 584), (14336, 4096), (4096, 14336), (32000, 2048)] {
                    for sms in [16usize, 132] {
                        let c = TcConfig::pick(m, n, k, sms, quant);
                        assert!(c.picked(quant), "pick({m}, {n}, {k}, {sms}, {quant}) = {c:?}");
                    }
                }
            }
        }
        assert!(!TcConfig::T64X64.picked(false) && !TcConfig::T128X128.picked(false) && TcConfig::T128X128.picked(true));
    }

    /// The pick splits K where the output tiles cannot fill the device, and not where they can.
    #[test]
    fn pick_splits_only_narrow_outputs() {
        let wide = TcConfig::pick(2048, 14336, 4096, 132, false);
        assert_eq!(wide, TcConfig::T128X128S3, "{wide:?}");
        let narrow = TcConfig::pick(128, 4096, 14336, 132, false);
        assert_eq!(narrow, TcConfig::T128X128S3.with_splits(8), "{narrow:?}");
        // The sweep's rows: ≤ 2 cubes per SM, ≥ 16 k-blocks per slice past one cube per SM.
        assert_eq!(TcConfig::pick(128, 4096, 4096, 132, false).splits, 4);
        assert_eq!(TcConfig::pick(512, 4096, 14336, 132, false).splits, 2);
        assert_eq!(TcConfig::pick(128, 2560, 2048, 132, false).splits, 4);
        assert_eq!(TcConfig::pick(512, 11264, 2048, 132, false).splits, 1);
        assert_eq!(TcConfig::pick(128, 11264, 2048, 132, false).splits, 1);
        assert_eq!(TcConfig::pick(512, 14336, 4096, 132, true), TcConfig::T256X128P);
        assert_eq!(TcConfig::pick(128, 4096, 14336, 132, true), TcConfig::T128X128.with_splits(4));
        // Nothing to split: k-blocks too few.
        assert_eq!(TcConfig::pick(9, 64, 64, 132, true).splits, 1);
    }
}
