//! Certificates made for one test: for a `redis-server` that speaks TLS (tls.rs) and for the
//! managed-service profile's fronts (managed.rs).

use std::fs;
use std::path::{Path, PathBuf};

/// A certificate authority made for one test, a server certificate it signed, and a client
/// certificate it signed, as PEM files in a temporary directory.
pub struct TestCerts {
    dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TestCerts {
    /// A server certificate for 127.0.0.1 and localhost.
    pub fn new() -> Self {
        Self::for_server_names(&["127.0.0.1", "localhost"])
    }

    /// A server certificate for exactly `names` (IP addresses or DNS names).
    pub fn for_server_names(names: &[&str]) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::Builder::new()
            .prefix("rlock-tls-")
            .tempdir()
            .expect("create temp dir for certificates");
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            path
        };

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "rlock test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.use_authority_key_identifier_extension = true;
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &issuer).expect("sign a leaf");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) = leaf(
            names.iter().map(|s| s.to_string()).collect(),
            names.first().copied().unwrap_or("server"),
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_pem, client_key_pem) = leaf(
            vec!["rlock-test-client".to_string()],
            "rlock-test-client",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        TestCerts {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server_pem),
            server_key: write("server.key", &server_key_pem),
            client_cert: write("client.pem", &client_pem),
            client_key: write("client.key", &client_key_pem),
            dir,
        }
    }

    /// The directory the PEM files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for TestCerts {
    fn default() -> Self {
        Self::new()
    }
}
