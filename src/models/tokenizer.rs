//! [`Tokenizer`]: a Hugging Face tokenizer (the `tokenizers` crate) with what generation needs
//! next to it — bos / eos ids, whether bos is added, the chat template — read from a checkpoint
//! directory or built from a GGUF file's vocabulary, and a UTF-8-safe streaming decoder
//! ([`TokenStream`]).

use candle_core::quantized::gguf_file;
use candle_core::{bail, Error, Result};
use serde_json::{json, Value};
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

/// Name of the tokenizer file of a checkpoint.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Name of the tokenizer's configuration (special tokens, chat template).
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// Name of the generation defaults (eos ids among others).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

fn err(msg: String) -> Error {
    Error::Msg(msg)
}

/// The `tokenizer.ggml.pre` names [`Tokenizer::from_gguf`] implements.
pub const GGUF_PRE_TOKENIZERS: &[&str] =
    &["default", "gpt2", "gpt-2", "smollm", "qwen2", "llama3", "llama-bpe", "smaug-bpe"];

/// Qwen2's split regex (`tokenizer.json` of Qwen2 / Qwen2.5 / Qwen3; llama.cpp `qwen2`).
const REGEX_QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split regex (llama.cpp `llama-bpe`): digits in groups of up to three.
const REGEX_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer and its special tokens.
///
/// - [`Tokenizer::from_dir`]: a Hugging Face checkpoint directory (`tokenizer.json`,
///   `tokenizer_config.json`, `generation_config.json`, `chat_template.jinja`).
/// - [`Tokenizer::from_gguf`]: the byte-level BPE described by a GGUF file's
///   `tokenizer.ggml.*` metadata (llama.cpp's `gpt2` tokenizer model).
/// - [`Tokenizer::save`] writes `tokenizer.json` and `tokenizer_config.json` that
///   [`Tokenizer::from_dir`] and Hugging Face `transformers` read back as the same tokenizer.
///
/// Special tokens written in the text (`<|im_start|>`…) are recognised as such by
/// [`Tokenizer::encode`], whatever `add_special_tokens` says; that flag only decides whether bos
/// (and whatever the tokenizer's post-processor adds) is added.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
    pad: Option<(String, u32)>,
    unk: Option<(String, u32)>,
    extra_eos: Vec<u32>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos_ids())
            .field("add_bos", &self.add_bos)
            .field("chat_template", &self.chat_template.as_ref().map(|t| t.len()))
            .finish()
    }
}

/// A token given in `tokenizer_config.json` as a string or as an `AddedToken` object.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|v| v as u32)).collect(),
        _ => vec![],
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            serde_json::from_str(&text).map(Some).map_err(|e| err(format!("{}: not valid JSON: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(format!("cannot read {}: {e}", path.display()))),
    }
}

/// `chat_template` of `tokenizer_config.json`: a string, or a list of `{name, template}` (the
/// one named `default`, else the first).
fn template_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let named = |n: &str| items.iter().find(|i| i.get("name").and_then(Value::as_str) == Some(n));
            named("default")
                .or(items.first())
                .and_then(|i| i.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string)
        }
        _ => None,
    }
}

fn gguf_u32(v: &gguf_file::Value) -> Option<u32> {
    use gguf_file::Value::*;
    match v {
        U8(v) => Some(*v as u32),
        I8(v) => u32::try_from(*v).ok(),
        U16(v) => Some(*v as u32),
        I16(v) => u32::try_from(*v).ok(),
        U32(v) => Some(*v),
        I32(v) => u32::try_from(*v).ok(),
        U64(v) => u32::try_from(*v).ok(),
        I64(v) => u32::try_from(*v).ok(),
        _ => None,
    }
}

fn gguf_strings(ct: &gguf_file::Content, key: &str) -> Result<Vec<String>> {
    let Some(v) = ct.metadata.get(key) else { bail!("GGUF metadata {key} is missing") };
    let arr = v.to_vec().map_err(|_| err(format!("GGUF metadata {key} is not an array")))?;
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            v.to_string().cloned().map_err(|_| err(format!("GGUF metadata {key}[{i}] is not a string: {v:?}")))
        })
        .collect()
}

impl Tokenizer {
    /// Wraps a `tokenizers` tokenizer with no special-token information (no bos, no eos, no chat
    /// template: [`Tokenizer::from_dir`] reads those of a checkpoint).
    pub fn new(inner: tokenizers::Tokenizer) -> Self {
        Self {
            inner,
            bos: None,
            eos: None,
            pad: None,
            unk: None,
            extra_eos: vec![],
            add_bos: false,
            chat_template: None,
        }
    }

