//! Prints what this machine offers candle-fp8: GPU, compute capability, SM count, driver and
//! library versions, and which providers are usable (with the reason when not).
//!
//! ```text
//! cargo run --release --features cuda --example check_env
//! ```

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("check_env: built without the `cuda` feature; only the cpu provider exists.");
}

#[cfg(feature = "cuda")]
fn main() -> anyhow::Result<()> {
    use candle_core::{DType, Device, Tensor};
    use candle_fp8::{Fp8BlockLinear, Fp8Options, BACKEND_ENV, F8E4M3};

    println!("candle-fp8 {} check_env", env!("CARGO_PKG_VERSION"));
    println!("{BACKEND_ENV}={:?}", std::env::var(BACKEND_ENV).unwrap_or_default());
    for var in ["LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES"] {
        println!("{var}={}", std::env::var(var).unwrap_or_default());
    }
    // cudarc loads libcuda at run time and panics when it is missing: report that plainly.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let dev = std::panic::catch_unwind(|| Device::new_cuda(0));
    std::panic::set_hook(hook);
    let (device, dev) = match dev {
        Ok(Ok(Device::Cuda(d))) => (Device::Cuda(d.clone()), d),
        Ok(Ok(_)) => unreachable!(),
        Ok(Err(e)) => {
            println!("no usable CUDA device: {e}");
            println!("providers: cpu only");
            return Ok(());
        }
        Err(_) => {
            println!("no usable CUDA device: libcuda could not be loaded (no driver?)");
            println!("providers: cpu only");
            return Ok(());
        }
    };
    let r = candle_fp8::kernels::device_report(&dev)?;
    println!("gpu {}: {}", r.ordinal, r.name);
    println!("compute capability: {}.{}", r.compute_cap / 10, r.compute_cap % 10);
    println!("SMs: {}", r.num_sms);
    println!("driver: CUDA {}.{} ({})", r.driver_version / 1000, (r.driver_version % 1000) / 10, r.driver_version);
    match &r.cublaslt_version {
        Ok(v) => println!("cuBLASLt: {v}"),
        Err(e) => println!("cuBLASLt: {e}"),
    }
    if r.nvcc_version.is_empty() {
        println!("our kernels: NOT compiled into this build");
    } else {
        println!("our kernels: {} | {}", r.nvcc_version, r.nvcc_flags);
    }
    println!("providers:");
    for (p, why) in &r.providers {
        match why {
            None => println!("  {p:<9} usable"),
            Some(w) => println!("  {p:<9} unusable: {w}"),
        }
    }
    // The provider a layer of each shape runs on with the options from the environment (the
    // choice does not depend on the token count; K = 4000 is off our kernels' fast path).
    let opts = Fp8Options::from_env()?;
    for (n, k) in [(4096, 4096), (10240, 5120), (4096, 4000)] {
        let w = Tensor::from_vec(vec![F8E4M3::from_f32(0.0); n * k], (n, k), &device)?;
        let s = Tensor::ones((n.div_ceil(128), k.div_ceil(128)), DType::F32, &device)?;
        let choice = Fp8BlockLinear::new(w, s, None).map(|l| l.with_options(&opts)).and_then(|l| l.provider());
        match choice {
            Ok(p) => println!("choice for n={n} k={k}: {p}"),
            Err(e) => println!("choice for n={n} k={k}: error: {e}"),
        }
    }
    Ok(())
}
