//! Prefill attention: the causal attention of a prompt, or of a chunk of it after cached
//! positions, flash style — f32 online softmax over key tiles in shared memory, no `T × T`
//! score buffer, so memory stays linear in the prompt length. Two kernels: the warpgroup-MMA
//! one (`kernels/attention/prefill_wgmma.cu`, head_dim 128) and the mma.sync one
//! (`kernels/attention/prefill.cu`, head_dim 64 and 128); [`PrefillKernel::Auto`] picks.

use std::ffi::c_void;

use candle_core::cuda_backend::cudarc::driver::DevicePtr;
use candle_core::{bail, Result, Storage, Tensor};
use half::bf16;

use super::attention::{
    cache_dims, cuda_device, same_device, status, with_outputs, AttentionOutput, DecodeAttentionOptions, HEAD_DIMS,
};
use super::device::{raw_stream, view};
use super::ffi::{fp8gemm_prefill_attention, fp8gemm_prefill_attention_wgmma};
pub use crate::dispatch::PrefillKernel;

/// Causal attention of `q` `[B, T, num_heads, d]` (bf16, roped, attention scale folded in; `d`
/// 64 or 128) over `k_cache` / `v_cache` `[B, num_kv_heads, capacity, d]` (bf16, contiguous),
/// whose positions `[0, offset + T)` hold the cached prefix and the `T` new tokens' keys and
/// values: token `i` attends positions `[0, offset + i]`. Grouped-query heads share their kv head
/// (`num_heads % num_kv_heads == 0`, any ratio).
///
/// `q` may be a view whose tokens lie `row` elements apart (`row >= num_heads * d`, a multiple
/// of 8, heads contiguous, sequences `T · row` apart): the q part of the q|k rows
/// `[B, T, num_heads + num_kv_heads, d]` narrowed along the heads, without a copy.
///
/// Outputs as `quantized` / `bf16` ask: bf16 `[B * T, num_heads * d]` (token-major rows,
/// head-major columns: the o projection's input) and/or its quantized form (the activation
/// contract; written by the kernel at `d == 128`, by the activation quantizer at 64).
///
/// Runs the kernel [`PrefillKernel::Auto`] picks ([`prefill_attention_with`] chooses).
pub fn prefill_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    offset: usize,
    quantized: bool,
    bf16: bool,
) -> Result<AttentionOutput> {
    prefill_attention_with(q, k_cache, v_cache, offset, quantized, bf16, PrefillKernel::Auto)
}

/// [`prefill_attention`] by the kernel `kernel` asks for (an error for
/// [`PrefillKernel::Wgmma`] at head_dim 64): the tests pin each kernel with it.
#[allow(clippy::too_many_arguments)]
pub fn prefill_attention_with(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    offset: usize,
    quantized: bool,
    bf16: bool,
    kernel: PrefillKernel,
) -> Result<AttentionOutput> {
    if !quantized && !bf16 {
        bail!("candle-fp8 prefill_attention: ask for the quantized and/or the bf16 output")
    }
    let dev = cuda_device(q, "q")?;
    same_device(&dev, k_cache, "k_cache")?;
    same_device(&dev, v_cache, "v_cache")?;
    if q.dtype() != candle_core::DType::BF16 {
        bail!("candle-fp8 prefill_attention: q must be bf16, got {:?}", q.dtype())
    }
    let (b, t, hq, d) = match q.dims() {
        &[b, t, h, d] if HEAD_DIMS.contains(&d) && b > 0 && t > 0 && h > 0 => (b, t, h, d),
        d => bail!(
            "candle-fp8 prefill_attention: q must be [batch, tokens, num_heads, head_dim] with head_dim one of \
             {HEAD_DIMS:?}, got {d:?}"
        ),
    };
    let st = q.stride();
    let row = st[1];
    if st[3] != 1
        || st[2] != d
        || row < hq * d
        || row % 8 != 0
        || (b > 1 && st[0] != t * row)
        || q.layout().start_offset() % 8 != 0
    {
        bail!(
            "candle-fp8 prefill_attention: q {:?} must have contiguous heads and tokens a multiple of 8 elements \
             apart (strides [T * row, row, head_dim, 1], 16-byte aligned start), got strides {st:?} from element {}",
            q.dims(),
            q.layout().start_offset()
        )
    }
    let kd = cache_dims(k_cache, "k_cache")?;
    let vd = cache_dims(v_cache, "v_cache")?;
    if kd != vd || kd.0 != b || kd.3 != d {
        bail!(
            "candle-fp8 prefill_attention: caches must both be [{b}, kv_heads, capacity, {d}], got k_cache {:?} and \
             v_cache {:?}",
            k_cache.dims(),
            v_cache.dims()
        )
    }
    let (hkv, cap) = (kd.1, kd.2);
    if hq % hkv != 0 {
        bail!("candle-fp8 prefill_attention: num_heads {hq} must be a multiple of num_kv_heads {hkv}")
    }
    let kernel = kernel.resolve(d);
    if kernel == PrefillKernel::Wgmma && d != 128 {
        bail!("candle-fp8 prefill_attention: the wgmma kernel takes head_dim 128 only, got {d}")
    }
    if offset + t > cap {
        bail!("candle-fp8 prefill_attention: offset {offset} + {t} tokens exceed the cache capacity {cap}")
    }
    if b > 65535 || hq > 65535 || t > 65535 * 64 {
        bail!(
            "candle-fp8 prefill_attention: batch {b} and num_heads {hq} must be at most 65535, tokens {t} at most {}",
            65535 * 64
        )
    }
    let guards = [q, k_cache, v_cache].map(|t| t.storage_and_layout());
    let stream = dev.cuda_stream();
    let spans = [(b * t - 1) * row + hq * d, k_cache.elem_count(), v_cache.elem_count()];
    let mut views = Vec::with_capacity(3);
    for (((st, l), what), n) in guards.iter().zip(["q", "k_cache", "v_cache"]).zip(spans) {
        let Storage::Cuda(cs) = &**st else { bail!("candle-fp8 prefill_attention: {what} is not on a CUDA device") };
        views.push(view::<bf16>(what, cs, l, n)?);
    }
    let read: Vec<_> = views.iter().map(|v| v.device_ptr(&stream)).collect();
    let opts = DecodeAttentionOptions { quantized, bf16, splits: Some(1) };
    with_outputs(&dev, b * t, hq, d, 1, opts, &|o| {
        let launch = match kernel {
            PrefillKernel::Wgmma => fp8gemm_prefill_attention_wgmma,
            _ => fp8gemm_prefill_attention,
        };
        let st = unsafe {
            launch(
                read[0].0 as *const c_void,
                row as i64,
                read[1].0 as *const c_void,
                read[2].0 as *const c_void,
                b as i64,
                t as i64,
                hq as i64,
                hkv as i64,
                d as i64,
                cap as i64,
                offset as i64,
                o.qa,
                o.sa,
                o.out,
                raw_stream(&dev),
            )
        };
        status(
            &format!(
                "prefill_attention ({kernel:?}; batch {b}, tokens {t}, heads {hq}/{hkv}, head_dim {d}, offset {offset}, \
                 capacity {cap})"
            ),
            st,
        )
    })
}
