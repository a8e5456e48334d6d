//! The decode-attention kernels (`src/cuda/attention.rs`, `kernels/attention/attention.cu`) on
//! CUDA (built only with the `cuda` feature; without a CUDA sm_90 device every test reports
//! `SKIP <test>: <reason>` on stderr, a failure under `CANDLE_FP8_REQUIRE_GPU=1`):
//!
//! - `qk_norm_rope_append` against candle's `rms_norm` → `broadcast_mul` → `rope_thd` at several
//!   batches and offsets, with NaN-poisoned caches (only position `offset` may change);
//! - `decode_attention` against an f32 reference built from candle ops (softmax(q·Kᵀ)·V, then
//!   our activation quantizer), over lengths, batches and head groupings, with NaN poison in
//!   the cache beyond `len` and in recycled output memory; the quantization contract exactly
//!   at `len == 1` (where the f32 output is exactly V);
//! - `decode_step_attention` (one launch) bit-identical to `qk_norm_rope_append` +
//!   `decode_attention` over head groupings, offsets, position splits and both merges;
//! - head_dim 64 (SmolLM2, Llama 3.2 1B) and models without a q/k norm (Llama, Qwen2,
//!   `QkNorm::WeightOnly`): the append against candle's ops, the attention against the f32
//!   reference, the one-launch step bit-identical to the two launches, its quantized output
//!   bit-identical to the activation quantizer on its bf16 output;
//! - a toy Qwen3 (head_dim 128) and a toy SmolLM2-shaped Llama (head_dim 64, hidden 576)
//!   decoding with the fused kernels (the attention kernel among them) against the same weights
//!   with them off (candle's attention): top-1 agreement and logit
//!   differences within bounds derived from the arithmetic (`gpu::LogitBounds`);
//! - the same toy models' prompts through the flash prefill kernel (whole, and in passes after a
//!   cached prefix) against candle's attention, every position's logits within the same bounds.
#![cfg(feature = "cuda")]

#[path = "common/gpu.rs"]
#[macro_use]
mod gpu;
use gpu::{assert_providers, poison, teacher_forced, LogitBounds, LogitDiff, LogitScales, Logits};

use candle_core::{DType, Device, Result, Tensor, D};
use candle_fp8::checkpoint::Checkpoint;
use candle_fp8::kernels::{self as attn, DecodeAttentionOptions, QkNorm};
use candle_fp8::models::{generate, DecoderConfig, DecoderModel, ModelOptions, Sampler};
use candle_fp8::testing::checkpoints::write_toy_lm_checkpoint;
use candle_fp8::{e4m3_to_f32, quantize_activation};
use half::bf16;

const HD: usize = 128;

/// `shape` of N(0, std²) values in bf16 on `dev`.
fn randn_bf16(shape: &[usize], std: f32, dev: &Device) -> Result<Tensor> {
    Tensor::randn(0f32, std, shape, dev)?.to_dtype(DType::BF16)
}

fn nan_bf16(shape: &[usize], dev: &Device) -> Result<Tensor> {
    Tensor::full(f32::NAN, shape, dev)?.to_dtype(DType::BF16)
}

/// bf16 values as a monotonic integer line (adjacent bf16 values differ by 1).
fn ordered(b: bf16) -> i32 {
    let u = b.to_bits() as i32;
    if u & 0x8000 != 0 {
        -(u & 0x7fff)
    } else {
        u
    }
}

fn bf16_vec(t: &Tensor) -> Result<Vec<bf16>> {
    t.flatten_all()?.to_device(&Device::Cpu)?.to_vec1::<bf16>()
}

/// (elements whose bits differ, largest distance in bf16 ulps); NaNs must match NaNs.
fn ulp_diff(a: &Tensor, b: &Tensor) -> Result<(usize, i32)> {
    let (a, b) = (bf16_vec(a)?, bf16_vec(b)?);
    assert_eq!(a.len(), b.len());
    let (mut n, mut worst) = (0, 0);
    for (x, y) in a.iter().zip(&b) {
        if x.to_bits() == y.to_bits() {
            continue;
        }
        n += 1;
        if x.is_nan() || y.is_nan() {
            worst = i32::MAX;
        } else {
            worst = worst.max((ordered(*x) - ordered(*y)).abs());
        }
    }
    Ok((n, worst))
}

/// RoPE tables `[rows, d / 2]` (bf16) like the model's: θ = 1e6, non-interleaved halves.
fn rope_tables(rows: usize, d: usize, dev: &Device) -> Result<(Tensor, Tensor)> {
    let inv: Vec<f64> = (0..d / 2).map(|i| 1.0 / 1e6f64.powf(2.0 * i as f64 / d as f64)).collect();
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for p in 0..rows {
        for f in &inv {
            c.push((p as f64 * f).cos() as f32);
            s.push((p as f64 * f).sin() as f32);
        }
    }
    let c = Tensor::from_vec(c, (rows, d / 2), dev)?.to_dtype(DType::BF16)?;
    let s = Tensor::from_vec(s, (rows, d / 2), dev)?.to_dtype(DType::BF16)?;
    Ok((c, s))
}

/// The per-head weights of a model of head dimension `d`: with a q/k norm random around 1, the
/// q rows × 1/√d; without one (Llama, Qwen2) ones, the q rows × 1/√d — as the model builds them.
fn head_weights(hq: usize, hkv: usize, d: usize, norm: QkNorm, dev: &Device) -> Result<Tensor> {
    let w = match norm {
        QkNorm::Rms => (Tensor::randn(0f32, 0.2, (hq + hkv, d), dev)? + 1.0)?,
        QkNorm::WeightOnly => Tensor::ones((hq + hkv, d), DType::F32, dev)?,
    };
    let scale = Tensor::cat(
        &[Tensor::full(1.0 / (d as f32).sqrt(), (hq, 1), dev)?, Tensor::ones((hkv, 1), DType::F32, dev)?],
        0,
    )?;
    w.broadcast_mul(&scale)?.to_dtype(DType::BF16)
}

