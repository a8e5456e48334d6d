//! How a [`DecoderModel`](super::DecoderModel) is built and runs.

use std::sync::Arc;

use crate::collective::Collective;
use crate::dispatch::{Fp8Options, PrefillKernel};
use candle_core::{DType, Device};

/// How the decoder's linear layers compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearMode {
    /// Blocked-FP8 GEMMs (activations quantized per token per 128).
    Fp8,
    /// The baseline: weights dequantized once at load into dense layers in the model's
    /// activation dtype (bf16 on CUDA, f32 on the CPU), plain matmuls.
    Bf16,
}

impl std::str::FromStr for LinearMode {
    type Err = String;

    /// `fp8`, or `bf16` (also `dense`, `dequant`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp8" => Ok(Self::Fp8),
            "bf16" | "dense" | "dequant" => Ok(Self::Bf16),
            o => Err(format!("unknown linear mode {o:?} (expected fp8 or bf16)")),
        }
    }
}

/// Options for building a [`DecoderModel`](super::DecoderModel).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelOptions {
    /// FP8 GEMMs or the dequantized dense baseline.
    pub mode: LinearMode,
    /// Fuse q/k/v and gate/up into one GEMM each (default). `false` keeps one layer per
    /// checkpoint module.
    pub fuse_projections: bool,
    /// Activation / dense-weight dtype; `None`: bf16 on CUDA, f32 on the CPU.
    pub dtype: Option<DType>,
    /// The FP8 layers' options (GEMM backend); `None`: [`Fp8Options::from_env`].
    pub fp8: Option<Fp8Options>,
    /// Run the decode step's fused kernels where they apply (default): residual add + RMSNorm +
    /// quantization and SiLU·up + quantization as one step each, and on CUDA sm_90 the decode
    /// attention as one kernel. `false`: the composed candle ops (the same numbers up to the
    /// documented roundings; for comparisons).
    pub fused_kernels: bool,
    /// Most prompt tokens one prefill pass processes (default [`DEFAULT_PREFILL_CHUNK`]): a
    /// longer prompt runs in chunks against the KV cache, so that the attention scores held at
    /// once grow with the chunk, not with the prompt's square. Chunks also shrink so that no
    /// score tensor reaches 2³¹ elements (candle's kernels index elements with 32 bits).
    pub prefill_chunk: usize,
    /// The prompt attention kernel on CUDA sm_90 (default [`PrefillKernel::Auto`]).
    pub prefill_attention: PrefillKernel,
    /// Tensor parallelism: build only rank `comm.rank()`'s share of the model in a group of
    /// `comm.world()` ranks, layer by layer (see `DecoderModel::shard`): a checkpoint's layers
    /// are read on the host and cut there, so the device holds the rank's share and never the
    /// whole model; random weights are generated one layer at a time on the device and cut
    /// there. `None` (default): the whole model.
    pub tensor_parallel: Option<Arc<dyn Collective>>,
    /// With tensor parallelism, split the embedding and the lm_head over the vocabulary
    /// (default) instead of replicating them on every rank.
    pub vocab_parallel: bool,
}

/// The default [`ModelOptions::prefill_chunk`].
pub const DEFAULT_PREFILL_CHUNK: usize = 1024;

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            mode: LinearMode::Fp8,
            fuse_projections: true,
            dtype: None,
            fp8: None,
            fused_kernels: true,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            prefill_attention: PrefillKernel::Auto,
            tensor_parallel: None,
            vocab_parallel: true,
        }
    }
}

impl ModelOptions {
    /// Default options with `mode`.
    pub fn with_mode(mode: LinearMode) -> Self {
        Self { mode, ..Self::default() }
    }

    /// These options with the activation dtype set.
    pub fn dtype(self, dtype: DType) -> Self {
        Self { dtype: Some(dtype), ..self }
    }

    /// These options with q/k/v and gate/up kept as separate GEMMs (`false`) or fused (`true`).
    pub fn fuse_projections(self, on: bool) -> Self {
        Self { fuse_projections: on, ..self }
    }

    /// These options with the fused decode kernels on or off.
    pub fn fused_kernels(self, on: bool) -> Self {
        Self { fused_kernels: on, ..self }
    }

    /// These options with at most `tokens` (≥ 1) prompt tokens per prefill pass.
    pub fn prefill_chunk(self, tokens: usize) -> Self {
        Self { prefill_chunk: tokens.max(1), ..self }
    }

    /// These options with the prompt attention kernel `kernel`.
    pub fn prefill_attention(self, kernel: PrefillKernel) -> Self {
        Self { prefill_attention: kernel, ..self }
    }

    /// These options with the FP8 layers' options set.
    pub fn fp8(self, fp8: Fp8Options) -> Self {
        Self { fp8: Some(fp8), ..self }
    }

    /// These options building rank `comm.rank()`'s share of the model ([`Self::tensor_parallel`]).
    pub fn tensor_parallel(self, comm: Arc<dyn Collective>) -> Self {
        Self { tensor_parallel: Some(comm), ..self }
    }

    /// These options with the embedding and lm_head split over the vocabulary (`true`) or
    /// replicated (`false`) when the model is tensor-parallel.
    pub fn vocab_parallel(self, on: bool) -> Self {
        Self { vocab_parallel: on, ..self }
    }

    /// The activation dtype on `device`.
    pub fn dtype_for(&self, device: &Device) -> DType {
        self.dtype.unwrap_or(if device.is_cpu() { DType::F32 } else { DType::BF16 })
    }
}
