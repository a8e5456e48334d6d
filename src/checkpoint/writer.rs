//! A streaming writer of Hugging Face-style sharded safetensors.

use super::{INDEX_FILE, SINGLE_FILE};
use candle_core::{bail, Error, Result, Tensor};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// Writes tensors as Hugging Face-style safetensors shards, streaming: tensors are buffered
/// until the current shard would exceed `max_shard_bytes` (or [`ShardWriter::flush`] is
/// called), then written. [`ShardWriter::finish`] names the shards
/// `model-0000i-of-0000n.safetensors` and writes `model.safetensors.index.json`, or, when there
/// is a single shard, writes `model.safetensors` and no index.
pub struct ShardWriter {
    dir: PathBuf,
    max_shard_bytes: Option<u64>,
    pending: Vec<(String, Tensor)>,
    pending_bytes: u64,
    written: Vec<(PathBuf, Vec<String>)>,
    total_bytes: u64,
    names: BTreeSet<String>,
}

impl ShardWriter {
    /// A writer into `dir` (created if needed); `None` means a single shard.
    pub fn new(dir: impl AsRef<Path>, max_shard_bytes: Option<u64>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Self {
            dir,
            max_shard_bytes,
            pending: Vec::new(),
            pending_bytes: 0,
            written: Vec::new(),
            total_bytes: 0,
            names: BTreeSet::new(),
        })
    }

    /// Adds a tensor (any dtype candle can store, including `F8E4M3`).
    pub fn push(&mut self, name: impl Into<String>, tensor: Tensor) -> Result<()> {
        let name = name.into();
        if !self.names.insert(name.clone()) {
            bail!("ShardWriter: tensor {name} written twice")
        }
        let bytes = (tensor.elem_count() * tensor.dtype().size_in_bytes()) as u64;
        if let Some(max) = self.max_shard_bytes {
            if !self.pending.is_empty() && self.pending_bytes + bytes > max {
                self.flush()?;
            }
        }
        self.pending_bytes += bytes;
        self.total_bytes += bytes;
        self.pending.push((name, tensor.contiguous()?));
        Ok(())
    }

    /// Ends the current shard (no-op when it is empty).
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tmp = self.dir.join(format!(".shard-{}.safetensors.partial", self.written.len()));
        let tensors = std::mem::take(&mut self.pending);
        let names = tensors.iter().map(|(n, _)| n.clone()).collect();
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        safetensors::serialize_to_file(tensors.iter().map(|(n, t)| (n.as_str(), t)), Some(meta), &tmp)
            .map_err(|e| err(format!("cannot write {}: {e}", tmp.display())))?;
        self.pending_bytes = 0;
        self.written.push((tmp, names));
        Ok(())
    }

    /// Writes what is left, renames the shards to their final names, writes the index when
    /// there are several, and returns the files written.
    pub fn finish(mut self) -> Result<Vec<PathBuf>> {
        self.flush()?;
        let n = self.written.len();
        let rename = |from: &Path, to: &Path| {
            std::fs::rename(from, to)
                .map_err(|e| err(format!("cannot rename {} to {}: {e}", from.display(), to.display())))
        };
        if n <= 1 {
            let out = self.dir.join(SINGLE_FILE);
            match self.written.first() {
                Some((tmp, _)) => rename(tmp, &out)?,
                None => {
                    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
                    safetensors::serialize_to_file(Vec::<(&str, &Tensor)>::new(), Some(meta), &out)
                        .map_err(|e| err(format!("cannot write {}: {e}", out.display())))?
                }
            }
            return Ok(vec![out]);
        }
        let mut weight_map = serde_json::Map::new();
        let mut files = Vec::new();
        for (i, (tmp, names)) in self.written.iter().enumerate() {
            let fname = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
            let out = self.dir.join(&fname);
            rename(tmp, &out)?;
            for t in names {
                weight_map.insert(t.clone(), Value::String(fname.clone()));
            }
            files.push(out);
        }
        let index = serde_json::json!({ "metadata": { "total_size": self.total_bytes }, "weight_map": weight_map });
        let ipath = self.dir.join(INDEX_FILE);
        let text = serde_json::to_string_pretty(&index).map_err(|e| err(e.to_string()))?;
        std::fs::write(&ipath, text).map_err(|e| err(format!("cannot write {}: {e}", ipath.display())))?;
        Ok(files)
    }
}
