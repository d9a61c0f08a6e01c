//! The quantized weight on the device ([`QWeight`]): its formats and orders, and the upload
//! that converts a `reference::quant` tensor into them.

use super::*;

/// Device storage format of a [`QWeight`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QFormat {
    /// `group` inputs share a scale (a multiple of 16; `in` for per-channel).
    Int8 {
        group: usize,
    },
    Mxfp4,
    /// GGUF Q4_0 (`offset` false: `d · (n − 8)`) or Q4_1 (`d · n + m`): 4-bit codes in
    /// mxfp4's nibble order, f16 block scales (and offsets) in the tiled order only.
    Q4 {
        offset: bool,
    },
    /// ggml blocks as a GGUF stores them (`kernels::qformat`: one module per format, the
    /// kernels generic over it), in the input order only.
    Ggml(crate::kernels::qformat::GgmlKind),
    /// FP8 E4M3 codes as stored, f32 scales `[⌈out/srows⌉, ⌈in/scols⌉]`
    /// (`kernels::qformat::fp8`), in the input order only.
    Fp8 {
        srows: usize,
        scols: usize,
    },
}

impl QFormat {
    /// Kept as the file stores it and run by `kernels::qformat`'s kernels, written once over
    /// its `RowFormat` (ggml blocks, FP8): the decode gemv, the dequantize pass and the GEMMs
    /// over it.
    pub fn row_format(self) -> bool {
        matches!(self, QFormat::Ggml(_) | QFormat::Fp8 { .. })
    }
    /// 4-bit values, 32 to a 16-byte chunk (mxfp4, Q4): 8 quads per chunk.
    pub fn nibbles(self) -> bool {
        matches!(self, QFormat::Mxfp4 | QFormat::Q4 { .. })
    }
    /// (Q4, with Q4_1's per-block offsets): the kernels' comptime flags for the format.
    pub fn q4_flags(self) -> (bool, bool) {
        match self {
            QFormat::Q4 { offset } => (true, offset),
            _ => (false, false),
        }
    }
    /// Bytes of one block's scale entry in the tiled order: mxfp4 1 (e8m0), Q4_0 2 (f16 d),
    /// Q4_1 4 (f16 d, then f16 m) — half of [`v2::scale_words_per_lane`], a lane's 8 entries;
    /// int8 0 (its scales are f32 words, indexed apart).
    pub fn scale_entry_bytes(self) -> usize {
        match self {
            QFormat::Int8 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => 0,
            f => {
                let (q4, offset) = f.q4_flags();
                v2::scale_words_per_lane(q4, offset) / 2
            }
        }
    }
}

/// Order of a [`QWeight`]'s values along each row on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QLayout {
    /// Input order, 16-byte chunks of consecutive weights (gemv v1, dequant v1).
    Rows,
    /// Tiles of 32 chunks whose quads interleave so that a plane's x loads are contiguous
    /// (gemv v2, dequant v2; `v2.rs` gives the order). Needs int8 groups that are a power of
    /// two (or per channel). The only order of Q4.
    Tiles,
    /// Rows in blocks of 16 and inputs in chunks of 32, each lane's 16 bytes its `mma`
    /// A registers (gemv v4, dequant v4; `v4.rs` gives the order). Per-channel int8 only.
    Mma,
}

impl QLayout {
    /// Whether `[out, in_dim]` weights of `format` can be stored in this order.
    pub fn supports(self, format: QFormat, out: usize, in_dim: usize) -> bool {
        match (self, format) {
            (QLayout::Rows, QFormat::Q4 { .. }) => false,
            (QLayout::Tiles, QFormat::Ggml(_) | QFormat::Fp8 { .. }) => false,
            (QLayout::Rows, _) | (QLayout::Tiles, QFormat::Mxfp4 | QFormat::Q4 { .. }) => true,
            (QLayout::Tiles, QFormat::Int8 { group }) => group == in_dim || group.is_power_of_two(),
            (QLayout::Mma, _) => v4::refusal(format, out, in_dim).is_none(),
        }
    }
}

