//! `config.json`'s `quantization_config`, validated, and which modules it quantizes.

use crate::format::BLOCK;
use candle_core::{bail, Result};
use serde_json::Value;

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
                    _ => bail!("quantization_config.weight_block_size must be two non-negative integers, got {v}"),
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
    let Some(module) = name.strip_suffix(".weight") else {
        return false;
    };
    let last = module.rsplit('.').next().unwrap_or(module);
    dims.len() == 2 && last.contains("_proj")
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
