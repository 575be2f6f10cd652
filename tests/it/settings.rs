//! Serving settings (issue 29): `vary` on a sim target in virtual time
//! (tune against the brute-force grid), and engines launched per setting
//! (`capcard sim` itself, started and stopped by `launch`): startup times,
//! a server that fails to start or dies mid-card, Ctrl-C, a taken port.

use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use crate::support::{binary, capcard, experiment_file, free_port, read_report, run_ok};
use capcard::analyze::settings::ServerStatus;

/// A 7-setting grid on `sim tiny`, in virtual time; `tune` as given.
fn sim_grid(tune: &str) -> String {
    format!(
        r#"
experiment "settings" {{ seed 7; }}
target "tiny" {{
    sim tiny {{ virtual #true; }}
    vary "max-num-seqs" 1 2 4 8 16 32 64
    {tune}
}}
workload "chat" {{
    input-tokens fixed 128
    output-tokens fixed 32
}}
slo "interactive" {{ ttft p90="300ms"; }}
closed {{ concurrency 1 4 16; duration "2s"; }}
open {{ search min=1 max=200 precision="10%"; duration "4s"; budget "20s"; }}
"#
    )
}

fn runs(report: &capcard::analyze::CapacityReport) -> usize {
    report
        .cards
        .iter()
        .map(|c| c.closed.len() + c.open.len())
        .sum()
}

#[test]
fn tune_names_the_grids_best_setting_with_fewer_runs() {
    let (tmp, grid_file) = experiment_file("grid.kdl", &sim_grid(""));
    let tune_file = tmp.path().join("tune.kdl");
    std::fs::write(&tune_file, sim_grid(r#"tune slo="interactive""#)).unwrap();
    let (grid_dir, tune_dir) = (tmp.path().join("grid"), tmp.path().join("tune"));
    run_ok(&grid_file, &grid_dir, &["--nonce", "3"]);
    run_ok(&tune_file, &tune_dir, &["--nonce", "3"]);
    let (grid, tuned) = (read_report(&grid_dir), read_report(&tune_dir));

    // Brute force: the setting of the highest Cr_open over the whole grid.
    let cr_open = |c: &capcard::analyze::Card| c.cr_open.first().and_then(|o| o.rps);
    let top = grid
        .cards
        .iter()
        .filter_map(cr_open)
        .fold(f64::MIN, f64::max);
    let grid_best = &grid.settings[0].best[0];
    assert_eq!(grid_best.rps, top);
    let tuned_best = &tuned.settings[0].best[0];
    assert_eq!(tuned_best.rps, top, "tune finds the grid's Cr_open");
    assert_eq!(tuned_best.target, grid_best.target);
    assert!(
        runs(&tuned) < runs(&grid),
        "{} runs tuned against {} for the grid",
        runs(&tuned),
        runs(&grid)
    );
    // What it skipped or pruned says why, on the card and in the table.
    let rows = &tuned.settings[0].rows;
    assert_eq!(rows.len(), 7);
    assert!(
        rows.iter()
            .any(|r| r.status == "pruned" || r.status == "not measured")
    );
    for row in rows.iter().filter(|r| r.status != "measured") {
        assert!(row.note.is_some(), "{} gives no reason", row.target);
    }
    let summary = std::fs::read_to_string(tune_dir.join("summary.md")).unwrap();
    assert!(summary.contains("## Serving settings"), "{summary}");
    assert!(summary.contains(&format!(
        "**Best for `interactive`: `{}`**",
        tuned_best.target
    )));
}

/// An endpoint target whose engine is `capcard sim` on `port`, launched
/// per setting through `launch_prefix` (e.g. a `timeout` that kills it).
fn launched(port: u16, launch_prefix: &str, vary: &str, open: bool) -> String {
    let capcard = binary();
    let open = if open {
        r#"open { search min=5 max=80 precision="30%"; duration "2s"; warmup "200ms"; budget "11s"; }"#
    } else {
        ""
    };
    format!(
        r#"
experiment "launched" {{ seed 3; }}
target "engine" {{
    endpoint "http://127.0.0.1:{port}/v1"
    timeout "5s"
    launch {launch_prefix} "{capcard}" "sim" "--preset" "tiny" "--listen" "127.0.0.1:{port}" "--max-num-seqs" "{{max-num-seqs}}" {{
        ready "http://127.0.0.1:{port}/v1/models" timeout="30s"
        grace "5s"
    }}
    {vary}
}}
workload "chat" {{
    input-tokens fixed 64
    output-tokens fixed 16
}}
slo "interactive" {{ ttft p50="400ms"; }}
closed {{ concurrency 1 8; duration "1500ms"; warmup "200ms"; }}
{open}
"#,
        capcard = capcard.display()
    )
}

/// No process whose command line names this port (a launched engine left
/// behind would).
fn nothing_runs_on(port: u16) -> bool {
    let needle = format!("127.0.0.1:{port}");
    std::fs::read_dir("/proc").unwrap().flatten().all(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        !(cmdline.contains(&needle) && cmdline.contains(" sim "))
    })
}

#[test]
fn each_setting_launches_its_engine_and_records_its_startup() {
    let port = free_port();
    let text = launched(port, "", r#"vary "max-num-seqs" 4 16 64"#, true);
    let (tmp, file) = experiment_file("launched.kdl", &text);
    let out = tmp.path().join("out");
    let log = run_ok(&file, &out, &[]);
    assert!(log.contains("launching"), "{log}");
    let report = read_report(&out);
    assert_eq!(report.cards.len(), 3);
    for card in &report.cards {
        let server = card.target_info.server.as_ref().expect("a server record");
        assert_eq!(server.status, ServerStatus::Stopped, "{}", card.target);
        let (ready, startup) = (server.ready_s.unwrap(), server.startup_s.unwrap());
        assert!(0.0 < ready && ready <= startup, "{ready} then {startup}");
        assert!(out.join(&server.log).is_file(), "{}", server.log);
        assert!(!card.closed.is_empty() && card.cr_open[0].rps.is_some());
    }
    assert_eq!(
        report.cards[1].target_info.setting,
        vec![("max-num-seqs".to_string(), "16".to_string())]
    );
    let settings = &report.settings[0];
    assert_eq!(settings.rows.len(), 3);
    assert!(settings.rows.iter().all(|r| r.startup_s.is_some()));
    assert!(settings.best[0].target.starts_with("engine[max-num-seqs="));
    let card = std::fs::read_to_string(out.join("engine_max-num-seqs_16_--chat.md")).unwrap();
    assert!(card.contains("| Engine | launched by capcard"), "{card}");
    assert!(card.contains("(the cold start)"), "{card}");
    assert!(nothing_runs_on(port), "every engine was stopped");
}

#[test]
fn a_server_that_fails_or_dies_is_marked_and_the_sweep_goes_on() {
    let port = free_port();
    // Setting 0 dies (SIGKILL) 2.5 s in, mid-card; setting 1 never starts
    // (an unknown flag value); setting 2 is measured.
    let text = launched(
        port,
        r#""timeout" "-s" "KILL" "{life}""#,
        "settings {\n        setting life=2.5 max-num-seqs=8\n        setting life=60 max-num-seqs=0\n        setting life=60 max-num-seqs=16\n    }",
        false,
    );
    let (tmp, file) = experiment_file("dies.kdl", &text);
    let out = tmp.path().join("out");
    let run = crate::support::run(&file, &out, &[]);
    let log = String::from_utf8_lossy(&run.stderr);
    // Exit 4 (a run invalid) when the death fell early in a run: its calls
    // are refused at once, faster than the runner hears of the death, and
    // most of the run fails. That run must be the dying engine's.
    match run.status.code() {
        Some(0) => {}
        Some(4) => {
            let invalid = log
                .lines()
                .find_map(|line| line.split_once("run(s) invalid"))
                .and_then(|(_, rest)| rest.split_once("): "))
                .map(|(_, ids)| ids.split(';').next().unwrap_or_default().to_string())
                .unwrap_or_default();
            assert!(
                !invalid.is_empty()
                    && invalid
                        .split(", ")
                        .all(|id| id.starts_with("engine[life=2.5,max-num-seqs=8]--chat")),
                "{log}"
            );
        }
        other => panic!("capcard run exited {other:?}:\n{log}"),
    }
    let report = read_report(&out);
    let status = |i: usize| report.cards[i].target_info.server.as_ref().unwrap().status;
    assert_eq!(
        (status(0), status(1), status(2)),
        (
            ServerStatus::Died,
            ServerStatus::FailedToStart,
            ServerStatus::Stopped
        )
    );
    let failed = report.cards[1].target_info.server.as_ref().unwrap();
    assert!(
        failed
            .log_tail
            .as_deref()
            .unwrap_or_default()
            .contains("max-num-seqs"),
        "the server's own words: {failed:?}"
    );
    let rows = &report.settings[0].rows;
    assert_eq!(rows[0].status, "died");
    assert_eq!(rows[1].status, "failed to start");
    assert_eq!(rows[2].status, "measured");
    let card =
        std::fs::read_to_string(out.join("engine_life_2.5_max-num-seqs_8_--chat.md")).unwrap();
    assert!(card.contains("**The engine died mid-card.**"), "{card}");
    assert!(nothing_runs_on(port));
}

#[test]
fn ctrl_c_stops_the_launched_engine_too() {
    let port = free_port();
    let text = launched(port, "", r#"vary "max-num-seqs" 4 16"#, true);
    let (tmp, file) = experiment_file("interrupt.kdl", &text);
    let out = tmp.path().join("out");
    let mut child = Process::new(binary())
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Interrupt once the first engine is up and measured on.
    let record = out.join("servers/engine[max-num-seqs=4].json");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&record).is_ok_and(|t| t.contains("startup_s")) {
        assert!(Instant::now() < deadline, "the engine never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling a child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(2),
        "interrupted, keeping what was measured"
    );
    assert!(nothing_runs_on(port), "no engine is left running");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("\"interrupted\""), "{text}");
    assert!(!out.join("servers/engine[max-num-seqs=16].json").exists());
}

#[test]
fn a_port_that_already_answers_is_someone_elses_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let text = launched(port, "", r#"vary "max-num-seqs" 4"#, false);
    let (tmp, file) = experiment_file("taken.kdl", &text);
    let output = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(tmp.path().join("out"))
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already answers"), "{stderr}");
    drop(listener);
}

#[test]
fn settings_mistakes_point_at_the_line() {
    let cases: [(&str, &str); 6] = [
        (
            r#"target "e" { endpoint "http://127.0.0.1:9/v1"; launch "vllm" "--n" "{max-num-seq}"; vary "max-num-seqs" 4 8; }"#,
            "did you mean `{max-num-seqs}`?",
        ),
        (
            r#"target "e" { endpoint "http://127.0.0.1:9/v1"; launch "vllm"; vary "max-num-seqs" 4 8; }"#,
            "`max-num-seqs` is varied but `launch` has no `{max-num-seqs}`",
        ),
        (
            r#"target "e" { endpoint "http://127.0.0.1:9/v1"; vary "max-num-seqs" 4 8; }"#,
            "capcard does not start its engine",
        ),
        (
            r#"target "s" { sim tiny { max-num-seqs 8; }; vary "max-num-seqs" 4 16; }"#,
            "is set in the `sim` block and varied",
        ),
        (
            r#"target "s" { sim tiny; vary "kv-cache" 4 16; }"#,
            "did you mean `kv-cache-tokens`?",
        ),
        (
            r#"target "e" { endpoint "http://127.0.0.1:9/v1"; launch "vllm" "{model}"; vary "model" "/models/a"; }"#,
            "cannot name a setting",
        ),
    ];
    for (target, expected) in cases {
        let text = format!(
            "{target}\nworkload \"w\" {{ input-tokens fixed 8; output-tokens fixed 8; }}\nclosed {{ concurrency 1; duration \"1s\"; }}\n"
        );
        let (_tmp, file) = experiment_file("bad.kdl", &text);
        let output = capcard().arg("check").arg(&file).output().unwrap();
        // miette wraps lines: compare words.
        let stderr = String::from_utf8_lossy(&output.stderr)
            .replace('│', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(output.status.code(), Some(1), "{target}: {stderr}");
        assert!(stderr.contains(expected), "{target}: {stderr}");
    }
}
