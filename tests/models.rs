//! The decoder models on the CPU: tiny checkpoints written through our own quantization path
//! and loaded through the real checkpoint loader, and — the reference that is not the model
//! itself — Hugging Face transformers' logits of tiny Llama / Qwen2 / Qwen3 models and of an FP8
//! checkpoint written by torch (tests/fixtures).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::models::{compare_greedy, generate, DecoderConfig, DecoderModel, LinearMode, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_random_checkpoint;
use std::collections::HashMap;
use std::path::Path;

fn small_cfg() -> DecoderConfig {
    // The embedded default architecture, with 2 layers to keep debug-mode tests fast.
    DecoderConfig { num_hidden_layers: 2, ..DecoderConfig::tiny() }
}

fn load(dir: &Path, opts: &ModelOptions) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let cfg = DecoderConfig::from_json(&ck.config_json().to_string())?;
    let vb = ck.var_builder(DType::F32, &Device::Cpu);
    DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), opts)
}

fn write(cfg: &DecoderConfig, not_convert: &[&str]) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    write_random_checkpoint(dir.path(), cfg, 7, not_convert)?;
    Ok(dir)
}

fn prompt() -> Vec<u32> {
    "The quick brown fox".bytes().map(u32::from).collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
}

fn rms(a: &Tensor) -> Result<f32> {
    a.sqr()?.mean_all()?.sqrt()?.to_scalar::<f32>()
}

#[test]
fn tiny_checkpoint_loads_and_decodes_deterministically() -> Result<()> {
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    let ck = Checkpoint::open(dir.path())?;
    assert!(ck.quantization().is_some(), "the tiny checkpoint is FP8");
    let mut model = load(dir.path(), &ModelOptions::default())?;
    assert!(model.projections_fused());
    assert!(model.linear_kinds().iter().filter(|(n, _)| n != "lm_head").all(|(_, k)| *k == "fp8"));
    let run = |model: &mut DecoderModel, sampler: Sampler| -> Result<Vec<Vec<u32>>> {
        let mut s = sampler;
        Ok(generate(model, &prompt(), 2, 12, &mut s, &[], &mut |_, _| {})?.tokens)
    };
    let a = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    let b = run(&mut model, Sampler::new(0.8, 0.9, 42))?;
    assert_eq!(a, b, "same seed, same tokens");
    assert_eq!(a[0].len(), 12);
    assert!(a.iter().flatten().all(|&t| (t as usize) < cfg.vocab_size));
    let g1 = run(&mut model, Sampler::greedy())?;
    // A freshly loaded model gives the same greedy tokens.
    let mut again = load(dir.path(), &ModelOptions::default())?;
    let g2 = run(&mut again, Sampler::greedy())?;
    assert_eq!(g1, g2);
    assert_eq!(g1[0], g1[1], "greedy: identical sequences in a batch");
    Ok(())
}

#[test]
fn kv_cache_decode_equals_full_recompute() -> Result<()> {
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    for mode in [LinearMode::Bf16, LinearMode::Fp8] {
        let mut model = load(dir.path(), &ModelOptions::with_mode(mode))?;
        let mut reference = model.clone();
        let seq: Vec<u32> = "Hello, KV cache!".bytes().map(u32::from).collect();
        let pre = 5;
        model.set_kv_capacity(8); // forces one reallocation with copy along the way
        let mut logits = vec![model.forward(&Tensor::new(&seq[..pre], &Device::Cpu)?.unsqueeze(0)?, 0)?];
        for (i, &t) in seq.iter().enumerate().skip(pre) {
            logits.push(model.forward(&Tensor::new(&[t], &Device::Cpu)?.unsqueeze(0)?, i)?);
        }
        assert_eq!(model.kv_len(), seq.len());
        for (j, inc) in logits.iter().enumerate() {
            let n = pre + j;
            reference.clear_kv_cache();
            let full = reference.forward(&Tensor::new(&seq[..n], &Device::Cpu)?.unsqueeze(0)?, 0)?;
            let d = max_abs_diff(inc, &full)?;
            let scale = rms(&full)?;
            let mean = (inc - &full)?.abs()?.mean_all()?.to_scalar::<f32>()?;
            match mode {
                // Dense: the same arithmetic up to f32 summation order.
                LinearMode::Bf16 => assert!(d < 1e-4 * scale, "{mode:?} prefix {n}: max |Δ| {d} vs logit rms {scale}"),
                // FP8: a 1e-7 difference in attention (batched vs one-row softmax) can flip the
                // e4m3 rounding of one activation in a later layer: a rare jump of one e4m3 step.
                LinearMode::Fp8 => {
                    assert!(d < 1e-1 * scale, "{mode:?} prefix {n}: max |Δ| {d} vs logit rms {scale}");
                    assert!(mean < 2e-2 * scale, "{mode:?} prefix {n}: mean |Δ| {mean} vs logit rms {scale}");
                }
            }
        }
        // A wrong offset is an error, not silent garbage.
        assert!(model.forward(&Tensor::new(&[1u32], &Device::Cpu)?.unsqueeze(0)?, 3).is_err());
    }
    Ok(())
}

