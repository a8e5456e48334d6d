//! Test support (the `test-utils` feature): seeded random operands with scales that differ per
//! token, per N block and per K block (log-spaced, never zeros), so a wrong scale index, an
//! unwritten output or a transposed layout cannot hide; the CPU reference ([`reference`]); toy
//! checkpoints ([`checkpoints`]); and forcing one kernel configuration ([`with_gemm_config`]).

pub mod checkpoints;
pub mod reference;

pub use crate::dispatch::{choose_config, DeviceCaps, GemmConfig, ScheduleKind, DISPATCHED_CONFIGS};
use crate::format::{act_scale_m_stride, act_scales_view, f32_to_e4m3, num_blocks, weight_scale_shape, F8E4M3};
use candle_core::{Device, Result, Tensor};

/// Runs `f` with every GEMM of our kernels launched from the calling thread forced onto `cfg`
/// (instead of [`choose_config`]'s choice), then restores the previous setting (also when `f`
/// panics). A configuration that is not compiled makes the GEMM fail with the kernels'
/// "not compiled" status, never silently fall back. Per thread, so tests running in parallel in
/// one process do not see each other's configuration.
pub fn with_gemm_config<R>(cfg: GemmConfig, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<GemmConfig>);
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::dispatch::set_config_override(self.0);
        }
    }
    let _restore = Restore(crate::dispatch::set_config_override(Some(cfg)));
    f()
}

/// The capabilities of `device` as the provider choice sees them.
pub fn device_caps(device: &Device) -> Result<DeviceCaps> {
    crate::ops::device_caps(device)
}

/// The configurations our kernels are compiled for (`split_k` 0: any split; 1: none).
#[cfg(feature = "cuda")]
pub fn compiled_configs() -> Vec<GemmConfig> {
    crate::cuda::compiled_configs()
}

/// A small, fast, seedable generator (SplitMix64); deterministic across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Approximately standard normal (sum of uniforms; plenty for test data).
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 1.732_050_8 - 3.464_101_6
    }

    /// `2^e` with `e` uniform in `[lo, hi)`: log-spaced positive scales.
    pub fn log_spaced(&mut self, lo: f32, hi: f32) -> f32 {
        (lo + (hi - lo) * self.uniform()).exp2()
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[-1, 1)`.
    pub fn uniform_f32(&mut self) -> f32 {
        (self.unit_f64() * 2.0 - 1.0) as f32
    }

    /// Exactly standard normal (Box–Muller).
    pub fn normal_f32(&mut self) -> f32 {
        let u1 = self.unit_f64().max(1e-300);
        let u2 = self.unit_f64();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    /// `len` normal values scaled by `std`.
    pub fn normal_vec(&mut self, len: usize, std: f32) -> Vec<f32> {
        (0..len).map(|_| self.normal() * std).collect()
    }

    /// `len` exactly normal values (Box–Muller) scaled by `std`.
    pub fn normal_vec_f32(&mut self, len: usize, std: f32) -> Vec<f32> {
        (0..len).map(|_| self.normal_f32() * std).collect()
    }
}

/// The four GEMM operands, plus their raw host copies for independent references.
#[derive(Debug, Clone)]
pub struct Operands {
    /// e4m3 `[M, K]`.
    pub qa: Tensor,
    /// f32 `[M, ceil(K/128)]`, strides `(1, round_up(M, 4))`.
    pub sa: Tensor,
    /// e4m3 `[N, K]`.
    pub w: Tensor,
    /// f32 `[ceil(N/128), ceil(K/128)]`.
    pub sw: Tensor,
    /// Host copy of `qa`.
    pub qa_host: Vec<F8E4M3>,
    /// Host copy of the MN-major scale buffer behind `sa`.
    pub sa_host: Vec<f32>,
    /// Host copy of `w`.
    pub w_host: Vec<F8E4M3>,
    /// Host copy of `sw`.
    pub sw_host: Vec<f32>,
}

/// Random operands for an `m × n × k` GEMM on `device`: e4m3 codes from normal data spanning
/// the format's range, activation scales log-spaced in `[2^-6, 2^0)` per token and K block,
/// weight scales log-spaced in `[2^-10, 2^-4)` per 128×128 block.
pub fn random_operands(m: usize, n: usize, k: usize, seed: u64, device: &Device) -> Result<Operands> {
    let mut rng = Rng::new(seed);
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(m);
    let qa_host: Vec<F8E4M3> = (0..m * k).map(|_| f32_to_e4m3(rng.normal() * 100.0)).collect();
    let w_host: Vec<F8E4M3> = (0..n * k).map(|_| f32_to_e4m3(rng.normal() * 100.0)).collect();
    let mut sa_host = vec![0f32; kb * mpad];
    for g in 0..kb {
        for r in 0..m {
            sa_host[g * mpad + r] = rng.log_spaced(-6.0, 0.0);
        }
    }
    let (nb, kb2) = weight_scale_shape(n, k);
    let sw_host: Vec<f32> = (0..nb * kb2).map(|_| rng.log_spaced(-10.0, -4.0)).collect();
    let qa = Tensor::from_vec(qa_host.clone(), (m, k), device)?;
    let sa = act_scales_view(Tensor::from_vec(sa_host.clone(), kb * mpad, device)?, m, kb)?;
    let w = Tensor::from_vec(w_host.clone(), (n, k), device)?;
    let sw = Tensor::from_vec(sw_host.clone(), (nb, kb2), device)?;
    Ok(Operands { qa, sa, w, sw, qa_host, sa_host, w_host, sw_host })
}
