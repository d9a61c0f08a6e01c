//! The [`Uploader`]'s MoE blocks: the experts (MXFP4 as stored or built, or stored values
//! converted through the staging buffers; an expert-parallel rank's share) and the router.

use super::*;

impl Uploader<'_> {
    /// MoE block `l`: the experts from [`Uploader::experts`], then the router (and GPT-OSS's
    /// bias) f32 — a rounded router would move expert choices near ties. GPT-OSS's clamped
    /// SwiGLU runs over MXFP4 experts, SiLU / GELU-tanh gating over stored values.
    pub(super) fn moe(&mut self, l: usize, ls: &LayerSpec, dtype: Dtype) -> Result<MoeWeights, Error> {
        let FfnSpec::Moe { k, act, routing, .. } = ls.ffn else {
            return Err(Error::Shape(format!("layer {l} is not a mixture of experts")));
        };
        let first = self.expert_share.as_ref().map(|r| r.start);
        match (act, self.experts(l, ls, dtype)?) {
            (Activation::ClampedSwiglu { limit, alpha }, (Experts::Mxfp4(gate_up), Experts::Mxfp4(down))) => {
                let router = self.dense(&[Tensor::Router(l)], Dtype::F32)?;
                let router_bias = self.dense(&[Tensor::RouterBias(l)], Dtype::F32)?;
                MoeWeights::mxfp4(self.client, router, router_bias, gate_up, down, k, limit, alpha, dtype != Dtype::F32, first)
            }
            (act, (Experts::Dense(gate_up), Experts::Dense(down))) => {
                let glu = GluAct::of(act)?;
                let router = self.dense(&[Tensor::MoeGate(l)], Dtype::F32)?;
                MoeWeights::dense_holding(self.client, router, None, gate_up, down, k, glu, routing, first)
            }
            (act, (gu, _)) => Err(Error::Unsupported(format!(
                "layer {l}: experts gated by {act:?} stored as {} (the GPU runs GPT-OSS's clamped SwiGLU over MXFP4 experts, SiLU or GELU-tanh over 16-bit ones)",
                match gu {
                    Experts::Mxfp4(_) => "MXFP4",
                    Experts::Dense(_) => "values",
                }
            ))),
        }
    }

    /// MoE block `l`'s experts, gate|up interleaved `[E, 2F, C]` and down `[E, C, F]`: the one
    /// place experts come from. MXFP4 where the source holds them so (GPT-OSS: the stored bytes
    /// repacked through the staging buffers where the source lends them, else its built
    /// experts), else stored values in `dtype` ([`Uploader::dense_experts`]).
    fn experts(&mut self, l: usize, ls: &LayerSpec, dtype: Dtype) -> Result<(Experts, Experts), Error> {
        let FfnSpec::Moe { n_experts, expert_ffn, .. } = ls.ffn else {
            return Err(Error::Shape(format!("layer {l} is not a mixture of experts")));
        };
        let held = self.expert_share.clone().unwrap_or(0..n_experts);
        if held.end > n_experts || held.is_empty() {
            return Err(Error::Shape(format!("layer {l}: experts {held:?} of {n_experts}")));
        }
        // The source's borrow ends with this statement (the stored-value path needs it again).
        let mxfp4 = match self.src.mxfp4_experts(l, held.clone()).map_err(Error::from)? {
            Some(Mxfp4Source::Stored([gu, dn])) => Some((
                Mxfp4Experts::upload_stored(self.client, &self.staging, &gu, held.clone())?,
                Mxfp4Experts::upload_stored(self.client, &self.staging, &dn, held.clone())?,
            )),
            Some(Mxfp4Source::Built(ex)) => {
                if ex.len() != held.len() {
                    return Err(Error::Shape(format!("layer {l}: {} experts built for the {held:?} held", ex.len())));
                }
                // Biases are built contiguous; a view that is not would fail the upload's length check.
                let gate: Vec<_> = ex.iter().map(|x| (&x.gate, x.gate_bias.as_slice().unwrap_or(&[]))).collect();
                let up: Vec<_> = ex.iter().map(|x| (&x.up, x.up_bias.as_slice().unwrap_or(&[]))).collect();
                let (dm, db): (Vec<_>, Vec<_>) = ex.iter().map(|x| (&x.down, x.down_bias.as_slice().unwrap_or(&[]))).unzip();
                let gu = Mxfp4Experts::upload_glu(self.client, &format!("layer {l} gate|up experts"), &gate, &up)?;
                Some((gu, Mxfp4Experts::upload(self.client, &format!("layer {l} down experts"), &dm, &db)?))
            }
            None => None,
        };
        let (gu, dn): (Experts, Experts) = match mxfp4 {
            Some((gu, dn)) => (gu.into(), dn.into()),
            None => {
                let (gu, dn) = self.dense_experts(l, held.clone(), expert_ffn, dtype)?;
                (gu.into(), dn.into())
            }
        };
        let n_experts = held.len();
        let c = self.spec.hidden;
        for (what, w, want) in [("gate|up", &gu, (2 * expert_ffn, c)), ("down", &dn, (c, expert_ffn))] {
            if (w.n_experts(), w.out(), w.in_dim()) != (n_experts, want.0, want.1) {
                return Err(Error::Shape(format!(
                    "layer {l} {what} experts: [{}, {}, {}], the model wants [{n_experts}, {}, {}]",
                    w.n_experts(),
                    w.out(),
                    w.in_dim(),
                    want.0,
                    want.1
                )));
            }
        }
        self.bytes += gu.bytes() + dn.bytes();
        Ok((gu, dn))
    }

    /// MoE block `l`'s experts `held` (global ids; `f` wide) as stored values in `dtype`
    /// (Qwen3-MoE's; an expert-parallel rank's share of them, or all), from
    /// whichever layout the source holds (as `reference::arch::weights` reads them): one expert
    /// at a time ([`Tensor::ExpertGate`] …), each expert's gate|up stacked
    /// ([`Tensor::ExpsGateUp`]), or gate, up and down stacked ([`Tensor::ExpsGate`] …). The
    /// stored bytes (F32 / F16 / BF16, ggml blocks dequantized) are converted chunk by chunk
    /// through the staging buffers, a tensor at a time: no f32 copy of a layer's experts.
    fn dense_experts(&mut self, l: usize, held: std::ops::Range<usize>, f: usize, dtype: Dtype) -> Result<(DenseExperts, DenseExperts), Error> {
        use Tensor::*;
        let (c, ds, e, x0) = (self.spec.hidden, dtype.size(), held.len(), held.start);
        // The kernels index the experts' values with u32.
        crate::kernels::attention::naive::u32_of("expert values", e * 2 * f * c)?;
        let (gu_total, dn_total) = (e * 2 * f * c * ds, e * c * f * ds);
        let (gu, dn) = (self.client.empty(gu_total), self.client.empty(dn_total));
        let (expert_gu, expert_dn) = (2 * f * c * ds, c * f * ds);
        let shape = ExpertGate(l, 0).spec_shape(self.spec);
        let per_expert = match self.src.holds(ExpertGate(l, 0)) {
            Some(held) => held,
            None => self.src.load_raw_as(ExpertGate(l, 0), self.cfg, &shape).map_err(Error::from)?.is_some(),
        };
        if per_expert {
            for (i, x) in held.enumerate() {
                self.interleaved_at(ExpertGate(l, x), ExpertUp(l, x), &gu, i * expert_gu, gu_total, 0, f, dtype)?;
                self.write_at(ExpertDown(l, x), &dn, i * expert_dn, dn_total, 0, c, dtype)?;
            }
        } else if let Some(raw) = self.src.load_raw_as(ExpsGateUp(l), self.cfg, &ExpsGateUp(l).spec_shape(self.spec)).map_err(Error::from)? {
            // Expert x's gate rows, then its up rows.
            for (i, x) in held.enumerate() {
                let (g, u) = (crate::upload::rows(raw, c, 2 * f * x, f)?, crate::upload::rows(raw, c, 2 * f * x + f, f)?);
                write_interleaved_at(self.client, &self.staging, &gu, i * expert_gu, gu_total, g, u, f, c, dtype)?;
            }
            // Stacked [E, C, F]: the experts' rows `x0·C ..`.
            self.write_at(ExpsDown(l), &dn, 0, dn_total, x0 * c, e * c, dtype)?;
        } else {
            // Stacked [E, F, C]: row r of gate|up's E·F row pairs is row r of each.
            self.interleaved_at(ExpsGate(l), ExpsUp(l), &gu, 0, gu_total, x0 * f, e * f, dtype)?;
            self.write_at(ExpsDown(l), &dn, 0, dn_total, x0 * c, e * c, dtype)?;
        }
        let t = |handle, out, in_dim| DenseExperts {
            n_experts: e,
            out,
            in_dim,
            data: DeviceTensor { handle, shape: vec![e, out, in_dim], dtype, read_only: true, lease: None },
            bias: None,
        };
        Ok((t(gu, 2 * f, c), t(dn, c, f)))
    }
}
