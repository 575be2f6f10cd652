//! The value of one entry, read as the type a node expects: string,
//! boolean, number, whole number (unsigned or signed), duration, percentage
//! or one of a set of names; a wrong value is reported at the value's span
//! with the usage.

use std::time::Duration;

use kdl::{KdlEntry, KdlValue};

use super::{Decoder, value_span};
use crate::config::diag::{backticked, suggestion_help};
use crate::config::model::Fraction;
use crate::config::units::{self, DURATION_HELP, PERCENT_HELP};

/// How a value reads in a message: `the string "abc"`, `the number 5`.
pub(super) fn found(value: &KdlValue) -> String {
    match value {
        KdlValue::String(s) => format!("the string \"{s}\""),
        KdlValue::Integer(i) => format!("the number {i}"),
        KdlValue::Float(f) => format!("the number {f}"),
        KdlValue::Bool(b) => format!("#{b}"),
        KdlValue::Null => "#null".to_string(),
    }
}

impl Decoder {
    pub(super) fn string(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<String> {
        match entry.value() {
            KdlValue::String(s) => Some(s.clone()),
            other => {
                self.error(
                    value_span(entry),
                    "expected a string",
                    format!("`{what}` expects a string, found {}", found(other)),
                    Some(format!("usage: {usage}")),
                );
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<bool> {
        match entry.value() {
            KdlValue::Bool(b) => Some(*b),
            other => {
                let text = match other {
                    KdlValue::String(s) => s.as_str(),
                    _ => "",
                };
                let help = if matches!(text, "true" | "false") {
                    format!("KDL 2 writes booleans as `#{text}`, without quotes")
                } else {
                    format!("usage: {usage}")
                };
                self.error(
                    value_span(entry),
                    "expected #true or #false",
                    format!("`{what}` expects #true or #false, found {}", found(other)),
                    Some(help),
                );
                None
            }
        }
    }

    pub(super) fn number(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<f64> {
        let value = match entry.value() {
            KdlValue::Integer(i) => *i as f64,
            KdlValue::Float(f) => *f,
            other => {
                let help = number_help(other, usage, |t| t.parse::<f64>().is_ok());
                self.error(
                    value_span(entry),
                    "expected a number",
                    format!("`{what}` expects a number, found {}", found(other)),
                    Some(help),
                );
                return None;
            }
        };
        if !value.is_finite() {
            self.error(
                value_span(entry),
                "not finite",
                format!("`{what}` must be a finite number"),
                Some(format!("usage: {usage}")),
            );
            return None;
        }
        Some(value)
    }

    pub(super) fn whole(
        &mut self,
        entry: &KdlEntry,
        what: &str,
        usage: &str,
        max: u64,
    ) -> Option<u64> {
        match entry.value() {
            KdlValue::Integer(i) if *i >= 0 && *i <= max as i128 => Some(*i as u64),
            KdlValue::Integer(i) if *i < 0 => {
                self.error(
                    value_span(entry),
                    "negative",
                    format!("`{what}` must be 0 or more, found {i}"),
                    Some(format!("usage: {usage}")),
                );
                None
            }
            KdlValue::Integer(i) => {
                self.error(
                    value_span(entry),
                    "too large",
                    format!("`{what}` must be at most {max}, found {i}"),
                    Some(format!("usage: {usage}")),
                );
                None
            }
            other => {
                let help = number_help(other, usage, |t| t.parse::<u64>().is_ok());
                self.error(
                    value_span(entry),
                    "expected a whole number",
                    format!("`{what}` expects a whole number, found {}", found(other)),
                    Some(help),
                );
                None
            }
        }
    }

    /// A whole number that may be negative (`priority=-1`).
    pub(super) fn integer(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<i64> {
        match entry.value() {
            KdlValue::Integer(i) => match i64::try_from(*i) {
                Ok(i) => Some(i),
                Err(_) => {
                    self.error(
                        value_span(entry),
                        "out of range",
                        format!(
                            "`{what}` must be between {} and {}, found {i}",
                            i64::MIN,
                            i64::MAX
                        ),
                        Some(format!("usage: {usage}")),
                    );
                    None
                }
            },
            other => {
                let help = number_help(other, usage, |t| t.parse::<i64>().is_ok());
                self.error(
                    value_span(entry),
                    "expected a whole number",
                    format!("`{what}` expects a whole number, found {}", found(other)),
                    Some(help),
                );
                None
            }
        }
    }

    pub(super) fn duration(&mut self, entry: &KdlEntry, what: &str) -> Option<Duration> {
        match entry.value() {
            KdlValue::String(s) => match units::parse_duration(s) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.error(
                        value_span(entry),
                        "invalid duration",
                        format!("invalid duration for `{what}`: {}", e.message),
                        Some(e.help),
                    );
                    None
                }
            },
            KdlValue::Integer(_) | KdlValue::Float(_) => {
                let repr = entry
                    .format()
                    .map(|f| f.value_repr.clone())
                    .unwrap_or_default();
                self.error(
                    value_span(entry),
                    "no unit",
                    format!("`{what}` expects a duration with a unit, found {}", found(entry.value())),
                    Some(format!("durations are strings with a unit, e.g. \"{repr}s\" or \"{repr}ms\"; {DURATION_HELP}")),
                );
                None
            }
            other => {
                self.error(
                    value_span(entry),
                    "expected a duration",
                    format!("`{what}` expects a duration, found {}", found(other)),
                    Some(DURATION_HELP.to_string()),
                );
                None
            }
        }
    }

    pub(super) fn fraction(&mut self, entry: &KdlEntry, what: &str) -> Option<Fraction> {
        let result = match entry.value() {
            KdlValue::String(s) => units::parse_percent(s),
            KdlValue::Integer(i) => units::check_fraction(*i as f64),
            KdlValue::Float(f) => units::check_fraction(*f),
            other => {
                self.error(
                    value_span(entry),
                    "expected a percentage",
                    format!("`{what}` expects a percentage, found {}", found(other)),
                    Some(PERCENT_HELP.to_string()),
                );
                return None;
            }
        };
        match result {
            Ok(f) => Some(Fraction(f)),
            Err(e) => {
                self.error(
                    value_span(entry),
                    "invalid percentage",
                    format!("invalid percentage for `{what}`: {}", e.message),
                    Some(e.help),
                );
                None
            }
        }
    }

    /// One of a fixed set of bare words (`api chat`, `arrival poisson`).
    pub(super) fn choice<'c>(
        &mut self,
        entry: &KdlEntry,
        what: &str,
        choices: &[&'c str],
    ) -> Option<&'c str> {
        let KdlValue::String(s) = entry.value() else {
            self.error(
                value_span(entry),
                "expected a name",
                format!(
                    "`{what}` expects one of {}, found {}",
                    backticked(choices),
                    found(entry.value())
                ),
                Some(format!("expected one of: {}", backticked(choices))),
            );
            return None;
        };
        match choices.iter().find(|c| **c == s.as_str()) {
            Some(c) => Some(*c),
            None => {
                self.error(
                    value_span(entry),
                    "unknown value",
                    format!("unknown {what} `{s}`"),
                    Some(suggestion_help(s, choices)),
                );
                None
            }
        }
    }
}

/// Help for a value that should have been a number: a quoted number is
/// told to lose its quotes, anything else gets the node's usage.
fn number_help(value: &KdlValue, usage: &str, parses: impl Fn(&str) -> bool) -> String {
    match value {
        KdlValue::String(s) if parses(s.trim()) => format!(
            "remove the quotes: numbers are written bare, e.g. {}",
            s.trim()
        ),
        _ => format!("usage: {usage}"),
    }
}
