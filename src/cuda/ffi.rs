//! `extern "C"` declarations mirroring `kernels/api.h`, and the status → error mapping.
//!
//! Every function launches asynchronously on the stream it is given and never synchronizes.
//! When the build has no compiled kernels (no `kernels/*.cu`, cfg `fp8gemm_kernels` unset),
//! stand-ins with the same signatures return `FP8GEMM_ERR_CONFIG`.

#![allow(non_camel_case_types)]

use std::ffi::c_void;

use crate::dispatch::GemmConfig;

pub const FP8GEMM_OK: i32 = 0;
#[allow(dead_code)] // returned by the stand-ins of a kernel-less build
pub const FP8GEMM_ERR_CONFIG: i32 = 3;

/// `enum fp8gemm_dtype`.
pub const FP8GEMM_BF16: i32 = 0;
pub const FP8GEMM_F32: i32 = 1;

/// Whether this build contains our compiled kernels.
pub const HAVE_KERNELS: bool = cfg!(fp8gemm_kernels);

#[cfg(fp8gemm_kernels)]
mod sys {
    use super::*;
    extern "C" {
        pub fn fp8gemm_status_string(status: i32) -> *const std::ffi::c_char;
        pub fn fp8gemm_workspace_bytes(cfg: *const GemmConfig, m: i64, n: i64, k: i64) -> usize;
        pub fn fp8gemm_compiled_configs(out: *mut GemmConfig, capacity: i32) -> i32;
        #[allow(dead_code)] // the kernels' own default rule: compared with choose_config in tests
        pub fn fp8gemm_auto_config(m: i64, n: i64, k: i64, sms: i32, out: *mut GemmConfig) -> i32;
        pub fn fp8gemm_quantize_act(
            x: *const c_void,
            x_dtype: i32,
            q: *mut u8,
            sa: *mut f32,
            m: i64,
            k: i64,
            stream: *mut c_void,
        ) -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn fp8gemm_gemm(
            qa: *const u8,
            sa: *const f32,
            w: *const u8,
            sw: *const f32,
            y: *mut c_void,
            m: i64,
            n: i64,
            k: i64,
            cfg: *const GemmConfig,
            workspace: *mut c_void,
            workspace_bytes: usize,
            stream: *mut c_void,
        ) -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn fp8gemm_gemm_unreduced(
            qa: *const u8,
            sa: *const f32,
            w: *const u8,
            sw: *const f32,
            y: *mut c_void,
            m: i64,
            n: i64,
            k: i64,
            cfg: *const GemmConfig,
            workspace: *mut c_void,
            workspace_bytes: usize,
            stream: *mut c_void,
        ) -> i32;
        pub fn fp8gemm_reduce_partials(partials: *const f32, y: *mut c_void, m: i64, n: i64, splits: i32, stream: *mut c_void) -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn fp8gemm_gemm_quant_in(
            x: *const c_void,
            w: *const u8,
            sw: *const f32,
            y: *mut c_void,
            m: i64,
            n: i64,
            k: i64,
            cfg: *const GemmConfig,
            workspace: *mut c_void,
            workspace_bytes: usize,
            stream: *mut c_void,
        ) -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn fp8gemm_gemm_swiglu_quant(
            qa: *const u8,
            sa: *const f32,
            w: *const u8,
            sw: *const f32,
            m: i64,
            inter: i64,
            k: i64,
            tile_rows: i32,
            stages: i32,
            q: *mut u8,
            sa_q: *mut f32,
            stream: *mut c_void,
        ) -> i32;
        #[allow(dead_code)] // the dequant provider uses the portable helper (dequant.cu)
        pub fn fp8gemm_dequant_weight(
            w: *const u8,
            sw: *const f32,
            out: *mut c_void,
            n: i64,
            k: i64,
            stream: *mut c_void,
        ) -> i32;
        pub fn fp8gemm_random_e4m3(out: *mut u8, n: i64, seed: u64, stream: *mut c_void) -> i32;
        pub fn fp8gemm_trace_dump(path: *const std::ffi::c_char) -> i64;
    }
}

