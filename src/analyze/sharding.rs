//! How well the processes of a sharded run started together (pure): the
//! note a card gives its load generator when shards sent the load, and a
//! warning when a shard's start was off by more than it tolerates.

use crate::exec::record::ShardClock;
use crate::format::ms;

/// A shard whose start was later than this (its lag plus the uncertainty
/// of its clock offset) did not run the load together with the others for
/// that long: the card says so.
pub const START_SKEW_LIMIT_MS: f64 = 10.0;

/// What the card says about a sharded card's load generator.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardingNote {
    pub sentence: String,
    /// Set when a shard's start was off by more than [`START_SKEW_LIMIT_MS`].
    pub warning: Option<String>,
}

/// The note for runs whose merged headers list `runs` (run id, shards).
pub fn sharding_note(runs: &[(&str, &[ShardClock])]) -> Option<ShardingNote> {
    let sharded: Vec<&(&str, &[ShardClock])> = runs
        .iter()
        .filter(|(_, shards)| !shards.is_empty())
        .collect();
    let (_, first) = sharded.first()?;
    let count = first[0].count;
    let agreed_by = &first[0].agreed_by;
    let mut worst: Option<(f64, &str, u32)> = None;
    let (mut max_lag, mut max_offset, mut max_uncertainty) = (0.0f64, None::<f64>, None::<f64>);
    for (run, shards) in &sharded {
        for clock in *shards {
            max_lag = max_lag.max(clock.start_lag_ms);
            if let Some(offset) = clock.clock_offset_ms {
                max_offset = Some(max_offset.unwrap_or(0.0).max(offset.abs()));
            }
            if let Some(u) = clock.clock_uncertainty_ms {
                max_uncertainty = Some(max_uncertainty.unwrap_or(0.0).max(u));
            }
            let skew = clock.start_lag_ms + clock.clock_uncertainty_ms.unwrap_or(0.0);
            if worst.is_none_or(|(w, _, _)| skew > w) {
                worst = Some((skew, run, clock.index));
            }
        }
    }
    let clocks = match (max_offset, max_uncertainty) {
        (Some(offset), Some(u)) => format!(
            "host clocks within {} of the coordinator's, each offset measured to ±{} and \
             corrected",
            ms(offset),
            ms(u)
        ),
        _ => "host clocks trusted as they are (NTP): their offsets were not measured".to_string(),
    };
    let sentence = format!(
        "{count} processes (shards) sent the load together, started by {agreed_by}; \
         merged from their exact journals; starts at most {} late; {clocks}",
        ms(max_lag)
    );
    let warning = worst
        .filter(|(skew, _, _)| *skew > START_SKEW_LIMIT_MS)
        .map(|(skew, run, index)| {
            format!(
                "shard {index}/{count} started run {run} up to {} after the agreed instant \
                 (start lag plus clock uncertainty): for that long the load was lighter than \
                 planned, and its calls carry the lag as schedule lag",
                ms(skew)
            )
        });
    Some(ShardingNote { sentence, warning })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(index: u32, lag: f64, offset: Option<(f64, f64)>) -> ShardClock {
        ShardClock {
            index,
            count: 2,
            agreed_by: "the coordinator http://127.0.0.1:7300".into(),
            start_at: "2026-12-02T00:00:00.000000Z".into(),
            clock_offset_ms: offset.map(|o| o.0),
            clock_uncertainty_ms: offset.map(|o| o.1),
            start_lag_ms: lag,
        }
    }

    #[test]
    fn the_note_gives_the_worst_start() {
        let a = [
            clock(0, 0.05, Some((0.3, 0.1))),
            clock(1, 0.2, Some((-1.5, 0.2))),
        ];
        let b = [
            clock(0, 0.1, Some((0.3, 0.1))),
            clock(1, 0.02, Some((-1.4, 0.1))),
        ];
        let note = sharding_note(&[("r1", &a), ("r2", &b), ("one-process", &[])]).unwrap();
        assert!(
            note.sentence.starts_with("2 processes (shards)"),
            "{}",
            note.sentence
        );
        assert!(
            note.sentence.contains("at most 0.20 ms late"),
            "{}",
            note.sentence
        );
        assert!(
            note.sentence.contains("within 1.50 ms"),
            "{}",
            note.sentence
        );
        assert_eq!(note.warning, None);

        let late = [clock(0, 0.05, None), clock(1, 42.0, None)];
        let note = sharding_note(&[("r1", &a), ("r3", &late)]).unwrap();
        let warning = note.warning.unwrap();
        assert!(
            warning.contains("shard 1/2 started run r3 up to 42.0 ms"),
            "{warning}"
        );
        assert_eq!(sharding_note(&[("x", &[])]), None, "one process: no note");
    }
}
