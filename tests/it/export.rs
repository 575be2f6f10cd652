//! `capcard export --format csv|jsonl` on the export fixture folder: golden
//! files, the row counts against the journals, and folders that are old,
//! cut short or not results folders at all. (`llmd` has its own module.)

use std::path::{Path, PathBuf};

use capcard::exec::record::RequestRecord;

use crate::support::capcard;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/export-fixture")
}

/// `capcard export DIR --format F --out OUT`, which must succeed: the paths it printed.
fn export(dir: &Path, format: &str, out: &Path) -> Vec<PathBuf> {
    let output = capcard()
        .arg("export")
        .arg(dir)
        .args(["--format", format, "--out"])
        .arg(out)
        .output()
        .expect("capcard runs");
    assert!(
        output.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// Every request line of every journal in the folder.
fn journal_requests(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir.join("runs")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        n += text
            .lines()
            .filter(|l| l.starts_with(r#"{"kind":"request""#))
            .count();
    }
    n
}

#[test]
fn csv_runs_and_requests_are_golden_and_count_every_call() {
    let out = tempfile::tempdir().unwrap();
    let written = export(&fixture(), "csv", out.path());
    assert_eq!(
        written,
        vec![out.path().join("runs.csv"), out.path().join("requests.csv")]
    );
    let runs = std::fs::read_to_string(out.path().join("runs.csv")).unwrap();
    insta::assert_snapshot!("export_runs.csv", runs);
    let requests = std::fs::read_to_string(out.path().join("requests.csv")).unwrap();
    let lines: Vec<&str> = requests.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1 + journal_requests(&fixture()));
    insta::assert_snapshot!("export_requests_head.csv", lines[..4].join("\n"));
    // Same folder, same bytes.
    let again = tempfile::tempdir().unwrap();
    export(&fixture(), "csv", again.path());
    assert_eq!(
        std::fs::read(again.path().join("requests.csv")).unwrap(),
        requests.as_bytes()
    );
}

#[test]
fn jsonl_is_every_record_with_its_run() {
    let out = tempfile::tempdir().unwrap();
    export(&fixture(), "jsonl", out.path());
    let text = std::fs::read_to_string(out.path().join("requests.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), journal_requests(&fixture()));
    insta::assert_snapshot!("export_requests_head.jsonl", lines[..2].join("\n"));
    let mut runs = std::collections::BTreeSet::new();
    for line in &lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        runs.insert(value["run_id"].as_str().unwrap().to_string());
        assert!(value["mode"] == "closed" || value["mode"] == "open");
        assert!(value["warmup"].is_boolean());
        // The rest is the journal's record, field for field.
        let _: RequestRecord = serde_json::from_value(value).unwrap();
    }
    assert_eq!(runs.len(), 5, "{runs:?}");
}

#[test]
fn a_folder_without_results_json_or_cut_short_still_exports() {
    // An old folder, or one whose `capcard run` was killed before writing
    // results.json: the journals are the truth, and they are there.
    let copy = tempfile::tempdir().unwrap();
    let dir = copy.path().join("folder");
    copy_dir(&fixture(), &dir);
    std::fs::remove_file(dir.join("results.json")).unwrap();
    // The last journal lost its footer and half its last line.
    let last = dir.join("runs/tiny--chat--r39.400.jsonl");
    let text = std::fs::read_to_string(&last).unwrap();
    let cut = text.trim_end().rfind('\n').unwrap();
    std::fs::write(&last, &text[..cut - 40]).unwrap();
    let out = tempfile::tempdir().unwrap();
    export(&dir, "csv", out.path());
    let runs = std::fs::read_to_string(out.path().join("runs.csv")).unwrap();
    assert_eq!(runs.split("\r\n").filter(|l| !l.is_empty()).count(), 6);
    let requests = std::fs::read_to_string(out.path().join("requests.csv")).unwrap();
    let rows = requests.split("\r\n").filter(|l| !l.is_empty()).count();
    // The torn last line is dropped, as `capcard report` drops it.
    assert_eq!(rows, 1 + journal_requests(&dir) - 1);
}

#[test]
fn not_a_results_folder_is_a_clear_error() {
    let empty = tempfile::tempdir().unwrap();
    let output = capcard()
        .arg("export")
        .arg(empty.path())
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not a capcard results folder"),
        "{stderr}"
    );
    assert!(!empty.path().join("export").exists(), "nothing written");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Parses RFC 4180 text into rows (quoted cells may hold commas and quotes).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = vec![];
    for line in text.split(['\n']).map(|l| l.trim_end_matches('\r')) {
        if line.is_empty() {
            continue;
        }
        let mut cells = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    cells.last_mut().unwrap().push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => cells.push(String::new()),
                (c, _) => cells.last_mut().unwrap().push(c),
            }
        }
        rows.push(cells);
    }
    rows
}

