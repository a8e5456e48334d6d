//! Tiny on-disk checkpoints for tests (shared by the checkpoint and model tests).
//!
//! Include it from a test file with
//! ```ignore
//! #[path = "common/fixtures.rs"]
//! mod fixtures;
//! ```
//!
//! - [`write_fp8_checkpoint`]: the usual entry point — float tensors in, an FP8 checkpoint out
//!   (`config.json` with the given `quantization_config`, single file or `shards` shards).
//! - [`write_checkpoint_with_config`]: the same with a whole `config.json` (model fields too).
//! - [`write_raw_checkpoint`]: tensors stored exactly as given (to build broken checkpoints).
//! - [`fp8_quant_config`], [`test_weight`]: a standard `quantization_config` and weights whose
//!   magnitudes vary (log-spaced) across 128×128 blocks, so a wrong scale index cannot hide.
//!
//! Which tensors become FP8: those [`candle_fp8::checkpoint::is_default_fp8_target`] selects
//! (rank-2 `<module>.weight` whose last component contains `_proj`) and whose module the
//! config does not exclude ([`candle_fp8::checkpoint::QuantizationConfig::is_quantized`]).
//! Everything else is stored in the dtype it was given in.
#![allow(dead_code)]

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::{is_default_fp8_target, QuantizationConfig, ShardWriter, CONFIG_FILE};
use serde_json::{json, Value};
use std::path::Path;

/// The standard `quantization_config` (`fp8`, `e4m3`, `dynamic`, `[128, 128]`) leaving
/// `modules_to_not_convert` unquantized.
pub fn fp8_quant_config(modules_to_not_convert: &[&str]) -> Value {
    QuantizationConfig::new(modules_to_not_convert.iter().map(|s| s.to_string()).collect()).to_json()
}

/// Writes an FP8 checkpoint into `dir`: `config.json` = `{"architectures": ["Test"],
/// "quantization_config": quant_cfg}` (no `quantization_config` when `None`: nothing is
/// quantized then), and the tensors, quantized as described in the module docs, with
/// `weight_scale_inv` stored as `scale_dtype` (F32, BF16 or F16), split into `shards` files
/// (1 = `model.safetensors`, more = `model-0000i-of-0000n.safetensors` + index).
pub fn write_fp8_checkpoint(
    dir: &Path,
    tensors: &[(&str, Tensor)],
    quant_cfg: Option<&Value>,
    shards: usize,
    scale_dtype: DType,
) -> Result<()> {
    let mut config = json!({ "architectures": ["Test"] });
    if let Some(q) = quant_cfg {
        config["quantization_config"] = q.clone();
    }
    write_checkpoint_with_config(dir, tensors, &config, shards, scale_dtype)
}

/// [`write_fp8_checkpoint`] with a whole `config.json` (its `quantization_config`, if any,
/// decides what is quantized; it must parse).
pub fn write_checkpoint_with_config(
    dir: &Path,
    tensors: &[(&str, Tensor)],
    config: &Value,
    shards: usize,
    scale_dtype: DType,
) -> Result<()> {
    let quant = QuantizationConfig::from_config_json(config)?;
    let mut out: Vec<(String, Tensor)> = Vec::new();
    for (name, t) in tensors {
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let quantize =
            quant.as_ref().is_some_and(|q| q.is_quantized(module)) && is_default_fp8_target(name, t.dims());
        if quantize {
            let (w, s) = candle_fp8::quant::quantize_weight(&t.to_dtype(DType::F32)?)?;
            out.push((name.to_string(), w));
            out.push((format!("{module}.weight_scale_inv"), s.to_dtype(scale_dtype)?));
        } else {
            out.push((name.to_string(), t.clone()));
        }
    }
    write_raw_checkpoint(dir, out, config, shards)
}

/// Writes `config` as `config.json` and the tensors exactly as given, split into `shards`
/// files of consecutive tensors
/// (exactly `shards` files, clamped to `1..=tensors.len()`).
pub fn write_raw_checkpoint(dir: &Path, tensors: Vec<(String, Tensor)>, config: &Value, shards: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(CONFIG_FILE), serde_json::to_string_pretty(config).unwrap_or_default())?;
    let len = tensors.len();
    let shards = shards.clamp(1, len.max(1));
    let mut w = ShardWriter::new(dir, None)?;
    for (i, (name, t)) in tensors.into_iter().enumerate() {
        // Tensor i goes to shard i * shards / len: exactly `shards` non-empty files.
        if i > 0 && i * shards / len != (i - 1) * shards / len {
            w.flush()?;
        }
        w.push(name, t)?;
    }
    w.finish()?;
    Ok(())
}

/// A deterministic f32 `[n, k]` weight: uniform noise in ±1 times a per-128×128-block
/// magnitude log-spaced over 1e-3 .. 1e1, so every block gets a different scale.
pub fn test_weight(n: usize, k: usize, seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let kb = k.div_ceil(128);
    let v: Vec<f32> = (0..n * k)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            let block = (i / k / 128) * kb + (i % k) / 128;
            let exp = -3.0 + 4.0 * ((block * 7 + seed as usize) % 9) as f32 / 8.0;
            u * 10f32.powf(exp)
        })
        .collect();
    Tensor::from_vec(v, (n, k), &Device::Cpu).expect("shape matches")
}

/// A deterministic activation `[m, k]` in ±1 (f32).
pub fn test_input(m: usize, k: usize, seed: u64) -> Tensor {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let v: Vec<f32> = (0..m * k)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, (m, k), &Device::Cpu).expect("shape matches")
}
