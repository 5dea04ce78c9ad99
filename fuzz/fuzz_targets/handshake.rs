//! The connection phase: `parse_greeting`, `parse_client_hello`, `parse_auth_switch`,
//! `parse_change_user` (under every combination of the capability bits it reads) and
//! `is_ssl_request` on arbitrary payloads. Whatever parses is written back with sluice's own
//! writers (as sluice does when it relays a client's hello to a backend) and must parse again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proto::frame::frame;
use sluice_proto::handshake::{
    is_ssl_request, parse_auth_switch, parse_change_user, parse_client_hello, parse_greeting, write_auth_switch, write_client_hello,
    write_greeting, Greeting,
};
use sluice_proto::CapabilityFlags;

/// The payload of the single packet a writer appended.
fn payload(out: &[u8]) -> Vec<u8> {
    let f = frame(out, usize::MAX).unwrap().expect("a whole packet");
    assert_eq!(f.wire_len, out.len());
    f.payload(out).into_owned()
}

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = parse_greeting(data) {
        assert_eq!(data[0], 10);
        assert!(g.nonce.len() <= 20);
        if let Ok(nonce) = <[u8; 20]>::try_from(&g.nonce[..]) {
            let mut out = Vec::new();
            write_greeting(
                &mut out,
                &Greeting {
                    server_version: g.server_version.as_bytes(),
                    connection_id: g.connection_id,
                    nonce,
                    capabilities: g.capabilities,
                    collation: g.collation,
                    status: g.status,
                    auth_plugin: &g.auth_plugin,
                    mariadb_caps: g.mariadb_caps,
                },
            );
            let back = parse_greeting(&payload(&out)).expect("a written greeting parses");
            assert_eq!(
                (back.connection_id, back.collation, back.status, back.mariadb_caps),
                (g.connection_id, g.collation, g.status, g.mariadb_caps)
            );
        }
    }

    let ssl = is_ssl_request(data);
    assert_eq!(ssl, data.len() == 32 && u32::from_le_bytes([data[0], data[1], data[2], data[3]]) & CapabilityFlags::CLIENT_SSL.bits() != 0);

    if let Ok(hello) = parse_client_hello(data) {
        assert!(data.len() >= 32);
        assert!(hello.capabilities.contains(CapabilityFlags::CLIENT_PROTOCOL_41));
        // Relaying: sluice writes the client's hello to a backend; that must parse the same.
        let mut out = Vec::new();
        let mut seq = 1;
        write_client_hello(&mut out, &mut seq, &hello);
        let back = parse_client_hello(&payload(&out)).expect("a written hello parses");
        assert_eq!(back.user, hello.user);
        assert_eq!(back.database, hello.database);
        assert_eq!(back.auth_plugin, hello.auth_plugin);
        assert_eq!(back.attrs, hello.attrs);
        assert_eq!((back.collation, back.max_packet, back.mariadb_caps), (hello.collation, hello.max_packet, hello.mariadb_caps));
    }

    if let Ok((plugin, nonce)) = parse_auth_switch(data) {
        assert_eq!(data[0], 0xFE);
        assert!(!plugin.contains('\0'));
        let mut out = Vec::new();
        let mut seq = 2;
        write_auth_switch(&mut out, &mut seq, &plugin, &nonce);
        assert_eq!(parse_auth_switch(&payload(&out)), Ok((plugin, nonce)), "auth switch round trip");
    }

    let bits = [CapabilityFlags::CLIENT_SECURE_CONNECTION, CapabilityFlags::CLIENT_PLUGIN_AUTH, CapabilityFlags::CLIENT_CONNECT_ATTRS];
    for combo in 0..8u8 {
        let mut caps = CapabilityFlags::CLIENT_PROTOCOL_41;
        for (i, b) in bits.iter().enumerate() {
            if combo & (1 << i) != 0 {
                caps |= *b;
            }
        }
        if let Ok(c) = parse_change_user(data, caps) {
            assert_eq!(data[0], 0x11);
            assert!(c.auth_response.len() < data.len());
            assert!(c.database.as_deref() != Some(""));
        }
    }
    let _ = parse_change_user(data, CapabilityFlags::all());
    let _ = parse_change_user(data, CapabilityFlags::empty());
});
