//! Prompt text to token ids, and the text of generated tokens.
//!
//! By default prompts are encoded by the tokenizer shipped in `data/tokenizer/` (one token per
//! character, " the" one token; 202 tokens, written by `scripts/write-shipped-tokenizer.py`, which
//! says why characters rather than bytes), compiled into the binary; a client pointed at the
//! same folder (`--tokenizer data/tokenizer`) counts the same tokens. `--tokenizer` takes any Hugging Face `tokenizer.json` (or its folder) instead. The
//! word rule ([`Tokenizer::words`], one token per whitespace-separated word, its id a hash of the
//! word) is for tests.
//!
//! Generated text is filler: the model samples nothing, so each generated token is the same
//! short piece of text, chosen so that the tokenizer encodes n pieces back to exactly n tokens
//! ([`Tokenizer::filler`]): a client that re-tokenizes the output (AIPerf, guidellm) counts what
//! the server generated. Usage counts are the engine's, not a re-encoding of the text.

use std::path::Path;

/// The shipped tokenizer (`data/tokenizer/tokenizer.json`).
const SHIPPED: &str = include_str!("../../data/tokenizer/tokenizer.json");

/// Pieces tried first as the text of one generated token, most natural first.
const FILLER_CANDIDATES: &[&str] = &[" the", " a", "the", "a", " x", "x", "."];

/// Vocabulary entries tried after the candidates, at most.
const FILLER_SCAN: u32 = 20_000;

/// Why a tokenizer could not be loaded, or could not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{file}: not a tokenizer.json: {reason}")]
    NotATokenizer { file: String, reason: String },
    #[error(
        "{name}: no piece of text in its first {FILLER_SCAN} tokens encodes to one token per \
         repetition, so generated text could not count as its tokens"
    )]
    NoFiller { name: String },
    #[error("the tokenizer failed on the text: {0}")]
    Encode(String),
    #[error("the tokenizer could not decode the ids: {0}")]
    Decode(String),
    #[error("the word tokenizer keeps no text for its ids (its ids are hashes of words)")]
    WordsKeepNoText,
}

/// How prompts become tokens, and what one generated token reads as.
pub struct Tokenizer {
    kind: Kind,
    filler: String,
}

enum Kind {
    Words,
    Hf(Box<tokenizers::Tokenizer>),
}

impl Tokenizer {
    /// One token per whitespace-separated word; a generated token reads " the".
    pub fn words() -> Tokenizer {
        Tokenizer {
            kind: Kind::Words,
            filler: FILLER_CANDIDATES[0].to_string(),
        }
    }

    /// The tokenizer shipped in `data/tokenizer/`.
    pub fn shipped() -> Tokenizer {
        let t = tokenizers::Tokenizer::from_bytes(SHIPPED.as_bytes())
            .expect("the shipped tokenizer.json loads (tested)");
        Tokenizer::hf(t, "the shipped tokenizer").expect("the shipped tokenizer has a filler")
    }

    /// A `tokenizer.json` (the Hugging Face format), or a folder holding one.
    pub fn from_path(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let t =
            tokenizers::Tokenizer::from_file(&file).map_err(|e| TokenizerError::NotATokenizer {
                file: file.display().to_string(),
                reason: e.to_string(),
            })?;
        Tokenizer::hf(t, &file.display().to_string())
    }

    fn hf(mut t: tokenizers::Tokenizer, name: &str) -> Result<Tokenizer, TokenizerError> {
        // No cache of encoded pieces: a prompt is seldom seen twice, and a model without a
        // pre-tokenizer (the shipped one) would keep up to 10,000 whole prompts (~100 MB at
        // 1,000 requests/s of 200 characters).
        let mut model = t.get_model().clone();
        model.resize_cache(0);
        t.with_model(model);
        let filler =
            find_filler(&t).ok_or_else(|| TokenizerError::NoFiller { name: name.into() })?;
        Ok(Tokenizer {
            kind: Kind::Hf(Box::new(t)),
            filler,
        })
    }

