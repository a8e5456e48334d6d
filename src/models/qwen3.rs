//! Qwen3 (dense) on [`Fp8BlockLinear`]: the model of `Qwen/Qwen3-*-FP8` checkpoints.
//!
//! Per decoder layer, on the decode path (batch 1, one token) the work is: RMSNorm, one fused
//! q/k/v GEMM, one RMSNorm over all q and k heads (unit weight) times a `[heads, head_dim]`
//! weight that holds `q_norm`/`k_norm` (with the `1/sqrt(head_dim)` attention scale folded
//! into the q rows), one RoPE over q and k together, two in-place KV-cache writes, two batched
//! matmuls around a fused softmax (grouped-query heads are folded into the rows of q, so K/V
//! are never repeated), the o GEMM, a residual add, RMSNorm, one fused gate/up GEMM, SiLU·up and
//! the down GEMM. Greedy sampling runs on the device ([`Sampler`]), and the sampled ids feed
//! the next step without a host round trip. On CUDA sm_90 (bf16, head_dim 128, FP8 o
//! projection) a decode step replaces everything between the q/k/v GEMM and the o GEMM by two
//! kernels of ours (`src/cuda/attention.rs`; [`Qwen3Model::set_fused_attention`]). When a
//! layer's linears are FP8, the residual add + RMSNorm + activation quantization and SiLU·up +
//! quantization each run as one step ([`crate::fused`], one launch on CUDA), and a layer's last
//! residual add moves into the next layer's input norm (the final norm does the last one;
//! [`Qwen3Model::set_fused_elementwise`]).
//!
//! - [`Qwen3Model::load`]: from a `VarBuilder` over a checkpoint; modules that
//!   `is_quantized` rejects (or that have no `weight_scale_inv`) load dense.
//! - [`Qwen3Model::random`]: the real architecture with random FP8 weights generated on the
//!   device (for timing: Qwen3-32B in seconds, no 33 GB download).
//! - [`write_random_checkpoint`]: a tiny FP8 checkpoint (safetensors + `config.json`) written
//!   through [`quantize_weight`](crate::quant::quantize_weight), for tests and the example.
//! - [`compare_greedy`]: top-1 agreement and max |Δlogit| of two models over greedy steps.

use crate::format::{f32_to_e4m3, num_blocks, BLOCK};
use crate::linear::{AnyLinear, Fp8BlockLinear, Unreduced};
use candle_core::{bail, DType, Device, Module, Result, Tensor, D};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    1_000_000.0
}
fn default_max_pos() -> usize {
    40960
}
fn default_act() -> String {
    "silu".to_string()
}

/// The fields of a Hugging Face Qwen3 `config.json` that the model uses (unknown fields are
/// ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Qwen3Config {
    /// Rows of the token embedding and of the lm_head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP (each of gate and up).
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key / value heads (grouped-query attention: a divisor of the query heads).
    pub num_key_value_heads: usize,
    /// Per-head dimension; `hidden_size / num_attention_heads` when absent.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Epsilon of every RMSNorm (1e-6 when absent).
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base frequency (1e6 when absent).
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// Longest sequence the RoPE tables cover (40960 when absent); longer positions are an error.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// The lm_head reuses the token embedding (no `lm_head.weight` in the checkpoint).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on the q / k / v projections (loaded from the checkpoint's `*.bias`); Qwen3 has
    /// none. Random weights (`--random-weights`) refuse it.
    #[serde(default)]
    pub attention_bias: bool,
    /// MLP activation; only `"silu"` is supported (the default).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Beginning-of-sequence token, if the model has one.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// An id or a list of ids.
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
}

impl Qwen3Config {
    /// Parses a `config.json` text.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(|e| candle_core::Error::Msg(format!("Qwen3 config.json: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| candle_core::Error::Msg(format!("reading {}: {e}", path.display())))?;
        Self::from_json(&text)
    }

    /// The architecture of `Qwen/Qwen3-32B` (and `-FP8`).
    pub fn qwen3_32b() -> Self {
        Self {
            vocab_size: 151936,
            hidden_size: 5120,
            intermediate_size: 25600,
            num_hidden_layers: 64,
            num_attention_heads: 64,
            num_key_value_heads: 8,
            head_dim: Some(128),
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            max_position_embeddings: 40960,
            tie_word_embeddings: false,
            attention_bias: false,
            hidden_act: "silu".into(),
            bos_token_id: Some(151643),
            eos_token_id: Some(serde_json::json!(151645)),
        }
    }

    /// The tiny architecture of the embedded default model (byte-level vocabulary).
    pub fn tiny() -> Self {
        Self {
            vocab_size: 384,
            hidden_size: 256,
            intermediate_size: 768,
            num_hidden_layers: 4,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: Some(64),
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            max_position_embeddings: 4096,
            tie_word_embeddings: false,
            attention_bias: false,
            hidden_act: "silu".into(),
            bos_token_id: None,
            eos_token_id: Some(serde_json::json!(256)),
        }
    }

    /// Per-head dimension.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The end-of-sequence ids.
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|v| v as u32)).collect(),
            _ => vec![],
        }
    }

    /// Checks the invariants the model relies on.
    pub fn validate(&self) -> Result<()> {
        if self.num_attention_heads == 0 || self.num_key_value_heads == 0 {
            bail!("Qwen3 config: num_attention_heads and num_key_value_heads must be > 0")
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            bail!(
                "Qwen3 config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.num_key_value_heads
            )
        }
        if self.head_dim() % 2 != 0 {
            bail!("Qwen3 config: head_dim {} must be even for RoPE", self.head_dim())
        }
        if self.hidden_act != "silu" {
            bail!("Qwen3 config: hidden_act {:?} is not supported (only silu)", self.hidden_act)
        }
        Ok(())
    }

    /// Number of parameters in the linear layers of the decoder (what is FP8 in a checkpoint).
    pub fn linear_params(&self) -> usize {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim());
        let (hq, hkv) = (self.num_attention_heads, self.num_key_value_heads);
        let per_layer = h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * i;
        per_layer * self.num_hidden_layers
    }
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

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
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp8" => Ok(Self::Fp8),
            "bf16" | "dense" | "dequant" => Ok(Self::Bf16),
            o => Err(format!("unknown linear mode {o:?} (expected fp8 or bf16)")),
        }
    }
}

/// Options for building a [`Qwen3Model`].
#[derive(Debug, Clone)]
pub struct Qwen3Options {
    /// FP8 GEMMs or the dequantized dense baseline.
    pub mode: LinearMode,
    /// Fuse q/k/v and gate/up into one GEMM each (default). `false` keeps one layer per
    /// checkpoint module (for equivalence tests).
    pub fuse: bool,
    /// Activation / dense-weight dtype; `None`: bf16 on CUDA, f32 on the CPU.
    pub dtype: Option<DType>,
}

impl Default for Qwen3Options {
    fn default() -> Self {
        Self { mode: LinearMode::Fp8, fuse: true, dtype: None }
    }
}

impl Qwen3Options {
    /// Default options with `mode`.
    pub fn with_mode(mode: LinearMode) -> Self {
        Self { mode, ..Self::default() }
    }

    fn dtype_for(&self, device: &Device) -> DType {
        self.dtype.unwrap_or(if device.is_cpu() { DType::F32 } else { DType::BF16 })
    }
}

// ---------------------------------------------------------------------------------------------
// Linear helpers
// ---------------------------------------------------------------------------------------------

fn to_mode(l: AnyLinear, mode: LinearMode, dtype: DType) -> Result<AnyLinear> {
    match (l, mode) {
        (AnyLinear::Fp8(f), LinearMode::Bf16) => Ok(AnyLinear::Dense(f.to_dense(dtype)?)),
        (AnyLinear::Dense(d), _) if d.weight().dtype() != dtype => {
            let b = d.bias().map(|b| b.to_dtype(dtype)).transpose()?;
            Ok(AnyLinear::Dense(candle_nn::Linear::new(d.weight().to_dtype(dtype)?, b)))
        }
        (l, _) => Ok(l),
    }
}

fn out_dim(l: &AnyLinear) -> usize {
    l.out_dim()
}

/// Projections that share their input: either one fused GEMM whose output is split along N, or
/// one layer per part.
#[derive(Debug, Clone)]
enum Proj {
    Fused(AnyLinear, Vec<usize>),
    Split(Vec<AnyLinear>),
}

impl Proj {
    /// Fuses `parts` when `fuse` and possible (all FP8 with 128-aligned N except the last, or
    /// all dense of one dtype), else keeps them split.
    fn build(parts: Vec<AnyLinear>, fuse: bool) -> Result<Self> {
        let sizes: Vec<usize> = parts.iter().map(out_dim).collect();
        if !fuse || parts.len() < 2 {
            return Ok(Self::Split(parts));
        }
        let fp8: Vec<&Fp8BlockLinear> = parts.iter().filter_map(|p| if let AnyLinear::Fp8(f) = p { Some(f) } else { None }).collect();
        if fp8.len() == parts.len() {
            return match Fp8BlockLinear::concat(&fp8) {
                Ok(f) => Ok(Self::Fused(AnyLinear::Fp8(f), sizes)),
                Err(e) => {
                    tracing::info!("candle-fp8 qwen3: keeping projections unfused: {e}");
                    Ok(Self::Split(parts))
                }
            };
        }
        let dense: Vec<&candle_nn::Linear> = parts.iter().filter_map(|p| if let AnyLinear::Dense(d) = p { Some(d) } else { None }).collect();
        if dense.len() == parts.len() && dense.iter().all(|d| d.weight().dtype() == dense[0].weight().dtype()) {
            let ws: Vec<&Tensor> = dense.iter().map(|d| d.weight()).collect();
            let w = Tensor::cat(&ws, 0)?;
            let b = if dense.iter().any(|d| d.bias().is_some()) {
                let bs = dense
                    .iter()
                    .map(|d| match d.bias() {
                        Some(b) => Ok(b.clone()),
                        None => Tensor::zeros(d.weight().dim(0)?, d.weight().dtype(), d.weight().device()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some(Tensor::cat(&bs, 0)?)
            } else {
                None
            };
            return Ok(Self::Fused(AnyLinear::Dense(candle_nn::Linear::new(w, b)), sizes));
        }
        Ok(Self::Split(parts))
    }

    /// Outputs of each part, `[M, n_i]` (views of the fused output when fused).
    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        match self {
            Self::Fused(l, sizes) => {
                let y = l.forward(x)?;
                let mut off = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let t = y.narrow(D::Minus1, off, n);
                        off += n;
                        t
                    })
                    .collect()
            }
            Self::Split(ls) => ls.iter().map(|l| l.forward(x)).collect(),
        }
    }

