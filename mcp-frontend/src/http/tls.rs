//! TLS termination: the server configuration built from `[tls]`'s PEM files, swapped on
//! SIGHUP so a renewed certificate applies to new connections without a restart.
//!
//! Only the ring provider is used (never a process default provider). The config offers
//! ALPN `h2` then `http/1.1`, and TLS 1.2 and 1.3.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use super::config::TlsConfig;

/// Why the certificate or key cannot be served; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS file {path}: cannot be read")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS certificate file {path}: not valid PEM")]
    Pem {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS certificate file {path}: no certificate (expected PEM `CERTIFICATE` blocks, leaf first)")]
    NoCertificate { path: PathBuf },
    #[error(
        "TLS key file {path}: no private key (expected a PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)"
    )]
    NoKey { path: PathBuf },
    #[error("TLS key file {key} does not match the certificate in {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("TLS certificate {cert} with key {key}: {source}")]
    Invalid {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// The current server configuration, rebuilt from the same files on [`reload`](Self::reload).
pub struct TlsReloader {
    files: TlsConfig,
    current: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for TlsReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsReloader")
            .field("cert", &self.files.cert)
            .field("key", &self.files.key)
            .finish_non_exhaustive()
    }
}

impl TlsReloader {
    /// Read and check the certificate chain and key named by `files`.
    pub fn load(files: &TlsConfig) -> Result<TlsReloader, TlsError> {
        let (config, _) = build(files)?;
        Ok(TlsReloader {
            files: files.clone(),
            current: RwLock::new(config),
        })
    }

    /// The configuration new connections get.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Read both files again and use them for new connections. On an error the
    /// configuration in use is kept (connections keep being served) and the error returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.reload_described().map(|_| ())
    }

    fn reload_described(&self) -> Result<LeafInfo, TlsError> {
        let (config, leaf) = build(&self.files)?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        Ok(leaf)
    }

    /// Reload on every SIGHUP, logging the outcome (on a failure the old certificate stays).
    /// The handler is installed before this returns, so a SIGHUP right after it no longer
    /// ends the process. If it cannot be installed, that is logged and the task ends.
    pub fn spawn_sighup_reload(self: Arc<Self>) -> JoinHandle<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let hangups = signal(SignalKind::hangup());
        tokio::spawn(async move {
            let mut hangups = match hangups {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch SIGHUP: TLS certificates will not be reloaded");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
                match self.reload_described() {
                    Ok(leaf) => tracing::info!(
                        cert = %self.files.cert.display(),
                        sha256 = %leaf.sha256,
                        not_after = leaf.not_after.as_deref().unwrap_or("?"),
                        chain = leaf.chain_len,
                        "TLS certificate reloaded"
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "TLS certificate not reloaded; the previous one stays in use"
                    ),
                }
            }
        })
    }
}

/// What the log says about a loaded leaf.
struct LeafInfo {
    sha256: String,
    not_after: Option<String>,
    chain_len: usize,
}

fn build(files: &TlsConfig) -> Result<(Arc<ServerConfig>, LeafInfo), TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let leaf = LeafInfo {
        sha256: Sha256::digest(certs[0].as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        not_after: not_after(certs[0].as_ref()),
        chain_len: certs.len(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let invalid = |source| TlsError::Invalid {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(invalid)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                TlsError::KeyMismatch {
                    cert: files.cert.clone(),
                    key: files.key.clone(),
                }
            }
            e => invalid(e),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), leaf))
}

fn open(path: &Path) -> Result<BufReader<File>, TlsError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    match rustls_pemfile::private_key(&mut open(path)?) {
        Ok(Some(key)) => Ok(key),
        // A PEM error in the key file says no more than "no usable key".
        Ok(None) | Err(_) => Err(TlsError::NoKey {
            path: path.to_path_buf(),
        }),
    }
}

