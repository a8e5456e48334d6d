//! Checkpoint loading: tiny checkpoints written into temp dirs by our own writer (single and
//! sharded files, F32 / BF16 / F16 scales, unconverted modules, every kind of broken input —
//! each error must name the tensor or file and the bad value), and the FP8 checkpoint that torch
//! and Python safetensors wrote (tests/fixtures/tiny-qwen3-fp8/), read back against the values
//! its reference.json records.

#[path = "common/fixtures.rs"]
mod fixtures;

use candle_core::{DType, Device, Module, Tensor};
use candle_fp8::checkpoint::{
    open_model, read_safetensors_header, Checkpoint, QuantizationConfig, ShardWriter, INDEX_FILE, SINGLE_FILE,
};
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::reference::rel_err;
use candle_fp8::{AnyLinear, Fp8BlockLinear};
use fixtures::*;
use serde_json::{json, Value};
use std::path::Path;

type R<T = ()> = anyhow::Result<T>;

const Q: &str = "model.layers.0.self_attn.q_proj";
const DOWN: &str = "model.layers.0.mlp.down_proj";
const UP: &str = "model.layers.1.mlp.up_proj";

/// A small Qwen3-like set: two FP8 targets of which one is ragged, plus dense tensors.
fn tensors() -> Vec<(&'static str, Tensor)> {
    vec![
        ("model.embed_tokens.weight", test_weight(64, 384, 1)),
        ("model.layers.0.self_attn.q_proj.weight", test_weight(256, 384, 2)),
        ("model.layers.0.mlp.down_proj.weight", test_weight(200, 320, 3)),
        ("model.layers.1.mlp.up_proj.weight", test_weight(384, 256, 4)),
        ("model.norm.weight", Tensor::ones(384, DType::F32, &Device::Cpu).unwrap()),
        ("lm_head.weight", test_weight(64, 384, 5)),
    ]
}

fn original(name: &str) -> Tensor {
    tensors().into_iter().find(|(n, _)| *n == name).unwrap().1
}

fn write_default(dir: &Path, shards: usize, scale_dtype: DType) -> R<Checkpoint> {
    let q = fp8_quant_config(&["lm_head"]);
    write_fp8_checkpoint(dir, &tensors(), Some(&q), shards, scale_dtype)?;
    Ok(Checkpoint::open(dir)?)
}

fn err_text<T: std::fmt::Debug>(r: candle_core::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_has(e: &str, parts: &[&str]) {
    for p in parts {
        assert!(e.contains(p), "error does not mention {p:?}:\n{e}");
    }
}

/// Checks an FP8 layer from the checkpoint against the dequantized reference and against the
/// f32 product with the original, unquantized weight.
fn check_layer(layer: &Fp8BlockLinear, module: &str, scale_dtype: DType) -> R {
    let w = original(&format!("{module}.weight"));
    let (n, k) = w.dims2()?;
    assert_eq!((layer.out_dim(), layer.in_dim()), (n, k));
    // The loaded weight is bit-for-bit the quantized original.
    let (wq, sq) = quantize_weight(&w)?;
    let bits = |t: &Tensor| t.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>());
    assert_eq!(bits(layer.weight())?, bits(&wq)?, "{module}: weight bits");
    let s_loaded = layer.weight_scale_inv().flatten_all()?.to_vec1::<f32>()?;
    // BF16 / F16 storage rounds the scale; the loaded value is exactly the stored one, as f32.
    let s_ref = sq.to_dtype(scale_dtype)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(s_loaded, s_ref, "{module}: scales");

    let x = test_input(5, k, 7).to_dtype(DType::BF16)?;
    let y = layer.forward(&x)?;
    assert_eq!(y.dims(), &[5, n]);
    // The forward's GEMM, on the quantized input, against the exact product (rounding
    // statistics with bounds from the f32 arithmetic: fixtures::check_gemm_rounding).
    let (qa, sa) = quantize_activation(&x)?;
    let host = HostGemm::from_tensors(&qa, &sa, layer.weight(), layer.weight_scale_inv())?;
    check_gemm_tensor(&y, &host).map_err(|e| anyhow::anyhow!("{module}: {e}"))?;
    // Against the unquantized f32 product: only quantization error (e4m3 on both operands:
    // ≤ 2^-4 relative each, RMS ≈ 0.05 on the product; a wrong block scale is off by ×10^k).
    let yf = x.to_dtype(DType::F32)?.matmul(&w.t()?)?;
    let re = rel_err(&y, &yf)?;
    assert!(re <= 0.1, "{module}: vs f32 relerr {re}");
    Ok(())
}

