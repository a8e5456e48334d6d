//! Decoder-only language models on [`Fp8BlockLinear`](crate::Fp8BlockLinear): the model of
//! `Qwen/Qwen3-*-FP8` checkpoints (dense and mixture-of-experts), Llama and Qwen2 families,
//! chosen from `config.json`.
//!
//! - [`DecoderConfig`]: the `config.json` fields, [`Family`] from `model_type`.
//! - [`DecoderModel`]: load from a checkpoint or build with random weights; forward with a KV
//!   cache. Qwen3-MoE layers run [`Fp8MoeExperts`] as their MLP.
//! - [`generate`] with a [`Sampler`]; [`compare_greedy`] for accuracy comparisons.
//! - [`ByteTokenizer`]: the byte-level tokenizer of the tiny toy model.

mod byte_tokenizer;
mod chat;
mod config;
mod eval;
mod generation;
mod kv_cache;
mod layer;
mod model;
mod moe;
mod options;
mod rope;
mod tokenizer;
mod tp;

pub use crate::dispatch::PrefillKernel;
pub use byte_tokenizer::ByteTokenizer;
pub use chat::{ChatTemplate, Message};
pub use config::{DecoderConfig, Family, RopeScaling, RopeType};
pub use eval::{compare_greedy, top1_outcome, window_log_probs, AccuracyReport, LogProbs, TextScore};
pub use generation::{generate, launches_ahead, Generation, Sampler};
pub use model::DecoderModel;
pub use moe::Fp8MoeExperts;
pub use options::{LinearMode, ModelOptions, DEFAULT_PREFILL_CHUNK};
pub use tokenizer::{
    TokenStream, Tokenizer, GENERATION_CONFIG_FILE, GGUF_PRE_TOKENIZERS, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
};
