//! [`DecoderModel`]: the decoder-only transformer of the supported families on
//! [`Fp8BlockLinear`] (or dense) layers, with a KV cache and last-position (or every-position)
//! logits.

use std::sync::Arc;

use super::config::DecoderConfig;
use super::kv_cache::KvCache;
use super::layer::{causal_mask, flash_prefill_applies, linear_bytes, to_mode, DecoderLayer, Dims, Mlp, Proj, SwiGlu};
use super::moe::Fp8MoeExperts;
use super::options::{LinearMode, ModelOptions};
use super::rope::rope_tables;
use super::tp::{layer_to_device, linear_to_device, shard_layer, VocabShard};
use crate::checkpoint::{Checkpoint, GgufCheckpoint};
use crate::collective::Collective;
use crate::dispatch::PrefillKernel;
use crate::dispatch::Provider;
use crate::format::{f32_to_e4m3, num_blocks, BLOCK};
use crate::linear::{AnyLinear, Fp8BlockLinear};
use crate::ops::Unreduced;
use crate::shard::move_to;
use candle_core::{bail, DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};

/// A decoder-only transformer (Llama, Qwen2, Qwen3 or Qwen3-MoE, see [`super::Family`]) with
/// blocked-FP8 (or dequantized dense) linear layers, a KV cache and logits of the last position.
///
/// Per layer on the decode path: RMSNorm, one fused q/k/v GEMM, (Qwen3) an RMSNorm over every q
/// and k head, RoPE, the KV-cache append, grouped-query attention (the query heads of one kv
/// head folded into rows, K/V never repeated), the o GEMM, a residual add, RMSNorm, one fused
/// gate/up GEMM, SiLU·up and the down GEMM. With FP8 linears the residual add + RMSNorm +
/// quantization and SiLU·up + quantization run as one step each (one launch on CUDA), and each
/// layer's last residual add moves into the next layer's input norm; on CUDA sm_90 a decode step
/// (head_dim 64 or 128) runs its attention as one kernel, which at head_dim 128 also writes the
/// o projection's quantized operand ([`ModelOptions::fused_kernels`]). A Qwen3-MoE layer's MLP is a
/// [`Fp8MoeExperts`] (router, top-k, the experts' gate/up and down as grouped GEMMs with SiLU·up
/// between them, weighted scatter-add); the fused elementwise steps skip those layers.
#[derive(Debug, Clone)]
pub struct DecoderModel {
    cfg: DecoderConfig,
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
    fused: bool,
    prefill_chunk: usize,
    prefill_attention: PrefillKernel,
    /// Tensor parallelism: this rank's group (`None`: the whole model on one device).
    tp: Option<Arc<dyn Collective>>,
    /// This rank's range of a vocab-parallel embedding and lm_head (`None`: whole).
    vocab: Option<VocabShard>,
    /// Whether [`DecoderModel::shard`] splits the embedding and lm_head over the vocabulary
    /// ([`ModelOptions::vocab_parallel`]).
    vocab_parallel: bool,
}

/// Most elements of one prefill pass's attention scores `[B, heads, T, cached + T]`: candle's
/// kernels index elements with 32 bits (a 2³²-element tensor fails to launch).
const MAX_SCORE_ELEMENTS: usize = 1 << 31;

/// The prefill passes `(offset, tokens)` of `t` new tokens after `offset` cached ones for
/// `b` sequences of `heads` query heads: at most `chunk` tokens each, fewer where the scores
/// `b · heads · tokens · (cached + tokens)` would reach [`MAX_SCORE_ELEMENTS`] (at least one
/// token per pass). `heads == 0`: the attention holds no score tensor (the flash prefill
/// kernel), only `chunk` bounds a pass.
pub(crate) fn prefill_passes(b: usize, heads: usize, t: usize, offset: usize, chunk: usize) -> Vec<(usize, usize)> {
    let mut passes = Vec::new();
    let (mut done, rows) = (0, b * heads);
    while done < t {
        let start = offset + done;
        let mut n = chunk.max(1).min(t - done);
        while rows > 0 && n > 1 && rows * n * (start + n) >= MAX_SCORE_ELEMENTS {
            n = (n / 2).max(1);
        }
        passes.push((start, n));
        done += n;
    }
    passes
}

/// Where the model's tensors come from while building it.
enum Source<'a> {
    Checkpoint { vb: VarBuilder<'a>, is_quantized: &'a dyn Fn(&str) -> bool },
    Random { rng: Box<StdRng> },
}

/// Standard deviation of e4m3 codes drawn uniformly over [-448, 448] (≈ 448/√3).
const E4M3_UNIFORM_STD: f64 = 258.6;

