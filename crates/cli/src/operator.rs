//! Operator commands: this machine's login acting for its operator on the four operator
//! routes, with launcher proofs the helper signs only for a caller outside every session.

use serde_json::Value;

use crate::args::{Operator, OperatorAction};
use crate::ctx::Ctx;
use crate::exit::{self, Fail};

pub async fn operator(ctx: &Ctx, op: Operator) -> Result<u8, Fail> {
    match op {
        Operator::Machines(OperatorAction::List) => {
            let v: Value = ctx
                .launcher_call("GET", "/v1/operator/machines")
                .await?
                .json()?;
            ctx.print(&v, || {
                list(&v, "credentials", machine_line, "no machine logins")
            });
        }
        Operator::Machines(OperatorAction::Revoke { id }) => {
            let v: Value = ctx
                .launcher_call("POST", &format!("/v1/operator/machines/{id}/revoke"))
                .await?
                .json()?;
            ctx.print(&v, || format!("machine login {id}: {}", state(&v)));
        }
        Operator::Grants(OperatorAction::List) => {
            let v: Value = ctx
                .launcher_call("GET", "/v1/operator/grants")
                .await?
                .json()?;
            ctx.print(&v, || list(&v, "grants", grant_line, "no live grants"));
        }
        Operator::Grants(OperatorAction::Revoke { id }) => {
            let v: Value = ctx
                .launcher_call("POST", &format!("/v1/operator/grants/{id}/revoke"))
                .await?
                .json()?;
            ctx.print(&v, || format!("grant {id}: {}", state(&v)));
        }
    }
    Ok(exit::SUCCESS)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

fn state(v: &Value) -> &str {
    s(v, "state")
}

fn list(v: &Value, key: &str, line: fn(&Value) -> String, empty: &str) -> String {
    let lines: Vec<String> = v
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(line)
        .collect();
    if lines.is_empty() {
        empty.to_owned()
    } else {
        lines.join("\n")
    }
}

fn machine_line(c: &Value) -> String {
    format!(
        "{}  {}  approved by {}  until {}{}",
        s(c, "credential_id"),
        s(c, "host"),
        s(c, "approved_by"),
        s(c, "expires_at"),
        if c.get("expired").and_then(Value::as_bool) == Some(true) {
            " (expired)"
        } else {
            ""
        }
    )
}

fn grant_line(g: &Value) -> String {
    let names: Vec<&str> = g
        .get("names")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!(
        "{}  {}  {}  {}  expires {}",
        s(g, "grant_id"),
        names.join(","),
        s(g, "granted"),
        g.pointer("/enrollment/runtime_id")
            .and_then(Value::as_str)
            .unwrap_or("-"),
        g.get("expires_at")
            .and_then(Value::as_str)
            .unwrap_or("when the session ends"),
    )
}
