//! The fused elementwise + quantization ops (`candle_fp8::ops`) on the CPU.
//!
//! On the CPU the fused ops *are* the composed candle ops, so comparing them with the composed
//! ops proves nothing there. Instead, the results are checked against an independent f64
//! computation written here — residual add, RMSNorm `x / sqrt(mean(x²) + eps) · γ`, SiLU·up —
//! quantized by a test-local quantizer (per 128-group `s = max(amax, 1e-4) / 448`, `q` the
//! round-to-nearest-even e4m3 of `x / s`, from tests/common/fixtures.rs), with tolerances
//! derived from the arithmetic (see `rmsnorm_tolerance`, `swiglu_f64`, `check_quantized`).
//! The equivalences that are real on the CPU stay: the `_unreduced` norm equals the plain one,
//! `forward_quantized` equals `forward`, the SwiGLU layer path equals GEMM-then-SwiGLU, and the
//! Qwen3 fused elementwise path (residual add moved into the next layer's norm) gives the same
//! logits as the composed one. Bad inputs are named errors.

#[path = "common/fixtures.rs"]
mod fixtures;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::models::{DecoderConfig, DecoderModel, ModelOptions};
use candle_fp8::ops::{add_rmsnorm_quantize, swiglu_quantize};
use candle_fp8::quant::quantize_activation;
use candle_fp8::testing::checkpoints::write_random_checkpoint;
use candle_fp8::testing::Rng;
use candle_fp8::Fp8BlockLinear;
use fixtures::{bf16_rne, e4m3_code, e4m3_half_gap, e4m3_ord, e4m3_value, f16_rne};

/// `[m, k]` normal values whose rows span five orders of magnitude (1e-2 .. 1e2).
fn rows(m: usize, k: usize, seed: u64, dtype: DType) -> Result<Tensor> {
    rows_with(m, k, seed, dtype, &[-2, -1, 0, 1, 2])
}

/// `[m, k]` normal values, row `i` scaled by `10^exps[i % exps.len()]`.
fn rows_with(m: usize, k: usize, seed: u64, dtype: DType, exps: &[i32]) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let v: Vec<f32> = (0..m * k).map(|i| rng.normal_f32() * 10f32.powi(exps[i / k % exps.len()])).collect();
    Tensor::from_vec(v, (m, k), &Device::Cpu)?.to_dtype(dtype)
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    let t = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F8E4M3 => t.to_vec1::<candle_fp8::F8E4M3>()?.iter().map(|v| v.to_bits() as u32).collect(),
        DType::BF16 => t.to_vec1::<half::bf16>()?.iter().map(|v| v.to_bits() as u32).collect(),
        DType::F16 => t.to_vec1::<half::f16>()?.iter().map(|v| v.to_bits() as u32).collect(),
        _ => t.to_dtype(DType::F32)?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect(),
    })
}

fn assert_same(what: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    assert_eq!(a.dims(), b.dims(), "{what}: shape");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    assert_eq!(a.stride(), b.stride(), "{what}: strides");
    assert!(bits(a)? == bits(b)?, "{what}: values differ");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The independent f64 computation and the derived tolerances
// ---------------------------------------------------------------------------------------------

/// A float dtype's unit roundoff u, smallest subnormal and largest finite value. u is the
/// largest relative error of one rounding to nearest, half an ulp at the bottom of a binade:
/// 2^-p for p significant bits — f32 24 (u = 2^-24), f16 11 (2^-11), bf16 8 (2^-8: its ulp
/// at 1.0 is 2^-7; 2^-9 is only the half-ulp at the top of a binade).
fn dtype_facts(dtype: DType) -> (f64, f64, f64) {
    match dtype {
        DType::F32 => (2f64.powi(-24), 2f64.powi(-149), f64::from(f32::MAX)),
        DType::BF16 => (2f64.powi(-8), 2f64.powi(-133), half::bf16::MAX.to_f64()),
        DType::F16 => (2f64.powi(-11), 2f64.powi(-24), 65504.0),
        d => panic!("not a float dtype: {d:?}"),
    }
}

/// Round-to-nearest-even f64 → `dtype` (f32: Rust's `as`, correctly rounded; bf16 / f16:
/// fixtures' closed forms).
fn round_to(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::from(x as f32),
        DType::BF16 => bf16_rne(x),
        DType::F16 => f16_rne(x),
        d => panic!("not a float dtype: {d:?}"),
    }
}

