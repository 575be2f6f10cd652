//! Rendering prompt segments to text or token ids (pure, deterministic).

use super::{Message, Segment};

/// Text whose length in tokens is about `segment.tokens()` for common BPE
/// tokenizers; the rule is documented in the module.
pub fn render_text(segments: &[Segment]) -> String {
    let _ = segments;
    todo!("workload helper")
}

/// Token ids for `completions` targets that accept them.
pub fn render_token_ids(segments: &[Segment]) -> Vec<u32> {
    let _ = segments;
    todo!("workload helper")
}

/// All messages flattened to one text prompt (for `completions` targets).
pub fn render_flat_text(messages: &[Message]) -> String {
    let _ = messages;
    todo!("workload helper")
}
