//! The sparse mixture-of-experts MLP of Qwen3-MoE layers: a router and SwiGLU experts on
//! [`Fp8BlockLinear`](crate::Fp8BlockLinear) (or dense) layers, on the candle ops of any device;
//! FP8 experts of one shape run as grouped GEMMs over weights stacked at load.

use super::layer::{Proj, SwiGlu};
use crate::dispatch::Fp8Options;
use crate::linear::{AnyLinear, Fp8BlockLinear};
use crate::ops::moe_route::{host_top_k, on_kernels};
use crate::ops::{
    fp8_grouped_matmul_contiguous_with, fp8_grouped_matmul_masked_with, fp8_grouped_swiglu_quantize_contiguous_with,
    fp8_grouped_swiglu_quantize_masked_with, moe_combine, moe_gather_quantize, moe_route, MAX_DEVICE_EXPERTS,
    MAX_DEVICE_TOP_K,
};
use crate::quant::quantize_activation;
use crate::shard::move_to;
use candle_core::{bail, DType, Device, Module, Result, Tensor};

/// Most tokens per call that route on the device: the masked layout holds `experts × tokens`
/// rows (its operand, output and zero fill grow with both), so longer prompts take the
/// host-routed contiguous path.
const DEVICE_ROUTING_MAX_TOKENS: usize = 128;

/// The mixture-of-experts MLP of a Qwen3-MoE layer (`mlp.gate`, `mlp.experts.{e}.*` in a
/// checkpoint), as transformers' `Qwen3MoeSparseMoeBlock` computes it:
///
/// 1. router logits `x · gateᵀ` and their softmax over the experts, in f32 (the router weight is
///    kept in f32 whatever the activation dtype);
/// 2. each token's `experts_per_token` most probable experts (ties: the lower expert index), their
///    probabilities renormalised to sum to 1 when `norm_topk_prob`;
/// 3. the tokens' rows gathered in expert order (ascending, each expert's tokens in token order),
///    each expert's SwiGLU MLP on its rows (gate and up one GEMM where their width is a multiple
///    of 128), the outputs scaled by the routing weights and added back into the tokens' rows
///    (`index_add`), in f32, experts in ascending order.
///
/// When every expert is an FP8 [`Fp8BlockLinear`] MLP of the same shapes without bias, their
/// weights are stacked at construction (`[E, 2I, H]` for a fused gate|up, `[E, H, I]` for down;
/// the experts' own layers become views of the stacks, so the weights are held once) and step 3
/// runs as: one gather, one activation quantization, the grouped gate|up GEMM
/// ([`crate::fp8_grouped_matmul_contiguous`]), SiLU·up, one quantization (for a fused gate|up in
/// bf16 these three are [`crate::ops::fp8_grouped_swiglu_quantize_contiguous`]: one launch on
/// CUDA at decode sizes, the same bits), the grouped down GEMM, the weighted scatter. On the CPU this gives the bits of the per-expert loop (each expert's
/// rows see the same quantization and the same GEMM); other experts (dense, mixed, the
/// dequant provider) run that loop, one MLP per expert that received tokens.
///
/// On an sm_90 device, grouped experts with a fused gate|up and bf16 tokens (at most 128 per
/// call) route on the device: [`crate::ops::moe_route`] puts the tokens into the masked layout,
/// [`crate::ops::moe_gather_quantize`] quantizes them there, the masked gate|up GEMM with SwiGLU
/// and the masked down GEMM run every expert in one launch each, and
/// [`crate::ops::moe_combine`] sums each token's weighted outputs — nothing is read on the host,
/// and each row gets the host path's bits given the same routing. Otherwise the routing is read
/// on the host (one device-to-host copy of the `[tokens, experts]` probabilities per layer
/// call). Either way a call gives the same bits every time on a given device.
#[derive(Debug, Clone)]
pub struct Fp8MoeExperts {
    /// f32 `[num_experts, hidden]`.
    router: Tensor,
    experts: Vec<SwiGlu>,
    top_k: usize,
    norm_topk_prob: bool,
    stacked: Option<Stacked>,
    /// The router's index of `experts[0]`: an expert-parallel rank holds experts
    /// `[first, first + experts.len())` (0 and all of them otherwise).
    first: usize,
}

