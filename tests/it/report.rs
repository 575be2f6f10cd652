//! The report stage end to end from a fixed results.json: card and summary
//! snapshots, results.json round trip, charts, template overrides and errors.

use std::path::PathBuf;

use capcard::analyze::frontier::{FittedPoint, Frontier, FrontierPoint};
use capcard::analyze::{CapacityReport, Card};
use capcard::report::{
    ReportError, Templates, card_file_name, charts, parse_results_json, render_card,
    render_summary, results_json,
};

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/results-fixture.json")
}

fn fixture() -> CapacityReport {
    let text = std::fs::read_to_string(fixture_path()).expect("fixture readable");
    parse_results_json(&text).expect("fixture parses")
}

#[test]
fn fixture_cards_render_as_snapshots() {
    let report = fixture();
    let templates = Templates::builtin();
    assert_eq!(report.cards.len(), 2);
    for card in &report.cards {
        let rendered = render_card(&report, card, &templates).expect("card renders");
        insta::assert_snapshot!(card_file_name(card), rendered);
    }
}

#[test]
fn summary_renders_as_snapshot() {
    let report = fixture();
    let summary = render_summary(&report, &Templates::builtin()).expect("summary renders");
    insta::assert_snapshot!("summary.md", summary.expect("two cards → a summary"));
}

#[test]
fn a_single_card_has_no_summary() {
    let mut report = fixture();
    report.cards.truncate(1);
    assert_eq!(
        render_summary(&report, &Templates::builtin()).unwrap(),
        None
    );
}

#[test]
fn re_rendering_is_byte_identical() {
    let report = fixture();
    let templates = Templates::builtin();
    let card = &report.cards[0];
    let first = render_card(&report, card, &templates).unwrap();
    let reparsed = parse_results_json(&results_json(&report)).unwrap();
    let second = render_card(&reparsed, &reparsed.cards[0], &templates).unwrap();
    assert_eq!(first, second);
}

#[test]
fn results_json_round_trips_and_is_stable() {
    let report = fixture();
    let text = results_json(&report);
    assert!(
        text.ends_with("}\n"),
        "pretty JSON with one trailing newline"
    );
    assert!(text.starts_with(
        "{\n  \"schema\": \"capcard/results/v2\",\n  \"experiment\": \"support-chat\","
    ));
    let back = parse_results_json(&text).unwrap();
    assert_eq!(back, report);
    assert_eq!(
        results_json(&back),
        text,
        "serialising twice gives the same bytes"
    );
}

#[test]
fn card_file_names_are_target_and_workload() {
    let report = fixture();
    let names: Vec<String> = report.cards.iter().map(card_file_name).collect();
    assert_eq!(names, ["h100-vllm--chat.md", "what-if--coding-agent.md"]);
    let odd = Card {
        target: "a/b".into(),
        workload: "..".into(),
        ..report.cards[0].clone()
    };
    assert_eq!(card_file_name(&odd), "a_b--__.md");
}

#[test]
fn cards_say_what_is_missing_and_never_invent_numbers() {
    let report = fixture();
    let agent = render_card(&report, &report.cards[1], &Templates::builtin()).unwrap();
    assert!(
        agent.contains("| CrossP | not reached in sweep (levels 1–8) | closed loop | — |"),
        "{agent}"
    );
    assert!(agent.contains("| Cr_open `interactive` | not reached | open loop, poisson |"));
    assert!(agent.contains(
        "| Cr_open `batch` | ≥ 0.20 tasks/s (search maximum passed) | open loop, poisson |"
    ));
    assert!(agent.contains("Cr_closed is a lower bound"));
    assert!(
        agent.contains(
            "> ⚠ prompt tokens reported by the server differ from those requested by +6.3%"
        )
    );

    // A card where nothing was measured: every figure is absent, with its reason.
    let mut empty = report.cards[0].clone();
    empty.closed.clear();
    empty.open.clear();
    empty.crossp = None;
    empty.cr_closed = None;
    empty.cr_open.clear();
    empty.frontier.clear();
    empty.measured_tokens = None;
    for row in &mut empty.sizing {
        row.cr_per_replica = None;
        row.replicas = None;
        row.cost_per_hour = None;
        row.cost_per_million_output_tokens = None;
    }
    let text = render_card(&report, &empty, &Templates::builtin()).unwrap();
    assert!(
        text.contains("| CrossP | not measured (no closed-loop sweep) | closed loop | — |"),
        "{text}"
    );
    assert!(text.contains("| Cr_closed | not measured (no closed-loop sweep) | closed loop | — |"));
    assert!(text.contains("| Cr_open | not measured (no open-loop search) | open loop | — |"));
    assert!(text.contains("Measured token counts: not measured"));
    assert!(text.contains("No charts: nothing was measured to plot."));
    assert!(
        !text.contains(" 0 ms") && !text.contains("| 0 |") && !text.contains("0.00 req/s"),
        "{text}"
    );
}

