//! GPU reliability (built only with the `cuda` feature). Without a usable CUDA device every
//! test reports `SKIP <test>: <reason>` on stderr (a failure under
//! `CANDLE_FP8_REQUIRE_GPU=1`, as `scripts/gpu_run.sh` runs it). docs/reliability.md lists
//! what each test shows and the commands that run it, including under compute-sanitizer.
//!
//! Sampled outputs are judged against the exact product (the contract's f64 sum): `relerr ≤
//! 3e-3`, and for the blocked-FP8 providers (hopper, cublaslt) the share of outputs off the
//! correctly rounded bf16 value and the mean error in ulps (`gpu::check_rounding`, whose doc
//! derives the bounds).
//!
//! - `determinism_100_calls`: 100 calls bitwise identical at M in {1, 16, 129, 257, 4096} for
//!   N=5120/K=25600 and N=K=4096 (split-K shapes included), per usable provider; the first
//!   result is checked against the exact product where that is cheap (M <= 16).
//! - `no_device_memory_growth`: 10^5 GEMM calls and 10^5 `Fp8BlockLinear::forward` calls at
//!   M=1, N=K=4096; free device memory (cuMemGetInfo) after a warm-up vs after the calls.
//! - `concurrent_threads_own_streams`, `concurrent_threads_shared_device`: 4 threads, each
//!   on its own stream / all on one candle `Device` (one CUDA per-thread default stream per
//!   thread), results bitwise identical to the single-thread result.
//! - `large_mn_no_index_overflow`: M·N > 2^31 and > 2^32 output elements (K = 128), sampled
//!   rows against the exact product; a refusal must be a clear error naming the shape.
//! - `k_25600_sampled_rows`: M = 8192, N = 5120, K = 25600, sampled rows.
//! - `wrong_device_operands`: qa on CUDA with w / sa / sw on the CPU, and operands from two
//!   different candle CUDA `Device` handles: clear errors naming the operand.
//! - `sanitizer_boundary_shapes`: every schedule at its boundary shapes, small enough to run
//!   under `compute-sanitizer --tool {memcheck,racecheck,synccheck}`.
//! - `forced_splits_match_reference`: every compiled configuration of our kernels
//!   (`testing::compiled_configs()`, which must be exactly `DISPATCHED_CONFIGS`) forced through
//!   `testing::with_gemm_config` at the M values around its tile rows, ragged N, K split 1, 2
//!   (2-CTA cluster sum), 3, 5 and 8 (workspace + reduce) where it splits, the persistent split
//!   tails and stream-K also on 1, 4 and 5 SMs; poisoned outputs, every output against the exact
//!   product, and bitwise identical when called again.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{check_rounding, poison, rounds_like_the_contract, usable};

use candle_core::cuda_backend::cudarc::driver::result::mem_get_info;
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_fp8::format::{act_scale_m_stride, num_blocks, F8E4M3};
use candle_fp8::testing::reference::{naive_matmul_f64, rel_err_slices};
use candle_fp8::testing::{
    choose_config, compiled_configs, random_operands, with_gemm_config, GemmConfig, Operands, ScheduleKind,
    DISPATCHED_CONFIGS,
};
use candle_fp8::{fp8_block_matmul, fp8_block_matmul_with, Backend, Fp8BlockLinear, Fp8Options, Provider};
use std::collections::HashMap;
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

/// Judges `got` (outputs of provider `p`) against the exact product `want`: finite, `relerr ≤
/// 3e-3` (DeepGEMM's `calc_diff` is at most `relerr²`: no separate check), and for the
/// blocked-FP8 providers the rounding statistics of `gpu::check_rounding`.
fn judge(what: &str, p: Provider, got: &[f64], want: &[f64]) -> Result<()> {
    let re = rel_err_slices(got, want);
    assert!(got.iter().all(|v| v.is_finite()), "{what}: non-finite output");
    assert!(re <= 3e-3, "{what}: relerr {re:.3e} (max 3e-3)");
    if rounds_like_the_contract(p) {
        let got: Vec<f32> = got.iter().map(|&v| v as f32).collect();
        let s = check_rounding(what, &got, want)?;
        println!(
            "{what}: relerr {re:.2e}, {:.2} % off the rounded value, mean {:+.4} ulp",
            100.0 * s.off_rounded,
            s.mean_ulp
        );
    } else {
        println!("{what}: relerr {re:.2e}");
    }
    Ok(())
}

fn check_rows(
    what: &str,
    p: Provider,
    y: &Tensor,
    o: &Operands,
    rows: &[usize],
    (m, n, k): (usize, usize, usize),
) -> Result<()> {
    let got = rows_of(y, rows)?;
    let want = reference_rows(o, rows, m, n, k);
    judge(&format!("{what}: rows {rows:?}"), p, &got, &want)
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
                    check_rows(&format!("determinism [{p}] m={m} n={n} k={k}"), p, &y0, &o, &rows, (m, n, k))?;
                }
                for rep in 1..100 {
                    let y = gemm(p, &o)?;
                    if bits(&y)? != b0 {
                        panic!(
                            "[{p}] m={m} n={n} k={k} ({}): repetition {rep} differs from the first result",
                            schedule(m, n, k)
                        );
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
                                println!(
                                    "thread {t} call {call}: m={m} n={n} k={k} differs from the single-thread result"
                                );
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
                                println!(
                                    "thread {t} call {call}: m={m} n={n} k={k} differs from the single-thread result"
                                );
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
                    check_rows(
                        &format!("large [{p}] m={m} n={n} k={k} ({} outputs)", m * n),
                        p,
                        &y,
                        &o,
                        &rows,
                        (m, n, k),
                    )?;
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
        check_rows(&format!("k25600 [{p}] m={m} n={n} k={k} {}", schedule(m, n, k)), p, &y, &o, &rows, (m, n, k))?;
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
/// small enough for compute-sanitizer. Run it alone under each tool (see docs/reliability.md).
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
                check_rows(
                    &format!("boundary [{p}] m={m} n={n} k={k} {}", schedule(m, n, k)),
                    p,
                    &y,
                    &o,
                    &rows,
                    (m, n, k),
                )?;
            }
        }
    }
    Ok(())
}

