//! The grouped blocked-FP8 GEMMs of mixture-of-experts layers against the per-expert dense
//! reference (`testing::reference`), on random codes with log-spaced scales per token, K block
//! and expert block, ragged counts (0 and 1 token per expert included), up to 128 experts, K and
//! N off multiples of 128; and the MoE layer on them: routing against a naive softmax/top-k,
//! the layer against the sum of its experts' own layers, the same bits over 100 calls; bad input
//! refused with errors naming the argument and the value.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::{act_scale_m_stride, act_scales_view, num_blocks, F8E4M3};
use candle_fp8::models::Fp8MoeExperts;
use candle_fp8::ops::{
    fp8_block_matmul, fp8_grouped_matmul_contiguous, fp8_grouped_matmul_masked, fp8_grouped_swiglu_quantize_contiguous,
    fp8_grouped_swiglu_quantize_masked, masked_act_scales_view, quantize_activation_masked,
};
use candle_fp8::quant::quantize_activation;
use candle_fp8::testing::reference::{reference_matmul, rel_err};
use candle_fp8::testing::Rng;
use candle_fp8::{AnyLinear, Fp8BlockLinear};

#[path = "common/grouped_operands.rs"]
mod grouped_operands;
use grouped_operands::codes;

const CPU: Device = Device::Cpu;

/// Stacked expert weights `[E, N, K]` with scales `[E, ceil(N/128), ceil(K/128)]`.
struct Weights {
    w: Tensor,
    sw: Tensor,
}

fn weights(e: usize, n: usize, k: usize, rng: &mut Rng) -> Result<Weights> {
    let (w, sw) = grouped_operands::weights(rng, e, n, k)?;
    Ok(Weights { w, sw })
}

/// Per-row scales `[rows][kb]`, log-spaced.
fn row_scales(rng: &mut Rng, rows: usize, kb: usize) -> Vec<Vec<f32>> {
    (0..rows).map(|_| (0..kb).map(|_| rng.log_spaced(-6.0, 0.0)).collect()).collect()
}

/// The MN-major `[rows, kb]` scale view of the dense GEMM for these rows.
fn mn_major(rows: &[Vec<f32>], kb: usize) -> Result<Tensor> {
    let mpad = act_scale_m_stride(rows.len());
    let mut buf = vec![0f32; kb * mpad];
    for (r, s) in rows.iter().enumerate() {
        for (g, &v) in s.iter().enumerate() {
            buf[g * mpad + r] = v;
        }
    }
    act_scales_view(Tensor::from_vec(buf, kb * mpad, &CPU)?, rows.len(), kb)
}

/// Ragged counts: random in `0..=max`, with experts 0 and 1 forced to 0 and 1 tokens and the
/// last (of three or more) to `max`; one expert gets `max`.
fn ragged(rng: &mut Rng, e: usize, max: usize) -> Vec<usize> {
    if e == 1 {
        return vec![max];
    }
    let mut c: Vec<usize> = (0..e).map(|_| (rng.next_u64() % (max as u64 + 1)) as usize).collect();
    c[0] = 0;
    c[1] = 1;
    if e > 2 {
        c[e - 1] = max;
    }
    c
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect())
}

/// Expert `x`'s rows of a grouped output against the dense reference: bit for bit against the
/// dense op, and within the bf16 output rounding (≈ 1.1e-3 rms) of the f32 reference.
fn check_expert(what: &str, got: &Tensor, qa: &Tensor, sa: &[Vec<f32>], wt: &Weights, x: usize) -> Result<()> {
    let kb = sa[0].len();
    let sa = mn_major(sa, kb)?;
    let (w, sw) = (wt.w.get(x)?, wt.sw.get(x)?);
    let reference = reference_matmul(qa, &sa, &w, &sw)?;
    let e = rel_err(got, &reference)?;
    assert!(e <= 3e-3, "{what}, expert {x}: relerr {e} against the dequantized reference");
    assert_eq!(bits(got)?, bits(&fp8_block_matmul(qa, &sa, &w, &sw)?)?, "{what}, expert {x}: vs the dense op");
    Ok(())
}

