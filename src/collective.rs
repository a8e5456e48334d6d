//! Collective operations between the ranks of a tensor-parallel model: the sum after a
//! row-parallel layer ([`Collective::all_reduce_sum`]) and the concatenation after a
//! vocab-parallel one ([`Collective::all_gather`]).
//!
//! - [`Single`]: world size 1 (the same code path with nothing to exchange).
//! - [`ThreadGroup`]: ranks on the threads of one process, exchanging through host memory;
//!   every rank adds the contributions in rank order, so every rank holds the same bits. It
//!   runs tensor parallelism on the CPU (and checks it against one rank) without a GPU.
//!
//! - `Nccl` (feature `nccl`): one GPU per rank, NCCL communicators on the devices' candle
//!   streams.

use std::sync::{Arc, Barrier, Mutex};

use candle_core::{bail, DType, Device, Result, Tensor};

#[cfg(feature = "nccl")]
pub use crate::cuda::nccl::Nccl;

/// The exchange between the ranks of one tensor-parallel group. Every rank calls each
/// operation in the same order with tensors of the same shape and dtype.
pub trait Collective: Send + Sync + std::fmt::Debug {
    /// This rank, `0 <= rank < world`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world(&self) -> usize;
    /// The sum of `t` over the ranks, on every rank, in `t`'s dtype and device. The partials
    /// are added in f32 (then converted once), so that a bf16 partial is not rounded twice.
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor>;
    /// The ranks' `t` concatenated along `dim` in rank order, on every rank.
    fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor>;
}

/// World size 1: every operation returns its input.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }
    fn all_gather(&self, t: &Tensor, _dim: usize) -> Result<Tensor> {
        Ok(t.clone())
    }
}

/// What the ranks of a [`ThreadGroup`] share: one slot per rank and a barrier.
#[derive(Debug)]
struct Shared {
    slots: Mutex<Vec<Option<Tensor>>>,
    barrier: Barrier,
}

/// One rank of a group of threads in one process ([`ThreadGroup::new`] makes all of them; move
/// each to its thread). Contributions go through host memory (f32 for the sum).
#[derive(Debug, Clone)]
pub struct ThreadGroup {
    rank: usize,
    world: usize,
    shared: Arc<Shared>,
}

impl ThreadGroup {
    /// The `world` ranks of a new group, rank `r` at index `r`.
    pub fn new(world: usize) -> Result<Vec<ThreadGroup>> {
        if world == 0 {
            bail!("ThreadGroup: world size 0")
        }
        let shared = Arc::new(Shared { slots: Mutex::new(vec![None; world]), barrier: Barrier::new(world) });
        Ok((0..world).map(|rank| ThreadGroup { rank, world, shared: shared.clone() }).collect())
    }

    /// Deposits `t` (on the host), waits for every rank, returns every rank's contribution in
    /// rank order, and waits again before the slots are reused.
    fn exchange(&self, t: Tensor) -> Result<Vec<Tensor>> {
        self.shared.slots.lock().map_err(|_| candle_core::Error::Msg("ThreadGroup: a rank panicked".into()))?
            [self.rank] = Some(t);
        self.shared.barrier.wait();
        let all: Vec<Option<Tensor>> = self
            .shared
            .slots
            .lock()
            .map_err(|_| candle_core::Error::Msg("ThreadGroup: a rank panicked".into()))?
            .clone();
        self.shared.barrier.wait();
        all.into_iter()
            .enumerate()
            .map(|(r, t)| {
                t.ok_or_else(|| candle_core::Error::Msg(format!("ThreadGroup: rank {r} contributed nothing")))
            })
            .collect()
    }

    fn check_same(&self, what: &str, parts: &[Tensor], dims_but: Option<usize>) -> Result<()> {
        let first = &parts[0];
        for (r, p) in parts.iter().enumerate() {
            let same_dims = match dims_but {
                None => p.dims() == first.dims(),
                Some(d) => {
                    p.rank() == first.rank()
                        && p.dims().iter().zip(first.dims()).enumerate().all(|(i, (a, b))| i == d || a == b)
                }
            };
            if !same_dims || p.dtype() != first.dtype() {
                bail!(
                    "ThreadGroup {what}: rank {r} gave {:?} {:?}, rank 0 {:?} {:?}",
                    p.dtype(),
                    p.dims(),
                    first.dtype(),
                    first.dims()
                )
            }
        }
        Ok(())
    }
}

impl Collective for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        let parts = self.exchange(t.to_device(&Device::Cpu)?.to_dtype(DType::F32)?)?;
        self.check_same("all_reduce_sum", &parts, None)?;
        let mut sum = parts[0].clone();
        for p in &parts[1..] {
            sum = (sum + p)?;
        }
        sum.to_dtype(t.dtype())?.to_device(t.device())
    }
    fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor> {
        let parts = self.exchange(t.to_device(&Device::Cpu)?)?;
        self.check_same("all_gather", &parts, Some(dim))?;
        Tensor::cat(&parts, dim)?.to_device(t.device())
    }
}
