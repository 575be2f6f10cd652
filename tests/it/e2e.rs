//! End to end on the simulator: `capcard run` → results folder → `capcard
//! report`, through the real binary, as a user would.

use std::path::Path;

use capcard::analyze::frontier::{FittedPoint, FrontierPoint, frontier_targets, wanted_rate};

use crate::support::{binary, capcard, experiment_file, read_report, results_text};

/// A shortened quickstart: the tiny preset, a short sweep and a coarse search.
const SHORT_QUICKSTART: &str = r#"
experiment "e2e-short" {
    seed 11
}
target "tiny-sim" {
    sim tiny
    hardware "simulated"
    cost-per-hour 1.0 currency=EUR
}
workload "chat-small" {
    input-tokens lognormal median=96 sigma=0.4 min=16 max=512
    output-tokens normal mean=48 stddev=8 min=8 max=96
    shared-prefix tokens=32 groups=2
}
slo "interactive" {
    ttft p50="400ms" p90="1s"
    e2e p90="3s"
    error-rate max="10%"
}
closed {
    concurrency 1 4 16 64
    duration "2s"
    warmup "300ms"
}
open {
    arrival poisson
    search min=1 max=400 precision="25%"
    duration "3s"
    warmup "300ms"
}
sizing {
    target rps=100 slo=interactive
    target output-tokens-per-s=100000
    headroom "30%"
    spares 1
}
"#;

