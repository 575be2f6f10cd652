//! The built-in simulated inference engine: a deterministic continuous-
//! batching core in virtual time, a roofline cost model, presets, and an
//! OpenAI-compatible HTTP server around it.

pub mod presets;
