//! Every shipped example earns its place: each file in `experiments/` runs
//! on its own simulated target, in virtual time (the engine's own clock, so
//! the full file takes seconds, not hours), and must give every quantity it
//! declares: CrossP and Cr_closed from a closed sweep, Cr_open for every SLO
//! of an open search, none of them `null`, with fewer than 1% of the calls
//! the figures rest on failing, and no call refused for context length. Its
//! header says what it shows and how long it takes. A new file in
//! `experiments/` without an entry here fails the suite.
//!
//! `local-vllm.kdl` measures a real server; the suite runs its calibrated
//! twin (`vllm-cpu-sim`), and the real one is run by hand against vLLM.

use std::path::{Path, PathBuf};

use crate::support::capcard;
use capcard::analyze::{CapacityReport, Card, RunSummary};

/// Each example and the `--target`s the suite runs of it (empty: all).
const EXAMPLES: &[(&str, &[&str])] = &[
    ("agentic", &[]),
    ("batch", &[]),
    ("chat", &["h100-sim"]),
    ("chat-log", &[]),
    ("dataset", &[]),
    ("gpu-compare", &[]),
    ("harness-compare", &["tiny-cpu"]),
    ("local-vllm", &["vllm-cpu-sim"]),
    ("vllm-settings", &["vllm-cpu-sim"]),
    ("mix", &[]),
    ("quickstart", &[]),
    ("rag", &[]),
    ("trace", &[]),
    ("what-if", &[]),
];

fn experiments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
}

#[test]
fn every_file_in_experiments_is_run_here() {
    let mut files: Vec<String> = std::fs::read_dir(experiments())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".kdl").map(str::to_string)
        })
        .collect();
    files.sort();
    let mut listed: Vec<String> = EXAMPLES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(
        files, listed,
        "add the new example to EXAMPLES (and a test)"
    );
}

/// The leading comment block: what the file shows, and how long it takes.
fn header(name: &str) -> String {
    let text = std::fs::read_to_string(experiments().join(format!("{name}.kdl"))).unwrap();
    text.lines()
        .take_while(|l| l.starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The runs a card's figures rest on: the closed sweep, and the open runs
/// up to its Cr_open (rates beyond it fail by design, often by timeouts).
fn runs_behind_the_figures(card: &Card) -> Vec<&RunSummary> {
    let ceiling = card
        .cr_open
        .iter()
        .filter_map(|c| c.rps)
        .fold(f64::NEG_INFINITY, f64::max);
    card.closed
        .iter()
        .chain(
            card.open
                .iter()
                .filter(|r| r.rate_rps.is_some_and(|rate| rate <= ceiling + 1e-9)),
        )
        .collect()
}

fn check_example(name: &str) {
    let targets = EXAMPLES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("listed");
    let head = header(name);
    assert!(
        head.lines().count() >= 3,
        "{name}.kdl: a header that says what the example shows:\n{head}"
    );
    assert!(
        head.contains("Takes about") && head.contains("--virtual"),
        "{name}.kdl: the header says how long it takes, in real and in virtual time:\n{head}"
    );

    let file = experiments().join(format!("{name}.kdl"));
    let out = capcard().arg("check").arg(&file).output().unwrap();
    assert!(out.status.success(), "{name}: check fails");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("window"),
        "{name}: a context-window warning:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    let mut run = capcard();
    run.args(["run", "--virtual", "--quiet", "--out"])
        .arg(&dir)
        .arg(&file);
    for target in targets {
        run.args(["--target", target]);
    }
    let out = run.output().unwrap();
    assert!(
        out.status.success(),
        "{name}: run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: CapacityReport = crate::support::read_report(&dir);
    let experiment = capcard::config::load(&file).unwrap();

    let cards: Vec<&Card> = report
        .cards
        .iter()
        // A swept target's name selects its settings (`name[...]`).
        .filter(|c| {
            targets.is_empty()
                || targets
                    .iter()
                    .any(|t| c.target == *t || c.target.starts_with(&format!("{t}[")))
        })
        .collect();
    assert!(!cards.is_empty(), "{name}: no card");
    for card in cards {
        let label = format!("{name}: {} × {}", card.target, card.workload);
        let closed_levels = experiment.closed.as_ref().map_or(0, |c| c.levels.len());
        if closed_levels >= 2 {
            assert!(
                card.crossp.is_some(),
                "{label}: CrossP not reached: {:?}",
                card.notes
            );
            assert!(
                card.cr_closed.is_some(),
                "{label}: no Cr_closed: {:?}",
                card.notes
            );
        }
        for cr in &card.cr_open {
            // A setting of a sweep may fail at every rate: below the
            // lowest failure is its answer, and the comparison's.
            let bounded_setting = !card.target_info.setting.is_empty() && cr.range[1].is_some();
            assert!(
                (cr.rps.is_some() && !cr.at_least) || bounded_setting,
                "{label}: Cr_open `{}` not found (rps {:?}, at least {}): {:?}",
                cr.slo,
                cr.rps,
                cr.at_least,
                cr.note
            );
        }
        let behind = runs_behind_the_figures(card);
        let calls: u64 = behind.iter().map(|r| r.requests + r.errors).sum();
        let failed: u64 = behind.iter().map(|r| r.errors).sum();
        assert!(calls > 0, "{label}: no calls");
        assert!(
            (failed as f64) < 0.01 * calls as f64,
            "{label}: {failed} of {calls} calls behind the figures failed"
        );
        let refused: u64 = card
            .closed
            .iter()
            .chain(&card.open)
            .filter_map(|r| r.errors_by_class.get("context-length"))
            .sum();
        assert_eq!(refused, 0, "{label}: calls refused for context length");
    }
}

macro_rules! example_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_example($name);
            }
        )*
    };
}

example_tests! {
    agentic_gives_its_card => "agentic",
    batch_gives_its_cards => "batch",
    chat_gives_its_card => "chat",
    chat_log_gives_its_card => "chat-log",
    dataset_gives_its_card => "dataset",
    gpu_compare_gives_its_cards => "gpu-compare",
    harness_compare_gives_its_cards => "harness-compare",
    local_vllm_twin_gives_its_card => "local-vllm",
    vllm_settings_twin_gives_its_cards => "vllm-settings",
    mix_gives_its_cards => "mix",
    quickstart_gives_its_card => "quickstart",
    rag_gives_its_cards => "rag",
    trace_gives_its_card => "trace",
    what_if_gives_its_cards => "what-if",
}
