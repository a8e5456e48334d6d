//! Tiny FP8 checkpoints written through our own quantizer, for tests and the toy model, and the
//! unquantized checkpoint of the same weights (the converter's input).

use super::Rng;
use crate::models::DecoderConfig;
use candle_core::{bail, DType, Device, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Writes a random checkpoint of `cfg`'s architecture into `dir`: `model.safetensors` (decoder linears
/// as e4m3 + f32 `weight_scale_inv` through [`quantize_weight`](crate::quant::quantize_weight),
/// except the modules in `not_convert` and `lm_head`, which stay bf16, like real `-FP8`
/// checkpoints) and `config.json` with a `quantization_config` (`fp8`, e4m3, 128×128 blocks,
/// `modules_to_not_convert`). Weights are deterministic in `seed`. A mixture-of-experts layer
/// holds `mlp.gate` (the router, bf16, not converted: logits of standard deviation
/// [`ROUTER_LOGIT_STD`] on a normalised input) and `mlp.experts.{e}.{gate,up,down}_proj`.
pub fn write_random_checkpoint(dir: &Path, cfg: &DecoderConfig, seed: u64, not_convert: &[&str]) -> Result<()> {
    write_checkpoint(dir, cfg, seed, not_convert, None, true)
}

/// Standard deviation of the router logits of the checkpoints written here, on an input of unit
/// RMS (router weights N(0, σ²/hidden)): with 2, the chosen experts usually lead the others by
/// a wide margin, and a few tokens per layer sit near a tie, as in trained routers.
pub const ROUTER_LOGIT_STD: f64 = 2.0;

/// Like [`write_random_checkpoint`], but a *toy language model* over byte tokens: the random
/// decoder is kept, and `lm_head` row `j` is built from the embeddings of the bytes that
/// `corpus` most often follows by `j` (a bigram table), so that the model predicts the next
/// byte of `corpus` with a realistic, confident top-1 margin instead of the near-ties of a
/// purely random model (whose top-1 is a coin flip under any perturbation). Greedy decoding
/// then prints corpus-like text. Needs `vocab_size >= 256`.
pub fn write_toy_lm_checkpoint(dir: &Path, cfg: &DecoderConfig, seed: u64, corpus: &str) -> Result<()> {
    if cfg.vocab_size < 256 || cfg.tie_word_embeddings {
        bail!("write_toy_lm_checkpoint: needs vocab_size >= 256 and an untied lm_head")
    }
    write_checkpoint(dir, cfg, seed, &[], Some(corpus), true)
}

/// The weights of [`write_toy_lm_checkpoint`] (same `cfg`, `seed` and `corpus`) before
/// quantization: every tensor bf16, a `config.json` without `quantization_config` — a
/// Hugging Face checkpoint as [`crate::checkpoint::convert_safetensors`] takes it.
pub fn write_toy_lm_source_checkpoint(dir: &Path, cfg: &DecoderConfig, seed: u64, corpus: &str) -> Result<()> {
    if cfg.vocab_size < 256 || cfg.tie_word_embeddings {
        bail!("write_toy_lm_source_checkpoint: needs vocab_size >= 256 and an untied lm_head")
    }
    write_checkpoint(dir, cfg, seed, &[], Some(corpus), false)
}

/// Most frequent successor of each byte in `corpus` (bytes never seen map to the corpus' first
/// byte).
fn bigram_successors(corpus: &str) -> Vec<u8> {
    let b = corpus.as_bytes();
    let mut counts = vec![[0u32; 256]; 256];
    for w in b.windows(2) {
        counts[w[0] as usize][w[1] as usize] += 1;
    }
    (0..256)
        .map(|i| {
            let row = &counts[i];
            let (best, n) = row.iter().enumerate().max_by_key(|(j, n)| (**n, std::cmp::Reverse(*j))).unwrap();
            if *n == 0 {
                b.first().copied().unwrap_or(b' ')
            } else {
                best as u8
            }
        })
        .collect()
}

fn write_checkpoint(
    dir: &Path,
    cfg: &DecoderConfig,
    seed: u64,
    not_convert: &[&str],
    corpus: Option<&str>,
    fp8: bool,
) -> Result<()> {
    cfg.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| candle_core::Error::Msg(format!("creating {}: {e}", dir.display())))?;
    let cpu = Device::Cpu;
    let mut rng = Rng::new(seed);
    let mut ts: HashMap<String, Tensor> = HashMap::new();
    let (h, i, d) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim());
    let (hq, hkv) = (cfg.num_attention_heads, cfg.kv_heads());
    let (qkv_bias, o_bias, qk_norm) = (cfg.qkv_bias()?, cfg.o_bias()?, cfg.qk_norm()?);
    let normal = |rng: &mut Rng, shape: &[usize], std: f64| -> Result<Tensor> {
        let n: usize = shape.iter().product();
        Tensor::from_vec(rng.normal_vec_f32(n, std as f32), shape, &cpu)
    };
    let norm_w = |rng: &mut Rng, n: usize| -> Result<Tensor> {
        let v: Vec<f32> = (0..n).map(|_| 1.0 + 0.1 * rng.normal_f32()).collect();
        Tensor::from_vec(v, n, &cpu)?.to_dtype(DType::BF16)
    };
    let embed = normal(&mut rng, &[cfg.vocab_size, h], 1.0)?.to_dtype(DType::BF16)?;
    ts.insert("model.embed_tokens.weight".into(), embed.clone());
    let out_gain = 1.0 / (cfg.num_hidden_layers.max(1) as f64).sqrt();
    let mut not_conv: Vec<String> = vec!["lm_head".into()];
    not_conv.extend(not_convert.iter().map(|s| s.to_string()));
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let mut mods: Vec<(String, usize, usize, f64)> = vec![
            ("self_attn.q_proj".into(), hq * d, h, 1.0),
            ("self_attn.k_proj".into(), hkv * d, h, 1.0),
            ("self_attn.v_proj".into(), hkv * d, h, 1.0),
            ("self_attn.o_proj".into(), h, hq * d, out_gain),
        ];
        if cfg.is_moe_layer(l) {
            let w = normal(&mut rng, &[cfg.num_experts, h], ROUTER_LOGIT_STD / (h as f64).sqrt())?;
            ts.insert(format!("{p}.mlp.gate.weight"), w.to_dtype(DType::BF16)?);
            not_conv.push(format!("{p}.mlp.gate"));
            let ei = cfg.moe_intermediate_size;
            for e in 0..cfg.num_experts {
                let x = format!("mlp.experts.{e}");
                mods.push((format!("{x}.gate_proj"), ei, h, 1.0));
                mods.push((format!("{x}.up_proj"), ei, h, 1.0));
                mods.push((format!("{x}.down_proj"), h, ei, out_gain));
            }
        } else {
            mods.push(("mlp.gate_proj".into(), i, h, 1.0));
            mods.push(("mlp.up_proj".into(), i, h, 1.0));
            mods.push(("mlp.down_proj".into(), h, i, out_gain));
        }
        for (name, n, k, gain) in mods {
            let name = name.as_str();
            let full = format!("{p}.{name}");
            let w = normal(&mut rng, &[n, k], gain / (k as f64).sqrt())?;
            let kept = not_convert.iter().any(|m| full == *m || full.ends_with(&format!(".{m}")) || name.ends_with(m));
            if kept || !fp8 {
                ts.insert(format!("{full}.weight"), w.to_dtype(DType::BF16)?);
            } else {
                let (q, s) = crate::quant::quantize_weight(&w)?;
                ts.insert(format!("{full}.weight"), q);
                ts.insert(format!("{full}.weight_scale_inv"), s);
            }
            let bias = if name == "self_attn.o_proj" { o_bias } else { qkv_bias && name.starts_with("self_attn.") };
            if bias {
                ts.insert(format!("{full}.bias"), normal(&mut rng, &[n], 0.1)?.to_dtype(DType::BF16)?);
            }
        }
        if qk_norm {
            ts.insert(format!("{p}.self_attn.q_norm.weight"), norm_w(&mut rng, d)?);
            ts.insert(format!("{p}.self_attn.k_norm.weight"), norm_w(&mut rng, d)?);
        }
        ts.insert(format!("{p}.input_layernorm.weight"), norm_w(&mut rng, h)?);
        ts.insert(format!("{p}.post_attention_layernorm.weight"), norm_w(&mut rng, h)?);
    }
    ts.insert("model.norm.weight".into(), norm_w(&mut rng, h)?);
    if !cfg.tie_word_embeddings {
        let noise = normal(&mut rng, &[cfg.vocab_size, h], 1.0 / (h as f64).sqrt())?;
        let lm_head = match corpus {
            None => noise,
            Some(corpus) => {
                // Row j = gain/√H · Σ_{i: succ(i) = j} e_i: the logit of succ(tok) gets ≈ gain·√(H/2)
                // from the token's own embedding in the residual stream, the rest stays ~N(0, 1).
                let succ = bigram_successors(corpus);
                let e = embed.to_dtype(DType::F32)?.to_vec2::<f32>()?;
                let mut rows = vec![vec![0f32; h]; cfg.vocab_size];
                let gain = 0.6 / (h as f32).sqrt();
                for (i, &j) in succ.iter().enumerate() {
                    for (o, x) in rows[j as usize].iter_mut().zip(&e[i]) {
                        *o += gain * x;
                    }
                }
                let signal = Tensor::from_vec(rows.concat(), (cfg.vocab_size, h), &cpu)?;
                (signal + (noise * 0.5)?)?
            }
        };
        ts.insert("lm_head.weight".into(), lm_head.to_dtype(DType::BF16)?);
    }
    candle_core::safetensors::save(&ts, dir.join("model.safetensors"))?;
    let mut json = serde_json::to_value(cfg).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let obj = json.as_object_mut().unwrap();
    let family = cfg.family()?;
    obj.insert("architectures".into(), serde_json::json!([family.architecture()]));
    obj.insert("model_type".into(), serde_json::json!(family.model_type()));
    obj.insert("torch_dtype".into(), serde_json::json!("bfloat16"));
    if fp8 {
        obj.insert(
            "quantization_config".into(),
            serde_json::json!({
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": [128, 128],
                "modules_to_not_convert": not_conv,
            }),
        );
    }
    obj.insert("candle_fp8_tokenizer".into(), serde_json::json!("bytes"));
    let text = serde_json::to_string_pretty(&json).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    std::fs::write(dir.join("config.json"), text)
        .map_err(|e| candle_core::Error::Msg(format!("writing config.json: {e}")))?;
    Ok(())
}
