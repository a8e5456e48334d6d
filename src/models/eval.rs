//! Comparing a model with a reference model: top-1 agreement and logit differences over greedy
//! steps, teacher-forced.

use super::model::DecoderModel;
use candle_core::{Result, Tensor};

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
pub fn compare_greedy(test: &mut DecoderModel, reference: &mut DecoderModel, prompt: &[u32], steps: usize) -> Result<AccuracyReport> {
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
            rep.max_regret_at_disagreement = Some(rep.max_regret_at_disagreement.map_or(regret, |r: f32| r.max(regret)));
            let mut sorted = b.clone();
            sorted.sort_by(|x, y| y.partial_cmp(x).unwrap_or(std::cmp::Ordering::Equal));
            let margin = sorted[0] - sorted[1];
            rep.min_margin_at_disagreement = Some(rep.min_margin_at_disagreement.map_or(margin, |m: f32| m.min(margin)));
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
