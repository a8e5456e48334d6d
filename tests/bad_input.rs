//! The bad-input matrix: every way a caller or a checkpoint can hand candle-fp8 something
//! wrong, through the public API and the loader. Each case must end in a `candle::Error`
//! whose text names the tensor / file / field *and* the bad value — never a panic, a hang or
//! a silently wrong tensor. The few inputs that are legal but degenerate (M = 0, N = 0,
//! K % 128 != 0, NaN / Inf activations) are checked for a well-defined, correct result.
//!
//! Cases are table-driven (`id`, what is wrong, the needles the error must contain); each
//! runs on its own thread under `catch_unwind` with a real deadline (a case that hangs is
//! abandoned and the test fails naming it), and the table is printed with
//! `cargo test --test bad_input -- --nocapture`. docs/reliability.md lists them.
//!
//! The committed fuzz seeds (fuzz/corpus/*) are also replayed here through the fuzz targets'
//! own logic (fuzz/fuzz_targets/logic.rs), so CI runs the fuzzers' invariants on every seed.
//!
//! Wrong-device operands need a second device: that case lives in tests/gpu_reliability.rs.

#[path = "common/fixtures.rs"]
mod fixtures;

#[path = "../fuzz/fuzz_targets/logic.rs"]
mod fuzz_logic;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::checkpoint::{
    parse_safetensors_header, read_safetensors_header, Checkpoint, QuantizationConfig, CONFIG_FILE, INDEX_FILE,
    SINGLE_FILE,
};
use candle_fp8::format::act_scales_view;
use candle_fp8::format::F8E4M3;
use candle_fp8::models::{DecoderConfig, DecoderModel, ModelOptions};
use candle_fp8::ops::{fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with};
use candle_fp8::quant::{quantize_activation, quantize_weight};
use candle_fp8::testing::{random_operands, Operands};
use candle_fp8::Fp8BlockLinear;
use candle_fp8::{Backend, Fp8Options, Provider};
use fixtures::{
    check_gemm_rounding, check_gemm_tensor, contract_gemm, fp8_quant_config, test_weight, write_fp8_checkpoint,
    write_raw_checkpoint, GemmMutant, HostGemm,
};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One row of the matrix.
struct Case {
    id: &'static str,
    what: &'static str,
    needles: Vec<String>,
    run: Arc<dyn Fn() -> Result<()> + Send + Sync>,
}

fn case(
    id: &'static str,
    what: &'static str,
    needles: &[&str],
    run: impl Fn() -> Result<()> + Send + Sync + 'static,
) -> Case {
    Case { id, what, needles: needles.iter().map(|s| s.to_string()).collect(), run: Arc::new(run) }
}

/// Longest a single case may take (a hang is a failure).
const CASE_LIMIT: Duration = Duration::from_secs(20);

/// How one case ended, as its thread reports it.
enum Outcome {
    Panicked(String),
    Ok,
    Err(String),
}

/// Runs `c` on its own thread and waits at most `limit` for it. `None`: it did not finish in
/// time — the thread is left running, detached (a Rust thread cannot be killed; the test
/// process ends it when it exits), and nothing waits on it again.
fn run_with_deadline(c: &Case, limit: Duration) -> Option<Outcome> {
    let (tx, rx) = mpsc::channel();
    let run = Arc::clone(&c.run);
    std::thread::Builder::new()
        .name(format!("bad-input {}", c.id))
        .spawn(move || {
            let outcome = match catch_unwind(AssertUnwindSafe(|| run())) {
                Err(p) => {
                    let msg =
                        p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                    Outcome::Panicked(msg.unwrap_or_default())
                }
                Ok(Ok(())) => Outcome::Ok,
                Ok(Err(e)) => Outcome::Err(e.to_string()),
            };
            // After a timeout nobody listens any more: the send fails, harmlessly.
            let _ = tx.send(outcome);
        })
        .expect("spawning a case thread");
    match rx.recv_timeout(limit) {
        Ok(outcome) => Some(outcome),
        Err(RecvTimeoutError::Timeout) => None,
        // The thread ended without reporting (a panic that `catch_unwind` cannot catch).
        Err(RecvTimeoutError::Disconnected) => Some(Outcome::Panicked("the case thread ended without a result".into())),
    }
}

/// Runs every case: it must fail (not panic) within the limit, with every needle in the error.
fn run_matrix(area: &str, cases: Vec<Case>) {
    run_matrix_with_limit(area, cases, CASE_LIMIT)
}

