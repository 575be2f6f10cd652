//! Number formatting for cards: the one place that decides how a latency, a
//! rate or a token count is written, shared by the Rust-side prose and the
//! template filters so a figure reads the same wherever it appears.
//!
//! Every formatter is pure and total over finite numbers; a missing value is
//! the caller's `None` and is written as [`MISSING`], never as 0. Precision is
//! about three significant figures: a card states what was measured, not the
//! noise below it.

/// How a value that was not measured is written.
pub const MISSING: &str = "—";

/// Rounds to `digits` significant figures (0 stays 0).
fn round_sig(value: f64, digits: i32) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let magnitude = value.abs().log10().floor() as i32;
    let factor = 10f64.powi(digits - 1 - magnitude);
    (value * factor).round() / factor
}

/// Decimals that show three significant figures of an already rounded value.
fn decimals_for_3_sig(rounded_abs: f64) -> usize {
    if rounded_abs >= 100.0 {
        0
    } else if rounded_abs >= 10.0 {
        1
    } else {
        2
    }
}

/// Inserts thousands separators into a formatted number (`"-12345.6"` → `"-12,345.6"`).
fn group_thousands(formatted: &str) -> String {
    let (sign, unsigned) = match formatted.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", formatted),
    };
    let (int_part, frac_part) = match unsigned.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (unsigned, None),
    };
    let mut grouped = String::with_capacity(int_part.len() + int_part.len() / 3);
    for (i, ch) in int_part.chars().enumerate() {
        if i > 0 && (int_part.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    match frac_part {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// Formats with fixed decimals, never printing `-0`.
fn fixed(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s
    }
}

/// Drops trailing zeros after the decimal point (`"4.50"` → `"4.5"`, `"3.00"` → `"3"`).
fn trim_zeros(s: String) -> String {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A number to at most `decimals` places, without trailing zeros or
/// separators: `trimmed(0.5, 3)` → `"0.5"`, `trimmed(64.0, 3)` → `"64"`
/// (rates and multipliers in `capcard plan`'s table).
pub fn trimmed(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    trim_zeros(fixed(value, decimals))
}

/// A count or amount with thousands separators: `num(2050.0, 0)` → `"2,050"`.
pub fn num(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    group_thousands(&fixed(value, decimals))
}

/// A plain number without trailing zeros, with separators: `600` → `"600"`,
/// `0.6` → `"0.6"`, `8192` → `"8,192"` (distribution parameters).
pub fn plain(value: f64) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    group_thousands(&trim_zeros(fixed(value, 3)))
}

/// A latency given in milliseconds, with its unit, about three significant
/// figures: `56.7` → `"56.7 ms"`, `1234.5` → `"1.23 s"`, `250` → `"250 ms"`.
pub fn ms(value_ms: f64) -> String {
    if !value_ms.is_finite() {
        return MISSING.to_string();
    }
    if value_ms == 0.0 {
        return "0 ms".to_string();
    }
    let rounded = round_sig(value_ms, 3);
    if rounded.abs() >= 1000.0 {
        let secs = round_sig(value_ms / 1000.0, 3);
        format!("{} s", num(secs, decimals_for_3_sig(secs.abs())))
    } else if rounded.abs() < 0.1 {
        // Sub-0.1 ms (schedule lag on an idle generator): keep the magnitude visible.
        format!("{} ms", fixed(value_ms, 3))
    } else {
        format!("{} ms", fixed(rounded, decimals_for_3_sig(rounded.abs())))
    }
}

/// A duration given in seconds, as a bound is written in an SLO or a
/// profile: trailing zeros dropped, `0.3` → `"300 ms"`, `1.0` → `"1 s"`,
/// `4.0` → `"4 s"`, `1.5` → `"1.5 s"`.
pub fn duration_secs(secs: f64) -> String {
    if !secs.is_finite() {
        return MISSING.to_string();
    }
    if secs != 0.0 && secs.abs() < 1.0 {
        format!("{} ms", trim_zeros(fixed(secs * 1000.0, 3)))
    } else {
        format!("{} s", group_thousands(&trim_zeros(fixed(secs, 3))))
    }
}

/// A span of time for prose, as a reader says it: `"300 ms"`, `"1.5 s"`,
/// `"4 min 30 s"`, `"2 h 5 min"`; whole seconds from a minute up, whole
/// minutes from an hour up.
pub fn duration_words(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return MISSING.to_string();
    }
    if seconds == 0.0 {
        return "0 s".to_string();
    }
    if seconds * 1000.0 < 999.9995 {
        return format!("{} ms", trim_zeros(fixed(seconds * 1000.0, 3)));
    }
    let total_ms = (seconds * 1000.0).round();
    if total_ms < 60_000.0 {
        return format!("{} s", trim_zeros(fixed(total_ms / 1000.0, 3)));
    }
    let total_s = seconds.round() as u64;
    if total_s < 3600 {
        let (m, s) = (total_s / 60, total_s % 60);
        return if s == 0 {
            format!("{m} min")
        } else {
            format!("{m} min {s} s")
        };
    }
    let total_min = (seconds / 60.0).round() as u64;
    let (h, m) = (total_min / 60, total_min % 60);
    if m == 0 {
        format!("{h} h")
    } else {
        format!("{h} h {m} min")
    }
}

/// A rate in requests (or tasks) per second, no unit, three significant
/// figures: `4.0` → `"4.00"`, `12.25` → `"12.3"`, `150.0` → `"150"`.
pub fn rps(value: f64) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    let rounded = round_sig(value, 3);
    // Below 0.1 (an agent's tasks/s on a slow replica), two decimals would
    // read 0.00417 as "0.00": keep three significant figures, no trailing zeros.
    if rounded != 0.0 && rounded.abs() < 0.1 {
        let decimals = (-rounded.abs().log10()).ceil() as usize + 2;
        return trim_zeros(fixed(rounded, decimals.min(9)));
    }
    num(rounded, decimals_for_3_sig(rounded.abs()))
}

