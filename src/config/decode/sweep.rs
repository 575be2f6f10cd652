//! A target's serving settings: `launch` (the engine capcard starts and
//! stops, with `{name}` placeholders), `vary` lines (crossed) or a
//! `settings` block (listed), and `tune`; and their expansion into one
//! target per setting, named `base[name=value,…]`.

use std::time::Duration;

use kdl::{KdlEntry, KdlNode, KdlValue};
use miette::SourceSpan;

use super::target::sim_variable_knobs;
use super::values::found;
use super::{Decoder, Once, children, span_of_name, value_span};
use crate::config::diag::did_you_mean;
use crate::config::model::{Launch, Setting, Sweep, Target, TargetKind, Tune, TuneObjective};

const LAUNCH_USAGE: &str = "launch \"vllm\" \"serve\" \"/models/llama\" \"--max-num-seqs\" \"{max-num-seqs}\" { ready \"http://127.0.0.1:8000/health\" timeout=\"10m\" }";
const LAUNCH_CHILDREN: &[&str] = &["ready", "env", "grace", "dir"];
const VARY_USAGE: &str = "vary \"max-num-seqs\" 64 128 256";
const SETTINGS_USAGE: &str = "settings { setting max-num-seqs=64 max-batched-tokens=2048; setting max-num-seqs=256 max-batched-tokens=8192 }";
const TUNE_USAGE: &str =
    "tune slo=\"interactive\" budget=\"2h\"   // or: tune objective=\"cr-closed\" (or \"cost\")";

/// `launch` as read, before its placeholders are filled: every string with
/// the span it came from, so a placeholder no setting fills is shown.
pub(super) struct LaunchDraft {
    argv: Vec<(String, SourceSpan)>,
    env: Vec<(String, String, SourceSpan)>,
    ready: Option<(String, SourceSpan)>,
    ready_timeout: Duration,
    grace: Duration,
    dir: Option<(String, SourceSpan)>,
}

/// One setting as read: `(name, value as written, the value's entry)`.
type SettingDraft = Vec<(String, String, KdlEntry)>;

/// The `vary`/`settings`/`tune` lines of one target, as read.
#[derive(Default)]
pub(super) struct SweepDraft<'a> {
    pub(super) vary: Vec<&'a KdlNode>,
    pub(super) settings: Option<&'a KdlNode>,
    pub(super) tune: Option<&'a KdlNode>,
}

impl SweepDraft<'_> {
    fn is_empty(&self) -> bool {
        self.vary.is_empty() && self.settings.is_none() && self.tune.is_none()
    }
}

/// How a value reads in a setting's name and in a placeholder.
fn value_text(value: &KdlValue) -> Option<String> {
    match value {
        KdlValue::String(s) => Some(s.clone()),
        KdlValue::Integer(i) => Some(i.to_string()),
        KdlValue::Float(f) => Some(f.to_string()),
        KdlValue::Bool(b) => Some(b.to_string()),
        KdlValue::Null => None,
    }
}

/// The `{name}` placeholders of a launch string: a name of letters,
/// digits, `-`, `_` and `.` in braces (so JSON arguments pass untouched).
pub(crate) fn placeholders(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close)
                if close > 0
                    && after[..close]
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
            {
                out.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    out
}