/// The contiguous layout: every expert's rows equal its own dense GEMM (reference and dense op),
/// rows past the counts' sum are zeros; E from 1 to 128, K and N whole or partial 128-blocks.
#[test]
fn contiguous_matches_the_per_expert_reference() -> Result<()> {
    let mut rng = Rng::new(11);
    for (case, &(e, n, k, max, pad)) in
        [(1, 256, 256, 5, 0), (3, 200, 300, 9, 3), (8, 130, 64, 4, 0), (32, 144, 384, 3, 1), (128, 200, 300, 2, 5)]
            .iter()
            .enumerate()
    {
        let wt = weights(e, n, k, &mut rng)?;
        let counts = ragged(&mut rng, e, max);
        let rows = counts.iter().sum::<usize>() + pad;
        let kb = num_blocks(k);
        let scales = row_scales(&mut rng, rows, kb);
        let qa = Tensor::from_vec(codes(&mut rng, rows * k), (rows, k), &CPU)?;
        let y = fp8_grouped_matmul_contiguous(&qa, &mn_major(&scales, kb)?, &wt.w, &wt.sw, &counts)?;
        assert_eq!((y.dims(), y.dtype()), (&[rows, n][..], DType::BF16));
        let what = format!("case {case} (E {e}, N {n}, K {k}, counts {counts:?})");
        let mut off = 0;
        for (x, &m) in counts.iter().enumerate() {
            if m > 0 {
                let got = y.narrow(0, off, m)?;
                check_expert(&what, &got, &qa.narrow(0, off, m)?, &scales[off..off + m], &wt, x)?;
            }
            off += m;
        }
        let tail = y.narrow(0, off, pad)?.to_dtype(DType::F32)?.abs()?.sum_all()?.to_scalar::<f32>()?;
        assert_eq!(tail, 0.0, "{what}: rows past the counts' sum must be zeros");
    }
    Ok(())
}

/// The masked layout: expert `e`'s first `counts[e]` rows equal its dense GEMM; the rows at or
/// past the count are zeros although their codes and scales are NaN (never read).
#[test]
fn masked_matches_the_per_expert_reference() -> Result<()> {
    let mut rng = Rng::new(12);
    for (case, &(e, max_m, n, k)) in
        [(1, 1, 256, 256), (4, 5, 200, 300), (16, 8, 130, 128), (128, 3, 144, 200)].iter().enumerate()
    {
        let wt = weights(e, n, k, &mut rng)?;
        let counts = ragged(&mut rng, e, max_m);
        let kb = num_blocks(k);
        let mpad = act_scale_m_stride(max_m);
        let mut q = codes(&mut rng, e * max_m * k);
        let scales: Vec<Vec<Vec<f32>>> = (0..e).map(|_| row_scales(&mut rng, max_m, kb)).collect();
        let mut buf = vec![f32::NAN; e * kb * mpad];
        for (x, s) in scales.iter().enumerate() {
            for (r, row) in s.iter().enumerate().take(counts[x]) {
                for (g, &v) in row.iter().enumerate() {
                    buf[(x * kb + g) * mpad + r] = v;
                }
            }
            for v in &mut q[(x * max_m + counts[x]) * k..(x + 1) * max_m * k] {
                *v = F8E4M3::from_bits(0x7f);
            }
        }
        let qa = Tensor::from_vec(q, (e, max_m, k), &CPU)?;
        let sa = masked_act_scales_view(Tensor::from_vec(buf, e * kb * mpad, &CPU)?, e, max_m, kb)?;
        let c = Tensor::from_vec(counts.iter().map(|&c| c as u32).collect::<Vec<_>>(), e, &CPU)?;
        let y = fp8_grouped_matmul_masked(&qa, &sa, &wt.w, &wt.sw, &c)?;
        assert_eq!((y.dims(), y.dtype()), (&[e, max_m, n][..], DType::BF16));
        let what = format!("case {case} (E {e}, max_m {max_m}, N {n}, K {k}, counts {counts:?})");
        for (x, &m) in counts.iter().enumerate() {
            let ye = y.get(x)?;
            if m > 0 {
                let qe = qa.get(x)?.narrow(0, 0, m)?;
                check_expert(&what, &ye.narrow(0, 0, m)?, &qe, &scales[x][..m], &wt, x)?;
            }
            let rest: Vec<u32> = bits(&ye.narrow(0, m, max_m - m)?)?;
            assert!(rest.iter().all(|&b| b == 0), "{what}, expert {x}: rows past count {m} must be +0.0");
        }
    }
    Ok(())
}