fn to_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()
}

/// RMSNorm in f64 of each `k`-row of `h` (exact inputs): `h / sqrt(mean(h²) + eps) · γ`.
fn rmsnorm_f64(h: &[f64], gamma: &[f64], eps: f32, k: usize) -> Vec<f64> {
    h.chunks(k)
        .flat_map(|row| {
            let rms = (row.iter().map(|v| v * v).sum::<f64>() / k as f64 + f64::from(eps)).sqrt();
            row.iter().zip(gamma).map(move |(v, g)| v / rms * g).collect::<Vec<_>>()
        })
        .collect()
}

/// Tolerance of candle's composed `rms_norm(x + residual, γ, eps)` in `dtype` (u its unit
/// roundoff) against the exact f64 value `y` of [`rmsnorm_f64`] on the unrounded sum, per
/// element. candle's CPU kernel (candle-nn 0.11 `RmsNorm::cpu_fwd`) computes, with u32 = 2^-24:
/// - `h = fl(x + r)` (the residual add, one rounding: u on h_i, and ≤ u on the rms of h);
/// - `sum2 = Σ h²` in f32, sequentially: ≤ k·u32 relative; `fl(fl(sum2 / k) + eps)`: 2·u32;
///   `sqrt` (u32) halves the argument's error: ≤ (k/2 + 2)·u32 on the rms;
/// - the rms rounded to `dtype` (u), then `fl(fl(h / rms) · γ)` in `dtype`: 2·u.
///
/// Total, first order: `δ = 5u + (k/2 + 2)·u32`, times (1 + 8u) for the higher-order terms
/// (each bf16 / f16 operation of `half` rounds an f32 result: + u32 per step, also inside that
/// factor). Where `h / rms` or the product is subnormal in `dtype` the rounding is absolute:
/// `η = min_subnormal · (1 + |γ|)`. So `|y' − y| ≤ δ·|y| + η`. (Without a residual `h = x`
/// and the bound only loosens.)
fn rmsnorm_tolerance(y: &[f64], gamma: &[f64], dtype: DType, k: usize) -> Vec<f64> {
    let (u, min_sub, _) = dtype_facts(dtype);
    let delta = (5.0 * u + (k as f64 / 2.0 + 2.0) * 2f64.powi(-24)) * (1.0 + 8.0 * u);
    y.iter().enumerate().map(|(i, v)| delta * v.abs() + min_sub * (1.0 + gamma[i % k].abs())).collect()
}

/// SiLU·up in f64 of `[gate | up]` rows (exact inputs) and its tolerance in `dtype`, per
/// element.
///
/// candle computes `silu(g) = g / (1 + exp(−g))` in `dtype` (`exp` in f32, ≤ 1 ulp = 2·u32,
/// rounded to `dtype`: u; the add: u; the division: u — an error ε in `exp(−g)` changes
/// `1 + exp(−g)` by at most ε relatively), then `silu(g) · up` (u):
/// `δ = (4u + 2·u32)·(1 + 8u)`; subnormal results and an `exp(−g)` that underflows add
/// `η = min_subnormal · (1 + |up|)`. Where `exp(−g)` overflows `dtype` (g < −11.09 in f16,
/// < −88.7 in f32 / bf16) candle's silu is −0 while the exact value is not: there the whole
/// value is the tolerance.
fn swiglu_f64(gu: &[f64], inter: usize, dtype: DType) -> (Vec<f64>, Vec<f64>) {
    let (u, min_sub, max) = dtype_facts(dtype);
    let delta = (4.0 * u + 2.0 * 2f64.powi(-24)) * (1.0 + 8.0 * u);
    let (mut y, mut tol) = (Vec::new(), Vec::new());
    for row in gu.chunks(2 * inter) {
        for (g, up) in row[..inter].iter().zip(&row[inter..]) {
            let v = g / (1.0 + (-g).exp()) * up;
            let overflow = (-g).exp() >= max.min(f64::from(f32::MAX)) * (1.0 - 2f64.powi(-8));
            y.push(v);
            tol.push(if overflow { v.abs() * (1.0 + delta) } else { delta * v.abs() } + min_sub * (1.0 + up.abs()));
        }
    }
    (y, tol)
}

