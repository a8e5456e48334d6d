//! The decoder models on CUDA (built only with the `cuda` feature; without a CUDA sm_90 device
//! every test reports `SKIP <test>: <reason>` on stderr, a failure under
//! `CANDLE_FP8_REQUIRE_GPU=1`): a toy language model checkpoint through the real loader
//! (`testing::checkpoints::write_toy_lm_checkpoint`: confident top-1 margins, so top-1
//! agreement means something), deterministic decoding, KV-cache decode against full recompute,
//! fused against unfused projections, the CUDA model against the f32 reference of the same
//! weights on the CPU, random GPU weights, and launch-ahead generation.
//!
//! Every comparison of logits uses bounds derived from the arithmetic (`gpu::LogitBounds`: the
//! FP8 activation-quantization noise each run carries, measured on the CPU as the f32 reference
//! against the dense model, plus the bf16 rounding chain of each CUDA run, from the lm_head's row
//! norms and the number of roundings per layer), never a figure fitted to a GPU run; every FP8
//! layer of a CUDA model must run on our kernels (`fp8_providers()`), unless
//! `CANDLE_FP8_BACKEND` forces another provider.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{assert_providers, teacher_forced, LogitBounds, LogitDiff, LogitScales, Logits};

use candle_core::{Device, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::models::{generate, launches_ahead, DecoderConfig, DecoderModel, LinearMode, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;
use std::path::Path;

/// The toy model's training text: its lm_head predicts this text's next byte.
const CORPUS: &str =
    "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with one step. ";

/// Two layers of the tiny Qwen3 (head_dim 64).
fn small_cfg() -> DecoderConfig {
    DecoderConfig { num_hidden_layers: 2, ..DecoderConfig::tiny() }
}

/// 64 query heads per kv head: more than the decode-attention kernel takes
/// (`MAX_QUERIES_PER_KV_HEAD`), so the decode step's attention is candle's.
fn many_heads_cfg() -> DecoderConfig {
    let cfg = DecoderConfig {
        num_hidden_layers: 2,
        num_attention_heads: 128,
        num_key_value_heads: Some(2),
        ..DecoderConfig::tiny()
    };
    assert!(cfg.num_attention_heads / cfg.kv_heads() > candle_fp8::kernels::MAX_QUERIES_PER_KV_HEAD);
    cfg
}

/// Two layers with head_dim 128.
fn head128_cfg() -> DecoderConfig {
    DecoderConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(2),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    }
}

/// Loads the checkpoint in `dir` onto `dev` (activations bf16 on CUDA, f32 on the CPU, unless
/// `opts` says otherwise).
fn load(dir: &Path, dev: &Device, opts: &ModelOptions) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let cfg = DecoderConfig::from_json(&ck.config_json().to_string())?;
    let vb = ck.var_builder(opts.dtype_for(dev), dev);
    DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), opts)
}

fn toy_checkpoint(cfg: &DecoderConfig) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), cfg, 7, &CORPUS.repeat(4))?;
    Ok(dir)
}

fn prompt() -> Vec<u32> {
    "the quick brown fox".bytes().map(u32::from).collect()
}

fn bytes(t: &[u32]) -> String {
    String::from_utf8_lossy(&t.iter().map(|&t| t as u8).collect::<Vec<_>>()).into_owned()
}

/// The CPU models that measure the FP8 quantization noise of the checkpoint in `dir`: the f32
/// reference (FP8 operands, f32 GEMMs) and the dense f32 model (activations not quantized).
fn cpu_reference_and_dense(dir: &Path) -> Result<(DecoderModel, DecoderModel)> {
    let cpu = load(dir, &Device::Cpu, &ModelOptions::default())?;
    Ok((cpu.to_reference()?, cpu.to_dense()?))
}

/// Last-position logits of every prefix `seq[..n]`, `n` in `from..=seq.len()`, each recomputed
/// from scratch.
fn recomputed(model: &mut DecoderModel, seq: &[u32], from: usize) -> Result<Logits> {
    let mut out = Vec::new();
    for n in from..=seq.len() {
        model.clear_kv_cache();
        let ids = Tensor::new(&seq[..n], model.device())?.unsqueeze(0)?;
        out.push(model.forward(&ids, 0)?.squeeze(0)?.to_vec1::<f32>()?);
    }
    Ok(out)
}

