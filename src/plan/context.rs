//! Does a workload fit a target's context window? (pure)
//!
//! A server refuses a call whose prompt plus the output it asks for exceed
//! the model's window (vLLM's `max_model_len`), so a workload that grows
//! past it (agent context, conversation history, a long tail of lengths)
//! measures refusals, not capacity. [`fit`] draws the workload's own tasks,
//! as the runs will send them, and counts the calls and tasks beyond the
//! window; [`largest_possible_call`] bounds the largest call from the
//! distributions' upper ends, when they have one.
//!
//! A call's size is its planned prompt plus its planned output, the two
//! numbers the server adds up. A chat template adds a few tokens per
//! message on a real server, and a real tokenizer may count the synthetic
//! words differently; the figures say "about" for endpoints because of that.
//!
//! Where the window comes from is [`ContextWindow::source`]: a sim preset
//! (with its knobs), a target's `max-context`, or the server's own report
//! at the start of a run.

use serde::{Deserialize, Serialize};

use crate::config::{Experiment, Target, TargetKind, TraceSpec, Workload};
use crate::workload::task::AGENT_INSTRUCTION_TOKENS;
use crate::workload::{CallSpec, Task, TaskGenerator, TaskSpec};

/// Tasks drawn to measure a workload against a window (a dataset's records
/// are all drawn when it has fewer).
pub const CONTEXT_SAMPLE_TASKS: u64 = 2_000;

/// The longest prompt + output a target accepts, and who said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextWindow {
    pub tokens: u32,
    /// `"sim preset h100-llama3-8b"`, `"max-context"`, `"server: GET /v1/models max_model_len"`.
    pub source: String,
}

/// How a workload's calls compare with a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextFit {
    pub window: ContextWindow,
    /// Prompt + output of the largest call drawn.
    pub largest_call_tokens: u64,
    /// The largest call the distributions allow; `None` when a length has
    /// no upper end (a lognormal without `max=`) or comes from data.
    pub largest_possible_tokens: Option<u64>,
    pub sampled_tasks: u64,
    pub sampled_calls: u64,
    /// Calls drawn whose prompt + output exceed the window.
    pub calls_over: u64,
    /// Tasks drawn with at least one such call.
    pub tasks_over: u64,
}

impl ContextFit {
    /// Share of the drawn calls beyond the window.
    pub fn share_of_calls_over(&self) -> f64 {
        self.calls_over as f64 / self.sampled_calls.max(1) as f64
    }

    /// Whether any call can exceed the window: one was drawn, or the
    /// distributions allow one.
    pub fn can_overflow(&self) -> bool {
        self.calls_over > 0
            || self
                .largest_possible_tokens
                .is_some_and(|t| t > u64::from(self.window.tokens))
    }

    /// One sentence with the numbers, for `check`, the run log and the card.
    pub fn describe(&self, workload: &str) -> String {
        let window = self.window.tokens;
        let bound = match self.largest_possible_tokens {
            Some(t) => format!(", and the distributions allow up to {} tokens", group(t)),
            None => String::new(),
        };
        if self.calls_over == 0 {
            return format!(
                "workload `{workload}` can exceed the {}-token window ({}): no call of {} drawn \
                 did (largest {} tokens){bound}",
                group(u64::from(window)),
                self.window.source,
                group(self.sampled_calls),
                group(self.largest_call_tokens),
            );
        }
        format!(
            "workload `{workload}` exceeds the {}-token window ({}): {} of {} calls drawn ({:.1}%, \
             in {:.1}% of tasks) ask for more (prompt + output), up to {} tokens{bound}; the \
             server refuses them",
            group(u64::from(window)),
            self.window.source,
            group(self.calls_over),
            group(self.sampled_calls),
            self.share_of_calls_over() * 100.0,
            self.tasks_over as f64 / self.sampled_tasks.max(1) as f64 * 100.0,
            group(self.largest_call_tokens),
        )
    }
}

/// `131072` → `131,072`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Prompt + output of one call, as the server adds them.
pub fn call_tokens(call: &CallSpec) -> u64 {
    u64::from(call.input_tokens) + u64::from(call.output_tokens)
}

fn task_calls(task: &Task) -> Vec<&CallSpec> {
    match &task.spec {
        TaskSpec::Single(call) => vec![call],
        TaskSpec::Conversation { turns } => turns.iter().map(|t| &t.call).collect(),
        TaskSpec::Agent { steps } => steps.iter().flat_map(|s| &s.calls).collect(),
        TaskSpec::Graph { calls } => calls.iter().map(|c| &c.call).collect(),
    }
}

