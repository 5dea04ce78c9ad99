//! Configuration values written the ProxySQL way, shared by the config file and the admin
//! tables: booleans as 0/1, digests as numbers or `0x…` strings.

use serde::{Deserialize, Deserializer};

pub(crate) fn yes() -> bool {
    true
}

pub(crate) fn caseless() -> String {
    "CASELESS".into()
}

/// Digests are written `0x…` but a bare number is accepted too.
pub(crate) fn string_or_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum S {
        Str(String),
        Int(u64),
    }
    Ok(Some(match S::deserialize(d)? {
        S::Str(s) => s,
        S::Int(n) => n.to_string(),
    }))
}

/// ProxySQL stores booleans as 0/1; accept both spellings.
pub(crate) fn bool_or_int<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum B {
        Bool(bool),
        Int(i64),
    }
    match B::deserialize(d)? {
        B::Bool(b) => Ok(b),
        B::Int(0) => Ok(false),
        B::Int(1) => Ok(true),
        B::Int(n) => Err(serde::de::Error::custom(format!("expected 0 or 1 (or true/false), got {n}"))),
    }
}
