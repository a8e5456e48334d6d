//! Tensor parallelism of a decoder layer (Megatron-style): one rank's share of its weights.
//!
//! - q, k and v: column-parallel by heads (rank `r` holds query heads `[r·hq/w, (r+1)·hq/w)` and
//!   kv heads `[r·hkv/w, (r+1)·hkv/w)`, each part of a fused q|k|v cut separately), with their rows
//!   of the per-head q/k weights; the attention and the KV cache are then the rank's own.
//! - o: row-parallel over those heads; its partial outputs are summed over the ranks.
//! - gate and up: column-parallel (each part of a fused gate|up cut separately); down:
//!   row-parallel, summed.
//! - Mixture-of-experts MLPs: expert-parallel. Rank `r` holds whole experts
//!   `[r·E/w, (r+1)·E/w)` and the whole router, routes every token as one rank would, and adds up
//!   only its experts' weighted outputs; the ranks' f32 partials are summed before the cast to
//!   the activation dtype, so the block's output differs from one rank's only by the order of
//!   the f32 additions.
//! - Norms: replicated.
//! - Embedding and lm_head: vocab-parallel ([`VocabShard`], `ModelOptions::vocab_parallel`,
//!   default) or replicated. Rank `r` holds a contiguous range of whole 128-row blocks of the
//!   vocabulary (balanced: the ranks' block counts differ by at most one, the last block may be
//!   partial). The embedding looks up the rank's own ids, zeros for the others, and sums over the
//!   ranks (exact: one rank contributes each row); the lm_head computes the logits of its range,
//!   padded to the widest range for an all-gather of equal shapes, and the padding is dropped.
//!   A tied lm_head is the rank's rows of the embedding.
//!
//! Every cut is at whole 128 × 128 scale blocks ([`crate::shard`]): a model whose head counts or
//! widths cannot be split that way over `world` ranks is refused with the layer and the sizes.
//!
//! Vocab-parallel is the default because the lm_head is read at every step: for Qwen3-32B it is
//! 1.5 GB of bf16, a tenth of what a rank of two reads per token, and the embedding is as large
//! again in memory. What it adds per step, an all-reduce of `[tokens, hidden]` and an all-gather
//! of `[tokens, vocab]` logits, is small next to the layers' two all-reduces each.

use std::sync::Arc;

use candle_core::{bail, Device, Result, Tensor};

use super::layer::{DecoderLayer, Mlp, Proj, SwiGlu};
use crate::collective::Collective;
use crate::format::BLOCK;
use crate::linear::AnyLinear;
use crate::shard::{move_to, Shard, ShardDim};
use crate::Fp8BlockLinear;

/// The FP8 layer inside `l`, or an error naming `name` (dense and reference layers are not
/// split).
fn fp8<'a>(l: &'a AnyLinear, name: &str) -> Result<&'a Fp8BlockLinear> {
    match l {
        AnyLinear::Fp8(f) => Ok(f),
        _ => bail!("tensor parallel: {name} is not a blocked-FP8 layer (only FP8 linears are split)"),
    }
}

/// Each of the `sizes` parts of a projection (fused or split) cut along its outputs for `shard`,
/// fused again when it was.
fn split_parts(p: &Proj, name: &str, shard: Shard) -> Result<Proj> {
    match p {
        Proj::Fused(l, sizes) => {
            let f = fp8(l, name)?;
            let mut parts = Vec::with_capacity(sizes.len());
            let mut off = 0;
            for (j, &n) in sizes.iter().enumerate() {
                let part = f.output_rows(&format!("{name}[{j}]"), off, n)?;
                parts.push(part.shard(&format!("{name}[{j}]"), shard)?);
                off += n;
            }
            let refs: Vec<&Fp8BlockLinear> = parts.iter().collect();
            let local: Vec<usize> = parts.iter().map(Fp8BlockLinear::out_dim).collect();
            Ok(Proj::Fused(AnyLinear::Fp8(Fp8BlockLinear::concat(&refs)?), local))
        }
        Proj::Split(ls) => Ok(Proj::Split(
            ls.iter()
                .enumerate()
                .map(|(j, l)| Ok(AnyLinear::Fp8(fp8(l, name)?.shard(&format!("{name}[{j}]"), shard)?)))
                .collect::<Result<_>>()?,
        )),
    }
}

