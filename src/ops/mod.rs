//! The candle ops of the crate.
//!
//! - [`fp8_block_matmul`] / [`fp8_block_matmul_into`]: the blocked-FP8 GEMM (every provider).
//! - [`add_rmsnorm_quantize`], [`swiglu_quantize`]: the decode step's elementwise work fused with
//!   the activation quantization (one launch each on CUDA).
//! - [`Unreduced`]: a GEMM output whose split-K reduction is left to its consumer.

mod fused;
#[cfg(feature = "cuda")]
pub(crate) mod hopper;
mod matmul;
mod unreduced;
mod validate;

pub(crate) use fused::add_rmsnorm_quantize_unreduced_with;
pub use fused::{add_rmsnorm_quantize, add_rmsnorm_quantize_unreduced, swiglu_quantize};
pub(crate) use matmul::log_once;
pub use matmul::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
pub use unreduced::Unreduced;
pub(crate) use validate::device_caps;
