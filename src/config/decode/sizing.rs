//! The `sizing` block: the load to size a fleet for (requests/s under an
//! SLO, requests/s of a mix with every class under its own SLO, or output
//! tokens/s), with headroom and spares.

use kdl::KdlNode;

use super::{Decoder, Names, Once, children, span_of_name, value_span};
use crate::config::diag::backticked;
use crate::config::model::{CrOpenUse, Fraction, RatePerS, SizingSpec, SizingTarget};
use crate::config::validate::{self as rules, At};

const SIZING_CHILDREN: &[&str] = &["target", "headroom", "spares", "cr-open"];

impl Decoder {
    pub(super) fn sizing(&mut self, node: &KdlNode, names: &Names) -> Option<SizingSpec> {
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
        let mut cr_open = CrOpenUse::Promise;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if matches!(child_name, "headroom" | "spares" | "cr-open")
                && !self.once(&mut once, child)
            {
                ok = false;
                continue;
            }
            let done = match child_name {
                "target" => self.sizing_target(child, names).map(|t| targets.push(t)),
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
                "cr-open" => {
                    let usage = "cr-open \"promise\"   // or \"estimate\"";
                    let chosen = self.single(child, usage).and_then(|e| match e.value().as_string() {
                        Some("promise") => Some(CrOpenUse::Promise),
                        Some("estimate") => Some(CrOpenUse::Estimate),
                        _ => {
                            self.error(
                                value_span(e),
                                "not promise or estimate",
                                "`cr-open` is \"promise\" (the range's lower end) or \"estimate\"",
                                Some(
                                    "sizing divides by Cr_open's promise unless `cr-open \"estimate\"` says otherwise"
                                        .to_string(),
                                ),
                            );
                            None
                        }
                    });
                    chosen.map(|c| cr_open = c)
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
            cr_open,
        })
    }

    fn sizing_target(&mut self, node: &KdlNode, names: &Names) -> Option<SizingTarget> {
        let usage = "target rps=150 slo=interactive   // or: target rps=150 mix=production, target output-tokens-per-s=500000";
        self.no_children(node, usage);
        let entries = self.entries(
            node,
            0,
            &["rps", "slo", "mix", "output-tokens-per-s"],
            usage,
        );
        match (entries.prop("rps"), entries.prop("output-tokens-per-s")) {
            (Some(rps_entry), None) => {
                if let (Some(slo_entry), Some(mix_entry)) =
                    (entries.prop("slo"), entries.prop("mix"))
                {
                    self.error_with_first(
                        mix_entry.span(),
                        "one or the other",
                        slo_entry.span(),
                        "given here",
                        "a sizing `target` takes `slo=` or `mix=`, not both",
                        "`mix=` sizes with the mix's Cr_open, where every class is held to its own class's SLO; remove `slo=`, or remove `mix=` to size with that SLO's Cr_open".to_string(),
                    );
                    return None;
                }
                let rps = self.number(rps_entry, "rps", usage);
                if let Some(mix_entry) = entries.prop("mix") {
                    let known: Vec<&str> = names.mixes.iter().map(String::as_str).collect();
                    let mix = self.string(mix_entry, "mix", usage).filter(|name| {
                        known.contains(&name.as_str()) || {
                            let issue = rules::unknown_mix_issue(name, &known);
                            self.error(
                                value_span(mix_entry),
                                "no such mix",
                                issue.message,
                                issue.help,
                            );
                            false
                        }
                    });
                    let rps = RatePerS(rps?);
                    let mix = mix?;
                    return self
                        .issues(
                            node,
                            rules::check_positive(At::Prop("rps".into()), "`rps`", rps.0),
                        )
                        .then_some(SizingTarget::MixRps { rps, mix });
                }
                let known: Vec<&str> = names.slos.iter().map(String::as_str).collect();
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
                        let mut help = if known.is_empty() {
                            "an rps target is sized from Cr_open of an SLO; define an `slo` first"
                                .to_string()
                        } else {
                            format!("name one with `slo=`: {}", backticked(&known))
                        };
                        if !names.mixes.is_empty() {
                            let mixes: Vec<&str> = names.mixes.iter().map(String::as_str).collect();
                            help.push_str(&format!(
                                "; or size a mix with `mix=`: {}",
                                backticked(&mixes)
                            ));
                        }
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
                if let Some(mix) = entries.prop("mix") {
                    self.error(
                        mix.span(),
                        "not used",
                        "`mix=` only applies to `rps` targets",
                        Some("a mix is sized from its Cr_open: `target rps=150 mix=production`; an output-tokens-per-s target is sized from Cr_closed throughput".to_string()),
                    );
                    return None;
                }
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
