//! A JSON Schema (2020-12) validator for the keywords that capcard's own
//! `docs/results.schema.json` and llm-d's Benchmark Report schema use.
//!
//! Why our own: the general-purpose validator crates bring a regex engine,
//! big-number arithmetic and URI handling (about 50 crates, a minute of a
//! cold build) for keywords neither schema uses. Why it is safe: every
//! *assertion* keyword of the 2020-12 vocabulary that is not implemented
//! here (`pattern`, `patternProperties`, `dependentRequired`, …) is an
//! error when a schema uses it, so a schema can never pass a document by
//! asking for a check this code does not make. Keywords outside the
//! vocabulary (pydantic's `ge`, OpenAPI's `discriminator`) are annotations
//! under the specification and are ignored, as every validator does.
//!
//! Pure: a schema and a document in, the violations out, each with the
//! JSON pointer of the offending value.

use serde_json::{Map, Value};

/// One way a document breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer to the value (`/cards/0/open/2/ttft_ms`; `""`: the root).
    pub at: String,
    pub kind: ViolationKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViolationKind {
    /// A `required` property is absent.
    Missing(String),
    /// A property the schema forbids (`additionalProperties: false`).
    Unexpected(String),
    /// A value of another type than the schema allows, in words.
    WrongType(String),
    /// Anything else, in words: a value outside `enum`, a broken bound, …
    Invalid(String),
    /// The schema asks for a check this validator does not make.
    Unsupported(String),
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.at.is_empty() { "/" } else { &self.at };
        match &self.kind {
            ViolationKind::Missing(name) => {
                write!(f, "{at}: required property {name:?} is missing")
            }
            ViolationKind::Unexpected(name) => {
                write!(f, "{at}: property {name:?} is not allowed here")
            }
            ViolationKind::WrongType(why) | ViolationKind::Invalid(why) => {
                write!(f, "{at}: {why}")
            }
            ViolationKind::Unsupported(keyword) => {
                write!(
                    f,
                    "{at}: the schema uses {keyword:?}, which this validator does not check"
                )
            }
        }
    }
}

/// 2020-12 assertion and applicator keywords not implemented here.
const UNSUPPORTED: &[&str] = &[
    "pattern",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if",
    "then",
    "else",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "$dynamicRef",
    "$recursiveRef",
];

/// Every keyword of [`UNSUPPORTED`] anywhere in `schema`, with the JSON
/// pointer of the schema object that uses it: what [`validate`] would
/// reject on some document, found without one. Property names (the keys of
/// `properties`, `$defs`) and data (`const`, `enum`, `default`,
/// `examples`) are not keywords and are not read as such.
pub fn unsupported_keywords(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    find_unsupported(schema, &mut String::new(), &mut out);
    out
}

