//! What the broker-over-a-cloud-store tests (`stores_aws`, `stores_gcp`) ask of the broker: a
//! grant made automatically or by an approver, a grant's value, how a new request is decided.

use countersign_e2e::http::*;

/// An automatic grant of `name`: its id.
pub async fn auto_grant(s: &Session, name: &str) -> anyhow::Result<String> {
    let r = s.request(&[name]).await?.expect(200);
    assert_eq!(r.s("state"), "granted", "{name}: {}", r.text);
    Ok(r.s("grant_id"))
}

/// A grant of `name` approved by `approver`: its id.
pub async fn approved_grant(
    tb: &TestBroker,
    s: &Session,
    name: &str,
    approver: &str,
) -> anyhow::Result<String> {
    let r = s.request(&[name]).await?.expect(200);
    assert_eq!(r.s("state"), "pending", "{name}: {}", r.text);
    let a = tb
        .approve(&r.s("record_id"), approver, None)
        .await?
        .expect(200);
    Ok(a.s("grant_id"))
}

/// The value a grant releases for `name`.
pub async fn value_of(s: &Session, grant_id: &str, name: &str) -> anyhow::Result<String> {
    let v = s.values(grant_id).await?.expect(200);
    Ok(v.get("values")[name]
        .as_str()
        .unwrap_or_else(|| panic!("no value of {name}: {}", v.text))
        .to_owned())
}

/// A new request's (state, approver).
pub async fn decided(s: &Session, name: &str) -> anyhow::Result<(String, String)> {
    let r = s.request(&[name]).await?.expect(200);
    let approver = r.get("approver").as_str().unwrap_or("").to_owned();
    Ok((r.s("state"), approver))
}

pub fn pending(approver: &str) -> (String, String) {
    ("pending".into(), approver.into())
}

pub fn granted() -> (String, String) {
    ("granted".into(), String::new())
}