impl Source<'_> {
    /// A linear layer `prefix` `[out, in]`.
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &mut self,
        prefix: &str,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
        gain: f64,
        device: &Device,
        dtype: DType,
    ) -> Result<AnyLinear> {
        match self {
            Self::Checkpoint { vb, is_quantized } => {
                let vb = vb.pp(prefix);
                let has_scales = vb.contains_tensor("weight_scale_inv");
                let quantized = is_quantized(&vb.prefix()) && has_scales;
                if !quantized && has_scales {
                    bail!("{}: has weight_scale_inv but quantization_config lists it as not converted", vb.prefix())
                }
                AnyLinear::load(vb.set_dtype(dtype), in_dim, out_dim, bias, quantized)
            }
            Self::Random { rng } => {
                if bias {
                    bail!("random weights: biases are not supported (attention_bias / a qwen2 architecture)")
                }
                Ok(AnyLinear::Fp8(random_fp8(out_dim, in_dim, gain, device, rng)?))
            }
        }
    }

    /// Random weights on a GPU, projections fused: the parts of output widths `outs`
    /// (multiples of 128) sharing one input of width `in_dim`, generated as one FP8 layer —
    /// what [`Proj::build`] makes of the parts, without the parts and their concatenation as
    /// device transients. `None` elsewhere.
    fn random_fused(
        &mut self,
        in_dim: usize,
        outs: &[usize],
        bias: bool,
        fuse: bool,
        device: &Device,
    ) -> Result<Option<Fp8BlockLinear>> {
        let Self::Random { rng } = self else {
            return Ok(None);
        };
        if !fuse || bias || device.is_cpu() || outs.len() < 2 || outs.iter().any(|o| o % BLOCK != 0) {
            return Ok(None);
        }
        random_fp8(outs.iter().sum(), in_dim, 1.0, device, rng).map(Some)
    }

    /// A mixture-of-experts router `prefix` `[experts, hidden]` as f32: loaded dense (checkpoints
    /// keep it unquantized; an FP8 one is dequantized), or random N(0, 1/hidden).
    fn router(&mut self, prefix: &str, hidden: usize, experts: usize, device: &Device) -> Result<Tensor> {
        match self {
            Self::Checkpoint { .. } => match self.linear(prefix, hidden, experts, false, 1.0, device, DType::F32)? {
                AnyLinear::Dense(d) => d.weight().to_dtype(DType::F32),
                AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) => f.dequantize(),
            },
            Self::Random { rng } => {
                random_normal((experts, hidden), 1.0 / (hidden as f64).sqrt(), device, DType::F32, rng)
            }
        }
    }

    /// A 1-D norm weight (ones for random weights).
    fn norm(&mut self, name: &str, dim: usize, device: &Device, dtype: DType) -> Result<Tensor> {
        match self {
            Self::Checkpoint { vb, .. } => vb.get_with_hints_dtype(dim, name, Default::default(), dtype),
            Self::Random { .. } => Tensor::ones(dim, dtype, device),
        }
    }
}

/// Uniform in `[-1, 1)`.
fn uniform_pm1(rng: &mut StdRng) -> f32 {
    rng.random_range(-1.0f32..1.0)
}