/// The model's composed candle path for one decode step's q / k / v: `[rms_norm] →
/// broadcast_mul(weights) → rope_thd`, v as it is. Returns `(q [B, hq, d], k [B, hkv, d],
/// v [B, hkv, d])`.
fn candle_step_path(
    qkv: &Tensor,
    w: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    (hq, hkv, d): (usize, usize, usize),
    norm: QkNorm,
    eps: f32,
) -> Result<(Tensor, Tensor, Tensor)> {
    let b = qkv.dim(0)?;
    let nqk = (hq + hkv) * d;
    let qk = qkv.narrow(1, 0, nqk)?.contiguous()?;
    let qk = match norm {
        QkNorm::Rms => {
            let unit = Tensor::ones(d, DType::BF16, qkv.device())?;
            candle_nn::ops::rms_norm(&qk.reshape((b * (hq + hkv), d))?, &unit, eps)?
        }
        QkNorm::WeightOnly => qk,
    };
    let qk = qk.reshape((b, 1, hq + hkv, d))?.broadcast_mul(w)?;
    let qk = candle_nn::rotary_emb::rope_thd(&qk, cos, sin)?;
    let q = qk.narrow(2, 0, hq)?.reshape((b, hq, d))?;
    let k = qk.narrow(2, hq, hkv)?.reshape((b, hkv, d))?;
    let v = qkv.narrow(1, nqk, hkv * d)?.reshape((b, hkv, d))?;
    Ok((q, k, v))
}

#[test]
fn cuda_qk_norm_rope_append_matches_candle_ops() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_qk_norm_rope_append_matches_candle_ops");
    let eps = 1e-6f32;
    let cap = 1100;
    let (cos, sin) = rope_tables(cap, HD, &dev)?;
    let (mut total, mut mismatched, mut worst) = (0usize, 0usize, 0i32);
    for (b, hq, hkv) in [(1, 64, 8), (3, 16, 4), (16, 8, 8), (5, 64, 8)] {
        for offset in [0usize, 1, 5, 63, 64, 1000, cap - 1] {
            let width = (hq + 2 * hkv) * HD;
            // Rows of very different magnitudes, so the norm really rescales.
            let gain = Tensor::rand(0.05f32, 20f32, (b, 1), &dev)?;
            let qkv = Tensor::randn(0f32, 1f32, (b, width), &dev)?.broadcast_mul(&gain)?.to_dtype(DType::BF16)?;
            let qk_norm = head_weights(hq, hkv, HD, QkNorm::Rms, &dev)?;
            let k_cache = nan_bf16(&[b, hkv, cap, HD], &dev)?;
            let v_cache = nan_bf16(&[b, hkv, cap, HD], &dev)?;
            let (cos_r, sin_r) = (cos.narrow(0, offset, 1)?, sin.narrow(0, offset, 1)?);
            let q = attn::qk_norm_rope_append(
                &qkv,
                &qk_norm,
                &cos_r,
                &sin_r,
                &k_cache,
                &v_cache,
                offset,
                hq,
                hkv,
                eps,
                QkNorm::Rms,
            )?;
            assert_eq!(q.dims(), &[b, hq, HD]);

            let (q_ref, k_ref, v_ref) =
                candle_step_path(&qkv, &qk_norm, &cos_r, &sin_r, (hq, hkv, HD), QkNorm::Rms, eps)?;

            let k_new = k_cache.narrow(2, offset, 1)?.squeeze(2)?;
            let v_new = v_cache.narrow(2, offset, 1)?.squeeze(2)?;
            let what = format!("B={b} heads {hq}/{hkv} offset {offset}");
            assert_eq!(ulp_diff(&v_new, &v_ref)?.0, 0, "{what}: v must be copied bit for bit");
            for (name, got, want) in [("q", &q, &q_ref), ("k", &k_new, &k_ref)] {
                let (n, w) = ulp_diff(got, want)?;
                assert!(w <= 1, "{what}: {name} differs from candle's ops by {w} bf16 ulps ({n} elements)");
                total += want.elem_count();
                mismatched += n;
                worst = worst.max(w);
            }
            // Only position `offset` was written: every other cache entry is still NaN.
            for (name, c) in [("k_cache", &k_cache), ("v_cache", &v_cache)] {
                let f = c.to_dtype(DType::F32)?;
                let nan = f.ne(&f)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
                let expect = (b * hkv * (cap - 1) * HD) as f32;
                assert_eq!(nan, expect, "{what}: {name} was written outside position {offset}");
            }
            let finite = q.to_dtype(DType::F32)?.abs()?.max_keepdim(D::Minus1)?.flatten_all()?.to_vec1::<f32>()?;
            assert!(finite.iter().all(|v| v.is_finite()), "{what}: q has non-finite values");
        }
    }
    println!("qk_norm_rope_append vs candle: {mismatched} of {total} q/k values differ (worst {worst} ulp)");
    // Same f32 association, same rsqrt, same bf16 rounding points, and RoPE in the HMUL2+HFMA2
    // form ptxas gives candle's rope_thd: bit-exact is expected; a driver that JIT-compiles
    // candle's PTX into another contraction could move a rare value by one ulp.
    assert!(mismatched * 1000 <= total, "{mismatched} of {total} values differ from candle's ops");
    Ok(())
}