    /// Reads a `tokenizer.json` (no special-token information besides what it holds).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| err(format!("cannot load tokenizer {}: {e}", path.display())))?;
        Ok(Self::new(inner))
    }

    /// Reads a checkpoint directory's tokenizer: `tokenizer.json`; from `tokenizer_config.json`
    /// (if present) `bos_token`, `eos_token`, `pad_token`, `unk_token`, `add_bos_token` and
    /// `chat_template` (a `chat_template.jinja` file wins over the latter, as in transformers);
    /// from `generation_config.json` (if present) `eos_token_id` (an id or a list: all of them
    /// end generation, with the tokenizer's own eos).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mut tok = Self::from_file(dir.join(TOKENIZER_FILE))?;
        let cfg_path = dir.join(TOKENIZER_CONFIG_FILE);
        let cfg = read_json(&cfg_path)?.unwrap_or(Value::Null);
        let lookup = |field: &str| -> Result<Option<(String, u32)>> {
            let Some(text) = token_text(cfg.get(field)) else {
                return Ok(None);
            };
            match tok.inner.token_to_id(&text) {
                Some(id) => Ok(Some((text, id))),
                None => bail!("{}: {field} {text:?} is not in the vocabulary of {TOKENIZER_FILE}", cfg_path.display()),
            }
        };
        tok.bos = lookup("bos_token")?;
        tok.eos = lookup("eos_token")?;
        tok.pad = lookup("pad_token")?;
        tok.unk = lookup("unk_token")?;
        tok.add_bos = cfg.get("add_bos_token").and_then(Value::as_bool).unwrap_or(false);
        tok.chat_template = template_of(cfg.get("chat_template"));
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            tok.chat_template = Some(
                std::fs::read_to_string(&jinja).map_err(|e| err(format!("cannot read {}: {e}", jinja.display())))?,
            );
        }
        if let Some(gen) = read_json(&dir.join(GENERATION_CONFIG_FILE))? {
            tok.extra_eos = ids_of(gen.get("eos_token_id"));
            if tok.bos.is_none() {
                if let Some(&id) = ids_of(gen.get("bos_token_id")).first() {
                    tok.bos = tok.inner.id_to_token(id).map(|t| (t, id));
                }
            }
        }
        Ok(tok)
    }

    /// Builds the byte-level BPE a GGUF file describes: `tokenizer.ggml.model` must be `gpt2`;
    /// `tokens`, `merges`, `token_type` (control and unknown tokens become special added
    /// tokens, user-defined ones plain added tokens), `bos_token_id`, `eos_token_id`,
    /// `padding_token_id`, `unknown_token_id`, `add_bos_token`, `add_space_prefix`,
    /// `chat_template`, and the pre-tokenizer `tokenizer.ggml.pre` (one of
    /// [`GGUF_PRE_TOKENIZERS`]; `smollm` isolates every digit before the GPT-2 split, as
    /// SmolLM2's own `tokenizer.json` and llama.cpp do).
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let meta = |k: &str| ct.metadata.get(k);
        let model = match meta("tokenizer.ggml.model") {
            Some(v) => {
                v.to_string().map_err(|_| err("GGUF metadata tokenizer.ggml.model is not a string".into()))?.clone()
            }
            None => {
                bail!("GGUF metadata tokenizer.ggml.model is missing: the file has no tokenizer")
            }
        };
        if model != "gpt2" {
            bail!("GGUF tokenizer model {model:?} is not supported (only \"gpt2\", byte-level BPE)")
        }
        let tokens = gguf_strings(ct, "tokenizer.ggml.tokens")?;
        let merges = gguf_strings(ct, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(err(format!("GGUF tokenizer.ggml.merges: entry {m:?} is not \"left right\""))),
            })
            .collect::<Result<Vec<_>>>()?;
        let types: Vec<u32> = match meta("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|_| err("GGUF metadata tokenizer.ggml.token_type is not an array".into()))?
                .iter()
                .map(|t| {
                    gguf_u32(t)
                        .ok_or_else(|| err(format!("GGUF tokenizer.ggml.token_type entry {t:?} is not an integer")))
                })
                .collect::<Result<_>>()?,
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            bail!("GGUF tokenizer: {} token types for {} tokens", types.len(), tokens.len())
        }
        let id_of = |k: &str| meta(k).and_then(gguf_u32).filter(|&id| (id as usize) < tokens.len());
        let flag = |k: &str| meta(k).and_then(|v| v.to_bool().ok());
        let pre =
            meta("tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).cloned().unwrap_or_else(|| "default".into());
        let add_prefix_space = flag("tokenizer.ggml.add_space_prefix").unwrap_or(false);

        // Duplicate token strings (a few GGUF vocabularies have them): the first id wins.
        let vocab = bpe_vocab(&tokens);
        let mut bpe = BPE::builder().vocab_and_merges(vocab, merges);
        if let Some(flag) = flag("tokenizer.ggml.ignore_merges") {
            bpe = bpe.ignore_merges(flag);
        }
        let bpe = bpe.build().map_err(|e| err(format!("GGUF tokenizer: cannot build the BPE model: {e}")))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let byte_level = ByteLevel::new(add_prefix_space, true, true);
        match pre.as_str() {
            "default" | "gpt2" | "gpt-2" => {
                inner.with_pre_tokenizer(Some(byte_level));
            }
            "smollm" => {
                let seq = Sequence::new(vec![Digits::new(true).into(), byte_level.into()]);
                inner.with_pre_tokenizer(Some(PreTokenizerWrapper::from(seq)));
            }
            "qwen2" | "llama3" | "llama-bpe" | "smaug-bpe" => {
                let regex = if pre == "qwen2" { REGEX_QWEN2 } else { REGEX_LLAMA3 };
                let split = Split::new(SplitPattern::Regex(regex.into()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| err(format!("GGUF tokenizer: pre-tokenizer {pre}: {e}")))?;
                let seq = Sequence::new(vec![split.into(), ByteLevel::new(add_prefix_space, false, false).into()]);
                inner.with_pre_tokenizer(Some(PreTokenizerWrapper::from(seq)));
                if pre == "qwen2" {
                    inner.with_normalizer(Some(NFC)).map_err(|e| err(format!("GGUF tokenizer: {e}")))?;
                }
            }
            other => bail!(
                "GGUF tokenizer.ggml.pre = {other:?} is not supported (supported: {})",
                GGUF_PRE_TOKENIZERS.join(", ")
            ),
        }
        inner.with_decoder(Some(ByteLevelDecoder::new(add_prefix_space, false, true)));

        // Control (3) and unknown (2) tokens are special; user-defined (4) are added tokens.
        let mut added: Vec<AddedToken> = Vec::new();
        for (t, ty) in tokens.iter().zip(&types) {
            match ty {
                2 | 3 => added.push(AddedToken::from(t.clone(), true)),
                4 => added.push(AddedToken::from(t.clone(), false).normalized(false)),
                _ => {}
            }
        }
        // The ids named in the metadata are special even when typed "normal".
        let named: Vec<u32> =
            ["bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id", "eot_token_id", "eom_token_id"]
                .iter()
                .filter_map(|k| id_of(&format!("tokenizer.ggml.{k}")))
                .collect();
        for id in &named {
            let t = &tokens[*id as usize];
            if !added.iter().any(|a| &a.content == t) {
                added.push(AddedToken::from(t.clone(), true));
            }
        }
        inner
            .add_tokens(added.iter().filter(|a| !a.special).cloned())
            .map_err(|e| err(format!("GGUF tokenizer: {e}")))?;
        inner
            .add_special_tokens(added.iter().filter(|a| a.special).cloned())
            .map_err(|e| err(format!("GGUF tokenizer: {e}")))?;

        let pair = |id: Option<u32>| id.map(|id| (tokens[id as usize].clone(), id));
        let mut tok = Self::new(inner);
        tok.bos = pair(id_of("tokenizer.ggml.bos_token_id"));
        tok.eos = pair(id_of("tokenizer.ggml.eos_token_id"));
        tok.pad = pair(id_of("tokenizer.ggml.padding_token_id"));
        tok.unk = pair(id_of("tokenizer.ggml.unknown_token_id"));
        tok.extra_eos =
            ["eot_token_id", "eom_token_id"].iter().filter_map(|k| id_of(&format!("tokenizer.ggml.{k}"))).collect();
        tok.chat_template = meta("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned();
        let add_bos = flag("tokenizer.ggml.add_bos_token").unwrap_or(false);
        tok.set_add_bos(add_bos)?;
        Ok(tok)
    }

    /// Sets whether [`Tokenizer::encode`] with `add_special_tokens` prepends bos. With a bos
    /// token this also installs the matching `TemplateProcessing` post-processor (so that a
    /// saved `tokenizer.json` adds bos in Hugging Face tools as well); turning it off removes
    /// the post-processor.
    pub fn set_add_bos(&mut self, on: bool) -> Result<()> {
        self.add_bos = on;
        match (&self.bos, on) {
            (Some((bos, id)), true) => {
                let pp = TemplateProcessing::builder()
                    .try_single(format!("{bos}:0 $A:0"))
                    .and_then(|b| b.try_pair(format!("{bos}:0 $A:0 {bos}:1 $B:1")))
                    .map_err(|e| err(format!("bos template: {e}")))?
                    .special_tokens(vec![(bos.clone(), *id)])
                    .build()
                    .map_err(|e| err(format!("bos template: {e}")))?;
                self.inner.with_post_processor(Some(pp));
            }
            (_, false) => {
                self.inner.with_post_processor(None::<TemplateProcessing>);
            }
            (None, true) => {}
        }
        Ok(())
    }

    /// This tokenizer with its chat template replaced.
    pub fn with_chat_template(mut self, template: Option<String>) -> Self {
        self.chat_template = template;
        self
    }

    /// The `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids of `text`. Special tokens written in it are matched as special tokens;
    /// `add_special_tokens` adds bos when the tokenizer adds one (`add_bos_token`, or its
    /// post-processor).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc =
            self.inner.encode(text, add_special_tokens).map_err(|e| err(format!("tokenizer: cannot encode: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if add_special_tokens && self.add_bos {
            if let Some((_, bos)) = &self.bos {
                if ids.first() != Some(bos) {
                    ids.insert(0, *bos);
                }
            }
        }
        Ok(ids)
    }

    /// The text of `ids`; special tokens are dropped with `skip_special_tokens`. Byte tokens
    /// of an incomplete or invalid UTF-8 sequence decode to U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| err(format!("tokenizer: cannot decode {} ids: {e}", ids.len())))
    }

    /// Id of a token by its text (vocabulary or added token).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Text of a token (its vocabulary form, e.g. `Ġthe` for a byte-level BPE).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The beginning-of-sequence id, if any.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos.as_ref().map(|b| b.1)
    }

    /// The beginning-of-sequence token, if any.
    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_ref().map(|b| b.0.as_str())
    }

    /// The end-of-sequence token, if any.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_ref().map(|b| b.0.as_str())
    }

    /// The padding id, if any.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad.as_ref().map(|b| b.1)
    }

    /// Every id that ends generation: the tokenizer's eos first, then those of
    /// `generation_config.json` (or GGUF `eot` / `eom` ids), without repeats.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self.eos.iter().map(|e| e.1).collect();
        for &id in &self.extra_eos {
            if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }

    /// Whether [`Tokenizer::encode`] with `add_special_tokens` adds bos.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The Jinja chat template, if the checkpoint has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The chat template ready to render, with this tokenizer's bos / eos tokens.
    pub fn chat(&self) -> Result<super::chat::ChatTemplate> {
        let Some(t) = &self.chat_template else { bail!("this tokenizer has no chat template") };
        super::chat::ChatTemplate::new(t, self.bos_token().unwrap_or(""), self.eos_token().unwrap_or(""))
    }

    /// A streaming decoder that keeps special tokens (as [`Tokenizer::decode`] with
    /// `skip_special_tokens = false`).
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream::new(self, false)
    }

    /// A streaming decoder; `skip_special_tokens` as in [`Tokenizer::decode`].
    pub fn stream_with(&self, skip_special_tokens: bool) -> TokenStream<'_> {
        TokenStream::new(self, skip_special_tokens)
    }

    /// Writes `tokenizer.json` and `tokenizer_config.json` into `dir` (created if needed): the
    /// bos / eos / pad / unk tokens, `add_bos_token`, `chat_template`, `tokenizer_class`
    /// `PreTrainedTokenizerFast`, `clean_up_tokenization_spaces` false, and
    /// `added_tokens_decoder`. Returns the two paths.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<[std::path::PathBuf; 2]> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
        let tj = dir.join(TOKENIZER_FILE);
        self.inner.save(&tj, false).map_err(|e| err(format!("cannot write {}: {e}", tj.display())))?;
        let mut added: Vec<(u32, AddedToken)> = self.inner.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        let decoder: serde_json::Map<String, Value> = added
            .into_iter()
            .map(|(id, t)| {
                (
                    id.to_string(),
                    json!({"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                           "single_word": t.single_word, "special": t.special}),
                )
            })
            .collect();
        let tok = |t: &Option<(String, u32)>| t.as_ref().map(|t| Value::String(t.0.clone())).unwrap_or(Value::Null);
        let mut cfg = json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": tok(&self.bos),
            "eos_token": tok(&self.eos),
            "pad_token": tok(&self.pad),
            "unk_token": tok(&self.unk),
            "add_bos_token": self.add_bos,
            "add_eos_token": false,
            "clean_up_tokenization_spaces": false,
            "model_max_length": 1_000_000_000_000_000_000u64,
            "added_tokens_decoder": decoder,
        });
        if let Some(t) = &self.chat_template {
            cfg["chat_template"] = Value::String(t.clone());
        }
        let cp = dir.join(TOKENIZER_CONFIG_FILE);
        let text = serde_json::to_string_pretty(&cfg).map_err(|e| err(e.to_string()))?;
        std::fs::write(&cp, text).map_err(|e| err(format!("cannot write {}: {e}", cp.display())))?;
        Ok([tj, cp])
    }

    /// `generation_config.json` content for this tokenizer's bos / eos / pad ids.
    pub fn generation_config(&self) -> Value {
        let eos = self.eos_ids();
        let mut g = json!({ "_from_model_config": false });
        if let Some(b) = self.bos_id() {
            g["bos_token_id"] = json!(b);
        }
        match eos.as_slice() {
            [] => {}
            [one] => g["eos_token_id"] = json!(one),
            many => g["eos_token_id"] = json!(many),
        }
        if let Some(p) = self.pad_id() {
            g["pad_token_id"] = json!(p);
        }
        g
    }
}

