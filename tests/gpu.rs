//! GPU acceptance suite (built only with the `cuda` feature). Without a usable CUDA device
//! every test reports `SKIP <test>: <reason>` on stderr (a failure under
//! `CANDLE_FP8_REQUIRE_GPU=1`, as `scripts/gpu_run.sh` runs it).
//!
//! Every CUDA provider (hopper, cublaslt, dequant) against the dequantized reference on fresh
//! random operands whose scales vary per token, per N block and per K block (log-spaced), with
//! the allocator poisoned (NaN) before each call so an unwritten output cannot pass:
//! `relerr ≤ 3e-3` (docs/design.md; DeepGEMM's `calc_diff` is at most `relerr²`, so it adds no
//! check). Where the exact product is cheap (the f64 loop of the contract), the blocked-FP8
//! providers' outputs are also judged output by output: share off the correctly rounded bf16
//! value and mean error in ulps (`gpu::check_rounding`, bounds derived there). Small shapes use
//! the CPU reference; large ones a GPU f32 reference (host-dequantized operands, candle's f32
//! cuBLAS GEMM with TF32 off), itself cross-checked against the CPU reference. Also: activation
//! quantization bit-exact against the CPU quantizer, the full linear bit-exact against
//! quantize-then-GEMM, the preallocated-output op, determinism (20 calls bitwise identical), and
//! the `CANDLE_FP8_BACKEND` override (in a child process: it sets the environment).
//!
//! `CANDLE_FP8_GPU_QUICK=1` runs a reduced grid (used under compute-sanitizer).
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{check_rounding, poison, rounds_like_the_contract, skip, usable, PROVIDERS};

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::{act_scale_m_stride, act_scales_view, e4m3_to_f32, num_blocks, BLOCK, F8E4M3};
use candle_fp8::testing::reference::{naive_matmul_f64, reference_matmul, rel_err, RoundingStats};
use candle_fp8::testing::{device_caps, random_operands, Operands, Rng};
use candle_fp8::{
    fp8_block_matmul, fp8_block_matmul_into, fp8_block_matmul_with, quantize_activation, Backend, Fp8BlockLinear,
    Fp8Options, Provider, BACKEND_ENV,
};
use rayon::prelude::*;

const MS: [usize; 28] = [
    1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 511, 512, 1000, 2048,
    4096,
];
const NS: [usize; 6] = [128, 256, 1024, 4096, 5120, 10240];
/// K values: whole 128-blocks, and partial last blocks (576 = SmolLM2's hidden size, 4.5 blocks;
/// 2112 = 16.5 blocks, a K split with a partial last split), which cuBLASLt does not take.
const KS: [usize; 7] = [128, 256, 576, 4096, 5120, 8192, 2112];
const QWEN: [(usize, usize); 4] = [(10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)];
const MAX_RELERR: f64 = 3e-3;
/// Above this many multiply-adds the GPU f32 reference replaces the CPU one.
const CPU_REF_MAX_MACS: usize = 1 << 32;
/// Up to this many multiply-adds the exact f64 product is computed too, for the rounding check.
const EXACT_MAX_MACS: usize = 1 << 30;

fn quick() -> bool {
    std::env::var("CANDLE_FP8_GPU_QUICK").is_ok_and(|v| v != "0" && !v.is_empty())
}

fn forced(p: Provider) -> Fp8Options {
    Fp8Options::with_backend(Backend::Force(p))
}

/// Operands with `m` rows taken from `op` (which has at least `m` rows), re-laid out so that
/// the scale column stride is `round_up(m, 4)`.
fn first_rows(op: &Operands, m: usize, k: usize, dev: &Device) -> Result<Operands> {
    let kb = num_blocks(k);
    let (mp0, mp) = (op.sa.stride()[1], act_scale_m_stride(m));
    let mut sa_host = vec![0f32; kb * mp];
    for g in 0..kb {
        sa_host[g * mp..g * mp + m].copy_from_slice(&op.sa_host[g * mp0..g * mp0 + m]);
    }
    let qa_host = op.qa_host[..m * k].to_vec();
    Ok(Operands {
        qa: Tensor::from_vec(qa_host.clone(), (m, k), dev)?,
        sa: act_scales_view(Tensor::from_vec(sa_host.clone(), kb * mp, dev)?, m, kb)?,
        w: op.w.clone(),
        sw: op.sw.clone(),
        qa_host,
        sa_host,
        w_host: op.w_host.clone(),
        sw_host: op.sw_host.clone(),
    })
}

