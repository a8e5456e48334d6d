//! One decoder layer: the attention block (q/k/v, optional q/k RMSNorm, RoPE, KV cache, grouped
//! query attention, o) and the MLP (dense SwiGLU, or a mixture of SwiGLU experts), on the
//! composed candle ops or the fused decode path.

use std::sync::Arc;

use super::kv_cache::KvCache;
use super::moe::Fp8MoeExperts;
use super::options::LinearMode;
use crate::collective::Collective;
use crate::dispatch::PrefillKernel;
use crate::linear::{AnyLinear, Fp8BlockLinear};
use crate::ops::Unreduced;
use candle_core::{bail, DType, Device, Module, Result, Tensor, D};

/// Token counts at which the fused MLP runs SiLU·up in the gate/up GEMM's epilogue (faster there
/// than its own launch; slower at 1-8 tokens, see docs/perf.md).
const SWIGLU_EPILOGUE_TOKENS: std::ops::RangeInclusive<usize> = 9..=16;

pub(crate) fn to_mode(l: AnyLinear, mode: LinearMode, dtype: DType) -> Result<AnyLinear> {
    match (l, mode) {
        (AnyLinear::Fp8(f), LinearMode::Bf16) => Ok(AnyLinear::Dense(f.to_dense(dtype)?)),
        (AnyLinear::Dense(d), _) if d.weight().dtype() != dtype => {
            let b = d.bias().map(|b| b.to_dtype(dtype)).transpose()?;
            Ok(AnyLinear::Dense(candle_nn::Linear::new(d.weight().to_dtype(dtype)?, b)))
        }
        (l, _) => Ok(l),
    }
}

/// Projections that share their input: either one fused GEMM whose output is split along N, or
/// one layer per part.
#[derive(Debug, Clone)]
pub(crate) enum Proj {
    Fused(AnyLinear, Vec<usize>),
    Split(Vec<AnyLinear>),
}

impl Proj {
    /// Fuses `parts` when `fuse` and possible (all FP8 with 128-aligned N except the last, or
    /// all dense of one dtype), else keeps them split.
    pub(crate) fn build(parts: Vec<AnyLinear>, fuse: bool) -> Result<Self> {
        let sizes: Vec<usize> = parts.iter().map(AnyLinear::out_dim).collect();
        if !fuse || parts.len() < 2 {
            return Ok(Self::Split(parts));
        }
        let fp8: Vec<&Fp8BlockLinear> =
            parts.iter().filter_map(|p| if let AnyLinear::Fp8(f) = p { Some(f) } else { None }).collect();
        if fp8.len() == parts.len() {
            return match Fp8BlockLinear::concat(&fp8) {
                Ok(f) => Ok(Self::Fused(AnyLinear::Fp8(f), sizes)),
                Err(e) => {
                    tracing::info!("candle-fp8: keeping projections unfused: {e}");
                    Ok(Self::Split(parts))
                }
            };
        }
        let dense: Vec<&candle_nn::Linear> =
            parts.iter().filter_map(|p| if let AnyLinear::Dense(d) = p { Some(d) } else { None }).collect();
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

    pub(crate) fn is_fused(&self) -> bool {
        matches!(self, Self::Fused(..))
    }

    pub(crate) fn map(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        Ok(match self {
            Self::Fused(l, s) => Self::Fused(f(l)?, s),
            Self::Split(ls) => Self::Split(ls.into_iter().map(f).collect::<Result<_>>()?),
        })
    }

    pub(crate) fn layers(&self) -> Vec<&AnyLinear> {
        match self {
            Self::Fused(l, _) => vec![l],
            Self::Split(ls) => ls.iter().collect(),
        }
    }
}

/// A SwiGLU MLP, `down(silu(gate(x)) · up(x))`: a dense layer's MLP, or one expert of a
/// mixture of experts.
#[derive(Debug, Clone)]
pub(crate) struct SwiGlu {
    /// gate and up (`[gate | up]` when fused).
    pub(crate) gate_up: Proj,
    pub(crate) down: AnyLinear,
}

impl SwiGlu {
    /// The MLP on the composed candle ops: `x` `[M, hidden]` → `[M, hidden]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gu = self.gate_up.forward(x)?;
        let a = (candle_nn::ops::silu(&gu[0])? * &gu[1])?;
        self.down.forward(&a)
    }

