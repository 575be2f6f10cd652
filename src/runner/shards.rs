//! `capcard run` as one of several processes: a shard on a timetable, a
//! shard of a coordinator, or the coordinator (see [`crate::shard`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{
    Invocation, LiveTarget, RunError, RunOutcome, RunRequest, ShardMode, card_sends, describe_run,
    execute, prepare_target, run_inputs, start_scraper,
};
use crate::config::{Experiment, TargetKind};
use crate::exec::{self, RunOptions, ShardClock, ShardRun, record::Journal};
use crate::folder::ResultsFolder;
use crate::plan::shard::{self, ShardPart};
use crate::plan::{Load, OpenPlan, Plan, RunPlan};
use crate::shard::coordinator::{Assignment, Coordinator, Join, Timing};
use crate::shard::worker::CoordinatorClient;

/// How long a shard waits for its coordinator to come up (pods start in
/// any order) and, later, to answer again after a network blip.
const COORDINATOR_PATIENCE: Duration = Duration::from_secs(600);

/// Refuse what a sharded run cannot do, before anything starts.
pub(super) fn check_mode(
    mode: &ShardMode,
    experiment: &Experiment,
    selected: &Plan,
    request: &RunRequest,
) -> Result<(), RunError> {
    let usage = |message: String, help: &str| Err(RunError::Usage(message, Some(help.into())));
    if request.virtual_time {
        return usage(
            "--virtual runs in one process on the engine's clock: there is nothing to shard".into(),
            "drop --shard/--coordinate, or drop --virtual",
        );
    }
    let sims: Vec<&str> = experiment
        .targets
        .iter()
        .filter(|t| selected.cards.iter().any(|c| c.target == t.name))
        .filter(|t| matches!(t.kind, TargetKind::Sim { .. }))
        .map(|t| t.name.as_str())
        .collect();
    if let Some(sim) = sims.first() {
        return usage(
            format!(
                "target `{sim}` is a `sim`, started inside each process: {} shards would load \
                 as many separate simulators, not one server",
                match mode {
                    ShardMode::Coordinator { count, .. } => count.to_string(),
                    ShardMode::Timetable { part, .. } | ShardMode::Worker { part, .. } =>
                        part.count.to_string(),
                }
            ),
            "serve the simulator once (`capcard sim --listen 127.0.0.1:8000`) and point an \
             `endpoint` target at it, or select endpoint targets with --target",
        );
    }
    match mode {
        ShardMode::Coordinator { count, .. } if *count == 0 => usage(
            "--coordinate 0: there must be at least one shard".into(),
            "--coordinate N, N ≥ 1",
        ),
        ShardMode::Coordinator { .. } => Ok(()),
        ShardMode::Worker { .. } if request.resume.is_some() => usage(
            "a shard of a coordinator does not resume: the coordinator does".into(),
            "start the shard again without --resume; the coordinator keeps the finished runs",
        ),
        ShardMode::Worker { .. } => Ok(()),
        ShardMode::Timetable { start_at, .. } => {
            if request.resume.is_some() {
                return usage(
                    "a timetable's runs start at fixed instants: it cannot be resumed".into(),
                    "start every shard again with a new --start-at and a new --out",
                );
            }
            if SystemTime::now()
                .duration_since(*start_at)
                .is_ok_and(|late| late > Duration::from_secs(1))
            {
                return usage(
                    format!(
                        "--start-at {} has passed",
                        crate::time::rfc3339_utc(*start_at)
                    ),
                    "give every shard the same instant a little in the future, e.g. \
                     `--start-at $(date -u -d '+30 sec' +%FT%TZ)`",
                );
            }
            for card in &selected.cards {
                if matches!(card.open, OpenPlan::Search { .. }) {
                    return usage(
                        format!(
                            "card {} × {} searches for Cr_open: each next rate depends on the \
                             last verdict, which no shard on a timetable knows",
                            card.target, card.workload
                        ),
                        "run the shards with a coordinator (`capcard run FILE --coordinate N` \
                         and `--shard I/N --coordinator URL`), or give `open` a grid of `rates`, \
                         or run `--only closed`",
                    );
                }
                for run in timetable_runs(card) {
                    if let Some(why) = shard::untimetabled(run) {
                        return usage(
                            format!("run {} cannot be on a timetable: {why}", run.id),
                            "give it a `duration`, or run the shards with a coordinator \
                             (--coordinate N / --coordinator URL)",
                        );
                    }
                }
            }
            Ok(())
        }
    }
}

