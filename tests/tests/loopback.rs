//! A private loopback (issue 17, point 11): before, `socket(AF_INET)` was refused in every
//! profile, so `asyncio.start_server` on 127.0.0.1, local test servers and tools that
//! talk to themselves over TCP failed. The shipped profiles now give each job its own
//! network namespace with `lo` up, as `docker --network none` does: TCP and UDP work on
//! the job's own 127.0.0.1 and ::1, nothing routes off the namespace, and the host's
//! loopback is another namespace's. `network = "none"` (the shipped `offline` profile)
//! keeps the old behaviour: no IPv4/IPv6 socket at all.

use std::io::Read;
use std::net::TcpListener;

use vivarium_e2e::proto::Reason;
use vivarium_e2e::{describe, evidence, require_root, Daemon, DaemonOpts, Job};

/// What a job does over its own loopback, and what it learns about the way out.
/// `ARGS`: the port of a listener on the host's 127.0.0.1.
const PROBE: &str = r#"
import asyncio, errno, json, socket, sys, threading, urllib.request, http.server
host_port = int(sys.argv[1])
out = {}

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else type(e).__name__

# asyncio's own server and client on 127.0.0.1 (the case that used to fail).
async def echo(reader, writer):
    writer.write(await reader.readline())
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello over lo\n")
    await writer.drain()
    line = await reader.readline()
    writer.close()
    server.close()
    await server.wait_closed()
    return line.decode().strip()
try:
    out["asyncio_v4"] = asyncio.run(main())
except Exception as e:
    out["asyncio_v4"] = err(e)

# IPv6 on ::1.
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind(("::1", 0)); s.listen()
    c = socket.create_connection(("::1", s.getsockname()[1]), timeout=5)
    a, _ = s.accept(); c.sendall(b"v6"); out["tcp_v6"] = a.recv(2).decode()
except Exception as e:
    out["tcp_v6"] = err(e)

# UDP on 127.0.0.1.
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
    w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    w.sendto(b"dgram", r.getsockname()); r.settimeout(5)
    out["udp_v4"] = r.recv(16).decode()
except Exception as e:
    out["udp_v4"] = err(e)

# A local HTTP server and urllib, by the name "localhost".
try:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    with urllib.request.urlopen(f"http://localhost:{httpd.server_address[1]}/", timeout=5) as resp:
        out["http_localhost"] = resp.status
    httpd.shutdown()
except Exception as e:
    out["http_localhost"] = err(e)

# The host's loopback listener's port, on the job's 127.0.0.1: nobody listens there.
try:
    socket.create_connection(("127.0.0.1", host_port), timeout=5).close()
    out["host_port"] = "connected"
except Exception as e:
    out["host_port"] = err(e)

# Any route off the namespace? (A UDP connect only looks the route up, sends nothing.)
for name, fam, addr in (("route_v4", socket.AF_INET, ("192.0.2.1", 9)), ("route_v6", socket.AF_INET6, ("2001:db8::1", 9))):
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM); s.connect(addr)
        out[name] = "route via " + s.getsockname()[0]
    except Exception as e:
        out[name] = err(e)

