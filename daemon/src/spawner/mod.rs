//! The privileged spawner: the daemon's own binary re-executed before the tokio runtime
//! starts, single-threaded and blocking. It owns every privileged step: cgroups,
//! clone3 into new namespaces, uid/gid maps, kills, reaping, cgroup statistics.
//!
//! One `poll` loop serves the link to the server, every job's pidfd and status pipe,
//! and the deadlines (wall clock, and CPU time sampled from the job's cgroup).

mod log;
mod ns;
mod template;
mod zygote;

use crate::error_chain;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};
use nix::unistd::Pid;
use ns::{NsGuard, NsKind};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vivarium_proto::CgroupVersion;
use vivarium_sandbox::cgroup::{Cgroups, Home, JobCgroup, Limits, Version};
use vivarium_sandbox::init::{self, InitArgs, InitFds, Prepared};
use vivarium_sandbox::ipc::{
    self, FromSpawner, JobReport, KillCause, SpawnerConfig, ToSpawner, LINK_FD, MAX_LINK_FRAME,
};
use vivarium_sandbox::plan::{JobPlan, NetworkPlan, SANDBOX_GID, SANDBOX_UID};
use vivarium_sandbox::report::{decode_all, Failure, InitMsg};
use vivarium_sandbox::sys;

/// The wall-clock bound of a warm sandbox still waiting for its job (the server's
/// idle shrink normally ends it much sooner).
/// The fds a `Spawn` carries, in order: the code memfd, stdin, stdout, stderr, and
/// init's end of the outputs link (`vivarium_sandbox::outputs::collect_for_job`).
pub const JOB_FDS: usize = 5;

const WARM_UNARMED: Duration = Duration::from_secs(24 * 3600);

/// How often CPU usage is sampled for jobs with a CPU limit.
const CPU_SAMPLE: Duration = Duration::from_millis(50);
/// How often a watched session's memory is sampled against its guard (while a cell
/// runs): on cgroup v1, where no `memory.high` slows the allocation down, this is all
/// that stands between a fast allocator and the OOM killer.
const GUARD_SAMPLE: Duration = Duration::from_millis(2);

struct Job {
    id: u64,
    pid: Pid,
    pidfd: OwnedFd,
    status: std::fs::File,
    buf: Vec<u8>,
    cgroup: Option<JobCgroup>,
    /// The host id pair of its user namespace; `None` for a job forked from a zygote
    /// (which lives in the zygote's).
    slot: Option<u32>,
    started: Instant,
    deadline: Instant,
    cpu_limit_ns: u64,
    /// The cgroup's CPU usage when the job's code was delivered (a warm sandbox's
    /// interpreter start-up is not the job's).
    cpu_base_ns: u64,
    /// The sync pipe's write end, kept open while the job lives: init's check that
    /// the spawner is still there when it arms its parent-death signal.
    _lifeline: Option<std::fs::File>,
    report: JobReport,
    /// `Finished` was sent (at init's `Exited`); what is left is reaping and cleanup.
    reported: bool,
    /// A zygote (the server does not know it: nothing about it goes on the link).
    internal: bool,
    /// The id of the zygote this job was forked from.
    zygote: Option<u64>,
    /// `PlanKind::Install`'s export: the sandbox directory the server gets an fd to at `Running`.
    export: Option<PathBuf>,
    /// A session's memory guard (`ToSpawner::Guard`): bytes, whether it is watched now,
    /// and whether the current crossing was reported.
    guard: Guard,
}

#[derive(Debug, Default)]
struct Guard {
    bytes: u64,
    watch: bool,
    tripped: bool,
    /// cgroup v1, while watched: the job's memory held at `bytes` (`JobCgroup::hold_memory`):
    /// the eventfd the kernel signals when a task waits there, and the limit to restore.
    hold: Option<(OwnedFd, u64)>,
}

impl Guard {
    /// Put back a v1 hold's limit (a task waiting at the guard goes on).
    fn release(&mut self, cg: Option<&JobCgroup>, job_id: u64) {
        if let (Some((_, limit)), Some(cg)) = (self.hold.take(), cg) {
            if let Err(e) = cg.release_memory(limit) {
                log::log_warn!(
                    "job {job_id}: releasing its memory guard: {}",
                    error_chain(&e)
                );
            }
        }
    }
}

/// A watched job reached its memory guard: SIGINT to its interpreter at once (not over
/// the session's link, whose reader thread would first wait for the interpreter's lock),
/// the server told first (it asks for the job's stats over this same link before it
/// classifies the cell's end, so it knows why the cell was interrupted).
fn guard_reached(job: &mut Job, memory_bytes: u64, link: &OwnedFd) {
    job.guard.tripped = true;
    job.guard.release(job.cgroup.as_ref(), job.id);
    let _ = send_msg(
        link,
        &FromSpawner::MemoryHigh {
            job_id: job.id,
            memory_bytes,
        },
    );
    if let Err(e) = interrupt_payload(job.pid) {
        log::log_warn!("job {}: SIGINT at its memory guard: {e}", job.id);
    }
}

struct Spawner {
    link: OwnedFd,
    config: SpawnerConfig,
    /// `None` for a rootless daemon without a usable (delegated) cgroup subtree.
    cgroups: Option<Cgroups>,
    landlock_abi: u32,
    jobs: Vec<Job>,
    free_slots: Vec<u32>,
    zygotes: zygote::Zygotes,
    net: SpareNet,
    /// The spawner's own time namespace, to return its children's to after each clone
    /// (`None`: no time namespaces here, or a rootless daemon).
    time_home: Option<OwnedFd>,
    templates: template::Templates,
    /// Where link frames are received (`MAX_LINK_FRAME + 1` bytes).
    recv_buf: Vec<u8>,
    /// The last cold clone put its child in a time namespace of its own.
    timed: bool,
    /// Cold jobs waiting for an id slot: every slot is held by a job whose outcome went
    /// out but whose init is still exiting (its namespaces' teardown takes milliseconds,
    /// longer on a loaded machine). They start, in order, as slots come back.
    slot_wait: std::collections::VecDeque<(JobPlan, [OwnedFd; JOB_FDS])>,
}

/// A fresh, empty network namespace made ahead of the next job, off its critical path
/// (creating one is most of `clone3`'s cost: ~0.8 ms of loopback registration and sysctl
/// tables). The job's init is cloned into it (the spawner joins it just for the clone)
/// instead of into a `CLONE_NEWNET` made on the spot; each one serves exactly one job.
/// Its owner is the host's user namespace, not the job's: nothing in the job has any
/// capability over it (with `CLONE_NEWNET` the job's init had, and dropped them).
/// Where it cannot be made (a rootless daemon, no /proc), jobs get `CLONE_NEWNET` (and
/// init brings `lo` up when the plan wants it). There is one spare of each kind: `lo`
/// down (`NetworkPlan::None`) and `lo` up (`NetworkPlan::Loopback`), brought up here,
/// off the job's path, where only the spawner can change it.
struct SpareNet {
    /// The spawner's own network namespace, to return to.
    host: Option<OwnedFd>,
    /// Indexed by whether `lo` is up in it.
    spare: [Option<OwnedFd>; 2],
}

