//! What a rank's collectives cost, timed on its runner's stream: back to back when the group
//! starts (the status line), and a decode step's all-reduces recorded in a graph and replayed
//! alone (`ModelRunner::time_step_collectives`).

use std::time::Instant;

use crate::runner::GpuRunner;
use crate::{DeviceTensor, Error};

/// Rows of the residual stream whose all-reduce (and logits whose all-gather) a group times
/// when it starts: a decode step of one sequence, and of the batches the benchmarks run.
const TIMED_ROWS: [usize; 4] = [1, 64, 128, 256];

/// The all-reduce of the residual stream `[rows, C]` (f32) and the all-gather of the logits
/// `[rows, vocab_part + 1]` timed on `runner`'s rank for each of [`TIMED_ROWS`] (every rank
/// runs the same collectives), as a status line: what a decode step's `2L + 1` all-reduces
/// and one gather cost, outside the step.
pub(super) fn time_collectives(runner: &GpuRunner) -> Result<String, Error> {
    const RUNS: u32 = 20;
    let m = &runner.model;
    let Some(tp) = m.tp.as_ref() else { return Ok(String::new()) };
    let c = &m.client;
    let (hidden, layers) = (m.dims().hidden, m.dims().n_layers);
    let reduces = 2 * layers + 1;
    let sync = || cubecl::future::block_on(c.sync()).map_err(Error::from);
    let mut parts = vec![];
    for rows in TIMED_ROWS {
        let x = DeviceTensor::from_f32(c, &vec![0.0; rows * hidden], &[rows, hidden])?;
        let logits = DeviceTensor::from_f32(c, &vec![0.0; rows * (tp.vocab_part + 1)], &[rows, tp.vocab_part + 1])?;
        // Warm-up: NCCL sets up its channels on a size's first call.
        tp.comm.all_reduce_sum(c, &x)?;
        tp.gather_logits(c, &logits)?;
        sync()?;
        let t = Instant::now();
        for _ in 0..RUNS {
            tp.comm.all_reduce_sum(c, &x)?;
        }
        sync()?;
        let reduce = t.elapsed().as_secs_f64() / f64::from(RUNS);
        let t = Instant::now();
        for _ in 0..RUNS {
            tp.gather_logits(c, &logits)?;
        }
        sync()?;
        let gather = t.elapsed().as_secs_f64() / f64::from(RUNS);
        parts.push(format!(
            "{rows} rows: all-reduce {:.1} µs, logits gather {:.1} µs, a step's {reduces} + 1 = {:.3} ms",
            reduce * 1e6,
            gather * 1e6,
            (reduce * reduces as f64 + gather) * 1e3
        ));
    }
    Ok(format!("collectives timed alone, back to back, {RUNS} runs each: {}", parts.join("; ")))
}

/// The residual stream's all-reduces of one decode step (`2·L + 1`) for each of
/// [`TIMED_ROWS`], recorded in a graph and replayed alone: `(rows, seconds a step)`, what they
/// cost inside a decode graph (no launch each). `None` where the communicator is not recorded
/// (host-staged). Every rank runs the same sequence, so the collectives meet.
pub(super) fn time_collectives_graphed(runner: &GpuRunner) -> Result<Option<Vec<(usize, f64)>>, Error> {
    const RUNS: u32 = 20;
    let m = &runner.model;
    let Some(tp) = m.tp.as_ref().filter(|tp| tp.comm.captures()) else { return Ok(None) };
    let c = &m.client;
    let (hidden, reduces) = (m.dims().hidden, 2 * m.dims().n_layers + 1);
    let sync = || cubecl::future::block_on(c.sync()).map_err(Error::from);
    let mut out = Vec::with_capacity(TIMED_ROWS.len());
    for rows in TIMED_ROWS {
        let x = DeviceTensor::from_f32(c, &vec![0.0; rows * hidden], &[rows, hidden])?;
        sync()?;
        c.graph_prepare().map_err(Error::from)?;
        // The warm-up run (NCCL sets a size up on its first call), then the recording.
        tp.comm.all_reduce_sum(c, &x)?;
        c.start_capture().map_err(Error::from)?;
        let recorded = (0..reduces).try_for_each(|_| tp.comm.all_reduce_sum(c, &x));
        let graph = c.stop_capture().map_err(Error::from);
        recorded?;
        let graph = graph?;
        // SAFETY: the recording's one buffer, `x`, outlives every replay (synced below).
        unsafe { graph.replay() }.map_err(Error::from)?;
        sync()?;
        let t = Instant::now();
        for _ in 0..RUNS {
            // SAFETY: as above.
            unsafe { graph.replay() }.map_err(Error::from)?;
        }
        sync()?;
        out.push((rows, t.elapsed().as_secs_f64() / f64::from(RUNS)));
    }
    Ok(Some(out))
}
