//! The sparse mixture-of-experts MLP of Qwen3-MoE layers: a router and SwiGLU experts on
//! [`Fp8BlockLinear`](crate::Fp8BlockLinear) (or dense) layers, on the candle ops of any device.

use super::layer::SwiGlu;
use crate::linear::AnyLinear;
use candle_core::{bail, DType, Module, Result, Tensor};

/// The mixture-of-experts MLP of a Qwen3-MoE layer (`mlp.gate`, `mlp.experts.{e}.*` in a
/// checkpoint), as transformers' `Qwen3MoeSparseMoeBlock` computes it:
///
/// 1. router logits `x · gateᵀ` and their softmax over the experts, in f32 (the router weight is
///    kept in f32 whatever the activation dtype);
/// 2. each token's `experts_per_token` most probable experts (ties: the lower expert index), their
///    probabilities renormalised to sum to 1 when `norm_topk_prob`;
/// 3. per expert that received tokens: its tokens gathered, its SwiGLU MLP (gate and up one GEMM
///    where their width is a multiple of 128), the outputs scaled by the routing weights and
///    added back into the tokens' rows (`index_add`), in f32, experts in ascending order.
///
/// The routing is read on the host (one device-to-host copy of the `[tokens, experts]`
/// probabilities per layer call), so a call gives the same bits every time on a given device.
#[derive(Debug, Clone)]
pub struct Fp8MoeExperts {
    /// f32 `[num_experts, hidden]`.
    router: Tensor,
    experts: Vec<SwiGlu>,
    top_k: usize,
    norm_topk_prob: bool,
}

impl Fp8MoeExperts {
    /// The block from its router weight `[num_experts, hidden]` (any float dtype; kept as f32)
    /// and one SwiGLU MLP per expert.
    pub(crate) fn new(router: &Tensor, experts: Vec<SwiGlu>, top_k: usize, norm_topk_prob: bool) -> Result<Self> {
        let (e, _) = router.dims2()?;
        if e != experts.len() {
            bail!("mixture of experts: the router has {e} rows but {} experts are given", experts.len())
        }
        if top_k == 0 || top_k > e {
            bail!("mixture of experts: experts per token {top_k} must be in 1..={e}")
        }
        Ok(Self { router: router.to_dtype(DType::F32)?.contiguous()?, experts, top_k, norm_topk_prob })
    }

    /// Number of experts.
    pub fn num_experts(&self) -> usize {
        self.experts.len()
    }

    /// Experts each token is routed to (`num_experts_per_tok`).
    pub fn experts_per_token(&self) -> usize {
        self.top_k
    }

    /// Whether each token's top-k routing probabilities are renormalised to sum to 1
    /// (`norm_topk_prob`).
    pub fn norm_topk_prob(&self) -> bool {
        self.norm_topk_prob
    }

    /// The routing of the tokens of `x` `[.., hidden]` (rows in order): for each token its
    /// `(expert, weight)` pairs, most probable expert first. The weights are the router's
    /// softmax probabilities (f32), divided by their sum over the chosen experts when
    /// [`Fp8MoeExperts::norm_topk_prob`].
    pub fn route(&self, x: &Tensor) -> Result<Vec<Vec<(u32, f32)>>> {
        let (e, h) = self.router.dims2()?;
        let m = x.elem_count() / h.max(1);
        if x.dims().last() != Some(&h) {
            bail!("mixture of experts: input has shape {:?}, expected [.., {h}]", x.dims())
        }
        let logits = x.reshape((m, h))?.to_dtype(DType::F32)?.matmul(&self.router.t()?)?;
        let probs = candle_nn::ops::softmax_last_dim(&logits)?.flatten_all()?.to_vec1::<f32>()?;
        let mut out = Vec::with_capacity(m);
        let mut order: Vec<usize> = Vec::with_capacity(e);
        for (t, p) in probs.chunks_exact(e.max(1)).enumerate() {
            if let Some(bad) = p.iter().find(|v| !v.is_finite()) {
                bail!("mixture of experts: token {t} has router probability {bad} (non-finite input?)")
            }
            order.clear();
            order.extend(0..e);
            // Descending probability, the lower expert first on ties: a total order, so equal
            // probabilities always choose the same experts.
            order.sort_unstable_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let chosen = &order[..self.top_k];
            let sum: f32 = chosen.iter().map(|&i| p[i]).sum();
            let scale = if self.norm_topk_prob { sum } else { 1.0 };
            out.push(chosen.iter().map(|&i| (i as u32, p[i] / scale)).collect());
        }
        Ok(out)
    }

