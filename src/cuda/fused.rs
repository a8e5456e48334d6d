//! The fused elementwise + quantization kernels (`kernels/fused/`): launch wrappers over
//! candle's CUDA storage. The tensor-level API with its CPU path is `ops::fused`.
//!
//! Outputs are allocated here in the activation contract's layout: `q` e4m3 `m * k`, `sa` f32
//! `ceil(k / 128) * round_up(m, 4)` MN-major. The kernels write the padding rows of `sa` (zeros)
//! themselves: no memset launch sits between them and the PDL-launched GEMM. They take any `k`
//! that is a multiple of 8 ([`QUANT_K_MULTIPLE`]): a `k % 128 != 0` row's last group is partial.

use std::ffi::c_void;

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, Layout, Result};
use half::bf16;

use super::device::{act_scale_len, raw_stream, require_contiguous, view};
use super::ffi::{self, NORM_BARRIER_WORDS, NORM_SPLIT_MAX_ROWS, NORM_X_SETTLED};
use super::gemm::QUANT_K_MULTIPLE;
use crate::format::{BLOCK, F8E4M3};

/// Whether `m` rows of `k` columns take the split norm: a single row of at least 1024 columns
/// (batch-1 decode), whole 128-column chunks, is spread over 8 CTAs, so that one SM no longer
/// pulls the whole row and its split-K partials (same bits; faster at one row only, see
/// docs/perf.md). Other rows take the one-CTA kernel (the kernel's own rule: api.h).
fn norm_split(m: usize, k: usize) -> bool {
    m <= NORM_SPLIT_MAX_ROWS && (1024..=65536).contains(&k) && k % BLOCK == 0
}

/// Freshly allocated `(q, sa)` buffers for an `[m, k]` activation.
fn alloc_quantized(
    dev: &candle_core::cuda_backend::CudaDevice,
    m: usize,
    k: usize,
) -> Result<(
    candle_core::cuda_backend::cudarc::driver::CudaSlice<F8E4M3>,
    candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
)> {
    // SAFETY: the kernel writes every element (the padding rows of sa included).
    let q = unsafe { dev.alloc::<F8E4M3>(m * k)? };
    let sa = unsafe { dev.alloc::<f32>(act_scale_len(m, k))? };
    Ok((q, sa))
}

fn check_shape(what: &str, m: usize, k: usize) -> Result<()> {
    if m == 0 || k == 0 || k % QUANT_K_MULTIPLE != 0 {
        bail!("candle-fp8 {what}: need m >= 1 and a non-zero multiple of {QUANT_K_MULTIPLE} columns, got m={m} k={k}")
    }
    Ok(())
}

/// The residual of [`add_rmsnorm_quantize`].
pub(crate) enum Residual<'a> {
    /// bf16 contiguous `[m, k]`.
    Bf16((&'a CudaStorage, &'a Layout)),
    /// A split-K GEMM output left unreduced: f32 contiguous `[splits, m, k]` and `splits`.
    Partials((&'a CudaStorage, &'a Layout), usize),
}

