#![no_main]
//! `config.json` / `quantization_config` parsing (see `logic::quant_config`).
mod logic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| logic::quant_config(data));
