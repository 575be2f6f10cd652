//! capcard: capacity cards for LLM inference.
//!
//! The pipeline, one module a stage:
//! `config` (KDL → [`config::Experiment`]) → `plan` ([`plan::Plan`]) →
//! `exec` (journals of [`exec::record::RequestRecord`]) → `analyze`
//! ([`analyze::CapacityReport`]) → `report` (results.json, cards, charts);
//! `sim` is the built-in engine used as a target.

pub mod analyze;
pub mod config;
pub mod diff;
pub mod exec;
pub mod plan;
pub mod report;
pub mod sim;
pub mod workload;

/// The version written into results.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
