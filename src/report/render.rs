//! Markdown cards from minijinja templates: the built-in copies are embedded
//! in the binary, a directory or a single file can replace them.
//!
//! Templates render with strict undefined behaviour: a misspelt field in a
//! custom template is an error naming the line, not a silently empty cell on
//! a card someone signs. Number filters (`ms`, `num`, `rps`, `tps`, `pct`,
//! `delta_pct`, `money`, `dur`) write a missing value (`none`) as "—".

use std::path::Path;

use minijinja::value::{Serde, Value, ValueKind};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior, context};

use crate::analyze::{CapacityReport, Card};

use super::ReportError;
use super::view::{card_view, summary_view};
use crate::format::{self, MISSING};

/// File name of the card template, in a template directory and in errors.
pub const CARD_TEMPLATE_NAME: &str = "capacity-card.md.j2";
/// File name of the summary template.
pub const SUMMARY_TEMPLATE_NAME: &str = "summary-card.md.j2";

const BUILTIN_CARD: &str = include_str!("../../templates/capacity-card.md.j2");
const BUILTIN_SUMMARY: &str = include_str!("../../templates/summary-card.md.j2");

/// Which of the two templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Card,
    Summary,
}

/// The card and summary templates, compiled, with the filters registered.
///
/// A template read from disk is registered under its path, so minijinja's
/// own error locations (`in PATH:LINE`) name the file the user edits.
#[derive(Clone)]
pub struct Templates {
    env: Environment<'static>,
    card_name: String,
    summary_name: String,
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Templates")
            .field("card", &self.card_name)
            .field("summary", &self.summary_name)
            .finish()
    }
}

impl Default for Templates {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Templates {
    /// The templates embedded in the binary.
    pub fn builtin() -> Self {
        let mut env = environment();
        // The built-in sources are part of the binary and covered by tests:
        // failing to compile them is a build defect, not an input error.
        env.add_template(CARD_TEMPLATE_NAME, BUILTIN_CARD)
            .expect("built-in card template compiles");
        env.add_template(SUMMARY_TEMPLATE_NAME, BUILTIN_SUMMARY)
            .expect("built-in summary template compiles");
        Templates {
            env,
            card_name: CARD_TEMPLATE_NAME.to_string(),
            summary_name: SUMMARY_TEMPLATE_NAME.to_string(),
        }
    }

    /// Built-in templates, except those present in `dir` (`capacity-card.md.j2`,
    /// `summary-card.md.j2`), which replace them. `None` = built-in only.
    pub fn load(dir: Option<&Path>) -> Result<Self, ReportError> {
        let mut templates = Self::builtin();
        if let Some(dir) = dir {
            for (kind, file) in [
                (Kind::Card, CARD_TEMPLATE_NAME),
                (Kind::Summary, SUMMARY_TEMPLATE_NAME),
            ] {
                let path = dir.join(file);
                if path.is_file() {
                    templates.replace(kind, &path)?;
                }
            }
        }
        Ok(templates)
    }

    /// Built-in templates with the card template read from `path`
    /// (`capcard report --template FILE`).
    pub fn with_card_template(path: &Path) -> Result<Self, ReportError> {
        let mut templates = Self::builtin();
        templates.replace(Kind::Card, path)?;
        Ok(templates)
    }

    /// Replaces the summary template with the one read from `path`.
    pub fn with_summary_template(mut self, path: &Path) -> Result<Self, ReportError> {
        self.replace(Kind::Summary, path)?;
        Ok(self)
    }

    /// Where the card template came from: a path, or `"built-in capacity-card.md.j2"`.
    pub fn card_origin(&self) -> String {
        self.origin(Kind::Card)
    }

    fn name(&self, kind: Kind) -> &str {
        match kind {
            Kind::Card => &self.card_name,
            Kind::Summary => &self.summary_name,
        }
    }

    fn origin(&self, kind: Kind) -> String {
        let name = self.name(kind);
        if name == CARD_TEMPLATE_NAME || name == SUMMARY_TEMPLATE_NAME {
            format!("built-in {name}")
        } else {
            name.to_string()
        }
    }

