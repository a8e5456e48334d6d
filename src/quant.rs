//! Quantization: per-token 1×128 activation groups and 128×128 weight blocks.
//!
//! Activation groups: `s = max(amax, 1e-4) / 448`, `q = sat_e4m3(x / s)`, with the scales laid
//! out MN-major (`[M, ceil(K/128)]` viewed with strides `(1, round_up(M, 4))`) so
//! the GPU kernels can TMA-load a column of scales per K block.
//! Weight blocks: one scale per 128×128 block, `weight_scale_inv` semantics (multiply back).

use crate::format::{
    self, act_scale_m_stride, act_scales_view, ceil_div, f32_to_e4m3, group_scale, num_blocks, BLOCK, F8E4M3,
};
use candle_core::{bail, DType, Device, Result, Tensor};
use rayon::prelude::*;

/// Rows per rayon task when quantizing activations on the CPU.
const ROWS_PER_TASK: usize = 16;

/// Quantizes one row (K values) into `q` and returns its per-group scales.
fn quantize_row(x: &[f32], q: &mut [F8E4M3], scales: &mut [f32]) {
    for (g, (xg, qg)) in x.chunks(BLOCK).zip(q.chunks_mut(BLOCK)).enumerate() {
        let amax = xg.iter().fold(0f32, |a, &v| if v.abs() > a || v.is_nan() { v.abs() } else { a });
        let s = group_scale(amax);
        for (o, &v) in qg.iter_mut().zip(xg) {
            *o = f32_to_e4m3(v / s);
        }
        scales[g] = s;
    }
}

/// CPU activation quantization of a row-major `[m, k]` slice.
///
/// Returns `(q, scales)` where `q` is row-major `[m, k]` and `scales` is the MN-major buffer of
/// `ceil(k/128) * round_up(m, 4)` floats (padding rows are 0).
pub fn quantize_activation_slice(x: &[f32], m: usize, k: usize) -> (Vec<F8E4M3>, Vec<f32>) {
    assert_eq!(x.len(), m * k, "quantize_activation_slice: x has {} values, not {m}×{k}", x.len());
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(m);
    let mut q = vec![F8E4M3::from_bits(0); m * k];
    // Row-major per-row scales first (parallel friendly), transposed into MN-major after.
    let mut row_scales = vec![0f32; m * kb];
    q.par_chunks_mut(ROWS_PER_TASK * k.max(1))
        .zip(row_scales.par_chunks_mut(ROWS_PER_TASK * kb.max(1)))
        .enumerate()
        .for_each(|(t, (qc, sc))| {
            let row0 = t * ROWS_PER_TASK;
            for (r, (qr, sr)) in qc.chunks_mut(k).zip(sc.chunks_mut(kb)).enumerate() {
                let row = row0 + r;
                quantize_row(&x[row * k..(row + 1) * k], qr, sr);
            }
        });
    let mut scales = vec![0f32; kb * mpad];
    for row in 0..m {
        for g in 0..kb {
            scales[g * mpad + row] = row_scales[row * kb + g];
        }
    }
    (q, scales)
}

/// Quantizes activations `x` `[M, K]` (bf16, f16 or f32) per token per 128-wide K group.
///
/// Returns `(qa, sa)`: `qa` is e4m3 `[M, K]` row-major; `sa` is f32 `[M, ceil(K/128)]` with
/// strides `(1, round_up(M, 4))` (MN-major, TMA-aligned). Runs on the tensor's device (our CUDA
/// kernel with the `cuda` feature: directly when `K % 8 == 0`, a partial last group included,
/// else on `x` zero-padded to a multiple of 8 columns).
pub fn quantize_activation(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let (m, k) = match x.dims() {
        &[m, k] => (m, k),
        d => bail!("quantize_activation: x must be rank 2 [M, K], got shape {d:?}"),
    };
    if !matches!(x.dtype(), DType::BF16 | DType::F16 | DType::F32) {
        bail!("quantize_activation: x must be bf16, f16 or f32, got {:?}", x.dtype())
    }
    if k == 0 {
        bail!("quantize_activation: x has K = 0 columns (shape [{m}, 0])")
    }
    let kb = num_blocks(k);
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = x.device() {
        return quantize_activation_cuda(x, m, k, kb);
    }
    let xs = x.to_dtype(DType::F32)?.flatten_all()?.to_device(&Device::Cpu)?.to_vec1::<f32>()?;
    let (q, scales) = quantize_activation_slice(&xs, m, k);
    let dev = x.device();
    let q = Tensor::from_vec(q, (m, k), dev)?;
    let sa = act_scales_view(Tensor::from_vec(scales, kb * act_scale_m_stride(m), dev)?, m, kb)?;
    Ok((q, sa))
}

