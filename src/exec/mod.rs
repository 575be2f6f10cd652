//! The only place with network and clock: drives an OpenAI-compatible
//! streaming endpoint exactly as a [`RunPlan`](crate::plan::RunPlan) says and
//! journals what happened to every request.

pub mod record;
pub mod telemetry;
