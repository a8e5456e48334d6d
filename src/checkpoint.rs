//! Blocked-FP8 checkpoints on disk: `config.json`'s `quantization_config`, (sharded)
//! safetensors with validated headers, a [`VarBuilder`] that refuses silent FP8 conversions,
//! the Hugging Face Hub (feature `hub`), and a streaming sharded writer.
//!
//! A checkpoint directory holds `config.json` and either `model.safetensors` or
//! `model.safetensors.index.json` plus the shards it lists (the Hugging Face layout, as in
//! `Qwen/Qwen3-32B-FP8` or `deepseek-ai/DeepSeek-V3`). A quantized linear module `m` stores
//! `m.weight` as `F8_E4M3` `[N, K]` and `m.weight_scale_inv` as `F32` (or `BF16` / `F16`)
//! `[ceil(N/128), ceil(K/128)]`; every other tensor is stored as-is.
//!
//! ```no_run
//! use candle_core::{DType, Device};
//! use candle_fp8::checkpoint::Checkpoint;
//! # fn main() -> candle_core::Result<()> {
//! let ckpt = Checkpoint::open("/models/Qwen3-32B-FP8")?;
//! let vb = ckpt.var_builder(DType::BF16, &Device::Cpu);
//! let q_proj = ckpt.load_linear(vb.pp("model.layers.0.self_attn.q_proj"), 5120, 8192, false)?;
//! # Ok(()) }
//! ```
//!
//! What [`Checkpoint::open`] guarantees before any tensor is read:
//! - every safetensors header parses, its offsets are in bounds, contiguous and sized exactly
//!   as `dtype × shape`, and the data section ends where the file ends (errors name the file);
//! - with an index, every listed shard exists and every `weight_map` entry resolves to a
//!   tensor in the shard it names; no tensor appears in two files;
//! - the FP8 layout is consistent with the config: every `F8_E4M3` `*.weight` has a
//!   `*.weight_scale_inv` of dtype F32/BF16/F16 and shape `[ceil(N/128), ceil(K/128)]`, its
//!   module is not in `modules_to_not_convert`, and a checkpoint without
//!   `quantization_config` holds no FP8 weights.
//!
//! Scale *values* (NaN, infinite, zero, negative) are checked when a layer is built
//! ([`crate::linear::Fp8BlockLinear::new`]).

use crate::format::{check_weight_scale_shape, BLOCK};
use crate::linear::{AnyLinear, Fp8BlockLinear};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{bail, DType, Device, Error, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use safetensors::Dtype as StDtype;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the single-file weights.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Name of the sharded-weights index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Name of the model configuration.
pub const CONFIG_FILE: &str = "config.json";
/// Largest safetensors header accepted, in bytes (the safetensors crate's own bound).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

// ---------------------------------------------------------------------------------------------
// quantization_config
// ---------------------------------------------------------------------------------------------

/// The `quantization_config` of a blocked-FP8 checkpoint, validated.
///
/// Accepted (anything else is an error naming the field and its value):
///
/// | field | accepted | absent / `null` |
/// |---|---|---|
/// | `quant_method` | `"fp8"` | error |
/// | `fmt` | `"e4m3"` | `"e4m3"` |
/// | `activation_scheme` | `"dynamic"` (`"static"`: unsupported, error) | `"dynamic"` |
/// | `weight_block_size` | `[128, 128]` | error (per-tensor FP8 is not supported) |
/// | `modules_to_not_convert`, `ignored_layers` | list of module names | empty |
///
/// Unknown fields are ignored. See [`QuantizationConfig::is_quantized`] for how the
/// module lists match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantizationConfig {
    /// `[block_n, block_k]`, always `[128, 128]` once parsed.
    pub weight_block_size: [usize; 2],
    /// Entries of `modules_to_not_convert` followed by those of `ignored_layers`.
    pub modules_to_not_convert: Vec<String>,
}

impl Default for QuantizationConfig {
    fn default() -> Self {
        Self { weight_block_size: [BLOCK, BLOCK], modules_to_not_convert: Vec::new() }
    }
}

fn opt_str<'a>(q: &'a serde_json::Map<String, Value>, field: &str) -> Result<Option<&'a str>> {
    match q.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => bail!("quantization_config.{field} must be a string, got {v}"),
    }
}

fn str_list(q: &serde_json::Map<String, Value>, field: &str) -> Result<Vec<String>> {
    match q.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.trim_matches('.').is_empty() => Ok(s.trim_matches('.').to_string()),
                v => bail!("quantization_config.{field} must list non-empty module names, got entry {v}"),
            })
            .collect(),
        Some(v) => bail!("quantization_config.{field} must be a list of module names, got {v}"),
    }
}

impl QuantizationConfig {
    /// A config for `[128, 128]` blocks leaving `modules_to_not_convert` unquantized.
    pub fn new(modules_to_not_convert: Vec<String>) -> Self {
        Self { modules_to_not_convert, ..Self::default() }
    }

