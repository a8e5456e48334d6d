//! [`Fp8BlockLinear`]: a `candle_nn::Module` over a blocked-FP8 weight, and [`AnyLinear`] for
//! models whose checkpoints leave some modules unquantized.

use crate::dispatch::{choose_provider, Backend, Fp8Options, Provider};
use crate::format::{check_weight_scale_shape, BLOCK};
use crate::ops::{self, Unreduced};
use crate::quant;
use candle_core::{bail, DType, Module, Result, Tensor};
use candle_nn::VarBuilder;
use std::sync::OnceLock;

/// A linear layer `y = x · Wᵀ (+ b)` whose weight is e4m3 with one f32 scale per 128×128 block
/// (`weight_scale_inv`, the layout of DeepSeek-V3 / Qwen3-*-FP8 checkpoints).
///
/// `forward` takes bf16, f16 or f32 input `[.., K]`, quantizes it per token per 128 K-elements,
/// runs the blocked-FP8 GEMM and returns `[.., N]` in the input's dtype. The provider follows
/// the layer's [`Fp8Options`] (by default `CANDLE_FP8_BACKEND`, read at construction) and is
/// chosen once, at the first forward.
///
/// ```
/// use candle_core::{Device, Module, Tensor, DType};
/// use candle_fp8::Fp8BlockLinear;
/// # fn main() -> candle_core::Result<()> {
/// let w = Tensor::randn(0f32, 0.02, (256, 512), &Device::Cpu)?;
/// let layer = Fp8BlockLinear::from_weight(&w, None)?; // quantize a float weight
/// let x = Tensor::randn(0f32, 1.0, (2, 3, 512), &Device::Cpu)?.to_dtype(DType::BF16)?;
/// let y = layer.forward(&x)?;
/// assert_eq!(y.dims(), &[2, 3, 256]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Fp8BlockLinear {
    weight: Tensor,
    scale_inv: Tensor,
    bias: Option<Tensor>,
    backend: Backend,
    provider: OnceLock<Provider>,
    dequantized: OnceLock<Tensor>,
}

impl Fp8BlockLinear {
    /// Builds a layer from an e4m3 weight `[N, K]`, its block scales `[ceil(N/128),
    /// ceil(K/128)]` (f32, bf16 or f16: converted to f32 once) and an optional bias `[N]`.
    ///
    /// Fails with an error naming the bad tensor on a wrong dtype, rank or shape, or on a
    /// NaN, infinite, zero or negative scale.
    pub fn new(weight: Tensor, weight_scale_inv: Tensor, bias: Option<Tensor>) -> Result<Self> {
        Self::new_named("weight", weight, weight_scale_inv, bias)
    }

    /// [`Fp8BlockLinear::new`] with `name` (e.g. `model.layers.0.mlp.up_proj`) used in errors.
    pub fn new_named(name: &str, weight: Tensor, weight_scale_inv: Tensor, bias: Option<Tensor>) -> Result<Self> {
        if weight.dtype() != DType::F8E4M3 {
            bail!("{name}: weight must be F8_E4M3, got {:?} (shape {:?})", weight.dtype(), weight.dims())
        }
        let (n, k) = match weight.dims() {
            &[n, k] => (n, k),
            d => bail!("{name}: weight must be rank 2 [out, in], got shape {d:?}"),
        };
        if !matches!(weight_scale_inv.dtype(), DType::F32 | DType::BF16 | DType::F16) {
            bail!("{name}.weight_scale_inv: dtype must be F32, BF16 or F16, got {:?}", weight_scale_inv.dtype())
        }
        check_weight_scale_shape(&format!("{name}.weight_scale_inv"), n, k, weight_scale_inv.dims())?;
        let scale_inv = weight_scale_inv.to_dtype(DType::F32)?.contiguous()?;
        check_scales(name, &scale_inv)?;
        if let Some(b) = &bias {
            if b.dims() != [n] {
                bail!("{name}.bias: shape {:?} does not match out_features {n}", b.dims())
            }
        }
        let weight = weight.contiguous()?;
        Ok(Self {
            weight,
            scale_inv,
            bias,
            backend: Fp8Options::from_env()?.backend,
            provider: OnceLock::new(),
            dequantized: OnceLock::new(),
        })
    }

    /// Quantizes a float weight `[N, K]` into 128×128 blocks (for tests, fixtures and
    /// converting unquantized checkpoints).
    pub fn from_weight(weight: &Tensor, bias: Option<Tensor>) -> Result<Self> {
        let (w, s) = quant::quantize_weight(weight)?;
        Self::new(w, s, bias)
    }

