//! The install phase: resolve and install a job's requirements with `uv` into a new
//! virtual environment, in a sandbox of its own, built by the same spawner machinery as
//! a job (its own user, mount, pid, ipc, uts and cgroup namespaces; unprivileged uid;
//! capabilities dropped; Landlock; seccomp; cgroup limits) with these differences:
//!
//! - the payload is a small driver (Python, run by the profile's interpreter) that runs
//!   `uv venv` and `uv pip install --only-binary :all:` (wheels only: no sdist's build
//!   code ever runs), then `uv pip freeze`;
//! - it may write only the environment being built (a host directory given to its uid,
//!   bound at [`ENV_PATH`], noexec) and its own tmpfs mounts, where uv's cache lives
//!   (`/tmp`, sized `max_env_bytes`: it bounds what the downloads unpack to);
//! - network: with an index, the host's network namespace with Landlock allowing TCP
//!   connect to the index's port and 53 only; with a wheelhouse alone, a fresh empty
//!   network namespace (no network at all);
//! - limits: `install_timeout_ms` wall clock, memory `max_env_bytes + 768 MiB`.

use super::cache::{sha256_hex, Cache, Entry, InUse, Meta};
use super::spec::Req;
use super::{PackageError, PackagesSection, ENV_PATH};
use crate::profile::JobLimits;
use crate::sandbox::plan::{self, JobPlan, MountStep};
use crate::server::{ActiveProfile, Daemon};
use crate::spawner::link::{FromSpawner, JobReport, KillCause};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use vivarium_proto::ErrorCode;

/// Where uv's directory and the wheelhouse are bound inside the install sandbox.
const UV_DIR: &str = "/uv";
const WHEELHOUSE: &str = "/wheelhouse";
/// The install driver, run as the sandbox's `/work/main.py`.
const DRIVER: &str = include_str!("driver.py");
/// How much of uv's output the server keeps (for error messages).
const OUTPUT_CAP: usize = 256 * 1024;

/// A job's environment, ready to bind.
pub struct Ready {
    pub entry: Entry,
    pub from_cache: bool,
    pub install_ms: u64,
    pub requested: Vec<String>,
    _in_use: InUse,
}

pub struct Manager {
    uv: PathBuf,
    uv_version: String,
    cache: Cache,
    /// One build per request at a time within this daemon (the file lock covers other
    /// processes sharing the cache).
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Installs that actually ran (not cache hits), for the logs and tests.
    pub builds: std::sync::atomic::AtomicU64,
}

impl Manager {
    /// Check the uv binary (`uv --version`) and open the cache.
    pub fn new(uv: &Path, cache_dir: &Path, max_bytes: u64) -> Result<Manager, String> {
        if !uv.is_absolute() {
            return Err(format!("uv {} must be an absolute path", uv.display()));
        }
        let out = std::process::Command::new(uv)
            .arg("--version")
            .env_clear()
            .output()
            .map_err(|e| format!("cannot run {} --version: {e}", uv.display()))?;
        let uv_version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || !uv_version.starts_with("uv ") {
            return Err(format!(
                "{} --version did not report a uv version",
                uv.display()
            ));
        }
        let cache = Cache::open(cache_dir, max_bytes)
            .map_err(|e| format!("package cache {}: {e}", cache_dir.display()))?;
        Ok(Manager {
            uv: uv.to_owned(),
            uv_version,
            cache,
            inflight: Mutex::new(HashMap::new()),
            builds: Default::default(),
        })
    }

    pub fn uv_version(&self) -> &str {
        &self.uv_version
    }

    /// The key of a request: what uniquely determines the resolution's inputs.
    fn request_key(&self, profile: &ActiveProfile, reqs: &[Req]) -> String {
        let p = &profile.profile.file;
        let mut texts: Vec<&str> = reqs.iter().map(|r| r.text.as_str()).collect();
        texts.sort_unstable();
        let doc = serde_json::json!({
            "uv": self.uv_version,
            "python": p.python.interpreter,
            // The interpreter's identity, so that an upgrade in place (same path, e.g.
            // /usr/bin/python3 moving to another minor version) misses the old entries.
            "python_file": interpreter_identity(&p.python.interpreter),
            "arch": std::env::consts::ARCH,
            "index": p.packages.index_url,
            "find_links": p.packages.find_links,
            "requirements": texts,
        });
        sha256_hex(doc.to_string().as_bytes())
    }

