//! The mixture-of-experts routing kernels (`kernels/moe/routing.cu`) from candle tensors: the
//! router's softmax/top-k with the masked layout's slots, the gather + quantization of the
//! tokens into their slots, the weighted combine. Shapes are validated by the caller
//! (`ops/moe_route.rs`); these check storage and launch.

use std::ffi::c_void;

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::{CudaDevice, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{bail, DType, Result, Storage, Tensor};
use half::bf16;

use super::device::{raw_stream, require_contiguous, view};
use super::ffi;
use crate::format::{act_scale_m_stride, num_blocks, F8E4M3};

/// `t`'s CUDA storage (read-locked) and layout, contiguous, or an error naming it.
macro_rules! cuda_storage {
    ($what:expr, $t:expr => $s:ident, $l:ident) => {
        let (guard, $l) = $t.storage_and_layout();
        let Storage::Cuda($s) = &*guard else {
            bail!("candle-fp8 mixture-of-experts routing: {} is not on a CUDA device", $what)
        };
        require_contiguous($what, $l)?;
    };
}

fn wrap(s: CudaStorage, shape: impl Into<candle_core::Shape>) -> Tensor {
    Tensor::from_storage(Storage::Cuda(s), shape, BackpropOp::none(), false)
}

/// `(ids u32 [m, top_k], weights f32 [m, top_k], pos u32 [m, top_k], counts u32 [local])` of
/// f32 `logits` `[m, experts]` (`fp8gemm_moe_route`).
pub(crate) fn route(
    logits: &Tensor,
    top_k: usize,
    norm: bool,
    first: usize,
    local: usize,
    max_m: usize,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let (m, experts) = logits.dims2()?;
    cuda_storage!("the router logits", logits => ls, ll);
    let dev: CudaDevice = ls.device.clone();
    let stream = dev.cuda_stream();
    // SAFETY: the kernel writes every element of the four outputs.
    let (mut ids, mut w, mut pos, mut counts) = unsafe {
        (
            dev.alloc::<u32>(m * top_k)?,
            dev.alloc::<f32>(m * top_k)?,
            dev.alloc::<u32>(m * top_k)?,
            dev.alloc::<u32>(local)?,
        )
    };
    {
        let lv = view::<f32>("the router logits", ls, ll, m * experts)?;
        let (l_ptr, _g0) = lv.device_ptr(&stream);
        let (i_ptr, _g1) = ids.device_ptr_mut(&stream);
        let (w_ptr, _g2) = w.device_ptr_mut(&stream);
        let (p_ptr, _g3) = pos.device_ptr_mut(&stream);
        let (c_ptr, _g4) = counts.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_moe_route(
                l_ptr as *const f32,
                m as i64,
                experts as i32,
                top_k as i32,
                norm as i32,
                first as i32,
                local as i32,
                max_m as i64,
                i_ptr as *mut u32,
                w_ptr as *mut f32,
                p_ptr as *mut u32,
                c_ptr as *mut u32,
                raw_stream(&dev),
            )
        };
        ffi::check(
            &format!("moe routing (m={m} experts={experts} top_k={top_k} local={first}..{})", first + local),
            status,
        )?;
    }
    Ok((
        wrap(CudaStorage::wrap_cuda_slice(ids, dev.clone()), (m, top_k)),
        wrap(CudaStorage::wrap_cuda_slice(w, dev.clone()), (m, top_k)),
        wrap(CudaStorage::wrap_cuda_slice(pos, dev.clone()), (m, top_k)),
        wrap(CudaStorage::wrap_cuda_slice(counts, dev), local),
    ))
}

