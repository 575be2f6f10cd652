//! Rendering prompt segments to text or token ids (pure, deterministic).
//!
//! Prompts are sized in tokens, but a client cannot tokenize for every
//! server. So text is built from a fixed vocabulary of [`VOCABULARY`]'s 1024
//! common English words, each written with a leading space (`" the"`), each
//! of which is a single token in the Llama-3, GPT-4 (cl100k) and GPT-4o
//! (o200k) tokenizers, with and without the space (checked against those
//! tokenizers when the list was made). BPE pre-tokenizers split at a space
//! before a letter, so `n` words are `n` tokens there, not merely about `n`.
//! Tokenizers of other families (SentencePiece Llama-2, Mistral, ...) may
//! split some words: for real servers the request records the server's
//! reported `usage` as the truth, and the card shows requested vs actual.
//! The built-in simulator tokenizes text by splitting on whitespace (one word
//! = one token), so for it requested lengths are exact.
//!
//! Content rules (what makes a prefix cache hit exactly where it should):
//! - `Prefix { group }`: words from a generator seeded by the group, so the
//!   same group renders the same bytes in every task and distinct groups
//!   differ from their first word on (the first two words spell the group
//!   number in base 1024), so their first KV block already differs.
//! - `Unique { key }`: the first three words spell the low 30 bits of the key
//!   in base 1024 (a marker), the rest come from a generator seeded by the
//!   key; two unique segments (keys are hashes) diverge within three tokens
//!   instead of sharing a lucky common prefix.
//! - Rendering is concatenation: `render(a ++ b) == render(a) + render(b)`,
//!   so a conversation's history re-sent next turn is a byte-identical
//!   prefix of the new prompt.
//!
//! Token ids follow the same rules with ids in `TOKEN_ID_MIN..=TOKEN_ID_MAX`
//! (1000..=30000: ordinary tokens in every 32k+ vocabulary, clear of the
//! special and byte tokens at the low end).
//!
//! - `Text`: dataset text, verbatim (token ids: one stable id per
//!   whitespace-separated word, hashed from the word).
//!
//! [`render_flat_text`] joins messages with one `"\n"`; that newline is one
//! extra token per message boundary for BPE tokenizers and none for the
//! simulator. No role markup is added: a `completions` target gets plain text.

use std::sync::LazyLock;

use super::{Message, Segment, mix};

/// Lowest token id [`render_token_ids`] emits.
pub const TOKEN_ID_MIN: u32 = 1000;
/// Highest token id [`render_token_ids`] emits.
pub const TOKEN_ID_MAX: u32 = 30_000;

/// Words of the marker that starts a unique segment (base-1024 digits of the key).
const UNIQUE_MARKER_SYMBOLS: u32 = 3;
/// Words of the marker that starts a shared prefix (base-1024 digits of the group).
const PREFIX_MARKER_SYMBOLS: u32 = 2;
/// Domain tags so `Prefix { group: 5 }` and `Unique { key: 5 }` differ.
const PREFIX_STREAM: u64 = 0x5052_4546_4958; // "PREFIX"
const UNIQUE_STREAM: u64 = 0x0055_4E49_5155_4500; // "UNIQUE"

/// Text whose length in tokens is about `segment.tokens()` for common BPE
/// tokenizers; the rule is documented in the module.
pub fn render_text(segments: &[Segment]) -> String {
    let tokens: usize = segments.iter().map(|s| s.tokens() as usize).sum();
    let mut text = String::with_capacity(tokens * 7);
    for segment in segments {
        push_text(&mut text, segment);
    }
    text
}

/// The ids synthetic token-id prompts are drawn from: ordinary tokens of
/// the model's vocabulary, clear of the special and byte tokens at the low
/// end and of the added tokens most vocabularies put at the top.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenIdRange {
    pub min: u32,
    pub max: u32,
}

impl TokenIdRange {
    /// `TOKEN_ID_MIN..=TOKEN_ID_MAX`: inside every 32k+ vocabulary.
    pub const DEFAULT: TokenIdRange = TokenIdRange {
        min: TOKEN_ID_MIN,
        max: TOKEN_ID_MAX,
    };

    /// The range for a vocabulary of `size` ids (`0..size`): the default when
    /// it fits, else from an eighth of the vocabulary to 95% of it; `None`
    /// when that leaves fewer than 256 ids (too few to tell prompts apart).
    pub fn for_vocabulary(size: u32) -> Option<TokenIdRange> {
        if size > TOKEN_ID_MAX {
            return Some(Self::DEFAULT);
        }
        let min = TOKEN_ID_MIN.min(size / 8);
        let max = (u64::from(size) * 95 / 100) as u32;
        let max = max.saturating_sub(1);
        (max > min && max - min >= 255).then_some(TokenIdRange { min, max })
    }