/// The experts' FP8 weights and scales stacked along a leading expert dimension, for the
/// grouped GEMMs. Each expert's [`Fp8BlockLinear`] is a view of its slice.
#[derive(Debug, Clone)]
struct Stacked {
    /// `[gate | up]` as one `([E, 2I, H], scales)`, or gate and up as two `([E, I, H], scales)`.
    gate_up: Vec<(Tensor, Tensor)>,
    /// `([E, H, I], scales)`.
    down: (Tensor, Tensor),
    /// The expert intermediate size `I`.
    inter: usize,
    /// The experts' backend.
    opts: Fp8Options,
}

/// The FP8 layers of an expert in stacking order (gate|up or gate, up; then down), if it has
/// the grouped path's form: all FP8 without bias, gate and up of one width.
fn fp8_parts(x: &SwiGlu) -> Option<(Vec<&Fp8BlockLinear>, usize)> {
    fn fp8(l: &AnyLinear) -> Option<&Fp8BlockLinear> {
        match l {
            AnyLinear::Fp8(f) if f.bias().is_none() => Some(f),
            _ => None,
        }
    }
    let (mut parts, inter) = match &x.gate_up {
        Proj::Fused(l, sizes) if sizes.len() == 2 && sizes[0] == sizes[1] => (vec![fp8(l)?], sizes[0]),
        Proj::Split(ls) if ls.len() == 2 && ls[0].out_dim() == ls[1].out_dim() => {
            (vec![fp8(&ls[0])?, fp8(&ls[1])?], ls[0].out_dim())
        }
        _ => return None,
    };
    parts.push(fp8(&x.down)?);
    Some((parts, inter))
}

/// Whether `t` is slice `x` of `stack` (`stack.get(x)` or an equal view of the same storage).
fn is_slice_of(t: &Tensor, stack: &Tensor, x: usize) -> bool {
    // One storage lock at a time (only the addresses are compared).
    let ts: *const candle_core::Storage = &*t.storage_and_layout().0;
    let ss: *const candle_core::Storage = &*stack.storage_and_layout().0;
    std::ptr::eq(ts, ss)
        && stack.dims().get(1..) == Some(t.dims())
        && t.is_contiguous()
        && t.layout().start_offset() == stack.layout().start_offset() + x * t.elem_count()
}

/// Stacks the experts' weights when they all have the grouped path's form with one set of
/// shapes and one backend, and returns the experts rebuilt as views of the stacks. Experts that
/// already are views of `previous`'s stacks keep them (no copy).
fn stack_experts(experts: Vec<SwiGlu>, previous: Option<&Stacked>) -> Result<(Vec<SwiGlu>, Option<Stacked>)> {
    let Some(parts) = experts.iter().map(fp8_parts).collect::<Option<Vec<_>>>() else {
        return Ok((experts, None));
    };
    let Some((first, inter)) = parts.first().cloned() else { return Ok((experts, None)) };
    let same = parts.iter().all(|(p, i)| {
        *i == inter
            && p.len() == first.len()
            && p.iter().zip(&first).all(|(a, b)| {
                a.weight().dims() == b.weight().dims()
                    && a.weight().device().same_device(b.weight().device())
                    && a.backend() == b.backend()
            })
    });
    if !same {
        tracing::info!("candle-fp8: mixture of experts: experts differ in form or shape, running them one by one");
        return Ok((experts, None));
    }
    let opts = Fp8Options::with_backend(first[0].backend());
    if let Some(prev) = previous {
        let stacks: Vec<&(Tensor, Tensor)> = prev.gate_up.iter().chain(std::iter::once(&prev.down)).collect();
        let reuse = stacks.len() == first.len()
            && parts.iter().enumerate().all(|(x, (p, _))| {
                p.iter()
                    .zip(&stacks)
                    .all(|(l, (w, s))| is_slice_of(l.weight(), w, x) && is_slice_of(l.weight_scale_inv(), s, x))
            });
        if reuse {
            let stacked = Stacked { opts, ..prev.clone() };
            return Ok((experts, Some(stacked)));
        }
    }
    let mut stacks = Vec::with_capacity(first.len());
    for j in 0..first.len() {
        let ws: Vec<&Tensor> = parts.iter().map(|(p, _)| p[j].weight()).collect();
        let ss: Vec<&Tensor> = parts.iter().map(|(p, _)| p[j].weight_scale_inv()).collect();
        stacks.push((Tensor::stack(&ws, 0)?, Tensor::stack(&ss, 0)?));
    }
    drop(parts);
    let (experts, stacked) = views_of(experts, stacks, inter, opts)?;
    Ok((experts, Some(stacked)))
}