#[test]
fn cuda_toy_checkpoint_loads_and_decodes_deterministically() -> Result<()> {
    const NAME: &str = "cuda_toy_checkpoint_loads_and_decodes_deterministically";
    let dev = kernels_device_or_skip!(NAME);
    let cfg = small_cfg();
    let dir = toy_checkpoint(&cfg)?;
    let mut model = load(dir.path(), &dev, &ModelOptions::default())?;
    assert!(model.projections_fused());
    assert!(model.linear_kinds().iter().filter(|(n, _)| n != "lm_head").all(|(_, k)| *k == "fp8"));
    assert_providers(NAME, &model)?;
    let run = |model: &mut DecoderModel, mut s: Sampler| -> Result<Vec<Vec<u32>>> {
        Ok(generate(model, &prompt(), 2, 12, &mut s, &[], &mut |_, _| {})?.tokens)
    };
    let a = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    let b = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    assert_eq!(a, b, "same seed, same tokens");
    assert!(a.iter().flatten().all(|&t| (t as usize) < cfg.vocab_size));
    let g1 = run(&mut model, Sampler::greedy())?;
    println!("greedy: {:?}", bytes(&g1[0]));
    let mut again = load(dir.path(), &dev, &ModelOptions::default())?;
    assert_eq!(g1, run(&mut again, Sampler::greedy())?, "a fresh load decodes the same greedy tokens");
    assert_eq!(g1[0], g1[1], "greedy: identical sequences in a batch");
    Ok(())
}

/// Incremental decode (prefill of 5 tokens, then one position at a time, with a KV cache that
/// starts too small and is reallocated) against a full recompute of every prefix, in both
/// linear modes. Both runs are on CUDA: |Δlogit| within `LogitBounds` for two CUDA runs (bf16
/// roundings in other orders: batched and one-row kernels, another attention path) and, with
/// FP8 linears, two runs' quantization noise (a code that flips under those roundings); and the
/// same argmax at ≥ 99 % of the prefixes.
#[test]
fn cuda_kv_cache_decode_equals_full_recompute() -> Result<()> {
    const NAME: &str = "cuda_kv_cache_decode_equals_full_recompute";
    let dev = kernels_device_or_skip!(NAME);
    let cfg = small_cfg();
    let dir = toy_checkpoint(&cfg)?;
    let scales = LogitScales::of(dir.path(), cfg.num_hidden_layers)?;
    let seq: Vec<u32> = CORPUS.bytes().take(40).map(u32::from).collect();
    let pre = 5;
    // The quantization noise at these positions, on the CPU.
    let (mut reference, mut dense) = cpu_reference_and_dense(dir.path())?;
    let prefixes = &seq[..seq.len() - 1];
    let noise = LogitDiff::of(&recomputed(&mut reference, prefixes, pre)?, &recomputed(&mut dense, prefixes, pre)?);
    println!("FP8 quantization noise (CPU f32 reference vs dense): {noise:?}");
    for mode in [LinearMode::Bf16, LinearMode::Fp8] {
        let mut model = load(dir.path(), &dev, &ModelOptions::with_mode(mode))?;
        if mode == LinearMode::Fp8 {
            assert_providers(NAME, &model)?;
        } else {
            assert!(model.fp8_providers()?.is_empty(), "bf16 mode has no FP8 layer");
        }
        let mut full = model.clone();
        model.set_kv_capacity(8); // forces one reallocation with copy
        let mut inc =
            vec![model.forward(&Tensor::new(&seq[..pre], &dev)?.unsqueeze(0)?, 0)?.squeeze(0)?.to_vec1::<f32>()?];
        for (i, &t) in seq.iter().enumerate().skip(pre).take(seq.len() - pre - 1) {
            inc.push(model.forward(&Tensor::new(&[t], &dev)?.unsqueeze(0)?, i)?.squeeze(0)?.to_vec1::<f32>()?);
        }
        assert_eq!(model.kv_len(), seq.len() - 1);
        let d = LogitDiff::of(&inc, &recomputed(&mut full, prefixes, pre)?);
        let fp8_runs = if mode == LinearMode::Fp8 { 2 } else { 0 };
        LogitBounds::new(&scales, &noise, fp8_runs, 2).check(&format!("{mode:?} incremental vs recompute"), &d);
        assert!(d.agreement() >= 0.99, "{mode:?}: top-1 agreement {}/{}", d.top1_agree, d.steps);
    }
    Ok(())
}