    /// Parses a `quantization_config` JSON object (see the type's docs for the rules).
    pub fn from_json(v: &Value) -> Result<Self> {
        let Value::Object(q) = v else { bail!("quantization_config must be a JSON object, got {v}") };
        match q.get("quant_method") {
            Some(Value::String(m)) if m == "fp8" => {}
            Some(Value::String(m)) => bail!(
                "quantization_config.quant_method = {m:?} is not supported: candle-fp8 loads only \"fp8\" \
                 (blocked e4m3) checkpoints"
            ),
            None | Some(Value::Null) => bail!("quantization_config.quant_method is missing: expected \"fp8\""),
            Some(v) => bail!("quantization_config.quant_method must be a string, got {v}"),
        }
        if let Some(fmt) = opt_str(q, "fmt")? {
            if fmt != "e4m3" {
                bail!("quantization_config.fmt = {fmt:?} is not supported: only \"e4m3\" weights are")
            }
        }
        match opt_str(q, "activation_scheme")? {
            None | Some("dynamic") => {}
            Some("static") => bail!(
                "quantization_config.activation_scheme = \"static\": static activation scales are unsupported; \
                 candle-fp8 quantizes activations dynamically (per token per {BLOCK})"
            ),
            Some(s) => bail!("quantization_config.activation_scheme = {s:?} is not supported: expected \"dynamic\""),
        }
        let weight_block_size = match q.get("weight_block_size") {
            None | Some(Value::Null) => bail!(
                "quantization_config.weight_block_size is missing: per-tensor FP8 is not supported, candle-fp8 \
                 needs [{BLOCK}, {BLOCK}] block scales (weight_scale_inv)"
            ),
            Some(v @ Value::Array(a)) => {
                let dims: Option<Vec<u64>> = a.iter().map(|x| x.as_u64()).collect();
                match dims.as_deref() {
                    Some(&[bn, bk]) if bn == BLOCK as u64 && bk == BLOCK as u64 => [BLOCK, BLOCK],
                    Some(&[_, _]) => bail!(
                        "quantization_config.weight_block_size = {v} is not supported: candle-fp8 needs \
                         [{BLOCK}, {BLOCK}]"
                    ),
                    _ => bail!(
                        "quantization_config.weight_block_size must be two non-negative integers, got {v}"
                    ),
                }
            }
            Some(v) => bail!("quantization_config.weight_block_size must be a list [128, 128], got {v}"),
        };
        let mut modules = str_list(q, "modules_to_not_convert")?;
        modules.extend(str_list(q, "ignored_layers")?);
        Ok(Self { weight_block_size, modules_to_not_convert: modules })
    }

    /// Reads `quantization_config` from a whole `config.json` value: `Ok(None)` when it is
    /// absent or `null` (an unquantized checkpoint).
    pub fn from_config_json(config: &Value) -> Result<Option<Self>> {
        match config.get("quantization_config") {
            None | Some(Value::Null) => Ok(None),
            Some(q) => Self::from_json(q).map(Some),
        }
    }

    /// The canonical JSON written by the quantize example: `quant_method "fp8"`, `fmt "e4m3"`,
    /// `activation_scheme "dynamic"`, `weight_block_size [128, 128]`, `modules_to_not_convert`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": self.weight_block_size,
            "modules_to_not_convert": self.modules_to_not_convert,
        })
    }

    /// The `modules_to_not_convert` / `ignored_layers` entry that leaves `module` unquantized.
    pub fn excluded_by(&self, module: &str) -> Option<&str> {
        self.modules_to_not_convert.iter().map(String::as_str).find(|e| module_matches(module, e))
    }

    /// Whether the linear module at `module` (a dotted path such as
    /// `model.layers.0.mlp.up_proj`, without `.weight`) is FP8 in this checkpoint.
    ///
    /// The rule: a module is left unconverted when some entry of `modules_to_not_convert` /
    /// `ignored_layers` matches it **by whole dotted components**, i.e. the entry's components
    /// occur as a contiguous run of the module's components. So `lm_head` matches `lm_head`;
    /// `model.layers.0.mlp` matches every module under it (prefix); `mlp.gate` matches
    /// `model.layers.3.mlp.gate` (suffix); but `mlp.gate` does *not* match `mlp.gate_proj`
    /// and `model.layers.1` does *not* match `model.layers.10.mlp` — unlike transformers'
    /// plain substring test, whose accidental matches this rule avoids. Entries written by
    /// transformers and mistral.rs (full module names and short names like `lm_head`) match
    /// the same modules under both rules. Whether a module is linear at all is the model's
    /// business: embeddings and norms are never FP8 whatever this returns.
    pub fn is_quantized(&self, module: &str) -> bool {
        self.excluded_by(module).is_none()
    }
}

/// Whether `entry`'s dotted components occur as a contiguous run of `module`'s components.
fn module_matches(module: &str, entry: &str) -> bool {
    let module = format!(".{}.", module.trim_matches('.'));
    let entry = format!(".{}.", entry.trim_matches('.'));
    module.contains(&entry)
}

