//! The experts' gate/up GEMM with SiLU·up and the down projection's activation quantization in
//! one op, for both grouped layouts: its `(qa, sa)` is the grouped down GEMM's operand.
//! On CUDA, where the grouped kernel runs the shape, one launch (the SwiGLU and the quantization
//! in the GEMM's epilogue); elsewhere the grouped GEMM, candle's SiLU and product in bf16, and
//! the activation quantizer — the same bits.

use super::grouped::{fp8_grouped_matmul_contiguous_with, fp8_grouped_matmul_masked_with, quantize_activation_masked};
use crate::dispatch::Fp8Options;
use crate::quant::quantize_activation;
use candle_core::{bail, Result, Tensor};

/// `silu(gate) · up` of a bf16 `[.., 2·I]` GEMM output (gate the first `I` columns), in bf16 as
/// the MLP computes it.
fn silu_mul(gate_up: &Tensor) -> Result<Tensor> {
    let last = gate_up.rank() - 1;
    let inter = gate_up.dim(last)? / 2;
    let gate = gate_up.narrow(last, 0, inter)?;
    let up = gate_up.narrow(last, inter, inter)?;
    candle_nn::ops::silu(&gate)? * up
}

/// The intermediate width `I` of stacked `[gate; up]` weights `[E, 2·I, K]`.
fn inter_of(w: &Tensor) -> Result<usize> {
    let n = match w.dims() {
        &[_, n, _] => n,
        d => bail!("w: expected a rank-3 tensor [E, 2·I, K] of stacked [gate; up] weights, got shape {d:?}"),
    };
    if n % 2 != 0 {
        bail!("w: {n} rows per expert, expected [gate; up] of two equal halves (shape {:?})", w.dims())
    }
    Ok(n / 2)
}

/// The masked layout's gate/up GEMM with SwiGLU and quantization: `w` holds each expert's
/// `[gate; up]` weight `[2·I, K]` (`[E, 2·I, K]` e4m3, scales `[E, ceil(2·I/128),
/// ceil(K/128)]`), the rest as for [`super::fp8_grouped_matmul_masked`]. Returns `(qa, sa)` of
/// `a = bf16(silu(gate) · up)` — `qa` e4m3 `[E, max_m, I]`, `sa` `[E, max_m, ceil(I/128)]` in
/// the per-expert MN-major layout — ready for the masked down GEMM. Rows at or past `counts[e]`
/// are unspecified (the masked GEMM never reads them). Each row below its count is
/// `quantize_activation(silu(gate) · up)` of that row of
/// `fp8_grouped_matmul_masked(qa, sa, w, sw, counts)` (bf16 SiLU and product).
///
/// On CUDA with our provider, `I % 128 == 0` and `E · max_m > 0` one launch does it all, with
/// the counts read on the device only (a count past `max_m` is taken as `max_m`, as the masked
/// GEMM's kernel does); otherwise the ops above run in turn (refusing such a count).
pub fn fp8_grouped_swiglu_quantize_masked(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
) -> Result<(Tensor, Tensor)> {
    fp8_grouped_swiglu_quantize_masked_with(&Fp8Options::from_env()?, qa, sa, w, sw, counts)
}

/// [`fp8_grouped_swiglu_quantize_masked`] with explicit options instead of the environment.
pub fn fp8_grouped_swiglu_quantize_masked_with(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let inter = inter_of(w)?;
    #[cfg(feature = "cuda")]
    if qa.device().is_cuda() {
        let shape = super::grouped::validate_masked_shape(qa, sa, w, sw, counts)?;
        let (e, max_m, k) = shape;
        if e * max_m > 0
            && inter % crate::format::BLOCK == 0
            && super::grouped_kernel::grouped_kernel_applies(opts, qa, 2 * inter, k)?
        {
            return super::grouped_kernel::swiglu_masked_on_kernel(qa, sa, w, sw, counts, e, max_m, inter, k);
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = inter;
    let y = fp8_grouped_matmul_masked_with(opts, qa, sa, w, sw, counts)?;
    quantize_activation_masked(&silu_mul(&y)?)
}

/// The contiguous layout's gate/up GEMM with SwiGLU and quantization: `w` as for
/// [`fp8_grouped_swiglu_quantize_masked`], the rest as for
/// [`super::fp8_grouped_matmul_contiguous`]. Returns `(qa, sa)` of `a = bf16(silu(gate) · up)`
/// — `qa` e4m3 `[Σ M_e, I]`, `sa` `[Σ M_e, ceil(I/128)]` MN-major — ready for the contiguous
/// down GEMM. Rows at or past the counts' sum are unspecified (the grouped GEMM writes zeros
/// there whatever they hold). Each row below it is `quantize_activation(silu(gate) · up)` of
/// that row of `fp8_grouped_matmul_contiguous(qa, sa, w, sw, counts)`.
///
/// On CUDA with our provider, `I % 128 == 0` and at most 64 tokens per expert, one launch of
/// the gated grouped kernel (its 16-token tiles); otherwise the ops above in turn.
pub fn fp8_grouped_swiglu_quantize_contiguous(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<(Tensor, Tensor)> {
    fp8_grouped_swiglu_quantize_contiguous_with(&Fp8Options::from_env()?, qa, sa, w, sw, counts)
}

/// [`fp8_grouped_swiglu_quantize_contiguous`] with explicit options instead of the environment.
pub fn fp8_grouped_swiglu_quantize_contiguous_with(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<(Tensor, Tensor)> {
    let inter = inter_of(w)?;
    #[cfg(feature = "cuda")]
    if qa.device().is_cuda() {
        use super::grouped_kernel::{grouped_kernel_applies, SWIGLU_KERNEL_MAX_TOKENS};
        let rows = super::grouped::validate_contiguous_shape(qa, sa, w, sw, counts)?;
        let largest = counts.iter().copied().max().unwrap_or(0);
        if rows > 0
            && inter % crate::format::BLOCK == 0
            && largest <= SWIGLU_KERNEL_MAX_TOKENS
            && grouped_kernel_applies(opts, qa, 2 * inter, qa.dim(1)?)?
        {
            return super::grouped_kernel::swiglu_contiguous_on_kernel(qa, sa, w, sw, counts, rows, inter);
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = inter;
    let y = fp8_grouped_matmul_contiguous_with(opts, qa, sa, w, sw, counts)?;
    quantize_activation(&silu_mul(&y)?)
}
