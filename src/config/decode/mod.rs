//! KDL document → [`Experiment`], by hand, node by node.
//!
//! Hand-written rather than serde-derived because every mistake must point at
//! its exact span and the decoder must keep going after one: each method
//! returns `None` when its part is broken, after pushing diagnostics,
//! and the caller carries on with the next node. The experiment is assembled
//! only when no diagnostic was pushed. Semantic rules shared with
//! [`super::validate`] come back as [`Issue`]s that are placed here.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kdl::{KdlDocument, KdlEntry, KdlNode, KdlValue};
use miette::SourceSpan;

use super::diag::{ConfigDiagnostic, Source, backticked, did_you_mean, suggestion_help};
use super::model::*;
use super::units::{self, DURATION_HELP, PERCENT_HELP, STAT_HELP};
use super::validate::{self as rules, At, Issue, Quantity};

const TOP_LEVEL: &[&str] = &[
    "experiment",
    "target",
    "workload",
    "slo",
    "closed",
    "open",
    "sizing",
];
const EXPERIMENT_CHILDREN: &[&str] = &["description", "seed"];
const TARGET_CHILDREN: &[&str] = &[
    "endpoint",
    "sim",
    "api",
    "model",
    "api-key-env",
    "timeout",
    "hardware",
    "runtime",
    "cost-per-hour",
    "metrics",
    "tokenizer",
    "http2",
    "force-length",
    "extra-body",
    "header",
];
/// Target children that may repeat (all others at most once).
const TARGET_REPEATABLE: &[&str] = &["header"];
const WORKLOAD_CHILDREN: &[&str] = &[
    "input-tokens",
    "output-tokens",
    "shared-prefix",
    "conversation",
    "agent",
    "dataset",
];
const CONVERSATION_CHILDREN: &[&str] = &["turns", "think-time"];
const AGENT_CHILDREN: &[&str] = &["steps", "fan-out", "tool-time", "context-growth"];
const SLO_CHILDREN: &[&str] = &["ttft", "itl", "tpot", "e2e", "task-e2e", "error-rate"];
const CLOSED_CHILDREN: &[&str] = &[
    "concurrency",
    "duration",
    "requests",
    "warmup",
    "crossp",
    "knee",
    "repeat",
];
const OPEN_CHILDREN: &[&str] = &[
    "arrival",
    "search",
    "rates",
    "duration",
    "requests",
    "warmup",
    "confidence",
    "budget",
    "repeat",
    "frontier",
];
const SAMPLES: &[&str] = &["shuffle", "sequential"];
const SIZING_CHILDREN: &[&str] = &["target", "headroom", "spares"];
const DIST_KINDS: &[&str] = &[
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "exponential",
    "gamma",
    "empirical",
];
const METRICS: &[&str] = &["ttft", "itl", "tpot", "e2e", "task-e2e"];
const APIS: &[&str] = &["chat", "completions"];
const ARRIVALS: &[&str] = &["constant", "poisson", "gamma", "trace"];

const DIST_HELP: &str = "distributions: `fixed 300`, `uniform min=1 max=6`, `normal mean=220 stddev=60`, \
`lognormal median=600 sigma=0.6` (or mean= stddev=), `exponential mean=4`, `gamma shape=2 scale=100`, \
`empirical { value 100 weight=3 }`; add `min=`/`max=` to clamp";

/// Decodes a parsed document. `Err` carries every diagnostic found.
pub(crate) fn decode(
    doc: &KdlDocument,
    source: &Source,
    path: &Path,
) -> Result<Experiment, Vec<ConfigDiagnostic>> {
    let mut decoder = Decoder {
        source: source.clone(),
        diags: Vec::new(),
        near_misses: HashSet::new(),
    };
    let experiment = decoder.document(doc, path);
    match experiment {
        Some(experiment) if decoder.diags.is_empty() => Ok(experiment),
        _ => {
            // In file order, whatever order the checks ran in; file-wide ones last.
            let mut diags = decoder.diags;
            diags.sort_by_key(|d| d.offset().unwrap_or(usize::MAX));
            Err(diags)
        }
    }
}

/// Maps a KDL parse failure to diagnostics on the named file.
pub(crate) fn parse_error(err: &kdl::KdlError, source: &Source) -> Vec<ConfigDiagnostic> {
    err.diagnostics
        .iter()
        .map(|d| {
            ConfigDiagnostic::at(
                source,
                d.span,
                d.label.clone().unwrap_or_else(|| "here".into()),
                d.message.clone().unwrap_or_else(|| "invalid KDL".into()),
                Some(d.help.clone().unwrap_or_else(|| {
                    "experiment files are KDL 2.0 documents; see https://kdl.dev for the syntax"
                        .into()
                })),
            )
        })
        .collect()
}

// ------------------------------------------------------------------ helpers

fn span_of_name(node: &KdlNode) -> SourceSpan {
    node.name().span()
}

/// The span of an entry's value only (for `key=value`, just `value`).
fn value_span(entry: &KdlEntry) -> SourceSpan {
    let span = entry.span();
    match (entry.name(), entry.format()) {
        (Some(_), Some(format)) if format.value_repr.len() <= span.len() => {
            let len = format.value_repr.len();
            SourceSpan::new((span.offset() + span.len() - len).into(), len)
        }
        _ => span,
    }
}

/// `arrival trace "file"`: the first argument is the word `trace`.
fn is_trace(node: &KdlNode) -> bool {
    node.entries()
        .iter()
        .find(|e| e.name().is_none())
        .is_some_and(|e| e.value().as_string() == Some("trace"))
}

fn children(node: &KdlNode) -> &[KdlNode] {
    node.children().map(KdlDocument::nodes).unwrap_or(&[])
}

/// How a value reads in a message: `the string "abc"`, `the number 5`.
fn found(value: &KdlValue) -> String {
    match value {
        KdlValue::String(s) => format!("the string \"{s}\""),
        KdlValue::Integer(i) => format!("the number {i}"),
        KdlValue::Float(f) => format!("the number {f}"),
        KdlValue::Bool(b) => format!("#{b}"),
        KdlValue::Null => "#null".to_string(),
    }
}

/// The arguments and properties of one node, after shape checks.
struct Entries<'a> {
    args: Vec<&'a KdlEntry>,
    props: Vec<(&'a str, &'a KdlEntry)>,
}

impl<'a> Entries<'a> {
    fn prop(&self, name: &str) -> Option<&'a KdlEntry> {
        self.props
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, e)| *e)
    }
    fn has(&self, name: &str) -> bool {
        self.prop(name).is_some()
    }
}

/// Names already given in one block, for nodes that may appear only once.
#[derive(Default)]
struct Once {
    seen: HashMap<String, SourceSpan>,
}

/// A group of nodes of which at most one may be given (`duration` | `requests`).
#[derive(Default)]
struct OneOf {
    given: Option<(String, SourceSpan)>,
}

struct Decoder {
    source: Source,
    diags: Vec<ConfigDiagnostic>,
    /// (offset of a node, name) for every unknown child node or property of
    /// that node that was reported with "did you mean `name`?". A missing
    /// `name` there is then the same mistake and is not reported twice.
    near_misses: HashSet<(usize, String)>,
}

impl Decoder {
    fn error(
        &mut self,
        span: SourceSpan,
        label: &str,
        message: impl Into<String>,
        help: impl Into<Option<String>>,
    ) {
        self.diags.push(ConfigDiagnostic::at(
            &self.source,
            span,
            label,
            message,
            help.into(),
        ));
    }

    fn error_with_first(
        &mut self,
        span: SourceSpan,
        label: &str,
        first: SourceSpan,
        first_label: &str,
        message: impl Into<String>,
        help: String,
    ) {
        let diag = ConfigDiagnostic::at(&self.source, span, label, message, Some(help))
            .with_label(first, first_label);
        self.diags.push(diag);
    }

    /// Places rule violations found on the values of `node`.
    fn issues(&mut self, node: &KdlNode, issues: Vec<Issue>) -> bool {
        let ok = issues.is_empty();
        for issue in issues {
            let (span, label) = self.locate(node, &issue.at);
            self.error(span, label, issue.message, issue.help);
        }
        ok
    }

    fn locate(&self, node: &KdlNode, at: &At) -> (SourceSpan, &'static str) {
        let args: Vec<&KdlEntry> = node
            .entries()
            .iter()
            .filter(|e| e.name().is_none())
            .collect();
        let prop = |node: &KdlNode, name: &str| {
            node.entries()
                .iter()
                .find(|e| e.name().is_some_and(|n| n.value() == name))
                .map(value_span)
        };
        let fallback = (span_of_name(node), "here");
        match at {
            At::Node => fallback,
            At::Value => args
                .last()
                .map(|e| (e.span(), "this value"))
                .unwrap_or(fallback),
            At::Arg(i) => args
                .get(*i)
                .map(|e| (e.span(), "this value"))
                .unwrap_or(fallback),
            At::Prop(name) => prop(node, name)
                .map(|s| (s, "this value"))
                .unwrap_or(fallback),
            At::Child(i, name) => match children(node).get(*i) {
                Some(child) => match name {
                    Some(name) => prop(child, name)
                        .map(|s| (s, "this value"))
                        .unwrap_or((span_of_name(child), "here")),
                    None => child
                        .entries()
                        .iter()
                        .find(|e| e.name().is_none())
                        .map(|e| (e.span(), "this value"))
                        .unwrap_or((span_of_name(child), "here")),
                },
                None => fallback,
            },
        }
    }