    fn replace(&mut self, kind: Kind, path: &Path) -> Result<(), ReportError> {
        let source = std::fs::read_to_string(path).map_err(|source| ReportError::TemplateRead {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path.display().to_string();
        self.env
            .add_template_owned(name.clone(), source)
            .map_err(|source| ReportError::Template {
                origin: name.clone(),
                source,
            })?;
        match kind {
            Kind::Card => self.card_name = name,
            Kind::Summary => self.summary_name = name,
        }
        Ok(())
    }

    fn render(&self, kind: Kind, ctx: Value) -> Result<String, ReportError> {
        let wrap = |source| ReportError::Template {
            origin: self.origin(kind),
            source,
        };
        let template = self.env.get_template(self.name(kind)).map_err(wrap)?;
        template.render(ctx).map_err(wrap)
    }
}

/// Renders one card. The context holds `view` (see `report::view`), the
/// raw `card` and the whole `report`, as in results.json.
pub fn render_card(
    report: &CapacityReport,
    card: &Card,
    templates: &Templates,
) -> Result<String, ReportError> {
    let view = card_view(report, card);
    let ctx = context! {
        view => Value::from(Serde(&view)),
        card => Value::from(Serde(card)),
        report => Value::from(Serde(report)),
    };
    templates.render(Kind::Card, ctx)
}

/// Renders the side-by-side summary when the report has more than one card
/// (written as `summary.md`); `None` for a single card.
pub fn render_summary(
    report: &CapacityReport,
    templates: &Templates,
) -> Result<Option<String>, ReportError> {
    if report.cards.len() < 2 {
        return Ok(None);
    }
    let view = summary_view(report);
    let ctx = context! {
        view => Value::from(Serde(&view)),
        report => Value::from(Serde(report)),
    };
    templates.render(Kind::Summary, ctx).map(Some)
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Only custom delimiters can make the builder fail; these are the defaults.
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    register_filters(&mut env);
    env
}

/// The number filters, shared by every template.
pub(crate) fn register_filters(env: &mut Environment<'_>) {
    env.add_filter("ms", |v: Value| number_filter(v, "ms", format::ms));
    // A clause as results.json stores it, in the card's words.
    env.add_filter("clause_words", |text: String| {
        crate::report::describe::stored_clause_words(&text)
    });
    env.add_filter("rps", |v: Value| number_filter(v, "rps", format::rps));
    env.add_filter("tps", |v: Value| {
        number_filter(v, "tps", format::tokens_per_s)
    });
    env.add_filter("pct", |v: Value| {
        number_filter(v, "pct", format::pct_of_fraction)
    });
    env.add_filter("delta_pct", |v: Value| {
        number_filter(v, "delta_pct", format::delta_pct)
    });
    env.add_filter("money", |v: Value| number_filter(v, "money", format::money));
    env.add_filter("dur", |v: Value| {
        number_filter(v, "dur", format::duration_secs)
    });
    // Start-ups, budgets: "1 min 6 s", not "66.452 s".
    env.add_filter("dur_words", |v: Value| {
        number_filter(v, "dur_words", format::duration_words)
    });
    env.add_filter("num", |v: Value, decimals: Option<u32>| {
        let decimals = decimals.unwrap_or(0).min(9) as usize;
        number_filter(v, "num", |x| format::num(x, decimals))
    });
    // `{{ x | dash }}`: a string or a number as is, none as "—".
    env.add_filter("dash", |v: Value| -> String {
        if v.is_none() || v.is_undefined() {
            MISSING.to_string()
        } else {
            v.to_string()
        }
    });
    // `{{ flag | yesno }}`: true/false as "yes"/"no", none as "—".
    env.add_filter("yesno", |v: Value| -> String {
        match v.kind() {
            ValueKind::Bool if v.is_true() => "yes".to_string(),
            ValueKind::Bool => "no".to_string(),
            _ if v.is_none() || v.is_undefined() => MISSING.to_string(),
            _ => v.to_string(),
        }
    });
}

fn number_filter(
    value: Value,
    filter: &str,
    fmt: impl Fn(f64) -> String,
) -> Result<String, minijinja::Error> {
    if value.is_none() || value.is_undefined() {
        return Ok(MISSING.to_string());
    }
    if value.kind() != ValueKind::Number {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "filter {filter} expects a number or none, got {}",
                value.kind()
            ),
        ));
    }
    let number = f64::try_from(value)?;
    Ok(fmt(number))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, ctx: Value) -> Result<String, minijinja::Error> {
        environment().render_str(source, ctx)
    }

    #[test]
    fn filters_format_numbers_and_missing_values() {
        let ctx = context! { a => 1234.5, b => 56.7, c => 2050.0, n => Value::from(()), r => 4.0, f => 0.3 };
        assert_eq!(
            render("{{ a | ms }} / {{ b | ms }}", ctx.clone()).unwrap(),
            "1.23 s / 56.7 ms"
        );
        assert_eq!(
            render("{{ c | num }} {{ c | num(1) }} {{ c | tps }}", ctx.clone()).unwrap(),
            "2,050 2,050.0 2,050"
        );
        assert_eq!(
            render("{{ r | rps }} {{ f | pct }} {{ f | dur }}", ctx.clone()).unwrap(),
            "4.00 30% 300 ms"
        );
        assert_eq!(
            render(
                "{{ n | ms }}|{{ n | num }}|{{ n | rps }}|{{ n | dash }}|{{ n | yesno }}",
                ctx
            )
            .unwrap(),
            "—|—|—|—|—"
        );
    }

    #[test]
    fn integers_format_like_floats() {
        let ctx = context! { i => 1500 };
        assert_eq!(
            render("{{ i | ms }} {{ i | num }}", ctx).unwrap(),
            "1.50 s 1,500"
        );
    }

    #[test]
    fn a_string_given_to_a_number_filter_is_an_error() {
        let err = render("{{ s | ms }}", context! { s => "fast" }).unwrap_err();
        assert!(
            err.to_string().contains("filter ms expects a number"),
            "{err}"
        );
    }

    #[test]
    fn strict_undefined_catches_typos() {
        let err = render(
            "{{ view.nope }}",
            context! { view => context! { yes => 1 } },
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UndefinedError);
    }

    #[test]
    fn yesno_and_delta() {
        let ctx = context! { t => true, f => false, d => -3.25 };
        assert_eq!(
            render("{{ t | yesno }} {{ f | yesno }} {{ d | delta_pct }}", ctx).unwrap(),
            "yes no -3.2%"
        );
    }

    #[test]
    fn builtin_templates_compile() {
        let t = Templates::builtin();
        assert!(t.env.get_template(CARD_TEMPLATE_NAME).is_ok());
        assert!(t.env.get_template(SUMMARY_TEMPLATE_NAME).is_ok());
    }

    #[test]
    fn the_summary_sets_harnesses_side_by_side() {
        use crate::analyze::{CapacityReport, harness};
        let report: CapacityReport =
            serde_json::from_str(include_str!("../../tests/data/results-fixture.json")).unwrap();
        let mut cards = harness::fixtures::two_harnesses((2.0, [1.8, 2.2]), (1.0, [0.9, 1.1]));
        cards[0].reuse = Some(crate::analyze::reuse::CardReuse {
            potential: Some(0.8),
            realized_server: Some(0.75),
            server_source: Some("vLLM counters".into()),
            ..Default::default()
        });
        let report = CapacityReport {
            harnesses: harness::compare(&cards),
            cards,
            ..report
        };
        let summary = render_summary(&report, &Templates::builtin())
            .expect("renders")
            .expect("two cards have a summary");
        let section = summary
            .split_once("## Harnesses compared")
            .expect("the section")
            .1;
        assert!(
            section.contains("**`interactive`: `harness-a` serves the most tasks**, 2.00 tasks/s; `harness-b` gives 1.00 tasks/s, and their ranges do not meet"),
            "{section}"
        );
        assert!(section.contains("| `harness-b` |"), "{section}");
        assert!(section.contains("calls/s"), "{section}");
        assert!(
            section.contains("| not measured |"),
            "no reuse figure reads as such: {section}"
        );
        assert!(
            section.contains("| 80% / 75% (vLLM counters) |"),
            "{section}"
        );
    }
}
