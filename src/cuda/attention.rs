//! Decode-step attention kernels (`kernels/attention/`): the attention of one new token per
//! sequence of a grouped-query model with `head_dim` 64 or 128 ([`HEAD_DIMS`]), with (Qwen3) or
//! without (Llama, Qwen2) an RMSNorm of the q and k heads ([`QkNorm`]).
//!
//! - [`decode_step_attention`]: the whole step in one launch —
//!   per-head RMSNorm of q and k (or none), their per-head weights, RoPE, the KV-cache append
//!   and the attention, written as the o-projection's quantized activation and/or bf16. What
//!   the decoder models run.
//! - The same as two launches (three when the cache positions are split over CTAs), kept as
//!   building blocks and as the reference the one-launch kernel equals bit for bit:
//!   [`qk_norm_rope_append`] (bit-compatible with candle's
//!   `rms_norm` (or nothing) → `broadcast_mul` → `rope_thd` → `slice_set` path) and
//!   [`decode_attention`] (f32 scores, softmax and P·V over the cached positions, written as the
//!   o-projection's quantized activation `(qa, sa)` — the exact activation-quantization
//!   contract — and/or bf16).
//!
//! The quantized output at `head_dim == 128` is written by the attention kernel itself (one
//! 128-wide group per head). At `head_dim == 64` a group spans two heads, which need not be in
//! one CTA (SmolLM2: three query heads per kv head), so the kernel writes bf16 and the activation
//! quantizer (`fp8gemm_quantize_act`) quantizes it: one launch more, and the values quantized
//! are the bf16-rounded outputs (as candle's path quantizes them).
//!
//! Everything launches on candle's stream for the device and never synchronizes.

use std::ffi::c_void;

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use candle_core::cuda_backend::{CudaDevice, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{bail, CpuStorage, DType, Device, InplaceOp1, Layout, Result, Storage, Tensor};
use half::bf16;

use super::device::{device_info, raw_stream, view};
use super::ffi::{self, *};
use crate::format::{act_scale_m_stride, num_blocks, F8E4M3};

/// The head dimension at which the attention kernels quantize their output themselves (one head
/// = one 128-wide quantization group); the largest of [`HEAD_DIMS`].
pub const HEAD_DIM: usize = 128;
/// Every head dimension the kernels take.
pub const HEAD_DIMS: [usize; 2] = [64, 128];

/// What happens to the q and k heads of the new token before their per-head weights (`qk_norm`,
/// which carries any attention scale on its q rows) and RoPE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QkNorm {
    /// A per-head RMSNorm (Qwen3): `bf16(rms_norm(x)) * w`.
    #[default]
    Rms,
    /// No norm (Llama, Qwen2): `x * w` (the weights are then ones, the q rows times the attention
    /// scale), one bf16 rounding — candle's `broadcast_mul`.
    WeightOnly,
}

impl QkNorm {
    fn flags(self) -> u32 {
        match self {
            Self::Rms => 0,
            Self::WeightOnly => ATTN_NO_QK_NORM,
        }
    }
}
/// Cache positions per tile of the attention kernel (the unit of a position split).
pub const POSITION_TILE: usize = 32;
/// Most query heads per kv head (`num_heads / num_kv_heads`) the attention kernel takes.
pub const MAX_QUERIES_PER_KV_HEAD: usize = 16;

/// Why the decode-attention kernels cannot run on `device` (`None`: they can): they are
/// compiled for sm_90a only.
pub fn unavailable_reason(device: &Device) -> Option<String> {
    super::sm90_kernels_unavailable(device)
}

/// Whether the decode-attention kernels can run on `device`.
pub fn is_available(device: &Device) -> bool {
    unavailable_reason(device).is_none()
}

/// How many position splits [`decode_attention`] uses by default: enough CTAs
/// (`batch * kv_heads * splits`) for about two per SM, never more splits than
/// [`POSITION_TILE`]-position tiles. (A decode step is latency-bound: at batch 1, 8 kv heads
/// and ~100 positions, 4 splits of 32 positions run in a fraction of one CTA over all of them.)
pub fn default_splits(batch: usize, kv_heads: usize, len: usize, num_sms: usize) -> usize {
    let tiles = len.div_ceil(POSITION_TILE).max(1);
    let ctas = (batch * kv_heads).max(1);
    (2 * num_sms.max(1)).div_ceil(ctas).clamp(1, tiles)
}

pub(super) fn cuda_device(t: &Tensor, what: &str) -> Result<CudaDevice> {
    match t.device() {
        Device::Cuda(d) => Ok(d.clone()),
        d => bail!("candle-fp8 attention: {what} must be on a CUDA device, got {d:?}"),
    }
}