/// A prompt prefilled in chunks against the KV cache (`ModelOptions::prefill_chunk`: 1, 3 and 7
/// tokens, and uneven last chunks) gives the logits of one pass at every position, with the
/// bounds of `kv_cache_decode_equals_full_recompute` (the same arithmetic up to f32 summation
/// order; FP8: a rare e4m3 step where that order flips a code), and the same KV cache length.
#[test]
fn chunked_prefill_equals_one_pass() -> Result<()> {
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    let seq: Vec<u32> = "Chunked prefill: the same logits, bounded memory.".bytes().map(u32::from).collect();
    let ids = Tensor::new(&seq[..], &Device::Cpu)?.unsqueeze(0)?;
    for mode in [LinearMode::Bf16, LinearMode::Fp8] {
        let mut whole = load(dir.path(), &ModelOptions::with_mode(mode))?;
        let want = whole.forward_all(&ids, 0)?;
        let want_last = whole.forward(&ids.narrow(1, 0, seq.len() - 1)?, 0)?;
        for chunk in [1, 3, 7] {
            let mut chunked = load(dir.path(), &ModelOptions::with_mode(mode).prefill_chunk(chunk))?;
            let got = chunked.forward_all(&ids, 0)?;
            assert_eq!(got.dims(), want.dims());
            assert_eq!(chunked.kv_len(), seq.len());
            chunked.clear_kv_cache();
            let got_last = chunked.forward(&ids.narrow(1, 0, seq.len() - 1)?, 0)?;
            for (what, g, w) in [("every position", &got, &want), ("last position", &got_last, &want_last)] {
                let (d, scale) = (max_abs_diff(g, w)?, rms(w)?);
                let mean = (g - w)?.abs()?.mean_all()?.to_scalar::<f32>()?;
                let ctx = format!("{mode:?} chunk {chunk} {what}: max |Δ| {d}, mean {mean}, logit rms {scale}");
                match mode {
                    LinearMode::Bf16 => assert!(d < 1e-4 * scale, "{ctx}"),
                    LinearMode::Fp8 => assert!(d < 1e-1 * scale && mean < 2e-2 * scale, "{ctx}"),
                }
            }
        }
    }
    Ok(())
}

#[test]
fn fused_projections_equal_unfused() -> Result<()> {
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    for mode in [LinearMode::Fp8, LinearMode::Bf16] {
        let mut fused = load(dir.path(), &ModelOptions::with_mode(mode).fuse_projections(true))?;
        let mut split = load(dir.path(), &ModelOptions::with_mode(mode).fuse_projections(false))?;
        assert!(fused.projections_fused() && !split.projections_fused());
        let ids = Tensor::new(prompt(), &Device::Cpu)?.unsqueeze(0)?;
        let a = fused.forward(&ids, 0)?;
        let b = split.forward(&ids, 0)?;
        let d = max_abs_diff(&a, &b)?;
        assert!(d <= 1e-4 * rms(&b)?, "{mode:?}: fused vs unfused max |Δ| {d}");
        let step = Tensor::new(&[65u32], &Device::Cpu)?.unsqueeze(0)?;
        let d = max_abs_diff(&fused.forward(&step, ids.dim(1)?)?, &split.forward(&step, ids.dim(1)?)?)?;
        assert!(d <= 1e-4 * rms(&b)?, "{mode:?}: decode step fused vs unfused max |Δ| {d}");
    }
    Ok(())
}

#[test]
fn tied_and_untied_lm_head() -> Result<()> {
    // Same seed: every tensor but lm_head is identical between the two checkpoints.
    let tied_cfg = DecoderConfig { tie_word_embeddings: true, ..small_cfg() };
    let tied = write(&tied_cfg, &[])?;
    let untied = write(&small_cfg(), &[])?;
    // Make the untied lm_head a copy of the embeddings: both models must then agree.
    let path = untied.path().join("model.safetensors");
    let mut ts: HashMap<String, Tensor> = candle_core::safetensors::load(&path, &Device::Cpu)?;
    assert!(ts.contains_key("lm_head.weight"));
    let emb = ts["model.embed_tokens.weight"].clone();
    ts.insert("lm_head.weight".into(), emb);
    candle_core::safetensors::save(&ts, &path)?;
    let tied_ts = candle_core::safetensors::load(tied.path().join("model.safetensors"), &Device::Cpu)?;
    assert!(!tied_ts.contains_key("lm_head.weight"), "a tied checkpoint stores no lm_head");

    let mut a = load(tied.path(), &ModelOptions::default())?;
    let mut b = load(untied.path(), &ModelOptions::default())?;
    assert!(a.config().tie_word_embeddings && !b.config().tie_word_embeddings);
    let ids = Tensor::new(prompt(), &Device::Cpu)?.unsqueeze(0)?;
    let (la, lb) = (a.forward(&ids, 0)?, b.forward(&ids, 0)?);
    assert_eq!(la.dims(), &[1, 384]);
    assert!(max_abs_diff(&la, &lb)? <= 1e-5 * rms(&lb)?);
    Ok(())
}

#[test]
fn modules_to_not_convert_load_dense() -> Result<()> {
    let cfg = small_cfg();
    let dir = write(&cfg, &["model.layers.1.mlp.down_proj", "model.layers.0.self_attn.k_proj"])?;
    let model = load(dir.path(), &ModelOptions::default())?;
    let kinds: HashMap<String, &str> = model.linear_kinds().into_iter().collect();
    assert_eq!(kinds["1.down"], "dense");
    assert_eq!(kinds["0.down"], "fp8");
    assert_eq!(kinds["lm_head"], "dense");
    // Layer 0's q/k/v mix FP8 and dense: they stay unfused, each in its own form.
    assert_eq!(kinds["0.qkv[0]"], "fp8");
    assert_eq!(kinds["0.qkv[1]"], "dense");
    assert_eq!(kinds["0.qkv[2]"], "fp8");
    assert_eq!(kinds["1.qkv"], "fp8");
    // And the model runs, matching its fully dequantized twin closely.
    let mut m = model;
    let mut d = m.to_dense()?;
    let r = compare_greedy(&mut m, &mut d, &prompt(), 4)?;
    assert!(r.max_abs_dlogit < 0.25 * r.ref_logit_rms as f32, "{r:?}");
    Ok(())
}

