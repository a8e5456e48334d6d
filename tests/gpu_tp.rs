//! Tensor parallelism over NCCL (`collective::Nccl`, feature `nccl`) on the GPUs of this host:
//! a toy Qwen3 split over one rank is the model itself, bit for bit; over two GPUs (skipped,
//! saying so, with fewer) every rank returns the same logits, within the FP8 path's noise of one
//! rank's (as `tests/tp.rs` checks on CPU threads), and the same 64 greedy tokens. Loading a
//! rank's share shard-wise (each layer cut on the host, only the share copied to the GPU) gives
//! the same weights, scales and logits bits as loading the whole model on the GPU and splitting
//! it: over one GPU (a world of one through that path) and over two.
#![cfg(feature = "nccl")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::collective::{Collective, Nccl};
use candle_fp8::models::{generate, DecoderConfig, DecoderModel, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;
use candle_fp8::AnyLinear;

const CORPUS: &str =
    "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with one step. ";

fn cfg() -> DecoderConfig {
    DecoderConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(2),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    }
}

fn load(dir: &std::path::Path, dev: &Device) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let opts = ModelOptions::default();
    DecoderModel::load(&cfg(), ck.var_builder(opts.dtype_for(dev), dev), &|m| ck.is_quantized(m), &opts)
}

type Run = (Vec<Vec<f32>>, Vec<u32>);

fn run(m: &mut DecoderModel, prompt: &[u32]) -> Result<Run> {
    m.clear_kv_cache();
    let ids = Tensor::new(prompt, m.device())?.unsqueeze(0)?;
    let logits = m.forward_all(&ids, 0)?.squeeze(0)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    m.clear_kv_cache();
    let g = generate(m, prompt, 1, 64, &mut Sampler::greedy(), &[], &mut |_, _| {})?;
    Ok((logits, g.tokens[0].clone()))
}

fn bits(v: &[Vec<f32>]) -> Vec<u32> {
    v.iter().flatten().map(|x| x.to_bits()).collect()
}

/// Each rank on its device and thread: the toy model loaded there, split, run.
fn on_ranks(dir: &std::path::Path, devices: &[Device], prompt: &[u32]) -> Result<Vec<Run>> {
    let handles: Vec<_> = Nccl::for_devices(devices)?
        .into_iter()
        .zip(devices.iter().cloned())
        .map(|(comm, dev)| {
            let (dir, prompt) = (dir.to_path_buf(), prompt.to_vec());
            std::thread::spawn(move || -> Result<Run> {
                let comm: Arc<dyn Collective> = Arc::new(comm);
                let mut m = load(&dir, &dev)?.shard(comm)?;
                run(&mut m, &prompt)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
}

#[test]
fn cuda_nccl_ranks_decode_like_one() -> Result<()> {
    const NAME: &str = "cuda_nccl_ranks_decode_like_one";
    let dev = kernels_device_or_skip!(NAME);
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, &CORPUS.repeat(4))?;
    let prompt: Vec<u32> = "the quick brown fox jumps".bytes().map(u32::from).collect();
    let (want, want_tokens) = run(&mut load(dir.path(), &dev)?, &prompt)?;

    let one = on_ranks(dir.path(), std::slice::from_ref(&dev), &prompt)?;
    assert_eq!(bits(&one[0].0), bits(&want), "world 1: logits differ from the unsplit model");
    assert_eq!(one[0].1, want_tokens, "world 1: tokens");

    let Ok(second) = Device::new_cuda(1) else {
        gpu::skip(&format!("{NAME} [2 ranks]"), "needs a second GPU");
        return Ok(());
    };
    let two = on_ranks(dir.path(), &[dev.clone(), second], &prompt)?;
    assert_eq!(bits(&two[0].0), bits(&two[1].0), "the ranks' logits differ");
    assert_eq!(two[0].1, two[1].1, "the ranks' tokens differ");
    let cpu = load(dir.path(), &Device::Cpu)?;
    let noise = gpu::LogitDiff::of(&run(&mut cpu.to_reference()?, &prompt)?.0, &run(&mut cpu.to_dense()?, &prompt)?.0);
    let d = gpu::LogitDiff::of(&two[0].0, &want);
    let bounds = gpu::LogitBounds::new(&gpu::LogitScales::of(dir.path(), cfg().num_hidden_layers)?, &noise, 2, 2);
    bounds.check("2 ranks vs 1", &d);
    assert_eq!(two[0].1, want_tokens, "2 ranks: greedy tokens over 64 steps");
    Ok(())
}

/// Every weight of `m` (embedding; linears' weights, scales, biases) as f32 bits, on the host.
fn weight_bits(m: &DecoderModel) -> Result<Vec<(String, Vec<u32>)>> {
    let host = |t: &Tensor| -> Result<Vec<u32>> {
        let v = t.to_device(&Device::Cpu)?.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(v.into_iter().map(f32::to_bits).collect())
    };
    let mut out = vec![("embed".to_string(), host(m.embedding())?)];
    for (name, l) in m.linears() {
        match l {
            AnyLinear::Fp8(f) | AnyLinear::Fp8Reference(f) => {
                out.push((format!("{name}.weight"), host(f.weight())?));
                out.push((format!("{name}.scale"), host(f.weight_scale_inv())?));
                if let Some(b) = f.bias() {
                    out.push((format!("{name}.bias"), host(b)?));
                }
            }
            AnyLinear::Dense(d) => out.push((format!("{name}.weight"), host(d.weight())?)),
        }
    }
    Ok(out)
}

#[test]
fn cuda_shard_wise_loading_is_the_sharded_model() -> Result<()> {
    const NAME: &str = "cuda_shard_wise_loading_is_the_sharded_model";
    let dev = kernels_device_or_skip!(NAME);
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, &CORPUS.repeat(4))?;
    let prompt: Vec<u32> = "the quick brown fox jumps".bytes().map(u32::from).collect();
    let mut worlds = vec![vec![dev.clone()]];
    match Device::new_cuda(1) {
        Ok(second) => worlds.push(vec![dev.clone(), second]),
        Err(_) => gpu::skip(&format!("{NAME} [2 ranks]"), "needs a second GPU"),
    }
    for devices in worlds {
        let world = devices.len();
        // Two groups: the shard-wise loaded model's and the split model's.
        let (a, b) = (Nccl::for_devices(&devices)?, Nccl::for_devices(&devices)?);
        let handles: Vec<_> = a
            .into_iter()
            .zip(b)
            .zip(devices.iter().cloned())
            .map(|((a, b), dev)| {
                let (dir, prompt) = (dir.path().to_path_buf(), prompt.clone());
                std::thread::spawn(move || -> Result<(bool, Run, Run)> {
                    let ck = Checkpoint::open(&dir)?;
                    let opts = ModelOptions::default().tensor_parallel(Arc::new(a));
                    let mut loaded = DecoderModel::from_checkpoint(&ck, &dev, &opts, &mut |_, _| {})?;
                    let mut cut = load(&dir, &dev)?.shard(Arc::new(b))?;
                    let same = weight_bits(&loaded)? == weight_bits(&cut)?;
                    Ok((same, run(&mut loaded, &prompt)?, run(&mut cut, &prompt)?))
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let (same, x, y) = h.join().expect("rank thread")?;
            assert!(same, "{world} ranks, rank {r}: the shard-wise loaded weights differ");
            assert_eq!(bits(&x.0), bits(&y.0), "{world} ranks, rank {r}: logits");
            assert_eq!(x.1, y.1, "{world} ranks, rank {r}: greedy tokens");
        }
    }
    Ok(())
}