    fn is_fused(&self) -> bool {
        matches!(self, Self::Fused(..))
    }

    fn map(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        Ok(match self {
            Self::Fused(l, s) => Self::Fused(f(l)?, s),
            Self::Split(ls) => Self::Split(ls.into_iter().map(f).collect::<Result<_>>()?),
        })
    }

    fn layers(&self) -> Vec<&AnyLinear> {
        match self {
            Self::Fused(l, _) => vec![l],
            Self::Split(ls) => ls.iter().collect(),
        }
    }
}

/// Bytes held by a linear layer's weights: `(fp8 bytes incl. scales, dense bytes)`.
fn linear_bytes(l: &AnyLinear) -> (usize, usize) {
    match l {
        AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) => (f.weight().elem_count() + f.weight_scale_inv().elem_count() * 4, 0),
        AnyLinear::Dense(d) => (0, d.weight().elem_count() * d.weight().dtype().size_in_bytes()),
    }
}

// ---------------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------------

/// A preallocated per-layer KV cache `[B, kv_heads, capacity, head_dim]`, written in place.
#[derive(Debug, Clone, Default)]
struct KvCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
}

impl KvCache {
    fn capacity(&self) -> usize {
        self.k.as_ref().map(|k| k.dims()[2]).unwrap_or(0)
    }

    /// Writes `k`, `v` `[B, kv_heads, T, head_dim]` (contiguous) at `offset` and returns views of
    /// the first `offset + T` positions.
    fn append(&mut self, k: &Tensor, v: &Tensor, offset: usize, capacity_hint: usize) -> Result<(Tensor, Tensor)> {
        let (b, h, t, d) = k.dims4()?;
        self.reserve((b, h, t, d), k.dtype(), k.device(), offset, capacity_hint)?;
        let (kc, vc) = (self.k.as_ref().unwrap(), self.v.as_ref().unwrap());
        kc.slice_set(k, 2, offset)?;
        vc.slice_set(v, 2, offset)?;
        self.len = offset + t;
        Ok((kc.narrow(2, 0, offset + t)?, vc.narrow(2, 0, offset + t)?))
    }

    /// Checks that `T` positions `[B, kv_heads, T, head_dim]` can be written at `offset` (a new
    /// sequence at 0, or the next position) and grows the buffers (keeping their first `len`
    /// positions) so that they hold `offset + T`. `len` is left to the writer.
    fn reserve(&mut self, (b, h, t, d): (usize, usize, usize, usize), dtype: DType, device: &Device, offset: usize, capacity_hint: usize) -> Result<()> {
        if offset != self.len {
            if offset == 0 {
                self.len = 0;
            } else {
                bail!(
                    "Qwen3: seqlen_offset {offset} but the KV cache holds {} positions; call \
                     clear_kv_cache() before starting a new sequence",
                    self.len
                )
            }
        }
        let need = offset + t;
        let same_batch = self.k.as_ref().map(|c| c.dims()[0] == b).unwrap_or(false);
        if !same_batch && offset != 0 {
            bail!("Qwen3: batch size changed to {b} in the middle of a sequence")
        }
        if !same_batch || self.capacity() < need {
            // Grow geometrically so that a long generation reallocates O(log n) times.
            let cap = need.max(capacity_hint).max(self.capacity() * 2).next_multiple_of(64);
            let nk = Tensor::zeros((b, h, cap, d), dtype, device)?;
            let nv = Tensor::zeros((b, h, cap, d), dtype, device)?;
            if let (true, Some(ok), Some(ov)) = (same_batch && self.len > 0, &self.k, &self.v) {
                nk.slice_set(&ok.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                nv.slice_set(&ov.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            self.k = Some(nk);
            self.v = Some(nv);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Decoder layer
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct DecoderLayer {
    input_norm: Tensor,
    post_norm: Tensor,
    qkv: Proj,
    o: AnyLinear,
    /// `[q_heads + kv_heads, head_dim]`: q_norm rows (times 1/sqrt(head_dim)) then k_norm rows.
    qk_norm: Tensor,
    gate_up: Proj,
    down: AnyLinear,
}

/// Shapes shared by every layer's forward.
#[derive(Debug, Clone, Copy)]
struct Dims {
    hq: usize,
    hkv: usize,
    d: usize,
    eps: f32,
    /// Decode steps may take the fused attention kernels ([`Qwen3Model::set_fused_attention`]).
    fused_attention: bool,
    /// How those kernels launch ([`Qwen3Model::set_step_attention`]).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    step: StepAttention,
    /// Where the fused MLP runs SiLU·up ([`Qwen3Model::set_swiglu_epilogue`]).
    swiglu_epilogue: SwigluEpilogue,
}

/// Where SiLU·up and the down projection's activation quantization run on the fused
/// elementwise path ([`Qwen3Model::set_swiglu_epilogue`]): in the gate/up GEMM's epilogue (one
/// launch, [`Fp8BlockLinear::forward_swiglu_quantized`]) or as their own launch after it. Same
/// activations either way when the gate/up GEMM does not split K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwigluEpilogue {
    /// The epilogue for 9–16 tokens (the 16-token gated tile: 256 weight rows, a whole
    /// 128-feature quantization group per CTA, no cluster), its own launch otherwise: what
    /// measured faster on the H200 (decode b16 10.29 vs 10.33 ms; at 1–8 tokens the compiled
    /// epilogue variants are 0.25–0.53 ms slower at batch 1, docs/PERF.md session 14). The default.
    #[default]
    Auto,
    /// The epilogue wherever our kernels take the layer (at most 16 tokens).
    On,
    /// Always its own launch.
    Off,
}

impl SwigluEpilogue {
    /// Whether a layer of `m` tokens runs SiLU·up in the gate/up GEMM's epilogue.
    pub fn applies(self, m: usize) -> bool {
        match self {
            Self::Auto => (9..=16).contains(&m),
            Self::On => true,
            Self::Off => false,
        }
    }
}

impl std::str::FromStr for SwigluEpilogue {
    type Err = String;

    /// `auto`, `on` (also `1`, `true`) or `off` (also `0`, `false`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "on" | "1" | "true" => Ok(Self::On),
            "off" | "0" | "false" => Ok(Self::Off),
            other => Err(format!("{other:?} is not a SwiGLU epilogue mode (expected auto, on or off)")),
        }
    }
}

/// How a decode step's attention launches on the fused CUDA path
/// ([`Qwen3Model::set_step_attention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAttention {
    /// One launch: qk-norm, RoPE, KV append and attention together
    /// (`candle_fp8::cuda::attention::decode_step_attention`), with these position and head
    /// splits (`None`: the kernel's defaults). The default.
    OneLaunch {
        /// Position splits (merged inside the launch, see `tail_merge`).
        splits: Option<usize>,
        /// CTAs per kv head (must divide `num_attention_heads / num_key_value_heads`).
        head_splits: Option<usize>,
        /// Merge the position splits in the last split to finish (workspace + an arrival
        /// counter, no cluster launch; the default) instead of inside a cluster
        /// (`candle_fp8::cuda::attention::SplitMerge`; same bits either way).
        tail_merge: bool,
    },
    /// Two launches, qk-norm + RoPE + append then the attention (the composition the one-launch
    /// kernel is bit-identical to, with the same position splits).
    Separate,
}

impl Default for StepAttention {
    fn default() -> Self {
        Self::OneLaunch { splits: None, head_splits: None, tail_merge: true }
    }
}

impl std::str::FromStr for StepAttention {
    type Err = String;

    /// `one`, `one:S,H` (one launch whose last split to finish merges the others; S position
    /// splits, H head splits, `-` keeps a default), `cluster` / `cluster:S,H` (one launch, the
    /// splits merged inside a cluster) or `separate`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let num = |v: &str, what: &str| -> std::result::Result<Option<usize>, String> {
            match v.trim() {
                "-" | "" => Ok(None),
                v => match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(format!("step attention: {what} {v:?} is not a positive integer")),
                },
            }
        };
        let (kind, plan) = match s.trim().split_once(':') {
            Some((k, p)) => (k, Some(p)),
            None => (s.trim(), None),
        };
        let tail_merge = match (kind, plan) {
            ("separate", None) => return Ok(Self::Separate),
            ("one", _) => true,
            ("cluster", _) => false,
            _ => return Err(format!("step attention {s:?}: expected `one`, `one:S,H`, `cluster`, `cluster:S,H` or `separate`")),
        };
        let (splits, head_splits) = match plan.map(|p| p.split_once(',')) {
            None => (None, None),
            Some(Some((sp, hs))) => (num(sp, "splits")?, num(hs, "head splits")?),
            Some(None) => return Err(format!("step attention {s:?}: expected S,H after the colon")),
        };
        Ok(Self::OneLaunch { splits, head_splits, tail_merge })
    }
}