    /// Type annotations (`(u8)5`) mean nothing in an experiment; say so
    /// rather than silently ignoring them.
    fn reject_annotations(&mut self, doc: &KdlDocument) {
        for node in doc.nodes() {
            if let Some(ty) = node.ty() {
                self.error(
                    ty.span(),
                    "annotation",
                    format!(
                        "type annotation `({})` is not used in experiment files",
                        ty.value()
                    ),
                    Some("remove the parenthesised annotation".to_string()),
                );
            }
            for entry in node.entries() {
                if let Some(ty) = entry.ty() {
                    self.error(
                        entry.span(),
                        "annotation",
                        format!(
                            "type annotation `({})` is not used in experiment files",
                            ty.value()
                        ),
                        Some("remove the parenthesised annotation".to_string()),
                    );
                }
            }
            if let Some(children) = node.children() {
                self.reject_annotations(children);
            }
        }
    }

    fn unknown_node(&mut self, node: &KdlNode, parent: Option<&KdlNode>, candidates: &[&str]) {
        let name = node.name().value();
        let place = match parent {
            None => "at the top level".to_string(),
            Some(parent) => {
                if let Some(near) = did_you_mean(name, candidates) {
                    self.near_misses
                        .insert((parent.span().offset(), near.to_string()));
                }
                format!("in `{}`", parent.name().value())
            }
        };
        self.error(
            span_of_name(node),
            "unknown node",
            format!("unknown node `{name}` {place}"),
            Some(suggestion_help(name, candidates)),
        );
    }

    /// True the first time this node name appears in the block.
    fn once(&mut self, once: &mut Once, node: &KdlNode) -> bool {
        let name = node.name().value();
        if let Some(first) = once.seen.get(name).copied() {
            self.error_with_first(
                span_of_name(node),
                "given again",
                first,
                "first given here",
                format!("`{name}` is given more than once"),
                format!("`{name}` may appear only once here; remove or merge the repetition"),
            );
            false
        } else {
            once.seen.insert(name.to_string(), span_of_name(node));
            true
        }
    }

    /// True if this node is the first of its mutually exclusive group.
    fn one_of(&mut self, group: &mut OneOf, node: &KdlNode, help: &str) -> bool {
        let name = node.name().value();
        match &group.given {
            Some((first, first_span)) => {
                let (first, first_span) = (first.clone(), *first_span);
                self.error_with_first(
                    span_of_name(node),
                    "conflicts",
                    first_span,
                    "given here",
                    format!("`{name}` cannot be combined with `{first}`"),
                    help.to_string(),
                );
                false
            }
            None => {
                group.given = Some((name.to_string(), span_of_name(node)));
                true
            }
        }
    }

