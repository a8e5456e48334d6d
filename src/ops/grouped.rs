//! Grouped blocked-FP8 GEMMs for mixture-of-experts layers: one op over the tokens of every
//! expert, each expert multiplying its own rows by its own `[N, K]` weight.
//!
//! - [`fp8_grouped_matmul_contiguous`] (prefill): the tokens of all experts in one `[Σ M_e, K]`
//!   operand, sorted by expert, with the per-expert row counts on the host.
//! - [`fp8_grouped_matmul_masked`] (decode): `[E, max_m, K]` with the per-expert counts in a u32
//!   tensor on the operands' device (a CUDA graph can replay it with new counts).
//!
//! Both take the weights stacked as e4m3 `[E, N, K]` with f32 scales `[E, ceil(N/128),
//! ceil(K/128)]` and compute each expert's rows exactly as [`fp8_block_matmul`] does (the same
//! two-level f32 accumulation, bf16 out). On the CPU each expert runs the CPU blocked GEMM. On
//! CUDA, when our kernels run the shape (sm_90, `N % 128 == 0`; `grouped_kernel.rs`), either
//! layout is one launch of the grouped kernel over every expert (the masked layout's counts kept
//! on the device, the contiguous layout's copied there); otherwise each active expert runs the
//! dense GEMM on narrowed views of the operands (the masked layout then reads the counts on the
//! host).

use super::matmul::fp8_block_matmul_with;
use super::validate::{check_dtype, dims2};
use crate::cpu::cpu_blocked_gemm;
use crate::dispatch::Fp8Options;
use crate::format::{act_scale_m_stride, act_scales_view, num_blocks, weight_scale_shape, F8E4M3};
use crate::quant::quantize_activation;
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};
use half::bf16;
use rayon::prelude::*;

#[cfg(doc)]
use super::matmul::fp8_block_matmul;

/// Validated sizes of a grouped GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GroupedShape {
    /// Experts.
    e: usize,
    /// Output features of every expert.
    n: usize,
    /// Input features.
    k: usize,
}

fn dims3(name: &str, t: &Tensor, what: &str) -> Result<(usize, usize, usize)> {
    match t.dims() {
        &[a, b, c] => Ok((a, b, c)),
        d => bail!("{name}: expected a rank-3 tensor {what}, got shape {d:?}"),
    }
}

fn check_contiguous(name: &str, t: &Tensor, what: &str) -> Result<()> {
    if !t.is_contiguous() {
        bail!("{name}: must be row-major contiguous {what} {:?}, got strides {:?}", t.dims(), t.stride())
    }
    Ok(())
}

fn check_device(name: &str, t: &Tensor, qa: &Tensor) -> Result<()> {
    if !t.device().same_device(qa.device()) {
        bail!("{name}: on device {:?} but qa is on {:?}", t.device().location(), qa.device().location())
    }
    Ok(())
}

/// Checks the stacked weights against `k` (the activation's K) and returns `(E, N)`.
fn validate_weights(w: &Tensor, sw: &Tensor, qa: &Tensor, k: usize) -> Result<(usize, usize)> {
    check_dtype("w", w, DType::F8E4M3)?;
    check_dtype("sw", sw, DType::F32)?;
    let (e, n, kw) = dims3("w", w, "[E, N, K]")?;
    if kw != k {
        bail!("K mismatch: qa has K = {k} (shape {:?}) but w is {:?} (K = {kw})", qa.dims(), w.dims())
    }
    check_contiguous("w", w, "[E, N, K]")?;
    let (nb, kb) = weight_scale_shape(n, k);
    if sw.dims() != [e, nb, kb] {
        bail!(
            "sw: shape {:?} does not match w [{e}, {n}, {k}]: expected [{e}, {nb}, {kb}] = \
             [E, ceil(N/128), ceil(K/128)]",
            sw.dims()
        )
    }
    check_contiguous("sw", sw, "[E, ceil(N/128), ceil(K/128)]")?;
    check_device("w", w, qa)?;
    check_device("sw", sw, qa)?;
    Ok((e, n))
}

