//! The blocked-FP8 GEMM as candle ops: [`fp8_block_matmul`] (a `CustomOp2`, every provider) and
//! [`fp8_block_matmul_into`] (an in-place op, for CUDA-graph capture).

use super::validate::{check_dtype, device_caps, validate_operands, GemmShape};
use crate::cpu::cpu_blocked_gemm;
use crate::dispatch::{choose_provider, Fp8Options, Provider};
use crate::format::{act_scale_m_stride, fast_path_refusal, F8E4M3};
use candle_core::{bail, CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use std::collections::HashSet;
use std::sync::Mutex;

/// Logs a provider choice once per (provider, reason) pair.
pub(crate) fn log_once(provider: Provider, what: &str) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let key = format!("{provider}:{what}");
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.get_or_insert_with(HashSet::new).insert(key) {
        tracing::info!(provider = provider.as_str(), "candle-fp8: {what}");
    }
}

/// Logs the first GEMM of each provider. Runs on every call, so it is a flag test, not a
/// formatted string and a lock.
pub(crate) fn log_provider_once(provider: Provider) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SEEN: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];
    if !SEEN[provider as usize].swap(true, Ordering::Relaxed) {
        tracing::info!(provider = provider.as_str(), "candle-fp8: blocked-FP8 GEMM provider: {provider}");
    }
}

/// The GEMM op; the scales travel in the struct, `qa` and `w` are the op's arguments.
struct Fp8BlockMatmul {
    sa: Tensor,
    sw: Tensor,
    shape: GemmShape,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    provider: Provider,
}

