//! Whether an answer is what the OpenAPI document ([`crate::openapi::document`]) says its route
//! answers: the route's success schema (generated from its answer type in
//! `countersign_common::wire`), checked against the JSON the broker wrote. The end-to-end
//! tests run every 2xx answer they get through [`check_answer`], and the unit tests one
//! representative answer of each route, so an answer built outside its type (a `json!`, a hand
//! writer like the values route's) cannot drift from the document.
//!
//! The check reads the subset of JSON Schema 2020-12 the generator writes, strictly: an object
//! may carry only the properties its schema lists, and a keyword the check does not know fails
//! it (rather than passing unchecked).

use serde_json::{Map, Value};

use crate::openapi::{ROUTES, RouteSpec};

/// The route of the table that `method path` reaches (a query string is ignored), the one with
/// the most literal segments when two match.
pub fn route_of(method: &str, path: &str) -> Option<&'static RouteSpec> {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    ROUTES
        .iter()
        .filter(|r| r.method.eq_ignore_ascii_case(method))
        .filter(|r| {
            let template: Vec<&str> = r.path.split('/').collect();
            template.len() == segments.len()
                && template
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t == s || (t.starts_with('{') && !s.is_empty()))
        })
        .max_by_key(|r| r.path.split('/').filter(|t| !t.starts_with('{')).count())
}

/// Checks a 2xx answer of `method path` against the document `doc`: its status is the route's
/// success status, and its body (`text`) the route's answer schema (or empty for a route that
/// answers none). A path outside the route table is not checked.
///
/// # Errors
/// What does not match, with where.
pub fn check_answer(
    doc: &Value,
    method: &str,
    path: &str,
    status: u16,
    text: &str,
) -> Result<(), String> {
    let Some(route) = route_of(method, path) else {
        return Ok(());
    };
    let at = format!("{method} {path}");
    if status != route.success {
        return Err(format!(
            "{at}: answered {status}, the document says {}",
            route.success
        ));
    }
    let response = &doc["paths"][route.path][route.method.to_lowercase()]["responses"]
        [route.success.to_string()];
    match response.pointer("/content/application~1json/schema") {
        None if text.is_empty() => Ok(()),
        None => Err(format!("{at}: a body where the document says none")),
        Some(schema) => {
            let body: Value = serde_json::from_str(text)
                .map_err(|e| format!("{at}: the answer is not JSON: {e}"))?;
            conforms(doc, schema, &body, &at)
        }
    }
}

/// Keywords that describe without constraining.
const NOTES: &[&str] = &["description", "title", "default", "examples", "$schema"];

/// Whether `value` matches `schema`, `$ref`s resolved in `doc`.
///
/// # Errors
/// The first mismatch, with its place under `at`.
pub fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return match schema {
            Value::Bool(true) => Ok(()),
            _ => Err(format!("{at}: schema {schema} refuses every value")),
        };
    };
    for (key, rule) in s {
        match key.as_str() {
            "$ref" => {
                let name = rule
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    .ok_or_else(|| format!("{at}: unknown reference {rule}"))?;
                let target = doc["components"]["schemas"]
                    .get(name)
                    .ok_or_else(|| format!("{at}: no schema {name}"))?;
                conforms(doc, target, value, at)?;
            }
            "type" => type_matches(rule, value, at)?,
            "properties" => object(doc, s, value, at)?,
            "required" | "additionalProperties" if !s.contains_key("properties") => {
                object(doc, s, value, at)?
            }
            "required" | "additionalProperties" => {}
            "items" => {
                for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                    conforms(doc, rule, item, &format!("{at}[{i}]"))?;
                }
            }
            "anyOf" | "oneOf" => {
                let options = rule.as_array().map(Vec::as_slice).unwrap_or_default();
                if !options.iter().any(|o| conforms(doc, o, value, at).is_ok()) {
                    return Err(format!("{at}: {value} matches none of {rule}"));
                }
            }
            "enum" if !rule.as_array().is_some_and(|a| a.contains(value)) => {
                return Err(format!("{at}: {value} is not one of {rule}"));
            }
            "const" if rule != value => return Err(format!("{at}: {value} is not {rule}")),
            "format" => format_matches(rule, value, at)?,
            "minimum"
                if value
                    .as_f64()
                    .zip(rule.as_f64())
                    .is_some_and(|(v, m)| v < m) =>
            {
                return Err(format!("{at}: {value} is below {rule}"));
            }
            "enum" | "const" | "minimum" => {}
            k if NOTES.contains(&k) => {}
            k => return Err(format!("{at}: the check does not know keyword {k}")),
        }
    }
    Ok(())
}

fn type_matches(rule: &Value, value: &Value, at: &str) -> Result<(), String> {
    let is = |t: &str| match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => false,
    };
    let ok = match rule {
        Value::String(t) => is(t),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(is),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{at}: {value} is not of type {rule}"))
    }
}

fn format_matches(rule: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(s) = value.as_str() else {
        return Ok(());
    };
    match rule.as_str() {
        Some("date-time") => chrono::DateTime::parse_from_rfc3339(s)
            .map(|_| ())
            .map_err(|e| format!("{at}: {s:?} is not an RFC 3339 time: {e}")),
        _ => Ok(()),
    }
}

/// An object's properties: each required one there, each one there listed (or allowed by
/// `additionalProperties`), each matching its schema.
fn object(doc: &Value, s: &Map<String, Value>, value: &Value, at: &str) -> Result<(), String> {
    let Some(obj) = value.as_object() else {
        return Ok(()); // `type` says what else it may be.
    };
    let empty = Map::new();
    let properties = s
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for name in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = name.as_str().unwrap_or_default();
        if !obj.contains_key(name) {
            return Err(format!("{at}: required field {name} is missing"));
        }
    }
    for (name, v) in obj {
        let here = format!("{at}.{name}");
        match (properties.get(name), s.get("additionalProperties")) {
            (Some(p), _) => conforms(doc, p, v, &here)?,
            (None, Some(extra)) => conforms(doc, extra, v, &here)?,
            (None, None) => return Err(format!("{here}: a field the schema does not list")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
