//! GPU reliability (built only with the `cuda` feature; every test prints a skip reason and
//! passes when no CUDA device can be opened). docs/RELIABILITY.md lists what each test shows
//! and the commands that run it, including under compute-sanitizer.
//!
//! - `determinism_100_calls`: 100 calls bitwise identical at M in {1, 16, 129, 257, 4096} for
//!   N=5120/K=25600 and N=K=4096 (split-K shapes included), per usable provider; the first
//!   result is checked against the CPU GEMM where that is cheap (M <= 16).
//! - `no_device_memory_growth`: 10^5 GEMM calls and 10^5 `Fp8BlockLinear::forward` calls at
//!   M=1, N=K=4096; free device memory (cuMemGetInfo) after a warm-up vs after the calls.
//! - `concurrent_threads_own_streams`, `concurrent_threads_shared_device`: 4 threads, each
//!   on its own stream / all on one candle `Device` (one CUDA per-thread default stream per
//!   thread), results bitwise identical to the single-thread result.
//! - `large_mn_no_index_overflow`: M·N > 2^31 and > 2^32 output elements (K = 128), sampled
//!   rows against an f64 CPU reference; a refusal must be a clear error naming the shape.
//! - `k_25600_sampled_rows`: M = 8192, N = 5120, K = 25600, sampled rows against the CPU.
//! - `wrong_device_operands`: qa on CUDA with w / sa / sw on the CPU, and operands from two
//!   different candle CUDA `Device` handles: clear errors naming the operand.
//! - `sanitizer_boundary_shapes`: every schedule at its boundary shapes, small enough to run
//!   under `compute-sanitizer --tool {memcheck,racecheck,synccheck}` (checked against the CPU).
//! - `forced_splits_match_reference`: every split-capable schedule forced to K splits 2–8
//!   (2: summed inside a 2-CTA cluster; 3+: f32 workspace and the reduce launch) on ragged M
//!   and N, poisoned outputs, against the CPU, and bitwise identical when called again.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{poison, usable};

use candle_core::cuda_backend::cudarc::driver::result::mem_get_info;
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::dispatch::{
    choose_config, quantizes_in_kernel, set_config_override, Backend, GemmConfig, Provider, ScheduleKind,
};
use candle_fp8::format::{act_scale_m_stride, num_blocks, F8E4M3};
use candle_fp8::ops::{fp8_block_matmul, fp8_block_matmul_with};
use candle_fp8::quant::quantize_activation;
use candle_fp8::testing::reference::{calc_diff_slices, naive_matmul_f64, rel_err_slices};
use candle_fp8::testing::{random_operands, Operands};
use candle_fp8::Fp8BlockLinear;
use std::time::Instant;

/// SM count used only to print the schedule a shape gets (H100 SXM / H200: 132).
const PRINT_SMS: usize = 132;


fn gemm(p: Provider, o: &Operands) -> Result<Tensor> {
    fp8_block_matmul_with(&Fp8Options::with_backend(Backend::Force(p)), &o.qa, &o.sa, &o.w, &o.sw)
}

/// The output's raw bf16 bit patterns on the host.
fn bits(y: &Tensor) -> Result<Vec<u16>> {
    Ok(y.flatten_all()?.to_vec1::<half::bf16>()?.into_iter().map(|v| v.to_bits()).collect())
}

fn schedule(m: usize, n: usize, k: usize) -> String {
    format!("{:?}", choose_config(m, n, k, PRINT_SMS))
}

