//! The experiment language end to end: the shipped examples parse, and every
//! class of mistake renders as a miette report with the file, the line, the
//! underlined span, what was expected and a help line (snapshotted, so every
//! change to a message is reviewed).

use std::path::Path;
use std::time::Duration;

use capcard::config::{self, ConfigError, DistKind, SloClause, Stat, TargetKind};

use super::support::render;

/// Parses `source` as `name`; it must fail. Returns the rendered report.
fn errors(name: &str, source: &str) -> String {
    match config::parse(source, Path::new(name)) {
        Ok(experiment) => panic!("{name} should not parse, got {experiment:#?}"),
        Err(err) => render(&err),
    }
}

/// The parts every valid experiment needs, so a case can focus on one node.
const BASE: &str = r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1 2 4; duration "5s" }
"#;

fn with_base(extra: &str) -> String {
    format!("{BASE}{extra}")
}

// ------------------------------------------------------------------ valid files

#[test]
fn every_shipped_experiment_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("experiments/ exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "kdl"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "agentic.kdl",
        "batch.kdl",
        "chat.kdl",
        "quickstart.kdl",
        "rag.kdl",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "experiments/{expected} is missing"
        );
    }
    for path in &files {
        let experiment = config::load(path).unwrap_or_else(|err| panic!("{}", render(&err)));
        // What parses also passes the rules for experiments built in code.
        config::validate(&experiment).unwrap_or_else(|err| panic!("{}", render(&err)));
    }
}

#[test]
fn quickstart_is_small_and_on_the_tiny_sim() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.kdl");
    let experiment = config::load(&path).unwrap_or_else(|err| panic!("{}", render(&err)));
    assert_eq!(experiment.name, "quickstart");
    assert!(
        matches!(&experiment.targets[0].kind, TargetKind::Sim { preset, .. } if preset == "tiny")
    );
    let closed = experiment.closed.as_ref().unwrap();
    assert_eq!(closed.levels, vec![1, 2, 4, 8, 16, 32]);
    assert_eq!(closed.warmup, Duration::from_secs(1));
    assert_eq!(experiment.slos.len(), 1);
}

#[test]
fn spec_example_decodes_to_the_expected_model() {
    let path = Path::new("tests/it/config_cases/spec_example.kdl");
    let experiment = config::load(path).unwrap_or_else(|err| panic!("{}", render(&err)));
    insta::assert_snapshot!(serde_json::to_string_pretty(&experiment).unwrap());
    assert_eq!(
        experiment.base_dir.as_deref(),
        Some(Path::new("tests/it/config_cases"))
    );

    // Spans point at the names in the file.
    let source = std::fs::read_to_string(path).unwrap();
    let span = experiment.targets[1]
        .span
        .expect("parsed targets have spans");
    assert_eq!(
        &source[span.offset()..span.offset() + span.len()],
        "\"what-if\""
    );
    let span = experiment.slos[1].span.expect("parsed SLOs have spans");
    assert_eq!(
        &source[span.offset()..span.offset() + span.len()],
        "\"batch\""
    );

    assert_eq!(
        config::summary_line(path, &experiment),
        "tests/it/config_cases/spec_example.kdl: ok — experiment \"support-chat\": 2 targets, \
         2 workloads, 2 SLOs, closed 8 levels, open search 0.5..64 rps, sizing 2 targets"
    );
}

#[test]
fn defaults_and_alternative_forms() {
    let source = r#"
target "t" { endpoint "https://example.com/v1"; api completions }
workload "w" {
    input-tokens 3000
    output-tokens lognormal mean=200 stddev=100
    conversation { turns empirical { value 1 weight=3; value 4 } ; think-time "2s" }
}
slo "s" { tpot mean="40ms" p99.9="80ms" }
open { rates 1 2.5 4; requests 300 }
sizing { target rps=10; spares 2 }
"#;
    let experiment = config::parse(source, Path::new("dir/my-exp.kdl"))
        .unwrap_or_else(|err| panic!("{}", render(&err)));
    assert_eq!(experiment.name, "my-exp", "name defaults to the file stem");
    assert_eq!(experiment.seed, 0);
    assert_eq!(experiment.base_dir.as_deref(), Some(Path::new("dir")));
    let target = &experiment.targets[0];
    assert_eq!(target.timeout, Duration::from_secs(120));
    assert_eq!(target.api, config::Api::Completions);
    let workload = &experiment.workloads[0];
    assert_eq!(
        workload.input_tokens.kind,
        DistKind::Fixed { value: 3000.0 }
    );
    // mean=200 stddev=100 → sigma² = ln(1.25), median = 200/√1.25.
    let DistKind::LogNormal { median, sigma } = workload.output_tokens.kind else {
        panic!("lognormal expected, got {:?}", workload.output_tokens.kind)
    };
    assert!(
        (median - 200.0 / 1.25f64.sqrt()).abs() < 1e-9,
        "median {median}"
    );
    assert!((sigma - 1.25f64.ln().sqrt()).abs() < 1e-12, "sigma {sigma}");
    let conversation = workload.conversation.as_ref().unwrap();
    assert_eq!(
        conversation.turns.kind,
        DistKind::Empirical {
            points: vec![(1.0, 3.0), (4.0, 1.0)]
        }
    );
    assert_eq!(conversation.think_time.kind, DistKind::Fixed { value: 2.0 });
    assert_eq!(
        experiment.slos[0].clauses[1],
        SloClause::Latency {
            metric: config::LatencyMetric::Tpot,
            stat: Stat::Percentile(99.9),
            limit: Duration::from_millis(80)
        }
    );
    let open = experiment.open.as_ref().unwrap();
    assert_eq!(
        open.arrival,
        config::Arrival::Poisson,
        "poisson is the default arrival"
    );
    assert_eq!(open.stop, config::StopRule::Requests(300));
    let sizing = experiment.sizing.as_ref().unwrap();
    assert_eq!(sizing.headroom, config::Fraction(0.3));
    assert_eq!(
        sizing.targets[0],
        config::SizingTarget::Rps {
            rps: config::RatePerS(10.0),
            slo: "s".into()
        },
        "the only SLO is used when slo= is left out"
    );
    assert_eq!(
        config::summary_line(Path::new("dir/my-exp.kdl"), &experiment),
        "dir/my-exp.kdl: ok — experiment \"my-exp\": 1 target, 1 workload, 1 SLO, open grid 3 rates, sizing 1 target"
    );
}

