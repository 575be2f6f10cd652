//! The experiment's conditions in words: distributions, data profiles, SLO
//! clauses and the arrival process, written the way a reader of the card
//! (not of the KDL file) needs them.
//!
//! These are pure functions over the typed model so a card states exactly
//! what was planned, in the same words on every card and in every template.

use crate::config::{Dist, DistKind, LatencyMetric, SloClause, Stat, Workload};

use crate::format::{duration_secs, pct_of_fraction, plain};

/// What a distribution's values measure: token counts, plain counts, or
/// seconds (written as durations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Tokens,
    Count,
    Seconds,
}

fn value_words(value: f64, quantity: Quantity) -> String {
    match quantity {
        Quantity::Tokens | Quantity::Count => plain(value),
        Quantity::Seconds => duration_secs(value),
    }
}

/// The request dialect a preflight settled, in one line: what every call
/// sent and where output tokens were counted from.
pub fn dialect(d: &crate::exec::Dialect) -> String {
    let mut fields = vec![format!("`{}`", d.length_field)];
    if d.force_length {
        fields.push("`ignore_eos` + `min_tokens`".into());
    }
    fields.push(if d.length_field == "max_output_tokens" {
        // The Responses API reports usage in its last event, unasked.
        "usage in `response.completed`".into()
    } else if d.stream_usage {
        "`stream_options` (usage in the stream)".into()
    } else {
        "no `stream_options`".into()
    });
    let counted = match d.output_tokens_from {
        crate::exec::TokenSource::Usage => "the server's usage",
        crate::exec::TokenSource::Tokenizer => "the target's tokenizer",
        crate::exec::TokenSource::Chunks => "streamed chunks (approximate)",
    };
    let how = if d.settled.is_empty() {
        "accepted as sent"
    } else {
        "settled by the preflight"
    };
    format!(
        "{}; output tokens from {counted}; {how} ({} preflight call{})",
        fields.join(", "),
        d.preflight_calls,
        if d.preflight_calls == 1 { "" } else { "s" }
    )
}

/// A distribution in words: `lognormal median 600 σ 0.6 [16..8192]`,
/// `exponential mean 4 s`, `uniform 1..6`.
pub fn dist_words(dist: &Dist, quantity: Quantity) -> String {
    let v = |x: f64| value_words(x, quantity);
    let body = match &dist.kind {
        DistKind::Fixed { value } => format!("fixed {}", v(*value)),
        DistKind::Uniform { min, max } => format!("uniform {}..{}", v(*min), v(*max)),
        DistKind::Normal { mean, stddev } => format!("normal mean {} sd {}", v(*mean), v(*stddev)),
        DistKind::LogNormal { median, sigma } => {
            format!("lognormal median {} σ {}", v(*median), plain(*sigma))
        }
        DistKind::Exponential { mean } => format!("exponential mean {}", v(*mean)),
        DistKind::Gamma { shape, scale } => {
            format!("gamma shape {} scale {}", plain(*shape), v(*scale))
        }
        DistKind::Empirical { points } => {
            let total: f64 = points.iter().map(|(_, w)| w).sum();
            let parts: Vec<String> = points
                .iter()
                .map(|(value, weight)| {
                    if total > 0.0 {
                        format!("{} ({})", v(*value), pct_of_fraction(weight / total))
                    } else {
                        v(*value)
                    }
                })
                .collect();
            format!("empirical {}", parts.join(", "))
        }
    };
    let clamp = match (dist.min, dist.max) {
        (Some(lo), Some(hi)) => format!(" [{}..{}]", v(lo), v(hi)),
        (Some(lo), None) => format!(" [≥ {}]", v(lo)),
        (None, Some(hi)) => format!(" [≤ {}]", v(hi)),
        (None, None) => String::new(),
    };
    format!("{body}{clamp}")
}

/// The data profile as labelled lines, in the order a reader needs them.
pub fn profile_lines(workload: &Workload) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let first = if workload.agent.is_some() {
        "input tokens (initial task context)"
    } else if workload.conversation.is_some() {
        "input tokens (new user message per turn)"
    } else {
        "input tokens"
    };
    lines.push((
        first.to_string(),
        dist_words(&workload.input_tokens, Quantity::Tokens),
    ));
    lines.push((
        "output tokens (per call)".to_string(),
        dist_words(&workload.output_tokens, Quantity::Tokens),
    ));
    if let Some(prefix) = &workload.shared_prefix {
        lines.push((
            "shared prefix".to_string(),
            format!(
                "{} tokens, {} distinct prefixes (system prompts reused across requests)",
                plain(f64::from(prefix.tokens)),
                prefix.groups
            ),
        ));
    }
    if let Some(conv) = &workload.conversation {
        lines.push((
            "conversation".to_string(),
            format!(
                "turns {}; think time {}; the history is re-sent each turn",
                dist_words(&conv.turns, Quantity::Count),
                dist_words(&conv.think_time, Quantity::Seconds)
            ),
        ));
    }
    if let Some(agent) = &workload.agent {
        lines.push((
            "agent loop".to_string(),
            format!(
                "steps {}; fan-out {} parallel calls per step; tool time {}; context growth {} tokens per step",
                dist_words(&agent.steps, Quantity::Count),
                dist_words(&agent.fan_out, Quantity::Count),
                dist_words(&agent.tool_time, Quantity::Seconds),
                dist_words(&agent.context_growth, Quantity::Tokens)
            ),
        ));
    }
    lines
}

