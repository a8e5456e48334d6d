//! Which provider runs a blocked-FP8 GEMM, and which of our schedules (kernel configuration)
//! runs it: small pure functions, unit-tested on the CPU.
//!
//! Providers:
//!
//! | provider | when | what |
//! |---|---|---|
//! | [`Provider::Hopper`] | sm_90 device, fast-path shape | our own kernels (default on H100/H200) |
//! | [`Provider::CublasLt`] | CUDA ≥ 12.9 cuBLASLt | vendor blockwise FP8 (`VEC128_32F` × `BLK128x128_32F`) |
//! | [`Provider::Dequant`] | any CUDA device | W → bf16 once, bf16 GEMM (2× weight memory) |
//! | [`Provider::Cpu`] | CPU tensors | blocked FP8 GEMM on the CPU (rayon) |
//!
//! `CANDLE_FP8_BACKEND={auto,hopper,cublaslt,dequant}` overrides the automatic choice; an
//! unusable choice is an error, never a silent fallback.

use candle_core::{bail, Result};

/// Environment variable that overrides the provider choice.
pub const BACKEND_ENV: &str = "CANDLE_FP8_BACKEND";

/// A GEMM implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Our sm_90a kernels (`kernels/`).
    Hopper,
    /// cuBLASLt with 1×128 / 128×128 block scaling.
    CublasLt,
    /// Dequantize the weight to bf16 and run a bf16 GEMM.
    Dequant,
    /// The CPU blocked-FP8 kernel.
    Cpu,
}

impl Provider {
    /// The name used in logs and in `CANDLE_FP8_BACKEND`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Provider::Hopper => "hopper",
            Provider::CublasLt => "cublaslt",
            Provider::Dequant => "dequant",
            Provider::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user asked for: automatic choice or one forced provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendRequest {
    /// Pick the best usable provider for the device and shape.
    Auto,
    /// Use exactly this provider or fail.
    Force(Provider),
}

/// Parses a `CANDLE_FP8_BACKEND` value (case-insensitive, surrounding spaces ignored).
pub fn parse_backend(value: &str) -> Result<BackendRequest> {
    Ok(match value.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => BackendRequest::Auto,
        "hopper" => BackendRequest::Force(Provider::Hopper),
        "cublaslt" => BackendRequest::Force(Provider::CublasLt),
        "dequant" => BackendRequest::Force(Provider::Dequant),
        "cpu" => BackendRequest::Force(Provider::Cpu),
        other => bail!(
            "{BACKEND_ENV}={other:?} is not a backend: expected one of auto, hopper, cublaslt, \
             dequant, cpu"
        ),
    })
}

/// Reads `CANDLE_FP8_BACKEND` (unset means `auto`).
pub fn backend_from_env() -> Result<BackendRequest> {
    match std::env::var(BACKEND_ENV) {
        Ok(v) => parse_backend(&v),
        Err(std::env::VarError::NotPresent) => Ok(BackendRequest::Auto),
        Err(e) => bail!("{BACKEND_ENV}: {e}"),
    }
}

/// What a device can run, as far as the provider choice is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// `false` for the CPU.
    pub is_cuda: bool,
    /// Compute capability as `major * 10 + minor` (90 for H100/H200); 0 for the CPU.
    pub compute_cap: u32,
    /// Whether our kernels were compiled into this build (`cuda` feature).
    pub have_hopper_kernels: bool,
    /// Whether cuBLASLt with block scaling (CUDA ≥ 12.9) is loadable.
    pub have_cublaslt_blockwise: bool,
}

impl DeviceCaps {
    /// Capabilities of a CPU device.
    pub const CPU: DeviceCaps = DeviceCaps {
        is_cuda: false,
        compute_cap: 0,
        have_hopper_kernels: false,
        have_cublaslt_blockwise: false,
    };

    /// Why `p` cannot run on this device, or `None` when it can.
    pub fn unusable_reason(&self, p: Provider) -> Option<String> {
        match p {
            Provider::Cpu if self.is_cuda => Some("the tensors are on a CUDA device".into()),
            Provider::Cpu => None,
            _ if !self.is_cuda => Some("the tensors are on the CPU".into()),
            Provider::Hopper if !self.have_hopper_kernels => {
                Some("this build has no Hopper kernels".into())
            }
            Provider::Hopper if self.compute_cap != 90 => Some(format!(
                "our kernels need compute capability 9.0 (sm_90a), the device has {}.{}",
                self.compute_cap / 10,
                self.compute_cap % 10
            )),
            Provider::CublasLt if !self.have_cublaslt_blockwise => {
                Some("cuBLASLt with 128-block scaling needs CUDA >= 12.9 on sm_90+".into())
            }
            Provider::CublasLt if self.compute_cap < 90 => Some(format!(
                "cuBLASLt block-scaled FP8 needs sm_90+, the device is sm_{}",
                self.compute_cap
            )),
            _ => None,
        }
    }
}

/// Chooses the provider for a GEMM of shape `m × n × k` on a device, honouring `request`.
///
/// `auto` prefers our kernels on Hopper for fast-path shapes, then cuBLASLt, then dequant.
/// A forced provider that cannot run is an error naming the reason.
pub fn choose_provider(
    request: BackendRequest,
    caps: &DeviceCaps,
    m: usize,
    n: usize,
    k: usize,
) -> Result<Provider> {
    if !caps.is_cuda {
        return match request {
            BackendRequest::Auto | BackendRequest::Force(Provider::Cpu) => Ok(Provider::Cpu),
            BackendRequest::Force(p) => bail!(
                "{BACKEND_ENV}={p} cannot run: {}",
                caps.unusable_reason(p).unwrap_or_default()
            ),
        };
    }
    let fast = crate::format::is_fast_path_shape(m, n, k);
    match request {
        BackendRequest::Force(p) => {
            if let Some(why) = caps.unusable_reason(p) {
                bail!("{BACKEND_ENV}={p} cannot run: {why}")
            }
            if matches!(p, Provider::Hopper | Provider::CublasLt) && !fast {
                bail!(
                    "{BACKEND_ENV}={p} cannot run shape m={m} n={n} k={k}: {}",
                    crate::format::fast_path_refusal(m, n, k).unwrap_or_default()
                )
            }
            Ok(p)
        }
        BackendRequest::Auto => {
            if fast && caps.unusable_reason(Provider::Hopper).is_none() {
                Ok(Provider::Hopper)
            } else if fast && caps.unusable_reason(Provider::CublasLt).is_none() {
                Ok(Provider::CublasLt)
            } else {
                Ok(Provider::Dequant)
            }
        }
    }
}

/// Schedule kinds of our kernels (mirrors `enum fp8gemm_kind` in `kernels/api.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ScheduleKind {
    /// Single-partition multistage: one CTA per output tile, deep TMA ring.
    SmallM = 1,
    /// Transposed (swap-AB): weight rows on the wgmma M side, the few tokens on its N side.
    SwapAb = 2,
    /// Non-persistent warp-specialized: producer warp + consumer warpgroups.
    WarpSpecialized = 3,
    /// Persistent warp-specialized, two M waves per tile.
    Persistent = 4,
    /// Swap-AB tiles in stream-K: a resident grid shares the (tile, K block) units evenly and
    /// sums partial tiles inside the kernel; `split_k` = CTAs per SM.
    SwapAbStreamK = 5,
    /// Small-M tiles (64 tokens on the wgmma M side) in stream-K, as [`ScheduleKind::SwapAbStreamK`].
    SmallMStreamK = 6,
}

