//! Which provider runs a blocked-FP8 GEMM.
//!
//! | provider | when | what |
//! |---|---|---|
//! | [`Provider::Hopper`] | sm_90 device, fast-path shape | our own kernels (default on H100/H200) |
//! | [`Provider::CublasLt`] | CUDA ≥ 12.9 cuBLASLt | vendor blockwise FP8 (`VEC128_32F` × `BLK128x128_32F`) |
//! | [`Provider::Dequant`] | any CUDA device | W → bf16 once, bf16 GEMM (2× weight memory) |
//! | [`Provider::Cpu`] | CPU tensors | blocked FP8 GEMM on the CPU (rayon) |
//!
//! [`Backend::Auto`] picks the first usable one in that order; a forced backend that cannot run
//! is an error naming the reason, never a silent fallback.

use candle_core::{bail, Result};

use crate::format::BLOCK;

/// Environment variable read by [`Fp8Options::from_env`]: the default [`Backend`].
pub const BACKEND_ENV: &str = "CANDLE_FP8_BACKEND";

/// A GEMM implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Our sm_90a kernels (`kernels/`).
    Hopper,
    /// cuBLASLt with 1×128 / 128×128 block scaling.
    CublasLt,
    /// Dequantize the weight to bf16 and run a bf16 GEMM.
    Dequant,
    /// The CPU blocked-FP8 kernel.
    Cpu,
}

impl Provider {
    /// The name used in logs and in [`BACKEND_ENV`].
    pub fn as_str(&self) -> &'static str {
        match self {
            Provider::Hopper => "hopper",
            Provider::CublasLt => "cublaslt",
            Provider::Dequant => "dequant",
            Provider::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user asks for: the automatic choice or one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The best usable provider for the device and shape.
    #[default]
    Auto,
    /// Exactly this provider, or an error saying why it cannot run.
    Force(Provider),
}

impl std::str::FromStr for Backend {
    type Err = candle_core::Error;

    /// `auto`, `hopper`, `cublaslt`, `dequant` or `cpu` (case-insensitive, spaces ignored).
    fn from_str(value: &str) -> Result<Self> {
        Ok(match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Backend::Auto,
            "hopper" => Backend::Force(Provider::Hopper),
            "cublaslt" => Backend::Force(Provider::CublasLt),
            "dequant" => Backend::Force(Provider::Dequant),
            "cpu" => Backend::Force(Provider::Cpu),
            other => bail!("backend {other:?} is not one of auto, hopper, cublaslt, dequant, cpu"),
        })
    }
}

/// Run-time options of the blocked-FP8 layers and ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Fp8Options {
    /// Which GEMM provider runs.
    pub backend: Backend,
}

impl Fp8Options {
    /// Options with `backend`.
    pub fn with_backend(backend: Backend) -> Self {
        Self { backend }
    }

    /// The defaults, with the backend from [`BACKEND_ENV`] when it is set (an invalid value is
    /// an error naming the variable).
    pub fn from_env() -> Result<Self> {
        let backend = match std::env::var(BACKEND_ENV) {
            Ok(v) => v.parse().map_err(|e: candle_core::Error| e.context(BACKEND_ENV))?,
            Err(std::env::VarError::NotPresent) => Backend::Auto,
            Err(e) => bail!("{BACKEND_ENV}: {e}"),
        };
        Ok(Self { backend })
    }
}

/// What a device can run, as far as the provider choice is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// `false` for the CPU.
    pub is_cuda: bool,
    /// Compute capability as `major * 10 + minor` (90 for H100/H200); 0 for the CPU.
    pub compute_cap: u32,
    /// Whether our kernels were compiled into this build (`cuda` feature).
    pub have_hopper_kernels: bool,
    /// Whether cuBLASLt with block scaling (CUDA ≥ 12.9) is loadable.
    pub have_cublaslt_blockwise: bool,
}

impl DeviceCaps {
    /// Capabilities of a CPU device.
    pub const CPU: DeviceCaps =
        DeviceCaps { is_cuda: false, compute_cap: 0, have_hopper_kernels: false, have_cublaslt_blockwise: false };

    /// Why `p` cannot run on this device, or `None` when it can.
    pub fn unusable_reason(&self, p: Provider) -> Option<String> {
        match p {
            Provider::Cpu if self.is_cuda => Some("the tensors are on a CUDA device".into()),
            Provider::Cpu => None,
            _ if !self.is_cuda => Some("the tensors are on the CPU".into()),
            Provider::Hopper if !self.have_hopper_kernels => Some("this build has no Hopper kernels".into()),
            Provider::Hopper if self.compute_cap != 90 => Some(format!(
                "our kernels need compute capability 9.0 (sm_90a), the device has {}.{}",
                self.compute_cap / 10,
                self.compute_cap % 10
            )),
            Provider::CublasLt if !self.have_cublaslt_blockwise => {
                Some("cuBLASLt with 128-block scaling needs CUDA >= 12.9 on sm_90+".into())
            }
            Provider::CublasLt if self.compute_cap < 90 => {
                Some(format!("cuBLASLt block-scaled FP8 needs sm_90+, the device is sm_{}", self.compute_cap))
            }
            _ => None,
        }
    }
}

/// cuBLASLt's 128-block scaling takes whole K blocks only (our kernels also take a partial last
/// one).
fn cublaslt_takes(k: usize) -> bool {
    k % BLOCK == 0
}

