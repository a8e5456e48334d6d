//! The per-layer KV cache: preallocated `[B, kv_heads, capacity, head_dim]` buffers written in
//! place, grown geometrically.

use candle_core::{bail, DType, Device, Result, Tensor};

/// A preallocated per-layer KV cache `[B, kv_heads, capacity, head_dim]`, written in place.
#[derive(Debug, Clone, Default)]
pub(crate) struct KvCache {
    pub(crate) k: Option<Tensor>,
    pub(crate) v: Option<Tensor>,
    pub(crate) len: usize,
}

impl KvCache {
    pub(crate) fn capacity(&self) -> usize {
        self.k.as_ref().map(|k| k.dims()[2]).unwrap_or(0)
    }

    /// Writes `k`, `v` `[B, kv_heads, T, head_dim]` (contiguous) at `offset` and returns views of
    /// the first `offset + T` positions.
    pub(crate) fn append(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        offset: usize,
        capacity_hint: usize,
    ) -> Result<(Tensor, Tensor)> {
        let (b, h, t, d) = k.dims4()?;
        self.reserve((b, h, t, d), k.dtype(), k.device(), offset, capacity_hint)?;
        let (kc, vc) = (self.k.as_ref().unwrap(), self.v.as_ref().unwrap());
        kc.slice_set(k, 2, offset)?;
        vc.slice_set(v, 2, offset)?;
        self.len = offset + t;
        Ok((kc.narrow(2, 0, offset + t)?, vc.narrow(2, 0, offset + t)?))
    }

    /// Checks that `T` positions `[B, kv_heads, T, head_dim]` can be written at `offset` (a new
    /// sequence at 0, or the next position) and grows the buffers (keeping their first `len`
    /// positions) so that they hold `offset + T`. `len` is left to the writer.
    pub(crate) fn reserve(
        &mut self,
        (b, h, t, d): (usize, usize, usize, usize),
        dtype: DType,
        device: &Device,
        offset: usize,
        capacity_hint: usize,
    ) -> Result<()> {
        if offset != self.len {
            if offset == 0 {
                self.len = 0;
            } else {
                bail!(
                    "decoder: seqlen_offset {offset} but the KV cache holds {} positions; call \
                     clear_kv_cache() before starting a new sequence",
                    self.len
                )
            }
        }
        let need = offset + t;
        let same_batch = self.k.as_ref().map(|c| c.dims()[0] == b).unwrap_or(false);
        if !same_batch && offset != 0 {
            bail!("decoder: batch size changed to {b} in the middle of a sequence")
        }
        if !same_batch || self.capacity() < need {
            // Grow geometrically so that a long generation reallocates O(log n) times.
            let cap = need.max(capacity_hint).max(self.capacity() * 2).next_multiple_of(64);
            let nk = Tensor::zeros((b, h, cap, d), dtype, device)?;
            let nv = Tensor::zeros((b, h, cap, d), dtype, device)?;
            if let (true, Some(ok), Some(ov)) = (same_batch && self.len > 0, &self.k, &self.v) {
                nk.slice_set(&ok.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                nv.slice_set(&ov.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            self.k = Some(nk);
            self.v = Some(nv);
        }
        Ok(())
    }
}
