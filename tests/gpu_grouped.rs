//! The grouped blocked-FP8 GEMMs of mixture-of-experts layers on the GPU against the same ops
//! on the CPU, which `tests/grouped.rs` checks against the per-expert dequantized reference:
//! both layouts on random codes with log-spaced scales, ragged counts at the dense schedules'
//! M boundaries (0, 1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129 rows per expert), Qwen3-30B-A3B's
//! expert shapes and K off multiples of 128, outputs poisoned; rows past the counts zero; the
//! MoE layer within the GEMMs' rounding of the CPU layer and the same bits over 100 calls; bad
//! counts refused on the per-expert path and clamped to max_m by the grouped kernel.
//!
//! Shapes with `N % 128 == 0` run the grouped kernel (one launch for every expert, counts read
//! on the device; `src/ops/grouped_kernel.rs`), the others the dense GEMM per expert. The
//! `grouped_kernel_*` tests sweep the kernel's tiles (swap-AB tiles of 8, 16, 32, 64 tokens and
//! past 64 tokens per expert the 128 x 128 tokens-on-M tile, chosen by the most tokens an expert
//! may have) with ragged counts around the token tiles, a partial last K block, NaN codes and
//! scales past the counts, a NaN-poisoned output buffer and repeated calls; and the gated
//! variant (gate/up GEMM + SiLU·up + quantization) against the composed ops. The device
//! routing ops (`moe_route`, `moe_gather_quantize`, `moe_combine`) against their host paths, and
//! the MoE layer (which routes on the device at up to 128 tokens) against the CPU layer.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::{act_scale_m_stride, act_scales_view, num_blocks, F8E4M3};
use candle_fp8::models::Fp8MoeExperts;
use candle_fp8::ops::{
    fp8_grouped_matmul_contiguous, fp8_grouped_matmul_masked, fp8_grouped_swiglu_quantize_contiguous,
    fp8_grouped_swiglu_quantize_masked, masked_act_scales_view, moe_combine, moe_gather_quantize, moe_route,
    quantize_activation_masked, MoeRouting,
};
use candle_fp8::quantize_activation;
use candle_fp8::testing::reference::rel_err;
use candle_fp8::testing::Rng;
use candle_fp8::{AnyLinear, Fp8BlockLinear};

#[path = "common/grouped_operands.rs"]
mod grouped_operands;
use grouped_operands::{codes, weights};

const CPU: Device = Device::Cpu;

/// Rows per expert on both sides of the dense schedules' M boundaries.
const BOUNDARY_COUNTS: [usize; 12] = [0, 1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129];

/// Tokens per expert around the grouped kernel's token tiles (8 .. 64); each is clamped to the
/// case's max_m, and every case also has an expert of exactly max_m.
const KERNEL_COUNTS: [usize; 12] = [0, 1, 7, 8, 9, 31, 63, 64, 65, 127, 128, 129];

/// max_m on both sides of the grouped kernel's tile choice (8, 16, 32, 64 tokens; the 128-token
/// tokens-on-M tile beyond, several token tiles per expert past 128), and a large one.
const KERNEL_MAX_M: [usize; 11] = [1, 8, 9, 16, 17, 32, 33, 64, 65, 129, 200];

/// The MN-major scale view `[rows, kb]` of random log-spaced per-row scales.
fn mn_major(rng: &mut Rng, rows: usize, kb: usize) -> Result<Tensor> {
    let mpad = act_scale_m_stride(rows);
    let mut buf = vec![0f32; kb * mpad];
    for r in 0..rows {
        for g in 0..kb {
            buf[g * mpad + r] = rng.log_spaced(-6.0, 0.0);
        }
    }
    act_scales_view(Tensor::from_vec(buf, kb * mpad, &CPU)?, rows, kb)
}

/// `t` on `dev` with its layout (an MN-major scale view stays one).
fn on(t: &Tensor, dev: &Device) -> Result<Tensor> {
    t.to_device(dev)
}

fn f32_host(t: &Tensor) -> Result<Tensor> {
    t.to_device(&CPU)?.to_dtype(DType::F32)
}

