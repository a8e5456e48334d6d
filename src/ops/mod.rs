//! The candle ops of the crate.
//!
//! - [`fp8_block_matmul`] / [`fp8_block_matmul_into`]: the blocked-FP8 GEMM (every provider).
//! - [`fp8_grouped_matmul_contiguous`] / [`fp8_grouped_matmul_masked`]: the grouped GEMMs of
//!   mixture-of-experts layers (per-expert weights `[E, N, K]`), with
//!   [`quantize_activation_masked`] for the masked layout's operand, and
//!   [`fp8_grouped_swiglu_quantize_masked`] / [`fp8_grouped_swiglu_quantize_contiguous`]: the
//!   experts' gate/up GEMM with SiLU·up and the down GEMM's quantization.
//! - [`moe_route`], [`moe_gather_quantize`], [`moe_combine`]: a mixture-of-experts layer's
//!   routing around the masked grouped GEMMs (one launch each on CUDA, nothing read on the host).
//! - [`add_rmsnorm_quantize`], [`swiglu_quantize`]: the decode step's elementwise work fused with
//!   the activation quantization (one launch each on CUDA).
//! - [`Unreduced`]: a GEMM output whose split-K reduction is left to its consumer.

mod fused;
mod grouped;
#[cfg(feature = "cuda")]
mod grouped_kernel;
mod grouped_swiglu;
#[cfg(feature = "cuda")]
pub(crate) mod hopper;
mod matmul;
pub(crate) mod moe_route;
mod unreduced;
mod validate;

pub(crate) use fused::add_rmsnorm_quantize_unreduced_with;
pub use fused::{add_rmsnorm_quantize, add_rmsnorm_quantize_unreduced, swiglu_quantize};
pub use grouped::{
    fp8_grouped_matmul_contiguous, fp8_grouped_matmul_contiguous_with, fp8_grouped_matmul_masked,
    fp8_grouped_matmul_masked_with, masked_act_scales_view, quantize_activation_masked,
};
pub use grouped_swiglu::{
    fp8_grouped_swiglu_quantize_contiguous, fp8_grouped_swiglu_quantize_contiguous_with,
    fp8_grouped_swiglu_quantize_masked, fp8_grouped_swiglu_quantize_masked_with,
};
pub(crate) use matmul::log_once;
pub use matmul::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
pub use moe_route::{
    moe_combine, moe_gather_quantize, moe_route, MoeRouting, MAX_DEVICE_EXPERTS, MAX_DEVICE_TOP_K, NO_SLOT,
};
pub use unreduced::Unreduced;
pub(crate) use validate::device_caps;
