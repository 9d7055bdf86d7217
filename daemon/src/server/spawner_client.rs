//! The server's end of the spawner link: start the spawner process (before the tokio
//! runtime exists, so the multi-threaded process is never forked), then route its
//! messages to the job that each one is about.

use crate::policy::weaken::Weakening;
use std::collections::HashMap;
use std::io::IoSlice;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_seqpacket::ancillary::AncillaryMessageWriter;
use tokio_seqpacket::UnixSeqpacket;
use vivarium_sandbox::ipc::{
    self, FromSpawner, KillCause, LogLevel, SpawnerConfig, ToSpawner, MAX_LINK_FRAME, SPAWNER_ARG,
};
use vivarium_sandbox::plan::JobPlan;

#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    #[error("cannot start the spawner")]
    Start(#[source] std::io::Error),
    #[error("spawner link failed")]
    Link(#[source] std::io::Error),
    #[error("spawner setup failed: {0}")]
    Init(String),
    #[error("spawner sent an unexpected message")]
    Unexpected,
}

/// A started spawner whose link is not yet attached to a runtime.
pub struct Unattached {
    link: OwnedFd,
    pub child: std::process::Child,
}

/// Start `vivariumd __spawner` with its end of a socketpair on fd 3.
pub fn start() -> Result<Unattached, SpawnerError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SpawnerError::Start(e.into()))?;
    let exe = std::fs::read_link("/proc/self/exe").map_err(SpawnerError::Start)?;
    let child = vivarium_sandbox::sys::spawn_with_fd3(&exe, &[SPAWNER_ARG], theirs)
        .map_err(SpawnerError::Start)?;
    Ok(Unattached { link: ours, child })
}

type Routes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<FromSpawner>>>>;

pub struct SpawnerClient {
    sock: Arc<UnixSeqpacket>,
    routes: Routes,
    /// Notified when the link to the spawner is gone.
    pub gone: Arc<tokio::sync::Notify>,
    /// Applied to every plan sent (empty in production).
    weakening: Weakening,
}

/// What the spawner found on this host.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// `None`: no cgroup is usable (a rootless daemon without delegation).
    pub cgroup: Option<vivarium_proto::CgroupVersion>,
    pub controllers: Vec<String>,
    /// Why no cgroup is usable, when `cgroup` is `None`.
    pub cgroup_problem: Option<String>,
    pub landlock_abi: u32,
    /// What each job is shown of its own cgroup (empty without cgroups).
    pub cgroup_view: Vec<vivarium_sandbox::cgroup::ViewMount>,
    /// The daemon runs as an ordinary user.
    pub rootless: bool,
    /// Test-only weakening applied to every plan the server sends (empty in
    /// production); every profile lists it in `not_enforced`, and outcomes report what
    /// it removed.
    pub weakened: Weakening,
}

impl HostFacts {
    /// What `plan::build` needs of the host's cgroups: `None` without any (the rlimit
    /// fallback stands in), else the view each job is shown of its own.
    pub fn job_cgroups(&self) -> Option<&[vivarium_sandbox::cgroup::ViewMount]> {
        self.cgroup.is_some().then_some(&self.cgroup_view[..])
    }
}

impl SpawnerClient {
    /// Attach to the runtime, send `Init`, wait for `Ready`, start routing. `weakening`
    /// is applied to every plan sent ([`Weakening::none`] but in the attack suite).
    pub async fn attach(
        un: Unattached,
        config: SpawnerConfig,
        weakening: Weakening,
    ) -> Result<(Self, HostFacts, std::process::Child), SpawnerError> {
        let rootless = config.rootless;
        let weakened = weakening.clone();
        // tokio needs a non-blocking fd: a blocking recv would park a worker thread
        // (and with it any task woken onto that worker's queue).
        nix::fcntl::fcntl(
            &un.link,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| SpawnerError::Link(e.into()))?;
        let sock = UnixSeqpacket::try_from(un.link).map_err(SpawnerError::Link)?;
        sock.send(&ipc::encode(&ToSpawner::Init(config)))
            .await
            .map_err(SpawnerError::Link)?;
        let mut buf = vec![0u8; MAX_LINK_FRAME + 1];
        // The spawner's log lines may come before `Ready`.
        let (n, first) = loop {
            let n = sock.recv(&mut buf).await.map_err(SpawnerError::Link)?;
            match ipc::decode::<FromSpawner>(&buf[..n]) {
                Some(FromSpawner::Log { level, message }) => log_line(level, &message),
                msg => break (n, msg),
            }
        };
        let facts = match first {
            Some(FromSpawner::Ready {
                cgroup,
                controllers,
                cgroup_problem,
                landlock_abi,
                cgroup_view,
            }) => HostFacts {
                cgroup,
                controllers,
                cgroup_problem,
                landlock_abi,
                cgroup_view,
                rootless,
                weakened,
            },
            Some(FromSpawner::InitFailed(why)) => return Err(SpawnerError::Init(why)),
            _ if n == 0 => return Err(SpawnerError::Init("spawner exited during setup".into())),
            _ => return Err(SpawnerError::Unexpected),
        };
        let sock = Arc::new(sock);
        let routes: Routes = Arc::default();
        let gone = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(route(sock.clone(), routes.clone(), gone.clone()));
        let client = SpawnerClient {
            sock,
            routes,
            gone,
            weakening,
        };
        Ok((client, facts, un.child))
    }

