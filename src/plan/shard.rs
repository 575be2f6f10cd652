//! Shards (pure): how one run's load is split between `N` processes so that,
//! together, they send exactly what one process would have sent.
//!
//! - **Open loop.** The arrival schedule is computed once from the seed, as
//!   for one process; shard `i` of `n` sends arrival `k` (task `k`) exactly
//!   when `k mod n = i`. Every arrival belongs to one shard, none is lost or
//!   doubled, and the merged schedule *is* the one-process schedule, so its
//!   arrival process (rate, CV) is the declared one. A shard's own share is
//!   a thinned process (its CV differs); only the merge is judged.
//! - **Closed loop.** A level of `c` slots gets `c / n` slots a shard, the
//!   first `c mod n` shards one more ([`slots`]). Slot `j` of shard `i`
//!   takes tasks `i, i + n, i + 2n, …` of the run's stream in the order its
//!   slots free up, so no two shards send the same task. A `requests N`
//!   stop is split in proportion to the slots ([`request_share`]).
//! - **Without a coordinator**, every shard follows the same timetable:
//!   run `k` starts at `--start-at` plus the longest each earlier run can
//!   take ([`timetable`]), so all shards start each run at the same instant
//!   without talking to each other. That needs runs whose length is known
//!   before they start: duration-stopped closed levels and open grids.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::StopRule;

use super::RunPlan;

/// Shard `index` of `count` (0-based), as `--shard I/N` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPart {
    pub index: u32,
    pub count: u32,
}

impl ShardPart {
    /// Parse `I/N` with `0 ≤ I < N`.
    pub fn parse(text: &str) -> Result<ShardPart, String> {
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not I/N (e.g. 0/4: the first of four shards)"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("`{i}` in `{text}` is not a shard index (0, 1, …)"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{n}` in `{text}` is not a number of shards"))?;
        if count == 0 {
            return Err(format!("`{text}`: there must be at least one shard"));
        }
        if index >= count {
            return Err(format!(
                "`{text}`: shards are numbered from 0, so shard {index} of {count} does not exist \
                 (0 to {})",
                count - 1
            ));
        }
        Ok(ShardPart { index, count })
    }

    /// Whether arrival (open loop) or task `k` is this shard's.
    pub fn owns(&self, k: u64) -> bool {
        k % u64::from(self.count) == u64::from(self.index)
    }

    /// The task index the `local`-th task this shard starts (closed loop)
    /// maps to in the run's one stream.
    pub fn task_index(&self, local: u64) -> u64 {
        local * u64::from(self.count) + u64::from(self.index)
    }

    pub fn label(&self) -> String {
        format!("{}/{}", self.index, self.count)
    }
}

/// This shard's slots of a closed level of `concurrency` slots (0 when the
/// level has fewer slots than there are shards and this is a later one).
pub fn slots(concurrency: u32, part: ShardPart) -> u32 {
    concurrency / part.count + u32::from(part.index < concurrency % part.count)
}

/// This shard's part of a closed level's `requests` stop, in proportion to
/// its slots; the parts of all shards sum to `requests` exactly.
pub fn request_share(requests: u64, concurrency: u32, part: ShardPart) -> u64 {
    if concurrency == 0 {
        return 0;
    }
    let slots_before: u64 = (0..part.index)
        .map(|i| u64::from(slots(concurrency, ShardPart { index: i, ..part })))
        .sum();
    let upto = slots_before + u64::from(slots(concurrency, part));
    let c = u64::from(concurrency);
    // Cumulative floors: each shard gets the difference, so nothing is lost
    // to rounding.
    let cut = |s: u64| ((u128::from(requests) * u128::from(s)) / u128::from(c)) as u64;
    cut(upto) - cut(slots_before)
}

/// Settling time between two runs of a timetable: the server finishes
/// what it still holds, and shards whose clocks differ by up to this much
/// still start together.
pub const TIMETABLE_GAP: Duration = Duration::from_secs(2);

/// Why a run cannot be on a timetable (it has no known longest length).
pub fn untimetabled(run: &RunPlan) -> Option<&'static str> {
    match run.stop {
        StopRule::Duration(_) => None,
        StopRule::Requests(_) => {
            Some("it stops after a number of requests, so its length is not known in advance")
        }
        StopRule::TraceEnd => Some("it replays a trace to its end, a length not planned"),
    }
}

/// The longest `run` can take: warmup and its duration, the drain (the
/// request timeout plus the executor's grace) and [`TIMETABLE_GAP`].
pub fn slot_length(run: &RunPlan, timeout: Duration, drain_grace: Duration) -> Option<Duration> {
    match run.stop {
        StopRule::Duration(d) => Some(run.warmup + d + timeout + drain_grace + TIMETABLE_GAP),
        StopRule::Requests(_) | StopRule::TraceEnd => None,
    }
}

