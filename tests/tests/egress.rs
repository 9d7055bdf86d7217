//! The egress mechanism: a sandbox in a network namespace of its own with `lo` alone,
//! whose only way out is the daemon's proxy on `127.0.0.1:3128`, allowing a list of
//! hosts and ports. It is every package install's network (issue 16's finding 2: the
//! install shared the host's namespace, reached other addresses on the index's port,
//! port 53, UDP services and the host's `/proc/net/tcp`), and a profile's
//! `network.egress`. Probing it from a job of such a profile shows what code in that
//! configuration can reach, with positive evidence: errnos from inside, and planted
//! listeners on the host that see nothing.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vivarium_e2e::proto::Reason;
use vivarium_e2e::{
    default_profile_with, describe, evidence, probe, require_root, Daemon, DaemonOpts, Job,
};

/// A host TCP listener that counts connections and echoes what it reads.
fn echo_listener(addr: &str) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind((addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, hits)
}

fn egress_profile(hosts: &str) -> String {
    default_profile_with(&[("mode", &format!("mode = \"loopback\"\negress = [{hosts}]"))])
}

#[tokio::test(flavor = "multi_thread")]
async fn an_egress_sandbox_reaches_the_allowed_host_through_the_proxy_and_nothing_else() {
    if !require_root() {
        return;
    }
    let (allowed, allowed_hits) = echo_listener("127.0.0.1");
    let (host_tcp, host_tcp_hits) = echo_listener("127.0.0.1");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let host_udp = udp.local_addr().unwrap().port();
    let daemon = Daemon::start(DaemonOpts::default().profile(
        "egress",
        &egress_profile(&format!("\"127.0.0.1:{allowed}\"")),
    ));
    let job = Job::new(probe("egress"))
        .profile("egress")
        .arg(host_tcp.to_string())
        .arg(host_udp.to_string())
        .arg(allowed.to_string());
    let c = daemon.run_job(&job).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
    let ev = evidence(&c);
    eprintln!("evidence: {ev}");
    let field = |k: &str| ev[k].clone();
    // Directly: Landlock allows TCP connect to the proxy's port alone.
    for k in ["direct_host_tcp", "direct_allowed", "direct_other_loopback"] {
        assert!(
            matches!(
                field(k)["errno"].as_str(),
                Some("EACCES" | "ECONNREFUSED" | "ENETUNREACH")
            ),
            "{k}: {ev}"
        );
    }
    // No route off the namespace: a route lookup (nothing is sent) fails.
    assert_eq!(field("route_outside")["errno"], "ENETUNREACH", "{ev}");
    // Nothing inside resolves names.
    assert!(field("dns").get("gaierror").is_some(), "{ev}");
    // The namespace's sockets: the proxy's listener and nothing of the host's.
    assert_eq!(field("listening")["ok"], serde_json::json!([3128]), "{ev}");
    if let Some(names) = field("interfaces")["ok"].as_array() {
        assert_eq!(names, &vec![serde_json::json!("lo")], "{ev}");
    }
    // Through the proxy: the allowed host tunnels; another port or address is 403.
    assert!(
        field("proxy_allowed")["ok"]["status"]
            .as_str()
            .is_some_and(|s| s.contains(" 200")),
        "{ev}"
    );
    assert_eq!(field("proxy_allowed")["ok"]["echoed"], "ping", "{ev}");
    for k in ["proxy_host_tcp", "proxy_other_loopback"] {
        assert!(
            field(k)["ok"]["status"]
                .as_str()
                .is_some_and(|s| s.contains(" 403")),
            "{k}: {ev}"
        );
    }
    assert_eq!(
        field("proxy_env"),
        serde_json::json!("http://127.0.0.1:3128")
    );
    // The host side: only the allowed upstream saw a connection (the proxy's), the
    // planted TCP and UDP listeners saw nothing.
    assert_eq!(allowed_hits.load(Ordering::SeqCst), 1, "{ev}");
    assert_eq!(host_tcp_hits.load(Ordering::SeqCst), 0, "{ev}");
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram from the sandbox reached the host's UDP listener"
    );
    assert!(daemon.log().contains("egress"), "{}", daemon.log());
}

/// A profile without `network.egress` has no proxy and no way out: with its private
/// loopback (`default`) the host's ports are the job's own, with nobody listening
/// (ECONNREFUSED; a datagram goes to the job's own `lo`, and the host's socket gets
/// nothing); with `network = "none"` (`offline`) there is no INET socket at all.
#[tokio::test(flavor = "multi_thread")]
async fn without_egress_there_is_no_proxy_and_no_network() {
    if !require_root() {
        return;
    }
    let (port, hits) = echo_listener("127.0.0.1");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let daemon = Daemon::start(DaemonOpts::default());
    for profile in ["default", "offline"] {
        let job = Job::new(probe("egress"))
            .profile(profile)
            .arg(port.to_string())
            .arg(udp_port.to_string())
            .arg(port.to_string());
        let c = daemon.run_job(&job).await;
        assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
        let ev = evidence(&c);
        let errno = |k: &str| ev[k]["errno"].as_str().unwrap_or("").to_owned();
        if profile == "offline" {
            for k in [
                "direct_host_tcp",
                "proxy_allowed",
                "udp_to_host",
                "route_outside",
            ] {
                assert_eq!(errno(k), "EPERM", "{profile} {k}: {ev}");
            }
        } else {
            assert_eq!(errno("direct_host_tcp"), "ECONNREFUSED", "{ev}");
            assert_eq!(errno("proxy_allowed"), "ECONNREFUSED", "{ev}");
            assert_eq!(errno("route_outside"), "ENETUNREACH", "{ev}");
        }
        assert!(ev["proxy_env"].is_null(), "{ev}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let mut buf = [0u8; 64];
    let got = udp.recv_from(&mut buf);
    assert!(got.is_err(), "a job's datagram reached the host: {got:?}");
}

/// `network.egress` is refused where it cannot be what it says: with a warm pool or a
/// zygote (cold jobs only), or an entry that is not a host[:port].
#[test]
fn egress_profiles_are_validated() {
    if !require_root() {
        return;
    }
    for (extra, needle) in [
        ("\n[warm]\npool = 2\n", "cold jobs only"),
        ("", "host or host:port"),
    ] {
        let hosts = if extra.is_empty() {
            "\"a/b\""
        } else {
            "\"127.0.0.1:9\""
        };
        let text = format!("{}{extra}", egress_profile(hosts));
        let e = Daemon::try_start(DaemonOpts::default().profile("bad", &text))
            .err()
            .expect("the daemon refused the profile");
        assert!(e.contains("network.egress") && e.contains(needle), "{e}");
    }
}
