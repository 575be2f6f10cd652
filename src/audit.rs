//! `capcard audit FILE`: how far to trust an experiment's Cr_open. The
//! experiment is run again and again on other seeds, against a simulated
//! engine in virtual time, by `capcard run` itself (plan, executor,
//! journal, summary, steady-state classification, early stop, search and
//! fit: the audit builds no second pipeline), and each search's estimate
//! and range are held to a reference Cr_open of the same engine:
//! - how often the estimate is within the asked precision of it;
//! - how often the stated range holds it, against the stated confidence;
//! - the median width of the range, and what the search spent.
//!
//! The reference of a `sim queue` target serving single calls comes from
//! queueing theory or a long run of the same queue
//! ([`crate::sim::reference`]). Any other engine (a calibrated twin, a
//! queue serving agent tasks) gets a long run through `capcard run`
//! itself: a grid of runs twenty times the experiment's length (at least
//! ten minutes each) over ±25% of the seeds' median estimate, fitted by
//! the same model, whose own range is stated beside it. The audit says
//! which reference it used, and its precision.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::analyze::CrOpen;
use crate::analyze::audited;
use crate::config::{
    Experiment, LatencyMetric, RateSelection, SloClause, Stat, TargetKind, Workload,
};
use crate::folder::{self, ResultsFolder};
use crate::runner::{self, RunError, RunRequest};
use crate::sim::reference::{self, Clause, Metric, Reference, Setup};

/// What `capcard audit` was asked.
#[derive(Debug, Clone)]
pub struct AuditRequest {
    pub experiment_path: PathBuf,
    /// The `sim` target to audit (default: every `sim` target with an open
    /// search).
    pub target: Option<String>,
    pub workload: Option<String>,
    /// Seeds to run: `first_seed .. first_seed + seeds`.
    pub seeds: u32,
    pub first_seed: u64,
    /// Calls per rate of a long-run reference of a queue.
    pub reference_calls: u64,
    /// Long open runs (through `capcard run`) of the reference of an
    /// engine with no known answer; 0: none.
    pub reference_runs: u32,
    /// Keep each seed's results folder here (default: a temporary folder,
    /// removed at the end).
    pub keep: Option<PathBuf>,
}

#[derive(Debug, Error, miette::Diagnostic)]
pub enum AuditError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    #[diagnostic(code(capcard::usage))]
    Usage(String, #[help] Option<String>),
    #[error("cannot use {}: {source}", path.display())]
    #[diagnostic(code(capcard::io))]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Folder(#[from] crate::folder::FolderError),
}

/// One search of one seed, as the card gave it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedResult {
    pub seed: u64,
    pub estimate_rps: Option<f64>,
    pub range: [Option<f64>; 2],
    pub method: Option<String>,
    pub bound_by: Option<String>,
    /// Seconds the open runs took (warmups included): the search's cost.
    pub seconds: f64,
    /// Calls the open runs measured.
    pub calls: u64,
    pub open_runs: usize,
    /// Open runs censored as backlogged / overloaded / decided early.
    pub censored: Vec<String>,
}

/// One SLO of one card over every seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    /// The experiment's name.
    pub experiment: String,
    /// The settings audited ([`audited::settings_fingerprint`]): a card
    /// quotes this row only when its own are the same.
    pub fingerprint: Option<String>,
    pub target: String,
    pub workload: String,
    pub slo: String,
    pub precision: f64,
    pub confidence: f64,
    /// The engine audited, in words.
    pub engine: String,
    pub reference_rps: Option<f64>,
    /// How the reference was found, or why there is none.
    pub reference_method: String,
    pub reference_relative_error: Option<f64>,
    pub seeds: Vec<SeedResult>,
}

/// What a row comes to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowSummary {
    pub seeds: usize,
    /// Seeds with an estimate within ±precision of the reference.
    pub within_precision: usize,
    /// Seeds whose range holds the reference (both ends present).
    pub covered: usize,
    /// Seeds whose range has both ends.
    pub two_sided: usize,
    /// Seeds with no estimate.
    pub no_estimate: usize,
    /// Median (high − low) / reference of the two-sided ranges.
    pub median_width: Option<f64>,
    /// Median relative error of the estimates.
    pub median_abs_error: Option<f64>,
    pub median_seconds: f64,
    pub median_calls: f64,
    /// A 95% interval (Wilson) on the coverage proportion.
    pub coverage_interval: Option<[f64; 2]>,
}

