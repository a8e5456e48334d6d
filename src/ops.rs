//! The blocked-FP8 GEMM as a candle `CustomOp`: `y[M, N] (bf16) = qa · wᵀ` with per-token
//! 1×128 activation scales and 128×128 weight scales, promoted into an f32 accumulator every
//! K block (two-level accumulation, as on the GPU).
//!
//! [`fp8_block_matmul`] validates every operand (dtype, rank, shape, strides, device) with an
//! error naming the tensor and the bad value, chooses the provider (see [`crate::dispatch`])
//! and applies the op.

use crate::dispatch::{self, BackendRequest, DeviceCaps, Provider};
pub use crate::cpu_gemm::cpu_blocked_gemm;
use crate::format::{act_scale_m_stride, num_blocks, weight_scale_shape, F8E4M3};
use candle_core::{bail, CpuStorage, CustomOp2, DType, Device, Layout, Result, Shape, Tensor};
use std::collections::HashSet;
use std::sync::Mutex;

/// Validated GEMM dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Tokens (rows of `qa` and `y`).
    pub m: usize,
    /// Output features (rows of `w`).
    pub n: usize,
    /// Input features.
    pub k: usize,
}

fn check_dtype(name: &str, t: &Tensor, want: DType) -> Result<()> {
    if t.dtype() != want {
        bail!("{name}: expected dtype {want:?}, got {:?} (shape {:?})", t.dtype(), t.dims())
    }
    Ok(())
}

fn dims2(name: &str, t: &Tensor) -> Result<(usize, usize)> {
    match t.dims() {
        &[a, b] => Ok((a, b)),
        d => bail!("{name}: expected a rank-2 tensor, got shape {d:?}"),
    }
}

fn check_row_major(name: &str, t: &Tensor) -> Result<()> {
    let (r, c) = dims2(name, t)?;
    let st = t.stride();
    if r > 1 && c > 0 && (st[1] != 1 || st[0] != c) {
        bail!("{name}: must be row-major contiguous [{r}, {c}] with strides [{c}, 1], got strides {st:?}")
    }
    if c > 1 && st[1] != 1 {
        bail!("{name}: must be row-major contiguous, got strides {st:?}")
    }
    Ok(())
}

