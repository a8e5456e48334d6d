#![no_main]
//! A whole checkpoint directory (config.json + memory-mapped model.safetensors) through
//! `Checkpoint::open`, tensor loading and `Fp8BlockLinear` (see `logic::checkpoint_open`).
mod logic;

use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // One directory per fuzzing process, on tmpfs when there is one.
        let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
        let d = PathBuf::from(base).join(format!("candle-fp8-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create the fuzz checkpoint directory");
        d
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| logic::checkpoint_open(data, dir()));
