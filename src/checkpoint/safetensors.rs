//! safetensors headers read and validated without mapping the file: dtypes, shapes, offsets and
//! that the data section is covered exactly.

use super::MAX_HEADER_BYTES;
use candle_core::{bail, Error, Result};
use safetensors::Dtype as StDtype;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// One tensor of a checkpoint, as its safetensors header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Stored dtype (`F8_E4M3`, `BF16`, ...).
    pub dtype: StDtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// The file holding it.
    pub file: PathBuf,
    /// Byte offsets `[begin, end)` within the file's data section.
    pub data_offsets: (usize, usize),
}

impl TensorInfo {
    /// Stored size in bytes.
    pub fn nbytes(&self) -> usize {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// Reads and validates the header of one safetensors file without mapping it: the 8-byte
/// length, the JSON, every tensor's dtype, shape and offsets, and that the data section is
/// covered exactly (contiguous tensors, ending at the end of the file). Returns the tensors
/// by name. Errors name the file and the problem; nothing is read past the file's end.
/// The checks are those of [`parse_safetensors_header`], which this reads the bytes for.
pub fn read_safetensors_header(path: &Path) -> Result<BTreeMap<String, TensorInfo>> {
    let p = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| err(format!("{p}: cannot open safetensors file: {e}")))?;
    let len = file.metadata().map_err(|e| err(format!("{p}: cannot stat: {e}")))?.len();
    let n = match len {
        0..=7 => 0, // parse_safetensors_header reports the truncation
        _ => {
            let mut n8 = [0u8; 8];
            file.read_exact(&mut n8).map_err(|e| err(format!("{p}: cannot read the header length: {e}")))?;
            header_len(n8, len, path)?
        }
    };
    let mut bytes = vec![0u8; (8 + n).min(len) as usize];
    if len >= 8 {
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        file.read_exact(&mut bytes[8..]).map_err(|e| err(format!("{p}: cannot read the {n}-byte header: {e}")))?;
    }
    parse_safetensors_header(&bytes, len, path)
}

/// The header length `n` from the first 8 bytes of a `len`-byte file, checked against the
/// size limit and the file size.
fn header_len(n8: [u8; 8], len: u64, path: &Path) -> Result<u64> {
    let p = path.display();
    let n = u64::from_le_bytes(n8);
    if n > MAX_HEADER_BYTES {
        bail!("{p}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit (corrupt or not a safetensors file)")
    }
    if n > len - 8 {
        bail!(
            "{p}: header length {n} is larger than the file allows ({len} bytes, so at most {}): truncated \
             or not a safetensors file",
            len - 8
        )
    }
    Ok(n)
}

/// Validates a safetensors header held in memory: `bytes` is the start of a `file_len`-byte
/// file (at least its 8-byte length and the header; the whole file is fine too), and `path`
/// only names the file in errors. Performs every check of [`read_safetensors_header`] — the
/// function it calls — and never indexes past `bytes` (the fuzz targets drive it directly).
pub fn parse_safetensors_header(bytes: &[u8], file_len: u64, path: &Path) -> Result<BTreeMap<String, TensorInfo>> {
    let p = path.display();
    if file_len < 8 {
        bail!("{p}: truncated safetensors file: {file_len} bytes, fewer than the 8-byte header length")
    }
    let Some(n8) = bytes.get(..8) else {
        bail!("{p}: only {} bytes of the header were given, fewer than the 8-byte header length", bytes.len())
    };
    let n = header_len(n8.try_into().expect("8 bytes"), file_len, path)?;
    let Some(header) = bytes.get(8..8 + n as usize) else {
        bail!("{p}: only {} bytes were given, fewer than the 8 + {n} of the header", bytes.len())
    };
    let json: Value =
        serde_json::from_slice(header).map_err(|e| err(format!("{p}: safetensors header is not valid JSON: {e}")))?;
    let Value::Object(entries) = json else { bail!("{p}: safetensors header must be a JSON object") };
    let data_len = file_len - 8 - n;
    let mut out = BTreeMap::new();
    for (name, v) in entries {
        if name == "__metadata__" {
            // The safetensors crate (which maps the file later) requires string values.
            if !v.as_object().is_some_and(|m| m.values().all(Value::is_string)) {
                bail!("{p}: __metadata__ must be a JSON object of strings, got {v}")
            }
            continue;
        }
        out.insert(name.clone(), parse_entry(path, &name, &v, data_len)?);
    }
    // The tensors must tile the data section exactly, as the safetensors format requires.
    let mut spans: Vec<(usize, usize, &str)> =
        out.iter().map(|(k, t)| (t.data_offsets.0, t.data_offsets.1, k.as_str())).collect();
    spans.sort();
    let mut at = 0usize;
    for (b, e, name) in spans {
        if b != at {
            bail!(
                "{p}: tensor {name} starts at data offset {b}, expected {at}: tensors overlap or leave a gap \
                 (corrupt header)"
            )
        }
        at = e;
    }
    if at as u64 != data_len {
        bail!("{p}: the data section holds {data_len} bytes but the tensors cover {at}: the file is truncated or has trailing bytes")
    }
    // After our checks (whose errors are clearer): serde_json's Value keeps the last of
    // duplicate keys, but the safetensors crate (which maps the file later) refuses duplicate
    // fields in a tensor entry. Run its header parser too: what we accept, the loader accepts.
    if let Err(e) = serde_json::from_slice::<safetensors::tensor::Metadata>(header) {
        bail!("{p}: safetensors header rejected by the safetensors format: {e}")
    }
    Ok(out)
}

fn parse_entry(path: &Path, name: &str, v: &Value, data_len: u64) -> Result<TensorInfo> {
    let p = path.display();
    let dtype_v = v.get("dtype").ok_or_else(|| err(format!("{p}: tensor {name} has no dtype")))?;
    let dtype: StDtype = serde_json::from_value(dtype_v.clone())
        .map_err(|_| err(format!("{p}: tensor {name} has unknown dtype {dtype_v}")))?;
    let shape_v = v.get("shape").ok_or_else(|| err(format!("{p}: tensor {name} has no shape")))?;
    let shape: Vec<usize> = shape_v
        .as_array()
        .and_then(|a| a.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect())
        .ok_or_else(|| err(format!("{p}: tensor {name} has invalid shape {shape_v}")))?;
    let off_v = v.get("data_offsets").ok_or_else(|| err(format!("{p}: tensor {name} has no data_offsets")))?;
    let offs: Option<Vec<u64>> = off_v.as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
    let (b, e) = match offs.as_deref() {
        Some(&[b, e]) if b <= e => (b, e),
        _ => bail!("{p}: tensor {name} has invalid data_offsets {off_v}: expected [begin, end] with begin <= end"),
    };
    if e > data_len {
        bail!(
            "{p}: tensor {name} data_offsets [{b}, {e}] run past the end of the data section ({data_len} bytes): \
             the file is truncated or the header is corrupt"
        )
    }
    // candle computes contiguous strides (products of trailing dims) even for empty tensors,
    // so the product of the non-zero dims must fit too: [0, 2^32, 2^32] holds no element but
    // its strides overflow (a panic in builds with overflow checks).
    let strides_fit = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1))).is_some();
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|_| strides_fit);
    let bits = numel.and_then(|n| n.checked_mul(dtype.bitsize()));
    let Some(bits) = bits else { bail!("{p}: tensor {name} shape {shape:?} overflows") };
    if bits % 8 != 0 || (bits / 8) as u64 != e - b {
        bail!(
            "{p}: tensor {name} data_offsets [{b}, {e}] span {} bytes but {dtype:?} {shape:?} needs {} bytes",
            e - b,
            bits as f64 / 8.0
        )
    }
    Ok(TensorInfo { dtype, shape, file: path.to_path_buf(), data_offsets: (b as usize, e as usize) })
}
