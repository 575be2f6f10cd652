//! The results folder (SPEC §5): its layout, and turning what it holds back
//! into a [`CapacityReport`].
//!
//! Journals are the source of truth. `results.json` and the cards are always
//! recomputed from `runs/*.jsonl` by [`recompute`], by `capcard run` after
//! every run and by `capcard report` later, so the two produce byte-identical
//! cards and a folder cut short by a crash still renders.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::analyze::{self, CapacityReport, Card};
use crate::config::{self, ConfigError, Experiment, OpenSpec, RateSelection};
use crate::exec::{self, record::Journal};
use crate::plan::{Load, Mode, Plan};
use crate::report::{self, Templates};

pub const EXPERIMENT_FILE: &str = "experiment.kdl";
pub const PLAN_FILE: &str = "plan.json";
pub const RESULTS_FILE: &str = "results.json";
/// The experiment's audit (`capcard audit --json`), attached by `report --audit`.
pub const AUDIT_FILE: &str = "audit.json";
pub const RUNS_DIR: &str = "runs";
pub const SUMMARY_FILE: &str = "summary.md";
pub const TELEMETRY_DIR: &str = "telemetry";
/// Launched engines: `<target>.log` (stdout and stderr) and `<target>.json`.
pub const SERVERS_DIR: &str = "servers";
/// The settings `tune` pruned, and why.
pub const TUNE_FILE: &str = "tune.json";

#[derive(Debug, Error, miette::Diagnostic)]
pub enum FolderError {
    #[error("{path}: {source}")]
    #[diagnostic(code(capcard::io))]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0} is not a capcard results folder (no {EXPERIMENT_FILE})")]
    #[diagnostic(
        code(capcard::not_a_results_folder),
        help("give the folder that `capcard run` wrote, the one holding experiment.kdl and runs/")
    )]
    NotAResultsFolder(PathBuf),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] Box<ConfigError>),
    #[error(
        "{} names data files it does not hold: {}",
        dir.display(),
        missing.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    #[diagnostic(
        code(capcard::missing_inputs),
        help(
            "a folder written by an older capcard (or one they were removed from) lacks them: copy them in at those paths, relative to its experiment.kdl (e.g. `cp -r experiments/data DIR/`); folders written now keep their data files"
        )
    )]
    MissingInputs {
        dir: PathBuf,
        missing: Vec<PathBuf>,
        #[source]
        source: Box<ConfigError>,
    },
    #[error("journal {path}: {message}")]
    #[diagnostic(code(capcard::journal))]
    Journal { path: PathBuf, message: String },
    #[error("audit {}: {message}", path.display())]
    #[diagnostic(
        code(capcard::audit_file),
        help(
            "give the output of `capcard audit FILE --json` run on this experiment's file (its twin as the `sim` target), with the same workload, SLO and open block"
        )
    )]
    Audit { path: PathBuf, message: String },
    #[error("rendering: {0}")]
    #[diagnostic(code(capcard::render))]
    Render(String),
    #[error("{} holds the journals of shard {index}/{count} only: one shard's part of the load is no measurement of the replica", dir.display())]
    #[diagnostic(
        code(capcard::shard_folder),
        help(
            "merge every shard's folder first: `capcard merge DIR... --out DIR`, then report the merged folder"
        )
    )]
    ShardFolder {
        dir: PathBuf,
        index: u32,
        count: u32,
    },
}

