//! What a simulated model answers besides plain text (pure): how long it
//! reasons before its answer, whether the answer is a tool call, and how
//! the server groups tokens into streamed events.
//!
//! Models sized today reason before they answer (gpt-oss, Qwen3,
//! DeepSeek-R1 behind vLLM's `--reasoning-parser`), call tools, and hosted
//! APIs send several tokens per event. A client that records TTFT apart
//! from the first *output* token, reasoning tokens and tool calls needs a
//! server that plays all of this to be tested without a model. Shared by
//! the HTTP server (framed by [`super::wire`]) and the virtual-time
//! executor (`exec::virtual_time`), so one request id reasons as long, and
//! its events carry the same tokens, on either clock.
//!
//! - Reasoning is part of the output budget, as `max_completion_tokens`
//!   bounds reasoning and answer together on real servers: of a request's
//!   N generated tokens the first min(R, N) are reasoning, the rest the
//!   answer. R ≥ N leaves no answer at all, as a real server cut at its
//!   length limit mid-thought does. R is a seeded draw of the
//!   `reasoning-tokens` distribution, from the simulator's seed and the
//!   request id only. The completions API has no chat template to reason
//!   or call a tool in: its answers are all text.
//! - A call that offers tools (and does not say `tool_choice: "none"`)
//!   is answered with a call of one function, its arguments being the
//!   answer's tokens.
//! - The server buffers `tokens-per-event` tokens into one event: an event
//!   goes out when that many tokens of one kind were produced, when the
//!   kind changes (the last reasoning token ends its event: the server
//!   knows R), or at the end. An event's time is its last token's.

use super::engine::{FinishReason, RequestId};
use super::request::Api;
use crate::dist::Dist;
use crate::dist::sample_count;
use crate::hash::{mix, seeded_rng};

/// How a deployment's answers look: a preset's, changed by a target's
/// `reasoning-tokens` and `tokens-per-event` knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Answers {
    /// Tokens each request reasons before its answer; `None`: no reasoning.
    pub reasoning_tokens: Option<Dist>,
    /// Tokens per streamed event (≥ 1; 0 is taken as 1).
    pub tokens_per_event: u32,
    /// `usage.prompt_tokens_details.cached_tokens` is reported (vLLM's
    /// `--enable-prompt-tokens-details`; off by default, as in vLLM).
    pub prompt_tokens_details: bool,
}

impl Answers {
    /// A model that does not reason, one token per event (every preset's:
    /// presets are `const`s).
    pub const PLAIN: Answers = Answers {
        reasoning_tokens: None,
        tokens_per_event: 1,
        prompt_tokens_details: false,
    };
}

impl Default for Answers {
    fn default() -> Self {
        Answers::PLAIN
    }
}

/// Separates the reasoning draws from the engine's and the faults' streams.
const REASONING_SALT: u64 = 0x7EA5_0000_0000_0001;

/// R of request `id`: the reasoning tokens it plans before its answer
/// (0 without `reasoning-tokens`).
pub fn reasoning_draw(answers: &Answers, seed: u64, id: RequestId) -> u32 {
    let Some(dist) = &answers.reasoning_tokens else {
        return 0;
    };
    let mut rng = seeded_rng(mix(seed ^ REASONING_SALT, id.0));
    sample_count(dist, &mut rng)
}

/// What one generated token is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Reasoning,
    /// The answer's text.
    Content,
    /// The answer as the arguments of a tool call.
    ToolArguments,
}

impl TokenKind {
    /// Whether it belongs to the answer (what TTFO waits for).
    pub fn is_output(self) -> bool {
        self != TokenKind::Reasoning
    }
}

/// How one request answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerPlan {
    /// R: the leading generated tokens that are reasoning (the request may
    /// end before all of them).
    pub reasoning_tokens: u32,
    /// The function the answer calls, if it is a tool call.
    pub tool: Option<String>,
    /// Tokens per streamed event (≥ 1).
    pub tokens_per_event: u32,
}

impl AnswerPlan {
    /// The answer of request `id` on `api`, calling `tool` (from the
    /// call's body, see [`super::request::ParsedCall::tool`]) if any.
    pub fn for_call(
        api: Api,
        answers: &Answers,
        seed: u64,
        id: RequestId,
        tool: Option<String>,
    ) -> AnswerPlan {
        let tokens_per_event = answers.tokens_per_event.max(1);
        match api {
            Api::Completions => AnswerPlan {
                reasoning_tokens: 0,
                tool: None,
                tokens_per_event,
            },
            Api::Chat | Api::Responses => AnswerPlan {
                reasoning_tokens: reasoning_draw(answers, seed, id),
                tool,
                tokens_per_event,
            },
        }
    }

    /// A plain text answer, one token per event.
    pub fn plain() -> AnswerPlan {
        AnswerPlan {
            reasoning_tokens: 0,
            tool: None,
            tokens_per_event: 1,
        }
    }

    /// The kind of the token at `index` (0-based among the generated).
    pub fn kind(&self, index: u32) -> TokenKind {
        if index < self.reasoning_tokens {
            TokenKind::Reasoning
        } else if self.tool.is_some() {
            TokenKind::ToolArguments
        } else {
            TokenKind::Content
        }
    }

    /// Whether the token at `index` closes its event: the `tokens-per-event`
    /// th of its kind, the last reasoning token, or the last token.
    pub fn ends_event(&self, index: u32, last: bool) -> bool {
        let per_event = self.tokens_per_event.max(1);
        let first_of_kind = if index < self.reasoning_tokens {
            0
        } else {
            self.reasoning_tokens
        };
        last || index + 1 == self.reasoning_tokens || (index - first_of_kind + 1) % per_event == 0
    }

