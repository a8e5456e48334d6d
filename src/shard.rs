//! Tensor-parallel sharding of blocked-FP8 linear layers: which part of a layer each of `world`
//! ranks holds, cut at the 128 × 128 weight-scale blocks.
//!
//! - [`ShardDim::Output`] (column-parallel): rank `r` holds output rows `[r·N/w, (r+1)·N/w)` of
//!   the weight, their scale rows and their bias; it computes that slice of the outputs.
//! - [`ShardDim::Input`] (row-parallel): rank `r` holds input columns `[r·K/w, (r+1)·K/w)` and
//!   their scale columns; it computes a partial sum of every output, which the ranks add (an
//!   all-reduce). The bias goes to rank 0 only, so that it is added once.
//!
//! A split must give every rank the same whole number of 128-blocks: one that cuts a block (its
//! scale would belong to two ranks) is refused, naming the layer, the size, the world size and
//! the block count. Each shard is an ordinary [`Fp8BlockLinear`]: its forward on a rank's input
//! slice is the unsharded layer's math on that slice, and [`Fp8BlockLinear::unshard`] puts the
//! shards back together bit for bit.
//!
//! The shards can be cut from a checkpoint loaded on the CPU (memory-mapped), so that only each
//! rank's part is copied to its GPU.

use candle_core::{bail, CpuStorage, Device, Result, Storage, Tensor};

use crate::format::BLOCK;
use crate::Fp8BlockLinear;

/// Whether `t` is the whole of its buffer (a host tensor; a device one counts as not known).
fn owns_buffer(t: &Tensor) -> bool {
    let (st, l) = t.storage_and_layout();
    let len = match &*st {
        Storage::Cpu(c) => match c {
            CpuStorage::U8(v) => v.len(),
            CpuStorage::U32(v) => v.len(),
            CpuStorage::BF16(v) => v.len(),
            CpuStorage::F16(v) => v.len(),
            CpuStorage::F32(v) => v.len(),
            CpuStorage::F8E4M3(v) => v.len(),
            _ => return false,
        },
        _ => return false,
    };
    l.start_offset() == 0 && l.is_contiguous() && len == t.elem_count()
}

/// `t` on `device`. A view of a larger buffer (a shard of a layer cut on the host) is copied
/// out first: candle moves a tensor's whole buffer, which would put every rank's part on each
/// rank's device.
pub(crate) fn move_to(t: &Tensor, device: &Device) -> Result<Tensor> {
    if t.device().same_device(device) {
        Ok(t.clone())
    } else if owns_buffer(t) {
        t.to_device(device)
    } else {
        t.force_contiguous()?.to_device(device)
    }
}

/// Which dimension of a linear layer is split over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardDim {
    /// The output features `N` (column-parallel): each rank computes a slice of the outputs.
    Output,
    /// The input features `K` (row-parallel): each rank computes a partial sum of all outputs.
    Input,
}

/// One rank's part of a layer split over `world` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// The dimension split.
    pub dim: ShardDim,
    /// This rank, `0 <= rank < world`.
    pub rank: usize,
    /// Ranks in all (1: the whole layer).
    pub world: usize,
}

impl Shard {
    /// Rank `rank` of `world` along `dim`.
    pub fn new(dim: ShardDim, rank: usize, world: usize) -> Result<Self> {
        if world == 0 || rank >= world {
            bail!("shard: rank {rank} of world size {world} (need world >= 1 and rank < world)")
        }
        Ok(Self { dim, rank, world })
    }

    /// `(start, len)` of this rank's part of a dimension of `size` elements: equal parts of
    /// whole 128-blocks (`world == 1`: all of it, whatever the size). `what` names the layer
    /// and dimension in the error.
    pub fn range(&self, size: usize, what: &str) -> Result<(usize, usize)> {
        if self.world == 1 {
            return Ok((0, size));
        }
        if size % (self.world * BLOCK) != 0 {
            bail!(
                "{what}: {size} cannot be split over {} ranks at {BLOCK}-wide scale blocks ({} blocks{}): every \
                 rank must hold the same whole number of blocks",
                self.world,
                size.div_ceil(BLOCK),
                if size % BLOCK != 0 { ", the last one partial" } else { "" }
            )
        }
        let len = size / self.world;
        Ok((self.rank * len, len))
    }
}

impl Fp8BlockLinear {
    /// This layer's part for `shard` (see the [module docs](crate::shard)): the weight, its scale
    /// blocks and (output split, or input split on rank 0) the bias. Refused, naming `name`, the
    /// size and the world size, when the split would cut a 128-block.
    pub fn shard(&self, name: &str, shard: Shard) -> Result<Fp8BlockLinear> {
        match shard.dim {
            ShardDim::Output => {
                let (start, len) = shard.range(self.out_dim(), &format!("{name}: out_dim"))?;
                self.output_rows(name, start, len)
            }
            ShardDim::Input => {
                let k = self.in_dim();
                let (start, len) = shard.range(k, &format!("{name}: in_dim"))?;
                let (bs, bl) = block_range(start, len, k);
                let bias = if shard.rank == 0 { self.bias().cloned() } else { None };
                Ok(Fp8BlockLinear::new_named(
                    name,
                    self.weight().narrow(1, start, len)?.contiguous()?,
                    self.weight_scale_inv().narrow(1, bs, bl)?.contiguous()?,
                    bias,
                )?
                .with_backend(self.backend()))
            }
        }
    }

