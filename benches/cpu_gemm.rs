//! CPU blocked-FP8 GEMM vs candle's f32 matmul on the same shape (`cargo bench --bench cpu_gemm`).
//!
//! The FP8 side is the full op (`fp8_block_matmul`: decode of e4m3 weight tiles on the fly,
//! two-level accumulation); the f32 side is candle's gemm on already-dequantized f32 weights.

use candle_core::{Device, Tensor};
use candle_fp8::ops::fp8_block_matmul;
use candle_fp8::testing::random_operands;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_gemm");
    g.sample_size(10);
    for &(m, n, k) in &[(1usize, 4096usize, 4096usize), (16, 4096, 4096), (128, 4096, 4096)] {
        let op = random_operands(m, n, k, 1, &Device::Cpu).unwrap();
        let a = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.bench_with_input(BenchmarkId::new("fp8_block", format!("{m}x{n}x{k}")), &(), |b, _| {
            b.iter(|| fp8_block_matmul(&op.qa, &op.sa, &op.w, &op.sw).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("candle_f32", format!("{m}x{n}x{k}")), &(), |b, _| {
            b.iter(|| a.matmul(&w.t().unwrap()).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
