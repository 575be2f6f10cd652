//! `capcard run`: drives a plan to a results folder.
//!
//! Order per card (target × workload): the closed sweep, then CrossP and
//! Cr_closed from it, then the open runs — an explicit grid, or the Cr_open
//! search, whose next rate depends on the last verdict (the plan holds the
//! search as a rule; this loop resolves it with `analyze::search`).
//! After every run the journals are re-read and results.json and the cards
//! rewritten, so whatever happens next, the folder on disk renders.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::analyze::{self, RunSummary};
use crate::config::{
    self, ConfigError, Experiment, MetricsSource, StopRule, Target, TargetKind, TraceSpec,
};
use crate::exec::{self, Endpoint, RunOptions, record::Journal};
use crate::folder::{self, FolderError, ResultsFolder};
use crate::plan::{self, CardPlan, Load, Mode, OpenPlan, Plan, RunPlan};
use crate::report::Templates;
use crate::sim;
use crate::workload::classes::ClassStream;
use crate::workload::prompt::TokenIdRange;

mod shards;

/// What `capcard run` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub experiment_path: PathBuf,
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
    /// a shard silent for `lost_after` is lost.
    Coordinator {
        count: u32,
        listen: SocketAddr,
        lost_after: Duration,
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

/// A target made ready to receive requests (a sim started, a model resolved).
struct LiveTarget {
    endpoint: Endpoint,
    sim: Option<sim::SimServer>,
    /// Prometheus URL scraped during every run, if any.
    metrics_url: Option<String>,
    scrape_client: exec::HttpClient,
    /// The target's `tokenizer`, loaded: prompts sized exactly with it.
    tokenizer: Option<std::sync::Arc<crate::data::tokenizer::PromptTokenizer>>,
    /// A `completions` target that accepts token-id prompts gets them, with
    /// ids inside its vocabulary: exact prompt lengths without a tokenizer
    /// (SPEC §2, prompt lengths).
    token_ids: Option<TokenIdRange>,
    /// Why a `completions` target gets text prompts after all.
    token_id_refusal: Option<String>,
    /// Text prompts of words the server counts as one token each.
    words: Option<std::sync::Arc<crate::workload::prompt::WordList>>,
    /// The server's prefix-cache reset (a path under its root), if it has one.
    cache_reset: Option<&'static str>,
    /// Why no telemetry is scraped, for the card.
    telemetry_off: Option<String>,
    /// Runs on the engine's own clock instead of over HTTP.
    virtual_target: Option<exec::virtual_time::VirtualTarget>,
    /// The model's window: declared (sim preset, `max-context`) or reported
    /// by the server at the start.
    context_window: Option<plan::context::ContextWindow>,
    /// What the preflight settled; `None` before it, or in virtual time.
    dialect: Option<exec::Dialect>,
    /// The model ids `GET /models` listed (for the preflight's did-you-mean).
    listed_models: Vec<String>,
}

/// How often the server's `/metrics` is scraped during a run.
const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// Execute `request`, reporting progress lines to `log`.
pub async fn run(
    request: &RunRequest,
    cancel: CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<RunOutcome, RunError> {
    let (source, experiment) = load_source(&request.experiment_path)?;
    let full_plan = plan::build(&experiment);
    let selected = select(&full_plan, &experiment, request)?;
    if let Some(mode) = &request.shard {
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
            lost_after,
        }) => {
            let coordinator = shards::start_coordinator(
                (*count, *listen, *lost_after),
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
            drive(
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
            .await
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

/// What `capcard check --probe` found for one target.
#[derive(Debug)]
pub struct ProbeReport {
    pub target: String,
    pub outcome: ProbeOutcome,
}

/// One target's preflight: what it accepts, why it cannot be measured, or
/// why there was nothing to probe.
#[derive(Debug)]
pub enum ProbeOutcome {
    Accepted(ProbeFindings),
    Refused(RunError),
    /// A `sim` target in virtual time has no server: nothing to ask.
    NotProbed(String),
}

/// What a target accepts, as the preflight and the start-up probes found.
#[derive(Debug)]
pub struct ProbeFindings {
    pub base_url: String,
    pub model: String,
    pub listed_models: Vec<String>,
    pub context_window: Option<String>,
    pub telemetry: String,
    pub prompts: String,
    pub dialect: Option<exec::Dialect>,
}

/// `capcard check --probe`: every target of the file prepared and
/// preflighted exactly as `capcard run` would, and nothing measured.
/// Targets are probed one by one, each failure reported on its own.
pub async fn probe(
    path: &Path,
    log: &mut (dyn Write + Send),
) -> Result<Vec<ProbeReport>, RunError> {
    let (_, experiment) = load_source(path)?;
    let plan = plan::build(&experiment);
    let mut reports = Vec::new();
    for target in &experiment.targets {
        let Some(card) = plan.cards.iter().find(|c| c.target == target.name) else {
            continue;
        };
        if virtual_target(target, &experiment, false)?.is_some() {
            reports.push(ProbeReport {
                target: target.name.clone(),
                outcome: ProbeOutcome::NotProbed(
                    "runs in virtual time, in process: no server to probe".to_string(),
                ),
            });
            continue;
        }
        let outcome = async {
            let mut prepared = prepare_target(target, &experiment, log).await?;
            let nonce = crate::hash::mix(fresh_nonce(), PREFLIGHT_STREAM);
            let preflighted = preflight(&mut prepared, &experiment, card, nonce, log).await;
            let findings = ProbeFindings {
                base_url: prepared.endpoint.base_url.clone(),
                model: prepared.endpoint.model.clone(),
                listed_models: prepared.listed_models.clone(),
                context_window: prepared
                    .context_window
                    .as_ref()
                    .map(|w| format!("{} tokens ({})", w.tokens, w.source)),
                telemetry: match (&prepared.metrics_url, &prepared.telemetry_off) {
                    (Some(url), _) => format!("scraped from {url}"),
                    (None, Some(why)) => why.clone(),
                    (None, None) => "off".to_string(),
                },
                prompts: match (
                    &prepared.token_ids,
                    &prepared.token_id_refusal,
                    &prepared.words,
                ) {
                    (Some(r), _, _) => format!("token ids {}..={} (exact lengths)", r.min, r.max),
                    (None, Some(why), _) => format!("text (token-id prompts refused: {why})"),
                    (None, None, Some(words)) => format!(
                        "text of {} words the server's tokenizer counts as one token each",
                        words.len()
                    ),
                    (None, None, None) => "text sized by words (approximate)".to_string(),
                },
                dialect: prepared.dialect.clone(),
            };
            shut_down(BTreeMap::from([(target.name.clone(), prepared)])).await;
            preflighted.map(|()| findings)
        }
        .await;
        reports.push(ProbeReport {
            target: target.name.clone(),
            outcome: match outcome {
                Ok(findings) => ProbeOutcome::Accepted(findings),
                Err(refusal) => ProbeOutcome::Refused(refusal),
            },
        });
    }
    Ok(reports)
}

/// Stop the simulators among `live` (endpoints need nothing).
async fn shut_down(live: BTreeMap<String, LiveTarget>) {
    for (_, target) in live {
        if let Some(server) = target.sim {
            server.shutdown().await;
        }
    }
}

/// Mixed into the content nonce for the preflight's prompt: shaped as the
/// runs' calls are, but never one of them, so the server's prefix cache
/// gives no run a head start.
const PREFLIGHT_STREAM: u64 = 0x5052_4546_4C54; // "PREFLT"

/// The preflight of `target` with `card`'s first call, shaped as the runs
/// will send it: the target's body options are replaced by what the
/// preflight settled, and the dialect is kept for every run's header. A
/// refusal stops everything before a run starts.
async fn preflight(
    target: &mut LiveTarget,
    experiment: &Experiment,
    card: &CardPlan,
    nonce: u64,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let Some(run) = card.first_run() else {
        return Ok(());
    };
    let mut classes = Vec::new();
    let Some(sends) = card_sends(experiment, card, &mut classes) else {
        return Ok(());
    };
    let inputs = run_inputs(
        &target.endpoint,
        (target.token_ids, target.words.clone()),
        target.tokenizer.clone(),
        sends,
        run,
        nonce,
    );
    let task = inputs.source.task(0);
    let Some(call) = task.spec.first_call() else {
        return Ok(());
    };
    let prompt = inputs.source.render(call);
    let class = task.class.as_deref();
    let model = class
        .and_then(|c| c.model.as_deref())
        .unwrap_or(&target.endpoint.model)
        .to_string();
    let api = target.endpoint.api;
    let output = call.output_tokens;
    let priority = class.and_then(|c| c.priority);
    let render = |options: &exec::BodyOptions| {
        exec::request::build_spec_body(api, &model, &prompt, call, options, priority)
    };
    let outcome = exec::preflight::run(
        &target.endpoint,
        &card.target,
        &render,
        output,
        &target.listed_models,
        target.tokenizer.is_some(),
    )
    .await
    .map_err(|e| RunError::Exec {
        run_id: format!("{} preflight", card.target),
        message: e.to_string(),
    })?;
    match outcome {
        exec::preflight::Outcome::Accepted { dialect, options } => {
            let _ = writeln!(
                log,
                "  preflight: {} call{}, {}",
                dialect.preflight_calls,
                if dialect.preflight_calls == 1 {
                    ""
                } else {
                    "s"
                },
                crate::report::describe::dialect(&dialect)
            );
            for line in &dialect.settled {
                let _ = writeln!(log, "    {line}");
            }
            target.endpoint.body = options;
            target.dialect = Some(dialect);
            Ok(())
        }
        exec::preflight::Outcome::Refused { refusal, calls } => Err(RunError::Refused {
            target: card.target.clone(),
            calls,
            quote: refusal.quote,
            conclusion: refusal.conclusion,
            help: refusal.help,
        }),
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    experiment: &Experiment,
    full_plan: &Plan,
    selected: &Plan,
    folder: &ResultsFolder,
    live: &BTreeMap<String, LiveTarget>,
    invocation: Invocation<'_>,
    request: &RunRequest,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let templates = Templates::builtin();
    let options = RunOptions {
        show_progress: request.show_progress,
        cancel: cancel.clone(),
        prefix_cache_reset: None,
        telemetry_off: None,
        // Summaries stream the journals from disk: memory stays flat.
        discard_records: true,
        context_window: None,
        shard: None,
        dialect: None,
    };
    for card in &selected.cards {
        let Some(target) = live.get(&card.target) else {
            continue;
        };
        let mut classes = Vec::new();
        let Some(workload) = card_sends(experiment, card, &mut classes) else {
            continue;
        };
        let _ = writeln!(log, "card {} × {}", card.target, card.workload);
        warn_context_overflow(experiment, card, target, log);
        let mut closed: Vec<RunSummary> = Vec::new();
        for run in &card.closed {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let journal = execute(folder, target, workload, run, invocation, &options, log).await?;
            closed.push(summarize(folder, run, &journal, experiment)?);
            refresh(folder, experiment, full_plan, &templates)?;
        }

        match &card.open {
            OpenPlan::None => {}
            OpenPlan::Grid { runs } => {
                // Runs at low rates are longer (sized for samples): the
                // budget is counted from the longest.
                let mut budget = Budget::of(experiment, &card.open);
                let wanted: Vec<String> = card.slos.clone();
                for run in runs {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    let journal =
                        execute(folder, target, workload, run, invocation, &options, log).await?;
                    let summary = summarize(folder, run, &journal, experiment)?;
                    refresh(folder, experiment, full_plan, &templates)?;
                    if analyze::search::needs_extension(&summary, &wanted) {
                        let ext = (folder, target, workload, invocation, &options);
                        extend(ext, run, &summary, &mut budget, experiment, cancel, log).await?;
                        refresh(folder, experiment, full_plan, &templates)?;
                    }
                }
            }
            OpenPlan::Search {
                min,
                max,
                precision,
                template,
                ..
            } => {
                // The search starts from the closed sweep of this card when
                // there is one (Little's law at the knee), else from the
                // geometric middle of [min, max].
                let knee = experiment
                    .closed
                    .as_ref()
                    .and_then(|spec| analyze::knee::cr_closed(&closed, &spec.knee));
                let start = analyze::search::start_estimate(&closed, knee.as_ref());
                let slo_names: Vec<String> = card.slos.clone();
                let mut search =
                    analyze::search::Search::new(min.0, max.0, precision.0, start, slo_names);
                // From the search's longest run: the one at `min`, which
                // is lengthened most for samples.
                let mut budget = Budget::of(experiment, &card.open);
                let repeat = experiment.open.as_ref().map_or(1, |o| o.repeat.max(1));
                // The card's open runs so far, for the frontier phase.
                let mut open: Vec<RunSummary> = Vec::new();
                while let Some(rate) = search.next_rate() {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    let first = plan::run_at_rate_of(template, config::RatePerS(rate), experiment);
                    let wanted = search.unresolved();
                    // `repeat N`: every repetition of the rate, then one
                    // verdict per SLO for the rate (a pass only if all pass).
                    let mut verdicts: Vec<BTreeMap<String, analyze::Verdict>> = Vec::new();
                    for r in 1..=repeat {
                        let run = first.repetition_of(r);
                        let journal =
                            execute(folder, target, workload, &run, invocation, &options, log)
                                .await?;
                        let mut summary = summarize(folder, &run, &journal, experiment)?;
                        if journal.footer.as_ref().is_some_and(|f| f.interrupted) {
                            return Ok(());
                        }
                        // Inconclusive for an SLO the search still needs:
                        // extend the rate (once, within the budget) rather
                        // than guess.
                        if analyze::search::needs_extension(&summary, &wanted) {
                            let ext = (folder, target, workload, invocation, &options);
                            if let Some(longer) =
                                extend(ext, &run, &summary, &mut budget, experiment, cancel, log)
                                    .await?
                            {
                                summary = longer;
                            }
                            if cancel.is_cancelled() {
                                refresh(folder, experiment, full_plan, &templates)?;
                                return Ok(());
                            }
                        }
                        verdicts.push(analyze::search::verdicts_of(&summary));
                        open.push(summary);
                        refresh(folder, experiment, full_plan, &templates)?;
                    }
                    search.record(rate, &analyze::search::combine_repetitions(&verdicts));
                }

                // `frontier` in `open`: extra rates where the frontier
                // crosses each multiplied bound. They are ordinary open runs
                // (journals like the search's, found again by --resume, as
                // the rates follow from the runs alone), repeated like the
                // search's and never extended: the frontier reads each
                // clause's observed value, which an inconclusive run still
                // gives (the card marks it), and the phase stays within the
                // bound `capcard plan` counts.
                let multipliers = experiment.open.as_ref().map_or(&[][..], |o| &o.frontier);
                let slos: Vec<config::Slo> = experiment
                    .slos
                    .iter()
                    .filter(|s| card.slos.contains(&s.name))
                    .cloned()
                    .collect();
                let mut phase = analyze::frontier::FrontierPhase::new(
                    &slos,
                    multipliers,
                    min.0,
                    max.0,
                    precision.0,
                );
                while let Some((rate, wanted)) =
                    phase.next_rate(&analyze::card::combined_per_rate(&open))
                {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    let _ = writeln!(
                        log,
                        "  frontier of {}, {} at {}× (≤ {}): {} rps",
                        wanted.slo,
                        wanted.label,
                        crate::format::significant(wanted.multiplier),
                        analyze::slo::format_ms(wanted.bound_ms),
                        crate::format::significant(rate)
                    );
                    let first = plan::run_at_rate_of(template, config::RatePerS(rate), experiment);
                    for r in 1..=repeat {
                        let run = first.repetition_of(r);
                        let journal =
                            execute(folder, target, workload, &run, invocation, &options, log)
                                .await?;
                        let summary = summarize(folder, &run, &journal, experiment)?;
                        if journal.footer.as_ref().is_some_and(|f| f.interrupted) {
                            return Ok(());
                        }
                        refresh(folder, experiment, full_plan, &templates)?;
                        open.push(summary);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Run one plan entry, or reuse its journal when resuming and it finished.
async fn execute(
    folder: &ResultsFolder,
    target: &LiveTarget,
    workload: Sends<'_>,
    run: &RunPlan,
    invocation: Invocation<'_>,
    options: &RunOptions,
    log: &mut (dyn Write + Send),
) -> Result<Journal, RunError> {
    let resuming = invocation.resuming;
    let path = folder.journal(&run.id);
    if resuming && path.is_file() {
        if let Ok((journal, _)) = exec::read_journal_ends(&path) {
            if folder::journal_finished(&journal)
                && journal.header.as_ref().is_some_and(|h| h.run == *run)
            {
                let _ = writeln!(log, "  {}: kept from the interrupted run", run.id);
                return Ok(journal);
            }
        }
    }
    let _ = writeln!(log, "  {}: {}", run.id, describe_run(run));
    if let Some(coordinator) = invocation.coordinator {
        return shards::execute_sharded(coordinator, folder, target, run, options, log).await;
    }
    // The scraper's clock starts a moment before the run's own t0; at a 1 s
    // scrape interval the offset (well under a millisecond) does not matter.
    // A shard's run starts at its agreed instant: the scraper counts from it.
    let t0 = options
        .shard
        .as_ref()
        .map(|s| exec::runner::instant_of(s.start_at));
    let scraper = start_scraper(folder, target, &run.id, t0);
    let inputs = run_inputs(
        &target.endpoint,
        (target.token_ids, target.words.clone()),
        target.tokenizer.clone(),
        workload,
        run,
        invocation.content_nonce,
    );
    let mut options = options.clone();
    options.telemetry_off.clone_from(&target.telemetry_off);
    options.context_window.clone_from(&target.context_window);
    options.dialect.clone_from(&target.dialect);
    if let Some(reset) = target.cache_reset {
        options.prefix_cache_reset = exec::client::post_admin(
            &target.endpoint.base_url,
            reset,
            target.endpoint.api_key.as_deref(),
        )
        .await
        .then(|| format!("POST /{reset}"));
    }
    let result = match &target.virtual_target {
        Some(virtual_target) => {
            // A re-run (longer, or resumed) replaces the run's telemetry.
            let telemetry = folder.telemetry(&run.id);
            exec::virtual_time::execute_virtual(
                virtual_target,
                run,
                inputs,
                (&path, Some(&telemetry)),
                &options,
            )
            .await
        }
        None => exec::execute_run_with(&target.endpoint, run, inputs, &path, &options).await,
    };
    if let Some(scraper) = scraper {
        scraper.stop().await;
    }
    result.map_err(|e| RunError::Exec {
        run_id: run.id.clone(),
        message: e.to_string(),
    })
}

/// Scrape the target's telemetry into the run's file from `t0` (default:
/// now), if it has a metrics URL.
fn start_scraper(
    folder: &ResultsFolder,
    target: &LiveTarget,
    run_id: &str,
    t0: Option<tokio::time::Instant>,
) -> Option<exec::telemetry::Scraper> {
    let url = target.metrics_url.as_ref()?;
    let path = folder.telemetry(run_id);
    let dir = path.parent()?;
    std::fs::create_dir_all(dir).ok()?;
    // A re-run (longer, or resumed) replaces the run's journal, so its
    // telemetry starts afresh too: the scraper appends.
    let _ = std::fs::remove_file(&path);
    Some(exec::telemetry::Scraper::start_at(
        url.clone(),
        SCRAPE_INTERVAL,
        path,
        target.scrape_client.clone(),
        t0.unwrap_or_else(tokio::time::Instant::now).into_std(),
    ))
}

/// What run `run` sends and when: the workload's seeded tasks (with its
/// dataset, if any) and arrivals drawn from the run's process — or, for an
/// open run driven by an arrival trace, the trace's rows and timestamps
/// replayed at speedup `rate / trace mean rate`. A trace run ends when the
/// trace is exhausted or the planned stop is reached, whichever is first.
fn run_inputs(
    endpoint: &Endpoint,
    (token_ids, words): (
        Option<TokenIdRange>,
        Option<std::sync::Arc<crate::workload::prompt::WordList>>,
    ),
    tokenizer: Option<std::sync::Arc<crate::data::tokenizer::PromptTokenizer>>,
    sends: Sends<'_>,
    run: &RunPlan,
    content_nonce: u64,
) -> exec::RunInputs {
    let completions = if token_ids.is_some() {
        exec::CompletionsPrompt::TokenIds
    } else {
        exec::CompletionsPrompt::Text
    };
    let range = token_ids.unwrap_or(TokenIdRange::DEFAULT);
    let (workload, trace) = match sends {
        Sends::Workload(workload, trace) => (workload, trace),
        Sends::Mix(classes) => {
            let source =
                exec::WorkloadSource::classes(classes, run.seed, endpoint.api, completions)
                    .with_tokenizer(tokenizer)
                    .with_token_id_range(range)
                    .with_word_list(words)
                    .with_content_nonce(content_nonce)
                    .shared();
            return exec::RunInputs::for_run(run, source);
        }
    };
    if let (Load::Rate { rate, .. }, Some(spec)) = (run.load, trace) {
        if let Some(data) = &spec.data {
            let speedup = data.speedup_for_rate(rate.0);
            let source = exec::TraceSource::new(
                std::sync::Arc::clone(data),
                spec.block_tokens,
                workload,
                run.seed,
                endpoint.api,
                completions,
            )
            .with_tokenizer(tokenizer)
            .with_token_id_range(range)
            .with_word_list(words)
            .with_content_nonce(content_nonce)
            .shared();
            return exec::RunInputs {
                source,
                arrivals: Some(Box::new(data.offsets(speedup))),
            };
        }
    }
    let source = exec::WorkloadSource::new(workload, run.seed, endpoint.api, completions)
        .with_tokenizer(tokenizer)
        .with_token_id_range(range)
        .with_word_list(words)
        .with_content_nonce(content_nonce)
        .shared();
    exec::RunInputs::for_run(run, source)
}

/// The most calls a closed sweep keeps in flight: its top level times the
/// largest agent fan-out (open loops have no planned peak).
fn planned_peak_calls(experiment: &Experiment) -> u64 {
    let top = experiment
        .closed
        .as_ref()
        .and_then(|c| c.levels.iter().max().copied())
        .unwrap_or(0);
    let fan_out = experiment
        .workloads
        .iter()
        .filter_map(|w| w.agent.as_ref())
        .map(|a| a.fan_out.upper_bound().unwrap_or(1.0).max(1.0))
        .fold(1.0, f64::max);
    (f64::from(top) * fan_out).ceil() as u64
}

/// One socket per call in flight: raise the soft limit on open files to the
/// hard one, and say so when the planned peak would not fit even then
/// (calls beyond it would fail as `client-limit`, never as the server's).
#[cfg(unix)]
fn open_files_for(peak_calls: u64, log: &mut (dyn Write + Send)) {
    // Sockets plus journals, telemetry and the runtime's own descriptors.
    const RESERVE: u64 = 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; no other effect.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let hard = limit.rlim_max;
    if limit.rlim_cur < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct; raising the soft limit up to
        // the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            let _ = writeln!(
                log,
                "open files: soft limit raised from {} to {hard}",
                limit.rlim_cur
            );
        }
    }
    // rlim_t is u64 on Linux and macOS, narrower on some targets.
    #[allow(clippy::useless_conversion)]
    let hard = u64::from(hard);
    if peak_calls + RESERVE > hard {
        let _ = writeln!(
            log,
            "warning: the closed sweep plans up to {peak_calls} calls in flight, one socket each, \
             but this process may open only {hard} files: raise the hard limit (ulimit -Hn, \
             or LimitNOFILE) or calls beyond it fail as client-limit"
        );
    }
}

#[cfg(not(unix))]
fn open_files_for(_peak_calls: u64, _log: &mut (dyn Write + Send)) {}

/// The summary of a finished run, streamed from its journal on disk (the
/// `journal` in hand holds only its header and footer).
fn summarize(
    folder: &ResultsFolder,
    run: &RunPlan,
    journal: &Journal,
    experiment: &Experiment,
) -> Result<RunSummary, RunError> {
    let path = folder.journal(&run.id);
    let last = if journal.footer.is_some() {
        0.0
    } else {
        exec::read_journal_ends(&path).map_or(0.0, |(_, last)| last)
    };
    Ok(folder::summarize_run_file(
        folder,
        &path,
        (journal, last),
        experiment,
    )?)
}

/// What holds for every run of one `capcard run`.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    /// Finished runs of the folder are kept.
    resuming: bool,
    content_nonce: u64,
    /// `--coordinate N`: runs are executed by the shards.
    coordinator: Option<&'a crate::shard::coordinator::Coordinator>,
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

fn refresh(
    folder: &ResultsFolder,
    experiment: &Experiment,
    plan: &Plan,
    templates: &Templates,
) -> Result<(), RunError> {
    let report_model = folder::recompute(folder, experiment, plan, Some("running"))?;
    folder::write_outputs(folder, &report_model, templates)?;
    Ok(())
}

fn describe_run(run: &RunPlan) -> String {
    let load = match run.load {
        Load::Concurrency { concurrency } => format!("closed loop, concurrency {concurrency}"),
        Load::Rate { rate, arrival } => format!("open loop, {} rps {}", rate.0, arrival.label()),
    };
    let stop = match run.stop {
        StopRule::Duration(d) => plan::human_duration(d.as_secs_f64()),
        StopRule::Requests(n) => format!("{n} requests"),
        StopRule::TraceEnd => "until the trace ends".to_string(),
    };
    format!(
        "{load}, warmup {} + {stop}",
        plan::human_duration(run.warmup.as_secs_f64())
    )
}

/// The measured time one card's open runs may add by extending
/// inconclusive rates, as much as is left of it. The rule is the plan's
/// ([`plan::extension_budget`]), which also bounds the wall time
/// extensions can add in `capcard plan`.
#[derive(Debug, Clone, Copy)]
struct Budget {
    left: Duration,
}

impl Budget {
    fn of(experiment: &Experiment, open: &OpenPlan) -> Budget {
        Budget {
            left: plan::extension_budget(experiment, open),
        }
    }
}

/// Mixed into an extension's seed (see [`lengthen`]).
const EXTENSION_STREAM: u64 = 0x4558_5445_4E44; // "EXTEND"

/// The extension of `run`: the same rate, measured
/// [`plan::EXTENSION_FACTOR`] times as long (fewer if the budget has less
/// left, but at least twice as long, else not at all:
/// [`plan::extension_factor`]), under a run id of its own
/// (`<id>--ext`), so its journal sits beside the run's and never replaces
/// it. A trace replay has no longer version.
fn lengthen(run: &RunPlan, budget: &Budget) -> Option<RunPlan> {
    if matches!(run.stop, StopRule::TraceEnd) {
        return None;
    }
    let factor = plan::extension_factor(budget.left, plan::planned_measured_time(run))?;
    let mut longer = run.clone();
    longer.id = format!("{}--ext", run.id);
    // Its own request stream, like a repetition's: with the run's seed it
    // would re-send the run's prompts first, and a server's prefix cache
    // (vLLM's is on by default) would serve them, flattering its TTFT.
    longer.seed = crate::hash::mix(run.seed, EXTENSION_STREAM);
    longer.stop = match run.stop {
        StopRule::Duration(d) => StopRule::Duration(d.mul_f64(factor)),
        StopRule::Requests(n) => StopRule::Requests((n as f64 * factor).ceil() as u64),
        StopRule::TraceEnd => return None,
    };
    Some(longer)
}

/// What a card's runs send: a workload's tasks (or an arrival trace's), or
/// a mix's classes.
#[derive(Clone, Copy)]
enum Sends<'a> {
    Workload(&'a config::Workload, Option<&'a TraceSpec>),
    Mix(&'a [ClassStream<'a>]),
}

/// What `card`'s runs send; `classes` holds a mix's class streams for as
/// long as the sends borrow them. `None`: the card's workload is gone.
fn card_sends<'a>(
    experiment: &'a Experiment,
    card: &CardPlan,
    classes: &'a mut Vec<ClassStream<'a>>,
) -> Option<Sends<'a>> {
    match &card.mix {
        Some(mix) => {
            *classes = class_streams(experiment, mix);
            Some(Sends::Mix(classes))
        }
        None => {
            let trace = experiment.open.as_ref().and_then(|o| o.trace.as_ref());
            Some(Sends::Workload(experiment.workload(&card.workload)?, trace))
        }
    }
}

/// The class streams of a mix card, in class order.
fn class_streams<'a>(experiment: &'a Experiment, mix: &plan::MixPlan) -> Vec<ClassStream<'a>> {
    mix.classes
        .iter()
        .filter_map(|c| {
            Some(ClassStream {
                class: crate::workload::TaskClass {
                    name: c.name.as_str().into(),
                    model: c.model.as_deref().map(Into::into),
                    priority: c.priority,
                },
                workload: experiment.workload(&c.workload)?,
                weight: c.share,
            })
        })
        .collect()
}

type ExtensionContext<'a> = (
    &'a ResultsFolder,
    &'a LiveTarget,
    Sends<'a>,
    Invocation<'a>,
    &'a RunOptions,
);

/// Extend an inconclusive run within the budget; the longer run's summary,
/// or `None` when the budget has no room (the run stays inconclusive, and
/// the card says so). An extension cut short (Ctrl-C) leaves the run's own
/// journal as the measurement of its rate.
async fn extend(
    (folder, target, workload, invocation, options): ExtensionContext<'_>,
    run: &RunPlan,
    summary: &RunSummary,
    budget: &mut Budget,
    experiment: &Experiment,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<Option<RunSummary>, RunError> {
    if cancel.is_cancelled() {
        return Ok(None);
    }
    // Resuming: a finished extension is kept as it is, whatever length this
    // invocation's budget would give it now.
    let ext_id = format!("{}--ext", run.id);
    if invocation.resuming {
        if let Ok((journal, _)) = exec::read_journal_ends(&folder.journal(&ext_id)) {
            let same_run = journal.header.as_ref().is_some_and(|h| {
                h.run.id == ext_id && h.run.load == run.load && h.run.seed == run.seed
            });
            if same_run && folder::journal_finished(&journal) {
                let kept = journal.header.as_ref().map(|h| h.run.clone());
                if let Some(kept) = kept {
                    let _ = writeln!(log, "  {ext_id}: kept from the interrupted run");
                    budget.left = budget
                        .left
                        .saturating_sub(plan::planned_measured_time(&kept) + kept.warmup);
                    return Ok(Some(summarize(folder, &kept, &journal, experiment)?));
                }
            }
        }
    }
    let Some(longer) = lengthen(run, budget) else {
        let _ = writeln!(
            log,
            "  {}: inconclusive, and the extension budget has no room for a longer run",
            run.id
        );
        return Ok(None);
    };
    let undecided: Vec<&str> = summary
        .verdicts
        .iter()
        .filter(|v| v.verdict == analyze::Verdict::Inconclusive)
        .map(|v| v.slo.as_str())
        .collect();
    let _ = writeln!(
        log,
        "  {}: inconclusive for {}: extending ({} left in the budget)",
        run.id,
        undecided.join(", "),
        plan::human_duration(budget.left.as_secs_f64())
    );
    budget.left = budget
        .left
        .saturating_sub(plan::planned_measured_time(&longer) + longer.warmup);
    let journal = execute(folder, target, workload, &longer, invocation, options, log).await?;
    if !folder::journal_finished(&journal) {
        return Ok(None);
    }
    Ok(Some(summarize(folder, &longer, &journal, experiment)?))
}

async fn prepare_target(
    target: &Target,
    experiment: &Experiment,
    log: &mut (dyn Write + Send),
) -> Result<LiveTarget, RunError> {
    let seed = experiment.seed;
    let api_key = match &target.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                return Err(RunError::Usage(
                    format!(
                        "target `{}`: environment variable {var} is not set",
                        target.name
                    ),
                    Some(format!(
                        "export {var}=... before running, or remove `api-key-env`"
                    )),
                ));
            }
        },
        None => None,
    };
    let headers = resolve_headers(target)?;
    let (base_url, server) = match &target.kind {
        TargetKind::Endpoint { base_url } => (base_url.trim_end_matches('/').to_string(), None),
        TargetKind::Sim {
            preset,
            faults,
            serving,
        } => {
            let config =
                sim::SimConfig::for_target(preset, serving).map_err(|e| RunError::Sim {
                    target: target.name.clone(),
                    message: e.to_string(),
                })?;
            let config = config
                .with_faults(faults.clone())
                .with_adapters(mix_adapters(experiment))
                .with_seed(seed);
            let server = sim::start(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .await
                .map_err(|e| RunError::Sim {
                    target: target.name.clone(),
                    message: e.to_string(),
                })?;
            (server.base_url(), Some(server))
        }
    };
    let models = exec::client::probe_models_with(
        &base_url,
        api_key.as_deref(),
        &headers,
        target.timeout.min(Duration::from_secs(30)),
    )
    .await
    .map_err(|e| RunError::Unreachable {
        target: target.name.clone(),
        url: base_url.clone(),
        message: e.to_string(),
    })?;
    let model = match &target.model {
        Some(m) => m.clone(),
        None => models
            .ids
            .first()
            .cloned()
            .ok_or_else(|| RunError::Unreachable {
                target: target.name.clone(),
                url: base_url.clone(),
                message: "GET /models listed no model; set `model` in the target".into(),
            })?,
    };
    // Scrapes carry the target's credentials and headers: a hosted
    // endpoint's /metrics is usually behind the same auth as its API.
    let scrape_client =
        exec::client::probe_client(api_key.as_deref(), &headers, Duration::from_secs(2)).map_err(
            |e| RunError::Sim {
                target: target.name.clone(),
                message: e.to_string(),
            },
        )?;
    let (metrics_url, telemetry_off) = match &target.metrics {
        MetricsSource::Off => (None, Some("off (`metrics #false`)".to_string())),
        MetricsSource::Url { url } => (Some(url.clone()), None),
        MetricsSource::Auto => {
            let url = format!("{}/metrics", base_url.trim_end_matches("/v1"));
            match answers_prometheus(&scrape_client, &url).await {
                Ok(()) => (Some(url), None),
                Err(why) => {
                    let _ = writeln!(log, "  telemetry off: {why}");
                    (None, Some(format!("off: {why}")))
                }
            }
        }
    };
    // A probe that fails for any reason means text: prompts still go out,
    // sized by the approximation and corrected by the server's usage.
    let (token_ids, token_id_refusal) = if target.api == config::Api::Completions {
        match exec::probe_token_ids(
            &base_url,
            &model,
            api_key.as_deref(),
            target.timeout.min(Duration::from_secs(30)),
        )
        .await
        {
            Ok(exec::TokenIdSupport::Accepted(range)) => (Some(range), None),
            Ok(exec::TokenIdSupport::Refused(why)) => (None, Some(why)),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    let context_window = match &target.kind {
        TargetKind::Sim { .. } => plan::context::declared_window(target),
        TargetKind::Endpoint { .. } => {
            server_window(target, &models, &model, &base_url, api_key.as_deref(), log).await
        }
    };
    let tokenizer = target.tokenizer.as_ref().and_then(|t| t.loaded.clone());
    // Text prompts without a local tokenizer: ask the server's own which
    // words are one token. The simulator counts words already.
    let needs_text = token_ids.is_none() && tokenizer.is_none();
    let words = if needs_text && matches!(target.kind, TargetKind::Endpoint { .. }) {
        calibrate_words(&base_url, &model, api_key.as_deref(), target.timeout, log).await
    } else {
        None
    };
    // Empty the server's prefix cache before every run where it offers a way,
    // so no run inherits another's cache; the content nonce covers the rest.
    let mut cache_reset = None;
    if matches!(target.kind, TargetKind::Endpoint { .. }) {
        for path in exec::client::PREFIX_CACHE_RESETS {
            if exec::client::post_admin(&base_url, path, api_key.as_deref()).await {
                cache_reset = Some(path);
                break;
            }
        }
    }
    let _ = writeln!(
        log,
        "  prefix cache: {}",
        match cache_reset {
            Some(path) => format!("reset before every run (POST /{path})"),
            None => "the server offers no reset (vLLM: VLLM_SERVER_DEV_MODE=1); the content nonce keeps prompts new".to_string(),
        }
    );
    Ok(LiveTarget {
        endpoint: Endpoint {
            base_url,
            api: target.api,
            model,
            api_key,
            timeout: target.timeout,
            http2: target.http2,
            headers,
            body: exec::BodyOptions::for_target(target),
        },
        sim: server,
        metrics_url,
        scrape_client,
        tokenizer,
        token_ids,
        token_id_refusal,
        words,
        cache_reset,
        telemetry_off,
        virtual_target: None,
        context_window,
        dialect: None,
        listed_models: models.ids.clone(),
    })
}

/// Before a card's first run: warn, with the numbers, when its workloads
/// (a mix's classes too) can exceed the target's window. The calls beyond it
/// will be refused and counted as `context-length`, never as capacity.
fn warn_context_overflow(
    experiment: &Experiment,
    card: &CardPlan,
    target: &LiveTarget,
    log: &mut (dyn Write + Send),
) {
    let Some(window) = &target.context_window else {
        return;
    };
    for (name, fit) in plan::context::card_overflows(experiment, card, window) {
        let _ = writeln!(log, "  warning: {}", fit.describe(&name));
    }
}

/// An endpoint's window: what the server reports for `model` (its model
/// list, else TGI's `/info`), else the target's `max-context`. Where the
/// two disagree the server's is kept, since it is what refuses calls, and
/// the log says so.
async fn server_window(
    target: &Target,
    models: &exec::client::ModelList,
    model: &str,
    base_url: &str,
    api_key: Option<&str>,
    log: &mut (dyn Write + Send),
) -> Option<plan::context::ContextWindow> {
    let reported = match models.window_of(model) {
        Some((tokens, field)) => Some((tokens, format!("server: GET /v1/models {field}"))),
        None => exec::client::probe_info_window(base_url, api_key, Duration::from_secs(5))
            .await
            .map(|tokens| (tokens, "server: GET /info max_total_tokens".to_string())),
    };
    match (reported, target.max_context) {
        (Some((tokens, source)), declared) => {
            if let Some(declared) = declared.filter(|&d| d != tokens) {
                let _ = writeln!(
                    log,
                    "  context window: the server reports {tokens} tokens, the target declares                      `max-context {declared}`; the server's is what refuses calls, so it is used"
                );
            }
            Some(plan::context::ContextWindow { tokens, source })
        }
        (None, Some(tokens)) => Some(plan::context::ContextWindow {
            tokens,
            source: "`max-context`".to_string(),
        }),
        (None, None) => None,
    }
}

/// `--virtual` drives only simulated engines: an endpoint among the
/// selected targets is a usage error before anything runs.
fn refuse_endpoints_in_virtual_time(
    experiment: &Experiment,
    selected: &Plan,
) -> Result<(), RunError> {
    let endpoints: Vec<&str> = experiment
        .targets
        .iter()
        .filter(|t| selected.cards.iter().any(|c| c.target == t.name))
        .filter(|t| matches!(t.kind, TargetKind::Endpoint { .. }))
        .map(|t| t.name.as_str())
        .collect();
    if endpoints.is_empty() {
        return Ok(());
    }
    let sims: Vec<&str> = experiment
        .targets
        .iter()
        .filter(|t| matches!(t.kind, TargetKind::Sim { .. }))
        .map(|t| t.name.as_str())
        .collect();
    Err(RunError::Usage(
        format!(
            "--virtual runs the simulated engine on its own clock, but target{} {} {} a real endpoint",
            if endpoints.len() == 1 { "" } else { "s" },
            endpoints
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if endpoints.len() == 1 { "is" } else { "are" },
        ),
        Some(match sims.first() {
            Some(sim) => format!(
                "select the simulated targets (e.g. --target {sim}), or run without --virtual; \
                 `virtual #true` in a `sim` block makes only that target virtual"
            ),
            None => "run without --virtual: this file has no `sim` target".to_string(),
        }),
    ))
}

/// The virtual-time engine of a `sim` target that runs on its own clock
/// (`--virtual`, or `virtual #true` in its block), with its knobs applied.
fn virtual_target(
    target: &Target,
    experiment: &Experiment,
    forced: bool,
) -> Result<Option<exec::virtual_time::VirtualTarget>, RunError> {
    let TargetKind::Sim {
        preset,
        faults,
        serving,
    } = &target.kind
    else {
        return Ok(None);
    };
    if !(forced || serving.virtual_time) {
        return Ok(None);
    }
    let sim_error = |message: String| RunError::Sim {
        target: target.name.clone(),
        message,
    };
    let base =
        sim::presets::find(preset).ok_or_else(|| sim_error(format!("unknown preset {preset}")))?;
    let preset = sim::knobs::apply(base, serving).map_err(|e| sim_error(e.to_string()))?;
    let base_model = preset.model.served_name.to_string();
    let served: Vec<String> = std::iter::once(base_model.clone())
        .chain(mix_adapters(experiment))
        .collect();
    Ok(Some(exec::virtual_time::VirtualTarget {
        model: target.model.clone().unwrap_or(base_model),
        served,
        replicas: serving.replicas.max(1),
        router: serving.router,
        faults: faults.clone(),
        seed: experiment.seed,
        api: target.api,
        body: exec::BodyOptions::for_target(target),
        timeout: target.timeout,
        network_overhead: serving.network_overhead,
        context_window: plan::context::declared_window(target),
        preset,
    }))
}

/// A mix class's `model` (a LoRA adapter's name, say) is served beside the
/// base model, as a real server with the adapter loaded would.
fn mix_adapters(experiment: &Experiment) -> Vec<String> {
    let mut adapters: Vec<String> = experiment
        .mixes
        .iter()
        .flat_map(|m| &m.classes)
        .filter_map(|c| c.model.clone())
        .collect();
    adapters.sort();
    adapters.dedup();
    adapters
}

/// A virtual-time target: nothing to start or probe. Prompts go out as a
/// probe of the simulator would find (token ids inside its vocabulary for
/// `completions`, words it counts one token each for `chat`).
fn prepare_virtual(
    target: &Target,
    virtual_target: exec::virtual_time::VirtualTarget,
) -> LiveTarget {
    let token_ids = (target.api == config::Api::Completions)
        .then(|| TokenIdRange::for_vocabulary(virtual_target.preset.model.vocab))
        .flatten();
    LiveTarget {
        endpoint: Endpoint {
            base_url: "virtual://".to_string(),
            api: target.api,
            model: virtual_target.model.clone(),
            api_key: None,
            timeout: target.timeout,
            http2: false,
            headers: Vec::new(),
            body: virtual_target.body.clone(),
        },
        sim: None,
        metrics_url: None,
        scrape_client: exec::HttpClient::new(Duration::from_secs(2)),
        tokenizer: target.tokenizer.as_ref().and_then(|t| t.loaded.clone()),
        token_ids,
        token_id_refusal: None,
        words: None,
        cache_reset: None,
        // The engine's own /metrics, read every second of virtual time.
        telemetry_off: None,
        context_window: virtual_target.context_window.clone(),
        virtual_target: Some(virtual_target),
        dialect: None,
        listed_models: Vec::new(),
    }
}

/// The target's `header` lines with their values (environment read now).
fn resolve_headers(target: &Target) -> Result<Vec<(String, String)>, RunError> {
    target
        .headers
        .iter()
        .map(|h| match &h.value {
            config::HeaderValueSpec::Literal(v) => Ok((h.name.clone(), v.clone())),
            config::HeaderValueSpec::Env(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => Ok((h.name.clone(), v)),
                _ => Err(RunError::Usage(
                    format!(
                        "target `{}`: header `{}` reads environment variable {var}, which is not set",
                        target.name, h.name
                    ),
                    Some(format!("export {var}=... before running")),
                )),
            },
        })
        .collect()
}

/// The server's single-token words, through its tokenize endpoint; `None`
/// (text sized by the built-in word list) when it has none or it fails.
async fn calibrate_words(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
    timeout: Duration,
    log: &mut (dyn Write + Send),
) -> Option<std::sync::Arc<crate::workload::prompt::WordList>> {
    let timeout = timeout.min(Duration::from_secs(10));
    let endpoint = exec::tokenize::TokenizeEndpoint::find(base_url, model, api_key, timeout)
        .await
        .ok()
        .flatten()?;
    let Some(calibration) = endpoint.calibrate().await else {
        let _ = writeln!(
            log,
            "  the server's tokenize endpoint answered, but too few prompt words are one token \
             there: text prompts are sized by words (approximate)"
        );
        return None;
    };
    let samples: Vec<String> = calibration
        .samples
        .iter()
        .map(|(planned, counted)| format!("{planned}→{counted}"))
        .collect();
    let _ = writeln!(
        log,
        "  prompts: {} words are one token each by {} (samples planned→counted: {})",
        calibration.words.len(),
        calibration.endpoint,
        samples.join(", ")
    );
    Some(std::sync::Arc::new(calibration.words))
}

/// Whether `url` serves Prometheus text (for `metrics` left at its default).
async fn answers_prometheus(client: &exec::HttpClient, url: &str) -> Result<(), String> {
    match client.get(url).await {
        Ok(reply) if reply.is_success() => {
            let body = reply.text();
            if body.contains("# TYPE") || body.contains("# HELP") {
                Ok(())
            } else {
                Err(format!(
                    "GET {url} answered, but not with Prometheus metrics"
                ))
            }
        }
        Ok(reply) => {
            let status = http::StatusCode::from_u16(reply.status)
                .map_or_else(|_| reply.status.to_string(), |s| s.to_string());
            Err(match reply.status {
                401 | 403 => format!(
                    "GET {url} was refused ({status}) with the target's key and headers; \
                     give the scrape its own URL with `metrics \"URL\"` or a `header`"
                ),
                _ => format!("GET {url} answered {status}: the server offers no metrics there"),
            })
        }
        Err(e) => Err(format!("GET {url} failed: {e}")),
    }
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
    check(
        "target",
        &request.target,
        experiment.targets.iter().map(|t| t.name.as_str()).collect(),
    )?;
    // A workload's card, or a mix's (at its declared weights or a setting).
    let mut cards: Vec<&str> = plan.cards.iter().map(|c| c.workload.as_str()).collect();
    cards.dedup();
    check("workload", &request.workload, cards)?;
    let mut selected = plan.clone();
    selected.cards.retain(|c: &CardPlan| {
        request.target.as_ref().is_none_or(|t| *t == c.target)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_is_its_own_run_within_the_budget() {
        let run = RunPlan {
            id: "t--w--r1".into(),
            target: "t".into(),
            workload: "w".into(),
            mode: Mode::Open,
            load: Load::Rate {
                rate: config::RatePerS(1.0),
                arrival: config::Arrival::Poisson,
            },
            warmup: Duration::from_secs(1),
            stop: StopRule::Duration(Duration::from_secs(10)),
            seed: 1,
            repetition: 1,
            mix: None,
        };
        let budget = |s: u64| Budget {
            left: Duration::from_secs(s),
        };
        let longer = lengthen(&run, &budget(100)).expect("room for 4×");
        assert_eq!(longer.id, "t--w--r1--ext");
        assert_eq!(longer.stop, StopRule::Duration(Duration::from_secs(40)));
        // Its own prompts: the run's are in the server's prefix cache.
        assert_ne!(longer.seed, run.seed);
        // Only room for 3×, then for less than 2×: none.
        assert_eq!(
            lengthen(&run, &budget(35)).map(|r| r.stop),
            Some(StopRule::Duration(Duration::from_secs(30)))
        );
        assert_eq!(lengthen(&run, &budget(19)), None);
        let counted = RunPlan {
            stop: StopRule::Requests(50),
            ..run.clone()
        };
        assert_eq!(
            lengthen(&counted, &budget(1000)).map(|r| r.stop),
            Some(StopRule::Requests(200))
        );
    }
}