/// The convention used by the quantize example (and Qwen3-*-FP8, Llama-style FP8 checkpoints)
/// for which tensors become FP8: a rank-2 tensor named `<module>.weight` whose last module
/// component contains `_proj` (`q_proj`, `gate_proj`, `kv_a_proj_with_mqa`, ...). Embeddings
/// (`embed_tokens`), `lm_head` and norms are therefore kept in their original dtype.
pub fn is_default_fp8_target(name: &str, dims: &[usize]) -> bool {
    let Some(module) = name.strip_suffix(".weight") else { return false };
    let last = module.rsplit('.').next().unwrap_or(module);
    dims.len() == 2 && last.contains("_proj")
}

// ---------------------------------------------------------------------------------------------
// safetensors header validation
// ---------------------------------------------------------------------------------------------

/// One tensor of a checkpoint, as its safetensors header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Stored dtype (`F8_E4M3`, `BF16`, ...).
    pub dtype: StDtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// The file holding it.
    pub file: PathBuf,
    /// Byte offsets `[begin, end)` within the file's data section.
    pub data_offsets: (usize, usize),
}

impl TensorInfo {
    /// Stored size in bytes.
    pub fn nbytes(&self) -> usize {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// Reads and validates the header of one safetensors file without mapping it: the 8-byte
/// length, the JSON, every tensor's dtype, shape and offsets, and that the data section is
/// covered exactly (contiguous tensors, ending at the end of the file). Returns the tensors
/// by name. Errors name the file and the problem; nothing is read past the file's end.
/// The checks are those of [`parse_safetensors_header`], which this reads the bytes for.
pub fn read_safetensors_header(path: &Path) -> Result<BTreeMap<String, TensorInfo>> {
    let p = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| err(format!("{p}: cannot open safetensors file: {e}")))?;
    let len = file.metadata().map_err(|e| err(format!("{p}: cannot stat: {e}")))?.len();
    let n = match len {
        0..=7 => 0, // parse_safetensors_header reports the truncation
        _ => {
            let mut n8 = [0u8; 8];
            file.read_exact(&mut n8).map_err(|e| err(format!("{p}: cannot read the header length: {e}")))?;
            header_len(n8, len, path)?
        }
    };
    let mut bytes = vec![0u8; (8 + n).min(len) as usize];
    if len >= 8 {
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        file.read_exact(&mut bytes[8..]).map_err(|e| err(format!("{p}: cannot read the {n}-byte header: {e}")))?;
    }
    parse_safetensors_header(&bytes, len, path)
}

/// The header length `n` from the first 8 bytes of a `len`-byte file, checked against the
/// size limit and the file size.
fn header_len(n8: [u8; 8], len: u64, path: &Path) -> Result<u64> {
    let p = path.display();
    let n = u64::from_le_bytes(n8);
    if n > MAX_HEADER_BYTES {
        bail!("{p}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit (corrupt or not a safetensors file)")
    }
    if n > len - 8 {
        bail!(
            "{p}: header length {n} is larger than the file allows ({len} bytes, so at most {}): truncated \
             or not a safetensors file",
            len - 8
        )
    }
    Ok(n)
}

/// Validates a safetensors header held in memory: `bytes` is the start of a `file_len`-byte
/// file (at least its 8-byte length and the header; the whole file is fine too), and `path`
/// only names the file in errors. Performs every check of [`read_safetensors_header`] — the
/// function it calls — and never indexes past `bytes` (the fuzz targets drive it directly).
pub fn parse_safetensors_header(bytes: &[u8], file_len: u64, path: &Path) -> Result<BTreeMap<String, TensorInfo>> {
    let p = path.display();
    if file_len < 8 {
        bail!("{p}: truncated safetensors file: {file_len} bytes, fewer than the 8-byte header length")
    }
    let Some(n8) = bytes.get(..8) else {
        bail!("{p}: only {} bytes of the header were given, fewer than the 8-byte header length", bytes.len())
    };
    let n = header_len(n8.try_into().expect("8 bytes"), file_len, path)?;
    let Some(header) = bytes.get(8..8 + n as usize) else {
        bail!("{p}: only {} bytes were given, fewer than the 8 + {n} of the header", bytes.len())
    };
    let json: Value = serde_json::from_slice(header)
        .map_err(|e| err(format!("{p}: safetensors header is not valid JSON: {e}")))?;
    let Value::Object(entries) = json else { bail!("{p}: safetensors header must be a JSON object") };
    let data_len = file_len - 8 - n;
    let mut out = BTreeMap::new();
    for (name, v) in entries {
        if name == "__metadata__" {
            // The safetensors crate (which maps the file later) requires string values.
            if !v.as_object().is_some_and(|m| m.values().all(Value::is_string)) {
                bail!("{p}: __metadata__ must be a JSON object of strings, got {v}")
            }
            continue;
        }
        out.insert(name.clone(), parse_entry(path, &name, &v, data_len)?);
    }
    // The tensors must tile the data section exactly, as the safetensors format requires.
    let mut spans: Vec<(usize, usize, &str)> =
        out.iter().map(|(k, t)| (t.data_offsets.0, t.data_offsets.1, k.as_str())).collect();
    spans.sort();
    let mut at = 0usize;
    for (b, e, name) in spans {
        if b != at {
            bail!(
                "{p}: tensor {name} starts at data offset {b}, expected {at}: tensors overlap or leave a gap \
                 (corrupt header)"
            )
        }
        at = e;
    }
    if at as u64 != data_len {
        bail!("{p}: the data section holds {data_len} bytes but the tensors cover {at}: the file is truncated or has trailing bytes")
    }
    // After our checks (whose errors are clearer): serde_json's Value keeps the last of
    // duplicate keys, but the safetensors crate (which maps the file later) refuses duplicate
    // fields in a tensor entry. Run its header parser too: what we accept, the loader accepts.
    if let Err(e) = serde_json::from_slice::<safetensors::tensor::Metadata>(header) {
        bail!("{p}: safetensors header rejected by the safetensors format: {e}")
    }
    Ok(out)
}

fn parse_entry(path: &Path, name: &str, v: &Value, data_len: u64) -> Result<TensorInfo> {
    let p = path.display();
    let dtype_v = v.get("dtype").ok_or_else(|| err(format!("{p}: tensor {name} has no dtype")))?;
    let dtype: StDtype = serde_json::from_value(dtype_v.clone())
        .map_err(|_| err(format!("{p}: tensor {name} has unknown dtype {dtype_v}")))?;
    let shape_v = v.get("shape").ok_or_else(|| err(format!("{p}: tensor {name} has no shape")))?;
    let shape: Vec<usize> = shape_v
        .as_array()
        .and_then(|a| a.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect())
        .ok_or_else(|| err(format!("{p}: tensor {name} has invalid shape {shape_v}")))?;
    let off_v = v.get("data_offsets").ok_or_else(|| err(format!("{p}: tensor {name} has no data_offsets")))?;
    let offs: Option<Vec<u64>> = off_v.as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
    let (b, e) = match offs.as_deref() {
        Some(&[b, e]) if b <= e => (b, e),
        _ => bail!("{p}: tensor {name} has invalid data_offsets {off_v}: expected [begin, end] with begin <= end"),
    };
    if e > data_len {
        bail!(
            "{p}: tensor {name} data_offsets [{b}, {e}] run past the end of the data section ({data_len} bytes): \
             the file is truncated or the header is corrupt"
        )
    }
    // candle computes contiguous strides (products of trailing dims) even for empty tensors,
    // so the product of the non-zero dims must fit too: [0, 2^32, 2^32] holds no element but
    // its strides overflow (a panic in builds with overflow checks).
    let strides_fit = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1))).is_some();
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|_| strides_fit);
    let bits = numel.and_then(|n| n.checked_mul(dtype.bitsize()));
    let Some(bits) = bits else { bail!("{p}: tensor {name} shape {shape:?} overflows") };
    if bits % 8 != 0 || (bits / 8) as u64 != e - b {
        bail!(
            "{p}: tensor {name} data_offsets [{b}, {e}] span {} bytes but {dtype:?} {shape:?} needs {} bytes",
            e - b,
            bits as f64 / 8.0
        )
    }
    Ok(TensorInfo { dtype, shape, file: path.to_path_buf(), data_offsets: (b as usize, e as usize) })
}

