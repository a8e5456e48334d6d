//! Which of our kernel configurations runs a GEMM: the one schedule rule, a pure function of
//! the shape and the SM count, unit-tested on the CPU. The kernels take the configuration they
//! are given (`kernels/api.h`); nothing else chooses.
//!
//! The measurements behind each branch are in docs/perf.md ("Dispatch rule").

/// Schedule kinds of our kernels (`enum fp8gemm_kind` in `kernels/api.h`).
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
}

impl ScheduleKind {
    /// The kind of a C value, if known.
    pub fn from_raw(kind: i32) -> Option<Self> {
        Some(match kind {
            1 => Self::SmallM,
            2 => Self::SwapAb,
            3 => Self::WarpSpecialized,
            4 => Self::Persistent,
            5 => Self::SwapAbStreamK,
            _ => return None,
        })
    }

    /// Whether the kernel sums its K shares itself (persistent split tail, stream-K): its
    /// workspace starts with a page of flags that must be zero between launches, so it is kept
    /// apart from split-K partials.
    pub fn fixes_up_in_kernel(self) -> bool {
        matches!(self, Self::Persistent | Self::SwapAbStreamK)
    }
}

/// One kernel configuration (`fp8gemm_config` in `kernels/api.h`).
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
    /// K split (1 = none). [`ScheduleKind::Persistent`]: the K ranges of each tile of a partial
    /// last round (a split tail summed inside the kernel; no effect when the rounds are full).
    /// [`ScheduleKind::SwapAbStreamK`]: CTAs per SM.
    pub split_k: i32,
    /// SMs a persistent grid may use (0 = all).
    pub num_sms: i32,
}

impl GemmConfig {
    const fn new(kind: ScheduleKind, block_m: i32, block_n: i32, stages: i32, split_k: i32) -> Self {
        Self { kind: kind as i32, block_m, block_n, stages, split_k, num_sms: 0 }
    }

    /// The schedule kind, if `kind` is a known value.
    pub fn schedule(&self) -> Option<ScheduleKind> {
        ScheduleKind::from_raw(self.kind)
    }
}

