//! Build script.
//!
//! Without the `cuda` feature this does nothing (the crate is pure Rust on the CPU).
//!
//! With `cuda`, every `.cu` file of the kernel families (`kernels/<family>/*.cu`: gemm, fused,
//! attention, sampling) is compiled by nvcc for sm_90a (in parallel) into a static library
//! `libfp8gemm_kernels.a`, linked together with the static CUDA runtime. Headers live in
//! `kernels/include/` and are not compiled on their own. `kernels/dequant/dequant.cu` (the
//! portable helper kernels of the dequant provider) is compiled to PTX for compute_80 instead,
//! `OUT_DIR/candle_fp8_dequant.ptx`, which the crate embeds. `kernels/trace/` (the timeline
//! trace reader) is compiled only with the `trace` feature, which also defines `FP8GEMM_TRACE`
//! for every kernel source (the per-CTA timeline trace, kernels/include/fp8gemm/common/trace.cuh).
//! Any change under `kernels/` (a new file included) rebuilds it. When no kernel source exists,
//! the crate still builds (cfg `fp8gemm_kernels` is unset and the Hopper provider reports
//! "this build has no Hopper kernels").
//!
//! Environment:
//! - `NVCC` (path to nvcc), else `$CUDA_HOME/bin/nvcc`, else `nvcc` on `PATH`;
//!   `scripts/install_cuda.sh` installs the pinned CUDA 13.0 toolchain and prints the env.
//! - `CUDA_HOME` / `CUDA_PATH`: where `lib/libcudart_static.a` lives (default: nvcc's parent).
//! - `NVCC_CCBIN`: host compiler for nvcc.
//! - `CANDLE_FP8_NVCC_FLAGS`: extra nvcc flags, space separated (e.g. `-Xptxas -v`).
//! - `CANDLE_FP8_NVCC_JOBS`: parallel nvcc processes (default: available cores).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(fp8gemm_kernels)");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    for var in ["NVCC", "CUDA_HOME", "CUDA_PATH", "NVCC_CCBIN", "CANDLE_FP8_NVCC_FLAGS", "CANDLE_FP8_NVCC_JOBS"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if let Err(e) = build_kernels() {
        eprintln!("\nerror: candle-fp8 (feature `cuda`): {e}\n");
        std::process::exit(1);
    }
}

/// Every file below `dir` (sorted), so that cargo reruns when any of them changes.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn find_nvcc() -> Result<PathBuf, String> {
    if let Some(p) = env::var_os("NVCC") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(format!("NVCC={} does not exist", p.display()));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = env::var_os(var) {
            let p = PathBuf::from(h).join("bin").join("nvcc");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            let p = dir.join("nvcc");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err("nvcc not found (looked at $NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin and $PATH). \
         Install the pinned CUDA 13.0 compiler with `bash scripts/install_cuda.sh` and export \
         the environment it prints (or `eval \"$(bash scripts/install_cuda.sh --env)\"`)."
        .into())
}

fn cuda_home(nvcc: &Path) -> PathBuf {
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = env::var_os(var) {
            return PathBuf::from(h);
        }
    }
    // <home>/bin/nvcc
    nvcc.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default()
}

