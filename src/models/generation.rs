//! Next-token sampling and the generation loop (TTFT / per-step timings, launch-ahead on CUDA).

use super::model::DecoderModel;
use candle_core::{bail, DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use std::time::{Duration, Instant};

/// Next-token sampling: greedy (argmax on the device) when `temperature <= 0`, else
/// temperature + nucleus (top-p) sampling on the host with a seeded generator.
#[derive(Debug, Clone)]
pub struct Sampler {
    temperature: f64,
    top_p: f64,
    rng: StdRng,
}

impl Sampler {
    /// A sampler; `temperature <= 0` means greedy.
    pub fn new(temperature: f64, top_p: f64, seed: u64) -> Self {
        Self { temperature, top_p, rng: StdRng::seed_from_u64(seed) }
    }

    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self::new(0.0, 1.0, 0)
    }

    /// Whether this sampler is greedy (device-side argmax).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Samples one id per row of `logits` `[B, vocab]`; returns u32 `[B]` on the logits' device.
    pub fn sample(&mut self, logits: &Tensor) -> Result<Tensor> {
        if self.is_greedy() {
            // Our one-launch argmax (candle's CPU argmax semantics) where it can run: candle's
            // CUDA argmax costs ~100 µs per step on f32 [B, 151936] logits.
            #[cfg(feature = "cuda")]
            if matches!(logits.dtype(), DType::F32 | DType::BF16)
                && crate::cuda::sampling::is_available(logits.device())
            {
                return crate::cuda::sampling::argmax_last_dim(&logits.contiguous()?);
            }
            return logits.argmax(D::Minus1)?.to_dtype(DType::U32);
        }
        let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let ids: Vec<u32> = rows.iter().map(|r| self.sample_row(r)).collect();
        Tensor::new(ids, logits.device())
    }

    fn sample_row(&mut self, logits: &[f32]) -> u32 {
        let t = self.temperature;
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut probs: Vec<(u32, f64)> =
            logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l as f64 - max) / t).exp())).collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0)));
        let mut keep = probs.len();
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate() {
                acc += p.1 / total;
                if acc >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        let kept = &probs[..keep];
        let mass: f64 = kept.iter().map(|p| p.1).sum();
        let mut r = self.rng.random::<f64>() * mass;
        for p in kept {
            r -= p.1;
            if r <= 0.0 {
                return p.0;
            }
        }
        kept[kept.len() - 1].0
    }
}

/// Tokens and timings of one [`generate`] call.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated ids per sequence (prompt excluded; stops after an EOS id).
    pub tokens: Vec<Vec<u32>>,
    /// Prompt length.
    pub prompt_len: usize,
    /// From the call until the first sampled ids are on the host (prefill + sampling + read).
    pub ttft: Duration,
    /// One entry per later step: the time between the previous step's ids and this step's ids
    /// reaching the host (the inter-token latency a consumer of the stream sees).
    pub step_times: Vec<Duration>,
    /// Per later step, the host time spent enqueuing that step's launches (forward and
    /// sampling). Close to the step time means the host, not the GPU, sets the pace.
    pub enqueue_times: Vec<Duration>,
    /// Whether the steps were launched ahead (see [`launches_ahead`]).
    pub launched_ahead: bool,
}

/// Whether [`generate`] launches step `s + 1` before it waits for step `s`'s ids: on a CUDA
/// device with a greedy sampler (the ids are produced on the device and feed the next step
/// there, so only their copy to the host has to wait). Reading the ids synchronously instead
/// leaves the GPU idle while the host wakes up and launches the next step.
///
/// With launch-ahead, `on_step(s, ..)` runs after step `s + 1` has been enqueued (from `s =
/// 1` on; the first ids are read before anything else is launched, so TTFT is the prefill's),
/// and when every sequence has stopped one extra step has run on the device and is dropped.
pub fn launches_ahead(device: &Device, sampler: &Sampler) -> bool {
    cfg!(feature = "cuda") && device.is_cuda() && sampler.is_greedy()
}

/// How the sampled ids of a step reach the host.
enum IdReader {
    /// `to_vec1` when asked: waits for everything enqueued before it.
    Sync(std::collections::VecDeque<Tensor>),
    /// Asynchronous copies into page-locked memory, enqueued right after the sampling.
    #[cfg(feature = "cuda")]
    Ahead(crate::cuda::readback::IdReadback),
}