/// What [`check_quantized`] counted.
#[derive(Debug, Default, Clone, Copy)]
struct QuantCounts {
    elements: usize,
    /// Codes that differ from the test-local quantizer's (on the exact values).
    differ: usize,
    /// Elements whose quotient, within the tolerance, straddles an e4m3 rounding boundary: the
    /// only ones whose code may differ.
    ambiguous: usize,
    /// Elements whose tolerance is absolute (subnormal results, an overflowing `exp`), where
    /// the two quotients may be more than an e4m3 step apart: the one-step rule does not apply.
    wide: usize,
}

impl std::ops::AddAssign for QuantCounts {
    fn add_assign(&mut self, o: Self) {
        self.elements += o.elements;
        self.differ += o.differ;
        self.ambiguous += o.ambiguous;
        self.wide += o.wide;
    }
}

/// Checks `(qa, sa)` (the op's output) against the exact values `y` `[m, k]`, given that the
/// op's pre-quantization values `y'` satisfy `|y' − y| ≤ tol` element-wise:
/// - scales: per 128-group the op's amax' lies in `[max(|y| − tol), max(|y| + tol)]`, so
///   `sa = fl32(max(amax', 1e-4) / 448)` lies between the two scales of those bounds (± one f32
///   rounding);
/// - codes: `q = e4m3(fl32(y' / sa))`, so q lies between the codes of `(y − tol) / sa` and
///   `(y + tol) / sa` (± one f32 rounding): rounding is monotone;
/// - against the test-local quantizer on the exact values (`s = max(amax, 1e-4) / 448`,
///   `q_ref = e4m3(y / s)`): a code may differ only where the hull of those quotients
///   straddles an e4m3 rounding boundary ("ambiguous"), so the share of differing codes is
///   bounded by the ambiguous share; and the two quotients are at most
///   `D = tol/sa + |y|·|1/sa − 1/s| + 2^-23·(|y| + tol)/sa` apart. Two codes apart means
///   crossing a whole rounding interval: at least `(g + g')/2` with g the gap just below
///   |q_ref| and g' ≥ g/2 the one below that (e4m3 gaps at most halve from one code to the
///   next), so where `D < ¾ g` the codes differ by one step at most. With relative tolerances
///   that is every element: 2δ ≤ 4 % (bf16 RMSNorm) is below ¾ of the ≥ 6.25 % relative e4m3
///   spacing; only absolute tolerances ("wide": subnormal results, overflow) escape it;
/// - dequantized: `|value(q)·sa − y| ≤ tol + ½ gap(q)·sa + 2^-22·(|y| + tol)` (e4m3 rounding
///   of the quotient plus the f32 quotient's rounding).
fn check_quantized(what: &str, y: &[f64], tol: &[f64], qa: &Tensor, sa: &Tensor) -> Result<QuantCounts> {
    let (m, k) = qa.dims2()?;
    assert_eq!((qa.dtype(), y.len()), (DType::F8E4M3, m * k), "{what}");
    let kb = k.div_ceil(128);
    assert_eq!(sa.dims(), &[m, kb], "{what}: sa shape");
    let codes: Vec<u8> = qa.flatten_all()?.to_vec1::<candle_fp8::F8E4M3>()?.iter().map(|c| c.to_bits()).collect();
    let scales: Vec<f32> = sa.contiguous()?.flatten_all()?.to_vec1()?;
    let r23 = 2f64.powi(-23);
    let mut n = QuantCounts::default();
    for r in 0..m {
        for g in 0..kb {
            let idx = r * k + g * 128..r * k + (g * 128 + 128).min(k);
            let amax = idx.clone().map(|i| y[i].abs()).fold(0f64, f64::max);
            let amax_lo = idx.clone().map(|i| (y[i].abs() - tol[i]).max(0.0)).fold(0f64, f64::max);
            let amax_hi = idx.clone().map(|i| y[i].abs() + tol[i]).fold(0f64, f64::max);
            let s_ref = amax.max(1e-4) / 448.0;
            let (s_lo, s_hi) = (amax_lo.max(1e-4) / 448.0 * (1.0 - r23), amax_hi.max(1e-4) / 448.0 * (1.0 + r23));
            let s = f64::from(scales[r * kb + g]);
            assert!(
                s_lo <= s && s <= s_hi,
                "{what}: row {r} group {g}: scale {s:e} outside [{s_lo:e}, {s_hi:e}] (exact-arithmetic scale {s_ref:e}, off by {:.3e} relative)",
                s / s_ref - 1.0
            );
            for i in idx {
                let (q, yi, ti) = (codes[i], y[i], tol[i]);
                let (mut lo, mut hi) = ((yi - ti) / s, (yi + ti) / s);
                lo -= lo.abs() * r23;
                hi += hi.abs() * r23;
                let (ord_lo, ord_hi, ord_q) = (e4m3_ord(e4m3_code(lo)), e4m3_ord(e4m3_code(hi)), e4m3_ord(q));
                let at = format!("{what}: [{r}, {}] exact {yi:e} ± {ti:.2e}, scale {s:e}", i - r * k);
                assert!(
                    ord_lo <= ord_q && ord_q <= ord_hi,
                    "{at}: code {q:#04x} ({:e}) is not the rounding of any quotient in [{lo:e}, {hi:e}] (codes {:#04x} ..= {:#04x})",
                    e4m3_value(q),
                    e4m3_code(lo),
                    e4m3_code(hi)
                );
                let q_ref = e4m3_code(yi / s_ref);
                let ord_ref = e4m3_ord(q_ref);
                let ambiguous = e4m3_ord(e4m3_code(lo.min(yi / s_ref))) != e4m3_ord(e4m3_code(hi.max(yi / s_ref)));
                let apart = ti / s + yi.abs() * (1.0 / s - 1.0 / s_ref).abs() + (yi.abs() + ti) / s * r23;
                let gap = if q_ref & 0x7f == 0 { 2f64.powi(-9) } else { 2.0 * e4m3_half_gap((q_ref & 0x7f) - 1) };
                let wide = apart >= 0.75 * gap;
                n.elements += 1;
                n.ambiguous += usize::from(ambiguous);
                n.wide += usize::from(wide);
                if ord_q != ord_ref {
                    n.differ += 1;
                    assert!(ambiguous, "{at}: code {q:#04x} differs from the exact quantizer's {q_ref:#04x} away from any rounding boundary");
                    assert!(
                        wide || (ord_q - ord_ref).abs() <= 1,
                        "{at}: code {q:#04x} is more than one e4m3 step from the exact quantizer's {q_ref:#04x}"
                    );
                }
                let deq = e4m3_value(q) * s;
                let bound = ti + e4m3_half_gap(q) * s + 2f64.powi(-22) * (yi.abs() + ti);
                assert!(
                    (deq - yi).abs() <= bound,
                    "{at}: dequantized {deq:e} is {:e} away, bound {bound:e}",
                    (deq - yi).abs()
                );
            }
        }
    }
    assert!(n.differ <= n.ambiguous, "{what}: {n:?}");
    Ok(n)
}