/// Contiguous layout: each case's GPU output within the bf16 rounding of the CPU op's (both
/// are checked against the reference elsewhere), the rows past the counts zero.
#[test]
fn contiguous_matches_the_cpu_op() -> Result<()> {
    let dev = kernels_device_or_skip!("contiguous_matches_the_cpu_op");
    let mut rng = Rng::new(61);
    // (E, N, K, counts, padding rows): the boundaries on one expert each; Qwen3-30B-A3B's
    // gate|up (2 · 768 × 2048) and down (2048 × 768) with decode-like counts over 128 experts.
    let mut boundary = BOUNDARY_COUNTS.to_vec();
    boundary.rotate_left(5);
    let decode: Vec<usize> = (0..128).map(|x| [0, 0, 1, 0, 2, 0, 0, 1][x % 8]).collect();
    let cases: Vec<(usize, usize, usize, Vec<usize>, usize)> = vec![
        (12, 256, 256, boundary, 3),
        (12, 200, 300, BOUNDARY_COUNTS.to_vec(), 0),
        (128, 1536, 2048, decode.clone(), 0),
        (128, 2048, 768, decode, 5),
    ];
    for (e, n, k, counts, pad) in cases {
        let (w, sw) = weights(&mut rng, e, n, k)?;
        let rows = counts.iter().sum::<usize>() + pad;
        let kb = num_blocks(k);
        let qa = Tensor::from_vec(codes(&mut rng, rows * k), (rows, k), &CPU)?;
        let sa = mn_major(&mut rng, rows, kb)?;
        let want = fp8_grouped_matmul_contiguous(&qa, &sa, &w, &sw, &counts)?;
        gpu::poison(&dev, rows * n)?;
        let got =
            fp8_grouped_matmul_contiguous(&on(&qa, &dev)?, &on(&sa, &dev)?, &on(&w, &dev)?, &on(&sw, &dev)?, &counts)?;
        assert_eq!((got.dims(), got.dtype()), (&[rows, n][..], DType::BF16));
        let what = format!("contiguous E {e} N {n} K {k}");
        let used = rows - pad;
        if used > 0 {
            let err = rel_err(&f32_host(&got.narrow(0, 0, used)?)?, &f32_host(&want.narrow(0, 0, used)?)?)?;
            println!("{what}: relerr {err:.2e} against the CPU op");
            assert!(err <= 3e-3, "{what}: relerr {err} against the CPU op");
        }
        let tail = f32_host(&got.narrow(0, used, pad)?)?.abs()?.sum_all()?.to_scalar::<f32>()?;
        assert_eq!(tail, 0.0, "{what}: rows past the counts' sum must be zeros");
    }
    Ok(())
}

/// Masked operands of `counts` (each at most max_m) on the host: random codes and log-spaced
/// scales below the counts, NaN codes and NaN scales past them (never to reach an output).
/// Returns (qa, sa, counts as u32 [E]).
fn masked_operands(rng: &mut Rng, max_m: usize, k: usize, counts: &[usize]) -> Result<(Tensor, Tensor, Tensor)> {
    let e = counts.len();
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(max_m);
    let mut q = codes(rng, e * max_m * k);
    let mut buf = vec![f32::NAN; e * kb * mpad];
    for (x, &c) in counts.iter().enumerate() {
        for r in 0..c {
            for g in 0..kb {
                buf[(x * kb + g) * mpad + r] = rng.log_spaced(-6.0, 0.0);
            }
        }
        for v in &mut q[(x * max_m + c) * k..(x + 1) * max_m * k] {
            *v = F8E4M3::from_bits(0x7f);
        }
    }
    let qa = Tensor::from_vec(q, (e, max_m, k), &CPU)?;
    let sa = masked_act_scales_view(Tensor::from_vec(buf, e * kb * mpad, &CPU)?, e, max_m, kb)?;
    let c = Tensor::from_vec(counts.iter().map(|&c| c as u32).collect::<Vec<_>>(), e, &CPU)?;
    Ok((qa, sa, c))
}

/// The bits of a bf16 tensor (on any device).
fn bits(t: &Tensor) -> Result<Vec<u16>> {
    Ok(t.to_device(&CPU)?.flatten_all()?.to_vec1::<half::bf16>()?.iter().map(|v| v.to_bits()).collect())
}

/// A masked GPU output against the CPU op's: each expert's rows within 3e-3, the rows past its
/// count +0.0.
fn check_masked(what: &str, got: &Tensor, want: &Tensor, counts: &[usize], max_m: usize) -> Result<()> {
    let (got, want) = (f32_host(got)?, f32_host(want)?);
    for (x, &m) in counts.iter().enumerate() {
        let (g, r) = (got.get(x)?, want.get(x)?);
        if m > 0 {
            let err = rel_err(&g.narrow(0, 0, m)?, &r.narrow(0, 0, m)?)?;
            assert!(err <= 3e-3, "{what}, expert {x} ({m} rows): relerr {err} against the CPU op");
        }
        let rest: Vec<u32> =
            g.narrow(0, m, max_m - m)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect();
        assert!(rest.iter().all(|&b| b == 0), "{what}, expert {x}: rows past count {m} must be +0.0");
    }
    Ok(())
}