// ------------------------------------------------------------------ one test per error class

#[test]
fn unknown_node_and_property_suggest_the_near_name() {
    insta::assert_snapshot!(errors(
        "typos.kdl",
        r#"
target "sim" { sim tiny }
workload "chat" { input-tokens lognormal medain=600 sigma=0.6; output-tokens fixed 50 }
slo "fast" { ttf p99="1s" }
closed { concurency 1 2 4; duration "5s" }
"#
    ));
}

#[test]
fn unknown_name_without_near_miss_lists_the_valid_ones() {
    insta::assert_snapshot!(errors(
        "unknown.kdl",
        &with_base("banana { }\nopen { flavour 3; search min=1 max=2; duration \"5s\" }\n")
    ));
}

#[test]
fn wrong_value_types() {
    insta::assert_snapshot!(errors(
        "types.kdl",
        r#"
experiment "x" { seed "7" }
target "sim" { sim tiny; model 5 }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1 2.5 #true; duration "5s" }
"#
    ));
}

#[test]
fn durations_without_unit_or_with_unknown_unit() {
    insta::assert_snapshot!(errors(
        "durations.kdl",
        r#"
target "sim" { sim tiny; timeout 120 }
workload "chat" {
    input-tokens fixed 100
    output-tokens fixed 50
    conversation { turns fixed 3; think-time exponential mean="4sec" }
}
closed { concurrency 1 2 4; duration "60"; warmup "1 minute" }
"#
    ));
}

#[test]
fn malformed_percentages() {
    insta::assert_snapshot!(errors(
        "percent.kdl",
        &with_base(
            r#"slo "s" { error-rate max="0.5" }
sizing { target output-tokens-per-s=1000; headroom 30 }
open { search min=1 max=10 precision="five%"; duration "5s" }
"#
        )
    ));
}

#[test]
fn percentiles_outside_zero_to_hundred() {
    insta::assert_snapshot!(errors(
        "percentiles.kdl",
        &with_base(r#"slo "s" { ttft p0="1s" p100="2s"; e2e p101="3s" p="1s" }"#)
    ));
}

#[test]
fn distributions_with_missing_or_contradictory_parameters() {
    insta::assert_snapshot!(errors(
        "dists.kdl",
        r#"
target "sim" { sim tiny }
workload "a" {
    input-tokens uniform min=500 max=100
    output-tokens normal mean=200 stddev=-5
}
workload "b" {
    input-tokens lognormal median=600 sigma=0
    output-tokens gamma shape=2
}
workload "c" {
    input-tokens fixed 100 min=50 max=10
    output-tokens exponential mean=0
    agent { steps lognormal median=4 stddev=2; tool-time gaussian mean="1s" }
}
closed { concurrency 1; duration "5s" }
"#
    ));
}

#[test]
fn target_with_neither_or_both_endpoint_and_sim() {
    insta::assert_snapshot!(errors(
        "engines.kdl",
        r#"
target "nothing" { hardware "1x H100" }
target "both" {
    endpoint "http://127.0.0.1:8000/v1"
    sim tiny
}
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1; duration "5s" }
"#
    ));
}

#[test]
fn unknown_sim_preset_lists_the_known_ones() {
    insta::assert_snapshot!(errors(
        "preset.kdl",
        r#"
target "a" { sim h100-llama-8b }
target "b" { sim my-own-gpu }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1; duration "5s" }
"#
    ));
}

#[test]
fn unknown_api() {
    insta::assert_snapshot!(errors(
        "api.kdl",
        r#"
target "a" { endpoint "http://127.0.0.1:8000/v1"; api completion }
target "b" { endpoint "127.0.0.1:8000"; api embeddings }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1; duration "5s" }
"#
    ));
}

#[test]
fn duplicate_names_point_at_both_definitions() {
    insta::assert_snapshot!(errors(
        "dupes.kdl",
        r#"
target "gpu" { sim tiny }
target "gpu" { sim h100-llama3-8b }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
workload "chat" { input-tokens fixed 200; output-tokens fixed 50 }
slo "fast" { ttft p99="1s" }
slo "fast" { e2e p99="5s" }
closed { concurrency 1; duration "5s" }
closed { concurrency 2; duration "5s" }
"#
    ));
}

