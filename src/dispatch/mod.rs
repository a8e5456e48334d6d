//! Provider choice, the schedule rule of our kernels and the prefill attention kernel choice:
//! small pure functions, unit-tested on the CPU.

mod prefill;
mod provider;
// The schedule rule serves our kernels (and the tests that force one of their configurations).
#[cfg(any(feature = "cuda", feature = "test-utils"))]
mod schedule;

pub use prefill::PrefillKernel;
pub use provider::{choose_provider, Backend, DeviceCaps, Fp8Options, Provider, BACKEND_ENV};
#[cfg(all(feature = "cuda", feature = "test-utils"))]
pub(crate) use schedule::config_override;
#[cfg(feature = "test-utils")]
pub(crate) use schedule::set_config_override;
#[cfg(feature = "test-utils")]
pub use schedule::DISPATCHED_CONFIGS;
#[cfg(any(feature = "cuda", feature = "test-utils"))]
pub use schedule::{choose_config, GemmConfig, ScheduleKind};
