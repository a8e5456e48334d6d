//! NCCL communicators as a [`Collective`](crate::collective::Collective): the ranks of one
//! process, one GPU each, summing and gathering on their devices' candle streams.

use std::sync::Mutex;

use candle_core::cuda_backend::cudarc::nccl::safe::{Comm, ReduceOp};
use candle_core::cuda_backend::{CudaDevice, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{bail, DType, Device, Result, Storage, Tensor};

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView};

use super::device::view;

/// One rank of an NCCL group: a communicator on its device's candle stream.
#[derive(Debug)]
pub struct Nccl {
    comm: Mutex<Comm>,
    rank: usize,
    world: usize,
    device: CudaDevice,
}

// SAFETY: an NCCL communicator may be used from any host thread as long as its calls do not
// overlap; every call goes through the mutex.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

impl Nccl {
    /// The ranks of a group over `devices` (rank `r` on `devices[r]`, each a different GPU),
    /// created together in this process (`ncclCommInitAll`); move each to its rank's thread.
    pub fn for_devices(devices: &[Device]) -> Result<Vec<Nccl>> {
        let cuda: Vec<CudaDevice> = devices
            .iter()
            .enumerate()
            .map(|(r, d)| match d {
                Device::Cuda(c) => Ok(c.clone()),
                d => bail!("Nccl: rank {r}'s device is {d:?}, not a CUDA device"),
            })
            .collect::<Result<_>>()?;
        if cuda.is_empty() {
            bail!("Nccl: no devices")
        }
        let streams = cuda.iter().map(|d| d.cuda_stream()).collect();
        // cudarc opens libnccl on first use and panics when it cannot: an error here instead.
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Comm::from_devices(streams)));
        let comms = match made {
            Ok(r) => r.map_err(|e| {
                candle_core::Error::Msg(format!("Nccl: ncclCommInitAll over {} devices: {e:?}", cuda.len()))
            })?,
            Err(_) => bail!(
                "Nccl: the NCCL library could not be loaded (cudarc looks for libnccl.so on \
                 LD_LIBRARY_PATH; link libnccl.so.2 under that name, see docs/cuda.md)"
            ),
        };
        let world = comms.len();
        Ok(comms
            .into_iter()
            .zip(cuda)
            .enumerate()
            .map(|(rank, (comm, device))| Nccl { comm: Mutex::new(comm), rank, world, device })
            .collect())
    }

    /// `t` as a contiguous f32 tensor on this rank's device (checked).
    fn f32_on_device(&self, t: &Tensor, what: &str) -> Result<Tensor> {
        if !t.device().same_device(&Device::Cuda(self.device.clone())) {
            bail!("Nccl {what}: rank {}'s tensor is on {:?}, not on its device", self.rank, t.device())
        }
        t.to_dtype(DType::F32)?.contiguous()
    }

    /// Runs `op(comm, send, recv)` with `t`'s f32 values as the send buffer and a new buffer of
    /// `out_len` values as the receive buffer; returns the receive buffer as a flat tensor.
    fn run(
        &self,
        t: &Tensor,
        out_len: usize,
        what: &str,
        op: impl FnOnce(&Comm, &CudaView<f32>, &mut CudaSlice<f32>) -> std::result::Result<(), String>,
    ) -> Result<Tensor> {
        // The send view borrows `t`'s storage until the call is enqueued.
        let recv = {
            let (st, l) = t.storage_and_layout();
            let Storage::Cuda(cs) = &*st else { bail!("Nccl {what}: not a CUDA tensor") };
            let send = view::<f32>(what, cs, l, l.shape().elem_count())?;
            // SAFETY: NCCL writes every element of the receive buffer.
            let mut recv = unsafe { self.device.alloc::<f32>(out_len)? };
            let comm = self.comm.lock().map_err(|_| candle_core::Error::Msg("Nccl: a rank panicked".into()))?;
            op(&comm, &send, &mut recv)
                .map_err(|e| candle_core::Error::Msg(format!("Nccl {what} (rank {}): {e}", self.rank)))?;
            recv
        };
        Ok(Tensor::from_storage(
            Storage::Cuda(CudaStorage::wrap_cuda_slice(recv, self.device.clone())),
            out_len,
            BackpropOp::none(),
            false,
        ))
    }
}

impl crate::collective::Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor> {
        let f = self.f32_on_device(t, "all_reduce_sum")?;
        let n = f.elem_count();
        let sum = self.run(&f, n, "all_reduce_sum", |c, s, r| {
            c.all_reduce(s, r, &ReduceOp::Sum).map(drop).map_err(|e| format!("{e:?}"))
        })?;
        sum.reshape(t.dims())?.to_dtype(t.dtype())
    }
    fn all_gather(&self, t: &Tensor, dim: usize) -> Result<Tensor> {
        let f = self.f32_on_device(t, "all_gather")?;
        let n = f.elem_count();
        let flat = self.run(&f, n * self.world, "all_gather", |c, s, r| {
            c.all_gather(s, r).map(drop).map_err(|e| format!("{e:?}"))
        })?;
        // Rank-major: rank r's tensor is the r-th block of n values.
        let parts = (0..self.world).map(|r| flat.narrow(0, r * n, n)?.reshape(t.dims())).collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, dim)?.to_dtype(t.dtype())
    }
}
