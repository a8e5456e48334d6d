//! Mixture-of-experts routing as ops around the masked grouped GEMMs, so that a layer's routing
//! never visits the host on CUDA:
//!
//! - [`moe_route`]: the router's softmax, each token's top-k experts and weights, and each
//!   (token, choice)'s slot in the masked layout `[experts, max_m]`;
//! - [`moe_gather_quantize`]: the tokens quantized (the activation contract) into their slots —
//!   the masked grouped GEMM's `(qa, sa)` operand;
//! - [`moe_combine`]: each token's expert outputs weighted and summed, experts ascending.
//!
//! On an sm_90 device each is one launch of `kernels/moe/routing.cu`; elsewhere the same
//! arithmetic on the host. Every output depends only on the inputs: the same bits at every call.

use std::ops::Range;

use super::grouped::masked_act_scales_view;
use crate::format::{act_scale_m_stride, num_blocks, F8E4M3};
use crate::quant::quantize_activation;
use candle_core::{bail, DType, Device, Result, Tensor};

/// A slot of [`MoeRouting::slots`] that is no slot: the expert is not among the local ones.
pub const NO_SLOT: u32 = u32::MAX;

/// Most experts the device routing takes (`kernels/moe/routing.cu`: 8 per lane of a warp).
pub const MAX_DEVICE_EXPERTS: usize = 256;

/// Most experts per token the device routing takes.
pub const MAX_DEVICE_TOP_K: usize = 32;

/// The routing of `m` tokens, on the logits' device.
#[derive(Debug, Clone)]
pub struct MoeRouting {
    /// u32 `[m, top_k]`: each token's experts, the most probable first (ties: the lower expert).
    pub ids: Tensor,
    /// f32 `[m, top_k]`: their softmax probabilities, divided by their sum (taken in `ids`'
    /// order) when the routing renormalises.
    pub weights: Tensor,
    /// u32 `[m, top_k]`: the slot of each choice in the masked layout of the local experts,
    /// `(expert − local.start) · max_m + rank` (rank: among that expert's tokens, in token
    /// order), or [`NO_SLOT`] for an expert outside `local`.
    pub slots: Tensor,
    /// u32 `[local.len()]`: tokens per local expert.
    pub counts: Tensor,
    /// The experts the masked layout holds.
    pub local: Range<usize>,
    /// Token rows per expert of the masked layout.
    pub max_m: usize,
}

/// Each token's `(expert, weight)` choices from its router `logits` `[m, experts]` (f32, any
/// device): candle's softmax, read on the host, then [`choose_top_k`] per token. A non-finite
/// probability is an error naming the token, prefixed by `what`. The host routing of
/// [`moe_route`] and of `Fp8MoeExperts::route`.
pub(crate) fn host_top_k(logits: &Tensor, top_k: usize, norm: bool, what: &str) -> Result<Vec<Vec<(u32, f32)>>> {
    let e = logits.dim(1)?;
    let probs = candle_nn::ops::softmax_last_dim(logits)?.flatten_all()?.to_vec1::<f32>()?;
    let mut order = Vec::with_capacity(e);
    probs
        .chunks_exact(e.max(1))
        .enumerate()
        .map(|(t, p)| match p.iter().find(|v| !v.is_finite()) {
            Some(bad) => bail!("{what}: token {t} has router probability {bad} (non-finite input?)"),
            None => Ok(choose_top_k(p, top_k, norm, &mut order)),
        })
        .collect()
}

/// `(expert, weight)` of the `top_k` most probable experts of one token's probabilities `p`
/// (ties: the lower expert first), the weights divided by their sum in that order when `norm`.
/// `order` is scratch. The one definition of the selection (the device kernel implements the
/// same order).
fn choose_top_k(p: &[f32], top_k: usize, norm: bool, order: &mut Vec<usize>) -> Vec<(u32, f32)> {
    order.clear();
    order.extend(0..p.len());
    // Descending probability, the lower expert first on ties: a total order, so equal
    // probabilities always choose the same experts.
    order.sort_unstable_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    let chosen = &order[..top_k];
    let sum: f32 = chosen.iter().map(|&i| p[i]).sum();
    let scale = if norm { sum } else { 1.0 };
    chosen.iter().map(|&i| (i as u32, p[i] / scale)).collect()
}