/// Chooses the provider for a GEMM of shape `m × n × k` on a device.
///
/// [`Backend::Auto`] prefers our kernels on Hopper for fast-path shapes, then cuBLASLt, then
/// dequant. A forced provider that cannot run is an error naming the reason.
pub fn choose_provider(backend: Backend, caps: &DeviceCaps, m: usize, n: usize, k: usize) -> Result<Provider> {
    if !caps.is_cuda {
        return match backend {
            Backend::Auto | Backend::Force(Provider::Cpu) => Ok(Provider::Cpu),
            Backend::Force(p) => bail!("backend {p} cannot run: {}", caps.unusable_reason(p).unwrap_or_default()),
        };
    }
    let fast = crate::format::is_fast_path_shape(m, n, k);
    match backend {
        Backend::Force(p) => {
            if let Some(why) = caps.unusable_reason(p) {
                bail!("backend {p} cannot run: {why}")
            }
            if matches!(p, Provider::Hopper | Provider::CublasLt) && !fast {
                bail!(
                    "backend {p} cannot run shape m={m} n={n} k={k}: {}",
                    crate::format::fast_path_refusal(m, n, k).unwrap_or_default()
                )
            }
            if p == Provider::CublasLt && !cublaslt_takes(k) {
                bail!("backend cublaslt cannot run shape m={m} n={n} k={k}: its block scaling needs K a multiple of {BLOCK}")
            }
            Ok(p)
        }
        Backend::Auto => Ok(if fast && caps.unusable_reason(Provider::Hopper).is_none() {
            Provider::Hopper
        } else if fast && cublaslt_takes(k) && caps.unusable_reason(Provider::CublasLt).is_none() {
            Provider::CublasLt
        } else {
            Provider::Dequant
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: DeviceCaps =
        DeviceCaps { is_cuda: true, compute_cap: 90, have_hopper_kernels: true, have_cublaslt_blockwise: true };

    #[test]
    fn backend_values_parse_and_bad_ones_are_named() {
        assert_eq!("auto".parse::<Backend>().unwrap(), Backend::Auto);
        assert_eq!(" Hopper ".parse::<Backend>().unwrap(), Backend::Force(Provider::Hopper));
        assert_eq!("CUBLASLT".parse::<Backend>().unwrap(), Backend::Force(Provider::CublasLt));
        let e = "tensorrt".parse::<Backend>().unwrap_err().to_string();
        assert!(e.contains("\"tensorrt\"") && e.contains("one of"), "{e}");
    }

    #[test]
    fn auto_prefers_hopper_then_cublaslt_then_dequant() {
        let auto = Backend::Auto;
        assert_eq!(choose_provider(auto, &H200, 1, 4096, 4096).unwrap(), Provider::Hopper);
        let no_kernels = DeviceCaps { have_hopper_kernels: false, ..H200 };
        assert_eq!(choose_provider(auto, &no_kernels, 1, 4096, 4096).unwrap(), Provider::CublasLt);
        let ampere = DeviceCaps { compute_cap: 80, have_cublaslt_blockwise: false, ..H200 };
        assert_eq!(choose_provider(auto, &ampere, 1, 4096, 4096).unwrap(), Provider::Dequant);
        // A partial last K block (K % 16 == 0) is ours; off the fast path: dequant, on any GPU.
        assert_eq!(choose_provider(auto, &H200, 1, 4096, 4000).unwrap(), Provider::Hopper);
        assert_eq!(choose_provider(auto, &H200, 1, 4096, 4004).unwrap(), Provider::Dequant);
        assert_eq!(choose_provider(auto, &H200, 1, 4100, 4096).unwrap(), Provider::Dequant);
        assert_eq!(choose_provider(auto, &DeviceCaps::CPU, 1, 8, 8).unwrap(), Provider::Cpu);
    }

    #[test]
    fn forced_unusable_provider_is_an_error() {
        let ampere = DeviceCaps { compute_cap: 80, ..H200 };
        let force = |p| Backend::Force(p);
        let e = choose_provider(force(Provider::Hopper), &ampere, 1, 128, 128).unwrap_err().to_string();
        assert!(e.contains("hopper") && e.contains("8.0"), "{e}");
        let e = choose_provider(force(Provider::Hopper), &H200, 1, 128, 100).unwrap_err().to_string();
        assert!(e.contains("K = 100"), "{e}");
        // A partial last K block: our kernels take it, cuBLASLt does not (auto then skips it).
        assert_eq!(choose_provider(force(Provider::Hopper), &H200, 1, 576, 576).unwrap(), Provider::Hopper);
        let e = choose_provider(force(Provider::CublasLt), &H200, 1, 576, 576).unwrap_err().to_string();
        assert!(e.contains("k=576") && e.contains("multiple of 128"), "{e}");
        let no_kernels = DeviceCaps { have_hopper_kernels: false, ..H200 };
        assert_eq!(choose_provider(Backend::Auto, &no_kernels, 1, 576, 576).unwrap(), Provider::Dequant);
        assert_eq!(choose_provider(Backend::Auto, &no_kernels, 1, 576, 512).unwrap(), Provider::CublasLt);
        let e = choose_provider(force(Provider::Hopper), &DeviceCaps::CPU, 1, 128, 128).unwrap_err().to_string();
        assert!(e.contains("on the CPU"), "{e}");
        assert!(choose_provider(force(Provider::Dequant), &H200, 3, 100, 100).is_ok());
    }
}