    pub(crate) fn map(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        Ok(Self { gate_up: self.gate_up.map(f)?, down: f(self.down)? })
    }

    /// `(name, layer)` of its linears: `{prefix}.gate_up` (or `{prefix}.gate_up[j]` unfused) and
    /// `{prefix}.down`.
    pub(crate) fn linears(&self, prefix: &str) -> Vec<(String, &AnyLinear)> {
        let mut out: Vec<(String, &AnyLinear)> = self
            .gate_up
            .layers()
            .into_iter()
            .enumerate()
            .map(|(j, l)| {
                let n = if self.gate_up.is_fused() {
                    format!("{prefix}.gate_up")
                } else {
                    format!("{prefix}.gate_up[{j}]")
                };
                (n, l)
            })
            .collect();
        out.push((format!("{prefix}.down"), &self.down));
        out
    }
}

/// A layer's MLP.
#[derive(Debug, Clone)]
pub(crate) enum Mlp {
    /// One SwiGLU MLP for every token.
    Dense(SwiGlu),
    /// A router and SwiGLU experts (Qwen3-MoE).
    Moe(Fp8MoeExperts),
}

impl Mlp {
    /// The MLP on the composed candle ops: `x` `[M, hidden]` → `[M, hidden]`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Dense(m) => m.forward(x),
            Self::Moe(m) => m.forward(x),
        }
    }

    pub(crate) fn map(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        Ok(match self {
            Self::Dense(m) => Self::Dense(m.map(f)?),
            Self::Moe(m) => Self::Moe(m.map_linears(f)?),
        })
    }

    /// Whether gate and up run as one GEMM (in every expert).
    pub(crate) fn projections_fused(&self) -> bool {
        match self {
            Self::Dense(m) => m.gate_up.is_fused(),
            Self::Moe(m) => m.experts().iter().all(|e| e.gate_up.is_fused()),
        }
    }

    /// `(name, layer)` of its linears, named under layer `layer`: `{layer}.gate_up`,
    /// `{layer}.down`; experts `{layer}.experts.{e}.gate_up`, `{layer}.experts.{e}.down` (the
    /// router, f32, is not among them).
    pub(crate) fn linears(&self, layer: usize) -> Vec<(String, &AnyLinear)> {
        match self {
            Self::Dense(m) => m.linears(&layer.to_string()),
            Self::Moe(m) => {
                m.experts().iter().enumerate().flat_map(|(e, x)| x.linears(&format!("{layer}.experts.{e}"))).collect()
            }
        }
    }

    /// Bytes of the MoE router's weight (0 for a dense MLP).
    pub(crate) fn router_bytes(&self) -> usize {
        match self {
            Self::Dense(_) => 0,
            Self::Moe(m) => m.router_bytes(),
        }
    }
}

/// Bytes held by a linear layer's weights: `(fp8 bytes incl. scales, dense bytes)`.
pub(crate) fn linear_bytes(l: &AnyLinear) -> (usize, usize) {
    match l {
        AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) => {
            (f.weight().elem_count() + f.weight_scale_inv().elem_count() * 4, 0)
        }
        AnyLinear::Dense(d) => (0, d.weight().elem_count() * d.weight().dtype().size_in_bytes()),
    }
}