    /// Loads `weight` (F8_E4M3 `[out_dim, in_dim]`), `weight_scale_inv` and, if `bias`, `bias`
    /// from a `VarBuilder` prefix, e.g. `Fp8BlockLinear::load(vb.pp("q_proj"), 5120, 8192, false)`.
    pub fn load(vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        let name = vb.prefix();
        let weight =
            vb.get_unchecked_dtype("weight", DType::F8E4M3).map_err(|e| e.context(format!("{name}.weight")))?;
        if weight.dims() != [out_dim, in_dim] {
            bail!("{name}.weight: shape {:?}, expected [{out_dim}, {in_dim}] from the config", weight.dims())
        }
        let scale = vb
            .get_unchecked_dtype("weight_scale_inv", DType::F32)
            .map_err(|e| e.context(format!("{name}.weight_scale_inv is missing or unreadable")))?;
        let bias =
            if bias { Some(vb.get(out_dim, "bias").map_err(|e| e.context(format!("{name}.bias")))?) } else { None };
        Self::new_named(&name, weight, scale, bias)
    }

    /// Sets this layer's options (overrides `CANDLE_FP8_BACKEND`).
    pub fn with_options(mut self, opts: &Fp8Options) -> Self {
        self.backend = opts.backend;
        self.provider = OnceLock::new();
        self
    }

    /// Forces a backend for this layer (overrides `CANDLE_FP8_BACKEND`).
    pub fn with_backend(self, backend: Backend) -> Self {
        self.with_options(&Fp8Options::with_backend(backend))
    }

    /// The backend this layer was given ([`Fp8BlockLinear::with_backend`]).
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// The provider this layer's GEMMs run on (chosen at the first call, then fixed).
    pub fn provider(&self) -> Result<Provider> {
        if let Some(p) = self.provider.get() {
            return Ok(*p);
        }
        let caps = ops::device_caps(self.weight.device())?;
        // Decide for a representative small M: the provider does not depend on M.
        let p = choose_provider(self.backend, &caps, 1, self.out_dim(), self.in_dim())?;
        ops::log_once(p, &format!("Fp8BlockLinear [{}x{}] uses {p}", self.out_dim(), self.in_dim()));
        Ok(*self.provider.get_or_init(|| p))
    }

    /// The e4m3 weight `[N, K]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The f32 block scales `[ceil(N/128), ceil(K/128)]`.
    pub fn weight_scale_inv(&self) -> &Tensor {
        &self.scale_inv
    }

    /// The bias `[N]`, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Input features K.
    pub fn in_dim(&self) -> usize {
        self.weight.dims()[1]
    }

    /// Output features N.
    pub fn out_dim(&self) -> usize {
        self.weight.dims()[0]
    }

    /// The dequantized weight `[N, K]` as f32, computed on the weight's device with tensor ops
    /// (no host round trip: a 32B model's weights never pass through CPU memory).
    pub fn dequantize(&self) -> Result<Tensor> {
        let (n, k) = (self.out_dim(), self.in_dim());
        let (nb, kb) = self.scale_inv.dims2()?;
        let scales = self
            .scale_inv
            .reshape((nb, 1, kb, 1))?
            .broadcast_as((nb, BLOCK, kb, BLOCK))?
            .contiguous()?
            .reshape((nb * BLOCK, kb * BLOCK))?
            .narrow(0, 0, n)?
            .narrow(1, 0, k)?;
        quant::e4m3_to_f32(&self.weight)?.mul(&scales)
    }

    /// A plain `candle_nn::Linear` with the dequantized weight in `dtype` (bf16 is the baseline).
    pub fn to_dense(&self, dtype: DType) -> Result<candle_nn::Linear> {
        let w = self.dequantize()?.to_dtype(dtype)?;
        let b = self.bias.as_ref().map(|b| b.to_dtype(dtype)).transpose()?;
        Ok(candle_nn::Linear::new(w, b))
    }