impl DecoderLayer {
    fn new_norm_weights(q_norm: &Tensor, k_norm: &Tensor, dims: Dims) -> Result<Tensor> {
        let scale = 1.0 / (dims.d as f64).sqrt();
        let dt = q_norm.dtype();
        let q = (q_norm.to_dtype(DType::F32)? * scale)?.unsqueeze(0)?.broadcast_as((dims.hq, dims.d))?;
        let k = k_norm.to_dtype(DType::F32)?.unsqueeze(0)?.broadcast_as((dims.hkv, dims.d))?;
        Tensor::cat(&[&q, &k], 0)?.to_dtype(dt)?.contiguous()
    }

    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        x: &Tensor,
        pending: Option<&Unreduced>,
        fused_elementwise: bool,
        b: usize,
        t: usize,
        offset: usize,
        rope: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        unit: &Tensor,
        cache: &mut KvCache,
        capacity_hint: usize,
        dims: Dims,
    ) -> Result<(Tensor, Option<Unreduced>)> {
        let eps = dims.eps;
        let fe = fused_elementwise && self.fused_eligible()?;
        let (x, xn) = self.input_normed(x, pending, fe, eps)?;

        // Attention.
        let fused = if dims.fused_attention && t == 1 {
            self.decode_attention_fused(&xn, b, offset, rope, cache, capacity_hint, dims)?
        } else {
            None
        };
        let attn = match fused {
            Some(o) => o,
            None => Unreduced::Done(self.o.forward(&self.attention(&xn, b, t, offset, rope, mask, unit, cache, capacity_hint, dims)?)?),
        };
        if fe {
            return self.mlp_fused(&x, &attn, eps, dims.swiglu_epilogue);
        }
        let x = (x + attn.reduce()?)?;

        // MLP.
        let xn = candle_nn::ops::rms_norm(&x, &self.post_norm, eps)?;
        let gu = self.gate_up.forward(&xn)?;
        let a = (candle_nn::ops::silu(&gu[0])? * &gu[1])?;
        Ok(((x + self.down.forward(&a)?)?, None))
    }

    /// Whether the fused elementwise path applies: every linear of the layer FP8 with a provider
    /// that quantizes activations, q/k/v and gate/up each one GEMM, gate and up of equal width.
    fn fused_eligible(&self) -> Result<bool> {
        let quantizing = |l: &AnyLinear| match l {
            AnyLinear::Fp8(f) => f.quantizes_activations(),
            _ => Ok(false),
        };
        match (&self.qkv, &self.gate_up) {
            (Proj::Fused(qkv, _), Proj::Fused(gu, sizes)) if sizes.len() == 2 && sizes[0] == sizes[1] => {
                Ok(quantizing(qkv)? && quantizing(gu)? && quantizing(&self.down)?)
            }
            _ => Ok(false),
        }
    }

    /// `(residual stream, input of the q/k/v GEMM)`: `x` plus the previous layer's `pending`
    /// MLP output, then the input RMSNorm. Fused: one [`add_rmsnorm_quantize`] (one launch on
    /// CUDA) that also quantizes for the GEMM.
    ///
    /// [`add_rmsnorm_quantize`]: crate::fused::add_rmsnorm_quantize
    fn input_normed(&self, x: &Tensor, pending: Option<&Unreduced>, fused: bool, eps: f32) -> Result<(Tensor, Normed)> {
        if fused {
            // With a pending MLP output, the previous launch is the down GEMM and x the residual
            // stream written by the post-attention norm three launches back: settled (loaded
            // before the kernel waits). Without one, x may be the embedding just computed.
            let settled = pending.is_some();
            let (sum, qa, sa) = crate::fused::add_rmsnorm_quantize_unreduced_with(x, pending, &self.input_norm, eps, settled)?;
            let normed = Normed::Quantized { qa, sa, dtype: x.dtype() };
            return Ok((sum.unwrap_or_else(|| x.clone()), normed));
        }
        let x = match pending {
            Some(p) => (x + p.reduce()?.to_dtype(x.dtype())?)?,
            None => x.clone(),
        };
        let xn = candle_nn::ops::rms_norm(&x, &self.input_norm, eps)?;
        Ok((x, Normed::Plain(xn)))
    }

    /// The fused MLP: `x + o`, RMSNorm and quantization in one step, the gate/up GEMM, SiLU·up
    /// and quantization in one step, the down GEMM. Returns `(x + o, down output)`: the down
    /// output is added by the next layer's input norm (or the model's final norm).
    fn mlp_fused(&self, x: &Tensor, o: &Unreduced, eps: f32, swiglu_epilogue: SwigluEpilogue) -> Result<(Tensor, Option<Unreduced>)> {
        let (Proj::Fused(AnyLinear::Fp8(gate_up), _), AnyLinear::Fp8(down)) = (&self.gate_up, &self.down) else {
            bail!("Qwen3: the fused MLP path needs FP8 gate/up (one GEMM) and down layers")
        };
        let dtype = x.dtype();
        // x (the layer's input residual stream) was written before the q/k/v GEMM and the
        // previous launch is the o GEMM: settled, loaded before the kernel waits.
        let (sum, qa, sa) = crate::fused::add_rmsnorm_quantize_unreduced_with(x, Some(o), &self.post_norm, eps, true)?;
        let x = sum.ok_or_else(|| candle_core::Error::Msg("add_rmsnorm_quantize returned no sum".into()))?;
        let (qa, sa) = if swiglu_epilogue.applies(qa.dim(0)?) && dtype == DType::BF16 {
            // One launch at decode sizes on our kernels (same bits as the two steps below).
            gate_up.forward_swiglu_quantized(&qa, &sa)?
        } else {
            let gu = gate_up.forward_quantized(&qa, &sa)?.to_dtype(dtype)?;
            crate::fused::swiglu_quantize(&gu)?
        };
        // The down projection's split-K partials (if any) are added by the next input norm.
        let d = down.forward_quantized_unreduced(&qa, &sa)?;
        let d = if dtype == DType::BF16 { d } else { Unreduced::Done(d.reduce()?.to_dtype(dtype)?) };
        Ok((x, Some(d)))
    }

    /// The attention of the candle ops (any T, device and dtype): `[B*T, hq * d]`, the input of
    /// the o projection.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        xn: &Normed,
        b: usize,
        t: usize,
        offset: usize,
        rope: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        unit: &Tensor,
        cache: &mut KvCache,
        capacity_hint: usize,
        dims: Dims,
    ) -> Result<Tensor> {
        let Dims { hq, hkv, d, eps, .. } = dims;
        let n_rep = hq / hkv;
        let m = b * t;
        let (qk, v) = match &self.qkv {
            Proj::Fused(l, sizes) => {
                // q and k are adjacent in the fused output: one view (a copy only when M > 1).
                let y = xn.project(l)?;
                let nqk = sizes[0] + sizes[1];
                (y.narrow(1, 0, nqk)?.contiguous()?, y.narrow(1, nqk, sizes[2])?)
            }
            Proj::Split(ls) => {
                let (q, k) = (xn.project(&ls[0])?, xn.project(&ls[1])?);
                (Tensor::cat(&[&q, &k], 1)?, xn.project(&ls[2])?)
            }
        };
        // Per-head RMSNorm of q and k in one launch, then the per-head weights.
        let qk = candle_nn::ops::rms_norm(&qk.reshape((m * (hq + hkv), d))?, unit, eps)?;
        let qk = qk.reshape((b, t, hq + hkv, d))?.broadcast_mul(&self.qk_norm)?;
        let qk = candle_nn::rotary_emb::rope_thd(&qk, rope.0, rope.1)?;
        let (q, k) = (qk.narrow(2, 0, hq)?, qk.narrow(2, hq, hkv)?);
        let (k, v) = if t == 1 {
            (k.reshape((b, hkv, 1, d))?, v.reshape((b, hkv, 1, d))?)
        } else {
            (k.transpose(1, 2)?.contiguous()?, v.reshape((b, t, hkv, d))?.transpose(1, 2)?.contiguous()?)
        };
        let (k_all, v_all) = cache.append(&k, &v, offset, capacity_hint)?;
        // Grouped-query attention without repeating K/V: q heads of one kv head become rows.
        let q = if t == 1 {
            q.reshape((b, hkv, n_rep, d))?
        } else {
            q.transpose(1, 2)?.contiguous()?.reshape((b, hkv, n_rep * t, d))?
        };
        let att = q.matmul(&k_all.t()?)?;
        let att = match mask {
            Some(mask) => att.broadcast_add(mask)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v_all)?; // [b, hkv, n_rep * t, d]
        if t == 1 {
            y.reshape((b, hq * d))
        } else {
            y.reshape((b, hq, t, d))?.transpose(1, 2)?.contiguous()?.reshape((m, hq * d))
        }
    }

    /// A decode step (T = 1) through our attention kernels when they apply (CUDA sm_90, bf16,
    /// head_dim 128, FP8 o projection): qk-norm + RoPE + KV append in one launch, attention
    /// written straight into the o projection's quantized operand, the o GEMM. Returns the o
    /// projection's output `[B, hidden]`, or `None` for the candle path.
    #[cfg(feature = "cuda")]
    #[allow(clippy::too_many_arguments)]
    fn decode_attention_fused(
        &self,
        xn: &Normed,
        b: usize,
        offset: usize,
        rope: (&Tensor, &Tensor),
        cache: &mut KvCache,
        capacity_hint: usize,
        dims: Dims,
    ) -> Result<Option<Unreduced>> {
        use crate::cuda::attention as attn;
        let Dims { hq, hkv, d, eps, .. } = dims;
        let AnyLinear::Fp8(o) = &self.o else { return Ok(None) };
        if d != attn::HEAD_DIM
            || hq / hkv > attn::MAX_QUERIES_PER_KV_HEAD
            || xn.dtype() != DType::BF16
            || self.qk_norm.dtype() != DType::BF16
            || !attn::is_available(xn.device())
        {
            return Ok(None);
        }
        // q | k | v heads side by side, as one fused GEMM writes them.
        let qkv = match &self.qkv {
            Proj::Fused(l, _) => xn.project(l)?,
            Proj::Split(ls) => Tensor::cat(&ls.iter().map(|l| xn.project(l)).collect::<Result<Vec<_>>>()?, 1)?,
        };
        cache.reserve((b, hkv, 1, d), DType::BF16, xn.device(), offset, capacity_hint)?;
        let (kc, vc) = (cache.k.as_ref().unwrap(), cache.v.as_ref().unwrap());
        let qkv = qkv.contiguous()?;
        let (qa, sa) = match dims.step {
            StepAttention::OneLaunch { splits, head_splits, tail_merge } => {
                let opts = attn::DecodeStepOptions {
                    attention: attn::DecodeAttentionOptions { splits, ..Default::default() },
                    head_splits,
                    merge: if tail_merge { attn::SplitMerge::Tail } else { attn::SplitMerge::Cluster },
                };
                let o = attn::decode_step_attention(&qkv, &self.qk_norm, rope.0, rope.1, kc, vc, offset, hq, hkv, eps, opts)?;
                o.quantized.expect("requested")
            }
            StepAttention::Separate => {
                let q = attn::qk_norm_rope_append(&qkv, &self.qk_norm, rope.0, rope.1, kc, vc, offset, hq, hkv, eps)?;
                attn::decode_attention_quant(&q, kc, vc, offset + 1)?
            }
        };
        cache.len = offset + 1;
        Ok(Some(o.forward_quantized_unreduced(&qa, &sa)?))
    }

    #[cfg(not(feature = "cuda"))]
    #[allow(clippy::too_many_arguments)]
    fn decode_attention_fused(
        &self,
        _xn: &Normed,
        _b: usize,
        _offset: usize,
        _rope: (&Tensor, &Tensor),
        _cache: &mut KvCache,
        _capacity_hint: usize,
        _dims: Dims,
    ) -> Result<Option<Unreduced>> {
        Ok(None)
    }
}