/// A quantized `[out, in]` weight on the device.
#[derive(Debug, Clone)]
pub struct QWeight {
    pub format: QFormat,
    pub layout: QLayout,
    pub out: usize,
    pub in_dim: usize,
    /// int8: q bytes as u32 words `[out, in/4]`; mxfp4, Q4: nibbles as u32 words `[out, in/8]`
    /// (in `layout` order along each row).
    pub data: DeviceTensor,
    /// int8: f32 scale bits `[out, in/group]`; mxfp4: e8m0 bytes, 4 per word: `[out, in/32]`
    /// (Rows) or `[out, v2::tile_scale_words(in)]` words (Tiles); Q4: f16 d (Q4_1: d then m)
    /// entries in the tiled order, `[out, entry bytes · v2::tile_scale_words(in)]` words.
    pub scales: DeviceTensor,
    /// mxfp4 (Q4) in the tiled order on a device where [`v2::pairs_supported`]
    /// ([`v2::q4_pairs_supported`]): gemv v2 may decode it by [`Fp4Decode::Pairs`]; Q4_K /
    /// Q6_K where the latter holds: `qformat::gemv_k` decodes their f16 scales so (decided
    /// once, at upload, outside any graph capture).
    pub pairs: bool,
    /// int8 in the tiled order on a device where [`v2::subnormal_supported`]: gemv v2 may
    /// decode it by [`Int8Decode::Subnormal`] (decided like `pairs`).
    pub subnormal: bool,
    /// What gemv v2 / v3 / v5 loads ahead by default ([`device_prefetch`] at upload for the
    /// tiled order; a loader may override it, e.g. for an audit).
    pub prefetch: Prefetch,
    /// gemv v4's launch choices ([`QLayout::Mma`]; the defaults at upload, a loader may
    /// override them for an audit).
    pub mma: v4::MmaTune,
    /// How its model quantizes this linear's inputs (a W8A8 model: `ModelSpec::act_quant`),
    /// which the dispatch honours on every path: per token, W8A8 on the FP8 tensor cores
    /// above the gemv wherever they apply (whatever `fp8=` says); else a quantizing pass over
    /// x first (`kernels::act_quant`). Set by the loader; `None` at upload.
    pub act: Option<crate::kernels::act_quant::ActQuant>,
}

fn words(bytes: &[u8]) -> Vec<u32> {
    use rayon::prelude::*;
    bytes.par_chunks(4).map(|c| c.iter().enumerate().fold(0u32, |w, (i, &b)| w | (b as u32) << (8 * i))).collect()
}

/// Fills `out`'s rows of `row_bytes` each: `fill(r, row r's bytes)`, rows independent, over all
/// cores (a 7B model's weights pass through here at load).
fn place_rows(out: &mut [u8], row_bytes: usize, fill: impl Fn(usize, &mut [u8]) + Sync) {
    use rayon::prelude::*;
    out.par_chunks_mut(row_bytes).enumerate().for_each(|(r, o)| fill(r, o))
}

impl QWeight {
    /// Upload `parts` stacked by rows (same format and `in`), e.g. Wq | Wk | Wv, in the tiled
    /// order where the format allows it (gemv v2), else in input order (gemv v1).
    pub fn upload(client: &Client, parts: &[&QuantTensor]) -> Result<Self, Error> {
        Self::upload_as(client, parts, None)
    }

    /// [`QWeight::upload`] in a chosen order (`None`: the tiled order where supported).
    pub fn upload_as(client: &Client, parts: &[&QuantTensor], layout: Option<QLayout>) -> Result<Self, Error> {
        Self::upload_rows(client, parts, layout, false, None)
    }

    /// [`QWeight::upload_as`] (or, with `interleave`, [`QWeight::upload_glu`]) through a load's
    /// host chunks: the rows are placed straight into them, and the weight may be read once
    /// `staging` is finished ([`crate::upload::Staging::finish`]).
    pub(crate) fn upload_staged(
        client: &Client,
        parts: &[&QuantTensor],
        layout: Option<QLayout>,
        interleave: bool,
        staging: &crate::upload::Staging,
    ) -> Result<Self, Error> {
        if interleave && (parts.len() != 2 || parts[0].dims() != parts[1].dims()) {
            return Err(Error::Shape("qweight: interleaving needs two parts of one shape".into()));
        }
        Self::upload_rows(client, parts, layout, interleave, Some(staging))
    }