#[test]
fn run_then_report_on_the_simulator() {
    let (tmp, file) = experiment_file("short.kdl", SHORT_QUICKSTART);
    let out = tmp.path().join("results");

    let assert = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .assert();
    let output = assert.get_output();
    assert!(
        output.status.success(),
        "run failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // The folder of SPEC §5.
    for name in [
        "experiment.kdl",
        "plan.json",
        "results.json",
        "tiny-sim--chat-small.md",
    ] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("experiment.kdl")).unwrap(),
        SHORT_QUICKSTART
    );
    let journal =
        std::fs::read_to_string(out.join("runs/tiny-sim--chat-small--c0004.jsonl")).unwrap();
    assert!(
        journal.lines().count() > 10,
        "journal has a line per request"
    );

    let report = read_report(&out);
    assert_eq!(report.schema, "capcard/results/v2");
    assert_eq!(report.status, "complete");
    let card = &report.cards[0];
    assert_eq!(card.closed.len(), 4);
    assert!(card.closed.iter().all(|r| r.requests > 0 && r.errors == 0));
    // Throughput grows from c=1 to c=16 on a batching engine.
    assert!(card.closed[2].output_tokens_per_s > 2.0 * card.closed[0].output_tokens_per_s);
    assert!(
        card.crossp.is_some(),
        "CrossP reached in a 1..64 sweep of the tiny sim"
    );
    // The SLO frontier: one fitted curve per percentile clause, at the
    // declared bound and the default ladder's, monotone in the bound; at
    // the declared bound, the clause's Cr_open crossing.
    assert_eq!(card.frontier.len(), 3, "{:?}", card.frontier);
    for f in &card.frontier {
        let points: Vec<&FittedPoint> = f
            .points
            .iter()
            .map(|p| match p {
                FrontierPoint::Fitted(p) => p,
                FrontierPoint::Measured(p) => panic!("a measured point {p:?}"),
            })
            .collect();
        let multipliers: Vec<f64> = points.iter().map(|p| p.multiplier).collect();
        assert_eq!(multipliers, [0.5, 0.75, 1.0, 1.5, 2.0], "{f:?}");
        assert!(points.windows(2).all(|w| w[0].bound_ms < w[1].bound_ms));
        let estimates: Vec<f64> = points.iter().filter_map(|p| p.estimate_rps).collect();
        assert!(estimates.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        let crossing = card.cr_open[0]
            .clauses
            .iter()
            .find(|c| c.label == f.clause)
            .expect("the clause's crossing");
        let declared = points[2];
        assert_eq!(
            (declared.estimate_rps, declared.range),
            (crossing.estimate_rps, crossing.range)
        );
    }
    let card_md = std::fs::read_to_string(out.join("tiny-sim--chat-small.md")).unwrap();
    assert!(card_md.contains("### SLO frontier"), "{card_md}");
    let cr_closed = card.cr_closed.as_ref().expect("Cr_closed measured");
    assert!(cr_closed.range[0] <= cr_closed.range[1]);
    let cr_open = &card.cr_open[0];
    assert_eq!(cr_open.slo, "interactive");
    let rps = cr_open.rps.expect("Cr_open reached");
    assert!((1.0..400.0).contains(&rps), "Cr_open {rps}");
    assert!(cr_open.failed_at_rps.is_some_and(|f| f > rps));
    assert!(!card.open.is_empty());
    assert!(card.open.iter().all(|r| r.schedule_lag_ms.is_some()));
    assert_eq!(card.sizing.len(), 2);
    assert!(card.sizing.iter().all(|s| s.replicas.is_some()));

    // `report` regenerates the card byte for byte from the folder alone.
    let card_path = out.join("tiny-sim--chat-small.md");
    let written = std::fs::read_to_string(&card_path).unwrap();
    assert!(written.contains("Cr_open"));
    std::fs::remove_file(&card_path).unwrap();
    capcard().arg("report").arg(&out).assert().success();
    assert_eq!(std::fs::read_to_string(&card_path).unwrap(), written);

    // The card records the plan's times beside the time the runs took.
    let plan_path = out.join("plan.json");
    let plan_text = std::fs::read_to_string(&plan_path).unwrap();
    let plan: capcard::plan::Plan = serde_json::from_str(&plan_text).unwrap();
    let time = card.wall_time.as_ref().expect("planned and actual times");
    let planned = &plan.cards[0];
    assert_eq!(time.planned_expected_s, Some(planned.expected_wall_time_s));
    assert_eq!(time.planned_bound_s, planned.bound_wall_time_s);
    assert!(
        planned
            .bound_wall_time_s
            .is_some_and(|b| b >= planned.expected_wall_time_s)
    );
    let actual_s = time.actual_s.expect("every run finished");
    // Every journal (extensions included) is summed: each run takes its
    // warmup and measured time at least.
    let journals = std::fs::read_dir(out.join("runs")).unwrap().count() as u32;
    assert_eq!((time.runs, time.runs_without_finish), (journals, 0));
    assert!(actual_s >= 4.0 * 2.3, "{actual_s}");
    assert_eq!(time.simulated_s, None, "the wall clock");
    assert!(
        written.contains("| Time taken | planned ")
            && written
                .contains("runs' start → finish (extensions included, the time between runs not)"),
        "{written}"
    );

    // A folder planned before the bound existed still renders.
    let mut old: serde_json::Value = serde_json::from_str(&plan_text).unwrap();
    let to_old = |v: &mut serde_json::Value| {
        let map = v.as_object_mut().unwrap();
        map.remove("bound_wall_time_s");
        let expected = map.remove("expected_wall_time_s").unwrap();
        map.insert("estimated_wall_time_s".into(), expected);
    };
    to_old(&mut old);
    for card in old["cards"].as_array_mut().unwrap() {
        to_old(card);
        card["open"].as_object_mut().unwrap().remove("typical_runs");
    }
    std::fs::write(&plan_path, serde_json::to_string_pretty(&old).unwrap()).unwrap();
    capcard().arg("report").arg(&out).assert().success();
    let rerendered = std::fs::read_to_string(&card_path).unwrap();
    assert!(
        rerendered.contains("(the plan recorded no bound)"),
        "{rerendered}"
    );
}

const INTERRUPTIBLE: &str = r#"
experiment "e2e-interrupt" { seed 3 }
target "tiny-sim" { sim tiny }
workload "w" {
    input-tokens fixed 64
    output-tokens fixed 32
}
closed {
    concurrency 1 4
    duration "1500ms"
    warmup "200ms"
}
"#;

