//! The collectives of tensor parallelism (`src/collective.rs`) on CPU threads: the sum over
//! ranks is the same bits on every rank, equal to adding the contributions in rank order in f32
//! and rounding once; the gather concatenates in rank order; mismatched contributions are
//! refused on every rank; world size 1 returns its input. A rank that leaves its group before an
//! exchange makes the others' exchange fail naming it (not wait forever), while ranks leaving
//! after their last exchange disturb no one; `Timed` counts the calls and returns the same bits.

use std::sync::Arc;
use std::time::Duration;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::collective::{Collective, Single, ThreadGroup, Timed};

/// Rank r's contribution: values that differ per rank and lose bits when summed in bf16.
fn part(r: usize, dtype: DType) -> Result<Tensor> {
    let v: Vec<f32> = (0..96).map(|i| ((i * 7 + r * 13) % 17) as f32 * 0.37 + 1000.0 * (r as f32 - 1.5)).collect();
    Tensor::from_vec(v, (8, 12), &Device::Cpu)?.to_dtype(dtype)
}

/// Runs `f` on every rank of a group of `world` threads and returns the results in rank order.
fn on_ranks<T: Send + 'static>(world: usize, f: fn(&ThreadGroup) -> Result<T>) -> Vec<Result<T>> {
    let handles: Vec<_> =
        ThreadGroup::new(world).unwrap().into_iter().map(|g| std::thread::spawn(move || f(&g))).collect();
    handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|x| x.to_bits()).collect())
}

#[test]
fn all_reduce_is_the_rank_ordered_f32_sum_on_every_rank() -> Result<()> {
    for dtype in [DType::F32, DType::BF16] {
        let results = if dtype == DType::F32 {
            on_ranks(4, |g| g.all_reduce_sum(&part(g.rank(), DType::F32)?))
        } else {
            on_ranks(4, |g| g.all_reduce_sum(&part(g.rank(), DType::BF16)?))
        };
        let mut want = part(0, dtype)?.to_dtype(DType::F32)?;
        for r in 1..4 {
            want = (want + part(r, dtype)?.to_dtype(DType::F32)?)?;
        }
        let want = bits(&want.to_dtype(dtype)?)?;
        for (r, got) in results.into_iter().enumerate() {
            let got = got?;
            assert_eq!(got.dtype(), dtype, "rank {r}: dtype kept");
            assert_eq!(bits(&got)?, want, "{dtype:?} rank {r}: not the rank-ordered f32 sum");
        }
    }
    Ok(())
}

#[test]
fn all_gather_concatenates_in_rank_order() -> Result<()> {
    let results = on_ranks(3, |g| g.all_gather(&part(g.rank(), DType::F32)?.narrow(1, 0, 4)?, 1));
    let want = Tensor::cat(&(0..3).map(|r| part(r, DType::F32)?.narrow(1, 0, 4)).collect::<Result<Vec<_>>>()?, 1)?;
    for (r, got) in results.into_iter().enumerate() {
        let got = got?;
        assert_eq!(got.dims(), &[8, 12], "rank {r}");
        assert_eq!(bits(&got)?, bits(&want)?, "rank {r}");
    }
    Ok(())
}

#[test]
fn mismatched_contributions_are_refused_on_every_rank() {
    let results = on_ranks(2, |g| {
        let t = if g.rank() == 1 { Tensor::zeros((3, 3), DType::F32, &Device::Cpu)? } else { part(0, DType::F32)? };
        g.all_reduce_sum(&t)
    });
    for (r, res) in results.into_iter().enumerate() {
        let e = res.expect_err("shapes differ").to_string();
        assert!(e.contains("rank 1") && e.contains("[3, 3]") && e.contains("[8, 12]"), "rank {r}: {e}");
    }
    assert!(ThreadGroup::new(0).is_err());
}

#[test]
fn world_size_one_returns_its_input() -> Result<()> {
    let t = part(2, DType::BF16)?;
    assert_eq!(bits(&Single.all_reduce_sum(&t)?)?, bits(&t)?);
    assert_eq!(bits(&Single.all_gather(&t, 0)?)?, bits(&t)?);
    assert_eq!((Single.rank(), Single.world()), (0, 1));
    // A group of one thread takes the same path as the larger groups.
    let r = on_ranks(1, |g| g.all_reduce_sum(&part(2, DType::BF16)?));
    assert_eq!(bits(&r.into_iter().next().unwrap()?)?, bits(&t)?);
    Ok(())
}

