//! The spec text of a [`KernelConfig`] (module doc of `crate::config`): parsing it, naming a
//! configuration back, and which choices are lab-only.

use super::*;

fn onoff(v: &str) -> Option<bool> {
    match v {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

fn prefetch_name(p: Prefetch) -> String {
    match p {
        Prefetch::Off => "off".into(),
        Prefetch::W => "w".into(),
        Prefetch::WX => "wx".into(),
        Prefetch::Pipelined => "pipelined".into(),
        Prefetch::Async(n) => format!("async{n}"),
    }
}

fn parse_prefetch(v: &str) -> Option<Option<Prefetch>> {
    Some(Some(match v {
        "default" => return Some(None),
        "off" => Prefetch::Off,
        "w" => Prefetch::W,
        "wx" => Prefetch::WX,
        "pipelined" => Prefetch::Pipelined,
        a => Prefetch::Async(a.strip_prefix("async")?.parse().ok().filter(|n| (2..=v5::MAX_STAGES).contains(n))?),
    }))
}

impl KernelConfig {
    /// The configuration of a spec (module doc); errors name the bad part. A lab choice
    /// ([`Self::lab_choice`]) is an error in a build without the `lab` feature: its kernels'
    /// conformance cases run only there.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let k = Self::parse_any(spec)?;
        match k.lab_choice() {
            Some(what) if !crate::kernels::lab::ENABLED => Err(Error::Config(format!(
                "kernel config `{spec}`: {what} is a lab kernel: build with --features lab (it measured slower: docs/perf-journal.md; its conformance cases run only in that build)"
            ))),
            _ => Ok(k),
        }
    }

    /// The choice of this configuration that production never makes and the default gate does
    /// not cover (`gemm=wgmma-v2`, `draw=v1|bisect`, `qgemm=tma`, `qgemv=v4`, `mma=…`,
    /// `prefetch=wx|pipelined|asyncN` other than v5's default ring, `rpg=` other than 4,
    /// `small=…`), named as in the spec; `None` for a production one.
    pub fn lab_choice(&self) -> Option<String> {
        let d = KernelConfig::default();
        if self.gemm == Gemm::WgmmaV2 {
            return Some("`gemm=wgmma-v2` (tc v2)".into());
        }
        if matches!(self.draw, DrawLaunch::V1 | DrawLaunch::Bisect) {
            return Some(format!("`draw={}` (the seeded draw's bisection)", self.draw.name()));
        }
        if self.qgemm == QGemm::Tma {
            return Some("`qgemm=tma` (tc v4 over quantized weights)".into());
        }
        if self.qgemv == QgemvOrder::V4 {
            return Some("`qgemv=v4` (gemv v4 on the tensor cores)".into());
        }
        if self.mma != d.mma {
            return Some("`mma=…` (gemv v4's launch)".into());
        }
        match self.prefetch {
            Some(p @ (Prefetch::WX | Prefetch::Pipelined)) => return Some(format!("`prefetch={}`", prefetch_name(p))),
            Some(Prefetch::Async(n)) if n != crate::kernels::qmatmul::V5_STAGES => return Some(format!("`prefetch=async{n}`")),
            _ => {}
        }
        if self.launch.rpg.is_some_and(|r| r != crate::kernels::qmatmul::QGEMV_RPG) {
            return Some(format!("`rpg={}`", self.launch.rpg.unwrap_or_default()));
        }
        if self.launch.small.is_some() {
            return Some("`small=…` (deeper v5 rings for small weights)".into());
        }
        None
    }

    /// [`Self::parse`] without refusing lab choices.
    pub(super) fn parse_any(spec: &str) -> Result<Self, Error> {
        let mut k = KernelConfig::default();
        let bad = |part: &str, why: &str| {
            Error::Config(format!("kernel config `{spec}`: `{part}` {why} (keys: attention, graphs, ahead, advance, norms, pdl, qgemv, prefetch, int8-decode, gps, rpg, small, mma, argmax, draw, moe-gemv, moe-route, moe-gemm, moe-tile, gemv-rows, qgemv-rows, prefill, gemm, qgemm, kv, x16, fp8; see optimized::config)"))
        };
        let mut launch = vec![];
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                k = KernelConfig::default();
                launch.clear();
                continue;
            }
            let (key, val) = part.split_once('=').ok_or_else(|| bad(part, "is not key=value"))?;
            let (key, val) = (key.trim(), val.trim());
            let no = || bad(part, "has a value this key does not take");
            match key {
                "attention" => k.attention = val.parse().map_err(|_| no())?,
                "graphs" => k.graphs = onoff(val).ok_or_else(no)?,
                "ahead" => k.ahead = onoff(val).ok_or_else(no)?,
                "advance" => {
                    k.advance_device = match val {
                        "host" => false,
                        "device" => true,
                        _ => return Err(no()),
                    }
                }
                "norms" => {
                    k.fused_norms = match val {
                        "fused" => true,
                        "kernels" => false,
                        _ => return Err(no()),
                    }
                }
                "pdl" => k.pdl = PdlMode::parse(val).ok_or_else(no)?,
                "qgemv" => {
                    k.qgemv = match val {
                        "v1" => QgemvOrder::V1,
                        "v2" => QgemvOrder::V2,
                        "v4" => QgemvOrder::V4,
                        _ => return Err(no()),
                    }
                }
                "prefetch" => k.prefetch = parse_prefetch(val).ok_or_else(no)?,
                "int8-decode" => {
                    k.int8_decode = match val {
                        "subnormal" => Int8Decoding::Subnormal,
                        "magic" => Int8Decoding::Magic,
                        _ => return Err(no()),
                    }
                }
                "gps" | "rpg" | "small" => launch.push(part.to_string()),
                "mma" => k.mma = val.replace('.', ",").parse().map_err(|_| no())?,
                "argmax" => {
                    k.argmax = match val {
                        "v1" => ArgmaxVersion::V1,
                        "v2" => ArgmaxVersion::V2,
                        _ => return Err(no()),
                    }
                }
                "draw" => {
                    k.draw = match val {
                        "radix" => DrawLaunch::Radix,
                        "split" => DrawLaunch::Split,
                        "bisect" => DrawLaunch::Bisect,
                        "v1" => DrawLaunch::V1,
                        _ => return Err(no()),
                    }
                }
                "moe-gemv" => {
                    k.moe_gemv = match val {
                        "v1" => MoeGemv::V1,
                        "v2" => MoeGemv::V2,
                        "v3" => MoeGemv::V3,
                        _ => return Err(no()),
                    }
                }
                "moe-gemm" => {
                    k.moe_gemm = match val {
                        "v1" => MoeGemm::V1,
                        "v2" => MoeGemm::V2,
                        "v3" => MoeGemm::V3,
                        "v3-always" => MoeGemm::V3Always,
                        "v4" => MoeGemm::V4,
                        "v4-always" => MoeGemm::V4Always,
                        _ => return Err(no()),
                    }
                }
                "moe-tile" => k.moe_tile = if val == "auto" { None } else { Some(MoeTc::parse(val).ok_or_else(no)?) },
                "moe-route" => {
                    k.moe_route = match val {
                        "v2" => RouteVersion::V2,
                        "v3" => RouteVersion::V3,
                        _ => return Err(no()),
                    }
                }
                "gemv-rows" if val == "auto" => (k.gemv_rows, k.gemv_rows_auto) = (GEMV_ROWS_DEFAULT, true),
                "gemv-rows" => {
                    k.gemv_rows = val.parse().ok().filter(|n| (1..=GEMV_ROWS_MAX).contains(n)).ok_or_else(no)?;
                    k.gemv_rows_auto = false;
                }
                "gemv-split" if val == "auto" => k.gemv_split = None,
                "gemv-split" => k.gemv_split = Some(val.parse().ok().filter(|n: &u32| n.is_power_of_two() && *n <= 8).ok_or_else(no)?),
                "qgemv-rows" => k.qgemv_rows = val.parse().ok().filter(|n| (1..=GEMV_ROWS_MAX).contains(n)).ok_or_else(no)?,
                "prefill" => {
                    k.prefill_tc = match val {
                        "tc" => true,
                        "v2" => false,
                        _ => return Err(no()),
                    }
                }
                "qgemm" => {
                    k.qgemm = [QGemm::Mma, QGemm::Wgmma, QGemm::Fused, QGemm::Tma].into_iter().find(|q| q.name() == val).ok_or_else(no)?;
                }
                "gemm" => {
                    k.gemm = [Gemm::Mma, Gemm::WgmmaV2, Gemm::Wgmma, Gemm::Tma].into_iter().find(|g| g.name() == val).ok_or_else(no)?;
                }
                "x16" => {
                    k.x16_fused = match val {
                        "fused" => true,
                        "pass" => false,
                        _ => return Err(no()),
                    }
                }
                "fp8" => {
                    k.fp8_w8a8 = match val {
                        "w8a8" => true,
                        "dequant" => false,
                        _ => return Err(no()),
                    }
                }
                "kv" => k.kv = super::KernelConfig::kv_of(val).ok_or_else(no)?,
                _ => return Err(bad(part, "has an unknown key")),
            }
        }
        if !launch.is_empty() {
            k.launch = Knobs::parse(&launch.join(",")).map_err(|e| bad(&launch.join(","), &e.to_string()))?;
        }
        Ok(k)
    }

    /// The spec [`KernelConfig::parse`] reads back: the keys that differ from the default.
    pub fn name(&self) -> String {
        let d = KernelConfig::default();
        let mut parts = vec![];
        if self.attention != d.attention {
            parts.push(format!("attention={}", if self.attention == AttentionImpl::Naive { "naive" } else { "flash" }));
        }
        if self.graphs != d.graphs {
            parts.push(format!("graphs={}", if self.graphs { "on" } else { "off" }));
        }
        if self.ahead != d.ahead {
            parts.push(format!("ahead={}", if self.ahead { "on" } else { "off" }));
        }
        if self.advance_device != d.advance_device {
            parts.push(format!("advance={}", if self.advance_device { "device" } else { "host" }));
        }
        if self.fused_norms != d.fused_norms {
            parts.push(format!("norms={}", if self.fused_norms { "fused" } else { "kernels" }));
        }
        if self.pdl != d.pdl {
            parts.push(format!("pdl={}", self.pdl.name()));
        }
        if self.qgemv != d.qgemv {
            parts.push(format!("qgemv={}", format!("{:?}", self.qgemv).to_lowercase()));
        }
        if let Some(p) = self.prefetch {
            parts.push(format!("prefetch={}", prefetch_name(p)));
        }
        if self.int8_decode != d.int8_decode {
            parts.push("int8-decode=magic".into());
        }
        if self.launch != d.launch {
            parts.push(self.launch.name());
        }
        if self.mma != d.mma {
            let m = self.mma;
            parts.push(format!("mma={}.{}.{}{}", m.blocks, m.depth, u8::from(m.prefetch), m.split.map_or(String::new(), |s| format!(".{s}"))));
        }
        if self.argmax != d.argmax {
            parts.push(format!("argmax={}", format!("{:?}", self.argmax).to_lowercase()));
        }
        if self.draw != d.draw {
            parts.push(format!("draw={}", self.draw.name()));
        }
        if self.moe_gemv != d.moe_gemv {
            parts.push(format!("moe-gemv={}", format!("{:?}", self.moe_gemv).to_lowercase()));
        }
        if self.moe_gemm != d.moe_gemm {
            let v = match self.moe_gemm {
                MoeGemm::V1 => "v1",
                MoeGemm::V2 => "v2",
                MoeGemm::V3 => "v3",
                MoeGemm::V3Always => "v3-always",
                MoeGemm::V4 => "v4",
                MoeGemm::V4Always => "v4-always",
            };
            parts.push(format!("moe-gemm={v}"));
        }
        if let Some(t) = self.moe_tile {
            parts.push(format!("moe-tile={}", t.name()));
        }
        if self.moe_route != d.moe_route {
            parts.push(format!("moe-route={}", if self.moe_route == RouteVersion::V2 { "v2" } else { "v3" }));
        }
        if !self.gemv_rows_auto {
            parts.push(format!("gemv-rows={}", self.gemv_rows));
        }
        if self.qgemv_rows != d.qgemv_rows {
            parts.push(format!("qgemv-rows={}", self.qgemv_rows));
        }
        if let Some(s) = self.gemv_split {
            parts.push(format!("gemv-split={s}"));
        }
        if self.prefill_tc != d.prefill_tc {
            parts.push(format!("prefill={}", if self.prefill_tc { "tc" } else { "v2" }));
        }
        if self.gemm != d.gemm {
            parts.push(format!("gemm={}", self.gemm.name()));
        }
        if self.qgemm != d.qgemm {
            parts.push(format!("qgemm={}", self.qgemm.name()));
        }
        if self.x16_fused != d.x16_fused {
            parts.push(format!("x16={}", if self.x16_fused { "fused" } else { "pass" }));
        }
        if self.fp8_w8a8 != d.fp8_w8a8 {
            parts.push(format!("fp8={}", if self.fp8_w8a8 { "w8a8" } else { "dequant" }));
        }
        if let Some(kv) = self.kv {
            parts.push(format!("kv={}", kv.name()));
        }
        if parts.is_empty() {
            "default".into()
        } else {
            parts.join(",")
        }
    }
}