/// Standard normal (Box–Muller).
fn normal(rng: &mut StdRng) -> f32 {
    let u1: f64 = rng.random::<f64>().max(1e-300);
    let u2: f64 = rng.random();
    ((-2.0f64 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

fn random_fp8(n: usize, k: usize, gain: f64, device: &Device, rng: &mut StdRng) -> Result<Fp8BlockLinear> {
    let base = gain / (E4M3_UNIFORM_STD * (k as f64).sqrt());
    let w = if device.is_cpu() {
        let v: Vec<crate::F8E4M3> = (0..n * k).map(|_| f32_to_e4m3(uniform_pm1(rng) * 448.0)).collect();
        Tensor::from_vec(v, (n, k), device)?
    } else {
        // Uniform f32 values through the activation quantizer (candle has no e4m3 cast on
        // CUDA), in row chunks: each group's scale is ≈ 1, so the codes are uniform e4m3 values
        // and the group scales are dropped.
        let out = Tensor::zeros((n, k), DType::F8E4M3, device)?;
        let chunk = ((64usize << 20) / k.max(1)).max(1);
        let mut r0 = 0;
        while r0 < n {
            let r = chunk.min(n - r0);
            let (q, _) = crate::quant::quantize_activation(&Tensor::rand(-448f32, 448f32, (r, k), device)?)?;
            out.slice_set(&q, 0, r0)?;
            r0 += r;
        }
        out
    };
    let (nb, kb) = (num_blocks(n), num_blocks(k));
    // Block scales vary log-uniformly over [base/√2, base·√2], so that a wrong scale index
    // changes the output.
    let s: Vec<f32> =
        (0..nb * kb).map(|_| (base * (uniform_pm1(rng).abs() as f64 * 0.5f64.ln().abs() / 2.0).exp()) as f32).collect();
    Fp8BlockLinear::new(w, Tensor::from_vec(s, (nb, kb), device)?, None)
}

fn random_normal(shape: (usize, usize), std: f64, device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Tensor> {
    if device.is_cpu() {
        let v: Vec<f32> = (0..shape.0 * shape.1).map(|_| normal(rng) * std as f32).collect();
        return Tensor::from_vec(v, shape, device)?.to_dtype(dtype);
    }
    // On the device in row chunks, so that a large table never holds a full f32 copy.
    let (rows, cols) = shape;
    let chunk = ((32usize << 20) / cols.max(1)).max(1);
    if chunk >= rows {
        return Tensor::randn(0f32, std as f32, shape, device)?.to_dtype(dtype);
    }
    let out = Tensor::zeros(shape, dtype, device)?;
    let mut r0 = 0;
    while r0 < rows {
        let r = chunk.min(rows - r0);
        out.slice_set(&Tensor::randn(0f32, std as f32, (r, cols), device)?.to_dtype(dtype)?, 0, r0)?;
        r0 += r;
    }
    Ok(out)
}

impl DecoderModel {
    /// Loads the model from a checkpoint `VarBuilder` (root of the checkpoint: names
    /// `model.layers.N...`, `lm_head.weight`). `is_quantized(module_path)` follows
    /// `quantization_config.modules_to_not_convert`; a module also loads dense when it has no
    /// `weight_scale_inv`.
    pub fn load(
        cfg: &DecoderConfig,
        vb: VarBuilder,
        is_quantized: &dyn Fn(&str) -> bool,
        opts: &ModelOptions,
    ) -> Result<Self> {
        Self::load_with_progress(cfg, vb, is_quantized, opts, &mut |_, _| {})
    }

    /// [`DecoderModel::load`] calling `progress(done_layers, total_layers)` as layers load.
    pub fn load_with_progress(
        cfg: &DecoderConfig,
        vb: VarBuilder,
        is_quantized: &dyn Fn(&str) -> bool,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let device = vb.device().clone();
        Self::build(cfg, &device, Source::Checkpoint { vb, is_quantized }, opts, progress)
    }

    /// Loads the model of an opened checkpoint onto `device`: its `config.json`, its weights
    /// (FP8 where the checkpoint quantized them) in the activation dtype of `opts`. With
    /// [`ModelOptions::tensor_parallel`], rank `comm.rank()`'s share of it: each layer is read on
    /// the host, cut there ([`DecoderModel::shard`]'s split, the same bits) and only the share is
    /// copied to `device`, so the device holds the share and nothing more.
    pub fn from_checkpoint(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let cfg = DecoderConfig::from_json(&ckpt.config_json().to_string())
            .map_err(|e| e.context(format!("{}", ckpt.dir().join("config.json").display())))?;
        // A rank's share is cut on the host (the checkpoint is memory-mapped) and only then
        // moved to its device: the device never holds more than the share.
        let home = if opts.tensor_parallel.is_some() { &Device::Cpu } else { device };
        let vb = ckpt.var_builder(opts.dtype_for(device), home);
        Self::build(&cfg, device, Source::Checkpoint { vb, is_quantized: &|p| ckpt.is_quantized(p) }, opts, progress)
    }

    /// Loads a GGUF file's model with its weights dequantized (from whatever ggml types it
    /// stores) into dense layers of the activation dtype of `opts`: the unquantized baseline of
    /// a model that is also converted to blocked FP8 (see `checkpoint::convert_gguf`).
    pub fn from_gguf(
        gguf: &GgufCheckpoint,
        device: &Device,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let cfg = gguf.decoder_config()?;
        let dtype = opts.dtype_for(device);
        let mut tensors = std::collections::HashMap::new();
        for t in gguf.tensors() {
            tensors.insert(t.hf_name.clone(), gguf.load(&t.hf_name, device)?.to_dtype(dtype)?);
        }
        let vb = VarBuilder::from_tensors(tensors, dtype, device);
        Self::load_with_progress(&cfg, vb, &|_| false, opts, progress)
    }

    /// The architecture of `cfg` with random FP8 weights generated on `device` (fast even for
    /// Qwen3-32B). Activations stay well-conditioned: each linear has output ≈ input RMS; a
    /// mixture-of-experts router is f32 N(0, 1/hidden). Timings are meaningful, text is not.
    pub fn random(cfg: &DecoderConfig, device: &Device, seed: u64, opts: &ModelOptions) -> Result<Self> {
        Self::random_with_progress(cfg, device, seed, opts, &mut |_, _| {})
    }

    /// [`DecoderModel::random`] with a progress callback.
    pub fn random_with_progress(
        cfg: &DecoderConfig,
        device: &Device,
        seed: u64,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        if !device.is_cpu() {
            device.set_seed(seed)?;
        }
        Self::build(cfg, device, Source::Random { rng: Box::new(StdRng::seed_from_u64(seed)) }, opts, progress)
    }

    /// The model of `cfg` on `device` from `src`, whose tensors are on the checkpoint
    /// `VarBuilder`'s device (or, random weights, on `device`). With
    /// [`ModelOptions::tensor_parallel`] each layer is cut to the rank's share where it was read,
    /// then moved to `device`.
    fn build(
        cfg: &DecoderConfig,
        device: &Device,
        mut src: Source,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        cfg.validate()?;
        let tp = opts.tensor_parallel.clone();
        let vocab = match &tp {
            Some(c) if c.world() > 1 && opts.vocab_parallel => Some(VocabShard::new(cfg.vocab_size, c)?),
            _ => None,
        };
        let home = match &src {
            Source::Checkpoint { vb, .. } => vb.device().clone(),
            Source::Random { .. } => device.clone(),
        };
        let to_device = !home.same_device(device);
        let dtype = opts.dtype_for(device);
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let (hq, hkv, d) = (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
        let (qkv_bias, o_bias, qk_norm) = (cfg.qkv_bias()?, cfg.o_bias()?, cfg.qk_norm()?);
        let dims = Dims { hq, hkv, d, eps: cfg.rms_norm_eps as f32, fused: opts.fused_kernels, flash_prefill: None };
        let nl = cfg.num_hidden_layers;
        let embed = match &mut src {
            Source::Checkpoint { vb, .. } => {
                vb.get_with_hints_dtype((cfg.vocab_size, h), "model.embed_tokens.weight", Default::default(), dtype)?
            }
            Source::Random { rng } => random_normal((cfg.vocab_size, h), 1.0, device, dtype, rng)?,
        };
        let embed = match &vocab {
            Some(v) => v.embedding(&embed)?,
            None => embed,
        };
        let embed = move_to(&embed, device)?;
        let fp8 = |l: AnyLinear| -> AnyLinear {
            match (l, opts.fp8) {
                (AnyLinear::Fp8(f), Some(o)) => AnyLinear::Fp8(f.with_options(&o)),
                (l, _) => l,
            }
        };
        let out_gain = 1.0 / (nl.max(1) as f64).sqrt();
        let ones = Tensor::ones(d, dtype, device)?;
        let mut layers = Vec::with_capacity(nl);
        progress(0, nl);
        for l in 0..nl {
            let p = format!("model.layers.{l}");
            let lin = |src: &mut Source, name: &str, i_, o_, b_, g| {
                src.linear(&format!("{p}.{name}"), i_, o_, b_, g, device, dtype)
            };
            let m = |x: AnyLinear| to_mode(fp8(x), opts.mode, dtype);
            // Projections sharing an input: random weights on a GPU are generated fused (one
            // buffer, no concatenation transients); otherwise part by part, then fused.
            let proj = |src: &mut Source, names: &[&str], outs: &[usize], bias: bool| -> Result<Proj> {
                if let Some(fused) = src.random_fused(h, outs, bias, opts.fuse_projections, device)? {
                    return Ok(Proj::Fused(m(AnyLinear::Fp8(fused))?, outs.to_vec()));
                }
                let parts = names
                    .iter()
                    .zip(outs)
                    .map(|(name, &o)| m(lin(src, name, h, o, bias, 1.0)?))
                    .collect::<Result<Vec<_>>>()?;
                Proj::build(parts, opts.fuse_projections)
            };
            let qkv = proj(
                &mut src,
                &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                &[hq * d, hkv * d, hkv * d],
                qkv_bias,
            )?;
            let o = lin(&mut src, "self_attn.o_proj", hq * d, h, o_bias, out_gain)?;
            let mlp = if cfg.is_moe_layer(l) {
                let (ne, ei) = (cfg.num_experts, cfg.moe_intermediate_size);
                let router = src.router(&format!("{p}.mlp.gate"), h, ne, device)?;
                let experts = (0..ne)
                    .map(|e| {
                        let names = [format!("mlp.experts.{e}.gate_proj"), format!("mlp.experts.{e}.up_proj")];
                        let gate_up = proj(&mut src, &[&names[0], &names[1]], &[ei, ei], false)?;
                        let down = m(lin(&mut src, &format!("mlp.experts.{e}.down_proj"), ei, h, false, out_gain)?)?;
                        Ok(SwiGlu { gate_up, down })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Mlp::Moe(Fp8MoeExperts::new(&router, experts, cfg.num_experts_per_tok, cfg.norm_topk_prob)?)
            } else {
                let gate_up = proj(&mut src, &["mlp.gate_proj", "mlp.up_proj"], &[i, i], false)?;
                let down = m(lin(&mut src, "mlp.down_proj", i, h, false, out_gain)?)?;
                Mlp::Dense(SwiGlu { gate_up, down })
            };
            let (q_norm, k_norm) = if qk_norm {
                (
                    src.norm(&format!("{p}.self_attn.q_norm.weight"), d, device, dtype)?,
                    src.norm(&format!("{p}.self_attn.k_norm.weight"), d, device, dtype)?,
                )
            } else {
                (ones.clone(), ones.clone())
            };
            let input_norm = src.norm(&format!("{p}.input_layernorm.weight"), h, device, dtype)?;
            let post_norm = src.norm(&format!("{p}.post_attention_layernorm.weight"), h, device, dtype)?;
            let layer = DecoderLayer {
                input_norm,
                post_norm,
                qkv,
                o: m(o)?,
                qk_norm,
                qk_weight: DecoderLayer::qk_weights(&q_norm, &k_norm, dims)?,
                mlp,
                tp: None,
            };
            // The rank's share, cut where the layer was read; the whole layer is dropped here.
            let layer = match &tp {
                Some(c) => shard_layer(&layer, l, hq, hkv, c)?,
                None => layer,
            };
            layers.push(if to_device { layer_to_device(layer, device)? } else { layer });
            progress(l + 1, nl);
        }
        let norm = move_to(&src.norm("model.norm.weight", h, device, dtype)?, device)?;
        let lm_head = if cfg.tie_word_embeddings {
            // The embedding (the rank's rows of it when vocab-parallel).
            AnyLinear::Dense(candle_nn::Linear::new(embed.clone(), None))
        } else {
            let full = match &mut src {
                Source::Checkpoint { .. } => to_mode(
                    fp8(src.linear("lm_head", h, cfg.vocab_size, false, 1.0, device, dtype)?),
                    opts.mode,
                    dtype,
                )?,
                Source::Random { rng } => AnyLinear::Dense(candle_nn::Linear::new(
                    random_normal((cfg.vocab_size, h), 1.0 / (h as f64).sqrt(), device, dtype, rng)?,
                    None,
                )),
            };
            let part = match &vocab {
                Some(v) => v.lm_head(&full)?,
                None => full,
            };
            linear_to_device(&part, device)?
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
            unit: ones,
            kv: vec![KvCache::default(); nl],
            capacity_hint: 0,
            dtype,
            device: device.clone(),
            mode: opts.mode,
            fused: opts.fused_kernels,
            prefill_chunk: opts.prefill_chunk,
            prefill_attention: opts.prefill_attention,
            tp,
            vocab,
            vocab_parallel: opts.vocab_parallel,
        })
    }

    /// A copy of this model whose FP8 linears are dequantized into dense layers of the
    /// activation dtype (the bf16 baseline: measures the FP8 format's effect), sharing the
    /// embeddings and norms. Its KV cache starts empty.
    pub fn to_dense(&self) -> Result<Self> {
        let dtype = self.dtype;
        self.map_linears(&|l| to_mode(l, LinearMode::Bf16, dtype), LinearMode::Bf16)
    }

    /// A copy of this model whose FP8 linears run [`Fp8BlockLinear::forward_reference`] (the same
    /// quantized activations and weights, dequantized and multiplied in f32) with the fused
    /// kernels off: it differs from this model only in the GEMMs and in the fused kernels' own
    /// documented roundings. It shares every weight with `self`; its KV cache starts empty.
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
                    mlp: l.mlp.clone().map(f)?,
                    ..l.clone()
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            lm_head: f(self.lm_head.clone())?,
            kv: vec![KvCache::default(); self.kv.len()],
            mode,
            ..self.clone()
        })
    }

    /// A copy of this model (sharing every weight, with an empty KV cache) whose fused decode
    /// kernels are on or off ([`ModelOptions::fused_kernels`]).
    pub fn with_fused_kernels(&self, on: bool) -> Self {
        Self { fused: on, kv: vec![KvCache::default(); self.kv.len()], ..self.clone() }
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
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

    /// Whether the fused decode kernels may run ([`ModelOptions::fused_kernels`]).
    pub fn fused_kernels(&self) -> bool {
        self.fused
    }

    /// Number of layers that take the fused elementwise path (0 with the fused kernels off).
    pub fn fused_elementwise_layers(&self) -> Result<usize> {
        if !self.fused {
            return Ok(0);
        }
        let mut n = 0;
        for l in &self.layers {
            n += l.fused_eligible()? as usize;
        }
        Ok(n)
    }

    /// Whether q/k/v and gate/up run as one GEMM each (in every layer and expert).
    pub fn projections_fused(&self) -> bool {
        self.layers.iter().all(|l| l.qkv.is_fused() && l.mlp.projections_fused())
    }

    /// The mixture-of-experts MLP of layer `layer` (`None` for a dense MLP or no such layer).
    pub fn moe_experts(&self, layer: usize) -> Option<&Fp8MoeExperts> {
        match &self.layers.get(layer)?.mlp {
            Mlp::Moe(m) => Some(m),
            Mlp::Dense(_) => None,
        }
    }

    /// Kinds of the decoder's linear layers, one string per module as loaded: `"fp8"`,
    /// `"fp8-reference"` or `"dense"`, keyed by `layer.module` (`0.qkv`, `0.o`, `0.gate_up`,
    /// `0.down`, …, `lm_head`; a mixture-of-experts layer has `1.experts.0.gate_up`,
    /// `1.experts.0.down`, … in place of the MLP's, and its f32 router is not listed). Unfused
    /// projections are numbered: `0.qkv[0]`, `0.gate_up[1]`.
    pub fn linear_kinds(&self) -> Vec<(String, &'static str)> {
        self.linears()
            .into_iter()
            .map(|(n, l)| {
                let kind = match l {
                    AnyLinear::Fp8(_) => "fp8",
                    AnyLinear::Fp8Reference(_) => "fp8-reference",
                    AnyLinear::Dense(_) => "dense",
                };
                (n, kind)
            })
            .collect()
    }

    /// The GEMM provider of every FP8 linear layer (chosen on first use), keyed as
    /// [`DecoderModel::linear_kinds`].
    pub fn fp8_providers(&self) -> Result<Vec<(String, Provider)>> {
        let mut out = Vec::new();
        for (n, l) in self.linears() {
            if let AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) = l {
                out.push((n, f.provider()?));
            }
        }
        Ok(out)
    }

    /// The decoder's linear layers as this model holds them (a tensor-parallel rank: its
    /// shares), keyed as [`DecoderModel::linear_kinds`].
    pub fn linears(&self) -> Vec<(String, &AnyLinear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            for (j, x) in l.qkv.layers().into_iter().enumerate() {
                let n = if l.qkv.is_fused() { format!("{i}.qkv") } else { format!("{i}.qkv[{j}]") };
                out.push((n, x));
            }
            out.push((format!("{i}.o"), &l.o));
            out.extend(l.mlp.linears(i));
        }
        out.push(("lm_head".into(), &self.lm_head));
        out
    }

    /// `(fp8 bytes incl. scales, dense linear bytes (MoE routers included), embedding + norm
    /// bytes)` of the weights.
    pub fn weight_bytes(&self) -> (usize, usize, usize) {
        let (mut f, mut dn) = (0, self.layers.iter().map(|l| l.mlp.router_bytes()).sum::<usize>());
        for (name, l) in self.linears() {
            if name == "lm_head" && self.cfg.tie_word_embeddings {
                continue;
            }
            let (a, b) = linear_bytes(l);
            f += a;
            dn += b;
        }
        let es = self.dtype.size_in_bytes();
        let other = self.embed.elem_count() * es + (self.layers.len() * 2 + 1) * self.cfg.hidden_size * es;
        (f, dn, other)
    }

    /// Bytes of KV cache currently allocated.
    pub fn kv_cache_bytes(&self) -> usize {
        self.kv.iter().map(|c| c.k.as_ref().map(|k| 2 * k.elem_count() * k.dtype().size_in_bytes()).unwrap_or(0)).sum()
    }

    /// Preallocation hint: the KV cache is sized for `max_seq_len` positions at the first
    /// forward (it still grows if a sequence goes beyond).
    pub fn set_kv_capacity(&mut self, max_seq_len: usize) {
        self.capacity_hint = max_seq_len;
    }

    /// Rank `comm.rank()`'s share of this model in a tensor-parallel group of `comm.world()`
    /// ranks (Megatron-style, see `src/models/tp.rs`): its query and kv heads with their q/k/v,
    /// o, gate/up and down cut at whole 128 × 128 scale blocks, the o and down outputs summed
    /// over the ranks through `comm`; norms replicated; embedding and lm_head split over the
    /// vocabulary (the model's [`ModelOptions::vocab_parallel`], default; with more than one
    /// rank) or replicated. Every rank returns the same logits. An empty KV cache. Refused,
    /// naming the layer and the sizes, when the heads or widths cannot be split evenly at block
    /// boundaries (the vocabulary: when a rank would get no 128-row block), for non-FP8 linears
    /// and for fewer experts than ranks. Mixture-of-experts layers are expert-parallel (each rank
    /// a range of whole experts, see `src/models/tp.rs`). To load a share without the whole
    /// model, see [`ModelOptions::tensor_parallel`].
    pub fn shard(&self, comm: Arc<dyn Collective>) -> Result<Self> {
        if self.tp.is_some() {
            bail!("DecoderModel::shard: the model is already a tensor-parallel shard")
        }
        let (hq, hkv) = (self.cfg.num_attention_heads, self.cfg.kv_heads());
        let layers = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| shard_layer(l, i, hq, hkv, &comm))
            .collect::<Result<Vec<_>>>()?;
        let vocab = if comm.world() > 1 && self.vocab_parallel {
            Some(VocabShard::new(self.cfg.vocab_size, &comm)?)
        } else {
            None
        };
        let (embed, lm_head) = match &vocab {
            Some(v) => {
                let embed = v.embedding(&self.embed)?;
                let lm_head = if self.cfg.tie_word_embeddings {
                    AnyLinear::Dense(candle_nn::Linear::new(embed.clone(), None))
                } else {
                    v.lm_head(&self.lm_head)?
                };
                (embed, lm_head)
            }
            None => (self.embed.clone(), self.lm_head.clone()),
        };
        Ok(Self {
            layers,
            embed,
            lm_head,
            kv: vec![KvCache::default(); self.kv.len()],
            tp: Some(comm),
            vocab,
            ..self.clone()
        })
    }

    /// This rank's rows `(start, len)` of the vocabulary in the embedding and lm_head:
    /// `(0, vocab_size)` unless they are vocab-parallel.
    pub fn vocab_range(&self) -> (usize, usize) {
        self.vocab.as_ref().map(VocabShard::range).unwrap_or((0, self.cfg.vocab_size))
    }

    /// The token embedding table as this model holds it: `[vocab, hidden]`, or this rank's rows
    /// of it ([`DecoderModel::vocab_range`]).
    pub fn embedding(&self) -> &Tensor {
        &self.embed
    }

    /// The lm_head's logits `[M, vocab]` of the final-normed `x` `[M, hidden]` (the ranks'
    /// ranges gathered when vocab-parallel).
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.lm_head.forward(x)?;
        match &self.vocab {
            Some(v) => v.gather_logits(&y),
            None => Ok(y),
        }
    }

    /// Ranks of this model's tensor-parallel group (1 without one).
    pub fn tensor_parallel_world(&self) -> usize {
        self.tp.as_ref().map(|c| c.world()).unwrap_or(1)
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
    /// sampler takes their argmax directly, without an f32 copy of `[B, vocab]`.
    pub fn forward_logits(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        let (b, t) = self.check_positions(input_ids, seqlen_offset)?;
        let mut last = None;
        for (off, n) in self.passes(input_ids, seqlen_offset)? {
            let ids = input_ids.narrow(1, off - seqlen_offset, n)?;
            let x = self.forward_hidden(&ids, off, t)?;
            last = Some(if n > 1 {
                x.reshape((b, n, self.cfg.hidden_size))?.narrow(1, n - 1, 1)?.squeeze(1)?.contiguous()?
            } else {
                x
            });
        }
        let x = last.expect("at least one prefill pass");
        let x = candle_nn::ops::rms_norm(&x, &self.norm, self.cfg.rms_norm_eps as f32)?;
        self.head(&x)
    }

    /// The logits of every position, f32 `[B, T, vocab]` (for evaluation: perplexity, KL).
    pub fn forward_all(&mut self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Tensor> {
        let (b, t) = self.check_positions(input_ids, seqlen_offset)?;
        let mut parts = Vec::new();
        for (off, n) in self.passes(input_ids, seqlen_offset)? {
            let ids = input_ids.narrow(1, off - seqlen_offset, n)?;
            let x = self.forward_hidden(&ids, off, t)?;
            let x = candle_nn::ops::rms_norm(&x, &self.norm, self.cfg.rms_norm_eps as f32)?;
            parts.push(self.head(&x)?.to_dtype(DType::F32)?.reshape((b, n, self.cfg.vocab_size))?);
        }
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        Tensor::cat(&parts, 1)
    }

    /// `(B, T)` of `input_ids`, refused before any device work when empty or when the positions
    /// run past the model's `max_position_embeddings` (naming both numbers).
    fn check_positions(&self, input_ids: &Tensor, seqlen_offset: usize) -> Result<(usize, usize)> {
        let (b, t) = input_ids.dims2()?;
        if t == 0 || b == 0 {
            bail!("decoder: input_ids must be non-empty, got shape [{b}, {t}]")
        }
        let max = self.cos.dim(0)?;
        if seqlen_offset + t > max {
            bail!(
                "decoder: positions up to {} exceed the model's max_position_embeddings {max} ({} cached + {t} new)",
                seqlen_offset + t,
                seqlen_offset
            )
        }
        Ok((b, t))
    }

    /// The prefill passes of `input_ids` after `seqlen_offset` cached positions ([`prefill_passes`]).
    fn passes(&self, input_ids: &Tensor, seqlen_offset: usize) -> Result<Vec<(usize, usize)>> {
        let (b, t) = input_ids.dims2()?;
        let score_heads = if self.flash_prefill() { 0 } else { self.cfg.num_attention_heads };
        Ok(prefill_passes(b, score_heads, t, seqlen_offset, self.prefill_chunk))
    }

    /// Whether prompts (more than one token per pass) take the flash prefill attention kernel:
    /// fused kernels on ([`ModelOptions::fused_kernels`]), CUDA sm_90, bf16 activations,
    /// head_dim 64 or 128. It holds no `T × T` score tensor; otherwise the candle ops do (in
    /// passes small enough for their 32-bit indexing).
    pub fn flash_prefill(&self) -> bool {
        self.fused && flash_prefill_applies(&self.device, self.dtype, self.cfg.head_dim())
    }

    /// The final residual stream `[B·T, hidden]` (before the last norm) of one pass; `reserve`:
    /// the tokens of the whole prompt, for the KV caches of a new sequence.
    fn forward_hidden(&mut self, input_ids: &Tensor, seqlen_offset: usize, reserve: usize) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        let cfg = &self.cfg;
        let world = self.tensor_parallel_world();
        let dims = Dims {
            hq: cfg.num_attention_heads / world,
            hkv: cfg.kv_heads() / world,
            d: cfg.head_dim(),
            eps: cfg.rms_norm_eps as f32,
            fused: self.fused,
            flash_prefill: self.flash_prefill().then_some(self.prefill_attention),
        };
        if seqlen_offset == 0 {
            // A new sequence: every layer's KV cache first, so that the caches do not share
            // memory-pool chunks with the prefill's transient activations (a chunk with one live
            // cache in it cannot go back to the device after the prefill).
            for c in &mut self.kv {
                c.reserve((b, dims.hkv, reserve, dims.d), self.dtype, &self.device, 0, self.capacity_hint)?;
            }
        }
        let ids = input_ids.to_device(&self.device)?.to_dtype(DType::U32)?.flatten_all()?;
        let mut x = match &self.vocab {
            Some(v) => v.lookup(&self.embed, &ids)?,
            None => self.embed.index_select(&ids, 0)?,
        }; // [B*T, H]
        let cos = self.cos.narrow(0, seqlen_offset, t)?;
        let sin = self.sin.narrow(0, seqlen_offset, t)?;
        let mask = if t > 1 && dims.flash_prefill.is_none() {
            Some(causal_mask(t, seqlen_offset, dims.hq / dims.hkv, &self.device, self.dtype)?)
        } else {
            None
        };
        let hint = self.capacity_hint;
        // A fused layer leaves its MLP output pending: the next layer adds it in its input norm.
        let mut pending: Option<Unreduced> = None;
        for (layer, cache) in self.layers.iter().zip(self.kv.iter_mut()) {
            let rope = (&cos, &sin);
            let (nx, p) = layer.forward(
                &x,
                pending.as_ref(),
                self.fused,
                b,
                t,
                seqlen_offset,
                rope,
                mask.as_ref(),
                &self.unit,
                cache,
                hint,
                dims,
            )?;
            (x, pending) = (nx, p);
        }
        if let Some(p) = pending {
            let p = p.reduce()?.to_dtype(x.dtype())?;
            x = (x + p)?;
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pass stays below the element limit, the passes tile the prompt in order, and
    /// short prompts stay one pass.
    #[test]
    fn prefill_passes_tile_the_prompt_below_the_element_limit() {
        // Qwen3-32B (64 query heads): 8,192 and 40,960 tokens, batch 1 and 4, after 0 or 1,000
        // cached tokens.
        for (b, t, offset) in [(1, 8192, 0), (1, 40960, 0), (4, 8192, 1000), (1, 100, 0), (16, 100, 0)] {
            let passes = prefill_passes(b, 64, t, offset, 1024);
            let mut next = offset;
            for &(start, n) in &passes {
                assert_eq!(start, next, "passes in order, without gaps");
                assert!((1..=1024).contains(&n));
                assert!(b * 64 * n * (start + n) < MAX_SCORE_ELEMENTS, "b {b} t {t}: pass ({start}, {n})");
                next += n;
            }
            assert_eq!(next, offset + t);
        }
        assert_eq!(prefill_passes(1, 64, 100, 0, 1024), vec![(0, 100)]);
        // No score tensor (the flash prefill kernel): only the chunk bounds a pass.
        let flash = prefill_passes(1, 0, 40960, 0, 1024);
        assert_eq!(flash.len(), 40);
        assert!(flash.iter().enumerate().all(|(i, &(o, n))| o == 1024 * i && n == 1024));
        assert_eq!(prefill_passes(1, 8, 10, 5, 4), vec![(5, 4), (9, 4), (13, 2)]);
        // One token per pass at worst, never zero.
        assert_eq!(prefill_passes(1 << 20, 1 << 10, 2, 0, 8), vec![(0, 1), (1, 1)]);
    }
}
