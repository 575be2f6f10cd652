//! The JSON Schema of `results.json` (`docs/results.schema.json`), derived
//! from [`CapacityReport`] and the types under it.
//!
//! Why derived: a hand-written schema drifts from the structs the moment a
//! field is added; this one is the structs. Schemars reads the same serde
//! attributes serde does (`rename_all`, `tag`, `default`,
//! `skip_serializing_if`), and the schema is generated for *serialization*
//! (what capcard writes), so a field is `required` exactly when capcard
//! always writes it: an `Option` written as `null` is required and
//! nullable, a field skipped when empty is optional. The committed file is
//! compared with this function's output by a test (`UPDATE_SCHEMA=1`
//! rewrites it), so the published schema cannot fall behind either.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::RESULTS_SCHEMA;
use super::json_schema::{self, Violation, ViolationKind};
use crate::analyze::CapacityReport;

/// Where the schema is committed, relative to the repository root.
pub const SCHEMA_PATH: &str = "docs/results.schema.json";

/// The JSON Schema (2020-12) of the `results.json` this capcard writes.
pub fn results_schema() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut schema = generator
        .into_root_schema_for::<CapacityReport>()
        .to_value();
    if let Value::Object(root) = &mut schema {
        root.insert("$id".into(), json!(schema_id()));
        root.insert(
            "title".into(),
            json!(format!("capcard results.json, schema {RESULTS_SCHEMA}")),
        );
        root.insert(
            "description".into(),
            json!(
                "The results.json of a capcard results folder: measured runs, CrossP, \
                 Cr_closed, Cr_open and sizing per card. Generated from capcard's own \
                 types; see docs/results.md."
            ),
        );
        // A document of another version is not one of these: say so in the
        // schema, not only in the reader.
        if let Some(Value::Object(property)) =
            root.get_mut("properties").and_then(|p| p.get_mut("schema"))
        {
            property.insert("const".into(), json!(RESULTS_SCHEMA));
        }
    }
    schema
}

/// The schema's `$id`: a URN naming the version, since the file is
/// published with the code rather than at a fixed address.
pub fn schema_id() -> String {
    format!("urn:{}", RESULTS_SCHEMA.replace('/', ":"))
}

/// Every way `document` breaks [`results_schema`] (empty: it is a
/// `results.json` of this version), by the strict validator in
/// [`super::json_schema`].
pub fn validate_results(document: &Value) -> Vec<Violation> {
    json_schema::validate(cached_schema(), document)
}

/// The schema, generated once per process: every `results.json` read is
/// checked against it (see [`missing_fields`]).
fn cached_schema() -> &'static Value {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(results_schema)
}

