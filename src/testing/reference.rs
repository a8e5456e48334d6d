//! The CPU reference: dequantize to f32, plain matmul. The single source of truth for tests,
//! plus the two accuracy metrics every test and benchmark uses.

use crate::format::{act_scale_m_stride, e4m3_to_f32, num_blocks, weight_scale_shape, BLOCK, F8E4M3};
use candle_core::{bail, DType, Device, Result, Tensor};
use rayon::prelude::*;

/// Reads a 2-D tensor into a row-major `Vec` on the CPU (any layout).
fn to_vec2d<T: candle_core::WithDType>(t: &Tensor) -> Result<Vec<T>> {
    t.to_device(&Device::Cpu)?.contiguous()?.flatten_all()?.to_vec1::<T>()
}

/// Dequantizes e4m3 activations `qa [M, K]` with their scales `sa [M, ceil(K/128)]` (any
/// strides) to f32 `[M, K]` on the CPU.
pub fn dequantize_activation(qa: &Tensor, sa: &Tensor) -> Result<Tensor> {
    let (m, k) = qa.dims2()?;
    let kb = num_blocks(k);
    if sa.dims() != [m, kb] {
        bail!("sa: shape {:?} does not match qa [{m}, {k}]: expected [{m}, {kb}]", sa.dims())
    }
    let q = to_vec2d::<F8E4M3>(qa)?;
    let s = to_vec2d::<f32>(&sa.to_dtype(DType::F32)?)?;
    let out: Vec<f32> = (0..m * k).map(|i| e4m3_to_f32(q[i]) * s[(i / k) * kb + (i % k) / BLOCK]).collect();
    Tensor::from_vec(out, (m, k), &Device::Cpu)
}

/// Dequantizes a blocked-FP8 weight `w [N, K]` with `sw [ceil(N/128), ceil(K/128)]` to f32
/// `[N, K]` on the CPU.
pub fn dequantize_weight(w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    let (n, k) = w.dims2()?;
    crate::format::check_weight_scale_shape("sw", n, k, sw.dims())?;
    let (_, kb) = weight_scale_shape(n, k);
    let q = to_vec2d::<F8E4M3>(w)?;
    let s = to_vec2d::<f32>(&sw.to_dtype(DType::F32)?)?;
    let out: Vec<f32> = (0..n * k).map(|i| e4m3_to_f32(q[i]) * s[(i / k / BLOCK) * kb + (i % k) / BLOCK]).collect();
    Tensor::from_vec(out, (n, k), &Device::Cpu)
}

/// The reference GEMM: `y = dequant(qa, sa) · dequant(w, sw)ᵀ` in f32, `[M, N]`, on the CPU.
pub fn reference_matmul(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Tensor> {
    let a = dequantize_activation(qa, sa)?;
    let b = dequantize_weight(w, sw)?;
    if a.dim(1)? != b.dim(1)? {
        bail!("reference_matmul: K mismatch: qa has K = {}, w has K = {}", a.dim(1)?, b.dim(1)?)
    }
    a.matmul(&b.t()?)
}

/// The same reference in f64 with a naive triple loop over the raw e4m3 codes, independent of
/// candle's matmul (used to validate [`reference_matmul`] itself, and as the exact sum in
/// [`rounding_stats`]). `sa` is MN-major with column stride `round_up(m, 4)`, `sw` row-major.
/// Rows run in parallel; each output's summation order is fixed.
pub fn naive_matmul_f64(
    qa: &[F8E4M3],
    sa_mn_major: &[f32],
    w: &[F8E4M3],
    sw: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let mpad = act_scale_m_stride(m);
    let kb = num_blocks(k);
    let mut y = vec![0f64; m * n];
    y.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
        for (j, out) in row.iter_mut().enumerate() {
            let mut acc = 0f64;
            for c in 0..k {
                let a = e4m3_to_f32(qa[i * k + c]) as f64 * sa_mn_major[(c / BLOCK) * mpad + i] as f64;
                let b = e4m3_to_f32(w[j * k + c]) as f64 * sw[(j / BLOCK) * kb + c / BLOCK] as f64;
                acc += a * b;
            }
            *out = acc;
        }
    });
    y
}

fn pair_f64(out: &Tensor, reference: &Tensor) -> Result<(Vec<f64>, Vec<f64>)> {
    if out.dims() != reference.dims() {
        bail!("shape mismatch: output {:?} vs reference {:?}", out.dims(), reference.dims())
    }
    let a = out.to_dtype(DType::F64)?.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f64>()?;
    let b = reference.to_dtype(DType::F64)?.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f64>()?;
    Ok((a, b))
}

/// `‖out − ref‖ / ‖ref‖` (NaN if either holds a NaN, so a NaN never passes a `<=` check).
pub fn rel_err(out: &Tensor, reference: &Tensor) -> Result<f64> {
    let (a, b) = pair_f64(out, reference)?;
    Ok(rel_err_slices(&a, &b))
}

/// DeepGEMM's `calc_diff = 1 − 2⟨x, y⟩ / (‖x‖² + ‖y‖²)`.
pub fn calc_diff(out: &Tensor, reference: &Tensor) -> Result<f64> {
    let (a, b) = pair_f64(out, reference)?;
    Ok(calc_diff_slices(&a, &b))
}

