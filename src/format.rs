//! The numeric contract: block sizes, the e4m3 format, scale layouts and shape rules.
//!
//! Everything here is plain data and arithmetic, shared by the CPU path, the CUDA launchers
//! and the checkpoint loader, so that every layer agrees on one definition.
//!
//! | tensor | shape | dtype | layout |
//! |---|---|---|---|
//! | activation `x` | `[M, K]` | bf16 / f32 | row-major |
//! | quantized activation `qa` | `[M, K]` | e4m3 (fn) | row-major |
//! | activation scales `sa` | `[M, ceil(K/128)]` | f32 | MN-major: strides `(1, round_up(M, 4))` |
//! | weight `w` | `[N, K]` | e4m3 (fn) | row-major |
//! | weight scales `sw` | `[ceil(N/128), ceil(K/128)]` | f32 | row-major |
//! | output `y` | `[M, N]` | bf16 | row-major |

use candle_core::{bail, Result, Tensor};
pub use float8::F8E4M3;

/// Width of a quantization group along K, and the side of a weight scale block.
pub const BLOCK: usize = 128;

/// Largest finite e4m3 (fn) magnitude; quantization saturates to ±this value.
pub const E4M3_MAX: f32 = 448.0;

/// Lower bound on a group's absolute maximum before computing its scale, so that an
/// all-zero group gets a finite, non-zero scale (and quantizes to zeros).
pub const SCALE_EPS: f32 = 1e-4;

/// Alignment, in elements along M, of each K-block column of the activation scales. Each
/// column must start on a 16-byte boundary for TMA, i.e. a multiple of 4 f32.
pub const SCALE_M_ALIGN: usize = 4;

/// `ceil(a / b)`.
#[inline]
pub const fn ceil_div(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

/// `a` rounded up to a multiple of `b`.
#[inline]
pub const fn round_up(a: usize, b: usize) -> usize {
    ceil_div(a, b) * b
}

/// Stride, in elements, between consecutive K-block columns of the activation scales.
#[inline]
pub const fn act_scale_m_stride(m: usize) -> usize {
    round_up(m, SCALE_M_ALIGN)
}

/// Number of 128-wide groups along a dimension of `len` elements.
#[inline]
pub const fn num_blocks(len: usize) -> usize {
    ceil_div(len, BLOCK)
}

/// Shape `[ceil(N/128), ceil(K/128)]` of the weight scales for an `[N, K]` weight.
#[inline]
pub const fn weight_scale_shape(n: usize, k: usize) -> (usize, usize) {
    (num_blocks(n), num_blocks(k))
}

/// Saturating, round-to-nearest-even f32 → e4m3 (fn) conversion (NaN stays NaN), the same
/// rounding as the GPU's `cvt.rn.satfinite.e4m3x2.f32`.
#[inline]
pub fn f32_to_e4m3(x: f32) -> F8E4M3 {
    F8E4M3::from_f32(x)
}

/// All 256 e4m3 (fn) values as f32, indexed by bit pattern (0x7f / 0xff are NaN).
pub static E4M3_TO_F32: [f32; 256] = build_e4m3_table();

const fn build_e4m3_table() -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = F8E4M3::from_bits(i as u8).to_f32();
        i += 1;
    }
    t
}

/// e4m3 (fn) → f32, exactly.
#[inline]
pub fn e4m3_to_f32(x: F8E4M3) -> f32 {
    E4M3_TO_F32[x.to_bits() as usize]
}

/// Scale of one quantization group from its absolute maximum: `max(amax, eps) / 448`.
/// A NaN amax propagates, so a NaN in the input is never hidden.
#[inline]
pub fn group_scale(amax: f32) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    amax.max(SCALE_EPS) / E4M3_MAX
}

/// Multiple of which `K` must be for the fast path: TMA needs the rows of `qa` and `w` (`K`
/// e4m3 bytes each) to be 16-byte multiples.
pub const FAST_PATH_K_MULTIPLE: usize = 16;