/// The workload's first [`CONTEXT_SAMPLE_TASKS`] tasks of stream `seed`
/// (a trace's rows when `trace` drives the open runs: all of them) against
/// `window`.
pub fn fit(
    workload: &Workload,
    trace: Option<&TraceSpec>,
    seed: u64,
    window: ContextWindow,
) -> ContextFit {
    let limit = u64::from(window.tokens);
    let mut fit = ContextFit {
        window,
        largest_call_tokens: 0,
        largest_possible_tokens: largest_possible_call(workload),
        sampled_tasks: 0,
        sampled_calls: 0,
        calls_over: 0,
        tasks_over: 0,
    };
    let mut count = |task: &Task| {
        let mut over = false;
        for call in task_calls(task) {
            let tokens = call_tokens(call);
            fit.largest_call_tokens = fit.largest_call_tokens.max(tokens);
            fit.sampled_calls += 1;
            if tokens > limit {
                fit.calls_over += 1;
                over = true;
            }
        }
        fit.sampled_tasks += 1;
        fit.tasks_over += u64::from(over);
    };
    let generator = TaskGenerator::new(workload, seed);
    for index in 0..CONTEXT_SAMPLE_TASKS {
        count(&generator.task(index));
    }
    if let Some(data) = trace.and_then(|t| t.data.as_ref().map(|d| (t, d))) {
        let (spec, rows) = data;
        for index in 0..rows.rows.len() as u64 {
            count(&rows.task(index, seed, spec.block_tokens, 0));
        }
        // Trace lengths are the data's: no distribution bounds them.
        fit.largest_possible_tokens = None;
    }
    fit
}

/// The largest prompt + output the workload's distributions allow: the
/// longest first prompt (shared prefix included), then every turn's history
/// or every step's growth at its maximum, plus the longest output. `None`
/// when a length it depends on has no upper end, or for a dataset.
pub fn largest_possible_call(workload: &Workload) -> Option<u64> {
    if workload.dataset.is_some() {
        return None;
    }
    let round = |v: f64| v.max(0.0).round() as u64;
    let prefix = workload
        .shared_prefix
        .as_ref()
        .map_or(0, |p| u64::from(p.tokens));
    let input = round(workload.input_tokens.upper_bound()?).max(1);
    // The unique part of the first prompt is at least one token.
    let first = input.max(prefix + 1);
    let output = round(workload.output_tokens.upper_bound()?).max(1);
    let prompt = if let Some(agent) = &workload.agent {
        let steps = round(agent.steps.upper_bound()?).max(1);
        let growth = round(agent.context_growth.upper_bound()?);
        // An agent that talks in tool calls also re-sends each earlier
        // step's call (its output, as arguments), and a result of at least
        // one token.
        let per_step = if workload.tools.is_some() {
            growth.max(1) + output
        } else {
            growth
        };
        first + (steps - 1) * per_step + u64::from(AGENT_INSTRUCTION_TOKENS)
    } else if let Some(conversation) = &workload.conversation {
        let turns = round(conversation.turns.upper_bound()?).max(1);
        first + (turns - 1) * (input + output)
    } else {
        first
    };
    Some(prompt + output)
}

/// The window a target declares before any server answers: its
/// `max-context`, else a sim preset's (with its knobs). `None` for an
/// endpoint without `max-context` (the run asks the server), or a sim whose
/// knobs cannot serve (reported elsewhere).
pub fn declared_window(target: &Target) -> Option<ContextWindow> {
    match &target.kind {
        TargetKind::Sim {
            preset, serving, ..
        } => {
            let engine = crate::sim::resolve(preset, serving).ok()?;
            let source = match serving.max_context {
                Some(_) => format!("`max-context` of sim {preset}"),
                None => format!("sim preset {preset}, model {}", engine.model.served_name),
            };
            Some(ContextWindow {
                tokens: engine.max_model_len(),
                source,
            })
        }
        TargetKind::Endpoint { .. } => target.max_context.map(|tokens| ContextWindow {
            tokens,
            source: "`max-context`".to_string(),
        }),
    }
}