/// [`rel_err`] on slices.
pub fn rel_err_slices(out: &[f64], reference: &[f64]) -> f64 {
    let num: f64 = out.iter().zip(reference).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = reference.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

/// [`calc_diff`] on slices.
pub fn calc_diff_slices(out: &[f64], reference: &[f64]) -> f64 {
    let xy: f64 = out.iter().zip(reference).map(|(a, b)| a * b).sum();
    let xx: f64 = out.iter().map(|a| a * a).sum();
    let yy: f64 = reference.iter().map(|b| b * b).sum();
    1.0 - 2.0 * xy / (xx + yy)
}

/// `x` rounded to the nearest bf16 (ties to even) from its full f64 value: the correctly rounded
/// result. (`half::bf16::from_f64` goes through f32 first, a double rounding that moves values
/// just off a bf16 tie onto it.) Overflow goes to ±∞, NaN stays NaN.
pub fn bf16_round_f64(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    // bf16 has 8 significant bits; below 2^-126 its spacing is fixed at 2^-133 (subnormals).
    let e = x.abs().log2().floor() as i32;
    let ulp = 2f64.powi(e.max(-126) - 7);
    let q = x / ulp;
    let r = q.round();
    let r = if (q - q.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - q.signum() } else { r };
    let y = r * ulp;
    if y.abs() > 3.389_531_389_251_535_5e38 {
        f64::INFINITY.copysign(x)
    } else {
        y
    }
}

/// How far a bf16 output is from the exact product, in units of the bf16 ulp of the exact
/// value's binade (see [`rounding_stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundingStats {
    /// Share of outputs that differ from the correctly rounded (nearest-even) bf16 value.
    pub off_rounded: f64,
    /// Mean signed error: a systematic bias shows here (≈ 0 for a correctly rounded output).
    pub mean_ulp: f64,
    /// Root mean square error (≈ 0.29 for a correctly rounded output).
    pub rms_ulp: f64,
    /// Largest error (large only where the exact value is tiny next to its terms).
    pub max_ulp: f64,
}

/// The bf16 ulp of `v`'s binade (values below the smallest normal f32 count as that normal).
fn bf16_ulp(v: f64) -> f64 {
    let a = v.abs().max(f32::MIN_POSITIVE as f64);
    2f64.powi(a.log2().floor() as i32 - 7)
}

/// [`RoundingStats`] of `out` (a kernel's bf16 output, widened) against `exact` (the contract's
/// sum in f64 before rounding, e.g. [`naive_matmul_f64`]). An exact f32 kernel is off the
/// correctly rounded value only where its summation order crosses a rounding boundary; the
/// Hopper tensor cores' ~14-bit accumulation inside a 128-K block puts ~7 % of outputs of any
/// blocked-FP8 kernel there (ours and cuBLASLt alike, `examples/gemm_error.rs`).
pub fn rounding_stats(out: &[f32], exact: &[f64]) -> Result<RoundingStats> {
    if out.len() != exact.len() || out.is_empty() {
        bail!("rounding_stats: {} outputs vs {} exact values", out.len(), exact.len())
    }
    let (mut off, mut sum, mut sq, mut max) = (0usize, 0f64, 0f64, 0f64);
    for (&o, &e) in out.iter().zip(exact) {
        if o as f64 != bf16_round_f64(e) {
            off += 1;
        }
        let u = (o as f64 - e) / bf16_ulp(e);
        sum += u;
        sq += u * u;
        max = f64::max(max, u.abs());
    }
    let n = out.len() as f64;
    Ok(RoundingStats { off_rounded: off as f64 / n, mean_ulp: sum / n, rms_ulp: (sq / n).sqrt(), max_ulp: max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_from_f64_is_correct_at_ties_and_just_off_them() {
        let one_ulp = 2f64.powi(-7);
        // 1 + ulp/2 is a tie: to even (1.0); a hair above goes up (f32 rounding would lose it).
        assert_eq!(bf16_round_f64(1.0 + one_ulp / 2.0), 1.0);
        assert_eq!(bf16_round_f64(1.0 + one_ulp / 2.0 + 1e-12), 1.0 + one_ulp);
        assert_eq!(bf16_round_f64(1.0 + 1.5 * one_ulp), 1.0 + 2.0 * one_ulp);
        assert_eq!(bf16_round_f64(-(1.0 + one_ulp / 2.0 + 1e-12)), -(1.0 + one_ulp));
        for &x in &[0.1f64, -3.7, 448.0, 1e-30, 6.5e4] {
            // Agrees with half's rounding away from ties.
            assert_eq!(bf16_round_f64(x), half::bf16::from_f64(x).to_f64(), "{x}");
        }
        assert_eq!(bf16_round_f64(4e38), f64::INFINITY);
    }

    #[test]
    fn rounding_stats_count_ulps_of_the_exact_binade() {
        // 1.0 and 3.0: bf16 ulps 2^-7 and 2^-6.
        assert_eq!(bf16_ulp(1.0), 2f64.powi(-7));
        assert_eq!(bf16_ulp(-3.0), 2f64.powi(-6));
        let exact = [1.0 + 0.3 * 2f64.powi(-7), 3.0, -2.0];
        // Correctly rounded outputs: 1.0 is 0.3 ulp below the first exact value.
        let r = rounding_stats(&[1.0, 3.0, -2.0], &exact).unwrap();
        assert_eq!(r.off_rounded, 0.0);
        assert!((r.mean_ulp + 0.1).abs() < 1e-12, "{r:?}");
        assert!((r.max_ulp - 0.3).abs() < 1e-12, "{r:?}");
        // One output a whole ulp high: off the rounded value, +1 ulp.
        let up = 3.0 + 2f32.powi(-6);
        let r = rounding_stats(&[1.0, up, -2.0], &exact).unwrap();
        assert!((r.off_rounded - 1.0 / 3.0).abs() < 1e-12, "{r:?}");
        assert!((r.max_ulp - 1.0).abs() < 1e-12, "{r:?}");
        assert!(rounding_stats(&[1.0], &exact).is_err());
    }
}
