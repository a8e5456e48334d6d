//! Tensor parallelism over NCCL (`collective::Nccl`, feature `nccl`) on the GPUs of this host:
//! a toy Qwen3 split over one rank is the model itself, bit for bit; over two GPUs (skipped,
//! saying so, with fewer) every rank returns the same logits, within the FP8 path's noise of one
//! rank's (as `tests/tp.rs` checks on CPU threads), and the same 64 greedy tokens.
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