/// Chooses our kernel configuration for an `m × n × k` GEMM on a GPU with `num_sms` SMs (0:
/// 132). `kb = ⌈K/128⌉`, `t64 = ⌈N/64⌉`, `t128 = ⌈N/128⌉`, `S` = SMs:
///
/// | M | schedule | tile (block_m × block_n × stages) | split |
/// |---|---|---|---|
/// | 9–16, t64 ≥ 3·S and kb ≥ 32 | swap-AB stream-K | 16 × 64 × 8 | 2 CTAs per SM |
/// | 9–16, t64 ≥ 3·S, or t64 ≥ S and kb ≥ 32 | swap-AB stream-K | 16 × 64 × 7 | 3 CTAs per SM |
/// | 1–16, other | swap-AB | 8 (M ≤ 8) or 16 × 64 × 8 | M ≤ 8: 2 if S ≤ t64 < 2·S and kb ≥ 32; none from S tiles; else the larger of [`swap_split`] and one wave of three CTAs per SM with ≥ 16 K blocks each. 9–16: [`swap_split`] below S tiles |
/// | 17–64, S/4 < t64 ≤ S/2, kb ≥ 8 | small-M | 64 × 64 × 8 | 2 (a 2-CTA cluster sums) |
/// | 17–32, t64 ≥ 3·S | swap-AB stream-K | 32 × 64 × 5 | 3 CTAs per SM |
/// | 17–32, S ≤ t64 < 3·S | swap-AB | 32 × 64 × 8 | none |
/// | 25–32, S/2 < t64 < S, kb ≥ 128 | swap-AB | 32 × 64 × 8 | one wave of two CTAs per SM, ≥ 16 K blocks each |
/// | 65–128, t128 ≥ 40 | warp-specialized 128 × 128 × 6, or persistent 128 × 128 × 5 with a split tail (≥ 3 K ranges, or a small last round) | | one wave, ≥ 16 K blocks per split |
/// | other 17–128 | small-M | 64 × 128 × 8 (split ≤ 2) or × 6 | one wave, ≥ 4 K blocks per split |
/// | 193–256 while ⌈M/64⌉·t128 ≤ S and 2·⌈M/128⌉·t128 ≤ S | persistent | 128 × 128 × 5 | split tail 2 |
/// | 129–256 while ⌈M/64⌉·t128 ≤ S | small-M | 64 × 128 × 8 or × 6 | one wave, ≥ 16 K blocks per split |
/// | > 256, other 129–256 | persistent, TMA-store epilogue | 256 × 128 × 3 if its rounds of tiles cost less (a 256-row tile does its work ~8 % more efficiently), else 128 × 128 × 5 | a split tail where [`tail_cost`] predicts ≥ 10 % saved (at M ≤ 256 only for the 256-row tile) |
pub fn choose_config(m: usize, n: usize, k: usize, num_sms: usize) -> GemmConfig {
    use ScheduleKind::*;
    let cfg = GemmConfig::new;
    let kb = k.div_ceil(128);
    let sms = if num_sms == 0 { 132 } else { num_sms };
    let (t64, t128, m64) = (n.div_ceil(64), n.div_ceil(128), m.div_ceil(64));
    if m <= 16 {
        // Decode sizes are bound by the weight stream: tiles of 64 weight rows with the tokens on
        // the wgmma N side; every SM must stream.
        if m > 8 && (t64 >= 3 * sms || (t64 >= sms && kb >= 32)) {
            // Several waves of tiles, or one wave with a long K: stream-K shares the (tile, K
            // block) units evenly instead of leaving a partial last wave. Two deeper CTAs per SM
            // where each CTA's share is long enough to fill the deeper ring.
            return if t64 >= 3 * sms && kb >= 32 {
                cfg(SwapAbStreamK, 16, 64, 8, 2)
            } else {
                cfg(SwapAbStreamK, 16, 64, 7, 3)
            };
        }
        let split = if m <= 8 && t64 >= sms && t64 < 2 * sms && kb >= 32 {
            // One partial wave: a 2-CTA cluster split spreads the CTAs of a launch that follows
            // another GEMM (under PDL they pack two or three per SM) without an extra launch.
            2
        } else if t64 >= sms {
            1
        } else if m <= 8 {
            // The 8-token tile runs three CTAs per SM: fill those slots in one wave.
            swap_split(t64, kb, sms).max(split_for(t64, kb, 3 * sms, 16))
        } else {
            swap_split(t64, kb, sms)
        };
        return cfg(SwapAb, if m <= 8 { 8 } else { 16 }, 64, 8, split);
    }
    if m <= 128 {
        if m <= 64 && 2 * t64 <= sms && 4 * t64 > sms && kb >= 8 {
            // Narrow N (4096): 64 × 64 tiles in 2-CTA cluster splits fill the SMs once.
            return cfg(SmallM, 64, 64, 8, 2);
        }
        if m <= 32 && t64 >= sms {
            // Wide N: 32-token swap-AB tiles stream the weights with less activation traffic
            // than 64 × 128 tiles; from three waves, stream-K with three CTAs per SM.
            return if t64 >= 3 * sms { cfg(SwapAbStreamK, 32, 64, 5, 3) } else { cfg(SwapAb, 32, 64, 8, 1) };
        }
        if m > 24 && m <= 32 && 2 * t64 > sms && kb >= 128 {
            // Half to one wave of tiles with a very long K (down): 32-token tiles split to at
            // most two CTAs per SM.
            return cfg(SwapAb, 32, 64, 8, split_for(t64, kb, 2 * sms, 16));
        }
        if m > 64 && t128 >= 40 {
            let split = split_for(t128, kb, sms, 16);
            if split >= 3 {
                // Three or more K ranges: the persistent tile's split tail sums them inside the
                // kernel instead of a workspace and a reduce launch.
                return cfg(Persistent, 128, 128, 5, split);
            }
            // Column tiles overflowing the SMs into a small last round: a split tail.
            if let Some(split) = tail_split(t128, t128.div_ceil(sms), sms, kb) {
                return cfg(Persistent, 128, 128, 5, split);
            }
            return cfg(WarpSpecialized, 128, 128, 6, split);
        }
        let split = split_for(m64 * t128, kb, sms, 4);
        return cfg(SmallM, 64, 128, small_m_128_stages(split), split);
    }
    if m <= 256 && m64 * t128 <= sms {
        if m > 192 && 2 * m.div_ceil(128) * t128 <= sms && kb >= 2 {
            // Four rows of 64 × 128 tiles: half as many 128 × 128 tiles in two K ranges each move
            // half the L2 bytes.
            return cfg(Persistent, 128, 128, 5, 2);
        }
        // One wave of 64 × 128 tiles.
        let split = split_for(m64 * t128, kb, sms, 16);
        return cfg(SmallM, 64, 128, small_m_128_stages(split), split);
    }
    // Persistent: compare the rounds of tiles over the SMs of the two tile sizes, weighting a
    // 256 × 128 tile (twice the work) at 200 and a 128 × 128 one at 108.
    let rounds = |block_m: usize| (m.div_ceil(block_m) * t128).div_ceil(sms);
    let (plain, plain_cost) = if rounds(256) * 200 < rounds(128) * 108 {
        (cfg(Persistent, 256, 128, 3, 1), rounds(256) * 200)
    } else {
        (cfg(Persistent, 128, 128, 5, 1), rounds(128) * 108)
    };
    // A split tail where the model predicts >= 10 % saved; at M <= 256 only the 256-row tile's
    // (128-row split tails measured slower there).
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
    match best {
        Some((block_m, num, den, split)) if 10 * num <= 9 * plain_cost * den => {
            cfg(Persistent, block_m, 128, if block_m == 256 { 3 } else { 5 }, split)
        }
        _ => plain,
    }
}

