//! A `redis-server` that speaks TLS, with the certificates of a `TestCerts` (certs.rs).

use std::path::Path;

use crate::certs::TestCerts;
use crate::server::RedisServer;
use crate::spawn::free_port;

/// A `redis-server` that speaks TLS on `tls_port` (certificates of a [`TestCerts`]) and plain
/// TCP on `server.port()`, which the harness's own helpers (`conn`, `get`, …) use.
pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
}

impl TlsServer {
    /// `auth_clients` is Redis's `tls-auth-clients`: `no`, `optional` or `yes` (mTLS).
    pub fn start(certs: &TestCerts, auth_clients: &str) -> Self {
        let tls_port = free_port();
        let path = |p: &Path| p.display().to_string();
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path(&certs.server_cert),
            "--tls-key-file",
            &path(&certs.server_key),
            "--tls-ca-cert-file",
            &path(&certs.ca),
            "--tls-auth-clients",
            auth_clients,
        ]);
        TlsServer { server, tls_port }
    }

    /// `rediss://127.0.0.1:TLS_PORT`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}