/// Checks the contiguous layout's operands and the counts; returns the shape and the rows.
fn validate_contiguous(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<(GroupedShape, usize)> {
    check_dtype("qa", qa, DType::F8E4M3)?;
    check_dtype("sa", sa, DType::F32)?;
    let (rows, k) = dims2("qa", qa)?;
    if k == 0 {
        bail!("qa: K = 0 (shape [{rows}, 0]); the GEMM needs at least one K element")
    }
    check_contiguous("qa", qa, "[Σ M_e, K]")?;
    let kb = num_blocks(k);
    if sa.dims() != [rows, kb] {
        bail!(
            "sa: shape {:?} does not match qa [{rows}, {k}]: expected [{rows}, {kb}] = [Σ M_e, ceil(K/128)]",
            sa.dims()
        )
    }
    let st = sa.stride();
    let mpad = act_scale_m_stride(rows);
    if (rows > 1 && st[0] != 1) || (kb > 1 && st[1] != mpad) {
        bail!(
            "sa: must be MN-major with strides [1, {mpad}] (= [1, round_up(Σ M_e, 4)]), got strides {st:?}; \
             use candle_fp8::quantize_activation"
        )
    }
    check_device("sa", sa, qa)?;
    let (e, n) = validate_weights(w, sw, qa, k)?;
    if counts.len() != e {
        bail!("counts: {} entries but w holds {e} experts (w is {:?})", counts.len(), w.dims())
    }
    let total: usize = counts.iter().sum();
    if total > rows {
        bail!("counts: sum to {total} rows but qa has {rows} (counts {counts:?})")
    }
    Ok((GroupedShape { e, n, k }, rows))
}

/// Checks the masked layout's operands (not the counts' values); returns the shape and max_m.
fn validate_masked(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
) -> Result<(GroupedShape, usize)> {
    check_dtype("qa", qa, DType::F8E4M3)?;
    check_dtype("sa", sa, DType::F32)?;
    check_dtype("counts", counts, DType::U32)?;
    let (ea, max_m, k) = dims3("qa", qa, "[E, max_m, K]")?;
    if k == 0 {
        bail!("qa: K = 0 (shape {:?}); the GEMM needs at least one K element", qa.dims())
    }
    check_contiguous("qa", qa, "[E, max_m, K]")?;
    let kb = num_blocks(k);
    if sa.dims() != [ea, max_m, kb] {
        bail!(
            "sa: shape {:?} does not match qa [{ea}, {max_m}, {k}]: expected [{ea}, {max_m}, {kb}] = \
             [E, max_m, ceil(K/128)]",
            sa.dims()
        )
    }
    let st = sa.stride();
    let mpad = act_scale_m_stride(max_m);
    if (ea > 1 && st[0] != kb * mpad) || (max_m > 1 && st[1] != 1) || (kb > 1 && st[2] != mpad) {
        bail!(
            "sa: must be MN-major per expert with strides [{}, 1, {mpad}] (= [ceil(K/128) · round_up(max_m, 4), \
             1, round_up(max_m, 4)]), got strides {st:?}; use candle_fp8::ops::quantize_activation_masked",
            kb * mpad
        )
    }
    check_device("sa", sa, qa)?;
    let (e, n) = validate_weights(w, sw, qa, k)?;
    if ea != e {
        bail!("qa: {ea} experts (shape {:?}) but w holds {e} (shape {:?})", qa.dims(), w.dims())
    }
    if counts.dims() != [e] {
        bail!("counts: shape {:?}, expected [{e}] (one count per expert of w {:?})", counts.dims(), w.dims())
    }
    if e > 1 && counts.stride()[0] != 1 {
        bail!("counts: must be contiguous, got stride {:?}", counts.stride())
    }
    check_device("counts", counts, qa)?;
    Ok((GroupedShape { e, n, k }, max_m))
}

/// The contiguous operands checked as [`fp8_grouped_matmul_contiguous`] checks them; returns the
/// rows.
#[cfg(feature = "cuda")]
pub(super) fn validate_contiguous_shape(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<usize> {
    Ok(validate_contiguous(qa, sa, w, sw, counts)?.1)
}

/// The masked operands checked as [`fp8_grouped_matmul_masked`] checks them (not the counts'
/// values); returns `(E, max_m, K)`.
#[cfg(feature = "cuda")]
pub(super) fn validate_masked_shape(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
) -> Result<(usize, usize, usize)> {
    let (s, max_m) = validate_masked(qa, sa, w, sw, counts)?;
    Ok((s.e, max_m, s.k))
}

/// The scale slices of a CPU op: `sa` and `sw` from their tensors, start offsets applied.
fn cpu_scales<'a>(
    what: &str,
    sa: &'a candle_core::Storage,
    sa_l: &Layout,
    sw: &'a candle_core::Storage,
    sw_l: &Layout,
) -> Result<(&'a [f32], &'a [f32])> {
    let (candle_core::Storage::Cpu(sa), candle_core::Storage::Cpu(sw)) = (sa, sw) else {
        bail!("{what}: scales are not on the CPU while qa and w are")
    };
    Ok((&sa.as_slice::<f32>()?[sa_l.start_offset()..], &sw.as_slice::<f32>()?[sw_l.start_offset()..]))
}

/// The contiguous grouped GEMM; `qa` and `w` are the op's arguments, the rest travels here.
struct GroupedContiguous {
    sa: Tensor,
    sw: Tensor,
    counts: Vec<usize>,
    shape: GroupedShape,
    rows: usize,
}

impl CustomOp2 for GroupedContiguous {
    fn name(&self) -> &'static str {
        "fp8-grouped-matmul-contiguous"
    }

    fn cpu_fwd(&self, qa: &CpuStorage, qa_l: &Layout, w: &CpuStorage, w_l: &Layout) -> Result<(CpuStorage, Shape)> {
        let GroupedShape { n, k, .. } = self.shape;
        let (nb, kb) = weight_scale_shape(n, k);
        let qa = &qa.as_slice::<F8E4M3>()?[qa_l.start_offset()..];
        let w = &w.as_slice::<F8E4M3>()?[w_l.start_offset()..];
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (sa, sw) = cpu_scales(self.name(), &sa_st, sa_l, &sw_st, sw_l)?;
        let mpad = act_scale_m_stride(self.rows);
        let offsets: Vec<usize> = self
            .counts
            .iter()
            .scan(0, |off, &c| {
                *off += c;
                Some(*off - c)
            })
            .collect();
        // Experts in parallel; each expert's GEMM is the dense CPU kernel on its rows, so every
        // row gets the bits the dense op gives it.
        let parts: Vec<(usize, Vec<bf16>)> = (0..self.counts.len())
            .into_par_iter()
            .filter(|&x| self.counts[x] > 0)
            .map(|x| {
                let (off, m) = (offsets[x], self.counts[x]);
                (off, cpu_blocked_gemm(&qa[off * k..], &sa[off..], mpad, &w[x * n * k..], &sw[x * nb * kb..], m, n, k))
            })
            .collect();
        let mut y = vec![bf16::ZERO; self.rows * n];
        for (off, part) in parts {
            y[off * n..off * n + part.len()].copy_from_slice(&part);
        }
        Ok((CpuStorage::BF16(y), Shape::from((self.rows, n))))
    }
}

