//! The unit of a log's time fields (pure): decided once per field of a file,
//! from the key, the format or the numbers, and always stated with the rule
//! that decided it — a millisecond clock read as seconds turns 10 req/s into
//! 0.01 req/s with every other fit still right, so the unit is never a
//! silent guess.
//!
//! # The rule, in order
//!
//! 1. `--time-unit s|ms` is given: every numeric timestamp is read in it, no
//!    guessing (RFC 3339 strings carry their own unit, and capcard journals
//!    their `_ms` keys). A flag that contradicts the key, the format or an
//!    epoch is obeyed and warned about.
//! 2. The format says: Mooncake traces record milliseconds, BurstGPT
//!    seconds.
//! 3. The key says: a key ending in `_ms` is milliseconds; one ending in
//!    `_s`, `_sec`, `_secs` or `_seconds` is seconds.
//! 4. An epoch is unambiguous: when the smallest value is at least 10¹¹ it
//!    is milliseconds (10¹¹ s would be the year 5138); from 10⁹ to 10¹¹ it is
//!    seconds (10⁹ ms is still January 1970).
//! 5. Otherwise the times are relative (a log's own clock, Mooncake-style),
//!    the unit is a judgement, and so it is **always warned about**, naming
//!    the `--time-unit` that reads it the other way. Whole numbers are read
//!    as milliseconds (whole seconds are too coarse to time requests;
//!    Mooncake's and most tracers' relative clocks count whole
//!    milliseconds), numbers with fractions as seconds — unless that reading
//!    is implausible for a request log and the other is not, and then the
//!    other. A reading is plausible when its span (max − min) lies within
//!    [`MIN_SPAN_S`] and [`MAX_SPAN_S`] (1 s to 7 days) and its mean rate,
//!    gaps per second of span, is at most [`MAX_RATE_RPS`] (100,000 req/s).
//!    When neither is plausible the first choice stands. Span and rate alone
//!    cannot settle every log: 5,000 requests at 10 req/s in whole ms span
//!    8 minutes, and read as seconds 5.7 days at 0.01 req/s, which is also
//!    a log; the whole numbers decide that one. Times with no span (one, or
//!    all equal) measure nothing, so they are not warned about.
//!
//! Latencies are read by their key: `_ms` is milliseconds, a key without a
//! unit (`latency`, `duration`) seconds.

use serde::{Deserialize, Serialize};

/// The shortest span a request log plausibly covers.
pub const MIN_SPAN_S: f64 = 1.0;
/// The longest span a request log plausibly covers: a week.
pub const MAX_SPAN_S: f64 = 7.0 * 86_400.0;
/// The highest mean rate a request log plausibly records.
pub const MAX_RATE_RPS: f64 = 100_000.0;
/// From here up, a timestamp is an epoch in milliseconds.
pub const EPOCH_MS_FROM: f64 = 1e11;
/// From here up (to [`EPOCH_MS_FROM`]), a timestamp is an epoch in seconds.
pub const EPOCH_S_FROM: f64 = 1e9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    S,
    Ms,
}

impl TimeUnit {
    pub fn seconds_per_unit(self) -> f64 {
        match self {
            TimeUnit::S => 1.0,
            TimeUnit::Ms => 1e-3,
        }
    }

    /// `s` or `ms`, as `--time-unit` takes it.
    pub fn symbol(self) -> &'static str {
        match self {
            TimeUnit::S => "s",
            TimeUnit::Ms => "ms",
        }
    }

    pub fn words(self) -> &'static str {
        match self {
            TimeUnit::S => "seconds",
            TimeUnit::Ms => "milliseconds",
        }
    }

    pub fn other(self) -> TimeUnit {
        match self {
            TimeUnit::S => TimeUnit::Ms,
            TimeUnit::Ms => TimeUnit::S,
        }
    }

    /// The unit a key names by its suffix, if it names one.
    pub fn of_key(key: &str) -> Option<TimeUnit> {
        if key.ends_with("_ms") {
            Some(TimeUnit::Ms)
        } else if ["_s", "_sec", "_secs", "_seconds"]
            .iter()
            .any(|suffix| key.ends_with(suffix))
        {
            Some(TimeUnit::S)
        } else {
            None
        }
    }
}

/// What a time field is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeRole {
    /// When a request arrived.
    Arrival,
    /// How long its answer took.
    Latency,
}

