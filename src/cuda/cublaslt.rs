//! The cuBLASLt blockwise provider: e4m3 × e4m3 → bf16 with f32 compute, activation scales
//! `CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F` and weight scales `..._BLK128x128_32F` (CUDA ≥
//! 12.9, sm_90 only), through cudarc's cuBLASLt bindings (candle's re-export).
//!
//! cuBLAS is column-major, so the row-major `y[m, n] = qa[m, k] · w[n, k]ᵀ` is computed as
//! the column-major `D (n × m) = op(A) · B` with
//! - `A` = `w` (stored k × n column-major, `ld = k`), `TRANSA = T`, scales `BLK128x128_32F`:
//!   `[ceil(n/128)][round_up(ceil(k/128), 4)]` row-major (the K-block count padded to 4),
//! - `B` = `qa` (stored k × m column-major, `ld = k`), `TRANSB = N`, scales `VEC128_32F`:
//!   `[k/128][m']` (token-major), where the token count `m'` must be a multiple of 4,
//! - `D` = `y` (n × m column-major, `ld = n`), bf16.
//!
//! Our activation scales are already `[k/128][round_up(m, 4)]`, so `m' = round_up(m, 4)`;
//! when `m % 4 != 0` the activation is copied into a zero-padded `m' × k` buffer and the
//! padded output rows are dropped. When `ceil(k/128) % 4 != 0` the weight scales are copied
//! into a padded buffer (one small kernel). Wrong layouts give silently wrong numbers: the
//! GPU tests check this provider against the CPU reference.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use candle_core::cuda_backend::cudarc::cublaslt::{result, sys};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DevicePtr, DevicePtrMut, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, CudaStorage, WrapErr};
use candle_core::{bail, Result};
use half::bf16;

use super::dequant::{helper_launch_cfg, HELPER_MODULE, HELPER_PTX};
use super::device::DeviceInfo;
use super::gemm::Operands;
use crate::dispatch::Provider;
use crate::format::{act_scale_m_stride, num_blocks, round_up, BLOCK};

/// cuBLASLt workspace (NVIDIA recommends 32 MiB on Hopper).
const WORKSPACE_BYTES: usize = 32 << 20;

/// The cuBLASLt version that introduced `VEC128_32F` / `BLK128x128_32F`.
const MIN_VERSION: usize = 120900;

/// Version of the loadable libcublasLt (e.g. 130000), or why it cannot be loaded.
pub(crate) fn cublaslt_version() -> std::result::Result<usize, String> {
    // With cudarc's `dynamic-loading`, a missing library panics on first use.
    std::panic::catch_unwind(|| unsafe { sys::cublasLtGetVersion() })
        .map_err(|_| "libcublasLt could not be loaded".to_string())
}

/// Why cuBLASLt block-scaled FP8 cannot run on a device of this compute capability, if so.
pub(crate) fn blockwise_unavailable_reason(compute_cap: u32) -> Option<String> {
    if compute_cap != 90 {
        return Some(format!(
            "cuBLASLt 1x128/128x128 block scaling runs on sm_90 only, the device is sm_{compute_cap}"
        ));
    }
    match cublaslt_version() {
        Err(e) => Some(e),
        Ok(v) if v < MIN_VERSION => {
            Some(format!("cuBLASLt {v} is older than {MIN_VERSION} (CUDA 12.9), which added 128-block scaling"))
        }
        Ok(_) => None,
    }
}

fn lt_err(what: &str, e: result::CublasError) -> candle_core::Error {
    candle_core::Error::Msg(format!("candle-fp8 cuBLASLt {what}: {e:?}")).bt()
}

/// One cuBLASLt handle per candle device (stream), its workspace, and the chosen algorithm
/// per `(m', n, k)`.
pub(crate) struct LtState {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    algos: HashMap<(usize, usize, usize), sys::cublasLtMatmulAlgo_t>,
}

// The handle is only used under the owning Mutex.
unsafe impl Send for LtState {}