impl AuditRow {
    pub fn summary(&self) -> RowSummary {
        let n = self.seeds.len();
        let mut s = RowSummary {
            seeds: n,
            within_precision: 0,
            covered: 0,
            two_sided: 0,
            no_estimate: 0,
            median_width: None,
            median_abs_error: None,
            median_seconds: median(self.seeds.iter().map(|r| r.seconds).collect()).unwrap_or(0.0),
            median_calls: median(self.seeds.iter().map(|r| r.calls as f64).collect())
                .unwrap_or(0.0),
            coverage_interval: None,
        };
        let mut widths = vec![];
        let mut errors = vec![];
        for r in &self.seeds {
            if r.estimate_rps.is_none() {
                s.no_estimate += 1;
            }
            if let [Some(_), Some(_)] = r.range {
                s.two_sided += 1;
            }
            let Some(truth) = self.reference_rps else {
                continue;
            };
            if let Some(e) = r.estimate_rps {
                let error = (e - truth).abs() / truth;
                errors.push(error);
                if error <= self.precision + 1e-12 {
                    s.within_precision += 1;
                }
            }
            if let [Some(lo), Some(hi)] = r.range {
                widths.push((hi - lo) / truth);
            }
            if range_holds(r.range, truth) {
                s.covered += 1;
            }
        }
        s.median_width = median(widths);
        s.median_abs_error = median(errors);
        if self.reference_rps.is_some() && n > 0 {
            s.coverage_interval = Some(wilson(s.covered, n, 1.96));
        }
        s
    }
}

/// Whether a range holds `truth`: an open end holds everything on its
/// side, so a range open at both ends (the runs bound nothing) holds it
/// too, vacuously; the table counts the two-sided ranges apart, so a
/// range that said nothing is not mistaken for one that was right.
pub fn range_holds(range: [Option<f64>; 2], truth: f64) -> bool {
    let [lo, hi] = range;
    lo.is_none_or(|l| l <= truth) && hi.is_none_or(|h| truth <= h)
}

