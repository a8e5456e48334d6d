//! Tensor parallelism on CPU threads (`DecoderModel::shard` with `collective::ThreadGroup`): a
//! toy language model split over 2 ranks gives every rank the same logits, within the FP8
//! path's rounding of the one-rank model's (each rank's o and down partials are rounded to the
//! GEMM's bf16 output before the sum), and the same greedy text over 64 steps; one rank through
//! the same code path is the model itself, bit for bit; splits that do not divide the heads, and
//! layers that are not FP8, are refused.
//!
//! Shard-wise loading (`ModelOptions::tensor_parallel`) gives each rank of 2, 3 and 4 exactly
//! what loading the whole model and sharding it gives (weights, scales, embedding rows, logits);
//! the vocab-parallel embedding and lm_head (bf16, FP8 and tied, over uneven vocabulary ranges
//! with a partial last block) give the same logits bits and greedy tokens as replicated ones; a
//! vocabulary with fewer blocks than ranks is refused; a rank whose load fails makes the other
//! ranks fail instead of waiting forever.
//!
//! Expert parallelism (mixture-of-experts layers, whole experts per rank): the ranks' block
//! outputs add up to the whole block's (bit for bit at top-2, within f32 reassociation at
//! top-4; even and uneven splits); a Qwen3-MoE over 2 and 4 ranks gives every rank the same
//! logits, within the FP8 noise of one rank's; shares generated rank by rank are the cut ones;
//! more ranks than experts are refused.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::collective::{Collective, ThreadGroup};
use candle_fp8::models::{generate, DecoderConfig, DecoderModel, LinearMode, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::{write_random_checkpoint, write_toy_lm_checkpoint};
use candle_fp8::AnyLinear;

#[path = "common/tp_toy.rs"]
mod tp_toy;
use tp_toy::{cfg, CORPUS};

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

/// 12 query and 12 kv heads of 128, intermediate 1536: splits over 2, 3 and 4 ranks at whole
/// 128-blocks. A vocabulary of 600: 5 row blocks, the last one partial, so the vocab ranges are
/// uneven for every world size here.
fn wide_cfg() -> DecoderConfig {
    DecoderConfig {
        vocab_size: 600,
        hidden_size: 256,
        intermediate_size: 1536,
        num_hidden_layers: 2,
        num_attention_heads: 12,
        num_key_value_heads: Some(12),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    }
}

/// Which lm_head a test checkpoint has.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Head {
    /// bf16 (as real FP8 checkpoints keep it): the toy language model's bigram head.
    Bf16,
    /// Quantized to blocked FP8 like the other linears.
    Fp8,
    /// `tie_word_embeddings`: the embedding.
    Tied,
}

/// A checkpoint of `wide_cfg()` (with `vocab` tokens) with `head` in `dir`.
fn write_wide(dir: &Path, head: Head, vocab: usize) -> Result<()> {
    let cfg = DecoderConfig { vocab_size: vocab, tie_word_embeddings: head == Head::Tied, ..wide_cfg() };
    match head {
        Head::Tied => write_random_checkpoint(dir, &cfg, 5, &[]),
        Head::Bf16 | Head::Fp8 => {
            write_toy_lm_checkpoint(dir, &cfg, 5, &CORPUS.repeat(4))?;
            if head == Head::Fp8 {
                quantize_lm_head(dir)?;
            }
            Ok(())
        }
    }
}

/// Rewrites the checkpoint in `dir` with its lm_head in blocked FP8 (and no longer listed as
/// unconverted).
fn quantize_lm_head(dir: &Path) -> Result<()> {
    let file = dir.join("model.safetensors");
    let mut ts = candle_core::safetensors::load(&file, &Device::Cpu)?;
    let w = ts.remove("lm_head.weight").expect("lm_head.weight").to_dtype(DType::F32)?;
    let (q, s) = candle_fp8::quantize_weight(&w)?;
    ts.insert("lm_head.weight".into(), q);
    ts.insert("lm_head.weight_scale_inv".into(), s);
    candle_core::safetensors::save(&ts, &file)?;
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?).expect("config.json");
    cfg["quantization_config"]["modules_to_not_convert"] = serde_json::json!([]);
    std::fs::write(&path, cfg.to_string())?;
    Ok(())
}

/// The bits of `t`'s values (every e4m3, bf16 and f32 value is exact in f32).
fn tensor_bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?.into_iter().map(f32::to_bits).collect())
}

/// A weight tensor's name, shape and bits.
type Weight = (String, Vec<usize>, Vec<u32>);