/// `(x + residual, q, sa)`: residual add (when `residual` is given), RMSNorm with `gamma` and
/// activation quantization in one launch. All inputs contiguous: `x` bf16 `[m, k]`, `gamma`
/// bf16 `[k]`, the residual as [`Residual`]; `k % 8 == 0`. The sum is returned only when
/// `residual` is given.
///
/// `x_settled`: the caller guarantees `x` is complete by the time the previous kernel in the
/// stream passes its `griddepcontrol.wait` — `x` written two or more launches back, and the
/// previous launch one of our GEMMs (they trigger their dependents only after waiting). The
/// kernel then loads `x` before it waits (a decode step's residual stream, evicted from L2 by
/// the weights since it was written). Getting this wrong is a data race: crate-internal only.
pub(crate) fn add_rmsnorm_quantize(
    x: (&CudaStorage, &Layout),
    residual: Option<Residual>,
    gamma: (&CudaStorage, &Layout),
    eps: f32,
    m: usize,
    k: usize,
    x_settled: bool,
) -> Result<(Option<CudaStorage>, CudaStorage, CudaStorage)> {
    check_shape("add_rmsnorm_quantize", m, k)?;
    require_contiguous("x", x.1)?;
    require_contiguous("gamma", gamma.1)?;
    match &residual {
        Some(Residual::Bf16(r)) => require_contiguous("residual", r.1)?,
        Some(Residual::Partials(r, splits)) => {
            require_contiguous("residual partials", r.1)?;
            if *splits == 0 || *splits > 64 {
                bail!("candle-fp8 add_rmsnorm_quantize: {splits} split-K partials (need 1..=64)")
            }
        }
        None => {}
    }
    let dev = &x.0.device;
    let stream = dev.cuda_stream();
    let (mut q, mut sa) = alloc_quantized(dev, m, k)?;
    let mut sum = match &residual {
        Some(_) => Some(unsafe { dev.alloc::<bf16>(m * k)? }),
        None => None,
    };
    {
        let xv = view::<bf16>("x", x.0, x.1, m * k)?;
        let gv = view::<bf16>("gamma", gamma.0, gamma.1, k)?;
        let rv = match &residual {
            Some(Residual::Bf16(r)) => Some(view::<bf16>("residual", r.0, r.1, m * k)?),
            _ => None,
        };
        let pv = match &residual {
            Some(Residual::Partials(r, splits)) => {
                Some((view::<f32>("residual partials", r.0, r.1, splits * m * k)?, *splits))
            }
            _ => None,
        };
        let (x_ptr, _gx) = xv.device_ptr(&stream);
        let (g_ptr, _gg) = gv.device_ptr(&stream);
        let (r_ptr, _gr) = match &rv {
            Some(v) => {
                let (p, g) = v.device_ptr(&stream);
                (p as *const c_void, Some(g))
            }
            None => (std::ptr::null(), None),
        };
        let (p_ptr, splits, _gp) = match &pv {
            Some((v, s)) => {
                let (p, g) = v.device_ptr(&stream);
                (p as *const f32, *s, Some(g))
            }
            None => (std::ptr::null(), 0, None),
        };
        let (s_ptr, _gs) = match sum.as_mut() {
            Some(b) => {
                let (p, g) = b.device_ptr_mut(&stream);
                (p as *mut c_void, Some(g))
            }
            None => (std::ptr::null_mut(), None),
        };
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (sa_ptr, _gsa) = sa.device_ptr_mut(&stream);
        let barrier_words = if norm_split(m, k) { m * NORM_BARRIER_WORDS } else { 0 };
        let flags = if x_settled { NORM_X_SETTLED } else { 0 };
        let status = super::device::with_zeroed_counters(dev, barrier_words, |bar| {
            Ok(unsafe {
                if p_ptr.is_null() {
                    ffi::fp8gemm_add_rmsnorm_quant(
                        x_ptr as *const c_void,
                        r_ptr,
                        g_ptr as *const c_void,
                        eps,
                        s_ptr,
                        q_ptr as *mut u8,
                        sa_ptr as *mut f32,
                        m as i64,
                        k as i64,
                        bar,
                        flags,
                        raw_stream(dev),
                    )
                } else {
                    ffi::fp8gemm_add_partials_rmsnorm_quant(
                        x_ptr as *const c_void,
                        p_ptr,
                        splits as i32,
                        g_ptr as *const c_void,
                        eps,
                        s_ptr,
                        q_ptr as *mut u8,
                        sa_ptr as *mut f32,
                        m as i64,
                        k as i64,
                        bar,
                        flags,
                        raw_stream(dev),
                    )
                }
            })
        })?;
        ffi::check(&format!("add_rmsnorm_quantize (m={m} k={k})"), status)?;
    }
    Ok((
        sum.map(|s| CudaStorage::wrap_cuda_slice(s, dev.clone())),
        CudaStorage::wrap_cuda_slice(q, dev.clone()),
        CudaStorage::wrap_cuda_slice(sa, dev.clone()),
    ))
}

/// `(q, sa)` of `bf16(silu(gate)) * up` where `gu` is bf16 contiguous `[m, 2 * inter]` (gate =
/// the first `inter` columns), `inter % 8 == 0`, in one launch.
pub(crate) fn swiglu_quantize(
    gu: (&CudaStorage, &Layout),
    m: usize,
    inter: usize,
) -> Result<(CudaStorage, CudaStorage)> {
    check_shape("swiglu_quantize", m, inter)?;
    require_contiguous("gate_up", gu.1)?;
    let dev = &gu.0.device;
    let stream = dev.cuda_stream();
    let (mut q, mut sa) = alloc_quantized(dev, m, inter)?;
    {
        let gv = view::<bf16>("gate_up", gu.0, gu.1, m * 2 * inter)?;
        let (g_ptr, _gg) = gv.device_ptr(&stream);
        let (q_ptr, _gq) = q.device_ptr_mut(&stream);
        let (sa_ptr, _gsa) = sa.device_ptr_mut(&stream);
        let status = unsafe {
            ffi::fp8gemm_swiglu_quant(
                g_ptr as *const c_void,
                m as i64,
                inter as i64,
                q_ptr as *mut u8,
                sa_ptr as *mut f32,
                raw_stream(dev),
            )
        };
        ffi::check(&format!("swiglu_quantize (m={m} inter={inter})"), status)?;
    }
    Ok((CudaStorage::wrap_cuda_slice(q, dev.clone()), CudaStorage::wrap_cuda_slice(sa, dev.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split norm is for one row of 1024..=65536 columns in whole 128-column chunks (the
    /// kernels' own limits).
    #[test]
    fn norm_split_takes_one_row_of_1024_to_65536_columns() {
        assert!(norm_split(1, 1024) && norm_split(1, 5120) && norm_split(1, 65536));
        assert!(!norm_split(2, 5120), "more rows than NORM_SPLIT_MAX_ROWS");
        assert!(!norm_split(1, 896), "below candle's 1024-thread block");
        assert!(!norm_split(1, 576), "below candle's 1024-thread block (SmolLM2's hidden size)");
        assert!(!norm_split(1, 1536 + 64), "a partial last chunk: the one-CTA kernel");
        assert!(!norm_split(1, 65536 + 128), "past the kernel's shared-memory bound");
        assert_eq!(NORM_BARRIER_WORDS, 2 + 32, "arrivals, departures, 32 warp sums");
    }
}
