//! Serving an HTTP router in the background: the simulator, the shard
//! coordinator and the tests' scripted servers all bind, serve and stop the
//! same way, here.
//!
//! A leaf: it imports nothing of the crate.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A router being served on a bound address, until [`Background::stop`].
#[derive(Debug)]
pub struct Background {
    /// The bound address (with the port the OS chose for `:0`).
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Bind `addr` (`127.0.0.1:0` for an ephemeral port) and serve `app` on the
/// current tokio runtime.
pub async fn start(addr: SocketAddr, app: axum::Router) -> std::io::Result<Background> {
    let listener = TcpListener::bind(addr).await?;
    spawn(listener, app)
}

/// Serve `app` on an already bound `listener`.
pub fn spawn(listener: TcpListener, app: axum::Router) -> std::io::Result<Background> {
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // Nagle's algorithm would hold each small SSE chunk until the client's
    // delayed ACK (tens of ms): every TTFT would carry it. vLLM's uvicorn
    // sets TCP_NODELAY too.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await
    });
    Ok(Background {
        addr,
        stop: Some(stop_tx),
        task,
    })
}

impl Background {
    /// Serve until the runtime ends, with nothing to stop it earlier: a
    /// test's scripted server, or a benchmark's. Returns the bound address.
    pub fn detach(mut self) -> SocketAddr {
        // Dropping the sender would read as a stop; forgetting it keeps the
        // graceful-shutdown future pending for the runtime's life.
        if let Some(stop) = self.stop.take() {
            std::mem::forget(stop);
        }
        self.addr
    }

    /// Stop accepting, let open connections finish, and wait for the server
    /// to end, at most `patience` (`None`: as long as it takes).
    pub async fn stop(mut self, patience: Option<Duration>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match patience {
            Some(patience) => {
                let _ = tokio::time::timeout(patience, &mut self.task).await;
            }
            None => {
                let _ = (&mut self.task).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    #[tokio::test]
    async fn serves_on_an_ephemeral_port_until_stopped() {
        let app = axum::Router::new().route("/ping", get(|| async { "pong" }));
        let server = start(SocketAddr::from(([127, 0, 0, 1], 0)), app)
            .await
            .expect("bind loopback");
        assert_ne!(server.addr.port(), 0);
        let addr = server.addr;
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        assert!(answer.ends_with("pong"), "{answer}");
        server.stop(Some(Duration::from_secs(5))).await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn a_detached_server_keeps_serving() {
        let app = axum::Router::new().route("/ping", get(|| async { "pong" }));
        let addr = start(SocketAddr::from(([127, 0, 0, 1], 0)), app)
            .await
            .expect("bind loopback")
            .detach();
        tokio::task::yield_now().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    }
}