/// Multiple of which `N` must be for the fast path: the bf16 output rows are 32-byte multiples,
/// so every TMA / vector store stays aligned.
pub const FAST_PATH_N_MULTIPLE: usize = 16;

/// Which GEMM shapes the Hopper kernels take directly (the "fast path").
///
/// The rule, checked in one place: `M ≥ 1`, `N` a non-zero multiple of 16, `K` a non-zero
/// multiple of 16.
/// - `K % 16 == 0` ([`FAST_PATH_K_MULTIPLE`]): the TMA row stride of the quantized activation
///   and of the weight. `K` need not be a multiple of 128: the last K block is then partial —
///   TMA reads its columns past `K` as zeros in both operands, and it is promoted with its own
///   scales (those of the partial group, `sa[m][⌈K/128⌉ − 1]`, `sw[n/128][⌈K/128⌉ − 1]`).
/// - `N % 16 == 0` ([`FAST_PATH_N_MULTIPLE`]): the bf16 output rows are 32-byte multiples, so
///   every TMA / vector store stays aligned, and weight rows are 16-byte aligned for TMA.
///
/// Other shapes are still computed correctly through a slower path.
pub fn is_fast_path_shape(m: usize, n: usize, k: usize) -> bool {
    m >= 1
        && n >= FAST_PATH_N_MULTIPLE
        && n % FAST_PATH_N_MULTIPLE == 0
        && k >= FAST_PATH_K_MULTIPLE
        && k % FAST_PATH_K_MULTIPLE == 0
}

/// The reason a shape is not on the fast path, for a one-time log line.
pub fn fast_path_refusal(m: usize, n: usize, k: usize) -> Option<String> {
    if is_fast_path_shape(m, n, k) {
        return None;
    }
    let mut why = Vec::new();
    if m == 0 {
        why.push("M == 0".to_string());
    }
    if k % FAST_PATH_K_MULTIPLE != 0 || k == 0 {
        why.push(format!("K = {k} is not a non-zero multiple of {FAST_PATH_K_MULTIPLE}"));
    }
    if n % FAST_PATH_N_MULTIPLE != 0 || n == 0 {
        why.push(format!("N = {n} is not a non-zero multiple of {FAST_PATH_N_MULTIPLE}"));
    }
    Some(why.join(", "))
}

/// Wraps an MN-major scale buffer (`kb * round_up(m, 4)` floats) as the `[m, kb]` tensor view
/// with strides `(1, round_up(m, 4))` that the GEMM takes.
pub fn act_scales_view(buffer: Tensor, m: usize, kb: usize) -> Result<Tensor> {
    let mpad = act_scale_m_stride(m);
    if buffer.elem_count() != kb * mpad {
        bail!(
            "activation scale buffer has {} elements, expected {kb} × {mpad} (kb × round_up(m, 4))",
            buffer.elem_count()
        )
    }
    buffer.reshape((kb, mpad))?.narrow(1, 0, m)?.t()
}