#[test]
fn single_file_f32_scales() -> R {
    let dir = tempfile::tempdir()?;
    let ck = write_default(dir.path(), 1, DType::F32)?;
    assert_eq!(ck.files(), &[dir.path().join(SINGLE_FILE)]);
    assert!(!dir.path().join(INDEX_FILE).exists());
    assert_eq!(ck.quantization().unwrap().modules_to_not_convert, vec!["lm_head".to_string()]);
    assert!(ck.tensor_names().contains(&"model.layers.0.self_attn.q_proj.weight_scale_inv"));
    assert_eq!(ck.tensor_info(&format!("{Q}.weight")).unwrap().dtype, safetensors::Dtype::F8_E4M3);
    assert_eq!(ck.tensor_info("lm_head.weight").unwrap().dtype, safetensors::Dtype::F32);
    assert_eq!(ck.tensor_info("model.embed_tokens.weight").unwrap().dtype, safetensors::Dtype::F32);
    assert_eq!(ck.config_json()["architectures"][0], "Test");
    assert!(ck.tokenizer_path().is_none());

    let vb = ck.var_builder(DType::BF16, &Device::Cpu);
    for (m, k, n) in [(Q, 384, 256), (DOWN, 320, 200), (UP, 256, 384)] {
        let layer = Fp8BlockLinear::load(vb.pp(m), k, n, false)?;
        check_layer(&layer, m, DType::F32)?;
        check_layer(&ck.load_fp8_linear(m, &Device::Cpu, false)?, m, DType::F32)?;
        assert!(matches!(ck.load_linear(vb.pp(m), k, n, false)?, AnyLinear::Fp8(_)));
    }
    // lm_head is listed: dense, in the builder's dtype.
    let lm = ck.load_linear(vb.pp("lm_head"), 384, 64, false)?;
    assert!(matches!(lm, AnyLinear::Dense(_)));
    Ok(())
}

#[test]
fn sharded_with_bf16_and_f16_scales() -> R {
    for (shards, sdt, st) in [
        (3, DType::BF16, safetensors::Dtype::BF16),
        (2, DType::F16, safetensors::Dtype::F16),
        (4, DType::F32, safetensors::Dtype::F32),
    ] {
        let dir = tempfile::tempdir()?;
        let ck = write_default(dir.path(), shards, sdt)?;
        assert_eq!(ck.files().len(), shards, "{shards} shards");
        assert!(ck.files()[0].ends_with(format!("model-00001-of-{shards:05}.safetensors")));
        let index: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join(INDEX_FILE))?)?;
        assert_eq!(index["weight_map"].as_object().unwrap().len(), ck.tensor_names().len());
        assert_eq!(ck.tensor_info(&format!("{DOWN}.weight_scale_inv")).unwrap().dtype, st);
        let vb = ck.var_builder(DType::BF16, &Device::Cpu);
        for (m, k, n) in [(Q, 384, 256), (DOWN, 320, 200), (UP, 256, 384)] {
            let layer = Fp8BlockLinear::load(vb.pp(m), k, n, false)?;
            assert_eq!(layer.weight_scale_inv().dtype(), DType::F32);
            check_layer(&layer, m, sdt)?;
        }
    }
    Ok(())
}

#[test]
fn modules_to_not_convert_load_dense() -> R {
    let dir = tempfile::tempdir()?;
    // Layer 0's MLP and lm_head stay in bf16; everything else under the rule is FP8.
    let q = fp8_quant_config(&["lm_head", "model.layers.0.mlp"]);
    let ts: Vec<(&str, Tensor)> = tensors().into_iter().map(|(n, t)| (n, t.to_dtype(DType::BF16).unwrap())).collect();
    write_fp8_checkpoint(dir.path(), &ts, Some(&q), 2, DType::F32)?;
    let ck = Checkpoint::open(dir.path())?;
    assert!(!ck.is_quantized(DOWN));
    assert!(ck.is_quantized(Q));
    assert!(ck.is_quantized(UP));
    assert_eq!(ck.tensor_info(&format!("{DOWN}.weight")).unwrap().dtype, safetensors::Dtype::BF16);
    assert!(ck.tensor_info(&format!("{DOWN}.weight_scale_inv")).is_none());
    let vb = ck.var_builder(DType::BF16, &Device::Cpu);
    let down = ck.load_linear(vb.pp(DOWN), 320, 200, false)?;
    let AnyLinear::Dense(ref lin) = down else { panic!("{DOWN} should load dense") };
    assert_eq!(lin.weight().dtype(), DType::BF16);
    let x = test_input(3, 320, 9).to_dtype(DType::BF16)?;
    let y = down.forward(&x)?;
    let yref = x.to_dtype(DType::F32)?.matmul(&original(&format!("{DOWN}.weight")).t()?)?;
    assert!(rel_err(&y, &yref)? < 1e-2);
    assert!(matches!(ck.load_linear(vb.pp(Q), 384, 256, false)?, AnyLinear::Fp8(_)));
    // A dense module with the wrong dims from the model config.
    let e = err_text(ck.load_linear(vb.pp(DOWN), 320, 256, false));
    assert_has(&e, &[&format!("{DOWN}.weight"), "[200, 320]", "[256, 320]"]);
    // Asking for the dense module as FP8 names the tensor and its stored dtype.
    let e = err_text(Fp8BlockLinear::load(vb.pp(DOWN), 320, 200, false));
    assert_has(&e, &[&format!("{DOWN}.weight"), "BF16", "F8_E4M3"]);
    Ok(())
}

#[test]
fn checkpoint_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone>() {}
    check::<Checkpoint>();
}

