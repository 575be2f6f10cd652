//! Wall-time estimate of a plan: how long a user will wait, before any run,
//! as two figures per card and in total: what to **expect**, and the most
//! it **can** take (the bound).
//!
//! Runs execute one after another, so a plan's time is the sum of its runs'.
//! A run takes `warmup + measured time + DRAIN_ALLOWANCE`:
//! - a `duration` stop measures exactly that long;
//! - a `requests N` stop depends on how fast the target answers, which is
//!   what the experiment is there to find out. The estimate assumes every
//!   call takes `ASSUMED_CALL_OVERHEAD_S + output tokens × ASSUMED_S_PER_OUTPUT_TOKEN`
//!   (0.5 s + 30 ms per token, a loaded mid-size model) and takes the shape
//!   of the workload (calls per task, think/tool pauses) from the first
//!   [`PROFILE_TASKS`] tasks of its stream. Closed loop at `c`: `c` tasks in
//!   flight; open loop at `λ`: `λ × calls per task` calls per second.
//! - the drain allowance covers the calls still in flight when the
//!   measurement window closes; a fixed 2 s because their length is unknown
//!   until measured.
//!
//! # Expected
//!
//! Closed sweeps and grids: every run as planned, once per repetition. A
//! Cr_open search at its typical number of runs ([`super::search_typical_runs`]),
//! each as long as the run at the geometric mean of `min` and `max` (with
//! the lengthening for samples it gets there), and no extensions. The
//! search (`analyze::search`) brackets from a start estimate, then bisects
//! each SLO's bracket to the precision `p`, so with `L = log2(max / min)`
//! and `S` SLOs:
//!
//! ```text
//! typical runs = bracketing + S × log2(1 / p)        (rounded, ≤ the bound)
//! bracketing   = 2               with a closed sweep: the start (Little's law
//!                                at the knee) and one halving or doubling
//!              = 1.5 + L / 4     without: from the geometric middle, a
//!                                Cr_open spread evenly in log over [min, max]
//!                                is L / 4 doublings away on average, plus
//!                                the start and the half step rounding adds
//! ```
//!
//! Bisecting a bracket whose ends are a factor 2 apart halves its width
//! each run, `log2(1/p)` runs on average to reach `p` (between `⌊·⌋`, when
//! every midpoint passes, and `⌈·⌉`); SLOs usually end in different
//! brackets, so their bisections are counted apart. The formula is checked
//! against the search itself on synthetic oracles (a unit test), and was
//! against the shipped examples in virtual time: within ±1 run for 24 of
//! 25 searches (16 with a closed sweep, 9 with `--only open`). What it
//! leaves out, the bound holds: a rate left inconclusive (the budget spent,
//! or none) splits its gap and costs a run more. The quickstart tour, whose
//! 1-minute budget extends one rate, takes 9 runs against a typical 5; the
//! Erlang-C example (no budget, strongly correlated waits near the answer)
//! 12–18 against 8.
//! The frontier phase (`frontier` in `open`) is counted at one run per
//! multiplied bound ([`super::frontier_typical_runs`]): the search's runs
//! near Cr_open usually bracket most multiplied bounds already (about half
//! a run per bound on average over the examples, from 0 to the cap of 3).
//!
//! # Bound
//!
//! A search at its maximum number of runs ([`super::search_max_runs`], plus
//! [`super::frontier_max_runs`]), every one as long as its run at `min`,
//! the longest it can make (lengthened most for samples), times `repeat`;
//! grids and sweeps as planned; plus the whole extension budget of the card
//! with the warmup and drain of the extensions it can buy
//! ([`super::extension`], the runner's own rule). Wall time beyond it means
//! the target answered `requests` stops slower than assumed, or the
//! machine stalled.

use crate::config::{Experiment, RatePerS, StopRule, Workload};
use crate::workload::{TaskGenerator, TaskSpec};

use super::extension::{DRAIN_ALLOWANCE, Extendable, extension_budget, extensions_bound_s};
use super::{Load, OpenPlan, RunPlan};

/// Assumed fixed part of one call (queueing, prefill), for `requests` stops.
pub const ASSUMED_CALL_OVERHEAD_S: f64 = 0.5;
/// Assumed decode time per output token, for `requests` stops.
pub const ASSUMED_S_PER_OUTPUT_TOKEN: f64 = 0.03;
/// Tasks drawn to learn a workload's shape.
pub const PROFILE_TASKS: u64 = 256;

