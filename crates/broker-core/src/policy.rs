//! The policy model of protocol.md §5: each served agent secret has an owner, a tier and a
//! resource name; the tier decides each secret of a request; `rules_version` fingerprints it all.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode};
use crate::ids::{Approver, Login, SecretName};

/// A served secret's tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Released at once.
    Automatic,
    /// Released when its owner approves.
    Owner,
    /// Released when anyone signed in approves.
    Shared,
    /// Never released.
    Locked,
}

impl Tier {
    /// Parses a tier tag; a missing tag is `owner`; an unknown one is `None` (not served).
    pub fn from_tag(tag: Option<&str>) -> Option<Tier> {
        match tag {
            None => Some(Tier::Owner),
            Some("automatic") => Some(Tier::Automatic),
            Some("owner") => Some(Tier::Owner),
            Some("shared") => Some(Tier::Shared),
            Some("locked") => Some(Tier::Locked),
            Some(_) => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Automatic => "automatic",
            Tier::Owner => "owner",
            Tier::Shared => "shared",
            Tier::Locked => "locked",
        }
    }
}

/// Why a secret under the prefix is not served (the reread route's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    Absent,
    OwnerTagMissing,
    NoCurrentValue,
    WrongEncryptionKey,
    TierUnknown,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Absent => "absent",
            Refusal::OwnerTagMissing => "owner-tag-missing",
            Refusal::NoCurrentValue => "no-current-value",
            Refusal::WrongEncryptionKey => "wrong-encryption-key",
            Refusal::TierUnknown => "tier-unknown",
        }
    }
}

/// One served agent secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEntry {
    pub name: SecretName,
    pub owner: Login,
    pub tier: Tier,
    /// The store's name for it (an ARN, a resource name, a file key); for an issued secret,
    /// `<issuer kind>:<prefix>`.
    pub resource_name: String,
    /// For a secret an issuer makes per grant (an `Issuer`): the issuer's kind (`postgres`,
    /// `aws-iam`). `None` for a secret read from the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

impl PolicyEntry {
    /// `stored` or `issued`: what routes and pages show as the secret's kind.
    pub fn kind(&self) -> &'static str {
        if self.issuer.is_some() {
            "issued"
        } else {
            "stored"
        }
    }
}

/// The per-secret decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretDecision {
    Automatic,
    Approval,
    Deny,
}

impl SecretDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretDecision::Automatic => "automatic",
            SecretDecision::Approval => "approval",
            SecretDecision::Deny => "deny",
        }
    }
}

/// What policy says of a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub secrets: Vec<(SecretName, SecretDecision)>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every secret is automatic.
    Granted,
    /// Some secret needs this approver.
    NeedsApproval(Approver),
    /// Some secret is denied.
    Denied,
}

/// The served secrets and their fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    entries: BTreeMap<SecretName, PolicyEntry>,
    rules_version: String,
}

impl Policy {
    pub fn new(entries: impl IntoIterator<Item = PolicyEntry>) -> Self {
        let entries: BTreeMap<_, _> = entries.into_iter().map(|e| (e.name.clone(), e)).collect();
        let mut text = String::new();
        for e in entries.values() {
            text.push_str(&format!(
                "{}\t{}\t{}\t{}",
                e.name,
                e.owner,
                e.tier.as_str(),
                e.resource_name
            ));
            // An issued secret's line says so; a stored one's is as it always was.
            if let Some(kind) = &e.issuer {
                text.push_str(&format!("\tissued:{kind}"));
            }
            text.push('\n');
        }
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
        Self {
            entries,
            rules_version: hex::encode(d.as_ref()),
        }
    }

    pub fn rules_version(&self) -> &str {
        &self.rules_version
    }

    pub fn get(&self, name: &SecretName) -> Option<&PolicyEntry> {
        self.entries.get(name)
    }

    pub fn entries(&self) -> impl Iterator<Item = &PolicyEntry> {
        self.entries.values()
    }

    /// A copy with one secret's entry replaced or removed (a reread).
    pub fn with_entry(&self, name: &SecretName, entry: Option<PolicyEntry>) -> Policy {
        let mut entries = self.entries.clone();
        match entry {
            Some(e) => entries.insert(name.clone(), e),
            None => entries.remove(name),
        };
        Policy::new(entries.into_values())
    }

    /// The decision for one served secret, for a session from which `withheld` secrets are
    /// withheld (they need their owner's approval again).
    pub fn decide_one(
        &self,
        e: &PolicyEntry,
        withheld: &BTreeSet<SecretName>,
    ) -> (SecretDecision, Option<Approver>) {
        match e.tier {
            Tier::Automatic if withheld.contains(&e.name) => (
                SecretDecision::Approval,
                Some(Approver::Person(e.owner.clone())),
            ),
            Tier::Automatic => (SecretDecision::Automatic, None),
            Tier::Owner => (
                SecretDecision::Approval,
                Some(Approver::Person(e.owner.clone())),
            ),
            Tier::Shared => (SecretDecision::Approval, Some(Approver::Anyone)),
            Tier::Locked => (SecretDecision::Deny, None),
        }
    }