#[test]
fn module_matching_rule() {
    let q = QuantizationConfig::from_json(&json!({
        "quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head", "model.layers.1"], "ignored_layers": ["mlp.gate"],
    }))
    .unwrap();
    assert!(!q.is_quantized("lm_head"));
    assert!(!q.is_quantized("model.layers.1.mlp.up_proj"));
    assert!(q.is_quantized("model.layers.10.mlp.up_proj"));
    assert!(q.is_quantized("model.layers.11.mlp.up_proj"));
    assert!(!q.is_quantized("model.layers.2.mlp.gate"));
    assert!(q.is_quantized("model.layers.2.mlp.gate_proj"));
    assert_eq!(q.excluded_by("model.layers.2.mlp.gate"), Some("mlp.gate"));
    // Defaults and nulls, as transformers writes them.
    let q = QuantizationConfig::from_json(&json!({
        "quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": null,
        "activation_scheme": "dynamic", "fmt": "e4m3",
    }))
    .unwrap();
    assert_eq!(q, QuantizationConfig::default());
    assert_eq!(QuantizationConfig::from_json(&q.to_json()).unwrap(), q);
    assert_eq!(QuantizationConfig::from_config_json(&json!({"hidden_size": 8})).unwrap(), None);
}

#[test]
fn bad_quantization_configs() {
    let base =
        json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]});
    let with = |k: &str, v: Value| {
        let mut q = base.clone();
        q[k] = v;
        QuantizationConfig::from_json(&q)
    };
    assert_has(&err_text(with("weight_block_size", json!([64, 64]))), &["weight_block_size", "[64,64]", "[128, 128]"]);
    assert_has(&err_text(with("weight_block_size", json!("128"))), &["weight_block_size", "\"128\""]);
    assert_has(&err_text(with("weight_block_size", json!([128]))), &["weight_block_size", "[128]"]);
    assert_has(&err_text(with("weight_block_size", Value::Null)), &["weight_block_size", "missing"]);
    assert_has(&err_text(with("fmt", json!("e5m2"))), &["fmt", "e5m2"]);
    assert_has(&err_text(with("fmt", json!(3))), &["fmt", "3"]);
    assert_has(&err_text(with("activation_scheme", json!("static"))), &["static activation scales are unsupported"]);
    assert_has(&err_text(with("activation_scheme", json!("weird"))), &["activation_scheme", "weird"]);
    assert_has(&err_text(with("quant_method", json!("gptq"))), &["quant_method", "gptq"]);
    assert_has(&err_text(with("modules_to_not_convert", json!("lm_head"))), &["modules_to_not_convert", "lm_head"]);
    assert_has(&err_text(with("ignored_layers", json!([1]))), &["ignored_layers", "1"]);
    assert_has(&err_text(QuantizationConfig::from_json(&json!([1]))), &["quantization_config", "object"]);
}

/// Writes a good single-file checkpoint with config `config`, returns its dir.
fn with_config(config: Value) -> R<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    write_checkpoint_with_config(dir.path(), &tensors(), &config, 1, DType::F32)?;
    Ok(dir)
}

#[test]
fn bad_configs_on_open() -> R {
    let mut q = fp8_quant_config(&[]);
    q["weight_block_size"] = json!([64, 64]);
    let dir = tempfile::tempdir()?;
    write_fp8_checkpoint(dir.path(), &tensors(), None, 1, DType::F32)?;
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, json!({"quantization_config": q}).to_string())?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["config.json", "weight_block_size", "[64,64]"]);
    let mut q = fp8_quant_config(&[]);
    q["fmt"] = json!("e5m2");
    std::fs::write(&cfg, json!({"quantization_config": q}).to_string())?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["fmt", "e5m2"]);
    q["fmt"] = json!("e4m3");
    q["activation_scheme"] = json!("static");
    std::fs::write(&cfg, json!({"quantization_config": q}).to_string())?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["static activation scales are unsupported"]);
    std::fs::write(&cfg, "{\"hidden_size\": 8,")?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["config.json", "not valid JSON"]);
    std::fs::write(&cfg, "[1, 2]")?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["config.json", "JSON object"]);
    std::fs::remove_file(&cfg)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["config.json", "missing"]);
    assert_has(&err_text(Checkpoint::open(dir.path().join("nope"))), &["nope", "does not exist"]);
    Ok(())
}

#[test]
fn fp8_tensors_must_agree_with_config() -> R {
    // FP8 weights but no quantization_config.
    let dir = with_config(json!({"quantization_config": fp8_quant_config(&[])}))?;
    std::fs::write(dir.path().join("config.json"), "{}")?;
    assert_has(
        &err_text(Checkpoint::open(dir.path())),
        &[&format!("{DOWN}.weight"), "F8_E4M3", "no quantization_config"],
    );
    // An FP8 weight whose module the config excludes.
    std::fs::write(
        dir.path().join("config.json"),
        json!({"quantization_config": fp8_quant_config(&["self_attn"])}).to_string(),
    )?;
    assert_has(
        &err_text(Checkpoint::open(dir.path())),
        &[&format!("{Q}.weight"), "\"self_attn\"", "modules_to_not_convert"],
    );
    Ok(())
}