/// GPU f32 reference: operands dequantized on the host (rayon), f32 GEMM on the GPU.
fn gpu_reference(op: &Operands, m: usize, n: usize, k: usize, dev: &Device) -> Result<Tensor> {
    let kb = num_blocks(k);
    let mp = act_scale_m_stride(m);
    let a: Vec<f32> = (0..m * k)
        .into_par_iter()
        .map(|i| e4m3_to_f32(op.qa_host[i]) * op.sa_host[((i % k) / BLOCK) * mp + i / k])
        .collect();
    let b: Vec<f32> = (0..n * k)
        .into_par_iter()
        .map(|i| e4m3_to_f32(op.w_host[i]) * op.sw_host[(i / k / BLOCK) * kb + (i % k) / BLOCK])
        .collect();
    let a = Tensor::from_vec(a, (m, k), dev)?;
    let b = Tensor::from_vec(b, (n, k), dev)?;
    a.matmul(&b.t()?)?.to_device(&Device::Cpu)
}

fn reference(op: &Operands, m: usize, n: usize, k: usize, dev: &Device) -> Result<Tensor> {
    if m * n * k <= CPU_REF_MAX_MACS {
        let cpu = |t: &Tensor| t.to_device(&Device::Cpu);
        reference_matmul(&cpu(&op.qa)?, &cpu(&op.sa)?, &cpu(&op.w)?, &cpu(&op.sw)?)
    } else {
        gpu_reference(op, m, n, k, dev)
    }
}

/// `relerr ≤ 3e-3` against the reference (NaN fails: `rel_err` is NaN then).
fn check(y: &Tensor, r: &Tensor, what: &str) -> Result<()> {
    assert_eq!(y.dtype(), DType::BF16, "{what}");
    assert_eq!(y.dims(), r.dims(), "{what}");
    let e = rel_err(&y.to_device(&Device::Cpu)?, r)?;
    assert!(e <= MAX_RELERR, "{what}: relerr {e:.3e} (max {MAX_RELERR:e})");
    Ok(())
}

/// The exact product of `op` (f64, the contract's sum before rounding).
fn exact(op: &Operands, m: usize, n: usize, k: usize) -> Vec<f64> {
    naive_matmul_f64(&op.qa_host, &op.sa_host, &op.w_host, &op.sw_host, m, n, k)
}

