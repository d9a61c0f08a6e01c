//! A graphed decode step's inputs advanced on the device to the step after it (`advance=device`,
//! `runner::graphs`), so that a step launched ahead needs no host-to-device copy: for each row
//! that is a sequence's (not padding), position, pool slot and length one on, and the draw's
//! key for the next counter. The host's [`engine::sampling::seeded::row_key`], equation by
//! equation: with seed `s` and the next counter `n < 2³²`,
//! `k₀ = h(s_lo ⊕ 0x9E3779B9)`, `k₁ = h(s_hi ⊕ k₀)`, `key = h(n ⊕ k₁) ⊕ h(0x85EBCA6B)`.
//!
//! The row's parameter words (`seeded::param_words`) carry what this needs: the seed's halves
//! and `counter + 1` (0 for a padding row, which nothing advances). The slot stays inside its
//! block only when the next position does; the host launches a step ahead only then, and
//! rewrites every input before any other step.
//!
//! Measured on an H200: TinyLlama F16 `generate` 0.3–0.6% faster than with `advance=host`, so
//! advancing on the device is the default (`KernelConfig`); the journal has the runs.

use cubecl::prelude::*;

use super::pdl::await_predecessor;
use super::seeded::{hash32, KEY_WORD, PARAMS, SEED_WORDS};
use super::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Error};

/// v1: one unit per row.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn advance_v1(
    positions: &mut [u32],
    slots: &mut [u32],
    lens: &mut [u32],
    params: &mut [u32],
    rows: u32,
    #[comptime] words: usize,
    #[comptime] key_word: usize,
    #[comptime] seed_word: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let r = ABSOLUTE_POS;
    if r < rows as usize {
        let base = r * words;
        // counter + 1 of this step's draw = the next step's counter.
        let next = params[base + seed_word + 2];
        if next != 0u32 {
            positions[r] = positions[r] + 1u32;
            slots[r] = slots[r] + 1u32;
            lens[r] = lens[r] + 1u32;
            let k0 = hash32(params[base + seed_word] ^ 0x9E37_79B9u32);
            let k1 = hash32(params[base + seed_word + 1] ^ k0);
            params[base + key_word] = hash32(next ^ k1) ^ hash32(0x85EB_CA6Bu32);
            params[base + seed_word + 2] = next + 1u32;
        }
    }
}

/// Advances the `rows` rows of a step's inputs in place (see the module doc). `positions`,
/// `slots` and `lens` are `[rows]` u32, `params` `[rows, PARAMS]` u32.
pub fn advance(client: &Client, positions: &DeviceTensor, slots: &DeviceTensor, lens: &DeviceTensor, params: &DeviceTensor) -> Result<(), Error> {
    let rows = positions.numel();
    if slots.numel() != rows || lens.numel() != rows || params.numel() != rows * PARAMS {
        return Err(Error::Shape(format!(
            "advance: {rows} positions, {} slots, {} lengths, {} parameter words (expected {} a row)",
            slots.numel(),
            lens.numel(),
            params.numel(),
            PARAMS
        )));
    }
    let e = Elementwise::with_vec(client, "advance", rows, 1)?;
    let pdl = crate::kernels::pdl::enabled(client);
    unsafe {
        advance_v1::launch(
            client,
            e.count,
            e.dim,
            positions.as_arg(1),
            slots.as_arg(1),
            lens.as_arg(1),
            params.as_arg(1),
            e.n,
            PARAMS,
            KEY_WORD,
            SEED_WORDS,
            pdl,
        );
    }
    Ok(())
}