/// A checkpoint holding one FP8 module `UP` with the given weight / scale tensors as stored.
fn raw_module(weight: Option<Tensor>, scale: Option<Tensor>) -> R<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let mut ts = vec![("model.norm.weight".to_string(), Tensor::ones(8, DType::F32, &Device::Cpu)?)];
    if let Some(w) = weight {
        ts.push((format!("{UP}.weight"), w));
    }
    if let Some(s) = scale {
        ts.push((format!("{UP}.weight_scale_inv"), s));
    }
    write_raw_checkpoint(dir.path(), ts, &json!({"quantization_config": fp8_quant_config(&[])}), 1)?;
    Ok(dir)
}

fn load_up(dir: &Path) -> candle_core::Result<Fp8BlockLinear> {
    let ck = Checkpoint::open(dir)?;
    Fp8BlockLinear::load(ck.var_builder(DType::BF16, &Device::Cpu).pp(UP), 256, 384, false)
}

#[test]
fn bad_weights_and_scales() -> R {
    let (wq, sq) = quantize_weight(&original(&format!("{UP}.weight")))?;
    // bf16 weight where FP8 is expected (config says quantized, no scale stored).
    let dir = raw_module(Some(original(&format!("{UP}.weight")).to_dtype(DType::BF16)?), None)?;
    assert_has(&err_text(load_up(dir.path())), &[&format!("{UP}.weight"), "BF16", "F8_E4M3"]);
    // ... and with a scale next to it.
    let dir = raw_module(Some(original(&format!("{UP}.weight")).to_dtype(DType::BF16)?), Some(sq.clone()))?;
    assert_has(&err_text(load_up(dir.path())), &[&format!("{UP}.weight"), "BF16", "F8_E4M3"]);
    // Wrong scale shape.
    let dir = raw_module(Some(wq.clone()), Some(Tensor::ones((2, 3), DType::F32, &Device::Cpu)?))?;
    assert_has(&err_text(load_up(dir.path())), &[&format!("{UP}.weight_scale_inv"), "[2, 3]", "expected [3, 2]"]);
    // Missing scale.
    let dir = raw_module(Some(wq.clone()), None)?;
    assert_has(&err_text(load_up(dir.path())), &[&format!("{UP}.weight_scale_inv"), "missing"]);
    // Scale stored as an integer dtype.
    let dir = raw_module(Some(wq.clone()), Some(sq.to_dtype(DType::U32)?))?;
    assert_has(&err_text(load_up(dir.path())), &[&format!("{UP}.weight_scale_inv"), "U32"]);
    // Bad scale values: NaN, +Inf, 0, negative — each named with its block and value.
    for (bad, text) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (0.0, "scale 0"), (-1.5, "-1.5")] {
        let mut v = sq.flatten_all()?.to_vec1::<f32>()?;
        v[3] = bad;
        let s = Tensor::from_vec(v, sq.dims(), &Device::Cpu)?;
        for dt in [DType::F32, DType::BF16] {
            let dir = raw_module(Some(wq.clone()), Some(s.to_dtype(dt)?))?;
            let e = err_text(load_up(dir.path()));
            assert_has(&e, &[&format!("{UP}.weight_scale_inv"), "block [1, 1]", text]);
        }
    }
    // A scale with no weight.
    let dir = raw_module(None, Some(sq.clone()))?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&format!("{UP}.weight_scale_inv"), "no matching"]);
    // An FP8 tensor asked for as dense.
    let dir = raw_module(Some(wq), Some(sq))?;
    let ck = Checkpoint::open(dir.path())?;
    let e = err_text(candle_nn::linear_no_bias(256, 384, ck.var_builder(DType::BF16, &Device::Cpu).pp(UP)));
    assert_has(&e, &[&format!("{UP}.weight"), "F8_E4M3", "BF16"]);
    Ok(())
}

#[test]
fn k_mismatch_at_forward() -> R {
    let dir = tempfile::tempdir()?;
    let ck = write_default(dir.path(), 1, DType::F32)?;
    let layer = ck.load_fp8_linear(Q, &Device::Cpu, false)?;
    let x = test_input(2, 256, 1).to_dtype(DType::BF16)?;
    assert_has(&err_text(layer.forward(&x)), &["256", "384"]);
    // The config's dims are checked against the stored weight at load.
    let vb = ck.var_builder(DType::BF16, &Device::Cpu);
    assert_has(&err_text(Fp8BlockLinear::load(vb.pp(Q), 256, 256, false)), &[&format!("{Q}.weight"), "[256, 384]"]);
    Ok(())
}

fn single_file(dir: &Path) -> std::path::PathBuf {
    dir.join(SINGLE_FILE)
}