#[test]
fn empty_or_non_increasing_concurrency() {
    insta::assert_snapshot!(errors(
        "levels.kdl",
        r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency; duration "5s" }
"#
    ));
    insta::assert_snapshot!(errors(
        "levels.kdl",
        r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1 2 8 4 4 0; duration "5s" }
"#
    ));
}

#[test]
fn search_min_not_below_max() {
    insta::assert_snapshot!(errors(
        "search.kdl",
        &with_base(r#"open { arrival gamma cv=0; search min=64 max=8; duration "10s" }"#)
    ));
}

#[test]
fn verdict_settings_out_of_range() {
    insta::assert_snapshot!(errors(
        "verdicts.kdl",
        &with_base(
            r#"open { search min=1 max=8; duration "10s"; confidence "100%"; repeat 0; budget "-1m" }"#
        )
    ));
}

#[test]
fn frontier_multipliers_decode_into_the_open_block() {
    let source = with_base(
        r#"slo "chat" { ttft p99="1s"; error-rate max="1%" }
open { search min=1 max=8; duration "10s"; frontier 0.5 0.75 1.5 2 }"#,
    );
    let experiment = config::parse(&source, Path::new("frontier.kdl"))
        .unwrap_or_else(|err| panic!("{}", render(&err)));
    let open = experiment.open.as_ref().unwrap();
    assert_eq!(open.frontier, [0.5, 0.75, 1.5, 2.0]);
    config::validate(&experiment).unwrap_or_else(|err| panic!("{}", render(&err)));
    // `capcard plan` counts the phase: 1 latency clause × 4 multipliers × 3.
    let plan = capcard::plan::build(&experiment);
    let capcard::plan::OpenPlan::Search { frontier_runs, .. } = &plan.cards[0].open else {
        panic!("expected a search");
    };
    assert_eq!(*frontier_runs, 12);

    // Without the setting: no frontier phase, and plan.json says nothing of it.
    let plain = config::parse(
        &with_base(r#"open { search min=1 max=8; duration "10s" }"#),
        Path::new("plain.kdl"),
    )
    .unwrap();
    assert!(plain.open.as_ref().unwrap().frontier.is_empty());
    let json = serde_json::to_string(&capcard::plan::build(&plain)).unwrap();
    assert!(!json.contains("frontier"), "{json}");
}

#[test]
fn frontier_settings_out_of_range() {
    insta::assert_snapshot!(errors(
        "frontier.kdl",
        &with_base(r#"open { search min=1 max=8; duration "10s"; frontier 0 1 -2 0.5 0.5 }"#)
    ));
    insta::assert_snapshot!(errors(
        "frontier.kdl",
        &with_base(
            r#"open { search min=1 max=8; duration "10s"; frontier 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.1 }"#
        )
    ));
}

#[test]
fn frontier_with_a_grid_needs_search() {
    insta::assert_snapshot!(errors(
        "grid.kdl",
        &with_base(r#"open { rates 1 2 4; duration "10s"; frontier 0.5 2 }"#)
    ));
}

#[test]
fn validate_checks_frontier_of_experiments_built_in_code() {
    let source = with_base(
        r#"slo "chat" { ttft p99="1s" }
open { search min=1 max=8; duration "10s"; frontier 0.5 }"#,
    );
    let mut experiment = config::parse(&source, Path::new("frontier.kdl")).unwrap();
    let open = experiment.open.as_mut().unwrap();
    open.frontier = vec![1.0, f64::NAN];
    open.rates = config::RateSelection::Grid {
        rates: vec![config::RatePerS(1.0)],
    };
    let text = render(&config::validate(&experiment).unwrap_err());
    for expected in [
        "open, frontier: a multiplier of 1 is the declared bound itself",
        "open, frontier: frontier multipliers must be greater than 0, got NaN",
        "frontier needs `search`; with a grid, add rates",
    ] {
        assert!(text.contains(expected), "{expected:?} not in\n{text}");
    }
}

#[test]
fn sizing_naming_a_missing_slo() {
    insta::assert_snapshot!(errors(
        "sizing.kdl",
        &with_base(
            r#"slo "interactive" { ttft p99="1s" }
slo "batch" { e2e p95="120s" }
sizing {
    target rps=150 slo=interactiv
    target rps=10
}
"#
        )
    ));
}

#[test]
fn api_key_env_given_the_key_itself() {
    insta::assert_snapshot!(errors(
        "secret.kdl",
        r#"
target "openai" {
    endpoint "https://api.openai.com/v1"
    api-key-env "sk-proj-4f9aXb2c8d7e6f5a4b3c2d1e"
}
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1; duration "5s" }
"#
    ));
}

#[test]
fn not_kdl_at_all() {
    insta::assert_snapshot!(errors(
        "broken.kdl",
        r#"
target "sim" { sim tiny
closed { concurrency 1 2 4.; duration "5s }
"#
    ));
}

// ------------------------------------------------------------------ whole-file rules

#[test]
fn nothing_to_measure() {
    insta::assert_snapshot!(errors("empty.kdl", "experiment \"nothing\"\n"));
}

#[test]
fn many_mistakes_are_all_reported_in_file_order() {
    let source = r#"
experiment "many" { seed 7 }
target "gpu" {
    sim tiny
    api chatt
    timeout "2 minutes"
}
workload "chat" {
    input-tokens lognormal median=600 sigma=-1
    output-tokens normal mean=200 stddev=50
    shared-prefix tokens=400 group=4
}
slo "fast" { ttft p99="1s"; itl p95=60 }
closed { concurrency 4 2; duration "5s"; warmpu "1s" }
sizing { target rps=5 slo=slow }
"#;
    let err = config::parse(source, Path::new("many.kdl")).unwrap_err();
    let messages: Vec<&str> = err.diagnostics().iter().map(|d| d.message()).collect();
    assert_eq!(messages.len(), 8, "{messages:#?}");
    let offsets: Vec<usize> = err
        .diagnostics()
        .iter()
        .filter_map(|d| d.offset())
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] <= w[1]),
        "diagnostics in file order: {offsets:?}"
    );
    insta::assert_snapshot!(render(&err));
}

#[test]
fn unreadable_file_is_a_clear_error() {
    let err = config::load(Path::new("experiments/does-not-exist.kdl")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    let rendered = render(&err);
    assert!(
        rendered.contains("cannot read experiment file experiments/does-not-exist.kdl"),
        "{rendered}"
    );
}

#[test]
fn validate_applies_the_same_rules_to_experiments_built_in_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.kdl");
    let mut experiment = config::load(&path).unwrap_or_else(|err| panic!("{}", render(&err)));
    experiment.workloads[0].output_tokens.kind = DistKind::Normal {
        mean: 64.0,
        stddev: -1.0,
    };
    experiment.closed.as_mut().unwrap().levels = vec![4, 2];
    experiment.targets.push(experiment.targets[0].clone());
    let err = config::validate(&experiment).unwrap_err();
    insta::assert_snapshot!(render(&err));
}

#[test]
fn misshapen_nodes() {
    insta::assert_snapshot!(errors(
        "shapes.kdl",
        r#"
target "sim" { sim tiny; timeout "5s" { }; model "a" "b" }
workload "chat" {
    input-tokens (u32)100
    output-tokens uniform min=1 max=9 min=2
    conversation { think-time "1s" }
}
slo "empty" { }
closed { concurrency 1; duration "5s" }
open { arrival poisson cv=2; rates 1 2; duration "5s" }
sizing { target rps=1 output-tokens-per-s=10 slo=empty }
"#
    ));
}

#[test]
fn metrics_source_forms_and_mistakes() {
    use capcard::config::MetricsSource;
    let source = r#"
target "a" { sim tiny }
target "b" { sim tiny; metrics #false }
target "c" { endpoint "http://127.0.0.1:8000/v1"; metrics "http://127.0.0.1:9400/metrics" }
workload "w" { input-tokens fixed 10; output-tokens fixed 10 }
closed { concurrency 1; duration "1s" }
"#;
    let experiment =
        config::parse(source, Path::new("m.kdl")).unwrap_or_else(|err| panic!("{}", render(&err)));
    assert_eq!(experiment.targets[0].metrics, MetricsSource::Auto);
    assert_eq!(experiment.targets[1].metrics, MetricsSource::Off);
    assert_eq!(
        experiment.targets[2].metrics,
        MetricsSource::Url {
            url: "http://127.0.0.1:9400/metrics".into()
        }
    );
    let report = errors(
        "m.kdl",
        &with_base(
            "target \"x\" { sim tiny; metrics \"localhost:9400\" }\ntarget \"y\" { sim tiny; metrics 5 }\n",
        ),
    );
    assert!(
        report.contains("`metrics` expects an http(s) URL"),
        "{report}"
    );
    assert!(
        report.contains("`metrics` expects a URL string or #false"),
        "{report}"
    );
}

// ------------------------------------------------------------------ hosted-API target options

#[test]
fn hosted_api_options_decode() {
    let source = r#"
target "hosted" {
    endpoint "https://api.example.com/v1"
    api-key-env OPENAI_API_KEY
    http2 #true
    force-length #false
    header "x-org" "capacity-team"
    header "x-api-key" env=EXAMPLE_KEY
    extra-body {
        temperature 0.7
        priority 2
        user "capcard"
        logprobs #false
    }
}
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1 2 4; duration "5s" }
"#;
    let experiment = config::parse(source, Path::new("hosted.kdl"))
        .unwrap_or_else(|err| panic!("{}", render(&err)));
    let target = &experiment.targets[0];
    assert!(target.http2);
    assert!(!target.force_length);
    assert_eq!(target.headers.len(), 2);
    assert_eq!(
        target.headers[1].value,
        config::HeaderValueSpec::Env("EXAMPLE_KEY".into())
    );
    assert_eq!(
        serde_json::Value::Object(target.extra_body.clone()),
        serde_json::json!({"temperature": 0.7, "priority": 2, "user": "capcard", "logprobs": false})
    );
    let defaults = config::parse(&with_base(""), Path::new("d.kdl")).unwrap();
    assert!(!defaults.targets[0].http2 && defaults.targets[0].force_length);
}

#[test]
fn hosted_api_option_mistakes() {
    insta::assert_snapshot!(errors(
        "hosted-mistakes.kdl",
        r#"
target "hosted" {
    endpoint "https://api.example.com/v1"
    http2 "true"
    header "bad header" "x"
    header "x-org"
    extra-body { temperature "hot" 2 }
}
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
closed { concurrency 1 2 4; duration "5s" }
"#
    ));
}

// ------------------------------------------------------------------ mixes

/// Three workloads and their SLOs, for mix cases (closed only: classes may
/// leave `slo=` out unless a case adds `open` or a sizing target).
const MIX_BASE: &str = r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
workload "rag" { input-tokens fixed 2000; output-tokens fixed 200 }
workload "batch" { input-tokens fixed 900; output-tokens fixed 400 }
slo "interactive" { ttft p99="1s" }
slo "rag" { ttft p99="2s" }
slo "batch" { e2e p95="120s" }
closed { concurrency 1 2 4; duration "5s" }
"#;

fn with_mix_base(extra: &str) -> String {
    format!("{MIX_BASE}{extra}")
}

#[test]
fn mix_example_decodes_to_the_expected_model() {
    use capcard::config::{MixClass, RatePerS, SizingTarget};
    let path = Path::new("tests/it/config_cases/mix_example.kdl");
    let experiment = config::load(path).unwrap_or_else(|err| panic!("{}", render(&err)));
    config::validate(&experiment).unwrap_or_else(|err| panic!("{}", render(&err)));
    assert_eq!(experiment.mixes.len(), 2);
    let mix = experiment.mix("production").expect("the mix is decoded");
    let class = |name: &str, workload: &str, slo: &str, weight: f64| MixClass {
        name: name.into(),
        span: None,
        workload: workload.into(),
        slo: Some(slo.into()),
        weight,
        model: None,
        priority: None,
    };
    let without_span = |c: &MixClass| MixClass {
        span: None,
        ..c.clone()
    };
    assert_eq!(
        mix.classes.iter().map(without_span).collect::<Vec<_>>(),
        vec![
            class("chat", "chat", "interactive", 70.0),
            MixClass {
                model: Some("rag-lora".into()),
                priority: Some(0),
                ..class("rag", "rag", "rag", 20.0)
            },
            MixClass {
                priority: Some(-2),
                ..class("batch", "batch", "batch", 10.0)
            },
        ]
    );
    assert_eq!(mix.weights(), [70.0, 20.0, 10.0]);
    assert_eq!(
        mix.weight_settings,
        [vec![60.0, 20.0, 20.0], vec![50.0, 20.0, 30.5]]
    );
    assert!(mix.alone);
    let quiet = experiment.mix("quiet").unwrap();
    assert_eq!(
        quiet.classes.iter().map(without_span).collect::<Vec<_>>(),
        [class("chat", "chat", "interactive", 1.0)],
        "bare identifiers name workloads and SLOs too"
    );
    assert!(quiet.weight_settings.is_empty() && !quiet.alone);

    // The class's workload kept its dataset.
    let rag = experiment.workload("rag").unwrap();
    assert!(rag.dataset.as_ref().is_some_and(|d| d.data.is_some()));

    let sizing = experiment.sizing.as_ref().unwrap();
    assert_eq!(
        sizing.targets,
        [
            SizingTarget::MixRps {
                rps: RatePerS(150.0),
                mix: "production".into()
            },
            SizingTarget::Rps {
                rps: RatePerS(20.0),
                slo: "interactive".into()
            },
        ]
    );
    assert_eq!(sizing.targets[0].label(), "rps=150 mix=production");

    // Spans point at the names in the file.
    let source = std::fs::read_to_string(path).unwrap();
    let text = |span: Option<miette::SourceSpan>| {
        let span = span.expect("parsed items have spans");
        source[span.offset()..span.offset() + span.len()].to_string()
    };
    assert_eq!(text(mix.span), "\"production\"");
    assert_eq!(text(mix.classes[1].span), "\"rag\"");

    assert_eq!(
        config::summary_line(path, &experiment),
        "tests/it/config_cases/mix_example.kdl: ok — experiment \"production-mix\": 1 target, \
         3 workloads, 3 SLOs, 2 mixes, closed 4 levels, open search 0.5..16 rps, sizing 2 targets"
    );
}

#[test]
fn mix_class_weight_zero() {
    insta::assert_snapshot!(errors(
        "mix-weight.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "batch" workload="batch" slo="batch" weight=0
}
"#
        )
    ));
}

