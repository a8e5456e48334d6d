//! The fused elementwise + quantization API (`candle_fp8::fused`) on the CPU: it must equal the
//! composed ops (add, `rms_norm`, `silu`, mul, `quantize_activation`) bit for bit, reject bad
//! inputs with errors naming the tensor, and the Qwen3 fused elementwise path (residual add
//! moved into the next layer's norm) must give the same logits as the composed one.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::ops::{add_rmsnorm_quantize, swiglu_quantize};
use candle_fp8::models::{DecoderConfig, DecoderModel, ModelOptions};
use candle_fp8::testing::checkpoints::write_random_checkpoint;
use candle_fp8::quant::quantize_activation;
use candle_fp8::testing::Rng;
use candle_fp8::Fp8BlockLinear;

/// `[m, k]` normal values whose rows span five orders of magnitude.
fn rows(m: usize, k: usize, seed: u64, dtype: DType) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let v: Vec<f32> = (0..m * k).map(|i| rng.normal_f32() * 10f32.powi((i / k % 5) as i32 - 2)).collect();
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

#[test]
fn add_rmsnorm_quantize_equals_the_composed_ops() -> Result<()> {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (m, k) in [(1, 128), (3, 256), (17, 384), (5, 200), (4, 1024)] {
            let x = rows(m, k, 1 + m as u64, dtype)?;
            let r = rows(m, k, 100 + k as u64, dtype)?;
            let gamma = ((rows(1, k, 9, DType::F32)?.squeeze(0)? * 0.1)? + 1.0)?.to_dtype(dtype)?;
            let eps = 1e-6;
            let what = format!("{dtype:?} m={m} k={k}");

            let (sum, qa, sa) = add_rmsnorm_quantize(&x, Some(&r), &gamma, eps)?;
            let h = (&x + &r)?;
            let (qa_ref, sa_ref) = quantize_activation(&candle_nn::ops::rms_norm(&h, &gamma, eps)?)?;
            assert_same(&format!("{what} sum"), &sum.expect("a sum with a residual"), &h)?;
            assert_same(&format!("{what} qa"), &qa, &qa_ref)?;
            assert_same(&format!("{what} sa"), &sa, &sa_ref)?;

            let (sum, qa, sa) = add_rmsnorm_quantize(&x, None, &gamma, eps)?;
            assert!(sum.is_none(), "no residual, no sum");
            let (qa_ref, sa_ref) = quantize_activation(&candle_nn::ops::rms_norm(&x, &gamma, eps)?)?;
            assert_same(&format!("{what} qa (no residual)"), &qa, &qa_ref)?;
            assert_same(&format!("{what} sa (no residual)"), &sa, &sa_ref)?;
        }
    }
    Ok(())
}

/// Off the CUDA kernel path an FP8 layer's output is never left unreduced, and the
/// `_unreduced` norm equals the plain one; partials of the wrong shape are named errors.
#[test]
fn unreduced_outputs_on_the_cpu() -> Result<()> {
    use candle_fp8::testing::random_operands;
    use candle_fp8::ops::{add_rmsnorm_quantize_unreduced, Unreduced};
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

#[test]
fn swiglu_quantize_equals_the_composed_ops() -> Result<()> {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (m, inter) in [(1, 128), (3, 256), (17, 768), (2, 100)] {
            let gu = rows(m, 2 * inter, 3 + m as u64, dtype)?;
            let (qa, sa) = swiglu_quantize(&gu)?;
            let a = (candle_nn::ops::silu(&gu.narrow(1, 0, inter)?)? * gu.narrow(1, inter, inter)?)?;
            let (qa_ref, sa_ref) = quantize_activation(&a)?;
            assert_same(&format!("{dtype:?} m={m} inter={inter} qa"), &qa, &qa_ref)?;
            assert_same(&format!("{dtype:?} m={m} inter={inter} sa"), &sa, &sa_ref)?;
        }
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
    let e = err_of(add_rmsnorm_quantize(&Tensor::ones((2, 0), DType::F32, &cpu)?, None, &Tensor::ones(0, DType::F32, &cpu)?, 1e-6));
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