fn check_bf16_contiguous(t: &Tensor, what: &str) -> Result<()> {
    if t.dtype() != DType::BF16 {
        bail!("candle-fp8 attention: {what} must be bf16, got {:?} (shape {:?})", t.dtype(), t.dims())
    }
    if !t.is_contiguous() {
        bail!("candle-fp8 attention: {what} must be contiguous, got shape {:?} stride {:?}", t.dims(), t.stride())
    }
    // The kernels load 16-byte vectors: the first element must sit on a 16-byte boundary.
    if t.layout().start_offset() % 8 != 0 {
        bail!(
            "candle-fp8 attention: {what} starts at element {} of its storage, which is not \
             16-byte aligned (need a multiple of 8 bf16 elements)",
            t.layout().start_offset()
        )
    }
    Ok(())
}

pub(super) fn same_device(a: &CudaDevice, t: &Tensor, what: &str) -> Result<()> {
    if !t.device().same_device(&Device::Cuda(a.clone())) {
        bail!("candle-fp8 attention: {what} is on {:?}, not on the same device as the other inputs", t.device())
    }
    Ok(())
}

/// `(batch, kv_heads, capacity, head_dim)` of a `[B, hkv, cap, d]` bf16 contiguous cache, `d` one
/// of [`HEAD_DIMS`].
pub(super) fn cache_dims(t: &Tensor, what: &str) -> Result<(usize, usize, usize, usize)> {
    check_bf16_contiguous(t, what)?;
    match t.dims() {
        &[b, h, cap, d] if HEAD_DIMS.contains(&d) && b > 0 && h > 0 && cap > 0 => Ok((b, h, cap, d)),
        d => bail!("candle-fp8 attention: {what} must be [batch, kv_heads, capacity, head_dim] with head_dim one of {HEAD_DIMS:?}, got {d:?}"),
    }
}

/// Device address of the allocation behind a tensor: equal for views of one storage (whose
/// locks must not be taken twice), distinct for distinct buffers.
fn storage_addr(t: &Tensor, dev: &CudaDevice) -> Result<u64> {
    let (st, _) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*st else { bail!("candle-fp8 attention: expected a CUDA tensor") };
    let stream = dev.cuda_stream();
    let s = cs.as_cuda_slice::<bf16>()?;
    let (p, _g) = s.device_ptr(&stream);
    Ok(p)
}

pub(super) fn status(what: &str, st: i32) -> Result<()> {
    ffi::check(what, st)
}

/// Per-head RMSNorm (`norm`: [`QkNorm::Rms`]; none with [`QkNorm::WeightOnly`]) + weight + RoPE
/// of the q and k heads of one decode step (or of a prompt's `T` tokens), and the KV-cache
/// append, in one launch. `d` (the head dimension, 64 or 128) is the caches' last dimension.
///
/// - `qkv`: bf16 contiguous `[B, (num_heads + 2 * num_kv_heads) * d]` (one token per sequence)
///   or `[B, T, (num_heads + 2 * num_kv_heads) * d]` (`T` tokens per sequence, at positions
///   `offset .. offset + T`): the fused projection output (q heads, then k heads, then v heads).
/// - `qk_norm`: bf16 contiguous `[num_heads + num_kv_heads, d]`: the per-head weights, q rows
///   (with any attention scale folded in), then k rows (ones for a model without a q/k norm).
/// - `cos`, `sin`: bf16 contiguous `[R, d / 2]` (`R >= T`): the RoPE table rows of the tokens'
///   positions, as `candle_nn::rotary_emb::rope_thd` takes them; row `i` is token `i`'s.
/// - `k_cache`, `v_cache`: bf16 contiguous `[B, num_kv_heads, capacity, d]`, two distinct
///   buffers; k and v are written in place at positions `offset .. offset + T <= capacity`.
///
/// Returns q, bf16 `[B, num_heads, d]` (2-D `qkv`) or `[B, T, num_heads, d]` (3-D). The result
/// equals candle's `rms_norm(·, ones, eps)` (or nothing) → `broadcast_mul(qk_norm)` →
/// `rope_thd` bit for bit (same f32 association, same bf16 rounding points).
///
/// `qk_norm`, `cos` and `sin` are read before the kernel waits for the kernel launched just
/// before it (programmatic dependent launch): they must be model constants (weights, RoPE
/// tables), not outputs of that kernel.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_append(
    qkv: &Tensor,
    qk_norm: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    offset: usize,
    num_heads: usize,
    num_kv_heads: usize,
    eps: f32,
    norm: QkNorm,
) -> Result<Tensor> {
    let op = "qk_norm_rope_append";
    let (hq, hkv) = (num_heads, num_kv_heads);
    let (dev, b, t, cap, d) = check_step_inputs(op, qkv, qk_norm, cos, sin, k_cache, v_cache, offset, hq, hkv)?;
    let stream = dev.cuda_stream();
    let mut q_out = unsafe { dev.alloc::<bf16>(b * t * hq * d)? };
    {
        let (q_ptr, _gq) = q_out.device_ptr_mut(&stream);
        with_step_ptrs(op, &dev, t * d, [qkv, qk_norm, cos, sin], k_cache, v_cache, &|ptrs, k_ptr, v_ptr| {
            let st = unsafe {
                fp8gemm_qk_norm_rope_append(
                    ptrs[0] as *const c_void,
                    ptrs[1] as *const c_void,
                    ptrs[2] as *const c_void,
                    ptrs[3] as *const c_void,
                    q_ptr as *mut c_void,
                    k_ptr as *mut c_void,
                    v_ptr as *mut c_void,
                    b as i64,
                    t as i64,
                    hq as i64,
                    hkv as i64,
                    d as i64,
                    cap as i64,
                    offset as i64,
                    eps,
                    norm.flags(),
                    raw_stream(&dev),
                )
            };
            status(
                &format!(
                    "{op} (batch {b}, tokens {t}, heads {hq}/{hkv}, head_dim {d}, {norm:?}, offset {offset}, capacity {cap})"
                ),
                st,
            )
        })?;
    }
    let st = CudaStorage::wrap_cuda_slice(q_out, dev);
    let q = Tensor::from_storage(Storage::Cuda(st), (b, t, hq, d), BackpropOp::none(), false);
    if qkv.rank() == 2 {
        q.squeeze(1)
    } else {
        Ok(q)
    }
}

