//! The flash prefill attention kernels (`src/cuda/prefill.rs`: the warpgroup-MMA one,
//! `kernels/attention/prefill_wgmma.cu`, and the mma.sync one, `kernels/attention/prefill.cu`) on
//! CUDA (built only with the `cuda` feature; without a CUDA sm_90 device every test reports
//! `SKIP <test>: <reason>` on stderr, a failure under `CANDLE_FP8_REQUIRE_GPU=1`):
//!
//! - the kernel the model uses against a naive causal attention in f64 on the host, over prompt
//!   lengths on both sides of the kernels' 64- and 128-token tiles (1, 63, 64, 65, 127, 128,
//!   129, 1000, 4097), grouped-query ratios 1, 4 and 8, head_dim 64 and 128, a first prompt and
//!   a chunk after a cached prefix, batch 1 and 2, q as a view inside the q|k rows; NaN in the
//!   caches past the valid positions and in recycled output memory;
//! - each kernel pinned at head_dim 128 against the same reference, up to past 8192 cached
//!   positions, at the model's grouped-query ratio 8;
//! - the quantized output (head_dim 128) bit-identical to the activation quantizer applied to
//!   the bf16 output;
//! - bad inputs refused with a message naming the value.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::poison;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::kernels::{prefill_attention, prefill_attention_with, PrefillKernel};
use candle_fp8::quantize_activation;
use half::bf16;

/// One case: `b` sequences of `t` new tokens after `offset` cached positions, `hq` query heads
/// on `hkv` kv heads of `d`.
#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    t: usize,
    offset: usize,
    hq: usize,
    hkv: usize,
    d: usize,
}

/// Host copy of a bf16 tensor, widened to f64.
fn host(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?.into_iter().map(f64::from).collect())
}

/// Causal attention in f64: for each token row of `q` `[b, t, hq, d]` and head, softmax over
/// the positions `[0, offset + i]` of `k`/`v` `[b, hkv, len, d]`. Returns `(y, a)` `[b * t, hq * d]`:
/// the output and Σ p·|v| (the scale of the P·V rounding error), rows split over threads.
fn reference(c: Case, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let Case { b, t, offset, hq, hkv, d } = c;
    let len = offset + t;
    let rows = b * t * hq;
    let mut y = vec![0f64; rows * d];
    let mut a = vec![0f64; rows * d];
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4);
    let per = rows.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk, (ys, as_)) in y.chunks_mut(per * d).zip(a.chunks_mut(per * d)).enumerate() {
            s.spawn(move || {
                let mut p = vec![0f64; len];
                for (local, (yr, ar)) in ys.chunks_mut(d).zip(as_.chunks_mut(d)).enumerate() {
                    let r = chunk * per + local; // (bi, i, h) row-major = the output's layout
                    let (bi, i, h) = (r / (t * hq), (r / hq) % t, r % hq);
                    let g = h / (hq / hkv);
                    let qr = &q[r * d..(r + 1) * d];
                    let kv = |j: usize| ((bi * hkv + g) * len + j) * d;
                    let n = offset + i + 1;
                    let mut mx = f64::NEG_INFINITY;
                    for (j, pj) in p.iter_mut().enumerate().take(n) {
                        let kr = &k[kv(j)..kv(j) + d];
                        *pj = qr.iter().zip(kr).map(|(x, y)| x * y).sum();
                        mx = mx.max(*pj);
                    }
                    let mut sum = 0.0;
                    for pj in p.iter_mut().take(n) {
                        *pj = (*pj - mx).exp();
                        sum += *pj;
                    }
                    for (j, pj) in p.iter().enumerate().take(n) {
                        let vr = &v[kv(j)..kv(j) + d];
                        for x in 0..d {
                            yr[x] += pj / sum * vr[x];
                            ar[x] += pj / sum * vr[x].abs();
                        }
                    }
                }
            });
        }
    });
    (y, a)
}

/// Random inputs of `c` on `dev`: `(q, k_cache, v_cache, k, v)`. q is the q part of q|k rows
/// `[b, t, hq + hkv, d]` (tokens `(hq + hkv) * d` apart, as the decoder hands it over) when
/// `strided`; the caches hold `len = offset + t` valid positions and NaN up to `len + 37`.
fn inputs(c: Case, strided: bool, dev: &Device) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let Case { b, t, offset, hq, hkv, d } = c;
    let len = offset + t;
    // Scores of std ≈ 0.2 · √d · 1 (2.3 at d = 128): peaked and flat rows both occur.
    let q = if strided {
        let qk = Tensor::randn(0f32, 0.2, (b, t, hq + hkv, d), dev)?.to_dtype(DType::BF16)?;
        qk.narrow(2, 0, hq)?
    } else {
        Tensor::randn(0f32, 0.2, (b, t, hq, d), dev)?.to_dtype(DType::BF16)?
    };
    let k = Tensor::randn(0f32, 1.0, (b, hkv, len, d), dev)?.to_dtype(DType::BF16)?;
    let v = Tensor::randn(0f32, 1.0, (b, hkv, len, d), dev)?.to_dtype(DType::BF16)?;
    let cap = len + 37;
    let kc = Tensor::full(bf16::NAN, (b, hkv, cap, d), dev)?;
    let vc = Tensor::full(bf16::NAN, (b, hkv, cap, d), dev)?;
    kc.slice_set(&k, 2, 0)?;
    vc.slice_set(&v, 2, 0)?;
    Ok((q, kc, vc, k, v))
}

