//! The `slo` block: latency bounds per metric and statistic
//! (`ttft p99="1s"`) and an `error-rate` bound.

use std::collections::HashMap;

use kdl::KdlNode;
use miette::SourceSpan;

use super::{Decoder, Once, children, span_of_name};
use crate::config::model::{LatencyMetric, Slo, SloClause};
use crate::config::units::{self, STAT_HELP};
use crate::config::validate::{self as rules, At};

const SLO_CHILDREN: &[&str] = &[
    "ttft",
    "ttfo",
    "itl",
    "tpot",
    "e2e",
    "task-e2e",
    "error-rate",
];

impl Decoder {
    pub(super) fn slo(&mut self, node: &KdlNode) -> Option<Slo> {
        let name = self.item_name(node, "slo");
        let mut ok = name.is_some();
        let mut clauses = Vec::new();
        let mut seen: HashMap<String, SourceSpan> = HashMap::new();
        let mut once = Once::default();
        for child in children(node) {
            let metric_name = child.name().value();
            let metric = match metric_name {
                "ttft" => LatencyMetric::Ttft,
                "ttfo" => LatencyMetric::Ttfo,
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
}
