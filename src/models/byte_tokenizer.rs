//! A byte-level tokenizer: ids `0..256` are the raw bytes, followed by a few special tokens.
//!
//! Used by the tiny embedded Qwen3-architecture model of the decode example (no download, no
//! `tokenizer.json`). Decoding is lossy UTF-8: invalid byte sequences become `U+FFFD`.

/// First id after the 256 byte tokens.
pub const NUM_BYTES: u32 = 256;

/// The special tokens, in id order starting at [`NUM_BYTES`].
pub const SPECIALS: [&str; 4] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"];

/// Byte-level tokenizer with `SPECIALS` after the bytes; ids at or beyond
/// `NUM_BYTES + SPECIALS.len()` (up to the model's vocabulary size) are unused and decode to
/// nothing.
#[derive(Debug, Clone, Default)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    /// The tokenizer.
    pub fn new() -> Self {
        Self
    }

    /// Number of ids with a meaning (bytes + specials).
    pub fn vocab_size(&self) -> usize {
        NUM_BYTES as usize + SPECIALS.len()
    }

    /// Id of `<|endoftext|>`.
    pub fn eos_id(&self) -> u32 {
        NUM_BYTES
    }

    /// Id of a special token by its text.
    pub fn special_id(&self, text: &str) -> Option<u32> {
        SPECIALS.iter().position(|s| *s == text).map(|i| NUM_BYTES + i as u32)
    }

    /// Encodes text as its UTF-8 bytes (specials are not parsed from text).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// Decodes ids: runs of byte ids are decoded as lossy UTF-8, specials as their text,
    /// unused ids as nothing.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut out = String::new();
        let mut bytes = Vec::new();
        for &id in ids {
            if id < NUM_BYTES {
                bytes.push(id as u8);
                continue;
            }
            out.push_str(&String::from_utf8_lossy(&bytes));
            bytes.clear();
            if let Some(s) = SPECIALS.get((id - NUM_BYTES) as usize) {
                out.push_str(s);
            }
        }
        out.push_str(&String::from_utf8_lossy(&bytes));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_specials() {
        let t = ByteTokenizer::new();
        let ids = t.encode("héllo");
        assert_eq!(ids.len(), 6);
        assert_eq!(t.decode(&ids), "héllo");
        let mut ids2 = ids.clone();
        ids2.push(t.eos_id());
        ids2.push(300); // unused
        ids2.push(0xff); // invalid utf-8 alone
        assert_eq!(t.decode(&ids2), "héllo<|endoftext|>\u{fffd}");
        assert_eq!(t.special_id("<|im_end|>"), Some(258));
    }
}