/// Checks the inputs of a qk-norm + RoPE + append (shared by [`qk_norm_rope_append`] and
/// [`decode_step_attention`]); returns `(device, batch, tokens per sequence, capacity,
/// head_dim)`.
#[allow(clippy::too_many_arguments)]
fn check_step_inputs(
    op: &str,
    qkv: &Tensor,
    qk_norm: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    offset: usize,
    hq: usize,
    hkv: usize,
) -> Result<(CudaDevice, usize, usize, usize, usize)> {
    if hq == 0 || hkv == 0 || hq % hkv != 0 {
        bail!("candle-fp8 {op}: num_heads {hq} must be a non-zero multiple of num_kv_heads {hkv}")
    }
    let dev = cuda_device(qkv, "qkv")?;
    for (t, what) in [(qk_norm, "qk_norm"), (cos, "cos"), (sin, "sin"), (k_cache, "k_cache"), (v_cache, "v_cache")] {
        same_device(&dev, t, what)?;
    }
    check_bf16_contiguous(qkv, "qkv")?;
    // The head dimension is the caches' (checked against every other input below).
    let kd = cache_dims(k_cache, "k_cache")?;
    let vd = cache_dims(v_cache, "v_cache")?;
    let hd = kd.3;
    let width = (hq + 2 * hkv) * hd;
    let (b, t) = match qkv.dims() {
        &[b, w] if w == width && b > 0 => (b, 1),
        &[b, t, w] if w == width && b > 0 && t > 0 => (b, t),
        d => bail!(
            "candle-fp8 {op}: qkv must be [batch, {width}] or [batch, tokens, {width}] ((num_heads {hq} + 2 × \
             num_kv_heads {hkv}) × head_dim {hd}), got {d:?}"
        ),
    };
    if kd != vd || kd.0 != b || kd.1 != hkv {
        bail!(
            "candle-fp8 {op}: caches must both be [{b}, {hkv}, capacity, {hd}], got \
             k_cache {:?} and v_cache {:?}",
            k_cache.dims(),
            v_cache.dims()
        )
    }
    check_bf16_contiguous(qk_norm, "qk_norm")?;
    if qk_norm.dims() != [hq + hkv, hd] {
        bail!("candle-fp8 {op}: qk_norm must be [{}, {hd}], got {:?}", hq + hkv, qk_norm.dims())
    }
    for (table, what) in [(cos, "cos"), (sin, "sin")] {
        check_bf16_contiguous(table, what)?;
        match table.dims() {
            &[r, h] if r >= t && h == hd / 2 => {}
            d => bail!("candle-fp8 {op}: {what} must be [rows >= {t} (the tokens), {}], got {d:?}", hd / 2),
        }
    }
    let cap = kd.2;
    if offset >= cap {
        bail!("candle-fp8 {op}: offset {offset} is beyond the cache capacity {cap}")
    }
    if t > cap - offset {
        bail!("candle-fp8 {op}: offset {offset} + {t} tokens exceed the cache capacity {cap}")
    }
    // The caches are locked for writing while the inputs are locked for reading: one storage
    // in both roles would deadlock (and alias).
    let (ka, va) = (storage_addr(k_cache, &dev)?, storage_addr(v_cache, &dev)?);
    for (t, what) in [(qkv, "qkv"), (qk_norm, "qk_norm"), (cos, "cos"), (sin, "sin")] {
        let a = storage_addr(t, &dev)?;
        if a == ka || a == va {
            bail!("candle-fp8 {op}: {what} shares its storage with a KV cache")
        }
    }
    if ka == va {
        bail!("candle-fp8 {op}: k_cache and v_cache share one storage; they must be distinct buffers")
    }
    Ok((dev, b, t, cap, hd))
}