/// Every weight tensor of `m` (linears' weights, scales and biases, the embedding).
fn weights(m: &DecoderModel) -> Result<Vec<Weight>> {
    let mut out = vec![("embed".to_string(), m.embedding().dims().to_vec(), tensor_bits(m.embedding())?)];
    for (name, l) in m.linears() {
        let ts: Vec<(&str, Tensor)> = match l {
            AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) => {
                let mut v = vec![("weight", f.weight().clone()), ("scale", f.weight_scale_inv().clone())];
                v.extend(f.bias().map(|b| ("bias", b.clone())));
                v
            }
            AnyLinear::Dense(d) => {
                let mut v = vec![("weight", d.weight().clone())];
                v.extend(d.bias().map(|b| ("bias", b.clone())));
                v
            }
        };
        for (what, t) in ts {
            out.push((format!("{name}.{what}"), t.dims().to_vec(), tensor_bits(&t)?));
        }
    }
    Ok(out)
}

/// Every position's logits and `steps` greedy tokens after the prompt.
fn run_steps(m: &mut DecoderModel, prompt: &[u32], steps: usize) -> Result<Run> {
    m.clear_kv_cache();
    let ids = Tensor::new(prompt, &Device::Cpu)?.unsqueeze(0)?;
    let logits = m.forward_all(&ids, 0)?.squeeze(0)?.to_vec2::<f32>()?;
    m.clear_kv_cache();
    let g = generate(m, prompt, 1, steps, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
    Ok((logits, g.tokens[0].clone()))
}

/// Runs `f(rank, a, b)` on `world` threads, each with its rank of two groups (two models per rank
/// run their collectives independently); the results in rank order. A rank's panic is raised
/// here with its message; a rank that has not finished after five minutes fails the test
/// instead of blocking it.
fn on_two_groups<T: Send + 'static>(
    world: usize,
    f: impl Fn(usize, Arc<dyn Collective>, Arc<dyn Collective>) -> Result<T> + Send + Sync + 'static,
) -> Result<Vec<T>> {
    let f = Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    for (r, (a, b)) in ThreadGroup::new(world)?.into_iter().zip(ThreadGroup::new(world)?).enumerate() {
        let (f, tx) = (f.clone(), tx.clone());
        std::thread::spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(r, Arc::new(a), Arc::new(b))));
            let _ = tx.send((r, res));
        });
    }
    let mut out: Vec<Option<Result<T>>> = (0..world).map(|_| None).collect();
    let mut panics = Vec::new();
    for _ in 0..world {
        let (r, res) = rx.recv_timeout(Duration::from_secs(300)).expect("a rank hangs");
        match res {
            Ok(res) => out[r] = Some(res),
            Err(p) => {
                let msg =
                    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                panics.push(format!("rank {r}: {}", msg.unwrap_or_default()));
            }
        }
    }
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    out.into_iter().map(|r| r.expect("every rank answered")).collect()
}

#[test]
fn shard_wise_loading_is_the_sharded_model() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_wide(dir.path(), Head::Bf16, 600)?;
    let ck = Arc::new(Checkpoint::open(dir.path())?);
    let opts = ModelOptions::default();
    let whole = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &opts, &mut |_, _| {})?;
    let (whole_fp8, _, _) = whole.weight_bytes();
    let mut prompt: Vec<u32> = vec![599, 130, 260, 400, 7];
    prompt.extend("the quick brown fox".bytes().map(u32::from));
    for world in [2, 3, 4] {
        let (ck, whole, prompt, opts) = (ck.clone(), whole.clone(), prompt.clone(), opts.clone());
        let ranks = on_two_groups(world, move |r, a, b| {
            let mut done = 0;
            let mut loaded =
                DecoderModel::from_checkpoint(&ck, &Device::Cpu, &opts.clone().tensor_parallel(a), &mut |d, _| {
                    done = d
                })?;
            assert_eq!(done, 2, "rank {r}: progress over every layer");
            let mut cut = whole.shard(b)?;
            assert_eq!(loaded.tensor_parallel_world(), world);
            assert_eq!(loaded.vocab_range(), cut.vocab_range(), "rank {r}: vocab range");
            let (wa, wb) = (weights(&loaded)?, weights(&cut)?);
            assert_eq!(wa.len(), wb.len(), "rank {r}: tensors");
            for (x, y) in wa.iter().zip(&wb) {
                assert_eq!((&x.0, &x.1), (&y.0, &y.1), "rank {r}: names and shapes");
                assert!(x.2 == y.2, "world {world} rank {r}: {} differs", x.0);
            }
            let fp8 = loaded.weight_bytes().0;
            Ok((run_steps(&mut loaded, &prompt, 8)?, run_steps(&mut cut, &prompt, 8)?, fp8, loaded.vocab_range()))
        })?;
        let mut covered = 0;
        for (r, (a, b, fp8, (start, len))) in ranks.iter().enumerate() {
            assert_eq!(bits(&a.0), bits(&b.0), "world {world} rank {r}: logits");
            assert_eq!(a.1, b.1, "world {world} rank {r}: tokens");
            assert_eq!(bits(&a.0), bits(&ranks[0].0 .0), "world {world}: rank {r}'s logits differ from rank 0's");
            // The rank's FP8 share: an equal part of every layer (the lm_head is bf16).
            assert_eq!(*fp8 * world, whole_fp8, "world {world} rank {r}: FP8 bytes");
            assert_eq!(*start, covered, "world {world}: vocab ranges in order without gaps");
            covered += len;
        }
        assert_eq!(covered, 600, "world {world}: the ranges cover the vocabulary");
    }
    Ok(())
}