/// The grouped kernel, masked layout: every tile (max_m on both sides of 8, 16, 32, 64 and past
/// it: tokens on M), counts ragged around the tiles (0, 1, 7, 8, 9, 31, 63, 64, 65, 127, 128, 129,
/// max_m, clamped to max_m), K whole and with a partial last block, fresh random codes and scales
/// per case, NaN rows past the counts, a NaN-poisoned output: within 3e-3 of the CPU op per
/// expert, rows past the counts +0.0, and the same bits on a second and third call.
#[test]
fn grouped_kernel_masked_ragged_counts() -> Result<()> {
    let dev = kernels_device_or_skip!("grouped_kernel_masked_ragged_counts");
    let mut rng = Rng::new(65);
    for (i, &max_m) in KERNEL_MAX_M.iter().enumerate() {
        // N: one and three 128-row blocks per expert; K: whole blocks, and 400 = 3 · 128 + 16.
        let (n, k) = [(128, 256), (384, 400), (256, 128)][i % 3];
        let mut counts: Vec<usize> = KERNEL_COUNTS.iter().map(|&c| c.min(max_m)).collect();
        counts.push(max_m);
        let turn = i % counts.len();
        counts.rotate_left(turn);
        let e = counts.len();
        let (w, sw) = weights(&mut rng, e, n, k)?;
        let (qa, sa, c) = masked_operands(&mut rng, max_m, k, &counts)?;
        let want = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
        let (qa, sa, w, sw, c) = (on(&qa, &dev)?, on(&sa, &dev)?, on(&w, &dev)?, on(&sw, &dev)?, on(&c, &dev)?);
        gpu::poison(&dev, e * max_m * n)?;
        let got = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
        assert_eq!((got.dims(), got.dtype()), (&[e, max_m, n][..], DType::BF16));
        let what = format!("grouped kernel masked E {e} max_m {max_m} N {n} K {k}");
        check_masked(&what, &got, &want, &counts, max_m)?;
        let first = bits(&got)?;
        for call in 1..3 {
            gpu::poison(&dev, e * max_m * n)?;
            let again = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
            assert!(bits(&again)? == first, "{what}: call {call} gave other bits than the first");
        }
        println!("{what}: ok");
    }
    Ok(())
}

/// The grouped kernel, masked layout, at the decode shapes of Qwen3-30B-A3B (128 experts,
/// gate|up 2 · 768 × 2048 and down 2048 × 768) with 1-64 tokens per active expert and most
/// experts empty, and with every expert empty (the output all +0.0).
#[test]
fn grouped_kernel_masked_a3b_decode() -> Result<()> {
    let dev = kernels_device_or_skip!("grouped_kernel_masked_a3b_decode");
    let mut rng = Rng::new(66);
    let e = 128;
    for (n, k) in [(1536, 2048), (2048, 768)] {
        let (w, sw) = weights(&mut rng, e, n, k)?;
        let (wd, swd) = (on(&w, &dev)?, on(&sw, &dev)?);
        for (max_m, all_empty) in [(8, false), (16, false), (64, false), (64, true)] {
            let counts: Vec<usize> =
                (0..e).map(|x| if all_empty || x % 3 != 0 { 0 } else { [1, max_m, max_m / 2 + 1, 2][x % 4] }).collect();
            let (qa, sa, c) = masked_operands(&mut rng, max_m, k, &counts)?;
            let want = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
            gpu::poison(&dev, e * max_m * n)?;
            let got = fp8_grouped_matmul_masked(&on(&qa, &dev)?, &on(&sa, &dev)?, &wd, &swd, &on(&c, &dev)?)?;
            let what = format!("grouped kernel masked A3B max_m {max_m} N {n} K {k} all_empty {all_empty}");
            check_masked(&what, &got, &want, &counts, max_m)?;
            println!("{what}: ok");
        }
    }
    Ok(())
}

