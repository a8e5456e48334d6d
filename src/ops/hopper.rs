//! The ops that exist only on our Hopper kernels: the full linear (quantizer + GEMM), the GEMM
//! with its split-K reduction left to the consumer, the gated gate/up GEMM and the reduction.

use super::matmul::log_provider_once;
use super::unreduced::Unreduced;
use super::validate::{dims2, validate_operands, GemmShape};
use crate::dispatch::Provider;
use crate::format::{act_scale_m_stride, act_scales_view, num_blocks};
use candle_core::cuda_backend::CudaStorage;
use candle_core::op::BackpropOp;
use candle_core::{bail, DType, Layout, Result, Storage, Tensor};

/// `quantize_activation(x)` then our GEMM as two adjacent launches with every buffer allocated
/// first (the GEMM streams its weights while the quantizer runs). `x` bf16/f16/f32 `[M, K]` on
/// the CUDA device of `w`, `M ≥ 1`, `K % 128 == 0`; `w`, `sw` as validated by `Fp8BlockLinear`.
pub(crate) fn quantize_matmul_hopper(x: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    let (m, k) = dims2("x", x)?;
    let n = w.dim(0)?;
    if !x.device().same_device(w.device()) {
        bail!("fp8 linear: x is on {:?} but the weight is on {:?}", x.device(), w.device())
    }
    let x = if x.dtype() == DType::F16 { x.to_dtype(DType::F32)? } else { x.contiguous()? };
    let y = {
        let (xs, xl) = x.storage_and_layout();
        let (ws, wl) = w.storage_and_layout();
        let (ss, sl) = sw.storage_and_layout();
        let (Storage::Cuda(xs), Storage::Cuda(ws), Storage::Cuda(ss)) = (&*xs, &*ws, &*ss) else {
            bail!("fp8 linear: x, weight and weight_scale_inv must all be on the CUDA device")
        };
        crate::cuda::gemm::quantize_gemm((xs, xl), (ws, wl), (ss, sl), m, n, k)?
    };
    log_provider_once(Provider::Hopper);
    Ok(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false))
}

/// One GEMM operand's CUDA storage and layout.
type CudaOperand<'a> = (&'a CudaStorage, &'a Layout);

/// Runs `f` on the CUDA storages of the four GEMM operands (`what`: an error naming the
/// operation when any of them is not on a CUDA device).
fn with_cuda_operands<R>(
    what: &str,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    f: impl FnOnce(CudaOperand<'_>, CudaOperand<'_>, CudaOperand<'_>, CudaOperand<'_>) -> Result<R>,
) -> Result<R> {
    let (qs, ql) = qa.storage_and_layout();
    let (ss, sl) = sa.storage_and_layout();
    let (ws, wl) = w.storage_and_layout();
    let (vs, vl) = sw.storage_and_layout();
    let (Storage::Cuda(qs), Storage::Cuda(ss), Storage::Cuda(ws), Storage::Cuda(vs)) = (&*qs, &*ss, &*ws, &*vs) else {
        bail!("{what}: qa, sa, w and sw must all be on the CUDA device")
    };
    f((qs, ql), (ss, sl), (ws, wl), (vs, vl))
}

/// Our GEMM with the split-K reduction left to the caller when the schedule splits K through
/// the workspace (`cuda::hopper_gemm_unreduced`). Operands validated as for
/// [`fp8_block_matmul`]; all on one CUDA device.
pub(crate) fn fp8_block_matmul_unreduced(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Unreduced> {
    use crate::cuda::gemm::GemmOutput;
    let GemmShape { m, n, k } = validate_operands(qa, sa, w, sw)?;
    let out = with_cuda_operands("fp8-block-matmul", qa, sa, w, sw, |q, s, w, v| {
        crate::cuda::gemm::hopper_gemm_unreduced(q, s, w, v, m, n, k)
    })?;
    log_provider_once(Provider::Hopper);
    Ok(match out {
        GemmOutput::Y(y) => Unreduced::Done(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false)),
        GemmOutput::Partials(p, splits) => {
            Unreduced::Partials(Tensor::from_storage(Storage::Cuda(p), (splits, m, n), BackpropOp::none(), false))
        }
    })
}

/// The gate/up GEMM with SiLU·up and the down projection's activation quantization in its
/// epilogue (`cuda::hopper_gemm_swiglu_quant`): `w` = `[gate; up]` `[2·I, K]`; returns the
/// `(qa, sa)` of `silu(gate) * up` `[M, I]`. Operands validated as for [`fp8_block_matmul`];
/// all on one CUDA device; `M <= 16`, `I % 128 == 0`.
pub(crate) fn fp8_swiglu_matmul_quantize(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let GemmShape { m, n, k } = validate_operands(qa, sa, w, sw)?;
    if n % 2 != 0 {
        bail!("fp8 gate/up with SwiGLU: the weight has {n} rows, expected [gate; up] of equal halves")
    }
    let inter = n / 2;
    let (q, s) = with_cuda_operands("fp8 gate/up with SwiGLU", qa, sa, w, sw, |q, s, w, v| {
        crate::cuda::gemm::hopper_gemm_swiglu_quant(q, s, w, v, m, inter, k)
    })?;
    log_provider_once(Provider::Hopper);
    let kb = num_blocks(inter);
    let q = Tensor::from_storage(Storage::Cuda(q), (m, inter), BackpropOp::none(), false);
    let s = Tensor::from_storage(Storage::Cuda(s), kb * act_scale_m_stride(m), BackpropOp::none(), false);
    Ok((q, act_scales_view(s, m, kb)?))
}

/// bf16 `[M, N]` from f32 split-K partials `[splits, M, N]` (contiguous, CUDA), added in split
/// order: the reduction our GEMM runs itself.
pub(crate) fn reduce_partials(partials: &Tensor) -> Result<Tensor> {
    let (splits, m, n) = partials.dims3()?;
    if partials.dtype() != DType::F32 || !partials.is_contiguous() {
        bail!("reduce_partials: need contiguous f32 [splits, M, N], got {:?} {:?}", partials.dtype(), partials.dims())
    }
    let y = {
        let (ps, pl) = partials.storage_and_layout();
        let Storage::Cuda(ps) = &*ps else { bail!("reduce_partials: the partials are not on a CUDA device") };
        crate::cuda::gemm::reduce_partials((ps, pl), splits, m, n)?
    };
    Ok(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false))
}
