//! `tandem bench --kernel argmax`: the greedy pick at the end of a decode step — argmax v1 and
//! v2 over one row of logits at the models' vocabularies (and a batch of 32 rows). Device time
//! from a replayed graph, as inside a captured step.

use optimized::kernels::{argmax_into_with, ArgmaxVersion};
use optimized::{Backend, DeviceTensor};
use tandem_benches::gpu::attention::seconds_per_call_graph;

use super::Result;

/// Vocabularies: Mistral-7B / TinyLlama, SmolLM2, Llama-3, GPT-OSS.
const VOCABS: [usize; 4] = [32000, 49152, 128_256, 201_088];
const ROWS: [usize; 2] = [1, 32];
const VERSIONS: [ArgmaxVersion; 2] = [ArgmaxVersion::V1, ArgmaxVersion::V2];

pub fn run(backend: Backend, gate: &str, reps: usize) -> Result<()> {
    let client = optimized::client(backend)?;
    println!("tandem bench --kernel argmax — {backend} — f32 logits — {gate}");
    println!("µs per call, device time: calls replayed from a captured graph (— where the backend cannot capture)");
    let mut head = format!("{:>5} {:>7}", "rows", "V");
    for v in VERSIONS {
        head += &format!(" {:>12}", format!("{v:?}"));
    }
    println!("{head}");
    for &rows in &ROWS {
        for &vocab in &VOCABS {
            let data: Vec<f32> = (0..rows * vocab).map(|i| ((i * 7919 % 10007) as f32 - 5003.0) / 5003.0).collect();
            let x = DeviceTensor::from_f32(&client, &data, &[rows, vocab])?;
            let out = DeviceTensor::from_u32(&client, &vec![0; rows], &[rows])?;
            let mut line = format!("{rows:>5} {vocab:>7}");
            for version in VERSIONS {
                let call = || argmax_into_with(&client, &x, &out, version);
                line += &match seconds_per_call_graph(&client, 50 * reps.max(1), call) {
                    Ok(Some(t)) => format!(" {:>9.2} µs", t * 1e6),
                    Ok(None) => format!(" {:>12}", "—"),
                    Err(optimized::Error::Unsupported(_)) => format!(" {:>12}", "n/a"),
                    Err(e) => return Err(e.into()),
                };
            }
            println!("{line}");
        }
    }
    Ok(())
}
