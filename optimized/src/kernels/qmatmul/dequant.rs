//! The dequantization pass: a quantized weight as f32 `[out, in]` (dequant v1 for the input
//! order, v2 for the tiled order, the lab's v4 for the mma order), for the GEMMs that do not
//! dequantize in their tile loads (dequant + tiled v2). Moved out of `qmatmul.rs`, unchanged.

use cubecl::prelude::*;

use super::{check_vec4, qdequant_v1, scale_geometry, v2, v4, QFormat, QLayout, QWeight};
use crate::{Client, DeviceTensor, Error};

/// The f32 weight `[out, in]` (dequant v1, v2 or v4 by layout).
pub fn dequant(client: &Client, w: &QWeight) -> Result<DeviceTensor, Error> {
    check_vec4(client)?;
    if w.format.row_format() {
        return crate::kernels::qformat::dequant(client, w, crate::Dtype::F32);
    }
    let out = DeviceTensor::empty_f32(client, &[w.out, w.in_dim]);
    let cpr = w.chunks_per_row();
    let n = u32::try_from(w.out * cpr).map_err(|_| Error::Shape("qdequant: too many chunks".into()))?;
    crate::kernels::attention::naive::u32_of("dequant size", w.out * w.in_dim)?;
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, n as usize, dim);
    if w.layout == QLayout::Mma {
        v4::dequant_into(client, w, &out)?;
        return Ok(out);
    }
    if w.layout == QLayout::Tiles {
        let (cols, gshift) = w.tile_scale_geometry();
        unsafe {
            v2::qdequant_v2::launch_unchecked(
                client,
                count,
                dim,
                4,
                w.data.as_arg(4),
                w.scales.as_arg(1),
                out.as_arg(1),
                n,
                cpr as u32,
                w.in_dim as u32,
                cols,
                gshift,
                w.format.nibbles(),
                w.format.q4_flags().0,
                w.format.q4_flags().1,
                w.grouped(),
            );
        }
        return Ok(out);
    }
    let (gc, cols) = scale_geometry(w);
    unsafe {
        qdequant_v1::launch_unchecked(
            client,
            count,
            dim,
            4,
            w.data.as_arg(4),
            w.scales.as_arg(1),
            out.as_arg(1),
            n,
            cpr as u32,
            gc,
            cols,
            w.format == QFormat::Mxfp4,
        );
    }
    Ok(out)
}