/// `y` widened to f32 on the host.
fn host_f32(y: &Tensor) -> Result<Vec<f32>> {
    y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

fn run_case(dev: &Device, providers: &[Provider], op: &Operands, m: usize, n: usize, k: usize) -> Result<()> {
    let r = reference(op, m, n, k, dev)?;
    let exact = (m * n * k <= EXACT_MAX_MACS).then(|| exact(op, m, n, k));
    // cuBLASLt's block scaling needs whole 128-wide K blocks: other K are not its shapes.
    for &p in providers.iter().filter(|&&p| p != Provider::CublasLt || k % 128 == 0) {
        poison(dev, m * n)?;
        let y = fp8_block_matmul_with(&forced(p), &op.qa, &op.sa, &op.w, &op.sw)?;
        let what = format!("{p} m={m} n={n} k={k}");
        check(&y, &r, &what)?;
        if let (Some(e), true) = (&exact, rounds_like_the_contract(p)) {
            check_rounding(&what, &host_f32(&y)?, e)?;
        }
    }
    Ok(())
}

#[test]
fn providers_match_reference_on_shape_grid() -> Result<()> {
    let dev = gpu_or_skip!("providers_match_reference_on_shape_grid");
    let providers = usable(&dev, "providers_match_reference_on_shape_grid")?;
    // Subsample the M × N × K cross product: every M meets two (N, K) pairs, and every N and
    // K value is met by many M values (rotation by index).
    let ms: Vec<usize> = if quick() { vec![1, 3, 4, 9, 64, 129, 257] } else { MS.to_vec() };
    let mut cases = Vec::new();
    for (i, &m) in ms.iter().enumerate() {
        for j in 0..2 {
            let n = NS[(i + 3 * j) % NS.len()];
            let k = KS[(2 * i + j) % KS.len()];
            if quick() && m * n * k > 1 << 30 {
                continue;
            }
            cases.push((m, n, k));
        }
    }
    // Group by (n, k) so the weight is generated once.
    cases.sort_by_key(|&(m, n, k)| (n, k, m));
    let mut last: Option<(usize, usize, Operands)> = None;
    for (idx, &(m, n, k)) in cases.iter().enumerate() {
        let m_max = cases.iter().filter(|c| (c.1, c.2) == (n, k)).map(|c| c.0).max().unwrap();
        if last.as_ref().map_or(true, |(ln, lk, _)| (*ln, *lk) != (n, k)) {
            last = Some((n, k, random_operands(m_max, n, k, 1000 + idx as u64, &dev)?));
        }
        let full = &last.as_ref().unwrap().2;
        let op = first_rows(full, m, k, &dev)?;
        run_case(&dev, &providers, &op, m, n, k)?;
        println!("ok m={m} n={n} k={k}");
    }
    Ok(())
}

#[test]
fn providers_match_reference_on_qwen3_32b_shapes() -> Result<()> {
    let dev = gpu_or_skip!("providers_match_reference_on_qwen3_32b_shapes");
    if quick() {
        skip("providers_match_reference_on_qwen3_32b_shapes", "CANDLE_FP8_GPU_QUICK (the reduced grid) is set");
        return Ok(());
    }
    let providers = usable(&dev, "providers_match_reference_on_qwen3_32b_shapes")?;
    for (i, &(n, k)) in QWEN.iter().enumerate() {
        let full = random_operands(2048, n, k, 7000 + i as u64, &dev)?;
        // 24 and 32: swap-AB 32-token tiles on the wide shapes; 48: small-M splits.
        for m in [1, 16, 24, 32, 48, 2048] {
            let op = first_rows(&full, m, k, &dev)?;
            run_case(&dev, &providers, &op, m, n, k)?;
            println!("ok qwen m={m} n={n} k={k}");
        }
    }
    Ok(())
}

#[test]
fn gpu_reference_agrees_with_cpu_reference() -> Result<()> {
    let dev = gpu_or_skip!("gpu_reference_agrees_with_cpu_reference");
    for (i, &(m, n, k)) in [(3, 256, 4096), (129, 1024, 5120), (64, 5120, 8192)].iter().enumerate() {
        let op = random_operands(m, n, k, 31 + i as u64, &dev)?;
        let g = gpu_reference(&op, m, n, k, &dev)?;
        let cpu = |t: &Tensor| t.to_device(&Device::Cpu);
        let c = reference_matmul(&cpu(&op.qa)?, &cpu(&op.sa)?, &cpu(&op.w)?, &cpu(&op.sw)?)?;
        let e = rel_err(&g, &c)?;
        // f32 accumulation order differs (≈ sqrt(K)·2⁻²⁴); TF32 would show up as ≈ 5e-4.
        assert!(e < 1e-4, "m={m} n={n} k={k}: GPU f32 reference vs CPU reference relerr {e:e}");
    }
    Ok(())
}

/// Rows of very different magnitudes, an all-zero row, and exact group maxima.
fn activation_data(m: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..m * k)
        .map(|i| {
            let r = i / k;
            if r == 1 {
                0.0
            } else {
                rng.normal() * 2f32.powi((r % 13) as i32 - 6)
            }
        })
        .collect()
}