/// Runs `launch(read pointers of [qkv, qk_norm, cos, sin], k_cache pointer, v_cache pointer)`
/// with the four inputs locked for reading and both caches locked for writing (the inputs of
/// [`check_step_inputs`]; cos/sin are viewed as their first `rope_elems / (d / 2)` rows).
fn with_step_ptrs(
    op: &str,
    dev: &CudaDevice,
    rope_elems: usize,
    inputs: [&Tensor; 4],
    k_cache: &Tensor,
    v_cache: &Tensor,
    launch: &dyn Fn([u64; 4], u64, u64) -> Result<()>,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let guards = inputs.map(|t| t.storage_and_layout());
    let mut views = Vec::with_capacity(4);
    for (i, ((st, l), what)) in guards.iter().zip(["qkv", "qk_norm", "cos", "sin"]).enumerate() {
        let Storage::Cuda(cs) = &**st else { bail!("candle-fp8 {op}: {what} is not on a CUDA device") };
        let n = if i < 2 { l.shape().elem_count() } else { rope_elems / 2 };
        views.push(view::<bf16>(what, cs, l, n)?);
    }
    let read: Vec<_> = views.iter().map(|v| v.device_ptr(&stream)).collect();
    let mut ptrs = [0u64; 4];
    for (p, (ptr, _)) in ptrs.iter_mut().zip(&read) {
        *p = *ptr;
    }
    let write_v = |k_ptr: u64| -> Result<()> {
        let write = |v_ptr: u64| launch(ptrs, k_ptr, v_ptr);
        v_cache.inplace_op1(&WithMutPtr { name: "decode-step-append-v", inner: &write })
    };
    k_cache.inplace_op1(&WithMutPtr { name: "decode-step-append-k", inner: &write_v })
}

/// An in-place op that hands the write pointer of a bf16 CUDA tensor's first element to
/// `inner` (which launches the kernel that writes it) while candle's write lock is held.
struct WithMutPtr<'a> {
    name: &'static str,
    inner: &'a dyn Fn(u64) -> Result<()>,
}

impl InplaceOp1 for WithMutPtr<'_> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        bail!("candle-fp8 {}: CUDA only", self.name)
    }

    fn cuda_fwd(&self, s: &mut CudaStorage, l: &Layout) -> Result<()> {
        let stream = s.device.cuda_stream();
        let slice = s.as_cuda_slice_mut::<bf16>()?;
        let (off, n) = (l.start_offset(), l.shape().elem_count());
        if off + n > slice.len() {
            bail!(
                "candle-fp8 {}: the tensor needs {n} elements from offset {off}, its storage holds {}",
                self.name,
                slice.len()
            )
        }
        let mut v = slice.slice_mut(off..off + n);
        let (p, _g) = v.device_ptr_mut(&stream);
        (self.inner)(p)
    }
}

/// Which outputs [`decode_attention`] writes, and how it splits the positions.
#[derive(Debug, Clone, Copy)]
pub struct DecodeAttentionOptions {
    /// Write the quantized o-projection activation `(qa, sa)`.
    pub quantized: bool,
    /// Write the bf16 attention output.
    pub bf16: bool,
    /// Position splits (`None`: [`default_splits`]); clamped to `[1, ceil(len / POSITION_TILE)]`.
    pub splits: Option<usize>,
}

impl Default for DecodeAttentionOptions {
    fn default() -> Self {
        Self { quantized: true, bf16: false, splits: None }
    }
}

/// The outputs of [`decode_attention`] and [`prefill_attention`](super::prefill::prefill_attention).
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `(qa, sa)`: e4m3 `[B, num_heads * d]` and its f32 scales `[B, ceil(num_heads * d / 128)]`
    /// with strides `(1, round_up(B, 4))` — the operand pair `crate::ops::fp8_block_matmul`
    /// takes. At `d == 128` the attention's f32 output quantized in the kernel (one group per
    /// head); at `d == 64` its bf16 output quantized by the activation quantizer.
    pub quantized: Option<(Tensor, Tensor)>,
    /// bf16 `[B, num_heads * d]` (head-major columns, like the o-projection's input).
    pub bf16: Option<Tensor>,
}

