//! CUDA providers of the blocked-FP8 GEMM (only built with the `cuda` feature).
//!
//! - [`ffi`]: the C ABI of our sm_90a kernels (`kernels/api.h`).
//! - [`attention`]: the decode-step attention kernels (`kernels/attention.h`).
//! - [`fused`]: residual add + RMSNorm and SiLU·up fused with the activation quantization
//!   (`kernels/fused_quant.h`).
//! - [`sampling`]: greedy sampling, the argmax of each row of f32 logits (`kernels/sampling.h`).
//! - [`readback`]: sampled ids copied to the host asynchronously (the decode loop launches the
//!   next step before it waits for them).
//! - [`cublaslt`]: cuBLASLt with `VEC128_32F` (activations) × `BLK128x128_32F` (weights) scales.
//! - the `dequant` provider: portable helper kernels (`dequant.cu`, PTX for compute_80, loaded
//!   at run time) + candle's own cuBLAS f32 GEMM.
//!
//! Everything launches on candle's stream for the device (`CudaDevice::cuda_stream`), keeps
//! cudarc's read/write guards alive across each launch, and never synchronizes the host.
//! Per-(device, thread) state (workspaces, cuBLASLt handle) and per-device capabilities are
//! cached and grown on demand.

pub mod attention;
pub(crate) mod cublaslt;
pub(crate) mod ffi;
pub(crate) mod fused;
pub mod readback;
pub mod sampling;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    sys as drv, CudaSlice, CudaView, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorage, DeviceId, WrapErr};
use candle_core::{bail, DType, Device, Layout, Result};
use half::bf16;

use crate::dispatch::{choose_config, DeviceCaps, GemmConfig, Provider, ScheduleKind};
use crate::format::{act_scale_m_stride, num_blocks, BLOCK, F8E4M3};

/// PTX of the portable helper kernels (`src/cuda/dequant.cu`, built by build.rs).
pub(crate) const HELPER_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/candle_fp8_dequant.ptx"));
pub(crate) const HELPER_MODULE: &str = "candle_fp8_dequant";

/// Facts about one device that the providers need, queried once per ordinal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceInfo {
    pub caps: DeviceCaps,
    pub num_sms: usize,
}

fn ordinal(dev: &CudaDevice) -> usize {
    dev.cuda_stream().context().ordinal()
}

/// Capabilities of `dev` for the provider choice, cached per device ordinal.
pub(crate) fn device_caps(dev: &CudaDevice) -> Result<DeviceCaps> {
    Ok(device_info(dev)?.caps)
}

/// Why our standalone decode kernels (`kernels/attention.cu`, `kernels/sampling.cu`, built for
/// sm_90a only) cannot run on `device` (`None`: they can).
pub(crate) fn sm90_kernels_unavailable(device: &Device) -> Option<String> {
    let Device::Cuda(dev) = device else {
        return Some("not a CUDA device".into());
    };
    if !ffi::HAVE_KERNELS {
        return Some("this build has no compiled kernels (kernels/*.cu missing at build time)".into());
    }
    match device_info(dev) {
        Ok(i) if i.caps.compute_cap == 90 => None,
        Ok(i) => Some(format!("the kernels are built for sm_90a, the device is sm_{}", i.caps.compute_cap)),
        Err(e) => Some(format!("cannot query the device: {e}")),
    }
}

