//! Models built on [`Fp8BlockLinear`](crate::linear::Fp8BlockLinear).
//!
//! - [`qwen3`]: Qwen3 (dense) with fused q/k/v and gate/up projections, a preallocated KV
//!   cache, on-device greedy sampling, random-weight construction for timing, and a writer for
//!   tiny FP8 checkpoints.
//! - [`byte_tokenizer`]: a self-contained byte-level tokenizer (256 byte tokens + specials) for
//!   the tiny embedded model, so that the decode example runs with no download.

pub mod byte_tokenizer;
pub mod qwen3;
