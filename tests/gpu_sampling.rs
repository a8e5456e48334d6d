//! The greedy-sampling kernel (`src/cuda/sampling.rs`, `kernels/sampling/sampling.cu`) on CUDA
//! (built only with the `cuda` feature; without a CUDA sm_90 device every test reports
//! `SKIP <test>: <reason>` on stderr, a failure under `CANDLE_FP8_REQUIRE_GPU=1`).
//!
//! `argmax_last_dim` must return what candle's CPU `argmax(D::Minus1)` returns for the same
//! values (f32, and bf16 — the lm_head's own output), index for index: rows 1, 3, 16 ×
//! columns 1, 5, 1000, 151936 (Qwen3's vocabulary) and 151937 (odd: every row but the first starts off a 16-byte boundary), with random rows,
//! planted ties (the first index must win, also when a later index sits in a lower thread),
//! constant rows, -inf and +inf, NaNs (column 0 and elsewhere), signed zeros; views with an
//! unaligned start offset, a row stride wider than the row, more leading dimensions, a
//! broadcast row. Output memory is recycled NaN poison, so an unwritten index cannot pass.
//! Then the errors (dtype, strided last dimension, CPU tensor, ...), greedy `Sampler` on CUDA
//! against the CPU, and the time per call against candle's CUDA argmax.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::poison;

use candle_core::{DType, Device, Result, Tensor, D};
use candle_fp8::kernels::argmax_last_dim;
use candle_fp8::models::Sampler;
use candle_fp8::testing::Rng;

const ROWS: [usize; 3] = [1, 3, 16];
const COLS: [usize; 5] = [1, 5, 1000, 151936, 151937];

/// What a row holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// N(0, 1).
    Random,
    /// U(-1, 1) with the maximum 4.0 planted at several columns, among them late columns that
    /// a low thread scans (4096, 4097) and early ones that a high thread scans.
    Ties,
    /// One value everywhere (answer 0).
    Constant,
    /// -inf everywhere but for a few finite values (on odd rows: -inf everywhere, answer 0).
    NegInf,
    /// N(0, 1) with +inf at a few columns (the first one wins).
    PosInf,
    /// NaNs: at column 0 on rows 0 mod 3 (answer 0), sprinkled elsewhere (ignored) on rows
    /// 1 mod 3, everywhere on rows 2 mod 3 (answer 0).
    Nan,
    /// -0.0 and +0.0 as the maximum (equal: the first one wins), negatives elsewhere.
    SignedZero,
}

const KINDS: [Kind; 7] =
    [Kind::Random, Kind::Ties, Kind::Constant, Kind::NegInf, Kind::PosInf, Kind::Nan, Kind::SignedZero];

fn fill_row(kind: Kind, row: &mut [f32], r: usize, rng: &mut Rng) {
    let n = row.len();
    let pick = |rng: &mut Rng| (rng.next_u64() % n as u64) as usize;
    match kind {
        Kind::Random => row.iter_mut().for_each(|x| *x = rng.normal_f32()),
        Kind::Ties => {
            row.iter_mut().for_each(|x| *x = rng.uniform_f32());
            for c in [n - 1, n / 2, n / 3 + 1, 4097, 4096, 5] {
                if c < n {
                    row[c] = 4.0;
                }
            }
            for _ in 0..3 {
                row[pick(rng)] = 4.0;
            }
        }
        Kind::Constant => row.iter_mut().for_each(|x| *x = 0.25 * r as f32 - 1.0),
        Kind::NegInf => {
            row.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            if r % 2 == 0 {
                for _ in 0..4 {
                    row[pick(rng)] = rng.normal_f32();
                }
            }
        }
        Kind::PosInf => {
            row.iter_mut().for_each(|x| *x = rng.normal_f32());
            for _ in 0..3 {
                row[pick(rng)] = f32::INFINITY;
            }
        }
        Kind::Nan => {
            row.iter_mut().for_each(|x| *x = rng.normal_f32());
            match r % 3 {
                0 => row[0] = f32::NAN,
                1 => {
                    for _ in 0..(n / 10).max(1) {
                        row[pick(rng)] = f32::NAN;
                    }
                    if n > 1 {
                        row[n - 1] = 1e30; // the maximum behind NaNs
                    }
                }
                _ => row.iter_mut().for_each(|x| *x = f32::NAN),
            }
        }
        Kind::SignedZero => {
            row.iter_mut().for_each(|x| *x = -1.0 - rng.uniform_f32().abs());
            for _ in 0..4 {
                let c = pick(rng);
                row[c] = if c % 2 == 0 { 0.0 } else { -0.0 };
            }
        }
    }
}