impl IdReader {
    fn new(device: &Device, batch: usize, ahead: bool) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if ahead {
            return Ok(Self::Ahead(crate::cuda::readback::IdReadback::new(device, batch)?));
        }
        let _ = (device, batch, ahead);
        Ok(Self::Sync(Default::default()))
    }

    fn start(&mut self, ids: &Tensor) -> Result<()> {
        match self {
            Self::Sync(q) => q.push_back(ids.clone()),
            #[cfg(feature = "cuda")]
            Self::Ahead(r) => r.start(ids)?,
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<Vec<u32>> {
        match self {
            Self::Sync(q) => match q.pop_front() {
                Some(t) => t.to_vec1::<u32>(),
                None => bail!("generate: no sampled ids to read"),
            },
            #[cfg(feature = "cuda")]
            Self::Ahead(r) => r.finish(),
        }
    }
}

/// Generates up to `max_new_tokens` for `batch` copies of `prompt` (independent sequences:
/// with a sampler they diverge). Stops early when every sequence produced one of `eos` (pass
/// `&[]` to always run `max_new_tokens` steps). `on_step(step, ids)` sees each step's ids.
/// The KV cache is cleared first. Sampled ids stay on the device and feed the next step; the
/// host reads a copy of them — with [`launches_ahead`], after it has launched the next step.
pub fn generate(
    model: &mut DecoderModel,
    prompt: &[u32],
    batch: usize,
    max_new_tokens: usize,
    sampler: &mut Sampler,
    eos: &[u32],
    on_step: &mut dyn FnMut(usize, &[u32]),
) -> Result<Generation> {
    if prompt.is_empty() {
        bail!("generate: empty prompt")
    }
    model.clear_kv_cache();
    let dev = model.device().clone();
    let ahead = launches_ahead(&dev, sampler);
    let mut gen = Generation {
        tokens: vec![Vec::new(); batch],
        prompt_len: prompt.len(),
        ttft: Duration::ZERO,
        step_times: Vec::new(),
        enqueue_times: Vec::new(),
        launched_ahead: ahead,
    };
    if max_new_tokens == 0 {
        return Ok(gen);
    }
    let mut reader = IdReader::new(&dev, batch, ahead)?;
    let ids: Vec<u32> = (0..batch).flat_map(|_| prompt.iter().copied()).collect();
    let input = Tensor::from_vec(ids, (batch, prompt.len()), &dev)?;
    let t0 = Instant::now();
    let mut done = vec![false; batch];
    let mut pos = 0;
    // Forward + sampling of one step, its ids' copy started; returns the ids (on the device).
    let mut launch = |input: &Tensor, pos: &mut usize, reader: &mut IdReader| -> Result<(Tensor, Duration)> {
        let te = Instant::now();
        // The lm_head's own dtype: the sampler reads bf16 as well (no f32 cast launch).
        let logits = model.forward_logits(input, *pos)?;
        *pos += input.dim(1)?;
        let sampled = sampler.sample(&logits)?;
        reader.start(&sampled)?;
        Ok((sampled, te.elapsed()))
    };
    let (mut sampled, e0) = launch(&input, &mut pos, &mut reader)?;
    // Host enqueue time of every launched step, by step.
    let mut enqueue = vec![e0];
    let mut last = t0;
    for step in 0..max_new_tokens {
        // Ahead: step + 1 goes to the device before this step's ids are awaited (from step 1:
        // the first ids are read before anything else is launched).
        if ahead && step >= 1 && enqueue.len() < max_new_tokens {
            let (s, e) = launch(&sampled.unsqueeze(1)?, &mut pos, &mut reader)?;
            sampled = s;
            enqueue.push(e);
        }
        let host = reader.finish()?;
        let now = Instant::now();
        if step == 0 {
            gen.ttft = now - t0;
        } else {
            gen.step_times.push(now - last);
            gen.enqueue_times.push(enqueue[step]);
        }
        last = now;
        for (bi, &id) in host.iter().enumerate() {
            if !done[bi] {
                gen.tokens[bi].push(id);
                done[bi] = eos.contains(&id);
            }
        }
        on_step(step, &host);
        if done.iter().all(|d| *d) {
            break;
        }
        if enqueue.len() == step + 1 && enqueue.len() < max_new_tokens {
            let (s, e) = launch(&sampled.unsqueeze(1)?, &mut pos, &mut reader)?;
            sampled = s;
            enqueue.push(e);
        }
    }
    Ok(gen)
}