/// The masked grouped GEMM; `qa`, `w` and `counts` are the op's arguments (the counts stay on
/// their device), the scales travel here.
struct GroupedMasked {
    sa: Tensor,
    sw: Tensor,
    shape: GroupedShape,
    max_m: usize,
}

impl CustomOp3 for GroupedMasked {
    fn name(&self) -> &'static str {
        "fp8-grouped-matmul-masked"
    }

    fn cpu_fwd(
        &self,
        qa: &CpuStorage,
        qa_l: &Layout,
        w: &CpuStorage,
        w_l: &Layout,
        counts: &CpuStorage,
        counts_l: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let GroupedShape { e, n, k } = self.shape;
        let max_m = self.max_m;
        let (nb, kb) = weight_scale_shape(n, k);
        let counts = &counts.as_slice::<u32>()?[counts_l.start_offset()..][..e];
        check_masked_counts(counts, e, max_m, k)?;
        let qa = &qa.as_slice::<F8E4M3>()?[qa_l.start_offset()..];
        let w = &w.as_slice::<F8E4M3>()?[w_l.start_offset()..];
        let (sa_st, sa_l) = self.sa.storage_and_layout();
        let (sw_st, sw_l) = self.sw.storage_and_layout();
        let (sa, sw) = cpu_scales(self.name(), &sa_st, sa_l, &sw_st, sw_l)?;
        let mpad = act_scale_m_stride(max_m);
        let mut y = vec![bf16::ZERO; e * max_m * n];
        // Rows at or past an expert's count keep their zeros; their codes and scales are never read.
        y.par_chunks_mut((max_m * n).max(1)).zip(counts.par_iter()).enumerate().for_each(|(x, (out, &c))| {
            let m = c as usize;
            if m > 0 {
                let part = cpu_blocked_gemm(
                    &qa[x * max_m * k..],
                    &sa[x * kb * mpad..],
                    mpad,
                    &w[x * n * k..],
                    &sw[x * nb * kb..],
                    m,
                    n,
                    k,
                );
                out[..m * n].copy_from_slice(&part);
            }
        });
        Ok((CpuStorage::BF16(y), Shape::from((e, max_m, n))))
    }
}

