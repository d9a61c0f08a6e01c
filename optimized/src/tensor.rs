//! Device-resident tensors: a cubecl buffer handle, a row-major shape and a storage dtype.
//! Activations are always f32; weights may be stored as f32, f16 or bf16 (kernels read them
//! with `W: Float` generics and accumulate in f32).

use std::sync::Arc;

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::arena::Lease;
use crate::{Client, Error};

/// Storage type of a device tensor's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    F16,
    BF16,
    /// OCP E4M3FN codes, four to a u32 word: KV pools only (`kernels::attention::kv_elem`).
    E4M3,
}

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::E4M3 => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
            Dtype::E4M3 => "e4m3",
        }
    }
    /// Whether `client` can do arithmetic in this type.
    pub fn supported(self, client: &Client) -> bool {
        let info = crate::device_info(client);
        match self {
            Dtype::F32 => true,
            Dtype::F16 => info.f16,
            Dtype::BF16 => info.bf16,
            // Decoded and encoded by integer bit operations.
            Dtype::E4M3 => true,
        }
    }
    /// Round `v` through this type, as an upload would (what the reference must compare against).
    pub fn round(self, v: &[f32]) -> Vec<f32> {
        match self {
            Dtype::F32 => v.to_vec(),
            Dtype::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            Dtype::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
            Dtype::E4M3 => v.iter().map(|&x| reference::quant::fp8::decode(reference::quant::fp8::encode(x))).collect(),
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Dtype::F32),
            "f16" => Ok(Dtype::F16),
            "bf16" => Ok(Dtype::BF16),
            // E4M3 holds KV pools only (`--kv-dtype fp8`, `kv=e4m3`), never a tensor's type here.
            o => Err(format!("unknown dtype `{o}` (f32, f16, bf16)")),
        }
    }
}

/// A contiguous row-major tensor living on one client's device.
///
/// Cloning is cheap (the handle is reference-counted) and aliases the same memory.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub handle: Handle,
    pub shape: Vec<usize>,
    pub dtype: Dtype,
    /// A promise that no kernel writes this tensor ([`Self::into_read_only`]: weights
    /// uploaded from the host). A kernel launched with programmatic dependent launch
    /// (`kernels::pdl`) may read such a tensor before the kernel ahead of it has ended;
    /// the gemvs do so only for read-only weights.
    pub read_only: bool,
    /// The arena slot the buffer is leased from (`crate::arena`: activations of a decode
    /// graph's recording), held by every clone and view; `None`: the buffer is cubecl's own.
    pub(crate) lease: Option<Arc<Lease>>,
}

