//! Connections, for the calls that are measured and for every other request
//! capcard sends (probes, scrapes, the coordinator's protocol): one HTTP
//! stack, on hyper. HTTP/1.1 by default, on a pool of our own with one
//! connection per call in flight, so every call knows whether its
//! connection is fresh or reused; HTTP/2 (one multiplexed connection) only
//! when a target asks for it.
//!
//! Why our own pool: some servers (llama.cpp's `llama-server`) advertise
//! `Keep-Alive` and then close the connection after a streamed answer. A
//! client that reuses it writes the next request into a dead socket and reads
//! nothing back. The server never saw that request, so resending it once on a
//! fresh connection is safe and is not a second request — but only a pool
//! that knows the connection was reused can tell this case from a server that
//! accepted a fresh connection and dropped it (its failure, never retried).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::ExecError;
use super::record::ErrorClass;

type Sender = http1::SendRequest<Full<Bytes>>;
type Sender2 = http2::SendRequest<Full<Bytes>>;

/// An `http://` or `https://` URL, parsed once into what a connection and
/// a request need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    text: String,
    https: bool,
    /// Bare, as the socket wants it (`::1`, not `[::1]`).
    host: String,
    port: u16,
    /// `host[:port]` for the `Host` header.
    authority: String,
    /// `/v1/chat/completions[?query]`.
    path_and_query: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let uri: http::Uri = text
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(format!("scheme `{other}` is not http or https")),
            None => return Err("no scheme: give http:// or https://".to_string()),
        };
        let authority = uri.authority().ok_or("no host")?;
        if authority.as_str().contains('@') {
            return Err(
                "credentials in the URL are not sent; use `api-key-env` or `header`".to_string(),
            );
        }
        let host = authority.host();
        if host.is_empty() {
            return Err("no host".to_string());
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_string(),
            Some(p) => p.to_string(),
        };
        Ok(Url {
            text: text.to_string(),
            https,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            authority: authority.as_str().to_string(),
            path_and_query,
        })
    }

    /// `base` + `/` + `path`.
    pub fn join(base: &str, path: &str) -> Result<Url, String> {
        Url::parse(&format!(
            "{}/{}",
            base.trim_end_matches('/'),
            path.trim_start_matches('/')
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_https(&self) -> bool {
        self.https
    }

    /// `scheme://authority`: what a pool of connections is for.
    fn origin_key(&self) -> String {
        format!(
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.authority
        )
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// How a run's calls reach the endpoint.
#[derive(Clone)]
pub(crate) enum Transport {
    /// HTTP/1.1, one connection per call in flight (the default).
    Http1(Arc<Route>),
    /// HTTP/2: one connection, its streams multiplexed.
    Http2(Arc<Http2Route>),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Http1(route) => f
                .debug_struct("Http1")
                .field("authority", &route.pool.origin.authority)
                .finish(),
            Transport::Http2(route) => f
                .debug_struct("Http2")
                .field("authority", &route.origin.authority)
                .finish(),
        }
    }
}

/// A response whose body is being read.
pub(crate) struct Response {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    /// An HTTP/1.1 connection, handed back to its pool once the body has ended.
    conn: Option<(Arc<Http1Pool>, Sender)>,
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
    /// The transport for POSTs to `url` with `headers` (beside content
    /// type, accept and host), built once for every call of a run.
    pub fn new(
        url: &Url,
        http2: bool,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
    ) -> Result<Transport, ExecError> {
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
        Ok(if http2 {
            Transport::Http2(Arc::new(Http2Route {
                origin: Origin::new(url, Alpn::H2)?,
                path_and_query: url.path_and_query.clone(),
                headers: all_headers,
                sender: tokio::sync::Mutex::new(None),
            }))
        } else {
            Transport::Http1(Arc::new(Route {
                pool: Arc::new(Http1Pool::new(url)?),
                path_and_query: url.path_and_query.clone(),
                headers: all_headers,
            }))
        })
    }

    /// HTTP/1.1: connections opened so far; HTTP/2 does not say.
    pub fn connections_opened(&self) -> Option<u64> {
        match self {
            Transport::Http1(route) => Some(route.pool.connections_opened()),
            Transport::Http2(_) => None,
        }
    }

    /// Send `body` as a POST on the run's route.
    pub async fn send(&self, body: Bytes) -> Result<Sent, SendFailure> {
        match self {
            Transport::Http1(route) => route.send(body).await,
            Transport::Http2(route) => route.send(body).await,
        }
    }
}

impl Response {
    pub fn status(&self) -> u16 {
        self.status
    }

    /// How long a refusal asked the client to wait (`Retry-After`, or
    /// `retry-after-ms`); `None` on a success or without the header.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        if (200..300).contains(&self.status) {
            None
        } else {
            retry_after_of(&self.headers)
        }
    }

    /// The next piece of the body; `Ok(None)` at its end. At the end, an
    /// HTTP/1.1 connection goes back to the pool.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        return Ok(Some(data));
                    }
                }
                Some(Err(e)) => {
                    self.conn.take();
                    return Err(error_chain(&e));
                }
                None => {
                    if let Some((pool, sender)) = self.conn.take() {
                        pool.check_in(sender);
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// Which protocol a TLS connection offers (ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alpn {
    Http1,
    H2,
}

/// Where connections go: host, port, and TLS for `https`.
struct Origin {
    host: String,
    port: u16,
    authority: String,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

/// A connection's byte stream, plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Origin {
    fn new(url: &Url, alpn: Alpn) -> Result<Origin, ExecError> {
        Ok(Origin {
            host: url.host.clone(),
            port: url.port,
            authority: url.authority.clone(),
            tls: if url.https {
                Some(tls_connector(&url.host, alpn)?)
            } else {
                None
            },
        })
    }

    async fn open(&self) -> Result<Stream, SendFailure> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| connect_failure(&e, "connect"))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some((connector, name)) => connector
                .connect(name.clone(), tcp)
                .await
                .map(|tls| Stream::Tls(Box::new(tls)))
                .map_err(|e| connect_failure(&e, "TLS handshake")),
        }
    }

    fn request(
        &self,
        method: http::Method,
        path_and_query: &str,
        headers: &[(http::HeaderName, http::HeaderValue)],
        body: Bytes,
    ) -> Result<http::Request<Full<Bytes>>, SendFailure> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(http::header::HOST, self.authority.as_str());
        for (name, value) in headers {
            builder = builder.header(name, value.clone());
        }
        builder.body(Full::new(body)).map_err(|e| SendFailure {
            class: ErrorClass::Connect,
            detail: format!("cannot build the request: {e}"),
        })
    }
}

