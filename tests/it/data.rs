//! Real data: datasets and traces shipped in tests/data/ load in every
//! format, bad lines are reported with their line numbers, tasks replay the
//! records, a trace's arrivals are replayed as recorded at speedup 1 and 2
//! (through the CLI runner), and shared `hash_ids` hit the simulator's
//! prefix cache.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::capcard;
use capcard::config::{self, Api, Arrival, RatePerS, Sample, StopRule};
use capcard::exec::{
    CompletionsPrompt, Endpoint, RunInputs, RunOptions, TraceSource, execute_run_with, read_journal,
};
use capcard::plan::{Load, RunPlan};
use capcard::sim::metrics::sample;
use capcard::sim::{SimConfig, presets, start};
use capcard::workload::dataset::{EntryPrompt, parse_dataset};
use capcard::workload::trace::{Trace, parse_trace};
use capcard::workload::{Segment, TaskGenerator, TaskSpec};

fn data(name: &str) -> String {
    std::fs::read_to_string(Path::new("tests/data").join(name)).expect("test data file")
}

use super::support::render;

// ------------------------------------------------------------------ formats

#[test]
fn every_dataset_format_loads() {
    let prompts = parse_dataset(&data("prompts.jsonl"), "prompts.jsonl").unwrap();
    assert_eq!(prompts.entries.len(), 5);
    assert_eq!(prompts.entries[0].input_tokens(), 13);
    assert_eq!(prompts.entries[0].output_tokens, Some(20));
    assert_eq!(prompts.entries[2].output_tokens, None);

    let tokens = parse_dataset(&data("tokens.jsonl"), "tokens.jsonl").unwrap();
    assert_eq!(tokens.input_lengths(), vec![120, 64, 300, 16]);
    assert_eq!(tokens.output_lengths(), vec![30, 8, 50, 4]);

    let chat = parse_dataset(&data("chat.jsonl"), "chat.jsonl").unwrap();
    assert_eq!(chat.entries.len(), 2);
    // System + user are sent; the recorded answer (6 words) is the output length.
    assert_eq!(chat.entries[0].input_tokens(), 3 + 5);
    assert_eq!(chat.entries[0].output_tokens, Some(6));

    let sharegpt = parse_dataset(&data("sharegpt.json"), "sharegpt.json").unwrap();
    assert_eq!(sharegpt.entries.len(), 2);
    assert_eq!(sharegpt.skipped, 1);
    assert_eq!(sharegpt.entries[0].turns.len(), 2);
    assert_eq!(sharegpt.entries[0].output_tokens, Some(10));
    assert!(matches!(
        &sharegpt.entries[1].prompt,
        EntryPrompt::Messages(m) if &*m[0].text == "How do I boil an egg?"
    ));
}

#[test]
fn every_trace_layout_loads() {
    let mooncake = parse_trace(&data("trace-mooncake.jsonl"), "m").unwrap();
    assert_eq!(mooncake.rows.len(), 8);
    assert_eq!(mooncake.rows[2].hash_ids, vec![1, 2, 102]);
    assert!((mooncake.mean_rate_per_s() - 10.0).abs() < 1e-9);
    let burst = parse_trace(&data("trace-burstgpt.csv"), "b").unwrap();
    assert_eq!(burst.rows.len(), 4);
    assert_eq!(
        burst.rows[1].output_tokens, 1,
        "failed requests keep one token"
    );
    assert_eq!(burst.rows[3].timestamp_ms, 1500.0);
}

#[test]
fn check_reports_the_first_bad_line_of_each_file() {
    let err = config::load(Path::new("tests/data/bad-data.kdl")).unwrap_err();
    insta::assert_snapshot!(render(&err));
}

#[test]
fn a_missing_dataset_file_points_at_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.kdl");
    std::fs::write(
        &path,
        "target \"t\" { sim tiny }\nworkload \"w\" { dataset \"nowhere.jsonl\" }\nclosed { concurrency 1; duration \"1s\" }\n",
    )
    .unwrap();
    let err = config::load(&path).unwrap_err();
    let message = err.diagnostics()[0].message().to_string();
    assert!(message.starts_with("cannot read "), "{message}");
    assert!(message.contains("nowhere.jsonl"), "{message}");
    assert_eq!(err.diagnostics()[0].offset(), Some(47));
}

// ------------------------------------------------------------------ tasks

fn dataset_experiment(dir: &Path, dataset_line: &str, extra: &str) -> config::Experiment {
    for name in ["prompts.jsonl", "sharegpt.json", "tokens.jsonl"] {
        std::fs::copy(Path::new("tests/data").join(name), dir.join(name)).unwrap();
    }
    let path = dir.join("d.kdl");
    std::fs::write(
        &path,
        format!(
            "target \"t\" {{ sim tiny }}\nworkload \"w\" {{\n {dataset_line}\n output-tokens fixed 33\n {extra}\n}}\nclosed {{ concurrency 1; duration \"1s\" }}\n"
        ),
    )
    .unwrap();
    config::load(&path).unwrap()
}

