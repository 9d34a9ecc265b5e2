//! The grants page's view: each grant the person may see, and for one of dynamic secrets
//! (issue 49) each credential an issuer made for it, its state in words ("live", "being
//! destroyed", "destroyed", "destroy failing: <the issuer's error> — next try <time>"). An
//! ended grant is listed while its credentials are destroyed: it shows how it ended ("revoked",
//! "expired", "session ended") and offers no revoke button. Times are [`When`]s, which the
//! pages' script shows as words relative to now.

use askama::Template;
use countersign_console_core::Time;
use countersign_console_core::broker::{GrantItem, IssuedCredential, issuer_words};

use super::{Chrome, Notice, TimeLeft, When, time_left, when};

/// One issued credential, in words.
#[derive(Debug, Clone)]
pub struct CredentialRow {
    pub secret: String,
    /// What the issuer made, in words: `PostgreSQL role`, `AWS IAM user`.
    pub what: String,
    /// The issuer's name for it (the role's, the user's).
    pub name: String,
    /// The broker's state (`minting`, `live`, `destroying`, `destroyed`), for styles and tests.
    pub state: String,
    /// The state in words.
    pub words: String,
    /// Whether the destroy is failing (its words carry the issuer's error).
    pub failing: bool,
    /// The next try of a failing destroy.
    pub next_try: Option<When>,
    /// When it was destroyed.
    pub destroyed: Option<When>,
}

impl CredentialRow {
    pub fn of(c: &IssuedCredential) -> Self {
        let failing = c.state == "destroying" && c.error.is_some();
        let words = match (c.state.as_str(), &c.error) {
            ("minting", _) => "being made".to_owned(),
            ("live", _) => "live".to_owned(),
            ("destroying", Some(e)) => format!("destroy failing: {e}"),
            ("destroying", None) => "being destroyed".to_owned(),
            ("destroyed", _) => "destroyed".to_owned(),
            (other, _) => other.to_owned(),
        };
        let noun = match c.issuer.as_str() {
            "postgres" => " role",
            "aws-iam" => " user",
            _ => " credential",
        };
        Self {
            secret: c.secret.clone(),
            what: format!("{}{noun}", issuer_words(&c.issuer)),
            name: c.name.clone(),
            state: c.state.clone(),
            words,
            failing,
            next_try: c.next_attempt_at.as_ref().filter(|_| failing).map(when),
            destroyed: c.destroyed_at.as_ref().map(when),
        }
    }
}

#[derive(Debug, Clone)]
pub struct GrantRow {
    pub id: String,
    pub names: String,
    /// The session in words (its label, its machine); `session_raw` its ids, on hover.
    pub session: String,
    pub session_raw: String,
    pub granted: String,
    pub created: When,
    pub expires: Option<TimeLeft>,
    /// The broker's state: `live`, `revoked`, `expired`, `ended`.
    pub state: String,
    /// How an ended grant ended, in words; `None` while it is live (only a live one is revoked).
    pub ended: Option<String>,
    pub credentials: Vec<CredentialRow>,
}

impl GrantRow {
    pub fn of(g: &GrantItem, now: &Time) -> Self {
        let e = &g.enrollment;
        let session = e.requester(None).phrase();
        let granted = match (&g.granted[..], &g.approver) {
            ("approval", Some(a)) => format!("approved by {a}"),
            ("automatic", _) => "by policy".to_owned(),
            (other, _) => other.to_owned(),
        };
        let ended = (!g.is_live()).then(|| match g.state.as_str() {
            "ended" => "session ended".to_owned(),
            other => other.to_owned(),
        });
        Self {
            id: g.grant_id.clone(),
            names: g.names.join(", "),
            session,
            session_raw: e.raw(None),
            granted,
            created: when(&g.created_at),
            expires: g.expires_at.as_ref().map(|t| time_left(t, now)),
            state: g.state.clone(),
            ended,
            credentials: g.credentials.iter().map(CredentialRow::of).collect(),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "grants.html")]
pub struct GrantsPage<'a> {
    pub chrome: Chrome<'a>,
    pub list: Result<Vec<GrantRow>, Notice>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use countersign_console_core::broker::EnrollmentSummary;