/// f64 CPU reference for the rows `rows` of `o` (host copies), `[rows.len(), n]`.
fn reference_rows(o: &Operands, rows: &[usize], m: usize, n: usize, k: usize) -> Vec<f64> {
    let kb = num_blocks(k);
    let (mp, rp) = (act_scale_m_stride(m), act_scale_m_stride(rows.len()));
    let mut qa: Vec<F8E4M3> = Vec::with_capacity(rows.len() * k);
    let mut sa = vec![0f32; kb * rp];
    for (i, &r) in rows.iter().enumerate() {
        qa.extend_from_slice(&o.qa_host[r * k..(r + 1) * k]);
        for g in 0..kb {
            sa[g * rp + i] = o.sa_host[g * mp + r];
        }
    }
    naive_matmul_f64(&qa, &sa, &o.w_host, &o.sw_host, rows.len(), n, k)
}

/// Rows `rows` of `y` on the host as f64.
fn rows_of(y: &Tensor, rows: &[usize]) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for &r in rows {
        let row = y.narrow(0, r, 1)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        out.extend(row.into_iter().map(f64::from));
    }
    Ok(out)
}

fn check_rows(what: &str, y: &Tensor, o: &Operands, rows: &[usize], (m, n, k): (usize, usize, usize)) -> Result<()> {
    let got = rows_of(y, rows)?;
    let want = reference_rows(o, rows, m, n, k);
    let (re, cd) = (rel_err_slices(&got, &want), calc_diff_slices(&got, &want));
    println!("{what}: rows {rows:?}: relerr {re:.2e} calc_diff {cd:.2e}");
    assert!(got.iter().all(|v| v.is_finite()), "{what}: non-finite output in rows {rows:?}");
    assert!(re <= 3e-3 && cd < 1e-3, "{what}: rows {rows:?} relerr {re} calc_diff {cd}");
    Ok(())
}

fn free_device_memory(dev: &Device) -> Result<usize> {
    let cuda = dev.as_cuda_device()?;
    dev.synchronize()?;
    cuda.cuda_stream().context().bind_to_thread().map_err(candle_core::Error::wrap)?;
    Ok(mem_get_info().map_err(candle_core::Error::wrap)?.0)
}

#[test]
fn determinism_100_calls() -> Result<()> {
    let dev = gpu_or_skip!("determinism_100_calls");
    let providers = usable(&dev, "determinism_100_calls")?;
    for (n, k) in [(5120, 25600), (4096, 4096)] {
        for m in [1, 16, 129, 257, 4096] {
            let o = random_operands(m, n, k, (m * 31 + n + k) as u64, &dev)?;
            for &p in &providers {
                let t0 = Instant::now();
                let y0 = gemm(p, &o)?;
                let b0 = bits(&y0)?;
                if m <= 16 {
                    let rows: Vec<usize> = (0..m).collect();
                    check_rows(&format!("determinism [{p}] m={m} n={n} k={k}"), &y0, &o, &rows, (m, n, k))?;
                }
                for call in 1..100 {
                    let y = gemm(p, &o)?;
                    if bits(&y)? != b0 {
                        panic!("[{p}] m={m} n={n} k={k} ({}): call {call} differs from call 0", schedule(m, n, k));
                    }
                }
                println!(
                    "determinism [{p}] m={m} n={n} k={k} {}: 100 calls bitwise identical ({:.1?})",
                    schedule(m, n, k),
                    t0.elapsed()
                );
            }
        }
    }
    Ok(())
}

#[test]
fn no_device_memory_growth() -> Result<()> {
    let dev = gpu_or_skip!("no_device_memory_growth");
    const CALLS: usize = 100_000;
    const TOLERANCE: usize = 64 << 20;
    let (m, n, k) = (1, 4096, 4096);
    let o = random_operands(m, n, k, 11, &dev)?;
    let layer = Fp8BlockLinear::new(o.w.clone(), o.sw.clone(), None)?;
    let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?.to_dtype(DType::BF16)?;
    let op_call = || fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw).map(|_| ());
    let forward_call = || layer.forward(&x).map(|_| ());
    let calls: [(&str, &dyn Fn() -> Result<()>); 2] =
        [("fp8_block_matmul", &op_call), ("Fp8BlockLinear::forward", &forward_call)];
    for (what, f) in calls {
        for _ in 0..1000 {
            f()?;
        }
        let before = free_device_memory(&dev)?;
        let t0 = Instant::now();
        for i in 0..CALLS {
            f()?;
            if i % 10_000 == 9_999 {
                dev.synchronize()?;
            }
        }
        let after = free_device_memory(&dev)?;
        let grew = before.saturating_sub(after);
        println!(
            "memory [{what}] m={m} n={n} k={k}: {CALLS} calls in {:.1?}; free before {before} B, after {after} B, \
             growth {grew} B",
            t0.elapsed()
        );
        assert!(grew <= TOLERANCE, "{what}: device memory shrank by {grew} bytes over {CALLS} calls");
    }
    Ok(())
}