/// `capcard check`'s warnings: one per (target, workload) that can exceed
/// the target's declared window, at the workload's span with the target's
/// as a second label, and a hint that names the ways out.
pub fn warnings(
    experiment: &Experiment,
    source: Option<&crate::config::Source>,
) -> Vec<crate::config::ConfigWarning> {
    overflows(experiment)
        .into_iter()
        .map(|(target, workload, fit)| {
            let target_span = experiment.target(&target).and_then(|t| t.span);
            let workload_span = experiment.workload(&workload).and_then(|w| w.span);
            crate::config::ConfigWarning::new(
                source,
                workload_span,
                "this workload",
                format!("target `{target}`: {}", fit.describe(&workload)),
                Some(
                    "refused calls are counted as `context-length` and left out of every \
                     verdict, so the card would describe only the calls that fit; give the \
                     target a longer window (`max-context`, or a longer-context preset such as \
                     `h100-llama3.1-8b`, see `capcard sim --list`) or bound the workload's \
                     lengths (`max=`, fewer steps or turns)"
                        .to_string(),
                ),
            )
            .with_label(target_span, format!("window {} tokens", fit.window.tokens))
        })
        .collect()
}

/// The workloads card `card` sends (a mix's classes: each its own) that
/// can exceed `window`, in order, each with its fit; the open runs' trace,
/// if any, is drawn too.
pub fn card_overflows(
    experiment: &Experiment,
    card: &super::CardPlan,
    window: &ContextWindow,
) -> Vec<(String, ContextFit)> {
    let names: Vec<&str> = match &card.mix {
        Some(mix) => mix.classes.iter().map(|c| c.workload.as_str()).collect(),
        None => vec![card.workload.as_str()],
    };
    let trace = experiment.open.as_ref().and_then(|o| o.trace.as_ref());
    names
        .into_iter()
        .filter_map(|name| {
            let workload = experiment.workload(name)?;
            let seed = super::workload_seed(experiment.seed, name);
            let fit = fit(workload, trace, seed, window.clone());
            fit.can_overflow().then(|| (name.to_string(), fit))
        })
        .collect()
}

