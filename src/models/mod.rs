//! Models built on Fp8BlockLinear.