/// `len` values: consecutive `cols`-wide rows of `kind` (a partial last row is random).
fn values(kind: Kind, len: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut v = vec![0f32; len];
    for (r, row) in v.chunks_mut(cols).enumerate() {
        if row.len() == cols {
            fill_row(kind, row, r, &mut rng);
        } else {
            row.iter_mut().for_each(|x| *x = rng.normal_f32());
        }
    }
    v
}

/// Asserts `argmax_last_dim(view(gpu copy of base))` equals candle's CPU argmax of
/// `view(base)`, shape and every index.
fn check(what: &str, base: &Tensor, dev: &Device, view: impl Fn(&Tensor) -> Result<Tensor>) -> Result<()> {
    let cpu = view(base)?;
    let gpu = view(&base.to_device(dev)?)?;
    assert_eq!(gpu.stride(), cpu.stride(), "{what}: the views differ");
    let want = cpu.argmax(D::Minus1)?;
    // NaN poison (as u32: 0x7fc00000 or 0x7fc0_7fc0, never a valid index) in recycled memory.
    poison(dev, 4 * gpu.elem_count() / gpu.dims().last().unwrap() + 4096)?;
    let got = argmax_last_dim(&gpu)?;
    assert_eq!(got.dtype(), DType::U32, "{what}: dtype");
    assert!(got.device().same_device(dev), "{what}: the result is not on the logits' device");
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let (g, w) = (got.flatten_all()?.to_vec1::<u32>()?, want.flatten_all()?.to_vec1::<u32>()?);
    if let Some(r) = (0..w.len()).find(|&r| g[r] != w[r]) {
        panic!("{what}: row {r}: got index {}, candle's CPU argmax {}", g[r], w[r]);
    }
    Ok(())
}

