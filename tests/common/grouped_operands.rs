//! Random operands of the grouped-GEMM suites (`tests/grouped.rs` on the CPU,
//! `tests/gpu_grouped.rs` on the GPU): e4m3 codes and stacked expert weights with log-spaced
//! block scales.

use candle_core::{Device, Result, Tensor};
use candle_fp8::format::{f32_to_e4m3, weight_scale_shape, F8E4M3};
use candle_fp8::testing::Rng;

/// `len` e4m3 codes of N(0, 100²) values (saturating: the whole code range).
pub fn codes(rng: &mut Rng, len: usize) -> Vec<F8E4M3> {
    (0..len).map(|_| f32_to_e4m3(rng.normal() * 100.0)).collect()
}

/// Stacked weights `[E, N, K]` and scales `[E, ceil(N/128), ceil(K/128)]` (2⁻¹⁰ … 2⁻⁴) on the
/// host.
pub fn weights(rng: &mut Rng, e: usize, n: usize, k: usize) -> Result<(Tensor, Tensor)> {
    let (nb, kb) = weight_scale_shape(n, k);
    let w = Tensor::from_vec(codes(rng, e * n * k), (e, n, k), &Device::Cpu)?;
    let sw: Vec<f32> = (0..e * nb * kb).map(|_| rng.log_spaced(-10.0, -4.0)).collect();
    Ok((w, Tensor::from_vec(sw, (e, nb, kb), &Device::Cpu)?))
}