/// K split for the swap-AB decode tiles when they do not fill the SMs: minimises the busiest
/// SM's work in K blocks, `⌈tiles·s / SMs⌉ · (⌈kb / s⌉ + 4)` (4 ≈ a CTA's pipeline fill), plus 6
/// for s ≥ 3 (the reduce launch; 2 splits reduce inside a 2-CTA cluster); at most 8 splits, at
/// least 4 K blocks per split, ties to the smaller split.
fn swap_split(tiles: usize, kb: usize, sms: usize) -> i32 {
    let max_s = (kb / 4).clamp(1, 8);
    let cost = |s: usize| (tiles * s).div_ceil(sms) * (kb.div_ceil(s) + 4) + if s >= 3 { 6 } else { 0 };
    (1..=max_s).min_by_key(|&s| (cost(s), s)).unwrap_or(1) as i32
}

/// Largest K split (≤ 8) that keeps ≥ `min_kb` K blocks per split and at most `max_ctas` CTAs
/// in all (one wave: more CTAs than the SMs hold only add a tail); 1 when none does.
fn split_for(tiles: usize, kb: usize, max_ctas: usize, min_kb: usize) -> i32 {
    (2..=8usize).rev().find(|&s| kb >= min_kb * s && tiles * s <= max_ctas).unwrap_or(1) as i32
}

