//! PyPI packages: the install phase (uv in its own sandbox), the environment cache, and
//! the run phase (the environment bound read-only). Every test but the last is offline:
//! it builds a wheelhouse by hand (`tests/packages/make_wheelhouse.py`) and uses a
//! profile whose `[packages]` has `find_links` and no index. The last one installs numpy
//! from the real PyPI index (reachable from CI).

use std::path::{Path, PathBuf};
use std::time::Duration;
use vivarium_e2e::proto::ErrorCode;
use vivarium_e2e::{
    default_profile_with, require_root, wait_until, workspace_dir, ClientError, Collected, Daemon,
    DaemonOpts, Job,
};

/// The pinned uv (`scripts/install-uv.sh`): `$VIVARIUM_UV`, else /opt/vivarium/uv. Missing
/// is a failure when `VIVARIUM_REQUIRE_ROOT=1` (CI installs it), else a visible skip.
fn uv() -> Option<PathBuf> {
    let path = std::env::var_os("VIVARIUM_UV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/vivarium/uv/bin/uv"));
    if path.is_file() {
        return Some(path);
    }
    let name = vivarium_e2e::test_name();
    if std::env::var("VIVARIUM_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!(
            "{name}: no uv at {} (run scripts/install-uv.sh or set VIVARIUM_UV)",
            path.display()
        );
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {name}: no uv at {} (scripts/install-uv.sh)",
        path.display()
    );
    None
}

/// A wheelhouse and a cache directory, readable by the sandboxes' host ids.
struct Fixture {
    dir: tempfile::TempDir,
    uv: PathBuf,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        Fixture::with_pth_port(9)
    }

    /// The wheelhouse with `vivpth`'s marker connection aimed at `port`.
    fn with_pth_port(port: u16) -> Option<Fixture> {
        if !require_root() {
            return None;
        }
        let uv = uv()?;
        let dir = tempfile::Builder::new()
            .prefix("vivarium-pkg-")
            .tempdir()
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let status = std::process::Command::new("/usr/bin/python3")
            .arg(workspace_dir().join("tests/packages/make_wheelhouse.py"))
            .arg(dir.path().join("wh"))
            .arg(port.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "make_wheelhouse.py failed");
        Some(Fixture { dir, uv })
    }

    fn wheelhouse(&self) -> PathBuf {
        self.dir.path().join("wh")
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The default profile, offline: the wheelhouse and no index, plus `extra` lines
    /// replaced (`(key, line)` as in `default_profile_with`).
    fn offline_profile(&self, extra: &[(&str, &str)]) -> String {
        let find_links = format!("find_links = {:?}", self.wheelhouse().display().to_string());
        let mut repl = vec![
            ("index_url", find_links.as_str()),
            ("allow_hosts", "allow_hosts = []"),
        ];
        repl.extend_from_slice(extra);
        default_profile_with(&repl)
    }

    fn opts(&self, cache_max: u64) -> DaemonOpts {
        DaemonOpts::default()
            .config_line(&format!("uv = {:?}", self.uv.display().to_string()))
            .config_line(&format!(
                "package_cache_dir = {:?}",
                self.cache().display().to_string()
            ))
            .config_line(&format!("package_cache_max_bytes = {cache_max}"))
    }

    fn daemon(&self) -> Daemon {
        Daemon::start(
            self.opts(1 << 30)
                .profile("offline", &self.offline_profile(&[])),
        )
    }
}

fn job(code: &str, packages: &[&str]) -> Job {
    let mut job = Job::new(code).profile("offline");
    for p in packages {
        job = job.package(*p);
    }
    job
}

async fn ok(daemon: &Daemon, job: &Job) -> Collected {
    let c = daemon.run_job(job).await;
    assert_eq!(
        c.outcome.reason,
        vivarium_e2e::proto::Reason::Ok,
        "{}\n--- log ---\n{}",
        vivarium_e2e::describe(&c),
        daemon.log()
    );
    c
}

async fn refused(daemon: &Daemon, job: &Job) -> vivarium_e2e::proto::WireError {
    match daemon.try_run(job, None).await {
        Err(ClientError::Refused(e)) => e,
        other => panic!(
            "expected a refusal, got {other:?}\n--- log ---\n{}",
            daemon.log()
        ),
    }
}

fn installs(daemon: &Daemon) -> usize {
    daemon.log().matches("installing packages").count()
}