/// Start offsets (from `--start-at`) of `runs` in order, each after the
/// slot of the one before; `Err` with the first run that has no known
/// length. `timeout` gives each run's target's request timeout.
pub fn timetable<'a>(
    runs: impl IntoIterator<Item = &'a RunPlan>,
    timeout: impl Fn(&RunPlan) -> Duration,
    drain_grace: Duration,
) -> Result<Vec<Duration>, (&'a RunPlan, &'static str)> {
    let mut at = Duration::ZERO;
    let mut starts = Vec::new();
    for run in runs {
        starts.push(at);
        let slot = slot_length(run, timeout(run), drain_grace)
            .ok_or_else(|| (run, untimetabled(run).unwrap_or("its length is unknown")))?;
        at += slot;
    }
    Ok(starts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Arrival, RatePerS};
    use crate::workload::arrival_times;

    #[test]
    fn parses_i_of_n() {
        assert_eq!(
            ShardPart::parse("2/4"),
            Ok(ShardPart { index: 2, count: 4 })
        );
        assert_eq!(
            ShardPart::parse(" 0 / 1 "),
            Ok(ShardPart { index: 0, count: 1 })
        );
        for bad in ["4/4", "1", "a/2", "1/0", "-1/3", "1/b"] {
            assert!(ShardPart::parse(bad).is_err(), "{bad}");
        }
        assert!(ShardPart::parse("4/4").unwrap_err().contains("0 to 3"));
    }

    /// The shards' schedules, put together, are the one-process schedule:
    /// every arrival exactly once, at its instant, with its task index.
    #[test]
    fn open_shards_partition_the_schedule_exactly() {
        for (arrival, n) in [
            (Arrival::Poisson, 3),
            (Arrival::Gamma { cv: 2.0 }, 4),
            (Arrival::Constant, 2),
            (Arrival::Poisson, 1),
            (Arrival::Poisson, 7),
        ] {
            let one: Vec<(u64, Duration)> = arrival_times(arrival, RatePerS(50.0), 42)
                .take(5_000)
                .enumerate()
                .map(|(k, t)| (k as u64, t))
                .collect();
            let mut merged: Vec<(u64, Duration)> = (0..n)
                .flat_map(|index| {
                    let part = ShardPart { index, count: n };
                    // What a shard does: the whole seeded schedule, keeping its own.
                    arrival_times(arrival, RatePerS(50.0), 42)
                        .take(5_000)
                        .enumerate()
                        .map(|(k, t)| (k as u64, t))
                        .filter(move |(k, _)| part.owns(*k))
                })
                .collect();
            assert_eq!(
                merged.len(),
                one.len(),
                "{arrival:?} / {n}: none lost or doubled"
            );
            merged.sort();
            assert_eq!(merged, one, "{arrival:?} / {n}");
        }
    }

    #[test]
    fn closed_slots_and_tasks_partition_the_level() {
        for n in 1..=6u32 {
            for c in [1u32, 2, 3, 5, 8, 13, 64, 1000] {
                let parts: Vec<ShardPart> =
                    (0..n).map(|index| ShardPart { index, count: n }).collect();
                let total: u32 = parts.iter().map(|p| slots(c, *p)).sum();
                assert_eq!(total, c, "c={c} n={n}");
                let most = parts.iter().map(|p| slots(c, *p)).max().unwrap();
                let least = parts.iter().map(|p| slots(c, *p)).min().unwrap();
                assert!(most - least <= 1, "balanced: c={c} n={n}");
                for requests in [0u64, 1, 7, 100, 12_345] {
                    let sum: u64 = parts.iter().map(|p| request_share(requests, c, *p)).sum();
                    assert_eq!(sum, requests, "requests {requests}, c={c} n={n}");
                }
                // Task indices: disjoint across shards and covering 0..k·n.
                let mut tasks: Vec<u64> = parts
                    .iter()
                    .flat_map(|p| (0..50).map(|local| p.task_index(local)))
                    .collect();
                tasks.sort_unstable();
                assert_eq!(tasks, (0..50 * u64::from(n)).collect::<Vec<_>>());
            }
        }
        // A shard with no slot at a small level gets no requests either.
        let last = ShardPart { index: 3, count: 4 };
        assert_eq!(slots(2, last), 0);
        assert_eq!(request_share(100, 2, last), 0);
    }

    fn run(id: &str, warmup_s: u64, stop: StopRule) -> RunPlan {
        let load = super::super::Load::Concurrency { concurrency: 1 };
        RunPlan {
            id: id.into(),
            ..RunPlan::new("t", "w", load, Duration::from_secs(warmup_s), stop, 1)
        }
    }

    #[test]
    fn timetable_leaves_each_run_its_longest() {
        let runs = [
            run("a", 5, StopRule::Duration(Duration::from_secs(30))),
            run("b", 0, StopRule::Duration(Duration::from_secs(10))),
            run("c", 1, StopRule::Duration(Duration::from_secs(1))),
        ];
        let starts = timetable(&runs, |_| Duration::from_secs(60), Duration::from_secs(1)).unwrap();
        // a: 5 + 30 + 60 + 1 + 2 = 98; b: 0 + 10 + 60 + 1 + 2 = 73.
        assert_eq!(
            starts,
            vec![
                Duration::ZERO,
                Duration::from_secs(98),
                Duration::from_secs(171)
            ]
        );
        let with_requests = [
            run("a", 5, StopRule::Duration(Duration::from_secs(30))),
            run("n", 0, StopRule::Requests(100)),
        ];
        let err =
            timetable(&with_requests, |_| Duration::from_secs(60), Duration::ZERO).unwrap_err();
        assert_eq!(err.0.id, "n");
        assert!(err.1.contains("number of requests"));
    }
}