pub(crate) fn device_info(dev: &CudaDevice) -> Result<DeviceInfo> {
    static INFO: OnceLock<Mutex<HashMap<usize, DeviceInfo>>> = OnceLock::new();
    let ord = ordinal(dev);
    let map = INFO.get_or_init(Default::default);
    if let Some(i) = map.lock().unwrap().get(&ord) {
        return Ok(*i);
    }
    let stream = dev.cuda_stream();
    let ctx = stream.context();
    let (major, minor) = ctx.compute_capability().w()?;
    let num_sms = ctx
        .attribute(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .w()? as usize;
    let compute_cap = (major * 10 + minor) as u32;
    let info = DeviceInfo {
        caps: DeviceCaps {
            is_cuda: true,
            compute_cap,
            have_hopper_kernels: ffi::HAVE_KERNELS,
            have_cublaslt_blockwise: cublaslt::blockwise_unavailable_reason(compute_cap).is_none(),
        },
        num_sms,
    };
    map.lock().unwrap().insert(ord, info);
    Ok(info)
}

/// Per-`CudaDevice` (i.e. per stream) scratch state.
#[derive(Default)]
struct StreamState {
    /// Split-K workspace of our kernels, grown on demand, never shrunk.
    workspace: Mutex<Option<CudaSlice<u8>>>,
    /// The persistent split tail's and stream-K's workspace: its first page holds flags that must be
    /// zero before a launch and that the kernel leaves zero (`kernels/include/fp8gemm/
    /// tail_fixup.cuh`), so it is kept apart from the split-K partials; allocated zeroed.
    tail_workspace: Mutex<Option<CudaSlice<u8>>>,
    /// cuBLASLt handle, workspace and algorithm cache.
    lt: Mutex<Option<cublaslt::LtState>>,
    /// Arrival counters of kernels that leave them zeroed (see [`with_zeroed_counters`]).
    counters: Mutex<Option<CudaSlice<u32>>>,
}

impl StreamState {
    /// The workspace a launch of `cfg` uses.
    fn workspace_for(&self, cfg: &GemmConfig) -> &Mutex<Option<CudaSlice<u8>>> {
        if fixup_in_kernel(cfg) {
            &self.tail_workspace
        } else {
            &self.workspace
        }
    }
}

/// Whether `cfg` sums its K shares inside the kernel (persistent split tail, stream-K): its
/// workspace starts with a flags page that must stay zero between launches (`tail_fixup.cuh`,
/// `streamk_fixup.cuh`), so it is kept apart from the split-K partials.
fn fixup_in_kernel(cfg: &GemmConfig) -> bool {
    cfg.schedule().is_some_and(|k| k == ScheduleKind::Persistent || k.is_stream_k())
}

/// Runs `f` with a device buffer of at least `n` zeroed `u32` counters (null when `n` is 0), for
/// kernels that count arrivals and reset their counters before they finish (the fused decode
/// attention's tail merge, the split fused norm's barrier). Kept per device and thread (i.e. per stream: stream-ordered reuse),
/// grown on demand (zero-filled once), never shrunk.
pub(crate) fn with_zeroed_counters<R>(dev: &CudaDevice, n: usize, f: impl FnOnce(*mut u32) -> Result<R>) -> Result<R> {
    if n == 0 {
        return f(std::ptr::null_mut());
    }
    let st = stream_state(dev);
    let mut c = st.counters.lock().unwrap_or_else(|e| e.into_inner());
    if c.as_ref().map_or(true, |b| b.len() < n) {
        *c = Some(dev.alloc_zeros::<u32>(n.next_power_of_two())?);
    }
    let stream = dev.cuda_stream();
    let (ptr, _guard) = c.as_mut().expect("allocated above").device_ptr_mut(&stream);
    f(ptr as *mut u32)
}

/// The workspace / cuBLASLt state for launches from this thread on this device. Keyed by
/// thread too: candle's default device launches on CUDA's per-thread default stream, so two
/// threads sharing one `Device` run on different streams, and a shared split-K workspace would
/// be a cross-stream race. Within one thread, launches are stream-ordered.
fn stream_state(dev: &CudaDevice) -> Arc<StreamState> {
    type Key = (DeviceId, std::thread::ThreadId);
    static STATES: OnceLock<Mutex<HashMap<Key, Arc<StreamState>>>> = OnceLock::new();
    STATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((dev.id(), std::thread::current().id()))
        .or_default()
        .clone()
}

/// `len` elements of `s` from `l.start_offset()`, as a typed view (bounds checked).
fn view<'a, T: CudaDType>(
    what: &str,
    s: &'a CudaStorage,
    l: &Layout,
    len: usize,
) -> Result<CudaView<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?;
    let off = l.start_offset();
    if off + len > slice.len() {
        bail!(
            "candle-fp8: {what} needs {len} elements from offset {off}, its storage holds {}",
            slice.len()
        )
    }
    Ok(slice.slice(off..off + len))
}