#[test]
fn random_weights_build_the_architecture_deterministically() -> Result<()> {
    let cfg = small_cfg();
    let mut a = DecoderModel::random(&cfg, &Device::Cpu, 3, &ModelOptions::default())?;
    let mut b = DecoderModel::random(&cfg, &Device::Cpu, 3, &ModelOptions::default())?;
    let ids = Tensor::new(prompt(), &Device::Cpu)?.unsqueeze(0)?;
    let (la, lb) = (a.forward(&ids, 0)?, b.forward(&ids, 0)?);
    assert_eq!(max_abs_diff(&la, &lb)?, 0.0);
    let s = rms(&la)?;
    assert!(s.is_finite() && s > 0.1 && s < 10.0, "well-conditioned logits, rms {s}");
    let (fp8, dense, _) = a.weight_bytes();
    assert!(fp8 >= cfg.linear_params() && dense > 0);
    Ok(())
}

fn report(r: &candle_fp8::models::AccuracyReport) -> String {
    format!(
        "top-1 agreement {}/{} = {:.2}%, max |Δlogit| {:.4}, mean {:.5}, ref rms {:.3}, min margin at disagreement {:?}",
        r.top1_agree,
        r.steps,
        100.0 * r.agreement(),
        r.max_abs_dlogit,
        r.mean_abs_dlogit,
        r.ref_logit_rms,
        r.min_margin_at_disagreement
    )
}

#[test]
fn fp8_matches_dequantized_reference_top1() -> Result<()> {
    // The accuracy target: FP8 GEMMs (activations quantized per token per 128) against the
    // same weights dequantized, teacher-forced over greedy steps, on the embedded toy LM
    // (random decoder + bigram lm_head: confident predictions like a trained model).
    let cfg = small_cfg();
    let dir = tempfile::tempdir()?;
    candle_fp8::testing::checkpoints::write_toy_lm_checkpoint(dir.path(), &cfg, 7, TOY_CORPUS)?;
    let mut fp8 = load(dir.path(), &ModelOptions::default())?;
    let mut reference = load(dir.path(), &ModelOptions::with_mode(LinearMode::Bf16))?;
    let r = compare_greedy(&mut fp8, &mut reference, &prompt(), 100)?;
    eprintln!("toy LM: {}", report(&r));
    assert!(r.agreement() >= 0.995, "{}", report(&r));
    assert!(r.mean_abs_dlogit < 0.03 * r.ref_logit_rms, "{}", report(&r));
    Ok(())
}

#[test]
fn fp8_logit_error_on_a_flat_random_model() -> Result<()> {
    // A purely random model has near-tied logits, so top-1 flips under any perturbation; what
    // must hold is the size of the perturbation: e4m3 activations (3 mantissa bits) give ≈2%
    // relative logit noise.
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    let mut fp8 = load(dir.path(), &ModelOptions::default())?;
    let mut reference = fp8.to_dense()?;
    let r = compare_greedy(&mut fp8, &mut reference, &prompt(), 16)?;
    eprintln!("flat random: {}", report(&r));
    assert!(r.mean_abs_dlogit < 0.03 * r.ref_logit_rms, "{}", report(&r));
    assert!((r.max_abs_dlogit as f64) < 0.25 * r.ref_logit_rms, "{}", report(&r));
    Ok(())
}

const TOY_CORPUS: &str = "the quick brown fox jumps over the lazy dog. a toy language model speaks in bigrams, \
    and its words follow one another like beads on a string. ";

#[test]
fn fp8_kernels_match_the_f32_reference_on_a_flat_random_model() -> Result<()> {
    // Against the reference computed from the *same* quantized operands (dequantized, f32
    // matmul), the FP8 path differs only by summation order and output rounding: even a flat
    // random model with near-tied logits must agree on (almost) every greedy token.
    let cfg = small_cfg();
    let dir = write(&cfg, &[])?;
    let mut fp8 = load(dir.path(), &ModelOptions::default())?;
    let mut reference = fp8.to_reference()?;
    assert!(reference.linear_kinds().iter().any(|(_, k)| *k == "fp8-reference"));
    let r = compare_greedy(&mut fp8, &mut reference, &prompt(), 48)?;
    eprintln!("kernel vs f32 reference: {}", report(&r));
    assert!(r.agreement() >= 0.995, "{}", report(&r));
    assert!(r.mean_abs_dlogit < 1e-3 * r.ref_logit_rms, "{}", report(&r));
    Ok(())
}