#[test]
fn vocab_parallel_embedding_and_lm_head_are_exact() -> Result<()> {
    // Ids from every rank's range (and both sides of each boundary) for every world size here.
    let mut prompt: Vec<u32> = vec![599, 5, 127, 128, 255, 256, 300, 383, 384, 512, 450];
    prompt.extend("a journey of a thousand".bytes().map(u32::from));
    for head in [Head::Bf16, Head::Fp8, Head::Tied] {
        let dir = tempfile::tempdir()?;
        write_wide(dir.path(), head, 600)?;
        let ck = Arc::new(Checkpoint::open(dir.path())?);
        let whole = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
        let kind = whole.linear_kinds().into_iter().find(|(n, _)| n == "lm_head").map(|(_, k)| k);
        let want_kind = if head == Head::Fp8 { "fp8" } else { "dense" };
        assert_eq!(kind, Some(want_kind), "{head:?}: lm_head");
        let steps = if head == Head::Bf16 { 64 } else { 16 };
        for world in [2, 3, 4] {
            let (ck, p) = (ck.clone(), prompt.clone());
            let ranks = on_two_groups(world, move |r, a, b| {
                let split = ModelOptions::default().tensor_parallel(a);
                let replicated = ModelOptions::default().vocab_parallel(false).tensor_parallel(b);
                let mut split = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &split, &mut |_, _| {})?;
                let mut repl = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &replicated, &mut |_, _| {})?;
                let (start, len) = split.vocab_range();
                assert_eq!(split.embedding().dims(), &[len, 256], "{head:?} world {world} rank {r}: embedding rows");
                assert_eq!(repl.vocab_range(), (0, 600));
                assert!(len < 600 && (start % 128 == 0), "{head:?} world {world} rank {r}: range ({start}, {len})");
                let (other_split, other_repl) = (split.weight_bytes().2, repl.weight_bytes().2);
                assert!(other_split < other_repl, "{head:?}: the rank holds less of the embedding");
                Ok((run_steps(&mut split, &p, steps)?, run_steps(&mut repl, &p, steps)?))
            })?;
            for (r, (split, repl)) in ranks.iter().enumerate() {
                assert_eq!(split.0.len(), prompt.len());
                assert_eq!(split.0[0].len(), 600, "{head:?} world {world}: gathered logits cover the vocabulary");
                assert_eq!(bits(&split.0), bits(&repl.0), "{head:?} world {world} rank {r}: logits");
                assert_eq!(split.1, repl.1, "{head:?} world {world} rank {r}: greedy tokens");
            }
        }
    }
    Ok(())
}

#[test]
fn a_vocabulary_with_fewer_blocks_than_ranks_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // 256 tokens: two 128-row blocks for four ranks.
    write_wide(dir.path(), Head::Bf16, 256)?;
    let ck = Checkpoint::open(dir.path())?;
    let whole = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
    let comm: Arc<dyn Collective> = Arc::new(ThreadGroup::new(4)?.remove(0));
    let opts = ModelOptions::default().tensor_parallel(comm.clone());
    for e in [
        DecoderModel::from_checkpoint(&ck, &Device::Cpu, &opts, &mut |_, _| {}).unwrap_err().to_string(),
        whole.shard(comm.clone()).unwrap_err().to_string(),
    ] {
        assert!(e.contains("256 tokens") && e.contains("4 ranks") && e.contains("vocab_parallel(false)"), "{e}");
    }
    // Replicated, it loads.
    let m = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &opts.vocab_parallel(false), &mut |_, _| {})?;
    assert_eq!((m.vocab_range(), m.tensor_parallel_world()), ((0, 256), 4));
    Ok(())
}

