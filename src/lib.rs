//! capcard: capacity cards for LLM inference.
//!
//! The pipeline, one module a stage:
//! [`config`] (KDL → [`config::Experiment`]) → [`plan`] ([`plan::Plan`]) →
//! [`exec`] (journals of [`exec::record::RequestRecord`]) → [`analyze`]
//! ([`analyze::CapacityReport`]) → [`report`] (results.json, cards, charts);
//! [`sim`] is the built-in engine used as a target.
//!
//! # The tree in dependency order
//!
//! Every top-level module sits on a floor and imports only modules on
//! lower floors (never its own floor, never a higher one), so the tree has
//! no import circles and the lower floors can be read, tested and reused
//! without the upper ones: [`sim`] needs nothing but the leaves, and could
//! be a crate of its own. This table is the one source of the rule: a unit
//! test (`src/floors_test.rs`) reads it and fails naming the file and the
//! import that breaks it.
//!
//! | floor | module | its one job |
//! |---|---|---|
//! | 0 | [`time`] | civil time: the RFC 3339 formatter and parser, results-folder stamps, HTTP dates |
//! | 0 | [`hash`] | stable seeds: the SplitMix64 mixer, FNV-1a of strings, the seeded generator |
//! | 0 | [`format`] | the one prose formatter: latencies, durations, rates, percentages, significant digits |
//! | 0 | [`stats`] | percentiles (HDR histograms), the [`stats::Stat`] of a clause, confidence intervals and verdicts |
//! | 0 | [`quantity`] | typed quantities: a fraction, a rate per second, durations as seconds in JSON |
//! | 0 | [`svg`] | the SVG kit every chart is drawn with: font, palette, axes, legends, the fallback chart |
//! | 0 | [`serve`] | serving an HTTP router in the background: bind, TCP_NODELAY, graceful stop |
//! | 1 | [`dist`] | distributions of token counts and times, and drawing from them |
//! | 1 | [`data`] | the data files an experiment names, parsed: datasets, traces, a tokenizer |
//! | 1 | [`launch`] | an inference server started per setting, waited ready, and stopped with its whole process group |
//! | 2 | [`sim`] | the built-in simulated engine and its HTTP server, with its own knobs |
//! | 3 | [`config`] | KDL experiment file → validated [`config::Experiment`]; the one KDL writer |
//! | 4 | [`workload`] | seeded request streams: what each task sends |
//! | 5 | [`plan`] | experiment → plan: the runs, their seeds and the wall-time estimate |
//! | 6 | [`exec`] | the network and the clock: sends a run's calls and journals them |
//! | 7 | [`analyze`] | journals → capacity: summaries, SLO verdicts, CrossP, Cr_closed, Cr_open |
//! | 8 | [`report`] | capacity → results.json, markdown cards and SVG charts |
//! | 9 | [`folder`] | the results folder on disk, and reading one back into a report |
//! | 10 | [`shard`] | one experiment over several processes: merging, the coordinator, the worker |
//! | 10 | [`profile`] | recorded traffic → a workload profile (`capcard profile`) |
//! | 10 | [`diff`] | two results → what changed, against the runs' own noise (`capcard diff`) |
//! | 10 | [`calibrate`] | fits the simulator's knobs to a real results folder (`capcard calibrate`) |
//! | 10 | [`init`] | an endpoint → a ready-to-run experiment (`capcard init`) |
//! | 10 | [`export`] | a results folder → files other tools read: the llm-d Benchmark Report, CSV, JSONL (`capcard export`) |
//! | 10 | [`k8s`] | the Kubernetes objects that run an experiment sharded over pods |
//! | 11 | [`runner`] | `capcard run`: drives the stages from a plan to a results folder |
//! | 12 | [`audit`] | `capcard audit`: an experiment's searches repeated on seeds against a simulated engine, held to a reference |
//! | 13 | [`cli`] | command-line arguments, and each command as a library function returning its exit status |
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let experiment = capcard::config::load("experiments/quickstart.kdl".as_ref())?;
//! let plan = capcard::plan::build(&experiment);
//! println!("{}", capcard::plan::render_table(&plan, &experiment));
//! # Ok(()) }
//! ```

pub mod analyze;
pub mod audit;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod data;
pub mod diff;
pub mod dist;
pub mod exec;
pub mod export;
pub mod folder;
pub mod format;
pub mod hash;
pub mod init;
pub mod k8s;
// Process groups and killpg: Unix only.
#[cfg(unix)]
pub mod launch;
pub mod plan;
pub mod profile;
pub mod quantity;
pub mod report;
pub mod runner;
pub mod serve;
pub mod shard;
pub mod sim;
pub mod stats;
pub mod svg;
pub mod time;
pub mod workload;

#[cfg(test)]
mod floors_test;

/// The version written into results.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
