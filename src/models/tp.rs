//! Tensor parallelism of a decoder layer (Megatron-style): one rank's share of its weights.
//!
//! - q, k and v: column-parallel by heads (rank `r` holds query heads `[r·hq/w, (r+1)·hq/w)` and
//!   kv heads `[r·hkv/w, (r+1)·hkv/w)`, each part of a fused q|k|v cut separately), with their rows
//!   of the per-head q/k weights; the attention and the KV cache are then the rank's own.
//! - o: row-parallel over those heads; its partial outputs are summed over the ranks.
//! - gate and up: column-parallel (each part of a fused gate|up cut separately); down:
//!   row-parallel, summed.
//! - Norms, embedding and lm_head: replicated.
//!
//! Every cut is at whole 128 × 128 scale blocks ([`crate::shard`]): a model whose head counts or
//! widths cannot be split that way over `world` ranks is refused with the layer and the sizes.

use std::sync::Arc;

use candle_core::{bail, Result, Tensor};

use super::layer::{DecoderLayer, Mlp, Proj, SwiGlu};
use crate::collective::Collective;
use crate::linear::AnyLinear;
use crate::shard::{Shard, ShardDim};
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
        Mlp::Moe(_) => bail!("tensor parallel: layer {i} is a mixture of experts (experts are not split yet)"),
    };
    Ok(DecoderLayer { qkv, o, qk_weight, mlp, tp: Some(comm.clone()), ..layer.clone() })
}