#[test]
fn activation_quantization_is_bit_exact() -> Result<()> {
    let dev = kernels_device_or_skip!("activation_quantization_is_bit_exact");
    let ms: &[usize] = if quick() { &[1, 3, 8] } else { &[1, 2, 3, 4, 5, 8, 17, 129, 1000, 4096] };
    for &m in ms {
        // 200 and 576: a partial last group per row.
        for k in [128, 200, 576, 4096, 5120] {
            for dtype in [DType::F32, DType::BF16] {
                let x =
                    Tensor::from_vec(activation_data(m, k, (m * k) as u64), (m, k), &Device::Cpu)?.to_dtype(dtype)?;
                let (qc, sc) = quantize_activation(&x)?;
                let (qg, sg) = quantize_activation(&x.to_device(&dev)?)?;
                let what = format!("m={m} k={k} {dtype:?}");
                assert_eq!(qg.dims(), qc.dims(), "{what}");
                assert_eq!(sg.dims(), sc.dims(), "{what}");
                assert_eq!(sg.stride(), sc.stride(), "{what}: scale strides");
                let qc: Vec<u8> = qc.flatten_all()?.to_vec1::<F8E4M3>()?.iter().map(|v| v.to_bits()).collect();
                let qg: Vec<u8> = qg
                    .to_device(&Device::Cpu)?
                    .flatten_all()?
                    .to_vec1::<F8E4M3>()?
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                if let Some(i) = (0..qc.len()).find(|&i| qc[i] != qg[i]) {
                    panic!(
                        "{what}: q differs first at row {} col {}: cpu {:#04x} gpu {:#04x}",
                        i / k,
                        i % k,
                        qc[i],
                        qg[i]
                    );
                }
                let sc: Vec<u32> = sc.to_vec2::<f32>()?.concat().iter().map(|v| v.to_bits()).collect();
                let sg: Vec<u32> =
                    sg.to_device(&Device::Cpu)?.to_vec2::<f32>()?.concat().iter().map(|v| v.to_bits()).collect();
                assert_eq!(sc, sg, "{what}: scales differ");
            }
        }
    }
    Ok(())
}

