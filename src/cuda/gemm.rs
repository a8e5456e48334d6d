//! Our Hopper GEMM from candle storages: the activation quantizer, the GEMM (into a new
//! buffer, into a given one, or leaving split-K partials to the consumer), the gated gate/up
//! GEMM, the split-K reduction, and the provider switch of `fp8_gemm`.

use std::ffi::c_void;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{sys as drv, CudaSlice, CudaView, DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::{CudaDevice, CudaStorage, WrapErr};
use candle_core::{bail, DType, Layout, Result};
use half::bf16;

use super::device::{act_scale_len, device_info, fixup_in_kernel, raw_stream, require_contiguous, stream_state, view};
use super::{cublaslt, dequant, ffi};
use crate::dispatch::{choose_config, GemmConfig, Provider};
use crate::format::{act_scale_m_stride, fast_path_refusal, num_blocks, BLOCK, F8E4M3};

/// The activation quantizer's (and the fused quantizing kernels') column rule: `K` a non-zero
/// multiple of this (whole 16-byte vectors of bf16 per row). A `K % 128 != 0` row has a partial
/// last group, quantized over its valid columns.
pub(crate) const QUANT_K_MULTIPLE: usize = 8;

/// Per-token, per-128 activation quantization on the GPU.
///
/// `x`: bf16 or f32, contiguous `[m, k]` (start offset honoured), `k % 8 == 0` (a partial last
/// group when `k % 128 != 0`). Returns `(q, sa)`: `q` e4m3 of `m * k` elements, `sa` f32 of
/// `ceil(k / 128) * round_up(m, 4)` elements, MN-major (padding rows are zero).
pub(crate) fn quantize_activation(
    x: &CudaStorage,
    x_l: &Layout,
    m: usize,
    k: usize,
) -> Result<(CudaStorage, CudaStorage)> {
    require_contiguous("the activation", x_l)?;
    if m == 0 || k == 0 || k % QUANT_K_MULTIPLE != 0 {
        bail!(
            "candle-fp8 quantize_activation: need m >= 1 and k a non-zero multiple of {QUANT_K_MULTIPLE}, got m={m} k={k}"
        )
    }
    let dev = &x.device;
    let stream = dev.cuda_stream();
    // The kernel writes every element of sa, padding rows included (zeros).
    let mut q = unsafe { dev.alloc::<F8E4M3>(m * k)? };
    let mut sa = unsafe { dev.alloc::<f32>(act_scale_len(m, k))? };
    {
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (sa_ptr, _gs) = sa.device_ptr_mut(&stream);
        launch_quantize(x, x_l, q_ptr as *mut u8, sa_ptr as *mut f32, m, k)?;
    }
    Ok((CudaStorage::wrap_cuda_slice(q, dev.clone()), CudaStorage::wrap_cuda_slice(sa, dev.clone())))
}

/// The first `k` columns of an e4m3 `[m, kp]` buffer as a new contiguous `[m, k]` buffer, by one
/// 2-D copy (candle 0.11 has no e4m3 copy kernels on CUDA, so `narrow(..).contiguous()` of an
/// e4m3 tensor fails there with "named symbol not found").
pub(crate) fn e4m3_first_columns(q: &CudaStorage, m: usize, kp: usize, k: usize) -> Result<CudaStorage> {
    let dev = q.device.clone();
    let stream = dev.cuda_stream();
    let src = q.as_cuda_slice::<F8E4M3>()?;
    if k > kp || src.len() < m * kp {
        bail!("candle-fp8: cannot take {k} columns of a [{m}, {kp}] e4m3 buffer of {} elements", src.len())
    }
    let mut dst = unsafe { dev.alloc::<F8E4M3>(m * k)? };
    if m * k > 0 {
        let (sp, _gs) = src.device_ptr(&stream);
        let (dp, _gd) = dst.device_ptr_mut(&stream);
        let copy = drv::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: drv::CUmemorytype_enum::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: sp,
            srcArray: std::ptr::null_mut(),
            srcPitch: kp,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: drv::CUmemorytype_enum::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dp,
            dstArray: std::ptr::null_mut(),
            dstPitch: k,
            WidthInBytes: k,
            Height: m,
        };
        unsafe { drv::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }.result().w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(dst, dev))
}