    fn t(s: &str) -> Time {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.to_utc())
            .unwrap_or_default()
    }

    fn credential(state: &str, error: Option<&str>) -> IssuedCredential {
        IssuedCredential {
            secret: "APP_DB".into(),
            issuer: "postgres".into(),
            name: "cs_0f3a".into(),
            state: state.into(),
            error: error.map(str::to_owned),
            next_attempt_at: Some(t("2026-11-24T14:12:00Z")),
            destroyed_at: (state == "destroyed").then(|| t("2026-11-24T14:09:00Z")),
        }
    }

    fn grant(state: &str, credentials: Vec<IssuedCredential>) -> GrantItem {
        GrantItem {
            grant_id: "6d1f0c2e-0000-4000-8000-000000000001".into(),
            granted: "approval".into(),
            record_id: None,
            enrollment: EnrollmentSummary {
                kind: "session".into(),
                runtime_id: "laptop/psql".into(),
                operator: "ada@example.com".into(),
                slot: None,
            },
            names: vec!["APP_DB".into()],
            approver: Some("ada@example.com".into()),
            expires_at: None,
            created_at: t("2026-11-24T14:00:00Z"),
            state: state.into(),
            credentials,
        }
    }

    fn words(c: &IssuedCredential) -> String {
        CredentialRow::of(c).words
    }

    #[test]
    fn each_credential_state_in_words() {
        assert_eq!(words(&credential("minting", None)), "being made");
        assert_eq!(words(&credential("live", None)), "live");
        assert_eq!(words(&credential("destroying", None)), "being destroyed");
        assert_eq!(words(&credential("destroyed", None)), "destroyed");
        let failing = CredentialRow::of(&credential("destroying", Some("connection refused")));
        assert_eq!(failing.words, "destroy failing: connection refused");
        assert!(failing.failing && failing.next_try.is_some());
        assert_eq!(failing.what, "PostgreSQL role");
        // The next try of a destroy that is not failing is not shown.
        assert!(
            CredentialRow::of(&credential("destroying", None))
                .next_try
                .is_none()
        );
    }

    #[test]
    fn an_ended_grant_says_how_and_offers_no_revoke() -> Result<(), askama::Error> {
        let now = t("2026-11-24T14:10:00Z");
        let page = |g: GrantItem| {
            GrantsPage {
                chrome: Chrome {
                    title: "Grants",
                    human: None,
                    active: "/grants",
                },
                list: Ok(vec![GrantRow::of(&g, &now)]),
            }
            .render()
        };
        let live = page(grant("live", vec![credential("live", None)]))?;
        assert!(live.contains("data-action=\"revoke-grant\""), "{live}");
        assert!(
            live.contains("PostgreSQL role <code>cs_0f3a</code>"),
            "{live}"
        );
        for (state, said) in [
            ("revoked", "revoked"),
            ("expired", "expired"),
            ("ended", "session ended"),
        ] {
            let html = page(grant(
                state,
                vec![credential("destroying", Some("permission denied <x>"))],
            ))?;
            assert!(!html.contains("data-action=\"revoke-grant\""), "{html}");
            assert!(html.contains(&format!("data-ended=\"{state}\"")), "{html}");
            assert!(html.contains(said), "{html}");
            assert!(
                html.contains("destroy failing: permission denied &#60;x&#62;"),
                "{html}"
            );
            assert!(
                html.contains("next try <time datetime=\"2026-11-24T14:12:00Z\""),
                "{html}"
            );
        }
        // A grant without credentials shows none.
        let plain = page(grant("live", Vec::new()))?;
        assert!(!plain.contains("class=\"credentials\""), "{plain}");
        Ok(())
    }
}