/// A prompt's tokens (`qkv` `[B, T, width]`, positions `offset .. offset + T`) through the same
/// launch: q, and k / v at those cache positions, equal candle's composed path on the `[B·T]`
/// rows (the flash prefill path's input), every other cache entry untouched.
#[test]
fn cuda_qk_norm_rope_append_prompt_matches_candle_ops() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_qk_norm_rope_append_prompt_matches_candle_ops");
    let eps = 1e-6f32;
    let cap = 1100;
    let (cos, sin) = rope_tables(cap, HD, &dev)?;
    let (mut total, mut mismatched) = (0usize, 0usize);
    for (b, t, hq, hkv, offset, norm) in [
        (1, 1000, 64, 8, 0, QkNorm::Rms),
        (2, 65, 16, 4, 37, QkNorm::Rms),
        (3, 7, 8, 8, cap - 7, QkNorm::WeightOnly),
        (1, 2, 64, 8, 1, QkNorm::WeightOnly),
    ] {
        let width = (hq + 2 * hkv) * HD;
        let gain = Tensor::rand(0.05f32, 20f32, (b * t, 1), &dev)?;
        let qkv = Tensor::randn(0f32, 1f32, (b * t, width), &dev)?.broadcast_mul(&gain)?.to_dtype(DType::BF16)?;
        let w = head_weights(hq, hkv, HD, norm, &dev)?;
        let k_cache = nan_bf16(&[b, hkv, cap, HD], &dev)?;
        let v_cache = nan_bf16(&[b, hkv, cap, HD], &dev)?;
        let (cos_r, sin_r) = (cos.narrow(0, offset, t)?, sin.narrow(0, offset, t)?);
        let q = attn::qk_norm_rope_append(
            &qkv.reshape((b, t, width))?,
            &w,
            &cos_r,
            &sin_r,
            &k_cache,
            &v_cache,
            offset,
            hq,
            hkv,
            eps,
            norm,
        )?;
        assert_eq!(q.dims(), &[b, t, hq, HD]);

        // candle's path on the [B·T] rows: rope_thd with the tokens' table rows.
        let nqk = (hq + hkv) * HD;
        let qk = qkv.narrow(1, 0, nqk)?.contiguous()?;
        let qk = match norm {
            QkNorm::Rms => {
                let unit = Tensor::ones(HD, DType::BF16, &dev)?;
                candle_nn::ops::rms_norm(&qk.reshape((b * t * (hq + hkv), HD))?, &unit, eps)?
            }
            QkNorm::WeightOnly => qk,
        };
        let qk = qk.reshape((b, t, hq + hkv, HD))?.broadcast_mul(&w)?;
        let qk = candle_nn::rotary_emb::rope_thd(&qk, &cos_r, &sin_r)?;
        let q_ref = qk.narrow(2, 0, hq)?;
        let k_ref = qk.narrow(2, hq, hkv)?.transpose(1, 2)?.contiguous()?;
        let v_ref = qkv.narrow(1, nqk, hkv * HD)?.reshape((b, t, hkv, HD))?.transpose(1, 2)?.contiguous()?;

        let what = format!("B={b} T={t} heads {hq}/{hkv} offset {offset} {norm:?}");
        let v_new = v_cache.narrow(2, offset, t)?;
        assert_eq!(ulp_diff(&v_new, &v_ref)?.0, 0, "{what}: v must be copied bit for bit");
        let k_new = k_cache.narrow(2, offset, t)?;
        for (name, got, want) in [("q", &q, &q_ref), ("k", &k_new, &k_ref)] {
            let (n, worst) = ulp_diff(got, want)?;
            assert!(worst <= 1, "{what}: {name} differs from candle's ops by {worst} bf16 ulps ({n} elements)");
            total += want.elem_count();
            mismatched += n;
        }
        for (name, c) in [("k_cache", &k_cache), ("v_cache", &v_cache)] {
            let f = c.to_dtype(DType::F32)?;
            let nan = f.ne(&f)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
            let expect = (b * hkv * (cap - t) * HD) as f32;
            assert_eq!(nan, expect, "{what}: {name} was written outside positions {offset}..{}", offset + t);
        }
    }
    println!("qk_norm_rope_append (prompts) vs candle: {mismatched} of {total} q/k values differ");
    assert!(mismatched * 1000 <= total, "{mismatched} of {total} values differ from candle's ops");
    // Past the cache: refused before any launch, naming the numbers.
    let qkv = Tensor::zeros((1, 8, (8 + 2 * 8) * HD), DType::BF16, &dev)?;
    let (w, kc, vc) = (
        head_weights(8, 8, HD, QkNorm::Rms, &dev)?,
        nan_bf16(&[1, 8, 16, HD], &dev)?,
        nan_bf16(&[1, 8, 16, HD], &dev)?,
    );
    let err = attn::qk_norm_rope_append(&qkv, &w, &cos, &sin, &kc, &vc, 9, 8, 8, eps, QkNorm::Rms).unwrap_err();
    assert!(err.to_string().contains("capacity 16"), "{err}");
    Ok(())
}

/// Random caches with `len` valid positions and NaN poison from `len` to `cap`; also returns
/// the valid parts `[B, hkv, len, 128]`.
fn poisoned_caches(
    b: usize,
    hkv: usize,
    len: usize,
    cap: usize,
    dev: &Device,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let k = randn_bf16(&[b, hkv, len, HD], 1.0, dev)?;
    let v = randn_bf16(&[b, hkv, len, HD], 1.0, dev)?;
    let kc = nan_bf16(&[b, hkv, cap, HD], dev)?;
    let vc = nan_bf16(&[b, hkv, cap, HD], dev)?;
    kc.slice_set(&k, 2, 0)?;
    vc.slice_set(&v, 2, 0)?;
    Ok((kc, vc, k, v))
}

/// softmax(q·Kᵀ)·V in f32 with candle ops: `[B, hq * 128]`.
fn reference_attention(q: &Tensor, k: &Tensor, v: &Tensor, hkv: usize) -> Result<Tensor> {
    let (b, hq, _) = q.dims3()?;
    let qf = q.to_dtype(DType::F32)?.reshape((b, hkv, hq / hkv, HD))?;
    let kf = k.to_dtype(DType::F32)?;
    let vf = v.to_dtype(DType::F32)?;
    let p = candle_nn::ops::softmax_last_dim(&qf.matmul(&kf.t()?)?)?;
    p.matmul(&vf)?.reshape((b, hq * HD))
}

/// Dequantized `(qa, sa)` as f32 `[B, hq * 128]`.
fn dequantize(qa: &Tensor, sa: &Tensor) -> Result<Tensor> {
    let (m, k) = qa.dims2()?;
    let a = e4m3_to_f32(qa)?.reshape((m, k / HD, HD))?;
    a.broadcast_mul(&sa.unsqueeze(2)?)?.reshape((m, k))
}

fn max_abs(t: &Tensor) -> Result<f32> {
    t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
}

