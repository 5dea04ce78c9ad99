//! TLS for both sides (rustls): the server config clients upgrade to (certificate from the
//! config, or self-signed at start-up as MySQL does), the client config for `use_ssl` backends,
//! and the RSA key pair for caching_sha2_password full authentication without TLS.

use anyhow::{anyhow, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The acceptor for clients that send an SSLRequest.
pub fn server_config(cert: Option<&Path>, key: Option<&Path>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let (chain, key) = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .with_context(|| format!("tls.cert {}: not readable as PEM certificates", cert.display()))?;
            if chain.is_empty() {
                return Err(anyhow!("tls.cert {}: no certificate found", cert.display()));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("tls.key {}: no PEM private key could be read", key.display()))?;
            (chain, key)
        }
        _ => self_signed()?,
    };
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("tls: certificate and key do not match")?;
    Ok(Arc::new(config))
}

/// A fresh self-signed certificate, as MySQL generates when none is configured.
fn self_signed() -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "sluice auto-generated server certificate");
    let cert = params.self_signed(&key)?;
    Ok((vec![cert.der().clone()], PrivateKeyDer::Pkcs8(key.serialize_der().into())))
}

/// TLS towards a backend: verified against `ca` when given, otherwise encrypted without
/// verification (MySQL's `--ssl-mode=REQUIRED`).
pub fn client_config(ca: Option<&Path>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let builder = rustls::ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let config = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("ssl_ca {}", ca.display()))? {
                roots.add(cert.with_context(|| format!("ssl_ca {}: not PEM certificates", ca.display()))?)?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify)).with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct NoVerify;

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider().signature_verification_algorithms.supported_schemes()
    }
}

/// The RSA key pair for caching_sha2_password's key exchange without TLS.
pub struct RsaKeys {
    private: aws_lc_rs::rsa::PrivateDecryptingKey,
    /// The public key as PEM (SubjectPublicKeyInfo), sent to clients that ask for it.
    pub public_pem: Vec<u8>,
}

impl RsaKeys {
    pub fn generate() -> anyhow::Result<RsaKeys> {
        let private = aws_lc_rs::rsa::PrivateDecryptingKey::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
            .map_err(|_| anyhow!("RSA key generation failed"))?;
        Self::from_private(private)
    }

    pub fn load(path: &Path) -> anyhow::Result<RsaKeys> {
        let key = PrivateKeyDer::from_pem_file(path)
            .with_context(|| format!("tls.rsa_key {}: no PEM private key could be read", path.display()))?;
        let private = match key {
            PrivateKeyDer::Pkcs8(der) => aws_lc_rs::rsa::PrivateDecryptingKey::from_pkcs8(der.secret_pkcs8_der()),
            _ => return Err(anyhow!("tls.rsa_key {}: expected a PKCS#8 RSA key", path.display())),
        }
        .map_err(|_| anyhow!("tls.rsa_key {}: not an RSA key", path.display()))?;
        Self::from_private(private)
    }

    fn from_private(private: aws_lc_rs::rsa::PrivateDecryptingKey) -> anyhow::Result<RsaKeys> {
        use aws_lc_rs::encoding::AsDer;
        let der = private.public_key().as_der().map_err(|_| anyhow!("RSA public key encoding failed"))?;
        let public_pem = pem_encode("PUBLIC KEY", der.as_ref());
        Ok(RsaKeys { private, public_pem })
    }

    /// RSA-OAEP (SHA-1) decryption, as MySQL clients encrypt the password.
    pub fn decrypt(&self, ciphertext: &[u8]) -> Option<Vec<u8>> {
        use aws_lc_rs::rsa::{OaepPrivateDecryptingKey, OAEP_SHA1_MGF1SHA1};
        let key = OaepPrivateDecryptingKey::new(self.private.clone()).ok()?;
        let mut out = vec![0; key.min_output_size()];
        let plain = key.decrypt(&OAEP_SHA1_MGF1SHA1, ciphertext, &mut out, None).ok()?;
        Some(plain.to_vec())
    }
}

fn pem_encode(label: &str, der: &[u8]) -> Vec<u8> {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = Vec::with_capacity(der.len() * 4 / 3 + 4);
    for chunk in der.chunks(3) {
        let n = (chunk[0] as u32) << 16 | (*chunk.get(1).unwrap_or(&0) as u32) << 8 | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(B64[(n >> (18 - 6 * i)) as usize & 63]);
            } else {
                b64.push(b'=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n").into_bytes();
    for line in b64.chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(format!("-----END {label}-----\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsa_round_trip_with_client_encryption() {
        let keys = RsaKeys::generate().unwrap();
        let pem = String::from_utf8(keys.public_pem.clone()).unwrap();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
        // Encrypt as a MySQL client does (mysql_common's client-side helper).
        let mut secret = b"pw\0".to_vec();
        proto::auth::xor_with_nonce(&mut secret, b"0123456789abcdefghij");
        let ct = mysql_common_encrypt(&secret, &keys.public_pem);
        let mut plain = keys.decrypt(&ct).unwrap();
        proto::auth::xor_with_nonce(&mut plain, b"0123456789abcdefghij");
        assert_eq!(plain, b"pw\0");
    }

    fn mysql_common_encrypt(data: &[u8], pem: &[u8]) -> Vec<u8> {
        use aws_lc_rs::rsa::{OaepPublicEncryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1};
        let text = std::str::from_utf8(pem).unwrap();
        let b64: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64_decode(&b64);
        let key = OaepPublicEncryptingKey::new(PublicEncryptingKey::from_der(&der).unwrap()).unwrap();
        let mut out = vec![0; key.ciphertext_size()];
        key.encrypt(&OAEP_SHA1_MGF1SHA1, data, &mut out, None).unwrap().to_vec()
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for chunk in bytes.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= (val(c) as u32) << (18 - 6 * i);
            }
            for i in 0..chunk.len() - 1 {
                out.push((n >> (16 - 8 * i)) as u8);
            }
        }
        out
    }

    #[test]
    fn rsa_key_loads_from_a_pem_file() {
        use aws_lc_rs::encoding::AsDer;
        let private = aws_lc_rs::rsa::PrivateDecryptingKey::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der: aws_lc_rs::encoding::Pkcs8V1Der = private.as_der().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rsa.pem");
        std::fs::write(&path, pem_encode("PRIVATE KEY", der.as_ref())).unwrap();
        let keys = RsaKeys::load(&path).unwrap();
        let ct = mysql_common_encrypt(b"pw\0", &keys.public_pem);
        assert_eq!(keys.decrypt(&ct).unwrap(), b"pw\0");
        std::fs::write(&path, "not pem").unwrap();
        let Err(e) = RsaKeys::load(&path) else { panic!("not PEM must fail") };
        assert!(e.to_string().contains("tls.rsa_key"), "{e}");
    }

    #[test]
    fn self_signed_server_config_builds() {
        server_config(None, None).unwrap();
        client_config(None).unwrap();
    }
}