#[cfg(feature = "cuda")]
fn quantize_activation_cuda(x: &Tensor, m: usize, k: usize, kb: usize) -> Result<(Tensor, Tensor)> {
    use candle_core::{op::BackpropOp, Storage};
    if m == 0 {
        let q = Tensor::zeros((0, k), DType::F8E4M3, x.device())?;
        let sa = act_scales_view(Tensor::zeros(0, DType::F32, x.device())?, 0, kb)?;
        return Ok((q, sa));
    }
    // The kernel takes any K that is a multiple of 8 (whole 16-byte vectors of bf16; a partial
    // last 128-wide group is quantized over its valid columns). Otherwise zero-pad K to one
    // (zeros never raise a group's amax, and the groups stay the same: kb = ceil(kp / 128)),
    // then drop the padded columns of q.
    let kp = crate::format::round_up(k, crate::cuda::gemm::QUANT_K_MULTIPLE);
    debug_assert_eq!(num_blocks(kp), kb);
    let x = if kp != k { x.pad_with_zeros(1, 0, kp - k)? } else { x.contiguous()? };
    let x = if x.dtype() == DType::F16 { x.to_dtype(DType::F32)? } else { x };
    let (q, s) = {
        let (st, l) = x.storage_and_layout();
        let Storage::Cuda(cs) = &*st else { bail!("quantize_activation: x is not on a CUDA device") };
        crate::cuda::gemm::quantize_activation(cs, l, m, kp)?
    };
    let q = if kp != k { crate::cuda::gemm::e4m3_first_columns(&q, m, kp, k)? } else { q };
    let q = Tensor::from_storage(Storage::Cuda(q), (m, k), BackpropOp::none(), false);
    let s = Tensor::from_storage(Storage::Cuda(s), kb * act_scale_m_stride(m), BackpropOp::none(), false);
    Ok((q, act_scales_view(s, m, kb)?))
}

/// e4m3 `[R, C]` → f32, exactly, on the tensor's device. (candle has no e4m3 casts on CUDA:
/// there our dequant kernel runs with unit block scales, whose bf16 output is exact since every
/// e4m3 value is a bf16 value.)
pub fn e4m3_to_f32(t: &Tensor) -> Result<Tensor> {
    if t.dtype() != DType::F8E4M3 {
        bail!("e4m3_to_f32: expected an F8E4M3 tensor, got {:?}", t.dtype())
    }
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = t.device() {
        use candle_core::{op::BackpropOp, Storage};
        let (r, c) = t.dims2()?;
        let t = t.contiguous()?;
        let (nb, kb) = format::weight_scale_shape(r, c);
        let ones = Tensor::ones((nb, kb), DType::F32, t.device())?;
        let out = {
            let (ts, tl) = t.storage_and_layout();
            let (os, ol) = ones.storage_and_layout();
            let (Storage::Cuda(ts), Storage::Cuda(os)) = (&*ts, &*os) else {
                bail!("e4m3_to_f32: tensors are not on the CUDA device")
            };
            crate::cuda::dequant::dequantize_weight((ts, tl), (os, ol), r, c)?
        };
        return Tensor::from_storage(Storage::Cuda(out), (r, c), BackpropOp::none(), false).to_dtype(DType::F32);
    }
    t.to_dtype(DType::F32)
}

/// CPU 128×128 block quantization of a row-major `[n, k]` weight slice.
///
/// Returns `(q, scales)`: `q` row-major `[n, k]`, `scales` row-major `[ceil(n/128), ceil(k/128)]`
/// with `scale = max(block amax, 1e-4) / 448`. Partial edge blocks use their own amax.
pub fn quantize_weight_slice(w: &[f32], n: usize, k: usize) -> (Vec<F8E4M3>, Vec<f32>) {
    assert_eq!(w.len(), n * k, "quantize_weight_slice: w has {} values, not {n}×{k}", w.len());
    let (nb, kb) = format::weight_scale_shape(n, k);
    let mut scales = vec![0f32; nb * kb];
    scales.par_chunks_mut(kb.max(1)).enumerate().for_each(|(bn, srow)| {
        for (bk, s) in srow.iter_mut().enumerate() {
            let mut amax = 0f32;
            for r in bn * BLOCK..((bn + 1) * BLOCK).min(n) {
                for &v in &w[r * k + bk * BLOCK..(r * k + (bk + 1) * BLOCK).min(r * k + k)] {
                    if v.abs() > amax || v.is_nan() {
                        amax = v.abs();
                    }
                }
            }
            *s = group_scale(amax);
        }
    });
    let mut q = vec![F8E4M3::from_bits(0); n * k];
    q.par_chunks_mut(k.max(1)).enumerate().for_each(|(r, qr)| {
        let srow = &scales[(r / BLOCK) * kb..(r / BLOCK + 1) * kb];
        for (c, o) in qr.iter_mut().enumerate() {
            *o = f32_to_e4m3(w[r * k + c] / srow[c / BLOCK]);
        }
    });
    (q, scales)
}

