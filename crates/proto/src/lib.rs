//! Countersign wire formats.
//!
//! Everything a broker, CLI or launcher needs to produce and check the signed objects described in
//! `shared/design/protocol.md` §§1-3:
//!
//! - [`b64`]: strict base64url without padding;
//! - [`jwk`]: P-256 public JWKs, RFC 7638 thumbprints, and the ES256 [`SigningKey`] /
//!   [`VerifyingKey`] pair;
//! - [`jws`]: compact JWS parsing, verification and signing with the protocol's refusals
//!   (only `ES256`, no `crit`, no `b64`, raw 64-byte signatures with in-range scalars, ...);
//! - [`json`]: JSON parsing that refuses a repeated object member at any depth;
//! - [`claims`]: the claim sets of the `Proof` header and the signed request objects;
//! - [`webauthn`]: the relying party's checks of passkey registrations and assertions
//!   (countersignatures, issue 29).
//!
//! Nothing in this crate panics on input, and no error message carries key material or token
//! bytes.

pub mod b64;
pub mod claims;
mod error;
pub mod json;
pub mod jwk;
pub mod jws;
pub mod webauthn;

pub use claims::{
    AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims, TokenLoginClaims,
};
pub use error::JwsError;
pub use jwk::{PublicJwk, SigningKey, VerifyingKey};
pub use jws::{Header, Unverified, Verified};
