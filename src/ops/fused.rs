//! Elementwise work fused with the activation quantization that feeds a blocked-FP8 GEMM.
//!
//! In a decoder layer the GEMM inputs are produced by short chains of elementwise ops (residual
//! add, RMSNorm, SiLU·up) followed by the per-token quantization. At decode time (one token)
//! every link is a separate launch that does almost no work; these functions do each chain in
//! one launch on CUDA:
//!
//! - [`add_rmsnorm_quantize`]: `h = x + residual`, `y = rms_norm(h, gamma, eps)`, `(qa, sa) =
//!   quantize_activation(y)`.
//! - [`swiglu_quantize`]: `a = silu(gate) * up` on the two halves of a fused gate/up output,
//!   `(qa, sa) = quantize_activation(a)`.
//!
//! The results are bit-identical to the composed candle ops (`x + residual`,
//! `candle_nn::ops::rms_norm`, `candle_nn::ops::silu`, `*`) followed by
//! [`quantize_activation`]: the CUDA kernels (`kernels/fused/`) repeat candle's bf16
//! arithmetic operation by operation. They run for bf16 CUDA tensors with `K % 8 == 0` (a
//! partial last 128-wide group when `K % 128 != 0`, e.g. SmolLM2's 576) on a device our kernels
//! support (sm_90); every other case (CPU, f16/f32, other shapes, a build without the kernels)
//! computes the composed ops, with the same results.
//!
//! `(qa, sa)` follow the activation contract ([`crate::quantize_activation`]): `qa` e4m3
//! `[M, K]`, `sa` f32 `[M, ceil(K/128)]` with strides `(1, round_up(M, 4))`, ready for
//! [`crate::fp8_block_matmul`] or [`crate::Fp8BlockLinear::forward_quantized`].

use super::unreduced::Unreduced;
use crate::quant::quantize_activation;
use candle_core::{bail, DType, Result, Tensor};

/// Residual add, RMSNorm and activation quantization in one step.
///
/// - `x`: `[M, K]`, bf16, f16 or f32, contiguous.
/// - `residual`: `None`, or a tensor of `x`'s shape, dtype and device (contiguous).
/// - `gamma`: the RMSNorm weight `[K]`, `x`'s dtype, contiguous.
///
/// Returns `(h, qa, sa)` where `h = x + residual` (`None` without a residual; the normalized
/// input is then `x` itself), and `(qa, sa) = quantize_activation(rms_norm(h, gamma, eps))`.
///
/// The CUDA kernel reads `gamma` before it waits for the kernel launched just before it
/// (programmatic dependent launch): pass a model weight, not the output of one of this crate's
/// kernels enqueued immediately before.
///
/// ```
/// use candle_core::{Device, DType, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let x = Tensor::randn(0f32, 1.0, (2, 256), &Device::Cpu)?;
/// let r = Tensor::randn(0f32, 1.0, (2, 256), &Device::Cpu)?;
/// let gamma = Tensor::ones(256, DType::F32, &Device::Cpu)?;
/// let (h, qa, sa) = candle_fp8::ops::add_rmsnorm_quantize(&x, Some(&r), &gamma, 1e-6)?;
/// assert_eq!(h.unwrap().dims(), &[2, 256]);
/// assert_eq!((qa.dims(), sa.dims()), (&[2, 256][..], &[2, 2][..]));
/// # Ok(()) }
/// ```
pub fn add_rmsnorm_quantize(
    x: &Tensor,
    residual: Option<&Tensor>,
    gamma: &Tensor,
    eps: f32,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    add_rmsnorm_quantize_with(x, residual, gamma, eps, false)
}

/// [`add_rmsnorm_quantize`] with `x_settled` (`crate::cuda::fused::add_rmsnorm_quantize`: `x`
/// complete before the previous kernel's wait, so the CUDA kernel loads it before waiting).
fn add_rmsnorm_quantize_with(
    x: &Tensor,
    residual: Option<&Tensor>,
    gamma: &Tensor,
    eps: f32,
    x_settled: bool,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    let (m, k) = check_add_rmsnorm(x, residual, gamma)?;
    #[cfg(feature = "cuda")]
    if norm_row_fits("add_rmsnorm_quantize", k)
        && kernel_eligible("add_rmsnorm_quantize", x, k, &[Some(x), residual, Some(gamma)])?
    {
        return cuda::add_rmsnorm_quantize(x, residual, gamma, eps, m, k, x_settled);
    }
    #[cfg(not(feature = "cuda"))]
    let _ = x_settled;
    let h = residual.map(|r| x + r).transpose()?;
    let y = if m == 0 {
        Tensor::zeros((0, k), x.dtype(), x.device())?
    } else {
        candle_nn::ops::rms_norm(h.as_ref().unwrap_or(x), gamma, eps)?
    };
    let (qa, sa) = quantize_activation(&y)?;
    Ok((h, qa, sa))
}

