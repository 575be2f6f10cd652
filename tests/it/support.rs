//! Helpers shared by the topic modules of this test binary.

use capcard::config::{ConfigError, SimFaults};
use capcard::sim::{SimConfig, SimServer, presets, start};
use serde_json::json;

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

/// The `tiny` simulated engine on an ephemeral loopback port.
pub async fn tiny_sim(faults: SimFaults) -> SimServer {
    let preset = presets::find("tiny").expect("tiny preset");
    let config = SimConfig::new(preset).with_faults(faults).with_seed(3);
    start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts")
}

/// `n` distinct words (one token each on the simulator), tagged by `tag`.
pub fn words(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 48 long streams on the tiny engine's 32 seats: 16 of them must wait.
/// The responses are returned open; dropping them disconnects.
pub async fn overload_tiny(
    client: &crate::support::web::Client,
    server: &SimServer,
) -> Vec<crate::support::web::Response> {
    let mut streams = Vec::new();
    for i in 0..48 {
        let resp = client
            .post(format!("{}/completions", server.base_url()))
            .json(&json!({"prompt": words(32, &format!("r{i}-")), "max_tokens": 1500, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        streams.push(resp);
    }
    streams
}

/// The few HTTP verbs the tests speak to servers, on capcard's own client
/// (the one every probe and scrape uses), in the builder style tests read
/// easily.
pub mod web {
    use bytes::Bytes;
    use capcard::exec::{HttpClient, HttpError, Streaming};
    use std::time::Duration;

    #[derive(Clone)]
    pub struct Client {
        inner: HttpClient,
    }

    impl Client {
        pub fn new() -> Client {
            Client {
                inner: HttpClient::new(Duration::from_secs(60)),
            }
        }

        /// capcard's client underneath.
        pub fn inner(&self) -> HttpClient {
            self.inner.clone()
        }

        pub fn get(&self, url: impl AsRef<str>) -> RequestBuilder {
            self.request(http::Method::GET, url)
        }

        pub fn post(&self, url: impl AsRef<str>) -> RequestBuilder {
            self.request(http::Method::POST, url)
        }

        fn request(&self, method: http::Method, url: impl AsRef<str>) -> RequestBuilder {
            RequestBuilder {
                client: self.inner.clone(),
                method,
                url: url.as_ref().to_string(),
                headers: Vec::new(),
                body: Bytes::new(),
            }
        }
    }

    /// `GET url` on a client of its own.
    pub async fn get(url: impl AsRef<str>) -> Result<Response, HttpError> {
        Client::new().get(url).send().await
    }

    pub struct RequestBuilder {
        client: HttpClient,
        method: http::Method,
        url: String,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        body: Bytes,
    }

    impl RequestBuilder {
        pub fn json(self, value: &impl serde::Serialize) -> Self {
            let body = serde_json::to_vec(value).expect("a JSON value");
            self.header("content-type", "application/json").body(body)
        }

        pub fn header(mut self, name: &str, value: &str) -> Self {
            self.headers.push((
                http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                http::HeaderValue::from_str(value).expect("a header value"),
            ));
            self
        }

        pub fn body(mut self, body: impl Into<Bytes>) -> Self {
            self.body = body.into();
            self
        }

        pub async fn send(self) -> Result<Response, HttpError> {
            self.client
                .open(self.method, &self.url, &self.headers, self.body)
                .await
                .map(|streaming| Response { streaming })
        }
    }

    pub struct Response {
        streaming: Streaming,
    }

    impl Response {
        pub fn status(&self) -> http::StatusCode {
            http::StatusCode::from_u16(self.streaming.status()).expect("a status code")
        }

        pub fn headers(&self) -> &http::HeaderMap {
            self.streaming.headers()
        }

        pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
            self.streaming.chunk().await
        }

        pub async fn bytes(self) -> Result<Bytes, HttpError> {
            self.streaming.bytes().await
        }

        pub async fn text(self) -> Result<String, HttpError> {
            self.bytes()
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        }

        pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, HttpError> {
            let bytes = self.bytes().await?;
            serde_json::from_slice(&bytes).map_err(|e| HttpError::Body(e.to_string()))
        }
    }
}
