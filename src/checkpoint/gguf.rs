//! GGUF files (llama.cpp) read as Hugging Face checkpoints: tensor names mapped to the
//! Hugging Face ones, tensors dequantized from any ggml type candle reads (to f32), llama.cpp's
//! q/k row permutation undone, and a Hugging Face `config.json` built from the metadata.
//!
//! Architectures (`general.architecture`): `llama` (Llama, SmolLM, TinyLlama…; q/k rows
//! un-permuted), `qwen2` and `qwen3` (stored unpermuted). Anything else is an error naming the
//! architecture and the file, as is a tensor the mapping does not know.

use crate::models::{DecoderConfig, Family, Tokenizer};
use candle_core::quantized::gguf_file::{self, Value as GValue};
use candle_core::quantized::GgmlDType;
use candle_core::{bail, Device, Error, Result, Tensor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// The `general.architecture` values [`GgufCheckpoint`] reads.
pub const GGUF_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3"];

/// One tensor of a GGUF file, with its Hugging Face name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// The llama.cpp name (`blk.0.attn_q.weight`).
    pub gguf_name: String,
    /// The Hugging Face name (`model.layers.0.self_attn.q_proj.weight`).
    pub hf_name: String,
    /// The stored ggml type.
    pub ggml_dtype: GgmlDType,
    /// The shape in Hugging Face order (`[out, in]` for a linear weight).
    pub shape: Vec<usize>,
    /// Bytes stored in the file.
    pub nbytes: u64,
    /// Heads whose rows llama.cpp permuted (q: query heads, k: key/value heads), undone by
    /// [`GgufCheckpoint::load`]; `None` when the tensor is stored as is.
    pub unpermute_heads: Option<usize>,
}

