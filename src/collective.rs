//! Collective operations between the ranks of a tensor-parallel model: the sum after a
//! row-parallel layer ([`Collective::all_reduce_sum`]) and the concatenation after a
//! vocab-parallel one ([`Collective::all_gather`]).
//!
//! - [`Single`]: world size 1 (the same code path with nothing to exchange).
//! - [`ThreadGroup`]: ranks on the threads of one process, exchanging through host memory;
//!   every rank adds the contributions in rank order, so every rank holds the same bits. It
//!   runs tensor parallelism on the CPU (and checks it against one rank) without a GPU. A rank
//!   whose thread ends early (a failed load) makes the others' exchanges fail, not hang.
//! - `Nccl` (feature `nccl`): one GPU per rank, NCCL communicators on the devices' candle
//!   streams.
//! - [`Timed`]: any of these with the time spent in its operations counted ([`CommStats`]).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// What the ranks of a [`ThreadGroup`] share: one slot per rank and a barrier that knows when a
/// rank has left.
#[derive(Debug)]
struct Shared {
    world: usize,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug)]
struct State {
    slots: Vec<Option<Tensor>>,
    /// Ranks waiting at the current barrier.
    arrived: usize,
    /// Barriers completed so far.
    generation: u64,
    /// The first rank whose handle was dropped: a barrier it has not reached can never complete.
    left: Option<usize>,
}

/// One rank of a group of threads in one process ([`ThreadGroup::new`] makes all of them; move
/// each to its thread). Contributions go through host memory (f32 for the sum).
///
/// Dropping a rank's handle (its thread returned, with an error or not, or panicked) tells the
/// group: a rank waiting in an exchange that the dropped rank never joined gets an error naming
/// it instead of waiting forever, and so does every later exchange. Ranks that make the same
/// calls in the same order are never affected by a rank that leaves after its last exchange.
#[derive(Debug)]
pub struct ThreadGroup {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadGroup {
    /// The `world` ranks of a new group, rank `r` at index `r`.
    pub fn new(world: usize) -> Result<Vec<ThreadGroup>> {
        if world == 0 {
            bail!("ThreadGroup: world size 0")
        }
        let state = State { slots: vec![None; world], arrived: 0, generation: 0, left: None };
        let shared = Arc::new(Shared { world, state: Mutex::new(state), wake: Condvar::new() });
        Ok((0..world).map(|rank| ThreadGroup { rank, shared: shared.clone() }).collect())
    }

    /// The group's state (a panic elsewhere never leaves it half-written: nothing panics while
    /// holding the lock, so a poisoned lock is still consistent).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every rank has reached this barrier; an error naming the rank that left if
    /// one did before reaching it.
    fn barrier<'a>(&self, mut s: MutexGuard<'a, State>, what: &str) -> Result<MutexGuard<'a, State>> {
        let left = |r: usize| {
            candle_core::Error::Msg(format!(
                "ThreadGroup {what}: rank {r} of {} left the group (its thread ended, failed or panicked) while \
                 rank {} waits for it",
                self.shared.world, self.rank
            ))
        };
        if let Some(r) = s.left {
            return Err(left(r));
        }
        let generation = s.generation;
        s.arrived += 1;
        if s.arrived == self.shared.world {
            s.arrived = 0;
            s.generation += 1;
            self.shared.wake.notify_all();
            return Ok(s);
        }
        loop {
            s = self.shared.wake.wait(s).unwrap_or_else(|e| e.into_inner());
            if s.generation != generation {
                return Ok(s);
            }
            if let Some(r) = s.left {
                return Err(left(r));
            }
        }
    }

    /// Deposits `t` (on the host), waits for every rank, returns every rank's contribution in
    /// rank order, and waits again before the slots are reused.
    fn exchange(&self, t: Tensor, what: &str) -> Result<Vec<Tensor>> {
        let mut s = self.lock();
        s.slots[self.rank] = Some(t);
        let s = self.barrier(s, what)?;
        let all: Vec<Option<Tensor>> = s.slots.clone();
        drop(self.barrier(s, what)?);
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
        self.shared.world
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        let parts = self.exchange(t.to_device(&Device::Cpu)?.to_dtype(DType::F32)?, "all_reduce_sum")?;
        self.check_same("all_reduce_sum", &parts, None)?;
        let mut sum = parts[0].clone();
        for p in &parts[1..] {
            sum = (sum + p)?;
        }
        sum.to_dtype(t.dtype())?.to_device(t.device())
    }
    fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor> {
        let parts = self.exchange(t.to_device(&Device::Cpu)?, "all_gather")?;
        self.check_same("all_gather", &parts, Some(dim))?;
        Tensor::cat(&parts, dim)?.to_device(t.device())
    }
}

impl Drop for ThreadGroup {
    fn drop(&mut self) {
        let mut s = self.lock();
        s.left.get_or_insert(self.rank);
        self.shared.wake.notify_all();
    }
}

/// Time spent in a [`Timed`] collective's operations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommStats {
    /// [`Collective::all_reduce_sum`] calls.
    pub all_reduce_calls: usize,
    /// Wall time in them.
    pub all_reduce: Duration,
    /// [`Collective::all_gather`] calls.
    pub all_gather_calls: usize,
    /// Wall time in them.
    pub all_gather: Duration,
}

impl CommStats {
    /// The operations between `earlier` (a snapshot of the same counter) and `self`.
    pub fn since(&self, earlier: &CommStats) -> CommStats {
        CommStats {
            all_reduce_calls: self.all_reduce_calls - earlier.all_reduce_calls,
            all_reduce: self.all_reduce.saturating_sub(earlier.all_reduce),
            all_gather_calls: self.all_gather_calls - earlier.all_gather_calls,
            all_gather: self.all_gather.saturating_sub(earlier.all_gather),
        }
    }
}

/// Another [`Collective`] whose operations are timed (wall time on the calling thread, counted
/// in [`CommStats`]). The time includes waiting for the slowest rank to arrive. On a GPU the
/// operations are only enqueued unless `synchronize` is set, which waits for the device before
/// the clock starts and after the operation (accurate times, but the host no longer runs ahead
/// of the device, so the step time grows).
#[derive(Debug)]
pub struct Timed {
    inner: Arc<dyn Collective>,
    synchronize: bool,
    stats: Mutex<CommStats>,
}

impl Timed {
    /// `inner` timed; `synchronize`: wait for the device around each operation.
    pub fn new(inner: Arc<dyn Collective>, synchronize: bool) -> Self {
        Self { inner, synchronize, stats: Mutex::new(CommStats::default()) }
    }

    /// The counters so far.
    pub fn stats(&self) -> CommStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn timed(
        &self,
        t: &Tensor,
        op: impl FnOnce() -> Result<Tensor>,
        add: impl FnOnce(&mut CommStats, Duration),
    ) -> Result<Tensor> {
        if self.synchronize {
            t.device().synchronize()?;
        }
        let start = Instant::now();
        let out = op()?;
        if self.synchronize {
            out.device().synchronize()?;
        }
        add(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()), start.elapsed());
        Ok(out)
    }
}

impl Collective for Timed {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world(&self) -> usize {
        self.inner.world()
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        self.timed(
            t,
            || self.inner.all_reduce_sum(t),
            |s, d| {
                s.all_reduce_calls += 1;
                s.all_reduce += d;
            },
        )
    }
    fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor> {
        self.timed(
            t,
            || self.inner.all_gather(t, dim),
            |s, d| {
                s.all_gather_calls += 1;
                s.all_gather += d;
            },
        )
    }
}