/// The input of a layer's first GEMM: the normalized activation, or (fused elementwise path)
/// its quantized form.
enum Normed {
    Plain(Tensor),
    Quantized { qa: Tensor, sa: Tensor, dtype: DType },
}

impl Normed {
    /// `l` applied to this input, in the activation dtype.
    fn project(&self, l: &AnyLinear) -> Result<Tensor> {
        match (self, l) {
            (Self::Plain(x), l) => l.forward(x),
            (Self::Quantized { qa, sa, dtype }, AnyLinear::Fp8(f)) => f.forward_quantized(qa, sa)?.to_dtype(*dtype),
            _ => bail!("Qwen3: a quantized activation reached a layer that is not FP8"),
        }
    }

    /// The activation dtype.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn dtype(&self) -> DType {
        match self {
            Self::Plain(x) => x.dtype(),
            Self::Quantized { dtype, .. } => *dtype,
        }
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn device(&self) -> &Device {
        match self {
            Self::Plain(x) => x.device(),
            Self::Quantized { qa, .. } => qa.device(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// Qwen3 with blocked-FP8 (or dequantized dense) linear layers, a KV cache and last-position
/// logits.
#[derive(Debug, Clone)]
pub struct Qwen3Model {
    cfg: Qwen3Config,
    embed: Tensor,
    layers: Vec<DecoderLayer>,
    norm: Tensor,
    lm_head: AnyLinear,
    cos: Tensor,
    sin: Tensor,
    unit: Tensor,
    kv: Vec<KvCache>,
    capacity_hint: usize,
    dtype: DType,
    device: Device,
    mode: LinearMode,
    /// Decode steps use the fused attention kernels where they apply (default on).
    fused_attention: bool,
    /// How the fused decode attention launches.
    step_attention: StepAttention,
    /// Fuse the elementwise work around the FP8 GEMMs with the activation quantization
    /// (see [`Qwen3Model::set_fused_elementwise`]).
    fused_elementwise: bool,
    /// Where SiLU·up runs ([`Qwen3Model::set_swiglu_epilogue`]).
    swiglu_epilogue: SwigluEpilogue,
}

/// Where the model's tensors come from while building it.
enum Source<'a> {
    Checkpoint { vb: VarBuilder<'a>, is_quantized: &'a dyn Fn(&str) -> bool },
    Random { rng: Rng },
}

/// Standard deviation of e4m3 codes drawn uniformly over [-448, 448] (≈ 448/√3).
const E4M3_UNIFORM_STD: f64 = 258.6;

impl Source<'_> {
    /// A linear layer `prefix` `[out, in]`.
    #[allow(clippy::too_many_arguments)]
    fn linear(&mut self, prefix: &str, in_dim: usize, out_dim: usize, bias: bool, gain: f64, device: &Device, dtype: DType) -> Result<AnyLinear> {
        match self {
            Self::Checkpoint { vb, is_quantized } => {
                let vb = vb.pp(prefix);
                let quantized = is_quantized(&vb.prefix()) && vb.contains_tensor("weight_scale_inv");
                if !quantized && vb.contains_tensor("weight_scale_inv") {
                    bail!("{}: has weight_scale_inv but quantization_config lists it as not converted", vb.prefix())
                }
                let l = AnyLinear::load(vb.set_dtype(dtype), in_dim, out_dim, bias, quantized)?;
                Ok(l)
            }
            Self::Random { rng } => {
                if bias {
                    bail!("random weights: attention_bias is not supported")
                }
                Ok(AnyLinear::Fp8(random_fp8(out_dim, in_dim, gain, device, rng)?))
            }
        }
    }

    /// Random weights on a GPU, `fuse` on: the projections of output widths `outs` (multiples of
    /// 128) sharing one input of width `in_dim`, generated as one fused FP8 layer — what
    /// [`Proj::build`] makes of the parts, without the parts and their concatenation as device
    /// transients (the memory pool kept their holes: docs/PERF.md, peak memory). `None` elsewhere.
    fn random_fused(&mut self, in_dim: usize, outs: &[usize], bias: bool, fuse: bool, device: &Device) -> Result<Option<Fp8BlockLinear>> {
        let Self::Random { rng } = self else { return Ok(None) };
        if !fuse || bias || device.is_cpu() || outs.len() < 2 || outs.iter().any(|o| o % BLOCK != 0) {
            return Ok(None);
        }
        random_fp8(outs.iter().sum(), in_dim, 1.0, device, rng).map(Some)
    }

    /// A 1-D norm weight (ones ± small noise for random weights).
    fn norm(&mut self, name: &str, dim: usize, device: &Device, dtype: DType) -> Result<Tensor> {
        match self {
            Self::Checkpoint { vb, .. } => vb.get_with_hints_dtype(dim, name, Default::default(), dtype),
            Self::Random { .. } => Tensor::ones(dim, dtype, device),
        }
    }
}

fn random_fp8(n: usize, k: usize, gain: f64, device: &Device, rng: &mut Rng) -> Result<Fp8BlockLinear> {
    let base = gain / (E4M3_UNIFORM_STD * (k as f64).sqrt());
    let w = if device.is_cpu() {
        let v: Vec<crate::F8E4M3> = (0..n * k).map(|_| f32_to_e4m3(rng.uniform_f32() * 448.0)).collect();
        Tensor::from_vec(v, (n, k), device)?
    } else {
        random_codes_on_device(n, k, device, rng)?
    };
    let (nb, kb) = (num_blocks(n), num_blocks(k));
    // Block scales vary log-uniformly over [base/√2, base·√2] so that a wrong scale index
    // changes the output.
    let s: Vec<f32> = (0..nb * kb).map(|_| (base * (rng.uniform_f32() as f64 * 0.5f64.ln().abs() / 2.0).exp()) as f32).collect();
    Fp8BlockLinear::new(w, Tensor::from_vec(s, (nb, kb), device)?, None)
}

/// `[n, k]` uniform e4m3 codes (values uniform in ±448, rounded) generated on the device.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
fn random_codes_on_device(n: usize, k: usize, device: &Device, rng: &mut Rng) -> Result<Tensor> {
    // Our kernel writes the codes in place: no transient buffer.
    #[cfg(feature = "cuda")]
    if let Some(w) = crate::cuda::random_e4m3(device, n, k, rng.next_u64())? {
        return Ok(w);
    }
    // Without it: uniform f32 values through our activation quantizer (candle has no e4m3 cast
    // on CUDA); each group's scale is ≈ 1, so the codes are uniform e4m3 values and the group
    // scales are dropped. The f32 buffer is a 4x transient.
    Ok(crate::quant::quantize_activation(&Tensor::rand(-448f32, 448f32, (n, k), device)?)?.0)
}

impl Qwen3Model {
    /// Loads Qwen3 from a checkpoint `VarBuilder` (root of the checkpoint: names
    /// `model.layers.N...`, `lm_head.weight`). `is_quantized(module_path)` follows
    /// `quantization_config.modules_to_not_convert`; a module also loads dense when it has no
    /// `weight_scale_inv`. Dense weights and activations use `opts.dtype` (bf16 on CUDA, f32 on
    /// the CPU by default).
    pub fn load(cfg: &Qwen3Config, vb: VarBuilder, is_quantized: &dyn Fn(&str) -> bool, opts: &Qwen3Options) -> Result<Self> {
        Self::load_with_progress(cfg, vb, is_quantized, opts, &mut |_, _| {})
    }

    /// [`Qwen3Model::load`] calling `progress(done_layers, total_layers)` as layers load.
    pub fn load_with_progress(
        cfg: &Qwen3Config,
        vb: VarBuilder,
        is_quantized: &dyn Fn(&str) -> bool,
        opts: &Qwen3Options,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let device = vb.device().clone();
        Self::build(cfg, &device, Source::Checkpoint { vb, is_quantized }, opts, progress)
    }

    /// The architecture of `cfg` with random FP8 weights generated on `device` (fast even for
    /// Qwen3-32B: e4m3 codes come from the device RNG). Activations stay well-conditioned:
    /// each linear has output ≈ input RMS. Timings are meaningful, text is not.
    pub fn random(cfg: &Qwen3Config, device: &Device, seed: u64, mode: LinearMode) -> Result<Self> {
        Self::random_with(cfg, device, seed, &Qwen3Options::with_mode(mode), &mut |_, _| {})
    }

    /// [`Qwen3Model::random`] with options and a progress callback.
    pub fn random_with(
        cfg: &Qwen3Config,
        device: &Device,
        seed: u64,
        opts: &Qwen3Options,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        if !device.is_cpu() {
            device.set_seed(seed)?;
        }
        Self::build(cfg, device, Source::Random { rng: Rng::new(seed) }, opts, progress)
    }

    fn build(cfg: &Qwen3Config, device: &Device, mut src: Source, opts: &Qwen3Options, progress: &mut dyn FnMut(usize, usize)) -> Result<Self> {
        cfg.validate()?;
        let dtype = opts.dtype_for(device);
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let (hq, hkv, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        let dims = Dims { hq, hkv, d, eps: cfg.rms_norm_eps as f32, fused_attention: true, step: StepAttention::default(), swiglu_epilogue: SwigluEpilogue::default() };
        let nl = cfg.num_hidden_layers;
        let embed = match &mut src {
            Source::Checkpoint { vb, .. } => vb.get_with_hints_dtype((cfg.vocab_size, h), "model.embed_tokens.weight", Default::default(), dtype)?,
            Source::Random { rng } => random_normal(&[cfg.vocab_size, h], 1.0, device, dtype, rng)?,
        };
        let out_gain = 1.0 / (nl.max(1) as f64).sqrt();
        let mut layers = Vec::with_capacity(nl);
        progress(0, nl);
        for l in 0..nl {
            let p = format!("model.layers.{l}");
            let ab = cfg.attention_bias;
            let lin = |src: &mut Source, name: &str, i_, o_, b_, g| src.linear(&format!("{p}.{name}"), i_, o_, b_, g, device, dtype);
            let m = |x: AnyLinear| to_mode(x, opts.mode, dtype);
            // Projections sharing an input: random weights on a GPU are generated fused (one
            // buffer, no concatenation transients); otherwise part by part, then fused.
            let proj = |src: &mut Source, names: &[&str], outs: &[usize], bias: bool| -> Result<Proj> {
                if let Some(fused) = src.random_fused(h, outs, bias, opts.fuse, device)? {
                    return Ok(Proj::Fused(m(AnyLinear::Fp8(fused))?, outs.to_vec()));
                }
                let parts = names.iter().zip(outs).map(|(name, &o)| m(lin(src, name, h, o, bias, 1.0)?)).collect::<Result<Vec<_>>>()?;
                Proj::build(parts, opts.fuse)
            };
            let qkv = proj(&mut src, &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], &[hq * d, hkv * d, hkv * d], ab)?;
            let o = lin(&mut src, "self_attn.o_proj", hq * d, h, false, out_gain)?;
            let gate_up = proj(&mut src, &["mlp.gate_proj", "mlp.up_proj"], &[i, i], false)?;
            let dn = lin(&mut src, "mlp.down_proj", i, h, false, out_gain)?;
            let q_norm = src.norm(&format!("{p}.self_attn.q_norm.weight"), d, device, dtype)?;
            let k_norm = src.norm(&format!("{p}.self_attn.k_norm.weight"), d, device, dtype)?;
            let input_norm = src.norm(&format!("{p}.input_layernorm.weight"), h, device, dtype)?;
            let post_norm = src.norm(&format!("{p}.post_attention_layernorm.weight"), h, device, dtype)?;
            let layer = DecoderLayer {
                input_norm,
                post_norm,
                qkv,
                o: m(o)?,
                qk_norm: DecoderLayer::new_norm_weights(&q_norm, &k_norm, dims)?,
                gate_up,
                down: m(dn)?,
            };
            layers.push(layer);
            progress(l + 1, nl);
        }
        let norm = src.norm("model.norm.weight", h, device, dtype)?;
        let lm_head = if cfg.tie_word_embeddings {
            AnyLinear::Dense(candle_nn::Linear::new(embed.clone(), None))
        } else {
            match &mut src {
                Source::Checkpoint { .. } => to_mode(src.linear("lm_head", h, cfg.vocab_size, false, 1.0, device, dtype)?, opts.mode, dtype)?,
                Source::Random { rng } => {
                    AnyLinear::Dense(candle_nn::Linear::new(random_normal(&[cfg.vocab_size, h], 1.0 / (h as f64).sqrt(), device, dtype, rng)?, None))
                }
            }
        };
        let (cos, sin) = rope_tables(cfg, device, dtype)?;
        Ok(Self {
            cfg: cfg.clone(),
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            unit: Tensor::ones(d, dtype, device)?,
            kv: vec![KvCache::default(); nl],
            capacity_hint: 0,
            dtype,
            device: device.clone(),
            mode: opts.mode,
            fused_attention: true,
            step_attention: StepAttention::default(),
            fused_elementwise: true,
            swiglu_epilogue: SwigluEpilogue::default(),
        })
    }

    /// A copy of this model whose FP8 linears are dequantized into dense layers (the bf16
    /// baseline: measures the FP8 format's effect), sharing the embeddings and norms. Its KV
    /// cache starts empty.
    pub fn to_dense(&self) -> Result<Self> {
        let dtype = self.dtype;
        self.map_linears(&|l| to_mode(l, LinearMode::Bf16, dtype), LinearMode::Bf16)
    }

    /// A copy of this model whose FP8 linears run [`Fp8BlockLinear::forward_reference`]: the
    /// same quantized activations and weights, multiplied in f32 after dequantization. Against
    /// this, the FP8 kernels differ only by summation order and output rounding. It shares
    /// every weight with `self` (no extra memory); its KV cache starts empty.
    pub fn to_reference(&self) -> Result<Self> {
        let f = |l: AnyLinear| {
            Ok(match l {
                AnyLinear::Fp8(f) => AnyLinear::Fp8Reference(f),
                l => l,
            })
        };
        self.map_linears(&f, self.mode)
    }

    fn map_linears(&self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>, mode: LinearMode) -> Result<Self> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(DecoderLayer {
                    qkv: l.qkv.clone().map(f)?,
                    o: f(l.o.clone())?,
                    gate_up: l.gate_up.clone().map(f)?,
                    down: f(l.down.clone())?,
                    ..l.clone()
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers, lm_head: f(self.lm_head.clone())?, kv: vec![KvCache::default(); self.kv.len()], mode, ..self.clone() })
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Activation dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// How the linears compute.
    pub fn mode(&self) -> LinearMode {
        self.mode
    }

    /// Chooses how a layer whose linears are all FP8 (q/k/v and gate/up fused, a provider that
    /// quantizes activations) computes the work around its GEMMs. `true` (the default): residual
    /// add + RMSNorm + quantization and SiLU·up + quantization run as one step each
    /// ([`crate::fused`]: one launch each for bf16 on CUDA), and each layer's final residual add
    /// moves into the next layer's input norm. `false`: the composed candle ops. Both give
    /// bit-identical activations; other layers always take the composed ops.
    pub fn set_fused_elementwise(&mut self, on: bool) {
        self.fused_elementwise = on;
    }

    /// On the fused elementwise path, where SiLU·up and the down projection's quantization run:
    /// in the gate/up GEMM's epilogue (one launch instead of two where our Hopper kernels run the
    /// layer with at most 16 tokens, see [`Fp8BlockLinear::forward_swiglu_quantized`]) or as
    /// their own launch after it. [`SwigluEpilogue::Auto`] (the default) picks per token count
    /// what measured faster on the H200.
    pub fn set_swiglu_epilogue(&mut self, mode: SwigluEpilogue) {
        self.swiglu_epilogue = mode;
    }

    /// Where SiLU·up runs ([`Qwen3Model::set_swiglu_epilogue`]).
    pub fn swiglu_epilogue(&self) -> SwigluEpilogue {
        self.swiglu_epilogue
    }

    /// Whether the fused elementwise path is enabled ([`Qwen3Model::set_fused_elementwise`]).
    pub fn fused_elementwise(&self) -> bool {
        self.fused_elementwise
    }

    /// Number of layers that take the fused elementwise path (0 when it is disabled).
    pub fn fused_elementwise_layers(&self) -> Result<usize> {
        if !self.fused_elementwise {
            return Ok(0);
        }
        let mut n = 0;
        for l in &self.layers {
            n += l.fused_eligible()? as usize;
        }
        Ok(n)
    }

    /// Whether q/k/v and gate/up run as one GEMM each (in every layer).
    pub fn is_fused(&self) -> bool {
        self.layers.iter().all(|l| l.qkv.is_fused() && l.gate_up.is_fused())
    }

    /// Kinds of the decoder's linear layers, one string per module as loaded:
    /// `"fp8"` or `"dense"`, keyed by `layer.module` (`0.qkv`, `0.o`, `0.gate_up`, `0.down`, …).
    pub fn linear_kinds(&self) -> Vec<(String, &'static str)> {
        let kind = |l: &AnyLinear| match l {
            AnyLinear::Fp8(_) => "fp8",
            AnyLinear::Fp8Reference(_) => "fp8-reference",
            AnyLinear::Dense(_) => "dense",
        };
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            for (name, p) in [("qkv", &l.qkv), ("gate_up", &l.gate_up)] {
                for (j, x) in p.layers().into_iter().enumerate() {
                    let n = if p.is_fused() { format!("{i}.{name}") } else { format!("{i}.{name}[{j}]") };
                    out.push((n, kind(x)));
                }
            }
            out.push((format!("{i}.o"), kind(&l.o)));
            out.push((format!("{i}.down"), kind(&l.down)));
        }
        out.push(("lm_head".into(), kind(&self.lm_head)));
        out
    }

    /// `(fp8 bytes incl. scales, dense linear bytes, embedding + norm bytes)` of the weights.
    pub fn weight_bytes(&self) -> (usize, usize, usize) {
        let (mut f, mut dn) = (0, 0);
        let mut add = |l: &AnyLinear| {
            let (a, b) = linear_bytes(l);
            f += a;
            dn += b;
        };
        for l in &self.layers {
            l.qkv.layers().into_iter().for_each(&mut add);
            l.gate_up.layers().into_iter().for_each(&mut add);
            add(&l.o);
            add(&l.down);
        }
        if !self.cfg.tie_word_embeddings {
            add(&self.lm_head);
        }
        let es = self.dtype.size_in_bytes();
        let other = self.embed.elem_count() * es + (self.layers.len() * 2 + 1) * self.cfg.hidden_size * es;
        (f, dn, other)
    }

    /// Bytes of KV cache currently allocated.
    pub fn kv_cache_bytes(&self) -> usize {
        self.kv
            .iter()
            .map(|c| c.k.as_ref().map(|k| 2 * k.elem_count() * k.dtype().size_in_bytes()).unwrap_or(0))
            .sum()
    }

    /// Preallocation hint: the KV cache is sized for `max_seq_len` positions at the first
    /// forward (it still grows if a sequence goes beyond).
    pub fn set_kv_capacity(&mut self, max_seq_len: usize) {
        self.capacity_hint = max_seq_len;
    }

    /// Switches the fused decode attention on or off (default on). When on, a decode step
    /// (one token per sequence) on a CUDA sm_90 device, in bf16, with `head_dim == 128` and an
    /// FP8 o projection runs one kernel of ours — qk-norm + RoPE + KV append + f32 attention
    /// quantized straight into the o projection's operand (see [`StepAttention`]) — instead of
    /// about ten candle ops and the activation quantizer; anything else takes the candle path. Both paths
    /// share the KV cache, so the switch may flip between steps.
    pub fn set_fused_attention(&mut self, on: bool) {
        self.fused_attention = on;
    }

    /// How the fused decode attention launches (default [`StepAttention::OneLaunch`] with the
    /// kernel's own split choice). Both choices give the same bits for the same position splits.
    pub fn set_step_attention(&mut self, step: StepAttention) {
        self.step_attention = step;
    }

    /// The fused decode attention's launch plan ([`Qwen3Model::set_step_attention`]).
    pub fn step_attention(&self) -> StepAttention {
        self.step_attention
    }

    /// Whether the fused decode attention is switched on ([`Qwen3Model::set_fused_attention`]).
    pub fn fused_attention(&self) -> bool {
        self.fused_attention
    }

    /// Forgets the cached keys/values (the buffers are kept for reuse).
    pub fn clear_kv_cache(&mut self) {
        for c in &mut self.kv {
            c.len = 0;
        }
    }

    /// Number of positions in the KV cache.
    pub fn kv_len(&self) -> usize {
        self.kv.first().map(|c| c.len).unwrap_or(0)
    }

    /// Runs `input_ids` `[B, T]` (u32, any device) at positions `seqlen_offset..+T` and returns
    /// the logits of the last position, f32 `[B, vocab]`.
    pub fn forward(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        self.forward_logits(input_ids, seqlen_offset)?.to_dtype(DType::F32)
    }

    /// [`Self::forward`] with the logits in the lm_head's output dtype (bf16 on CUDA): a greedy
    /// sampler can take their argmax directly, without an f32 copy of `[B, vocab]`.
    pub fn forward_logits(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        if t == 0 || b == 0 {
            bail!("Qwen3: input_ids must be non-empty, got shape [{b}, {t}]")
        }
        if seqlen_offset + t > self.cos.dim(0)? {
            bail!(
                "Qwen3: positions up to {} exceed max_position_embeddings {}",
                seqlen_offset + t,
                self.cos.dim(0)?
            )
        }
        let cfg = &self.cfg;
        let dims = Dims {
            hq: cfg.num_attention_heads,
            hkv: cfg.num_key_value_heads,
            d: cfg.head_dim(),
            eps: cfg.rms_norm_eps as f32,
            fused_attention: self.fused_attention,
            step: self.step_attention,
            swiglu_epilogue: self.swiglu_epilogue,
        };
        if seqlen_offset == 0 {
            // A new sequence: every layer's KV cache first, so that the caches do not share
            // memory-pool chunks with the prefill's transient activations (a chunk with one live
            // cache in it cannot go back to the device after the prefill).
            for c in &mut self.kv {
                c.reserve((b, dims.hkv, t, dims.d), self.dtype, &self.device, 0, self.capacity_hint)?;
            }
        }
        let ids = input_ids.to_device(&self.device)?.to_dtype(DType::U32)?.flatten_all()?;
        let mut x = self.embed.index_select(&ids, 0)?; // [B*T, H]
        let cos = self.cos.narrow(0, seqlen_offset, t)?;
        let sin = self.sin.narrow(0, seqlen_offset, t)?;
        let mask = if t > 1 { Some(causal_mask(t, seqlen_offset, dims.hq / dims.hkv, &self.device, self.dtype)?) } else { None };
        let hint = self.capacity_hint;
        // A fused layer leaves its MLP output pending: the next layer adds it in its input norm.
        let mut pending: Option<Unreduced> = None;
        let fe = self.fused_elementwise;
        for (layer, cache) in self.layers.iter().zip(self.kv.iter_mut()) {
            let rope = (&cos, &sin);
            let (nx, p) = layer.forward(&x, pending.as_ref(), fe, b, t, seqlen_offset, rope, mask.as_ref(), &self.unit, cache, hint, dims)?;
            (x, pending) = (nx, p);
        }
        if let Some(p) = pending {
            let p = p.reduce()?.to_dtype(x.dtype())?;
            x = (x + p)?;
        }
        let x = if t > 1 { x.reshape((b, t, cfg.hidden_size))?.narrow(1, t - 1, 1)?.squeeze(1)?.contiguous()? } else { x };
        let x = candle_nn::ops::rms_norm(&x, &self.norm, dims.eps)?;
        self.lm_head.forward(&x)
    }
}

/// Additive causal mask `[n_rep * t, offset + t]`: row `r` is query position `offset + r % t`.
fn causal_mask(t: usize, offset: usize, n_rep: usize, device: &Device, dtype: DType) -> Result<Tensor> {
    let l = offset + t;
    let mut m = vec![0f32; n_rep * t * l];
    for r in 0..n_rep * t {
        let qi = offset + r % t;
        for j in qi + 1..l {
            m[r * l + j] = f32::NEG_INFINITY;
        }
    }
    Tensor::from_vec(m, (n_rep * t, l), device)?.to_dtype(dtype)
}

/// RoPE tables `[max_position_embeddings, head_dim / 2]` (non-interleaved halves).
fn rope_tables(cfg: &Qwen3Config, device: &Device, dtype: DType) -> Result<(Tensor, Tensor)> {
    let d = cfg.head_dim();
    let n = cfg.max_position_embeddings;
    let inv: Vec<f64> = (0..d / 2).map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f64 / d as f64)).collect();
    let mut cos = Vec::with_capacity(n * d / 2);
    let mut sin = Vec::with_capacity(n * d / 2);
    for p in 0..n {
        for f in &inv {
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let cos = Tensor::from_vec(cos, (n, d / 2), device)?.to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (n, d / 2), device)?.to_dtype(dtype)?;
    Ok((cos, sin))
}

