//! Tasks (single calls, conversations, agent loops) from a workload and seed.
//!
//! Task `i` is drawn from its own generator seeded with `mix(seed, i)`, so it
//! can be produced in any order (random access is what lets closed and open
//! runs share the generator) and never depends on how many tasks came
//! before. Each task chooses its shared-prefix group uniformly.
//!
//! Token accounting:
//! - `input-tokens` is the whole prompt of a single request and of the first
//!   turn / the initial agent context, *including* the shared prefix; the
//!   unique part is `input − prefix` but at least 1 token, so a draw below
//!   the prefix length yields `prefix + 1` tokens.
//! - Later conversation turns add a fresh `input-tokens` draw as the new user
//!   message (no prefix to subtract: the prefix is already in the history).
//! - Every call's `input_tokens` is the sum of all its segments, i.e. the
//!   exact number of words the prompt renders to.
//! - Output lengths are drawn per call from `output-tokens`, at least 1.
//!
//! Conversations re-send the whole history each turn: previous user messages
//! and *synthetic* assistant answers (unique segments as long as the planned
//! output of that turn). Using our own answer rather than the server's keeps
//! the task independent of what the server says, so turn k+1 re-sends
//! byte-identical history on every target; the price is that a real server's
//! prefix cache holds its own answer, not ours, so the cache hits up to the
//! last user message of the history, as it would after a client edits a reply.
//!
//! Agent tasks keep one growing context: `[System(prefix), User(initial,
//! growth₀, growth₁, ...)]`. Each call of step `s` sends that context plus a
//! short instruction of its own ([`AGENT_INSTRUCTION_TOKENS`] unique tokens)
//! appended to the user message, so parallel calls share everything but
//! their last few tokens, and roles still alternate (some chat templates
//! reject two user messages in a row). After each step a context-growth
//! segment (tool results, observations) is appended.
//!
//! Datasets (`workload { dataset "..." }`): task `i` is record `i mod n`
//! (`sample="sequential"`) or record `π(i mod n)` for a permutation `π` of
//! the records seeded by the stream seed (`sample="shuffle"`, the default),
//! so every record is used once before any repeats. Text prompts are sent
//! verbatim ([`Segment::Text`]); records that only give a length become a
//! synthetic unique segment of that length, less the shared prefix like
//! `input-tokens`. A workload's shared prefix is prepended as a system
//! message to text prompts (adding its tokens). The record's output length
//! is used when it has one, else a draw from `output-tokens`. With
//! `conversation` set, ShareGPT records replay their recorded exchanges as
//! turns (real user messages and real answers in the history, each turn's
//! output length the recorded answer's length, think times drawn from
//! `think-time`); records of other formats are one-turn conversations.

use std::sync::Arc;

use rand::RngExt;

use crate::config::{Agent, Conversation, DatasetSpec, Sample, Workload};

use super::{
    AgentStep, CallSpec, Message, Role, SeededRng, Segment, Task, TaskSpec, Tools, Turn, mix,
    seeded_rng,
};
use crate::data::dataset::{DataTurn, Entry, EntryPrompt};
use crate::dist::{sample_count, sample_duration};

/// Length of the per-call instruction that distinguishes the parallel calls
/// of one agent step.
pub const AGENT_INSTRUCTION_TOKENS: u32 = 16;

/// Kinds of unique content, mixed into segment keys so that e.g. turn 2's
/// user message and turn 2's answer never share a key.
#[derive(Debug, Clone, Copy)]
enum Part {
    User = 1,
    Assistant = 2,
    AgentContext = 3,
    AgentGrowth = 4,
    AgentInstruction = 5,
    /// An agent's synthetic tool-call arguments (its earlier output).
    AgentToolCall = 6,
}