fn require_contiguous(what: &str, l: &Layout) -> Result<()> {
    if !l.is_contiguous() {
        bail!(
            "candle-fp8: {what} must be contiguous (row-major), got shape {:?} stride {:?}",
            l.dims(),
            l.stride()
        )
    }
    Ok(())
}

/// Elements of an MN-major activation-scale buffer that the kernels may read.
fn act_scale_len(m: usize, k: usize) -> usize {
    num_blocks(k) * act_scale_m_stride(m)
}

fn raw_stream(dev: &CudaDevice) -> *mut c_void {
    dev.cuda_stream().cu_stream() as *mut c_void
}

/// Per-token, per-128 activation quantization on the GPU.
///
/// `x`: bf16 or f32, contiguous `[m, k]` (start offset honoured), `k % 128 == 0`. Returns
/// `(q, sa)`: `q` e4m3 of `m * k` elements, `sa` f32 of `(k / 128) * round_up(m, 4)`
/// elements, MN-major (padding rows are zero).
pub(crate) fn quantize_activation(
    x: &CudaStorage,
    x_l: &Layout,
    m: usize,
    k: usize,
) -> Result<(CudaStorage, CudaStorage)> {
    require_contiguous("the activation", x_l)?;
    if m == 0 || k == 0 || k % BLOCK != 0 {
        bail!("candle-fp8 quantize_activation: need m >= 1 and k a non-zero multiple of {BLOCK}, got m={m} k={k}")
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
    Ok((
        CudaStorage::wrap_cuda_slice(q, dev.clone()),
        CudaStorage::wrap_cuda_slice(sa, dev.clone()),
    ))
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
                ffi::fp8gemm_quantize_act(x_ptr as *const c_void, ffi::FP8GEMM_BF16, q, sa, m as i64, k as i64, raw_stream(dev))
            }
        }
        DType::F32 => {
            let xv = view::<f32>("the activation", x, x_l, m * k)?;
            let (x_ptr, _gx) = xv.device_ptr(&stream);
            unsafe {
                ffi::fp8gemm_quantize_act(x_ptr as *const c_void, ffi::FP8GEMM_F32, q, sa, m as i64, k as i64, raw_stream(dev))
            }
        }
        dt => bail!("candle-fp8 quantize_activation: x must be bf16 or f32, got {dt:?}"),
    };
    ffi::check("quantize_activation", status)
}