fn user_text(spec: &TaskSpec) -> String {
    let TaskSpec::Single(call) = spec else {
        panic!("single call expected, got {spec:?}")
    };
    match &call.messages.last().unwrap().segments[0] {
        Segment::Text { text, .. } => text.to_string(),
        other => panic!("text expected, got {other:?}"),
    }
}

#[test]
fn sequential_and_shuffled_tasks_replay_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = dataset_experiment(
        dir.path(),
        "dataset \"prompts.jsonl\" sample=\"sequential\"",
        "",
    );
    let workload = &experiment.workloads[0];
    let spec = workload.dataset.as_ref().unwrap();
    assert_eq!(spec.sample, Sample::Sequential);
    assert_eq!(spec.path, dir.path().join("prompts.jsonl"));
    let generator = TaskGenerator::new(workload, 5);
    let first = generator.task(0).spec;
    assert_eq!(
        user_text(&first),
        "What is a KV cache and why does it matter for LLM serving?"
    );
    assert_eq!(user_text(&generator.task(5).spec), user_text(&first));
    let TaskSpec::Single(third) = generator.task(2).spec else {
        unreachable!()
    };
    assert_eq!(third.output_tokens, 33, "no output in the record: fallback");
    assert_eq!(third.input_tokens, 9);

    let experiment = dataset_experiment(dir.path(), "dataset \"prompts.jsonl\"", "");
    let generator = TaskGenerator::new(&experiment.workloads[0], 5);
    let mut seen: Vec<String> = (0..5).map(|i| user_text(&generator.task(i).spec)).collect();
    let again: Vec<String> = (0..5).map(|i| user_text(&generator.task(i).spec)).collect();
    assert_eq!(seen, again, "the order is seeded");
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 5, "each record once before any repeats");

    let experiment = dataset_experiment(
        dir.path(),
        "dataset \"tokens.jsonl\" max-input-tokens=100",
        "",
    );
    let workload = &experiment.workloads[0];
    assert_eq!(
        workload
            .dataset
            .as_ref()
            .unwrap()
            .data
            .as_ref()
            .unwrap()
            .entries
            .len(),
        2
    );
    assert!(matches!(
        workload.input_tokens.kind,
        config::DistKind::Empirical { .. }
    ));
}

#[test]
fn sharegpt_conversations_replay_their_turns() {
    let dir = tempfile::tempdir().unwrap();
    let experiment = dataset_experiment(
        dir.path(),
        "dataset \"sharegpt.json\" sample=\"sequential\"",
        r#"conversation { turns fixed 1; think-time fixed "0s" }"#,
    );
    let task = TaskGenerator::new(&experiment.workloads[0], 1).task(0);
    let TaskSpec::Conversation { turns } = task.spec else {
        panic!("conversation expected")
    };
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].call.output_tokens, 10);
    // Turn 2 re-sends the first exchange, with the recorded answer.
    assert_eq!(turns[1].call.messages.len(), 3);
    assert_eq!(turns[1].call.input_tokens, 6 + 10 + 3);
    assert_eq!(turns[1].call.output_tokens, 13);
}

// ------------------------------------------------------------------ replay

#[test]
fn trace_arrivals_are_replayed_at_speedup_1_and_2() {
    // The trace's mean rate is 10 rps: rates 10 and 20 are speedups 1 and 2.
    let (dir, file) = trace_experiment(
        r#"open {
    arrival trace "t.jsonl" block-tokens=16
    rates 10 20
    duration "30s"
}"#,
    );
    let out = dir.path().join("out");
    capcard()
        .args(["run", "--quiet"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let trace = parse_trace(&data("trace-mooncake.jsonl"), "t").unwrap();
    for (speedup, run) in [(1.0, "tiny--w--r10.000"), (2.0, "tiny--w--r20.000")] {
        let journal = read_journal(&out.join("runs").join(format!("{run}.jsonl"))).unwrap();
        let expected: Vec<f64> = trace
            .offsets(speedup)
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        assert_eq!(journal.requests.len(), 8, "the run ends with the trace");
        for record in &journal.requests {
            let want = expected[record.task as usize];
            assert!(
                (record.scheduled_ms - want).abs() <= 1.0,
                "{run} task {}: scheduled {} ms, trace says {want} ms",
                record.task,
                record.scheduled_ms
            );
            assert_eq!(
                record.prompt_tokens_reported,
                Some(record.prompt_tokens_requested)
            );
            assert_eq!(record.error, None);
        }
        // The measured window ends with the trace, not at the planned 30 s.
        let footer = journal.footer.as_ref().unwrap();
        assert!(footer.measured_window_ms[1] < 5_000.0, "{footer:?}");
        assert_eq!(footer.offered, Some(8));
    }
}

/// `tests/data/trace-mooncake.jsonl` as `t.jsonl` beside an experiment on
/// the tiny sim whose `open` block is `open` (a fresh temp dir).
fn trace_experiment(open: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        "tests/data/trace-mooncake.jsonl",
        dir.path().join("t.jsonl"),
    )
    .unwrap();
    let file = dir.path().join("trace.kdl");
    std::fs::write(
        &file,
        format!(
            "target \"tiny\" {{ sim tiny }}\nworkload \"w\" {{ input-tokens fixed 40; output-tokens fixed 4 }}\n{open}\n"
        ),
    )
    .unwrap();
    (dir, file)
}

