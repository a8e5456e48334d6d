//! Checkpoints from the Hugging Face Hub (the `hub` feature), through hf-hub's blocking API.

use super::{read_index, CONFIG_FILE, INDEX_FILE, SINGLE_FILE};
use candle_core::{bail, Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn err(msg: String) -> Error {
    Error::Msg(msg)
}
use hf_hub::{Cache, Repo, RepoType};

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

fn cache() -> Cache {
    match std::env::var("HF_HUB_CACHE") {
        Ok(p) if !p.is_empty() => Cache::new(p.into()),
        _ => Cache::from_env(),
    }
}

/// Fetches the files and returns the snapshot directory holding them.
pub(super) fn fetch(repo_id: &str, revision: &str) -> Result<PathBuf> {
    let repo = Repo::with_revision(repo_id.to_string(), RepoType::Model, revision.to_string());
    let cache = cache();
    let offline = offline();
    let api = if offline {
        None
    } else {
        let mut builder = hf_hub::api::sync::ApiBuilder::from_cache(cache.clone()).with_progress(true);
        if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
            builder = builder.with_endpoint(endpoint);
        }
        if let Ok(token) = std::env::var("HF_TOKEN") {
            builder = builder.with_token(Some(token));
        }
        let api = builder.build().map_err(|e| err(format!("hub: cannot start the Hugging Face API client: {e}")))?;
        Some(api.repo(repo.clone()))
    };
    let cached = cache.repo(repo.clone());
    // A revision given as a commit hash has no ref file: look in its snapshot directly.
    let pinned = (revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| cache.path().join(repo.folder_name()).join("snapshots").join(revision));
    let get = |file: &str| -> std::result::Result<PathBuf, String> {
        match &api {
            None => {
                cached.get(file).or_else(|| pinned.as_ref().map(|d| d.join(file)).filter(|p| p.exists())).ok_or_else(
                    || format!("{file} is not in the local cache {} (HF_HUB_OFFLINE is set)", cache.path().display()),
                )
            }
            Some(api) => api.get(file).map_err(|e| format!("{file}: {e}")),
        }
    };
    let what = format!("{repo_id}@{revision}");
    let config = get(CONFIG_FILE).map_err(|e| err(format!("hub {what}: {e}")))?;
    let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
    match get(INDEX_FILE) {
        Ok(index) => {
            let shards: BTreeSet<String> = read_index(&index)?.into_values().collect();
            for s in &shards {
                let p = get(s).map_err(|e| err(format!("hub {what}: shard {e}")))?;
                if p.parent() != Some(dir.as_path()) {
                    bail!(
                        "hub {what}: {s} resolved to another snapshot ({}); the revision moved during the download",
                        p.display()
                    )
                }
            }
        }
        Err(index_err) => {
            get(SINGLE_FILE).map_err(|e| err(format!("hub {what}: no weights: {index_err}; {e}")))?;
        }
    }
    // Optional: a repository without tokenizer.json still opens.
    let _ = get("tokenizer.json");
    // Optional as well: what a tokenizer, a chat and generation need besides tokenizer.json.
    for f in ["tokenizer_config.json", "generation_config.json", "special_tokens_map.json", "chat_template.jinja"] {
        let _ = get(f);
    }
    Ok(dir)
}