/// The experts rebuilt as views of `stacks` (`[gate|up]` or gate, up; then down), in the form
/// (fused or split gate/up) they had.
fn views_of(
    experts: Vec<SwiGlu>,
    mut stacks: Vec<(Tensor, Tensor)>,
    inter: usize,
    opts: Fp8Options,
) -> Result<(Vec<SwiGlu>, Stacked)> {
    // The experts' layers become views of the stacks; their own copies are dropped with them.
    let view = |(w, s): &(Tensor, Tensor), x: usize| -> Result<AnyLinear> {
        Ok(AnyLinear::Fp8(Fp8BlockLinear::new(w.get(x)?, s.get(x)?, None)?.with_options(&opts)))
    };
    let fused = stacks.len() == 2;
    let experts = experts
        .into_iter()
        .enumerate()
        .map(|(x, old)| {
            let gate_up = match old.gate_up {
                Proj::Fused(_, sizes) if fused => Proj::Fused(view(&stacks[0], x)?, sizes),
                _ => Proj::Split(vec![view(&stacks[0], x)?, view(&stacks[1], x)?]),
            };
            Ok(SwiGlu { gate_up, down: view(&stacks[stacks.len() - 1], x)? })
        })
        .collect::<Result<Vec<_>>>()?;
    let down = stacks.pop().expect("down is stacked");
    Ok((experts, Stacked { gate_up: stacks, down, inter, opts }))
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
        let (experts, stacked) = stack_experts(experts, None)?;
        let router = router.to_dtype(DType::F32)?.contiguous()?;
        Ok(Self { router, experts, top_k, norm_topk_prob, stacked, first: 0 })
    }

    /// The block from its router weight `[num_experts, hidden]` (any float dtype; kept as f32)
    /// and each expert's `[gate, up, down]` linears (gate and up `[I, hidden]`, down
    /// `[hidden, I]`, FP8 or dense). Gate and up are fused into one GEMM where they can be (FP8
    /// with `I` a multiple of 128, or dense of one dtype); FP8 experts of one shape are stacked
    /// for the grouped GEMMs ([`Fp8MoeExperts::is_grouped`]).
    ///
    /// Errors name the expert on widths that do not fit together, and the sizes when the router
    /// and the experts disagree or `experts_per_token` is not in `1..=num_experts`.
    pub fn from_experts(
        router: &Tensor,
        experts: Vec<[AnyLinear; 3]>,
        experts_per_token: usize,
        norm_topk_prob: bool,
    ) -> Result<Self> {
        let h = router.dim(1)?;
        let experts = experts
            .into_iter()
            .enumerate()
            .map(|(x, [gate, up, down])| {
                let (i, iu, hd) = (gate.out_dim(), up.out_dim(), down.out_dim());
                if i != iu || hd != h {
                    bail!(
                        "mixture of experts: expert {x} has gate width {i}, up width {iu} and down width {hd}; \
                         expected gate = up and down = the router's hidden size {h}"
                    )
                }
                Ok(SwiGlu { gate_up: Proj::build(vec![gate, up], true)?, down })
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(router, experts, experts_per_token, norm_topk_prob)
    }

    /// Whether the experts' weights are stacked for the grouped GEMMs (every expert an FP8
    /// MLP of one shape). The forward then runs them grouped, unless their provider is
    /// `dequant`.
    pub fn is_grouped(&self) -> bool {
        self.stacked.is_some()
    }

    /// Number of experts (the router's: all of them, also on an expert-parallel rank).
    pub fn num_experts(&self) -> usize {
        self.router.dim(0).unwrap_or(0)
    }

    /// The experts this block holds and runs: all of them, or an expert-parallel rank's range
    /// (tensor parallelism, `DecoderModel::shard`), whose forward adds only their contributions.
    pub fn local_experts(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.experts.len()
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
        let h = self.router.dim(1)?;
        let m = x.elem_count() / h.max(1);
        if x.dims().last() != Some(&h) {
            bail!("mixture of experts: input has shape {:?}, expected [.., {h}]", x.dims())
        }
        let logits = x.reshape((m, h))?.to_dtype(DType::F32)?.matmul(&self.router.t()?)?;
        host_top_k(&logits, self.top_k, self.norm_topk_prob, "mixture of experts")
    }

    pub(crate) fn experts(&self) -> &[SwiGlu] {
        &self.experts
    }

    /// Bytes of the f32 router weight.
    pub(crate) fn router_bytes(&self) -> usize {
        self.router.elem_count() * DType::F32.size_in_bytes()
    }

    /// Experts `[lo, hi)` of this (whole) block, with the whole router: an expert-parallel
    /// rank's share. Stacked experts are stacked anew, so the share holds only its own weights.
    pub(crate) fn expert_range(&self, lo: usize, hi: usize) -> Result<Self> {
        let e = self.num_experts();
        if self.local_experts() != (0..e) {
            bail!("mixture of experts: the block already holds only experts {:?} of {e}", self.local_experts())
        }
        if lo >= hi || hi > e {
            bail!("mixture of experts: expert range [{lo}, {hi}) of {e} experts")
        }
        let (experts, stacked) = stack_experts(self.experts[lo..hi].to_vec(), None)?;
        Ok(Self { experts, stacked, first: lo, ..self.clone() })
    }

    /// This block on `device`: stacked experts move as their stacks (the experts become views
    /// of the moved stacks again), others through `mv` linear by linear.
    pub(crate) fn to_device(&self, device: &Device, mv: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        let router = self.router.to_device(device)?;
        let Some(st) = &self.stacked else {
            let experts = self.experts.iter().map(|x| x.clone().map(mv)).collect::<Result<Vec<_>>>()?;
            return Ok(Self { router, experts, ..self.clone() });
        };
        let move_pair =
            |(w, s): &(Tensor, Tensor)| -> Result<(Tensor, Tensor)> { Ok((move_to(w, device)?, move_to(s, device)?)) };
        let stacks = st.gate_up.iter().chain(std::iter::once(&st.down)).map(move_pair).collect::<Result<Vec<_>>>()?;
        let (experts, stacked) = views_of(self.experts.clone(), stacks, st.inter, st.opts)?;
        Ok(Self { router, experts, stacked: Some(stacked), ..self.clone() })
    }

    /// This block with `f` applied to every expert's linears (the router is kept).
    pub(crate) fn map_linears(self, f: &dyn Fn(AnyLinear) -> Result<AnyLinear>) -> Result<Self> {
        let experts = self.experts.into_iter().map(|x| x.map(f)).collect::<Result<Vec<_>>>()?;
        let (experts, stacked) = stack_experts(experts, self.stacked.as_ref())?;
        Ok(Self { experts, stacked, ..self })
    }

    /// The stacks when the forward runs grouped: stacked experts whose provider quantizes the
    /// activations (the dequant provider multiplies bf16 activations: it keeps the loop).
    fn grouped(&self) -> Result<Option<&Stacked>> {
        let Some(st) = &self.stacked else { return Ok(None) };
        let quantizes = match self.experts.first().map(|x| &x.down) {
            Some(AnyLinear::Fp8(f)) => f.quantizes_activations()?,
            _ => false,
        };
        Ok(quantizes.then_some(st))
    }

    /// The experts' SwiGLU outputs `[rows, hidden]` (dtype `dtype`) of `xs`, the tokens' rows
    /// gathered in expert order, `counts[e]` rows per expert: the grouped GEMMs on the stacks.
    fn grouped_mlp(&self, st: &Stacked, xs: &Tensor, counts: &[usize], dtype: DType) -> Result<Tensor> {
        let gemm = |qa: &Tensor, sa: &Tensor, (w, s): &(Tensor, Tensor)| -> Result<Tensor> {
            fp8_grouped_matmul_contiguous_with(&st.opts, qa, sa, w, s, counts)?.to_dtype(dtype)
        };
        let (qa, sa) = quantize_activation(xs)?;
        if let ([(w, s)], DType::BF16) = (st.gate_up.as_slice(), dtype) {
            // The fused gate|up GEMM, SiLU·up and quantization: the composed ops' bits below
            // (one launch on CUDA at decode sizes).
            let (qa, sa) = fp8_grouped_swiglu_quantize_contiguous_with(&st.opts, &qa, &sa, w, s, counts)?;
            return gemm(&qa, &sa, &st.down);
        }
        let (gate, up) = match st.gate_up.as_slice() {
            [gu] => {
                let y = gemm(&qa, &sa, gu)?;
                (y.narrow(1, 0, st.inter)?, y.narrow(1, st.inter, st.inter)?)
            }
            [g, u] => (gemm(&qa, &sa, g)?, gemm(&qa, &sa, u)?),
            _ => bail!("mixture of experts: {} stacked gate/up parts", st.gate_up.len()),
        };
        // The composed ops of the per-expert path (`SwiGlu::forward`), so both give one result.
        let a = (candle_nn::ops::silu(&gate)? * &up)?;
        let (qa, sa) = quantize_activation(&a)?;
        gemm(&qa, &sa, &st.down)
    }

    /// The experts' SwiGLU outputs as [`Fp8MoeExperts::grouped_mlp`], one expert at a time.
    fn per_expert_mlp(&self, xs: &Tensor, counts: &[usize]) -> Result<Tensor> {
        let mut outs = Vec::new();
        let mut off = 0;
        for (expert, &c) in self.experts.iter().zip(counts) {
            if c > 0 {
                outs.push(expert.forward(&xs.narrow(0, off, c)?)?);
                off += c;
            }
        }
        Tensor::cat(&outs, 0)
    }

    /// The block's forward, on the grouped GEMMs when `grouped` and the experts allow it.
    fn forward_with(&self, x: &Tensor, grouped: bool) -> Result<Tensor> {
        if x.elem_count() == 0 {
            return x.zeros_like();
        }
        self.forward_as(x, grouped, x.dtype())?.reshape(x.dims())
    }

    /// The block's output `[tokens, hidden]` in `dtype`: routed on the device where
    /// [`Fp8MoeExperts::device_routed`] allows it (and `grouped`), else on the host.
    fn forward_as(&self, x: &Tensor, grouped: bool, dtype: DType) -> Result<Tensor> {
        if grouped && x.elem_count() > 0 {
            if let Some((st, x2)) = self.device_routed(x)? {
                return self.masked_mlp(st, &x2, dtype);
            }
        }
        self.host_routed_f32(x, grouped)?.to_dtype(dtype)
    }

    /// The stacks and `x` as `[tokens, hidden]` when the block routes on the device: grouped
    /// experts with a fused bf16 gate|up, bf16 tokens (at most [`DEVICE_ROUTING_MAX_TOKENS`]),
    /// and the routing kernels on `x`'s device.
    fn device_routed(&self, x: &Tensor) -> Result<Option<(&Stacked, Tensor)>> {
        let h = self.router.dim(1)?;
        let m = x.elem_count() / h.max(1);
        let Some(st) = self.grouped()? else { return Ok(None) };
        let fits = st.gate_up.len() == 1
            && x.dtype() == DType::BF16
            && x.dims().last() == Some(&h)
            && (1..=DEVICE_ROUTING_MAX_TOKENS).contains(&m)
            && self.num_experts() <= MAX_DEVICE_EXPERTS
            && self.top_k <= MAX_DEVICE_TOP_K
            && on_kernels(x.device());
        Ok(if fits { Some((st, x.reshape((m, h))?)) } else { None })
    }

    /// The block on `x` `[tokens, hidden]` with the routing on the tokens' device (nothing read
    /// on the host): router logits, [`moe_route`] into the masked layout of the local experts
    /// (`max_m` = tokens), [`moe_gather_quantize`], the masked gate|up GEMM with SwiGLU and
    /// quantization, the masked down GEMM, [`moe_combine`] into `dtype`. Each row gets the bits
    /// of the host-routed grouped path (the same quantization and GEMM per row, the same
    /// summation order) given the same routing.
    fn masked_mlp(&self, st: &Stacked, x: &Tensor, dtype: DType) -> Result<Tensor> {
        let m = x.dim(0)?;
        let [(w, s)] = st.gate_up.as_slice() else {
            bail!("mixture of experts: the masked path needs a fused gate|up, got {} parts", st.gate_up.len())
        };
        let logits = x.to_dtype(DType::F32)?.matmul(&self.router.t()?)?;
        let r = moe_route(&logits, self.top_k, self.norm_topk_prob, self.local_experts(), m)?;
        let (qa, sa) = moe_gather_quantize(x, &r)?;
        let (qa, sa) = fp8_grouped_swiglu_quantize_masked_with(&st.opts, &qa, &sa, w, s, &r.counts)?;
        let y = fp8_grouped_matmul_masked_with(&st.opts, &qa, &sa, &st.down.0, &st.down.1, &r.counts)?;
        moe_combine(&y, &r, dtype)
    }

    /// The sum of this block's experts' weighted outputs, f32 `[tokens, hidden]`, before the
    /// cast to `x`'s dtype: on an expert-parallel rank its experts' share, which the ranks add
    /// up (in f32, so that their sum is the whole block's up to the order of the additions).
    pub(crate) fn forward_f32(&self, x: &Tensor, grouped: bool) -> Result<Tensor> {
        self.forward_as(x, grouped, DType::F32)
    }

    /// [`Fp8MoeExperts::forward_f32`] with the routing read on the host.
    fn host_routed_f32(&self, x: &Tensor, grouped: bool) -> Result<Tensor> {
        let h = self.router.dim(1)?;
        let routes = self.route(x)?;
        let m = routes.len();
        let dev = x.device();
        if m == 0 {
            return Tensor::zeros((0, h), DType::F32, dev);
        }
        let x2 = x.reshape((m, h))?;
        // Tokens grouped by (local) expert, ascending, each group in token order.
        let local = self.local_experts();
        let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); self.experts.len()];
        let mut weights: Vec<Vec<f32>> = vec![Vec::new(); self.experts.len()];
        for (t, route) in routes.iter().enumerate() {
            for &(e, w) in route.iter().filter(|(e, _)| local.contains(&(*e as usize))) {
                tokens[e as usize - local.start].push(t as u32);
                weights[e as usize - local.start].push(w);
            }
        }
        let counts: Vec<usize> = tokens.iter().map(Vec::len).collect();
        let n: usize = counts.iter().sum();
        if n == 0 {
            return Tensor::zeros((m, h), DType::F32, dev);
        }
        let ids = Tensor::from_vec(tokens.concat(), n, dev)?;
        let w = Tensor::from_vec(weights.concat(), (n, 1), dev)?;
        let xs = x2.index_select(&ids, 0)?;
        let y = match self.grouped()? {
            Some(st) if grouped => self.grouped_mlp(st, &xs, &counts, x.dtype())?,
            _ => self.per_expert_mlp(&xs, &counts)?,
        };
        // One scatter-add of every expert's weighted rows: each output element sums its token's
        // contributions in ascending expert order (candle's index_add walks the ids in order).
        let y = y.to_dtype(DType::F32)?.broadcast_mul(&w)?;
        Tensor::zeros((m, h), DType::F32, dev)?.index_add(&ids, &y, 0)
    }
}

