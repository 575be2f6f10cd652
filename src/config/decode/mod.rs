//! KDL document → [`Experiment`], by hand, node by node.
//!
//! Hand-written rather than serde-derived because every mistake must point at
//! its exact span and the decoder must keep going after one: each method
//! returns `None` when its part is broken, after pushing diagnostics,
//! and the caller carries on with the next node. The experiment is assembled
//! only when no diagnostic was pushed. Semantic rules shared with
//! [`super::validate`](mod@super::validate) come back as [`Issue`]s that are placed here.
//!
//! One file per block of the language, each reading like its part of the
//! spec: [`target`], [`workload`], [`dist`] (distributions), [`slo`],
//! [`mix`] (request classes served together), [`loops`] (`closed` and
//! `open`) and [`sizing`]; [`values`] reads one entry's value. This file
//! holds the entry point, the document-level dispatch and file-wide checks,
//! and the shape helpers every block shares.

mod dist;
mod loops;
mod mix;
mod sizing;
mod slo;
mod sweep;
mod target;
mod values;
mod workload;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use kdl::{KdlDocument, KdlEntry, KdlNode};
use miette::SourceSpan;

use super::diag::{ConfigDiagnostic, Source, did_you_mean, suggestion_help};
use super::model::Experiment;
use super::validate::{self as rules, At, Issue};

const TOP_LEVEL: &[&str] = &[
    "experiment",
    "target",
    "workload",
    "slo",
    "mix",
    "closed",
    "open",
    "sizing",
];
const EXPERIMENT_CHILDREN: &[&str] = &["description", "seed"];

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

/// The names of the file's workloads, SLOs and mixes (each once, in file
/// order), read before the blocks so references may point forward.
#[derive(Default)]
struct Names {
    workloads: Vec<String>,
    slos: Vec<String>,
    mixes: Vec<String>,
}

/// Walks one document; each block file adds the methods for its block.
struct Decoder {
    source: Source,
    diags: Vec<ConfigDiagnostic>,
    /// (offset of a node, name) for every unknown child node or property of
    /// that node that was reported with "did you mean `name`?". A missing
    /// `name` there is then the same mistake and is not reported twice.
    near_misses: HashSet<(usize, String)>,
}

impl Decoder {
    fn document(&mut self, doc: &KdlDocument, path: &Path) -> Option<Experiment> {
        self.reject_annotations(doc);
        let nodes = doc.nodes();
        let names = self.check_duplicate_names(nodes);
        let mix_scope = mix::MixScope::of(nodes, &names);

        let mut once = Once::default();
        let mut header: Option<(Option<String>, Option<String>, u64)> = None;
        let mut experiment_span = None;
        let mut targets = Vec::new();
        let mut sweeps = Vec::new();
        let mut workloads = Vec::new();
        let mut slos = Vec::new();
        let mut mixes = Vec::new();
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
                    match self.target(node, &names.slos) {
                        Some((expanded, sweep)) => {
                            targets.extend(expanded);
                            sweeps.extend(sweep);
                        }
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
                "mix" => match self.mix(node, &mix_scope) {
                    Some(m) => mixes.push(m),
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
                        sizing = self.sizing(node, &names);
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

        self.check_tunes(&sweeps, &targets, closed.is_some(), open.is_some());

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
            mixes,
            closed,
            open,
            sizing,
            sweeps,
            base_dir: Some(base_dir),
        })
    }

    /// Reports second definitions of a target/workload/slo/mix name, and a
    /// mix named like a workload, pointing at both; returns the names (for
    /// references from mixes and `sizing`).
    fn check_duplicate_names(&mut self, nodes: &[KdlNode]) -> Names {
        let mut first: HashMap<(&str, &str), SourceSpan> = HashMap::new();
        let mut names = Names::default();
        let mut mix_names: Vec<(&str, SourceSpan)> = Vec::new();
        for node in nodes {
            let kind = node.name().value();
            if !matches!(kind, "target" | "workload" | "slo" | "mix") {
                continue;
            }
            let Some(entry) = node.entries().iter().find(|e| e.name().is_none()) else {
                continue;
            };
            let Some(name) = entry.value().as_string() else {
                continue;
            };
            let list = match kind {
                "workload" => Some(&mut names.workloads),
                "slo" => Some(&mut names.slos),
                "mix" => Some(&mut names.mixes),
                _ => None,
            };
            if let Some(list) = list.filter(|l| !l.iter().any(|n| n == name)) {
                list.push(name.to_string());
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
                    if kind == "mix" {
                        mix_names.push((name, entry.span()));
                    }
                }
            }
        }
        // Wherever the workload is in the file, the mix is the one to rename.
        for (name, span) in mix_names {
            if let Some(workload_span) = first.get(&("workload", name)).copied() {
                let issue = rules::mix_named_like_a_workload(name);
                self.error_with_first(
                    span,
                    "mix named here",
                    workload_span,
                    "workload of the same name",
                    issue.message,
                    issue.help.unwrap_or_default(),
                );
            }
        }
        names
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
}

// ------------------------------------------------- shared by every block

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

fn children(node: &KdlNode) -> &[KdlNode] {
    node.children().map(KdlDocument::nodes).unwrap_or(&[])
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
}