/// Tokens per second, no unit: whole tokens from 100 up, one decimal below:
/// `2050.4` → `"2,050"`, `42.26` → `"42.3"`.
pub fn tokens_per_s(value: f64) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    if value.abs() >= 100.0 {
        num(value, 0)
    } else {
        num(value, 1)
    }
}

/// A fraction in [0, 1] as a percentage, up to two decimals, no trailing
/// zeros: `0.3` → `"30%"`, `0.005` → `"0.5%"`.
pub fn pct_of_fraction(fraction: f64) -> String {
    if !fraction.is_finite() {
        return MISSING.to_string();
    }
    format!("{}%", trim_zeros(fixed(fraction * 100.0, 2)))
}

/// A change already expressed in percent, signed, one decimal: `85.04` → `"+85.0%"`.
pub fn delta_pct(percent: f64) -> String {
    if !percent.is_finite() {
        return MISSING.to_string();
    }
    let s = fixed(percent, 1);
    if s.starts_with('-') {
        format!("{s}%")
    } else {
        format!("+{s}%")
    }
}

/// Money: two decimals with separators; below 1, two significant figures so
/// a small cost per million tokens does not round to 0: `134.5` → `"134.50"`,
/// `0.01234` → `"0.012"`.
pub fn money(value: f64) -> String {
    if !value.is_finite() {
        return MISSING.to_string();
    }
    if value != 0.0 && value.abs() < 1.0 {
        let rounded = round_sig(value, 2);
        let magnitude = rounded.abs().log10().floor() as i32;
        let decimals = (1 - magnitude).max(2) as usize;
        fixed(rounded, decimals)
    } else {
        num(value, 2)
    }
}

/// Three significant digits, trailing zeros dropped: `4.0` → `"4"`.
pub fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Rounds to three significant figures (0 and non-finite values unchanged),
/// without float noise: `61234.0` → `61200.0`, `0.58341` → `0.583`.
pub fn round_3_sig(value: f64) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let magnitude = value.abs().log10().floor() as i32;
    if magnitude >= 2 {
        // Whole numbers from 100 up: dividing by an inexact 10^-k would
        // print 61200.00000000001.
        let factor = 10f64.powi(magnitude - 2);
        return (value / factor).round() * factor;
    }
    let factor = 10f64.powi(2 - magnitude);
    (value * factor).round() / factor
}

