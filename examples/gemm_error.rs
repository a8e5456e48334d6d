//! How far each FP8 provider's bf16 output is from the exact product, in units of the bf16 ulp.
//!
//! The numeric contract (docs/design.md) is `y = Σ_kb sa·sw·Σ_k qa·w`, rounded once to bf16. An
//! exact kernel differs from the correctly rounded value only where its f32 summation order
//! moves a sum across a bf16 rounding boundary (well under 1 % of outputs). Hopper's FP8 wgmma
//! keeps ~14 bits while it accumulates inside a K block (DeepSeek-V3 §3.3.2), so a kernel that
//! sums a whole 128-K block in the tensor core can be off by more; this tool measures by how
//! much, for every provider, on model-like operands (per-token / per-block amax scaling of
//! normal data), against an f64 reference computed here on the host.
//!
//! ```text
//! cargo run --release --features cuda --example gemm_error -- --shapes 1,4096,5120 100,2048,5120
//! ```
//!
//! Per shape and provider: the share of outputs that differ from the correctly rounded value,
//! the mean signed error (a bias shows as a mean far from 0), its rms and its maximum, all in
//! ulps of the exact value's bf16 binade.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_fp8::format::act_scales_view;
use candle_fp8::format::{act_scale_m_stride, num_blocks, weight_scale_shape};
use candle_fp8::ops::fp8_block_matmul_with;
use candle_fp8::quant::{quantize_activation_slice, quantize_weight_slice};
use candle_fp8::testing::reference::{naive_matmul_f64, rounding_stats};
use candle_fp8::testing::Rng;
use candle_fp8::{Backend, Fp8Options};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Shapes as M,N,K (K a multiple of 128).
    #[arg(long, num_args = 1.., default_values = ["1,4096,5120", "16,4096,5120", "100,2048,5120", "512,2048,4096", "1,5120,25600"])]
    shapes: Vec<String>,
    /// Providers to measure (`CANDLE_FP8_BACKEND` names).
    #[arg(long, num_args = 1.., default_values = ["hopper", "cublaslt"])]
    providers: Vec<String>,
    /// Seed of the random operands.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = Device::cuda_if_available(0)?;
    println!("device: {device:?}");
    println!("{:<18} {:<9} {:>10} {:>11} {:>9} {:>9}", "M,N,K", "provider", "≠ rounded", "mean (ulp)", "rms", "max");
    for spec in &args.shapes {
        let d: Vec<usize> = spec
            .split(',')
            .map(|t| t.trim().parse())
            .collect::<Result<_, _>>()
            .with_context(|| format!("shape {spec:?}"))?;
        let [m, n, k] = d[..] else { bail!("shape {spec:?}: expected M,N,K") };
        let kb = num_blocks(k);
        let mut rng = Rng::new(args.seed ^ (m * 31 + n * 7 + k) as u64);
        // Model-like operands: normal data through the crate's own quantizers (amax scaling).
        let x: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
        let wf: Vec<f32> = (0..n * k).map(|_| rng.normal()).collect();
        let (qa_h, sa_h) = quantize_activation_slice(&x, m, k);
        let (w_h, sw_h) = quantize_weight_slice(&wf, n, k);
        // The contract's sum before its one rounding.
        let exact = naive_matmul_f64(&qa_h, &sa_h, &w_h, &sw_h, m, n, k);
        let qa = Tensor::from_vec(qa_h, (m, k), &device)?;
        let sa = act_scales_view(Tensor::from_vec(sa_h, kb * act_scale_m_stride(m), &device)?, m, kb)?;
        let wq = Tensor::from_vec(w_h, (n, k), &device)?;
        let sw = Tensor::from_vec(sw_h, weight_scale_shape(n, k), &device)?;
        for p in &args.providers {
            let req = p.parse::<Backend>()?;
            if matches!(req, Backend::Auto) {
                bail!("name a provider, not auto");
            }
            let y = match fp8_block_matmul_with(&Fp8Options::with_backend(req), &qa, &sa, &wq, &sw) {
                Ok(y) => y,
                Err(e) => {
                    println!("{:<18} {:<9} skipped: {}", spec, p, e.to_string().lines().next().unwrap_or(""));
                    continue;
                }
            };
            let y: Vec<f32> = y.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            let r = rounding_stats(&y, &exact)?;
            println!(
                "{:<18} {:<9} {:>9.3}% {:>11.4} {:>9.4} {:>9.3}",
                spec,
                p,
                100.0 * r.off_rounded,
                r.mean_ulp,
                r.rms_ulp,
                r.max_ulp
            );
        }
    }
    Ok(())
}