/// A relative path that stays below the folder it is read from (no `..`,
/// no root): the data paths a results folder holds copies of.
fn stays_inside(path: &Path) -> bool {
    path.is_relative()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

pub fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FolderError + '_ {
    move |source| FolderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Paths inside one results folder.
#[derive(Debug, Clone)]
pub struct ResultsFolder {
    pub dir: PathBuf,
}

impl ResultsFolder {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ResultsFolder { dir: dir.into() }
    }
    pub fn experiment(&self) -> PathBuf {
        self.dir.join(EXPERIMENT_FILE)
    }
    pub fn plan(&self) -> PathBuf {
        self.dir.join(PLAN_FILE)
    }
    pub fn results(&self) -> PathBuf {
        self.dir.join(RESULTS_FILE)
    }
    /// The experiment's audit, when one was attached (`report --audit`).
    pub fn audit_file(&self) -> PathBuf {
        self.dir.join(AUDIT_FILE)
    }
    /// The attached audit's rows; `None` without one.
    pub fn audit(&self) -> Result<Option<Vec<analyze::audited::AuditEntry>>, FolderError> {
        let path = self.audit_file();
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(FolderError::Io { path, source }),
        };
        analyze::audited::parse(&text)
            .map(Some)
            .map_err(|message| FolderError::Audit { path, message })
    }
    pub fn runs(&self) -> PathBuf {
        self.dir.join(RUNS_DIR)
    }
    pub fn journal(&self, run_id: &str) -> PathBuf {
        self.runs().join(format!("{run_id}.jsonl"))
    }
    /// The server's Prometheus scrapes during a run, when it had any.
    pub fn telemetry(&self, run_id: &str) -> PathBuf {
        self.dir.join(TELEMETRY_DIR).join(format!("{run_id}.jsonl"))
    }

    /// A launched engine's stdout and stderr (`servers/<target>.log`).
    pub fn server_log(&self, target: &str) -> PathBuf {
        self.dir.join(SERVERS_DIR).join(format!("{target}.log"))
    }
    /// How a launched engine fared (`servers/<target>.json`).
    pub fn server_record_path(&self, target: &str) -> PathBuf {
        self.dir.join(SERVERS_DIR).join(format!("{target}.json"))
    }
    /// Write a launched engine's record (replacing the last).
    pub fn write_server_record(
        &self,
        target: &str,
        record: &analyze::settings::ServerRecord,
    ) -> Result<(), FolderError> {
        let path = self.server_record_path(target);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let json = serde_json::to_string_pretty(record)
            .map_err(|e| FolderError::Render(format!("{}: {e}", path.display())))?;
        write(&path, &(json + "\n"))
    }
    /// A launched engine's record, if this folder has one.
    pub fn server_record(&self, target: &str) -> Option<analyze::settings::ServerRecord> {
        let text = fs::read_to_string(self.server_record_path(target)).ok()?;
        serde_json::from_str(&text).ok()
    }
    /// Why `tune` stopped measuring each setting it pruned (`tune.json`).
    pub fn pruned(&self) -> BTreeMap<String, String> {
        fs::read_to_string(self.dir.join(TUNE_FILE))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }
    /// Record that `tune` pruned `target`, and why.
    pub fn write_pruned(&self, target: &str, why: &str) -> Result<(), FolderError> {
        let mut pruned = self.pruned();
        pruned.insert(target.to_string(), why.to_string());
        let json = serde_json::to_string_pretty(&pruned)
            .map_err(|e| FolderError::Render(format!("{TUNE_FILE}: {e}")))?;
        write(&self.dir.join(TUNE_FILE), &(json + "\n"))
    }

    /// Create the folder and `runs/`, copy the experiment source, write the plan.
    pub fn create(&self, experiment_source: &str, plan: &Plan) -> Result<(), FolderError> {
        fs::create_dir_all(self.runs()).map_err(io_err(&self.runs()))?;
        write(&self.experiment(), experiment_source)?;
        let plan_json = serde_json::to_string_pretty(plan)
            .map_err(|e| FolderError::Render(format!("plan.json: {e}")))?;
        write(&self.plan(), &(plan_json + "\n"))
    }

    /// Copy the data files the experiment names beside its copy, at the
    /// same relative paths, so the folder is self-contained: `capcard
    /// report` and `capcard export` load `experiment.kdl` from the folder,
    /// and its relative paths then resolve inside it. A hard link where
    /// the file system allows it (a multi-GB dataset costs no space), else
    /// a copy. A path that is absolute, or leaves the experiment's folder
    /// (`..`), is kept as a reference: the sentence returned says so.
    pub fn copy_inputs(
        &self,
        experiment_path: &Path,
        experiment_source: &str,
    ) -> Result<Vec<String>, FolderError> {
        // Parsed without its data: only the paths as written are wanted.
        let Ok(as_written) = config::parse(experiment_source, experiment_path) else {
            return Ok(Vec::new());
        };
        let from_dir = experiment_path.parent().unwrap_or(Path::new("."));
        let mut notes = Vec::new();
        for path in config::data::named_files(&as_written) {
            if !stays_inside(&path) {
                notes.push(format!(
                    "data file {} is outside the experiment's folder: the results folder refers to it by that path",
                    path.display()
                ));
                continue;
            }
            let (from, to) = (from_dir.join(&path), self.dir.join(&path));
            if from == to || to.exists() {
                continue;
            }
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            if fs::hard_link(&from, &to).is_err() {
                fs::copy(&from, &to).map_err(io_err(&to))?;
            }
        }
        Ok(notes)
    }

    /// Parse the experiment copy stored in the folder.
    pub fn load_experiment(&self) -> Result<Experiment, FolderError> {
        let path = self.experiment();
        if !path.is_file() {
            return Err(FolderError::NotAResultsFolder(self.dir.clone()));
        }
        config::load(&path).map_err(|e| {
            let missing = self.missing_inputs(&path);
            if missing.is_empty() {
                FolderError::Config(Box::new(e))
            } else {
                FolderError::MissingInputs {
                    dir: self.dir.clone(),
                    missing,
                    source: Box::new(e),
                }
            }
        })
    }

    /// The data files the folder's experiment names by a path inside the
    /// folder that is not there: a folder written before runs kept their
    /// data files ([`Self::copy_inputs`]), or one they were removed from.
    fn missing_inputs(&self, experiment_path: &Path) -> Vec<PathBuf> {
        let Ok(source) = fs::read_to_string(experiment_path) else {
            return Vec::new();
        };
        let Ok(as_written) = config::parse(&source, experiment_path) else {
            return Vec::new();
        };
        config::data::named_files(&as_written)
            .into_iter()
            .filter(|path| stays_inside(path) && !self.dir.join(path).exists())
            .collect()
    }

    /// Every journal in `runs/`, read back (tolerating truncated ones).
    pub fn journals(&self) -> Result<Vec<(PathBuf, Journal)>, FolderError> {
        let mut out = Vec::new();
        for path in self.journal_paths()? {
            let journal = exec::read_journal(&path).map_err(|e| FolderError::Journal {
                path: path.clone(),
                message: e.to_string(),
            })?;
            out.push((path, journal));
        }
        Ok(out)
    }

    /// The header and footer of every journal in `runs/` (no records, so
    /// memory does not grow with the runs), with the latest completion of
    /// each (see [`exec::read_journal_ends`]).
    pub fn journal_ends(&self) -> Result<Vec<(PathBuf, Journal, f64)>, FolderError> {
        let mut out = Vec::new();
        for path in self.journal_paths()? {
            let (ends, last) =
                exec::read_journal_ends(&path).map_err(|e| FolderError::Journal {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            out.push((path, ends, last));
        }
        Ok(out)
    }

    /// The journal files in `runs/`, sorted.
    pub fn journal_paths(&self) -> Result<Vec<PathBuf>, FolderError> {
        let dir = self.runs();
        let mut paths: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(FolderError::Io { path: dir, source }),
        };
        paths.sort();
        Ok(paths)
    }

    /// The final status `capcard run` recorded, if it wrote one. A folder
    /// left at "running" was cut short without a word (killed, crashed): its
    /// status is derived from the journals instead.
    fn recorded_status(&self) -> Option<String> {
        let text = fs::read_to_string(self.results()).ok()?;
        report::parse_results_json(&text)
            .ok()
            .map(|r| r.status)
            .filter(|s| s != "running")
    }
}