/// Which step of the rule (see the module doc) decided a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeRule {
    Flag,
    Format,
    Key,
    Rfc3339,
    EpochMs,
    EpochS,
    Relative,
    /// A latency key without a unit.
    Default,
}

/// One reading of relative times, for the judgement of step 5.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub unit: TimeUnit,
    pub span_s: f64,
    /// Gaps per second of span.
    pub mean_rps: f64,
    pub plausible: bool,
}

impl Reading {
    fn of(unit: TimeUnit, span: f64, gaps: usize) -> Reading {
        let span_s = span * unit.seconds_per_unit();
        let mean_rps = gaps as f64 / span_s;
        Reading {
            unit,
            span_s,
            mean_rps,
            plausible: (MIN_SPAN_S..=MAX_SPAN_S).contains(&span_s) && mean_rps <= MAX_RATE_RPS,
        }
    }

    /// `489 s at 10.2 req/s`.
    fn words(&self) -> String {
        format!(
            "{} at {} req/s",
            span_words(self.span_s),
            rate_words(self.mean_rps)
        )
    }
}

/// How one time field of one file was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeField {
    /// The key (or column) as the log names it.
    pub field: String,
    pub role: TimeRole,
    pub unit: TimeUnit,
    pub rule: TimeRule,
    /// The rule applied to this field, in words.
    pub why: String,
    /// Both readings, when the unit was judged from the span (step 5).
    pub readings: Option<[Reading; 2]>,
    /// Set when the unit may be wrong: a judgement, or a flag against the
    /// log's own word. Names the override.
    pub warning: Option<String>,
}

impl TimeField {
    /// `` `timestamp` in ms (why) ``.
    pub fn statement(&self) -> String {
        format!("`{}` in {} ({})", self.field, self.unit.symbol(), self.why)
    }

    /// Seconds of a value of this field.
    pub fn seconds(&self, value: f64) -> f64 {
        value * self.unit.seconds_per_unit()
    }

    /// A field whose unit the log's format defines (`why` says which).
    pub fn by_format(field: &str, role: TimeRole, unit: TimeUnit, why: &str) -> TimeField {
        TimeField {
            field: field.to_string(),
            role,
            unit,
            rule: TimeRule::Format,
            why: why.to_string(),
            readings: None,
            warning: None,
        }
    }

    /// RFC 3339 strings: seconds since the epoch, whatever the flag.
    pub fn rfc3339(field: &str) -> TimeField {
        TimeField {
            field: field.to_string(),
            role: TimeRole::Arrival,
            unit: TimeUnit::S,
            rule: TimeRule::Rfc3339,
            why: "RFC 3339 times".to_string(),
            readings: None,
            warning: None,
        }
    }

    /// A latency, by its key alone.
    pub fn latency(field: &str) -> TimeField {
        let unit = latency_unit(field);
        let (rule, why) = match TimeUnit::of_key(field) {
            Some(unit) => (TimeRule::Key, key_words(field, unit)),
            None => (
                TimeRule::Default,
                "a latency key without a unit is seconds".to_string(),
            ),
        };
        TimeField {
            field: field.to_string(),
            role: TimeRole::Latency,
            unit,
            rule,
            why,
            readings: None,
            warning: None,
        }
    }

    /// `--time-unit` over what the log itself would have said (`unforced`):
    /// obeyed, and warned about when the log said otherwise.
    pub fn forced(unforced: TimeField, unit: TimeUnit) -> TimeField {
        let contradicts = unforced.rule != TimeRule::Relative && unforced.unit != unit;
        let warning = contradicts.then(|| {
            format!(
                "`{}` is read in {} as given by --time-unit, though {} says {}",
                unforced.field,
                unit.words(),
                unforced.why,
                unforced.unit.words()
            )
        });
        TimeField {
            unit,
            rule: TimeRule::Flag,
            why: "as given by --time-unit".to_string(),
            readings: None,
            warning,
            ..unforced
        }
    }
}

/// The unit of a latency under `key`: the one it names, else seconds.
pub fn latency_unit(key: &str) -> TimeUnit {
    TimeUnit::of_key(key).unwrap_or(TimeUnit::S)
}

