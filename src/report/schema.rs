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
use super::json_schema::{self, Violation};
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
    json_schema::validate(&results_schema(), document)
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
    fn the_committed_results_fixtures_are_valid() {
        let broken: Vec<String> = ["tests/data/export-fixture/results.json"]
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
}
