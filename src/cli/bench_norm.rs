//! `tandem bench --kernel rmsnorm`: the RMSNorm kernels at the models' row lengths — the plain
//! norm (v1, v3) and the fused residual add + norm of every block (v2, v3 with plane sums and
//! with the shared tree). One row is a decode step's call: latency, device time from a replayed
//! graph (as inside a captured step); 128 rows show the bandwidth side.

use optimized::kernels::rmsnorm::{add_rmsnorm_with, rmsnorm_device_with, NormVersion};
use optimized::{Backend, DeviceTensor};
use tandem_benches::gpu::attention::seconds_per_call_graph;

use super::Result;

/// Row lengths: SmolLM2, TinyLlama, GPT-OSS, Mistral-7B, and 8192.
const WIDTHS: [usize; 5] = [576, 2048, 2880, 4096, 8192];
const ROWS: [usize; 2] = [1, 128];

/// (column, fused residual add, version; `None`: the launcher's own choice).
const KERNELS: [(&str, bool, Option<NormVersion>); 6] = [
    ("norm v1", false, Some(NormVersion::V1)),
    ("norm v3", false, Some(NormVersion::V3 { plane: true })),
    ("add+norm v2", true, Some(NormVersion::V2)),
    ("add+norm v3 plane", true, Some(NormVersion::V3 { plane: true })),
    ("add+norm v3 tree", true, Some(NormVersion::V3 { plane: false })),
    ("add+norm auto", true, None),
];

pub fn run(backend: Backend, gate: &str, reps: usize) -> Result<()> {
    let client = optimized::client(backend)?;
    println!("tandem bench --kernel rmsnorm — {backend} — f32 rows — {gate}");
    println!("µs per call, device time: calls replayed from a captured graph (— where the backend cannot capture);");
    println!("GB/s counts x (+ y) read, x written back (fused), h written.");
    let mut head = format!("{:>5} {:>6}", "rows", "C");
    for (name, _, _) in KERNELS {
        head += &format!(" {name:>18}");
    }
    println!("{head}");
    for &rows in &ROWS {
        for &c in &WIDTHS {
            let data: Vec<f32> = (0..rows * c).map(|i| ((i % 97) as f32 - 48.0) / 48.0).collect();
            let x = DeviceTensor::from_f32(&client, &data, &[rows, c])?;
            let y = DeviceTensor::from_f32(&client, &data, &[rows, c])?;
            let w = DeviceTensor::from_f32(&client, &data[..c], &[c])?;
            let mut line = format!("{rows:>5} {c:>6}");
            for (_, fused, version) in KERNELS {
                let call = || -> std::result::Result<(), optimized::Error> {
                    match (fused, version) {
                        (false, Some(v)) => rmsnorm_device_with(&client, &x, &w, 1e-5, v).map(drop),
                        (false, None) => optimized::kernels::rmsnorm_device(&client, &x, &w, 1e-5).map(drop),
                        (true, Some(v)) => add_rmsnorm_with(&client, &x, &y, &w, 1e-5, v).map(drop),
                        (true, None) => optimized::kernels::rmsnorm::add_rmsnorm_device(&client, &x, &y, &w, 1e-5).map(drop),
                    }
                };
                let bytes = (rows * c * 4 * if fused { 4 } else { 2 }) as f64;
                line += &match seconds_per_call_graph(&client, 50 * reps.max(1), call) {
                    Ok(Some(t)) => format!(" {:>7.2} µs {:>4.0} GB/s", t * 1e6, bytes / t / 1e9),
                    Ok(None) => format!(" {:>18}", "—"),
                    Err(optimized::Error::Unsupported(_)) => format!(" {:>18}", "n/a"),
                    Err(e) => return Err(e.into()),
                };
            }
            println!("{line}");
        }
    }
    Ok(())
}
