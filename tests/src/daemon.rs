//! The daemon under test: configuration, start, clients, `viv`, leak checks, shutdown.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use vivarium_client::{Client, ClientError, Collected, Job};

use crate::leaks::{self, descendants, Proc, Snapshot};
use crate::{bin, run_with_stdin, wait_until, workspace_dir, JOB_TIMEOUT};

/// How a test's daemon is configured. `Default` is a root-only socket, 8 slots, 64 queue
/// places and the repository's profiles.
#[derive(Debug, Clone)]
pub struct DaemonOpts {
    pub socket_mode: String,
    pub max_concurrent_jobs: usize,
    pub max_queued_jobs: usize,
    pub allow_uids: Vec<u32>,
    pub allow_groups: Vec<String>,
    /// Extra profiles `(name, toml)`: the repository's profiles directory is copied and
    /// these are added to the copy.
    pub extra_profiles: Vec<(String, String)>,
    /// Extra environment for the daemon process (e.g. a canary).
    pub env: Vec<(String, String)>,
    /// Put the state directory inside a directory of this mode (e.g. 0o700).
    pub state_parent_mode: Option<u32>,
    /// Extra raw lines for the daemon's config file (e.g. `shutdown_grace_ms = 500`).
    pub config_lines: Vec<String>,
    /// Start the daemon under `systemd-socket-activate --seqpacket -l <socket>`, which
    /// binds the socket and execs the daemon on the first connection.
    pub socket_activated: bool,
    /// `NOTIFY_SOCKET` for the daemon (a datagram socket the test reads).
    pub notify_socket: Option<PathBuf>,
    /// A command the daemon is started through (e.g. `setpriv --bounding-set ...`); the
    /// daemon's path and arguments follow it.
    pub exec_prefix: Vec<String>,
    /// Run this binary instead of `vivariumd` (the test-only `vivariumd-weakened`),
    /// with these arguments before the daemon's own.
    pub binary: Option<(PathBuf, Vec<String>)>,
    /// Keep warm pools (`max_ready_sandboxes` as shipped). Off, the daemon keeps no
    /// sandbox ready (`max_ready_sandboxes = 0`): every job of a pool profile, the
    /// shipped default's included, starts cold, and the only job processes are the
    /// test's own. The warm-path tests turn it on.
    pub warm_pools: bool,
}

impl Default for DaemonOpts {
    fn default() -> Self {
        DaemonOpts {
            socket_mode: "0660".into(),
            max_concurrent_jobs: 8,
            max_queued_jobs: 64,
            allow_uids: Vec::new(),
            allow_groups: Vec::new(),
            extra_profiles: Vec::new(),
            env: Vec::new(),
            state_parent_mode: None,
            config_lines: Vec::new(),
            socket_activated: false,
            notify_socket: None,
            exec_prefix: Vec::new(),
            binary: None,
            warm_pools: false,
        }
    }
}

impl DaemonOpts {
    /// Keep warm pools as a shipped daemon does (see [`DaemonOpts::warm_pools`]).
    pub fn warm_pools(mut self) -> Self {
        self.warm_pools = true;
        self
    }
    pub fn socket_mode(mut self, mode: &str) -> Self {
        self.socket_mode = mode.into();
        self
    }
    pub fn slots(mut self, concurrent: usize, queued: usize) -> Self {
        self.max_concurrent_jobs = concurrent;
        self.max_queued_jobs = queued;
        self
    }
    pub fn allow_uid(mut self, uid: u32) -> Self {
        self.allow_uids.push(uid);
        self
    }
    pub fn allow_group(mut self, group: &str) -> Self {
        self.allow_groups.push(group.into());
        self
    }
    pub fn profile(mut self, name: &str, toml: &str) -> Self {
        self.extra_profiles.push((name.into(), toml.into()));
        self
    }
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    pub fn state_parent_mode(mut self, mode: u32) -> Self {
        self.state_parent_mode = Some(mode);
        self
    }
    pub fn config_line(mut self, line: &str) -> Self {
        self.config_lines.push(line.into());
        self
    }
    pub fn socket_activated(mut self) -> Self {
        self.socket_activated = true;
        self
    }
    pub fn notify_socket(mut self, path: &Path) -> Self {
        self.notify_socket = Some(path.to_owned());
        self
    }
    /// Start the test-only `vivariumd-weakened` with `args` (`--weaken ...`,
    /// `--expose ...`) and `VIVARIUM_TEST_WEAKENED=1`, instead of `vivariumd`.
    pub fn weakened(mut self, args: &[String]) -> Self {
        self.binary = Some((bin("vivariumd-weakened"), args.to_vec()));
        self.env.push(("VIVARIUM_TEST_WEAKENED".into(), "1".into()));
        self
    }

