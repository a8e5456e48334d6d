//! Shared helpers of the GPU test files (`tests/gpu.rs`, `tests/gpu_reliability.rs`): the
//! CUDA device or the reason there is none, the skip macro, and the usable providers.
#![allow(dead_code)]

use candle_core::{Device, Result, Tensor};
use candle_fp8::Provider;
use candle_fp8::testing::device_caps;
use std::sync::OnceLock;

/// Every CUDA provider.
pub const PROVIDERS: [Provider; 3] = [Provider::Hopper, Provider::CublasLt, Provider::Dequant];

/// The CUDA device, or the reason there is none (printed by each test as its skip reason).
pub fn gpu() -> std::result::Result<Device, String> {
    static DEV: OnceLock<std::result::Result<Device, String>> = OnceLock::new();
    DEV.get_or_init(|| {
        // cudarc panics when libcuda is missing: keep that panic out of the test output.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = std::panic::catch_unwind(|| Device::new_cuda(0));
        std::panic::set_hook(hook);
        match r {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(format!("no CUDA device: {e}")),
            Err(_) => Err("libcuda could not be loaded (no NVIDIA driver)".into()),
        }
    })
    .clone()
}

/// The device, or print `SKIP <test>: <reason>` and return `Ok(())` from the test.
macro_rules! gpu_or_skip {
    ($name:expr) => {
        match $crate::gpu::gpu() {
            Ok(d) => d,
            Err(why) => {
                println!("SKIP {}: {why}", $name);
                return Ok(());
            }
        }
    };
}

/// Providers usable on `dev`, printing why the others are skipped. `CANDLE_FP8_TEST_PROVIDERS`
/// (comma-separated provider names) restricts the list, e.g. to run only our kernels under
/// compute-sanitizer's racecheck (cuBLASLt's own kernels report hazards of their own).
pub fn usable(dev: &Device, test: &str) -> Result<Vec<Provider>> {
    let caps = device_caps(dev)?;
    let only: Option<Vec<String>> = std::env::var("CANDLE_FP8_TEST_PROVIDERS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect());
    Ok(PROVIDERS
        .into_iter()
        .filter(|p| match caps.unusable_reason(*p) {
            None => true,
            Some(why) => {
                println!("SKIP {test} [{p}]: {why}");
                false
            }
        })
        .filter(|p| match &only {
            Some(names) if !names.contains(&p.to_string().to_ascii_lowercase()) => {
                println!("SKIP {test} [{p}]: not in CANDLE_FP8_TEST_PROVIDERS");
                false
            }
            _ => true,
        })
        .collect())
}

/// Fills the device's allocator pool with NaNs (bf16 and f32) of at least `elems` elements
/// and frees them, so that the next output allocation most likely reuses poisoned memory.
pub fn poison(dev: &Device, elems: usize) -> Result<()> {
    let a = Tensor::full(f32::NAN, elems, dev)?;
    let b = Tensor::full(half::bf16::NAN, elems, dev)?;
    drop((a, b));
    Ok(())
}
