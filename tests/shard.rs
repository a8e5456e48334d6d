//! Tensor-parallel shards of blocked-FP8 layers (`src/shard.rs`), on the CPU: the shards of
//! every split put back together equal the layer bit for bit; column-parallel outputs
//! concatenated equal the layer's output bit for bit, row-parallel partial outputs summed equal
//! it up to each partial's own bf16 rounding; world size 1 is the layer itself; splits that cut a 128-block,
//! and bad ranks, are refused naming the layer, the size and the world size.

#[path = "common/fixtures.rs"]
mod fixtures;

use candle_core::{DType, Module, Result, Tensor};
use candle_fp8::shard::{Shard, ShardDim};
use candle_fp8::{e4m3_to_f32, Fp8BlockLinear};
use fixtures::{test_input, test_weight};

/// A layer `[n, k]` from `test_weight` (a different magnitude per 128 × 128 block), with a bias.
fn layer(n: usize, k: usize, seed: u64) -> Result<Fp8BlockLinear> {
    let b = test_input(1, n, seed).squeeze(0)?;
    Fp8BlockLinear::from_weight(&test_weight(n, k, seed), Some(b))
}

fn values(t: &Tensor) -> Result<Vec<f32>> {
    let t = if t.dtype() == DType::F32 { t.clone() } else { e4m3_to_f32(t)? };
    t.flatten_all()?.to_vec1::<f32>()
}

/// Weights (as e4m3 values), scales and bias of two layers are identical.
fn assert_same(what: &str, a: &Fp8BlockLinear, b: &Fp8BlockLinear) -> Result<()> {
    assert_eq!(a.weight().dims(), b.weight().dims(), "{what}: weight shape");
    assert_eq!(values(a.weight())?, values(b.weight())?, "{what}: weight codes");
    assert_eq!(a.weight_scale_inv().dims(), b.weight_scale_inv().dims(), "{what}: scale shape");
    assert_eq!(values(a.weight_scale_inv())?, values(b.weight_scale_inv())?, "{what}: scales");
    match (a.bias(), b.bias()) {
        (Some(x), Some(y)) => assert_eq!(values(x)?, values(y)?, "{what}: bias"),
        (None, None) => {}
        _ => panic!("{what}: one has a bias, the other not"),
    }
    Ok(())
}

#[test]
fn shards_round_trip_bit_for_bit() -> Result<()> {
    // 640 = 5 blocks of 128, 1024 = 8 blocks; N with a partial last block only at world 1.
    let l = layer(1024, 640, 1)?;
    for (dim, size) in [(ShardDim::Output, 1024), (ShardDim::Input, 640)] {
        for world in [1usize, 2, 4, 8, 5] {
            if world > 1 && size % (world * 128) != 0 {
                continue;
            }
            let parts: Vec<Fp8BlockLinear> =
                (0..world).map(|r| l.shard("layer", Shard::new(dim, r, world)?)).collect::<Result<_>>()?;
            for (r, p) in parts.iter().enumerate() {
                let want = match dim {
                    ShardDim::Output => (size / world, 640),
                    ShardDim::Input => (1024, size / world),
                };
                assert_eq!((p.out_dim(), p.in_dim()), want, "{dim:?} world {world} rank {r}: shape");
                assert_eq!(p.bias().is_some(), dim == ShardDim::Output || r == 0, "{dim:?} rank {r}: bias");
            }
            let back = Fp8BlockLinear::unshard("layer", &parts.iter().collect::<Vec<_>>(), dim)?;
            assert_same(&format!("{dim:?} world {world}"), &back, &l)?;
        }
    }
    // World size 1 is the layer itself, whatever its sizes (576: a partial last block).
    let odd = layer(576, 576, 2)?;
    assert_same("world 1", &odd.shard("odd", Shard::new(ShardDim::Output, 0, 1)?)?, &odd)?;
    Ok(())
}

#[test]
fn sharded_forward_equals_the_layer() -> Result<()> {
    // No bias: each bf16 bias add would be one more rounding per partial.
    let l = Fp8BlockLinear::from_weight(&test_weight(512, 1024, 3), None)?;
    let x = test_input(7, 1024, 9);
    let full = l.forward(&x)?;
    let world = 4;
    // Column-parallel: each rank's outputs are the layer's columns, exactly.
    let cols = (0..world)
        .map(|r| l.shard("l", Shard::new(ShardDim::Output, r, world)?)?.forward(&x))
        .collect::<Result<Vec<_>>>()?;
    assert_eq!(values(&Tensor::cat(&cols, 1)?)?, values(&full)?, "column-parallel outputs");
    // Row-parallel: each rank takes its slice of the input; the partial outputs add up to the
    // layer's output. The activation groups are the same 128-blocks and every product the same;
    // what differs is that each partial is rounded to the contract's bf16 output on its own:
    // |Σ partials − full| ≤ 2⁻⁸ (Σ |partial| + |full|) per element, bf16's unit roundoff (plus f32
    // order). A wrong
    // scale block or input slice is off by the size of a partial.
    let mut parts = Vec::new();
    for r in 0..world {
        let part = l.shard("l", Shard::new(ShardDim::Input, r, world)?)?;
        parts.push(values(&part.forward(&x.narrow(1, r * 256, 256)?)?)?);
    }
    let full = values(&full)?;
    for (i, f) in full.iter().enumerate() {
        let sum: f32 = parts.iter().map(|p| p[i]).sum();
        let abs: f32 = parts.iter().map(|p| p[i].abs()).sum();
        let bound = (abs + f.abs()) / 256.0 + 1e-5 * abs;
        assert!((sum - f).abs() <= bound, "output {i}: partials sum to {sum}, the layer gives {f} (bound {bound})");
    }
    Ok(())
}

#[test]
fn splits_that_cut_a_block_are_refused() -> Result<()> {
    let l = layer(640, 576, 4)?;
    let err =
        |dim, rank, world| l.shard("model.layers.0.mlp.down_proj", Shard { dim, rank, world }).unwrap_err().to_string();
    // 640 = 5 blocks over 2 ranks; 576 = 4.5 blocks over 2 ranks.
    let e = err(ShardDim::Output, 0, 2);
    assert!(e.contains("down_proj") && e.contains("640") && e.contains("2 ranks") && e.contains("5 blocks"), "{e}");
    let e = err(ShardDim::Input, 1, 2);
    assert!(e.contains("in_dim") && e.contains("576") && e.contains("partial"), "{e}");
    let e = Shard::new(ShardDim::Output, 2, 2).unwrap_err().to_string();
    assert!(e.contains("rank 2") && e.contains("world size 2"), "{e}");
    assert!(Shard::new(ShardDim::Input, 0, 0).is_err(), "world size 0");
    // Mismatched parts cannot be put back together.
    let a = layer(256, 256, 5)?;
    let b = layer(256, 128, 6)?;
    assert!(Fp8BlockLinear::unshard("x", &[&a, &b], ShardDim::Output).is_err(), "in_dim 256 vs 128");
    Ok(())
}