/// The grouped kernel, contiguous layout: experts of at most 8, 16, 32 and 64 tokens (swap-AB,
/// one tile each) and of up to 300 (tokens on M, tiles cut at each expert's end), Qwen3-30B-A3B's
/// gate|up at prefill sizes and its 128 experts at decode and prompt sizes (experts starting at
/// every row alignment), padding rows after the counts' sum, K with a partial last block, a
/// NaN-poisoned output: within 3e-3 of the CPU op, the padding rows +0.0, the same bits on a
/// second call.
#[test]
fn grouped_kernel_contiguous_ragged_counts() -> Result<()> {
    let dev = kernels_device_or_skip!("grouped_kernel_contiguous_ragged_counts");
    let mut rng = Rng::new(67);
    let cases: Vec<(usize, usize, Vec<usize>, usize)> = vec![
        (256, 256, vec![64, 0, 1, 33, 63, 9, 17, 0], 7),
        (256, 256, vec![300, 0, 1, 129, 64, 63, 65, 128, 127, 0], 3),
        (384, 400, vec![0, 8, 1, 7, 0, 3], 0),
        (128, 512, vec![16, 9, 0, 16], 2),
        (256, 400, vec![17, 32, 0, 31], 1),
        (128, 256, vec![0, 0, 0], 4),
        (1536, 2048, vec![300, 0, 128, 129, 1, 255, 0, 64, 65, 200, 127, 0, 3, 256, 0, 17], 5),
        // Qwen3-30B-A3B's 128 experts: decode-like counts (0-2, swap-AB) and a prompt's (0-22 and
        // one of 130: tokens on M), each expert starting at any row (the scale boxes start on the 16-byte
        // boundary below it).
        (2048, 768, (0..128).map(|x| [0, 0, 1, 0, 2, 0, 0, 1][x % 8]).collect(), 5),
        (1536, 2048, (0..128).map(|x| if x == 5 { 130 } else { (x * 37 + 11) % 23 }).collect(), 3),
    ];
    for (n, k, counts, pad) in cases {
        let e = counts.len();
        let (w, sw) = weights(&mut rng, e, n, k)?;
        let rows = counts.iter().sum::<usize>() + pad;
        let qa = Tensor::from_vec(codes(&mut rng, rows * k), (rows, k), &CPU)?;
        let sa = mn_major(&mut rng, rows, num_blocks(k))?;
        let want = fp8_grouped_matmul_contiguous(&qa, &sa, &w, &sw, &counts)?;
        let (qa, sa, w, sw) = (on(&qa, &dev)?, on(&sa, &dev)?, on(&w, &dev)?, on(&sw, &dev)?);
        gpu::poison(&dev, rows * n)?;
        let got = fp8_grouped_matmul_contiguous(&qa, &sa, &w, &sw, &counts)?;
        assert_eq!((got.dims(), got.dtype()), (&[rows, n][..], DType::BF16));
        let what = format!("grouped kernel contiguous E {e} N {n} K {k} counts {counts:?} pad {pad}");
        let used = rows - pad;
        if used > 0 {
            let err = rel_err(&f32_host(&got.narrow(0, 0, used)?)?, &f32_host(&want.narrow(0, 0, used)?)?)?;
            assert!(err <= 3e-3, "{what}: relerr {err} against the CPU op");
        }
        let tail: Vec<u32> = f32_host(&got.narrow(0, used, pad)?)?
            .flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert!(tail.iter().all(|&b| b == 0), "{what}: rows past the counts' sum must be +0.0");
        gpu::poison(&dev, rows * n)?;
        let again = fp8_grouped_matmul_contiguous(&qa, &sa, &w, &sw, &counts)?;
        assert!(bits(&again)? == bits(&got)?, "{what}: a second call gave other bits");
        println!("{what}: ok");
    }
    Ok(())
}

/// `(codes, scales)` of rows `r0 .. r0 + m` of a quantized `[rows, I]` operand: the e4m3 bits
/// and the `[m, kb]` scales' f32 bits (the scales as any view: MN-major or per expert).
fn quantized_rows(q: &Tensor, s: &Tensor, r0: usize, m: usize) -> Result<(Vec<u8>, Vec<u32>)> {
    let q = q.narrow(0, r0, m)?.to_device(&CPU)?.flatten_all()?.to_vec1::<F8E4M3>()?;
    let s = s.narrow(0, r0, m)?.to_device(&CPU)?.to_vec2::<f32>()?;
    Ok((q.iter().map(|v| v.to_bits()).collect(), s.iter().flatten().map(|v| v.to_bits()).collect()))
}

/// Rows `r0 .. r0 + m` of a quantized `[rows, I]` operand dequantized (f32 `[m, I]`).
fn dequantized_rows(q: &Tensor, s: &Tensor, r0: usize, m: usize) -> Result<Tensor> {
    let inter = q.dim(1)?;
    let codes = q.narrow(0, r0, m)?.to_device(&CPU)?.flatten_all()?.to_vec1::<F8E4M3>()?;
    let s = s.narrow(0, r0, m)?.to_device(&CPU)?.to_vec2::<f32>()?;
    let v: Vec<f32> =
        (0..m * inter).map(|i| candle_fp8::format::e4m3_to_f32(codes[i]) * s[i / inter][(i % inter) / 128]).collect();
    Tensor::from_vec(v, (m, inter), &CPU)
}

/// `silu(gate) · up` of a bf16 `[.., 2·I]` GEMM output, as the MLP computes it.
fn silu_mul(y: &Tensor) -> Result<Tensor> {
    let last = y.rank() - 1;
    let i = y.dim(last)? / 2;
    candle_nn::ops::silu(&y.narrow(last, 0, i)?)? * y.narrow(last, i, i)?
}

