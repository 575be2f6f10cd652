//! Driving one card's runs: the closed sweep, then the open grid or the
//! Cr_open search and its frontier, each run executed (in process, in
//! virtual time, or by the shards), extended within the budget when
//! inconclusive, and summarised, with the folder rewritten after each.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::analyze::{self, RunSummary};
use crate::config::{self, Experiment, StopRule};
use crate::exec::{self, RunOptions, record::Journal};
use crate::folder::{self, ResultsFolder};
use crate::plan::{self, Load, OpenPlan, Plan, RunPlan};
use crate::report::Templates;

/// How often the server's `/metrics` is scraped during a run.
pub(super) const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

#[allow(clippy::too_many_arguments)]
pub(super) async fn drive(
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
        watch: None,
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
                let confidence =
                    experiment
                        .open
                        .as_ref()
                        .map_or(analyze::cr_open::DEFAULT_CONFIDENCE, |o| match o.rates {
                            config::RateSelection::Search { confidence, .. } => confidence.0,
                            config::RateSelection::Grid { .. } => {
                                analyze::cr_open::DEFAULT_CONFIDENCE
                            }
                        });
                let budget_s = plan::search_budget(experiment, &card.open).as_secs_f64();
                let mut search = analyze::search::Search::new(
                    min.0,
                    max.0,
                    precision.0,
                    confidence,
                    start,
                    slo_names,
                    Some(budget_s),
                );
                let repeat = experiment.open.as_ref().map_or(1, |o| o.repeat.max(1));
                // A search's run ends early once it is decisively beyond
                // every SLO of the card (analyze::decisive).
                let card_slos: Vec<config::Slo> = experiment
                    .slos
                    .iter()
                    .filter(|s| card.slos.contains(&s.name))
                    .cloned()
                    .collect();
                let early_stop = experiment.open.as_ref().is_none_or(|o| match o.rates {
                    config::RateSelection::Search { early_stop, .. } => early_stop,
                    config::RateSelection::Grid { .. } => false,
                });
                let search_options = RunOptions {
                    watch: early_stop
                        .then(|| decisive_watch(&card_slos, confidence))
                        .flatten(),
                    ..options.clone()
                };
                // The card's open runs so far, for the frontier phase.
                let mut open: Vec<RunSummary> = Vec::new();
                // How often each rate was visited: a revisit is one more
                // repetition of the rate (its own id and request stream),
                // and its samples add to the fit.
                let mut visits: BTreeMap<String, u32> = BTreeMap::new();
                let mut pruned = false;
                while let Some(rate) = search.next_rate() {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    let first = plan::run_at_rate_of(template, config::RatePerS(rate), experiment);
                    let cost_s = plan::planned_run_seconds(&first);
                    if !search.affords(cost_s * f64::from(repeat)) {
                        let _ = writeln!(
                            log,
                            "  the search's budget is spent ({} of {}): Cr_open is fitted from the runs made",
                            crate::format::duration_secs(search.spent_s()),
                            crate::format::duration_secs(budget_s)
                        );
                        break;
                    }
                    let visit = visits.entry(first.id.clone()).or_insert(0);
                    *visit += 1;
                    let first = first.visit_of(*visit);
                    let mut made = Vec::new();
                    for r in 1..=repeat {
                        let run = first.repetition_of(r);
                        let journal = execute(
                            folder,
                            target,
                            workload,
                            &run,
                            invocation,
                            &search_options,
                            log,
                        )
                        .await?;
                        let summary = summarize(folder, &run, &journal, experiment)?;
                        if journal.footer.as_ref().is_some_and(|f| f.interrupted) {
                            return Ok(());
                        }
                        let cost_s = run_cost_s(&run, &journal);
                        made.push((
                            analyze::cr_open::evidence_of(&summary).unwrap_or_else(|| {
                                analyze::cr_open::RunEvidence {
                                    run_id: summary.run_id.clone(),
                                    rate_rps: rate,
                                    realized_rps: rate,
                                    censored: None,
                                    slos: vec![],
                                }
                            }),
                            cost_s,
                        ));
                        open.push(summary);
                        refresh(folder, experiment, full_plan, &templates)?;
                    }
                    for (evidence, cost_s) in made {
                        search.record(evidence, cost_s);
                    }
                    // `tune`: this setting cannot beat the best any more.
                    if let Some((slo, best_low)) = invocation.prune_at_or_below
                        && let Some(high) = search.fit(slo).range[1]
                        && high <= best_low
                    {
                        let _ = writeln!(
                            log,
                            "  tune: {slo}'s Cr_open is below {} req/s, at or below the best setting's {} req/s: this setting is pruned",
                            crate::format::significant(high),
                            crate::format::significant(best_low)
                        );
                        pruned = true;
                        break;
                    }
                }
                if pruned {
                    continue;
                }

                // `frontier` in `open`: extra rates where the frontier
                // crosses each multiplied bound. They are ordinary open runs
                // (journals like the search's, found again by --resume, as
                // the rates follow from the runs alone), repeated like the
                // search's and never extended: the frontier fits each
                // bound's crossing from every run's counts beyond it, which
                // an inconclusive run gives as well as any, and the phase
                // stays within the bound `capcard plan` counts.
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
                    confidence,
                );
                while let Some((rate, wanted)) = phase.next_rate(&open) {
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    let _ = writeln!(
                        log,
                        "  frontier of {}, {} at {}× (≤ {}): {} rps",
                        wanted.slo,
                        wanted.label,
                        crate::format::significant(wanted.multiplier),
                        crate::format::ms(wanted.bound_ms),
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

/// The watch of a search's open runs: each ends once it is decisively
/// beyond every SLO of the card, stopped by mistake at most
/// [`analyze::decisive::alpha_for`] of the time.
fn decisive_watch(slos: &[config::Slo], confidence: f64) -> Option<exec::WatchFactory> {
    let slos = slos.to_vec();
    let alpha = analyze::decisive::alpha_for(confidence);
    let make = move |run: &plan::RunPlan| -> Option<Box<dyn exec::record::RunWatch>> {
        let StopRule::Duration(window) = run.stop else {
            return None;
        };
        let from_ms = run.warmup.as_secs_f64() * 1e3;
        let to_ms = from_ms + window.as_secs_f64() * 1e3;
        analyze::decisive::SloWatch::new(&slos, from_ms, to_ms, alpha)
            .map(|w| Box::new(w) as Box<dyn exec::record::RunWatch>)
    };
    Some(exec::WatchFactory(std::sync::Arc::new(make)))
}

/// What a search's run cost, warmup included: as planned, less the part of
/// its window a decisive stop spared.
fn run_cost_s(run: &RunPlan, journal: &Journal) -> f64 {
    let planned = plan::planned_run_seconds(run);
    let spared_s = journal
        .footer
        .as_ref()
        .filter(|f| f.decided.is_some())
        .and_then(|f| match run.stop {
            StopRule::Duration(window) => {
                let planned_end_ms = (run.warmup + window).as_secs_f64() * 1e3;
                Some((planned_end_ms - f.measured_window_ms[1]).max(0.0) / 1e3)
            }
            _ => None,
        })
        .unwrap_or(0.0);
    (planned - spared_s).max(0.0)
}

/// Run one plan entry, or reuse its journal when resuming and it finished.
pub(super) async fn execute(
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
    let _ = writeln!(log, "  {}: {}", run.id, describe_run(run, &workload));
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
pub(super) fn start_scraper(
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

/// The summary of a finished run, streamed from its journal on disk (the
/// `journal` in hand holds only its header and footer).
pub(super) fn summarize(
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

pub(super) fn refresh(
    folder: &ResultsFolder,
    experiment: &Experiment,
    plan: &Plan,
    templates: &Templates,
) -> Result<(), RunError> {
    let report_model = folder::recompute(folder, experiment, plan, Some("running"))?;
    folder::write_outputs(folder, &report_model, templates)?;
    Ok(())
}

/// The log line of a run about to start; an open run's rate in what its
/// card's arrivals are (`req/s`, `tasks/s`, …).
pub(super) fn describe_run(run: &RunPlan, sends: &Sends<'_>) -> String {
    let unit = match sends {
        Sends::Workload(workload, _) => workload.unit(),
        Sends::Mix(_) => crate::config::ArrivalUnit::Request,
    };
    let load = match run.load {
        Load::Concurrency { concurrency } => format!("closed loop, concurrency {concurrency}"),
        Load::Rate { rate, arrival } => {
            format!("open loop, {} {} {}", rate.0, unit.per_s(), arrival.label())
        }
    };
    let stop = match run.stop {
        StopRule::Duration(d) => crate::format::duration_words(d.as_secs_f64()),
        StopRule::Requests(n) => format!("{n} requests"),
        StopRule::TraceEnd => "until the trace ends".to_string(),
    };
    format!(
        "{load}, warmup {} + {stop}",
        crate::format::duration_words(run.warmup.as_secs_f64())
    )
}

/// The measured time one card's open runs may add by extending
/// inconclusive rates, as much as is left of it. The rule is the plan's
/// ([`plan::extension_budget`]), which also bounds the wall time
/// extensions can add in `capcard plan`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub(super) left: Duration,
}

impl Budget {
    fn of(experiment: &Experiment, open: &OpenPlan) -> Budget {
        Budget {
            left: plan::extension_budget(experiment, open),
        }
    }
}

/// Mixed into an extension's seed (see [`lengthen`]).
pub(super) const EXTENSION_STREAM: u64 = 0x4558_5445_4E44; // "EXTEND"

/// The extension of `run`: the same rate, measured
/// [`plan::EXTENSION_FACTOR`] times as long (fewer if the budget has less
/// left, but at least twice as long, else not at all:
/// [`plan::extension_factor`]), under a run id of its own
/// (`<id>--ext`), so its journal sits beside the run's and never replaces
/// it. A trace replay has no longer version.
pub(super) fn lengthen(run: &RunPlan, budget: &Budget) -> Option<RunPlan> {
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

pub(super) type ExtensionContext<'a> = (
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
pub(super) async fn extend(
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
        crate::format::duration_words(budget.left.as_secs_f64())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_is_its_own_run_within_the_budget() {
        let load = Load::Rate {
            rate: config::RatePerS(1.0),
            arrival: config::Arrival::Poisson,
        };
        let stop = StopRule::Duration(Duration::from_secs(10));
        let run = RunPlan::new("t", "w", load, Duration::from_secs(1), stop, 1);
        let budget = |s: u64| Budget {
            left: Duration::from_secs(s),
        };
        let longer = lengthen(&run, &budget(100)).expect("room for 4×");
        assert_eq!(longer.id, "t--w--r1.000--ext");
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
