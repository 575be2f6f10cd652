//! The one integration-test binary, filed by topic. Tests that need an
//! endpoint start the simulated engine (or a scripted server) on an
//! ephemeral loopback port.

mod audit;
mod cli;
mod config;
mod context;
mod cr_open_coverage;
mod data;
mod dialects;
mod diff;
mod docs;
mod e2e;
mod engines;
mod erlang_c;
mod examples;
mod export;
mod export_llmd;
mod html;
mod init;
mod mix;
mod mmc;
mod profile;
mod report;
mod reuse;
mod sessions;
mod settings;
mod shards;
mod sim;
mod sim_answers;
mod sim_dialect;
mod support;
mod telemetry;
mod tokenizer;
mod virtual_time;

/// The tests that compare figures measured in real time, one after another
/// in one test. Two of them side by side on two cores starve each other
/// (a knee moved across its threshold now and then), and a lock between
/// separate tests would hold a test thread idle while it waits. Its name
/// sorts first, and libtest and nextest start tests in name order: the
/// other test thread runs the rest of the suite beside it, instead of this
/// minute-long chain running alone at the end.
#[test]
fn all_real_time_measurements_in_turn() {
    shards::timetable_shards_merge_into_the_one_process_card();
    shards::coordinated_shards_search_cr_open_together();
    virtual_time::virtual_and_real_time_give_the_same_card_on_the_simulator();
}