/// Validates a weight scale shape against its weight shape, naming `name` in the error.
pub fn check_weight_scale_shape(name: &str, n: usize, k: usize, dims: &[usize]) -> Result<()> {
    let (nb, kb) = weight_scale_shape(n, k);
    if dims != [nb, kb] {
        bail!(
            "{name}: weight scale shape {dims:?} does not match weight [{n}, {k}]: \
             expected [{nb}, {kb}] = [ceil({n}/{BLOCK}), ceil({k}/{BLOCK})]"
        )
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-kernel quantizer's fast codes (`quantize_pair`, kernels/include/fp8gemm/
    /// act_quant.cuh), for bf16 and f32 inputs: `q = v * r` with `r` within 1 ulp of
    /// `1 / s` (what `rcp.approx` guarantees; all three candidates tried), accepted when
    /// `q * (1 - 2^-19)` and `q * (1 + 2^-19)` round to the same e4m3 code. Whenever accepted,
    /// that code must be the one of the IEEE quotient (`cvt.rn.satfinite(div.rn(v, s))`); the
    /// rest falls back to the division: quotients at an e4m3 rounding midpoint, which bf16
    /// inputs (8-bit significands) hit often — ~0.35 % of the random bf16 quotients below.
    #[test]
    fn fast_quotient_codes_equal_the_divided_ones() {
        use crate::testing::Rng;
        let bf16 = |x: f32| half::bf16::from_f32(x).to_f32();
        let (lo_f, hi_f) = (1.0 - 2f32.powi(-19), 1.0 + 2f32.powi(-19));
        let mut rng = Rng::new(19);
        let (mut accepted, mut fallbacks, mut random) = (0u64, 0u64, 0u64);
        let amax_scale = |vals: &[f32]| group_scale(vals.iter().fold(0f32, |a, v| a.max(v.abs())));
        // `in_rate`: the value counts toward the fallback rate of ordinary bf16 data.
        let mut check = |v: f32, s: f32, in_rate: bool| {
            let want = f32_to_e4m3(v / s).to_bits();
            let r0 = 1.0 / s;
            for r in [r0, r0.next_up(), r0.next_down()] {
                let q = v * r;
                let (lo, hi) = (f32_to_e4m3(q * lo_f).to_bits(), f32_to_e4m3(q * hi_f).to_bits());
                if lo == hi {
                    assert_eq!(lo, want, "v={v:e} s={s:e} r={r:e}: fast code {lo:#04x}, divided {want:#04x}");
                    accepted += 1;
                } else if in_rate {
                    fallbacks += 1;
                }
                random += u64::from(in_rate);
            }
        };
        for _ in 0..40_000 {
            // A 128-value group as the quantizer sees it: bf16 values, s from its amax.
            let mag = rng.log_spaced(-30.0, 30.0);
            let vals: Vec<f32> = (0..16).map(|_| bf16(rng.normal_f32() * mag)).collect();
            let s = amax_scale(&vals);
            for &v in &vals {
                check(v, s, true);
            }
            // f32 inputs (the fused quantizers' normalized values): the same claim holds.
            let vals: Vec<f32> = (0..4).map(|_| rng.normal_f32() * mag).collect();
            let s = amax_scale(&vals);
            for &v in &vals {
                check(v, s, false);
            }
            // Quotients at (or one bf16 step from) e4m3 rounding midpoints, subnormal ones
            // included, for a power-of-two scale (exact) and an arbitrary one.
            let code = (rng.next_u64() % 126) as u8; // 0 ..= 125: finite, below 448
            let mid = 0.5 * (e4m3_to_f32(F8E4M3::from_bits(code)) + e4m3_to_f32(F8E4M3::from_bits(code + 1)));
            let sign = if rng.next_u64() % 2 == 0 { 1.0 } else { -1.0 };
            for s in [2f32.powi((rng.next_u64() % 40) as i32 - 20), s] {
                let v = bf16(sign * mid * s);
                for v in [v, v.next_up(), v.next_down()] {
                    check(v, s, false);
                }
            }
        }
        assert!(accepted > 500_000, "only {accepted} fast codes checked");
        // The fallback stays rare on ordinary data (the kernel's speed depends on it).
        println!("fast codes checked: {accepted}; random quotients falling back: {fallbacks} of {random}");
        assert!(fallbacks * 100 < random, "{fallbacks} of {random} random quotients fell back");
    }

    #[test]
    fn e4m3_saturates_and_rounds() {
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1000.0)), 448.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(-1000.0)), -448.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(448.0)), 448.0);
        // 464 is exactly half-way between 448 and the (non-existent) 480: saturates.
        assert_eq!(e4m3_to_f32(f32_to_e4m3(464.0)), 448.0);
        // Between 1.0 and 1.125, the midpoint 1.0625 rounds to even (1.0).
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.0625)), 1.0);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.07)), 1.125);
        assert!(e4m3_to_f32(f32_to_e4m3(f32::NAN)).is_nan());
        // Infinity saturates (satfinite), as on the GPU.
        assert_eq!(e4m3_to_f32(f32_to_e4m3(f32::INFINITY)), 448.0);
    }

    #[test]
    fn e4m3_subnormals_and_signed_zero() {
        let min_sub = 2f32.powi(-9);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(min_sub)), min_sub);
        assert_eq!(e4m3_to_f32(f32_to_e4m3(3.0 * min_sub)), 3.0 * min_sub);
        // Below half the smallest subnormal: flushes to zero.
        assert_eq!(e4m3_to_f32(f32_to_e4m3(min_sub * 0.4)), 0.0);
        let nz = f32_to_e4m3(-0.0);
        assert_eq!(nz.to_bits(), 0x80);
        assert!(e4m3_to_f32(nz).is_sign_negative());
    }

    #[test]
    fn table_matches_every_finite_code() {
        for b in 0u16..256 {
            let v = E4M3_TO_F32[b as usize];
            if v.is_nan() {
                assert!(b & 0x7f == 0x7f, "NaN only at 0x7f/0xff, got {b:#x}");
                continue;
            }
            // Every finite code round-trips through the converter.
            assert_eq!(f32_to_e4m3(v).to_bits(), b as u8, "code {b:#x} = {v}");
        }
    }

    /// The fast-path rule exactly: M ≥ 1, N and K non-zero multiples of 16 — a partial last K
    /// block included (SmolLM2: K = 576 = 4·128 + 64, 1536 + 64, 4096 + 16), and
    /// `fast_path_refusal` names every broken part.
    #[test]
    fn fast_path_rule() {
        for (m, n, k) in [
            (1, 16, 16),
            (1, 576, 576),
            (9, 1536, 576),
            (3, 576, 1536),
            (1, 4096, 1600),
            (300, 64, 4112),
            (1, 16, 127 * 16),
        ] {
            assert!(is_fast_path_shape(m, n, k), "{m}x{n}x{k}");
            assert_eq!(fast_path_refusal(m, n, k), None, "{m}x{n}x{k}");
        }
        for (m, n, k, why) in [
            (0, 4096, 4096, "M == 0"),
            (1, 4096, 4100, "K = 4100"),
            (1, 4096, 8, "K = 8"),
            (1, 4096, 0, "K = 0"),
            (1, 4090, 4096, "N = 4090"),
            (1, 8, 4096, "N = 8"),
            (1, 0, 4096, "N = 0"),
        ] {
            assert!(!is_fast_path_shape(m, n, k), "{m}x{n}x{k}");
            let got = fast_path_refusal(m, n, k).unwrap();
            assert!(got.contains(why), "{m}x{n}x{k}: {got}");
        }
        let both = fast_path_refusal(1, 100, 200).unwrap();
        assert!(both.contains("K = 200") && both.contains("N = 100") && both.contains("multiple of 16"), "{both}");
    }

    #[test]
    fn shapes_and_layout_rules() {
        assert_eq!(act_scale_m_stride(1), 4);
        assert_eq!(act_scale_m_stride(4), 4);
        assert_eq!(act_scale_m_stride(5), 8);
        assert_eq!(weight_scale_shape(200, 300), (2, 3));
        assert!(is_fast_path_shape(1, 4096, 4096));
        assert!(!is_fast_path_shape(1, 4090, 4096));
        assert!(fast_path_refusal(1, 4096, 4000).is_none());
        let e = check_weight_scale_shape("w", 256, 512, &[2, 3]).unwrap_err().to_string();
        assert!(e.contains("expected [2, 4]"), "{e}");
        assert_eq!(group_scale(0.0), SCALE_EPS / E4M3_MAX);
        assert!(group_scale(f32::NAN).is_nan());
    }
}
