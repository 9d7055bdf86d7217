//! Package installs against the daemon: the [`Manager`] (the cache, in-flight
//! deduplication, and running an install sandbox through the spawner like any job),
//! the install sandbox's plan ([`install_plan`], from an activated profile), what the
//! host cannot enforce ([`check_enforceable`]), and the job task's entry point
//! ([`for_job`]). What needs no server (the driver and the reading of its result,
//! uv's errors, requirement parsing, the cache, the copy out of the sandbox) is in
//! [`crate::packages`]; the install sandbox itself is described in
//! [`crate::packages::install`].

use super::{ActiveProfile, Daemon};
use crate::packages::cache::{sha256_hex, Cache, Entry, InUse, Meta};
use crate::packages::install::{
    copy_error, judge, ExportError, Ran, DRIVER, INSTALL_MEMORY_EXTRA, MAX_ENV_DEPTH, OUTPUT_CAP,
    UV_DIR, WHEELHOUSE,
};
use crate::packages::spec::Req;
use crate::packages::tree::TreeLimits;
use crate::packages::{PackageError, PackagesSection, ENV_PATH};
use crate::policy::plan;
use crate::profile::JobLimits;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use vivarium_proto::ErrorCode;
use vivarium_sandbox::ipc::{FromSpawner, KillCause};
use vivarium_sandbox::plan::{JobPlan, MountStep, NetworkPlan, EGRESS_PORT};

/// Bumped when what a key covers changes: older entries are then never served.
const KEY_LAYOUT: u32 = 2;

/// Why this daemon has no package installs.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("no uv is configured (config key `uv`)")]
    NotConfigured,
    #[error("uv {} must be an absolute path", .uv.display())]
    RelativeUv { uv: PathBuf },
    #[error("cannot run {} --version", .uv.display())]
    RunUv {
        uv: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} --version did not report a uv version", .uv.display())]
    NotUv { uv: PathBuf },
    #[error("package cache {}", .dir.display())]
    Cache {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why no install sandbox plan could be made from a profile.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("uv has no file name")]
    UvName,
    #[error("uv {} has no parent directory", .uv.display())]
    UvDir { uv: PathBuf },
    #[error("the profile's plan has no /tmp")]
    NoTmp,
    #[error("seccomp policy")]
    Seccomp(#[source] crate::policy::seccomp::SeccompError),
}