/// Decode attention of `q` `[B, num_heads, d]` (bf16, contiguous, attention scale already
/// folded in; `d` 64 or 128) over positions `[0, len)` of `k_cache`/`v_cache` `[B,
/// num_kv_heads, capacity, d]` (bf16, contiguous): f32 scores, max-subtracted f32 softmax and
/// f32 P·V; grouped-query heads share their kv head (`num_heads % num_kv_heads == 0`, at most 16
/// query heads per kv head). Cache positions before `len - 1` are read before the kernel waits
/// for the kernel launched just before it (their HBM latency then overlaps it): only `q` and
/// position `len - 1` may be written by that kernel ([`qk_norm_rope_append`], as in a decode
/// step).
pub fn decode_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    len: usize,
    opts: DecodeAttentionOptions,
) -> Result<AttentionOutput> {
    if !opts.quantized && !opts.bf16 {
        bail!("candle-fp8 decode_attention: ask for the quantized and/or the bf16 output")
    }
    let dev = cuda_device(q, "q")?;
    same_device(&dev, k_cache, "k_cache")?;
    same_device(&dev, v_cache, "v_cache")?;
    check_bf16_contiguous(q, "q")?;
    let (b, hq, hd) = match q.dims() {
        &[b, h, d] if HEAD_DIMS.contains(&d) && b > 0 && h > 0 => (b, h, d),
        d => bail!(
            "candle-fp8 decode_attention: q must be [batch, num_heads, head_dim] with head_dim one of {HEAD_DIMS:?}, got {d:?}"
        ),
    };
    let kd = cache_dims(k_cache, "k_cache")?;
    let vd = cache_dims(v_cache, "v_cache")?;
    if kd != vd || kd.0 != b || kd.3 != hd {
        bail!(
            "candle-fp8 decode_attention: caches must both be [{b}, kv_heads, capacity, {hd}], got \
             k_cache {:?} and v_cache {:?}",
            k_cache.dims(),
            v_cache.dims()
        )
    }
    let (hkv, cap) = (kd.1, kd.2);
    if hq % hkv != 0 || hq / hkv > MAX_QUERIES_PER_KV_HEAD {
        bail!(
            "candle-fp8 decode_attention: num_heads {hq} must be a multiple of num_kv_heads {hkv} with at \
             most {MAX_QUERIES_PER_KV_HEAD} query heads per kv head"
        )
    }
    if len == 0 || len > cap {
        bail!("candle-fp8 decode_attention: len {len} must be in [1, capacity {cap}]")
    }
    if b > 65535 || hkv > 65535 {
        bail!("candle-fp8 decode_attention: batch {b} and num_kv_heads {hkv} must be at most 65535")
    }
    let num_sms = device_info(&dev)?.num_sms;
    let tiles = len.div_ceil(POSITION_TILE);
    let splits = opts.splits.unwrap_or_else(|| default_splits(b, hkv, len, num_sms)).clamp(1, tiles);
    let guards = [q, k_cache, v_cache].map(|t| t.storage_and_layout());
    let stream = dev.cuda_stream();
    let mut views = Vec::with_capacity(3);
    for ((st, l), what) in guards.iter().zip(["q", "k_cache", "v_cache"]) {
        let Storage::Cuda(cs) = &**st else { bail!("candle-fp8 decode_attention: {what} is not on a CUDA device") };
        views.push(view::<bf16>(what, cs, l, l.shape().elem_count())?);
    }
    let read: Vec<_> = views.iter().map(|v| v.device_ptr(&stream)).collect();
    with_outputs(&dev, b, hq, hd, splits, opts, &|o| {
        let st = unsafe {
            fp8gemm_decode_attention(
                read[0].0 as *const c_void,
                read[1].0 as *const c_void,
                read[2].0 as *const c_void,
                b as i64,
                hq as i64,
                hkv as i64,
                hd as i64,
                cap as i64,
                len as i64,
                splits as i64,
                o.ws,
                o.ws_bytes,
                o.qa,
                o.sa,
                o.out,
                raw_stream(&dev),
            )
        };
        status(&format!("decode_attention (batch {b}, heads {hq}/{hkv}, head_dim {hd}, len {len}, capacity {cap}, splits {splits})"), st)
    })
}

/// Raw pointers of the attention outputs a launch writes (null when not requested).
pub(super) struct OutPtrs {
    pub(super) ws: *mut c_void,
    pub(super) ws_bytes: usize,
    pub(super) qa: *mut u8,
    pub(super) sa: *mut f32,
    pub(super) out: *mut c_void,
}