/// The gated grouped kernel, masked layout (gate/up GEMM + SiLU·up + the down GEMM's
/// quantization in one launch): on each row below its count, the same bits as the grouped GEMM,
/// candle's bf16 SiLU and product and the masked quantizer on the GPU, and within the
/// quantization's code step of those ops on the CPU; 16-token tiles over experts of 0 .. 40
/// tokens (several tiles), K with a partial last block, Qwen3-30B-A3B's gate|up at decode, NaN
/// rows past the counts.
#[test]
fn grouped_kernel_swiglu_masked_matches_the_composed_ops() -> Result<()> {
    let dev = kernels_device_or_skip!("grouped_kernel_swiglu_masked_matches_the_composed_ops");
    let mut rng = Rng::new(68);
    let a3b: Vec<usize> = (0..128).map(|x| [0, 0, 1, 0, 3, 0, 0, 8][x % 8]).collect();
    let cases: Vec<(usize, usize, usize, Vec<usize>)> = vec![
        (16, 128, 256, vec![0, 1, 15, 16, 7, 0]),
        (40, 256, 400, vec![17, 0, 40, 33, 1, 32, 16, 2, 39]),
        (8, 768, 2048, a3b),
    ];
    for (max_m, inter, k, counts) in cases {
        let e = counts.len();
        let (w, sw) = weights(&mut rng, e, 2 * inter, k)?;
        let (qa, sa, c) = masked_operands(&mut rng, max_m, k, &counts)?;
        let (qd, sd, wd, swd, cd) = (on(&qa, &dev)?, on(&sa, &dev)?, on(&w, &dev)?, on(&sw, &dev)?, on(&c, &dev)?);
        gpu::poison(&dev, e * max_m * inter)?;
        let (q, s) = fp8_grouped_swiglu_quantize_masked(&qd, &sd, &wd, &swd, &cd)?;
        assert_eq!(q.dims(), &[e, max_m, inter]);
        assert_eq!(s.dims(), &[e, max_m, inter / 128]);
        let y = fp8_grouped_matmul_masked(&qd, &sd, &wd, &swd, &cd)?;
        let (q_gpu, s_gpu) = quantize_activation_masked(&silu_mul(&y)?)?;
        let y = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
        let (q_cpu, s_cpu) = quantize_activation_masked(&silu_mul(&y)?)?;
        let what = format!("gated grouped kernel masked E {e} max_m {max_m} I {inter} K {k}");
        for (x, &m) in counts.iter().enumerate().filter(|(_, &m)| m > 0) {
            let got = quantized_rows(&q.get(x)?, &s.get(x)?, 0, m)?;
            let composed = quantized_rows(&q_gpu.get(x)?, &s_gpu.get(x)?, 0, m)?;
            assert!(got.1 == composed.1, "{what}, expert {x} ({m} rows): scales differ from the composed GPU ops");
            assert!(got.0 == composed.0, "{what}, expert {x} ({m} rows): codes differ from the composed GPU ops");
            let err = rel_err(
                &dequantized_rows(&q.get(x)?, &s.get(x)?, 0, m)?,
                &dequantized_rows(&q_cpu.get(x)?, &s_cpu.get(x)?, 0, m)?,
            )?;
            // GPU and CPU round some SiLU·up values to neighbouring bf16 values, and the codes of
            // those to neighbouring e4m3 codes (a 2⁻³ step): on an expert of a few rows that is
            // up to 1.9e-2 (H100); the GPU bits are pinned by the two asserts above.
            assert!(err <= 3e-2, "{what}, expert {x} ({m} rows): relerr {err} against the composed CPU ops");
        }
        println!("{what}: ok");
    }
    Ok(())
}

/// The gated grouped kernel, contiguous layout (experts of at most 64 tokens): each row below
/// the counts' sum the same bits as the grouped GEMM, candle's bf16 SiLU and product and the
/// quantizer on the GPU; a second call the same bits there.
#[test]
fn grouped_kernel_swiglu_contiguous_matches_the_composed_ops() -> Result<()> {
    let dev = kernels_device_or_skip!("grouped_kernel_swiglu_contiguous_matches_the_composed_ops");
    let mut rng = Rng::new(69);
    for (inter, k, counts, pad) in [
        (256, 256, vec![5, 0, 16, 17, 64, 1], 3),
        (128, 400, vec![0, 2, 0, 33], 0),
        (768, 2048, vec![1, 0, 0, 2, 1], 1),
    ] {
        let e = counts.len();
        let (w, sw) = weights(&mut rng, e, 2 * inter, k)?;
        let rows = counts.iter().sum::<usize>() + pad;
        let qa = on(&Tensor::from_vec(codes(&mut rng, rows * k), (rows, k), &CPU)?, &dev)?;
        let sa = on(&mn_major(&mut rng, rows, num_blocks(k))?, &dev)?;
        let (w, sw) = (on(&w, &dev)?, on(&sw, &dev)?);
        gpu::poison(&dev, rows * inter)?;
        let (q, s) = fp8_grouped_swiglu_quantize_contiguous(&qa, &sa, &w, &sw, &counts)?;
        assert_eq!((q.dims(), s.dims()), (&[rows, inter][..], &[rows, inter / 128][..]));
        let y = fp8_grouped_matmul_contiguous(&qa, &sa, &w, &sw, &counts)?;
        let (q2, s2) = quantize_activation(&silu_mul(&y)?)?;
        let used = rows - pad;
        let what = format!("gated grouped kernel contiguous I {inter} K {k} counts {counts:?}");
        let got = quantized_rows(&q, &s, 0, used)?;
        assert!(got == quantized_rows(&q2, &s2, 0, used)?, "{what}: differs from the composed GPU ops");
        let (q3, s3) = fp8_grouped_swiglu_quantize_contiguous(&qa, &sa, &w, &sw, &counts)?;
        assert!(got == quantized_rows(&q3, &s3, 0, used)?, "{what}: a second call gave other bits");
        println!("{what}: ok");
    }
    Ok(())
}