    pub fn exec_prefix(mut self, command: &[&str]) -> Self {
        self.exec_prefix = command.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// The repository's default policy with some `key = value` lines replaced, for
/// [`DaemonOpts::profile`]: each `(key, line)` swaps the first line starting with `key`.
/// Without the default's `[warm]` section (its fast path, the file's last section): a
/// profile made from this runs its jobs cold unless it adds a `[warm]` of its own.
pub fn default_profile_with(replacements: &[(&str, &str)]) -> String {
    let text = shipped_default_with(replacements);
    let at = text
        .find("\n[warm]")
        .expect("default.toml ends with its [warm] section");
    text[..at + 1].to_owned()
}

/// The shipped default profile, `[warm]` section included, with some lines replaced as
/// for [`default_profile_with`].
pub fn shipped_default_with(replacements: &[(&str, &str)]) -> String {
    let text = std::fs::read_to_string(workspace_dir().join("profiles/default.toml"))
        .expect("profiles/default.toml");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, line) in replacements {
        let at = lines
            .iter()
            .position(|l| l.split('=').next().map(str::trim) == Some(key))
            .unwrap_or_else(|| panic!("default.toml has no `{key} =` line"));
        lines[at] = (*line).to_owned();
    }
    lines.join("\n") + "\n"
}

static DAEMONS: AtomicU32 = AtomicU32::new(0);

/// The spawner's bound on mount templates (`spawner/template.rs`).
const MAX_MOUNT_TEMPLATES: usize = 8;

/// A running `vivariumd`, killed (SIGTERM, then SIGKILL) and cleaned up on drop. Its log
/// is printed when the test is failing.
pub struct Daemon {
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    socket: PathBuf,
    state_dir: PathBuf,
    log: PathBuf,
    cgroup_subtree: String,
    config: PathBuf,
    profiles_dir: PathBuf,
    env: Vec<(String, String)>,
    socket_activated: bool,
    exec_prefix: Vec<String>,
    binary: Option<(PathBuf, Vec<String>)>,
}

impl Daemon {
    /// Start a daemon with `opts` and wait (up to 10 s) until its socket accepts.
    pub fn start(opts: DaemonOpts) -> Daemon {
        Daemon::try_start(opts).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Daemon::start`], but a daemon that exits during startup is `Err(its log)`.
    pub fn try_start(opts: DaemonOpts) -> Result<Daemon, String> {
        let n = DAEMONS.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dir = tempfile::Builder::new()
            .prefix("vivarium-e2e-")
            .tempdir()
            .expect("temp dir");
        // Other uids (the authorization tests) must reach the socket. A state directory
        // behind a 0700 parent is tested on purpose with `state_parent_mode`.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod temp dir");
        let socket = dir.path().join("vivariumd.sock");
        let state_dir = match opts.state_parent_mode {
            None => dir.path().join("state"),
            Some(mode) => {
                let parent = dir.path().join("private");
                std::fs::create_dir(&parent).expect("mkdir state parent");
                std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode))
                    .expect("chmod state parent");
                parent.join("state")
            }
        };
        let log = dir.path().join("vivariumd.log");
        let cgroup_subtree = format!("vivarium-test-{pid}-{n}");
        let profiles_dir = if opts.extra_profiles.is_empty() {
            workspace_dir().join("profiles")
        } else {
            let copy = dir.path().join("profiles");
            copy_dir(&workspace_dir().join("profiles"), &copy);
            for (name, text) in &opts.extra_profiles {
                std::fs::write(copy.join(format!("{name}.toml")), text).expect("write profile");
            }
            copy
        };
        // Distinct host id ranges per daemon, away from the default base.
        let id_base = 0x4000_0000u32 + ((pid & 0x3fff) << 16) + ((n & 7) << 13);
        let list = |items: Vec<String>| items.join(", ");
        let config = format!(
            "socket = {socket:?}\n\
             socket_mode = {mode:?}\n\
             allow_uids = [{uids}]\n\
             allow_groups = [{groups}]\n\
             max_concurrent_jobs = {conc}\n\
             max_queued_jobs = {queued}\n\
             profiles_dir = {profiles:?}\n\
             cgroup_subtree = {cgroup_subtree:?}\n\
             state_dir = {state:?}\n\
             id_base = {id_base}\n",
            socket = socket.display().to_string(),
            mode = opts.socket_mode,
            uids = list(opts.allow_uids.iter().map(u32::to_string).collect()),
            groups = list(opts.allow_groups.iter().map(|g| format!("{g:?}")).collect()),
            conc = opts.max_concurrent_jobs,
            queued = opts.max_queued_jobs,
            profiles = profiles_dir.display().to_string(),
            state = state_dir.display().to_string(),
        );
        let mut config = config;
        if !opts.warm_pools {
            config.push_str("max_ready_sandboxes = 0\n");
        }
        for line in &opts.config_lines {
            config.push_str(line);
            config.push('\n');
        }
        let config_path = dir.path().join("vivariumd.toml");
        std::fs::write(&config_path, config).expect("write config");
        let mut env = opts.env;
        if let Some(notify) = &opts.notify_socket {
            env.push(("NOTIFY_SOCKET".into(), notify.display().to_string()));
        }
        let mut daemon = Daemon {
            child: None,
            dir: Some(dir),
            socket,
            state_dir,
            log,
            cgroup_subtree,
            config: config_path,
            profiles_dir,
            env,
            socket_activated: opts.socket_activated,
            exec_prefix: opts.exec_prefix,
            binary: opts.binary,
        };
        daemon.spawn()?;
        Ok(daemon)
    }

    /// Start `vivariumd` on this daemon's config, appending to its log.
    fn spawn(&mut self) -> Result<(), String> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = if self.socket_activated {
            // systemd-socket-activate hands the daemon only the variables named with -E.
            let mut cmd = Command::new("systemd-socket-activate");
            cmd.arg("--seqpacket").arg("-l").arg(&self.socket);
            for (k, v) in [("VIVARIUM_LOG", "info"), ("NO_COLOR", "1")]
                .into_iter()
                .chain(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            {
                cmd.arg("-E").arg(format!("{k}={v}"));
            }
            cmd.arg(bin("vivariumd"));
            cmd
        } else if let Some((first, rest)) = self.exec_prefix.split_first() {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(bin("vivariumd"));
            cmd
        } else if let Some((binary, args)) = &self.binary {
            let mut cmd = Command::new(binary);
            cmd.args(args);
            cmd
        } else {
            Command::new(bin("vivariumd"))
        };
        cmd.arg("--config")
            .arg(&self.config)
            .env_remove("VIVARIUM_SOCKET")
            .env("VIVARIUM_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn vivariumd"));
        self.wait_ready()
    }

    /// SIGKILL the daemon (a crash: no cleanup of its own) and reap it.
    pub fn kill_hard(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start a new daemon on the same config, socket, state dir and cgroup subtree (after
    /// [`Daemon::kill_hard`] or [`Daemon::terminate`]).
    pub fn restart(&mut self) -> Result<(), String> {
        if let Some(child) = self.child.as_mut() {
            assert!(
                child.try_wait().ok().flatten().is_some(),
                "restart while the daemon still runs"
            );
        }
        self.spawn()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "vivariumd exited during startup ({status})\n--- log ---\n{}",
                    self.log()
                ));
            }
            if self.socket.exists() && socket_accepts(&self.socket) {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(format!(
                    "vivariumd did not accept on {} within 10 s\n--- log ---\n{}",
                    self.socket.display(),
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn cgroup_subtree(&self) -> &str {
        &self.cgroup_subtree
    }

    /// The daemon's config file (tests may rewrite it and send SIGHUP).
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The profiles directory the daemon reads (a private copy when the options added
    /// profiles).
    pub fn profiles_dir(&self) -> &Path {
        &self.profiles_dir
    }

    /// Send `sig` to the daemon.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid()), sig).expect("signal the daemon");
    }

    /// Whether the daemon process has exited (reaping it if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The daemon's pid (the process this harness started).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("daemon running").id() as i32
    }

    /// The privileged spawner: the daemon's child running `vivariumd __spawner`.
    pub fn spawner_pid(&self) -> Option<i32> {
        leaks::children(self.pid())
            .into_iter()
            .find(|p| leaks::cmdline(p.pid).iter().any(|a| a == "__spawner"))
            .map(|p| p.pid)
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A connected client (its hello sent; the answer comes with the first request's).
    pub async fn client(&self) -> Client {
        match tokio::time::timeout(JOB_TIMEOUT, Client::connect(&self.socket)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => panic!("connect failed: {e:?}\n--- log ---\n{}", self.log()),
            Err(_) => panic!("connect timed out\n--- log ---\n{}", self.log()),
        }
    }

    /// Run `job` on a fresh connection with `stdin`; refusals are `Err`.
    pub async fn try_run(&self, job: &Job, stdin: Option<&[u8]>) -> Result<Collected, ClientError> {
        let mut client = self.client().await;
        match tokio::time::timeout(JOB_TIMEOUT, client.run_collect(job, stdin)).await {
            Ok(result) => result,
            Err(_) => panic!(
                "job did not finish within {JOB_TIMEOUT:?}\n--- log ---\n{}",
                self.log()
            ),
        }
    }

    /// Run `job` and return what it did; panics if the daemon refused it.
    pub async fn run_job(&self, job: &Job) -> Collected {
        self.run_job_stdin(job, None).await
    }

    /// Run `job` with `stdin` piped to it.
    pub async fn run_job_stdin(&self, job: &Job, stdin: Option<&[u8]>) -> Collected {
        self.try_run(job, stdin)
            .await
            .unwrap_or_else(|e| panic!("job refused or failed: {e:?}"))
    }

    /// Run `code` under the default profile and limits.
    pub async fn run(&self, code: &str) -> Collected {
        self.run_job(&Job::new(code)).await
    }

    /// A `viv --socket <ours>` command, ready for more arguments.
    pub fn viv_command(&self) -> Command {
        let mut cmd = Command::new(bin("viv"));
        cmd.arg("--socket")
            .arg(&self.socket)
            .env_remove("VIVARIUM_SOCKET");
        cmd
    }

    /// Run `viv --socket <ours> args...` with `stdin` and wait for it.
    pub fn viv(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_with_stdin(self.viv_command().args(args), stdin)
    }

    /// Processes descended from the daemon other than the spawner: job inits and payloads.
    pub fn job_processes(&self) -> Vec<Proc> {
        let spawner = self.spawner_pid();
        descendants(self.pid())
            .into_iter()
            .filter(|p| Some(p.pid) != spawner)
            .collect()
    }

    /// Job cgroups left in the daemon's subtree, in every hierarchy.
    pub fn cgroup_leftovers(&self) -> Vec<PathBuf> {
        leaks::cgroup_leftovers(&self.cgroup_subtree)
    }

    /// The daemon's subtree directories that exist in any hierarchy.
    pub fn cgroup_subtree_dirs(&self) -> Vec<PathBuf> {
        leaks::subtree_dirs(&self.cgroup_subtree)
    }

    /// Entries of the state directory other than the empty `root` directory.
    pub fn state_leftovers(&self) -> Vec<PathBuf> {
        leaks::state_leftovers(&self.state_dir)
    }

    /// Host mounts (in the daemon's mount namespace) that look like ours: anything under the
    /// test's temp dir, and tmpfs mounts with the sandbox's size/inode options.
    pub fn suspicious_mounts(&self) -> Vec<String> {
        let dir = self.dir.as_ref().expect("temp dir").path().to_owned();
        leaks::suspicious_mounts(self.pid(), &dir)
    }

    /// A [`Daemon::snapshot`] once no job process is left and three samples 50 ms apart
    /// agree: the spawner closes a job's fds just after reporting it finished.
    pub fn settled_snapshot(&self) -> Snapshot {
        let mut last = self.snapshot();
        let mut agreeing = 0;
        let end = Instant::now() + Duration::from_secs(5);
        while agreeing < 3 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
            let now = self.snapshot();
            if now == last && self.job_processes().is_empty() {
                agreeing += 1;
            } else {
                agreeing = 0;
            }
            last = now;
        }
        last
    }

    /// What the leak check compares before and after.
    pub fn snapshot(&self) -> Snapshot {
        let spawner = self.spawner_pid().expect("the spawner is running");
        Snapshot {
            daemon_fds: leaks::fd_count(self.pid()),
            spawner_fds: leaks::spawner_fd_counts(spawner).0,
            mounts: self.suspicious_mounts(),
        }
    }

    /// Mount templates the spawner holds (a bounded cache, not counted in its fds).
    pub fn mount_templates(&self) -> usize {
        self.spawner_pid()
            .map_or(0, |pid| leaks::spawner_fd_counts(pid).1)
    }

    /// Assert that nothing of any job is left: processes, cgroups, mounts, fds, state files.
    /// Waits up to 5 s for teardown that is legitimately asynchronous.
    pub fn assert_no_leaks(&self, before: &Snapshot) {
        let mut after = self.snapshot();
        let settled = wait_until(Duration::from_secs(5), || {
            after = self.snapshot();
            self.job_processes().is_empty()
                && self.mount_templates() <= MAX_MOUNT_TEMPLATES
                && self.cgroup_leftovers().is_empty()
                && self.state_leftovers().is_empty()
                && after == *before
        });
        if !settled {
            panic!(
                "leaks after 5 s:\n job processes: {:?}\n cgroups: {:?}\n state dir: {:?}\n \
                 before: {before:?}\n after:  {after:?}\n fds now: daemon {:?}, spawner {:?}",
                self.job_processes(),
                self.cgroup_leftovers(),
                self.state_leftovers(),
                leaks::fd_list(self.pid()),
                self.spawner_pid().map(leaks::fd_list),
            );
        }
    }

    /// SIGTERM the daemon and wait (up to 10 s) for it to exit; `None` if it did not.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let stopped = self.terminate();
        if stopped.is_none() {
            if let Some(child) = self.child.as_mut() {
                eprintln!("vivariumd {} ignored SIGTERM for 10 s; SIGKILL", child.id());
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // A broken daemon may leave jobs behind: never let them outlive the test.
        for line in leaks::scrub_subtree(&self.cgroup_subtree) {
            eprintln!("harness cleanup: {line}");
        }
        if std::thread::panicking() {
            eprintln!(
                "--- vivariumd log ({}) ---\n{}--- end of log ---",
                self.log.display(),
                self.log()
            );
        }
        self.child = None;
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_owned();
            if let Err(e) = dir.close() {
                let msg = format!(
                    "the daemon's temp dir {} was not removed: {e}",
                    path.display()
                );
                if std::thread::panicking() {
                    eprintln!("{msg}");
                } else {
                    panic!("{msg}");
                }
            }
        }
    }
}

/// Whether a SOCK_SEQPACKET connect to `path` succeeds.
fn socket_accepts(path: &Path) -> bool {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let Ok(fd) = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return false;
    };
    let Ok(addr) = UnixAddr::new(path) else {
        return false;
    };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).is_ok()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read profiles dir") {
        let entry = entry.expect("dir entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy profile file");
        }
    }
}
