//! The CPU path against the exact blocked product (the naive f64 loop), judged by rounding
//! statistics with bounds derived from the f32 arithmetic (`fixtures::check_gemm_rounding`),
//! against the kernel's documented arithmetic bit for bit, and the f32 reference against the
//! naive loop; random data with log-spaced scales (docs/design.md). Each plausible kernel bug
//! (`fixtures::GemmMutant`) is shown to fail the check.

#[path = "common/fixtures.rs"]
mod fixtures;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::act_scale_m_stride;
use candle_fp8::ops::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::reference::{naive_matmul_f64, reference_matmul, rel_err, rel_err_slices};
use candle_fp8::testing::{random_operands, Rng};
use candle_fp8::Fp8BlockLinear;
use candle_fp8::{Backend, Fp8Options, Provider};
use fixtures::{bf16_rne, check_gemm_rounding, check_gemm_tensor, contract_gemm, GemmMutant, HostGemm};

const MS: [usize; 10] = [1, 2, 3, 7, 8, 9, 127, 128, 129, 300];

#[test]
fn reference_matches_naive_f64_loop() -> Result<()> {
    // N not a multiple of 128 (partial scale blocks), K both whole and with a partial last block.
    // The f32 reference's own error: f32 dequantization (one rounding per operand) and an f32
    // matmul; 1e-6 is ~20 u, far below what a wrong index or block would give.
    for (i, &m) in MS.iter().enumerate() {
        for (n, k) in [(200, 256), (130, 300)] {
            let op = random_operands(m, n, k, 100 + i as u64, &Device::Cpu)?;
            let y = reference_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
            let naive = naive_matmul_f64(&op.qa_host, &op.sa_host, &op.w_host, &op.sw_host, m, n, k);
            let y: Vec<f64> = y.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
            let e = rel_err_slices(&y, &naive);
            assert!(e < 1e-6, "m={m} n={n} k={k}: f32 reference vs f64 loop relerr {e}");
        }
    }
    Ok(())
}

/// Every output of the CPU op is the correctly rounded bf16 of the exact product, except where
/// the exact value lies within the f32 summation budget of a rounding boundary; errors stay
/// within ½ ulp + budget; no bias (bounds derived in `fixtures::check_gemm_rounding`).
#[test]
fn cpu_op_rounds_like_the_exact_product() -> Result<()> {
    let (mut off, mut amb, mut total, mut worst) = (0usize, 0usize, 0usize, 0f64);
    for (i, &m) in MS.iter().enumerate() {
        // Every shape for the small M (each token-group remainder of the kernel); the large M
        // (statistics volume: 226k of the 244k outputs) on the two ragged shapes only, to keep
        // the unoptimized test build quick.
        let shapes: &[(usize, usize)] =
            if m < 100 { &[(256, 512), (200, 384), (130, 300), (16, 128)] } else { &[(200, 384), (130, 300)] };
        for &(n, k) in shapes {
            let op = random_operands(m, n, k, 7 * i as u64 + n as u64, &Device::Cpu)?;
            let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
            assert_eq!(y.dtype(), DType::BF16);
            assert_eq!(y.dims(), &[m, n]);
            let r = check_gemm_tensor(&y, &HostGemm::from_operands(&op)?)
                .unwrap_or_else(|e| panic!("m={m} n={n} k={k}: {e}"));
            off += r.off_rounded;
            amb += r.ambiguous;
            total += r.outputs;
            worst = worst.max(r.max_ulp);
        }
    }
    println!(
        "{total} outputs: {off} off the correctly rounded bf16 ({:.3} %), {amb} within the f32 budget of a \
         boundary ({:.3} %), max error {worst:.3} ulp",
        100.0 * off as f64 / total as f64,
        100.0 * amb as f64 / total as f64
    );
    Ok(())
}

/// The kernel computes exactly the documented arithmetic (src/cpu/gemm.rs: the order of the
/// f32 additions and the promotion are part of its contract, "the result does not depend on the
/// CPU it runs on"): bit for bit against `fixtures::contract_gemm`, written from that text.
#[test]
fn cpu_op_equals_the_documented_arithmetic_bit_for_bit() -> Result<()> {
    // M covers every token-group remainder of the register blocks (m % 4 = 0..3, groups of 4
    // followed by 1-3), N every row-group remainder (8 / 4 / 2 / 1 rows), K whole and ragged
    // blocks (vector and portable paths).
    for (i, &m) in [1usize, 2, 3, 4, 5, 11].iter().enumerate() {
        for (n, k) in [(256, 512), (200, 300), (17, 129), (9, 1)] {
            let op = random_operands(m, n, k, 900 + 13 * i as u64 + k as u64, &Device::Cpu)?;
            let y: Vec<f32> =
                fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            let want = contract_gemm(&HostGemm::from_operands(&op)?, None);
            if let Some(p) = (0..y.len()).find(|&p| y[p].to_bits() != want[p].to_bits()) {
                panic!(
                    "m={m} n={n} k={k}: output [{}, {}] = {:e}, documented arithmetic {:e}",
                    p / n,
                    p % n,
                    y[p],
                    want[p]
                );
            }
        }
    }
    Ok(())
}

