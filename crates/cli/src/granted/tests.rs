//! Reading a release with `parts`, the environment and masked values made of it, and clashes.

use super::*;
use crate::mask::{CONCEALED, Masker};
use crate::session::Values;

const APP_PW: &str = "app-role-password-8f2e";
const REPORTS_PW: &str = "reports-role-password-77aa";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

/// A release as the broker answers it: `parts` in the grant's order (REPORTS_DB before APP_DB,
/// not alphabetical), and a field this program does not know.
fn release() -> String {
    format!(
        r#"{{"expires_at":null,"future_field":{{"x":1}},
        "values":{{"APP_DB":"postgres://cs_app:{APP_PW}@db.internal:5432/app",
                   "GITHUB_TOKEN":"ghp_statictoken123",
                   "REPORTS_DB":"postgres://cs_rep:{REPORTS_PW}@db.internal:5432/reports",
                   "S3_WRITER":"{{\"Version\":1}}"}},
        "parts":{{
          "REPORTS_DB":{{"PGHOST":"db.internal","PGPORT":"5432","PGDATABASE":"reports",
                        "PGUSER":"cs_rep","PGPASSWORD":"{REPORTS_PW}"}},
          "S3_WRITER":{{"AWS_ACCESS_KEY_ID":"AKIAEXAMPLEKEY1","AWS_SECRET_ACCESS_KEY":"{AWS_SECRET}"}},
          "APP_DB":{{"PGHOST":"db.internal","PGPORT":"5432","PGDATABASE":"app",
                    "PGUSER":"cs_app","PGPASSWORD":"{APP_PW}"}}}}}}"#
    )
}

fn env_map(g: &Granted) -> Vec<(&str, &str)> {
    g.env
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect()
}

#[test]
fn parts_are_read_in_the_grants_order_and_unknown_fields_ignored() {
    let v: Values = serde_json::from_str(&release()).expect("parses");
    let order: Vec<&str> = v.parts.0.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(order, ["REPORTS_DB", "S3_WRITER", "APP_DB"]);
    let vars: Vec<&str> = v
        .parts
        .of("REPORTS_DB")
        .expect("parts")
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        vars,
        ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD"]
    );
    // Written back (`--json`), the order stays.
    let out = serde_json::to_string(&v).expect("serializes");
    let rep = out.find("\"REPORTS_DB\":{").expect("reports parts");
    let app = out.find("\"APP_DB\":{").expect("app parts");
    assert!(rep < app, "{out}");
    assert!(!out.contains("future_field"));
}

#[test]
fn the_first_secret_in_the_grant_wins_a_variable_and_the_clash_is_named() {
    let v: Values = serde_json::from_str(&release()).expect("parses");
    let g = v.granted_quietly();
    let env = env_map(&g);
    // Every value under its secret's name.
    for name in ["APP_DB", "GITHUB_TOKEN", "REPORTS_DB", "S3_WRITER"] {
        assert_eq!(
            env.iter().filter(|(k, _)| *k == name).count(),
            1,
            "{name}: {:?}",
            g.env.iter().map(|(k, _)| k).collect::<Vec<_>>()
        );
    }
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    // REPORTS_DB comes first in the grant: its parts win; each variable is set once.
    assert_eq!(get("PGPASSWORD"), Some(REPORTS_PW));
    assert_eq!(get("PGDATABASE"), Some("reports"));
    assert_eq!(get("PGUSER"), Some("cs_rep"));
    assert_eq!(get("AWS_SECRET_ACCESS_KEY"), Some(AWS_SECRET));
    assert_eq!(get("AWS_ACCESS_KEY_ID"), Some("AKIAEXAMPLEKEY1"));
    assert_eq!(env.iter().filter(|(k, _)| *k == "PGPASSWORD").count(), 1);
    assert_eq!(env.len(), 4 + 5 + 2);
    let clashed: Vec<&str> = g.clashes.iter().map(|c| c.var.as_str()).collect();
    assert_eq!(
        clashed,
        ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD"]
    );
    let pw = &g.clashes[4];
    assert_eq!(
        pw.warning(),
        "PGPASSWORD is a part of both REPORTS_DB and APP_DB: REPORTS_DB's is used (the first in the grant)"
    );
    assert!(!pw.warning().contains(APP_PW) && !pw.warning().contains(REPORTS_PW));
}

#[test]
fn masking_covers_every_value_and_every_part_a_clash_left_out_too() {
    let v: Values = serde_json::from_str(&release()).expect("parses");
    let g = v.granted_quietly();
    let labels: Vec<&str> = g.masked.iter().map(|(k, _)| k.as_str()).collect();
    assert!(labels.contains(&"APP_DB's PGPASSWORD"), "{labels:?}");
    assert!(
        labels.contains(&"S3_WRITER's AWS_SECRET_ACCESS_KEY"),
        "{labels:?}"
    );
    assert_eq!(g.masked.len(), 4 + 5 + 2 + 5);
    let mut m = Masker::new(g.masked.iter().map(|(_, v)| v.expose().as_bytes())).expect("masker");
    let leaks = [
        APP_PW,
        REPORTS_PW,
        AWS_SECRET,
        "AKIAEXAMPLEKEY1",
        "cs_app",
        "ghp_statictoken123",
    ];
    let input = leaks.join("\n");
    let mut out = Vec::new();
    m.push(input.as_bytes(), &mut out);
    m.finish(&mut out);
    let out = String::from_utf8(out).expect("utf-8");
    for leak in leaks {
        assert!(!out.contains(leak), "{leak} shows: {out}");
    }
    let concealed = std::str::from_utf8(CONCEALED).expect("utf-8");
    assert_eq!(out.matches(concealed).count(), leaks.len(), "{out}");
}