impl ScheduleKind {
    /// The stream-K kinds (`split_k` = CTAs per SM; flags and partial tiles in a workspace of
    /// their own), as `is_streamk` in `kernels/gemm.cu`.
    pub fn is_stream_k(self) -> bool {
        matches!(self, ScheduleKind::SwapAbStreamK | ScheduleKind::SmallMStreamK)
    }
}

/// One kernel configuration (mirrors `fp8gemm_config` in `kernels/api.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct GemmConfig {
    /// [`ScheduleKind`] as its C value.
    pub kind: i32,
    /// Tile rows of y (tokens per tile for swap-AB).
    pub block_m: i32,
    /// Tile columns of y (weight rows per tile for swap-AB).
    pub block_n: i32,
    /// Shared-memory pipeline depth.
    pub stages: i32,
    /// K split factor (1 = none). For [`ScheduleKind::Persistent`]: the K ranges each tile of
    /// a partial last round over the SMs is cut into (a split tail, summed inside the kernel;
    /// clamped to what one round of CTAs holds, no effect when the tiles fill their rounds).
    /// For the stream-K kinds ([`ScheduleKind::SwapAbStreamK`], [`ScheduleKind::SmallMStreamK`]):
    /// CTAs per SM (clamped to what fits).
    pub split_k: i32,
    /// SMs a persistent grid may use (0 = all).
    pub num_sms: i32,
}

impl GemmConfig {
    /// The schedule kind, if `kind` is a known value.
    pub fn schedule(&self) -> Option<ScheduleKind> {
        match self.kind {
            1 => Some(ScheduleKind::SmallM),
            2 => Some(ScheduleKind::SwapAb),
            3 => Some(ScheduleKind::WarpSpecialized),
            4 => Some(ScheduleKind::Persistent),
            5 => Some(ScheduleKind::SwapAbStreamK),
            6 => Some(ScheduleKind::SmallMStreamK),
            _ => None,
        }
    }
}

/// K split for the swap-AB decode schedule when its tiles do not fill the SMs (mirrors
/// `swap_split` in `kernels/gemm.cu`). Minimises the busiest SM's work, in K blocks:
/// `⌈tiles·s / SMs⌉ · (⌈kb / s⌉ + 4)` (4 ≈ a CTA's pipeline fill), plus 6 for s ≥ 3 (the
/// reduce kernel; 2 splits reduce inside a 2-CTA cluster); at most 8 splits, at least 4 K
/// blocks per split, ties to the smaller split. Fitted to the 2026-11-30 sweep
/// (docs/perf/2026-11-30-s3/): 1×4096² → 2 (8.0 µs cold vs 9.0 at the old rule's 4),
/// 1×5120×8192 and 1×5120×25600 → 3 at M = 16. It counts one CTA per SM; the 8-token tile runs
/// three, so at M ≤ 8 [`choose_config`] takes a larger split where one fits in one wave of those
/// (session 10: 1×5120×8192 → 4, 13.2 µs cold vs 15.5).
fn swap_split(tiles: usize, kb: usize, num_sms: usize) -> i32 {
    let sms = num_sms.max(1);
    let max_s = (kb / 4).clamp(1, 8);
    let cost = |s: usize| (tiles * s).div_ceil(sms) * (kb.div_ceil(s) + 4) + if s >= 3 { 6 } else { 0 };
    (1..=max_s).min_by_key(|&s| (cost(s), s)).unwrap_or(1) as i32
}

/// Largest K split (≤ 8) that keeps ≥ `min_kb` K blocks per split and at most `max_ctas` CTAs
/// in all (one wave: more CTAs than the SMs hold only add a tail); 1 when none does. Mirrors
/// `split_for` in `kernels/gemm.cu`. (2 splits reduce inside a 2-CTA cluster; 3–8 through
/// the f32 workspace, see `fp8gemm_workspace_bytes`.)
fn split_for(tiles: usize, kb: usize, max_ctas: usize, min_kb: usize) -> i32 {
    (1..=8usize)
        .rev()
        .find(|&s| s == 1 || (kb >= min_kb * s && tiles * s <= max_ctas))
        .unwrap_or(1) as i32
}

/// Environment variable: the default of `Fp8BlockLinear::with_in_kernel_quantization` —
/// whether the full linear on bf16 input at decode sizes quantizes the activation inside the
/// GEMM (`1`) or in a separate quantizer launch before it (`0`, unset: the default — on the
/// H200 the in-kernel path measured 1.1–2.1× slower, docs/PERF.md "Session 19"). Read once per
/// process; both paths give the same bits.
pub const QUANT_IN_ENV: &str = "CANDLE_FP8_QUANT_IN";

/// [`QUANT_IN_ENV`]: `true` only for `1`.
pub fn quant_in_default() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(QUANT_IN_ENV).is_ok_and(|v| v.trim() == "1"))
}

/// Whether our kernels can quantize a bf16 activation inside the GEMM for `cfg` (one launch for
/// the whole linear): the swap-AB 8-token tile (64 weight rows), any K split — what
/// [`choose_config`] picks at M ≤ 8. Mirrors `swap_ab_quant_in_configs` in
/// `kernels/gemm_swap_ab.cu`; that kernel's ring depth is its own (7 stages), so `stages` is not
/// compared.
pub fn quantizes_in_kernel(cfg: &GemmConfig) -> bool {
    cfg.schedule() == Some(ScheduleKind::SwapAb) && cfg.block_m == 8 && cfg.block_n == 64
}

thread_local! {
    static CONFIG_OVERRIDE: std::cell::Cell<Option<GemmConfig>> = const { std::cell::Cell::new(None) };
}

/// Forces every GEMM of our kernels launched from the calling thread onto `cfg` (`None`: back
/// to [`choose_config`]). For tuning tools (`examples/bench.rs --sweep`) and tests that time or
/// check one compiled configuration through the same path users call; per thread, so that tests
/// running in parallel in one process do not see each other's override. A configuration that is
/// not compiled makes the GEMM fail with the kernels' "config" status, never silently fall back.
pub fn set_config_override(cfg: Option<GemmConfig>) {
    CONFIG_OVERRIDE.with(|c| c.set(cfg));
}

/// The configuration forced by [`set_config_override`] on the calling thread, if any.
pub fn config_override() -> Option<GemmConfig> {
    CONFIG_OVERRIDE.with(|c| c.get())
}

/// Environment variable that overrides the K split of our kernels for given weight shapes, as a
/// tuning knob: `N×K=S` entries (`x` also accepted for `×`), comma-separated, e.g.
/// `CANDLE_FP8_SPLIT=5120x25600=8,5120x8192=8`; applied to every M at most 16 (the decode
/// sizes), on top of [`choose_config`]'s tile choice (where that is a stream-K tile —
/// [`ScheduleKind::SwapAbStreamK`], e.g. q|k|v and gate/up at 9–16 tokens — the value is its CTAs
/// per SM). Read once per process; a malformed value is an error at the first GEMM.
pub const SPLIT_ENV: &str = "CANDLE_FP8_SPLIT";

/// Most tokens [`SPLIT_ENV`] applies to.
pub const SPLIT_ENV_MAX_M: usize = 16;

