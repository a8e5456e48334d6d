//! Qwen3 on CUDA (built only with the `cuda` feature; every test prints a skip reason and
//! passes when no CUDA device can be opened): the tiny checkpoint through the real loader,
//! deterministic decoding, KV-cache decode vs full recompute, fused vs unfused projections,
//! and the FP8 kernels against the f32 reference on the same quantized operands.
//!
//! Activations are bf16 on CUDA, so tolerances are bf16-sized (the CPU suite, tests/qwen3.rs,
//! checks the same properties in f32 with tight bounds).
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::models::{
    compare_greedy, generate, launches_ahead, write_random_checkpoint, LinearMode, DecoderConfig, DecoderModel, ModelOptions, Sampler,
};
use std::path::Path;

fn small_cfg() -> DecoderConfig {
    DecoderConfig { num_hidden_layers: 2, ..DecoderConfig::tiny() }
}

fn load(dir: &Path, dev: &Device, opts: &ModelOptions) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let cfg = DecoderConfig::from_json(&ck.config_json().to_string())?;
    let vb = ck.var_builder(DType::BF16, dev);
    DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), opts)
}

fn checkpoint(cfg: &DecoderConfig) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    write_random_checkpoint(dir.path(), cfg, 7, &[])?;
    Ok(dir)
}

fn prompt() -> Vec<u32> {
    "The quick brown fox".bytes().map(u32::from).collect()
}

/// (max |a − b|, mean |a − b|, rms of b), in f32.
fn diff(a: &Tensor, b: &Tensor) -> Result<(f32, f32, f32)> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let d = (&a - &b)?.abs()?;
    let max = d.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    let mean = d.mean_all()?.to_scalar::<f32>()?;
    let rms = b.sqr()?.mean_all()?.sqrt()?.to_scalar::<f32>()?;
    Ok((max, mean, rms))
}

#[test]
fn cuda_tiny_checkpoint_loads_and_decodes_deterministically() -> Result<()> {
    let dev = gpu_or_skip!("cuda_tiny_checkpoint_loads_and_decodes_deterministically");
    let cfg = small_cfg();
    let dir = checkpoint(&cfg)?;
    let mut model = load(dir.path(), &dev, &ModelOptions::default())?;
    assert!(model.is_fused());
    let run = |model: &mut DecoderModel, mut s: Sampler| -> Result<Vec<Vec<u32>>> {
        Ok(generate(model, &prompt(), 2, 12, &mut s, &[], &mut |_, _| {})?.tokens)
    };
    let a = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    let b = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    assert_eq!(a, b, "same seed, same tokens");
    assert!(a.iter().flatten().all(|&t| (t as usize) < cfg.vocab_size));
    let g1 = run(&mut model, Sampler::greedy())?;
    let mut again = load(dir.path(), &dev, &ModelOptions::default())?;
    assert_eq!(g1, run(&mut again, Sampler::greedy())?, "a fresh load decodes the same greedy tokens");
    assert_eq!(g1[0], g1[1], "greedy: identical sequences in a batch");
    Ok(())
}

#[test]
fn cuda_kv_cache_decode_equals_full_recompute() -> Result<()> {
    let dev = gpu_or_skip!("cuda_kv_cache_decode_equals_full_recompute");
    let dir = checkpoint(&small_cfg())?;
    for mode in [LinearMode::Bf16, LinearMode::Fp8] {
        let mut model = load(dir.path(), &dev, &ModelOptions::with_mode(mode))?;
        let mut reference = model.clone();
        let seq: Vec<u32> = "Hello, KV cache!".bytes().map(u32::from).collect();
        let pre = 5;
        model.set_kv_capacity(8); // forces one reallocation with copy
        let mut logits = vec![model.forward(&Tensor::new(&seq[..pre], &dev)?.unsqueeze(0)?, 0)?];
        for (i, &t) in seq.iter().enumerate().skip(pre) {
            logits.push(model.forward(&Tensor::new(&[t], &dev)?.unsqueeze(0)?, i)?);
        }
        for (j, inc) in logits.iter().enumerate() {
            let n = pre + j;
            reference.clear_kv_cache();
            let full = reference.forward(&Tensor::new(&seq[..n], &dev)?.unsqueeze(0)?, 0)?;
            let (max, mean, rms) = diff(inc, &full)?;
            // bf16 activations: batched and one-row kernels round differently (and, for FP8,
            // may flip one e4m3 rounding downstream).
            assert!(max < 0.15 * rms && mean < 0.03 * rms, "{mode:?} prefix {n}: max {max} mean {mean} rms {rms}");
        }
    }
    Ok(())
}