/// The path and headers every call of a run sends, on a pool.
pub(crate) struct Route {
    pool: Arc<Http1Pool>,
    path_and_query: String,
    /// Every header but `Host`, the same on every call: built once.
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl Route {
    async fn send(&self, body: Bytes) -> Result<Sent, SendFailure> {
        self.pool
            .send(|| {
                self.pool.origin.request(
                    http::Method::POST,
                    &self.path_and_query,
                    &self.headers,
                    body.clone(),
                )
            })
            .await
    }
}

/// An HTTP/1.1 pool for one origin.
pub(crate) struct Http1Pool {
    origin: Origin,
    idle: Mutex<Vec<Sender>>,
    connections_opened: AtomicU64,
}

impl Http1Pool {
    fn new(url: &Url) -> Result<Self, ExecError> {
        Ok(Http1Pool {
            origin: Origin::new(url, Alpn::Http1)?,
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
        let stream = self.origin.open().await?;
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        match stream {
            Stream::Plain(tcp) => handshake(TokioIo::new(tcp)).await,
            Stream::Tls(tls) => handshake(TokioIo::new(*tls)).await,
        }
    }

    /// Send the request `request` builds; on a reused connection that dies
    /// before any response byte, once more on a fresh one.
    async fn send(
        self: &Arc<Self>,
        request: impl Fn() -> Result<http::Request<Full<Bytes>>, SendFailure>,
    ) -> Result<Sent, SendFailure> {
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
        Ok(Sent {
            response: Response {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
                conn: Some((Arc::clone(self), sender)),
            },
            reconnects,
            resent_at,
        })
    }
}

/// HTTP/2 calls: one connection for the run, opened on the first call and
/// again only if the server closes it.
pub(crate) struct Http2Route {
    origin: Origin,
    path_and_query: String,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    sender: tokio::sync::Mutex<Option<Sender2>>,
}

impl Http2Route {
    /// The open connection, or a new one; the lock makes concurrent first
    /// calls share one connection.
    async fn sender(&self) -> Result<Sender2, SendFailure> {
        let mut slot = self.sender.lock().await;
        if let Some(sender) = slot.as_ref()
            && !sender.is_closed()
        {
            return Ok(sender.clone());
        }
        let sender = match self.origin.open().await? {
            Stream::Plain(tcp) => handshake2(TokioIo::new(tcp)).await?,
            Stream::Tls(tls) => {
                let offered_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                if !offered_h2 {
                    return Err(SendFailure {
                        class: ErrorClass::Connect,
                        detail: format!(
                            "{} did not agree to HTTP/2 in the TLS handshake (ALPN); \
                             drop `http2 #true` from the target",
                            self.origin.authority
                        ),
                    });
                }
                handshake2(TokioIo::new(*tls)).await?
            }
        };
        *slot = Some(sender.clone());
        Ok(sender)
    }

    async fn send(&self, body: Bytes) -> Result<Sent, SendFailure> {
        let mut sender = self.sender().await?;
        if sender.ready().await.is_err() {
            // Closed between the check and the call: one new connection.
            self.sender.lock().await.take();
            sender = self.sender().await?;
        }
        let request = self.origin.request(
            http::Method::POST,
            &self.path_and_query,
            &self.headers,
            body,
        )?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| no_response(&e, true))?;
        let (parts, body) = response.into_parts();
        Ok(Sent {
            response: Response {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
                conn: None,
            },
            reconnects: 0,
            resent_at: None,
        })
    }
}

/// One-shot requests (model lists, probes, tokenize, `/metrics`, the
/// coordinator's protocol): kept-alive HTTP/1.1 connections per origin,
/// headers sent with every request, a deadline on each whole exchange.
#[derive(Clone)]
pub struct HttpClient {
    timeout: std::time::Duration,
    headers: Arc<Vec<(http::HeaderName, http::HeaderValue)>>,
    pools: Arc<Mutex<std::collections::HashMap<String, Arc<Http1Pool>>>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A whole answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// An answer whose body is still arriving.
pub struct Streaming {
    response: Response,
}

impl Streaming {
    pub fn status(&self) -> u16 {
        self.response.status
    }

