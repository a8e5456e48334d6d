//! CUDA providers (in progress).
