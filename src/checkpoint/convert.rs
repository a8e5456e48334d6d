//! Converting a Hugging Face checkpoint (bf16 / f16 / f32 safetensors) or a GGUF file into a
//! blocked-FP8 checkpoint in the layout of `Qwen/Qwen3-32B-FP8`.
//!
//! Which tensors become FP8 (the rule, explicit):
//! 1. a rank-2 float tensor named `<module>.weight`, and
//! 2. `<module>`'s last component contains `_proj` (`q_proj`, `gate_proj`, …; with
//!    [`ConvertOptions::all_linear`]: any module), and
//! 3. no [`ConvertOptions::skip`] entry matches `<module>` by whole dotted components (default
//!    `lm_head`, `embed_tokens`; the rule of `modules_to_not_convert`).
//!
//! Such a weight is stored as `F8_E4M3` `weight` + `weight_scale_inv`
//! `[ceil(N/128), ceil(K/128)]` ([`crate::quantize_weight`]: `max(block amax, 1e-4) / 448`).
//! Every other float tensor (embeddings, norms, biases, unquantized linears) is stored as
//! bf16; other tensors as they are. The output holds `config.json` (the model's, with
//! `torch_dtype` `bfloat16` and a `quantization_config` `{quant_method: fp8, fmt: e4m3,
//! activation_scheme: dynamic, weight_block_size: [128, 128], modules_to_not_convert}`),
//! `model.safetensors` or shards + index above [`ConvertOptions::max_shard_bytes`], the
//! tokenizer files (`tokenizer.json`, `tokenizer_config.json` with the chat template) and
//! `generation_config.json`; it is re-opened with [`Checkpoint::open`] before returning.

use super::gguf::GgufCheckpoint;
use super::{is_default_fp8_target, Checkpoint, QuantizationConfig, ShardWriter, CONFIG_FILE, INDEX_FILE, SINGLE_FILE};
use crate::models::GENERATION_CONFIG_FILE;
use candle_core::{bail, DType, Device, Error, Result, Tensor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// How [`convert_safetensors`] / [`convert_gguf`] convert.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// Modules left unquantized (dotted names or runs of components; default `lm_head`,
    /// `embed_tokens`). They become `modules_to_not_convert`.
    pub skip: Vec<String>,
    /// Quantize every rank-2 `.weight` that is not skipped, not only `*_proj` modules.
    pub all_linear: bool,
    /// Storage dtype of `weight_scale_inv`: F32 (default, as Qwen3-*-FP8), BF16 or F16 (a
    /// scale that would round to zero or overflow there is an error).
    pub scale_dtype: DType,
    /// Largest output shard in bytes; `None`: one file. Default 5 GiB.
    pub max_shard_bytes: Option<u64>,
    /// A progress bar over tensors on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        Self {
            skip: vec!["lm_head".into(), "embed_tokens".into()],
            all_linear: false,
            scale_dtype: DType::F32,
            max_shard_bytes: Some(5 << 30),
            progress: true,
        }
    }
}

impl ConvertOptions {
    /// These options with `skip` as the modules left unquantized.
    pub fn skip(self, skip: Vec<String>) -> Self {
        Self { skip, ..self }
    }

    /// These options with the shard size limit set (`None`: one file).
    pub fn max_shard_bytes(self, max: Option<u64>) -> Self {
        Self { max_shard_bytes: max, ..self }
    }

    /// These options with the progress bar on or off.
    pub fn progress(self, on: bool) -> Self {
        Self { progress: on, ..self }
    }

    /// These options with every non-skipped rank-2 weight quantized (`true`) or only `*_proj`.
    pub fn all_linear(self, on: bool) -> Self {
        Self { all_linear: on, ..self }
    }

    /// These options with the scale storage dtype set.
    pub fn scale_dtype(self, dtype: DType) -> Self {
        Self { scale_dtype: dtype, ..self }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, Default)]
