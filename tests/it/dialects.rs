//! First contact with servers stricter than vLLM, through the real binary:
//! the simulator plays each dialect (`SimDialect`), and each test counts the
//! calls it received, reads the journals and the card. A refused body must
//! cost a call or two, not a run's worth; what the preflight settles must be
//! journaled and on the card; a quota must be honoured in closed loop and
//! never delay an open schedule.

use std::path::Path;

use crate::support::{capcard, experiment_file};
use capcard::exec::{ErrorClass, RequestRecord, TokenSource, read_journal};
use capcard::sim::{RateLimit, SimConfig, SimDialect, SimServer, presets, start};

/// The tiny engine playing `dialect` on an ephemeral port, on a runtime of
/// its own that lives as long as the guard.
struct Served {
    server: SimServer,
    _runtime: tokio::runtime::Runtime,
}

impl Served {
    fn new(dialect: SimDialect) -> Served {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let preset = presets::find("tiny").expect("tiny preset");
        let config = SimConfig::new(preset).with_seed(3).with_dialect(dialect);
        let server = runtime
            .block_on(start(config, "127.0.0.1:0".parse().unwrap()))
            .expect("sim starts");
        Served {
            server,
            _runtime: runtime,
        }
    }

    fn url(&self) -> String {
        self.server.base_url()
    }

    fn calls(&self) -> u64 {
        self.server.calls_received()
    }
}

/// A short closed run against `url` with `target` lines added.
fn experiment(url: &str, target: &str, workload: &str, load: &str) -> String {
    format!(
        r#"
experiment "dialect" {{ seed 5 }}
target "hosted" {{
    endpoint "{url}"
    metrics #false
    {target}
}}
workload "w" {{
    {workload}
}}
{load}
"#
    )
}

const SHORT_CHAT: &str = "input-tokens fixed 32\n    output-tokens fixed 8";
const CLOSED_2S: &str = "closed {\n    concurrency 2\n    duration \"2s\"\n    warmup \"0s\"\n}";

fn run(file: &Path, out: &Path) -> std::process::Output {
    capcard()
        .args(["run", "--quiet", "--out"])
        .arg(out)
        .arg(file)
        .output()
        .unwrap()
}

fn write(dir: &Path, text: &str) -> std::path::PathBuf {
    let file = dir.join("dialect.kdl");
    std::fs::write(&file, text).unwrap();
    file
}

fn journals(out: &Path) -> Vec<capcard::exec::Journal> {
    let mut all: Vec<_> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    all.sort();
    all.iter().map(|p| read_journal(p).unwrap()).collect()
}

/// stderr with miette's wrapping and frame undone, for matching sentences.
fn flat(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn card(out: &Path) -> String {
    std::fs::read_to_string(out.join("hosted--w.md")).unwrap()
}

#[test]
fn a_refused_body_costs_one_call_and_says_which_setting_fixes_it() {
    let served = Served::new(SimDialect::vllm().strict());
    let tmp = tempfile::tempdir().unwrap();
    let file = write(
        tmp.path(),
        &experiment(&served.url(), "", SHORT_CHAT, CLOSED_2S),
    );
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    let stderr = flat(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "the server said: HTTP 400 Bad Request: \"Unrecognized request argument supplied: min_tokens, ignore_eos\""
        ),
        "the server's words are quoted: {stderr}"
    );
    assert!(
        stderr.contains("the server refuses `ignore_eos`, `min_tokens`")
            && stderr.contains("set `force-length #false` on target `hosted`"),
        "{stderr}"
    );
    assert_eq!(served.calls(), 1, "one call, not a run's worth");
    assert!(!out.exists(), "nothing measured, nothing written");

    // The fix named works, and the runs say what they sent.
    let fixed = write(
        tmp.path(),
        &experiment(&served.url(), "force-length #false", SHORT_CHAT, CLOSED_2S),
    );
    let output = run(&fixed, &out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journal = &journals(&out)[0];
    let dialect = journal.header.as_ref().unwrap().dialect.clone().unwrap();
    assert!(!dialect.force_length);
    assert_eq!(dialect.length_field, "max_completion_tokens");
    assert!(journal.requests.iter().all(|r| r.is_ok()));
    assert!(card(&out).contains("| Request dialect | `max_completion_tokens`, `stream_options`"));
}

#[test]
fn a_server_that_refuses_stream_options_is_measured_without_it_and_says_how_tokens_were_counted() {
    let served = Served::new(SimDialect::vllm().refusing("stream_options"));
    let tmp = tempfile::tempdir().unwrap();
    let file = write(
        tmp.path(),
        &experiment(&served.url(), "", SHORT_CHAT, CLOSED_2S),
    );
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("preflight: 2 calls"), "{stderr}");
    let journal = &journals(&out)[0];
    let dialect = journal.header.as_ref().unwrap().dialect.clone().unwrap();
    assert!(!dialect.stream_usage);
    assert_eq!(dialect.preflight_calls, 2);
    assert_eq!(dialect.output_tokens_from, TokenSource::Chunks);
    assert!(
        dialect.settled[0].starts_with("the server refused `stream_options` (HTTP 422"),
        "{:?}",
        dialect.settled
    );
    // Every call went out without it, and was counted by chunks.
    let calls = journal.requests.len() as u64;
    assert!(calls > 10);
    assert_eq!(
        served.calls(),
        calls + 2,
        "the preflight's two calls and the run's"
    );
    for r in &journal.requests {
        assert_eq!(r.error, None, "{r:?}");
        assert_eq!(r.output_tokens_source, TokenSource::Chunks);
    }
    let card = card(&out);
    assert!(
        card.contains("no `stream_options`; output tokens from streamed chunks (approximate); settled by the preflight (2 preflight calls); the server refused `stream_options`"),
        "{card}"
    );
}