#[cfg(not(fp8gemm_kernels))]
#[allow(clippy::too_many_arguments, clippy::missing_safety_doc)]
mod sys {
    use super::*;
    pub unsafe fn fp8gemm_status_string(_status: i32) -> *const std::ffi::c_char {
        std::ptr::null()
    }
    pub unsafe fn fp8gemm_workspace_bytes(_: *const GemmConfig, _: i64, _: i64, _: i64) -> usize {
        0
    }
    pub unsafe fn fp8gemm_compiled_configs(_: *mut GemmConfig, _: i32) -> i32 {
        0
    }
    #[allow(dead_code)]
    pub unsafe fn fp8gemm_auto_config(_: i64, _: i64, _: i64, _: i32, _: *mut GemmConfig) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub unsafe fn fp8gemm_quantize_act(
        _: *const c_void,
        _: i32,
        _: *mut u8,
        _: *mut f32,
        _: i64,
        _: i64,
        _: *mut c_void,
    ) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub unsafe fn fp8gemm_gemm(
        _: *const u8,
        _: *const f32,
        _: *const u8,
        _: *const f32,
        _: *mut c_void,
        _: i64,
        _: i64,
        _: i64,
        _: *const GemmConfig,
        _: *mut c_void,
        _: usize,
        _: *mut c_void,
    ) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub use self::fp8gemm_gemm as fp8gemm_gemm_unreduced;
    pub unsafe fn fp8gemm_reduce_partials(_: *const f32, _: *mut c_void, _: i64, _: i64, _: i32, _: *mut c_void) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub unsafe fn fp8gemm_gemm_quant_in(
        _: *const c_void,
        _: *const u8,
        _: *const f32,
        _: *mut c_void,
        _: i64,
        _: i64,
        _: i64,
        _: *const GemmConfig,
        _: *mut c_void,
        _: usize,
        _: *mut c_void,
    ) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fp8gemm_gemm_swiglu_quant(
        _: *const u8,
        _: *const f32,
        _: *const u8,
        _: *const f32,
        _: i64,
        _: i64,
        _: i64,
        _: i32,
        _: i32,
        _: *mut u8,
        _: *mut f32,
        _: *mut c_void,
    ) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    #[allow(dead_code)]
    pub unsafe fn fp8gemm_dequant_weight(
        _: *const u8,
        _: *const f32,
        _: *mut c_void,
        _: i64,
        _: i64,
        _: *mut c_void,
    ) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub unsafe fn fp8gemm_random_e4m3(_: *mut u8, _: i64, _: u64, _: *mut c_void) -> i32 {
        FP8GEMM_ERR_CONFIG
    }
    pub unsafe fn fp8gemm_trace_dump(_: *const std::ffi::c_char) -> i64 {
        -1
    }
}

pub use sys::*;

