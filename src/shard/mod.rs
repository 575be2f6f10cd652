//! One experiment across several load-generator processes (shards): merging
//! their results ([`merge`]), and the coordinator that lets shards run the
//! adaptive Cr_open search together ([`coordinator`], served over plain
//! HTTP; [`worker`] is the shard's side). Which part of a run each shard
//! sends is the plan's business ([`crate::plan::shard`]).
//!
//! Two ways to run shards:
//! - `capcard run FILE --shard I/N --start-at T`: no process talks to
//!   another. Every shard follows the same timetable from `T` and writes a
//!   folder of its own; `capcard merge` puts them together. Only runs of a
//!   known length fit a timetable (closed sweeps, open grids): a search's
//!   next rate depends on the last verdict, which no shard knows alone.
//! - `capcard run FILE --coordinate N` and N × `capcard run FILE --shard
//!   I/N --coordinator URL`: the coordinator plans every run (search,
//!   extensions, frontier), gives each one a start instant a moment ahead,
//!   collects the shards' journals after it and merges them as it goes.

pub mod coordinator;
pub mod merge;
pub mod worker;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::exec::record::ShardClock;
use crate::folder::{self, ResultsFolder};
use crate::plan::Plan;
use crate::report::Templates;

pub use merge::{MergeError, MergedRun, merge_journal_files};

/// A shard whose start was later than this (its lag plus the uncertainty
/// of its clock offset) did not run the load together with the others for
/// that long: the card says so.
pub const START_SKEW_LIMIT_MS: f64 = 10.0;

/// What the card says about a sharded card's load generator.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardingNote {
    pub sentence: String,
    /// Set when a shard's start was off by more than [`START_SKEW_LIMIT_MS`].
    pub warning: Option<String>,
}

/// The note for runs whose merged headers list `runs` (run id, shards).
pub fn sharding_note(runs: &[(&str, &[ShardClock])]) -> Option<ShardingNote> {
    let sharded: Vec<&(&str, &[ShardClock])> = runs
        .iter()
        .filter(|(_, shards)| !shards.is_empty())
        .collect();
    let (_, first) = sharded.first()?;
    let count = first[0].count;
    let agreed_by = &first[0].agreed_by;
    let mut worst: Option<(f64, &str, u32)> = None;
    let (mut max_lag, mut max_offset, mut max_uncertainty) = (0.0f64, None::<f64>, None::<f64>);
    for (run, shards) in &sharded {
        for clock in *shards {
            max_lag = max_lag.max(clock.start_lag_ms);
            if let Some(offset) = clock.clock_offset_ms {
                max_offset = Some(max_offset.unwrap_or(0.0).max(offset.abs()));
            }
            if let Some(u) = clock.clock_uncertainty_ms {
                max_uncertainty = Some(max_uncertainty.unwrap_or(0.0).max(u));
            }
            let skew = clock.start_lag_ms + clock.clock_uncertainty_ms.unwrap_or(0.0);
            if worst.is_none_or(|(w, _, _)| skew > w) {
                worst = Some((skew, run, clock.index));
            }
        }
    }
    let clocks = match (max_offset, max_uncertainty) {
        (Some(offset), Some(u)) => format!(
            "host clocks within {} of the coordinator's, each offset measured to ±{} and \
             corrected",
            fmt_ms(offset),
            fmt_ms(u)
        ),
        _ => "host clocks trusted as they are (NTP): their offsets were not measured".to_string(),
    };
    let sentence = format!(
        "{count} processes (shards) sent the load together, started by {agreed_by}; \
         merged from their exact journals; starts at most {} late; {clocks}",
        fmt_ms(max_lag)
    );
    let warning = worst
        .filter(|(skew, _, _)| *skew > START_SKEW_LIMIT_MS)
        .map(|(skew, run, index)| {
            format!(
                "shard {index}/{count} started run {run} up to {} after the agreed instant \
                 (start lag plus clock uncertainty): for that long the load was lighter than \
                 planned, and its calls carry the lag as schedule lag",
                fmt_ms(skew)
            )
        });
    Some(ShardingNote { sentence, warning })
}

fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// What `capcard merge` did.
#[derive(Debug)]
pub struct FolderMerge {
    pub runs: Vec<MergedRun>,
    pub written: folder::Written,
}