    /// A gate and an up weight (same shape and format) with their rows interleaved — row 2j =
    /// gate j, row 2j + 1 = up j — for [`qlinear_glu`] (`None`: the tiled order where
    /// supported).
    pub fn upload_glu(client: &Client, gate: &QuantTensor, up: &QuantTensor, layout: Option<QLayout>) -> Result<Self, Error> {
        if gate.dims() != up.dims() {
            return Err(Error::Shape(format!("qweight: gate {:?} and up {:?} differ in shape", gate.dims(), up.dims())));
        }
        Self::upload_rows(client, &[gate, up], layout, true, None)
    }

    /// `parts` stacked by rows, or with `interleave` (two parts) row by row; through `staging`'s
    /// host chunks where given (the tiled and input orders), else from one host buffer.
    fn upload_rows(
        client: &Client,
        parts: &[&QuantTensor],
        layout: Option<QLayout>,
        interleave: bool,
        staging: Option<&crate::upload::Staging>,
    ) -> Result<Self, Error> {
        let first = parts.first().ok_or_else(|| Error::Shape("qweight: nothing to upload".into()))?;
        if parts.iter().any(|p| matches!(p, QuantTensor::Ggml { .. })) {
            return crate::kernels::qformat::upload(client, parts, layout, interleave);
        }
        if parts.iter().any(|p| matches!(p, QuantTensor::Fp8(_))) {
            return crate::kernels::qformat::fp8::upload(client, parts, layout, interleave);
        }
        let (_, in_dim) = first.dims();
        let mut out = 0;
        let (mut sbytes, mut sbits) = (Vec::<u8>::new(), Vec::<u32>::new());
        let mut format = None;
        for p in parts {
            let (o, i) = p.dims();
            if i != in_dim {
                return Err(Error::Shape(format!("qweight: stacking [{o}, {i}] under rows of {in_dim}")));
            }
            let f = match p {
                QuantTensor::Int8(x) => QFormat::Int8 { group: x.granularity().group_len(i) },
                QuantTensor::Mxfp4(_) => QFormat::Mxfp4,
                QuantTensor::Q4(x) => QFormat::Q4 { offset: x.offset() },
                QuantTensor::Ggml { .. } => return Err(Error::Shape("qweight: ggml blocks reach qformat::upload".into())),
                QuantTensor::Fp8(_) => return Err(Error::Shape("qweight: FP8 weights reach qformat::fp8::upload".into())),
            };
            if format.is_some_and(|g| g != f) {
                return Err(Error::Shape(format!("qweight: stacking {f:?} with {format:?}")));
            }
            format = Some(f);
            out += o;
        }
        let format = format.ok_or_else(|| Error::Shape("qweight: nothing to upload".into()))?;
        if let QFormat::Int8 { group } = format {
            if in_dim % 16 != 0 || group % 16 != 0 {
                return Err(Error::Unsupported(format!(
                    "int8 gemv reads 16 weights at a time: in {in_dim} and group {group} must be multiples of 16"
                )));
            }
        }
        let layout = match layout {
            Some(QLayout::Mma) => {
                if let Some(why) = v4::refusal(format, out, in_dim) {
                    return Err(Error::Unsupported(why));
                }
                v4::require(client)?;
                QLayout::Mma
            }
            Some(l) if !l.supports(format, out, in_dim) => {
                let why = if format.q4_flags().0 { "Q4 takes the tiled order only" } else { "int8 groups must be a power of two" };
                return Err(Error::Unsupported(format!("qweight: {format:?} cannot be stored in the {l:?} order ({why})")));
            }
            Some(l) => l,
            None if QLayout::Tiles.supports(format, out, in_dim) => QLayout::Tiles,
            None => QLayout::Rows,
        };
        let tiled = layout == QLayout::Tiles;
        // Values: each part's rows permuted (tiled order) or copied straight into their place —
        // stacked, or row by row for `interleave` — over all cores.
        let row_bytes = if format.nibbles() { in_dim / 2 } else { in_dim };
        let order = tiled.then(|| v2::tile_order(in_dim, if format.nibbles() { 8 } else { 4 }));
        let nib = |row: &[u8], i: usize| (row[i / 2] >> (4 * (i % 2))) & 15;
        // Row j of packed nibbles (mxfp4, Q4: one layout).
        let nibble_row = |blocks: &[u8], j: usize, o: &mut [u8]| {
            let row = &blocks[j * row_bytes..(j + 1) * row_bytes];
            match &order {
                Some(order) => o.iter_mut().zip(order.chunks(2)).for_each(|(d, p)| *d = nib(row, p[0]) | nib(row, p[1]) << 4),
                None => o.copy_from_slice(row),
            }
        };
        let part_row = |p: &QuantTensor, j: usize, o: &mut [u8]| match p {
            QuantTensor::Int8(x) => {
                let row = &x.q()[j * in_dim..(j + 1) * in_dim];
                match &order {
                    Some(order) => o.iter_mut().zip(order).for_each(|(d, &i)| *d = row[i] as u8),
                    None => o.iter_mut().zip(row).for_each(|(d, &v)| *d = v as u8),
                }
            }
            QuantTensor::Mxfp4(x) => nibble_row(x.blocks(), j, o),
            QuantTensor::Q4(x) => nibble_row(x.blocks(), j, o),
            QuantTensor::Ggml { .. } | QuantTensor::Fp8(_) => {}
        };
        // Row r of the buffer: part k's row j.
        let starts: Vec<usize> = parts.iter().scan(0, |acc, p| Some(std::mem::replace(acc, *acc + p.dims().0))).collect();
        let fill_row = |r: usize, o: &mut [u8]| {
            let (k, j) = match interleave {
                true => (r % 2, r / 2),
                false => {
                    let k = starts.partition_point(|&s| s <= r) - 1;
                    (k, r - starts[k])
                }
            };
            part_row(parts[k], j, o)
        };
        for p in parts {
            match p {
                QuantTensor::Int8(x) => {
                    // A 7B's int8-g32 scales are ~0.9 GB of f32: converted over all cores.
                    use rayon::prelude::*;
                    let at = sbits.len();
                    sbits.resize(at + x.scales().len(), 0);
                    sbits[at..].par_iter_mut().zip(x.scales().par_iter()).for_each(|(b, s)| *b = s.to_bits());
                }
                QuantTensor::Mxfp4(x) if tiled => x.scales().chunks(in_dim / 32).for_each(|row| sbytes.extend(v2::tile_scales(row, in_dim))),
                QuantTensor::Mxfp4(x) => sbytes.extend_from_slice(x.scales()),
                QuantTensor::Ggml { .. } | QuantTensor::Fp8(_) => {}
                QuantTensor::Q4(x) => {
                    // Entries (d, or d | m << 16) in the tiled order, as words. (This loop over
                    // all cores by rayon, with the loader's d / m finiteness checks also made
                    // parallel, measured 3× slower loads — Mistral-7B Q4_0 13.4 s against 4.75 s
                    // on an H200 machine's host — so all three stay sequential.)
                    let nb = in_dim / 32;
                    let entry = |i: usize| x.d()[i].to_bits() as u32 | x.m().map_or(0, |m| (m[i].to_bits() as u32) << 16);
                    for r in 0..x.out() {
                        let row: Vec<u32> = (r * nb..(r + 1) * nb).map(entry).collect();
                        let tiled = v2::tile_scales(&row, in_dim);
                        match x.offset() {
                            true => sbits.extend(tiled),
                            false => sbits.extend(tiled.chunks(2).map(|p| p[0] | p.get(1).map_or(0, |h| h << 16))),
                        }
                    }
                }
            }
        }
        if interleave {
            // Both halves hold `out / 2` rows of equal scale lengths.
            let half = out / 2;
            if format == QFormat::Mxfp4 {
                let (sg, su) = sbytes.split_at(sbytes.len() / 2);
                sbytes = interleave_row_pairs(sg, su, half)?;
            } else {
                let (sg, su) = sbits.split_at(sbits.len() / 2);
                sbits = interleave_row_pairs(sg, su, half)?;
            }
        }
        // The probe syncs: here, not inside a later graph capture.
        let pairs = tiled
            && match format {
                QFormat::Mxfp4 => v2::pairs_supported(client),
                QFormat::Q4 { .. } => v2::q4_pairs_supported(client),
                QFormat::Int8 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => false,
            };
        let subnormal = tiled && !format.nibbles() && v2::subnormal_supported(client);
        // Uploaded once and never written by a kernel (the gemvs may read them ahead of their
        // wait on the previous kernel: `kernels::pdl`). Little-endian words = the bytes, the last
        // word padded with zeros.
        let len = out * row_bytes;
        let total = len.next_multiple_of(4);
        let handle = match staging.filter(|_| layout != QLayout::Mma) {
            Some(st) => {
                // Rows placed straight into the load's host chunks.
                use rayon::prelude::*;
                let handle = client.empty(total);
                st.write(client, &handle, 0, len, total, row_bytes, |off, o| {
                    o.par_chunks_mut(row_bytes).enumerate().for_each(|(i, o)| fill_row(off / row_bytes + i, o));
                    Ok(())
                })?;
                if total > len {
                    st.write(client, &handle, len, total - len, total, 1, |_, o| {
                        o.fill(0);
                        Ok(())
                    })?;
                }
                handle
            }
            None => {
                let mut data = vec![0u8; total];
                place_rows(&mut data[..len], row_bytes, fill_row);
                if layout == QLayout::Mma {
                    // From the rows in input order (interleaved first: a lane then holds a gate, up pair).
                    data = v4::mma_bytes(&data[..len], out, in_dim)?;
                    data.resize(data.len().next_multiple_of(4), 0);
                }
                client.create(crate::upload::bytes_of(data))
            }
        };
        let n_words = total / 4;
        let data = DeviceTensor { handle, shape: vec![n_words], dtype: crate::Dtype::F32, read_only: true, lease: None };
        let s = if format == QFormat::Mxfp4 { words(&sbytes) } else { sbits };
        let scales = match staging {
            // Through the load's page-locked chunks, as the values (not a pageable copy).
            Some(st) => {
                use cubecl::CubeElement;
                let handle = st.upload_words(client, u32::as_bytes(&s))?;
                DeviceTensor { handle, shape: vec![s.len()], dtype: crate::Dtype::F32, read_only: true, lease: None }
            }
            None => DeviceTensor::from_u32(client, &s, &[s.len()])?.into_read_only(),
        };
        Ok(Self {
            format,
            layout,
            out,
            in_dim,
            data,
            scales,
            pairs,
            subnormal,
            prefetch: if tiled { device_prefetch(client, format, in_dim) } else { default_prefetch(format, in_dim) },
            mma: v4::MmaTune::default(),
            act: None,
        })
    }