#[test]
fn a_rank_that_fails_to_load_fails_the_others() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_wide(dir.path(), Head::Bf16, 600)?;
    let good = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    for (r, g) in ThreadGroup::new(3)?.into_iter().enumerate() {
        let (tx, good) = (tx.clone(), good.clone());
        std::thread::spawn(move || {
            let res = (|| -> Result<Vec<u32>> {
                // Rank 1's checkpoint is missing.
                let ck = Checkpoint::open(if r == 1 { good.join("missing") } else { good })?;
                let opts = ModelOptions::default().tensor_parallel(Arc::new(g));
                let mut m = DecoderModel::from_checkpoint(&ck, &Device::Cpu, &opts, &mut |_, _| {})?;
                Ok(run_steps(&mut m, &[116, 104, 101], 4)?.1)
            })();
            let _ = tx.send((r, res.map_err(|e| e.to_string())));
        });
    }
    let mut errors = vec![String::new(); 3];
    for _ in 0..3 {
        let (r, res) = rx.recv_timeout(Duration::from_secs(300)).expect("a rank waits forever for the failed one");
        errors[r] = res.expect_err("every rank fails");
    }
    assert!(errors[1].contains("missing"), "rank 1: its own error: {}", errors[1]);
    for r in [0, 2] {
        assert!(errors[r].contains("rank 1 of 3 left the group"), "rank {r}: {}", errors[r]);
    }
    Ok(())
}

// Expert parallelism: a mixture-of-experts layer's experts spread over the ranks in whole
// experts, the router on every rank.

/// A tiny Qwen3-MoE: 8 query / 4 kv heads of 128, hidden 256, every layer a mixture of
/// `experts` experts of width 128 with `top_k` per token, vocabulary 512 (4 blocks).
fn moe_cfg(experts: usize, top_k: usize) -> DecoderConfig {
    DecoderConfig {
        model_type: Some("qwen3_moe".into()),
        architectures: Some(vec!["Qwen3MoeForCausalLM".into()]),
        vocab_size: 512,
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(4),
        head_dim: Some(128),
        num_experts: experts,
        num_experts_per_tok: top_k,
        moe_intermediate_size: 128,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: Vec::new(),
        ..DecoderConfig::tiny()
    }
}

/// Each rank's block of layer 0 runs its own experts only; the ranks' outputs, added in rank
/// order in f32 as the all-reduce adds them, are the whole block's: bit for bit with two
/// experts per token (each token's two contributions are added once, in the same order),
/// within f32 reassociation with four. Uneven splits (6 experts over 4 ranks) included.
#[test]
fn experts_split_over_ranks_add_up_to_the_block() -> Result<()> {
    let mut rng = candle_fp8::testing::Rng::new(3);
    let x = Tensor::from_vec(rng.normal_vec_f32(9 * 256, 1.0), (9, 256), &Device::Cpu)?;
    for (experts, top_k, world) in [(8, 2, 2), (8, 2, 4), (6, 2, 4), (8, 4, 2)] {
        let case = format!("{experts} experts, top-{top_k}, {world} ranks");
        let model = DecoderModel::random(&moe_cfg(experts, top_k), &Device::Cpu, 5, &ModelOptions::default())?;
        let whole = model.moe_experts(0).expect("layer 0 is a mixture of experts");
        assert!(whole.is_grouped(), "{case}: the whole block runs grouped");
        let want = whole.forward(&x)?;
        let mut sum: Option<Tensor> = None;
        let mut held = Vec::new();
        for (rank, g) in ThreadGroup::new(world)?.into_iter().enumerate() {
            let shard = model.shard(Arc::new(g))?;
            let block = shard.moe_experts(0).expect("a mixture of experts on every rank");
            assert_eq!(block.num_experts(), experts, "{case}: rank {rank} routes over every expert");
            assert_eq!(block.local_experts(), rank * experts / world..(rank + 1) * experts / world, "{case}");
            assert!(block.is_grouped(), "{case}: rank {rank}'s experts run grouped");
            held.extend(block.local_experts());
            let y = block.forward(&x)?;
            sum = Some(match sum {
                None => y,
                Some(s) => (s + y)?,
            });
        }
        assert_eq!(held, (0..experts).collect::<Vec<_>>(), "{case}: every expert on exactly one rank");
        let got = sum.expect("ranks");
        if top_k == 2 {
            assert_eq!(tensor_bits(&got)?, tensor_bits(&want)?, "{case}: the ranks' sum is not the block's");
        } else {
            let d = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            println!("{case}: max |Δ| {d:e} of max |y| {scale:e}");
            assert!(d <= 4.0 * f32::EPSILON * scale, "{case}: {d} beyond f32 reassociation of {scale}");
        }
    }
    Ok(())
}