// ---------------------------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------------------------

/// An opened, validated checkpoint directory (see the module docs for what is validated).
/// Cheap to clone: the memory maps are shared.
#[derive(Clone)]
pub struct Checkpoint {
    dir: PathBuf,
    config: Value,
    quant: Option<QuantizationConfig>,
    files: Vec<PathBuf>,
    tensors: Arc<BTreeMap<String, TensorInfo>>,
    tokenizer: Option<PathBuf>,
    mmaped: Arc<MmapedSafetensors>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("quantization", &self.quant)
            .field("files", &self.files)
            .field("tensors", &self.tensors.len())
            .field("tokenizer", &self.tokenizer)
            .finish()
    }
}

fn read_json(path: &Path, what: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            err(format!("{}: {what} is missing", path.display()))
        } else {
            err(format!("{}: cannot read {what}: {e}", path.display()))
        }
    })?;
    serde_json::from_str(&text).map_err(|e| err(format!("{}: {what} is not valid JSON: {e}", path.display())))
}

/// Reads an index's `weight_map` and checks its shard names.
fn read_index(index: &Path) -> Result<BTreeMap<String, String>> {
    let v = read_json(index, "the safetensors index")?;
    let ip = index.display();
    let Some(Value::Object(map)) = v.get("weight_map") else {
        bail!("{ip}: the index has no \"weight_map\" object")
    };
    let mut out = BTreeMap::new();
    for (tensor, shard) in map {
        let Value::String(shard) = shard else { bail!("{ip}: weight_map[{tensor:?}] must be a file name, got {shard}") };
        let sp = Path::new(shard);
        if shard.is_empty()
            || sp.is_absolute()
            || sp.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            bail!("{ip}: weight_map[{tensor:?}] = {shard:?} is not a file name inside the checkpoint directory")
        }
        out.insert(tensor.clone(), shard.clone());
    }
    if out.is_empty() {
        bail!("{ip}: weight_map is empty")
    }
    Ok(out)
}

