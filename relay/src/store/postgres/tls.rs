//! TLS to PostgreSQL (rustls, the *ring* provider), chosen by the URL's `sslmode` and
//! `sslrootcert` parameters as libpq reads them. Managed PostgreSQL services (RDS, Cloud SQL,
//! Azure, …) require TLS, or should: without it the database password and every event cross
//! the network in the clear.
//!
//! | `sslmode`          | encrypted             | server certificate checked                    |
//! |--------------------|-----------------------|-----------------------------------------------|
//! | `disable`          | no                    | —                                             |
//! | `prefer` (default) | if the server offers  | no (any certificate; see below)               |
//! | `require`          | yes, or no connection | no (any certificate; see below)               |
//! | `verify-ca`        | yes                   | chain to `sslrootcert`; the host name is not  |
//! | `verify-full`      | yes                   | chain to `sslrootcert` and the host name      |
//!
//! - `prefer` and `require` protect against eavesdropping, not against someone who can stand in
//!   for the server. They still check that the handshake is signed by the key of the
//!   certificate presented (the *ring* provider's algorithms), so the session is a real TLS
//!   session with whoever presented it. Like libpq, when `sslrootcert` is given they check the
//!   chain too (libpq: "if a root CA file exists, sslmode=require behaves like verify-ca").
//! - `verify-ca` and `verify-full` need `sslrootcert=PATH` (a PEM file of one or more CA
//!   certificates: the managed service's CA bundle). We bundle no root store and do not read
//!   the system's or libpq's `~/.postgresql/root.crt`: a database's certificate is issued by
//!   its provider's own CA, which the operator downloads and names. `sslrootcert=system`
//!   (libpq ≥ 16) is refused with that explanation.
//! - Host names are checked against the certificate's subject alternative names only (webpki
//!   ignores the common name, which libpq still falls back to).
//! - Unlike libpq, `prefer` does not retry without TLS when the TLS handshake itself fails
//!   (only when the server declines TLS).
//! - tokio-postgres only knows `disable`, `prefer` and `require` (and fails to parse a URL with
//!   `verify-*` or `sslrootcert`): [`split_ssl_params`] takes both out of the URL and gives
//!   the driver the mode it understands; the verification lives in the rustls configuration
//!   [`connector`] builds.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode` (without `allow`, which tokio-postgres cannot do: plain first, TLS only if
/// the server insists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PgTlsMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, without checking its certificate (libpq's default).
    Prefer,
    /// TLS or no connection, without checking the server's certificate.
    Require,
    /// TLS, the certificate's chain checked against `sslrootcert`, not its host name.
    VerifyCa,
    /// TLS, the certificate's chain and host name checked.
    VerifyFull,
}

const MODES: &str = "disable, prefer, require, verify-ca or verify-full";

impl PgTlsMode {
    fn parse(s: &str) -> Option<PgTlsMode> {
        Some(match s {
            "disable" => PgTlsMode::Disable,
            "prefer" => PgTlsMode::Prefer,
            "require" => PgTlsMode::Require,
            "verify-ca" => PgTlsMode::VerifyCa,
            "verify-full" => PgTlsMode::VerifyFull,
            _ => return None,
        })
    }

    /// The name libpq (and the URL) uses.
    fn name(self) -> &'static str {
        match self {
            PgTlsMode::Disable => "disable",
            PgTlsMode::Prefer => "prefer",
            PgTlsMode::Require => "require",
            PgTlsMode::VerifyCa => "verify-ca",
            PgTlsMode::VerifyFull => "verify-full",
        }
    }

    /// The `sslmode` tokio-postgres is given: the verifying modes must have TLS.
    fn driver_mode(self) -> &'static str {
        match self {
            PgTlsMode::Disable => "disable",
            PgTlsMode::Prefer => "prefer",
            PgTlsMode::Require | PgTlsMode::VerifyCa | PgTlsMode::VerifyFull => "require",
        }
    }
}