    /// Send a job to the spawner with its fds (`spawner::JOB_FDS`); its messages arrive on the
    /// returned channel, ending with `Finished`. Every plan goes this way, so the
    /// test-only weakening is applied here (a no-op in production).
    pub async fn spawn(
        &self,
        plan: &JobPlan,
        fds: [BorrowedFd<'_>; crate::spawner::JOB_FDS],
    ) -> Result<mpsc::UnboundedReceiver<FromSpawner>, SpawnerError> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes
            .lock()
            .expect("routes lock")
            .insert(plan.job_id, tx);
        let mut sent = plan.clone();
        self.weakening.apply(&mut sent);
        let frame = ipc::encode(&ToSpawner::Spawn(Box::new(sent)));
        let mut space = [0u8; 256];
        let mut anc = AncillaryMessageWriter::new(&mut space);
        anc.add_fds(&fds)
            .map_err(|_| SpawnerError::Link(std::io::Error::other("ancillary buffer too small")))?;
        let sent = self
            .sock
            .send_vectored_with_ancillary(&[IoSlice::new(&frame)], &mut anc)
            .await;
        if let Err(e) = sent {
            self.routes
                .lock()
                .expect("routes lock")
                .remove(&plan.job_id);
            return Err(SpawnerError::Link(e));
        }
        Ok(rx)
    }

    /// A warm job's code is being delivered: start its deadlines.
    pub async fn arm(&self, job_id: u64, wall_ms: u64, cpu_ms: u64) {
        let msg = ToSpawner::Arm {
            job_id,
            wall_ms,
            cpu_ms,
        };
        let _ = self.sock.send(&ipc::encode(&msg)).await;
    }

    /// Ask what a job uses now; the answer comes on its route as `FromSpawner::Stats`.
    pub async fn stats(&self, job_id: u64) {
        let _ = self
            .sock
            .send(&ipc::encode(&ToSpawner::Stats { job_id }))
            .await;
    }

    /// Set a session's memory guard (`ToSpawner::Guard`).
    pub async fn guard(&self, job_id: u64, bytes: u64, watch: bool) {
        let msg = ToSpawner::Guard {
            job_id,
            bytes,
            watch,
        };
        let _ = self.sock.send(&ipc::encode(&msg)).await;
    }

    pub async fn kill(&self, job_id: u64, cause: KillCause) {
        let _ = self
            .sock
            .send(&ipc::encode(&ToSpawner::Kill { job_id, cause }))
            .await;
    }

    /// The profiles were reloaded: every zygote is of an old activation.
    pub async fn zygotes_stale(&self) {
        let _ = self.sock.send(&ipc::encode(&ToSpawner::ZygotesStale)).await;
    }

    pub async fn shutdown(&self) {
        let _ = self.sock.send(&ipc::encode(&ToSpawner::Shutdown)).await;
    }
}

async fn route(sock: Arc<UnixSeqpacket>, routes: Routes, gone: Arc<tokio::sync::Notify>) {
    let mut buf = vec![0u8; MAX_LINK_FRAME + 1];
    let mut space = [0u8; 128];
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let (n, anc) = match sock
            .recv_vectored_with_ancillary(&mut iov, &mut space)
            .await
        {
            Ok((0, _)) | Err(_) => break,
            Ok(got) => got,
        };
        // Every fd that came is owned here, so none leaks whatever the message is.
        let mut fds = Vec::new();
        for m in anc.into_messages() {
            if let tokio_seqpacket::ancillary::OwnedAncillaryMessage::FileDescriptors(got) = m {
                fds.extend(got);
            }
        }
        let Some(mut msg) = ipc::decode::<FromSpawner>(&buf[..n]) else {
            tracing::error!("undecodable message from the spawner");
            continue;
        };
        if fds.len() != msg.fds_expected() {
            tracing::error!(
                got = fds.len(),
                expected = msg.fds_expected(),
                "a spawner message came with the wrong number of fds"
            );
        }
        msg.attach(fds);
        let (job_id, last) = match &msg {
            FromSpawner::Running { job_id, .. }
            | FromSpawner::Egress { job_id, .. }
            | FromSpawner::Exported { job_id, .. }
            | FromSpawner::Stats { job_id, .. }
            | FromSpawner::MemoryHigh { job_id, .. } => (*job_id, false),
            FromSpawner::Finished { job_id, .. } => (*job_id, true),
            FromSpawner::Log { level, message } => {
                log_line(*level, message);
                continue;
            }
            _ => continue,
        };
        let mut routes = routes.lock().expect("routes lock");
        let tx = if last {
            routes.remove(&job_id)
        } else {
            routes.get(&job_id).cloned()
        };
        if let Some(tx) = tx {
            let _ = tx.send(msg);
        }
    }
    tracing::error!("spawner link closed");
    // Dropping every sender tells every waiting job that the spawner is gone.
    routes.lock().expect("routes lock").clear();
    gone.notify_one();
}

/// One of the spawner's own log lines (`FromSpawner::Log`), written by the daemon's
/// subscriber like every other line (JSON with `log_format = "json"`).
fn log_line(level: LogLevel, message: &str) {
    match level {
        LogLevel::Error => tracing::error!(target: "vivariumd::spawner", "{message}"),
        LogLevel::Warn => tracing::warn!(target: "vivariumd::spawner", "{message}"),
    }
}