/// What `capcard report` says of a folder whose results.json is of an
/// older version than this capcard writes (`capcard/results/v1`): the
/// version, the fields it lacks against the current one, and what became of
/// it. `None` for a current, missing or unreadable results.json. The cards
/// are recomputed from the journals either way, so what the old file lacks
/// is filled from them; only its status is read from it. `rewritten`: the
/// folder's results.json was written again (no `--out`).
pub fn older_results_note(dir: &Path, rewritten: bool) -> Option<String> {
    let text = fs::read_to_string(ResultsFolder::new(dir).results()).ok()?;
    let parsed = report::read_results_json(&text).ok()?;
    if parsed.schema_version == report::RESULTS_SCHEMA {
        return None;
    }
    let lacks = if parsed.lacks.is_empty() {
        "lacks no field".to_string()
    } else {
        format!(
            "lacks {} field(s) of {}: {}",
            parsed.lacks.len(),
            report::RESULTS_SCHEMA,
            parsed.lacks.join(", ")
        )
    };
    let after = if rewritten {
        format!("rewritten as {}", report::RESULTS_SCHEMA)
    } else {
        "left as it was".to_string()
    };
    Some(format!(
        "note: results.json is {} and {lacks}; the report was recomputed from the journals \
         (its status read from the old file) and results.json {after}",
        parsed.schema_version
    ))
}

/// A journal is finished when it has a footer and was not interrupted.
pub fn journal_finished(journal: &Journal) -> bool {
    journal.footer.as_ref().is_some_and(|f| !f.interrupted)
}

/// Journal ends (path, header + footer, latest completion) by (target, workload).
type JournalsByCard = BTreeMap<(String, String), Vec<(PathBuf, Journal, f64)>>;