/// A fitted Cr_open whose range has no lower end: the card gives the
/// estimate, says nothing is promised yet and what would give a promise,
/// and the sizing row by the promise has no count and says so.
#[test]
fn a_fitted_cr_open_without_a_lower_end_promises_nothing() {
    let report = fixture();
    let mut card = report.cards[0].clone();
    let cr = &mut card.cr_open[0];
    cr.rps = Some(39.0);
    cr.range = [None, Some(45.0)];
    cr.promise_rps = None;
    cr.confidence = Some(0.9);
    cr.method = Some("fit".to_string());
    cr.failed_at_rps = None;
    cr.failed_run_id = None;
    cr.failed_clauses.clear();
    cr.run_id = None;
    cr.note = Some(
        "the runs do not bound Cr_open from below: the 90% range reaches below the lowest rate \
         tested (36 req/s), up to 45 req/s; so nothing is promised yet: runs further below the \
         estimate (a lower `min` for the search) or more calls near it (a longer `budget`, or a \
         longer `duration` per run) would give the range a lower end"
            .to_string(),
    );
    let row = &mut card.sizing[0];
    row.uses = "cr_open:interactive:promise".to_string();
    row.cr_per_replica = None;
    row.replicas = None;
    row.cost_per_hour = None;
    row.note = Some("Cr_open for `interactive` promises nothing yet".to_string());
    let text = render_card(&report, &card, &Templates::builtin()).unwrap();
    assert!(!text.contains("can promise"), "{text}");
    let excerpt: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("interactive") && (l.contains("Cr_open") || l.contains("SLO")))
        .collect();
    insta::assert_snapshot!("open-lower-end-promises-nothing", excerpt.join("\n"));
}

#[test]
fn charts_are_deterministic_and_labelled() {
    let report = fixture();
    let chat = &report.cards[0];
    let first = charts(chat);
    assert_eq!(first, charts(chat), "same card → same bytes");
    let names: Vec<&str> = first.iter().map(|c| c.file_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "h100-vllm--chat--closed.svg",
            "h100-vllm--chat--open.svg",
            "h100-vllm--chat--frontier.svg"
        ]
    );

    let closed = &first[0].svg;
    assert!(closed.starts_with("<svg"), "{closed}");
    for label in [
        "h100-vllm × chat — closed loop (fixed concurrency)",
        "concurrency (log2)",
        "output tok/s",
        "TTFT p50",
        "TTFT p99",
        "CrossP 16 (zone 8–16)",
        "Cr_closed 32–64 concurrent",
        "\n128\n</text>",
        "\n2,000\n</text>",
    ] {
        assert!(closed.contains(label), "closed chart lacks {label:?}");
    }
    let open = &first[1].svg;
    for label in [
        "open loop (poisson)",
        "arrival rate (RPS)",
        "E2E p99",
        "interactive: TTFT p99 ≤ 1 s",
        "interactive: TTFT p50 ≤ 300 ms",
        "batch: E2E p95 ≤ 120 s",
        "Cr_open interactive: 4.00 RPS",
        "Cr_open batch: 8.00 RPS",
        "ITL p95 vs arrival rate",
        "interactive: ITL p95 ≤ 60 ms",
    ] {
        assert!(open.contains(label), "open chart lacks {label:?}");
    }

    let frontier = &first[2].svg;
    for label in [
        "h100-vllm × chat — SLO frontier (open loop)",
        "bound on the clause",
        "arrival rate (RPS)",
        "interactive: TTFT p50 ≤ 300 ms",
        "interactive: TTFT p99 ≤ 1 s",
        "batch: E2E p95 ≤ 120 s",
        "declared 300 ms",
        "declared 1 s",
        "declared 120 s",
        "frontier asked at 0.5×, 1.5×",
    ] {
        assert!(frontier.contains(label), "frontier chart lacks {label:?}");
    }
    assert!(
        !frontier.contains("inconclusive run"),
        "no inconclusive point, no legend entry"
    );
    // An inconclusive point is drawn hollow (a white disc under a ring).
    let mut unsure = chat.clone();
    match &mut unsure.frontier[0].points[2] {
        FrontierPoint::Measured(p) => p.inconclusive = true,
        FrontierPoint::Fitted(p) => panic!("the fixture's frontier is measured: {p:?}"),
    }
    let hollow = &charts(&unsure)[2].svg;
    assert!(hollow.contains("inconclusive run"));
    assert!(
        hollow.matches("fill=\"#FFFFFF\"").count() > frontier.matches("fill=\"#FFFFFF\"").count(),
        "a hollow point adds a white disc"
    );

    let agent = charts(&report.cards[1]);
    assert_eq!(agent.len(), 2, "no frontier, no frontier chart");
    assert!(agent[1].svg.contains("Cr_open batch: ≥ 0.20 RPS"));
    assert!(
        !agent[1].svg.contains("Cr_open interactive"),
        "a null Cr_open is not drawn"
    );
    assert!(
        !agent[0].svg.contains("CrossP"),
        "CrossP not reached: no zone drawn"
    );

    let mut nothing = chat.clone();
    nothing.closed.clear();
    nothing.open.clear();
    nothing.frontier.clear();
    assert!(charts(&nothing).is_empty());
}