/// The check can fail: a truncating bf16 store, a wrong weight-scale block, a skipped K block
/// and a promotion done once at the end are each rejected, on every shape where the bug
/// changes anything; the same arithmetic without the bug passes.
#[test]
fn rounding_check_rejects_every_mutant_gemm() -> Result<()> {
    for (m, n, k) in [(1, 256, 512), (9, 256, 384), (4, 200, 300), (2, 130, 129), (3, 16, 128)] {
        let op = HostGemm::from_operands(&random_operands(m, n, k, 31 + m as u64, &Device::Cpu)?)?;
        check_gemm_rounding(&contract_gemm(&op, None), &op)
            .unwrap_or_else(|e| panic!("m={m} n={n} k={k}, no bug: {e}"));
        for mutant in GemmMutant::ALL.into_iter().filter(|b| b.applies(n, k)) {
            match check_gemm_rounding(&contract_gemm(&op, Some(mutant)), &op) {
                Ok(r) => panic!("m={m} n={n} k={k}: {mutant:?} passed the rounding check: {r:?}"),
                Err(why) => println!("m={m} n={n} k={k}: {mutant:?} rejected: {why}"),
            }
        }
    }
    Ok(())
}

#[test]
fn into_writes_the_same_bits_in_place() -> Result<()> {
    // Into a fresh buffer and into rows 3.. of a bigger one (a view with an offset): the same
    // bits as the allocating op, the rows around the view untouched.
    for (m, n, k) in [(1, 256, 512), (9, 200, 384)] {
        let op = random_operands(m, n, k, 40 + m as u64, &Device::Cpu)?;
        let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
        let out = Tensor::full(f32::NAN, (m, n), &Device::Cpu)?.to_dtype(DType::BF16)?;
        fp8_block_matmul_into(&op.qa, &op.sa, &op.w, &op.sw, &out)?;
        assert_eq!(bits(&out)?, bits(&y)?, "m={m} n={n} k={k}: into a fresh buffer");
        let big = Tensor::full(7f32, (m + 5, n), &Device::Cpu)?.to_dtype(DType::BF16)?;
        fp8_block_matmul_into(&op.qa, &op.sa, &op.w, &op.sw, &big.narrow(0, 3, m)?)?;
        assert_eq!(bits(&big.narrow(0, 3, m)?)?, bits(&y)?, "m={m} n={n} k={k}: into a view");
        let around = Tensor::cat(&[big.narrow(0, 0, 3)?, big.narrow(0, 3 + m, 2)?], 0)?;
        assert!(bits(&around)?.iter().all(|&b| b == half::bf16::from_f32(7.0).to_bits()));
    }
    Ok(())
}

fn bits(t: &Tensor) -> Result<Vec<u16>> {
    Ok(t.flatten_all()?.to_vec1::<half::bf16>()?.into_iter().map(|v| v.to_bits()).collect())
}

#[test]
fn wrong_scale_index_is_caught() -> Result<()> {
    // Swapping two weight-scale blocks must fail the rounding check: the scales really matter.
    let op = random_operands(9, 256, 512, 3, &Device::Cpu)?;
    let host = HostGemm::from_operands(&op)?;
    let mut sw = op.sw_host.clone();
    sw.swap(0, 5);
    let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &Tensor::from_vec(sw, (2, 4), &Device::Cpu)?)?;
    let why = check_gemm_tensor(&y, &host).expect_err("swapped scale blocks passed the rounding check");
    println!("swapped scale blocks rejected: {why}");
    Ok(())
}