impl SpareNet {
    fn new(rootless: bool) -> SpareNet {
        let host = if rootless {
            None
        } else {
            open_ns("/proc/self/ns/net").ok()
        };
        SpareNet {
            host,
            spare: [None, None],
        }
    }

    /// Make the spares there are none of. A failure to make one only means the next job
    /// gets `CLONE_NEWNET`; a failure to return to the host's namespace ends the spawner.
    fn refill(&mut self) {
        for loopback in [false, true] {
            let Some(host) = &self.host else { return };
            if self.spare[usize::from(loopback)].is_some() {
                continue;
            }
            if nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).is_err() {
                self.host = None;
                return;
            }
            let back = NsGuard::away(host, NsKind::Net);
            let made = (|| {
                if loopback {
                    sys::loopback_up()?;
                }
                open_ns("/proc/self/ns/net")
            })();
            back.leave(None);
            match made {
                Ok(fd) => self.spare[usize::from(loopback)] = Some(fd),
                Err(_) => self.host = None,
            }
        }
    }

    /// The spare for a job whose plan wants `network`, if there is one.
    fn take(&mut self, network: NetworkPlan) -> Option<OwnedFd> {
        self.spare[usize::from(network.loopback())].take()
    }
}

impl SpareNet {
    /// A network namespace for a job with `NetworkPlan::Egress`, made on the spot: `lo` up
    /// and the egress proxy's listener bound on `127.0.0.1:EGRESS_PORT` in it (a socket
    /// belongs to the namespace it was made in, whoever later accepts on it). Owned by
    /// the host's user namespace like the spare, so nothing in the job can change it.
    fn egress(&self) -> std::io::Result<(OwnedFd, std::net::TcpListener)> {
        let Some(host) = &self.host else {
            return Err(std::io::Error::other(
                "an egress namespace needs a daemon that can return to its own network namespace (not rootless)",
            ));
        };
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
        let back = NsGuard::away(host, NsKind::Net);
        let made = (|| {
            sys::loopback_up()?;
            let listener = std::net::TcpListener::bind((
                std::net::Ipv4Addr::LOCALHOST,
                vivarium_sandbox::plan::EGRESS_PORT,
            ))?;
            Ok((open_ns("/proc/self/ns/net")?, listener))
        })();
        back.leave(None);
        made
    }

    /// S3 and S3e: join the network namespace `plan`'s init is to be cloned into, for
    /// the clone: for an egress plan one made now (its proxy listener is returned), else
    /// the spare of the plan's kind when the plan wants a new namespace the spawner may
    /// make. No guard: the clone makes the job's own (`CLONE_NEWNET`), or the plan has
    /// none; an egress plan fails instead (its only way out would be missing).
    fn join(
        &mut self,
        plan: &JobPlan,
    ) -> Result<(Option<NsGuard<'_>>, Option<std::net::TcpListener>), Failure> {
        let ns = &plan.layers.namespaces;
        let egress_plan = plan.network == NetworkPlan::Egress;
        let (target, listener) = if egress_plan {
            let (target, listener) = self.egress().map_err(|e| os_fail("egress-netns", e))?;
            (Some(target), Some(listener))
        } else if ns.net && ns.net_spare {
            (self.take(plan.network), None)
        } else {
            (None, None)
        };
        let (Some(target), Some(host)) = (target, self.host.as_ref()) else {
            return Ok((None, listener));
        };
        match NsGuard::enter(host, NsKind::Net, &target) {
            Ok(guard) => Ok((Some(guard), listener)),
            Err(e) if egress_plan => Err(os_fail("egress-setns", e.into())),
            Err(_) => Ok((None, listener)),
        }
    }
}

/// A setup step of the spawner's that failed.
fn fail(step: &str, detail: String) -> Failure {
    Failure {
        step: step.into(),
        detail,
        errno: 0,
    }
}

/// A setup step of the spawner's that failed with an OS error.
fn os_fail(step: &str, e: std::io::Error) -> Failure {
    Failure {
        step: step.into(),
        detail: e.to_string(),
        errno: e.raw_os_error().unwrap_or(0),
    }
}

/// Kill a cloned init that will not become a job, and reap it.
fn kill_and_reap(pid: Pid, pidfd: &OwnedFd) {
    let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
}

/// S2: a cold job's pipes, all close-on-exec: `sync` (one byte from the spawner once the
/// maps exist; its write end then stays open as init's lifeline), `status` (init's
/// messages, read without blocking) and, on cgroup v1, `attach` (where init gets its
/// cgroup's files, S5). Each pair is (init's end, the spawner's end).
struct Pipes {
    sync: (OwnedFd, OwnedFd),
    status: (OwnedFd, OwnedFd),
    attach: Option<(OwnedFd, OwnedFd)>,
}

impl Pipes {
    fn new(late: bool) -> Result<Pipes, Failure> {
        let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| os_fail("pipe", e.into()));
        let sync = pipe()?;
        let (status_r, status_w) = pipe()?;
        nix::fcntl::fcntl(&status_r, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .map_err(|e| os_fail("fcntl", e.into()))?;
        let attach = if late {
            let (a, b) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(|e| os_fail("socketpair", e.into()))?;
            Some((b, a))
        } else {
            None
        };
        Ok(Pipes {
            sync,
            status: (status_w, status_r),
            attach,
        })
    }
}

/// A cold job's cloned init, and the spawner's ends of its pipes.
struct Cloned {
    pid: Pid,
    pidfd: OwnedFd,
    status: std::fs::File,
    /// `sync`'s write end, kept open for the job's lifetime.
    lifeline: std::fs::File,
    /// cgroup v1: where init's cgroup goes (S5).
    attach: Option<OwnedFd>,
}

/// The line of a zygote's uid and gid maps that gives its forked jobs ids of their own:
/// `plan::ZYGOTE_JOB_IDS + s` inside to `id_base + 2 × slots + s` on the host, one per id
/// slot, past the cold jobs' pairs (`Config::validate` checks that the range fits). A
/// forked job holds its slot for as long as it runs, like a cold job: no two running
/// jobs share a host id, whichever zygote they come from.
fn zygote_id_map(config: &SpawnerConfig) -> String {
    let first = config.id_base + 2 * config.max_jobs;
    format!(
        "{} {first} {}\n",
        vivarium_sandbox::plan::ZYGOTE_JOB_IDS,
        config.max_jobs
    )
}

