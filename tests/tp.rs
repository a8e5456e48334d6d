//! Tensor parallelism on CPU threads (`DecoderModel::shard` with `collective::ThreadGroup`): a
//! toy language model split over 2 ranks gives every rank the same logits, within the FP8
//! path's rounding of the one-rank model's (each rank's o and down partials are rounded to the
//! GEMM's bf16 output before the sum), and the same greedy text over 64 steps; one rank through
//! the same code path is the model itself, bit for bit; splits that do not divide the heads, and
//! layers that are not FP8, are refused.

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::collective::{Collective, ThreadGroup};
use candle_fp8::models::{generate, DecoderConfig, DecoderModel, LinearMode, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;

const CORPUS: &str =
    "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with one step. ";

/// A tiny Qwen3 (8 query / 2 kv heads of 128, hidden 256, intermediate 512): every width
/// splits over 2 ranks at whole 128-blocks.
fn cfg() -> DecoderConfig {
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

fn load(dir: &std::path::Path, mode: LinearMode) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let opts = ModelOptions::with_mode(mode);
    DecoderModel::load(&cfg(), ck.var_builder(DType::F32, &Device::Cpu), &|m| ck.is_quantized(m), &opts)
}

/// Every position's logits `[T][vocab]` and the greedy tokens after the prompt.
type Run = (Vec<Vec<f32>>, Vec<u32>);

/// Every position's logits and 64 greedy tokens after the prompt.
fn run(m: &mut DecoderModel, prompt: &[u32]) -> Result<Run> {
    m.clear_kv_cache();
    let ids = Tensor::new(prompt, &Device::Cpu)?.unsqueeze(0)?;
    let logits = m.forward_all(&ids, 0)?.squeeze(0)?.to_vec2::<f32>()?;
    m.clear_kv_cache();
    let g = generate(m, prompt, 1, 64, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
    Ok((logits, g.tokens[0].clone()))
}

/// `model` split over `world` ranks on as many threads; each rank's result.
fn on_ranks(model: &DecoderModel, world: usize, prompt: &[u32]) -> Result<Vec<Run>> {
    let handles: Vec<_> = ThreadGroup::new(world)?
        .into_iter()
        .map(|g| {
            let (model, prompt) = (model.clone(), prompt.to_vec());
            std::thread::spawn(move || -> Result<_> {
                let comm: Arc<dyn Collective> = Arc::new(g);
                let mut m = model.shard(comm)?;
                assert_eq!(m.tensor_parallel_world(), world);
                run(&mut m, &prompt)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
}

/// `(rms, max)` of |a − b| over every position and token.
fn diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let (mut sq, mut max, mut n) = (0f64, 0f64, 0usize);
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        let d = (*x as f64 - *y as f64).abs();
        sq += d * d;
        max = max.max(d);
        n += 1;
    }
    ((sq / n.max(1) as f64).sqrt(), max)
}

fn bits(v: &[Vec<f32>]) -> Vec<u32> {
    v.iter().flatten().map(|x| x.to_bits()).collect()
}

#[test]
fn two_ranks_decode_like_one() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, &CORPUS.repeat(4))?;
    let mut whole = load(dir.path(), LinearMode::Fp8)?;
    let prompt: Vec<u32> = "the quick brown fox jumps".bytes().map(u32::from).collect();
    let (want, want_tokens) = run(&mut whole, &prompt)?;
    let text = String::from_utf8_lossy(&want_tokens.iter().map(|&t| t as u8).collect::<Vec<_>>()).into_owned();
    println!("one rank: {text:?}");

    // One rank through the same code path: the model itself.
    let one = on_ranks(&whole, 1, &prompt)?;
    assert_eq!(bits(&one[0].0), bits(&want), "world 1: logits differ from the unsplit model");
    assert_eq!(one[0].1, want_tokens, "world 1: tokens");

    let two = on_ranks(&whole, 2, &prompt)?;
    assert_eq!(bits(&two[0].0), bits(&two[1].0), "the ranks' logits differ");
    assert_eq!(two[0].1, two[1].1, "the ranks' tokens differ");
    // Against one rank: what moves is the o and down outputs, each rank's partial rounded to
    // bf16 before the sum (≤ 2⁻⁸ of it), which moves an e4m3 code of the next layer's input
    // here and there. Bounded like two FP8 runs of the model (`gpu::LogitBounds`): twice the
    // FP8 quantization noise of these logits (the f32 reference model against the dense one),
    // in RMS and (× 1.25) in the largest difference.
    let (noise_rms, noise_max) =
        diff(&run(&mut whole.to_reference()?, &prompt)?.0, &run(&mut whole.to_dense()?, &prompt)?.0);
    let (rms, max) = diff(&two[0].0, &want);
    println!("2 ranks vs 1: |Δlogit| rms {rms:.5}, max {max:.4}; FP8 noise rms {noise_rms:.5}, max {noise_max:.4}");
    assert!(max > 0.0, "2 ranks: bit-identical logits, the partial sums did not change anything?");
    assert!(rms <= 2.0 * noise_rms && max <= 2.5 * noise_max, "2 ranks vs 1 beyond two FP8 runs' noise");
    assert_eq!(two[0].1, want_tokens, "2 ranks: greedy tokens over 64 steps");
    Ok(())
}

#[test]
fn splits_that_do_not_fit_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, CORPUS)?;
    let m = load(dir.path(), LinearMode::Fp8)?;
    let shard = |m: &DecoderModel, world: usize| -> String {
        let g: Arc<dyn Collective> = Arc::new(ThreadGroup::new(world).unwrap().remove(0));
        m.shard(g).expect_err("must be refused").to_string()
    };
    // 2 kv heads over 4 ranks; 8 query heads over 3.
    let e = shard(&m, 4);
    assert!(e.contains("2 kv heads") && e.contains("4 ranks"), "{e}");
    let e = shard(&m, 3);
    assert!(e.contains("8 query heads") && e.contains("3 ranks"), "{e}");
    // The dense baseline's linears are not split.
    let e = shard(&load(dir.path(), LinearMode::Bf16)?, 2);
    assert!(e.contains("not a blocked-FP8 layer") && e.contains("qkv_proj"), "{e}");
    // A shard is not split again.
    let g: Arc<dyn Collective> = Arc::new(ThreadGroup::new(1)?.remove(0));
    let once = m.shard(g.clone())?;
    assert!(once.shard(g).unwrap_err().to_string().contains("already"));
    Ok(())
}