    /// Find or build the environment for `reqs`. Cancelling (`cancel`) kills a running
    /// install.
    pub async fn prepare(
        &self,
        daemon: &Arc<Daemon>,
        profile: &Arc<ActiveProfile>,
        reqs: &[Req],
        cancel: &Notify,
    ) -> Result<Ready, PackageError> {
        let section = &profile.profile.file.packages;
        check_enforceable(profile, daemon.facts.landlock_abi)?;
        let requested: Vec<String> = reqs.iter().map(|r| r.text.clone()).collect();
        let request = self.request_key(profile, reqs);
        let slot = {
            let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(request.clone()).or_default().clone()
        };
        let _inproc = slot.lock().await;
        // The map keeps a lock only while someone holds or waits for it.
        let _forget = Forget {
            map: &self.inflight,
            key: &request,
        };
        let internal = |e: String| PackageError::new(ErrorCode::InstallFailed, None, e);
        let _flock = {
            let root = self.cache.root().to_owned();
            let request = request.clone();
            tokio::task::spawn_blocking(move || {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(root.join("locks").join(&request))?;
                nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                    .map_err(|(_, e)| std::io::Error::from(e))
            })
            .await
            .map_err(|e| internal(format!("lock task: {e}")))?
            .map_err(|e| internal(format!("package cache lock: {e}")))?
        };
        let cached = {
            let request = request.clone();
            // Checksumming an entry reads it all: off the async threads.
            tokio::task::block_in_place(|| self.cache.lookup(&request))
        };
        if let Some(entry) = cached {
            let in_use = self.cache.use_entry(&entry);
            return Ok(Ready {
                entry,
                from_cache: true,
                install_ms: 0,
                requested,
                _in_use: in_use,
            });
        }
        let started = std::time::Instant::now();
        let build = self
            .cache
            .new_build()
            .map_err(|e| internal(format!("package cache: {e}")))?;
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let result = self
            .install(daemon, profile, section, reqs, &build, cancel)
            .await;
        let (resolved, python_version) = match result {
            Ok(r) => r,
            Err(e) => {
                self.cache.discard(&build);
                return Err(e);
            }
        };
        let env_bytes = super::disk_usage(&build.join("env")).unwrap_or(u64::MAX);
        if env_bytes > section.max_env_bytes {
            self.cache.discard(&build);
            return Err(PackageError::new(
                ErrorCode::EnvironmentTooLarge,
                None,
                format!(
                    "the environment for {} takes {env_bytes} bytes, over the profile's max_env_bytes ({})",
                    requested.join(", "),
                    section.max_env_bytes
                ),
            ));
        }
        let key = {
            let doc = serde_json::json!({
                "uv": self.uv_version,
                "python": profile.profile.file.python.interpreter,
                "python_version": python_version,
                "arch": std::env::consts::ARCH,
                "index": section.index_url,
                "find_links": section.find_links,
                "resolved": resolved,
            });
            sha256_hex(doc.to_string().as_bytes())
        };
        let meta = Meta {
            resolved,
            python_version,
            uv_version: self.uv_version.clone(),
            bytes: 0,
            checksum: String::new(),
        };
        let entry = tokio::task::block_in_place(|| self.cache.commit(&build, &key, &request, meta))
            .map_err(|e| {
                self.cache.discard(&build);
                internal(format!("package cache commit: {e}"))
            })?;
        let in_use = self.cache.use_entry(&entry);
        let evicted = tokio::task::block_in_place(|| self.cache.evict());
        if !evicted.is_empty() {
            tracing::info!(
                ?evicted,
                "package cache: evicted least recently used environments"
            );
        }
        Ok(Ready {
            entry,
            from_cache: false,
            install_ms: started.elapsed().as_millis() as u64,
            requested,
            _in_use: in_use,
        })
    }