#[test]
fn the_length_field_is_settled_on_the_name_the_server_knows() {
    let tmp = tempfile::tempdir().unwrap();
    // A hosted reasoning model: `max_tokens` refused. Chat sends the current
    // name, which it accepts: nothing to settle.
    let reasoning = Served::new(SimDialect::vllm().refusing("max_tokens"));
    let file = write(
        tmp.path(),
        &experiment(&reasoning.url(), "", SHORT_CHAT, CLOSED_2S),
    );
    let out = tmp.path().join("reasoning");
    assert!(run(&file, &out).status.success());
    let dialect = journals(&out)[0].header.clone().unwrap().dialect.unwrap();
    assert_eq!(
        (dialect.length_field.as_str(), dialect.preflight_calls),
        ("max_completion_tokens", 1)
    );

    // A server that knows only `max_tokens` and refuses the other name.
    let older = Served::new(SimDialect::vllm().refusing("max_completion_tokens"));
    let file = write(
        tmp.path(),
        &experiment(&older.url(), "", SHORT_CHAT, CLOSED_2S),
    );
    let out = tmp.path().join("older");
    let output = run(&file, &out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journal = &journals(&out)[0];
    let dialect = journal.header.clone().unwrap().dialect.unwrap();
    assert_eq!(
        (dialect.length_field.as_str(), dialect.preflight_calls),
        ("max_tokens", 2)
    );
    assert!(
        journal
            .requests
            .iter()
            .all(|r| r.is_ok() && r.output_tokens == 8)
    );

    // A server that silently ignores it: the answer runs past the planned
    // length, and the preflight switches names.
    let ignoring = Served::new(SimDialect::vllm().ignoring("max_completion_tokens"));
    let file = write(
        tmp.path(),
        &experiment(&ignoring.url(), "", SHORT_CHAT, CLOSED_2S),
    );
    let out = tmp.path().join("ignoring");
    let output = run(&file, &out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journal = &journals(&out)[0];
    let dialect = journal.header.clone().unwrap().dialect.unwrap();
    assert_eq!(dialect.length_field, "max_tokens");
    assert!(
        dialect.settled[0].starts_with("the server ignored `max_completion_tokens`"),
        "{:?}",
        dialect.settled
    );
    assert!(
        journal.requests.iter().all(|r| r.output_tokens == 8),
        "outputs bounded"
    );
}

#[test]
fn a_model_the_server_does_not_serve_gets_the_listed_names() {
    let served = Served::new(SimDialect::vllm());
    let tmp = tempfile::tempdir().unwrap();
    let file = write(
        tmp.path(),
        &experiment(&served.url(), "model \"sim/tiyn\"", SHORT_CHAT, CLOSED_2S),
    );
    let output = run(&file, &tmp.path().join("out"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not serve model `sim/tiyn`"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `sim/tiny`?"), "{stderr}");
    assert_eq!(served.calls(), 1);
}

#[test]
fn a_quota_is_honoured_in_closed_loop_and_named_on_the_card() {
    // 12 calls a minute: the preflight takes one, the run gets 11 and then
    // a 429 with Retry-After on every call.
    let served =
        Served::new(SimDialect::vllm().with_rate_limit(RateLimit::per_minute(12).unwrap()));
    let tmp = tempfile::tempdir().unwrap();
    let load = "closed {\n    concurrency 2\n    duration \"4s\"\n    warmup \"0s\"\n}";
    let file = write(tmp.path(), &experiment(&served.url(), "", SHORT_CHAT, load));
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() || output.status.code() == Some(4),
        "{stderr}"
    );
    assert!(stderr.contains("rate limited"), "{stderr}");
    let journal = &journals(&out)[0];
    let limited: Vec<&RequestRecord> = journal
        .requests
        .iter()
        .filter(|r| r.error == Some(ErrorClass::RateLimited))
        .collect();
    assert!(!limited.is_empty());
    for r in &limited {
        assert_eq!(r.http_status, Some(429));
        assert!(r.retry_after_ms.is_some_and(|ms| ms >= 1000.0), "{r:?}");
    }
    // Each slot waits out Retry-After (5 s here) before its next call: at
    // most one refusal per slot in a 4 s run, where hammering would send
    // thousands.
    let sent = served.calls();
    assert!(limited.len() <= 2, "{} refusals", limited.len());
    assert!(sent <= 1 + 11 + 2, "{sent} calls reached the server");
    let card = card(&out);
    assert!(
        card.contains("> **Rate limited.** The provider's rate limit, not the replica"),
        "{card}"
    );
    assert!(card.contains("rate-limited 429 ×"), "{card}");
    let results: serde_json::Value =
        serde_json::from_str(&crate::support::results_text(&out)).unwrap();
    assert_eq!(
        results["cards"][0]["closed"][0]["rate_limited_calls"].as_u64(),
        Some(limited.len() as u64)
    );
}

#[test]
fn a_quota_never_delays_an_open_schedule() {
    let served =
        Served::new(SimDialect::vllm().with_rate_limit(RateLimit::per_minute(20).unwrap()));
    let tmp = tempfile::tempdir().unwrap();
    let load =
        "open {\n    arrival constant\n    rates 20\n    duration \"2s\"\n    warmup \"0s\"\n}";
    let file = write(tmp.path(), &experiment(&served.url(), "", SHORT_CHAT, load));
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code().is_some_and(|c| c == 0 || c == 4),
        "{stderr}"
    );
    let journal = &journals(&out)[0];
    let calls = &journal.requests;
    // Every arrival of the 2 s at 20/s went out on time, refused or not.
    assert_eq!(calls.len(), 40, "no arrival held back or dropped");
    let limited = calls
        .iter()
        .filter(|r| r.error == Some(ErrorClass::RateLimited))
        .count();
    assert!(limited >= 15, "{limited} of 40 refused by a 20/min quota");
    let late = calls.iter().filter(|r| r.schedule_lag_ms > 50.0).count();
    assert_eq!(late, 0, "a 429 delays no arrival");
    let card = card(&out);
    assert!(card.contains("> **Rate limited.**"), "{card}");
}

