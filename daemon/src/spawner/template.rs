//! Mount templates: a cold job's read-only root, built once per mount plan and copied
//! into each job's mount namespace by `clone3(CLONE_NEWNS)`.
//!
//! Building the root is most of a cold init's own work: ~25 mount calls, the files and
//! symlinks, the pivot, and a lazy unmount of the old root that waits for an RCU grace
//! period. A template does all of that once, as the host's root, in a mount namespace
//! that holds nothing but the finished root (the builder pivots into it and detaches
//! the host's tree). For each job the spawner joins the template's namespace just
//! around the `clone3` (as it joins the spare network namespace), so the job's new
//! mount namespace is a copy of the template; the job's init then makes only its own
//! mounts in the copy (`mount::populate_fresh`): its tmpfs mounts, its procfs, the masks.
//!
//! Why a job gets no less isolation than with a root built on the spot (the full argument
//! is in docs/ARCHITECTURE.md, "Mount templates"): the copy belongs to the job's user
//! namespace, so the kernel locks every copied mount and its flags; the copies are
//! private; what jobs share is read-only and the same for all; everything writable and
//! the procfs are the job's own; the template's procfs is an empty pid namespace's; a
//! replaced host file gets a new template (the key has each bound path's device and
//! inode); the spawner is in the template's namespace only around the clone.
//!
//! Only for a root daemon's ordinary jobs: a rootless daemon cannot join a mount
//! namespace owned by the host, a zygote's sandbox is the base of its own jobs' copies
//! (`vivarium_sandbox::zygote`), and a test-only plan (`Layers::weakened`) builds the root on
//! the spot, as its layers and mount steps say. Where a
//! template cannot be built, the job is built cold, as before, with the same layers.

use super::ns::{NsGuard, NsKind};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::MsgFlags;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vivarium_sandbox::mount;
use vivarium_sandbox::plan::{JobPlan, MountStep};
use vivarium_sandbox::sys;

/// Templates kept at once (one per profile in use, and per package environment).
const MAX_TEMPLATES: usize = 8;
/// How long a builder may take before the job is built cold instead.
const BUILD_TIMEOUT_MS: u16 = 2000;
/// How long a plan whose template failed is built cold before the next try.
const RETRY_FAILED: Duration = Duration::from_secs(60);

/// What a template holds: the plan's shared steps (a tmpfs as its mount point), and the
/// (device, inode) of each host path it binds.
#[derive(Debug, PartialEq, Eq)]
pub struct Key {
    steps: Vec<MountStep>,
    sources: Vec<(u64, u64)>,
}

impl Key {
    /// `None`: the plan cannot come from a template (a writable bind, a mask outside its
    /// procfs, a host path that is not there: the cold path reports that one).
    pub fn of(mounts: &[MountStep]) -> Option<Key> {
        let procs: Vec<&Path> = mounts
            .iter()
            .filter_map(|s| match s {
                MountStep::Proc { path } => Some(path.as_path()),
                _ => None,
            })
            .collect();
        let mut key = Key {
            steps: Vec::with_capacity(mounts.len()),
            sources: Vec::new(),
        };
        for step in mounts {
            match step {
                MountStep::Mask { path, .. } => {
                    if !procs.iter().any(|p| path.starts_with(p) && path != p) {
                        return None;
                    }
                }
                MountStep::Tmpfs { path, .. } => {
                    key.steps.push(MountStep::Dir { path: path.clone() })
                }
                MountStep::BindRo { source, .. } | MountStep::Device { source, .. } => {
                    let meta = std::fs::metadata(source).ok()?;
                    key.sources.push((meta.dev(), meta.ino()));
                    key.steps.push(step.clone());
                }
                _ => key.steps.push(step.clone()),
            }
        }
        Some(key)
    }
}

pub struct Templates {
    /// The spawner's own mount namespace, to return to; `None`: templates are off.
    home: Option<OwnedFd>,
    /// Where a builder mounts the root, in its own mount namespace.
    root: PathBuf,
    /// Most recently built last.
    built: Vec<(Key, OwnedFd)>,
    /// Plans whose template failed to build, and when: built cold, and tried again
    /// after `RETRY_FAILED` (the host may have changed).
    failed: Vec<(Key, Instant)>,
}

impl Templates {
    pub fn new(enabled: bool, root: PathBuf) -> Templates {
        let home = if enabled {
            std::fs::File::open("/proc/self/ns/mnt")
                .ok()
                .map(OwnedFd::from)
        } else {
            None
        };
        Templates {
            home,
            root,
            built: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// Join the template for `plan`'s mounts, building it first if there is none yet,
    /// for the clone (S3a): the guard takes the spawner back to its own mount namespace.
    /// `None`: the spawner stayed where it was and the job is built cold.
    pub fn enter(&mut self, plan: &JobPlan) -> Option<NsGuard<'_>> {
        if self.home.is_none() || plan.layers.weakened {
            return None;
        }
        let key = Key::of(&plan.mounts)?;
        self.failed
            .retain(|(_, when)| when.elapsed() < RETRY_FAILED);
        if self.failed.iter().any(|(k, _)| *k == key) {
            return None;
        }
        let at = match self.built.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => match build(&self.root, &plan.mounts) {
                Ok(ns) => {
                    if self.built.len() == MAX_TEMPLATES {
                        self.built.remove(0);
                    }
                    self.built.push((key, ns));
                    self.built.len() - 1
                }
                Err(e) => {
                    super::log::log_warn!(
                        "no mount template, jobs of this plan are built cold: {e}"
                    );
                    self.failed.push((key, Instant::now()));
                    return None;
                }
            },
        };
        let home = self.home.as_ref()?;
        NsGuard::enter(home, NsKind::Mount, &self.built[at].1).ok()
    }
}

