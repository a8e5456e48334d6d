//! The grouped GEMMs on our grouped kernels (CUDA): when they apply, and the ops that run them
//! (every expert in one launch; the masked layout's counts stay on the device): the plain GEMM
//! and the gate/up GEMM with the SwiGLU + quantization epilogue.

use super::matmul::log_once;
use super::validate::device_caps;
use crate::cuda::grouped::{
    grouped_block_tokens, grouped_scale_buffer_len, hopper_grouped_gemm, hopper_grouped_swiglu_quant, TokenLayout,
};
use crate::dispatch::{choose_provider, Fp8Options, Provider};
use crate::format::BLOCK;
use candle_core::{bail, CpuStorage, CudaStorage, CustomOp3, Layout, Result, Shape, Tensor};

/// Whether the grouped kernel runs a grouped GEMM of `N` features over `K` on `qa`'s device:
/// the provider choice for the shape is ours (sm_90, a fast-path shape, not forced elsewhere by
/// the options) and `N % 128 == 0` (each expert's weight rows whole 128-row scale blocks of the
/// stacked weight). Otherwise the ops run the dense GEMM per expert.
pub(crate) fn grouped_kernel_applies(opts: &Fp8Options, qa: &Tensor, n: usize, k: usize) -> Result<bool> {
    if !qa.device().is_cuda() || n == 0 || n % BLOCK != 0 {
        return Ok(false);
    }
    let caps = device_caps(qa.device())?;
    Ok(choose_provider(opts.backend, &caps, 1, n, k)? == Provider::Hopper)
}

/// Most tokens an expert may have for the contiguous gate/up GEMM with SwiGLU to run on the gated
/// kernel: its 16-token swap-AB tiles are a decode-size schedule; past this (prefill) the grouped
/// GEMM's tokens-on-M tiles and one SwiGLU + quantization launch run instead.
pub(crate) const SWIGLU_KERNEL_MAX_TOKENS: usize = 64;

/// The grouped kernel as an op: `qa`, `w` and the device counts are its arguments, the scales
/// and the layout travel here.
struct GroupedKernel {
    sa: Tensor,
    sw: Tensor,
    e: usize,
    n: usize,
    k: usize,
    layout: TokenLayout,
    block_tokens: usize,
    out: Shape,
}

impl CustomOp3 for GroupedKernel {
    fn name(&self) -> &'static str {
        "fp8-grouped-matmul-kernel"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        bail!("fp8-grouped-matmul-kernel: the grouped kernel runs on CUDA devices only")
    }

    fn cuda_fwd(
        &self,
        qa: &CudaStorage,
        qa_l: &Layout,
        w: &CudaStorage,
        w_l: &Layout,
        counts: &CudaStorage,
        counts_l: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (candle_core::Storage::Cuda(sa), candle_core::Storage::Cuda(sw)) = (&*sa_st, &*sw_st) else {
            bail!("fp8-grouped-matmul-kernel: scales are not on the CUDA device while qa and w are")
        };
        let y = hopper_grouped_gemm(
            (qa, qa_l),
            (sa, sa_l),
            (w, w_l),
            (sw, sw_l),
            (counts, counts_l),
            self.e,
            self.n,
            self.k,
            self.layout,
            self.block_tokens,
        )?;
        Ok((y, self.out.clone()))
    }
}

/// The masked grouped GEMM on the kernel: `qa` `[E, max_m, K]`, `counts` u32 `[E]` on the
/// device (never read on the host; a count above `max_m` is taken as `max_m`). Operands
/// validated by the caller, `E · max_m · N > 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn masked_on_kernel(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
    e: usize,
    max_m: usize,
    n: usize,
    k: usize,
) -> Result<Tensor> {
    log_once(Provider::Hopper, "grouped GEMM (masked): the grouped kernel");
    let op = GroupedKernel {
        sa: sa.clone(),
        sw: sw.clone(),
        e,
        n,
        k,
        layout: TokenLayout::Masked { max_m },
        block_tokens: grouped_block_tokens(max_m),
        out: Shape::from((e, max_m, n)),
    };
    qa.apply_op3_no_bwd(w, counts, &op)
}

