//! The CPU path against the dequantized reference, and the reference against an independent
//! naive f64 loop, on random data with log-spaced scales (docs/design.md).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::{Backend, Fp8Options, Provider};
use candle_fp8::format::act_scale_m_stride;
use candle_fp8::ops::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::reference::{calc_diff, naive_matmul_f64, reference_matmul, rel_err, rel_err_slices};
use candle_fp8::testing::{random_operands, Rng};
use candle_fp8::Fp8BlockLinear;

const MS: [usize; 10] = [1, 2, 3, 7, 8, 9, 127, 128, 129, 300];

#[test]
fn reference_matches_naive_f64_loop() -> Result<()> {
    // N not a multiple of 128 (partial scale blocks), K both whole and with a partial last block.
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

#[test]
fn cpu_op_matches_reference() -> Result<()> {
    for (i, &m) in MS.iter().enumerate() {
        for (n, k) in [(256, 512), (200, 384), (130, 300), (16, 128)] {
            let op = random_operands(m, n, k, 7 * i as u64 + n as u64, &Device::Cpu)?;
            let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
            assert_eq!(y.dtype(), DType::BF16);
            assert_eq!(y.dims(), &[m, n]);
            let r = reference_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
            let (e, d) = (rel_err(&y, &r)?, calc_diff(&y, &r)?);
            assert!(e <= 3e-3 && d < 1e-3, "m={m} n={n} k={k}: relerr {e}, calc_diff {d}");
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
    // Swapping two weight-scale blocks must break the comparison: the scales really matter.
    let op = random_operands(9, 256, 512, 3, &Device::Cpu)?;
    let r = reference_matmul(&op.qa, &op.sa, &op.w, &op.sw)?;
    let mut sw = op.sw_host.clone();
    sw.swap(0, 5);
    let sw = Tensor::from_vec(sw, (2, 4), &Device::Cpu)?;
    let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &sw)?;
    assert!(rel_err(&y, &r)? > 1e-2);
    Ok(())
}

#[test]
fn fp8_block_linear_matches_reference_and_float_matmul() -> Result<()> {
    let mut rng = Rng::new(11);
    for &(m, n, k) in &[(1, 256, 512), (9, 384, 256), (129, 200, 300)] {
        let w = Tensor::from_vec(rng.normal_vec(n * k, 0.02), (n, k), &Device::Cpu)?;
        let bias = Tensor::from_vec(rng.normal_vec(n, 0.1), n, &Device::Cpu)?;
        let layer = Fp8BlockLinear::from_weight(&w, Some(bias.clone()))?;
        let x = Tensor::from_vec(rng.normal_vec(m * k, 1.0), (m, k), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let y = layer.forward(&x)?;
        assert_eq!((y.dims(), y.dtype()), (&[m, n][..], DType::BF16));
        // Against the dequantized reference on the same quantized operands.
        let (qa, sa) = quantize_activation(&x)?;
        let r = reference_matmul(&qa, &sa, layer.weight(), layer.weight_scale_inv())?.broadcast_add(&bias)?;
        let (e, d) = (rel_err(&y, &r)?, calc_diff(&y, &r)?);
        assert!(e <= 3e-3 && d < 1e-3, "m={m} n={n} k={k}: relerr {e} calc_diff {d}");
        // And loosely against the unquantized float product (FP8 quantization error only).
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
    let e = fp8_block_matmul_with(&Fp8Options::with_backend(Backend::Force(Provider::Dequant)), &op.qa, &op.sa, &op.w, &op.sw)
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
        .map(|&n| Fp8BlockLinear::from_weight(&Tensor::from_vec(rng.normal_vec(n * 384, 0.02), (n, 384), &Device::Cpu)?, None))
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
        (err(fp8_block_matmul(&op.qa, &op.sa, &op.w.to_dtype(DType::F32)?.to_dtype(DType::BF16)?, &op.sw)), &["w:", "BF16"]),
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
        let e = Fp8BlockLinear::new(q.clone(), Tensor::from_vec(sv.clone(), (2, 2), &dev)?, None)
            .unwrap_err()
            .to_string();
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
