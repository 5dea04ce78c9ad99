//! Throw-away TLS material: a CA and a server certificate for `localhost` / 127.0.0.1.

use std::path::PathBuf;

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tempfile::TempDir;

/// A test CA and a server certificate it signed, as PEM strings and as files.
///
/// The files live in a temp dir that is removed when this value is dropped.
#[derive(Debug)]
pub struct TestCerts {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    _temp: TempDir,
}

impl TestCerts {
    /// Generates a fresh CA and a server certificate for DNS `localhost` and IP 127.0.0.1.
    pub fn generate() -> anyhow::Result<TestCerts> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "sluice test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate().context("generating CA key")?;
        let ca = ca_params.self_signed(&ca_key).context("signing CA cert")?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().context("generating server key")?;
        let cert = params.signed_by(&key, &issuer).context("signing server cert")?;

        let temp = crate::temp::new_dir("certs")?;
        let dir = temp.path().to_path_buf();
        let certs = TestCerts {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server-cert.pem"),
            server_key: dir.join("server-key.pem"),
            dir,
            ca_pem: ca.pem(),
            server_cert_pem: cert.pem(),
            server_key_pem: key.serialize_pem(),
            _temp: temp,
        };
        for (path, pem) in
            [(&certs.ca_cert, &certs.ca_pem), (&certs.server_cert, &certs.server_cert_pem), (&certs.server_key, &certs.server_key_pem)]
        {
            std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(certs)
    }
}
