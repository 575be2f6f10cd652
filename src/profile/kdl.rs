//! A profile as a ready-to-run experiment (pure): the `workload` block and
//! the `open { arrival … }` line the traffic calls for, inside a complete
//! file that `capcard check` accepts, every fitted line commented with how
//! it was fitted and on how many samples.
//!
//! What the log cannot say is not invented: the SLO is a marked draft to
//! replace (the card's SLO frontier is where it gets negotiated), the
//! target a simulated placeholder, and a quantity the log lacks (think time
//! without timestamps, output lengths without usage) is a marked
//! placeholder with the reason next to it.

use std::fmt::Write;

use crate::config::DistKind;
use crate::config::write as kdl;

use super::agent::AgentProfile;
use super::fit::{KS_CRITICAL_1PCT, LengthFit};
use super::{Profile, SHARED_PREFIX_MIN_FRACTION, SourceFormat};

/// Tokens or seconds: how a distribution's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Tokens,
    Seconds,
    /// Steps or calls: whole values, but a law's parameters keep three
    /// significant figures (a mean of 5.43 steps is not 5).
    Count,
}

/// The experiment file for `profile`, named `name` (a KDL string).
pub fn experiment(profile: &Profile, name: &str) -> String {
    let mut out = String::new();
    let sources: Vec<String> = profile
        .sources
        .iter()
        .map(|s| {
            format!(
                "{} ({}, {} {})",
                s.path,
                s.format.label(),
                group(s.requests),
                match s.format {
                    SourceFormat::Agent(_) => "calls",
                    SourceFormat::Log(_) => "requests",
                }
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "// Written by `capcard profile` from {}.",
        sources.join(", ")
    );
    out.push_str(
        "// Lengths: the family (lognormal, gamma, normal, exponential) with the smallest\n\
         // Kolmogorov-Smirnov distance D, kept when D is under the 1% critical value\n\
         // 1.63/sqrt(n); otherwise a table of the observed quantiles (`empirical`).\n\
         // Clamps are the observed range. No prompt text from the log is in this file.\n\
         // Takes about what `capcard plan` says against a real server, and seconds\n\
         // on the simulated placeholder with `--virtual`.\n",
    );
    if profile.agent.is_some() {
        out.push_str(
            "// Agent traces: a task is a recorded session. A step is a call and its siblings\n\
             // (calls waiting on the same parent's answer); steps = the main lane's depth,\n\
             // fan-out = calls per step, tool time = the parent's answer to the step's start\n\
             // (capped at its 99th percentile), context growth = a step's prompt minus the\n\
             // prefix it re-sends of its parent's, input-tokens = each session's first prompt.\n",
        );
    }
    for source in &profile.sources {
        if let Some(times) = source.times_statement() {
            let _ = writeln!(out, "// Times in {}: {times}.", source.path);
        }
    }
    for warning in profile.warnings() {
        let _ = writeln!(out, "// Warning: {warning}.");
    }
    for note in &profile.notes {
        let _ = writeln!(out, "// Note: {note}.");
    }
    out.push('\n');
    let _ = writeln!(out, "experiment {} {{", kdl::string(name));
    let _ = writeln!(
        out,
        "    description {}",
        kdl::string(&format!(
            "Traffic profiled from {}",
            profile
                .sources
                .iter()
                .map(|s| s.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    );
    out.push_str("    seed 1\n}\n\n");
    out.push_str(
        "// The replica to size. A placeholder: replace the `sim` line with\n\
         // `endpoint \"http://127.0.0.1:8000/v1\"` to measure your server.\n",
    );
    match profile
        .agent
        .as_ref()
        .and_then(|a| a.reasoning_tokens.as_ref())
    {
        Some(fit) => {
            out.push_str("target \"replica\" {\n    sim h100-llama3.1-8b {\n        // reasoning before each answer, as the trace records it (part of output-tokens)\n");
            line(&mut out, "        ", "reasoning-tokens", fit, Unit::Tokens);
            out.push_str("    }\n}\n\n");
        }
        None => out.push_str("target \"replica\" {\n    sim h100-llama3.1-8b\n}\n\n"),
    }

    let _ = writeln!(out, "workload {} {{", kdl::string(name));
    if profile.agent.is_some() {
        out.push_str("    // input-tokens: each session's first prompt (the initial context); output-tokens: every call's answer\n");
    }
    match &profile.input_tokens {
        Some(fit) => line(&mut out, "    ", "input-tokens", fit, Unit::Tokens),
        None => out.push_str(
            "    input-tokens fixed 512                  // PLACEHOLDER: the log has too few input lengths to fit\n",
        ),
    }
    match &profile.output_tokens {
        Some(fit) => line(&mut out, "    ", "output-tokens", fit, Unit::Tokens),
        None => out.push_str(
            "    output-tokens fixed 128                 // PLACEHOLDER: the log records no output lengths\n",
        ),
    }
    if let Some(prefix) = &profile.prefix {
        let source = profile.prefix_source.unwrap_or("the log");
        let facts = format!(
            "from {source}: {} of requests start with a prefix shared across sessions ({} distinct, {} effective); an ideal prefix cache hits {} of prompt tokens; n={}",
            crate::format::pct_of_fraction(prefix.sharing_fraction),
            group(prefix.distinct_prefixes),
            prefix.groups,
            crate::format::pct_of_fraction(prefix.hit_fraction),
            group(prefix.n),
        );
        if prefix.shared_tokens > 0 && prefix.sharing_fraction >= SHARED_PREFIX_MIN_FRACTION {
            let _ = writeln!(
                out,
                "    shared-prefix tokens={} groups={}   // {facts}",
                prefix.shared_tokens,
                prefix.groups.max(1)
            );
        } else if prefix.shared_tokens > 0 {
            let _ = writeln!(
                out,
                "    // shared-prefix tokens={} groups={} is left out: it would give every request a prefix; {facts}",
                prefix.shared_tokens,
                prefix.groups.max(1)
            );
        } else {
            let _ = writeln!(
                out,
                "    // no shared-prefix: no prompt starts with a prefix sent by another session ({facts})"
            );
        }
    }
    if let Some(sessions) = &profile.sessions {
        let _ = writeln!(
            out,
            "    conversation {{                          // {} sessions; later turns re-send the history",
            group(sessions.count)
        );
        match &sessions.turns {
            Some(fit) => line(
                &mut out,
                "        ",
                "turns",
                &whole_turns(fit),
                Unit::Tokens,
            ),
            None => out.push_str("        turns fixed 1\n"),
        }
        match &sessions.think_time {
            Some(fit) => {
                line(&mut out, "        ", "think-time", fit, Unit::Seconds);
                if !sessions.think_time_excludes_answer {
                    out.push_str(
                        "        // think time includes the answer's own time: the log has no latencies\n",
                    );
                }
            }
            None => out.push_str(
                "        think-time exponential mean=\"5s\"    // PLACEHOLDER: the log has no timestamps within sessions\n",
            ),
        }
        out.push_str("    }\n");
    }
    if let Some(agent) = &profile.agent {
        agent_block(&mut out, agent);
        out.push_str(
            "    // Or replay the trace as recorded, one task = one recorded session replayed\n\
             \x20   // call by call (its calls, lengths, gaps and fan-outs as they were): replace\n\
             \x20   // this block's lines with (the path as given to `capcard profile`; a relative\n\
             \x20   // path is read from this file's folder)\n",
        );
        for source in &profile.sources {
            let _ = writeln!(out, "    // sessions {}", kdl::string(&source.path));
        }
    }
    out.push_str("}\n\n");

    out.push_str(
        "// DRAFT: an SLO is a promise to choose, not something a log can say. Replace\n\
         // these bounds; the card's SLO frontier shows what each bound would allow.\n\
         slo \"draft\" {\n",
    );
    if let Some((p90, e2e)) = profile.agent.as_ref().and_then(|a| {
        a.task_e2e
            .p90_s
            .filter(|p| *p > 0.0)
            .map(|p| (p, &a.task_e2e))
    }) {
        let _ = writeln!(
            out,
            "    task-e2e p90=\"{}\"   // the recorded tasks' p90 ({}) rounded up; measured from the {}; n={}",
            duration(ceil_2_sig(p90)),
            crate::format::ms(p90 * 1000.0),
            e2e.span.words(),
            group(e2e.fit.as_ref().map_or(0, |f| f.n)),
        );
    }
    out.push_str("    ttft p95=\"1s\"\n    e2e p95=\"30s\"\n    error-rate max=\"1%\"\n}\n\n");
    // Conversations spend most of their time thinking, so a level of the
    // sweep (conversations in flight) loads the replica far less than as
    // many single requests would: the sweep goes 8x further to reach the
    // knee, and open-loop windows start once the first conversations ended.
    let (levels, open_warmup) = if profile.agent.is_some() {
        ("1 2 4 8 16 32 64 128", "60s")
    } else if profile.sessions.is_some() {
        ("1 2 4 8 16 32 64 128 256 512 1024", "60s")
    } else {
        ("1 2 4 8 16 32 64 128", "15s")
    };
    let (closed_duration, closed_warmup) = if profile.agent.is_some() {
        ("120s", "30s")
    } else {
        ("60s", "10s")
    };
    let _ = write!(
        out,
        "// Closed loop: CrossP and Cr_closed of the replica on this traffic ({}).\n\
         closed {{\n    concurrency {levels}\n    duration \"{closed_duration}\"\n    warmup \"{closed_warmup}\"\n}}\n\n",
        if profile.agent.is_some() {
            "agent tasks in flight; calls in flight vary with fan-out and tool time"
        } else if profile.sessions.is_some() {
            "conversations in flight; most of them are thinking"
        } else {
            "requests in flight"
        }
    );
    out.push_str("open {\n");
    match &profile.arrival {
        Some(a) => {
            let _ = writeln!(
                out,
                "    arrival {:<36}// {} {}/s on average, busiest minute {}/s, busiest 10 s {}/s; gap CV {:.2}; n={}",
                a.process,
                profile.arrival_unit(),
                crate::format::significant(a.mean_rps),
                crate::format::significant(a.peak_rps_1m),
                crate::format::significant(a.peak_rps_10s),
                a.cv,
                group(a.n),
            );
        }
        None => out.push_str(
            "    arrival poisson                         // PLACEHOLDER: the log has no usable timestamps\n",
        ),
    }
    let unit = if profile.agent.is_some() {
        "agent tasks/s"
    } else if profile.sessions.is_some() {
        "conversations/s"
    } else {
        "requests/s"
    };
    let search = if profile.agent.is_some() {
        "min=0.05 max=64"
    } else {
        "min=0.25 max=256"
    };
    let _ = writeln!(
        out,
        "    search {search} precision=\"10%\"  // {unit}; Cr_open is the replica's, not the log's"
    );
    let open_duration = if profile.agent.is_some() {
        "300s"
    } else {
        "120s"
    };
    let _ = write!(
        out,
        "    duration \"{open_duration}\"\n    warmup \"{open_warmup}\"\n    \
         // frontier 0.5 2                         // to negotiate the SLO: also measure where each bound x0.5 and x2 holds\n}}\n",
    );
    if let Some(a) = &profile.arrival {
        // The demand to size for is the busiest minute, not the average.
        let _ = writeln!(
            out,
            "\n// Demand: the log's busiest minute ({}/s, mean {}/s).\nsizing {{\n    target rps={} slo=draft\n    headroom \"30%\"\n}}",
            crate::format::significant(a.peak_rps_1m),
            crate::format::significant(a.mean_rps),
            crate::format::significant(a.peak_rps_1m.max(0.001)),
        );
    }
    out
}

/// The `agent { ... }` block: steps, fan-out, tool time and context growth,
/// each with its fit; calls per task as a comment (the model's calls are
/// steps x fan-out).
fn agent_block(out: &mut String, agent: &AgentProfile) {
    let per_task = agent.calls_per_task.as_ref().map_or(String::new(), |f| {
        format!(
            "; calls per task: mean {}, p50 {}, p99 {}",
            crate::format::significant(f.mean),
            crate::format::significant(f.p50),
            crate::format::significant(f.p99)
        )
    });
    let _ = writeln!(
        out,
        "    agent {{                                 // {} sessions, {} calls{per_task}",
        group(agent.sessions),
        group(agent.calls)
    );
    match &agent.steps {
        Some(fit) => line(out, "        ", "steps", &whole_turns(fit), Unit::Count),
        None => out
            .push_str("        steps fixed 1                       // PLACEHOLDER: no sessions\n"),
    }
    match &agent.fan_out {
        Some(fit) => line(out, "        ", "fan-out", &whole_turns(fit), Unit::Count),
        None => {
            out.push_str("        fan-out fixed 1                     // PLACEHOLDER: no steps\n")
        }
    }
    let t = &agent.tool_time;
    match &t.fit {
        Some(fit) => {
            line(out, "        ", "tool-time", fit, Unit::Seconds);
            let source = if t.from_tool_ms == t.n {
                "the recorded tool wall time".to_string()
            } else if t.gap_includes_answer > 0 {
                format!(
                    "the gap after the parent's start for {} of {} steps (no end recorded: includes the answer, an upper bound)",
                    group(t.gap_includes_answer),
                    group(t.n)
                )
            } else if t.from_tool_ms > 0 {
                format!(
                    "the recorded tool wall time for {} of {} steps, else the gap after the parent's answer",
                    group(t.from_tool_ms),
                    group(t.n)
                )
            } else {
                "the gap after the parent's answer".to_string()
            };
            let _ = writeln!(
                out,
                "        // tool time: {source}; {} of {} values above the 99th percentile ({}) capped at it",
                group(t.capped),
                group(t.n),
                t.cap_s
                    .map_or("-".to_string(), |c| crate::format::ms(c * 1000.0))
            );
        }
        None => out.push_str(
            "        tool-time fixed \"1s\"                // PLACEHOLDER: no call waits on another's answer\n",
        ),
    }
    let g = &agent.context_growth;
    match &g.fit {
        Some(fit) => {
            line(out, "        ", "context-growth", fit, Unit::Tokens);
            let how = if g.from_blocks > 0 && g.from_lengths == 0 {
                "input minus the leading blocks shared with the parent's prompt"
            } else if g.from_blocks == 0 {
                "input minus the parent's input (no blocks)"
            } else {
                "input minus the re-sent prefix (blocks where recorded, else the parent's input)"
            };
            let _ = writeln!(
                out,
                "        // context growth: {how}; {} of the steps' prompts re-sent{}",
                g.resent_fraction
                    .map_or("-".to_string(), crate::format::pct_of_fraction),
                if g.fresh_contexts + g.not_longer > 0 {
                    format!(
                        "; {} steps with a fresh or trimmed context left out",
                        group(g.fresh_contexts + g.not_longer)
                    )
                } else {
                    String::new()
                }
            );
        }
        None => out.push_str(
            "        context-growth fixed 0              // no step appends to its parent's prompt\n",
        ),
    }
    if let Some(reuse) = &agent.reuse {
        let _ = writeln!(
            out,
            "        // reuse potential: an unlimited prefix cache would serve {} of prompt tokens (calls in start order)",
            crate::format::pct_of_fraction(reuse.hit_fraction)
        );
    }
    out.push_str("    }\n");
}

/// Rounded up to two significant figures: a bound no lower than the value.
fn ceil_2_sig(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return v;
    }
    let unit = 10f64.powi(v.log10().floor() as i32 - 1);
    crate::format::round_3_sig((v / unit - 1e-9).ceil() * unit)
}

/// One fitted distribution line with its comment.
fn line(out: &mut String, indent: &str, node: &str, fit: &LengthFit, unit: Unit) {
    let (min, max) = match unit {
        Unit::Tokens | Unit::Count => (fit.min.floor().max(1.0), fit.max.ceil()),
        Unit::Seconds => (fit.min, fit.max),
    };
    let clamps = format!("min={} max={}", value(min, unit), value(max, unit));
    let critical = KS_CRITICAL_1PCT / (fit.n as f64).sqrt();
    let observed = format!(
        "observed mean {}, p50 {}, p99 {}",
        shown(fit.mean, unit),
        shown(fit.p50, unit),
        shown(fit.p99, unit)
    );
    let quality = if let DistKind::Fixed { value: v } = fit.kind {
        let _ = writeln!(
            out,
            "{indent}{node} fixed {}   // every value in the log is {}, n={}",
            value(v, unit),
            shown(v, unit),
            group(fit.n)
        );
        return;
    } else if fit.accepted {
        format!(
            "{}: KS D={:.3} <= {:.3} (1%), n={}; {observed}",
            fit.family.label(),
            fit.ks_statistic,
            critical,
            group(fit.n)
        )
    } else {
        format!(
            "empirical table: no family passed KS at 1% (best D={:.3} > {:.3}), n={}; {observed}",
            fit.ks_statistic,
            critical,
            group(fit.n)
        )
    };
    match &fit.kind {
        DistKind::Empirical { points } => {
            let _ = writeln!(out, "{indent}{node} empirical {clamps} {{   // {quality}");
            for (v, w) in merge_points(points) {
                let _ = writeln!(
                    out,
                    "{indent}    value {} weight={}",
                    value(v, unit),
                    num(w)
                );
            }
            let _ = writeln!(out, "{indent}}}");
        }
        kind => {
            let law = law(kind, unit);
            let _ = writeln!(out, "{indent}{node} {law} {clamps}   // {quality}");
        }
    }
}

/// Turn counts are whole: an empirical table's values are rounded (the
/// generator rounds draws of any family).
fn whole_turns(fit: &LengthFit) -> LengthFit {
    let mut fit = fit.clone();
    if let DistKind::Empirical { points } = &mut fit.kind {
        for p in points.iter_mut() {
            p.0 = p.0.round().max(1.0);
        }
    }
    fit.min = fit.min.max(1.0);
    fit
}

fn law(kind: &DistKind, unit: Unit) -> String {
    match kind {
        DistKind::LogNormal { median, sigma } => {
            format!(
                "lognormal median={} sigma={}",
                value(*median, unit),
                num(*sigma)
            )
        }
        DistKind::Gamma { shape, scale } => {
            format!("gamma shape={} scale={}", num(*shape), value(*scale, unit))
        }
        DistKind::Normal { mean, stddev } => {
            format!(
                "normal mean={} stddev={}",
                value(*mean, unit),
                value(*stddev, unit)
            )
        }
        DistKind::Exponential { mean } => format!("exponential mean={}", value(*mean, unit)),
        DistKind::Fixed { value: v } => format!("fixed {}", value(*v, unit)),
        DistKind::Uniform { min, max } => {
            format!(
                "uniform min={} max={}",
                value(*min, unit),
                value(*max, unit)
            )
        }
        DistKind::Empirical { .. } => "empirical".to_string(),
    }
}

/// Equal values of an empirical table become one value with their weights summed.
fn merge_points(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for &(v, w) in points {
        match merged.last_mut() {
            Some(last) if last.0 == v => last.1 += w,
            _ => merged.push((v, w)),
        }
    }
    merged
}

/// A value in the file's syntax: whole tokens, or a duration string.
fn value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Tokens => format!("{}", v.round().max(if v > 0.0 { 1.0 } else { 0.0 })),
        Unit::Count => num(v),
        Unit::Seconds => format!("\"{}\"", duration(v)),
    }
}

/// A value for a comment.
fn shown(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Tokens | Unit::Count if v < 100.0 => crate::format::significant(v),
        Unit::Tokens | Unit::Count => group(v.round() as usize),
        Unit::Seconds => crate::format::ms(v * 1000.0),
    }
}

/// Seconds as a duration literal the language reads, three significant
/// figures: `850ms` below a second, else seconds (`4.26s`).
fn duration(seconds: f64) -> String {
    crate::format::duration_literal(crate::format::round_3_sig(seconds))
}

/// A dimensionless parameter: 3 significant digits.
fn num(v: f64) -> String {
    crate::format::significant(v)
}

/// `12345` → `12,345`, as the cards write counts.
fn group(n: usize) -> String {
    crate::format::num(n as f64, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_the_language_reads_them() {
        assert_eq!(num(612.4), "612");
        assert_eq!(num(0.5834), "0.583");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(12_345.0), "12345");
        assert_eq!(duration(0.8504), "850ms");
        assert_eq!(duration(4.256), "4.26s");
        assert_eq!(group(12_345), "12,345");
        assert_eq!(group(999), "999");
        assert_eq!(kdl::string("a \"b\""), "\"a \\\"b\\\"\"");
        assert_eq!(
            merge_points(&[(1.0, 1.0), (1.0, 1.0), (2.0, 1.0)]),
            vec![(1.0, 2.0), (2.0, 1.0)]
        );
    }
}
