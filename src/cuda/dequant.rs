//! The `dequant` provider on any CUDA device: portable helper kernels (`kernels/dequant/`, PTX
//! for compute_80 loaded at run time) dequantize the operands, candle's cuBLAS runs the GEMM.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, CudaStorage, WrapErr};
use candle_core::{bail, Layout, Result};
use half::bf16;

use super::device::{require_contiguous, view};
use super::gemm::Operands;
use crate::format::{act_scale_m_stride, num_blocks, F8E4M3};

/// PTX of the portable helper kernels (`kernels/dequant/dequant.cu`, built by build.rs).
pub(crate) const HELPER_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/candle_fp8_dequant.ptx"));
/// The module name the helper kernels load under.
pub(crate) const HELPER_MODULE: &str = "candle_fp8_dequant";

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
pub(crate) fn dequant_gemm(dev: &CudaDevice, ops: &Operands, m: usize, n: usize, k: usize) -> Result<CudaStorage> {
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

#[cfg(test)]
mod tests {
    /// Every helper kernel the providers load by name (`get_or_load_custom_func("NAME",
    /// HELPER_MODULE, …)` in this folder) is an entry of the helper PTX: a misspelt or removed
    /// kernel would otherwise surface only on a GPU, at the first call of that path.
    #[test]
    fn loaded_helper_kernels_are_in_the_helper_ptx() {
        let sources = [include_str!("dequant.rs"), include_str!("cublaslt.rs")];
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
