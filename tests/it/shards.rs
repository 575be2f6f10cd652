//! Sharded runs through the real binary: N shard processes on this machine
//! against one simulated server, merged, give the card one process gives.

use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::Duration;

use crate::support::{
    binary, capcard, experiment_file, free_port, read_report, run_ok, serve_tiny,
};
use capcard::analyze::Card;

/// One endpoint target (the simulator served once, on loopback), a sweep
/// whose knee and CrossP are clear of noise on `tiny` (its batch of 32 lies
/// between 4 and 64; at 8, throughput is within a few percent of the 90%
/// that bounds Cr_closed, and a loaded machine moved it across), and an
/// open block: Poisson arrivals on a grid (for a timetable) or what
/// [`SEARCH`] says (for a coordinator). The SLO bounds medians: judged on a
/// few calls, so no run is lengthened for samples and the test stays short.
/// The timeout is twice the slowest call of the overloaded rates: every
/// run's slot on a timetable is its length plus the timeout.
fn experiment(base_url: &str, open: &str) -> String {
    experiment_with(
        base_url,
        r#"e2e p50="3s""#,
        &format!("arrival poisson\n    {open}"),
    )
}

/// A Cr_open search two processes can agree on. Against the e2e bound alone
/// the search ends at `tiny`'s cliff (about 40 req/s), where 3-second
/// windows of Poisson arrivals pass or fail by luck: one process passed
/// 43.8 req/s while the shards failed at 38 on a loaded CI machine. TPOT
/// rises smoothly with the batch well before the cliff (3.9 ms at 22 req/s,
/// 4.8 at 27.5, 6.4 at 33 with steady arrivals), so a TPOT bound is
/// crossed at a rate either side measures alike: on an idle machine and
/// beside a busy loop, both ended between 21.9 and 25 req/s.
const SEARCH: (&str, &str) = (
    r#"tpot p50="5ms""#,
    r#"arrival constant
    search min=4 max=45 precision="25%""#,
);

fn experiment_with(base_url: &str, slo: &str, open: &str) -> String {
    format!(
        r#"
experiment "sharded" {{
    seed 23
}}
target "served" {{
    endpoint "{base_url}"
    api chat
    timeout "4s"
}}
workload "chat" {{
    input-tokens lognormal median=96 sigma=0.4 min=16 max=512
    output-tokens normal mean=48 stddev=8 min=8 max=96
}}
slo "interactive" {{
    ttft p50="400ms"
    {slo}
}}
closed {{
    concurrency 1 4 64
    duration "2s"
    warmup "300ms"
}}
open {{
    {open}
    duration "3s"
    warmup "300ms"
    budget "20s"
}}
"#
    )
}

fn spawn(args: &[&str], file: &Path, out: &Path) -> Child {
    Process::new(binary())
        .args(["run", "--quiet"])
        .args(args)
        .arg("--out")
        .arg(out)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("capcard starts")
}

fn wait_ok(child: Child, what: &str) -> String {
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{what} failed:\n{stderr}");
    stderr
}

/// Scheduled instants of the first call of every task in a journal.
fn arrivals(journal: &Path) -> Vec<(u64, f64)> {
    let journal = capcard::exec::read_journal(journal).unwrap();
    let mut out: Vec<(u64, f64)> = journal
        .requests
        .iter()
        .filter(|r| r.call == 0)
        .map(|r| (r.task, r.scheduled_ms))
        .collect();
    out.sort_by_key(|a| a.0);
    out
}

fn closed_figures(card: &Card) -> (Option<u32>, Option<[u32; 2]>) {
    (
        card.crossp.as_ref().map(|c| c.concurrency),
        card.cr_closed.as_ref().map(|c| c.range),
    )
}