impl Module for Fp8MoeExperts {
    /// The block on `x` `[.., hidden]` (bf16, f16 or f32), output in `x`'s shape and dtype.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// FP8 experts `[gate, up, down]` of width `i` over hidden `h`, from random weights.
    fn fp8_experts(e: usize, h: usize, i: usize, seed: u64) -> Vec<[AnyLinear; 3]> {
        let lin = |s: u64, n: usize, k: usize| {
            let w = Tensor::from_vec(values(s, n * k), (n, k), &Device::Cpu).unwrap();
            AnyLinear::Fp8(crate::Fp8BlockLinear::from_weight(&w, None).unwrap())
        };
        (0..e as u64)
            .map(|x| [lin(seed + 3 * x, i, h), lin(seed + 3 * x + 1, i, h), lin(seed + 3 * x + 2, h, i)])
            .collect()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    /// The device-routed (masked) path, run on the host here, gives the host-routed grouped
    /// path's bits: bf16 tokens, fused gate|up, all experts and an expert-parallel share.
    #[test]
    fn masked_path_is_bit_identical_to_the_host_routed_path() -> Result<()> {
        let (e, h) = (8, 256);
        let router = Tensor::from_vec(values(7, e * h), (e, h), &Device::Cpu)?;
        let moe = Fp8MoeExperts::from_experts(&router, fp8_experts(e, h, 128, 60), 3, true)?;
        let st = moe.grouped()?.expect("stacked");
        let x = Tensor::from_vec(values(78, 11 * h), (11, h), &Device::Cpu)?.to_dtype(DType::BF16)?;
        let host = moe.forward_with(&x, true)?;
        assert_eq!(bits(&moe.masked_mlp(st, &x, DType::BF16)?), bits(&host));
        assert_eq!(bits(&moe.masked_mlp(st, &x, DType::F32)?), bits(&moe.forward_f32(&x, true)?));
        let share = moe.expert_range(2, 6)?;
        let st = share.grouped()?.expect("stacked share");
        assert_eq!(bits(&share.masked_mlp(st, &x, DType::F32)?), bits(&share.forward_f32(&x, true)?));
        Ok(())
    }

    /// FP8 experts are stacked and the grouped forward gives the per-expert loop's bits, with
    /// gate|up fused (I = 128) or apart (I = 100), for f32 and bf16 input; mapping the linears
    /// unchanged keeps the stacks (the experts stay views of them), dequantizing drops them.
    #[test]
    fn grouped_forward_is_bit_identical_to_the_per_expert_loop() -> Result<()> {
        let (e, h) = (6, 192);
        let router = Tensor::from_vec(values(5, e * h), (e, h), &Device::Cpu)?;
        for (i, fused) in [(128, true), (100, false)] {
            let moe = Fp8MoeExperts::from_experts(&router, fp8_experts(e, h, i, 40), 3, true)?;
            assert!(moe.is_grouped() && moe.grouped()?.is_some());
            assert_eq!(moe.experts.iter().all(|x| x.gate_up.is_fused()), fused);
            let st = moe.stacked.as_ref().unwrap();
            assert_eq!(st.gate_up.len(), if fused { 1 } else { 2 });
            assert_eq!(st.down.0.dims(), &[e, h, i]);
            for dtype in [DType::F32, DType::BF16] {
                let x = Tensor::from_vec(values(77, 9 * h), (9, h), &Device::Cpu)?.to_dtype(dtype)?;
                let (g, p) = (moe.forward_with(&x, true)?, moe.forward_with(&x, false)?);
                assert_eq!(g.dtype(), dtype);
                assert_eq!(bits(&g), bits(&p), "I = {i}, {dtype:?}");
                assert!(bits(&g).iter().any(|&b| b != 0));
            }
            let same = moe.clone().map_linears(&Ok)?;
            let (a, b) = (same.stacked.as_ref().unwrap(), moe.stacked.as_ref().unwrap());
            assert!(is_slice_of(&a.down.0.get(2)?, &b.down.0, 2), "an unchanged map keeps the stacks");
            let dense = moe.map_linears(&|l| l.into_dense_bf16())?;
            assert!(!dense.is_grouped());
        }
        Ok(())
    }
}
