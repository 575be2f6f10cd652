//! The operating system's limits a run needs: enough file descriptors for
//! the peak number of calls in flight.

use std::io::Write;

use crate::config::Experiment;

/// The most calls a closed sweep keeps in flight: its top level times the
/// largest agent fan-out (open loops have no planned peak).
pub(super) fn planned_peak_calls(experiment: &Experiment) -> u64 {
    let top = experiment
        .closed
        .as_ref()
        .and_then(|c| c.levels.iter().max().copied())
        .unwrap_or(0);
    let fan_out = experiment
        .workloads
        .iter()
        .filter_map(|w| w.agent.as_ref())
        .map(|a| a.fan_out.upper_bound().unwrap_or(1.0).max(1.0))
        .fold(1.0, f64::max);
    (f64::from(top) * fan_out).ceil() as u64
}

/// One socket per call in flight: raise the soft limit on open files to the
/// hard one, and say so when the planned peak would not fit even then
/// (calls beyond it would fail as `client-limit`, never as the server's).
#[cfg(unix)]
pub(super) fn open_files_for(peak_calls: u64, log: &mut (dyn Write + Send)) {
    // Sockets plus journals, telemetry and the runtime's own descriptors.
    const RESERVE: u64 = 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; no other effect.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let hard = limit.rlim_max;
    if limit.rlim_cur < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct; raising the soft limit up to
        // the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            let _ = writeln!(
                log,
                "open files: soft limit raised from {} to {hard}",
                limit.rlim_cur
            );
        }
    }
    // rlim_t is u64 on Linux and macOS, narrower on some targets.
    #[allow(clippy::useless_conversion)]
    let hard = u64::from(hard);
    if peak_calls + RESERVE > hard {
        let _ = writeln!(
            log,
            "warning: the closed sweep plans up to {peak_calls} calls in flight, one socket each, \
             but this process may open only {hard} files: raise the hard limit (ulimit -Hn, \
             or LimitNOFILE) or calls beyond it fail as client-limit"
        );
    }
}

#[cfg(not(unix))]
pub(super) fn open_files_for(_peak_calls: u64, _log: &mut (dyn Write + Send)) {}