#[test]
fn argmax_matches_candle_cpu() -> Result<()> {
    let dev = kernels_device_or_skip!("argmax_matches_candle_cpu");
    for kind in KINDS {
        for &rows in &ROWS {
            for &cols in &COLS {
                let seed = (rows * 1_000_003 + cols) as u64 ^ kind as u64;
                let base = Tensor::from_vec(values(kind, rows * cols, cols, seed), (rows, cols), &Device::Cpu)?;
                // bf16: the lm_head's own output (rounding makes more ties); candle's CPU
                // argmax of the same bf16 values is the reference.
                for dt in [DType::F32, DType::BF16] {
                    check(&format!("{kind:?} {dt:?} [{rows}, {cols}]"), &base.to_dtype(dt)?, &dev, |t| Ok(t.clone()))?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn argmax_of_views_matches_candle_cpu() -> Result<()> {
    let dev = kernels_device_or_skip!("argmax_of_views_matches_candle_cpu");
    for kind in [Kind::Random, Kind::Ties, Kind::Nan] {
        for &rows in &ROWS {
            for &cols in &COLS {
                let seed = (rows * 7919 + cols) as u64 ^ (kind as u64) << 32;
                let what = format!("{kind:?} [{rows}, {cols}]");
                // Start offset 1 (4 bytes past a 16-byte boundary), contiguous rows.
                let flat = Tensor::from_vec(values(kind, rows * cols + 3, cols, seed), rows * cols + 3, &Device::Cpu)?;
                check(&format!("{what} at offset 1"), &flat, &dev, |t| {
                    t.narrow(0, 1, rows * cols)?.reshape((rows, cols))
                })?;
                // bf16 at offsets 1 and 3 (2 and 6 bytes past a 16-byte boundary).
                let flat16 = flat.to_dtype(DType::BF16)?;
                for off in [1, 3] {
                    check(&format!("{what} bf16 at offset {off}"), &flat16, &dev, |t| {
                        t.narrow(0, off, rows * cols)?.reshape((rows, cols))
                    })?;
                }
                // Columns 1..=cols of [rows, cols + 3]: offset 1, row stride cols + 3.
                let wide =
                    Tensor::from_vec(values(kind, rows * (cols + 3), cols + 3, seed), (rows, cols + 3), &Device::Cpu)?;
                check(&format!("{what} of a wider row"), &wide, &dev, |t| t.narrow(1, 1, cols))?;
                check(&format!("{what} bf16 of a wider row"), &wide.to_dtype(DType::BF16)?, &dev, |t| {
                    t.narrow(1, 1, cols)
                })?;
            }
        }
        // Three dimensions -> [2, 3]; one dimension -> a scalar; a broadcast row (stride 0).
        for &cols in &[5, 151936, 151937] {
            let v = values(kind, 6 * cols, cols, cols as u64);
            let t3 = Tensor::from_vec(v.clone(), (2, 3, cols), &Device::Cpu)?;
            check(&format!("{kind:?} [2, 3, {cols}]"), &t3, &dev, |t| Ok(t.clone()))?;
            check(&format!("{kind:?} [2, 3, {cols}] from index 1 of dim 0"), &t3, &dev, |t| t.narrow(0, 1, 1))?;
            let t1 = Tensor::from_vec(v[cols..2 * cols].to_vec(), cols, &Device::Cpu)?;
            check(&format!("{kind:?} [{cols}]"), &t1, &dev, |t| Ok(t.clone()))?;
            check(&format!("{kind:?} [{cols}] broadcast to [4, {cols}]"), &t1, &dev, |t| t.broadcast_as((4, cols)))?;
        }
    }
    Ok(())
}

fn expect_err(what: &str, r: Result<Tensor>, needles: &[&str]) {
    let msg = match r {
        Ok(t) => panic!("{what}: expected an error, got a result of shape {:?}", t.dims()),
        Err(e) => e.to_string(),
    };
    for n in needles {
        assert!(msg.contains(n), "{what}: the error should mention {n:?}: {msg}");
    }
}

#[test]
fn argmax_rejects_what_it_cannot_read() -> Result<()> {
    let dev = kernels_device_or_skip!("argmax_rejects_what_it_cannot_read");
    let x = Tensor::from_vec(values(Kind::Random, 4 * 6 * 10, 10, 1), (4, 6, 10), &Device::Cpu)?;
    let g = x.to_device(&dev)?;
    expect_err(
        "f16",
        argmax_last_dim(&g.to_dtype(DType::F16)?),
        &["argmax_last_dim", "logits", "must be f32 or bf16", "F16", "[4, 6, 10]"],
    );
    expect_err(
        "strided last dimension",
        argmax_last_dim(&g.transpose(1, 2)?),
        &["logits", "contiguous along the last dimension", "[4, 10, 6]", "stride [60, 1, 10]"],
    );
    expect_err("CPU tensor", argmax_last_dim(&x), &["logits", "must be on a CUDA device", "Cpu", "F32"]);
    expect_err(
        "leading dimensions of two strides",
        argmax_last_dim(&g.narrow(1, 0, 3)?),
        &["logits", "flatten", "[4, 3, 10]", "stride [60, 10, 1]"],
    );
    expect_err("scalar", argmax_last_dim(&g.flatten_all()?.get(0)?), &["logits", "at least one dimension"]);
    Ok(())
}

#[test]
fn greedy_sampler_on_cuda_matches_the_cpu() -> Result<()> {
    let dev = kernels_device_or_skip!("greedy_sampler_on_cuda_matches_the_cpu");
    for kind in KINDS {
        for rows in [1, 16] {
            let cols = 151936;
            let logits =
                Tensor::from_vec(values(kind, rows * cols, cols, 42 + rows as u64), (rows, cols), &Device::Cpu)?;
            for dt in [DType::F32, DType::BF16] {
                let logits = logits.to_dtype(dt)?;
                let want = Sampler::greedy().sample(&logits)?.to_vec1::<u32>()?;
                let got = Sampler::greedy().sample(&logits.to_device(&dev)?)?;
                assert!(got.device().same_device(&dev), "{kind:?}: the ids must stay on the device");
                assert_eq!(got.to_vec1::<u32>()?, want, "{kind:?} {dt:?} [{rows}, {cols}]");
            }
        }
    }
    Ok(())
}

/// Wall time per call of `f`, run `iters` times back to back after a warm-up (includes the
/// host side of each launch: launch-bound below ~5-10 µs).
fn per_call_us(dev: &Device, iters: usize, f: impl Fn() -> Result<Tensor>) -> Result<f64> {
    for _ in 0..10 {
        f()?;
    }
    dev.synchronize()?;
    let t0 = std::time::Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

#[test]
fn argmax_is_faster_than_candle_cuda() -> Result<()> {
    let dev = kernels_device_or_skip!("argmax_is_faster_than_candle_cuda");
    for rows in [1, 16] {
        let cols = 151936;
        let logits = Tensor::from_vec(values(Kind::Random, rows * cols, cols, 9), (rows, cols), &dev)?;
        let ours = per_call_us(&dev, 200, || argmax_last_dim(&logits))?;
        let candle = per_call_us(&dev, 200, || logits.argmax(D::Minus1))?;
        println!(
            "argmax f32 [{rows}, {cols}]: ours {ours:.1} µs, candle {candle:.1} µs per call ({:.1}x)",
            candle / ours
        );
        assert!(ours < candle, "[{rows}, {cols}]: ours {ours:.1} µs is not faster than candle's {candle:.1} µs");
    }
    Ok(())
}

/// `IdReadback::finish` returns the ids only once their copy has run: ids computed after tens of
/// milliseconds of queued GPU work (f32 matmuls), read without any other synchronization, equal
/// what a synchronous `to_vec1` reads, in both slots of the double buffer, which hold poison
/// (u32::MAX) from a first round. Also its errors.
#[test]
fn id_readback_waits_for_the_copy() -> Result<()> {
    use candle_fp8::kernels::IdReadback;
    let dev = gpu_or_skip!("id_readback_waits_for_the_copy");
    let n = 2048;
    let mut rb = IdReadback::new(&dev, n)?;
    let poison = Tensor::full(u32::MAX, n, &dev)?;
    for _ in 0..2 {
        rb.start(&poison)?;
        assert!(rb.finish()?.iter().all(|&v| v == u32::MAX));
    }
    let a = (Tensor::randn(0f32, 1.0, (n, n), &dev)? / (n as f64).sqrt())?;
    let mut want = Vec::new();
    let mut x = a.clone();
    for _ in 0..2 {
        // ~20 x 17 GFLOP of f32 GEMMs queued ahead of the ids.
        for _ in 0..20 {
            x = x.matmul(&a)?;
        }
        let ids = x.argmax(D::Minus1)?.to_dtype(DType::U32)?;
        rb.start(&ids)?;
        want.push(ids);
    }
    assert_eq!(rb.in_flight(), 2);
    assert!(rb.start(&poison).is_err(), "a third copy in flight is refused");
    for ids in want {
        let got = rb.finish()?;
        assert_eq!(got, ids.to_vec1::<u32>()?, "readback equals a synchronous read");
        assert!(got.iter().any(|&v| v != 0) && got.iter().all(|&v| (v as usize) < n));
    }
    let e = rb.finish().unwrap_err().to_string();
    assert!(e.contains("without a started copy"), "{e}");
    let e = rb.start(&Tensor::zeros(n, DType::F32, &dev)?).unwrap_err().to_string();
    assert!(e.contains("expected 2048 u32 ids") && e.contains("F32"), "{e}");
    let e = rb.start(&Tensor::zeros(n + 1, DType::U32, &dev)?).unwrap_err().to_string();
    assert!(e.contains("[2049]"), "{e}");
    assert!(IdReadback::new(&Device::Cpu, 4).unwrap_err().to_string().contains("needs a CUDA device"));
    Ok(())
}