const TINY: &str = "import vivtiny, sys\nprint(vivtiny.answer(), sys.prefix)\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_wheelhouse_package_installs_imports_runs_and_is_cached() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    let first = ok(&daemon, &job(TINY, &["VivTiny"])).await;
    assert_eq!(String::from_utf8_lossy(&first.stdout), "42 /env\n");
    let p = first.packages.expect("a packages report");
    assert_eq!(p.requested, ["vivtiny"]);
    assert_eq!(p.resolved, ["vivtiny==1.0"]);
    assert!(!p.from_cache && p.env_bytes > 0, "{p:?}");
    let second = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&second.stdout), "42 /env\n");
    let p = second.packages.expect("a packages report");
    assert!(p.from_cache && p.install_ms == 0, "{p:?}");
    assert_eq!(installs(&daemon), 1, "{}", daemon.log());
    // A job without packages has no environment and no report.
    let plain = ok(
        &daemon,
        &Job::new("import sys; print(sys.prefix)").profile("offline"),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "/usr\n");
    assert!(plain.packages.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn pep723_inline_metadata_is_read_and_merged_with_explicit_packages() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    let code = "# /// script\n# requires-python = \">=3.8\"\n# dependencies = [\n#   \"vivneeds\",\n# ]\n# ///\nimport vivneeds, vivdep, vivtiny\nprint(vivdep.VERSION, vivtiny.answer())\n";
    let c = ok(&daemon, &job(code, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "1.0 42\n");
    let p = c.packages.unwrap();
    assert_eq!(p.requested, ["vivtiny", "vivneeds"]);
    assert_eq!(p.resolved, ["vivdep==1.0", "vivneeds==1.0", "vivtiny==1.0"]);
    // A malformed block is a typed refusal.
    let bad = "# /// script\n# dependencies = \"vivtiny\"\n# ///\n";
    let e = refused(&daemon, &job(bad, &[])).await;
    assert_eq!(e.code, ErrorCode::InvalidRequirement, "{e:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_cannot_write_into_its_environment() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    ok(&daemon, &job(TINY, &["vivtiny"])).await;
    let entry = std::fs::read_dir(fx.cache().join("envs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let init = entry.join("env/lib/python3.11/site-packages/vivtiny/__init__.py");
    let before = std::fs::read(&init).expect("the installed module on the host");
    let probe = r#"
import errno, json, os, vivtiny
target = os.path.dirname(vivtiny.__file__)
result = {}
def attempt(name, fn):
    try:
        fn()
        result[name] = "succeeded"
    except OSError as e:
        result[name] = errno.errorcode.get(e.errno, str(e.errno))
attempt("append", lambda: open(os.path.join(target, "__init__.py"), "a").write("x = 1\n"))
attempt("create", lambda: open(os.path.join(target, "new.py"), "w"))
attempt("unlink", lambda: os.unlink(os.path.join(target, "__init__.py")))
attempt("chmod", lambda: os.chmod(os.path.join(target, "__init__.py"), 0o777))
attempt("mkdir", lambda: os.mkdir("/env/new"))
attempt("rename", lambda: os.rename("/env/pyvenv.cfg", "/env/x"))
print(json.dumps(result))
"#;
    let c = ok(&daemon, &job(probe, &["vivtiny"])).await;
    let evidence = vivarium_e2e::evidence(&c);
    for (what, errno) in evidence.as_object().unwrap() {
        assert!(
            errno == "EROFS" || errno == "EACCES",
            "{what}: {errno} (expected EROFS or EACCES)\n{evidence}"
        );
    }
    assert_eq!(evidence.as_object().unwrap().len(), 6);
    assert_eq!(
        std::fs::read(&init).unwrap(),
        before,
        "the module changed on the host"
    );
    assert!(!init.with_file_name("new.py").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_identical_requests_build_once() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    let j = job(
        "import vivneeds, vivtiny\nprint(vivtiny.answer())\n",
        &["vivtiny", "vivneeds"],
    );
    let (a, b, c) = tokio::join!(ok(&daemon, &j), ok(&daemon, &j), ok(&daemon, &j));
    let reports: Vec<_> = [a, b, c]
        .into_iter()
        .map(|c| {
            assert_eq!(String::from_utf8_lossy(&c.stdout), "42\n");
            c.packages.unwrap()
        })
        .collect();
    let built = reports.iter().filter(|p| !p.from_cache).count();
    assert_eq!(built, 1, "{reports:?}");
    assert_eq!(installs(&daemon), 1, "{}", daemon.log());
    assert!(reports.iter().all(|p| p.resolved == reports[0].resolved));
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_are_typed_and_name_the_package() {
    let Some(fx) = Fixture::new() else { return };
    let deny = fx.offline_profile(&[(
        "max_env_bytes",
        "max_env_bytes = 2_097_152\ndeny = [\"VIVDEP\"]",
    )]);
    let daemon = Daemon::start(fx.opts(1 << 30).profile("offline", &deny));
    let cases: &[(&[&str], ErrorCode, &str)] = &[
        (&["nosuchpkg"], ErrorCode::PackageNotFound, "nosuchpkg"),
        (&["vivtiny==3"], ErrorCode::PackageNotFound, "vivtiny"),
        (
            &["vivneeds", "vivtiny>=2"],
            ErrorCode::PackageNotFound,
            "vivtiny",
        ),
        (&["vivsdist"], ErrorCode::NoCompatibleWheel, "vivsdist"),
        (&["vivbig"], ErrorCode::EnvironmentTooLarge, "vivbig"),
        (
            &["vivtiny >>> 1"],
            ErrorCode::InvalidRequirement,
            "vivtiny >>> 1",
        ),
        (
            &["vivtiny @ https://example.invalid/x.whl"],
            ErrorCode::InvalidRequirement,
            "vivtiny",
        ),
        (&["vivdep"], ErrorCode::PackageNotAllowed, "vivdep"),
    ];
    for (pkgs, code, needle) in cases {
        let e = refused(&daemon, &job("print(1)", pkgs)).await;
        assert_eq!(e.code, *code, "{pkgs:?}: {e:?}");
        assert!(e.message.contains(needle), "{pkgs:?}: {e:?}");
    }
    // The conflict needs the allowed vivdep: a daemon without the deny list.
    let daemon = fx.daemon();
    let e = refused(&daemon, &job("print(1)", &["vivneeds", "vivdep==2.0"])).await;
    assert_eq!(e.code, ErrorCode::ResolutionConflict, "{e:?}");
    assert!(
        e.message.contains("vivneeds") && e.message.contains("vivdep"),
        "{e:?}"
    );
    // A profile without [packages] refuses any.
    let e = refused(
        &daemon,
        &Job::new("print(1)").profile("compat").package("vivtiny"),
    )
    .await;
    assert_eq!(e.code, ErrorCode::PackageNotAllowed, "{e:?}");
    // Nothing of the failed builds is left behind.
    let builds: Vec<_> = std::fs::read_dir(fx.cache().join("build"))
        .unwrap()
        .collect();
    assert!(builds.is_empty(), "{builds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_index_is_a_typed_error() {
    let Some(fx) = Fixture::new() else { return };
    // A loopback port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("index_url = \"http://127.0.0.1:{port}/simple\"");
    let profile = default_profile_with(&[("index_url", &url)]);
    let daemon = Daemon::start(fx.opts(1 << 30).profile("closed", &profile));
    let e = refused(
        &daemon,
        &Job::new("print(1)").profile("closed").package("vivtiny"),
    )
    .await;
    assert_eq!(e.code, ErrorCode::IndexUnreachable, "{e:?}");
    assert!(e.message.contains(&format!("127.0.0.1:{port}")), "{e:?}");
}

/// A planted loopback TCP listener that counts connections (never answers).
fn planted_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    (port, hits)
}

/// The only cache entry's environment on the host.
fn the_env(cache: &Path) -> PathBuf {
    let mut envs: Vec<_> = std::fs::read_dir(cache.join("envs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(envs.len(), 1, "{envs:?}");
    envs.pop().unwrap().join("env")
}

/// Finding 1: package code ran at install time (uv's `--compile-bytecode` started the
/// environment's interpreter, whose `site` runs every `.pth`). Now nothing of a package
/// runs at install: the marker its `.pth` writes into the environment is absent from
/// the cached entry, and a listener it would connect to saw nothing. The same `.pth`
/// does run in the job (its /tmp marker is there), so the probe is live.
#[tokio::test(flavor = "multi_thread")]
async fn a_pth_file_runs_no_code_at_install() {
    let (port, hits) = planted_listener();
    let Some(fx) = Fixture::with_pth_port(port) else {
        return;
    };
    let daemon = fx.daemon();
    let code = "import os, sys, vivpth\nprint(vivpth.RAN, os.path.exists('/tmp/vivpth-ran'), os.path.exists(os.path.join(sys.prefix, 'vivpth-ran-at-install')))\n";
    let c = ok(&daemon, &job(code, &["vivpth"])).await;
    assert_eq!(
        String::from_utf8_lossy(&c.stdout),
        "True True False\n",
        "the .pth runs in the job (and cannot write the environment there)"
    );
    let env = the_env(&fx.cache());
    let site = env.join("lib/python3.11/site-packages");
    assert!(site.join("vivpth.pth").is_file(), "the .pth was installed");
    assert!(
        !env.join("vivpth-ran-at-install").exists(),
        "the .pth ran during the install"
    );
    // Bytecode was compiled all the same (by `python -I -S -m compileall`).
    let pycache: Vec<_> = std::fs::read_dir(site.join("vivpth/__pycache__"))
        .expect("vivpth's bytecode")
        .collect();
    assert_eq!(pycache.len(), 1, "{pycache:?}");
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "something connected to the planted listener"
    );
}

/// Finding 3: the cache was keyed by what the install reported, so an install whose
/// code rewrote its environment to look like another package set was stored under that
/// set's key and served to whoever asked for it next. Now the key is the request: uid
/// 65534 installs `vivevil` (a wheel that ships a module named `vivtiny` and a `.pth`
/// that, run at install time, renames its metadata to `vivtiny 1.0`); root then asks
/// for `vivtiny` and gets the genuine one, from its own build.
#[tokio::test(flavor = "multi_thread")]
async fn another_uids_package_cannot_pose_as_the_one_asked_for() {
    let Some(fx) = Fixture::new() else { return };
    const NOBODY: u32 = 65534;
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("offline", &fx.offline_profile(&[]))
            .socket_mode("0666")
            .allow_uid(NOBODY),
    );
    use std::os::unix::process::CommandExt;
    let mut viv = daemon.viv_command();
    viv.uid(NOBODY)
        .gid(NOBODY)
        .args(["run", "--profile", "offline", "--with", "vivevil", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = viv.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"import vivtiny\nprint(vivtiny.answer())\n")
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "666\n",
        "the attacker's job: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    let victim = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&victim.stdout), "42 /env\n");
    let p = victim.packages.unwrap();
    assert!(
        !p.from_cache,
        "the victim was served another request's entry: {p:?}"
    );
    assert_eq!(p.resolved, ["vivtiny==1.0"]);
    assert_eq!(installs(&daemon), 2, "{}", daemon.log());
    for e in std::fs::read_dir(fx.cache().join("envs")).unwrap() {
        let env = e.unwrap().path().join("env");
        assert!(!env.join("vivevil-ran-at-install").exists());
    }
}

/// Findings 5 and 7: a build is bounded while it happens (a capped tmpfs in the
/// sandbox), the failure names the limit and its value, and nothing reaches the host.
#[tokio::test(flavor = "multi_thread")]
async fn builds_past_the_byte_or_inode_cap_are_stopped_and_leave_nothing() {
    let Some(fx) = Fixture::new() else { return };
    let profile = fx.offline_profile(&[
        ("max_env_bytes", "max_env_bytes = 2_097_152"),
        ("max_env_inodes", "max_env_inodes = 1_000"),
    ]);
    let daemon = Daemon::start(fx.opts(1 << 30).profile("offline", &profile));
    let e = refused(&daemon, &job("print(1)", &["vivbig"])).await;
    assert_eq!(e.code, ErrorCode::EnvironmentTooLarge, "{e:?}");
    assert!(
        e.message.contains("max_env_bytes (2097152 bytes)") && e.message.contains("vivbig"),
        "{e:?}"
    );
    let e = refused(&daemon, &job("print(1)", &["vivmany"])).await;
    assert_eq!(e.code, ErrorCode::EnvironmentTooLarge, "{e:?}");
    assert!(
        e.message.contains("max_env_inodes (1000)") && e.message.contains("vivmany"),
        "{e:?}"
    );
    assert_eq!(entries(&fx.cache()), 0);
    let builds: Vec<_> = std::fs::read_dir(fx.cache().join("build"))
        .unwrap()
        .collect();
    assert!(builds.is_empty(), "{builds:?}");
    // The same profile still installs what fits.
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
    let p = c.packages.unwrap();
    assert!(p.env_bytes > 0 && p.env_bytes <= 2 << 20, "{p:?}");
}

/// Finding 6: entries were shared across profiles, and a hit skipped the size check.
/// Now a profile with another package policy (here a smaller max_env_bytes, then a deny
/// list) gets an entry of its own; a second name for the same policy shares it.
#[tokio::test(flavor = "multi_thread")]
async fn entries_are_not_served_across_package_policies() {
    let Some(fx) = Fixture::new() else { return };
    let strict = fx.offline_profile(&[("max_env_bytes", "max_env_bytes = 8_388_608")]);
    let denying = fx.offline_profile(&[(
        "max_env_bytes",
        "max_env_bytes = 8_388_608\ndeny = [\"vivbig\"]",
    )]);
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("offline", &fx.offline_profile(&[]))
            .profile("same", &fx.offline_profile(&[]))
            .profile("strict", &strict)
            .profile("denying", &denying),
    );
    let run = |profile: &'static str| {
        let daemon = &daemon;
        async move {
            let c = ok(daemon, &Job::new(TINY).profile(profile).package("vivtiny")).await;
            assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
            c.packages.unwrap().from_cache
        }
    };
    assert!(!run("offline").await);
    assert!(run("same").await, "the same policy shares the entry");
    assert!(!run("strict").await, "a stricter limit builds its own");
    assert!(!run("denying").await, "another deny list builds its own");
    assert!(run("strict").await);
    assert_eq!(entries(&fx.cache()), 3);
}

fn entries(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("envs")).unwrap().count()
}

#[tokio::test(flavor = "multi_thread")]
async fn least_recently_used_environments_are_evicted_past_the_cap() {
    let Some(fx) = Fixture::new() else { return };
    // Measure one of these small environments (their apparent sizes differ by a few
    // hundred bytes), then cap the cache at room for two and a half.
    let size = {
        let daemon = Daemon::start(
            fx.opts(1 << 30)
                .profile("offline", &fx.offline_profile(&[])),
        );
        let c = ok(&daemon, &job("import vivtiny", &["vivtiny"])).await;
        c.packages.unwrap().env_bytes
    };
    std::fs::remove_dir_all(fx.cache()).unwrap();
    let daemon = Daemon::start(
        fx.opts(size * 5 / 2)
            .profile("offline", &fx.offline_profile(&[])),
    );
    ok(&daemon, &job("import vivtiny", &["vivtiny"])).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    ok(&daemon, &job("import vivdep", &["vivdep"])).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Use vivtiny again: vivdep is now the least recently used.
    let again = ok(&daemon, &job("import vivtiny", &["vivtiny"])).await;
    assert!(again.packages.unwrap().from_cache);
    tokio::time::sleep(Duration::from_millis(20)).await;
    ok(&daemon, &job("import vivneeds", &["vivneeds"])).await;
    assert!(daemon.log().contains("evicted"), "{}", daemon.log());
    assert_eq!(entries(&fx.cache()), 2);
    let tiny = ok(&daemon, &job("import vivtiny", &["vivtiny"])).await;
    assert!(
        tiny.packages.unwrap().from_cache,
        "the recently used one stays"
    );
    let dep = ok(&daemon, &job("import vivdep", &["vivdep"])).await;
    assert!(
        !dep.packages.unwrap().from_cache,
        "the evicted one is rebuilt"
    );
}

async fn restart(daemon: &mut Daemon) {
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        wait_until(Duration::from_secs(10), || daemon.exited().is_some()),
        "the daemon did not stop"
    );
    daemon.restart().expect("restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cache_survives_a_restart_and_a_corrupt_entry_is_rebuilt() {
    let Some(fx) = Fixture::new() else { return };
    let mut daemon = fx.daemon();
    ok(&daemon, &job(TINY, &["vivtiny"])).await;
    restart(&mut daemon).await;
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert!(c.packages.unwrap().from_cache, "not reused after a restart");
    // Tamper with the installed module on the host: the checksum, checked on the
    // entry's first use after a start, no longer matches.
    let entry = std::fs::read_dir(fx.cache().join("envs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let init = entry.join("env/lib/python3.11/site-packages/vivtiny/__init__.py");
    std::fs::write(&init, "def answer():\n    return 0\n").unwrap();
    // And leave a half-built environment behind, as a crash mid-install would.
    let half = fx.cache().join("build/crashed");
    std::fs::create_dir_all(half.join("env")).unwrap();
    restart(&mut daemon).await;
    assert!(
        !half.exists(),
        "a half-built environment survived the start"
    );
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
    assert!(
        !c.packages.unwrap().from_cache,
        "the corrupt entry was used"
    );
    assert!(
        daemon.log().contains("checksum mismatch"),
        "{}",
        daemon.log()
    );
    // An entry without its completion marker is rebuilt as well.
    let entry = std::fs::read_dir(fx.cache().join("envs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(entry.join("COMPLETE")).unwrap();
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert!(!c.packages.unwrap().from_cache);
}

/// Protocol 4: the daemon says which profiles' jobs can have packages, and from where.
#[tokio::test(flavor = "multi_thread")]
async fn profile_features_say_where_packages_work() {
    use vivarium_e2e::proto::{Event, Request};
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    let mut raw = vivarium_e2e::RawConn::connect(daemon.socket()).await;
    raw.hello().await;
    raw.send(&Request::ListProfileFeatures).await;
    let Event::ProfileFeatures(list) = raw.recv().await else {
        panic!("expected ProfileFeatures")
    };
    let offline = list.iter().find(|f| f.name == "offline").expect("offline");
    assert_eq!(offline.packages_unavailable, None, "{list:?}");
    assert!(!offline.packages_from_index, "a wheelhouse only: {list:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_1_client_is_served_as_before() {
    use vivarium_e2e::proto::{Code, Event, Hello, JobSpec, Request, SubmitWith};
    let Some(fx) = Fixture::new() else { return };
    let daemon = fx.daemon();
    let mut raw = vivarium_e2e::RawConn::connect(daemon.socket()).await;
    raw.send(&Request::Hello(Hello {
        min_version: 1,
        max_version: 1,
        client: "old".into(),
    }))
    .await;
    assert!(matches!(raw.recv().await, Event::HelloAck(a) if a.version == 1));
    let spec = JobSpec {
        profile: "offline".into(),
        code: Code::Inline(
            b"# /// script\n# dependencies = [\"vivtiny\"]\n# ///\nprint('plain')\n".to_vec(),
        ),
        args: vec![],
        stdin: false,
        limits: Default::default(),
    };
    // Version 1 knows no SubmitWith.
    raw.send(&Request::SubmitWith(Box::new(SubmitWith {
        spec: spec.clone(),
        packages: vec!["vivtiny".into()],
    })))
    .await;
    assert!(matches!(raw.recv().await, Event::Error(e) if e.code == ErrorCode::UnexpectedMessage));
    // And a PEP 723 block is not read for it: the job runs as it always did.
    raw.send(&Request::Submit(spec)).await;
    let mut out = Vec::new();
    loop {
        match raw.recv().await {
            Event::Stdout(b) => out.extend(b),
            Event::Finished(o) => {
                assert_eq!(o.reason, vivarium_e2e::proto::Reason::Ok, "{o:?}");
                break;
            }
            Event::Packages(p) => panic!("a version-1 client got {p:?}"),
            Event::Sandbox(s) => panic!("a version-1 client got {s:?}"),
            _ => {}
        }
    }
    assert_eq!(out, b"plain\n");
    assert_eq!(installs(&daemon), 0);
}

/// Findings 7 and 8, against the real index: data-science stacks whose environments
/// are 270-350 MB, tens of thousands of files, and shared libraries of 69-177 MB
/// install on the shipped default profile (its own limits for the install, not the
/// job's) and import in a job.
#[tokio::test(flavor = "multi_thread")]
async fn data_science_stacks_from_pypi_install_and_import() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = Daemon::start(fx.opts(16 << 30));
    let stacks: &[(&[&str], &str)] = &[
        (
            &["pandas", "matplotlib"],
            // The sandbox's matplotlib defaults (issue 20): Agg (as Vivarium's backend,
            // which captures figures) without asking for it, a default figure of 960 x
            // 720 px, its config and cache on /tmp.
            "import pandas, matplotlib\nimport matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 2])\nfig.savefig('p.png')\nfrom PIL import Image\nprint(int(pandas.DataFrame({'a': [1, 2, 3]})['a'].sum()), matplotlib.get_backend().lower(), Image.open('p.png').size, matplotlib.get_configdir())\n",
        ),
        (
            &["scikit-learn"],
            "from sklearn.linear_model import LinearRegression\nprint(round(float(LinearRegression().fit([[0], [1], [2]], [0, 2, 4]).coef_[0]), 3))\n",
        ),
        (
            &["pyarrow"],
            "import pyarrow as pa\nprint(pa.array([1, 2, 3]).to_pylist())\n",
        ),
        (
            &["polars"],
            "import polars as pl\nprint(pl.DataFrame({'a': [1, 2, 3]})['a'].sum())\n",
        ),
        (
            &["duckdb"],
            "import duckdb\nprint(duckdb.sql('select 6 * 7').fetchall()[0][0])\n",
        ),
    ];
    let expected = [
        "6 module://vivarium_figures (960, 720) /tmp/matplotlib\n",
        "2.0\n",
        "[1, 2, 3]\n",
        "6\n",
        "42\n",
    ];
    for ((pkgs, code), want) in stacks.iter().zip(expected) {
        let mut j = Job::new(*code);
        for p in *pkgs {
            j = j.package(*p);
        }
        let c = ok(&daemon, &j).await;
        assert_eq!(String::from_utf8_lossy(&c.stdout), want, "{pkgs:?}");
        // (matplotlib warns when it finds no writable config directory.)
        let stderr = String::from_utf8_lossy(&c.stderr);
        assert!(!stderr.contains("Matplotlib"), "{pkgs:?}: {stderr}");
        let p = c.packages.unwrap();
        assert!(!p.from_cache, "{p:?}");
        for name in *pkgs {
            assert!(
                p.resolved
                    .iter()
                    .any(|r| r.starts_with(&format!("{name}=="))),
                "{pkgs:?}: {p:?}"
            );
        }
    }
    csv_in_chart_out(&daemon).await;
}

/// Issue 20 end to end, on the environment the test above installed: a CSV in, pandas
/// reads it, matplotlib charts come out as PNGs within the image budget; a figure shown
/// (`plt.show()`) and one left open are each captured once, as a job's and as a session
/// cell's artifacts (the second cell's too), and a subprocess's matplotlib still works.
async fn csv_in_chart_out(daemon: &Daemon) {
    let csv = "month,sales\njan,3\nfeb,5\nmar,4\n";
    let code = "import pandas as pd, matplotlib.pyplot as plt\n\
                df = pd.read_csv('data/sales.csv')\n\
                df.plot(x='month', y='sales')\n\
                plt.show()\n\
                plt.figure(); plt.bar(df['month'], df['sales'])\n\
                print(int(df['sales'].sum()), len(plt.get_fignums()))\n\
                import subprocess, sys\n\
                subprocess.run([sys.executable, '-c', 'import matplotlib.pyplot as p; p.plot([1]); p.savefig(\"/tmp/s.png\"); print(p.get_backend())'], check=True)\n";
    let job = Job::new(code)
        .package("pandas")
        .package("matplotlib")
        .file("data/sales.csv", csv);
    let done = ok(daemon, &job).await;
    // One figure open after the show (the second); the subprocess keeps plain Agg.
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        "12 1\nagg\n",
        "{done:#?}"
    );
    let names: Vec<&str> = done.artifacts.iter().map(|a| a.path()).collect();
    assert_eq!(
        names,
        vec!["out/figure-1.png", "out/figure-2.png"],
        "{done:#?}"
    );
    for a in &done.artifacts {
        assert_eq!(a.media_type(), "image/png");
        let (w, h) = png_size(&a.data);
        assert_eq!((w, h), (960, 720), "{}", a.path());
        assert!(w.max(h) <= 1568 && u64::from(w) * u64::from(h) <= 1_150_000);
    }
    // A session on the same environment: each cell's figures, once.
    let mut client = daemon.client().await;
    let spec = vivarium_client::SessionSpec::new()
        .package("pandas")
        .package("matplotlib");
    let h = client
        .open_session(&spec)
        .await
        .expect("session")
        .info
        .handle;
    let cell = |code: &str| vivarium_client::Cell::new(h.clone(), code);
    let first = client
        .exec_cell_collect(&cell("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\nplt.figure(); plt.plot([3])"), None)
        .await
        .unwrap();
    let paths = |c: &vivarium_client::CollectedCell| -> Vec<String> {
        c.artifacts.iter().map(|a| a.path().to_owned()).collect()
    };
    assert_eq!(
        paths(&first),
        vec!["out/figure-1.png", "out/figure-2.png"],
        "{first:#?}"
    );
    let second = client
        .exec_cell_collect(
            &cell("print(len(plt.get_fignums()))\nplt.plot([4, 5])"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&second.stdout), "0\n");
    assert_eq!(paths(&second), vec!["out/figure-3.png"], "{second:#?}");
    let third = client
        .exec_cell_collect(&cell("x = 1"), None)
        .await
        .unwrap();
    assert!(third.artifacts.is_empty(), "{third:#?}");
    client.close_session(&h).await.unwrap();
}

/// A PNG's width and height, from its IHDR.
fn png_size(data: &[u8]) -> (u32, u32) {
    assert!(data.starts_with(b"\x89PNG\r\n\x1a\n") && &data[12..16] == b"IHDR");
    let be = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The one test against the real index: numpy from PyPI, then the cached environment.
#[tokio::test(flavor = "multi_thread")]
async fn numpy_from_pypi_installs_computes_and_is_reused() {
    let Some(fx) = Fixture::new() else { return };
    let daemon = Daemon::start(fx.opts(4 << 30));
    let code = "import numpy as np\nprint(int(np.arange(1, 101).sum()), round(float(np.linalg.det(np.eye(3) * 2)), 6))\n";
    let first = ok(&daemon, &Job::new(code).package("numpy")).await;
    assert_eq!(String::from_utf8_lossy(&first.stdout), "5050 8.0\n");
    let p = first.packages.unwrap();
    assert!(!p.from_cache);
    assert!(p.resolved.iter().any(|r| r.starts_with("numpy==")), "{p:?}");
    let second = ok(&daemon, &Job::new(code).package("numpy")).await;
    assert_eq!(String::from_utf8_lossy(&second.stdout), "5050 8.0\n");
    assert!(second.packages.unwrap().from_cache);
}

/// A tiny PEP 503 index on a loopback port for one project, `vivtiny`, whose wheel link
/// points at `wheel_port` (its own port when `None`). Counts the connections it and the
/// optional second listener receive. `hang`: accept and never answer.
struct Index {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Index {
    fn start(wheelhouse: PathBuf, wheel_port: Option<u16>, hang: bool) -> Index {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        let files = wheel_port.unwrap_or(port);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                if hang {
                    held.push(s);
                    continue;
                }
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&req);
                let mut parts = text.split_whitespace();
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let wheel = "vivtiny-1.0-py3-none-any.whl";
                let (status, ctype, body) = if path.trim_end_matches('/') == "/simple/vivtiny" {
                    let html = format!(
                        "<!DOCTYPE html><html><body><a href=\"http://127.0.0.1:{files}/files/{wheel}\">{wheel}</a></body></html>"
                    );
                    ("200 OK", "text/html", html.into_bytes())
                } else if path == format!("/files/{wheel}") {
                    let bytes = std::fs::read(wheelhouse.join(wheel)).unwrap();
                    ("200 OK", "application/octet-stream", bytes)
                } else {
                    ("404 Not Found", "text/plain", b"not found".to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                if method != "HEAD" {
                    let _ = s.write_all(&body);
                }
            }
        });
        Index { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn index_profile(port: u16, extra: &[(&str, &str)]) -> String {
    let url = format!("index_url = \"http://127.0.0.1:{port}/simple\"");
    let mut repl = vec![
        ("index_url", url.as_str()),
        ("allow_hosts", "allow_hosts = []"),
    ];
    repl.extend_from_slice(extra);
    default_profile_with(&repl)
}

/// Finding 2: the install shared the host's network namespace. Now its only way out is
/// the daemon's egress proxy, which allows the index's host and port alone: the whole
/// index on one port installs; a wheel linked on another port, or on another loopback
/// address at the index's port, is refused by the proxy (403) and its listener sees no
/// connection.
#[tokio::test(flavor = "multi_thread")]
async fn the_install_reaches_the_index_through_the_proxy_and_nothing_else() {
    let Some(fx) = Fixture::new() else { return };
    // The whole index on one port: the install works over the network.
    let index = Index::start(fx.wheelhouse(), None, false);
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("idx", &index_profile(index.port, &[])),
    );
    let c = ok(&daemon, &Job::new(TINY).profile("idx").package("vivtiny")).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
    assert!(
        index.hits() >= 2,
        "the index and the wheel were fetched over TCP"
    );
    drop(daemon);
    // The index page on its port, the wheel on another: the proxy refuses it.
    let files = Index::start(fx.wheelhouse(), None, false);
    let index = Index::start(fx.wheelhouse(), Some(files.port), false);
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("idx", &index_profile(index.port, &[])),
    );
    let e = refused(&daemon, &Job::new(TINY).profile("idx").package("vivtiny")).await;
    assert!(index.hits() >= 1, "the index port was reachable");
    assert_eq!(
        files.hits(),
        0,
        "a connection reached the other port: {e:?}"
    );
    assert!(
        e.message.contains("403") || e.message.contains("not on the allow-list"),
        "expected the proxy's refusal: {e:?}\n{}",
        daemon.log()
    );
    assert!(daemon.log().contains("egress"), "{}", daemon.log());
    drop(daemon);
    // The wheel on 127.0.0.2 at the index's own port: another host, refused.
    let page = IndexPage::start(|port| {
        format!("http://127.0.0.2:{port}/files/vivtiny-1.0-py3-none-any.whl")
    });
    let other = std::net::TcpListener::bind(("127.0.0.2", page.port)).unwrap();
    other.set_nonblocking(true).unwrap();
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("idx", &index_profile(page.port, &[])),
    );
    let e = refused(&daemon, &Job::new(TINY).profile("idx").package("vivtiny")).await;
    assert!(
        matches!(other.accept(), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection reached 127.0.0.2"
    );
    assert!(
        e.message.contains("403") || e.message.contains("not on the allow-list"),
        "{e:?}"
    );
}

/// An index page for `vivtiny` whose one link is `href(its own port)`.
struct IndexPage {
    port: u16,
}

impl IndexPage {
    fn start(href: impl FnOnce(u16) -> String) -> IndexPage {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let href = href(port);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!(
                    "<!DOCTYPE html><html><body><a href=\"{href}\">vivtiny-1.0-py3-none-any.whl</a></body></html>"
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(body.as_bytes());
            }
        });
        IndexPage { port }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_install_past_its_timeout_is_killed_with_a_typed_error() {
    let Some(fx) = Fixture::new() else { return };
    let index = Index::start(fx.wheelhouse(), None, true);
    let profile = index_profile(
        index.port,
        &[("install_timeout_ms", "install_timeout_ms = 2_000")],
    );
    let daemon = Daemon::start(fx.opts(1 << 30).profile("idx", &profile));
    // InstallTimeout comes only from the spawner's wall-clock kill of the install sandbox
    // (uv's own HTTP timeout is 30 s and would surface as IndexUnreachable).
    let e = refused(
        &daemon,
        &Job::new("print(1)").profile("idx").package("vivtiny"),
    )
    .await;
    assert_eq!(e.code, ErrorCode::InstallTimeout, "{e:?}");
    assert!(e.message.contains("vivtiny"), "{e:?}");
    assert!(index.hits() >= 1);
    let builds: Vec<_> = std::fs::read_dir(fx.cache().join("build"))
        .unwrap()
        .collect();
    assert!(builds.is_empty(), "{builds:?}");
}

/// The service unit's `CapabilityBoundingSet=` is enough for packages: the spawner gives
/// the build directory to the install's uid, the server re-owns and seals the result.
#[tokio::test(flavor = "multi_thread")]
async fn packages_work_under_the_units_capability_bounding_set() {
    let Some(fx) = Fixture::new() else { return };
    let set = vivarium_e2e::unit_bounding_set();
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("offline", &fx.offline_profile(&[]))
            .exec_prefix(&["setpriv", "--bounding-set", &set]),
    );
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
    let c = ok(&daemon, &job(TINY, &["vivtiny"])).await;
    assert!(c.packages.unwrap().from_cache);
    drop(daemon);
    // From an index: the install's own network namespace and its proxy's listener.
    let index = Index::start(fx.wheelhouse(), None, false);
    let daemon = Daemon::start(
        fx.opts(1 << 30)
            .profile("idx", &index_profile(index.port, &[]))
            .exec_prefix(&["setpriv", "--bounding-set", &set]),
    );
    let c = ok(&daemon, &Job::new(TINY).profile("idx").package("vivtiny")).await;
    assert_eq!(String::from_utf8_lossy(&c.stdout), "42 /env\n");
}

/// A warm profile with `warm.packages` keeps sandboxes whose environment is installed
/// and whose `warm.preload` is imported: a job asking for exactly those packages takes
/// one (its module is loaded before the job's first line), with a packages report; a job
/// asking for none runs cold on the same profile.
#[tokio::test(flavor = "multi_thread")]
async fn a_warm_profile_serves_its_packages_preloaded() {
    let Some(fx) = Fixture::new() else { return };
    let text = format!(
        "{}\n[warm]\npool = 2\npackages = [\"VivTiny\"]\npreload = [\"vivtiny\"]\n",
        fx.offline_profile(&[])
    );
    let daemon = Daemon::start(fx.opts(1 << 30).warm_pools().profile("offline", &text));
    let probe =
        "import sys\nprint('/work/main.py' not in sys.orig_argv, 'vivtiny' in sys.modules)\n\
                 import vivtiny\nprint(vivtiny.answer(), sys.prefix)\n";
    // The first job creates the pool (cold, and installs).
    let first = ok(&daemon, &job(probe, &["vivtiny"])).await;
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        "False False\n42 /env\n"
    );
    let pythons = || {
        daemon
            .job_processes()
            .iter()
            .filter(|p| p.comm.starts_with("python"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(30), || pythons() >= 2),
        "{}",
        daemon.log()
    );
    let warm = ok(&daemon, &job(probe, &["vivtiny"])).await;
    assert_eq!(
        String::from_utf8_lossy(&warm.stdout),
        "True True\n42 /env\n"
    );
    let p = warm.packages.expect("a packages report");
    assert_eq!(p.resolved, ["vivtiny==1.0"]);
    assert!(p.from_cache && p.install_ms == 0, "{p:?}");
    assert_eq!(installs(&daemon), 1, "{}", daemon.log());
    // No packages asked: not this pool's set, so a cold job without the environment.
    let plain = ok(
        &daemon,
        &Job::new("import sys\nprint('/work/main.py' not in sys.orig_argv, sys.prefix)\n")
            .profile("offline"),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "False /usr\n");
    assert!(plain.packages.is_none());
}

/// The same with a zygote: its interpreter runs on the cached environment with the
/// package imported, and every job asking for exactly that set is forked from it (its
/// `-c` program is the zygote's), with the environment at /env and a packages report; the
/// environment was installed once.
#[tokio::test(flavor = "multi_thread")]
async fn a_zygote_serves_its_packages_preloaded() {
    let Some(fx) = Fixture::new() else { return };
    let text = format!(
        "{}\n[warm]\nzygote = true\npool = 0\npackages = [\"VivTiny\"]\npreload = [\"vivtiny\"]\n",
        fx.offline_profile(&[])
    );
    let daemon = Daemon::start(fx.opts(1 << 30).profile("offline", &text));
    let probe = "import sys\n\
                 print(any(a.startswith('_vivarium_zygote') for a in sys.orig_argv), 'vivtiny' in sys.modules)\n\
                 import vivtiny\nprint(vivtiny.answer(), sys.prefix)\n";
    for _ in 0..3 {
        let forked = ok(&daemon, &job(probe, &["vivtiny"])).await;
        assert_eq!(
            String::from_utf8_lossy(&forked.stdout),
            "True True\n42 /env\n",
            "{}",
            daemon.log()
        );
        let p = forked.packages.expect("a packages report");
        assert_eq!(p.resolved, ["vivtiny==1.0"]);
    }
    assert_eq!(installs(&daemon), 1, "{}", daemon.log());
}