    /// Output rows `[start, start + len)` of this layer with their scale rows and bias: a part
    /// of a fused projection (q of q|k|v). `start` must be a multiple of 128 and the rows end
    /// on a block boundary or at the last row.
    pub(crate) fn output_rows(&self, name: &str, start: usize, len: usize) -> Result<Fp8BlockLinear> {
        let n = self.out_dim();
        if start % BLOCK != 0 || start + len > n || ((start + len) % BLOCK != 0 && start + len != n) {
            bail!("{name}: rows [{start}, {}) of {n} do not start and end on {BLOCK}-row scale blocks", start + len)
        }
        let (bs, bl) = block_range(start, len, n);
        let bias = self.bias().map(|b| b.narrow(0, start, len)).transpose()?;
        Ok(Fp8BlockLinear::new_named(
            name,
            self.weight().narrow(0, start, len)?.contiguous()?,
            self.weight_scale_inv().narrow(0, bs, bl)?.contiguous()?,
            bias,
        )?
        .with_backend(self.backend()))
    }

    /// This layer with its weight, scales and bias on `device` (the same values and backend): a
    /// shard cut on the host, moved to its rank's device.
    pub fn to_device(&self, device: &Device) -> Result<Fp8BlockLinear> {
        if self.weight().device().same_device(device) {
            return Ok(self.clone());
        }
        Ok(Fp8BlockLinear::new_named(
            "shard",
            move_to(self.weight(), device)?,
            move_to(self.weight_scale_inv(), device)?,
            self.bias().map(|b| move_to(b, device)).transpose()?,
        )?
        .with_backend(self.backend()))
    }

    /// The layer the shards of one split came from, in rank order: concatenated along `dim`
    /// (the bias: concatenated for an output split, rank 0's for an input split).
    pub fn unshard(name: &str, parts: &[&Fp8BlockLinear], dim: ShardDim) -> Result<Fp8BlockLinear> {
        let Some(first) = parts.first() else { bail!("{name}: unshard of no parts") };
        let weights: Vec<&Tensor> = parts.iter().map(|p| p.weight()).collect();
        let scales: Vec<&Tensor> = parts.iter().map(|p| p.weight_scale_inv()).collect();
        let axis = match dim {
            ShardDim::Output => 0,
            ShardDim::Input => 1,
        };
        for (i, p) in parts.iter().enumerate() {
            let size = if axis == 0 { p.out_dim() } else { p.in_dim() };
            if i + 1 < parts.len() && size % BLOCK != 0 {
                bail!("{name}: part {i} holds {size} along the split dimension, not whole {BLOCK}-blocks")
            }
        }
        let bias = match dim {
            ShardDim::Output => match parts.iter().map(|p| p.bias().cloned()).collect::<Option<Vec<_>>>() {
                Some(bs) => Some(Tensor::cat(&bs, 0)?),
                None if parts.iter().all(|p| p.bias().is_none()) => None,
                None => bail!("{name}: some parts have a bias and some do not"),
            },
            ShardDim::Input => first.bias().cloned(),
        };
        Ok(Fp8BlockLinear::new_named(name, Tensor::cat(&weights, axis)?, Tensor::cat(&scales, axis)?, bias)?
            .with_backend(first.backend()))
    }
}

/// The scale blocks `(start, len)` covering elements `[start, start + len)` of a dimension of
/// `size` (start a multiple of the block; the last block may be partial).
fn block_range(start: usize, len: usize, size: usize) -> (usize, usize) {
    let first = start / BLOCK;
    let end = (start + len).min(size).div_ceil(BLOCK);
    (first, end - first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row range of a host tensor is a view of its buffer (moving it would move the whole
    /// buffer); a copy of it owns its own.
    #[test]
    fn views_are_told_from_whole_buffers() -> Result<()> {
        let t = Tensor::arange(0f32, 24.0, &Device::Cpu)?.reshape((6, 4))?;
        assert!(owns_buffer(&t));
        for (start, len) in [(0, 3), (3, 3), (2, 2)] {
            let v = t.narrow(0, start, len)?;
            assert!(!owns_buffer(&v), "rows [{start}, {})", start + len);
            let c = v.force_contiguous()?;
            assert!(owns_buffer(&c));
            assert_eq!(c.to_vec2::<f32>()?, v.to_vec2::<f32>()?);
        }
        assert!(!owns_buffer(&t.narrow(1, 0, 2)?), "a column range");
        let same = move_to(&t.narrow(0, 0, 3)?, &Device::Cpu)?;
        assert_eq!(same.dims(), [3, 4]);
        Ok(())
    }
}
