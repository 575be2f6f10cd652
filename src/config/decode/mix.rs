//! The `mix` block: several request classes served together on one
//! replica, each drawn from its own workload and held to its own SLO.
//!
//! ```kdl
//! mix "production" {
//!     class "chat"  workload="chat"  slo="interactive" weight=70
//!     class "rag"   workload="rag"   slo="rag"   weight=20 model="rag-lora" priority=0
//!     class "batch" workload="batch" slo="batch" weight=10 priority=10
//!     weights 60 20 20      // optional, repeatable: a further weight setting
//!     alone #true           // optional: also measure each class's workload alone
//! }
//! ```
//!
//! A `class` names a defined `workload=` and, where Cr_open is asked for, a
//! defined `slo=`; `weight=` is relative (> 0): its share of arrivals is the
//! weight over the sum. `model=` is the model id its calls send (e.g. a
//! LoRA adapter), `priority=` the request's scheduling priority (any whole
//! number). Cr_open of a mix is the highest total rate at which every class
//! meets its own SLO, so with an `open` block, or a sizing `target rps=N
//! mix=NAME`, every class needs `slo=`; a closed-only mix may leave it out.
//! Each `weights` line is one more setting to measure, one weight per class
//! in class order. Mix names are unique and differ from every workload name
//! (their cards share run ids). A mix cannot run beside `arrival trace` (a
//! trace brings its own requests) or `frontier` (not supported for mixes).

use std::collections::HashMap;

use kdl::{KdlEntry, KdlNode};
use miette::SourceSpan;

use super::loops::is_trace;
use super::{Decoder, Names, Once, children, span_of_name, value_span};
use crate::config::model::{Mix, MixClass};
use crate::config::validate::{self as rules, At, Issue, SloNeed};

const MIX_CHILDREN: &[&str] = &["class", "weights", "alone"];
const CLASS_PROPS: &[&str] = &["workload", "slo", "weight", "model", "priority"];
const CLASS_USAGE: &str =
    "class \"chat\" workload=\"chat\" slo=\"interactive\" weight=70 model=\"lora\" priority=0";

/// What the rules of a mix need to know about the rest of the file, read
/// from the document before any block is decoded (so a mix is checked even
/// when the `open` or `sizing` block it depends on has mistakes of its own).
pub(super) struct MixScope<'a> {
    workloads: Vec<&'a str>,
    slos: Vec<&'a str>,
    /// The name of the file's `open` block, if any.
    open: Option<SourceSpan>,
    /// `arrival trace ...` in `open`.
    trace: Option<SourceSpan>,
    /// `frontier ...` in `open`.
    frontier: Option<SourceSpan>,
    /// `mix=NAME` of every sizing target, with the span of the property.
    sized: Vec<(&'a str, SourceSpan)>,
}

impl<'a> MixScope<'a> {
    pub(super) fn of(nodes: &'a [KdlNode], names: &'a Names) -> Self {
        let open = nodes.iter().find(|n| n.name().value() == "open");
        let open_child = |name: &str, filter: fn(&KdlNode) -> bool| {
            open.and_then(|o| {
                children(o)
                    .iter()
                    .find(|c| c.name().value() == name && filter(c))
                    .map(span_of_name)
            })
        };
        let sized = nodes
            .iter()
            .filter(|n| n.name().value() == "sizing")
            .flat_map(children)
            .filter(|t| t.name().value() == "target")
            .flat_map(KdlNode::entries)
            .filter(|e| e.name().is_some_and(|k| k.value() == "mix"))
            .filter_map(|e| e.value().as_string().map(|mix| (mix, e.span())))
            .collect();
        MixScope {
            workloads: names.workloads.iter().map(String::as_str).collect(),
            slos: names.slos.iter().map(String::as_str).collect(),
            open: open.map(span_of_name),
            trace: open_child("arrival", is_trace),
            frontier: open_child("frontier", |_| true),
            sized,
        }
    }
}

/// The first argument of a node, if it is one.
fn first_arg(node: &KdlNode) -> Option<&KdlEntry> {
    node.entries().iter().find(|e| e.name().is_none())
}

