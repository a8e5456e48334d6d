//! The fused elementwise + quantization kernels on CUDA (built only with the `cuda` feature;
//! every test prints a skip reason and passes when no usable CUDA device is present).
//!
//! `add_rmsnorm_quantize` and `swiglu_quantize` must equal, bit for bit, the composed path they
//! replace: candle's bf16 CUDA ops (add, `rms_norm`, `silu`, mul) followed by our activation
//! quantizer — q bytes, every scale, the padding rows of the scale buffer (zero) and the
//! residual sum. Ragged row counts, K from 128 to 25600, rows whose magnitudes span orders of
//! magnitude (plus an all-zero row and a row whose sum of squares overflows), the allocator
//! poisoned with NaN before each fused call so that an unwritten output cannot pass. Split-K
//! partials left unreduced and added by the norm, bit for bit against the reduced output. Then
//! the Qwen3 decode path with the fused elementwise ops against the composed one. The gate/up
//! GEMM with SiLU·up + quantization in its epilogue against the GEMM and `swiglu_quantize`.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;

use candle_core::{DType, Device, Result, Storage, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::ops::{add_rmsnorm_quantize, swiglu_quantize};
use candle_fp8::models::{write_random_checkpoint, LinearMode, DecoderConfig, DecoderModel, ModelOptions, SwigluEpilogue};
use candle_fp8::testing::device_caps;
use candle_fp8::quant::quantize_activation;
use candle_fp8::testing::Rng;
use candle_fp8::F8E4M3;

const MS: [usize; 5] = [1, 3, 16, 17, 129];
const KS: [usize; 3] = [128, 5120, 25600];

/// Whether our kernels can run here (else the fused API only runs the composed ops, and the
/// bit-exact tests would compare the fallback with itself).
fn kernels_or_skip(dev: &Device, test: &str) -> Result<bool> {
    let caps = device_caps(dev)?;
    match caps.unusable_reason(candle_fp8::Provider::Hopper) {
        None => Ok(true),
        Some(why) => {
            println!("SKIP {test}: {why}");
            Ok(false)
        }
    }
}

/// Fills the allocator pool with NaNs and frees them, so that the next allocations most likely
/// reuse poisoned memory.
fn poison(dev: &Device, elems: usize) -> Result<()> {
    let a = Tensor::full(f32::NAN, elems, dev)?;
    let b = Tensor::full(half::bf16::NAN, elems, dev)?;
    dev.synchronize()?;
    drop((a, b));
    Ok(())
}

/// bf16 `[m, k]` on `dev`: normal values times a per-row magnitude from 1e-3 to 1e3 (cycling),
/// with row 1 all zeros and row 2 large enough that its sum of squares overflows f32, when
/// `edge_rows`.
fn rows(m: usize, k: usize, seed: u64, edge_rows: bool, dev: &Device) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let mut v: Vec<f32> = (0..m * k).map(|i| rng.normal_f32() * 10f32.powi((i / k % 7) as i32 - 3)).collect();
    if edge_rows && m > 2 {
        v[k..2 * k].iter_mut().for_each(|x| *x = 0.0);
        v[2 * k..3 * k].iter_mut().for_each(|x| *x *= 1e21);
    }
    Tensor::from_vec(v, (m, k), &Device::Cpu)?.to_dtype(DType::BF16)?.to_device(dev)
}

/// The whole storage behind `t` (from its start offset), as raw bits, on the host: for the
/// scales this includes the padding rows between m and round_up(m, 4).
fn raw_bits(t: &Tensor) -> Result<Vec<u32>> {
    let t = t.to_device(&Device::Cpu)?;
    let (st, l) = t.storage_and_layout();
    let Storage::Cpu(c) = &*st else { unreachable!("copied to the CPU") };
    let off = l.start_offset();
    Ok(match t.dtype() {
        DType::F8E4M3 => c.as_slice::<F8E4M3>()?[off..].iter().map(|v| v.to_bits() as u32).collect(),
        DType::BF16 => c.as_slice::<half::bf16>()?[off..].iter().map(|v| v.to_bits() as u32).collect(),
        DType::F32 => c.as_slice::<f32>()?[off..].iter().map(|v| v.to_bits()).collect(),
        dt => panic!("raw_bits: unexpected dtype {dt:?}"),
    })
}