fn run_matrix_with_limit(area: &str, cases: Vec<Case>, limit: Duration) {
    let mut failures = Vec::new();
    for c in &cases {
        let t0 = Instant::now();
        let outcome = run_with_deadline(c, limit);
        let dt = t0.elapsed();
        let verdict = match outcome {
            None => Err(format!("HUNG: no result after {dt:?} (limit {limit:?}); its thread was abandoned")),
            Some(Outcome::Panicked(msg)) => Err(format!("PANICKED: {msg}")),
            Some(Outcome::Ok) => Err("returned Ok, expected an error".to_string()),
            Some(Outcome::Err(text)) => {
                let missing: Vec<&String> = c.needles.iter().filter(|n| !text.contains(n.as_str())).collect();
                if missing.is_empty() {
                    Ok(text)
                } else {
                    Err(format!("error does not mention {missing:?}:\n      {text}"))
                }
            }
        };
        match &verdict {
            Ok(text) => {
                // Without candle's backtrace (printed when RUST_BACKTRACE is set).
                let msg: Vec<&str> = text.lines().take_while(|l| !l.trim_start().starts_with("0:")).collect();
                println!("[{area}] {:<4} ok   {:<58} -> {}", c.id, c.what, msg.join(" | "))
            }
            Err(why) => {
                println!("[{area}] {:<4} FAIL {:<58} -> {why}", c.id, c.what);
                failures.push(format!("{} ({}): {why}", c.id, c.what));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} {area} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

fn ops() -> Result<Operands> {
    // M = 5, N = 256, K = 384: kb = 3, nb = 2, scale column stride round_up(5, 4) = 8.
    random_operands(5, 256, 384, 9, &Device::Cpu)
}

fn f8(t: &Tensor) -> Result<Tensor> {
    t.to_dtype(DType::F32)?.to_dtype(DType::BF16)
}

fn gemm(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor) -> Result<()> {
    fp8_block_matmul(qa, sa, w, sw).map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// GEMM operands (ops::fp8_block_matmul / validate_operands)
// ---------------------------------------------------------------------------------------------

fn gemm_cases() -> Vec<Case> {
    vec![
        case("G01", "qa dtype BF16 instead of F8E4M3", &["qa", "F8E4M3", "BF16", "[5, 384]"], || {
            let o = ops()?;
            gemm(&f8(&o.qa)?, &o.sa, &o.w, &o.sw)
        }),
        case("G02", "w dtype F32", &["w:", "F8E4M3", "F32", "[256, 384]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa, &o.w.to_dtype(DType::F32)?, &o.sw)
        }),
        case("G03", "sa dtype F16", &["sa", "F32", "F16"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa.to_dtype(DType::F16)?, &o.w, &o.sw)
        }),
        case("G04", "sw dtype BF16", &["sw", "F32", "BF16", "[2, 3]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa, &o.w, &o.sw.to_dtype(DType::BF16)?)
        }),
        case("G05", "qa rank 3", &["qa", "rank-2", "[1, 5, 384]"], || {
            let o = ops()?;
            gemm(&o.qa.unsqueeze(0)?, &o.sa, &o.w, &o.sw)
        }),
        case("G06", "w rank 1", &["w", "rank-2", "[98304]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa, &o.w.flatten_all()?, &o.sw)
        }),
        case("G07", "K mismatch between qa and w", &["K mismatch", "384", "256"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa, &o.w.narrow(1, 0, 256)?, &o.sw)
        }),
        case("G08", "sa has M = 4 rows for qa's 5", &["sa", "[4, 3]", "expected [5, 3]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa.narrow(0, 0, 4)?, &o.w, &o.sw)
        }),
        case("G09", "sa row-major instead of MN-major", &["sa", "MN-major", "[1, 8]", "[3, 1]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa.contiguous()?, &o.w, &o.sw)
        }),
        case("G10", "sw shape [2, 2] for K = 384", &["sw", "[2, 2]", "expected [2, 3]"], || {
            let o = ops()?;
            gemm(&o.qa, &o.sa, &o.w, &o.sw.narrow(1, 0, 2)?)
        }),
        case("G11", "w transposed view (strides [1, 256])", &["w:", "row-major", "[1, 256]"], || {
            let o = ops()?;
            let wt = Tensor::from_vec(o.w_host.clone(), (384, 256), &Device::Cpu)?.t()?;
            gemm(&o.qa, &o.sa, &wt, &o.sw)
        }),
        case("G12", "qa column slice (row stride 768)", &["qa", "row-major", "[768, 1]"], || {
            let o = ops()?;
            let wide: Vec<F8E4M3> = (0..2).flat_map(|_| o.qa_host.iter().copied()).collect();
            let qa = Tensor::from_vec(wide, (5, 768), &Device::Cpu)?.narrow(1, 0, 384)?;
            gemm(&qa, &o.sa, &o.w, &o.sw)
        }),
        case("G13", "sw transposed view (strides [1, 2])", &["sw", "row-major", "[1, 2]"], || {
            let o = ops()?;
            let swt = Tensor::from_vec(o.sw_host.clone(), (3, 2), &Device::Cpu)?.t()?;
            gemm(&o.qa, &o.sa, &o.w, &swt)
        }),
        case("G14", "K = 0", &["qa", "K = 0", "[5, 0]"], || {
            let dev = Device::Cpu;
            let qa = Tensor::from_vec(Vec::<F8E4M3>::new(), (5, 0), &dev)?;
            let w = Tensor::from_vec(Vec::<F8E4M3>::new(), (256, 0), &dev)?;
            let sa = Tensor::zeros((5, 0), DType::F32, &dev)?;
            let sw = Tensor::zeros((2, 0), DType::F32, &dev)?;
            gemm(&qa, &sa, &w, &sw)
        }),
        case("G15", "backend tpu", &["backend", "\"tpu\"", "one of auto, hopper, cublaslt, dequant, cpu"], || {
            "tpu".parse::<Backend>().map(|_| ())
        }),
        case("G16", "hopper forced on CPU tensors", &["backend hopper", "cannot run", "CPU"], || {
            let o = ops()?;
            fp8_block_matmul_with(
                &Fp8Options::with_backend(Backend::Force(Provider::Hopper)),
                &o.qa,
                &o.sa,
                &o.w,
                &o.sw,
            )
            .map(|_| ())
        }),
        case("G17", "scale buffer of the wrong length", &["activation scale buffer", "7 elements", "3 × 8"], || {
            act_scales_view(Tensor::zeros(7, DType::F32, &Device::Cpu)?, 5, 3).map(|_| ())
        }),
        case("G18", "into: out dtype F32", &["out", "BF16", "F32"], || {
            let o = ops()?;
            fp8_block_matmul_into(&o.qa, &o.sa, &o.w, &o.sw, &Tensor::zeros((5, 256), DType::F32, &Device::Cpu)?)
        }),
        case("G19", "into: out shape [5, 128]", &["out", "[5, 256]", "[5, 128]"], || {
            let o = ops()?;
            fp8_block_matmul_into(&o.qa, &o.sa, &o.w, &o.sw, &Tensor::zeros((5, 128), DType::BF16, &Device::Cpu)?)
        }),
        case("G20", "into: out transposed", &["out", "contiguous", "strides [1, 5]"], || {
            let o = ops()?;
            let out = Tensor::zeros((256, 5), DType::BF16, &Device::Cpu)?.t()?;
            fp8_block_matmul_into(&o.qa, &o.sa, &o.w, &o.sw, &out)
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Fp8BlockLinear and quantization
// ---------------------------------------------------------------------------------------------

/// An e4m3 `[256, 256]` weight and its `[2, 2]` scales.
fn qweight() -> Result<(Tensor, Tensor)> {
    quantize_weight(&test_weight(256, 256, 3))
}

/// `qweight()` with scale block [1, 1] replaced by `bad`.
fn with_scale(bad: f32) -> Result<(Tensor, Tensor)> {
    let (q, s) = qweight()?;
    let mut v: Vec<f32> = s.flatten_all()?.to_vec1()?;
    v[3] = bad;
    Ok((q, Tensor::from_vec(v, (2, 2), &Device::Cpu)?))
}

fn linear() -> Result<Fp8BlockLinear> {
    let (q, s) = qweight()?;
    Fp8BlockLinear::new(q, s, None)
}

fn linear_cases() -> Vec<Case> {
    let scale_case = |id, what, bad: f32, needle: &'static str| {
        case(id, what, &["weight_scale_inv", "block [1, 1] of [2, 2]", needle, "finite and > 0"], move || {
            let (q, s) = with_scale(bad)?;
            Fp8BlockLinear::new(q, s, None).map(|_| ())
        })
    };
    vec![
        scale_case("L01", "weight scale NaN", f32::NAN, "scale NaN"),
        scale_case("L02", "weight scale +inf", f32::INFINITY, "scale inf"),
        scale_case("L03", "weight scale -inf", f32::NEG_INFINITY, "scale -inf"),
        scale_case("L04", "weight scale 0", 0.0, "scale 0"),
        scale_case("L05", "weight scale -0.0", -0.0, "scale -0"),
        scale_case("L06", "weight scale negative", -0.25, "scale -0.25"),
        case(
            "L07",
            "NaN scale stored as BF16, module named",
            &["model.layers.3.mlp.up_proj.weight_scale_inv", "NaN"],
            || {
                let (q, s) = with_scale(f32::NAN)?;
                Fp8BlockLinear::new_named("model.layers.3.mlp.up_proj", q, s.to_dtype(DType::BF16)?, None).map(|_| ())
            },
        ),
        case("L08", "weight scale dtype U8", &["weight_scale_inv", "F32, BF16 or F16", "U8"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q, s.to_dtype(DType::U8)?, None).map(|_| ())
        }),
        case("L09", "weight dtype F32 (not quantized)", &["weight", "F8_E4M3", "F32", "[256, 256]"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q.to_dtype(DType::F32)?, s, None).map(|_| ())
        }),
        case("L10", "weight rank 3", &["weight", "rank 2", "[2, 128, 256]"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q.reshape((2, 128, 256))?, s, None).map(|_| ())
        }),
        case("L11", "weight scale shape [1, 4]", &["weight_scale_inv", "[1, 4]", "expected [2, 2]"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q, s.reshape((1, 4))?, None).map(|_| ())
        }),
        case("L12", "weight scale rank 1", &["weight_scale_inv", "[4]", "expected [2, 2]"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q, s.flatten_all()?, None).map(|_| ())
        }),
        case("L13", "bias of 7 for N = 256", &["bias", "[7]", "256"], || {
            let (q, s) = qweight()?;
            Fp8BlockLinear::new(q, s, Some(Tensor::zeros(7, DType::F32, &Device::Cpu)?)).map(|_| ())
        }),
        case("L14", "forward with K = 128 for a K = 256 layer", &["128 features", "[3, 128]", "expects 256"], || {
            linear()?.forward(&Tensor::zeros((3, 128), DType::BF16, &Device::Cpu)?).map(|_| ())
        }),
        case("L15", "forward with a U32 input", &["bf16, f16 or f32", "U32"], || {
            linear()?.forward(&Tensor::zeros((3, 256), DType::U32, &Device::Cpu)?).map(|_| ())
        }),
        case("L16", "forward with a scalar", &["scalar"], || {
            linear()?.forward(&Tensor::new(1f32, &Device::Cpu)?).map(|_| ())
        }),
        case("L17", "forward with an F8E4M3 input", &["bf16, f16 or f32", "F8E4M3"], || {
            let (q, _) = qweight()?;
            linear()?.forward(&q).map(|_| ())
        }),
        case("L18", "quantize_activation of a rank-3 x", &["quantize_activation", "rank 2", "[2, 3, 128]"], || {
            quantize_activation(&Tensor::zeros((2, 3, 128), DType::F32, &Device::Cpu)?).map(|_| ())
        }),
        case("L19", "quantize_activation with K = 0", &["quantize_activation", "K = 0", "[4, 0]"], || {
            quantize_activation(&Tensor::zeros((4, 0), DType::F32, &Device::Cpu)?).map(|_| ())
        }),
        case("L20", "quantize_activation of U8", &["quantize_activation", "U8"], || {
            quantize_activation(&Tensor::zeros((4, 128), DType::U8, &Device::Cpu)?).map(|_| ())
        }),
        case("L21", "quantize_weight of an FP8 weight", &["quantize_weight", "F8E4M3"], || {
            let (q, _) = qweight()?;
            quantize_weight(&q).map(|_| ())
        }),
        case("L22", "concat with different in_dim", &["concat", "part 1", "in_dim 128", "256"], || {
            let a = linear()?;
            let b = Fp8BlockLinear::from_weight(&test_weight(128, 128, 1), None)?;
            Fp8BlockLinear::concat(&[&a, &b]).map(|_| ())
        }),
        case(
            "L23",
            "concat with an unaligned leading part",
            &["concat", "part 0", "out_dim 200", "multiple of 128"],
            || {
                let a = Fp8BlockLinear::from_weight(&test_weight(200, 256, 1), None)?;
                let b = linear()?;
                Fp8BlockLinear::concat(&[&a, &b]).map(|_| ())
            },
        ),
        case("L24", "concat of nothing", &["concat", "no layers"], || Fp8BlockLinear::concat(&[]).map(|_| ())),
    ]
}