/// `(q e4m3 [local · max_m, k], sa f32 [local · kb · round_up(max_m, 4)])`: the rows of `x`
/// `[m, k]` (bf16 or f32) quantized into their slots `pos` (`fp8gemm_moe_gather_quant`). Rows
/// and scales of no slot are zeros (one memset each).
pub(crate) fn gather_quantize(x: &Tensor, pos: &Tensor, local: usize, max_m: usize) -> Result<(Tensor, Tensor)> {
    let (m, k) = x.dims2()?;
    let top_k = pos.dim(1)?;
    let dtype = match x.dtype() {
        DType::BF16 => ffi::FP8GEMM_BF16,
        DType::F32 => ffi::FP8GEMM_F32,
        d => bail!("candle-fp8 moe gather: x must be bf16 or f32, got {d:?}"),
    };
    cuda_storage!("x", x => xs, xl);
    cuda_storage!("the slots", pos => ps, pl);
    let dev = xs.device.clone();
    let stream = dev.cuda_stream();
    let slen = local * num_blocks(k) * act_scale_m_stride(max_m);
    let mut q = dev.alloc_zeros::<F8E4M3>(local * max_m * k)?;
    let mut sa = dev.alloc_zeros::<f32>(slen)?;
    {
        let (xb, xf);
        let (x_ptr, _g0) = if dtype == ffi::FP8GEMM_BF16 {
            xb = view::<bf16>("x", xs, xl, m * k)?;
            xb.device_ptr(&stream)
        } else {
            xf = view::<f32>("x", xs, xl, m * k)?;
            xf.device_ptr(&stream)
        };
        let pv = view::<u32>("the slots", ps, pl, m * top_k)?;
        let (p_ptr, _g1) = pv.device_ptr(&stream);
        let (q_ptr, _g2) = q.device_ptr_mut(&stream);
        let (s_ptr, _g3) = sa.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_moe_gather_quant(
                x_ptr as *const c_void,
                dtype,
                m as i64,
                k as i64,
                top_k as i32,
                p_ptr as *const u32,
                max_m as i64,
                q_ptr as *mut u8,
                s_ptr as *mut f32,
                raw_stream(&dev),
            )
        };
        ffi::check(&format!("moe gather + quantize (m={m} k={k} top_k={top_k} max_m={max_m})"), status)?;
    }
    Ok((
        wrap(CudaStorage::wrap_cuda_slice(q, dev.clone()), (local, max_m, k)),
        wrap(CudaStorage::wrap_cuda_slice(sa, dev), slen),
    ))
}

/// `[m, n]` in `dtype` (f32 or bf16): each token's weighted expert rows of `y` (bf16 `[slots,
/// n]`) summed in ascending slot order (`fp8gemm_moe_combine`).
pub(crate) fn combine(y: &Tensor, pos: &Tensor, weights: &Tensor, dtype: DType) -> Result<Tensor> {
    let (slots, n) = y.dims2()?;
    let (m, top_k) = pos.dims2()?;
    cuda_storage!("the expert outputs", y => ys, yl);
    cuda_storage!("the slots", pos => ps, pl);
    cuda_storage!("the routing weights", weights => ws, wl);
    let dev = ys.device.clone();
    let stream = dev.cuda_stream();
    let yv = view::<bf16>("the expert outputs", ys, yl, slots * n)?;
    let pv = view::<u32>("the slots", ps, pl, m * top_k)?;
    let wv = view::<f32>("the routing weights", ws, wl, m * top_k)?;
    let (y_ptr, _g0) = yv.device_ptr(&stream);
    let (p_ptr, _g1) = pv.device_ptr(&stream);
    let (w_ptr, _g2) = wv.device_ptr(&stream);
    let launch = |out: *mut c_void, code: i32| -> Result<()> {
        let status = unsafe {
            ffi::fp8gemm_moe_combine(
                y_ptr as *const c_void,
                m as i64,
                n as i64,
                top_k as i32,
                p_ptr as *const u32,
                w_ptr as *const f32,
                out,
                code,
                raw_stream(&dev),
            )
        };
        ffi::check(&format!("moe combine (m={m} n={n} top_k={top_k})"), status)
    };
    // SAFETY: the kernel writes every element of out.
    let out = match dtype {
        DType::F32 => {
            let mut o = unsafe { dev.alloc::<f32>(m * n)? };
            let (o_ptr, _g) = o.device_ptr_mut(&stream);
            launch(o_ptr as *mut c_void, ffi::FP8GEMM_F32)?;
            drop(_g);
            CudaStorage::wrap_cuda_slice(o, dev.clone())
        }
        DType::BF16 => {
            let mut o = unsafe { dev.alloc::<bf16>(m * n)? };
            let (o_ptr, _g) = o.device_ptr_mut(&stream);
            launch(o_ptr as *mut c_void, ffi::FP8GEMM_BF16)?;
            drop(_g);
            CudaStorage::wrap_cuda_slice(o, dev.clone())
        }
        d => bail!("candle-fp8 moe combine: output dtype must be f32 or bf16, got {d:?}"),
    };
    Ok(wrap(out, (m, n)))
}
