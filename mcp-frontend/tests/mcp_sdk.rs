//! A real MCP client drives `vivarium-mcp` against a real `vivariumd`: the official Python
//! MCP SDK runs `tests/clients/sdk_client.py` (list tools, validate schemas, run code, check
//! structuredContent, progress, cancellation with no job left, rate and concurrency limits,
//! bad arguments, input files (text and base64, bad ones, the daemon's refusal), no
//! daemon, stdin EOF; a session: open with `x = 1`, cells that keep state and return
//! values, input files that persist and are replaced, `vivarium.InputFileError`,
//! exception, timeout and cancel keeping it, ids bound to the server instance, close, the
//! typed idle expiry, a daemon handle handed over).
//!
//! Needs root (the daemon does) and a Python with the `mcp` package: `$VIVARIUM_MCP_PYTHON`,
//! else `<target>/mcp-venv/bin/python` (`.ci/run` creates it from
//! `tests/clients/requirements.txt`). Skips loudly without them, and fails instead when
//! `VIVARIUM_REQUIRE_ROOT=1` (no root) or `VIVARIUM_REQUIRE_MCP_SDK=1` (no SDK).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("mcp-frontend/ has a parent")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(t) if t.is_relative() => workspace_dir().join(t),
        Some(t) => t,
        None => workspace_dir().join("target"),
    }
}

