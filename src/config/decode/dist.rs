//! Distributions (`fixed`, `uniform`, `normal`, `lognormal`, `exponential`,
//! `gamma`, `empirical`, each clampable with `min=`/`max=`) for token counts,
//! counts and times; time parameters are durations.

use kdl::{KdlEntry, KdlNode, KdlValue};

use super::{Decoder, Entries, children, span_of_name, value_span};
use crate::config::diag::did_you_mean;
use crate::config::model::{Dist, DistKind};
use crate::config::validate::{self as rules, Quantity};

const DIST_KINDS: &[&str] = &[
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "exponential",
    "gamma",
    "empirical",
];

const DIST_HELP: &str = "distributions: `fixed 300`, `uniform min=1 max=6`, `normal mean=220 stddev=60`, \
`lognormal median=600 sigma=0.6` (or mean= stddev=), `exponential mean=4`, `gamma shape=2 scale=100`, \
`empirical { value 100 weight=3 }`; add `min=`/`max=` to clamp";

impl Decoder {
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

    pub(super) fn dist(&mut self, node: &KdlNode, quantity: Quantity) -> Option<Dist> {
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