fn bpe_vocab(tokens: &[String]) -> tokenizers::models::bpe::Vocab {
    let mut vocab: tokenizers::models::bpe::Vocab = Default::default();
    for (i, t) in tokens.iter().enumerate() {
        vocab.entry(t.clone()).or_insert(i as u32);
    }
    vocab
}

/// Decodes generated ids one at a time into text that is safe to print: a character whose
/// bytes span several tokens is returned once complete, never as a replacement character
/// mid-stream, and decoders that treat the first token specially (a stripped leading space)
/// see the same context as a whole-sequence [`Tokenizer::decode`]. The pieces returned by
/// [`TokenStream::push`] and [`TokenStream::flush`] concatenate to `decode(all ids)`.
#[derive(Debug)]
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    /// Start of the decoding window.
    prev: usize,
    /// End of the text already returned, as an index into `ids`.
    cur: usize,
}

impl<'a> TokenStream<'a> {
    /// A new, empty stream.
    pub fn new(tokenizer: &'a Tokenizer, skip_special_tokens: bool) -> Self {
        Self { tokenizer, skip_special_tokens, ids: Vec::new(), prev: 0, cur: 0 }
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids, self.skip_special_tokens)
    }

    /// Adds one id; returns the text that became printable, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let done = self.decode(&self.ids[self.prev..self.cur])?;
        let text = self.decode(&self.ids[self.prev..])?;
        if text.len() > done.len() && text.starts_with(&done) && !text.ends_with('\u{FFFD}') {
            let new = text[done.len()..].to_string();
            self.prev = self.cur;
            self.cur = self.ids.len();
            Ok(Some(new))
        } else {
            Ok(None)
        }
    }

    /// The text still held back (an incomplete character at the end decodes to U+FFFD here).
    /// The stream starts over afterwards.
    pub fn flush(&mut self) -> Result<Option<String>> {
        let done = self.decode(&self.ids[self.prev..self.cur])?;
        let text = self.decode(&self.ids[self.prev..])?;
        let rest = match text.strip_prefix(done.as_str()) {
            Some(rest) => rest.to_string(),
            // The context changed what was already returned (not seen with the decoders
            // of supported models): return what follows the returned tokens on their own.
            None => self.decode(&self.ids[self.cur..])?,
        };
        self.ids.clear();
        self.prev = 0;
        self.cur = 0;
        Ok(Some(rest).filter(|r| !r.is_empty()))
    }

    /// The ids pushed since the stream (re)started.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}