fn random_normal(shape: &[usize], std: f64, device: &Device, dtype: DType, rng: &mut Rng) -> Result<Tensor> {
    if device.is_cpu() {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.normal_f32() * std as f32).collect();
        Tensor::from_vec(v, shape, device)?.to_dtype(dtype)
    } else {
        let (rows, cols) = match shape {
            [r, c] => (*r, *c),
            _ => return Tensor::randn(0f32, std as f32, shape, device)?.to_dtype(dtype),
        };
        fill_rows_on_device(rows, cols, dtype, device, &|r| Tensor::randn(0f32, std as f32, (r, cols), device))
    }
}

/// Builds a `[rows, cols]` tensor of `dtype` on the device from f32 chunks of at most 32M
/// elements, so that generating a large random weight never holds a full f32 copy (the peak
/// stays close to the final size).
fn fill_rows_on_device(rows: usize, cols: usize, dtype: DType, device: &Device, gen: &dyn Fn(usize) -> Result<Tensor>) -> Result<Tensor> {
    const CHUNK_ELEMS: usize = 32 << 20;
    let chunk_rows = (CHUNK_ELEMS / cols.max(1)).max(1);
    if chunk_rows >= rows {
        return gen(rows)?.to_dtype(dtype);
    }
    let out = Tensor::zeros((rows, cols), dtype, device)?;
    let mut r0 = 0;
    while r0 < rows {
        let r = chunk_rows.min(rows - r0);
        out.slice_set(&gen(r)?.to_dtype(dtype)?, 0, r0)?;
        r0 += r;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Random numbers (deterministic, no dependency)
// ---------------------------------------------------------------------------------------------

pub use crate::testing::Rng;

// ---------------------------------------------------------------------------------------------
// Sampling and generation
// ---------------------------------------------------------------------------------------------

/// Next-token sampling: greedy (argmax on the device) when `temperature <= 0`, else
/// temperature + nucleus (top-p) sampling on the host with a seeded generator.
#[derive(Debug, Clone)]
pub struct Sampler {
    temperature: f64,
    top_p: f64,
    rng: Rng,
}

impl Sampler {
    /// A sampler; `temperature <= 0` means greedy.
    pub fn new(temperature: f64, top_p: f64, seed: u64) -> Self {
        Self { temperature, top_p, rng: Rng::new(seed) }
    }

    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self::new(0.0, 1.0, 0)
    }

    /// Whether this sampler is greedy (device-side argmax).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Samples one id per row of `logits` `[B, vocab]`; returns u32 `[B]` on the logits' device.
    pub fn sample(&mut self, logits: &Tensor) -> Result<Tensor> {
        if self.is_greedy() {
            // Our one-launch argmax (candle's CPU argmax semantics) where it can run: candle's
            // CUDA argmax costs ~100 µs per step on f32 [B, 151936] logits.
            #[cfg(feature = "cuda")]
            if matches!(logits.dtype(), DType::F32 | DType::BF16) && crate::cuda::sampling::is_available(logits.device()) {
                return crate::cuda::sampling::argmax_last_dim(&logits.contiguous()?);
            }
            return logits.argmax(D::Minus1)?.to_dtype(DType::U32);
        }
        let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let ids: Vec<u32> = rows.iter().map(|r| self.sample_row(r)).collect();
        Tensor::new(ids, logits.device())
    }

    fn sample_row(&mut self, logits: &[f32]) -> u32 {
        let t = self.temperature;
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut probs: Vec<(u32, f64)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l as f64 - max) / t).exp())).collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
        let mut keep = probs.len();
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate() {
                acc += p.1 / total;
                if acc >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        let kept = &probs[..keep];
        let mass: f64 = kept.iter().map(|p| p.1).sum();
        let mut r = self.rng.unit_f64() * mass;
        for p in kept {
            r -= p.1;
            if r <= 0.0 {
                return p.0;
            }
        }
        kept[kept.len() - 1].0
    }
}