    pub fn headers(&self) -> &http::HeaderMap {
        &self.response.headers
    }

    /// The next piece of the body; `Ok(None)` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        self.response.chunk().await.map_err(HttpError::Body)
    }

    /// The rest of the body.
    pub async fn bytes(mut self) -> Result<Bytes, HttpError> {
        let mut all = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            all.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(all))
    }
}

/// Why a one-shot request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad URL `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{0}")]
    Send(String),
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("the answer broke off: {0}")]
    Body(String),
}

impl HttpClient {
    /// A client whose every exchange must finish within `timeout`.
    pub fn new(timeout: std::time::Duration) -> HttpClient {
        HttpClient {
            timeout,
            headers: Arc::new(Vec::new()),
            pools: Arc::default(),
        }
    }

    /// `headers` go with every request (a key, a gateway's headers).
    pub fn with_headers(mut self, headers: Vec<(http::HeaderName, http::HeaderValue)>) -> Self {
        self.headers = Arc::new(headers);
        self
    }

    /// A client with this one's pools and headers and another deadline.
    pub fn with_timeout(&self, timeout: std::time::Duration) -> HttpClient {
        HttpClient {
            timeout,
            ..self.clone()
        }
    }

    pub async fn get(&self, url: &str) -> Result<Reply, HttpError> {
        self.exchange(http::Method::GET, url, &[], Bytes::new())
            .await
    }

    pub async fn post(
        &self,
        url: &str,
        content_type: &'static str,
        body: impl Into<Bytes>,
    ) -> Result<Reply, HttpError> {
        let headers = [(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        )];
        self.exchange(http::Method::POST, url, &headers, body.into())
            .await
    }

    pub async fn post_json(
        &self,
        url: &str,
        value: &serde_json::Value,
    ) -> Result<Reply, HttpError> {
        self.post(url, "application/json", value.to_string()).await
    }

