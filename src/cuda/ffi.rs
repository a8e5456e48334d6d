//! Every `extern "C"` function of our kernels (`kernels/api.h`), and the status → error
//! mapping. Each launches asynchronously on the stream it is given and never synchronizes.

#![allow(clippy::too_many_arguments)]

use std::ffi::{c_char, c_void};

use crate::dispatch::GemmConfig;

/// `FP8GEMM_OK`.
pub const FP8GEMM_OK: i32 = 0;
/// `FP8GEMM_BF16` (`enum fp8gemm_dtype`).
pub const FP8GEMM_BF16: i32 = 0;
/// `FP8GEMM_F32` (`enum fp8gemm_dtype`).
pub const FP8GEMM_F32: i32 = 1;
/// `FP8GEMM_NORM_BARRIER_WORDS`: barrier words per row of the split fused norm.
pub const NORM_BARRIER_WORDS: usize = 34;
/// `FP8GEMM_NORM_SPLIT_MAX_ROWS`: most rows the split fused norm takes.
pub const NORM_SPLIT_MAX_ROWS: usize = 1;
/// `FP8GEMM_NORM_X_SETTLED`: the fused norm may load `x` before it waits for the previous kernel.
pub const NORM_X_SETTLED: u32 = 1;
/// `FP8GEMM_ATTN_NO_QK_NORM`: the decode-step attention applies the per-head q/k weights without
/// an RMSNorm (Llama, Qwen2).
pub const ATTN_NO_QK_NORM: u32 = 1;