#[test]
fn corrupt_safetensors_files() -> R {
    let dir = tempfile::tempdir()?;
    write_default(dir.path(), 1, DType::F32)?;
    let f = single_file(dir.path());
    let good = std::fs::read(&f)?;
    let fname = f.display().to_string();
    let n = u64::from_le_bytes(good[..8].try_into()?) as usize;

    // Truncated in the data section.
    std::fs::write(&f, &good[..good.len() - 10])?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, "truncated"]);
    // Truncated inside the header.
    std::fs::write(&f, &good[..8 + n / 2])?;
    assert_has(
        &err_text(Checkpoint::open(dir.path())),
        &[&fname, &format!("header length {n}"), "larger than the file"],
    );
    // Shorter than the length prefix.
    std::fs::write(&f, &good[..5])?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, "5 bytes"]);
    // A header length far beyond the file.
    let mut bad = good.clone();
    bad[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&f, &bad)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &format!("header length {}", 1u64 << 40)]);
    let mut bad = good.clone();
    bad[..8].copy_from_slice(&((good.len() as u64) * 2).to_le_bytes());
    std::fs::write(&f, &bad)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, "larger than the file"]);
    // Corrupt JSON.
    let mut bad = good.clone();
    bad[8] = b'[';
    bad[9] = b'x';
    std::fs::write(&f, &bad)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, "not valid JSON"]);
    // Offsets out of bounds / sizes that do not match dtype × shape.
    let header = std::str::from_utf8(&good[8..8 + n])?;
    let mut h: Value = serde_json::from_str(header)?;
    let key = format!("{Q}.weight");
    let (b, e) = (h[&key]["data_offsets"][0].as_u64().unwrap(), h[&key]["data_offsets"][1].as_u64().unwrap());
    let rewrite = |h: &Value| -> R {
        let mut s = serde_json::to_string(h)?;
        while s.len() < n {
            s.push(' ');
        }
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(&good[8 + n..]);
        std::fs::write(&f, out)?;
        Ok(())
    };
    h[&key]["data_offsets"] = json!([b, e + 1_000_000_000]);
    rewrite(&h)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &key, "run past the end"]);
    h[&key]["data_offsets"] = json!([b, e - 1]);
    rewrite(&h)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &key, "F8_E4M3 [256, 384] needs 98304 bytes"]);
    h[&key]["data_offsets"] = json!([e, b]);
    rewrite(&h)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &key, "invalid data_offsets"]);
    h[&key]["data_offsets"] = json!([b, e]);
    h[&key]["dtype"] = json!("F9");
    rewrite(&h)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &key, "unknown dtype \"F9\""]);
    h[&key]["dtype"] = json!("F8_E4M3");
    h[&key]["shape"] = json!([256, -384]);
    rewrite(&h)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, &key, "invalid shape"]);
    // Restored, it opens again; trailing garbage is refused.
    std::fs::write(&f, &good)?;
    assert!(read_safetensors_header(&f).is_ok());
    let mut bad = good.clone();
    bad.extend_from_slice(&[0; 7]);
    std::fs::write(&f, &bad)?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[&fname, "trailing bytes"]);
    Ok(())
}

#[test]
fn index_problems() -> R {
    let dir = tempfile::tempdir()?;
    write_default(dir.path(), 3, DType::F32)?;
    let index_path = dir.path().join(INDEX_FILE);
    let index_text = std::fs::read_to_string(&index_path)?;
    // A listed shard is missing.
    let shard2 = dir.path().join("model-00002-of-00003.safetensors");
    let saved = std::fs::read(&shard2)?;
    std::fs::remove_file(&shard2)?;
    assert_has(
        &err_text(Checkpoint::open(dir.path())),
        &["model-00002-of-00003.safetensors", INDEX_FILE, "does not exist"],
    );
    std::fs::write(&shard2, saved)?;
    Checkpoint::open(dir.path())?;
    // A weight_map entry that does not resolve.
    let mut index: Value = serde_json::from_str(&index_text)?;
    index["weight_map"]["model.ghost.weight"] = json!("model-00001-of-00003.safetensors");
    std::fs::write(&index_path, index.to_string())?;
    assert_has(
        &err_text(Checkpoint::open(dir.path())),
        &["model.ghost.weight", "model-00001-of-00003.safetensors", "no such tensor"],
    );
    // A tensor mapped to the wrong shard.
    let mut index: Value = serde_json::from_str(&index_text)?;
    let first = index["weight_map"]["lm_head.weight"].as_str().unwrap().to_string();
    let other =
        if first.contains("00001") { "model-00002-of-00003.safetensors" } else { "model-00001-of-00003.safetensors" };
    index["weight_map"]["lm_head.weight"] = json!(other);
    std::fs::write(&index_path, index.to_string())?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["lm_head.weight", other, "stored in"]);
    // Shard names escaping the directory; malformed index.
    let mut index: Value = serde_json::from_str(&index_text)?;
    index["weight_map"]["lm_head.weight"] = json!("../x.safetensors");
    std::fs::write(&index_path, index.to_string())?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["../x.safetensors", "not a file name"]);
    std::fs::write(&index_path, "{\"weight_map\": 3}")?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[INDEX_FILE, "weight_map"]);
    std::fs::write(&index_path, "{")?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &[INDEX_FILE, "not valid JSON"]);
    // No weights at all.
    let empty = tempfile::tempdir()?;
    std::fs::write(empty.path().join("config.json"), "{}")?;
    assert_has(&err_text(Checkpoint::open(empty.path())), &["no weights", SINGLE_FILE]);
    Ok(())
}