// ---------------------------------------------------------------------------------------------
// config.json / quantization_config
// ---------------------------------------------------------------------------------------------

fn qc_with(field: &str, v: Value) -> Value {
    let mut q = fp8_quant_config(&[]);
    q[field] = v;
    q
}

fn parse_qc(q: Value) -> Result<()> {
    QuantizationConfig::from_json(&q).map(|_| ())
}

const UP: &str = "model.layers.0.mlp.up_proj";

/// A one-module FP8 checkpoint (`UP`, [256, 384]) with `config`, written raw so that config
/// and tensors can contradict each other.
fn ckpt_with_config(config: Value, fp8: bool) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let w = test_weight(256, 384, 1);
    let tensors = if fp8 {
        let (q, s) = quantize_weight(&w)?;
        vec![(format!("{UP}.weight"), q), (format!("{UP}.weight_scale_inv"), s)]
    } else {
        vec![(format!("{UP}.weight"), w.to_dtype(DType::BF16)?)]
    };
    write_raw_checkpoint(dir.path(), tensors, &config, 1)?;
    Ok(dir)
}

fn open(dir: &Path) -> Result<()> {
    Checkpoint::open(dir).map(|_| ())
}

fn config_cases() -> Vec<Case> {
    vec![
        case("C01", "quant_method missing", &["quantization_config.quant_method", "missing", "\"fp8\""], || {
            let mut q = fp8_quant_config(&[]);
            q.as_object_mut().unwrap().remove("quant_method");
            parse_qc(q)
        }),
        case("C02", "quant_method \"bitsandbytes\"", &["quant_method", "\"bitsandbytes\"", "not supported"], || {
            parse_qc(qc_with("quant_method", json!("bitsandbytes")))
        }),
        case("C03", "quant_method is a number", &["quant_method", "must be a string", "8"], || {
            parse_qc(qc_with("quant_method", json!(8)))
        }),
        case("C04", "weight_block_size [128, 64]", &["weight_block_size", "[128,64]", "[128, 128]"], || {
            parse_qc(qc_with("weight_block_size", json!([128, 64])))
        }),
        case(
            "C05",
            "weight_block_size [-128, 128]",
            &["weight_block_size", "[-128,128]", "non-negative integers"],
            || parse_qc(qc_with("weight_block_size", json!([-128, 128]))),
        ),
        case("C06", "weight_block_size [128.5, 128]", &["weight_block_size", "128.5"], || {
            parse_qc(qc_with("weight_block_size", json!([128.5, 128])))
        }),
        case(
            "C07",
            "weight_block_size missing (per-tensor FP8)",
            &["weight_block_size", "missing", "per-tensor"],
            || {
                let mut q = fp8_quant_config(&[]);
                q.as_object_mut().unwrap().remove("weight_block_size");
                parse_qc(q)
            },
        ),
        case("C08", "fmt \"E4M3\" (case matters)", &["quantization_config.fmt", "\"E4M3\""], || {
            parse_qc(qc_with("fmt", json!("E4M3")))
        }),
        case("C09", "modules_to_not_convert [\"\"]", &["modules_to_not_convert", "non-empty", "\"\""], || {
            parse_qc(qc_with("modules_to_not_convert", json!([""])))
        }),
        case("C10", "ignored_layers is a string", &["ignored_layers", "list", "\"lm_head\""], || {
            parse_qc(qc_with("ignored_layers", json!("lm_head")))
        }),
        case("C11", "quantization_config is a string", &["quantization_config", "JSON object", "\"fp8\""], || {
            QuantizationConfig::from_config_json(&json!({ "quantization_config": "fp8" })).map(|_| ())
        }),
        case("C12", "activation_scheme static, via open", &[CONFIG_FILE, "activation_scheme", "static"], || {
            let d = ckpt_with_config(
                json!({ "quantization_config": qc_with("activation_scheme", json!("static")) }),
                true,
            )?;
            open(d.path())
        }),
        case("C13", "config.json is an array", &[CONFIG_FILE, "JSON object"], || {
            let d = ckpt_with_config(json!([1, 2]), false)?;
            open(d.path())
        }),
        case("C14", "config.json is not JSON", &[CONFIG_FILE, "not valid JSON", "line 1"], || {
            let d = ckpt_with_config(json!({}), false)?;
            std::fs::write(d.path().join(CONFIG_FILE), "{\"quantization_config\": ")?;
            open(d.path())
        }),
        case("C15", "config.json missing", &[CONFIG_FILE, "missing"], || {
            let d = ckpt_with_config(json!({}), false)?;
            std::fs::remove_file(d.path().join(CONFIG_FILE))?;
            open(d.path())
        }),
        case(
            "C16",
            "FP8 tensors but no quantization_config",
            &["up_proj.weight", SINGLE_FILE, "F8_E4M3", CONFIG_FILE, "no quantization_config"],
            || open(ckpt_with_config(json!({ "architectures": ["X"] }), true)?.path()),
        ),
        case(
            "C17",
            "FP8 module excluded by modules_to_not_convert",
            &["up_proj.weight", "excluded", "\"mlp\"", CONFIG_FILE],
            || open(ckpt_with_config(json!({ "quantization_config": fp8_quant_config(&["mlp"]) }), true)?.path()),
        ),
        case(
            "C18",
            "quantized config, FP8 weight without weight_scale_inv",
            &["up_proj.weight", SINGLE_FILE, "up_proj.weight_scale_inv is missing"],
            || {
                let dir = tempfile::tempdir()?;
                let (q, _) = quantize_weight(&test_weight(256, 384, 1))?;
                let cfg = json!({ "quantization_config": fp8_quant_config(&[]) });
                write_raw_checkpoint(dir.path(), vec![(format!("{UP}.weight"), q)], &cfg, 1)?;
                open(dir.path())
            },
        ),
        case(
            "C19",
            "weight_scale_inv next to a BF16 weight",
            &["up_proj.weight", "stored as BF16", "weight_scale_inv", "expected F8_E4M3"],
            || {
                let dir = tempfile::tempdir()?;
                let w = test_weight(256, 384, 1);
                let (_, s) = quantize_weight(&w)?;
                let cfg = json!({ "quantization_config": fp8_quant_config(&[]) });
                let t = vec![(format!("{UP}.weight"), w.to_dtype(DType::BF16)?), (format!("{UP}.weight_scale_inv"), s)];
                write_raw_checkpoint(dir.path(), t, &cfg, 1)?;
                open(dir.path())
            },
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// safetensors files
// ---------------------------------------------------------------------------------------------

/// A safetensors file from a header object and a data section.
fn st_bytes(header: &Value, data: &[u8]) -> Vec<u8> {
    let h = serde_json::to_vec(header).expect("json");
    let mut v = (h.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(&h);
    v.extend_from_slice(data);
    v
}

/// A checkpoint directory whose `model.safetensors` is `bytes` (unquantized config).
fn ckpt_with_file(bytes: &[u8]) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(CONFIG_FILE), "{\"architectures\": [\"X\"]}")?;
    std::fs::write(dir.path().join(SINGLE_FILE), bytes)?;
    Ok(dir)
}

fn open_bytes(bytes: &[u8]) -> Result<()> {
    open(ckpt_with_file(bytes)?.path())
}

fn open_header(header: Value, data: &[u8]) -> Result<()> {
    open_bytes(&st_bytes(&header, data))
}

fn one(dtype: &str, shape: Value, offsets: Value) -> Value {
    json!({ "a": { "dtype": dtype, "shape": shape, "data_offsets": offsets } })
}

/// A valid FP8 checkpoint (`UP` [256, 384], F32 scales) whose scale tensor is replaced.
fn fp8_ckpt_with_scale(scale: Tensor) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let (q, _) = quantize_weight(&test_weight(256, 384, 1))?;
    let cfg = json!({ "quantization_config": fp8_quant_config(&[]) });
    write_raw_checkpoint(
        dir.path(),
        vec![(format!("{UP}.weight"), q), (format!("{UP}.weight_scale_inv"), scale)],
        &cfg,
        1,
    )?;
    Ok(dir)
}

fn load_up(dir: &Path) -> Result<()> {
    Checkpoint::open(dir)?.load_fp8_linear(UP, &Device::Cpu, false).map(|_| ())
}

fn good_ckpt() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let cfg = fp8_quant_config(&[]);
    write_fp8_checkpoint(
        dir.path(),
        &[(&format!("{UP}.weight"), test_weight(256, 384, 1))],
        Some(&cfg),
        1,
        DType::F32,
    )?;
    Ok(dir)
}