/// A fitted frontier (the fixture's is measured, from before the fit):
/// each bound's crossing with its range, the declared bound in bold, an
/// unplaced end said as such; the chart draws ranges, not steps.
#[test]
fn a_fitted_frontier_shows_each_bounds_crossing_and_range() {
    let report = fixture();
    let mut card = report.cards[0].clone();
    let fitted = |bound_ms: f64, multiplier: f64, estimate: Option<f64>, range| {
        FrontierPoint::Fitted(FittedPoint {
            bound_ms,
            multiplier,
            estimate_rps: estimate,
            range,
            method: "fit".into(),
            unadjusted_rps: None,
        })
    };
    card.frontier = vec![Frontier {
        slo: "interactive".into(),
        clause: "ttft p99 ≤ 1s".into(),
        points: vec![
            fitted(500.0, 0.5, None, [None, Some(2.0)]),
            fitted(750.0, 0.75, Some(3.1), [Some(2.6), Some(3.5)]),
            fitted(1000.0, 1.0, Some(4.2), [Some(3.9), Some(4.4)]),
            fitted(1500.0, 1.5, Some(6.0), [Some(5.1), None]),
            fitted(2000.0, 2.0, None, [Some(8.0), None]),
        ],
    }];
    let text = render_card(&report, &card, &Templates::builtin()).unwrap();
    assert!(
        text.contains(
            "| `interactive` | TTFT p99 ≤ 1 s | ≤ 500 ms → < 2.00 req/s, ≤ 750 ms → 3.10 req/s (2.60–3.50), **≤ 1.00 s → 4.20 req/s (3.90–4.40)**, ≤ 1.50 s → 6.00 req/s (≥ 5.10), ≤ 2.00 s → ≥ 8.00 req/s |"
        ),
        "{text}"
    );
    assert!(text.contains("Cr_open of each percentile clause as a function of its bound"));
    assert!(!text.contains("The largest measured rate that would pass"));
    let svg = &charts(&card)[2].svg;
    assert!(
        svg.contains("range (dashed: no run bounds that end)"),
        "{svg}"
    );
    assert!(svg.contains("Cr_open of the clause at each bound"));
    // The round trip keeps the fitted points, nulls included.
    let mut with = report.clone();
    with.cards[0] = card.clone();
    let back = parse_results_json(&results_json(&with)).unwrap();
    assert_eq!(back.cards[0].frontier, card.frontier);
}

#[test]
fn a_custom_card_template_replaces_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.md.j2");
    std::fs::write(
        &path,
        "{{ view.target }}: {{ view.cr_open[0].rps | rps }} {{ view.conditions.rate_unit }}\n",
    )
    .unwrap();
    let report = fixture();
    let templates = Templates::with_card_template(&path).unwrap();
    assert_eq!(
        render_card(&report, &report.cards[0], &templates).unwrap(),
        "h100-vllm: 4.00 req/s\n"
    );
    // The summary stays built-in.
    assert!(
        render_summary(&report, &templates)
            .unwrap()
            .unwrap()
            .starts_with("# Capacity summary")
    );
}