#[test]
fn quantize_then_gemm_matches_cpu_pipeline() -> Result<()> {
    let dev = kernels_device_or_skip!("quantize_then_gemm_matches_cpu_pipeline");
    let providers = usable(&dev, "quantize_then_gemm_matches_cpu_pipeline")?;
    for (m, n, k) in [(1, 4096, 4096), (7, 1024, 5120), (300, 256, 8192)] {
        let x = Tensor::from_vec(activation_data(m, k, 5), (m, k), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let op = random_operands(1, n, k, 77, &Device::Cpu)?;
        let (qa, sa) = quantize_activation(&x)?;
        let r = reference_matmul(&qa, &sa, &op.w, &op.sw)?;
        let (qa, sa) = quantize_activation(&x.to_device(&dev)?)?;
        let (w, sw) = (op.w.to_device(&dev)?, op.sw.to_device(&dev)?);
        for &p in &providers {
            poison(&dev, m * n)?;
            let y = fp8_block_matmul_with(&forced(p), &qa, &sa, &w, &sw)?;
            check(&y, &r, &format!("pipeline {p} m={m} n={n} k={k}"))?;
        }
    }
    Ok(())
}

/// bf16 bits of a tensor, on the host.
fn bits(t: &Tensor) -> Result<Vec<u16>> {
    Ok(t.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<half::bf16>()?.iter().map(|v| v.to_bits()).collect())
}

#[test]
fn into_preallocated_output_equals_the_op() -> Result<()> {
    // Our kernels into a NaN-filled buffer and into rows 3.. of a bigger NaN-filled one (a view
    // with an offset): the allocating op's bits (every schedule family: swap-AB split, small-M
    // cluster split, split-K through the workspace, warp-specialized, persistent), the rows
    // around the view left as they were.
    let dev = kernels_device_or_skip!("into_preallocated_output_equals_the_op");
    let shapes: &[(usize, usize, usize)] =
        &[(1, 4096, 4096), (48, 4096, 4096), (1, 5120, 8192), (100, 1024, 2048), (129, 1024, 5120), (300, 4096, 512)];
    for &(m, n, k) in shapes {
        let op = random_operands(m, n, k, 7 + m as u64, &dev)?;
        let want = bits(&fp8_block_matmul_with(&forced(Provider::Hopper), &op.qa, &op.sa, &op.w, &op.sw)?)?;
        let out = Tensor::full(half::bf16::NAN, (m, n), &dev)?;
        fp8_block_matmul_into(&op.qa, &op.sa, &op.w, &op.sw, &out)?;
        assert!(bits(&out)? == want, "m={m} n={n} k={k}: into a fresh buffer differs from the op");
        let big = Tensor::full(half::bf16::NAN, (m + 5, n), &dev)?;
        fp8_block_matmul_into(&op.qa, &op.sa, &op.w, &op.sw, &big.narrow(0, 3, m)?)?;
        assert!(bits(&big.narrow(0, 3, m)?)? == want, "m={m} n={n} k={k}: into an offset view differs");
        let around = bits(&Tensor::cat(&[big.narrow(0, 0, 3)?, big.narrow(0, 3 + m, 2)?], 0)?)?;
        assert!(around.iter().all(|&b| half::bf16::from_bits(b).is_nan()), "m={m} n={n} k={k}: wrote outside the view");
    }
    Ok(())
}

#[test]
fn full_linear_equals_quantize_then_gemm() -> Result<()> {
    // `Fp8BlockLinear::forward` on bf16 input runs our quantizer and GEMM as two adjacent
    // launches; its bits must equal `quantize_activation` followed by `forward_quantized` for
    // every output mode of the decode tiles: no split (51200 x 5120, 1024 x 512), a 2-CTA
    // cluster sum (10240 x 5120, 4096 x 4096), the workspace (5120 x 8192) and stream-K (9-16
    // tokens on 51200 x 5120); ragged M, rows of very different magnitudes, an all-zero row, a
    // row of exact e4m3 rounding midpoints (scale 1: ties to even, subnormals included), and a
    // NaN in the last row (which must poison exactly that row, as the quantizer does).
    let dev = kernels_device_or_skip!("full_linear_equals_quantize_then_gemm");
    let shapes: &[(usize, usize)] = &[(51200, 5120), (1024, 512), (10240, 5120), (4096, 4096), (5120, 8192)];
    for &(n, k) in shapes {
        let op = random_operands(1, n, k, (n + k) as u64, &dev)?;
        let layer =
            Fp8BlockLinear::new(op.w.clone(), op.sw.clone(), None)?.with_backend(Backend::Force(Provider::Hopper));
        for m in [1, 2, 5, 8, 13] {
            for nan in [false, true] {
                let mut data = activation_data(m, k, (m * n) as u64);
                if m >= 2 {
                    // 448 first in every 128-block: scale exactly 1; the rest halfway between
                    // two e4m3 values (1.0 | 1.125, 1.125 | 1.25, 256 | 288, 288 | 320, 0 | 2^-9,
                    // 2^-9 | 2^-8), either sign.
                    let t = 2f32.powi(-10);
                    let mid = [448.0, 1.0625, -1.1875, 272.0, -304.0, t, -3.0 * t, 3.0 * t];
                    for (c, v) in data[..k].iter_mut().enumerate() {
                        *v = mid[c % mid.len()];
                    }
                }
                if nan {
                    data[(m - 1) * k + k / 2] = f32::NAN;
                }
                let x = Tensor::from_vec(data, (m, k), &Device::Cpu)?.to_dtype(DType::BF16)?.to_device(&dev)?;
                let (qa, sa) = quantize_activation(&x)?;
                let want = bits(&layer.forward_quantized(&qa, &sa)?)?;
                poison(&dev, 8 * m * n)?;
                let got = bits(&layer.forward(&x)?)?;
                let what = format!("m={m} n={n} k={k} nan={nan}");
                if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
                    panic!("{what}: differs first at row {} col {}: {:#06x} vs {:#06x}", i / n, i % n, got[i], want[i]);
                }
                let nan_rows: Vec<usize> = (0..m)
                    .filter(|r| got[r * n..(r + 1) * n].iter().any(|&b| half::bf16::from_bits(b).is_nan()))
                    .collect();
                assert_eq!(nan_rows, if nan { vec![m - 1] } else { vec![] }, "{what}: rows with NaN");
            }
        }
    }
    Ok(())
}

