//! Server-rendered HTML: the layout and the pieces the pages share. Every text that comes from
//! a request, the broker or the database goes through [`esc`]; no inline script or style is
//! emitted, so the Content-Security-Policy can forbid both.

use std::fmt::Write;

use countersign_console_core::broker::{CredentialRecord, GrantItem, MachineLogin};
use countersign_console_core::console::{TokenInfo, rfc3339};
use countersign_console_core::{Human, Login, Time};

/// HTML-escapes text for element content and double-quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1 h 30 min`, `12 min`, `45 s`.
pub fn duration(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (
        secs / 86400,
        secs % 86400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

/// A time for people, in a `<time>` element.
pub fn when(t: &Time) -> String {
    format!(
        "<time datetime=\"{}\">{}</time>",
        esc(&rfc3339(t)),
        esc(&t.format("%Y-%m-%d %H:%M UTC").to_string())
    )
}

/// A countdown the script keeps current.
pub fn time_left(until: &Time, now: &Time) -> String {
    let secs = (*until - *now).num_seconds();
    let text = if secs > 0 {
        format!("{} left", duration(secs))
    } else {
        "expired".to_owned()
    };
    format!(
        "<span class=\"countdown\" data-expires-at=\"{}\">{}</span>",
        esc(&rfc3339(until)),
        esc(&text)
    )
}

/// The page around `body`.
pub fn layout(title: &str, human: Option<&Human>, active: &str, body: &str) -> String {
    let mut nav = String::new();
    if let Some(h) = human {
        let item = |href: &str, label: &str| {
            format!(
                "<a href=\"{href}\"{}>{label}</a>",
                if href == active {
                    " aria-current=\"page\""
                } else {
                    ""
                }
            )
        };
        let _ = write!(
            nav,
            "<nav>{}{}{}{}{}</nav>\
             <form class=\"who\" method=\"post\" action=\"/sign-out\">\
             <span>{}</span><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" class=\"link\">Sign out</button></form>",
            item("/", "Inbox"),
            item("/machines/approve", "Approve a machine"),
            item("/grants", "Grants"),
            item("/machines", "Machines"),
            item("/tokens", "Agent tokens"),
            esc(h.login.as_str()),
            esc(&h.csrf_token),
        );
    }
    let csrf = human
        .map(|h| {
            format!(
                "<meta name=\"csrf-token\" content=\"{}\">",
                esc(&h.csrf_token)
            )
        })
        .unwrap_or_default();
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{csrf}\
         <title>{} · Countersign</title>\
         <link rel=\"stylesheet\" href=\"/assets/console.css\">\
         <script src=\"/assets/console.js\" defer></script></head>\
         <body><header><a class=\"brand\" href=\"/\">Countersign</a>{nav}</header>\
         <main>{body}</main></body></html>\n",
        esc(title)
    )
}

/// A notice box (`kind`: `error`, `ok`, `info`).
pub fn notice(kind: &str, text: &str) -> String {
    format!(
        "<p class=\"notice {kind}\" role=\"status\">{}</p>",
        esc(text)
    )
}

fn who_decides(rec: &CredentialRecord, me: &Login) -> String {
    if rec.approver == "anyone" {
        "anyone signed in".into()
    } else if rec.approver == me.as_str() {
        "you".into()
    } else {
        rec.approver.clone()
    }
}

/// Where a request comes from, in words.
pub fn session_text(rec: &CredentialRecord) -> String {
    match &rec.enrollment {
        Some(e) => {
            let mut s = format!("{} {}", e.kind, e.runtime_id);
            if let Some(slot) = &e.slot {
                let _ = write!(s, " (slot {slot})");
            }
            match e.operator.as_deref() {
                Some(o) if !o.is_empty() => {
                    let _ = write!(s, " on {o}'s machine");
                }
                _ => {}
            }
            if let Some(n) = rec
                .session
                .request
                .as_ref()
                .or(rec.session.enrollment.as_ref())
            {
                let _ = write!(s, " · session {n}");
            }
            s
        }
        None => "a machine logging in".into(),
    }
}

fn lifetime_text(rec: &CredentialRecord) -> String {
    match rec.lifetime_seconds {
        Some(s) => duration(s as i64),
        None => "until the session ends".into(),
    }
}

fn title_of(rec: &CredentialRecord) -> String {
    if rec.is_machine_login() {
        format!(
            "Machine login for {}",
            rec.identifiers.first().map(String::as_str).unwrap_or("?")
        )
    } else {
        rec.identifiers.join(", ")
    }
}

/// The inbox's rows (the page and the fragment the page polls render the same thing).
pub fn inbox_rows(records: Option<&[CredentialRecord]>, me: &Login, now: &Time) -> String {
    let Some(records) = records else {
        return notice("info", "No broker is configured for this console.");
    };
    if records.is_empty() {
        return "<p class=\"empty\" data-count=\"0\">Nothing waits for you.</p>".into();
    }
    let mut out = format!("<ul class=\"requests\" data-count=\"{}\">", records.len());
    for rec in records {
        let id = esc(&rec.record_id);
        let kind = if rec.is_machine_login() {
            "Machine login"
        } else {
            "Secret request"
        };
        let actions = if rec.is_machine_login() {
            "<a class=\"button\" href=\"/machines/approve\">Type its code to decide…</a>".to_owned()
        } else {
            format!(
                "<button type=\"button\" class=\"approve\" data-action=\"approve\" data-record=\"{id}\">Approve</button>\
                 <button type=\"button\" class=\"deny\" data-action=\"deny\" data-record=\"{id}\">Deny</button>"
            )
        };
        let _ = write!(
            out,
            "<li class=\"request\" data-record-id=\"{id}\">\
             <div class=\"head\"><span class=\"kind\">{kind}</span>\
             <a class=\"title\" href=\"/requests/{id}\">{}</a></div>\
             <p class=\"reason\">{}</p>\
             <dl class=\"facts\">\
             <dt>Requested by</dt><dd>{}</dd>\
             <dt>Lifetime asked</dt><dd>{}</dd>\
             <dt>Time left</dt><dd>{}</dd>\
             <dt>Decided by</dt><dd>{}</dd></dl>\
             <div class=\"actions\">{actions}</div></li>",
            esc(&title_of(rec)),
            esc(&rec.reason),
            esc(&session_text(rec)),
            esc(&lifetime_text(rec)),
            time_left(&rec.expires_at, now),
            esc(&who_decides(rec, me)),
        );
    }
    out.push_str("</ul>");
    out
}

/// One record's facts as a definition list.
pub fn record_facts(rec: &CredentialRecord, me: &Login, now: &Time) -> String {
    let mut out = String::from("<dl class=\"facts wide\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(out, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    };
    if rec.is_machine_login() {
        row(
            "Host",
            esc(rec.identifiers.first().map(String::as_str).unwrap_or("?")),
        );
        row("Person", esc(&rec.approver));
        if let Some(s) = &rec.service {
            row("Service", esc(s));
        }
    } else {
        row("Secrets", esc(&rec.identifiers.join(", ")));
        row("Requested by", esc(&session_text(rec)));
        row("Lifetime asked", esc(&lifetime_text(rec)));
    }
    row("Reason", esc(&rec.reason));
    row("Requested", when(&rec.requested_at));
    row("State", esc(&rec.state));
    if rec.state == "pending" {
        row("Time left", time_left(&rec.expires_at, now));
    }
    row("Decided by", esc(&who_decides(rec, me)));
    if let Some(d) = &rec.decided {
        row("Decision", format!("{} {}", esc(&d.event), when(&d.at)));
    }
    row("Record", format!("<code>{}</code>", esc(&rec.record_id)));
    out.push_str("</dl>");
    out
}

/// Live grants with revoke.
pub fn grants_table(grants: &[GrantItem], now: &Time) -> String {
    if grants.is_empty() {
        return "<p class=\"empty\">No live grants.</p>".into();
    }
    let mut out = String::from(
        "<table class=\"list\"><thead><tr><th>Secrets</th><th>Session</th><th>Granted</th>\
         <th>Expires</th><th></th></tr></thead><tbody>",
    );
    for g in grants {
        let e = &g.enrollment;
        let mut session = format!("{} {}", e.kind, e.runtime_id);
        if let Some(o) = e.operator.as_deref().filter(|o| !o.is_empty()) {
            let _ = write!(session, " on {o}'s machine");
        }
        let granted = match (&g.granted[..], &g.approver) {
            ("approval", Some(a)) => format!("approved by {a}"),
            ("automatic", _) => "by policy".to_owned(),
            (other, _) => other.to_owned(),
        };
        let expires = match &g.expires_at {
            Some(t) => time_left(t, now),
            None => "when the session ends".to_owned(),
        };
        let id = esc(&g.grant_id);
        let _ = write!(
            out,
            "<tr data-grant-id=\"{id}\"><td>{}</td><td>{}</td><td>{} {}</td><td>{expires}</td>\
             <td><button type=\"button\" class=\"deny\" data-action=\"revoke-grant\" data-id=\"{id}\">Revoke</button></td></tr>",
            esc(&g.names.join(", ")),
            esc(&session),
            esc(&granted),
            when(&g.created_at),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// Machine logins with revoke.
pub fn machines_table(machines: &[MachineLogin], now: &Time) -> String {
    if machines.is_empty() {
        return "<p class=\"empty\">No machine logins.</p>".into();
    }
    let mut out = String::from(
        "<table class=\"list\"><thead><tr><th>Host</th><th>For</th><th>Approved by</th>\
         <th>Issued</th><th>Expires</th><th></th></tr></thead><tbody>",
    );
    for m in machines {
        let who = match (&m.service, &m.subject) {
            (Some(s), Some(sub)) => format!("service {s} ({sub})"),
            (Some(s), None) => format!("service {s}"),
            _ => "a person's machine".to_owned(),
        };
        let approved = if m.approved_by.is_empty() {
            "token login".to_owned()
        } else {
            m.approved_by.clone()
        };
        let expires = if m.expired {
            "expired (sessions still running)".to_owned()
        } else {
            time_left(&m.expires_at, now)
        };
        let id = esc(&m.credential_id);
        let _ = write!(
            out,
            "<tr data-credential-id=\"{id}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{expires}</td>\
             <td><button type=\"button\" class=\"deny\" data-action=\"revoke-machine\" data-id=\"{id}\">Revoke</button></td></tr>",
            esc(&m.host),
            esc(&who),
            esc(&approved),
            when(&m.issued_at),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// Personal tokens with revoke.
pub fn tokens_table(tokens: &[TokenInfo]) -> String {
    if tokens.is_empty() {
        return "<p class=\"empty\">No personal tokens.</p>".into();
    }
    let mut out = String::from(
        "<table class=\"list\"><thead><tr><th>Name</th><th>Created</th><th></th></tr></thead><tbody>",
    );
    for t in tokens {
        let id = esc(&t.id);
        let _ = write!(
            out,
            "<tr data-token-id=\"{id}\"><td>{}</td><td><time datetime=\"{}\">{}</time></td>\
             <td><button type=\"button\" class=\"deny\" data-action=\"revoke-token\" data-id=\"{id}\">Revoke</button></td></tr>",
            esc(&t.name),
            esc(&t.created_at),
            esc(&t.created_at.replace('T', " ").replace('Z', " UTC")),
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_durations() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(600), "10 min");
        assert_eq!(duration(3600), "1 h");
        assert_eq!(duration(5400), "1 h 30 min");
        assert_eq!(duration(86400 + 7200), "1 d 2 h");
    }
}
