//! What a run sends and when: the workload's seeded tasks, a mix's class
//! streams, or an arrival trace replayed at the run's rate.

use crate::config::{self, Experiment, TraceSpec};
use crate::exec::{self, Endpoint};
use crate::plan::{self, CardPlan, Load, RunPlan};
use crate::workload::classes::ClassStream;
use crate::workload::prompt::TokenIdRange;

/// What run `run` sends and when: the workload's seeded tasks (with its
/// dataset, if any) and arrivals drawn from the run's process — or, for an
/// open run driven by an arrival trace, the trace's rows and timestamps
/// replayed at speedup `rate / trace mean rate`. A trace run ends when the
/// trace is exhausted or the planned stop is reached, whichever is first.
pub(super) fn run_inputs(
    endpoint: &Endpoint,
    (token_ids, words): (
        Option<TokenIdRange>,
        Option<std::sync::Arc<crate::workload::prompt::WordList>>,
    ),
    tokenizer: Option<std::sync::Arc<crate::data::tokenizer::PromptTokenizer>>,
    sends: Sends<'_>,
    run: &RunPlan,
    content_nonce: u64,
) -> exec::RunInputs {
    let completions = if token_ids.is_some() {
        exec::CompletionsPrompt::TokenIds
    } else {
        exec::CompletionsPrompt::Text
    };
    let range = token_ids.unwrap_or(TokenIdRange::DEFAULT);
    let (workload, trace) = match sends {
        Sends::Workload(workload, trace) => (workload, trace),
        Sends::Mix(classes) => {
            let source =
                exec::WorkloadSource::classes(classes, run.seed, endpoint.api, completions)
                    .with_tokenizer(tokenizer)
                    .with_token_id_range(range)
                    .with_word_list(words)
                    .with_content_nonce(content_nonce)
                    .shared();
            return exec::RunInputs::for_run(run, source);
        }
    };
    if let (Load::Rate { rate, .. }, Some(spec)) = (run.load, trace) {
        if let Some(data) = &spec.data {
            let speedup = data.speedup_for_rate(rate.0);
            let source = exec::TraceSource::new(
                std::sync::Arc::clone(data),
                spec.block_tokens,
                workload,
                run.seed,
                endpoint.api,
                completions,
            )
            .with_tokenizer(tokenizer)
            .with_token_id_range(range)
            .with_word_list(words)
            .with_content_nonce(content_nonce)
            .shared();
            return exec::RunInputs {
                source,
                arrivals: Some(Box::new(data.offsets(speedup))),
            };
        }
    }
    let source = exec::WorkloadSource::new(workload, run.seed, endpoint.api, completions)
        .with_tokenizer(tokenizer)
        .with_token_id_range(range)
        .with_word_list(words)
        .with_content_nonce(content_nonce)
        .shared();
    // `arrival recorded`: the sessions start as recorded, at the run's rate.
    if let Load::Rate {
        rate,
        arrival: config::Arrival::Recorded,
    } = run.load
    {
        let recorded = workload
            .sessions
            .as_ref()
            .and_then(|s| s.data.as_deref())
            .and_then(|trace| {
                let speedup = rate.0 / crate::workload::sessions::session_rate_per_s(trace)?;
                crate::workload::sessions::recorded_arrivals(trace, speedup)
            });
        if let Some(arrivals) = recorded {
            return exec::RunInputs {
                source,
                arrivals: Some(Box::new(arrivals)),
            };
        }
    }
    exec::RunInputs::for_run(run, source)
}

/// What a card's runs send: a workload's tasks (or an arrival trace's), or
/// a mix's classes.
#[derive(Clone, Copy)]
pub(super) enum Sends<'a> {
    Workload(&'a config::Workload, Option<&'a TraceSpec>),
    Mix(&'a [ClassStream<'a>]),
}

/// What `card`'s runs send; `classes` holds a mix's class streams for as
/// long as the sends borrow them. `None`: the card's workload is gone.
pub(super) fn card_sends<'a>(
    experiment: &'a Experiment,
    card: &CardPlan,
    classes: &'a mut Vec<ClassStream<'a>>,
) -> Option<Sends<'a>> {
    match &card.mix {
        Some(mix) => {
            *classes = class_streams(experiment, mix);
            Some(Sends::Mix(classes))
        }
        None => {
            let trace = experiment.open.as_ref().and_then(|o| o.trace.as_ref());
            Some(Sends::Workload(experiment.workload(&card.workload)?, trace))
        }
    }
}

/// The class streams of a mix card, in class order.
pub(super) fn class_streams<'a>(
    experiment: &'a Experiment,
    mix: &plan::MixPlan,
) -> Vec<ClassStream<'a>> {
    mix.classes
        .iter()
        .filter_map(|c| {
            Some(ClassStream {
                class: crate::workload::TaskClass {
                    name: c.name.as_str().into(),
                    model: c.model.as_deref().map(Into::into),
                    priority: c.priority,
                },
                workload: experiment.workload(&c.workload)?,
                weight: c.share,
            })
        })
        .collect()
}