/// The M values around a tile of `block_m` rows: one row, a ragged tile, a full one, and one row
/// into a second tile row.
fn boundary_ms(block_m: i32) -> Vec<usize> {
    let bm = block_m as usize;
    let mut ms = vec![1, bm / 2 + 1, bm, bm + 1];
    ms.sort();
    ms.dedup();
    ms
}

/// Every compiled configuration of our kernels (exactly the dispatcher's set,
/// `DISPATCHED_CONFIGS`) forced through `with_gemm_config` at its boundary M values
/// ([`boundary_ms`]) on N = 272 (two 128-column blocks and a 16-column remainder; four 64-row
/// tiles and a 16-row remainder) and K = 2048 (16 K blocks): K splits 1, 2 (summed inside a 2-CTA
/// cluster), 3, 5 and 8 (an f32 workspace and the reduce launch) for the configurations that
/// split; the persistent tiles' split tails (the tiles of a partial last round in K ranges) and
/// stream-K (`split_k` = CTAs per SM: 5 column tiles × 16 K blocks = 80 units shared by the
/// grid, across tile boundaries) also on SM budgets of 1, 4 and 5 (full rounds of whole tiles
/// before the split round; one CTA walking every unit). Outputs poisoned first, every output
/// against the exact product, and a second call bitwise identical. The forced configuration is
/// per thread: the other tests of this binary may run in parallel.
#[test]
fn forced_splits_match_reference() -> Result<()> {
    let dev = kernels_device_or_skip!("forced_splits_match_reference");
    let configs = compiled_configs();
    let mut compiled: Vec<_> = configs
        .iter()
        .map(|c| (c.schedule().expect("a compiled configuration of a known kind"), c.block_m, c.block_n, c.stages))
        .collect();
    let mut dispatched = DISPATCHED_CONFIGS.to_vec();
    let key = |c: &(ScheduleKind, i32, i32, i32)| (c.0 as i32, c.1, c.2, c.3);
    compiled.sort_by_key(key);
    dispatched.sort_by_key(key);
    assert_eq!(compiled, dispatched, "the compiled configurations are not exactly the dispatched ones");

    let (n, k) = (272, 2048);
    let mut exact: HashMap<usize, (Operands, Vec<f64>)> = HashMap::new();
    let mut runs = 0;
    for base in &configs {
        let kind = base.schedule().expect("known kind");
        let splits: &[i32] = if base.split_k == 0 { &[1, 2, 3, 5, 8] } else { &[1] };
        let sm_budgets: &[i32] = if kind.fixes_up_in_kernel() { &[0, 1, 4, 5] } else { &[0] };
        for m in boundary_ms(base.block_m) {
            if let std::collections::hash_map::Entry::Vacant(slot) = exact.entry(m) {
                let o = random_operands(m, n, k, (m * 31 + 7) as u64, &dev)?;
                let e = naive_matmul_f64(&o.qa_host, &o.sa_host, &o.w_host, &o.sw_host, m, n, k);
                slot.insert((o, e));
            }
            let (o, want) = &exact[&m];
            for &split_k in splits {
                for &num_sms in sm_budgets {
                    let cfg = GemmConfig { split_k, num_sms, ..*base };
                    let what = format!(
                        "{kind:?} {}x{}x{} split {split_k} on {num_sms} SMs (0: all) m={m} n={n} k={k}",
                        cfg.block_m, cfg.block_n, cfg.stages
                    );
                    // NaN-filled memory freed just before (workspace-sized): the outputs most
                    // likely reuse it.
                    poison(&dev, 8 * m * n)?;
                    let (y, again) = with_gemm_config(cfg, || -> Result<(Tensor, Tensor)> {
                        Ok((gemm(Provider::Hopper, o)?, gemm(Provider::Hopper, o)?))
                    })?;
                    let got: Vec<f64> =
                        y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.into_iter().map(f64::from).collect();
                    judge(&what, Provider::Hopper, &got, want)?;
                    assert!(bits(&y)? == bits(&again)?, "{what}: a second call differs");
                    runs += 1;
                }
            }
        }
    }
    println!("forced configurations: {runs} runs over {} compiled configurations", configs.len());
    Ok(())
}

/// A configuration that is not compiled fails with the kernels' "not compiled" error naming it,
/// never a silent fallback to another configuration.
#[test]
fn uncompiled_configuration_is_an_error() -> Result<()> {
    let dev = kernels_device_or_skip!("uncompiled_configuration_is_an_error");
    let o = random_operands(4, 256, 512, 3, &dev)?;
    let cfg =
        GemmConfig { kind: ScheduleKind::SmallM as i32, block_m: 64, block_n: 128, stages: 5, split_k: 1, num_sms: 0 };
    let e = match with_gemm_config(cfg, || gemm(Provider::Hopper, &o)) {
        Ok(_) => panic!("{cfg:?} is not compiled but ran"),
        Err(e) => e.to_string(),
    };
    println!("uncompiled configuration: {e}");
    assert!(
        e.contains("not compiled") && e.contains("stages: 5"),
        "the error must say so and name the configuration: {e}"
    );
    Ok(())
}
