//! Greedy sampling on the GPU (`kernels/sampling.h`): the index of the largest logit of each
//! row in one launch, one CTA per row streaming the row with 16-byte loads, on f32 or bf16
//! logits.
//!
//! candle 0.11's CUDA argmax spends ~108 µs on the f32 logits `[B, 151936]` of a Qwen3 decode
//! step on an H200 (a strided index with 64-bit divisions per element). [`argmax_last_dim`]
//! returns exactly what candle's *CPU* argmax returns for the same values — the first index of
//! the maximum; a NaN in column 0 gives 0, any other NaN is skipped — which candle's CUDA
//! argmax does not guarantee (its ties and NaNs resolve by thread layout).

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::CudaStorage;
use candle_core::op::BackpropOp;
use candle_core::{bail, DType, Device, Result, Storage, Tensor};

use super::device::{raw_stream, view};
use super::ffi;

/// Largest row length / row count the kernel takes (it indexes columns with `int`, one CTA per
/// row).
const MAX_EXTENT: usize = i32::MAX as usize;

/// Why the sampling kernel cannot run on `device` (`None`: it can): it is compiled for sm_90a
/// only, like the rest of `kernels/`.
pub fn unavailable_reason(device: &Device) -> Option<String> {
    super::sm90_kernels_unavailable(device)
}

/// Whether [`argmax_last_dim`] can run on `device`.
pub fn is_available(device: &Device) -> bool {
    unavailable_reason(device).is_none()
}

/// `(rows, cols, row_stride)` of logits of shape `dims` and strides `stride` seen as rows of its last dimension: the last
/// dimension must be contiguous, and the leading dimensions must flatten into one with a
/// single stride (any contiguous tensor, a narrowed row range, a column range of a 2-D tensor).
fn row_geometry(dims: &[usize], stride: &[usize]) -> Result<(usize, usize, usize)> {
    let Some((&cols, lead)) = dims.split_last() else {
        bail!("candle-fp8 argmax_last_dim: logits must have at least one dimension, got a scalar")
    };
    let rows: usize = lead.iter().product();
    if cols == 0 || rows == 0 {
        bail!("candle-fp8 argmax_last_dim: logits must not be empty, got shape {dims:?}")
    }
    if cols > MAX_EXTENT || rows > MAX_EXTENT {
        bail!("candle-fp8 argmax_last_dim: logits shape {dims:?} exceeds {MAX_EXTENT} rows or columns")
    }
    if cols > 1 && stride[dims.len() - 1] != 1 {
        bail!(
            "candle-fp8 argmax_last_dim: logits must be contiguous along the last dimension, got \
             shape {dims:?} stride {stride:?}"
        )
    }
    // From the innermost leading dimension out: each one (of size > 1) must step over exactly
    // the rows of the dimensions inside it. Size-1 dimensions have arbitrary strides.
    let mut row_stride = None;
    let mut next = 0;
    for (&d, &s) in lead.iter().zip(&stride[..lead.len()]).rev().filter(|(&d, _)| d > 1) {
        match row_stride {
            None => row_stride = Some(s),
            Some(_) if s != next => bail!(
                "candle-fp8 argmax_last_dim: the leading dimensions of logits must flatten into \
                 rows of one stride, got shape {dims:?} stride {stride:?} (call .contiguous() first)"
            ),
            Some(_) => {}
        }
        next = s * d;
    }
    Ok((rows, cols, row_stride.unwrap_or(cols)))
}