/// Rebuild the whole report from the journals of a folder.
///
/// `status_override` is what the caller knows better than the journals
/// (`capcard run` knows it was interrupted between runs); `None` uses the
/// status recorded in results.json, else derives it from the journals.
pub fn recompute(
    folder: &ResultsFolder,
    experiment: &Experiment,
    plan: &Plan,
    status_override: Option<&str>,
) -> Result<CapacityReport, FolderError> {
    let journals = folder.journal_ends()?;
    let mut by_card: JournalsByCard = BTreeMap::new();
    for (path, journal, last) in journals {
        let Some(header) = &journal.header else {
            continue;
        };
        if let Some(shard) = &header.shard {
            return Err(FolderError::ShardFolder {
                dir: folder.dir.clone(),
                index: shard.index,
                count: shard.count,
            });
        }
        let key = (header.run.target.clone(), header.run.workload.clone());
        by_card.entry(key).or_default().push((path, journal, last));
    }

    let mut any_missing = false;
    let mut any_interrupted = false;
    let mut started_at: Option<String> = None;
    let mut finished_at: Option<String> = None;
    let mut cards: Vec<Card> = Vec::new();
    let mut content_nonce = None;

    let pruned = folder.pruned();
    for card_plan in &plan.cards {
        let Some(target) = experiment.target(&card_plan.target) else {
            continue;
        };
        let workload = experiment.workload(&card_plan.workload);
        if workload.is_none() && card_plan.mix.is_none() {
            continue;
        }
        let journals = by_card
            .remove(&(card_plan.target.clone(), card_plan.workload.clone()))
            .unwrap_or_default();
        let mut model = None;
        let mut prompt_sizing = None;
        let mut cache_reset = None;
        let mut telemetry_off = None;
        let mut clock = None;
        let mut context_window = None;
        let mut dialect = None;
        let mut sharded: Vec<(String, Vec<exec::ShardClock>)> = Vec::new();
        let mut closed = Vec::new();
        let mut open = Vec::new();
        let mut times = Vec::new();
        for (path, journal, last_completed_ms) in &journals {
            let Some(header) = &journal.header else {
                continue;
            };
            times.push(run_times(journal, *last_completed_ms));
            if model.is_none() {
                model = Some(header.model.clone());
            }
            if prompt_sizing.is_none() {
                prompt_sizing.clone_from(&header.prompt_sizing);
            }
            if cache_reset.is_none() {
                cache_reset.clone_from(&header.prefix_cache_reset);
            }
            if telemetry_off.is_none() {
                telemetry_off.clone_from(&header.telemetry_off);
            }
            if clock.is_none() {
                clock.clone_from(&header.clock);
            }
            if context_window.is_none() {
                context_window.clone_from(&header.context_window);
            }
            if dialect.is_none() {
                dialect.clone_from(&header.dialect);
            }
            if !header.shards.is_empty() {
                sharded.push((header.run.id.clone(), header.shards.clone()));
            }
            if content_nonce.is_none() && header.content_nonce != 0 {
                content_nonce = Some(header.content_nonce);
            }
            if started_at
                .as_deref()
                .is_none_or(|s| header.started_at.as_str() < s)
            {
                started_at = Some(header.started_at.clone());
            }
            match &journal.footer {
                Some(f) => {
                    any_interrupted |= f.interrupted;
                    if finished_at
                        .as_deref()
                        .is_none_or(|s| f.finished_at.as_str() > s)
                    {
                        finished_at = Some(f.finished_at.clone());
                    }
                }
                None => any_interrupted = true,
            }
            let summary =
                summarize_run_file(folder, path, (journal, *last_completed_ms), experiment)?;
            match header.run.mode {
                Mode::Closed => closed.push(summary),
                Mode::Open => open.push(summary),
            }
        }
        closed.sort_by_key(|s| (s.concurrency.unwrap_or(0), s.repetition));
        // A level can have an extension beside its run (`<id>--ext`,
        // longer, for a conclusive verdict): the longest complete journal
        // at a level measures it; an extension cut short leaves the run's
        // own. Every journal stays on disk.
        closed.dedup_by(|later, earlier| {
            (later.concurrency, later.repetition) == (earlier.concurrency, earlier.repetition) && {
                keep_better(earlier, later);
                true
            }
        });
        let open = every_open_run(open);

        let planned_closed = card_plan.closed.len();
        if closed.len() < planned_closed {
            any_missing = true;
        }
        if let crate::plan::OpenPlan::Grid { runs } = &card_plan.open {
            let done = runs
                .iter()
                .filter(|r| match r.load {
                    Load::Rate { rate, .. } => open
                        .iter()
                        .any(|s| s.rate_rps == Some(rate.0) && s.repetition.0 == r.repetition),
                    Load::Concurrency { .. } => true,
                })
                .count();
            if done < runs.len() {
                any_missing = true;
            }
        }
        let mut card = match (&card_plan.mix, workload) {
            (Some(mix), _) => {
                analyze::card::build_mix_card(experiment, target, mix, model, closed, open)
            }
            (None, Some(workload)) => {
                analyze::card::build_card(experiment, target, workload, model, closed, open)
            }
            (None, None) => continue,
        };
        card.wall_time = Some(analyze::wall_time::card_wall_time(
            (
                Some(card_plan.expected_wall_time_s),
                card_plan.bound_wall_time_s,
            ),
            &times,
            clock.is_some(),
        ));
        card.target_info.prompt_sizing = prompt_sizing;
        card.target_info.prefix_cache_reset = cache_reset;
        card.target_info.telemetry_off = telemetry_off;
        card.target_info.clock = clock;
        card.target_info.dialect = dialect;
        let runs: Vec<(&str, &[exec::ShardClock])> = sharded
            .iter()
            .map(|(id, shards)| (id.as_str(), shards.as_slice()))
            .collect();
        if let Some(note) = crate::analyze::sharding::sharding_note(&runs) {
            card.target_info.load_generator = Some(note.sentence);
            card.target_info.load_generator_warning = note.warning;
        }
        card.target_info.context_fit = context_fit(experiment, card_plan, context_window.as_ref());
        card.target_info.context_window = context_window;
        card.target_info.server = folder.server_record(&card.target);
        card.target_info.pruned = pruned.get(&card.target).cloned();
        cards.push(card);
    }

    let status = match status_override {
        Some(s) => s.to_string(),
        None => folder.recorded_status().unwrap_or_else(|| {
            if any_interrupted {
                "interrupted".to_string()
            } else if any_missing {
                "partial".to_string()
            } else {
                "complete".to_string()
            }
        }),
    };
    if let Some(entries) = folder.audit()? {
        for card in &mut cards {
            for cr in &mut card.cr_open {
                cr.audit = analyze::audited::quote(&entries, experiment, &card.workload, &cr.slo);
            }
        }
    }
    let mut report =
        analyze::card::build_report(experiment, cards, &status, started_at, finished_at);
    report.content_nonce = content_nonce;
    Ok(report)
}