    pub(crate) fn experts(&self) -> &[SwiGlu] {
        &self.experts
    }

    /// Bytes of the f32 router weight.
    pub(crate) fn router_bytes(&self) -> usize {
        self.router.elem_count() * DType::F32.size_in_bytes()
    }

    /// This block with `f` applied to every expert's linears (the router is kept).
    pub(crate) fn map_linears(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        let experts = self.experts.into_iter().map(|x| x.map(f)).collect::<Result<Vec<_>>>()?;
        Ok(Self { experts, ..self })
    }
}

impl Module for Fp8MoeExperts {
    /// The block on `x` `[.., hidden]` (bf16, f16 or f32), output in `x`'s shape and dtype.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let h = self.router.dim(1)?;
        let routes = self.route(x)?;
        let m = routes.len();
        if m == 0 {
            return x.zeros_like();
        }
        let x2 = x.reshape((m, h))?;
        // Tokens grouped by expert (ascending), each group in token order.
        let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); self.experts.len()];
        let mut weights: Vec<Vec<f32>> = vec![Vec::new(); self.experts.len()];
        for (t, route) in routes.iter().enumerate() {
            for &(e, w) in route {
                tokens[e as usize].push(t as u32);
                weights[e as usize].push(w);
            }
        }
        let n = m * self.top_k;
        let dev = x.device();
        let ids = Tensor::from_vec(tokens.concat(), n, dev)?;
        let w = Tensor::from_vec(weights.concat(), (n, 1), dev)?;
        let mut outs = Vec::new();
        let mut off = 0;
        for (expert, group) in self.experts.iter().zip(&tokens) {
            if group.is_empty() {
                continue;
            }
            let k = group.len();
            let xe = x2.index_select(&ids.narrow(0, off, k)?, 0)?;
            outs.push(expert.forward(&xe)?.to_dtype(DType::F32)?.broadcast_mul(&w.narrow(0, off, k)?)?);
            off += k;
        }
        // One scatter-add of every expert's weighted rows: each output element sums its token's
        // contributions in ascending expert order (candle's index_add walks the ids in order).
        let y = Tensor::cat(&outs, 0)?;
        let out = Tensor::zeros((m, h), DType::F32, dev)?.index_add(&ids, &y, 0)?;
        out.to_dtype(x.dtype())?.reshape(dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::layer::Proj;
    use candle_core::Device;

    fn dense(w: Vec<f32>, n: usize, k: usize) -> AnyLinear {
        AnyLinear::Dense(candle_nn::Linear::new(Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap(), None))
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// 4 dense experts of width 3 over hidden 5, top-2.
    fn block(norm: bool) -> (Fp8MoeExperts, Vec<[Vec<f32>; 3]>, Vec<f32>) {
        let (e, h, i) = (4, 5, 3);
        let router: Vec<f32> = values(1, e * h).iter().map(|v| 2.0 * v).collect();
        let mut raw = Vec::new();
        let experts = (0..e as u64)
            .map(|x| {
                let (g, u, d) = (values(10 + x, i * h), values(20 + x, i * h), values(30 + x, h * i));
                raw.push([g.clone(), u.clone(), d.clone()]);
                let gate_up = Proj::build(vec![dense(g, i, h), dense(u, i, h)], true).unwrap();
                SwiGlu { gate_up, down: dense(d, h, i) }
            })
            .collect();
        let r = Tensor::from_vec(router.clone(), (e, h), &Device::Cpu).unwrap();
        (Fp8MoeExperts::new(&r, experts, 2, norm).unwrap(), raw, router)
    }

    /// The block against a per-token f64 loop over the same weights: softmax, top-2, optional
    /// renormalisation, the chosen experts' SwiGLU outputs summed with their weights.
    #[test]
    fn forward_matches_a_per_token_f64_loop() -> Result<()> {
        let (e, h, i) = (4usize, 5usize, 3usize);
        let x = values(99, 7 * h);
        for norm in [true, false] {
            let (moe, raw, router) = block(norm);
            let got = moe.forward(&Tensor::from_vec(x.clone(), (7, h), &Device::Cpu)?)?.to_vec2::<f32>()?;
            let mut renorm_changed = false;
            for (t, row) in got.iter().enumerate() {
                let xt: Vec<f64> = x[t * h..(t + 1) * h].iter().map(|&v| v as f64).collect();
                let dot = |w: &[f32], r: usize, k: usize, v: &[f64]| -> f64 {
                    (0..k).map(|c| w[r * k + c] as f64 * v[c]).sum()
                };
                let logits: Vec<f64> = (0..e).map(|r| dot(&router, r, h, &xt)).collect();
                let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
                let p: Vec<f64> = logits.iter().map(|l| (l - mx).exp() / z).collect();
                let mut idx: Vec<usize> = (0..e).collect();
                idx.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap());
                let s: f64 = if norm { p[idx[0]] + p[idx[1]] } else { 1.0 };
                renorm_changed |= (s - 1.0).abs() > 1e-3;
                let route = moe.route(&Tensor::from_vec(x[t * h..(t + 1) * h].to_vec(), (1, h), &Device::Cpu)?)?;
                assert_eq!(route[0].iter().map(|r| r.0 as usize).collect::<Vec<_>>(), idx[..2].to_vec(), "token {t}");
                let mut want = vec![0f64; h];
                for &ex in &idx[..2] {
                    let [g, u, d] = &raw[ex];
                    let a: Vec<f64> = (0..i)
                        .map(|r| {
                            let gv = dot(g, r, h, &xt);
                            gv / (1.0 + (-gv).exp()) * dot(u, r, h, &xt)
                        })
                        .collect();
                    for (c, wc) in want.iter_mut().enumerate() {
                        *wc += p[ex] / s * dot(d, c, i, &a);
                    }
                }
                for (c, (&g, &w)) in row.iter().zip(&want).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "norm {norm} token {t} col {c}: {g} vs {w}"
                    );
                }
            }
            if norm {
                assert!(renorm_changed, "the top-2 probabilities must not already sum to 1");
            }
        }
        Ok(())
    }

    /// Ties choose the lower expert; renormalised weights sum to 1; a second call gives the
    /// same bits; a wrong width and non-finite input are errors.
    #[test]
    fn routing_is_deterministic_and_checked() -> Result<()> {
        let experts = (0..3)
            .map(|_| SwiGlu {
                gate_up: Proj::build(vec![dense(vec![0.0; 2], 1, 2), dense(vec![0.0; 2], 1, 2)], true).unwrap(),
                down: dense(vec![0.0; 2], 2, 1),
            })
            .collect();
        // Experts 1 and 2 tie for every input; expert 0 is ahead for x[0] > 0.
        let router = Tensor::new(&[[1f32, 0.0], [0.0, 1.0], [0.0, 1.0]], &Device::Cpu)?;
        let moe = Fp8MoeExperts::new(&router, experts, 2, true)?;
        let x = Tensor::new(&[[5f32, 0.0], [-5.0, 0.0]], &Device::Cpu)?;
        let r = moe.route(&x)?;
        assert_eq!((r[0][0].0, r[0][1].0), (0, 1));
        assert_eq!((r[1][0].0, r[1][1].0), (1, 2));
        assert!(r.iter().all(|t| (t.iter().map(|p| p.1).sum::<f32>() - 1.0).abs() < 1e-6));
        let again = moe.route(&x)?;
        assert!(r
            .iter()
            .flatten()
            .zip(again.iter().flatten())
            .all(|(a, b)| a.0 == b.0 && a.1.to_bits() == b.1.to_bits()));
        assert!(moe.route(&Tensor::zeros((1, 3), DType::F32, &Device::Cpu)?).is_err());
        let e = moe.route(&Tensor::new(&[[f32::NAN, 0.0]], &Device::Cpu)?).unwrap_err().to_string();
        assert!(e.contains("token 0") && e.contains("NaN"), "{e}");
        Ok(())
    }
}
