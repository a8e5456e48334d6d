//! [`Unreduced`]: a GEMM output whose split-K reduction may be left to its consumer.

use candle_core::{Result, Tensor};

/// A layer output whose split-K reduction may be left to its consumer
/// ([`crate::Fp8BlockLinear::forward_quantized_unreduced`]).
///
/// At decode sizes our kernels split K across CTAs for narrow, deep layers (e.g. Qwen3-32B's o
/// and down projections at M ≤ 16) and normally add the f32 partial sums in a separate launch.
/// A consumer that reads the output once — the next residual add + RMSNorm,
/// [`crate::ops::add_rmsnorm_quantize_unreduced`] — adds the partials itself (in split order,
/// bit-identical to that reduction), one launch fewer on the step's critical path.
#[derive(Debug, Clone)]
pub enum Unreduced {
    /// The finished output `[M, N]`.
    Done(Tensor),
    /// f32 `[splits, M, N]` (contiguous, CUDA): our split-K kernel's partial sums, not yet added.
    Partials(Tensor),
}

impl Unreduced {
    /// The output `[M, N]`: the tensor itself, or (partials) bf16 from the GEMM's own reduction,
    /// launched now.
    pub fn reduce(&self) -> Result<Tensor> {
        match self {
            Unreduced::Done(t) => Ok(t.clone()),
            #[cfg(feature = "cuda")]
            Unreduced::Partials(p) => super::hopper::reduce_partials(p),
            #[cfg(not(feature = "cuda"))]
            Unreduced::Partials(_) => {
                candle_core::bail!("candle-fp8: split-K partials exist only on the CUDA kernel path")
            }
        }
    }
}
