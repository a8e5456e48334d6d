//! The per-CTA kernel timeline of a `trace` build (development).

use candle_core::{bail, Result};

use super::ffi;

/// Waits for the device, then writes the per-CTA kernel timeline to `path` (read it with
/// `python3 dev/trace_timeline.py`); returns the number of records written. Each traced
/// kernel's thread 0 appends one record per CTA to a ring of 2^20 records per translation unit.
pub fn trace_dump(path: &std::path::Path) -> Result<usize> {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| candle_core::Error::Msg(format!("trace path {} contains a NUL byte", path.display())))?;
    // SAFETY: a valid NUL-terminated path; the function synchronizes the device itself.
    match unsafe { ffi::fp8gemm_trace_dump(c.as_ptr()) } {
        n if n >= 0 => Ok(n as usize),
        -1 => bail!("candle-fp8 trace_dump: the kernels were built without the trace"),
        -2 => bail!("candle-fp8 trace_dump: a CUDA call failed while reading the trace"),
        e => bail!("candle-fp8 trace_dump: cannot write {} (status {e})", path.display()),
    }
}
