//! Operand checks of the GEMM ops: every rule of the numeric contract, with an error naming the
//! tensor and the bad value.

use crate::dispatch::DeviceCaps;
use crate::format::{act_scale_m_stride, num_blocks, weight_scale_shape};
use candle_core::{bail, DType, Device, Result, Tensor};

/// Validated GEMM dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmShape {
    /// Tokens (rows of `qa` and `y`).
    pub(crate) m: usize,
    /// Output features (rows of `w`).
    pub(crate) n: usize,
    /// Input features.
    pub(crate) k: usize,
}

pub(crate) fn check_dtype(name: &str, t: &Tensor, want: DType) -> Result<()> {
    if t.dtype() != want {
        bail!("{name}: expected dtype {want:?}, got {:?} (shape {:?})", t.dtype(), t.dims())
    }
    Ok(())
}

pub(crate) fn dims2(name: &str, t: &Tensor) -> Result<(usize, usize)> {
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

/// Checks the four GEMM operands against the numeric contract (docs/design.md).
pub(crate) fn validate_operands(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<GemmShape> {
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
             use candle_fp8::quantize_activation"
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
pub(crate) fn device_caps(device: &Device) -> Result<DeviceCaps> {
    match device {
        Device::Cpu => Ok(DeviceCaps::CPU),
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => crate::cuda::device_caps(dev),
        _ => bail!("candle-fp8 supports CPU and (with the `cuda` feature) CUDA devices, got {:?}", device.location()),
    }
}