/// The average shape of a workload's tasks, as the estimate needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadProfile {
    pub calls_per_task: f64,
    /// Calls that run one after another (turns, agent steps).
    pub sequential_calls_per_task: f64,
    pub output_tokens_per_call: f64,
    /// Prompt tokens per call (each turn's whole prompt, history included).
    pub input_tokens_per_call: f64,
    /// Think and tool time per task, in seconds.
    pub pause_s_per_task: f64,
}

impl WorkloadProfile {
    /// Averages over the first [`PROFILE_TASKS`] tasks of the stream `seed`.
    pub fn of(workload: &Workload, seed: u64) -> Self {
        let generator = TaskGenerator::new(workload, seed);
        let (mut calls, mut sequential, mut output, mut pause_s) = (0usize, 0usize, 0u64, 0.0);
        let mut input = 0u64;
        for index in 0..PROFILE_TASKS {
            let task = generator.task(index);
            calls += task.spec.calls();
            input += match &task.spec {
                TaskSpec::Single(call) => u64::from(call.input_tokens),
                TaskSpec::Conversation { turns } => {
                    turns.iter().map(|t| u64::from(t.call.input_tokens)).sum()
                }
                TaskSpec::Agent { steps } => steps
                    .iter()
                    .flat_map(|s| &s.calls)
                    .map(|c| u64::from(c.input_tokens))
                    .sum(),
                TaskSpec::Graph { calls } => {
                    calls.iter().map(|c| u64::from(c.call.input_tokens)).sum()
                }
            };
            match &task.spec {
                TaskSpec::Single(call) => {
                    sequential += 1;
                    output += u64::from(call.output_tokens);
                }
                TaskSpec::Conversation { turns } => {
                    sequential += turns.len();
                    for turn in turns {
                        output += u64::from(turn.call.output_tokens);
                        pause_s += turn.think_time_before.as_secs_f64();
                    }
                }
                TaskSpec::Agent { steps } => {
                    sequential += steps.len();
                    for step in steps {
                        output += step
                            .calls
                            .iter()
                            .map(|c| u64::from(c.output_tokens))
                            .sum::<u64>();
                        pause_s += step.tool_time_after.as_secs_f64();
                    }
                }
                TaskSpec::Graph { calls } => {
                    // The critical path: the deepest chain of calls and
                    // the gaps along it.
                    let (depth, pause) = crate::workload::sessions::critical_path(calls);
                    sequential += depth;
                    pause_s += pause.as_secs_f64();
                    output += calls
                        .iter()
                        .map(|c| u64::from(c.call.output_tokens))
                        .sum::<u64>();
                }
            }
        }
        let tasks = PROFILE_TASKS as f64;
        WorkloadProfile {
            calls_per_task: calls as f64 / tasks,
            sequential_calls_per_task: sequential as f64 / tasks,
            output_tokens_per_call: output as f64 / calls.max(1) as f64,
            input_tokens_per_call: input as f64 / calls.max(1) as f64,
            pause_s_per_task: pause_s / tasks,
        }
    }

    /// A mix's shape: its classes' profiles weighted by their shares of
    /// tasks (calls and pauses per task; tokens per call weighted by calls).
    pub fn blend(parts: &[(WorkloadProfile, f64)]) -> Self {
        let total: f64 = parts
            .iter()
            .map(|(_, w)| w)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        let avg = |f: fn(&WorkloadProfile) -> f64| {
            parts.iter().map(|(p, w)| f(p) * w).sum::<f64>() / total
        };
        let calls_per_task = avg(|p| p.calls_per_task);
        let per_task = |f: fn(&WorkloadProfile) -> f64| {
            parts
                .iter()
                .map(|(p, w)| f(p) * p.calls_per_task * w)
                .sum::<f64>()
                / total
        };
        let output = per_task(|p| p.output_tokens_per_call);
        let input = per_task(|p| p.input_tokens_per_call);
        WorkloadProfile {
            calls_per_task,
            sequential_calls_per_task: avg(|p| p.sequential_calls_per_task),
            output_tokens_per_call: output / calls_per_task.max(f64::MIN_POSITIVE),
            input_tokens_per_call: input / calls_per_task.max(f64::MIN_POSITIVE),
            pause_s_per_task: avg(|p| p.pause_s_per_task),
        }
    }