/// The per-position verdict of `compare_greedy`: strict argmax equality, agreement up to an exact
/// tie at the top of the reference, and the reference logit gap between the two choices.
#[test]
fn top1_outcome_counts_reference_ties() {
    use candle_fp8::models::top1_outcome;
    // Same argmax.
    assert_eq!(top1_outcome(&[0.1, 2.0, 0.3], &[0.0, 1.5, 1.0]), (true, true, 0.0));
    // The reference ties tokens 1 and 2 at the top; the test picks 2: not strict, but a tie.
    assert_eq!(top1_outcome(&[0.1, 0.5, 0.9], &[0.0, 1.5, 1.5]), (false, true, 0.0));
    // A real disagreement: the test's choice is 0.25 below the reference's best.
    assert_eq!(top1_outcome(&[0.1, 0.5, 0.9], &[0.0, 1.5, 1.25]), (false, false, 0.25));
}

/// `generate`'s loop on the CPU (synchronous reads): greedy tokens equal a plain
/// forward/argmax loop, one step time and one enqueue time per step after the first, `on_step`
/// once per step in order, an EOS id stops every sequence after it, and no tokens are asked for
/// nothing.
#[test]
fn generate_matches_a_plain_loop_and_stops_at_eos() -> Result<()> {
    let dir = write(&small_cfg(), &[])?;
    let mut model = load(dir.path(), &ModelOptions::default())?;
    let steps = 6;
    let mut seen = Vec::new();
    let gen = generate(&mut model, &prompt(), 2, steps, &mut Sampler::greedy(), &[], &mut |s, ids| {
        assert_eq!(ids.len(), 2);
        seen.push(s)
    })?;
    assert!(!gen.launched_ahead, "the CPU reads each step's ids before the next launch");
    assert_eq!(seen, (0..steps).collect::<Vec<_>>());
    assert_eq!((gen.step_times.len(), gen.enqueue_times.len()), (steps - 1, steps - 1));
    assert_eq!(gen.prompt_len, prompt().len());

    model.clear_kv_cache();
    let mut next = Tensor::new(prompt(), &Device::Cpu)?.unsqueeze(0)?;
    let (mut pos, mut want) = (0, Vec::new());
    for _ in 0..steps {
        let logits = model.forward(&next, pos)?;
        pos += next.dim(1)?;
        let id = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
        want.push(id);
        next = Tensor::new(&[id], &Device::Cpu)?.unsqueeze(0)?;
    }
    assert_eq!(gen.tokens, vec![want.clone(), want.clone()]);

    let eos = want[2];
    let first = want.iter().position(|&t| t == eos).unwrap();
    let stopped = generate(&mut model, &prompt(), 2, steps, &mut Sampler::greedy(), &[eos], &mut |_, _| {})?;
    assert_eq!(stopped.tokens, vec![want[..=first].to_vec(); 2], "stops after the first EOS id");
    assert_eq!(stopped.step_times.len(), first);

    let none = generate(&mut model, &prompt(), 2, 0, &mut Sampler::greedy(), &[], &mut |_, _| panic!("no step"))?;
    assert!(none.tokens.iter().all(|t| t.is_empty()) && none.step_times.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Against Hugging Face transformers (tests/fixtures, written by tests/fixtures/make_fixtures.py)
// ---------------------------------------------------------------------------------------------

/// A fixture model directory and its `reference.json`.
fn fixture(name: &str) -> Result<(std::path::PathBuf, serde_json::Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(dir.join("reference.json"))?;
    Ok((dir, serde_json::from_str(&text).map_err(candle_core::Error::wrap)?))
}

fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

/// `reference.json`'s `logits` `[T, vocab]` as f32 (the values round-trip through f32).
fn ref_logits(r: &serde_json::Value) -> Vec<Vec<f32>> {
    r["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

/// Max |a − b| over a position's logits, and the reference's rms there.
fn row_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let rms = (b.iter().map(|y| y * y).sum::<f32>() / b.len() as f32).sqrt();
    (d, rms)
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0
        as u32
}

/// The logits of every position of `ids` through the model: one prefill of the first half,
/// then one decode step per remaining id (so the KV-cache path is what is compared).
fn prefill_then_steps(model: &mut DecoderModel, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
    model.clear_kv_cache();
    let half = ids.len() / 2;
    let all = model.forward_all(&Tensor::new(&ids[..half], &Device::Cpu)?.unsqueeze(0)?, 0)?;
    let mut out: Vec<Vec<f32>> = all.squeeze(0)?.to_vec2::<f32>()?;
    for (i, &t) in ids.iter().enumerate().skip(half) {
        out.push(model.forward(&Tensor::new(&[t], &Device::Cpu)?.unsqueeze(0)?, i)?.squeeze(0)?.to_vec1::<f32>()?);
    }
    Ok(out)
}

/// The dense f32 model equals transformers' float32 forward on tiny random Llama (Llama 3 RoPE
/// scaling over all three frequency bands, tied embeddings, GQA 2:1, head_dim 64), Qwen2 (q/k/v
/// biases, hidden 192: K % 128 = 64) and Qwen3 (q/k norms, head_dim 128 ≠ hidden / heads), at
/// every position, through the prefill and the KV-cache steps; greedy continuations agree.
///
/// Tolerance: both sides compute in f32 and differ only in summation order. The logits are
/// O(1) sums over a 2-layer network of width ≤ 192: each dot product of length ≤ 192 carries an
/// order-dependent error of at most ~192 · 2^-24 relative to the sum of |terms|, which through
/// two layers stays below 1e-4 of the logit scale; 2e-4 · (rms + 1) is a factor of 2 above that,
/// while a wrong RoPE base, a missing bias, a skipped q/k norm or a GQA mix-up moves logits by
/// ≥ 1e-2 (the fixtures' randomised norms and biases make each of those visible).
#[test]
fn tiny_models_match_transformers() -> Result<()> {
    for name in ["tiny-llama", "tiny-qwen2", "tiny-qwen3"] {
        let (dir, r) = fixture(name)?;
        let ck = Checkpoint::open(&dir)?;
        let mut model = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
        assert!(model.linear_kinds().iter().all(|(_, k)| *k == "dense"), "{name}: an f32 checkpoint loads dense");
        let ids = u32s(&r["input_ids"]);
        let want = ref_logits(&r);
        let got = prefill_then_steps(&mut model, &ids)?;
        for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
            let (d, rms) = row_diff(g, w);
            assert!(d <= 2e-4 * (rms + 1.0), "{name} position {pos}: max |Δlogit| {d} (reference rms {rms})");
            assert_eq!(argmax(g), argmax(w), "{name} position {pos}");
        }
        let gen = generate(&mut model, &ids, 1, 8, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
        assert_eq!(gen.tokens[0], u32s(&r["greedy_new_ids"]), "{name}: greedy continuation");
    }
    Ok(())
}

/// The FP8 checkpoint written by torch (two shards, bf16 and f32 scales, partial edge blocks,
/// lm_head unconverted) against transformers running its dequantized weights in float32:
///
/// - dequantized dense path (`LinearMode::Bf16` on the CPU keeps f32): the same weights, so the
///   f32 summation-order bound of `tiny_models_match_transformers` applies;
/// - FP8 path (activations quantized per token per 128): each GEMM input is rounded to e4m3 (3
///   mantissa bits: relative error uniform in ±2^-4, rms 2^-4/√3 ≈ 0.036 per element, and the
///   dot products inherit ≈ that relative rms). The 2 layers × 4 GEMMs add up (independently)
///   to ≈ 0.036 · √8 ≈ 0.10 of the logit rms; the bound is 0.2 of the rms, and the top-1 must
///   agree wherever the reference's top-2 gap is wider than 3σ of that error.
#[test]
fn fp8_checkpoint_written_by_torch_matches_transformers() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-fp8")?;
    let ck = Checkpoint::open(&dir)?;
    let ids = u32s(&r["input_ids"]);
    let want = ref_logits(&r);
    let mut fp8 = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
    let kinds: HashMap<String, &str> = fp8.linear_kinds().into_iter().collect();
    assert_eq!((kinds["0.qkv"], kinds["1.down"], kinds["lm_head"]), ("fp8", "fp8", "dense"));
    let mut dense = fp8.to_dense()?;
    for (pos, (g, w)) in prefill_then_steps(&mut dense, &ids)?.iter().zip(&want).enumerate() {
        let (d, rms) = row_diff(g, w);
        assert!(d <= 2e-4 * (rms + 1.0), "dequantized, position {pos}: max |Δlogit| {d} (rms {rms})");
    }
    let got = prefill_then_steps(&mut fp8, &ids)?;
    let gaps: Vec<f64> = r["top2_gap"].as_array().unwrap().iter().map(|g| g.as_f64().unwrap()).collect();
    let (mut sq, mut n, mut checked) = (0f64, 0usize, 0usize);
    for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
        let (_, rms) = row_diff(g, w);
        let e: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>() / g.len() as f64;
        sq += e / (rms as f64).powi(2);
        n += 1;
        // Top-1 must agree where the reference's top-2 gap exceeds 3σ of the difference of two
        // logits' errors (σ = 0.1 · rms per logit, as derived above): 3 · √2 · 0.1 · rms.
        if gaps[pos] > 3.0 * 2f64.sqrt() * 0.1 * rms as f64 {
            assert_eq!(argmax(g), argmax(w), "FP8 activations, position {pos} (reference gap {})", gaps[pos]);
            checked += 1;
        }
    }
    assert!(checked >= n / 2, "only {checked} of {n} positions have a gap wide enough to judge top-1");
    let rel = (sq / n as f64).sqrt();
    eprintln!("FP8 activations vs transformers (dequantized weights): rms |Δlogit| / rms logit = {rel:.4}, top-1 judged at {checked}/{n}");
    assert!(rel <= 0.2, "FP8 activations: rms |Δlogit| / rms logit = {rel:.4}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Qwen3-MoE (tests/fixtures/tiny-qwen3-moe and -fp8: layer 0 a dense MLP, layer 1 a mixture of
// 8 experts, top-2, norm_topk_prob true; make_fixtures.py steps `moe`, `moefp8`)
// ---------------------------------------------------------------------------------------------

/// The fixture's config with `norm_topk_prob` set, and the model of `dir` loaded with it.
fn load_moe(dir: &Path, norm_topk_prob: bool, opts: &ModelOptions) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let mut cfg = DecoderConfig::from_json(&ck.config_json().to_string())?;
    cfg.norm_topk_prob = norm_topk_prob;
    let vb = ck.var_builder(opts.dtype_for(&Device::Cpu), &Device::Cpu);
    DecoderModel::load(&cfg, vb, &|m| ck.is_quantized(m), opts)
}

fn f32_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

/// Every position's logits within the f32 summation-order bound of
/// `tiny_models_match_transformers` (2e-4 · (rms + 1)), and the same argmax.
fn assert_logits_match(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: positions");
    for (pos, (g, w)) in got.iter().zip(want).enumerate() {
        let (d, rms) = row_diff(g, w);
        assert!(d <= 2e-4 * (rms + 1.0), "{what}, position {pos}: max |Δlogit| {d} (reference rms {rms})");
        assert_eq!(argmax(g), argmax(w), "{what}, position {pos}");
    }
}

/// The dense f32 Qwen3-MoE equals transformers' float32 forward at every position (prefill and
/// KV-cache steps, gate/up fused per expert or not) and its greedy continuation; the layers
/// are dense or sparse by the config's `decoder_sparse_step`. Tolerance: that of
/// `tiny_models_match_transformers` — both sides compute in f32, and the router's top-2 is
/// separated from the third expert by ≥ 0.003 in probability at every token (the fixture
/// checks it), far above f32 noise, so both sides route every token alike.
#[test]
fn tiny_moe_matches_transformers() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-moe")?;
    let ids = u32s(&r["input_ids"]);
    for fuse in [true, false] {
        let mut model = load_moe(&dir, true, &ModelOptions::default().fuse_projections(fuse))?;
        assert_eq!(model.config().family()?, candle_fp8::models::Family::Qwen3Moe);
        assert!(model.moe_experts(0).is_none(), "layer 0: (0 + 1) % decoder_sparse_step 2 != 0, a dense MLP");
        let moe = model.moe_experts(1).expect("layer 1 is a mixture of experts");
        assert_eq!((moe.num_experts(), moe.experts_per_token(), moe.norm_topk_prob()), (8, 2, true));
        let kinds: HashMap<String, &str> = model.linear_kinds().into_iter().collect();
        assert!(kinds.values().all(|k| *k == "dense"), "an f32 checkpoint loads dense");
        assert!(
            kinds.contains_key("0.down") && !kinds.contains_key("1.down") && kinds.contains_key("1.experts.7.down")
        );
        assert_eq!(model.projections_fused(), fuse);
        let got = prefill_then_steps(&mut model, &ids)?;
        assert_logits_match(&format!("tiny-qwen3-moe (fuse {fuse})"), &got, &ref_logits(&r));
        let gen = generate(&mut model, &ids, 1, 8, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
        assert_eq!(gen.tokens[0], u32s(&r["greedy_new_ids"]), "greedy continuation");
    }
    Ok(())
}

/// Layer 1's MoE block on the input transformers gave it: the same experts for every token, the
/// same routing weights (f32 softmax, renormalised or not), the same output; with
/// `norm_topk_prob` off the weights are the raw top-2 probabilities (they sum to < 1) and the
/// output moves by far more than the tolerance, as transformers' does.
#[test]
fn moe_block_routes_like_transformers() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-moe")?;
    let b = &r["moe_block"];
    assert_eq!(b["layer"], 1);
    let x = f32_rows(&b["input"]);
    let (t, h) = (x.len(), x[0].len());
    let x = Tensor::from_vec(x.concat(), (t, h), &Device::Cpu)?;
    let want_ids: Vec<Vec<u32>> = b["top_k_ids"].as_array().unwrap().iter().map(u32s).collect();
    let mut outputs = Vec::new();
    for (norm, want) in [(true, b), (false, &b["norm_topk_prob_false"])] {
        let model = load_moe(&dir, norm, &ModelOptions::default())?;
        let moe = model.moe_experts(1).unwrap();
        let route = moe.route(&x)?;
        let want_w = f32_rows(&want["top_k_weights"]);
        for (tok, (got, (ids, ws))) in route.iter().zip(want_ids.iter().zip(&want_w)).enumerate() {
            assert_eq!(&got.iter().map(|g| g.0).collect::<Vec<_>>(), ids, "norm {norm}, token {tok}: experts");
            for ((_, g), w) in got.iter().zip(ws) {
                assert!((g - w).abs() <= 1e-6, "norm {norm}, token {tok}: weight {g} vs transformers {w}");
            }
            let sum: f32 = got.iter().map(|g| g.1).sum();
            assert!(
                if norm { (sum - 1.0).abs() < 1e-6 } else { sum < 0.999 },
                "norm {norm}, token {tok}: weights sum {sum}"
            );
        }
        let y = moe.forward(&x)?.to_vec2::<f32>()?;
        let want_y = f32_rows(&want["output"]);
        let scale = want_y.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
        let d = y.iter().flatten().zip(want_y.iter().flatten()).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(d <= 1e-5 * (1.0 + scale), "norm {norm}: block output max |Δ| {d} (max |y| {scale})");
        outputs.push(y);
    }
    let moved =
        outputs[0].iter().flatten().zip(outputs[1].iter().flatten()).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(moved > 1e-2, "renormalisation must change the block's output (max |Δ| {moved})");
    Ok(())
}

/// `norm_topk_prob` off: the whole model equals transformers' logits with it off, and differs
/// from the renormalised reference by far more than the tolerance (the flag is honoured, not
/// ignored).
#[test]
fn moe_norm_topk_prob_off_matches_transformers() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-moe")?;
    let ids = u32s(&r["input_ids"]);
    let off = &r["norm_topk_prob_false"];
    let mut model = load_moe(&dir, false, &ModelOptions::default())?;
    let got = prefill_then_steps(&mut model, &ids)?;
    assert_logits_match("tiny-qwen3-moe, norm_topk_prob false", &got, &ref_logits(off));
    let on = ref_logits(&r);
    let apart = got.iter().zip(&on).map(|(g, w)| row_diff(g, w).0).fold(0f32, f32::max);
    assert!(apart > 0.05, "norm_topk_prob off vs the renormalised reference: max |Δlogit| only {apart}");
    let gen = generate(&mut model, &ids, 1, 8, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
    assert_eq!(gen.tokens[0], u32s(&off["greedy_new_ids"]));
    Ok(())
}

/// The FP8 Qwen3-MoE checkpoint written by torch (experts' gate/up/down FP8 and fused per
/// expert, the router bf16 and in modules_to_not_convert) against transformers on its
/// dequantized weights, with the bounds of `fp8_checkpoint_written_by_torch_matches_transformers`:
/// the dequantized dense path to f32 summation order; the FP8 path (activations quantized per
/// token per 128) within 0.2 of the logit rms, top-1 where the reference's gap is wide. The
/// router runs on unquantized activations; an FP8-perturbed hidden state may still send a token
/// whose 2nd and 3rd experts are close to another expert — part of the FP8 error measured here.
#[test]
fn fp8_moe_checkpoint_written_by_torch_matches_transformers() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-moe-fp8")?;
    let ids = u32s(&r["input_ids"]);
    let want = ref_logits(&r);
    let ck = Checkpoint::open(&dir)?;
    assert!(!ck.is_quantized("model.layers.1.mlp.gate"), "the router is in modules_to_not_convert");
    let mut fp8 = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
    let kinds: HashMap<String, &str> = fp8.linear_kinds().into_iter().collect();
    // q|k|v stay split (k is 64 wide, not whole 128-row blocks); gate|up of width 128 fuse, in
    // the dense layer and in every expert.
    for k in [
        "0.qkv[1]",
        "0.gate_up",
        "0.down",
        "1.qkv[0]",
        "1.experts.0.gate_up",
        "1.experts.7.gate_up",
        "1.experts.7.down",
    ] {
        assert_eq!(kinds.get(k).copied(), Some("fp8"), "{k}");
    }
    assert_eq!(kinds["lm_head"], "dense");
    assert_eq!(kinds.len(), 2 * 4 + 2 + 8 * 2 + 1, "q, k, v, o per layer, the dense MLP's 2, 8 experts' 2, lm_head");
    let (_, dense_bytes, _) = fp8.weight_bytes();
    assert!(dense_bytes >= 8 * 64 * 4, "the f32 router counts among the dense bytes");
    let mut dense = fp8.to_dense()?;
    assert_logits_match("tiny-qwen3-moe-fp8, dequantized", &prefill_then_steps(&mut dense, &ids)?, &want);
    let got = prefill_then_steps(&mut fp8, &ids)?;
    let gaps: Vec<f64> = r["top2_gap"].as_array().unwrap().iter().map(|g| g.as_f64().unwrap()).collect();
    let (mut sq, mut checked) = (0f64, 0usize);
    for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
        let (_, rms) = row_diff(g, w);
        let e: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>() / g.len() as f64;
        sq += e / (rms as f64).powi(2);
        if gaps[pos] > 3.0 * 2f64.sqrt() * 0.1 * rms as f64 {
            assert_eq!(argmax(g), argmax(w), "FP8 activations, position {pos} (reference gap {})", gaps[pos]);
            checked += 1;
        }
    }
    let n = got.len();
    let rel = (sq / n as f64).sqrt();
    eprintln!("MoE FP8 activations vs transformers (dequantized weights): rms |Δlogit| / rms logit = {rel:.4}, top-1 judged at {checked}/{n}");
    // Which positions are judged depends on the reference alone: 10 of this fixture's 24 have a
    // top-2 gap that wide (its logits are flatter than tiny-qwen3's).
    assert!(checked >= n / 3, "only {checked} of {n} positions have a gap wide enough to judge top-1");
    assert!(rel <= 0.2, "FP8 activations: rms |Δlogit| / rms logit = {rel:.4}");
    Ok(())
}