/// Maps a llama.cpp tensor name to its Hugging Face name (`None`: not a tensor of the
/// supported decoder architectures).
///
/// `token_embd` → `model.embed_tokens`, `output_norm` → `model.norm`, `output` → `lm_head`,
/// `blk.N.attn_{q,k,v,output}` → `model.layers.N.self_attn.{q,k,v,o}_proj`,
/// `blk.N.attn_{q,k}_norm` → `…self_attn.{q,k}_norm`, `blk.N.ffn_{gate,up,down}` →
/// `…mlp.{gate,up,down}_proj`, `blk.N.attn_norm` → `…input_layernorm`, `blk.N.ffn_norm` →
/// `…post_attention_layernorm`; the suffix (`.weight`, `.bias`) is kept.
pub fn hf_tensor_name(gguf_name: &str) -> Option<String> {
    let (base, suffix) = gguf_name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let hf = match base {
        "token_embd" => "model.embed_tokens".to_string(),
        "output_norm" => "model.norm".to_string(),
        "output" => "lm_head".to_string(),
        _ => {
            let rest = base.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            let layer: usize = layer.parse().ok()?;
            let module = match part {
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "attn_q_norm" => "self_attn.q_norm",
                "attn_k_norm" => "self_attn.k_norm",
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            format!("model.layers.{layer}.{module}")
        }
    };
    Some(format!("{hf}.{suffix}"))
}

/// A GGUF file opened as a Hugging Face decoder checkpoint (see the module docs).
#[derive(Debug)]
pub struct GgufCheckpoint {
    path: PathBuf,
    content: gguf_file::Content,
    arch: String,
    family: Family,
    tensors: Vec<GgufTensor>,
}

fn as_u64(v: &GValue) -> Option<u64> {
    match v {
        GValue::U8(x) => Some(*x as u64),
        GValue::U16(x) => Some(*x as u64),
        GValue::U32(x) => Some(*x as u64),
        GValue::U64(x) => Some(*x),
        GValue::I8(x) => u64::try_from(*x).ok(),
        GValue::I16(x) => u64::try_from(*x).ok(),
        GValue::I32(x) => u64::try_from(*x).ok(),
        GValue::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    }
}

fn as_f64(v: &GValue) -> Option<f64> {
    match v {
        GValue::F32(x) => Some(*x as f64),
        GValue::F64(x) => Some(*x),
        v => as_u64(v).map(|x| x as f64),
    }
}

impl GgufCheckpoint {
    /// Reads the header of `path` (metadata and tensor directory; no tensor data), checks the
    /// architecture and maps every tensor name.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let p = path.display().to_string();
        let mut f = std::fs::File::open(&path).map_err(|e| err(format!("cannot open GGUF file {p}: {e}")))?;
        let content = gguf_file::Content::read(&mut f).map_err(|e| {
            let msg = e.to_string();
            // candle: "unknown dtype for tensor {ggml type id}".
            let id = msg.split_once("unknown dtype for tensor ").and_then(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_digit()).next().and_then(|d| d.parse::<u32>().ok())
            });
            match id {
                Some(id) => err(format!(
                    "{p}: ggml tensor type {id} ({}) is not supported: candle reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, \
                     Q5_1, Q8_0, Q8_1 and Q2_K..Q8_K",
                    ggml_type_name(id)
                )),
                None => err(format!("{p}: cannot read the GGUF header: {msg}")),
            }
        })?;
        let arch = match content.metadata.get("general.architecture") {
            Some(GValue::String(a)) => a.clone(),
            Some(v) => bail!("{p}: general.architecture is not a string: {v:?}"),
            None => bail!("{p}: GGUF metadata general.architecture is missing"),
        };
        let family = match arch.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            a => bail!("{p}: GGUF architecture {a:?} is not supported (supported: {})", GGUF_ARCHITECTURES.join(", ")),
        };
        let mut me = Self { path, content, arch, family, tensors: Vec::new() };
        let mut names: Vec<&String> = me.content.tensor_infos.keys().collect();
        names.sort();
        for name in names {
            if name == "rope_freqs.weight" {
                bail!(
                    "{p}: tensor rope_freqs.weight (Llama-3.1-style rope scaling baked into frequency factors) is not \
                     supported: its rope_scaling cannot be recovered for config.json"
                )
            }
            if hf_tensor_name(name).is_none() {
                let info = &me.content.tensor_infos[name];
                bail!(
                    "{p}: tensor {name} ({:?}, shape {:?}) has no Hugging Face counterpart for architecture {}",
                    info.ggml_dtype,
                    info.shape.dims(),
                    me.arch
                )
            }
        }
        let (hq, hkv) = (me.meta_usize("attention.head_count")?, me.kv_heads()?);
        let mut tensors = Vec::new();
        for (name, info) in &me.content.tensor_infos {
            let hf_name = hf_tensor_name(name).expect("checked above");
            let elems = info.shape.elem_count();
            let nbytes = (elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()) as u64;
            let unpermute_heads = match (family, name.rsplit_once('.').map(|x| x.0).and_then(|b| b.rsplit('.').next()))
            {
                (Family::Llama, Some("attn_q")) => Some(hq),
                (Family::Llama, Some("attn_k")) => Some(hkv),
                _ => None,
            };
            tensors.push(GgufTensor {
                gguf_name: name.clone(),
                hf_name,
                ggml_dtype: info.ggml_dtype,
                shape: info.shape.dims().to_vec(),
                nbytes,
                unpermute_heads,
            });
        }
        tensors.sort_by_key(|t| (tensor_order(&t.hf_name), t.hf_name.clone()));
        if !tensors.iter().any(|t| t.hf_name == "model.embed_tokens.weight") {
            bail!("{p}: no token_embd.weight tensor")
        }
        me.tensors = tensors;
        Ok(me)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header (metadata and tensor directory).
    pub fn content(&self) -> &gguf_file::Content {
        &self.content
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> &str {
        &self.arch
    }

    /// The decoder family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Every tensor, in checkpoint order (embeddings, layers by index, final norm, lm_head).
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// Total bytes of tensor data in the file.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.nbytes).sum()
    }

    fn meta(&self, key: &str) -> Option<&GValue> {
        self.content.metadata.get(&format!("{}.{key}", self.arch))
    }

    fn meta_usize(&self, key: &str) -> Result<usize> {
        let k = format!("{}.{key}", self.arch);
        match self.content.metadata.get(&k) {
            Some(v) => as_u64(v).map(|x| x as usize).ok_or_else(|| {
                err(format!("{}: GGUF metadata {k} must be an integer, got {v:?}", self.path.display()))
            }),
            None => bail!("{}: GGUF metadata {k} is missing", self.path.display()),
        }
    }

    fn meta_opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.meta(key) {
            None => Ok(None),
            Some(_) => self.meta_usize(key).map(Some),
        }
    }

    fn meta_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.meta(key) {
            None => Ok(None),
            Some(v) => as_f64(v).map(Some).ok_or_else(|| {
                err(format!("{}: GGUF metadata {}.{key} must be a number, got {v:?}", self.path.display(), self.arch))
            }),
        }
    }

    fn kv_heads(&self) -> Result<usize> {
        Ok(self.meta_opt_usize("attention.head_count_kv")?.unwrap_or(self.meta_usize("attention.head_count")?))
    }

    fn tensor(&self, hf_name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.hf_name == hf_name)
    }

    /// The Hugging Face `config.json` of the model: `model_type`, `architectures`, the sizes,
    /// heads, kv heads, `head_dim`, `rope_theta`, `rms_norm_eps` (the stored f32 as f64, as
    /// transformers reads it), `max_position_embeddings` (`context_length`),
    /// `tie_word_embeddings` (no `output.weight`), `attention_bias`, bos / eos ids, and
    /// `torch_dtype` `bfloat16`. Unsupported rope scaling and partial rotary embeddings are
    /// errors.
    pub fn config_json(&self) -> Result<Value> {
        let p = self.path.display();
        let hidden = self.meta_usize("embedding_length")?;
        let heads = self.meta_usize("attention.head_count")?;
        let kv = self.kv_heads()?;
        let head_dim = self.meta_opt_usize("attention.key_length")?.unwrap_or(hidden / heads.max(1));
        if let Some(vl) = self.meta_opt_usize("attention.value_length")? {
            if vl != head_dim {
                bail!("{p}: attention.value_length {vl} differs from key_length {head_dim}: not supported")
            }
        }
        if let Some(rd) = self.meta_opt_usize("rope.dimension_count")? {
            if rd != head_dim {
                bail!("{p}: rope.dimension_count {rd} differs from head_dim {head_dim} (partial rotary embeddings are not supported)")
            }
        }
        if let Some(GValue::String(t)) = self.meta("rope.scaling.type") {
            if t != "none" {
                bail!("{p}: {}.rope.scaling.type {t:?} is not supported", self.arch)
            }
        }
        let embed =
            self.tensor("model.embed_tokens.weight").ok_or_else(|| err(format!("{p}: no token_embd.weight")))?;
        // The embedding's rows (what the checkpoint holds), whatever `vocab_size` says.
        let vocab = embed.shape[0];
        let intermediate = self.meta_usize("feed_forward_length")?;
        let layers = self.meta_usize("block_count")?;
        let eps = self.meta_f64("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-6);
        let theta = self.meta_f64("rope.freq_base")?.unwrap_or(10_000.0);
        let ctx = self.meta_opt_usize("context_length")?.unwrap_or(4096);
        let tie = self.tensor("lm_head.weight").is_none();
        let bias = self.tensor("model.layers.0.self_attn.q_proj.bias").is_some();
        let tok_id = |k: &str| self.content.metadata.get(&format!("tokenizer.ggml.{k}")).and_then(as_u64);
        let mut cfg = json!({
            "architectures": [self.family.architecture()],
            "model_type": self.family.model_type(),
            "vocab_size": vocab,
            "hidden_size": hidden,
            "intermediate_size": intermediate,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": eps,
            "rope_theta": theta,
            "rope_scaling": null,
            "max_position_embeddings": ctx,
            "tie_word_embeddings": tie,
            "torch_dtype": "bfloat16",
        });
        if self.family != Family::Qwen2 {
            cfg["attention_bias"] = json!(bias);
            cfg["mlp_bias"] = json!(false);
        }
        if let Some(b) = tok_id("bos_token_id") {
            cfg["bos_token_id"] = json!(b);
        }
        if let Some(e) = tok_id("eos_token_id") {
            cfg["eos_token_id"] = json!(e);
        }
        Ok(cfg)
    }

    /// [`GgufCheckpoint::config_json`] parsed and validated.
    pub fn decoder_config(&self) -> Result<DecoderConfig> {
        let cfg = self.config_json()?;
        DecoderConfig::from_json(&cfg.to_string())
            .map_err(|e| e.context(format!("config built from {}", self.path.display())))
    }

    /// The tokenizer of the file's `tokenizer.ggml.*` metadata ([`Tokenizer::from_gguf`]).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        Tokenizer::from_gguf(&self.content).map_err(|e| e.context(format!("tokenizer of {}", self.path.display())))
    }

    /// Loads one tensor by its Hugging Face name, dequantized to f32 on `device`, with
    /// llama.cpp's q/k row permutation undone.
    pub fn load(&self, hf_name: &str, device: &Device) -> Result<Tensor> {
        let Some(t) = self.tensor(hf_name) else { bail!("{}: no tensor maps to {hf_name}", self.path.display()) };
        let mut f =
            std::fs::File::open(&self.path).map_err(|e| err(format!("cannot open {}: {e}", self.path.display())))?;
        let ctx = |e: Error| e.context(format!("{} ({:?}) in {}", t.gguf_name, t.ggml_dtype, self.path.display()));
        let q = self.content.tensor(&mut f, &t.gguf_name, &Device::Cpu).map_err(ctx)?;
        let w = q.dequantize(&Device::Cpu).map_err(ctx)?;
        let w = match t.unpermute_heads {
            Some(heads) => unpermute_rows(&w, heads).map_err(ctx)?,
            None => w,
        };
        w.to_device(device)
    }
}