/// q/k/v and gate/up as one GEMM each against one GEMM per module, prefill and decode, both
/// linear modes, on CUDA: the same per-row arithmetic, only the GEMMs' N (and so their tiling
/// and K splits) differ — |Δlogit| within `LogitBounds` for two CUDA runs, and the same argmax
/// at ≥ 99 % of 64 teacher-forced steps.
#[test]
fn cuda_fused_projections_equal_unfused() -> Result<()> {
    const NAME: &str = "cuda_fused_projections_equal_unfused";
    let dev = kernels_device_or_skip!(NAME);
    let cfg = small_cfg();
    let dir = toy_checkpoint(&cfg)?;
    let scales = LogitScales::of(dir.path(), cfg.num_hidden_layers)?;
    let steps = 64;
    let (mut reference, mut dense) = cpu_reference_and_dense(dir.path())?;
    for mode in [LinearMode::Fp8, LinearMode::Bf16] {
        let mut fused = load(dir.path(), &dev, &ModelOptions::with_mode(mode).fuse_projections(true))?;
        let mut split = load(dir.path(), &dev, &ModelOptions::with_mode(mode).fuse_projections(false))?;
        assert!(fused.projections_fused() && !split.projections_fused());
        if mode == LinearMode::Fp8 {
            assert_providers(NAME, &fused)?;
            assert_providers(NAME, &split)?;
        }
        let (_, a, b) = teacher_forced(&mut fused, &mut [&mut split, &mut reference, &mut dense], &prompt(), steps)?;
        let noise = LogitDiff::of(&b[1], &b[2]);
        let d = LogitDiff::of(&a, &b[0]);
        let fp8_runs = if mode == LinearMode::Fp8 { 2 } else { 0 };
        LogitBounds::new(&scales, &noise, fp8_runs, 2).check(&format!("{mode:?} fused vs unfused projections"), &d);
        assert!(d.agreement() >= 0.99, "{mode:?}: top-1 agreement {}/{}", d.top1_agree, d.steps);
    }
    Ok(())
}

/// The CUDA model (our kernels, the fused decode kernels, bf16 activations) against the f32
/// reference of the same weights on the CPU (`to_reference()`: the same FP8 weights, activations
/// quantized by the same rule, dequantized and multiplied in f32), teacher-forced over 128 greedy
/// steps of the toy LM, at head_dim 64 and 128 and with candle's attention on the decode path
/// (more query heads per kv head than our attention kernel takes): top-1 agreement ≥ 99 %, and
/// |Δlogit| within `LogitBounds` for one CUDA run and two FP8 runs.
#[test]
fn cuda_fp8_model_matches_the_f32_reference() -> Result<()> {
    const NAME: &str = "cuda_fp8_model_matches_the_f32_reference";
    let dev = kernels_device_or_skip!(NAME);
    let steps = 128;
    for (name, cfg) in
        [("head_dim 64", small_cfg()), ("head_dim 128", head128_cfg()), ("candle attention", many_heads_cfg())]
    {
        let dir = toy_checkpoint(&cfg)?;
        let mut cuda = load(dir.path(), &dev, &ModelOptions::default())?;
        assert_providers(NAME, &cuda)?;
        assert_eq!(cuda.fused_elementwise_layers()?, cfg.num_hidden_layers, "{name}: the fused decode path runs");
        let (mut reference, mut dense) = cpu_reference_and_dense(dir.path())?;
        assert!(reference.linear_kinds().iter().any(|(_, k)| *k == "fp8-reference"));
        let (tokens, a, b) = teacher_forced(&mut cuda, &mut [&mut reference, &mut dense], &prompt(), steps)?;
        println!("{name}: {:?}", bytes(&tokens));
        let noise = LogitDiff::of(&b[0], &b[1]);
        println!("{name}: FP8 quantization noise (CPU f32 reference vs dense): {noise:?}");
        let d = LogitDiff::of(&a, &b[0]);
        let scales = LogitScales::of(dir.path(), cfg.num_hidden_layers)?;
        LogitBounds::new(&scales, &noise, 2, 1).check(&format!("{name}: CUDA vs CPU f32 reference"), &d);
        assert!(d.agreement() >= 0.99, "{name}: top-1 agreement {}/{}", d.top1_agree, d.steps);
    }
    Ok(())
}

