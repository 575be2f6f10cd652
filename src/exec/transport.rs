//! Connections for calls. HTTP/1.1 by default, on a pool of our own with
//! one connection per call in flight, so every call knows whether its
//! connection is fresh or reused; HTTP/2 (multiplexed, through reqwest) only
//! when a target asks for it.
//!
//! Why our own pool: some servers (llama.cpp's `llama-server`) advertise
//! `Keep-Alive` and then close the connection after a streamed answer. A
//! client that reuses it writes the next request into a dead socket and reads
//! nothing back. The server never saw that request, so resending it once on a
//! fresh connection is safe and is not a second request — but only a pool
//! that knows the connection was reused can tell this case from a server that
//! accepted a fresh connection and dropped it (its failure, never retried).
//! reqwest's pool does not say whether a connection was reused.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::ExecError;
use super::record::ErrorClass;

type Sender = SendRequest<Full<Bytes>>;

/// How a run's calls reach the endpoint.
#[derive(Clone)]
pub(crate) enum Transport {
    /// HTTP/1.1, one connection per call in flight (the default).
    Http1(Arc<Http1Pool>),
    /// reqwest's client, which negotiates HTTP/2 where the server offers it.
    Http2(reqwest::Client),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Http1(pool) => f
                .debug_struct("Http1")
                .field("authority", &pool.authority)
                .finish(),
            Transport::Http2(_) => f.write_str("Http2"),
        }
    }
}

/// A response whose body is being read, on either transport.
pub(crate) enum Response {
    Http1 {
        status: u16,
        /// A refusal's `Retry-After` (read only off non-2xx answers).
        retry_after: Option<std::time::Duration>,
        body: Incoming,
        /// The connection, handed back to the pool once the body has ended.
        conn: Option<(Arc<Http1Pool>, Sender)>,
    },
    Http2(reqwest::Response),
}

/// A failure before any response byte arrived.
#[derive(Debug)]
pub(crate) struct SendFailure {
    pub class: ErrorClass,
    pub detail: String,
}

/// What a send produced: the response, and how many times a dead reused
/// connection was replaced before it.
pub(crate) struct Sent {
    pub response: Response,
    pub reconnects: u32,
    /// When the request went out again on a fresh connection.
    pub resent_at: Option<tokio::time::Instant>,
}

impl Transport {
    /// HTTP/1.1: connections opened so far; HTTP/2 does not say.
    pub fn connections_opened(&self) -> Option<u64> {
        match self {
            Transport::Http1(pool) => Some(pool.connections_opened()),
            Transport::Http2(_) => None,
        }
    }
}

impl Response {
    pub fn status(&self) -> u16 {
        match self {
            Response::Http1 { status, .. } => *status,
            Response::Http2(r) => r.status().as_u16(),
        }
    }

    /// How long a refusal asked the client to wait (`Retry-After`, or
    /// `retry-after-ms`); `None` on a success or without the header.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Response::Http1 { retry_after, .. } => *retry_after,
            Response::Http2(r) if !r.status().is_success() => retry_after_of(r.headers()),
            Response::Http2(_) => None,
        }
    }

    /// The next piece of the body; `Ok(None)` at its end. At the end, an
    /// HTTP/1.1 connection goes back to the pool.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        match self {
            Response::Http2(r) => r.chunk().await.map_err(|e| super::client::error_chain(&e)),
            Response::Http1 { body, conn, .. } => loop {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data()
                            && !data.is_empty()
                        {
                            return Ok(Some(data));
                        }
                    }
                    Some(Err(e)) => {
                        conn.take();
                        return Err(super::client::error_chain(&e));
                    }
                    None => {
                        if let Some((pool, sender)) = conn.take() {
                            pool.check_in(sender);
                        }
                        return Ok(None);
                    }
                }
            },
        }
    }
}