    /// Run the install sandbox; returns (resolved `name==version`, Python version).
    async fn install(
        &self,
        daemon: &Arc<Daemon>,
        profile: &Arc<ActiveProfile>,
        section: &PackagesSection,
        reqs: &[Req],
        build: &Path,
        cancel: &Notify,
    ) -> Result<(Vec<String>, String), PackageError> {
        let job_id = daemon
            .next_job
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let plan = install_plan(
            job_id,
            profile,
            &self.uv,
            section,
            reqs,
            build,
            daemon.facts.cgroup.is_none(),
        )
        .map_err(|e| PackageError::new(ErrorCode::InstallFailed, None, e))?;
        let names: Vec<&str> = reqs.iter().map(|r| r.name.as_str()).collect();
        tracing::info!(job_id, requirements = ?names, "installing packages");
        let (report, stdout, stderr) = run_sandbox(daemon, &plan, cancel)
            .await
            .map_err(|e| PackageError::new(ErrorCode::InstallFailed, None, e))?;
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        if let Some(f) = &report.failure {
            return Err(PackageError::new(
                ErrorCode::InstallFailed,
                None,
                format!("the install sandbox failed at {}: {}", f.step, f.detail),
            ));
        }
        match report.killed {
            Some(KillCause::Timeout | KillCause::CpuLimit) => {
                return Err(PackageError::new(
                    ErrorCode::InstallTimeout,
                    None,
                    format!(
                        "installing {} took longer than the profile's install_timeout_ms ({} ms)",
                        names.join(", "),
                        section.install_timeout_ms
                    ),
                ))
            }
            Some(cause) => {
                return Err(PackageError::new(
                    ErrorCode::InstallFailed,
                    None,
                    format!("the install was stopped ({cause:?})"),
                ))
            }
            None => {}
        }
        if report.oom_kills > 0 || report.disk_full {
            return Err(too_large(&names, section));
        }
        let ok = matches!(
            report.exit,
            Some(crate::sandbox::report::WaitStatus::Code(0))
        );
        if !ok {
            return Err(classify(&stderr, &names, section));
        }
        #[derive(serde::Deserialize)]
        struct Done {
            resolved: Vec<String>,
            python_version: String,
            platform: String,
        }
        let text = String::from_utf8_lossy(&stdout);
        let done: Done = text
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| {
                PackageError::new(
                    ErrorCode::InstallFailed,
                    None,
                    format!("the install driver reported nothing: {}", tail(&stderr)),
                )
            })?;
        let mut resolved = done.resolved;
        resolved.sort();
        // The entry key covers the wheel platform too (e.g. `linux-x86_64 glibc 2.36`).
        Ok((
            resolved,
            format!("{} ({})", done.python_version, done.platform),
        ))
    }
}

/// Where an interpreter path leads, and that file's size and modification time.
fn interpreter_identity(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    match std::fs::metadata(&real) {
        Ok(m) => format!(
            "{} {} {}.{}",
            real.display(),
            m.size(),
            m.mtime(),
            m.mtime_nsec()
        ),
        Err(_) => real.display().to_string(),
    }
}

/// Drops a request's in-flight lock from the map once nobody else holds it.
struct Forget<'a> {
    map: &'a Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    key: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Our own clone (`slot`) is still alive here: 2 means map + us only.
        if map.get(self.key).is_some_and(|l| Arc::strong_count(l) <= 2) {
            map.remove(self.key);
        }
    }
}