/// Masked layout: the counts on the device, NaN codes and scales past each count (never read),
/// the rows past each count +0.0, the rest within the CPU op's bf16 rounding.
#[test]
fn masked_matches_the_cpu_op() -> Result<()> {
    let dev = kernels_device_or_skip!("masked_matches_the_cpu_op");
    let mut rng = Rng::new(62);
    for (e, max_m, n, k) in [(12, 129, 256, 256), (128, 4, 1536, 2048), (128, 4, 2048, 768), (16, 33, 200, 300)] {
        let counts: Vec<usize> = (0..e).map(|x| BOUNDARY_COUNTS[x % 12].min(max_m)).collect();
        let (w, sw) = weights(&mut rng, e, n, k)?;
        let kb = num_blocks(k);
        let mpad = act_scale_m_stride(max_m);
        let mut q = codes(&mut rng, e * max_m * k);
        let mut buf = vec![f32::NAN; e * kb * mpad];
        for (x, &c) in counts.iter().enumerate() {
            for r in 0..c {
                for g in 0..kb {
                    buf[(x * kb + g) * mpad + r] = rng.log_spaced(-6.0, 0.0);
                }
            }
            for v in &mut q[(x * max_m + c) * k..(x + 1) * max_m * k] {
                *v = F8E4M3::from_bits(0x7f);
            }
        }
        let qa = Tensor::from_vec(q, (e, max_m, k), &CPU)?;
        let sa = masked_act_scales_view(Tensor::from_vec(buf, e * kb * mpad, &CPU)?, e, max_m, kb)?;
        let c = Tensor::from_vec(counts.iter().map(|&c| c as u32).collect::<Vec<_>>(), e, &CPU)?;
        let want = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &c)?;
        gpu::poison(&dev, e * max_m * n)?;
        let got = fp8_grouped_matmul_masked(
            &on(&qa, &dev)?,
            &on(&sa, &dev)?,
            &on(&w, &dev)?,
            &on(&sw, &dev)?,
            &on(&c, &dev)?,
        )?;
        assert_eq!((got.dims(), got.dtype()), (&[e, max_m, n][..], DType::BF16));
        check_masked(&format!("masked E {e} max_m {max_m} N {n} K {k}"), &got, &want, &counts, max_m)?;
    }
    Ok(())
}