impl DeviceTensor {
    /// Copies `data` to the device. `data.len()` must equal the product of `shape`.
    pub fn from_f32(client: &Client, data: &[f32], shape: &[usize]) -> Result<Self, Error> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::Shape(format!("{} values for shape {shape:?} ({numel} elements)", data.len())));
        }
        Ok(Self { handle: client.create_from_slice(f32::as_bytes(data)), shape: shape.to_vec(), dtype: Dtype::F32, read_only: false, lease: None })
    }

    /// Copies `data` to the device stored as `dtype` (rounded to nearest even on the host).
    pub fn from_f32_as(client: &Client, data: &[f32], shape: &[usize], dtype: Dtype) -> Result<Self, Error> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::Shape(format!("{} values for shape {shape:?} ({numel} elements)", data.len())));
        }
        if dtype == Dtype::F32 {
            return Self::from_f32(client, data, shape);
        }
        // Converted over all cores: a 7B model's weights pass through here.
        let mut bytes = vec![0u8; data.len() * dtype.size()];
        let raw = reference::weights::RawDense { dtype: reference::weights::RawDtype::F32, bytes: f32::as_bytes(data) };
        crate::upload::convert_into(raw, dtype, &mut bytes)?;
        Self::from_bytes(client, bytes, shape, dtype)
    }

    /// Hands `bytes` (the tensor's elements as `dtype`, little-endian) to the device without
    /// another host copy (`create_from_slice` would copy them first).
    pub fn from_bytes(client: &Client, bytes: Vec<u8>, shape: &[usize], dtype: Dtype) -> Result<Self, Error> {
        let numel: usize = shape.iter().product();
        if numel * dtype.size() != bytes.len() {
            return Err(Error::Shape(format!("{} bytes for shape {shape:?} of {}", bytes.len(), dtype.name())));
        }
        let handle = client.create(crate::upload::bytes_of(bytes));
        Ok(Self { handle, shape: shape.to_vec(), dtype, read_only: false, lease: None })
    }

    /// Copies u32 values (token ids, positions) to the device; `dtype` is reported as F32-sized.
    pub fn from_u32(client: &Client, data: &[u32], shape: &[usize]) -> Result<Self, Error> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::Shape(format!("{} values for shape {shape:?} ({numel} elements)", data.len())));
        }
        Ok(Self { handle: client.create_from_slice(u32::as_bytes(data)), shape: shape.to_vec(), dtype: Dtype::F32, read_only: false, lease: None })
    }

    /// Overwrites the tensor's first `data.len()` u32 values in place (same device buffer, so a
    /// captured decode graph sees them), ordered after work already issued on the stream.
    pub fn write_u32(&self, client: &Client, data: &[u32]) -> Result<(), Error> {
        if data.len() > self.numel() {
            return Err(Error::Shape(format!("write of {} values into a tensor of {} elements", data.len(), self.numel())));
        }
        if !data.is_empty() {
            let bytes = cubecl::bytes::Bytes::from_bytes_vec(u32::as_bytes(data).to_vec());
            client.write(&self.handle, bytes);
        }
        Ok(())
    }

    /// Reads u32 values back (see [`Self::to_f32`] for where errors surface).
    pub fn to_u32(&self, client: &Client) -> Result<Vec<u32>, Error> {
        let bytes = client.read_one(self.handle.clone())?;
        let mut v = u32::from_bytes(&bytes).to_vec();
        v.truncate(self.numel());
        Ok(v)
    }

    /// Allocates an uninitialised tensor.
    pub fn empty_f32(client: &Client, shape: &[usize]) -> Self {
        Self::empty(client, shape, Dtype::F32)
    }

    /// Allocates an uninitialised tensor of `dtype` elements: from the client's arena while it
    /// is on (a decode graph's recording, `crate::arena`: the buffer may be larger than the
    /// tensor), else from cubecl.
    pub fn empty(client: &Client, shape: &[usize], dtype: Dtype) -> Self {
        let numel: usize = shape.iter().product();
        let bytes = numel * dtype.size();
        let (handle, lease) = match client.arena().take(bytes, |b| client.empty(b)) {
            Some((h, l)) => (h, Some(l)),
            None => (client.empty(bytes), None),
        };
        Self { handle, shape: shape.to_vec(), dtype, read_only: false, lease }
    }

    /// The same buffer without its arena lease: the slot goes back to the arena when the leased
    /// tensor drops, while this alias still addresses it (the arena keeps the allocation for
    /// the client's life). Only for a buffer that is written and then read in the order of the
    /// client's one stream with no other arena user between — a masked decode recording's
    /// logits, which its replay writes and the eager draw right after it reads (`runner::graphs`):
    /// the recordings then share one slot for them instead of each holding its own.
    pub(crate) fn unleased(&self) -> DeviceTensor {
        DeviceTensor { lease: None, ..self.clone() }
    }

    /// Whether the buffer is leased from the client's arena (`crate::arena`): held by the tensor
    /// and its clones for the lease's drop, which frees the slot.
    pub fn is_leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Bytes of the tensor's elements.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// Marks the tensor read-only: the caller promises that no kernel writes it from now on
    /// (a weight uploaded from the host), so kernels may read it ahead of their wait on the
    /// previous kernel (the `read_only` field).
    pub fn into_read_only(self) -> Self {
        Self { read_only: true, ..self }
    }

    /// The same memory seen with another shape of the same element count.
    pub fn reshape(self, shape: &[usize]) -> Result<Self, Error> {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            return Err(Error::Shape(format!("cannot view {:?} as {shape:?}", self.shape)));
        }
        Ok(Self { shape: shape.to_vec(), ..self })
    }

    /// The first `rows` rows (along axis 0) of this tensor, aliasing its memory.
    pub fn view_rows(self, rows: usize) -> Result<Self, Error> {
        let r0 = self.shape.first().copied().ok_or_else(|| Error::Shape("view_rows of a tensor with no axes".into()))?;
        if rows > r0 {
            return Err(Error::Shape(format!("view of {rows} rows of {:?}", self.shape)));
        }
        let mut shape = self.shape.clone();
        shape[0] = rows;
        Ok(Self { shape, ..self })
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Copies the tensor back to the host. This is where launch, compile and device errors of
    /// every kernel that wrote it surface (cubecl launches do not return errors).
    pub fn to_f32(&self, client: &Client) -> Result<Vec<f32>, Error> {
        let bytes = client.read_one(self.handle.clone())?;
        if self.dtype != Dtype::F32 {
            let mut v: Vec<f32> = match self.dtype {
                Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
                Dtype::E4M3 => bytes.iter().map(|&b| reference::quant::fp8::decode(b)).collect(),
                _ => bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            };
            v.truncate(self.numel());
            return Ok(v);
        }
        let mut v = f32::from_bytes(&bytes).to_vec();
        // cubecl may round allocations up; keep exactly numel values.
        v.truncate(self.numel());
        Ok(v)
    }

    /// The kernel argument for this tensor seen as `numel / vector_size` vectors.
    ///
    /// # Safety
    /// `vector_size` must divide `numel`; the length declared is what bounds checks use.
    pub(crate) unsafe fn as_arg(&self, vector_size: usize) -> BufferArg {
        unsafe { BufferArg::from_raw_parts(self.handle.clone(), self.numel() / vector_size) }
    }
}
