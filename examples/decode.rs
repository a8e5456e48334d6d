//! Decode with Qwen3 on blocked-FP8 linear layers and report TTFT / TPOT.
//!
//! ```text
//! cargo run --release --example decode                       # tiny embedded FP8 model, CPU
//! cargo run --release --features cuda --example decode -- \
//!     --model Qwen/Qwen3-32B-FP8 --device cuda --prompt "Hello"
//! cargo run --release --features cuda --example decode -- \
//!     --random-weights qwen3-32b --device cuda --prompt-len 100 --batch 16
//! ```
//!
//! See docs/DECODE.md for every flag and how to read the report.

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_fp8::checkpoint::{open_model, Checkpoint};
use candle_fp8::models::ByteTokenizer;
use candle_fp8::models::{compare_greedy, generate, launches_ahead, DecoderConfig, DecoderModel, LinearMode, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Generate with Qwen3 on blocked-FP8 linears; report load time, TTFT, TPOT, memory")]
struct Args {
    /// Checkpoint: a local directory or a Hugging Face model id (`owner/name[@revision]`,
    /// through the hf-hub cache; `HF_HUB_OFFLINE=1` to forbid downloads). Default: a tiny
    /// embedded FP8 model (random decoder + bigram lm_head) written under target/.
    #[arg(long)]
    model: Option<String>,
    /// Prompt text.
    #[arg(long, default_value = "the quick brown fox")]
    prompt: String,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 = greedy (argmax on the device).
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Nucleus sampling threshold (with --temperature > 0).
    #[arg(long, default_value_t = 0.9)]
    top_p: f64,
    /// Seed for sampling and random weights.
    #[arg(long, default_value_t = 299_792_458)]
    seed: u64,
    /// cpu or cuda (cuda needs `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Independent sequences decoded together.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// fp8 (blocked-FP8 GEMMs) or bf16 (weights dequantized once at load: the baseline).
    #[arg(long, default_value = "fp8")]
    linear: LinearMode,
    /// Build the architecture with random FP8 weights on the device: `qwen3-32b`, `tiny`, or
    /// a path to a config.json. Timings are meaningful, text is not.
    #[arg(long)]
    random_weights: Option<String>,
    /// Use a synthetic prompt of exactly N tokens (for timing).
    #[arg(long)]
    prompt_len: Option<usize>,
    /// Also run N greedy steps through the FP8 kernels and through the dequantized reference
    /// (teacher-forced) and report top-1 agreement and max |Δlogit|.
    #[arg(long)]
    check_accuracy: Option<usize>,
    /// Keep q/k/v and gate/up as separate GEMMs.
    #[arg(long)]
    no_fuse: bool,
    /// Run the composed candle ops instead of the fused decode kernels (residual add + RMSNorm +
    /// quantize, SiLU·up + quantize, the decode attention).
    #[arg(long)]
    no_fused_kernels: bool,
    /// Do not stop at end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Warm-up generation steps before the measured run (default: 4 on CUDA, 0 on the CPU).
    #[arg(long)]
    warmup: Option<usize>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// CUDA: bracket decode step N of the measured run with cuProfilerStart/Stop, so that
    /// `ncu --profile-from-start off` times exactly that step's kernels (docs/DECODE.md).
    #[arg(long)]
    profile_step: Option<usize>,
    /// After the run, write the per-CTA kernel timeline of the last steps to this file (a build
    /// with the `trace` feature; read it with `python3 dev/trace_timeline.py FILE`).
    #[cfg(feature = "trace")]
    #[arg(long)]
    trace_out: Option<PathBuf>,
}

/// Starts (`true`) or stops the CUDA profiler's collection window (`--profile-step`).
fn profiler(device: &Device, start: bool) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        use candle_core::cuda_backend::cudarc::driver::sys;
        let _ = d.cuda_stream().synchronize();
        // SAFETY: plain driver calls on the current context; failures only mean no profiler.
        let r = unsafe { if start { sys::cuProfilerStart() } else { sys::cuProfilerStop() } };
        if r != sys::CUresult::CUDA_SUCCESS {
            eprintln!("--profile-step: cuProfiler{} returned {r:?}", if start { "Start" } else { "Stop" });
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (device, start);
}

/// Text encoding / decoding for the chosen model.
enum Tok {
    Hf(Box<tokenizers::Tokenizer>),
    Bytes(ByteTokenizer),
    None,
}

impl Tok {
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tok::Hf(t) => Ok(t.encode(text, true).map_err(|e| anyhow!("tokenizer: {e}"))?.get_ids().to_vec()),
            Tok::Bytes(t) => Ok(t.encode(text)),
            Tok::None => Ok(text.bytes().map(u32::from).collect()),
        }
    }
    fn decode(&self, ids: &[u32]) -> Result<Option<String>> {
        match self {
            Tok::Hf(t) => Ok(Some(t.decode(ids, false).map_err(|e| anyhow!("tokenizer: {e}"))?)),
            Tok::Bytes(t) => Ok(Some(t.decode(ids))),
            Tok::None => Ok(None),
        }
    }
}