/// The layer's GEMM rounds like the exact product of its quantized operands; its bias is one
/// more bf16 addition (bit for bit); and against the unquantized float product only the FP8
/// quantization error remains.
#[test]
fn fp8_block_linear_matches_exact_product_and_float_matmul() -> Result<()> {
    let mut rng = Rng::new(11);
    for &(m, n, k) in &[(1, 256, 512), (9, 384, 256), (129, 200, 300)] {
        let w = Tensor::from_vec(rng.normal_vec(n * k, 0.02), (n, k), &Device::Cpu)?;
        let bias = Tensor::from_vec(rng.normal_vec(n, 0.1), n, &Device::Cpu)?;
        let layer = Fp8BlockLinear::from_weight(&w, Some(bias.clone()))?;
        let x = Tensor::from_vec(rng.normal_vec(m * k, 1.0), (m, k), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let y = layer.forward(&x)?;
        assert_eq!((y.dims(), y.dtype()), (&[m, n][..], DType::BF16));
        // The GEMM on the same quantized operands, judged against the exact product.
        let (qa, sa) = quantize_activation(&x)?;
        let g = fp8_block_matmul(&qa, &sa, layer.weight(), layer.weight_scale_inv())?;
        let host = HostGemm::from_tensors(&qa, &sa, layer.weight(), layer.weight_scale_inv())?;
        check_gemm_tensor(&g, &host).unwrap_or_else(|e| panic!("m={m} n={n} k={k}: {e}"));
        // The bias: bf16(gemm + bf16(bias)), the sum of two bf16 values rounded once.
        let (gv, bv): (Vec<f32>, Vec<f32>) = (g.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?, bias.to_vec1()?);
        let want: Vec<u32> = gv
            .iter()
            .enumerate()
            .map(|(p, &g)| (bf16_rne(f64::from(g) + bf16_rne(f64::from(bv[p % n]))) as f32).to_bits())
            .collect();
        let got: Vec<u32> =
            y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect();
        assert!(got == want, "m={m} n={n} k={k}: forward is not bf16(gemm + bf16(bias))");
        // Against the unquantized float product: e4m3 rounds each operand with relative error
        // ≤ 2^-4 (uniform, RMS 2^-4/√3 ≈ 0.036); on the product of two such operands the RMS
        // relative error is ≈ 0.05, so 0.08 leaves room only for quantization noise, while a
        // wrong scale or a lost block is off by far more.
        let f = x.to_dtype(DType::F32)?.matmul(&w.t()?)?.broadcast_add(&bias)?;
        let e = rel_err(&y, &f)?;
        assert!(e < 0.08, "m={m}: FP8 vs float relerr {e}");
    }
    Ok(())
}

#[test]
fn linear_keeps_leading_dims_and_input_dtype() -> Result<()> {
    let w = Tensor::randn(0f32, 0.05, (128, 256), &Device::Cpu)?;
    let layer = Fp8BlockLinear::from_weight(&w, None)?;
    let x = Tensor::randn(0f32, 1.0, (2, 3, 256), &Device::Cpu)?;
    let y = layer.forward(&x)?;
    assert_eq!((y.dims(), y.dtype()), (&[2, 3, 128][..], DType::F32));
    let y2 = layer.forward(&x.reshape((6, 256))?)?;
    let d = (y.reshape((6, 128))? - y2)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert_eq!(d, 0.0);
    Ok(())
}

#[test]
fn forcing_a_gpu_provider_on_cpu_is_an_error() -> Result<()> {
    // The dequant provider is a CUDA provider; on the CPU forcing it must be a clear error.
    let op = random_operands(4, 128, 256, 5, &Device::Cpu)?;
    let e = fp8_block_matmul_with(
        &Fp8Options::with_backend(Backend::Force(Provider::Dequant)),
        &op.qa,
        &op.sa,
        &op.w,
        &op.sw,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("dequant") && e.contains("CPU"), "{e}");
    Ok(())
}

#[test]
fn concat_equals_separate_layers() -> Result<()> {
    let mut rng = Rng::new(5);
    let parts: Vec<Fp8BlockLinear> = [256usize, 128, 200]
        .iter()
        .map(|&n| {
            Fp8BlockLinear::from_weight(&Tensor::from_vec(rng.normal_vec(n * 384, 0.02), (n, 384), &Device::Cpu)?, None)
        })
        .collect::<Result<_>>()?;
    let fused = Fp8BlockLinear::concat(&parts.iter().collect::<Vec<_>>())?;
    let x = Tensor::from_vec(rng.normal_vec(5 * 384, 1.0), (5, 384), &Device::Cpu)?.to_dtype(DType::BF16)?;
    let y = fused.forward(&x)?;
    let sep = Tensor::cat(&parts.iter().map(|p| p.forward(&x)).collect::<Result<Vec<_>>>()?, 1)?;
    let d = (y.to_dtype(DType::F32)? - sep.to_dtype(DType::F32)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert_eq!(d, 0.0, "fused and separate layers must agree bit for bit");
    // A part whose N is not a multiple of 128 may only come last.
    let e = Fp8BlockLinear::concat(&[&parts[2], &parts[0]]).unwrap_err().to_string();
    assert!(e.contains("part 0") && e.contains("200"), "{e}");
    Ok(())
}

#[test]
fn quantized_weight_round_trip_and_layout() -> Result<()> {
    let w = Tensor::randn(0f32, 1.0, (300, 260), &Device::Cpu)?;
    let (q, s) = quantize_weight(&w)?;
    assert_eq!((q.dims(), s.dims()), (&[300, 260][..], &[3, 3][..]));
    let back = candle_fp8::testing::reference::dequantize_weight(&q, &s)?;
    let e = rel_err(&back, &w)?;
    assert!(e < 0.05, "weight round-trip relerr {e}");
    let x = Tensor::randn(0f32, 1.0, (7, 260), &Device::Cpu)?;
    let (_, sa) = quantize_activation(&x)?;
    assert_eq!(sa.stride(), &[1, act_scale_m_stride(7)]);
    Ok(())
}

/// Each bad operand must produce an error naming the tensor and the bad value.
#[test]
fn bad_operands_are_named() -> Result<()> {
    let dev = Device::Cpu;
    let op = random_operands(5, 256, 384, 9, &dev)?;
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    let bf = op.qa.to_dtype(DType::F32)?.to_dtype(DType::BF16)?;
    let cases: Vec<(String, &[&str])> = vec![
        (err(fp8_block_matmul(&bf, &op.sa, &op.w, &op.sw)), &["qa", "F8E4M3", "BF16"]),
        (
            err(fp8_block_matmul(&op.qa, &op.sa, &op.w.to_dtype(DType::F32)?.to_dtype(DType::BF16)?, &op.sw)),
            &["w:", "BF16"],
        ),
        (err(fp8_block_matmul(&op.qa, &op.sa.to_dtype(DType::BF16)?, &op.w, &op.sw)), &["sa", "BF16"]),
        (err(fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw.narrow(1, 0, 2)?)), &["sw", "[2, 2]", "[2, 3]"]),
        (err(fp8_block_matmul(&op.qa, &op.sa.contiguous()?, &op.w, &op.sw)), &["sa", "strides", "[1, 8]"]),
        (err(fp8_block_matmul(&op.qa, &op.sa, &op.w.narrow(1, 0, 256)?, &op.sw)), &["K mismatch", "384", "256"]),
        (err(fp8_block_matmul(&op.qa.unsqueeze(0)?, &op.sa, &op.w, &op.sw)), &["qa", "rank-2", "[1, 5, 384]"]),
        (err(fp8_block_matmul(&op.qa, &op.sa.narrow(0, 0, 4)?, &op.w, &op.sw)), &["sa", "[4, 3]", "[5, 3]"]),
    ];
    for (msg, needles) in cases {
        for n in needles {
            assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
        }
    }
    // A transposed (non-row-major) weight view is refused, naming its strides.
    let wt = Tensor::from_vec(op.w_host.clone(), (384, 256), &dev)?.t()?;
    let msg = err(fp8_block_matmul(&op.qa, &op.sa, &wt, &op.sw));
    assert!(msg.contains("w:") && msg.contains("strides"), "{msg}");
    Ok(())
}

#[test]
fn bad_scales_and_inputs_for_linear() -> Result<()> {
    let dev = Device::Cpu;
    let (q, s) = quantize_weight(&Tensor::randn(0f32, 1.0, (256, 256), &dev)?)?;
    let mut sv: Vec<f32> = s.flatten_all()?.to_vec1()?;
    for (bad, needle) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (0.0, "scale 0"), (-1.0, "-1")] {
        sv[3] = bad;
        let e =
            Fp8BlockLinear::new(q.clone(), Tensor::from_vec(sv.clone(), (2, 2), &dev)?, None).unwrap_err().to_string();
        assert!(e.contains("weight_scale_inv") && e.contains("[1, 1]") && e.contains(needle), "{e}");
    }
    let e = Fp8BlockLinear::new(q.to_dtype(DType::F32)?, s.clone(), None).unwrap_err().to_string();
    assert!(e.contains("F8_E4M3") && e.contains("F32"), "{e}");
    let e = Fp8BlockLinear::new(q.clone(), s.reshape((1, 4))?, None).unwrap_err().to_string();
    assert!(e.contains("[1, 4]") && e.contains("expected [2, 2]"), "{e}");
    let layer = Fp8BlockLinear::new(q, s, None)?;
    let e = layer.forward(&Tensor::zeros((3, 128), DType::BF16, &dev)?).unwrap_err().to_string();
    assert!(e.contains("128 features") && e.contains("expects 256"), "{e}");
    let e = layer.forward(&Tensor::zeros((3, 256), DType::U32, &dev)?).unwrap_err().to_string();
    assert!(e.contains("U32"), "{e}");
    Ok(())
}

#[test]
fn empty_m_gives_empty_output() -> Result<()> {
    let w = Tensor::randn(0f32, 1.0, (128, 256), &Device::Cpu)?;
    let layer = Fp8BlockLinear::from_weight(&w, None)?;
    let y = layer.forward(&Tensor::zeros((0, 256), DType::BF16, &Device::Cpu)?)?;
    assert_eq!(y.dims(), &[0, 128]);
    Ok(())
}
