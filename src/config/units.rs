//! The small value languages inside experiment files: durations (`"250ms"`),
//! percentages (`"5%"` or `0.05`) and percentile keys (`p99`, `p99.9`).
//!
//! They are parsed from plain strings and numbers here, with no knowledge of
//! KDL or spans, so that the rules are tested once and the decoder only has to
//! attach the error to the right place in the file.

use std::time::Duration;

use crate::stats::Stat;

/// A value that does not follow one of the unit grammars: what was wrong
/// (`message`) and how to write it instead (`help`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    pub message: String,
    pub help: String,
}

impl UnitError {
    fn new(message: impl Into<String>, help: impl Into<String>) -> Self {
        UnitError {
            message: message.into(),
            help: help.into(),
        }
    }
}

/// Accepted duration units with their length in seconds, longest suffix first
/// where one is a suffix of another (`ms` before `s`).
const DURATION_UNITS: &[(&str, f64)] = &[
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// The help line shown with every malformed duration.
pub const DURATION_HELP: &str = "write a number followed by a unit: ns, us (or µs), ms, s, m, h — e.g. \"250ms\", \"1.5s\", \"2m\"";

/// Parses `"250ms"`, `"4s"`, `"1.5s"`, `"2m"`, `"1h"`, `"20us"`.
///
/// A bare number is rejected on purpose: `timeout "120"` could mean seconds or
/// milliseconds, and a capacity figure built on the wrong one is silently wrong.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(UnitError::new("the string is empty", DURATION_HELP));
    }
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(UnitError::new(
            format!("`{trimmed}` does not start with a number"),
            DURATION_HELP,
        ));
    }
    let value: f64 = number.parse().map_err(|_| {
        UnitError::new(
            format!("`{number}` is not a number in `{trimmed}`"),
            DURATION_HELP,
        )
    })?;
    if unit.is_empty() {
        return Err(UnitError::new(
            format!("`{trimmed}` has no unit"),
            format!("a bare number is ambiguous; {DURATION_HELP}"),
        ));
    }
    let Some(&(_, unit_secs)) = DURATION_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(UnitError::new(
            format!("unknown unit `{unit}` in `{trimmed}`"),
            DURATION_HELP,
        ));
    };
    if value < 0.0 {
        return Err(UnitError::new(
            format!("`{trimmed}` is negative"),
            "durations are lengths of time and must be 0 or more",
        ));
    }
    Duration::try_from_secs_f64(value * unit_secs)
        .map_err(|_| UnitError::new(format!("`{trimmed}` is out of range"), DURATION_HELP))
}

/// The help line shown with every malformed percentage.
pub const PERCENT_HELP: &str =
    "write a percentage as a string like \"5%\" or as a fraction like 0.05";

/// Parses the string form of a percentage, `"5%"` or `"0.5%"`, into a fraction
/// (0.05, 0.005). Must lie in [0%, 100%].
pub fn parse_percent(text: &str) -> Result<f64, UnitError> {
    let trimmed = text.trim();
    let Some(number) = trimmed.strip_suffix('%') else {
        return Err(UnitError::new(
            format!("`{trimmed}` has no `%` sign"),
            PERCENT_HELP,
        ));
    };
    let value: f64 = number.trim_end().parse().map_err(|_| {
        UnitError::new(
            format!("`{trimmed}` is not a number followed by `%`"),
            PERCENT_HELP,
        )
    })?;
    if !(0.0..=100.0).contains(&value) {
        return Err(UnitError::new(
            format!("`{trimmed}` is outside 0%..100%"),
            PERCENT_HELP,
        ));
    }
    Ok(value / 100.0)
}

/// Checks the number form of a percentage: a fraction in [0, 1].
pub fn check_fraction(value: f64) -> Result<f64, UnitError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        let help = if value > 1.0 && value <= 100.0 {
            format!("a number is read as a fraction; for {value} percent write \"{value}%\"")
        } else {
            PERCENT_HELP.to_string()
        };
        Err(UnitError::new(
            format!("{value} is not a fraction between 0 and 1"),
            help,
        ))
    }
}

/// The help line shown with every malformed statistic key.
pub const STAT_HELP: &str =
    "use `mean` or a percentile `pN` with 0 < N < 100, e.g. `p50`, `p99`, `p99.9`";

