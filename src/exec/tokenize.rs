//! The server's own tokenizer, through its tokenize endpoint: vLLM and
//! SGLang (`POST /tokenize {"model", "prompt"}`), llama.cpp (`POST /tokenize
//! {"content"}`) and TGI (`POST /tokenize {"inputs"}`) all have one. Used
//! once per target, before any run, to find which of the prompt words the
//! server counts as exactly one token ([`WordList`]), so text prompts have
//! exact lengths without a local `tokenizer.json`.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::ExecError;
use crate::workload::prompt::{VOCABULARY, WordList};

/// Parallel requests while calibrating: enough to take ~1 s on loopback.
const CALIBRATION_CONCURRENCY: usize = 16;

/// The request dialects tried, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// vLLM, SGLang: `{"model", "prompt", "add_special_tokens": false}`.
    Prompt,
    /// llama.cpp: `{"content", "add_special": false}`.
    Content,
    /// TGI: `{"inputs", "add_special_tokens": false}` → an array of tokens.
    Inputs,
}

/// A server's tokenize endpoint that answered.
#[derive(Debug, Clone)]
pub struct TokenizeEndpoint {
    client: super::transport::HttpClient,
    url: String,
    model: String,
    dialect: Dialect,
}

/// What calibration found, for the run log and the card.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub words: WordList,
    /// `POST http://…/tokenize`.
    pub endpoint: String,
    /// Sample prompts of known length re-counted by the server: (planned, counted).
    pub samples: Vec<(usize, usize)>,
}

/// Tokens in a tokenize answer of any known shape.
fn count_of(answer: &Value) -> Option<usize> {
    if let Some(tokens) = answer.get("tokens").and_then(Value::as_array) {
        return Some(tokens.len());
    }
    if let Some(n) = answer.get("count").and_then(Value::as_u64) {
        return Some(n as usize);
    }
    answer.as_array().map(Vec::len)
}

impl TokenizeEndpoint {
    /// The endpoint under `base_url` (its `/v1` stripped), if one answers.
    pub async fn find(
        base_url: &str,
        model: &str,
        api_key: Option<&str>,
        timeout: Duration,
    ) -> Result<Option<TokenizeEndpoint>, ExecError> {
        let root = base_url
            .trim_end_matches('/')
            .trim_end_matches("/v1")
            .to_string();
        let client = super::client::probe_client(api_key, &[], timeout)?;
        for dialect in [Dialect::Prompt, Dialect::Content, Dialect::Inputs] {
            let endpoint = TokenizeEndpoint {
                client: client.clone(),
                url: format!("{root}/tokenize"),
                model: model.to_string(),
                dialect,
            };
            // " the" is one or two tokens everywhere; zero means the field was ignored.
            if endpoint.count(" the").await.is_some_and(|n| n > 0) {
                return Ok(Some(endpoint));
            }
        }
        Ok(None)
    }

    /// Tokens in `text`, no special tokens added; `None` on any failure.
    pub async fn count(&self, text: &str) -> Option<usize> {
        let body = match self.dialect {
            Dialect::Prompt => {
                json!({"model": self.model, "prompt": text, "add_special_tokens": false})
            }
            Dialect::Content => json!({"content": text, "add_special": false}),
            Dialect::Inputs => json!({"inputs": text, "add_special_tokens": false}),
        };
        let reply = self.client.post_json(&self.url, &body).await.ok()?;
        if !reply.is_success() {
            return None;
        }
        let answer: Value = reply.json().ok()?;
        count_of(&answer)
    }

    /// Count every prompt word, keep the single-token ones, and re-count a
    /// few rendered samples to show how exact the list is.
    ///
    /// A word is counted *after* an anchor word, as the difference, because
    /// that is how it appears in a prompt: SentencePiece tokenizers (llama.cpp)
    /// prepend a space to a text on its own, which would make every word
    /// look like two tokens.
    pub async fn calibrate(&self) -> Option<Calibration> {
        const ANCHOR: &str = " the";
        let anchor = self.count(ANCHOR).await?;
        let counts: Vec<Option<usize>> = futures_util::stream::iter(VOCABULARY.iter())
            .map(|word| async move {
                let with = self.count(&format!("{ANCHOR}{word}")).await?;
                with.checked_sub(anchor)
            })
            .buffered(CALIBRATION_CONCURRENCY)
            .collect()
            .await;
        let words = WordList::single_token_words(&counts)?;
        let mut samples = Vec::new();
        for (key, tokens) in [(1u64, 64u32), (2, 300), (3, 1000)] {
            let text = words.render_text(&[crate::workload::Segment::Unique { key, tokens }]);
            samples.push((tokens as usize, self.count(&text).await?));
        }
        Some(Calibration {
            words,
            endpoint: format!("POST {}", self.url),
            samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_every_engine_are_counted() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(
            count_of(&v(
                r#"{"count":2,"max_model_len":4096,"tokens":[1,168],"token_strs":null}"#
            )),
            Some(2)
        );
        assert_eq!(count_of(&v(r#"{"tokens":[5,6,7]}"#)), Some(3));
        assert_eq!(
            count_of(&v(r#"[{"id":1,"text":"a","start":0,"stop":1}]"#)),
            Some(1)
        );
        assert_eq!(count_of(&v(r#"{"error":"no"}"#)), None);
    }
}