    /// The reference computation of this layer on its own device: activations quantized
    /// exactly as in [`Module::forward`], then both operands dequantized to f32 and multiplied
    /// in f32, rounded to bf16 like the kernels' output. With a quantizing provider it takes the
    /// same quantized operands as `forward`; the two then differ by the order of the f32 sums
    /// (and, on the GPU, by the kernels' promotion of each K block's partial sum).
    pub fn forward_reference(&self, x: &Tensor) -> Result<Tensor> {
        let (m, lead) = self.check_input(x)?;
        let (qa, sa) = quant::quantize_activation(&x.reshape((m, self.in_dim()))?)?;
        let y = dequantize_activation(&qa, &sa)?.matmul(&self.dequantize()?.t()?)?;
        // The GEMM's contract is bf16 out: round the reference the same way.
        self.finish(y.to_dtype(DType::BF16)?, lead, x.dtype())
    }

    /// Checks the input of a forward and returns (tokens, leading dims).
    fn check_input(&self, x: &Tensor) -> Result<(usize, Vec<usize>)> {
        let dims = x.dims();
        let Some((&k, lead)) = dims.split_last() else {
            bail!("Fp8BlockLinear: input must have at least one dimension, got a scalar")
        };
        if k != self.in_dim() {
            bail!("Fp8BlockLinear: input has {k} features (shape {dims:?}) but the weight expects {}", self.in_dim())
        }
        if !matches!(x.dtype(), DType::BF16 | DType::F16 | DType::F32) {
            bail!("Fp8BlockLinear: input must be bf16, f16 or f32, got {:?}", x.dtype())
        }
        Ok((lead.iter().product(), lead.to_vec()))
    }

    /// Adds the bias and restores the leading dims and the input dtype.
    fn finish(&self, y: Tensor, mut lead: Vec<usize>, dtype: DType) -> Result<Tensor> {
        let y = match &self.bias {
            Some(b) => y.broadcast_add(&b.to_dtype(y.dtype())?)?,
            None => y,
        };
        lead.push(self.out_dim());
        y.reshape(lead)?.to_dtype(dtype)
    }

    /// Fuses layers that share their input (q/k/v, gate/up) into one along N, so a forward
    /// runs one GEMM. Every part but the last must have `N % 128 == 0`, so that the 128-row
    /// scale blocks stay aligned.
    pub fn concat(parts: &[&Fp8BlockLinear]) -> Result<Self> {
        let Some(first) = parts.first() else { bail!("Fp8BlockLinear::concat: no layers given") };
        let k = first.in_dim();
        for (i, p) in parts.iter().enumerate() {
            if p.in_dim() != k {
                bail!("Fp8BlockLinear::concat: part {i} has in_dim {} but part 0 has {k}", p.in_dim())
            }
            if i + 1 < parts.len() && p.out_dim() % BLOCK != 0 {
                bail!(
                    "Fp8BlockLinear::concat: part {i} has out_dim {}, not a multiple of {BLOCK}: its \
                     scale blocks would straddle the next part",
                    p.out_dim()
                )
            }
        }
        let ws: Vec<&Tensor> = parts.iter().map(|p| &p.weight).collect();
        let ss: Vec<&Tensor> = parts.iter().map(|p| &p.scale_inv).collect();
        let bias_dtype = parts.iter().find_map(|p| p.bias.as_ref().map(|b| b.dtype()));
        let bias = if let Some(bias_dtype) = bias_dtype {
            let bs = parts
                .iter()
                .map(|p| match &p.bias {
                    Some(b) => Ok(b.clone()),
                    None => Tensor::zeros(p.out_dim(), bias_dtype, p.weight.device()),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&bs, 0)?)
        } else {
            None
        };
        let fused = Self::new(Tensor::cat(&ws, 0)?, Tensor::cat(&ss, 0)?, bias)?;
        Ok(fused.with_backend(first.backend))
    }

    /// The bf16 weight the dequant provider multiplies with (computed once, kept).
    fn dequantized_bf16(&self) -> Result<&Tensor> {
        if let Some(w) = self.dequantized.get() {
            return Ok(w);
        }
        tracing::warn!(
            "candle-fp8: dequant provider keeps a bf16 copy of a [{}x{}] weight (2x memory)",
            self.out_dim(),
            self.in_dim()
        );
        let w = self.dequantize()?.to_dtype(DType::BF16)?;
        Ok(self.dequantized.get_or_init(|| w))
    }

    fn forward_2d(&self, x: &Tensor) -> Result<Tensor> {
        match self.provider()? {
            Provider::Dequant => x.to_dtype(DType::BF16)?.matmul(&self.dequantized_bf16()?.t()?),
            #[cfg(feature = "cuda")]
            Provider::Hopper if x.device().is_cuda() && x.dim(0)? > 0 => {
                ops::hopper::quantize_matmul_hopper(x, &self.weight, &self.scale_inv)
            }
            p => {
                let (qa, sa) = quant::quantize_activation(x)?;
                ops::fp8_block_matmul_with(
                    &Fp8Options::with_backend(Backend::Force(p)),
                    &qa,
                    &sa,
                    &self.weight,
                    &self.scale_inv,
                )
            }
        }
    }