fn safetensors_cases() -> Vec<Case> {
    vec![
        case("S01", "5-byte file", &[SINGLE_FILE, "truncated", "5 bytes"], || open_bytes(&[8, 0, 0, 0, 0])),
        case(
            "S02",
            "header length 1000 in a 12-byte file",
            &[SINGLE_FILE, "header length 1000", "larger than the file", "at most 4"],
            || {
                let mut b = 1000u64.to_le_bytes().to_vec();
                b.extend_from_slice(b"{}  ");
                open_bytes(&b)
            },
        ),
        case(
            "S03",
            "header length 2^40",
            &[SINGLE_FILE, "header length 1099511627776", "100000000-byte limit"],
            || {
                let mut b = (1u64 << 40).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                open_bytes(&b)
            },
        ),
        case("S04", "header length u64::MAX", &[SINGLE_FILE, "18446744073709551615", "limit"], || {
            let mut b = u64::MAX.to_le_bytes().to_vec();
            b.extend_from_slice(b"{}");
            open_bytes(&b)
        }),
        case("S05", "header is not JSON", &[SINGLE_FILE, "not valid JSON"], || {
            let mut b = 5u64.to_le_bytes().to_vec();
            b.extend_from_slice(b"{abc}");
            open_bytes(&b)
        }),
        case("S06", "header is a JSON array", &[SINGLE_FILE, "must be a JSON object"], || {
            let mut b = 2u64.to_le_bytes().to_vec();
            b.extend_from_slice(b"[]");
            open_bytes(&b)
        }),
        case("S07", "unknown dtype F9", &[SINGLE_FILE, "tensor a", "unknown dtype \"F9\""], || {
            open_header(one("F9", json!([1]), json!([0, 1])), &[0])
        }),
        case("S08", "negative dimension", &[SINGLE_FILE, "tensor a", "invalid shape [-1]"], || {
            open_header(one("U8", json!([-1]), json!([0, 1])), &[0])
        }),
        case(
            "S09",
            "data_offsets past the end",
            &[SINGLE_FILE, "tensor a", "[0, 16]", "run past the end", "(8 bytes)"],
            || open_header(one("F32", json!([4]), json!([0, 16])), &[0; 8]),
        ),
        case("S10", "overlapping tensors", &[SINGLE_FILE, "tensor b", "starts at data offset 4", "expected 8"], || {
            let h = json!({
                "a": { "dtype": "F32", "shape": [2], "data_offsets": [0, 8] },
                "b": { "dtype": "F32", "shape": [2], "data_offsets": [4, 12] },
            });
            open_header(h, &[0; 12])
        }),
        case(
            "S11",
            "size does not match dtype x shape",
            &[SINGLE_FILE, "tensor a", "span 8 bytes", "F32 [3] needs 12 bytes"],
            || open_header(one("F32", json!([3]), json!([0, 8])), &[0; 8]),
        ),
        case("S12", "reversed data_offsets", &[SINGLE_FILE, "tensor a", "invalid data_offsets [8,0]"], || {
            open_header(one("F32", json!([0]), json!([8, 0])), &[0; 8])
        }),
        case(
            "S13",
            "trailing bytes after the data",
            &[SINGLE_FILE, "holds 8 bytes", "cover 4", "trailing bytes"],
            || open_header(one("F32", json!([1]), json!([0, 4])), &[0; 8]),
        ),
        case("S14", "file truncated inside the data", &[SINGLE_FILE, "up_proj.weight", "run past the end"], || {
            let d = good_ckpt()?;
            let f = d.path().join(SINGLE_FILE);
            let b = std::fs::read(&f)?;
            std::fs::write(&f, &b[..b.len() - 4])?;
            open(d.path())
        }),
        case(
            "S15",
            "shape whose element count overflows",
            &[SINGLE_FILE, "tensor a", "[4294967296, 4294967296, 2]", "overflows"],
            || open_header(one("U8", json!([4294967296u64, 4294967296u64, 2]), json!([0, 0])), &[]),
        ),
        case("S16", "tensor entry without dtype", &[SINGLE_FILE, "tensor a", "no dtype"], || {
            open_header(json!({ "a": { "shape": [1], "data_offsets": [0, 1] } }), &[0])
        }),
        case("S17", "header cut short in memory", &["mem.safetensors", "only 20 bytes were given"], || {
            let b = st_bytes(&one("U8", json!([1]), json!([0, 1])), &[0]);
            parse_safetensors_header(&b[..20], b.len() as u64, Path::new("mem.safetensors")).map(|_| ())
        }),
        case(
            "S18",
            "F8 weight with U8 scales",
            &["up_proj.weight_scale_inv", SINGLE_FILE, "U8", "F32, BF16 or F16"],
            || open(fp8_ckpt_with_scale(Tensor::zeros((2, 3), DType::U8, &Device::Cpu)?)?.path()),
        ),
        case(
            "S19",
            "F8 weight with [2, 2] scales",
            &["up_proj.weight_scale_inv", SINGLE_FILE, "[2, 2]", "expected [2, 3]"],
            || open(fp8_ckpt_with_scale(Tensor::ones((2, 2), DType::F32, &Device::Cpu)?)?.path()),
        ),
        case("S20", "NaN in stored scales", &["up_proj.weight_scale_inv", "block [1, 2]", "NaN"], || {
            let mut v = vec![1f32; 6];
            v[5] = f32::NAN;
            load_up(fp8_ckpt_with_scale(Tensor::from_vec(v, (2, 3), &Device::Cpu)?)?.path())
        }),
        case("S21", "negative stored scale (BF16)", &["up_proj.weight_scale_inv", "block [0, 1]", "scale -2"], || {
            let v = vec![1f32, -2.0, 1.0, 1.0, 1.0, 1.0];
            load_up(fp8_ckpt_with_scale(Tensor::from_vec(v, (2, 3), &Device::Cpu)?.to_dtype(DType::BF16)?)?.path())
        }),
        case("S22", "FP8 weight of rank 3", &["up_proj.weight", SINGLE_FILE, "[2, 128, 384]", "[out, in]"], || {
            let dir = tempfile::tempdir()?;
            let (q, s) = quantize_weight(&test_weight(256, 384, 1))?;
            let cfg = json!({ "quantization_config": fp8_quant_config(&[]) });
            let t = vec![(format!("{UP}.weight"), q.reshape((2, 128, 384))?), (format!("{UP}.weight_scale_inv"), s)];
            write_raw_checkpoint(dir.path(), t, &cfg, 1)?;
            open(dir.path())
        }),
        case(
            "S23",
            "FP8 weight read as a dense F32 tensor",
            &["up_proj.weight", SINGLE_FILE, "stored as F8_E4M3", "requested as F32"],
            || {
                let d = good_ckpt()?;
                let ck = Checkpoint::open(d.path())?;
                ck.var_builder(DType::F32, &Device::Cpu).get((256, 384), &format!("{UP}.weight")).map(|_| ())
            },
        ),
        case("S24", "layer loaded with the wrong dims", &["up_proj.weight", "[256, 384]", "[512, 384]"], || {
            let d = good_ckpt()?;
            let ck = Checkpoint::open(d.path())?;
            Fp8BlockLinear::load(ck.var_builder(DType::F32, &Device::Cpu).pp(UP), 384, 512, false).map(|_| ())
        }),
        case("S25", "tensor that does not exist", &["cannot find tensor", "model.nope.weight"], || {
            let d = good_ckpt()?;
            Checkpoint::open(d.path())?.load_tensor("model.nope.weight", &Device::Cpu).map(|_| ())
        }),
        case("S26", "__metadata__ is not an object", &[SINGLE_FILE, "__metadata__", "[1]"], || {
            open_header(json!({ "__metadata__": [1] }), &[])
        }),
        case(
            "S28",
            "__metadata__ with a non-string value",
            &[SINGLE_FILE, "__metadata__", "object of strings", "{\"format\":1}"],
            || open_header(json!({ "__metadata__": { "format": 1 } }), &[]),
        ),
        case(
            "S29",
            "empty tensor whose strides overflow",
            &[SINGLE_FILE, "tensor a", "[0, 4294967296, 4294967296]", "overflows"],
            || open_header(one("F32", json!([0, 4294967296u64, 4294967296u64]), json!([0, 0])), &[]),
        ),
        case("S30", "duplicate field in a tensor entry", &[SINGLE_FILE, "duplicate field `shape`"], || {
            let h = br#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1],"shape":[1]}}"#;
            let mut b = (h.len() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(h);
            b.push(0);
            open_bytes(&b)
        }),
        case("S27", "read_safetensors_header on a directory", &["cannot"], || {
            let d = tempfile::tempdir()?;
            read_safetensors_header(d.path()).map(|_| ())
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints: model.safetensors.index.json
// ---------------------------------------------------------------------------------------------

/// A 2-shard checkpoint (`UP` FP8 + `lm_head` F32), then `edit` applied to the index JSON.
fn sharded(edit: impl Fn(&mut Value)) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let cfg = fp8_quant_config(&["lm_head"]);
    let t = [(&*format!("{UP}.weight"), test_weight(256, 384, 1)), ("lm_head.weight", test_weight(16, 384, 2))];
    write_fp8_checkpoint(dir.path(), &t, Some(&cfg), 2, DType::F32)?;
    let ip = dir.path().join(INDEX_FILE);
    let mut index: Value = serde_json::from_slice(&std::fs::read(&ip)?).map_err(candle_core::Error::wrap)?;
    edit(&mut index);
    std::fs::write(&ip, serde_json::to_vec(&index).map_err(candle_core::Error::wrap)?)?;
    Ok(dir)
}

const SHARD2: &str = "model-00002-of-00002.safetensors";

fn index_cases() -> Vec<Case> {
    vec![
        case("I01", "index lists a shard that is missing", &["shard", SHARD2, "does not exist", INDEX_FILE], || {
            let d = sharded(|_| {})?;
            std::fs::remove_file(d.path().join(SHARD2))?;
            open(d.path())
        }),
        case(
            "I02",
            "index points at a shard name that is not there",
            &["model-00009-of-00009.safetensors", "does not exist", "1 tensors"],
            || open(sharded(|i| i["weight_map"]["lm_head.weight"] = json!("model-00009-of-00009.safetensors"))?.path()),
        ),
        case(
            "I03",
            "index maps a tensor no shard holds",
            &[INDEX_FILE, "model.ghost.weight", "no such tensor"],
            || open(sharded(|i| i["weight_map"]["model.ghost.weight"] = json!(SHARD2))?.path()),
        ),
        case(
            "I04",
            "index maps a tensor to the wrong shard",
            &[INDEX_FILE, "up_proj.weight_scale_inv", SHARD2, "stored in"],
            || open(sharded(|i| i["weight_map"][format!("{UP}.weight_scale_inv")] = json!(SHARD2))?.path()),
        ),
        case("I05", "shard name with ../", &[INDEX_FILE, "\"../x.safetensors\"", "not a file name"], || {
            open(sharded(|i| i["weight_map"]["lm_head.weight"] = json!("../x.safetensors"))?.path())
        }),
        case("I06", "absolute shard path", &[INDEX_FILE, "\"/etc/passwd\"", "not a file name"], || {
            open(sharded(|i| i["weight_map"]["lm_head.weight"] = json!("/etc/passwd"))?.path())
        }),
        case("I07", "shard name is a number", &[INDEX_FILE, "lm_head.weight", "must be a file name", "3"], || {
            open(sharded(|i| i["weight_map"]["lm_head.weight"] = json!(3))?.path())
        }),
        case("I08", "empty weight_map", &[INDEX_FILE, "weight_map is empty"], || {
            open(sharded(|i| i["weight_map"] = json!({}))?.path())
        }),
        case("I09", "index without weight_map", &[INDEX_FILE, "no \"weight_map\""], || {
            open(sharded(|i| *i = json!({ "metadata": {} }))?.path())
        }),
        case("I10", "index is not JSON", &[INDEX_FILE, "not valid JSON"], || {
            let d = sharded(|_| {})?;
            std::fs::write(d.path().join(INDEX_FILE), "{\"weight_map\": {")?;
            open(d.path())
        }),
        case("I11", "the same tensor in two shards", &["tensor a.weight", "s1.safetensors", "s2.safetensors"], || {
            let dir = tempfile::tempdir()?;
            std::fs::write(dir.path().join(CONFIG_FILE), "{}")?;
            let t = Tensor::ones((2, 2), DType::F32, &Device::Cpu)?;
            for s in ["s1", "s2"] {
                t.save_safetensors("a.weight", dir.path().join(format!("{s}.safetensors")))?;
            }
            let index = json!({ "weight_map": { "a.weight": "s1.safetensors", "b.weight": "s2.safetensors" } });
            std::fs::write(dir.path().join(INDEX_FILE), index.to_string())?;
            open(dir.path())
        }),
        case("I12", "directory without weights", &["no weights", SINGLE_FILE, INDEX_FILE], || {
            let dir = tempfile::tempdir()?;
            std::fs::write(dir.path().join(CONFIG_FILE), "{}")?;
            open(dir.path())
        }),
        case("I13", "checkpoint directory that does not exist", &["/nonexistent/ckpt", "does not exist"], || {
            open(Path::new("/nonexistent/ckpt"))
        }),
    ]
}

#[test]
fn matrix_gemm_operands() {
    run_matrix("gemm", gemm_cases());
}

#[test]
fn matrix_linear_and_quant() {
    run_matrix("linear", linear_cases());
}

#[test]
fn matrix_config() {
    run_matrix("config", config_cases());
}

#[test]
fn matrix_safetensors() {
    run_matrix("safetensors", safetensors_cases());
}

#[test]
fn matrix_index() {
    run_matrix("index", index_cases());
}

/// A tiny random decoder (2 layers) whose RoPE tables cover 64 positions.
fn short_model() -> Result<DecoderModel> {
    let cfg = DecoderConfig { num_hidden_layers: 2, max_position_embeddings: 64, ..DecoderConfig::tiny() };
    DecoderModel::random(&cfg, &Device::Cpu, 3, &ModelOptions::default())
}

fn ids(n: usize) -> Result<Tensor> {
    Tensor::new(&vec![65u32; n][..], &Device::Cpu)?.unsqueeze(0)
}

fn model_cases() -> Vec<Case> {
    vec![
        case("model-prompt-past-max", "a 65-token prompt on a model of 64 positions", &["65", "64"], || {
            short_model()?.forward(&ids(65)?, 0).map(drop)
        }),
        case(
            "model-offset-past-max",
            "60 cached + 5 new tokens on a model of 64 positions",
            &["65", "64", "60 cached"],
            || {
                let mut m = short_model()?;
                m.forward(&ids(60)?, 0)?;
                m.forward(&ids(5)?, 60).map(drop)
            },
        ),
        case("model-empty-prompt", "an empty input_ids", &["non-empty", "[1, 0]"], || {
            short_model()?.forward(&Tensor::zeros((1, 0), DType::U32, &Device::Cpu)?, 0).map(drop)
        }),
        case(
            "model-offset-not-cached",
            "seqlen_offset 7 on an empty KV cache",
            &["seqlen_offset 7", "0 positions"],
            || short_model()?.forward(&ids(3)?, 7).map(drop),
        ),
    ]
}

#[test]
fn matrix_model_inputs() {
    run_matrix("model", model_cases());
}

#[test]
fn matrix_size_and_ids() {
    let all: Vec<Case> =
        [gemm_cases(), linear_cases(), config_cases(), safetensors_cases(), index_cases(), model_cases()]
            .into_iter()
            .flatten()
            .collect();
    let mut ids: Vec<&str> = all.iter().map(|c| c.id).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate case ids");
    assert!(n >= 25, "the matrix must hold at least 25 cases, has {n}");
    assert!(all.iter().all(|c| !c.needles.is_empty() && !c.what.is_empty()));
    println!("bad-input matrix: {n} error cases");
}

// ---------------------------------------------------------------------------------------------
// Legal but degenerate inputs: a defined, correct result (never a silently wrong tensor)
// ---------------------------------------------------------------------------------------------

/// M = 0 and N = 0 give empty outputs of the right shape; the layer keeps leading dims.
#[test]
fn empty_m_and_n() -> Result<()> {
    let dev = Device::Cpu;
    let o = random_operands(0, 256, 384, 1, &dev)?;
    assert_eq!(fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?.dims(), &[0, 256]);
    let o = random_operands(3, 0, 384, 1, &dev)?;
    let y = fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?;
    assert_eq!((y.dims(), y.dtype()), (&[3, 0][..], DType::BF16));
    let y = linear()?.forward(&Tensor::zeros((2, 0, 256), DType::BF16, &dev)?)?;
    assert_eq!(y.dims(), &[2, 0, 256]);
    Ok(())
}

/// K % 128 != 0 (partial last K block) and N % 128 != 0 are computed correctly: every output
/// is the correctly rounded bf16 of the exact product but where f32 summation can cross a
/// rounding boundary (bounds derived in `fixtures::check_gemm_rounding`). A relative-error
/// bound could not tell a truncating store (relerr ≈ 3.3e-3) from a rounding one; this check
/// rejects it, and a wrong scale block, a skipped K block and a single promotion at the end,
/// on these very shapes (each where it changes anything).
#[test]
fn ragged_k_and_n_round_like_the_exact_product() -> Result<()> {
    for (m, n, k) in [(3, 200, 300), (1, 17, 129), (9, 130, 1), (4, 128, 127), (2, 257, 385)] {
        let o = random_operands(m, n, k, 5, &Device::Cpu)?;
        let host = HostGemm::from_operands(&o)?;
        let y = fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?;
        let r = check_gemm_tensor(&y, &host).unwrap_or_else(|e| panic!("m{m} n{n} k{k}: {e}"));
        println!("m{m} n{n} k{k}: {r:?}");
        for mutant in GemmMutant::ALL.into_iter().filter(|b| b.applies(n, k)) {
            let why = check_gemm_rounding(&contract_gemm(&host, Some(mutant)), &host)
                .expect_err(&format!("m{m} n{n} k{k}: {mutant:?} passed the rounding check"));
            println!("m{m} n{n} k{k}: {mutant:?} rejected: {why}");
        }
    }
    Ok(())
}

/// The deadline is real: a case that never returns fails its matrix within the limit, named,
/// while the cases around it still run (the hung thread is abandoned).
#[test]
fn a_hanging_case_fails_the_matrix_by_name() {
    let quick = |text: &'static str| move || -> Result<()> { Err(candle_core::Error::Msg(text.to_string())) };
    let cases = vec![
        case("H01", "returns an error at once", &["expected"], quick("expected failure")),
        case("H02", "never returns", &["never"], || loop {
            std::thread::park();
        }),
        case("H03", "returns an error after the hang", &["after"], quick("after the hang")),
    ];
    // 2 s: ample for the quick cases on a loaded machine, short enough for a test.
    let t0 = Instant::now();
    let err = catch_unwind(AssertUnwindSafe(|| run_matrix_with_limit("deadline", cases, Duration::from_secs(2))))
        .expect_err("a hanging case must fail the matrix");
    assert!(t0.elapsed() < Duration::from_secs(15), "the matrix waited {:?} for a hung case", t0.elapsed());
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("1 of 3 deadline cases failed") && msg.contains("H02") && msg.contains("HUNG"), "{msg}");
    assert!(!msg.contains("H01") && !msg.contains("H03"), "{msg}");
}

/// A NaN or Inf activation makes its own row NaN (visible) and leaves the other rows exact.
#[test]
fn nan_and_inf_activations_stay_in_their_row() -> Result<()> {
    let layer = linear()?;
    let dev = Device::Cpu;
    let x = fixtures::test_input(4, 256, 7);
    let clean = layer.forward(&x)?.to_vec2::<f32>()?;
    let mut v: Vec<f32> = x.flatten_all()?.to_vec1()?;
    v[256 + 10] = f32::NAN;
    v[2 * 256 + 200] = f32::INFINITY;
    let y = layer.forward(&Tensor::from_vec(v, (4, 256), &dev)?)?.to_vec2::<f32>()?;
    for (r, row) in y.iter().enumerate() {
        if r == 1 || r == 2 {
            assert!(row.iter().all(|v| v.is_nan()), "row {r} should be NaN: {:?}", &row[..4]);
        } else {
            assert_eq!(row, &clean[r], "row {r} changed");
        }
    }
    Ok(())
}

/// NaN scales passed straight to the GEMM (which does not re-check values, for speed)
/// poison exactly the affected outputs instead of being hidden.
#[test]
fn nan_scales_in_the_gemm_are_visible() -> Result<()> {
    let o = random_operands(4, 256, 256, 3, &Device::Cpu)?;
    let mut sw = o.sw_host.clone();
    sw[2] = f32::NAN; // N block 1, K block 0
    let swt = Tensor::from_vec(sw, (2, 2), &Device::Cpu)?;
    let y = fp8_block_matmul(&o.qa, &o.sa, &o.w, &swt)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    for row in &y {
        assert!(row[..128].iter().all(|v| v.is_finite()));
        assert!(row[128..].iter().all(|v| v.is_nan()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Fuzz seeds replayed through the fuzz targets' logic (a CI smoke run, not the long fuzz)
// ---------------------------------------------------------------------------------------------

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("dir entry").path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).expect("read seed"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

#[test]
fn fuzz_seeds_quant_config() {
    for (name, data) in seeds("quant_config") {
        catch_unwind(|| fuzz_logic::quant_config(&data)).unwrap_or_else(|_| panic!("seed {name} crashed"));
    }
}

#[test]
fn fuzz_seeds_safetensors_header() {
    for (name, data) in seeds("safetensors_header") {
        catch_unwind(|| fuzz_logic::safetensors_header(&data)).unwrap_or_else(|_| panic!("seed {name} crashed"));
    }
}

#[test]
fn fuzz_seeds_checkpoint_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, data) in seeds("checkpoint_open") {
        catch_unwind(|| fuzz_logic::checkpoint_open(&data, dir.path()))
            .unwrap_or_else(|_| panic!("seed {name} crashed"));
    }
}
