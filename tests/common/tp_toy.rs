//! The toy model of the tensor-parallel suites (`tests/tp.rs` on CPU threads, `tests/gpu_tp.rs`
//! over NCCL): its architecture and the corpus of its bigram lm_head.

use candle_fp8::models::DecoderConfig;

/// The corpus the toy language model predicts.
pub const CORPUS: &str =
    "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with one step. ";

/// A tiny Qwen3 (8 query / 2 kv heads of 128, hidden 256, intermediate 512): every width
/// splits over 2 ranks at whole 128-blocks.
pub fn cfg() -> DecoderConfig {
    DecoderConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(2),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    }
}
