//! Measuring a model: perplexity, KL divergence and top-1 agreement against a reference model
//! over a text ([`TextScore`]), and top-1 agreement / logit differences over greedy steps,
//! teacher-forced ([`compare_greedy`]).

use super::model::DecoderModel;
use candle_core::{Device, Result, Tensor};

/// Log-probabilities `[positions][vocab]` (f64) of one window of a text.
pub type LogProbs = Vec<Vec<f64>>;

/// The log-softmax of every position's logits of `ids`, run as one sequence from position 0
/// (the KV cache is cleared first).
pub fn window_log_probs(model: &mut DecoderModel, ids: &[u32]) -> Result<LogProbs> {
    model.clear_kv_cache();
    let logits = model.forward_all(&Tensor::new(ids, model.device())?.unsqueeze(0)?, 0)?;
    let rows: Vec<Vec<f32>> = logits.squeeze(0)?.to_device(&Device::Cpu)?.to_vec2()?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let max = r.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max + r.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
            r.iter().map(|&x| x as f64 - lse).collect()
        })
        .collect())
}

/// Running scores of a model over the windows of a text: the negative log-likelihood of each
/// next token and, against a reference model's log-probabilities of the same window, the mean
/// KL(reference ‖ model) and the share of positions with the same top-1 token.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TextScore {
    /// Σ −log p(next token).
    pub nll: f64,
    /// Σ KL(reference ‖ model) over the positions.
    pub kl: f64,
    /// Positions whose top-1 token equals the reference's.
    pub top1_agree: usize,
    /// Positions scored.
    pub positions: usize,
}

impl TextScore {
    /// Adds one window: position `t` predicts `ids[t + 1]` (the last position predicts nothing),
    /// `lp` are the model's log-probabilities of `ids`, `reference` the reference model's.
    pub fn add(&mut self, lp: &LogProbs, reference: Option<&LogProbs>, ids: &[u32]) {
        for t in 0..ids.len().saturating_sub(1) {
            self.nll -= lp[t][ids[t + 1] as usize];
            if let Some(r) = reference {
                self.kl += r[t].iter().zip(&lp[t]).map(|(a, b)| a.exp() * (a - b)).sum::<f64>();
                self.top1_agree += (argmax_f64(&lp[t]) == argmax_f64(&r[t])) as usize;
            }
            self.positions += 1;
        }
    }

    /// Perplexity, `exp(mean nll)`.
    pub fn perplexity(&self) -> f64 {
        (self.nll / self.positions as f64).exp()
    }

    /// Mean KL(reference ‖ model) per position.
    pub fn mean_kl(&self) -> f64 {
        self.kl / self.positions as f64
    }

    /// Share of positions with the reference's top-1 token, in percent.
    pub fn top1_pct(&self) -> f64 {
        100.0 * self.top1_agree as f64 / self.positions as f64
    }
}

fn argmax_f64(v: &[f64]) -> usize {
    v.iter().enumerate().fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0
}

/// Agreement of two models (e.g. FP8 kernels vs the dequantized reference) over greedy steps.
#[derive(Debug, Clone, Default)]
pub struct AccuracyReport {
    /// Positions compared.
    pub steps: usize,
    /// Positions where both models have the same argmax (strict: the first maximal index).
    pub top1_agree: usize,
    /// Positions where the test model's argmax has the reference's maximal logit: equal to
    /// `top1_agree` except where the reference has an exact tie at the top (bf16 logits tie
    /// readily) and the test model picked another of the tied tokens.
    pub top1_agree_up_to_ties: usize,
    /// Largest `ref[ref top-1] − ref[test top-1]` over the disagreeing positions: how much worse
    /// the test model's choice is under the reference (0 for a tie).
    pub max_regret_at_disagreement: Option<f32>,
    /// Largest |logit_test − logit_ref| over all positions and the vocabulary.
    pub max_abs_dlogit: f32,
    /// Mean |Δlogit|.
    pub mean_abs_dlogit: f64,
    /// RMS of the reference logits (the scale to read Δlogit against).
    pub ref_logit_rms: f64,
    /// Smallest top-1 margin (top1 − top2 of the reference) among disagreeing positions.
    pub min_margin_at_disagreement: Option<f32>,
    /// The test model's greedy tokens (the sequence both models consumed).
    pub tokens: Vec<u32>,
}

impl AccuracyReport {
    /// Fraction of positions with the same argmax.
    pub fn agreement(&self) -> f64 {
        self.top1_agree as f64 / self.steps.max(1) as f64
    }

    /// Fraction of positions whose test argmax is one of the reference's maximal tokens.
    pub fn agreement_up_to_ties(&self) -> f64 {
        self.top1_agree_up_to_ties as f64 / self.steps.max(1) as f64
    }
}

/// One position of [`compare_greedy`]: `(strict agreement, agreement up to reference ties,
/// regret)` where regret = `reference[reference argmax] − reference[test argmax]` (≥ 0).
pub fn top1_outcome(test: &[f32], reference: &[f32]) -> (bool, bool, f32) {
    let (it, ir) = (argmax(test) as usize, argmax(reference) as usize);
    let regret = reference[ir] - reference[it];
    (it == ir, it == ir || regret == 0.0, regret)
}

/// Runs `prompt` then `steps - 1` greedy steps through `test`, teacher-forcing `reference`
/// with the same tokens, and compares the last-position logits at every step (a divergence
/// cannot cascade into unrelated comparisons).
pub fn compare_greedy(
    test: &mut DecoderModel,
    reference: &mut DecoderModel,
    prompt: &[u32],
    steps: usize,
) -> Result<AccuracyReport> {
    test.clear_kv_cache();
    reference.clear_kv_cache();
    let dev = test.device().clone();
    let mut next = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let mut pos = 0;
    let mut rep = AccuracyReport::default();
    let (mut sum_abs, mut sum_sq, mut count) = (0f64, 0f64, 0usize);
    for _ in 0..steps {
        let a = test.forward(&next, pos)?.squeeze(0)?.to_vec1::<f32>()?;
        let b = reference.forward(&next, pos)?.squeeze(0)?.to_vec1::<f32>()?;
        pos += next.dim(1)?;
        let ia = argmax(&a);
        rep.steps += 1;
        let (strict, up_to_ties, regret) = top1_outcome(&a, &b);
        rep.top1_agree_up_to_ties += up_to_ties as usize;
        if strict {
            rep.top1_agree += 1;
        } else {
            rep.max_regret_at_disagreement =
                Some(rep.max_regret_at_disagreement.map_or(regret, |r: f32| r.max(regret)));
            let mut sorted = b.clone();
            sorted.sort_by(|x, y| y.partial_cmp(x).unwrap_or(std::cmp::Ordering::Equal));
            let margin = sorted[0] - sorted[1];
            rep.min_margin_at_disagreement =
                Some(rep.min_margin_at_disagreement.map_or(margin, |m: f32| m.min(margin)));
        }
        for (x, y) in a.iter().zip(&b) {
            let dlt = (x - y).abs();
            rep.max_abs_dlogit = rep.max_abs_dlogit.max(dlt);
            sum_abs += dlt as f64;
            sum_sq += (*y as f64) * (*y as f64);
            count += 1;
        }
        rep.tokens.push(ia);
        next = Tensor::new(&[ia], &dev)?.unsqueeze(0)?;
    }
    rep.mean_abs_dlogit = sum_abs / count.max(1) as f64;
    rep.ref_logit_rms = (sum_sq / count.max(1) as f64).sqrt();
    Ok(rep)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}
