//! The spawner's zygotes (see `vivarium_sandbox::zygote`): started on demand from the
//! first warm plan that asks for one, identified by that plan's content (so a reloaded
//! profile gets a new zygote and the old one idles out), asked over a control socket to
//! fork a job's sandbox, ended after `idle_secs` without a job.

use super::{Job, Spawner};
use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vivarium_sandbox::cgroup::JobCgroup;
use vivarium_sandbox::ipc::{self, KillCause};
use vivarium_sandbox::plan::{JobPlan, PlanKind};
use vivarium_sandbox::report::Failure;
use vivarium_sandbox::zygote as zy;

/// At most this many zygotes at once (each holds an interpreter and its preloads).
const MAX_ZYGOTES: usize = 4;
/// A zygote that failed is not started again for its plan before this.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long a zygote may take to answer a fork request (it answers in about a
/// millisecond). The spawner does not wait for the answer: it goes on serving other
/// jobs, and takes the answer from its poll loop.
const FORK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a zygote may take to start and preload before it counts as failed (its
/// waiting requests then start cold).
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) struct Zygote {
    key: u64,
    profile: String,
    /// Replaced by a newer one for its profile: ends when its last job has.
    replaced: bool,
    /// Its own entry in `Spawner::jobs` (an internal job id).
    pub(super) job_id: u64,
    pub(super) ctl: OwnedFd,
    pub(super) ready: bool,
    generation: u64,
    children: u32,
    started: Instant,
    last_used: Instant,
    idle: Duration,
    /// Requests that came while it was starting: forked when it is ready, started cold
    /// if it fails instead.
    pending: Vec<(JobPlan, Vec<OwnedFd>)>,
    /// Fork requests sent and not answered yet, oldest first (it answers in order).
    asked: std::collections::VecDeque<Asked>,
}

/// A fork request sent to a zygote: what the job needs once the answer comes.
struct Asked {
    plan: JobPlan,
    cgroup: JobCgroup,
    status: OwnedFd,
    /// Seccomp filters the job will have (the zygote's and its own), for the report.
    filters: usize,
    sent: Instant,
    /// Killed (cancelled, say) before the answer came: killed as soon as it exists.
    killed: Option<KillCause>,
}

/// Where a warm plan's sandbox comes from.
pub(super) enum Route {
    /// No zygote for it: a cold start.
    Cold(Vec<OwnedFd>),
    /// Asked of its ready zygote, or waiting for its zygote to start: the job is kept
    /// (or its failure reported) when the zygote answers.
    Deferred,
}

pub(super) struct Zygotes {
    /// The zygote library and its jobs' init program; `None`: not installed, every warm
    /// plan starts cold.
    library: Option<(PathBuf, PathBuf)>,
    pub(super) list: Vec<Zygote>,
    failed: HashMap<u64, Instant>,
    next_id: u64,
}

impl Zygotes {
    pub(super) fn new() -> Self {
        let exe = std::env::current_exe().ok();
        let found = |name| exe.as_ref().and_then(|exe| zy::find_library(exe, name));
        let library = match (found(zy::LIBRARY_NAME), found(zy::INIT_NAME)) {
            (Some(library), Some(init)) => Some((library, init)),
            (library, _) => {
                super::log::log_warn!(
                    "{} not found next to the daemon's binary: warm profiles with zygote = true start their sandboxes cold",
                    if library.is_none() { zy::LIBRARY_NAME } else { zy::INIT_NAME }
                );
                None
            }
        };
        Zygotes {
            library,
            list: Vec::new(),
            failed: HashMap::new(),
            // Internal ids count down from the top; the server's count up from 1.
            next_id: u64::MAX,
        }
    }

    /// When the next idle zygote is due to end, a starting one to time out, or a fork
    /// request to have been answered.
    pub(super) fn next_idle_deadline(&self) -> Option<Instant> {
        let answers = self
            .list
            .iter()
            .filter_map(|z| z.asked.front().map(|a| a.sent + FORK_TIMEOUT));
        self.list
            .iter()
            .filter_map(|z| match (z.ready, z.children) {
                (false, _) => Some(z.started + START_TIMEOUT),
                (true, 0) if z.asked.is_empty() => Some(z.last_used + z.idle),
                _ => None,
            })
            .chain(answers)
            .min()
    }
}

