//! Helpers shared by the topic modules of this test binary.

use capcard::config::ConfigError;

/// Renders a config error the way `capcard check` shows it, without colour
/// and at a fixed width so snapshots are stable.
pub fn render(err: &ConfigError) -> String {
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .with_width(100)
        .render_report(&mut out, err)
        .expect("rendering into a String cannot fail");
    out
}