/// The runs of a card that a timetable holds, in order: its closed sweep,
/// then its open grid.
fn timetable_runs(card: &crate::plan::CardPlan) -> impl Iterator<Item = &RunPlan> {
    let grid: &[RunPlan] = match &card.open {
        OpenPlan::Grid { runs } => runs,
        OpenPlan::None | OpenPlan::Search { .. } => &[],
    };
    card.closed.iter().chain(grid)
}

/// The default results folder of a shard: the experiment's, suffixed.
pub(super) fn default_out_dir(base: PathBuf, mode: Option<&ShardMode>) -> PathBuf {
    match mode {
        Some(ShardMode::Timetable { part, .. } | ShardMode::Worker { part, .. }) => {
            let mut name = base.into_os_string();
            name.push(format!("-shard{}of{}", part.index, part.count));
            PathBuf::from(name)
        }
        Some(ShardMode::Coordinator { .. }) | None => base,
    }
}

fn describe_part(run: &RunPlan, part: ShardPart) -> String {
    match run.load {
        Load::Concurrency { concurrency } => format!(
            "shard {}: {} of the {concurrency} slots",
            part.label(),
            shard::slots(concurrency, part)
        ),
        Load::Rate { .. } => format!(
            "shard {}: arrivals {}, {}+{n}, {}+2×{n}, …",
            part.label(),
            part.index,
            part.index,
            part.index,
            n = part.count
        ),
    }
}

/// `--shard I/N --start-at T`: every run of the timetable, this shard's
/// part of it, at its instant. No summaries or cards: one shard's part is
/// no measurement of the replica; `capcard merge` makes one.
pub(super) async fn drive_timetable(
    experiment: &Experiment,
    selected: &Plan,
    (folder, live): (&ResultsFolder, &BTreeMap<String, LiveTarget>),
    (part, start_at): (ShardPart, SystemTime),
    invocation: Invocation<'_>,
    (request, cancel): (&RunRequest, &CancellationToken),
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let runs: Vec<(&crate::plan::CardPlan, &RunPlan)> = selected
        .cards
        .iter()
        .flat_map(|card| timetable_runs(card).map(move |run| (card, run)))
        .collect();
    let timeout = |run: &RunPlan| {
        live.get(&run.target)
            .map_or(Duration::from_secs(600), |t| t.endpoint.timeout)
    };
    let starts = shard::timetable(
        runs.iter().map(|(_, run)| *run),
        timeout,
        exec::runner::DRAIN_GRACE,
    )
    .map_err(|(run, why)| {
        RunError::Usage(
            format!("run {} cannot be on a timetable: {why}", run.id),
            None,
        )
    })?;
    let _ = writeln!(
        log,
        "shard {}: {} runs on a timetable from {}, the last starting at +{}",
        part.label(),
        runs.len(),
        crate::time::rfc3339_utc(start_at),
        crate::format::duration_words(starts.last().map_or(0.0, |d| d.as_secs_f64()))
    );
    for ((card, run), offset) in runs.iter().zip(starts) {
        if cancel.is_cancelled() {
            return Ok(());
        }
        let Some(target) = live.get(&card.target) else {
            continue;
        };
        let mut classes = Vec::new();
        let Some(sends) = card_sends(experiment, card, &mut classes) else {
            continue;
        };
        let run_start = start_at + offset;
        let options = RunOptions {
            show_progress: request.show_progress,
            cancel: cancel.clone(),
            discard_records: true,
            shard: Some(ShardRun {
                part,
                start_at: run_start,
                clock: ShardClock {
                    index: part.index,
                    count: part.count,
                    agreed_by: "a timetable from --start-at".into(),
                    start_at: crate::time::rfc3339_utc(run_start),
                    clock_offset_ms: None,
                    clock_uncertainty_ms: None,
                    start_lag_ms: 0.0,
                },
            }),
            ..RunOptions::default()
        };
        let _ = writeln!(
            log,
            "  {} at {} ({})",
            run.id,
            crate::time::rfc3339_utc(run_start),
            describe_part(run, part)
        );
        execute(folder, target, sends, run, invocation, &options, log).await?;
    }
    Ok(())
}