/// Refuse what the host cannot enforce (fail closed).
pub fn check_enforceable(profile: &ActiveProfile, kernel_abi: u32) -> Result<(), PackageError> {
    let section = &profile.profile.file.packages;
    let refuse = |m: String| Err(PackageError::new(ErrorCode::PackageNotAllowed, None, m));
    if !section.enabled {
        return refuse(format!(
            "profile {:?} does not allow packages",
            profile.profile.name
        ));
    }
    if section.index_url.is_some() {
        let profile_abi = u32::from(profile.profile.file.security.landlock_abi);
        if kernel_abi < 4 || profile_abi < 4 {
            return refuse(format!(
                "installing from an index needs Landlock TCP rules (ABI 4) to confine the install's network; kernel ABI {kernel_abi}, profile ABI {profile_abi}"
            ));
        }
    }
    Ok(())
}

fn too_large(names: &[&str], section: &PackagesSection) -> PackageError {
    PackageError::new(
        ErrorCode::EnvironmentTooLarge,
        None,
        format!(
            "installing {} needs more than the profile's max_env_bytes ({} bytes)",
            names.join(", "),
            section.max_env_bytes
        ),
    )
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("Using Python"))
        .collect();
    let start = lines.len().saturating_sub(8);
    let mut t = lines[start..].join("\n");
    if t.len() > 2000 {
        let mut cut = t.len() - 2000;
        while !t.is_char_boundary(cut) {
            cut += 1;
        }
        t = t[cut..].to_owned();
    }
    t
}

/// Turn uv's error output into a typed error naming the package.
pub fn classify(stderr: &str, names: &[&str], section: &PackagesSection) -> PackageError {
    static RES: std::sync::OnceLock<[regex::Regex; 6]> = std::sync::OnceLock::new();
    let [not_found, no_version, no_wheels, wheels_required, you_require, only_available] =
        RES.get_or_init(|| {
        [
            r"Because ([A-Za-z0-9._-]+) was not found in the (?:package registry|provided package locations)",
            r"there is no version of ([A-Za-z0-9._-]+)",
            r"([A-Za-z0-9._-]+)(?:==\S+)? has no usable wheels",
            r"Wheels are required for `([A-Za-z0-9._-]+)`",
            r"you require ([A-Za-z0-9._-]+)",
            r"Because only ([A-Za-z0-9._-]+?)[<>=!~]\S* (?:is|are) available and you require ([A-Za-z0-9._-]+?)[<>=!~ ,]",
        ]
        .map(|r| regex::Regex::new(r).expect("uv error patterns compile"))
    });
    let cause = tail(stderr);
    let first = |re: &regex::Regex| re.captures(stderr).map(|c| c[1].to_owned());
    let err = |code, pkg: Option<String>, msg: String| PackageError {
        code,
        package: pkg,
        message: msg,
    };
    if stderr.contains("No space left on device") || stderr.contains("Disk quota exceeded") {
        return too_large(names, section);
    }
    let unreachable = [
        "Failed to fetch",
        "error sending request",
        "tcp connect error",
        "dns error",
        "Connection refused",
        "Network is unreachable",
        "operation timed out",
    ];
    if unreachable.iter().any(|p| stderr.contains(p)) && !stderr.contains("No solution found") {
        let index = section.index_url.as_deref().unwrap_or("(none)");
        return err(
            ErrorCode::IndexUnreachable,
            names.first().map(|s| s.to_string()),
            format!("the package index {index} could not be reached: {cause}"),
        );
    }
    if stderr.contains("No solution found") {
        if let Some(p) = first(no_wheels).or_else(|| first(wheels_required)) {
            return err(
                ErrorCode::NoCompatibleWheel,
                Some(p.clone()),
                format!("{p}: no wheel for this platform (source distributions are never built): {cause}"),
            );
        }
        if let Some(p) = first(not_found) {
            return err(
                ErrorCode::PackageNotFound,
                Some(p.clone()),
                format!("{p}: not found on the index or in the wheelhouse"),
            );
        }
        // "Because only x==1.0 is available and you require x>=2": the project exists,
        // but no version of it satisfies what was asked.
        let unmatched = only_available
            .captures(stderr)
            .filter(|c| c[1] == c[2])
            .map(|c| c[1].to_owned());
        if let Some(p) = first(no_version).or(unmatched) {
            return err(
                ErrorCode::PackageNotFound,
                Some(p.clone()),
                format!("{p}: no version matches the requirement: {cause}"),
            );
        }
        let p = first(you_require).or_else(|| names.first().map(|s| s.to_string()));
        return err(
            ErrorCode::ResolutionConflict,
            p,
            format!("the requirements conflict: {cause}"),
        );
    }
    err(
        ErrorCode::InstallFailed,
        None,
        format!("installing {} failed: {cause}", names.join(", ")),
    )
}