#[test]
fn cuda_decode_attention_matches_f32_reference() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_decode_attention_matches_f32_reference");
    for (hq, hkv) in [(64, 8), (8, 8), (16, 4)] {
        for b in [1, 3, 16] {
            for len in [1, 7, 128, 1000, 5000] {
                let cap = len + 37; // positions beyond len hold NaN and must not be read
                let (kc, vc, k, v) = poisoned_caches(b, hkv, len, cap, &dev)?;
                // q carries the attention scale: scores of std ≈ 2 give peaked and flat rows.
                let q = randn_bf16(&[b, hq, HD], 0.2, &dev)?;
                let what = format!("B={b} heads {hq}/{hkv} len {len}");
                // NaN in recycled memory: an output the kernel forgets shows up as NaN.
                poison(&dev, b * hq * HD)?;
                let opts = DecodeAttentionOptions { quantized: true, bf16: true, splits: None };
                let out = attn::decode_attention(&q, &kc, &vc, len, opts)?;
                let (qa, sa) = out.quantized.expect("quantized output");
                let y = out.bf16.expect("bf16 output").to_dtype(DType::F32)?;
                assert_eq!(qa.dims(), &[b, hq * HD], "{what}");
                assert_eq!(sa.dims(), &[b, hq], "{what}");
                assert_eq!(sa.stride(), &[1, b.next_multiple_of(4)], "{what}: scales must be MN-major");

                let r = reference_attention(&q, &k, &v, hkv)?;
                let scale = max_abs(&r)?;
                // bf16 output: rounding (2^-9 relative) plus f32 summation order.
                let e = max_abs(&(&y - &r)?)?;
                assert!(e <= 8e-3 * scale + 1e-5, "{what}: bf16 output max |Δ| {e} (reference max {scale})");

                // Quantized output vs our quantizer applied to the f32 reference.
                let (rq, rs) = quantize_activation(&r)?;
                let ds = max_abs(&((&sa - &rs)? / &rs)?)?;
                assert!(ds <= 1e-4, "{what}: scales differ by {ds} (relative)");
                let deq = dequantize(&qa, &sa)?;
                assert!(
                    deq.flatten_all()?.to_vec1::<f32>()?.iter().all(|x| x.is_finite()),
                    "{what}: non-finite (unwritten?) output"
                );
                // Codes may differ by one e4m3 step where the f32 values straddle a rounding
                // boundary. Compared as codes (value / scale), so that the scales' own difference
                // (bounded above) does not count twice: one step is at most 2^-3 of a normal code
                // (exactly 2^-3 just above a power of two) and 2^-9 among the subnormals.
                let (codes, ref_codes) = (e4m3_to_f32(&qa)?, e4m3_to_f32(&rq)?);
                let step = ((ref_codes.abs()? * 0.125)? + (1.0 / 512.0))?;
                let over = ((&codes - &ref_codes)?.abs()? - &step)?;
                assert!(max_abs(&over.relu()?)? == 0.0, "{what}: a code differs by more than one e4m3 step");
                // Count differing *codes* (the e4m3 values before scaling): a scale one ulp
                // away from the reference's (amax in another summation order) changes every
                // dequantized value of its head without changing a code.
                let differ = codes.ne(&ref_codes)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
                assert!(
                    differ <= 0.01 * (b * hq * HD) as f32,
                    "{what}: {differ} codes differ from quantizing the reference"
                );
                // And the quantization error itself is the contract's.
                let qe = max_abs(&(&deq - &r)?)?;
                assert!(qe <= 0.07 * scale, "{what}: dequantized max |Δ| {qe} (reference max {scale})");
            }
        }
    }
    Ok(())
}

#[test]
fn cuda_decode_attention_len1_quantizes_exactly_like_quantize_activation() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_decode_attention_len1_quantizes_exactly_like_quantize_activation");
    for (b, hq, hkv) in [(1, 64, 8), (3, 16, 4), (6, 8, 8)] {
        let (kc, vc, _, v) = poisoned_caches(b, hkv, 1, 64, &dev)?;
        // Scaled per head so that the groups' scales differ; one tiny head hits the 1e-4 floor.
        let v = (v.to_dtype(DType::F32)? * 3.0)?.to_dtype(DType::BF16)?;
        let v = Tensor::cat(
            &[(v.narrow(1, 0, 1)?.to_dtype(DType::F32)? * 1e-6)?.to_dtype(DType::BF16)?, v.narrow(1, 1, hkv - 1)?],
            1,
        )?;
        vc.slice_set(&v, 2, 0)?;
        let q = randn_bf16(&[b, hq, HD], 0.2, &dev)?;
        let m_pad = b.next_multiple_of(4);
        poison(&dev, hq * m_pad)?;
        let (qa, sa) = attn::decode_attention_quant(&q, &kc, &vc, 1)?;
        // The scale buffer's padding rows (b..m_pad of every column) are zeroed by the kernel.
        let all = scale_buffer(&sa)?;
        assert_eq!(all.len(), hq * m_pad);
        for h in 0..hq {
            for r in b..m_pad {
                assert_eq!(all[h * m_pad + r], 0.0, "B={b}: padding row {r} of scale column {h}");
            }
        }
        // One position: softmax = [1] and the f32 output is V exactly (per query head of the group).
        let x =
            v.reshape((b, hkv, 1, HD))?.broadcast_as((b, hkv, hq / hkv, HD))?.reshape((b, hq * HD))?.contiguous()?;
        let (rq, rs) = quantize_activation(&x)?;
        assert_eq!(e4m3_to_f32(&qa)?.to_vec2::<f32>()?, e4m3_to_f32(&rq)?.to_vec2::<f32>()?, "B={b}: codes");
        assert_eq!(sa.to_vec2::<f32>()?, rs.to_vec2::<f32>()?, "B={b}: scales");
        let bf = attn::decode_attention_bf16(&q, &kc, &vc, 1)?;
        assert_eq!(ulp_diff(&bf, &x)?.0, 0, "B={b}: bf16 output is V");
    }
    Ok(())
}

/// The whole MN-major buffer behind an activation-scale view, padding rows included.
fn scale_buffer(sa: &Tensor) -> Result<Vec<f32>> {
    use candle_core::backend::BackendStorage;
    let (st, _) = sa.storage_and_layout();
    let candle_core::Storage::Cuda(cs) = &*st else { candle_core::bail!("scales are not on the GPU") };
    match cs.to_cpu_storage()? {
        candle_core::CpuStorage::F32(v) => Ok(v),
        _ => candle_core::bail!("scales are not f32"),
    }
}

#[test]
fn cuda_decode_attention_splits_agree() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_decode_attention_splits_agree");
    let (b, hq, hkv, len) = (2, 16, 4, 3000);
    let (kc, vc, k, v) = poisoned_caches(b, hkv, len, len + 5, &dev)?;
    let q = randn_bf16(&[b, hq, HD], 0.2, &dev)?;
    let r = reference_attention(&q, &k, &v, hkv)?;
    let scale = max_abs(&r)?;
    // 1 (single pass), uneven splits, one tile per split, and more than there are tiles.
    for splits in [1, 2, 3, 7, 24, 1000] {
        let opts = DecodeAttentionOptions { quantized: false, bf16: true, splits: Some(splits) };
        let y = attn::decode_attention(&q, &kc, &vc, len, opts)?.bf16.unwrap().to_dtype(DType::F32)?;
        let e = max_abs(&(&y - &r)?)?;
        assert!(e <= 8e-3 * scale + 1e-5, "splits {splits}: max |Δ| {e} (reference max {scale})");
    }
    Ok(())
}