#[test]
fn duplicate_tensor_across_shards() -> R {
    let dir = tempfile::tempdir()?;
    let t = Tensor::ones(4, DType::F32, &Device::Cpu)?;
    for i in 1..=2 {
        candle_core::safetensors::save(
            &std::collections::HashMap::from([("a.weight".to_string(), t.clone())]),
            dir.path().join(format!("s{i}.safetensors")),
        )?;
    }
    std::fs::write(dir.path().join("config.json"), "{}")?;
    std::fs::write(
        dir.path().join(INDEX_FILE),
        json!({"weight_map": {"a.weight": "s1.safetensors", "b": "s2.safetensors"}}).to_string(),
    )?;
    assert_has(&err_text(Checkpoint::open(dir.path())), &["a.weight", "s1.safetensors", "s2.safetensors"]);
    Ok(())
}

#[test]
fn shard_writer_splits_by_size() -> R {
    let dir = tempfile::tempdir()?;
    let mut w = ShardWriter::new(dir.path(), Some(3000))?;
    for i in 0..5 {
        w.push(format!("t{i}.weight"), Tensor::ones((10, 100), DType::F16, &Device::Cpu)?)?;
        // 2000 bytes
    }
    assert!(w.push("t0.weight", Tensor::ones(1, DType::F32, &Device::Cpu)?).is_err());
    let files = w.finish()?;
    assert_eq!(files.len(), 5);
    std::fs::write(dir.path().join("config.json"), "{}")?;
    let ck = Checkpoint::open(dir.path())?;
    assert_eq!(ck.tensor_names().len(), 5);
    assert_eq!(ck.load_tensor("t3.weight", &Device::Cpu)?.dtype(), DType::F16);
    assert!(ck.quantization().is_none());
    assert!(!ck.is_quantized("t3"));
    Ok(())
}

#[test]
fn open_model_local_and_errors() -> R {
    let dir = tempfile::tempdir()?;
    write_default(dir.path(), 1, DType::F32)?;
    std::fs::write(dir.path().join("tokenizer.json"), "{}")?;
    let ck = open_model(dir.path().to_str().unwrap())?;
    assert_eq!(ck.tokenizer_path(), Some(dir.path().join("tokenizer.json").as_path()));
    assert_has(&err_text(open_model("/definitely/not/here")), &["/definitely/not/here", "neither"]);
    Ok(())
}

/// Marks the child process in which [`from_hub_offline_cache`] runs its body.
#[cfg(feature = "hub")]
const HUB_CHILD_ENV: &str = "CANDLE_FP8_TEST_HUB_CHILD";

/// The hub path, offline, from a hand-made hf-hub cache (no network).
///
/// hf-hub reads `HF_HUB_OFFLINE` / `HF_HUB_CACHE` from the environment, and setting them with
/// `std::env::set_var` while the other tests of this binary run (and read the environment:
/// every `Fp8BlockLinear` reads `CANDLE_FP8_BACKEND`) is a data race. So this test re-runs this
/// test binary for itself alone (`--exact`), with the variables given to the child at spawn:
/// no test changes the environment of a running process.
#[cfg(feature = "hub")]
#[test]
fn from_hub_offline_cache() -> R {
    if std::env::var_os(HUB_CHILD_ENV).is_some() {
        return hub_offline_body();
    }
    let cache = tempfile::tempdir()?;
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["--exact", "from_hub_offline_cache", "--test-threads", "1", "--nocapture"])
        .env(HUB_CHILD_ENV, "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", cache.path())
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // "1 passed": the child ran this test (a filter that matched nothing would pass too).
    assert!(out.status.success() && text.contains("1 passed"), "the child process failed:\n{text}");
    Ok(())
}