#[test]
fn without_parts_the_values_alone_as_before() {
    let v: Values = serde_json::from_str(
        r#"{"expires_at":"2030-01-01T00:00:00Z","values":{"B_TOKEN":"bbbbbb","A_TOKEN":"aaaaaa"}}"#,
    )
    .expect("parses");
    assert!(v.parts.is_empty());
    let g = v.granted_quietly();
    assert_eq!(env_map(&g), [("A_TOKEN", "aaaaaa"), ("B_TOKEN", "bbbbbb")]);
    assert_eq!(g.masked.len(), 2);
    assert!(g.clashes.is_empty());
    let out = serde_json::to_string(&v).expect("serializes");
    assert!(!out.contains("parts"), "{out}");
}

#[test]
fn a_granted_secrets_own_name_wins_over_a_part() {
    let v: Values = serde_json::from_str(
        r#"{"values":{"PGHOST":"static.example","DB":"postgres://u:pppp@h:1/d"},
            "parts":{"DB":{"PGHOST":"h","PGPASSWORD":"pppp"}}}"#,
    )
    .expect("parses");
    let g = v.granted_quietly();
    let env = env_map(&g);
    assert!(env.contains(&("PGHOST", "static.example")), "{env:?}");
    assert!(env.contains(&("PGPASSWORD", "pppp")), "{env:?}");
    assert_eq!(env.iter().filter(|(k, _)| *k == "PGHOST").count(), 1);
    assert_eq!(
        g.clashes[0].warning(),
        "PGHOST is a granted secret and a part of DB: the secret's value is used"
    );
}

#[test]
fn parts_that_are_not_an_object_are_refused() {
    let bad = r#"{"values":{},"parts":[["DB",{"PGHOST":"h"}]]}"#;
    assert!(serde_json::from_str::<Values>(bad).is_err());
    let bad = r#"{"values":{},"parts":{"DB":{"PGHOST":5}}}"#;
    assert!(serde_json::from_str::<Values>(bad).is_err());
}

#[test]
fn parts_the_broker_names_public_are_not_masked() {
    let text = release().replacen(
        r#""parts":{"#,
        r#""public_parts":{"APP_DB":["PGHOST","PGPORT","PGDATABASE","PGUSER"],"REPORTS_DB":["PGHOST","PGPORT","PGDATABASE","PGUSER"]},"parts":{"#,
        1,
    );
    let v: Values = serde_json::from_str(&text).expect("parses");
    let g = v.granted_quietly();
    let labels: Vec<&str> = g.masked.iter().map(|(k, _)| k.as_str()).collect();
    assert!(labels.contains(&"APP_DB's PGPASSWORD"), "{labels:?}");
    assert!(!labels.contains(&"APP_DB's PGPORT"), "{labels:?}");
    assert!(!labels.contains(&"REPORTS_DB's PGDATABASE"), "{labels:?}");
    assert!(
        labels.contains(&"S3_WRITER's AWS_ACCESS_KEY_ID"),
        "only what the broker names"
    );
    assert_eq!(g.masked.len(), 4 + 1 + 1 + 2, "{labels:?}");
    // The environment is the same: a public part is still set.
    assert!(
        g.env
            .iter()
            .any(|(k, v)| k == "PGPORT" && v.expose() == "5432")
    );
    // Written back (`--json`), the public names stay.
    let out = serde_json::to_string(&v).expect("serializes");
    assert!(out.contains("\"public_parts\""), "{out}");
}

/// The release answer's shared type (`countersign_common::wire::GrantValues`, which the broker's
/// OpenAPI document describes it by) and this program's reader agree: each reads what the other
/// writes, field by field. The shared type is taken apart whole, so a field added to it fails
/// to compile here until this reader has it too.
#[test]
fn a_release_reads_as_the_shared_answer_type_and_back() {
    use std::collections::BTreeMap;

    use countersign_common::wire::GrantValues;

    let at = chrono::DateTime::parse_from_rfc3339("2026-11-24T14:05:00.12Z")
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok();
    let shared = GrantValues {
        expires_at: at,
        parts: BTreeMap::from([(
            "DB".to_owned(),
            BTreeMap::from([
                ("PGHOST".to_owned(), "db.internal".to_owned()),
                ("PGPASSWORD".to_owned(), APP_PW.to_owned()),
            ]),
        )]),
        public_parts: BTreeMap::from([("DB".to_owned(), vec!["PGHOST".to_owned()])]),
        values: BTreeMap::from([("DB".to_owned(), "postgres://db.internal/app".to_owned())]),
    };
    let text = serde_json::to_string(&shared).expect("serializes");
    let read: Values = serde_json::from_str(&text).expect("this program reads the shared type");
    let GrantValues {
        expires_at,
        parts,
        public_parts,
        values,
    } = serde_json::from_str(&serde_json::to_string(&read).expect("serializes"))
        .expect("the shared type reads this program's");
    assert_eq!(read.expires_at, at);
    assert_eq!(expires_at, at);
    let read_values: BTreeMap<String, String> = read
        .values
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_owned()))
        .collect();
    assert_eq!(read_values, shared.values);
    assert_eq!(values, shared.values);
    let read_parts: BTreeMap<String, BTreeMap<String, String>> = read
        .parts
        .0
        .iter()
        .map(|(s, vars)| {
            let vars = vars
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect();
            (s.clone(), vars)
        })
        .collect();
    assert_eq!(read_parts, shared.parts);
    assert_eq!(parts, shared.parts);
    assert_eq!(read.public_parts, shared.public_parts);
    assert_eq!(public_parts, shared.public_parts);
}
