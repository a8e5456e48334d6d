//! Which kernel computes a prompt's attention on CUDA sm_90 in bf16: the model option
//! ([`ModelOptions::prefill_attention`](crate::models::ModelOptions::prefill_attention)) and
//! the kernel API (`kernels::prefill_attention_with`) take the same choice.

/// A prefill attention kernel, or the rule that picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillKernel {
    /// The fastest that applies: [`PrefillKernel::Wgmma`] at head_dim 128, else
    /// [`PrefillKernel::MmaSync`].
    #[default]
    Auto,
    /// The mma.sync m16n8k16 kernel (64-token tiles, cp.async): head_dim 64 and 128.
    MmaSync,
    /// The warpgroup-MMA kernel (128-token tiles, TMA, a producer warpgroup): head_dim 128 only
    /// (an error at 64).
    Wgmma,
}

impl PrefillKernel {
    /// The kernel that runs at head_dim `d` (`Auto` resolved).
    pub fn resolve(self, d: usize) -> PrefillKernel {
        match self {
            PrefillKernel::Auto if d == 128 => PrefillKernel::Wgmma,
            PrefillKernel::Auto => PrefillKernel::MmaSync,
            k => k,
        }
    }
}

impl std::str::FromStr for PrefillKernel {
    type Err = String;

    /// `auto`, `mma-sync` (also `mma`), or `wgmma`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "mma-sync" | "mma_sync" | "mma" => Ok(Self::MmaSync),
            "wgmma" => Ok(Self::Wgmma),
            o => Err(format!("unknown prefill attention kernel {o:?} (expected auto, mma-sync or wgmma)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_by_head_dim_and_names_parse() {
        assert_eq!(PrefillKernel::Auto.resolve(128), PrefillKernel::Wgmma);
        assert_eq!(PrefillKernel::Auto.resolve(64), PrefillKernel::MmaSync);
        assert_eq!(PrefillKernel::MmaSync.resolve(128), PrefillKernel::MmaSync);
        assert_eq!("MMA".parse::<PrefillKernel>(), Ok(PrefillKernel::MmaSync));
        assert_eq!(" wgmma ".parse::<PrefillKernel>(), Ok(PrefillKernel::Wgmma));
        assert!("flash".parse::<PrefillKernel>().unwrap_err().contains("\"flash\""));
    }
}
