//! Shared test support: tiny on-disk checkpoints, the e4m3 format from its definition, and the
//! GEMM rounding check (used by the checkpoint, GEMM, fused-op, format and bad-input tests).
//!
//! Include it from a test file with
//! ```ignore
//! #[path = "common/fixtures.rs"]
//! mod fixtures;
//! ```
//!
//! Checkpoints:
//! - [`write_fp8_checkpoint`]: the usual entry point — float tensors in, an FP8 checkpoint out
//!   (`config.json` with the given `quantization_config`, single file or `shards` shards).
//! - [`write_checkpoint_with_config`]: the same with a whole `config.json` (model fields too).
//! - [`write_raw_checkpoint`]: tensors stored exactly as given (to build broken checkpoints).
//! - [`fp8_quant_config`], [`test_weight`]: a standard `quantization_config` and weights whose
//!   magnitudes vary (log-spaced) across 128×128 blocks, so a wrong scale index cannot hide.
//! - [`fixture_dir`]: the folders of `tests/fixtures/` (written by independent Python tools).
//!
//! Which tensors become FP8: those [`candle_fp8::checkpoint::is_default_fp8_target`] selects
//! (rank-2 `<module>.weight` whose last component contains `_proj`) and whose module the
//! config does not exclude ([`candle_fp8::checkpoint::QuantizationConfig::is_quantized`]).
//! Everything else is stored in the dtype it was given in.
//!
//! Arithmetic written here from the definitions, not taken from the crate (so that a test
//! comparing the crate with it compares two independent implementations):
//! - [`e4m3_value`] / [`e4m3_code`]: e4m3 (fn) decode and round-to-nearest-even, saturating
//!   encode; [`bf16_rne`] / [`f16_rne`]: round-to-nearest-even to bf16 / f16.
//! - [`check_gemm_rounding`]: a bf16 GEMM output judged output by output against the exact
//!   blocked product, with the error budget of f32 summation in the contract's order.
//! - [`contract_gemm`]: the CPU kernel's documented arithmetic, plus [`GemmMutant`]s (each a
//!   plausible kernel bug) to prove that the rounding check rejects them.
#![allow(dead_code)]

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::{is_default_fp8_target, QuantizationConfig, ShardWriter, CONFIG_FILE};
use candle_fp8::format::{act_scale_m_stride, num_blocks, BLOCK, F8E4M3};
use candle_fp8::testing::reference::{naive_matmul_f64, rounding_stats};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The standard `quantization_config` (`fp8`, `e4m3`, `dynamic`, `[128, 128]`) leaving
/// `modules_to_not_convert` unquantized.
pub fn fp8_quant_config(modules_to_not_convert: &[&str]) -> Value {
    QuantizationConfig::new(modules_to_not_convert.iter().map(|s| s.to_string()).collect()).to_json()
}

/// Writes an FP8 checkpoint into `dir`: `config.json` = `{"architectures": ["Test"],
/// "quantization_config": quant_cfg}` (no `quantization_config` when `None`: nothing is
/// quantized then), and the tensors, quantized as described in the module docs, with
/// `weight_scale_inv` stored as `scale_dtype` (F32, BF16 or F16), split into `shards` files
/// (1 = `model.safetensors`, more = `model-0000i-of-0000n.safetensors` + index).
pub fn write_fp8_checkpoint(
    dir: &Path,
    tensors: &[(&str, Tensor)],
    quant_cfg: Option<&Value>,
    shards: usize,
    scale_dtype: DType,
) -> Result<()> {
    let mut config = json!({ "architectures": ["Test"] });
    if let Some(q) = quant_cfg {
        config["quantization_config"] = q.clone();
    }
    write_checkpoint_with_config(dir, tensors, &config, shards, scale_dtype)
}

/// [`write_fp8_checkpoint`] with a whole `config.json` (its `quantization_config`, if any,
/// decides what is quantized; it must parse).
pub fn write_checkpoint_with_config(
    dir: &Path,
    tensors: &[(&str, Tensor)],
    config: &Value,
    shards: usize,
    scale_dtype: DType,
) -> Result<()> {
    let quant = QuantizationConfig::from_config_json(config)?;
    let mut out: Vec<(String, Tensor)> = Vec::new();
    for (name, t) in tensors {
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let quantize = quant.as_ref().is_some_and(|q| q.is_quantized(module)) && is_default_fp8_target(name, t.dims());
        if quantize {
            let (w, s) = candle_fp8::quant::quantize_weight(&t.to_dtype(DType::F32)?)?;
            out.push((name.to_string(), w));
            out.push((format!("{module}.weight_scale_inv"), s.to_dtype(scale_dtype)?));
        } else {
            out.push((name.to_string(), t.clone()));
        }
    }
    write_raw_checkpoint(dir, out, config, shards)
}

