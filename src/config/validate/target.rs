//! Rules on an endpoint target: its URL, its key's variable, its timeout.

use std::time::Duration;

use super::*;

/// `endpoint`: an http(s) base URL with a host.
pub(crate) fn check_endpoint(url: &str) -> Vec<Issue> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host_ok = rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !host.contains(char::is_whitespace)
    });
    if host_ok {
        Vec::new()
    } else {
        vec![
            Issue::new(At::Arg(0), format!("`{url}` is not an http(s) URL"))
                .help("give the OpenAI-compatible base URL, e.g. \"http://127.0.0.1:8000/v1\""),
        ]
    }
}

/// `api-key-env`: the *name* of an environment variable, never a key.
pub(crate) fn check_api_key_env(name: &str) -> Vec<Issue> {
    const KEY_HELP: &str = "give the name of the environment variable, e.g. OPENAI_API_KEY; the key itself never belongs in an experiment file";
    const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "hf_", "gsk_", "xai-", "Bearer "];
    let has_digit = name.chars().any(|c| c.is_ascii_digit());
    let has_lower = name.chars().any(|c| c.is_ascii_lowercase());
    // Variable names are words joined by `_` (OPENAI_API_KEY); a long run of
    // lowercase letters and digits without one looks like a token.
    let looks_random = name.len() >= 20 && has_digit && has_lower && !name.contains('_');
    if KEY_PREFIXES.iter().any(|p| name.starts_with(p)) || looks_random {
        return vec![
            Issue::new(
                At::Arg(0),
                "this looks like an API key, not the name of an environment variable",
            )
            .help(KEY_HELP),
        ];
    }
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid_name {
        Vec::new()
    } else {
        vec![
            Issue::new(
                At::Arg(0),
                format!("`{name}` is not a valid environment variable name"),
            )
            .help(KEY_HELP),
        ]
    }
}

/// `timeout`: a per-request timeout of zero would fail every request.
pub(crate) fn check_timeout(timeout: Duration) -> Vec<Issue> {
    if timeout.is_zero() {
        vec![
            Issue::new(At::Value, "`timeout` must be greater than 0")
                .help("e.g. `timeout \"120s\"`"),
        ]
    } else {
        Vec::new()
    }
}
