//! Wire error codes as types.
//!
//! Every refusal on the wire is an error status with `{"code", "error"}` (protocol §2). A
//! catalogue is an enum declared with [`error_catalogue!`], one line per code (wire name,
//! status, default message); each code converts into a [`WireCode`], the shape both the
//! broker's and the console's catalogues share, and parses back from its wire name, so a client
//! reads a body into [`Refusal`] and matches `refusal.code::<ConsoleCode>()` instead of
//! comparing strings.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One code of some catalogue: its wire name and HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireCode {
    pub code: &'static str,
    pub status: u16,
}

impl fmt::Display for WireCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

/// What every catalogue enum made by [`error_catalogue!`] offers.
pub trait ErrorCatalogue: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// Every code, in catalogue order.
    const ALL: &'static [Self];
    /// The wire name, e.g. `"HUMAN_ONLY"`.
    fn as_str(self) -> &'static str;
    /// The HTTP status.
    fn status(self) -> u16;
    /// The default message.
    fn message(self) -> &'static str;
    /// The code with this wire name, if the catalogue has it.
    fn from_wire(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == code)
    }
    /// Name and status, catalogue-neutral.
    fn wire(self) -> WireCode {
        WireCode {
            code: self.as_str(),
            status: self.status(),
        }
    }
}

/// Declares a catalogue: `error_catalogue! { pub enum Name { CODE => 400, "message"; … } }`.
/// The enum derives `Debug, Clone, Copy, PartialEq, Eq, Hash`, implements [`ErrorCatalogue`]
/// (and has its methods as inherent ones, callable without the trait in scope),
/// `Display` (the wire name), `Serialize`/`Deserialize` as the wire name, and
/// `From<Name> for WireCode`.
#[macro_export]
macro_rules! error_catalogue {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($code:ident => $status:literal, $msg:literal;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        $vis enum $name { $($code,)* }

        impl $crate::code::ErrorCatalogue for $name {
            const ALL: &'static [$name] = &[$($name::$code,)*];
            fn as_str(self) -> &'static str {
                match self { $($name::$code => stringify!($code),)* }
            }
            fn status(self) -> u16 {
                match self { $($name::$code => $status,)* }
            }
            fn message(self) -> &'static str {
                match self { $($name::$code => $msg,)* }
            }
        }

        // The trait's methods, also callable without it in scope.
        #[allow(dead_code)]
        impl $name {
            /// Every code, in catalogue order.
            pub const ALL: &'static [$name] = &[$($name::$code,)*];
            /// The wire name, e.g. `"NOT_FOUND"`.
            pub fn as_str(self) -> &'static str {
                $crate::code::ErrorCatalogue::as_str(self)
            }
            /// The HTTP status.
            pub fn status(self) -> u16 {
                $crate::code::ErrorCatalogue::status(self)
            }
            /// The default message.
            pub fn message(self) -> &'static str {
                $crate::code::ErrorCatalogue::message(self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::code::ErrorCatalogue::as_str(*self))
            }
        }

        impl ::std::convert::From<$name> for $crate::code::WireCode {
            fn from(c: $name) -> Self {
                $crate::code::ErrorCatalogue::wire(c)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($crate::code::ErrorCatalogue::as_str(*self))
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::string::String as ::serde::Deserialize>::deserialize(d)?;
                <$name as $crate::code::ErrorCatalogue>::from_wire(&s)
                    .ok_or_else(|| ::serde::de::Error::custom(format!("unknown code {s}")))
            }
        }
    };
}

/// A refusal body as it travels: `{"code", "error"}`, other fields (a code's detail fields)
/// ignored by this reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: String,
    pub error: String,
}

impl Refusal {
    /// The code in catalogue `C`, or `None` when `C` does not have it (another catalogue's
    /// code, or one newer than this client).
    pub fn code<C: ErrorCatalogue>(&self) -> Option<C> {
        C::from_wire(&self.code)
    }

    /// Whether the refusal carries `code`.
    pub fn is<C: ErrorCatalogue>(&self, code: C) -> bool {
        self.code::<C>() == Some(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::error_catalogue! {
        /// A test catalogue.
        pub enum Sample {
            NOT_FOUND => 404, "not found";
            HUMAN_ONLY => 403, "people only";
        }
    }

    #[test]
    fn codes_know_their_wire_name_status_and_message() {
        assert_eq!(Sample::HUMAN_ONLY.as_str(), "HUMAN_ONLY");
        assert_eq!(Sample::HUMAN_ONLY.status(), 403);
        assert_eq!(Sample::NOT_FOUND.message(), "not found");
        assert_eq!(
            WireCode::from(Sample::NOT_FOUND),
            WireCode {
                code: "NOT_FOUND",
                status: 404
            }
        );
        assert_eq!(Sample::from_wire("HUMAN_ONLY"), Some(Sample::HUMAN_ONLY));
        assert_eq!(Sample::from_wire("human_only"), None);
    }

    #[test]
    fn a_client_matches_a_typed_code() -> Result<(), serde_json::Error> {
        let r: Refusal = serde_json::from_str(
            r#"{"code":"HUMAN_ONLY","error":"people only","holder":{"kind":"user"}}"#,
        )?;
        assert!(r.is(Sample::HUMAN_ONLY));
        assert_eq!(r.code::<Sample>(), Some(Sample::HUMAN_ONLY));
        let other: Refusal = serde_json::from_str(r#"{"code":"NEWER_CODE","error":"x"}"#)?;
        assert_eq!(other.code::<Sample>(), None);
        assert_eq!(serde_json::to_string(&Sample::NOT_FOUND)?, r#""NOT_FOUND""#);
        assert_eq!(
            serde_json::from_str::<Sample>(r#""NOT_FOUND""#)?,
            Sample::NOT_FOUND
        );
        Ok(())
    }
}
