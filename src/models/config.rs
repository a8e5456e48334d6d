//! The fields of a Hugging Face `config.json` the decoder uses, for the families it runs.

use candle_core::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A model family the decoder runs, from `model_type` (or `architectures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Llama 2/3 and compatible (SmolLM, TinyLlama…): optional biases, Llama-3 RoPE scaling.
    Llama,
    /// Qwen2 / Qwen2.5: biases on q, k and v.
    Qwen2,
    /// Qwen3 (dense): an RMSNorm over each q and k head before RoPE.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention, and a sparse mixture-of-experts MLP in the layers
    /// [`DecoderConfig::is_moe_layer`] selects (a dense SwiGLU MLP in the others).
    Qwen3Moe,
}

impl Family {
    /// The `model_type` string of the family.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3_moe",
        }
    }

    /// The `architectures` entry of the family's causal-LM class.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "LlamaForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Qwen3Moe => "Qwen3MoeForCausalLM",
        }
    }

    fn from_model_type(t: &str) -> Option<Self> {
        match t {
            "llama" => Some(Family::Llama),
            "qwen2" => Some(Family::Qwen2),
            "qwen3" => Some(Family::Qwen3),
            "qwen3_moe" => Some(Family::Qwen3Moe),
            _ => None,
        }
    }

    fn from_architecture(a: &str) -> Option<Self> {
        [Family::Llama, Family::Qwen2, Family::Qwen3, Family::Qwen3Moe].into_iter().find(|f| f.architecture() == a)
    }
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10_000.0
}
fn default_max_pos() -> usize {
    40960
}
fn default_act() -> String {
    "silu".to_string()
}
fn default_sparse_step() -> usize {
    1
}
fn is_zero(n: &usize) -> bool {
    *n == 0
}
fn is_false(b: &bool) -> bool {
    !*b
}
fn is_one(n: &usize) -> bool {
    *n == 1
}

/// RoPE frequency scaling (`rope_scaling`, or `rope_parameters` in newer `config.json`s);
/// absent, `null` or `rope_type: "default"` means plain RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RopeScaling {
    /// `rope_type` (or the older `type`); only `"llama3"` is supported.
    #[serde(alias = "type")]
    pub rope_type: RopeType,
    /// Context extension factor.
    pub factor: f64,
    /// Wavelengths longer than `original_max_position_embeddings / low_freq_factor` are scaled
    /// by `1 / factor`.
    #[serde(default = "one")]
    pub low_freq_factor: f64,
    /// Wavelengths shorter than `original_max_position_embeddings / high_freq_factor` are kept.
    #[serde(default = "four")]
    pub high_freq_factor: f64,
    /// The context the model was pretrained with.
    #[serde(default = "eight_k")]
    pub original_max_position_embeddings: usize,
}

fn one() -> f64 {
    1.0
}
fn four() -> f64 {
    4.0
}
fn eight_k() -> usize {
    8192
}

/// The RoPE scaling schemes the decoder implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeType {
    /// Llama 3.1's piecewise scaling of the rotary frequencies.
    Llama3,
}

/// The fields of a Hugging Face `config.json` that the decoder uses (unknown fields are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecoderConfig {
    /// `llama`, `qwen2`, `qwen3` or `qwen3_moe`; when absent, `architectures` decides.
    #[serde(default)]
    pub model_type: Option<String>,
    /// E.g. `["Qwen3ForCausalLM"]`.
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    /// Rows of the token embedding and of the lm_head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP (each of gate and up).
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key / value heads (grouped-query attention: a divisor of the query heads); the query
    /// heads when absent.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head dimension; `hidden_size / num_attention_heads` when absent.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Epsilon of every RMSNorm (1e-6 when absent).
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base frequency (from `rope_parameters.rope_theta` when only that is given; 10 000
    /// when absent).
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// RoPE frequency scaling (see [`RopeScaling`]).
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Longest sequence the RoPE tables cover (40960 when absent); longer prompts are refused.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// The lm_head reuses the token embedding (no `lm_head.weight` in the checkpoint).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on the attention projections (Llama: q, k, v and o; Qwen3: q, k, v and o; Qwen2
    /// always has q, k and v biases, whatever this says).
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// Biases on the MLP projections (unsupported: must be absent or false).
    #[serde(default)]
    pub mlp_bias: bool,
    /// MLP activation; only `"silu"` is supported (the default).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Beginning-of-sequence token, if the model has one.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// An id or a list of ids.
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    /// Experts of each mixture-of-experts MLP (Qwen3-MoE; also read from `num_local_experts`);
    /// 0: every MLP is dense.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num_experts: usize,
    /// Experts each token is routed to (top-k of the router's softmax).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num_experts_per_tok: usize,
    /// Width of each expert's SwiGLU MLP (each of gate and up).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_intermediate_size: usize,
    /// Renormalise the top-k routing probabilities of a token to sum to 1 (transformers'
    /// default: false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer is a mixture-of-experts layer (1 when absent); see
    /// [`DecoderConfig::is_moe_layer`].
    #[serde(default = "default_sparse_step", skip_serializing_if = "is_one")]
    pub decoder_sparse_step: usize,
    /// Layers (0-based) whose MLP is dense whatever `decoder_sparse_step` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mlp_only_layers: Vec<usize>,
}

impl DecoderConfig {
    /// Parses a `config.json` text and checks it (see [`DecoderConfig::validate`]).
    pub fn from_json(text: &str) -> Result<Self> {
        let bad = |e: serde_json::Error| candle_core::Error::Msg(format!("config.json: {e}"));
        let mut v: serde_json::Value = serde_json::from_str(text).map_err(bad)?;
        if let Some(obj) = v.as_object_mut() {
            // transformers 5 writes Qwen3-MoE's expert count as `num_local_experts` (its
            // attribute map), hub checkpoints as `num_experts`.
            if !obj.contains_key("num_experts") {
                if let Some(n) = obj.get("num_local_experts").cloned() {
                    obj.insert("num_experts".into(), n);
                }
            }
            if obj.get("mlp_only_layers").is_some_and(|v| v.is_null()) {
                obj.remove("mlp_only_layers");
            }
            // Fields a Qwen3-MoE config.json leaves out take transformers' `Qwen3MoeConfig`
            // defaults.
            let moe = match obj.get("model_type") {
                Some(t) => t.as_str() == Some(Family::Qwen3Moe.model_type()),
                None => obj
                    .get("architectures")
                    .and_then(|a| a.get(0))
                    .is_some_and(|a| a.as_str() == Some(Family::Qwen3Moe.architecture())),
            };
            if moe {
                for (key, default) in [("num_experts", 128), ("num_experts_per_tok", 8), ("moe_intermediate_size", 768)]
                {
                    obj.entry(key).or_insert(serde_json::json!(default));
                }
            }
            // Newer transformers write `rope_parameters` (theta and scaling together); a
            // scaling of type "default" is plain RoPE.
            let params = obj.get("rope_parameters").cloned().filter(|p| p.is_object());
            if let Some(p) = &params {
                if !obj.contains_key("rope_theta") {
                    if let Some(t) = p.get("rope_theta") {
                        obj.insert("rope_theta".into(), t.clone());
                    }
                }
            }
            let scaling = obj.get("rope_scaling").cloned().filter(|s| !s.is_null()).or(params);
            let kind = scaling
                .as_ref()
                .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
                .and_then(|t| t.as_str())
                .map(str::to_owned);
            match (kind.as_deref(), scaling) {
                (None | Some("default"), _) => {
                    obj.insert("rope_scaling".into(), serde_json::Value::Null);
                }
                (Some("llama3"), Some(s)) => {
                    obj.insert("rope_scaling".into(), s);
                }
                (Some(other), _) => {
                    bail!("config.json: rope_scaling type {other:?} is not supported (supported: llama3)")
                }
            }
        }
        let cfg: Self = serde_json::from_value(v).map_err(bad)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| candle_core::Error::Msg(format!("reading {}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| e.context(path.display().to_string()))
    }

    /// The architecture of `Qwen/Qwen3-32B` (and `-FP8`).
    pub fn qwen3_32b() -> Self {
        Self {
            model_type: Some("qwen3".into()),
            architectures: Some(vec![Family::Qwen3.architecture().into()]),
            vocab_size: 151936,
            hidden_size: 5120,
            intermediate_size: 25600,
            num_hidden_layers: 64,
            num_attention_heads: 64,
            num_key_value_heads: Some(8),
            head_dim: Some(128),
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: None,
            max_position_embeddings: 40960,
            tie_word_embeddings: false,
            attention_bias: Some(false),
            mlp_bias: false,
            hidden_act: "silu".into(),
            bos_token_id: Some(151643),
            eos_token_id: Some(serde_json::json!(151645)),
            num_experts: 0,
            num_experts_per_tok: 0,
            moe_intermediate_size: 0,
            norm_topk_prob: false,
            decoder_sparse_step: 1,
            mlp_only_layers: Vec::new(),
        }
    }

    /// The architecture of `Qwen/Qwen3-30B-A3B` (and `-FP8`): 48 layers, every MLP a mixture of
    /// 128 experts of width 768, 8 per token, renormalised.
    pub fn qwen3_30b_a3b() -> Self {
        Self {
            model_type: Some("qwen3_moe".into()),
            architectures: Some(vec![Family::Qwen3Moe.architecture().into()]),
            hidden_size: 2048,
            intermediate_size: 6144,
            num_hidden_layers: 48,
            num_attention_heads: 32,
            num_key_value_heads: Some(4),
            head_dim: Some(128),
            num_experts: 128,
            num_experts_per_tok: 8,
            moe_intermediate_size: 768,
            norm_topk_prob: true,
            decoder_sparse_step: 1,
            mlp_only_layers: Vec::new(),
            ..Self::qwen3_32b()
        }
    }

    /// A tiny Qwen3 architecture over a byte-level vocabulary (the toy model of tests).
    pub fn tiny() -> Self {
        Self {
            vocab_size: 384,
            hidden_size: 256,
            intermediate_size: 768,
            num_hidden_layers: 4,
            num_attention_heads: 8,
            num_key_value_heads: Some(2),
            head_dim: Some(64),
            max_position_embeddings: 4096,
            bos_token_id: None,
            eos_token_id: Some(serde_json::json!(256)),
            ..Self::qwen3_32b()
        }
    }

    /// The model family, from `model_type`, else `architectures`.
    pub fn family(&self) -> Result<Family> {
        if let Some(t) = &self.model_type {
            return Family::from_model_type(t).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "config.json: model_type {t:?} is not supported (supported: llama, qwen2, qwen3, qwen3_moe)"
                ))
            });
        }
        match self.architectures.as_deref() {
            Some([a, ..]) => Family::from_architecture(a).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "config.json: architecture {a:?} is not supported (supported: LlamaForCausalLM, \
                     Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)"
                ))
            }),
            _ => bail!("config.json: neither model_type nor architectures says which model this is"),
        }
    }

    /// Key / value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head dimension.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether q, k and v have biases.
    pub fn qkv_bias(&self) -> Result<bool> {
        Ok(match self.family()? {
            Family::Qwen2 => true,
            Family::Llama | Family::Qwen3 | Family::Qwen3Moe => self.attention_bias.unwrap_or(false),
        })
    }

    /// Whether o has a bias.
    pub fn o_bias(&self) -> Result<bool> {
        Ok(match self.family()? {
            Family::Qwen2 => false,
            Family::Llama | Family::Qwen3 | Family::Qwen3Moe => self.attention_bias.unwrap_or(false),
        })
    }

    /// Whether each q and k head is RMS-normalised before RoPE (Qwen3, Qwen3-MoE).
    pub fn qk_norm(&self) -> Result<bool> {
        Ok(matches!(self.family()?, Family::Qwen3 | Family::Qwen3Moe))
    }

    /// Whether layer `layer` (0-based) has a mixture-of-experts MLP, by transformers' rule for
    /// Qwen3-MoE: the family is `qwen3_moe`, `num_experts > 0`, the layer is not in
    /// `mlp_only_layers` and `(layer + 1) % decoder_sparse_step == 0`. Always false for the
    /// other families.
    pub fn is_moe_layer(&self, layer: usize) -> bool {
        matches!(self.family(), Ok(Family::Qwen3Moe))
            && self.num_experts > 0
            && !self.mlp_only_layers.contains(&layer)
            && self.decoder_sparse_step > 0
            && (layer + 1) % self.decoder_sparse_step == 0
    }

    /// The end-of-sequence ids.
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|v| v as u32)).collect(),
            _ => vec![],
        }
    }

    /// Checks the invariants the decoder relies on, naming the field and its value.
    pub fn validate(&self) -> Result<()> {
        self.family()?;
        let (hq, hkv) = (self.num_attention_heads, self.kv_heads());
        if hq == 0 || hkv == 0 {
            bail!("config.json: num_attention_heads ({hq}) and num_key_value_heads ({hkv}) must be > 0")
        }
        if hq % hkv != 0 {
            bail!("config.json: num_attention_heads {hq} is not a multiple of num_key_value_heads {hkv}")
        }
        if self.head_dim() == 0 || self.head_dim() % 2 != 0 {
            bail!("config.json: head_dim {} must be even and > 0 for RoPE", self.head_dim())
        }
        if self.hidden_size == 0 || self.intermediate_size == 0 || self.vocab_size == 0 {
            bail!(
                "config.json: hidden_size {}, intermediate_size {} and vocab_size {} must be > 0",
                self.hidden_size,
                self.intermediate_size,
                self.vocab_size
            )
        }
        if self.hidden_act != "silu" {
            bail!("config.json: hidden_act {:?} is not supported (only silu)", self.hidden_act)
        }
        if self.mlp_bias {
            bail!("config.json: mlp_bias = true is not supported")
        }
        if self.family()? == Family::Qwen3Moe && self.num_experts > 0 {
            let (e, k) = (self.num_experts, self.num_experts_per_tok);
            if k == 0 || k > e {
                bail!("config.json: num_experts_per_tok {k} must be in 1..=num_experts ({e})")
            }
            if self.moe_intermediate_size == 0 {
                bail!("config.json: moe_intermediate_size must be > 0 with num_experts {e}")
            }
            if self.decoder_sparse_step == 0 {
                bail!("config.json: decoder_sparse_step must be > 0 with num_experts {e}")
            }
        }
        if let Some(s) = &self.rope_scaling {
            if !(s.factor > 0.0 && s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor) {
                bail!(
                    "config.json: rope_scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0, got \
                     factor {}, low {}, high {}",
                    s.factor,
                    s.low_freq_factor,
                    s.high_freq_factor
                )
            }
        }
        Ok(())
    }

    /// Number of parameters in the decoder's linear layers (what is FP8 in a checkpoint): the
    /// attention projections, and the dense MLP or every expert of a mixture-of-experts MLP
    /// (not the router, which checkpoints keep unquantized).
    pub fn linear_params(&self) -> usize {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim());
        let (hq, hkv) = (self.num_attention_heads, self.kv_heads());
        let attention = h * (hq + 2 * hkv) * d + hq * d * h;
        (0..self.num_hidden_layers)
            .map(|l| {
                let mlp = if self.is_moe_layer(l) {
                    self.num_experts * 3 * h * self.moe_intermediate_size
                } else {
                    3 * h * i
                };
                attention + mlp
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(extra: &str) -> String {
        format!(
            r#"{{"vocab_size": 8, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                "num_attention_heads": 4, "num_key_value_heads": 2 {extra}}}"#
        )
    }

    #[test]
    fn family_from_model_type_or_architectures() {
        let f = |extra: &str| DecoderConfig::from_json(&json(extra)).and_then(|c| c.family());
        assert_eq!(f(r#", "model_type": "llama""#).unwrap(), Family::Llama);
        assert_eq!(f(r#", "architectures": ["Qwen2ForCausalLM"]"#).unwrap(), Family::Qwen2);
        assert_eq!(f(r#", "model_type": "qwen3", "architectures": ["LlamaForCausalLM"]"#).unwrap(), Family::Qwen3);
        assert_eq!(f(r#", "model_type": "qwen3_moe""#).unwrap(), Family::Qwen3Moe);
        assert_eq!(f(r#", "architectures": ["Qwen3MoeForCausalLM"]"#).unwrap(), Family::Qwen3Moe);
        let e = f(r#", "model_type": "mixtral""#).unwrap_err().to_string();
        assert!(e.contains("\"mixtral\"") && e.contains("not supported"), "{e}");
        let e = f("").unwrap_err().to_string();
        assert!(e.contains("model_type"), "{e}");
    }

    #[test]
    fn biases_by_family() {
        let c = |extra: &str| DecoderConfig::from_json(&json(extra)).unwrap();
        let q2 = c(r#", "model_type": "qwen2""#);
        assert!(q2.qkv_bias().unwrap() && !q2.o_bias().unwrap() && !q2.qk_norm().unwrap());
        let l = c(r#", "model_type": "llama", "attention_bias": true"#);
        assert!(l.qkv_bias().unwrap() && l.o_bias().unwrap());
        let q3 = c(r#", "model_type": "qwen3""#);
        assert!(!q3.qkv_bias().unwrap() && q3.qk_norm().unwrap());
    }

    /// transformers' `Qwen3MoeDecoderLayer`: a layer is sparse when it is not in
    /// `mlp_only_layers`, `num_experts > 0` and `(layer + 1) % decoder_sparse_step == 0`.
    #[test]
    fn moe_layers_follow_the_transformers_rule() {
        let c = |extra: &str| DecoderConfig::from_json(&json(extra)).unwrap();
        let moe = |cfg: &DecoderConfig, n: usize| (0..n).filter(|&l| cfg.is_moe_layer(l)).collect::<Vec<_>>();
        let base =
            r#", "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16"#;
        assert_eq!(moe(&c(base), 4), vec![0, 1, 2, 3]);
        assert_eq!(moe(&c(&format!(r#"{base}, "decoder_sparse_step": 2"#)), 6), vec![1, 3, 5]);
        assert_eq!(moe(&c(&format!(r#"{base}, "decoder_sparse_step": 3, "mlp_only_layers": [5]"#)), 9), vec![2, 8]);
        assert_eq!(moe(&c(&format!(r#"{base}, "mlp_only_layers": [0, 2]"#)), 4), vec![1, 3]);
        assert_eq!(moe(&c(&format!(r#"{base}, "mlp_only_layers": null"#)), 2), vec![0, 1]);
        // No experts: every MLP is dense; other families never route.
        assert!(moe(&c(r#", "model_type": "qwen3_moe", "num_experts": 0"#), 4).is_empty());
        assert!(moe(&c(r#", "model_type": "qwen3", "num_experts": 8, "num_experts_per_tok": 2"#), 4).is_empty());
        // transformers 5 writes `num_local_experts`; absent fields take Qwen3MoeConfig's defaults.
        let local = c(
            r#", "model_type": "qwen3_moe", "num_local_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 16"#,
        );
        assert_eq!((local.num_experts, local.num_experts_per_tok, local.norm_topk_prob), (4, 1, false));
        let defaults = c(r#", "architectures": ["Qwen3MoeForCausalLM"]"#);
        assert_eq!((defaults.num_experts, defaults.num_experts_per_tok, defaults.moe_intermediate_size), (128, 8, 768));
        assert_eq!(defaults.decoder_sparse_step, 1);
        // The MoE fields round-trip through serde; a dense config writes none of them.
        let round = DecoderConfig::from_json(
            &serde_json::to_string(&c(&format!(
                r#"{base}, "norm_topk_prob": true, "decoder_sparse_step": 2, "mlp_only_layers": [1]"#
            )))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (round.norm_topk_prob, round.decoder_sparse_step, round.mlp_only_layers.clone()),
            (true, 2, vec![1])
        );
        let dense = serde_json::to_string(&c(r#", "model_type": "qwen3""#)).unwrap();
        assert!(!dense.contains("experts") && !dense.contains("sparse") && !dense.contains("mlp_only"), "{dense}");
        // The 30B-A3B constructor: every layer sparse, 128 experts × 3 × 2048 × 768 per layer.
        let a3b = DecoderConfig::qwen3_30b_a3b();
        a3b.validate().unwrap();
        assert_eq!(a3b.family().unwrap(), Family::Qwen3Moe);
        assert!((0..48).all(|l| a3b.is_moe_layer(l)) && a3b.qk_norm().unwrap());
        let attention = 2048 * (32 + 2 * 4) * 128 + 32 * 128 * 2048;
        assert_eq!(a3b.linear_params(), 48 * (attention + 128 * 3 * 2048 * 768));
    }

    #[test]
    fn bad_moe_values_are_named() {
        let e = |extra: &str| DecoderConfig::from_json(&json(extra)).unwrap_err().to_string();
        let moe = r#", "model_type": "qwen3_moe", "num_experts": 8, "moe_intermediate_size": 16"#;
        let m = e(&format!(r#"{moe}, "num_experts_per_tok": 9"#));
        assert!(m.contains("num_experts_per_tok 9") && m.contains('8'), "{m}");
        assert!(e(&format!(r#"{moe}, "num_experts_per_tok": 0"#)).contains("num_experts_per_tok 0"));
        let m = e(&format!(r#"{moe}, "num_experts_per_tok": 2, "decoder_sparse_step": 0"#));
        assert!(m.contains("decoder_sparse_step"), "{m}");
        let m =
            e(r#", "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 0"#);
        assert!(m.contains("moe_intermediate_size"), "{m}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = |extra: &str| DecoderConfig::from_json(&json(extra)).unwrap_err().to_string();
        assert!(e(r#", "model_type": "llama", "hidden_act": "gelu""#).contains("\"gelu\""));
        assert!(e(r#", "model_type": "llama", "mlp_bias": true"#).contains("mlp_bias"));
        let bad_heads = r#"{"model_type": "llama", "vocab_size": 8, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2}"#;
        let msg = DecoderConfig::from_json(bad_heads).unwrap_err().to_string();
        assert!(msg.contains('3') && msg.contains('2'), "{msg}");
        let e2 = e(r#", "model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}"#);
        assert!(e2.contains("\"yarn\"") && e2.contains("not supported"), "{e2}");
    }

    #[test]
    fn llama3_rope_scaling_parses() {
        let c = DecoderConfig::from_json(&json(
            r#", "model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}"#,
        ))
        .unwrap();
        assert_eq!(c.rope_scaling.unwrap().rope_type, RopeType::Llama3);
        assert_eq!(c.kv_heads(), 2);
        assert_eq!(c.head_dim(), 4);
        // transformers 5: theta and scaling in rope_parameters; "default" is plain RoPE.
        let c = DecoderConfig::from_json(&json(
            r#", "model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}"#,
        ))
        .unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling.unwrap().factor), (500000.0, 8.0));
        let c = DecoderConfig::from_json(&json(
            r#", "model_type": "qwen3", "rope_scaling": {"rope_type": "default"}, "rope_theta": 7.0"#,
        ))
        .unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling), (7.0, None));
    }
}
