//! The collectives of tensor parallelism (`src/collective.rs`) on CPU threads: the sum over
//! ranks is the same bits on every rank, equal to adding the contributions in rank order in f32
//! and rounding once; the gather concatenates in rank order; mismatched contributions are
//! refused on every rank; world size 1 returns its input.

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::collective::{Collective, Single, ThreadGroup};

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
