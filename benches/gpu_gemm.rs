//! GPU blocked-FP8 GEMM under criterion: ours (hopper) vs cuBLASLt blockwise vs candle's bf16
//! matmul, one shape at a time, same process (`cargo bench --features cuda --bench gpu_gemm`).
//!
//! Each sample is timed on the GPU with CUDA events around a batch of back-to-back launches
//! (`iter_custom`), hot operands, outputs allocated per call as users call the op. Each
//! provider's output is first checked against the CPU reference of the same operands (relative
//! error ≤ 3e-3; a wrong result panics instead of being timed). The table of record, with cold
//! weights, CUDA-graph replays, the measured bandwidth floor and the torch/Triton peers, is
//! `examples/bench.rs` (docs/perf.md); this bench is for quick A/B runs of a change. Throughput
//! is reported in FLOP (2·M·N·K per call): criterion prints it as elements/s.
//! Where a call's host side (allocation + launch, ~8–11 µs on the H200 machine's host) outlasts
//! the kernel — decode sizes — the rows show the host's call rate, not the GPU's (1×4096×4096:
//! 8.2 µs in one run, 11.2 in another; the CUDA-graph bench: 5.5).
//!
//! Build here and run on the GPU machine (no cargo there):
//! `cargo bench --features cuda --bench gpu_gemm --no-run`, then run the printed executable
//! with `--bench` (and optionally a filter such as `ours/16x4096x4096`).

use std::time::Duration;

use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::{DType, Device, Module, Tensor};
use candle_fp8::testing::reference::{reference_matmul, rel_err};
use candle_fp8::testing::{device_caps, random_operands};
use candle_fp8::{fp8_block_matmul_with, Backend, Fp8Options, Provider};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

// The GPU tests' device helper: the CUDA device, or why there is none (its test macro unused).
#[allow(unused_macros)]
#[path = "../tests/common/gpu.rs"]
mod gpu;

/// (M, N, K): decode, mid and large M at N = K = 4096, and Qwen3-32B's q|k|v at batch 1.
const SHAPES: [(usize, usize, usize); 5] =
    [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (4096, 4096, 4096), (1, 10240, 5120)];

/// GPU time of `iters` calls of `f`, measured with events on the device's stream.
fn gpu_time(dev: &Device, iters: u64, f: &mut dyn FnMut()) -> Duration {
    let Device::Cuda(cdev) = dev else { unreachable!("gpu::gpu returns a CUDA device") };
    let stream = cdev.cuda_stream();
    let ctx = stream.context();
    let ev = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).expect("cuEventCreate");
    let (e0, e1) = (ev(), ev());
    e0.record(&stream).expect("cuEventRecord");
    for _ in 0..iters {
        f();
    }
    e1.record(&stream).expect("cuEventRecord");
    e1.synchronize().expect("cuEventSynchronize");
    Duration::from_secs_f64(e0.elapsed_ms(&e1).expect("cuEventElapsedTime") as f64 * 1e-3)
}

fn bench(c: &mut Criterion) {
    let dev = match gpu::gpu() {
        Ok(d) => d,
        Err(why) => {
            gpu::skip("gpu_gemm", &why);
            return;
        }
    };
    let caps = device_caps(&dev).expect("device_caps");
    let mut g = c.benchmark_group("gpu_gemm");
    g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for &(m, n, k) in &SHAPES {
        let op = random_operands(m, n, k, 7, &dev).expect("operands");
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev).and_then(|t| t.to_dtype(DType::BF16)).expect("x");
        let wb = Tensor::randn(0f32, 0.02, (n, k), &dev).and_then(|t| t.to_dtype(DType::BF16)).expect("w");
        let bf16 = candle_nn::Linear::new(wb, None);
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let id = format!("{m}x{n}x{k}");
        let cpu = |t: &Tensor| t.to_device(&Device::Cpu).expect("to the host");
        let reference = reference_matmul(&cpu(&op.qa), &cpu(&op.sa), &cpu(&op.w), &cpu(&op.sw)).expect("CPU reference");
        for (name, provider) in [("ours", Provider::Hopper), ("cublaslt", Provider::CublasLt)] {
            if let Some(why) = caps.unusable_reason(provider) {
                gpu::skip(&format!("gpu_gemm/{name}/{id}"), &why);
                continue;
            }
            let opts = Fp8Options::with_backend(Backend::Force(provider));
            let y = fp8_block_matmul_with(&opts, &op.qa, &op.sa, &op.w, &op.sw).expect("fp8 GEMM");
            let e = rel_err(&cpu(&y), &reference).expect("relerr");
            assert!(e <= 3e-3, "gpu_gemm/{name}/{id}: relative error {e:.3e} against the CPU reference (max 3e-3)");
            g.bench_with_input(BenchmarkId::new(name, &id), &(), |b, _| {
                b.iter_custom(|iters| {
                    gpu_time(&dev, iters, &mut || {
                        let y = fp8_block_matmul_with(&opts, &op.qa, &op.sa, &op.w, &op.sw);
                        drop(y.expect("fp8 GEMM"));
                    })
                })
            });
        }
        g.bench_with_input(BenchmarkId::new("candle_bf16", &id), &(), |b, _| {
            b.iter_custom(|iters| gpu_time(&dev, iters, &mut || drop(bf16.forward(&x).expect("bf16 matmul"))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