/// The leaf's `notAfter` as `YYYYMMDDHHMMSSZ` (a UTCTime given its century), for the
/// log; `None` if the DER is not the shape expected.
fn not_after(der: &[u8]) -> Option<String> {
    /// One DER TLV: (tag, contents, rest).
    fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, input) = input.split_first()?;
        let (&first, mut input) = input.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || input.len() < n {
                return None;
            }
            let len = input[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            input = &input[n..];
            len
        };
        (input.len() >= len).then(|| (tag, &input[..len], &input[len..]))
    }
    let (0x30, cert, _) = tlv(der)? else {
        return None;
    };
    let (0x30, tbs, _) = tlv(cert)? else {
        return None;
    };
    let (tag, _, mut rest) = tlv(tbs)?;
    if tag == 0xa0 {
        // [0] version; the serial number follows.
        (_, _, rest) = tlv(rest)?;
    }
    let (_, _, rest) = tlv(rest)?; // signature algorithm
    let (_, _, rest) = tlv(rest)?; // issuer
    let (0x30, validity, _) = tlv(rest)? else {
        return None;
    };
    let (_, _, validity) = tlv(validity)?; // notBefore
    let (tag @ (0x17 | 0x18), time, _) = tlv(validity)? else {
        return None;
    };
    let time = std::str::from_utf8(time).ok()?;
    if tag == 0x18 {
        return Some(time.to_string());
    }
    // UTCTime: YY below 50 is 20YY (RFC 5280 4.1.2.5.1).
    let century = if time.get(..2)?.parse::<u8>().ok()? < 50 {
        "20"
    } else {
        "19"
    };
    Some(format!("{century}{time}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

    /// A test CA, and leaves it signs for `localhost` and 127.0.0.1.
    pub(crate) struct TestCa {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    impl TestCa {
        pub(crate) fn new(name: &str) -> TestCa {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            let issuer =
                CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            TestCa { issuer }
        }

        pub(crate) fn cert_der(&self) -> CertificateDer<'static> {
            self.issuer.der().clone()
        }

        /// A leaf (cert PEM, key PEM, cert DER), subject CN `cn`.
        pub(crate) fn leaf(&self, cn: &str) -> (String, String, CertificateDer<'static>) {
            let mut params =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            params.not_after = rcgen::date_time_ymd(2040, 1, 2);
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            (cert.pem(), key.serialize_pem(), cert.der().clone())
        }

        /// Write a leaf (and the CA after it, as a chain) into `dir`; the files' config.
        pub(crate) fn write_leaf(
            &self,
            dir: &Path,
            cn: &str,
        ) -> (TlsConfig, CertificateDer<'static>) {
            let (cert, key, der) = self.leaf(cn);
            let files = TlsConfig {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
                hsts_max_age: 0,
            };
            std::fs::write(&files.cert, format!("{cert}{}", self.issuer.pem())).unwrap();
            std::fs::write(&files.key, key).unwrap();
            (files, der)
        }

        /// A client config trusting this CA (ring), offering `alpn`.
        pub(crate) fn client_config(&self, alpn: &[&[u8]]) -> rustls::ClientConfig {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.cert_der()).unwrap();
            let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            config
        }
    }

    #[test]
    fn loads_a_chain_and_offers_h2_then_http1() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (files, _) = ca.write_leaf(dir.path(), "leaf one");
        let reloader = TlsReloader::load(&files).unwrap();
        assert_eq!(
            reloader.current().alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn reads_not_after_from_the_leaf() {
        let ca = TestCa::new("test CA");
        let (_, _, der) = ca.leaf("leaf");
        assert_eq!(not_after(der.as_ref()).as_deref(), Some("20400102000000Z"));
        assert_eq!(not_after(b"\x30\x03\x02\x01"), None);
    }

    #[test]
    fn errors_name_the_file_and_the_fault() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (files, _) = ca.write_leaf(dir.path(), "leaf");

        let missing = TlsConfig {
            cert: dir.path().join("nope.pem"),
            ..files.clone()
        };
        let e = TlsReloader::load(&missing).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
        assert!(e.to_string().contains("nope.pem"), "{e}");

        // The key file holds no certificate.
        let no_cert = TlsConfig {
            cert: files.key.clone(),
            ..files.clone()
        };
        let e = TlsReloader::load(&no_cert).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
        assert!(e.to_string().contains("key.pem"), "{e}");

        // The certificate file holds no key.
        let no_key = TlsConfig {
            key: files.cert.clone(),
            ..files.clone()
        };
        let e = TlsReloader::load(&no_key).unwrap_err();
        assert!(matches!(e, TlsError::NoKey { .. }), "{e:?}");
        assert!(e.to_string().contains("cert.pem"), "{e}");

        // Another leaf's key.
        let (_, other_key, _) = ca.leaf("other");
        let other = dir.path().join("other-key.pem");
        std::fs::write(&other, other_key).unwrap();
        let mismatch = TlsConfig {
            key: other,
            ..files.clone()
        };
        let e = TlsReloader::load(&mismatch).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("other-key.pem"), "{e}");
    }

    #[test]
    fn a_failed_reload_keeps_the_config_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (files, _) = ca.write_leaf(dir.path(), "leaf");
        let reloader = TlsReloader::load(&files).unwrap();
        let before = reloader.current();
        std::fs::write(&files.cert, "not a certificate\n").unwrap();
        let e = reloader.reload().unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
        assert!(Arc::ptr_eq(&before, &reloader.current()));
        ca.write_leaf(dir.path(), "leaf two");
        reloader.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &reloader.current()));
    }
}