    /// The request and its whole answer, within the client's deadline.
    pub async fn exchange(
        &self,
        method: http::Method,
        url: &str,
        headers: &[(http::HeaderName, http::HeaderValue)],
        body: Bytes,
    ) -> Result<Reply, HttpError> {
        let whole = async {
            let mut streaming = self.open(method, url, headers, body).await?;
            let status = streaming.status();
            let headers = std::mem::take(&mut streaming.response.headers);
            let body = streaming.bytes().await?;
            Ok(Reply {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(self.timeout, whole)
            .await
            .map_err(|_| HttpError::Timeout(self.timeout))?
    }

    /// Send a request and return as soon as its head arrives; the body is
    /// read by the caller, without the client's deadline.
    pub async fn open(
        &self,
        method: http::Method,
        url: &str,
        headers: &[(http::HeaderName, http::HeaderValue)],
        body: Bytes,
    ) -> Result<Streaming, HttpError> {
        let url = Url::parse(url).map_err(|reason| HttpError::BadUrl {
            url: url.to_string(),
            reason,
        })?;
        let pool = self.pool(&url)?;
        let all: Vec<_> = self.headers.iter().chain(headers).cloned().collect();
        let send = pool.send(|| {
            pool.origin
                .request(method.clone(), &url.path_and_query, &all, body.clone())
        });
        let sent = tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| HttpError::Timeout(self.timeout))?
            .map_err(|failure| HttpError::Send(failure.detail))?;
        Ok(Streaming {
            response: sent.response,
        })
    }

    fn pool(&self, url: &Url) -> Result<Arc<Http1Pool>, HttpError> {
        let mut pools = self
            .pools
            .lock()
            .map_err(|_| HttpError::Send("the connection pool is poisoned".into()))?;
        if let Some(pool) = pools.get(&url.origin_key()) {
            return Ok(Arc::clone(pool));
        }
        let pool = Arc::new(Http1Pool::new(url).map_err(|e| HttpError::Send(e.to_string()))?);
        pools.insert(url.origin_key(), Arc::clone(&pool));
        Ok(pool)
    }
}

/// An error and its causes, `a: b: c` ("error sending request: connection refused").
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(crate) fn find_io_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a std::io::Error> {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        source = e.source();
    }
    None
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
    let (sender, connection) = http1::handshake(io).await.map_err(|e| SendFailure {
        class: ErrorClass::Connect,
        detail: format!("HTTP handshake failed: {}", error_chain(&e)),
    })?;
    // The connection's own task: reads and writes for the sender until the
    // connection closes (dropped senders close it).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn handshake2<T>(io: T) -> Result<Sender2, SendFailure>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| SendFailure {
            class: ErrorClass::Connect,
            detail: format!("HTTP/2 handshake failed: {}", error_chain(&e)),
        })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn tls_connector(
    host: &str,
    alpn: Alpn,
) -> Result<
    (
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    ),
    ExecError,
> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let client_error = |e: &dyn std::fmt::Display| ExecError::Client(format!("TLS: {e}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| client_error(&e))?
        .with_platform_verifier()
        .map_err(|e| client_error(&e))?
        .with_no_client_auth();
    config.alpn_protocols = match alpn {
        Alpn::Http1 => vec![b"http/1.1".to_vec()],
        Alpn::H2 => vec![b"h2".to_vec()],
    };
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| client_error(&e))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

/// Whether a send error means the connection was already dead: closed or
/// reset before the response's first byte. Only then is the request known
/// not to have been read.
fn died_before_answering(error: &hyper::Error) -> bool {
    if error.is_canceled() || error.is_incomplete_message() || error.is_closed() {
        return true;
    }
    find_io_error(error).is_some_and(|e| {
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
    let chain = error_chain(error);
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
    fn urls_give_host_port_authority_and_path() {
        let url = Url::parse("http://127.0.0.1:8000/v1/completions").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.authority.as_str()),
            ("127.0.0.1", 8000, "127.0.0.1:8000")
        );
        assert_eq!(url.path_and_query, "/v1/completions");
        let url = Url::parse("http://[::1]/v1?k=1").unwrap();
        assert_eq!(url.path_and_query, "/v1?k=1");
        assert_eq!(
            (url.host.as_str(), url.port, url.authority.as_str()),
            ("::1", 80, "[::1]")
        );
        let url = Url::parse("https://api.example.com").unwrap();
        assert_eq!((url.port, url.path_and_query.as_str()), (443, "/"));
        assert!(url.is_https());
        assert_eq!(
            Url::join("http://h:1/v1/", "chat/completions")
                .unwrap()
                .path_and_query,
            "/v1/chat/completions"
        );
    }

    #[test]
    fn urls_that_cannot_be_called_are_refused() {
        assert!(Url::parse("ftp://h/v1").unwrap_err().contains("ftp"));
        assert!(Url::parse("127.0.0.1:8000").is_err());
        assert!(
            Url::parse("http://user:pw@h/v1")
                .unwrap_err()
                .contains("api-key-env")
        );
        assert!(Url::parse("not a url").is_err());
    }
}