    /// Whether [`Module::forward`] quantizes its input per token per 128 (every provider but
    /// `dequant`, which multiplies the bf16 activation by a dequantized weight). Only then does
    /// [`Fp8BlockLinear::forward_quantized`] on `quantize_activation(x)` equal `forward(x)` bit
    /// for bit.
    pub fn quantizes_activations(&self) -> Result<bool> {
        Ok(self.provider()? != Provider::Dequant)
    }

    /// [`Fp8BlockLinear::forward_quantized`] that may leave our kernel's split-K partials
    /// unreduced ([`Unreduced::Partials`]) when the layer runs on our kernels (no bias, a 2-D
    /// `qa` on a shape of their fast path) and the chosen schedule reduces through its
    /// workspace; every other case returns [`Unreduced::Done`] with `forward_quantized`'s result.
    /// `reduce()` of either equals `forward_quantized` bit for bit.
    pub fn forward_quantized_unreduced(&self, qa: &Tensor, sa: &Tensor) -> Result<Unreduced> {
        #[cfg(feature = "cuda")]
        if self.bias.is_none() && qa.device().is_cuda() && self.provider()? == Provider::Hopper {
            if let &[m, k] = qa.dims() {
                if m > 0 && k == self.in_dim() && crate::format::fast_path_refusal(m, self.out_dim(), k).is_none() {
                    return ops::hopper::fp8_block_matmul_unreduced(qa, sa, &self.weight, &self.scale_inv);
                }
            }
        }
        Ok(Unreduced::Done(self.forward_quantized(qa, sa)?))
    }

    /// A fused gate/up layer (output `[gate | up]`, `2·I` features) on a quantized activation,
    /// followed by SiLU·up and the activation quantization of the down projection: returns the
    /// `(qa, sa)` of `silu(gate) * up` (`[M, I]`), i.e.
    /// `ops::swiglu_quantize(&self.forward_quantized(qa, sa)?)`.
    ///
    /// On our Hopper kernels with `1 <= M <= 16`, no bias and `I % 128 == 0` this is one launch:
    /// the SwiGLU and the quantization run in the GEMM's epilogue, bit-identical to the composed
    /// path whenever that path's GEMM does not split K (Qwen3-32B: `I` = 25600, never split).
    /// Everywhere else it is the composed path.
    pub fn forward_swiglu_quantized(&self, qa: &Tensor, sa: &Tensor) -> Result<(Tensor, Tensor)> {
        if self.out_dim() % 2 != 0 {
            bail!(
                "Fp8BlockLinear::forward_swiglu_quantized: {} output features are not [gate | up] halves",
                self.out_dim()
            )
        }
        #[cfg(feature = "cuda")]
        if self.bias.is_none() && qa.device().is_cuda() && self.provider()? == Provider::Hopper {
            if let &[m, k] = qa.dims() {
                let inter = self.out_dim() / 2;
                if (1..=crate::cuda::gemm::SWIGLU_GEMM_MAX_M).contains(&m)
                    && k == self.in_dim()
                    && inter % crate::format::BLOCK == 0
                    && crate::format::fast_path_refusal(m, self.out_dim(), k).is_none()
                {
                    return ops::hopper::fp8_swiglu_matmul_quantize(qa, sa, &self.weight, &self.scale_inv);
                }
            }
        }
        let gu = self.forward_quantized(qa, sa)?;
        ops::swiglu_quantize(&gu)
    }