/// Writes `config` as `config.json` and the tensors exactly as given, split into `shards`
/// files of consecutive tensors
/// (exactly `shards` files, clamped to `1..=tensors.len()`).
pub fn write_raw_checkpoint(dir: &Path, tensors: Vec<(String, Tensor)>, config: &Value, shards: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(CONFIG_FILE), serde_json::to_string_pretty(config).unwrap_or_default())?;
    let len = tensors.len();
    let shards = shards.clamp(1, len.max(1));
    let mut w = ShardWriter::new(dir, None)?;
    for (i, (name, t)) in tensors.into_iter().enumerate() {
        // Tensor i goes to shard i * shards / len: exactly `shards` non-empty files.
        if i > 0 && i * shards / len != (i - 1) * shards / len {
            w.flush()?;
        }
        w.push(name, t)?;
    }
    w.finish()?;
    Ok(())
}

/// A deterministic f32 `[n, k]` weight: uniform noise in ±1 times a per-128×128-block
/// magnitude log-spaced over 1e-3 .. 1e1, so every block gets a different scale.
pub fn test_weight(n: usize, k: usize, seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let kb = k.div_ceil(128);
    let v: Vec<f32> = (0..n * k)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            let block = (i / k / 128) * kb + (i % k) / 128;
            let exp = -3.0 + 4.0 * ((block * 7 + seed as usize) % 9) as f32 / 8.0;
            u * 10f32.powf(exp)
        })
        .collect();
    Tensor::from_vec(v, (n, k), &Device::Cpu).expect("shape matches")
}

/// A deterministic activation `[m, k]` in ±1 (f32).
pub fn test_input(m: usize, k: usize, seed: u64) -> Tensor {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let v: Vec<f32> = (0..m * k)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, (m, k), &Device::Cpu).expect("shape matches")
}

/// `tests/fixtures/<name>`: files written by independent tools (tests/fixtures/README.md).
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(name)
}

// ---------------------------------------------------------------------------------------------
// e4m3 (fn) and bf16 from their definitions (written here, not taken from the crate)
// ---------------------------------------------------------------------------------------------

/// The binade of a positive, normal f64: `floor(log2 a)`, read from the exponent bits.
fn binade(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// The value of an e4m3 (fn) code: bit 7 sign `s`, bits 6..3 exponent `e` (bias 7), bits 2..0
/// mantissa `m`; `(-1)^s · 2^(e−7) · (1 + m/8)` for `e > 0`, `(-1)^s · 2^−6 · m/8` for `e = 0`
/// (so 0x80 is −0.0); 0x7f / 0xff are NaN; no infinities.
pub fn e4m3_value(code: u8) -> f64 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((code >> 3) & 0x0f), f64::from(code & 0x07));
    if e == 15 && m == 7.0 {
        return f64::NAN;
    }
    if e == 0 {
        sign * (m / 8.0) * 2f64.powi(-6)
    } else {
        sign * (1.0 + m / 8.0) * 2f64.powi(e - 7)
    }
}

/// Round-to-nearest-even x → e4m3 (fn), saturating to ±448 (±inf included, as
/// `cvt.rn.satfinite` does); NaN → the NaN code with x's sign; the sign of a zero result is x's.
///
/// Between 2^E and 2^(E+1) (E ≥ −6) the e4m3 values are 2^(E−3) apart; below 2^−6 the
/// subnormals are 2^−9 apart. So the result is `round_ties_even(|x| / spacing) · spacing` —
/// `|x| / spacing` is exact (a power of two) — which may carry into the next binade (still a
/// representable value). Below 448 the largest result is 448 itself (spacing 32 there, and
/// |x| < 448 < 448 + 16); from 448 up, RNE gives 448 up to the tie 464 (448 has the even
/// mantissa) and beyond that the NaN code, which saturation replaces by 448: hence `≥ 448 → 448`.
pub fn e4m3_code(x: f64) -> u8 {
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    if x.is_nan() {
        return sign | 0x7f;
    }
    let a = x.abs();
    if a >= 448.0 {
        return sign | 0x7e;
    }
    let spacing = if a < 2f64.powi(-6) { 2f64.powi(-9) } else { 2f64.powi(binade(a) - 3) };
    let v = (a / spacing).round_ties_even() * spacing;
    let mag = if v < 2f64.powi(-6) {
        (v / 2f64.powi(-9)) as u8 // subnormal (or zero): m = v / 2^-9, e = 0
    } else {
        let e = binade(v);
        let m = (v / 2f64.powi(e) - 1.0) * 8.0; // exact: v has at most 4 significant bits
        (((e + 7) as u8) << 3) | m as u8
    };
    sign | mag
}