/// Launches the activation quantizer of `x` (bf16 or f32, contiguous `[m, k]`) into `q`/`sa`.
fn launch_quantize(x: &CudaStorage, x_l: &Layout, q: *mut u8, sa: *mut f32, m: usize, k: usize) -> Result<()> {
    let dev = &x.device;
    let stream = dev.cuda_stream();
    let status = match x.dtype() {
        DType::BF16 => {
            let xv = view::<bf16>("the activation", x, x_l, m * k)?;
            let (x_ptr, _gx) = xv.device_ptr(&stream);
            unsafe {
                ffi::fp8gemm_quantize_act(
                    x_ptr as *const c_void,
                    ffi::FP8GEMM_BF16,
                    q,
                    sa,
                    m as i64,
                    k as i64,
                    raw_stream(dev),
                )
            }
        }
        DType::F32 => {
            let xv = view::<f32>("the activation", x, x_l, m * k)?;
            let (x_ptr, _gx) = xv.device_ptr(&stream);
            unsafe {
                ffi::fp8gemm_quantize_act(
                    x_ptr as *const c_void,
                    ffi::FP8GEMM_F32,
                    q,
                    sa,
                    m as i64,
                    k as i64,
                    raw_stream(dev),
                )
            }
        }
        dt => bail!("candle-fp8 quantize_activation: x must be bf16 or f32, got {dt:?}"),
    };
    ffi::check("quantize_activation", status)
}

/// The full linear on our kernels: `y = fp8_gemm(quantize(x), w, sw)`, with every buffer
/// allocated first, so that the quantizer and the GEMM are adjacent launches on the stream (the
/// GEMM is PDL-launched and streams its weights while the quantizer runs; an allocation, memset
/// or event between them would serialize the two).
///
/// `x`: bf16 or f32, contiguous `[m, k]`, a fast-path shape (`format::is_fast_path_shape`);
/// `w`, `sw` as for [`fp8_gemm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn quantize_gemm(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
) -> Result<CudaStorage> {
    require_contiguous("the activation", x.1)?;
    if let Some(why) = fast_path_refusal(m, n, k) {
        bail!("candle-fp8 quantize_gemm: m={m} n={n} k={k} is not a shape of our kernels: {why}")
    }
    let dev = x.0.device.clone();
    let stream = dev.cuda_stream();
    let wv = view::<F8E4M3>("the weight", w.0, w.1, n * k)?;
    let swv = view::<f32>("the weight scales", sw.0, sw.1, num_blocks(n) * num_blocks(k))?;
    let cfg = hopper_config(&dev, m, n, k)?;
    // SAFETY: the quantizer writes every element of q and sa, the GEMM every element of y.
    let (mut q, mut sa) = unsafe { (dev.alloc::<F8E4M3>(m * k)?, dev.alloc::<f32>(act_scale_len(m, k))?) };
    let mut y = unsafe { dev.alloc::<bf16>(m * n)? };
    {
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (sa_ptr, _gs) = sa.device_ptr_mut(&stream);
        let (w_ptr, _gw) = wv.device_ptr(&stream);
        let (sw_ptr, _gsw) = swv.device_ptr(&stream);
        let (y_ptr, _gy) = y.device_ptr_mut(&stream);
        let ptrs = GemmPtrs {
            qa: q_ptr as *const u8,
            sa: sa_ptr as *const f32,
            w: w_ptr as *const u8,
            sw: sw_ptr as *const f32,
            y: y_ptr as *mut c_void,
        };
        // Workspace first (a growth allocates), then the launches back to back.
        let st = stream_state(&dev);
        let mut ws = st.workspace_for(&cfg).lock().unwrap();
        let need = reserve_workspace(&dev, &mut ws, &cfg, m, n, k)?;
        launch_quantize(x.0, x.1, q_ptr as *mut u8, sa_ptr as *mut f32, m, k)?;
        launch_hopper(&dev, &mut ws, need, &ptrs, &cfg, m, n, k)?;
    }
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

/// The four GEMM operands as typed views (inputs validated by the caller; bounds re-checked).
pub(crate) struct Operands<'a> {
    pub qa: CudaView<'a, F8E4M3>,
    pub sa: CudaView<'a, f32>,
    pub w: CudaView<'a, F8E4M3>,
    pub sw: CudaView<'a, f32>,
}