#[test]
fn repeated_calls_are_bitwise_identical() -> Result<()> {
    let dev = gpu_or_skip!("repeated_calls_are_bitwise_identical");
    let providers = usable(&dev, "repeated_calls_are_bitwise_identical")?;
    let shapes: &[(usize, usize, usize)] = if quick() {
        &[(1, 256, 512)]
    } else {
        &[(1, 4096, 4096), (16, 5120, 25600), (129, 1024, 5120), (2048, 5120, 8192)]
    };
    for &(m, n, k) in shapes {
        let op = random_operands(m, n, k, 99, &dev)?;
        for &p in &providers {
            let first = bits(&fp8_block_matmul_with(&forced(p), &op.qa, &op.sa, &op.w, &op.sw)?)?;
            for i in 1..20 {
                poison(&dev, m * n)?;
                let y = bits(&fp8_block_matmul_with(&forced(p), &op.qa, &op.sa, &op.w, &op.sw)?)?;
                assert!(first == y, "{p} m={m} n={n} k={k}: repetition {i} differs from the first result");
            }
        }
    }
    Ok(())
}

/// Our kernels land as close to the exact product as the contract allows
/// (`gpu::check_rounding`: the share of outputs off the correctly rounded bf16 value and the
/// mean signed error, against the f64 sum of the contract), one shape per schedule family, and
/// as close as cuBLASLt's blockwise FP8 on the same operands (the same Hopper tensor-core
/// accumulation inside a 128-K block, where only the order of the four 32-K wgmma steps and of
/// the promotion may differ): at most 10 % more outputs off the rounded value than cuBLASLt's,
/// plus four binomial standard errors of the difference, and a mean error within cuBLASLt's plus
/// four standard errors.
#[test]
fn outputs_round_as_close_to_exact_as_cublaslt() -> Result<()> {
    let dev = kernels_device_or_skip!("outputs_round_as_close_to_exact_as_cublaslt");
    let lt_ok = match device_caps(&dev)?.unusable_reason(Provider::CublasLt) {
        None => true,
        Some(why) => {
            skip("outputs_round_as_close_to_exact_as_cublaslt [cublaslt comparison]", &why);
            false
        }
    };
    // swap-AB (1, 16), small-M (100), persistent (300), stream-K (16 x 51200: three waves).
    for (m, n, k) in [(1, 1024, 5120), (16, 2048, 4096), (100, 1024, 2048), (300, 768, 2048), (16, 51200, 1024)] {
        let op = random_operands(m, n, k, (m * 7 + n) as u64, &dev)?;
        let exact = exact(&op, m, n, k);
        let what = |p: Provider| format!("{p} {m}x{n}x{k}");
        let stats = |p: Provider| -> Result<RoundingStats> {
            poison(&dev, m * n)?;
            let y = fp8_block_matmul_with(&forced(p), &op.qa, &op.sa, &op.w, &op.sw)?;
            check_rounding(&what(p), &host_f32(&y)?, &exact)
        };
        let ours = stats(Provider::Hopper)?;
        println!("{}: {ours:?}", what(Provider::Hopper));
        if lt_ok {
            let lt = stats(Provider::CublasLt)?;
            println!("{}: {lt:?}", what(Provider::CublasLt));
            let count = (m * n) as f64;
            let p = ours.off_rounded.max(lt.off_rounded);
            let se = (2.0 * p * (1.0 - p) / count).sqrt();
            assert!(
                ours.off_rounded <= 1.1 * lt.off_rounded + 4.0 * se,
                "{m}x{n}x{k}: {:.2} % off the rounded value vs cuBLASLt {:.2} %",
                100.0 * ours.off_rounded,
                100.0 * lt.off_rounded
            );
            let se = (ours.rms_ulp.powi(2) + lt.rms_ulp.powi(2)).sqrt() / count.sqrt();
            assert!(
                ours.mean_ulp.abs() <= lt.mean_ulp.abs() + 4.0 * se,
                "{m}x{n}x{k}: mean error {:.4} ulp vs cuBLASLt {:.4}",
                ours.mean_ulp,
                lt.mean_ulp
            );
        }
    }
    Ok(())
}