impl LtState {
    fn new(dev: &CudaDevice) -> Result<Self> {
        dev.cuda_stream().context().bind_to_thread().w()?;
        let handle = result::create_handle().map_err(|e| lt_err("create handle", e))?;
        let workspace = dev.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
        Ok(Self { handle, workspace, algos: HashMap::new() })
    }
}

struct Desc(sys::cublasLtMatmulDesc_t);
impl Drop for Desc {
    fn drop(&mut self) {
        unsafe { result::destroy_matmul_desc(self.0).ok() };
    }
}
struct MatLayout(sys::cublasLtMatrixLayout_t);
impl Drop for MatLayout {
    fn drop(&mut self) {
        unsafe { result::destroy_matrix_layout(self.0).ok() };
    }
}
struct Pref(sys::cublasLtMatmulPreference_t);
impl Drop for Pref {
    fn drop(&mut self) {
        unsafe { result::destroy_matmul_pref(self.0).ok() };
    }
}

fn set<T>(desc: &Desc, attr: sys::cublasLtMatmulDescAttributes_t, v: &T) -> Result<()> {
    unsafe { result::set_matmul_desc_attribute(desc.0, attr, v as *const T as *const c_void, std::mem::size_of::<T>()) }
        .map_err(|e| lt_err(&format!("set {attr:?}"), e))
}

fn layout(ty: sys::cudaDataType, rows: usize, cols: usize, ld: usize) -> Result<MatLayout> {
    result::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64)
        .map(MatLayout)
        .map_err(|e| lt_err("matrix layout", e))
}

