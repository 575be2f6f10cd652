//! Targets whose engine capcard launches (`launch`): one at a time, each
//! started, made ready, measured and stopped before the next, so that the
//! settings of a sweep never share the machine. A server that does not
//! start, or dies mid-card, is recorded as such and the sweep goes on; an
//! interrupt stops the server too.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::analyze::settings::{ServerRecord, ServerStatus};
use crate::config::{Experiment, Target, TargetKind};
use crate::launch::{self, LaunchSpec};
use crate::plan::Plan;

/// Lines of a server's log the card quotes when it failed or died.
const LOG_TAIL_LINES: usize = 12;

/// What one launched target's turn ended with.
pub(super) enum Turn {
    /// Measured (or skipped: measured by an earlier invocation).
    Done,
    /// The server failed to start or died; the sweep goes on.
    Failed,
    /// Interrupted (Ctrl-C): the server is stopped, the run ends.
    Interrupted,
}

/// Launches `target`'s engine, prepares it, runs its cards of `selected`,
/// and stops it, recording the startup and the outcome in
/// `servers/<target>.json`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn take_turn(
    target: &Target,
    experiment: &Experiment,
    full_plan: &Plan,
    selected: &Plan,
    folder: &ResultsFolder,
    invocation: Invocation<'_>,
    request: &RunRequest,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<Turn, RunError> {
    let Some(launch_spec) = &target.launch else {
        return in_process_turn(
            target, experiment, full_plan, selected, folder, invocation, request, cancel, log,
        )
        .await;
    };
    if invocation.resuming
        && folder
            .server_record(&target.name)
            .is_some_and(|r| r.status == ServerStatus::Stopped)
    {
        let _ = writeln!(
            log,
            "target {}: measured before, not launched again",
            target.name
        );
        return Ok(Turn::Done);
    }
    let Some(card) = selected.cards.iter().find(|c| c.target == target.name) else {
        return Ok(Turn::Done);
    };
    let port = endpoint_addr(target).await?;
    let spec = LaunchSpec {
        argv: launch_spec.argv.clone(),
        env: launch_spec.env.clone(),
        dir: launch_spec.dir.clone(),
        ready_url: launch_spec.ready_url.clone(),
        ready_timeout: launch_spec.ready_timeout,
        grace: launch_spec.grace,
        port,
    };
    let log_path = folder.server_log(&target.name);
    let relative_log = format!("{}/{}.log", crate::folder::SERVERS_DIR, target.name);
    let mut record = ServerRecord {
        command: launch_spec.argv.clone(),
        status: ServerStatus::Running,
        ready_s: None,
        startup_s: None,
        message: None,
        log_tail: None,
        log: relative_log,
    };
    let _ = writeln!(
        log,
        "target {}: launching {}",
        target.name,
        launch_spec.argv.join(" ")
    );
    let launched_at = Instant::now();
    let mut server = match launch::launch(&spec, &log_path, cancel).await {
        Ok(server) => server,
        Err(launch::LaunchError::Cancelled) => return Ok(Turn::Interrupted),
        // Someone else's server: measuring it would be a lie, and so
        // would every later setting on that port.
        Err(e @ launch::LaunchError::PortInUse { .. }) => {
            return Err(RunError::Usage(
                format!("target `{}`: {e}", target.name),
                Some(
                    "stop the server that listens there, or measure it as it is without `launch`"
                        .into(),
                ),
            ));
        }
        Err(e) => {
            let (message, tail) = split_tail(&e.to_string());
            let _ = writeln!(log, "target {}: failed to start: {message}", target.name);
            record.status = ServerStatus::FailedToStart;
            record.message = Some(message);
            record.log_tail = tail;
            folder.write_server_record(&target.name, &record)?;
            return Ok(Turn::Failed);
        }
    };
    record.ready_s = Some(server.ready_after().as_secs_f64());
    folder.write_server_record(&target.name, &record)?;

    // Ready is the engine's word; the first successful call is ours.
    let mut prepared = match prepare_target(target, experiment, log).await {
        Ok(p) => p,
        Err(e) => return failed_start(server, record, folder, &target.name, e, log).await,
    };
    let nonce = crate::hash::mix(invocation.content_nonce, PREFLIGHT_STREAM);
    if let Err(e) = preflight(&mut prepared, experiment, card, nonce, log).await {
        return failed_start(server, record, folder, &target.name, e, log).await;
    }
    record.startup_s = Some(launched_at.elapsed().as_secs_f64());
    folder.write_server_record(&target.name, &record)?;
    let _ = writeln!(
        log,
        "target {}: ready after {}, first call answered after {}",
        target.name,
        crate::format::duration_words(record.ready_s.unwrap_or_default()),
        crate::format::duration_words(record.startup_s.unwrap_or_default()),
    );
    announce(target, &prepared, log);

    let live = BTreeMap::from([(target.name.clone(), prepared)]);
    // The runs stop when the server dies: calls to a dead port would only
    // measure refusals until the card's end.
    let turn_cancel = cancel.child_token();
    let mut died = None;
    let outcome = {
        let cards = drive(
            experiment,
            full_plan,
            selected,
            folder,
            &live,
            invocation,
            request,
            &turn_cancel,
            log,
        );
        tokio::pin!(cards);
        loop {
            tokio::select! {
                outcome = &mut cards => break outcome,
                exit = server.exited(), if died.is_none() => {
                    died = Some(exit);
                    turn_cancel.cancel();
                }
            }
        }
    };
    shut_down(live).await;
    let tail = server.log_tail(LOG_TAIL_LINES);
    let stop = server.stop().await;
    let _ = writeln!(log, "target {}: {stop}", target.name);
    let turn = match (&died, cancel.is_cancelled()) {
        (Some(exit), _) => {
            let _ = writeln!(
                log,
                "target {}: the server died mid-card ({exit})",
                target.name
            );
            record.status = ServerStatus::Died;
            record.message = Some(format!("the server {exit} while its cards were measured"));
            record.log_tail = Some(tail);
            Turn::Failed
        }
        (None, true) => {
            record.status = ServerStatus::Interrupted;
            Turn::Interrupted
        }
        (None, false) => {
            record.status = ServerStatus::Stopped;
            Turn::Done
        }
    };
    folder.write_server_record(&target.name, &record)?;
    outcome?;
    Ok(turn)
}

