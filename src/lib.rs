//! capcard: capacity cards for LLM inference.
//!
//! The pipeline, one module a stage:
//! [`config`] (KDL → [`config::Experiment`]) → [`plan`] ([`plan::Plan`]) →
//! [`exec`] (journals of [`exec::record::RequestRecord`]) → [`analyze`]
//! ([`analyze::CapacityReport`]) → [`report`] (results.json, cards, charts);
//! [`sim`] is the built-in engine used as a target. [`runner`] drives the
//! stages for `capcard run`, [`folder`] owns the results folder on disk;
//! [`k8s`] writes the Kubernetes objects that run an experiment sharded
//! over pods.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let experiment = capcard::config::load("experiments/quickstart.kdl".as_ref())?;
//! let plan = capcard::plan::build(&experiment);
//! println!("{}", capcard::plan::render_table(&plan, &experiment));
//! # Ok(()) }
//! ```

pub mod analyze;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod diff;
pub mod dist;
pub mod exec;
pub mod folder;
pub mod format;
pub mod hash;
pub mod init;
pub mod k8s;
pub mod plan;
pub mod profile;
pub mod quantity;
pub mod report;
pub mod runner;
pub mod shard;
pub mod sim;
pub mod stats;
pub mod time;
pub mod workload;

/// The version written into results.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