/// Parses a statistic key: `mean`, or a percentile `p50` / `p99.9` strictly
/// between 0 and 100 (p0 and p100 are the min and max, which a sample of
/// requests never bounds reliably).
pub fn parse_stat(key: &str) -> Result<Stat, UnitError> {
    if key == "mean" {
        return Ok(Stat::Mean);
    }
    let Some(number) = key.strip_prefix('p') else {
        return Err(UnitError::new(
            format!("unknown statistic `{key}`"),
            STAT_HELP,
        ));
    };
    let well_formed = !number.is_empty()
        && !number.starts_with('.')
        && !number.ends_with('.')
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.matches('.').count() <= 1;
    let value: f64 = match number.parse() {
        Ok(value) if well_formed => value,
        _ => {
            return Err(UnitError::new(
                format!("unknown statistic `{key}`"),
                STAT_HELP,
            ));
        }
    };
    if value <= 0.0 || value >= 100.0 {
        return Err(UnitError::new(
            format!("percentile `{key}` is outside (0, 100)"),
            STAT_HELP,
        ));
    }
    Ok(Stat::Percentile(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::duration_literal;

    #[test]
    fn durations_with_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("4s"), Ok(Duration::from_secs(4)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("20us"), Ok(Duration::from_micros(20)));
        assert_eq!(parse_duration("20µs"), Ok(Duration::from_micros(20)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration(" 10 s "), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_without_or_with_unknown_unit_are_rejected() {
        let no_unit = parse_duration("120").unwrap_err();
        assert_eq!(no_unit.message, "`120` has no unit");
        assert!(no_unit.help.contains("ms, s, m, h"));
        let unknown = parse_duration("5sec").unwrap_err();
        assert_eq!(unknown.message, "unknown unit `sec` in `5sec`");
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1..2s").is_err());
        assert_eq!(
            parse_duration("-1s").unwrap_err().message,
            "`-1s` is negative"
        );
    }

    #[test]
    fn percentages_as_strings_and_fractions() {
        assert_eq!(parse_percent("5%"), Ok(0.05));
        assert_eq!(parse_percent("0.5%"), Ok(0.005));
        assert_eq!(parse_percent("100%"), Ok(1.0));
        assert_eq!(parse_percent("5 %"), Ok(0.05));
        assert!(
            parse_percent("5")
                .unwrap_err()
                .message
                .contains("no `%` sign")
        );
        assert!(parse_percent("five%").is_err());
        assert!(
            parse_percent("150%")
                .unwrap_err()
                .message
                .contains("outside")
        );
        assert!(parse_percent("-1%").is_err());
        assert_eq!(check_fraction(0.3), Ok(0.3));
        let too_big = check_fraction(30.0).unwrap_err();
        assert!(too_big.help.contains("\"30%\""), "{}", too_big.help);
        assert!(check_fraction(-0.1).is_err());
        assert!(check_fraction(f64::NAN).is_err());
    }

    #[test]
    fn stat_keys() {
        assert_eq!(parse_stat("mean"), Ok(Stat::Mean));
        assert_eq!(parse_stat("p50"), Ok(Stat::Percentile(50.0)));
        assert_eq!(parse_stat("p99.9"), Ok(Stat::Percentile(99.9)));
        assert!(
            parse_stat("p0")
                .unwrap_err()
                .message
                .contains("outside (0, 100)")
        );
        assert!(
            parse_stat("p100")
                .unwrap_err()
                .message
                .contains("outside (0, 100)")
        );
        assert!(parse_stat("p101").is_err());
        assert!(
            parse_stat("p")
                .unwrap_err()
                .message
                .contains("unknown statistic")
        );
        assert!(parse_stat("p9x").is_err());
        assert!(parse_stat("p99.").is_err());
        assert!(parse_stat("p.5").is_err());
        assert!(parse_stat("median").is_err());
    }

    #[test]
    fn formatting_round_trips_common_values() {
        assert_eq!(duration_literal(0.25), "250ms");
        assert_eq!(duration_literal(4.0), "4s");
        assert_eq!(duration_literal(1.5), "1.5s");
        assert_eq!(duration_literal(120.0), "2m");
        assert_eq!(duration_literal(90.0), "90s");
        assert_eq!(duration_literal(7200.0), "2h");
        assert_eq!(duration_literal(0.0), "0s");
        assert_eq!(duration_literal(2e-5), "20us");
        for text in ["250ms", "4s", "1.5s", "2m", "90s", "2h"] {
            let secs = parse_duration(text).unwrap().as_secs_f64();
            assert_eq!(duration_literal(secs), text);
        }
    }
}