/// The gate/up GEMM with SwiGLU and quantization (both layouts) is the grouped GEMM, bf16
/// SiLU·up and the quantizer: the same codes and scales on every row below the counts; `w`
/// without two equal halves is refused naming it.
#[test]
fn grouped_swiglu_quantize_is_the_composed_ops() -> Result<()> {
    let mut rng = Rng::new(13);
    let (e, inter, k, max_m) = (5, 128, 256, 6);
    let wt = weights(e, 2 * inter, k, &mut rng)?;
    let silu_mul = |y: &Tensor| -> Result<Tensor> {
        let i = y.dim(y.rank() - 1)? / 2;
        candle_nn::ops::silu(&y.narrow(y.rank() - 1, 0, i)?)? * y.narrow(y.rank() - 1, i, i)?
    };
    // Masked.
    let counts = [3u32, 0, 6, 1, 2];
    let x = Tensor::from_vec(rng.normal_vec(e * max_m * k, 1.0), (e, max_m, k), &CPU)?;
    let (qa, sa) = quantize_activation_masked(&x)?;
    let c = Tensor::new(&counts, &CPU)?;
    let (q, s) = fp8_grouped_swiglu_quantize_masked(&qa, &sa, &wt.w, &wt.sw, &c)?;
    assert_eq!((q.dims(), s.dims()), (&[e, max_m, inter][..], &[e, max_m, inter / 128][..]));
    let (q2, s2) = quantize_activation_masked(&silu_mul(&fp8_grouped_matmul_masked(&qa, &sa, &wt.w, &wt.sw, &c)?)?)?;
    for (x, &m) in counts.iter().enumerate() {
        let m = m as usize;
        let codes = |q: &Tensor| -> Result<Vec<u8>> {
            Ok(q.get(x)?.narrow(0, 0, m)?.flatten_all()?.to_vec1::<F8E4M3>()?.iter().map(|v| v.to_bits()).collect())
        };
        assert_eq!(codes(&q)?, codes(&q2)?, "masked expert {x}: codes");
        assert_eq!(
            bits(&s.get(x)?.narrow(0, 0, m)?)?,
            bits(&s2.get(x)?.narrow(0, 0, m)?)?,
            "masked expert {x}: scales"
        );
    }
    // Contiguous, with padding rows.
    let counts = [2usize, 0, 4, 1, 0];
    let rows = 9;
    let x = Tensor::from_vec(rng.normal_vec(rows * k, 1.0), (rows, k), &CPU)?;
    let (qa, sa) = quantize_activation(&x)?;
    let (q, s) = fp8_grouped_swiglu_quantize_contiguous(&qa, &sa, &wt.w, &wt.sw, &counts)?;
    let (q2, s2) = quantize_activation(&silu_mul(&fp8_grouped_matmul_contiguous(&qa, &sa, &wt.w, &wt.sw, &counts)?)?)?;
    let used = counts.iter().sum::<usize>();
    let codes = |q: &Tensor| -> Result<Vec<u8>> {
        Ok(q.narrow(0, 0, used)?.flatten_all()?.to_vec1::<F8E4M3>()?.iter().map(|v| v.to_bits()).collect())
    };
    assert_eq!(codes(&q)?, codes(&q2)?, "contiguous: codes");
    assert_eq!(bits(&s.narrow(0, 0, used)?)?, bits(&s2.narrow(0, 0, used)?)?, "contiguous: scales");
    // [gate; up] must be two equal halves.
    let odd = weights(e, 129, k, &mut rng)?;
    let err = fp8_grouped_swiglu_quantize_contiguous(&qa, &sa, &odd.w, &odd.sw, &counts).unwrap_err().to_string();
    assert!(err.contains("w:") && err.contains("129"), "{err}");
    Ok(())
}