#[test]
fn cuda_fused_projections_equal_unfused() -> Result<()> {
    let dev = gpu_or_skip!("cuda_fused_projections_equal_unfused");
    let dir = checkpoint(&small_cfg())?;
    for mode in [LinearMode::Fp8, LinearMode::Bf16] {
        let mut fused = load(dir.path(), &dev, &ModelOptions { mode, fuse: true, dtype: None })?;
        let mut split = load(dir.path(), &dev, &ModelOptions { mode, fuse: false, dtype: None })?;
        let ids = Tensor::new(prompt(), &dev)?.unsqueeze(0)?;
        let (max, mean, rms) = diff(&fused.forward(&ids, 0)?, &split.forward(&ids, 0)?)?;
        // Same weights, same per-row arithmetic; only GEMM tiling differs between N sizes.
        assert!(max < 0.05 * rms && mean < 0.01 * rms, "{mode:?}: fused vs unfused max {max} mean {mean} rms {rms}");
    }
    Ok(())
}

#[test]
fn cuda_fp8_kernels_match_the_f32_reference() -> Result<()> {
    let dev = gpu_or_skip!("cuda_fp8_kernels_match_the_f32_reference");
    let dir = checkpoint(&small_cfg())?;
    let mut fp8 = load(dir.path(), &dev, &ModelOptions::default())?;
    let mut reference = fp8.to_reference()?;
    let r = compare_greedy(&mut fp8, &mut reference, &prompt(), 32)?;
    println!(
        "cuda kernel vs f32 reference: top-1 {}/{}, max |Δlogit| {}, mean {}, rms {}",
        r.top1_agree, r.steps, r.max_abs_dlogit, r.mean_abs_dlogit, r.ref_logit_rms
    );
    assert!(r.mean_abs_dlogit < 0.03 * r.ref_logit_rms, "mean |Δlogit| {} vs rms {}", r.mean_abs_dlogit, r.ref_logit_rms);
    Ok(())
}

/// Random weights generated on the GPU (`--random-weights`: our e4m3 kernel, fused projections
/// built in one buffer): the same seed gives the same model (bit-identical logits), another
/// seed another one; the logits are finite and not degenerate; q/k/v and gate/up are fused.
#[test]
fn cuda_random_weights_are_deterministic_per_seed() -> Result<()> {
    let dev = gpu_or_skip!("cuda_random_weights_are_deterministic_per_seed");
    let cfg = DecoderConfig {
        hidden_size: 1024,
        intermediate_size: 2816,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: 2,
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    };
    let logits = |seed: u64| -> Result<Vec<f32>> {
        let mut m = DecoderModel::random(&cfg, &dev, seed, LinearMode::Fp8)?;
        assert!(m.is_fused(), "random GPU weights are built fused");
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
    let dev = gpu_or_skip!("cuda_launch_ahead_generation_equals_a_synchronous_loop");
    let dir = checkpoint(&small_cfg())?;
    let mut model = load(dir.path(), &dev, &ModelOptions::default())?;
    let (batch, steps) = (3usize, 10usize);
    let mut greedy = Sampler::greedy();
    if !launches_ahead(&dev, &greedy) {
        eprintln!("SKIP cuda_launch_ahead_generation_equals_a_synchronous_loop: launch-ahead is off (CANDLE_FP8_LAUNCH_AHEAD)");
        return Ok(());
    }
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

    // Stop at the id of step 3: four tokens per sequence (greedy sequences are identical).
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
