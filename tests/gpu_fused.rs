//! The fused elementwise + quantization kernels on CUDA (built only with the `cuda` feature).
//! Every test needs our sm_90a kernels: without them the fused API runs the composed ops it is
//! compared with, so each test reports `SKIP <test>: <reason>` on stderr instead (a failure
//! under `CANDLE_FP8_REQUIRE_GPU=1`, as `scripts/gpu_run.sh` runs it) rather than compare a
//! path with itself.
//!
//! `add_rmsnorm_quantize` and `swiglu_quantize` must equal, bit for bit, the composed path they
//! replace: candle's bf16 CUDA ops (add, `rms_norm`, `silu`, mul) followed by our activation
//! quantizer — q bytes, every scale, the padding rows of the scale buffer (zero) and the
//! residual sum. Ragged row counts, K from 128 to 25600, rows whose magnitudes span orders of
//! magnitude (plus an all-zero row and a row whose sum of squares overflows), the allocator
//! poisoned with NaN before each fused call so that an unwritten output cannot pass. Split-K
//! partials left unreduced and added by the norm, bit for bit against the reduced output. The
//! gate/up GEMM with SiLU·up + quantization in its epilogue against the GEMM and
//! `swiglu_quantize`. Then a decoder with the fused kernels against the same decoder with them
//! off (`DecoderModel::with_fused_kernels(false)`): identical logits.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{assert_providers, poison, skip};