/// The failure an init that is gone reported on its status pipe, if any.
fn init_failure(status: &std::fs::File) -> Option<Failure> {
    let mut buf = Vec::new();
    // Init is reaped and the spawner holds no write end: this reads to EOF.
    let _ = (&*status).read_to_end(&mut buf);
    decode_all::<InitMsg>(&mut buf)
        .into_iter()
        .find_map(|msg| match msg {
            InitMsg::Failed(f) => Some(f),
            _ => None,
        })
}

fn open_ns(path: &str) -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open(path)?.into())
}

/// Entry point of `vivariumd __spawner`. The link socket is fd 3.
pub fn main() -> ! {
    // SAFETY: the daemon passes the link socket as fd 3 (`sys::spawn_with_fd3`), and
    // this is the first thing the spawner does: nothing else owns it yet.
    #[allow(unsafe_code)]
    let link = match unsafe { sys::adopt_inherited_fd(LINK_FD) } {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("vivariumd spawner: no link socket on fd {LINK_FD}: {e}");
            sys::exit_now(1);
        }
    };
    log::attach(link.as_fd());
    // Dispositions and mask as a fresh process has them, not as the daemon was started
    // with (ignored and blocked signals survive execve, and every job's init and
    // payload are clones of this process).
    if let Err(e) = sys::reset_signals() {
        log::log_error!("resetting signal dispositions: {e}");
        sys::exit_now(1);
    }
    // If the server dies, so do we (and with us, through their own death signal, the
    // jobs' inits).
    let _ = sys::set_parent_death_signal(libc::SIGKILL);
    // fds 0-2 must be taken (by /dev/null if the server had them closed): a job's
    // pipes or pidfds landing there would be kept open in its init.
    for fd in 0..3 {
        if !sys::fd_is_open(fd) {
            // open() takes the lowest free number: this one.
            let _ = std::fs::File::open("/dev/null").map(std::os::fd::IntoRawFd::into_raw_fd);
        }
    }
    let code = match run(link) {
        Ok(()) => 0,
        Err(e) => {
            log::log_error!("{e}");
            1
        }
    };
    sys::exit_now(code)
}

fn send_msg(link: &OwnedFd, msg: &FromSpawner) -> std::io::Result<()> {
    send(link.as_raw_fd(), &ipc::encode(msg), MsgFlags::empty())?;
    Ok(())
}

/// Receive one link frame and any fds attached to it into `buf` (`MAX_LINK_FRAME + 1`
/// bytes, kept across calls: a fresh one per frame was a 256 KiB mmap, zeroed and
/// faulted in, before every job's clone). `Ok(None)` on EOF.
fn recv_msg(link: &OwnedFd, buf: &mut [u8]) -> std::io::Result<Option<(ToSpawner, Vec<OwnedFd>)>> {
    let (len, fds) = sys::recv_with_fds(link.as_fd(), buf, MsgFlags::empty())?;
    if len == 0 {
        return Ok(None);
    }
    let Some(decoded) = ipc::decode::<ToSpawner>(&buf[..len.min(MAX_LINK_FRAME)]) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad link frame",
        ));
    };
    Ok(Some((decoded, fds)))
}

