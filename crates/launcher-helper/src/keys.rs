//! Where the helper's keys come from and how it signs with them: the [`Keys`] seam.
//!
//! The helper makes every key (machine keys at a login, session keys at registration) and
//! signs every token (proofs, login and secret request objects) through one [`Keys`]. The
//! default, [`AwsLc`], is `countersign-proto` over aws-lc-rs: [`SigningKey::generate`] and
//! [`jws::sign`]. [`crate::Helper::with_keys`] sets another, which only tests do: aws-lc-rs
//! does not fail on demand, so a key source that fails is how the `KEYGEN` and `SIGN` refusals
//! are shown. It is not reachable from the command line.

use countersign_proto::claims::{
    MachineLoginClaims, ProofClaims, SecretRequestClaims, TokenLoginClaims,
};
use countersign_proto::jws::{self, Header};
use countersign_proto::{JwsError, SigningKey};
use serde::Serialize;

/// The claims of a token the helper signs. Serializes exactly as the claims it holds.
#[derive(Serialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub enum Claims<'a> {
    /// A session or launcher proof.
    Proof(&'a ProofClaims),
    /// A person's machine login request.
    MachineLogin(&'a MachineLoginClaims),
    /// A service's token login request.
    TokenLogin(&'a TokenLoginClaims),
    /// A secret request object.
    SecretRequest(&'a SecretRequestClaims),
}

/// Makes keys and signs with them.
pub trait Keys: Send + Sync + std::fmt::Debug {
    /// A new P-256 key.
    ///
    /// # Errors
    /// When no key can be made (the helper answers `KEYGEN`).
    fn generate(&self) -> Result<SigningKey, JwsError>;

    /// `claims` under `header`, signed by `key`, as a compact JWS.
    ///
    /// # Errors
    /// When signing fails (the helper answers `SIGN`).
    fn sign(
        &self,
        key: &SigningKey,
        header: &Header,
        claims: Claims<'_>,
    ) -> Result<String, JwsError>;
}

/// The real keys: `countersign-proto` over aws-lc-rs.
#[derive(Debug, Clone, Copy, Default)]
pub struct AwsLc;

impl Keys for AwsLc {
    fn generate(&self) -> Result<SigningKey, JwsError> {
        SigningKey::generate()
    }

    fn sign(
        &self,
        key: &SigningKey,
        header: &Header,
        claims: Claims<'_>,
    ) -> Result<String, JwsError> {
        jws::sign(key, header, &claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use countersign_proto::claims::{self, AuthorizationDetail};

    #[test]
    fn claims_serialize_as_the_claims_they_hold() -> Result<(), Box<dyn std::error::Error>> {
        let proof = ProofClaims {
            htm: "GET".into(),
            htu: "https://broker.example.com/v1/enrollments/self".into(),
            iat: 1_700_000_000,
            jti: claims::new_jti()?,
            bh: None,
        };
        let request = SecretRequestClaims {
            iat: 1_700_000_000,
            exp: 1_700_000_300,
            jti: claims::new_jti()?,
            aud: "https://broker.example.com".into(),
            authorization_details: vec![AuthorizationDetail::agent_secret("A_B")],
            reason: "r".into(),
            lifetime_seconds: Some(60),
        };
        assert_eq!(
            serde_json::to_vec(&Claims::Proof(&proof))?,
            serde_json::to_vec(&proof)?
        );
        assert_eq!(
            serde_json::to_vec(&Claims::SecretRequest(&request))?,
            serde_json::to_vec(&request)?
        );
        // And what AwsLc signs verifies under the key, with those claims.
        let key = AwsLc.generate()?;
        let token = AwsLc.sign(
            &key,
            &Header::with_kid(claims::TYP_SESSION_PROOF, "k"),
            Claims::Proof(&proof),
        )?;
        let verified = jws::parse(&token)?.verify(key.verifying_key())?;
        assert_eq!(verified.claims::<ProofClaims>()?, proof);
        Ok(())
    }
}
