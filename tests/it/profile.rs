//! `capcard profile`: logs drawn from known distributions come back as those
//! distributions, as a file `check` accepts, with no prompt text in any
//! output; and capcard's own journals profile back to the experiment that
//! produced them.

use std::path::Path;

use crate::support::capcard;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Uniform};
use serde_json::{Value, json};

type Rng = rand::rngs::Xoshiro256PlusPlus;

fn within(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= tolerance * want.abs()
}

/// `n` words that never occur in capcard's own output (`qx` + a tag).
fn text(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("qx{tag}w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn rfc3339(epoch_s: f64) -> String {
    // 2026-03-01T00:00:00Z + offset, written by hand so the test needs no
    // date crate: only seconds within one day matter here.
    let base = 1_772_323_200.0; // 2026-03-01T00:00:00Z
    let t = epoch_s - base;
    let (h, rem) = ((t / 3600.0).floor(), t % 3600.0);
    let (m, s) = ((rem / 60.0).floor(), rem % 60.0);
    format!("2026-03-01T{:02}:{:02}:{:06.3}Z", h as u32, m as u32, s)
}

fn profile_json(args: &[&str], files: &[&Path]) -> Value {
    let out = capcard()
        .arg("profile")
        .args(files)
        .args(args)
        .arg("--json")
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).expect("profile --json prints JSON")
}

fn assert_no_prompt_text(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_no_prompt_text(&path);
        } else if path.extension().is_none_or(|e| e != "jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains("qx"),
                "prompt text leaked into {}",
                path.display()
            );
        }
    }
}