/// `capcard report DIR --audit FILE`: the audit (`capcard audit --json`)
/// checked against the folder's experiment and copied in as
/// [`AUDIT_FILE`], so that every card rendered from the folder from now on
/// quotes it. Refused when none of its rows is of this experiment's
/// settings (the reasons row by row); the number of rows that are.
pub fn attach_audit(dir: &Path, audit: &Path) -> Result<usize, FolderError> {
    let folder = ResultsFolder::new(dir);
    let experiment = folder.load_experiment()?;
    let text = fs::read_to_string(audit).map_err(io_err(audit))?;
    let entries = analyze::audited::parse(&text).map_err(|message| FolderError::Audit {
        path: audit.to_path_buf(),
        message,
    })?;
    let reasons: Vec<String> = entries
        .iter()
        .filter_map(|e| analyze::audited::mismatch(e, &experiment))
        .collect();
    let matched = entries.len() - reasons.len();
    if matched == 0 {
        return Err(FolderError::Audit {
            path: audit.to_path_buf(),
            message: if reasons.is_empty() {
                "it has no rows".to_string()
            } else {
                format!(
                    "no row is of this folder's experiment: {}",
                    reasons.join("; ")
                )
            },
        });
    }
    write(&folder.audit_file(), &text)?;
    Ok(matched)
}

/// What a journal says about its run's time: its header's `started_at` to
/// its footer's `finished_at` (wall clock), and the end of its measured
/// window since its start, or its last completion without a footer (its own
/// clock: the engine's in virtual time).
/// A journal's RFC 3339 time in ms since the epoch (the parser `capcard
/// profile` reads log timestamps with).
fn rfc3339_ms(text: &str) -> Option<f64> {
    crate::time::rfc3339_seconds(text).map(|s| s * 1000.0)
}

fn run_times(journal: &Journal, last_completed_ms: f64) -> analyze::wall_time::RunTimes {
    let start = journal
        .header
        .as_ref()
        .and_then(|h| rfc3339_ms(&h.started_at));
    let end = journal
        .footer
        .as_ref()
        .and_then(|f| rfc3339_ms(&f.finished_at));
    let window_end_ms = journal
        .footer
        .as_ref()
        .map_or(0.0, |f| f.measured_window_ms[1]);
    analyze::wall_time::RunTimes {
        wall_ms: start.zip(end).map(|(s, e)| [s, e]),
        last_event_ms: last_completed_ms.max(window_end_ms),
    }
}

/// The open runs that are points of the Cr_open fit, sorted by rate: every
/// complete one (revisits, repetitions, an extension *and* the run it
/// extended, each with its own request stream). Only an incomplete journal
/// gives way, to the complete one of the same run or its extension
/// ([`keep_better`]).
///
/// Keeping one run per rate (the longest window), as this did until
/// 2026-12-08, threw away a search's revisits: the card's fit was not the
/// one the search stopped on (on an audit's lognormal queue, 12 of 32
/// runs), and it chose among them by the data, since a run the watch
/// decided early in a burst beyond the bound is shorter than a quiet one
/// at the same rate; a grid run gave way to its extension only when its
/// own counts were inconclusive. docs/measuring.md ("Extensions") had said
/// all along that both are points (BENCHMARKS.md, "Session 2026-12-08").
fn every_open_run(mut open: Vec<analyze::RunSummary>) -> Vec<analyze::RunSummary> {
    fn stem(s: &analyze::RunSummary) -> (&str, analyze::Repetition) {
        let id = s.run_id.strip_suffix("--ext").unwrap_or(&s.run_id);
        (id, s.repetition)
    }
    open.sort_by(|a, b| stem(a).cmp(&stem(b)).then(a.incomplete.cmp(&b.incomplete)));
    open.dedup_by(|later, earlier| {
        stem(later) == stem(earlier) && (later.incomplete || earlier.incomplete) && {
            keep_better(earlier, later);
            true
        }
    });
    open.sort_by(|a, b| {
        a.rate_rps
            .unwrap_or(0.0)
            .total_cmp(&b.rate_rps.unwrap_or(0.0))
            .then(a.repetition.cmp(&b.repetition))
            .then(a.run_id.cmp(&b.run_id))
    });
    open
}

/// Of two summaries of the same level or run, keep in `kept` the one that
/// measures it: complete before incomplete, then the longer window.
fn keep_better(kept: &mut analyze::RunSummary, other: &mut analyze::RunSummary) {
    let better = match (other.incomplete, kept.incomplete) {
        (false, true) => true,
        (true, false) => false,
        _ => other.window_s > kept.window_s,
    };
    if better {
        std::mem::swap(kept, other);
    }
}

