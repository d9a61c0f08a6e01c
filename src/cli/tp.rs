//! `Tp`: the ranks a model is sharded over and how its experts split — a leaf module, so the
//! modules that build ranks (threads: `tensor_parallel`; processes: `ranks`) share it without
//! importing each other.

use reference::arch::spec::FfnSpec;
use reference::parallel::{MoeSplit, ShardPlan};

use super::{CliError, Result};

/// The ranks a model is sharded over and how its experts are split (`--tensor-parallel`,
/// `--expert-parallel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tp {
    pub ranks: usize,
    /// `None`: the plan's choice.
    pub moe: Option<MoeSplit>,
}

impl Tp {
    /// `--tensor-parallel ranks` with `--expert-parallel` (`Some(true)`: whole experts a rank,
    /// `Some(false)`: every expert split, `None`: the plan's choice).
    pub fn of(ranks: usize, expert_parallel: Option<bool>) -> Self {
        let moe = expert_parallel.map(|ep| if ep { MoeSplit::Experts } else { MoeSplit::PerExpert });
        Tp { ranks, moe }
    }

    /// The plan of `spec` over these ranks; `--expert-parallel` on a model without experts is
    /// refused.
    pub fn plan(&self, spec: &reference::arch::ModelSpec) -> Result<ShardPlan> {
        if self.moe.is_some() && !spec.layers.iter().any(|l| matches!(l.ffn, FfnSpec::Moe { .. })) {
            return Err(CliError::Usage(format!("--expert-parallel: {} has no mixture of experts to split", spec.arch)));
        }
        Ok(ShardPlan::with_moe(spec, self.ranks, self.moe)?)
    }
}
