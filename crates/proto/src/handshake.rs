//! The connection phase: the server greeting (protocol v10), the client's SSLRequest and
//! HandshakeResponse41, AuthSwitchRequest and AuthMoreData.
//!
//! Parsing of the structured packets is `mysql_common`'s; the HandshakeResponse sluice sends to a
//! backend is written here because it must carry the client's own collation, capabilities and
//! attributes verbatim, which `mysql_common`'s constructor does not allow.

use crate::codec::{write_lenenc, write_lenenc_str};
use crate::frame::PacketBuilder;
use crate::{CapabilityFlags, ProtoError, StatusFlags};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{HandshakePacket, HandshakeResponse};
use mysql_common::proto::MySerialize;

/// What sluice announces in its greeting.
#[derive(Debug, Clone)]
pub struct Greeting<'a> {
    pub server_version: &'a [u8],
    pub connection_id: u32,
    pub nonce: [u8; 20],
    pub capabilities: CapabilityFlags,
    pub collation: u8,
    pub status: u16,
    pub auth_plugin: &'a str,
    /// MariaDB extended capabilities; sent only when CLIENT_LONG_PASSWORD (CLIENT_MYSQL) is off.
    pub mariadb_caps: u32,
}

pub fn write_greeting(out: &mut Vec<u8>, g: &Greeting<'_>) {
    let b = PacketBuilder::begin(out);
    HandshakePacket::new(
        10,
        g.server_version,
        g.connection_id,
        g.nonce[..8].try_into().unwrap_or([1; 8]),
        // The trailing NUL is part of the scramble field's wire form.
        Some([&g.nonce[8..], &[0u8][..]].concat()),
        g.capabilities,
        g.collation,
        StatusFlags::from_bits_truncate(g.status),
        Some(g.auth_plugin.as_bytes()),
    )
    .with_mariadb_ext_capabilities(mysql_common::constants::MariadbCapabilities::from_bits_truncate(
        if g.capabilities.contains(CapabilityFlags::CLIENT_LONG_PASSWORD) { 0 } else { g.mariadb_caps },
    ))
    .serialize(out);
    let mut seq = 0;
    b.finish(out, &mut seq);
}

/// A backend's greeting, as sluice needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGreeting {
    pub server_version: String,
    pub connection_id: u32,
    pub nonce: Vec<u8>,
    pub capabilities: CapabilityFlags,
    pub collation: u8,
    pub status: u16,
    pub auth_plugin: String,
    /// MariaDB extended capabilities (0 for MySQL servers).
    pub mariadb_caps: u32,
}

pub fn parse_greeting(payload: &[u8]) -> Result<ServerGreeting, ProtoError> {
    if payload.first() != Some(&10) {
        return Err(ProtoError::Malformed("greeting (protocol version is not 10)"));
    }
    // mysql_common computes `max(13, len as i8 - 8)` for the auth-plugin-data length, which
    // overflows (a panic with overflow checks) for bytes 0x80..=0x87. Any byte with the high bit
    // set means the same as 0 there (13 bytes follow), so normalise it before parsing.
    let payload = &sanitize_greeting(payload);
    let p: HandshakePacket<'_> = ParseBuf(payload).parse(()).map_err(|_| ProtoError::Malformed("greeting"))?;
    let mut nonce = p.nonce();
    nonce.truncate(20);
    Ok(ServerGreeting {
        server_version: p.server_version_str().into_owned(),
        connection_id: p.connection_id(),
        nonce,
        capabilities: p.capabilities(),
        collation: p.default_collation(),
        status: p.status_flags().bits(),
        auth_plugin: p.auth_plugin_name_str().map(|s| s.into_owned()).unwrap_or_default(),
        mariadb_caps: if p.capabilities().contains(CapabilityFlags::CLIENT_LONG_PASSWORD) {
            0
        } else {
            p.mariadb_ext_capabilities().bits()
        },
    })
}

/// A copy of a greeting whose auth-plugin-data length byte is made safe for `mysql_common`.
fn sanitize_greeting(payload: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let Some(version_end) = payload.get(1..).and_then(|p| p.iter().position(|&b| b == 0)) else {
        return std::borrow::Cow::Borrowed(payload);
    };
    // protocol(1) version NUL | conn id(4) scramble(8) filler(1) caps(2) collation(1) status(2) caps(2) | len
    let at = 1 + version_end + 1 + 20;
    match payload.get(at) {
        Some(&b) if b >= 0x80 => {
            let mut owned = payload.to_vec();
            owned[at] = 0;
            std::borrow::Cow::Owned(owned)
        }
        _ => std::borrow::Cow::Borrowed(payload),
    }
}