/// Allocates the workspace (for `splits` position splits merged by the combine kernel) and the
/// outputs `opts` asks for, runs `launch` with their pointers and wraps them as tensors. Head
/// dimension `d`: at 128 the kernel writes the quantized output itself; at 64 (a quantization
/// group spans two heads) it writes bf16, which the activation quantizer then quantizes (one
/// launch more, right after the attention).
pub(super) fn with_outputs(
    dev: &CudaDevice,
    b: usize,
    hq: usize,
    d: usize,
    splits: usize,
    opts: DecodeAttentionOptions,
    launch: &dyn Fn(&OutPtrs) -> Result<()>,
) -> Result<AttentionOutput> {
    let stream = dev.cuda_stream();
    let n = b * hq * d;
    let m_pad = act_scale_m_stride(b);
    let in_kernel_quant = d == HEAD_DIM;
    let ws_bytes = unsafe { fp8gemm_decode_attention_workspace_bytes(b as i64, hq as i64, splits as i64) };
    // Every buffer the kernels write completely (sa's padding rows included: no memset between
    // the attention and the o GEMM that would break the PDL overlap), so none is zeroed.
    let mut ws = (ws_bytes > 0).then(|| unsafe { dev.alloc::<f32>(ws_bytes.div_ceil(4)) }).transpose()?;
    let kernel_quant = opts.quantized && in_kernel_quant;
    let mut qa = kernel_quant.then(|| unsafe { dev.alloc::<F8E4M3>(n) }).transpose()?;
    let mut sa = kernel_quant.then(|| unsafe { dev.alloc::<f32>(hq * m_pad) }).transpose()?;
    let bf16_out = opts.bf16 || (opts.quantized && !in_kernel_quant);
    let mut out = bf16_out.then(|| unsafe { dev.alloc::<bf16>(n) }).transpose()?;
    {
        let (ws_ptr, _gw) = opt_ptr_mut(&mut ws, &stream);
        let (qa_ptr, _ga) = opt_ptr_mut(&mut qa, &stream);
        let (sa_ptr, _gs) = opt_ptr_mut(&mut sa, &stream);
        let (out_ptr, _go) = opt_ptr_mut(&mut out, &stream);
        launch(&OutPtrs { ws: ws_ptr, ws_bytes, qa: qa_ptr as *mut u8, sa: sa_ptr as *mut f32, out: out_ptr })?;
    }
    let wrap = |s: CudaStorage, shape: (usize, usize)| {
        Tensor::from_storage(Storage::Cuda(s), shape, BackpropOp::none(), false)
    };
    let scales = |sa: CudaStorage, kb: usize| {
        let sa = Tensor::from_storage(Storage::Cuda(sa), kb * m_pad, BackpropOp::none(), false);
        crate::format::act_scales_view(sa, b, kb)
    };
    let out = out.map(|o| CudaStorage::wrap_cuda_slice(o, dev.clone()));
    let quantized = match (qa, sa, &out) {
        (Some(qa), Some(sa), _) => {
            let qa = wrap(CudaStorage::wrap_cuda_slice(qa, dev.clone()), (b, hq * d));
            Some((qa, scales(CudaStorage::wrap_cuda_slice(sa, dev.clone()), hq)?))
        }
        // head_dim 64: the bf16 output through the activation quantizer (a partial last group
        // when num_heads is odd: hq * 64 % 128 == 64).
        (None, None, Some(o)) if opts.quantized => {
            let k = hq * d;
            let (qa, sa) = super::gemm::quantize_activation(o, &Layout::contiguous((b, k)), b, k)?;
            Some((wrap(qa, (b, k)), scales(sa, num_blocks(k))?))
        }
        _ => None,
    };
    let bf16 = if opts.bf16 { out.map(|o| wrap(o, (b, hq * d))) } else { None };
    drop(ws); // stream-ordered free, after the launches above
    Ok(AttentionOutput { quantized, bf16 })
}

/// How [`decode_step_attention`] spreads the work by default: `(position splits, head splits)`.
/// The kernel is latency-bound (one warp per scheduler; its time grows with the tiles and heads
/// each CTA walks), so both splits aim at many small CTAs. Head splits first (no merge at
/// all): the largest divisor of `queries_per_kv_head` that keeps `batch * kv_heads *
/// head_splits` within four CTAs per SM; then position splits up to four CTAs per SM in all
/// (never more than there are tiles; see [`SplitMerge`] for how they merge).
/// Measured on the H200 (Qwen3-32B, ~150 positions; docs/perf.md): batch 1 → one
/// tile per CTA (5 × 8), batch 16 → (1, 4).
pub fn default_step_splits(
    batch: usize,
    kv_heads: usize,
    queries_per_kv_head: usize,
    len: usize,
    num_sms: usize,
) -> (usize, usize) {
    let sms = num_sms.max(1);
    let ctas = (batch * kv_heads).max(1);
    let n_rep = queries_per_kv_head.max(1);
    let head_splits = (1..=n_rep).rev().find(|h| n_rep % h == 0 && ctas * h <= 4 * sms).unwrap_or(1);
    let tiles = len.div_ceil(POSITION_TILE).max(1);
    ((4 * sms / (ctas * head_splits)).clamp(1, tiles), head_splits)
}