fn failure(step: &str, detail: impl Into<String>) -> Failure {
    Failure {
        step: step.into(),
        detail: detail.into(),
        errno: 0,
    }
}

/// The pid (in our pid namespace) of the process a pidfd refers to.
fn pid_of(pidfd: &OwnedFd) -> Option<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&p| p > 0)
}

impl Spawner {
    /// A warm plan that may come from a zygote: fork it there if this plan's zygote is
    /// ready, or let it wait for a zygote that is starting (started now if need be).
    /// A forked request consumes the plan's seccomp and zygote parts (see `fork_from`).
    pub(super) fn route(
        &mut self,
        plan: &mut JobPlan,
        fds: Vec<OwnedFd>,
    ) -> Result<Route, Failure> {
        let Some(zplan) = plan.kind.zygote() else {
            return Ok(Route::Cold(fds));
        };
        let idle_secs = zplan.idle_secs;
        let profile = zplan.profile.clone();
        let generation = zplan.generation;
        // A zygote-forked job's setup is the full sandbox's: a test-only plan starts cold
        // (the server's weakening takes its zygote part off anyway); rootless and
        // cgroup-less daemons have no zygotes.
        if self.zygotes.library.is_none()
            || plan.layers.weakened
            || self.config.rootless
            || self.cgroups.is_none()
        {
            return Ok(Route::Cold(fds));
        }
        // A forked job holds an id slot as a cold one does (its own host ids, see
        // `plan::ZYGOTE_JOB_IDS`); with none free it waits for one on the cold path.
        if self.free_slots.is_empty() {
            return Ok(Route::Cold(fds));
        }
        let key = zplan.key;
        let i = match (self.zygotes.list.iter()).position(|z| z.key == key && !z.replaced) {
            Some(i) => i,
            None => match self.start_zygote(plan, key, (profile, generation), idle_secs) {
                Ok(Some(i)) => i,
                Ok(None) => return Ok(Route::Cold(fds)),
                Err(f) => {
                    super::log::log_warn!(
                        "a zygote for job {}: {}: {}",
                        plan.job_id,
                        f.step,
                        f.detail
                    );
                    self.zygotes.failed.insert(key, Instant::now());
                    return Ok(Route::Cold(fds));
                }
            },
        };
        if !self.zygotes.list[i].ready {
            self.zygotes.list[i].pending.push((plan.clone(), fds));
            return Ok(Route::Deferred);
        }
        self.fork_request(i, plan, fds).map(|()| Route::Deferred)
    }

    fn fork_request(
        &mut self,
        i: usize,
        plan: &mut JobPlan,
        fds: Vec<OwnedFd>,
    ) -> Result<(), Failure> {
        let [_code, stdin, stdout, stderr, outputs]: [OwnedFd; super::JOB_FDS] = fds
            .try_into()
            .map_err(|_| failure("link", "spawn needs exactly 5 fds"))?;
        self.fork_from(i, plan, [stdin, stdout, stderr, outputs])
    }