/// An SSLRequest is the first 32 bytes of a HandshakeResponse41 with CLIENT_SSL set, alone.
pub fn is_ssl_request(payload: &[u8]) -> bool {
    payload.len() == 32 && u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) & CapabilityFlags::CLIENT_SSL.bits() != 0
}

/// The client's HandshakeResponse41 (or the backend one sluice writes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    pub capabilities: CapabilityFlags,
    pub max_packet: u32,
    pub collation: u8,
    pub user: String,
    pub auth_response: Vec<u8>,
    pub database: Option<String>,
    pub auth_plugin: Option<String>,
    pub attrs: Vec<(String, String)>,
    /// MariaDB extended capabilities (bytes 28..32), when the client is MariaDB-aware.
    pub mariadb_caps: u32,
}

pub fn parse_client_hello(payload: &[u8]) -> Result<ClientHello, ProtoError> {
    if payload.len() < 32 {
        return Err(ProtoError::Malformed("handshake response"));
    }
    let caps = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    if caps & CapabilityFlags::CLIENT_PROTOCOL_41.bits() == 0 {
        return Err(ProtoError::Malformed("handshake response (pre-4.1 protocol is not supported)"));
    }
    let r: HandshakeResponse<'_> = ParseBuf(payload).parse(()).map_err(|_| ProtoError::Malformed("handshake response"))?;
    let mut attrs: Vec<(String, String)> = r.connect_attributes().unwrap_or_default().into_iter().collect();
    attrs.sort();
    Ok(ClientHello {
        capabilities: r.capabilities(),
        max_packet: u32::from_le_bytes([payload[4], payload[5], payload[6], payload[7]]),
        collation: r.collation(),
        user: String::from_utf8_lossy(r.user()).into_owned(),
        auth_response: r.scramble_buf().to_vec(),
        database: r.db_name().map(|d| String::from_utf8_lossy(d).into_owned()).filter(|d| !d.is_empty()),
        auth_plugin: r.auth_plugin().map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned()),
        attrs,
        mariadb_caps: if caps & CapabilityFlags::CLIENT_LONG_PASSWORD.bits() != 0 {
            0
        } else {
            u32::from_le_bytes([payload[28], payload[29], payload[30], payload[31]])
        },
    })
}

/// Writes the first 32 bytes of a HandshakeResponse41 (the SSLRequest, when alone).
fn write_hello_head(out: &mut Vec<u8>, caps: CapabilityFlags, max_packet: u32, collation: u8, mariadb_caps: u32) {
    out.extend_from_slice(&caps.bits().to_le_bytes());
    out.extend_from_slice(&max_packet.to_le_bytes());
    out.push(collation);
    out.extend_from_slice(&[0; 19]);
    let ext = if caps.contains(CapabilityFlags::CLIENT_LONG_PASSWORD) { 0 } else { mariadb_caps };
    out.extend_from_slice(&ext.to_le_bytes());
}

/// Writes the SSLRequest that precedes `hello` over TLS. It carries the same capabilities
/// (standard and MariaDB's extended ones) as the HandshakeResponse that follows: MariaDB takes
/// the extended ones from this first packet.
pub fn write_ssl_request(out: &mut Vec<u8>, seq: &mut u8, hello: &ClientHello) {
    let b = PacketBuilder::begin(out);
    let caps = response_capabilities(hello) | CapabilityFlags::CLIENT_SSL;
    write_hello_head(out, caps, hello.max_packet, hello.collation, hello.mariadb_caps);
    b.finish(out, seq);
}

/// The capabilities a HandshakeResponse announces: `hello.capabilities` with the bits its
/// fields contradict fixed up.
fn response_capabilities(hello: &ClientHello) -> CapabilityFlags {
    let mut caps = hello.capabilities | CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_SECURE_CONNECTION;
    caps.set(CapabilityFlags::CLIENT_CONNECT_WITH_DB, hello.database.is_some());
    caps.set(CapabilityFlags::CLIENT_PLUGIN_AUTH, hello.auth_plugin.is_some());
    caps.set(CapabilityFlags::CLIENT_CONNECT_ATTRS, !hello.attrs.is_empty());
    caps
}