#[test]
fn a_run_whose_first_calls_all_fail_alike_stops_and_the_card_says_why() {
    // Every prompt is longer than tiny's 2,048-token window: the preflight's
    // call is refused for context (not a fault of the body), and so is every
    // call of the run. It stops after 20.
    let served = Served::new(SimDialect::vllm());
    let tmp = tempfile::tempdir().unwrap();
    let load = "closed {\n    concurrency 2\n    duration \"30s\"\n    warmup \"5s\"\n}";
    let file = write(
        tmp.path(),
        &experiment(
            &served.url(),
            "",
            "input-tokens fixed 3000\n    output-tokens fixed 8",
            load,
        ),
    );
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "an invalid run: {stderr}");
    let journal = &journals(&out)[0];
    let stop = journal
        .footer
        .as_ref()
        .unwrap()
        .stopped_early
        .clone()
        .expect("stopped early");
    assert_eq!(stop.calls, 20);
    assert_eq!(stop.class, ErrorClass::ContextLength);
    assert_eq!(stop.http_status, Some(400));
    // The two slots' calls in flight when the 20th ended are all it adds.
    let sent = journal.requests.len();
    assert!((20..=22).contains(&sent), "{sent} calls");
    assert!(served.calls() <= 23);
    let card = card(&out);
    assert!(card.contains("> **Stopped early.**"), "{card}");
    assert!(
        card.contains("its first 20 calls all failed with context-length 400"),
        "{card}"
    );
    assert!(
        card.contains("maximum context length"),
        "the server's words: {card}"
    );
    assert!(
        stderr.contains("most frequent: context-length 400 ×"),
        "the final warning quotes the server: {stderr}"
    );
}