/// Print why the test cannot run; panic instead when `require` names a set variable.
fn skip_or_fail(require: &str, why: &str) {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{why}, and {require}=1 says it must run");
    }
    eprintln!("SKIPPED: {why} (set {require}=1 to make this a failure)");
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("VIVARIUM_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("mcp-venv/bin/python"));
    let has_sdk = Command::new(&python)
        .args(["-c", "import mcp, jsonschema, anyio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    has_sdk.then_some(python)
}

/// The pinned uv (`scripts/install-uv.sh`): `$VIVARIUM_UV`, else /opt/vivarium/uv.
fn uv() -> Option<PathBuf> {
    let path = std::env::var_os("VIVARIUM_UV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/vivarium/uv/bin/uv"));
    path.is_file().then_some(path)
}

/// The repository's profiles in `dir/profiles`, plus, when uv is there, a `packages`
/// profile (the default one with a hand-built wheelhouse and no index) and the config
/// lines that enable packages. Returns those lines.
fn packages_setup(dir: &Path) -> Option<String> {
    let profiles = dir.join("profiles");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(workspace_dir().join("profiles"))
        .arg(&profiles)
        .status()
        .expect("cp profiles");
    assert!(copy.success(), "cannot copy the profiles");
    // Sessions with a 1 s idle TTL, for the expiry check (and no session kept ready).
    let default = std::fs::read_to_string(profiles.join("default.toml")).expect("default.toml");
    let short = default
        .replace("idle_ttl_secs = 600", "idle_ttl_secs = 1")
        .replace("pool = 1 ", "pool = 0 ")
        .replace("pool_max = 4", "pool_max = 0");
    assert!(
        short.contains("idle_ttl_secs = 1 "),
        "default.toml has no `idle_ttl_secs = 600` to replace"
    );
    std::fs::write(profiles.join(format!("{SESSION_TTL_PROFILE}.toml")), short)
        .expect("write profile");
    let Some(uv) = uv() else {
        skip_or_fail(
            "VIVARIUM_REQUIRE_ROOT",
            "no uv (scripts/install-uv.sh): the packages checks do not run",
        );
        return None;
    };
    let wheelhouse = dir.join("wheelhouse");
    let made = Command::new("/usr/bin/python3")
        .arg(workspace_dir().join("tests/packages/make_wheelhouse.py"))
        .arg(&wheelhouse)
        .status()
        .expect("make_wheelhouse.py");
    assert!(made.success(), "make_wheelhouse.py failed");
    let default = std::fs::read_to_string(profiles.join("default.toml")).expect("default.toml");
    // Offline: the wheelhouse in place of the index, and no hosts to reach.
    let offline = default
        .replace(
            "index_url = \"https://pypi.org/simple\"",
            &format!("find_links = {:?}", wheelhouse.display().to_string()),
        )
        .replace(
            "allow_hosts = [\"files.pythonhosted.org\"]",
            "allow_hosts = []",
        );
    assert_ne!(
        offline, default,
        "default.toml has no index_url line to replace"
    );
    std::fs::write(profiles.join("packages.toml"), offline).expect("write profile");
    Some(format!(
        "uv = {:?}\npackage_cache_dir = {:?}\n",
        uv.display().to_string(),
        dir.join("cache").display().to_string()
    ))
}

/// The profile whose sessions end after 1 s without a cell.
const SESSION_TTL_PROFILE: &str = "sessionttl";

fn bin_dir() -> PathBuf {
    std::env::var_os("VIVARIUM_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("debug"))
}

/// A `vivariumd` on a temporary config; SIGTERM (then SIGKILL) on drop. It keeps no
/// sandbox ready (`max_ready_sandboxes = 0`): the client checks that a cancelled call's
/// job leaves no process, and so counts every process of the daemon's as a job's. (The
/// warm path's own tests, tests/tests/fast_default.rs, cover the shipped default's pool.)
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        let vivariumd = bin_dir().join("vivariumd");
        assert!(
            vivariumd.is_file(),
            "{} does not exist: run `cargo build --workspace` first",
            vivariumd.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("vivarium-mcp-test-")
            .tempdir()
            .expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod temp dir");
        let pid = std::process::id();
        let socket = dir.path().join("vivariumd.sock");
        // Host id range away from the daemon default and from the e2e suite's ranges.
        let id_base = 0x9000_0000u32 + ((pid & 0x3fff) << 14);
        let config = format!(
            "socket = {socket:?}\n\
             socket_mode = \"0660\"\n\
             max_concurrent_jobs = 8\n\
             max_queued_jobs = 16\n\
             profiles_dir = {profiles:?}\n\
             cgroup_subtree = \"vivarium-mcp-test-{pid}\"\n\
             state_dir = {state:?}\n\
             id_base = {id_base}\n\
             shutdown_grace_ms = 500\n\
             max_ready_sandboxes = 0\n",
            socket = socket.display().to_string(),
            profiles = dir.path().join("profiles").display().to_string(),
            state = dir.path().join("state").display().to_string(),
        );
        let mut config = config;
        if let Some(extra) = packages_setup(dir.path()) {
            config.push_str(&extra);
        }
        let config_path = dir.path().join("vivariumd.toml");
        std::fs::write(&config_path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("vivariumd.log")).expect("log file");
        let child = Command::new(&vivariumd)
            .arg("--config")
            .arg(&config_path)
            .env_remove("VIVARIUM_SOCKET")
            .env("VIVARIUM_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn vivariumd");
        let mut daemon = Daemon { child, dir, socket };
        daemon.wait_ready();
        daemon
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vivariumd.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("vivariumd exited during startup ({status})\n{}", self.log());
            }
            if self.socket.exists()
                && rt
                    .block_on(vivarium_client::Client::connect(&self.socket))
                    .is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < end,
                "vivariumd did not accept within 10 s\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn python_sdk_drives_the_server() {
    if !is_root() {
        skip_or_fail(
            "VIVARIUM_REQUIRE_ROOT",
            "python_sdk_drives_the_server needs root to run vivariumd",
        );
        return;
    }
    let Some(python) = sdk_python() else {
        skip_or_fail(
            "VIVARIUM_REQUIRE_MCP_SDK",
            "no Python with the `mcp` SDK (set VIVARIUM_MCP_PYTHON, or create <target>/mcp-venv \
             from mcp-frontend/tests/clients/requirements.txt)",
        );
        return;
    };
    let daemon = Daemon::start();
    let viv = Some(bin_dir().join("viv")).filter(|v| v.is_file());
    if viv.is_none() {
        skip_or_fail(
            "VIVARIUM_REQUIRE_ROOT",
            "no `viv` next to vivariumd: the session handover check does not run",
        );
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/sdk_client.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg("--server")
        .arg(env!("CARGO_BIN_EXE_vivarium-mcp"))
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("--daemon-pid")
        .arg(daemon.child.id().to_string())
        .arg("--profiles-dir")
        .arg(daemon.dir.path().join("profiles"))
        .args(["--session-ttl-profile", SESSION_TTL_PROFILE])
        // The handover check opens a session with `viv session new`, as a user would.
        .args(
            viv.iter()
                .flat_map(|v| [std::ffi::OsStr::new("--viv"), v.as_os_str()]),
        )
        .args(
            daemon
                .dir
                .path()
                .join("profiles/packages.toml")
                .exists()
                .then_some(["--packages-profile", "packages"])
                .into_iter()
                .flatten(),
        )
        .env_remove("VIVARIUM_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the SDK client");
    // The whole client run is bounded: a hang is a failure, not a stuck CI.
    let end = Instant::now() + Duration::from_secs(150);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("client output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the SDK client failed ({})\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- daemon log ---\n{}",
        out.status,
        daemon.log()
    );
}
