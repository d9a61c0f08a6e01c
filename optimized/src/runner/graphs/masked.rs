//! Constrained steps through the graphs: the forward pass replayed from a `masked` recording,
//! the masked draw eagerly from its logits, and the next step's forward pass launched ahead
//! (see the parent module's notes).

use engine::runner::{SeqResult, StepPlan};

use super::{launch_ahead, per_seq, record_in_step, GraphStep, Inputs};
use crate::runner::batch;
use crate::Error;

/// A constrained step of `x` (a `masked` key): the forward pass replayed (recorded first if
/// new; nothing to launch where the previous call launched it ahead), then the masked draw
/// eagerly from its logits. The step after it is launched ahead once its ids are back on the
/// host, as `x`'s are: its forward pass needs no mask (the masks of its draw are computed while
/// it runs), so the engine's turn-around overlaps the device's work here too.
pub(super) fn masked_step<R: GraphStep>(r: &mut R, plan: &StepPlan, x: &Inputs, launched: Option<bool>) -> Result<Option<Vec<SeqResult>>, Error> {
    let c = r.client().clone();
    let logits = match r.graphs().map.get_mut(&x.key) {
        Some(g) => {
            if launched != Some(true) {
                x.write(&c, &mut g.bufs, true)?;
                // SAFETY: as in `try_step`; the kept logits are the recording's own buffer.
                unsafe { g.graph.replay() }?;
            }
            g.logits.clone().ok_or_else(|| Error::Shape("a masked recording without its logits".into()))?
        }
        None => match record_in_step(r, x)? {
            Some(out) => out,
            None => return Ok(None),
        },
    };
    let specs: Vec<&engine::runner::SampleSpec> = plan.seqs.iter().flat_map(|s| &s.samples).collect();
    let ids = batch::draw_ids(&c, &specs, &logits.view_rows(x.rows)?)?;
    r.graphs().masked_steps += 1;
    r.graphs().masked_ahead += u64::from(launched == Some(true));
    if plan.continues && c.kernels().ahead {
        // The replay overwrites the logits slot this draw has already read.
        r.graphs().ahead = launch_ahead(r, x, Some(&ids))?;
    }
    per_seq(plan, &ids).map(Some)
}