use candle_core::{DType, Device, Result, Storage, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::models::{DecoderConfig, DecoderModel, LinearMode, ModelOptions};
use candle_fp8::ops::{add_rmsnorm_quantize, add_rmsnorm_quantize_unreduced, swiglu_quantize, Unreduced};
use candle_fp8::testing::checkpoints::write_random_checkpoint;
use candle_fp8::testing::{random_operands, with_gemm_config, GemmConfig, Rng, ScheduleKind};
use candle_fp8::{quantize_activation, Fp8BlockLinear, F8E4M3};

const MS: [usize; 5] = [1, 3, 16, 17, 129];
/// 576 (SmolLM2's hidden size): a partial last 128-wide group.
const KS: [usize; 4] = [128, 576, 5120, 25600];

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
    let dev = kernels_device_or_skip!("add_rmsnorm_quantize_is_bit_exact");
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
    let dev = kernels_device_or_skip!("swiglu_quantize_is_bit_exact");
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
    let dev = kernels_device_or_skip!("split_k_partials_added_by_the_norm_are_bit_exact");
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
        let gamma =
            ((rows(1, n, 11, false, &dev)?.squeeze(0)?.to_dtype(DType::F32)? * 0.2)? + 1.0)?.to_dtype(DType::BF16)?;
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
/// (`forward_swiglu_quantized`: one launch at M <= 16 on our kernels, one compiled variant of 16
/// tokens × 256 weight rows × 3 stages) equals the GEMM followed by `swiglu_quantize`, bit for
/// bit — q, scales and the scales' zero padding rows — with poisoned allocations. Token counts
/// 1..16, ragged; activations whose rows span 1e-3..1e3; weights with log-spaced block scales.
/// The reference GEMM is forced (`with_gemm_config`) onto the swap-AB tile of its token count
/// without a K split: one CTA sums each output's K blocks in order, the fused tile's summation
/// order (the dispatcher would take stream-K for 9-16 tokens over >= 3 waves of tiles, as
/// 25600 x 640's 800 tiles, or over >= 1 wave with >= 32 K blocks, as 8704 x 5120's 272: CTAs
/// sharing a tile's K blocks, other bits). M = 17 takes the composed path.
#[test]
fn gate_up_gemm_with_swiglu_epilogue_is_bit_exact() -> Result<()> {
    let dev = kernels_device_or_skip!("gate_up_gemm_with_swiglu_epilogue_is_bit_exact");
    // CANDLE_FP8_GPU_QUICK=1 (under compute-sanitizer): the two small shapes only.
    let quick = std::env::var("CANDLE_FP8_GPU_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    let shapes: &[(usize, usize)] =
        if quick { &[(128, 128), (384, 896)] } else { &[(128, 128), (384, 896), (8704, 5120), (25600, 640)] };
    for &(inter, k) in shapes {
        let n = 2 * inter;
        let ops = random_operands(1, n, k, (inter + k) as u64, &dev)?;
        let lin = Fp8BlockLinear::new(ops.w.clone(), ops.sw.clone(), None)?;
        for m in [1, 2, 5, 8, 9, 13, 16, 17] {
            let what = format!("m={m} inter={inter} k={k}");
            let one_tile = GemmConfig {
                kind: ScheduleKind::SwapAb as i32,
                block_m: if m <= 8 { 8 } else { 16 },
                block_n: 64,
                stages: 8,
                split_k: 1,
                num_sms: 0,
            };
            let (qa, sa) = quantize_activation(&rows(m, k, (m * 5 + k) as u64, false, &dev)?)?;
            let gu = if m <= 16 {
                with_gemm_config(one_tile, || lin.forward_quantized(&qa, &sa))?
            } else {
                lin.forward_quantized(&qa, &sa)?
            };
            let (q_ref, s_ref) = swiglu_quantize(&gu)?;
            poison(&dev, 2 * m * inter + 4096)?;
            let (q, s) = lin.forward_swiglu_quantized(&qa, &sa)?;
            assert_bits(&format!("{what} q"), &q, &q_ref, inter)?;
            assert_bits(&format!("{what} scales (incl. padding rows)"), &s, &s_ref, m.next_multiple_of(4))?;
        }
    }
    // Not a [gate | up] layer: a clear error.
    let ops = random_operands(1, 144, 128, 1, &dev)?;
    let odd = Fp8BlockLinear::new(ops.w.narrow(0, 0, 135)?, ops.sw.clone(), None)?;
    let e = odd.forward_swiglu_quantized(&ops.qa, &ops.sa).unwrap_err().to_string();
    assert!(e.contains("135") && e.contains("halves"), "{e}");
    Ok(())
}

/// Inputs the kernels cannot take (an unaligned start, K not a multiple of 128, f32) run the
/// composed ops on the GPU, with the same results. (Compared with candle's ops written out
/// here; on a device without our kernels every input is ineligible, so the test needs them to
/// mean anything.)
#[test]
fn ineligible_inputs_take_the_composed_path() -> Result<()> {
    let dev = kernels_device_or_skip!("ineligible_inputs_take_the_composed_path");
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

/// Per step: the greedy tokens of every sequence, and the logits `[batch × vocab]` flattened.
type Decoded = (Vec<Vec<u32>>, Vec<Vec<f32>>);

/// Greedy tokens and last-position logits of `batch` copies of a prompt, fed one token per step
/// (a prompt of several tokens would take the flash prefill kernel on the fused side, an
/// attention with roundings of its own), then `steps` decode steps (batch 9-16 takes the gate/up
/// GEMM's SwiGLU epilogue in the fused MLP).
fn decode(model: &mut DecoderModel, dev: &Device, batch: usize, steps: usize) -> Result<Decoded> {
    model.clear_kv_cache();
    let prompt: Vec<u32> = "The quick brown fox".bytes().map(u32::from).collect();
    let (mut pos, mut tokens, mut logits) = (0, vec![], vec![]);
    for &id in &prompt[..prompt.len() - 1] {
        model.forward(&Tensor::from_vec(vec![id; batch], (batch, 1), dev)?, pos)?;
        pos += 1;
    }
    let mut next = Tensor::from_vec(vec![prompt[prompt.len() - 1]; batch], (batch, 1), dev)?;
    for _ in 0..=steps {
        let l = model.forward(&next, pos)?;
        pos += next.dim(1)?;
        let t = l.argmax(1)?.to_dtype(DType::U32)?;
        tokens.push(t.to_vec1::<u32>()?);
        logits.push(l.flatten_all()?.to_vec1::<f32>()?);
        next = t.unsqueeze(1)?;
    }
    Ok((tokens, logits))
}

/// The decoder with the fused kernels on against the same weights with them off: every FP8
/// layer takes the fused elementwise path (unless a forced backend makes it ineligible: then
/// there is nothing to compare, and that is a skip), and the greedy tokens and logits are
/// identical at batch 1 and 12. Identical because every fused step is bit-exact against the
/// composed ops it replaces (the tests above: the add + RMSNorm + quantization, SiLU·up +
/// quantization, the split-K partials added by the norm, and at 9-16 tokens the gate/up
/// epilogue, whose GEMM here never splits K), and both paths run the same GEMMs on the same
/// operands. The models have 32 query heads per kv head, more than the decode-attention kernel
/// takes (`MAX_QUERIES_PER_KV_HEAD`), so the attention (a fused kernel with roundings of its own,
/// tests/gpu_attention.rs) is candle's in both.
fn compare_fused_and_composed(test: &str, name: &str, fused: DecoderModel, dev: &Device) -> Result<()> {
    let cfg = fused.config();
    let layers = cfg.num_hidden_layers;
    assert!(
        cfg.num_attention_heads / cfg.kv_heads() > candle_fp8::kernels::MAX_QUERIES_PER_KV_HEAD,
        "{name}: the decode-attention kernel would take these heads: pick more query heads per kv head"
    );
    let on = fused.fused_elementwise_layers()?;
    let forced = std::env::var_os(candle_fp8::BACKEND_ENV).is_some();
    if on == 0 && forced {
        skip(&format!("{test} [{name}]"), "the forced CANDLE_FP8_BACKEND makes no layer eligible for the fused path");
        return Ok(());
    }
    assert_eq!(on, layers, "{name}: every FP8 layer takes the fused path");
    assert_providers(name, &fused)?;
    let mut fused = fused;
    let mut composed = fused.with_fused_kernels(false);
    assert!(fused.fused_kernels() && !composed.fused_kernels());
    assert_eq!(composed.fused_elementwise_layers()?, 0);
    for batch in [1, 12] {
        let (ta, la) = decode(&mut fused, dev, batch, 8)?;
        let (tb, lb) = decode(&mut composed, dev, batch, 8)?;
        let max = la.iter().flatten().zip(lb.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        println!(
            "{name} batch {batch}: fused layers {on}/{layers}, tokens {:?}, max |Δlogit| {max}",
            ta.iter().map(|t| t[0]).collect::<Vec<_>>()
        );
        assert!(la.iter().flatten().all(|v| v.is_finite()), "{name} batch {batch}: non-finite logits");
        assert_eq!(ta, tb, "{name} batch {batch}: greedy tokens differ");
        assert!(
            la == lb,
            "{name} batch {batch}: fused and composed logits differ (max |Δ| {max}); the fused steps are bit-exact"
        );
    }
    Ok(())
}

#[test]
fn fused_kernels_decode_like_composed() -> Result<()> {
    const TEST: &str = "fused_kernels_decode_like_composed";
    let dev = kernels_device_or_skip!(TEST);
    // The tiny checkpoint through the loader: hidden 256 (the 32-thread norm), 768 intermediate;
    // 64 query heads on 2 kv heads of 64 (k and v 128 wide: q/k/v fuse into one GEMM).
    let cfg = DecoderConfig {
        num_hidden_layers: 2,
        num_attention_heads: 64,
        num_key_value_heads: Some(2),
        head_dim: Some(64),
        ..DecoderConfig::tiny()
    };
    let dir = tempfile::tempdir()?;
    write_random_checkpoint(dir.path(), &cfg, 7, &[])?;
    let ck = Checkpoint::open(dir.path())?;
    let vb = ck.var_builder(DType::BF16, &dev);
    let model = DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), &ModelOptions::default())?;
    compare_fused_and_composed(TEST, "tiny checkpoint", model, &dev)?;

    // Random weights with hidden 2048 (the 1024-thread norm) and an intermediate of 5632.
    let cfg = DecoderConfig {
        hidden_size: 2048,
        intermediate_size: 5632,
        num_hidden_layers: 3,
        num_attention_heads: 64,
        num_key_value_heads: Some(2),
        head_dim: Some(64),
        ..DecoderConfig::tiny()
    };
    let model = DecoderModel::random(&cfg, &dev, 3, &ModelOptions::with_mode(LinearMode::Fp8))?;
    compare_fused_and_composed(TEST, "random 2048", model, &dev)?;
    Ok(())
}