#[test]
fn mix_class_weight_negative() {
    insta::assert_snapshot!(errors(
        "mix-weight.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "batch" workload="batch" slo="batch" weight=-10
    weights 50 -1
}
"#
        )
    ));
}

#[test]
fn mix_class_unknown_workload() {
    insta::assert_snapshot!(errors(
        "mix-workload.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chta" slo="interactive" weight=70
    class "other" workload="summaries" weight=30
}
"#
        )
    ));
}

#[test]
fn mix_class_unknown_slo_suggests_the_near_name() {
    insta::assert_snapshot!(errors(
        "mix-slo.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactiv" weight=70
    class "rag" workload="rag" slo="rag" weight=30
}
"#
        )
    ));
}

#[test]
fn mix_class_without_slo_beside_open() {
    insta::assert_snapshot!(errors(
        "mix-open.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "batch" workload="batch" weight=30
}
open { search min=1 max=16; duration "30s" }
"#
        )
    ));
}

#[test]
fn mix_weights_line_of_the_wrong_length() {
    insta::assert_snapshot!(errors(
        "mix-weights.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "rag" workload="rag" slo="rag" weight=20
    class "batch" workload="batch" slo="batch" weight=10
    weights 60 40
    weights 50 20 30
}
"#
        )
    ));
}

