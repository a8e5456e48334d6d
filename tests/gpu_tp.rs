//! Tensor parallelism over NCCL (`collective::Nccl`, feature `nccl`) on the GPUs of this host:
//! a toy Qwen3 split over one rank is the model itself, bit for bit; over two GPUs (the
//! `multi_gpu_*` tests, skipped saying so with fewer) every rank returns the same logits, within the FP8 path's noise of one
//! rank's (as `tests/tp.rs` checks on CPU threads), and the same 64 greedy tokens. Loading a
//! rank's share shard-wise (each layer cut on the host, only the share copied to the GPU) gives
//! the same weights, scales and logits bits as loading the whole model on the GPU and splitting
//! it: over one GPU (a world of one through that path) and over two.
#![cfg(feature = "nccl")]

#[path = "common/gpu.rs"]
#[allow(unused_macros)] // the skip macros return from a test; the world helper here cannot
mod gpu;

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::collective::{Collective, Nccl};
use candle_fp8::models::{generate, DecoderModel, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;
use candle_fp8::AnyLinear;

#[path = "common/tp_toy.rs"]
mod tp_toy;
use tp_toy::{cfg, CORPUS};

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

/// The CUDA devices of a `world`-rank group (GPUs 0..world), or `None` after reporting the skip.
/// The GPU run leaves the `multi_gpu_*` tests out on a machine with one GPU (scripts/gpu_run.sh).
fn devices_or_skip(name: &str, world: usize) -> Option<Vec<Device>> {
    let first = match gpu::gpu() {
        Ok(d) => d,
        Err(why) => {
            gpu::skip(name, &why);
            return None;
        }
    };
    if !gpu::kernels_or_skip(&first, name) {
        return None;
    }
    let mut devices = vec![first];
    for r in 1..world {
        match Device::new_cuda(r) {
            Ok(d) => devices.push(d),
            Err(e) => {
                gpu::skip(name, &format!("needs {world} GPUs, cuda:{r}: {e}"));
                return None;
            }
        }
    }
    Some(devices)
}

/// `world` ranks over NCCL against the unsplit model on GPU 0: one rank is the model bit for
/// bit; more return the same logits on every rank, within the FP8 noise of one, and the same
/// greedy tokens.
fn ranks_decode_like_one(name: &str, world: usize) -> Result<()> {
    let Some(devices) = devices_or_skip(name, world) else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, &CORPUS.repeat(4))?;
    let prompt: Vec<u32> = "the quick brown fox jumps".bytes().map(u32::from).collect();
    let (want, want_tokens) = run(&mut load(dir.path(), &devices[0])?, &prompt)?;
    let runs = on_ranks(dir.path(), &devices, &prompt)?;
    if world == 1 {
        assert_eq!(bits(&runs[0].0), bits(&want), "world 1: logits differ from the unsplit model");
        assert_eq!(runs[0].1, want_tokens, "world 1: tokens");
        return Ok(());
    }
    for (r, x) in runs.iter().enumerate().skip(1) {
        assert_eq!(bits(&x.0), bits(&runs[0].0), "rank {r}'s logits differ from rank 0's");
        assert_eq!(x.1, runs[0].1, "rank {r}'s tokens differ from rank 0's");
    }
    let cpu = load(dir.path(), &Device::Cpu)?;
    let noise = gpu::LogitDiff::of(&run(&mut cpu.to_reference()?, &prompt)?.0, &run(&mut cpu.to_dense()?, &prompt)?.0);
    let d = gpu::LogitDiff::of(&runs[0].0, &want);
    let bounds = gpu::LogitBounds::new(&gpu::LogitScales::of(dir.path(), cfg().num_hidden_layers)?, &noise, 2, 2);
    bounds.check(&format!("{world} ranks vs 1"), &d);
    assert_eq!(runs[0].1, want_tokens, "{world} ranks: greedy tokens over 64 steps");
    Ok(())
}

#[test]
fn nccl_world_of_one_is_the_model() -> Result<()> {
    ranks_decode_like_one("nccl_world_of_one_is_the_model", 1)
}

#[test]
fn multi_gpu_two_ranks_decode_like_one() -> Result<()> {
    ranks_decode_like_one("multi_gpu_two_ranks_decode_like_one", 2)
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

/// Each of `world` ranks loading its share shard-wise against the whole model loaded on its GPU
/// and split: the same weight, scale and logit bits, the same tokens.
fn shard_wise_loading_is_the_sharded_model(name: &str, world: usize) -> Result<()> {
    let Some(devices) = devices_or_skip(name, world) else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    write_toy_lm_checkpoint(dir.path(), &cfg(), 11, &CORPUS.repeat(4))?;
    let prompt: Vec<u32> = "the quick brown fox jumps".bytes().map(u32::from).collect();
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
    Ok(())
}

#[test]
fn nccl_world_of_one_loads_shard_wise() -> Result<()> {
    shard_wise_loading_is_the_sharded_model("nccl_world_of_one_loads_shard_wise", 1)
}

#[test]
fn multi_gpu_shard_wise_loading_is_the_sharded_model() -> Result<()> {
    shard_wise_loading_is_the_sharded_model("multi_gpu_shard_wise_loading_is_the_sharded_model", 2)
}