/// Asserts equal bits; names the first difference as (row, col) of a `cols`-wide buffer.
fn assert_bits(what: &str, got: &Tensor, want: &Tensor, cols: usize) -> Result<()> {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    assert_eq!(got.stride(), want.stride(), "{what}: strides");
    let (g, w) = (raw_bits(got)?, raw_bits(want)?);
    assert_eq!(g.len(), w.len(), "{what}: storage length");
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
        panic!("{what}: first difference at [{}][{}]: got {:#x}, composed {:#x}", i / cols, i % cols, g[i], w[i]);
    }
    Ok(())
}

#[test]
fn add_rmsnorm_quantize_is_bit_exact() -> Result<()> {
    let dev = gpu_or_skip!("add_rmsnorm_quantize_is_bit_exact");
    if !kernels_or_skip(&dev, "add_rmsnorm_quantize_is_bit_exact")? {
        return Ok(());
    }
    for &k in &KS {
        for &m in &MS {
            for with_residual in [false, true] {
                let x = rows(m, k, (m * 31 + k) as u64, true, &dev)?;
                let r = rows(m, k, (m * 17 + k + 5) as u64, false, &dev)?;
                let gamma = ((rows(1, k, k as u64, false, &dev)?.squeeze(0)?.to_dtype(DType::F32)? * 0.2)? + 1.0)?
                    .to_dtype(DType::BF16)?;
                let eps = if m % 2 == 0 { 1e-5 } else { 1e-6 };
                let residual = with_residual.then_some(&r);
                let what = format!("m={m} k={k} residual={with_residual}");

                // The composed path: candle's bf16 add and rms_norm, then our quantizer.
                let h = if with_residual { (&x + &r)? } else { x.clone() };
                let y = candle_nn::ops::rms_norm(&h, &gamma, eps)?;
                let (qa_ref, sa_ref) = quantize_activation(&y)?;

                poison(&dev, 4 * m * k + 4096)?;
                let (sum, qa, sa) = add_rmsnorm_quantize(&x, residual, &gamma, eps)?;
                assert_eq!(sum.is_some(), with_residual, "{what}: sum returned iff residual");
                if let Some(sum) = &sum {
                    assert_bits(&format!("{what} x + residual"), sum, &h, k)?;
                }
                assert_bits(&format!("{what} q"), &qa, &qa_ref, k)?;
                assert_bits(&format!("{what} scales (incl. padding rows)"), &sa, &sa_ref, m.next_multiple_of(4))?;
            }
        }
    }
    Ok(())
}

#[test]
fn swiglu_quantize_is_bit_exact() -> Result<()> {
    let dev = gpu_or_skip!("swiglu_quantize_is_bit_exact");
    if !kernels_or_skip(&dev, "swiglu_quantize_is_bit_exact")? {
        return Ok(());
    }
    for &inter in &KS {
        for &m in &MS {
            // Gate values up to ~±1e3 reach exp over/underflow in silu.
            let gu = rows(m, 2 * inter, (m * 7 + inter) as u64, false, &dev)?;
            let what = format!("m={m} inter={inter}");
            let a = (candle_nn::ops::silu(&gu.narrow(1, 0, inter)?)? * gu.narrow(1, inter, inter)?)?;
            let (qa_ref, sa_ref) = quantize_activation(&a)?;

            poison(&dev, 4 * m * inter + 4096)?;
            let (qa, sa) = swiglu_quantize(&gu)?;
            assert_bits(&format!("{what} q"), &qa, &qa_ref, inter)?;
            assert_bits(&format!("{what} scales (incl. padding rows)"), &sa, &sa_ref, m.next_multiple_of(4))?;
        }
    }
    Ok(())
}