/// Whether the routing kernels run on `device` (CUDA, sm_90, with the `cuda` feature).
pub(crate) fn on_kernels(device: &Device) -> bool {
    #[cfg(feature = "cuda")]
    {
        device.is_cuda() && crate::cuda::sm90_kernels_unavailable(device).is_none()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        false
    }
}

/// Routes `m` tokens by their router logits `[m, experts]` (f32): softmax over the experts,
/// each token's `top_k` most probable experts (ties: the lower expert), their probabilities as
/// weights, renormalised to sum to 1 when `norm_topk_prob`; and the masked layout of the
/// experts `local` (a subrange of `0..experts`; all of them, or an expert-parallel rank's
/// share) with `max_m` rows per expert. A token has at most one choice per expert, so `max_m =
/// m` always holds every token; ranks past `max_m` get [`NO_SLOT`] and the counts stop at
/// `max_m`.
///
/// On an sm_90 device: one launch, nothing read on the host (`experts` ≤
/// [`MAX_DEVICE_EXPERTS`], `top_k` ≤ [`MAX_DEVICE_TOP_K`]); a non-finite logit makes the
/// token's weights NaN there, while the host path refuses it with an error naming the token.
/// The softmax's sums are taken in another order on the two paths: their probabilities may
/// differ in the last bit.
pub fn moe_route(
    logits: &Tensor,
    top_k: usize,
    norm_topk_prob: bool,
    local: Range<usize>,
    max_m: usize,
) -> Result<MoeRouting> {
    if logits.dtype() != DType::F32 {
        bail!("moe_route: logits must be f32, got {:?}", logits.dtype())
    }
    let (m, e) = match logits.dims() {
        &[m, e] => (m, e),
        d => bail!("moe_route: logits must be [tokens, experts], got shape {d:?}"),
    };
    if m == 0 || e == 0 {
        bail!("moe_route: logits {:?} hold no token or no expert", logits.dims())
    }
    if top_k == 0 || top_k > e {
        bail!("moe_route: experts per token {top_k} must be in 1..={e}")
    }
    if local.is_empty() || local.end > e {
        bail!("moe_route: local experts {local:?} must be a non-empty range within 0..{e}")
    }
    if max_m == 0 {
        bail!("moe_route: max_m must be at least 1")
    }
    if on_kernels(logits.device()) {
        #[cfg(feature = "cuda")]
        {
            if e > MAX_DEVICE_EXPERTS || top_k > MAX_DEVICE_TOP_K {
                bail!(
                    "moe_route: the device routing takes at most {MAX_DEVICE_EXPERTS} experts and \
                     {MAX_DEVICE_TOP_K} per token, got {e} and {top_k}"
                )
            }
            let (ids, weights, slots, counts) =
                crate::cuda::moe::route(&logits.contiguous()?, top_k, norm_topk_prob, local.start, local.len(), max_m)?;
            return Ok(MoeRouting { ids, weights, slots, counts, local, max_m });
        }
    }
    let (ids, weights): (Vec<u32>, Vec<f32>) =
        host_top_k(logits, top_k, norm_topk_prob, "moe_route")?.into_iter().flatten().unzip();
    let (slots, counts) = host_slots(&ids, &local, max_m);
    let dev = logits.device();
    Ok(MoeRouting {
        ids: Tensor::from_vec(ids, (m, top_k), dev)?,
        weights: Tensor::from_vec(weights, (m, top_k), dev)?,
        slots: Tensor::from_vec(slots, (m, top_k), dev)?,
        counts: Tensor::from_vec(counts, local.len(), dev)?,
        local,
        max_m,
    })
}