/// Rank `comm.rank()`'s share of layer `i` with `hq` query and `hkv` kv heads.
pub(super) fn shard_layer(
    layer: &DecoderLayer,
    i: usize,
    hq: usize,
    hkv: usize,
    comm: &Arc<dyn Collective>,
) -> Result<DecoderLayer> {
    let (rank, world) = (comm.rank(), comm.world());
    if hq % world != 0 || hkv % world != 0 {
        bail!(
            "tensor parallel: {hq} query heads and {hkv} kv heads cannot be split evenly over {world} ranks (layer {i})"
        )
    }
    let column = Shard::new(ShardDim::Output, rank, world)?;
    let row = Shard::new(ShardDim::Input, rank, world)?;
    let name = |what: &str| format!("model.layers.{i}.{what}");
    let qkv = split_parts(&layer.qkv, &name("self_attn.qkv_proj"), column)?;
    let o = AnyLinear::Fp8(fp8(&layer.o, &name("self_attn.o_proj"))?.shard(&name("self_attn.o_proj"), row)?);
    // The per-head q/k weights: this rank's query rows, then its kv rows.
    let (lq, lkv) = (hq / world, hkv / world);
    let qk_weight =
        Tensor::cat(&[layer.qk_weight.narrow(0, rank * lq, lq)?, layer.qk_weight.narrow(0, hq + rank * lkv, lkv)?], 0)?
            .contiguous()?;
    let mlp = match &layer.mlp {
        Mlp::Dense(m) => Mlp::Dense(SwiGlu {
            gate_up: split_parts(&m.gate_up, &name("mlp.gate_up_proj"), column)?,
            down: AnyLinear::Fp8(fp8(&m.down, &name("mlp.down_proj"))?.shard(&name("mlp.down_proj"), row)?),
        }),
        Mlp::Moe(m) => {
            // Expert-parallel: balanced ranges of whole experts, the router on every rank.
            let e = m.num_experts();
            if e < world {
                bail!("tensor parallel: layer {i} has {e} experts, fewer than the {world} ranks to spread them over")
            }
            Mlp::Moe(m.expert_range(rank * e / world, (rank + 1) * e / world)?)
        }
    };
    Ok(DecoderLayer { qkv, o, qk_weight, mlp, tp: Some(comm.clone()), ..layer.clone() })
}

/// `l` with its weights on `device`.
pub(super) fn linear_to_device(l: &AnyLinear, device: &Device) -> Result<AnyLinear> {
    Ok(match l {
        AnyLinear::Fp8(f) => AnyLinear::Fp8(f.to_device(device)?),
        AnyLinear::Fp8Reference(f) => AnyLinear::Fp8Reference(f.to_device(device)?),
        AnyLinear::Dense(d) => AnyLinear::Dense(candle_nn::Linear::new(
            move_to(d.weight(), device)?,
            d.bias().map(|b| move_to(b, device)).transpose()?,
        )),
    })
}

/// `layer` with its weights on `device` (a share cut on the host, moved to its rank's device).
pub(super) fn layer_to_device(layer: DecoderLayer, device: &Device) -> Result<DecoderLayer> {
    let mv = |l: AnyLinear| linear_to_device(&l, device);
    let mlp = match layer.mlp {
        Mlp::Dense(m) => Mlp::Dense(m.map(&mv)?),
        Mlp::Moe(m) => Mlp::Moe(m.to_device(device, &mv)?),
    };
    Ok(DecoderLayer {
        input_norm: move_to(&layer.input_norm, device)?,
        post_norm: move_to(&layer.post_norm, device)?,
        qkv: layer.qkv.map(&mv)?,
        o: mv(layer.o)?,
        qk_norm: layer.qk_norm,
        qk_weight: move_to(&layer.qk_weight, device)?,
        mlp,
        tp: layer.tp,
    })
}

/// One rank's range of the vocabulary in a vocab-parallel embedding and lm_head (see the
/// [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct VocabShard {
    /// Every rank's `(start, len)` rows, in rank order.
    ranges: Vec<(usize, usize)>,
    rank: usize,
    comm: Arc<dyn Collective>,
}