    /// The prompt's token ids. As vLLM encodes a completion prompt: with the tokenizer's
    /// special tokens (`add_special_tokens=True`, `CompletionRequest`'s default).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(text, true)
    }

    /// The ids of `text`, with the tokenizer's special tokens or without.
    pub fn encode_with(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenizerError> {
        match &self.kind {
            Kind::Words => Ok(text.split_whitespace().map(word_id).collect()),
            Kind::Hf(t) => t
                .encode(text, special)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenizerError::Encode(e.to_string())),
        }
    }

    /// The text of `ids`, special tokens kept (`tokenizer.decode`'s default). The word rule
    /// keeps no text for its ids.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match &self.kind {
            Kind::Words => Err(TokenizerError::WordsKeepNoText),
            Kind::Hf(t) => t
                .decode(ids, false)
                .map_err(|e| TokenizerError::Decode(e.to_string())),
        }
    }

    /// Each id's piece of the vocabulary (`convert_ids_to_tokens`).
    pub fn pieces(&self, ids: &[u32]) -> Result<Vec<String>, TokenizerError> {
        match &self.kind {
            Kind::Words => Err(TokenizerError::WordsKeepNoText),
            Kind::Hf(t) => Ok(ids
                .iter()
                .map(|&id| t.id_to_token(id).unwrap_or_default())
                .collect()),
        }
    }

    /// How many tokens `text` is as a client counts generated text: without special tokens.
    pub fn count_plain(&self, text: &str) -> Result<usize, TokenizerError> {
        match &self.kind {
            Kind::Words => Ok(text.split_whitespace().count()),
            Kind::Hf(t) => t
                .encode(text, false)
                .map(|e| e.len())
                .map_err(|e| TokenizerError::Encode(e.to_string())),
        }
    }

    /// The text of `n` generated tokens: `n` times the filler piece, which this tokenizer
    /// encodes back to `n` tokens.
    pub fn filler(&self, n: usize) -> String {
        self.filler.repeat(n)
    }

    /// The text of one generated token.
    pub fn filler_piece(&self) -> &str {
        &self.filler
    }

    /// How many ids the vocabulary holds (`None`: any id goes).
    pub fn vocab_size(&self) -> Option<usize> {
        match &self.kind {
            Kind::Words => None,
            Kind::Hf(t) => Some(t.get_vocab_size(true)),
        }
    }
}

/// Whether `piece` repeated k times encodes to k tokens (without special tokens), for the
/// counts a stream's pieces and a whole answer's text take.
fn repeats_as_one_token(t: &tokenizers::Tokenizer, piece: &str) -> bool {
    !piece.is_empty()
        && [1, 2, 3, 8, 33]
            .iter()
            .all(|&k| t.encode(piece.repeat(k), false).is_ok_and(|e| e.len() == k))
}