#[test]
fn cuda_attention_rejects_bad_inputs() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_attention_rejects_bad_inputs");
    let (b, hq, hkv, cap) = (2, 8, 2, 64);
    let q = randn_bf16(&[b, hq, HD], 0.2, &dev)?;
    let kc = randn_bf16(&[b, hkv, cap, HD], 1.0, &dev)?;
    let vc = randn_bf16(&[b, hkv, cap, HD], 1.0, &dev)?;
    let err = |r: Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(attn::decode_attention_bf16(&q, &kc, &vc, cap + 1)).contains("len"));
    assert!(err(attn::decode_attention_bf16(&q, &kc, &vc, 0)).contains("len"));
    assert!(err(attn::decode_attention_bf16(&q.to_dtype(DType::F32)?, &kc, &vc, 4)).contains("bf16"));
    assert!(err(attn::decode_attention_bf16(&randn_bf16(&[b, 7, HD], 1.0, &dev)?, &kc, &vc, 4)).contains("multiple"));
    let d64 = randn_bf16(&[b, hkv, cap, 64], 1.0, &dev)?;
    assert!(err(attn::decode_attention_bf16(&q, &d64, &d64, 4)).contains("k_cache"));
    let qt = randn_bf16(&[b, HD, hq], 0.2, &dev)?.transpose(1, 2)?;
    assert!(err(attn::decode_attention_bf16(&qt, &kc, &vc, 4)).contains("contiguous"));

    let (cos, sin) = rope_tables(cap, HD, &dev)?;
    let qkv = randn_bf16(&[b, (hq + 2 * hkv) * HD], 1.0, &dev)?;
    let w = head_weights(hq, hkv, HD, QkNorm::Rms, &dev)?;
    let (c, s) = (cos.narrow(0, 3, 1)?, sin.narrow(0, 3, 1)?);
    let e = |r: Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e(attn::qk_norm_rope_append(&qkv, &w, &c, &s, &kc, &vc, cap, hq, hkv, 1e-6, QkNorm::Rms)).contains("capacity")
    );
    assert!(
        e(attn::qk_norm_rope_append(&qkv, &w, &c, &s, &kc, &kc, 3, hq, hkv, 1e-6, QkNorm::Rms)).contains("distinct")
    );
    assert!(e(attn::qk_norm_rope_append(&qkv, &w, &c, &s, &kc, &vc, 3, hq, 1, 1e-6, QkNorm::Rms)).contains("qkv"));
    assert!(e(attn::qk_norm_rope_append(
        &qkv,
        &w.narrow(0, 1, hq + hkv - 1)?,
        &c,
        &s,
        &kc,
        &vc,
        3,
        hq,
        hkv,
        1e-6,
        QkNorm::Rms
    ))
    .contains("qk_norm"));
    Ok(())
}

/// The toy model's training text (`write_toy_lm_checkpoint`: its lm_head predicts this text's
/// next byte).
const CORPUS: &str =
    "the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with one step. ";