/// How a latency metric is named on a card.
pub fn metric_label(metric: LatencyMetric) -> &'static str {
    match metric {
        LatencyMetric::Ttft => "TTFT",
        LatencyMetric::Ttfo => "TTFO",
        LatencyMetric::Itl => "ITL",
        LatencyMetric::Tpot => "TPOT",
        LatencyMetric::E2e => "E2E",
        LatencyMetric::TaskE2e => "task E2E",
    }
}

/// The same, from the string form stored in results (`"ttft"`, `"task-e2e"`);
/// an unknown name is shown as stored.
pub fn metric_label_str(metric: &str) -> String {
    match metric {
        "ttft" => "TTFT".into(),
        "ttfo" => "TTFO".into(),
        "itl" => "ITL".into(),
        "tpot" => "TPOT".into(),
        "e2e" => "E2E".into(),
        "task-e2e" => "task E2E".into(),
        other => other.to_string(),
    }
}

/// One SLO clause: `TTFT p99 ≤ 1 s`, `error rate ≤ 0.5%`.
pub fn clause_words(clause: &SloClause) -> String {
    match clause {
        SloClause::Latency {
            metric,
            stat,
            limit,
        } => format!(
            "{} {} ≤ {}",
            metric_label(*metric),
            stat_label(*stat),
            duration_secs(limit.as_secs_f64())
        ),
        SloClause::ErrorRate { max } => format!("error rate ≤ {}", pct_of_fraction(max.0)),
    }
}

/// A clause or a failed-clause reason as `results.json` stores it
/// (`"ttft p50 261ms [225ms, 314ms] > 150ms"`, named by
/// [`crate::analyze::slo::clause_label`]) in the card's words:
/// `"TTFT p50 261 ms [225 ms, 314 ms] > 150 ms"`. The stored string stays
/// as it is (charts match it); only the view rewrites it.
pub fn stored_clause_words(stored: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    for (i, word) in stored.split(' ').enumerate() {
        if i == 0 || words.last().is_some_and(|w| w.ends_with(';')) {
            if word == "error-rate" {
                words.push("error rate".to_string());
                continue;
            }
            let label = metric_label_str(word);
            if label != word {
                words.push(label);
                continue;
            }
        }
        words.push(spaced_unit(word));
    }
    words.join(" ")
}