/// Routing is a pure function of its input: the same call twice, a second model loaded from
/// the same files, and the block on its own all give the same bits; a batch of two sequences
/// routes each like that sequence alone (no token reaches another's row).
#[test]
fn moe_routing_is_deterministic() -> Result<()> {
    let (dir, r) = fixture("tiny-qwen3-moe-fp8")?;
    let ids = u32s(&r["input_ids"]);
    let input = Tensor::new(&ids[..], &Device::Cpu)?.unsqueeze(0)?;
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect())
    };
    let mut a = load_moe(&dir, true, &ModelOptions::default())?;
    let mut b = load_moe(&dir, true, &ModelOptions::default())?;
    let first = a.forward_all(&input, 0)?;
    a.clear_kv_cache();
    assert_eq!(bits(&first)?, bits(&a.forward_all(&input, 0)?)?, "the same model twice");
    assert_eq!(bits(&first)?, bits(&b.forward_all(&input, 0)?)?, "a second load");
    let x = Tensor::from_vec(
        f32_rows(&fixture("tiny-qwen3-moe")?.1["moe_block"]["input"]).concat(),
        (24, 64),
        &Device::Cpu,
    )?;
    let moe = a.moe_experts(1).unwrap();
    let (r1, r2) = (moe.route(&x)?, moe.route(&x)?);
    assert!(r1.iter().flatten().zip(r2.iter().flatten()).all(|(p, q)| p.0 == q.0 && p.1.to_bits() == q.1.to_bits()));
    assert_eq!(bits(&moe.forward(&x)?)?, bits(&moe.forward(&x)?)?);
    // Two different sequences in one batch, each against itself alone (dequantized: the dense
    // f32 path, where only the summation order of batched matmuls can differ).
    let mut dense = a.to_dense()?;
    let other: Vec<u32> = ids.iter().rev().copied().collect();
    let batch = Tensor::from_vec([&ids[..], &other[..]].concat(), (2, ids.len()), &Device::Cpu)?;
    let both = dense.forward_all(&batch, 0)?;
    for (row, seq) in [&ids, &other].into_iter().enumerate() {
        dense.clear_kv_cache();
        let alone = dense.forward_all(&Tensor::new(&seq[..], &Device::Cpu)?.unsqueeze(0)?, 0)?;
        let d = max_abs_diff(&both.narrow(0, row, 1)?, &alone)?;
        assert!(d <= 1e-4 * (rms(&alone)? + 1.0), "sequence {row}: batched vs alone max |Δ| {d}");
    }
    Ok(())
}