pub struct ConvertReport {
    /// The input (directory or file).
    pub input: PathBuf,
    /// The output directory.
    pub output: PathBuf,
    /// Modules whose weight became FP8.
    pub quantized: Vec<String>,
    /// Tensors stored otherwise (bf16, or as they were for non-float tensors).
    pub kept: usize,
    /// Bytes of tensor data read.
    pub bytes_in: u64,
    /// Bytes of tensor data written.
    pub bytes_out: u64,
    /// The safetensors files written.
    pub files: Vec<PathBuf>,
    /// The other files written or copied (config, tokenizer, generation config, …).
    pub side_files: Vec<String>,
    /// Things the caller should know (e.g. a GGUF file without a tokenizer).
    pub warnings: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl std::fmt::Display for ConvertReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "{} -> {}: {} tensors converted ({} linear weights to FP8, {} kept as bf16 / as-is), {:.1} MB -> {:.1} MB \
             ({:.2}x) in {} safetensors file(s), {:.1} s",
            self.input.display(),
            self.output.display(),
            self.quantized.len() + self.kept,
            self.quantized.len(),
            self.kept,
            mb(self.bytes_in),
            mb(self.bytes_out),
            self.bytes_in as f64 / self.bytes_out.max(1) as f64,
            self.files.len(),
            self.seconds
        )?;
        if !self.side_files.is_empty() {
            write!(f, "; also {}", self.side_files.join(", "))?;
        }
        for w in &self.warnings {
            write!(f, "\nwarning: {w}")?;
        }
        Ok(())
    }
}

/// One input tensor.
struct Item {
    name: String,
    dims: Vec<usize>,
    float: bool,
    bytes_in: u64,
}

fn check_output(output: &Path, input: &Path) -> Result<()> {
    if output.exists() {
        let same = match (output.canonicalize(), input.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let occupied = [CONFIG_FILE, SINGLE_FILE, INDEX_FILE].iter().any(|f| output.join(f).exists());
        if same || occupied {
            bail!("refusing to write into {}: it already holds a checkpoint (or is the input)", output.display())
        }
        if !output.is_dir() {
            bail!("output {} exists and is not a directory", output.display())
        }
    }
    Ok(())
}

fn progress_bar(n: usize, on: bool) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("converting [{bar:30}] {pos}/{len} tensors, {elapsed} {wide_msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// `w` as e4m3 codes and block scales stored as `scale_dtype`. With F32 scales this is
/// [`crate::quantize_weight`]; with BF16 / F16 scales the scales are rounded first and the codes
/// computed with the rounded scales (`sat_e4m3(w / stored scale)`), so that codes × stored
/// scale is what the weight's quantization meant — as torch-written FP8 checkpoints do.
fn quantize(w: &Tensor, scale_dtype: DType) -> Result<(Tensor, Tensor)> {
    let w = w.to_dtype(DType::F32)?;
    let (q, sc) = crate::quantize_weight(&w)?;
    if scale_dtype == DType::F32 {
        return Ok((q, sc));
    }
    let stored = sc.to_dtype(scale_dtype)?;
    let s = stored.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    if let Some(i) = s.iter().position(|v| !(*v > 0.0 && v.is_finite())) {
        bail!("block scale #{i} is not representable as {scale_dtype:?} (stored {}); use F32 scales", s[i])
    }
    let (n, k) = w.dims2()?;
    let kb = crate::format::num_blocks(k);
    let wv = w.flatten_all()?.to_vec1::<f32>()?;
    let codes: Vec<crate::F8E4M3> = wv
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let (r, c) = (i / k, i % k);
            crate::format::f32_to_e4m3(x / s[(r / crate::format::BLOCK) * kb + c / crate::format::BLOCK])
        })
        .collect();
    Ok((Tensor::from_vec(codes, (n, k), w.device())?, stored))
}