#[test]
fn a_trace_without_duration_lasts_the_trace() {
    let (dir, file) = trace_experiment(
        r#"open {
    arrival trace "t.jsonl" block-tokens=16
    rates 10 20
}"#,
    );
    let plan = capcard().arg("plan").arg(&file).assert().success();
    let text = String::from_utf8(plan.get_output().stdout.clone()).unwrap();
    // The 0.7 s trace at 1x and 2x: both replays are measured for the
    // one-second minimum.
    assert!(text.contains("warmup 0 s + 1 s per rate"), "{text}");
    let out = dir.path().join("out");
    capcard()
        .args(["run", "--quiet"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let trace = parse_trace(&data("trace-mooncake.jsonl"), "t").unwrap();
    for (speedup, run) in [(1.0, "tiny--w--r10.000"), (2.0, "tiny--w--r20.000")] {
        let journal = read_journal(&out.join("runs").join(format!("{run}.jsonl"))).unwrap();
        assert_eq!(journal.requests.len(), 8, "every arrival of the trace");
        let header = journal.header.as_ref().unwrap();
        let planned = match header.run.stop {
            capcard::config::StopRule::Duration(d) => d.as_secs_f64(),
            other => panic!("the plan gives the replay a duration, got {other:?}"),
        };
        assert!(
            planned >= trace.span_s() / speedup && planned <= trace.span_s() / speedup + 1.0,
            "{run}: {planned} s for a span of {} s",
            trace.span_s() / speedup
        );
        assert_eq!(journal.footer.as_ref().unwrap().offered, Some(8));
    }
}

async fn replay_on_sim(trace: Trace) -> String {
    let preset = presets::find("tiny").unwrap();
    let server = start(
        SimConfig::new(preset).with_seed(1),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let endpoint = Endpoint {
        base_url: server.base_url(),
        api: Api::Completions,
        model: "sim/tiny".into(),
        api_key: None,
        timeout: Duration::from_secs(10),
        http2: false,
        headers: Vec::new(),
        body: Default::default(),
    };
    let load = Load::Rate {
        rate: RatePerS(trace.mean_rate_per_s()),
        arrival: Arrival::Trace,
    };
    let stop = StopRule::Duration(Duration::from_secs(30));
    let run = RunPlan::new("tiny", "w", load, Duration::ZERO, stop, 9);
    let workload = config::Workload {
        name: "w".into(),
        span: None,
        input_tokens: config::Dist::fixed(1.0),
        output_tokens: config::Dist::fixed(1.0),
        shared_prefix: None,
        conversation: None,
        agent: None,
        dataset: None,
        tools: None,
        sessions: None,
    };
    let trace = Arc::new(trace);
    let inputs = RunInputs {
        source: TraceSource::new(
            Arc::clone(&trace),
            16,
            &workload,
            run.seed,
            endpoint.api,
            CompletionsPrompt::Text,
        )
        .shared(),
        arrivals: Some(Box::new(trace.offsets(1.0))),
    };
    let dir = tempfile::tempdir().unwrap();
    let journal = execute_run_with(
        &endpoint,
        &run,
        inputs,
        &dir.path().join("j.jsonl"),
        &RunOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(journal.requests.len(), trace.rows.len());
    let metrics = crate::support::web::get(format!("http://{}/metrics", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.shutdown().await;
    metrics
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_hash_ids_hit_the_simulators_prefix_cache() {
    let trace = parse_trace(&data("trace-mooncake.jsonl"), "t").unwrap();
    // Rows 0, 2, 4, 6 start with blocks [1, 2]: 32 tokens at 16 per block.
    let shared = replay_on_sim(trace.clone()).await;
    let hits = sample(&shared, "vllm:prefix_cache_hits_total").unwrap();
    assert!(hits >= 32.0, "shared blocks must hit: {hits}");
    assert_eq!(hits % 16.0, 0.0, "hits are whole blocks: {hits}");

    // The same trace with every id made distinct: nothing to hit.
    let mut distinct = trace;
    for (row, r) in distinct.rows.iter_mut().enumerate() {
        for (k, id) in r.hash_ids.iter_mut().enumerate() {
            *id = 10_000 + (row * 10 + k) as u64;
        }
    }
    let alone = replay_on_sim(distinct).await;
    assert_eq!(sample(&alone, "vllm:prefix_cache_hits_total"), Some(0.0));
}

#[test]
fn plan_shows_dataset_and_trace_lengths() {
    let dataset = capcard()
        .args(["plan", "experiments/dataset.kdl"])
        .assert()
        .success();
    let text = String::from_utf8(dataset.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("dataset  experiments/data/support-prompts.jsonl: 30 records, shuffled; input tokens mean"),
        "{text}"
    );
    let trace = capcard()
        .args(["plan", "experiments/trace.kdl"])
        .assert()
        .success();
    let text = String::from_utf8(trace.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("120 arrivals over 10.7 s (mean 11.097 rps at speedup 1)"),
        "{text}"
    );
}
