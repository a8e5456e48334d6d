//! Per-device facts (capabilities, SM count), per-stream scratch state (workspaces, cuBLASLt
//! handle, zeroed counters) and the typed views every launcher uses.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{sys as drv, CudaSlice, CudaView, DevicePtrMut};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorage, DeviceId, WrapErr};
use candle_core::{bail, Device, Layout, Result};

use super::cublaslt;
use crate::dispatch::{DeviceCaps, GemmConfig, Provider, ScheduleKind};
use crate::format::{act_scale_m_stride, num_blocks};

/// Facts about one device that the providers need, queried once per ordinal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceInfo {
    pub caps: DeviceCaps,
    pub num_sms: usize,
}

pub(crate) fn ordinal(dev: &CudaDevice) -> usize {
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
    let num_sms = ctx.attribute(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).w()? as usize;
    let compute_cap = (major * 10 + minor) as u32;
    let info = DeviceInfo {
        caps: DeviceCaps {
            is_cuda: true,
            compute_cap,
            have_hopper_kernels: true,
            have_cublaslt_blockwise: cublaslt::blockwise_unavailable_reason(compute_cap).is_none(),
        },
        num_sms,
    };
    map.lock().unwrap().insert(ord, info);
    Ok(info)
}

/// Per-`CudaDevice` (i.e. per stream) scratch state.
#[derive(Default)]
pub(crate) struct StreamState {
    /// Split-K workspace of our kernels, grown on demand, never shrunk.
    pub(crate) workspace: Mutex<Option<CudaSlice<u8>>>,
    /// The persistent split tail's and stream-K's workspace: its first page holds flags that must be
    /// zero before a launch and that the kernel leaves zero (`kernels/include/fp8gemm/
    /// tail_fixup.cuh`), so it is kept apart from the split-K partials; allocated zeroed.
    pub(crate) tail_workspace: Mutex<Option<CudaSlice<u8>>>,
    /// cuBLASLt handle, workspace and algorithm cache.
    pub(crate) lt: Mutex<Option<cublaslt::LtState>>,
    /// Arrival counters of kernels that leave them zeroed (see [`with_zeroed_counters`]).
    counters: Mutex<Option<CudaSlice<u32>>>,
}

impl StreamState {
    /// The workspace a launch of `cfg` uses.
    pub(crate) fn workspace_for(&self, cfg: &GemmConfig) -> &Mutex<Option<CudaSlice<u8>>> {
        if fixup_in_kernel(cfg) {
            &self.tail_workspace
        } else {
            &self.workspace
        }
    }
}

/// Whether `cfg` sums its K shares inside the kernel (see [`ScheduleKind::fixes_up_in_kernel`]).
pub(crate) fn fixup_in_kernel(cfg: &GemmConfig) -> bool {
    cfg.schedule().is_some_and(ScheduleKind::fixes_up_in_kernel)
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
pub(crate) fn stream_state(dev: &CudaDevice) -> Arc<StreamState> {
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
pub(crate) fn view<'a, T: CudaDType>(
    what: &str,
    s: &'a CudaStorage,
    l: &Layout,
    len: usize,
) -> Result<CudaView<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?;
    let off = l.start_offset();
    if off + len > slice.len() {
        bail!("candle-fp8: {what} needs {len} elements from offset {off}, its storage holds {}", slice.len())
    }
    Ok(slice.slice(off..off + len))
}

pub(crate) fn require_contiguous(what: &str, l: &Layout) -> Result<()> {
    if !l.is_contiguous() {
        bail!("candle-fp8: {what} must be contiguous (row-major), got shape {:?} stride {:?}", l.dims(), l.stride())
    }
    Ok(())
}

/// Elements of an MN-major activation-scale buffer that the kernels may read.
pub(crate) fn act_scale_len(m: usize, k: usize) -> usize {
    num_blocks(k) * act_scale_m_stride(m)
}

pub(crate) fn raw_stream(dev: &CudaDevice) -> *mut c_void {
    dev.cuda_stream().cu_stream() as *mut c_void
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