impl CustomOp2 for Fp8BlockMatmul {
    fn name(&self) -> &'static str {
        "fp8-block-matmul"
    }

    fn cpu_fwd(&self, qa: &CpuStorage, qa_l: &Layout, w: &CpuStorage, w_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let GemmShape { m, n, k } = self.shape;
        let qa = &qa.as_slice::<F8E4M3>()?[qa_l.start_offset()..];
        let w = &w.as_slice::<F8E4M3>()?[w_l.start_offset()..];
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (candle_core::Storage::Cpu(sa), candle_core::Storage::Cpu(sw)) = (&*sa_st, &*sw_st) else {
            bail!("fp8-block-matmul: scales are not on the CPU while qa and w are")
        };
        let sa = &sa.as_slice::<f32>()?[sa_l.start_offset()..];
        let sw = &sw.as_slice::<f32>()?[sw_l.start_offset()..];
        let y = cpu_blocked_gemm(qa, sa, act_scale_m_stride(m), w, sw, m, n, k);
        Ok((CpuStorage::BF16(y), Shape::from((m, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        qa: &candle_core::CudaStorage,
        qa_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let GemmShape { m, n, k } = self.shape;
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (candle_core::Storage::Cuda(sa), candle_core::Storage::Cuda(sw)) = (&*sa_st, &*sw_st) else {
            bail!("fp8-block-matmul: scales are not on the CUDA device while qa and w are")
        };
        let y = crate::cuda::gemm::fp8_gemm(self.provider, (qa, qa_l), (sa, sa_l), (w, w_l), (sw, sw_l), m, n, k)?;
        Ok((y, Shape::from((m, n))))
    }
}

/// The in-place GEMM of [`fp8_block_matmul_into`]: `out` is the op's destination, `qa` and `w`
/// its sources, the scales travel in the struct.
struct Fp8BlockMatmulInto {
    sa: Tensor,
    sw: Tensor,
    shape: GemmShape,
}

impl candle_core::InplaceOp3 for Fp8BlockMatmulInto {
    fn name(&self) -> &'static str {
        "fp8-block-matmul-into"
    }

    fn cpu_fwd(
        &self,
        out: &mut CpuStorage,
        out_l: &Layout,
        qa: &CpuStorage,
        qa_l: &Layout,
        w: &CpuStorage,
        w_l: &Layout,
    ) -> Result<()> {
        let GemmShape { m, n, .. } = self.shape;
        let (y, _) =
            Fp8BlockMatmul { sa: self.sa.clone(), sw: self.sw.clone(), shape: self.shape, provider: Provider::Cpu }
                .cpu_fwd(qa, qa_l, w, w_l)?;
        let (CpuStorage::BF16(dst), CpuStorage::BF16(y)) = (out, &y) else {
            bail!("fp8-block-matmul-into: out must be bf16")
        };
        let off = out_l.start_offset();
        dst[off..off + m * n].copy_from_slice(y);
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        out: &mut candle_core::CudaStorage,
        out_l: &Layout,
        qa: &candle_core::CudaStorage,
        qa_l: &Layout,
        w: &candle_core::CudaStorage,
        w_l: &Layout,
    ) -> Result<()> {
        let GemmShape { m, n, k } = self.shape;
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (candle_core::Storage::Cuda(sa), candle_core::Storage::Cuda(sw)) = (&*sa_st, &*sw_st) else {
            bail!("fp8-block-matmul-into: scales are not on the CUDA device while qa and w are")
        };
        crate::cuda::gemm::hopper_gemm_into((qa, qa_l), (sa, sa_l), (w, w_l), (sw, sw_l), (out, out_l), m, n, k)?;
        log_provider_once(Provider::Hopper);
        Ok(())
    }
}

/// Blocked-FP8 GEMM: `y[M, N] = Σ_kb sa[m, kb] · sw[n/128, kb] · Σ_{k ∈ kb} qa[m, k] · w[n, k]`
/// in f32, returned as bf16.
///
/// - `qa`: e4m3 `[M, K]`, row-major (from [`crate::quant::quantize_activation`]).
/// - `sa`: f32 `[M, ceil(K/128)]` with strides `(1, round_up(M, 4))` (MN-major).
/// - `w`: e4m3 `[N, K]`, row-major (as stored in checkpoints).
/// - `sw`: f32 `[ceil(N/128), ceil(K/128)]`, row-major (`weight_scale_inv`).
///
/// The provider follows `CANDLE_FP8_BACKEND` ([`Fp8Options::from_env`]); see
/// [`fp8_block_matmul_with`] for explicit options.
pub fn fp8_block_matmul(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    fp8_block_matmul_with(&Fp8Options::from_env()?, qa, sa, w, sw)
}

/// [`fp8_block_matmul`] into a preallocated output: writes `qa · wᵀ` into `out` (bf16, row-major
/// contiguous `[M, N]`, on the operands' device) and allocates nothing per call (our split-K
/// workspace is cached per stream). For CUDA-graph capture: an allocation inside a capture
/// becomes a graph memory node, and those nodes also keep consecutive GEMM launches from
/// overlapping through programmatic dependent launch.
///
/// Providers: on CUDA always our kernels (sm_90; an error naming the reason elsewhere, whatever
/// `CANDLE_FP8_BACKEND` says), on the CPU the reference kernel. Operands are validated as in
/// [`fp8_block_matmul`]; `out` must not be a view with gaps (its storage is written in place).
pub fn fp8_block_matmul_into(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor, out: &Tensor) -> Result<()> {
    let shape = validate_operands(qa, sa, w, sw)?;
    let GemmShape { m, n, .. } = shape;
    check_dtype("out", out, DType::BF16)?;
    if out.dims() != [m, n] {
        bail!("out: expected shape [{m}, {n}] (qa rows × w rows), got {:?}", out.dims())
    }
    if !out.is_contiguous() {
        bail!("out: must be row-major contiguous [{m}, {n}], got strides {:?}", out.stride())
    }
    if !out.device().same_device(qa.device()) {
        bail!("out: is on {:?} but the operands are on {:?}", out.device(), qa.device())
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // `out` (bf16) cannot share storage with sa/sw (f32); candle rejects aliasing of qa and w.
    out.inplace_op3(qa, w, &Fp8BlockMatmulInto { sa: sa.clone(), sw: sw.clone(), shape })
}

/// [`fp8_block_matmul`] with explicit options instead of the environment.
pub fn fp8_block_matmul_with(opts: &Fp8Options, qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    let shape = validate_operands(qa, sa, w, sw)?;
    let GemmShape { m, n, k } = shape;
    if m == 0 || n == 0 {
        return Tensor::zeros((m, n), DType::BF16, qa.device());
    }
    let caps = device_caps(qa.device())?;
    let provider = choose_provider(opts.backend, &caps, m, n, k)?;
    if let Some(why) = fast_path_refusal(m, n, k) {
        if caps.is_cuda {
            log_once(provider, &format!("shape off the fast path ({why}): using {provider}"));
        }
    }
    log_provider_once(provider);
    qa.apply_op2_no_bwd(w, &Fp8BlockMatmul { sa: sa.clone(), sw: sw.clone(), shape, provider })
}