fn check_masked_counts(counts: &[u32], e: usize, max_m: usize, k: usize) -> Result<()> {
    if let Some((i, c)) = counts.iter().enumerate().find(|(_, &c)| c as usize > max_m) {
        bail!("counts[{i}] = {c} exceeds max_m = {max_m} (qa is [{e}, {max_m}, {k}] = [E, max_m, K])")
    }
    Ok(())
}

/// Grouped blocked-FP8 GEMM over experts' tokens laid out contiguously (the prefill layout):
/// rows `[o_e, o_e + counts[e])` of `qa`, with `o_e = Σ_{j<e} counts[j]`, are multiplied by
/// expert `e`'s weight: `y[o_e..o_e + counts[e]] = fp8_block_matmul(qa[o_e..o_e + counts[e]],
/// sa[o_e..o_e + counts[e]], w[e], sw[e])`.
///
/// - `qa`: e4m3 `[Σ M_e, K]`, row-major, the tokens sorted by expert.
/// - `sa`: f32 `[Σ M_e, ceil(K/128)]` with strides `(1, round_up(Σ M_e, 4))` (MN-major: what
///   [`crate::quantize_activation`] returns for the whole `[Σ M_e, K]` activation).
/// - `w`: e4m3 `[E, N, K]`, row-major (expert `e`'s `[N, K]` weight at `w[e]`).
/// - `sw`: f32 `[E, ceil(N/128), ceil(K/128)]`, row-major.
/// - `counts`: the `E` per-expert row counts, on the host; zeros are allowed.
///
/// Returns bf16 `[Σ M_e, N]`. `counts` may sum to fewer rows than `qa` has (a padded buffer):
/// rows at or past the sum are written as zeros. Errors name the argument and the value: counts
/// summing past the rows, a count list not of `E` entries, a `K`, dtype, scale shape or layout
/// off the contract.
///
/// Each expert's rows equal the dense [`fp8_block_matmul`] of those rows with its weight. On the
/// CPU the op runs the CPU kernel per expert (bit-identical to the dense op). On CUDA, when the
/// provider chosen as for [`fp8_block_matmul`] (`CANDLE_FP8_BACKEND`;
/// [`fp8_grouped_matmul_contiguous_with`] takes explicit options) is ours and `N % 128 == 0`,
/// one launch of the grouped kernel runs every expert (the counts copied to the device on
/// every call from a temporary host buffer: not for CUDA-graph capture, which would replay the
/// copy from freed memory — the masked op is the graph-friendly one); otherwise the dense GEMM
/// runs per expert with at least one row, on narrowed views.
pub fn fp8_grouped_matmul_contiguous(
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<Tensor> {
    fp8_grouped_matmul_contiguous_with(&Fp8Options::from_env()?, qa, sa, w, sw, counts)
}

/// [`fp8_grouped_matmul_contiguous`] with explicit options instead of the environment.
pub fn fp8_grouped_matmul_contiguous_with(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
) -> Result<Tensor> {
    let (shape, rows) = validate_contiguous(qa, sa, w, sw, counts)?;
    if rows == 0 || shape.n == 0 {
        return Tensor::zeros((rows, shape.n), DType::BF16, qa.device());
    }
    #[cfg(feature = "cuda")]
    if qa.device().is_cuda() {
        use super::grouped_kernel::{contiguous_on_kernel, grouped_kernel_applies};
        if grouped_kernel_applies(opts, qa, shape.n, shape.k)? {
            return contiguous_on_kernel(qa, sa, w, sw, counts, rows);
        }
        return per_expert_contiguous(opts, qa, sa, w, sw, counts, rows);
    }
    check_cpu_backend(opts, qa, shape)?;
    qa.apply_op2_no_bwd(w, &GroupedContiguous { sa: sa.clone(), sw: sw.clone(), counts: counts.to_vec(), shape, rows })
}

/// Grouped blocked-FP8 GEMM over a fixed `[E, max_m, K]` block of tokens per expert (the decode
/// layout, CUDA-graph friendly: the shapes do not depend on the routing): expert `e`'s first
/// `counts[e]` rows are multiplied by its weight: `y[e, ..counts[e]] = fp8_block_matmul(qa[e,
/// ..counts[e]], sa[e, ..counts[e]], w[e], sw[e])`.
///
/// - `qa`: e4m3 `[E, max_m, K]`, row-major.
/// - `sa`: f32 `[E, max_m, ceil(K/128)]` with strides `(ceil(K/128) · round_up(max_m, 4), 1,
///   round_up(max_m, 4))`: each expert's scales are the MN-major layout of a `max_m`-row
///   activation ([`quantize_activation_masked`], [`masked_act_scales_view`]).
/// - `w`: e4m3 `[E, N, K]`, row-major; `sw`: f32 `[E, ceil(N/128), ceil(K/128)]`, row-major.
/// - `counts`: u32 `[E]` on the operands' device, each at most `max_m`.
///
/// Returns bf16 `[E, max_m, N]`. **Rows at or past `counts[e]` are written as zeros**, whatever
/// `qa` and `sa` hold there (their codes and scales are never read). The op's contract does not
/// read the counts on the host: the CPU path reads them where they live, and a count past
/// `max_m` is an error naming the expert and the value. On CUDA, when the provider chosen as for
/// [`fp8_block_matmul`] is ours and `N % 128 == 0`, one launch of the grouped kernel runs every
/// expert and reads the counts on the device only (no host copy: a CUDA graph can capture the
/// call and replay it with new counts); it cannot report a count past `max_m` and **takes such a
/// count as `max_m`**. Otherwise the op runs the dense GEMM per expert with at least one row,
/// which reads the counts on the host (one device-to-host copy per call; no CUDA-graph capture
/// there) and refuses a count past `max_m` as the CPU does. Other errors name the argument and
/// the value: expert counts that differ between `qa`, `w`, `sw` and `counts`, a `K`, dtype,
/// scale shape or layout off the contract.
pub fn fp8_grouped_matmul_masked(qa: &Tensor, sa: &Tensor, w: &Tensor, sw: &Tensor, counts: &Tensor) -> Result<Tensor> {
    fp8_grouped_matmul_masked_with(&Fp8Options::from_env()?, qa, sa, w, sw, counts)
}

/// [`fp8_grouped_matmul_masked`] with explicit options instead of the environment.
pub fn fp8_grouped_matmul_masked_with(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
) -> Result<Tensor> {
    let (shape, max_m) = validate_masked(qa, sa, w, sw, counts)?;
    let GroupedShape { e, n, .. } = shape;
    #[cfg(feature = "cuda")]
    if qa.device().is_cuda() {
        if e * max_m * n > 0 && super::grouped_kernel::grouped_kernel_applies(opts, qa, n, shape.k)? {
            return super::grouped_kernel::masked_on_kernel(qa, sa, w, sw, counts, e, max_m, n, shape.k);
        }
        return per_expert_masked(opts, qa, sa, w, sw, counts, max_m);
    }
    check_cpu_backend(opts, qa, shape)?;
    if e * max_m * n == 0 {
        let c = counts.to_vec1::<u32>()?;
        check_masked_counts(&c, e, max_m, shape.k)?;
        return Tensor::zeros((e, max_m, n), DType::BF16, qa.device());
    }
    qa.apply_op3_no_bwd(w, counts, &GroupedMasked { sa: sa.clone(), sw: sw.clone(), shape, max_m })
}

/// The error the dense op gives for a backend that cannot run on this device.
fn check_cpu_backend(opts: &Fp8Options, qa: &Tensor, s: GroupedShape) -> Result<()> {
    let caps = super::validate::device_caps(qa.device())?;
    crate::dispatch::choose_provider(opts.backend, &caps, 1, s.n, s.k)?;
    Ok(())
}

/// `[m, kb]` activation scales in any layout (e.g. rows narrowed out of a larger MN-major
/// buffer) as the MN-major `[m, kb]` view with strides `(1, round_up(m, 4))` the dense GEMM
/// takes, starting on a 16-byte boundary as its kernels require: a view when they already are,
/// else one f32 copy.
fn dense_act_scales(sa: &Tensor) -> Result<Tensor> {
    let (m, kb) = sa.dims2()?;
    let mpad = act_scale_m_stride(m);
    let st = sa.stride();
    // 4 floats: a narrowed view starting mid-vector (e.g. rows 2.. of a buffer whose padded
    // height equals this one's) would pass the stride test and reach the GEMM misaligned.
    let aligned = sa.layout().start_offset() % 4 == 0;
    if aligned && (m <= 1 || st[0] == 1) && (kb <= 1 || st[1] == mpad) {
        return Ok(sa.clone());
    }
    let cols = sa.t()?.contiguous()?.pad_with_zeros(1, 0, mpad - m)?;
    act_scales_view(cols.flatten_all()?, m, kb)
}

/// The contiguous op as one dense GEMM per expert with rows, on narrowed views; the rows past
/// the counts' sum are zeros.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
fn per_expert_contiguous(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &[usize],
    rows: usize,
) -> Result<Tensor> {
    let n = w.dim(1)?;
    let mut parts = Vec::new();
    let mut off = 0;
    for (x, &m) in counts.iter().enumerate() {
        if m > 0 {
            let sa_x = dense_act_scales(&sa.narrow(0, off, m)?)?;
            parts.push(fp8_block_matmul_with(opts, &qa.narrow(0, off, m)?, &sa_x, &w.get(x)?, &sw.get(x)?)?);
        }
        off += m;
    }
    if off < rows {
        parts.push(Tensor::zeros((rows - off, n), DType::BF16, qa.device())?);
    }
    Tensor::cat(&parts, 0)
}

/// The masked op as one dense GEMM per expert with rows, on narrowed views (reads the counts on
/// the host); each expert's block is padded to `max_m` rows with zeros.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
fn per_expert_masked(
    opts: &Fp8Options,
    qa: &Tensor,
    sa: &Tensor,
    w: &Tensor,
    sw: &Tensor,
    counts: &Tensor,
    max_m: usize,
) -> Result<Tensor> {
    let (e, n, k) = w.dims3()?;
    let counts = counts.to_vec1::<u32>()?;
    check_masked_counts(&counts, e, max_m, k)?;
    if e * max_m * n == 0 {
        return Tensor::zeros((e, max_m, n), DType::BF16, qa.device());
    }
    let blocks = counts
        .iter()
        .enumerate()
        .map(|(x, &c)| {
            let m = c as usize;
            if m == 0 {
                return Tensor::zeros((max_m, n), DType::BF16, qa.device());
            }
            let sa_x = dense_act_scales(&sa.get(x)?.narrow(0, 0, m)?)?;
            let y = fp8_block_matmul_with(opts, &qa.get(x)?.narrow(0, 0, m)?, &sa_x, &w.get(x)?, &sw.get(x)?)?;
            y.pad_with_zeros(0, 0, max_m - m)
        })
        .collect::<Result<Vec<_>>>()?;
    Tensor::stack(&blocks, 0)
}

/// Wraps a per-expert MN-major scale buffer (`E · ceil(K/128) · round_up(max_m, 4)` floats:
/// expert by expert, each the `kb × round_up(max_m, 4)` buffer of a `max_m`-row activation) as
/// the `[E, max_m, kb]` view [`fp8_grouped_matmul_masked`] takes.
pub fn masked_act_scales_view(buffer: Tensor, e: usize, max_m: usize, kb: usize) -> Result<Tensor> {
    let mpad = act_scale_m_stride(max_m);
    if buffer.elem_count() != e * kb * mpad {
        bail!(
            "masked activation scale buffer has {} elements, expected {e} × {kb} × {mpad} \
             (E × kb × round_up(max_m, 4))",
            buffer.elem_count()
        )
    }
    buffer.reshape((e, kb, mpad))?.narrow(2, 0, max_m)?.transpose(1, 2)
}

/// Quantizes the masked layout's activations `x` `[E, max_m, K]` (bf16, f16 or f32) per token
/// per 128 K-elements, as [`crate::quantize_activation`] does for each row: returns `qa` e4m3
/// `[E, max_m, K]` and `sa` f32 `[E, max_m, ceil(K/128)]` in the per-expert MN-major layout of
/// [`fp8_grouped_matmul_masked`]. Runs on `x`'s device.
pub fn quantize_activation_masked(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let (e, max_m, k) = match x.dims() {
        &[e, m, k] => (e, m, k),
        d => bail!("quantize_activation_masked: x must be rank 3 [E, max_m, K], got shape {d:?}"),
    };
    let kb = num_blocks(k);
    let mpad = act_scale_m_stride(max_m);
    if e * max_m == 0 {
        let (q, _) = quantize_activation(&x.reshape((0, k))?)?;
        let buf = Tensor::zeros(e * kb * mpad, DType::F32, x.device())?;
        return Ok((q.reshape((e, max_m, k))?, masked_act_scales_view(buf, e, max_m, kb)?));
    }
    let (q, sa) = quantize_activation(&x.reshape((e * max_m, k))?)?;
    // [E·max_m, kb] MN-major → per expert [kb, round_up(max_m, 4)].
    let cols = sa.t()?.reshape((kb, e, max_m))?.transpose(0, 1)?.pad_with_zeros(2, 0, mpad - max_m)?.contiguous()?;
    Ok((q.reshape((e, max_m, k))?, masked_act_scales_view(cols.flatten_all()?, e, max_m, kb)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;
    use candle_core::Device;

    fn codes(rng: &mut Rng, len: usize) -> Vec<F8E4M3> {
        (0..len).map(|_| crate::format::f32_to_e4m3(rng.normal() * 100.0)).collect()
    }

    fn bits(t: &Tensor) -> Vec<u16> {
        t.flatten_all().unwrap().to_vec1::<bf16>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    /// Rows 2..35 of a 35-row MN-major buffer have this view's padded height (36) and
    /// strides, but start mid-vector: they are copied to a 16-byte boundary, values kept.
    #[test]
    fn narrowed_scales_start_on_a_16_byte_boundary() -> Result<()> {
        let (rows, kb) = (35, 3);
        let mpad = act_scale_m_stride(rows);
        let buf: Vec<f32> = (0..kb * mpad).map(|i| i as f32).collect();
        let sa = act_scales_view(Tensor::from_vec(buf, kb * mpad, &Device::Cpu)?, rows, kb)?;
        let part = sa.narrow(0, 2, 33)?;
        assert_eq!((part.stride()[1], part.layout().start_offset()), (act_scale_m_stride(33), 2));
        let dense = dense_act_scales(&part)?;
        assert_eq!(dense.layout().start_offset() % 4, 0);
        assert_eq!(dense.stride(), &[1, act_scale_m_stride(33)]);
        assert_eq!(dense.to_vec2::<f32>()?, part.to_vec2::<f32>()?);
        Ok(())
    }

    /// The per-expert composition that runs on CUDA gives the CPU op's bits, for both layouts
    /// (zero-count experts, one-row experts, padded rows, ragged K and N).
    #[test]
    fn per_expert_fallback_equals_the_op() -> Result<()> {
        let dev = Device::Cpu;
        let (e, n, k) = (5, 200, 300);
        let mut rng = Rng::new(7);
        let (nb, kb) = weight_scale_shape(n, k);
        let w = Tensor::from_vec(codes(&mut rng, e * n * k), (e, n, k), &dev)?;
        let sw: Vec<f32> = (0..e * nb * kb).map(|_| rng.log_spaced(-10.0, -4.0)).collect();
        let sw = Tensor::from_vec(sw, (e, nb, kb), &dev)?;
        let counts = [3usize, 0, 1, 6, 0];
        let rows = 12;
        let x = Tensor::from_vec(rng.normal_vec(rows * k, 1.0), (rows, k), &dev)?;
        let (qa, sa) = quantize_activation(&x)?;
        let opts = Fp8Options::with_backend(crate::Backend::Auto);
        let op = fp8_grouped_matmul_contiguous_with(&opts, &qa, &sa, &w, &sw, &counts)?;
        let fb = per_expert_contiguous(&opts, &qa, &sa, &w, &sw, &counts, rows)?;
        assert_eq!(bits(&op), bits(&fb));
        let max_m = 6;
        let xm = Tensor::from_vec(rng.normal_vec(e * max_m * k, 1.0), (e, max_m, k), &dev)?;
        let (qm, sm) = quantize_activation_masked(&xm)?;
        let c = Tensor::new(&[3u32, 0, 1, 6, 5], &dev)?;
        let op = fp8_grouped_matmul_masked_with(&opts, &qm, &sm, &w, &sw, &c)?;
        let fb = per_expert_masked(&opts, &qm, &sm, &w, &sw, &c, max_m)?;
        assert_eq!(bits(&op), bits(&fb));
        Ok(())
    }
}