#[allow(clippy::too_many_arguments)]
fn operands<'a>(
    what: &str,
    qa: (&'a CudaStorage, &Layout),
    sa: (&'a CudaStorage, &Layout),
    w: (&'a CudaStorage, &Layout),
    sw: (&'a CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
) -> Result<Operands<'a>> {
    if m == 0 || n == 0 || k == 0 {
        bail!("candle-fp8 {what}: empty shape m={m} n={n} k={k}")
    }
    let kb = num_blocks(k);
    let m_pad = act_scale_m_stride(m);
    // The kernels read the scale columns with a stride of m_pad; the last column needs m rows,
    // but TMA boxes may touch up to m_pad: ask for the full padded extent when it is there.
    let sa_slice = sa.0.as_cuda_slice::<f32>()?;
    let sa_off = sa.1.start_offset();
    let sa_need = (kb - 1) * m_pad + m;
    let sa_len = (kb * m_pad).min(sa_slice.len().saturating_sub(sa_off));
    if sa_len < sa_need {
        bail!(
            "candle-fp8: activation scales need {sa_need} elements from offset {sa_off}, \
             the storage holds {}",
            sa_slice.len()
        )
    }
    Ok(Operands {
        qa: view::<F8E4M3>("the quantized activation", qa.0, qa.1, m * k)?,
        sa: sa_slice.slice(sa_off..sa_off + sa_len),
        w: view::<F8E4M3>("the weight", w.0, w.1, n * k)?,
        sw: view::<f32>("the weight scales", sw.0, sw.1, num_blocks(n) * kb)?,
    })
}

/// `y` (bf16, `m * n` elements) = blocked FP8 GEMM with `provider`.
///
/// Inputs are validated by the caller: `qa` e4m3 contiguous `[m, k]`; `sa` f32 with layout
/// shape `[m, ceil(k/128)]`, stride `[1, round_up(m, 4)]`; `w` e4m3 contiguous `[n, k]`; `sw` f32
/// contiguous `[ceil(n/128), ceil(k/128)]` (start offsets honoured). A `k % 128 != 0` has a
/// partial last K block (the hopper provider: `k % 16 == 0`, see `format::is_fast_path_shape`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fp8_gemm(
    provider: Provider,
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
) -> Result<CudaStorage> {
    let dev = qa.0.device.clone();
    let ops = operands("fp8_gemm", qa, sa, w, sw, m, n, k)?;
    match provider {
        Provider::Hopper => hopper_gemm(&dev, &ops, m, n, k),
        Provider::CublasLt => {
            let st = stream_state(&dev);
            let info = device_info(&dev)?;
            cublaslt::gemm(&dev, &st.lt, info, &ops, m, n, k)
        }
        Provider::Dequant => dequant::dequant_gemm(&dev, &ops, m, n, k),
        Provider::Cpu => bail!("candle-fp8 fp8_gemm: the cpu provider cannot run CUDA tensors"),
    }
}

/// Raw device pointers of one GEMM launch.
struct GemmPtrs {
    qa: *const u8,
    sa: *const f32,
    w: *const u8,
    sw: *const f32,
    y: *mut c_void,
}

/// Our kernels' configuration for this shape on `dev` (errors when they cannot run there).
fn hopper_config(dev: &CudaDevice, m: usize, n: usize, k: usize) -> Result<GemmConfig> {
    let info = device_info(dev)?;
    if let Some(why) = info.caps.unusable_reason(Provider::Hopper) {
        bail!("candle-fp8: the hopper provider cannot run: {why}")
    }
    #[cfg(feature = "test-utils")]
    if let Some(cfg) = crate::dispatch::config_override() {
        return Ok(cfg);
    }
    Ok(choose_config(m, n, k, info.num_sms))
}

/// The configurations our kernels are compiled for (`split_k` 0: any split; 1: none).
#[cfg(feature = "test-utils")]
pub(crate) fn compiled_configs() -> Vec<GemmConfig> {
    let n = unsafe { ffi::fp8gemm_compiled_configs(std::ptr::null_mut(), 0) }.max(0) as usize;
    let mut v = vec![GemmConfig { kind: 0, block_m: 0, block_n: 0, stages: 0, split_k: 0, num_sms: 0 }; n];
    let got = unsafe { ffi::fp8gemm_compiled_configs(v.as_mut_ptr(), n as i32) }.max(0) as usize;
    v.truncate(got.min(n));
    v
}

/// Grows the cached split-K workspace to what `cfg` needs (to the next power of two, so that
/// a sequence of shapes settles quickly); returns the bytes this launch needs.
fn reserve_workspace(
    dev: &CudaDevice,
    ws: &mut Option<CudaSlice<u8>>,
    cfg: &GemmConfig,
    m: usize,
    n: usize,
    k: usize,
) -> Result<usize> {
    let need = unsafe { ffi::fp8gemm_workspace_bytes(cfg, m as i64, n as i64, k as i64) };
    if need > 0 && ws.as_ref().map_or(true, |b| b.len() < need) {
        *ws = Some(dev.alloc_zeros::<u8>(need.next_power_of_two())?);
    }
    Ok(need)
}

/// Launches our GEMM; `need` workspace bytes were reserved by [`reserve_workspace`].
#[allow(clippy::too_many_arguments)]
fn launch_hopper(
    dev: &CudaDevice,
    ws: &mut Option<CudaSlice<u8>>,
    need: usize,
    p: &GemmPtrs,
    cfg: &GemmConfig,
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    let stream = dev.cuda_stream();
    let (ws_ptr, ws_len, _g) = match ws.as_mut() {
        Some(b) if need > 0 => {
            let len = b.len();
            let (ptr, g) = b.device_ptr_mut(&stream);
            (ptr as *mut c_void, len, Some(g))
        }
        _ => (std::ptr::null_mut(), 0, None),
    };
    let (m_, n_, k_) = (m as i64, n as i64, k as i64);
    let status =
        unsafe { ffi::fp8gemm_gemm(p.qa, p.sa, p.w, p.sw, p.y, m_, n_, k_, cfg, ws_ptr, ws_len, raw_stream(dev)) };
    ffi::check(&format!("gemm (m={m} n={n} k={k}, {cfg:?})"), status)
}

/// Our kernels: schedule from [`choose_config`], cached split-K workspace.
fn hopper_gemm(dev: &CudaDevice, ops: &Operands, m: usize, n: usize, k: usize) -> Result<CudaStorage> {
    let mut y = None;
    hopper_gemm_to(dev, ops, m, n, k, |dev| Ok(y.insert(unsafe { dev.alloc::<bf16>(m * n)? }).slice_mut(..)))?;
    let y = y.expect("allocated by the closure");
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

/// Our GEMM into `out` (bf16, contiguous `[m, n]` from its layout's offset), allocating
/// nothing but a workspace growth: see `ops::fp8_block_matmul_into`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hopper_gemm_into(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    out: (&mut CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    let dev = qa.0.device.clone();
    let ops = operands("fp8_block_matmul_into", qa, sa, w, sw, m, n, k)?;
    let off = out.1.start_offset();
    let y = out.0.as_cuda_slice_mut::<bf16>()?;
    if y.len() < off + m * n {
        bail!(
            "candle-fp8 fp8_block_matmul_into: the output storage holds {} elements, needs {} from offset {off}",
            y.len(),
            m * n
        )
    }
    hopper_gemm_to(&dev, &ops, m, n, k, |_| Ok(y.slice_mut(off..off + m * n)))
}

/// Launches our GEMM into the buffer `y` returns; `y` runs after the workspace is reserved
/// (a growth allocates), so that nothing sits between an allocation of `y` and the launch.
fn hopper_gemm_to<Y: DevicePtrMut<bf16>>(
    dev: &CudaDevice,
    ops: &Operands,
    m: usize,
    n: usize,
    k: usize,
    y: impl FnOnce(&CudaDevice) -> Result<Y>,
) -> Result<()> {
    let cfg = hopper_config(dev, m, n, k)?;
    let stream = dev.cuda_stream();
    let st = stream_state(dev);
    let mut ws = st.workspace_for(&cfg).lock().unwrap();
    let need = reserve_workspace(dev, &mut ws, &cfg, m, n, k)?;
    let mut y = y(dev)?;
    let (y_ptr, _gy) = y.device_ptr_mut(&stream);
    with_gemm_ptrs(ops, dev, y_ptr as *mut c_void, |p| launch_hopper(dev, &mut ws, need, p, &cfg, m, n, k))
}

/// Runs `f` with the operands' device pointers (their read guards held meanwhile) and `y`.
fn with_gemm_ptrs<R>(
    ops: &Operands,
    dev: &CudaDevice,
    y: *mut c_void,
    f: impl FnOnce(&GemmPtrs) -> Result<R>,
) -> Result<R> {
    let stream = dev.cuda_stream();
    let (qa, _g1) = ops.qa.device_ptr(&stream);
    let (sa, _g2) = ops.sa.device_ptr(&stream);
    let (w, _g3) = ops.w.device_ptr(&stream);
    let (sw, _g4) = ops.sw.device_ptr(&stream);
    f(&GemmPtrs { qa: qa as *const u8, sa: sa as *const f32, w: w as *const u8, sw: sw as *const f32, y })
}

/// A GEMM output whose split-K reduction may still be pending: bf16 `y [m, n]`, or the f32
/// partial sums `[splits, m, n]` of a schedule that splits K through the workspace, for a
/// consumer that adds them itself (in split order, as [`reduce_partials`] does).
pub(crate) enum GemmOutput {
    /// bf16 `[m, n]`.
    Y(CudaStorage),
    /// f32 `[splits, m, n]` and `splits`.
    Partials(CudaStorage, usize),
}

/// Our GEMM without the split-K reduce launch: when the schedule reduces through the workspace,
/// its f32 partials land in a fresh `[splits, m, n]` buffer (not the shared workspace, which the
/// next GEMM reuses) and are returned unreduced; otherwise as [`fp8_gemm`] with the hopper
/// provider.
pub(crate) fn hopper_gemm_unreduced(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
) -> Result<GemmOutput> {
    let dev = qa.0.device.clone();
    let ops = operands("hopper_gemm_unreduced", qa, sa, w, sw, m, n, k)?;
    let cfg = hopper_config(&dev, m, n, k)?;
    // The persistent and stream-K schedules sum their shares inside the kernel: always bf16 out
    // (their workspace holds flags and partial tiles, not partials of [m, n]).
    let need = if fixup_in_kernel(&cfg) {
        0
    } else {
        unsafe { ffi::fp8gemm_workspace_bytes(&cfg, m as i64, n as i64, k as i64) }
    };
    if need == 0 {
        return Ok(GemmOutput::Y(hopper_gemm(&dev, &ops, m, n, k)?));
    }
    let splits = need / (4 * m * n);
    if splits * 4 * m * n != need {
        bail!("candle-fp8: workspace of {need} bytes is not whole f32 partials of [{m}, {n}]")
    }
    let stream = dev.cuda_stream();
    // SAFETY: every split writes every element of its [m, n] slice (zeros for an empty range).
    let mut partials = unsafe { dev.alloc::<f32>(splits * m * n)? };
    {
        let (part, _gp) = partials.device_ptr_mut(&stream);
        with_gemm_ptrs(&ops, &dev, std::ptr::null_mut(), |p| {
            let status = unsafe {
                ffi::fp8gemm_gemm_unreduced(
                    p.qa,
                    p.sa,
                    p.w,
                    p.sw,
                    p.y,
                    m as i64,
                    n as i64,
                    k as i64,
                    &cfg,
                    part as *mut c_void,
                    need,
                    raw_stream(&dev),
                )
            };
            ffi::check(&format!("gemm_unreduced (m={m} n={n} k={k}, {cfg:?})"), status)
        })?;
    }
    Ok(GemmOutput::Partials(CudaStorage::wrap_cuda_slice(partials, dev), splits))
}

/// Most tokens [`hopper_gemm_swiglu_quant`] takes (the gated tile holds all tokens in one wgmma
/// N of 16).
pub(crate) const SWIGLU_GEMM_MAX_M: usize = 16;

/// The gate/up GEMM with SiLU·up and the down projection's quantization in its epilogue:
/// `w` = `[gate; up]` e4m3 `[2·inter, k]`; returns `(q [m, inter], sa)` of
/// `bf16(silu(gate)) * up` exactly as [`fp8_gemm`] (hopper, no K split) followed by
/// `ops::swiglu_quantize` would. `m <= SWIGLU_GEMM_MAX_M`, `inter % 128 == 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hopper_gemm_swiglu_quant(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    inter: usize,
    k: usize,
) -> Result<(CudaStorage, CudaStorage)> {
    if m == 0 || m > SWIGLU_GEMM_MAX_M || inter == 0 || inter % BLOCK != 0 {
        bail!(
            "candle-fp8 gemm_swiglu_quantize: need 1 <= M <= {SWIGLU_GEMM_MAX_M} and a multiple of {BLOCK} features, got M={m} inter={inter}"
        )
    }
    let dev = qa.0.device.clone();
    let info = device_info(&dev)?;
    if let Some(why) = info.caps.unusable_reason(Provider::Hopper) {
        bail!("candle-fp8 gemm_swiglu_quantize: the hopper provider cannot run: {why}")
    }
    let ops = operands("gemm_swiglu_quantize", qa, sa, w, sw, m, 2 * inter, k)?;
    let stream = dev.cuda_stream();
    // SAFETY: the kernel writes every element of q and sa (the padding rows of sa included).
    let mut q = unsafe { dev.alloc::<F8E4M3>(m * inter)? };
    let mut sa_q = unsafe { dev.alloc::<f32>(act_scale_len(m, inter))? };
    {
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (s_ptr, _gs) = sa_q.device_ptr_mut(&stream);
        with_gemm_ptrs(&ops, &dev, std::ptr::null_mut(), |p| {
            let status = unsafe {
                ffi::fp8gemm_gemm_swiglu_quant(
                    p.qa,
                    p.sa,
                    p.w,
                    p.sw,
                    m as i64,
                    inter as i64,
                    k as i64,
                    q_ptr as *mut u8,
                    s_ptr as *mut f32,
                    raw_stream(&dev),
                )
            };
            ffi::check(&format!("gemm_swiglu_quantize (m={m} inter={inter} k={k})"), status)
        })?;
    }
    Ok((CudaStorage::wrap_cuda_slice(q, dev.clone()), CudaStorage::wrap_cuda_slice(sa_q, dev)))
}

/// bf16 `[m, n]` = the f32 `partials` `[splits, m, n]` added in split order and rounded once:
/// exactly what our GEMM's own split-K reduction writes.
pub(crate) fn reduce_partials(
    partials: (&CudaStorage, &Layout),
    splits: usize,
    m: usize,
    n: usize,
) -> Result<CudaStorage> {
    require_contiguous("the partials", partials.1)?;
    let dev = partials.0.device.clone();
    let stream = dev.cuda_stream();
    let pv = view::<f32>("the partials", partials.0, partials.1, splits * m * n)?;
    let mut y = unsafe { dev.alloc::<bf16>(m * n)? };
    {
        let (p, _g1) = pv.device_ptr(&stream);
        let (y_ptr, _g2) = y.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_reduce_partials(
                p as *const f32,
                y_ptr as *mut c_void,
                m as i64,
                n as i64,
                splits as i32,
                raw_stream(&dev),
            )
        };
        ffi::check(&format!("reduce_partials (splits={splits} m={m} n={n})"), status)?;
    }
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}