/// The unit of the numeric arrival times `values` (raw, non-negative,
/// finite) under `key`, by steps 1 and 3–5 of the rule; `forced` is
/// `--time-unit`.
pub fn arrival_field(key: &str, values: &[f64], forced: Option<TimeUnit>) -> TimeField {
    let unforced = judge(key, values);
    match forced {
        Some(unit) => TimeField::forced(unforced, unit),
        None => unforced,
    }
}

fn judge(key: &str, values: &[f64]) -> TimeField {
    let field = |unit: TimeUnit, rule: TimeRule, why: String| TimeField {
        field: key.to_string(),
        role: TimeRole::Arrival,
        unit,
        rule,
        why,
        readings: None,
        warning: None,
    };
    if let Some(unit) = TimeUnit::of_key(key) {
        return field(unit, TimeRule::Key, key_words(key, unit));
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if min >= EPOCH_MS_FROM {
        return field(
            TimeUnit::Ms,
            TimeRule::EpochMs,
            "an epoch in milliseconds: values from 10¹¹ up".to_string(),
        );
    }
    if min >= EPOCH_S_FROM {
        return field(
            TimeUnit::S,
            TimeRule::EpochS,
            "an epoch in seconds: values from 10⁹ to 10¹¹".to_string(),
        );
    }
    let whole = values.iter().all(|v| v.fract() == 0.0);
    let (first, kind) = if whole {
        (TimeUnit::Ms, "relative whole numbers")
    } else {
        (TimeUnit::S, "relative numbers with fractions")
    };
    // No span (one value, or all equal): no time is measured from them, so
    // nothing rides on the unit.
    if values.len() < 2 || max <= min {
        return field(
            first,
            TimeRule::Relative,
            format!("{kind}, read as {}; no span to check", first.words()),
        );
    }
    let gaps = values.len() - 1;
    let preferred = Reading::of(first, max - min, gaps);
    let other = Reading::of(first.other(), max - min, gaps);
    let implausible = |r: &Reading| {
        format!(
            "as {} they would span {}, implausible for a request log",
            r.unit.words(),
            r.words()
        )
    };
    let chosen = if !preferred.plausible && other.plausible {
        other
    } else {
        preferred
    };
    let rejected = if chosen.unit == preferred.unit {
        other
    } else {
        preferred
    };
    let why = if chosen.unit == first {
        let versus = if other.plausible {
            format!(
                "as {}: {}, also plausible",
                other.unit.words(),
                other.words()
            )
        } else if preferred.plausible {
            implausible(&other)
        } else {
            format!(
                "implausible either way; as {}: {}",
                other.unit.words(),
                other.words()
            )
        };
        format!(
            "{kind}, read as {}: {}; {versus}",
            first.words(),
            preferred.words()
        )
    } else {
        format!(
            "{kind}, read as {}: {}; {}",
            chosen.unit.words(),
            chosen.words(),
            implausible(&preferred)
        )
    };
    let warning = format!(
        "`{key}` names no unit and is read as {} ({}); as {} it would be {} — pass `--time-unit {}` if that is its unit",
        chosen.unit.words(),
        chosen.words(),
        rejected.unit.words(),
        rejected.words(),
        rejected.unit.symbol(),
    );
    let readings = if first == TimeUnit::S {
        [preferred, other]
    } else {
        [other, preferred]
    };
    TimeField {
        readings: Some(readings),
        warning: Some(warning),
        ..field(chosen.unit, TimeRule::Relative, why)
    }
}

fn key_words(key: &str, unit: TimeUnit) -> String {
    let suffix = key.rsplit('_').next().unwrap_or(unit.symbol());
    format!("the key ends in `_{suffix}`")
}

/// `489 s`, `8.2 min`, `5.7 h`, `5.66 days`.
fn span_words(span_s: f64) -> String {
    if span_s < 100.0 {
        format!("{} s", crate::format::significant(span_s))
    } else if span_s < 6_000.0 {
        format!("{} min", crate::format::significant(span_s / 60.0))
    } else if span_s < 2.0 * 86_400.0 {
        format!("{} h", crate::format::significant(span_s / 3600.0))
    } else {
        format!("{} days", crate::format::significant(span_s / 86_400.0))
    }
}

fn rate_words(rps: f64) -> String {
    crate::format::significant(rps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` arrivals `gap` apart from `start`.
    fn even(start: f64, gap: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| start + gap * i as f64).collect()
    }

    #[test]
    fn an_epoch_in_seconds_is_seconds_without_a_warning() {
        let f = arrival_field("created", &even(1_700_000_000.0, 0.25, 100), None);
        assert_eq!((f.unit, f.rule), (TimeUnit::S, TimeRule::EpochS));
        assert!(f.warning.is_none());
        // Whole epoch seconds (OpenAI's `created`) too.
        let f = arrival_field("created", &even(1_700_000_000.0, 1.0, 100), None);
        assert_eq!(f.unit, TimeUnit::S);
    }

    #[test]
    fn an_epoch_in_milliseconds_is_milliseconds_without_a_warning() {
        let f = arrival_field("timestamp", &even(1_700_000_000_000.0, 250.0, 100), None);
        assert_eq!((f.unit, f.rule), (TimeUnit::Ms, TimeRule::EpochMs));
        assert!(f.warning.is_none());
        assert_eq!(f.seconds(1_700_000_000_500.0), 1_700_000_000.5);
    }

    #[test]
    fn a_key_that_names_its_unit_is_obeyed() {
        for key in ["timestamp_ms", "arrival_time_ms"] {
            let f = arrival_field(key, &even(0.0, 0.5, 10), None);
            assert_eq!((f.unit, f.rule), (TimeUnit::Ms, TimeRule::Key), "{key}");
            assert_eq!(f.why, "the key ends in `_ms`");
            assert!(f.warning.is_none());
        }
        let f = arrival_field("time_s", &even(0.0, 100.0, 10), None);
        assert_eq!((f.unit, f.rule), (TimeUnit::S, TimeRule::Key));
        // `_ms` wins over size: not an epoch in seconds.
        let f = arrival_field("ts_ms", &even(1_700_000_000.0, 1.0, 10), None);
        assert_eq!(f.unit, TimeUnit::Ms);
    }

    #[test]
    fn relative_seconds_with_fractions_are_seconds_and_warned_about() {
        // 2,000 requests at 4 req/s: 500 s; as ms 0.5 s, too short.
        let values: Vec<f64> = even(3.125, 0.25, 2000);
        let f = arrival_field("time", &values, None);
        assert_eq!((f.unit, f.rule), (TimeUnit::S, TimeRule::Relative));
        let [s, ms] = f.readings.unwrap();
        assert!(s.plausible && !ms.plausible, "{s:?} {ms:?}");
        assert!((s.mean_rps - 4.0).abs() < 1e-9);
        assert!(f.why.contains("implausible"), "{}", f.why);
        let warning = f.warning.unwrap();
        assert!(warning.contains("--time-unit ms"), "{warning}");
    }

    #[test]
    fn relative_whole_milliseconds_are_milliseconds_and_warned_about() {
        // The reported log: 5,000 requests at 10 req/s, whole ms. As seconds
        // it spans 5.8 days at 0.01 req/s, which a log could be, so the
        // whole numbers decide, and the warning names the way out.
        let values: Vec<f64> = even(0.0, 100.0, 5000);
        let f = arrival_field("timestamp", &values, None);
        assert_eq!((f.unit, f.rule), (TimeUnit::Ms, TimeRule::Relative));
        let [s, ms] = f.readings.unwrap();
        assert!(s.plausible && ms.plausible);
        assert!((ms.mean_rps - 10.0).abs() < 1e-9);
        assert!((s.mean_rps - 0.01).abs() < 1e-12);
        assert!(
            f.why
                .starts_with("relative whole numbers, read as milliseconds: 8.33 min at 10 req/s"),
            "{}",
            f.why
        );
        assert!(f.why.contains("also plausible"), "{}", f.why);
        let warning = f.warning.unwrap();
        assert!(warning.contains("--time-unit s"), "{warning}");
        assert!(warning.contains("5.79 days at 0.01 req/s"), "{warning}");
    }

    #[test]
    fn a_plain_relative_log_of_whole_numbers_reads_like_mooncake() {
        // `{"timestamp": 0}`, `{"timestamp": 500}`, …: half-second gaps.
        let f = arrival_field("timestamp", &even(0.0, 500.0, 20), None);
        assert_eq!(f.unit, TimeUnit::Ms);
        assert_eq!(f.seconds(500.0), 0.5);
    }

    #[test]
    fn an_implausible_first_reading_gives_way_to_a_plausible_other() {
        // Fractions over 40 days as seconds, 58 min as ms: ms.
        let f = arrival_field("time", &even(0.5, 1000.25, 3500), None);
        assert_eq!(f.unit, TimeUnit::Ms);
        assert!(
            f.why.contains("as seconds they would span 40.5 days"),
            "{}",
            f.why
        );
        assert!(f.warning.unwrap().contains("--time-unit s"));
        // Whole seconds, 1 req/min for 10 hours: as ms 35.9 s at 16.7 req/s is
        // plausible, so whole numbers win (and the warning says so)…
        let f = arrival_field("timestamp", &even(0.0, 60.0, 600), None);
        assert_eq!(f.unit, TimeUnit::Ms);
        assert!(f.warning.unwrap().contains("--time-unit s"));
        // …but 50 whole seconds 1 s apart would be 49 ms as ms: seconds.
        let f = arrival_field("timestamp", &even(0.0, 1.0, 50), None);
        assert_eq!(f.unit, TimeUnit::S);
        assert!(f.why.contains("implausible"), "{}", f.why);
        assert!(f.warning.unwrap().contains("--time-unit ms"));
    }

    #[test]
    fn an_ambiguous_log_keeps_its_first_reading_and_says_so() {
        // Fractions over 30 min at 2 req/s; as ms 1.8 s at 2,000 req/s —
        // short and fast but not impossible: seconds, and warned.
        let values: Vec<f64> = even(0.5, 0.5, 3600);
        let f = arrival_field("ts", &values, None);
        assert_eq!(f.unit, TimeUnit::S);
        assert!(f.readings.unwrap().iter().all(|r| r.plausible));
        assert!(f.why.contains("also plausible"), "{}", f.why);
        assert!(f.warning.unwrap().contains("--time-unit ms"));
        // Implausible either way: the first reading stands, warned.
        let f = arrival_field("ts", &[0.0, 0.001, 0.002], None);
        assert_eq!(f.unit, TimeUnit::S);
        assert!(f.why.contains("implausible either way"), "{}", f.why);
        assert!(f.warning.is_some());
    }

    #[test]
    fn one_time_or_equal_times_need_no_judgement() {
        let f = arrival_field("timestamp", &[500.0], None);
        assert_eq!((f.unit, f.rule), (TimeUnit::Ms, TimeRule::Relative));
        assert!(f.warning.is_none() && f.readings.is_none());
        let f = arrival_field("time", &[], None);
        assert_eq!(f.unit, TimeUnit::Ms);
    }

    #[test]
    fn the_flag_decides_and_says_so_and_warns_against_the_log() {
        let values = even(0.0, 100.0, 5000);
        let f = arrival_field("timestamp", &values, Some(TimeUnit::S));
        assert_eq!((f.unit, f.rule), (TimeUnit::S, TimeRule::Flag));
        assert_eq!(f.why, "as given by --time-unit");
        assert!(f.readings.is_none());
        assert!(f.warning.is_none(), "only a guess was overruled");
        let f = arrival_field("timestamp_ms", &values, Some(TimeUnit::S));
        assert_eq!(f.unit, TimeUnit::S);
        let warning = f.warning.unwrap();
        assert!(warning.contains("ends in `_ms`"), "{warning}");
        let f = arrival_field("timestamp_ms", &values, Some(TimeUnit::Ms));
        assert!(f.warning.is_none());
    }

    #[test]
    fn latencies_are_read_by_their_key() {
        let f = TimeField::latency("latency_ms");
        assert_eq!((f.unit, f.rule), (TimeUnit::Ms, TimeRule::Key));
        let f = TimeField::latency("duration");
        assert_eq!((f.unit, f.rule), (TimeUnit::S, TimeRule::Default));
        assert_eq!(
            f.statement(),
            "`duration` in s (a latency key without a unit is seconds)"
        );
    }

    #[test]
    fn spans_and_rates_read_as_a_person_writes_them() {
        assert_eq!(span_words(489.0), "8.15 min");
        assert_eq!(span_words(42.0), "42 s");
        assert_eq!(span_words(489_000.0), "5.66 days");
        assert_eq!(rate_words(0.0102), "0.0102");
        assert_eq!(rate_words(10.2), "10.2");
        assert_eq!(rate_words(12_345.0), "12345");
    }
}