/// Why the spawner stopped (before `Ready`, its text is also the server's `InitFailed`).
#[derive(Debug, thiserror::Error)]
enum SpawnerError {
    #[error("link: {0}")]
    Link(#[source] std::io::Error),
    #[error("expected Init on the link")]
    NoInit,
    #[error("refusing a test-only weakening without {}=1", ipc::TEST_WEAKENED_ENV)]
    Weakened,
    #[error("{}: {source}", path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The cgroup tree (its own error's whole chain, as the server shows it).
    #[error("{}", error_chain(.0))]
    Cgroups(#[from] vivarium_sandbox::cgroup::CgroupError),
    #[error("poll: {0}")]
    Poll(#[source] nix::Error),
}

/// A setup failure, told to the server before the spawner exits.
fn refuse(link: &OwnedFd, e: SpawnerError) -> SpawnerError {
    let _ = send_msg(link, &FromSpawner::InitFailed(e.to_string()));
    e
}

fn run(link: OwnedFd) -> Result<(), SpawnerError> {
    let mut recv_buf = vec![0u8; MAX_LINK_FRAME + 1];
    let config = match recv_msg(&link, &mut recv_buf).map_err(SpawnerError::Link)? {
        Some((ToSpawner::Init(c), _)) => c,
        _ => return Err(SpawnerError::NoInit),
    };
    // Fail closed: a weakening only ever comes from the attack suite's test binary,
    // which also sets this variable (`vivariumd::policy::weaken`).
    if config.weakened && std::env::var(ipc::TEST_WEAKENED_ENV).as_deref() != Ok("1") {
        return Err(refuse(&link, SpawnerError::Weakened));
    }
    let setup_cgroups = || -> Result<(Cgroups, Home), SpawnerError> {
        let cgroups = Cgroups::detect(&config.cgroup_subtree)?;
        cgroups.setup()?;
        cgroups.reap_stale()?;
        let home = cgroups.enter_home()?;
        Ok((cgroups, home))
    };
    type Setup = (Option<Cgroups>, Option<Home>, Option<String>);
    let setup = || -> Result<Setup, SpawnerError> {
        let root = config.state_dir.join("root");
        std::fs::create_dir_all(&root)
            .map_err(|source| SpawnerError::StateDir { path: root, source })?;
        match setup_cgroups() {
            Ok((c, home)) => Ok((Some(c), Some(home), None)),
            // A root daemon must have its cgroup tree. A user's daemon runs without
            // one when it has no delegated subtree; profiles that need cgroup limits
            // are then disabled by the server, with this reason.
            Err(e) if config.rootless => Ok((None, None, Some(e.to_string()))),
            Err(e) => Err(e),
        }
    };
    let (cgroups, home, cgroup_problem) = setup().map_err(|e| refuse(&link, e))?;
    let landlock_abi = sys::landlock_abi();
    // Read once here, as the hierarchies were: a job cannot read the host's mounts.
    let cgroup_view = match cgroups.as_ref().map(Cgroups::job_view).transpose() {
        Ok(view) => view.unwrap_or_default(),
        Err(e) => return Err(refuse(&link, e.into())),
    };
    send_msg(
        &link,
        &FromSpawner::Ready {
            cgroup: cgroups.as_ref().map(|c| wire_version(c.version())),
            controllers: cgroups
                .iter()
                .flat_map(|c| c.controllers())
                .map(|c| format!("{c:?}").to_lowercase())
                .collect(),
            cgroup_problem,
            landlock_abi,
            cgroup_view,
        },
    )
    .map_err(SpawnerError::Link)?;
    let mut spawner = Spawner {
        link,
        free_slots: (0..config.max_jobs).rev().collect(),
        zygotes: zygote::Zygotes::new(),
        net: SpareNet::new(config.rootless),
        time_home: if config.rootless || !vivarium_sandbox::timens::available() {
            None
        } else {
            open_ns("/proc/self/ns/time").ok()
        },
        templates: template::Templates::new(!config.rootless, config.state_dir.join("root")),
        config,
        cgroups,
        landlock_abi,
        jobs: Vec::new(),
        recv_buf,
        timed: false,
        slot_wait: std::collections::VecDeque::new(),
    };
    let served = spawner.serve();
    // Every job is gone by now (after `Shutdown`; else killed here): the spawner removes
    // what it made, its cgroup subtree included (v1: after moving back to where it came
    // from, its home being one of the subtree's cgroups).
    spawner.shutdown();
    if let Some((cgroups, home)) = spawner.cgroups.as_ref().zip(home) {
        if let Err(e) = home.leave().and_then(|()| cgroups.remove_subtree()) {
            log::log_warn!("cgroup subtree not removed: {}", error_chain(&e));
        }
    }
    served
}

fn wire_version(v: Version) -> CgroupVersion {
    match v {
        Version::V1 => CgroupVersion::V1,
        Version::V2 => CgroupVersion::V2,
    }
}

impl Spawner {
    fn cgroup_version(&self) -> Option<CgroupVersion> {
        self.cgroups.as_ref().map(|c| wire_version(c.version()))
    }

    fn serve(&mut self) -> Result<(), SpawnerError> {
        loop {
            self.net.refill();
            let now = Instant::now();
            let mut timeout = self
                .jobs
                .iter()
                .map(|j| j.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            if let Some(t) = self.zygotes.next_idle_deadline() {
                timeout = timeout.min(t.saturating_duration_since(now));
            }
            if self
                .jobs
                .iter()
                .any(|j| j.cpu_limit_ns > 0 && j.cgroup.is_some())
            {
                timeout = timeout.min(CPU_SAMPLE);
            }
            let sampled = |j: &Job| {
                j.guard.watch && !j.guard.tripped && j.guard.hold.is_none() && j.cgroup.is_some()
            };
            if self.jobs.iter().any(sampled) {
                timeout = timeout.min(GUARD_SAMPLE);
            }
            let mut fds = vec![PollFd::new(self.link.as_fd(), PollFlags::POLLIN)];
            for job in &self.jobs {
                fds.push(PollFd::new(job.pidfd.as_fd(), PollFlags::POLLIN));
                fds.push(PollFd::new(job.status.as_fd(), PollFlags::POLLIN));
            }
            let zygote_ids: Vec<u64> = self.zygotes.list.iter().map(|z| z.job_id).collect();
            for z in &self.zygotes.list {
                fds.push(PollFd::new(z.ctl.as_fd(), PollFlags::POLLIN));
            }
            // Last, and only to wake up: a held guard's eventfd is read by
            // `enforce_deadlines`, which runs after every poll.
            for (efd, _) in self.jobs.iter().filter_map(|j| j.guard.hold.as_ref()) {
                fds.push(PollFd::new(efd.as_fd(), PollFlags::POLLIN));
            }
            let ms = timeout.as_millis().min(60_000) as u16;
            match poll(&mut fds, PollTimeout::from(ms.max(1))) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(SpawnerError::Poll(e)),
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            // Zygotes first (ready, or gone): they change no job index.
            let polled = self.jobs.len();
            for (k, id) in zygote_ids.iter().enumerate() {
                if ready[1 + 2 * polled + k] {
                    self.zygote_event(*id);
                }
            }
            // Then the link: a warm job's `Arm` was sent before its code, so it must be
            // applied before that job's end is handled. (A `Spawn` appends a job, which
            // this round's `ready` does not cover.)
            if ready[0] {
                match recv_msg(&self.link, &mut self.recv_buf) {
                    Ok(Some((msg, fds))) => {
                        if !self.handle(msg, fds) {
                            return Ok(());
                        }
                    }
                    Ok(None) => {
                        self.shutdown();
                        return Ok(());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
                    Err(e) => return Err(SpawnerError::Link(e)),
                }
            }

            for (i, job) in self.jobs.iter_mut().enumerate().take(polled) {
                if ready[2 + 2 * i] && drain_status(job, false, &self.link) && !job.reported {
                    // Every process of the job but its init is gone (init killed and
                    // reaped them): report now. Init's own exit tears down its
                    // namespaces, which costs milliseconds (an RCU grace period for
                    // the mount namespace) that the client need not wait for.
                    report_finished(job, &self.link);
                }
            }
            let mut exited: Vec<usize> = (0..polled).filter(|&i| ready[1 + 2 * i]).collect();
            exited.reverse();
            for i in exited {
                let job = self.jobs.swap_remove(i);
                self.finish(job);
            }
            self.start_waiting();
            self.enforce_deadlines();
            self.expire_fork_requests();
            self.retire_idle_zygotes();
        }
    }

    /// Returns false when the spawner should exit.
    fn handle(&mut self, msg: ToSpawner, fds: Vec<OwnedFd>) -> bool {
        match msg {
            ToSpawner::Spawn(plan) => {
                let id = plan.job_id;
                let result = self.spawn(*plan, fds);
                self.started(id, result.map(|()| None));
            }
            ToSpawner::Arm {
                job_id,
                wall_ms,
                cpu_ms,
            } => {
                if let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) {
                    let now = Instant::now();
                    job.started = now;
                    job.deadline = now + Duration::from_millis(wall_ms);
                    job.cpu_limit_ns = cpu_ms.saturating_mul(1_000_000);
                    job.cpu_base_ns = job
                        .cgroup
                        .as_ref()
                        .and_then(|cg| cg.cpu_usage_ns().ok())
                        .unwrap_or(0);
                }
            }
            ToSpawner::Kill { job_id, cause } => {
                if let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) {
                    kill(job, cause);
                } else if self.kill_asked(job_id, cause) {
                    // Its zygote has not answered yet: killed once it exists.
                } else if self.drop_pending(job_id) || self.drop_slot_wait(job_id) {
                    // Still waiting for its zygote or an id slot: it never started.
                    let report = JobReport {
                        killed: Some(cause),
                        cgroup: self.cgroup_version(),
                        ..Default::default()
                    };
                    let _ = send_msg(
                        &self.link,
                        &FromSpawner::Finished {
                            job_id,
                            report: Box::new(report),
                        },
                    );
                }
            }
            ToSpawner::Shutdown => {
                self.shutdown();
                return false;
            }
            ToSpawner::ZygotesStale => self.zygotes_stale(),
            ToSpawner::Stats { job_id } => {
                let stats = self
                    .jobs
                    .iter()
                    .find(|j| j.id == job_id)
                    .map(live_stats)
                    .unwrap_or_default();
                let _ = send_msg(&self.link, &FromSpawner::Stats { job_id, stats });
            }
            ToSpawner::Guard {
                job_id,
                bytes,
                watch,
            } => {
                if let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) {
                    job.guard.release(job.cgroup.as_ref(), job_id);
                    let mut hold = None;
                    if let Some(cg) = &job.cgroup {
                        if bytes > 0 && job.guard.bytes != bytes {
                            if let Err(e) = cg.set_memory_high(Some(bytes)) {
                                log::log_warn!("job {job_id}: memory.high: {}", error_chain(&e));
                            }
                        }
                        if watch && bytes > 0 {
                            // v1: held at the guard by the kernel (v2 has memory.high,
                            // and the sampling below); if that fails, sampling alone.
                            hold = cg.hold_memory(bytes).unwrap_or_else(|e| {
                                log::log_warn!(
                                    "job {job_id}: holding memory at its guard: {}; sampling only",
                                    error_chain(&e)
                                );
                                None
                            });
                        }
                    }
                    job.guard = Guard {
                        bytes,
                        watch: watch && bytes > 0,
                        tripped: false,
                        hold,
                    };
                }
            }
            ToSpawner::Init(_) => {}
        }
        true
    }

    /// A job's start is over: keep it (`Some`), or report its failure to the server.
    fn started(&mut self, id: u64, result: Result<Option<Job>, Failure>) {
        match result {
            Ok(Some(job)) => self.jobs.push(job),
            Ok(None) => {}
            Err(failure) => {
                let report = JobReport {
                    failure: Some(failure),
                    cgroup: self.cgroup_version(),
                    ..Default::default()
                };
                let _ = send_msg(
                    &self.link,
                    &FromSpawner::Finished {
                        job_id: id,
                        report: Box::new(report),
                    },
                );
            }
        }
    }

    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for job in &mut self.jobs {
            // (A zygote has no deadline: it ends idle, replaced or broken, see zygote.rs.)
            if job.report.killed.is_some() || job.reported || job.internal {
                continue;
            }
            if now >= job.deadline {
                kill(job, KillCause::Timeout);
                continue;
            }
            if job.guard.watch && !job.guard.tripped {
                let now = job.cgroup.as_ref().map(|cg| cg.memory_bytes().unwrap_or(0));
                let held = job.guard.hold.as_ref().is_some_and(|(efd, _)| {
                    let mut count = [0u8; 8];
                    nix::unistd::read(efd, &mut count).is_ok()
                });
                if let Some(now) = now.filter(|n| held || *n >= job.guard.bytes) {
                    guard_reached(job, now, &self.link);
                }
            }
            if job.cpu_limit_ns > 0 {
                if let Some(cg) = &job.cgroup {
                    let used = cg.cpu_usage_ns().unwrap_or(0);
                    if used.saturating_sub(job.cpu_base_ns) >= job.cpu_limit_ns {
                        kill(job, KillCause::CpuLimit);
                    }
                }
            }
        }
    }

    fn shutdown(&mut self) {
        for (plan, _) in std::mem::take(&mut self.slot_wait) {
            let report = JobReport {
                killed: Some(KillCause::Shutdown),
                cgroup: self.cgroup_version(),
                ..Default::default()
            };
            let _ = send_msg(
                &self.link,
                &FromSpawner::Finished {
                    job_id: plan.job_id,
                    report: Box::new(report),
                },
            );
        }
        for job in &mut self.jobs {
            kill(job, KillCause::Shutdown);
        }
        while let Some(job) = self.jobs.pop() {
            self.finish(job);
        }
    }

    /// Build and start one job. On error nothing of the job is left behind.
    fn spawn(&mut self, mut plan: JobPlan, fds: Vec<OwnedFd>) -> Result<(), Failure> {
        // Fail closed: a test-only plan only from a server started for one (whose
        // spawner checked ipc::TEST_WEAKENED_ENV at Init).
        if plan.layers.weakened && !self.config.weakened {
            return Err(Failure {
                step: "weakened".into(),
                detail: "refusing a test-only weakened plan: the daemon was not started for one"
                    .into(),
                errno: 0,
            });
        }
        let fds = match self.route(&mut plan, fds)? {
            zygote::Route::Cold(fds) => fds,
            zygote::Route::Deferred => return Ok(()),
        };
        if let Some(job) = self.start_cold(plan, fds)? {
            self.jobs.push(job);
        }
        Ok(())
    }

    /// A cold start, or (`None`) a place in the queue for an id slot when none is free.
    fn start_cold(&mut self, plan: JobPlan, fds: Vec<OwnedFd>) -> Result<Option<Job>, Failure> {
        let stdio: [OwnedFd; JOB_FDS] = fds.try_into().map_err(|_| Failure {
            step: "link".into(),
            detail: format!("spawn needs exactly {JOB_FDS} fds"),
            errno: 0,
        })?;
        if self.free_slots.is_empty() {
            // Not a failure: the server admits no more jobs than there are slots for
            // running ones, so a slot comes back as soon as an exiting init is gone.
            self.slot_wait.push_back((plan, stdio));
            return Ok(None);
        }
        self.build_job(plan, stdio, Vec::new()).map(Some)
    }

    /// Start the jobs that waited for an id slot, as far as slots are free.
    fn start_waiting(&mut self) {
        while !self.free_slots.is_empty() {
            let Some((plan, stdio)) = self.slot_wait.pop_front() else {
                break;
            };
            let id = plan.job_id;
            let result = self.build_job(plan, stdio, Vec::new());
            self.started(id, result.map(Some));
        }
    }

    /// Forget a job that is still waiting for an id slot; whether it was.
    fn drop_slot_wait(&mut self, job_id: u64) -> bool {
        let at = self.slot_wait.iter().position(|(p, _)| p.job_id == job_id);
        at.map(|k| self.slot_wait.remove(k)).is_some()
    }

    /// A cold start: the spawner's steps of the setup order, in turn (S1 to S5 of the
    /// table in `vivarium_sandbox`'s crate doc; their reasons in docs/ARCHITECTURE.md,
    /// "Setup order"); `extra` fds go to the payload as fds 3, 4, ...
    /// (a zygote's). On error nothing of the job is left behind.
    fn build_job(
        &mut self,
        plan: JobPlan,
        stdio: [OwnedFd; JOB_FDS],
        extra: Vec<OwnedFd>,
    ) -> Result<Job, Failure> {
        let prepared = Prepared::new(&plan).map_err(|e| fail("prepare", e.to_string()))?;
        // S1: an id slot (the host ids of the job's user namespace).
        let slot = self
            .free_slots
            .pop()
            .ok_or_else(|| fail("slot", "no free id slot".into()))?;
        match self.start_in_slot(&plan, &prepared, slot, stdio, extra) {
            Ok((init, cgroup)) => Ok(self.new_job(
                &plan,
                init.pid,
                init.pidfd,
                init.status,
                cgroup,
                Some(slot),
                Some(init.lifeline),
            )),
            Err(f) => {
                self.free_slots.push(slot);
                Err(f)
            }
        }
    }

    /// [`Self::build_job`] once the job holds id slot `slot` (the caller gives it back if
    /// this fails): the cgroup (S1 on v2, S5 on v1) around [`Self::start_init`].
    fn start_in_slot(
        &mut self,
        plan: &JobPlan,
        prepared: &Prepared,
        slot: u32,
        stdio: [OwnedFd; JOB_FDS],
        extra: Vec<OwnedFd>,
    ) -> Result<(Cloned, Option<JobCgroup>), Failure> {
        let limits = Limits {
            memory_bytes: plan.cgroup.memory_bytes,
            pids: plan.cgroup.pids,
            cpu_quota_us: plan.cgroup.cpu_quota_us,
            cpu_period_us: plan.cgroup.cpu_period_us,
        };
        let name = if plan.kind.is_zygote() {
            format!("zygote-{}", u64::MAX - plan.job_id)
        } else {
            format!("job-{}", plan.job_id)
        };
        // On cgroup v1 the job's cgroup is made after the clone, while init builds the
        // root on the other CPU, and init moves itself in (see `late_cgroup`); on v2 it
        // is made first and init is cloned straight into it (`CLONE_INTO_CGROUP`).
        let late = self
            .cgroups
            .as_ref()
            .is_some_and(|cg| cg.version() == Version::V1);
        // S1 (v2): the job's cgroup with its limits, in force before the job's first
        // instruction.
        let cgroup = (self.cgroups.as_ref())
            .filter(|_| !late)
            .map(|cg| cg.create_job(&name, &limits))
            .transpose()
            .map_err(|e| fail("cgroup", error_chain(&e)))?;
        // S2 to S4.
        let init = match self.start_init(plan, prepared, cgroup.as_ref(), slot, stdio, extra, late)
        {
            Ok(init) => init,
            Err(f) => {
                if let Some(cg) = cgroup {
                    let _ = cg.kill_all();
                    let _ = cg.remove();
                }
                return Err(f);
            }
        };
        // S5 (v1): the job's cgroup, made while init builds the root; init moves itself in.
        let cgroup = match &init.attach {
            None => cgroup,
            Some(sock) => match self.late_cgroup(&name, &limits, sock) {
                Ok(cg) => Some(cg),
                Err(f) => {
                    kill_and_reap(init.pid, &init.pidfd);
                    // Init may have failed first (a bind refused at once): its report is
                    // the cause; the hand-off only found it gone.
                    return Err(init_failure(&init.status).unwrap_or(f));
                }
            },
        };
        Ok((init, cgroup))
    }

    /// S2 to S4: the job's pipes, its init cloned into the job's namespaces (and, on v2,
    /// its cgroup), an egress plan's listener handed to the server, the id maps written
    /// and the go given. `late`: the cgroup comes after (cgroup v1, S5).
    #[allow(clippy::too_many_arguments)]
    fn start_init(
        &mut self,
        plan: &JobPlan,
        prepared: &Prepared,
        cgroup: Option<&JobCgroup>,
        slot: u32,
        stdio: [OwnedFd; JOB_FDS],
        extra: Vec<OwnedFd>,
        late: bool,
    ) -> Result<Cloned, Failure> {
        // S2
        let pipes = Pipes::new(late)?;
        // S3, S3e, S3t, S3a
        let (init, egress) = self.clone_init(plan, prepared, cgroup, pipes, stdio, extra, late)?;
        // S3e: before any other message about the job, so the proxy is up by the time
        // the payload can connect (the listener queues connections until then anyway).
        if let Some(listener) = egress {
            if let Err(e) = self.send_egress(plan.job_id, &listener) {
                kill_and_reap(init.pid, &init.pidfd);
                return Err(os_fail("egress-listener", e));
            }
        }
        // S4
        if let Err(e) = self.write_id_maps(init.pid, slot, plan.kind.is_zygote(), &init.lifeline) {
            kill_and_reap(init.pid, &init.pidfd);
            return Err(os_fail("uid_map", e));
        }
        Ok(init)
    }

    /// cgroup v1, after the clone: make the job's cgroup (directories and limits) while
    /// init builds the root, then hand init the `tasks` files to write `0` to, opened
    /// here (the kernel checks the opener's credentials), with `ok <name>` on `sock`.
    /// Init moves itself in before it writes the script or forks the payload, checks
    /// where it is, and only then makes its cgroup namespace. On failure init gets
    /// `error` and the caller kills it.
    fn late_cgroup(
        &self,
        name: &str,
        limits: &Limits,
        sock: &OwnedFd,
    ) -> Result<JobCgroup, Failure> {
        let Some(cgroups) = self.cgroups.as_ref() else {
            let _ = sys::send_with_fds(sock.as_fd(), b"error", &[]);
            return Err(Failure {
                step: "cgroup".into(),
                detail: "no cgroup hierarchy".into(),
                errno: 0,
            });
        };
        let made = cgroups.create_job(name, limits).and_then(|cg| {
            let files = cg.attach_files()?;
            Ok((cg, files))
        });
        let (cgroup, files) = match made {
            Ok(made) => made,
            Err(e) => {
                let _ = sys::send_with_fds(sock.as_fd(), b"error", &[]);
                return Err(Failure {
                    step: "cgroup".into(),
                    detail: error_chain(&e),
                    errno: 0,
                });
            }
        };
        let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
        if let Err(e) = sys::send_with_fds(sock.as_fd(), format!("ok {name}").as_bytes(), &fds) {
            let _ = cgroup.remove();
            return Err(Failure {
                step: "cgroup-attach".into(),
                detail: format!("handing init its cgroup files: {e}"),
                errno: e.raw_os_error().unwrap_or(0),
            });
        }
        Ok(cgroup)
    }

    #[allow(clippy::too_many_arguments)]
    fn new_job(
        &self,
        plan: &JobPlan,
        pid: Pid,
        pidfd: OwnedFd,
        status: std::fs::File,
        mut cgroup: Option<JobCgroup>,
        slot: Option<u32>,
        lifeline: Option<std::fs::File>,
    ) -> Job {
        // While the job's init sets up on the other CPU: the end of the job then reads
        // its counters without opening them.
        if let Some(cg) = cgroup.as_mut() {
            cg.open_counters();
        }
        let now = Instant::now();
        // A warm sandbox has no deadline until its job is delivered (`Arm`); the
        // server kills unused ones when its pool shrinks.
        let (wall, cpu_limit_ns) = if plan.kind.waits_for_arm() {
            (WARM_UNARMED, 0)
        } else {
            (
                Duration::from_millis(plan.wall_ms),
                plan.cpu_ms.saturating_mul(1_000_000),
            )
        };
        Job {
            id: plan.job_id,
            pid,
            pidfd,
            status,
            buf: Vec::new(),
            cgroup,
            slot,
            started: now,
            deadline: now + wall,
            cpu_limit_ns,
            cpu_base_ns: 0,
            _lifeline: lifeline,
            report: JobReport {
                cgroup: self.cgroup_version(),
                time_namespace: self.timed,
                ..Default::default()
            },
            reported: false,
            internal: false,
            zygote: None,
            export: plan.kind.export().cloned(),
            guard: Guard::default(),
        }
    }

    /// S3: clone the job's init into its namespaces, the spawner in the job's network
    /// namespace (S3/S3e), its children's time namespace (S3t) and its mount template
    /// (S3a) just around the `clone3`, each through an [`NsGuard`]. Returns the init and
    /// an egress plan's listener.
    #[allow(clippy::too_many_arguments)]
    fn clone_init(
        &mut self,
        plan: &JobPlan,
        prepared: &Prepared,
        cgroup: Option<&JobCgroup>,
        pipes: Pipes,
        [code, stdin, stdout, stderr, outputs]: [OwnedFd; JOB_FDS],
        extra: Vec<OwnedFd>,
        late: bool,
    ) -> Result<(Cloned, Option<std::net::TcpListener>), Failure> {
        let Pipes {
            sync: (sync_r, sync_w),
            status: (status_w, status_r),
            attach,
        } = pipes;
        let (attach_child, attach_parent) = attach.unzip();
        // The spawner never leaves its own cgroup: on v2 the child is cloned into the
        // job's (`CLONE_INTO_CGROUP`), on v1 it moves itself in later (`late`).
        debug_assert!(cgroup.is_none_or(|c| c.dir_fd().is_some()));
        // The job's network namespace: for an egress plan one made now (`lo` up, the
        // proxy's listener in it), else the spare when the job wants a new one (see
        // SpareNet).
        let (net, egress) = self.net.join(plan)?;
        let flags = ns::clone_flags(&plan.layers.namespaces, late, net.is_some());
        // A time namespace of its own for the job, its clocks near zero (S3t, see
        // `vivarium_sandbox::timens`): made for the spawner's children just before the
        // clone, so init is born in it; the spawner's own clocks never change.
        let time = match (&self.time_home, plan.layers.namespaces.time) {
            (Some(home), true) => {
                let made = vivarium_sandbox::timens::unshare_near_zero();
                let guard = NsGuard::away(home, NsKind::Time);
                match made {
                    Ok(()) => Some(guard),
                    Err(_) => {
                        guard.leave(None);
                        None
                    }
                }
            }
            _ => None,
        };
        self.timed = time.is_some();
        // The job's mount namespace as a copy of its plan's template (see `template`).
        let template = match plan.kind.is_zygote() {
            true => None,
            false => self.templates.enter(plan),
        };
        let on_template = template.is_some();
        // SAFETY: the spawner is single-threaded (its own process, one poll loop, no
        // threads started), so the child's copy holds no lock another thread took.
        #[allow(unsafe_code)]
        let forked = unsafe { sys::clone3(flags, cgroup.and_then(|c| c.dir_fd())) };
        let (pid, pidfd) = match forked {
            // (It never returns: the guards stay, it was born in their namespaces.)
            Ok(sys::Forked::Child) => init::run(InitArgs {
                plan,
                prepared,
                new_root: self.config.state_dir.join("root"),
                on_template,
                kernel_landlock_abi: self.landlock_abi,
                rootless: self.config.rootless,
                fds: InitFds {
                    sync: sync_r,
                    status: status_w,
                    code,
                    stdin,
                    stdout,
                    stderr,
                    outputs,
                    extra,
                    attach: attach_child,
                },
            }),
            Ok(sys::Forked::Parent { pid, pidfd }) => (Pid::from_raw(pid), pidfd),
            // (The guards take the spawner back as they drop.)
            Err(e) => return Err(os_fail("clone3", e)),
        };
        // Back to the spawner's own namespaces: else every later job would share the
        // job's, so the child is killed and the spawner exits (fail closed).
        for guard in [time, template, net].into_iter().flatten() {
            guard.leave(Some(&pidfd));
        }
        drop((
            sync_r,
            status_w,
            code,
            stdin,
            stdout,
            stderr,
            extra,
            attach_child,
        ));
        let init = Cloned {
            pid,
            pidfd,
            status: std::fs::File::from(status_r),
            lifeline: std::fs::File::from(sync_w),
            attach: attach_parent,
        };
        Ok((init, egress))
    }

    /// S3e: the egress proxy's listener, made in the job's namespace, to the server.
    fn send_egress(&self, job_id: u64, listener: &std::net::TcpListener) -> std::io::Result<()> {
        let msg = ipc::encode(&FromSpawner::Egress {
            job_id,
            listener: Default::default(),
        });
        sys::send_with_fds(self.link.as_fd(), &msg, &[listener.as_fd()])
    }

    /// S4: the uid and gid maps of the job's user namespace (`zygote`: with its forked
    /// jobs' line), then the go on `lifeline` (the sync pipe).
    fn write_id_maps(
        &self,
        pid: Pid,
        slot: u32,
        zygote: bool,
        mut lifeline: &std::fs::File,
    ) -> std::io::Result<()> {
        let (uid_map, gid_map) = if self.config.rootless {
            // An unprivileged writer may map only its own ids, one line each, and only
            // after giving up setgroups in the new namespace.
            std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
            let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
            (
                format!("{SANDBOX_UID} {uid} 1\n"),
                format!("{SANDBOX_GID} {gid} 1\n"),
            )
        } else {
            // Per job, its own pair of host ids: jobs never share a host uid. A zygote's
            // namespace also maps the ids its forked jobs run as.
            let host = self.config.id_base + 2 * slot;
            let jobs = if zygote {
                zygote_id_map(&self.config)
            } else {
                String::new()
            };
            (
                format!("0 {host} 1\n{SANDBOX_UID} {} 1\n{jobs}", host + 1),
                format!("0 {host} 1\n{SANDBOX_GID} {} 1\n{jobs}", host + 1),
            )
        };
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
        lifeline.write_all(&[1])
    }

    /// The job's init has exited: reap it, report if that was not done yet, remove the
    /// cgroup, free the id slot.
    fn finish(&mut self, mut job: Job) {
        // (A zygote's child is the zygote's to reap: its pid may name anyone later.)
        if job.zygote.is_none() {
            let _ = nix::sys::wait::waitpid(job.pid, None);
        }
        drain_status(&mut job, true, &self.link);
        if !job.reported {
            report_finished(&mut job, &self.link);
        }
        self.zygote_job_done(&job);
        if let Some(cg) = job.cgroup.take() {
            // The pid namespace is gone with its init; the kill is belt and braces
            // (a sweep only of a cgroup the kernel will not remove).
            if let Err(e) = cg.kill_and_remove() {
                log::log_warn!("job {}: cgroup removal: {}", job.id, error_chain(&e));
            }
        }
        if let Some(slot) = job.slot {
            self.free_slots.push(slot);
        }
    }
}

/// Complete the job's report with its cgroup's counters and send `Finished`.
fn report_finished(job: &mut Job, link: &OwnedFd) {
    job.reported = true;
    job.report.wall_ms = job.started.elapsed().as_millis() as u64;
    if job.internal {
        return; // a zygote: the server does not know it
    }
    if let Some(Ok(stats)) = job.cgroup.as_ref().map(|cg| cg.stats()) {
        job.report.cpu_ms = stats.cpu_usage_ns.saturating_sub(job.cpu_base_ns) / 1_000_000;
        job.report.peak_memory_bytes = stats.peak_memory_bytes;
        job.report.oom_kills = stats.oom_kills;
        job.report.pids_limit_hits = stats.pids_limit_hits;
        job.report.memory_limit_hits = stats.memory_limit_hits;
    }
    let _ = send_msg(
        link,
        &FromSpawner::Finished {
            job_id: job.id,
            report: Box::new(job.report.clone()),
        },
    );
}

/// SIGINT to a job's payload (init's only child): found through init's `children`, then
/// held by a pidfd, which is used only once the process it names is seen to be init's
/// child (a pid reused between the read and the open would be another process's).
fn interrupt_payload(init: Pid) -> std::io::Result<()> {
    let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))?;
    let pid: libc::pid_t = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| std::io::Error::other("init has no child"))?;
    let pidfd = sys::pidfd_open(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let parent = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse::<libc::pid_t>().ok());
    if parent != Some(init.as_raw()) {
        return Err(std::io::Error::other("the payload is gone"));
    }
    sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGINT)
}

