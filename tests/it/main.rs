//! The one integration-test binary, filed by topic. Tests that need an
//! endpoint start the simulated engine (or a scripted server) on an
//! ephemeral loopback port.

mod cli;
mod config;
mod context;
mod data;
mod dialects;
mod diff;
mod docs;
mod e2e;
mod engines;
mod erlang_c;
mod examples;
mod init;
mod mix;
mod profile;
mod report;
mod shards;
mod sim;
mod sim_answers;
mod sim_dialect;
mod support;
mod telemetry;
mod tokenizer;
mod virtual_time;