/// Most position splits [`decode_step_attention`] merges inside a cluster of the splits' CTAs
/// (distributed shared memory; no workspace, no second launch). More splits write partial
/// results to a workspace and a combine kernel merges them.
pub const MAX_CLUSTER_SPLITS: usize = 8;

/// How [`decode_step_attention`] merges its position splits (the result is the same bits
/// either way: the merge runs the combine kernel's operations in split order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SplitMerge {
    /// Every split writes the workspace and the last one of each head group to finish merges
    /// them (an arrival counter per group, kept zeroed per device and thread): any number of
    /// splits, one launch, no cluster launch. The default: a cluster launch delays the next
    /// kernel's early start (measured on the H200, docs/perf.md: b1 TPOT 9.60 vs 9.68
    /// ms).
    #[default]
    Tail,
    /// Up to [`MAX_CLUSTER_SPLITS`] splits merge inside a cluster of their CTAs (distributed
    /// shared memory, no workspace); more through the workspace and a combine launch.
    Cluster,
}

/// How [`decode_step_attention`] splits its work, and which outputs it writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeStepOptions {
    /// Outputs and position splits, as for [`decode_attention`] (`splits: None` takes
    /// [`default_step_splits`]).
    pub attention: DecodeAttentionOptions,
    /// CTAs per kv head, each taking `queries_per_kv_head / head_splits` query heads (`None`:
    /// [`default_step_splits`]); must divide `num_heads / num_kv_heads`.
    pub head_splits: Option<usize>,
    /// How the position splits merge.
    pub merge: SplitMerge,
}

/// A decode step's attention in one launch: [`qk_norm_rope_append`] fused into
/// [`decode_attention`]. Inputs as [`qk_norm_rope_append`] takes them (`qkv` the fused
/// projection output, k and v appended in place at `offset`, `norm` what precedes the per-head
/// weights), attention over positions `[0, offset + 1)`, outputs as [`decode_attention`]'s
/// (at head dimension 64 the quantized output takes one more launch, the activation quantizer).
/// q never goes to memory: every CTA normalizes its own query heads, and those that attend to
/// the new position compute its k and v themselves. Position splits merge as `opts.merge` says
/// (by default the last split to finish merges them; [`SplitMerge::Cluster`] with more than
/// [`MAX_CLUSTER_SPLITS`] splits adds a combine launch). The result is bit-identical to
/// [`qk_norm_rope_append`] then [`decode_attention`] with the same `norm` and position
/// splits (the head splits change who computes a head, not how).
///
/// Read before the kernel waits for the kernel launched just before it (programmatic dependent
/// launch): `qk_norm`, `cos`, `sin` and cache positions before `offset` — model constants and
/// earlier steps' entries; only `qkv` may be written by that kernel.
#[allow(clippy::too_many_arguments)]
pub fn decode_step_attention(
    qkv: &Tensor,
    qk_norm: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    offset: usize,
    num_heads: usize,
    num_kv_heads: usize,
    eps: f32,
    norm: QkNorm,
    opts: DecodeStepOptions,
) -> Result<AttentionOutput> {
    let op = "decode_step_attention";
    let (hq, hkv) = (num_heads, num_kv_heads);
    let a = opts.attention;
    if !a.quantized && !a.bf16 {
        bail!("candle-fp8 {op}: ask for the quantized and/or the bf16 output")
    }
    let (dev, b, t, cap, hd) = check_step_inputs(op, qkv, qk_norm, cos, sin, k_cache, v_cache, offset, hq, hkv)?;
    if t != 1 {
        bail!("candle-fp8 {op}: one token per sequence (qkv [batch, width]), got qkv {:?}", qkv.dims())
    }
    let n_rep = hq / hkv;
    if n_rep > MAX_QUERIES_PER_KV_HEAD {
        bail!("candle-fp8 {op}: {n_rep} query heads per kv head; at most {MAX_QUERIES_PER_KV_HEAD} are supported")
    }
    if b > 65535 {
        bail!("candle-fp8 {op}: batch {b} must be at most 65535")
    }
    let len = offset + 1;
    let (auto_splits, auto_heads) = default_step_splits(b, hkv, n_rep, len, device_info(&dev)?.num_sms);
    let splits = a.splits.unwrap_or(auto_splits).clamp(1, len.div_ceil(POSITION_TILE));
    // Up to MAX_CLUSTER_SPLITS splits merge in a cluster: no workspace. A tail merge always
    // goes through it.
    let tail = opts.merge == SplitMerge::Tail && splits > 1;
    let ws_splits = if splits <= MAX_CLUSTER_SPLITS && !tail { 1 } else { splits };
    let head_splits = opts.head_splits.unwrap_or(auto_heads);
    if head_splits == 0 || n_rep % head_splits != 0 || hkv * head_splits > 65535 {
        bail!(
            "candle-fp8 {op}: head_splits {head_splits} must divide the {n_rep} query heads per kv head \
             (and num_kv_heads {hkv} × head_splits must be at most 65535)"
        )
    }
    let out = std::cell::RefCell::new(None);
    let counters = if tail { b * hkv * head_splits } else { 0 };
    with_step_ptrs(op, &dev, hd, [qkv, qk_norm, cos, sin], k_cache, v_cache, &|ptrs, k_ptr, v_ptr| {
        let r = with_outputs(&dev, b, hq, hd, ws_splits, a, &|o| {
            super::with_zeroed_counters(&dev, counters, |counters| {
                let st = unsafe {
                    fp8gemm_decode_step_attention(
                        ptrs[0] as *const c_void,
                        ptrs[1] as *const c_void,
                        ptrs[2] as *const c_void,
                        ptrs[3] as *const c_void,
                        k_ptr as *mut c_void,
                        v_ptr as *mut c_void,
                        b as i64,
                        hq as i64,
                        hkv as i64,
                        hd as i64,
                        cap as i64,
                        offset as i64,
                        eps,
                        norm.flags(),
                        splits as i64,
                        head_splits as i64,
                        o.ws,
                        o.ws_bytes,
                        counters,
                        o.qa,
                        o.sa,
                        o.out,
                        raw_stream(&dev),
                    )
                };
                status(
                    &format!(
                        "{op} (batch {b}, heads {hq}/{hkv}, head_dim {hd}, {norm:?}, offset {offset}, capacity {cap}, \
                     splits {splits}, head splits {head_splits}, merge {:?})",
                        opts.merge
                    ),
                    st,
                )
            })
        })?;
        *out.borrow_mut() = Some(r);
        Ok(())
    })?;
    Ok(out.into_inner().expect("with_step_ptrs ran the launch"))
}

