//! The `workload` block: token lengths, `shared-prefix`, the multi-turn
//! `conversation` or `agent` loop shapes, and `dataset` replay.

use std::path::PathBuf;

use kdl::KdlNode;

use super::{Decoder, Once, OneOf, children, span_of_name, value_span};
use crate::config::model::{
    Agent, Conversation, DatasetSpec, Dist, Sample, SessionsSpec, SharedPrefix, ToolsSpec, Workload,
};
use crate::config::validate::{self as rules, Quantity};

const WORKLOAD_CHILDREN: &[&str] = &[
    "input-tokens",
    "output-tokens",
    "shared-prefix",
    "conversation",
    "agent",
    "dataset",
    "tools",
    "sessions",
];
const CONVERSATION_CHILDREN: &[&str] = &["turns", "think-time"];
const AGENT_CHILDREN: &[&str] = &["steps", "fan-out", "tool-time", "context-growth"];
const SAMPLES: &[&str] = &["shuffle", "sequential"];

impl Decoder {
    pub(super) fn workload(&mut self, node: &KdlNode) -> Option<Workload> {
        let name = self.item_name(node, "workload");
        let mut ok = name.is_some();
        let mut once = Once::default();
        let mut shape = OneOf::default();
        let (mut input, mut output, mut shared_prefix, mut conversation, mut agent) =
            (None, None, None, None, None);
        let mut dataset: Option<DatasetSpec> = None;
        let mut has_dataset = false;
        let mut tools: Option<ToolsSpec> = None;
        let mut sessions: Option<SessionsSpec> = None;

        for child in children(node) {
            let child_name = child.name().value();
            if WORKLOAD_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let shape_help = "a workload is either a multi-turn `conversation` or an `agent` loop; make two workloads to measure both";
            let done = match child_name {
                "input-tokens" => self.dist(child, Quantity::Tokens).map(|d| input = Some(d)),
                "output-tokens" => self.dist(child, Quantity::Tokens).map(|d| output = Some(d)),
                "shared-prefix" => self.shared_prefix(child).map(|p| shared_prefix = Some(p)),
                "conversation" => {
                    if !self.one_of(&mut shape, child, shape_help) {
                        ok = false;
                        continue;
                    }
                    self.conversation(child).map(|c| conversation = Some(c))
                }
                "agent" => {
                    if !self.one_of(&mut shape, child, shape_help) {
                        ok = false;
                        continue;
                    }
                    self.agent(child).map(|a| agent = Some(a))
                }
                "dataset" => {
                    has_dataset = true;
                    self.dataset(child).map(|d| dataset = Some(d))
                }
                "sessions" => {
                    // Recorded sessions: lengths come from the trace.
                    has_dataset = true;
                    self.sessions(child).map(|s| sessions = Some(s))
                }
                "tools" => {
                    let usage =
                        "tools \"tools.json\"   // OpenAI tool definitions, sent with every call";
                    self.no_children(child, usage);
                    self.single(child, usage)
                        .and_then(|e| {
                            let span = Some(e.span());
                            self.string(e, "tools", usage).map(|path| (path, span))
                        })
                        .map(|(path, span)| {
                            tools = Some(ToolsSpec {
                                path: PathBuf::from(path),
                                span,
                                loaded: None,
                                first_name: None,
                            });
                        })
                }
                "tokenizer" => {
                    self.error(
                        span_of_name(child),
                        "belongs on the target",
                        "`tokenizer` is a property of the model served, not of the workload".to_string(),
                        Some("move it into the target: `target \"x\" { endpoint \"...\"; tokenizer \"tokenizer.json\" }`".to_string()),
                    );
                    None
                }
                _ => {
                    self.unknown_node(child, Some(node), WORKLOAD_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if !has_dataset && name.is_some() {
            for (required, given, example) in [
                (
                    "input-tokens",
                    once.seen.contains_key("input-tokens"),
                    "input-tokens lognormal median=600 sigma=0.6",
                ),
                (
                    "output-tokens",
                    once.seen.contains_key("output-tokens"),
                    "output-tokens normal mean=220 stddev=60",
                ),
            ] {
                if !given {
                    ok = false;
                }
                if !given && !self.near_miss(node, required) {
                    self.error(
                        span_of_name(node),
                        "incomplete workload",
                        format!(
                            "workload `{}` has no `{required}`",
                            name.as_deref().unwrap_or_default()
                        ),
                        Some(format!("add e.g. `{example}`")),
                    );
                    ok = false;
                }
            }
        }
        if let Some(sessions_node) = children(node)
            .iter()
            .find(|c| c.name().value() == "sessions")
            && let Some(other) = children(node).iter().find(|c| {
                matches!(
                    c.name().value(),
                    "dataset" | "conversation" | "agent" | "shared-prefix" | "tools"
                )
            })
        {
            self.error(
                span_of_name(other),
                "sessions with another shape",
                format!(
                    "`sessions` replays recorded agent sessions call by call; `{}` cannot apply to them",
                    other.name().value()
                ),
                Some("make a separate workload for it".to_string()),
            );
            let _ = sessions_node;
            ok = false;
        } else if let (true, Some(agent_node)) = (
            has_dataset,
            children(node).iter().find(|c| c.name().value() == "agent"),
        ) {
            self.error(
                span_of_name(agent_node),
                "agent with a dataset",
                "a `dataset` replays single requests or conversations, not `agent` loops",
                Some("make a separate workload for the agent loop".to_string()),
            );
            ok = false;
        }
        // With a dataset, missing lengths are the dataset's measured ones
        // (filled in when the file is loaded, see `config::data`).
        if let Some(spec) = dataset.as_mut() {
            spec.input_from_data = input.is_none();
            spec.output_from_data = output.is_none();
            input = input.or(Some(Dist::fixed(1.0)));
            output = output.or(Some(Dist::fixed(1.0)));
        }
        // With sessions, every call's lengths are recorded; the two
        // distributions are not used.
        if sessions.is_some() {
            input = input.or(Some(Dist::fixed(1.0)));
            output = output.or(Some(Dist::fixed(1.0)));
        }
        let (Some(name), Some(input_tokens), Some(output_tokens), true) = (name, input, output, ok)
        else {
            return None;
        };
        Some(Workload {
            name,
            span: Some(
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .map_or(span_of_name(node), |e| e.span()),
            ),
            input_tokens,
            output_tokens,
            shared_prefix,
            conversation,
            agent,
            dataset,
            tools,
            sessions,
        })
    }

    fn sessions(&mut self, node: &KdlNode) -> Option<SessionsSpec> {
        let usage = "sessions \"data/harness-a.jsonl\" tool-time-max=\"30s\"";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["tool-time-max"], usage);
        let Some(path_entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let path = self.string(path_entry, "sessions", usage)?;
        let tool_time_max_s = match entries.prop("tool-time-max") {
            Some(entry) => Some(self.duration(entry, "tool-time-max")?.as_secs_f64()),
            None => None,
        };
        Some(SessionsSpec {
            path: PathBuf::from(path),
            span: Some(value_span(path_entry)),
            tool_time_max_s,
            data: None,
        })
    }

    fn dataset(&mut self, node: &KdlNode) -> Option<DatasetSpec> {
        let usage = "dataset \"data/prompts.jsonl\" sample=\"shuffle\" max-input-tokens=4096";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["sample", "max-input-tokens"], usage);
        let Some(path_entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let path = self.string(path_entry, "dataset", usage)?;
        let sample = match entries.prop("sample") {
            Some(entry) => match self.choice(entry, "sample order", SAMPLES)? {
                "sequential" => Sample::Sequential,
                _ => Sample::Shuffle,
            },
            None => Sample::Shuffle,
        };
        let max_input_tokens = match entries.prop("max-input-tokens") {
            Some(entry) => {
                let max = self.whole(entry, "max-input-tokens", usage, u32::MAX as u64)?;
                if max == 0 {
                    self.error(
                        value_span(entry),
                        "zero",
                        "`max-input-tokens` must be at least 1",
                        Some(format!("usage: {usage}")),
                    );
                    return None;
                }
                Some(max as u32)
            }
            None => None,
        };
        Some(DatasetSpec {
            path: PathBuf::from(path),
            span: Some(value_span(path_entry)),
            sample,
            max_input_tokens,
            input_from_data: false,
            output_from_data: false,
            data: None,
        })
    }

    fn shared_prefix(&mut self, node: &KdlNode) -> Option<SharedPrefix> {
        let usage = "shared-prefix tokens=400 groups=4";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["tokens", "groups"], usage);
        let tokens = match entries.prop("tokens") {
            Some(e) => self.whole(e, "tokens", usage, u32::MAX as u64),
            None => {
                self.missing_prop(node, "shared-prefix", "tokens", usage);
                None
            }
        };
        let groups = match entries.prop("groups") {
            Some(e) => self.whole(e, "groups", usage, u32::MAX as u64),
            None => Some(1),
        };
        let prefix = SharedPrefix {
            tokens: tokens? as u32,
            groups: groups? as u32,
        };
        self.issues(node, rules::check_shared_prefix(&prefix))
            .then_some(prefix)
    }

    fn conversation(&mut self, node: &KdlNode) -> Option<Conversation> {
        let usage =
            "conversation { turns uniform min=1 max=6; think-time exponential mean=\"4s\" }";
        self.entries(node, 0, &[], usage);
        let mut once = Once::default();
        let (mut turns, mut think_time) = (None, Some(Dist::fixed(0.0)));
        let mut ok = true;
        for child in children(node) {
            if CONVERSATION_CHILDREN.contains(&child.name().value()) && !self.once(&mut once, child)
            {
                ok = false;
                continue;
            }
            match child.name().value() {
                "turns" => turns = self.dist(child, Quantity::Count),
                "think-time" => think_time = self.dist(child, Quantity::Seconds),
                _ => {
                    self.unknown_node(child, Some(node), CONVERSATION_CHILDREN);
                    ok = false;
                }
            }
        }
        if !self.required_child(node, &once, "turns", usage) {
            return None;
        }
        let conversation = Conversation {
            turns: turns?,
            think_time: think_time?,
        };
        ok.then_some(conversation)
    }

    /// Whether `node` has its required child `child`; reports it missing
    /// unless a misspelt near miss was already reported as unknown.
    fn required_child(&mut self, node: &KdlNode, once: &Once, child: &str, usage: &str) -> bool {
        if once.seen.contains_key(child) {
            return true;
        }
        if !self.near_miss(node, child) {
            let parent = node.name().value();
            self.error(
                span_of_name(node),
                &format!("{child} missing"),
                format!("`{parent}` needs `{child}`"),
                Some(format!("usage: {usage}")),
            );
        }
        false
    }

    fn agent(&mut self, node: &KdlNode) -> Option<Agent> {
        let usage = "agent { steps uniform min=3 max=12; fan-out uniform min=1 max=4; tool-time lognormal median=\"600ms\" sigma=0.8; context-growth uniform min=200 max=2000 }";
        self.entries(node, 0, &[], usage);
        let mut once = Once::default();
        let mut steps = None;
        let mut fan_out = Some(Dist::fixed(1.0));
        let mut tool_time = Some(Dist::fixed(0.0));
        let mut context_growth = Some(Dist::fixed(0.0));
        let mut ok = true;
        for child in children(node) {
            if AGENT_CHILDREN.contains(&child.name().value()) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            match child.name().value() {
                "steps" => steps = self.dist(child, Quantity::Count),
                "fan-out" => fan_out = self.dist(child, Quantity::Count),
                "tool-time" => tool_time = self.dist(child, Quantity::Seconds),
                "context-growth" => context_growth = self.dist(child, Quantity::Tokens),
                _ => {
                    self.unknown_node(child, Some(node), AGENT_CHILDREN);
                    ok = false;
                }
            }
        }
        if !self.required_child(node, &once, "steps", usage) {
            return None;
        }
        let agent = Agent {
            steps: steps?,
            fan_out: fan_out?,
            tool_time: tool_time?,
            context_growth: context_growth?,
        };
        ok.then_some(agent)
    }
}