/// `capcard merge DIR... --out DIR`: check that the folders are the shards
/// of one run (one experiment file, one plan, shards 0 to N-1 once each),
/// merge every run's journals, copy its telemetry from the first shard
/// that scraped any (they scraped the same server), and render the cards.
pub fn merge_folders(dirs: &[PathBuf], out: &Path) -> Result<FolderMerge, MergeError> {
    let first = dirs
        .first()
        .ok_or_else(|| MergeError::Mismatch("no shard folder given".into()))?;
    let folders: Vec<ResultsFolder> = dirs.iter().map(ResultsFolder::new).collect();
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).map_err(|source| MergeError::Io { path, source })
    };
    let source = read(folders[0].experiment())
        .map_err(|_| folder::FolderError::NotAResultsFolder(first.clone()))?;
    let plan_text = read(folders[0].plan())?;
    for (dir, f) in dirs.iter().zip(&folders).skip(1) {
        let other = read(f.experiment())
            .map_err(|_| folder::FolderError::NotAResultsFolder(dir.clone()))?;
        if other != source {
            return Err(MergeError::Mismatch(format!(
                "{} and {} were run from different experiment files",
                first.display(),
                dir.display()
            )));
        }
        if read(f.plan())? != plan_text {
            return Err(MergeError::Mismatch(format!(
                "{} and {} hold different plans",
                first.display(),
                dir.display()
            )));
        }
    }
    let out_folder = ResultsFolder::new(out);
    if out_folder.experiment().exists() {
        return Err(MergeError::Mismatch(format!(
            "{} already holds results: merge into a new folder",
            out.display()
        )));
    }
    let plan: Plan = serde_json::from_str(&plan_text)
        .map_err(|e| MergeError::Mismatch(format!("{}: {e}", folders[0].plan().display())))?;
    let experiment = folders[0].load_experiment()?;

    // Every run any shard has, in name order.
    let mut run_ids = BTreeSet::new();
    for f in &folders {
        for path in f.journal_paths()? {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                run_ids.insert(stem.to_string());
            }
        }
    }
    out_folder.create(&source, &plan)?;
    let mut runs = Vec::new();
    for run_id in &run_ids {
        let parts: Vec<PathBuf> = folders
            .iter()
            .map(|f| f.journal(run_id))
            .filter(|p| p.is_file())
            .collect();
        let merged = merge_journal_files(&parts, dirs.len() as u32, &out_folder.journal(run_id))?;
        if let Some(telemetry) = folders
            .iter()
            .map(|f| f.telemetry(run_id))
            .find(|p| p.is_file())
        {
            let to = out_folder.telemetry(run_id);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|source| MergeError::Io {
                    path: parent.to_path_buf(),
                    source,
                })?;
            }
            std::fs::copy(&telemetry, &to).map_err(|source| MergeError::Io {
                path: telemetry.clone(),
                source,
            })?;
        }
        runs.push(merged);
    }
    let report = folder::recompute(&out_folder, &experiment, &plan, None)?;
    let written = folder::write_outputs(&out_folder, &report, &Templates::builtin())?;
    Ok(FolderMerge { runs, written })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(index: u32, lag: f64, offset: Option<(f64, f64)>) -> ShardClock {
        ShardClock {
            index,
            count: 2,
            agreed_by: "the coordinator http://127.0.0.1:7300".into(),
            start_at: "2026-12-02T00:00:00.000000Z".into(),
            clock_offset_ms: offset.map(|o| o.0),
            clock_uncertainty_ms: offset.map(|o| o.1),
            start_lag_ms: lag,
        }
    }

    #[test]
    fn the_note_gives_the_worst_start() {
        let a = [
            clock(0, 0.05, Some((0.3, 0.1))),
            clock(1, 0.2, Some((-1.5, 0.2))),
        ];
        let b = [
            clock(0, 0.1, Some((0.3, 0.1))),
            clock(1, 0.02, Some((-1.4, 0.1))),
        ];
        let note = sharding_note(&[("r1", &a), ("r2", &b), ("one-process", &[])]).unwrap();
        assert!(
            note.sentence.starts_with("2 processes (shards)"),
            "{}",
            note.sentence
        );
        assert!(
            note.sentence.contains("at most 0.20 ms late"),
            "{}",
            note.sentence
        );
        assert!(note.sentence.contains("within 1.5 ms"), "{}", note.sentence);
        assert_eq!(note.warning, None);

        let late = [clock(0, 0.05, None), clock(1, 42.0, None)];
        let note = sharding_note(&[("r1", &a), ("r3", &late)]).unwrap();
        let warning = note.warning.unwrap();
        assert!(
            warning.contains("shard 1/2 started run r3 up to 42.0 ms"),
            "{warning}"
        );
        assert_eq!(sharding_note(&[("x", &[])]), None, "one process: no note");
    }
}
