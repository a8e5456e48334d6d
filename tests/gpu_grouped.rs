//! The grouped blocked-FP8 GEMMs of mixture-of-experts layers on the GPU against the same ops
//! on the CPU, which `tests/grouped.rs` checks against the per-expert dequantized reference:
//! both layouts on random codes with log-spaced scales, ragged counts at the dense schedules'
//! M boundaries (0, 1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129 rows per expert), Qwen3-30B-A3B's
//! expert shapes and K off multiples of 128, outputs poisoned; rows past the counts zero; the
//! MoE layer within the GEMMs' rounding of the CPU layer and the same bits over 100 calls; bad
//! counts refused on the device path too.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::{act_scale_m_stride, act_scales_view, num_blocks, F8E4M3};
use candle_fp8::models::Fp8MoeExperts;
use candle_fp8::ops::{fp8_grouped_matmul_contiguous, fp8_grouped_matmul_masked, masked_act_scales_view};
use candle_fp8::testing::reference::rel_err;
use candle_fp8::testing::Rng;
use candle_fp8::{AnyLinear, Fp8BlockLinear};

#[path = "common/grouped_operands.rs"]
mod grouped_operands;
use grouped_operands::{codes, weights};

const CPU: Device = Device::Cpu;

/// Rows per expert on both sides of the dense schedules' M boundaries.
const BOUNDARY_COUNTS: [usize; 12] = [0, 1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129];

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
        let what = format!("masked E {e} max_m {max_m} N {n} K {k}");
        let (got, want) = (f32_host(&got)?, f32_host(&want)?);
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
    }
    Ok(())
}

/// A block of 64 FP8 experts (width 256 over hidden 512, top-8) on the GPU against the same
/// block on the CPU, both in bf16: the routing is the same (f32 on both), each GEMM within its
/// 3e-3, and where the two gate/up outputs round to different bf16 values the down GEMM's input
/// may take the neighbouring e4m3 code (one step, 2⁻³ relative, on a few percent of the
/// elements), so the block agrees within 1.5e-2; 100 GPU calls give the same bits.
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

/// Counts past `max_m` and a count vector of the wrong length are refused on the device path,
/// naming the argument and the value.
#[test]
fn bad_counts_are_refused_on_the_gpu() -> Result<()> {
    let dev = kernels_device_or_skip!("bad_counts_are_refused_on_the_gpu");
    let mut rng = Rng::new(64);
    let (e, max_m, n, k) = (4, 8, 256, 256);
    let (w, sw) = weights(&mut rng, e, n, k)?;
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(max_m);
    let qa = Tensor::from_vec(codes(&mut rng, e * max_m * k), (e, max_m, k), &CPU)?.to_device(&dev)?;
    let buf: Vec<f32> = (0..e * kb * mpad).map(|_| rng.log_spaced(-6.0, 0.0)).collect();
    let sa = masked_act_scales_view(Tensor::from_vec(buf, e * kb * mpad, &CPU)?, e, max_m, kb)?.to_device(&dev)?;
    let (w, sw) = (w.to_device(&dev)?, sw.to_device(&dev)?);
    let counts = |c: &[u32]| Tensor::new(c, &dev);
    let err = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &counts(&[1, 9, 0, 2])?).unwrap_err().to_string();
    assert!(err.contains("counts[1]") && err.contains('9') && err.contains("max_m"), "{err}");
    let err = fp8_grouped_matmul_masked(&qa, &sa, &w, &sw, &counts(&[1, 2, 3])?).unwrap_err().to_string();
    assert!(err.contains("counts") && err.contains('3') && err.contains('4'), "{err}");
    let rows = Tensor::from_vec(codes(&mut rng, 6 * k), (6, k), &CPU)?.to_device(&dev)?;
    let sa2 = mn_major(&mut rng, 6, kb)?.to_device(&dev)?;
    let err = fp8_grouped_matmul_contiguous(&rows, &sa2, &w, &sw, &[3, 1, 4, 0]).unwrap_err().to_string();
    assert!(err.contains("counts") && err.contains('8') && err.contains('6'), "{err}");
    Ok(())
}