/// [`add_rmsnorm_quantize`] whose residual may be a split-K GEMM output left unreduced
/// ([`Unreduced`]): the CUDA kernel adds the f32 partials itself (split order,
/// one rounding: the bf16 values the GEMM's own reduction writes), so the reduce launch
/// disappears; elsewhere the partials are reduced first. Results equal
/// `add_rmsnorm_quantize(x, residual.reduce(), gamma, eps)` bit for bit. Partials must be
/// contiguous f32 `[splits, M, K]` for `x` `[M, K]`.
pub fn add_rmsnorm_quantize_unreduced(
    x: &Tensor,
    residual: Option<&Unreduced>,
    gamma: &Tensor,
    eps: f32,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    add_rmsnorm_quantize_unreduced_with(x, residual, gamma, eps, false)
}

/// [`add_rmsnorm_quantize_unreduced`] for a caller that knows `x` is settled (see
/// `crate::cuda::fused::add_rmsnorm_quantize`; a data race when it is not): the Qwen3 decode
/// step's residual stream.
pub(crate) fn add_rmsnorm_quantize_unreduced_with(
    x: &Tensor,
    residual: Option<&Unreduced>,
    gamma: &Tensor,
    eps: f32,
    x_settled: bool,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    match residual {
        None => add_rmsnorm_quantize_with(x, None, gamma, eps, x_settled),
        Some(Unreduced::Done(r)) => add_rmsnorm_quantize_with(x, Some(r), gamma, eps, x_settled),
        Some(p @ Unreduced::Partials(parts)) => {
            #[cfg(feature = "cuda")]
            {
                let (m, k) = check_add_rmsnorm(x, None, gamma)?;
                let shape_ok = parts.dtype() == DType::F32
                    && parts.is_contiguous()
                    && matches!(parts.dims(), &[_, pm, pk] if pm == m && pk == k);
                if !shape_ok {
                    bail!("add_rmsnorm_quantize: residual partials must be contiguous f32 [splits, {m}, {k}], got {:?} {:?}", parts.dtype(), parts.dims())
                }
                if norm_row_fits("add_rmsnorm_quantize", k)
                    && kernel_eligible("add_rmsnorm_quantize", x, k, &[Some(x), Some(parts), Some(gamma)])?
                {
                    return cuda::add_partials_rmsnorm_quantize(x, parts, gamma, eps, m, k, x_settled);
                }
            }
            #[cfg(not(feature = "cuda"))]
            let _ = parts;
            add_rmsnorm_quantize_with(x, Some(&p.reduce()?.to_dtype(x.dtype())?), gamma, eps, x_settled)
        }
    }
}

/// SwiGLU and activation quantization in one step.
///
/// `gate_up`: `[M, 2·I]`, bf16, f16 or f32, contiguous; the gate is the first `I` columns, up
/// the last `I` (the layout of a fused gate/up projection). Returns `(qa, sa) =
/// quantize_activation(silu(gate) * up)` for the `[M, I]` product.
///
/// ```
/// use candle_core::{Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let gu = Tensor::randn(0f32, 1.0, (3, 512), &Device::Cpu)?;
/// let (qa, sa) = candle_fp8::ops::swiglu_quantize(&gu)?;
/// assert_eq!((qa.dims(), sa.dims()), (&[3, 256][..], &[3, 2][..]));
/// # Ok(()) }
/// ```
pub fn swiglu_quantize(gate_up: &Tensor) -> Result<(Tensor, Tensor)> {
    let (m, inter) = check_swiglu(gate_up)?;
    #[cfg(feature = "cuda")]
    if kernel_eligible("swiglu_quantize", gate_up, inter, &[Some(gate_up)])? {
        return cuda::swiglu_quantize(gate_up, m, inter);
    }
    let a = if m == 0 {
        Tensor::zeros((0, inter), gate_up.dtype(), gate_up.device())?
    } else {
        let gate = gate_up.narrow(1, 0, inter)?;
        let up = gate_up.narrow(1, inter, inter)?;
        (candle_nn::ops::silu(&gate)? * &up)?
    };
    quantize_activation(&a)
}