/// A block of 64 FP8 experts (width 256 over hidden 512, top-8) on the GPU against the same
/// block on the CPU, both in bf16: the routing is the same (f32 on both), each GEMM within its
/// 3e-3, and where the two gate/up outputs round to different bf16 values the down GEMM's input
/// may take the neighbouring e4m3 code (one step, 2⁻³ relative, on a few percent of the
/// elements), so the block agrees within 3e-2 (every token within 0.1); 100 GPU calls give the
/// same bits.
#[test]
fn moe_layer_matches_the_cpu_layer_and_repeats() -> Result<()> {
    let dev = kernels_device_or_skip!("moe_layer_matches_the_cpu_layer_and_repeats");
    let mut rng = Rng::new(63);
    let (e, h, i, top_k, tokens) = (64, 512, 256, 8, 19);
    let linear = |rng: &mut Rng, n: usize, k: usize, d: &Device| -> Result<AnyLinear> {
        let w = Tensor::from_vec(rng.normal_vec(n * k, 0.05), (n, k), &CPU)?;
        Ok(AnyLinear::Fp8(Fp8BlockLinear::from_weight(&w, None)?.to_device(d)?))
    };
    let router = Tensor::from_vec(rng.normal_vec(e * h, 0.5), (e, h), &CPU)?;
    let seeds: Vec<u64> = (0..e as u64).collect();
    let build = |d: &Device| -> Result<Fp8MoeExperts> {
        let experts = seeds
            .iter()
            .map(|&s| {
                let mut r = Rng::new(1000 + s);
                Ok([linear(&mut r, i, h, d)?, linear(&mut r, i, h, d)?, linear(&mut r, h, i, d)?])
            })
            .collect::<Result<Vec<_>>>()?;
        Fp8MoeExperts::from_experts(&router.to_device(d)?, experts, top_k, true)
    };
    let (cpu, gpu_block) = (build(&CPU)?, build(&dev)?);
    assert!(gpu_block.is_grouped(), "the GPU block runs its experts grouped");
    // 1 and 100 tokens (decode and a short prompt) once, 19 tokens with the repeat below.
    for t in [1, 100] {
        let x = Tensor::from_vec(rng.normal_vec(t * h, 1.0), (t, h), &CPU)?.to_dtype(DType::BF16)?;
        let err = rel_err(&f32_host(&gpu_block.forward(&x.to_device(&dev)?)?)?, &f32_host(&cpu.forward(&x)?)?)?;
        println!("MoE block, {t} tokens, GPU vs CPU (bf16): relerr {err:.2e}");
        assert!(err <= 3e-2, "MoE block, {t} tokens: relerr {err} against the CPU block");
    }
    let x = Tensor::from_vec(rng.normal_vec(tokens * h, 1.0), (tokens, h), &CPU)?.to_dtype(DType::BF16)?;
    let want = f32_host(&cpu.forward(&x)?)?;
    let got = gpu_block.forward(&x.to_device(&dev)?)?;
    let got_host = f32_host(&got)?;
    let err = rel_err(&got_host, &want)?;
    // Per token: a wrong expert (or weight, or scale) in one token's top 8 moves that token's row
    // by its routing weight's share, which the block's mean can hide.
    let worst_token = (0..tokens)
        .map(|t| rel_err(&got_host.get(t)?, &want.get(t)?))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .fold(0f64, f64::max);
    println!("MoE block, GPU vs CPU (bf16): relerr {err:.2e}, worst token {worst_token:.2e}");
    // Two FP8 chains (quantize → gate|up → SiLU·up → quantize → down) whose f32 sums differ in
    // order: the second quantization rounds some values to the neighbouring e4m3 code (a 1/16
    // step), so GPU and CPU differ by more than one GEMM's 2e-3 (1.8e-2 measured on the H100).
    assert!(err <= 3e-2, "MoE block: relerr {err} against the CPU block");
    assert!(worst_token <= 0.1, "MoE block: a token's relerr is {worst_token} against the CPU block");
    let first: Vec<u32> = f32_host(&got)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect();
    let xd = x.to_device(&dev)?;
    for call in 0..100 {
        let again = f32_host(&gpu_block.forward(&xd)?)?.flatten_all()?.to_vec1::<f32>()?;
        assert!(again.iter().map(|v| v.to_bits()).eq(first.iter().copied()), "call {call}: other bits");
    }
    Ok(())
}

/// The device routing against the host routing on the same logits: Qwen3-30B-A3B's 128
/// experts, top-8, 1 / 7 / 64 / 128 tokens, renormalised or not, all experts or a share of them
/// with a max_m that cuts the counts: the same experts, slots and counts, weights within 1e-6;
/// gather + quantize and combine the host's bits; a second call the same bits.
#[test]
fn device_routing_matches_the_host_routing() -> Result<()> {
    let dev = kernels_device_or_skip!("device_routing_matches_the_host_routing");
    let mut rng = Rng::new(71);
    let (e, top_k, h) = (128, 8, 264);
    for (m, norm, local, max_m) in
        [(1, true, 0..e, 1), (7, false, 0..e, 7), (64, true, 0..e, 64), (128, true, 0..e, 128), (64, true, 32..96, 3)]
    {
        let what = format!("{m} tokens, norm {norm}, experts {local:?}, max_m {max_m}");
        let logits = Tensor::from_vec(rng.normal_vec(m * e, 2.0), (m, e), &CPU)?;
        let want = moe_route(&logits, top_k, norm, local.clone(), max_m)?;
        let got = moe_route(&logits.to_device(&dev)?, top_k, norm, local.clone(), max_m)?;
        let u32s = |t: &Tensor| -> Result<Vec<u32>> { t.to_device(&CPU)?.flatten_all()?.to_vec1::<u32>() };
        assert_eq!(u32s(&got.ids)?, u32s(&want.ids)?, "{what}: experts");
        assert_eq!(u32s(&got.slots)?, u32s(&want.slots)?, "{what}: slots");
        assert_eq!(u32s(&got.counts)?, u32s(&want.counts)?, "{what}: counts");
        let dw = (got.weights.to_device(&CPU)? - &want.weights)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(dw <= 1e-6, "{what}: weights differ by {dw}");
        // Gather + quantize and combine on the device routing, against the host ops on it.
        let host = MoeRouting {
            ids: got.ids.to_device(&CPU)?,
            weights: got.weights.to_device(&CPU)?,
            slots: got.slots.to_device(&CPU)?,
            counts: got.counts.to_device(&CPU)?,
            ..got.clone()
        };
        let x = Tensor::from_vec(rng.normal_vec(m * h, 2.0), (m, h), &CPU)?.to_dtype(DType::BF16)?;
        let (qa, sa) = moe_gather_quantize(&x.to_device(&dev)?, &got)?;
        let (qh, sh) = moe_gather_quantize(&x, &host)?;
        let codes = |t: &Tensor| -> Result<Vec<u8>> {
            Ok(t.to_device(&CPU)?.flatten_all()?.to_vec1::<F8E4M3>()?.iter().map(|v| v.to_bits()).collect())
        };
        let scales = |t: &Tensor| -> Result<Vec<u32>> {
            Ok(t.to_device(&CPU)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect())
        };
        assert!(codes(&qa)? == codes(&qh)?, "{what}: gathered codes differ");
        assert!(scales(&sa)? == scales(&sh)?, "{what}: gathered scales differ");
        let y = Tensor::from_vec(rng.normal_vec(local.len() * max_m * h, 1.0), (local.len(), max_m, h), &CPU)?
            .to_dtype(DType::BF16)?;
        for dt in [DType::F32, DType::BF16] {
            let a = moe_combine(&y.to_device(&dev)?, &got, dt)?;
            let b = moe_combine(&y, &host, dt)?;
            assert!(scales(&a.to_dtype(DType::F32)?)? == scales(&b.to_dtype(DType::F32)?)?, "{what}: combine {dt:?}");
        }
        let again = moe_route(&logits.to_device(&dev)?, top_k, norm, local.clone(), max_m)?;
        assert!(scales(&again.weights)? == scales(&got.weights)?, "{what}: a second call gave other weights");
        println!("{what}: device routing = host routing (weights within {dw:.1e})");
    }
    Ok(())
}

