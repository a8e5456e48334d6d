//! How far each FP8 provider's bf16 output is from the exact product, in units of the bf16 ulp.
//!
//! The numeric contract (design.md §1) is `y = Σ_kb sa·sw·Σ_k qa·w`, rounded once to bf16. An
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
use candle_fp8::dispatch::{parse_backend, BackendRequest};
use candle_fp8::format::{act_scale_m_stride, e4m3_to_f32, f32_to_e4m3, num_blocks, weight_scale_shape, BLOCK, F8E4M3};
use candle_fp8::ops::fp8_block_matmul_with;
use candle_fp8::quant::act_scales_view;
use candle_fp8::reference::rounding_stats;
use candle_fp8::testing::Rng;
use clap::Parser;
use rayon::prelude::*;

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

/// Model-like operands: normal data, scaled per (row, 128-K block) so its amax maps to 448.
struct Operands {
    q: Vec<F8E4M3>,
    s: Vec<f32>, // [rows][kb]
}

fn quantize_rows(rows: usize, k: usize, block_rows: usize, rng: &mut Rng) -> Operands {
    let kb = num_blocks(k);
    let x: Vec<f32> = (0..rows * k).map(|_| rng.normal()).collect();
    let groups = rows.div_ceil(block_rows);
    let mut s = vec![0f32; groups * kb];
    for g in 0..groups {
        for b in 0..kb {
            let mut amax = 0f32;
            for r in g * block_rows..((g + 1) * block_rows).min(rows) {
                for c in b * BLOCK..(b + 1) * BLOCK {
                    amax = amax.max(x[r * k + c].abs());
                }
            }
            s[g * kb + b] = amax / 448.0;
        }
    }
    let q = (0..rows * k).map(|i| f32_to_e4m3(x[i] / s[(i / k / block_rows) * kb + (i % k) / BLOCK])).collect();
    Operands { q, s }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = Device::cuda_if_available(0)?;
    println!("device: {device:?}");
    println!(
        "{:<18} {:<9} {:>10} {:>11} {:>9} {:>9}",
        "M,N,K", "provider", "≠ rounded", "mean (ulp)", "rms", "max"
    );
    for spec in &args.shapes {
        let d: Vec<usize> = spec.split(',').map(|t| t.trim().parse()).collect::<Result<_, _>>().with_context(|| format!("shape {spec:?}"))?;
        let [m, n, k] = d[..] else { bail!("shape {spec:?}: expected M,N,K") };
        let kb = num_blocks(k);
        let mut rng = Rng::new(args.seed ^ (m * 31 + n * 7 + k) as u64);
        let a = quantize_rows(m, k, 1, &mut rng);
        let w = quantize_rows(n, k, BLOCK, &mut rng);
        // Exact products in f64 (the contract before its one rounding).
        let af: Vec<f64> = a.q.iter().map(|&c| e4m3_to_f32(c) as f64).collect();
        let wf: Vec<f64> = w.q.iter().map(|&c| e4m3_to_f32(c) as f64).collect();
        let exact: Vec<f64> = (0..m * n)
            .into_par_iter()
            .map(|i| {
                let (r, c) = (i / n, i % n);
                (0..kb)
                    .map(|b| {
                        let dot: f64 = (b * BLOCK..(b + 1) * BLOCK).map(|t| af[r * k + t] * wf[c * k + t]).sum();
                        dot * a.s[r * kb + b] as f64 * w.s[(c / BLOCK) * kb + b] as f64
                    })
                    .sum()
            })
            .collect();
        // Device operands in the crate's layouts (activation scales MN-major, padded).
        let mpad = act_scale_m_stride(m);
        let mut sa_mn = vec![0f32; kb * mpad];
        for r in 0..m {
            for b in 0..kb {
                sa_mn[b * mpad + r] = a.s[r * kb + b];
            }
        }
        let (nb, kb2) = weight_scale_shape(n, k);
        let qa = Tensor::from_vec(a.q.clone(), (m, k), &device)?;
        let sa = act_scales_view(Tensor::from_vec(sa_mn, kb * mpad, &device)?, m, kb)?;
        let wq = Tensor::from_vec(w.q.clone(), (n, k), &device)?;
        let sw = Tensor::from_vec(w.s[..nb * kb2].to_vec(), (nb, kb2), &device)?;
        for p in &args.providers {
            let req = parse_backend(p)?;
            if matches!(req, BackendRequest::Auto) {
                bail!("name a provider, not auto");
            }
            let y = match fp8_block_matmul_with(req, &qa, &sa, &wq, &sw) {
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