fn dims2(what: &str, name: &str, t: &Tensor) -> Result<(usize, usize)> {
    match t.dims() {
        &[a, b] => Ok((a, b)),
        d => bail!("{what}: {name} must be rank 2 [M, K], got shape {d:?}"),
    }
}

fn check_float(what: &str, name: &str, t: &Tensor) -> Result<()> {
    if !matches!(t.dtype(), DType::BF16 | DType::F16 | DType::F32) {
        bail!("{what}: {name} must be bf16, f16 or f32, got {:?}", t.dtype())
    }
    Ok(())
}

fn check_contiguous(what: &str, name: &str, t: &Tensor) -> Result<()> {
    if !t.is_contiguous() {
        bail!("{what}: {name} must be contiguous, got shape {:?} stride {:?}", t.dims(), t.stride())
    }
    Ok(())
}

fn check_same_device(what: &str, name: &str, t: &Tensor, x: &Tensor) -> Result<()> {
    if !t.device().same_device(x.device()) {
        bail!("{what}: {name} is on {:?} but x is on {:?}", t.device().location(), x.device().location())
    }
    Ok(())
}

fn check_add_rmsnorm(x: &Tensor, residual: Option<&Tensor>, gamma: &Tensor) -> Result<(usize, usize)> {
    const W: &str = "add_rmsnorm_quantize";
    let (m, k) = dims2(W, "x", x)?;
    check_float(W, "x", x)?;
    if k == 0 {
        bail!("{W}: x has K = 0 columns (shape [{m}, 0])")
    }
    check_contiguous(W, "x", x)?;
    if let Some(r) = residual {
        if r.dims() != x.dims() {
            bail!("{W}: residual has shape {:?} but x has {:?}", r.dims(), x.dims())
        }
        if r.dtype() != x.dtype() {
            bail!("{W}: residual is {:?} but x is {:?}", r.dtype(), x.dtype())
        }
        check_same_device(W, "residual", r, x)?;
        check_contiguous(W, "residual", r)?;
    }
    if gamma.dims() != [k] {
        bail!("{W}: gamma must be [{k}] (x's K), got shape {:?}", gamma.dims())
    }
    if gamma.dtype() != x.dtype() {
        bail!(
            "{W}: gamma is {:?} but x is {:?}; the norm weight must have the activation's dtype",
            gamma.dtype(),
            x.dtype()
        )
    }
    check_same_device(W, "gamma", gamma, x)?;
    check_contiguous(W, "gamma", gamma)?;
    Ok((m, k))
}

fn check_swiglu(gate_up: &Tensor) -> Result<(usize, usize)> {
    const W: &str = "swiglu_quantize";
    let (m, w) = dims2(W, "gate_up", gate_up)?;
    check_float(W, "gate_up", gate_up)?;
    if w == 0 || w % 2 != 0 {
        bail!("{W}: gate_up must have an even, non-zero number of columns [M, 2·I], got shape [{m}, {w}]")
    }
    check_contiguous(W, "gate_up", gate_up)?;
    Ok((m, w / 2))
}

/// Whether the fused kernel can run on these tensors (bf16 on a CUDA device our kernels
/// support, `k % 8 == 0`, at least one row, 16-byte aligned starts). A CUDA bf16 input that
/// misses it is logged once, since the caller likely expected the fused path.
#[cfg(feature = "cuda")]
fn kernel_eligible(what: &str, x: &Tensor, k: usize, tensors: &[Option<&Tensor>]) -> Result<bool> {
    use crate::cuda::gemm::QUANT_K_MULTIPLE;
    use crate::dispatch::Provider;
    let candle_core::Device::Cuda(dev) = x.device() else {
        return Ok(false);
    };
    if x.dtype() != DType::BF16 || x.dim(0)? == 0 {
        return Ok(false);
    }
    let why = if k % QUANT_K_MULTIPLE != 0 {
        Some(format!("K = {k} is not a multiple of {QUANT_K_MULTIPLE}"))
    } else if let Some(why) = crate::cuda::device_caps(dev)?.unusable_reason(Provider::Hopper) {
        Some(why)
    } else if tensors.iter().flatten().any(|t| t.layout().start_offset() % 8 != 0) {
        Some("a tensor does not start at a 16-byte boundary".into())
    } else {
        None
    };
    match why {
        None => Ok(true),
        Some(why) => {
            log_fallback_once(what, &why);
            Ok(false)
        }
    }
}