/// What a live job uses now (`ToSpawner::Stats`).
fn live_stats(job: &Job) -> vivarium_sandbox::ipc::LiveStats {
    let Some(cg) = &job.cgroup else {
        return Default::default();
    };
    let stats = cg.stats().unwrap_or_default();
    vivarium_sandbox::ipc::LiveStats {
        cpu_ms: stats.cpu_usage_ns.saturating_sub(job.cpu_base_ns) / 1_000_000,
        memory_bytes: cg.memory_bytes().unwrap_or(0),
        peak_memory_bytes: stats.peak_memory_bytes,
        oom_kills: stats.oom_kills,
    }
}

fn kill(job: &mut Job, cause: KillCause) {
    if job.report.killed.is_none() {
        job.report.killed = Some(cause);
    }
    // SIGKILL to the job's init tears down its whole pid namespace.
    let _ = sys::pidfd_send_signal(job.pidfd.as_fd(), libc::SIGKILL);
}

/// Hand the server an open fd to `path` inside the job's sandbox, opened through init's
/// root (`/proc/<init>/root`). That takes CAP_SYS_PTRACE: init changed its ids in its
/// user namespace, which made it non-dumpable, and a non-dumpable process's root is open
/// only to a tracer-capable caller (the unit's bounding set has it for this alone).
/// Taken once the payload runs: every mount of the sandbox is in place, and nothing in
/// the sandbox can move them any more.
fn export_dir(job_id: u64, pid: Pid, path: &std::path::Path, link: &OwnedFd) {
    use std::os::unix::fs::OpenOptionsExt;
    let inside = path.strip_prefix("/").unwrap_or(path);
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(PathBuf::from(format!("/proc/{pid}/root")).join(inside));
    let msg = |error| {
        ipc::encode(&FromSpawner::Exported {
            job_id,
            error,
            dir: Default::default(),
        })
    };
    let sent = match opened {
        Ok(dir) => sys::send_with_fds(link.as_fd(), &msg(None), &[dir.as_fd()]),
        Err(e) => sys::send_with_fds(
            link.as_fd(),
            &msg(Some(format!("opening {}: {e}", path.display()))),
            &[],
        ),
    };
    if let Err(e) = sent {
        log::log_warn!("job {job_id}: sending its exported directory: {e}");
    }
}