/// Parses a [`SPLIT_ENV`] value into `((n, k), split)` entries; splits 1..=8.
pub fn parse_split_overrides(value: &str) -> Result<Vec<((usize, usize), i32)>> {
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || candle_core::Error::Msg(format!("{SPLIT_ENV}: entry {entry:?} is not N×K=S (e.g. 5120x25600=8)"));
        let (shape, split) = entry.split_once('=').ok_or_else(bad)?;
        let (n, k) = shape.split_once(['x', '×']).ok_or_else(bad)?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        let k: usize = k.trim().parse().map_err(|_| bad())?;
        let split: i32 = split.trim().parse().map_err(|_| bad())?;
        if !(1..=8).contains(&split) {
            bail!("{SPLIT_ENV}: split {split} in {entry:?} is outside 1..=8")
        }
        out.push(((n, k), split));
    }
    Ok(out)
}

/// [`SPLIT_ENV`] parsed once: the entries, or the error message.
type SplitOverrides = std::result::Result<Vec<((usize, usize), i32)>, String>;

/// The split [`SPLIT_ENV`] forces for an `m × n × k` GEMM, if any.
pub fn split_override(m: usize, n: usize, k: usize) -> Result<Option<i32>> {
    static PARSED: std::sync::OnceLock<SplitOverrides> = std::sync::OnceLock::new();
    let parsed = PARSED.get_or_init(|| match std::env::var(SPLIT_ENV) {
        Ok(v) => parse_split_overrides(&v).map_err(|e| e.to_string()),
        Err(_) => Ok(Vec::new()),
    });
    match parsed {
        Err(e) => bail!("{e}"),
        Ok(list) if m <= SPLIT_ENV_MAX_M => Ok(list.iter().find(|(s, _)| *s == (n, k)).map(|&(_, s)| s)),
        Ok(_) => Ok(None),
    }
}

/// Ring depth (the configuration's stages key) of the small-M 64 × 128 tile at K split `split`:
/// 8 stages at split 1–2 (the ring sets the pace of its long K loops once the promotion overlaps
/// the next K block's wgmma; session 31, "into" hot / cold µs vs 6 stages: 64×51200×5120 77.95 /
/// 80.4–80.9 vs 80.05–80.25 / 82.6–83.1, 64×10240×5120 19.5–19.7 vs 20.0, 128×4096² split 2 cold
/// 8.87–8.94 vs 9.17–9.21), 6 at ≥ 3 (workspace partials: 8 stages lost 0.5–0.9 µs on down at
/// 32–48 tokens; the 6-stage key takes the N-halves loop for K ranges of ≤ 32 blocks,
/// `kernels/gemm_small_m.cu`). Mirrors `small_m_128_stages` in `kernels/gemm.cu`.
fn small_m_128_stages(split: i32) -> i32 {
    if split >= 3 {
        6
    } else {
        8
    }
}