#[test]
fn mix_duplicate_class() {
    insta::assert_snapshot!(errors(
        "mix-dupes.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "chat" workload="rag" slo="rag" weight=30
}
"#
        )
    ));
}

#[test]
fn mix_named_like_a_workload_or_another_mix() {
    insta::assert_snapshot!(errors(
        "mix-names.kdl",
        &with_mix_base(
            r#"mix "chat" {
    class "chat" workload="chat" weight=1
}
mix "both" { class "chat" workload="chat" weight=1 }
mix "both" { class "rag" workload="rag" weight=1 }
"#
        )
    ));
}

#[test]
fn sizing_naming_a_missing_mix() {
    insta::assert_snapshot!(errors(
        "mix-sizing.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "rag" workload="rag" slo="rag" weight=30
}
sizing { target rps=150 mix="prodution" }
"#
        )
    ));
}

#[test]
fn sizing_with_both_slo_and_mix() {
    insta::assert_snapshot!(errors(
        "mix-sizing.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
}
sizing {
    target rps=150 slo=interactive mix=production
    target output-tokens-per-s=50000 mix=production
}
"#
        )
    ));
}

#[test]
fn mix_beside_a_trace_or_the_frontier() {
    insta::assert_snapshot!(errors(
        "mix-trace.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "rag" workload="rag" slo="rag" weight=30
}
open { arrival trace "data/trace.jsonl"; frontier 0.5 2; search min=1 max=8 }
"#
        )
    ));
}

