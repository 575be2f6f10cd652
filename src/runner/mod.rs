//! `capcard run`: drives a plan to a results folder.
//!
//! The stages of a run, a file each: [`targets`] makes every target ready
//! (and the preflight settles its dialect), [`drive`] runs the cards,
//! [`inputs`] says what each run sends, [`limits`] raises the OS limits a
//! run needs, and [`shards`] plays a part in a sharded experiment. This file
//! holds the request, the errors and the order of it all.
//!
//! Order per card (target × workload): the closed sweep, then CrossP and
//! Cr_closed from it, then the open runs — an explicit grid, or the Cr_open
//! search, whose next rate depends on the last verdict (the plan holds the
//! search as a rule; this loop resolves it with `analyze::search`).
//! After every run the journals are re-read and results.json and the cards
//! rewritten, so whatever happens next, the folder on disk renders.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigError, Experiment};
use crate::folder::{self, FolderError, ResultsFolder};
use crate::plan::{self, CardPlan, Mode, OpenPlan, Plan};
use crate::report::Templates;

mod drive;
mod inputs;
mod launched;
mod limits;
mod shards;
mod targets;
mod tune;

use drive::*;
use inputs::*;
use limits::*;
use targets::*;
pub use targets::{ProbeFindings, ProbeOutcome, ProbeReport, probe};

/// What `capcard run` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub experiment_path: PathBuf,
    /// The experiment's text, when it is not the file's as it stands
    /// (`capcard audit` runs the same file at other seeds); relative paths
    /// in it still resolve from `experiment_path`'s folder.
    pub source: Option<String>,
    pub out: Option<PathBuf>,
    pub only: Option<Mode>,
    pub target: Option<String>,
    pub workload: Option<String>,
    pub resume: Option<PathBuf>,
    pub show_progress: bool,
    /// Content nonce to draw prompts with; `None` = a new one (a resumed
    /// folder keeps its own).
    pub nonce: Option<u64>,
    /// `--virtual`: every `sim` target runs on the engine's own clock
    /// (endpoint targets are refused).
    pub virtual_time: bool,
    /// Run as one of several processes (see [`crate::shard`]).
    pub shard: Option<ShardMode>,
}

/// How this process shares the experiment with others.
#[derive(Debug, Clone)]
pub enum ShardMode {
    /// `--shard I/N --start-at T`: this shard's part of every run of a
    /// timetable from `T`, into a folder of its own (`capcard merge`).
    Timetable {
        part: plan::shard::ShardPart,
        start_at: std::time::SystemTime,
    },
    /// `--shard I/N --coordinator URL`: this shard's part of every run the
    /// coordinator hands out.
    Worker {
        part: plan::shard::ShardPart,
        coordinator: String,
    },
    /// `--coordinate N`: plan and judge every run, executed by N shards;
    /// `timing` says when a shard is lost and how far ahead runs start.
    Coordinator {
        count: u32,
        listen: SocketAddr,
        timing: crate::shard::coordinator::Timing,
    },
}

#[derive(Debug, Error, miette::Diagnostic)]
pub enum RunError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] Box<ConfigError>),
    #[error("{0}")]
    #[diagnostic(code(capcard::usage))]
    Usage(String, #[help] Option<String>),
    #[error("target `{target}` is not reachable at {url}: {message}")]
    #[diagnostic(
        code(capcard::unreachable),
        help("start the server first, or check `endpoint` in the experiment; nothing was run")
    )]
    Unreachable {
        target: String,
        url: String,
        message: String,
    },
    #[error(
        "target `{target}` refused capcard's first call, so nothing was measured ({calls} call{} sent): {conclusion}\n  the server said: {quote}",
        if *calls == 1 { "" } else { "s" }
    )]
    #[diagnostic(code(capcard::preflight), help("{help}"))]
    Refused {
        target: String,
        calls: u32,
        quote: String,
        conclusion: String,
        help: String,
    },
    #[error("could not start the simulated engine for target `{target}`: {message}")]
    #[diagnostic(code(capcard::sim))]
    Sim { target: String, message: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Folder(#[from] FolderError),
    #[error("run {run_id} could not be carried out: {message}")]
    #[diagnostic(code(capcard::exec))]
    Exec { run_id: String, message: String },
    #[error("run {run_id}: {message}")]
    #[diagnostic(
        code(capcard::shards),
        help(
            "what the shards measured is in {}: the run is kept without a footer, so the card \
             marks it incomplete; continue with `--resume {}` once every shard is up again",
            dir.display(), dir.display()
        )
    )]
    Shards {
        run_id: String,
        message: String,
        dir: PathBuf,
    },
    #[error("interrupted: what was measured is in {}", dir.display())]
    #[diagnostic(
        code(capcard::interrupted),
        help("render it with `capcard report {}`, or continue with `capcard run FILE --resume {}`", dir.display(), dir.display())
    )]
    Interrupted { dir: PathBuf },
}

