//! A raw-TCP scripted server for connection behaviour that a framework
//! would not produce: it speaks just enough HTTP/1.1 to answer a streamed
//! chat completion, and then misbehaves as told.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy)]
pub enum Behaviour {
    /// Like llama-server: advertise `Keep-Alive: timeout=5, max=100`, stream
    /// a whole answer, then close the connection when the next request on it
    /// arrives, without reading it or answering.
    KeepAliveThenClose,
    /// Send the head and two content events, then drop the connection.
    DropMidStream,
}

#[derive(Default)]
pub struct RawState {
    /// Requests read whole (the server saw them).
    pub requests_read: AtomicUsize,
    /// Requests answered completely.
    pub answered: AtomicUsize,
    /// Connections on which a second request arrived and was dropped unread.
    pub closed_on_reuse: AtomicUsize,
    pub connections: AtomicUsize,
}

pub async fn start(behaviour: Behaviour, tokens: usize) -> (SocketAddr, Arc<RawState>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(RawState::default());
    let shared = Arc::clone(&state);
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let _ = socket.set_nodelay(true);
            shared.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(socket, behaviour, tokens, Arc::clone(&shared)));
        }
    });
    (addr, state)
}

/// Read one request's head and body; `false` at EOF.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.drain(..head_end + length);
    true
}

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

fn event(json: &str) -> Vec<u8> {
    chunk(&format!("data: {json}\n\n"))
}

fn content(i: usize) -> Vec<u8> {
    event(&format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"t{i} "}},"finish_reason":null}}]}}"#
    ))
}

async fn serve(mut socket: TcpStream, behaviour: Behaviour, tokens: usize, state: Arc<RawState>) {
    let mut buf = Vec::new();
    if !read_request(&mut socket, &mut buf).await {
        return;
    }
    state.requests_read.fetch_add(1, Ordering::SeqCst);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                keep-alive: timeout=5, max=100\r\nconnection: keep-alive\r\n\
                transfer-encoding: chunked\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    match behaviour {
        Behaviour::DropMidStream => {
            for i in 0..2 {
                let _ = socket.write_all(&content(i)).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            // Dropped here: the stream ends without [DONE] or a last chunk.
        }
        Behaviour::KeepAliveThenClose => {
            for i in 0..tokens {
                if socket.write_all(&content(i)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
            let usage = format!(
                r#"{{"choices":[],"usage":{{"prompt_tokens":16,"completion_tokens":{tokens},"total_tokens":{}}}}}"#,
                16 + tokens
            );
            let mut tail = event(finish);
            tail.extend(event(&usage));
            tail.extend(chunk("data: [DONE]\n\n"));
            tail.extend(b"0\r\n\r\n");
            if socket.write_all(&tail).await.is_err() {
                return;
            }
            state.answered.fetch_add(1, Ordering::SeqCst);
            // The next request on this connection is never read: wait for its
            // first bytes and close, as a server that had already decided to.
            let mut byte = [0u8; 1];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(5), socket.peek(&mut byte)).await
                && n > 0
            {
                state.closed_on_reuse.fetch_add(1, Ordering::SeqCst);
            }
            // Dropped here with the request unread (Linux answers it with a
            // reset), as a server that had already decided to close.
        }
    }
}