/// [`from_hub_offline_cache`] in its child process (`HF_HUB_OFFLINE=1`, `HF_HUB_CACHE` set).
#[cfg(feature = "hub")]
fn hub_offline_body() -> R {
    assert_eq!(std::env::var("HF_HUB_OFFLINE").as_deref(), Ok("1"));
    let cache = std::path::PathBuf::from(std::env::var_os("HF_HUB_CACHE").expect("HF_HUB_CACHE is set for the child"));
    let repo = cache.join("models--test-org--tiny-fp8");
    let snap = repo.join("snapshots").join("0123456789abcdef");
    write_default(&snap, 2, DType::BF16)?;
    std::fs::write(snap.join("tokenizer.json"), "{}")?;
    std::fs::create_dir_all(repo.join("refs"))?;
    std::fs::write(repo.join("refs").join("main"), "0123456789abcdef")?;
    let ck = Checkpoint::from_hub("test-org/tiny-fp8", None)?;
    assert_eq!(ck.files().len(), 2);
    assert!(ck.tokenizer_path().is_some());
    let ck = open_model("test-org/tiny-fp8@main")?;
    check_layer(&ck.load_fp8_linear(Q, &Device::Cpu, false)?, Q, DType::BF16)?;
    // A commit hash as the revision finds its snapshot without a ref.
    let ck = Checkpoint::from_hub("test-org/tiny-fp8", Some("0123456789abcdef0123456789abcdef01234567"));
    assert!(ck.is_err(), "no such snapshot");
    let pinned = repo.join("snapshots").join("0123456789abcdef0123456789abcdef01234567");
    write_default(&pinned, 1, DType::F32)?;
    let ck = open_model("test-org/tiny-fp8@0123456789abcdef0123456789abcdef01234567")?;
    assert_eq!(ck.files().len(), 1);
    assert_has(&err_text(open_model("test-org/absent")), &["test-org/absent", "config.json", "HF_HUB_OFFLINE"]);
    std::fs::remove_file(snap.join("model-00002-of-00002.safetensors"))?;
    assert_has(&err_text(Checkpoint::from_hub("test-org/tiny-fp8", None)), &["model-00002-of-00002.safetensors"]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The FP8 checkpoint written by torch + Python safetensors (tests/fixtures/tiny-qwen3-fp8/)
// ---------------------------------------------------------------------------------------------

const TINY_FP8: &str = "tiny-qwen3-fp8";

fn tiny_fp8_json(file: &str) -> R<Value> {
    let path = fixture_dir(TINY_FP8).join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn f32s(v: &Value) -> Vec<f32> {
    // float32 values are written as decimals that round-trip in f32: parse as f64, cast.
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

fn bits_of(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `Checkpoint::open` validates the torch-written checkpoint: two shards and an index that
/// places every tensor where its header is, each tensor stored in the dtype reference.json
/// records (F8_E4M3 weights, F32 or BF16 scales, BF16 dense tensors), `lm_head` excluded.
#[test]
fn torch_written_fp8_checkpoint_opens() -> R {
    let dir = fixture_dir(TINY_FP8);
    let ck = Checkpoint::open(&dir)?;
    let (reference, index) = (tiny_fp8_json("reference.json")?, tiny_fp8_json(INDEX_FILE)?);
    let shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    assert_eq!(ck.files().iter().map(|f| f.file_name().unwrap().to_str().unwrap()).collect::<Vec<_>>(), shards);
    let dtypes = reference["tensor_dtypes"].as_object().expect("tensor_dtypes");
    let mut names = ck.tensor_names();
    names.sort();
    assert_eq!(names, dtypes.keys().map(String::as_str).collect::<Vec<_>>(), "tensor names");
    let weight_map = index["weight_map"].as_object().expect("weight_map");
    let mut total = 0;
    for (name, dtype) in dtypes {
        let info = ck.tensor_info(name).unwrap();
        assert_eq!(format!("{:?}", info.dtype), dtype.as_str().unwrap(), "{name}: stored dtype");
        assert_eq!(info.file.file_name().unwrap().to_str(), weight_map[name].as_str(), "{name}: shard");
        total += info.nbytes();
    }
    assert_eq!(Some(total as u64), index["metadata"]["total_size"].as_u64(), "metadata.total_size");
    // Both scale dtypes occur, as the README says (layer 1 and layer 0's v_proj in BF16).
    assert_eq!(dtypes["model.layers.0.self_attn.v_proj.weight_scale_inv"], "BF16");
    assert_eq!(dtypes["model.layers.0.self_attn.q_proj.weight_scale_inv"], "F32");
    let q = ck.quantization().expect("a quantization_config");
    assert_eq!(q.modules_to_not_convert, vec!["lm_head".to_string()]);
    assert!(!ck.is_quantized("lm_head"));
    assert!(ck.is_quantized("model.layers.1.mlp.down_proj"));
    assert_eq!(ck.config_json()["model_type"], "qwen3");
    Ok(())
}

/// Every FP8 linear of the torch-written checkpoint loads, with its scales exactly as stored
/// (BF16 ones widened), and `Fp8BlockLinear::dequantize` gives, element by element, the
/// closed-form e4m3 value × the stored scale rounded once to f32 (what the fixture's reference
/// logits used). For the three `raw_checks` modules: the codes, the first and last values and
/// the f64 sums torch recorded.
#[test]
fn torch_written_fp8_layers_dequantize_to_the_recorded_values() -> R {
    let ck = Checkpoint::open(fixture_dir(TINY_FP8))?;
    let reference = tiny_fp8_json("reference.json")?;
    let vb = ck.var_builder(DType::BF16, &Device::Cpu);
    let mut layers = 0;
    for name in ck.tensor_names() {
        let info = ck.tensor_info(name).unwrap();
        if info.dtype != safetensors::Dtype::F8_E4M3 {
            continue;
        }
        let module = name.strip_suffix(".weight").expect("FP8 tensors are weights");
        let (n, k) = (info.shape[0], info.shape[1]);
        let stored_scale = ck.load_tensor(&format!("{module}.weight_scale_inv"), &Device::Cpu)?;
        for layer in
            [ck.load_fp8_linear(module, &Device::Cpu, false)?, Fp8BlockLinear::load(vb.pp(module), k, n, false)?]
        {
            assert_eq!((layer.out_dim(), layer.in_dim()), (n, k), "{module}");
            let scales: Vec<f32> = layer.weight_scale_inv().flatten_all()?.to_vec1()?;
            assert_eq!(
                bits_of(&scales),
                bits_of(&stored_scale.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?),
                "{module}: scales"
            );
            let codes: Vec<u8> =
                layer.weight().flatten_all()?.to_vec1::<candle_fp8::F8E4M3>()?.iter().map(|c| c.to_bits()).collect();
            let deq: Vec<f32> = layer.dequantize()?.flatten_all()?.to_vec1()?;
            assert_eq!(deq.len(), n * k);
            let kb = k.div_ceil(128);
            for (p, &d) in deq.iter().enumerate() {
                // e4m3 (4 significant bits) × f32 scale (24) is exact in f64: one rounding to f32.
                let want = (e4m3_value(codes[p]) * f64::from(scales[(p / k / 128) * kb + (p % k) / 128])) as f32;
                assert!(
                    d.to_bits() == want.to_bits(),
                    "{module}: [{}, {}] dequantizes to {d:e}, expected {want:e}",
                    p / k,
                    p % k
                );
            }
            if let Some(c) = reference["raw_checks"].as_array().unwrap().iter().find(|c| c["name"] == name) {
                check_raw(c, &ck, &layer, &codes, &deq)?;
            }
            layers += 1;
        }
    }
    assert_eq!(layers, 2 * 14, "7 FP8 linears per layer, 2 layers, each loaded two ways");
    Ok(())
}

/// One `raw_checks` entry of the fixture's reference.json against a loaded layer.
fn check_raw(c: &Value, ck: &Checkpoint, layer: &Fp8BlockLinear, codes: &[u8], deq: &[f32]) -> R {
    let name = c["name"].as_str().unwrap();
    let dims = |v: &Value| v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect::<Vec<_>>();
    assert_eq!(layer.weight().dims(), dims(&c["shape"]), "{name}: shape");
    assert_eq!(format!("{:?}", ck.tensor_info(name).unwrap().dtype), c["weight_dtype"].as_str().unwrap());
    let scale_name = c["scale_name"].as_str().unwrap();
    assert_eq!(
        format!("{:?}", ck.tensor_info(scale_name).unwrap().dtype),
        c["scale_dtype"].as_str().unwrap(),
        "{scale_name}"
    );
    assert_eq!(layer.weight_scale_inv().dims(), dims(&c["scale_shape"]), "{scale_name}: shape");
    let scales: Vec<f32> = layer.weight_scale_inv().flatten_all()?.to_vec1()?;
    assert_eq!(bits_of(&scales), bits_of(&f32s(&c["scale"])), "{scale_name}: values");
    let first_codes: Vec<u8> =
        c["first8_codes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
    assert_eq!(&codes[..8], &first_codes[..], "{name}: first 8 codes");
    assert_eq!(bits_of(&deq[..8]), bits_of(&f32s(&c["first8_dequantized"])), "{name}: first 8 values");
    assert_eq!(
        bits_of(&deq[deq.len() - 8..]),
        bits_of(&f32s(&c["last_row_last8_dequantized"])),
        "{name}: last 8 values"
    );
    // f64 sums of the f32 values: torch / numpy sum pairwise, we sequentially; the two differ
    // by at most (N − 1 + log2 N)·2^-53·Σ|v| ≤ 2N·2^-53·Σ|v| — far below any changed value.
    let (sum, abs_sum) = deq.iter().fold((0f64, 0f64), |(s, a), &v| (s + f64::from(v), a + f64::from(v).abs()));
    let (want_sum, want_abs) =
        (c["sum_dequantized_f64"].as_f64().unwrap(), c["abs_sum_dequantized_f64"].as_f64().unwrap());
    let tol = 2.0 * deq.len() as f64 * 2f64.powi(-53) * want_abs;
    assert!((sum - want_sum).abs() <= tol, "{name}: sum {sum} vs torch {want_sum} (tolerance {tol:e})");
    assert!((abs_sum - want_abs).abs() <= tol, "{name}: abs sum {abs_sum} vs torch {want_abs} (tolerance {tol:e})");
    Ok(())
}

/// `lm_head` (in `modules_to_not_convert`) loads as a dense bf16 linear with the stored values,
/// and asking for it as FP8 is an error naming it and its stored dtype.
#[test]
fn torch_written_lm_head_loads_dense() -> R {
    let ck = Checkpoint::open(fixture_dir(TINY_FP8))?;
    let vb = ck.var_builder(DType::BF16, &Device::Cpu);
    let lm = ck.load_linear(vb.pp("lm_head"), 128, 128, false)?;
    let AnyLinear::Dense(ref lin) = lm else { panic!("lm_head should load dense, got {lm:?}") };
    assert_eq!((lin.weight().dims(), lin.weight().dtype()), (&[128, 128][..], DType::BF16));
    let stored = ck.load_tensor("lm_head.weight", &Device::Cpu)?;
    assert_eq!(stored.dtype(), DType::BF16);
    let diff =
        (lin.weight().to_dtype(DType::F32)? - stored.to_dtype(DType::F32)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert_eq!(diff, 0.0, "lm_head: the stored bf16 values");
    assert!(matches!(ck.load_linear(vb.pp("model.layers.0.mlp.up_proj"), 128, 192, false)?, AnyLinear::Fp8(_)));
    assert_has(
        &err_text(Fp8BlockLinear::load(vb.pp("lm_head"), 128, 128, false)),
        &["lm_head.weight", "BF16", "F8_E4M3"],
    );
    Ok(())
}
