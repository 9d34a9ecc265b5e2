//! Operator commands: this machine's login acting for its operator on the four operator
//! routes, with launcher proofs the helper signs only for a caller outside every session.
//!
//! Each answer is read as the broker's own type (`countersign_common::wire`) and printed as it
//! came with `--json` (fields a newer broker adds included).

use countersign_common::wire::{self, GrantItem, GrantList, MachineLogin, MachineLoginList};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::args::{Operator, OperatorAction};
use crate::ctx::{Ctx, json_fail};
use crate::exit::{self, Fail};

pub async fn operator(ctx: &Ctx, op: Operator) -> Result<u8, Fail> {
    match op {
        Operator::Machines(OperatorAction::List) => {
            let (raw, v): (_, MachineLoginList) = call(ctx, "GET", "/v1/operator/machines").await?;
            ctx.print(&raw, || {
                lines(v.credentials.iter().map(machine_line), "no machine logins")
            });
        }
        Operator::Machines(OperatorAction::Revoke { id }) => {
            let path = format!("/v1/operator/machines/{id}/revoke");
            let (raw, v): (_, wire::StateAnswer) = call(ctx, "POST", &path).await?;
            ctx.print(&raw, || format!("machine login {id}: {}", v.state));
        }
        Operator::Grants(OperatorAction::List) => {
            let (raw, v): (_, GrantList) = call(ctx, "GET", "/v1/operator/grants").await?;
            ctx.print(&raw, || {
                lines(v.grants.iter().map(grant_line), "no live grants")
            });
        }
        Operator::Grants(OperatorAction::Revoke { id }) => {
            let path = format!("/v1/operator/grants/{id}/revoke");
            let (raw, v): (_, wire::StateAnswer) = call(ctx, "POST", &path).await?;
            ctx.print(&raw, || format!("grant {id}: {}", v.state));
        }
    }
    Ok(exit::SUCCESS)
}

/// The broker's answer to `method path` with a launcher proof: as it came, and typed.
async fn call<T: DeserializeOwned>(
    ctx: &Ctx,
    method: &str,
    path: &str,
) -> Result<(Value, T), Fail> {
    let raw: Value = ctx.launcher_call(method, path).await?.json()?;
    let typed = serde_json::from_value(raw.clone()).map_err(json_fail)?;
    Ok((raw, typed))
}

fn lines(lines: impl Iterator<Item = String>, empty: &str) -> String {
    let lines: Vec<String> = lines.collect();
    if lines.is_empty() {
        empty.to_owned()
    } else {
        lines.join("\n")
    }
}

fn machine_line(c: &MachineLogin) -> String {
    format!(
        "{}  {}  approved by {}  until {}{}",
        c.credential_id,
        c.host,
        if c.approved_by.is_empty() {
            "-"
        } else {
            &c.approved_by
        },
        wire::rfc3339(&c.expires_at),
        if c.expired { " (expired)" } else { "" }
    )
}

fn grant_line(g: &GrantItem) -> String {
    format!(
        "{}  {}  {}  {}  expires {}",
        g.grant_id,
        g.names.join(","),
        g.granted,
        g.enrollment.runtime_id,
        g.expires_at
            .as_ref()
            .map_or_else(|| "when the session ends".to_owned(), wire::rfc3339),
    )
}
