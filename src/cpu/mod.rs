//! The `cpu` provider: the blocked-FP8 GEMM on the CPU.

mod gemm;

pub use gemm::cpu_blocked_gemm;