/// Quantizes a float weight `[N, K]` into 128×128 blocks: `(w e4m3 [N, K], scale_inv f32
/// [ceil(N/128), ceil(K/128)])`, on the weight's device (computed on the CPU: this is a
/// load-time / checkpoint-writing operation).
pub fn quantize_weight(w: &Tensor) -> Result<(Tensor, Tensor)> {
    let (n, k) = match w.dims() {
        &[n, k] => (n, k),
        d => bail!("quantize_weight: weight must be rank 2 [N, K], got shape {d:?}"),
    };
    if !w.dtype().is_float() || w.dtype() == DType::F8E4M3 {
        bail!("quantize_weight: weight must be f32, f16 or bf16, got {:?}", w.dtype())
    }
    let ws = w.to_dtype(DType::F32)?.flatten_all()?.to_device(&Device::Cpu)?.to_vec1::<f32>()?;
    let (q, s) = quantize_weight_slice(&ws, n, k);
    let (nb, kb) = (ceil_div(n, BLOCK), ceil_div(k, BLOCK));
    let dev = w.device();
    Ok((Tensor::from_vec(q, (n, k), dev)?, Tensor::from_vec(s, (nb, kb), dev)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{e4m3_to_f32, E4M3_MAX, SCALE_EPS};

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn activation_round_trip_within_half_ulp() {
        let (m, k) = (5, 384);
        let mut seed = 7;
        // Rows with very different magnitudes.
        let x: Vec<f32> = (0..m * k).map(|i| lcg(&mut seed) * 10f32.powi((i / k) as i32 - 2)).collect();
        let (q, s) = quantize_activation_slice(&x, m, k);
        let mpad = act_scale_m_stride(m);
        for r in 0..m {
            for c in 0..k {
                let scale = s[(c / BLOCK) * mpad + r];
                let back = e4m3_to_f32(q[r * k + c]) * scale;
                // e4m3 has 3 mantissa bits: relative error ≤ 2^-4, plus the subnormal floor.
                let tol = x[r * k + c].abs() / 16.0 + scale * 2f32.powi(-10);
                assert!((back - x[r * k + c]).abs() <= tol, "r{r} c{c}: {back} vs {}", x[r * k + c]);
            }
            // The group maximum maps to ±448 exactly.
            for g in 0..k / BLOCK {
                let grp = &q[r * k + g * BLOCK..r * k + (g + 1) * BLOCK];
                assert!(grp.iter().any(|v| e4m3_to_f32(*v).abs() == E4M3_MAX), "row {r} group {g}");
            }
        }
    }

    #[test]
    fn zero_and_partial_groups() {
        let (m, k) = (2, 200);
        let mut x = vec![0f32; m * k];
        x[k + 150] = -3.0; // row 1, second (partial) group
        let (q, s) = quantize_activation_slice(&x, m, k);
        let mpad = act_scale_m_stride(m);
        assert_eq!(s.len(), 2 * mpad);
        assert_eq!(s[0], SCALE_EPS / E4M3_MAX, "all-zero group gets the eps scale");
        assert!(q[..k].iter().all(|v| e4m3_to_f32(*v) == 0.0));
        assert_eq!(s[mpad + 1], 3.0 / E4M3_MAX);
        assert_eq!(e4m3_to_f32(q[k + 150]), -448.0);
    }

    #[test]
    fn nan_propagates_to_scale() {
        let mut x = vec![1f32; 128];
        x[3] = f32::NAN;
        let (_, s) = quantize_activation_slice(&x, 1, 128);
        assert!(s[0].is_nan());
    }

    #[test]
    fn scale_view_strides() -> Result<()> {
        let x = Tensor::randn(0f32, 1.0, (5, 300), &Device::Cpu)?;
        let (q, sa) = quantize_activation(&x)?;
        assert_eq!(q.dims(), &[5, 300]);
        assert_eq!(q.dtype(), DType::F8E4M3);
        assert_eq!(sa.dims(), &[5, 3]);
        assert_eq!(sa.stride(), &[1, 8]);
        Ok(())
    }

    #[test]
    fn weight_blocks_partial_edges() {
        let (n, k) = (130, 260);
        let mut seed = 3;
        let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
        let (q, s) = quantize_weight_slice(&w, n, k);
        assert_eq!(s.len(), 2 * 3);
        for r in 0..n {
            for c in 0..k {
                let back = e4m3_to_f32(q[r * k + c]) * s[(r / BLOCK) * 3 + c / BLOCK];
                let tol = w[r * k + c].abs() / 16.0 + s[(r / BLOCK) * 3 + c / BLOCK] * 2f32.powi(-10);
                assert!((back - w[r * k + c]).abs() <= tol);
            }
        }
    }
}