/// A Qwen3-MoE split over 2 ranks (8 experts) and 4 (6 experts, uneven): the same logits on
/// every rank, within the FP8 noise of one rank's (the heads' o partials are rounded to bf16
/// before their sum, as for a dense model; the experts' partials only reassociate).
#[test]
fn expert_parallel_ranks_decode_like_one() -> Result<()> {
    let prompt: Vec<u32> = (0..12u32).map(|i| i * 37 % 512).collect();
    for (experts, world) in [(8, 2), (6, 4)] {
        let model = DecoderModel::random(&moe_cfg(experts, 2), &Device::Cpu, 7, &ModelOptions::default())?;
        let (want, _) = run(&mut model.clone(), &prompt)?;
        let ranks = on_ranks(&model, world, &prompt)?;
        for (r, x) in ranks.iter().enumerate().skip(1) {
            assert_eq!(bits(&x.0), bits(&ranks[0].0), "{world} ranks: rank {r}'s logits differ from rank 0's");
            assert_eq!(x.1, ranks[0].1, "{world} ranks: rank {r}'s tokens differ from rank 0's");
        }
        let (noise_rms, noise_max) =
            diff(&run(&mut model.to_reference()?, &prompt)?.0, &run(&mut model.to_dense()?, &prompt)?.0);
        let (rms, max) = diff(&ranks[0].0, &want);
        println!(
            "{experts} experts over {world} ranks vs 1: |Δlogit| rms {rms:.5}, max {max:.4}; FP8 noise rms \
             {noise_rms:.5}, max {noise_max:.4}"
        );
        assert!(rms <= 2.0 * noise_rms && max <= 2.5 * noise_max, "{world} ranks vs 1 beyond two FP8 runs' noise");
    }
    Ok(())
}

/// More ranks than experts: refused, naming the layer and both numbers.
#[test]
fn fewer_experts_than_ranks_are_refused() -> Result<()> {
    let model = DecoderModel::random(&moe_cfg(2, 1), &Device::Cpu, 1, &ModelOptions::default())?;
    let g = ThreadGroup::new(4)?.into_iter().next().expect("rank 0");
    let e = model.shard(Arc::new(g)).unwrap_err().to_string();
    assert!(e.contains("layer 0") && e.contains("2 experts") && e.contains("4 ranks"), "{e}");
    Ok(())
}

/// Random weights generated as a rank's share (`ModelOptions::tensor_parallel`: each layer made
/// and cut in turn) are the share `shard` cuts from the whole random model, experts included.
#[test]
fn expert_parallel_random_weights_load_shard_wise() -> Result<()> {
    let cfg = moe_cfg(6, 2);
    let whole = DecoderModel::random(&cfg, &Device::Cpu, 7, &ModelOptions::default())?;
    let prompt: Vec<u32> = (0..12u32).map(|i| i * 37 % 512).collect();
    let ranks = on_two_groups(4, move |r, a, b| {
        let opts = ModelOptions::default().tensor_parallel(a);
        let mut loaded = DecoderModel::random(&cfg, &Device::Cpu, 7, &opts)?;
        let mut cut = whole.shard(b)?;
        let held = |m: &DecoderModel| m.moe_experts(1).map(|e| e.local_experts());
        assert_eq!(held(&loaded), held(&cut), "rank {r}: experts held");
        assert!(weights(&loaded)? == weights(&cut)?, "rank {r}: the generated share differs from the cut one");
        Ok((run_steps(&mut loaded, &prompt, 4)?, run_steps(&mut cut, &prompt, 4)?))
    })?;
    for (r, (a, b)) in ranks.iter().enumerate() {
        assert_eq!(bits(&a.0), bits(&b.0), "rank {r}: logits");
        assert_eq!(a.1, b.1, "rank {r}: tokens");
    }
    Ok(())
}