/// Writes a HandshakeResponse41. Capability bits that the fields contradict are fixed up.
pub fn write_client_hello(out: &mut Vec<u8>, seq: &mut u8, hello: &ClientHello) {
    let caps = response_capabilities(hello);
    let b = PacketBuilder::begin(out);
    write_hello_head(out, caps, hello.max_packet, hello.collation, hello.mariadb_caps);
    out.extend_from_slice(hello.user.as_bytes());
    out.push(0);
    if caps.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA) {
        write_lenenc_str(out, &hello.auth_response);
    } else {
        out.push(hello.auth_response.len().min(255) as u8);
        out.extend_from_slice(&hello.auth_response[..hello.auth_response.len().min(255)]);
    }
    if let Some(db) = &hello.database {
        out.extend_from_slice(db.as_bytes());
        out.push(0);
    }
    if let Some(plugin) = &hello.auth_plugin {
        out.extend_from_slice(plugin.as_bytes());
        out.push(0);
    }
    if !hello.attrs.is_empty() {
        write_attrs(out, &hello.attrs);
    }
    b.finish(out, seq);
}

/// AuthSwitchRequest: 0xFE, plugin name, NUL, plugin data (the nonce, NUL-terminated).
pub fn write_auth_switch(out: &mut Vec<u8>, seq: &mut u8, plugin: &str, nonce: &[u8]) {
    let b = PacketBuilder::begin(out);
    out.push(0xFE);
    out.extend_from_slice(plugin.as_bytes());
    out.push(0);
    out.extend_from_slice(nonce);
    out.push(0);
    b.finish(out, seq);
}

/// An AuthSwitchRequest from a backend: (plugin, nonce without its trailing NUL).
pub fn parse_auth_switch(payload: &[u8]) -> Result<(String, Vec<u8>), ProtoError> {
    let bad = ProtoError::Malformed("auth switch request");
    if payload.first() != Some(&0xFE) {
        return Err(bad);
    }
    let (name, used) = crate::codec::read_null_str(&payload[1..]).ok_or(bad)?;
    let mut data = payload[1 + used..].to_vec();
    if data.last() == Some(&0) {
        data.pop();
    }
    Ok((String::from_utf8_lossy(name).into_owned(), data))
}

/// AuthMoreData: 0x01 followed by plugin data.
pub fn write_auth_more_data(out: &mut Vec<u8>, seq: &mut u8, data: &[u8]) {
    let b = PacketBuilder::begin(out);
    out.push(0x01);
    out.extend_from_slice(data);
    b.finish(out, seq);
}

/// A bare packet of plugin data (a client's reply during an auth exchange).
pub fn write_raw(out: &mut Vec<u8>, seq: &mut u8, data: &[u8]) {
    let b = PacketBuilder::begin(out);
    out.extend_from_slice(data);
    b.finish(out, seq);
}

/// COM_CHANGE_USER, as sent by a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeUser {
    pub user: String,
    pub auth_response: Vec<u8>,
    pub database: Option<String>,
    pub collation: Option<u16>,
    pub auth_plugin: Option<String>,
    pub attrs: Vec<(String, String)>,
}

/// Connection attributes: the total length, then key/value pairs as length-encoded strings.
fn write_attrs(out: &mut Vec<u8>, attrs: &[(String, String)]) {
    let mut block = Vec::new();
    for (k, v) in attrs {
        write_lenenc_str(&mut block, k.as_bytes());
        write_lenenc_str(&mut block, v.as_bytes());
    }
    write_lenenc(out, block.len() as u64);
    out.extend_from_slice(&block);
}

/// Writes COM_CHANGE_USER (CLIENT_SECURE_CONNECTION form). The collation and plugin are sent
/// when present (the plugin only with a collation, as the format requires); attributes when
/// the connection negotiated CLIENT_CONNECT_ATTRS.
pub fn write_change_user(out: &mut Vec<u8>, cu: &ChangeUser, caps: CapabilityFlags) {
    let b = PacketBuilder::begin(out);
    out.push(crate::command::COM_CHANGE_USER);
    out.extend_from_slice(cu.user.as_bytes());
    out.push(0);
    let auth = &cu.auth_response[..cu.auth_response.len().min(255)];
    out.push(auth.len() as u8);
    out.extend_from_slice(auth);
    out.extend_from_slice(cu.database.as_deref().unwrap_or("").as_bytes());
    out.push(0);
    if let Some(collation) = cu.collation {
        out.extend_from_slice(&collation.to_le_bytes());
        if let Some(plugin) = &cu.auth_plugin {
            out.extend_from_slice(plugin.as_bytes());
            out.push(0);
        }
        if caps.contains(CapabilityFlags::CLIENT_CONNECT_ATTRS) {
            write_attrs(out, &cu.attrs);
        }
    }
    b.finish(out, &mut 0);
}