    fn alphabet(self) -> u64 {
        u64::from(self.max - self.min + 1)
    }
}

/// Token ids for `completions` targets that accept them, in the default range.
pub fn render_token_ids(segments: &[Segment]) -> Vec<u32> {
    render_token_ids_in(segments, TokenIdRange::DEFAULT)
}

/// Token ids in `range` (same sharing rules as text).
pub fn render_token_ids_in(segments: &[Segment], range: TokenIdRange) -> Vec<u32> {
    let tokens: usize = segments.iter().map(|s| s.tokens() as usize).sum();
    let mut ids = Vec::with_capacity(tokens);
    let alphabet = range.alphabet();
    for segment in segments {
        if let Segment::Text { text, .. } = segment {
            // No tokenizer here: one stable id per word, so the simulator
            // (one word = one token) sees the same length and sharing.
            ids.extend(
                text.split_whitespace()
                    .map(|word| range.min + (super::hash_str(word) % alphabet) as u32),
            );
            continue;
        }
        // Symbols are < alphabet ≤ 29001, so the cast cannot truncate.
        ids.extend(Symbols::new(segment, alphabet).map(|s| range.min + s as u32));
    }
    ids
}

/// All messages flattened to one text prompt (for `completions` targets):
/// each message's text, joined by `"\n"`.
pub fn render_flat_text(messages: &[Message]) -> String {
    let tokens: usize = messages
        .iter()
        .flat_map(|m| &m.segments)
        .map(|s| s.tokens() as usize)
        .sum();
    let mut text = String::with_capacity(tokens * 7 + messages.len());
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        for segment in &message.segments {
            push_text(&mut text, segment);
        }
    }
    text
}

/// Append one segment's text (the word approximation) to `text`.
pub(crate) fn push_text(text: &mut String, segment: &Segment) {
    push_text_with(text, segment, &VOCABULARY);
}

/// Append one segment's text made of `words` (each with its leading space).
fn push_text_with<W: AsRef<str>>(text: &mut String, segment: &Segment, words: &[W]) {
    if let Segment::Text { text: verbatim, .. } = segment {
        text.push_str(verbatim);
        return;
    }
    for symbol in Symbols::new(segment, words.len() as u64) {
        text.push_str(words[symbol as usize].as_ref());
    }
}

/// The words of [`VOCABULARY`] that one server's tokenizer counts as exactly
/// one token each (found through its tokenize endpoint): text made of them is
/// `n` tokens for `n` words on that server, whatever its vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordList {
    words: Vec<&'static str>,
}

impl WordList {
    /// Fewest words a list may have: fewer would make prompts repetitive
    /// enough for a prefix cache to find shared blocks by chance.
    pub const MIN_WORDS: usize = 256;

    /// The words whose count in `counts` (by index into [`VOCABULARY`]) is
    /// exactly one; `None` when fewer than [`Self::MIN_WORDS`] are.
    pub fn single_token_words(counts: &[Option<usize>]) -> Option<WordList> {
        let words: Vec<&'static str> = VOCABULARY
            .iter()
            .zip(counts)
            .filter(|(_, n)| **n == Some(1))
            .map(|(w, _)| w.as_str())
            .collect();
        (words.len() >= Self::MIN_WORDS).then_some(WordList { words })
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Like [`render_text`], with these words.
    pub fn render_text(&self, segments: &[Segment]) -> String {
        let mut text = String::new();
        for segment in segments {
            push_text_with(&mut text, segment, &self.words);
        }
        text
    }

    /// Like [`render_flat_text`], with these words.
    pub fn render_flat_text(&self, messages: &[Message]) -> String {
        let mut text = String::new();
        for (i, message) in messages.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            for segment in &message.segments {
                push_text_with(&mut text, segment, &self.words);
            }
        }
        text
    }
}

/// The symbol stream of one segment: numbers in `0..alphabet`, first the
/// marker digits of the segment's identity, then generator output.
struct Symbols {
    alphabet: u64,
    remaining: u32,
    /// Marker digits still to emit, and the number they spell.
    marker_left: u32,
    marker_value: u64,
    /// SplitMix64 state: tiny, fast, and stable by definition.
    state: u64,
}

