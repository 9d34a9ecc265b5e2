//! Passkeys (issue 29): a person's registration, naming and removal, the approval statement
//! they countersign, and the operator's enrollment codes. The broker is the verifier of record:
//! it keeps the public keys (sealed, in the audit chain) and checks every countersignature
//! itself; the console only carries the ceremonies between the browser and here.
//!
//! - A first passkey needs an operator's enrollment code (`countersign-broker passkeys
//!   enroll-code PERSON`: sealed, short-lived, spent once); a later one an assertion, over the
//!   same registration challenge, from a passkey the person already has. So neither the
//!   console (which holds no code and no passkey) nor a database writer (whose rows fail their
//!   seal) adds a passkey the broker accepts.
//! - An approval countersigned: [`Broker::statement_for`] issues the statement and its nonce;
//!   [`Broker::approve`] spends the nonce once and verifies the assertion in the decision's
//!   transaction, and the decision's seal covers it.

use countersign_proto::webauthn::verify_registration;

use super::{Broker, Fail, read, transact};
use crate::clock::Time;
use crate::error::{Error, ErrorCode};
use crate::ids::{Login, RecordId};
use crate::model::{Countersignature, Passkey, RecordState};
use crate::passkey::{
    self as pk, CountersignError, Decision, Nonce, PasskeySettings, Purpose, Requirement, Statement,
};
use crate::storage::Tx;

/// What a registration page needs for `navigator.credentials.create()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationOffer {
    pub nonce: Nonce,
    /// The WebAuthn challenge ([`pk::registration_challenge`] of the nonce).
    pub challenge: [u8; 32],
    pub rp_id: String,
    /// A stable, opaque user handle for the person (not their login).
    pub user_handle: [u8; 16],
    /// The person's live passkeys: to exclude from creation, and to endorse the new one.
    pub passkeys: Vec<Passkey>,
}

/// A registration as the browser answered it.
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub nonce: String,
    /// Base64url, as the browser's `clientDataJSON` and `attestationObject`.
    pub client_data: String,
    pub attestation_object: String,
    /// What allows it: an operator's enrollment code, or an assertion from a registered
    /// passkey over the same challenge (its `nonce` is the registration's).
    pub enroll_code: Option<String>,
    pub endorsement: Option<Countersignature>,
}

/// What an approval page shows and signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementOffer {
    pub statement: Statement,
    pub nonce: Nonce,
    /// What policy asks of the countersignature; none: it is optional.
    pub requirement: Option<Requirement>,
    /// The approver's live passkeys the requirement admits.
    pub passkeys: Vec<Passkey>,
}

fn invalid(why: impl std::fmt::Display) -> Error {
    Error::with_message(
        ErrorCode::PASSKEY_INVALID,
        format!("{}: {why}", ErrorCode::PASSKEY_INVALID.message()),
    )
}

fn b64(field: &'static str, s: &str) -> Result<Vec<u8>, Error> {
    countersign_proto::b64::decode(s).map_err(|_| {
        Error::with_message(
            ErrorCode::INVALID_PASSKEY,
            format!("{field} must be base64url"),
        )
    })
}

/// A passkey's name: 1 to 64 characters, no control or format characters.
fn check_name(name: &str) -> Result<String, Error> {
    let name = name.trim();
    let ok = !name.is_empty()
        && name.chars().count() <= 64
        && !name.chars().any(char::is_control)
        && !crate::ids::has_format_char(name);
    if ok {
        Ok(name.to_owned())
    } else {
        Err(Error::with_message(
            ErrorCode::INVALID_PASSKEY,
            "name must be 1 to 64 characters with no control character",
        ))
    }
}

impl Broker {
    fn passkey_settings(&self) -> Result<&PasskeySettings, Error> {
        self.config
            .passkeys
            .as_ref()
            .ok_or_else(|| ErrorCode::PASSKEYS_OFF.into())
    }