/// `y` (bf16, `m * n`) = cuBLASLt block-scaled FP8 GEMM.
pub(crate) fn gemm(
    dev: &CudaDevice,
    lt: &Mutex<Option<LtState>>,
    info: DeviceInfo,
    ops: &Operands,
    m: usize,
    n: usize,
    k: usize,
) -> Result<CudaStorage> {
    if let Some(why) = info.caps.unusable_reason(Provider::CublasLt) {
        bail!("candle-fp8: the cublaslt provider cannot run: {why}")
    }
    if k % BLOCK != 0 {
        bail!("candle-fp8 cublaslt: K = {k} is not a multiple of {BLOCK}")
    }
    let stream = dev.cuda_stream();
    let kb = k / BLOCK;
    let nb = num_blocks(n);
    let kb4 = round_up(kb, 4);
    let m_pad = act_scale_m_stride(m);

    // Activation rows padded to a multiple of 4.
    let qa_pad: Option<CudaSlice<u8>> = if m != m_pad {
        let mut p = dev.alloc_zeros::<u8>(m_pad * k)?;
        let src: CudaView<u8> = unsafe { ops.qa.transmute::<u8>(m * k) }
            .ok_or_else(|| candle_core::Error::Msg("candle-fp8: qa view".into()))?;
        stream.memcpy_dtod(&src, &mut p.slice_mut(0..m * k)).w()?;
        Some(p)
    } else {
        None
    };
    // Activation scales must cover all m_pad rows of every K-block column.
    let sa_pad: Option<CudaSlice<f32>> = if ops.sa.len() < kb * m_pad {
        let mut p = dev.alloc_zeros::<f32>(kb * m_pad)?;
        stream.memcpy_dtod(&ops.sa, &mut p.slice_mut(0..ops.sa.len())).w()?;
        Some(p)
    } else {
        None
    };
    // Weight scales with the K-block count padded to a multiple of 4.
    let sw_pad: Option<CudaSlice<f32>> = if kb4 != kb {
        let mut p = unsafe { dev.alloc::<f32>(nb * kb4)? };
        let f = dev.get_or_load_custom_func("candle_fp8_pad_cols_f32", HELPER_MODULE, HELPER_PTX)?;
        let (r, c, dc) = (nb as i64, kb as i64, kb4 as i64);
        let mut b = f.builder();
        b.arg(&ops.sw).arg(&mut p).arg(&r).arg(&c).arg(&dc);
        unsafe { b.launch(helper_launch_cfg(nb * kb4)) }.w()?;
        Some(p)
    } else {
        None
    };

    let mut y = unsafe { dev.alloc::<bf16>(m_pad * n)? };

    let mut guard = lt.lock().unwrap();
    if guard.is_none() {
        *guard = Some(LtState::new(dev)?);
    }
    let st = guard.as_mut().unwrap();

    use sys::cublasLtMatmulDescAttributes_t as A;
    use sys::cublasLtMatmulMatrixScale_t as S;
    use sys::cudaDataType as T;
    let desc = Desc(
        result::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, T::CUDA_R_32F)
            .map_err(|e| lt_err("matmul desc", e))?,
    );
    const OP_N: i32 = 0;
    const OP_T: i32 = 1;
    set(&desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &OP_T)?;
    set(&desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &OP_N)?;
    set(&desc, A::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &(S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F as i32))?;
    set(&desc, A::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &(S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F as i32))?;
    let a_l = layout(T::CUDA_R_8F_E4M3, k, n, k)?;
    let b_l = layout(T::CUDA_R_8F_E4M3, k, m_pad, k)?;
    let d_l = layout(T::CUDA_R_16BF, n, m_pad, n)?;

    {
        let (a_ptr, _g1) = ops.w.device_ptr(&stream);
        let (sw_ptr, _g2) = match &sw_pad {
            Some(p) => p.device_ptr(&stream),
            None => ops.sw.device_ptr(&stream),
        };
        let (b_ptr, _g3) = match &qa_pad {
            Some(p) => p.device_ptr(&stream),
            None => ops.qa.device_ptr(&stream),
        };
        let (sa_ptr, _g4) = match &sa_pad {
            Some(p) => p.device_ptr(&stream),
            None => ops.sa.device_ptr(&stream),
        };
        let (y_ptr, _g5) = y.device_ptr_mut(&stream);
        let ws_len = st.workspace.len();
        let (ws_ptr, _g6) = st.workspace.device_ptr_mut(&stream);
        set(&desc, A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &(sw_ptr as *const c_void))?;
        set(&desc, A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &(sa_ptr as *const c_void))?;
        let key = (m_pad, n, k);
        let algo = match st.algos.get(&key) {
            Some(a) => *a,
            None => {
                let pref = Pref(result::create_matmul_pref().map_err(|e| lt_err("preference", e))?);
                let ws = WORKSPACE_BYTES as u64;
                unsafe {
                    result::set_matmul_pref_attribute(
                        pref.0,
                        sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                        &ws as *const u64 as *const c_void,
                        std::mem::size_of::<u64>(),
                    )
                }
                .map_err(|e| lt_err("preference workspace", e))?;
                let h =
                    unsafe { result::get_matmul_algo_heuristic(st.handle, desc.0, a_l.0, b_l.0, d_l.0, d_l.0, pref.0) }
                        .map_err(|e| {
                            lt_err(&format!("no algorithm for m'={m_pad} n={n} k={k} (block-scaled e4m3 -> bf16)"), e)
                        })?;
                st.algos.insert(key, h.algo);
                h.algo
            }
        };
        let alpha = 1f32;
        let beta = 0f32;
        unsafe {
            result::matmul(
                st.handle,
                desc.0,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                a_ptr as *const c_void,
                a_l.0,
                b_ptr as *const c_void,
                b_l.0,
                y_ptr as *const c_void,
                d_l.0,
                y_ptr as *mut c_void,
                d_l.0,
                &algo,
                ws_ptr as *mut c_void,
                ws_len,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| lt_err(&format!("matmul m={m} n={n} k={k}"), e))?;
    }
    drop(guard);

    let y = if m != m_pad {
        let mut exact = unsafe { dev.alloc::<bf16>(m * n)? };
        stream.memcpy_dtod(&y.slice(0..m * n), &mut exact).w()?;
        exact
    } else {
        y
    };
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}
