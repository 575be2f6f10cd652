//! KDL experiment file → typed, validated [`Experiment`]. Every mistake in a
//! file is collected (not just the first) as a miette diagnostic with a span.

pub mod model;

pub use model::*;