impl RunError {
    /// SPEC §4: 1 invalid input or usage; 2 a run could not be carried out.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Config(_) | RunError::Usage(..) => 1,
            RunError::Folder(FolderError::Config(_)) => 1,
            _ => 2,
        }
    }
}

/// What a finished `run` produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub dir: PathBuf,
    pub written: folder::Written,
    /// Runs where most calls failed (not measurements): `capcard run` exits 4.
    pub invalid_runs: Vec<String>,
    /// The most frequent failure of the invalid runs, quoted.
    pub top_failure: Option<String>,
    /// Runs a provider's quota capped (warned about; not an exit code).
    pub rate_limited_runs: Vec<String>,
}

impl RunOutcome {
    /// SPEC §4: 0, or 4 when at least one run was invalid.
    pub fn exit_code(&self) -> i32 {
        if self.invalid_runs.is_empty() { 0 } else { 4 }
    }
}

/// Execute `request`, reporting progress lines to `log`.
pub async fn run(
    request: &RunRequest,
    cancel: CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<RunOutcome, RunError> {
    let (source, experiment) = match &request.source {
        Some(text) => (
            text.clone(),
            config::parse_with_data(text, &request.experiment_path).map_err(Box::new)?,
        ),
        None => load_source(&request.experiment_path)?,
    };
    let full_plan = plan::build(&experiment);
    let selected = select(&full_plan, &experiment, request)?;
    if let Some(mode) = &request.shard {
        if let Some(card) = selected.cards.iter().find(|c| {
            experiment
                .target(&c.target)
                .is_some_and(|t| t.launch.is_some())
        }) {
            return Err(RunError::Usage(
                format!(
                    "target `{}` launches its engine: a sharded run measures servers that are already up",
                    card.target
                ),
                Some(
                    "start the server yourself and remove `launch`, or run without --shard".into(),
                ),
            ));
        }
        shards::check_mode(mode, &experiment, &selected, request)?;
        if let ShardMode::Worker { part, coordinator } = mode {
            let inputs = (source.as_str(), &experiment, &full_plan, &selected);
            return shards::serve_shard(request, *part, coordinator, inputs, &cancel, log).await;
        }
    }

    let (folder, resuming) = match &request.resume {
        Some(dir) => (ResultsFolder::new(dir), true),
        None => (
            ResultsFolder::new(request.out.clone().unwrap_or_else(|| {
                shards::default_out_dir(default_out_dir(&experiment), request.shard.as_ref())
            })),
            false,
        ),
    };
    if resuming {
        // The folder's own experiment is the one being continued.
        let stored = std::fs::read_to_string(folder.experiment())
            .map_err(|_| FolderError::NotAResultsFolder(folder.dir.clone()))?;
        if stored != source {
            return Err(RunError::Usage(
                format!(
                    "{} was made from a different experiment than {}",
                    folder.dir.display(),
                    request.experiment_path.display()
                ),
                Some("resume with the same file; start a new folder with --out".into()),
            ));
        }
    } else {
        if folder.experiment().exists() {
            return Err(RunError::Usage(
                format!("{} already holds results", folder.dir.display()),
                Some(
                    "continue it with --resume, or choose another --out; nothing is overwritten"
                        .into(),
                ),
            ));
        }
    }

    if request.virtual_time {
        refuse_endpoints_in_virtual_time(&experiment, &selected)?;
    }
    open_files_for(planned_peak_calls(&experiment), log);
    let content_nonce = if resuming {
        stored_nonce(&folder).unwrap_or(0)
    } else {
        request.nonce.unwrap_or_else(fresh_nonce)
    };

    // Start sims and probe endpoints before any run: an unreachable target
    // is an error now, not thirty failed runs later.
    let mut live: BTreeMap<String, LiveTarget> = BTreeMap::new();
    for card in &selected.cards {
        if live.contains_key(&card.target) {
            continue;
        }
        let Some(target) = experiment.target(&card.target) else {
            continue;
        };
        // A launched engine, or a setting `tune` may skip, is made ready
        // in its turn, after the others.
        if measured_in_turn(&experiment, target) {
            continue;
        }
        let prepared = match virtual_target(target, &experiment, request.virtual_time)? {
            Some(virtual_target) => prepare_virtual(target, virtual_target),
            None => {
                let mut prepared = prepare_target(target, &experiment, log).await?;
                let nonce = crate::hash::mix(content_nonce, PREFLIGHT_STREAM);
                if let Err(e) = preflight(&mut prepared, &experiment, card, nonce, log).await {
                    shut_down(live).await;
                    shut_down(BTreeMap::from([(target.name.clone(), prepared)])).await;
                    return Err(e);
                }
                prepared
            }
        };
        announce(target, &prepared, log);
        live.insert(target.name.clone(), prepared);
    }
    if let Some(ShardMode::Timetable { part, .. }) = &request.shard
        && part.index != 0
    {
        // Every shard would scrape and reset the same server: shard 0 does.
        for target in live.values_mut() {
            target.metrics_url = None;
            target.cache_reset = None;
        }
    }

    // Only now, with every target answering, does the folder get written:
    // a failed start leaves nothing behind to trip over the next attempt.
    if !resuming {
        folder.create(&source, &full_plan)?;
        for note in folder.copy_inputs(&request.experiment_path, &source)? {
            let _ = writeln!(log, "{note}");
        }
    }
    let _ = writeln!(log, "results folder: {}", folder.dir.display());

    let templates = Templates::builtin();
    let _ = writeln!(
        log,
        "content nonce: {content_nonce} (reproduce this request stream with --nonce {content_nonce})"
    );
    let invocation = Invocation {
        resuming,
        content_nonce,
        coordinator: None,
        prune_at_or_below: None,
    };
    let outcome = match &request.shard {
        Some(ShardMode::Timetable { part, start_at }) => {
            let timetable = (*part, *start_at);
            let outcome = shards::drive_timetable(
                &experiment,
                &selected,
                (&folder, &live),
                timetable,
                invocation,
                (request, &cancel),
                log,
            )
            .await;
            // No sim to shut down: shard modes refuse sim targets.
            return shards::timetable_outcome(outcome, &folder, *part, &cancel, log);
        }
        Some(ShardMode::Coordinator {
            count,
            listen,
            timing,
        }) => {
            let coordinator = shards::start_coordinator(
                (*count, *listen, *timing),
                &source,
                content_nonce,
                &folder,
                &cancel,
                log,
            )
            .await?;
            let outcome = match &coordinator {
                Some(coordinator) => {
                    drive(
                        &experiment,
                        &full_plan,
                        &selected,
                        &folder,
                        &live,
                        Invocation {
                            coordinator: Some(coordinator),
                            ..invocation
                        },
                        request,
                        &cancel,
                        log,
                    )
                    .await
                }
                None => Ok(()),
            };
            if let Some(coordinator) = coordinator {
                let status = if outcome.is_err() || cancel.is_cancelled() {
                    "interrupted"
                } else {
                    "complete"
                };
                coordinator.finish(status).await;
            }
            outcome
        }
        Some(ShardMode::Worker { .. }) | None => {
            let outcome = drive(
                &experiment,
                &full_plan,
                &selected,
                &folder,
                &live,
                invocation,
                request,
                &cancel,
                log,
            )
            .await;
            shut_down(std::mem::take(&mut live)).await;
            match outcome {
                Ok(()) => {
                    launched_turns(
                        (&experiment, &full_plan, &selected),
                        &folder,
                        invocation,
                        request,
                        &cancel,
                        log,
                    )
                    .await
                }
                Err(e) => Err(e),
            }
        }
    };

    shut_down(live).await;

    let interrupted = cancel.is_cancelled();
    let status = match &outcome {
        Ok(()) if interrupted => "interrupted",
        Ok(()) => "complete",
        Err(_) => "interrupted",
    };
    let report_model = folder::recompute(&folder, &experiment, &full_plan, Some(status))?;
    let written = folder::write_outputs(&folder, &report_model, &templates)?;
    outcome?;
    if interrupted {
        return Err(RunError::Interrupted {
            dir: folder.dir.clone(),
        });
    }
    let runs = || {
        report_model
            .cards
            .iter()
            .flat_map(|c| c.closed.iter().chain(&c.open))
    };
    let invalid_runs = runs()
        .filter(|s| s.invalid)
        .map(|s| s.run_id.clone())
        .collect();
    let top_failure = crate::report::merged_details(runs().filter(|s| s.invalid))
        .first()
        .map(crate::report::quote);
    let rate_limited_runs = runs()
        .filter(|s| s.rate_limited_calls > 0)
        .map(|s| s.run_id.clone())
        .collect();
    Ok(RunOutcome {
        dir: folder.dir.clone(),
        written,
        invalid_runs,
        top_failure,
        rate_limited_runs,
    })
}

/// Targets measured one at a time, after the others: launched engines
/// (see [`launched`]) and the settings of a tuned sweep.
fn measured_in_turn(experiment: &Experiment, target: &config::Target) -> bool {
    target.launch.is_some()
        || experiment
            .sweep_of(&target.name)
            .is_some_and(|s| s.tune.is_some())
}

/// The targets measured in turn: a tuned sweep as its search orders it
/// (when every setting of it is selected), the others in the plan's order.
async fn launched_turns(
    (experiment, full_plan, selected): (&Experiment, &Plan, &Plan),
    folder: &ResultsFolder,
    invocation: Invocation<'_>,
    request: &RunRequest,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let templates = Templates::builtin();
    let mut targets: Vec<&str> = Vec::new();
    for card in &selected.cards {
        if !targets.contains(&card.target.as_str()) {
            targets.push(&card.target);
        }
    }
    let mut tuned: Vec<&str> = Vec::new();
    for name in &targets {
        if cancel.is_cancelled() {
            break;
        }
        let Some(target) = experiment
            .target(name)
            .filter(|t| measured_in_turn(experiment, t))
        else {
            continue;
        };
        let sweep = experiment.sweep_of(name).filter(|s| {
            s.tune.is_some() && s.settings.iter().all(|t| targets.contains(&t.as_str()))
        });
        if let Some(sweep) = sweep {
            if !tuned.contains(&sweep.target.as_str()) {
                tuned.push(&sweep.target);
                let turns = (experiment, full_plan, selected, folder);
                tune::run(sweep, turns, invocation, request, cancel, log).await?;
            }
            continue;
        }
        let turn = launched::take_turn(
            target, experiment, full_plan, selected, folder, invocation, request, cancel, log,
        )
        .await?;
        refresh(folder, experiment, full_plan, &templates)?;
        if matches!(turn, launched::Turn::Interrupted) {
            break;
        }
    }
    Ok(())
}

/// One line per target made ready: where, which model, what it accepts.
fn announce(target: &config::Target, prepared: &LiveTarget, log: &mut (dyn Write + Send)) {
    let _ = writeln!(
        log,
        "target {}: {} (model {}; telemetry {}{})",
        target.name,
        prepared.endpoint.base_url,
        prepared.endpoint.model,
        prepared.metrics_url.as_deref().unwrap_or("off"),
        match (&prepared.token_ids, &prepared.token_id_refusal) {
            (Some(r), _) => format!("; prompts as token ids {}..={}", r.min, r.max),
            (None, Some(why)) => format!("; token-id prompts refused ({why}): text prompts"),
            (None, None) => String::new(),
        }
    );
}

/// What holds for every run of one `capcard run`.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    /// Finished runs of the folder are kept.
    resuming: bool,
    content_nonce: u64,
    /// `--coordinate N`: runs are executed by the shards.
    coordinator: Option<&'a crate::shard::coordinator::Coordinator>,
    /// `tune`: stop a card's Cr_open search for this SLO once a rate fails
    /// at or below this one (the best setting's conclusive lower bound).
    prune_at_or_below: Option<(&'a str, f64)>,
}

/// A nonce no earlier invocation is likely to have used: the clock and the
/// process id, mixed. Not secret, just different each time.
fn fresh_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Never 0: 0 is the library's reproducible default.
    crate::hash::mix(nanos, u64::from(std::process::id())).max(1)
}