/// `"261ms"` → `"261 ms"`, `"[225ms,"` → `"[225 ms,"`, `"1.8s]"` → `"1.8 s]"`.
fn spaced_unit(word: &str) -> String {
    let start = word.find(|c: char| c.is_ascii_digit());
    let Some(start) = start else {
        return word.to_string();
    };
    let digits_end = word[start..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(word.len(), |e| start + e);
    for unit in ["ms", "s"] {
        if let Some(rest) = word[digits_end..].strip_prefix(unit) {
            if rest.is_empty() || rest.starts_with([',', ']', ')', ';']) {
                return format!("{} {unit}{rest}", &word[..digits_end]);
            }
        }
    }
    word.to_string()
}

/// `p99`, `p99.9`, `mean`.
pub fn stat_label(stat: Stat) -> String {
    stat.key()
}

/// What one open-loop arrival is, the unit of arrival rates, and the unit
/// of call rates (throughput, goodput): the same as the arrival rate for
/// single requests, LLM calls otherwise.
pub fn arrival_unit_words(workload: &Workload) -> (&'static str, &'static str, &'static str) {
    use crate::config::ArrivalUnit;
    match workload.unit() {
        ArrivalUnit::Request => ("request", "req/s", "req/s"),
        ArrivalUnit::Conversation => ("conversation", "conversations/s", "calls/s"),
        ArrivalUnit::AgentTask => ("agent task", "tasks/s", "calls/s"),
    }
}

/// An arrival-process label as stored in results, in words.
pub fn arrival_words(label: &str) -> String {
    match label {
        "poisson" => "poisson (exponential gaps)".to_string(),
        "constant" => "constant (evenly spaced)".to_string(),
        other if other.starts_with("gamma") => format!("{other} (bursty when cv > 1)"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Agent, Conversation, Fraction, SharedPrefix};

    #[test]
    fn stored_clauses_read_in_the_cards_words() {
        assert_eq!(
            stored_clause_words("ttft p50 261ms [225ms, 314ms] > 150ms"),
            "TTFT p50 261 ms [225 ms, 314 ms] > 150 ms"
        );
        assert_eq!(stored_clause_words("ttft p99 ≤ 1s"), "TTFT p99 ≤ 1 s");
        assert_eq!(
            stored_clause_words("error-rate 2% [1%, 3.5%] > 0.5%"),
            "error rate 2% [1%, 3.5%] > 0.5%"
        );
        assert_eq!(
            stored_clause_words("e2e p95 ≥ 1s (failed calls) [900ms, ∞)"),
            "E2E p95 ≥ 1 s (failed calls) [900 ms, ∞)"
        );
    }

    fn lognormal_input() -> Dist {
        Dist::lognormal(600.0, 0.6, 16.0, 8192.0)
    }

    #[test]
    fn distributions_in_words() {
        assert_eq!(
            dist_words(&lognormal_input(), Quantity::Tokens),
            "lognormal median 600 σ 0.6 [16..8,192]"
        );
        let think = Dist {
            kind: DistKind::Exponential { mean: 4.0 },
            min: None,
            max: None,
        };
        assert_eq!(
            dist_words(&think, Quantity::Seconds),
            "exponential mean 4 s"
        );
        let tool = Dist {
            kind: DistKind::LogNormal {
                median: 0.6,
                sigma: 0.8,
            },
            min: None,
            max: Some(5.0),
        };
        assert_eq!(
            dist_words(&tool, Quantity::Seconds),
            "lognormal median 600 ms σ 0.8 [≤ 5 s]"
        );
        let emp = Dist {
            kind: DistKind::Empirical {
                points: vec![(100.0, 1.0), (400.0, 3.0)],
            },
            min: None,
            max: None,
        };
        assert_eq!(
            dist_words(&emp, Quantity::Tokens),
            "empirical 100 (25%), 400 (75%)"
        );
        assert_eq!(
            dist_words(&Dist::fixed(3000.0), Quantity::Tokens),
            "fixed 3,000"
        );
    }

    #[test]
    fn profile_lists_every_planned_part() {
        let workload = Workload {
            name: "chat".into(),
            span: None,
            input_tokens: lognormal_input(),
            output_tokens: Dist {
                kind: DistKind::Normal {
                    mean: 220.0,
                    stddev: 60.0,
                },
                min: Some(8.0),
                max: Some(1024.0),
            },
            shared_prefix: Some(SharedPrefix {
                tokens: 400,
                groups: 4,
            }),
            conversation: Some(Conversation {
                turns: Dist {
                    kind: DistKind::Uniform { min: 1.0, max: 6.0 },
                    min: None,
                    max: None,
                },
                think_time: Dist {
                    kind: DistKind::Exponential { mean: 4.0 },
                    min: None,
                    max: None,
                },
            }),
            agent: None,
            dataset: None,
            tools: None,
            sessions: None,
        };
        let lines = profile_lines(&workload);
        let labels: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "input tokens (new user message per turn)",
                "output tokens (per call)",
                "shared prefix",
                "conversation"
            ]
        );
        assert_eq!(lines[1].1, "normal mean 220 sd 60 [8..1,024]");
        assert_eq!(
            lines[3].1,
            "turns uniform 1..6; think time exponential mean 4 s; the history is re-sent each turn"
        );
        assert_eq!(
            arrival_unit_words(&workload),
            ("conversation", "conversations/s", "calls/s")
        );

        let agentic = Workload {
            agent: Some(Agent {
                steps: Dist {
                    kind: DistKind::Uniform {
                        min: 3.0,
                        max: 12.0,
                    },
                    min: None,
                    max: None,
                },
                fan_out: Dist {
                    kind: DistKind::Uniform { min: 1.0, max: 4.0 },
                    min: None,
                    max: None,
                },
                tool_time: Dist::fixed(0.5),
                context_growth: Dist::fixed(800.0),
            }),
            conversation: None,
            ..workload
        };
        let lines = profile_lines(&agentic);
        assert_eq!(lines[0].0, "input tokens (initial task context)");
        assert_eq!(
            lines[3].1,
            "steps uniform 3..12; fan-out uniform 1..4 parallel calls per step; tool time fixed 500 ms; context growth fixed 800 tokens per step"
        );
    }

    #[test]
    fn slo_clauses_in_words() {
        let ttft = SloClause::Latency {
            metric: LatencyMetric::Ttft,
            stat: Stat::Percentile(99.0),
            limit: Duration::from_secs(1),
        };
        assert_eq!(clause_words(&ttft), "TTFT p99 ≤ 1 s");
        let itl = SloClause::Latency {
            metric: LatencyMetric::Itl,
            stat: Stat::Percentile(99.9),
            limit: Duration::from_millis(60),
        };
        assert_eq!(clause_words(&itl), "ITL p99.9 ≤ 60 ms");
        assert_eq!(
            clause_words(&SloClause::ErrorRate {
                max: Fraction(0.005)
            }),
            "error rate ≤ 0.5%"
        );
    }
}