/// A target that is not launched but measured in its turn (a setting of a
/// tuned sweep): prepared, driven, shut down.
#[allow(clippy::too_many_arguments)]
async fn in_process_turn(
    target: &Target,
    experiment: &Experiment,
    full_plan: &Plan,
    selected: &Plan,
    folder: &ResultsFolder,
    invocation: Invocation<'_>,
    request: &RunRequest,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<Turn, RunError> {
    let Some(card) = selected.cards.iter().find(|c| c.target == target.name) else {
        return Ok(Turn::Done);
    };
    let prepared = match virtual_target(target, experiment, request.virtual_time)? {
        Some(virtual_target) => prepare_virtual(target, virtual_target),
        None => {
            let mut prepared = prepare_target(target, experiment, log).await?;
            let nonce = crate::hash::mix(invocation.content_nonce, PREFLIGHT_STREAM);
            if let Err(e) = preflight(&mut prepared, experiment, card, nonce, log).await {
                shut_down(BTreeMap::from([(target.name.clone(), prepared)])).await;
                return Err(e);
            }
            prepared
        }
    };
    announce(target, &prepared, log);
    let live = BTreeMap::from([(target.name.clone(), prepared)]);
    let outcome = drive(
        experiment, full_plan, selected, folder, &live, invocation, request, cancel, log,
    )
    .await;
    shut_down(live).await;
    outcome?;
    Ok(if cancel.is_cancelled() {
        Turn::Interrupted
    } else {
        Turn::Done
    })
}

/// The server started but capcard could not measure it (its first call
/// failed, or was refused): stopped, recorded, and the sweep goes on.
async fn failed_start(
    server: launch::Launched,
    mut record: ServerRecord,
    folder: &ResultsFolder,
    target: &str,
    error: RunError,
    log: &mut (dyn Write + Send),
) -> Result<Turn, RunError> {
    let tail = server.log_tail(LOG_TAIL_LINES);
    let stop = server.stop().await;
    let _ = writeln!(log, "target {target}: failed to start: {error}; {stop}");
    record.status = ServerStatus::FailedToStart;
    record.message = Some(error.to_string());
    record.log_tail = Some(tail);
    folder.write_server_record(target, &record)?;
    Ok(Turn::Failed)
}

/// `LaunchError`'s message and the log's tail it quotes after a line break.
fn split_tail(message: &str) -> (String, Option<String>) {
    match message.split_once(":\n") {
        Some((head, tail)) => (head.to_string(), Some(tail.to_string())),
        None => (message.to_string(), None),
    }
}

/// The address of an endpoint target's server (host and port of its URL).
async fn endpoint_addr(target: &Target) -> Result<SocketAddr, RunError> {
    let TargetKind::Endpoint { base_url } = &target.kind else {
        return Err(RunError::Usage(
            format!(
                "target `{}` is a sim: there is nothing to launch",
                target.name
            ),
            None,
        ));
    };
    let usage = |why: &str| {
        RunError::Usage(
            format!(
                "target `{}`: cannot tell the launched server's port from {base_url}: {why}",
                target.name
            ),
            Some("write the endpoint as http://HOST:PORT/v1".into()),
        )
    };
    let (scheme, rest) = base_url
        .split_once("://")
        .ok_or_else(|| usage("no scheme"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{authority}:{port}")
    };
    let mut addrs = tokio::net::lookup_host(with_port.as_str())
        .await
        .map_err(|e| usage(&e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| usage("the host resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_error_splits_into_its_sentence_and_the_log() {
        let (message, tail) = split_tail(
            "the server exited with status 3 before it was ready; the end of its log:\nboom\n",
        );
        assert!(message.starts_with("the server exited"), "{message}");
        assert_eq!(tail.as_deref(), Some("boom\n"));
        assert_eq!(split_tail("no log").1, None);
    }
}
