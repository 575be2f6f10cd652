//! The experiments in the documentation are real: every fenced code block
//! tagged `kdl` in `README.md` and `docs/*.md` that is a whole experiment
//! passes `capcard check`.
//!
//! The rule: a block is a whole experiment when its top-level nodes (the
//! lines that start in the first column, read up to the first space, `{` or
//! `;`) include an `experiment`, or both a `target` and a `workload`.
//! Anything else is a fragment shown in context (a lone `target` with its
//! knobs, a `mix` with its `sizing`) and is skipped.
//!
//! Each block is written to a file of its own in a temporary folder and
//! checked there. That folder holds a copy of `experiments/data/`, so a
//! block may name the shipped data files by the paths the examples use
//! (`dataset "data/support-prompts.jsonl"`, `arrival trace
//! "data/mooncake-trace.jsonl"`); a block that names any other file fails,
//! as it would for a reader who copies it.
//!
//! `MIN_CHECKED` is the number of whole experiments the docs hold today, so
//! that one deleted, or cut down to a fragment by mistake, is noticed.

use crate::support::capcard;
use std::path::{Path, PathBuf};

/// Whole experiments in the docs today: the tour in docs/language.md.
const MIN_CHECKED: usize = 1;

/// A `kdl` block: the file it is in, the line of its opening fence, its text.
struct Block {
    file: String,
    line: usize,
    text: String,
}

/// The documentation: README.md, then docs/*.md by name.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(docs);
    files
}

/// Every fenced block tagged `kdl` in one markdown file.
fn kdl_blocks(root: &Path, path: &Path) -> Vec<Block> {
    let file = path
        .strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "```kdl" {
            let start = i + 1;
            let end = lines[start..]
                .iter()
                .position(|l| l.trim_start().starts_with("```"))
                .map(|k| start + k)
                .unwrap_or_else(|| {
                    panic!("{file}: the kdl block at line {} is never closed", i + 1)
                });
            blocks.push(Block {
                file: file.clone(),
                line: i + 1,
                text: lines[start..end].join("\n") + "\n",
            });
            i = end;
        }
        i += 1;
    }
    blocks
}

/// The names of the nodes a block declares at its top level.
fn top_level_nodes(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| {
            l.split(|c: char| c.is_whitespace() || c == '{' || c == ';')
                .next()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

fn is_whole_experiment(text: &str) -> bool {
    let nodes = top_level_nodes(text);
    let has = |name: &str| nodes.contains(&name);
    has("experiment") || (has("target") && has("workload"))
}

#[test]
fn the_rule_tells_experiments_from_fragments() {
    assert!(is_whole_experiment(
        "experiment \"e\" {\n    seed 1\n}\ntarget \"t\" { sim tiny }\n"
    ));
    assert!(is_whole_experiment(
        "target \"t\" {\n    sim tiny\n}\nworkload \"w\" {\n    input-tokens fixed 8\n}\n"
    ));
    assert!(!is_whole_experiment(
        "target \"hosted\" {\n    endpoint \"https://api.example.com/v1\"\n}\n"
    ));
    assert!(!is_whole_experiment(
        "mix \"m\" {\n    class \"c\" workload=\"w\" slo=\"s\" weight=1\n}\nsizing {\n    target rps=100 mix=\"m\"\n}\n"
    ));
}

#[test]
fn every_whole_experiment_in_the_docs_passes_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    // The shipped data files, where a block's relative paths look for them.
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for entry in std::fs::read_dir(root.join("experiments").join("data")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, data.join(path.file_name().unwrap())).unwrap();
        }
    }

    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for path in doc_files(root) {
        for block in kdl_blocks(root, &path) {
            if !is_whole_experiment(&block.text) {
                continue;
            }
            let place = format!("{}, the kdl block at line {}", block.file, block.line);
            let name = block.file.replace(['/', '\\'], "-");
            let file = tmp.path().join(format!("{name}-L{}.kdl", block.line));
            std::fs::write(&file, block.text.as_bytes()).unwrap();
            let out = capcard()
                .args(["check"])
                .arg(&file)
                .output()
                .expect("capcard runs");
            if !out.status.success() {
                failures.push(format!(
                    "{place}: `capcard check` failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            checked.push(place);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the {} experiments in the docs fail `capcard check`:\n\n{}",
        failures.len(),
        checked.len(),
        failures.join("\n\n")
    );
    assert!(
        checked.len() >= MIN_CHECKED,
        "expected at least {MIN_CHECKED} whole experiments in README.md and docs/*.md, found {}: {checked:?}",
        checked.len()
    );
}