/// Ctrl-C mid-run: exit 2, what was measured stays on disk, the card renders
/// and says the folder is interrupted, and `--resume` finishes the rest while
/// keeping the run that had completed.
#[test]
fn interrupt_keeps_measurements_and_resume_completes() {
    let (tmp, file) = experiment_file("int.kdl", INTERRUPTIBLE);
    let out = tmp.path().join("results");

    let child = std::process::Command::new(binary())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("capcard starts");
    // Wait (bounded) until the second run has journaled a few requests.
    let second = out.join("runs/tiny-sim--w--c0004.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(&second).map_or(0, |t| t.lines().count()) < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "second run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let output = child.wait_with_output().expect("capcard exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("--resume"),
        "tells how to continue: {stderr}"
    );

    let report = read_report(&out);
    assert_eq!(report.status, "interrupted");
    let card = &report.cards[0];
    assert_eq!(card.closed.len(), 2, "both runs' measurements are kept");
    assert!(
        card.closed[1].incomplete,
        "the cut run is marked incomplete"
    );
    let journal = capcard::exec::read_journal(&second).unwrap();
    assert!(journal.footer.as_ref().is_some_and(|f| f.interrupted));
    let card_md = std::fs::read_to_string(out.join("tiny-sim--w.md")).unwrap();
    assert!(card_md.contains("interrupted"), "the card says so");

    // Resume: the finished run is kept byte for byte, the cut one re-run.
    let first = out.join("runs/tiny-sim--w--c0001.jsonl");
    let first_before = std::fs::read(&first).unwrap();
    capcard()
        .args(["run", "--quiet", "--resume"])
        .arg(&out)
        .arg(&file)
        .assert()
        .success();
    assert_eq!(std::fs::read(&first).unwrap(), first_before);
    let report = read_report(&out);
    assert_eq!(report.status, "complete");
    assert!(
        report.cards[0]
            .closed
            .iter()
            .all(|r| !r.incomplete && r.requests > 0)
    );
}

/// The same file and seed give the same request stream: prompt and output
/// lengths per task, and the open-loop arrival schedule, to the microsecond.
#[test]
fn same_file_and_seed_give_the_same_request_stream() {
    const SOURCE: &str = r#"
experiment "repro" { seed 99 }
target "t" { sim tiny; metrics #false }
workload "w" {
    input-tokens lognormal median=64 sigma=0.5 min=8 max=256
    output-tokens uniform min=4 max=24
    shared-prefix tokens=16 groups=3
}
open { arrival gamma cv=2.0; rates 40; duration "1s"; warmup "100ms" }
"#;
    let (tmp, file) = experiment_file("repro.kdl", SOURCE);
    let stream = |out: &Path| {
        capcard()
            .args(["run", "--quiet", "--out"])
            .arg(out)
            .arg(&file)
            .assert()
            .success();
        let journal = capcard::exec::read_journal(&out.join("runs/t--w--r40.000.jsonl")).unwrap();
        let mut calls: Vec<(u64, u32, u32, String)> = journal
            .requests
            .iter()
            .map(|r| {
                (
                    r.task,
                    r.prompt_tokens_requested,
                    r.output_tokens_requested,
                    format!("{:.3}", r.scheduled_ms),
                )
            })
            .collect();
        calls.sort();
        calls
    };
    let first = stream(&tmp.path().join("a"));
    let second = stream(&tmp.path().join("b"));
    assert!(
        first.len() > 20,
        "a second at 40 rps: {} calls",
        first.len()
    );
    assert_eq!(first, second);
    // Gamma cv=2 is bursty: the gaps are far from constant.
    let times: Vec<f64> = first.iter().map(|c| c.3.parse::<f64>().unwrap()).collect();
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    assert!(gaps.iter().any(|g| *g > 2.0 * mean));
}

/// A `completions` target that accepts token ids gets them, so prompt
/// lengths are exact: the simulator's usage equals what was requested.
#[test]
fn completions_targets_get_token_id_prompts_of_the_planned_length() {
    const SOURCE: &str = r#"
target "t" { sim tiny; api completions; metrics #false }
workload "w" {
    input-tokens uniform min=20 max=200
    output-tokens fixed 8
}
closed { concurrency 4; requests 24 }
"#;
    let (tmp, file) = experiment_file("ids.kdl", SOURCE);
    let out = tmp.path().join("res");
    let assert = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains("prompts as token ids"), "{stderr}");
    let journal = capcard::exec::read_journal(&out.join("runs/t--w--c0004.jsonl")).unwrap();
    assert!(journal.requests.len() >= 24);
    for r in &journal.requests {
        assert_eq!(
            r.prompt_tokens_reported,
            Some(r.prompt_tokens_requested),
            "{r:?}"
        );
    }
}

/// `repeat 2` on a short sweep and a two-rate grid whose low rate is too
/// short for a conclusive p90 on its own.
const REPEATED: &str = r#"
experiment "e2e-repeat" {
    seed 5
}
target "tiny-sim" {
    sim tiny
}
workload "w" {
    input-tokens fixed 64
    output-tokens fixed 16
}
slo "s" {
    ttft p90="2s"
}
closed {
    concurrency 1 4
    duration "1s"
    warmup "200ms"
    repeat 2
}
open {
    arrival poisson
    rates 4 40
    duration "1s"
    warmup "200ms"
    repeat 2
    budget "20s"
}
"#;

#[test]
fn repeat_runs_every_level_and_rate_and_shows_the_spread() {
    let (tmp, file) = experiment_file("repeat.kdl", REPEATED);
    let out = tmp.path().join("results");
    let output = capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let runs = out.join("runs");
    for id in [
        "c0001",
        "c0001--rep2",
        "c0004--rep2",
        "r4.000",
        "r4.000--rep2",
        "r40.000--rep2",
    ] {
        assert!(
            runs.join(format!("tiny-sim--w--{id}.jsonl")).is_file(),
            "{id} missing"
        );
    }
    let report = read_report(&out);
    let card = &report.cards[0];
    assert_eq!(card.closed.len(), 4, "both repetitions of both levels");
    assert_eq!(
        card.closed.iter().filter(|r| r.repetition.0 == 2).count(),
        2
    );
    let spread = card.repeat.as_ref().expect("the spread over repetitions");
    assert_eq!(spread.repetitions, 2);
    assert_eq!(spread.levels.len(), 2);
    assert!(spread.levels.iter().all(|l| l.runs == 2));
    let [lo, mid, hi] = spread.levels[1].output_tokens_per_s;
    assert!(lo <= mid && mid <= hi && lo > 0.0);
    assert_eq!(spread.cr_open[0].rps.len(), 2);
    // 4 rps × 1 s holds about 4 calls: never enough for a p90 upper bound.
    // The grid extends it (within the budget, as a run of its own) and a
    // rate still inconclusive is reported as such, never as a failure.
    assert!(
        runs.join("tiny-sim--w--r4.000--ext.jsonl").is_file(),
        "the short rate was extended"
    );
    let low = card
        .open
        .iter()
        .find(|r| r.rate_rps == Some(4.0) && r.repetition.0 == 1)
        .unwrap();
    assert_ne!(
        low.verdicts[0].verdict,
        capcard::analyze::Verdict::Fail,
        "{:?}",
        low.verdicts[0]
    );
    let card_md = std::fs::read_to_string(out.join("tiny-sim--w.md")).unwrap();
    assert!(
        card_md.contains("## Repeatability (2 repetitions)"),
        "{card_md}"
    );

    // `report` regenerates the same results from the journals.
    let before = results_text(&out);
    capcard().arg("report").arg(&out).assert().success();
    assert_eq!(before, results_text(&out));

    // `--resume` keeps every complete journal, extensions included, as it is.
    let ext = runs.join("tiny-sim--w--r4.000--ext.jsonl");
    let ext_before = std::fs::read(&ext).unwrap();
    let resumed = capcard()
        .args(["run", "--quiet", "--resume"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{log}");
    assert!(log.contains("tiny-sim--w--r4.000--ext: kept"), "{log}");
    assert_eq!(std::fs::read(&ext).unwrap(), ext_before);
}

/// `frontier 0.5 2` after a coarse search (25%): the tiny sim's E2E p50
/// rises from ~170 ms to ~270 ms, then the replica overloads near 16 rps.
/// The search's rates follow from the recorded runs alone (its budget,
/// 12 s, is ten of its runs).
const FRONTIER: &str = r#"
experiment "e2e-frontier" {
    seed 5
}
target "tiny-sim" {
    sim tiny
}
workload "w" {
    input-tokens fixed 200
    output-tokens fixed 48
}
slo "chat" {
    e2e p50="500ms"
}
open {
    arrival poisson
    search min=2 max=64 precision="25%"
    duration "1s"
    warmup "200ms"
    budget "12s"
    frontier 0.5 2
}
"#;

#[test]
fn frontier_adds_rates_where_the_curve_crosses_the_multiplied_bounds() {
    let (tmp, file) = experiment_file("frontier.kdl", FRONTIER);
    let out = tmp.path().join("results");
    let output = capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{log}");
    let report = read_report(&out);
    let card = &report.cards[0];
    assert_eq!(card.frontier_multipliers, [0.5, 2.0]);
    let rates: Vec<f64> = card.open.iter().filter_map(|r| r.rate_rps).collect();

    // The frontier phase names each rate it adds in the log; the others are
    // the search's. (Replaying the search on the card's runs does not
    // reproduce it: the card keeps one run of a revisited rate, and the
    // search's later steps depend on every run it made.)
    let extra: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("frontier of chat"))
        .filter_map(|l| l.rsplit_once("): ")?.1.strip_suffix(" rps")?.parse().ok())
        .collect();
    for rate in &extra {
        assert!(
            rates.contains(rate),
            "frontier rate {rate} was not run: {rates:?}"
        );
    }
    let searched: Vec<f64> = rates
        .iter()
        .copied()
        .filter(|r| !extra.contains(r))
        .collect();
    assert!(!searched.is_empty(), "{log}");
    assert!(
        !extra.is_empty(),
        "frontier added no rate to {searched:?}\n{log}"
    );
    assert!(extra.len() as u32 <= capcard::plan::frontier_max_runs(2));
    assert!(
        log.contains("frontier of chat, e2e p50 ≤ 500ms at 0.5× (≤ 250 ms)"),
        "{log}"
    );

    // At each multiplied bound the frontier has a fitted point, and the
    // phase stopped there for a reason: replayed on the runs made, the
    // bound wants no more rate (its range is within the precision, or no
    // rate is left to ask), or it spent its runs.
    let frontier = &card.frontier[0];
    let slo = capcard::config::Slo {
        name: "chat".into(),
        span: None,
        clauses: vec![capcard::config::SloClause::Latency {
            metric: capcard::config::LatencyMetric::E2e,
            stat: capcard::config::Stat::Percentile(50.0),
            limit: std::time::Duration::from_millis(500),
        }],
    };
    for (multiplier, bound_ms) in [(0.5, 250.0), (2.0, 1000.0)] {
        let point = frontier
            .points
            .iter()
            .find_map(|p| match p {
                FrontierPoint::Fitted(p) if p.bound_ms == bound_ms => Some(p),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no point at {bound_ms} ms: {frontier:?}"));
        assert!(
            point.estimate_rps.is_some() || point.range.iter().any(Option::is_some),
            "{point:?}"
        );
        let asked = log.matches(&format!("at {multiplier}× (≤ ")).count() as u32;
        let target = frontier_targets(std::slice::from_ref(&slo), &[multiplier]).remove(0);
        assert!(
            asked >= capcard::plan::FRONTIER_RUNS_PER_BOUND
                || wanted_rate(&card.open, &target, 2.0, 64.0, 0.25, 0.9).is_none(),
            "{bound_ms} ms: {asked} runs asked, unresolved: {point:?} {rates:?}\n{log}"
        );
    }
    let card_md = std::fs::read_to_string(out.join("tiny-sim--w.md")).unwrap();
    assert!(
        card_md.contains("Dense at 0.5×, 2× of each bound"),
        "{card_md}"
    );
    assert!(card_md.contains("(tiny-sim--w--frontier.svg)"));
    assert!(out.join("tiny-sim--w--frontier.svg").is_file());

    // The phase picks its rates from the runs alone: `--resume` asks for the
    // same ones and keeps every journal.
    let resumed = capcard()
        .args(["run", "--quiet", "--resume"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    let again = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{again}");
    for rate in &extra {
        let id = format!("tiny-sim--w--r{rate:.3}: kept");
        assert!(again.contains(&id), "{id} not in\n{again}");
    }
    assert!(
        !again.contains("req/s poisson, warmup"),
        "a run was measured again:\n{again}"
    );
}

const MIX: &str = r#"
experiment "e2e-mix" { seed 17; }
target "tiny-sim" { sim tiny; timeout "10s"; }
workload "short" {
    input-tokens fixed 32
    output-tokens fixed 16
}
workload "long" {
    input-tokens fixed 1200
    output-tokens fixed 48
}
slo "tight" { ttft mean="150ms"; }
slo "loose" { e2e mean="30s"; }
mix "m" {
    class "short" workload="short" slo="tight" weight=3
    class "long" workload="long" slo="loose" weight=1 model="lora-a" priority=1
    weights 1 1
}
closed {
    concurrency 2 8
    duration "2s"
    warmup "300ms"
}
open {
    arrival poisson
    rates 4 60
    duration "3s"
    warmup "300ms"
    budget "2s"
}
sizing {
    target rps=50 mix="m"
    target rps=50 slo="tight"
}
"#;

#[test]
fn a_mix_is_measured_class_by_class_and_limited_by_the_class_that_fails() {
    let (tmp, file) = experiment_file("mix.kdl", MIX);
    let out = tmp.path().join("results");
    let assert = capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .assert();
    let output = assert.get_output();
    assert!(
        output.status.success(),
        "run failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read_report(&out);
    let names: Vec<&str> = report.cards.iter().map(|c| c.workload.as_str()).collect();
    assert_eq!(
        names,
        ["m", "m@1-1"],
        "workloads a mix uses have no card alone"
    );
    let card = |name: &str| report.cards.iter().find(|c| c.workload == name).unwrap();

    let mix = card("m");
    assert_eq!(mix.cr_open.len(), 1);
    assert_eq!(mix.cr_open[0].slo, "m");
    // Per class, in every run: both classes served, the adapter's name
    // answered by the simulator (no 404s), shares as declared.
    for run in mix.closed.iter().chain(&mix.open) {
        assert_eq!(run.classes.len(), 2, "{}", run.run_id);
        for class in &run.classes {
            assert!(class.requests > 0, "{} {}", run.run_id, class.class);
            // Below overload nothing fails: an unknown model would be 404s.
            if run.rate_rps.is_none_or(|r| r < 60.0) {
                assert_eq!(class.errors, 0, "{} {}", run.run_id, class.class);
            }
        }
        assert!(run.classes.iter().all(|c| c.output_tokens_per_s > 0.0));
    }
    let low = &mix.open[0];
    assert_eq!(low.rate_rps, Some(4.0));
    let shares: Vec<f64> = low.classes.iter().map(|c| c.share).collect();
    assert_eq!(shares, [0.75, 0.25]);
    assert!(low.classes.iter().all(|c| c.verdict.is_some()));
    // 60 req/s is beyond the tiny engine: the mix fails there, on the
    // short class's tight TTFT (the long class's bound is loose), and the
    // card says so.
    let cr = &mix.cr_open[0];
    assert_eq!(cr.failed_at_rps, Some(60.0), "{cr:?}");
    let limited = cr.limited_by.as_ref().expect("limited_by");
    assert_eq!(
        (
            limited.class.as_str(),
            limited.slo.as_deref(),
            limited.clause.as_str()
        ),
        ("short", Some("tight"), "ttft mean"),
        "{cr:?}"
    );
    let m = mix.mix.as_ref().expect("cards[].mix");
    assert_eq!(m.plan.classes[1].model.as_deref(), Some("lora-a"));
    assert_eq!(m.class_cr_open.len(), 2);
    // Sized on the mix card at the declared weights only (the SLO's target
    // belongs to cards judged on that SLO).
    assert_eq!(mix.sizing.len(), 1);
    assert_eq!(mix.sizing[0].target, "rps=50 mix=m");
    assert!(card("m@1-1").sizing.is_empty());
    let setting = card("m@1-1");
    let shares: Vec<f64> = setting.open[0].classes.iter().map(|c| c.share).collect();
    assert_eq!(shares, [0.5, 0.5]);

    // The journal says what each call was.
    let journal = std::fs::read_to_string(out.join("runs/tiny-sim--m--r4.000.jsonl")).unwrap();
    assert!(journal.contains("\"class\":\"long\"") && journal.contains("\"class\":\"short\""));

    // The card and the summary say it in words.
    let card_md = std::fs::read_to_string(out.join("tiny-sim--m.md")).unwrap();
    assert!(card_md.contains("### Mix `m` (planned)"), "{card_md}");
    assert!(card_md.contains("### The mix class by class"), "{card_md}");
    assert!(card_md.contains(&format!("**Limited by `{}`**", limited.class)));
    assert!(card_md.contains("Output tok/s by class (closed loop)"));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## What if the mix changes?"), "{summary}");
    assert!(summary.contains("Cr_open of the mix, every class within its own SLO"));

    // `report` regenerates the mix card byte for byte.
    let path = out.join("tiny-sim--m.md");
    std::fs::remove_file(&path).unwrap();
    capcard().arg("report").arg(&out).assert().success();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), card_md);
}
