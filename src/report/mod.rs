//! CapacityReport → bytes: `results.json`, markdown cards (minijinja) and SVG
//! charts. Writing files is the caller's job.