/// The SLOs a run is judged on: its card's ([`crate::plan::workload_slos`]:
/// every SLO, or for a workload a mix measures alone, its classes'), and
/// for a run of a mix every SLO, from which each class takes its own.
fn judged_slos(
    experiment: &Experiment,
    run: Option<&crate::plan::RunPlan>,
) -> Vec<crate::config::Slo> {
    let names = match run {
        Some(run) if run.mix.is_none() => crate::plan::workload_slos(experiment, &run.workload),
        _ => None,
    };
    match names {
        Some(names) => experiment.slos_named(&names),
        None => experiment.slos.clone(),
    }
}

/// [`summarize_run`] on the journal at `path`, streamed line by line: the
/// run's summary in memory that does not grow with the run. `ends` are its
/// header and footer (from [`ResultsFolder::journal_ends`]).
pub fn summarize_run_file(
    folder: &ResultsFolder,
    path: &Path,
    (ends, last_completed_ms): (&Journal, f64),
    experiment: &Experiment,
) -> Result<analyze::RunSummary, FolderError> {
    use crate::analyze::summary::{JournalEnds, Summarizer, window_from_ends};
    let extra: Vec<_> = experiment.closed.iter().map(|c| c.crossp.stat).collect();
    let header = ends.header.as_ref();
    let footer = ends.footer.as_ref();
    let window = window_from_ends(header, footer, last_completed_ms);
    let confidence = experiment
        .open
        .as_ref()
        .map_or(analyze::interval::DEFAULT_CONFIDENCE, |o| o.confidence.0);
    let slos = judged_slos(experiment, header.map(|h| &h.run));
    let frontier = frontier_multipliers(experiment);
    let key = footer.and_then(|_| {
        let telemetry = header.map(|h| folder.telemetry(&h.run.id));
        summary_key(
            path,
            telemetry.as_deref(),
            &format!("{slos:?}{extra:?}{confidence}{frontier:?}"),
        )
    });
    if let Some(summary) = key.as_ref().and_then(cached_summary) {
        return Ok(summary);
    }
    let pass = |window| -> Result<Summarizer<'_>, FolderError> {
        let mut acc = Summarizer::new(
            JournalEnds { header, footer },
            window,
            &slos,
            &extra,
            confidence,
            frontier,
        );
        exec::stream_journal(path, |line| match line {
            exec::JournalLine::Request(r) => acc.request(&r),
            exec::JournalLine::Task(t) => acc.task(&t),
            exec::JournalLine::Run(_) | exec::JournalLine::End(_) => {}
        })
        .map_err(|e| FolderError::Journal {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(acc)
    };
    // A start that was not yet steady extends the warmup: a second pass
    // over the journal from where the steady state begins.
    let first = pass(window)?;
    let mut summary = match first.steady_start_ms() {
        Some(from) => pass(window.starting_at(from))?.finish(),
        None => first.finish(),
    };
    if let Some(header) = header {
        let bounds = match footer {
            Some(f) => f.measured_window_ms,
            None => [header.measure_from_ms, last_completed_ms],
        };
        if let Ok(series) = exec::telemetry::read_series(&folder.telemetry(&header.run.id)) {
            summary.server = analyze::telemetry::signals(&series, bounds);
        }
    }
    if let Some(key) = key {
        keep_summary(key, &summary);
    }
    Ok(summary)
}

/// What a finished journal's summary depends on: the journal and its
/// telemetry file as they are on disk (path, size, modification time) and
/// what it is judged on. `None` when a file's metadata cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SummaryKey {
    journal: (PathBuf, u64, std::time::SystemTime),
    telemetry: Option<(u64, std::time::SystemTime)>,
    judged_on: u64,
}

fn summary_key(journal: &Path, telemetry: Option<&Path>, judged_on: &str) -> Option<SummaryKey> {
    use std::hash::{Hash, Hasher};
    let stamp = |path: &Path| {
        let meta = fs::metadata(path).ok()?;
        Some((meta.len(), meta.modified().ok()?))
    };
    let (len, modified) = stamp(journal)?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    judged_on.hash(&mut hasher);
    Some(SummaryKey {
        journal: (journal.to_path_buf(), len, modified),
        telemetry: telemetry.and_then(stamp),
        judged_on: hasher.finish(),
    })
}

/// Summaries of finished journals read in this process. `capcard run`
/// re-renders the folder after every run, and a long search would otherwise
/// re-read every earlier journal each time (quadratic in the runs; most of a
/// virtual-time run's CPU). A journal that changed on disk misses.
static SUMMARIES: std::sync::Mutex<
    Option<std::collections::HashMap<SummaryKey, analyze::RunSummary>>,
> = std::sync::Mutex::new(None);

fn cached_summary(key: &SummaryKey) -> Option<analyze::RunSummary> {
    let cache = SUMMARIES.lock().ok()?;
    cache.as_ref()?.get(key).cloned()
}