/// The first of the candidates, else of the vocabulary's tokens decoded, that repeats as one
/// token each.
fn find_filler(t: &tokenizers::Tokenizer) -> Option<String> {
    let decoded = (0..FILLER_SCAN.min(t.get_vocab_size(true) as u32))
        .filter_map(|id| t.decode(&[id], true).ok());
    FILLER_CANDIDATES
        .iter()
        .map(|s| s.to_string())
        .chain(decoded)
        .find(|p| repeats_as_one_token(t, p))
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
    use rand::Rng;

    fn data(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    #[test]
    fn words_count_and_equal_words_share_ids() {
        let t = Tokenizer::words();
        let a = t.encode("the cat  sat\non the mat").unwrap();
        assert_eq!(a.len(), 6);
        assert_eq!(a[0], a[4]);
        assert_ne!(a[0], a[1]);
        assert_eq!(t.encode("the cat").unwrap(), a[..2]);
        assert_eq!(t.filler(3), " the the the");
    }

    #[test]
    fn a_tokenizer_file_counts_as_its_vocabulary_says() {
        // Words w0..w7 and [UNK], written by scripts/minimal-tokenizer.py.
        let t = Tokenizer::from_path(&data("tests/data/serve/word_tokenizer.json")).unwrap();
        assert_eq!(t.vocab_size(), Some(9));
        assert_eq!(t.encode("w0 w7  w3\nw9").unwrap(), [1, 8, 4, 0]);
        let bad = Tokenizer::from_path(&data("src")).err().unwrap();
        assert!(matches!(bad, TokenizerError::NotATokenizer { .. }), "{bad}");
        assert!(bad.to_string().contains("not a tokenizer.json"), "{bad}");
    }

    #[test]
    fn the_shipped_tokenizer_counts_characters_and_its_folder_loads_the_same() {
        let t = Tokenizer::shipped();
        assert_eq!(t.vocab_size(), Some(202));
        // Worked from scripts/write-shipped-tokenizer.py: <unk> 0, ASCII 0x20-0x7e at 1-95
        // (c - 0x1f), tab, newline, return 96-98, Latin-1 0xa1-0xff less 0xad from 99, seven
        // quotes and dashes 193-199, " the" 200, <|endoftext|> 201.
        assert_eq!(t.encode("Hi the").unwrap(), [41, 74, 200]);
        assert_eq!(t.encode(" then").unwrap(), [200, 79]);
        // 0xe9 is the 72nd after 0xa1, less the soft hyphen: 99 + 71.
        assert_eq!(t.encode("é\n").unwrap(), [170, 97]);
        assert_eq!(t.encode("日本 x").unwrap(), [0, 1, 89]);
        assert_eq!(t.encode("<|endoftext|>").unwrap(), [201]);
        let from_folder = Tokenizer::from_path(&data("data/tokenizer")).unwrap();
        assert_eq!(from_folder.encode("Hi the").unwrap(), [41, 74, 200]);
        assert_eq!(t.filler_piece(), " the");
    }

    #[test]
    fn the_shipped_tokenizers_tokens_decode_to_text_that_encodes_back_to_them() {
        // What clients that draw random token ids need (they decode them and encode the text
        // again): every token but the special ones, alone and in every pair. Its only piece of
        // more than one character is " the", so only " ", "t", "h", "e" in a row merge.
        let Kind::Hf(t) = &Tokenizer::shipped().kind else {
            unreachable!()
        };
        let ids: Vec<u32> = (1..201).collect();
        for &a in &ids {
            for b in std::iter::once(None).chain(ids.iter().map(Some)) {
                let seq: Vec<u32> = std::iter::once(a).chain(b.copied()).collect();
                let text = t.decode(&seq, true).unwrap();
                assert_eq!(
                    t.encode(text.as_str(), false).unwrap().get_ids(),
                    &seq[..],
                    "{text:?}"
                );
            }
        }
        assert_eq!(t.encode(" the", false).unwrap().get_ids(), [200]);
    }

    #[test]
    fn every_shipped_tokenizer_reads_its_filler_back_one_token_each() {
        let mut rng = rand::rng();
        let all = [
            ("words", Tokenizer::words()),
            ("shipped", Tokenizer::shipped()),
            (
                "word_tokenizer.json",
                Tokenizer::from_path(&data("tests/data/serve/word_tokenizer.json")).unwrap(),
            ),
        ];
        for (name, t) in &all {
            for _ in 0..20 {
                let n = rng.random_range(1..400);
                // A stream's chunks hold a step's tokens each: the client joins them.
                let mut text = String::new();
                let mut left = n;
                while left > 0 {
                    let k = rng.random_range(1..=left.min(5));
                    text.push_str(&t.filler(k));
                    left -= k;
                }
                assert_eq!(t.count_plain(&text).unwrap(), n, "{name}");
            }
        }
    }

    fn hf_json(model: &str) -> tokenizers::Tokenizer {
        let json = format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,
            "model":{model}}}"#
        );
        tokenizers::Tokenizer::from_bytes(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_tokenizer_without_the_usual_pieces_gets_one_from_its_vocabulary_or_is_refused() {
        // BPE over "k" with the merge "k k": no candidate encodes (unknown characters vanish
        // without an unknown token, "k" pairs up), but vocabulary entry 1, "kk", repeats.
        let t =
            hf_json(r#"{"type":"BPE","vocab":{"k":0,"kk":1},"merges":["k k"],"unk_token":null}"#);
        assert!(!repeats_as_one_token(&t, " the"));
        assert!(!repeats_as_one_token(&t, "k"));
        let t = Tokenizer::hf(t, "test").unwrap();
        assert_eq!(t.filler_piece(), "kk");
        assert_eq!(t.count_plain(&t.filler(5)).unwrap(), 5);
        // One word of anything, always: no piece repeats.
        let t = hf_json(r#"{"type":"WordLevel","vocab":{"[UNK]":0},"unk_token":"[UNK]"}"#);
        let e = Tokenizer::hf(t, "test").err().unwrap();
        assert!(matches!(e, TokenizerError::NoFiller { .. }), "{e}");
        assert!(e.to_string().contains("no piece of text"), "{e}");
    }
}
