//! Perplexity, mean KL divergence and top-1 agreement of a model in blocked FP8 against its
//! unquantized weights, over a fixed public-domain English text (`tests/fixtures/eval_text.txt`:
//! chapters 1–3 of Jane Austen's *Pride and Prejudice*, 1813).
//!
//! ```text
//! cargo run --release --example eval                                # SmolLM2-135M, CPU
//! cargo run --release --features cuda --example eval -- --device cuda --compare-cpu
//! cargo run --release --example eval -- --model FP8_DIR --baseline BF16_DIR_OR_GGUF
//! ```
//!
//! Rows: the baseline (weights as the source stores them, dequantized: the "bf16" model), FP8
//! weights only (the FP8 checkpoint's weights dequantized, activations not quantized), FP8
//! weights + activations (the model as it runs). Perplexity over non-overlapping windows
//! (`--window`, 1,024 tokens), each run from position 0 without a bos token, the first token of
//! each window not scored; KL(baseline ‖ row) and top-1 agreement per scored position. With
//! `--device cuda --compare-cpu`, the FP8 model on the GPU is also compared with the same model
//! on the CPU (same quantized weights). Exits non-zero when a target is missed (`--max-*`).

mod common;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use candle_fp8::checkpoint::GgufCheckpoint;
use candle_fp8::models::{window_log_probs, DecoderModel, ModelOptions, TextScore as Score};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Perplexity / KL / top-1 of a blocked-FP8 model against its unquantized weights")]
struct Args {
    /// The FP8 checkpoint (directory or hub id). Default: SmolLM2-135M-Instruct in blocked FP8.
    #[arg(long)]
    model: Option<String>,
    /// The unquantized model: a checkpoint directory, a hub id or a GGUF file. Default: the
    /// SmolLM2 GGUF the default model was converted from.
    #[arg(long)]
    baseline: Option<String>,
    /// The text to score.
    #[arg(long)]
    text: Option<PathBuf>,
    /// Score at most this many tokens of the text (default: all).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Tokens per window.
    #[arg(long, default_value_t = 1024)]
    window: usize,
    /// cpu or cuda.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// On cuda: also run the FP8 model on the CPU and compare, with the same activation dtype
    /// (`--dtype`), so that both run the same quantized operands.
    #[arg(long)]
    compare_cpu: bool,
    /// Activation dtype of the models (default: the device's, f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_enum)]
    dtype: Option<common::FloatDtype>,
    /// Where converted models are kept (default `~/.cache/candle-fp8`).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Target: FP8 (weights + activations) perplexity at most this many percent above the baseline's.
    #[arg(long, default_value_t = 5.0)]
    max_dppl_pct: f64,
    /// Target: mean KL(baseline ‖ FP8) at most this.
    #[arg(long, default_value_t = 0.03)]
    max_kl: f64,
    /// Target (with --compare-cpu): GPU vs CPU FP8 top-1 agreement at least this many percent.
    #[arg(long, default_value_t = 99.0)]
    min_top1_gpu_pct: f64,
    /// Target (with --compare-cpu): |GPU − CPU| FP8 perplexity at most this many percent.
    #[arg(long, default_value_t = 0.5)]
    max_dppl_gpu_pct: f64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The baseline model: a GGUF file's weights dequantized, or a dense checkpoint.
fn baseline_model(src: &str, device: &Device, opts: &ModelOptions) -> Result<DecoderModel> {
    let p = Path::new(src);
    if p.is_file() && candle_fp8::checkpoint::is_gguf_file(p) {
        return Ok(DecoderModel::from_gguf(&GgufCheckpoint::open(p)?, device, opts, &mut |_, _| {})?);
    }
    let ck = candle_fp8::checkpoint::open_model(src)?;
    if ck.quantization().is_some() {
        bail!("--baseline {src}: an FP8 checkpoint; the baseline is the unquantized model")
    }
    Ok(DecoderModel::from_checkpoint(&ck, device, opts, &mut |_, _| {})?)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = common::make_device(&args.device)?;
    let cache = common::cache_dir(args.cache_dir.as_deref())?;
    let src = common::open_source(args.model.as_deref(), &cache)?;
    let common::Text::Hf(tok) = &src.text else { bail!("{}: the eval needs a real tokenizer", src.label) };
    let baseline_src = match &args.baseline {
        Some(b) => b.clone(),
        None if args.model.is_none() => candle_fp8::checkpoint::SMOLLM2.fetch(&cache)?.display().to_string(),
        None => bail!("--baseline is required with --model"),
    };
    let text_path =
        args.text.clone().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/eval_text.txt"));
    let text = std::fs::read_to_string(&text_path).with_context(|| format!("reading {}", text_path.display()))?;
    let mut ids = tok.encode(&text, false)?;
    if let Some(n) = args.max_tokens {
        ids.truncate(n);
    }
    if ids.len() < 2 || args.window < 2 {
        bail!("need at least 2 tokens of text and a window of at least 2")
    }

    let t0 = Instant::now();
    let dtype = args.dtype.map_or_else(|| ModelOptions::default().dtype_for(&device), |d| d.dtype());
    let opts = ModelOptions::default().dtype(dtype);
    let mut base = baseline_model(&baseline_src, &device, &opts)?;
    let mut fp8 = DecoderModel::from_checkpoint(&src.ckpt, &device, &opts, &mut |_, _| {})?;
    let mut weights_only = fp8.to_dense()?;
    let mut cpu = if args.compare_cpu && !device.is_cpu() {
        Some(DecoderModel::from_checkpoint(&src.ckpt, &Device::Cpu, &opts, &mut |_, _| {})?)
    } else {
        None
    };
    let (mut s_base, mut s_w, mut s_wa, mut s_cpu, mut s_gpu_vs_cpu) =
        (Score::default(), Score::default(), Score::default(), Score::default(), Score::default());
    for window in ids.chunks(args.window).filter(|w| w.len() >= 2) {
        let lb = window_log_probs(&mut base, window)?;
        s_base.add(&lb, None, window);
        s_w.add(&window_log_probs(&mut weights_only, window)?, Some(&lb), window);
        let lf = window_log_probs(&mut fp8, window)?;
        s_wa.add(&lf, Some(&lb), window);
        if let Some(c) = &mut cpu {
            let lc = window_log_probs(c, window)?;
            s_cpu.add(&lc, Some(&lb), window);
            s_gpu_vs_cpu.add(&lf, Some(&lc), window);
        }
    }
    let secs = t0.elapsed().as_secs_f64();

    let pct = |a: f64, b: f64| 100.0 * (a / b - 1.0);
    println!("model     {}", src.label);
    println!("baseline  {baseline_src}");
    println!(
        "text      {} ({} tokens, windows of {}, {} positions scored)",
        text_path.display(),
        ids.len(),
        args.window,
        s_base.positions
    );
    println!("device    {} ({dtype:?} activations)", args.device);
    println!();
    println!("| row | perplexity | Δ vs baseline | mean KL | top-1 agreement |");
    println!("|---|---|---|---|---|");
    println!("| baseline (weights dequantized) | {:.4} | – | – | – |", s_base.perplexity());
    for (name, s) in [("FP8 weights only", s_w), ("FP8 weights + activations", s_wa)] {
        println!(
            "| {name} | {:.4} | {:+.2} % | {:.4} | {:.2} % |",
            s.perplexity(),
            pct(s.perplexity(), s_base.perplexity()),
            s.mean_kl(),
            s.top1_pct()
        );
    }
    if cpu.is_some() {
        println!(
            "| FP8 weights + activations, CPU | {:.4} | {:+.2} % | {:.4} | {:.2} % |",
            s_cpu.perplexity(),
            pct(s_cpu.perplexity(), s_base.perplexity()),
            s_cpu.mean_kl(),
            s_cpu.top1_pct()
        );
        println!();
        println!(
            "GPU vs CPU (same FP8 model): top-1 agreement {:.2} %, perplexity {:+.3} %, mean KL {:.5}",
            s_gpu_vs_cpu.top1_pct(),
            pct(s_wa.perplexity(), s_cpu.perplexity()),
            s_gpu_vs_cpu.mean_kl()
        );
    }
    println!("({secs:.1} s)");

    let mut missed = Vec::new();
    if pct(s_wa.perplexity(), s_base.perplexity()) > args.max_dppl_pct {
        missed.push(format!(
            "FP8 perplexity {:+.2} % > {} %",
            pct(s_wa.perplexity(), s_base.perplexity()),
            args.max_dppl_pct
        ));
    }
    if s_wa.mean_kl() > args.max_kl {
        missed.push(format!("mean KL {:.4} > {}", s_wa.mean_kl(), args.max_kl));
    }
    if cpu.is_some() {
        if s_gpu_vs_cpu.top1_pct() < args.min_top1_gpu_pct {
            missed.push(format!("GPU vs CPU top-1 {:.2} % < {} %", s_gpu_vs_cpu.top1_pct(), args.min_top1_gpu_pct));
        }
        if pct(s_wa.perplexity(), s_cpu.perplexity()).abs() > args.max_dppl_gpu_pct {
            missed.push(format!(
                "GPU vs CPU perplexity {:+.3} % beyond ±{} %",
                pct(s_wa.perplexity(), s_cpu.perplexity()),
                args.max_dppl_gpu_pct
            ));
        }
    }
    if let Some(path) = &args.json {
        let row = |s: &Score| serde_json::json!({"ppl": s.perplexity(), "kl": s.mean_kl(), "top1_pct": s.top1_pct(), "positions": s.positions});
        let j = serde_json::json!({
            "model": src.label, "baseline": baseline_src, "device": args.device, "dtype": format!("{dtype:?}"), "tokens": ids.len(), "window": args.window,
            "baseline_row": row(&s_base), "fp8_weights_only": row(&s_w), "fp8": row(&s_wa),
            "fp8_cpu": cpu.as_ref().map(|_| row(&s_cpu)), "gpu_vs_cpu": cpu.as_ref().map(|_| row(&s_gpu_vs_cpu)),
            "seconds": secs, "missed": missed,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    if !missed.is_empty() {
        bail!("targets missed: {}", missed.join("; "))
    }
    Ok(())
}