/// Build a template in a child in new mount and pid namespaces (its procfs shows only
/// itself, and nothing once it has exited); it sends back its mount namespace.
fn build(root: &Path, steps: &[MountStep]) -> std::io::Result<OwnedFd> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (parent, child) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: called by the spawner, which is single-threaded.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::clone3(libc::CLONE_NEWNS | libc::CLONE_NEWPID, None) }?;
    match forked {
        sys::Forked::Child => {
            std::panic::set_hook(Box::new(|_| sys::exit_now(123)));
            // Nothing of the spawner's (its link, other jobs' pipes) stays open here.
            let keep = [0, 1, 2, child.as_raw_fd() as u32];
            // SAFETY: a fresh clone of the spawner that goes on with `child` and stdio
            // alone; the spawner's objects for the other fds are never used here.
            #[allow(unsafe_code)]
            let closed = unsafe { sys::close_all_except(&keep) };
            if closed.is_err() {
                sys::exit_now(120);
            }
            let built = mount::build_template(root, steps)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    std::fs::File::open("/proc/self/ns/mnt")
                        .map_err(|e| format!("open /proc/self/ns/mnt: {e}"))
                });
            let sent = match &built {
                Ok(ns) => sys::send_with_fds(child.as_fd(), b"ok", &[ns.as_fd()]),
                Err(e) => sys::send_with_fds(child.as_fd(), e.as_bytes(), &[]),
            };
            sys::exit_now(i32::from(built.is_err() || sent.is_err()))
        }
        sys::Forked::Parent { pid, pidfd } => {
            drop(child);
            let answer = (|| {
                let mut ready = [PollFd::new(parent.as_fd(), PollFlags::POLLIN)];
                if poll(&mut ready, PollTimeout::from(BUILD_TIMEOUT_MS))? == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the template builder did not answer",
                    ));
                }
                let mut buf = [0u8; 1024];
                let (len, mut fds) =
                    sys::recv_with_fds(parent.as_fd(), &mut buf, MsgFlags::empty())?;
                match (&buf[..len], fds.pop()) {
                    (b"ok", Some(ns)) if fds.is_empty() => Ok(ns),
                    (text, _) => Err(std::io::Error::other(format!(
                        "building the template: {}",
                        String::from_utf8_lossy(text)
                    ))),
                }
            })();
            let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            answer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn base() -> Vec<MountStep> {
        vec![
            MountStep::BindRo {
                source: p("/usr"),
                path: p("/usr"),
            },
            MountStep::Tmpfs {
                path: p("/work"),
                size: 1 << 20,
                inodes: 16,
                mode: 0o700,
            },
            MountStep::Proc { path: p("/proc") },
            MountStep::Mask {
                path: p("/proc/sys/kernel/random/boot_id"),
                contents: "one".into(),
            },
        ]
    }

    #[test]
    fn a_key_holds_the_shared_steps_and_the_bound_objects() {
        let key = Key::of(&base()).expect("eligible");
        let usr = std::fs::metadata("/usr").unwrap();
        assert_eq!(key.sources, [(usr.dev(), usr.ino())]);
        assert_eq!(
            key.steps,
            [
                base()[0].clone(),
                MountStep::Dir { path: p("/work") },
                MountStep::Proc { path: p("/proc") },
            ]
        );
        // The job's own parts (a mask's contents, a tmpfs's size) do not change it.
        let mut other = base();
        other[3] = MountStep::Mask {
            path: p("/proc/sys/kernel/random/boot_id"),
            contents: "two".into(),
        };
        other[1] = MountStep::Tmpfs {
            path: p("/work"),
            size: 2 << 20,
            inodes: 32,
            mode: 0o700,
        };
        assert_eq!(Key::of(&other), Some(key));
    }

    #[test]
    fn plans_a_template_cannot_hold_are_built_on_the_spot() {
        let mut mask = base();
        mask.push(MountStep::Mask {
            path: p("/etc/machine-id"),
            contents: String::new(),
        });
        assert_eq!(Key::of(&mask), None, "a mask outside the procfs");
        let mut missing = base();
        missing.push(MountStep::BindRo {
            source: p("/nonexistent/vivarium"),
            path: p("/x"),
        });
        assert_eq!(
            Key::of(&missing),
            None,
            "the cold path reports a missing bind"
        );
    }
}