    /// Spends a nonce once (durably: a replay after a restart or on another replica is
    /// refused by the database).
    async fn spend_nonce(
        &self,
        purpose: Purpose<'_>,
        nonce: &str,
        until: crate::clock::Time,
    ) -> Result<(), Error> {
        let now = self.now();
        let fresh = self
            .storage
            .remember_once(purpose.scope(), nonce, until, now)
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "spend passkey nonce"))?;
        if fresh {
            Ok(())
        } else {
            Err(invalid("its nonce was already used"))
        }
    }

    /// What `person`'s browser needs to create a passkey.
    pub async fn passkey_offer(&self, person: &Login) -> Result<RegistrationOffer, Error> {
        let settings = self.passkey_settings()?;
        let nonce = pk::issue_nonce(
            &self.sealer,
            &*self.entropy,
            Purpose::Register,
            person.as_str(),
            self.now(),
            pk::NONCE_LIFETIME,
        );
        let passkeys = self.passkeys_of(person).await?;
        let mut user_handle = [0u8; 16];
        let h = aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA256,
            format!("countersign user handle\n{person}").as_bytes(),
        );
        user_handle.copy_from_slice(&h.as_ref()[..16]);
        Ok(RegistrationOffer {
            challenge: pk::registration_challenge(&nonce.value),
            nonce,
            rp_id: settings.rp_id.clone(),
            user_handle,
            passkeys,
        })
    }

    /// `person`'s live passkeys, oldest first.
    pub async fn passkeys_of(&self, person: &Login) -> Result<Vec<Passkey>, Error> {
        let all = read!(self, "list passkeys", |tx| Ok::<_, Fail>(
            tx.passkeys_of(person).await?
        ))?;
        Ok(all.into_iter().filter(Passkey::is_live).collect())
    }

    /// Registers `person`'s new passkey: the registration verified against its challenge, and
    /// allowed by an enrollment code or by an assertion from a passkey they already have.
    pub async fn register_passkey(
        &self,
        person: &Login,
        r: Registration,
    ) -> Result<Passkey, Error> {
        self.audit_gate()?;
        let settings = self.passkey_settings()?;
        let now = self.now();
        let name = check_name(&r.name)?;
        let until = pk::check_nonce(
            &self.sealer,
            &r.nonce,
            Purpose::Register,
            person.as_str(),
            now,
            pk::NONCE_LIFETIME,
        )
        .map_err(invalid)?;
        let challenge = pk::registration_challenge(&r.nonce);
        let (client, object) = (
            b64("client_data", &r.client_data)?,
            b64("attestation_object", &r.attestation_object)?,
        );
        let created = settings
            .check(&challenge, |e| verify_registration(&client, &object, e))
            .map_err(invalid)?;
        let code_until = self.enroll_code_until(person, &r, now)?;
        let id = countersign_proto::b64::encode(&created.credential_id);
        // A credential already registered is refused before anything is spent (the check is
        // made again in the write's transaction).
        let exists = read!(self, "read passkey", |tx| Ok::<_, Fail>(
            tx.get_passkey(&id).await?.is_some()
        ))?;
        if exists {
            return Err(ErrorCode::PASSKEY_EXISTS.into());
        }
        // Spent before the write: a registration answered once is never answered twice.
        self.spend_nonce(Purpose::Register, &r.nonce, until).await?;
        if let (Some(code), Some(until)) = (&r.enroll_code, code_until) {
            self.spend_nonce(Purpose::Enroll, code.trim(), until)
                .await
                .map_err(|_| {
                    Error::with_message(
                        ErrorCode::PASSKEY_ENROLLMENT_REQUIRED,
                        "the enrollment code was already used",
                    )
                })?;
        }
        let passkey = Passkey {
            id: id.clone(),
            person: person.clone(),
            name,
            key: created.key.to_text(),
            aaguid: hex::encode(created.aaguid),
            backup_eligible: created.backup_eligible,
            sign_count: created.sign_count,
            created_at: now,
            removed_at: None,
            enrolled_by: match &r.endorsement {
                Some(e) if r.enroll_code.is_none() => format!("passkey:{}", e.credential),
                _ => "code".to_owned(),
            },
            seal: String::new(),
        };
        let endorsement = r.endorsement.filter(|_| r.enroll_code.is_none());
        transact!(self, "register passkey", |tx| {
            if tx.get_passkey(&id).await?.is_some() {
                return Err(Error::new(ErrorCode::PASSKEY_EXISTS).into());
            }
            if let Some(e) = &endorsement {
                Self::endorsed_by(tx, settings, person, e, &challenge).await?;
            }
            tx.put_passkey(&passkey).await?;
            Ok::<_, Fail>(())
        })?;
        tracing::info!(person = %person, passkey = %passkey.id, enrolled_by = %passkey.enrolled_by, "passkey registered");
        Ok(passkey)
    }

    /// Until when a registration's enrollment code holds (checked, not yet spent); `None`
    /// when an endorsing assertion allows it instead, `PASSKEY_ENROLLMENT_REQUIRED` when
    /// neither is given.
    fn enroll_code_until(
        &self,
        person: &Login,
        r: &Registration,
        now: Time,
    ) -> Result<Option<Time>, Error> {
        match (&r.enroll_code, &r.endorsement) {
            (Some(code), _) => pk::check_nonce(
                &self.sealer,
                code.trim(),
                Purpose::Enroll,
                person.as_str(),
                now,
                pk::ENROLL_CODE_MAX_LIFETIME,
            )
            .map(Some)
            .map_err(|e| {
                Error::with_message(
                    ErrorCode::PASSKEY_ENROLLMENT_REQUIRED,
                    format!("the enrollment code was refused: {e}"),
                )
            }),
            (None, Some(_)) => Ok(None),
            (None, None) => Err(ErrorCode::PASSKEY_ENROLLMENT_REQUIRED.into()),
        }
    }

    /// Checks an endorsing assertion by one of `person`'s live passkeys over the new one's
    /// challenge, and writes the endorsing passkey's new signature count.
    async fn endorsed_by(
        tx: &mut dyn Tx,
        settings: &PasskeySettings,
        person: &Login,
        e: &Countersignature,
        challenge: &[u8; 32],
    ) -> Result<(), Fail> {
        let mut by = tx
            .get_passkey(&e.credential)
            .await?
            .filter(|p| p.is_live() && &p.person == person)
            .ok_or_else(|| {
                Error::with_message(
                    ErrorCode::PASSKEY_ENROLLMENT_REQUIRED,
                    "the endorsing passkey is not one of yours",
                )
            })?;
        let asserted = endorse(settings, &by, e, challenge).map_err(|why| {
            Error::with_message(
                ErrorCode::PASSKEY_ENROLLMENT_REQUIRED,
                format!("the endorsing assertion was refused: {why}"),
            )
        })?;
        by.sign_count = asserted;
        tx.put_passkey(&by).await?;
        Ok(())
    }

    /// Renames one of `person`'s passkeys.
    pub async fn rename_passkey(
        &self,
        person: &Login,
        id: &str,
        name: &str,
    ) -> Result<Passkey, Error> {
        self.passkey_settings()?;
        let name = check_name(name)?;
        transact!(self, "rename passkey", |tx| {
            let mut p = own_passkey(tx, person, id).await?;
            p.name = name.clone();
            tx.put_passkey(&p).await?;
            Ok::<_, Fail>(p)
        })
    }

    /// Removes one of `person`'s passkeys: it countersigns nothing from now on (decisions it
    /// countersigned keep verifying against its recorded key).
    pub async fn remove_passkey(&self, person: &Login, id: &str) -> Result<(), Error> {
        self.passkey_settings()?;
        let now = self.now();
        transact!(self, "remove passkey", |tx| {
            let mut p = own_passkey(tx, person, id).await?;
            p.removed_at = Some(now);
            tx.put_passkey(&p).await?;
            Ok::<_, Fail>(())
        })
    }

    /// The statement `approver` countersigns to approve `id`, with a fresh nonce, what policy
    /// asks of the passkey, and the approver's passkeys that may sign.
    pub async fn statement_for(
        &self,
        id: &RecordId,
        approver: &Login,
    ) -> Result<StatementOffer, Error> {
        let settings = self.passkey_settings()?;
        let now = self.now();
        let policy = self.policy();
        let (rec, passkeys) = read!(self, "read record", |tx| {
            let rec = tx.get_record(id).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such credential request")
            })?;
            let rec = self.settle_record(tx, rec, now).await?;
            Ok::<_, Fail>((rec, tx.passkeys_of(approver).await?))
        })?;
        if !rec.body.approver.admits(approver) {
            return Err(ErrorCode::NOT_APPROVER.into());
        }
        if rec.state != RecordState::Pending {
            return Err(ErrorCode::RECORD_TERMINAL.into());
        }
        let requirement = settings.requirement(&policy, &rec);
        let nonce = pk::issue_nonce(
            &self.sealer,
            &*self.entropy,
            Purpose::Decide(id),
            approver.as_str(),
            now,
            pk::NONCE_LIFETIME,
        );
        let passkeys = passkeys
            .into_iter()
            .filter(|p| p.is_live())
            .filter(|p| requirement.as_ref().is_none_or(|r| r.admits(p).is_ok()))
            .collect();
        Ok(StatementOffer {
            statement: Statement::of(&rec, Decision::Approve, approver.as_str(), &nonce.value),
            nonce,
            requirement,
            passkeys,
        })
    }

    /// Before a decision's transaction: a countersignature's nonce is this broker's, for this
    /// record and approver, unexpired, and spent now.
    pub(crate) async fn spend_statement_nonce(
        &self,
        id: &RecordId,
        approver: &Login,
        c: &Countersignature,
    ) -> Result<(), Error> {
        self.passkey_settings()?;
        let until = pk::check_nonce(
            &self.sealer,
            &c.nonce,
            Purpose::Decide(id),
            approver.as_str(),
            self.now(),
            pk::NONCE_LIFETIME,
        )
        .map_err(invalid)?;
        self.spend_nonce(Purpose::Decide(id), &c.nonce, until).await
    }

    /// In a decision's transaction: policy's requirement for `rec`, met by `c` when given.
    /// A countersignature given where none is required is verified all the same.
    pub(crate) async fn countersign(
        &self,
        tx: &mut dyn crate::storage::Tx,
        rec: &crate::model::Record,
        approver: &Login,
        c: Option<&Countersignature>,
    ) -> Result<(), Fail> {
        let Some(settings) = self.config.passkeys.as_ref() else {
            // No passkeys: nothing is required, and nothing unverifiable is recorded.
            return match c {
                Some(_) => Err(ErrorCode::PASSKEYS_OFF.into()),
                None => Ok(()),
            };
        };
        let requirement = settings.requirement(&self.policy(), rec);
        let Some(c) = c else {
            return match requirement {
                Some(_) => Err(ErrorCode::PASSKEY_REQUIRED.into()),
                None => Ok(()),
            };
        };
        let mut p = tx
            .get_passkey(&c.credential)
            .await?
            .filter(Passkey::is_live)
            .ok_or_else(|| invalid("the passkey is not registered, or was removed"))?;
        let statement = Statement::of(rec, Decision::Approve, approver.as_str(), &c.nonce);
        let asserted = pk::verify_countersignature(
            settings,
            &p,
            &statement,
            c,
            p.sign_count,
            requirement.as_ref(),
        )
        .map_err(invalid)?;
        p.sign_count = asserted.sign_count;
        tx.put_passkey(&p).await?;
        Ok(())
    }
}

/// A registered passkey's assertion over a registration challenge; answers its sign count.
fn endorse(
    settings: &PasskeySettings,
    by: &Passkey,
    e: &Countersignature,
    challenge: &[u8; 32],
) -> Result<u32, CountersignError> {
    let key = countersign_proto::webauthn::CredentialKey::from_text(&by.key)
        .map_err(|_| CountersignError::Key)?;
    let b = |s: &str| countersign_proto::b64::decode(s).map_err(|_| CountersignError::Encoding);
    let (client, auth, sig) = (
        b(&e.client_data)?,
        b(&e.authenticator_data)?,
        b(&e.signature)?,
    );
    let asserted = settings.check(challenge, |x| {
        countersign_proto::webauthn::verify_assertion(&key, by.sign_count, &client, &auth, &sig, x)
    })?;
    Ok(asserted.sign_count)
}

/// One of `person`'s live passkeys, or NOT_FOUND (another's is not found either).
async fn own_passkey(
    tx: &mut dyn crate::storage::Tx,
    person: &Login,
    id: &str,
) -> Result<Passkey, Fail> {
    tx.get_passkey(id)
        .await?
        .filter(|p| p.is_live() && &p.person == person)
        .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such passkey").into())
}