impl VocabShard {
    /// Rank `comm.rank()`'s range of a vocabulary of `vocab` tokens. Refused, naming both, when
    /// some rank would get no 128-row block.
    pub(super) fn new(vocab: usize, comm: &Arc<dyn Collective>) -> Result<Self> {
        let (rank, world) = (comm.rank(), comm.world());
        let blocks = vocab.div_ceil(BLOCK);
        if blocks < world {
            bail!(
                "tensor parallel: a vocabulary of {vocab} tokens ({blocks} blocks of {BLOCK} rows) cannot be split \
                 over {world} ranks (each needs a whole block at least); replicate the embedding and lm_head \
                 instead (ModelOptions::vocab_parallel(false))"
            )
        }
        let ranges = (0..world)
            .map(|r| {
                let (b0, b1) = (r * blocks / world, (r + 1) * blocks / world);
                let start = b0 * BLOCK;
                (start, (b1 * BLOCK).min(vocab) - start)
            })
            .collect();
        Ok(Self { ranges, rank, comm: comm.clone() })
    }

    /// This rank's `(start, len)` rows.
    pub(super) fn range(&self) -> (usize, usize) {
        self.ranges[self.rank]
    }

    /// The widest rank's rows: every rank's logits are padded to it for the gather.
    fn width(&self) -> usize {
        self.ranges.iter().map(|r| r.1).max().unwrap_or(0)
    }

    /// This rank's rows of an embedding table `[vocab, hidden]`.
    pub(super) fn embedding(&self, table: &Tensor) -> Result<Tensor> {
        let (start, len) = self.range();
        table.narrow(0, start, len)?.contiguous()
    }

    /// This rank's rows of an lm_head `[vocab, hidden]` (an FP8 one cut at its 128-row scale
    /// blocks).
    pub(super) fn lm_head(&self, l: &AnyLinear) -> Result<AnyLinear> {
        let (start, len) = self.range();
        Ok(match l {
            AnyLinear::Fp8(f) => AnyLinear::Fp8(f.output_rows("lm_head", start, len)?),
            AnyLinear::Fp8Reference(f) => AnyLinear::Fp8Reference(f.output_rows("lm_head", start, len)?),
            AnyLinear::Dense(d) => AnyLinear::Dense(candle_nn::Linear::new(
                d.weight().narrow(0, start, len)?.contiguous()?,
                d.bias().map(|b| b.narrow(0, start, len)).transpose()?,
            )),
        })
    }

    /// The embeddings `[N, hidden]` of `ids` (u32 `[N]`) from this rank's rows `table`: its own
    /// ids looked up, zeros for the others, summed over the ranks.
    pub(super) fn lookup(&self, table: &Tensor, ids: &Tensor) -> Result<Tensor> {
        let (start, len) = self.range();
        let dev = ids.device();
        let (lo, hi) = (Tensor::new(start as u32, dev)?, Tensor::new((start + len) as u32, dev)?);
        let mine = (ids.broadcast_ge(&lo)? * ids.broadcast_lt(&hi)?)?;
        // max(id, start) − start: no u32 underflow for the ids below the range.
        let local = mine.where_cond(&ids.broadcast_maximum(&lo)?.broadcast_sub(&lo)?, &ids.zeros_like()?)?;
        let x = table.index_select(&local, 0)?;
        let x = mine.unsqueeze(1)?.broadcast_as(x.shape())?.where_cond(&x, &x.zeros_like()?)?;
        self.comm.all_reduce_sum(&x)
    }

    /// Every rank's logits `[M, len_r]` gathered into `[M, vocab]`.
    pub(super) fn gather_logits(&self, y: &Tensor) -> Result<Tensor> {
        let (m, len) = y.dims2()?;
        let w = self.width();
        let y = if len < w {
            Tensor::cat(&[y, &Tensor::zeros((m, w - len), y.dtype(), y.device())?], 1)?
        } else {
            y.clone()
        };
        let all = self.comm.all_gather(&y, 1)?;
        if self.ranges.iter().all(|r| r.1 == w) {
            return Ok(all);
        }
        let parts =
            self.ranges.iter().enumerate().map(|(r, &(_, l))| all.narrow(1, r * w, l)).collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, 1)
    }
}