/// The kernel's bf16 output against the f64 reference `(r, a)` of [`reference`], element by
/// element: |y − r| ≤ 2⁻⁸ (|r| + Σ p·|v|) + 10⁻⁵. P is rounded to bf16 before P·V (at most 2⁻⁹
/// of each p·v term, so 2⁻⁹ Σ p·|v| in all), the normalizer sums the unrounded p (2⁻⁹ |r| at
/// most) and the output is rounded to bf16 (2⁻⁹ |r|); the scores' f32 error is far smaller. A key masked wrongly moves a row by
/// about p·|v − r| with p ≈ 1 / (tokens seen): far outside the bound for the early rows.
fn check(what: &str, c: Case, y: &Tensor, (r, a): &(Vec<f64>, Vec<f64>)) -> Result<()> {
    let got = host(y)?;
    assert_eq!(got.len(), r.len(), "{what}: output size");
    let (mut worst, mut at) = (0f64, 0usize);
    for (i, ((g, r), a)) in got.iter().zip(r).zip(a).enumerate() {
        assert!(g.is_finite(), "{what}: non-finite output at {i} (unwritten, or NaN read from the cache)");
        let excess = (g - r).abs() / ((r.abs() + a) / 256.0 + 1e-5);
        if excess > worst {
            (worst, at) = (excess, i);
        }
    }
    let d = c.d;
    assert!(
        worst <= 1.0,
        "{what}: row {} col {}: got {} want {} (|Δ| is {worst:.2}× the bound)",
        at / (c.hq * d),
        at % (c.hq * d),
        got[at],
        r[at]
    );
    Ok(())
}

#[test]
fn cuda_prefill_attention_matches_f64_reference() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_prefill_attention_matches_f64_reference");
    // CANDLE_FP8_GPU_QUICK=1 (the sanitizer runs): the lengths around one tile boundary only.
    let quick = std::env::var("CANDLE_FP8_GPU_QUICK").is_ok_and(|v| v == "1");
    let lens: &[usize] = if quick { &[1, 63, 65, 129] } else { &[1, 63, 64, 65, 127, 128, 129, 1000] };
    let mut cases = Vec::new();
    for d in [128, 64] {
        for (hq, hkv) in [(4, 4), (8, 2), (8, 1)] {
            for &t in lens {
                for (b, offset) in [(1, 0), (2, 0), (1, 100), (2, 37)] {
                    cases.push(Case { b, t, offset, hq, hkv, d });
                }
            }
        }
        // Past 64 tiles of 64 (and a long cached prefix).
        if !quick {
            cases.push(Case { b: 1, t: 4097, offset: 0, hq: 4, hkv: 1, d });
            cases.push(Case { b: 1, t: 200, offset: 4000, hq: 8, hkv: 2, d });
        }
    }
    for (n, &c) in cases.iter().enumerate() {
        let strided = n % 2 == 0;
        let (q, kc, vc, k, v) = inputs(c, strided, &dev)?;
        let what = format!("{c:?} strided q {strided}");
        poison(&dev, c.b * c.t * c.hq * c.d)?;
        let quantized = c.d == 128 && n % 3 == 0;
        let want = reference(c, &host(&q.contiguous()?)?, &host(&k)?, &host(&v)?);
        run_and_check(&what, c, PrefillKernel::Auto, quantized, (&q, &kc, &vc), &want)?;
    }
    Ok(())
}

/// Runs `kernel` on one case's inputs `(q, k_cache, v_cache)` and checks its bf16 output against
/// the f64 reference `want` (of [`reference`]) and, when `quantized`, its quantized operand
/// against the activation quantizer applied to that bf16 output (exactly).
fn run_and_check(
    what: &str,
    c: Case,
    kernel: PrefillKernel,
    quantized: bool,
    (q, kc, vc): (&Tensor, &Tensor, &Tensor),
    want: &(Vec<f64>, Vec<f64>),
) -> Result<()> {
    let out = prefill_attention_with(q, kc, vc, c.offset, quantized, true, kernel)?;
    let y = out.bf16.expect("bf16 output");
    assert_eq!(y.dims(), &[c.b * c.t, c.hq * c.d], "{what}");
    check(what, c, &y, want)?;
    if quantized {
        let (qa, sa) = out.quantized.expect("quantized output");
        let (rq, rs) = quantize_activation(&y)?;
        assert_eq!(sa.dims(), rs.dims(), "{what}: scale shape");
        assert_eq!(sa.stride(), rs.stride(), "{what}: scale layout");
        let codes = |t: &Tensor| -> Result<Vec<f32>> { candle_fp8::e4m3_to_f32(t)?.flatten_all()?.to_vec1::<f32>() };
        assert_eq!(codes(&qa)?, codes(&rq)?, "{what}: quantized codes differ from quantize_activation");
        let s = |t: &Tensor| -> Result<Vec<f32>> { t.contiguous()?.flatten_all()?.to_vec1::<f32>() };
        assert_eq!(s(&sa)?, s(&rs)?, "{what}: scales differ from quantize_activation");
    }
    Ok(())
}

