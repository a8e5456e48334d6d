//! Shared helpers of the GPU test files: the CUDA device or the reason there is none, the skip
//! macros, the usable providers, NaN poison, and the two accuracy judgements the GPU suites
//! share: [`check_rounding`] (a blocked-FP8 GEMM output against the exact product) and
//! [`LogitBounds`] (two runs of one decoder, with bounds derived from the arithmetic).
//!
//! A skipped test writes `SKIP <test>: <reason>` to the process's stderr directly (the test
//! harness does not capture it, so every run shows its skips; `scripts/gpu_run.sh` and CI count
//! them). With `CANDLE_FP8_REQUIRE_GPU=1` (set by the GPU run) a skip is a failure instead.
//!
//! Include it from a test file with
//! ```ignore
//! #[path = "common/gpu.rs"]
//! #[macro_use]
//! mod gpu;
//! ```
#![allow(dead_code)]

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::models::DecoderModel;
use candle_fp8::testing::device_caps;
use candle_fp8::testing::reference::{rounding_stats, RoundingStats};
use candle_fp8::{Backend, Fp8Options, Provider};
use std::io::Write;
use std::sync::OnceLock;

/// Every CUDA provider.
pub const PROVIDERS: [Provider; 3] = [Provider::Hopper, Provider::CublasLt, Provider::Dequant];

/// Environment variable that turns every skip into a failure (the GPU run sets it).
pub const REQUIRE_GPU_ENV: &str = "CANDLE_FP8_REQUIRE_GPU";