/// Produces task `i` of a stream; task `i` depends only on (workload, seed,
/// i), and its content (not its shape) also on the content nonce.
#[derive(Debug, Clone)]
pub struct TaskGenerator {
    workload: Workload,
    seed: u64,
    /// Mixed into every content key and prefix identity, never into a length
    /// or a time: a new nonce gives the same stream (lengths, turns, steps,
    /// arrivals) in words no server has cached. See [`with_content_nonce`](Self::with_content_nonce).
    content_nonce: u64,
    /// Record order of a loaded dataset (`None` without one).
    order: Option<Arc<[u32]>>,
    /// The workload's tools, loaded (`None` without `tools`).
    tools: Option<Arc<Tools>>,
}

impl TaskGenerator {
    pub fn new(workload: &Workload, seed: u64) -> Self {
        let order = workload
            .dataset
            .as_ref()
            .and_then(|spec| spec.data.as_ref().map(|data| (spec, data.entries.len())))
            .map(|(spec, n)| record_order(spec, n, seed));
        let tools = workload.tools.as_ref().and_then(|spec| {
            Some(Arc::new(Tools::new(
                Arc::clone(spec.loaded.as_ref()?),
                spec.first_name.clone()?,
            )))
        });
        TaskGenerator {
            workload: workload.clone(),
            seed,
            content_nonce: 0,
            order,
            tools,
        }
    }

    /// Content drawn for this nonce. `capcard run` picks a new one per
    /// invocation and records it, so a re-run of the same file on the same
    /// server meets no prompt its prefix cache has seen, and the exact stream
    /// is still reproducible from seed + nonce (`--nonce`).
    pub fn with_content_nonce(mut self, nonce: u64) -> Self {
        self.content_nonce = nonce;
        self
    }

    pub fn task(&self, index: u64) -> Task {
        if let Some(spec) = &self.workload.sessions
            && let Some(trace) = &spec.data
        {
            return super::sessions::session_task(
                trace,
                index,
                self.seed,
                self.content_nonce,
                spec.tool_time_max(),
            );
        }
        let task_seed = mix(self.seed, index);
        let mut draw = Draw {
            rng: seeded_rng(task_seed),
            key_seed: mix(task_seed, self.content_nonce),
            // Per stream and nonce, so each run's declared prefix starts cold
            // whatever ran before it on the server.
            prefix_salt: mix(mix(self.seed, PREFIX_SALT_STREAM), self.content_nonce) as u32,
            workload: &self.workload,
        };
        let prefix = draw.prefix();
        if let (Some(order), Some(data)) = (
            &self.order,
            self.workload.dataset.as_ref().and_then(|d| d.data.as_ref()),
        ) {
            let record = order[(index % order.len() as u64) as usize] as usize;
            let spec = draw.record(&data.entries[record], prefix);
            return Task {
                index,
                spec,
                class: None,
            };
        }
        let mut spec = if let Some(agent) = &self.workload.agent {
            draw.agent(agent, prefix)
        } else if let Some(conversation) = &self.workload.conversation {
            draw.conversation(conversation, prefix)
        } else {
            draw.single(prefix)
        };
        if let Some(tools) = &self.tools {
            for call in spec.calls_mut() {
                call.tools = Some(Arc::clone(tools));
            }
        }
        Task {
            index,
            spec,
            class: None,
        }
    }
}

/// The random state of one task being drawn.
struct Draw<'a> {
    rng: SeededRng,
    /// Seeds content keys: the task's seed and the content nonce.
    key_seed: u64,
    /// XORed into prefix group numbers: distinct groups stay distinct.
    prefix_salt: u32,
    workload: &'a Workload,
}

const PREFIX_SALT_STREAM: u64 = 0x5341_4C54; // "SALT"

