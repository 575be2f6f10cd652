//! Exact prompt sizing with the served model's own tokenizer
//! (`tokenizer "tokenizer.json"` on a target; cargo feature `tokenizer`).
//!
//! Without a tokenizer, [`super::prompt`] sizes synthetic text by words (one
//! common English word ≈ one token) and the server's reported `usage` is the
//! truth. With one, every synthetic segment (`Prefix`, `Unique`) is cut so it
//! adds *exactly* its planned number of tokens to the message text before it:
//!
//! 1. render more of the segment's words than it has tokens (words are at
//!    least one token each in every tokenizer met so far; if not, render more),
//! 2. encode the message so far plus those words, and cut the text at the end
//!    byte offset of the token that reaches the goal (so the cut text is a
//!    substring of the same words, never decoded back from ids),
//! 3. re-encode the cut text and check the count; a BPE merge across the cut
//!    can shift it by one, so the neighbouring cuts (±1, ±2 tokens) are tried.
//!
//! Guarantee: encoding a rendered message's content (no special tokens) gives
//! exactly the sum of its synthetic segments' tokens plus the exact count of
//! its verbatim dataset text. The chat template's own tokens, and the one
//! token a tokenizer may merge differently where the template meets the
//! content, are outside it: the server's reported usage records those. If no
//! cut within ±2 tokens re-encodes exactly (not seen in practice), the
//! segment falls back to the word approximation.
//!
//! A prefix segment at the start of a message depends only on its group and
//! length, so it renders to the same bytes in every task (a prefix cache hits);
//! those texts are cached, since every task of a group asks for them.
//! Dataset text stays verbatim. The work happens when a request body is
//! built, before its scheduled send, outside the timing path.

use std::sync::Arc;

use crate::data::tokenizer::PrefixTexts;
pub use crate::data::tokenizer::{PromptTokenizer, TokenizerError};

use super::{Message, Segment, prompt};

/// Cuts tried around the goal, in order: a merge across the cut shifts the
/// count by one, rarely two.
const CUT_SHIFTS: [isize; 5] = [0, 1, -1, 2, -2];
/// Rounds of "render twice as many words" before giving up on a segment.
const MAX_WIDEN_ROUNDS: usize = 6;

impl PromptTokenizer {
    /// One message's text, each synthetic segment exactly its planned tokens
    /// (the rule is in the module doc).
    pub fn render_text(&self, segments: &[Segment]) -> String {
        let mut text = String::new();
        let mut tokens_so_far = 0usize;
        for (i, segment) in segments.iter().enumerate() {
            match segment {
                Segment::Text { text: verbatim, .. } => {
                    text.push_str(verbatim);
                    tokens_so_far = self.count(&text).unwrap_or(tokens_so_far);
                }
                Segment::Prefix { group, tokens } if i == 0 => {
                    let (piece, count) = self.prefix_text(*group, *tokens, segment);
                    text.push_str(&piece);
                    tokens_so_far = count;
                }
                _ => {
                    let goal = tokens_so_far + segment.tokens() as usize;
                    match self.extend_to(&text, segment, goal) {
                        Some(piece) => {
                            text.push_str(&piece);
                            tokens_so_far = goal;
                        }
                        None => {
                            prompt::push_text(&mut text, segment);
                            tokens_so_far = self.count(&text).unwrap_or(goal);
                        }
                    }
                }
            }
        }
        text
    }