    /// Checks the shape of a node's entries: at most `max_args` arguments and
    /// only the `allowed` properties, each at most once.
    fn entries<'a>(
        &mut self,
        node: &'a KdlNode,
        max_args: usize,
        allowed: &[&str],
        usage: &str,
    ) -> Entries<'a> {
        let name = node.name().value();
        let mut entries = Entries {
            args: Vec::new(),
            props: Vec::new(),
        };
        for entry in node.entries() {
            match entry.name() {
                None => {
                    if entries.args.len() >= max_args {
                        let message = if max_args == 0 {
                            format!("`{name}` takes no arguments")
                        } else {
                            format!("too many arguments for `{name}`")
                        };
                        self.error(
                            entry.span(),
                            "unexpected argument",
                            message,
                            Some(format!("usage: {usage}")),
                        );
                    } else {
                        entries.args.push(entry);
                    }
                }
                Some(key) => {
                    let key_name = key.value();
                    if !allowed.contains(&key_name) {
                        if let Some(near) = did_you_mean(key_name, allowed) {
                            self.near_misses
                                .insert((node.span().offset(), near.to_string()));
                        }
                        let help = if allowed.is_empty() {
                            format!("`{name}` takes no properties; usage: {usage}")
                        } else {
                            suggestion_help(key_name, allowed)
                        };
                        self.error(
                            key.span(),
                            "unknown property",
                            format!("unknown property `{key_name}` for `{name}`"),
                            Some(help),
                        );
                    } else if let Some(first) = entries.prop(key_name) {
                        let first_span = first.span();
                        self.error_with_first(
                            entry.span(),
                            "given again",
                            first_span,
                            "first given here",
                            format!("property `{key_name}` is given more than once"),
                            "give each property once".to_string(),
                        );
                    } else {
                        entries.props.push((key_name, entry));
                    }
                }
            }
        }
        entries
    }

    /// A node without a block; reports a block if present.
    fn no_children(&mut self, node: &KdlNode, usage: &str) {
        if node.children().is_some() {
            let span = self.block_span(node);
            self.error(
                span,
                "unexpected block",
                format!("`{}` takes no `{{ }}` block", node.name().value()),
                Some(format!("usage: {usage}")),
            );
        }
    }

    /// The `{ ... }` of a node, braces included. The parser's span of the
    /// children document is empty for an empty block, which underlines nothing.
    fn block_span(&self, node: &KdlNode) -> SourceSpan {
        let text: &str = self.source.inner();
        let name_end = node.name().span().offset() + node.name().span().len();
        let after_entries = node
            .entries()
            .iter()
            .map(|e| e.span().offset() + e.span().len())
            .max()
            .unwrap_or(name_end)
            .max(name_end);
        let node_end = (node.span().offset() + node.span().len()).min(text.len());
        let tail = text.get(after_entries..node_end).unwrap_or("");
        match (tail.find('{'), tail.rfind('}')) {
            (Some(open), Some(close)) if open < close => {
                SourceSpan::new((after_entries + open).into(), close - open + 1)
            }
            _ => node
                .children()
                .map_or(span_of_name(node), KdlDocument::span),
        }
    }

    /// A leaf node with exactly one argument and no properties: `timeout "120s"`.
    fn single<'a>(&mut self, node: &'a KdlNode, usage: &str) -> Option<&'a KdlEntry> {
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &[], usage);
        let first = entries.args.first().copied();
        if first.is_none() {
            self.missing_value(node, usage);
        }
        first
    }

    fn missing_value(&mut self, node: &KdlNode, usage: &str) {
        self.error(
            span_of_name(node),
            "value missing",
            format!("`{}` needs a value", node.name().value()),
            Some(format!("usage: {usage}")),
        );
    }

    /// True if an unknown child or property of `node` was already reported
    /// as a near miss of `name`.
    fn near_miss(&self, node: &KdlNode, name: &str) -> bool {
        self.near_misses
            .contains(&(node.span().offset(), name.to_string()))
    }

    fn missing_prop(&mut self, node: &KdlNode, owner: &str, prop: &str, usage: &str) {
        if self.near_miss(node, prop) {
            return;
        }
        self.error(
            span_of_name(node),
            "property missing",
            format!("`{owner}` needs `{prop}=`"),
            Some(format!("usage: {usage}")),
        );
    }

    // -------------------------------------------------------------- values

    fn string(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<String> {
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

    fn boolean(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<bool> {
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

    fn number(&mut self, entry: &KdlEntry, what: &str, usage: &str) -> Option<f64> {
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

    fn whole(&mut self, entry: &KdlEntry, what: &str, usage: &str, max: u64) -> Option<u64> {
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

    fn duration(&mut self, entry: &KdlEntry, what: &str) -> Option<Duration> {
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

    fn fraction(&mut self, entry: &KdlEntry, what: &str) -> Option<Fraction> {
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
    fn choice<'c>(&mut self, entry: &KdlEntry, what: &str, choices: &[&'c str]) -> Option<&'c str> {
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

    /// A named item's name: `target "h100" { ... }`.
    fn item_name(&mut self, node: &KdlNode, kind: &str) -> Option<String> {
        let usage = format!("{kind} \"name\" {{ ... }}");
        let entries = self.entries(node, 1, &[], &usage);
        let Some(entry) = entries.args.first() else {
            self.error(
                span_of_name(node),
                "name missing",
                format!("`{kind}` needs a name"),
                Some(format!("usage: {usage}")),
            );
            return None;
        };
        let name = self.string(entry, kind, &usage)?;
        self.issues(node, rules::check_name(kind, &name))
            .then_some(name)
    }

    // -------------------------------------------------------------- document

    fn document(&mut self, doc: &KdlDocument, path: &Path) -> Option<Experiment> {
        self.reject_annotations(doc);
        let nodes = doc.nodes();
        let slo_names = self.check_duplicate_names(nodes);

        let mut once = Once::default();
        let mut header: Option<(Option<String>, Option<String>, u64)> = None;
        let mut experiment_span = None;
        let mut targets = Vec::new();
        let mut workloads = Vec::new();
        let mut slos = Vec::new();
        let mut closed = None;
        let mut open = None;
        let mut sizing = None;
        let mut broken = false;
        let (mut target_nodes, mut workload_nodes) = (0, 0);

        for node in nodes {
            let name = node.name().value();
            match name {
                "experiment" => {
                    if self.once(&mut once, node) {
                        experiment_span = Some(span_of_name(node));
                        header = self.experiment_header(node);
                        broken |= header.is_none();
                    }
                }
                "target" => {
                    target_nodes += 1;
                    match self.target(node) {
                        Some(t) => targets.push(t),
                        None => broken = true,
                    }
                }
                "workload" => {
                    workload_nodes += 1;
                    match self.workload(node) {
                        Some(w) => workloads.push(w),
                        None => broken = true,
                    }
                }
                "slo" => match self.slo(node) {
                    Some(s) => slos.push(s),
                    None => broken = true,
                },
                "closed" => {
                    if self.once(&mut once, node) {
                        closed = self.closed(node);
                        broken |= closed.is_none();
                    }
                }
                "open" => {
                    if self.once(&mut once, node) {
                        open = self.open(node);
                        broken |= open.is_none();
                    }
                }
                "sizing" => {
                    if self.once(&mut once, node) {
                        sizing = self.sizing(node, &slo_names);
                        broken |= sizing.is_none();
                    }
                }
                _ => self.unknown_node(node, None, TOP_LEVEL),
            }
        }

        let whole_file = |decoder: &mut Decoder, message: &str, help: &str| match experiment_span {
            Some(span) => {
                decoder.error(span, "in this experiment", message, Some(help.to_string()))
            }
            None => decoder
                .diags
                .push(ConfigDiagnostic::detached(message, Some(help.to_string()))),
        };
        if target_nodes == 0 {
            whole_file(
                self,
                "the experiment has no `target`: there is nothing to measure",
                "add a target, e.g. `target \"local\" { endpoint \"http://127.0.0.1:8000/v1\" }` or `target \"sim\" { sim tiny }`",
            );
        }
        if workload_nodes == 0 {
            whole_file(
                self,
                "the experiment has no `workload`: there are no requests to send",
                "add one, e.g. `workload \"chat\" { input-tokens fixed 512; output-tokens fixed 128 }`",
            );
        }
        if !once.seen.contains_key("closed") && !once.seen.contains_key("open") {
            whole_file(
                self,
                "the experiment has neither `closed` nor `open`: there is nothing to run",
                "add `closed { concurrency 1 2 4 8; duration \"60s\" }` for CrossP and Cr_closed, and/or `open { search min=1 max=64; duration \"120s\" }` for Cr_open",
            );
        }

        if broken || !self.diags.is_empty() {
            return None;
        }
        let (name, description, seed) = header.unwrap_or((None, None, 0));
        let name = name.unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "experiment".into())
        });
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        Some(Experiment {
            name,
            description,
            seed,
            targets,
            workloads,
            slos,
            closed,
            open,
            sizing,
            base_dir: Some(base_dir),
        })
    }

    /// Reports second definitions of a target/workload/slo name, pointing at
    /// both; returns the SLO names (for `sizing`'s references).
    fn check_duplicate_names(&mut self, nodes: &[KdlNode]) -> Vec<String> {
        let mut first: HashMap<(&str, &str), SourceSpan> = HashMap::new();
        let mut slo_names = Vec::new();
        for node in nodes {
            let kind = node.name().value();
            if !matches!(kind, "target" | "workload" | "slo") {
                continue;
            }
            let Some(entry) = node.entries().iter().find(|e| e.name().is_none()) else {
                continue;
            };
            let Some(name) = entry.value().as_string() else {
                continue;
            };
            if kind == "slo" && !slo_names.iter().any(|n| n == name) {
                slo_names.push(name.to_string());
            }
            match first.get(&(kind, name)) {
                Some(first_span) => {
                    let first_span = *first_span;
                    self.error_with_first(
                        entry.span(),
                        "defined again",
                        first_span,
                        "first defined here",
                        format!("duplicate {kind} name `{name}`"),
                        format!("every {kind} needs its own name; rename one of them"),
                    );
                }
                None => {
                    first.insert((kind, name), entry.span());
                }
            }
        }
        slo_names
    }

    fn experiment_header(
        &mut self,
        node: &KdlNode,
    ) -> Option<(Option<String>, Option<String>, u64)> {
        let usage = "experiment \"name\" { description \"...\"; seed 7 }";
        let entries = self.entries(node, 1, &[], usage);
        let mut ok = true;
        let name = match entries.args.first() {
            Some(entry) => match self.string(entry, "experiment", usage) {
                Some(name) => {
                    ok &= self.issues(node, rules::check_name("experiment", &name));
                    Some(name)
                }
                None => {
                    ok = false;
                    None
                }
            },
            None => None,
        };
        let (mut description, mut seed) = (None, 0);
        let mut once = Once::default();
        for child in children(node) {
            if EXPERIMENT_CHILDREN.contains(&child.name().value()) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            match child.name().value() {
                "description" => {
                    let usage = "description \"Support chat on Llama-3.1-8B\"";
                    match self
                        .single(child, usage)
                        .and_then(|e| self.string(e, "description", usage))
                    {
                        Some(d) => description = Some(d),
                        None => ok = false,
                    }
                }
                "seed" => {
                    let usage = "seed 7";
                    match self
                        .single(child, usage)
                        .and_then(|e| self.whole(e, "seed", usage, u64::MAX))
                    {
                        Some(s) => seed = s,
                        None => ok = false,
                    }
                }
                _ => {
                    self.unknown_node(child, Some(node), EXPERIMENT_CHILDREN);
                    ok = false;
                }
            }
        }
        ok.then_some((name, description, seed))
    }

    // -------------------------------------------------------------- targets

    fn target(&mut self, node: &KdlNode) -> Option<Target> {
        let name = self.item_name(node, "target");
        let mut ok = name.is_some();
        let mut once = Once::default();
        let mut engine = OneOf::default();
        let mut kind = None;
        let mut api = Api::default();
        let (mut model, mut api_key_env, mut hardware, mut runtime, mut cost) =
            (None, None, None, None, None);
        let mut metrics = MetricsSource::Auto;
        let mut tokenizer = None;
        let mut timeout = Duration::from_secs(120);
        let (mut http2, mut force_length) = (false, true);
        let mut headers = Vec::new();
        let mut extra_body = serde_json::Map::new();
        let engine_help = "a target is either an `endpoint` (a running server) or a `sim` (the built-in engine); make two targets to compare them";

        for child in children(node) {
            let child_name = child.name().value();
            if TARGET_CHILDREN.contains(&child_name)
                && !TARGET_REPEATABLE.contains(&child_name)
                && !self.once(&mut once, child)
            {
                ok = false;
                continue;
            }
            let value = match child_name {
                "endpoint" => {
                    if !self.one_of(&mut engine, child, engine_help) {
                        ok = false;
                        continue;
                    }
                    let usage = "endpoint \"http://127.0.0.1:8000/v1\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "endpoint", usage))
                        .filter(|url| self.issues(child, rules::check_endpoint(url)))
                        .map(|base_url| kind = Some(TargetKind::Endpoint { base_url }))
                }
                "sim" => {
                    if !self.one_of(&mut engine, child, engine_help) {
                        ok = false;
                        continue;
                    }
                    self.sim(child).map(|k| kind = Some(k))
                }
                "api" => {
                    let usage = "api chat   // or: api completions";
                    self.single(child, usage)
                        .and_then(|e| self.choice(e, "api", APIS))
                        .map(|a| {
                            api = if a == "chat" {
                                Api::Chat
                            } else {
                                Api::Completions
                            };
                        })
                }
                "model" => {
                    let usage = "model \"meta-llama/Llama-3.1-8B-Instruct\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "model", usage))
                        .map(|m| model = Some(m))
                }
                "api-key-env" => {
                    let usage = "api-key-env OPENAI_API_KEY";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "api-key-env", usage))
                        .filter(|env| self.issues(child, rules::check_api_key_env(env)))
                        .map(|env| api_key_env = Some(env))
                }
                "timeout" => {
                    let usage = "timeout \"120s\"";
                    self.single(child, usage)
                        .and_then(|e| self.duration(e, "timeout"))
                        .filter(|d| self.issues(child, rules::check_timeout(*d)))
                        .map(|d| timeout = d)
                }
                "hardware" => {
                    let usage = "hardware \"1x H100 SXM 80GB\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "hardware", usage))
                        .map(|h| hardware = Some(h))
                }
                "runtime" => {
                    let usage = "runtime \"vLLM 0.11 --max-num-seqs 256\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "runtime", usage))
                        .map(|r| runtime = Some(r))
                }
                "cost-per-hour" => self.cost(child).map(|c| cost = Some(c)),
                "metrics" => {
                    let usage = "metrics \"http://127.0.0.1:8000/metrics\"   // or: metrics #false";
                    self.single(child, usage)
                        .and_then(|e| self.metrics_source(e, usage))
                        .map(|m| metrics = m)
                }
                "tokenizer" => self.tokenizer(child).map(|t| tokenizer = Some(t)),
                "http2" => {
                    let usage = "http2 #true";
                    self.single(child, usage)
                        .and_then(|e| self.boolean(e, "http2", usage))
                        .map(|b| http2 = b)
                }
                "force-length" => {
                    let usage = "force-length #false   // send neither ignore_eos nor min_tokens";
                    self.single(child, usage)
                        .and_then(|e| self.boolean(e, "force-length", usage))
                        .map(|b| force_length = b)
                }
                // Repeatable: one line per header.
                "header" => self.header(child).map(|h| headers.push(h)),
                "extra-body" => self.extra_body(child).map(|m| extra_body = m),
                _ => {
                    self.unknown_node(child, Some(node), TARGET_CHILDREN);
                    None
                }
            };
            ok &= value.is_some();
        }
        if engine.given.is_none() {
            ok = false;
        }
        let engine_near_miss = self.near_miss(node, "endpoint") || self.near_miss(node, "sim");
        if engine.given.is_none() && name.is_some() && !engine_near_miss {
            self.error(
                span_of_name(node),
                "no endpoint or sim",
                format!("target `{}` has neither `endpoint` nor `sim`", name.as_deref().unwrap_or_default()),
                Some("add `endpoint \"http://127.0.0.1:8000/v1\"` for a running server, or `sim tiny` for the built-in engine".to_string()),
            );
            ok = false;
        }
        let (Some(name), Some(kind), true) = (name, kind, ok) else {
            return None;
        };
        Some(Target {
            name,
            span: Some(
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .map_or(span_of_name(node), |e| e.span()),
            ),
            kind,
            api,
            model,
            api_key_env,
            timeout,
            hardware,
            runtime,
            cost,
            metrics,
            tokenizer,
            http2,
            headers,
            force_length,
            extra_body,
        })
    }

    /// `header "name" "value"` or `header "name" env=VAR`.
    fn header(&mut self, node: &KdlNode) -> Option<HeaderSpec> {
        let usage = "header \"x-org\" \"my-org\"   // or: header \"x-api-key\" env=MY_KEY";
        let mut positional = node.entries().iter().filter(|e| e.name().is_none());
        let env = node
            .entries()
            .iter()
            .find(|e| e.name().is_some_and(|n| n.value() == "env"));
        let bad_prop = node
            .entries()
            .iter()
            .find(|e| e.name().is_some_and(|n| n.value() != "env"));
        if let Some(entry) = bad_prop {
            self.error(
                entry.span(),
                "unknown property",
                "`header` takes a name and a value, or a name and `env=`".to_string(),
                Some(format!("write it as `{usage}`")),
            );
            return None;
        }
        let name_entry = positional.next();
        let value_entry = positional.next();
        let Some(name_entry) = name_entry else {
            self.error(
                span_of_name(node),
                "missing header name",
                "`header` needs the header's name".to_string(),
                Some(format!("write it as `{usage}`")),
            );
            return None;
        };
        let name = self.string(name_entry, "header", usage)?;
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
            || name.is_empty()
        {
            self.error(
                value_span(name_entry),
                "not a header name",
                format!("`{name}` is not a valid HTTP header name"),
                Some("header names are letters, digits and `-`, like `x-api-key`".to_string()),
            );
            return None;
        }
        let value = match (value_entry, env) {
            (Some(v), None) => HeaderValueSpec::Literal(self.string(v, "header", usage)?),
            (None, Some(e)) => HeaderValueSpec::Env(self.string(e, "header", usage)?),
            (Some(v), Some(_)) => {
                self.error(
                    value_span(v),
                    "value given twice",
                    "`header` takes a value or `env=`, not both".to_string(),
                    Some(format!("write it as `{usage}`")),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    span_of_name(node),
                    "missing header value",
                    format!("header `{name}` has no value"),
                    Some(format!("write it as `{usage}`")),
                );
                return None;
            }
        };
        Some(HeaderSpec { name, value })
    }

    /// `extra-body { temperature 0.7; priority 1 }`: one child per field,
    /// each with one value (string, number, bool or null).
    fn extra_body(&mut self, node: &KdlNode) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut map = serde_json::Map::new();
        let mut ok = true;
        for child in children(node) {
            let usage = "extra-body { priority 1; chat_template_kwargs_enable_thinking #false }";
            let Some(entry) = self.single(child, usage) else {
                ok = false;
                continue;
            };
            let value = match entry.value() {
                KdlValue::String(s) => serde_json::Value::String(s.clone()),
                KdlValue::Integer(i) => match i64::try_from(*i) {
                    Ok(i) => serde_json::Value::from(i),
                    Err(_) => serde_json::Value::from(*i as f64),
                },
                KdlValue::Float(f) => match serde_json::Number::from_f64(*f) {
                    Some(n) => serde_json::Value::Number(n),
                    None => {
                        self.error(
                            value_span(entry),
                            "not a JSON number",
                            "infinities and NaN cannot be sent in JSON".to_string(),
                            None,
                        );
                        ok = false;
                        continue;
                    }
                },
                KdlValue::Bool(b) => serde_json::Value::Bool(*b),
                KdlValue::Null => serde_json::Value::Null,
            };
            map.insert(child.name().value().to_string(), value);
        }
        ok.then_some(map)
    }

    /// `tokenizer "tokenizer.json"`; the file is read by [`super::data`].
    fn tokenizer(&mut self, node: &KdlNode) -> Option<TokenizerSpec> {
        let usage = "tokenizer \"models/llama/tokenizer.json\"";
        let entry = self.single(node, usage)?;
        let path = self.string(entry, "tokenizer", usage)?;
        if !cfg!(feature = "tokenizer") {
            self.error(
                value_span(entry),
                "not in this build",
                "this capcard was built without the `tokenizer` feature".to_string(),
                Some("rebuild with `cargo install capcard --features tokenizer`, or remove the line: prompts are then sized by the word approximation and the server's reported usage is recorded as the truth".to_string()),
            );
            return None;
        }
        Some(TokenizerSpec {
            path: PathBuf::from(path),
            span: Some(value_span(entry)),
            loaded: None,
        })
    }

    fn metrics_source(&mut self, entry: &KdlEntry, usage: &str) -> Option<MetricsSource> {
        match entry.value() {
            KdlValue::Bool(false) => Some(MetricsSource::Off),
            KdlValue::Bool(true) => Some(MetricsSource::Auto),
            KdlValue::String(url) => {
                if url.starts_with("http://") || url.starts_with("https://") {
                    Some(MetricsSource::Url { url: url.clone() })
                } else {
                    self.error(
                        value_span(entry),
                        "not an http(s) URL",
                        format!("`metrics` expects an http(s) URL, found `{url}`"),
                        Some(format!("usage: {usage}")),
                    );
                    None
                }
            }
            other => {
                self.error(
                    value_span(entry),
                    "expected a URL or #false",
                    format!(
                        "`metrics` expects a URL string or #false, found {}",
                        found(other)
                    ),
                    Some(format!("usage: {usage}")),
                );
                None
            }
        }
    }

    fn sim(&mut self, node: &KdlNode) -> Option<TargetKind> {
        let usage = "sim h100-llama3-8b [fail-rate=0.01] [cut-rate=0.01] [stall=\"2s\"]";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["fail-rate", "cut-rate", "stall"], usage);
        let mut ok = true;
        let preset = match entries.args.first() {
            Some(entry) => self
                .string(entry, "sim", usage)
                .filter(|p| self.issues(node, rules::check_preset(p))),
            None => {
                self.error(
                    span_of_name(node),
                    "preset missing",
                    "`sim` needs a preset name",
                    Some(format!(
                        "known presets: {}",
                        backticked(&crate::sim::presets::names())
                    )),
                );
                None
            }
        };
        let mut faults = SimFaults::default();
        if let Some(entry) = entries.prop("fail-rate") {
            match self.fraction(entry, "fail-rate") {
                Some(f) => faults.fail_rate = f,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("cut-rate") {
            match self.fraction(entry, "cut-rate") {
                Some(f) => faults.cut_rate = f,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("stall") {
            match self.duration(entry, "stall") {
                Some(d) => faults.stall = Some(d),
                None => ok = false,
            }
        }
        let preset = preset?;
        ok.then_some(TargetKind::Sim { preset, faults })
    }

    fn cost(&mut self, node: &KdlNode) -> Option<Cost> {
        let usage = "cost-per-hour 2.49 currency=EUR";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["currency"], usage);
        let Some(entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let per_hour = self.number(entry, "cost-per-hour", usage)?;
        if per_hour < 0.0 {
            self.error(
                value_span(entry),
                "negative",
                "`cost-per-hour` must be 0 or more",
                Some(format!("usage: {usage}")),
            );
            return None;
        }
        let currency = match entries.prop("currency") {
            Some(entry) => self.string(entry, "currency", usage)?,
            None => "USD".to_string(),
        };
        Some(Cost { per_hour, currency })
    }

    // -------------------------------------------------------------- workloads

    fn workload(&mut self, node: &KdlNode) -> Option<Workload> {
        let name = self.item_name(node, "workload");
        let mut ok = name.is_some();
        let mut once = Once::default();
        let mut shape = OneOf::default();
        let (mut input, mut output, mut shared_prefix, mut conversation, mut agent) =
            (None, None, None, None, None);
        let mut dataset: Option<DatasetSpec> = None;
        let mut has_dataset = false;

        for child in children(node) {
            let child_name = child.name().value();
            if WORKLOAD_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let shape_help = "a workload is either a multi-turn `conversation` or an `agent` loop; make two workloads to measure both";
            let done = match child_name {
                "input-tokens" => self.dist(child, Quantity::Tokens).map(|d| input = Some(d)),
                "output-tokens" => self.dist(child, Quantity::Tokens).map(|d| output = Some(d)),
                "shared-prefix" => self.shared_prefix(child).map(|p| shared_prefix = Some(p)),
                "conversation" => {
                    if !self.one_of(&mut shape, child, shape_help) {
                        ok = false;
                        continue;
                    }
                    self.conversation(child).map(|c| conversation = Some(c))
                }
                "agent" => {
                    if !self.one_of(&mut shape, child, shape_help) {
                        ok = false;
                        continue;
                    }
                    self.agent(child).map(|a| agent = Some(a))
                }
                "dataset" => {
                    has_dataset = true;
                    self.dataset(child).map(|d| dataset = Some(d))
                }
                "tokenizer" => {
                    self.error(
                        span_of_name(child),
                        "belongs on the target",
                        "`tokenizer` is a property of the model served, not of the workload".to_string(),
                        Some("move it into the target: `target \"x\" { endpoint \"...\"; tokenizer \"tokenizer.json\" }`".to_string()),
                    );
                    None
                }
                _ => {
                    self.unknown_node(child, Some(node), WORKLOAD_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if !has_dataset && name.is_some() {
            for (required, given, example) in [
                (
                    "input-tokens",
                    once.seen.contains_key("input-tokens"),
                    "input-tokens lognormal median=600 sigma=0.6",
                ),
                (
                    "output-tokens",
                    once.seen.contains_key("output-tokens"),
                    "output-tokens normal mean=220 stddev=60",
                ),
            ] {
                if !given {
                    ok = false;
                }
                if !given && !self.near_miss(node, required) {
                    self.error(
                        span_of_name(node),
                        "incomplete workload",
                        format!(
                            "workload `{}` has no `{required}`",
                            name.as_deref().unwrap_or_default()
                        ),
                        Some(format!("add e.g. `{example}`")),
                    );
                    ok = false;
                }
            }
        }
        if let (true, Some(agent_node)) = (
            has_dataset,
            children(node).iter().find(|c| c.name().value() == "agent"),
        ) {
            self.error(
                span_of_name(agent_node),
                "agent with a dataset",
                "a `dataset` replays single requests or conversations, not `agent` loops",
                Some("make a separate workload for the agent loop".to_string()),
            );
            ok = false;
        }
        // With a dataset, missing lengths are the dataset's measured ones
        // (filled in when the file is loaded, see `config::data`).
        if let Some(spec) = dataset.as_mut() {
            spec.input_from_data = input.is_none();
            spec.output_from_data = output.is_none();
            input = input.or(Some(Dist::fixed(1.0)));
            output = output.or(Some(Dist::fixed(1.0)));
        }
        let (Some(name), Some(input_tokens), Some(output_tokens), true) = (name, input, output, ok)
        else {
            return None;
        };
        Some(Workload {
            name,
            span: Some(
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .map_or(span_of_name(node), |e| e.span()),
            ),
            input_tokens,
            output_tokens,
            shared_prefix,
            conversation,
            agent,
            dataset,
        })
    }

    fn dataset(&mut self, node: &KdlNode) -> Option<DatasetSpec> {
        let usage = "dataset \"data/prompts.jsonl\" sample=\"shuffle\" max-input-tokens=4096";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["sample", "max-input-tokens"], usage);
        let Some(path_entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let path = self.string(path_entry, "dataset", usage)?;
        let sample = match entries.prop("sample") {
            Some(entry) => match self.choice(entry, "sample order", SAMPLES)? {
                "sequential" => Sample::Sequential,
                _ => Sample::Shuffle,
            },
            None => Sample::Shuffle,
        };
        let max_input_tokens = match entries.prop("max-input-tokens") {
            Some(entry) => {
                let max = self.whole(entry, "max-input-tokens", usage, u32::MAX as u64)?;
                if max == 0 {
                    self.error(
                        value_span(entry),
                        "zero",
                        "`max-input-tokens` must be at least 1",
                        Some(format!("usage: {usage}")),
                    );
                    return None;
                }
                Some(max as u32)
            }
            None => None,
        };
        Some(DatasetSpec {
            path: PathBuf::from(path),
            span: Some(value_span(path_entry)),
            sample,
            max_input_tokens,
            input_from_data: false,
            output_from_data: false,
            data: None,
        })
    }

    fn shared_prefix(&mut self, node: &KdlNode) -> Option<SharedPrefix> {
        let usage = "shared-prefix tokens=400 groups=4";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["tokens", "groups"], usage);
        let tokens = match entries.prop("tokens") {
            Some(e) => self.whole(e, "tokens", usage, u32::MAX as u64),
            None => {
                self.missing_prop(node, "shared-prefix", "tokens", usage);
                None
            }
        };
        let groups = match entries.prop("groups") {
            Some(e) => self.whole(e, "groups", usage, u32::MAX as u64),
            None => Some(1),
        };
        let prefix = SharedPrefix {
            tokens: tokens? as u32,
            groups: groups? as u32,
        };
        self.issues(node, rules::check_shared_prefix(&prefix))
            .then_some(prefix)
    }

    fn conversation(&mut self, node: &KdlNode) -> Option<Conversation> {
        let usage =
            "conversation { turns uniform min=1 max=6; think-time exponential mean=\"4s\" }";
        self.entries(node, 0, &[], usage);
        let mut once = Once::default();
        let (mut turns, mut think_time) = (None, Some(Dist::fixed(0.0)));
        let mut ok = true;
        for child in children(node) {
            if CONVERSATION_CHILDREN.contains(&child.name().value()) && !self.once(&mut once, child)
            {
                ok = false;
                continue;
            }
            match child.name().value() {
                "turns" => turns = self.dist(child, Quantity::Count),
                "think-time" => think_time = self.dist(child, Quantity::Seconds),
                _ => {
                    self.unknown_node(child, Some(node), CONVERSATION_CHILDREN);
                    ok = false;
                }
            }
        }
        if !self.required_child(node, &once, "turns", usage) {
            return None;
        }
        let conversation = Conversation {
            turns: turns?,
            think_time: think_time?,
        };
        ok.then_some(conversation)
    }

    /// Whether `node` has its required child `child`; reports it missing
    /// unless a misspelt near miss was already reported as unknown.
    fn required_child(&mut self, node: &KdlNode, once: &Once, child: &str, usage: &str) -> bool {
        if once.seen.contains_key(child) {
            return true;
        }
        if !self.near_miss(node, child) {
            let parent = node.name().value();
            self.error(
                span_of_name(node),
                &format!("{child} missing"),
                format!("`{parent}` needs `{child}`"),
                Some(format!("usage: {usage}")),
            );
        }
        false
    }

    fn agent(&mut self, node: &KdlNode) -> Option<Agent> {
        let usage = "agent { steps uniform min=3 max=12; fan-out uniform min=1 max=4; tool-time lognormal median=\"600ms\" sigma=0.8; context-growth uniform min=200 max=2000 }";
        self.entries(node, 0, &[], usage);
        let mut once = Once::default();
        let mut steps = None;
        let mut fan_out = Some(Dist::fixed(1.0));
        let mut tool_time = Some(Dist::fixed(0.0));
        let mut context_growth = Some(Dist::fixed(0.0));
        let mut ok = true;
        for child in children(node) {
            if AGENT_CHILDREN.contains(&child.name().value()) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            match child.name().value() {
                "steps" => steps = self.dist(child, Quantity::Count),
                "fan-out" => fan_out = self.dist(child, Quantity::Count),
                "tool-time" => tool_time = self.dist(child, Quantity::Seconds),
                "context-growth" => context_growth = self.dist(child, Quantity::Tokens),
                _ => {
                    self.unknown_node(child, Some(node), AGENT_CHILDREN);
                    ok = false;
                }
            }
        }
        if !self.required_child(node, &once, "steps", usage) {
            return None;
        }
        let agent = Agent {
            steps: steps?,
            fan_out: fan_out?,
            tool_time: tool_time?,
            context_growth: context_growth?,
        };
        ok.then_some(agent)
    }

    // -------------------------------------------------------------- distributions

    /// A distribution parameter: a number, or for times a duration string
    /// (dimensionless parameters such as `sigma` are numbers in both cases).
    fn dist_value(
        &mut self,
        entry: &KdlEntry,
        what: &str,
        quantity: Quantity,
        dimensionless: bool,
        usage: &str,
    ) -> Option<f64> {
        if quantity == Quantity::Seconds && !dimensionless {
            self.duration(entry, what).map(|d| d.as_secs_f64())
        } else {
            self.number(entry, what, usage)
        }
    }

    fn dist(&mut self, node: &KdlNode, quantity: Quantity) -> Option<Dist> {
        let node_name = node.name().value();
        let example = match quantity {
            Quantity::Seconds => format!("{node_name} exponential mean=\"4s\""),
            Quantity::Tokens => format!("{node_name} lognormal median=600 sigma=0.6"),
            Quantity::Count => format!("{node_name} uniform min=1 max=6"),
        };
        let first = node.entries().iter().find(|e| e.name().is_none());
        let Some(first) = first else {
            self.error(
                span_of_name(node),
                "distribution missing",
                format!("`{node_name}` needs a distribution"),
                Some(format!("e.g. `{example}`; {DIST_HELP}")),
            );
            return None;
        };

        // `input-tokens 3000` / `think-time "4s"`: a bare value means `fixed`.
        let kind_name = match first.value() {
            KdlValue::String(s) if DIST_KINDS.contains(&s.as_str()) => s.as_str(),
            KdlValue::String(s)
                if quantity != Quantity::Seconds
                    || !s.trim_start().starts_with(|c: char| c.is_ascii_digit()) =>
            {
                if s.trim_start()
                    .starts_with(|c: char| c.is_ascii_digit() || c == '.')
                {
                    // `input-tokens "3000"`: a quoted number.
                    self.number(first, node_name, &example);
                } else {
                    self.error(
                        value_span(first),
                        "unknown distribution",
                        format!("unknown distribution `{s}` for `{node_name}`"),
                        Some(
                            match dist_alias(s).or_else(|| did_you_mean(s, DIST_KINDS)) {
                                Some(near) => format!("did you mean `{near}`? {DIST_HELP}"),
                                None => DIST_HELP.to_string(),
                            },
                        ),
                    );
                }
                return None;
            }
            _ => "",
        };
        let usage = match kind_name {
            "" | "fixed" => format!(
                "{node_name} fixed {}",
                if quantity == Quantity::Seconds {
                    "\"4s\""
                } else {
                    "300"
                }
            ),
            "uniform" => format!("{node_name} uniform min=1 max=6"),
            "normal" => format!("{node_name} normal mean=220 stddev=60"),
            "lognormal" => {
                format!("{node_name} lognormal median=600 sigma=0.6   // or: mean=700 stddev=400")
            }
            "exponential" => format!("{node_name} exponential mean=4"),
            "gamma" => format!("{node_name} gamma shape=2 scale=100"),
            _ => format!("{node_name} empirical {{ value 100 weight=3; value 400 weight=1 }}"),
        };
        let params: &[&str] = match kind_name {
            "" | "fixed" | "empirical" => &["min", "max"],
            "uniform" => &["min", "max"],
            "normal" => &["mean", "stddev", "min", "max"],
            "lognormal" => &["median", "sigma", "mean", "stddev", "min", "max"],
            "exponential" => &["mean", "min", "max"],
            _ => &["shape", "scale", "min", "max"],
        };
        let max_args = if kind_name == "fixed" { 2 } else { 1 };
        let entries = self.entries(node, max_args, params, &usage);
        if kind_name != "empirical" {
            self.no_children(node, &usage);
        }

        // Required parameter `name`, reported at the node when missing.
        let mut missing = false;
        let mut param = |decoder: &mut Decoder, name: &str, dimensionless: bool| -> Option<f64> {
            match entries.prop(name) {
                Some(entry) => decoder.dist_value(
                    entry,
                    &format!("{} {name}", node.name().value()),
                    quantity,
                    dimensionless,
                    &usage,
                ),
                None => {
                    decoder.missing_prop(node, kind_name, name, &usage);
                    missing = true;
                    None
                }
            }
        };
        let clamp = |decoder: &mut Decoder, name: &str| -> Result<Option<f64>, ()> {
            match entries.prop(name) {
                Some(entry) => decoder
                    .dist_value(
                        entry,
                        &format!("{} {name}", node.name().value()),
                        quantity,
                        false,
                        &usage,
                    )
                    .map(Some)
                    .ok_or(()),
                None => Ok(None),
            }
        };

        let kind = match kind_name {
            "" => self
                .dist_value(first, node_name, quantity, false, &usage)
                .map(|value| DistKind::Fixed { value }),
            "fixed" => match entries.args.get(1) {
                Some(entry) => self
                    .dist_value(
                        entry,
                        &format!("{node_name} fixed"),
                        quantity,
                        false,
                        &usage,
                    )
                    .map(|value| DistKind::Fixed { value }),
                None => {
                    self.missing_value(node, &usage);
                    None
                }
            },
            "uniform" => {
                let min = param(self, "min", false);
                let max = param(self, "max", false);
                Some(DistKind::Uniform {
                    min: min?,
                    max: max?,
                })
            }
            "normal" => {
                let mean = param(self, "mean", false);
                let stddev = param(self, "stddev", false);
                Some(DistKind::Normal {
                    mean: mean?,
                    stddev: stddev?,
                })
            }
            "lognormal" => self.lognormal(node, &entries, quantity, &usage),
            "exponential" => param(self, "mean", false).map(|mean| DistKind::Exponential { mean }),
            "gamma" => {
                let shape = param(self, "shape", true);
                let scale = param(self, "scale", false);
                Some(DistKind::Gamma {
                    shape: shape?,
                    scale: scale?,
                })
            }
            _ => self.empirical(node, quantity),
        };
        let (min, max) = if kind_name == "uniform" {
            (Ok(None), Ok(None))
        } else {
            (clamp(self, "min"), clamp(self, "max"))
        };
        let dist = Dist {
            kind: kind?,
            min: min.ok()?,
            max: max.ok()?,
        };
        if missing {
            return None;
        }
        self.issues(node, rules::check_dist(&dist, quantity))
            .then_some(dist)
    }

    /// `lognormal median= sigma=` or `lognormal mean= stddev=` (converted).
    fn lognormal(
        &mut self,
        node: &KdlNode,
        entries: &Entries<'_>,
        quantity: Quantity,
        usage: &str,
    ) -> Option<DistKind> {
        let by_median = entries.has("median") || entries.has("sigma");
        let by_mean = entries.has("mean") || entries.has("stddev");
        if by_median && by_mean {
            self.error(
                span_of_name(node),
                "mixed parameters",
                "`lognormal` takes either `median=` and `sigma=`, or `mean=` and `stddev=`, not a mix",
                Some(format!("usage: {usage}")),
            );
            return None;
        }
        let get = |decoder: &mut Decoder, name: &str, dimensionless: bool| match entries.prop(name)
        {
            Some(entry) => decoder.dist_value(
                entry,
                &format!("{} {name}", node.name().value()),
                quantity,
                dimensionless,
                usage,
            ),
            None => {
                decoder.missing_prop(node, "lognormal", name, usage);
                None
            }
        };
        if by_mean {
            let mean = get(self, "mean", false);
            let stddev = get(self, "stddev", false);
            let (mean, stddev) = (mean?, stddev?);
            let mut ok = true;
            if mean <= 0.0 {
                let span = entries.prop("mean").map_or(span_of_name(node), value_span);
                self.error(
                    span,
                    "this value",
                    format!(
                        "lognormal `mean` must be greater than 0, got {}",
                        quantity.show(mean)
                    ),
                    None,
                );
                ok = false;
            }
            if stddev <= 0.0 {
                let span = entries
                    .prop("stddev")
                    .map_or(span_of_name(node), value_span);
                self.error(
                    span,
                    "this value",
                    format!(
                        "lognormal `stddev` must be greater than 0, got {}",
                        quantity.show(stddev)
                    ),
                    Some("for no spread use `fixed`".to_string()),
                );
                ok = false;
            }
            if !ok {
                return None;
            }
            // Moments of a lognormal: mean = m·e^(σ²/2), var = mean²·(e^(σ²) − 1).
            let spread = 1.0 + (stddev * stddev) / (mean * mean);
            Some(DistKind::LogNormal {
                median: mean / spread.sqrt(),
                sigma: spread.ln().sqrt(),
            })
        } else {
            let median = get(self, "median", false);
            let sigma = get(self, "sigma", true);
            Some(DistKind::LogNormal {
                median: median?,
                sigma: sigma?,
            })
        }
    }

    /// `empirical { value 100 weight=3; value 400 }` (weight defaults to 1).
    fn empirical(&mut self, node: &KdlNode, quantity: Quantity) -> Option<DistKind> {
        let usage = "value 100 weight=3";
        let mut points = Vec::new();
        let mut ok = true;
        for child in children(node) {
            if child.name().value() != "value" {
                self.unknown_node(child, Some(node), &["value"]);
                ok = false;
                continue;
            }
            self.no_children(child, usage);
            let entries = self.entries(child, 1, &["weight"], usage);
            let value = match entries.args.first() {
                Some(entry) => self.dist_value(entry, "value", quantity, false, usage),
                None => {
                    self.missing_value(child, usage);
                    None
                }
            };
            let weight = match entries.prop("weight") {
                Some(entry) => self.number(entry, "weight", usage),
                None => Some(1.0),
            };
            match (value, weight) {
                (Some(v), Some(w)) => points.push((v, w)),
                _ => ok = false,
            }
        }
        ok.then_some(DistKind::Empirical { points })
    }

    // -------------------------------------------------------------- SLOs

    fn slo(&mut self, node: &KdlNode) -> Option<Slo> {
        let name = self.item_name(node, "slo");
        let mut ok = name.is_some();
        let mut clauses = Vec::new();
        let mut seen: HashMap<String, SourceSpan> = HashMap::new();
        let mut once = Once::default();
        for child in children(node) {
            let metric_name = child.name().value();
            let metric = match metric_name {
                "ttft" => LatencyMetric::Ttft,
                "itl" => LatencyMetric::Itl,
                "tpot" => LatencyMetric::Tpot,
                "e2e" => LatencyMetric::E2e,
                "task-e2e" => LatencyMetric::TaskE2e,
                "error-rate" => {
                    if !self.once(&mut once, child) {
                        ok = false;
                        continue;
                    }
                    let usage = "error-rate max=\"0.5%\"";
                    self.no_children(child, usage);
                    let entries = self.entries(child, 0, &["max"], usage);
                    match entries.prop("max") {
                        Some(entry) => match self.fraction(entry, "error-rate max") {
                            Some(max) => clauses.push(SloClause::ErrorRate { max }),
                            None => ok = false,
                        },
                        None => {
                            self.missing_prop(child, "error-rate", "max", usage);
                            ok = false;
                        }
                    }
                    continue;
                }
                _ => {
                    self.unknown_node(child, Some(node), SLO_CHILDREN);
                    ok = false;
                    continue;
                }
            };
            let usage = format!("{metric_name} p50=\"300ms\" p99=\"1s\"   // or mean=\"...\"");
            self.no_children(child, &usage);
            let mut any = false;
            for entry in child.entries() {
                let Some(key) = entry.name() else {
                    self.error(
                        entry.span(),
                        "unexpected argument",
                        format!("`{metric_name}` takes bounds as properties, not arguments"),
                        Some(format!("usage: {usage}")),
                    );
                    ok = false;
                    continue;
                };
                any = true;
                let stat = match units::parse_stat(key.value()) {
                    Ok(stat) => stat,
                    Err(e) => {
                        self.error(key.span(), "invalid statistic", e.message, Some(e.help));
                        ok = false;
                        continue;
                    }
                };
                let clause_key = format!("{metric_name} {}", stat.key());
                if let Some(first) = seen.get(&clause_key).copied() {
                    self.error_with_first(
                        entry.span(),
                        "given again",
                        first,
                        "first given here",
                        format!("`{clause_key}` is bounded more than once"),
                        "give each bound once".to_string(),
                    );
                    ok = false;
                    continue;
                }
                seen.insert(clause_key, entry.span());
                match self.duration(entry, &format!("{metric_name} {}", key.value())) {
                    Some(limit) if limit.is_zero() => {
                        let issues =
                            rules::check_latency_limit(At::Prop(key.value().to_string()), limit);
                        self.issues(child, issues);
                        ok = false;
                    }
                    Some(limit) => clauses.push(SloClause::Latency {
                        metric,
                        stat,
                        limit,
                    }),
                    None => ok = false,
                }
            }
            if !any {
                self.error(
                    span_of_name(child),
                    "no bound",
                    format!("`{metric_name}` needs at least one bound"),
                    Some(format!("usage: {usage}; {STAT_HELP}")),
                );
                ok = false;
            }
        }
        if ok && clauses.is_empty() {
            self.error(
                span_of_name(node),
                "empty SLO",
                format!(
                    "slo `{}` has no clauses",
                    name.as_deref().unwrap_or_default()
                ),
                Some(
                    "add at least one bound, e.g. `ttft p99=\"1s\"` or `error-rate max=\"1%\"`"
                        .to_string(),
                ),
            );
            ok = false;
        }
        let (Some(name), true) = (name, ok) else {
            return None;
        };
        Some(Slo {
            name,
            span: Some(
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .map_or(span_of_name(node), |e| e.span()),
            ),
            clauses,
        })
    }

    // -------------------------------------------------------------- closed / open

    /// `duration "60s"` or `requests 400` inside `closed`/`open`.
    fn stop_rule(&mut self, node: &KdlNode) -> Option<StopRule> {
        let stop = if node.name().value() == "duration" {
            let usage = "duration \"60s\"";
            self.single(node, usage)
                .and_then(|e| self.duration(e, "duration"))
                .map(StopRule::Duration)
        } else {
            let usage = "requests 400";
            self.single(node, usage)
                .and_then(|e| self.whole(e, "requests", usage, u64::MAX))
                .map(StopRule::Requests)
        }?;
        self.issues(node, rules::check_stop(&stop)).then_some(stop)
    }

    fn missing_stop(&mut self, node: &KdlNode, example: &str) {
        if self.near_miss(node, "duration") || self.near_miss(node, "requests") {
            return;
        }
        self.error(
            span_of_name(node),
            "duration or requests missing",
            format!(
                "`{}` needs `duration` or `requests` to say how long each run is measured",
                node.name().value()
            ),
            Some(format!(
                "add e.g. `duration \"{example}\"` (measured time per run) or `requests 400`"
            )),
        );
    }

    fn warmup(&mut self, node: &KdlNode) -> Option<Duration> {
        self.single(node, "warmup \"10s\"")
            .and_then(|e| self.duration(e, "warmup"))
    }

    fn closed(&mut self, node: &KdlNode) -> Option<ClosedSpec> {
        self.entries(
            node,
            0,
            &[],
            "closed { concurrency 1 2 4 8; duration \"60s\" }",
        );
        let mut once = Once::default();
        let mut stop_group = OneOf::default();
        let stop_help =
            "each run stops after a measured `duration` or after a number of `requests`; keep one";
        let (mut levels, mut stop) = (None, None);
        let mut warmup = Duration::ZERO;
        let mut crossp = CrossPSpec::default();
        let mut knee = KneeSpec::default();
        let mut repeat = 1;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if CLOSED_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let done = match child_name {
                "concurrency" => self.levels(child).map(|l| levels = Some(l)),
                "duration" | "requests" => {
                    if !self.one_of(&mut stop_group, child, stop_help) {
                        ok = false;
                        continue;
                    }
                    self.stop_rule(child).map(|s| stop = Some(s))
                }
                "warmup" => self.warmup(child).map(|w| warmup = w),
                "crossp" => self.crossp(child).map(|c| crossp = c),
                "knee" => self.knee(child).map(|k| knee = k),
                "repeat" => self.repeat(child).map(|r| repeat = r),
                _ => {
                    self.unknown_node(child, Some(node), CLOSED_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if !once.seen.contains_key("concurrency") {
            ok = false;
        }
        if !once.seen.contains_key("concurrency") && !self.near_miss(node, "concurrency") {
            self.error(
                span_of_name(node),
                "concurrency missing",
                "`closed` needs `concurrency` levels to sweep",
                Some("add e.g. `concurrency 1 2 4 8 16 32`".to_string()),
            );
            ok = false;
        }
        if stop_group.given.is_none() {
            self.missing_stop(node, "60s");
            ok = false;
        }
        let (Some(levels), Some(stop), true) = (levels, stop, ok) else {
            return None;
        };
        Some(ClosedSpec {
            levels,
            stop,
            warmup,
            crossp,
            knee,
            repeat,
        })
    }

    /// `repeat 3`: run each level or rate this many times (1 to 100).
    fn repeat(&mut self, node: &KdlNode) -> Option<u32> {
        let usage = "repeat 3";
        let entry = self.single(node, usage)?;
        let n = self.whole(entry, "repeat", usage, 100)?;
        if n == 0 {
            self.error(
                value_span(entry),
                "zero repetitions",
                "`repeat` must be at least 1, found 0",
                Some(
                    "1 runs each level or rate once (the default); 3 shows the spread".to_string(),
                ),
            );
            return None;
        }
        Some(n as u32)
    }

    fn levels(&mut self, node: &KdlNode) -> Option<Vec<u32>> {
        let usage = "concurrency 1 2 4 8 16 32";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut levels = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.whole(entry, "concurrency", usage, u32::MAX as u64) {
                Some(level) => levels.push(level as u32),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_levels(&levels))).then_some(levels)
    }

    fn crossp(&mut self, node: &KdlNode) -> Option<CrossPSpec> {
        let usage = "crossp metric=ttft stat=p50";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["metric", "stat"], usage);
        let mut spec = CrossPSpec::default();
        let mut ok = true;
        if let Some(entry) = entries.prop("metric") {
            match self.choice(entry, "metric", METRICS) {
                Some(m) => spec.metric = metric_from_name(m),
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("stat") {
            match self
                .string(entry, "stat", usage)
                .map(|s| units::parse_stat(&s))
            {
                Some(Ok(stat)) => spec.stat = stat,
                Some(Err(e)) => {
                    self.error(
                        value_span(entry),
                        "invalid statistic",
                        e.message,
                        Some(e.help),
                    );
                    ok = false;
                }
                None => ok = false,
            }
        }
        ok.then_some(spec)
    }

    fn knee(&mut self, node: &KdlNode) -> Option<KneeSpec> {
        let usage = "knee fraction=0.9 upper=0.97";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["fraction", "upper"], usage);
        let mut knee = KneeSpec::default();
        let mut ok = true;
        if let Some(entry) = entries.prop("fraction") {
            match self.fraction(entry, "knee fraction") {
                Some(f) => knee.lower = f.0,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("upper") {
            match self.fraction(entry, "knee upper") {
                Some(f) => knee.upper = f.0,
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_knee(&knee))).then_some(knee)
    }

    fn open(&mut self, node: &KdlNode) -> Option<OpenSpec> {
        self.entries(
            node,
            0,
            &[],
            "open { arrival poisson; search min=0.5 max=64; duration \"120s\" }",
        );
        let mut once = Once::default();
        let mut stop_group = OneOf::default();
        let mut rates_group = OneOf::default();
        let stop_help =
            "each run stops after a measured `duration` or after a number of `requests`; keep one";
        let rates_help = "either `search` for Cr_open between two rates, or an explicit grid of `rates`; keep one";
        let (mut rates, mut stop) = (None, None);
        let mut arrival = Arrival::Poisson;
        let mut trace: Option<TraceSpec> = None;
        let mut warmup = Duration::ZERO;
        let mut confidence = Fraction(crate::analyze::interval::DEFAULT_CONFIDENCE);
        let mut budget = None;
        let mut repeat = 1;
        let mut frontier = Vec::new();
        let mut frontier_node: Option<&KdlNode> = None;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if OPEN_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let done = match child_name {
                "arrival" if is_trace(child) => self.trace(child).map(|t| {
                    arrival = Arrival::Trace;
                    trace = Some(t);
                }),
                "arrival" => self.arrival(child).map(|a| arrival = a),
                "search" | "rates" => {
                    if !self.one_of(&mut rates_group, child, rates_help) {
                        ok = false;
                        continue;
                    }
                    let selection = if child_name == "search" {
                        self.search(child)
                    } else {
                        self.rate_grid(child)
                    };
                    selection.map(|r| rates = Some(r))
                }
                "duration" | "requests" => {
                    if !self.one_of(&mut stop_group, child, stop_help) {
                        ok = false;
                        continue;
                    }
                    self.stop_rule(child).map(|s| stop = Some(s))
                }
                "warmup" => self.warmup(child).map(|w| warmup = w),
                "confidence" => self.confidence(child).map(|c| confidence = c),
                "repeat" => self.repeat(child).map(|r| repeat = r),
                "budget" => self
                    .single(child, "budget \"20m\"")
                    .and_then(|e| self.duration(e, "budget"))
                    .map(|b| budget = Some(b)),
                "frontier" => {
                    frontier_node = Some(child);
                    self.frontier(child).map(|f| frontier = f)
                }
                _ => {
                    self.unknown_node(child, Some(node), OPEN_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if let Some(spec) = &trace {
            match (&rates_group.given, spec.speedup_span) {
                // The trace's own rate × speedup is the one run (filled in
                // with the trace's mean rate when the file is loaded).
                (None, _) => rates = Some(RateSelection::Grid { rates: Vec::new() }),
                (Some(_), Some(span)) => {
                    self.error(
                        span,
                        "speedup and rates",
                        "`speedup=` and `search`/`rates` both set the replay speed",
                        Some("keep `speedup=` for one replay, or `search`/`rates` (rates in requests/s = trace mean rate × speedup)".to_string()),
                    );
                    ok = false;
                }
                (Some(_), None) => {}
            }
        }
        // The frontier phase asks a search for extra rates; a grid (or a
        // single trace replay) runs only the rates it lists.
        let grid = match &rates_group.given {
            Some((name, _)) => name == "rates",
            None => trace.is_some(),
        };
        if let (Some(child), true) = (frontier_node, grid) {
            ok &= self.issues(child, vec![rules::frontier_needs_search()]);
        }
        if rates_group.given.is_none() && trace.is_none() {
            ok = false;
        }
        let rates_near_miss = self.near_miss(node, "search") || self.near_miss(node, "rates");
        if rates_group.given.is_none() && trace.is_none() && !rates_near_miss {
            self.error(
                span_of_name(node),
                "rates missing",
                "`open` needs `search` or `rates` to say which arrival rates to run",
                Some(
                    "add e.g. `search min=0.5 max=64 precision=\"5%\"` or `rates 1 2 4 8`"
                        .to_string(),
                ),
            );
            ok = false;
        }
        // A trace knows its own length: without `duration`, a replay lasts it.
        if stop_group.given.is_none() && trace.is_some() {
            stop = Some(StopRule::TraceEnd);
        } else if stop_group.given.is_none() {
            self.missing_stop(node, "120s");
            ok = false;
        }
        let (Some(rates), Some(stop), true) = (rates, stop, ok) else {
            return None;
        };
        Some(OpenSpec {
            arrival,
            rates,
            stop,
            warmup,
            trace,
            confidence,
            budget,
            repeat,
            frontier,
        })
    }

    /// `frontier 0.5 1.5 2`: multipliers of each latency clause's bound
    /// where the search adds rates (see [`rules::check_frontier`]).
    fn frontier(&mut self, node: &KdlNode) -> Option<Vec<f64>> {
        let usage = "frontier 0.5 0.75 1.5 2";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut multipliers = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.number(entry, "frontier", usage) {
                Some(m) => multipliers.push(m),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_frontier(&multipliers))).then_some(multipliers)
    }

    /// `confidence "95%"`: of every verdict's intervals, strictly between 50% and 100%.
    fn confidence(&mut self, node: &KdlNode) -> Option<Fraction> {
        let usage = "confidence \"95%\"";
        let entry = self.single(node, usage)?;
        let f = self.fraction(entry, "confidence")?;
        if f.0 < 0.5 || f.0 >= 1.0 {
            self.error(
                value_span(entry),
                "confidence out of range",
                format!(
                    "`confidence` must be at least 50% and below 100%, got {}%",
                    f.0 * 100.0
                ),
                Some("95% is the usual choice; 99% asks for more samples per verdict".to_string()),
            );
            return None;
        }
        Some(f)
    }

    fn trace(&mut self, node: &KdlNode) -> Option<TraceSpec> {
        let usage = "arrival trace \"data/trace.jsonl\" speedup=1.0 block-tokens=512";
        self.no_children(node, usage);
        let entries = self.entries(node, 2, &["speedup", "block-tokens"], usage);
        let Some(path_entry) = entries.args.get(1) else {
            self.error(
                span_of_name(node),
                "no trace file",
                "`arrival trace` needs the path of the trace file",
                Some(format!("usage: {usage}")),
            );
            return None;
        };
        let path = self.string(path_entry, "arrival trace", usage)?;
        let (speedup, speedup_span) = match entries.prop("speedup") {
            Some(entry) => {
                let speedup = self.number(entry, "speedup", usage)?;
                if speedup <= 0.0 {
                    self.error(
                        value_span(entry),
                        "not positive",
                        format!("`speedup` must be greater than 0, got {speedup}"),
                        Some("1 replays the trace as recorded, 2 twice as fast".to_string()),
                    );
                    return None;
                }
                (Some(speedup), Some(value_span(entry)))
            }
            None => (None, None),
        };
        let block_tokens = match entries.prop("block-tokens") {
            Some(entry) => {
                let n = self.whole(entry, "block-tokens", usage, u32::MAX as u64)?;
                if n == 0 {
                    self.error(
                        value_span(entry),
                        "zero",
                        "`block-tokens` must be at least 1",
                        Some(format!("usage: {usage}")),
                    );
                    return None;
                }
                n as u32
            }
            None => crate::workload::trace::DEFAULT_BLOCK_TOKENS,
        };
        Some(TraceSpec {
            path: PathBuf::from(path),
            span: Some(value_span(path_entry)),
            speedup,
            speedup_span,
            block_tokens,
            data: None,
        })
    }

    fn arrival(&mut self, node: &KdlNode) -> Option<Arrival> {
        let usage = "arrival poisson   // or: constant, gamma cv=2.0";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["cv"], usage);
        let Some(entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let process = self.choice(entry, "arrival process", ARRIVALS)?;
        let cv = entries.prop("cv");
        let arrival = match (process, cv) {
            ("gamma", Some(cv)) => Arrival::Gamma {
                cv: self.number(cv, "cv", usage)?,
            },
            ("gamma", None) => {
                self.missing_prop(node, "arrival gamma", "cv", usage);
                return None;
            }
            (_, Some(cv)) => {
                self.error(
                    cv.span(),
                    "not for this process",
                    format!("`cv=` only applies to `arrival gamma`, not `{process}`"),
                    Some("poisson has cv 1 and constant has cv 0 by definition; for another cv use `arrival gamma cv=2.0`".to_string()),
                );
                return None;
            }
            ("constant", None) => Arrival::Constant,
            _ => Arrival::Poisson,
        };
        self.issues(node, rules::check_arrival(&arrival))
            .then_some(arrival)
    }

    fn search(&mut self, node: &KdlNode) -> Option<RateSelection> {
        let usage = "search min=0.5 max=64 precision=\"5%\"";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["min", "max", "precision"], usage);
        let bound = |decoder: &mut Decoder, name: &str| match entries.prop(name) {
            Some(entry) => decoder.number(entry, name, usage),
            None => {
                decoder.missing_prop(node, "search", name, usage);
                None
            }
        };
        let min = bound(self, "min");
        let max = bound(self, "max");
        let precision = match entries.prop("precision") {
            Some(entry) => self.fraction(entry, "precision"),
            None => Some(Fraction(0.05)),
        };
        let (min, max) = (RatePerS(min?), RatePerS(max?));
        // Check the bounds even when `precision` was malformed (already reported).
        let checked_precision = precision.unwrap_or(Fraction(0.05));
        let bounds_ok = self.issues(node, rules::check_search(min, max, checked_precision));
        let precision = precision?;
        bounds_ok.then_some(RateSelection::Search {
            min,
            max,
            precision,
        })
    }

    fn rate_grid(&mut self, node: &KdlNode) -> Option<RateSelection> {
        let usage = "rates 1 2 4 8";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut rates = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.number(entry, "rates", usage) {
                Some(rate) => rates.push(RatePerS(rate)),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_rate_grid(&rates)))
            .then_some(RateSelection::Grid { rates })
    }

    // -------------------------------------------------------------- sizing

    fn sizing(&mut self, node: &KdlNode, slo_names: &[String]) -> Option<SizingSpec> {
        self.entries(
            node,
            0,
            &[],
            "sizing { target rps=150 slo=interactive; headroom \"30%\" }",
        );
        let mut once = Once::default();
        let mut targets = Vec::new();
        let mut headroom = Fraction(0.3);
        let mut spares = 0;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if matches!(child_name, "headroom" | "spares") && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let done = match child_name {
                "target" => self
                    .sizing_target(child, slo_names)
                    .map(|t| targets.push(t)),
                "headroom" => self
                    .single(child, "headroom \"30%\"")
                    .and_then(|e| self.fraction(e, "headroom"))
                    .filter(|h| self.issues(child, rules::check_headroom(*h)))
                    .map(|h| headroom = h),
                "spares" => {
                    let usage = "spares 1";
                    self.single(child, usage)
                        .and_then(|e| self.whole(e, "spares", usage, u32::MAX as u64))
                        .map(|s| spares = s as u32)
                }
                _ => {
                    self.unknown_node(child, Some(node), SIZING_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if ok && targets.is_empty() {
            self.error(
                span_of_name(node),
                "no target",
                "`sizing` needs at least one `target`",
                Some("add e.g. `target rps=150 slo=interactive` or `target output-tokens-per-s=500000`".to_string()),
            );
            ok = false;
        }
        ok.then_some(SizingSpec {
            targets,
            headroom,
            spares,
        })
    }

    fn sizing_target(&mut self, node: &KdlNode, slo_names: &[String]) -> Option<SizingTarget> {
        let usage = "target rps=150 slo=interactive   // or: target output-tokens-per-s=500000";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["rps", "slo", "output-tokens-per-s"], usage);
        match (entries.prop("rps"), entries.prop("output-tokens-per-s")) {
            (Some(rps_entry), None) => {
                let rps = self.number(rps_entry, "rps", usage);
                let known: Vec<&str> = slo_names.iter().map(String::as_str).collect();
                let slo = match entries.prop("slo") {
                    Some(entry) => self.string(entry, "slo", usage).filter(|name| {
                        known.contains(&name.as_str()) || {
                            let issue = rules::unknown_slo_issue(name, &known);
                            self.error(value_span(entry), "no such SLO", issue.message, issue.help);
                            false
                        }
                    }),
                    None if known.len() == 1 => Some(known[0].to_string()),
                    None => {
                        let help = if known.is_empty() {
                            "an rps target is sized from Cr_open of an SLO; define an `slo` first"
                                .to_string()
                        } else {
                            format!("name one with `slo=`: {}", backticked(&known))
                        };
                        self.error(
                            span_of_name(node),
                            "which SLO?",
                            "an `rps` target needs `slo=` to say which SLO's Cr_open to size with",
                            Some(help),
                        );
                        None
                    }
                };
                let rps = RatePerS(rps?);
                let slo = slo?;
                self.issues(
                    node,
                    rules::check_positive(At::Prop("rps".into()), "`rps`", rps.0),
                )
                .then_some(SizingTarget::Rps { rps, slo })
            }
            (None, Some(tokens_entry)) => {
                if let Some(slo) = entries.prop("slo") {
                    self.error(
                        slo.span(),
                        "not used",
                        "`slo=` only applies to `rps` targets",
                        Some("an output-tokens-per-s target is sized from Cr_closed throughput, which has no SLO".to_string()),
                    );
                    return None;
                }
                let tokens_per_s = self.number(tokens_entry, "output-tokens-per-s", usage)?;
                self.issues(
                    node,
                    rules::check_positive(
                        At::Prop("output-tokens-per-s".into()),
                        "`output-tokens-per-s`",
                        tokens_per_s,
                    ),
                )
                .then_some(SizingTarget::OutputTokensPerS { tokens_per_s })
            }
            (Some(_), Some(second)) => {
                self.error(
                    second.span(),
                    "one target per line",
                    "a sizing `target` is either `rps=` or `output-tokens-per-s=`, not both",
                    Some("write two `target` lines".to_string()),
                );
                None
            }
            (None, None) => {
                if self.near_miss(node, "rps") || self.near_miss(node, "output-tokens-per-s") {
                    return None;
                }
                self.error(
                    span_of_name(node),
                    "what to size for?",
                    "a sizing `target` needs `rps=` or `output-tokens-per-s=`",
                    Some(format!("usage: {usage}")),
                );
                None
            }
        }
    }
}

fn metric_from_name(name: &str) -> LatencyMetric {
    match name {
        "itl" => LatencyMetric::Itl,
        "tpot" => LatencyMetric::Tpot,
        "e2e" => LatencyMetric::E2e,
        "task-e2e" => LatencyMetric::TaskE2e,
        _ => LatencyMetric::Ttft,
    }
}

/// Other names people use for the supported distributions.
fn dist_alias(name: &str) -> Option<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "gaussian" | "gauss" => Some("normal"),
        "log-normal" | "lognorm" => Some("lognormal"),
        "exp" | "poisson" => Some("exponential"),
        "constant" | "const" => Some("fixed"),
        "histogram" | "discrete" | "weighted" => Some("empirical"),
        _ => None,
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