/// Converts the tensors; returns the modules left unconverted that the skip list does not
/// already name.
fn write_tensors(
    items: &[Item],
    load: &mut dyn FnMut(&str) -> Result<Tensor>,
    output: &Path,
    opts: &ConvertOptions,
    report: &mut ConvertReport,
) -> Result<Vec<String>> {
    if let Some(0) = opts.max_shard_bytes {
        bail!("max_shard_bytes must be positive")
    }
    if !matches!(opts.scale_dtype, DType::F32 | DType::BF16 | DType::F16) {
        bail!("scale_dtype must be F32, BF16 or F16, got {:?}", opts.scale_dtype)
    }
    let skip = QuantizationConfig::new(
        opts.skip.iter().map(|s| s.trim_matches('.').to_string()).filter(|s| !s.is_empty()).collect(),
    );
    let mut not_converted = Vec::new();
    let mut writer = ShardWriter::new(output, opts.max_shard_bytes)?;
    let bar = progress_bar(items.len(), opts.progress);
    for item in items {
        bar.set_message(item.name.clone());
        let name = item.name.as_str();
        report.bytes_in += item.bytes_in;
        let t = load(name)?;
        let module = name.strip_suffix(".weight");
        let candidate = module.is_some() && item.dims.len() == 2 && item.float && t.elem_count() > 0;
        let by_rule = opts.all_linear || is_default_fp8_target(name, &item.dims);
        match module {
            Some(m) if candidate && by_rule && skip.is_quantized(m) => {
                let (wq, stored) =
                    quantize(&t, opts.scale_dtype).map_err(|e| e.context(format!("quantizing {name}")))?;
                report.bytes_out += (wq.elem_count() + stored.elem_count() * stored.dtype().size_in_bytes()) as u64;
                writer.push(name, wq)?;
                writer.push(format!("{m}.weight_scale_inv"), stored)?;
                report.quantized.push(m.to_string());
            }
            _ => {
                if let Some(m) = module.filter(|m| candidate && skip.is_quantized(m)) {
                    not_converted.push(m.to_string());
                }
                let t = if item.float { t.to_dtype(DType::BF16)? } else { t };
                report.bytes_out += (t.elem_count() * t.dtype().size_in_bytes()) as u64;
                writer.push(name, t)?;
                report.kept += 1;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    report.files = writer.finish()?;
    let mut modules = skip.modules_to_not_convert;
    modules.extend(not_converted);
    Ok(modules)
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| err(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|e| err(format!("cannot write {}: {e}", path.display())))
}

fn write_config(
    output: &Path,
    mut config: Value,
    not_converted: Vec<String>,
    report: &mut ConvertReport,
) -> Result<()> {
    config["quantization_config"] = QuantizationConfig::new(not_converted).to_json();
    config["torch_dtype"] = json!("bfloat16");
    if config.get("dtype").is_some() {
        // transformers 5 writes (and prefers) `dtype`.
        config["dtype"] = json!("bfloat16");
    }
    write_json(&output.join(CONFIG_FILE), &config)?;
    report.side_files.push(CONFIG_FILE.into());
    Ok(())
}

/// Files of a checkpoint directory that are weights (never copied).
fn is_weight_file(name: &str) -> bool {
    const EXT: [&str; 10] =
        [".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt", ".index.json"];
    EXT.iter().any(|e| name.ends_with(e))
}

/// Converts the Hugging Face checkpoint directory `input` (bf16 / f16 / f32 safetensors,
/// sharded or not, no `quantization_config`) into `output` (created; must not hold a
/// checkpoint). Every other top-level file but weights (tokenizer files, generation config,
/// chat template, README…) is copied; `generation_config.json` is written from the config's
/// bos / eos ids when the input has none.
pub fn convert_safetensors(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let (input, output) = (input.as_ref(), output.as_ref());
    let t0 = Instant::now();
    let ck = Checkpoint::open(input).map_err(|e| e.context(format!("opening input checkpoint {}", input.display())))?;
    if ck.quantization().is_some() {
        bail!("{} already has a quantization_config: it is not an unquantized checkpoint", input.display())
    }
    check_output(output, input)?;
    let mut report = ConvertReport { input: input.to_path_buf(), output: output.to_path_buf(), ..Default::default() };
    let mut items = Vec::new();
    for file in ck.files() {
        for name in ck.tensor_names() {
            let Some(info) = ck.tensor_info(name).filter(|i| &i.file == file) else {
                continue;
            };
            use ::safetensors::Dtype as St;
            let float = matches!(info.dtype, St::BF16 | St::F16 | St::F32 | St::F64);
            items.push(Item {
                name: name.to_string(),
                dims: info.shape.clone(),
                float,
                bytes_in: info.nbytes() as u64,
            });
        }
    }
    let cpu = Device::Cpu;
    let not_converted = write_tensors(&items, &mut |n| ck.load_tensor(n, &cpu), output, opts, &mut report)?;
    write_config(output, ck.config_json().clone(), not_converted, &mut report)?;
    let mut entries: Vec<_> = std::fs::read_dir(input)
        .map_err(|e| err(format!("cannot list {}: {e}", input.display())))?
        .filter_map(|e| e.ok())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let fname = entry.file_name();
        let f = fname.to_string_lossy();
        // `is_file` follows symlinks (a hub snapshot links into its blob store).
        if f.starts_with('.') || f == CONFIG_FILE || is_weight_file(&f) || !entry.path().is_file() {
            continue;
        }
        std::fs::copy(entry.path(), output.join(&fname))
            .map_err(|e| err(format!("cannot copy {} to {}: {e}", entry.path().display(), output.display())))?;
        report.side_files.push(f.into_owned());
    }
    if !output.join(GENERATION_CONFIG_FILE).exists() {
        let cfg = ck.config_json();
        let mut g = json!({ "_from_model_config": true });
        for k in ["bos_token_id", "eos_token_id", "pad_token_id"] {
            if let Some(v) = cfg.get(k).filter(|v| !v.is_null()) {
                g[k] = v.clone();
            }
        }
        write_json(&output.join(GENERATION_CONFIG_FILE), &g)?;
        report.side_files.push(GENERATION_CONFIG_FILE.into());
    }
    if !output.join(crate::models::TOKENIZER_FILE).exists() {
        report.warnings.push(format!("{} has no tokenizer.json: the output has none either", input.display()));
    }
    Checkpoint::open(output).map_err(|e| e.context(format!("re-opening the output {}", output.display())))?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Converts the GGUF file `path` ([`GgufCheckpoint`]: `llama`, `qwen2` or `qwen3`; any ggml
/// tensor type candle reads, dequantized to f32 and q/k rows un-permuted) into `output`, with
/// the `config.json` built from its metadata and its tokenizer ([`crate::models::Tokenizer::from_gguf`],
/// chat template included) saved as `tokenizer.json` / `tokenizer_config.json`, plus
/// `generation_config.json`. Note the FP8 weights are a re-quantization of already quantized
/// values: the error adds to the GGUF's own.
pub fn convert_gguf(path: impl AsRef<Path>, output: impl AsRef<Path>, opts: &ConvertOptions) -> Result<ConvertReport> {
    let (path, output) = (path.as_ref(), output.as_ref());
    let t0 = Instant::now();
    let gguf = GgufCheckpoint::open(path)?;
    let config = gguf.config_json()?;
    gguf.decoder_config()?;
    check_output(output, path)?;
    let mut report = ConvertReport { input: path.to_path_buf(), output: output.to_path_buf(), ..Default::default() };
    let items: Vec<Item> = gguf
        .tensors()
        .iter()
        .map(|t| Item { name: t.hf_name.clone(), dims: t.shape.clone(), float: true, bytes_in: t.nbytes })
        .collect();
    let cpu = Device::Cpu;
    let not_converted = write_tensors(&items, &mut |n| gguf.load(n, &cpu), output, opts, &mut report)?;
    write_config(output, config.clone(), not_converted, &mut report)?;
    let mut gen = json!({ "_from_model_config": true });
    if gguf.content().metadata.contains_key("tokenizer.ggml.model") {
        let tok = gguf.tokenizer()?;
        tok.save(output)?;
        report
            .side_files
            .extend([crate::models::TOKENIZER_FILE.to_string(), crate::models::TOKENIZER_CONFIG_FILE.to_string()]);
        gen = tok.generation_config();
    } else {
        report.warnings.push(format!("{} has no tokenizer metadata: the output has no tokenizer", path.display()));
        for k in ["bos_token_id", "eos_token_id"] {
            if let Some(v) = config.get(k) {
                gen[k] = v.clone();
            }
        }
    }
    write_json(&output.join(GENERATION_CONFIG_FILE), &gen)?;
    report.side_files.push(GENERATION_CONFIG_FILE.into());
    Checkpoint::open(output).map_err(|e| e.context(format!("re-opening the output {}", output.display())))?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Whether `path` is a GGUF file (by its magic bytes).
pub fn is_gguf_file(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

/// Converts `input`: a GGUF file ([`convert_gguf`]), a checkpoint directory
/// ([`convert_safetensors`]), or else a Hugging Face Hub id `owner/name[@revision]` fetched
/// through [`super::open_model`] (feature `hub`).
pub fn convert(input: &str, output: impl AsRef<Path>, opts: &ConvertOptions) -> Result<ConvertReport> {
    let p = Path::new(input);
    if p.is_file() {
        if is_gguf_file(p) {
            return convert_gguf(p, output, opts);
        }
        bail!("{input} is a file but not a GGUF file (expected a GGUF file, a checkpoint directory or a hub id)")
    }
    if p.is_dir() {
        return convert_safetensors(p, output, opts);
    }
    let ck = super::open_model(input)?;
    convert_safetensors(ck.dir(), output, opts)
}