/// Chooses our kernel configuration for an `m × n × k` GEMM on a GPU with `num_sms` SMs.
///
/// Pure and cheap; unit-tested at the boundaries. Mirrors `auto_config` in
/// `kernels/gemm.cu`. Each branch is the configuration that measured fastest in the H200
/// benches (`examples/bench.rs` runs of 2026-11-29, sessions 1 and 2, plus the config sweep
/// `python3 scripts/dev/harness.py sweep`; docs/KERNELS.md). `t128 = ⌈N/128⌉`, `S` = SMs:
///
/// | M | schedule | tile (block_m × block_n) | stages | split-K |
/// |---|---|---|---|---|
/// | 1–8 | swap-AB | 8 tokens × 64 weight rows | 8 | 2 if S ≤ N/64 < 2·S and kb ≥ 32; none if N/64 ≥ 2·S; else the larger of `swap_split` and `split_for(N/64, kb, 3·S, 16)` (three CTAs per SM) |
/// | 9–16 with ⌈N/64⌉ ≥ 3·S | swap-AB stream-K | 16 × 64 | 7 | `split_k` = 3 CTAs per SM sharing the (tile, K block) units |
/// | other 9–16 | swap-AB | 16 × 64 | 8 | none if N/64 ≥ S, else `swap_split` |
/// | 65–128 with t128 ≥ 40 | warp-specialized | 128 × 128 | 6 | one wave, ≥ 16 K blocks per split; ≥ 3 splits: persistent 128 × 128 × 5 with that split tail instead; t128 > S with a small last round: persistent 128 × 128 × 5 with a split tail (the ≤ 0.9 rule below) |
/// | 17–64 with S/4 < ⌈N/64⌉ ≤ S/2, K ≥ 1024 | small-M | 64 × 64 | 8 | 2 (a 2-CTA cluster sums) |
/// | 17–32 with ⌈N/64⌉ ≥ 3·S | swap-AB stream-K | 32 × 64 | 5 | `split_k` = 3 CTAs per SM |
/// | 17–32 with S ≤ ⌈N/64⌉ < 3·S | swap-AB | 32 × 64 | 8 | none |
/// | 25–32 with S/2 < ⌈N/64⌉ < S, K ≥ 16384 | swap-AB | 32 × 64 | 8 | `split_for(N/64, kb, 2·S, 16)` (down: 3) |
/// | other 17–128 | small-M | 64 × 128 | 8 at split 1–2, 6 at ≥ 3 (`small_m_128_stages`) | one wave, ≥ 4 K blocks per split |
/// | 193–256 while ⌈M/64⌉·t128 ≤ S and 2·⌈M/128⌉·t128 ≤ S | persistent | 128 × 128 | 5 | split tail 2 (every tile in two K ranges) |
/// | 129–256 while ⌈M/64⌉·t128 ≤ S | small-M | 64 × 128 | 8 at split 1–2, 6 at ≥ 3 | one wave, ≥ 16 K blocks per split |
/// | > 256, and other 129–256 | persistent, TMA-store epilogue | 256 × 128 (2 waves of 128) if `200·R₂₅₆ < 108·R₁₂₈`, else 128 × 128 | 3 / 5 | none; a split tail where it costs ≤ 0.9 × that (at M ≤ 256 only the 256 × 128 tile's) |
///
/// `R` = rounds of tiles over the SMs (⌈tiles / S⌉): a 256 × 128 tile does twice the work of a
/// 128 × 128 one ~8 % more efficiently (session 7 sweep: 4096³ 132 vs 142 µs), so it wins
/// unless its coarser rounds waste more (2048×5120×8192: 3 rounds vs 5 → 128 × 128). With a
/// split tail a grid of R ≥ 1 full rounds and a last round at most half full costs R + 1/S
/// rounds (`tail_cost`); the cheaper tile with a split tail replaces the plain choice when its
/// weighted cost is ≤ 0.9 × the plain one (e.g. 512×5120×25600: 128 × 128 in 4 K ranges, 129 vs
/// 157 µs).
pub fn choose_config(m: usize, n: usize, k: usize, num_sms: usize) -> GemmConfig {
    let kb = k / 128;
    let sms = if num_sms == 0 { 132 } else { num_sms };
    let cfg = |kind: ScheduleKind, block_m, block_n, stages, split_k| GemmConfig {
        kind: kind as i32,
        block_m,
        block_n,
        stages,
        split_k,
        num_sms: 0,
    };
    let t128 = n.div_ceil(128);
    let m64 = m.div_ceil(64);
    if m <= 16 {
        // Memory-bound: with >= 1 tile per SM every tile is resident at once and a split only
        // adds the reduction (measured 1×10240×5120: split 1 15.8 µs, split 2 17.1, split 3 17.3
        // in session 10, launched alone) — except at M <= 8 with one partial wave of tiles
        // (S <= N/64 < 2·S): a launch that follows a GEMM through PDL gets its CTAs packed two
        // or three per SM on ~80 SMs (trace, session 17); split 2 (a 2-CTA cluster sum, no
        // extra launch) runs 1×10240×5120 in 14.8–15.1 µs instead of 16.9–17.5 (bench "into",
        // M = 1–8) and decode b1 8.958 / 8.961 ms vs 9.018 / 8.981
        // (docs/perf/2026-12-01-s17/call7-qkv-split/). At 16 tokens it lost (19.1 vs 18.2 µs,
        // b16 +0.34 ms).
        let tiles = n.div_ceil(64);
        if m > 8 && (tiles >= 3 * sms || (tiles >= sms && kb >= 32)) {
            // 9-16 tokens over >= 3 waves of 64-row tiles (the plain gate/up GEMM; the model's
            // step at 9-16 tokens runs the gated SwiGLU tile instead): stream-K, three CTAs per
            // SM (7 stages, ~73 KB) sharing the (tile, K block) units evenly instead of one tile
            // per CTA (800 tiles = 6.06 per SM). Session 34 bench A/B, op / "into" µs hot:
            // 16×51200×5120 65.41-65.81 / 63.37-63.67 vs 66.56-66.64 / 64.84-65.04, 12× 67.2-67.7
            // / 65.4-65.5 vs 67.3 / 65.8-65.9 (docs/perf/2026-12-03-s34/call3/).
            // From one wave with a long K (q|k|v: 160 tiles, 40 K blocks) since the flag of a
            // published partial is raised off the math path (session 36): q|k|v "into" 16.1-16.2
            // vs 17.7 µs hot (the op, launched without a PDL overlap, 17.9-18.2 vs 15.7-15.9),
            // decode b16 TPOT 9.647 / 9.650 vs 9.729 / 9.730 ms (docs/perf/2026-12-04-s36/,
            // calls 4-5). Not at 17-32 tokens (32-token tiles on q|k|v: b32 10.49 vs 10.43 ms),
            // nor over fewer tiles (o / down, 80: slower in the harness, session 34) or at 1-8
            // tokens (1×10240×5120 15.75 vs 14.10, session 34).
            // From three waves with >= 32 K blocks, 8 stages two per SM since the parallel
            // fix-up (session 37): four interleaved rounds, "into" / op µs, 16×51200×5120 hot
            // 64.8–65.7 / 67.1–67.8 vs 65.7–66.0 / 67.4–68.2, cold 65.4–66.4 / 68.9–70.1 vs
            // 66.1–66.6 / 69.2–70.6; 9–12 tokens "into" a tie, op 0.8–1.0 faster; 16×25600×5120
            // a tie (docs/perf/2026-12-04-s38/call3). Not with 16 K blocks (9×25344×2048 "into"
            // 15.6–15.7 vs 14.0–14.3 hot: a CTA's share too short for the deeper ring, call 4),
            // nor the q|k|v width (session 34: 15.8 vs 16.4 µs).
            return if tiles >= 3 * sms && kb >= 32 {
                cfg(ScheduleKind::SwapAbStreamK, 16, 64, 8, 2)
            } else {
                cfg(ScheduleKind::SwapAbStreamK, 16, 64, 7, 3)
            };
        }
        let split = if m <= 8 && tiles >= sms && tiles < 2 * sms && kb >= 32 {
            2
        } else if tiles >= sms {
            1
        } else if m <= 8 {
            // 8-token tiles (74 KB) run three per SM: fill those slots in one wave when each
            // split keeps >= 16 K blocks. 1×5120×8192: split 4, 13.2 µs cold vs 15.5 for
            // swap_split's 3; decode b1 9.529-9.557 ms vs 9.601-9.623 (o projection;
            // docs/perf/2026-11-30-s10/call4-decode-shapes/, call9-decode-b1-splits/).
            swap_split(tiles, kb, sms).max(split_for(tiles, kb, 3 * sms, 16))
        } else {
            swap_split(tiles, kb, sms)
        };
        cfg(ScheduleKind::SwapAb, if m <= 8 { 8 } else { 16 }, 64, 8, split)
    } else if m <= 128 {
        let t64 = n.div_ceil(64);
        if m <= 64 && 2 * t64 <= sms && 4 * t64 > sms && kb >= 8 {
            // 64 x 64 tiles in 2-CTA cluster splits fill the SMs once (N = 4096: 128 CTAs):
            // 64×4096² 7.35 / 8.17 µs hot / cold vs 7.43 / 9.18 for 64 x 128 split 4
            // (session 8, docs/perf/2026-11-30-s8/call2-tail-vs-launch-vs-cluster.txt); with the
            // session-9 push sum 6.06 / 6.88, and at M = 32 6.43 / 7.26 vs 6.42 / 8.51 for
            // 64 x 128 split 4 (docs/perf/2026-11-30-s9/call8-push-vs-pull/).
            return cfg(ScheduleKind::SmallM, 64, 64, 8, 2);
        }
        if m <= 32 && t64 >= sms {
            // Wide N at M = 17-32: swap-AB 32-token tiles (weights on the wgmma M side) stream
            // the weights with less activation traffic per tile than 64 x 128 small-M tiles
            // (session 13 sweep, op path, hot / cold µs: 32×51200×5120 72.4 / 72.4 vs 76.7 /
            // 77.7; 32×25600×5120 40.1 / 39.8 vs 42.9 / 42.5; 32×16384×4096 20.6 / 20.7 vs 21.1
            // / 21.2; 24×51200×5120 72.8 / 73.1 vs 74.1 / 75.0; the bench's "into" at
            // 32×51200×5120 70.9 / 72.4 vs 76.0 / 76.4 in session 12). From one wave of them
            // (session 26, 32×10240×5120: 18.42 / 18.47 vs 20.43 / 20.23; session 13 had measured
            // a tie there, 18.80 vs 18.18).
            // From three waves of them (gate/up) in stream-K over two CTAs per SM (session 34
            // bench A/B, op / "into" µs hot: 32×51200×5120 70.5-71.4 / 68.85-68.90 vs 73.1-73.2
            // / 71.8, 24× 70.6-71.4 / 68.0-68.9 vs 71.6-71.9 / 70.3-70.4, decode b32 TPOT
            // 10.77 vs 10.91 ms with q|k|v in stream-K too); not q|k|v (160 tiles: op 22.0-22.4
            // vs 17.1-17.4, "into" 18.0-18.1 vs 17.3-17.8 at 24-32 tokens; with the parallel
            // storer and three per SM "into" 16.8-16.9 vs 17.9-18.2, yet decode b32 10.65 vs 10.56
            // ms, session 37 call 2).
            // Three CTAs per SM (5 stages, ~63 KB) since session 37: 32×51200×5120 "into" 69.8-70.2
            // / 70.3-70.7 vs 71.3-72.0 / 72.7-73.0 µs hot / cold for 8 stages two per SM; decode
            // b24 10.533 / 10.553 vs 10.570 / 10.615 ms, b32 10.376 / 10.395 vs 10.390 / 10.398
            // (docs/perf/2026-12-04-s37/, calls 2-3).
            if t64 >= 3 * sms {
                return cfg(ScheduleKind::SwapAbStreamK, 32, 64, 5, 3);
            }
            return cfg(ScheduleKind::SwapAb, 32, 64, 8, 1);
        }
        if m > 24 && m <= 32 && 2 * t64 > sms && kb >= 128 {
            // 25-32 tokens over half to one wave of 64-row tiles with a long K (down, 5120 ×
            // 25600): swap-AB 32-token tiles in a K split that keeps <= 2 CTAs per SM (3: 240
            // CTAs) instead of 64 × 128 tiles split 3 (session 33 call 4, "into" hot / cold µs:
            // 32×5120×25600 35.55 / 36.77 vs 37.53 / 37.96, 25× 36.19 / 37.02 vs 37.10 / 37.56;
            // decode b32 TPOT 10.76 vs 10.83-10.86 ms; docs/perf/2026-12-03-s33/). Not at 17-24
            // tokens (17×: 36.8 / 38.3 vs 36.5 / 37.3) nor with K = 8192 (o: 24-32× hot 13.3-13.5
            // vs 11.7-11.9; with o too decode b32 ran +0.17 ms, call 3).
            return cfg(ScheduleKind::SwapAb, 32, 64, 8, split_for(t64, kb, 2 * sms, 16));
        }
        if m > 64 && t128 >= 40 {
            // Wide N at M = 65-128: 128 x 128 tiles (128×10240×5120: 23 µs vs 38 for 64 x 128
            // split 2, which ran two waves; 128×51200×5120: 100.7 vs 115.3 for 64 x 128).
            let split = split_for(t128, kb, sms, 16);
            if split >= 3 {
                // Three or more K ranges: the persistent tile's split tail sums them inside the
                // kernel instead of the workspace and a reduce launch (session 24, hot / cold µs:
                // 128×5120×8192 16.50 / 17.53 vs 19.21 / 19.43, 96× 16.14 / 17.07 vs 17.65 / 18.16,
                // 128×5120×25600 43.59 / 43.69 vs 45.81 / 46.01; 80×5120×8192 16.79 / 17.45 vs
                // 16.47 / 17.26; docs/perf/2026-12-02-s24/call3/).
                return cfg(ScheduleKind::Persistent, 128, 128, 5, split);
            }
            // More column tiles than SMs with a small last round (gate_up: 400 tiles, 3.03
            // waves): the persistent tile's split tail, under the rule of M > 256 below
            // (session 25 harness sweep, op path, hot / cold µs, two rounds: 128×51200×5120
            // 88.0 / 87.9 vs 101.1 / 105.2, 100× 85.9 / 85.2 vs 107.5 / 94.8, 80× 85.8 / 87.5 vs
            // 91.0 / 92.1; docs/perf/2026-12-02-s25/call5/).
            if let Some(split) = tail_split(t128, t128.div_ceil(sms), sms, kb) {
                return cfg(ScheduleKind::Persistent, 128, 128, 5, split);
            }
            cfg(ScheduleKind::WarpSpecialized, 128, 128, 6, split)
        } else {
            // Not a 2-CTA cluster sum instead of a 3-way split at M = 33-64: faster in the op's
            // sweep (64×5120×25600 38.1 vs 40.5 µs) but 8.7 µs slower back to back into one output
            // (46.9 vs 38.9), likely because the next cluster launch starts early under PDL there
            // (session 13).
            let split = split_for(m64 * t128, kb, sms, 4);
            cfg(ScheduleKind::SmallM, 64, 128, small_m_128_stages(split), split)
        }
    } else if m <= 256 && m64 * t128 <= sms {
        let m128 = m.div_ceil(128);
        if m > 192 && 2 * m128 * t128 <= sms && kb >= 2 {
            // Four rows of 64 x 128 tiles: half as many 128 x 128 tiles in two K ranges each
            // (a split tail, summed in the kernel) move half the L2 bytes (session 24, hot / cold
            // µs, two rounds: 256×4096² 11.24-11.26 / 12.05-12.15 vs 12.16-12.17 / 13.16-13.17,
            // 224× 11.53-11.59 / 12.02-12.04 vs 12.03-12.04 / 12.70-12.77, 208× a tie; at
            // 144-192 (three rows) 2-6 % slower; docs/perf/2026-12-02-s24/call3/).
            return cfg(ScheduleKind::Persistent, 128, 128, 5, 2);
        }
        // One wave of 64 x 128 tiles beats 128 x 128 (160×4096²: 13.1 vs 16.3 µs).
        let split = split_for(m64 * t128, kb, sms, 16);
        cfg(ScheduleKind::SmallM, 64, 128, small_m_128_stages(split), split)
    } else {
        // M > 256, and M = 129-256 when 64 x 128 tiles need more than one wave: persistent.
        // At 129-256 it replaced the warp-specialized 128 x 128 tiles (session 15 sweep, hot /
        // cold µs): 256×10240×5120 34.8 / 35.1 vs 39.7 / 38.6, 192×51200×5120 148.6 / 149.5
        // vs 160.9 / 160.4, 256×51200×5120 152.6 / 148.3 vs 171.6 / 171.9, 256×5120×8192
        // 28.0 / 28.2 vs 29.4 / 29.6, 256×5120×25600 84.9 / 84.8 vs 84.6 / 90.4
        // (docs/perf/2026-12-01-s15/call2-evict-first/sweep-midm.txt).
        let rounds_big = (m.div_ceil(256) * t128).div_ceil(sms);
        let rounds_small = (m.div_ceil(128) * t128).div_ceil(sms);
        let (plain, plain_cost) = if rounds_big * 200 < rounds_small * 108 {
            (cfg(ScheduleKind::Persistent, 256, 128, 3, 1), rounds_big * 200)
        } else {
            (cfg(ScheduleKind::Persistent, 128, 128, 5, 1), rounds_small * 108)
        };
        // A split tail where the model says it saves >= 10 % of the time. The harness sweep of
        // the 27 shapes at M > 256 the model changes (docs/perf/2026-12-02-s25/call3/)
        // measured 1-19 % faster on every shape with a predicted gain >= 10 %, and slower only
        // below (257×51200×5120 -1.7 %, 1536×4096² -5 % hot, 1536×10240×5120 -4 %); the bench,
        // "into" hot / cold, new vs old (call4/, call5/): 512×5120×25600 129 / 133 vs 157 / 159
        // µs, 1024×5120×25600 248 / 250 vs 279 / 280, 1792×5120×8192 146 / 145 vs 157 / 156,
        // 5120×5120×8192 400 / 393 vs 426 / 427, 1600×4096² even. At M = 129-256 only the 256 x
        // 128 tile's: 160 / 192 / 256 ×51200×5120 146 / 136, 139 / 138, 143 / 143 vs 175 / 175,
        // 154 / 153, 152 / 154 (harness, op path; call5/), while 128 x 128 split tails there
        // measured slower (160×51200×5120 178 µs; 160×10240×5120 +17 %, session 24).
        let mut best: Option<(i32, usize, usize, i32)> = None; // (block_m, cost num, den, split)
        for (block_m, weight) in [(256i32, 200), (128, 108)] {
            if block_m == 128 && m <= 256 {
                continue;
            }
            if let Some((num, den, split)) = tail_cost(m.div_ceil(block_m as usize) * t128, sms, kb) {
                let num = num * weight;
                if best.map_or(true, |(_, b_num, b_den, _)| num * b_den < b_num * den) {
                    best = Some((block_m, num, den, split));
                }
            }
        }
        if let Some((block_m, num, den, split)) = best {
            if 10 * num <= 9 * plain_cost * den {
                let stages = if block_m == 256 { 3 } else { 5 };
                return cfg(ScheduleKind::Persistent, block_m, 128, stages, split);
            }
        }
        plain
    }
}