#[test]
fn the_early_stop_holds_in_virtual_time_too() {
    let (tmp, file) = experiment_file(
        "v.kdl",
        r#"
experiment "v" { seed 5 }
target "hosted" { sim tiny }
workload "w" {
    input-tokens fixed 3000
    output-tokens fixed 8
}
closed {
    concurrency 2
    duration "30s"
    warmup "5s"
}
"#,
    );
    let out = tmp.path().join("out");
    let output = capcard()
        .args(["run", "--quiet", "--virtual", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4));
    let journal = &journals(&out)[0];
    let stop = journal
        .footer
        .as_ref()
        .unwrap()
        .stopped_early
        .clone()
        .unwrap();
    assert_eq!((stop.calls, stop.class), (20, ErrorClass::ContextLength));
    assert!(journal.requests.len() <= 22);
    assert!(
        journal
            .requests
            .iter()
            .all(|r| r.error == Some(ErrorClass::ContextLength))
    );
}

#[test]
fn check_probe_prints_what_each_target_accepts_without_measuring() {
    let tgi_like = Served::new(SimDialect::vllm().refusing("stream_options"));
    let strict = Served::new(SimDialect::vllm().strict());
    let (_tmp, file) = experiment_file(
        "two.kdl",
        &format!(
            r#"
experiment "probe" {{ seed 5 }}
target "tgi-like" {{
    endpoint "{}"
    metrics #false
}}
target "strict" {{
    endpoint "{}"
    metrics #false
}}
workload "w" {{
    {SHORT_CHAT}
}}
{CLOSED_2S}
"#,
            tgi_like.url(),
            strict.url()
        ),
    );
    let output = capcard()
        .args(["check", "--probe"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.contains("target tgi-like:"), "{stdout}");
    assert!(stdout.contains("request dialect: `max_completion_tokens`, `ignore_eos` + `min_tokens`, no `stream_options`"), "{stdout}");
    assert!(
        stdout.contains("target strict: cannot be measured as it is"),
        "{stdout}"
    );
    assert!(
        stderr.contains("set `force-length #false` on target `strict`"),
        "{stderr}"
    );
    assert_eq!(tgi_like.calls(), 2);
    assert_eq!(strict.calls(), 1);
}

#[test]
fn check_probe_passes_over_a_virtual_sim_target() {
    let server = Served::new(SimDialect::vllm());
    let (_tmp, file) = experiment_file(
        "twin.kdl",
        &format!(
            r#"
experiment "twin" {{ seed 5 }}
target "real" {{
    endpoint "{}"
    metrics #false
}}
target "twin" {{
    sim tiny {{ virtual #true }}
}}
workload "w" {{
    {SHORT_CHAT}
}}
{CLOSED_2S}
"#,
            server.url()
        ),
    );
    let output = capcard()
        .args(["check", "--probe"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A file that pairs a real server with its simulated twin (as
    // local-vllm.kdl does) probes the server and passes over the twin.
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("target real:"), "{stdout}");
    assert!(
        stdout.contains("target twin: not probed (runs in virtual time"),
        "{stdout}"
    );
}

#[test]
fn http2_targets_share_one_multiplexed_connection() {
    // The simulator also speaks HTTP/2 with prior knowledge (h2c), as
    // `http2 #true` sends it on a plain `http://` endpoint.
    let server = Served::new(SimDialect::vllm());
    let (tmp, file) = experiment_file(
        "h2.kdl",
        &format!(
            r#"
experiment "h2" {{ seed 5 }}
target "h2" {{
    endpoint "{}"
    http2 #true
    metrics #false
}}
workload "w" {{
    {SHORT_CHAT}
}}
closed {{
    concurrency 4
    duration "1s"
    warmup "0s"
}}
"#,
            server.url()
        ),
    );
    let out = tmp.path().join("out");
    let output = run(&file, &out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journal = capcard::exec::read_journal(&out.join("runs/h2--w--c0004.jsonl")).unwrap();
    assert!(journal.requests.len() > 8, "{}", journal.requests.len());
    assert!(journal.requests.iter().all(|r| r.error.is_none()));
    assert!(
        journal.requests.iter().all(|r| r.output_tokens == 8),
        "every call read to its end"
    );
}
