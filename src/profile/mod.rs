//! Recorded traffic → a workload profile (pure fitting at its core): the
//! step before an experiment, turning a log into the lengths, arrivals and
//! reuse a `workload` and `open` block declare.

pub mod fit;