/// The install sandbox's plan: the profile's job plan, changed as the module docs say.
pub fn install_plan(
    job_id: u64,
    profile: &ActiveProfile,
    uv: &Path,
    section: &PackagesSection,
    reqs: &[Req],
    build: &Path,
    without_cgroup: bool,
) -> Result<JobPlan, String> {
    let p = &profile.profile;
    let limits = JobLimits {
        wall_ms: section.install_timeout_ms,
        cpu_ms: section.install_timeout_ms.saturating_mul(4),
        memory_bytes: section.max_env_bytes + (768 << 20),
        pids: 256,
        output_bytes: OUTPUT_CAP as u64,
    };
    let uv_name = uv.file_name().ok_or("uv has no file name")?;
    let mut config = serde_json::json!({
        "uv": Path::new(UV_DIR).join(uv_name),
        "python": p.file.python.interpreter,
        "env": ENV_PATH,
        "requirements": reqs.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        "index_url": section.index_url,
        "find_links": section.find_links.as_ref().map(|_| WHEELHOUSE),
    });
    let config = std::mem::take(&mut config).to_string();
    let mut plan = plan::build(
        job_id,
        p,
        &limits,
        &[config],
        profile.seccomp.clone(),
        without_cgroup,
    );
    let uv_dir = uv
        .parent()
        .ok_or_else(|| format!("uv {} has no parent directory", uv.display()))?;
    // uv and the wheelhouse appear at fixed paths inside: the host paths may lie under
    // one the sandbox builds itself (/tmp, /work), and nothing installed refers to them.
    let mut mounts = vec![MountStep::BindRo {
        source: uv_dir.to_owned(),
        path: UV_DIR.into(),
    }];
    if let Some(dir) = &section.find_links {
        mounts.push(MountStep::BindRo {
            source: dir.clone(),
            path: WHEELHOUSE.into(),
        });
    }
    mounts.push(MountStep::BindRw {
        source: build.join("env"),
        path: ENV_PATH.into(),
    });
    // Binds go before the generated /etc files and the tmpfs mounts, like the profile's.
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::File { .. }))
        .unwrap_or(0);
    plan.mounts.splice(at..at, mounts);
    for m in &mut plan.mounts {
        if let MountStep::Tmpfs { path, size, .. } = m {
            if path == Path::new("/tmp") {
                // uv's cache: every download is unpacked here before it is copied into
                // the environment, so this bounds the environment too.
                *size = section.max_env_bytes;
            }
        }
    }
    if let Some(url) = &section.index_url {
        let port = super::index_port(url)?;
        plan.host_network = true;
        // The profile's seccomp policy with its `deny_socket_inet` filter in place of
        // `deny_socket_local`: IPv4/IPv6 sockets (for the index and DNS) are allowed,
        // netlink, packet and vsock sockets stay refused.
        plan.seccomp = crate::sandbox::seccomp::load(&p.seccomp_path, true)
            .map_err(|e| format!("seccomp policy: {}", crate::error_chain(&e)))?
            .to_wire();
        let mut ports = vec![port, 53];
        ports.dedup();
        plan.landlock.tcp_connect = ports;
        // Name resolution needs the host's resolver configuration.
        for m in &mut plan.mounts {
            if let MountStep::File { path, contents } = m {
                for host in ["/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf"] {
                    if path == Path::new(host) {
                        *contents = std::fs::read_to_string(host).unwrap_or_default();
                    }
                }
            }
        }
    }
    plan.landlock.exec_dirs.push(UV_DIR.into());
    plan.landlock.write_dirs.push(ENV_PATH.into());
    plan.own_dirs = vec![build.join("env")];
    for (k, v) in [
        ("UV_CACHE_DIR", "/tmp/uv-cache"),
        ("UV_NO_CONFIG", "1"),
        ("UV_PYTHON_DOWNLOADS", "never"),
        ("UV_LINK_MODE", "copy"),
        // The host's trust store (bound from /etc/ssl by the shipped profiles), not uv's
        // bundled roots: operators behind a TLS-inspecting proxy add their CA there.
        ("UV_SYSTEM_CERTS", "1"),
        ("UV_NO_PROGRESS", "1"),
        ("UV_HTTP_RETRIES", "1"),
        ("UV_HTTP_TIMEOUT", "30"),
        ("UV_CONCURRENT_DOWNLOADS", "4"),
        ("UV_CONCURRENT_INSTALLS", "2"),
        ("NO_COLOR", "1"),
    ] {
        plan.env.push((k.into(), v.into()));
    }
    Ok(plan)
}