/// The contiguous grouped GEMM on the kernel: `qa` `[rows, K]`, the host `counts` copied to the
/// device for it. Operands and counts validated by the caller, `rows · N > 0`.
pub(crate) fn contiguous_on_kernel(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
    rows: usize,
) -> Result<Tensor> {
    let (e, n, k) = w.dims3()?;
    log_once(Provider::Hopper, "grouped GEMM (contiguous): the grouped kernel");
    let c = device_counts(counts, qa)?;
    let op = GroupedKernel {
        sa: sa.clone(),
        sw: sw.clone(),
        e,
        n,
        k,
        layout: TokenLayout::Contiguous { rows },
        block_tokens: grouped_block_tokens(counts.iter().copied().max().unwrap_or(0)),
        out: Shape::from((rows, n)),
    };
    qa.apply_op3_no_bwd(w, &c, &op)
}

/// The counts of a contiguous launch on the device (u32 `[E]`).
fn device_counts(counts: &[usize], qa: &Tensor) -> Result<Tensor> {
    // Validated: each count is at most the rows (their sum is), so it fits a u32 when rows does.
    let c: Vec<u32> = counts
        .iter()
        .map(|&c| u32::try_from(c))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| candle_core::Error::Msg(format!("counts: a count does not fit in u32 (counts {counts:?})")))?;
    Tensor::from_vec(c, counts.len(), qa.device())
}

/// The gated grouped kernel on the tensors' CUDA storages: `(q [rows, inter], sa buffer)`.
#[allow(clippy::too_many_arguments)]
fn swiglu_on_kernel(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
    e: usize,
    inter: usize,
    k: usize,
    layout: TokenLayout,
) -> Result<(Tensor, Tensor)> {
    use candle_core::op::BackpropOp;
    use candle_core::Storage;
    let (q, s) = {
        let (qs, ql) = qa.storage_and_layout();
        let (ss, sl) = sa.storage_and_layout();
        let (ws, wl) = w.storage_and_layout();
        let (vs, vl) = sw.storage_and_layout();
        let (cs, cl) = counts.storage_and_layout();
        let (Storage::Cuda(qs), Storage::Cuda(ss), Storage::Cuda(ws), Storage::Cuda(vs), Storage::Cuda(cs)) =
            (&*qs, &*ss, &*ws, &*vs, &*cs)
        else {
            bail!("fp8 grouped gate/up with SwiGLU: qa, sa, w, sw and counts must all be on the CUDA device")
        };
        hopper_grouped_swiglu_quant((qs, ql), (ss, sl), (ws, wl), (vs, vl), (cs, cl), e, inter, k, layout)?
    };
    let rows = match layout {
        TokenLayout::Masked { max_m } => e * max_m,
        TokenLayout::Contiguous { rows } => rows,
    };
    let len = grouped_scale_buffer_len(layout, e, inter / BLOCK);
    Ok((
        Tensor::from_storage(Storage::Cuda(q), (rows, inter), BackpropOp::none(), false),
        Tensor::from_storage(Storage::Cuda(s), len, BackpropOp::none(), false),
    ))
}

/// The masked gate/up GEMM with SwiGLU and quantization on the gated kernel: `(q [E, max_m,
/// inter], sa [E, max_m, inter/128])` in the masked layout. Operands validated by the caller,
/// `E · max_m > 0`, `inter % 128 == 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn swiglu_masked_on_kernel(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
    e: usize,
    max_m: usize,
    inter: usize,
    k: usize,
) -> Result<(Tensor, Tensor)> {
    log_once(Provider::Hopper, "grouped gate/up with SwiGLU (masked): the gated grouped kernel");
    let (q, s) = swiglu_on_kernel(qa, sa, w, sw, counts, e, inter, k, TokenLayout::Masked { max_m })?;
    Ok((q.reshape((e, max_m, inter))?, super::grouped::masked_act_scales_view(s, e, max_m, inter / BLOCK)?))
}

/// The contiguous gate/up GEMM with SwiGLU and quantization on the gated kernel: `(q [rows,
/// inter], sa [rows, inter/128])` MN-major. Operands and counts validated by the caller,
/// `rows > 0`, `inter % 128 == 0`.
pub(crate) fn swiglu_contiguous_on_kernel(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
    rows: usize,
    inter: usize,
) -> Result<(Tensor, Tensor)> {
    let (e, _, k) = w.dims3()?;
    log_once(Provider::Hopper, "grouped gate/up with SwiGLU (contiguous): the gated grouped kernel");
    let c = device_counts(counts, qa)?;
    let (q, s) = swiglu_on_kernel(qa, sa, w, sw, &c, e, inter, k, TokenLayout::Contiguous { rows })?;
    Ok((q, crate::format::act_scales_view(s, rows, inter / BLOCK)?))
}