/// The full linear on our kernels: `y = fp8_gemm(quantize(x), w, sw)`. With `quant_in`, a bf16
/// `x` and a configuration that quantizes in the kernel ([`crate::dispatch::quantizes_in_kernel`]:
/// the decode sizes, M ≤ 8) one launch does both; otherwise every buffer is allocated first, so
/// that the quantizer and the GEMM are adjacent launches on the stream (the GEMM is
/// PDL-launched and streams its weights while the quantizer runs; an allocation, memset or
/// event between them would serialize the two). Same bits either way.
///
/// `x`: bf16 or f32, contiguous `[m, k]`, `k % 128 == 0`; `w`, `sw` as for [`fp8_gemm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn quantize_gemm(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    n: usize,
    k: usize,
    quant_in: bool,
) -> Result<CudaStorage> {
    require_contiguous("the activation", x.1)?;
    if m == 0 || n == 0 || k == 0 || k % BLOCK != 0 {
        bail!("candle-fp8 quantize_gemm: need non-empty m, n and k a multiple of {BLOCK}, got m={m} n={n} k={k}")
    }
    let dev = x.0.device.clone();
    let stream = dev.cuda_stream();
    let wv = view::<F8E4M3>("the weight", w.0, w.1, n * k)?;
    let swv = view::<f32>("the weight scales", sw.0, sw.1, num_blocks(n) * num_blocks(k))?;
    let cfg = hopper_config(&dev, m, n, k)?;
    // Decode sizes with `quant_in`: the GEMM quantizes x itself (one launch, the same bits);
    // otherwise the quantizer writes (q, sa) first.
    let in_kernel = quant_in && x.0.dtype() == DType::BF16 && crate::dispatch::quantizes_in_kernel(&cfg);
    let xv = if in_kernel { Some(view::<bf16>("the activation", x.0, x.1, m * k)?) } else { None };
    let mut qsa = if in_kernel {
        None
    } else {
        Some(unsafe { (dev.alloc::<F8E4M3>(m * k)?, dev.alloc::<f32>(act_scale_len(m, k))?) })
    };
    let mut y = unsafe { dev.alloc::<bf16>(m * n)? };
    {
        let (x_ptr, _gx) = match &xv {
            Some(v) => {
                let (p, g) = v.device_ptr(&stream);
                (p as *const c_void, Some(g))
            }
            None => (std::ptr::null(), None),
        };
        let (q_ptr, sa_ptr, _gq) = match qsa.as_mut() {
            Some((q, sa)) => {
                let (qp, gq) = q.device_ptr_mut(&stream);
                let (sp, gs) = sa.device_ptr_mut(&stream);
                (qp as *mut u8, sp as *mut f32, Some((gq, gs)))
            }
            None => (std::ptr::null_mut(), std::ptr::null_mut(), None),
        };
        let (w_ptr, _gw) = wv.device_ptr(&stream);
        let (sw_ptr, _gsw) = swv.device_ptr(&stream);
        let (y_ptr, _gy) = y.device_ptr_mut(&stream);
        let ptrs = GemmPtrs {
            qa: q_ptr,
            sa: sa_ptr,
            x: x_ptr,
            w: w_ptr as *const u8,
            sw: sw_ptr as *const f32,
            y: y_ptr as *mut c_void,
        };
        // Workspace first (a growth allocates), then the launches back to back.
        let st = stream_state(&dev);
        let mut ws = st.workspace_for(&cfg).lock().unwrap();
        let need = reserve_workspace(&dev, &mut ws, &cfg, m, n, k)?;
        if !in_kernel {
            launch_quantize(x.0, x.1, q_ptr, sa_ptr, m, k)?;
        }
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
/// shape `[m, k/128]`, stride `[1, round_up(m, 4)]`; `w` e4m3 contiguous `[n, k]`; `sw` f32
/// contiguous `[ceil(n/128), ceil(k/128)]` (start offsets honoured).
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
        Provider::Dequant => dequant_gemm(&dev, &ops, m, n, k),
        Provider::Cpu => bail!("candle-fp8 fp8_gemm: the cpu provider cannot run CUDA tensors"),
    }
}

/// Raw device pointers of one GEMM launch.
struct GemmPtrs {
    qa: *const u8,
    sa: *const f32,
    /// Non-null: the bf16 activation, quantized by the GEMM itself (`fp8gemm_gemm_quant_in`;
    /// `qa`, `sa` unused).
    x: *const c_void,
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
    if let Some(cfg) = crate::dispatch::config_override() {
        return Ok(cfg);
    }
    let mut cfg = choose_config(m, n, k, info.num_sms);
    if let Some(split) = crate::dispatch::split_override(m, n, k)? {
        cfg.split_k = split;
    }
    Ok(cfg)
}

/// The configurations our kernels are compiled for (`split_k` 0: any split; 1: none), e.g. to
/// sweep them with [`crate::dispatch::set_config_override`]. Empty in a build without kernels.
pub fn compiled_configs() -> Vec<GemmConfig> {
    let n = unsafe { ffi::fp8gemm_compiled_configs(std::ptr::null_mut(), 0) }.max(0) as usize;
    let mut v = vec![GemmConfig { kind: 0, block_m: 0, block_n: 0, stages: 0, split_k: 0, num_sms: 0 }; n];
    let got = unsafe { ffi::fp8gemm_compiled_configs(v.as_mut_ptr(), n as i32) }.max(0) as usize;
    v.truncate(got.min(n));
    v
}