extern "C" {
    // ---- GEMM (kernels/gemm/) ----
    pub fn fp8gemm_status_string(status: i32) -> *const c_char;
    pub fn fp8gemm_workspace_bytes(cfg: *const GemmConfig, m: i64, n: i64, k: i64) -> usize;
    #[cfg(feature = "test-utils")]
    pub fn fp8gemm_compiled_configs(out: *mut GemmConfig, capacity: i32) -> i32;
    pub fn fp8gemm_quantize_act(
        x: *const c_void,
        x_dtype: i32,
        q: *mut u8,
        sa: *mut f32,
        m: i64,
        k: i64,
        stream: *mut c_void,
    ) -> i32;
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
    pub fn fp8gemm_gemm_swiglu_quant(
        qa: *const u8,
        sa: *const f32,
        w: *const u8,
        sw: *const f32,
        m: i64,
        inter: i64,
        k: i64,
        q: *mut u8,
        sa_q: *mut f32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_grouped_gemm(
        qa: *const u8,
        sa: *const f32,
        w: *const u8,
        sw: *const f32,
        y: *mut c_void,
        counts: *const u32,
        groups: i64,
        max_m: i64,
        rows: i64,
        n: i64,
        k: i64,
        block_tokens: i32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_grouped_gemm_swiglu_quant(
        qa: *const u8,
        sa: *const f32,
        w: *const u8,
        sw: *const f32,
        counts: *const u32,
        groups: i64,
        max_m: i64,
        rows: i64,
        inter: i64,
        k: i64,
        q: *mut u8,
        sa_q: *mut f32,
        stream: *mut c_void,
    ) -> i32;
    // ---- Mixture-of-experts routing (kernels/moe/) ----
    pub fn fp8gemm_moe_route(
        logits: *const f32,
        m: i64,
        experts: i32,
        top_k: i32,
        norm: i32,
        first: i32,
        local: i32,
        max_m: i64,
        ids: *mut u32,
        weights: *mut f32,
        pos: *mut u32,
        counts: *mut u32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_moe_gather_quant(
        x: *const c_void,
        x_dtype: i32,
        m: i64,
        k: i64,
        top_k: i32,
        pos: *const u32,
        max_m: i64,
        q: *mut u8,
        sa: *mut f32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_moe_combine(
        y: *const c_void,
        m: i64,
        n: i64,
        top_k: i32,
        pos: *const u32,
        weights: *const f32,
        out: *mut c_void,
        out_dtype: i32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_reduce_partials(
        partials: *const f32,
        y: *mut c_void,
        m: i64,
        n: i64,
        splits: i32,
        stream: *mut c_void,
    ) -> i32;

    // ---- fused elementwise + quantization (kernels/fused/) ----
    pub fn fp8gemm_add_rmsnorm_quant(
        x: *const c_void,
        residual: *const c_void,
        gamma: *const c_void,
        eps: f32,
        x_sum_out: *mut c_void,
        q: *mut u8,
        sa: *mut f32,
        m: i64,
        k: i64,
        row_barrier: *mut u32,
        flags: u32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_add_partials_rmsnorm_quant(
        x: *const c_void,
        partials: *const f32,
        splits: i32,
        gamma: *const c_void,
        eps: f32,
        x_sum_out: *mut c_void,
        q: *mut u8,
        sa: *mut f32,
        m: i64,
        k: i64,
        row_barrier: *mut u32,
        flags: u32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_swiglu_quant(
        gu: *const c_void,
        m: i64,
        inter: i64,
        q: *mut u8,
        sa: *mut f32,
        stream: *mut c_void,
    ) -> i32;

    // ---- decode attention (kernels/attention/) ----
    pub fn fp8gemm_qk_norm_rope_append(
        qkv: *const c_void,
        qk_norm: *const c_void,
        cos_row: *const c_void,
        sin_row: *const c_void,
        q_out: *mut c_void,
        k_cache: *mut c_void,
        v_cache: *mut c_void,
        batch: i64,
        tokens: i64,
        hq: i64,
        hkv: i64,
        head_dim: i64,
        cap: i64,
        offset: i64,
        eps: f32,
        flags: u32,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_decode_attention_workspace_bytes(batch: i64, hq: i64, splits: i64) -> usize;
    pub fn fp8gemm_decode_step_attention(
        qkv: *const c_void,
        qk_norm: *const c_void,
        cos_row: *const c_void,
        sin_row: *const c_void,
        k_cache: *mut c_void,
        v_cache: *mut c_void,
        batch: i64,
        hq: i64,
        hkv: i64,
        head_dim: i64,
        cap: i64,
        offset: i64,
        eps: f32,
        flags: u32,
        splits: i64,
        head_splits: i64,
        workspace: *mut c_void,
        workspace_bytes: usize,
        counters: *mut u32,
        qa: *mut u8,
        sa: *mut f32,
        out: *mut c_void,
        stream: *mut c_void,
    ) -> i32;
    pub fn fp8gemm_decode_attention(
        q: *const c_void,
        k_cache: *const c_void,
        v_cache: *const c_void,
        batch: i64,
        hq: i64,
        hkv: i64,
        head_dim: i64,
        cap: i64,
        len: i64,
        splits: i64,
        workspace: *mut c_void,
        workspace_bytes: usize,
        qa: *mut u8,
        sa: *mut f32,
        out: *mut c_void,
        stream: *mut c_void,
    ) -> i32;

    pub fn fp8gemm_prefill_attention(
        q: *const c_void,
        q_row: i64,
        k_cache: *const c_void,
        v_cache: *const c_void,
        batch: i64,
        t: i64,
        hq: i64,
        hkv: i64,
        head_dim: i64,
        cap: i64,
        offset: i64,
        qa: *mut u8,
        sa: *mut f32,
        out: *mut c_void,
        stream: *mut c_void,
    ) -> i32;

    pub fn fp8gemm_prefill_attention_wgmma(
        q: *const c_void,
        q_row: i64,
        k_cache: *const c_void,
        v_cache: *const c_void,
        batch: i64,
        t: i64,
        hq: i64,
        hkv: i64,
        head_dim: i64,
        cap: i64,
        offset: i64,
        qa: *mut u8,
        sa: *mut f32,
        out: *mut c_void,
        stream: *mut c_void,
    ) -> i32;

    // ---- sampling (kernels/sampling/) ----
    pub fn fp8gemm_argmax_rows(
        x: *const c_void,
        x_dtype: i32,
        rows: i64,
        cols: i64,
        row_stride: i64,
        out: *mut u32,
        stream: *mut c_void,
    ) -> i32;
}

// ---- tracing (kernels/trace/, `trace` feature builds only) ----
#[cfg(feature = "trace")]
extern "C" {
    pub fn fp8gemm_trace_dump(path: *const c_char) -> i64;
}

/// The name of a status code, as the kernels report it.
pub fn status_string(status: i32) -> String {
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
    use crate::dispatch::{ScheduleKind, DISPATCHED_CONFIGS};

    /// The kernels compile exactly the configurations the schedule rule can choose (plus
    /// nothing else): a configuration the rule returns but the build lacks would fail at run
    /// time with "not compiled", one the build has but the rule never returns is dead weight.
    /// Host code only: runs without a GPU.
    #[test]
    fn compiled_configs_are_the_dispatched_ones() {
        let mut compiled: Vec<_> = crate::cuda::compiled_configs()
            .iter()
            .map(|c| (c.schedule().expect("a known kind"), c.block_m, c.block_n, c.stages))
            .collect();
        let mut dispatched = DISPATCHED_CONFIGS.to_vec();
        let key = |c: &(ScheduleKind, i32, i32, i32)| (c.0 as i32, c.1, c.2, c.3);
        compiled.sort_by_key(key);
        dispatched.sort_by_key(key);
        assert_eq!(compiled, dispatched);
    }

    /// Every compiled configuration names a schedule kind the crate knows, and the stream-K tiles
    /// get their workspace: the 4 KiB flags page plus one f32 partial tile
    /// per CTA of a grid of `split_k` CTAs per SM on `num_sms` SMs (a budget below every Hopper's
    /// SM count, so the figure does not depend on the GPU, or on having one). Host code only.
    #[test]
    fn compiled_kinds_known_and_streamk_workspace() {
        let all = crate::cuda::compiled_configs();
        assert!(!all.is_empty());
        for c in &all {
            assert!(c.schedule().is_some(), "compiled config of unknown kind: {c:?}");
        }
        let streamk: Vec<_> = all.iter().filter(|c| c.schedule() == Some(ScheduleKind::SwapAbStreamK)).collect();
        assert_eq!(streamk.len(), 3);
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
        const PAGE: usize = 4096;
        // (block_m, stages, split_k, num_sms), expected bytes
        type Case = ((i32, i32, i32, i32), usize);
        let cases: &[Case] = &[
            ((16, 7, 3, 100), PAGE + 300 * 16 * 64 * 4),
            ((32, 5, 2, 50), PAGE + 100 * 32 * 64 * 4),
            ((16, 8, 1, 7), PAGE + 7 * 16 * 64 * 4),
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

    /// The K-block count is the ceiling (a partial last K block): a split-K workspace of 5 splits
    /// at K = 576 (5 K blocks, the last 64 wide), where 576 / 128 would allow 4; one K block
    /// (K < 128) cannot split. The persistent split tail clamps to the same count. Host code only.
    #[test]
    fn workspaces_count_a_partial_last_k_block() {
        let small_m = GemmConfig { kind: 1, block_m: 64, block_n: 128, stages: 6, split_k: 5, num_sms: 0 };
        let ws = |cfg: &GemmConfig, m: i64, n: i64, k: i64| unsafe { fp8gemm_workspace_bytes(cfg, m, n, k) };
        assert_eq!(ws(&small_m, 40, 512, 576), 5 * 40 * 512 * 4);
        assert_eq!(ws(&small_m, 40, 512, 512), 4 * 40 * 512 * 4);
        assert_eq!(ws(&small_m, 40, 512, 64), 0, "one (partial) K block: no split");
        assert_eq!(ws(&small_m, 40, 512, 584), 0, "k % 16 != 0: not a shape of the kernels");
        // 6 tiles of 128 x 128 on 64 SMs, split tail 8 asked: clamped to the 5 K blocks of 576
        // (4 at K = 512), each split tile publishing S - 1 partial tiles.
        let persistent = GemmConfig { kind: 4, block_m: 128, block_n: 128, stages: 5, split_k: 8, num_sms: 64 };
        assert_eq!(ws(&persistent, 129, 272, 576), 4096 + 6 * 4 * 128 * 128 * 4);
        assert_eq!(ws(&persistent, 129, 272, 512), 4096 + 6 * 3 * 128 * 128 * 4);
    }

    /// The shape rules of the entry points that changed with the partial K block, head_dim 64 and
    /// the norm-free attention, checked before any device work (so host code only; the pointers
    /// are 16-byte aligned and never dereferenced).
    #[test]
    fn entry_point_shape_rules() {
        const SHAPE: i32 = 1;
        let p = 0x1000usize as *mut c_void;
        let (b, f) = (p as *mut u8, p as *mut f32);
        let null = std::ptr::null_mut::<c_void>();
        let cfg = GemmConfig { kind: 2, block_m: 8, block_n: 64, stages: 8, split_k: 1, num_sms: 0 };
        unsafe {
            // GEMM: K a non-zero multiple of 16 (the last K block may be partial).
            for k in [0, 8, 100, 584] {
                assert_eq!(fp8gemm_gemm(b, f, b, f, p, 1, 576, k, &cfg, null, 0, null), SHAPE, "gemm k={k}");
                assert_eq!(fp8gemm_gemm_swiglu_quant(b, f, b, f, 1, 1536, k, b, f, null), SHAPE, "gated k={k}");
            }
            // Quantizer and fused kernels: K a non-zero multiple of 8.
            for k in [0, 4, 100, 572] {
                assert_eq!(fp8gemm_quantize_act(p, FP8GEMM_BF16, b, f, 1, k, null), SHAPE, "quantize k={k}");
                let r = std::ptr::null();
                assert_eq!(
                    fp8gemm_add_rmsnorm_quant(p, r, p, 1e-6, null, b, f, 1, k, std::ptr::null_mut(), 0, null),
                    SHAPE
                );
                assert_eq!(fp8gemm_swiglu_quant(p, 1, k, b, f, null), SHAPE, "swiglu inter={k}");
            }
            // Attention: head_dim 64 or 128; flags 0 or ATTN_NO_QK_NORM; no in-kernel quantized
            // output at head_dim 64 (a group spans two heads).
            let step = |d: i64, flags: u32, qa: *mut u8| {
                fp8gemm_decode_step_attention(
                    p,
                    p,
                    p,
                    p,
                    p,
                    p,
                    1,
                    9,
                    3,
                    d,
                    8,
                    0,
                    1e-6,
                    flags,
                    1,
                    1,
                    null,
                    0,
                    std::ptr::null_mut(),
                    qa,
                    f,
                    null,
                    null,
                )
            };
            assert_eq!(step(96, 0, std::ptr::null_mut()), SHAPE);
            assert_eq!(step(128, 2, b), SHAPE);
            assert_eq!(step(64, ATTN_NO_QK_NORM, b), SHAPE, "head_dim 64 takes qa == NULL");
            let append = |d: i64, flags: u32| {
                fp8gemm_qk_norm_rope_append(p, p, p, p, p, p, p, 1, 1, 9, 3, d, 8, 0, 1e-6, flags, null)
            };
            assert_eq!(append(96, 0), SHAPE);
            // More tokens than the cache holds after the offset.
            assert_eq!(fp8gemm_qk_norm_rope_append(p, p, p, p, p, p, p, 1, 9, 9, 3, 128, 8, 0, 1e-6, 0, null), SHAPE);
            assert_eq!(append(64, 4), SHAPE);
            let attn = |d: i64| fp8gemm_decode_attention(p, p, p, 1, 9, 3, d, 8, 1, 1, null, 0, b, f, null, null);
            assert_eq!(attn(32), SHAPE);
            assert_eq!(attn(64), SHAPE, "head_dim 64 takes qa == NULL");
        }
        // One workspace layout for both head dims (slots of 128 floats and 2 softmax states).
        assert_eq!(unsafe { fp8gemm_decode_attention_workspace_bytes(3, 9, 4) }, 3 * 9 * 4 * 130 * 4);
    }
}