/// `quantize_activation_masked` quantizes each expert's block as `quantize_activation` does,
/// into the masked scale layout; the masked GEMM on it equals the contiguous GEMM on the same
/// rows bit for bit.
#[test]
fn masked_quantizer_and_layouts_agree() -> Result<()> {
    let mut rng = Rng::new(13);
    let (e, max_m, n, k) = (5, 6, 256, 320);
    let x = Tensor::from_vec(rng.normal_vec(e * max_m * k, 2.0), (e, max_m, k), &CPU)?.to_dtype(DType::BF16)?;
    let (qa, sa) = quantize_activation_masked(&x)?;
    let kb = num_blocks(k);
    assert_eq!((qa.dims(), sa.dims()), (&[e, max_m, k][..], &[e, max_m, kb][..]));
    let mpad = act_scale_m_stride(max_m);
    assert_eq!(sa.stride(), &[kb * mpad, 1, mpad]);
    for xe in 0..e {
        let (q1, s1) = quantize_activation(&x.get(xe)?)?;
        let as_u8 = |t: &Tensor| -> Result<Vec<u8>> {
            Ok(t.flatten_all()?.to_vec1::<F8E4M3>()?.iter().map(|v| v.to_bits()).collect())
        };
        assert_eq!(as_u8(&qa.get(xe)?)?, as_u8(&q1)?, "expert {xe}: codes");
        assert_eq!(bits(&sa.get(xe)?.contiguous()?)?, bits(&s1.contiguous()?)?, "expert {xe}: scales");
    }
    let wt = weights(e, n, k, &mut rng)?;
    let counts = [2usize, 0, 6, 1, 3];
    let c = Tensor::from_vec(counts.iter().map(|&c| c as u32).collect::<Vec<_>>(), e, &CPU)?;
    let masked = fp8_grouped_matmul_masked(&qa, &sa, &wt.w, &wt.sw, &c)?;
    let rows: Vec<Tensor> = counts
        .iter()
        .enumerate()
        .filter(|(_, &m)| m > 0)
        .map(|(xe, &m)| x.get(xe)?.narrow(0, 0, m))
        .collect::<Result<_>>()?;
    let (qc, sc) = quantize_activation(&Tensor::cat(&rows, 0)?)?;
    let contiguous = fp8_grouped_matmul_contiguous(&qc, &sc, &wt.w, &wt.sw, &counts)?;
    let mut off = 0;
    for (xe, &m) in counts.iter().enumerate() {
        let a = masked.get(xe)?.narrow(0, 0, m)?;
        assert_eq!(bits(&a)?, bits(&contiguous.narrow(0, off, m)?)?, "expert {xe}");
        off += m;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The MoE layer on the grouped GEMMs
// ---------------------------------------------------------------------------------------------

fn fp8_linear(rng: &mut Rng, n: usize, k: usize) -> Result<AnyLinear> {
    let w = Tensor::from_vec(rng.normal_vec(n * k, 0.05), (n, k), &CPU)?;
    Ok(AnyLinear::Fp8(Fp8BlockLinear::from_weight(&w, None)?))
}

/// A block of `e` FP8 experts of width `i` over hidden `h`, top-`top_k`, with the expert
/// layers kept for the checks.
fn fp8_block(
    rng: &mut Rng,
    e: usize,
    h: usize,
    i: usize,
    top_k: usize,
    norm: bool,
) -> Result<(Fp8MoeExperts, Vec<[AnyLinear; 3]>, Tensor)> {
    let router = Tensor::from_vec(rng.normal_vec(e * h, 0.5), (e, h), &CPU)?;
    let experts: Vec<[AnyLinear; 3]> = (0..e)
        .map(|_| Ok([fp8_linear(rng, i, h)?, fp8_linear(rng, i, h)?, fp8_linear(rng, h, i)?]))
        .collect::<Result<_>>()?;
    let moe = Fp8MoeExperts::from_experts(&router, experts.clone(), top_k, norm)?;
    Ok((moe, experts, router))
}

/// The router's top-k against a naive f64 softmax and a full sort: the same experts (most
/// probable first) and weights within f32 rounding, renormalised or not; E = 128, top-8.
#[test]
fn routing_matches_a_naive_softmax_top_k() -> Result<()> {
    let mut rng = Rng::new(21);
    let (e, h, i, tokens) = (128, 64, 128, 24);
    for (top_k, norm) in [(8, true), (8, false), (1, true), (3, false)] {
        let (moe, _, router) = fp8_block(&mut rng, e, h, i, top_k, norm)?;
        let x = Tensor::from_vec(rng.normal_vec(tokens * h, 1.0), (tokens, h), &CPU)?;
        let routes = moe.route(&x)?;
        let (xv, rv) = (x.flatten_all()?.to_vec1::<f32>()?, router.flatten_all()?.to_vec1::<f32>()?);
        for (t, route) in routes.iter().enumerate() {
            let logits: Vec<f64> =
                (0..e).map(|r| (0..h).map(|c| rv[r * h + c] as f64 * xv[t * h + c] as f64).sum()).collect();
            let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
            let p: Vec<f64> = logits.iter().map(|l| (l - mx).exp() / z).collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            // A boundary closer than f32 noise could legitimately order the other way.
            assert!(p[order[top_k - 1]] - p[order[top_k]] > 1e-7, "token {t}: top-{top_k} boundary within f32 noise");
            let sum: f64 = if norm { order[..top_k].iter().map(|&x| p[x]).sum() } else { 1.0 };
            assert_eq!(route.len(), top_k);
            for (j, &(ex, wt)) in route.iter().enumerate() {
                assert_eq!(ex as usize, order[j], "top_k {top_k}, token {t}, rank {j}");
                let want = p[order[j]] / sum;
                assert!((wt as f64 - want).abs() <= 1e-6 * (1.0 + want), "token {t}: weight {wt} vs {want}");
            }
        }
    }
    Ok(())
}

/// The layer's output for token `t` rebuilt from its experts' own layers: each chosen expert's
/// `down(silu(gate(x)) · up(x))` on the token alone, scaled by its routing weight, summed in f32
/// in ascending expert order (the layer's documented order).
fn sum_of_experts(moe: &Fp8MoeExperts, experts: &[[AnyLinear; 3]], x: &Tensor) -> Result<Tensor> {
    let routes = moe.route(x)?;
    let rows = routes
        .iter()
        .enumerate()
        .map(|(t, route)| {
            let xt = x.narrow(0, t, 1)?;
            let mut chosen = route.clone();
            chosen.sort_by_key(|r| r.0);
            let mut acc = Tensor::zeros((1, x.dim(1)?), DType::F32, &CPU)?;
            for (ex, w) in chosen {
                let [g, u, d] = &experts[ex as usize];
                let a = (candle_nn::ops::silu(&g.forward(&xt)?)? * u.forward(&xt)?)?;
                let y = d.forward(&a)?.to_dtype(DType::F32)?;
                acc = (acc + (y * w as f64)?)?;
            }
            acc.to_dtype(x.dtype())
        })
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&rows, 0)
}

/// The layer equals the sum of its experts' dense layers, bit for bit on the CPU (every row
/// sees the same quantization and the same GEMM arithmetic either way): 128 experts top-8 and
/// 16 experts top-4, bf16 and f32 activations, hidden size off a multiple of 128.
#[test]
fn moe_layer_equals_the_sum_of_its_experts() -> Result<()> {
    let mut rng = Rng::new(31);
    for (e, h, i, top_k, tokens) in [(128, 192, 128, 8, 20), (16, 256, 256, 4, 9)] {
        let (moe, experts, _) = fp8_block(&mut rng, e, h, i, top_k, true)?;
        assert!(moe.is_grouped(), "FP8 experts of one shape run grouped");
        for dtype in [DType::BF16, DType::F32] {
            let x = Tensor::from_vec(rng.normal_vec(tokens * h, 1.0), (tokens, h), &CPU)?.to_dtype(dtype)?;
            let got = moe.forward(&x)?;
            let want = sum_of_experts(&moe, &experts, &x)?;
            assert_eq!(got.dtype(), dtype);
            assert!(rel_err(&got, &want)? <= 1e-6, "E {e} top-{top_k} {dtype:?}");
            assert_eq!(bits(&got)?, bits(&want)?, "E {e} top-{top_k} {dtype:?}: not bit-identical");
        }
    }
    Ok(())
}

/// Experts that are not all FP8 (one dense) run one by one, with the result of the sum of their
/// layers (to the bf16 rounding: the dense expert's gate|up runs fused there, apart here); a 3-D
/// input keeps its shape.
#[test]
fn mixed_experts_run_one_by_one() -> Result<()> {
    let mut rng = Rng::new(32);
    let (e, h, i) = (6, 128, 128);
    let (_, mut experts, router) = fp8_block(&mut rng, e, h, i, 2, false)?;
    let dense = |l: &AnyLinear| l.clone().into_dense_bf16();
    experts[3] = [dense(&experts[3][0])?, dense(&experts[3][1])?, dense(&experts[3][2])?];
    let moe = Fp8MoeExperts::from_experts(&router, experts.clone(), 2, false)?;
    assert!(!moe.is_grouped());
    let x = Tensor::from_vec(rng.normal_vec(10 * h, 1.0), (10, h), &CPU)?.to_dtype(DType::BF16)?;
    assert!(moe.route(&x)?.iter().flatten().any(|r| r.0 == 3), "the dense expert must receive tokens");
    let e = rel_err(&moe.forward(&x)?, &sum_of_experts(&moe, &experts, &x)?)?;
    assert!(e <= 5e-3, "relerr {e}");
    assert_eq!(moe.forward(&x.reshape((2, 5, h))?)?.dims(), &[2, 5, h]);
    Ok(())
}

/// 100 calls of the grouped layer give the same bits (E = 128, top-8).
#[test]
fn moe_layer_gives_the_same_bits_over_100_calls() -> Result<()> {
    let mut rng = Rng::new(41);
    let (moe, _, _) = fp8_block(&mut rng, 128, 128, 128, 8, true)?;
    let x = Tensor::from_vec(rng.normal_vec(16 * 128, 1.0), (16, 128), &CPU)?.to_dtype(DType::BF16)?;
    let first = bits(&moe.forward(&x)?)?;
    assert!(first.iter().any(|&b| b != 0));
    for call in 1..100 {
        assert_eq!(bits(&moe.forward(&x)?)?, first, "call {call}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

fn expect_err(what: &str, r: Result<Tensor>, needles: &[&str]) {
    let e = match r {
        Ok(t) => panic!("{what}: accepted, got a tensor of shape {:?}", t.dims()),
        Err(e) => e.to_string(),
    };
    for n in needles {
        assert!(e.contains(n), "{what}: error {e:?} does not name {n:?}");
    }
}

/// Every bad operand of both layouts is refused with an error that names the argument and the
/// bad value.
#[test]
fn bad_input_is_refused_naming_argument_and_value() -> Result<()> {
    let mut rng = Rng::new(51);
    let (e, n, k, rows) = (4, 200, 300, 12);
    let wt = weights(e, n, k, &mut rng)?;
    let kb = num_blocks(k);
    let qa = Tensor::from_vec(codes(&mut rng, rows * k), (rows, k), &CPU)?;
    let sa = mn_major(&row_scales(&mut rng, rows, kb), kb)?;
    let good = [3usize, 0, 4, 5];
    fp8_grouped_matmul_contiguous(&qa, &sa, &wt.w, &wt.sw, &good)?;
    let contiguous = |qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor, c: &[usize]| {
        fp8_grouped_matmul_contiguous(qa, sa, w, sw, c)
    };
    expect_err("counts past the rows", contiguous(&qa, &sa, &wt.w, &wt.sw, &[3, 1, 4, 5]), &["counts", "13", "12"]);
    expect_err(
        "3 counts for 4 experts",
        contiguous(&qa, &sa, &wt.w, &wt.sw, &[3, 4, 5]),
        &["counts", "3 entries", "4"],
    );
    let sw3 = wt.sw.narrow(0, 0, 3)?;
    expect_err("sw of 3 experts", contiguous(&qa, &sa, &wt.w, &sw3, &good), &["sw", "[3, 2, 3]", "[4, 2, 3]"]);
    let sw_kb = Tensor::ones((e, 2, 2), DType::F32, &CPU)?;
    expect_err("sw with 2 K blocks", contiguous(&qa, &sa, &wt.w, &sw_kb, &good), &["sw", "[4, 2, 2]", "[4, 2, 3]"]);
    let sa_kb = mn_major(&row_scales(&mut rng, rows, 2), 2)?;
    expect_err("sa with 2 K blocks", contiguous(&qa, &sa_kb, &wt.w, &wt.sw, &good), &["sa", "[12, 2]", "[12, 3]"]);
    let sa_rm = sa.contiguous()?;
    expect_err("row-major sa", contiguous(&qa, &sa_rm, &wt.w, &wt.sw, &good), &["sa", "MN-major", "[3, 1]"]);
    let w256 = weights(e, n, 256, &mut rng)?;
    expect_err("K 300 vs 256", contiguous(&qa, &sa, &w256.w, &w256.sw, &good), &["K mismatch", "K = 300", "K = 256"]);
    let qa_bf16 = Tensor::zeros((rows, k), DType::BF16, &CPU)?;
    expect_err("bf16 qa", contiguous(&qa_bf16, &sa, &wt.w, &wt.sw, &good), &["qa", "F8E4M3", "BF16"]);
    let sw_bf16 = wt.sw.to_dtype(DType::BF16)?;
    expect_err("bf16 sw", contiguous(&qa, &sa, &wt.w, &sw_bf16, &good), &["sw", "F32", "BF16"]);
    let w2 = wt.w.get(0)?;
    expect_err("rank-2 w", contiguous(&qa, &sa, &w2, &wt.sw, &good), &["w", "rank-3", "[200, 300]"]);

    // Masked.
    let max_m = 8;
    let x = Tensor::from_vec(rng.normal_vec(e * max_m * k, 1.0), (e, max_m, k), &CPU)?;
    let (qm, sm) = quantize_activation_masked(&x)?;
    let counts = |c: &[u32]| Tensor::from_vec(c.to_vec(), c.len(), &CPU);
    let masked =
        |qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor, c: &Tensor| fp8_grouped_matmul_masked(qa, sa, w, sw, c);
    masked(&qm, &sm, &wt.w, &wt.sw, &counts(&[8, 0, 1, 3])?)?;
    expect_err(
        "a count past max_m",
        masked(&qm, &sm, &wt.w, &wt.sw, &counts(&[8, 0, 9, 3])?),
        &["counts[2] = 9", "max_m = 8"],
    );
    expect_err(
        "5 counts for 4 experts",
        masked(&qm, &sm, &wt.w, &wt.sw, &counts(&[1, 1, 1, 1, 1])?),
        &["counts", "[5]", "[4]"],
    );
    let c64 = Tensor::new(&[1i64, 1, 1, 1], &CPU)?;
    expect_err("i64 counts", masked(&qm, &sm, &wt.w, &wt.sw, &c64), &["counts", "U32", "I64"]);
    let (q3, s3) = (qm.narrow(0, 0, 3)?, sm.narrow(0, 0, 3)?);
    expect_err("qa of 3 experts", masked(&q3, &s3, &wt.w, &wt.sw, &counts(&[1, 1, 1, 1])?), &["qa", "3 experts", "4"]);
    let sm_rm = sm.contiguous()?;
    expect_err(
        "row-major masked sa",
        masked(&qm, &sm_rm, &wt.w, &wt.sw, &counts(&[1, 1, 1, 1])?),
        &["sa", "MN-major", "[24, 3, 1]"],
    );
    let sw3m = wt.sw.narrow(0, 0, 3)?;
    expect_err("masked sw of 3 experts", masked(&qm, &sm, &wt.w, &sw3m, &counts(&[1, 1, 1, 1])?), &["sw", "[3, 2, 3]"]);
    expect_err(
        "rank-2 masked qa",
        masked(&qa, &sa, &wt.w, &wt.sw, &counts(&[1, 1, 1, 1])?),
        &["qa", "rank-3", "[12, 300]"],
    );

    // The MoE layer's constructor.
    let router = Tensor::zeros((3, 64), DType::F32, &CPU)?;
    let expert = |i: usize, h_out: usize, rng: &mut Rng| -> Result<[AnyLinear; 3]> {
        Ok([fp8_linear(rng, i, 64)?, fp8_linear(rng, i, 64)?, fp8_linear(rng, h_out, i)?])
    };
    let experts = vec![expert(128, 64, &mut rng)?, expert(128, 32, &mut rng)?, expert(128, 64, &mut rng)?];
    let e = Fp8MoeExperts::from_experts(&router, experts, 2, true).unwrap_err().to_string();
    assert!(e.contains("expert 1") && e.contains("down width 32") && e.contains("64"), "{e}");
    let experts = vec![expert(128, 64, &mut rng)?, expert(128, 64, &mut rng)?, expert(128, 64, &mut rng)?];
    let e = Fp8MoeExperts::from_experts(&router, experts, 4, true).unwrap_err().to_string();
    assert!(e.contains("experts per token 4") && e.contains("1..=3"), "{e}");
    Ok(())
}
