//! The PTX of Hopper's warpgroup MMAs for tc v2 / v3 / v4 (`tc_wg.rs`, `tc_wg_quant.rs`,
//! `tc_wg_tma.rs`): shared addresses, matrix descriptors of 128-byte-swizzled K-major tiles,
//! the async-proxy fence, and `wgmma.mma_async` over one 64-wide k-block accumulating into tied
//! in-out sums and left in flight (tc v3 / v4; tc v2's, from zero and waited on, is in the lab:
//! `lab/tc_wg_v2.rs`).

use cubecl::prelude::*;

/// A unit's accumulators: a 64 × 128 block over a warpgroup's 128 units.
pub(crate) type Acc = Vector<f32, Const<64>>;
/// The descriptor's fixed fields: leading byte offset 1 (unused by swizzled K-major tiles),
/// stride byte offset 1024 B (one group of 8 swizzled 128-byte rows) ≫ 4, layout 1 (128-byte
/// swizzle) in bits 62–63.
const DESC_FIXED: u64 = (1 << 16) | ((1024 >> 4) << 32) | (1 << 62);

/// The shared-space address of the start of `s` (`cvta.to.shared`).
#[cube]
pub(crate) fn smem_addr<E: CubePrimitive>(s: &[E]) -> u32 {
    let p = unsafe { s.as_ptr_unchecked() };
    let out: u32;
    gpu_asm!(
        "{{ .reg .u64 t; cvta.to.shared.u64 t, {p}; cvt.u32.u64 {o}, t; }}",
        o = out(_) out,
        p = in(_) p,
        options(nomem),
    );
    out
}

/// The matrix descriptor of a 128-byte-swizzled K-major tile at shared address `addr`
/// (1024-byte aligned, plus 32 bytes per k16 step).
#[cube]
pub(crate) fn desc(addr: u32) -> u64 {
    u64::cast_from((addr & 0x3FFFFu32) >> 4u32) | comptime!(DESC_FIXED)
}

/// `fence.proxy.async.shared::cta`: this unit's generic-proxy writes to shared memory
/// (`cp.async`, stores) become visible to the tensor cores' async-proxy reads.
#[cube]
pub(crate) fn proxy_fence() {
    gpu_asm!("fence.proxy.async.shared::cta;");
}

/// The four steps of a 128-byte k-block (k16 of 16-bit types, k32 of E4M3) accumulating into
/// the tied sums `$0` (= `$1`), from the descriptors `$2` / `$3` advanced by 32 bytes a step;
/// `op` is the instruction's shape and types, `tail` its operands after the scale-d predicate.
fn acc_steps(op: &str, tail: &str) -> String {
    (0..4)
        .map(|s| format!("add.s64 da, $2, {o};\nadd.s64 db, $3, {o};\nwgmma.mma_async.sync.aligned.{op} $0, da, db, p1{tail};\n", o = 2 * s))
        .collect()
}

/// The operand types of a k-block's `wgmma`s ([`kblock_steps`]).
const OPS_F16: usize = 0;
const OPS_BF16: usize = 1;
const OPS_E4M3: usize = 2;

/// The four steps of a k-block of operand types `ops`: 16-bit `m64n128k16` (both operands
/// K-major: scales 1, no transposes), or E4M3 `m64n128k32` (8-bit types have no transpose
/// operands).
fn kblock_steps(ops: usize) -> String {
    match ops {
        OPS_E4M3 => acc_steps("m64n128k32.f32.e4m3.e4m3", ", 1, 1"),
        OPS_BF16 => acc_steps("m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 0"),
        _ => acc_steps("m64n128k16.f32.f16.f16", ", 1, 1, 0, 0"),
    }
}