fn report(what: &str, n: QuantCounts) {
    let pct = |x: usize| 100.0 * x as f64 / n.elements.max(1) as f64;
    println!(
        "{what}: {} elements, {} codes differ from the exact quantizer's ({:.3} %), bound: {} ambiguous ({:.3} %); {} with absolute tolerances",
        n.elements,
        n.differ,
        pct(n.differ),
        n.ambiguous,
        pct(n.ambiguous),
        n.wide
    );
}

/// `add_rmsnorm_quantize` against the f64 residual add + RMSNorm and the test-local quantizer.
/// Rows span 1e-3 .. 1e2: at 1e-3, mean(h²) ≈ 2e-6 is comparable to eps = 1e-6, so the eps
/// that the op applies is visible in every scale (1e-5 instead would move them by ×0.5).
#[test]
fn add_rmsnorm_quantize_matches_f64_rmsnorm() -> Result<()> {
    let eps = 1e-6f32;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let mut total = QuantCounts::default();
        for (m, k) in [(1, 128), (3, 256), (17, 384), (5, 200), (4, 1024), (40, 256)] {
            let exps = [-3, -2, -1, 0, 1, 2];
            let x = rows_with(m, k, 1 + m as u64, dtype, &exps)?;
            let r = rows_with(m, k, 100 + k as u64, dtype, &exps)?;
            let mut rng = Rng::new(9 + k as u64);
            let gamma =
                Tensor::from_vec((0..k).map(|_| 1.0 + 0.2 * rng.normal_f32()).collect::<Vec<f32>>(), k, &Device::Cpu)?
                    .to_dtype(dtype)?;
            let what = format!("{dtype:?} m={m} k={k}");
            let (xv, rv, gv) = (to_f64(&x)?, to_f64(&r)?, to_f64(&gamma)?);

            let (sum, qa, sa) = add_rmsnorm_quantize(&x, Some(&r), &gamma, eps)?;
            // The residual sum is one correctly rounded addition.
            let sum = sum.expect("a sum with a residual");
            assert_eq!((sum.dims(), sum.dtype()), (x.dims(), dtype), "{what} sum");
            let exact_sum: Vec<f64> = xv.iter().zip(&rv).map(|(a, b)| a + b).collect();
            let want: Vec<f64> = exact_sum.iter().map(|&v| round_to(v, dtype)).collect();
            assert!(to_f64(&sum)? == want, "{what}: the residual sum is not the rounded x + r");
            let y = rmsnorm_f64(&exact_sum, &gv, eps, k);
            let tol = rmsnorm_tolerance(&y, &gv, dtype, k);
            total += check_quantized(&what, &y, &tol, &qa, &sa)?;

            let (sum, qa, sa) = add_rmsnorm_quantize(&x, None, &gamma, eps)?;
            assert!(sum.is_none(), "no residual, no sum");
            let y = rmsnorm_f64(&xv, &gv, eps, k);
            let tol = rmsnorm_tolerance(&y, &gv, dtype, k);
            total += check_quantized(&format!("{what} (no residual)"), &y, &tol, &qa, &sa)?;
        }
        report(&format!("add_rmsnorm_quantize {dtype:?}"), total);
    }
    Ok(())
}