/// One decoder layer's weights.
#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    pub(crate) input_norm: Tensor,
    pub(crate) post_norm: Tensor,
    pub(crate) qkv: Proj,
    pub(crate) o: AnyLinear,
    /// Whether q and k heads are RMS-normalised (Qwen3).
    pub(crate) qk_norm: bool,
    /// `[q_heads + kv_heads, head_dim]`: see [`DecoderLayer::qk_weights`].
    pub(crate) qk_weight: Tensor,
    pub(crate) mlp: Mlp,
    /// Tensor parallelism: this rank's group, which sums the o and down projections' partial
    /// outputs (`None`: one rank, nothing to sum; see `super::tp`).
    pub(crate) tp: Option<Arc<dyn Collective>>,
}

/// Shapes shared by every layer's forward.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub(crate) hq: usize,
    pub(crate) hkv: usize,
    pub(crate) d: usize,
    pub(crate) eps: f32,
    /// The fused decode kernels may run ([`super::ModelOptions::fused_kernels`]).
    pub(crate) fused: bool,
    /// Prompts (T > 1) take this flash prefill attention kernel (`None`: the candle ops; see
    /// [`flash_prefill_applies`]).
    pub(crate) flash_prefill: Option<PrefillKernel>,
}

impl DecoderLayer {
    /// The per-head weights `[q_heads + kv_heads, head_dim]` applied to q and k after their
    /// (optional) RMSNorm: `q_norm` (or ones) times the attention scale `1/sqrt(head_dim)` on
    /// the q rows, `k_norm` (or ones) on the k rows.
    pub(crate) fn qk_weights(q_norm: &Tensor, k_norm: &Tensor, dims: Dims) -> Result<Tensor> {
        let scale = 1.0 / (dims.d as f64).sqrt();
        let dt = q_norm.dtype();
        let q = (q_norm.to_dtype(DType::F32)? * scale)?.unsqueeze(0)?.broadcast_as((dims.hq, dims.d))?;
        let k = k_norm.to_dtype(DType::F32)?.unsqueeze(0)?.broadcast_as((dims.hkv, dims.d))?;
        Tensor::cat(&[&q, &k], 0)?.to_dtype(dt)?.contiguous()
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
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
        let fused = if dims.fused && t == 1 {
            self.decode_attention_fused(&xn, b, offset, rope, cache, capacity_hint, dims)?
        } else if dims.flash_prefill.is_some() && t > 1 {
            Some(self.prefill_attention_flash(&xn, b, t, offset, rope, cache, capacity_hint, dims)?)
        } else {
            None
        };
        let attn = match fused {
            Some(o) => o,
            None => Unreduced::Done(self.o.forward(&self.attention(
                &xn,
                b,
                t,
                offset,
                rope,
                mask,
                unit,
                cache,
                capacity_hint,
                dims,
            )?)?),
        };
        let attn = self.all_reduce(attn)?;
        if fe {
            return self.mlp_fused(&x, &attn, eps);
        }
        let x = (x + attn.reduce()?)?;

        // MLP.
        let xn = candle_nn::ops::rms_norm(&x, &self.post_norm, eps)?;
        let y = match (&self.mlp, &self.tp) {
            // Expert-parallel: the ranks' f32 partials are summed before the cast.
            (Mlp::Moe(m), Some(c)) if c.world() > 1 => {
                c.all_reduce_sum(&m.forward_f32(&xn, true)?)?.to_dtype(xn.dtype())?.reshape(xn.dims())?
            }
            _ => self.all_reduce(Unreduced::Done(self.mlp.forward(&xn)?))?.reduce()?,
        };
        Ok(((x + y)?, None))
    }

    /// A row-parallel projection's output summed over the tensor-parallel ranks (its split-K
    /// partials first); unchanged on one rank (nothing to add: the same bits as without a group).
    fn all_reduce(&self, u: Unreduced) -> Result<Unreduced> {
        match &self.tp {
            Some(c) if c.world() > 1 => Ok(Unreduced::Done(c.all_reduce_sum(&u.reduce()?)?)),
            _ => Ok(u),
        }
    }

