//! Decode speed on the CPU: our blocked-FP8 model against candle's own Llama
//! (`candle-transformers`) running the same weights in f32.
//!
//! ```text
//! cargo run --release --example cpu_vs_candle                 # SmolLM2-135M-Instruct
//! cargo run --release --example cpu_vs_candle -- --tokens 64 --runs 3
//! ```
//!
//! Both sides decode the same prompt greedily with a KV cache, one token at a time; the report
//! gives load time, time to first token and the time per output token (median of `--runs`),
//! and whether the two greedy continuations agree (they may part where FP8 rounding flips a
//! near tie).

mod common;

use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor, D};
use candle_fp8::checkpoint::{GgufCheckpoint, SMOLLM2};
use candle_fp8::models::{DecoderModel, ModelOptions};
use candle_transformers::models::llama as candle_llama;
use clap::Parser;
use std::time::Instant;

#[derive(Parser, Debug)]
struct Args {
    /// Prompt text.
    #[arg(long, default_value = "The capital of France is")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Measured runs per model (the median TPOT is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where converted models are kept (default `~/.cache/candle-fp8`).
    #[arg(long)]
    cache_dir: Option<std::path::PathBuf>,
}

/// (TTFT, per-token times, tokens) of one greedy run.
type Run = (f64, Vec<f64>, Vec<u32>);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Times a greedy run: `forward(ids, position)` returns the last position's logits `[1, vocab]`
/// (the prompt first, then one token at a time).
fn greedy(prompt: &[u32], tokens: usize, mut forward: impl FnMut(&[u32], usize) -> Result<Tensor>) -> Result<Run> {
    let t0 = Instant::now();
    let mut logits = forward(prompt, 0)?;
    let mut out = Vec::new();
    let (mut ttft, mut steps) = (0.0, Vec::new());
    let mut last = t0;
    for i in 0..tokens {
        let id = logits.argmax(D::Minus1)?.squeeze(0)?.to_scalar::<u32>()?;
        let now = Instant::now();
        if i == 0 {
            ttft = (now - t0).as_secs_f64() * 1e3;
        } else {
            steps.push((now - last).as_secs_f64() * 1e3);
        }
        last = now;
        out.push(id);
        logits = forward(&[id], prompt.len() + i)?;
    }
    Ok((ttft, steps, out))
}

/// `[1, T]` u32 ids on the CPU.
fn ids(ids: &[u32]) -> Result<Tensor> {
    Ok(Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?)
}

fn ours(model: &mut DecoderModel, prompt: &[u32], tokens: usize) -> Result<Run> {
    model.clear_kv_cache();
    greedy(prompt, tokens, |t, pos| Ok(model.forward(&ids(t)?, pos)?))
}

fn candle(model: &candle_llama::Llama, cfg: &candle_llama::Config, prompt: &[u32], tokens: usize) -> Result<Run> {
    let mut cache = candle_llama::Cache::new(true, DType::F32, cfg, &Device::Cpu)?;
    greedy(prompt, tokens, |t, pos| Ok(model.forward(&ids(t)?, pos, &mut cache)?))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.tokens < 2 || args.runs == 0 {
        bail!("--tokens must be at least 2 and --runs at least 1")
    }
    let cache = common::cache_dir(args.cache_dir.as_deref())?;
    let src = common::open_source(None, &cache)?;
    let prompt = src.text.encode(&args.prompt)?;
    let gguf = GgufCheckpoint::open(SMOLLM2.fetch(&cache)?)?;

    // Ours: the blocked-FP8 checkpoint (f32 activations on the CPU).
    let t = Instant::now();
    let mut fp8 = DecoderModel::from_checkpoint(&src.ckpt, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {})?;
    let load_ours = t.elapsed().as_secs_f64();

    // candle-transformers' Llama: the GGUF's weights dequantized to f32 (the same weights the
    // FP8 checkpoint was converted from), under the Hugging Face names it expects.
    let t = Instant::now();
    let cfg_json = serde_json::to_string(&gguf.config_json()?)?;
    let cfg: candle_llama::LlamaConfig = serde_json::from_str(&cfg_json)?;
    let cfg = cfg.into_config(false);
    let mut tensors = std::collections::HashMap::new();
    for t in gguf.tensors() {
        tensors.insert(t.hf_name.clone(), gguf.load(&t.hf_name, &Device::Cpu)?);
    }
    if !tensors.contains_key("lm_head.weight") {
        tensors.insert("lm_head.weight".into(), tensors["model.embed_tokens.weight"].clone());
    }
    let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    let theirs = candle_llama::Llama::load(vb, &cfg)?;
    let load_theirs = t.elapsed().as_secs_f64();

    let (mut tp_o, mut tp_c, mut tt_o, mut tt_c) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut toks_o, mut toks_c) = (Vec::new(), Vec::new());
    for _ in 0..args.runs {
        let (ttft, mut steps, toks) = ours(&mut fp8, &prompt, args.tokens)?;
        tt_o.push(ttft);
        tp_o.push(median(&mut steps));
        toks_o = toks;
        let (ttft, mut steps, toks) = candle(&theirs, &cfg, &prompt, args.tokens)?;
        tt_c.push(ttft);
        tp_c.push(median(&mut steps));
        toks_c = toks;
    }
    let (o, c) = (median(&mut tp_o), median(&mut tp_c));
    let agree = toks_o.iter().zip(&toks_c).take_while(|(a, b)| a == b).count();
    println!(
        "model     {} (prompt {} tokens, {} generated, {} runs, {} threads)",
        src.label,
        prompt.len(),
        args.tokens,
        args.runs,
        rayon_threads()
    );
    println!("| | load | TTFT | TPOT (median) |");
    println!("|---|---|---|---|");
    println!("| candle-fp8, blocked FP8 | {:.2} s | {:.1} ms | {:.2} ms |", load_ours, median(&mut tt_o), o);
    println!("| candle-transformers Llama, f32 | {:.2} s | {:.1} ms | {:.2} ms |", load_theirs, median(&mut tt_c), c);
    println!("speed-up {:.2}x; greedy continuations agree for the first {agree} of {} tokens", c / o, args.tokens);
    if let common::Text::Hf(tok) = &src.text {
        println!("ours:   {:?}", tok.decode(&toks_o, true)?);
        println!("candle: {:?}", tok.decode(&toks_c, true)?);
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