/// Every (target, workload) pair of the experiment that can exceed the
/// target's declared window, in card order, with the trace that drives
/// the open runs. Workloads of mixes are checked like the others (a mix
/// sends its classes' workloads).
pub fn overflows(experiment: &Experiment) -> Vec<(String, String, ContextFit)> {
    let mut found = Vec::new();
    let trace = experiment.open.as_ref().and_then(|o| o.trace.as_ref());
    for target in &experiment.targets {
        let Some(window) = declared_window(target) else {
            continue;
        };
        for workload in &experiment.workloads {
            let seed = super::workload_seed(experiment.seed, &workload.name);
            let fit = fit(workload, trace, seed, window.clone());
            if fit.can_overflow() {
                found.push((target.name.clone(), workload.name.clone(), fit));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Agent, Conversation, Dist, SharedPrefix};

    fn uniform(min: f64, max: f64) -> Dist {
        Dist {
            kind: crate::config::DistKind::Uniform { min, max },
            min: None,
            max: None,
        }
    }

    fn single(input: Dist, output: Dist) -> Workload {
        Workload::new("w", input, output)
    }

    /// The shipped agentic example's workload.
    fn agent() -> Workload {
        let mut output = Dist::fixed(150.0);
        output.max = Some(2048.0);
        Workload {
            shared_prefix: Some(SharedPrefix {
                tokens: 1500,
                groups: 1,
            }),
            agent: Some(Agent {
                steps: uniform(3.0, 12.0),
                fan_out: uniform(1.0, 4.0),
                tool_time: Dist::fixed(0.6),
                context_growth: uniform(200.0, 2000.0),
            }),
            ..single(Dist::fixed(3000.0), output)
        }
    }

    fn window(tokens: u32) -> ContextWindow {
        ContextWindow {
            tokens,
            source: "test".into(),
        }
    }

    #[test]
    fn an_agent_that_grows_past_8k_overflows_and_says_by_how_much() {
        let fit = fit(&agent(), None, 5, window(8192));
        assert!(fit.can_overflow());
        assert!(fit.calls_over > 0 && fit.calls_over < fit.sampled_calls);
        // 3000 + 11 × 2000 + 16 instruction tokens, plus 150 output.
        assert_eq!(
            largest_possible_call(&agent()),
            Some(3000 + 22_000 + 16 + 150)
        );
        assert!(fit.largest_call_tokens > 8192);
        assert!(fit.largest_call_tokens <= 25_166);
        let text = fit.describe("agent");
        assert!(text.contains("exceeds the 8,192-token window"), "{text}");
        assert!(text.contains("25,166"), "{text}");
        // Between the largest drawn and the largest possible: a warning
        // that says no call drawn did.
        let edge = super::fit(&agent(), None, 5, window(25_100));
        assert!(edge.can_overflow() && edge.calls_over == 0, "{edge:?}");
        let text = edge.describe("agent");
        assert!(
            text.contains("can exceed the 25,100-token window"),
            "{text}"
        );
        assert!(text.contains("no call of"), "{text}");
        // The same tasks fit a 128k window.
        let long = super::fit(&agent(), None, 5, window(131_072));
        assert!(!long.can_overflow());
        assert_eq!(long.calls_over, 0);
        assert_eq!(long.sampled_calls, fit.sampled_calls);
    }

    #[test]
    fn counts_are_exact_on_a_known_stream() {
        // Prompts uniform 100..=1000 plus 100 output against a 600 window:
        // the calls over are those whose prompt exceeds 500.
        let w = single(uniform(100.0, 1000.0), Dist::fixed(100.0));
        let fit = fit(&w, None, 1, window(600));
        let generator = TaskGenerator::new(&w, 1);
        let expected = (0..CONTEXT_SAMPLE_TASKS)
            .filter(|&i| match generator.task(i).spec {
                TaskSpec::Single(call) => call.input_tokens + 100 > 600,
                _ => false,
            })
            .count() as u64;
        assert_eq!(fit.calls_over, expected);
        assert_eq!(fit.tasks_over, expected);
        assert!((0.4..0.6).contains(&fit.share_of_calls_over()), "{fit:?}");
        assert_eq!(fit.largest_possible_tokens, Some(1100));
    }

    #[test]
    fn an_unbounded_tail_has_no_largest_possible_call() {
        let w = single(
            Dist {
                kind: crate::config::DistKind::LogNormal {
                    median: 200.0,
                    sigma: 1.0,
                },
                min: None,
                max: None,
            },
            Dist::fixed(10.0),
        );
        assert_eq!(largest_possible_call(&w), None);
        // Only what was drawn can show the overflow.
        let fit = fit(&w, None, 3, window(100_000));
        assert!(!fit.can_overflow());
    }

    #[test]
    fn conversation_history_counts_every_earlier_turn() {
        let w = Workload {
            conversation: Some(Conversation {
                turns: Dist::fixed(4.0),
                think_time: Dist::fixed(1.0),
            }),
            ..single(Dist::fixed(500.0), Dist::fixed(200.0))
        };
        // Turn 4 re-sends 3 × (500 + 200) and its own 500, then asks 200.
        assert_eq!(largest_possible_call(&w), Some(500 + 3 * 700 + 200));
        let fit = fit(&w, None, 1, window(2800));
        assert_eq!(fit.largest_call_tokens, 2800);
        assert_eq!(fit.calls_over, 0);
        let tight = super::fit(&w, None, 1, window(2799));
        assert_eq!(tight.calls_over, CONTEXT_SAMPLE_TASKS);
    }

    fn endpoint() -> Target {
        Target::endpoint("e", "http://127.0.0.1:1/v1")
    }

    #[test]
    fn sim_presets_and_max_context_declare_the_window() {
        let sim = |preset: &str, max_context: Option<u32>| {
            let serving = crate::config::SimServing {
                max_context,
                ..Default::default()
            };
            Target {
                kind: TargetKind::Sim {
                    preset: preset.into(),
                    faults: Default::default(),
                    serving,
                },
                max_context,
                ..endpoint()
            }
        };
        assert_eq!(
            declared_window(&sim("h100-llama3-8b", None)).map(|w| w.tokens),
            Some(8192)
        );
        assert_eq!(
            declared_window(&sim("h100-llama3.1-8b", None)).map(|w| w.tokens),
            Some(131_072)
        );
        assert_eq!(
            declared_window(&sim("h100-llama3.1-8b", Some(32_768))).map(|w| w.tokens),
            Some(32_768)
        );
        assert_eq!(declared_window(&endpoint()), None);
        let declared = Target {
            max_context: Some(4096),
            ..endpoint()
        };
        assert_eq!(declared_window(&declared).map(|w| w.tokens), Some(4096));
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group(8192), "8,192");
        assert_eq!(group(131_072), "131,072");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000_000), "1,000,000");
    }
}