/// A code's position on the number line (e4m3 values are ordered like sign-magnitude
/// integers): codes `a`, `b` are neighbours iff `|ord(a) − ord(b)| == 1`; ±0 are both 0.
pub fn e4m3_ord(code: u8) -> i32 {
    let mag = i32::from(code & 0x7f);
    if code & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// Half the distance from `|value(code)|` to the next larger e4m3 magnitude (16 at 448): the
/// largest rounding error of a value that rounds to `code` from above.
pub fn e4m3_half_gap(code: u8) -> f64 {
    let mag = code & 0x7f;
    if mag >= 0x7e {
        return 16.0;
    }
    (e4m3_value(mag + 1) - e4m3_value(mag)) / 2.0
}

/// Round-to-nearest-even f64 → bf16 (8 significant bits; subnormals 2^−133 apart), as f64.
pub fn bf16_rne(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let a = x.abs();
    let spacing = if a < 2f64.powi(-126) { 2f64.powi(-133) } else { 2f64.powi(binade(a) - 7) };
    ((a / spacing).round_ties_even() * spacing).copysign(x)
}

/// Round-to-nearest-even f64 → f16 (11 significant bits; subnormals 2^−24 apart), as f64.
pub fn f16_rne(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let a = x.abs();
    let spacing = if a < 2f64.powi(-14) { 2f64.powi(-24) } else { 2f64.powi(binade(a) - 10) };
    ((a / spacing).round_ties_even() * spacing).copysign(x)
}

/// The bf16 ulp of `v`'s binade (values below the smallest normal count as that normal).
pub fn bf16_ulp(v: f64) -> f64 {
    2f64.powi(binade(v.abs().max(2f64.powi(-126))) - 7)
}

// ---------------------------------------------------------------------------------------------
// The GEMM rounding check, the documented CPU arithmetic and its mutants
// ---------------------------------------------------------------------------------------------

/// Host copies of the four GEMM operands: `qa` e4m3 `[m, k]`, `sa` the MN-major scale buffer
/// (column stride `round_up(m, 4)`), `w` e4m3 `[n, k]`, `sw` f32 `[ceil(n/128), ceil(k/128)]`.
#[derive(Debug, Clone)]
pub struct HostGemm {
    pub qa: Vec<F8E4M3>,
    pub sa: Vec<f32>,
    pub w: Vec<F8E4M3>,
    pub sw: Vec<f32>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl HostGemm {
    /// From the operand tensors (`sa` `[m, ceil(k/128)]`, any strides).
    pub fn from_tensors(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<Self> {
        let (m, k) = qa.dims2()?;
        let n = w.dim(0)?;
        let (kb, mpad) = (num_blocks(k), act_scale_m_stride(m));
        let cols = sa.to_dtype(DType::F32)?.t()?.contiguous()?.flatten_all()?.to_vec1::<f32>()?; // [kb, m]
        let mut sa_mn = vec![0f32; kb * mpad];
        for g in 0..kb {
            sa_mn[g * mpad..g * mpad + m].copy_from_slice(&cols[g * m..(g + 1) * m]);
        }
        Ok(Self {
            qa: qa.flatten_all()?.to_vec1()?,
            sa: sa_mn,
            w: w.flatten_all()?.to_vec1()?,
            sw: sw.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?,
            m,
            n,
            k,
        })
    }

    /// From `testing::random_operands`' host copies.
    pub fn from_operands(op: &candle_fp8::testing::Operands) -> Result<Self> {
        let (m, k) = op.qa.dims2()?;
        Ok(Self {
            qa: op.qa_host.clone(),
            sa: op.sa_host.clone(),
            w: op.w_host.clone(),
            sw: op.sw_host.clone(),
            m,
            n: op.w.dim(0)?,
            k,
        })
    }

    fn sa_at(&self, block: usize, row: usize) -> f32 {
        self.sa[block * act_scale_m_stride(self.m) + row]
    }

    fn sw_at(&self, n_block: usize, k_block: usize) -> f32 {
        self.sw[n_block * num_blocks(self.k) + k_block]
    }
}

/// What [`check_gemm_rounding`] saw.
#[derive(Debug, Clone)]
pub struct GemmRounding {
    pub outputs: usize,
    /// Outputs that differ from the correctly rounded (nearest-even) bf16 of the exact value.
    pub off_rounded: usize,
    /// Outputs whose exact value lies within the f32 error budget of a bf16 rounding boundary:
    /// the only ones allowed off the rounded value.
    pub ambiguous: usize,
    /// Largest |error| in bf16 ulps of the exact value's binade, and its allowed value.
    pub max_ulp: f64,
    pub max_allowed_ulp: f64,
    /// Mean signed error in ulps, and its allowed magnitude.
    pub mean_ulp: f64,
    pub mean_allowed: f64,
}

/// Judges a bf16 GEMM output `y` (`[m, n]`, widened to f32) output by output against the exact
/// blocked product (`testing::reference::naive_matmul_f64`, in f64, exact here), with the
/// error budget of the contract's f32 arithmetic:
///
/// - Within a K block the products `a·w` of two e4m3 values are exact in f32 (≤ 8 significant
///   bits), and are added in the documented order: 8 lanes over the 8-wide chunks, the lanes
///   in order, then the tail. A product passes through at most `d_b = cols/8 + 7 + cols%8`
///   f32 additions, each with relative error ≤ u = 2⁻²⁴, so `|p̂_b − p_b| ≤ d_b · u · P_b`
///   with `P_b = Σ |a·w| ≤ ‖a_b‖₂ · ‖w_b‖₂` (first order; Cauchy–Schwarz keeps the budget
///   O(kb) per output — for Gaussian-like data it is ≈ 1.6× the exact Σ |a·w|).
/// - Promotion `acc += p̂_b · fl(sa·sw)`: 2 more roundings (the scale product, the multiply),
///   then at most `kb − 1` accumulator additions (the first adds to 0, exactly).
/// - So `|ŷ − y| ≤ E = u · (1 + 2⁻¹⁰) · Σ_b S_b · ‖a_b‖ · ‖w_b‖ · (d_b + kb + 1)`,
///   `S_b = sa·sw` (the factor 1 + 2⁻¹⁰ covers every second-order term).
///
/// The bf16 store must round to nearest even, and rounding is monotone, so:
/// - an output off the correctly rounded value is allowed only where `y − E` and `y + E`
///   round differently (the exact value is within E of a rounding boundary: "ambiguous");
///   hence the share off the rounded value is at most the ambiguous share;
/// - every error is at most `E + ½ ulp(|y| + E)`;
/// - the mean signed error, in ulps of the exact binade, is the mean of the rounding errors
///   (each in [−½, ½]; their positions inside an ulp are effectively random for these sums, so
///   by Hoeffding `|mean| ≤ sqrt(ln(2/10⁻⁹) / 2n)` but with probability 10⁻⁹) plus at most
///   the mean of `E / ulp`.
///
/// A truncating store (≈ half the outputs off, errors up to 1 ulp), a wrong scale index, a
/// skipped K block or a promotion with one scale for all K blocks fail it (see
/// [`GemmMutant`]). The e4m3 values behind the budget come from [`e4m3_value`] (the closed
/// form); the exact sums from the crate's naive loop, whose decode table tests/format.rs
/// checks code by code.
pub fn check_gemm_rounding(y: &[f32], op: &HostGemm) -> std::result::Result<GemmRounding, String> {
    let (m, n, k) = (op.m, op.n, op.k);
    if y.len() != m * n || m * n == 0 {
        return Err(format!("{} outputs for an {m}×{n} GEMM", y.len()));
    }
    let kb = num_blocks(k);
    let dec: Vec<f64> = (0..=255u8).map(e4m3_value).collect();
    // ‖row block‖₂ of the e4m3 values, [rows, kb].
    let norms = |codes: &[F8E4M3], rows: usize| -> Vec<f64> {
        (0..rows * kb)
            .map(|rb| {
                let (r, b) = (rb / kb, rb % kb);
                let row = &codes[r * k + b * BLOCK..r * k + (b * BLOCK + BLOCK).min(k)];
                row.iter().map(|c| dec[c.to_bits() as usize].powi(2)).sum::<f64>().sqrt()
            })
            .collect()
    };
    let (a_norm, w_norm) = (norms(&op.qa, m), norms(&op.w, n));
    let u = 2f64.powi(-24) * (1.0 + 2f64.powi(-10));
    let budget = |i: usize, j: usize| -> f64 {
        let mut e = 0f64;
        for b in 0..kb {
            let cols = BLOCK.min(k - b * BLOCK);
            let s = f64::from(op.sa_at(b, i)) * f64::from(op.sw_at(j / BLOCK, b));
            e += (s * a_norm[i * kb + b] * w_norm[j * kb + b]).abs() * (cols / 8 + 7 + cols % 8 + kb + 1) as f64;
        }
        e * u
    };
    let exact = naive_matmul_f64(&op.qa, &op.sa, &op.w, &op.sw, m, n, k);
    let (mut off, mut amb, mut max_ulp, mut max_allowed, mut e_ulp_sum) = (0usize, 0usize, 0f64, 0f64, 0f64);
    for idx in 0..m * n {
        let (i, j) = (idx / n, idx % n);
        let (e, big_e) = (exact[idx], budget(i, j));
        let o = f64::from(y[idx]);
        let rounded = bf16_rne(e);
        let ambiguous = bf16_rne(e - big_e) != bf16_rne(e + big_e);
        amb += usize::from(ambiguous);
        if o != rounded {
            off += 1;
            if !ambiguous {
                return Err(format!(
                    "[{i}, {j}] = {o:e} is not the correctly rounded bf16 {rounded:e} of the exact {e:e}, and no f32 \
                     summation error within the budget {big_e:.3e} explains it"
                ));
            }
        }
        let ulp = bf16_ulp(e);
        let err = ((o - e) / ulp).abs();
        let allowed = (big_e + 0.5 * bf16_ulp(e.abs() + big_e)) / ulp;
        if err.is_nan() || err > allowed * (1.0 + 1e-9) {
            return Err(format!(
                "[{i}, {j}] = {o:e} is {err:.3} ulp from the exact {e:e}; at most {allowed:.3} (½ ulp + budget {big_e:.3e}) allowed"
            ));
        }
        max_ulp = max_ulp.max(err);
        max_allowed = max_allowed.max(allowed);
        e_ulp_sum += big_e / ulp;
    }
    let count = (m * n) as f64;
    let stats = rounding_stats(y, &exact).map_err(|e| e.to_string())?;
    // `rounding_stats` rounds the exact value with `half::bf16::from_f64`, which drops the low
    // 32 bits of the f64 before rounding (half 2.7): an exact value just above a tie counts as
    // the tie. Its share off the rounded value may differ from ours only on such outputs.
    let half_misrounds = exact.iter().filter(|&&e| half::bf16::from_f64(e).to_f64() != bf16_rne(e)).count();
    if (stats.off_rounded * count - off as f64).abs() > half_misrounds as f64 + 0.5 {
        return Err(format!(
            "rounding_stats counts {} outputs off the rounded value, this check {off} ({half_misrounds} exact values \
             that half::bf16::from_f64 rounds wrongly)",
            stats.off_rounded * count
        ));
    }
    let mean_allowed = ((2.0f64 / 1e-9).ln() / (2.0 * count)).sqrt() + e_ulp_sum / count;
    if stats.mean_ulp.is_nan() || stats.mean_ulp.abs() > mean_allowed {
        return Err(format!(
            "mean error {:.4} ulp: a bias beyond the ±{mean_allowed:.4} that rounding allows",
            stats.mean_ulp
        ));
    }
    if stats.max_ulp.is_nan() || stats.max_ulp > max_allowed * (1.0 + 1e-9) {
        return Err(format!("max error {:.3} ulp > {max_allowed:.3}", stats.max_ulp));
    }
    Ok(GemmRounding {
        outputs: m * n,
        off_rounded: off,
        ambiguous: amb,
        max_ulp,
        max_allowed_ulp: max_allowed,
        mean_ulp: stats.mean_ulp,
        mean_allowed,
    })
}

/// [`check_gemm_rounding`] of a bf16 `[m, n]` output tensor.
pub fn check_gemm_tensor(y: &Tensor, op: &HostGemm) -> std::result::Result<GemmRounding, String> {
    let y = y.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).map_err(|e| e.to_string())?;
    check_gemm_rounding(&y, op)
}

/// A plausible bug of a blocked-FP8 GEMM, for [`contract_gemm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmMutant {
    /// The bf16 output truncated (toward zero) instead of rounded to nearest even.
    TruncatingStore,
    /// Rows of N block `nb` use the weight scales of block `(nb + 1) % ceil(N/128)`.
    WrongScaleBlock,
    /// The last K block is never added.
    SkippedKBlock,
    /// The K blocks' raw partial sums added in f32, promoted once at the end with the first K
    /// block's scales (instead of each block with its own).
    PromoteOnceAtEnd,
}

impl GemmMutant {
    pub const ALL: [GemmMutant; 4] = [
        GemmMutant::TruncatingStore,
        GemmMutant::WrongScaleBlock,
        GemmMutant::SkippedKBlock,
        GemmMutant::PromoteOnceAtEnd,
    ];

    /// Whether the bug changes anything for this shape (a scale-block mix-up needs two N
    /// blocks; a skipped or mis-promoted K block needs two K blocks).
    pub fn applies(self, n: usize, k: usize) -> bool {
        match self {
            GemmMutant::TruncatingStore => true,
            GemmMutant::WrongScaleBlock => num_blocks(n) >= 2,
            GemmMutant::SkippedKBlock | GemmMutant::PromoteOnceAtEnd => num_blocks(k) >= 2,
        }
    }
}

/// The CPU kernel's documented arithmetic (src/cpu/gemm.rs), written out with the e4m3 values
/// of [`e4m3_value`]: per K block, 8 f32 lanes over the 8-wide chunks (multiply, then add), the
/// lanes summed in order, then the tail; the partial sum promoted with `fl(sa · sw)` into an f32
/// accumulator; the accumulator rounded to nearest-even bf16. With `mutant`, one bug.
/// Returns the bf16 outputs widened to f32, `[m, n]` row-major.
pub fn contract_gemm(op: &HostGemm, mutant: Option<GemmMutant>) -> Vec<f32> {
    let (m, n, k) = (op.m, op.n, op.k);
    let (kb, nb) = (num_blocks(k), num_blocks(n));
    let dec: Vec<f32> = (0..=255u8).map(|c| e4m3_value(c) as f32).collect();
    (0..m)
        .into_par_iter()
        .flat_map_iter(|i| {
            let dec = &dec;
            (0..n).map(move |j| {
                let n_block =
                    if mutant == Some(GemmMutant::WrongScaleBlock) { (j / BLOCK + 1) % nb } else { j / BLOCK };
                let (mut acc, mut raw) = (0f32, 0f32);
                for b in 0..kb {
                    if mutant == Some(GemmMutant::SkippedKBlock) && b == kb - 1 {
                        continue;
                    }
                    let (c0, cols) = (b * BLOCK, BLOCK.min(k - b * BLOCK));
                    let a = |c: usize| dec[op.qa[i * k + c0 + c].to_bits() as usize];
                    let w = |c: usize| dec[op.w[j * k + c0 + c].to_bits() as usize];
                    let full = cols / 8 * 8;
                    let mut lanes = [0f32; 8];
                    for c in (0..full).step_by(8) {
                        for (l, lane) in lanes.iter_mut().enumerate() {
                            *lane += a(c + l) * w(c + l);
                        }
                    }
                    let mut sum = lanes[1..].iter().fold(lanes[0], |s, &l| s + l);
                    for c in full..cols {
                        sum += a(c) * w(c);
                    }
                    if mutant == Some(GemmMutant::PromoteOnceAtEnd) {
                        raw += sum;
                    } else {
                        acc += sum * (op.sa_at(b, i) * op.sw_at(n_block, b));
                    }
                }
                if mutant == Some(GemmMutant::PromoteOnceAtEnd) {
                    acc = raw * (op.sa_at(0, i) * op.sw_at(n_block, 0));
                }
                if mutant == Some(GemmMutant::TruncatingStore) {
                    f32::from_bits(acc.to_bits() & 0xffff_0000)
                } else {
                    bf16_rne(f64::from(acc)) as f32
                }
            })
        })
        .collect()
}