    /// Planned tokens (prompt + output) of one task: what makes a class
    /// heavy.
    pub fn tokens_per_task(&self) -> f64 {
        (self.input_tokens_per_call + self.output_tokens_per_call) * self.calls_per_task
    }

    /// Assumed duration of one call, in seconds.
    pub fn call_s(&self) -> f64 {
        ASSUMED_CALL_OVERHEAD_S + self.output_tokens_per_call * ASSUMED_S_PER_OUTPUT_TOKEN
    }

    /// Assumed duration of one task (sequential calls plus pauses), in seconds.
    pub fn task_s(&self) -> f64 {
        self.sequential_calls_per_task * self.call_s() + self.pause_s_per_task
    }
}

/// What a card (or the plan) is expected to take, and the most it can
/// take, in seconds (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WallTime {
    pub expected_s: f64,
    pub bound_s: f64,
}

impl WallTime {
    /// The same time expected and at most: runs whose number and length
    /// are known.
    pub fn exact(s: f64) -> WallTime {
        WallTime {
            expected_s: s,
            bound_s: s,
        }
    }
}

impl std::ops::Add for WallTime {
    type Output = WallTime;
    fn add(self, other: WallTime) -> WallTime {
        WallTime {
            expected_s: self.expected_s + other.expected_s,
            bound_s: self.bound_s + other.bound_s,
        }
    }
}

impl std::iter::Sum for WallTime {
    fn sum<I: Iterator<Item = WallTime>>(iter: I) -> WallTime {
        iter.fold(WallTime::default(), |a, b| a + b)
    }
}

/// Expected and bound wall time of one card's runs: its closed sweep
/// (`closed`, repetitions expanded) and its open runs.
pub fn card_wall_time(
    experiment: &Experiment,
    closed: &[RunPlan],
    open: &OpenPlan,
    profile: &WorkloadProfile,
) -> WallTime {
    let closed = WallTime::exact(closed.iter().map(|r| run_s(r, profile)).sum());
    closed + open_wall_time(experiment, open, profile)
}

/// The open part of [`card_wall_time`].
pub fn open_wall_time(
    experiment: &Experiment,
    open: &OpenPlan,
    profile: &WorkloadProfile,
) -> WallTime {
    // Only open runs are ever extended.
    let extensions_s = Extendable::of(open, experiment).map_or(0.0, |runs| {
        extensions_bound_s(extension_budget(experiment, open), &runs)
    });
    match open {
        OpenPlan::None => WallTime::default(),
        OpenPlan::Grid { runs } => {
            let planned: f64 = runs.iter().map(|r| run_s(r, profile)).sum();
            WallTime {
                expected_s: planned,
                bound_s: planned + extensions_s,
            }
        }
        OpenPlan::Search {
            min,
            max,
            max_runs,
            frontier_runs,
            typical_runs,
            typical_frontier_runs,
            template,
            ..
        } => {
            let repeat = f64::from(experiment.open.as_ref().map_or(1, |o| o.repeat.max(1)));
            let typical =
                super::run_at_rate_of(template, RatePerS((min.0 * max.0).sqrt()), experiment);
            let longest = super::run_at_rate_of(template, *min, experiment);
            // The frontier phase's rates are ordinary runs, repeated like
            // the search's.
            let shortest = super::run_at_rate_of(template, *max, experiment);
            let budget_s = super::search_budget(experiment, open).as_secs_f64();
            // The search runs until its budget is spent (the first run is
            // always made), each run's drain on top, at most MAX_RUNS.
            let search_runs = (budget_s / super::planned_run_seconds(&shortest).max(1e-3))
                .ceil()
                .clamp(1.0, f64::from(*max_runs));
            let drain_s = DRAIN_ALLOWANCE.as_secs_f64();
            let search_bound_s =
                budget_s.max(super::planned_run_seconds(&longest)) + search_runs * drain_s;
            let frontier_s = f64::from(*frontier_runs) * repeat * run_s(&longest, profile);
            let typical_search_s =
                (f64::from(*typical_runs) * repeat * run_s(&typical, profile)).min(search_bound_s);
            WallTime {
                expected_s: typical_search_s
                    + f64::from(*typical_frontier_runs) * repeat * run_s(&typical, profile),
                bound_s: search_bound_s + frontier_s + extensions_s,
            }
        }
    }
}