    /// Start the zygote for `plan`; `Ok(None)`: not now (it failed recently, or every
    /// zygote is busy).
    fn start_zygote(
        &mut self,
        plan: &JobPlan,
        key: u64,
        (profile, generation): (String, u64),
        idle_secs: u64,
    ) -> Result<Option<usize>, Failure> {
        if self
            .zygotes
            .failed
            .get(&key)
            .is_some_and(|t| t.elapsed() < RETRY_AFTER)
        {
            return Ok(None);
        }
        // A job admitted before a reload: the new activation's zygote is not replaced
        // for it (it starts cold).
        let same = |z: &&Zygote| z.profile == profile;
        if (self.zygotes.list.iter().filter(same)).any(|z| z.generation > generation) {
            return Ok(None);
        }
        // The profile was reloaded (or its environment rebuilt): its older zygotes end,
        // now if idle, else with their last job.
        for z in &mut self.zygotes.list {
            if z.profile == profile {
                z.replaced = true;
            }
        }
        self.retire_idle_zygotes();
        if self.zygotes.list.len() >= MAX_ZYGOTES {
            // Make room by ending the least recently used idle one, if any.
            let lru = (self.zygotes.list.iter().enumerate())
                .filter(|(_, z)| z.children == 0)
                .min_by_key(|(_, z)| z.last_used)
                .map(|(i, _)| i);
            match lru {
                Some(i) => self.retire_zygote(i),
                None => return Ok(None),
            }
        }
        let os = |step: &str, e: std::io::Error| Failure {
            step: step.into(),
            detail: e.to_string(),
            errno: e.raw_os_error().unwrap_or(0),
        };
        let (library, init) = self
            .zygotes
            .library
            .as_ref()
            .expect("checked by the caller");
        let lib = std::fs::File::open(library).map_err(|e| os("zygote-library", e))?;
        // (Opened for exec: the zygote execs it in each job's init, by fd.)
        let init = std::fs::File::open(init).map_err(|e| os("zygote-init", e))?;
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| os("socketpair", e.into()))?;
        let null = || {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")
        };
        let stdin = null().map_err(|e| os("open", e))?;
        let stdout = null().map_err(|e| os("open", e))?;
        // Its stderr is the daemon's: a failing preload's traceback lands in the log.
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| os("dup", e))?;
        // An empty script: the program is the `-c` bootstrap.
        let (code, code_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| os("pipe", e.into()))?;
        drop(code_w);
        let id = self.zygotes.next_id;
        self.zygotes.next_id -= 1;
        let zplan = zy::zygote_plan(plan, id);
        let mut job = self.build_job(
            zplan,
            // (A zygote has no outputs: its init reads no request on /dev/null.)
            [
                code,
                stdin.into(),
                stdout.into(),
                stderr,
                null().map_err(|e| os("open", e))?.into(),
            ],
            vec![theirs, lib.into(), init.into()],
        )?;
        job.internal = true;
        self.jobs.push(job);
        self.zygotes.list.push(Zygote {
            key,
            profile,
            generation,
            replaced: false,
            started: Instant::now(),
            job_id: id,
            ctl: ours,
            ready: false,
            children: 0,
            last_used: Instant::now(),
            idle: Duration::from_secs(idle_secs),
            pending: Vec::new(),
            asked: std::collections::VecDeque::new(),
        });
        Ok(Some(self.zygotes.list.len() - 1))
    }

    /// Ask zygote `i` to fork `plan`'s sandbox: the job's cgroup, then the request. The
    /// answer comes to `zygote_event`; until then the spawner serves everything else.
    fn fork_from(
        &mut self,
        i: usize,
        plan: &mut JobPlan,
        stdio: [OwnedFd; 4],
    ) -> Result<(), Failure> {
        let slot = self
            .free_slots
            .pop()
            .ok_or_else(|| failure("slot", "no free id slot"))?;
        let asked = self.fork_with_slot(i, plan, stdio, slot);
        if asked.is_err() {
            self.free_slots.push(slot);
        }
        asked
    }

    /// [`Self::fork_from`] once the job has its id slot (given back by the caller if
    /// this fails, else when the job ends or its request does).
    fn fork_with_slot(
        &mut self,
        i: usize,
        plan: &mut JobPlan,
        stdio: [OwnedFd; 4],
        slot: u32,
    ) -> Result<(), Failure> {
        let cgroups = self.cgroups.as_ref().expect("checked by route");
        let name = format!("job-{}", plan.job_id);
        let limits = vivarium_sandbox::cgroup::Limits {
            memory_bytes: plan.cgroup.memory_bytes,
            pids: plan.cgroup.pids,
            cpu_quota_us: plan.cgroup.cpu_quota_us,
            cpu_period_us: plan.cgroup.cpu_period_us,
        };
        let cgroup = cgroups
            .create_job(&name, &limits)
            .map_err(|e| failure("cgroup", crate::error_chain(&e)))?;
        // What the zygote's child gets: the plan with the job's own small filters (it
        // inherits the zygote's). Taken from the plan, not copied: a forked job's plan
        // serves nothing else but its ids and deadlines.
        let PlanKind::Warm {
            zygote: Some(zplan),
        } = std::mem::replace(&mut plan.kind, PlanKind::Forked { slot })
        else {
            unreachable!("routed by its zygote plan")
        };
        let filters = zplan.seccomp.len() + zplan.job_seccomp.len();
        plan.seccomp = zplan.job_seccomp;
        match self.send_fork(i, plan, stdio, &cgroup) {
            Ok(status) => {
                let z = &mut self.zygotes.list[i];
                z.asked.push_back(Asked {
                    plan: plan.clone(),
                    cgroup,
                    status,
                    filters,
                    sent: Instant::now(),
                    killed: None,
                });
                Ok(())
            }
            Err((f, broken)) => {
                let _ = cgroup.kill_all();
                let _ = cgroup.remove();
                if broken {
                    self.zygote_broken(i);
                }
                Err(f)
            }
        }
    }

    /// A zygote that does not answer, or cannot be asked, gets no more requests; it
    /// ends once its running jobs have (killing it would kill them), and a new one is
    /// started after RETRY_AFTER.
    fn zygote_broken(&mut self, i: usize) {
        let z = &mut self.zygotes.list[i];
        z.replaced = true;
        self.zygotes.failed.insert(z.key, Instant::now());
    }

    /// Send the fork request: the plan, and the job's stdio, status pipe, outputs link
    /// and cgroup files. Returns the status pipe's read end. (`true` with an error: the zygote
    /// itself is broken, not just this request.)
    fn send_fork(
        &self,
        i: usize,
        plan: &JobPlan,
        stdio: [OwnedFd; 4],
        cgroup: &JobCgroup,
    ) -> Result<OwnedFd, (Failure, bool)> {
        let z = &self.zygotes.list[i];
        let os = |step: &str, e: std::io::Error| {
            let f = Failure {
                step: step.into(),
                detail: e.to_string(),
                errno: e.raw_os_error().unwrap_or(0),
            };
            (f, true)
        };
        let attach = cgroup
            .attach_files()
            .map_err(|e| (failure("cgroup-attach", crate::error_chain(&e)), false))?;
        let (status_r, status_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| os("pipe", e.into()))?;
        nix::fcntl::fcntl(
            &status_r,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| os("fcntl", e.into()))?;
        // In the zygote's order: stdin, stdout, stderr, status, outputs, cgroup files.
        let raw: Vec<RawFd> = stdio[..3]
            .iter()
            .chain([&status_w, &stdio[3]])
            .chain(&attach)
            .map(AsRawFd::as_raw_fd)
            .collect();
        // The forked job's init makes its time namespace where the spawner can make one
        // for a cold job (`JobPlan::time_ns`).
        let mut sent = plan.clone();
        sent.time_ns = self.time_home.is_some() && plan.layers.namespaces.time;
        let msg = ipc::encode(&sent);
        sendmsg::<()>(
            z.ctl.as_raw_fd(),
            &[IoSlice::new(&msg)],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|e| os("zygote-send", e.into()))?;
        Ok(status_r)
    }

    /// Zygote `i`'s answer to its oldest fork request: keep the job, or report why it
    /// failed. `Err(())`: the zygote ended (the socket's end), which the caller handles.
    fn take_answer(&mut self, i: usize) -> Result<(), ()> {
        let mut buf = [0u8; 256];
        let ctl = self.zygotes.list[i].ctl.as_fd();
        let (len, fds) =
            match vivarium_sandbox::sys::recv_with_fds(ctl, &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(reply) => reply,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    return Ok(())
                }
                Err(_) => return Err(()),
            };
        let pidfd = fds.into_iter().next();
        if len == 0 {
            return Err(());
        }
        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
        let Some(asked) = self.zygotes.list[i].asked.pop_front() else {
            // The answer to a request that already timed out (this zygote is being
            // replaced): its child cannot join the removed cgroup and ends at once.
            return Ok(());
        };
        let Asked {
            plan,
            cgroup,
            status,
            filters,
            killed,
            ..
        } = asked;
        let Some(pidfd) = pidfd.filter(|_| text == "ok") else {
            // The zygote said why (the request only failed).
            let _ = cgroup.kill_all();
            let _ = cgroup.remove();
            self.free_slots.extend(plan.kind.forked_slot());
            self.started(plan.job_id, Err(failure("zygote-fork", text)));
            return Ok(());
        };
        let z = &mut self.zygotes.list[i];
        z.children += 1;
        z.last_used = Instant::now();
        let zygote = Some(z.job_id);
        // (Only for the record: a forked job is watched through its pidfd, and the
        // zygote reaps it; a child that already ended has no pid any more.)
        let pid = nix::unistd::Pid::from_raw(pid_of(&pidfd).unwrap_or(0));
        let mut job = self.new_job(
            &plan,
            pid,
            pidfd,
            std::fs::File::from(status),
            Some(cgroup),
            plan.kind.forked_slot(),
            None,
        );
        job.zygote = zygote;
        job.report.seccomp_filters = u32::try_from(filters).ok();
        job.report.time_namespace = self.time_home.is_some() && plan.layers.namespaces.time;
        if let Some(cause) = killed {
            super::kill(&mut job, cause);
        }
        self.started(plan.job_id, Ok(Some(job)));
        Ok(())
    }

    /// Fork requests not answered within FORK_TIMEOUT fail (their jobs' stdio went to
    /// the zygote), and their zygote is broken.
    pub(super) fn expire_fork_requests(&mut self) {
        let now = Instant::now();
        while let Some(i) = (self.zygotes.list.iter()).position(|z| {
            z.asked
                .front()
                .is_some_and(|a| now >= a.sent + FORK_TIMEOUT)
        }) {
            self.zygote_broken(i);
            for asked in std::mem::take(&mut self.zygotes.list[i].asked) {
                // Its init, if the zygote made one after all, cannot join the removed
                // cgroup and ends before it maps the payload's ids.
                let _ = asked.cgroup.kill_all();
                let _ = asked.cgroup.remove();
                self.free_slots.extend(asked.plan.kind.forked_slot());
                self.started(
                    asked.plan.job_id,
                    Err(failure("zygote-fork", "the zygote did not answer")),
                );
            }
        }
    }

    /// End zygote `i` (its running jobs, in pid namespaces below its own, end with it:
    /// callers retire only idle ones, or broken ones). Requests waiting for it start
    /// cold.
    fn retire_zygote(&mut self, i: usize) {
        let z = self.zygotes.list.swap_remove(i);
        if let Some(job) = self.jobs.iter_mut().find(|j| j.id == z.job_id) {
            super::kill(job, KillCause::Shutdown);
        }
        // Requests it was asked and did not answer (it ended): their stdio went to it.
        for asked in z.asked {
            let _ = asked.cgroup.kill_all();
            let _ = asked.cgroup.remove();
            self.free_slots.extend(asked.plan.kind.forked_slot());
            self.started(
                asked.plan.job_id,
                Err(failure("zygote-fork", "the zygote ended")),
            );
        }
        for (plan, fds) in z.pending {
            let id = plan.job_id;
            let started = self.start_cold(plan, fds);
            self.started(id, started);
        }
    }

    /// Zygote control sockets that are readable: a zygote saying it is ready, answering
    /// a fork request, or closing (it ended).
    pub(super) fn zygote_event(&mut self, job_id: u64) {
        let Some(i) = self.zygotes.list.iter().position(|z| z.job_id == job_id) else {
            return;
        };
        if self.zygotes.list[i].ready {
            if self.take_answer(i).is_err() {
                let key = self.zygotes.list[i].key;
                self.zygotes.failed.insert(key, Instant::now());
                self.retire_zygote(i);
            }
            return;
        }
        let mut buf = [0u8; 64];
        let n = nix::sys::socket::recv(
            self.zygotes.list[i].ctl.as_raw_fd(),
            &mut buf,
            MsgFlags::MSG_DONTWAIT,
        );
        match n {
            Ok(n) if &buf[..n] == b"ready" => {
                self.zygotes.list[i].ready = true;
                let job_id = self.zygotes.list[i].job_id;
                for (mut plan, fds) in std::mem::take(&mut self.zygotes.list[i].pending) {
                    let id = plan.job_id;
                    // (A failed request may break the zygote: look it up each time.)
                    let usable =
                        (self.zygotes.list.iter()).position(|z| z.job_id == job_id && !z.replaced);
                    // (Without a free id slot it waits for one, cold.)
                    let started = match usable.filter(|_| !self.free_slots.is_empty()) {
                        Some(i) => match self.fork_request(i, &mut plan, fds) {
                            Ok(()) => continue,
                            Err(f) => Err(f),
                        },
                        None => self.start_cold(plan, fds),
                    };
                    self.started(id, started);
                }
            }
            Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => {}
            _ => {
                let key = self.zygotes.list[i].key;
                self.zygotes.failed.insert(key, Instant::now());
                self.retire_zygote(i);
            }
        }
    }

    /// Every zygote is of an old profile activation: each ends once it has no job.
    pub(super) fn zygotes_stale(&mut self) {
        for z in &mut self.zygotes.list {
            z.replaced = true;
        }
        self.retire_idle_zygotes();
    }

    /// End zygotes idle for their `idle_secs`, replaced ones without a job, and ones
    /// that did not start within START_TIMEOUT (marked failed: their requests start
    /// cold).
    pub(super) fn retire_idle_zygotes(&mut self) {
        let now = Instant::now();
        while let Some(i) = self.zygotes.list.iter().position(|z| {
            let done = z.ready
                && z.children == 0
                && z.pending.is_empty()
                && z.asked.is_empty()
                && (z.replaced || now >= z.last_used + z.idle);
            done || (!z.ready && now >= z.started + START_TIMEOUT)
        }) {
            if !self.zygotes.list[i].ready {
                let z = &self.zygotes.list[i];
                super::log::log_warn!(
                    "a zygote for profile {} was not ready within {} s",
                    z.profile,
                    START_TIMEOUT.as_secs()
                );
                self.zygotes.failed.insert(z.key, now);
            }
            self.retire_zygote(i);
        }
    }

    /// A job asked of a zygote and not answered yet: it is killed for `cause` as soon
    /// as it exists (and then reports as killed). Whether there was one.
    pub(super) fn kill_asked(&mut self, job_id: u64, cause: KillCause) -> bool {
        for z in &mut self.zygotes.list {
            if let Some(asked) = z.asked.iter_mut().find(|a| a.plan.job_id == job_id) {
                asked.killed.get_or_insert(cause);
                return true;
            }
        }
        false
    }

    /// Remove a request still waiting for its zygote; whether there was one.
    pub(super) fn drop_pending(&mut self, job_id: u64) -> bool {
        for z in &mut self.zygotes.list {
            if let Some(k) = z.pending.iter().position(|(p, _)| p.job_id == job_id) {
                z.pending.remove(k);
                return true;
            }
        }
        false
    }

    /// A job has been cleaned up: its zygote has one child less; a zygote itself that
    /// ended is forgotten.
    pub(super) fn zygote_job_done(&mut self, job: &Job) {
        if let Some(zid) = job.zygote {
            if let Some(z) = self.zygotes.list.iter_mut().find(|z| z.job_id == zid) {
                z.children = z.children.saturating_sub(1);
                z.last_used = Instant::now();
            }
        }
        if job.internal {
            if let Some(i) = self.zygotes.list.iter().position(|z| z.job_id == job.id) {
                // It ended on its own (not retired): do not restart it at once.
                let key = self.zygotes.list[i].key;
                self.zygotes.failed.insert(key, Instant::now());
                self.retire_zygote(i);
            }
        }
    }
}