impl Checkpoint {
    /// Opens a checkpoint directory: reads `config.json` and its `quantization_config`, finds
    /// `model.safetensors` or `model.safetensors.index.json` and its shards, validates every
    /// header and the FP8 layout (see the module docs), then memory-maps the files.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            bail!("checkpoint directory {} does not exist or is not a directory", dir.display())
        }
        let config_path = dir.join(CONFIG_FILE);
        let config = read_json(&config_path, "config.json")?;
        if !config.is_object() {
            bail!("{}: config.json must be a JSON object", config_path.display())
        }
        let quant = QuantizationConfig::from_config_json(&config)
            .map_err(|e| e.context(format!("in {}", config_path.display())))?;

        let index_path = dir.join(INDEX_FILE);
        let single = dir.join(SINGLE_FILE);
        let (files, weight_map) = if index_path.is_file() {
            let wm = read_index(&index_path)?;
            let shards: BTreeSet<&String> = wm.values().collect();
            let mut files = Vec::new();
            for shard in shards {
                let f = dir.join(shard);
                if !f.is_file() {
                    let n = wm.values().filter(|s| *s == shard).count();
                    bail!(
                        "shard {} listed in {} does not exist ({n} tensors map to it)",
                        f.display(),
                        index_path.display()
                    )
                }
                files.push(f);
            }
            (files, Some(wm))
        } else if single.is_file() {
            (vec![single], None)
        } else {
            bail!("no weights in {}: expected {SINGLE_FILE} or {INDEX_FILE}", dir.display())
        };

        let mut tensors: BTreeMap<String, TensorInfo> = BTreeMap::new();
        for f in &files {
            for (name, info) in read_safetensors_header(f)? {
                if let Some(prev) = tensors.get(&name) {
                    bail!("tensor {name} appears in both {} and {}", prev.file.display(), f.display())
                }
                tensors.insert(name, info);
            }
        }
        if let Some(wm) = &weight_map {
            for (tensor, shard) in wm {
                let want = dir.join(shard);
                match tensors.get(tensor) {
                    Some(info) if info.file == want => {}
                    Some(info) => bail!(
                        "{}: weight_map maps {tensor} to {shard}, but it is stored in {}",
                        index_path.display(),
                        info.file.display()
                    ),
                    None => bail!(
                        "{}: weight_map maps {tensor} to {shard}, but {} has no such tensor",
                        index_path.display(),
                        want.display()
                    ),
                }
            }
        }
        check_fp8_layout(&tensors, quant.as_ref(), &config_path)?;

        // SAFETY: the files were validated above (header, offsets, sizes), and memory-mapping
        // is sound as long as they are not modified while mapped — the same contract as
        // every mmap-based safetensors loader (candle, transformers).
        let mmaped = unsafe { MmapedSafetensors::multi(&files)? };
        let tokenizer = Some(dir.join("tokenizer.json")).filter(|p| p.is_file());
        Ok(Self { dir, config, quant, files, tensors: Arc::new(tensors), tokenizer, mmaped: Arc::new(mmaped) })
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The whole `config.json`.
    pub fn config_json(&self) -> &Value {
        &self.config
    }

    /// The validated `quantization_config`, or `None` for an unquantized checkpoint.
    pub fn quantization(&self) -> Option<&QuantizationConfig> {
        self.quant.as_ref()
    }

    /// Whether the linear module at `module` is FP8 here: the checkpoint is quantized and the
    /// module is not excluded (see [`QuantizationConfig::is_quantized`]).
    pub fn is_quantized(&self, module: &str) -> bool {
        self.quant.as_ref().is_some_and(|q| q.is_quantized(module))
    }

    /// The safetensors files, in index order (shard names sorted) or the single file.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    /// Header information for one tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name)
    }

    /// `tokenizer.json` next to the weights, if present.
    pub fn tokenizer_path(&self) -> Option<&Path> {
        self.tokenizer.as_deref()
    }

    /// Loads one tensor in its stored dtype.
    pub fn load_tensor(&self, name: &str, device: &Device) -> Result<Tensor> {
        if !self.tensors.contains_key(name) {
            bail!("cannot find tensor {name} in checkpoint {}", self.dir.display())
        }
        self.mmaped.load(name, device)
    }

    /// A [`VarBuilder`] over the checkpoint, for `dtype` (the dtype of dense tensors) and
    /// `device`. Unlike candle's own mmaped builder it refuses to convert FP8 silently:
    /// asking for `F8E4M3` a tensor stored otherwise (a bf16 weight where FP8 is expected), or
    /// asking for anything else a tensor stored as `F8_E4M3` (an FP8 weight read as dense,
    /// without its scales), is an error naming the tensor, its file and both dtypes. Other
    /// conversions (e.g. BF16 / F16 scales read as F32) happen as usual.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        let backend = CheckedBackend { st: self.mmaped.clone(), tensors: self.tensors.clone(), dir: self.dir.clone() };
        VarBuilder::from_backend(Box::new(backend), dtype, device.clone())
    }

    /// Loads the linear layer at `vb`'s prefix as FP8 when [`Checkpoint::is_quantized`] says
    /// so, else as a dense `candle_nn::Linear` in `vb`'s dtype.
    pub fn load_linear(&self, vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool) -> Result<AnyLinear> {
        let quantized = self.is_quantized(&vb.prefix());
        AnyLinear::load(vb, in_dim, out_dim, bias, quantized)
    }

    /// Loads an FP8 layer by module name (convenience over [`Fp8BlockLinear::load`]), with
    /// `in_dim` / `out_dim` taken from the stored weight.
    pub fn load_fp8_linear(&self, module: &str, device: &Device, bias: bool) -> Result<Fp8BlockLinear> {
        let wname = format!("{module}.weight");
        let Some(info) = self.tensors.get(&wname) else {
            bail!("cannot find tensor {wname} in checkpoint {}", self.dir.display())
        };
        let &[n, k] = info.shape.as_slice() else {
            bail!("{wname}: shape {:?} is not [out, in]", info.shape)
        };
        Fp8BlockLinear::load(self.var_builder(DType::F32, device).pp(module), k, n, bias)
    }

    /// Downloads (or finds in the local cache) `config.json`, the index and its shards (or
    /// `model.safetensors`) and `tokenizer.json` if the repository has one, then opens them.
    ///
    /// `revision` defaults to `main`. Uses hf-hub's blocking API with the cache from
    /// `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`; the token from
    /// `HF_TOKEN`, else that cache's token file; `HF_ENDPOINT` when set. With
    /// `HF_HUB_OFFLINE=1` nothing is downloaded: every file must be cached (a 40-hex
    /// `revision` is looked up as a snapshot directly).
    #[cfg(feature = "hub")]
    pub fn from_hub(repo_id: &str, revision: Option<&str>) -> Result<Self> {
        hub::fetch(repo_id, revision.unwrap_or("main")).and_then(Self::open)
    }
}