/// Estimated wall time of one run, in seconds (warmup + measured + drain).
pub fn run_s(run: &RunPlan, profile: &WorkloadProfile) -> f64 {
    run.warmup.as_secs_f64()
        + measured_s(run.stop, &run.load, profile)
        + DRAIN_ALLOWANCE.as_secs_f64()
}

/// Time the measured window lasts, in seconds.
pub fn measured_s(stop: StopRule, load: &Load, profile: &WorkloadProfile) -> f64 {
    let requests = match stop {
        StopRule::Duration(duration) => return duration.as_secs_f64(),
        StopRule::Requests(requests) => requests as f64,
        // Plans replace it with the replay's duration (OpenSpec::stop_at).
        StopRule::TraceEnd => return 0.0,
    };
    let calls_per_s = match *load {
        Load::Concurrency { concurrency } => {
            f64::from(concurrency.max(1)) * profile.calls_per_task / profile.task_s()
        }
        Load::Rate { rate, .. } => rate.0 * profile.calls_per_task,
    };
    // A non-positive rate is rejected by the config; it would never finish.
    if calls_per_s.is_finite() && calls_per_s > 0.0 {
        requests / calls_per_s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Agent, Arrival, Conversation, Dist, RatePerS};

    fn workload() -> Workload {
        Workload::new("w", Dist::fixed(100.0), Dist::fixed(100.0))
    }

    fn run(load: Load, stop: StopRule) -> RunPlan {
        RunPlan::new("t", "w", load, Duration::from_secs(10), stop, 1)
    }

    #[test]
    fn profile_of_fixed_shapes() {
        let single = WorkloadProfile::of(&workload(), 1);
        assert_eq!(single.calls_per_task, 1.0);
        assert_eq!(single.output_tokens_per_call, 100.0);
        assert_eq!(single.pause_s_per_task, 0.0);
        assert!((single.call_s() - 3.5).abs() < 1e-9);

        let conversation = Workload {
            conversation: Some(Conversation {
                turns: Dist::fixed(3.0),
                think_time: Dist::fixed(2.0),
            }),
            ..workload()
        };
        let p = WorkloadProfile::of(&conversation, 1);
        assert_eq!((p.calls_per_task, p.sequential_calls_per_task), (3.0, 3.0));
        assert_eq!(p.pause_s_per_task, 4.0, "two think times per three turns");
        assert!((p.task_s() - (3.0 * 3.5 + 4.0)).abs() < 1e-9);

        let agent = Workload {
            agent: Some(Agent {
                steps: Dist::fixed(4.0),
                fan_out: Dist::fixed(3.0),
                tool_time: Dist::fixed(1.0),
                context_growth: Dist::fixed(10.0),
            }),
            ..workload()
        };
        let p = WorkloadProfile::of(&agent, 1);
        assert_eq!((p.calls_per_task, p.sequential_calls_per_task), (12.0, 4.0));
        assert_eq!(p.pause_s_per_task, 3.0);
    }

    #[test]
    fn duration_stop_is_warmup_plus_duration_plus_drain() {
        let profile = WorkloadProfile::of(&workload(), 1);
        let r = run(
            Load::Concurrency { concurrency: 8 },
            StopRule::Duration(Duration::from_secs(60)),
        );
        assert_eq!(run_s(&r, &profile), 72.0);
    }

    #[test]
    fn requests_stop_closed_and_open() {
        let profile = WorkloadProfile::of(&workload(), 1); // 3.5 s per call
        let closed = run(
            Load::Concurrency { concurrency: 7 },
            StopRule::Requests(100),
        );
        // 7 in flight, 3.5 s each → 2 calls/s → 50 s.
        assert!((measured_s(closed.stop, &closed.load, &profile) - 50.0).abs() < 1e-9);
        let open = run(
            Load::Rate {
                rate: RatePerS(4.0),
                arrival: Arrival::Poisson,
            },
            StopRule::Requests(100),
        );
        assert!((measured_s(open.stop, &open.load, &profile) - 25.0).abs() < 1e-9);
        let zero = Load::Rate {
            rate: RatePerS(0.0),
            arrival: Arrival::Poisson,
        };
        assert_eq!(measured_s(StopRule::Requests(100), &zero, &profile), 0.0);
    }
}