    /// Reasoning tokens among `generated` tokens.
    pub fn reasoning_of(&self, generated: u32) -> u32 {
        generated.min(self.reasoning_tokens)
    }

    /// Whether an answer of `generated` tokens has made its tool call: it
    /// has once one of its output tokens is out.
    pub fn calls_tool(&self, generated: u32) -> bool {
        self.tool.is_some() && generated > self.reasoning_tokens
    }

    /// The chat API's `finish_reason` of an answer of `generated` tokens
    /// that the engine ended for `reason`: `tool_calls` once the tool was
    /// called, even when the length limit cut it, as vLLM reports it.
    pub fn finish_reason(&self, reason: FinishReason, generated: u32) -> &'static str {
        if self.calls_tool(generated) {
            "tool_calls"
        } else {
            reason.as_str()
        }
    }

    /// Streamed events of an answer of `generated` tokens.
    pub fn events(&self, generated: u32) -> u32 {
        (0..generated)
            .filter(|&i| self.ends_event(i, i + 1 == generated))
            .count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::DistKind;

    fn answers(dist: Option<Dist>, tokens_per_event: u32) -> Answers {
        Answers {
            reasoning_tokens: dist,
            tokens_per_event,
            prompt_tokens_details: false,
        }
    }

    #[test]
    fn the_reasoning_draw_depends_on_the_seed_and_the_id_only() {
        let fixed = answers(Some(Dist::fixed(20.0)), 1);
        assert!((0..50).all(|i| reasoning_draw(&fixed, 7, RequestId(i)) == 20));
        assert_eq!(reasoning_draw(&Answers::PLAIN, 7, RequestId(3)), 0);
        let spread = answers(
            Some(Dist {
                kind: DistKind::LogNormal {
                    median: 200.0,
                    sigma: 0.5,
                },
                min: None,
                max: Some(2000.0),
            }),
            1,
        );
        let draws: Vec<u32> = (0..200)
            .map(|i| reasoning_draw(&spread, 7, RequestId(i)))
            .collect();
        let again: Vec<u32> = (0..200)
            .map(|i| reasoning_draw(&spread, 7, RequestId(i)))
            .collect();
        assert_eq!(draws, again);
        assert!(draws.iter().all(|&r| r <= 2000));
        let mut sorted = draws.clone();
        sorted.sort_unstable();
        let median = sorted[100];
        assert!((150..270).contains(&median), "median {median}");
        let other_seed: Vec<u32> = (0..200)
            .map(|i| reasoning_draw(&spread, 8, RequestId(i)))
            .collect();
        assert_ne!(draws, other_seed);
    }

    #[test]
    fn completions_answer_in_plain_text() {
        let reasoning = answers(Some(Dist::fixed(20.0)), 4);
        let plan = AnswerPlan::for_call(
            Api::Completions,
            &reasoning,
            0,
            RequestId(0),
            Some("f".into()),
        );
        assert_eq!((plan.reasoning_tokens, plan.tool), (0, None));
        assert_eq!(plan.tokens_per_event, 4);
        let chat = AnswerPlan::for_call(Api::Chat, &reasoning, 0, RequestId(0), None);
        assert_eq!(chat.reasoning_tokens, 20);
    }

    #[test]
    fn tokens_are_reasoning_then_the_answer() {
        let plan = AnswerPlan {
            reasoning_tokens: 3,
            tool: Some("get_weather".into()),
            tokens_per_event: 1,
        };
        let kinds: Vec<TokenKind> = (0..5).map(|i| plan.kind(i)).collect();
        use TokenKind::*;
        assert_eq!(
            kinds,
            [
                Reasoning,
                Reasoning,
                Reasoning,
                ToolArguments,
                ToolArguments
            ]
        );
        assert!(!plan.calls_tool(3) && plan.calls_tool(4));
        assert_eq!(plan.reasoning_of(2), 2);
        assert_eq!(plan.reasoning_of(10), 3);
        assert_eq!(plan.finish_reason(FinishReason::Length, 3), "length");
        assert_eq!(plan.finish_reason(FinishReason::Length, 4), "tool_calls");
        assert_eq!(AnswerPlan::plain().kind(0), Content);
        assert_eq!(
            AnswerPlan::plain().finish_reason(FinishReason::Stop, 9),
            "stop"
        );
    }

    #[test]
    fn events_group_tokens_of_one_kind() {
        let plan = |reasoning_tokens, tokens_per_event| AnswerPlan {
            reasoning_tokens,
            tool: None,
            tokens_per_event,
        };
        let ends = |p: &AnswerPlan, n: u32| -> Vec<u32> {
            (0..n).filter(|&i| p.ends_event(i, i + 1 == n)).collect()
        };
        // Reasoning 0..=4 in two events (the kind change ends the second),
        // then the answer 5..=10 in two.
        assert_eq!(ends(&plan(5, 4), 11), [3, 4, 8, 10]);
        assert_eq!(plan(5, 4).events(11), 4);
        // No reasoning: ceil(tokens / 4).
        assert_eq!(ends(&plan(0, 4), 10), [3, 7, 9]);
        for n in 1..40 {
            assert_eq!(plan(0, 4).events(n), n.div_ceil(4), "{n} tokens");
            assert_eq!(plan(0, 1).events(n), n);
        }
        // All reasoning, cut by the length limit.
        assert_eq!(ends(&plan(20, 4), 10), [3, 7, 9]);
        // One token per event whatever the kinds.
        assert_eq!(plan(3, 1).events(7), 7);
        // An answer of one token after reasoning is an event of its own.
        assert_eq!(ends(&plan(4, 4), 5), [3, 4]);
        // 0 tokens per event is taken as 1.
        assert_eq!(plan(0, 0).events(3), 3);
    }
}