fn find_unsupported(schema: &Value, at: &mut String, out: &mut Vec<String>) {
    match schema {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&index.to_string());
                find_unsupported(item, at, out);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            for (keyword, value) in map {
                let len = at.len();
                push_pointer(at, keyword);
                if UNSUPPORTED.contains(&keyword.as_str()) {
                    out.push(format!("{}: {keyword}", &at[..len]));
                }
                match keyword.as_str() {
                    "const" | "enum" | "default" | "examples" => {}
                    "properties" | "$defs" | "definitions" => {
                        for (name, child) in value.as_object().into_iter().flatten() {
                            let inner = at.len();
                            push_pointer(at, name);
                            find_unsupported(child, at, out);
                            at.truncate(inner);
                        }
                    }
                    _ => find_unsupported(value, at, out),
                }
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Every violation of `schema` by `document` (empty: valid). `$ref`s are
/// resolved as JSON pointers into `schema` itself (`#/$defs/Name`).
pub fn validate(schema: &Value, document: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    check(schema, schema, document, &mut String::new(), &mut out, 0);
    out
}

/// References nested deeper than this are a cycle that never reaches a
/// document value (a schema error).
const MAX_DEPTH: usize = 256;

fn check(
    root: &Value,
    schema: &Value,
    value: &Value,
    at: &mut String,
    out: &mut Vec<Violation>,
    depth: usize,
) {
    let invalid = |out: &mut Vec<Violation>, at: &str, why: String| {
        out.push(Violation {
            at: at.to_string(),
            kind: ViolationKind::Invalid(why),
        })
    };
    let schema = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return invalid(out, at, "no value is allowed here".into()),
        Value::Object(map) => map,
        _ => return invalid(out, at, "the schema here is not an object".into()),
    };
    if depth > MAX_DEPTH {
        return invalid(out, at, "schema references nest too deeply".into());
    }
    for keyword in UNSUPPORTED {
        if schema.contains_key(*keyword) {
            out.push(Violation {
                at: at.clone(),
                kind: ViolationKind::Unsupported((*keyword).to_string()),
            });
        }
    }
    if let Some(reference) = schema.get("$ref") {
        match reference.as_str().and_then(|r| resolve(root, r)) {
            Some(target) => check(root, target, value, at, out, depth + 1),
            None => invalid(out, at, format!("unresolvable $ref {reference}")),
        }
    }
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !allowed.iter().any(|t| has_type(value, t)) {
            out.push(Violation {
                at: at.clone(),
                kind: ViolationKind::WrongType(format!(
                    "expected {}, found {}",
                    allowed.join(" or "),
                    type_name(value)
                )),
            });
            // Further keywords would only repeat the type mismatch.
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        invalid(
            out,
            at,
            format!("{value} is not one of {}", Value::Array(allowed.clone())),
        );
    }
    if let Some(expected) = schema.get("const")
        && !json_equal(expected, value)
    {
        invalid(out, at, format!("{value} is not {expected}"));
    }
    if let Some(n) = value.as_f64() {
        bound(schema, "minimum", n, |n, b| n >= b, at, out);
        bound(schema, "maximum", n, |n, b| n <= b, at, out);
        bound(schema, "exclusiveMinimum", n, |n, b| n > b, at, out);
        bound(schema, "exclusiveMaximum", n, |n, b| n < b, at, out);
    }
    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as f64;
        bound(schema, "minLength", chars, |n, b| n >= b, at, out);
        bound(schema, "maxLength", chars, |n, b| n <= b, at, out);
    }
    if let Value::Object(object) = value {
        check_object(root, schema, object, at, out, depth);
    }
    if let Value::Array(items) = value {
        check_array(root, schema, items, at, out, depth);
    }
    for (keyword, need) in [
        ("allOf", Need::All),
        ("anyOf", Need::Any),
        ("oneOf", Need::One),
    ] {
        let Some(branches) = schema.get(keyword).and_then(Value::as_array) else {
            continue;
        };
        let results: Vec<Vec<Violation>> = branches
            .iter()
            .map(|branch| {
                let mut inner = Vec::new();
                check(root, branch, value, &mut at.clone(), &mut inner, depth + 1);
                inner
            })
            .collect();
        let passing = results.iter().filter(|r| r.is_empty()).count();
        match need {
            Need::All => out.extend(results.into_iter().flatten()),
            Need::Any if passing == 0 => {
                // The branch that came closest says most about the mistake:
                // one that takes the value's type (an object missing a
                // field, under `anyOf: [{$ref}, {type: null}]`) before one
                // that rejects the value outright, then the fewest
                // violations.
                let rejects_type = |violations: &[Violation]| {
                    violations
                        .iter()
                        .any(|v| v.at == *at && matches!(v.kind, ViolationKind::WrongType(_)))
                };
                let closest = results
                    .into_iter()
                    .min_by_key(|r| (rejects_type(r), r.len()))
                    .unwrap_or_default();
                out.extend(closest);
            }
            Need::One if passing != 1 => invalid(
                out,
                at,
                format!("matches {passing} of the oneOf schemas, not exactly one"),
            ),
            _ => {}
        }
    }
    if let Some(negated) = schema.get("not") {
        let mut inner = Vec::new();
        check(root, negated, value, &mut at.clone(), &mut inner, depth + 1);
        if inner.is_empty() {
            invalid(out, at, "matches the schema under \"not\"".into());
        }
    }
}

enum Need {
    All,
    Any,
    One,
}

