//! Experiment → Plan (pure): the matrix of runs per target × workload, stable
//! run ids, per-run seeds and an estimate of wall time.
//!
//! The Cr_open search cannot be expanded up front (each rate depends on the
//! last verdict), so the plan holds it as a [`OpenPlan::Search`] that the
//! runner resolves while it executes, using `analyze::search`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Arrival, Experiment, Fraction, RatePerS, StopRule};

/// The whole expanded experiment (`plan.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema: String,
    pub experiment: String,
    pub seed: u64,
    pub cards: Vec<CardPlan>,
    /// Estimated wall time of the whole plan, in seconds.
    pub estimated_wall_time_s: f64,
}

/// The runs that produce one card (one target × one workload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardPlan {
    pub target: String,
    pub workload: String,
    /// SLO names evaluated on the open runs.
    pub slos: Vec<String>,
    /// Closed-loop sweep, in increasing concurrency.
    pub closed: Vec<RunPlan>,
    pub open: OpenPlan,
    pub estimated_wall_time_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OpenPlan {
    None,
    /// Explicit rates, all run.
    Grid { runs: Vec<RunPlan> },
    /// Cr_open search per SLO, resolved during execution.
    Search {
        arrival: Arrival,
        min: RatePerS,
        max: RatePerS,
        precision: Fraction,
        /// Upper bound on the runs the search may take (for the estimate).
        max_runs: u32,
        /// Template for the runs the search creates (load is set per rate).
        template: RunPlan,
    },
}

/// Closed or open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Closed,
    Open,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Closed => "closed",
            Mode::Open => "open",
        }
    }
}

/// What drives a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Load {
    /// Closed loop: exactly this many tasks in flight.
    Concurrency { concurrency: u32 },
    /// Open loop: arrivals (of tasks) at this mean rate.
    Rate { rate: RatePerS, arrival: Arrival },
}

/// One run: fully specified, executable on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// Stable id, also the journal file name: `<target>--<workload>--c0008`,
    /// `<target>--<workload>--r4.000`.
    pub id: String,
    pub target: String,
    pub workload: String,
    pub mode: Mode,
    pub load: Load,
    #[serde(with = "crate::config::model::duration_secs")]
    pub warmup: Duration,
    pub stop: StopRule,
    /// Seed of this run's request stream (depends on experiment seed and
    /// workload, not on the target, so every target sees the same requests).
    pub seed: u64,
}

/// Expand an experiment into its plan.
pub fn build(experiment: &Experiment) -> Plan {
    let _ = experiment;
    todo!("me")
}
