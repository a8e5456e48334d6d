//! Our grouped (mixture-of-experts) GEMM kernel from candle storages: every expert in one
//! launch, the per-expert counts read on the device (`fp8gemm_grouped_gemm`, kernels/api.h).

use std::ffi::c_void;

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, Layout, Result};
use half::bf16;

use super::device::{raw_stream, view};
use super::ffi;
use crate::format::{act_scale_m_stride, num_blocks, BLOCK, F8E4M3};

/// Tokens per tile of the grouped kernel for experts of at most `max_tokens` tokens each: the
/// smallest swap-AB tile (8, 16, 32, 64 tokens) that holds them, else 128: the tokens-on-M tile
/// of prefill sizes (128 tokens x 128 weight rows, several token tiles per expert).
pub(crate) fn grouped_block_tokens(max_tokens: usize) -> usize {
    [8, 16, 32, 64].into_iter().find(|&t| max_tokens <= t).unwrap_or(128)
}

/// The experts' token layout of a grouped launch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TokenLayout {
    /// `[E, max_m, K]`: expert `e`'s tokens at rows `e · max_m ..`, scales per expert MN-major
    /// `[E][kb][round_up(max_m, 4)]`.
    Masked { max_m: usize },
    /// `[rows, K]`: the experts' tokens one after the other, scales MN-major
    /// `[kb][round_up(rows, 4)]`.
    Contiguous { rows: usize },
}

impl TokenLayout {
    /// Token rows of the stacked operand.
    fn rows(self, e: usize) -> usize {
        match self {
            TokenLayout::Masked { max_m } => e * max_m,
            TokenLayout::Contiguous { rows } => rows,
        }
    }

    /// Elements of the scale buffer the kernel may read (the last scale row up to its tokens).
    fn scale_len(self, e: usize, kb: usize) -> usize {
        match self {
            TokenLayout::Masked { max_m } => (e * kb - 1) * act_scale_m_stride(max_m) + max_m,
            TokenLayout::Contiguous { rows } => (kb - 1) * act_scale_m_stride(rows) + rows,
        }
    }
}

/// The operands of one grouped launch (`n`: each expert's weight rows), as device pointers with
/// their read guards; `f` launches.
#[allow(clippy::too_many_arguments)]
fn with_grouped_operands<R>(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    counts: (&CudaStorage, &Layout),
    e: usize,
    n: usize,
    k: usize,
    layout: TokenLayout,
    f: impl FnOnce(&GroupedPtrs) -> Result<R>,
) -> Result<R> {
    let rows = layout.rows(e);
    if e == 0 || n == 0 || k == 0 || rows == 0 {
        bail!("candle-fp8 grouped GEMM: empty shape E={e} N={n} K={k} rows={rows}")
    }
    let stream = qa.0.device.cuda_stream();
    let kb = num_blocks(k);
    let qv = view::<F8E4M3>("the quantized activation", qa.0, qa.1, rows * k)?;
    let sv = view::<f32>("the activation scales", sa.0, sa.1, layout.scale_len(e, kb))?;
    let wv = view::<F8E4M3>("the stacked weights", w.0, w.1, e * n * k)?;
    let swv = view::<f32>("the stacked weight scales", sw.0, sw.1, e * num_blocks(n) * kb)?;
    let cv = view::<u32>("the counts", counts.0, counts.1, e)?;
    let (qa, _g1) = qv.device_ptr(&stream);
    let (sa, _g2) = sv.device_ptr(&stream);
    let (w, _g3) = wv.device_ptr(&stream);
    let (sw, _g4) = swv.device_ptr(&stream);
    let (counts, _g5) = cv.device_ptr(&stream);
    f(&GroupedPtrs {
        qa: qa as *const u8,
        sa: sa as *const f32,
        w: w as *const u8,
        sw: sw as *const f32,
        counts: counts as *const u32,
        max_m: match layout {
            TokenLayout::Masked { max_m } => max_m as i64,
            TokenLayout::Contiguous { .. } => 0,
        },
        rows: rows as i64,
    })
}

/// Device pointers and sizes of one grouped launch.
struct GroupedPtrs {
    qa: *const u8,
    sa: *const f32,
    w: *const u8,
    sw: *const f32,
    counts: *const u32,
    max_m: i64,
    rows: i64,
}

