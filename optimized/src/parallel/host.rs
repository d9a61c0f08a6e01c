//! [`HostStaged`]: the collectives of a [`DeviceComm`] through the host, on every backend — the
//! buffer read back, reduced by the reference's [`Loopback`] of N rank threads (every rank adds
//! the buffers in rank order, so every rank gets the same bits), and
//! written back into the same device buffer. Slow (a read-back per collective); for the
//! correctness tests on wgpu and where NCCL is missing.

use cubecl::prelude::CubeElement;
use reference::parallel::{Communicator, Loopback};

use super::DeviceComm;
use crate::{Client, DeviceTensor, Dtype, Error};

/// A [`DeviceComm`] over one rank of a host [`Communicator`]: a [`Loopback`] group's (ranks
/// as threads) or a `TcpComm` (ranks as processes).
pub struct HostStaged {
    comm: Box<dyn Communicator>,
}

impl HostStaged {
    /// The `world` ranks of one group, rank r at index r.
    pub fn group(world: usize) -> Vec<HostStaged> {
        Loopback::group(world).into_iter().map(|comm| HostStaged { comm: Box::new(comm) }).collect()
    }

    /// One rank over `comm`.
    pub fn over(comm: Box<dyn Communicator>) -> HostStaged {
        HostStaged { comm }
    }
}

fn host(e: reference::Error) -> Error {
    Error::Reference(e)
}

/// `v` written into `t`'s buffer as its element type (the same buffer: a tensor others alias
/// sees the new values), ordered after the work already issued on the client's stream.
fn write_back(c: &Client, t: &DeviceTensor, v: &[f32]) -> Result<(), Error> {
    let bytes = match t.dtype {
        Dtype::F32 => f32::as_bytes(v).to_vec(),
        d => {
            let mut out = vec![0u8; v.len() * d.size()];
            let raw = reference::weights::RawDense { dtype: reference::weights::RawDtype::F32, bytes: f32::as_bytes(v) };
            crate::upload::convert_into(raw, d, &mut out)?;
            out
        }
    };
    c.write(&t.handle, crate::upload::bytes_of(bytes));
    Ok(())
}

impl DeviceComm for HostStaged {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn world(&self) -> usize {
        self.comm.world()
    }
    fn all_reduce_sum(&self, c: &Client, t: &DeviceTensor) -> Result<(), Error> {
        let mut v = t.to_f32(c)?;
        self.comm.all_reduce_sum(&mut v).map_err(host)?;
        write_back(c, t, &v)
    }
    fn all_gather(&self, c: &Client, part: &DeviceTensor) -> Result<DeviceTensor, Error> {
        let all = self.comm.all_gather(&part.to_f32(c)?).map_err(host)?;
        let mut shape = vec![self.comm.world()];
        shape.extend(&part.shape);
        DeviceTensor::from_f32(c, &all, &shape)
    }
    fn fail(&self, why: &str) {
        self.comm.fail(why);
    }
    fn describe(&self) -> String {
        format!("host-staged collectives (rank {} of {}: read back, summed in rank order, written back)", self.comm.rank(), self.comm.world())
    }
}