fn keep_summary(key: SummaryKey, summary: &analyze::RunSummary) {
    if let Ok(mut cache) = SUMMARIES.lock() {
        cache
            .get_or_insert_with(Default::default)
            .insert(key, summary.clone());
    }
}

/// Summarise one journal with everything the experiment will ask of it:
/// its SLOs, and the CrossP statistic when it is not a standard percentile.
/// The server's view, from the run's telemetry file, joins it over the same
/// measured window.
pub fn summarize_run(
    folder: &ResultsFolder,
    journal: &Journal,
    experiment: &Experiment,
) -> analyze::RunSummary {
    let extra: Vec<_> = experiment.closed.iter().map(|c| c.crossp.stat).collect();
    let confidence = experiment
        .open
        .as_ref()
        .map_or(analyze::interval::DEFAULT_CONFIDENCE, |o| o.confidence.0);
    let slos = judged_slos(experiment, journal.header.as_ref().map(|h| &h.run));
    let mut summary = analyze::summary::summarize_judged(
        journal,
        &slos,
        &extra,
        confidence,
        frontier_multipliers(experiment),
    );
    if let Some(header) = &journal.header {
        let path = folder.telemetry(&header.run.id);
        // A missing or unreadable telemetry file means "no telemetry for this
        // point", which the card reports; it never hides the measurements.
        if let Ok(series) = exec::telemetry::read_series(&path) {
            let window = journal.footer.as_ref().map_or_else(
                || {
                    let last = journal
                        .requests
                        .iter()
                        .map(|r| r.completed_ms)
                        .fold(0.0, f64::max);
                    [header.measure_from_ms, last]
                },
                |f| f.measured_window_ms,
            );
            summary.server = analyze::telemetry::signals(&series, window);
        }
    }
    summary
}

/// The experiment's `frontier` multipliers (`open`): every summary counts
/// its percentile clauses at those bounds too, beside the default ladder.
fn frontier_multipliers(experiment: &Experiment) -> &[f64] {
    experiment.open.as_ref().map_or(&[][..], |o| &o.frontier)
}

/// Search ceiling of an open spec (`None` for grids), for "Cr_open ≥ max".
pub fn search_max(open: Option<&OpenSpec>) -> Option<f64> {
    match open.map(|o| &o.rates) {
        Some(RateSelection::Search { max, .. }) => Some(max.0),
        _ => None,
    }
}

/// What [`write_outputs`] wrote.
#[derive(Debug, Default)]
pub struct Written {
    pub cards: Vec<PathBuf>,
    pub charts: Vec<PathBuf>,
    pub summary: Option<PathBuf>,
    pub results: Option<PathBuf>,
}

/// Write results.json, every card, its charts and the summary into the folder.
pub fn write_outputs(
    folder: &ResultsFolder,
    report_model: &CapacityReport,
    templates: &Templates,
) -> Result<Written, FolderError> {
    let mut written = Written::default();
    let results_path = folder.results();
    write(&results_path, &report::results_json(report_model))?;
    written.results = Some(results_path);
    for card in &report_model.cards {
        let md = report::render_card(report_model, card, templates)
            .map_err(|e| FolderError::Render(e.to_string()))?;
        let path = folder.dir.join(report::card_file_name(card));
        write(&path, &md)?;
        written.cards.push(path);
        for chart in report::charts(card) {
            let path = folder.dir.join(&chart.file_name);
            write(&path, &chart.svg)?;
            written.charts.push(path);
        }
    }
    for comparison in &report_model.settings {
        for chart in report::settings_chart::charts(comparison) {
            let path = folder.dir.join(&chart.file_name);
            write(&path, &chart.svg)?;
            written.charts.push(path);
        }
    }
    if let Some(summary) = report::render_summary(report_model, templates)
        .map_err(|e| FolderError::Render(e.to_string()))?
    {
        let path = folder.dir.join(SUMMARY_FILE);
        write(&path, &summary)?;
        written.summary = Some(path);
    }
    Ok(written)
}