/// The Wilson score interval of `k` of `n` at normal quantile `z`.
pub fn wilson(k: usize, n: usize, z: f64) -> [f64; 2] {
    if n == 0 {
        return [0.0, 1.0];
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    [(centre - half).max(0.0), (centre + half).min(1.0)]
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The experiment's text at another seed: its `experiment { seed N }`
/// replaced (or added), everything else as written.
pub fn with_seed(source: &str, seed: u64) -> Result<String, String> {
    let mut doc: kdl::KdlDocument = source.parse().map_err(|e| format!("{e}"))?;
    let Some(experiment) = doc
        .nodes_mut()
        .iter_mut()
        .find(|n| n.name().value() == "experiment")
    else {
        let mut node = kdl::KdlNode::new("experiment");
        let mut children = kdl::KdlDocument::new();
        let mut seed_node = kdl::KdlNode::new("seed");
        seed_node.push(kdl::KdlEntry::new(seed as i128));
        children.nodes_mut().push(seed_node);
        node.set_children(children);
        doc.nodes_mut().insert(0, node);
        return Ok(doc.to_string());
    };
    let children = experiment.ensure_children();
    match children
        .nodes_mut()
        .iter_mut()
        .find(|n| n.name().value() == "seed")
    {
        Some(node) => {
            node.entries_mut().clear();
            node.push(kdl::KdlEntry::new(seed as i128));
        }
        None => {
            let mut seed_node = kdl::KdlNode::new("seed");
            seed_node.push(kdl::KdlEntry::new(seed as i128));
            children.nodes_mut().push(seed_node);
        }
    }
    Ok(doc.to_string())
}

/// The cards the audit holds: (target, workload) with an open search on a
/// `sim` target.
fn audited_cards(
    experiment: &Experiment,
    request: &AuditRequest,
) -> Result<Vec<(String, String)>, AuditError> {
    let Some(open) = &experiment.open else {
        return Err(AuditError::Usage(
            "the experiment has no `open` block: there is no Cr_open to audit".into(),
            Some("add `open { search min=1 max=50 precision=\"5%\" }` (docs/language.md)".into()),
        ));
    };
    if !matches!(open.rates, RateSelection::Search { .. }) {
        return Err(AuditError::Usage(
            "the open runs are an explicit grid: the audit holds a search's estimate and range"
                .into(),
            Some("use `search min= max= precision=` in `open`".into()),
        ));
    }
    let plan = crate::plan::build(experiment);
    let mut cards = vec![];
    for card in &plan.cards {
        if request.target.as_ref().is_some_and(|t| *t != card.target)
            || request
                .workload
                .as_ref()
                .is_some_and(|w| *w != card.workload)
        {
            continue;
        }
        let Some(target) = experiment.target(&card.target) else {
            continue;
        };
        if !matches!(target.kind, TargetKind::Sim { .. }) {
            if request.target.is_some() {
                return Err(AuditError::Usage(
                    format!(
                        "target `{}` is an endpoint: the audit repeats the searches on a simulated engine",
                        card.target
                    ),
                    Some(
                        "audit a `sim` target: the engine itself, a twin fitted by `capcard calibrate`, or a `sim queue` with a known answer (docs/audit.md)"
                            .into(),
                    ),
                ));
            }
            continue;
        }
        if !cards.contains(&(card.target.clone(), card.workload.clone())) {
            cards.push((card.target.clone(), card.workload.clone()));
        }
    }
    if cards.is_empty() {
        return Err(AuditError::Usage(
            "no `sim` target with an open search to audit".into(),
            Some(
                "add a `sim` target (a twin from `capcard calibrate`, or `sim queue`), or name one with --target"
                    .into(),
            ),
        ));
    }
    Ok(cards)
}

/// The reference Cr_open of `slo` on a `sim queue` target, or why there
/// is none.
pub fn reference_for(
    experiment: &Experiment,
    target: &str,
    workload: &str,
    slo: &str,
    calls: u64,
) -> (Option<Reference>, String, String) {
    let none = |why: &str, engine: String| (None, why.to_string(), engine);
    let Some(t) = experiment.target(target) else {
        return none("no such target", String::new());
    };
    let TargetKind::Sim {
        preset,
        faults,
        serving,
    } = &t.kind
    else {
        return none("an endpoint", String::new());
    };
    let Some(base) = crate::sim::presets::find(preset) else {
        return none("unknown preset", String::new());
    };
    let engine = match crate::sim::knobs::apply(base, serving) {
        Ok(p) => p,
        Err(e) => return none(&e.to_string(), String::new()),
    };
    let Some(model) = engine.queue else {
        return none(
            "no closed form: only a `sim queue` has a known answer",
            format!("sim {preset}"),
        );
    };
    let described = format!("sim queue: {}", model.describe());
    if serving.replicas > 1 {
        return none(
            "no reference: several replicas behind a router are not one FIFO queue",
            described,
        );
    }
    if faults.fail_rate.0 > 0.0 || faults.cut_rate.0 > 0.0 || faults.stall.is_some() {
        return none("no reference: injected faults", described);
    }
    let Some(w) = experiment.workloads.iter().find(|w| w.name == workload) else {
        return none("no such workload", described);
    };
    if !single_calls(w) {
        return none(
            "no closed form: the queue's answer is for single calls, not conversations or agent tasks",
            described,
        );
    }
    let Some(open) = &experiment.open else {
        return none("no open block", described);
    };
    if !matches!(open.arrival, crate::config::Arrival::Poisson) {
        return none(
            "no reference: the queue's answer assumes Poisson arrivals",
            described,
        );
    }
    let Some(slo) = experiment.slos.iter().find(|s| s.name == slo) else {
        return none("no such SLO", described);
    };
    let overhead_s = serving.network_overhead.as_secs_f64();
    let mut clauses = vec![];
    for clause in &slo.clauses {
        let c = match clause {
            SloClause::Latency {
                metric,
                stat,
                limit,
            } => {
                let metric = match metric {
                    LatencyMetric::Ttft | LatencyMetric::Ttfo => Metric::Ttft,
                    LatencyMetric::E2e => Metric::E2e,
                    other => {
                        return none(
                            &format!(
                                "no reference: a `{}` clause (the queue's answer covers TTFT, E2E and errors)",
                                other.as_str()
                            ),
                            described,
                        );
                    }
                };
                let bound_s = limit.as_secs_f64() - overhead_s;
                match stat {
                    Stat::Percentile(p) => Clause::Beyond {
                        metric,
                        bound_s,
                        allowed: 1.0 - p / 100.0,
                    },
                    Stat::Mean => Clause::Mean { metric, bound_s },
                }
            }
            SloClause::ErrorRate { max } => Clause::Errors { allowed: max.0 },
        };
        clauses.push(c);
    }
    let single_token = output_is_one_token(w);
    let setup = Setup {
        model,
        single_token,
        timeout_s: Some(t.timeout.as_secs_f64() - overhead_s),
    };
    // A timeout far beyond the service times and every bound changes
    // nothing the SLO sees: drop it, so the closed form applies where it
    // is exact (a call would need 50 mean services of waiting to reach it).
    let largest_bound_s = clauses
        .iter()
        .map(|c| match *c {
            Clause::Beyond { bound_s, .. } | Clause::Mean { bound_s, .. } => bound_s,
            Clause::Errors { .. } => f64::INFINITY,
        })
        .fold(0.0, f64::max);
    let setup = match setup.timeout_s {
        Some(timeout) if timeout > largest_bound_s + 50.0 * model.service.mean_s() => Setup {
            timeout_s: None,
            ..setup
        },
        _ => setup,
    };
    match reference::reference(&setup, &clauses, calls, 0x000A_0D17) {
        Some(r) => {
            let method = r.method.clone();
            (Some(r), method, described)
        }
        None => none("no reference: the SLO has no clause", described),
    }
}

fn single_calls(w: &Workload) -> bool {
    w.conversation.is_none() && w.agent.is_none() && w.sessions.is_none()
}

fn output_is_one_token(w: &Workload) -> bool {
    matches!(w.output_tokens.kind, crate::dist::DistKind::Fixed { value } if value <= 1.0)
}

/// Runs the audit, its progress on `log`.
pub async fn audit(
    request: &AuditRequest,
    cancel: CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<Vec<AuditRow>, AuditError> {
    let path = &request.experiment_path;
    let source = std::fs::read_to_string(path).map_err(|source| AuditError::Io {
        path: path.clone(),
        source,
    })?;
    let experiment = crate::config::parse_with_data(&source, path)
        .map_err(|e| AuditError::Run(RunError::Config(Box::new(e))))?;
    let cards = audited_cards(&experiment, request)?;
    let Some(open) = &experiment.open else {
        return Ok(vec![]);
    };
    let RateSelection::Search {
        precision,
        confidence,
        ..
    } = open.rates
    else {
        return Ok(vec![]);
    };
    let mut rows = vec![];
    for (target, workload) in &cards {
        for slo in &experiment.slos {
            let (reference, method, engine) = reference_for(
                &experiment,
                target,
                workload,
                &slo.name,
                request.reference_calls,
            );
            let _ = writeln!(
                log,
                "{target} × {workload}, SLO `{}`: reference {}",
                slo.name,
                match &reference {
                    Some(r) => format!(
                        "{} rps ({method})",
                        crate::format::significant(r.rate_per_s)
                    ),
                    None => method.clone(),
                }
            );
            rows.push(AuditRow {
                experiment: experiment.name.clone(),
                fingerprint: audited::settings_fingerprint(&experiment, workload, &slo.name),
                target: target.clone(),
                workload: workload.clone(),
                slo: slo.name.clone(),
                precision: precision.0,
                confidence: confidence.0,
                engine,
                reference_rps: reference.as_ref().map(|r| r.rate_per_s),
                reference_method: method,
                reference_relative_error: reference.as_ref().map(|r| r.relative_error),
                seeds: vec![],
            });
        }
    }

    let scratch = match &request.keep {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "capcard-audit-{}-{}",
            std::process::id(),
            crate::hash::mix(request.first_seed, u64::from(request.seeds))
        )),
    };
    std::fs::create_dir_all(&scratch).map_err(|source| AuditError::Io {
        path: scratch.clone(),
        source,
    })?;
    let started = std::time::Instant::now();
    for k in 0..request.seeds {
        if cancel.is_cancelled() {
            break;
        }
        let seed = request.first_seed + u64::from(k);
        let seeded = with_seed(&source, seed).map_err(|e| {
            AuditError::Usage(
                format!("cannot set the seed of {}: {e}", path.display()),
                None,
            )
        })?;
        for (target, workload) in &cards {
            let out = scratch.join(format!("seed-{seed}-{target}--{workload}"));
            if out.exists() {
                let _ = std::fs::remove_dir_all(&out);
            }
            let run = RunRequest {
                experiment_path: path.clone(),
                source: Some(seeded.clone()),
                out: Some(out.clone()),
                only: None,
                target: Some(target.clone()),
                workload: Some(workload.clone()),
                resume: None,
                show_progress: false,
                nonce: Some(seed),
                virtual_time: true,
                shard: None,
            };
            let mut quiet = std::io::sink();
            runner::run(&run, cancel.clone(), &mut quiet).await?;
            let report = folder::load_report(&ResultsFolder::new(&out))?;
            for card in report
                .cards
                .iter()
                .filter(|c| c.target == *target && c.workload == *workload)
            {
                for cr in &card.cr_open {
                    if let Some(row) = rows
                        .iter_mut()
                        .find(|r| r.target == *target && r.workload == *workload && r.slo == cr.slo)
                    {
                        row.seeds.push(seed_result(seed, cr, card, open.warmup));
                    }
                }
            }
            if request.keep.is_none() {
                let _ = std::fs::remove_dir_all(&out);
            }
        }
        let _ = writeln!(
            log,
            "seed {seed} done ({}/{}, {:.0} s)",
            k + 1,
            request.seeds,
            started.elapsed().as_secs_f64()
        );
    }
    // Rows with no reference of their own: a long run of the same engine,
    // through `capcard run`, around where the seeds put Cr_open.
    for row in rows.iter_mut().filter(|r| r.reference_rps.is_none()) {
        if cancel.is_cancelled() || request.reference_runs == 0 {
            break;
        }
        let mut estimates: Vec<f64> = row.seeds.iter().filter_map(|s| s.estimate_rps).collect();
        estimates.sort_by(f64::total_cmp);
        let Some(centre) = median(estimates) else {
            continue;
        };
        let _ = writeln!(
            log,
            "{} × {}, SLO `{}`: a long-run reference around {} rps",
            row.target,
            row.workload,
            row.slo,
            crate::format::significant(centre)
        );
        let out = scratch.join(format!(
            "reference-{}--{}--{}",
            row.target, row.workload, row.slo
        ));
        let long = long_run_source(&source, centre, request.reference_runs, open).map_err(|e| {
            AuditError::Usage(format!("cannot write the reference runs: {e}"), None)
        })?;
        let run = RunRequest {
            experiment_path: path.clone(),
            source: Some(long),
            out: Some(out.clone()),
            only: Some(crate::plan::Mode::Open),
            target: Some(row.target.clone()),
            workload: Some(row.workload.clone()),
            resume: None,
            show_progress: false,
            nonce: Some(0xE1E7),
            virtual_time: true,
            shard: None,
        };
        let mut quiet = std::io::sink();
        runner::run(&run, cancel.clone(), &mut quiet).await?;
        let report = folder::load_report(&ResultsFolder::new(&out))?;
        let found = report
            .cards
            .iter()
            .filter(|c| c.target == row.target && c.workload == row.workload)
            .flat_map(|c| c.cr_open.iter())
            .find(|c| c.slo == row.slo);
        if let Some(cr) = found
            && let (Some(rps), [Some(lo), Some(hi)]) = (cr.rps, cr.range)
            && !cr.at_least
        {
            row.reference_rps = Some(rps);
            row.reference_relative_error = Some(((hi - lo) / 2.0 / rps) / 1.645);
            row.reference_method = format!(
                "a long run through capcard run: {} open runs of {} around the seeds' median, fitted ({}% range {}–{})",
                request.reference_runs,
                crate::format::duration_words(long_run_window(open).as_secs_f64()),
                crate::format::significant(cr.confidence.unwrap_or(0.9) * 100.0),
                crate::format::significant(lo),
                crate::format::significant(hi)
            );
        } else {
            row.reference_method = format!(
                "{}; the long run around {} rps did not place it either",
                row.reference_method,
                crate::format::significant(centre)
            );
        }
        if request.keep.is_none() {
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    if request.keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(rows)
}

/// A long-run reference's window: 20 of the experiment's runs, at least
/// ten minutes.
fn long_run_window(open: &crate::config::OpenSpec) -> std::time::Duration {
    let run = match open.stop {
        crate::config::StopRule::Duration(d) => d,
        _ => std::time::Duration::from_secs(60),
    };
    (run * 20).max(std::time::Duration::from_secs(600))
}

/// The experiment with its `open` block made a grid of `runs` long runs
/// spread over ±25% of `centre` (denser near it), everything else as
/// written: the runs a long-run reference fits.
pub fn long_run_source(
    source: &str,
    centre: f64,
    runs: u32,
    open: &crate::config::OpenSpec,
) -> Result<String, String> {
    let mut doc: kdl::KdlDocument = source.parse().map_err(|e| format!("{e}"))?;
    let Some(block) = doc
        .nodes_mut()
        .iter_mut()
        .find(|n| n.name().value() == "open")
    else {
        return Err("no open block".into());
    };
    let children = block.ensure_children();
    children.nodes_mut().retain(|n| {
        !matches!(
            n.name().value(),
            "search"
                | "rates"
                | "duration"
                | "requests"
                | "budget"
                | "repeat"
                | "frontier"
                | "warmup"
        )
    });
    let runs = runs.max(3);
    let mut rates = kdl::KdlNode::new("rates");
    for k in 0..runs {
        // −25% … +25% in ln(rate), evenly.
        let t = -1.0 + 2.0 * f64::from(k) / f64::from(runs - 1);
        let rate = centre * (t * 1.25f64.ln()).exp();
        let rate = (rate * 1000.0).round() / 1000.0;
        rates.push(kdl::KdlEntry::new(rate));
    }
    children.nodes_mut().push(rates);
    let mut duration = kdl::KdlNode::new("duration");
    duration.push(kdl::KdlEntry::new(format!(
        "{}s",
        long_run_window(open).as_secs()
    )));
    children.nodes_mut().push(duration);
    let mut warmup = kdl::KdlNode::new("warmup");
    warmup.push(kdl::KdlEntry::new(format!(
        "{}s",
        (open.warmup.as_secs() * 4).max(30)
    )));
    children.nodes_mut().push(warmup);
    let mut budget = kdl::KdlNode::new("budget");
    budget.push(kdl::KdlEntry::new("1s"));
    children.nodes_mut().push(budget);
    Ok(doc.to_string())
}

fn seed_result(
    seed: u64,
    cr: &CrOpen,
    card: &crate::analyze::Card,
    warmup: std::time::Duration,
) -> SeedResult {
    let seconds = card
        .open
        .iter()
        .map(|r| warmup.as_secs_f64() + r.warmup_extended_s.unwrap_or(0.0) + r.window_s)
        .sum();
    let calls = card
        .open
        .iter()
        .map(|r| r.offered.unwrap_or(r.requests + r.errors))
        .sum();
    let censored = card
        .open
        .iter()
        .filter_map(|r| {
            crate::analyze::cr_open::evidence_of(r)
                .and_then(|e| e.censored)
                .map(|why| {
                    format!(
                        "{why} at {}",
                        crate::format::significant(r.rate_rps.unwrap_or(0.0))
                    )
                })
        })
        .collect();
    SeedResult {
        seed,
        estimate_rps: if cr.at_least { None } else { cr.rps },
        range: cr.range,
        method: cr.method.clone(),
        bound_by: cr.bound_by.clone(),
        seconds,
        calls,
        open_runs: card.open.len(),
        censored,
    }
}

/// The audit as a markdown table, a row per SLO of each card.
pub fn render(rows: &[AuditRow]) -> String {
    let mut out = String::new();
    out.push_str(
        "| card | SLO | engine | reference | estimate within ±precision | range holds the reference | stated | two-sided ranges | median width | median \\|error\\| | median time | median calls | no estimate |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let s = row.summary();
        let pct = |k: usize| {
            if s.seeds == 0 {
                "–".to_string()
            } else {
                format!(
                    "{k}/{} ({}%)",
                    s.seeds,
                    crate::format::significant(100.0 * k as f64 / s.seeds as f64)
                )
            }
        };
        let reference = match row.reference_rps {
            Some(r) => format!(
                "{} rps ({}{})",
                crate::format::significant(r),
                row.reference_method,
                row.reference_relative_error
                    .filter(|e| *e > 0.0)
                    .map(|e| format!(", ±{}%", crate::format::significant(e * 100.0)))
                    .unwrap_or_default()
            ),
            None => row.reference_method.clone(),
        };
        let (within, covered) = if row.reference_rps.is_some() {
            (
                format!(
                    "{} (±{}%)",
                    pct(s.within_precision),
                    crate::format::significant(row.precision * 100.0)
                ),
                format!(
                    "{}{}",
                    pct(s.covered),
                    s.coverage_interval
                        .map(|[a, b]| format!(" [{:.0}–{:.0}%]", a * 100.0, b * 100.0))
                        .unwrap_or_default()
                ),
            )
        } else {
            ("–".to_string(), "–".to_string())
        };
        out.push_str(&format!(
            "| {} × {} | {} | {} | {} | {} | {} | {}% | {} | {} | {} | {} | {} | {} |\n",
            row.target,
            row.workload,
            row.slo,
            row.engine,
            reference,
            within,
            covered,
            crate::format::significant(row.confidence * 100.0),
            pct(s.two_sided),
            s.median_width
                .map(|w| format!("{}%", crate::format::significant(w * 100.0)))
                .unwrap_or_else(|| "–".into()),
            s.median_abs_error
                .map(|w| format!("{}%", crate::format::significant(w * 100.0)))
                .unwrap_or_else(|| "–".into()),
            crate::format::duration_words(s.median_seconds),
            crate::format::significant(s.median_calls),
            s.no_estimate,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_replaced_or_added_and_nothing_else_changes() {
        let source = "// a comment\nexperiment \"x\" {\n    seed 5\n}\nworkload \"w\" {\n    input-tokens fixed 4\n}\n";
        let out = with_seed(source, 42).unwrap();
        assert!(out.contains("seed 42"), "{out}");
        assert!(!out.contains("seed 5"), "{out}");
        assert!(out.contains("// a comment"));
        assert!(out.contains("input-tokens fixed 4"));
        let out = with_seed("experiment \"x\" {\n    description \"d\"\n}\n", 7).unwrap();
        assert!(out.contains("seed 7"), "{out}");
        let out = with_seed("workload \"w\" {\n}\n", 9).unwrap();
        assert!(out.contains("seed 9"), "{out}");
    }

    #[test]
    fn an_open_end_holds_its_side() {
        assert!(range_holds([Some(1.0), Some(2.0)], 1.5));
        assert!(!range_holds([Some(1.0), Some(2.0)], 2.5));
        assert!(range_holds([None, Some(2.0)], 0.5));
        assert!(range_holds([Some(1.0), None], 9.0));
        assert!(range_holds([None, None], 1.0));
    }

    #[test]
    fn wilson_covers_the_proportion() {
        let [a, b] = wilson(90, 100, 1.96);
        assert!(a < 0.9 && b > 0.9 && a > 0.8 && b < 0.96, "{a} {b}");
        assert_eq!(wilson(0, 0, 1.96), [0.0, 1.0]);
    }
}