    /// The layer on an activation that is already quantized: `qa` e4m3 `[M, K]` and `sa` f32
    /// `[M, ceil(K/128)]` with strides `(1, round_up(M, 4))`, as returned by
    /// [`crate::quantize_activation`] or the fused producers in [`crate::ops`]. Returns bf16
    /// `[M, N]` (bias added like [`Module::forward`] does). With a quantizing provider (see
    /// [`Fp8BlockLinear::quantizes_activations`]) this is exactly `forward` of the bf16
    /// activation that `(qa, sa)` quantize, minus the quantization; the dequant provider
    /// multiplies the dequantized activation instead.
    pub fn forward_quantized(&self, qa: &Tensor, sa: &Tensor) -> Result<Tensor> {
        let m = match qa.dims() {
            &[m, k] if k == self.in_dim() => m,
            d => bail!("Fp8BlockLinear::forward_quantized: qa has shape {d:?}, expected [M, {}]", self.in_dim()),
        };
        let y = match self.provider()? {
            Provider::Dequant => {
                let a = dequantize_activation(qa, sa)?.to_dtype(DType::BF16)?;
                a.matmul(&self.dequantized_bf16()?.t()?)?
            }
            p => ops::fp8_block_matmul_with(
                &Fp8Options::with_backend(Backend::Force(p)),
                qa,
                sa,
                &self.weight,
                &self.scale_inv,
            )?,
        };
        self.finish(y, vec![m], DType::BF16)
    }
}

/// Checks that every scale is finite and positive, naming the first bad one.
fn check_scales(name: &str, scale_inv: &Tensor) -> Result<()> {
    let (nb, kb) = scale_inv.dims2()?;
    let v = scale_inv.flatten_all()?.to_device(&candle_core::Device::Cpu)?.to_vec1::<f32>()?;
    if let Some((i, s)) = v.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s > 0.0)) {
        bail!(
            "{name}.weight_scale_inv: block [{}, {}] of [{nb}, {kb}] has scale {s}; scales must be \
             finite and > 0",
            i / kb.max(1),
            i % kb.max(1)
        )
    }
    Ok(())
}

impl Module for Fp8BlockLinear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (m, lead) = self.check_input(x)?;
        let y = self.forward_2d(&x.reshape((m, self.in_dim()))?)?;
        self.finish(y, lead, x.dtype())
    }
}

/// f32 `[M, K]` from e4m3 `qa [M, K]` and its scales `sa [M, ceil(K/128)]`, on their device.
fn dequantize_activation(qa: &Tensor, sa: &Tensor) -> Result<Tensor> {
    let (m, k) = qa.dims2()?;
    let kp = sa.dim(1)? * BLOCK;
    let a = quant::e4m3_to_f32(qa)?;
    let a = if kp != k { a.pad_with_zeros(1, 0, kp - k)? } else { a };
    a.reshape((m, kp / BLOCK, BLOCK))?.broadcast_mul(&sa.unsqueeze(2)?)?.reshape((m, kp))?.narrow(1, 0, k)
}

/// A linear layer that is either blocked-FP8 or dense (for modules a checkpoint leaves
/// unquantized, such as `lm_head`, or for the bf16 baseline).
#[derive(Debug, Clone)]
pub enum AnyLinear {
    /// A blocked-FP8 layer.
    Fp8(Fp8BlockLinear),
    /// A plain candle linear (bf16 weights in practice).
    Dense(candle_nn::Linear),
    /// A blocked-FP8 layer computed through [`Fp8BlockLinear::forward_reference`] (for
    /// accuracy checks of the kernels).
    Fp8Reference(Fp8BlockLinear),
}

impl AnyLinear {
    /// Loads an FP8 layer when `quantized`, else a dense `candle_nn::Linear` (in the
    /// VarBuilder's dtype).
    pub fn load(vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool, quantized: bool) -> Result<Self> {
        if quantized {
            return Ok(Self::Fp8(Fp8BlockLinear::load(vb, in_dim, out_dim, bias)?));
        }
        let name = vb.prefix();
        let l =
            if bias { candle_nn::linear(in_dim, out_dim, vb) } else { candle_nn::linear_no_bias(in_dim, out_dim, vb) };
        Ok(Self::Dense(l.map_err(|e| e.context(format!("{name} (unquantized linear)")))?))
    }

    /// Output features.
    pub fn out_dim(&self) -> usize {
        match self {
            Self::Fp8(l) | Self::Fp8Reference(l) => l.out_dim(),
            Self::Dense(l) => l.weight().dims()[0],
        }
    }

    /// Converts an FP8 layer into its dequantized bf16 equivalent (dense stays dense).
    pub fn into_dense_bf16(self) -> Result<Self> {
        match self {
            Self::Fp8(l) | Self::Fp8Reference(l) => Ok(Self::Dense(l.to_dense(DType::BF16)?)),
            d => Ok(d),
        }
    }
}

impl Module for AnyLinear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Fp8(l) => l.forward(x),
            Self::Fp8Reference(l) => l.forward_reference(x),
            Self::Dense(l) => l.forward(x),
        }
    }
}
