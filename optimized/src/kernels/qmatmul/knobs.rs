//! Launch knobs of the quantized decode gemvs, part of the kernel configuration
//! (`crate::config`: keys `gps`, `rpg`, `small`): what `tandem bench --kernels` sweeps on one
//! loaded model (each setting records its own decode graph). Every value maps onto a launch choice the conformance grid runs
//! ([`GemvTune`](super::GemvTune): rows per group 2 / 4 / 8, planes per row 1 / 2 / 4, v5
//! rings of 2..=[`MAX_STAGES`](super::v5::MAX_STAGES) slots).
//!
//! Spec: comma-separated `key=value`, e.g. `gps=32,rpg=8,small=3@32`:
//! - `gps=N`: unit groups wanted per SM when choosing planes per row (default
//!   [`GROUPS_PER_SM`]); fewer rows than that are split over more planes.
//! - `rpg=N`: rows per unit group (2, 4 or 8; default `default_rpg`, 4).
//! - `small=S@M`: gemv v5 weights of at most M MiB get rings of S slots (all their tiles
//!   ahead of the arithmetic when a plane has ≤ S − 1 of them); default off.
//! - `default`: all three at their defaults.

use super::v5::MAX_STAGES;
use crate::{Client, Error};

/// Unit groups per SM the gemv's planes-per-row choice aims at (~16 per SM; ncu on an H100
/// showed 0.68 waves and 39% achieved occupancy for 4096×14336 int8 with v1, but ~48 per SM
/// measured no faster).
pub const GROUPS_PER_SM: usize = 16;

/// The quantized decode gemvs' launch knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    pub groups_per_sm: usize,
    /// Rows per unit group (`None`: the format's default).
    pub rpg: Option<usize>,
    /// `(slots, MiB)`: gemv v5 rings of `slots` for weights of at most `MiB`.
    pub small: Option<(usize, usize)>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { groups_per_sm: GROUPS_PER_SM, rpg: None, small: None }
    }
}

impl Knobs {
    /// Parses the spec of the module documentation; errors name the bad part.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let mut k = Knobs::default();
        let bad = |part: &str, why: &str| {
            Error::Shape(format!("qgemv launch `{spec}`: `{part}` {why} (expected gps=N, rpg=2|4|8, small=S@MiB or default)"))
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                k = Knobs::default();
                continue;
            }
            let (key, val) = part.split_once('=').ok_or_else(|| bad(part, "is not key=value"))?;
            let num = |v: &str| v.trim().parse::<usize>().map_err(|_| bad(part, "is not a number"));
            match key.trim() {
                "gps" => {
                    k.groups_per_sm = num(val)?;
                    if !(1..=256).contains(&k.groups_per_sm) {
                        return Err(bad(part, "is out of 1..=256"));
                    }
                }
                "rpg" => {
                    let r = num(val)?;
                    if !matches!(r, 2 | 4 | 8) {
                        return Err(bad(part, "is not 2, 4 or 8 (gate|up needs pairs)"));
                    }
                    k.rpg = Some(r);
                }
                "small" => {
                    let (s, m) = val.split_once('@').ok_or_else(|| bad(part, "is not S@MiB"))?;
                    let (s, m) = (num(s)?, num(m)?);
                    if !(2..=MAX_STAGES).contains(&s) {
                        return Err(bad(part, "has slots out of 2..=8"));
                    }
                    k.small = Some((s, m));
                }
                _ => return Err(bad(part, "has an unknown key")),
            }
        }
        Ok(k)
    }

    /// The spec [`Knobs::parse`] reads back (`default` for the defaults).
    pub fn name(&self) -> String {
        let mut parts = vec![];
        if self.groups_per_sm != GROUPS_PER_SM {
            parts.push(format!("gps={}", self.groups_per_sm));
        }
        if let Some(r) = self.rpg {
            parts.push(format!("rpg={r}"));
        }
        if let Some((s, m)) = self.small {
            parts.push(format!("small={s}@{m}"));
        }
        if parts.is_empty() {
            "default".into()
        } else {
            parts.join(",")
        }
    }

    /// Ring slots of a gemv v5 weight of `bytes` whose default is `stages`.
    pub fn stages_for(&self, bytes: usize, stages: usize) -> usize {
        match self.small {
            Some((s, mib)) if bytes <= mib << 20 => s,
            _ => stages,
        }
    }
}

/// The knobs launches on `client` use (its kernel configuration's).
pub fn of(client: &Client) -> Knobs {
    client.kernels().launch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip() {
        for s in ["default", "gps=32", "rpg=8", "small=3@32", "gps=8,rpg=2,small=4@64"] {
            let k = Knobs::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(k.name(), s);
            assert_eq!(Knobs::parse(&k.name()).ok(), Some(k));
        }
        assert_eq!(Knobs::parse("").ok(), Some(Knobs::default()));
    }

    #[test]
    fn bad_specs_are_refused_with_the_part() {
        for (s, part) in [
            ("rpg=3", "rpg=3"),
            ("rpg=1", "rpg=1"),
            ("gps=0", "gps=0"),
            ("small=9@4", "small=9@4"),
            ("small=3", "small=3"),
            ("warp=2", "warp=2"),
            ("gps", "gps"),
        ] {
            let e = Knobs::parse(s).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(part), "{s}: {e}");
        }
    }

    #[test]
    fn small_rings_only_up_to_their_size() {
        let k = Knobs::parse("small=3@32").unwrap_or_default();
        assert_eq!(k.stages_for(32 << 20, 2), 3);
        assert_eq!(k.stages_for((32 << 20) + 1, 2), 2);
        assert_eq!(Knobs::default().stages_for(1, 2), 2);
    }
}