/// A timetable shard's end: its journals, and how to merge them.
pub(super) fn timetable_outcome(
    outcome: Result<(), RunError>,
    folder: &ResultsFolder,
    part: ShardPart,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<RunOutcome, RunError> {
    outcome?;
    if cancel.is_cancelled() {
        return Err(RunError::Interrupted {
            dir: folder.dir.clone(),
        });
    }
    let _ = writeln!(
        log,
        "shard {} done: its journals are in {}; once every shard is done, \
         `capcard merge DIR... --out DIR` makes the card",
        part.label(),
        folder.runs().display()
    );
    Ok(RunOutcome {
        dir: folder.dir.clone(),
        written: Default::default(),
        invalid_runs: Vec::new(),
        top_failure: None,
        rate_limited_runs: Vec::new(),
    })
}

/// `--coordinate N`: listen, and wait until the N shards have joined.
/// `None`: interrupted while waiting.
pub(super) async fn start_coordinator(
    (count, listen, timing): (u32, std::net::SocketAddr, Timing),
    source: &str,
    content_nonce: u64,
    folder: &ResultsFolder,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<Option<Coordinator>, RunError> {
    let coordinator = Coordinator::start(
        listen,
        count,
        timing,
        crate::hash::hash_str(source),
        content_nonce,
        &folder.dir.join("shards"),
    )
    .await
    .map_err(|e| {
        RunError::Usage(
            e.to_string(),
            Some("choose another --listen address".into()),
        )
    })?;
    let _ = writeln!(
        log,
        "coordinator: http://{} waiting for {count} shard(s): \
         `capcard run FILE --shard I/{count} --coordinator http://{}`",
        coordinator.addr, coordinator.addr
    );
    let joined = coordinator
        .wait_for_shards(cancel, |index, count| {
            let _ = writeln!(log, "  shard {index}/{count} joined");
        })
        .await;
    if !joined {
        let missing: Vec<String> = (0..count)
            .filter(|i| !coordinator.joined().contains(i))
            .map(|i| i.to_string())
            .collect();
        let _ = writeln!(
            log,
            "interrupted before every shard joined (missing: {})",
            missing.join(", ")
        );
        coordinator.finish("interrupted").await;
        return Ok(None);
    }
    Ok(Some(coordinator))
}

/// The coordinator's execution of one run: hand it to the shards, scrape
/// the server from the agreed t0, merge the journals as they come back.
pub(super) async fn execute_sharded(
    coordinator: &Coordinator,
    folder: &ResultsFolder,
    target: &LiveTarget,
    run: &RunPlan,
    options: &RunOptions,
    log: &mut (dyn Write + Send),
) -> Result<Journal, RunError> {
    let shards_error = |message: String| RunError::Shards {
        run_id: run.id.clone(),
        message,
        dir: folder.dir.clone(),
    };
    let reset = match target.cache_reset {
        Some(reset) => exec::client::post_admin(
            &target.endpoint.base_url,
            reset,
            target.endpoint.api_key.as_deref(),
        )
        .await
        .then(|| format!("POST /{reset}")),
        None => None,
    };
    let (seq, start_at) = coordinator.publish(run, reset);
    let scraper = start_scraper(
        folder,
        target,
        &run.id,
        Some(exec::runner::instant_of(start_at)),
    );
    let collected = coordinator.collect(seq, &options.cancel).await;
    if let Some(scraper) = scraper {
        scraper.stop().await;
    }
    let count = collected.parts.len() + collected.missing.len();
    let path = folder.journal(&run.id);
    if collected.parts.is_empty() {
        return Err(shards_error(format!(
            "no shard sent its journal (shards {} lost)",
            list(&collected.missing)
        )));
    }
    let merged = crate::shard::merge_journal_files(&collected.parts, count as u32, &path)
        .map_err(|e| shards_error(e.to_string()))?;
    let (journal, _) = exec::read_journal_ends(&path).map_err(|e| RunError::Exec {
        run_id: run.id.clone(),
        message: e.to_string(),
    })?;
    let _ = writeln!(
        log,
        "    merged {} calls and tasks from {} of {count} shards",
        merged.lines,
        collected.parts.len()
    );
    if options.cancel.is_cancelled() {
        return Ok(journal);
    }
    if !collected.missing.is_empty() {
        return Err(shards_error(format!(
            "shard(s) {} went silent for {} s and sent no journal: the run is incomplete",
            list(&collected.missing),
            collected.lost_after.as_secs_f64()
        )));
    }
    if !merged.complete || journal.footer.as_ref().is_some_and(|f| f.interrupted) {
        return Err(shards_error(
            "a shard's run was interrupted or cut short (its journal has no clean end): \
             the run is incomplete"
                .into(),
        ));
    }
    Ok(journal)
}

fn list(indices: &[u32]) -> String {
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--shard I/N --coordinator URL`: join, then run whatever the
/// coordinator hands out until it says the experiment is done. The
/// journals stay in this shard's folder too.
pub(super) async fn serve_shard(
    request: &RunRequest,
    part: ShardPart,
    url: &str,
    (source, experiment, full_plan, selected): (&str, &Experiment, &Plan, &Plan),
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<RunOutcome, RunError> {
    let unreachable = |e: crate::shard::worker::WorkerError| RunError::Unreachable {
        target: "coordinator".into(),
        url: url.to_string(),
        message: e.to_string(),
    };
    let folder = ResultsFolder::new(request.out.clone().unwrap_or_else(|| {
        default_out_dir(super::default_out_dir(experiment), request.shard.as_ref())
    }));
    if folder.experiment().exists() {
        return Err(RunError::Usage(
            format!("{} already holds results", folder.dir.display()),
            Some("give this shard another --out; nothing is overwritten".into()),
        ));
    }
    // Every target this shard may be sent to, probed now: a run starts
    // seconds after it is handed out.
    let mut live: BTreeMap<String, LiveTarget> = BTreeMap::new();
    for card in &selected.cards {
        if live.contains_key(&card.target) {
            continue;
        }
        if let Some(target) = experiment.target(&card.target) {
            let mut prepared = prepare_target(target, experiment, log).await?;
            let nonce = crate::hash::mix(u64::from(part.index), super::PREFLIGHT_STREAM);
            super::preflight(&mut prepared, experiment, card, nonce, log).await?;
            // The coordinator scrapes the server.
            prepared.metrics_url = None;
            live.insert(target.name.clone(), prepared);
        }
    }
    let client = CoordinatorClient::new(url).map_err(unreachable)?;
    let join = Join {
        part,
        experiment_hash: crate::hash::hash_str(source),
        version: crate::TOOL_VERSION.to_string(),
    };
    let welcome = tokio::select! {
        _ = cancel.cancelled() => return Err(RunError::Interrupted { dir: folder.dir.clone() }),
        w = client.join(&join, COORDINATOR_PATIENCE) => w.map_err(unreachable)?,
    };
    folder.create(source, full_plan)?;
    for note in folder.copy_inputs(&request.experiment_path, source)? {
        let _ = writeln!(log, "{note}");
    }
    let _ = writeln!(
        log,
        "shard {} joined the coordinator at {url}; journals in {}",
        part.label(),
        folder.runs().display()
    );
    let invocation = Invocation {
        resuming: false,
        content_nonce: welcome.content_nonce,
        coordinator: None,
        prune_at_or_below: None,
    };
    let mut after = 0;
    loop {
        let next = client
            .next(part.index, after, COORDINATOR_PATIENCE, cancel)
            .await
            .map_err(unreachable)?;
        let (seq, run, start_at_unix_ms, prefix_cache_reset) = match next {
            None => {
                return Err(RunError::Interrupted {
                    dir: folder.dir.clone(),
                });
            }
            Some(Assignment::Done { status }) => {
                let _ = writeln!(log, "the coordinator says the experiment is {status}");
                if status != "complete" {
                    return Err(RunError::Interrupted {
                        dir: folder.dir.clone(),
                    });
                }
                return Ok(RunOutcome {
                    dir: folder.dir.clone(),
                    written: Default::default(),
                    invalid_runs: Vec::new(),
                    top_failure: None,
                    rate_limited_runs: Vec::new(),
                });
            }
            Some(Assignment::Run {
                seq,
                run,
                start_at_unix_ms,
                prefix_cache_reset,
            }) => (seq, run, start_at_unix_ms, prefix_cache_reset),
        };
        after = seq;
        let card = full_plan
            .cards
            .iter()
            .find(|c| c.target == run.target && c.workload == run.workload);
        let (Some(card), Some(target)) = (card, live.get(&run.target)) else {
            let _ = writeln!(
                log,
                "  {}: not a run of this shard's selection (--target/--workload): skipped",
                run.id
            );
            continue;
        };
        let mut classes = Vec::new();
        let Some(sends) = card_sends(experiment, card, &mut classes) else {
            continue;
        };
        // Measured before every run: clocks drift over an experiment.
        let offset = client.clock_offset().await.map_err(unreachable)?;
        let start_at = offset.to_local(start_at_unix_ms);
        let run_cancel = cancel.child_token();
        let options = RunOptions {
            show_progress: request.show_progress,
            cancel: run_cancel.clone(),
            prefix_cache_reset,
            telemetry_off: target.telemetry_off.clone(),
            discard_records: true,
            context_window: target.context_window.clone(),
            shard: Some(ShardRun {
                part,
                start_at,
                clock: ShardClock {
                    index: part.index,
                    count: part.count,
                    agreed_by: format!("the coordinator {url}"),
                    start_at: crate::time::rfc3339_utc(
                        UNIX_EPOCH + Duration::from_secs_f64(start_at_unix_ms.max(0.0) / 1e3),
                    ),
                    clock_offset_ms: Some(offset.offset_ms),
                    clock_uncertainty_ms: Some(offset.uncertainty_ms),
                    start_lag_ms: 0.0,
                },
            }),
            dialect: target.dialect.clone(),
            // A shard sees its part of the run: no watch decides for all.
            watch: None,
        };
        let _ = writeln!(
            log,
            "  {}: {} ({}; clock offset {:+.2} ms ± {:.2} ms)",
            run.id,
            describe_run(&run, &sends),
            describe_part(&run, part),
            offset.offset_ms,
            offset.uncertainty_ms
        );
        let done = CancellationToken::new();
        let watcher = tokio::spawn({
            let (client, run_cancel, done) = (client.clone(), run_cancel.clone(), done.clone());
            async move { client.watch(part.index, seq, run_cancel, done).await }
        });
        let path = folder.journal(&run.id);
        let inputs = run_inputs(
            &target.endpoint,
            (target.token_ids, target.words.clone()),
            target.tokenizer.clone(),
            sends,
            &run,
            invocation.content_nonce,
        );
        let result = exec::execute_run_with(&target.endpoint, &run, inputs, &path, &options).await;
        done.cancel();
        let _ = watcher.await;
        if let Err(e) = &result {
            let _ = writeln!(log, "  {}: could not be carried out: {e}", run.id);
        }
        if path.is_file() {
            client
                .upload(part.index, seq, &path)
                .await
                .map_err(unreachable)?;
        }
        if cancel.is_cancelled() {
            return Err(RunError::Interrupted {
                dir: folder.dir.clone(),
            });
        }
    }
}
