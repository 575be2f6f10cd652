//! Virtual time: the same experiment on `sim tiny` measured in real time over
//! HTTP and on the engine's own clock must give the same card (CrossP and
//! Cr_closed identical, Cr_open within the search's precision), and the
//! virtual run says so on the card and in results.json.

use crate::support::{capcard, experiment_file, read_report};

/// Short enough to run in real time in the suite (about 40 s).
const EXPERIMENT: &str = r#"
experiment "virtual-vs-real" {
    seed 23
}
target "tiny" {
    sim tiny
}
// Short enough that 32 sequences fit tiny's KV cache: with preemption the
// knee would hang on the exact order of arrivals, which real time does not
// reproduce.
workload "chat" {
    input-tokens lognormal median=96 sigma=0.4 min=16 max=256
    output-tokens normal mean=48 stddev=8 min=8 max=96
}
slo "interactive" {
    ttft p50="300ms" p90="800ms"
    e2e p90="2500ms"
}
closed {
    concurrency 1 4 16 32
    duration "3s"
    warmup "300ms"
}
open {
    arrival poisson
    search min=1 max=100 precision="20%"
    duration "4s"
    warmup "300ms"
    budget "30s"
}
"#;

/// Measured in real time: run by `crate::all_real_time_measurements_in_turn`.
pub fn virtual_and_real_time_give_the_same_card_on_the_simulator() {
    let (tmp, file) = experiment_file("vr.kdl", EXPERIMENT);
    let real_dir = tmp.path().join("real");
    let virtual_dir = tmp.path().join("virtual");
    capcard()
        .args(["run", "--quiet", "--nonce", "9", "--out"])
        .arg(&real_dir)
        .arg(&file)
        .assert()
        .success();
    capcard()
        .args(["run", "--quiet", "--virtual", "--nonce", "9", "--out"])
        .arg(&virtual_dir)
        .arg(&file)
        .assert()
        .success();
    let (real, virt) = (read_report(&real_dir), read_report(&virtual_dir));
    let (real, virt) = (&real.cards[0], &virt.cards[0]);

    assert_eq!(real.target_info.clock, None);
    let clock = virt
        .target_info
        .clock
        .as_deref()
        .expect("virtual runs say so");
    assert!(clock.starts_with("virtual time"), "{clock}");
    let card = std::fs::read_to_string(virtual_dir.join("tiny--chat.md")).unwrap();
    assert!(card.contains("| Clock | virtual time"), "{card}");
    assert!(card.contains("closed loop, virtual time"), "{card}");
    // The plan counts a virtual card in simulated time: the card compares
    // it with the runs' simulated time, and gives the wall time apart.
    let time = virt.wall_time.as_ref().expect("planned and actual times");
    let simulated_s = time
        .simulated_s
        .expect("virtual runs are timed on their clock");
    assert!(time.actual_s.is_some_and(|wall_s| wall_s < simulated_s));
    assert!(
        card.contains(" of simulated time; the runs simulated ")
            && card.contains("of wall time (virtual time)"),
        "{card}"
    );
    let real_time = real.wall_time.as_ref().expect("planned and actual times");
    assert_eq!(real_time.simulated_s, None);
    assert_eq!(real_time.planned_expected_s, time.planned_expected_s);

    // The same request stream: the same tasks at every level. On a release
    // build CrossP and Cr_closed are identical (BENCHMARKS.md). A debug
    // build's HTTP stack adds a few milliseconds to every real TTFT, and a
    // loaded CI machine makes the real-time simulator lag, which can move
    // either by one level: here they must overlap.
    assert_eq!(real.closed.len(), virt.closed.len());
    let (rz, vz) = (
        real.crossp.as_ref().map(|c| c.zone).expect("real CrossP"),
        virt.crossp
            .as_ref()
            .map(|c| c.zone)
            .expect("virtual CrossP"),
    );
    assert!(
        rz[0] <= vz[1] && vz[0] <= rz[1],
        "CrossP zones {rz:?} real, {vz:?} virtual"
    );
    // Cr_closed too: a loaded machine can widen the real range by a level.
    let (rk, vk) = (
        real.cr_closed
            .as_ref()
            .map(|k| k.range)
            .expect("real Cr_closed"),
        virt.cr_closed
            .as_ref()
            .map(|k| k.range)
            .expect("virtual Cr_closed"),
    );
    assert!(
        rk[0] <= vk[1] && vk[0] <= rk[1],
        "Cr_closed {rk:?} real, {vk:?} virtual"
    );
    for (r, v) in real.closed.iter().zip(&virt.closed) {
        let (rt, vt) = (r.output_tokens_per_s, v.output_tokens_per_s);
        assert!(
            (rt - vt).abs() <= 0.15 * rt,
            "c={:?}: {rt} tok/s real, {vt} virtual",
            r.concurrency
        );
    }
    // Cr_open: two measurements of one replica, each with its 90% range;
    // where both come from the fitted model they agree when the ranges
    // overlap (an open end reaches on). Where a run that could not keep up
    // decides one (tiny's queue fills within a few rates of its knee, and
    // 3-second windows read "backlogged" there by luck), the range is the
    // bracket below that run, and the two cards only agree within a factor
    // of 1.6, the bracketing step.
    let found = |c: &capcard::analyze::Card| {
        let o = c.cr_open.first().expect("Cr_open").clone();
        assert!(o.rps.is_some(), "Cr_open not placed: {o:?}");
        o
    };
    let (r, v) = (found(real), found(virt));
    let ends = |o: &capcard::analyze::CrOpen| {
        [
            o.range[0].unwrap_or(0.0),
            o.range[1].unwrap_or(f64::INFINITY),
        ]
    };
    let (re, ve) = (ends(&r), ends(&v));
    // What each search ran, for the failure message: a disagreement is
    // read from the runs' states (a false "overloaded" once capped the
    // real range at 28 of 36 rps on a loaded CI machine).
    let runs = |c: &capcard::analyze::Card| -> String {
        c.open
            .iter()
            .map(|s| {
                format!(
                    "{:?} rps: {} of {} completed, {:?} {:?}",
                    s.rate_rps,
                    s.requests,
                    s.offered.unwrap_or(0),
                    s.state,
                    s.state_reason
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    if r.method.as_deref() == Some("fit") && v.method.as_deref() == Some("fit") {
        assert!(
            re[0] <= ve[1] && ve[0] <= re[1],
            "Cr_open ranges {re:?} real, {ve:?} virtual\nreal runs: {}\nvirtual runs: {}",
            runs(real),
            runs(virt)
        );
    } else {
        let (a, b) = (r.rps.unwrap_or(0.0), v.rps.unwrap_or(0.0));
        assert!(
            a.max(b) <= 1.6 * a.min(b),
            "Cr_open {a} ({re:?}, {:?}) real, {b} ({ve:?}, {:?}) virtual\nreal runs: {}\nvirtual runs: {}",
            r.method,
            v.method,
            runs(real),
            runs(virt)
        );
    }
}

#[test]
fn virtual_time_refuses_endpoint_targets_before_running() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("mixed.kdl");
    let text = EXPERIMENT.replace(
        "target \"tiny\" {\n    sim tiny\n}",
        "target \"tiny\" {\n    sim tiny\n}\ntarget \"vllm\" {\n    endpoint \"http://127.0.0.1:9/v1\"\n}",
    );
    std::fs::write(&file, text).unwrap();
    let out = tmp.path().join("out");
    let assert = capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .assert()
        .code(1);
    // miette wraps lines: compare words.
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(stderr.contains("`vllm` is a real endpoint"), "{stderr}");
    assert!(stderr.contains("--target tiny"), "{stderr}");
    assert!(!out.exists(), "nothing is written");
}

#[test]
fn the_same_file_and_seed_give_the_same_virtual_journals() {
    let (tmp, file) = experiment_file("vr.kdl", EXPERIMENT);
    let mut lines = Vec::new();
    for name in ["a", "b"] {
        let dir = tmp.path().join(name);
        capcard()
            .args([
                "run",
                "--quiet",
                "--virtual",
                "--only",
                "closed",
                "--nonce",
                "4",
                "--out",
            ])
            .arg(&dir)
            .arg(&file)
            .assert()
            .success();
        let journal = std::fs::read_to_string(dir.join("runs").join("tiny--chat--c0016.jsonl"))
            .expect("a closed journal");
        // Everything but the wall-clock stamps of the header and footer.
        let body: Vec<String> = journal
            .lines()
            .filter(|l| l.contains("\"kind\":\"request\""))
            .map(str::to_string)
            .collect();
        assert!(body.len() > 20, "{} records", body.len());
        lines.push(body);
        // The engine's own /metrics, journaled every virtual second, as a
        // server's scrapes are: the card's telemetry readings have data.
        let telemetry =
            std::fs::read_to_string(dir.join("telemetry").join("tiny--chat--c0016.jsonl"))
                .expect("virtual runs journal the engine's telemetry");
        assert!(telemetry.lines().count() >= 3, "{telemetry}");
        assert!(
            telemetry.contains("vllm:num_requests_running"),
            "{telemetry}"
        );
    }
    assert_eq!(lines[0], lines[1]);
}

/// A simulator with known knobs, measured in virtual time: calibration
/// must give its knobs back from the journals alone.
const KNOWN_KNOBS: &str = r#"
experiment "known-knobs" {
    seed 31
}
target "mystery" {
    sim tiny {
        compute-efficiency 0.3
        memory-efficiency 0.5
        step-overhead "2ms"
        per-seq-overhead "50us"
        virtual #true
        network-overhead "0.5ms"
    }
}
workload "fixed" {
    input-tokens uniform min=48 max=160
    output-tokens fixed 32
}
closed {
    concurrency 1 4 16 32
    duration "1500ms"
    warmup "200ms"
}
"#;

fn knob(kdl: &str, name: &str) -> f64 {
    let line = kdl
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no `{name}` in\n{kdl}"));
    let value = line[name.len()..].trim().trim_matches('"');
    if let Some(us) = value.strip_suffix("us") {
        us.parse::<f64>().unwrap() / 1e6
    } else if let Some(ms) = value.strip_suffix("ms") {
        ms.parse::<f64>().unwrap() / 1e3
    } else if let Some(s) = value.strip_suffix('s') {
        s.parse().unwrap()
    } else {
        value.parse().unwrap()
    }
}

#[test]
fn calibration_recovers_the_knobs_of_a_run_it_did_not_see() {
    let (tmp, file) = experiment_file("known.kdl", KNOWN_KNOBS);
    let dir = tmp.path().join("observed");
    capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&dir)
        .arg(&file)
        .assert()
        .success();
    let fitted = tmp.path().join("fitted.kdl");
    let assert = capcard()
        .args(["calibrate", "--max-evaluations", "1000", "--out"])
        .arg(&fitted)
        .arg(&dir)
        .assert()
        .success();
    let table = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    let kdl = std::fs::read_to_string(&fitted).unwrap();
    for (name, truth) in [
        ("compute-efficiency", 0.3),
        ("memory-efficiency", 0.5),
        ("step-overhead", 2e-3),
        ("per-seq-overhead", 50e-6),
        ("network-overhead", 0.5e-3),
    ] {
        let got = knob(&kdl, name);
        assert!(
            (got / truth - 1.0).abs() <= 0.10,
            "{name}: fitted {got}, truth {truth}\n{table}\n{kdl}"
        );
    }
    assert!(kdl.contains("calibrated \""), "{kdl}");
    assert!(table.contains("| 16 |"), "{table}");
    // The block is a valid target: `check` accepts it in an experiment.
    let experiment = tmp.path().join("what-if.kdl");
    std::fs::write(
        &experiment,
        format!(
            "experiment \"x\" {{\n}}\n{kdl}\nworkload \"w\" {{\n    input-tokens fixed 64\n    output-tokens fixed 16\n}}\nclosed {{\n    concurrency 1\n    duration \"1s\"\n}}\n"
        ),
    )
    .unwrap();
    capcard().arg("check").arg(&experiment).assert().success();
}

/// A search's run far beyond every SLO ends once a sequential test is
/// decisive: its window ends at the stop, the card marks it *decided*, the
/// fit reads it as censored, and `early-stop=#false` keeps every run whole.
#[test]
fn a_search_run_decisively_beyond_its_slo_stops_early_and_says_so() {
    let decided_runs = |kdl: &str| {
        let (tmp, file) = experiment_file("es.kdl", kdl);
        let dir = tmp.path().join("out");
        capcard()
            .args(["run", "--quiet", "--virtual", "--only", "open", "--out"])
            .arg(&dir)
            .arg(&file)
            .assert()
            .success();
        let report = read_report(&dir);
        let card = std::fs::read_to_string(dir.join("tiny--chat.md")).expect("a card");
        let decided: Vec<(String, f64, f64)> = report.cards[0]
            .open
            .iter()
            .filter_map(|r| Some((r.run_id.clone(), r.decided.as_ref()?.at_ms, r.window_s)))
            .collect();
        (decided, card, report)
    };
    // Starting at 70 req/s (three times tiny's capacity), the first run's
    // calls pile up: those sent over a second ago and still waiting are
    // beyond the E2E bound already, and the run is decisively beyond.
    let fast_start = EXPERIMENT
        .replace("search min=1 max=100", "search min=50 max=100")
        .replace("e2e p90=\"2500ms\"", "e2e p90=\"1s\"")
        .replace(
            "duration \"4s\"\n    warmup \"300ms\"\n    budget",
            "duration \"6s\"\n    warmup \"300ms\"\n    budget",
        );
    assert!(fast_start.contains("duration \"6s\""), "{fast_start}");
    let (decided, card, report) = decided_runs(&fast_start);
    let (run_id, at_ms, window_s) = decided.first().cloned().expect("a run decided early");
    // The window is 6 s from a 300 ms warmup; the looks are at 15–70%.
    assert!(
        (300.0 + 0.15 * 6000.0..300.0 + 0.75 * 6000.0).contains(&at_ms),
        "{run_id} stopped at {at_ms} ms"
    );
    assert!(window_s < 4.5, "{run_id}: a window of {window_s} s");
    assert!(card.contains("decided after"), "{card}");
    let summary = report.cards[0]
        .open
        .iter()
        .find(|r| r.run_id == run_id)
        .expect("the run");
    assert_eq!(
        capcard::analyze::cr_open::censored_because(summary),
        Some("decided early")
    );
    let stop = summary.decided.as_ref().expect("decided");
    assert!((stop.alpha - 0.01).abs() < 1e-12, "{stop:?}");
    assert!(
        stop.clauses[0].beyond * 10 > stop.clauses[0].samples,
        "{stop:?}"
    );

    let (decided, card, _) = decided_runs(
        &fast_start.replace("precision=\"20%\"", "precision=\"20%\" early-stop=#false"),
    );
    assert!(decided.is_empty(), "{decided:?}");
    assert!(!card.contains("decided after"), "{card}");
}

/// Every open run of a search is a point of the card's Cr_open fit,
/// revisits of a rate included: the card is the fit the search stopped
/// on. (The folder kept one run per rate, the longest, until 2026-12-08,
/// and the card's fit left out a search's revisits.)
#[test]
fn every_run_of_a_search_revisits_included_is_a_point_of_the_cards_fit() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = tmp.path().join("out");
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tuning/mean-wait.kdl");
    capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&dir)
        .arg(&file)
        .assert()
        .success();
    let journals: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .expect("the runs")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".jsonl")?.to_string())
        })
        .collect();
    assert!(
        journals.iter().filter(|id| id.contains("--v")).count() >= 2,
        "the search revisits rates: {journals:?}"
    );
    let report = read_report(&dir);
    let card = &report.cards[0];
    assert_eq!(card.open.len(), journals.len(), "{journals:?}");
    let fit = &card.cr_open[0];
    let mut fitted: Vec<&str> = fit.clauses[0]
        .points
        .iter()
        .map(|p| p.run_id.as_str())
        .collect();
    fitted.sort_unstable();
    let mut expected: Vec<&str> = journals.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(fitted, expected);
}
