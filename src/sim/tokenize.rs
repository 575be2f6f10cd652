//! The simulator's tokenizer: one whitespace-separated word is one token.
//!
//! A real tokenizer would tie the simulator to one model's vocabulary files;
//! the engine only needs prompts to have a length and a content identity
//! (for the prefix cache). The rule is therefore the simplest that is exact
//! for capcard's own synthetic prompts, which are built as one word per
//! planned token: requested prompt lengths equal the server's
//! `usage.prompt_tokens` on the simulator.
//!
//! - text → split on Unicode whitespace; each word's token id is
//!   FNV-1a-64(word) mod vocab (stable across platforms and Rust versions);
//! - chat → the `content` of every message, in order, tokenized as above and
//!   concatenated; roles and chat-template markers add no tokens (so a
//!   prompt's token count is the word count of its contents);
//! - output → every generated token is one word from a fixed list, sent with
//!   a leading space, so output text re-tokenizes to the same count and one
//!   streamed chunk carries exactly one token.

use crate::hash::{FNV1A_START, fnv1a_step, hash_str};

/// Token ids of `text`, one per whitespace-separated word.
pub fn tokenize(text: &str, vocab: u32) -> Vec<u32> {
    let mut out = Vec::new();
    tokenize_into(text, vocab, &mut out);
    out
}

/// Appends the tokens of `text` to `out`.
///
/// ASCII text (every synthetic prompt) is split on its bytes and each
/// word hashed as it is scanned, in one pass: the same words as
/// `split_whitespace` (whose ASCII whitespace is these six bytes) and the
/// same ids as [`hash_str`], several times faster on the long prompts of
/// agents. Most of a virtual-time run is spent here.
pub fn tokenize_into(text: &str, vocab: u32, out: &mut Vec<u32>) {
    let vocab = u64::from(vocab.max(1));
    if !text.is_ascii() {
        out.extend(
            text.split_whitespace()
                .map(|word| (hash_str(word) % vocab) as u32),
        );
        return;
    }
    // Most words are a few letters and a space.
    out.reserve(text.len() / 6);
    let mut hash = FNV1A_START;
    let mut in_word = false;
    for byte in text.bytes() {
        if matches!(byte, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r') {
            if in_word {
                out.push((hash % vocab) as u32);
                hash = FNV1A_START;
                in_word = false;
            }
        } else {
            hash = fnv1a_step(hash, byte);
            in_word = true;
        }
    }
    if in_word {
        out.push((hash % vocab) as u32);
    }
}

/// The words the simulated model "says" (token id → WORDS[id mod len]).
const WORDS: [&str; 64] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "model", "token", "batch",
    "cache", "block", "prefill", "decode", "latency", "replica", "capacity", "request", "stream",
    "engine", "queue", "sample", "answer",
];

/// The text of a generated token: one word with a leading space.
pub fn token_text(token: u32) -> &'static str {
    // Leading-space variants, so the hot path does not allocate.
    const SPACED: [&str; 64] = [
        " the",
        " of",
        " and",
        " to",
        " in",
        " is",
        " that",
        " for",
        " it",
        " as",
        " was",
        " with",
        " be",
        " by",
        " on",
        " not",
        " he",
        " this",
        " are",
        " or",
        " his",
        " from",
        " at",
        " which",
        " but",
        " have",
        " an",
        " had",
        " they",
        " you",
        " were",
        " their",
        " one",
        " all",
        " we",
        " can",
        " her",
        " has",
        " there",
        " been",
        " if",
        " more",
        " when",
        " will",
        " would",
        " who",
        " so",
        " no",
        " model",
        " token",
        " batch",
        " cache",
        " block",
        " prefill",
        " decode",
        " latency",
        " replica",
        " capacity",
        " request",
        " stream",
        " engine",
        " queue",
        " sample",
        " answer",
    ];
    SPACED[token as usize % SPACED.len()]
}

/// The bare word of a generated token.
pub fn token_word(token: u32) -> &'static str {
    WORDS[token as usize % WORDS.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_path_splits_exactly_as_split_whitespace() {
        let reference = |text: &str| -> Vec<u32> {
            text.split_whitespace()
                .map(|w| (hash_str(w) % 32_000) as u32)
                .collect()
        };
        for text in [
            "",
            " ",
            "one",
            "  two  words ",
            "tab\tnew\nline\rcr\x0bvt\x0cff end",
            "\x1cnot\x1fspace",
            "é non-ascii\u{a0}nbsp \u{2003}em-space",
            "trailing\n",
        ] {
            assert_eq!(tokenize(text, 32_000), reference(text), "{text:?}");
        }
    }

    #[test]
    fn one_word_is_one_token() {
        let ids = tokenize("  hello   world\nhello\tagain ", 128_256);
        assert_eq!(ids.len(), 4);
        assert_eq!(ids[0], ids[2], "same word, same id");
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|&t| t < 128_256));
        assert!(tokenize(" \n\t", 100).is_empty());
    }

    #[test]
    fn ids_are_stable() {
        // FNV-1a-64("hello") = 0xa430d84680aabd0b.
        assert_eq!(
            tokenize("hello", u32::MAX),
            vec![(0xa430_d846_80aa_bd0b_u64 % u64::from(u32::MAX)) as u32]
        );
    }

    #[test]
    fn output_text_retokenizes_to_the_same_count() {
        let text: String = (0..100u32).map(token_text).collect();
        assert_eq!(tokenize(&text, 32_000).len(), 100);
        for t in 0..64 {
            assert_eq!(token_text(t).trim_start(), token_word(t));
        }
    }
}