/// A warpgroup's 64 × 128 block over one 128-byte k-block of operand types `ops`, four
/// `wgmma`s accumulating into `acc` (tied in and out: `vendor/cubecl-cpp`), committed as one
/// group and NOT waited on: `acc` is in flight until a [`wgmma_wait`] says otherwise.
#[cube]
fn kblock_acc(acc: Acc, da: u64, db: u64, #[comptime] ops: usize) -> Acc {
    let steps = comptime![kblock_steps(ops)];
    let out: Acc;
    gpu_asm!(
        "//tie:0\n// {d} {c} {a} {b}\n{{\n.reg .pred p1;\n.reg .b32 zr;\n.reg .b64 da, db;\nmov.b32 zr, 0;\nsetp.eq.b32 p1, zr, 0;",
        "wgmma.fence.sync.aligned;",
        "{steps}wgmma.commit_group.sync.aligned;\n}}",
        d = out(_) out,
        c = in(_) acc,
        a = in(_) da,
        b = in(_) db,
    );
    out
}

/// tc v3 / v4: [`kblock_acc`] over a 64-wide k-block of f16 or bf16 (`m64n128k16`).
#[cube]
pub(crate) fn wgmma_k64_acc(acc: Acc, da: u64, db: u64, #[comptime] bf16: bool) -> Acc {
    kblock_acc(acc, da, db, comptime![if bf16 { OPS_BF16 } else { OPS_F16 }])
}

/// W8A8: [`kblock_acc`] over E4M3 operands, a 128-byte k-block being 128 codes
/// (`m64n128k32`). The tensor cores add the products in their own reduced-precision
/// accumulation (vLLM's and CUTLASS's "fast accumulation"; no promotion into the f32 sums per
/// k-block).
#[cube]
pub(crate) fn wgmma_k128_e4m3_acc(acc: Acc, da: u64, db: u64) -> Acc {
    kblock_acc(acc, da, db, comptime![OPS_E4M3])
}

/// Waits until at most `pending` of this warpgroup's `wgmma` groups are in flight, `acc` tied
/// through the statement so that nothing reads or moves it before.
#[cube]
pub(crate) fn wgmma_wait(acc: Acc, #[comptime] pending: usize) -> Acc {
    let out: Acc;
    gpu_asm!("//tie:0\n// {d} {c}\nwgmma.wait_group.sync.aligned {n};", d = out(_) out, c = in(_) acc, n = const pending);
    out
}

/// `acc` tied through an empty statement (CUTLASS's `warpgroup_fence_operand`): it stays in
/// its registers, untouched, across the statements around it.
#[cube]
pub(crate) fn wgmma_pin(acc: Acc) -> Acc {
    let out: Acc;
    gpu_asm!("//tie:0\n// {d} {c}", d = out(_) out, c = in(_) acc);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kblock_instructions() {
        let bf16 = kblock_steps(OPS_BF16);
        assert_eq!(bf16.matches("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 $0, da, db, p1, 1, 1, 0, 0;").count(), 4);
        assert!(kblock_steps(OPS_F16).contains(".m64n128k16.f32.f16.f16 $0, da, db, p1, 1, 1, 0, 0;"));
        assert_eq!(kblock_steps(OPS_E4M3).matches(".m64n128k32.f32.e4m3.e4m3 $0, da, db, p1, 1, 1;").count(), 4);
        // Each step 32 bytes on (2 in the descriptors' 16-byte units).
        assert!(bf16.contains("add.s64 da, $2, 6;") && !bf16.contains("add.s64 da, $2, 8;"));
    }

    #[test]
    fn descriptor_fields() {
        // start address 0x1_2340 ≫ 4 in bits 0–13, LBO 1, SBO 64, layout 1 (128-byte swizzle).
        let d = ((0x12340u64 & 0x3FFFF) >> 4) | DESC_FIXED;
        assert_eq!(d & 0x3FFF, 0x1234);
        assert_eq!((d >> 16) & 0x3FFF, 1);
        assert_eq!((d >> 32) & 0x3FFF, 64);
        assert_eq!(d >> 62, 1);
    }
}