/// Cross-checks FP8 weights, their scales and the config (see the module docs).
fn check_fp8_layout(
    tensors: &BTreeMap<String, TensorInfo>,
    quant: Option<&QuantizationConfig>,
    config_path: &Path,
) -> Result<()> {
    for (name, info) in tensors {
        if let Some(module) = name.strip_suffix(".weight_scale_inv") {
            let wname = format!("{module}.weight");
            let f = info.file.display();
            let Some(w) = tensors.get(&wname) else {
                bail!("{name} (in {f}) has no matching {wname}")
            };
            if w.dtype != StDtype::F8_E4M3 {
                bail!("{wname} (in {}) is stored as {:?} but has a {name}: expected F8_E4M3", w.file.display(), w.dtype)
            }
            if !matches!(info.dtype, StDtype::F32 | StDtype::BF16 | StDtype::F16) {
                bail!("{name} (in {f}) is stored as {:?}: weight scales must be F32, BF16 or F16", info.dtype)
            }
            let &[n, k] = w.shape.as_slice() else {
                bail!("{wname} (in {}) has shape {:?}: an FP8 weight must be [out, in]", w.file.display(), w.shape)
            };
            check_weight_scale_shape(name, n, k, &info.shape).map_err(|e| e.context(format!("in {f}")))?;
        }
        if info.dtype == StDtype::F8_E4M3 {
            let f = info.file.display();
            let Some(quant) = quant else {
                bail!(
                    "{name} (in {f}) is stored as F8_E4M3 but {} has no quantization_config",
                    config_path.display()
                )
            };
            if let Some(module) = name.strip_suffix(".weight") {
                if !tensors.contains_key(&format!("{module}.weight_scale_inv")) {
                    bail!("{name} (in {f}) is F8_E4M3 but {module}.weight_scale_inv is missing")
                }
                if let Some(entry) = quant.excluded_by(module) {
                    bail!(
                        "{name} (in {f}) is F8_E4M3 but module {module} is excluded by modules_to_not_convert \
                         entry {entry:?} in {}",
                        config_path.display()
                    )
                }
            }
        }
    }
    Ok(())
}

/// The [`VarBuilder`] backend of [`Checkpoint::var_builder`].
struct CheckedBackend {
    st: Arc<MmapedSafetensors>,
    tensors: Arc<BTreeMap<String, TensorInfo>>,
    dir: PathBuf,
}