    /// A weight kept as stored in row order (the ggml formats, FP8), decoded by the
    /// `RowFormat` kernels: no tiling, no nibble pairs, no prefetch, the default MMA tune.
    pub(crate) fn kept_rows(format: QFormat, out: usize, in_dim: usize, data: DeviceTensor, scales: DeviceTensor) -> Self {
        QWeight {
            format,
            layout: QLayout::Rows,
            out,
            in_dim,
            data,
            scales,
            pairs: false,
            subnormal: false,
            prefetch: Prefetch::Off,
            mma: v4::MmaTune::default(),
            act: None,
        }
    }

    /// Bytes read by one pass over the weight (values + scales).
    pub fn bytes(&self) -> usize {
        (self.data.numel() + self.scales.numel()) * 4
    }

    /// 16-byte chunks per row.
    pub(crate) fn chunks_per_row(&self) -> usize {
        match self.format {
            QFormat::Int8 { .. } => self.in_dim / 16,
            QFormat::Mxfp4 | QFormat::Q4 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => self.in_dim / 32,
        }
    }

    /// Tiled order: (scale columns or words per row, group shift) for the v2 kernels.
    pub(super) fn tile_scale_geometry(&self) -> (u32, u32) {
        match self.format {
            QFormat::Int8 { group } if group == self.in_dim => (1, 0),
            QFormat::Int8 { group } => ((self.in_dim / group) as u32, (group / 4).trailing_zeros()),
            QFormat::Mxfp4 | QFormat::Q4 { .. } => ((self.format.scale_entry_bytes() * v2::tile_scale_words(self.in_dim)) as u32, 0),
            QFormat::Ggml(_) | QFormat::Fp8 { .. } => (0, 0),
        }
    }

    pub(super) fn grouped(&self) -> bool {
        matches!(self.format, QFormat::Int8 { group } if group != self.in_dim)
    }
}

/// `Granularity` of a [`QFormat::Int8`] group over rows of `in_dim`.
pub fn granularity(group: usize, in_dim: usize) -> Granularity {
    if group == in_dim {
        Granularity::PerChannel
    } else {
        Granularity::Group(group)
    }
}
