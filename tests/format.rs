//! The e4m3 (fn) format of the crate against two references that share no code with it: the
//! closed form written in tests/common/fixtures.rs from the format's definition, and the code
//! table that torch wrote (tests/fixtures/e4m3_codes.json, `null` = NaN).
//!
//! The crate's decode table (`format::E4M3_TO_F32`, built from the `float8` crate) feeds the
//! CPU kernel, the f32 reference and the naive f64 loop alike, so a wrong entry would be wrong
//! in the subject and in every reference at once: only a comparison with an independent decode
//! can see it. The encoder (`format::f32_to_e4m3`) quantizes every activation and weight.

#[path = "common/fixtures.rs"]
mod fixtures;

use candle_core::{DType, Device, Tensor};
use candle_fp8::format::{self, E4M3_TO_F32, F8E4M3};
use fixtures::{e4m3_code, e4m3_value};
use serde_json::Value;

/// Bit-for-bit equality of f32 values, any NaN equal to any NaN.
fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// torch's values of the 256 codes (`None` = NaN).
fn torch_codes() -> Vec<Option<f64>> {
    let path = fixtures::fixture_dir("e4m3_codes.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("e4m3_codes.json is JSON");
    let values = v["values"].as_array().expect("a `values` array");
    assert_eq!(values.len(), 256, "e4m3_codes.json: one value per code");
    values.iter().map(|x| if x.is_null() { None } else { Some(x.as_f64().expect("a number or null")) }).collect()
}

/// The closed form against torch's table first: the test's own reference must be right.
#[test]
fn closed_form_agrees_with_torch() {
    for (code, want) in torch_codes().into_iter().enumerate() {
        let got = e4m3_value(code as u8);
        match want {
            None => assert!(got.is_nan(), "code {code:#04x}: torch NaN, closed form {got}"),
            Some(v) => assert!(got.to_bits() == v.to_bits(), "code {code:#04x}: torch {v:e}, closed form {got:e}"),
        }
    }
    // The anchors of the definition, spelled out.
    assert_eq!(e4m3_value(0x00).to_bits(), 0f64.to_bits());
    assert_eq!(e4m3_value(0x80).to_bits(), (-0f64).to_bits(), "0x80 is -0.0");
    assert_eq!(e4m3_value(0x01), 2f64.powi(-9), "smallest subnormal");
    assert_eq!(e4m3_value(0x08), 2f64.powi(-6), "smallest normal");
    assert_eq!(e4m3_value(0x38), 1.0);
    assert_eq!(e4m3_value(0x7e), 448.0);
    assert_eq!(e4m3_value(0xfe), -448.0);
    assert!(e4m3_value(0x7f).is_nan() && e4m3_value(0xff).is_nan());
    assert_eq!((0..=255u8).filter(|&c| e4m3_value(c).is_nan()).count(), 2, "NaN only at 0x7f / 0xff");
}

/// All 256 codes through every decode path of the crate: the table, `format::e4m3_to_f32`,
/// candle's F8E4M3 → F32 cast via the tensor path `candle_fp8::e4m3_to_f32`, and F8E4M3's own
/// `to_f32` — against the closed form and against torch, bit for bit (−0.0 included).
#[test]
fn every_code_decodes_like_the_closed_form_and_torch() -> candle_core::Result<()> {
    let torch = torch_codes();
    let codes: Vec<F8E4M3> = (0..=255u8).map(F8E4M3::from_bits).collect();
    let tensor = candle_fp8::e4m3_to_f32(&Tensor::from_vec(codes.clone(), (16, 16), &Device::Cpu)?)?;
    assert_eq!((tensor.dims(), tensor.dtype()), (&[16, 16][..], DType::F32));
    let tensor: Vec<f32> = tensor.flatten_all()?.to_vec1()?;
    let mut wrong = Vec::new();
    for (i, &c) in codes.iter().enumerate() {
        let closed = e4m3_value(i as u8) as f32; // exact: every e4m3 value is an f32
        let torch = torch[i].map_or(f32::NAN, |v| v as f32);
        let paths = [
            ("E4M3_TO_F32", E4M3_TO_F32[i]),
            ("format::e4m3_to_f32", format::e4m3_to_f32(c)),
            ("candle_fp8::e4m3_to_f32 (tensor)", tensor[i]),
            ("F8E4M3::to_f32", c.to_f32()),
        ];
        for (path, got) in paths {
            if !same(got, closed) || !same(got, torch) {
                wrong.push(format!("{path}: code {i:#04x} = {got:e}, closed form {closed:e}, torch {torch:e}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} wrong decodes:\n{}", wrong.len(), wrong.join("\n"));
    Ok(())
}

/// Compares `format::f32_to_e4m3(x)` with the closed-form encoder, collecting mismatches.
fn encode_mismatch(x: f32, why: &str, wrong: &mut Vec<String>) {
    let got = format::f32_to_e4m3(x).to_bits();
    let want = e4m3_code(f64::from(x));
    let ok = if x.is_nan() { got & 0x7f == 0x7f } else { got == want };
    if !ok && wrong.len() < 40 {
        wrong.push(format!("{why}: f32_to_e4m3({x:e} = {:#010x}) = {got:#04x}, closed form {want:#04x}", x.to_bits()));
    }
}

/// Every representable value, every midpoint between neighbours (ties to even), the f32
/// neighbours of each midpoint (just above rounds up, just below rounds down), both signs.
#[test]
fn encoder_round_trips_and_rounds_midpoints_to_even() {
    let mut wrong = Vec::new();
    for c in 0u8..=0x7e {
        let v = e4m3_value(c) as f32;
        for s in [1f32, -1.0] {
            let x = s * v;
            encode_mismatch(x, "representable", &mut wrong);
            // Independently of the closed form: a representable value encodes to its own code.
            let got = format::f32_to_e4m3(x).to_bits();
            if got != (c | if s < 0.0 { 0x80 } else { 0 }) && wrong.len() < 40 {
                wrong.push(format!("representable {x:e} (code {c:#04x}) encodes to {got:#04x}"));
            }
        }
        if c == 0x7e {
            continue;
        }
        // Midpoint of c and c + 1: 5 significant bits at most, exact in f32.
        let mid = ((e4m3_value(c) + e4m3_value(c + 1)) / 2.0) as f32;
        assert_eq!(f64::from(mid), (e4m3_value(c) + e4m3_value(c + 1)) / 2.0);
        for s in [1f32, -1.0] {
            let x = s * mid;
            encode_mismatch(x, "midpoint", &mut wrong);
            // Ties to even, without the closed form: the even one of the two codes (the last
            // mantissa bit is the code's last bit).
            let even = if c % 2 == 0 { c } else { c + 1 };
            let got = format::f32_to_e4m3(x).to_bits() & 0x7f;
            if got != even && wrong.len() < 40 {
                wrong.push(format!(
                    "midpoint {x:e} of codes {c:#04x}/{:#04x} encodes to {got:#04x}, not the even {even:#04x}",
                    c + 1
                ));
            }
            let (below, above) = if s > 0.0 { (x.next_down(), x.next_up()) } else { (x.next_up(), x.next_down()) };
            encode_mismatch(below, "just below a midpoint", &mut wrong);
            encode_mismatch(above, "just above a midpoint", &mut wrong);
            for (y, want) in [(below, c), (above, c + 1)] {
                let got = format::f32_to_e4m3(y).to_bits() & 0x7f;
                if got != want && wrong.len() < 40 {
                    wrong.push(format!(
                        "{y:e} next to the midpoint of {c:#04x}/{:#04x} encodes to {got:#04x}, not {want:#04x}",
                        c + 1
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} wrong encodings:\n{}", wrong.len(), wrong.join("\n"));
}

/// Overflow saturates to ±448 (the GPU's satfinite), NaN stays NaN, tiny values go to ±0 or
/// the subnormals, the sign of zero is kept.
#[test]
fn encoder_saturates_keeps_nan_and_handles_tiny_values() {
    let code = |x: f32| format::f32_to_e4m3(x).to_bits();
    // Beyond the largest finite value.
    for x in [448.0f32, 448f32.next_up(), 463.9, 464.0, 464f32.next_up(), 480.0, 1e4, 3e38, f32::MAX, f32::INFINITY] {
        assert_eq!(code(x), 0x7e, "{x:e} must saturate to 448");
        assert_eq!(code(-x), 0xfe, "{:e} must saturate to -448", -x);
    }
    // NaN, any payload and sign, stays NaN.
    for bits in [0x7fc0_0000u32, 0x7f80_0001, 0xffc0_0000, 0x7fff_ffff, 0xff80_0001] {
        let x = f32::from_bits(bits);
        assert!(x.is_nan());
        assert_eq!(code(x) & 0x7f, 0x7f, "NaN {bits:#010x} must encode to a NaN code, got {:#04x}", code(x));
    }
    // The subnormal range: 2^-10 is the tie between 0 and the smallest subnormal (to even: 0).
    let min_sub = 2f32.powi(-9);
    assert_eq!(code(min_sub / 2.0), 0x00);
    assert_eq!(code((min_sub / 2.0).next_up()), 0x01);
    assert_eq!(code(-(min_sub / 2.0).next_up()), 0x81);
    assert_eq!(code(1.5 * min_sub), 0x02, "tie 1.5 · 2^-9 goes to the even 2 · 2^-9");
    assert_eq!(code(2.5 * min_sub), 0x02, "tie 2.5 · 2^-9 goes to the even 2 · 2^-9");
    assert_eq!(code(7.5 * min_sub), 0x08, "tie between the largest subnormal and the smallest normal");
    for x in [0.0f32, 1e-30, f32::MIN_POSITIVE, 1e-45, 2f32.powi(-11)] {
        assert_eq!(code(x), 0x00, "{x:e} must round to +0");
        assert_eq!(code(-x), 0x80, "{:e} must round to -0", -x);
    }
    let mut wrong = Vec::new();
    for x in [
        min_sub / 2.0,
        1.5 * min_sub,
        2.5 * min_sub,
        7.5 * min_sub,
        1e-30,
        f32::MIN_POSITIVE,
        448.0,
        464.0,
        f32::INFINITY,
    ] {
        encode_mismatch(x, "edge", &mut wrong);
        encode_mismatch(-x, "edge", &mut wrong);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A dense sweep against the closed form: 4096 evenly spaced f32 significands (plus the 8
/// f32 values around every 1/16 of a binade) in every binade from 2^-14 to 2^9, both signs,
/// and 200,000 random f32 bit patterns.
#[test]
fn encoder_matches_the_closed_form_on_a_dense_sweep() {
    let mut wrong = Vec::new();
    let mut checked = 0u64;
    for e in -14i32..=9 {
        let base = 2f32.powi(e).to_bits();
        for step in 0..4096u32 {
            let bits = base + (step << 11);
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                encode_mismatch(x, "sweep", &mut wrong);
                checked += 1;
            }
        }
        // Around each sixteenth of the binade (the e4m3 midpoints are among them).
        for s in 0..16u32 {
            let center = base + (s << 19);
            for d in 0..8u32 {
                let x = f32::from_bits(center - 4 + d);
                encode_mismatch(x, "near a sixteenth", &mut wrong);
                encode_mismatch(-x, "near a sixteenth", &mut wrong);
                checked += 2;
            }
        }
    }
    let mut rng = candle_fp8::testing::Rng::new(0xe4);
    for _ in 0..200_000 {
        encode_mismatch(f32::from_bits(rng.next_u64() as u32), "random bits", &mut wrong);
        checked += 1;
    }
    assert!(wrong.is_empty(), "{} wrong encodings of {checked}:\n{}", wrong.len(), wrong.join("\n"));
}

/// The closed-form encoder itself against torch's table: every code's value encodes back to
/// the code (−0.0 to 0x80), so the sweep above compares the crate with a correct reference.
#[test]
fn closed_form_encoder_inverts_the_torch_table() {
    for (c, v) in torch_codes().into_iter().enumerate() {
        match v {
            Some(v) => assert_eq!(e4m3_code(v), c as u8, "torch value {v:e} of code {c:#04x}"),
            None => assert_eq!(e4m3_code(f64::NAN) & 0x7f, 0x7f),
        }
    }
}
