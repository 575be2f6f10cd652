//! How many calls a run needs to be judged: the samples an SLO's
//! percentiles need at the confidence asked for, and how long an open run
//! at a given rate must last to get them.

use super::*;
use crate::config::{Experiment, StopRule};

/// Tasks an open run of a mix needs for every class's verdict: each
/// class's [`tasks_to_judge`] on its own SLO, divided by its share (a
/// class with 10% of arrivals needs ten times the run), the largest of
/// them.
pub fn mix_samples_to_judge(experiment: &Experiment, mix: &MixPlan, confidence: f64) -> u64 {
    mix.classes
        .iter()
        .filter_map(|c| {
            let slo = experiment.slo(c.slo.as_deref()?)?;
            let calls_per_task = experiment
                .workload(&c.workload)
                .map_or(1.0, |w| calls_per_task(experiment, w));
            let own = tasks_to_judge(std::slice::from_ref(slo), confidence, calls_per_task);
            (c.share > 0.0).then(|| (own as f64 / c.share).ceil() as u64)
        })
        .max()
        .unwrap_or(0)
}

/// A workload's mean calls per task, as the plan's estimates draw it.
fn calls_per_task(experiment: &Experiment, workload: &crate::config::Workload) -> f64 {
    WorkloadProfile::of(workload, workload_seed(experiment.seed, &workload.name)).calls_per_task
}

/// The samples an open run of `run`'s card needs (see [`open_stop`]).
pub fn samples_for_run(experiment: &Experiment, run: &RunPlan) -> u64 {
    card_samples(experiment, &run.workload, run.mix.as_ref())
}

/// The samples an open run of the card `card` (a workload's name, or a mix
/// card's with its `mix`) needs (see [`open_stop`]).
pub fn card_samples(experiment: &Experiment, card: &str, mix: Option<&MixPlan>) -> u64 {
    let confidence = experiment.open.as_ref().map_or(0.95, |o| o.confidence.0);
    if let Some(mix) = mix {
        return mix_samples_to_judge(experiment, mix, confidence);
    }
    let slos = workload_slos(experiment, card).unwrap_or_default();
    let calls_per_task = experiment
        .workload(card)
        .map_or(1.0, |w| calls_per_task(experiment, w));
    tasks_to_judge(&experiment.slos_named(&slos), confidence, calls_per_task)
}

/// A run holds this many times the fewest samples that bound its SLOs'
/// highest percentile at all, so that a pass does not hang on the single
/// largest sample.
pub const SAMPLE_MARGIN: u64 = 3;

/// A run is lengthened for samples to at most this many times its declared
/// length (beyond it, a low rate stays inconclusive and the card says so).
pub const MAX_SAMPLE_LENGTHENING: f64 = 4.0;

/// Samples an open run should hold for `slos` to be judged at
/// `confidence`: [`SAMPLE_MARGIN`] × the fewest samples giving the highest
/// percentile among their latency clauses an upper bound
/// ([`crate::stats::interval::min_samples_for_upper_bound`]: 36 for a p90
/// at 95%, 368 for a p99), or that let an error-rate bound pass with no
/// failure ([`crate::stats::interval::min_samples_for_proportion_bound`]:
/// 765 for 0.5%) — without them an error rate of 0 stays inconclusive; 0
/// without such clauses. Counted as the clauses are judged: calls, or
/// tasks for a task E2E clause (one call a task, they are the same).
pub fn samples_to_judge(slos: &[crate::config::Slo], confidence: f64) -> u64 {
    tasks_to_judge(slos, confidence, 1.0)
}

/// Tasks an open run should hold for `slos` to be judged at `confidence`
/// when a task makes `calls_per_task` calls on average: a task E2E clause
/// needs [`samples_to_judge`]'s count in tasks, every other clause (judged
/// per call) that count in calls, so `calls_per_task` times fewer tasks.
/// Counting tasks for a per-call clause lengthened an agent run of 4 calls
/// a task 4× more than its verdict needed.
pub fn tasks_to_judge(slos: &[crate::config::Slo], confidence: f64, calls_per_task: f64) -> u64 {
    use crate::config::{LatencyMetric, SloClause, Stat};
    let calls_per_task = if calls_per_task.is_finite() && calls_per_task >= 1.0 {
        calls_per_task
    } else {
        1.0
    };
    let in_tasks = |samples: u64, per_task: bool| {
        if per_task {
            samples
        } else {
            (samples as f64 / calls_per_task).ceil() as u64
        }
    };
    slos.iter()
        .flat_map(|slo| &slo.clauses)
        .filter_map(|clause| match clause {
            SloClause::Latency {
                metric,
                stat: Stat::Percentile(p),
                ..
            } => Some(in_tasks(
                crate::stats::interval::min_samples_for_upper_bound(p / 100.0, confidence)
                    * SAMPLE_MARGIN,
                *metric == LatencyMetric::TaskE2e,
            )),
            // An error rate needs no margin: with no failure this many
            // calls pass, and with failures no run length makes a bound it
            // is near pass.
            SloClause::ErrorRate { max } if max.0 > 0.0 => Some(in_tasks(
                crate::stats::interval::min_samples_for_proportion_bound(max.0, confidence),
                false,
            )),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// How an open run at `rate` stops: the declared rule
/// ([`OpenSpec::stop_at`](crate::config::OpenSpec::stop_at)), lengthened when it would not hold the
/// `needed` tasks ([`tasks_to_judge`], [`mix_samples_to_judge`]) its SLOs need at that rate — a p90 judged on the
/// 10 calls of 40 s at 0.25 rps can never pass — by up to
/// [`MAX_SAMPLE_LENGTHENING`], to a whole second. A trace replay lasts
/// its trace. `needed` counts tasks ([`tasks_to_judge`]), as the rate does.
pub fn open_stop(spec: &crate::config::OpenSpec, rate: f64, needed: u64) -> StopRule {
    let declared = spec.stop_at(rate);
    if spec.trace.is_some() || needed == 0 || rate.is_nan() || rate <= 0.0 {
        return declared;
    }
    match declared {
        StopRule::Duration(d) => {
            let needed_s = needed as f64 / rate;
            if needed_s <= d.as_secs_f64() {
                return declared;
            }
            let lengthened = needed_s
                .min(d.as_secs_f64() * MAX_SAMPLE_LENGTHENING)
                .ceil();
            StopRule::Duration(std::time::Duration::from_secs_f64(lengthened))
        }
        StopRule::Requests(n) if n < needed => {
            StopRule::Requests(needed.min((n as f64 * MAX_SAMPLE_LENGTHENING).ceil() as u64))
        }
        other => other,
    }
}
