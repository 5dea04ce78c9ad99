//! Password authentication: mysql_native_password and caching_sha2_password, both sides.
//!
//! Server-side verification is not in `mysql_common` (it only scrambles, as a client), so the
//! verifiers live here. A native verification also yields SHA1(password) — "stage 1" — which is
//! exactly what a client needs to log in to a backend with the same password: that is how sluice
//! logs users in to backends without ever holding their plaintext password.

use sha1::{Digest, Sha1};
use sha2::Sha256;

pub const MYSQL_NATIVE_PASSWORD: &str = "mysql_native_password";
pub const CACHING_SHA2_PASSWORD: &str = "caching_sha2_password";
pub const MYSQL_CLEAR_PASSWORD: &str = "mysql_clear_password";

/// caching_sha2_password's one-byte messages inside an AuthMoreData (0x01) packet.
pub const SHA2_FAST_AUTH_SUCCESS: u8 = 0x03;
pub const SHA2_PERFORM_FULL_AUTH: u8 = 0x04;
/// Sent by a client (without TLS) to ask for the server's RSA public key.
pub const SHA2_REQUEST_PUBLIC_KEY: u8 = 0x02;

pub const NONCE_LEN: usize = 20;

/// Turns random bytes into a valid scramble: 7-bit, never NUL (the greeting NUL-terminates it).
pub fn make_nonce(random: [u8; NONCE_LEN]) -> [u8; NONCE_LEN] {
    random.map(|b| (b & 0x7F).max(1))
}

pub fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn xor<const N: usize>(a: &[u8; N], b: &[u8; N]) -> [u8; N] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// SHA1(password): what a native client XORs into its reply.
pub fn native_stage1(password: &[u8]) -> [u8; 20] {
    sha1(&[password])
}

/// SHA1(SHA1(password)): what the server stores (`*HEX` in mysql.user).
pub fn native_stage2(stage1: &[u8; 20]) -> [u8; 20] {
    sha1(&[stage1])
}

/// The client's reply for mysql_native_password, from stage 1. Empty for an empty password.
pub fn native_scramble(stage1: &[u8; 20], nonce: &[u8]) -> [u8; 20] {
    let nonce = &nonce[..nonce.len().min(NONCE_LEN)];
    xor(stage1, &sha1(&[nonce, &native_stage2(stage1)]))
}

/// Checks a native reply against the stored stage-2 hash; on success returns stage 1.
pub fn native_verify(stage2: &[u8; 20], nonce: &[u8], reply: &[u8]) -> Option<[u8; 20]> {
    let reply: &[u8; 20] = reply.try_into().ok()?;
    let nonce = &nonce[..nonce.len().min(NONCE_LEN)];
    let stage1 = xor(reply, &sha1(&[nonce, stage2]));
    (native_stage2(&stage1) == *stage2).then_some(stage1)
}

/// Parses a mysql.user / ProxySQL-style native hash: `*` followed by 40 hex digits.
pub fn parse_native_hash(s: &str) -> Option<[u8; 20]> {
    let hex = s.strip_prefix('*')?;
    if hex.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

pub fn format_native_hash(stage2: &[u8; 20]) -> String {
    let mut s = String::with_capacity(41);
    s.push('*');
    for b in stage2 {
        s.push_str(&format!("{b:02X}"));
    }
    s
}

/// SHA256(SHA256(password)): what a caching_sha2_password server keeps in its cache.
pub fn sha2_digest(password: &[u8]) -> [u8; 32] {
    sha256(&[&sha256(&[password])])
}

/// The client's fast-path reply for caching_sha2_password.
pub fn sha2_scramble(password: &[u8], nonce: &[u8]) -> [u8; 32] {
    let nonce = &nonce[..nonce.len().min(NONCE_LEN)];
    let p1 = sha256(&[password]);
    let p2 = sha256(&[&p1]);
    xor(&p1, &sha256(&[&p2, nonce]))
}

/// Checks a fast-path reply against SHA256(SHA256(password)).
pub fn sha2_verify(digest: &[u8; 32], nonce: &[u8], reply: &[u8]) -> bool {
    let Ok(reply) = <&[u8; 32]>::try_from(reply) else {
        return false;
    };
    let nonce = &nonce[..nonce.len().min(NONCE_LEN)];
    let p1 = xor(reply, &sha256(&[digest, nonce]));
    sha256(&[&p1]) == *digest
}

/// For RSA full authentication: the client encrypts (password ‖ NUL) XOR the repeated nonce.
pub fn xor_with_nonce(data: &mut [u8], nonce: &[u8]) {
    if nonce.is_empty() {
        return;
    }
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= nonce[i % nonce.len()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_hash_of_known_password() {
        // SELECT PASSWORD('password') on MariaDB.
        let stage2 = native_stage2(&native_stage1(b"password"));
        assert_eq!(format_native_hash(&stage2), "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        assert_eq!(parse_native_hash("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"), Some(stage2));
        assert_eq!(parse_native_hash("2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"), None);
        assert_eq!(parse_native_hash("*2470"), None);
        assert_eq!(parse_native_hash("*ZZ70C0C06DEE42FD1618BB99005ADCA2EC9D1E19"), None);
    }

    #[test]
    fn native_verify_yields_stage1() {
        let nonce = make_nonce([0x55; 20]);
        let stage1 = native_stage1(b"secret");
        let reply = native_scramble(&stage1, &nonce);
        assert_eq!(native_verify(&native_stage2(&stage1), &nonce, &reply), Some(stage1));
        let wrong = native_scramble(&native_stage1(b"Secret"), &nonce);
        assert_eq!(native_verify(&native_stage2(&stage1), &nonce, &wrong), None);
        assert_eq!(native_verify(&native_stage2(&stage1), &nonce, &reply[..19]), None);
    }

    #[test]
    fn native_matches_mysql_common() {
        let nonce = make_nonce(*b"abcdefghijklmnopqrst");
        let ours = native_scramble(&native_stage1(b"pw"), &nonce);
        let theirs = mysql_common::scramble::scramble_native(&nonce, b"pw").unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn sha2_matches_mysql_common_and_verifies() {
        let nonce = make_nonce(*b"ABCDEFGHIJKLMNOPQRST");
        let ours = sha2_scramble(b"pw", &nonce);
        let theirs = mysql_common::scramble::scramble_sha256(&nonce, b"pw").unwrap();
        assert_eq!(ours, theirs);
        assert!(sha2_verify(&sha2_digest(b"pw"), &nonce, &ours));
        assert!(!sha2_verify(&sha2_digest(b"pW"), &nonce, &ours));
        assert!(!sha2_verify(&sha2_digest(b"pw"), &nonce, &ours[..31]));
    }

    #[test]
    fn nonce_is_valid() {
        let n = make_nonce([0, 0x80, 0xFF, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
        assert!(n.iter().all(|&b| b != 0 && b < 0x80));
    }
}