/// Measured in real time: run by `crate::all_real_time_measurements_in_turn`.
pub fn timetable_shards_merge_into_the_one_process_card() {
    let (_server, url) = serve_tiny();
    let (tmp, file) = experiment_file("sharded.kdl", &experiment(&url, "rates 20 60"));

    let one = tmp.path().join("one");
    // The same request stream on both sides: one nonce.
    run_ok(&file, &one, &["--nonce", "9"]);

    let start_at =
        capcard::exec::journal::rfc3339_utc(std::time::SystemTime::now() + Duration::from_secs(2));
    let shards: Vec<(Child, PathBuf)> = (0..2)
        .map(|i| {
            let out = tmp.path().join(format!("shard{i}"));
            let part = format!("{i}/2");
            let child = spawn(
                &["--nonce", "9", "--shard", &part, "--start-at", &start_at],
                &file,
                &out,
            );
            (child, out)
        })
        .collect();
    let dirs: Vec<PathBuf> = shards
        .into_iter()
        .map(|(child, out)| {
            wait_ok(child, "shard");
            out
        })
        .collect();

    // A shard's folder alone is no card.
    let alone = capcard().arg("report").arg(&dirs[0]).output().unwrap();
    assert_eq!(alone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("capcard merge"));

    let merged = tmp.path().join("merged");
    let output = capcard()
        .arg("merge")
        .args(&dirs)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The open runs: the merged schedule is the one-process schedule,
    // arrival for arrival, so the declared process (Poisson, CV 1) holds.
    for run in ["served--chat--r20.000", "served--chat--r60.000"] {
        let journal = format!("runs/{run}.jsonl");
        let (a, b) = (
            arrivals(&one.join(&journal)),
            arrivals(&merged.join(&journal)),
        );
        assert_eq!(a.len(), b.len(), "{run}: no arrival lost or doubled");
        for ((ta, sa), (tb, sb)) in a.iter().zip(&b) {
            assert_eq!(ta, tb);
            assert!((sa - sb).abs() < 0.002, "{run} task {ta}: {sa} vs {sb}");
        }
    }
    let times: Vec<f64> = arrivals(&merged.join("runs/served--chat--r60.000.jsonl"))
        .iter()
        .map(|a| a.1)
        .collect();
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let sd =
        (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (gaps.len() - 1) as f64).sqrt();
    assert!(
        ((sd / mean) - 1.0).abs() < 0.05,
        "merged inter-arrival CV {} against the declared 1",
        sd / mean
    );

    let (one_report, merged_report) = (read_report(&one), read_report(&merged));
    let (a, b) = (&one_report.cards[0], &merged_report.cards[0]);
    assert_eq!(merged_report.status, "complete");
    assert_eq!(closed_figures(a), closed_figures(b));
    assert!(a.crossp.is_some() && a.cr_closed.is_some());
    assert_eq!(
        a.cr_open[0].rps, b.cr_open[0].rps,
        "the same grid judged the same"
    );
    for (x, y) in a.closed.iter().zip(&b.closed) {
        assert!(
            x.requests.abs_diff(y.requests) * 10 <= x.requests.max(1),
            "c={:?}: {} vs {} requests",
            x.concurrency,
            x.requests,
            y.requests
        );
    }
    let card = std::fs::read_to_string(merged.join("served--chat.md")).unwrap();
    assert!(
        card.contains("2 processes (shards) sent the load together, started by a timetable"),
        "{card}"
    );
    // The merge refuses what is not one sharded run.
    let again = capcard()
        .arg("merge")
        .arg(&dirs[0])
        .arg(&dirs[0])
        .arg("--out")
        .arg(tmp.path().join("twice"))
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("two journals of shard 0/2"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// Measured in real time: run by `crate::all_real_time_measurements_in_turn`.
pub fn coordinated_shards_search_cr_open_together() {
    let (_server, url) = serve_tiny();
    let (tmp, file) = experiment_file("sharded.kdl", &experiment_with(&url, SEARCH.0, SEARCH.1));
    let one = tmp.path().join("one");
    run_ok(&file, &one, &["--nonce", "9"]);

    let listen = format!("127.0.0.1:{}", free_port());
    let merged = tmp.path().join("merged");
    // Shards on this host hear of a run in milliseconds: a 1 s lead, not
    // the default 3 s, saves 2 s on each of the search's eight runs.
    let coordinator = spawn(
        &[
            "--nonce",
            "9",
            "--coordinate",
            "2",
            "--listen",
            &listen,
            "--start-lead",
            "1s",
        ],
        &file,
        &merged,
    );
    let coordinator_url = format!("http://{listen}");
    let shards: Vec<Child> = (0..2)
        .map(|i| {
            let part = format!("{i}/2");
            spawn(
                &["--shard", &part, "--coordinator", &coordinator_url],
                &file,
                &tmp.path().join(format!("shard{i}")),
            )
        })
        .collect();
    let log = wait_ok(coordinator, "coordinator");
    for shard in shards {
        wait_ok(shard, "shard");
    }
    assert!(log.contains("shard 1/2 joined"), "{log}");

    let (one_report, merged_report) = (read_report(&one), read_report(&merged));
    let (a, b) = (&one_report.cards[0], &merged_report.cards[0]);
    assert_eq!(merged_report.status, "complete");
    assert_eq!(closed_figures(a), closed_figures(b), "CrossP and Cr_closed");
    let (ra, rb) = (
        a.cr_open[0].rps.expect("one process finds Cr_open"),
        b.cr_open[0].rps.expect("the shards find Cr_open"),
    );
    assert!(
        (ra / rb).max(rb / ra) <= 1.25 + 1e-9,
        "Cr_open {ra} vs {rb}: within the search's precision"
    );
    // Every shard's journal of every run is kept beside the merged one.
    let merged_runs = std::fs::read_dir(merged.join("runs")).unwrap().count();
    for i in 0..2 {
        let kept = std::fs::read_dir(merged.join(format!("shards/{i}")))
            .unwrap()
            .count();
        assert_eq!(kept, merged_runs, "shard {i}");
    }
    let card = std::fs::read_to_string(merged.join("served--chat.md")).unwrap();
    assert!(
        card.contains("started by the coordinator http://127.0.0.1"),
        "{card}"
    );
}

#[test]
fn shard_flags_are_checked_before_anything_runs() {
    let (tmp, file) = experiment_file(
        "sharded.kdl",
        &experiment_with("http://127.0.0.1:9/v1", SEARCH.0, SEARCH.1),
    );
    let future = capcard::exec::journal::rfc3339_utc(
        std::time::SystemTime::now() + Duration::from_secs(3600),
    );
    let cases: [(&[&str], &str); 7] = [
        (&["--shard", "2/2", "--start-at", &future], "does not exist"),
        (&["--shard", "0/2"], "needs --start-at"),
        (&["--shard", "0/2", "--start-at", "yesterday"], "RFC 3339"),
        (
            &["--shard", "0/2", "--start-at", "2020-01-01T00:00:00Z"],
            "has passed",
        ),
        (
            &["--shard", "0/2", "--start-at", &future],
            "searches for Cr_open",
        ),
        // The coordinator's waits have floors: a shard is heard once a
        // second, and measures its clock before each run.
        (&["--coordinate", "2", "--lost-after", "1s"], "at least 3 s"),
        (
            &["--coordinate", "2", "--start-lead", "100ms"],
            "at least 500 ms",
        ),
    ];
    for (args, expected) in cases {
        let output = capcard()
            .arg("run")
            .args(args)
            .arg("--out")
            .arg(tmp.path().join("never"))
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !tmp.path().join("never").exists(),
            "{args:?}: nothing written"
        );
    }
    // A sim target is one server per process: refused.
    let sim = tmp.path().join("sim.kdl");
    std::fs::write(
        &sim,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace(r#"endpoint "http://127.0.0.1:9/v1""#, "sim tiny"),
    )
    .unwrap();
    let output = capcard()
        .args(["run", "--coordinate", "2", "--listen", "127.0.0.1:0"])
        .arg(&sim)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("capcard sim --listen"));
}

/// A shard that dies mid-experiment: the coordinator gives it up after its
/// silence, keeps the run without a footer, and stops (exit 2), never
/// carrying on with half the load.
#[test]
fn a_lost_shard_stops_the_coordinator_with_the_run_incomplete() {
    let (_server, url) = serve_tiny();
    let (tmp, file) = experiment_file("sharded.kdl", &experiment(&url, "rates 20"));
    let listen = format!("127.0.0.1:{}", free_port());
    let merged = tmp.path().join("merged");
    let coordinator = spawn(
        &[
            "--only",
            "closed",
            "--coordinate",
            "2",
            "--listen",
            &listen,
            "--lost-after",
            "3s",
            "--start-lead",
            "1s",
        ],
        &file,
        &merged,
    );
    let coordinator_url = format!("http://{listen}");
    let shard = |i: u32| {
        spawn(
            &[
                "--only",
                "closed",
                "--shard",
                &format!("{i}/2"),
                "--coordinator",
                &coordinator_url,
            ],
            &file,
            &tmp.path().join(format!("shard{i}")),
        )
    };
    let survivor = shard(0);
    let mut doomed = shard(1);
    // Killed once its journal of c=4 exists (it is created when the run is
    // handed out, before it starts): shard 1 never sends it.
    let first = tmp.path().join("shard1/runs/served--chat--c0004.jsonl");
    let waited = std::time::Instant::now();
    while !first.is_file() {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "shard 1 never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    doomed.kill().unwrap();
    let _ = doomed.wait();

    let output = coordinator.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{log}");
    assert!(log.contains("shard(s) 1 went silent"), "{log}");
    let survivor = survivor.wait_with_output().unwrap();
    assert_eq!(
        survivor.status.code(),
        Some(2),
        "the shard hears the experiment ended short"
    );
    let journal =
        capcard::exec::read_journal(&merged.join("runs/served--chat--c0004.jsonl")).unwrap();
    assert!(journal.footer.is_none(), "the merged run is incomplete");
    assert!(
        !journal.requests.is_empty(),
        "what shard 0 measured is kept"
    );
    assert_eq!(read_report(&merged).status, "interrupted");
}