/// Why an install sandbox did not run to its end.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Launch(#[from] super::job::LaunchError),
    #[error("pipe")]
    Pipe(#[source] std::io::Error),
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    #[error("the spawner went away")]
    SpawnerGone,
}

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
    pub fn new(
        uv: &Path,
        cache_dir: &Path,
        max_bytes: u64,
        max_inodes: u64,
    ) -> Result<Manager, ManagerError> {
        if !uv.is_absolute() {
            return Err(ManagerError::RelativeUv { uv: uv.to_owned() });
        }
        let out = std::process::Command::new(uv)
            .arg("--version")
            .env_clear()
            .output()
            .map_err(|source| ManagerError::RunUv {
                uv: uv.to_owned(),
                source,
            })?;
        let uv_version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || !uv_version.starts_with("uv ") {
            return Err(ManagerError::NotUv { uv: uv.to_owned() });
        }
        let cache = Cache::open(cache_dir, max_bytes, max_inodes).map_err(|source| {
            ManagerError::Cache {
                dir: cache_dir.to_owned(),
                source,
            }
        })?;
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

    /// The key of a request, and of its cache entry: what was asked (the normalized
    /// requirements), and everything that decides what may be installed for it and
    /// from where. Never anything the install reports: an install cannot choose the
    /// key it is stored under. Two profiles share entries only when their package
    /// policies are the same.
    pub fn request_key(&self, profile: &ActiveProfile, reqs: &[Req]) -> String {
        let p = &profile.profile.file;
        let s = &p.packages;
        let mut texts: Vec<&str> = reqs.iter().map(|r| r.text.as_str()).collect();
        texts.sort_unstable();
        let normalized = |names: &[String]| {
            let mut v: Vec<String> = names
                .iter()
                .map(|n| crate::packages::spec::normalize_name(n))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let doc = serde_json::json!({
            "layout": KEY_LAYOUT,
            "uv": self.uv_version,
            "python": p.python.interpreter,
            // The interpreter's identity, so that an upgrade in place (same path, e.g.
            // /usr/bin/python3 moving to another minor version) misses the old entries.
            "python_file": interpreter_identity(&p.python.interpreter),
            "arch": std::env::consts::ARCH,
            "os": std::env::consts::OS,
            "index": s.index_url,
            "find_links": s.find_links,
            "egress": s.egress_allow(),
            "policy": {
                "allow": normalized(&s.allow),
                "deny": normalized(&s.deny),
                "max_env_bytes": s.max_env_bytes,
                "max_env_inodes": s.max_env_inodes,
            },
            "requirements": texts,
        });
        sha256_hex(doc.to_string().as_bytes())
    }

    /// Whether `entry` is the environment this daemon builds for `reqs` on `profile`
    /// (its key is that request's, and its metadata says so): what a zygote may preload.
    pub fn check_built_for(
        &self,
        profile: &ActiveProfile,
        reqs: &[Req],
        entry: &Entry,
    ) -> Result<(), PackageError> {
        let want = self.request_key(profile, reqs);
        if entry.key != want || entry.meta.request != want {
            return Err(PackageError::new(
                ErrorCode::InstallFailed,
                None,
                format!(
                    "the environment {} was not built for profile {:?}'s own warm.packages",
                    entry.key, profile.profile.name
                ),
            ));
        }
        Ok(())
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
        check_enforceable(profile, daemon.facts.landlock_abi, daemon.facts.rootless)?;
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
        // Another process sharing the cache may hold it for a whole install: wait on a
        // blocking thread, not on an async worker.
        let _flock = {
            let root = self.cache.root().to_owned();
            let request = request.clone();
            tokio::task::spawn_blocking(move || Cache::lock_request_at(&root, &request))
                .await
                .map_err(|e| internal(format!("lock task: {e}")))?
                .map_err(|e| internal(format!("package cache lock: {e}")))?
        };
        // Checksumming an entry reads it all: off the async threads.
        let cached = tokio::task::block_in_place(|| self.cache.lookup(&request));
        if let Some(entry) = cached {
            // The key covers the policy, so this holds unless the entry was tampered
            // with; checked anyway, against the requesting profile's own limits.
            if entry.meta.bytes <= section.max_env_bytes
                && entry.meta.inodes <= section.max_env_inodes
            {
                let in_use = self.cache.use_entry(&entry);
                return Ok(Ready {
                    entry,
                    from_cache: true,
                    install_ms: 0,
                    requested,
                    _in_use: in_use,
                });
            }
            tracing::warn!(
                request,
                "a cached environment is over its profile's limits; rebuilding it"
            );
            tokio::task::block_in_place(|| self.cache.remove(&request));
        }
        let started = std::time::Instant::now();
        let build = self
            .cache
            .new_build()
            .map_err(|e| internal(format!("package cache: {e}")))?;
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let meta = match self
            .install(daemon, profile, section, reqs, &build, cancel)
            .await
        {
            Ok(meta) => meta,
            Err(e) => {
                tokio::task::block_in_place(|| self.cache.discard(&build));
                return Err(e);
            }
        };
        let entry = tokio::task::block_in_place(|| self.cache.commit(&build, &request, meta))
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

    /// Run the install sandbox, then copy its environment into `build/env`; returns the
    /// entry's metadata (sizes and checksum are filled in at commit).
    async fn install(
        &self,
        daemon: &Arc<Daemon>,
        profile: &Arc<ActiveProfile>,
        section: &PackagesSection,
        reqs: &[Req],
        build: &Path,
        cancel: &Notify,
    ) -> Result<Meta, PackageError> {
        let failed = |e: String| PackageError::new(ErrorCode::InstallFailed, None, e);
        let job_id = daemon
            .next_job
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let plan = install_plan(
            job_id,
            profile,
            &self.uv,
            section,
            reqs,
            daemon.facts.job_cgroups(),
        )
        .map_err(|e| failed(crate::error_chain(&e)))?;
        let names: Vec<&str> = reqs.iter().map(|r| r.name.as_str()).collect();
        tracing::info!(job_id, requirements = ?names, "installing packages");
        let policy = crate::egress::EgressPolicy::new(section.egress_allow());
        let ran = run_sandbox(daemon, &plan, policy, cancel)
            .await
            .map_err(|e| failed(crate::error_chain(&e)))?;
        let (resolved, python_version) = judge(&ran, &names, section, &plan)?;
        let env = ran.env.map_err(|e| {
            failed(format!(
                "the install's environment could not be collected: {e}"
            ))
        })?;
        let limits = TreeLimits {
            max_bytes: section.max_env_bytes,
            max_inodes: section.max_env_inodes,
            max_depth: MAX_ENV_DEPTH,
        };
        let dest = build.join("env");
        std::fs::create_dir(&dest).map_err(|e| failed(format!("package cache: {e}")))?;
        let copied = tokio::task::spawn_blocking(move || {
            crate::packages::tree::copy_tree(env, &dest, &limits)
        })
        .await
        .map_err(|e| failed(format!("copy task: {e}")))?;
        if let Err(e) = copied {
            return Err(copy_error(&e, &names, section));
        }
        Ok(Meta {
            request: String::new(),
            resolved,
            python_version,
            uv_version: self.uv_version.clone(),
            bytes: 0,
            inodes: 0,
            checksum: String::new(),
        })
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
pub fn check_enforceable(
    profile: &ActiveProfile,
    kernel_abi: u32,
    rootless: bool,
) -> Result<(), PackageError> {
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
        if rootless {
            return refuse(
                "installing from an index needs a root daemon: the install's network namespace and its egress proxy are made by the spawner in the host's user namespace (a rootless daemon can use a wheelhouse, packages.find_links)".into(),
            );
        }
    }
    Ok(())
}

/// The install sandbox's plan: the profile's job plan, changed as the module docs say.
pub fn install_plan(
    job_id: u64,
    profile: &ActiveProfile,
    uv: &Path,
    section: &PackagesSection,
    reqs: &[Req],
    cgroups: Option<&[vivarium_sandbox::cgroup::ViewMount]>,
) -> Result<JobPlan, PlanError> {
    let p = &profile.profile;
    let limits = JobLimits {
        wall_ms: section.install_timeout_ms,
        cpu_ms: section.install_timeout_ms.saturating_mul(4),
        // Both tmpfs mounts (the environment and uv's cache) are charged to the
        // install's memory cgroup as they fill.
        memory_bytes: section
            .max_env_bytes
            .saturating_mul(2)
            .saturating_add(INSTALL_MEMORY_EXTRA),
        pids: 256,
        output_bytes: OUTPUT_CAP as u64,
    };
    let uv_name = uv.file_name().ok_or(PlanError::UvName)?;
    let config = serde_json::json!({
        "uv": Path::new(UV_DIR).join(uv_name),
        "python": p.file.python.interpreter,
        "env": ENV_PATH,
        "requirements": reqs.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        "index_url": section.index_url,
        "find_links": section.find_links.as_ref().map(|_| WHEELHOUSE),
    })
    .to_string();
    let mut plan = plan::build(
        job_id,
        p,
        &limits,
        &[config],
        profile.seccomp.clone(),
        cgroups,
    );
    // The install's network is its own (below), never the job profile's loopback or
    // egress: nothing at all from a wheelhouse.
    plan.network = NetworkPlan::None;
    plan.landlock.tcp_connect.clear();
    plan.landlock.tcp_any = false;
    plan.env
        .retain(|(k, _)| !k.to_ascii_lowercase().ends_with("_proxy"));
    if p.file.network.inet() && section.index_url.is_none() {
        plan.seccomp = crate::policy::seccomp::load_for(p, false)
            .map_err(PlanError::Seccomp)?
            .to_wire();
    }
    let uv_dir = uv
        .parent()
        .ok_or_else(|| PlanError::UvDir { uv: uv.to_owned() })?;
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
    // Binds go before the generated /etc files and the tmpfs mounts, like the profile's.
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::File { .. }))
        .unwrap_or(0);
    plan.mounts.splice(at..at, mounts);
    let tmp = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::Tmpfs { path, .. } if path == Path::new("/tmp")))
        .ok_or(PlanError::NoTmp)?;
    // uv's cache: every download is unpacked here before it is copied into the
    // environment. The install's own caps, not the job profile's.
    plan.mounts[tmp] = MountStep::Tmpfs {
        path: "/tmp".into(),
        size: section.max_env_bytes,
        inodes: section.max_env_inodes,
        mode: 0o700,
    };
    // The environment: capped as the writes happen, gone with the sandbox unless the
    // server copies it out.
    plan.mounts.insert(
        tmp + 1,
        MountStep::Tmpfs {
            path: ENV_PATH.into(),
            size: section.max_env_bytes,
            inodes: section.max_env_inodes,
            mode: 0o700,
        },
    );
    plan.kind = vivarium_sandbox::plan::PlanKind::Install {
        export: ENV_PATH.into(),
    };
    plan.rlimits.fsize = section.max_env_bytes;
    plan.rlimits.nofile = plan.rlimits.nofile.max(1024);
    if section.index_url.is_some() {
        plan.network = NetworkPlan::Egress;
        // The profile's seccomp policy with its `deny_socket_inet` filter in place of
        // `deny_socket_local`: IPv4/IPv6 sockets (to the proxy on the namespace's own
        // loopback) are allowed, netlink, packet and vsock sockets stay refused.
        plan.seccomp = crate::policy::seccomp::load_for(p, true)
            .map_err(PlanError::Seccomp)?
            .to_wire();
        plan.landlock.tcp_connect = vec![EGRESS_PORT];
        let proxy = format!("http://127.0.0.1:{EGRESS_PORT}");
        for k in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
            plan.env.push((k.into(), proxy.clone()));
        }
    }
    plan.landlock.exec_dirs.push(UV_DIR.into());
    plan.landlock.write_dirs.push(ENV_PATH.into());
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