/// Off the CUDA kernel path an FP8 layer's output is never left unreduced, and the
/// `_unreduced` norm equals the plain one; partials of the wrong shape are named errors.
#[test]
fn unreduced_outputs_on_the_cpu() -> Result<()> {
    use candle_fp8::ops::{add_rmsnorm_quantize_unreduced, Unreduced};
    use candle_fp8::testing::random_operands;
    let ops = random_operands(3, 256, 512, 5, &Device::Cpu)?;
    let lin = Fp8BlockLinear::new(ops.w.clone(), ops.sw.clone(), None)?;
    let out = lin.forward_quantized_unreduced(&ops.qa, &ops.sa)?;
    let Unreduced::Done(y) = &out else { panic!("CPU: expected Done, got {out:?}") };
    assert_same("forward_quantized_unreduced", y, &lin.forward_quantized(&ops.qa, &ops.sa)?)?;
    assert_same("reduce() of Done", &out.reduce()?, y)?;

    let x = rows(3, 256, 9, DType::BF16)?;
    let gamma = rows(1, 256, 10, DType::BF16)?.squeeze(0)?;
    let (h0, q0, s0) = add_rmsnorm_quantize(&x, Some(y), &gamma, 1e-6)?;
    let (h1, q1, s1) = add_rmsnorm_quantize_unreduced(&x, Some(&out), &gamma, 1e-6)?;
    assert_same("sum", &h1.unwrap(), &h0.unwrap())?;
    assert_same("q", &q1, &q0)?;
    assert_same("scales", &s1, &s0)?;

    // Partials on the CPU only exist if a caller builds them: they are reduced first (CUDA
    // only) or rejected with the reason.
    let bogus = Unreduced::Partials(Tensor::zeros((2, 3, 256), DType::F32, &Device::Cpu)?);
    let e = err_of(add_rmsnorm_quantize_unreduced(&x, Some(&bogus), &gamma, 1e-6));
    assert!(e.contains("partials") || e.contains("CUDA"), "{e}");
    Ok(())
}

