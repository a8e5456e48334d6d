//! Rotary position embedding tables (the non-interleaved "rotate half" layout of Hugging Face
//! Llama / Qwen), with Llama 3's frequency scaling.

use super::config::{DecoderConfig, RopeScaling, RopeType};
use candle_core::{DType, Device, Result, Tensor};

/// The rotary frequencies `1 / θ^(2i/d)` for `i < d/2`, scaled as `scaling` says.
pub(crate) fn inv_freq(theta: f64, d: usize, scaling: Option<&RopeScaling>) -> Vec<f64> {
    let base: Vec<f64> = (0..d / 2).map(|i| 1.0 / theta.powf(2.0 * i as f64 / d as f64)).collect();
    let Some(s) = scaling else { return base };
    match s.rope_type {
        RopeType::Llama3 => {
            let old = s.original_max_position_embeddings as f64;
            let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
            base.iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / s.factor
                    } else {
                        let smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                        (1.0 - smooth) * f / s.factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// `(cos, sin)` tables `[max_position_embeddings, head_dim / 2]` in `dtype`.
pub(crate) fn rope_tables(cfg: &DecoderConfig, device: &Device, dtype: DType) -> Result<(Tensor, Tensor)> {
    let d = cfg.head_dim();
    let n = cfg.max_position_embeddings;
    let inv = inv_freq(cfg.rope_theta, d, cfg.rope_scaling.as_ref());
    let mut cos = Vec::with_capacity(n * d / 2);
    let mut sin = Vec::with_capacity(n * d / 2);
    for p in 0..n {
        for f in &inv {
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let cos = Tensor::from_vec(cos, (n, d / 2), device)?.to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (n, d / 2), device)?.to_dtype(dtype)?;
    Ok((cos, sin))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1 8B's scaling (factor 8, low 1, high 4, 8192 positions, θ 500 000, d 128): the
    /// high frequencies are kept, the low ones divided by 8, the band between interpolated.
    #[test]
    fn llama3_scaling_keeps_high_divides_low_and_blends_between() {
        let s = RopeScaling {
            rope_type: RopeType::Llama3,
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        let plain = inv_freq(500_000.0, 128, None);
        let scaled = inv_freq(500_000.0, 128, Some(&s));
        assert_eq!(scaled[0], plain[0]);
        assert_eq!(scaled[63], plain[63] / 8.0);
        let mut blended = 0;
        for (p, q) in plain.iter().zip(&scaled) {
            let wavelen = 2.0 * std::f64::consts::PI / p;
            if wavelen < 2048.0 {
                assert_eq!(q, p);
            } else if wavelen > 8192.0 {
                assert_eq!(*q, p / 8.0);
            } else {
                assert!(*q < *p && *q > p / 8.0);
                blended += 1;
            }
        }
        assert!(blended > 0);
    }
}
