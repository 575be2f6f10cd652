//! Seeded request streams (pure): what each task sends, derived only from the
//! workload, the seed and the task's index.
//!
//! Random access by index (`TaskGenerator::task(i)`) is what makes runs
//! reproducible whatever their timing: task 17 of a stream is the same prompt
//! whether it is sent at c=1 or at 40 RPS, on every target and on every
//! re-run. (The plan gives each run its own stream seed, so one run's prompts
//! are not already in a server's prefix cache from the previous run.) Prompts are described as
//! [`Segment`]s (a shared prefix, or unique content keyed by a number) and
//! rendered to text or token ids by [`prompt`] outside the timing path.

pub mod arrival;
pub mod classes;
/// Datasets are read by the data leaf; kept at this path for callers.
pub use crate::data::dataset;
pub mod prompt;
pub mod reuse;
pub mod sessions;
pub mod task;
pub mod tokenize;
pub mod trace;

use std::sync::Arc;
use std::time::Duration;

pub use crate::dist::sample;
pub use arrival::arrival_times;
pub use classes::{ClassedGenerator, TaskClass};
pub use task::TaskGenerator;

// The seeding leaf, imported so that `super::mix` reads as before in the
// stages below; callers outside use `crate::hash`.
pub use crate::data::Role;
pub use crate::hash::{SeededRng, hash_str, mix, seeded_rng};

/// A piece of a prompt, rendered deterministically.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// The shared prefix of group `group`: identical bytes for every task of
    /// the group, distinct across groups (so a prefix cache can hit).
    Prefix { group: u32, tokens: u32 },
    /// Content unique to `key` (a hash of seed, task, turn, ...), so nothing
    /// is accidentally cached across tasks.
    Unique { key: u64, tokens: u32 },
    /// Real text from a dataset, sent verbatim; `tokens` is its size by the
    /// documented approximation ([`dataset::approx_tokens`]).
    Text { text: Arc<str>, tokens: u32 },
}

impl Segment {
    /// A verbatim text segment sized by the word approximation.
    pub fn text(text: Arc<str>) -> Self {
        let tokens = dataset::approx_tokens(&text);
        Segment::Text { text, tokens }
    }

    pub fn tokens(&self) -> u32 {
        match self {
            Segment::Prefix { tokens, .. }
            | Segment::Unique { tokens, .. }
            | Segment::Text { tokens, .. } => *tokens,
        }
    }
}

impl Tools {
    /// `definitions` (chat's shape, or already the Responses API's) and
    /// their Responses API form.
    pub fn new(definitions: Arc<serde_json::Value>, first_name: String) -> Tools {
        let flat = match definitions.as_array() {
            Some(tools) => serde_json::Value::Array(
                tools
                    .iter()
                    .map(|tool| match (tool.get("function"), tool.as_object()) {
                        (Some(serde_json::Value::Object(function)), Some(outer)) => {
                            let mut flat = outer.clone();
                            flat.remove("function");
                            flat.extend(function.clone());
                            serde_json::Value::Object(flat)
                        }
                        _ => tool.clone(),
                    })
                    .collect(),
            ),
            None => (*definitions).clone(),
        };
        Tools {
            definitions,
            responses_definitions: Arc::new(flat),
            first_name,
        }
    }
}

/// A workload's tool definitions, as every call of it sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    /// The JSON array of definitions, as sent on chat.
    pub definitions: Arc<serde_json::Value>,
    /// The same in the Responses API's shape (each function's fields at
    /// the top of its tool, not under `function`).
    pub responses_definitions: Arc<serde_json::Value>,
    /// What an agent's synthetic tool calls name.
    pub first_name: String,
}

/// One chat message (for `completions` targets the messages are concatenated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub segments: Vec<Segment>,
}