/// An HTTP/1.1 pool for one origin.
pub(crate) struct Http1Pool {
    host: String,
    port: u16,
    /// `host[:port]` for the `Host` header.
    authority: String,
    /// The request target, `/v1/chat/completions[?query]`.
    path_and_query: String,
    /// Every header but `Host`, the same on every call: built once.
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    idle: Mutex<Vec<Sender>>,
    connections_opened: AtomicU64,
}

impl Http1Pool {
    /// A pool for POSTs to `url` carrying `headers` (beside content type,
    /// accept and host).
    pub fn new(
        url: &reqwest::Url,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
    ) -> Result<Self, ExecError> {
        let bad = |reason: &str| ExecError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let host = url.host_str().ok_or_else(|| bad("no host"))?.to_string();
        let port = url.port_or_known_default().ok_or_else(|| bad("no port"))?;
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let tls = match url.scheme() {
            "https" => Some(tls_connector(&host)?),
            _ => None,
        };
        // An IPv6 literal comes bracketed from the URL; the socket wants it bare.
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let path_and_query = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let mut all_headers = vec![
            (
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            ),
            (
                http::header::ACCEPT,
                http::HeaderValue::from_static("text/event-stream"),
            ),
        ];
        all_headers.extend(headers);
        Ok(Http1Pool {
            host,
            port,
            authority,
            path_and_query,
            headers: all_headers,
            tls,
            idle: Mutex::new(Vec::new()),
            connections_opened: AtomicU64::new(0),
        })
    }

    /// Connections opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.connections_opened.load(Ordering::Relaxed)
    }

    fn check_in(&self, sender: Sender) {
        if !sender.is_closed()
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.push(sender);
        }
    }

    /// An idle connection (most recently used first), or `None`.
    async fn check_out_idle(&self) -> Option<Sender> {
        loop {
            let mut sender = self.idle.lock().ok()?.pop()?;
            if sender.is_closed() {
                continue;
            }
            // A connection that closes while we wait is simply not reused.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    async fn connect(&self) -> Result<Sender, SendFailure> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| connect_failure(&e, "connect"))?;
        let _ = tcp.set_nodelay(true);
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        let sender = match &self.tls {
            None => handshake(TokioIo::new(tcp)).await?,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| connect_failure(&e, "TLS handshake"))?;
                handshake(TokioIo::new(stream)).await?
            }
        };
        Ok(sender)
    }

    /// Send `body` as a POST; on a reused connection that dies before any
    /// response byte, once more on a fresh one.
    pub async fn send(self: &Arc<Self>, body: Bytes) -> Result<Sent, SendFailure> {
        let request = || {
            let mut builder = http::Request::post(self.path_and_query.as_str())
                .header(http::header::HOST, self.authority.as_str());
            for (name, value) in &self.headers {
                builder = builder.header(name, value.clone());
            }
            builder
                .body(Full::new(body.clone()))
                .map_err(|e| SendFailure {
                    class: ErrorClass::Connect,
                    detail: format!("cannot build the request: {e}"),
                })
        };
        let mut reconnects = 0;
        let mut resent_at = None;
        let (mut sender, reused) = match self.check_out_idle().await {
            Some(sender) => (sender, true),
            None => (self.connect().await?, false),
        };
        let response = match sender.send_request(request()?).await {
            Ok(response) => response,
            Err(e) if reused && died_before_answering(&e) => {
                // The server closed this kept-alive connection; it never read
                // the request. Once more, on a fresh connection.
                reconnects = 1;
                sender = self.connect().await?;
                resent_at = Some(tokio::time::Instant::now());
                sender
                    .send_request(request()?)
                    .await
                    .map_err(|e| no_response(&e, false))?
            }
            Err(e) => return Err(no_response(&e, reused)),
        };
        let (parts, body) = response.into_parts();
        // Only a refusal's headers are read: a success costs no lookup.
        let retry_after = if parts.status.is_success() {
            None
        } else {
            retry_after_of(&parts.headers)
        };
        Ok(Sent {
            response: Response::Http1 {
                status: parts.status.as_u16(),
                retry_after,
                body,
                conn: Some((Arc::clone(self), sender)),
            },
            reconnects,
            resent_at,
        })
    }
}

