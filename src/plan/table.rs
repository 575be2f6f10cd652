//! The readable `capcard plan` output: what will run, under which SLOs, and
//! how long the user will wait — what to expect and the most it can take,
//! per card and in total. Plain text with aligned columns and no colours, so
//! it reads the same in a terminal, a CI log and a pasted issue.

use std::fmt::Write as _;

use crate::config::{
    ArrivalUnit, Experiment, Fraction, LatencyMetric, Sample, Slo, SloClause, StopRule,
};
use crate::data::dataset::LengthStats;

use super::estimate::{
    ASSUMED_CALL_OVERHEAD_S, ASSUMED_S_PER_OUTPUT_TOKEN, WallTime, WorkloadProfile, run_s,
};
use super::extension::{DRAIN_ALLOWANCE, Extendable, extension_budget, extensions_bound_s};
use super::{CardPlan, Load, OpenPlan, Plan, RunPlan, workload_seed};

/// The plan as a table: per card a header, the closed sweep, the open runs
/// and the SLOs, then the totals and the assumptions behind the estimate.
pub fn render_table(plan: &Plan, experiment: &Experiment) -> String {
    let mut out = String::new();
    let closed_runs: usize = plan.cards.iter().map(|c| c.closed.len()).sum();
    let (open_typical, open_max) = plan.cards.iter().fold((0u64, 0u64), |(t, m), c| {
        let (typical, max) = open_run_count(c);
        (t + typical, m + max)
    });
    let _ = writeln!(
        out,
        "experiment \"{}\"  seed {}",
        plan.experiment, plan.seed
    );
    if let Some(description) = &experiment.description {
        let _ = writeln!(out, "{description}");
    }

    // Run rows of every card share one set of column widths.
    let rows: Vec<Vec<[String; 4]>> = plan
        .cards
        .iter()
        .map(|card| run_rows(card, experiment))
        .collect();
    let mut widths = [0usize; 3];
    for row in rows.iter().flatten() {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let slo_width = plan
        .cards
        .iter()
        .flat_map(|c| &c.slos)
        .map(|name| name.chars().count())
        .max()
        .unwrap_or(0);

    for (card, rows) in plan.cards.iter().zip(&rows) {
        let _ = writeln!(
            out,
            "\n{} × {}  ({})",
            card.target,
            card.workload,
            est_and_bound(card.wall_time())
        );
        if let Some(launch) = experiment
            .target(&card.target)
            .and_then(|t| t.launch.as_ref())
        {
            let ready = match &launch.ready_url {
                Some(url) => format!("ready when {url} answers"),
                None => "ready when its port accepts".to_string(),
            };
            let _ = writeln!(
                out,
                "  launch   {}  ({ready}, within {}; stopped after the card)",
                launch.argv.join(" "),
                crate::format::duration_words(launch.ready_timeout.as_secs_f64()),
            );
        }
        for row in rows {
            let mut line = String::from("  ");
            for (i, cell) in row.iter().enumerate() {
                if i < 3 {
                    // Runs and time are numbers: right-align them.
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    if i == 0 {
                        line.push_str(cell);
                        line.push_str(&" ".repeat(pad));
                    } else {
                        line.push_str(&" ".repeat(pad));
                        line.push_str(cell);
                    }
                    line.push_str("  ");
                } else {
                    line.push_str(cell);
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let label_width = widths[0];
        if let Some(mix) = &card.mix {
            // A mix is judged class by class: each on its own SLO.
            let name_width = mix.classes.iter().map(|c| c.name.chars().count()).max();
            let name_width = name_width.unwrap_or(0);
            for (i, class) in mix.classes.iter().enumerate() {
                let label = if i == 0 { "mix" } else { "" };
                let mut extras = vec![format!("workload {}", class.workload)];
                if let Some(model) = &class.model {
                    extras.push(format!("model {model}"));
                }
                if let Some(priority) = class.priority {
                    extras.push(format!("priority {priority}"));
                }
                let slo = match class.slo.as_deref() {
                    Some(name) => format!(
                        "slo {name}: {}",
                        experiment
                            .slo(name)
                            .map_or_else(|| "(not defined)".to_string(), slo_clauses)
                    ),
                    None => "no slo".to_string(),
                };
                let _ = writeln!(
                    out,
                    "  {label:label_width$}  {:name_width$}  {:>4}  {}; {slo}",
                    class.name,
                    format!("{:.0}%", class.share * 100.0),
                    extras.join(", ")
                );
            }
            if !card.slos.is_empty() {
                let _ = writeln!(
                    out,
                    "  {:label_width$}  Cr_open: every class within its own SLO",
                    ""
                );
            }
            for (label, text) in data_lines(card, experiment) {
                let _ = writeln!(out, "  {label:label_width$}  {text}");
            }
            continue;
        }
        if card.slos.is_empty() {
            let reason = if matches!(card.open, OpenPlan::None) {
                "none (no open runs)"
            } else {
                "none defined (open runs are measured, no Cr_open is searched)"
            };
            let _ = writeln!(out, "  {:label_width$}  {reason}", "slos");
        }
        for (i, name) in card.slos.iter().enumerate() {
            let label = if i == 0 { "slos" } else { "" };
            let clauses = experiment
                .slo(name)
                .map_or_else(|| "(not defined)".to_string(), slo_clauses);
            let _ = writeln!(out, "  {label:label_width$}  {name:slo_width$}  {clauses}");
        }
        for (label, text) in data_lines(card, experiment) {
            let _ = writeln!(out, "  {label:label_width$}  {text}");
        }
    }

    let open_label = if open_typical == open_max {
        open_max.to_string()
    } else {
        format!("~{open_typical} (up to {open_max})")
    };
    let has_search = plan
        .cards
        .iter()
        .any(|c| matches!(c.open, OpenPlan::Search { .. }));
    let has_open = plan.cards.iter().any(|c| !matches!(c.open, OpenPlan::None));
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let subjects = plan.cards.len() / experiment.targets.len().max(1);
    let mix_cards =
        plan.cards.iter().filter(|c| c.mix.is_some()).count() / experiment.targets.len().max(1);
    let subjects = if mix_cards == 0 {
        plural(subjects, "workload")
    } else if mix_cards == subjects {
        plural(subjects, "mix card")
    } else {
        format!(
            "{} + {}",
            plural(subjects - mix_cards, "workload"),
            plural(mix_cards, "mix card")
        )
    };
    let _ = writeln!(
        out,
        "\n{} ({} × {subjects}), {closed_runs} closed runs, {open_label} open runs",
        plural(plan.cards.len(), "card"),
        plural(experiment.targets.len(), "target"),
    );
    // Virtual-time cards take the time they simulate only on the engine's
    // clock: seconds of wall time.
    let is_virtual = |card: &CardPlan| {
        experiment.target(&card.target).is_some_and(|t| {
            matches!(&t.kind, crate::config::TargetKind::Sim { serving, .. } if serving.virtual_time)
        })
    };
    let virtual_time: WallTime = plan
        .cards
        .iter()
        .filter(|c| is_virtual(c))
        .map(CardPlan::wall_time)
        .sum();
    let real_time: WallTime = plan
        .cards
        .iter()
        .filter(|c| !is_virtual(c))
        .map(CardPlan::wall_time)
        .sum();
    let virtual_cards = plan.cards.iter().filter(|c| is_virtual(c)).count();
    if virtual_cards > 0 {
        let _ = writeln!(
            out,
            "{} in virtual time (`virtual #true`): {} of simulated time, a small fraction of it in wall time",
            plural(virtual_cards, "card"),
            est_and_bound(virtual_time),
        );
    }
    for sweep in &experiment.sweeps {
        let planned = sweep
            .settings
            .iter()
            .filter(|t| plan.cards.iter().any(|c| c.target == **t))
            .count();
        let axes = if sweep.axes.is_empty() {
            "listed".to_string()
        } else {
            sweep
                .names
                .iter()
                .zip(&sweep.axes)
                .map(|(n, values)| format!("{n} {}", values.join(" ")))
                .collect::<Vec<_>>()
                .join(" × ")
        };
        let tune = match &sweep.tune {
            Some(tune) => format!(
                "; tune: {}, a coarse set first, then the best's neighbours, settings that cannot win pruned{}: the times above count every setting",
                match &tune.objective {
                    crate::config::TuneObjective::CrOpen { slo } =>
                        format!("the highest Cr_open within `{slo}`"),
                    crate::config::TuneObjective::CrClosed =>
                        "the highest tok/s at Cr_closed".to_string(),
                    crate::config::TuneObjective::Cost =>
                        "the lowest cost per million output tokens".to_string(),
                },
                tune.budget.map_or(String::new(), |b| format!(
                    ", within {}",
                    crate::format::duration_words(b.as_secs_f64())
                ))
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "settings of `{}`: {planned} ({axes}){tune}",
            sweep.target
        );
    }
    // Launched engines start before their cards: not measured yet, bounded
    // by their readiness timeouts.
    let mut launches: Vec<&crate::config::Target> = Vec::new();
    for card in &plan.cards {
        if let Some(t) = experiment
            .target(&card.target)
            .filter(|t| t.launch.is_some())
            && !launches.iter().any(|l| l.name == t.name)
        {
            launches.push(t);
        }
    }
    let startup_bound_s: f64 = launches
        .iter()
        .filter_map(|t| t.launch.as_ref())
        .map(|l| l.ready_timeout.as_secs_f64())
        .sum();
    // Every card virtual: no real-time estimate to give.
    if virtual_cards < plan.cards.len() || virtual_cards == 0 {
        let _ = writeln!(
            out,
            "estimated wall time {} (runs in sequence; {} drain allowance per run)",
            and_at_most(real_time),
            crate::format::duration_words(DRAIN_ALLOWANCE.as_secs_f64()),
        );
    }
    if !launches.is_empty() {
        let _ = writeln!(
            out,
            "plus {}' start-ups: each takes what the engine takes (recorded on its card), at most its readiness timeout: {} in all",
            plural(launches.len(), "launched engine"),
            crate::format::duration_words(startup_bound_s),
        );
    }
    // What each figure assumes, in the words of plan::estimate.
    if has_search {
        let _ = writeln!(
            out,
            "est. = searches at their typical number of runs, no extensions; at most = each search's budget (its runs, warmups included) and the frontier phase, plus each grid's whole extension budget"
        );
    } else if has_open {
        let _ = writeln!(
            out,
            "est. = every run as planned, no extensions; at most = plus each card's whole extension budget"
        );
    }
    if has_requests_stop(plan) {
        let _ = writeln!(
            out,
            "`requests` stops assume {} + {} per output token per call",
            crate::format::duration_words(ASSUMED_CALL_OVERHEAD_S),
            crate::format::duration_words(ASSUMED_S_PER_OUTPUT_TOKEN),
        );
    }
    out
}

/// Rows `[label, runs, time, what]` of one card.
fn run_rows(card: &CardPlan, experiment: &Experiment) -> Vec<[String; 4]> {
    let arrival_unit = experiment
        .workload(&card.workload)
        .map_or(ArrivalUnit::Request, |w| w.unit());
    let unit = arrival_unit.per_s();
    let mut rows = Vec::new();
    match (card.closed.first(), experiment.closed.as_ref()) {
        (Some(first), Some(_)) => {
            let levels: Vec<String> = card
                .closed
                .iter()
                .filter_map(|r| match r.load {
                    Load::Concurrency { concurrency } => Some(concurrency.to_string()),
                    Load::Rate { .. } => None,
                })
                .collect();
            rows.push([
                "closed".into(),
                runs_label(card.closed.len() as u64),
                crate::format::duration_words(closed_time_s(card, experiment)),
                format!("concurrency {}", levels.join(" ")),
            ]);
            rows.push(["".into(), "".into(), "".into(), per_run(first, "level")]);
        }
        _ => rows.push([
            "closed".into(),
            "—".into(),
            "".into(),
            "no closed sweep".into(),
        ]),
    }
    let profile = card_profile(card, experiment);
    let closed_s = closed_time_s(card, experiment);
    let open_time = WallTime {
        expected_s: card.expected_wall_time_s - closed_s,
        bound_s: card.wall_time().bound_s - closed_s,
    };
    let extensions_s = Extendable::of(&card.open, experiment).map_or(0.0, |runs| {
        extensions_bound_s(extension_budget(experiment, &card.open), &runs)
    });
    match &card.open {
        OpenPlan::None => {
            rows.push(["open".into(), "—".into(), "".into(), "no open runs".into()]);
        }
        OpenPlan::Grid { runs } => {
            let rates: Vec<String> = runs
                .iter()
                .filter_map(|r| match r.load {
                    Load::Rate { rate, .. } => Some(crate::format::trimmed(rate.0, 3)),
                    Load::Concurrency { .. } => None,
                })
                .collect();
            let arrival = runs.first().map_or_else(String::new, |r| match r.load {
                Load::Rate { arrival, .. } => format!(", {}", arrival.label()),
                Load::Concurrency { .. } => String::new(),
            });
            rows.push([
                "open".into(),
                runs_label(runs.len() as u64),
                crate::format::duration_words(open_time.expected_s),
                format!("rates {} {unit}{arrival}", rates.join(" ")),
            ]);
            if let Some(first) = runs.first() {
                let same_stop = runs.iter().all(|r| r.stop == first.stop);
                let line = if same_stop {
                    per_run(first, "rate")
                } else {
                    // Trace replays last the trace at their own speed; other
                    // runs are lengthened for samples at low rates.
                    let lengths: Vec<String> = runs.iter().map(measured_words).collect();
                    let why = if experiment.open.as_ref().is_some_and(|o| o.trace.is_some()) {
                        "the trace's length"
                    } else {
                        "sized for samples"
                    };
                    format!(
                        "warmup {} + {why} per rate ({})",
                        crate::format::duration_words(first.warmup.as_secs_f64()),
                        lengths.join(", ")
                    )
                };
                rows.push(["".into(), "".into(), "".into(), line]);
            }
            if extensions_s > 0.0 {
                rows.push([
                    "".into(),
                    "".into(),
                    "".into(),
                    format!(
                        "at most: + {} extending inconclusive rates: ≤ {}",
                        crate::format::duration_words(extensions_s),
                        crate::format::duration_words(open_time.bound_s)
                    ),
                ]);
            }
        }
        OpenPlan::Search {
            arrival,
            min,
            max,
            precision,
            frontier_runs,
            typical_runs,
            typical_frontier_runs,
            template,
            ..
        } => {
            // The frontier phase's rates come after the search's, within
            // the same bound (runs and time).
            let frontier = match experiment.open.as_ref().map(|o| &o.frontier) {
                Some(multipliers) if *frontier_runs > 0 => {
                    let listed: Vec<String> = multipliers
                        .iter()
                        .map(|m| format!("{}×", crate::format::trimmed(*m, 3)))
                        .collect();
                    format!(
                        ", then the frontier at {} of each bound (~{typical_frontier_runs}, ≤ {frontier_runs} of the runs)",
                        listed.join(" ")
                    )
                }
                _ => String::new(),
            };
            let typical = typical_runs.saturating_add(*typical_frontier_runs);
            rows.push([
                "open".into(),
                format!("~{}", runs_label(u64::from(typical))),
                crate::format::duration_words(open_time.expected_s),
                format!(
                    "search {}–{} {unit}, {}, precision {}{frontier}",
                    crate::format::trimmed(min.0, 3),
                    crate::format::trimmed(max.0, 3),
                    arrival.label(),
                    percent(*precision)
                ),
            ]);
            rows.push(["".into(), "".into(), "".into(), per_run(template, "rate")]);
            if let Some(line) = lengthening(template, experiment, arrival_unit) {
                rows.push(["".into(), "".into(), "".into(), line]);
            }
            if let Some(profile) = &profile {
                let longest = super::run_at_rate_of(template, *min, experiment);
                let budget_s = super::search_budget(experiment, &card.open).as_secs_f64();
                let frontier_part = if *frontier_runs > 0 {
                    format!(
                        ", then up to {} of the frontier of up to {} each",
                        runs_label(u64::from(*frontier_runs)),
                        crate::format::duration_words(run_s(&longest, profile))
                    )
                } else {
                    String::new()
                };
                rows.push([
                    "".into(),
                    "".into(),
                    "".into(),
                    format!(
                        "at most: the search's budget, {} of runs{}{frontier_part}: ≤ {}",
                        crate::format::duration_words(budget_s),
                        if experiment.open.as_ref().and_then(|o| o.budget).is_some() {
                            ""
                        } else {
                            " (12 runs at the middle rate, the default)"
                        },
                        crate::format::duration_words(open_time.bound_s)
                    ),
                ]);
            }
        }
    }
    rows
}

/// Below which rate the search's runs are lengthened for samples
/// ([`super::open_stop`]), when the range reaches that low, in what
/// arrives (calls, conversations, tasks).
fn lengthening(
    template: &RunPlan,
    experiment: &Experiment,
    arrival: ArrivalUnit,
) -> Option<String> {
    let needed = super::samples_for_run(experiment, template);
    let StopRule::Duration(declared) = template.stop else {
        return None;
    };
    let below_rps = needed as f64 / declared.as_secs_f64();
    let Load::Rate { rate: min, .. } = template.load else {
        return None;
    };
    (needed > 0 && min.0 < below_rps).then(|| {
        format!(
            "longer below {} {}, up to {}×: {needed} {} to judge the SLOs",
            crate::format::trimmed(below_rps, 3),
            arrival.per_s(),
            crate::format::trimmed(super::MAX_SAMPLE_LENGTHENING, 2),
            arrival.plural()
        )
    })
}

/// `est. 25m, at most 8h` (see [`and_at_most`]).
fn est_and_bound(time: WallTime) -> String {
    format!("est. {}", and_at_most(time))
}

/// `25m, at most 8h`, or `25m` when the two read the same.
fn and_at_most(time: WallTime) -> String {
    let (expected, bound) = (
        crate::format::duration_words(time.expected_s),
        crate::format::duration_words(time.bound_s),
    );
    if expected == bound {
        expected
    } else {
        format!("{expected}, at most {bound}")
    }
}

/// The closed sweep's share of the card's estimate (the plan stores one
/// figure of each kind per card; the split is only for display). Closed
/// runs are never extended: the same in both.
fn closed_time_s(card: &CardPlan, experiment: &Experiment) -> f64 {
    card_profile(card, experiment).map_or(0.0, |profile| {
        card.closed.iter().map(|r| run_s(r, &profile)).sum()
    })
}

/// The shape of what a card sends, as the estimate saw it.
fn card_profile(card: &CardPlan, experiment: &Experiment) -> Option<WorkloadProfile> {
    let profile = match (&card.mix, experiment.workload(&card.workload)) {
        (Some(mix), _) => WorkloadProfile::blend(
            &mix.classes
                .iter()
                .filter_map(|c| {
                    let w = experiment.workload(&c.workload)?;
                    Some((
                        WorkloadProfile::of(w, workload_seed(experiment.seed, &c.workload)),
                        c.share,
                    ))
                })
                .collect::<Vec<_>>(),
        ),
        (None, Some(workload)) => {
            WorkloadProfile::of(workload, workload_seed(experiment.seed, &workload.name))
        }
        (None, None) => return None,
    };
    Some(profile)
}

fn runs_label(count: u64) -> String {
    let plural = if count == 1 { "run" } else { "runs" };
    format!("{count} {plural}")
}

/// `(typical, at most)` open runs of a card, the same for a grid.
fn open_run_count(card: &CardPlan) -> (u64, u64) {
    match &card.open {
        OpenPlan::None => (0, 0),
        OpenPlan::Grid { runs } => (runs.len() as u64, runs.len() as u64),
        OpenPlan::Search {
            max_runs,
            frontier_runs,
            typical_runs,
            typical_frontier_runs,
            ..
        } => (
            u64::from(typical_runs.saturating_add(*typical_frontier_runs)),
            u64::from(max_runs.saturating_add(*frontier_runs)),
        ),
    }
}

fn has_requests_stop(plan: &Plan) -> bool {
    plan.cards.iter().any(|card| {
        let open_stop = match &card.open {
            OpenPlan::None => None,
            OpenPlan::Grid { runs } => runs.first().map(|r| r.stop),
            OpenPlan::Search { template, .. } => Some(template.stop),
        };
        card.closed
            .iter()
            .map(|r| r.stop)
            .chain(open_stop)
            .any(|s| matches!(s, StopRule::Requests(_)))
    })
}

/// `warmup 10s + 1m per level` / `warmup 10s + 400 requests per rate`.
fn measured_words(run: &RunPlan) -> String {
    match run.stop {
        StopRule::Duration(d) => crate::format::duration_words(d.as_secs_f64()),
        StopRule::Requests(n) => format!("{n} requests"),
        StopRule::TraceEnd => "the trace".to_string(),
    }
}

fn per_run(run: &RunPlan, what: &str) -> String {
    let measured = measured_words(run);
    format!(
        "warmup {} + {measured} per {what}",
        crate::format::duration_words(run.warmup.as_secs_f64())
    )
}

/// `ttft p50≤300ms p99≤1s, itl p95≤60ms, error-rate≤0.5%`: clauses of one
/// metric together, metrics in the order they first appear.
fn slo_clauses(slo: &Slo) -> String {
    let mut groups: Vec<(Option<LatencyMetric>, Vec<String>)> = Vec::new();
    for clause in &slo.clauses {
        let (metric, text) = match clause {
            SloClause::Latency {
                metric,
                stat,
                limit,
            } => (
                Some(*metric),
                format!(
                    "{}≤{}",
                    stat.key(),
                    crate::format::duration_words(limit.as_secs_f64())
                ),
            ),
            SloClause::ErrorRate { max } => (None, format!("≤{}", percent(*max))),
        };
        match groups.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, texts)) => texts.push(text),
            None => groups.push((metric, vec![text])),
        }
    }
    let parts: Vec<String> = groups
        .into_iter()
        .map(|(metric, texts)| match metric {
            Some(metric) => format!("{} {}", metric.as_str(), texts.join(" ")),
            None => format!("error-rate{}", texts.join(" ")),
        })
        .collect();
    if parts.is_empty() {
        "(no clauses)".to_string()
    } else {
        parts.join(", ")
    }
}

fn percent(fraction: Fraction) -> String {
    format!("{}%", crate::format::trimmed(fraction.0 * 100.0, 3))
}

/// `x` with at most `decimals` decimals and no trailing zeros: 0.5, 64, 1.25.
/// The loaded dataset and trace behind a card: size and measured lengths
/// (text sized by the word approximation of `workload::dataset`).
fn data_lines(card: &CardPlan, experiment: &Experiment) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    let stats = |values: &[u32]| {
        LengthStats::of(values).map_or_else(
            || "none given".to_string(),
            |s| format!("mean {:.1} p50 {} p99 {}", s.mean, s.p50, s.p99),
        )
    };
    if let Some(spec) = experiment
        .workload(&card.workload)
        .and_then(|w| w.dataset.as_ref())
    {
        if let Some(data) = &spec.data {
            let order = match spec.sample {
                Sample::Shuffle => "shuffled",
                Sample::Sequential => "in order",
            };
            let outputs = data.output_lengths();
            let missing = data.entries.len() - outputs.len();
            let fallback = if missing > 0 {
                format!(" ({missing} from output-tokens)")
            } else {
                String::new()
            };
            lines.push((
                "dataset",
                format!(
                    "{}: {} records, {order}; input tokens {}; output tokens {}{fallback}",
                    spec.path.display(),
                    data.entries.len(),
                    stats(&data.input_lengths()),
                    stats(&outputs),
                ),
            ));
        }
    }
    if let Some(spec) = experiment
        .workload(&card.workload)
        .and_then(|w| w.sessions.as_ref())
        && let Some(data) = &spec.data
    {
        let calls: Vec<&crate::data::agent_trace::TraceCall> =
            data.sessions.iter().flat_map(|s| &s.calls).collect();
        let per_session = calls.len() as f64 / data.sessions.len().max(1) as f64;
        let rate = crate::workload::sessions::session_rate_per_s(data)
            .map_or_else(|| "one start".to_string(), |r| format!("{r:.3} sessions/s"));
        let cap = spec.tool_time_max().map_or_else(
            || "tool time as recorded".to_string(),
            |max| {
                let gaps: Vec<f64> = calls
                    .iter()
                    .filter(|c| c.parent.is_some())
                    .map(|c| c.gap_ms)
                    .collect();
                let capped = gaps
                    .iter()
                    .filter(|&&g| g > max.as_secs_f64() * 1e3)
                    .count();
                format!(
                    "tool time capped at {} ({capped} of {} gaps)",
                    crate::format::duration_words(max.as_secs_f64()),
                    gaps.len()
                )
            },
        );
        lines.push((
            "sessions",
            format!(
                "{} ({}): {} sessions, {per_session:.1} calls per session, recorded at {rate}; {cap}; input tokens {}; output tokens {}",
                spec.path.display(),
                data.format.label(),
                data.sessions.len(),
                stats(&calls.iter().map(|c| c.input_tokens).collect::<Vec<_>>()),
                stats(&calls.iter().map(|c| c.output_tokens).collect::<Vec<_>>()),
            ),
        ));
    }
    if let Some(spec) = experiment.open.as_ref().and_then(|o| o.trace.as_ref()) {
        if let Some(data) = &spec.data {
            let inputs: Vec<u32> = data.rows.iter().map(|r| r.input_tokens).collect();
            let outputs: Vec<u32> = data.rows.iter().map(|r| r.output_tokens).collect();
            lines.push((
                "trace",
                format!(
                    "{}: {} arrivals over {:.1} s (mean {:.3} rps at speedup 1); input tokens {}; output tokens {}",
                    spec.path.display(),
                    data.rows.len(),
                    data.span_s(),
                    data.mean_rate_per_s(),
                    stats(&inputs),
                    stats(&outputs),
                ),
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_trimmed() {
        assert_eq!(crate::format::trimmed(0.5, 3), "0.5");
        assert_eq!(crate::format::trimmed(64.0, 3), "64");
        assert_eq!(percent(Fraction(0.005)), "0.5%");
        assert_eq!(percent(Fraction(0.05)), "5%");
    }
}