/// One LLM call: the prompt and the planned output length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSpec {
    pub messages: Vec<Message>,
    /// Planned prompt tokens (sum of all segments).
    pub input_tokens: u32,
    /// Planned output tokens (`max_tokens`, with `ignore_eos`).
    pub output_tokens: u32,
    /// Tool definitions sent with the call (the workload's `tools`).
    pub tools: Option<Arc<Tools>>,
    /// Ask for an answer in words (`tool_choice: "none"`): the last step
    /// of an agent that talks in tool calls.
    pub answer_in_words: bool,
}

/// What one arrival (open loop) or one slot occupancy (closed loop) runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskSpec {
    Single(CallSpec),
    /// Turns in order; each turn's prompt holds the whole history so far.
    Conversation {
        turns: Vec<Turn>,
    },
    /// Steps in order; calls within a step run in parallel.
    Agent {
        steps: Vec<AgentStep>,
    },
    /// A recorded session's call graph, replayed as it ran: each call
    /// leaves `gap` after its parent's answer (a root: `gap` after the
    /// task starts); siblings with the same gap leave together. Calls are
    /// in start order, and a parent is always an earlier call.
    Graph {
        calls: Vec<GraphCall>,
    },
}

/// One call of a [`TaskSpec::Graph`].
#[derive(Debug, Clone, PartialEq)]
pub struct GraphCall {
    pub call: CallSpec,
    /// Index (in the task's `calls`) of the call whose answer this one
    /// waits for; `None`: a root.
    pub parent: Option<u32>,
    /// From the parent's answer to this call's send (tool time, already
    /// capped by the workload's `tool-time-max`); for a root, from the
    /// task's start.
    pub gap: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Pause before this turn is sent (zero for the first turn).
    pub think_time_before: Duration,
    pub call: CallSpec,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentStep {
    pub calls: Vec<CallSpec>,
    /// Pause after this step's calls all finished (tool execution); zero after the last.
    pub tool_time_after: Duration,
}

/// A task and its index in the run's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub index: u64,
    pub spec: TaskSpec,
    /// The mix class the task was drawn for; `None` outside a mix.
    pub class: Option<Arc<TaskClass>>,
}

impl TaskSpec {
    /// Number of LLM calls the task makes.
    pub fn calls(&self) -> usize {
        match self {
            TaskSpec::Single(_) => 1,
            TaskSpec::Conversation { turns } => turns.len(),
            TaskSpec::Agent { steps } => steps.iter().map(|s| s.calls.len()).sum(),
            TaskSpec::Graph { calls } => calls.len(),
        }
    }

    /// Every call of the task, to set what they all send.
    pub fn calls_mut(&mut self) -> Vec<&mut CallSpec> {
        match self {
            TaskSpec::Single(call) => vec![call],
            TaskSpec::Conversation { turns } => turns.iter_mut().map(|t| &mut t.call).collect(),
            TaskSpec::Agent { steps } => steps.iter_mut().flat_map(|s| &mut s.calls).collect(),
            TaskSpec::Graph { calls } => calls.iter_mut().map(|c| &mut c.call).collect(),
        }
    }

    /// The task's first call, if it has one.
    pub fn first_call(&self) -> Option<&CallSpec> {
        match self {
            TaskSpec::Single(call) => Some(call),
            TaskSpec::Conversation { turns } => turns.first().map(|t| &t.call),
            TaskSpec::Agent { steps } => steps.first().and_then(|s| s.calls.first()),
            TaskSpec::Graph { calls } => calls.first().map(|c| &c.call),
        }
    }

    /// Every call of the task, in order.
    pub fn all_calls(&self) -> Vec<&CallSpec> {
        match self {
            TaskSpec::Single(call) => vec![call],
            TaskSpec::Conversation { turns } => turns.iter().map(|t| &t.call).collect(),
            TaskSpec::Agent { steps } => steps.iter().flat_map(|s| &s.calls).collect(),
            TaskSpec::Graph { calls } => calls.iter().map(|c| &c.call).collect(),
        }
    }
}
