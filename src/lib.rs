#![deny(missing_docs)] // every public item documented (both feature sets build clean)
//! # candle-fp8
//!
//! DeepSeek-style *blocked FP8* linear layers for [candle](https://github.com/huggingface/candle):
//! activations quantized per token per 128 K-elements (f32 scales), weights stored as
//! e4m3 with one f32 scale per 128×128 block (`weight_scale_inv`), bf16 output.
//!
//! - [`ops::fp8_block_matmul`]: the GEMM as a candle `CustomOp` (CPU always; our own Hopper
//!   sm_90a kernels, cuBLASLt blockwise or dequantize+bf16 with the `cuda` feature).
//! - [`quant::quantize_activation`]: bf16/f32 `[M, K]` → e4m3 + per-token-per-128 scales.
//! - [`fused`]: residual add + RMSNorm and SiLU·up fused with the activation quantization
//!   (one launch each on CUDA, the composed ops elsewhere; bit-identical either way).
//! - [`linear::Fp8BlockLinear`]: a `candle_nn::Module` loading FP8 checkpoints such as
//!   `Qwen/Qwen3-32B-FP8`.
//! - [`checkpoint`]: `config.json` `quantization_config`, (sharded) safetensors, hub.
//! - [`models::qwen3`]: Qwen3 built on `Fp8BlockLinear`.
//!
//! The numeric contract lives in [`format`](mod@format); the CPU reference in [`reference`](mod@reference) is the
//! single source of truth for every test.

pub mod checkpoint;
mod cpu_gemm;
pub mod dispatch;
pub mod format;
pub mod fused;
pub mod linear;
pub mod models;
pub mod ops;
pub mod quant;
pub mod reference;
pub mod testing;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use format::F8E4M3;
pub use fused::{add_rmsnorm_quantize, add_rmsnorm_quantize_unreduced, swiglu_quantize};
pub use linear::{Fp8BlockLinear, Unreduced};
pub use ops::{fp8_block_matmul, fp8_block_matmul_into};