#[test]
fn the_docs_csv_excerpts_are_rows_of_the_real_export() {
    let docs =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/results.md"))
            .unwrap();
    let excerpts: Vec<&str> = docs
        .split("```csv\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(excerpts.len(), 2, "runs.csv and requests.csv excerpts");
    let out = tempfile::tempdir().unwrap();
    export(&fixture(), "csv", out.path());
    for (excerpt, file) in excerpts.iter().zip(["runs.csv", "requests.csv"]) {
        let real = parse_csv(&std::fs::read_to_string(out.path().join(file)).unwrap());
        let shown = parse_csv(excerpt);
        let index: Vec<usize> = shown[0]
            .iter()
            .map(|name| {
                real[0]
                    .iter()
                    .position(|c| c == name)
                    .unwrap_or_else(|| panic!("docs show {name}, {file} has no such column"))
            })
            .collect();
        for row in &shown[1..] {
            let found = real[1..]
                .iter()
                .any(|r| index.iter().zip(row).all(|(&i, cell)| &r[i] == cell));
            assert!(found, "the docs' row {row:?} is no row of {file}");
        }
    }
}

#[test]
fn a_results_folder_keeps_its_data_files_so_report_and_export_need_nothing_else() {
    // The experiment names its dataset by a path relative to itself; the
    // folder gets a copy at the same relative path, so once the original is
    // gone (another machine, a cleaned checkout) the folder still renders.
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join("data")).unwrap();
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/prompts.jsonl"),
        work.path().join("data/prompts.jsonl"),
    )
    .unwrap();
    let file = work.path().join("replay.kdl");
    std::fs::write(
        &file,
        r#"
experiment "replay" { seed 3; }
target "tiny" { sim tiny; }
workload "prompts" { dataset "data/prompts.jsonl"; output-tokens fixed 16; }
closed { concurrency 1 2; duration "1s"; warmup "200ms"; }
"#,
    )
    .unwrap();
    let out = work.path().join("results");
    crate::support::run_ok(&file, &out, &["--virtual"]);
    assert_eq!(
        std::fs::read(out.join("data/prompts.jsonl")).unwrap(),
        std::fs::read(work.path().join("data/prompts.jsonl")).unwrap()
    );
    std::fs::remove_dir_all(work.path().join("data")).unwrap();
    let report = capcard()
        .arg("report")
        .arg(&out)
        .arg("--out")
        .arg(work.path().join("card.md"))
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let exported = tempfile::tempdir().unwrap();
    export(&out, "csv", exported.path());
    // A folder without its data file (written by an older capcard, or
    // cleaned) says which file it lacks and how to put it back.
    std::fs::remove_file(out.join("data/prompts.jsonl")).unwrap();
    let lacking = capcard().arg("report").arg(&out).output().unwrap();
    assert!(!lacking.status.success());
    let stderr = String::from_utf8_lossy(&lacking.stderr);
    for needle in [
        "names data files it does not hold:",
        "prompts.jsonl",
        "capcard::missing_inputs",
        "copy them in at those paths, relative to its experiment.kdl",
    ] {
        // miette wraps at the terminal's width: compare the words alone.
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let flat = words(&stderr.replace(['│', '×', '╰', '─', '▶'], " "));
        assert!(flat.contains(needle), "missing {needle:?} in\n{stderr}");
    }
}
