//! TLS (`ebb::tls`): STOMP over TLS answers a client that trusts the server's CA and
//! fails the handshake of one that trusts another; with a client CA it takes only
//! clients with a certificate that CA signed; the HTTP server serves `https` and
//! `wss`; certificate files that are missing, empty or do not match their key are
//! refused naming the file. Certificates are made at run time (rcgen), none is
//! committed. stomp.py over TLS is in `stomp_py.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use ebb::http::{HttpOptions, HttpServer};
use ebb::stomp::connection::ConnectionConfig;
use ebb::test_util::*;
use ebb::tls::TlsFiles;

/// A CA, a server certificate it signed (for `localhost` and 127.0.0.1), a client
/// certificate it signed, and a second CA that signed nothing of the server's: PEM
/// files in a temporary folder.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The CA's certificate and key, to sign more client certificates ([`Pki::client`]).
    issuer: (rcgen::Certificate, KeyPair),
}

impl Pki {
    /// A client certificate the CA signed with `subject` (one RDN per entry, in
    /// order), written as `<file>.pem` and `<file>.key`: (certificate, key) paths.
    pub fn client(&self, file: &str, subject: &[(DnType, &str)]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        let cert = params
            .signed_by(&key, &self.issuer.0, &self.issuer.1)
            .unwrap();
        let cert_path = self.dir.path().join(format!("{file}.pem"));
        let key_path = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}

/// Makes the certificates ([`Pki`]).
pub fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    let (ca_cert, ca_key) = ca("ebb test CA");
    let (other_cert, _) = ca("another CA");
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca_cert, &ca_key)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["billing".to_string()]).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "billing");
    let client = client_params
        .signed_by(&client_key, &ca_cert, &ca_key)
        .unwrap();
    Pki {
        ca: write("ca.pem", ca_cert.pem()),
        other_ca: write("other-ca.pem", other_cert.pem()),
        cert: write("server.pem", server.pem()),
        key: write("server.key", server_key.serialize_pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
        issuer: (ca_cert, ca_key),
        dir,
    }
}

/// A TLS client trusting `ca`, presenting `client` (certificate, key) if given.
fn connector(ca: &PathBuf, client: Option<(&PathBuf, &PathBuf)>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A STOMP-over-TLS listener on an ephemeral port in front of a broker on `t`.
async fn tls_listener(t: &TestStore, files: &TlsFiles) -> (ebb::Broker, std::net::SocketAddr) {
    tls_listener_with(t, files, ConnectionConfig::default()).await
}

/// [`tls_listener`] with the connections' settings (users, rights) of `config`.
async fn tls_listener_with(
    t: &TestStore,
    files: &TlsFiles,
    config: ConnectionConfig,
) -> (ebb::Broker, std::net::SocketAddr) {
    let b = broker(t, policy(3_600_000, 400), 2).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    std::mem::forget(_stop);
    actix_rt::spawn(ebb::transport::listener::run_tls(
        listener,
        files.acceptor(&[]).unwrap(),
        ebb::stomp::connection::Stomp::new(b.clone(), config),
        stop_rx,
    ));
    (b, addr)
}

/// CONNECT over `stream`; the first frame's text back (empty when the server closed).
async fn stomp_connect<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
) -> String {
    exchange(stream, "CONNECT\naccept-version:1.2\nhost:localhost\n\n\0").await
}

