//! The interface of gemv v4 (the tensor-core order, [`QLayout::Mma`](super::QLayout)): its
//! launch choices, the shapes it takes, and entry points that run the kernels where the build
//! has them. gemv v4 lost its measurement (no faster than v2 alone, slower in the model: the
//! header of `lab/gemv_v4.rs` and docs/perf-journal.md), so its kernels live in the lab
//! (`optimized/src/lab/gemv_v4.rs`, the `lab` feature); without it every entry point answers
//! [`Error::Unsupported`] and the kernel configuration refuses `qgemv=v4`.

use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};

use super::{QFormat, QWeight};
use crate::kernels::matmul::Fuse;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Most tokens gemv v4 takes (two B fragments of 4 (hi, lo) token pairs).
pub const MAX_T: usize = 8;
/// Rows per block (the mma's M) and inputs per chunk (two k16 steps, 16 bytes per lane).
pub const BLOCK_ROWS: usize = 16;
pub const CHUNK_IN: usize = 32;

/// Whether this device runs gemv v4: `mma.m16n8k16` f16 → f32 and planes of 32.
pub fn supported(client: &Client) -> bool {
    let f16 = ElemType::Float(FloatKind::F16);
    let mma = MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32), m: 16, n: 8, k: 16 };
    client.properties().features.matmul.mma.contains(&mma) && Dtype::F16.supported(client) && crate::kernels::uniform_plane_size(client) == Some(32)
}

/// [`supported`] in a build with the lab, or the reason it cannot run here (the upload and
/// the launch say the same).
pub fn require(client: &Client) -> Result<(), Error> {
    #[cfg(not(feature = "lab"))]
    {
        let _ = client;
        Err(lab_refusal())
    }
    #[cfg(feature = "lab")]
    if supported(client) {
        Ok(())
    } else {
        Err(Error::Unsupported("gemv v4 needs mma.m16n8k16 (f16 → f32) and planes of 32".into()))
    }
}

/// Why a `[out, in]` weight of `format` cannot take the v4 order, if it cannot.
pub fn refusal(format: QFormat, out: usize, in_dim: usize) -> Option<String> {
    match format {
        QFormat::Int8 { group } if group == in_dim && out % BLOCK_ROWS == 0 && in_dim % CHUNK_IN == 0 => None,
        QFormat::Int8 { group } if group == in_dim => {
            Some(format!("gemv v4 takes rows in blocks of {BLOCK_ROWS} and inputs in chunks of {CHUNK_IN}: [{out}, {in_dim}]"))
        }
        _ => Some(format!("gemv v4 takes per-channel int8 only, not {format:?}")),
    }
}

/// The answer of every entry point in a build without the lab.
#[cfg(not(feature = "lab"))]
fn lab_refusal() -> Error {
    Error::Unsupported("gemv v4 is a lab kernel (it measured slower): this binary was built without `--features lab`".into())
}

/// An int8 `[out, in]` weight's bytes in the v4 order (the lab's `gemv_v4::mma_bytes`).
#[cfg(feature = "lab")]
pub fn mma_bytes(q: &[u8], out: usize, in_dim: usize) -> Result<Vec<u8>, Error> {
    Ok(crate::kernels::lab::gemv_v4::mma_bytes(q, out, in_dim))
}
#[cfg(not(feature = "lab"))]
pub fn mma_bytes(_q: &[u8], _out: usize, _in_dim: usize) -> Result<Vec<u8>, Error> {
    Err(lab_refusal())
}

/// Dequant v4 into `out [out, in]` f32.
#[cfg(feature = "lab")]
pub(super) fn dequant_into(client: &Client, w: &QWeight, out: &DeviceTensor) -> Result<(), Error> {
    crate::kernels::lab::gemv_v4::dequant_into(client, w, out)
}
#[cfg(not(feature = "lab"))]
pub(super) fn dequant_into(_client: &Client, _w: &QWeight, _out: &DeviceTensor) -> Result<(), Error> {
    Err(lab_refusal())
}

/// gemv v4 of `x` `[t, in]` (t ≤ [`MAX_T`]) by `w` into `y` (shapes checked by the caller).
#[cfg(feature = "lab")]
pub(super) fn launch(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, t: usize, tune: &MmaTune, fuse: &Fuse) -> Result<(), Error> {
    crate::kernels::lab::gemv_v4::launch(client, x, w, y, t, tune, fuse)
}
#[cfg(not(feature = "lab"))]
pub(super) fn launch(
    _client: &Client,
    _x: &DeviceTensor,
    _w: &QWeight,
    _y: &DeviceTensor,
    _t: usize,
    _tune: &MmaTune,
    _fuse: &Fuse,
) -> Result<(), Error> {
    Err(lab_refusal())
}

/// Launch choices of gemv v4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaTune {
    /// Row blocks of 16 per plane (each B fragment serves them all): 1, 2 or 4.
    pub blocks: usize,
    /// Chunks whose loads are issued together: 1, 2 or 4.
    pub depth: usize,
    /// Planes per row block: 1, 2, 4, 8 or 16 (`None`: chosen to fill the device).
    pub split: Option<usize>,
    /// The next iteration's loads issued before this one's arithmetic.
    pub prefetch: bool,
}

impl Default for MmaTune {
    fn default() -> Self {
        Self { blocks: 2, depth: 2, split: None, prefetch: true }
    }
}

impl std::str::FromStr for MmaTune {
    type Err = Error;
    /// `blocks,depth,prefetch[,split]`, e.g. `2,2,1` or `1,4,0,16` (the kernel configuration's `mma=` key, with dots for commas).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Shape(format!("gemv v4 tune {s:?}: expected blocks,depth,prefetch[,split], e.g. 2,2,1"));
        let v: Vec<usize> = s.split(',').map(|p| p.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
        match v[..] {
            [blocks, depth, p] => Ok(Self { blocks, depth, split: None, prefetch: p != 0 }),
            [blocks, depth, p, sp] => Ok(Self { blocks, depth, split: Some(sp), prefetch: p != 0 }),
            _ => Err(bad()),
        }
    }
}
