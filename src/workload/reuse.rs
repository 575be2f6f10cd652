//! Reuse potential (pure): the share of prompt tokens an ideal, unlimited
//! prefix cache would have served for a run's calls, in the order they were
//! sent.
//!
//! A call's prompt is a chain of segments (its messages' segments in order,
//! each message's first segment carrying its role). A segment counts as a
//! potential hit when the whole chain up to and including it was already
//! sent by an earlier call of the run; the first segment that was not ends
//! the call's hits, whatever follows. After a call is counted its whole
//! chain is inserted. So a shared system prompt hits from the second call of
//! its group on, a conversation's history hits on every turn after the
//! first, and the siblings of an agent's fan-out hit on their common context
//! but not on their own instructions.
//!
//! What an ideal cache means here: unlimited (nothing is ever evicted), one
//! cache for the whole endpoint (no routing), matching at segment
//! granularity (a real engine matches whole KV blocks, and never the last
//! token of a prompt, so it realizes somewhat less even when nothing is
//! evicted). Tool definitions and the chat template's own tokens are not in
//! the segments and not counted.
//!
//! With the calls' times ([`ReuseAccumulator::call_at`]) it also counts the
//! *timely* hits: a segment whose chain an earlier call had sent, but whose
//! prefill had not finished (its first token had not come) when this call
//! was sent, cannot have been served from any cache. The siblings of a
//! fan-out, sent together, offer their shared context to each other only in
//! the ideal count.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{CallSpec, Role, Segment};
use crate::hash::{hash_str, mix};

/// Prompt tokens and the share of them an ideal prefix cache would serve.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ReuseTally {
    /// Calls counted.
    pub calls: u64,
    /// Their planned prompt tokens (the sum of their segments).
    pub prompt_tokens: u64,
    /// Of those, the tokens of leading segments an earlier call had sent.
    pub potential_hit_tokens: u64,
    /// Of those, the tokens whose earlier call had also finished its
    /// prefill when this one was sent; `None`: not computed (an older
    /// journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timely_hit_tokens: Option<u64>,
}

impl ReuseTally {
    /// `potential_hit_tokens / prompt_tokens`; `None` without prompt tokens.
    pub fn fraction(&self) -> Option<f64> {
        (self.prompt_tokens > 0)
            .then(|| self.potential_hit_tokens as f64 / self.prompt_tokens as f64)
    }

    /// `timely_hit_tokens / prompt_tokens`, when both are known.
    pub fn timely_fraction(&self) -> Option<f64> {
        let timely = self.timely_hit_tokens?;
        (self.prompt_tokens > 0).then(|| timely as f64 / self.prompt_tokens as f64)
    }

    fn add(&mut self, prompt_tokens: u32, hits: Hits) {
        self.calls += 1;
        self.prompt_tokens += u64::from(prompt_tokens);
        self.potential_hit_tokens += u64::from(hits.ideal);
        *self.timely_hit_tokens.get_or_insert(0) += u64::from(hits.timely);
    }
}

/// One call's potential hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hits {
    /// Leading tokens an earlier call had sent.
    pub ideal: u32,
    /// Of those, the ones whose earlier call had finished its prefill.
    pub timely: u32,
}

/// The ideal cache: every prefix chain sent so far, by its chained hash,
/// with the earliest instant a call's prefill had computed it.
#[derive(Debug, Clone, Default)]
pub struct ReuseAccumulator {
    seen: HashMap<u64, f64>,
    tally: ReuseTally,
}

const ROOT: u64 = 0x5245_5553_455F_0001; // "REUSE_"

fn role_code(role: Role) -> u64 {
    match role {
        Role::System => 1,
        Role::User => 2,
        Role::Assistant => 3,
        Role::ToolCall(n) => (4 << 32) | u64::from(n),
        Role::ToolResult(n) => (5 << 32) | u64::from(n),
    }
}

fn segment_code(segment: &Segment) -> u64 {
    match segment {
        Segment::Prefix { group, tokens } => mix(mix(1, u64::from(*group)), u64::from(*tokens)),
        Segment::Unique { key, tokens } => mix(mix(2, *key), u64::from(*tokens)),
        Segment::Text { text, .. } => mix(3, hash_str(text)),
    }
}