/// Writes `frames` to `stream`; the text of the first frame back (empty when the
/// server closed).
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    frames: &str,
) -> String {
    if stream.write_all(frames.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut got = Vec::new();
    let mut buffer = [0u8; 1024];
    while !got.contains(&0) {
        match tokio::time::timeout(ebb::test_util::PATIENCE, stream.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buffer[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

async fn stomp_over_tls_trusts_only_the_right_ca(t: TestStore) {
    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: None,
    };
    let (b, addr) = tls_listener(&t, &files).await;
    let name = ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector(&pki.ca, None)
        .connect(name.clone(), tcp)
        .await
        .expect("the right CA: handshake");
    let answer = stomp_connect(&mut tls).await;
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let refused = connector(&pki.other_ca, None).connect(name, tcp).await;
    let e = match refused {
        Ok(_) => panic!("another CA: the handshake must fail"),
        Err(e) => e,
    };
    assert!(
        e.to_string().contains("UnknownIssuer")
            || e.to_string().contains("invalid peer certificate"),
        "{e}"
    );
    b.shutdown().await.unwrap();
}

async fn client_certificates_are_required_with_a_client_ca(t: TestStore) {
    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: Some(pki.ca.clone()),
    };
    let (b, addr) = tls_listener(&t, &files).await;
    let name = ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut with_cert = connector(&pki.ca, Some((&pki.client_cert, &pki.client_key)))
        .connect(name.clone(), tcp)
        .await
        .expect("a client certificate the CA signed: handshake");
    let answer = stomp_connect(&mut with_cert).await;
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");

    // Without a certificate: TLS 1.3 lets the client finish first; the server's
    // refusal ends the connection before any STOMP frame.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let answer = match connector(&pki.ca, None).connect(name, tcp).await {
        Ok(mut tls) => stomp_connect(&mut tls).await,
        Err(_) => String::new(),
    };
    assert_eq!(answer, "", "no client certificate: no STOMP answer");
    b.shutdown().await.unwrap();
}

async fn the_http_server_serves_https_and_wss(t: TestStore) {
    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: None,
    };
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.tls = Some(files.acceptor(&[b"http/1.1"]).unwrap());
    options.stomp = Some(ConnectionConfig::default());
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let addr = server.local_addr();
    let name = ServerName::try_from("localhost").unwrap();

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector(&pki.ca, None)
        .connect(name.clone(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await.ok();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"alive\""), "{answer}");

    let first = stomp_connect_over_wss(addr, &connector(&pki.ca, None)).await;
    assert!(first.starts_with("CONNECTED\n"), "{first:?}");
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Hardening issue, point 11: login by client certificate (ActiveMQ's certificate
/// login module). A user with `certificate_subject` is whoever presents a verified
/// certificate with that subject: CONNECT needs no passcode, and the user's rights
/// apply. A login naming another user over that certificate is refused; a
/// certificate no user claims logs nobody in (a passcode still may).
async fn a_client_certificate_logs_in_as_its_user(t: TestStore) {
    use ebb::auth::{hash_password, AuthorizationEntry, Security, User};
    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: Some(pki.ca.clone()),
    };
    let security = |subject: &str| Security {
        users: vec![
            User {
                login: "billing-service".into(),
                password_hash: String::new(),
                certificate_subject: Some(subject.parse().unwrap()),
                groups: vec!["finance".into()],
            },
            User {
                login: "alice".into(),
                password_hash: hash_password("pw").unwrap(),
                certificate_subject: None,
                groups: vec![],
            },
        ],
        authorization: vec![AuthorizationEntry {
            destination: "queue://ledger".into(),
            read: vec!["finance".into()],
            write: vec![],
            admin: vec![],
        }],
        ..Security::default()
    };
    let config = |subject: &str| ConnectionConfig {
        security: Arc::new(security(subject)),
        ..ConnectionConfig::default()
    };
    let name = ServerName::try_from("localhost").unwrap();
    let client = connector(&pki.ca, Some((&pki.client_cert, &pki.client_key)));
    // The test client certificate's subject is `CN=billing`.
    let (b, addr) = tls_listener_with(&t, &files, config("cn = billing")).await;
    let open = || async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.connect(name.clone(), tcp).await.expect("handshake")
    };
    let mut tls = open().await;
    let answer = stomp_connect(&mut tls).await;
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");
    let answer = exchange(
        &mut tls,
        "SUBSCRIBE\nid:1\ndestination:/queue/ledger\nreceipt:s\n\n\0",
    )
    .await;
    assert!(
        answer.starts_with("RECEIPT\n"),
        "the user's read right applies: {answer:?}"
    );
    let answer = exchange(
        &mut tls,
        "SEND\ndestination:/queue/ledger\nreceipt:w\n\nx\0",
    )
    .await;
    assert!(
        answer.starts_with("ERROR\n") && answer.contains("billing-service has no write right"),
        "and only its rights: {answer:?}"
    );
    let mut tls = open().await;
    let answer = exchange(
        &mut tls,
        "CONNECT\naccept-version:1.2\nhost:localhost\nlogin:alice\npasscode:pw\n\n\0",
    )
    .await;
    assert!(
        answer.starts_with("ERROR\n") && answer.contains("not as login alice"),
        "{answer:?}"
    );
    b.shutdown().await.unwrap();

    // No user claims this certificate: it logs nobody in, a passcode still does.
    let (b, addr) = tls_listener_with(&t, &files, config("CN=someone else")).await;
    let open = || async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.connect(name.clone(), tcp).await.expect("handshake")
    };
    let mut tls = open().await;
    let answer = stomp_connect(&mut tls).await;
    assert!(
        answer.starts_with("ERROR\n") && answer.contains("authentication required"),
        "{answer:?}"
    );
    let mut tls = open().await;
    let answer = exchange(
        &mut tls,
        "CONNECT\naccept-version:1.2\nhost:localhost\nlogin:alice\npasscode:pw\n\n\0",
    )
    .await;
    assert!(answer.starts_with("CONNECTED\n"), "{answer:?}");
    b.shutdown().await.unwrap();
}