/// Shapes for the concurrency tests: a split-K decode shape and a multi-wave prefill shape.
const CONCURRENT_SHAPES: [(usize, usize, usize); 3] = [(1, 4096, 4096), (16, 5120, 25600), (300, 4096, 4096)];
const THREADS: usize = 4;
const CALLS_PER_THREAD: usize = 25;

#[test]
fn concurrent_threads_own_streams() -> Result<()> {
    let _ = gpu_or_skip!("concurrent_threads_own_streams");
    for (m, n, k) in CONCURRENT_SHAPES {
        // Single-thread result on its own device/stream.
        let on = |dev: &Device| -> Result<Operands> { random_operands(m, n, k, 77, dev) };
        let o0 = on(&Device::new_cuda_with_stream(0)?)?;
        let want = bits(&fp8_block_matmul(&o0.qa, &o0.sa, &o0.w, &o0.sw)?)?;
        let results: Vec<Result<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let want = &want;
                    s.spawn(move || -> Result<usize> {
                        let dev = Device::new_cuda_with_stream(0)?;
                        let o = on(&dev)?;
                        let mut bad = 0;
                        for call in 0..CALLS_PER_THREAD {
                            let y = fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?;
                            if &bits(&y)? != want {
                                println!("thread {t} call {call}: m={m} n={n} k={k} differs from the single-thread result");
                                bad += 1;
                            }
                        }
                        Ok(bad)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread panicked")).collect()
        });
        let bad: usize = results.into_iter().collect::<Result<Vec<_>>>()?.into_iter().sum();
        println!("concurrent (own streams) m={m} n={n} k={k}: {THREADS} threads x {CALLS_PER_THREAD} calls, {bad} mismatches");
        assert_eq!(bad, 0, "m={m} n={n} k={k}: results differ across threads with their own streams");
    }
    Ok(())
}

#[test]
fn concurrent_threads_shared_device() -> Result<()> {
    let _ = gpu_or_skip!("concurrent_threads_shared_device");
    for (m, n, k) in CONCURRENT_SHAPES {
        // One Device shared by all threads: candle's default CUDA device uses the per-thread
        // default stream, so each thread enqueues on its own stream while sharing tensors and
        // the library's per-device state (workspaces).
        let dev = Device::new_cuda(0)?;
        let o = random_operands(m, n, k, 78, &dev)?;
        let want = bits(&fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?)?;
        dev.synchronize()?;
        let results: Vec<Result<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (o, want, dev) = (&o, &want, &dev);
                    s.spawn(move || -> Result<usize> {
                        let mut bad = 0;
                        for call in 0..CALLS_PER_THREAD {
                            let y = fp8_block_matmul(&o.qa, &o.sa, &o.w, &o.sw)?;
                            dev.synchronize()?;
                            if &bits(&y)? != want {
                                println!("thread {t} call {call}: m={m} n={n} k={k} differs from the single-thread result");
                                bad += 1;
                            }
                        }
                        Ok(bad)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread panicked")).collect()
        });
        let bad: usize = results.into_iter().collect::<Result<Vec<_>>>()?.into_iter().sum();
        println!(
            "concurrent (shared device) m={m} n={n} k={k} {}: {THREADS} threads x {CALLS_PER_THREAD} calls, {bad} mismatches",
            schedule(m, n, k)
        );
        assert_eq!(bad, 0, "m={m} n={n} k={k}: results differ across threads sharing one Device");
    }
    Ok(())
}