/// The job plan of a job that uses `env`: the environment bound read-only at
/// [`ENV_PATH`], and its `bin/python` (a symlink to the profile's interpreter, so
/// `pyvenv.cfg` makes `site` add its site-packages, also under `-I`) as argv[0].
pub fn use_env(plan: &mut JobPlan, env: &Path) {
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::File { .. }))
        .unwrap_or(0);
    plan.mounts.insert(
        at,
        MountStep::BindRo {
            source: env.to_owned(),
            path: ENV_PATH.into(),
        },
    );
    let python = format!("{ENV_PATH}/bin/python");
    plan.interpreter = PathBuf::from(&python);
    if let Some(a0) = plan.argv.first_mut() {
        *a0 = python;
    }
}

/// Run one sandbox to its end, collecting (bounded) output. Cancel kills it.
async fn run_sandbox(
    daemon: &Arc<Daemon>,
    plan: &JobPlan,
    cancel: &Notify,
) -> Result<(JobReport, Vec<u8>, Vec<u8>), String> {
    let crate::server::job::Launched {
        mut events,
        stdin,
        stdout: out_r,
        stderr: err_r,
    } = crate::server::job::launch(daemon, plan, DRIVER.as_bytes()).await?;
    drop(stdin); // the driver reads nothing
    let collect = |fd| async move {
        let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .map_err(|e| format!("pipe: {e}"))?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16384];
        loop {
            match rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) if out.len() < OUTPUT_CAP => {
                    out.extend_from_slice(&buf[..n.min(OUTPUT_CAP - out.len())])
                }
                Ok(_) => {}
            }
        }
        Ok::<_, String>(out)
    };
    let out = tokio::spawn(collect(out_r));
    let err = tokio::spawn(collect(err_r));
    let mut killed = false;
    let report = loop {
        tokio::select! {
            msg = events.recv() => match msg {
                Some(FromSpawner::Finished { report, .. }) => break *report,
                Some(_) => {}
                None => return Err("the spawner went away".into()),
            },
            () = cancel.notified(), if !killed => {
                killed = true;
                daemon.spawner.kill(plan.job_id, KillCause::Cancelled).await;
            }
        }
    };
    let stdout = out.await.map_err(|e| e.to_string())??;
    let stderr = err.await.map_err(|e| e.to_string())??;
    Ok((report, stdout, stderr))
}

impl Ready {
    pub fn report(&self) -> vivarium_proto::PackagesReport {
        vivarium_proto::PackagesReport {
            requested: self.requested.clone(),
            resolved: self.entry.meta.resolved.clone(),
            from_cache: self.from_cache,
            install_ms: self.install_ms,
            env_bytes: self.entry.meta.bytes,
        }
    }
}

