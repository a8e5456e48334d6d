#![no_main]
//! Safetensors header validation + candle's tensor loading over the same bytes (see
//! `logic::safetensors_header`).
mod logic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| logic::safetensors_header(data));
