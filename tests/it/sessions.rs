//! `sessions` workloads: recorded agent sessions replayed call by call.

use std::path::Path;

use capcard::config;

use crate::support::{capcard, experiment_file, render};

#[test]
fn bad_sessions_files_point_at_their_path() {
    let err = config::load(Path::new("tests/data/bad-sessions.kdl")).unwrap_err();
    insta::assert_snapshot!(render(&err));
}

#[test]
fn sessions_replay_in_virtual_time_with_tasks_and_calls_per_second() {
    let trace = std::fs::read_to_string("tests/data/sessions-bailian.jsonl").unwrap();
    let (tmp, file) = experiment_file(
        "replay.kdl",
        r#"
experiment "replay" {
    seed 5
}
target "tiny" {
    sim tiny
}
workload "harness-a" {
    sessions "harness-a.jsonl" tool-time-max="1s"
}
slo "agent" {
    ttft p90="2s"
}
closed {
    concurrency 1 4
    duration "3s"
    warmup "300ms"
}
open {
    arrival poisson
    search min=0.1 max=20 precision="25%"
    duration "8s"
    warmup "300ms"
    budget "60s"
}
"#,
    );
    std::fs::write(tmp.path().join("harness-a.jsonl"), trace).unwrap();
    let plan = capcard().arg("plan").arg(&file).output().unwrap();
    let plan = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(
        plan.contains("tasks/s") || plan.contains("sessions"),
        "{plan}"
    );
    let out = tmp.path().join("out");
    capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .assert()
        .success();
    let card = std::fs::read_to_string(out.join("tiny--harness-a.md")).unwrap();
    assert!(card.contains("rates in tasks/s"), "{card}");
    assert!(card.contains("calls/s"), "{card}");
    // Closed loop counts sessions; the card also gives their calls in flight.
    assert!(card.contains("| concurrency | calls in flight |"), "{card}");
    // Every closed-loop task is one session of 4 calls (a root and three
    // turns), all of which the journal records under the task.
    let journal =
        std::fs::read_to_string(out.join("runs").join("tiny--harness-a--c0004.jsonl")).unwrap();
    let tasks: Vec<serde_json::Value> = journal
        .lines()
        .filter(|l| l.contains("\"kind\":\"task\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!tasks.is_empty());
    let complete: Vec<_> = tasks.iter().filter(|t| t["e2e_ms"].is_number()).collect();
    assert!(!complete.is_empty(), "{journal}");
    for t in complete {
        assert_eq!(t["calls"], 4, "{t}");
    }
}

/// The shipped comparison: the same 16 tasks by two harnesses, one that
/// re-sends a stable prefix and one that stamps the time on top of every
/// prompt, replayed on the simulator calibrated to vLLM CPU. Reuse is the
/// difference between them, so the capacity must differ, and the summary
/// must say the measurements tell them apart.
#[test]
fn harness_compare_sets_the_harnesses_apart_by_their_reuse() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/harness-compare.kdl");
    let tmp = tempfile::tempdir().unwrap();
    let out = capcard()
        .args([
            "run",
            "--virtual",
            "--quiet",
            "--target",
            "tiny-cpu",
            "--out",
        ])
        .arg(tmp.path())
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = crate::support::read_report(tmp.path());
    assert_eq!(report.harnesses.len(), 1, "one target with two harnesses");
    let compared = &report.harnesses[0];
    assert_eq!(compared.target, "tiny-cpu");
    let row = |name: &str| {
        compared
            .rows
            .iter()
            .find(|r| r.workload == name)
            .unwrap_or_else(|| panic!("a row for {name}"))
    };
    let (a, b) = (row("harness-a"), row("harness-b"));
    let reuse = |r: &capcard::analyze::harness::HarnessRow| {
        let reuse = r.reuse.as_ref().expect("reuse measured");
        (
            reuse.potential.expect("a potential"),
            reuse.realized_server.expect("the simulator's counters"),
        )
    };
    let (a_potential, a_realized) = reuse(a);
    let (b_potential, b_realized) = reuse(b);
    assert!(
        a_potential > 0.6,
        "harness A re-sends its context: {a_potential}"
    );
    assert!(
        (a_potential - a_realized).abs() < 0.10,
        "the simulator realizes A's reuse: {a_potential} vs {a_realized}"
    );
    assert!(
        b_potential < 0.05 && b_realized < 0.05,
        "{b_potential} {b_realized}"
    );
    let best = compared
        .best
        .iter()
        .find(|b| b.slo == "agent")
        .expect("a best harness for `agent`");
    assert_eq!(best.target, "harness-a", "reuse buys capacity");
    assert!(
        !best.within_noise,
        "the ranges tell the harnesses apart: {:?} / {:?}",
        a.cr_open, b.cr_open
    );
    let calls = a.calls_per_task.expect("calls per task");
    assert!(
        (3.5..5.5).contains(&calls),
        "about 4.3 calls a task: {calls}"
    );
    let summary = std::fs::read_to_string(tmp.path().join("summary.md")).unwrap();
    assert!(summary.contains("## Harnesses compared"), "{summary}");
    assert!(
        summary.contains(
            "and their ranges do not meet: on this replica the harness changes the capacity"
        ),
        "{summary}"
    );
    // An agent card's rates are tasks/s everywhere, its notes included.
    for card in &report.cards {
        for note in card
            .notes
            .iter()
            .chain(card.cr_open.iter().filter_map(|c| c.note.as_ref()))
        {
            assert!(!note.contains(" rps"), "{}: {note}", card.workload);
        }
    }
}

/// `arrival recorded` replays sessions' start times: a workload without
/// sessions is pointed at, with the way out.
#[test]
fn recorded_arrivals_need_sessions() {
    let err = config::load(Path::new("tests/data/recorded-without-sessions.kdl")).unwrap_err();
    insta::assert_snapshot!(render(&err));
}