impl SimpleBackend for CheckedBackend {
    fn get(&self, s: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        if let Some(info) = self.tensors.get(name) {
            if info.shape != s.dims() {
                bail!("{name} (in {}): shape {:?} in the checkpoint, expected {:?}", info.file.display(), info.shape, s.dims())
            }
        }
        self.get_unchecked(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let Some(info) = self.tensors.get(name) else {
            bail!("cannot find tensor {name} in checkpoint {}", self.dir.display())
        };
        let f = info.file.display();
        if dtype == DType::F8E4M3 && info.dtype != StDtype::F8_E4M3 {
            bail!(
                "{name} (in {f}) is stored as {:?}, expected F8_E4M3: this module is not FP8 in the checkpoint \
                 (is it listed in quantization_config.modules_to_not_convert?)",
                info.dtype
            )
        }
        if info.dtype == StDtype::F8_E4M3 && dtype != DType::F8E4M3 {
            bail!(
                "{name} (in {f}) is stored as F8_E4M3 but was requested as {dtype:?}: an FP8 weight needs its \
                 weight_scale_inv; load the module with Fp8BlockLinear / AnyLinear"
            )
        }
        self.st.load(name, dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// Opens `path_or_repo` as a local checkpoint directory when it exists, else as a Hugging
/// Face Hub model id `owner/name`, optionally `owner/name@revision` (feature `hub`; a clear
/// error without it).
pub fn open_model(path_or_repo: &str) -> Result<Checkpoint> {
    let p = Path::new(path_or_repo);
    if p.exists() {
        return Checkpoint::open(p);
    }
    let (repo, rev) = match path_or_repo.split_once('@') {
        Some((r, v)) => (r, Some(v)),
        None => (path_or_repo, None),
    };
    let looks_like_id = repo.split('/').count() == 2 && repo.split('/').all(|s| !s.is_empty());
    if !looks_like_id {
        bail!("{path_or_repo:?} is neither an existing directory nor a Hugging Face model id (owner/name)")
    }
    #[cfg(feature = "hub")]
    {
        Checkpoint::from_hub(repo, rev)
    }
    #[cfg(not(feature = "hub"))]
    {
        let _ = rev;
        bail!(
            "{path_or_repo:?} is not a local directory, and candle-fp8 was built without the `hub` feature, so \
             it cannot be fetched from the Hugging Face Hub"
        )
    }
}

#[cfg(feature = "hub")]
mod hub {
    use super::*;
    use hf_hub::{Cache, Repo, RepoType};

    fn offline() -> bool {
        std::env::var("HF_HUB_OFFLINE")
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
            .unwrap_or(false)
    }

    fn cache() -> Cache {
        match std::env::var("HF_HUB_CACHE") {
            Ok(p) if !p.is_empty() => Cache::new(p.into()),
            _ => Cache::from_env(),
        }
    }

    /// Fetches the files and returns the snapshot directory holding them.
    pub(super) fn fetch(repo_id: &str, revision: &str) -> Result<PathBuf> {
        let repo = Repo::with_revision(repo_id.to_string(), RepoType::Model, revision.to_string());
        let cache = cache();
        let offline = offline();
        let api = if offline {
            None
        } else {
            let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(cache.clone()).with_progress(true);
            if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
                builder = builder.with_endpoint(endpoint);
            }
            if let Ok(token) = std::env::var("HF_TOKEN") {
                builder = builder.with_token(Some(token));
            }
            let api = builder
                .build()
                .map_err(|e| err(format!("hub: cannot start the Hugging Face API client: {e}")))?;
            Some(api.repo(repo.clone()))
        };
        let cached = cache.repo(repo.clone());
        // A revision given as a commit hash has no ref file: look in its snapshot directly.
        let pinned = (revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| cache.path().join(repo.folder_name()).join("snapshots").join(revision));
        let get = |file: &str| -> std::result::Result<PathBuf, String> {
            match &api {
                None => cached
                    .get(file)
                    .or_else(|| pinned.as_ref().map(|d| d.join(file)).filter(|p| p.exists()))
                    .ok_or_else(|| format!("{file} is not in the local cache {} (HF_HUB_OFFLINE is set)", cache.path().display())),
                Some(api) => api.get(file).map_err(|e| format!("{file}: {e}")),
            }
        };
        let what = format!("{repo_id}@{revision}");
        let config = get(CONFIG_FILE).map_err(|e| err(format!("hub {what}: {e}")))?;
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        match get(INDEX_FILE) {
            Ok(index) => {
                let shards: BTreeSet<String> = read_index(&index)?.into_values().collect();
                for s in &shards {
                    let p = get(s).map_err(|e| err(format!("hub {what}: shard {e}")))?;
                    if p.parent() != Some(dir.as_path()) {
                        bail!("hub {what}: {s} resolved to another snapshot ({}); the revision moved during the download", p.display())
                    }
                }
            }
            Err(index_err) => {
                get(SINGLE_FILE).map_err(|e| err(format!("hub {what}: no weights: {index_err}; {e}")))?;
            }
        }
        // Optional: a repository without tokenizer.json still opens.
        let _ = get("tokenizer.json");
        Ok(dir)
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Writes tensors as Hugging Face-style safetensors shards, streaming: tensors are buffered
/// until the current shard would exceed `max_shard_bytes` (or [`ShardWriter::flush`] is
/// called), then written. [`ShardWriter::finish`] names the shards
/// `model-0000i-of-0000n.safetensors` and writes `model.safetensors.index.json`, or, when there
/// is a single shard, writes `model.safetensors` and no index.
pub struct ShardWriter {
    dir: PathBuf,
    max_shard_bytes: Option<u64>,
    pending: Vec<(String, Tensor)>,
    pending_bytes: u64,
    written: Vec<(PathBuf, Vec<String>)>,
    total_bytes: u64,
    names: BTreeSet<String>,
}

impl ShardWriter {
    /// A writer into `dir` (created if needed); `None` means a single shard.
    pub fn new(dir: impl AsRef<Path>, max_shard_bytes: Option<u64>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Self {
            dir,
            max_shard_bytes,
            pending: Vec::new(),
            pending_bytes: 0,
            written: Vec::new(),
            total_bytes: 0,
            names: BTreeSet::new(),
        })
    }

    /// Adds a tensor (any dtype candle can store, including `F8E4M3`).
    pub fn push(&mut self, name: impl Into<String>, tensor: Tensor) -> Result<()> {
        let name = name.into();
        if !self.names.insert(name.clone()) {
            bail!("ShardWriter: tensor {name} written twice")
        }
        let bytes = (tensor.elem_count() * tensor.dtype().size_in_bytes()) as u64;
        if let Some(max) = self.max_shard_bytes {
            if !self.pending.is_empty() && self.pending_bytes + bytes > max {
                self.flush()?;
            }
        }
        self.pending_bytes += bytes;
        self.total_bytes += bytes;
        self.pending.push((name, tensor.contiguous()?));
        Ok(())
    }

    /// Ends the current shard (no-op when it is empty).
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tmp = self.dir.join(format!(".shard-{}.safetensors.partial", self.written.len()));
        let tensors = std::mem::take(&mut self.pending);
        let names = tensors.iter().map(|(n, _)| n.clone()).collect();
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        safetensors::serialize_to_file(tensors.iter().map(|(n, t)| (n.as_str(), t)), Some(meta), &tmp)
            .map_err(|e| err(format!("cannot write {}: {e}", tmp.display())))?;
        self.pending_bytes = 0;
        self.written.push((tmp, names));
        Ok(())
    }

    /// Writes what is left, renames the shards to their final names, writes the index when
    /// there are several, and returns the files written.
    pub fn finish(mut self) -> Result<Vec<PathBuf>> {
        self.flush()?;
        let n = self.written.len();
        let rename = |from: &Path, to: &Path| {
            std::fs::rename(from, to).map_err(|e| err(format!("cannot rename {} to {}: {e}", from.display(), to.display())))
        };
        if n <= 1 {
            let out = self.dir.join(SINGLE_FILE);
            match self.written.first() {
                Some((tmp, _)) => rename(tmp, &out)?,
                None => {
                    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
                    safetensors::serialize_to_file(Vec::<(&str, &Tensor)>::new(), Some(meta), &out)
                        .map_err(|e| err(format!("cannot write {}: {e}", out.display())))?
                }
            }
            return Ok(vec![out]);
        }
        let mut weight_map = serde_json::Map::new();
        let mut files = Vec::new();
        for (i, (tmp, names)) in self.written.iter().enumerate() {
            let fname = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
            let out = self.dir.join(&fname);
            rename(tmp, &out)?;
            for t in names {
                weight_map.insert(t.clone(), Value::String(fname.clone()));
            }
            files.push(out);
        }
        let index = serde_json::json!({ "metadata": { "total_size": self.total_bytes }, "weight_map": weight_map });
        let ipath = self.dir.join(INDEX_FILE);
        let text = serde_json::to_string_pretty(&index).map_err(|e| err(e.to_string()))?;
        std::fs::write(&ipath, text).map_err(|e| err(format!("cannot write {}: {e}", ipath.display())))?;
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_matching_is_by_components() {
        let q = QuantizationConfig::new(vec!["lm_head".into(), "mlp.gate".into(), "model.layers.1".into()]);
        assert!(!q.is_quantized("lm_head"));
        assert!(!q.is_quantized("model.layers.3.mlp.gate"));
        assert!(q.is_quantized("model.layers.3.mlp.gate_proj"));
        assert!(!q.is_quantized("model.layers.1.self_attn.q_proj"));
        assert!(q.is_quantized("model.layers.10.self_attn.q_proj"));
        assert!(q.is_quantized("model.lm_head_extra"));
        assert_eq!(q.excluded_by("model.layers.1.mlp.up_proj"), Some("model.layers.1"));
    }

    #[test]
    fn default_targets() {
        assert!(is_default_fp8_target("model.layers.0.mlp.up_proj.weight", &[4, 4]));
        assert!(is_default_fp8_target("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", &[4, 4]));
        assert!(!is_default_fp8_target("model.layers.0.mlp.up_proj.bias", &[4]));
        assert!(!is_default_fp8_target("lm_head.weight", &[4, 4]));
        assert!(!is_default_fp8_target("model.embed_tokens.weight", &[4, 4]));
        assert!(!is_default_fp8_target("model.norm.weight", &[4]));
    }
}