pub fn parse_change_user(payload: &[u8], client_caps: CapabilityFlags) -> Result<ChangeUser, ProtoError> {
    use crate::codec::{read_lenenc, read_lenenc_str, read_null_str};
    let bad = ProtoError::Malformed("COM_CHANGE_USER");
    if payload.first() != Some(&crate::command::COM_CHANGE_USER) {
        return Err(bad);
    }
    let mut p = &payload[1..];
    let (user, n) = read_null_str(p).ok_or(bad.clone())?;
    p = &p[n..];
    let (auth, n) = if client_caps.contains(CapabilityFlags::CLIENT_SECURE_CONNECTION) {
        let len = *p.first().ok_or(bad.clone())? as usize;
        (p.get(1..1 + len).ok_or(bad.clone())?, 1 + len)
    } else {
        read_null_str(p).ok_or(bad.clone())?
    };
    p = &p[n..];
    let (db, n) = read_null_str(p).unwrap_or((p, p.len()));
    p = &p[n..];
    let mut out = ChangeUser {
        user: String::from_utf8_lossy(user).into_owned(),
        auth_response: auth.to_vec(),
        database: Some(String::from_utf8_lossy(db).into_owned()).filter(|d| !d.is_empty()),
        collation: None,
        auth_plugin: None,
        attrs: Vec::new(),
    };
    if p.len() >= 2 {
        out.collation = Some(u16::from_le_bytes([p[0], p[1]]));
        p = &p[2..];
        if client_caps.contains(CapabilityFlags::CLIENT_PLUGIN_AUTH) {
            if let Some((name, n)) = read_null_str(p) {
                out.auth_plugin = Some(String::from_utf8_lossy(name).into_owned());
                p = &p[n..];
            }
        }
        if client_caps.contains(CapabilityFlags::CLIENT_CONNECT_ATTRS) {
            if let Some((total, n)) = read_lenenc(p) {
                let end = (n as u64).saturating_add(total).min(p.len() as u64) as usize;
                let mut a = &p[n..end];
                while let (Some((k, kn)), true) = (read_lenenc_str(a), !a.is_empty()) {
                    let Some((v, vn)) = read_lenenc_str(&a[kn..]) else {
                        break;
                    };
                    out.attrs.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
                    a = &a[kn + vn..];
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::frame;
    use proptest::prelude::*;

    fn payload(out: &[u8]) -> Vec<u8> {
        frame(out, usize::MAX).unwrap().unwrap().payload(out).into_owned()
    }

    #[test]
    fn greeting_round_trip() {
        let g = Greeting {
            server_version: b"5.5.5-10.11.19-MariaDB",
            connection_id: 42,
            nonce: *b"abcdefghijklmnopqrst",
            capabilities: CapabilityFlags::CLIENT_PROTOCOL_41
                | CapabilityFlags::CLIENT_SECURE_CONNECTION
                | CapabilityFlags::CLIENT_PLUGIN_AUTH
                | CapabilityFlags::CLIENT_SSL,
            collation: 45,
            status: 2,
            auth_plugin: "mysql_native_password",
            mariadb_caps: 0b10100,
        };
        let mut out = Vec::new();
        write_greeting(&mut out, &g);
        assert_eq!(out[3], 0, "greeting has sequence id 0");
        let p = payload(&out);
        assert_eq!(p[0], 10);
        assert_eq!(&p[1..23], b"5.5.5-10.11.19-MariaDB");
        let s = parse_greeting(&p).unwrap();
        assert_eq!(s.connection_id, 42);
        assert_eq!(s.nonce, b"abcdefghijklmnopqrst");
        assert_eq!(s.auth_plugin, "mysql_native_password");
        assert_eq!((s.collation, s.status), (45, 2));
        assert!(s.capabilities.contains(CapabilityFlags::CLIENT_SSL));
        assert_eq!(s.mariadb_caps, 0b10100, "no CLIENT_MYSQL bit: extended capabilities travel");
        assert!(parse_greeting(&p[..10]).is_err());
        assert!(parse_greeting(&[9]).is_err());
    }

    #[test]
    fn greeting_with_a_negative_plugin_data_length_does_not_panic() {
        // Found by the fuzzer: auth-plugin-data length 0x82 with CLIENT_SECURE_CONNECTION.
        let hex = "0a000000000041414141414141410000822102000000800000000000000000000042424242424242424242424200";
        let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let _ = parse_greeting(&bytes);
    }

    #[test]
    fn client_hello_round_trip() {
        let hello = ClientHello {
            capabilities: CapabilityFlags::CLIENT_PROTOCOL_41
                | CapabilityFlags::CLIENT_SECURE_CONNECTION
                | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
                | CapabilityFlags::CLIENT_DEPRECATE_EOF,
            max_packet: 1 << 24,
            collation: 224,
            user: "app".into(),
            auth_response: vec![1; 20],
            database: Some("shop".into()),
            auth_plugin: Some("mysql_native_password".into()),
            attrs: vec![("_client_name".into(), "test".into())],
            mariadb_caps: 0b100,
        };
        let mut out = Vec::new();
        let mut seq = 1;
        write_client_hello(&mut out, &mut seq, &hello);
        assert_eq!(out[3], 1);
        let mut back = parse_client_hello(&payload(&out)).unwrap();
        assert!(back.capabilities.contains(CapabilityFlags::CLIENT_CONNECT_WITH_DB | CapabilityFlags::CLIENT_CONNECT_ATTRS));
        back.capabilities = hello.capabilities;
        let mut expect = hello.clone();
        expect.capabilities = hello.capabilities;
        assert_eq!(back, expect);
    }

    #[test]
    fn ssl_request_byte_vector() {
        let hello = ClientHello { capabilities: CapabilityFlags::CLIENT_PROTOCOL_41, max_packet: 16, collation: 33, ..Default::default() };
        let mut out = Vec::new();
        let mut seq = 1;
        write_ssl_request(&mut out, &mut seq, &hello);
        assert_eq!(&out[..4], &[32, 0, 0, 1]);
        assert!(is_ssl_request(&out[4..]));
        assert!(!is_ssl_request(&out[4..35]));
    }

    #[test]
    fn auth_switch_byte_vector() {
        let mut out = Vec::new();
        let mut seq = 2;
        write_auth_switch(&mut out, &mut seq, "mysql_native_password", b"0123456789abcdefghij");
        assert_eq!(&out[4..5], &[0xFE]);
        let (plugin, nonce) = parse_auth_switch(&out[4..]).unwrap();
        assert_eq!(plugin, "mysql_native_password");
        assert_eq!(nonce, b"0123456789abcdefghij");
        assert!(parse_auth_switch(&[0xFE, b'a']).is_err());
    }

    #[test]
    fn change_user_byte_vector() {
        let caps = CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_SECURE_CONNECTION | CapabilityFlags::CLIENT_PLUGIN_AUTH;
        let mut p = vec![0x11];
        p.extend_from_slice(b"bob\0");
        p.push(3);
        p.extend_from_slice(b"xyz");
        p.extend_from_slice(b"db1\0");
        p.extend_from_slice(&[45, 0]);
        p.extend_from_slice(b"mysql_native_password\0");
        let c = parse_change_user(&p, caps).unwrap();
        assert_eq!((c.user.as_str(), &c.auth_response[..], c.database.as_deref()), ("bob", &b"xyz"[..], Some("db1")));
        assert_eq!(c.collation, Some(45));
        assert_eq!(c.auth_plugin.as_deref(), Some("mysql_native_password"));
        assert!(parse_change_user(&p[..6], caps).is_err());
    }

    #[test]
    fn change_user_round_trip() {
        let caps = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_CONNECT_ATTRS;
        let cu = ChangeUser {
            user: "bob".into(),
            auth_response: vec![7; 20],
            database: Some("db1".into()),
            collation: Some(224),
            auth_plugin: Some("mysql_native_password".into()),
            attrs: vec![("_client_name".into(), "sluice".into())],
        };
        let mut out = Vec::new();
        write_change_user(&mut out, &cu, caps);
        assert_eq!(out[3], 0, "a command starts at sequence id 0");
        assert_eq!(parse_change_user(&payload(&out), caps).unwrap(), cu);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse_greeting(&b);
            let _ = parse_client_hello(&b);
            let _ = parse_auth_switch(&b);
            let _ = parse_change_user(&b, CapabilityFlags::all());
            let _ = is_ssl_request(&b);
        }
    }
}