/// llama.cpp's name of a ggml type id (`ggml.h`).
fn ggml_type_name(id: u32) -> &'static str {
    match id {
        4 | 5 => "Q4_2/Q4_3, removed from ggml",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => "unknown",
    }
}

/// Sort key: embeddings first, then layers by number, then the final norm and lm_head.
fn tensor_order(hf_name: &str) -> usize {
    if hf_name.starts_with("model.embed_tokens") {
        return 0;
    }
    if let Some(rest) = hf_name.strip_prefix("model.layers.") {
        if let Some(n) = rest.split('.').next().and_then(|n| n.parse::<usize>().ok()) {
            return n + 1;
        }
    }
    usize::MAX
}

/// Undoes llama.cpp's q/k permutation of a `[N, ...]` tensor with `heads` heads:
/// `hf = gguf.reshape(heads, N/heads/2, 2, ...).swapaxes(1, 2).reshape(N, ...)`.
pub fn unpermute_rows(w: &Tensor, heads: usize) -> Result<Tensor> {
    let dims = w.dims().to_vec();
    let n = dims[0];
    if heads == 0 || n % (2 * heads) != 0 {
        bail!("cannot un-permute {n} rows into {heads} heads of an even size")
    }
    let rest: usize = dims[1..].iter().product();
    w.reshape((heads, n / heads / 2, 2, rest))?.transpose(1, 2)?.contiguous()?.reshape(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(hf_tensor_name("token_embd.weight").unwrap(), "model.embed_tokens.weight");
        assert_eq!(hf_tensor_name("blk.12.attn_output.weight").unwrap(), "model.layers.12.self_attn.o_proj.weight");
        assert_eq!(hf_tensor_name("blk.0.attn_q.bias").unwrap(), "model.layers.0.self_attn.q_proj.bias");
        assert_eq!(hf_tensor_name("blk.3.attn_k_norm.weight").unwrap(), "model.layers.3.self_attn.k_norm.weight");
        assert_eq!(hf_tensor_name("blk.3.ffn_norm.weight").unwrap(), "model.layers.3.post_attention_layernorm.weight");
        assert_eq!(hf_tensor_name("output.weight").unwrap(), "lm_head.weight");
        assert_eq!(hf_tensor_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_tensor_name("blk.0.ffn_gate_exps.weight"), None);
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() -> Result<()> {
        // llama.cpp: gguf = hf.reshape(heads, 2, d/2, K).swapaxes(1, 2).reshape(N, K)
        let (heads, d, k) = (3usize, 8usize, 5usize);
        let hf = Tensor::arange(0f32, (heads * d * k) as f32, &Device::Cpu)?.reshape((heads * d, k))?;
        let gguf = hf.reshape((heads, 2, d / 2, k))?.transpose(1, 2)?.contiguous()?.reshape((heads * d, k))?;
        let back = unpermute_rows(&gguf, heads)?;
        assert_eq!(back.to_vec2::<f32>()?, hf.to_vec2::<f32>()?);
        let b = Tensor::arange(0f32, (heads * d) as f32, &Device::Cpu)?;
        let bg = b.reshape((heads, 2, d / 2))?.transpose(1, 2)?.contiguous()?.reshape(heads * d)?;
        assert_eq!(unpermute_rows(&bg, heads)?.to_vec1::<f32>()?, b.to_vec1::<f32>()?);
        Ok(())
    }
}