/// [`decode_attention`] written straight into the o-projection's activation operand:
/// `(qa, sa)` = e4m3 `[B, num_heads * d]` and f32 scales `[B, ceil(num_heads * d / 128)]`
/// (strides `(1, round_up(B, 4))`), exactly what `crate::quant::quantize_activation` would give
/// for the f32 attention output (`d == 128`) or for its bf16 rounding (`d == 64`).
pub fn decode_attention_quant(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, len: usize) -> Result<(Tensor, Tensor)> {
    let o = decode_attention(q, k_cache, v_cache, len, DecodeAttentionOptions::default())?;
    Ok(o.quantized.expect("requested"))
}

/// [`decode_attention`] as bf16 `[B, num_heads * d]`.
pub fn decode_attention_bf16(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, len: usize) -> Result<Tensor> {
    let opts = DecodeAttentionOptions { quantized: false, bf16: true, splits: None };
    Ok(decode_attention(q, k_cache, v_cache, len, opts)?.bf16.expect("requested"))
}

/// Raw device pointer of an optional buffer (null when absent) and its write guard.
fn opt_ptr_mut<'a, T>(
    buf: &'a mut Option<CudaSlice<T>>,
    stream: &'a CudaStream,
) -> (*mut c_void, Option<SyncOnDrop<'a>>) {
    match buf.as_mut() {
        Some(b) => {
            let (p, g) = b.device_ptr_mut(stream);
            (p as *mut c_void, Some(g))
        }
        None => (std::ptr::null_mut(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_plan_spreads_over_small_ctas() {
        // Qwen3-32B (8 kv heads, 8 queries each) on 132 SMs, ~150 positions (5 tiles).
        assert_eq!(default_step_splits(1, 8, 8, 148, 132), (5, 8), "batch 1: one tile per CTA");
        assert_eq!(default_step_splits(16, 8, 8, 148, 132), (1, 4), "batch 16: 512 CTAs");
        // Position splits never exceed the tiles, head splits always divide n_rep.
        assert_eq!(default_step_splits(1, 8, 8, 1, 132), (1, 8));
        assert_eq!(default_step_splits(1, 8, 8, 4096, 132), (8, 8));
        assert_eq!(default_step_splits(1, 4, 6, 300, 132), (10, 6));
        assert_eq!(default_step_splits(64, 8, 6, 300, 132), (1, 1), "512 CTAs already: no split");
        assert_eq!(default_step_splits(1, 1, 1, 100, 0), (4, 1), "0 SMs counts as 1");
        for (b, hkv, n_rep, len) in [(1, 8, 8, 148), (3, 2, 12, 77), (16, 8, 8, 5000), (5, 4, 7, 33)] {
            let (s, h) = default_step_splits(b, hkv, n_rep, len, 132);
            assert!(
                n_rep % h == 0 && s >= 1 && s <= len.div_ceil(POSITION_TILE),
                "{b} {hkv} {n_rep} {len}: ({s}, {h})"
            );
        }
    }
}
