//! Quantizes a bf16 / f16 / f32 safetensors checkpoint into a DeepSeek-style blocked-FP8 one
//! (e4m3 `weight` + `weight_scale_inv` per 128×128 block), the layout of Qwen3-*-FP8.
//!
//! ```text
//! cargo run --release --example quantize -- --input Qwen3-0.6B --output Qwen3-0.6B-FP8
//! cargo run --release --example quantize          # self-contained demo + round-trip check
//! ```
//!
//! Which tensors are quantized (the rule, explicit):
//! 1. a rank-2 float tensor named `<module>.weight`, and
//! 2. `<module>`'s last component contains `_proj` (`q_proj`, `gate_proj`, ...; with
//!    `--all-linear`: any module), and
//! 3. no `--skip` entry matches `<module>` by whole dotted components (default
//!    `lm_head,embed_tokens`; the same rule as `modules_to_not_convert`).
//!
//! Everything else (embeddings, norms, `lm_head`, biases) is copied as-is. The output
//! `config.json` is the input's plus `quantization_config` whose `modules_to_not_convert`
//! lists the `--skip` entries and every other rank-2 `.weight` module left unquantized.
//! Other top-level files (tokenizer files, generation_config.json, ...) are copied.
//!
//! Without `--input`, a small random bf16 Qwen3-like checkpoint is generated in a temp dir,
//! quantized, reloaded through `Checkpoint` + `Fp8BlockLinear::load` and checked against the
//! CPU reference (bit-exact weights, forward rel. error ≤ 3e-3, calc_diff < 1e-3).

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_fp8::checkpoint::{
    is_default_fp8_target, Checkpoint, QuantizationConfig, ShardWriter, CONFIG_FILE, INDEX_FILE, SINGLE_FILE,
};
use candle_fp8::Fp8BlockLinear;
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::reference::{calc_diff, dequantize_weight, reference_matmul, rel_err};
use clap::{Parser, ValueEnum};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Copy, Clone, Debug, ValueEnum)]
enum ScaleDtype {
    F32,
    Bf16,
    F16,
}

impl ScaleDtype {
    fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
            Self::F16 => DType::F16,
        }
    }
}

/// Quantize a safetensors checkpoint to blocked FP8 (e4m3, 128×128 block scales).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Input checkpoint directory: config.json + model.safetensors, or an index and its
    /// shards (bf16 / f16 / f32). Without it, a demo checkpoint is generated and checked.
    #[arg(long)]
    input: Option<PathBuf>,
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
    scale_dtype: ScaleDtype,
    /// Largest output shard, in MB (10^6 bytes); one file when everything fits.
    #[arg(long, default_value_t = 5000.0)]
    max_shard_mb: f64,
    /// Seed of the demo checkpoint.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// What a conversion did.
#[derive(Debug, Default)]
struct Summary {
    quantized: Vec<String>,
    copied: usize,
    bytes_before: u64,
    bytes_after: u64,
    max_rel_err: f64,
    worst: String,
    files: usize,
}