fn make_device(name: &str) -> Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => {
            #[cfg(feature = "cuda")]
            {
                Ok(Device::new_cuda(0).context("opening CUDA device 0")?)
            }
            #[cfg(not(feature = "cuda"))]
            {
                bail!(
                    "--device cuda: this binary was built without the `cuda` feature; rebuild with \
                     `cargo run --release --features cuda --example decode -- --device cuda ...`"
                )
            }
        }
        o => bail!("--device {o:?}: expected cpu or cuda"),
    }
}

/// The device's default memory pool (where candle's stream-ordered allocations live), bytes:
/// `[reserved now, reserved high-water mark, used now, used high-water mark]`; with `reset`,
/// the high-water marks restart from the current values first.
#[cfg(feature = "cuda")]
fn pool_stats(device: &Device, reset: bool) -> Option<[u64; 4]> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    use sys::CUmemPool_attribute::*;
    let Device::Cuda(d) = device else { return None };
    let ctx = d.cuda_stream().context().clone();
    ctx.bind_to_thread().ok()?;
    let pool = unsafe { result::device::get_default_mem_pool(ctx.cu_device()) }.ok()?;
    if reset {
        for attr in [CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, CU_MEMPOOL_ATTR_USED_MEM_HIGH] {
            let mut zero = 0u64;
            unsafe { result::mem_pool::set_attribute(pool, attr, &mut zero as *mut u64 as *mut std::ffi::c_void) }.ok()?;
        }
    }
    let get = |attr| {
        let mut v = 0u64;
        unsafe { result::mem_pool::get_attribute(pool, attr, &mut v as *mut u64 as *mut std::ffi::c_void) }.ok().map(|_| v)
    };
    Some([
        get(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        get(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        get(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        get(CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
    ])
}

#[cfg(not(feature = "cuda"))]
fn pool_stats(_: &Device, _: bool) -> Option<[u64; 4]> {
    None
}

/// Device memory in use (bytes), for CUDA; peak resident set size on the CPU.
fn memory_in_use(device: &Device) -> Option<u64> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            let ctx = d.cuda_stream().context().clone();
            ctx.mem_get_info().ok().map(|(free, total)| (total - free) as u64)
        }
        Device::Cpu => {
            let s = std::fs::read_to_string("/proc/self/status").ok()?;
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        }
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Bytes as GiB, or MiB below 1 GiB.
fn human(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.3} GiB", gib(b))
    } else {
        format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn progress_bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} layers ({elapsed})")
            .unwrap()
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// The embedded default: a tiny FP8 Qwen3-architecture toy LM cached under target/.
fn embedded_checkpoint() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/examples/decode → target/
    let target = exe.ancestors().nth(3).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("candle-fp8-tiny-qwen3-v1");
    if !(dir.join("config.json").is_file() && dir.join("model.safetensors").is_file()) {
        eprintln!("writing the tiny embedded FP8 checkpoint to {} ...", dir.display());
        let tmp = target.join(format!("candle-fp8-tiny-qwen3-v1.tmp{}", std::process::id()));
        write_toy_lm_checkpoint(&tmp, &DecoderConfig::tiny(), 20261129, TOY_CORPUS)?;
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another process won the race: use its copy.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    Ok(dir)
}

const TOY_CORPUS: &str = "the quick brown fox jumps over the lazy dog. a toy language model speaks in bigrams, \
    and its words follow one another like beads on a string. ";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if args.batch == 0 || args.max_new_tokens == 0 {
        bail!("--batch and --max-new-tokens must be at least 1")
    }
    if args.check_accuracy.is_some() && args.linear != LinearMode::Fp8 {
        bail!("--check-accuracy compares the FP8 kernels with the dequantized reference: use --linear fp8")
    }
    let device = make_device(&args.device)?;
    let opts = ModelOptions::with_mode(args.linear).fuse_projections(!args.no_fuse).fused_kernels(!args.no_fused_kernels);

    // ---- Load ----------------------------------------------------------------------------
    let t_load = Instant::now();
    let (mut model, tok, source) = if let Some(rw) = &args.random_weights {
        let cfg = match rw.as_str() {
            "qwen3-32b" | "Qwen3-32B" => DecoderConfig::qwen3_32b(),
            "tiny" => DecoderConfig::tiny(),
            path => DecoderConfig::from_file(path).with_context(|| format!("--random-weights {path}"))?,
        };
        println!("RANDOM WEIGHTS ({rw}): the timings are meaningful, the generated text is not.");
        let pb = progress_bar(cfg.num_hidden_layers as u64, "generating random FP8 weights");
        let m = DecoderModel::random_with_progress(&cfg, &device, args.seed, &opts, &mut |d, _| pb.set_position(d as u64))?;
        pb.finish();
        (m, Tok::None, format!("random weights, {rw} architecture"))
    } else {
        let (ck, label): (Checkpoint, String) = match &args.model {
            Some(m) => (open_model(m).with_context(|| format!("opening --model {m}"))?, m.clone()),
            None => {
                let dir = embedded_checkpoint()?;
                (Checkpoint::open(&dir)?, format!("tiny embedded FP8 toy LM ({})", dir.display()))
            }
        };
        let cfg = DecoderConfig::from_json(&ck.config_json().to_string())?;
        let tok = if let Some(p) = ck.tokenizer_path() {
            Tok::Hf(Box::new(tokenizers::Tokenizer::from_file(p).map_err(|e| anyhow!("loading {}: {e}", p.display()))?))
        } else if ck.config_json().get("candle_fp8_tokenizer").and_then(|v| v.as_str()) == Some("bytes") {
            Tok::Bytes(ByteTokenizer::new())
        } else {
            bail!("{label}: no tokenizer.json next to the weights")
        };
        let dtype = if device.is_cpu() { DType::F32 } else { DType::BF16 };
        let vb = ck.var_builder(dtype, &device);
        let pb = progress_bar(cfg.num_hidden_layers as u64, "loading");
        let m = DecoderModel::load_with_progress(&cfg, vb, &|p| ck.is_quantized(p), &opts, &mut |d, _| pb.set_position(d as u64))?;
        pb.finish();
        (m, tok, label)
    };
    device.synchronize()?;
    let load_time = t_load.elapsed();
    let mem_after_load = memory_in_use(&device);
    // The pool's high-water marks from here on: the prefill's transient activations, which the
    // step-boundary samples below cannot see.
    let _ = pool_stats(&device, true);
    let cfg = model.config().clone();

    // ---- Prompt --------------------------------------------------------------------------
    let mut prompt_ids = tok.encode(&args.prompt)?;
    if prompt_ids.is_empty() {
        prompt_ids.push(0);
    }
    if let Some(n) = args.prompt_len {
        if n == 0 {
            bail!("--prompt-len must be at least 1")
        }
        // Repeat the real prompt (or ids) to exactly n tokens.
        let base = prompt_ids.clone();
        prompt_ids = (0..n).map(|i| base[i % base.len()] % cfg.vocab_size as u32).collect();
    }
    let random = args.random_weights.is_some();
    let eos: Vec<u32> = if args.ignore_eos || random { vec![] } else { cfg.eos_ids() };
    model.set_kv_capacity(prompt_ids.len() + args.max_new_tokens);

    // ---- Warm-up and measured run ----------------------------------------------------------
    let warmup = args.warmup.unwrap_or(if device.is_cpu() { 0 } else { 4 });
    if warmup > 0 {
        let mut s = Sampler::new(args.temperature, args.top_p, args.seed);
        generate(&mut model, &prompt_ids, args.batch, warmup, &mut s, &[], &mut |_, _| {})?;
    }
    let mem_after_warmup = memory_in_use(&device);
    let mut sampler = Sampler::new(args.temperature, args.top_p, args.seed);
    let mut mem_peak = mem_after_load.max(mem_after_warmup);
    // In use after the prefill (step 0) and after the first decode step: with the memory at
    // load and after the warm-up, this splits the peak into weights, KV cache and the rest.
    let mut mem_steps: [Option<u64>; 2] = [None, None];
    let dev2 = device.clone();
    // The profiler window is opened and closed from on_step (after a step's ids are read).
    // Synchronous reads: step N is launched between on_step(N - 1) and on_step(N). Launch-ahead
    // (greedy on CUDA): between on_step(N - 2) and on_step(N - 1), for N >= 3 (steps 1 and 2
    // are launched in the same window).
    let ahead = launches_ahead(&device, &sampler);
    let first = if ahead { 3 } else { 1 };
    let profile = args.profile_step.filter(|&n| n >= first && n < args.max_new_tokens);
    if args.profile_step.is_some() && profile.is_none() {
        bail!(
            "--profile-step must be in {first}..{} (a decode step of the measured run{})",
            args.max_new_tokens,
            if ahead { ", launched ahead: steps 1 and 2 share a launch window" } else { "" }
        )
    }
    let (open_at, close_at) = match profile {
        Some(n) if ahead => (n - 2, n - 1),
        Some(n) => (n - 1, n),
        None => (usize::MAX, usize::MAX),
    };
    let gen = generate(&mut model, &prompt_ids, args.batch, args.max_new_tokens, &mut sampler, &eos, &mut |step, _| {
        if step < 2 || step % 64 == 63 {
            let m = memory_in_use(&dev2);
            if step < 2 {
                mem_steps[step] = m;
            }
            mem_peak = mem_peak.max(m);
        }
        if step == open_at {
            profiler(&dev2, true);
        } else if step == close_at {
            profiler(&dev2, false);
        }
    })?;
    #[cfg(feature = "trace")]
    if let Some(path) = &args.trace_out {
        let n = candle_fp8::kernels::trace_dump(path)?;
        eprintln!("--trace-out: {n} records written to {}", path.display());
    }
    let mem_end = memory_in_use(&device);
    mem_peak = mem_peak.max(mem_end);
    // Everything outside the pool (context, modules, library workspaces) only grows, so
    // (in use now − pool reserved now) + the pool's reserved high-water mark bounds the true
    // peak from above, transients included.
    let pool = pool_stats(&device, false);
    if let (Some(end), Some([res, res_high, _, _])) = (mem_end, pool) {
        mem_peak = mem_peak.max(Some(end.saturating_sub(res) + res_high));
    }

    // ---- Output --------------------------------------------------------------------------
    println!();
    let show = args.batch.min(4);
    for (i, toks) in gen.tokens.iter().take(show).enumerate() {
        match tok.decode(toks)? {
            Some(text) if !random => println!("[{i}] {}{}", args.prompt, text),
            _ => println!("[{i}] ids {:?}{}", &toks[..toks.len().min(16)], if toks.len() > 16 { " ..." } else { "" }),
        }
    }
    if args.batch > show {
        println!("... ({} more sequences)", args.batch - show);
    }

    let mut steps: Vec<f64> = gen.step_times.iter().map(|d| ms(*d)).collect();
    steps.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let decode_total: f64 = steps.iter().sum();
    let tpot_mean = if steps.is_empty() { f64::NAN } else { decode_total / steps.len() as f64 };
    let generated: usize = gen.tokens.iter().map(|t| t.len()).sum();
    let (fp8_b, dense_b, other_b) = model.weight_bytes();
    let kv_b = model.kv_cache_bytes();
    let budget = 1.1 * (fp8_b + dense_b + other_b) as f64 + kv_b as f64;

    println!();
    println!("== decode report ==");
    println!("model            {source}");
    println!(
        "architecture     {} layers, hidden {}, heads {}/{} (kv), head_dim {}, intermediate {}, vocab {}",
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.kv_heads(),
        cfg.head_dim(),
        cfg.intermediate_size,
        cfg.vocab_size
    );
    println!(
        "linear           {:?}{}{} on {} ({:?} activations)",
        model.mode(),
        if model.projections_fused() { ", fused qkv + gate_up" } else { ", unfused" },
        match model.fused_elementwise_layers()? {
            0 => String::new(),
            n => format!(", fused norm/swiglu + quantize in {n} layers"),
        },
        args.device,
        model.dtype()
    );
    println!(
        "weights          fp8 {} + dense linears {} + embeddings/norms {}; KV cache {}",
        human(fp8_b as u64),
        human(dense_b as u64),
        human(other_b as u64),
        human(kv_b as u64)
    );
    println!("load time        {:.2} s", load_time.as_secs_f64());
    println!("prompt tokens    {} × batch {}", prompt_ids.len(), args.batch);
    println!("generated        {generated} tokens ({} steps)", gen.step_times.len() + 1);
    println!("TTFT             {:.2} ms", ms(gen.ttft));
    println!(
        "TPOT             mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms (over {} steps)",
        tpot_mean,
        percentile(&steps, 50.0),
        percentile(&steps, 99.0),
        steps.len()
    );
    let enqueue_mean = if gen.enqueue_times.is_empty() {
        f64::NAN
    } else {
        gen.enqueue_times.iter().map(|d| ms(*d)).sum::<f64>() / gen.enqueue_times.len() as f64
    };
    if !device.is_cpu() {
        // On the CPU the "launches" compute synchronously: the line would just repeat the TPOT.
        println!("host enqueue     mean {enqueue_mean:.3} ms per step (launching the step's kernels; near TPOT = host-bound)");
        println!(
            "id readback      {}",
            if gen.launched_ahead {
                "launch-ahead (step s+1 enqueued before step s's ids are read)"
            } else {
                "synchronous (each step launched after the previous ids were read)"
            }
        );
    }
    let tps = if decode_total > 0.0 { (args.batch * steps.len()) as f64 / (decode_total / 1e3) } else { f64::NAN };
    println!("throughput       {tps:.1} tokens/s (decode, all sequences)");
    match (mem_peak, &device) {
        (Some(m), Device::Cpu) => println!("peak memory      {} (process peak RSS)", human(m)),
        (Some(m), _) => println!(
            "peak memory      {} in use on the device (whole device: the larger of the step-boundary samples and memory outside the pool + the pool's high-water mark) vs budget 1.1×weights + KV = {}",
            human(m),
            human(budget as u64)
        ),
        (None, _) => println!("peak memory      n/a"),
    }
    if let (Some(l), Some(w), [Some(p), Some(d)], false) = (mem_after_load, mem_after_warmup, mem_steps, device.is_cpu()) {
        println!(
            "memory in use    after load {}, after warm-up {}, after prefill {}, after decode step 1 {}",
            human(l),
            human(w),
            human(p),
            human(d)
        );
    }
    if let Some([res, res_high, used, used_high]) = pool {
        println!(
            "memory pool      reserved {} (high-water {}), in use by tensors {} (high-water {}) since load",
            human(res),
            human(res_high),
            human(used),
            human(used_high)
        );
    }

    // ---- Accuracy check --------------------------------------------------------------------
    let mut acc_json = serde_json::Value::Null;
    if let Some(n) = args.check_accuracy {
        // Two references, both teacher-forced on the FP8 path's tokens:
        // - "reference": the same quantized activations and weights, dequantized and multiplied
        //   in f32 (docs/design.md's reference) — checks our kernels;
        // - "bf16": weights dequantized to bf16, activations not quantized — the FP8 format's
        //   own effect (near-tied logits of random weights flip here).
        let t = Instant::now();
        let (mut reference, mut dense) = (model.to_reference()?, model.to_dense()?);
        let mut report = |name: &str, what: &str, reference: &mut DecoderModel| -> Result<serde_json::Value> {
            println!();
            println!("== accuracy: FP8 kernels vs {what} ({n} greedy steps, teacher-forced) ==");
            let r = compare_greedy(&mut model, reference, &prompt_ids, n)?;
            println!(
                "top-1 agreement  {}/{} = {:.2}% ({}/{} = {:.2}% counting a reference tie at the top as agreement; \
                 largest reference logit gap between the two choices: {})",
                r.top1_agree,
                r.steps,
                100.0 * r.agreement(),
                r.top1_agree_up_to_ties,
                r.steps,
                100.0 * r.agreement_up_to_ties(),
                r.max_regret_at_disagreement.map(|m| format!("{m:.4}")).unwrap_or_else(|| "-".into())
            );
            println!(
                "max |Δlogit|     {:.4} (mean {:.5}; reference logit rms {:.3}; smallest reference top-1 margin where they disagree: {})",
                r.max_abs_dlogit,
                r.mean_abs_dlogit,
                r.ref_logit_rms,
                r.min_margin_at_disagreement.map(|m| format!("{m:.4}")).unwrap_or_else(|| "-".into())
            );
            Ok(serde_json::json!({
                "reference": name, "steps": r.steps, "top1_agree": r.top1_agree, "agreement": r.agreement(),
                "top1_agree_up_to_ties": r.top1_agree_up_to_ties, "max_regret_at_disagreement": r.max_regret_at_disagreement,
                "max_abs_dlogit": r.max_abs_dlogit, "mean_abs_dlogit": r.mean_abs_dlogit, "ref_logit_rms": r.ref_logit_rms,
            }))
        };
        let kernel = report("f32-reference", "the f32 dequantized reference (same quantized operands)", &mut reference)?;
        let format = report("bf16-dequantized", "bf16 dequantized weights (FP8 format effect)", &mut dense)?;
        if random {
            println!("(random weights have near-tied logits: top-1 flips against bf16 measure FP8 rounding at ties, not a defect)");
        }
        println!("({:.1} s)", t.elapsed().as_secs_f64());
        acc_json = serde_json::json!([kernel, format]);
    }

    if let Some(path) = &args.json {
        let j = serde_json::json!({
            "model": source, "linear": format!("{:?}", model.mode()), "device": args.device, "batch": args.batch,
            "fused": model.projections_fused(), "fused_elementwise_layers": model.fused_elementwise_layers()?, "prompt_tokens": prompt_ids.len(), "generated": generated,
            "load_s": load_time.as_secs_f64(), "ttft_ms": ms(gen.ttft),
            "tpot_ms": {"mean": tpot_mean, "p50": percentile(&steps, 50.0), "p99": percentile(&steps, 99.0), "steps": steps.len()},
            "host_enqueue_ms_mean": enqueue_mean,
            "launched_ahead": gen.launched_ahead,
            "tokens_per_s": tps, "peak_memory_bytes": mem_peak,
            "memory_bytes": {"after_load": mem_after_load, "after_warmup": mem_after_warmup, "after_prefill": mem_steps[0], "after_step1": mem_steps[1], "pool": pool}, "weights_bytes": {"fp8": fp8_b, "dense": dense_b, "embeddings_norms": other_b},
            "kv_cache_bytes": kv_b, "memory_budget_bytes": budget, "accuracy": acc_json,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?).with_context(|| format!("writing {}", path.display()))?;
    }
    let _ = Tensor::zeros(1, DType::F32, &device)?; // keep the device alive until the end
    Ok(())
}