/// Development: waits for the device, then writes the per-CTA kernel timeline of a build whose
/// kernels were compiled with `CANDLE_FP8_NVCC_FLAGS=-DFP8GEMM_TRACE` to `path` (read it with
/// `python3 scripts/dev/trace_timeline.py`). Returns the number of records written, or `None`
/// when this build has no trace (the default build). Each traced kernel's thread 0 appends one
/// record per CTA to a ring of 2^20 records per translation unit (`kernels/trace.cu`).
pub fn trace_dump(path: &std::path::Path) -> Result<Option<usize>> {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| candle_core::Error::Msg(format!("trace path {} contains a NUL byte", path.display())))?;
    // SAFETY: a valid NUL-terminated path; the function synchronizes the device itself.
    match unsafe { ffi::fp8gemm_trace_dump(c.as_ptr()) } {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(n as usize)),
        -2 => bail!("candle-fp8 trace_dump: a CUDA call failed while reading the trace"),
        e => bail!("candle-fp8 trace_dump: cannot write {} (status {e})", path.display()),
    }
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

/// Launches our GEMM (on `qa`, `sa`, or quantizing `x` itself when set); `need` workspace bytes
/// were reserved by [`reserve_workspace`].
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
    let status = unsafe {
        if p.x.is_null() {
            ffi::fp8gemm_gemm(p.qa, p.sa, p.w, p.sw, p.y, m_, n_, k_, cfg, ws_ptr, ws_len, raw_stream(dev))
        } else {
            ffi::fp8gemm_gemm_quant_in(p.x, p.w, p.sw, p.y, m_, n_, k_, cfg, ws_ptr, ws_len, raw_stream(dev))
        }
    };
    let what = if p.x.is_null() { "gemm" } else { "gemm with in-kernel quantization" };
    ffi::check(&format!("{what} (m={m} n={n} k={k}, {cfg:?})"), status)
}

/// Our kernels: schedule from [`choose_config`], cached split-K workspace.
fn hopper_gemm(dev: &CudaDevice, ops: &Operands, m: usize, n: usize, k: usize) -> Result<CudaStorage> {
    let mut y = None;
    hopper_gemm_to(dev, ops, m, n, k, |dev| Ok(y.insert(unsafe { dev.alloc::<bf16>(m * n)? }).slice_mut(..)))?;
    let y = y.expect("allocated by the closure");
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

/// Our GEMM into `out` (bf16, contiguous `[m, n]` from its layout's offset), allocating
/// nothing but a workspace growth: see [`crate::ops::fp8_block_matmul_into`].
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
        bail!("candle-fp8 fp8_block_matmul_into: the output storage holds {} elements, needs {} from offset {off}", y.len(), m * n)
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
fn with_gemm_ptrs<R>(ops: &Operands, dev: &CudaDevice, y: *mut c_void, f: impl FnOnce(&GemmPtrs) -> Result<R>) -> Result<R> {
    let stream = dev.cuda_stream();
    let (qa, _g1) = ops.qa.device_ptr(&stream);
    let (sa, _g2) = ops.sa.device_ptr(&stream);
    let (w, _g3) = ops.w.device_ptr(&stream);
    let (sw, _g4) = ops.sw.device_ptr(&stream);
    f(&GemmPtrs { qa: qa as *const u8, sa: sa as *const f32, x: std::ptr::null(), w: w as *const u8, sw: sw as *const f32, y })
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

/// Most tokens [`hopper_gemm_swiglu_quantize`] takes (the gated schedule holds all tokens of a
/// tile in one wgmma N of 8 or 16).
pub(crate) const SWIGLU_GEMM_MAX_M: usize = 16;

/// The gate/up GEMM with SiLU·up and the down projection's quantization in its epilogue:
/// `w` = `[gate; up]` e4m3 `[2·inter, k]`; returns `(q [m, inter], sa)` of
/// `bf16(silu(gate)) * up` exactly as [`fp8_gemm`] (hopper, no K split) followed by
/// `fused::swiglu_quantize` would. `m <= SWIGLU_GEMM_MAX_M`, `inter % 128 == 0`; `tile_rows`
/// (weight rows per CTA, 64 or 128) and `stages` pick a compiled variant, 0 = the default.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hopper_gemm_swiglu_quant(
    qa: (&CudaStorage, &Layout),
    sa: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    m: usize,
    inter: usize,
    k: usize,
    tile_rows: u32,
    stages: u32,
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
                    tile_rows as i32,
                    stages as i32,
                    q_ptr as *mut u8,
                    s_ptr as *mut f32,
                    raw_stream(&dev),
                )
            };
            ffi::check(&format!("gemm_swiglu_quantize (m={m} inter={inter} k={k} tile rows {tile_rows} stages {stages})"), status)
        })?;
    }
    Ok((CudaStorage::wrap_cuda_slice(q, dev.clone()), CudaStorage::wrap_cuda_slice(sa_q, dev)))
}