/// Like `on_ranks`, but a rank that has not answered after a minute fails the test instead of
/// blocking it.
fn on_ranks_or_hang<T: Send + 'static>(world: usize, f: fn(ThreadGroup) -> Result<T>) -> Vec<Result<T>> {
    let (tx, rx) = std::sync::mpsc::channel();
    for g in ThreadGroup::new(world).unwrap() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let r = g.rank();
            let _ = tx.send((r, f(g)));
        });
    }
    let mut out: Vec<Option<Result<T>>> = (0..world).map(|_| None).collect();
    for _ in 0..world {
        let (r, res) = rx.recv_timeout(Duration::from_secs(60)).expect("a rank waits forever");
        out[r] = Some(res);
    }
    out.into_iter().map(Option::unwrap).collect()
}

#[test]
fn a_rank_that_leaves_fails_the_others_instead_of_blocking_them() {
    // Rank 1 ends (dropping its handle) before the exchange the others wait in.
    let results = on_ranks_or_hang(3, |g| {
        if g.rank() == 1 {
            return Ok(None);
        }
        g.all_reduce_sum(&part(g.rank(), DType::F32)?).map(Some)
    });
    for r in [0, 2] {
        let e = results[r].as_ref().expect_err("rank 1 never joins").to_string();
        assert!(e.contains("rank 1 of 3 left the group") && e.contains("all_reduce_sum"), "rank {r}: {e}");
    }
    // Every later exchange fails at once, too.
    let results = on_ranks_or_hang(2, |g| {
        if g.rank() == 0 {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(50));
        let first = g.all_gather(&part(1, DType::F32)?, 0).map(|_| 1);
        assert!(first.is_err());
        g.all_gather(&part(1, DType::F32)?, 0).map(|_| 2)
    });
    assert!(results[1].as_ref().unwrap_err().to_string().contains("rank 0 of 2 left the group"));
}

#[test]
fn ranks_leaving_after_their_last_exchange_disturb_no_one() {
    // The ranks return as soon as their last exchange is done, unevenly: none of them may see
    // another one's departure as a failure.
    for _ in 0..20 {
        let results = on_ranks_or_hang(3, |g| {
            let mut last = None;
            for i in 0..30 {
                if (i + g.rank()) % 7 == 0 {
                    std::thread::yield_now();
                }
                last = Some(g.all_reduce_sum(&part(g.rank(), DType::F32)?)?);
            }
            Ok(last)
        });
        for (r, res) in results.into_iter().enumerate() {
            assert!(res.is_ok(), "rank {r}: {:?}", res.err());
        }
    }
}

#[test]
fn timed_counts_the_calls_and_changes_nothing() -> Result<()> {
    // One rank: the input itself, the calls counted.
    let timed = Timed::new(Arc::new(ThreadGroup::new(1)?.remove(0)), false);
    let t = part(3, DType::BF16)?;
    assert_eq!(bits(&timed.all_reduce_sum(&t)?)?, bits(&t)?, "a timed one-rank sum is its input");
    let before = timed.stats();
    assert_eq!(timed.all_gather(&t, 1)?.dims(), &[8, 12]);
    timed.all_gather(&t, 0)?;
    let after = timed.stats();
    assert_eq!((before.all_reduce_calls, before.all_gather_calls), (1, 0));
    assert_eq!((after.all_reduce_calls, after.all_gather_calls), (1, 2));
    let d = after.since(&before);
    assert_eq!((d.all_reduce_calls, d.all_gather_calls, d.all_reduce), (0, 2, Duration::ZERO));
    assert!(after.all_gather > Duration::ZERO);
    assert_eq!((timed.rank(), timed.world()), (0, 1));
    // Across ranks: the same bits as the untimed group.
    let timed = on_ranks_or_hang(4, |g| {
        let r = g.rank();
        let t = Timed::new(Arc::new(g), false);
        let s = t.all_reduce_sum(&part(r, DType::BF16)?)?;
        Ok((bits(&s)?, t.stats().all_reduce_calls))
    });
    let plain = on_ranks(4, |g| bits(&g.all_reduce_sum(&part(g.rank(), DType::BF16)?)?));
    for (t, p) in timed.into_iter().zip(plain) {
        let (t, calls) = t?;
        assert_eq!((t, calls), (p?, 1));
    }
    Ok(())
}