    /// Whether the fused elementwise path applies: a dense MLP (mixture-of-experts layers take
    /// the composed path), every linear of the layer FP8 with a provider that quantizes
    /// activations, q/k/v and gate/up each one GEMM, gate and up of equal width.
    pub(crate) fn fused_eligible(&self) -> Result<bool> {
        let quantizing = |l: &AnyLinear| match l {
            AnyLinear::Fp8(f) => f.quantizes_activations(),
            _ => Ok(false),
        };
        let Mlp::Dense(SwiGlu { gate_up, down }) = &self.mlp else {
            return Ok(false);
        };
        match (&self.qkv, gate_up) {
            (Proj::Fused(qkv, _), Proj::Fused(gu, sizes)) if sizes.len() == 2 && sizes[0] == sizes[1] => {
                Ok(quantizing(qkv)? && quantizing(gu)? && quantizing(down)?)
            }
            _ => Ok(false),
        }
    }

    /// `(residual stream, input of the q/k/v GEMM)`: `x` plus the previous layer's `pending`
    /// MLP output, then the input RMSNorm. Fused: one [`add_rmsnorm_quantize`] (one launch on
    /// CUDA) that also quantizes for the GEMM.
    ///
    /// [`add_rmsnorm_quantize`]: crate::ops::add_rmsnorm_quantize
    fn input_normed(&self, x: &Tensor, pending: Option<&Unreduced>, fused: bool, eps: f32) -> Result<(Tensor, Normed)> {
        if fused {
            // With a pending MLP output, the previous launch is the down GEMM and x the residual
            // stream written by the post-attention norm three launches back: settled (loaded
            // before the kernel waits). Without one, x may be the embedding just computed.
            let settled = pending.is_some();
            let (sum, qa, sa) =
                crate::ops::add_rmsnorm_quantize_unreduced_with(x, pending, &self.input_norm, eps, settled)?;
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
    fn mlp_fused(&self, x: &Tensor, o: &Unreduced, eps: f32) -> Result<(Tensor, Option<Unreduced>)> {
        let Mlp::Dense(SwiGlu { gate_up: Proj::Fused(AnyLinear::Fp8(gate_up), _), down: AnyLinear::Fp8(down) }) =
            &self.mlp
        else {
            bail!("decoder: the fused MLP path needs a dense MLP with FP8 gate/up (one GEMM) and down layers")
        };
        let dtype = x.dtype();
        // x (the layer's input residual stream) was written before the q/k/v GEMM and the
        // previous launch is the o GEMM: settled, loaded before the kernel waits.
        let (sum, qa, sa) = crate::ops::add_rmsnorm_quantize_unreduced_with(x, Some(o), &self.post_norm, eps, true)?;
        let x = sum.ok_or_else(|| candle_core::Error::Msg("add_rmsnorm_quantize returned no sum".into()))?;
        let (qa, sa) = if SWIGLU_EPILOGUE_TOKENS.contains(&qa.dim(0)?) && dtype == DType::BF16 {
            // SiLU·up and the quantization in the gate/up GEMM's epilogue: one launch on our
            // kernels (the same bits as the two steps below), faster at 9-16 tokens only.
            gate_up.forward_swiglu_quantized(&qa, &sa)?
        } else {
            let gu = gate_up.forward_quantized(&qa, &sa)?.to_dtype(dtype)?;
            crate::ops::swiglu_quantize(&gu)?
        };
        // The down projection's split-K partials (if any) are added by the next input norm.
        let d = self.all_reduce(down.forward_quantized_unreduced(&qa, &sa)?)?;
        let d = if dtype == DType::BF16 { d } else { Unreduced::Done(d.reduce()?.to_dtype(dtype)?) };
        Ok((x, Some(d)))
    }

    /// The q/k/v projection's output `[M, (hq + 2·hkv)·d]`: q, k and v heads side by side, as
    /// one fused GEMM writes them (split projections concatenated).
    #[cfg(feature = "cuda")]
    fn qkv_heads(&self, xn: &Normed) -> Result<Tensor> {
        match &self.qkv {
            Proj::Fused(l, _) => xn.project(l),
            Proj::Split(ls) => Tensor::cat(&ls.iter().map(|l| xn.project(l)).collect::<Result<Vec<_>>>()?, 1),
        }
    }

    /// The q/k/v projection, the (optional) per-head q/k RMSNorm, the per-head weights (which
    /// carry the attention scale) and RoPE: `(q|k [B, T, hq + hkv, d] roped, v [B·T, hkv·d])`.
    fn roped_qk_v(
        &self,
        xn: &Normed,
        b: usize,
        t: usize,
        rope: (&Tensor, &Tensor),
        unit: &Tensor,
        dims: Dims,
    ) -> Result<(Tensor, Tensor)> {
        let Dims { hq, hkv, d, eps, .. } = dims;
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
        // Per-head RMSNorm of q and k in one launch (Qwen3), then the per-head weights.
        let qk =
            if self.qk_norm { candle_nn::ops::rms_norm(&qk.reshape((m * (hq + hkv), d))?, unit, eps)? } else { qk };
        let qk = qk.reshape((b, t, hq + hkv, d))?.broadcast_mul(&self.qk_weight)?;
        Ok((candle_nn::rotary_emb::rope_thd(&qk, rope.0, rope.1)?, v))
    }

    /// The attention of the candle ops (any T, device and dtype): `[B*T, hq * d]`, the input of
    /// the o projection.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
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
        let Dims { hq, hkv, d, .. } = dims;
        let n_rep = hq / hkv;
        let m = b * t;
        let (qk, v) = self.roped_qk_v(xn, b, t, rope, unit, dims)?;
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

    /// A decode step (T = 1) through our attention kernel when it applies (CUDA sm_90, bf16,
    /// head_dim 64 or 128, at most 16 query heads per kv head, FP8 o projection; with or without
    /// the q/k norm): qk-norm (or not) + RoPE + KV append + attention in one launch, written
    /// straight into the o projection's quantized operand (head_dim 64: its bf16 output, then
    /// the activation quantizer), then the o GEMM. Returns the o projection's output
    /// `[B, hidden]`, or `None` for the candle path.
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
        let AnyLinear::Fp8(o) = &self.o else {
            return Ok(None);
        };
        if !attn::HEAD_DIMS.contains(&d)
            || hq / hkv > attn::MAX_QUERIES_PER_KV_HEAD
            || xn.dtype() != DType::BF16
            || self.qk_weight.dtype() != DType::BF16
            || !attn::is_available(xn.device())
        {
            return Ok(None);
        }
        let qkv = self.qkv_heads(xn)?;
        cache.reserve((b, hkv, 1, d), DType::BF16, xn.device(), offset, capacity_hint)?;
        let (kc, vc) = (cache.k.as_ref().unwrap(), cache.v.as_ref().unwrap());
        let qkv = qkv.contiguous()?;
        // Without a q/k norm (Llama, Qwen2) the kernel applies the per-head weights only: ones,
        // the q rows times 1/sqrt(d) (`qk_weights`), as the candle path's broadcast_mul does.
        let norm = if self.qk_norm { attn::QkNorm::Rms } else { attn::QkNorm::WeightOnly };
        let o_in = attn::decode_step_attention(
            &qkv,
            &self.qk_weight,
            rope.0,
            rope.1,
            kc,
            vc,
            offset,
            hq,
            hkv,
            eps,
            norm,
            Default::default(),
        )?;
        let (qa, sa) = o_in.quantized.expect("requested");
        cache.len = offset + 1;
        Ok(Some(o.forward_quantized_unreduced(&qa, &sa)?))
    }

    /// A prompt's (T > 1) attention through the flash prefill kernel (CUDA sm_90, bf16, head_dim
    /// 64 or 128; [`flash_prefill_applies`]): the q/k/v projection, then q/k norm, RoPE and the
    /// KV-cache append in one launch (the candle path's bits), then causal attention over the
    /// cache without a `T × T` score tensor, written as the o projection's quantized operand when
    /// that projection quantizes activations. Returns the o projection's output `[B·T, hidden]`.
    #[cfg(feature = "cuda")]
    #[allow(clippy::too_many_arguments)]
    fn prefill_attention_flash(
        &self,
        xn: &Normed,
        b: usize,
        t: usize,
        offset: usize,
        rope: (&Tensor, &Tensor),
        cache: &mut KvCache,
        capacity_hint: usize,
        dims: Dims,
    ) -> Result<Unreduced> {
        use crate::cuda::attention::{qk_norm_rope_append, QkNorm};
        use crate::cuda::prefill::prefill_attention_with;
        let kernel = dims.flash_prefill.unwrap_or_default();
        let Dims { hq, hkv, d, eps, .. } = dims;
        let qkv = self.qkv_heads(xn)?;
        let qkv = qkv.contiguous()?.reshape((b, t, (hq + 2 * hkv) * d))?;
        cache.reserve((b, hkv, t, d), DType::BF16, xn.device(), offset, capacity_hint)?;
        let (kc, vc) = (cache.k.as_ref().expect("reserved"), cache.v.as_ref().expect("reserved"));
        let norm = if self.qk_norm { QkNorm::Rms } else { QkNorm::WeightOnly };
        let q = qk_norm_rope_append(&qkv, &self.qk_weight, rope.0, rope.1, kc, vc, offset, hq, hkv, eps, norm)?;
        cache.len = offset + t;
        match &self.o {
            AnyLinear::Fp8(o) if o.quantizes_activations()? => {
                let out = prefill_attention_with(&q, kc, vc, offset, true, false, kernel)?;
                let (qa, sa) = out.quantized.expect("requested");
                o.forward_quantized_unreduced(&qa, &sa)
            }
            o => {
                let out = prefill_attention_with(&q, kc, vc, offset, false, true, kernel)?;
                Ok(Unreduced::Done(o.forward(&out.bf16.expect("requested"))?))
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[allow(clippy::too_many_arguments)]
    fn prefill_attention_flash(
        &self,
        _xn: &Normed,
        _b: usize,
        _t: usize,
        _offset: usize,
        _rope: (&Tensor, &Tensor),
        _cache: &mut KvCache,
        _capacity_hint: usize,
        _dims: Dims,
    ) -> Result<Unreduced> {
        bail!("decoder: the flash prefill attention needs the `cuda` feature")
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
pub(crate) enum Normed {
    Plain(Tensor),
    Quantized { qa: Tensor, sa: Tensor, dtype: DType },
}

impl Normed {
    /// `l` applied to this input, in the activation dtype.
    fn project(&self, l: &AnyLinear) -> Result<Tensor> {
        match (self, l) {
            (Self::Plain(x), l) => l.forward(x),
            (Self::Quantized { qa, sa, dtype }, AnyLinear::Fp8(f)) => f.forward_quantized(qa, sa)?.to_dtype(*dtype),
            _ => bail!("decoder: a quantized activation reached a layer that is not FP8"),
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

/// Whether a prompt's attention on `device` in `dtype` with head dimension `d` can take the flash
/// prefill kernel: CUDA sm_90 (our kernels compiled in), bf16, `d` 64 or 128.
#[cfg(feature = "cuda")]
pub(crate) fn flash_prefill_applies(device: &Device, dtype: DType, d: usize) -> bool {
    use crate::cuda::attention as attn;
    dtype == DType::BF16 && attn::HEAD_DIMS.contains(&d) && attn::is_available(device)
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn flash_prefill_applies(_device: &Device, _dtype: DType, _d: usize) -> bool {
    false
}

/// Additive causal mask `[n_rep * t, offset + t]`: row `r` is query position `offset + r % t`.
pub(crate) fn causal_mask(t: usize, offset: usize, n_rep: usize, device: &Device, dtype: DType) -> Result<Tensor> {
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
