//! What each fuzz target does with one input, shared by the `cargo fuzz` binaries in this
//! directory and by the CI smoke test (`tests/bad_input.rs`, which feeds every committed seed
//! through the same functions). Every function must return normally for *any* input: a
//! panic (including a failed invariant below) is a crash.
//!
//! Dependencies: only crates the main crate already has (candle-core, candle-fp8,
//! safetensors, serde_json), so the test can `#[path]`-include this file.
#![allow(dead_code)]

use candle_core::safetensors::SliceSafetensors;
use candle_core::{DType, Device, Module, Tensor};
use candle_fp8::checkpoint::{parse_safetensors_header, Checkpoint, QuantizationConfig};
use serde_json::Value;
use std::path::Path;

/// `config.json` / `quantization_config` parsing.
///
/// Invariants: never panics; an accepted config has `[128, 128]` blocks, round-trips through
/// `to_json`, and excludes every module it lists; every error names `quantization_config`.
pub fn quant_config(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // As a whole config.json and as a bare quantization_config object.
    let results = [QuantizationConfig::from_config_json(&v), QuantizationConfig::from_json(&v).map(Some)];
    for r in results {
        match r {
            Ok(None) => assert!(
                v.get("quantization_config").map_or(true, Value::is_null),
                "None only without quantization_config"
            ),
            Ok(Some(q)) => {
                assert_eq!(q.weight_block_size, [128, 128]);
                let back = QuantizationConfig::from_json(&q.to_json()).expect("to_json output parses");
                assert_eq!(back, q, "round trip");
                for m in &q.modules_to_not_convert {
                    assert!(!m.is_empty());
                    assert!(!q.is_quantized(m), "{m:?} is listed but still quantized");
                    // Matching never panics, whatever the module string.
                    let _ = q.is_quantized(&format!("{m}.x"));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("quantization_config"), "error does not name quantization_config: {msg}");
            }
        }
    }
}

/// Our safetensors header validation, then candle's loader over the same bytes.
///
/// Invariants: never panics; whatever `parse_safetensors_header` accepts, the safetensors
/// crate accepts too (so `Checkpoint::open` never fails later, with a vaguer error, on a
/// header it validated), with identical dtype / shape / offsets per tensor; every tensor then
/// loads through candle (the same `SafeTensors::deserialize` + `convert` path as the mmap
/// loader) into exactly `shape` elements, or fails with an error (unsupported dtypes).
/// The parser is also given every truncation of the buffer (with the true file length) and
/// must never read past what it was given.
pub fn safetensors_header(data: &[u8]) {
    let path = Path::new("fuzz.safetensors");
    let len = data.len() as u64;
    // Truncated buffers: the header parser must report, not index past the end.
    for cut in [0, 7, 8, 9, 16, data.len() / 2] {
        if cut < data.len() {
            let _ = parse_safetensors_header(&data[..cut], len, path);
        }
    }
    let ours = parse_safetensors_header(data, len, path);
    let Ok(ours) = ours else {
        let msg = ours.unwrap_err().to_string();
        assert!(msg.contains("fuzz.safetensors"), "error does not name the file: {msg}");
        return;
    };
    let st = match SliceSafetensors::new(data) {
        Ok(st) => st,
        Err(e) => panic!("our header check accepted a buffer the safetensors crate rejects: {e}"),
    };
    let views = st.tensors();
    assert_eq!(views.len(), ours.len(), "tensor count");
    let data_start = data.len() - ours.values().map(|t| t.nbytes()).sum::<usize>();
    for (name, view) in views {
        let info = ours.get(&name).unwrap_or_else(|| panic!("safetensors has {name:?}, we do not"));
        assert_eq!(info.dtype, view.dtype(), "{name}: dtype");
        assert_eq!(info.shape, view.shape(), "{name}: shape");
        assert_eq!(info.nbytes(), view.data().len(), "{name}: byte length");
        // The view lies inside the buffer where our offsets say.
        let off = view.data().as_ptr() as usize - data.as_ptr() as usize;
        assert_eq!(off, data_start + info.data_offsets.0, "{name}: data offset");
        if let Ok(t) = st.load(&name, &Device::Cpu) {
            assert_eq!(t.dims(), info.shape.as_slice(), "{name}: loaded shape");
            // candle may widen the dtype (U16 loads as U32) and loads sub-byte dtypes (F4, F6_*)
            // as storage-less "dummy" tensors, so check the element count against the stored
            // bytes rather than the loaded dtype's size.
            assert_eq!(t.elem_count() * info.dtype.bitsize(), info.nbytes() * 8, "{name}: loaded elements");
        }
    }
}

/// Splits a `checkpoint_open` input into `(config.json, model.safetensors)`: the first two
/// bytes are the config length (little-endian), the config follows, the rest is the file.
pub fn split_checkpoint_input(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (l, rest) = data.split_first_chunk::<2>()?;
    let l = (u16::from_le_bytes(*l) as usize).min(rest.len());
    Some(rest.split_at(l))
}

/// The inverse of [`split_checkpoint_input`] (for writing seeds).
pub fn join_checkpoint_input(config: &[u8], st: &[u8]) -> Vec<u8> {
    let mut v = (config.len() as u16).to_le_bytes().to_vec();
    v.extend_from_slice(config);
    v.extend_from_slice(st);
    v
}

/// A whole checkpoint directory on disk (config.json + model.safetensors, memory-mapped):
/// `Checkpoint::open`, then every tensor loaded, every FP8 module built and run.
///
/// Invariants: never panics; errors from `open` name a file of the checkpoint; a tensor loaded
/// from the mmap has the validated shape; a built FP8 layer produces `[2, N]`.
pub fn checkpoint_open(data: &[u8], dir: &Path) {
    let Some((config, st)) = split_checkpoint_input(data) else {
        return;
    };
    std::fs::write(dir.join("config.json"), config).expect("write config.json");
    std::fs::write(dir.join("model.safetensors"), st).expect("write model.safetensors");
    let ck = match Checkpoint::open(dir) {
        Ok(ck) => ck,
        Err(e) => {
            let msg = format!("{e:#}");
            let names_file = ["config.json", "model.safetensors", "quantization_config", "weight_scale_inv"]
                .iter()
                .any(|f| msg.contains(f));
            assert!(names_file, "open error names no file: {msg}");
            return;
        }
    };
    let dev = Device::Cpu;
    for name in ck.tensor_names() {
        let info = ck.tensor_info(name).expect("listed").clone();
        if let Ok(t) = ck.load_tensor(name, &dev) {
            assert_eq!(t.dims(), info.shape.as_slice(), "{name}: loaded shape");
        }
        let Some(module) = name.strip_suffix(".weight") else {
            continue;
        };
        if info.dtype != safetensors::Dtype::F8_E4M3 {
            // The checked VarBuilder refuses to read a non-FP8 tensor as FP8.
            let vb = ck.var_builder(DType::F32, &dev);
            assert!(vb.get_unchecked_dtype(name, DType::F8E4M3).is_err(), "{name} read as FP8");
            continue;
        }
        // Keep the GEMM small: inputs are at most a few KiB, but shapes with a zero dim can
        // claim large sizes.
        let Ok(layer) = ck.load_fp8_linear(module, &dev, false) else {
            continue;
        };
        let (n, k) = (layer.out_dim(), layer.in_dim());
        if n.saturating_mul(k) > 1 << 20 || k == 0 {
            continue;
        }
        let x = Tensor::ones((2, k), DType::F32, &dev).expect("input");
        if let Ok(y) = layer.forward(&x) {
            assert_eq!(y.dims(), &[2, n], "{module}: output shape");
        }
    }
}