#[test]
fn a_request_log_comes_back_as_its_distributions_and_a_runnable_experiment() {
    // 3,000 chat requests: Poisson arrivals at 4/s, prompts lognormal
    // (median 600, sigma 0.4) whose first 63 words are one of 4 system
    // prompts, answers gamma (shape 2, scale 100), usage recorded.
    let mut rng = Rng::seed_from_u64(11);
    let gaps: Exp<f64> = Exp::new(4.0).unwrap();
    let prompts: LogNormal<f64> = LogNormal::new(600f64.ln(), 0.4).unwrap();
    let answers: Gamma<f64> = Gamma::new(2.0, 100.0).unwrap();
    let systems: Vec<String> = (0..4).map(|g| text(63, &format!("sys{g}"))).collect();
    let mut t = 1_772_323_200.0 + 3600.0;
    let mut lines = String::new();
    for i in 0..3000 {
        t += gaps.sample(&mut rng);
        let total = prompts.sample(&mut rng).round().max(80.0) as usize;
        let output = answers.sample(&mut rng).round().max(1.0) as u64;
        let record = json!({
            "timestamp": rfc3339(t),
            "request": {"messages": [
                {"role": "system", "content": systems[i % 4]},
                {"role": "user", "content": text(total - 63, &format!("u{i}"))},
            ]},
            "response": {"usage": {"prompt_tokens": total, "completion_tokens": output}},
        });
        lines.push_str(&record.to_string());
        lines.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    std::fs::write(&log, lines).unwrap();
    let out = dir.path().join("out");
    let kdl = out.join("profiled.kdl");
    let report = out.join("report");

    let profile = profile_json(
        &[
            "--out",
            kdl.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
        &[&log],
    );
    assert_eq!(profile["schema"], "capcard/profile/v1");
    assert_eq!(profile["sources"][0]["format"], "request-log");
    let input = &profile["input_tokens"];
    assert_eq!(input["family"], "lognormal", "{input}");
    assert!(
        within(input["params"]["median"].as_f64().unwrap(), 600.0, 0.03),
        "{input}"
    );
    assert!(
        within(input["params"]["sigma"].as_f64().unwrap(), 0.4, 0.05),
        "{input}"
    );
    let output = &profile["output_tokens"];
    assert_eq!(output["family"], "gamma", "{output}");
    assert!(
        within(output["params"]["shape"].as_f64().unwrap(), 2.0, 0.1),
        "{output}"
    );
    assert!(
        within(output["params"]["scale"].as_f64().unwrap(), 100.0, 0.1),
        "{output}"
    );
    let arrival = &profile["arrival"];
    assert!(
        within(arrival["mean_rps"].as_f64().unwrap(), 4.0, 0.06),
        "{arrival}"
    );
    assert!(
        within(arrival["cv"].as_f64().unwrap(), 1.0, 0.1),
        "{arrival}"
    );
    assert_eq!(arrival["process"], "poisson");
    assert!(arrival["peak_rps_10s"].as_f64().unwrap() > arrival["peak_rps_1m"].as_f64().unwrap());
    // Role marker + 63 system words = 4 full 16-word blocks shared.
    let prefix = &profile["prefix"];
    assert_eq!(prefix["shared_tokens"], 64, "{prefix}");
    assert_eq!(prefix["groups"], 4, "{prefix}");
    assert_eq!(prefix["sharing_fraction"], 1.0);
    assert!(profile["sessions"].is_null());

    let experiment = std::fs::read_to_string(&kdl).unwrap();
    for line in [
        "input-tokens lognormal",
        "output-tokens gamma",
        "shared-prefix tokens=64 groups=4",
        "arrival poisson",
        "n=3,000",
    ] {
        assert!(
            experiment.contains(line),
            "missing `{line}` in:\n{experiment}"
        );
    }
    capcard().arg("check").arg(&kdl).assert().success();

    // The report links charts that exist.
    let markdown = std::fs::read_to_string(report.join("profile.md")).unwrap();
    let svgs: Vec<&str> = markdown
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .filter(|s| s.ends_with(".svg"))
        .collect();
    assert!(svgs.len() >= 3, "histograms and arrivals: {svgs:?}");
    for svg in svgs {
        let body = std::fs::read_to_string(report.join(svg)).unwrap();
        assert!(body.starts_with("<svg"), "{svg}");
    }
    assert_no_prompt_text(&out);
}

#[test]
fn sessions_become_a_conversation_with_turns_and_think_time() {
    // 800 conversations of 1-6 turns; each new user message lognormal
    // (median 200), 100-token answers taking 2 s, then 4 s of thought on
    // average; prompts re-send the history, as chat clients do.
    let mut rng = Rng::seed_from_u64(5);
    let starts: Exp<f64> = Exp::new(0.5).unwrap();
    let messages: LogNormal<f64> = LogNormal::new(200f64.ln(), 0.5).unwrap();
    let think: Exp<f64> = Exp::new(0.25).unwrap();
    let turns = Uniform::new_inclusive(1u32, 6).unwrap();
    let mut records: Vec<(f64, Value)> = Vec::new();
    let mut start = 0.0;
    let mut total_turns = 0;
    for session in 0..800 {
        start += starts.sample(&mut rng);
        let mut t = start;
        let mut history = 0u64;
        let n = turns.sample(&mut rng);
        total_turns += n;
        for _ in 0..n {
            let message = messages.sample(&mut rng).round().max(1.0) as u64;
            let prompt = history + message;
            records.push((
                t,
                json!({"time": t, "conversation_id": format!("c{session}"),
                       "prompt_tokens": prompt, "completion_tokens": 100, "latency_ms": 2000}),
            ));
            history = prompt + 100;
            t += 2.0 + think.sample(&mut rng);
        }
    }
    // A log is in time order, sessions interleaved.
    records.sort_by(|a, b| a.0.total_cmp(&b.0));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("chats.jsonl");
    let lines: Vec<String> = records.iter().map(|(_, r)| r.to_string()).collect();
    std::fs::write(&log, lines.join("\n")).unwrap();

    let profile = profile_json(&[], &[&log]);
    let sessions = &profile["sessions"];
    assert_eq!(sessions["count"], 800);
    assert!(sessions["think_time_excludes_answer"].as_bool().unwrap());
    let think = &sessions["think_time"];
    assert!(within(think["mean"].as_f64().unwrap(), 4.0, 0.1), "{think}");
    let turns = &sessions["turns"];
    let mean_turns = f64::from(total_turns) / 800.0;
    assert!(
        within(turns["mean"].as_f64().unwrap(), mean_turns, 1e-9),
        "{turns}"
    );
    // New messages, not the growing prompts, are the input lengths.
    let input = &profile["input_tokens"];
    assert_eq!(input["family"], "lognormal", "{input}");
    assert!(
        within(input["params"]["median"].as_f64().unwrap(), 200.0, 0.05),
        "{input}"
    );
    assert_eq!(profile["arrival"]["unit"], "conversations");
    assert!(within(
        profile["arrival"]["mean_rps"].as_f64().unwrap(),
        0.5,
        0.1
    ));

    let kdl = dir.path().join("chat.kdl");
    capcard()
        .args(["profile", "--out"])
        .arg(&kdl)
        .arg(&log)
        .assert()
        .success();
    let experiment = std::fs::read_to_string(&kdl).unwrap();
    assert!(experiment.contains("conversation {"), "{experiment}");
    assert!(experiment.contains("think-time "), "{experiment}");
    capcard().arg("check").arg(&kdl).assert().success();
}

#[test]
fn capcard_journals_profile_back_to_the_experiment_that_made_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.kdl");
    std::fs::write(
        &file,
        r#"experiment "round-trip" { seed 9; }
target "tiny" { sim tiny; }
workload "w" {
    input-tokens lognormal median=128 sigma=0.5 min=8 max=2048
    output-tokens fixed 16
}
slo "s" { ttft p50="1s"; }
open {
    arrival poisson
    rates 30
    duration "12s"
    warmup "0s"
}
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    capcard()
        .args(["run", "--quiet"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let journals: Vec<std::path::PathBuf> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(journals.len(), 1, "{journals:?}");
    let profile = profile_json(&[], &[&journals[0]]);
    assert_eq!(profile["sources"][0]["format"], "capcard-journal");
    let n = profile["requests"].as_f64().unwrap();
    assert!(n > 250.0, "about 360 requests, got {n}");
    let input = &profile["input_tokens"];
    assert_eq!(input["family"], "lognormal", "{input}");
    assert!(
        within(input["params"]["median"].as_f64().unwrap(), 128.0, 0.12),
        "{input}"
    );
    assert!(
        within(input["params"]["sigma"].as_f64().unwrap(), 0.5, 0.15),
        "{input}"
    );
    assert!(within(
        profile["arrival"]["mean_rps"].as_f64().unwrap(),
        30.0,
        0.15
    ));
    assert_eq!(profile["arrival"]["process"], "poisson");
    assert!(profile["sessions"].is_null(), "one call per task");
}

#[test]
fn an_unreadable_log_is_a_diagnostic_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bad.jsonl");
    std::fs::write(&log, "{\"time\": 1, \"prompt_tokens\": 5}\n{\"time\": 2}\n").unwrap();
    let out = capcard().arg("profile").arg(&log).assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("capcard profile reads"), "{stderr}");
    // A missing file names itself once, with the system's reason.
    let missing = dir.path().join("missing.jsonl");
    let out = capcard().arg("profile").arg(&missing).assert().code(1);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert_eq!(stderr.matches("missing.jsonl").count(), 1, "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
}

#[test]
fn the_shipped_chat_log_example_is_exactly_the_profile_of_its_log() {
    // experiments/chat-log.kdl is documented as this command's output;
    // regenerate it: `capcard profile experiments/data/chat-log.jsonl
    // --name chat-log --out experiments/chat-log.kdl`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = capcard()
        .current_dir(root)
        .args([
            "profile",
            "experiments/data/chat-log.jsonl",
            "--name",
            "chat-log",
        ])
        .assert()
        .success();
    let shipped = std::fs::read_to_string(root.join("experiments/chat-log.kdl")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.get_output().stdout), shipped);
    // Bursty sessions of several turns on three system prompts, as the
    // generator (experiments/data/make-chat-log.py) made them.
    for line in [
        "arrival gamma cv=",
        "shared-prefix tokens=384 groups=3",
        "conversation {",
        "think-time lognormal",
    ] {
        assert!(shipped.contains(line), "missing `{line}`");
    }
}

/// `capcard profile LOG --json`, with its stderr.
fn profile_json_and_stderr(log: &Path, args: &[&str]) -> (Value, String) {
    let out = capcard()
        .arg("profile")
        .arg(log)
        .args(args)
        .arg("--json")
        .assert()
        .success();
    let output = out.get_output();
    (
        serde_json::from_slice(&output.stdout).expect("profile --json prints JSON"),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

#[test]
fn a_relative_millisecond_clock_is_read_as_milliseconds_and_says_so() {
    // The reported log: 5,000 requests at 10 req/s, gamma gaps of CV 2
    // (shape 1/4, mean 0.1 s), a relative `timestamp` in whole ms. Read as
    // seconds it came out at 0.0102 req/s with nothing saying why.
    let mut rng = Rng::seed_from_u64(2);
    let gaps: Gamma<f64> = Gamma::new(0.25, 0.4).unwrap();
    let mut t_s = 0.0;
    let mut lines = String::new();
    for i in 0..5000u32 {
        t_s += gaps.sample(&mut rng);
        let record = json!({
            "timestamp": (t_s * 1000.0).round() as u64,
            "input_tokens": 200 + i % 97,
            "output_tokens": 20 + i % 13,
        });
        lines.push_str(&record.to_string());
        lines.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("relative-ms.jsonl");
    std::fs::write(&log, lines).unwrap();
    let report = dir.path().join("report");

    let (profile, stderr) = profile_json_and_stderr(&log, &["--report", report.to_str().unwrap()]);
    let arrival = &profile["arrival"];
    assert!(
        within(arrival["mean_rps"].as_f64().unwrap(), 10.0, 0.1),
        "{arrival}"
    );
    assert!(
        within(arrival["cv"].as_f64().unwrap(), 2.0, 0.2),
        "{arrival}"
    );
    let time = &profile["sources"][0]["times"][0];
    assert_eq!(time["field"], "timestamp", "{time}");
    assert_eq!(time["unit"], "ms", "{time}");
    assert_eq!(time["rule"], "relative", "{time}");
    let readings = time["readings"].as_array().unwrap();
    assert_eq!(readings.len(), 2, "{time}");
    assert!(readings.iter().all(|r| r["plausible"] == true), "{time}");
    // Named on screen, with the rule and the way out.
    assert!(
        stderr.contains("times: ") && stderr.contains("`timestamp` in ms (relative whole numbers"),
        "{stderr}"
    );
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: "))
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(warning.contains("--time-unit s"), "{warning}");
    assert!(
        profile["warnings"][0]
            .as_str()
            .unwrap()
            .contains("--time-unit s"),
        "{profile}"
    );
    // And in the experiment and the report.
    let out = capcard().arg("profile").arg(&log).assert().success();
    let experiment = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        experiment.contains("// Times in ") && experiment.contains("`timestamp` in ms"),
        "{experiment}"
    );
    assert!(
        experiment.contains("// Warning: ") && experiment.contains("--time-unit s"),
        "{experiment}"
    );
    let markdown = std::fs::read_to_string(report.join("profile.md")).unwrap();
    assert!(
        markdown.contains("times: `timestamp` in ms (relative whole numbers"),
        "{markdown}"
    );
    assert!(
        markdown.contains("**Warning**") && markdown.contains("--time-unit s"),
        "{markdown}"
    );

    // Forced to seconds: no judgement, the rate a thousand times lower, and
    // the unit says where it came from.
    let (profile, stderr) = profile_json_and_stderr(&log, &["--time-unit", "s"]);
    let rate = profile["arrival"]["mean_rps"].as_f64().unwrap();
    assert!(within(rate, 0.01, 0.1), "{rate}");
    let time = &profile["sources"][0]["times"][0];
    assert_eq!(time["unit"], "s", "{time}");
    assert_eq!(time["rule"], "flag", "{time}");
    assert!(time["readings"].is_null(), "{time}");
    assert!(
        stderr.contains("`timestamp` in s (as given by --time-unit)"),
        "{stderr}"
    );
    assert!(!stderr.contains("warning:"), "{stderr}");
}

#[test]
fn every_form_of_time_is_read_in_its_unit_by_a_stated_rule() {
    // 2,000 requests at 1 req/s (Poisson), written in each form.
    let mut rng = Rng::seed_from_u64(3);
    let gaps: Exp<f64> = Exp::new(1.0).unwrap();
    let times: Vec<f64> = (0..2000)
        .scan(0.0, |t, _| {
            *t += gaps.sample(&mut rng);
            Some(*t)
        })
        .collect();
    let ms = |t: f64| (t * 1000.0).round() as u64;
    type Form = (
        &'static str,
        fn(f64, u64) -> Value,
        f64,
        &'static str,
        &'static str,
        bool,
    );
    // (name, record of (seconds, whole ms), rate in req/s, unit, rule,
    // warned)
    let forms: [Form; 7] = [
        (
            "epoch-s",
            |t, _| json!({"created": 1_772_323_200.0 + t, "input_tokens": 50}),
            1.0,
            "s",
            "epoch-s",
            false,
        ),
        (
            "epoch-ms",
            |_, ms| json!({"timestamp": 1_772_323_200_000u64 + ms, "input_tokens": 50}),
            1.0,
            "ms",
            "epoch-ms",
            false,
        ),
        (
            "key-ms",
            |_, ms| json!({"timestamp_ms": ms, "input_tokens": 50, "latency_ms": 900}),
            1.0,
            "ms",
            "key",
            false,
        ),
        (
            "mooncake",
            |_, ms| json!({"timestamp": ms, "input_length": 50, "output_length": 5, "hash_ids": [1]}),
            1.0,
            "ms",
            "format",
            false,
        ),
        (
            // `{"timestamp": 500, …}`: whole numbers, a millisecond clock.
            "relative-ms",
            |_, ms| json!({"timestamp": ms, "input_tokens": 50, "output_tokens": 5}),
            1.0,
            "ms",
            "relative",
            true,
        ),
        (
            // Seconds with fractions; as ms it would be 2 s at 1,000 req/s,
            // plausible too: ambiguous, so seconds, and warned.
            "relative-s-ambiguous",
            |t, _| json!({"time": t, "input_tokens": 50}),
            1.0,
            "s",
            "relative",
            true,
        ),
        (
            // A tenth of a second apart: as ms the span is 0.2 s, too short.
            "relative-s",
            |t, _| json!({"time": t / 10.0, "input_tokens": 50}),
            10.0,
            "s",
            "relative",
            true,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, record, rate, unit, rule, warned) in forms {
        let lines: String = times
            .iter()
            .map(|&t| format!("{}\n", record(t, ms(t))))
            .collect();
        let log = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&log, lines).unwrap();
        let (profile, stderr) = profile_json_and_stderr(&log, &[]);
        let got = profile["arrival"]["mean_rps"].as_f64().unwrap();
        assert!(within(got, rate, 0.1), "{name}: {got} req/s");
        let time = &profile["sources"][0]["times"][0];
        assert_eq!(time["unit"], unit, "{name}: {time}");
        assert_eq!(time["rule"], rule, "{name}: {time}");
        let why = time["why"].as_str().unwrap();
        assert!(
            stderr.contains(&format!("in {unit} ({why}")),
            "{name}: {stderr}"
        );
        assert_eq!(stderr.contains("warning: "), warned, "{name}: {stderr}");
        if warned {
            let other = if unit == "s" { "ms" } else { "s" };
            assert!(
                stderr.contains(&format!("--time-unit {other}")),
                "{name}: {stderr}"
            );
        }
    }
    let key_ms = dir.path().join("key-ms.jsonl");
    let (profile, _) = profile_json_and_stderr(&key_ms, &[]);
    let latency = &profile["sources"][0]["times"][1];
    assert_eq!(latency["field"], "latency_ms", "{latency}");
    assert_eq!(latency["role"], "latency", "{latency}");
    assert_eq!(latency["unit"], "ms", "{latency}");
}

/// A Bailian agent trace: `sessions` tasks of 3-6 steps, each step 1-2
/// calls waiting on the previous step's first call (siblings share a
/// parent), 2-6 s after it started; prompts grow 300-700 tokens a step
/// and re-send their parent's blocks; sessions arrive as a Poisson
/// process at 0.2/s.
fn bailian_trace(sessions: usize, seed: u64) -> String {
    use rand::RngExt;
    let mut rng = Rng::seed_from_u64(seed);
    let gaps: Exp<f64> = Exp::new(0.2).unwrap();
    let mut lines = String::new();
    let mut t = 1000.0;
    let mut chat_id = 0i64;
    for k in 0..sessions {
        t += gaps.sample(&mut rng);
        let steps: u32 = rng.random_range(3..=6);
        let mut context: u64 = 2000 + rng.random_range(0..1000u64);
        let (mut parent, mut start) = (-1i64, t);
        for step in 0..steps {
            let fan: u32 = if step == 0 {
                1
            } else {
                rng.random_range(1..=2)
            };
            let mut first = -1;
            for _ in 0..fan {
                chat_id += 1;
                if first < 0 {
                    first = chat_id;
                }
                // System prompt blocks 1..=64 shared; the rest the session's own.
                let blocks: Vec<u64> = (0..context.div_ceil(16))
                    .map(|j| {
                        if j < 64 {
                            j + 1
                        } else {
                            (k as u64 + 1) * 1_000_000 + j
                        }
                    })
                    .collect();
                let record = json!({
                    "chat_id": chat_id,
                    "parent_chat_id": parent,
                    "timestamp": start,
                    "input_length": context,
                    "output_length": rng.random_range(50..300u32),
                    "type": "text",
                    "turn": step + 1,
                    "hash_ids": blocks,
                });
                lines.push_str(&record.to_string());
                lines.push('\n');
            }
            parent = first;
            start += rng.random_range(2.0..6.0);
            context += rng.random_range(300..=700u64);
        }
    }
    lines
}

#[test]
fn profile_agent_trace_is_an_agent_workload_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bailian.jsonl");
    std::fs::write(&trace, bailian_trace(200, 36)).unwrap();
    let kdl = dir.path().join("agent.kdl");
    let report = dir.path().join("report");
    let (json, stderr) = profile_json_and_stderr(
        &trace,
        &[
            "--out",
            kdl.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    );
    assert!(
        stderr.contains("agent trace: ") && stderr.contains("Alibaba Bailian trace"),
        "{stderr}"
    );
    assert_eq!(json["schema"], "capcard/profile/v1");
    assert_eq!(json["sources"][0]["format"], "bailian");
    let agent = &json["agent"];
    assert_eq!(agent["format"], "bailian");
    assert_eq!(agent["sessions"], 200);
    assert_eq!(agent["block_origin"], "recorded");
    let steps = agent["steps"]["mean"].as_f64().unwrap();
    assert!(within(steps, 4.5, 0.1), "steps {steps}");
    // The first step is one call, later ones 1-2: 1 + 3.5 x 1.5 calls over 4.5 steps.
    let fan = agent["fan_out"]["mean"].as_f64().unwrap();
    assert!(within(fan, (1.0 + 3.5 * 1.5) / 4.5, 0.1), "fan-out {fan}");
    // No ends recorded: the gap runs from the parent's start (2-6 s).
    let tool = agent["tool_time"]["fit"]["p50"].as_f64().unwrap();
    assert!(within(tool, 4.0, 0.1), "tool time {tool}");
    assert!(agent["tool_time"]["gap_includes_answer"].as_u64().unwrap() > 0);
    let growth = agent["context_growth"]["fit"]["mean"].as_f64().unwrap();
    assert!(within(growth, 500.0, 0.1), "growth {growth}");
    assert_eq!(agent["task_e2e"]["span"], "first-start-to-last-start");
    assert!(agent["reuse_potential"].as_f64().unwrap() > 0.5);
    assert!(agent["reasoning_tokens"].is_null());

    let text = std::fs::read_to_string(&kdl).unwrap();
    for needle in [
        "agent {",
        "steps ",
        "fan-out ",
        "tool-time ",
        "context-growth ",
        "task-e2e p90=",
        "shared-prefix tokens=1024",
        "// sessions \"",
    ] {
        assert!(text.contains(needle), "missing `{needle}`:\n{text}");
    }
    assert!(!text.contains("reasoning-tokens"), "{text}");
    capcard().arg("check").arg(&kdl).assert().success();
    let markdown = std::fs::read_to_string(report.join("profile.md")).unwrap();
    assert!(markdown.contains("## Agent loop"), "{markdown}");
    assert!(markdown.contains("Fan-out (calls per step)"));
}