/// A latency in milliseconds in the compact form an SLO clause is named and
/// stored by (`results.json` keeps it, and charts match it): three
/// significant figures, no space, `1800.0` → `"1.8s"`, `300.0` → `"300ms"`,
/// `45.26` → `"45.3ms"`. Prose uses [`ms`].
pub fn ms_compact(value_ms: f64) -> String {
    if value_ms.abs() >= 1000.0 {
        format!("{}s", significant(value_ms / 1000.0))
    } else {
        format!("{}ms", significant(value_ms))
    }
}

/// A fraction as a percentage to three significant figures, the form an
/// error-rate clause is named and stored by: `0.005` → `"0.5%"`,
/// `0.00125` → `"0.125%"`. Prose uses [`pct_of_fraction`].
pub fn pct_compact(fraction: f64) -> String {
    format!("{}%", significant(fraction * 100.0))
}

/// A signed relative error as a percentage, one decimal: `0.0123` →
/// `"+1.2%"`, `-0.05` → `"-5.0%"`, `None` → [`MISSING`].
pub fn signed_pct_of_fraction(fraction: Option<f64>) -> String {
    match fraction {
        Some(f) => delta_pct(f * 100.0),
        None => MISSING.to_string(),
    }
}

/// Seconds as a duration literal the way a user writes one in an
/// experiment file, with no space (KDL-ready, and read back as it is by
/// `config::units::parse_duration`): `"250ms"`,
/// `"4s"`, `"1.5s"`, `"2m"`, `"90s"`.
pub fn duration_literal(secs: f64) -> String {
    if secs == 0.0 {
        return "0s".to_string();
    }
    if secs < 1e-3 {
        return format!("{}us", trim_float(secs * 1e6));
    }
    if secs < 1.0 {
        return format!("{}ms", trim_float(secs * 1e3));
    }
    if secs >= 3600.0 && (secs / 3600.0).fract() == 0.0 {
        return format!("{}h", secs / 3600.0);
    }
    if secs >= 60.0 && (secs / 60.0).fract() == 0.0 {
        return format!("{}m", secs / 60.0);
    }
    format!("{}s", trim_float(secs))
}