fn build_kernels() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let kernels = manifest.join("kernels");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());

    // Rebuild on any change under kernels/ (headers included), and on new files.
    let mut files = Vec::new();
    walk(&kernels, &mut files);
    println!("cargo::rerun-if-changed={}", kernels.display());
    for f in &files {
        println!("cargo::rerun-if-changed={}", f.display());
    }
    // Kernel sources: the .cu files of the family folders (kernels/<family>/), not the headers
    // in kernels/include/, not the PTX helpers in kernels/dequant/, and kernels/trace/ only in
    // trace builds.
    let trace = env::var_os("CARGO_FEATURE_TRACE").is_some();
    let family_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(&kernels).ok()?;
        let mut parts = rel.components();
        let family = parts.next()?.as_os_str().to_str()?.to_string();
        parts.next()?; // a file inside a family folder, not kernels/<file>
        Some(family)
    };
    let sources: Vec<PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .filter(|p| match family_of(p).as_deref() {
            None | Some("include") | Some("dequant") => false,
            Some("trace") => trace,
            Some(_) => true,
        })
        .cloned()
        .collect();
    // One object per source, named after its path below kernels/ (gemm/quant.cu: gemm_quant.o).
    let object_of = |src: &Path| -> PathBuf {
        let rel = src.strip_prefix(&kernels).unwrap_or(src).with_extension("o");
        let name: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        PathBuf::from(name.join("_"))
    };
    let nvcc = find_nvcc()?;
    let home = cuda_home(&nvcc);
    let cudart = ["lib", "lib64", "targets/x86_64-linux/lib"]
        .iter()
        .map(|d| home.join(d))
        .find(|d| d.join("libcudart_static.a").is_file())
        .ok_or_else(|| {
            format!(
                "libcudart_static.a not found under {} (lib, lib64); set CUDA_HOME, or run \
                 `bash scripts/install_cuda.sh`",
                home.display()
            )
        })?;
    // Also lets candle-kernels' `-lcudart` resolve against the same toolkit.
    println!("cargo::rustc-link-search=native={}", cudart.display());

    // The portable helper kernels of the dequant provider: PTX for compute_80, loaded at run
    // time (src/cuda/mod.rs embeds it).
    let helper = kernels.join("dequant").join("dequant.cu");
    let ptx = out_dir.join("candle_fp8_dequant.ptx");
    let mut cmd = Command::new(&nvcc);
    cmd.args(["-ptx", "-arch=compute_80", "-O3", "-std=c++17"]).arg(&helper).arg("-o").arg(&ptx);
    if let Ok(ccbin) = env::var("NVCC_CCBIN") {
        cmd.arg(format!("-ccbin={ccbin}"));
    }
    let o = cmd.output().map_err(|e| format!("cannot run {}: {e}", nvcc.display()))?;
    if !o.status.success() {
        return Err(format!(
            "nvcc failed on {}:\n{}{}",
            helper.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    if sources.is_empty() {
        println!("cargo::warning=candle-fp8: no kernel sources under kernels/; building without the Hopper kernels");
        return Ok(());
    }
    let mut flags: Vec<String> = [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-O3",
        "-std=c++17",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-Xcompiler",
        "-fPIC",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    flags.push(format!("-I{}", kernels.join("include").display()));
    flags.push(format!("-I{}", kernels.display()));
    if trace {
        flags.push("-DFP8GEMM_TRACE".to_string());
    }
    if let Ok(ccbin) = env::var("NVCC_CCBIN") {
        flags.push(format!("-ccbin={ccbin}"));
    }
    if let Ok(extra) = env::var("CANDLE_FP8_NVCC_FLAGS") {
        flags.extend(extra.split_whitespace().map(str::to_string));
    }

    let obj_dir = out_dir.join("kernels");
    std::fs::create_dir_all(&obj_dir).map_err(|e| format!("{}: {e}", obj_dir.display()))?;
    let jobs = env::var("CANDLE_FP8_NVCC_JOBS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);

    // Compile in parallel: a shared queue of sources, `jobs` worker threads.
    let queue = std::sync::Mutex::new(sources.clone());
    let errors = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(sources.len()) {
            s.spawn(|| loop {
                let Some(src) = queue.lock().unwrap().pop() else {
                    break;
                };
                let obj = obj_dir.join(object_of(&src));
                let mut cmd = Command::new(&nvcc);
                cmd.args(&flags).arg("-c").arg(&src).arg("-o").arg(&obj);
                match cmd.output() {
                    Ok(o) if o.status.success() => {
                        let warn = String::from_utf8_lossy(&o.stderr);
                        for line in warn.lines().filter(|l| !l.trim().is_empty()) {
                            println!("cargo::warning=nvcc: {line}");
                        }
                    }
                    Ok(o) => errors.lock().unwrap().push(format!(
                        "nvcc failed on {} ({}):\n{:?}\n{}{}",
                        src.display(),
                        o.status,
                        cmd,
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )),
                    Err(e) => errors.lock().unwrap().push(format!("cannot run {}: {e}", nvcc.display())),
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }

    // Archive the objects into one static library.
    let lib = out_dir.join("libfp8gemm_kernels.a");
    let _ = std::fs::remove_file(&lib);
    let ar = env::var("AR").unwrap_or_else(|_| "ar".into());
    let mut cmd = Command::new(&ar);
    cmd.arg("crs").arg(&lib);
    for src in &sources {
        cmd.arg(obj_dir.join(object_of(src)));
    }
    let st = cmd.status().map_err(|e| format!("cannot run {ar}: {e}"))?;
    if !st.success() {
        return Err(format!("{cmd:?} failed: {st}"));
    }

    println!("cargo::rustc-link-search=native={}", out_dir.display());
    println!("cargo::rustc-link-lib=static=fp8gemm_kernels");
    println!("cargo::rustc-link-lib=static=cudart_static");
    for l in ["dl", "rt", "pthread", "stdc++"] {
        println!("cargo::rustc-link-lib=dylib={l}");
    }
    println!("cargo::rustc-cfg=fp8gemm_kernels");
    let version = Command::new(&nvcc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout).lines().find(|l| l.contains("release")).map(|l| l.trim().to_string())
        })
        .unwrap_or_default();
    println!("cargo::rustc-env=CANDLE_FP8_NVCC_VERSION={version}");
    println!("cargo::rustc-env=CANDLE_FP8_NVCC_FLAGS_USED={}", flags.join(" "));
    Ok(())
}