fn is_float(dt: DType) -> bool {
    matches!(dt, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
}

/// Quantizes `input` into `output` (see the module docs for the rule).
fn quantize_dir(input: &Path, output: &Path, args: &Args) -> Result<Summary> {
    if args.max_shard_mb.is_nan() || args.max_shard_mb <= 0.0 {
        bail!("--max-shard-mb must be positive, got {}", args.max_shard_mb)
    }
    let ck = Checkpoint::open(input).with_context(|| format!("opening input checkpoint {}", input.display()))?;
    if ck.quantization().is_some() {
        bail!("{} already has a quantization_config: it is not an unquantized checkpoint", input.display())
    }
    if output.exists() {
        let same = output.canonicalize()? == input.canonicalize()?;
        let occupied = [CONFIG_FILE, SINGLE_FILE, INDEX_FILE].iter().any(|f| output.join(f).exists());
        if same || occupied {
            bail!("refusing to write into {}: it already holds a checkpoint", output.display())
        }
    }
    let skip = QuantizationConfig::new(args.skip.iter().filter(|s| !s.is_empty()).cloned().collect());
    let mut not_converted: Vec<String> = skip.modules_to_not_convert.clone();
    let max_bytes = (args.max_shard_mb * 1e6) as u64;
    let mut writer = ShardWriter::new(output, Some(max_bytes.max(1)))?;
    let mut s = Summary::default();
    let cpu = Device::Cpu;
    for file in ck.files() {
        let names: Vec<&str> =
            ck.tensor_names().into_iter().filter(|n| ck.tensor_info(n).is_some_and(|i| &i.file == file)).collect();
        for name in names {
            let info = ck.tensor_info(name).context("tensor vanished")?;
            s.bytes_before += info.nbytes() as u64;
            let t = ck.load_tensor(name, &cpu)?;
            let module = name.strip_suffix(".weight");
            let candidate = module.is_some() && t.rank() == 2 && is_float(t.dtype()) && t.elem_count() > 0;
            let by_rule = args.all_linear || is_default_fp8_target(name, t.dims());
            match module {
                Some(m) if candidate && by_rule && skip.is_quantized(m) => {
                    let w = t.to_dtype(DType::F32)?;
                    let (wq, sc) = quantize_weight(&w)?;
                    let err = rel_err(&dequantize_weight(&wq, &sc)?, &w)?;
                    if err.is_nan() || err > s.max_rel_err {
                        s.max_rel_err = err;
                        s.worst = name.to_string();
                    }
                    let stored = sc.to_dtype(args.scale_dtype.dtype())?;
                    // bf16 / f16 round the scales (f16 flushes tiny ones): never store a zero.
                    let back = stored.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                    if let Some(i) = back.iter().position(|v| !(*v > 0.0 && v.is_finite())) {
                        bail!(
                            "{name}: block scale #{i} = {} is not representable as {:?} (stored {}); use --scale-dtype f32",
                            sc.flatten_all()?.get(i)?.to_scalar::<f32>()?,
                            args.scale_dtype,
                            back[i]
                        )
                    }
                    let sc = stored;
                    s.bytes_after += (wq.elem_count() + sc.elem_count() * sc.dtype().size_in_bytes()) as u64;
                    writer.push(name, wq)?;
                    writer.push(format!("{m}.weight_scale_inv"), sc)?;
                    s.quantized.push(m.to_string());
                }
                _ => {
                    if let Some(m) = module.filter(|m| candidate && skip.is_quantized(m)) {
                        not_converted.push(m.to_string());
                    }
                    s.bytes_after += info.nbytes() as u64;
                    writer.push(name, t)?;
                    s.copied += 1;
                }
            }
        }
    }
    s.files = writer.finish()?.len();

    let mut config = ck.config_json().clone();
    config["quantization_config"] = QuantizationConfig::new(not_converted).to_json();
    std::fs::write(output.join(CONFIG_FILE), serde_json::to_string_pretty(&config)?)?;
    // Tokenizer and other side files.
    for entry in std::fs::read_dir(input)? {
        let entry = entry?;
        let fname = entry.file_name();
        let f = fname.to_string_lossy();
        let weights = f.ends_with(".safetensors") || f == INDEX_FILE || f == CONFIG_FILE;
        if entry.file_type()?.is_file() && !weights && !f.starts_with('.') {
            std::fs::copy(entry.path(), output.join(&fname))?;
        }
    }
    // The output must load.
    Checkpoint::open(output).with_context(|| format!("re-opening the output {}", output.display()))?;
    Ok(s)
}

fn print_summary(s: &Summary, output: &Path, secs: f64) {
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "quantized {} weights to FP8, copied {} tensors as-is; {:.2} MB -> {:.2} MB ({:.2}x) in {} file(s) at {}",
        s.quantized.len(),
        s.copied,
        mb(s.bytes_before),
        mb(s.bytes_after),
        s.bytes_before as f64 / s.bytes_after.max(1) as f64,
        s.files,
        output.display()
    );
    println!("max relative dequantization error ‖deq(W) − W‖/‖W‖ = {:.3e} ({}); {secs:.1} s", s.max_rel_err, s.worst);
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
    });
    std::fs::write(dir.join(CONFIG_FILE), serde_json::to_string_pretty(&config)?)?;
    std::fs::write(dir.join("tokenizer.json"), "{\"version\": \"1.0\"}")?;
    Ok(())
}

/// Reloads every quantized module and checks it against the original weights.
fn verify_round_trip(input: &Path, output: &Path, s: &Summary) -> Result<()> {
    let src = Checkpoint::open(input)?;
    let out = Checkpoint::open(output)?;
    let q = out.quantization().context("output has no quantization_config")?;
    println!("output quantization_config: {}", q.to_json());
    if out.tokenizer_path().is_none() {
        bail!("tokenizer.json was not copied")
    }
    let vb = out.var_builder(DType::BF16, &Device::Cpu);
    let (mut worst_re, mut worst_cd) = (0f64, 0f64);
    for m in &s.quantized {
        if !out.is_quantized(m) {
            bail!("{m} was quantized but the config excludes it")
        }
        let w = src.load_tensor(&format!("{m}.weight"), &Device::Cpu)?.to_dtype(DType::F32)?;
        let (n, k) = w.dims2()?;
        let layer = Fp8BlockLinear::load(vb.pp(m), k, n, false)?;
        let (wq, _) = quantize_weight(&w)?;
        let bits = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
        if bits(layer.weight())? != bits(&wq)? {
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
        if name.ends_with(".weight_scale_inv") || s.quantized.iter().any(|m| name == format!("{m}.weight")) {
            continue;
        }
        let a = out.load_tensor(name, &Device::Cpu)?;
        let b = src.load_tensor(name, &Device::Cpu)?;
        let flat = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
        if a.dtype() != b.dtype() || flat(&a)? != flat(&b)? {
            bail!("{name}: copied tensor differs")
        }
    }
    println!(
        "round trip OK: {} FP8 layers reloaded bit-exact; forward vs CPU reference: max relerr {worst_re:.2e}, \
         max calc_diff {worst_cd:.2e}; dense tensors identical",
        s.quantized.len()
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let t0 = Instant::now();
    match &args.input {
        Some(input) => {
            let Some(output) = &args.output else { bail!("--output is required with --input") };
            let s = quantize_dir(input, output, &args)?;
            print_summary(&s, output, t0.elapsed().as_secs_f64());
        }
        None => {
            let tmp = tempfile::tempdir()?;
            let input = tmp.path().join("demo-bf16");
            let output = args.output.clone().unwrap_or_else(|| tmp.path().join("demo-fp8"));
            write_demo_input(&input, args.seed)?;
            println!("demo: wrote a random bf16 Qwen3-like checkpoint to {}", input.display());
            let demo = Args { max_shard_mb: 0.25, ..args };
            let s = quantize_dir(&input, &output, &demo)?;
            print_summary(&s, &output, t0.elapsed().as_secs_f64());
            verify_round_trip(&input, &output, &s)?;
        }
    }
    Ok(())
}