/// Bad counts on the device path: a count past `max_m` is refused by the per-expert path (N not
/// a multiple of 128: it reads the counts on the host), naming the argument and the value, and
/// taken as `max_m` by the grouped kernel (N % 128 == 0: it never reads them on the host), whose
/// output then equals the CPU op's with that count at max_m (so this also shows the masked op
/// ran the kernel); a count vector of the wrong length and counts summing past the rows are
/// refused on both.
#[test]
fn bad_counts_are_refused_on_the_gpu() -> Result<()> {
    let dev = kernels_device_or_skip!("bad_counts_are_refused_on_the_gpu");
    let mut rng = Rng::new(64);
    let (e, max_m, k) = (4, 8, 256);
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(max_m);
    let qa_h = Tensor::from_vec(codes(&mut rng, e * max_m * k), (e, max_m, k), &CPU)?;
    let qa = qa_h.to_device(&dev)?;
    let buf: Vec<f32> = (0..e * kb * mpad).map(|_| rng.log_spaced(-6.0, 0.0)).collect();
    let sa_h = masked_act_scales_view(Tensor::from_vec(buf, e * kb * mpad, &CPU)?, e, max_m, kb)?;
    let sa = sa_h.to_device(&dev)?;
    let counts = |c: &[u32]| Tensor::new(c, &dev);
    // The per-expert path (N = 240: a fast-path N, not whole 128-row blocks) refuses.
    let (w, sw) = weights(&mut rng, e, 240, k)?;
    let (w, sw) = (w.to_device(&dev)?, sw.to_device(&dev)?);
    let err = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &counts(&[1, 9, 0, 2])?).unwrap_err().to_string();
    assert!(err.contains("counts[1]") && err.contains('9') && err.contains("max_m"), "{err}");
    // The grouped kernel clamps.
    let (w_h, sw_h) = weights(&mut rng, e, 256, k)?;
    let (w, sw) = (w_h.to_device(&dev)?, sw_h.to_device(&dev)?);
    let got = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &counts(&[1, 9, 0, 2])?)?;
    let want = fp8_grouped_matmul_masked(&qa_h, &sa_h, &w_h, &sw_h, &Tensor::new(&[1u32, 8, 0, 2], &CPU)?)?;
    check_masked("grouped kernel, count 9 > max_m 8", &got, &want, &[1, 8, 0, 2], max_m)?;
    let err = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &counts(&[1, 2, 3])?).unwrap_err().to_string();
    assert!(err.contains("counts") && err.contains('3') && err.contains('4'), "{err}");
    let rows = Tensor::from_vec(codes(&mut rng, 6 * k), (6, k), &CPU)?.to_device(&dev)?;
    let sa2 = mn_major(&mut rng, 6, kb)?.to_device(&dev)?;
    let err = fp8_grouped_matmul_contiguous(&rows, &sa2, &w, &sw, &[3, 1, 4, 0]).unwrap_err().to_string();
    assert!(err.contains("counts") && err.contains('8') && err.contains('6'), "{err}");
    Ok(())
}