/// The index of the largest value along the last dimension of `logits`, as u32 on the same
/// device: greedy sampling in one launch, equal element for element to candle's CPU
/// `logits.argmax(D::Minus1)` (first index of the maximum; a NaN in column 0 gives 0, any other
/// NaN is ignored).
///
/// `logits`: f32 or bf16 (a bf16 lm_head's own output: no f32 copy needed; every bf16 value is
/// an f32 value, so the index is the one of the f32 cast) on a CUDA sm_90 device, shape
/// `[.., cols]` with a contiguous last dimension
/// and leading dimensions that flatten into rows of one stride (e.g. any contiguous tensor, or a
/// narrowed view of one); any start offset. Returns shape `logits.dims()[..rank - 1]`.
/// Launches on candle's stream for the device and never synchronizes.
pub fn argmax_last_dim(logits: &Tensor) -> Result<Tensor> {
    let Device::Cuda(dev) = logits.device() else {
        bail!(
            "candle-fp8 argmax_last_dim: logits must be on a CUDA device, got {:?} (dtype {:?}, shape {:?})",
            logits.device(),
            logits.dtype(),
            logits.dims()
        )
    };
    if !matches!(logits.dtype(), DType::F32 | DType::BF16) {
        bail!(
            "candle-fp8 argmax_last_dim: logits must be f32 or bf16, got {:?} (shape {:?})",
            logits.dtype(),
            logits.dims()
        )
    }
    if let Some(why) = unavailable_reason(logits.device()) {
        bail!("candle-fp8 argmax_last_dim: {why}")
    }
    let (rows, cols, row_stride) = row_geometry(logits.dims(), logits.stride())?;
    let stream = dev.cuda_stream();
    // SAFETY: the kernel writes all `rows` elements.
    let mut out = unsafe { dev.alloc::<u32>(rows)? };
    {
        let (st, l) = logits.storage_and_layout();
        let Storage::Cuda(cs) = &*st else { bail!("candle-fp8 argmax_last_dim: logits are not in CUDA storage") };
        let len = (rows - 1) * row_stride + cols;
        let (out_ptr, _go) = out.device_ptr_mut(&stream);
        let (rows_i, cols_i, stride_i) = (rows as i64, cols as i64, row_stride as i64);
        let bf16 = logits.dtype() == DType::BF16;
        let (xv_bf16, xv_f32);
        let (x_ptr, _gx) = if bf16 {
            xv_bf16 = view::<half::bf16>("logits", cs, l, len)?;
            xv_bf16.device_ptr(&stream)
        } else {
            xv_f32 = view::<f32>("logits", cs, l, len)?;
            xv_f32.device_ptr(&stream)
        };
        let dtype = if bf16 { ffi::FP8GEMM_BF16 } else { ffi::FP8GEMM_F32 };
        let status = unsafe {
            ffi::fp8gemm_argmax_rows(
                x_ptr as *const std::ffi::c_void,
                dtype,
                rows_i,
                cols_i,
                stride_i,
                out_ptr as *mut u32,
                raw_stream(dev),
            )
        };
        ffi::check(&format!("argmax_last_dim (rows {rows}, cols {cols}, row stride {row_stride})"), status)?;
    }
    let out_dims = logits.dims()[..logits.rank() - 1].to_vec();
    Ok(Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev.clone())),
        out_dims,
        BackpropOp::none(),
        false,
    ))
}

#[cfg(test)]
mod tests {
    use super::row_geometry;

    fn geometry(dims: &[usize], stride: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
        row_geometry(dims, stride).map_err(|e| e.to_string())
    }

    #[test]
    fn rows_of_the_layouts_the_kernel_reads() {
        assert_eq!(geometry(&[16, 151936], &[151936, 1]), Ok((16, 151936, 151936)));
        assert_eq!(geometry(&[151937], &[1]), Ok((1, 151937, 151937)));
        assert_eq!(geometry(&[2, 3, 10], &[30, 10, 1]), Ok((6, 10, 10)));
        // Columns 1..=10 of [4, 13]: a wider row stride.
        assert_eq!(geometry(&[4, 10], &[13, 1]), Ok((4, 10, 13)));
        // Size-1 dimensions have any stride; a column has any stride.
        assert_eq!(geometry(&[1, 3, 1, 10], &[7, 10, 99, 1]), Ok((3, 10, 10)));
        assert_eq!(geometry(&[1, 1, 10], &[5, 5, 1]), Ok((1, 10, 10)));
        assert_eq!(geometry(&[3, 1], &[1, 3]), Ok((3, 1, 1)));
        // A broadcast row.
        assert_eq!(geometry(&[4, 10], &[0, 1]), Ok((4, 10, 0)));
    }

    #[test]
    fn layouts_the_kernel_cannot_read_are_named() {
        let e = geometry(&[4, 10, 6], &[60, 1, 10]).unwrap_err();
        assert!(e.contains("contiguous along the last dimension") && e.contains("stride [60, 1, 10]"), "{e}");
        let e = geometry(&[4, 3, 10], &[60, 10, 1]).unwrap_err();
        assert!(e.contains("flatten") && e.contains("shape [4, 3, 10] stride [60, 10, 1]"), "{e}");
        let e = geometry(&[2, 3, 10], &[0, 10, 1]).unwrap_err();
        assert!(e.contains("flatten"), "{e}");
        assert!(geometry(&[], &[]).unwrap_err().contains("at least one dimension"));
        assert!(geometry(&[0, 10], &[10, 1]).unwrap_err().contains("must not be empty"));
        assert!(geometry(&[3, 0], &[0, 1]).unwrap_err().contains("must not be empty"));
        assert!(geometry(&[1 << 31, 2], &[2, 1]).unwrap_err().contains("exceeds"));
    }
}