#[test]
fn a_template_directory_overrides_only_what_it_has() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("summary-card.md.j2"),
        "{{ view.rows | length }} cards\n",
    )
    .unwrap();
    let report = fixture();
    let templates = Templates::load(Some(dir.path())).unwrap();
    assert_eq!(
        render_summary(&report, &templates).unwrap().unwrap(),
        "2 cards\n"
    );
    let card = render_card(&report, &report.cards[0], &templates).unwrap();
    assert!(card.starts_with("# Capacity card: `h100-vllm` × `chat`"));
    assert_eq!(
        card,
        render_card(&report, &report.cards[0], &Templates::load(None).unwrap()).unwrap()
    );
}

#[test]
fn unreadable_or_broken_templates_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.md.j2");
    let err = Templates::with_card_template(&missing).unwrap_err();
    assert!(matches!(err, ReportError::TemplateRead { .. }));
    let message = err.to_string();
    assert!(
        message.starts_with("cannot read template ") && message.contains("nope.md.j2"),
        "{message}"
    );

    let broken = dir.path().join("broken.md.j2");
    std::fs::write(&broken, "{% for x in %}\n").unwrap();
    let err = Templates::with_card_template(&broken).unwrap_err();
    assert!(matches!(err, ReportError::Template { .. }));
    assert!(err.to_string().contains("broken.md.j2"), "{err}");

    // A typo in a field is an error naming the template, not an empty cell.
    let typo = dir.path().join("typo.md.j2");
    std::fs::write(&typo, "{{ view.crosp }}\n").unwrap();
    let templates = Templates::with_card_template(&typo).unwrap();
    let report = fixture();
    let err = render_card(&report, &report.cards[0], &templates).unwrap_err();
    assert!(err.to_string().contains("typo.md.j2"), "{err}");
}

#[test]
fn results_of_another_schema_are_refused() {
    let err = parse_results_json(r#"{"schema": "capcard/results/v9", "cards": []}"#).unwrap_err();
    assert!(matches!(err, ReportError::Schema { .. }));
    assert!(err.to_string().contains("capcard/results/v9"));
    assert!(
        err.to_string()
            .contains("reads capcard/results/v1 and capcard/results/v2"),
        "{err}"
    );
    let err = parse_results_json("{ not json").unwrap_err();
    assert!(matches!(err, ReportError::Json(_)));
}

/// `dir` and everything under it copied into `to`.
fn copy_tree(dir: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn report_on_a_v1_folder_says_what_it_lacks_and_rewrites_it_as_v2() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v1");
    copy_tree(&data.join("export-fixture"), &dir);
    // The results.json that capcard wrote in this folder before v2.
    std::fs::copy(
        data.join("export-fixture-results-v1.json"),
        dir.join("results.json"),
    )
    .unwrap();
    let output = crate::support::capcard()
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {said}");
    assert!(
        lines[0].starts_with("note: results.json is capcard/results/v1 and lacks "),
        "{said}"
    );
    for part in [
        "cards[].target_info.pruned",
        "cards[].open[].ttft_ms.extra",
        "harnesses",
        "recomputed from the journals",
        "rewritten as capcard/results/v2",
    ] {
        assert!(lines[0].contains(part), "{part}: {said}");
    }
    // Recomputed from the same journals, it is the v2 fixture itself.
    let rewritten = crate::support::results_text(&dir);
    assert_eq!(
        rewritten,
        std::fs::read_to_string(data.join("export-fixture/results.json")).unwrap()
    );
    // Now current: nothing to say.
    let again = crate::support::capcard()
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stderr), "");
}

#[test]
fn the_schema_check_of_the_test_kit_rejects_a_wrong_type() {
    // Not vacuous: a results.json with a count written as a string fails
    // the check every test's results folder goes through.
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/export-fixture/results.json"),
    )
    .unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["cards"][0]["closed"][0]["requests"] = serde_json::json!("12");
    json["cards"][0]["open"][0]["state"] = serde_json::json!("melted");
    std::fs::write(tmp.path().join("results.json"), json.to_string()).unwrap();
    let failed = std::panic::catch_unwind(|| crate::support::results_text(tmp.path()))
        .expect_err("an invalid results.json panics");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("/cards/0/closed/0/requests: expected integer, found string"),
        "{message}"
    );
    assert!(
        message.contains("/cards/0/open/0/state: \"melted\" is not one of"),
        "{message}"
    );
}