/// bf16 `[rows, n]` = the grouped GEMM of `qa` (`[rows, k]` e4m3 in `layout`) and the stacked
/// weights `w` (`[e · n, k]` e4m3) / `sw` (`[e · n / 128, ceil(k / 128)]` f32), `counts` (u32
/// `[e]`, on the device) tokens per expert, `block_tokens` tokens per tile
/// ([`grouped_block_tokens`]). Rows past the counts are zeros. Inputs are validated by the
/// caller (shapes, dtypes, contiguity; `n % 128 == 0`, `k % 16 == 0`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn hopper_grouped_gemm(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    counts: (&CudaStorage, &Layout),
    e: usize,
    n: usize,
    k: usize,
    layout: TokenLayout,
    block_tokens: usize,
) -> Result<CudaStorage> {
    let dev = qa.0.device.clone();
    let stream = dev.cuda_stream();
    // SAFETY: the kernel writes every element of y (the tiles below the counts, zeros past them).
    let mut y = unsafe { dev.alloc::<bf16>(layout.rows(e) * n)? };
    with_grouped_operands(qa, sa, w, sw, counts, e, n, k, layout, |p| {
        let (y_ptr, _gy) = y.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_grouped_gemm(
                p.qa,
                p.sa,
                p.w,
                p.sw,
                y_ptr as *mut c_void,
                p.counts,
                e as i64,
                p.max_m,
                p.rows,
                n as i64,
                k as i64,
                block_tokens as i32,
                raw_stream(&dev),
            )
        };
        ffi::check(&format!("grouped GEMM (E={e} N={n} K={k} {layout:?}, {block_tokens} tokens per tile)"), status)
    })?;
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

/// Elements of the gated grouped GEMM's scale output: the down projection's activation scales
/// (`kb = inter / 128`) in `layout`.
pub(crate) fn grouped_scale_buffer_len(layout: TokenLayout, e: usize, kb: usize) -> usize {
    match layout {
        TokenLayout::Masked { max_m } => e * kb * act_scale_m_stride(max_m),
        TokenLayout::Contiguous { rows } => kb * act_scale_m_stride(rows),
    }
}

/// The experts' gate/up GEMM with SiLU·up and the down projection's quantization in its
/// epilogue: `w` = each expert's `[gate; up]` (`[e · 2 · inter, k]` stacked), `sw` its scales;
/// returns `(q [rows, inter] e4m3, sa)` with `sa` of [`grouped_scale_buffer_len`] floats in
/// `layout`'s scale layout. The rows at or past the counts (and the padding rows of `sa`) are
/// unspecified. `inter % 128 == 0`; the rest as [`hopper_grouped_gemm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn hopper_grouped_swiglu_quant(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    counts: (&CudaStorage, &Layout),
    e: usize,
    inter: usize,
    k: usize,
    layout: TokenLayout,
) -> Result<(CudaStorage, CudaStorage)> {
    if inter == 0 || inter % BLOCK != 0 {
        bail!("candle-fp8 grouped gate/up with SwiGLU: need a multiple of {BLOCK} features, got inter={inter}")
    }
    let dev = qa.0.device.clone();
    let stream = dev.cuda_stream();
    let rows = layout.rows(e);
    // SAFETY: the kernel writes every element the contract defines (the rows below the counts);
    // the others are unspecified by the contract.
    let mut q = unsafe { dev.alloc::<F8E4M3>(rows * inter)? };
    let mut s = unsafe { dev.alloc::<f32>(grouped_scale_buffer_len(layout, e, inter / BLOCK))? };
    with_grouped_operands(qa, sa, w, sw, counts, e, 2 * inter, k, layout, |p| {
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (s_ptr, _gs) = s.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_grouped_gemm_swiglu_quant(
                p.qa,
                p.sa,
                p.w,
                p.sw,
                p.counts,
                e as i64,
                p.max_m,
                p.rows,
                inter as i64,
                k as i64,
                q_ptr as *mut u8,
                s_ptr as *mut f32,
                raw_stream(&dev),
            )
        };
        ffi::check(&format!("grouped gate/up with SwiGLU (E={e} inter={inter} K={k} {layout:?})"), status)
    })?;
    Ok((CudaStorage::wrap_cuda_slice(q, dev.clone()), CudaStorage::wrap_cuda_slice(s, dev)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_tokens_cover_the_largest_expert() {
        for (m, t) in
            [(0, 8), (1, 8), (8, 8), (9, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64), (65, 128), (4096, 128)]
        {
            assert_eq!(grouped_block_tokens(m), t, "max tokens {m}");
        }
    }
}
