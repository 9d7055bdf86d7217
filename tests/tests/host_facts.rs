//! Host facts a job's /proc no longer shows (issue 17, point 4): the kernel command line
//! and configuration, partitions and disk statistics, the host's load and pressure, its
//! physical memory map and I/O ports, device majors, consoles, the core-dump handler.
//! Each is compared with the host's own file: the job sees the neutral mask, never the
//! host's contents. What stays visible, and why, is in docs/SECURITY.md.

use vivarium_e2e::proto::Reason;
use vivarium_e2e::{describe, evidence, require_root, Daemon, DaemonOpts, Job};

const PROBE: &str = r#"
import json, os, sys
out = {"work": sorted(os.listdir("/work"))}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            out[path] = f.read().hex()
    except OSError as e:
        out[path] = "error: " + e.strerror
print(json.dumps(out))
"#;

async fn check(daemon: &Daemon, profile: &str) {
    let present: Vec<&str> = vivarium_e2e::MASKED_PROC_FILES
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    assert!(present.len() >= 8, "{present:?}");
    let mut job = Job::new(PROBE).profile(profile);
    for p in &present {
        job = job.arg(*p);
    }
    let c = daemon.run_job(&job).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
    let ev = evidence(&c);
    // The masks' sources (one file per distinct contents, in the job's scratch tmpfs
    // while its mounts are made) are gone from /work.
    assert_eq!(
        ev["work"],
        serde_json::json!(["main.py"]),
        "{profile}: {ev}"
    );
    // Each mask shows its own neutral contents, also where several share one source.
    const PRESSURE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                            full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
    for (path, want) in [
        ("/proc/cmdline", "\n"),
        ("/proc/loadavg", "0.00 0.00 0.00 1/1 1\n"),
        ("/proc/diskstats", ""),
        ("/proc/partitions", "major minor  #blocks  name\n\n"),
        ("/proc/pressure/cpu", PRESSURE),
        ("/proc/pressure/io", PRESSURE),
        ("/proc/pressure/memory", PRESSURE),
        (
            "/proc/devices",
            "Character devices:\n  1 mem\n\nBlock devices:\n",
        ),
    ] {
        if present.contains(&path) {
            let seen = decode(ev[path].as_str().unwrap_or_default());
            assert_eq!(String::from_utf8_lossy(&seen), want, "{profile}: {path}");
        }
    }
    use std::io::Read;
    for path in present {
        let seen = ev[path].as_str().unwrap_or_default();
        assert!(!seen.starts_with("error"), "{profile}: {path}: {seen}");
        let mut host = Vec::new();
        std::fs::File::open(path)
            .unwrap()
            .read_to_end(&mut host)
            .unwrap();
        let ours = decode(seen);
        assert!(
            ours.len() < 128,
            "{profile}: {path} shows {} bytes: {:?}",
            ours.len(),
            String::from_utf8_lossy(&ours)
        );
        // The host's file is not what the job saw (every one of these is non-empty and
        // host-specific here; the masks are empty or neutral).
        if !host.is_empty() && host != b"core\n" {
            assert_ne!(ours, host, "{profile}: {path} is the host's");
        }
    }
}

fn decode(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex from the probe"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_jobs_proc_shows_none_of_the_hosts_global_facts() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    check(&daemon, "default").await;
    check(&daemon, "zygote").await;
    // Readers of the masked files still parse them.
    let code = "print([float(x) for x in open('/proc/loadavg').read().split()[:3]])";
    let c = daemon.run_job(&Job::new(code)).await;
    assert_eq!(
        String::from_utf8_lossy(&c.stdout),
        "[0.0, 0.0, 0.0]\n",
        "{}",
        describe(&c)
    );
}

/// Issue 17, point 1: the boot clock predated the sandbox by the host's uptime. Each job
/// now has a time namespace whose monotonic and boot clocks start near zero when it is
/// made; the outcome lists it. (Compared with the host's uptime read before the job: the
/// daemon started after that, so a job with the host's clocks would show at least as
/// much.)
#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_clocks_start_near_zero() {
    if !require_root() {
        return;
    }
    let host_up = || -> f64 {
        let text = std::fs::read_to_string("/proc/uptime").unwrap();
        text.split_whitespace().next().unwrap().parse().unwrap()
    };
    let daemon = Daemon::start(DaemonOpts::default());
    let code = "import json, time\n\
                print(json.dumps({'uptime': float(open('/proc/uptime').read().split()[0]), \
                'boottime': time.clock_gettime(time.CLOCK_BOOTTIME), \
                'monotonic': time.clock_gettime(time.CLOCK_MONOTONIC)}))\n";
    for profile in ["default", "zygote"] {
        let before = host_up();
        let c = daemon.run_job(&Job::new(code).profile(profile)).await;
        assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
        let ev = evidence(&c);
        assert!(
            c.outcome.isolation.namespaces.iter().any(|n| n == "time"),
            "{profile}: {:?}",
            c.outcome.isolation.namespaces
        );
        for clock in ["uptime", "boottime", "monotonic"] {
            let t = ev[clock].as_f64().unwrap();
            // Within the job's own lifetime (its wall limit is 30 s; a zygote's forked
            // job's namespace is made at its fork), and far below the host's.
            assert!(t < 31.0, "{profile}: {clock} = {t}: {ev}");
            assert!(
                before - t > 1.0,
                "{profile}: {clock} = {t}, host {before}: {ev}"
            );
        }
    }
}
