//! The CPU blocked-FP8 GEMM (the `cpu` provider): e4m3 weights decoded on the fly, 128-wide K
//! blocks promoted into an f32 accumulator with both scales, as on the GPU.
//!
//! On x86-64 with AVX2 + F16C the weight rows are decoded sixteen values at a time (e4m3 bytes
//! placed into f16 bit patterns and converted by `vcvtph2ps`: the value × 2⁻⁸, exact) and
//! register blocks of 1 token × 8 rows, 2 × 4 or 3-4 × 2 are accumulated with explicit vector
//! multiplies and adds; elsewhere a lookup table and portable code do the same arithmetic. Both
//! paths add the products in the same order (8 lanes over the K block, then the lanes in order,
//! then the tail), without fused multiply-adds, so the result does not depend on the CPU it
//! runs on. Each row's next K block is prefetched: a block's 128 rows are 128 interleaved
//! streams, more than the hardware prefetchers follow.

use crate::format::{e4m3_to_f32, num_blocks, BLOCK, F8E4M3};
use half::bf16;
use rayon::prelude::*;

/// Weight rows decoded together (the register blocks below take up to 8 of them).
const ROWS: usize = 8;

/// The CPU blocked-FP8 GEMM. One rayon task per 128-row block of `w`: each K block's weight
/// rows are decoded once (unscaled e4m3 values, exact in f32; see the module docs), dotted with every token's
/// decoded activations, and the partial sums are promoted into the f32 accumulator with
/// `sa[m, kb] · sw[nb, kb]` — the same two-level accumulation as the GPU kernels.
///
/// `sa` is MN-major with column stride `sa_stride`; `sw` row-major `[ceil(n/128), ceil(k/128)]`.
#[allow(clippy::too_many_arguments)]
pub fn cpu_blocked_gemm(
    qa: &[F8E4M3],
    sa: &[f32],
    sa_stride: usize,
    w: &[F8E4M3],
    sw: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<bf16> {
    let kb = num_blocks(k);
    let nb = num_blocks(n);
    let a: Vec<f32> = qa[..m * k].iter().map(|&v| e4m3_to_f32(v)).collect();
    let simd = Simd::detect();
    let blocks: Vec<Vec<f32>> = (0..nb)
        .into_par_iter()
        .map(|bn| {
            let rows = BLOCK.min(n - bn * BLOCK);
            let mut acc = vec![0f32; m * rows];
            let mut partial = vec![0f32; m * rows];
            let mut buf = vec![0f32; ROWS * BLOCK];
            for bk in 0..kb {
                let c0 = bk * BLOCK;
                let cols = BLOCK.min(k - c0);
                // The vector code needs whole 8-column chunks (all but a ragged last K block).
                let simd = if cols % 8 == 0 { simd } else { Simd::Portable };
                for r0 in (0..rows).step_by(ROWS) {
                    let rg = ROWS.min(rows - r0);
                    for r in 0..rg {
                        let row = &w[(bn * BLOCK + r0 + r) * k..][..k];
                        simd.decode(&row[c0..c0 + cols], &mut buf[r * cols..(r + 1) * cols]);
                        // The next K block of this row, one block ahead: the 128 rows of a
                        // block are 128 interleaved streams, more than the hardware
                        // prefetchers track.
                        if let Some(next) = row.get(c0 + BLOCK..) {
                            prefetch(next);
                        }
                    }
                    simd.partials(&a[c0..], k, m, &buf[..rg * cols], rg, cols, &mut partial[..], rows, r0);
                }
                // Promotion: the block's partial sums enter the f32 accumulator with both scales.
                let s_w = sw[bn * kb + bk];
                for i in 0..m {
                    let scale = sa[bk * sa_stride + i] * s_w;
                    let (out, p) = (&mut acc[i * rows..(i + 1) * rows], &partial[i * rows..(i + 1) * rows]);
                    for (o, v) in out.iter_mut().zip(p) {
                        *o += v * scale;
                    }
                }
            }
            acc
        })
        .collect();
    let mut y = vec![bf16::ZERO; m * n];
    for (bn, acc) in blocks.iter().enumerate() {
        let rows = BLOCK.min(n - bn * BLOCK);
        for i in 0..m {
            for r in 0..rows {
                y[i * n + bn * BLOCK + r] = bf16::from_f32(acc[i * rows + r]);
            }
        }
    }
    y
}

/// Asks for the first 128 bytes of `bytes` in cache (a hint; no-op off x86-64).
#[inline(always)]
fn prefetch(bytes: &[F8E4M3]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = bytes.as_ptr() as *const i8;
        // SAFETY: prefetching is a hint that never faults; the addresses are inside the row or
        // at most 64 bytes past it.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Which code the CPU runs (checked once per GEMM call).
#[derive(Clone, Copy)]
enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2F16c,
}

impl Simd {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let has = *HAS.get_or_init(|| {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            });
            if has {
                return Simd::Avx2F16c;
            }
        }
        Simd::Portable
    }

    /// `dst[i] = e4m3(src[i])` exactly; on the vector path times 2⁻⁸ (exact: the f16 that
    /// holds the code), which [`Simd::partials`] undoes. `src.len()` a multiple of 8 there.
    fn decode(self, src: &[F8E4M3], dst: &mut [f32]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has the features (Simd::detect).
            Simd::Avx2F16c => unsafe { x86::decode_scaled(src, dst) },
            Simd::Portable => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = e4m3_to_f32(s);
                }
            }
        }
    }

    /// `out[t * ldo + r0 + r] = Σ_c a[t * lda + c] · w[r][c]` for all tokens `t < m` and the
    /// `rows` weight rows that [`Simd::decode`] put in `tile` (`cols` a multiple of 8 on the
    /// vector path, whose 2⁻⁸ factor is multiplied out of each sum: exact, no product of two
    /// e4m3 values is small enough to reach f32's subnormal range).
    #[allow(clippy::too_many_arguments)]
    fn partials(
        self,
        a: &[f32],
        lda: usize,
        m: usize,
        tile: &[f32],
        rows: usize,
        cols: usize,
        out: &mut [f32],
        ldo: usize,
        r0: usize,
    ) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has the features (Simd::detect); every index is bounds-checked
            // by the callee's slicing before the raw loads.
            Simd::Avx2F16c => unsafe { x86::partials(a, lda, m, tile, rows, cols, out, ldo, r0) },
            Simd::Portable => portable_partials(a, lda, m, tile, rows, cols, out, ldo, r0),
        }
    }
}

