//! A model's own tokenizer, loaded (`tokenizer "tokenizer.json"` on a
//! target; cargo feature `tokenizer`): counting tokens and reading token
//! ids and offsets. Rendering prompt segments to an exact number of tokens
//! with it is the workload's job (`workload::tokenize`).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The tokenizers library when the feature is built in; without it no
/// [`PromptTokenizer`] can be made ([`PromptTokenizer::load`] says why).
#[cfg(feature = "tokenizer")]
type Engine = tokenizers::Tokenizer;
#[cfg(not(feature = "tokenizer"))]
type Engine = std::convert::Infallible;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("this capcard was built without the `tokenizer` feature")]
    FeatureMissing,
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path} is not a tokenizer.json the tokenizers library can load: {message}")]
    Parse { path: PathBuf, message: String },
}

/// `(group, tokens)` → a prefix segment's text at the start of a message, and its tokens.
pub(crate) type PrefixTexts = HashMap<(u32, u32), (Arc<str>, usize)>;

/// A loaded `tokenizer.json` and the prefix texts rendered with it.
pub struct PromptTokenizer {
    path: PathBuf,
    engine: Engine,
    /// `(group, tokens)` → the exact text of a prefix segment at the start of a message.
    /// Its token count is kept with it, as a fallback text is not exact.
    pub(crate) prefixes: Mutex<PrefixTexts>,
}

impl fmt::Debug for PromptTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptTokenizer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Two loaded tokenizers are the same when they came from the same file
/// (the model compares experiments, not vocabularies).
impl PartialEq for PromptTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl PromptTokenizer {
    /// Read and parse a `tokenizer.json`.
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let bytes = std::fs::read(path).map_err(|e| TokenizerError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::from_bytes(&bytes, path)
    }

    /// Parse `tokenizer.json` content; `path` names it in messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, TokenizerError> {
        Ok(PromptTokenizer {
            path: path.to_path_buf(),
            engine: engine_from_bytes(bytes, path)?,
            prefixes: Mutex::new(HashMap::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens in `text` (no special tokens added); `None` if the tokenizer fails on it.
    pub fn count(&self, text: &str) -> Option<usize> {
        encode_offsets(&self.engine, text).map(|offsets| offsets.len())
    }

    /// Token ids of `text` (no special tokens added).
    pub fn ids(&self, text: &str) -> Option<Vec<u32>> {
        encode_ids(&self.engine, text)
    }

    /// Byte offsets of each token of `text` in `text` (no special tokens added).
    pub fn offsets(&self, text: &str) -> Option<Vec<(usize, usize)>> {
        encode_offsets(&self.engine, text)
    }
}

#[cfg(feature = "tokenizer")]
fn engine_from_bytes(bytes: &[u8], path: &Path) -> Result<Engine, TokenizerError> {
    tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(not(feature = "tokenizer"))]
fn engine_from_bytes(_bytes: &[u8], _path: &Path) -> Result<Engine, TokenizerError> {
    Err(TokenizerError::FeatureMissing)
}

/// Byte offsets of each token of `text` in `text`.
#[cfg(feature = "tokenizer")]
fn encode_offsets(engine: &Engine, text: &str) -> Option<Vec<(usize, usize)>> {
    engine
        .encode(text, false)
        .ok()
        .map(|encoding| encoding.get_offsets().to_vec())
}

#[cfg(not(feature = "tokenizer"))]
fn encode_offsets(engine: &Engine, _text: &str) -> Option<Vec<(usize, usize)>> {
    match *engine {}
}

#[cfg(feature = "tokenizer")]
fn encode_ids(engine: &Engine, text: &str) -> Option<Vec<u32>> {
    engine
        .encode(text, false)
        .ok()
        .map(|encoding| encoding.get_ids().to_vec())
}

#[cfg(not(feature = "tokenizer"))]
fn encode_ids(engine: &Engine, _text: &str) -> Option<Vec<u32>> {
    match *engine {}
}