/// The job task's entry point: the daemon's manager, or why packages are unavailable.
pub async fn for_job(
    daemon: &Arc<Daemon>,
    profile: &Arc<ActiveProfile>,
    reqs: &[Req],
    cancel: &Notify,
) -> Result<Ready, PackageError> {
    match &daemon.packages {
        Ok(m) => m.prepare(daemon, profile, reqs, cancel).await,
        Err(why) => {
            check_enforceable(profile, daemon.facts.landlock_abi)?;
            Err(PackageError::new(
                ErrorCode::PackageNotAllowed,
                None,
                format!("packages are not available on this daemon: {why}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> PackagesSection {
        PackagesSection {
            enabled: true,
            index_url: Some("http://127.0.0.1:9/simple".into()),
            ..Default::default()
        }
    }

    fn active(section: PackagesSection) -> ActiveProfile {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let mut profile = crate::profile::load_dir(&dir)
            .unwrap()
            .into_iter()
            .find(|p| p.name == "default")
            .unwrap();
        profile.file.packages = section;
        ActiveProfile {
            profile,
            disabled: None,
            seccomp: vec![vec![(6, 0, 0, 0x7fff_0000)]],
            seccomp_filters: 1,
            zygote_seccomp: None,
            generation: 0,
            not_enforced: vec![],
        }
    }

    fn req(name: &str) -> Req {
        Req {
            name: name.into(),
            text: name.into(),
        }
    }

    #[test]
    fn a_wheelhouse_install_has_no_network_and_writes_only_its_environment() {
        let a = active(PackagesSection {
            enabled: true,
            find_links: Some("/srv/wheels".into()),
            max_env_bytes: 64 << 20,
            ..Default::default()
        });
        let build = Path::new("/var/cache/x/build/abc");
        let uv = Path::new("/opt/vivarium/uv/bin/uv");
        let s = &a.profile.file.packages;
        let plan = install_plan(9, &a, uv, s, &[req("numpy")], build, false).unwrap();
        assert!(!plan.host_network);
        assert!(plan.landlock.tcp_connect.is_empty());
        assert_eq!(plan.seccomp, a.seccomp, "the profile's no-network filters");
        assert_eq!(plan.own_dirs, vec![build.join("env")]);
        assert!(plan.mounts.contains(&MountStep::BindRw {
            source: build.join("env"),
            path: ENV_PATH.into()
        }));
        assert!(plan.mounts.contains(&MountStep::BindRo {
            source: "/opt/vivarium/uv/bin".into(),
            path: UV_DIR.into()
        }));
        assert!(plan.mounts.contains(&MountStep::BindRo {
            source: "/srv/wheels".into(),
            path: WHEELHOUSE.into()
        }));
        // Writable: the job tmpfs mounts and /env, nothing else; executable: the binds
        // and /uv, never /env.
        assert_eq!(
            plan.landlock.write_dirs,
            ["/work", "/tmp", "/dev/shm", ENV_PATH].map(PathBuf::from)
        );
        assert!(plan.landlock.exec_dirs.contains(&PathBuf::from(UV_DIR)));
        assert!(!plan.landlock.exec_dirs.contains(&PathBuf::from(ENV_PATH)));
        let tmp = plan.mounts.iter().find_map(|m| match m {
            MountStep::Tmpfs { path, size, .. } if path == Path::new("/tmp") => Some(*size),
            _ => None,
        });
        assert_eq!(
            tmp,
            Some(64 << 20),
            "uv's cache is bounded by max_env_bytes"
        );
        assert_eq!(plan.wall_ms, s.install_timeout_ms);
        assert!(plan.env.contains(&("UV_NO_CONFIG".into(), "1".into())));
        let cfg: serde_json::Value = serde_json::from_str(plan.argv.last().unwrap()).unwrap();
        assert_eq!(cfg["uv"], "/uv/uv");
        assert_eq!(cfg["find_links"], WHEELHOUSE);
        assert!(cfg["index_url"].is_null());
    }

    #[test]
    fn an_index_install_may_connect_to_the_index_port_and_dns_only() {
        let a = active(PackagesSection {
            enabled: true,
            index_url: Some("https://pypi.example:8443/simple".into()),
            ..Default::default()
        });
        let s = &a.profile.file.packages;
        let uv = Path::new("/opt/vivarium/uv/bin/uv");
        let plan = install_plan(9, &a, uv, s, &[req("numpy")], Path::new("/c/b"), false).unwrap();
        assert!(plan.host_network);
        assert_eq!(plan.landlock.tcp_connect, vec![8443, 53]);
        assert_ne!(plan.seccomp, a.seccomp, "the inet variant of the policy");
        // A kernel without Landlock TCP rules is refused, never run unconfined.
        let e = check_enforceable(&a, 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::PackageNotAllowed);
        assert!(check_enforceable(&a, 4).is_ok());
        let off = active(PackagesSection::default());
        assert_eq!(
            check_enforceable(&off, 7).unwrap_err().code,
            ErrorCode::PackageNotAllowed
        );
    }

    #[test]
    fn a_job_with_an_environment_runs_its_python_from_env_read_only() {
        let a = active(PackagesSection::default());
        let limits = a.profile.job_limits(&Default::default()).unwrap();
        let mut plan = plan::build(1, &a.profile, &limits, &[], vec![], false);
        use_env(&mut plan, Path::new("/c/envs/k/env"));
        assert_eq!(plan.interpreter, PathBuf::from("/env/bin/python"));
        assert_eq!(plan.argv[0], "/env/bin/python");
        assert_eq!(&plan.argv[1..3], ["-I", "-u"]);
        assert!(plan.mounts.contains(&MountStep::BindRo {
            source: "/c/envs/k/env".into(),
            path: ENV_PATH.into()
        }));
        assert!(!plan.landlock.write_dirs.contains(&PathBuf::from(ENV_PATH)));
        assert!(!plan.host_network && plan.landlock.tcp_connect.is_empty());
    }

    #[test]
    fn uv_errors_are_classified() {
        let s = section();
        let cases = [
            ("error: No solution found when resolving dependencies\n  cause: Because nosuchpkg was not found in the provided package locations and you require nosuchpkg, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("nosuchpkg")),
            ("error: No solution found when resolving dependencies\n  cause: Because nosuchpkg was not found in the package registry and you require nosuchpkg, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("nosuchpkg")),
            ("error: No solution found when resolving dependencies\n  cause: Because there is no version of vivtiny==3 and you require vivtiny==3, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("vivtiny")),
            ("error: No solution found when resolving dependencies\n  cause: Because all versions of vivneeds depend on vivdep==1.0 and you require vivneeds, we can conclude that you require vivdep==1.0.\n         And because you require vivdep==2.0, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::ResolutionConflict, Some("vivneeds")),
            ("error: No solution found when resolving dependencies\n  cause: Because vivsdist==1.0 has no usable wheels and only vivsdist==1.0 is available, we can conclude that all versions of vivsdist cannot be used.\n\nhint: Wheels are required for `vivsdist` because building from source is disabled for all packages (i.e., with `--no-build`)\n", ErrorCode::NoCompatibleWheel, Some("vivsdist")),
            ("error: Request failed after 3 retries in 4.9s\n  cause: Failed to fetch: http://127.0.0.1:9/simple/x/\n  cause: error sending request for url (http://127.0.0.1:9/simple/x/)\n  cause: client error (Connect)\n  cause: tcp connect error\n  cause: Connection refused (os error 111)\n", ErrorCode::IndexUnreachable, Some("x")),
            ("error: Failed to install: x.whl\n  Caused by: No space left on device (os error 28)\n", ErrorCode::EnvironmentTooLarge, None),
            ("error: No solution found when resolving dependencies\n  cause: Because only vivtiny==1.0 is available and you require vivtiny>=2, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("vivtiny")),
            ("error: something new\n", ErrorCode::InstallFailed, None),
        ];
        for (stderr, code, pkg) in cases {
            let e = classify(stderr, &["x"], &s);
            assert_eq!((e.code, e.package.as_deref()), (code, pkg), "{stderr}");
            if let Some(p) = pkg {
                assert!(e.message.contains(p), "{}", e.message);
            }
        }
    }
}