/// A checkpoint without one expert's tensor, or without a router, fails to load with an error
/// that names the missing tensor (f32 and FP8 checkpoints).
#[test]
fn moe_missing_tensors_are_named() -> Result<()> {
    let cases = [
        (
            "tiny-qwen3-moe",
            vec!["model.layers.1.mlp.experts.5.up_proj.weight"],
            "model.layers.1.mlp.experts.5.up_proj.weight",
        ),
        ("tiny-qwen3-moe", vec!["model.layers.1.mlp.gate.weight"], "model.layers.1.mlp.gate.weight"),
        (
            "tiny-qwen3-moe-fp8",
            vec![
                "model.layers.1.mlp.experts.3.down_proj.weight",
                "model.layers.1.mlp.experts.3.down_proj.weight_scale_inv",
            ],
            "model.layers.1.mlp.experts.3.down_proj.weight",
        ),
    ];
    for (name, drop, named) in cases {
        let (src, _) = fixture(name)?;
        let dir = tempfile::tempdir()?;
        let mut ts: HashMap<String, Tensor> = HashMap::new();
        for f in std::fs::read_dir(&src)? {
            let p = f?.path();
            if p.extension().is_some_and(|e| e == "safetensors") {
                ts.extend(candle_core::safetensors::load(&p, &Device::Cpu)?);
            }
        }
        for d in &drop {
            assert!(ts.remove(*d).is_some(), "{name} has {d}");
        }
        candle_core::safetensors::save(&ts, dir.path().join("model.safetensors"))?;
        std::fs::copy(src.join("config.json"), dir.path().join("config.json"))?;
        let ck = Checkpoint::open(dir.path())?;
        let e = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})
            .expect_err("a missing tensor must fail the load");
        let msg = format!("{e}");
        assert!(msg.contains(named), "{name} without {drop:?}: the error does not name {named}: {msg}");
    }
    Ok(())
}