/// `swiglu_quantize` against the f64 SiLU·up and the test-local quantizer. Rows span 1e-3 ..
/// 1e2 (f16: .. 1e1, so that products stay finite in f16).
#[test]
fn swiglu_quantize_matches_f64_swiglu() -> Result<()> {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let exps: &[i32] = if dtype == DType::F16 { &[-3, -2, -1, 0, 1] } else { &[-3, -2, -1, 0, 1, 2] };
        let mut total = QuantCounts::default();
        for (m, inter) in [(1, 128), (3, 256), (17, 768), (2, 100), (40, 256)] {
            let gu = rows_with(m, 2 * inter, 3 + m as u64, dtype, exps)?;
            let (qa, sa) = swiglu_quantize(&gu)?;
            assert_eq!((qa.dims(), sa.dims()), (&[m, inter][..], &[m, inter.div_ceil(128)][..]));
            let (y, tol) = swiglu_f64(&to_f64(&gu)?, inter, dtype);
            total += check_quantized(&format!("{dtype:?} m={m} inter={inter}"), &y, &tol, &qa, &sa)?;
        }
        report(&format!("swiglu_quantize {dtype:?}"), total);
    }
    Ok(())
}

#[test]
fn empty_batches_give_empty_outputs() -> Result<()> {
    let x = Tensor::zeros((0, 256), DType::F32, &Device::Cpu)?;
    let gamma = Tensor::ones(256, DType::F32, &Device::Cpu)?;
    let (sum, qa, sa) = add_rmsnorm_quantize(&x, Some(&x), &gamma, 1e-6)?;
    assert_eq!(sum.unwrap().dims(), &[0, 256]);
    assert_eq!((qa.dims(), sa.dims()), (&[0, 256][..], &[0, 2][..]));
    let (qa, sa) = swiglu_quantize(&Tensor::zeros((0, 512), DType::F32, &Device::Cpu)?)?;
    assert_eq!((qa.dims(), sa.dims()), (&[0, 256][..], &[0, 2][..]));
    Ok(())
}

fn err_of<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_inputs_are_named_errors() -> Result<()> {
    let cpu = Device::Cpu;
    let x = Tensor::ones((2, 256), DType::F32, &cpu)?;
    let g = Tensor::ones(256, DType::F32, &cpu)?;
    let e = err_of(add_rmsnorm_quantize(&x.flatten_all()?, None, &g, 1e-6));
    assert!(e.contains("x must be rank 2"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x.to_dtype(DType::U32)?, None, &g, 1e-6));
    assert!(e.contains("x must be bf16, f16 or f32"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x, None, &Tensor::ones(128, DType::F32, &cpu)?, 1e-6));
    assert!(e.contains("gamma must be [256]"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x, None, &g.to_dtype(DType::BF16)?, 1e-6));
    assert!(e.contains("gamma is BF16 but x is F32"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x, Some(&Tensor::ones((3, 256), DType::F32, &cpu)?), &g, 1e-6));
    assert!(e.contains("residual has shape [3, 256]"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x, Some(&x.to_dtype(DType::BF16)?), &g, 1e-6));
    assert!(e.contains("residual is BF16"), "{e}");
    let strided = Tensor::ones((256, 2), DType::F32, &cpu)?.t()?;
    let e = err_of(add_rmsnorm_quantize(&strided, None, &g, 1e-6));
    assert!(e.contains("x must be contiguous"), "{e}");
    let e = err_of(add_rmsnorm_quantize(&x, Some(&strided), &g, 1e-6));
    assert!(e.contains("residual must be contiguous"), "{e}");
    let e = err_of(add_rmsnorm_quantize(
        &Tensor::ones((2, 0), DType::F32, &cpu)?,
        None,
        &Tensor::ones(0, DType::F32, &cpu)?,
        1e-6,
    ));
    assert!(e.contains("K = 0"), "{e}");

    let e = err_of(swiglu_quantize(&Tensor::ones((2, 255), DType::F32, &cpu)?));
    assert!(e.contains("even, non-zero number of columns"), "{e}");
    let e = err_of(swiglu_quantize(&Tensor::ones(256, DType::F32, &cpu)?));
    assert!(e.contains("gate_up must be rank 2"), "{e}");
    let e = err_of(swiglu_quantize(&Tensor::ones((256, 2), DType::F32, &cpu)?.t()?));
    assert!(e.contains("gate_up must be contiguous"), "{e}");
    let e = err_of(swiglu_quantize(&Tensor::ones((2, 256), DType::U8, &cpu)?));
    assert!(e.contains("gate_up must be bf16, f16 or f32"), "{e}");
    Ok(())
}

