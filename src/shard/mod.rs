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

use crate::folder::{self, ResultsFolder};
use crate::plan::Plan;
use crate::report::Templates;

pub use merge::{MergeError, MergedRun, merge_journal_files};

pub use crate::analyze::sharding::{START_SKEW_LIMIT_MS, ShardingNote, sharding_note};

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
    // The shards' folders hold the data files beside their experiment copy.
    out_folder.copy_inputs(&folders[0].experiment(), &source)?;
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