/// A small Qwen3-MoE with random FP8 weights (dense, sparse, dense layers): deterministic in
/// the seed, well-conditioned; the fused elementwise path runs the dense layers only and equals
/// the composed path; experts fused or not agree; the weights count every expert.
#[test]
fn random_moe_builds_the_architecture() -> Result<()> {
    let cfg = DecoderConfig {
        model_type: Some("qwen3_moe".into()),
        architectures: None,
        num_hidden_layers: 3,
        num_experts: 4,
        num_experts_per_tok: 2,
        moe_intermediate_size: 128,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: vec![0, 2],
        ..DecoderConfig::tiny()
    };
    let opts = ModelOptions::default();
    let mut a = DecoderModel::random(&cfg, &Device::Cpu, 5, &opts)?;
    let mut b = DecoderModel::random(&cfg, &Device::Cpu, 5, &opts)?;
    assert!(a.moe_experts(0).is_none() && a.moe_experts(1).is_some() && a.moe_experts(2).is_none());
    assert_eq!(a.fused_elementwise_layers()?, 2, "the two dense layers take the fused elementwise path");
    assert!(a.projections_fused());
    let ids = Tensor::new(prompt(), &Device::Cpu)?.unsqueeze(0)?;
    let (la, lb) = (a.forward(&ids, 0)?, b.forward(&ids, 0)?);
    assert_eq!(max_abs_diff(&la, &lb)?, 0.0);
    let s = rms(&la)?;
    assert!(s.is_finite() && s > 0.1 && s < 10.0, "well-conditioned logits, rms {s}");
    let step = Tensor::new(&[65u32], &Device::Cpu)?.unsqueeze(0)?;
    let sa = a.forward(&step, ids.dim(1)?)?;
    for (what, mut other) in [
        ("composed", a.with_fused_kernels(false)),
        ("unfused experts", {
            let c = DecoderModel::random(&cfg, &Device::Cpu, 5, &opts.clone().fuse_projections(false))?;
            assert!(!c.projections_fused());
            c
        }),
    ] {
        let d = max_abs_diff(&other.forward(&ids, 0)?, &la)?;
        assert!(d <= 1e-4 * s, "{what}: prompt max |Δ| {d}");
        let d = max_abs_diff(&other.forward(&step, ids.dim(1)?)?, &sa)?;
        assert!(d <= 1e-4 * s, "{what}: decode step max |Δ| {d}");
    }
    let (fp8, dense, _) = a.weight_bytes();
    assert!(fp8 >= cfg.linear_params() && dense >= 4 * 256 * 4);
    assert_eq!(cfg.linear_params(), 3 * (256 * 12 * 64 + 8 * 64 * 256) + 2 * 3 * 256 * 768 + 4 * 3 * 256 * 128);
    Ok(())
}