impl ReuseAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next call sent: returns the tokens an ideal cache would
    /// have served it, then remembers its chain. `counted`: whether the
    /// call is in the tally (a warmup call fills the cache but is not
    /// measured). Without times: every earlier call counts as prefilled.
    pub fn call(&mut self, call: &CallSpec, counted: bool) -> u32 {
        self.call_at(call, counted, 0.0, 0.0).ideal
    }

    /// [`call`](Self::call) for a call sent at `sent_ms` whose prefill was
    /// done (its first token came) at `prefilled_ms`: an earlier call's
    /// chain is a timely hit only if it was prefilled by `sent_ms`.
    pub fn call_at(
        &mut self,
        call: &CallSpec,
        counted: bool,
        sent_ms: f64,
        prefilled_ms: f64,
    ) -> Hits {
        let mut chain = ROOT;
        let mut hits = Hits::default();
        let mut prompt = 0u32;
        let (mut chained, mut timely) = (true, true);
        for message in &call.messages {
            for (i, segment) in message.segments.iter().enumerate() {
                if i == 0 {
                    chain = mix(chain, role_code(message.role));
                }
                chain = mix(chain, segment_code(segment));
                let tokens = segment.tokens();
                prompt = prompt.saturating_add(tokens);
                match self.seen.get_mut(&chain) {
                    Some(at) if chained => {
                        hits.ideal = hits.ideal.saturating_add(tokens);
                        timely &= *at <= sent_ms;
                        if timely {
                            hits.timely = hits.timely.saturating_add(tokens);
                        }
                        *at = at.min(prefilled_ms);
                    }
                    Some(at) => *at = at.min(prefilled_ms),
                    None => {
                        chained = false;
                        self.seen.insert(chain, prefilled_ms);
                    }
                }
            }
        }
        if counted {
            self.tally.add(prompt, hits);
        }
        hits
    }

    /// What the counted calls add up to.
    pub fn tally(&self) -> ReuseTally {
        self.tally
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::workload::Message;

    fn call(messages: Vec<(Role, Vec<Segment>)>) -> CallSpec {
        let messages: Vec<Message> = messages
            .into_iter()
            .map(|(role, segments)| Message { role, segments })
            .collect();
        let input_tokens = messages
            .iter()
            .flat_map(|m| &m.segments)
            .map(Segment::tokens)
            .sum();
        CallSpec {
            messages,
            input_tokens,
            output_tokens: 10,
            tools: None,
            answer_in_words: false,
        }
    }

    fn prefix(group: u32, tokens: u32) -> Segment {
        Segment::Prefix { group, tokens }
    }

    fn unique(key: u64, tokens: u32) -> Segment {
        Segment::Unique { key, tokens }
    }

    #[test]
    fn unique_prompts_have_no_potential() {
        let mut acc = ReuseAccumulator::new();
        for key in 0..50 {
            assert_eq!(
                acc.call(&call(vec![(Role::User, vec![unique(key, 100)])]), true),
                0
            );
        }
        let tally = acc.tally();
        assert_eq!(tally.calls, 50);
        assert_eq!(tally.prompt_tokens, 5000);
        assert_eq!(tally.potential_hit_tokens, 0);
        assert_eq!(tally.fraction(), Some(0.0));
        assert_eq!(ReuseTally::default().fraction(), None);
    }

    #[test]
    fn a_shared_system_prompt_hits_from_the_second_call_of_its_group() {
        let mut acc = ReuseAccumulator::new();
        let of = |group, key| {
            call(vec![
                (Role::System, vec![prefix(group, 400)]),
                (Role::User, vec![unique(key, 100)]),
            ])
        };
        assert_eq!(acc.call(&of(0, 1), true), 0);
        assert_eq!(acc.call(&of(0, 2), true), 400);
        assert_eq!(acc.call(&of(1, 3), true), 0, "another group is cold");
        assert_eq!(acc.call(&of(1, 4), true), 400);
        // The same prefix under another role is another prompt.
        let as_user = call(vec![(Role::User, vec![prefix(0, 400), unique(5, 100)])]);
        assert_eq!(acc.call(&as_user, true), 0);
        assert_eq!(acc.tally().potential_hit_tokens, 800);
        assert_eq!(acc.tally().prompt_tokens, 5 * 500);
    }

    #[test]
    fn prefixes_chain_a_segment_counts_only_after_its_whole_prefix() {
        let mut acc = ReuseAccumulator::new();
        let (a, b, c) = (unique(1, 10), unique(2, 20), unique(3, 30));
        acc.call(
            &call(vec![(Role::User, vec![a.clone(), b.clone(), c.clone()])]),
            false,
        );
        // `b` and `c` were sent, but after `a`, not after `x`.
        let other_start = call(vec![(Role::User, vec![unique(9, 5), b.clone(), c.clone()])]);
        assert_eq!(acc.call(&other_start, true), 0);
        // A diverging middle ends the hits: `c` after `x` is new.
        let middle = call(vec![(Role::User, vec![a.clone(), unique(8, 7), c.clone()])]);
        assert_eq!(acc.call(&middle, true), 10);
        // The first chain again, grown: all of it hits, the growth does not.
        let grown = call(vec![(Role::User, vec![a, b, c, unique(4, 40)])]);
        assert_eq!(acc.call(&grown, true), 60);
        // The warmup call filled the cache but is not counted.
        let tally = acc.tally();
        assert_eq!(tally.calls, 3);
        assert_eq!(tally.prompt_tokens, 55 + 47 + 100);
        assert_eq!(tally.potential_hit_tokens, 70);
    }

    #[test]
    fn message_boundaries_are_part_of_the_chain() {
        let mut acc = ReuseAccumulator::new();
        let (a, b) = (unique(1, 10), unique(2, 20));
        acc.call(&call(vec![(Role::User, vec![a.clone(), b.clone()])]), true);
        let split = call(vec![(Role::User, vec![a]), (Role::Assistant, vec![b])]);
        assert_eq!(
            acc.call(&split, true),
            10,
            "`b` now opens a message of its own"
        );
    }

    #[test]
    fn a_fan_out_of_siblings_shares_its_context_not_its_instructions() {
        let mut acc = ReuseAccumulator::new();
        let context = vec![unique(100, 3000), unique(101, 500)];
        let sibling = |instruction: u64| {
            let mut user = context.clone();
            user.push(unique(instruction, 16));
            call(vec![
                (Role::System, vec![prefix(7, 200)]),
                (Role::User, user),
            ])
        };
        // Four parallel calls of one step, sent in this order.
        let hits: Vec<u32> = (0..4).map(|i| acc.call(&sibling(i), true)).collect();
        assert_eq!(hits, vec![0, 3700, 3700, 3700]);
        let tally = acc.tally();
        assert_eq!(tally.prompt_tokens, 4 * 3716);
        assert_eq!(tally.potential_hit_tokens, 3 * 3700);
        let expected = 3.0 * 3700.0 / (4.0 * 3716.0);
        assert!((tally.fraction().unwrap() - expected).abs() < 1e-12);
        assert_eq!(
            tally.timely_hit_tokens,
            Some(3 * 3700),
            "no times: all in time"
        );
    }

    #[test]
    fn siblings_sent_together_hit_in_time_only_after_a_prefill() {
        let mut acc = ReuseAccumulator::new();
        let context = vec![unique(100, 3000)];
        let sibling = |instruction: u64| {
            let mut user = context.clone();
            user.push(unique(instruction, 16));
            call(vec![(Role::User, user)])
        };
        // A step of three sent at 0 ms, each prefilled by 80 ms.
        let step: Vec<Hits> = (0..3)
            .map(|i| acc.call_at(&sibling(i), true, 0.0, 80.0))
            .collect();
        assert_eq!(
            step,
            vec![
                Hits::default(),
                Hits {
                    ideal: 3000,
                    timely: 0
                },
                Hits {
                    ideal: 3000,
                    timely: 0
                },
            ]
        );
        // The next step, sent at 200 ms after the tool ran: in time.
        let next = acc.call_at(&sibling(9), true, 200.0, 260.0);
        assert_eq!(
            next,
            Hits {
                ideal: 3000,
                timely: 3000
            }
        );
        let tally = acc.tally();
        assert_eq!(tally.potential_hit_tokens, 9000);
        assert_eq!(tally.timely_hit_tokens, Some(3000));
        assert!(tally.timely_fraction().unwrap() < tally.fraction().unwrap());
    }

    #[test]
    fn text_segments_match_by_content() {
        let mut acc = ReuseAccumulator::new();
        let text = |s: &str| Segment::text(Arc::from(s));
        acc.call(
            &call(vec![(
                Role::User,
                vec![text("you are a helpful assistant"), text("hi")],
            )]),
            true,
        );
        let again = call(vec![(
            Role::User,
            vec![text("you are a helpful assistant"), text("bye")],
        )]);
        assert_eq!(
            acc.call(&again, true),
            text("you are a helpful assistant").tokens()
        );
    }
}