/// Set in the child process that [`backend_env_override`] runs its body in.
const CHILD_ENV: &str = "CANDLE_FP8_TEST_BACKEND_ENV_CHILD";

/// `CANDLE_FP8_BACKEND` read by `fp8_block_matmul`: every value, refusals naming the provider,
/// the fallback off the fast path. The body sets the process environment, which other tests of
/// this binary (running in parallel threads) must not see: the test re-runs this binary for
/// itself alone (`--exact`) with [`CHILD_ENV`] set, and the body runs only there.
#[test]
fn backend_env_override() -> Result<()> {
    const NAME: &str = "backend_env_override";
    let dev = gpu_or_skip!(NAME);
    if std::env::var_os(CHILD_ENV).is_none() {
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env_remove(BACKEND_ENV)
            .output()?;
        // Indented, so that the runner's counts of `test result:` / `SKIP` lines see the parent
        // only.
        for line in String::from_utf8_lossy(&out.stdout).lines().chain(String::from_utf8_lossy(&out.stderr).lines()) {
            println!("  [child] {line}");
        }
        assert!(out.status.success(), "{NAME}: the child process failed ({})", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("test result: ok. 1 passed"), "{NAME}: the child process did not run the test");
        return Ok(());
    }
    let caps = device_caps(&dev)?;
    let (m, n, k) = (5, 256, 512);
    let op = random_operands(m, n, k, 5, &dev)?;
    let r = reference(&op, m, n, k, &dev)?;
    let call = |v: &str| {
        std::env::set_var(BACKEND_ENV, v);
        let y = fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw);
        std::env::remove_var(BACKEND_ENV);
        y
    };
    for v in ["", "auto", "AUTO", " dequant "] {
        check(&call(v)?, &r, &format!("{BACKEND_ENV}={v:?}"))?;
    }
    for p in PROVIDERS {
        match (caps.unusable_reason(p), call(p.as_str())) {
            (None, Ok(y)) => check(&y, &r, &format!("{BACKEND_ENV}={p}"))?,
            (None, Err(e)) => panic!("{BACKEND_ENV}={p} should run: {e}"),
            (Some(_), Ok(_)) => panic!("{BACKEND_ENV}={p} should be refused on this device"),
            (Some(_), Err(e)) => assert!(e.to_string().contains(p.as_str()), "{e}"),
        }
    }
    let e = call("tensorrt").unwrap_err().to_string();
    assert!(e.contains("tensorrt") && e.contains(BACKEND_ENV) && e.contains("one of"), "{e}");
    let e = call("cpu").unwrap_err().to_string();
    assert!(e.contains("cpu") && e.contains("CUDA"), "cpu on CUDA tensors must be refused: {e}");
    // Off the fast path (K % 128 != 0): hopper is refused naming the shape, auto falls back.
    let op2 = random_operands(3, 256, 200, 6, &dev)?;
    let r2 = reference(&op2, 3, 256, 200, &dev)?;
    std::env::set_var(BACKEND_ENV, "hopper");
    let e = fp8_block_matmul(&op2.qa, &op2.sa, &op2.w, &op2.sw);
    std::env::set_var(BACKEND_ENV, "auto");
    let y = fp8_block_matmul(&op2.qa, &op2.sa, &op2.w, &op2.sw);
    std::env::remove_var(BACKEND_ENV);
    match e {
        Ok(_) => panic!("hopper must refuse K = 200"),
        Err(e) => assert!(e.to_string().contains("K = 200"), "{e}"),
    }
    check(&y?, &r2, "auto with K = 200")?;
    Ok(())
}