/// Write via a temporary file and rename, so a reader never sees half a file.
pub fn write(path: &Path, contents: &str) -> Result<(), FolderError> {
    let tmp = path.with_extension("tmp~");
    fs::write(&tmp, contents).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

/// The folder's report, recomputed from its journals (as `capcard report`
/// does: journals are the truth, and an old folder gets today's analysis).
pub fn load_report(folder: &ResultsFolder) -> Result<CapacityReport, FolderError> {
    let experiment = folder.load_experiment()?;
    let plan_text = fs::read_to_string(folder.plan()).map_err(io_err(&folder.plan()))?;
    let plan: Plan = serde_json::from_str(&plan_text).map_err(|e| FolderError::Journal {
        path: folder.plan(),
        message: e.to_string(),
    })?;
    recompute(folder, &experiment, &plan, None)
}

/// The built-in templates, or the user's card template in their place.
fn templates_for(template: Option<&Path>) -> Result<Templates, FolderError> {
    match template {
        Some(path) => {
            Templates::with_card_template(path).map_err(|e| FolderError::Render(e.to_string()))
        }
        None => Ok(Templates::builtin()),
    }
}

/// `capcard report DIR [--template FILE] [--out FILE]`: recompute the report
/// from the folder's journals and render it. With `out`, the card(s) go to
/// that one file (the summary first when there are several cards) and the
/// folder is left untouched.
pub fn rerender(
    dir: &Path,
    template: Option<&Path>,
    out: Option<&Path>,
) -> Result<Written, FolderError> {
    let folder = ResultsFolder::new(dir);
    let templates = templates_for(template)?;
    let report_model = load_report(&folder)?;
    match out {
        None => write_outputs(&folder, &report_model, &templates),
        Some(path) => {
            let mut text = String::new();
            if let Some(summary) = report::render_summary(&report_model, &templates)
                .map_err(|e| FolderError::Render(e.to_string()))?
            {
                text.push_str(&summary);
                text.push('\n');
            }
            for card in &report_model.cards {
                let md = report::render_card(&report_model, card, &templates)
                    .map_err(|e| FolderError::Render(e.to_string()))?;
                text.push_str(&md);
            }
            write(path, &text)?;
            Ok(Written {
                cards: vec![path.to_path_buf()],
                ..Written::default()
            })
        }
    }
}

/// `capcard report DIR --html [--out FILE]`: the folder's report, recomputed
/// as [`rerender`] does, written as one self-contained page to FILE (default
/// `DIR/report.html`); the cards and charts in the folder are left as they are.
pub fn write_html(
    dir: &Path,
    template: Option<&Path>,
    out: Option<&Path>,
) -> Result<PathBuf, FolderError> {
    let folder = ResultsFolder::new(dir);
    let templates = templates_for(template)?;
    let report_model = load_report(&folder)?;
    let page = report::html::render_page(&report_model, &templates)
        .map_err(|e| FolderError::Render(e.to_string()))?;
    let path = out.map_or_else(
        || folder.dir.join(report::html::HTML_FILE_NAME),
        Path::to_path_buf,
    );
    write(&path, &page)?;
    Ok(path)
}

/// The card's workloads (a mix's classes) against the window its runs met:
/// the sentence of the first that can exceed it, for the Conditions table.
fn context_fit(
    experiment: &Experiment,
    card_plan: &crate::plan::CardPlan,
    window: Option<&crate::plan::context::ContextWindow>,
) -> Option<String> {
    let window = window?;
    crate::plan::context::card_overflows(experiment, card_plan, window)
        .into_iter()
        .next()
        .map(|(name, fit)| fit.describe(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_rate(id: &str, window_s: f64, incomplete: bool) -> analyze::RunSummary {
        analyze::RunSummary {
            run_id: id.into(),
            rate_rps: Some(2.0),
            window_s,
            incomplete,
            ..Default::default()
        }
    }

    #[test]
    fn the_longest_complete_journal_measures_a_rate() {
        // A finished extension supersedes its run.
        let mut kept = at_rate("r2", 60.0, false);
        keep_better(&mut kept, &mut at_rate("r2--ext", 240.0, false));
        assert_eq!(kept.run_id, "r2--ext");
        // An extension cut short (Ctrl-C) leaves the run's own measurement.
        let mut kept = at_rate("r2", 60.0, false);
        keep_better(&mut kept, &mut at_rate("r2--ext", 90.0, true));
        assert_eq!(kept.run_id, "r2");
        // Two incomplete ones: the longer.
        let mut kept = at_rate("r2", 10.0, true);
        keep_better(&mut kept, &mut at_rate("r2--ext", 30.0, true));
        assert_eq!(kept.run_id, "r2--ext");
    }

    #[test]
    fn every_complete_open_run_is_a_point_revisits_and_extended_runs_included() {
        let ids = |runs: Vec<analyze::RunSummary>| -> Vec<String> {
            every_open_run(runs).into_iter().map(|s| s.run_id).collect()
        };
        // A search's revisits of one rate, one of them decided early (a
        // shorter window): all of them, whatever their windows.
        let revisits = vec![
            at_rate("r2--v3", 12.0, false),
            at_rate("r2", 30.0, false),
            at_rate("r2--v2", 30.0, false),
        ];
        assert_eq!(ids(revisits), ["r2", "r2--v2", "r2--v3"]);
        // A grid run and its extension: both.
        let extended = vec![at_rate("r2--ext", 120.0, false), at_rate("r2", 30.0, false)];
        assert_eq!(ids(extended), ["r2", "r2--ext"]);
        // An extension cut short gives way to its run, and an interrupted
        // run to its finished extension; a revisit is not either's.
        let cut = vec![
            at_rate("r2--ext", 90.0, true),
            at_rate("r2", 30.0, false),
            at_rate("r2--v2", 30.0, false),
        ];
        assert_eq!(ids(cut), ["r2", "r2--v2"]);
        let interrupted = vec![at_rate("r2", 10.0, true), at_rate("r2--ext", 120.0, false)];
        assert_eq!(ids(interrupted), ["r2--ext"]);
    }
}