#[test]
fn forward_quantized_equals_forward() -> Result<()> {
    let w = rows(384, 512, 5, DType::F32)?;
    let b = rows(1, 384, 6, DType::F32)?.squeeze(0)?;
    for bias in [None, Some(b)] {
        let layer = Fp8BlockLinear::from_weight(&w, bias)?;
        assert!(layer.quantizes_activations()?);
        let x = rows(7, 512, 8, DType::BF16)?;
        let (qa, sa) = quantize_activation(&x)?;
        assert_same("forward_quantized", &layer.forward_quantized(&qa, &sa)?, &layer.forward(&x)?)?;
    }
    let layer = Fp8BlockLinear::from_weight(&w, None)?;
    let (qa, sa) = quantize_activation(&rows(2, 256, 1, DType::F32)?)?;
    let e = err_of(layer.forward_quantized(&qa, &sa));
    assert!(e.contains("qa has shape [2, 256], expected [M, 512]"), "{e}");
    Ok(())
}

/// `forward_swiglu_quantized` of a [gate | up] layer is `swiglu_quantize` of its output (on the
/// CPU always the composed path); a layer with an odd width is an error naming it.
#[test]
fn forward_swiglu_quantized_equals_gemm_then_swiglu() -> Result<()> {
    let w = rows(512, 384, 9, DType::F32)?;
    let layer = Fp8BlockLinear::from_weight(&w, None)?;
    for m in [1, 5, 17] {
        let (qa, sa) = quantize_activation(&rows(m, 384, m as u64, DType::BF16)?)?;
        let (q_ref, s_ref) = swiglu_quantize(&layer.forward_quantized(&qa, &sa)?)?;
        let (q, s) = layer.forward_swiglu_quantized(&qa, &sa)?;
        assert_eq!(q.dims(), &[m, 256]);
        assert_same(&format!("m={m} q"), &q, &q_ref)?;
        assert_same(&format!("m={m} scales"), &s, &s_ref)?;
    }
    let odd = Fp8BlockLinear::from_weight(&rows(129, 384, 3, DType::F32)?, None)?;
    let (qa, sa) = quantize_activation(&rows(2, 384, 4, DType::BF16)?)?;
    let e = err_of(odd.forward_swiglu_quantized(&qa, &sa));
    assert!(e.contains("129") && e.contains("halves"), "{e}");
    Ok(())
}

/// Logits over a prompt and a few greedy decode steps.
fn decode_logits(model: &mut DecoderModel, steps: usize) -> Result<Vec<Tensor>> {
    model.clear_kv_cache();
    let prompt: Vec<u32> = "Fused ops".bytes().map(u32::from).collect();
    let mut out = vec![model.forward(&Tensor::new(prompt.as_slice(), &Device::Cpu)?.unsqueeze(0)?, 0)?];
    for pos in prompt.len()..prompt.len() + steps {
        let next = out.last().unwrap().argmax(1)?.to_dtype(DType::U32)?.unsqueeze(1)?;
        out.push(model.forward(&next, pos)?);
    }
    Ok(out)
}

#[test]
fn qwen3_fused_elementwise_equals_composed() -> Result<()> {
    let cfg = DecoderConfig { num_hidden_layers: 3, ..DecoderConfig::tiny() };
    let dir = tempfile::tempdir()?;
    write_random_checkpoint(dir.path(), &cfg, 11, &[])?;
    let ck = Checkpoint::open(dir.path())?;
    for dtype in [DType::F32, DType::BF16] {
        let vb = ck.var_builder(dtype, &Device::Cpu);
        let opts = ModelOptions::default().dtype(dtype);
        let mut fused = DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), &opts)?;
        assert!(fused.fused_kernels(), "on by default");
        let mut composed = fused.with_fused_kernels(false);
        assert_eq!(fused.fused_elementwise_layers()?, cfg.num_hidden_layers);
        assert_eq!(composed.fused_elementwise_layers()?, 0);
        let (a, b) = (decode_logits(&mut fused, 4)?, decode_logits(&mut composed, 4)?);
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_same(&format!("{dtype:?} step {i} logits"), a, b)?;
        }
    }
    Ok(())
}
