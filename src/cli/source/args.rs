//! The device-side arguments every command shares: `--dtype`, `--kv-dtype`, `--device`, `--ids`.

use super::super::{CliError, Device, Result};

/// `--dtype` or the best the device supports: bf16, else f16, else f32.
pub fn pick_dtype(client: &optimized::Client, dtype: Option<&str>) -> Result<optimized::Dtype> {
    use optimized::Dtype;
    match dtype {
        Some(s) => s.parse::<Dtype>().map_err(CliError::Usage),
        None if Dtype::BF16.supported(client) => Ok(Dtype::BF16),
        // wgpu adapters with shader-f16 (Vulkan on NVIDIA / AMD, Metal) have no bf16: half the
        // bytes of f32 per weight, f32 accumulation as everywhere.
        None if Dtype::F16.supported(client) => Ok(Dtype::F16),
        None => Ok(Dtype::F32),
    }
}

/// The KV pools' type `--kv-dtype d` names (`None`: the default choice).
pub fn kv_dtype(d: &str) -> Result<Option<optimized::Dtype>> {
    optimized::KernelConfig::kv_of(d).ok_or_else(|| CliError::Usage(format!("--kv-dtype {d}: auto, f16, f32 or fp8")))
}

/// The GPU runtime for `device`, or `None` for the CPU reference.
pub fn resolve(device: Device) -> Option<optimized::Backend> {
    use optimized::Backend;
    match device {
        Device::Cpu => None,
        Device::Cuda => Some(Backend::Cuda),
        Device::Wgpu => Some(Backend::Wgpu),
        Device::Auto => {
            if optimized::client(Backend::Cuda).is_ok() {
                return Some(Backend::Cuda);
            }
            // A software adapter (lavapipe/llvmpipe) is slower than the CPU reference.
            match optimized::client(Backend::Wgpu) {
                Ok(c) => {
                    let name = optimized::device_info(&c).name.to_lowercase();
                    (!(name.contains("llvmpipe") || name.contains("lavapipe"))).then_some(Backend::Wgpu)
                }
                Err(_) => None,
            }
        }
    }
}

/// Parse `--ids 1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|x| x.trim())
        .filter(|x| !x.is_empty())
        .map(|x| x.parse::<u32>().map_err(|_| CliError::Usage(format!("--ids: `{x}` is not a token id"))))
        .collect()
}