/// Reports a skipped test (or part of one): a failure under [`REQUIRE_GPU_ENV`], else a
/// `SKIP` line on the real stderr.
pub fn skip(what: &str, why: &str) {
    if std::env::var(REQUIRE_GPU_ENV).is_ok_and(|v| v.trim() == "1") {
        panic!("{what} would be skipped ({why}) but {REQUIRE_GPU_ENV}=1");
    }
    // One write of the whole line: the runner (libtest's stdout on the same file) may interleave
    // between separate writes, and scripts count these lines.
    let line = format!("SKIP {what}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The CUDA device, or the reason there is none.
pub fn gpu() -> std::result::Result<Device, String> {
    static DEV: OnceLock<std::result::Result<Device, String>> = OnceLock::new();
    DEV.get_or_init(|| {
        // cudarc panics when libcuda is missing: keep that panic out of the test output.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = std::panic::catch_unwind(|| Device::new_cuda(0));
        std::panic::set_hook(hook);
        match r {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(format!("no CUDA device: {e}")),
            Err(_) => Err("libcuda could not be loaded (no NVIDIA driver)".into()),
        }
    })
    .clone()
}

/// The device, or report the skip ([`skip`]) and return `Ok(())` from the test.
macro_rules! gpu_or_skip {
    ($name:expr) => {
        match $crate::gpu::gpu() {
            Ok(d) => d,
            Err(why) => {
                $crate::gpu::skip($name, &why);
                return Ok(());
            }
        }
    };
}

/// The device, if our sm_90a kernels can run on it; otherwise report the skip ([`skip`]) and
/// return `Ok(())` from the test.
macro_rules! kernels_device_or_skip {
    ($name:expr) => {{
        let dev = gpu_or_skip!($name);
        if !$crate::gpu::kernels_or_skip(&dev, $name) {
            return Ok(());
        }
        dev
    }};
}

/// Whether our sm_90a kernels can run on `dev`; reports the skip when not.
pub fn kernels_or_skip(dev: &Device, test: &str) -> bool {
    match candle_fp8::kernels::unavailable_reason(dev) {
        None => true,
        Some(why) => {
            skip(test, &why);
            false
        }
    }
}

/// Providers usable on `dev`, reporting why the others are skipped. `CANDLE_FP8_TEST_PROVIDERS`
/// (comma-separated provider names) restricts the list on purpose, e.g. to run only our
/// kernels under compute-sanitizer's racecheck (cuBLASLt's own kernels report hazards of their
/// own); providers left out that way are not skips.
pub fn usable(dev: &Device, test: &str) -> Result<Vec<Provider>> {
    let caps = device_caps(dev)?;
    let only: Option<Vec<String>> = std::env::var("CANDLE_FP8_TEST_PROVIDERS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect());
    let providers: Vec<Provider> = PROVIDERS
        .into_iter()
        .filter(|p| match &only {
            Some(names) => names.contains(&p.to_string()),
            None => true,
        })
        .filter(|p| match caps.unusable_reason(*p) {
            None => true,
            Some(why) => {
                skip(&format!("{test} [{p}]"), &why);
                false
            }
        })
        .collect();
    if providers.is_empty() {
        // A test whose provider loop runs zero times must not pass silently.
        skip(test, "no provider left to test (none usable, or CANDLE_FP8_TEST_PROVIDERS names none)");
    }
    Ok(providers)
}

/// Fills the device's allocator pool with NaNs (bf16 and f32) of at least `elems` elements
/// and frees them, so that the next output allocation most likely reuses poisoned memory.
pub fn poison(dev: &Device, elems: usize) -> Result<()> {
    let a = Tensor::full(f32::NAN, elems, dev)?;
    let b = Tensor::full(half::bf16::NAN, elems, dev)?;
    dev.synchronize()?;
    drop((a, b));
    Ok(())
}

// ---- A blocked-FP8 GEMM output against the exact product ------------------------------------

/// Largest expected share of a blocked-FP8 kernel's outputs that differ from the correctly
/// rounded bf16 value of the exact product (the contract's sum in f64,
/// `testing::reference::naive_matmul_f64`). Derivation, with `d` the kernel's error before its
/// one rounding to bf16: an exact value sits at a uniform position in its bf16 cell, so `d`
/// moves it across a rounding midpoint with probability `|d| / ulp`; the share off is
/// `E[|d| / ulp]`, and the mean signed error in ulps is `E[d / ulp]` (the rounding itself is
/// unbiased). With `|e| / ulp` between 2^7 and 2^8 (mean 2^7 / ln 2 ≈ 185 over a binade):
/// - the f32 part of the contract (each 128-K partial times its two scales, summed over the
///   `kb` K blocks) adds a random walk of `kb + 2` roundings of at most 2^-24 of the running sum:
///   `|d| / |e|` ≈ √(kb + 2) · 2^-25, under 0.1 % of the outputs even at `kb` = 200 (K = 25600);
///   K splits only reorder these f32 sums;
/// - inside a K block the Hopper tensor core keeps about 14 bits while it accumulates the 128
///   e4m3 products (DeepSeek-V3 §3.3.2, and `examples/gemm_error.rs`: cuBLASLt alike): each
///   product is aligned to the largest in flight (≈ 5 standard deviations σ of a product) and
///   loses up to 2^-13 of it, so a block's partial carries a random walk of 128 such losses,
///   √128 · 2^-13 · 5σ / √3 ≈ 2^-8 σ, against a partial of √128 σ: `|d| / |e|` ≈ 2^-11.5 (the
///   blocks' errors add like their partials, with random signs). Share off ≈ 0.8 · 2^-11.5 · 185
///   ≈ 5 %, 10 % if the tensor core keeps one bit fewer than "about 14".
///
/// The bound is that 10 %, rounded up to 12 %. A final conversion that truncates instead of
/// rounding to nearest-even puts ~50 % of the outputs off; a scale or promotion error, more.
pub const OFF_ROUNDED_MAX: f64 = 0.12;

/// Systematic mean error (in bf16 ulps) allowed on top of the sampling noise: the tensor core's
/// truncations pull each partial towards zero, which cancels over outputs of both signs (the
/// test operands are symmetric); a biased rounding (e.g. always up) shows as ≥ 0.25 ulp.
pub const MEAN_ULP_MAX: f64 = 0.02;

/// Judges a blocked-FP8 kernel's bf16 output `got` (widened to f32) against the exact product
/// `exact` (f64, same order), with [`OFF_ROUNDED_MAX`] and [`MEAN_ULP_MAX`] plus four standard
/// errors of the sample (`n` outputs: a binomial share, and a mean of errors whose spread is
/// their rms). For the hopper and cublaslt providers (the dequant provider rounds its operands
/// to bf16 before a bf16 GEMM: another contract, judged by its relative error only).
pub fn check_rounding(what: &str, got: &[f32], exact: &[f64]) -> Result<RoundingStats> {
    let s = rounding_stats(got, exact)?;
    let n = got.len() as f64;
    let p = OFF_ROUNDED_MAX;
    let off_max = p + 4.0 * (p * (1.0 - p) / n).sqrt();
    let mean_max = MEAN_ULP_MAX + 4.0 * s.rms_ulp / n.sqrt();
    assert!(
        s.off_rounded <= off_max,
        "{what}: {:.2} % of {n} outputs are off the correctly rounded bf16 value (at most {:.2} %): {s:?}",
        100.0 * s.off_rounded,
        100.0 * off_max
    );
    assert!(
        s.mean_ulp.abs() <= mean_max,
        "{what}: mean error {:.4} ulp over {n} outputs (at most ±{mean_max:.4}): {s:?}",
        s.mean_ulp
    );
    Ok(s)
}

/// Whether `p`'s output follows the blocked-FP8 rounding contract that [`check_rounding`]
/// judges.
pub fn rounds_like_the_contract(p: Provider) -> bool {
    matches!(p, Provider::Hopper | Provider::CublasLt)
}

// ---- Two runs of one decoder -----------------------------------------------------------------

/// Last-position logits per step, `[steps][vocab]`.
pub type Logits = Vec<Vec<f32>>;

/// Greedy decoding of `test` over `prompt` then `steps - 1` generated tokens, every model of
/// `others` teacher-forced with the same tokens (so a divergence cannot cascade into unrelated
/// comparisons): the tokens fed after the prompt, `test`'s logits and each other model's, per
/// step. Every model runs the same incremental decode (prefill, then one position per step).
pub fn teacher_forced(
    test: &mut DecoderModel,
    others: &mut [&mut DecoderModel],
    prompt: &[u32],
    steps: usize,
) -> Result<(Vec<u32>, Logits, Vec<Logits>)> {
    test.clear_kv_cache();
    for m in others.iter_mut() {
        m.clear_kv_cache();
    }
    let mut next: Vec<u32> = prompt.to_vec();
    let (mut pos, mut tokens, mut ours) = (0, Vec::new(), Vec::new());
    let mut theirs: Vec<Logits> = vec![Vec::new(); others.len()];
    for _ in 0..steps {
        let ids = Tensor::new(next.as_slice(), test.device())?.unsqueeze(0)?;
        let a = test.forward(&ids, pos)?.squeeze(0)?.to_vec1::<f32>()?;
        for (m, out) in others.iter_mut().zip(theirs.iter_mut()) {
            let ids = Tensor::new(next.as_slice(), m.device())?.unsqueeze(0)?;
            out.push(m.forward(&ids, pos)?.squeeze(0)?.to_vec1::<f32>()?);
        }
        pos += next.len();
        let t = argmax(&a);
        tokens.push(t);
        ours.push(a);
        next = vec![t];
    }
    Ok((tokens, ours, theirs))
}

/// First index of the largest value (NaN never wins).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// How two runs' logits differ, position by position.
#[derive(Debug, Clone, Copy)]
pub struct LogitDiff {
    /// Positions compared.
    pub steps: usize,
    /// Positions with the same argmax.
    pub top1_agree: usize,
    /// RMS, mean and largest |Δlogit| over every position and token.
    pub rms: f64,
    pub mean_abs: f64,
    pub max_abs: f64,
    /// RMS of the second run's logits (the scale to read the others against).
    pub ref_rms: f64,
    /// Non-finite logits in either run.
    pub non_finite: usize,
}

impl LogitDiff {
    /// `a` against `b` (same shapes).
    pub fn of(a: &Logits, b: &Logits) -> LogitDiff {
        assert_eq!(a.len(), b.len(), "runs of different lengths");
        let (mut sq, mut abs, mut max, mut rsq, mut n, mut agree, mut bad) = (0f64, 0f64, 0f64, 0f64, 0usize, 0, 0);
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.len(), y.len(), "logits of different widths");
            agree += (argmax(x) == argmax(y)) as usize;
            for (&p, &q) in x.iter().zip(y) {
                if !(p.is_finite() && q.is_finite()) {
                    bad += 1;
                    continue;
                }
                let d = (p as f64 - q as f64).abs();
                sq += d * d;
                abs += d;
                max = max.max(d);
                rsq += (q as f64) * (q as f64);
                n += 1;
            }
        }
        let n = n.max(1) as f64;
        LogitDiff {
            steps: a.len(),
            top1_agree: agree,
            rms: (sq / n).sqrt(),
            mean_abs: abs / n,
            max_abs: max,
            ref_rms: (rsq / n).sqrt(),
            non_finite: bad,
        }
    }

    /// Share of positions with the same argmax.
    pub fn agreement(&self) -> f64 {
        self.top1_agree as f64 / self.steps.max(1) as f64
    }
}

/// Magnitudes of a decoder that its logits' rounding error scales with, read from its
/// checkpoint: the logit of token `j` is `r_j · x` with `r_j` the lm_head row and `x` the final
/// RMSNorm's output (unit RMS times the norm weight `w`).
#[derive(Debug, Clone, Copy)]
pub struct LogitScales {
    /// `sqrt(mean_j |r_j|²)` and `max_j |r_j|`.
    pub row_rms: f64,
    pub row_max: f64,
    /// `max_i |w_i|`: bounds the RMS of `x`.
    pub norm_max: f64,
    /// bf16 roundings from the embedding to the logits (see [`LogitScales::of`]).
    pub roundings: usize,
}

impl LogitScales {
    /// From the checkpoint in `dir` (`lm_head.weight`, else the tied embedding, and
    /// `model.norm.weight`) for `layers` decoder layers. A bf16 decode counts 16 roundings of the
    /// activations per layer on its longest path — the sum and the output of the input norm,
    /// the q/k/v GEMM's output, q/k RMSNorm, its weight and RoPE, attention (scores,
    /// probabilities, output), the o GEMM's output, the residual add, the post-attention norm,
    /// the gate/up GEMM's output, SiLU, the product, the down GEMM's output — and 3 after the
    /// last layer (the last residual add, the final norm, the lm_head's output).
    pub fn of(dir: &std::path::Path, layers: usize) -> Result<LogitScales> {
        let ck = candle_fp8::checkpoint::Checkpoint::open(dir)?;
        let head =
            if ck.tensor_info("lm_head.weight").is_some() { "lm_head.weight" } else { "model.embed_tokens.weight" };
        let r = ck.load_tensor(head, &Device::Cpu)?.to_dtype(DType::F32)?;
        let norms = r.sqr()?.sum(1)?.sqrt()?.to_vec1::<f32>()?;
        let row_rms = (norms.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / norms.len() as f64).sqrt();
        let row_max = norms.iter().fold(0f64, |a, &v| a.max(v as f64));
        let w = ck.load_tensor("model.norm.weight", &Device::Cpu)?.to_dtype(DType::F32)?;
        let norm_max = w.abs()?.max(0)?.to_scalar::<f32>()? as f64;
        Ok(LogitScales { row_rms, row_max, norm_max, roundings: 16 * layers + 3 })
    }

    /// Relative RMS error of `x` from the bf16 roundings: each rounding to nearest errs by at
    /// most 2^-8 of its value, the roundings are independent, and each reaches `x` with a gain
    /// of at most 1 (a branch's output joins a residual stream at least as large, an RMSNorm
    /// divides scale errors out): a random walk, √roundings · 2^-8.
    pub fn bf16_relative(&self) -> f64 {
        (self.roundings as f64).sqrt() * 2f64.powi(-8)
    }

    /// RMS over tokens of the logit error that a relative error ε of `x` causes, its direction
    /// unrelated to the lm_head rows: `r_j · Δx` has variance `|r_j|² |Δx|² / H` and
    /// `|Δx| / √H = ε · rms(x) ≤ ε · max|w|`.
    pub fn bf16_rms(&self) -> f64 {
        self.bf16_relative() * self.row_rms * self.norm_max
    }

    /// The largest logit error from the same: each `r_j · Δx` is a sum over H terms (close to
    /// normal), so none of ≤ 10^5 compared logits exceeds 6 of its standard deviations
    /// `ε · |r_j| · max|w|` (probability ~2·10^-9 each).
    pub fn bf16_max(&self) -> f64 {
        6.0 * self.bf16_relative() * self.row_max * self.norm_max
    }
}

/// What the arithmetic allows between two runs A and B of one decoder's weights on the same
/// tokens. Each run is the exact function of its weights (the dense f32 model, activations not
/// quantized) plus its own FP8 activation-quantization noise (runs with FP8 linears) plus its
/// own bf16 rounding error (runs on CUDA, bf16 activations). The quantization noise of a run is
/// the same e4m3 rounding of statistically the same activations in every run — its size is
/// measured once, on the CPU, as the f32 reference (`to_reference()`, FP8 operands, f32
/// GEMMs) against the dense f32 model (`to_dense()`): `noise`. Then by Minkowski's inequality
/// (no independence assumed) `rms(A − B) ≤ fp8_runs · rms(noise) + cuda_runs · bf16_rms`; for the
/// largest difference `|A − B| ≤ |A's| + |B's|`, where another sample's largest noise exceeds
/// the measured one's by more than 25 % with negligible probability (the spread of a maximum of
/// 10^4–10^5 near-normal values is ~6 % of it).
#[derive(Debug, Clone, Copy)]
pub struct LogitBounds {
    pub rms: f64,
    pub max: f64,
}

impl LogitBounds {
    /// The bounds for `fp8_runs` runs (of A and B) with FP8 linears and `cuda_runs` runs with
    /// bf16 activations on CUDA; `noise` = the CPU reference against the CPU dense model over the
    /// same positions.
    pub fn new(scales: &LogitScales, noise: &LogitDiff, fp8_runs: usize, cuda_runs: usize) -> LogitBounds {
        let (f, c) = (fp8_runs as f64, cuda_runs as f64);
        LogitBounds {
            rms: f * noise.rms + c * scales.bf16_rms(),
            max: f * 1.25 * noise.max_abs + c * scales.bf16_max(),
        }
    }

    /// Asserts `d` within the bounds: its RMS (and so its mean |Δ|, which never exceeds it) and
    /// its largest difference; no non-finite logit.
    pub fn check(&self, what: &str, d: &LogitDiff) {
        println!(
            "{what}: top-1 {}/{}, |Δlogit| rms {:.4} (bound {:.4}), mean {:.4}, max {:.4} (bound {:.4}); logit rms {:.3}",
            d.top1_agree, d.steps, d.rms, self.rms, d.mean_abs, d.max_abs, self.max, d.ref_rms
        );
        assert_eq!(d.non_finite, 0, "{what}: non-finite logits");
        assert!(d.rms <= self.rms, "{what}: |Δlogit| rms {} exceeds the bound {} ({d:?})", d.rms, self.rms);
        assert!(d.max_abs <= self.max, "{what}: max |Δlogit| {} exceeds the bound {} ({d:?})", d.max_abs, self.max);
    }
}

/// The GEMM provider every FP8 layer of a CUDA model must run on: the one `CANDLE_FP8_BACKEND`
/// forces, else (automatic choice) our kernels wherever they can run.
pub fn expected_provider(dev: &Device) -> Result<Provider> {
    Ok(match Fp8Options::from_env()?.backend {
        Backend::Force(p) => p,
        Backend::Auto => match device_caps(dev)?.unusable_reason(Provider::Hopper) {
            None => Provider::Hopper,
            Some(_) if device_caps(dev)?.unusable_reason(Provider::CublasLt).is_none() => Provider::CublasLt,
            Some(_) => Provider::Dequant,
        },
    })
}

/// Asserts that every FP8 layer of `model` runs on [`expected_provider`] (our kernels on sm_90
/// unless a backend is forced), so a silent fallback cannot pass for our kernels.
pub fn assert_providers(what: &str, model: &DecoderModel) -> Result<()> {
    let want = expected_provider(model.device())?;
    let got = model.fp8_providers()?;
    assert!(!got.is_empty(), "{what}: the model has no FP8 layer");
    for (layer, p) in &got {
        assert_eq!(*p, want, "{what}: layer {layer} runs on {p}, expected {want}");
    }
    Ok(())
}