/// `text` with every `{name}` replaced by its value.
pub(crate) fn fill(text: &str, values: &[(String, String)]) -> String {
    let mut out = text.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

impl Decoder {
    /// `launch "program" "arg" … { ready URL timeout=; env NAME VALUE; grace; dir }`.
    pub(super) fn launch(&mut self, node: &KdlNode) -> Option<LaunchDraft> {
        let entries = self.entries(node, usize::MAX, &[], LAUNCH_USAGE);
        let mut ok = true;
        let mut argv = Vec::new();
        for entry in &entries.args {
            match value_text(entry.value()) {
                Some(text) => argv.push((text, value_span(entry))),
                None => {
                    self.error(
                        value_span(entry),
                        "not an argument",
                        "`launch` takes the program and its arguments as strings or numbers",
                        Some(format!("usage: {LAUNCH_USAGE}")),
                    );
                    ok = false;
                }
            }
        }
        if entries.args.is_empty() {
            self.error(
                span_of_name(node),
                "no program",
                "`launch` needs the command that starts the engine",
                Some(format!("usage: {LAUNCH_USAGE}")),
            );
            ok = false;
        }
        let mut draft = LaunchDraft {
            argv,
            env: Vec::new(),
            ready: None,
            ready_timeout: Duration::from_secs(600),
            grace: Duration::from_secs(30),
            dir: None,
        };
        let mut once = Once::default();
        for child in children(node) {
            let name = child.name().value();
            if !LAUNCH_CHILDREN.contains(&name) {
                self.unknown_node(child, Some(node), LAUNCH_CHILDREN);
                ok = false;
                continue;
            }
            if name != "env" && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let read = match name {
                "ready" => {
                    let usage = "ready \"http://127.0.0.1:8000/health\" timeout=\"10m\"";
                    self.no_children(child, usage);
                    let e = self.entries(child, 1, &["timeout"], usage);
                    let url = match e.args.first() {
                        Some(entry) => self
                            .string(entry, "ready", usage)
                            .filter(|url| {
                                self.issues(child, crate::config::validate::check_endpoint(url))
                            })
                            .filter(|url| {
                                let plain = url.starts_with("http://");
                                if !plain {
                                    self.error(
                                        value_span(entry),
                                        "not plain HTTP",
                                        "the readiness check asks a local server over plain HTTP",
                                        Some("write it as http://HOST:PORT/PATH, e.g. http://127.0.0.1:8000/health".to_string()),
                                    );
                                }
                                plain
                            })
                            .map(|url| draft.ready = Some((url, value_span(entry)))),
                        None => {
                            self.missing_value(child, usage);
                            None
                        }
                    };
                    let timeout = match e.prop("timeout") {
                        Some(entry) => self
                            .duration(entry, "timeout")
                            .map(|d| draft.ready_timeout = d),
                        None => Some(()),
                    };
                    url.and(timeout)
                }
                "env" => {
                    let usage = "env \"VLLM_TARGET_DEVICE\" \"cpu\"";
                    self.no_children(child, usage);
                    let e = self.entries(child, 2, &[], usage);
                    match (e.args.first(), e.args.get(1)) {
                        (Some(n), Some(v)) => {
                            let name = self.string(n, "env", usage);
                            let value = value_text(v.value());
                            if value.is_none() {
                                self.error(
                                    value_span(v),
                                    "no value",
                                    "`env` needs a value, not #null",
                                    Some(format!("usage: {usage}")),
                                );
                            }
                            name.zip(value)
                                .map(|(n, v)| draft.env.push((n, v, span_of_name(child))))
                        }
                        _ => {
                            self.missing_value(child, usage);
                            None
                        }
                    }
                }
                "grace" => {
                    let usage = "grace \"30s\"   // SIGTERM, then SIGKILL after this";
                    self.single(child, usage)
                        .and_then(|e| self.duration(e, "grace"))
                        .map(|d| draft.grace = d)
                }
                "dir" => {
                    let usage = "dir \"/srv/engine\"";
                    self.single(child, usage).and_then(|e| {
                        self.string(e, "dir", usage)
                            .map(|d| draft.dir = Some((d, value_span(e))))
                    })
                }
                _ => None,
            };
            ok &= read.is_some();
        }
        ok.then_some(draft)
    }

    /// `vary "name" v1 v2 …`: the name and each value with its entry.
    fn vary(&mut self, node: &KdlNode) -> Option<(String, SourceSpan, SettingDraft)> {
        self.no_children(node, VARY_USAGE);
        let entries = self.entries(node, usize::MAX, &[], VARY_USAGE);
        let Some((first, values)) = entries.args.split_first() else {
            self.missing_value(node, VARY_USAGE);
            return None;
        };
        let name = self.string(first, "vary", VARY_USAGE)?;
        if values.is_empty() {
            self.error(
                span_of_name(node),
                "no values",
                format!("`vary \"{name}\"` lists no values"),
                Some(format!("usage: {VARY_USAGE}")),
            );
            return None;
        }
        let mut out: SettingDraft = Vec::new();
        for entry in values {
            let Some(text) = value_text(entry.value()) else {
                self.error(
                    value_span(entry),
                    "not a value",
                    format!(
                        "`vary` values are strings, numbers or booleans, found {}",
                        found(entry.value())
                    ),
                    Some(format!("usage: {VARY_USAGE}")),
                );
                return None;
            };
            if !self.setting_value_ok(&text, entry) {
                return None;
            }
            if out.iter().any(|(_, t, _)| *t == text) {
                self.error(
                    value_span(entry),
                    "listed twice",
                    format!("`{text}` is listed twice for `{name}`"),
                    Some("list each value once".to_string()),
                );
                return None;
            }
            out.push((name.clone(), text, (*entry).clone()));
        }
        Some((name, value_span(first), out))
    }

    /// `settings { setting name=value …; … }`: the listed settings.
    fn settings_list(&mut self, node: &KdlNode) -> Option<Vec<(SettingDraft, SourceSpan)>> {
        self.entries(node, 0, &[], SETTINGS_USAGE);
        let mut out = Vec::new();
        let mut ok = true;
        for child in children(node) {
            if child.name().value() != "setting" {
                self.unknown_node(child, Some(node), &["setting"]);
                ok = false;
                continue;
            }
            let usage = "setting max-num-seqs=64 max-batched-tokens=2048";
            self.no_children(child, usage);
            let mut setting: SettingDraft = Vec::new();
            for entry in child.entries() {
                let Some(key) = entry.name() else {
                    self.error(
                        entry.span(),
                        "no name",
                        "a `setting` lists `name=value` pairs",
                        Some(format!("usage: {usage}")),
                    );
                    ok = false;
                    continue;
                };
                match value_text(entry.value()) {
                    Some(text) if !self.setting_value_ok(&text, entry) => ok = false,
                    Some(text) if !setting.iter().any(|(n, _, _)| n == key.value()) => {
                        setting.push((key.value().to_string(), text, entry.clone()))
                    }
                    Some(_) => {
                        self.error(
                            key.span(),
                            "given again",
                            format!("`{}` is given twice in one setting", key.value()),
                            Some("give each name once".to_string()),
                        );
                        ok = false;
                    }
                    None => {
                        self.error(
                            value_span(entry),
                            "not a value",
                            "a setting's values are strings, numbers or booleans",
                            Some(format!("usage: {usage}")),
                        );
                        ok = false;
                    }
                }
            }
            if setting.is_empty() && ok {
                self.error(
                    span_of_name(child),
                    "empty setting",
                    "a `setting` needs at least one `name=value`",
                    Some(format!("usage: {usage}")),
                );
                ok = false;
            }
            out.push((setting, span_of_name(child)));
        }
        if out.is_empty() && ok {
            self.error(
                span_of_name(node),
                "no settings",
                "`settings` lists no `setting`",
                Some(format!("usage: {SETTINGS_USAGE}")),
            );
            return None;
        }
        // The same names in every setting: one column each on the card.
        if let Some((first, _)) = out.first() {
            let names = |s: &SettingDraft| {
                let mut n: Vec<String> = s.iter().map(|(n, _, _)| n.clone()).collect();
                n.sort();
                n
            };
            let expected = names(first);
            for (setting, span) in &out[1..] {
                if names(setting) != expected {
                    self.error(
                        *span,
                        "other names",
                        format!(
                            "this setting names {}, the first names {}",
                            names(setting).join(", "),
                            expected.join(", ")
                        ),
                        Some(
                            "give every setting the same names, so the settings can be compared"
                                .to_string(),
                        ),
                    );
                    ok = false;
                }
            }
            for (setting, span) in out.iter().skip(1) {
                let label = |s: &SettingDraft| {
                    let mut v: Vec<(String, String)> =
                        s.iter().map(|(n, t, _)| (n.clone(), t.clone())).collect();
                    v.sort();
                    v
                };
                if out
                    .iter()
                    .take_while(|(s, _)| !std::ptr::eq(s, setting))
                    .any(|(s, _)| label(s) == label(setting))
                {
                    self.error(
                        *span,
                        "listed twice",
                        "this setting is listed twice",
                        Some("list each setting once".to_string()),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// A setting's value names its cards, journals and server log
    /// (`vllm[model=a]`): no path separators, and nothing that would make
    /// the name ambiguous to read back.
    fn setting_value_ok(&mut self, text: &str, entry: &KdlEntry) -> bool {
        let bad = text.is_empty()
            || text
                .chars()
                .any(|c| "/\\,=[]".contains(c) || c.is_control());
        if bad {
            self.error(
                value_span(entry),
                "not a name",
                format!("`{text}` cannot name a setting: its value becomes part of file names"),
                Some("use a short value without `/ \\ , = [ ]` and build the rest in `launch`, e.g. `vary \"model\" \"llama-8b\"` with \"/models/{model}\"".to_string()),
            );
        }
        !bad
    }

    /// `tune slo="interactive" budget="2h"` or `tune objective="cost"`.
    fn tune(&mut self, node: &KdlNode, slos: &[String]) -> Option<Tune> {
        self.no_children(node, TUNE_USAGE);
        let entries = self.entries(node, 0, &["slo", "objective", "budget"], TUNE_USAGE);
        let objective = match entries.prop("objective") {
            Some(e) => Some(self.choice(e, "objective", &["cr-open", "cr-closed", "cost"])?),
            None => None,
        };
        let slo = match entries.prop("slo") {
            Some(e) => {
                let name = self.string(e, "slo", TUNE_USAGE)?;
                if !slos.contains(&name) {
                    let help = match did_you_mean(
                        &name,
                        &slos.iter().map(String::as_str).collect::<Vec<_>>(),
                    ) {
                        Some(near) => format!("did you mean `{near}`?"),
                        None => format!("the SLOs: {}", slos.join(", ")),
                    };
                    self.error(
                        value_span(e),
                        "no such SLO",
                        format!("there is no SLO named `{name}`"),
                        Some(help),
                    );
                    return None;
                }
                Some((name, value_span(e)))
            }
            None => None,
        };
        let budget = match entries.prop("budget") {
            Some(e) => Some(self.duration(e, "budget")?),
            None => None,
        };
        let objective = match (objective, slo) {
            (None | Some("cr-open"), Some((slo, _))) => TuneObjective::CrOpen { slo },
            (Some("cr-closed"), None) => TuneObjective::CrClosed,
            (Some("cost"), None) => TuneObjective::Cost,
            (Some(other), Some((_, span))) => {
                self.error(
                    span,
                    "no SLO here",
                    format!("`objective=\"{other}\"` is judged at Cr_closed, which needs no SLO"),
                    Some("remove `slo=`, or tune for `cr-open` within that SLO".to_string()),
                );
                return None;
            }
            (_, None) => {
                self.error(
                    span_of_name(node),
                    "no objective",
                    "`tune` needs the SLO whose Cr_open it maximises, or an objective",
                    Some(format!("usage: {TUNE_USAGE}")),
                );
                return None;
            }
        };
        Some(Tune {
            span: Some(span_of_name(node)),
            objective,
            budget,
        })
    }

    /// `tune` needs what its objective is judged on: the open runs for
    /// Cr_open, the closed sweep for Cr_closed and cost, and a cost.
    pub(super) fn check_tunes(
        &mut self,
        sweeps: &[Sweep],
        targets: &[Target],
        closed: bool,
        open: bool,
    ) {
        for sweep in sweeps {
            let Some(tune) = &sweep.tune else { continue };
            let Some(span) = tune.span else { continue };
            let missing = match &tune.objective {
                TuneObjective::CrOpen { .. } if !open => Some((
                    "no open runs",
                    "`tune` for Cr_open needs the `open` block's search".to_string(),
                    "add `open { search min=1 max=64; duration \"60s\" }`, or tune `objective=\"cr-closed\"`",
                )),
                TuneObjective::CrClosed | TuneObjective::Cost if !closed => Some((
                    "no closed sweep",
                    "this `tune` objective is judged at Cr_closed, which needs the `closed` block"
                        .to_string(),
                    "add `closed { concurrency 1 2 4 8 16; duration \"60s\" }`",
                )),
                TuneObjective::Cost
                    if targets
                        .iter()
                        .filter(|t| sweep.settings.contains(&t.name))
                        .any(|t| t.cost.is_none()) =>
                {
                    Some((
                        "no cost",
                        format!(
                            "`tune objective=\"cost\"` on target `{}`, which has no `cost-per-hour`",
                            sweep.target
                        ),
                        "add `cost-per-hour 2.49` to the target",
                    ))
                }
                _ => None,
            };
            if let Some((label, message, help)) = missing {
                self.error(span, label, message, Some(help.to_string()));
            }
        }
    }

    /// The target as one target per setting, plus the sweep that ties them
    /// together; the target alone when it varies nothing.
    pub(super) fn expand(
        &mut self,
        base: Target,
        launch: Option<(LaunchDraft, &KdlNode)>,
        draft: SweepDraft<'_>,
        slos: &[String],
    ) -> Option<(Vec<Target>, Option<Sweep>)> {
        let is_sim = matches!(base.kind, TargetKind::Sim { .. });
        if let (true, Some((_, node))) = (is_sim, &launch) {
            self.error(
                span_of_name(node),
                "sim runs in process",
                "a `sim` target runs inside capcard: there is nothing to launch",
                Some("to launch the simulator as an engine, make an endpoint target with `launch \"capcard\" \"sim\" \"--preset\" \"tiny\" \"--listen\" \"127.0.0.1:8123\" …`".to_string()),
            );
            return None;
        }
        if draft.is_empty() {
            let launch = match launch {
                Some((launch, _)) => Some(self.filled_launch(&launch, &[], &[])?),
                None => None,
            };
            return Some((vec![Target { launch, ..base }], None));
        }
        // The settings, as crossed `vary` lines or a listed block.
        let mut names: Vec<(String, SourceSpan)> = Vec::new();
        let mut axes: Vec<Vec<String>> = Vec::new();
        let mut settings: Vec<SettingDraft> = Vec::new();
        let mut ok = true;
        // A broken `vary` or `settings` line: its names are unknown, so
        // placeholders are not checked against them.
        let mut vary_broken = false;
        match (&draft.vary[..], draft.settings) {
            ([], None) => {
                if let Some(tune) = draft.tune {
                    self.error(
                        span_of_name(tune),
                        "nothing to tune",
                        format!("target `{}` varies nothing", base.name),
                        Some(format!("add the settings to search: {VARY_USAGE}")),
                    );
                }
                return None;
            }
            ([first, ..], Some(block)) => {
                self.error_with_first(
                    span_of_name(block),
                    "settings here",
                    span_of_name(first),
                    "vary here",
                    "`vary` lines and a `settings` block in one target",
                    "use `vary` lines (every combination) or a `settings` block (listed combinations), not both".to_string(),
                );
                return None;
            }
            (vary, None) => {
                let mut grid: Vec<SettingDraft> = vec![Vec::new()];
                for node in vary {
                    let Some((name, span, values)) = self.vary(node) else {
                        ok = false;
                        vary_broken = true;
                        continue;
                    };
                    if let Some((_, first)) = names.iter().find(|(n, _)| *n == name) {
                        let first = *first;
                        self.error_with_first(
                            span,
                            "varied again",
                            first,
                            "first varied here",
                            format!("`{name}` is varied twice"),
                            "list all its values on one `vary` line".to_string(),
                        );
                        ok = false;
                        continue;
                    }
                    names.push((name, span));
                    axes.push(values.iter().map(|(_, t, _)| t.clone()).collect());
                    grid = grid
                        .into_iter()
                        .flat_map(|prefix| {
                            values.iter().map(move |v| {
                                let mut s = prefix.clone();
                                s.push(v.clone());
                                s
                            })
                        })
                        .collect();
                }
                settings = grid;
            }
            ([], Some(block)) => match self.settings_list(block) {
                Some(list) => {
                    if let Some((first, _)) = list.first() {
                        names = first
                            .iter()
                            .map(|(n, _, e)| (n.clone(), e.span()))
                            .collect();
                    }
                    // Each setting in the order of the first's names.
                    settings = list
                        .into_iter()
                        .map(|(s, _)| {
                            names
                                .iter()
                                .filter_map(|(n, _)| s.iter().find(|(m, _, _)| m == n).cloned())
                                .collect()
                        })
                        .collect();
                }
                None => {
                    ok = false;
                    vary_broken = true;
                }
            },
        }
        let tune = match draft.tune {
            Some(node) => {
                let tune = self.tune(node, slos);
                ok &= tune.is_some();
                tune
            }
            None => None,
        };
        if settings.is_empty() || vary_broken {
            return None;
        }

        let mut targets = Vec::new();
        match &base.kind {
            TargetKind::Sim { serving, .. } => {
                let block_knobs = sim_block_knobs(&base);
                let variable = sim_variable_knobs();
                for (name, span) in &names {
                    if !variable.contains(&name.as_str()) {
                        let help = match did_you_mean(name, &variable) {
                            Some(near) => format!(
                                "did you mean `{near}`? a sim target varies its knobs: {}",
                                variable.join(", ")
                            ),
                            None => {
                                format!("a sim target varies its knobs: {}", variable.join(", "))
                            }
                        };
                        self.error(
                            *span,
                            "not a knob",
                            format!("`{name}` is not a knob a `sim` target can vary"),
                            Some(help),
                        );
                        ok = false;
                        continue;
                    }
                    if block_knobs.iter().any(|k| k == name) {
                        self.error(
                            *span,
                            "also in the sim block",
                            format!("`{name}` is set in the `sim` block and varied"),
                            Some(format!(
                                "remove `{name}` from the `sim` block: each setting gives it"
                            )),
                        );
                        ok = false;
                    }
                }
                if !ok {
                    return None;
                }
                // Every value checked once, as if written in the block.
                let mut values_ok = true;
                for setting in &settings {
                    for (name, _, entry) in setting {
                        let mut scratch = serving.clone();
                        values_ok &= self
                            .sim_knob(&knob_line(name, entry), &mut scratch)
                            .is_some();
                    }
                    if !values_ok {
                        return None;
                    }
                }
                for setting in &settings {
                    let mut target = base.clone();
                    if let TargetKind::Sim { serving, .. } = &mut target.kind {
                        for (name, _, entry) in setting {
                            self.sim_knob(&knob_line(name, entry), serving)?;
                        }
                    }
                    targets.push(named(target, setting));
                }
            }
            TargetKind::Endpoint { .. } => {
                let Some((launch, _)) = &launch else {
                    self.error(
                        names
                            .first()
                            .map_or(base.span.unwrap_or(SourceSpan::from(0..0)), |(_, s)| *s),
                        "no launch",
                        format!(
                            "target `{}` varies settings but capcard does not start its engine",
                            base.name
                        ),
                        Some(format!(
                            "add a `launch` whose arguments use the settings, e.g. {LAUNCH_USAGE}"
                        )),
                    );
                    return None;
                };
                // Every varied name is used, or the settings would all be the same server.
                let used: Vec<&str> = launch_texts(launch)
                    .flat_map(|(t, _)| placeholders(t))
                    .collect();
                for (name, span) in &names {
                    if !used.contains(&name.as_str()) {
                        self.error(
                            *span,
                            "not used",
                            format!("`{name}` is varied but `launch` has no `{{{name}}}`"),
                            Some(format!("put `{{{name}}}` where the engine takes it, e.g. \"--{name}\" \"{{{name}}}\"")),
                        );
                        ok = false;
                    }
                }
                let known: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
                for setting in &settings {
                    let values: Vec<(String, String)> = setting
                        .iter()
                        .map(|(n, t, _)| (n.clone(), t.clone()))
                        .collect();
                    let Some(filled) = self.filled_launch(launch, &values, &known) else {
                        // Reported once, at the placeholder.
                        return None;
                    };
                    let target = Target {
                        launch: Some(filled),
                        ..base.clone()
                    };
                    targets.push(named(target, setting));
                }
            }
        }
        if !ok {
            return None;
        }
        let sweep = Sweep {
            target: base.name.clone(),
            names: names.into_iter().map(|(n, _)| n).collect(),
            settings: targets.iter().map(|t| t.name.clone()).collect(),
            axes,
            tune,
        };
        Some((targets, Some(sweep)))
    }

    /// The launch with `{name}` filled from `values`; a placeholder no
    /// setting fills is an error at its string.
    fn filled_launch(
        &mut self,
        draft: &LaunchDraft,
        values: &[(String, String)],
        known: &[&str],
    ) -> Option<Launch> {
        let mut ok = true;
        for (text, span) in launch_texts(draft) {
            for name in placeholders(text) {
                if !known.contains(&name) {
                    let help = match did_you_mean(name, known) {
                        Some(near) => format!("did you mean `{{{near}}}`?"),
                        None if known.is_empty() => {
                            format!("declare its values on the target: `vary \"{name}\" …`")
                        }
                        None => format!("the varied names: {}", known.join(", ")),
                    };
                    self.error(
                        span,
                        "unknown placeholder",
                        format!("`{{{name}}}` is filled by no `vary` or `setting`"),
                        Some(help),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        Some(Launch {
            argv: draft.argv.iter().map(|(a, _)| fill(a, values)).collect(),
            env: draft
                .env
                .iter()
                .map(|(n, v, _)| (n.clone(), fill(v, values)))
                .collect(),
            ready_url: draft.ready.as_ref().map(|(u, _)| fill(u, values)),
            ready_timeout: draft.ready_timeout,
            grace: draft.grace,
            dir: draft.dir.as_ref().map(|(d, _)| fill(d, values).into()),
        })
    }
}

/// Every string of a launch that may hold placeholders, with its span.
fn launch_texts(draft: &LaunchDraft) -> impl Iterator<Item = (&str, SourceSpan)> {
    draft
        .argv
        .iter()
        .map(|(a, s)| (a.as_str(), *s))
        .chain(draft.env.iter().map(|(_, v, s)| (v.as_str(), *s)))
        .chain(draft.ready.iter().map(|(u, s)| (u.as_str(), *s)))
        .chain(draft.dir.iter().map(|(d, s)| (d.as_str(), *s)))
}

/// A setting's value as the sim block line it stands for (`max-num-seqs
/// 128`), its value keeping its place in the file for diagnostics.
fn knob_line(name: &str, entry: &KdlEntry) -> KdlNode {
    let mut node = KdlNode::new(name);
    let mut entry = entry.clone();
    entry.set_name(None::<kdl::KdlIdentifier>);
    node.entries_mut().push(entry);
    node
}

/// The knobs a sim target's block sets (which a setting may not also set).
fn sim_block_knobs(target: &Target) -> Vec<String> {
    let TargetKind::Sim { serving, .. } = &target.kind else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut set = |name: &str, given: bool| {
        if given {
            out.push(name.to_string());
        }
    };
    set("max-num-seqs", serving.max_num_seqs.is_some());
    set("max-batched-tokens", serving.max_batched_tokens.is_some());
    set("kv-cache-tokens", serving.kv_cache_tokens.is_some());
    set(
        "gpu-memory-utilization",
        serving.gpu_memory_utilization.is_some(),
    );
    set("prefix-caching", serving.prefix_caching.is_some());
    set("chunked-prefill", serving.chunked_prefill.is_some());
    set("tensor-parallel", serving.tensor_parallel.is_some());
    set("compute-efficiency", serving.compute_efficiency.is_some());
    set("memory-efficiency", serving.memory_efficiency.is_some());
    set("step-overhead", serving.step_overhead.is_some());
    set("per-seq-overhead", serving.per_seq_overhead.is_some());
    set("tokens-per-event", serving.tokens_per_event.is_some());
    set(
        "prompt-tokens-details",
        serving.prompt_tokens_details.is_some(),
    );
    set("replicas", serving.replicas != 1);
    out
}

/// The target of one setting: `base[name=value,…]`.
fn named(target: Target, setting: &SettingDraft) -> Target {
    let setting = Setting {
        base: target.name.clone(),
        values: setting
            .iter()
            .map(|(n, t, _)| (n.clone(), t.clone()))
            .collect(),
    };
    Target {
        name: format!("{}[{}]", target.name, setting.label()),
        setting: Some(setting),
        ..target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_names_in_braces_and_json_passes() {
        assert_eq!(
            placeholders("--max-num-seqs={max-num-seqs} {tp}"),
            vec!["max-num-seqs", "tp"]
        );
        assert!(placeholders(r#"{"temperature": 0}"#).is_empty());
        assert!(placeholders("{} {").is_empty());
        assert_eq!(
            fill("--n={n} --m {n}", &[("n".into(), "4".into())]),
            "--n=4 --m 4"
        );
    }
}