#[test]
fn cuda_prefill_attention_each_kernel_matches_f64_reference() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_prefill_attention_each_kernel_matches_f64_reference");
    let quick = std::env::var("CANDLE_FP8_GPU_QUICK").is_ok_and(|v| v == "1");
    // Both sides of the 64- and 128-token tiles, and many tiles.
    let lens: &[usize] =
        if quick { &[1, 129, 257] } else { &[1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4097] };
    let mut cases = Vec::new();
    for &t in lens {
        for (b, offset) in [(1, 0), (2, 37), (1, 128)] {
            // Qwen3-32B's ratio: 8 query heads per kv head.
            cases.push(Case { b, t, offset, hq: 8, hkv: 1, d: 128 });
        }
    }
    if !quick {
        // A long cached prefix (past 8192 positions, unaligned to the tiles), two kv heads.
        cases.push(Case { b: 1, t: 700, offset: 8000, hq: 16, hkv: 2, d: 128 });
        cases.push(Case { b: 2, t: 130, offset: 8190, hq: 8, hkv: 1, d: 128 });
    }
    for (n, &c) in cases.iter().enumerate() {
        let strided = n % 2 == 1;
        let (q, kc, vc, k, v) = inputs(c, strided, &dev)?;
        let want = reference(c, &host(&q.contiguous()?)?, &host(&k)?, &host(&v)?);
        for kernel in [PrefillKernel::Wgmma, PrefillKernel::MmaSync] {
            let what = format!("{kernel:?} {c:?} strided q {strided}");
            poison(&dev, c.b * c.t * c.hq * c.d)?;
            run_and_check(&what, c, kernel, n % 2 == 0, (&q, &kc, &vc), &want)?;
        }
    }
    Ok(())
}

#[test]
fn cuda_prefill_attention_auto_picks_wgmma_at_head_dim_128() {
    assert_eq!(PrefillKernel::Auto.resolve(128), PrefillKernel::Wgmma);
    assert_eq!(PrefillKernel::Auto.resolve(64), PrefillKernel::MmaSync);
    assert_eq!(PrefillKernel::MmaSync.resolve(128), PrefillKernel::MmaSync);
}

#[test]
fn cuda_prefill_attention_rejects_bad_inputs() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_prefill_attention_rejects_bad_inputs");
    let c = Case { b: 1, t: 10, offset: 0, hq: 8, hkv: 2, d: 128 };
    let (q, kc, vc, _, _) = inputs(c, true, &dev)?;
    let err = |r: Result<candle_fp8::kernels::AttentionOutput>| r.expect_err("must be refused").to_string();
    // Past the cache: offset 40 + 10 tokens > capacity 47.
    assert!(err(prefill_attention(&q, &kc, &vc, 40, false, true)).contains("capacity 47"));
    // hq not a multiple of hkv: 8 query heads on 3 kv heads.
    let k3 = Tensor::zeros((1, 3, 64, 128), DType::BF16, &dev)?;
    assert!(err(prefill_attention(&q, &k3, &k3, 0, false, true)).contains("num_heads 8"));
    // Unsupported head_dim.
    let q96 = Tensor::zeros((1, 10, 8, 96), DType::BF16, &dev)?;
    assert!(err(prefill_attention(&q96, &kc, &vc, 0, false, true)).contains("96"));
    // Heads not contiguous (transposed view).
    let qt = q.contiguous()?.transpose(1, 2)?;
    assert!(err(prefill_attention(&qt, &kc, &vc, 0, false, true)).contains("strides"));
    // f32 q.
    assert!(err(prefill_attention(&q.to_dtype(DType::F32)?, &kc, &vc, 0, false, true)).contains("F32"));
    // No output asked for.
    assert!(err(prefill_attention(&q, &kc, &vc, 0, false, false)).contains("ask for"));
    // The wgmma kernel at head_dim 64.
    let c64 = Case { d: 64, ..c };
    let (q64, kc64, vc64, _, _) = inputs(c64, false, &dev)?;
    let r = prefill_attention_with(&q64, &kc64, &vc64, 0, false, true, PrefillKernel::Wgmma);
    assert!(err(r).contains("head_dim 128 only"));
    Ok(())
}
