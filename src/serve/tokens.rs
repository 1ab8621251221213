//! Prompt text to token ids, and the text of generated tokens.
//!
//! With `--tokenizer tokenizer.json` a prompt is encoded by the Hugging Face `tokenizers` crate,
//! so a client that loads the same file counts the same tokens (`vllm bench serve
//! --tokenizer DIR` does). Without one, the rule is one token per whitespace-separated word, its
//! id a hash of the word: equal prompts give equal ids, so shared prefixes share KV blocks.
//!
//! Generated text is filler: the model samples nothing (the engine's token id 0), so each
//! generated token is the same short piece of text. Usage counts are the engine's, not a
//! re-encoding of the text.

use std::path::Path;

/// How prompts become tokens.
pub enum Tokenizer {
    /// One token per whitespace-separated word.
    Words,
    Hf(Box<tokenizers::Tokenizer>),
}

/// What one generated token reads as.
const FILLER: &str = " the";

impl Tokenizer {
    /// A `tokenizer.json` (the Hugging Face format).
    pub fn from_file(path: &Path) -> Result<Tokenizer, String> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Tokenizer::Hf(Box::new(t)))
            .map_err(|e| format!("{}: not a tokenizer.json: {e}", path.display()))
    }

    /// The prompt's token ids. As vLLM encodes a completion prompt: with the tokenizer's
    /// special tokens (`add_special_tokens=True`, `CompletionRequest`'s default).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Tokenizer::Words => Ok(text.split_whitespace().map(word_id).collect()),
            Tokenizer::Hf(t) => t
                .encode(text, true)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| format!("the tokenizer failed on the prompt: {e}")),
        }
    }

    /// The text of `n` generated tokens: " the" each, whatever the tokenizer (a client counts
    /// the usage the server reports, as `vllm bench serve` does, not the text).
    pub fn filler(&self, n: usize) -> String {
        FILLER.repeat(n)
    }

    /// How many ids the vocabulary holds (`None`: any id goes).
    pub fn vocab_size(&self) -> Option<usize> {
        match self {
            Tokenizer::Words => None,
            Tokenizer::Hf(t) => Some(t.get_vocab_size(true)),
        }
    }
}

/// A word's token id: FNV-1a of its bytes, folded to 31 bits.
fn word_id(word: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ((h >> 33) ^ h) as u32 & 0x7fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_count_and_equal_words_share_ids() {
        let t = Tokenizer::Words;
        let a = t.encode("the cat  sat\non the mat").unwrap();
        assert_eq!(a.len(), 6);
        assert_eq!(a[0], a[4]);
        assert_ne!(a[0], a[1]);
        assert_eq!(t.encode("the cat").unwrap(), a[..2]);
        assert_eq!(t.filler(3), " the the the");
        assert_eq!(t.encode(&t.filler(5)).unwrap().len(), 5);
    }

    #[test]
    fn a_tokenizer_file_counts_as_its_vocabulary_says() {
        // Words w0..w7 and [UNK], written by scripts/minimal-tokenizer.py.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/serve/word_tokenizer.json"
        );
        let t = Tokenizer::from_file(Path::new(path)).unwrap();
        assert_eq!(t.vocab_size(), Some(9));
        assert_eq!(t.encode("w0 w7  w3\nw9").unwrap(), [1, 8, 4, 0]);
        let bad = Tokenizer::from_file(Path::new(env!("CARGO_MANIFEST_DIR")))
            .err()
            .unwrap();
        assert!(bad.contains("not a tokenizer.json"), "{bad}");
    }
}