#[test]
fn large_mn_no_index_overflow() -> Result<()> {
    let dev = gpu_or_skip!("large_mn_no_index_overflow");
    let providers = usable(&dev, "large_mn_no_index_overflow")?;
    // 65600 x 32768 = 2^31 + 2^21 outputs (4.0 GiB bf16); 131200 x 32768 > 2^32 (8.0 GiB).
    for (m, n, k) in [(65600usize, 32768usize, 128usize), (131200, 32768, 128)] {
        let o = random_operands(m, n, k, 5, &dev)?;
        // Rows around the i32 / u32 element-index boundaries, and the ends.
        let mut rows = vec![0, 1, m / 2, 65535, 65536, m - 1];
        if m > 131071 {
            rows.extend([131071, 131072]);
        }
        rows.retain(|&r| r < m);
        rows.sort();
        rows.dedup();
        for &p in &providers {
            match gemm(p, &o) {
                Ok(y) => {
                    assert_eq!(y.dims(), &[m, n]);
                    check_rows(&format!("large [{p}] m={m} n={n} k={k} ({} outputs)", m * n), &y, &o, &rows, (m, n, k))?;
                }
                Err(e) => {
                    let msg = e.to_string();
                    println!("large [{p}] m={m} n={n} k={k}: refused: {msg}");
                    assert!(
                        msg.contains(&m.to_string()) || msg.contains(&n.to_string()) || msg.contains("out of memory"),
                        "[{p}] m={m} n={n} k={k}: a refusal must name the shape, got: {msg}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn k_25600_sampled_rows() -> Result<()> {
    let dev = gpu_or_skip!("k_25600_sampled_rows");
    let providers = usable(&dev, "k_25600_sampled_rows")?;
    let (m, n, k) = (8192, 5120, 25600);
    let o = random_operands(m, n, k, 6, &dev)?;
    let rows = [0, 1, 127, 128, 4095, 4096, 8191];
    for p in providers {
        let y = gemm(p, &o)?;
        check_rows(&format!("k25600 [{p}] m={m} n={n} k={k} {}", schedule(m, n, k)), &y, &o, &rows, (m, n, k))?;
    }
    Ok(())
}

#[test]
fn wrong_device_operands() -> Result<()> {
    let dev = gpu_or_skip!("wrong_device_operands");
    let g = random_operands(4, 256, 384, 1, &dev)?;
    let c = random_operands(4, 256, 384, 1, &Device::Cpu)?;
    let err = |r: Result<Tensor>| -> String {
        match r {
            Ok(_) => panic!("mixed-device operands were accepted"),
            Err(e) => e.to_string(),
        }
    };
    // qa on CUDA, one operand on the CPU: the error names the operand and both devices.
    for (name, msg) in [
        ("w", err(fp8_block_matmul(&g.qa, &g.sa, &c.w, &g.sw))),
        ("sa", err(fp8_block_matmul(&g.qa, &c.sa, &g.w, &g.sw))),
        ("sw", err(fp8_block_matmul(&g.qa, &g.sa, &g.w, &c.sw))),
    ] {
        println!("wrong device [{name} on CPU]: {msg}");
        assert!(msg.contains(&format!("{name}:")) && msg.contains("Cpu") && msg.contains("Cuda"), "{msg}");
    }
    // qa on the CPU, w on CUDA.
    let msg = err(fp8_block_matmul(&c.qa, &c.sa, &g.w, &c.sw));
    println!("wrong device [w on CUDA, qa on CPU]: {msg}");
    assert!(msg.contains("w:") && msg.contains("Cuda") && msg.contains("Cpu"), "{msg}");
    // Two candle Device handles for the same GPU are different devices to candle.
    let other = Device::new_cuda_with_stream(0)?;
    let g2 = random_operands(4, 256, 384, 1, &other)?;
    let msg = err(fp8_block_matmul(&g.qa, &g.sa, &g2.w, &g.sw));
    println!("wrong device [w from another Device handle]: {msg}");
    assert!(msg.contains("w:") && msg.contains("device"), "{msg}");
    // The layer: a CPU layer fed a CUDA input.
    let layer = Fp8BlockLinear::new(c.w.clone(), c.sw.clone(), None)?;
    let x = Tensor::ones((2, 384), DType::BF16, &dev)?;
    match layer.forward(&x) {
        Ok(_) => panic!("a CPU layer accepted a CUDA input"),
        Err(e) => println!("wrong device [CPU layer, CUDA input]: {e}"),
    }
    Ok(())
}

/// Each schedule at its boundary M values, N with and without partial 128-blocks / split-K,
/// small enough for compute-sanitizer. Run it alone under each tool (see docs/RELIABILITY.md).
#[test]
fn sanitizer_boundary_shapes() -> Result<()> {
    let dev = gpu_or_skip!("sanitizer_boundary_shapes");
    let providers = usable(&dev, "sanitizer_boundary_shapes")?;
    let ms = [1, 8, 9, 16, 17, 64, 65, 128, 129, 256, 257, 300];
    let nks = [(128, 128), (256, 4096), (4096, 512), (5120, 1024), (112, 384)];
    for &p in &providers {
        for &(n, k) in &nks {
            for &m in &ms {
                let o = random_operands(m, n, k, (m + n + k) as u64, &dev)?;
                let y = gemm(p, &o)?;
                dev.synchronize()?;
                let mut rows = vec![0, m / 2, m - 1];
                rows.dedup();
                check_rows(&format!("boundary [{p}] m={m} n={n} k={k} {}", schedule(m, n, k)), &y, &o, &rows, (m, n, k))?;
            }
        }
    }
    Ok(())
}

/// Restores the automatic configuration when dropped (also when an assertion fails).
struct OverrideGuard;
impl Drop for OverrideGuard {
    fn drop(&mut self) {
        set_config_override(None);
    }
}

/// Every split-capable configuration forced to splits 1, 2 (2-CTA cluster sum), 3, 5 and 8
/// (workspace + reduce), the persistent tiles' split tails and the stream-K tiles (both also on
/// an SM budget): ragged M and N against the CPU reference, and bit-identical on a second call.
/// The override is process-wide: this file's tests run with `--test-threads=1` (gpu_run.sh).
#[test]
fn forced_splits_match_reference() -> Result<()> {
    let dev = gpu_or_skip!("forced_splits_match_reference");
    let providers = usable(&dev, "forced_splits_match_reference")?;
    if !providers.contains(&Provider::Hopper) {
        println!("SKIP forced_splits_match_reference: our kernels cannot run on this device");
        return Ok(());
    }
    let _guard = OverrideGuard;
    // (schedule, block_m, block_n, stages, m values): ragged M per schedule; N = 272 is two
    // 128-column blocks and a 16-column remainder; K = 2048 = 16 K blocks (8 splits of 2).
    let plans: &[(ScheduleKind, i32, i32, i32, &[usize])] = &[
        (ScheduleKind::SwapAb, 8, 64, 8, &[1, 5]),
        (ScheduleKind::SwapAb, 16, 64, 8, &[13]),
        (ScheduleKind::SwapAb, 16, 64, 7, &[11]), // three CTAs per SM: wide N at 9-16 tokens
        (ScheduleKind::SwapAb, 32, 64, 8, &[17, 32]), // 17-32 tokens: one wave or more of 64-row tiles, split over K where fewer
        (ScheduleKind::SmallM, 64, 128, 8, &[37, 100]), // the overlapped loop (split 1-2 in the dispatch)
        (ScheduleKind::SmallM, 64, 128, 6, &[100]),     // split >= 3 in the dispatch: the N-halves loop at these short K ranges
        (ScheduleKind::SmallM, 64, 32, 8, &[64]),
        (ScheduleKind::SmallM, 64, 64, 8, &[48]), // the automatic choice at M = 33-64, N = 4096
        (ScheduleKind::SmallM, 64, 64, 4, &[40]), // a shallow ring, three CTAs per SM (dev key)
        (ScheduleKind::WarpSpecialized, 128, 128, 6, &[129, 200]),
    ];
    let (n, k) = (272, 2048);
    // Sums inside the kernel. Persistent split tails (the tiles of a partial last round in K
    // ranges): every tile split (a few tiles on all SMs), and on an SM budget of 4 / 5 CTAs full
    // rounds of whole tiles before the split round (2 / 1 tiles left over). Stream-K (split_k =
    // CTAs per SM; 5 column tiles x 16 K blocks = 80 units): on all SMs one unit per CTA (every
    // tile summed from 16 shares), on 4 / 5 SMs 4-40 CTAs (shares across tile boundaries, and
    // at 5 CTAs whole tiles only), on 1 SM at split 1 one CTA of all 80 units (five tiles in
    // turn); M = 40 on the 32-token tile: two token tiles; the small-M stream-K tiles (tokens on
    // the wgmma M side, 3 / 5 column tiles) at one and two token tiles.
    let in_kernel: &[(ScheduleKind, i32, i32, i32, &[usize])] = &[
        (ScheduleKind::Persistent, 256, 128, 3, &[300]),
        (ScheduleKind::Persistent, 128, 128, 5, &[300, 513]),
        (ScheduleKind::SwapAbStreamK, 8, 64, 8, &[1, 5]),
        (ScheduleKind::SwapAbStreamK, 16, 64, 8, &[13]),
        (ScheduleKind::SwapAbStreamK, 16, 64, 7, &[11]),
        (ScheduleKind::SwapAbStreamK, 32, 64, 8, &[17, 40]),
        (ScheduleKind::SwapAbStreamK, 32, 64, 5, &[25]), // three CTAs per SM
        (ScheduleKind::SmallMStreamK, 64, 128, 8, &[33, 100]), // one and two token tiles (two issuers)
        (ScheduleKind::SmallMStreamK, 64, 64, 8, &[64]),
    ];
    let runs = plans.iter().map(|p| (p, 0)).chain(in_kernel.iter().flat_map(|p| [(p, 0), (p, 1), (p, 4), (p, 5)]));
    for (&(kind, block_m, block_n, stages, ms), num_sms) in runs {
        for &m in ms {
            let o = random_operands(m, n, k, (m * 31 + block_n as usize) as u64, &dev)?;
            for split_k in [1, 2, 3, 5, 8] {
                let cfg = GemmConfig { kind: kind as i32, block_m, block_n, stages, split_k, num_sms };
                set_config_override(Some(cfg));
                let what = format!("{kind:?} {block_m}x{block_n}x{stages} split {split_k} on {num_sms} SMs (0: all) m={m} n={n} k={k}");
                // NaN-filled memory freed just before (workspace-sized): the outputs most likely reuse it.
                poison(&dev, 8 * m * n)?;
                let y = gemm(Provider::Hopper, &o)?;
                let rows: Vec<usize> = (0..m).collect();
                check_rows(&what, &y, &o, &rows, (m, n, k))?;
                let again = gemm(Provider::Hopper, &o)?;
                assert!(bits(&y)? == bits(&again)?, "{what}: a second call differs");
                if quantizes_in_kernel(&cfg) {
                    // The full linear on bf16 input can quantize inside this tile: the same
                    // bits as the quantizer launch + the GEMM, at every split.
                    let x = (Tensor::randn(0f32, 1.0, (m, k), &dev)? * 3.0)?.to_dtype(DType::BF16)?;
                    let layer = Fp8BlockLinear::new(o.w.clone(), o.sw.clone(), None)?
                        .with_backend(Backend::Force(Provider::Hopper))
                        .with_in_kernel_quantization(true);
                    let (qa, sa) = quantize_activation(&x)?;
                    let want = bits(&layer.forward_quantized(&qa, &sa)?)?;
                    poison(&dev, 8 * m * n)?;
                    assert!(bits(&layer.forward(&x)?)? == want, "{what}: in-kernel quantization differs from quantize + GEMM");
                }
            }
        }
    }
    Ok(())
}

/// `dev_variants_match_reference`: dispatched tiles and their development keys (stages + 100:
/// the small-M 64x64 tile and the warp-specialized and persistent 128x128 tiles without the
/// promotion overlapped across K blocks; the small-M 64x128 tile's 6-stage key against its
/// N-halves loop, which key 6 itself runs for workspace splits of <= 32 K blocks) on ragged M and
/// N, with 1 to 16 K blocks per split (odd and even: the overlapped loop is unrolled by two) and
/// one long K (split 3: 34 K blocks, the overlapped loop at split 3), against the CPU and bitwise
/// equal to each other (only the order of independent work differs).
#[test]
fn dev_variants_match_reference() -> Result<()> {
    let dev = gpu_or_skip!("dev_variants_match_reference");
    let providers = usable(&dev, "dev_variants_match_reference")?;
    if !providers.contains(&Provider::Hopper) {
        println!("SKIP dev_variants_match_reference: our kernels cannot run on this device");
        return Ok(());
    }
    let _guard = OverrideGuard;
    // (schedule, block_m, block_n, dispatched stages, m values, splits); development key: stages + 100
    type Plan = (ScheduleKind, i32, i32, i32, &'static [usize], &'static [i32]);
    let plans: &[Plan] = &[
        (ScheduleKind::SmallM, 64, 64, 8, &[40, 64], &[1, 2, 3]),
        (ScheduleKind::SmallM, 64, 128, 6, &[100, 160], &[1, 2, 3, 5]),
        (ScheduleKind::WarpSpecialized, 128, 128, 6, &[100, 200], &[1, 2, 3, 5]),
        (ScheduleKind::Persistent, 128, 128, 5, &[300, 513], &[1]),
    ];
    let n = 272;
    let long_k: Plan = (ScheduleKind::SmallM, 64, 128, 6, &[100], &[3, 4]);
    let cases = [128, 384, 1920, 2048].into_iter().flat_map(|k| plans.iter().map(move |p| (k, p)));
    for (k, &(kind, block_m, block_n, stages, ms, splits)) in cases.chain([(12800, &long_k)]) {
        for &m in ms {
            let o = random_operands(m, n, k, (m * 7 + k + block_m as usize) as u64, &dev)?;
            for &split_k in splits.iter().filter(|&&s| s as usize <= k / 128) {
                let mut got = Vec::new();
                for st in [stages, stages + 100] {
                    let cfg = GemmConfig { kind: kind as i32, block_m, block_n, stages: st, split_k, num_sms: 0 };
                    set_config_override(Some(cfg));
                    let what = format!("{kind:?} {block_m}x{block_n} stages {st} split {split_k} m={m} n={n} k={k}");
                    poison(&dev, 8 * m * n)?;
                    let y = gemm(Provider::Hopper, &o)?;
                    check_rows(&what, &y, &o, &(0..m).collect::<Vec<_>>(), (m, n, k))?;
                    got.push((what, bits(&y)?));
                }
                assert!(got[0].1 == got[1].1, "{} differs from {}", got[1].0, got[0].0);
            }
        }
    }
    Ok(())
}