/// Split-K GEMM outputs left unreduced (`forward_quantized_unreduced`) on the decode shapes that
/// split through the workspace (Qwen3-32B o and down projections, M = 1..16): `reduce()` equals
/// `forward_quantized` bit for bit, and the norm that adds the partials itself equals the norm
/// on the reduced output (sum, q, scales), with poisoned allocations. A shape that does not
/// split returns `Done`.
#[test]
fn split_k_partials_added_by_the_norm_are_bit_exact() -> Result<()> {
    use candle_fp8::testing::random_operands;
    use candle_fp8::{add_rmsnorm_quantize_unreduced, Fp8BlockLinear, Unreduced};
    let dev = gpu_or_skip!("split_k_partials_added_by_the_norm_are_bit_exact");
    if !kernels_or_skip(&dev, "split_k_partials_added_by_the_norm_are_bit_exact")? {
        return Ok(());
    }
    for (m, n, k) in [(1, 5120, 8192), (5, 5120, 8192), (16, 5120, 8192), (1, 5120, 25600), (3, 5120, 25600)] {
        let ops = random_operands(m, n, k, (m * 131 + k) as u64, &dev)?;
        let lin = Fp8BlockLinear::new(ops.w.clone(), ops.sw.clone(), None)?;
        let what = format!("m={m} n={n} k={k}");
        let want = lin.forward_quantized(&ops.qa, &ops.sa)?;
        poison(&dev, 4 * 8 * m * n + 4096)?;
        let out = lin.forward_quantized_unreduced(&ops.qa, &ops.sa)?;
        let Unreduced::Partials(p) = &out else { panic!("{what}: expected split-K partials, got {out:?}") };
        assert_eq!((p.dtype(), p.dim(1)?, p.dim(2)?), (DType::F32, m, n), "{what}: partials layout");
        assert!(p.dim(0)? >= 2, "{what}: {} splits", p.dim(0)?);
        assert_bits(&format!("{what} reduce()"), &out.reduce()?, &want, n)?;

        let x = rows(m, n, (m * 3 + n) as u64, true, &dev)?;
        let gamma = ((rows(1, n, 11, false, &dev)?.squeeze(0)?.to_dtype(DType::F32)? * 0.2)? + 1.0)?.to_dtype(DType::BF16)?;
        let (sum_ref, qa_ref, sa_ref) = add_rmsnorm_quantize(&x, Some(&want), &gamma, 1e-6)?;
        poison(&dev, 4 * m * n + 4096)?;
        let (sum, qa, sa) = add_rmsnorm_quantize_unreduced(&x, Some(&out), &gamma, 1e-6)?;
        assert_bits(&format!("{what} x + partials"), &sum.unwrap(), &sum_ref.unwrap(), n)?;
        assert_bits(&format!("{what} q"), &qa, &qa_ref, n)?;
        assert_bits(&format!("{what} scales"), &sa, &sa_ref, m.next_multiple_of(4))?;
    }
    // qkv-sized: 160 tiles fill the SMs, no split: the finished output.
    let ops = random_operands(1, 10240, 5120, 9, &dev)?;
    let lin = Fp8BlockLinear::new(ops.w.clone(), ops.sw.clone(), None)?;
    match lin.forward_quantized_unreduced(&ops.qa, &ops.sa)? {
        Unreduced::Done(y) => assert_bits("qkv Done", &y, &lin.forward_quantized(&ops.qa, &ops.sa)?, 10240)?,
        other => panic!("1x10240x5120: expected Done, got {other:?}"),
    }
    Ok(())
}