#[test]
fn mix_shape_mistakes() {
    insta::assert_snapshot!(errors(
        "mix-shapes.kdl",
        &with_mix_base(
            r#"mix "empty" { alone #true }
mix "parts" {
    class "a" slo="interactive"
    class "b" workload="chat" weight=1 model="" priority="high"
    weights 1 x
    alone
}
mix { class "c" workload="chat" weight=1 }
"#
        )
    ));
}

#[test]
fn a_sized_mix_needs_every_class_slo_without_open() {
    insta::assert_snapshot!(errors(
        "mix-sized.kdl",
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" slo="interactive" weight=70
    class "batch" workload="batch" weight=30
}
sizing { target rps=150 mix=production }
"#
        )
    ));
}

#[test]
fn a_closed_only_mix_may_leave_slos_out() {
    let experiment = config::parse(
        &with_mix_base(
            r#"mix "production" {
    class "chat" workload="chat" weight=70
    class "batch" workload="batch" weight=30
}
sizing { target rps=150 slo=interactive }
"#,
        ),
        Path::new("closed-mix.kdl"),
    )
    .unwrap_or_else(|err| panic!("{}", render(&err)));
    assert!(experiment.mixes[0].classes.iter().all(|c| c.slo.is_none()));
    config::validate(&experiment).unwrap_or_else(|err| panic!("{}", render(&err)));
}