    /// All messages flattened for `completions`, joined by `"\n"` like
    /// [`prompt::render_flat_text`] (each message exact, the newlines extra).
    pub fn render_flat_text(&self, messages: &[Message]) -> String {
        messages
            .iter()
            .map(|m| self.render_text(&m.segments))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn prefix_text(&self, group: u32, tokens: u32, segment: &Segment) -> (Arc<str>, usize) {
        let key = (group, tokens);
        if let Some((text, count)) = self.lock_prefixes().get(&key) {
            return (Arc::clone(text), *count);
        }
        let entry: (Arc<str>, usize) = match self.extend_to("", segment, tokens as usize) {
            Some(piece) => (piece.into(), tokens as usize),
            None => {
                let mut approx = String::new();
                prompt::push_text(&mut approx, segment);
                let count = self.count(&approx).unwrap_or(tokens as usize);
                (approx.into(), count)
            }
        };
        self.lock_prefixes().insert(key, entry.clone());
        entry
    }

    fn lock_prefixes(&self) -> std::sync::MutexGuard<'_, PrefixTexts> {
        // The map only ever holds finished entries: a panic elsewhere cannot leave it torn.
        self.prefixes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Text to append to `before` (of any length in tokens) so the whole
    /// encodes to exactly `goal` tokens, made of `segment`'s words; `None`
    /// when no cut near the goal re-encodes exactly.
    fn extend_to(&self, before: &str, segment: &Segment, goal: usize) -> Option<String> {
        let wanted = segment.tokens() as usize;
        if wanted == 0 {
            return Some(String::new());
        }
        let mut words = wanted + wanted / 4 + 8;
        for _ in 0..MAX_WIDEN_ROUNDS {
            let mut text = before.to_string();
            prompt::push_text(&mut text, &with_tokens(segment, words));
            let offsets = self.offsets(&text)?;
            if offsets.len() < goal {
                words = words.saturating_mul(2);
                continue;
            }
            for shift in CUT_SHIFTS {
                let Some(end_token) = goal.checked_add_signed(shift) else {
                    continue;
                };
                if end_token == 0 || end_token > offsets.len() {
                    continue;
                }
                let cut = offsets[end_token - 1].1;
                if cut <= before.len() || !text.is_char_boundary(cut) {
                    continue;
                }
                if self.count(&text[..cut]) == Some(goal) {
                    return Some(text[before.len()..cut].to_string());
                }
            }
            return None;
        }
        None
    }
}

/// `segment` with another length (the same words, more or fewer of them).
fn with_tokens(segment: &Segment, words: usize) -> Segment {
    let tokens = u32::try_from(words).unwrap_or(u32::MAX);
    match segment {
        Segment::Prefix { group, .. } => Segment::Prefix {
            group: *group,
            tokens,
        },
        Segment::Unique { key, .. } => Segment::Unique { key: *key, tokens },
        Segment::Text { .. } => segment.clone(),
    }
}

#[cfg(all(test, feature = "tokenizer"))]
mod tests {
    use super::*;
    use std::path::Path;

    fn small() -> PromptTokenizer {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-small.json");
        PromptTokenizer::load(&path).unwrap()
    }

    #[test]
    fn synthetic_segments_encode_to_exactly_their_tokens() {
        let tok = small();
        for tokens in [1, 2, 7, 100, 333, 1000] {
            let text = tok.render_text(&[Segment::Unique { key: 42, tokens }]);
            assert_eq!(tok.count(&text), Some(tokens as usize), "{tokens} tokens");
            // The word approximation would be far off with this char-level BPE.
            let approx = prompt::render_text(&[Segment::Unique { key: 42, tokens }]);
            assert!(tok.count(&approx).unwrap() > tokens as usize);
        }
    }

    #[test]
    fn prefix_then_unique_is_exact_and_the_prefix_is_shared() {
        let tok = small();
        let a = tok.render_text(&[
            Segment::Prefix {
                group: 3,
                tokens: 100,
            },
            Segment::Unique { key: 1, tokens: 50 },
        ]);
        let b = tok.render_text(&[
            Segment::Prefix {
                group: 3,
                tokens: 100,
            },
            Segment::Unique { key: 2, tokens: 50 },
        ]);
        assert_eq!(tok.count(&a), Some(150));
        assert_eq!(tok.count(&b), Some(150));
        let prefix = tok.render_text(&[Segment::Prefix {
            group: 3,
            tokens: 100,
        }]);
        assert_eq!(tok.count(&prefix), Some(100));
        assert!(a.starts_with(&prefix) && b.starts_with(&prefix));
        assert_ne!(a, b);
        let other_group = tok.render_text(&[Segment::Prefix {
            group: 4,
            tokens: 100,
        }]);
        assert_ne!(prefix, other_group);
    }

    #[test]
    fn dataset_text_is_verbatim_and_counted() {
        let tok = small();
        let text: Arc<str> = "the cat sat".into();
        let rendered = tok.render_text(&[
            Segment::text(Arc::clone(&text)),
            Segment::Unique { key: 9, tokens: 20 },
        ]);
        assert!(rendered.starts_with("the cat sat"));
        let verbatim = tok.count("the cat sat").unwrap();
        assert_eq!(tok.count(&rendered), Some(verbatim + 20));
    }

    #[test]
    fn load_errors_name_the_file() {
        let err = PromptTokenizer::from_bytes(b"{not json", Path::new("t.json")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("t.json is not a tokenizer.json"),
            "{err}"
        );
        let err = PromptTokenizer::load(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot read /nonexistent/tokenizer.json")
        );
    }
}
