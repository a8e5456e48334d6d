#![deny(missing_docs)]
//! # candle-fp8
//!
//! DeepSeek-style *blocked FP8* for [candle](https://github.com/huggingface/candle): activations
//! quantized per token per 128 K-elements (f32 scales), weights stored as e4m3 with one f32 scale
//! per 128×128 block (`weight_scale_inv`), f32 promotion every K block, bf16 output — with our
//! own Hopper (sm_90a) GEMM kernels, cuBLASLt, a dequantizing fallback and a CPU kernel.
//!
//! - [`Fp8BlockLinear`]: a `candle_nn::Module` over a blocked-FP8 weight, loading checkpoints
//!   such as `Qwen/Qwen3-32B-FP8` ([`checkpoint`]).
//! - [`fp8_block_matmul`] / [`fp8_block_matmul_into`]: the GEMM as a candle op;
//!   [`quantize_activation`] / [`quantize_weight`]: the two quantizers ([`quant`]).
//! - [`fp8_grouped_matmul_contiguous`] / [`fp8_grouped_matmul_masked`]: the grouped GEMMs of
//!   mixture-of-experts layers (one `[N, K]` weight per expert).
//! - [`ops`]: the decode step's fused ops (residual add + RMSNorm + quantize, SiLU·up +
//!   quantize), one launch each on CUDA.
//! - [`models`]: Llama / Qwen2 / Qwen3 decoders on these layers, generation and sampling.
//! - [`Backend`] / [`Fp8Options`]: which GEMM provider runs (`CANDLE_FP8_BACKEND` is the default).
//! - [`shard`]: tensor-parallel shards of a layer, cut at the 128 × 128 scale blocks;
//!   [`collective`]: the sums and gathers between the ranks.
//!
//! The numeric contract is in [`format`](mod@format); docs/design.md describes the kernels and the decode
//! step.

pub mod checkpoint;
pub mod collective;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod dispatch;
pub mod format;
mod linear;
pub mod models;
pub mod ops;
pub mod quant;
pub mod shard;
#[cfg(feature = "test-utils")]
pub mod testing;

pub use dispatch::{Backend, Fp8Options, Provider, BACKEND_ENV};
pub use format::F8E4M3;
pub use linear::{AnyLinear, Fp8BlockLinear};
pub use ops::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
pub use ops::{
    fp8_grouped_matmul_contiguous, fp8_grouped_matmul_contiguous_with, fp8_grouped_matmul_masked,
    fp8_grouped_matmul_masked_with,
};
pub use quant::{e4m3_to_f32, quantize_activation, quantize_weight};

/// The CUDA decode kernels and device facts (the `cuda` feature).
#[cfg(feature = "cuda")]
pub mod kernels {
    pub use crate::cuda::attention::{
        decode_attention, decode_attention_bf16, decode_attention_quant, decode_step_attention, default_splits,
        default_step_splits, qk_norm_rope_append, AttentionOutput, DecodeAttentionOptions, DecodeStepOptions, QkNorm,
        SplitMerge, HEAD_DIM, HEAD_DIMS, MAX_CLUSTER_SPLITS, MAX_QUERIES_PER_KV_HEAD, POSITION_TILE,
    };
    pub use crate::cuda::prefill::{prefill_attention, prefill_attention_with, PrefillKernel};
    pub use crate::cuda::readback::IdReadback;
    pub use crate::cuda::sampling::argmax_last_dim;
    #[cfg(feature = "trace")]
    pub use crate::cuda::trace::trace_dump;
    pub use crate::cuda::{device_report, DeviceReport};

    /// Why our sm_90a decode kernels cannot run on `device` (`None`: they can).
    pub fn unavailable_reason(device: &candle_core::Device) -> Option<String> {
        crate::cuda::sm90_kernels_unavailable(device)
    }
}