/// Whether a row and its norm weight (bf16, `4 * k` bytes) fit the fused norm kernel's shared
/// memory (227 KiB on sm_90); longer rows take the composed ops (logged once).
#[cfg(feature = "cuda")]
fn norm_row_fits(what: &str, k: usize) -> bool {
    const MAX_K: usize = (227 * 1024 - 128) / 4;
    if k <= MAX_K {
        return true;
    }
    log_fallback_once(what, &format!("K = {k} exceeds the kernel's {MAX_K}-column row"));
    false
}

#[cfg(feature = "cuda")]
fn log_fallback_once(what: &str, why: &str) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let key = format!("{what}: {why}");
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.get_or_insert_with(HashSet::new).insert(key) {
        tracing::info!("candle-fp8: {what} runs the composed ops, not the fused kernel: {why}");
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::format::{act_scale_m_stride, act_scales_view, num_blocks};
    use candle_core::cuda_backend::CudaStorage;
    use candle_core::op::BackpropOp;
    use candle_core::{bail, Layout, Result, Storage, StorageRef, Tensor};

    fn cuda<'a>(name: &str, st: &'a StorageRef<'_>) -> Result<&'a CudaStorage> {
        match &**st {
            Storage::Cuda(s) => Ok(s),
            _ => bail!("candle-fp8 fused: {name} is not on a CUDA device"),
        }
    }

    fn wrap(s: CudaStorage, shape: impl Into<candle_core::Shape>) -> Tensor {
        Tensor::from_storage(Storage::Cuda(s), shape, BackpropOp::none(), false)
    }

    fn scales(s: CudaStorage, m: usize, k: usize) -> Result<Tensor> {
        let kb = num_blocks(k);
        act_scales_view(wrap(s, kb * act_scale_m_stride(m)), m, kb)
    }

    pub(super) fn add_rmsnorm_quantize(
        x: &Tensor,
        residual: Option<&Tensor>,
        gamma: &Tensor,
        eps: f32,
        m: usize,
        k: usize,
        x_settled: bool,
    ) -> Result<(Option<Tensor>, Tensor, Tensor)> {
        let (sum, q, s) = {
            let (xs, xl) = x.storage_and_layout();
            let (gs, gl) = gamma.storage_and_layout();
            let rs = residual.map(|r| r.storage_and_layout());
            let r: Option<(&CudaStorage, &Layout)> = match &rs {
                Some((st, l)) => Some((cuda("residual", st)?, *l)),
                None => None,
            };
            let r = r.map(crate::cuda::fused::Residual::Bf16);
            crate::cuda::fused::add_rmsnorm_quantize(
                (cuda("x", &xs)?, xl),
                r,
                (cuda("gamma", &gs)?, gl),
                eps,
                m,
                k,
                x_settled,
            )?
        };
        Ok((sum.map(|s| wrap(s, (m, k))), wrap(q, (m, k)), scales(s, m, k)?))
    }

    /// `partials`: f32 contiguous `[splits, m, k]` (checked by the caller).
    pub(super) fn add_partials_rmsnorm_quantize(
        x: &Tensor,
        partials: &Tensor,
        gamma: &Tensor,
        eps: f32,
        m: usize,
        k: usize,
        x_settled: bool,
    ) -> Result<(Option<Tensor>, Tensor, Tensor)> {
        let splits = partials.dim(0)?;
        let (sum, q, s) = {
            let (xs, xl) = x.storage_and_layout();
            let (gs, gl) = gamma.storage_and_layout();
            let (ps, pl) = partials.storage_and_layout();
            let r = crate::cuda::fused::Residual::Partials((cuda("residual partials", &ps)?, pl), splits);
            crate::cuda::fused::add_rmsnorm_quantize(
                (cuda("x", &xs)?, xl),
                Some(r),
                (cuda("gamma", &gs)?, gl),
                eps,
                m,
                k,
                x_settled,
            )?
        };
        Ok((sum.map(|s| wrap(s, (m, k))), wrap(q, (m, k)), scales(s, m, k)?))
    }

    pub(super) fn swiglu_quantize(gate_up: &Tensor, m: usize, inter: usize) -> Result<(Tensor, Tensor)> {
        let (q, s) = {
            let (gs, gl) = gate_up.storage_and_layout();
            crate::cuda::fused::swiglu_quantize((cuda("gate_up", &gs)?, gl), m, inter)?
        };
        Ok((wrap(q, (m, inter)), scales(s, m, inter)?))
    }
}