#[test]
fn validate_checks_mixes_of_experiments_built_in_code() {
    use capcard::config::{Mix, MixClass, RatePerS, SizingSpec, SizingTarget};
    let source = with_mix_base(r#"open { search min=1 max=8; duration "10s"; frontier 0.5 }"#);
    let mut experiment = config::parse(&source, Path::new("mix.kdl")).unwrap();
    let class = |name: &str, workload: &str, slo: Option<&str>, weight: f64| MixClass {
        name: name.into(),
        span: None,
        workload: workload.into(),
        slo: slo.map(Into::into),
        weight,
        model: None,
        priority: None,
    };
    experiment.mixes = vec![
        Mix {
            name: "chat".into(),
            span: None,
            classes: vec![
                class("a", "chta", Some("interactive"), 1.0),
                class("a", "rag", None, 0.0),
                MixClass {
                    model: Some(" ".into()),
                    ..class("c", "batch", Some("bacth"), f64::NAN)
                },
            ],
            weight_settings: vec![vec![1.0, 2.0]],
            alone: false,
        },
        Mix {
            name: "empty".into(),
            span: None,
            classes: vec![],
            weight_settings: vec![],
            alone: true,
        },
    ];
    experiment.sizing = Some(SizingSpec {
        targets: vec![SizingTarget::MixRps {
            rps: RatePerS(0.0),
            mix: "chat-mix".into(),
        }],
        headroom: config::Fraction(0.3),
        spares: 0,
        cr_open: config::CrOpenUse::Promise,
    });
    let err = config::validate(&experiment).unwrap_err();
    let messages: Vec<&str> = err.diagnostics().iter().map(|d| d.message()).collect();
    assert_eq!(
        messages,
        [
            "mix `chat`: mix `chat` has the same name as a workload",
            "mix `chat`: mix `chat` cannot be measured with `frontier` in `open`: the SLO frontier is not supported for mixes yet",
            "mix `chat`, class `a`: there is no workload named `chta`",
            "mix `chat`, class `a`: there is more than one class named `a`",
            "mix `chat`, class `a`: a class's weight must be > 0, got 0",
            "mix `chat`, class `a`: class `a` has no `slo=`: Cr_open of a mix needs every class's own SLO",
            "mix `chat`, class `c`: there is no SLO named `bacth`",
            "mix `chat`, class `c`: a class's weight must be > 0, got NaN",
            "mix `chat`, class `c`: a class's `model` must not be empty",
            "mix `chat`, weights #1: `weights` gives 2 weights but the mix has 3 classes",
            "mix `empty`: mix `empty` has no `class`",
            "mix `empty`: mix `empty` cannot be measured with `frontier` in `open`: the SLO frontier is not supported for mixes yet",
            "sizing, target: `rps` must be greater than 0, got 0",
            "sizing, target: there is no mix named `chat-mix`",
        ]
    );
}

// ------------------------------------------------------------------ sim knobs

/// One `sim` target named `knobs` on the tiny preset with `knobs` in its block.
fn with_sim_knobs(knobs: &str) -> String {
    with_base(&format!(
        "target \"knobs\" {{\n    sim tiny {{\n{knobs}    }}\n}}\n"
    ))
}

#[test]
fn sim_knobs_decode_to_the_expected_serving() {
    use capcard::config::{SimFaults, SimRouter, SimServing};
    let path = Path::new("tests/it/config_cases/sim_knobs.kdl");
    let experiment = config::load(path).unwrap_or_else(|err| panic!("{}", render(&err)));
    config::validate(&experiment).unwrap_or_else(|err| panic!("{}", render(&err)));
    let TargetKind::Sim {
        preset, serving, ..
    } = &experiment.targets[0].kind
    else {
        panic!("a sim target, got {:?}", experiment.targets[0].kind)
    };
    assert_eq!(preset, "h100-llama3-8b");
    let expected = SimServing {
        max_num_seqs: Some(512),
        max_batched_tokens: Some(16384),
        kv_cache_tokens: Some(400_000),
        gpu_memory_utilization: Some(0.95),
        prefix_caching: Some(false),
        chunked_prefill: Some(false),
        tensor_parallel: Some(2),
        compute_efficiency: Some(0.55),
        memory_efficiency: Some(0.75),
        step_overhead: Some(Duration::from_micros(1200)),
        per_seq_overhead: Some(Duration::from_micros(12)),
        reasoning_tokens: Some(capcard::config::Dist {
            kind: capcard::config::DistKind::LogNormal {
                median: 200.0,
                sigma: 0.5,
            },
            min: None,
            max: Some(2000.0),
        }),
        tokens_per_event: Some(4),
        prompt_tokens_details: Some(true),
        replicas: 2,
        router: SimRouter::LeastLoaded,
        virtual_time: true,
        network_overhead: Duration::from_micros(300),
        calibrated: Some("runs/lv: TTFT p50 +3%, ITL p50 -2%".into()),
        max_context: Some(4096),
        slots: None,
        service: None,
        cliff: None,
    };
    assert_eq!(serving, &expected);
    assert_eq!(experiment.targets[0].max_context, Some(4096));

    // An empty block is the preset as it is, beside the fault properties.
    let TargetKind::Sim {
        faults, serving, ..
    } = &experiment.targets[1].kind
    else {
        panic!("a sim target, got {:?}", experiment.targets[1].kind)
    };
    assert_eq!(faults.fail_rate, config::Fraction(0.01));
    assert_eq!(
        faults,
        &SimFaults {
            fail_rate: config::Fraction(0.01),
            ..SimFaults::default()
        }
    );
    assert!(serving.is_default_serving());
    assert_eq!(serving, &SimServing::default());

    // What a card prints of the knobs reads back as the same knobs.
    let knobs: String = expected
        .describe()
        .iter()
        .map(|line| format!("        {line}\n"))
        .collect();
    let reread = config::parse(&with_sim_knobs(&knobs), Path::new("describe.kdl"))
        .unwrap_or_else(|err| panic!("{knobs}\n{}", render(&err)));
    let TargetKind::Sim { serving, .. } = &reread.targets[1].kind else {
        panic!("a sim target")
    };
    // `max-context` is the target's, not a line of the sim block.
    let in_block = SimServing {
        max_context: None,
        ..expected
    };
    assert_eq!(serving, &in_block);
}

#[test]
fn sim_percentages_and_defaults_of_the_knobs() {
    let experiment = config::parse(
        &with_sim_knobs(
            "        compute-efficiency \"55%\"\n        replicas 3\n        virtual #false\n",
        ),
        Path::new("pct.kdl"),
    )
    .unwrap_or_else(|err| panic!("{}", render(&err)));
    let TargetKind::Sim { serving, .. } = &experiment.targets[1].kind else {
        panic!("a sim target")
    };
    assert_eq!(serving.compute_efficiency, Some(0.55));
    assert_eq!(serving.replicas, 3);
    assert_eq!(serving.router, config::SimRouter::RoundRobin);
    assert!(!serving.virtual_time);
    assert_eq!(
        serving.describe(),
        ["compute-efficiency 0.55", "replicas 3"]
    );
}

#[test]
fn sim_unknown_knob_suggests_the_near_name_and_lists_the_knobs() {
    insta::assert_snapshot!(errors(
        "sim-knobs.kdl",
        &with_sim_knobs(
            "        max-num-seq 512\n        router least-loaded\n        batch-size 64\n"
        )
    ));
}

#[test]
fn sim_counts_must_be_whole_and_at_least_one() {
    insta::assert_snapshot!(errors(
        "sim-counts.kdl",
        &with_sim_knobs(
            "        max-num-seqs 0\n        kv-cache-tokens \"400000\"\n        tensor-parallel 1.5\n"
        )
    ));
}

#[test]
fn sim_efficiency_out_of_range() {
    insta::assert_snapshot!(errors(
        "sim-efficiency.kdl",
        &with_sim_knobs(
            "        compute-efficiency 1.5\n        memory-efficiency 0\n        gpu-memory-utilization 95\n"
        )
    ));
}

#[test]
fn sim_zero_or_too_many_replicas() {
    insta::assert_snapshot!(errors(
        "sim-replicas.kdl",
        &with_base(
            "target \"none\" { sim tiny { replicas 0; }; }\ntarget \"fleet\" { sim tiny { replicas 500 router=least-loaded; }; }\n"
        )
    ));
}

#[test]
fn sim_unknown_router() {
    insta::assert_snapshot!(errors(
        "sim-router.kdl",
        &with_base(
            "target \"a\" { sim tiny { replicas 2 router=least-load; }; }\ntarget \"b\" { sim tiny { replicas 2 router=random; }; }\n"
        )
    ));
}

#[test]
fn sim_network_overhead_without_virtual_time() {
    insta::assert_snapshot!(errors(
        "sim-network.kdl",
        &with_base(
            "target \"a\" { sim tiny { network-overhead \"0.3ms\"; }; }\ntarget \"b\" { sim tiny { virtual #false; network-overhead \"1ms\"; }; }\n"
        )
    ));
}

#[test]
fn sim_overheads_are_durations() {
    insta::assert_snapshot!(errors(
        "sim-overheads.kdl",
        &with_sim_knobs("        step-overhead \"-1ms\"\n        per-seq-overhead 12\n")
    ));
}

#[test]
fn sim_duplicate_knob() {
    insta::assert_snapshot!(errors(
        "sim-twice.kdl",
        &with_sim_knobs("        max-num-seqs 256\n        replicas 2\n        max-num-seqs 512\n")
    ));
}

#[test]
fn validate_checks_sim_serving_of_experiments_built_in_code() {
    use capcard::config::SimServing;
    let mut experiment = config::parse(&with_base(""), Path::new("v.kdl")).unwrap();
    let TargetKind::Sim { serving, .. } = &mut experiment.targets[0].kind else {
        panic!("a sim target")
    };
    *serving = SimServing {
        max_num_seqs: Some(0),
        kv_cache_tokens: Some(0),
        compute_efficiency: Some(0.0),
        gpu_memory_utilization: Some(f64::NAN),
        replicas: 65,
        network_overhead: Duration::from_millis(1),
        ..SimServing::default()
    };
    let err = config::validate(&experiment).unwrap_err();
    let messages: Vec<&str> = err.diagnostics().iter().map(|d| d.message()).collect();
    assert_eq!(
        messages,
        [
            "target `sim`, sim: `max-num-seqs` must be at least 1, got 0",
            "target `sim`, sim: `kv-cache-tokens` must be at least 1, got 0",
            "target `sim`, sim: `replicas` must be at most 64, got 65",
            "target `sim`, sim: `gpu-memory-utilization` must be greater than 0 and at most 1, got NaN",
            "target `sim`, sim: `compute-efficiency` must be greater than 0 and at most 1, got 0",
            "target `sim`, sim: `network-overhead` needs `virtual #true`",
        ]
    );
}

#[test]
fn a_queue_takes_its_own_knobs_and_a_batching_engine_refuses_them() {
    let experiment = config::parse(
        r#"
target "q" {
    sim queue {
        slots 8
        service "lognormal" mean="500ms" sigma=1.0
        cliff above=6 slowdown=3
        virtual #true
    }
}
workload "chat" { input-tokens fixed 16; output-tokens fixed 4 }
open { search min=1 max=20 precision="5%"; duration "10s" }
slo "s" { ttft p90="250ms" }
"#,
        Path::new("queue.kdl"),
    )
    .expect("a valid queue");
    let TargetKind::Sim {
        serving, preset, ..
    } = &experiment.targets[0].kind
    else {
        panic!("a sim target");
    };
    assert_eq!(preset, "queue");
    assert_eq!(serving.slots, Some(8));
    assert_eq!(
        serving.describe(),
        [
            "virtual #true",
            "slots 8",
            "service \"lognormal\" mean=\"500ms\" sigma=1",
            "cliff above=6 slowdown=3"
        ]
    );
    insta::assert_snapshot!(errors(
        "queue-knobs.kdl",
        r#"
target "a" { sim tiny { slots 4; cliff above=2 slowdown=2 } }
target "b" { sim queue { max-num-seqs 4; service "gamma" mean="1s" } }
target "c" { sim queue { service "lognormal" mean="0ms" sigma=9; cliff above=2 slowdown=0.5 } }
target "d" { sim queue { service "exponential" mean="1s" sigma=1; service "two-point" short="1s" } }
workload "chat" { input-tokens fixed 16; output-tokens fixed 4 }
closed { concurrency 1; duration "5s" }
"#
    ));
}