/// Tokens and timings of one [`generate`] call.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated ids per sequence (prompt excluded; stops after an EOS id).
    pub tokens: Vec<Vec<u32>>,
    /// Prompt length.
    pub prompt_len: usize,
    /// From the call until the first sampled ids are on the host (prefill + sampling + read).
    pub ttft: Duration,
    /// One entry per later step: the time between the previous step's ids and this step's ids
    /// reaching the host (the inter-token latency a consumer of the stream sees).
    pub step_times: Vec<Duration>,
    /// Per later step, the host time spent enqueuing that step's launches (forward and
    /// sampling). Close to the step time means the host, not the GPU, sets the pace.
    pub enqueue_times: Vec<Duration>,
    /// Whether the steps were launched ahead (see [`launches_ahead`]).
    pub launched_ahead: bool,
}

/// Environment switch of the decode loop's launch-ahead (`0`/`off`/`false` disables it; the
/// default is on where it applies, see [`launches_ahead`]).
pub const LAUNCH_AHEAD_ENV: &str = "CANDLE_FP8_LAUNCH_AHEAD";

/// Whether [`generate`] launches step `s + 1` before it waits for step `s`'s ids: on a CUDA
/// device with a greedy sampler (the ids are produced on the device and feed the next step
/// there, so only their copy to the host has to wait), unless `CANDLE_FP8_LAUNCH_AHEAD=0`.
/// Reading the ids synchronously instead leaves the GPU idle while the host wakes up and
/// launches the next step (on an H200 ~35 µs per step: TPOT −0.03 ms at batch 1 and 16 with
/// launch-ahead, docs/PERF.md, session 12).
///
/// With launch-ahead, `on_step(s, ..)` runs after step `s + 1` has been enqueued (from `s =
/// 1` on; the first ids are read before anything else is launched, so TTFT is the prefill's),
/// and when every sequence has stopped one extra step has run on the device and is dropped.
pub fn launches_ahead(device: &Device, sampler: &Sampler) -> bool {
    let off = std::env::var(LAUNCH_AHEAD_ENV).is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "off" | "false"));
    cfg!(feature = "cuda") && device.is_cuda() && sampler.is_greedy() && !off
}