/// `retry-after-ms` (OpenAI, Azure: milliseconds) or `Retry-After`
/// (seconds or an HTTP date), read now.
pub(crate) fn retry_after_of(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    super::stream::parse_retry_after(
        text("retry-after"),
        text("retry-after-ms"),
        std::time::SystemTime::now(),
    )
}

async fn handshake<T>(io: T) -> Result<Sender, SendFailure>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| SendFailure {
            class: ErrorClass::Connect,
            detail: format!("HTTP handshake failed: {}", super::client::error_chain(&e)),
        })?;
    // The connection's own task: reads and writes for the sender until the
    // connection closes (dropped senders close it).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn tls_connector(
    host: &str,
) -> Result<
    (
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    ),
    ExecError,
> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let client_error = |e: &dyn std::fmt::Display| ExecError::Client(format!("TLS: {e}"));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| client_error(&e))?
        .with_platform_verifier()
        .map_err(|e| client_error(&e))?
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name =
        rustls::pki_types::ServerName::try_from(bare.to_string()).map_err(|e| client_error(&e))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

/// Whether a send error means the connection was already dead: closed or
/// reset before the response's first byte. Only then is the request known
/// not to have been read.
fn died_before_answering(error: &hyper::Error) -> bool {
    if error.is_canceled() || error.is_incomplete_message() || error.is_closed() {
        return true;
    }
    super::client::find_io_error(error).is_some_and(|e| {
        matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
        )
    })
}

/// Whether the OS refused a socket for lack of the client's own resources
/// (file descriptors, ephemeral ports, memory): the client's limit, not the
/// server's failure.
pub(crate) fn is_client_resource_error(error: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL (out of ephemeral ports).
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12 | 99))
        || error.kind() == io::ErrorKind::OutOfMemory
        || error.kind() == io::ErrorKind::AddrNotAvailable
}

fn connect_failure(error: &io::Error, what: &str) -> SendFailure {
    if is_client_resource_error(error) {
        SendFailure {
            class: ErrorClass::ClientLimit,
            detail: format!(
                "{what}: the client ran out of its own resources ({error}); \
                 raise `ulimit -n` or lower the load"
            ),
        }
    } else {
        SendFailure {
            class: ErrorClass::Connect,
            detail: format!("{what}: {error}"),
        }
    }
}

fn no_response(error: &hyper::Error, reused: bool) -> SendFailure {
    let chain = super::client::error_chain(error);
    let connection = if reused {
        "a reused connection"
    } else {
        "a fresh connection"
    };
    SendFailure {
        class: ErrorClass::BrokenStream,
        detail: super::stream::truncate_detail(&format!(
            "request failed before a response, on {connection}: {chain}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_resource_errors_are_told_apart() {
        assert!(is_client_resource_error(&io::Error::from_raw_os_error(24)));
        assert!(is_client_resource_error(&io::Error::from_raw_os_error(99)));
        assert!(!is_client_resource_error(&io::Error::from(
            io::ErrorKind::ConnectionRefused
        )));
    }

    #[test]
    fn pools_take_host_port_and_authority_from_the_url() {
        let url = reqwest::Url::parse("http://127.0.0.1:8000/v1/completions").unwrap();
        let pool = Http1Pool::new(&url, vec![]).unwrap();
        assert_eq!(
            (pool.host.as_str(), pool.port, pool.authority.as_str()),
            ("127.0.0.1", 8000, "127.0.0.1:8000")
        );
        assert_eq!(pool.path_and_query, "/v1/completions");
        let url = reqwest::Url::parse("http://[::1]/v1?k=1").unwrap();
        let pool = Http1Pool::new(&url, vec![]).unwrap();
        assert_eq!(pool.path_and_query, "/v1?k=1");
        assert_eq!(
            (pool.host.as_str(), pool.port, pool.authority.as_str()),
            ("::1", 80, "[::1]")
        );
    }
}