impl fmt::Display for PgTlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` URL's query and puts back the
/// `sslmode` tokio-postgres understands (`verify-ca` and `verify-full` become `require`); keeps
/// every other parameter as written. Returns that URL, the mode (`prefer` when absent, as in
/// libpq) and the root certificates' path. Errors never quote the URL (it may hold a password).
pub(crate) fn split_ssl_params(url: &str) -> Result<(String, PgTlsMode, Option<PathBuf>), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept: Vec<&str> = Vec::new();
    let mut mode = PgTlsMode::Prefer;
    let mut root_cert = None;
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        // tokio-postgres percent-decodes keys and values: so do we, to find the same ones.
        match percent_decode(key).as_deref() {
            Ok("sslmode") => {
                let value = percent_decode(value).map_err(|e| format!("sslmode: {e}"))?;
                mode = PgTlsMode::parse(&value)
                    .ok_or_else(|| format!("sslmode={value:?} is not a mode: expected {MODES}"))?;
            }
            Ok("sslrootcert") => {
                let value = percent_decode(value).map_err(|e| format!("sslrootcert: {e}"))?;
                root_cert = match value.as_str() {
                    "" => None,
                    "system" => {
                        return Err("sslrootcert=system (the system's root certificates) is not supported: give \
                                    the path of a PEM file with the database's CA certificate(s)"
                            .into())
                    }
                    path => Some(PathBuf::from(path)),
                };
            }
            // Everything else, malformed parameters included, is tokio-postgres's to read.
            _ => kept.push(param),
        }
    }
    let driver = format!("sslmode={}", mode.driver_mode());
    kept.push(&driver);
    Ok((format!("{base}?{}", kept.join("&")), mode, root_cert))
}

/// Percent-decodes a URL component as tokio-postgres does (`%XX` only; a `%` not followed by two
/// hex digits stays as it is; no `+` for space). The error names no part of the input.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let hex = |b: u8| (b as char).to_digit(16);
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once percent-decoded".to_owned())
}

/// The TLS connector for `mode` (as [`split_ssl_params`] returned it) and the root certificates
/// at `root_cert`: an error when a verifying mode has no root certificates or the file cannot be
/// used. Independent of rustls' process-level default provider.
pub(crate) fn connector(
    mode: PgTlsMode,
    root_cert: Option<&Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(client_config(mode, root_cert)?))
}

/// The rustls configuration behind [`connector`].
fn client_config(mode: PgTlsMode, root_cert: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = verifier(mode, root_cert, &provider)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS to PostgreSQL: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // What libpq ≥ 17 offers; PostgreSQL ≥ 17 requires it with `sslnegotiation=direct` and
    // rejects any other protocol; older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// How the server's certificate is checked in `mode`.
fn verifier(
    mode: PgTlsMode,
    root_cert: Option<&Path>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    // `disable` never starts TLS: its root certificates, like libpq's, are not even read.
    let roots = match (mode, root_cert) {
        (PgTlsMode::Disable, _) | (_, None) => None,
        (_, Some(path)) => Some(Arc::new(load_roots(path)?)),
    };
    let Some(roots) = roots else {
        return match mode {
            PgTlsMode::VerifyCa | PgTlsMode::VerifyFull => Err(format!(
                "sslmode={mode} needs sslrootcert=PATH, a PEM file with the CA certificate(s) that issued the \
                 database's certificate (your PostgreSQL provider publishes them; no root certificates are built in)"
            )),
            PgTlsMode::Disable | PgTlsMode::Prefer | PgTlsMode::Require => {
                Ok(Arc::new(AnyCertificate(provider.signature_verification_algorithms)))
            }
        };
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("sslrootcert: {e}"))?;
    Ok(match mode {
        PgTlsMode::VerifyFull => webpki,
        // libpq: with root certificates, prefer and require check the chain as verify-ca does.
        PgTlsMode::VerifyCa | PgTlsMode::Prefer | PgTlsMode::Require | PgTlsMode::Disable => {
            Arc::new(ChainOnly(webpki))
        }
    })
}

/// Every CA certificate in the PEM file at `path` (at least one).
fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let shown = path.display();
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(path).and_then(|certs| certs.collect::<Result<_, _>>()).map_err(|e| match e {
            pem::Error::Io(e) => format!("sslrootcert {shown}: cannot read it: {e}"),
            e => format!("sslrootcert {shown}: not a PEM file of certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(format!("sslrootcert {shown}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)"));
    }
    let mut roots = RootCertStore::empty();
    for (n, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| format!("sslrootcert {shown}: certificate {}: {e}", n + 1))?;
    }
    Ok(roots)
}

/// `prefer` and `require` without root certificates: any certificate is accepted, but the
/// handshake must be signed by its key.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: webpki's verification, a host name mismatch excepted. webpki checks the chain
/// (issuer, signatures, validity dates, key usage) before the name, so a name error means the
/// chain was sound.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, PgTlsMode, Option<PathBuf>) {
        split_ssl_params(url).unwrap()
    }

    #[test]
    fn each_mode_is_taken_out_and_the_driver_gets_one_it_knows() {
        for (given, mode, driver) in [
            ("disable", PgTlsMode::Disable, "disable"),
            ("prefer", PgTlsMode::Prefer, "prefer"),
            ("require", PgTlsMode::Require, "require"),
            ("verify-ca", PgTlsMode::VerifyCa, "require"),
            ("verify-full", PgTlsMode::VerifyFull, "require"),
        ] {
            let (url, m, root) = split(&format!("postgres://relay@db:5432/relay?sslmode={given}"));
            assert_eq!(url, format!("postgres://relay@db:5432/relay?sslmode={driver}"), "{given}");
            assert_eq!((m, root), (mode, None), "{given}");
            assert_eq!(m.to_string(), given);
        }
    }

    #[test]
    fn without_sslmode_the_mode_is_prefer() {
        assert_eq!(
            split("postgres://db/relay"),
            ("postgres://db/relay?sslmode=prefer".into(), PgTlsMode::Prefer, None)
        );
        assert_eq!(
            split("postgres://db/relay?"),
            ("postgres://db/relay?sslmode=prefer".into(), PgTlsMode::Prefer, None)
        );
    }

    #[test]
    fn the_root_certificate_path_is_taken_out_and_decoded() {
        let (url, mode, root) =
            split("postgresql://u:pw@db.example.com/relay?sslrootcert=%2Fetc%2Fssl%2Fdb%20ca.pem&sslmode=verify-full");
        assert_eq!(url, "postgresql://u:pw@db.example.com/relay?sslmode=require");
        assert_eq!(mode, PgTlsMode::VerifyFull);
        assert_eq!(root, Some(PathBuf::from("/etc/ssl/db ca.pem")));
        assert_eq!(split("postgres://db/relay?sslrootcert=&sslmode=require").2, None, "empty: none");
        let (url, mode, _) = split("postgres://db/relay?ssl%6Dode=verify-ca");
        assert_eq!((url.as_str(), mode), ("postgres://db/relay?sslmode=require", PgTlsMode::VerifyCa), "encoded key");
    }

    #[test]
    fn other_parameters_are_kept_as_written() {
        let (url, mode, root) = split(
            "postgres://relay@h1:5432,h2:5433/relay?application_name=relay%201&sslmode=verify-full\
             &options=-c%20search_path%3Dsync&sslrootcert=ca.pem&connect_timeout=5&password=p%26w",
        );
        assert_eq!(
            url,
            "postgres://relay@h1:5432,h2:5433/relay?application_name=relay%201&options=-c%20search_path%3Dsync\
             &connect_timeout=5&password=p%26w&sslmode=require"
        );
        assert_eq!((mode, root), (PgTlsMode::VerifyFull, Some(PathBuf::from("ca.pem"))));
        // The rewritten URL is one tokio-postgres parses (it would reject verify-* and sslrootcert).
        let config: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(config.get_application_name(), Some("relay 1"));
        assert_eq!(config.get_options(), Some("-c search_path=sync"));
    }

    #[test]
    fn the_last_sslmode_wins_as_in_tokio_postgres() {
        assert_eq!(split("postgres://db/r?sslmode=disable&sslmode=verify-full").1, PgTlsMode::VerifyFull);
    }

    #[test]
    fn an_unknown_mode_is_named_with_the_accepted_ones() {
        for bad in ["allow", "verify_full", "REQUIRE", ""] {
            let e = split_ssl_params(&format!("postgres://db/relay?sslmode={bad}")).unwrap_err();
            assert!(e.contains(&format!("sslmode={bad:?}")), "{e}");
            assert!(e.contains("disable, prefer, require, verify-ca or verify-full"), "{e}");
        }
        let e = split_ssl_params("postgres://db/relay?sslrootcert=system&sslmode=verify-full").unwrap_err();
        assert!(e.contains("sslrootcert=system") && e.contains("PEM file"), "{e}");
    }

    #[test]
    fn errors_never_show_the_password() {
        for url in [
            "postgres://relay:hunter2-secret@db/relay?sslmode=verify-everything",
            "postgres://db/relay?password=hunter2-secret&sslmode=nope",
            "postgres://relay:hunter2-secret@db/relay?sslmode=%FF",
            "postgres://relay:hunter2-secret@db/relay?sslrootcert=system",
        ] {
            let e = split_ssl_params(url).unwrap_err();
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = client_config(PgTlsMode::VerifyFull, None).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }

    // A CA, a certificate it issued for db.example and 127.0.0.1, and an unrelated CA (EC P-256,
    // valid 2000–2100; made with Python's `cryptography` for these tests).
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBeTCCAR6gAwIBAgIUFHIEIbE3XQCOOqYkfdqR6j4bmJcwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOdGxzLnJzIHRlc3QgQ0EwIBcNMDAwMTAxMDAwMDAwWhgPMjEw
MDAxMDEwMDAwMDBaMBkxFzAVBgNVBAMMDnRscy5ycyB0ZXN0IENBMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEOadVs82ejvNyRiWI3hElm2pAF+tLN+se7FbocHg8
GKoh5xXYIQfNhXiAiGziLvzsIzIHawUrIvO38PzZf3E0hKNCMEAwDwYDVR0TAQH/
BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwHQYDVR0OBBYEFIjlRl0WZo95u+mjeYYY
Z35vDYTnMAoGCCqGSM49BAMCA0kAMEYCIQD/2E6+3ep600NsPogvHeNhpyFlnPO7
NerKoEKY3LdhiAIhAIHrQ3eNMDTOlNV3gZbrPZ4YGWZkdFghf6aBBSYST47A
-----END CERTIFICATE-----
";
    const OTHER_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBeTCCASCgAwIBAgIUQ/qG4QlUxiJsWta4lWcIr+fMUJMwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPdGxzLnJzIG90aGVyIENBMCAXDTAwMDEwMTAwMDAwMFoYDzIx
MDAwMTAxMDAwMDAwWjAaMRgwFgYDVQQDDA90bHMucnMgb3RoZXIgQ0EwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAASWLQxi2P1f//qYsIpgqfkpENZ1x8arOGX6vfBK
2a6jocHzaylK+3M0zFSJj31VpBchXsJ01PrXhvoHJXbKb3dho0IwQDAPBgNVHRMB
Af8EBTADAQH/MA4GA1UdDwEB/wQEAwIBBjAdBgNVHQ4EFgQUN+scJU5SFhfKXep/
lnMpRuMTRQowCgYIKoZIzj0EAwIDRwAwRAIgIn78d4rxCXgM7Tii18xWWEK4L6Se
zJyx8Q0kJZ9fDpUCIDn5RijBC7r8Qa12jaOhVIiF1U4CMk9G94YWz9bw/OUa
-----END CERTIFICATE-----
";
    const SERVER: &str = "-----BEGIN CERTIFICATE-----
MIIBpjCCAUugAwIBAgIUdqYu4VzCiQg3nEuWhh9kODJD2cMwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOdGxzLnJzIHRlc3QgQ0EwIBcNMDAwMTAxMDAwMDAwWhgPMjEw
MDAxMDEwMDAwMDBaMBUxEzARBgNVBAMMCmRiLmV4YW1wbGUwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAATdrABSHu6lkkSXNl71bqYhhqRWrvngb9oXrsevxhuNncaS
WUlgvUsZbtamSgr/9PghBv1li1tKwSXBrw+nsT+Ho3MwcTAMBgNVHRMBAf8EAjAA
MA4GA1UdDwEB/wQEAwIHgDATBgNVHSUEDDAKBggrBgEFBQcDATAbBgNVHREEFDAS
ggpkYi5leGFtcGxlhwR/AAABMB8GA1UdIwQYMBaAFIjlRl0WZo95u+mjeYYYZ35v
DYTnMAoGCCqGSM49BAMCA0kAMEYCIQDEoQIvDPbXW/oXyK+dlYifO9oubkY7kORj
d4LuMHJNhgIhAOF483SEDwT4kSJRxS17vj/Gn1r2SI1wL+TJgMnv4c/5
-----END CERTIFICATE-----
";

    /// A file of its own in the temporary directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!("simplysync-pg-tls-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Whether `mode` with the root certificates in `roots` accepts the server's certificate
    /// presented as `name`.
    fn accepts(mode: PgTlsMode, roots: Option<&TempFile>, name: &str) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = verifier(mode, roots.map(|f| f.0.as_path()), &provider).unwrap();
        let cert = CertificateDer::from_pem_slice(SERVER.as_bytes()).unwrap();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        verifier.verify_server_cert(&cert, &[], &name, &[], UnixTime::now()).map(|_| ())
    }

    fn is_name_error(r: Result<(), rustls::Error>) -> bool {
        matches!(
            r,
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ))
        )
    }

    fn is_issuer_error(r: Result<(), rustls::Error>) -> bool {
        matches!(r, Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)))
    }

    #[test]
    fn verify_full_checks_the_chain_and_the_name() {
        let (ca, other) = (TempFile::new("full-ca.pem", CA), TempFile::new("full-other.pem", OTHER_CA));
        assert!(accepts(PgTlsMode::VerifyFull, Some(&ca), "db.example").is_ok());
        assert!(accepts(PgTlsMode::VerifyFull, Some(&ca), "127.0.0.1").is_ok());
        assert!(is_name_error(accepts(PgTlsMode::VerifyFull, Some(&ca), "elsewhere.example")));
        assert!(is_issuer_error(accepts(PgTlsMode::VerifyFull, Some(&other), "db.example")));
    }

    #[test]
    fn verify_ca_checks_the_chain_not_the_name() {
        let (ca, other) = (TempFile::new("ca-ca.pem", CA), TempFile::new("ca-other.pem", OTHER_CA));
        assert!(accepts(PgTlsMode::VerifyCa, Some(&ca), "db.example").is_ok());
        assert!(accepts(PgTlsMode::VerifyCa, Some(&ca), "elsewhere.example").is_ok());
        assert!(accepts(PgTlsMode::VerifyCa, Some(&ca), "10.0.0.9").is_ok());
        assert!(is_issuer_error(accepts(PgTlsMode::VerifyCa, Some(&other), "db.example")));
    }

    #[test]
    fn prefer_and_require_accept_any_certificate_unless_given_root_certificates() {
        let (ca, other) = (TempFile::new("req-ca.pem", CA), TempFile::new("req-other.pem", OTHER_CA));
        for mode in [PgTlsMode::Prefer, PgTlsMode::Require] {
            assert!(accepts(mode, None, "elsewhere.example").is_ok(), "{mode}");
            // As libpq: with sslrootcert they check the chain (not the name), as verify-ca does.
            assert!(accepts(mode, Some(&ca), "elsewhere.example").is_ok(), "{mode}");
            assert!(is_issuer_error(accepts(mode, Some(&other), "db.example")), "{mode}");
        }
    }

    #[test]
    fn every_mode_builds_without_a_process_wide_provider() {
        let ca = TempFile::new("build-ca.pem", &format!("{CA}{OTHER_CA}"));
        for mode in
            [PgTlsMode::Disable, PgTlsMode::Prefer, PgTlsMode::Require, PgTlsMode::VerifyCa, PgTlsMode::VerifyFull]
        {
            let config = client_config(mode, Some(&ca.0)).unwrap();
            assert_eq!(config.alpn_protocols, vec![b"postgresql".to_vec()]);
        }
        for mode in [PgTlsMode::Disable, PgTlsMode::Prefer, PgTlsMode::Require] {
            client_config(mode, None).unwrap();
        }
        // disable never reads its root certificates.
        client_config(PgTlsMode::Disable, Some(Path::new("/nonexistent/ca.pem"))).unwrap();
    }

    #[test]
    fn verifying_modes_need_usable_root_certificates() {
        for mode in [PgTlsMode::VerifyCa, PgTlsMode::VerifyFull] {
            let e = client_config(mode, None).unwrap_err();
            assert!(e.contains(&format!("sslmode={mode} needs sslrootcert")), "{e}");
        }
        let e = client_config(PgTlsMode::VerifyFull, Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(e.starts_with("sslrootcert /nonexistent/ca.pem: cannot read it"), "{e}");
        let empty = TempFile::new("empty.pem", "no certificates here\n");
        let e = client_config(PgTlsMode::Require, Some(&empty.0)).unwrap_err();
        assert!(e.contains(&empty.0.display().to_string()) && e.contains("no certificate"), "{e}");
        let broken = TempFile::new("broken.pem", "-----BEGIN CERTIFICATE-----\nnot base64!\n");
        let e = client_config(PgTlsMode::VerifyCa, Some(&broken.0)).unwrap_err();
        assert!(e.contains(&broken.0.display().to_string()), "{e}");
    }
}
