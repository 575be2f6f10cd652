//! `tokenizer "tokenizer.json"` on a target: the config accepts a real file
//! and reports a missing or malformed one at its path string; with the
//! tokenizer, rendered prompts are exactly their planned size and shared
//! prefixes stay byte-identical. Uses `tests/data/tokenizer-small.json`, a
//! hand-made byte-level BPE (256 bytes + 20 merges) in which most words are
//! several tokens, so the word approximation would be far off.

use std::path::{Path, PathBuf};

use capcard::config;

use super::support::render;

fn small_tokenizer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-small.json")
}

/// An experiment in a fresh folder naming `tokenizer_line`'s path relative to it.
fn experiment(tokenizer_line: &str, workload: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(small_tokenizer(), dir.path().join("tokenizer.json")).unwrap();
    std::fs::write(dir.path().join("not-a-tokenizer.json"), "{\"vocab\": 3}\n").unwrap();
    let path = dir.path().join("exp.kdl");
    std::fs::write(
        &path,
        format!(
            "target \"gpu\" {{ endpoint \"http://127.0.0.1:8000/v1\"; {tokenizer_line} }}\n{workload}\nclosed {{ concurrency 1; duration \"5s\" }}\n"
        ),
    )
    .unwrap();
    (dir, path)
}

const CHAT: &str = "workload \"chat\" { input-tokens fixed 100; output-tokens fixed 10 }";

#[test]
fn tokenizer_on_a_workload_points_to_the_target() {
    let err = config::parse(
        "target \"sim\" { sim tiny }\nworkload \"w\" { input-tokens fixed 1; output-tokens fixed 1; tokenizer \"t.json\" }\nclosed { concurrency 1; duration \"5s\" }\n",
        Path::new("w.kdl"),
    )
    .unwrap_err();
    let text = render(&err);
    assert!(
        text.contains("`tokenizer` is a property of the model served"),
        "{text}"
    );
}

#[cfg(not(feature = "tokenizer"))]
#[test]
fn without_the_feature_the_build_says_so() {
    let (_dir, path) = experiment("tokenizer \"tokenizer.json\"", CHAT);
    insta::assert_snapshot!(
        "without_feature",
        render(&config::load(&path).unwrap_err()).replace(&path.display().to_string(), "exp.kdl")
    );
}

#[cfg(feature = "tokenizer")]
mod with_feature {
    use std::sync::Arc;

    use capcard::config::{self, Api};
    use capcard::exec::{CompletionsPrompt, Prompt, RequestSource, WorkloadSource};
    use capcard::workload::tokenize::PromptTokenizer;
    use capcard::workload::{Segment, TaskSpec};

    use super::*;

    #[test]
    fn a_tokenizer_file_loads_relative_to_the_experiment() {
        let (dir, path) = experiment("tokenizer \"tokenizer.json\"", CHAT);
        let experiment = config::load(&path).unwrap();
        let spec = experiment.targets[0].tokenizer.as_ref().unwrap();
        assert_eq!(spec.path, dir.path().join("tokenizer.json"));
        let loaded = spec.loaded.as_ref().unwrap();
        // "Ġthe" is one merged token, "Ġcat" three (Ġc, a, t).
        assert_eq!(loaded.count(" the cat"), Some(4));
    }

    #[test]
    fn missing_and_malformed_files_are_reported_at_the_path() {
        for (line, name) in [
            ("tokenizer \"missing.json\"", "missing"),
            ("tokenizer \"not-a-tokenizer.json\"", "malformed"),
        ] {
            let (dir, path) = experiment(line, CHAT);
            let text = render(&config::load(&path).unwrap_err())
                .replace(&format!("{}/", dir.path().display()), "");
            // The OS error text varies by platform: keep the snapshot to our part.
            let text = text.replace("No such file or directory (os error 2)", "<os error>");
            insta::assert_snapshot!(name, text);
        }
    }

    fn source_for(
        workload: &str,
        api: Api,
        prompt: CompletionsPrompt,
    ) -> (WorkloadSource, Arc<PromptTokenizer>) {
        let (_dir, path) = experiment("tokenizer \"tokenizer.json\"", workload);
        let experiment = config::load(&path).unwrap();
        let tokenizer = experiment.targets[0]
            .tokenizer
            .as_ref()
            .unwrap()
            .loaded
            .clone()
            .unwrap();
        let source = WorkloadSource::new(&experiment.workloads[0], 7, api, prompt)
            .with_tokenizer(Some(Arc::clone(&tokenizer)));
        (source, tokenizer)
    }

    fn single(source: &WorkloadSource, index: u64) -> capcard::workload::CallSpec {
        match source.task(index).spec {
            TaskSpec::Single(call) => call,
            other => panic!("expected a single call, got {other:?}"),
        }
    }

    #[test]
    fn chat_prompts_are_exactly_their_planned_tokens() {
        let workload =
            "workload \"chat\" { input-tokens uniform min=20 max=400; output-tokens fixed 10 }";
        let (source, tokenizer) = source_for(workload, Api::Chat, CompletionsPrompt::Text);
        for index in 0..20 {
            let call = single(&source, index);
            let Prompt::Chat(messages) = source.render(&call) else {
                panic!("chat target renders chat messages");
            };
            let encoded: usize = messages
                .iter()
                .map(|m| tokenizer.count(&m.content).unwrap())
                .sum();
            assert_eq!(encoded, call.input_tokens as usize, "task {index}");
        }
    }

    #[test]
    fn a_100_token_segment_encodes_to_100_tokens() {
        let tokenizer = PromptTokenizer::load(&small_tokenizer()).unwrap();
        for key in 0..20 {
            let text = tokenizer.render_text(&[Segment::Unique { key, tokens: 100 }]);
            assert_eq!(tokenizer.count(&text), Some(100), "key {key}");
        }
    }

    #[test]
    fn shared_prefixes_are_byte_identical_across_tasks_of_a_group() {
        let workload = "workload \"rag\" { input-tokens fixed 300; output-tokens fixed 10; shared-prefix tokens=120 groups=1 }";
        let (source, tokenizer) = source_for(workload, Api::Chat, CompletionsPrompt::Text);
        let mut systems = Vec::new();
        for index in 0..6 {
            let call = single(&source, index);
            let Prompt::Chat(messages) = source.render(&call) else {
                panic!("chat target renders chat messages");
            };
            assert_eq!(messages[0].role, "system");
            assert_eq!(tokenizer.count(&messages[0].content), Some(120));
            let total: usize = messages
                .iter()
                .map(|m| tokenizer.count(&m.content).unwrap())
                .sum();
            assert_eq!(total, call.input_tokens as usize);
            systems.push(messages[0].content.clone());
            assert_ne!(messages[1].content, String::new());
        }
        assert!(systems.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn completions_token_ids_are_the_tokenizers_ids() {
        let (source, tokenizer) = source_for(CHAT, Api::Completions, CompletionsPrompt::TokenIds);
        let call = single(&source, 0);
        let Prompt::TokenIds(ids) = source.render(&call) else {
            panic!("token-id prompts stay token ids");
        };
        assert_eq!(ids.len(), 100);
        let (text_source, _) = source_for(CHAT, Api::Completions, CompletionsPrompt::Text);
        let Prompt::Text(text) = text_source.render(&call) else {
            panic!("text prompts stay text");
        };
        assert_eq!(tokenizer.ids(&text), Some(ids));
    }
}
