//! Device-resident f32 tensors: a cubecl buffer handle plus a row-major shape.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::{Client, Error};

/// A contiguous row-major f32 tensor living on one client's device.
///
/// Cloning is cheap (the handle is reference-counted) and aliases the same memory.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub handle: Handle,
    pub shape: Vec<usize>,
}

impl DeviceTensor {
    /// Copies `data` to the device. `data.len()` must equal the product of `shape`.
    pub fn from_f32(client: &Client, data: &[f32], shape: &[usize]) -> Result<Self, Error> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::Shape(format!(
                "{} values for shape {shape:?} ({numel} elements)",
                data.len()
            )));
        }
        Ok(Self {
            handle: client.create_from_slice(f32::as_bytes(data)),
            shape: shape.to_vec(),
        })
    }

    /// Allocates an uninitialised tensor.
    pub fn empty_f32(client: &Client, shape: &[usize]) -> Self {
        let numel: usize = shape.iter().product();
        Self {
            handle: client.empty(numel * std::mem::size_of::<f32>()),
            shape: shape.to_vec(),
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Copies the tensor back to the host. This is where launch, compile and device errors of
    /// every kernel that wrote it surface (cubecl launches do not return errors).
    pub fn to_f32(&self, client: &Client) -> Result<Vec<f32>, Error> {
        let bytes = client.read_one(self.handle.clone())?;
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