impl Draw<'_> {
    /// This task's shared prefix, if the workload has one.
    fn prefix(&mut self) -> Option<Segment> {
        let shared = self.workload.shared_prefix.as_ref()?;
        let group = self.rng.random_range(0..shared.groups.max(1));
        Some(Segment::Prefix {
            group: group ^ self.prefix_salt,
            tokens: shared.tokens,
        })
    }

    fn key(&self, part: Part, a: u32, b: u32) -> u64 {
        mix(
            mix(self.key_seed, part as u64),
            (u64::from(a) << 32) | u64::from(b),
        )
    }

    fn unique(&self, part: Part, a: u32, b: u32, tokens: u32) -> Segment {
        Segment::Unique {
            key: self.key(part, a, b),
            tokens,
        }
    }

    /// Unique tokens of a first prompt whose `input-tokens` includes the prefix.
    fn first_prompt_tokens(&mut self, prefix: &Option<Segment>) -> u32 {
        let input = sample_count(&self.workload.input_tokens, &mut self.rng);
        let prefix_tokens = prefix.as_ref().map_or(0, Segment::tokens);
        input.saturating_sub(prefix_tokens).max(1)
    }

    fn output_tokens(&mut self) -> u32 {
        sample_count(&self.workload.output_tokens, &mut self.rng).max(1)
    }

    fn single(&mut self, prefix: Option<Segment>) -> TaskSpec {
        let user_tokens = self.first_prompt_tokens(&prefix);
        let mut messages = system_message(prefix);
        messages.push(Message {
            role: Role::User,
            segments: vec![self.unique(Part::User, 0, 0, user_tokens)],
        });
        TaskSpec::Single(call(messages, self.output_tokens()))
    }

    fn conversation(&mut self, conversation: &Conversation, prefix: Option<Segment>) -> TaskSpec {
        let turn_count = sample_count(&conversation.turns, &mut self.rng).max(1);
        let mut history = system_message(prefix.clone());
        let mut turns = Vec::with_capacity(turn_count as usize);
        for turn in 0..turn_count {
            let think_time_before = if turn == 0 {
                std::time::Duration::ZERO
            } else {
                sample_duration(&conversation.think_time, &mut self.rng)
            };
            let user_tokens = if turn == 0 {
                self.first_prompt_tokens(&prefix)
            } else {
                sample_count(&self.workload.input_tokens, &mut self.rng).max(1)
            };
            let output_tokens = self.output_tokens();
            history.push(Message {
                role: Role::User,
                segments: vec![self.unique(Part::User, turn, 0, user_tokens)],
            });
            turns.push(Turn {
                think_time_before,
                call: call(history.clone(), output_tokens),
            });
            // The planned answer joins the history the next turn re-sends.
            history.push(Message {
                role: Role::Assistant,
                segments: vec![self.unique(Part::Assistant, turn, 0, output_tokens)],
            });
        }
        TaskSpec::Conversation { turns }
    }

    fn agent(&mut self, agent: &Agent, prefix: Option<Segment>) -> TaskSpec {
        if self.workload.tools.is_some() {
            return self.tool_agent(agent, prefix);
        }
        let step_count = sample_count(&agent.steps, &mut self.rng).max(1);
        let initial_tokens = self.first_prompt_tokens(&prefix);
        let system = system_message(prefix);
        let mut context = vec![self.unique(Part::AgentContext, 0, 0, initial_tokens)];
        let mut steps = Vec::with_capacity(step_count as usize);
        for step in 0..step_count {
            let fan_out = sample_count(&agent.fan_out, &mut self.rng).max(1);
            let mut calls = Vec::with_capacity(fan_out as usize);
            for call_index in 0..fan_out {
                let mut segments = Vec::with_capacity(context.len() + 1);
                segments.extend_from_slice(&context);
                segments.push(self.unique(
                    Part::AgentInstruction,
                    step,
                    call_index,
                    AGENT_INSTRUCTION_TOKENS,
                ));
                let mut messages = system.clone();
                messages.push(Message {
                    role: Role::User,
                    segments,
                });
                let output_tokens = self.output_tokens();
                calls.push(call(messages, output_tokens));
            }
            let last = step + 1 == step_count;
            let tool_time_after = if last {
                std::time::Duration::ZERO
            } else {
                sample_duration(&agent.tool_time, &mut self.rng)
            };
            if !last {
                let growth = sample_count(&agent.context_growth, &mut self.rng);
                if growth > 0 {
                    context.push(self.unique(Part::AgentGrowth, step, 0, growth));
                }
            }
            steps.push(AgentStep {
                calls,
                tool_time_after,
            });
        }
        TaskSpec::Agent { steps }
    }

    /// An agent that talks in tool calls, as agents with tools do: each
    /// step's calls see the task (`User`), then every earlier step as the
    /// model's tool call (its output, as the call's arguments) and the
    /// tool's result (the step's context growth), and end with their own
    /// short instruction. The last step answers in words. Draws are made in
    /// the same order as [`Self::agent`]'s, so the same seed gives the
    /// same steps, fan-outs, lengths and tool times either way.
    fn tool_agent(&mut self, agent: &Agent, prefix: Option<Segment>) -> TaskSpec {
        let step_count = sample_count(&agent.steps, &mut self.rng).max(1);
        let initial_tokens = self.first_prompt_tokens(&prefix);
        let mut history = system_message(prefix);
        history.push(Message {
            role: Role::User,
            segments: vec![self.unique(Part::AgentContext, 0, 0, initial_tokens)],
        });
        let mut steps = Vec::with_capacity(step_count as usize);
        for step in 0..step_count {
            let fan_out = sample_count(&agent.fan_out, &mut self.rng).max(1);
            let last = step + 1 == step_count;
            let mut calls = Vec::with_capacity(fan_out as usize);
            for call_index in 0..fan_out {
                let mut messages = history.clone();
                messages.push(Message {
                    role: Role::User,
                    segments: vec![self.unique(
                        Part::AgentInstruction,
                        step,
                        call_index,
                        AGENT_INSTRUCTION_TOKENS,
                    )],
                });
                let output_tokens = self.output_tokens();
                let mut spec = call(messages, output_tokens);
                spec.answer_in_words = last;
                calls.push(spec);
            }
            let tool_time_after = if last {
                std::time::Duration::ZERO
            } else {
                sample_duration(&agent.tool_time, &mut self.rng)
            };
            if !last {
                let growth = sample_count(&agent.context_growth, &mut self.rng);
                // The step's first call, as the model would have made it.
                let arguments = calls.first().map_or(1, |c| c.output_tokens.max(1));
                history.push(Message {
                    role: Role::ToolCall(step),
                    segments: vec![self.unique(Part::AgentToolCall, step, 0, arguments)],
                });
                history.push(Message {
                    role: Role::ToolResult(step),
                    segments: vec![self.unique(Part::AgentGrowth, step, 0, growth.max(1))],
                });
            }
            steps.push(AgentStep {
                calls,
                tool_time_after,
            });
        }
        TaskSpec::Agent { steps }
    }
}