impl Symbols {
    fn new(segment: &Segment, alphabet: u64) -> Self {
        let (identity, stream, marker) = match *segment {
            Segment::Prefix { group, .. } => {
                (u64::from(group), PREFIX_STREAM, PREFIX_MARKER_SYMBOLS)
            }
            Segment::Unique { key, .. } => (key, UNIQUE_STREAM, UNIQUE_MARKER_SYMBOLS),
            // Text is rendered verbatim before a symbol stream is made.
            Segment::Text { .. } => (0, UNIQUE_STREAM, 0),
        };
        Symbols {
            alphabet,
            remaining: segment.tokens(),
            marker_left: marker,
            marker_value: identity,
            state: mix(stream, identity),
        }
    }
}

impl Iterator for Symbols {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        if self.marker_left > 0 {
            self.marker_left -= 1;
            let digit = self.marker_value % self.alphabet;
            self.marker_value /= self.alphabet;
            return Some(digit);
        }
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // Multiply-high maps 64 random bits onto 0..alphabet without a division.
        Some(((u128::from(z) * u128::from(self.alphabet)) >> 64) as u64)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

/// The words prompts are made of, each with its leading space. Every entry is
/// one token in the Llama-3, cl100k and o200k tokenizers, with or without the
/// space; the order is fixed forever (changing it changes every prompt).
/// The list is data, `vocabulary.txt` beside this file, one word a line.
pub static VOCABULARY: LazyLock<Vec<String>> = LazyLock::new(|| {
    include_str!("vocabulary.txt")
        .lines()
        .map(|word| format!(" {word}"))
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Role;
    use std::collections::HashSet;

    fn words(text: &str) -> Vec<&str> {
        text.split_whitespace().collect()
    }

    #[test]
    fn word_lists_keep_the_single_token_words() {
        let mut counts = vec![Some(2); VOCABULARY.len()];
        assert_eq!(WordList::single_token_words(&counts), None);
        for n in counts.iter_mut().step_by(2) {
            *n = Some(1);
        }
        let list = WordList::single_token_words(&counts).unwrap();
        assert_eq!(list.len(), 512);
        let text = list.render_text(&[Segment::Unique {
            key: 5,
            tokens: 300,
        }]);
        assert_eq!(text.split_whitespace().count(), 300);
        let allowed: std::collections::HashSet<&str> =
            VOCABULARY.iter().step_by(2).map(|w| w.trim()).collect();
        assert!(text.split_whitespace().all(|w| allowed.contains(w)));
    }

    #[test]
    fn vocabulary_is_distinct_single_words_with_leading_space() {
        // 1024 words: the markers are base-1024 digits.
        assert_eq!(VOCABULARY.len(), 1024);
        let distinct: HashSet<&str> = VOCABULARY.iter().map(String::as_str).collect();
        assert_eq!(distinct.len(), VOCABULARY.len());
        for word in VOCABULARY.iter() {
            let bare = word.strip_prefix(' ').expect("leading space");
            assert!(
                !bare.is_empty() && bare.chars().all(|c| c.is_ascii_lowercase()),
                "{word:?}"
            );
        }
    }

    #[test]
    fn text_has_exactly_the_requested_words() {
        for tokens in [0, 1, 2, 3, 4, 17, 1000] {
            let segments = [
                Segment::Prefix { group: 3, tokens },
                Segment::Unique {
                    key: 99,
                    tokens: tokens + 1,
                },
            ];
            let text = render_text(&segments);
            assert_eq!(words(&text).len(), (2 * tokens + 1) as usize);
            assert_eq!(render_token_ids(&segments).len(), (2 * tokens + 1) as usize);
        }
    }

    #[test]
    fn rendering_is_concatenation() {
        let a = Segment::Prefix {
            group: 1,
            tokens: 50,
        };
        let b = Segment::Unique { key: 7, tokens: 30 };
        let c = Segment::Unique { key: 8, tokens: 20 };
        let whole = render_text(&[a.clone(), b.clone(), c.clone()]);
        let parts = render_text(std::slice::from_ref(&a))
            + &render_text(std::slice::from_ref(&b))
            + &render_text(std::slice::from_ref(&c));
        assert_eq!(whole, parts);
        let ids = render_token_ids(&[a.clone(), b.clone(), c.clone()]);
        let id_parts: Vec<u32> = [a, b, c]
            .iter()
            .flat_map(|s| render_token_ids(std::slice::from_ref(s)))
            .collect();
        assert_eq!(ids, id_parts);
    }

    #[test]
    fn longer_segment_extends_shorter_one() {
        let short = render_text(&[Segment::Unique { key: 5, tokens: 10 }]);
        let long = render_text(&[Segment::Unique { key: 5, tokens: 40 }]);
        assert!(long.starts_with(&short));
    }

    #[test]
    fn prefix_groups_are_stable_and_differ_from_the_first_word() {
        let render = |group| render_text(&[Segment::Prefix { group, tokens: 64 }]);
        assert_eq!(render(2), render(2));
        let firsts: HashSet<String> = (0..16).map(|g| words(&render(g))[0].to_string()).collect();
        assert_eq!(firsts.len(), 16, "every group starts with its own word");
        let ids = |group| render_token_ids(&[Segment::Prefix { group, tokens: 64 }]);
        assert_eq!(ids(4), ids(4));
        assert_ne!(ids(4)[0], ids(5)[0]);
    }

    #[test]
    fn unique_segments_diverge_within_the_marker() {
        let keys: Vec<u64> = (0..2000u64).map(|i| mix(42, i)).collect();
        let texts: Vec<String> = keys
            .iter()
            .map(|&key| render_text(&[Segment::Unique { key, tokens: 3 }]))
            .collect();
        let distinct: HashSet<&String> = texts.iter().collect();
        assert_eq!(
            distinct.len(),
            keys.len(),
            "two unique segments share their first 3 words"
        );
        // The marker spells the key: consecutive keys differ in the first word.
        let first = |key| words(&render_text(&[Segment::Unique { key, tokens: 5 }]))[0].to_string();
        assert_ne!(first(10), first(11));
    }

    #[test]
    fn prefix_and_unique_with_same_number_differ() {
        let p = render_text(&[Segment::Prefix {
            group: 5,
            tokens: 32,
        }]);
        let u = render_text(&[Segment::Unique { key: 5, tokens: 32 }]);
        assert_ne!(p, u);
    }

    #[test]
    fn token_ids_stay_in_range_and_use_it() {
        let small = TokenIdRange::for_vocabulary(8192).unwrap();
        assert_eq!(
            small,
            TokenIdRange {
                min: 1000,
                max: 7781
            }
        );
        let in_small = render_token_ids_in(
            &[Segment::Unique {
                key: 99,
                tokens: 2000,
            }],
            small,
        );
        assert!(in_small.iter().all(|id| (1000..=7781).contains(id)));
        assert_eq!(
            TokenIdRange::for_vocabulary(128_256),
            Some(TokenIdRange::DEFAULT)
        );
        assert_eq!(TokenIdRange::for_vocabulary(300), None);
        let ids = render_token_ids(&[Segment::Unique {
            key: 1,
            tokens: 50_000,
        }]);
        assert!(
            ids.iter()
                .all(|id| (TOKEN_ID_MIN..=TOKEN_ID_MAX).contains(id))
        );
        let lo = ids.iter().filter(|id| **id < 15_500).count() as f64 / ids.len() as f64;
        assert!(
            (lo - 0.5).abs() < 0.02,
            "ids not spread over the range: {lo}"
        );
    }

    #[test]
    fn words_are_spread_over_the_vocabulary() {
        let text = render_text(&[Segment::Unique {
            key: 77,
            tokens: 20_000,
        }]);
        let distinct: HashSet<&str> = words(&text).into_iter().collect();
        assert!(
            distinct.len() > 1000,
            "only {} distinct words",
            distinct.len()
        );
    }

    #[test]
    fn flat_text_joins_messages_with_newlines() {
        let system = Message {
            role: Role::System,
            segments: vec![Segment::Prefix {
                group: 0,
                tokens: 4,
            }],
        };
        let user = Message {
            role: Role::User,
            segments: vec![Segment::Unique { key: 3, tokens: 5 }],
        };
        let flat = render_flat_text(&[system.clone(), user.clone()]);
        assert_eq!(
            flat,
            format!(
                "{}\n{}",
                render_text(&system.segments),
                render_text(&user.segments)
            )
        );
        assert_eq!(flat.lines().count(), 2);
        assert_eq!(words(&flat).len(), 9);
        assert_eq!(render_flat_text(&[]), "");
    }

    #[test]
    fn known_rendering_is_frozen() {
        // Changing the vocabulary or the generator changes every prompt and
        // invalidates comparisons with older results: make that loud.
        assert_eq!(
            render_text(&[Segment::Prefix {
                group: 1,
                tokens: 3
            }]),
            " of the face"
        );
        assert_eq!(
            render_token_ids(&[Segment::Unique {
                key: 29_002,
                tokens: 4
            }]),
            vec![1001, 1001, 1000, 14773]
        );
    }
}
