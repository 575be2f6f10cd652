//! The CLI as a user meets it: exit codes and what is printed.

use crate::support::{SimChild, binary, capcard, free_port};
use predicates::prelude::*;

#[test]
fn check_accepts_every_example_experiment() {
    let mut files: Vec<_> = std::fs::read_dir("experiments")
        .expect("experiments/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kdl"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the example experiments, found {files:?}"
    );
    capcard()
        .arg("check")
        .args(&files)
        .assert()
        .success()
        .stdout(predicate::str::contains("quickstart.kdl").and(predicate::str::contains("ok")));
}

#[test]
fn check_rejects_a_bad_file_with_exit_1_and_a_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.kdl");
    std::fs::write(
        &path,
        "target \"t\" { sim tiny }\nworkload \"w\" { input-tokens fixed 10; output-tokens fixed 10 }\nclosed { concurency 1 2 4; duration \"5s\" }\n",
    )
    .unwrap();
    capcard().arg("check").arg(&path).assert().code(1).stderr(
        predicate::str::contains("concurency").and(predicate::str::contains("concurrency")),
    );
}

#[test]
fn usage_errors_exit_1() {
    capcard().arg("frobnicate").assert().code(1);
    capcard().args(["run"]).assert().code(1);
}

#[test]
fn plan_prints_a_table_and_json() {
    capcard()
        .args(["plan", "experiments/quickstart.kdl"])
        .assert()
        .success()
        .stdout(predicate::str::contains("closed").and(predicate::str::contains("interactive")));
    let out = capcard()
        .args(["plan", "experiments/quickstart.kdl", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let plan: capcard::plan::Plan = serde_json::from_slice(&out).expect("plan JSON parses back");
    assert!(!plan.cards.is_empty());
    // What to expect and the most it can take, per card and in total.
    assert!(plan.expected_wall_time_s > 0.0);
    let bound = plan.bound_wall_time_s.expect("plan --json gives a bound");
    assert!(bound >= plan.expected_wall_time_s, "{bound}");
    for card in &plan.cards {
        let card_bound = card.bound_wall_time_s.expect("every card has a bound");
        assert!(card.expected_wall_time_s > 0.0 && card_bound >= card.expected_wall_time_s);
    }
    let assert = capcard()
        .args(["plan", "experiments/quickstart.kdl"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(
        stdout.contains("tiny × chat-small  (est. ") && stdout.contains(", at most "),
        "{stdout}"
    );
    assert!(
        stdout.contains("at most = each search's budget"),
        "{stdout}"
    );
}

#[test]
fn plan_counts_virtual_time_cards_apart_from_the_wall_time() {
    let assert = capcard()
        .args(["plan", "experiments/what-if.kdl"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(
        stdout.contains("4 cards in virtual time (`virtual #true`)"),
        "{stdout}"
    );
    // Every card is virtual: no real-time estimate to give.
    assert!(!stdout.contains("estimated wall time"), "{stdout}");
    assert!(
        stdout.contains(", at most ") && stdout.contains(" of simulated time"),
        "{stdout}"
    );
    let assert = capcard()
        .args(["plan", "experiments/quickstart.kdl"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(!stdout.contains("virtual time"), "{stdout}");
    assert!(stdout.contains("estimated wall time"), "{stdout}");
}

#[test]
fn sim_list_names_every_preset() {
    let assert = capcard().args(["sim", "--list"]).assert().success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    for name in capcard::sim::presets::names() {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }
}

#[test]
fn run_against_an_unreachable_endpoint_exits_2_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = dir.path().join("x.kdl");
    std::fs::write(
        &path,
        format!(
            "target \"down\" {{ endpoint \"http://127.0.0.1:{port}/v1\"; timeout \"2s\" }}\n\
             workload \"w\" {{ input-tokens fixed 10; output-tokens fixed 10 }}\n\
             closed {{ concurrency 1; duration \"1s\" }}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("res");
    capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&path)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not reachable"));
    assert!(
        !out.exists(),
        "a run that never started leaves no folder behind"
    );
}

#[test]
fn diff_exit_codes_gate_regressions() {
    let (a, b) = ("tests/data/diff-a", "tests/data/diff-b");
    capcard()
        .args(["diff", a, b])
        .assert()
        .success()
        .stdout(predicate::str::contains("Cr_open"));
    capcard()
        .args(["diff", a, b, "--fail-on-regression", "10"])
        .assert()
        .code(3);
    capcard()
        .args(["diff", a, b, "--fail-on-regression", "50"])
        .assert()
        .success();
    capcard()
        .args(["diff", a, "tests/data/no-such-folder"])
        .assert()
        .code(1);
}

#[test]
fn report_on_a_folder_that_is_not_one_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    capcard()
        .arg("report")
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("not a capcard results folder"));
}

/// `capcard sim` serves the OpenAI API on the address it is given until it
/// is stopped.
#[test]
fn sim_serves_until_stopped() {
    let sim = SimChild::start(&["--preset", "tiny"]);
    let body = sim.get("/v1/models").expect("capcard sim answers");
    drop(sim);
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("sim/tiny"), "{body}");
}

#[test]
fn sim_rejects_bad_fault_flags() {
    capcard()
        .args(["sim", "--preset", "tiny", "--fail-rate", "2"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("--fail-rate"));
    capcard()
        .args(["sim", "--preset", "nope"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("tiny"));
}

#[test]
fn k8s_manifests_are_those_the_generated_api_bindings_wrote() {
    // tests/it/k8s_golden/README.md: the YAML k8s-openapi wrote for this
    // file, before capcard's own structs replaced it.
    let out = capcard()
        .args(["k8s", "tests/it/k8s_golden/demo.kdl", "--shards", "2"])
        .args(["--image", "img", "--namespace", "load", "--name", "demo"])
        .args(["--storage", "5Gi", "--cpu", "4"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let golden = std::fs::read_to_string("tests/it/k8s_golden/demo.yaml").unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), golden);
}

#[test]
fn k8s_writes_five_objects_and_refuses_an_invalid_experiment() {
    use capcard::k8s::api::{ConfigMap, Job, PersistentVolumeClaim, Service};
    use serde::Deserialize;

    // The quickstart against a served engine: a `sim` target would be one
    // simulator per pod, and is refused.
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.kdl");
    let source = std::fs::read_to_string("experiments/quickstart.kdl")
        .unwrap()
        .replace(
            "    sim tiny ",
            "    endpoint \"http://vllm.bench.svc:8000/v1\" ",
        );
    std::fs::write(&served, &source).unwrap();
    capcard()
        .args([
            "k8s",
            "experiments/quickstart.kdl",
            "--shards",
            "3",
            "--image",
            "c",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("target `tiny` is a `sim`"));
    let out = capcard()
        .arg("k8s")
        .arg(&served)
        .args(["--shards", "3"])
        .args(["--image", "ghcr.io/example/capcard:0.1"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let yaml = String::from_utf8(out).expect("UTF-8");
    let mut documents = serde_yaml_ng::Deserializer::from_str(&yaml);
    let mut next = || documents.next().expect("five documents");
    let config_map = ConfigMap::deserialize(next()).expect("a ConfigMap");
    PersistentVolumeClaim::deserialize(next()).expect("a PVC");
    Service::deserialize(next()).expect("a Service");
    Job::deserialize(next()).expect("the coordinator's Job");
    let shards = Job::deserialize(next()).expect("the shards' Job");
    assert!(documents.next().is_none(), "exactly five objects");
    assert_eq!(config_map.data.unwrap()["experiment.kdl"], source);
    let spec = shards.spec.unwrap();
    assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));

    let bad = dir.path().join("bad.kdl");
    std::fs::write(
        &bad,
        "target \"t\" { sim tiny }\nclosed { concurency 1 2 }\n",
    )
    .unwrap();
    capcard()
        .arg("k8s")
        .arg(&bad)
        .args(["--shards", "3", "--image", "capcard"])
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("concurency"));
}

/// `capcard plan x.kdl | head -1`: the reader closes the pipe before the
/// table is written; capcard stops quietly, with no panic about it.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    for args in [
        &["plan", "experiments/quickstart.kdl"][..],
        &["plan", "experiments/quickstart.kdl", "--json"][..],
        &["sim", "--list"][..],
    ] {
        let mut child = std::process::Command::new(binary())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("capcard starts");
        // Closed before the process has started writing.
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("capcard exits");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}