/// `[n, k]` random e4m3 codes on `dev`, `cvt(u * 448)` with `u` uniform in [-1, 1), a pure
/// function of `seed` and the element index, generated in place (no transient buffers). `None`
/// where our kernels cannot run (a build without them, a GPU other than sm_90).
pub(crate) fn random_e4m3(dev: &Device, n: usize, k: usize, seed: u64) -> Result<Option<candle_core::Tensor>> {
    use candle_core::{op::BackpropOp, Storage, Tensor};
    let Device::Cuda(cdev) = dev else { bail!("candle-fp8 random_e4m3: {dev:?} is not a CUDA device") };
    if n * k == 0 {
        bail!("candle-fp8 random_e4m3: empty shape [{n}, {k}]")
    }
    if device_info(cdev)?.caps.unusable_reason(Provider::Hopper).is_some() {
        return Ok(None);
    }
    let stream = cdev.cuda_stream();
    // SAFETY: the kernel writes all n * k bytes.
    let mut w = unsafe { cdev.alloc::<F8E4M3>(n * k)? };
    let status = {
        let (p, _g) = w.device_ptr_mut(&stream);
        unsafe { ffi::fp8gemm_random_e4m3(p as *mut u8, (n * k) as i64, seed, raw_stream(cdev)) }
    };
    if status == ffi::FP8GEMM_ERR_CONFIG {
        return Ok(None);
    }
    ffi::check(&format!("random_e4m3 ([{n}, {k}])"), status)?;
    let st = CudaStorage::wrap_cuda_slice(w, cdev.clone());
    Ok(Some(Tensor::from_storage(Storage::Cuda(st), (n, k), BackpropOp::none(), false)))
}

/// bf16 `[m, n]` = the f32 `partials` `[splits, m, n]` added in split order and rounded once:
/// exactly what our GEMM's own split-K reduction writes.
pub(crate) fn reduce_partials(partials: (&CudaStorage, &Layout), splits: usize, m: usize, n: usize) -> Result<CudaStorage> {
    require_contiguous("the partials", partials.1)?;
    let dev = partials.0.device.clone();
    let stream = dev.cuda_stream();
    let pv = view::<f32>("the partials", partials.0, partials.1, splits * m * n)?;
    let mut y = unsafe { dev.alloc::<bf16>(m * n)? };
    {
        let (p, _g1) = pv.device_ptr(&stream);
        let (y_ptr, _g2) = y.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_reduce_partials(p as *const f32, y_ptr as *mut c_void, m as i64, n as i64, splits as i32, raw_stream(&dev))
        };
        ffi::check(&format!("reduce_partials (splits={splits} m={m} n={n})"), status)?;
    }
    Ok(CudaStorage::wrap_cuda_slice(y, dev))
}

