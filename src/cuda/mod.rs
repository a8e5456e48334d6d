//! CUDA providers and kernels (the `cuda` feature).
//!
//! - [`ffi`]: every `extern "C"` function of `kernels/api.h`.
//! - [`device`]: per-device facts, per-stream workspaces, typed views.
//! - [`gemm`]: our Hopper GEMM (quantizer, GEMM, unreduced split-K, gated gate/up, reduction).
//! - [`grouped`]: the grouped (mixture-of-experts) GEMM, every expert in one launch; [`moe`]:
//!   the routing kernels around it (top-k and slots, gather + quantize, combine).
//! - [`cublaslt`]: cuBLASLt with `VEC128_32F` (activations) × `BLK128x128_32F` (weights) scales.
//! - [`dequant`]: the portable `dequant` provider.
//! - [`fused`], [`attention`], [`sampling`]: the decode kernels; [`prefill`]: the prompt's
//!   flash-style attention; [`readback`]: sampled ids copied
//!   to the host asynchronously.
//!
//! Everything launches on candle's stream for the device (`CudaDevice::cuda_stream`), keeps
//! cudarc's read/write guards alive across each launch, and never synchronizes the host.

pub(crate) mod attention;
pub(crate) mod cublaslt;
pub(crate) mod dequant;
pub(crate) mod device;
pub(crate) mod ffi;
pub(crate) mod fused;
pub(crate) mod gemm;
pub(crate) mod grouped;
pub(crate) mod moe;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;
pub(crate) mod prefill;
pub(crate) mod readback;
pub(crate) mod sampling;
#[cfg(feature = "trace")]
pub(crate) mod trace;

pub(crate) use device::{device_caps, sm90_kernels_unavailable, with_zeroed_counters};
pub use device::{device_report, DeviceReport};
#[cfg(feature = "test-utils")]
pub(crate) use gemm::compiled_configs;