/// Hardening issue, point 11 (a security fault found by trying to break it): the
/// subject is compared as the certificate's RDNs, never as text. A certificate
/// whose one CN is `orders-service, O=Example` or `orders-service+O=Example` does
/// not log in as the user of `CN=orders-service,O=Example` (over STOMP+TLS or
/// `wss`), and its refusal names the subject it presented; a real comma in a value,
/// escaped in the configuration, logs in; `emailAddress` matches.
async fn a_crafted_common_name_passes_for_no_other_subject(t: TestStore) {
    use ebb::auth::{Security, User};
    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: Some(pki.ca.clone()),
    };
    let user = |login: &str, subject: &str| User {
        login: login.into(),
        password_hash: String::new(),
        certificate_subject: Some(subject.parse().unwrap()),
        groups: vec![],
    };
    let security = Arc::new(Security {
        users: vec![
            user("orders", "CN=orders-service,O=Example"),
            user("acme", "CN=billing\\, Inc.,O=Acme"),
            user("ops", "CN=ops,emailAddress=ops@example.com"),
        ],
        ..Security::default()
    });
    security.validate().unwrap();
    let config = ConnectionConfig {
        security: Arc::clone(&security),
        ..ConnectionConfig::default()
    };
    let (b, addr) = tls_listener_with(&t, &files, config).await;
    let name = ServerName::try_from("localhost").unwrap();
    let connect_as = |(cert, key): (PathBuf, PathBuf)| {
        let client = connector(&pki.ca, Some((&cert, &key)));
        let name = name.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut tls = client.connect(name, tcp).await.expect("handshake");
            stomp_connect(&mut tls).await
        }
    };
    let email = DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]);
    let genuine = pki.client(
        "genuine",
        &[
            (DnType::CommonName, "orders-service"),
            (DnType::OrganizationName, "Example"),
        ],
    );
    let answer = connect_as(genuine).await;
    assert!(
        answer.starts_with("CONNECTED\n"),
        "the real subject logs in: {answer:?}"
    );
    for (file, cn, shown) in [
        (
            "comma",
            "orders-service, O=Example",
            "CN=orders-service\\, O=Example",
        ),
        (
            "plus",
            "orders-service+O=Example",
            "CN=orders-service\\+O=Example",
        ),
        (
            "tight",
            "orders-service,O=Example",
            "CN=orders-service\\,O=Example",
        ),
    ] {
        let crafted = pki.client(file, &[(DnType::CommonName, cn)]);
        let answer = connect_as(crafted).await;
        assert!(
            answer.starts_with("ERROR\n")
                && answer.contains(&format!(
                    "no user has the client certificate's subject ({shown})"
                )),
            "a CN of {cn:?} is one value, not two attributes: {answer:?}"
        );
        // The header is framed in the version the CONNECT agreed (1.2): its escapes
        // keep the subject's `\` (a 1.0 header could not carry it).
        let escaped = shown.replace('\\', "\\\\");
        assert!(
            answer.contains(&format!("message:authentication required\\c no user has the client certificate's subject ({escaped})")),
            "{answer:?}"
        );
    }
    let comma = pki.client(
        "acme",
        &[
            (DnType::CommonName, "billing, Inc."),
            (DnType::OrganizationName, "Acme"),
        ],
    );
    let answer = connect_as(comma).await;
    assert!(
        answer.starts_with("CONNECTED\n"),
        "an escaped comma in the configuration matches a comma in the value: {answer:?}"
    );
    let ops = pki.client(
        "ops",
        &[(DnType::CommonName, "ops"), (email, "ops@example.com")],
    );
    let answer = connect_as(ops).await;
    assert!(
        answer.starts_with("CONNECTED\n"),
        "emailAddress: {answer:?}"
    );
    b.shutdown().await.unwrap();

    // The same over `wss`.
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.tls = Some(files.acceptor(&[b"http/1.1"]).unwrap());
    options.security = Arc::clone(&security);
    options.stomp = Some(ConnectionConfig {
        security,
        ..ConnectionConfig::default()
    });
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let (cert, key) = pki.client("wss", &[(DnType::CommonName, "orders-service, O=Example")]);
    let first = stomp_connect_over_wss(
        server.local_addr(),
        &connector(&pki.ca, Some((&cert, &key))),
    )
    .await;
    assert!(
        first.starts_with("ERROR\n")
            && first.contains("no user has the client certificate's subject"),
        "{first:?}"
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A CONNECT without a login over `wss` to `addr`, by `client`; the text of the first
/// frame back.
async fn stomp_connect_over_wss(
    addr: std::net::SocketAddr,
    client: &tokio_rustls::TlsConnector,
) -> String {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as Ws;

    let name = ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = client.connect(name, tcp).await.unwrap();
    let mut request = format!("wss://localhost:{}/stomp", addr.port())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(request, tls).await.unwrap();
    ws.send(Ws::Text(
        "CONNECT\naccept-version:1.2\nhost:localhost\n\n\0".into(),
    ))
    .await
    .unwrap();
    let first = tokio::time::timeout(ebb::test_util::PATIENCE, ws.next())
        .await
        .expect("an answer over wss")
        .unwrap()
        .unwrap();
    first.to_text().unwrap().to_string()
}

/// Login by client certificate over `wss`: the HTTP server hands the verified
/// certificate's subject to the STOMP session of the WebSocket.
async fn a_client_certificate_logs_in_over_wss(t: TestStore) {
    use ebb::auth::{Security, User};

    let pki = pki();
    let files = TlsFiles {
        cert_file: pki.cert.clone(),
        key_file: pki.key.clone(),
        client_ca_file: Some(pki.ca.clone()),
    };
    let security = Arc::new(Security {
        users: vec![User {
            login: "billing-service".into(),
            password_hash: String::new(),
            certificate_subject: Some("CN=billing".parse().unwrap()),
            groups: vec![],
        }],
        ..Security::default()
    });
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.tls = Some(files.acceptor(&[b"http/1.1"]).unwrap());
    options.security = Arc::clone(&security);
    options.stomp = Some(ConnectionConfig {
        security,
        ..ConnectionConfig::default()
    });
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let addr = server.local_addr();
    let client = connector(&pki.ca, Some((&pki.client_cert, &pki.client_key)));
    let first = stomp_connect_over_wss(addr, &client).await;
    assert!(
        first.starts_with("CONNECTED\n"),
        "logged in by its certificate, without a passcode: {first:?}"
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_client_certificate_logs_in_as_its_user,
    a_client_certificate_logs_in_over_wss,
    a_crafted_common_name_passes_for_no_other_subject,
    stomp_over_tls_trusts_only_the_right_ca,
    client_certificates_are_required_with_a_client_ca,
    the_http_server_serves_https_and_wss,
);

/// Certificate files that cannot serve are refused before anything listens, naming
/// the file and what is wrong with it.
#[test]
fn bad_certificate_files_are_refused_with_a_reason() {
    let other = pki();
    let pki = pki();
    let files = |cert: &PathBuf, key: &PathBuf| TlsFiles {
        cert_file: cert.clone(),
        key_file: key.clone(),
        client_ca_file: None,
    };
    let missing = pki.dir.path().join("nowhere.pem");
    let empty = pki.dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let cases = [
        (files(&missing, &pki.key), "cannot read certificate file"),
        (files(&empty, &pki.key), "holds no certificate"),
        (files(&pki.cert, &empty), "no PEM private key"),
        (files(&pki.cert, &other.key), "do not go together"),
    ];
    for (files, says) in cases {
        let error = files
            .acceptor(&[])
            .err()
            .unwrap_or_else(|| panic!("{files:?} accepted"))
            .to_string();
        assert!(error.contains(says), "{error} does not say `{says}`");
    }
    let ok = files(&pki.cert, &pki.key);
    assert!(ok.acceptor(&[]).is_ok());
}

/// A user who logs in only by client certificate can never log in where no listener
/// asks for one: `ebb serve` refuses to start, saying what is missing.
#[test]
fn a_certificate_user_without_a_certificate_listener_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ebb.toml");
    std::fs::write(
        &config,
        "[[users]]\nlogin = \"orders\"\ncertificate_subject = \"CN=orders\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(format!("sqlite://{}", dir.path().join("s.db").display()))
        .arg("--stomp")
        .arg("127.0.0.1:0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "user `orders` logs in only by client certificate, but no listener asks for one"
        ),
        "{stderr}"
    );
    assert!(
        !dir.path().join("s.db").exists(),
        "refused before the store opened"
    );
}
