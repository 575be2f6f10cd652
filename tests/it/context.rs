//! Context windows: a workload that outgrows its target's window is warned
//! about at `check` (with the numbers) and at the start of `run`; the
//! server's refusals are their own error class (`context-length`), named on
//! the card, and never judged as capacity. Both executors: over HTTP (the
//! simulator's real 400 body, classified by the client) and in virtual time.

use std::path::Path;

use crate::support::{capcard, experiment_file, read_report};
use capcard::exec::record::{ErrorClass, JournalLine};

/// An agent whose context grows from 600 tokens by 300 to 500 a step over
/// 2 to 6 steps, on tiny (a 2,048-token window): the late steps of long
/// tasks cannot fit.
fn experiment(extra_target: &str) -> String {
    format!(
        r#"
experiment "overflow" {{
    seed 3
}}
target "tiny" {{
    sim tiny
    {extra_target}
}}
workload "agent" {{
    input-tokens fixed 600
    output-tokens fixed 16
    agent {{
        steps uniform min=2 max=6
        fan-out fixed 1
        tool-time fixed "10ms"
        context-growth uniform min=300 max=500
    }}
}}
slo "calls" {{
    ttft p90="2s"
    error-rate max="1%"
}}
closed {{
    concurrency 2
    duration "2s"
    warmup "200ms"
}}
open {{
    arrival poisson
    rates 1
    duration "3s"
    warmup "200ms"
    budget "0s"
}}
"#
    )
}

/// miette's report as one line: box characters gone, wrapping undone.
fn flat(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .replace(['│', '×', '⚠'], " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn context_rejections(dir: &Path) -> (u64, u64, Vec<String>) {
    let (mut rejected, mut calls, mut details) = (0, 0, Vec::new());
    for entry in std::fs::read_dir(dir.join("runs")).unwrap() {
        let path = entry.unwrap().path();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if let Ok(JournalLine::Request(r)) = serde_json::from_str::<JournalLine>(line) {
                calls += 1;
                if r.error == Some(ErrorClass::ContextLength) {
                    rejected += 1;
                    details.extend(r.error_detail);
                } else {
                    assert_eq!(r.error, None, "{r:?}");
                }
            }
        }
    }
    (rejected, calls, details)
}

#[test]
fn check_warns_with_the_numbers_and_points_at_the_workload() {
    let (_tmp, file) = experiment_file("overflow.kdl", &experiment(""));
    let out = capcard().arg("check").arg(&file).output().unwrap();
    assert!(out.status.success(), "a warning is not an error");
    let stderr = flat(&out.stderr);
    for expected in [
        "workload `agent` exceeds the 2,048-token window",
        "sim preset tiny",
        "calls drawn",
        "the distributions allow up to 3,132 tokens",
        "this workload",
        "window 2048 tokens",
        "max-context",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in:\n{stderr}");
    }

    // The same workload on a window it fits: no warning.
    std::fs::write(
        &file,
        experiment("")
            .replace("max=6", "max=3")
            .replace("max=500", "max=400"),
    )
    .unwrap();
    let out = capcard().arg("check").arg(&file).output().unwrap();
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("window"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn max_context_beyond_the_model_is_refused_at_the_start() {
    let (tmp, file) = experiment_file("overflow.kdl", &experiment("max-context 4096"));
    let out = capcard()
        .args(["run", "--virtual", "--quiet", "--out"])
        .arg(tmp.path().join("out"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = flat(&out.stderr);
    assert!(
        stderr.contains("max-context 4096 is beyond sim/tiny's own context of 2048 tokens"),
        "{stderr}"
    );
}

/// Both executors: the refusals are classed, named on the card, and the
/// error-rate clause is judged on the calls that fit.
#[test]
fn refusals_are_context_length_errors_and_not_capacity() {
    let (tmp, file) = experiment_file("overflow.kdl", &experiment(""));
    for (name, args) in [("virtual", &["--virtual"][..]), ("http", &[][..])] {
        let dir = tmp.path().join(name);
        let out = capcard()
            .args(["run", "--quiet", "--out"])
            .arg(&dir)
            .args(args)
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("warning: workload `agent` exceeds the 2,048-token window"),
            "{name}: the run warns before the first run:\n{stderr}"
        );

        let (rejected, calls, details) = context_rejections(&dir);
        assert!(
            rejected > 0 && rejected < calls,
            "{name}: {rejected} of {calls}"
        );
        assert!(
            details
                .iter()
                .all(|d| d.contains("maximum context length is 2048 tokens")),
            "{name}: {details:?}"
        );

        let report = read_report(&dir);
        let card = &report.cards[0];
        let window = card
            .target_info
            .context_window
            .as_ref()
            .expect("window journaled");
        assert_eq!(window.tokens, 2048, "{name}");
        assert!(
            card.target_info
                .context_fit
                .as_deref()
                .is_some_and(|f| f.contains("exceeds the 2,048-token window")),
            "{name}: {:?}",
            card.target_info.context_fit
        );
        // Far more than 1% of the calls were refused, yet the error-rate
        // clause holds: only calls that fit are judged.
        let open = &card.open[0];
        assert!(
            open.errors_by_class
                .get("context-length")
                .copied()
                .unwrap_or(0)
                > 0,
            "{name}: {:?}",
            open.errors_by_class
        );
        let verdict = open
            .verdicts
            .iter()
            .find(|v| v.slo == "calls")
            .expect("a verdict for `calls`");
        let error_clause = verdict
            .clauses
            .iter()
            .find(|c| c.metric == "error-rate")
            .expect("the error-rate clause");
        assert_ne!(
            error_clause.verdict,
            Some(capcard::analyze::interval::Verdict::Fail),
            "{name}: {error_clause:?}"
        );

        let card_md = std::fs::read_to_string(dir.join("tiny--agent.md")).unwrap();
        for expected in [
            "**Context window exceeded.**",
            "were refused because prompt + output exceed the 2048-token window (sim preset tiny",
            "| Context window | 2048 tokens, prompt + output",
            "context-length",
        ] {
            assert!(
                card_md.contains(expected),
                "{name}: {expected:?} in:\n{card_md}"
            );
        }
    }
}