/// Run one install sandbox to its end, collecting (bounded) output, serving its egress
/// proxy while it runs, and taking the directory fd it exports. Cancel kills it.
async fn run_sandbox(
    daemon: &Arc<Daemon>,
    plan: &JobPlan,
    policy: crate::egress::EgressPolicy,
    cancel: &Notify,
) -> Result<Ran, RunError> {
    let crate::server::job::Launched {
        mut events,
        stdin,
        stdout: out_r,
        stderr: err_r,
        outputs: _,
    } = crate::server::job::launch(daemon, plan, DRIVER.as_bytes()).await?;
    drop(stdin); // the driver reads nothing
    let collect = |fd| async move {
        let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(RunError::Pipe)?;
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
        Ok::<_, RunError>(out)
    };
    let out = tokio::spawn(collect(out_r));
    let err = tokio::spawn(collect(err_r));
    let mut killed = false;
    let mut proxy: Option<crate::egress::Serving> = None;
    let mut env: Result<OwnedFd, ExportError> = Err(ExportError::NeverRan);
    let report = loop {
        tokio::select! {
            msg = events.recv() => match msg {
                Some(FromSpawner::Finished { report, .. }) => break *report,
                Some(FromSpawner::Egress { listener, .. }) => {
                    match crate::egress::start(listener.take(), policy.clone(), plan.job_id) {
                        Ok(task) => proxy = Some(task),
                        // No way out at all: the install fails on its own, as it would
                        // with the index down; the log says why.
                        Err(e) => {
                            tracing::error!(job_id = plan.job_id, error = %e, "egress proxy not started")
                        }
                    }
                }
                Some(FromSpawner::Exported { dir, error, .. }) => {
                    env = match (dir.take(), error) {
                        (Some(fd), _) => Ok(fd),
                        (None, Some(e)) => Err(ExportError::Spawner(e)),
                        (None, None) => Err(ExportError::NoFd),
                    };
                }
                Some(_) => {}
                None => return Err(RunError::SpawnerGone),
            },
            () = cancel.notified(), if !killed => {
                killed = true;
                daemon.spawner.kill(plan.job_id, KillCause::Cancelled).await;
            }
        }
    };
    drop(proxy);
    let stdout = out.await??;
    let stderr = err.await??;
    Ok(Ran {
        report,
        stdout,
        stderr,
        env,
    })
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
            check_enforceable(profile, daemon.facts.landlock_abi, daemon.facts.rootless)?;
            Err(PackageError::new(
                ErrorCode::PackageNotAllowed,
                None,
                format!(
                    "packages are not available on this daemon: {}",
                    crate::error_chain(why)
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::packages::install::use_env;

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

    fn tmpfs(plan: &JobPlan, at: &str) -> Option<(u64, u64)> {
        plan.mounts.iter().find_map(|m| match m {
            MountStep::Tmpfs {
                path, size, inodes, ..
            } if path == Path::new(at) => Some((*size, *inodes)),
            _ => None,
        })
    }

    #[test]
    fn a_wheelhouse_install_has_no_network_and_writes_only_its_capped_tmpfs() {
        let a = active(PackagesSection {
            enabled: true,
            find_links: Some("/srv/wheels".into()),
            max_env_bytes: 64 << 20,
            max_env_inodes: 5_000,
            ..Default::default()
        });
        let uv = Path::new("/opt/vivarium/uv/bin/uv");
        let s = &a.profile.file.packages;
        let plan = install_plan(9, &a, uv, s, &[req("numpy")], Some(&[])).unwrap();
        assert_eq!(
            plan.network,
            NetworkPlan::None,
            "a fresh empty network namespace"
        );
        assert!(plan.landlock.tcp_connect.is_empty());
        assert!(plan.landlock.tcp_connect.is_empty() && !plan.landlock.tcp_any);
        // The default profile's own filters allow IPv4/IPv6 sockets (for its private
        // loopback): the install gets its policy without them.
        let no_inet = crate::policy::seccomp::load_for(&a.profile, false)
            .unwrap()
            .to_wire();
        assert_eq!(plan.seccomp, no_inet, "the profile's no-network filters");
        // The environment is a tmpfs in the sandbox, capped in bytes and inodes, and
        // exported to the server: no host directory is writable.
        assert_eq!(tmpfs(&plan, ENV_PATH), Some((64 << 20, 5_000)));
        assert_eq!(tmpfs(&plan, "/tmp"), Some((64 << 20, 5_000)), "uv's cache");
        assert_eq!(plan.kind.export(), Some(&PathBuf::from(ENV_PATH)));
        assert!(
            plan.mounts.iter().all(
                |m| !matches!(m, MountStep::BindRo { path, .. } if path == Path::new(ENV_PATH))
            ),
            "{:?}",
            plan.mounts
        );
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
        // The install's own limits, not the job's (whose fsize is 64 MiB, nofile 256).
        assert_eq!(plan.rlimits.fsize, 64 << 20);
        assert_eq!(plan.rlimits.nofile, 1024);
        assert_eq!(plan.cgroup.memory_bytes, (128 << 20) + INSTALL_MEMORY_EXTRA);
        assert_eq!(plan.wall_ms, s.install_timeout_ms);
        assert!(plan.env.contains(&("UV_NO_CONFIG".into(), "1".into())));
        assert!(!plan.env.iter().any(|(k, _)| k.contains("PROXY")));
        let cfg: serde_json::Value = serde_json::from_str(plan.argv.last().unwrap()).unwrap();
        assert_eq!(cfg["uv"], "/uv/uv");
        assert_eq!(cfg["find_links"], WHEELHOUSE);
        assert!(cfg["index_url"].is_null());
    }

    #[test]
    fn an_index_install_reaches_only_the_egress_proxy() {
        let a = active(PackagesSection {
            enabled: true,
            index_url: Some("https://pypi.example:8443/simple".into()),
            ..Default::default()
        });
        let s = &a.profile.file.packages;
        let uv = Path::new("/opt/vivarium/uv/bin/uv");
        let plan = install_plan(9, &a, uv, s, &[req("numpy")], Some(&[])).unwrap();
        assert_eq!(
            plan.network,
            NetworkPlan::Egress,
            "its own namespace with the proxy"
        );
        assert_eq!(plan.landlock.tcp_connect, vec![EGRESS_PORT]);
        assert_ne!(plan.seccomp, a.seccomp, "the inet variant of the policy");
        let proxy = format!("http://127.0.0.1:{EGRESS_PORT}");
        assert!(plan.env.contains(&("HTTPS_PROXY".into(), proxy.clone())));
        assert!(plan.env.contains(&("HTTP_PROXY".into(), proxy)));
        // Nothing inside resolves names: the sandbox's resolver configuration is empty.
        assert!(plan.mounts.contains(&MountStep::File {
            path: "/etc/resolv.conf".into(),
            contents: String::new()
        }));
        assert_eq!(s.egress_allow(), [("pypi.example".to_owned(), 8443)]);
        // A kernel without Landlock TCP rules, or a rootless daemon, is refused, never
        // run unconfined.
        let e = check_enforceable(&a, 3, false).unwrap_err();
        assert_eq!(e.code, ErrorCode::PackageNotAllowed);
        let e = check_enforceable(&a, 7, true).unwrap_err();
        assert_eq!(e.code, ErrorCode::PackageNotAllowed);
        assert!(e.message.contains("root daemon"), "{e}");
        assert!(check_enforceable(&a, 4, false).is_ok());
        let off = active(PackagesSection::default());
        assert_eq!(
            check_enforceable(&off, 7, false).unwrap_err().code,
            ErrorCode::PackageNotAllowed
        );
    }

    /// The key is the request and the policy: the same request under another policy,
    /// index or limit is another entry.
    /// A Manager on a stand-in uv (a script that prints a version) and a temp cache.
    fn manager(tmp: &Path) -> Manager {
        use std::os::unix::fs::PermissionsExt;
        let uv = tmp.join("uv");
        std::fs::write(&uv, "#!/bin/sh\necho 'uv 0.0.0-test'\n").unwrap();
        std::fs::set_permissions(&uv, std::fs::Permissions::from_mode(0o755)).unwrap();
        Manager::new(&uv, &tmp.join("cache"), 1 << 30, 1 << 20).unwrap()
    }

    #[test]
    fn request_keys_cover_the_policy() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manager(tmp.path());
        let base = section();
        let key = |s: PackagesSection, reqs: &[Req]| m.request_key(&active(s), reqs);
        let k0 = key(base.clone(), &[req("a"), req("b")]);
        assert_eq!(
            k0,
            key(base.clone(), &[req("b"), req("a")]),
            "order does not matter"
        );
        assert_ne!(k0, key(base.clone(), &[req("a")]));
        for other in [
            PackagesSection {
                deny: vec!["x".into()],
                ..base.clone()
            },
            PackagesSection {
                allow: vec!["a".into(), "b".into()],
                ..base.clone()
            },
            PackagesSection {
                max_env_bytes: 1 << 20,
                ..base.clone()
            },
            PackagesSection {
                max_env_inodes: 1000,
                ..base.clone()
            },
            PackagesSection {
                allow_hosts: vec!["files.example".into()],
                ..base.clone()
            },
            PackagesSection {
                index_url: Some("http://127.0.0.1:10/simple".into()),
                ..base.clone()
            },
        ] {
            assert_ne!(k0, key(other.clone(), &[req("a"), req("b")]), "{other:?}");
        }
        assert_eq!(
            k0,
            key(
                PackagesSection {
                    install_timeout_ms: 5_000,
                    ..base.clone()
                },
                &[req("a"), req("b")]
            ),
            "a timeout does not change what is installed"
        );
    }

    /// Finding 4: a zygote preloads only the environment built for its profile's own
    /// `warm.packages` request.
    #[test]
    fn a_zygote_preloads_only_the_entry_of_its_own_request() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manager(tmp.path());
        let a = active(section());
        let own = m.request_key(&a, &[req("numpy")]);
        let other = m.request_key(&a, &[req("evil")]);
        let entry = |key: &str, request: &str| Entry {
            key: key.into(),
            dir: tmp.path().join(key),
            meta: Meta {
                request: request.into(),
                resolved: vec!["numpy==2.0".into()],
                python_version: String::new(),
                uv_version: String::new(),
                bytes: 0,
                inodes: 0,
                checksum: String::new(),
            },
        };
        assert!(m
            .check_built_for(&a, &[req("numpy")], &entry(&own, &own))
            .is_ok());
        for (key, request) in [(&other, &other), (&own, &other), (&other, &own)] {
            let e = m
                .check_built_for(&a, &[req("numpy")], &entry(key, request))
                .unwrap_err();
            assert!(e.message.contains("not built for profile"), "{e}");
        }
    }

    #[test]
    fn a_job_with_an_environment_runs_its_python_from_env_read_only() {
        let a = active(PackagesSection::default());
        let limits = a.profile.job_limits(&Default::default()).unwrap();
        let mut plan = plan::build(1, &a.profile, &limits, &[], vec![], Some(&[]));
        use_env(&mut plan, Path::new("/c/envs/k/env"));
        assert!(plan.network != NetworkPlan::Egress && plan.kind.export().is_none());
        assert_eq!(plan.interpreter, PathBuf::from("/env/bin/python"));
        assert_eq!(plan.argv[0], "/env/bin/python");
        assert_eq!(&plan.argv[1..3], ["-I", "-u"]);
        assert!(plan.mounts.contains(&MountStep::BindRo {
            source: "/c/envs/k/env".into(),
            path: ENV_PATH.into()
        }));
        assert!(!plan.landlock.write_dirs.contains(&PathBuf::from(ENV_PATH)));
        assert!(plan.landlock.tcp_connect.is_empty());
    }

    /// The typed errors print what the strings they replaced said (the daemon's log
    /// and the clients' messages are unchanged).
    #[test]
    fn errors_render_as_the_strings_did() {
        use crate::error_chain;
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let e = Manager::new(Path::new("uv"), &cache, 1 << 30, 1 << 20)
            .err()
            .unwrap();
        assert_eq!(error_chain(&e), "uv uv must be an absolute path");
        let e = Manager::new(Path::new("/nonexistent/uv"), &cache, 1 << 30, 1 << 20)
            .err()
            .unwrap();
        assert_eq!(
            error_chain(&e),
            "cannot run /nonexistent/uv --version: No such file or directory (os error 2)"
        );
        assert_eq!(
            error_chain(&ManagerError::NotConfigured),
            "no uv is configured (config key `uv`)"
        );
        let e = crate::packages::index_host("not a url").unwrap_err();
        assert_eq!(
            error_chain(&e),
            "\"not a url\" is not a URL: relative URL without a base"
        );
        let e = crate::packages::host_port("a/b").unwrap_err();
        assert_eq!(error_chain(&e), "\"a/b\" must be a host or host:port alone");
        let e = PlanError::Seccomp(crate::policy::seccomp::SeccompError::Read {
            path: "/p.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        assert!(
            error_chain(&e).starts_with("seccomp policy: ")
                && error_chain(&e).ends_with(": entity not found"),
            "{}",
            error_chain(&e)
        );
    }
}