/// Drops float noise (`0.30000000000000004` → `0.3`) without losing real digits.
fn trim_float(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_scales_units_at_three_significant_figures() {
        assert_eq!(ms(1234.5), "1.23 s");
        assert_eq!(ms(56.7), "56.7 ms");
        assert_eq!(ms(250.0), "250 ms");
        assert_eq!(ms(5.254), "5.25 ms");
        assert_eq!(ms(0.2), "0.20 ms");
        assert_eq!(ms(0.042), "0.042 ms");
        assert_eq!(ms(0.0), "0 ms");
        assert_eq!(ms(999.6), "1.00 s", "rounding up crosses into seconds");
        assert_eq!(ms(20_000.0), "20.0 s");
        assert_eq!(ms(125_400.0), "125 s");
        assert_eq!(ms(1_234_000.0), "1,230 s");
        assert_eq!(ms(f64::NAN), MISSING);
    }

    #[test]
    fn num_groups_thousands() {
        assert_eq!(num(2050.0, 0), "2,050");
        assert_eq!(num(1_234_567.891, 0), "1,234,568");
        assert_eq!(num(1_234_567.891, 2), "1,234,567.89");
        assert_eq!(num(999.0, 0), "999");
        assert_eq!(num(-12_345.6, 1), "-12,345.6");
        assert_eq!(num(-0.001, 0), "0", "no negative zero");
        assert_eq!(num(f64::INFINITY, 0), MISSING);
    }

    #[test]
    fn plain_drops_trailing_zeros() {
        assert_eq!(plain(600.0), "600");
        assert_eq!(plain(0.6), "0.6");
        assert_eq!(plain(8192.0), "8,192");
        assert_eq!(plain(2.125), "2.125");
    }

    #[test]
    fn durations_read_like_the_experiment_file() {
        assert_eq!(duration_secs(0.3), "300 ms");
        assert_eq!(duration_secs(1.0), "1 s");
        assert_eq!(duration_secs(4.0), "4 s");
        assert_eq!(duration_secs(1.5), "1.5 s");
        assert_eq!(duration_secs(0.06), "60 ms");
        assert_eq!(duration_secs(120.0), "120 s");
        assert_eq!(duration_secs(0.0), "0 s");
    }

    #[test]
    fn duration_words_read_as_spoken() {
        assert_eq!(duration_words(0.0), "0 s");
        assert_eq!(duration_words(0.3), "300 ms");
        assert_eq!(duration_words(0.0005), "0.5 ms");
        assert_eq!(duration_words(1.0), "1 s");
        assert_eq!(duration_words(1.5), "1.5 s");
        assert_eq!(duration_words(59.9994), "59.999 s");
        assert_eq!(duration_words(60.0), "1 min");
        assert_eq!(duration_words(270.0), "4 min 30 s");
        assert_eq!(duration_words(59.9996), "1 min");
        assert_eq!(duration_words(0.9999999), "1 s");
        assert_eq!(duration_words(3599.6), "1 h");
        assert_eq!(duration_words(3600.0), "1 h");
        assert_eq!(duration_words(7500.0), "2 h 5 min");
        assert_eq!(duration_words(f64::NAN), MISSING);
    }

    #[test]
    fn rates_and_throughput() {
        assert_eq!(rps(4.0), "4.00");
        assert_eq!(rps(3.984), "3.98");
        assert_eq!(rps(12.25), "12.3");
        assert_eq!(rps(150.0), "150");
        assert_eq!(rps(1234.0), "1,230");
        // A slow replica's tasks/s keeps its figures.
        assert_eq!(rps(0.00417), "0.00417");
        assert_eq!(rps(0.0253), "0.0253");
        assert_eq!(rps(0.05), "0.05");
        assert_eq!(rps(0.55), "0.55");
        assert_eq!(tokens_per_s(2050.4), "2,050");
        assert_eq!(tokens_per_s(42.26), "42.3");
    }

    #[test]
    fn percentages() {
        assert_eq!(pct_of_fraction(0.3), "30%");
        assert_eq!(pct_of_fraction(0.005), "0.5%");
        assert_eq!(pct_of_fraction(0.0525), "5.25%");
        assert_eq!(delta_pct(85.04), "+85.0%");
        assert_eq!(delta_pct(-3.25), "-3.2%");
        assert_eq!(delta_pct(0.0), "+0.0%");
    }

    #[test]
    fn rounds_to_three_significant_figures() {
        assert_eq!(round_3_sig(61_234.0), 61_200.0);
        assert_eq!(round_3_sig(0.58341), 0.583);
        assert_eq!(round_3_sig(4.256), 4.26);
        assert_eq!(round_3_sig(0.0), 0.0);
    }

    #[test]
    fn compact_forms_name_stored_clauses() {
        assert_eq!(ms_compact(1000.0), "1s");
        assert_eq!(ms_compact(1800.0), "1.8s");
        assert_eq!(ms_compact(300.0), "300ms");
        assert_eq!(ms_compact(45.26), "45.3ms");
        assert_eq!(pct_compact(0.005), "0.5%");
        assert_eq!(pct_compact(0.00125), "0.125%");
        assert_eq!(pct_compact(0.95), "95%");
        assert_eq!(signed_pct_of_fraction(Some(0.0123)), "+1.2%");
        assert_eq!(signed_pct_of_fraction(Some(-0.05)), "-5.0%");
        assert_eq!(signed_pct_of_fraction(None), MISSING);
    }

    #[test]
    fn money_keeps_small_amounts_visible() {
        assert_eq!(money(134.5), "134.50");
        assert_eq!(money(12_345.678), "12,345.68");
        assert_eq!(money(0.01234), "0.012");
        assert_eq!(money(0.5), "0.50");
        assert_eq!(money(0.0), "0.00");
    }
}