/// How the sampled ids of a step reach the host.
enum IdReader {
    /// `to_vec1` when asked: waits for everything enqueued before it.
    Sync(std::collections::VecDeque<Tensor>),
    /// Asynchronous copies into page-locked memory, enqueued right after the sampling.
    #[cfg(feature = "cuda")]
    Ahead(crate::cuda::readback::IdReadback),
}

impl IdReader {
    fn new(device: &Device, batch: usize, ahead: bool) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if ahead {
            return Ok(Self::Ahead(crate::cuda::readback::IdReadback::new(device, batch)?));
        }
        let _ = (device, batch, ahead);
        Ok(Self::Sync(Default::default()))
    }

    fn start(&mut self, ids: &Tensor) -> Result<()> {
        match self {
            Self::Sync(q) => q.push_back(ids.clone()),
            #[cfg(feature = "cuda")]
            Self::Ahead(r) => r.start(ids)?,
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<Vec<u32>> {
        match self {
            Self::Sync(q) => match q.pop_front() {
                Some(t) => t.to_vec1::<u32>(),
                None => bail!("generate: no sampled ids to read"),
            },
            #[cfg(feature = "cuda")]
            Self::Ahead(r) => r.finish(),
        }
    }
}

/// Generates up to `max_new_tokens` for `batch` copies of `prompt` (independent sequences:
/// with a sampler they diverge). Stops early when every sequence produced one of `eos` (pass
/// `&[]` to always run `max_new_tokens` steps). `on_step(step, ids)` sees each step's ids.
/// The KV cache is cleared first. Sampled ids stay on the device and feed the next step; the
/// host reads a copy of them — with [`launches_ahead`], after it has launched the next step.
pub fn generate(
    model: &mut Qwen3Model,
    prompt: &[u32],
    batch: usize,
    max_new_tokens: usize,
    sampler: &mut Sampler,
    eos: &[u32],
    on_step: &mut dyn FnMut(usize, &[u32]),
) -> Result<Generation> {
    if prompt.is_empty() {
        bail!("generate: empty prompt")
    }
    model.clear_kv_cache();
    let dev = model.device().clone();
    let ahead = launches_ahead(&dev, sampler);
    let mut gen = Generation {
        tokens: vec![Vec::new(); batch],
        prompt_len: prompt.len(),
        ttft: Duration::ZERO,
        step_times: Vec::new(),
        enqueue_times: Vec::new(),
        launched_ahead: ahead,
    };
    if max_new_tokens == 0 {
        return Ok(gen);
    }
    let mut reader = IdReader::new(&dev, batch, ahead)?;
    let ids: Vec<u32> = (0..batch).flat_map(|_| prompt.iter().copied()).collect();
    let input = Tensor::from_vec(ids, (batch, prompt.len()), &dev)?;
    let t0 = Instant::now();
    let mut done = vec![false; batch];
    let mut pos = 0;
    // Forward + sampling of one step, its ids' copy started; returns the ids (on the device).
    let mut launch = |input: &Tensor, pos: &mut usize, reader: &mut IdReader| -> Result<(Tensor, Duration)> {
        let te = Instant::now();
        // The lm_head's own dtype: the sampler reads bf16 as well (no f32 cast launch).
        let logits = model.forward_logits(input, *pos)?;
        *pos += input.dim(1)?;
        let sampled = sampler.sample(&logits)?;
        reader.start(&sampled)?;
        Ok((sampled, te.elapsed()))
    };
    let (mut sampled, e0) = launch(&input, &mut pos, &mut reader)?;
    // Host enqueue time of every launched step, by step.
    let mut enqueue = vec![e0];
    let mut last = t0;
    for step in 0..max_new_tokens {
        // Ahead: step + 1 goes to the device before this step's ids are awaited (from step 1:
        // the first ids are read before anything else is launched).
        if ahead && step >= 1 && enqueue.len() < max_new_tokens {
            let (s, e) = launch(&sampled.unsqueeze(1)?, &mut pos, &mut reader)?;
            sampled = s;
            enqueue.push(e);
        }
        let host = reader.finish()?;
        let now = Instant::now();
        if step == 0 {
            gen.ttft = now - t0;
        } else {
            gen.step_times.push(now - last);
            gen.enqueue_times.push(enqueue[step]);
        }
        last = now;
        for (bi, &id) in host.iter().enumerate() {
            if !done[bi] {
                gen.tokens[bi].push(id);
                done[bi] = eos.contains(&id);
            }
        }
        on_step(step, &host);
        if done.iter().all(|d| *d) {
            break;
        }
        if enqueue.len() == step + 1 && enqueue.len() < max_new_tokens {
            let (s, e) = launch(&sampled.unsqueeze(1)?, &mut pos, &mut reader)?;
            sampled = s;
            enqueue.push(e);
        }
    }
    Ok(gen)
}

/// Agreement of two models (e.g. FP8 kernels vs the dequantized reference) over greedy steps.
#[derive(Debug, Clone, Default)]
pub struct AccuracyReport {
    /// Positions compared.
    pub steps: usize,
    /// Positions where both models have the same argmax (strict: the first maximal index).
    pub top1_agree: usize,
    /// Positions where the test model's argmax has the reference's maximal logit: equal to
    /// `top1_agree` except where the reference has an exact tie at the top (bf16 logits tie
    /// readily) and the test model picked another of the tied tokens.
    pub top1_agree_up_to_ties: usize,
    /// Largest `ref[ref top-1] − ref[test top-1]` over the disagreeing positions: how much worse
    /// the test model's choice is under the reference (0 for a tie).
    pub max_regret_at_disagreement: Option<f32>,
    /// Largest |logit_test − logit_ref| over all positions and the vocabulary.
    pub max_abs_dlogit: f32,
    /// Mean |Δlogit|.
    pub mean_abs_dlogit: f64,
    /// RMS of the reference logits (the scale to read Δlogit against).
    pub ref_logit_rms: f64,
    /// Smallest top-1 margin (top1 − top2 of the reference) among disagreeing positions.
    pub min_margin_at_disagreement: Option<f32>,
    /// The test model's greedy tokens (the sequence both models consumed).
    pub tokens: Vec<u32>,
}

impl AccuracyReport {
    /// Fraction of positions with the same argmax.
    pub fn agreement(&self) -> f64 {
        self.top1_agree as f64 / self.steps.max(1) as f64
    }

    /// Fraction of positions whose test argmax is one of the reference's maximal tokens.
    pub fn agreement_up_to_ties(&self) -> f64 {
        self.top1_agree_up_to_ties as f64 / self.steps.max(1) as f64
    }
}

/// One position of [`compare_greedy`]: `(strict agreement, agreement up to reference ties,
/// regret)` where regret = `reference[reference argmax] − reference[test argmax]` (≥ 0).
pub fn top1_outcome(test: &[f32], reference: &[f32]) -> (bool, bool, f32) {
    let (it, ir) = (argmax(test) as usize, argmax(reference) as usize);
    let regret = reference[ir] - reference[it];
    (it == ir, it == ir || regret == 0.0, regret)
}

/// Runs `prompt` then `steps - 1` greedy steps through `test`, teacher-forcing `reference`
/// with the same tokens, and compares the last-position logits at every step (a divergence
/// cannot cascade into unrelated comparisons).
pub fn compare_greedy(test: &mut Qwen3Model, reference: &mut Qwen3Model, prompt: &[u32], steps: usize) -> Result<AccuracyReport> {
    test.clear_kv_cache();
    reference.clear_kv_cache();
    let dev = test.device().clone();
    let mut next = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let mut pos = 0;
    let mut rep = AccuracyReport::default();
    let (mut sum_abs, mut sum_sq, mut count) = (0f64, 0f64, 0usize);
    for _ in 0..steps {
        let a = test.forward(&next, pos)?.squeeze(0)?.to_vec1::<f32>()?;
        let b = reference.forward(&next, pos)?.squeeze(0)?.to_vec1::<f32>()?;
        pos += next.dim(1)?;
        let ia = argmax(&a);
        rep.steps += 1;
        let (strict, up_to_ties, regret) = top1_outcome(&a, &b);
        rep.top1_agree_up_to_ties += up_to_ties as usize;
        if strict {
            rep.top1_agree += 1;
        } else {
            rep.max_regret_at_disagreement = Some(rep.max_regret_at_disagreement.map_or(regret, |r: f32| r.max(regret)));
            let mut sorted = b.clone();
            sorted.sort_by(|x, y| y.partial_cmp(x).unwrap_or(std::cmp::Ordering::Equal));
            let margin = sorted[0] - sorted[1];
            rep.min_margin_at_disagreement = Some(rep.min_margin_at_disagreement.map_or(margin, |m: f32| m.min(margin)));
        }
        for (x, y) in a.iter().zip(&b) {
            let dlt = (x - y).abs();
            rep.max_abs_dlogit = rep.max_abs_dlogit.max(dlt);
            sum_abs += dlt as f64;
            sum_sq += (*y as f64) * (*y as f64);
            count += 1;
        }
        rep.tokens.push(ia);
        next = Tensor::new(&[ia], &dev)?.unsqueeze(0)?;
    }
    rep.mean_abs_dlogit = sum_abs / count.max(1) as f64;
    rep.ref_logit_rms = (sum_sq / count.max(1) as f64).sqrt();
    Ok(rep)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

// ---------------------------------------------------------------------------------------------
// Tiny checkpoints
// ---------------------------------------------------------------------------------------------

/// Writes a random Qwen3 checkpoint for `cfg` into `dir`: `model.safetensors` (decoder linears
/// as e4m3 + f32 `weight_scale_inv` through [`quantize_weight`](crate::quant::quantize_weight),
/// except the modules in `not_convert` and `lm_head`, which stay bf16, like real `-FP8`
/// checkpoints) and `config.json` with a `quantization_config` (`fp8`, e4m3, 128×128 blocks,
/// `modules_to_not_convert`). Weights are deterministic in `seed`.
pub fn write_random_checkpoint(dir: &Path, cfg: &Qwen3Config, seed: u64, not_convert: &[&str]) -> Result<()> {
    write_checkpoint(dir, cfg, seed, not_convert, None)
}

/// Like [`write_random_checkpoint`], but a *toy language model* over byte tokens: the random
/// decoder is kept, and `lm_head` row `j` is built from the embeddings of the bytes that
/// `corpus` most often follows by `j` (a bigram table), so that the model predicts the next
/// byte of `corpus` with a realistic, confident top-1 margin instead of the near-ties of a
/// purely random model (whose top-1 is a coin flip under any perturbation). Greedy decoding
/// then prints corpus-like text. Needs `vocab_size >= 256`.
pub fn write_toy_lm_checkpoint(dir: &Path, cfg: &Qwen3Config, seed: u64, corpus: &str) -> Result<()> {
    if cfg.vocab_size < 256 || cfg.tie_word_embeddings {
        bail!("write_toy_lm_checkpoint: needs vocab_size >= 256 and an untied lm_head")
    }
    write_checkpoint(dir, cfg, seed, &[], Some(corpus))
}

/// Most frequent successor of each byte in `corpus` (bytes never seen map to the corpus' first
/// byte).
fn bigram_successors(corpus: &str) -> Vec<u8> {
    let b = corpus.as_bytes();
    let mut counts = vec![[0u32; 256]; 256];
    for w in b.windows(2) {
        counts[w[0] as usize][w[1] as usize] += 1;
    }
    (0..256)
        .map(|i| {
            let row = &counts[i];
            let (best, n) = row.iter().enumerate().max_by_key(|(j, n)| (**n, std::cmp::Reverse(*j))).unwrap();
            if *n == 0 { b.first().copied().unwrap_or(b' ') } else { best as u8 }
        })
        .collect()
}

fn write_checkpoint(dir: &Path, cfg: &Qwen3Config, seed: u64, not_convert: &[&str], corpus: Option<&str>) -> Result<()> {
    cfg.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| candle_core::Error::Msg(format!("creating {}: {e}", dir.display())))?;
    let cpu = Device::Cpu;
    let mut rng = Rng::new(seed);
    let mut ts: HashMap<String, Tensor> = HashMap::new();
    let (h, i, d) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim());
    let (hq, hkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    let normal = |rng: &mut Rng, shape: &[usize], std: f64| random_normal(shape, std, &cpu, DType::F32, rng);
    let norm_w = |rng: &mut Rng, n: usize| -> Result<Tensor> {
        let v: Vec<f32> = (0..n).map(|_| 1.0 + 0.1 * rng.normal_f32()).collect();
        Tensor::from_vec(v, n, &cpu)?.to_dtype(DType::BF16)
    };
    let embed = normal(&mut rng, &[cfg.vocab_size, h], 1.0)?.to_dtype(DType::BF16)?;
    ts.insert("model.embed_tokens.weight".into(), embed.clone());
    let out_gain = 1.0 / (cfg.num_hidden_layers.max(1) as f64).sqrt();
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let mods = [
            ("self_attn.q_proj", hq * d, h, 1.0),
            ("self_attn.k_proj", hkv * d, h, 1.0),
            ("self_attn.v_proj", hkv * d, h, 1.0),
            ("self_attn.o_proj", h, hq * d, out_gain),
            ("mlp.gate_proj", i, h, 1.0),
            ("mlp.up_proj", i, h, 1.0),
            ("mlp.down_proj", h, i, out_gain),
        ];
        for (name, n, k, gain) in mods {
            let full = format!("{p}.{name}");
            let w = normal(&mut rng, &[n, k], gain / (k as f64).sqrt())?;
            if not_convert.iter().any(|m| full == *m || full.ends_with(&format!(".{m}")) || name.ends_with(m)) {
                ts.insert(format!("{full}.weight"), w.to_dtype(DType::BF16)?);
            } else {
                let (q, s) = crate::quant::quantize_weight(&w)?;
                ts.insert(format!("{full}.weight"), q);
                ts.insert(format!("{full}.weight_scale_inv"), s);
            }
            if cfg.attention_bias && name.starts_with("self_attn.") && name != "self_attn.o_proj" {
                ts.insert(format!("{full}.bias"), normal(&mut rng, &[n], 0.1)?.to_dtype(DType::BF16)?);
            }
        }
        ts.insert(format!("{p}.self_attn.q_norm.weight"), norm_w(&mut rng, d)?);
        ts.insert(format!("{p}.self_attn.k_norm.weight"), norm_w(&mut rng, d)?);
        ts.insert(format!("{p}.input_layernorm.weight"), norm_w(&mut rng, h)?);
        ts.insert(format!("{p}.post_attention_layernorm.weight"), norm_w(&mut rng, h)?);
    }
    ts.insert("model.norm.weight".into(), norm_w(&mut rng, h)?);
    if !cfg.tie_word_embeddings {
        let noise = normal(&mut rng, &[cfg.vocab_size, h], 1.0 / (h as f64).sqrt())?;
        let lm_head = match corpus {
            None => noise,
            Some(corpus) => {
                // Row j = gain/√H · Σ_{i: succ(i) = j} e_i: the logit of succ(tok) gets ≈ gain·√(H/2)
                // from the token's own embedding in the residual stream, the rest stays ~N(0, 1).
                let succ = bigram_successors(corpus);
                let e = embed.to_dtype(DType::F32)?.to_vec2::<f32>()?;
                let mut rows = vec![vec![0f32; h]; cfg.vocab_size];
                let gain = 0.6 / (h as f32).sqrt();
                for (i, &j) in succ.iter().enumerate() {
                    for (o, x) in rows[j as usize].iter_mut().zip(&e[i]) {
                        *o += gain * x;
                    }
                }
                let signal = Tensor::from_vec(rows.concat(), (cfg.vocab_size, h), &cpu)?;
                (signal + (noise * 0.5)?)?
            }
        };
        ts.insert("lm_head.weight".into(), lm_head.to_dtype(DType::BF16)?);
    }
    candle_core::safetensors::save(&ts, dir.join("model.safetensors"))?;
    let mut not_conv: Vec<String> = vec!["lm_head".into()];
    not_conv.extend(not_convert.iter().map(|s| s.to_string()));
    let mut json = serde_json::to_value(cfg).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let obj = json.as_object_mut().unwrap();
    obj.insert("architectures".into(), serde_json::json!(["Qwen3ForCausalLM"]));
    obj.insert("model_type".into(), serde_json::json!("qwen3"));
    obj.insert("torch_dtype".into(), serde_json::json!("bfloat16"));
    obj.insert(
        "quantization_config".into(),
        serde_json::json!({
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": not_conv,
        }),
    );
    obj.insert("candle_fp8_tokenizer".into(), serde_json::json!("bytes"));
    let text = serde_json::to_string_pretty(&json).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    std::fs::write(dir.join("config.json"), text).map_err(|e| candle_core::Error::Msg(format!("writing config.json: {e}")))?;
    Ok(())
}