/// One (token, weight row) dot product in the contract's order: 8 lanes accumulated over the
/// 8-wide chunks (multiply, then add), the lanes summed in order, then the tail columns.
#[allow(clippy::too_many_arguments)]
fn portable_partials(
    a: &[f32],
    lda: usize,
    m: usize,
    tile: &[f32],
    rows: usize,
    cols: usize,
    out: &mut [f32],
    ldo: usize,
    r0: usize,
) {
    let full = cols / 8 * 8;
    for t in 0..m {
        let at = &a[t * lda..][..cols];
        for r in 0..rows {
            let b = &tile[r * cols..(r + 1) * cols];
            let mut lanes = [0f32; 8];
            for c in (0..full).step_by(8) {
                let (ac, bc): (&[f32; 8], &[f32; 8]) =
                    (at[c..c + 8].try_into().expect("8"), b[c..c + 8].try_into().expect("8"));
                for l in 0..8 {
                    lanes[l] += ac[l] * bc[l];
                }
            }
            let mut sum = lanes[1..].iter().fold(lanes[0], |s, &l| s + l);
            for c in full..cols {
                sum += at[c] * b[c];
            }
            out[t * ldo + r0 + r] = sum;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::F8E4M3;
    use std::arch::x86_64::*;

    /// 16 e4m3 (fn) bytes → 16 f32 × 2⁻⁸, exactly: `s eeee mmm` becomes the f16
    /// `s 0eeee mmm0000000` (the same value × 2⁻⁸, subnormals included), converted by F16C;
    /// the NaN codes (`s 1111 111`) become f16 NaNs.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode16_scaled(p: *const u8, dst: *mut f32) {
        let x = _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i));
        let mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7f));
        let sign = _mm256_slli_epi16::<8>(_mm256_and_si256(x, _mm256_set1_epi16(0x80)));
        let nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7e00));
        let h = _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi16::<7>(mag)), nan);
        _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
        _mm256_storeu_ps(dst.add(8), _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h)));
    }

    /// `dst[i] = e4m3(src[i]) · 2⁻⁸` (exact).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn decode_scaled(src: &[F8E4M3], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let full = n / 16 * 16;
        // F8E4M3 is a one-byte transparent wrapper of its bit pattern.
        let bytes = src.as_ptr() as *const u8;
        for c in (0..full).step_by(16) {
            decode16_scaled(bytes.add(c), dst.as_mut_ptr().add(c));
        }
        for c in full..n {
            dst[c] = super::e4m3_to_f32(src[c]) * (1.0 / 256.0);
        }
    }

    /// A `G` tokens × `R` rows register block over `cols` (a multiple of 8) columns of rows
    /// decoded by `decode_scaled`, in the portable order (no FMA: a product is rounded before
    /// it is added); the sums come out unscaled.
    #[inline(always)]
    unsafe fn block<const G: usize, const R: usize>(
        a: [*const f32; G],
        b: [*const f32; R],
        cols: usize,
    ) -> [[f32; R]; G] {
        let mut acc = [[_mm256_setzero_ps(); R]; G];
        let mut c = 0;
        while c < cols {
            let bv: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(b[r].add(c)));
            for t in 0..G {
                let av = _mm256_loadu_ps(a[t].add(c));
                for r in 0..R {
                    acc[t][r] = _mm256_add_ps(acc[t][r], _mm256_mul_ps(av, bv[r]));
                }
            }
            c += 8;
        }
        // Every accumulator's lanes summed in lane order at once (G·R <= 8), then the
        // decode's 2⁻⁸ undone.
        let mut v = [_mm256_setzero_ps(); 8];
        for t in 0..G {
            for r in 0..R {
                v[t * R + r] = acc[t][r];
            }
        }
        let mut sums = [0f32; 8];
        _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_mul_ps(lane_sums(v), _mm256_set1_ps(256.0)));
        std::array::from_fn(|t| std::array::from_fn(|r| sums[t * R + r]))
    }

    /// Lane `j` of the result = `((v[j][0] + v[j][1]) + v[j][2]) + … + v[j][7]`: an 8 × 8
    /// transpose, then seven vector adds in lane order (the portable path's order).
    #[inline(always)]
    unsafe fn lane_sums(v: [__m256; 8]) -> __m256 {
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (x, y) = (v[2 * (i / 2)], v[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(x, y)
            } else {
                _mm256_unpackhi_ps(x, y)
            }
        });
        // u[l] holds lanes l and l + 4 of rows 0-3 (u[0..4]) or rows 4-7 (u[4..8]).
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        // Column l (lane l of every row): l < 4 from the low 128-bit halves, else the high ones.
        let col = |l: usize| {
            let (lo, hi) = (u[l % 4], u[l % 4 + 4]);
            if l < 4 {
                _mm256_permute2f128_ps::<0x20>(lo, hi)
            } else {
                _mm256_permute2f128_ps::<0x31>(lo, hi)
            }
        };
        let mut s = col(0);
        for l in 1..8 {
            s = _mm256_add_ps(s, col(l));
        }
        s
    }

    /// Tokens `t0 .. t0 + G` against rows `rr .. rr + R` of the tile, into `out`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run<const G: usize, const R: usize>(
        a: &[f32],
        lda: usize,
        t0: usize,
        tile: &[f32],
        rr: usize,
        cols: usize,
        out: &mut [f32],
        ldo: usize,
        r0: usize,
    ) {
        // Bounds checked here, once: the raw loads stay inside these slices.
        let ap: [*const f32; G] = std::array::from_fn(|t| a[(t0 + t) * lda..][..cols].as_ptr());
        let bp: [*const f32; R] = std::array::from_fn(|r| tile[(rr + r) * cols..][..cols].as_ptr());
        let v = block::<G, R>(ap, bp, cols);
        for t in 0..G {
            for r in 0..R {
                out[(t0 + t) * ldo + r0 + rr + r] = v[t][r];
            }
        }
    }

    /// Tokens `t0 .. t0 + G` against every row of the tile: 8 rows per block for one token,
    /// 4 for two, 2 for 3-4, single rows last. Each accumulator is a chain of dependent adds
    /// (one per 8-column chunk, in the contract's order), so the block must hold enough of them
    /// to cover the add latency (6-8), and at most 16 vector registers in all.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tokens<const G: usize>(
        a: &[f32],
        lda: usize,
        t0: usize,
        tile: &[f32],
        rows: usize,
        cols: usize,
        out: &mut [f32],
        ldo: usize,
        r0: usize,
    ) {
        let mut r = 0;
        if G == 1 {
            while r + 8 <= rows {
                run::<G, 8>(a, lda, t0, tile, r, cols, out, ldo, r0);
                r += 8;
            }
        }
        if G <= 2 {
            while r + 4 <= rows {
                run::<G, 4>(a, lda, t0, tile, r, cols, out, ldo, r0);
                r += 4;
            }
        } else {
            while r + 2 <= rows {
                run::<G, 2>(a, lda, t0, tile, r, cols, out, ldo, r0);
                r += 2;
            }
        }
        while r < rows {
            run::<G, 1>(a, lda, t0, tile, r, cols, out, ldo, r0);
            r += 1;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn partials(
        a: &[f32],
        lda: usize,
        m: usize,
        tile: &[f32],
        rows: usize,
        cols: usize,
        out: &mut [f32],
        ldo: usize,
        r0: usize,
    ) {
        let mut t = 0;
        while t + 4 <= m {
            tokens::<4>(a, lda, t, tile, rows, cols, out, ldo, r0);
            t += 4;
        }
        match m - t {
            3 => tokens::<3>(a, lda, t, tile, rows, cols, out, ldo, r0),
            2 => tokens::<2>(a, lda, t, tile, rows, cols, out, ldo, r0),
            1 => tokens::<1>(a, lda, t, tile, rows, cols, out, ldo, r0),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every e4m3 code through the decoder equals the lookup table (bit for bit, NaNs as NaNs;
    /// the vector path's values × 2⁸), at every position of a 16-value chunk and in the tail.
    #[test]
    fn vector_decode_equals_the_table() {
        let simd = Simd::detect();
        let unscale = if matches!(simd, Simd::Portable) { 1.0 } else { 256.0 };
        let codes: Vec<F8E4M3> = (0..=255u8).cycle().take(256 * 3 + 5).map(F8E4M3::from_bits).collect();
        let mut got = vec![0f32; codes.len()];
        simd.decode(&codes, &mut got);
        for (i, (&c, &g)) in codes.iter().zip(&got).enumerate() {
            let (want, g) = (e4m3_to_f32(c), g * unscale);
            assert!(
                (want.is_nan() && g.is_nan()) || want.to_bits() == g.to_bits(),
                "code {:#04x} at {i}: {g} ({:#010x}) vs table {want} ({:#010x})",
                c.to_bits(),
                g.to_bits(),
                want.to_bits()
            );
        }
    }

    /// The vector partial sums (rows decoded by the vector decoder) equal the portable ones
    /// (table-decoded rows) bit for bit, for every token-group and row-group remainder, on
    /// e4m3 activations of very different magnitudes.
    #[test]
    fn vector_partials_equal_portable() {
        let mut rng = crate::testing::Rng::new(3);
        let simd = Simd::detect();
        let e4m3 = |v: f32| crate::format::f32_to_e4m3(v);
        for (m, rows, cols) in
            [(1, 8, 128), (1, 11, 128), (2, 8, 128), (3, 3, 128), (4, 2, 64), (5, 1, 16), (7, 8, 128), (9, 5, 144)]
        {
            let lda = cols + 8;
            let a: Vec<f32> =
                (0..m * lda).map(|i| e4m3_to_f32(e4m3(rng.normal() * 2f32.powi((i % 11) as i32 - 5)))).collect();
            let w: Vec<F8E4M3> = (0..rows * cols).map(|_| e4m3(rng.normal() * 100.0)).collect();
            let (mut exact, mut scaled) = (vec![0f32; rows * cols], vec![0f32; rows * cols]);
            Simd::Portable.decode(&w, &mut exact);
            simd.decode(&w, &mut scaled);
            let (ldo, r0) = (rows + 3, 2);
            let mut want = vec![f32::NAN; m * ldo];
            portable_partials(&a, lda, m, &exact, rows, cols, &mut want, ldo, r0);
            let mut got = vec![f32::NAN; m * ldo];
            simd.partials(&a, lda, m, &scaled, rows, cols, &mut got, ldo, r0);
            for t in 0..m {
                for r in 0..rows {
                    let i = t * ldo + r0 + r;
                    assert_eq!(got[i].to_bits(), want[i].to_bits(), "m={m} rows={rows} cols={cols}: token {t} row {r}");
                }
            }
        }
    }
}