fn check_object(
    root: &Value,
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    at: &mut String,
    out: &mut Vec<Violation>,
    depth: usize,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                out.push(Violation {
                    at: at.clone(),
                    kind: ViolationKind::Missing(name.to_string()),
                });
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, child) in object {
        let len = at.len();
        push_pointer(at, name);
        match properties.and_then(|p| p.get(name)) {
            Some(property) => check(root, property, child, at, out, depth + 1),
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    at.truncate(len);
                    out.push(Violation {
                        at: at.clone(),
                        kind: ViolationKind::Unexpected(name.clone()),
                    });
                }
                Some(extra) => check(root, extra, child, at, out, depth + 1),
                None => {}
            },
        }
        at.truncate(len);
    }
}

fn check_array(
    root: &Value,
    schema: &Map<String, Value>,
    items: &[Value],
    at: &mut String,
    out: &mut Vec<Violation>,
    depth: usize,
) {
    let count = items.len() as f64;
    bound(schema, "minItems", count, |n, b| n >= b, at, out);
    bound(schema, "maxItems", count, |n, b| n <= b, at, out);
    let prefix = schema
        .get("prefixItems")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (index, item) in items.iter().enumerate() {
        let item_schema = match prefix.get(index) {
            Some(s) => Some(s),
            None => schema.get("items"),
        };
        if let Some(item_schema) = item_schema {
            let len = at.len();
            at.push('/');
            at.push_str(&index.to_string());
            check(root, item_schema, item, at, out, depth + 1);
            at.truncate(len);
        }
    }
    if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
        for (i, a) in items.iter().enumerate() {
            if items[..i].iter().any(|b| json_equal(a, b)) {
                out.push(Violation {
                    at: at.clone(),
                    kind: ViolationKind::Invalid(format!("item {i} repeats an earlier one")),
                });
                break;
            }
        }
    }
}

fn bound(
    schema: &Map<String, Value>,
    keyword: &str,
    n: f64,
    holds: impl Fn(f64, f64) -> bool,
    at: &str,
    out: &mut Vec<Violation>,
) {
    if let Some(b) = schema.get(keyword).and_then(Value::as_f64)
        && !holds(n, b)
    {
        out.push(Violation {
            at: at.to_string(),
            kind: ViolationKind::Invalid(format!("{n} breaks {keyword} {b}")),
        });
    }
}

/// `#`, `#/$defs/Name`, any JSON pointer into the root schema.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