pub(crate) fn helper_launch_cfg(total: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    let blocks = total.div_ceil(THREADS as usize).clamp(1, 132 * 32) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// `out[r][c] = w[r][c] * sw[r/128][c/128]` in f32 (portable helper kernel).
fn dequant_weight_f32(
    dev: &CudaDevice,
    w: &CudaView<F8E4M3>,
    sw: &CudaView<f32>,
    n: usize,
    k: usize,
) -> Result<CudaSlice<f32>> {
    let mut out = unsafe { dev.alloc::<f32>(n * k)? };
    let f = dev.get_or_load_custom_func("candle_fp8_dequant_weight_f32", HELPER_MODULE, HELPER_PTX)?;
    let (n64, k64) = (n as i64, k as i64);
    let mut b = f.builder();
    b.arg(w).arg(sw).arg(&mut out).arg(&n64).arg(&k64);
    unsafe { b.launch(helper_launch_cfg(n * k)) }.w()?;
    Ok(out)
}

/// bf16 `[n, k]` dequantized weight, `out[r][c] = w[r][c] * sw[r/128][c/128]` (any `n`, `k`).
#[allow(dead_code)] // for a layer that caches a bf16 weight (dequant provider at load time)
pub(crate) fn dequantize_weight(
    w: (&CudaStorage, &Layout),
    sw: (&CudaStorage, &Layout),
    n: usize,
    k: usize,
) -> Result<CudaStorage> {
    require_contiguous("the weight", w.1)?;
    require_contiguous("the weight scales", sw.1)?;
    if n == 0 || k == 0 {
        bail!("candle-fp8 dequantize_weight: empty weight [{n}, {k}]")
    }
    let dev = w.0.device.clone();
    let wv = view::<F8E4M3>("the weight", w.0, w.1, n * k)?;
    let swv = view::<f32>("the weight scales", sw.0, sw.1, num_blocks(n) * num_blocks(k))?;
    let mut out = unsafe { dev.alloc::<bf16>(n * k)? };
    let f = dev.get_or_load_custom_func("candle_fp8_dequant_weight_bf16", HELPER_MODULE, HELPER_PTX)?;
    let (n64, k64) = (n as i64, k as i64);
    let mut b = f.builder();
    b.arg(&wv).arg(&swv).arg(&mut out).arg(&n64).arg(&k64);
    unsafe { b.launch(helper_launch_cfg(n * k)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// The dequant provider: both operands dequantized to f32 (portable helper kernels), candle's
/// cuBLAS f32 GEMM (TF32 off unless the user enabled candle's reduced-precision f32 mode),
/// bf16 output (rounded to nearest even by a helper kernel with 64-bit indexing). Accuracy:
/// only the bf16 output rounding; cost: 4 bytes per weight element of transient memory, f32
/// GEMM speed. (Caching a bf16 weight, [`dequantize_weight`], is the op/layer's choice.)
fn dequant_gemm(dev: &CudaDevice, ops: &Operands, m: usize, n: usize, k: usize) -> Result<CudaStorage> {
    let wf = dequant_weight_f32(dev, &ops.w, &ops.sw, n, k)?;
    let mut xf = unsafe { dev.alloc::<f32>(m * k)? };
    {
        let f = dev.get_or_load_custom_func("candle_fp8_dequant_act_f32", HELPER_MODULE, HELPER_PTX)?;
        let (m64, k64, mp64) = (m as i64, k as i64, act_scale_m_stride(m) as i64);
        let mut b = f.builder();
        b.arg(&ops.qa).arg(&ops.sa).arg(&mut xf).arg(&m64).arg(&k64).arg(&mp64);
        unsafe { b.launch(helper_launch_cfg(m * k)) }.w()?;
    }
    let xs = CudaStorage::wrap_cuda_slice(xf, dev.clone());
    let ws = CudaStorage::wrap_cuda_slice(wf, dev.clone());
    let x_l = Layout::contiguous((1, m, k));
    let w_l = Layout::contiguous((1, n, k)).transpose(1, 2)?;
    let yf = xs.matmul(&ws, (1, m, n, k), &x_l, &w_l)?;
    // The bf16 rounding by our helper, not candle's cast: candle's cast kernels count elements
    // in 32 bits and never finish past 2^32 of them (M·N > 2^32: gpu_reliability's
    // large_mn_no_index_overflow ran into its time limit in the dequant provider).
    let yv = yf.as_cuda_slice::<f32>()?;
    let mut out = unsafe { dev.alloc::<bf16>(m * n)? };
    let f = dev.get_or_load_custom_func("candle_fp8_f32_to_bf16", HELPER_MODULE, HELPER_PTX)?;
    let len = (m * n) as i64;
    let mut b = f.builder();
    b.arg(yv).arg(&mut out).arg(&len);
    unsafe { b.launch(helper_launch_cfg(m * n)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// What a CUDA device offers this crate (printed by `examples/check_env.rs`).
#[derive(Debug, Clone)]
pub struct DeviceReport {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Compute capability as `major * 10 + minor`.
    pub compute_cap: u32,
    /// Streaming multiprocessors.
    pub num_sms: usize,
    /// `cuDriverGetVersion` (e.g. 13000 for CUDA 13.0).
    pub driver_version: i32,
    /// `cublasLtGetVersion`, or why libcublasLt could not be loaded.
    pub cublaslt_version: std::result::Result<usize, String>,
    /// What the provider choice sees.
    pub caps: DeviceCaps,
    /// Each CUDA provider with the reason it cannot run (`None`: usable).
    pub providers: Vec<(Provider, Option<String>)>,
    /// nvcc that compiled our kernels ("" when the build has none).
    pub nvcc_version: &'static str,
    /// nvcc flags used for our kernels.
    pub nvcc_flags: &'static str,
}

/// Queries `dev` for [`DeviceReport`].
pub fn device_report(dev: &CudaDevice) -> Result<DeviceReport> {
    let info = device_info(dev)?;
    let stream = dev.cuda_stream();
    let ctx = stream.context();
    let mut driver_version = 0i32;
    unsafe { drv::cuDriverGetVersion(&mut driver_version) }.result().w()?;
    let providers = [Provider::Hopper, Provider::CublasLt, Provider::Dequant]
        .into_iter()
        .map(|p| {
            let why = info.caps.unusable_reason(p).or_else(|| match p {
                Provider::Dequant if info.caps.compute_cap < 80 => {
                    Some("the dequant helper kernels are built for sm_80+".into())
                }
                _ => None,
            });
            (p, why)
        })
        .collect();
    Ok(DeviceReport {
        name: ctx.name().w()?,
        ordinal: ctx.ordinal(),
        compute_cap: info.caps.compute_cap,
        num_sms: info.num_sms,
        driver_version,
        cublaslt_version: cublaslt::cublaslt_version(),
        caps: info.caps,
        providers,
        nvcc_version: option_env!("CANDLE_FP8_NVCC_VERSION").unwrap_or(""),
        nvcc_flags: option_env!("CANDLE_FP8_NVCC_FLAGS_USED").unwrap_or(""),
    })
}

#[cfg(test)]
mod tests {
    /// Every helper kernel the providers load by name (`get_or_load_custom_func("NAME",
    /// HELPER_MODULE, …)` in this folder) is an entry of the helper PTX: a misspelt or removed
    /// kernel would otherwise surface only on a GPU, at the first call of that path.
    #[test]
    fn loaded_helper_kernels_are_in_the_helper_ptx() {
        let sources = [include_str!("mod.rs"), include_str!("cublaslt.rs")];
        let marker = "get_or_load_custom_func(\"";
        let mut names = Vec::new();
        for src in sources {
            for (i, _) in src.match_indices(marker) {
                let rest = &src[i + marker.len()..];
                let name = &rest[..rest.find('"').expect("a closing quote")];
                let after = rest[name.len()..].trim_start_matches(|c: char| c == '"' || c == ',' || c.is_whitespace());
                if after.starts_with("HELPER_MODULE") {
                    names.push(name.to_string());
                }
            }
        }
        assert!(names.len() >= 5, "found only {names:?}");
        for name in &names {
            let entry = format!(".entry {name}(");
            assert!(super::HELPER_PTX.contains(&entry), "helper kernel {name} is loaded but not in the helper PTX");
        }
    }
}