/// The gate/up GEMM with SiLU·up and the down projection's quantization in its epilogue
/// (`forward_swiglu_quantized`: one launch at M <= 16 on our kernels) equals the GEMM followed by
/// `swiglu_quantize`, bit for bit — q, scales and the scales' zero padding rows — with poisoned
/// allocations. Token counts 1..16 over both tile widths (8 and 16 tokens), ragged; activations
/// whose rows span 1e-3..1e3; weights with log-spaced block scales. The reference GEMM runs one
/// tile per CTA (no K split: the fused tile's summation order); where the dispatcher picks
/// stream-K instead (9-16 tokens over >= 3 waves of tiles, as 25600 x 640's 800 tiles and
/// Qwen3-32B's gate/up, or over >= 1 wave with >= 32 K blocks, as 8704 x 5120's 272: CTAs share a
/// tile's K blocks, other bits), the reference is forced onto the 16-token swap-AB tile. M = 17
/// takes the composed path.
#[test]
fn gate_up_gemm_with_swiglu_epilogue_is_bit_exact() -> Result<()> {
    use candle_fp8::dispatch::{choose_config, set_config_override, GemmConfig, ScheduleKind};
    use candle_fp8::ops::fp8_swiglu_matmul_quantize_variant;
    use candle_fp8::testing::random_operands;
    use candle_fp8::Fp8BlockLinear;
    let dev = gpu_or_skip!("gate_up_gemm_with_swiglu_epilogue_is_bit_exact");
    if !kernels_or_skip(&dev, "gate_up_gemm_with_swiglu_epilogue_is_bit_exact")? {
        return Ok(());
    }
    // CANDLE_FP8_GPU_QUICK=1 (under compute-sanitizer): the two small shapes only.
    let quick = std::env::var("CANDLE_FP8_GPU_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    // 8704 x 5120: 272 tiles of 64 rows, two or more per SM: no K split (132-263 tiles split K
    // in two at M <= 8).
    let shapes: &[(usize, usize)] = if quick { &[(128, 128), (384, 896)] } else { &[(128, 128), (384, 896), (8704, 5120), (25600, 640)] };
    for &(inter, k) in shapes {
        let n = 2 * inter;
        let ops = random_operands(1, n, k, (inter + k) as u64, &dev)?;
        let lin = Fp8BlockLinear::new(ops.w.clone(), ops.sw.clone(), None)?;
        for m in [1, 2, 5, 8, 9, 13, 16, 17] {
            let what = format!("m={m} inter={inter} k={k}");
            let auto = choose_config(m, n, k, 132);
            let one_tile = GemmConfig { kind: ScheduleKind::SwapAb as i32, block_m: 16, block_n: 64, stages: 8, split_k: 1, num_sms: 0 };
            let forced = (m <= 16 && auto.schedule() == Some(ScheduleKind::SwapAbStreamK)).then_some(one_tile);
            if m <= 16 {
                assert!(forced.is_some() || auto.split_k == 1, "{what}: the composed GEMM must not split K here ({auto:?})");
            }
            let (qa, sa) = quantize_activation(&rows(m, k, (m * 5 + k) as u64, false, &dev)?)?;
            set_config_override(forced);
            let gu = lin.forward_quantized(&qa, &sa);
            set_config_override(None);
            let gu = gu?;
            let (q_ref, s_ref) = swiglu_quantize(&gu)?;
            poison(&dev, 2 * m * inter + 4096)?;
            let (q, s) = lin.forward_swiglu_quantized(&qa, &sa)?;
            assert_bits(&format!("{what} q"), &q, &q_ref, inter)?;
            assert_bits(&format!("{what} scales (incl. padding rows)"), &s, &s_ref, m.next_multiple_of(4))?;
            if m > 16 {
                continue;
            }
            // Every compiled kernel variant (32 features x 8 or 6 stages, 64 features x 4, 128
            // features x 3: a whole quantization group per CTA, no cluster).
            for (rows, stages) in [(64, 8), (64, 6), (128, 4), (256, 3)] {
                poison(&dev, 2 * m * inter + 4096)?;
                let (q, s) = fp8_swiglu_matmul_quantize_variant(&qa, &sa, &ops.w, &ops.sw, rows, stages)?;
                let v = format!("{what} tile {rows} rows, {stages} stages");
                assert_bits(&format!("{v} q"), &q, &q_ref, inter)?;
                assert_bits(&format!("{v} scales"), &s, &s_ref, m.next_multiple_of(4))?;
            }
        }
    }
    // An uncompiled variant is an error naming it, never a silent fallback.
    let (qa, sa) = quantize_activation(&rows(1, 128, 1, false, &dev)?)?;
    let ops = random_operands(1, 256, 128, 2, &dev)?;
    let e = fp8_swiglu_matmul_quantize_variant(&qa, &sa, &ops.w, &ops.sw, 64, 5).unwrap_err().to_string();
    assert!(e.contains("stages 5") && e.contains("not compiled"), "{e}");
    // Not a [gate | up] layer: a clear error.
    let ops = random_operands(1, 144, 128, 1, &dev)?;
    let odd = Fp8BlockLinear::new(ops.w.narrow(0, 0, 135)?, ops.sw.clone(), None)?;
    let e = odd.forward_swiglu_quantized(&ops.qa, &ops.sa).unwrap_err().to_string();
    assert!(e.contains("135") && e.contains("halves"), "{e}");
    Ok(())
}

/// Inputs the kernels cannot take (an unaligned start, K not a multiple of 128, f32) run the
/// composed ops on the GPU, with the same results.
#[test]
fn ineligible_inputs_take_the_composed_path() -> Result<()> {
    let dev = gpu_or_skip!("ineligible_inputs_take_the_composed_path");
    let (m, k) = (5, 1024);
    // Starts one element into its buffer: not 16-byte aligned.
    let flat = rows(1, m * k + 1, 3, false, &dev)?.squeeze(0)?;
    let x = flat.narrow(0, 1, m * k)?.reshape((m, k))?;
    assert_eq!(x.layout().start_offset(), 1);
    let r = rows(m, k, 4, false, &dev)?;
    let gamma = rows(1, k, 5, false, &dev)?.squeeze(0)?;
    let h = (&x + &r)?;
    let (qa_ref, sa_ref) = quantize_activation(&candle_nn::ops::rms_norm(&h, &gamma, 1e-6)?)?;
    let (sum, qa, sa) = add_rmsnorm_quantize(&x, Some(&r), &gamma, 1e-6)?;
    assert_bits("unaligned sum", &sum.unwrap(), &h, k)?;
    assert_bits("unaligned q", &qa, &qa_ref, k)?;
    assert_bits("unaligned scales", &sa, &sa_ref, 8)?;

    // K = 200: partial last group.
    let x = rows(3, 200, 6, false, &dev)?;
    let gamma = rows(1, 200, 7, false, &dev)?.squeeze(0)?;
    let (qa_ref, sa_ref) = quantize_activation(&candle_nn::ops::rms_norm(&x, &gamma, 1e-6)?)?;
    let (_, qa, sa) = add_rmsnorm_quantize(&x, None, &gamma, 1e-6)?;
    assert_bits("k=200 q", &qa, &qa_ref, 200)?;
    assert_bits("k=200 scales", &sa, &sa_ref, 4)?;

    // f32 activations.
    let gu = rows(3, 512, 8, false, &dev)?.to_dtype(DType::F32)?;
    let a = (candle_nn::ops::silu(&gu.narrow(1, 0, 256)?)? * gu.narrow(1, 256, 256)?)?;
    let (qa_ref, sa_ref) = quantize_activation(&a)?;
    let (qa, sa) = swiglu_quantize(&gu)?;
    assert_bits("f32 swiglu q", &qa, &qa_ref, 256)?;
    assert_bits("f32 swiglu scales", &sa, &sa_ref, 4)?;
    Ok(())
}

/// Greedy tokens and last-position logits over a prompt and `steps` decode steps.
fn decode(model: &mut DecoderModel, dev: &Device, steps: usize) -> Result<(Vec<u32>, Vec<Vec<f32>>)> {
    model.clear_kv_cache();
    let prompt: Vec<u32> = "The quick brown fox".bytes().map(u32::from).collect();
    let mut next = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
    let (mut pos, mut tokens, mut logits) = (0, vec![], vec![]);
    for _ in 0..=steps {
        let l = model.forward(&next, pos)?;
        pos += next.dim(1)?;
        let t = l.argmax(1)?.to_dtype(DType::U32)?;
        tokens.push(t.to_vec1::<u32>()?[0]);
        logits.push(l.squeeze(0)?.to_vec1::<f32>()?);
        next = t.unsqueeze(1)?;
    }
    Ok((tokens, logits))
}

fn compare_fused_and_composed(name: &str, mut fused: DecoderModel, dev: &Device, expect_fused: bool) -> Result<()> {
    let layers = fused.config().num_hidden_layers;
    let on = fused.fused_elementwise_layers()?;
    if expect_fused {
        assert_eq!(on, layers, "{name}: every FP8 layer takes the fused path");
    }
    let mut composed = fused.clone();
    composed.set_fused_elementwise(false);
    assert_eq!(composed.fused_elementwise_layers()?, 0);
    let mut swiglu_epilogue = fused.clone();
    assert_eq!(fused.swiglu_epilogue(), SwigluEpilogue::Auto, "{name}: the default");
    assert!(!SwigluEpilogue::Auto.applies(1), "{name}: one sequence runs SiLU·up as its own launch");
    swiglu_epilogue.set_swiglu_epilogue(SwigluEpilogue::On);
    let (ta, la) = decode(&mut fused, dev, 8)?;
    let (tb, lb) = decode(&mut composed, dev, 8)?;
    let (tc, lc) = decode(&mut swiglu_epilogue, dev, 8)?;
    // The epilogue is bit-exact against its own launch when the gate/up GEMM does not split K
    // (true for both models below).
    assert_eq!(ta, tc, "{name}: greedy tokens with and without the SwiGLU epilogue");
    assert!(la == lc, "{name}: logits with and without the SwiGLU epilogue differ");
    let mut max = 0f32;
    let mut sq = 0f64;
    let mut n = 0usize;
    for (a, b) in la.iter().zip(&lb) {
        for (x, y) in a.iter().zip(b) {
            max = max.max((x - y).abs());
            sq += (*y as f64) * (*y as f64);
            n += 1;
        }
    }
    let rms = (sq / n as f64).sqrt() as f32;
    let exact = la == lb;
    println!("{name}: fused layers {on}/{layers}, tokens {ta:?}, max |Δlogit| {max} (rms {rms}), bit-identical: {exact}");
    assert_eq!(ta, tb, "{name}: greedy tokens differ");
    // The kernels are bit-exact, so the logits should be too; allow for nothing but noise.
    assert!(max <= 1e-3 * rms, "{name}: fused vs composed logits differ by {max} (rms {rms})");
    Ok(())
}

#[test]
fn qwen3_fused_elementwise_decodes_like_composed() -> Result<()> {
    let dev = gpu_or_skip!("qwen3_fused_elementwise_decodes_like_composed");
    let hopper = kernels_or_skip(&dev, "qwen3_fused_elementwise_decodes_like_composed (kernels)")?;
    // The tiny checkpoint through the loader: hidden 256 (the 32-thread norm), 768 intermediate.
    let cfg = DecoderConfig { num_hidden_layers: 2, ..DecoderConfig::tiny() };
    let dir = tempfile::tempdir()?;
    write_random_checkpoint(dir.path(), &cfg, 7, &[])?;
    let ck = Checkpoint::open(dir.path())?;
    let vb = ck.var_builder(DType::BF16, &dev);
    let model = DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), &ModelOptions::default())?;
    let backend_forced = std::env::var_os(candle_fp8::BACKEND_ENV).is_some();
    compare_fused_and_composed("tiny checkpoint", model, &dev, hopper && !backend_forced)?;

    // Random weights with hidden 2048 (the 1024-thread norm) and an intermediate of 5632.
    let cfg = DecoderConfig {
        hidden_size: 2048,
        intermediate_size: 5632,
        num_hidden_layers: 3,
        num_attention_heads: 16,
        num_key_value_heads: 4,
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    };
    let model = DecoderModel::random(&cfg, &dev, 3, LinearMode::Fp8)?;
    compare_fused_and_composed("random 2048", model, &dev, hopper && !backend_forced)?;
    Ok(())
}