/// Ring depth of the small-M 64 × 128 tile: 8 stages at split 1–2 (the ring sets the pace of
/// long K loops), 6 from 3 splits (workspace partials; short K ranges take the N-halves loop).
fn small_m_128_stages(split: i32) -> i32 {
    if split >= 3 {
        6
    } else {
        8
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
/// into S = min(4, SMs / L, K blocks) K ranges (what the kernel's `persistent_tail` runs for a
/// requested split of 4). `None` where no split tail applies.
fn tail_cost(tiles: usize, sms: usize, kb: usize) -> Option<(usize, usize, i32)> {
    let (full, last) = (tiles / sms, tiles % sms);
    if full == 0 || last == 0 || 2 * last > sms {
        return None;
    }
    let split = 4.min(sms / last).min(kb);
    (split >= 2).then_some((full * split + 1, split, split as i32))
}

/// Every configuration [`choose_config`] can return, as (kind, block_m, block_n, stages): the
/// set the kernels must compile (a test compares it with the compiled list).
#[cfg(any(test, feature = "test-utils"))]
pub const DISPATCHED_CONFIGS: [(ScheduleKind, i32, i32, i32); 12] = [
    (ScheduleKind::SwapAb, 8, 64, 8),
    (ScheduleKind::SwapAb, 16, 64, 8),
    (ScheduleKind::SwapAb, 32, 64, 8),
    (ScheduleKind::SwapAbStreamK, 16, 64, 8),
    (ScheduleKind::SwapAbStreamK, 16, 64, 7),
    (ScheduleKind::SwapAbStreamK, 32, 64, 5),
    (ScheduleKind::SmallM, 64, 64, 8),
    (ScheduleKind::SmallM, 64, 128, 8),
    (ScheduleKind::SmallM, 64, 128, 6),
    (ScheduleKind::WarpSpecialized, 128, 128, 6),
    (ScheduleKind::Persistent, 256, 128, 3),
    (ScheduleKind::Persistent, 128, 128, 5),
];

#[cfg(feature = "test-utils")]
thread_local! {
    static CONFIG_OVERRIDE: std::cell::Cell<Option<GemmConfig>> = const { std::cell::Cell::new(None) };
}

/// The configuration forced on the calling thread ([`crate::testing::with_gemm_config`]).
#[cfg(all(feature = "cuda", feature = "test-utils"))]
pub(crate) fn config_override() -> Option<GemmConfig> {
    CONFIG_OVERRIDE.with(|c| c.get())
}

/// Sets or clears the calling thread's forced configuration; returns the previous one.
#[cfg(feature = "test-utils")]
pub(crate) fn set_config_override(cfg: Option<GemmConfig>) -> Option<GemmConfig> {
    CONFIG_OVERRIDE.with(|c| c.replace(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScheduleKind::*;

    fn c(m: usize, n: usize, k: usize) -> GemmConfig {
        choose_config(m, n, k, 132)
    }
    fn kind(m: usize, n: usize, k: usize) -> ScheduleKind {
        c(m, n, k).schedule().unwrap()
    }
    fn tile(m: usize, n: usize, k: usize) -> (i32, i32) {
        (c(m, n, k).block_m, c(m, n, k).block_n)
    }
    /// (kind, tile, stages, split)
    fn p(m: usize, n: usize, k: usize) -> (ScheduleKind, (i32, i32), i32, i32) {
        (kind(m, n, k), tile(m, n, k), c(m, n, k).stages, c(m, n, k).split_k)
    }

    #[test]
    fn schedules_at_the_m_boundaries() {
        assert_eq!(kind(1, 4096, 4096), SwapAb);
        assert_eq!(tile(8, 4096, 4096), (8, 64));
        assert_eq!(tile(9, 4096, 4096), (16, 64));
        assert_eq!(kind(16, 4096, 4096), SwapAb);
        assert_eq!((kind(17, 4096, 4096), tile(17, 4096, 4096)), (SmallM, (64, 64)));
        assert_eq!((kind(17, 5120, 8192), tile(17, 5120, 8192)), (SmallM, (64, 128)));
        assert_eq!((kind(128, 4096, 4096), tile(128, 4096, 4096)), (SmallM, (64, 128)));
        assert_eq!((kind(129, 4096, 4096), tile(129, 4096, 4096)), (SmallM, (64, 128)));
        assert_eq!(tile(192, 4096, 4096), (64, 128));
        assert_eq!(p(193, 4096, 4096), (Persistent, (128, 128), 5, 2));
        assert_eq!(p(256, 4096, 4096), (Persistent, (128, 128), 5, 2));
        assert_eq!(p(256, 4096, 128), (SmallM, (64, 128), 8, 1)); // one K block
        assert_eq!((kind(257, 4096, 4096), tile(257, 4096, 4096)), (Persistent, (128, 128)));
        assert_eq!(tile(512, 4096, 4096), (128, 128));
    }

    #[test]
    fn persistent_tiles_by_rounds_over_the_sms() {
        // One round of 256 × 128 beats two of 128 × 128; 3 coarse rounds lose to 5 fine ones.
        for (m, n, k) in
            [(1024, 4096, 4096), (2048, 4096, 4096), (8192, 4096, 4096), (2048, 10240, 5120), (2048, 25600, 5120)]
        {
            assert_eq!(tile(m, n, k), (256, 128), "{m}x{n}x{k}");
        }
        assert_eq!(tile(2048, 5120, 8192), (128, 128));
        assert_eq!(tile(2048, 5120, 25600), (128, 128));
        assert_eq!(c(2048, 4096, 4096).stages, 3);
        assert_eq!(c(512, 4096, 4096).stages, 5);
        // Split tails where the model saves >= 10 %, not below.
        assert_eq!(p(640, 4096, 4096), (Persistent, (128, 128), 5, 4));
        assert_eq!(p(768, 4096, 4096), (Persistent, (128, 128), 5, 2));
        assert_eq!(p(512, 5120, 25600), (Persistent, (128, 128), 5, 4));
        assert_eq!(p(640, 10240, 5120), (Persistent, (128, 128), 5, 4));
        assert_eq!(p(1024, 5120, 8192), (Persistent, (256, 128), 3, 4));
        assert_eq!(p(512, 10240, 5120), (Persistent, (256, 128), 3, 4));
        assert_eq!(p(512, 51200, 5120), (Persistent, (256, 128), 3, 4));
        assert_eq!(p(257, 51200, 5120), (Persistent, (128, 128), 5, 1));
        assert_eq!(p(1536, 4096, 4096), (Persistent, (128, 128), 5, 1));
        assert_eq!(p(1536, 10240, 5120), (Persistent, (256, 128), 3, 1));
        assert_eq!(p(8192, 10240, 5120), (Persistent, (256, 128), 3, 1));
        assert_eq!(p(2048, 5120, 25600), (Persistent, (128, 128), 5, 1));
        // At 129-256: the persistent tiles once 64 × 128 needs more than one wave; only the
        // 256-row tile takes a split tail there.
        assert_eq!(kind(192, 4096, 4096), SmallM);
        assert_eq!((kind(200, 10240, 5120), tile(200, 10240, 5120)), (Persistent, (256, 128)));
        assert_eq!(p(256, 51200, 5120), (Persistent, (256, 128), 3, 4));
        assert_eq!(p(160, 51200, 5120), (Persistent, (256, 128), 3, 4));
        assert_eq!((kind(256, 5120, 8192), tile(256, 5120, 8192)), (Persistent, (128, 128)));
        assert_eq!(kind(192, 5120, 25600), SmallM);
        assert_eq!(p(160, 10240, 5120), (Persistent, (256, 128), 3, 1));
    }

    #[test]
    fn mid_m_takes_n_into_account() {
        // Wide N at 65-128: 128 × 128 warp-specialized; narrow N: 64 × 128 small-M.
        assert_eq!((kind(128, 10240, 5120), tile(128, 10240, 5120)), (WarpSpecialized, (128, 128)));
        assert_eq!(p(65, 5120, 8192), (Persistent, (128, 128), 5, 3));
        assert_eq!(p(128, 5120, 25600), (Persistent, (128, 128), 5, 3));
        assert_eq!(p(128, 5120, 4096), (WarpSpecialized, (128, 128), 6, 2));
        assert_eq!(kind(64, 5120, 8192), SmallM);
        assert_eq!(p(128, 51200, 5120), (Persistent, (128, 128), 5, 4));
        assert_eq!(p(65, 51200, 5120), (Persistent, (128, 128), 5, 4));
        assert_eq!(p(128, 25600, 5120), (WarpSpecialized, (128, 128), 6, 1)); // last round > half full
        assert_eq!(kind(96, 5120, 4096), WarpSpecialized);
        // 17-64 at N = 4096: 64 × 64 tiles split 2 (128 CTAs); not for N = 5120 or 2048, nor
        // below 8 K blocks.
        assert_eq!((tile(33, 4096, 4096), c(33, 4096, 4096).split_k), ((64, 64), 2));
        assert_eq!((tile(64, 4096, 4096), c(64, 4096, 4096).stages), ((64, 64), 8));
        assert_eq!(tile(32, 4096, 4096), (64, 64));
        assert_eq!((tile(65, 4096, 4096), c(65, 4096, 4096).split_k), ((64, 128), 2));
        assert_eq!(tile(64, 5120, 8192), (64, 128));
        assert_eq!(tile(64, 2048, 4096), (64, 128));
        assert_eq!(tile(64, 4096, 512), (64, 128));
        // The 64 × 128 tile: 8 stages at split 1-2, 6 from 3 splits.
        assert_eq!((tile(128, 4096, 4096), c(128, 4096, 4096).stages), ((64, 128), 8));
        assert_eq!((tile(192, 4096, 4096), c(192, 4096, 4096).split_k, c(192, 4096, 4096).stages), ((64, 128), 1, 8));
        assert_eq!((tile(64, 10240, 5120), c(64, 10240, 5120).stages), ((64, 128), 8));
        assert_eq!((tile(64, 5120, 8192), c(64, 5120, 8192).stages), ((64, 128), 6));
        assert_eq!((c(48, 5120, 25600).split_k, c(48, 5120, 25600).stages), (3, 6));
        for (m, n, k, s) in [
            (32, 5120, 8192, 3),
            (64, 5120, 25600, 3),
            (64, 5120, 8192, 3),
            (64, 10240, 5120, 1),
            (128, 4096, 4096, 2),
            (128, 5120, 8192, 3),
            (160, 4096, 4096, 1),
            (4096, 4096, 4096, 1),
        ] {
            assert_eq!(c(m, n, k).split_k, s, "{m}x{n}x{k}");
        }
    }

    #[test]
    fn decode_sizes_stream_the_weights_over_every_sm() {
        let splits = [
            (1, 4096, 4096, 2),
            (16, 4096, 4096, 2),
            (16, 5120, 8192, 3),
            (16, 5120, 25600, 3),
            (1, 10240, 5120, 2), // one partial wave of 8-token tiles: a 2-CTA cluster sum
            (8, 10240, 5120, 2),
            (1, 10240, 2048, 1), // 16 K blocks: too short to split
            (1, 16896, 5120, 1), // 264 tiles = 2·S
            (1, 5120, 8192, 4),  // 320 CTAs: three per SM, one wave
            (1, 5120, 25600, 4),
            (8, 4096, 16384, 6),
            (1, 1024, 1024, 2), // swap_split's pick where it is larger
            (1, 51200, 5120, 1),
            (32, 4096, 4096, 2),
        ];
        for (m, n, k, s) in splits {
            assert_eq!(c(m, n, k).split_k, s, "{m}x{n}x{k}");
        }
        // 9-16 tokens: stream-K from three waves of tiles (8 stages, two per SM with >= 32 K
        // blocks) or one wave with >= 32 K blocks (7 stages, three per SM).
        assert_eq!(p(16, 51200, 5120), (SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(p(9, 25344, 5120), (SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(p(9, 25344, 2048), (SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(p(16, 51200, 3968), (SwapAbStreamK, (16, 64), 7, 3)); // 31 K blocks
        assert_eq!(p(16, 51200, 4096), (SwapAbStreamK, (16, 64), 8, 2));
        assert_eq!(p(16, 25280, 5120), (SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(p(9, 10240, 5120), (SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(p(16, 8448, 4096), (SwapAbStreamK, (16, 64), 7, 3));
        assert_eq!(p(16, 10240, 3968), (SwapAb, (16, 64), 8, 1)); // 31 K blocks
        assert_eq!(p(16, 8384, 5120), (SwapAb, (16, 64), 8, 1)); // 131 tiles
        assert_eq!(p(16, 5120, 8192), (SwapAb, (16, 64), 8, 3));
        assert_eq!(p(8, 51200, 5120), (SwapAb, (8, 64), 8, 1));
        assert_eq!(p(8, 10240, 5120), (SwapAb, (8, 64), 8, 2));
        // 17-32 tokens: swap-AB 32 × 64 from one wave of tiles, stream-K from three.
        for (m, n) in [(32, 16384), (24, 12672), (32, 10240), (17, 8448), (32, 25280)] {
            assert_eq!(p(m, n, 5120), (SwapAb, (32, 64), 8, 1), "{m}x{n}");
        }
        for (m, n) in [(17, 51200), (32, 51200), (24, 25344)] {
            assert_eq!(p(m, n, 5120), (SwapAbStreamK, (32, 64), 5, 3), "{m}x{n}");
        }
        assert_eq!((kind(32, 8384, 5120), tile(32, 8384, 5120)), (SmallM, (64, 128)));
        assert_eq!(kind(33, 10240, 5120), SmallM);
        assert_eq!(tile(33, 51200, 5120), (64, 128));
        // Down at 25-32 tokens: 32 × 64 in 3 K ranges; not at 24 tokens, nor with K = 8192.
        assert_eq!(p(32, 5120, 25600), (SwapAb, (32, 64), 8, 3));
        assert_eq!((kind(25, 5120, 25600), c(25, 5120, 25600).split_k), (SwapAb, 3));
        assert_eq!((tile(24, 5120, 25600), c(24, 5120, 25600).split_k), ((64, 128), 3));
        assert_eq!((tile(32, 5120, 8192), tile(32, 5120, 16256)), ((64, 128), (64, 128)));
        assert_eq!((kind(32, 5120, 16384), c(32, 5120, 16384).split_k), (SwapAb, 3));
        assert_eq!(kind(32, 4224, 25600), SmallM); // 66 tiles = S/2: the 64 × 64 cluster pair
    }

    #[test]
    fn splits_stay_in_range_and_keep_four_k_blocks() {
        assert_eq!(c(1, 128, 256).split_k, 1);
        for m in [1, 16, 17, 64, 65, 128, 200] {
            for (n, k) in [(128, 128), (4096, 4096), (5120, 25600), (51200, 5120)] {
                let cf = c(m, n, k);
                assert!((1..=8).contains(&cf.split_k), "{m}x{n}x{k}: {cf:?}");
                assert!(cf.split_k == 1 || (k / 128) / cf.split_k as usize >= 4, "{m}x{n}x{k}: {cf:?}");
            }
        }
    }

    /// Every configuration the rule returns, over a grid of shapes and SM counts, is one of
    /// [`DISPATCHED_CONFIGS`] (and the list has no entry the rule never returns on that grid).
    #[test]
    fn the_rule_returns_exactly_the_dispatched_configs() {
        let mut seen = std::collections::HashSet::new();
        let ms = [
            1, 2, 7, 8, 9, 12, 16, 17, 24, 25, 32, 33, 48, 64, 65, 96, 128, 129, 160, 192, 193, 200, 256, 257, 512,
            640, 1024, 2048, 8192,
        ];
        let nks = [
            (128, 128),
            (4096, 4096),
            (4096, 512),
            (2048, 4096),
            (4224, 25600),
            (5120, 8192),
            (5120, 25600),
            (10240, 5120),
            (25344, 2048),
            (51200, 5120),
            (51200, 3968),
            (16384, 4096),
        ];
        for sms in [78, 114, 132] {
            for &m in &ms {
                for &(n, k) in &nks {
                    let cfg = choose_config(m, n, k, sms);
                    let key = (cfg.schedule().expect("known kind"), cfg.block_m, cfg.block_n, cfg.stages);
                    assert!(DISPATCHED_CONFIGS.contains(&key), "{m}x{n}x{k} on {sms} SMs: {cfg:?}");
                    assert!(cfg.split_k >= 1 && cfg.block_n % 8 == 0, "{m}x{n}x{k}: {cfg:?}");
                    seen.insert(key);
                }
            }
        }
        for key in DISPATCHED_CONFIGS {
            assert!(seen.contains(&key), "{key:?} is listed but never chosen");
        }
    }
}