    /// Decides a request for `names` (already deduplicated, in the session's order).
    ///
    /// Refusals: UNKNOWN_SECRET for a name policy does not serve; MIXED_APPROVERS when the
    /// secrets needing approval need different approvers.
    pub fn decide(
        &self,
        names: &[SecretName],
        withheld: &BTreeSet<SecretName>,
    ) -> Result<Decided, Error> {
        let mut secrets = Vec::with_capacity(names.len());
        let mut approvers: Vec<Approver> = Vec::new();
        let mut denied = false;
        for n in names {
            let e = self.entries.get(n).ok_or_else(|| {
                Error::with_message(
                    ErrorCode::UNKNOWN_SECRET,
                    format!("no agent secret has this name: {n}"),
                )
            })?;
            let (d, a) = self.decide_one(e, withheld);
            denied |= d == SecretDecision::Deny;
            if let Some(a) = a
                && !approvers.contains(&a)
            {
                approvers.push(a);
            }
            secrets.push((n.clone(), d));
        }
        let outcome = if denied {
            Outcome::Denied
        } else {
            match approvers.len() {
                0 => Outcome::Granted,
                1 => Outcome::NeedsApproval(approvers.remove(0)),
                _ => return Err(ErrorCode::MIXED_APPROVERS.into()),
            }
        };
        Ok(Decided { secrets, outcome })
    }

    /// Whether a grant's decider still has standing for `names` under this policy: an automatic
    /// grant needs every name still automatic for the session; an approved grant needs every name
    /// still released by that approver (or automatically). `Err(SECRET_NOT_IN_STORE)` when a name
    /// is no longer served at all; `Err(GRANT_CHAIN_INVALID)` when standing is lost.
    pub fn check_standing(
        &self,
        names: &[SecretName],
        approver: Option<&Login>,
        withheld: &BTreeSet<SecretName>,
    ) -> Result<(), Error> {
        for n in names {
            let e = self.entries.get(n).ok_or(ErrorCode::SECRET_NOT_IN_STORE)?;
            let ok = match (self.decide_one(e, withheld), approver) {
                ((SecretDecision::Automatic, _), _) => true,
                ((SecretDecision::Approval, Some(rule)), Some(who)) => rule.admits(who),
                _ => false,
            };
            if !ok {
                return Err(ErrorCode::GRANT_CHAIN_INVALID.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, owner: &str, tier: Tier) -> PolicyEntry {
        PolicyEntry {
            name: SecretName::parse(name).expect("name"),
            owner: Login::parse(owner).expect("login"),
            tier,
            resource_name: format!("agents/{}", name.to_lowercase()),
            issuer: None,
        }
    }

    fn n(s: &str) -> SecretName {
        SecretName::parse(s).expect("name")
    }

    #[test]
    fn rules_version_is_sha256_of_sorted_lines() {
        let p = Policy::new([
            entry("B", "b@x.io", Tier::Shared),
            entry("A", "a@x.io", Tier::Owner),
        ]);
        let text = "A\ta@x.io\towner\tagents/a\nB\tb@x.io\tshared\tagents/b\n";
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
        assert_eq!(p.rules_version(), hex::encode(d.as_ref()));
        let q = p.with_entry(&n("B"), Some(entry("B", "c@x.io", Tier::Shared)));
        assert_ne!(p.rules_version(), q.rules_version());
    }

    #[test]
    fn tiers_decide() {
        let p = Policy::new([
            entry("AUTO", "a@x.io", Tier::Automatic),
            entry("MINE", "a@x.io", Tier::Owner),
            entry("THEIRS", "b@x.io", Tier::Owner),
            entry("SHARED", "b@x.io", Tier::Shared),
            entry("LOCKED", "b@x.io", Tier::Locked),
        ]);
        let none = BTreeSet::new();
        assert_eq!(
            p.decide(&[n("AUTO")], &none).map(|d| d.outcome),
            Ok(Outcome::Granted)
        );
        assert_eq!(
            p.decide(&[n("AUTO"), n("MINE")], &none).map(|d| d.outcome),
            Ok(Outcome::NeedsApproval(Approver::Person(
                Login::parse("a@x.io").expect("l")
            )))
        );
        assert_eq!(
            p.decide(&[n("SHARED")], &none).map(|d| d.outcome),
            Ok(Outcome::NeedsApproval(Approver::Anyone))
        );
        assert_eq!(
            p.decide(&[n("MINE"), n("THEIRS")], &none)
                .map_err(|e| e.code),
            Err(ErrorCode::MIXED_APPROVERS)
        );
        assert_eq!(
            p.decide(&[n("MINE"), n("SHARED")], &none)
                .map_err(|e| e.code),
            Err(ErrorCode::MIXED_APPROVERS)
        );
        assert_eq!(
            p.decide(&[n("LOCKED"), n("AUTO")], &none)
                .map(|d| d.outcome),
            Ok(Outcome::Denied)
        );
        assert_eq!(
            p.decide(&[n("NOPE")], &none).map_err(|e| e.code),
            Err(ErrorCode::UNKNOWN_SECRET)
        );
        let withheld: BTreeSet<_> = [n("AUTO")].into();
        assert_eq!(
            p.decide(&[n("AUTO")], &withheld).map(|d| d.secrets[0].1),
            Ok(SecretDecision::Approval)
        );
    }

    #[test]
    fn standing() {
        let p = Policy::new([
            entry("AUTO", "a@x.io", Tier::Automatic),
            entry("MINE", "a@x.io", Tier::Owner),
        ]);
        let a = Login::parse("a@x.io").expect("l");
        let b = Login::parse("b@x.io").expect("l");
        let none = BTreeSet::new();
        assert!(p.check_standing(&[n("AUTO")], None, &none).is_ok());
        assert!(p.check_standing(&[n("MINE")], Some(&a), &none).is_ok());
        assert_eq!(
            p.check_standing(&[n("MINE")], Some(&b), &none)
                .map_err(|e| e.code),
            Err(ErrorCode::GRANT_CHAIN_INVALID)
        );
        assert_eq!(
            p.check_standing(&[n("MINE")], None, &none)
                .map_err(|e| e.code),
            Err(ErrorCode::GRANT_CHAIN_INVALID)
        );
        assert_eq!(
            p.check_standing(&[n("GONE")], None, &none)
                .map_err(|e| e.code),
            Err(ErrorCode::SECRET_NOT_IN_STORE)
        );
    }
}