/// Which record each position of the stream uses (see the module doc).
fn record_order(spec: &DatasetSpec, records: usize, seed: u64) -> Arc<[u32]> {
    let mut order: Vec<u32> = (0..records as u32).collect();
    if spec.sample == Sample::Shuffle {
        // Fisher–Yates on `mix` outputs: stable across rand versions, so a
        // seed means the same record order forever.
        let stream = mix(seed, super::hash_str("capcard/dataset"));
        for i in (1..order.len()).rev() {
            let j = (mix(stream, i as u64) % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
    }
    order.into()
}

impl Draw<'_> {
    /// The task of one dataset record.
    fn record(&mut self, entry: &Entry, prefix: Option<Segment>) -> TaskSpec {
        let output_tokens = match entry.output_tokens {
            Some(n) => n.max(1),
            None => self.output_tokens(),
        };
        if let (Some(conversation), false) = (&self.workload.conversation, entry.turns.is_empty()) {
            return self.recorded_conversation(conversation, &entry.turns, prefix);
        }
        let mut messages = system_message(prefix.clone());
        match &entry.prompt {
            EntryPrompt::Tokens(input) => {
                let prefix_tokens = prefix.as_ref().map_or(0, Segment::tokens);
                let user_tokens = input.saturating_sub(prefix_tokens).max(1);
                messages.push(Message {
                    role: Role::User,
                    segments: vec![self.unique(Part::User, 0, 0, user_tokens)],
                });
            }
            EntryPrompt::Messages(recorded) => {
                for m in recorded {
                    let segment = Segment::text(Arc::clone(&m.text));
                    // The shared prefix and a recorded system prompt form one system message.
                    match messages.last_mut() {
                        Some(last) if last.role == Role::System && m.role == Role::System => {
                            last.segments.push(segment);
                        }
                        _ => messages.push(Message {
                            role: m.role,
                            segments: vec![segment],
                        }),
                    }
                }
            }
        }
        let spec = call(messages, output_tokens);
        if self.workload.conversation.is_some() {
            TaskSpec::Conversation {
                turns: vec![Turn {
                    think_time_before: std::time::Duration::ZERO,
                    call: spec,
                }],
            }
        } else {
            TaskSpec::Single(spec)
        }
    }

    fn recorded_conversation(
        &mut self,
        conversation: &Conversation,
        exchanges: &[DataTurn],
        prefix: Option<Segment>,
    ) -> TaskSpec {
        let mut history = system_message(prefix);
        let mut turns = Vec::with_capacity(exchanges.len());
        for (k, exchange) in exchanges.iter().enumerate() {
            let think_time_before = if k == 0 {
                std::time::Duration::ZERO
            } else {
                sample_duration(&conversation.think_time, &mut self.rng)
            };
            history.push(Message {
                role: Role::User,
                segments: vec![Segment::text(Arc::clone(&exchange.user))],
            });
            let answer = Segment::text(Arc::clone(&exchange.answer));
            turns.push(Turn {
                think_time_before,
                call: call(history.clone(), answer.tokens().max(1)),
            });
            history.push(Message {
                role: Role::Assistant,
                segments: vec![answer],
            });
        }
        TaskSpec::Conversation { turns }
    }
}

fn system_message(prefix: Option<Segment>) -> Vec<Message> {
    prefix
        .map(|p| Message {
            role: Role::System,
            segments: vec![p],
        })
        .into_iter()
        .collect()
}

fn call(messages: Vec<Message>, output_tokens: u32) -> CallSpec {
    let input_tokens = messages
        .iter()
        .flat_map(|m| &m.segments)
        .fold(0u32, |sum, s| sum.saturating_add(s.tokens()));
    CallSpec {
        messages,
        input_tokens,
        output_tokens,
        tools: None,
        answer_in_words: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Dist, DistKind, SharedPrefix};
    use crate::workload::prompt::render_text;
    use std::time::Duration;

    fn uniform(min: f64, max: f64) -> Dist {
        Dist {
            kind: DistKind::Uniform { min, max },
            min: None,
            max: None,
        }
    }

    fn single_workload() -> Workload {
        let input_tokens = Dist::lognormal(600.0, 0.6, 16.0, 8192.0);
        Workload {
            shared_prefix: Some(SharedPrefix {
                tokens: 400,
                groups: 4,
            }),
            ..Workload::new("chat", input_tokens, uniform(50.0, 300.0))
        }
    }

    fn conversation_workload() -> Workload {
        Workload {
            conversation: Some(Conversation {
                turns: uniform(2.0, 6.0),
                think_time: Dist::fixed(4.0),
            }),
            ..single_workload()
        }
    }

    fn agent_workload() -> Workload {
        Workload {
            input_tokens: Dist::fixed(3000.0),
            agent: Some(Agent {
                steps: uniform(3.0, 12.0),
                fan_out: uniform(1.0, 4.0),
                tool_time: Dist::fixed(0.6),
                context_growth: uniform(200.0, 2000.0),
            }),
            ..single_workload()
        }
    }

    fn single_call(task: &Task) -> &CallSpec {
        match &task.spec {
            TaskSpec::Single(call) => call,
            other => panic!("expected a single call, got {other:?}"),
        }
    }

    fn segment_sum(call: &CallSpec) -> u32 {
        call.messages
            .iter()
            .flat_map(|m| &m.segments)
            .map(Segment::tokens)
            .sum()
    }

    #[test]
    fn same_seed_same_task_other_index_or_seed_differs() {
        for workload in [single_workload(), conversation_workload(), agent_workload()] {
            let a = TaskGenerator::new(&workload, 7);
            let b = TaskGenerator::new(&workload, 7);
            let c = TaskGenerator::new(&workload, 8);
            assert_eq!(a.task(17), b.task(17));
            assert_ne!(a.task(17).spec, a.task(18).spec);
            assert_ne!(a.task(17).spec, c.task(17).spec);
            assert_eq!(a.task(17).index, 17);
        }
    }

    #[test]
    fn random_access_does_not_depend_on_order() {
        let generator = TaskGenerator::new(&conversation_workload(), 3);
        let later_first = generator.task(40);
        for i in 0..40 {
            generator.task(i);
        }
        assert_eq!(generator.task(40), later_first);
    }

    #[test]
    fn single_call_includes_prefix_in_input_tokens() {
        let workload = Workload {
            input_tokens: Dist::fixed(1000.0),
            ..single_workload()
        };
        let call = single_call(&TaskGenerator::new(&workload, 1).task(0)).clone();
        assert_eq!(call.input_tokens, 1000);
        assert_eq!(segment_sum(&call), 1000);
        assert_eq!(call.messages.len(), 2);
        assert_eq!(call.messages[0].role, Role::System);
        assert!(matches!(
            call.messages[0].segments[0],
            Segment::Prefix { tokens: 400, .. }
        ));
        assert_eq!(call.messages[1].role, Role::User);
        assert_eq!(call.messages[1].segments[0].tokens(), 600);
        assert!((50..=300).contains(&call.output_tokens));
    }

    #[test]
    fn input_shorter_than_prefix_keeps_one_unique_token() {
        let workload = Workload {
            input_tokens: Dist::fixed(100.0),
            ..single_workload()
        };
        let call = single_call(&TaskGenerator::new(&workload, 1).task(0)).clone();
        assert_eq!(call.input_tokens, 401);
    }

    #[test]
    fn without_prefix_there_is_no_system_message() {
        let workload = Workload {
            shared_prefix: None,
            input_tokens: Dist::fixed(0.0),
            output_tokens: Dist::fixed(0.0),
            ..single_workload()
        };
        let call = single_call(&TaskGenerator::new(&workload, 1).task(0)).clone();
        assert_eq!(call.messages.len(), 1);
        assert_eq!(call.messages[0].role, Role::User);
        assert_eq!(call.input_tokens, 1, "at least one prompt token");
        assert_eq!(call.output_tokens, 1, "at least one output token");
    }

    #[test]
    fn a_content_nonce_changes_the_words_and_nothing_else() {
        let workload = single_workload();
        let plain = TaskGenerator::new(&workload, 11);
        let salted = TaskGenerator::new(&workload, 11).with_content_nonce(0xBEEF);
        let mut group_pairs = std::collections::HashMap::new();
        for i in 0..100 {
            let (a, b) = (
                single_call(&plain.task(i)).clone(),
                single_call(&salted.task(i)).clone(),
            );
            assert_eq!(a.input_tokens, b.input_tokens);
            assert_eq!(a.output_tokens, b.output_tokens);
            let text = |c: &CallSpec| render_text(&c.messages[0].segments);
            assert_ne!(text(&a), text(&b), "task {i}: other words");
            let (Segment::Prefix { group: ga, .. }, Segment::Prefix { group: gb, .. }) =
                (&a.messages[0].segments[0], &b.messages[0].segments[0])
            else {
                panic!("no prefix");
            };
            // The grouping is the same, only the groups' identities differ.
            assert_eq!(*group_pairs.entry(*ga).or_insert(*gb), *gb);
            assert_ne!(ga, gb);
        }
    }

    #[test]
    fn prefix_groups_are_shared_within_and_distinct_across() {
        let generator = TaskGenerator::new(&single_workload(), 11);
        let mut by_group: std::collections::HashMap<u32, Vec<String>> = Default::default();
        for i in 0..200 {
            let call = single_call(&generator.task(i)).clone();
            let Segment::Prefix { group, .. } = call.messages[0].segments[0] else {
                panic!("no prefix");
            };
            by_group
                .entry(group)
                .or_default()
                .push(render_text(&call.messages[0].segments));
        }
        assert_eq!(by_group.len(), 4, "all four groups are used");
        for texts in by_group.values() {
            assert!(texts.len() > 20, "groups chosen roughly uniformly");
            assert!(texts.iter().all(|t| t == &texts[0]));
        }
        let firsts: std::collections::HashSet<&String> =
            by_group.values().map(|texts| &texts[0]).collect();
        assert_eq!(firsts.len(), 4);
    }

    #[test]
    fn unique_parts_differ_across_tasks() {
        let generator = TaskGenerator::new(&single_workload(), 11);
        let a = single_call(&generator.task(0)).messages[1].clone();
        let b = single_call(&generator.task(1)).messages[1].clone();
        let first_words = |m: &Message| {
            render_text(&m.segments)
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_ne!(first_words(&a), first_words(&b));
    }

    #[test]
    fn conversation_resends_identical_history() {
        let generator = TaskGenerator::new(&conversation_workload(), 5);
        let mut checked_turns = 0;
        for i in 0..20 {
            let TaskSpec::Conversation { turns } = generator.task(i).spec else {
                panic!("expected a conversation");
            };
            assert!((2..=6).contains(&turns.len()));
            assert_eq!(turns[0].think_time_before, Duration::ZERO);
            for pair in turns.windows(2) {
                let (prev, next) = (&pair[0].call, &pair[1].call);
                assert_eq!(pair[1].think_time_before, Duration::from_secs(4));
                // History = previous prompt + its planned answer + a new user message.
                assert_eq!(next.messages.len(), prev.messages.len() + 2);
                assert_eq!(next.messages[..prev.messages.len()], prev.messages[..]);
                let answer = &next.messages[prev.messages.len()];
                assert_eq!(answer.role, Role::Assistant);
                assert_eq!(answer.segments[0].tokens(), prev.output_tokens);
                assert_eq!(next.messages.last().map(|m| m.role), Some(Role::User));
                // Rendered bytes of the history are a prefix too.
                let prev_text: String = prev
                    .messages
                    .iter()
                    .map(|m| render_text(&m.segments))
                    .collect();
                let next_text: String = next
                    .messages
                    .iter()
                    .map(|m| render_text(&m.segments))
                    .collect();
                assert!(next_text.starts_with(&prev_text));
                assert_eq!(next.input_tokens, segment_sum(next));
                assert!(next.input_tokens > prev.input_tokens + prev.output_tokens);
                checked_turns += 1;
            }
        }
        assert!(checked_turns > 20);
    }

    #[test]
    fn conversation_with_single_turn_is_one_call() {
        let workload = Workload {
            conversation: Some(Conversation {
                turns: Dist::fixed(0.0),
                think_time: Dist::fixed(4.0),
            }),
            ..single_workload()
        };
        let task = TaskGenerator::new(&workload, 1).task(0);
        assert_eq!(task.spec.calls(), 1, "turns are at least 1");
    }

    #[test]
    fn an_agent_with_tools_talks_in_tool_calls_with_the_same_draws() {
        let plain = agent_workload();
        let mut with_tools = agent_workload();
        with_tools.tools = Some(crate::config::ToolsSpec {
            path: "tools.json".into(),
            span: None,
            loaded: Some(Arc::new(
                serde_json::json!([{"type": "function", "function": {"name": "grep"}}]),
            )),
            first_name: Some("grep".into()),
        });
        let (a, b) = (
            TaskGenerator::new(&plain, 9),
            TaskGenerator::new(&with_tools, 9),
        );
        for i in 0..20 {
            let (TaskSpec::Agent { steps: plain }, TaskSpec::Agent { steps }) =
                (a.task(i).spec, b.task(i).spec)
            else {
                panic!("agent tasks");
            };
            // The same shape, fan-outs, outputs and tool times.
            assert_eq!(steps.len(), plain.len());
            for (s, p) in steps.iter().zip(&plain) {
                assert_eq!(s.calls.len(), p.calls.len());
                assert_eq!(s.tool_time_after, p.tool_time_after);
                let outputs =
                    |calls: &[CallSpec]| calls.iter().map(|c| c.output_tokens).collect::<Vec<_>>();
                assert_eq!(outputs(&s.calls), outputs(&p.calls));
            }
            for (k, step) in steps.iter().enumerate() {
                let last = k + 1 == steps.len();
                for call in &step.calls {
                    assert!(call.tools.as_ref().is_some_and(|t| t.first_name == "grep"));
                    assert_eq!(call.answer_in_words, last);
                    assert_eq!(call.input_tokens, segment_sum(call));
                    // system, user, then a tool call and its result per
                    // earlier step, then the call's own instruction.
                    let roles: Vec<Role> = call.messages.iter().map(|m| m.role).collect();
                    assert_eq!(roles.len(), 3 + 2 * k);
                    for j in 0..k {
                        assert_eq!(roles[2 + 2 * j], Role::ToolCall(j as u32));
                        assert_eq!(roles[3 + 2 * j], Role::ToolResult(j as u32));
                        // The tool call is the step's first answer.
                        assert_eq!(
                            call.messages[2 + 2 * j].segments[0].tokens(),
                            steps[j].calls[0].output_tokens
                        );
                    }
                    assert_eq!(roles.last(), Some(&Role::User));
                }
            }
        }
    }

    #[test]
    fn agent_context_grows_and_calls_fan_out() {
        let generator = TaskGenerator::new(&agent_workload(), 9);
        for i in 0..20 {
            let TaskSpec::Agent { steps } = generator.task(i).spec else {
                panic!("expected an agent task");
            };
            assert!((3..=12).contains(&steps.len()));
            assert_eq!(
                steps.last().map(|s| s.tool_time_after),
                Some(Duration::ZERO)
            );
            for step in &steps[..steps.len() - 1] {
                assert_eq!(step.tool_time_after, Duration::from_secs_f64(0.6));
            }
            let mut previous_context: Option<Vec<Segment>> = None;
            for step in &steps {
                assert!((1..=4).contains(&step.calls.len()));
                // Calls of a step share the context and differ in their instruction.
                let context_of = |c: &CallSpec| {
                    let user = &c.messages[1].segments;
                    (
                        user[..user.len() - 1].to_vec(),
                        user[user.len() - 1].clone(),
                    )
                };
                let (context, _) = context_of(&step.calls[0]);
                let mut instructions = std::collections::HashSet::new();
                for c in &step.calls {
                    let (ctx, instruction) = context_of(c);
                    assert_eq!(ctx, context);
                    assert_eq!(instruction.tokens(), AGENT_INSTRUCTION_TOKENS);
                    assert!(instructions.insert(instruction));
                    assert_eq!(c.messages[0].role, Role::System);
                    assert_eq!(c.input_tokens, segment_sum(c));
                    assert!(c.output_tokens >= 1);
                }
                if let Some(prev) = &previous_context {
                    // One growth segment of 200..=2000 tokens appended.
                    assert_eq!(context.len(), prev.len() + 1);
                    assert_eq!(context[..prev.len()], prev[..]);
                    assert!((200..=2000).contains(&context[prev.len()].tokens()));
                } else {
                    assert_eq!(context.len(), 1);
                    assert_eq!(context[0].tokens(), 2600, "3000 input − 400 prefix");
                }
                previous_context = Some(context);
            }
        }
    }

    #[test]
    fn agent_calls_counted() {
        let workload = Workload {
            agent: Some(Agent {
                steps: Dist::fixed(3.0),
                fan_out: Dist::fixed(2.0),
                tool_time: Dist::fixed(1.0),
                context_growth: Dist::fixed(100.0),
            }),
            ..single_workload()
        };
        let task = TaskGenerator::new(&workload, 1).task(0);
        assert_eq!(task.spec.calls(), 6);
        let TaskSpec::Agent { steps } = task.spec else {
            panic!("agent")
        };
        let inputs: Vec<u32> = steps.iter().map(|s| s.calls[0].input_tokens).collect();
        let base = steps[0].calls[0].input_tokens;
        assert_eq!(inputs, vec![base, base + 100, base + 200]);
    }
}
