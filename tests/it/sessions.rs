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