/// The split tail for `tiles` tiles of one size when it costs ≤ 0.9 × `plain_rounds` rounds
/// ([`tail_cost`]'s model), else `None`.
fn tail_split(tiles: usize, plain_rounds: usize, sms: usize, kb: usize) -> Option<i32> {
    let (num, den, split) = tail_cost(tiles, sms, kb)?;
    (10 * num <= 9 * plain_rounds * den).then_some(split)
}

/// Rounds of a persistent grid over `tiles` tiles with a split tail, as a fraction `num / den`,
/// and the tail's split: `R + 1/S` for R ≥ 1 full rounds and a last round of L ≤ SMs/2 tiles cut
/// into S = min(4, SMs / L, K blocks) K ranges (what `persistent_tail` in
/// `kernels/include/fp8gemm/tail_fixup.cuh` runs for a requested split of 4). `None` where no
/// split tail applies (no full round before it, or the last round is full or over half full).
fn tail_cost(tiles: usize, sms: usize, kb: usize) -> Option<(usize, usize, i32)> {
    let (full, last) = (tiles / sms, tiles % sms);
    if full == 0 || last == 0 || 2 * last > sms {
        return None;
    }
    let split = 4.min(sms / last).min(kb);
    (split >= 2).then_some((full * split + 1, split, split as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_overrides_parse_and_reject_bad_entries() {
        let got = parse_split_overrides("5120x25600=8, 5120×8192=6,").unwrap();
        assert_eq!(got, vec![((5120, 25600), 8), ((5120, 8192), 6)]);
        assert!(parse_split_overrides("").unwrap().is_empty());
        for bad in ["5120x25600", "5120=8", "ax1=2", "5120x25600=9", "5120x25600=0", "1x2=x"] {
            let e = parse_split_overrides(bad).unwrap_err().to_string();
            assert!(e.contains(SPLIT_ENV), "{bad}: {e}");
        }
    }

    const H200: DeviceCaps = DeviceCaps {
        is_cuda: true,
        compute_cap: 90,
        have_hopper_kernels: true,
        have_cublaslt_blockwise: true,
    };

    #[test]
    fn parse_backend_values() {
        assert_eq!(parse_backend("auto").unwrap(), BackendRequest::Auto);
        assert_eq!(parse_backend(" Hopper ").unwrap(), BackendRequest::Force(Provider::Hopper));
        assert_eq!(parse_backend("CUBLASLT").unwrap(), BackendRequest::Force(Provider::CublasLt));
        let e = parse_backend("tensorrt").unwrap_err().to_string();
        assert!(e.contains("\"tensorrt\"") && e.contains("expected one of"), "{e}");
    }

    #[test]
    fn auto_prefers_hopper_then_cublaslt_then_dequant() {
        let auto = BackendRequest::Auto;
        assert_eq!(choose_provider(auto, &H200, 1, 4096, 4096).unwrap(), Provider::Hopper);
        let no_kernels = DeviceCaps { have_hopper_kernels: false, ..H200 };
        assert_eq!(choose_provider(auto, &no_kernels, 1, 4096, 4096).unwrap(), Provider::CublasLt);
        let ampere = DeviceCaps { compute_cap: 80, have_cublaslt_blockwise: false, ..H200 };
        assert_eq!(choose_provider(auto, &ampere, 1, 4096, 4096).unwrap(), Provider::Dequant);
        // Off the fast path: dequant, on any GPU.
        assert_eq!(choose_provider(auto, &H200, 1, 4096, 4000).unwrap(), Provider::Dequant);
        assert_eq!(choose_provider(auto, &DeviceCaps::CPU, 1, 8, 8).unwrap(), Provider::Cpu);
    }

    #[test]
    fn forced_unusable_provider_is_an_error() {
        let ampere = DeviceCaps { compute_cap: 80, ..H200 };
        let e = choose_provider(BackendRequest::Force(Provider::Hopper), &ampere, 1, 128, 128)
            .unwrap_err()
            .to_string();
        assert!(e.contains("hopper") && e.contains("8.0"), "{e}");
        let e = choose_provider(BackendRequest::Force(Provider::Hopper), &H200, 1, 128, 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("K = 100"), "{e}");
        let e = choose_provider(BackendRequest::Force(Provider::Hopper), &DeviceCaps::CPU, 1, 128, 128)
            .unwrap_err()
            .to_string();
        assert!(e.contains("on the CPU"), "{e}");
        assert!(choose_provider(BackendRequest::Force(Provider::Dequant), &H200, 3, 100, 100).is_ok());
    }

    #[test]
    fn config_boundaries_and_splits() {
        let c = |m, n, k| choose_config(m, n, k, 132);
        let kind = |m, n, k| c(m, n, k).schedule().unwrap();
        let tile = |m, n, k| (c(m, n, k).block_m, c(m, n, k).block_n);
        // Schedules at the M boundaries (N = K = 4096).
        assert_eq!(kind(1, 4096, 4096), ScheduleKind::SwapAb);
        assert_eq!(tile(8, 4096, 4096), (8, 64));
        assert_eq!(tile(9, 4096, 4096), (16, 64));
        assert_eq!(kind(16, 4096, 4096), ScheduleKind::SwapAb);
        assert_eq!((kind(17, 4096, 4096), tile(17, 4096, 4096)), (ScheduleKind::SmallM, (64, 64)));
        assert_eq!((kind(17, 5120, 8192), tile(17, 5120, 8192)), (ScheduleKind::SmallM, (64, 128)));
        assert_eq!((kind(128, 4096, 4096), tile(128, 4096, 4096)), (ScheduleKind::SmallM, (64, 128)));
        assert_eq!((kind(129, 4096, 4096), tile(129, 4096, 4096)), (ScheduleKind::SmallM, (64, 128)));
        // 193-256 at N = 4096: 128 x 128 tiles in a 2-way split tail (128 CTAs), not at 129-192.
        assert_eq!(tile(192, 4096, 4096), (64, 128));
        let p = |m, n, k| (kind(m, n, k), tile(m, n, k), c(m, n, k).stages, c(m, n, k).split_k);
        assert_eq!(p(193, 4096, 4096), (ScheduleKind::Persistent, (128, 128), 5, 2));
        assert_eq!(p(256, 4096, 4096), (ScheduleKind::Persistent, (128, 128), 5, 2));
        assert_eq!(p(256, 4096, 128), (ScheduleKind::SmallM, (64, 128), 8, 1)); // one K block
        assert_eq!((kind(257, 4096, 4096), tile(257, 4096, 4096)), (ScheduleKind::Persistent, (128, 128)));
        assert_eq!(tile(512, 4096, 4096), (128, 128));
        // Persistent tiles by rounds over the SMs (session 7 sweep): one round of 256 x 128
        // beats two of 128 x 128; 3 coarse rounds lose to 5 fine ones (N = 5120).
        assert_eq!(tile(1024, 4096, 4096), (256, 128));
        assert_eq!(tile(2048, 4096, 4096), (256, 128));
        assert_eq!(tile(8192, 4096, 4096), (256, 128));
        assert_eq!(tile(2048, 10240, 5120), (256, 128));
        assert_eq!(tile(2048, 25600, 5120), (256, 128));
        assert_eq!(tile(2048, 5120, 8192), (128, 128));
        assert_eq!(tile(2048, 5120, 25600), (128, 128));
        assert_eq!(c(2048, 4096, 4096).stages, 3);
        assert_eq!(c(512, 4096, 4096).stages, 5);
        // N decides at M = 65-128: wide N (>= 40 tiles of 128, gate_up included) -> 128 x 128
        // warp-specialized; narrow N (4096) -> 64 x 128 small-M.
        assert_eq!((kind(128, 10240, 5120), tile(128, 10240, 5120)), (ScheduleKind::WarpSpecialized, (128, 128)));
        // ... and from 3 K splits on, the persistent 128 x 128 tile's split tail instead.
        assert_eq!(p(65, 5120, 8192), (ScheduleKind::Persistent, (128, 128), 5, 3));
        assert_eq!(p(128, 5120, 25600), (ScheduleKind::Persistent, (128, 128), 5, 3));
        assert_eq!(p(128, 5120, 4096), (ScheduleKind::WarpSpecialized, (128, 128), 6, 2));
        assert_eq!(kind(64, 5120, 8192), ScheduleKind::SmallM);
        // ... and where the column tiles overflow the SMs into a small last round (gate_up:
        // 400 tiles = 3 rounds + 4), the persistent tile with a 4-way split tail.
        assert_eq!(p(128, 51200, 5120), (ScheduleKind::Persistent, (128, 128), 5, 4));
        assert_eq!(p(65, 51200, 5120), (ScheduleKind::Persistent, (128, 128), 5, 4));
        // Not when the last round is more than half full (200 tiles = 132 + 68).
        assert_eq!(p(128, 25600, 5120), (ScheduleKind::WarpSpecialized, (128, 128), 6, 1));
        // 129-256 leave small-M once its tiles exceed one wave, for the persistent tiles
        // (rounds rule as at M > 256).
        assert_eq!(kind(192, 4096, 4096), ScheduleKind::SmallM);
        assert_eq!((kind(200, 10240, 5120), tile(200, 10240, 5120)), (ScheduleKind::Persistent, (256, 128)));
        // ... there, too, a 256 x 128 split tail where the model saves >= 10 % (gate_up: 400
        // tiles of 256 x 128 = 3 rounds + 4), never a 128 x 128 one.
        assert_eq!(p(256, 51200, 5120), (ScheduleKind::Persistent, (256, 128), 3, 4));
        assert_eq!(p(160, 51200, 5120), (ScheduleKind::Persistent, (256, 128), 3, 4));
        assert_eq!((kind(256, 5120, 8192), tile(256, 5120, 8192)), (ScheduleKind::Persistent, (128, 128)));
        assert_eq!(kind(192, 5120, 25600), ScheduleKind::SmallM);
        // Split tails at M > 256 where the rounds model saves >= 10 % (2026-12-02 sweep, hot /
        // cold µs against the plain tile: 640×4096² 24.0 / 24.8 vs 26.7 / 27.8, 512×5120×25600
        // 130.4 / 130.4 vs 161.4 / 159.5, 1024×5120×8192 84.6 / 84.4 vs 95.1 / 91.8).
        assert_eq!(p(640, 4096, 4096), (ScheduleKind::Persistent, (128, 128), 5, 4));
        assert_eq!(p(768, 4096, 4096), (ScheduleKind::Persistent, (128, 128), 5, 2));
        assert_eq!(p(512, 5120, 25600), (ScheduleKind::Persistent, (128, 128), 5, 4));
        assert_eq!(p(640, 10240, 5120), (ScheduleKind::Persistent, (128, 128), 5, 4));
        assert_eq!(p(1024, 5120, 8192), (ScheduleKind::Persistent, (256, 128), 3, 4));
        assert_eq!(p(512, 10240, 5120), (ScheduleKind::Persistent, (256, 128), 3, 4));
        assert_eq!(p(512, 51200, 5120), (ScheduleKind::Persistent, (256, 128), 3, 4));
        // ... and not below 10 %, where it measured slower or even (257×51200×5120 -1.7 %,
        // 1536×4096² -5 % hot, 1536×10240×5120 -4 %, 8192×10240×5120 even).
        assert_eq!(p(257, 51200, 5120), (ScheduleKind::Persistent, (128, 128), 5, 1));
        assert_eq!(p(1536, 4096, 4096), (ScheduleKind::Persistent, (128, 128), 5, 1));
        assert_eq!(p(1536, 10240, 5120), (ScheduleKind::Persistent, (256, 128), 3, 1));
        assert_eq!(p(8192, 10240, 5120), (ScheduleKind::Persistent, (256, 128), 3, 1));
        assert_eq!(p(2048, 5120, 25600), (ScheduleKind::Persistent, (128, 128), 5, 1));
        // Not a 128 x 128 split tail at M <= 256 (160×10240×5120 measured 17 % slower, session 24).
        assert_eq!(p(160, 10240, 5120), (ScheduleKind::Persistent, (256, 128), 3, 1));
        // Splits measured best on H200 (sweep of 2026-11-30, docs/KERNELS.md).
        assert_eq!(c(1, 4096, 4096).split_k, 2);
        assert_eq!(c(16, 4096, 4096).split_k, 2);
        assert_eq!(c(16, 5120, 8192).split_k, 3);
        assert_eq!(c(16, 5120, 25600).split_k, 3);
        // One partial wave of 8-token tiles (160 over 132 SMs): a 2-CTA cluster sum.
        assert_eq!(c(1, 10240, 5120).split_k, 2);
        assert_eq!(c(8, 10240, 5120).split_k, 2);
        assert_eq!(kind(9, 10240, 5120), ScheduleKind::SwapAbStreamK); // 9-16 tokens: stream-K (below)
        assert_eq!(c(1, 10240, 2048).split_k, 1); // kb 16: too short to split
        assert_eq!(c(1, 16896, 5120).split_k, 1); // 264 tiles = 2·S
        assert_eq!(c(1, 5120, 8192).split_k, 4); // 320 CTAs: three per SM, one wave
        assert_eq!(c(1, 5120, 25600).split_k, 4);
        assert_eq!(c(8, 4096, 16384).split_k, 6); // 384 CTAs
        assert_eq!(c(1, 1024, 1024).split_k, 2); // swap_split's pick where it is larger
        assert_eq!(c(1, 51200, 5120).split_k, 1);
        assert_eq!(c(32, 4096, 4096).split_k, 2);
        // 17-64 at N = 4096: 64 x 64 tiles, split 2 (128 CTAs); not when that is > 1 wave
        // (N = 5120) or < half of one (N = 2048), nor below 8 K blocks.
        assert_eq!((tile(33, 4096, 4096), c(33, 4096, 4096).split_k), ((64, 64), 2));
        assert_eq!((tile(64, 4096, 4096), c(64, 4096, 4096).stages), ((64, 64), 8));
        assert_eq!(tile(32, 4096, 4096), (64, 64));
        assert_eq!((tile(65, 4096, 4096), c(65, 4096, 4096).split_k), ((64, 128), 2));
        assert_eq!(kind(96, 5120, 4096), ScheduleKind::WarpSpecialized);
        assert_eq!(tile(64, 5120, 8192), (64, 128));
        assert_eq!(tile(64, 2048, 4096), (64, 128));
        assert_eq!(tile(64, 4096, 512), (64, 128));
        assert_eq!(c(32, 5120, 8192).split_k, 3);
        // Swap-AB 32 x 64 at M = 17-32 from one wave of 64-row weight tiles (N >= 8448 on 132
        // SMs; sessions 13 and 26); 3-way workspace splits stay at M = 33-64.
        // From three waves of tiles (N >= 25344) in stream-K, three CTAs per SM of 5 stages
        // (sessions 34 and 37).
        for (m, n) in [(32, 16384), (24, 12672), (32, 10240), (17, 8448), (32, 25280)] {
            assert_eq!((kind(m, n, 5120), tile(m, n, 5120), c(m, n, 5120).split_k), (ScheduleKind::SwapAb, (32, 64), 1), "{m}x{n}");
        }
        for (m, n) in [(17, 51200), (32, 51200), (24, 25344)] {
            assert_eq!((kind(m, n, 5120), tile(m, n, 5120), c(m, n, 5120).stages, c(m, n, 5120).split_k), (ScheduleKind::SwapAbStreamK, (32, 64), 5, 3), "{m}x{n}");
        }
        assert_eq!((kind(32, 8384, 5120), tile(32, 8384, 5120)), (ScheduleKind::SmallM, (64, 128)));
        assert_eq!(kind(33, 10240, 5120), ScheduleKind::SmallM);
        // 9-16 tokens from three waves of 64-row tiles (N >= 25344) with >= 32 K blocks:
        // stream-K, 8 stages, two CTAs per SM; from three waves with a shorter K, or from one
        // wave (N >= 8448) with >= 32 K blocks: 7 stages, three per SM; fewer tiles, a shorter K
        // below three waves, or 1-8 tokens: one tile (or K split) per CTA, 8 stages.
        let sk = |m, n, k| (kind(m, n, k), tile(m, n, k), c(m, n, k).stages, c(m, n, k).split_k);
        assert_eq!(sk(16, 51200, 5120), (ScheduleKind::SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(sk(9, 25344, 5120), (ScheduleKind::SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(sk(9, 25344, 2048), (ScheduleKind::SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(sk(16, 51200, 3968), (ScheduleKind::SwapAbStreamK, (16, 64), 7, 3)); // 31 K blocks
        assert_eq!(sk(16, 51200, 4096), (ScheduleKind::SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(sk(16, 25280, 5120), (ScheduleKind::SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(sk(9, 10240, 5120), (ScheduleKind::SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(sk(16, 8448, 4096), (ScheduleKind::SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(sk(16, 10240, 3968), (ScheduleKind::SwapAb, (16, 64), 8, 1)); // 31 K blocks
        assert_eq!(sk(16, 8384, 5120), (ScheduleKind::SwapAb, (16, 64), 8, 1)); // 131 tiles
        assert_eq!(sk(16, 5120, 8192), (ScheduleKind::SwapAb, (16, 64), 8, 3));
        assert_eq!(sk(8, 51200, 5120), (ScheduleKind::SwapAb, (8, 64), 8, 1));
        assert_eq!(sk(8, 10240, 5120), (ScheduleKind::SwapAb, (8, 64), 8, 2));
        assert_eq!(tile(33, 51200, 5120), (64, 128));
        // Down at 25-32 tokens: swap-AB 32 x 64 in 3 K ranges; not at 24 tokens, nor with K = 8192.
        assert_eq!((kind(32, 5120, 25600), tile(32, 5120, 25600), c(32, 5120, 25600).split_k), (ScheduleKind::SwapAb, (32, 64), 3));
        assert_eq!((kind(25, 5120, 25600), c(25, 5120, 25600).split_k), (ScheduleKind::SwapAb, 3));
        assert_eq!((tile(24, 5120, 25600), c(24, 5120, 25600).split_k), ((64, 128), 3));
        assert_eq!((tile(32, 5120, 8192), tile(32, 5120, 16256)), ((64, 128), (64, 128)));
        assert_eq!((kind(32, 5120, 16384), c(32, 5120, 16384).split_k), (ScheduleKind::SwapAb, 3));
        assert_eq!(kind(32, 4224, 25600), ScheduleKind::SmallM); // 66 tiles = S/2: the 64 x 64 cluster pair
        assert_eq!(c(64, 5120, 25600).split_k, 3);
        assert_eq!(c(64, 5120, 8192).split_k, 3);
        assert_eq!(c(64, 10240, 5120).split_k, 1);
        assert_eq!(c(128, 4096, 4096).split_k, 2);
        // The 64 x 128 tile: 8 stages (overlapped loop) at split 1-2, 6 (N halves) at >= 3.
        assert_eq!((tile(128, 4096, 4096), c(128, 4096, 4096).stages), ((64, 128), 8));
        assert_eq!((tile(192, 4096, 4096), c(192, 4096, 4096).split_k, c(192, 4096, 4096).stages), ((64, 128), 1, 8));
        assert_eq!((tile(64, 10240, 5120), c(64, 10240, 5120).stages), ((64, 128), 8));
        assert_eq!((tile(64, 5120, 8192), c(64, 5120, 8192).stages), ((64, 128), 6));
        assert_eq!((c(48, 5120, 25600).split_k, c(48, 5120, 25600).stages), (3, 6));
        assert_eq!(c(128, 5120, 8192).split_k, 3);
        assert_eq!(c(160, 4096, 4096).split_k, 1);
        assert_eq!(c(4096, 4096, 4096).split_k, 1);
        // Short K is never split below 4 K blocks per split; at most 8 splits; one wave.
        assert_eq!(c(1, 128, 256).split_k, 1);
        for m in [1, 16, 17, 64, 65, 128, 200] {
            for (n, k) in [(128, 128), (4096, 4096), (5120, 25600), (51200, 5120)] {
                let cf = c(m, n, k);
                assert!((1..=8).contains(&cf.split_k), "{m}x{n}x{k}: {cf:?}");
                assert!(cf.split_k == 1 || (k / 128) / cf.split_k as usize >= 4, "{m}x{n}x{k}: {cf:?}");
            }
        }
    }

    #[test]
    fn config_override_round_trips() {
        let cfg = choose_config(1, 4096, 4096, 132);
        let forced = GemmConfig { split_k: 6, ..cfg };
        set_config_override(Some(forced));
        assert_eq!(config_override(), Some(forced));
        set_config_override(None);
        assert_eq!(config_override(), None);
    }

    #[test]
    fn in_kernel_quantization_covers_exactly_the_8_token_tile() {
        // Every decode-size shape (M <= 8) gets the tile compiled with in-kernel quantization,
        // whatever its K split; no larger M does (its tile has no such variant).
        let shapes = [(4096, 4096), (10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600), (272, 2048), (128, 128)];
        for (n, k) in shapes {
            for m in 1..=8 {
                let c = choose_config(m, n, k, 132);
                assert!(quantizes_in_kernel(&c), "m={m} n={n} k={k}: {c:?}");
            }
            for m in [9, 16, 17, 32, 64, 128, 129, 4096] {
                let c = choose_config(m, n, k, 132);
                assert!(!quantizes_in_kernel(&c), "m={m} n={n} k={k}: {c:?}");
            }
        }
        let tile = choose_config(1, 4096, 4096, 132);
        assert!(quantizes_in_kernel(&GemmConfig { stages: 6, ..tile }), "the kernel's ring depth is its own");
        assert!(!quantizes_in_kernel(&GemmConfig { block_n: 128, ..tile }), "nor another weight tile");
        assert!(!quantizes_in_kernel(&GemmConfig { block_m: 16, ..tile }), "nor the 16-token tile");
    }

    #[test]
    fn every_m_gets_a_known_schedule() {
        for m in [1, 8, 9, 16, 64, 65, 128, 129, 256, 257, 4096, 8192] {
            let c = choose_config(m, 4096, 4096, 132);
            assert!(c.schedule().is_some(), "m={m}: {c:?}");
            assert!(c.split_k >= 1 && c.stages >= 2 && c.block_n % 8 == 0, "m={m}: {c:?}");
        }
    }
}
