//! `capcard export DIR --format llmd`: one llm-d Benchmark Report v0.2.1 per
//! run of the export fixture, each valid against the vendored schema, and
//! one open run's document as a golden file.

use std::fs;
use std::path::{Path, PathBuf};

use capcard::report::json_schema::validate;
use serde_json::Value;

use crate::support::capcard;

const SCHEMA: &str = include_str!("../data/llmd/br_v0_2_1_json_schema.json");

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/export-fixture")
}

#[test]
fn export_llmd_writes_one_valid_report_per_run() {
    let out = tempfile::tempdir().unwrap();
    capcard()
        .arg("export")
        .arg(fixture())
        .args(["--format", "llmd", "--out"])
        .arg(out.path())
        .assert()
        .success();

    let mut names: Vec<String> = fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "benchmark_report_tiny--chat--c0002.json",
            "benchmark_report_tiny--chat--c0016.json",
            "benchmark_report_tiny--chat--r19.700.json",
            "benchmark_report_tiny--chat--r27.900.json",
            "benchmark_report_tiny--chat--r39.400.json",
        ]
    );

    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    for name in &names {
        let text = fs::read_to_string(out.path().join(name)).unwrap();
        let document: Value = serde_json::from_str(&text).unwrap();
        let violations: Vec<String> = validate(&schema, &document)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(violations, Vec::<String>::new(), "{name}");
        // Every run's journal is in the fixture: every document has its times.
        assert!(document["run"]["time"]["start"].is_string(), "{name}");
        assert!(document["run"]["time"]["end"].is_string(), "{name}");
    }

    let open =
        fs::read_to_string(out.path().join("benchmark_report_tiny--chat--r19.700.json")).unwrap();
    insta::assert_snapshot!("open_run_benchmark_report", open.trim_end());
}