/// The slots and counts of the choices `ids` (token-major) in the masked layout of `local`.
fn host_slots(ids: &[u32], local: &Range<usize>, max_m: usize) -> (Vec<u32>, Vec<u32>) {
    let mut counts = vec![0u32; local.len()];
    let slots = ids
        .iter()
        .map(|&x| {
            let x = x as usize;
            if !local.contains(&x) {
                return NO_SLOT;
            }
            let el = x - local.start;
            let rank = counts[el] as usize;
            counts[el] += 1;
            if rank < max_m {
                (el * max_m + rank) as u32
            } else {
                NO_SLOT
            }
        })
        .collect();
    for c in &mut counts {
        *c = (*c).min(max_m as u32);
    }
    (slots, counts)
}

/// The masked grouped GEMM's operand for `routing`: each token row of `x` `[m, K]` (bf16 or
/// f32, as the routing's tokens) quantized as [`quantize_activation`] quantizes it and placed
/// at each of its slots. Returns `qa` e4m3 `[local, max_m, K]` and `sa` `[local, max_m,
/// ceil(K/128)]` in the per-expert MN-major layout of
/// [`fp8_grouped_matmul_masked`](super::fp8_grouped_matmul_masked); rows of no slot are zeros.
/// On an sm_90 device one launch (`K % 8 == 0`).
pub fn moe_gather_quantize(x: &Tensor, routing: &MoeRouting) -> Result<(Tensor, Tensor)> {
    let (m, k) = match x.dims() {
        &[m, k] => (m, k),
        d => bail!("moe_gather_quantize: x must be [tokens, K], got shape {d:?}"),
    };
    let (rm, top_k) = routing.slots.dims2()?;
    if rm != m {
        bail!("moe_gather_quantize: x has {m} tokens, the routing {rm}")
    }
    if k == 0 {
        bail!("moe_gather_quantize: K = 0")
    }
    let (local, max_m, kb) = (routing.local.len(), routing.max_m, num_blocks(k));
    if on_kernels(x.device()) && k % 8 == 0 && matches!(x.dtype(), DType::BF16 | DType::F32) {
        #[cfg(feature = "cuda")]
        {
            let (q, buf) = crate::cuda::moe::gather_quantize(&x.contiguous()?, &routing.slots, local, max_m)?;
            return Ok((q, masked_act_scales_view(buf, local, max_m, kb)?));
        }
    }
    let (q, sa) = quantize_activation(x)?;
    let q = q.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<F8E4M3>()?;
    let sa = sa.to_device(&Device::Cpu)?.to_vec2::<f32>()?;
    let slots = routing.slots.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<u32>()?;
    let mpad = act_scale_m_stride(max_m);
    let mut qo = vec![F8E4M3::from_bits(0); local * max_m * k];
    let mut so = vec![0f32; local * kb * mpad];
    for (i, &p) in slots.iter().enumerate() {
        if p == NO_SLOT {
            continue;
        }
        let (t, p) = (i / top_k, p as usize);
        qo[p * k..(p + 1) * k].copy_from_slice(&q[t * k..(t + 1) * k]);
        let (e, r) = (p / max_m, p % max_m);
        for (g, &s) in sa[t].iter().enumerate() {
            so[(e * kb + g) * mpad + r] = s;
        }
    }
    let dev = x.device();
    let qa = Tensor::from_vec(qo, (local, max_m, k), dev)?;
    Ok((qa, masked_act_scales_view(Tensor::from_vec(so, local * kb * mpad, dev)?, local, max_m, kb)?))
}