/// A tiny Qwen3 whose heads have head_dim 128 (q/k norm), and a tiny Llama shaped like SmolLM2
/// (hidden 576 = 4.5 blocks of 128, so every hidden-sized GEMM has a partial last K block and the
/// norm kernel a partial last group; 9 query heads on 3 kv heads of 64; no q/k norm).
fn toy_cfgs() -> [(&'static str, DecoderConfig); 2] {
    let qwen3 = DecoderConfig {
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: Some(2),
        head_dim: Some(128),
        ..DecoderConfig::tiny()
    };
    let llama = DecoderConfig {
        model_type: Some("llama".into()),
        architectures: None,
        hidden_size: 576,
        intermediate_size: 1536,
        num_hidden_layers: 2,
        num_attention_heads: 9,
        num_key_value_heads: Some(3),
        head_dim: Some(64),
        rope_theta: 100_000.0,
        rms_norm_eps: 1e-5,
        ..DecoderConfig::tiny()
    };
    [("qwen3 head_dim 128", qwen3), ("llama 576 head_dim 64", llama)]
}

/// The toy checkpoint in `dir` loaded onto `dev` (bf16 activations on CUDA, f32 on the CPU).
fn toy_model(cfg: &DecoderConfig, dir: &std::path::Path, dev: &Device) -> Result<DecoderModel> {
    toy_model_with(cfg, dir, dev, &ModelOptions::default())
}

fn toy_model_with(
    cfg: &DecoderConfig,
    dir: &std::path::Path,
    dev: &Device,
    opts: &ModelOptions,
) -> Result<DecoderModel> {
    let ck = Checkpoint::open(dir)?;
    let vb = ck.var_builder(opts.dtype_for(dev), dev);
    DecoderModel::load(cfg, vb, &|m| ck.is_quantized(m), opts)
}

/// Every position's logits `[T][vocab]` of `ids` `[1, T]` from a fresh KV cache.
fn all_logits(m: &mut DecoderModel, ids: &Tensor) -> Result<Logits> {
    m.clear_kv_cache();
    m.forward_all(&ids.to_device(m.device())?, 0)?.squeeze(0)?.to_vec2::<f32>()
}

/// A 300-token prompt (past four of the prefill kernel's 64-token tiles, ragged) through the
/// flash prefill kernel (fused kernels on) against candle's attention (off), for each toy LM of
/// `toy_cfgs`: every position's logits, the prompt whole and in passes of 100 tokens (the later
/// passes attend a cached prefix: the kernel's query offset). Bounds as for the decode test
/// (`LogitBounds`, the FP8 noise measured on the CPU over the same positions). Teacher-forced
/// prompt positions include near-ties, where either path's roundings flip the top-1, so the
/// top-1 check is relative: against the CPU f32 reference (FP8 linears, f32 attention), the
/// flash path agrees at least as often as candle's bf16 attention (less one position in 100) and
/// its logits are no farther from it (RMS within 1.25×): a wrong mask or a dropped key tile
/// moves every later position and fails both.
#[test]
fn cuda_toy_models_flash_prefill_matches_the_candle_path() -> Result<()> {
    const NAME: &str = "cuda_toy_models_flash_prefill_matches_the_candle_path";
    let dev = kernels_device_or_skip!(NAME);
    for (name, cfg) in toy_cfgs() {
        let dir = tempfile::tempdir()?;
        write_toy_lm_checkpoint(dir.path(), &cfg, 11, &CORPUS.repeat(4))?;
        let prompt: Vec<u32> = CORPUS.repeat(4).bytes().take(300).map(u32::from).collect();
        let ids = Tensor::new(prompt.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let mut flash = toy_model(&cfg, dir.path(), &dev)?;
        assert!(flash.flash_prefill(), "{name}: bf16 on sm_90 with fused kernels takes the flash prefill");
        let mut plain = flash.with_fused_kernels(false);
        assert!(!plain.flash_prefill(), "{name}: fused kernels off takes candle's attention");
        let mut chunked = toy_model_with(&cfg, dir.path(), &dev, &ModelOptions::default().prefill_chunk(100))?;

        let cpu = toy_model(&cfg, dir.path(), &Device::Cpu)?;
        let (mut reference, mut dense) = (cpu.to_reference()?, cpu.to_dense()?);
        let exact = all_logits(&mut reference, &ids)?;
        let noise = LogitDiff::of(&exact, &all_logits(&mut dense, &ids)?);
        let bounds = LogitBounds::new(&LogitScales::of(dir.path(), cfg.num_hidden_layers)?, &noise, 2, 2);

        let want = all_logits(&mut plain, &ids)?;
        let candle_vs_exact = LogitDiff::of(&want, &exact);
        for (what, m) in [("whole", &mut flash), ("passes of 100", &mut chunked)] {
            let got = all_logits(m, &ids)?;
            let d = LogitDiff::of(&got, &want);
            assert!(d.max_abs > 0.0, "{name} {what}: identical logits: the flash prefill did not run");
            bounds.check(&format!("{name}: flash prefill ({what}) vs candle attention"), &d);
            let e = LogitDiff::of(&got, &exact);
            println!(
                "{name} {what}: vs the f32 reference: flash top-1 {}/{} rms {:.4}; candle attention top-1 {}/{} rms {:.4}",
                e.top1_agree, e.steps, e.rms, candle_vs_exact.top1_agree, candle_vs_exact.steps, candle_vs_exact.rms
            );
            assert!(
                e.top1_agree + e.steps / 100 >= candle_vs_exact.top1_agree,
                "{name} {what}: top-1 vs the f32 reference {} < candle attention's {}",
                e.top1_agree,
                candle_vs_exact.top1_agree
            );
            assert!(
                e.rms <= 1.25 * candle_vs_exact.rms,
                "{name} {what}: rms vs the f32 reference {} > 1.25 × {}",
                e.rms,
                candle_vs_exact.rms
            );
        }
    }
    Ok(())
}

/// The fused decode kernels (attention in one launch, fused elementwise steps) against the same
/// weights with them off (candle's attention, composed ops), both on CUDA, teacher-forced over 128
/// steps (the KV cache grows past 64 positions mid-decode), for each toy LM of `toy_cfgs`
/// (confident top-1 margins): top-1 agreement ≥ 99 %, and |Δlogit| within `LogitBounds` for two
/// CUDA runs with FP8 linears — the candle path rounds scores, probabilities and the output to
/// bf16 where ours stays in f32 until the quantizer, which moves e4m3 codes of the o projection's
/// input: at most two FP8 runs' quantization noise (measured on the CPU: the f32 reference
/// against the dense model) plus two bf16 roundings chains. Then greedy generation at batch 3
/// (scale padding rows in the o GEMM): the same tokens, the same in every sequence.
#[test]
fn cuda_toy_models_fused_attention_decodes_like_the_candle_path() -> Result<()> {
    const NAME: &str = "cuda_toy_models_fused_attention_decodes_like_the_candle_path";
    let dev = kernels_device_or_skip!(NAME);
    for (name, cfg) in toy_cfgs() {
        let dir = tempfile::tempdir()?;
        write_toy_lm_checkpoint(dir.path(), &cfg, 11, &CORPUS.repeat(4))?;
        let mut fused = toy_model(&cfg, dir.path(), &dev)?;
        assert!(fused.fused_kernels(), "{name}: on by default");
        assert_providers(name, &fused)?;
        let mut plain = fused.with_fused_kernels(false);
        fused.set_kv_capacity(8);
        let prompt: Vec<u32> = "the quick brown".bytes().map(u32::from).collect();
        let steps = 128;

        // The quantization noise of this model on these tokens, on the CPU.
        let cpu = toy_model(&cfg, dir.path(), &Device::Cpu)?;
        let (mut reference, mut dense) = (cpu.to_reference()?, cpu.to_dense()?);
        let (_, a, b) = teacher_forced(&mut fused, &mut [&mut plain, &mut reference, &mut dense], &prompt, steps)?;
        let noise = LogitDiff::of(&b[1], &b[2]);
        println!("{name}: FP8 quantization noise (CPU f32 reference vs dense): {noise:?}");
        let d = LogitDiff::of(&a, &b[0]);
        println!("{name}: fused vs candle attention: {d:?}");
        assert!(d.max_abs > 0.0, "{name}: identical logits: the fused attention did not run");
        assert!(d.agreement() >= 0.99, "{name}: top-1 agreement {}/{}", d.top1_agree, d.steps);
        let bounds = LogitBounds::new(&LogitScales::of(dir.path(), cfg.num_hidden_layers)?, &noise, 2, 2);
        bounds.check(&format!("{name}: fused vs candle attention"), &d);

        // Greedy decoding, batch 3, 16 steps: same tokens.
        let run = |m: &mut DecoderModel| -> Result<Vec<Vec<u32>>> {
            Ok(generate(m, &prompt, 3, 16, &mut Sampler::greedy(), &[], &mut |_, _| {})?.tokens)
        };
        let (a, b) = (run(&mut fused)?, run(&mut plain)?);
        println!("{name}: fused: {:?}", String::from_utf8_lossy(&a[0].iter().map(|&t| t as u8).collect::<Vec<_>>()));
        assert_eq!(a, b, "{name}: greedy tokens, fused vs candle attention");
        assert!(a.iter().all(|s| s == &a[0]), "{name}: identical sequences of a batch decode identically");
    }
    Ok(())
}

/// Bit patterns of any tensor (via f32 for the float dtypes, u8 for e4m3).
fn bits(t: &Tensor) -> Result<Vec<u32>> {
    let t = t.flatten_all()?.to_device(&Device::Cpu)?;
    Ok(match t.dtype() {
        DType::BF16 => t.to_vec1::<bf16>()?.iter().map(|x| x.to_bits() as u32).collect(),
        DType::F32 => t.to_vec1::<f32>()?.iter().map(|x| x.to_bits()).collect(),
        _ => t.to_dtype(DType::U8)?.to_vec1::<u8>()?.iter().map(|&x| x as u32).collect(),
    })
}

#[test]
fn cuda_decode_step_attention_equals_the_two_launches() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_decode_step_attention_equals_the_two_launches");
    let eps = 1e-6f32;
    let mut cases = 0;
    // n_rep 8 (Qwen3-32B), 4 and 1; offsets: first position, tile edges, a decode length, long.
    for (hq, hkv) in [(64, 8), (16, 4), (8, 8)] {
        let n_rep = hq / hkv;
        for b in [1, 3] {
            for offset in [0, 31, 32, 147, 700] {
                let cap = offset + 9;
                let (cos, sin) = rope_tables(cap, HD, &dev)?;
                let (cos, sin) = (cos.narrow(0, offset, 1)?, sin.narrow(0, offset, 1)?);
                let w = head_weights(hq, hkv, HD, QkNorm::Rms, &dev)?;
                let qkv = randn_bf16(&[b, (hq + 2 * hkv) * HD], 1.0, &dev)?;
                let len = offset + 1;
                let tiles = len.div_ceil(attn::POSITION_TILE);
                // 2 and up to 8: merged in a cluster; more (offset 700: 22 tiles): the combine
                // kernel, as in the two-launch path.
                // Both merges of the one-launch kernel (the tail merge's arrival counters are reused
                // from case to case: a counter not reset to zero would break the next case).
                for (splits, merge) in [1, 2, tiles]
                    .into_iter()
                    .flat_map(|s| [(s, attn::SplitMerge::Cluster), (s, attn::SplitMerge::Tail)])
                {
                    for hs in (1..=n_rep).filter(|h| n_rep % h == 0) {
                        // Both paths start from identical caches: `offset` valid positions,
                        // NaN from there on (only position `offset` may be written).
                        let (kc_a, vc_a, _, _) = poisoned_caches(b, hkv, offset.max(1), cap, &dev)?;
                        if offset == 0 {
                            kc_a.slice_set(&nan_bf16(&[b, hkv, 1, HD], &dev)?, 2, 0)?;
                            vc_a.slice_set(&nan_bf16(&[b, hkv, 1, HD], &dev)?, 2, 0)?;
                        }
                        let (kc_b, vc_b) = (kc_a.copy()?, vc_a.copy()?);
                        let q = attn::qk_norm_rope_append(
                            &qkv,
                            &w,
                            &cos,
                            &sin,
                            &kc_a,
                            &vc_a,
                            offset,
                            hq,
                            hkv,
                            eps,
                            QkNorm::Rms,
                        )?;
                        let both = DecodeAttentionOptions { quantized: true, bf16: true, splits: Some(splits) };
                        let want = attn::decode_attention(&q, &kc_a, &vc_a, len, both)?;
                        poison(&dev, b * hq * HD * (splits + 2))?;
                        let opts = attn::DecodeStepOptions { attention: both, head_splits: Some(hs), merge };
                        let got = attn::decode_step_attention(
                            &qkv,
                            &w,
                            &cos,
                            &sin,
                            &kc_b,
                            &vc_b,
                            offset,
                            hq,
                            hkv,
                            eps,
                            QkNorm::Rms,
                            opts,
                        )?;
                        let what =
                            format!("hq {hq}/{hkv} B={b} offset {offset} splits {splits} head splits {hs} {merge:?}");
                        let (wq, ws) = want.quantized.unwrap();
                        let (gq, gs) = got.quantized.unwrap();
                        assert!(bits(&gq)? == bits(&wq)?, "{what}: quantized output differs");
                        assert!(
                            scale_buffer(&gs)? == scale_buffer(&ws)?,
                            "{what}: scales differ (padding rows included)"
                        );
                        assert!(bits(&got.bf16.unwrap())? == bits(&want.bf16.unwrap())?, "{what}: bf16 output differs");
                        assert!(bits(&kc_b)? == bits(&kc_a)?, "{what}: k cache differs");
                        assert!(bits(&vc_b)? == bits(&vc_a)?, "{what}: v cache differs");
                        cases += 1;
                    }
                }
            }
        }
    }
    println!("decode_step_attention: {cases} cases bit-identical to qk_norm_rope_append + decode_attention");
    Ok(())
}

#[test]
fn cuda_decode_step_attention_rejects_bad_inputs() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_decode_step_attention_rejects_bad_inputs");
    let (b, hq, hkv, cap) = (2, 8, 2, 64);
    let qkv = randn_bf16(&[b, (hq + 2 * hkv) * HD], 1.0, &dev)?;
    let w = head_weights(hq, hkv, HD, QkNorm::Rms, &dev)?;
    let (cos, sin) = rope_tables(4, HD, &dev)?;
    let kc = randn_bf16(&[b, hkv, cap, HD], 1.0, &dev)?;
    let vc = randn_bf16(&[b, hkv, cap, HD], 1.0, &dev)?;
    let run = |offset: usize, hs: Option<usize>, qkv: &Tensor| {
        let opts = attn::DecodeStepOptions { head_splits: hs, ..Default::default() };
        attn::decode_step_attention(qkv, &w, &cos, &sin, &kc, &vc, offset, hq, hkv, 1e-6, QkNorm::Rms, opts)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(run(cap, None, &qkv).contains("offset 64 is beyond the cache capacity 64"));
    assert!(run(3, Some(3), &qkv).contains("head_splits 3 must divide the 4"));
    assert!(run(3, Some(0), &qkv).contains("head_splits 0"));
    let narrow = randn_bf16(&[b, hq * HD], 1.0, &dev)?;
    assert!(run(3, None, &narrow).contains("qkv must be [batch, 1536]"));
    let opts = attn::DecodeStepOptions {
        attention: DecodeAttentionOptions { quantized: false, bf16: false, splits: None },
        ..Default::default()
    };
    let e =
        attn::decode_step_attention(&qkv, &w, &cos, &sin, &kc, &vc, 3, hq, hkv, 1e-6, QkNorm::Rms, opts).err().unwrap();
    assert!(e.to_string().contains("quantized and/or the bf16"), "{e}");
    assert!(run(3, Some(2), &qkv).is_empty(), "a valid call fails: {}", run(3, Some(2), &qkv));
    Ok(())
}

/// Head dimension 64 and the models without a q/k norm, through every decode-attention entry
/// point, at GQA 3 (SmolLM2's 9 / 3 heads: a 128-wide quantization group spans two heads of
/// different kv groups), 4 and 1, at the first position, at a tile edge and deep in the cache:
/// - `qk_norm_rope_append` against candle's `[rms_norm] → broadcast_mul → rope_thd` (the
///   model's composed path) within one bf16 ulp on ≤ 0.1 % of the values, v bit for bit, and
///   nothing written but position `offset`;
/// - `decode_attention` (bf16) against softmax(q·Kᵀ)·V in f32, and its quantized output (at
///   d = 64 the activation quantizer on the bf16 output) bit for bit that quantizer's;
/// - `decode_step_attention` (one launch, position splits 1 and several) bit-identical to
///   the two launches, caches included.
#[test]
fn cuda_attention_takes_head_dim_64_and_models_without_qk_norm() -> Result<()> {
    let dev = kernels_device_or_skip!("cuda_attention_takes_head_dim_64_and_models_without_qk_norm");
    let eps = 1e-5f32;
    let (mut total, mut mismatched, mut cases) = (0usize, 0usize, 0usize);
    for (d, norm) in [(64, QkNorm::Rms), (64, QkNorm::WeightOnly), (128, QkNorm::WeightOnly)] {
        for (b, hq, hkv) in [(1, 9, 3), (3, 16, 4), (2, 8, 8)] {
            for offset in [0usize, 32, 700] {
                let what = format!("d={d} {norm:?} B={b} heads {hq}/{hkv} offset {offset}");
                let cap = offset + 9;
                let (cos, sin) = rope_tables(cap, d, &dev)?;
                let (cos, sin) = (cos.narrow(0, offset, 1)?, sin.narrow(0, offset, 1)?);
                let w = head_weights(hq, hkv, d, norm, &dev)?;
                let gain = Tensor::rand(0.05f32, 20f32, (b, 1), &dev)?;
                let qkv = Tensor::randn(0f32, 1f32, (b, (hq + 2 * hkv) * d), &dev)?
                    .broadcast_mul(&gain)?
                    .to_dtype(DType::BF16)?;
                // Caches: `offset` valid positions, NaN from there on.
                let kc = nan_bf16(&[b, hkv, cap, d], &dev)?;
                let vc = nan_bf16(&[b, hkv, cap, d], &dev)?;
                if offset > 0 {
                    kc.slice_set(&randn_bf16(&[b, hkv, offset, d], 1.0, &dev)?, 2, 0)?;
                    vc.slice_set(&randn_bf16(&[b, hkv, offset, d], 1.0, &dev)?, 2, 0)?;
                }
                let (kc_step, vc_step) = (kc.copy()?, vc.copy()?);

                // 1. The append against the composed candle ops.
                let q = attn::qk_norm_rope_append(&qkv, &w, &cos, &sin, &kc, &vc, offset, hq, hkv, eps, norm)?;
                assert_eq!(q.dims(), &[b, hq, d], "{what}");
                let (q_ref, k_ref, v_ref) = candle_step_path(&qkv, &w, &cos, &sin, (hq, hkv, d), norm, eps)?;
                let k_new = kc.narrow(2, offset, 1)?.squeeze(2)?;
                let v_new = vc.narrow(2, offset, 1)?.squeeze(2)?;
                assert_eq!(ulp_diff(&v_new, &v_ref)?.0, 0, "{what}: v must be copied bit for bit");
                for (name, got, want) in [("q", &q, &q_ref), ("k", &k_new, &k_ref)] {
                    let (n, worst) = ulp_diff(got, want)?;
                    assert!(worst <= 1, "{what}: {name} differs from candle's ops by {worst} bf16 ulps ({n} values)");
                    total += want.elem_count();
                    mismatched += n;
                }
                let f = kc.narrow(2, offset + 1, cap - offset - 1)?.to_dtype(DType::F32)?;
                let nan = f.ne(&f)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
                assert_eq!(nan as usize, f.elem_count(), "{what}: k_cache written past position {offset}");

                // 2. The attention against the f32 reference; its quantized output.
                let len = offset + 1;
                let both = DecodeAttentionOptions { quantized: true, bf16: true, splits: None };
                poison(&dev, b * hq * d * 4)?;
                let out = attn::decode_attention(&q, &kc, &vc, len, both)?;
                let y = out.bf16.clone().expect("bf16 output");
                let (qa, sa) = out.quantized.clone().expect("quantized output");
                let (k, v) = (kc.narrow(2, 0, len)?, vc.narrow(2, 0, len)?);
                let qf = q.to_dtype(DType::F32)?.reshape((b, hkv, hq / hkv, d))?;
                let p = candle_nn::ops::softmax_last_dim(&qf.matmul(&k.to_dtype(DType::F32)?.t()?)?)?;
                let r = p.matmul(&v.to_dtype(DType::F32)?)?.reshape((b, hq * d))?;
                let scale = max_abs(&r)?;
                let e = max_abs(&(&y.to_dtype(DType::F32)? - &r)?)?;
                assert!(e <= 8e-3 * scale + 1e-5, "{what}: bf16 output max |Δ| {e} (reference max {scale})");
                assert_eq!(qa.dims(), &[b, hq * d], "{what}");
                assert_eq!(sa.dims(), &[b, (hq * d).div_ceil(128)], "{what}");
                if d == 64 {
                    let (rq, rs) = quantize_activation(&y)?;
                    assert!(bits(&qa)? == bits(&rq)?, "{what}: codes differ from the quantizer on the bf16 output");
                    assert!(scale_buffer(&sa)? == scale_buffer(&rs)?, "{what}: scales differ (padding rows included)");
                }

                // 3. One launch, bit-identical to the two, at one and at several position splits.
                for splits in [1, len.div_ceil(attn::POSITION_TILE)] {
                    let (kc_b, vc_b) = (kc_step.copy()?, vc_step.copy()?);
                    let o = DecodeAttentionOptions { splits: Some(splits), ..both };
                    let want = attn::decode_attention(&q, &kc, &vc, len, o)?;
                    poison(&dev, b * hq * d * (splits + 2))?;
                    let opts = attn::DecodeStepOptions {
                        attention: DecodeAttentionOptions { splits: Some(splits), ..both },
                        ..Default::default()
                    };
                    let got = attn::decode_step_attention(
                        &qkv, &w, &cos, &sin, &kc_b, &vc_b, offset, hq, hkv, eps, norm, opts,
                    )?;
                    let what = format!("{what} splits {splits}");
                    assert!(bits(&got.bf16.unwrap())? == bits(&want.bf16.unwrap())?, "{what}: bf16 output differs");
                    let ((gq, gs), (wq, ws)) = (got.quantized.unwrap(), want.quantized.unwrap());
                    assert!(bits(&gq)? == bits(&wq)?, "{what}: quantized output differs");
                    assert!(scale_buffer(&gs)? == scale_buffer(&ws)?, "{what}: scales differ");
                    assert!(bits(&kc_b)? == bits(&kc)?, "{what}: k cache differs");
                    assert!(bits(&vc_b)? == bits(&vc)?, "{what}: v cache differs");
                    cases += 1;
                }
            }
        }
    }
    println!("head_dim 64 / no q-k norm: {mismatched} of {total} q/k values differ from candle's ops; {cases} one-launch cases bit-identical");
    assert!(mismatched * 1000 <= total, "{mismatched} of {total} values differ from candle's ops");
    Ok(())
}