fn push_pointer(at: &mut String, name: &str) {
    at.push('/');
    at.push_str(&name.replace('~', "~0").replace('/', "~1"));
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        // 1.0 is an integer in JSON Schema: the value counts, not its spelling.
        "integer" => value
            .as_f64()
            .is_some_and(|n| n.fract() == 0.0 && n.is_finite()),
        _ => false,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality: numbers by value (1 equals 1.0), the rest structurally.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(schema: Value, doc: Value) -> Vec<String> {
        validate(&schema, &doc)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn types_required_and_closed_objects() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer", "minimum": 0},
                "ratio": {"type": ["number", "null"]}
            },
            "required": ["name", "count"],
            "additionalProperties": false
        });
        assert!(
            errors(
                schema.clone(),
                json!({"name": "a", "count": 3, "ratio": null})
            )
            .is_empty()
        );
        assert!(errors(schema.clone(), json!({"name": "a", "count": 3.0})).is_empty());
        assert_eq!(
            errors(schema.clone(), json!({"name": "a", "count": -1})),
            vec!["/count: -1 breaks minimum 0"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"name": "a"})),
            vec!["/: required property \"count\" is missing"]
        );
        let all = errors(schema, json!({"name": 1, "count": -1.5, "extra": true}));
        assert!(
            all.contains(&"/name: expected string, found integer".to_string()),
            "{all:?}"
        );
        assert!(
            all.contains(&"/count: expected integer, found number".to_string()),
            "{all:?}"
        );
        assert!(
            all.contains(&"/: property \"extra\" is not allowed here".to_string()),
            "{all:?}"
        );
        assert_eq!(all.len(), 3, "{all:?}");
    }

    #[test]
    fn refs_any_of_one_of_and_arrays() {
        let schema = json!({
            "$defs": {
                "Latency": {
                    "type": "object",
                    "properties": {"units": {"enum": ["ms", "s"]}, "p50": {"type": "number"}},
                    "required": ["units"],
                    "additionalProperties": false
                }
            },
            "type": "object",
            "properties": {
                "ttft": {"anyOf": [{"$ref": "#/$defs/Latency"}, {"type": "null"}]},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 2, "maxItems": 2},
                "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]}
            }
        });
        let ok = json!({"ttft": {"units": "ms", "p50": 1.5}, "pair": ["x", 2], "kind": "b"});
        assert!(errors(schema.clone(), ok).is_empty());
        let bad = errors(
            schema.clone(),
            json!({"ttft": {"units": "us"}, "pair": ["x", "y", 3], "kind": "c"}),
        );
        assert!(
            bad.iter()
                .any(|e| e.starts_with("/ttft/units: \"us\" is not one of")),
            "{bad:?}"
        );
        assert!(
            bad.contains(&"/pair/1: expected integer, found string".to_string()),
            "{bad:?}"
        );
        assert!(
            bad.contains(&"/pair: 3 breaks maxItems 2".to_string()),
            "{bad:?}"
        );
        assert!(
            bad.contains(&"/kind: matches 0 of the oneOf schemas, not exactly one".to_string()),
            "{bad:?}"
        );
        assert!(errors(schema, json!({"ttft": null})).is_empty());
    }

    #[test]
    fn an_unimplemented_assertion_is_an_error_never_a_pass() {
        let schema = json!({"type": "string", "pattern": "^[a-z]+$"});
        assert_eq!(
            errors(schema, json!("abc")),
            vec!["/: the schema uses \"pattern\", which this validator does not check"]
        );
        // Outside the vocabulary: an annotation (pydantic writes `ge`).
        assert!(
            errors(
                json!({"type": "integer", "ge": 1, "discriminator": {}}),
                json!(0)
            )
            .is_empty()
        );
    }

    #[test]
    fn pointers_escape_and_refs_must_resolve() {
        let schema =
            json!({"properties": {"a/b": {"type": "null"}, "c": {"$ref": "#/$defs/Nope"}}});
        assert_eq!(
            errors(schema, json!({"a/b": 1, "c": 2})),
            vec![
                "/a~1b: expected null, found integer".to_string(),
                "/c: unresolvable $ref \"#/$defs/Nope\"".to_string()
            ]
        );
    }

    #[test]
    fn any_of_reports_the_branch_that_takes_the_value_s_type() {
        // An optional object (`anyOf: [{$ref}, {type: null}]`) missing two
        // fields: the object branch's two violations, not the null branch's
        // one "expected null".
        let schema = json!({
            "$defs": {"Wall": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}, "c": {"type": "number"}},
                "required": ["a", "b", "c"]
            }},
            "type": "object",
            "properties": {"wall": {"anyOf": [{"$ref": "#/$defs/Wall"}, {"type": "null"}]}}
        });
        assert_eq!(
            errors(schema.clone(), json!({"wall": {"a": 1}})),
            vec![
                "/wall: required property \"b\" is missing",
                "/wall: required property \"c\" is missing"
            ]
        );
        assert_eq!(
            errors(schema, json!({"wall": "x"})),
            vec!["/wall: expected object, found string"]
        );
    }

    #[test]
    fn unsupported_keywords_are_found_without_a_document() {
        let schema = json!({
            "$defs": {"Name": {"type": "string", "pattern": "^a"}},
            "type": "object",
            "properties": {
                // A property called `pattern` is a name, not the keyword.
                "pattern": {"type": "string", "const": {"if": 1}},
                "list": {"type": "array", "items": {"anyOf": [{"contains": {}}, {"type": "null"}]}}
            }
        });
        assert_eq!(
            unsupported_keywords(&schema),
            vec![
                "/$defs/Name: pattern".to_string(),
                "/properties/list/items/anyOf/0: contains".to_string()
            ]
        );
        assert!(
            unsupported_keywords(&json!({"type": "object", "properties": {"a": true}})).is_empty()
        );
    }
}