/// Read what init has written (`to_eof` after init has exited). Returns whether init
/// reported the payload's end.
fn drain_status(job: &mut Job, to_eof: bool, link: &OwnedFd) -> bool {
    let mut exited = false;
    let mut chunk = [0u8; 4096];
    loop {
        match job.status.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => job.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        if !to_eof && job.buf.len() > 64 * 1024 {
            break;
        }
    }
    for msg in decode_all::<InitMsg>(&mut job.buf) {
        match msg {
            InitMsg::Running { landlock } if !job.internal => {
                job.report.landlock = Some(landlock);
                if let Some(path) = &job.export {
                    export_dir(job.id, job.pid, path, link);
                }
                let _ = send_msg(
                    link,
                    &FromSpawner::Running {
                        job_id: job.id,
                        landlock,
                    },
                );
            }
            InitMsg::Running { .. } => {}
            InitMsg::Failed(f) if job.internal => {
                log::log_warn!("a zygote failed at {}: {}", f.step, f.detail);
            }
            InitMsg::Failed(f) => job.report.failure = Some(f),
            InitMsg::Exited { status, disk_full } => {
                job.report.exit = Some(status);
                job.report.disk_full = disk_full;
                exited = true;
            }
        }
    }
    exited
}

/// Where the spawner lives by default.
pub fn default_state_dir(root: bool) -> PathBuf {
    if root {
        PathBuf::from("/run/vivarium")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", nix::unistd::geteuid())))
            .join("vivarium")
    }
}