/// Checks the four GEMM operands against the numeric contract (design.md §1).
pub fn validate_operands(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<GemmShape> {
    check_dtype("qa", qa, DType::F8E4M3)?;
    check_dtype("w", w, DType::F8E4M3)?;
    check_dtype("sa", sa, DType::F32)?;
    check_dtype("sw", sw, DType::F32)?;
    let (m, k) = dims2("qa", qa)?;
    let (n, kw) = dims2("w", w)?;
    if k != kw {
        bail!("K mismatch: qa is [{m}, {k}] (K = {k}) but w is [{n}, {kw}] (K = {kw})")
    }
    if k == 0 {
        bail!("qa: K = 0 (shape [{m}, 0]); the GEMM needs at least one K element")
    }
    check_row_major("qa", qa)?;
    check_row_major("w", w)?;
    let kb = num_blocks(k);
    if sa.dims() != [m, kb] {
        bail!("sa: shape {:?} does not match qa [{m}, {k}]: expected [{m}, {kb}] = [M, ceil(K/128)]", sa.dims())
    }
    let st = sa.stride();
    let mpad = act_scale_m_stride(m);
    if (m > 1 && st[0] != 1) || (kb > 1 && st[1] != mpad) {
        bail!(
            "sa: must be MN-major with strides [1, {mpad}] (= [1, round_up(M, 4)]), got strides {st:?}; \
             use candle_fp8::quant::quantize_activation or quant::act_scales_view"
        )
    }
    let (nb, _) = weight_scale_shape(n, k);
    crate::format::check_weight_scale_shape("sw", n, k, sw.dims())?;
    if nb > 0 {
        check_row_major("sw", sw)?;
    }
    for (name, t) in [("sa", sa), ("w", w), ("sw", sw)] {
        if !t.device().same_device(qa.device()) {
            let hint = if t.device().location() == qa.device().location() {
                " (two candle Device handles for the same GPU: create all operands from one Device)"
            } else {
                ""
            };
            bail!("{name}: on device {:?} but qa is on {:?}{hint}", t.device().location(), qa.device().location())
        }
    }
    Ok(GemmShape { m, n, k })
}

/// Capabilities of the device the tensors live on.
pub fn device_caps(device: &Device) -> Result<DeviceCaps> {
    match device {
        Device::Cpu => Ok(DeviceCaps::CPU),
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => crate::cuda::device_caps(dev),
        _ => bail!("candle-fp8 supports CPU and (with the `cuda` feature) CUDA devices, got {:?}", device.location()),
    }
}

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
fn log_provider_once(provider: Provider) {
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
        let y = crate::cuda::fp8_gemm(self.provider, (qa, qa_l), (sa, sa_l), (w, w_l), (sw, sw_l), m, n, k)?;
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
        let (y, _) = Fp8BlockMatmul { sa: self.sa.clone(), sw: self.sw.clone(), shape: self.shape, provider: Provider::Cpu }
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
        crate::cuda::hopper_gemm_into((qa, qa_l), (sa, sa_l), (w, w_l), (sw, sw_l), (out, out_l), m, n, k)?;
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
/// The provider follows `CANDLE_FP8_BACKEND` (see [`crate::dispatch`]).
pub fn fp8_block_matmul(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    fp8_block_matmul_with(dispatch::backend_from_env()?, qa, sa, w, sw)
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

/// `quantize_activation(x)` then our GEMM (see `cuda::quantize_gemm`): with `quant_in` and a
/// bf16 `x` at the sizes compiled for it, one launch that quantizes inside the GEMM; otherwise
/// two adjacent launches with every buffer allocated first (the GEMM streams its weights while
/// the quantizer runs). `x` bf16/f16/f32 `[M, K]` on the CUDA device of `w`, `M ≥ 1`,
/// `K % 128 == 0`; `w`, `sw` as validated by `Fp8BlockLinear`.
#[cfg(feature = "cuda")]
pub(crate) fn quantize_matmul_hopper(x: &Tensor, w: &Tensor, sw: &Tensor, quant_in: bool) -> Result<Tensor> {
    use candle_core::{op::BackpropOp, Storage};
    let (m, k) = dims2("x", x)?;
    let n = w.dim(0)?;
    if !x.device().same_device(w.device()) {
        bail!("fp8 linear: x is on {:?} but the weight is on {:?}", x.device(), w.device())
    }
    let x = if x.dtype() == DType::F16 { x.to_dtype(DType::F32)? } else { x.contiguous()? };
    let y = {
        let (xs, xl) = x.storage_and_layout();
        let (ws, wl) = w.storage_and_layout();
        let (ss, sl) = sw.storage_and_layout();
        let (Storage::Cuda(xs), Storage::Cuda(ws), Storage::Cuda(ss)) = (&*xs, &*ws, &*ss) else {
            bail!("fp8 linear: x, weight and weight_scale_inv must all be on the CUDA device")
        };
        crate::cuda::quantize_gemm((xs, xl), (ws, wl), (ss, sl), m, n, k, quant_in)?
    };
    log_provider_once(Provider::Hopper);
    Ok(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false))
}

/// One GEMM operand's CUDA storage and layout.
#[cfg(feature = "cuda")]
type CudaOperand<'a> = (&'a candle_core::cuda_backend::CudaStorage, &'a candle_core::Layout);

/// Runs `f` on the CUDA storages of the four GEMM operands (`what`: an error naming the
/// operation when any of them is not on a CUDA device).
#[cfg(feature = "cuda")]
fn with_cuda_operands<R>(
    what: &str,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    f: impl FnOnce(CudaOperand<'_>, CudaOperand<'_>, CudaOperand<'_>, CudaOperand<'_>) -> Result<R>,
) -> Result<R> {
    use candle_core::Storage;
    let (qs, ql) = qa.storage_and_layout();
    let (ss, sl) = sa.storage_and_layout();
    let (ws, wl) = w.storage_and_layout();
    let (vs, vl) = sw.storage_and_layout();
    let (Storage::Cuda(qs), Storage::Cuda(ss), Storage::Cuda(ws), Storage::Cuda(vs)) = (&*qs, &*ss, &*ws, &*vs) else {
        bail!("{what}: qa, sa, w and sw must all be on the CUDA device")
    };
    f((qs, ql), (ss, sl), (ws, wl), (vs, vl))
}

/// Our GEMM with the split-K reduction left to the caller when the schedule splits K through
/// the workspace (`cuda::hopper_gemm_unreduced`). Operands validated as for
/// [`fp8_block_matmul`]; all on one CUDA device.
#[cfg(feature = "cuda")]
pub(crate) fn fp8_block_matmul_unreduced(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<crate::linear::Unreduced> {
    use crate::cuda::GemmOutput;
    use crate::linear::Unreduced;
    use candle_core::{op::BackpropOp, Storage};
    let GemmShape { m, n, k } = validate_operands(qa, sa, w, sw)?;
    let out = with_cuda_operands("fp8-block-matmul", qa, sa, w, sw, |q, s, w, v| {
        crate::cuda::hopper_gemm_unreduced(q, s, w, v, m, n, k)
    })?;
    log_provider_once(Provider::Hopper);
    Ok(match out {
        GemmOutput::Y(y) => Unreduced::Done(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false)),
        GemmOutput::Partials(p, splits) => {
            Unreduced::Partials(Tensor::from_storage(Storage::Cuda(p), (splits, m, n), BackpropOp::none(), false))
        }
    })
}

/// Environment variables that pick the variant of the gated (SwiGLU-epilogue) gate/up GEMM, as
/// tuning knobs: weight rows per CTA (64, 128 or 256) and ring depth (64 rows: 6 or 8; 128 rows: 4;
/// 256 rows: 3).
/// Unset or 0 = the kernels' default (256 rows and 3 stages at 9-16 tokens, 128 rows and 4
/// stages at 1-8); an uncompiled pair is an error.
/// Read once per process.
pub const SWIGLU_TILE_ENV: &str = "CANDLE_FP8_SWIGLU_TILE";
/// See [`SWIGLU_TILE_ENV`].
pub const SWIGLU_STAGES_ENV: &str = "CANDLE_FP8_SWIGLU_STAGES";

/// The gate/up GEMM with SiLU·up and the down projection's activation quantization in its
/// epilogue (`cuda::hopper_gemm_swiglu_quant`): `w` = `[gate; up]` `[2·I, K]`; returns the
/// `(qa, sa)` of `silu(gate) * up` `[M, I]`. Operands validated as for [`fp8_block_matmul`];
/// all on one CUDA device; `M <= 16`, `I % 128 == 0`.
#[cfg(feature = "cuda")]
pub(crate) fn fp8_swiglu_matmul_quantize(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<(Tensor, Tensor)> {
    static VARIANT: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    let (tile_rows, stages) = *VARIANT.get_or_init(|| {
        let num = |var: &str| std::env::var(var).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        (num(SWIGLU_TILE_ENV), num(SWIGLU_STAGES_ENV))
    });
    fp8_swiglu_matmul_quantize_variant(qa, sa, w, sw, tile_rows, stages)
}

/// The gate/up GEMM with the SwiGLU + quantization epilogue on our Hopper kernels, with an
/// explicit kernel variant: `tile_rows` weight rows per CTA (64, 128 or 256) and `stages` ring
/// depth, 0 = the default (an uncompiled pair is an error). For tests and tuning tools;
/// [`Fp8BlockLinear::forward_swiglu_quantized`](crate::Fp8BlockLinear::forward_swiglu_quantized)
/// is the API. `w` = `[gate; up]` e4m3 `[2·I, K]`, `1 <= M <= 16`, `I % 128 == 0`; returns the
/// `(qa, sa)` of `silu(gate) * up`.
#[cfg(feature = "cuda")]
pub fn fp8_swiglu_matmul_quantize_variant(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    tile_rows: u32,
    stages: u32,
) -> Result<(Tensor, Tensor)> {
    use candle_core::{op::BackpropOp, Storage};
    let GemmShape { m, n, k } = validate_operands(qa, sa, w, sw)?;
    if n % 2 != 0 {
        bail!("fp8 gate/up with SwiGLU: the weight has {n} rows, expected [gate; up] of equal halves")
    }
    let inter = n / 2;
    let (q, s) = with_cuda_operands("fp8 gate/up with SwiGLU", qa, sa, w, sw, |q, s, w, v| {
        crate::cuda::hopper_gemm_swiglu_quant(q, s, w, v, m, inter, k, tile_rows, stages)
    })?;
    log_provider_once(Provider::Hopper);
    let kb = crate::format::num_blocks(inter);
    let q = Tensor::from_storage(Storage::Cuda(q), (m, inter), BackpropOp::none(), false);
    let s = Tensor::from_storage(Storage::Cuda(s), kb * crate::format::act_scale_m_stride(m), BackpropOp::none(), false);
    Ok((q, crate::quant::act_scales_view(s, m, kb)?))
}

/// bf16 `[M, N]` from f32 split-K partials `[splits, M, N]` (contiguous, CUDA), added in split
/// order: the reduction our GEMM runs itself.
#[cfg(feature = "cuda")]
pub(crate) fn reduce_partials(partials: &Tensor) -> Result<Tensor> {
    use candle_core::{op::BackpropOp, Storage};
    let (splits, m, n) = partials.dims3()?;
    if partials.dtype() != DType::F32 || !partials.is_contiguous() {
        bail!("reduce_partials: need contiguous f32 [splits, M, N], got {:?} {:?}", partials.dtype(), partials.dims())
    }
    let y = {
        let (ps, pl) = partials.storage_and_layout();
        let Storage::Cuda(ps) = &*ps else { bail!("reduce_partials: the partials are not on a CUDA device") };
        crate::cuda::reduce_partials((ps, pl), splits, m, n)?
    };
    Ok(Tensor::from_storage(Storage::Cuda(y), (m, n), BackpropOp::none(), false))
}

/// [`fp8_block_matmul`] with an explicit provider request instead of the environment.
pub fn fp8_block_matmul_with(
    request: BackendRequest,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
) -> Result<Tensor> {
    let shape = validate_operands(qa, sa, w, sw)?;
    let GemmShape { m, n, k } = shape;
    if m == 0 || n == 0 {
        return Tensor::zeros((m, n), DType::BF16, qa.device());
    }
    let caps = device_caps(qa.device())?;
    let provider = dispatch::choose_provider(request, &caps, m, n, k)?;
    if let Some(why) = crate::format::fast_path_refusal(m, n, k) {
        if caps.is_cuda {
            log_once(provider, &format!("shape off the fast path ({why}): using {provider}"));
        }
    }
    log_provider_once(provider);
    qa.apply_op2_no_bwd(w, &Fp8BlockMatmul { sa: sa.clone(), sw: sw.clone(), shape, provider })
}