/// The name of a status code, as the kernels report it.
pub fn status_string(status: i32) -> String {
    if !HAVE_KERNELS {
        return "this build has no compiled kernels (kernels/*.cu missing at build time)".into();
    }
    // SAFETY: the kernels return a static NUL-terminated string (or NULL).
    let p = unsafe { fp8gemm_status_string(status) };
    if p.is_null() {
        return format!("unknown status {status}");
    }
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Maps a kernel status code to a candle error naming the call and the status.
pub fn check(what: &str, status: i32) -> candle_core::Result<()> {
    if status == FP8GEMM_OK {
        Ok(())
    } else {
        candle_core::bail!("candle-fp8 {what}: {} (status {status})", status_string(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{choose_config, ScheduleKind};

    /// `auto_config` (kernels/gemm.cu, what the C API's FP8GEMM_KIND_AUTO and the dev harness
    /// run) and `choose_config` (what the crate runs) are one rule written twice: they must pick
    /// the same configuration at every boundary. Host code only: runs without a GPU.
    #[test]
    fn kernels_auto_config_mirrors_choose_config() {
        if !HAVE_KERNELS {
            println!("SKIP kernels_auto_config_mirrors_choose_config: this build has no compiled kernels");
            return;
        }
        let ms = [
            1, 2, 7, 8, 9, 15, 16, 17, 24, 25, 32, 33, 48, 64, 65, 96, 128, 129, 160, 192, 193, 224, 255, 256, 257, 300, 384,
            512, 640, 768, 1024, 1536, 2048, 3072, 4096, 8192,
        ];
        let nks = [
            (128, 128),
            (256, 1536),
            (1024, 1024),
            (2048, 4096),
            (4096, 4096),
            (4096, 16384),
            (5120, 8192),
            (5120, 16384),
            (5120, 25600),
            (6144, 4096),
            (8384, 5120),
            (8448, 5120),
            (10240, 5120),
            (10240, 3968),
            (10240, 4096),
            (12608, 5120),
            (12672, 5120),
            (16384, 4096),
            (25280, 5120),
            (25344, 5120),
            (51200, 5120),
        ];
        let mut compared = 0;
        for sms in [132, 114, 78] {
            for &m in &ms {
                for &(n, k) in &nks {
                    let want = choose_config(m, n, k, sms);
                    let mut got = GemmConfig { kind: -1, block_m: 0, block_n: 0, stages: 0, split_k: 0, num_sms: 0 };
                    // SAFETY: `got` is a valid, writable GemmConfig (repr(C) = fp8gemm_config).
                    let st = unsafe { fp8gemm_auto_config(m as i64, n as i64, k as i64, sms as i32, &mut got) };
                    assert_eq!(st, FP8GEMM_OK, "{m}x{n}x{k} on {sms} SMs: {}", status_string(st));
                    assert_eq!(got, want, "{m}x{n}x{k} on {sms} SMs: kernels' auto_config vs choose_config");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 3 * ms.len() * nks.len());
    }

    /// Every compiled configuration names a schedule kind the crate knows, and the stream-K kinds
    /// (swap-AB and small-M) get their workspace: the 4 KiB flags page plus one f32 partial tile
    /// per CTA of a grid of `split_k` CTAs per SM on `num_sms` SMs (a budget below every Hopper's
    /// SM count, so the figure does not depend on the GPU, or on having one). Host code only.
    #[test]
    fn compiled_kinds_known_and_streamk_workspace() {
        if !HAVE_KERNELS {
            println!("SKIP compiled_kinds_known_and_streamk_workspace: this build has no compiled kernels");
            return;
        }
        let all = crate::cuda::compiled_configs();
        assert!(!all.is_empty());
        for c in &all {
            assert!(c.schedule().is_some(), "compiled config of unknown kind: {c:?}");
        }
        let streamk: Vec<_> = all
            .iter()
            .filter(|c| c.schedule().is_some_and(ScheduleKind::is_stream_k))
            .collect();
        assert!(streamk.iter().any(|c| c.schedule() == Some(ScheduleKind::SmallMStreamK)));
        for c in streamk {
            for (split, sms) in [(1usize, 100usize), (3, 100), (3, 7)] {
                let cfg = GemmConfig { split_k: split as i32, num_sms: sms as i32, ..*c };
                // SAFETY: `cfg` is a valid GemmConfig (repr(C) = fp8gemm_config).
                let got = unsafe { fp8gemm_workspace_bytes(&cfg, 40, 5120, 5120) };
                let ctas = (split * sms).min(1024);
                let want = 4096 + ctas * (c.block_m * c.block_n) as usize * 4;
                assert_eq!(got, want, "{cfg:?}");
            }
        }
    }

    /// The persistent schedule's split tail (`kernels/include/fp8gemm/tail_fixup.cuh`): the
    /// workspace the C API asks for is the 4 KiB flags page plus (S − 1) f32 partial tiles per
    /// tile of the partial last round, with S clamped to what one round of CTAs holds and to the
    /// K blocks; nothing when the tiles fill their rounds or no split fits. SM budgets below every
    /// Hopper's SM count keep it independent of the GPU (and of having one). Host code only.
    #[test]
    fn persistent_split_tail_workspace() {
        if !HAVE_KERNELS {
            println!("SKIP persistent_split_tail_workspace: this build has no compiled kernels");
            return;
        }
        const PAGE: usize = 4096;
        let tile = |bm: usize, bn: usize| bm * bn * 4;
        // (block_m, stages, split_k, num_sms), (m, n, k), expected bytes
        type Case = ((i32, i32, i32, i32), (usize, usize, usize), usize);
        let cases: &[Case] = &[
            // 6 tiles of 256 x 128 on 64 SMs: all split, 8 ways (10 would fit one round) ...
            ((256, 3, 8, 64), (300, 272, 2048), PAGE + 6 * 7 * tile(256, 128)),
            // ... 20 asked: clamped to one round (64 / 6 = 10 units per tile).
            ((256, 3, 20, 64), (300, 272, 2048), PAGE + 6 * 9 * tile(256, 128)),
            // One K block: nothing to split.
            ((256, 3, 4, 64), (300, 272, 128), 0),
            // 15 tiles of 128 x 128: on 64 SMs all split 3 ways; on 7, two full rounds and one
            // tile left (3 ways); on 5 the rounds are full; on 4 the 3 left over cannot split.
            ((128, 5, 3, 64), (513, 272, 2048), PAGE + 15 * 2 * tile(128, 128)),
            ((128, 5, 3, 7), (513, 272, 2048), PAGE + 2 * tile(128, 128)),
            ((128, 5, 3, 5), (513, 272, 2048), 0),
            ((128, 5, 3, 4), (513, 272, 2048), 0),
            // Split 1: no tail.
            ((128, 5, 1, 64), (513, 272, 2048), 0),
        ];
        for &((block_m, stages, split_k, num_sms), (m, n, k), want) in cases {
            let cfg = GemmConfig { kind: 4, block_m, block_n: 128, stages, split_k, num_sms };
            // SAFETY: `cfg` is a valid GemmConfig (repr(C) = fp8gemm_config).
            let got = unsafe { fp8gemm_workspace_bytes(&cfg, m as i64, n as i64, k as i64) };
            assert_eq!(got, want, "{m}x{n}x{k} {cfg:?}");
        }
    }

    /// The stream-K swap-AB tiles (`kernels/include/fp8gemm/streamk_fixup.cuh`): the flags page
    /// plus one f32 partial tile (tokens x 64 weight rows) per CTA of the largest grid the launch
    /// may use (SMs x split_k CTAs per SM, at most one flag per CTA of the page: 1024), whatever
    /// the shape. Host code only.
    #[test]
    fn stream_k_workspace() {
        if !HAVE_KERNELS {
            println!("SKIP stream_k_workspace: this build has no compiled kernels");
            return;
        }
        const PAGE: usize = 4096;
        // (block_m, stages, split_k, num_sms), expected bytes
        let cases: &[((i32, i32, i32, i32), usize)] = &[
            ((16, 7, 3, 100), PAGE + 300 * 16 * 64 * 4),
            ((32, 8, 2, 50), PAGE + 100 * 32 * 64 * 4),
            ((8, 8, 1, 7), PAGE + 7 * 8 * 64 * 4),
            ((16, 8, 8, 128), PAGE + 1024 * 16 * 64 * 4), // 1024 flags: the grid is clamped there
        ];
        for &((block_m, stages, split_k, num_sms), want) in cases {
            let cfg = GemmConfig { kind: 5, block_m, block_n: 64, stages, split_k, num_sms };
            for (m, n, k) in [(16, 51200, 5120), (1, 64, 2048)] {
                // SAFETY: `cfg` is a valid GemmConfig (repr(C) = fp8gemm_config).
                let got = unsafe { fp8gemm_workspace_bytes(&cfg, m as i64, n as i64, k as i64) };
                assert_eq!(got, want, "{m}x{n}x{k} {cfg:?}");
            }
        }
    }
}