/// `1 class`, `3 classes`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The node's name and entries, block excluded: a whole `weights` line.
fn line_span(node: &KdlNode) -> SourceSpan {
    let start = node.name().span().offset();
    let end = node
        .entries()
        .iter()
        .map(|e| e.span().offset() + e.span().len())
        .chain([start + node.name().span().len()])
        .max()
        .unwrap_or(start);
    SourceSpan::new(start.into(), end - start)
}

impl Decoder {
    pub(super) fn mix(&mut self, node: &KdlNode, scope: &MixScope) -> Option<Mix> {
        let name = self.item_name(node, "mix");
        let mut ok = name.is_some();
        if let Some(name) = &name {
            for (conflict, issue, label) in [
                (scope.trace, rules::mix_with_trace(name), "the trace"),
                (
                    scope.frontier,
                    rules::mix_with_frontier(name),
                    "the frontier",
                ),
            ] {
                if let Some(span) = conflict {
                    self.issue_with(node, issue, "this mix", span, label);
                    ok = false;
                }
            }
        }
        let need = match (scope.open, &name) {
            (Some(open), _) => Some((SloNeed::Open, open, "open-loop runs here")),
            (None, Some(name)) => scope
                .sized
                .iter()
                .find(|(mix, _)| *mix == name.as_str())
                .map(|(_, span)| (SloNeed::Sizing { mix: name }, *span, "sized here")),
            (None, None) => None,
        };

        let mut once = Once::default();
        let mut classes = Vec::new();
        let mut class_nodes = Vec::new();
        let mut weights_nodes = Vec::new();
        let mut alone = false;
        for child in children(node) {
            match child.name().value() {
                "class" => {
                    class_nodes.push(child);
                    match self.mix_class(child, scope, need) {
                        Some(class) => classes.push(class),
                        None => ok = false,
                    }
                }
                "weights" => weights_nodes.push(child),
                "alone" => {
                    if !self.once(&mut once, child) {
                        ok = false;
                        continue;
                    }
                    let usage = "alone #true";
                    match self
                        .single(child, usage)
                        .and_then(|e| self.boolean(e, "alone", usage))
                    {
                        Some(a) => alone = a,
                        None => ok = false,
                    }
                }
                _ => {
                    self.unknown_node(child, Some(node), MIX_CHILDREN);
                    ok = false;
                }
            }
        }

        // Class names as written, broken classes included, so the count and
        // the order a `weights` line is checked against are the file's.
        let class_names: Vec<String> = class_nodes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                first_arg(c)
                    .and_then(|e| e.value().as_string())
                    .map_or_else(|| format!("#{}", i + 1), str::to_string)
            })
            .collect();
        let mut first: HashMap<&str, SourceSpan> = HashMap::new();
        for class in &class_nodes {
            let Some(entry) = first_arg(class) else {
                continue;
            };
            let Some(class_name) = entry.value().as_string() else {
                continue;
            };
            match first.get(class_name) {
                Some(first_span) => {
                    let first_span = *first_span;
                    self.error_with_first(
                        entry.span(),
                        "defined again",
                        first_span,
                        "first defined here",
                        format!(
                            "duplicate class name `{class_name}` in mix `{}`",
                            name.as_deref().unwrap_or_default()
                        ),
                        "every class of a mix needs its own name; rename one of them".to_string(),
                    );
                    ok = false;
                }
                None => {
                    first.insert(class_name, entry.span());
                }
            }
        }
        if let (true, Some(name)) = (class_nodes.is_empty(), &name) {
            if !self.near_miss(node, "class") {
                let issue = rules::mix_without_classes(name);
                self.error(span_of_name(node), "no class", issue.message, issue.help);
            }
            ok = false;
        }

        let mut weight_settings = Vec::new();
        let names: Vec<&str> = class_names.iter().map(String::as_str).collect();
        for child in weights_nodes {
            match self.weight_setting(child, &names) {
                Some(setting) => weight_settings.push(setting),
                None => ok = false,
            }
        }

        let (Some(name), true) = (name, ok) else {
            return None;
        };
        Some(Mix {
            name,
            span: Some(first_arg(node).map_or(span_of_name(node), KdlEntry::span)),
            classes,
            weight_settings,
            alone,
        })
    }

    /// `class "chat" workload="chat" slo="interactive" weight=70 [model=] [priority=]`.
    fn mix_class(
        &mut self,
        node: &KdlNode,
        scope: &MixScope,
        need: Option<(SloNeed<'_>, SourceSpan, &str)>,
    ) -> Option<MixClass> {
        let usage = CLASS_USAGE;
        self.no_children(node, usage);
        let entries = self.entries(node, 1, CLASS_PROPS, usage);
        let name = match entries.args.first() {
            Some(entry) => self
                .string(entry, "class", usage)
                .filter(|n| self.issues(node, rules::check_name("class", n))),
            None => {
                self.error(
                    span_of_name(node),
                    "name missing",
                    "`class` needs a name",
                    Some(format!("usage: {usage}")),
                );
                None
            }
        };
        let workload = match entries.prop("workload") {
            Some(entry) => self.string(entry, "workload", usage).filter(|w| {
                scope.workloads.contains(&w.as_str()) || {
                    let issue = rules::unknown_workload_issue(w, &scope.workloads);
                    self.error(
                        value_span(entry),
                        "no such workload",
                        issue.message,
                        issue.help,
                    );
                    false
                }
            }),
            None => {
                self.missing_prop(node, "class", "workload", usage);
                None
            }
        };
        let slo = match entries.prop("slo") {
            Some(entry) => self
                .string(entry, "slo", usage)
                .filter(|s| {
                    scope.slos.contains(&s.as_str()) || {
                        let issue = rules::unknown_slo_issue(s, &scope.slos);
                        self.error(value_span(entry), "no such SLO", issue.message, issue.help);
                        false
                    }
                })
                .map(Some),
            None => match need {
                Some((need, span, label)) if !self.near_miss(node, "slo") => {
                    let shown = name.as_deref().unwrap_or("this class");
                    let issue = rules::class_needs_slo(shown, need, &scope.slos);
                    self.issue_with(node, issue, "no `slo=`", span, label);
                    None
                }
                Some(_) => None,
                None => Some(None),
            },
        };
        let weight = match entries.prop("weight") {
            Some(entry) => self.number(entry, "weight", usage).filter(|w| {
                self.issues(
                    node,
                    rules::check_class_weight(At::Prop("weight".into()), *w),
                )
            }),
            None => {
                self.missing_prop(node, "class", "weight", usage);
                None
            }
        };
        let model = match entries.prop("model") {
            Some(entry) => self
                .string(entry, "model", usage)
                .filter(|m| self.issues(node, rules::check_class_model(m)))
                .map(Some),
            None => Some(None),
        };
        let priority = match entries.prop("priority") {
            Some(entry) => self.integer(entry, "priority", usage).map(Some),
            None => Some(None),
        };
        Some(MixClass {
            name: name?,
            span: entries.args.first().map(|e| e.span()),
            workload: workload?,
            slo: slo?,
            weight: weight?,
            model: model?,
            priority: priority?,
        })
    }

    /// `weights 60 20 20`: one weight per class of the mix, in class order.
    fn weight_setting(&mut self, node: &KdlNode, classes: &[&str]) -> Option<Vec<f64>> {
        let usage = "weights 60 20 20   // one weight per class, in class order";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut weights = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.number(entry, "weights", usage) {
                Some(w) => weights.push(w),
                None => ok = false,
            }
        }
        // With no class at all, the missing classes are the mistake.
        if !ok || classes.is_empty() {
            return None;
        }
        let issues = rules::check_weight_setting(&weights, classes);
        let ok = issues.is_empty();
        for issue in issues {
            let (span, label) = match &issue.at {
                At::Arg(i) => (
                    entries.args[*i].span(),
                    format!("the weight of `{}`", classes.get(*i).unwrap_or(&"?")),
                ),
                _ => (
                    line_span(node),
                    format!(
                        "{} for {}",
                        plural(weights.len(), "weight", "weights"),
                        plural(classes.len(), "class", "classes"),
                    ),
                ),
            };
            self.error(span, &label, issue.message, issue.help);
        }
        ok.then_some(weights)
    }

    /// Places `issue` on `node` with `label`, and a second label elsewhere
    /// in the file (what the rule is about: the trace, the `open` block).
    fn issue_with(
        &mut self,
        node: &KdlNode,
        issue: Issue,
        label: &str,
        other: SourceSpan,
        other_label: &str,
    ) {
        let (span, _) = self.locate(node, &issue.at);
        self.error_with_first(
            span,
            label,
            other,
            other_label,
            issue.message,
            issue.help.unwrap_or_default(),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{self, ConfigError, SizingTarget};

    const BASE: &str = r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
workload "batch" { input-tokens fixed 900; output-tokens fixed 400 }
slo "interactive" { ttft p99="1s" }
slo "batch" { e2e p95="120s" }
closed { concurrency 1 2 4; duration "5s" }
"#;

    fn parse(extra: &str) -> Result<config::Experiment, ConfigError> {
        config::parse(&format!("{BASE}{extra}"), Path::new("mix.kdl"))
    }

    fn messages(extra: &str) -> Vec<String> {
        match parse(extra) {
            Ok(e) => panic!("should not parse: {e:#?}"),
            Err(err) => err
                .diagnostics()
                .iter()
                .map(|d| d.message().to_string())
                .collect(),
        }
    }

    #[test]
    fn a_mix_decodes_in_class_order() {
        let experiment = parse(
            r#"mix "m" {
    class "b" workload=batch weight=1.5 priority=-3
    weights 1 2
    class "c" workload=chat slo=interactive weight=3 model="lora"
    alone #false
}"#,
        )
        .unwrap();
        let mix = &experiment.mixes[0];
        assert_eq!(mix.name, "m");
        assert_eq!(mix.weights(), [1.5, 3.0]);
        assert_eq!(mix.classes[0].priority, Some(-3));
        assert_eq!(mix.classes[0].slo, None, "closed only: no SLO needed");
        assert_eq!(mix.classes[1].model.as_deref(), Some("lora"));
        assert_eq!(mix.weight_settings, [vec![1.0, 2.0]]);
        assert!(!mix.alone);
        config::validate(&experiment).unwrap();
    }

    #[test]
    fn unknown_children_and_properties_are_near_misses() {
        assert_eq!(
            messages(r#"mix "m" { clas "c" workload=chat weight=1; alnoe #true }"#),
            [
                "unknown node `clas` in `mix`",
                "unknown node `alnoe` in `mix`",
            ],
            "a misspelt `class` is not also reported as a mix without classes"
        );
        assert_eq!(
            messages(r#"mix "m" { class "c" workload=chat wieght=1 }"#),
            ["unknown property `wieght` for `class`"],
        );
    }

    #[test]
    fn class_values_have_types() {
        assert_eq!(
            messages(
                r#"mix "m" {
    class "c" workload=chat weight="1" priority=1.5 model=""
    class workload=chat weight=1
    alone "yes"
    alone #true
}"#
            ),
            [
                "`weight` expects a number, found the string \"1\"",
                "`priority` expects a whole number, found the number 1.5",
                "a class's `model` must not be empty",
                "`class` needs a name",
                "`alone` expects #true or #false, found the string \"yes\"",
                "`alone` is given more than once",
            ]
        );
    }

    #[test]
    fn a_sized_mix_needs_slos_even_without_open() {
        let msgs = messages(
            r#"mix "m" { class "c" workload=chat weight=1 }
sizing { target rps=10 mix=m }"#,
        );
        assert_eq!(
            msgs,
            [
                "class `c` has no `slo=`: sizing with mix `m` uses its Cr_open, which needs every class's own SLO"
            ]
        );
    }

    #[test]
    fn mix_rps_and_the_single_slo_default() {
        let experiment = config::parse(
            r#"
target "sim" { sim tiny }
workload "chat" { input-tokens fixed 100; output-tokens fixed 50 }
slo "only" { ttft p99="1s" }
mix "m" { class "c" workload=chat slo=only weight=1 }
open { search min=1 max=8; duration "5s" }
sizing { target rps=10 mix=m; target rps=5 }
"#,
            Path::new("mix.kdl"),
        )
        .unwrap();
        let targets = &experiment.sizing.as_ref().unwrap().targets;
        assert!(matches!(&targets[0], SizingTarget::MixRps { mix, .. } if mix == "m"));
        assert!(matches!(&targets[1], SizingTarget::Rps { slo, .. } if slo == "only"));
    }
}