/// The nonce a results folder's runs were drawn with (for `--resume`).
fn stored_nonce(folder: &ResultsFolder) -> Option<u64> {
    folder
        .journals()
        .ok()?
        .into_iter()
        .find_map(|(_, journal)| journal.header.map(|h| h.content_nonce).filter(|&n| n != 0))
}

fn load_source(path: &Path) -> Result<(String, Experiment), RunError> {
    let source = std::fs::read_to_string(path).map_err(|source| {
        RunError::Folder(FolderError::Io {
            path: path.to_path_buf(),
            source,
        })
    })?;
    let experiment = config::parse_with_data(&source, path).map_err(Box::new)?;
    Ok((source, experiment))
}

/// Apply `--target`, `--workload` and `--only` to the plan.
pub fn select(
    plan: &Plan,
    experiment: &Experiment,
    request: &RunRequest,
) -> Result<Plan, RunError> {
    let check = |kind: &str, wanted: &Option<String>, names: Vec<&str>| -> Result<(), RunError> {
        if let Some(w) = wanted {
            if !names.contains(&w.as_str()) {
                return Err(RunError::Usage(
                    format!("no {kind} named `{w}` in the experiment"),
                    Some(format!("{kind}s: {}", names.join(", "))),
                ));
            }
        }
        Ok(())
    };
    // A swept target's name as written selects all its settings.
    let mut target_names: Vec<&str> = experiment.targets.iter().map(|t| t.name.as_str()).collect();
    target_names.extend(experiment.sweeps.iter().map(|s| s.target.as_str()));
    check("target", &request.target, target_names)?;
    let base_of = |name: &str| experiment.sweep_of(name).map(|s| s.target.clone());
    // A workload's card, or a mix's (at its declared weights or a setting).
    let mut cards: Vec<&str> = plan.cards.iter().map(|c| c.workload.as_str()).collect();
    cards.dedup();
    check("workload", &request.workload, cards)?;
    let mut selected = plan.clone();
    selected.cards.retain(|c: &CardPlan| {
        request
            .target
            .as_ref()
            .is_none_or(|t| *t == c.target || base_of(&c.target).as_ref() == Some(t))
            && request.workload.as_ref().is_none_or(|w| *w == c.workload)
    });
    for card in &mut selected.cards {
        match request.only {
            Some(Mode::Closed) => card.open = OpenPlan::None,
            Some(Mode::Open) => card.closed.clear(),
            None => {}
        }
    }
    Ok(selected)
}

fn default_out_dir(experiment: &Experiment) -> PathBuf {
    let stamp = crate::time::utc_stamp(std::time::SystemTime::now());
    PathBuf::from("results").join(format!("{}-{stamp}", sanitize(&experiment.name)))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}