# The interfaces the job's namespace has, and its IPv6 addresses (::1 once lo is up).
out["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
out["inet6_addrs"] = [l.split()[-1] for l in open("/proc/net/if_inet6")]
print(json.dumps(out))
"#;

/// A host listener the jobs must not reach, and nothing it accepted.
struct HostListener(TcpListener);

impl HostListener {
    fn bind() -> HostListener {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a host listener");
        l.set_nonblocking(true).expect("nonblocking");
        HostListener(l)
    }

    fn port(&self) -> String {
        self.0.local_addr().unwrap().port().to_string()
    }

    /// Nothing connected to it (positive evidence from the host's side).
    fn assert_untouched(&self) {
        match self.0.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok((mut s, peer)) => {
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                panic!("a job reached the host's loopback listener from {peer}: {buf:?}")
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn assert_private_loopback(profile: &str, ev: &serde_json::Value) {
    let want = serde_json::json!({
        "asyncio_v4": "hello over lo",
        "tcp_v6": "v6",
        "udp_v4": "dgram",
        "http_localhost": 200,
        "host_port": "ECONNREFUSED",
        "route_v4": "ENETUNREACH",
        "route_v6": "ENETUNREACH",
        "interfaces": ["lo"],
        "inet6_addrs": ["lo"],
    });
    assert_eq!(ev, &want, "profile {profile}");
}

/// Every shipped profile but `offline`: the job talks to itself over TCP and UDP, v4 and
/// v6, with asyncio, http.server and urllib, while the host's loopback listener is not
/// reached (ECONNREFUSED on the job's own 127.0.0.1, nothing accepted on the host) and
/// no route leads out. Cold, warm (cold-built) and zygote-forked sandboxes alike.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_talks_to_itself_over_its_own_loopback_and_reaches_nothing_else() {
    if !require_root() {
        return;
    }
    let host = HostListener::bind();
    let daemon = Daemon::start(DaemonOpts::default().warm_pools());
    for profile in ["default", "compat", "warm", "zygote"] {
        // (warm and zygote: the second job comes from the pool the first one started.)
        for _ in 0..2 {
            let c = daemon
                .run_job(&Job::new(PROBE).profile(profile).args([host.port()]))
                .await;
            assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
            assert_private_loopback(profile, &evidence(&c));
        }
    }
    host.assert_untouched();
}

/// `network = "none"` (the shipped `offline` profile): no IPv4/IPv6 socket at all, EPERM
/// from seccomp, and `lo` is down (it has no address).
#[tokio::test(flavor = "multi_thread")]
async fn the_offline_profile_has_no_network_at_all() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let code = r#"
import asyncio, errno, json, socket
out = {}
for name, fam in (("inet", socket.AF_INET), ("inet6", socket.AF_INET6)):
    try:
        socket.socket(fam, socket.SOCK_STREAM).close(); out[name] = "created"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
async def main():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    return len(server.sockets)
try:
    out["asyncio_sockets"] = asyncio.run(main())
except OSError as e:
    out["asyncio_sockets"] = errno.errorcode[e.errno]
# lo is down: it has no address (::1 is added when it comes up).
out["inet6_addrs"] = [l.split()[-1] for l in open("/proc/net/if_inet6")]
print(json.dumps(out))
"#;
    let c = daemon.run_job(&Job::new(code).profile("offline")).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
    let ev = evidence(&c);
    assert_eq!(ev["inet"], "EPERM", "{ev}");
    assert_eq!(ev["inet6"], "EPERM", "{ev}");
    // (CPython's create_server skips an address whose socket() fails: a server with
    // no sockets, the confusing failure a private loopback exists to avoid.)
    assert_eq!(ev["asyncio_sockets"], 0, "{ev}");
    assert_eq!(ev["inet6_addrs"], serde_json::json!([]), "{ev}");
}

/// A job cannot take its loopback down or give it an address that leads anywhere: `lo`
/// belongs to a namespace whose owner is the host's user namespace (cold jobs) or the
/// zygote's (forked jobs), and the job holds no capability in either.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_cannot_reconfigure_its_loopback() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let code = r#"
import errno, fcntl, json, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
out = {}
try:
    fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", 0))  # SIOCSIFFLAGS: lo down
    out["down"] = "done"
except OSError as e:
    out["down"] = errno.errorcode[e.errno]
print(json.dumps(out))
"#;
    for profile in ["default", "zygote", "zygote"] {
        let c = daemon.run_job(&Job::new(code).profile(profile)).await;
        assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
        // EPERM from the policy's ioctl filter (or, without it, from the missing
        // CAP_NET_ADMIN).
        assert_eq!(evidence(&c)["down"], "EPERM", "{profile}");
    }
}