/// Random weights generated on the GPU (`--random-weights`: our e4m3 kernel, fused projections
/// built in one buffer): the same seed gives the same model (bit-identical logits), another
/// seed another one; the logits are finite and not degenerate; q/k/v and gate/up are fused; every
/// FP8 layer runs on our kernels.
#[test]
fn cuda_random_weights_are_deterministic_per_seed() -> Result<()> {
    const NAME: &str = "cuda_random_weights_are_deterministic_per_seed";
    let dev = kernels_device_or_skip!(NAME);
    let cfg = DecoderConfig {
        hidden_size: 1024,
        intermediate_size: 2816,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(2),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    };
    let logits = |seed: u64| -> Result<Vec<f32>> {
        let mut m = DecoderModel::random(&cfg, &dev, seed, &ModelOptions::with_mode(LinearMode::Fp8))?;
        assert!(m.projections_fused(), "random GPU weights are built fused");
        assert_providers(NAME, &m)?;
        let ids = Tensor::new(prompt().as_slice(), &dev)?.unsqueeze(0)?;
        m.forward(&ids, 0)?.flatten_all()?.to_vec1::<f32>()
    };
    let (a, b, c) = (logits(5)?, logits(5)?, logits(6)?);
    assert!(a.iter().all(|v| v.is_finite()), "finite logits");
    assert!(a == b, "same seed, same logits");
    assert!(a != c, "another seed, other logits");
    let mean = a.iter().sum::<f32>() / a.len() as f32;
    let var = a.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / a.len() as f32;
    assert!(var > 1e-6, "logits spread (variance {var})");
    Ok(())
}

/// Greedy decoding with launch-ahead (the next step enqueued before the ids are read back
/// asynchronously) produces exactly the tokens of a plain synchronous loop, and stops at an EOS
/// id although one more step was already on the device.
#[test]
fn cuda_launch_ahead_generation_equals_a_synchronous_loop() -> Result<()> {
    const NAME: &str = "cuda_launch_ahead_generation_equals_a_synchronous_loop";
    let dev = kernels_device_or_skip!(NAME);
    let dir = toy_checkpoint(&small_cfg())?;
    let mut model = load(dir.path(), &dev, &ModelOptions::default())?;
    assert_providers(NAME, &model)?;
    let (batch, steps) = (3usize, 10usize);
    let mut greedy = Sampler::greedy();
    assert!(launches_ahead(&dev, &greedy), "greedy decoding on CUDA launches ahead");
    let gen = generate(&mut model, &prompt(), batch, steps, &mut greedy, &[], &mut |_, _| {})?;
    assert!(gen.launched_ahead, "greedy decoding on CUDA launches ahead");
    assert_eq!(gen.step_times.len(), steps - 1);
    assert_eq!(gen.enqueue_times.len(), steps - 1);

    // Reference: forward, argmax, read, feed — one step at a time.
    model.clear_kv_cache();
    let ids: Vec<u32> = (0..batch).flat_map(|_| prompt()).collect();
    let mut next = Tensor::from_vec(ids, (batch, prompt().len()), &dev)?;
    let mut pos = 0;
    let mut want = vec![Vec::new(); batch];
    for _ in 0..steps {
        let logits = model.forward(&next, pos)?;
        pos += next.dim(1)?;
        let sampled = Sampler::greedy().sample(&logits)?;
        for (b, id) in sampled.to_vec1::<u32>()?.into_iter().enumerate() {
            want[b].push(id);
        }
        next = sampled.unsqueeze(1)?;
    }
    assert_eq!(gen.tokens, want, "launch-ahead tokens equal the synchronous loop's");

    // Stop at the id of step 3: the tokens up to its first occurrence (greedy sequences are
    // identical).
    let eos = want[0][3];
    let first = want[0].iter().position(|&t| t == eos).expect("present");
    let mut seen = Vec::new();
    let stopped = generate(&mut model, &prompt(), batch, steps, &mut greedy, &[eos], &mut |s, _| seen.push(s))?;
    for toks in &stopped.tokens {
        assert_eq!(toks[..], want[0][..=first], "stops after the first EOS id");
    }
    assert_eq!(seen, (0..=first).collect::<Vec<_>>(), "on_step once per read step");
    Ok(())
}