/// The `required` fields `document` lacks against [`results_schema`], as
/// paths with array indices collapsed (`cards[].reuse`), sorted, each once.
/// What a v1 `results.json` omitted; nothing for one this capcard wrote.
pub fn missing_fields(document: &Value) -> Vec<String> {
    let mut paths: Vec<String> = validate_results(document)
        .into_iter()
        .filter_map(|violation| match violation.kind {
            ViolationKind::Missing(name) => Some(collapsed_path(document, &violation.at, &name)),
            _ => None,
        })
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// JSON pointer `/cards/0/open/2` into `document` and property `state` →
/// `cards[].open[].state`: one path per field, whichever card or run lacks
/// it. Only array indices collapse (a map's key `"0"` stays).
fn collapsed_path(document: &Value, pointer: &str, name: &str) -> String {
    let mut path = String::new();
    let mut here = Some(document);
    for segment in pointer.split('/').skip(1) {
        let key = segment.replace("~1", "/").replace("~0", "~");
        if let Some(Value::Array(items)) = here {
            path.push_str("[]");
            here = key.parse::<usize>().ok().and_then(|i| items.get(i));
        } else {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            here = here.and_then(|v| v.get(&key));
        }
    }
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
    path
}

/// [`results_schema`] as committed: pretty JSON with a trailing newline.
pub fn results_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&results_schema()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed `docs/results.schema.json` is what the types generate.
    /// `UPDATE_SCHEMA=1 cargo test --lib results_schema_file` rewrites it.
    #[test]
    fn results_schema_file_is_generated_from_the_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SCHEMA_PATH);
        let generated = results_schema_text();
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).expect("write docs/results.schema.json");
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{SCHEMA_PATH} is not what the types in src/analyze generate (a field \
             was added, renamed or retyped). Regenerate it with\n  \
             UPDATE_SCHEMA=1 cargo test --lib results_schema_file\nand review the diff; \
             a change that a v{} reader could not read needs a new RESULTS_SCHEMA.",
            RESULTS_SCHEMA.rsplit('v').next().unwrap_or("?")
        );
    }

    fn fixture(path: &str) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let text = std::fs::read_to_string(&path).expect("fixture readable");
        serde_json::from_str(&text).expect("fixture is JSON")
    }

    #[test]
    fn the_schema_asks_only_for_checks_the_validator_makes() {
        // Else validating a results.json would fail on the schema, not the
        // file (the validator never passes a check it does not make).
        assert_eq!(
            json_schema::unsupported_keywords(&results_schema()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn missing_fields_collapse_indices_and_repeat_once() {
        let doc = json!({
            "cards": [{}, {"open": [{}, {}]}],
            "limits": {"a/b": {}, "0": {}}
        });
        assert_eq!(collapsed_path(&doc, "", "cards"), "cards");
        assert_eq!(collapsed_path(&doc, "/cards/0", "reuse"), "cards[].reuse");
        assert_eq!(
            collapsed_path(&doc, "/cards/1/open/1", "state"),
            "cards[].open[].state"
        );
        assert_eq!(collapsed_path(&doc, "/limits/a~1b", "x"), "limits.a/b.x");
        assert_eq!(collapsed_path(&doc, "/limits/0", "x"), "limits.0.x");
    }

    #[test]
    fn the_committed_results_fixtures_are_valid() {
        let broken: Vec<String> = [
            "tests/data/results-fixture.json",
            "tests/data/export-fixture/results.json",
            "tests/data/diff-a/results.json",
            "tests/data/diff-b/results.json",
        ]
        .into_iter()
        .flat_map(|path| {
            validate_results(&fixture(path))
                .into_iter()
                .map(move |v| format!("  {path}: {v}"))
        })
        .collect();
        assert!(
            broken.is_empty(),
            "results fixtures break {SCHEMA_PATH}:\n{}",
            broken.join("\n")
        );
    }

    #[test]
    fn validation_is_not_vacuous() {
        let valid = fixture("tests/data/export-fixture/results.json");
        let mut wrong_type = valid.clone();
        wrong_type["cards"][0]["closed"][0]["requests"] = json!("many");
        let mut unknown_state = valid.clone();
        unknown_state["cards"][0]["open"][0]["state"] = json!("melted");
        let mut missing = valid.clone();
        if let Some(card) = missing["cards"][0].as_object_mut() {
            card.remove("reuse");
        }
        let mut other_version = valid;
        other_version["schema"] = json!("capcard/results/v1");
        let said = |doc: &Value| -> Vec<String> {
            validate_results(doc)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            said(&wrong_type),
            ["/cards/0/closed/0/requests: expected integer, found string"]
        );
        let state = said(&unknown_state);
        assert!(
            state.len() == 1
                && state[0].starts_with("/cards/0/open/0/state: \"melted\" is not one of"),
            "{state:?}"
        );
        assert_eq!(
            said(&missing),
            ["/cards/0: required property \"reuse\" is missing"]
        );
        assert_eq!(
            said(&other_version),
            ["/schema: \"capcard/results/v1\" is not \"capcard/results/v2\""]
        );
    }

    #[test]
    fn a_v1_file_reads_as_the_v2_file_it_became_and_says_what_it_lacks() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |path: &str| {
            let text = std::fs::read_to_string(root.join(path)).expect("fixture readable");
            crate::report::read_results_json(&text).expect("fixture reads")
        };
        let v1 = read("tests/data/results-fixture-v1.json");
        let v2 = read("tests/data/results-fixture.json");
        assert_eq!(v1.schema_version, "capcard/results/v1");
        assert_eq!(v2.schema_version, RESULTS_SCHEMA);
        assert!(v2.lacks.is_empty(), "{:?}", v2.lacks);
        // Same figures: v2 only writes what v1 left out.
        assert_eq!(v1.report, v2.report);
        for field in [
            "content_nonce",
            "cards[].reuse",
            "cards[].closed[].state",
            "cards[].open[].ttft_ms.extra",
        ] {
            assert!(
                v1.lacks.iter().any(|l| l == field),
                "{field}: {:?}",
                v1.lacks
            );
        }
        let mut sorted = v1.lacks.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, v1.lacks, "sorted, each once");
    }
}