/// Each token's expert outputs of `y` (bf16 `[local, max_m, N]`, the masked grouped GEMM's
/// output) at its slots, times its routing weights, summed with the experts ascending: in f32,
/// each product rounded, then added to 0 in that order (the bits of a scatter-add of the
/// weighted rows in expert order); returned `[m, N]` in `dtype` (f32 or bf16, rounded once).
/// On an sm_90 device one launch.
pub fn moe_combine(y: &Tensor, routing: &MoeRouting, dtype: DType) -> Result<Tensor> {
    let (l, max_m, n) = match y.dims() {
        &[l, mm, n] => (l, mm, n),
        d => bail!("moe_combine: y must be [local experts, max_m, N], got shape {d:?}"),
    };
    if (l, max_m) != (routing.local.len(), routing.max_m) {
        bail!(
            "moe_combine: y {:?} does not match the routing's masked layout [{}, {}, N]",
            y.dims(),
            routing.local.len(),
            routing.max_m
        )
    }
    if y.dtype() != DType::BF16 {
        bail!("moe_combine: y must be bf16, got {:?}", y.dtype())
    }
    if !matches!(dtype, DType::F32 | DType::BF16) {
        bail!("moe_combine: the output dtype must be f32 or bf16, got {dtype:?}")
    }
    let (m, top_k) = routing.slots.dims2()?;
    if on_kernels(y.device()) {
        #[cfg(feature = "cuda")]
        {
            let y2 = y.reshape((l * max_m, n))?.contiguous()?;
            return crate::cuda::moe::combine(&y2, &routing.slots, &routing.weights, dtype);
        }
    }
    let yv = y.to_device(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let slots = routing.slots.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<u32>()?;
    let w = routing.weights.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![0f32; m * n];
    let mut order: Vec<(u32, f32)> = Vec::with_capacity(top_k);
    for (t, row) in out.chunks_exact_mut(n).enumerate() {
        order.clear();
        order.extend((0..top_k).map(|j| (slots[t * top_k + j], w[t * top_k + j])).filter(|s| s.0 != NO_SLOT));
        order.sort_unstable_by_key(|s| s.0);
        for &(p, wt) in &order {
            let src = &yv[p as usize * n..(p as usize + 1) * n];
            for (o, &v) in row.iter_mut().zip(src) {
                *o += v * wt;
            }
        }
    }
    Tensor::from_vec(out, (m, n), y.device())?.to_dtype(dtype)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// The host routing against a naive softmax / sort; slots rank each expert's tokens in
    /// token order; an expert-parallel share leaves the other experts without slots.
    #[test]
    fn host_routing_matches_a_naive_softmax_top_k() -> Result<()> {
        let (m, e, k) = (9, 12, 3);
        let mut rng = Rng::new(5);
        let logits: Vec<f32> = rng.normal_vec(m * e, 2.0);
        let t = Tensor::from_vec(logits.clone(), (m, e), &Device::Cpu)?;
        for norm in [false, true] {
            let r = moe_route(&t, k, norm, 0..e, m)?;
            let ids = r.ids.to_vec2::<u32>()?;
            let w = r.weights.to_vec2::<f32>()?;
            for tok in 0..m {
                let row = &logits[tok * e..(tok + 1) * e];
                let mx = row.iter().cloned().fold(f64::MIN, |a, b| a.max(b as f64));
                let z: f64 = row.iter().map(|&l| (l as f64 - mx).exp()).sum();
                let p: Vec<f64> = row.iter().map(|&l| (l as f64 - mx).exp() / z).collect();
                let mut idx: Vec<usize> = (0..e).collect();
                idx.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap().then(a.cmp(&b)));
                let s: f64 = if norm { idx[..k].iter().map(|&i| p[i]).sum() } else { 1.0 };
                for j in 0..k {
                    assert_eq!(ids[tok][j] as usize, idx[j], "token {tok} choice {j}");
                    assert!((w[tok][j] as f64 - p[idx[j]] / s).abs() < 1e-6, "token {tok} choice {j}");
                }
            }
            // Slots: expert-major, tokens in order within an expert.
            let slots = r.slots.to_vec2::<u32>()?;
            let counts = r.counts.to_vec1::<u32>()?;
            assert_eq!(counts.iter().sum::<u32>() as usize, m * k);
            let mut seen = vec![0u32; e];
            for tok in 0..m {
                for j in 0..k {
                    let x = ids[tok][j] as usize;
                    assert_eq!(slots[tok][j] as usize, x * m + seen[x] as usize);
                    seen[x] += 1;
                }
            }
            assert_eq!(seen, counts);
        }
        // A share of the experts, and a max_m that cuts the counts.
        let r = moe_route(&t, k, true, 4..8, 2)?;
        let ids = r.ids.to_vec2::<u32>()?;
        let slots = r.slots.to_vec2::<u32>()?;
        for (row_ids, row_slots) in ids.iter().zip(&slots) {
            for (&x, &s) in row_ids.iter().zip(row_slots) {
                if !(4..8).contains(&(x as usize)) {
                    assert_eq!(s, NO_SLOT);
                } else if s != NO_SLOT {
                    assert_eq!(s as usize / 2, x as usize - 4);
                }
            }
        }
        assert!(r.counts.to_vec1::<u32>()?.iter().all(|&c| c <= 2));
        Ok(())
    }

    /// Bad arguments are refused with the value in the message.
    #[test]
    fn routing_refuses_bad_arguments() -> Result<()> {
        let t = Tensor::zeros((2, 4), DType::F32, &Device::Cpu)?;
        let err = |r: Result<MoeRouting>| r.unwrap_err().to_string();
        assert!(err(moe_route(&t, 5, true, 0..4, 2)).contains("5 must be in 1..=4"));
        assert!(err(moe_route(&t, 2, true, 2..6, 2)).contains("2..6"));
        assert!(err(moe_route(&t.to_dtype(DType::BF16)?, 2, true, 0..4, 2)).contains("f32"));
        let nan = Tensor::new(&[[0f32, f32::NAN, 0.0, 0.0]], &Device::Cpu)?;
        assert!(err(moe_route(&nan, 2, true, 0..4, 1)).contains("token 0"));
        Ok(())
    }

    /// Gather + quantize equals quantizing the gathered rows; combine sums the weighted rows
    /// in expert order (f32 mul, then add).
    #[test]
    fn gather_and_combine_match_their_definitions() -> Result<()> {
        let (m, e, k, h) = (5, 6, 200, 16);
        let mut rng = Rng::new(8);
        let logits = Tensor::from_vec(rng.normal_vec(m * e, 1.0), (m, e), &Device::Cpu)?;
        let r = moe_route(&logits, 2, true, 0..e, m)?;
        let x = Tensor::from_vec(rng.normal_vec(m * k, 3.0), (m, k), &Device::Cpu)?;
        let (qa, sa) = moe_gather_quantize(&x, &r)?;
        assert_eq!((qa.dims(), sa.dims()), (&[e, m, k][..], &[e, m, num_blocks(k)][..]));
        let (q1, s1) = quantize_activation(&x)?;
        let q1 = q1.to_vec2::<F8E4M3>()?;
        let s1 = s1.to_vec2::<f32>()?;
        let slots = r.slots.to_vec2::<u32>()?;
        let qa3 = qa.to_vec3::<F8E4M3>()?;
        let sa3 = sa.to_vec3::<f32>()?;
        for t in 0..m {
            for &p in &slots[t] {
                let (x_, row) = (p as usize / m, p as usize % m);
                assert_eq!(qa3[x_][row], q1[t], "token {t} slot {p}");
                assert_eq!(sa3[x_][row], s1[t], "token {t} slot {p}");
            }
        }
        // Combine: y's rows hold known values.
        let y = Tensor::from_vec(rng.normal_vec(e * m * h, 1.0), (e, m, h), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let got = moe_combine(&y, &r, DType::F32)?.to_vec2::<f32>()?;
        let yv = y.to_dtype(DType::F32)?.to_vec3::<f32>()?;
        let w = r.weights.to_vec2::<f32>()?;
        for t in 0..m {
            let mut pairs: Vec<(u32, f32)> = slots[t].iter().copied().zip(w[t].iter().copied()).collect();
            pairs.sort_by_key(|p| p.0);
            for c in 0..h {
                let mut acc = 0f32;
                for &(p, wt) in &pairs {
                    acc += yv[p as usize / m][p as usize % m][c] * wt;
                }
                assert_eq!(got[t][c].to_bits(), acc.to_bits(), "token {t} col {c}");
            }
        }
        Ok(())
    }
}
