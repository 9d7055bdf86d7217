//! Mount layer: build the job's minimal root on a tmpfs and pivot into it.
//!
//! Runs in the job's init, inside its new user and mount namespaces. The host's mount
//! tree is made private first so nothing we do propagates back.

use crate::cgroup::ViewMount;
use crate::plan::{Layers, MountStep};
use crate::{SetupError, Step};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{chdir, chown, pivot_root, Gid, Uid};
use std::path::{Path, PathBuf};

const NONE: Option<&str> = None;

fn at(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn mkdir_p(path: &Path) -> Result<(), SetupError> {
    std::fs::create_dir_all(path).map_err(|e| SetupError::io(Step::Mkdir, path, &e))
}

/// Mount flags that a bind remount must keep: in a user namespace the kernel locks
/// ro/nosuid/nodev/noexec/atime flags inherited from the host, and dropping one is EPERM.
/// Read-only matters under systemd: `PrivateDevices=` with `ProtectSystem=strict` gives the
/// unit a read-only `/dev`, so a device bind remounted without `MS_RDONLY` was refused
/// (found by the VM tier). Writing to a device node on a read-only mount still works.
fn locked_flags(source: &Path) -> Result<MsFlags, SetupError> {
    let st = statvfs(source).map_err(|e| SetupError::nix(Step::Statvfs, source, e))?;
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (have, keep) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        // (ST_RELATIME, 0x1000 in the kernel's statfs flags: nix names it for glibc
        // only, and the zygote jobs' init is also built for musl.)
        (FsFlags::from_bits_retain(0x1000), MsFlags::MS_RELATIME),
    ] {
        if f.contains(have) {
            out |= keep;
        }
    }
    Ok(out)
}

fn bind_ro(source: &Path, target: &Path, extra: MsFlags) -> Result<(), SetupError> {
    mount(
        Some(source),
        target,
        NONE,
        // Not MS_REC: a read-only remount changes only the top mount, so host mounts
        // nested under a bind source would keep their own (writable, suid, dev) flags.
        // Without MS_REC they are simply not there.
        MsFlags::MS_BIND,
        NONE,
    )
    .map_err(|e| bind_error(source, target, e))?;
    let flags = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | extra
        | locked_flags(source)?;
    mount(NONE, target, NONE, flags, NONE).map_err(|e| SetupError::nix(Step::RemountRo, target, e))
}

/// A template is built as the host's root, where a non-recursive bind of a directory
/// with mounts beneath it succeeds and shows what those mounts cover on the host. In a
/// job's user namespace the same bind fails (`bind_error`): refuse it here too, so the
/// job is built on the spot and gets that error rather than more than the host shows.
fn refuse_covered(source: &Path) -> Result<(), SetupError> {
    let dir = std::fs::canonicalize(source).map_err(|e| SetupError::io(Step::Bind, source, &e))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| SetupError::io(Step::Read, "/proc/self/mountinfo".as_ref(), &e))?;
    let below = mounts_beneath(&mountinfo, &dir);
    if below.is_empty() {
        return Ok(());
    }
    Err(SetupError::Other {
        step: Step::Template,
        detail: format!("mounts beneath {} ({})", source.display(), below.join(", ")),
    })
}

/// A non-recursive bind fails with EINVAL when a mount beneath the source is locked (in a
/// user namespace, every inherited mount is): the bind would uncover what it covers. Say
/// which mounts, and the usual cause: systemd's `ProtectKernelModules=` mounts over
/// `/usr/lib/modules` in the unit's namespace, which the jobs inherit.
fn bind_error(source: &Path, target: &Path, e: nix::Error) -> SetupError {
    if e == nix::Error::EINVAL {
        let below = std::fs::canonicalize(source)
            .ok()
            .zip(std::fs::read_to_string("/proc/self/mountinfo").ok())
            .map(|(dir, mountinfo)| mounts_beneath(&mountinfo, &dir))
            .unwrap_or_default();
        if !below.is_empty() {
            return SetupError::Other {
                step: Step::Bind,
                detail: format!(
                    "cannot bind {} read-only: mounts beneath it ({}) are locked in the job's \
                     user namespace, and a non-recursive bind may not uncover them; remove \
                     them from the daemon's mount namespace (systemd's ProtectKernelModules= \
                     mounts over /usr/lib/modules)",
                    source.display(),
                    below.join(", ")
                ),
            };
        }
    }
    SetupError::nix(Step::Bind, target, e)
}

/// Mount points strictly beneath `dir` in `/proc/self/mountinfo` text (field 5; names with
/// escaped characters compare escaped), at most four.
fn mounts_beneath(mountinfo: &str, dir: &Path) -> Vec<String> {
    let Some(dir) = dir.to_str() else {
        return Vec::new();
    };
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .take(4)
        .map(str::to_owned)
        .collect()
}

fn tmpfs(
    target: &Path,
    size: u64,
    inodes: u64,
    mode: u32,
    flags: MsFlags,
) -> Result<(), SetupError> {
    let data = format!("size={size},nr_inodes={inodes},mode={mode:o}");
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| SetupError::nix(Step::Tmpfs, target, e))
}

/// One of the job's writable tmpfs mounts (nosuid, nodev, and noexec unless the plan's
/// `noexec_scratch` is off), owned by `owner`.
fn scratch_tmpfs(
    target: &Path,
    (size, inodes, mode): (u64, u64, u32),
    owner: (u32, u32),
    layers: &Layers,
) -> Result<(), SetupError> {
    let noexec = match layers.noexec_scratch {
        true => MsFlags::MS_NOEXEC,
        false => MsFlags::empty(),
    };
    tmpfs(target, size, inodes, mode, noexec)?;
    chown(
        target,
        Some(Uid::from_raw(owner.0)),
        Some(Gid::from_raw(owner.1)),
    )
    .map_err(|e| SetupError::nix(Step::Chown, target, e))
}

/// Bind one file (not recursive) and remount the bind with `flags`.
fn bind_file(source: &Path, target: &Path, flags: MsFlags) -> Result<(), SetupError> {
    mount(Some(source), target, NONE, MsFlags::MS_BIND, NONE)
        .map_err(|e| SetupError::nix(Step::BindFile, target, e))?;
    mount(
        NONE,
        target,
        NONE,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags,
        NONE,
    )
    .map_err(|e| SetupError::nix(Step::RemountFile, target, e))
}

fn placeholder_file(path: &Path) -> Result<(), SetupError> {
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    std::fs::File::create(path).map_err(|e| SetupError::io(Step::Create, path, &e))?;
    Ok(())
}

/// Make the host's mounts private and step onto a scratch tmpfs ("anchor") mounted on
/// `new_root`. This runs before init switches to uid 0 inside, while its filesystem uid
/// is still the daemon's, so `new_root`'s parents (a state or temp dir) need not be
/// searchable by the job's host ids; every later step uses paths relative to the
/// working directory. The anchor is world-writable only so that uid 0 inside can make
/// the real root in it; it exists only in this mount namespace and is detached with the
/// old root at pivot time.
pub fn enter_anchor(new_root: &Path) -> Result<(), SetupError> {
    enter_private_tmpfs(new_root, (64 << 10, 16, 0o777), MsFlags::MS_NOEXEC)
}

/// Make every mount of this namespace private (nothing below may propagate to the
/// host's), mount a tmpfs on `dir` and step into it.
fn enter_private_tmpfs(
    dir: &Path,
    (size, inodes, mode): (u64, u64, u32),
    flags: MsFlags,
) -> Result<(), SetupError> {
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(|e| SetupError::nix(Step::MakeRprivate, Path::new("/"), e))?;
    tmpfs(dir, size, inodes, mode, flags)?;
    chdir(dir).map_err(|e| SetupError::nix(Step::Chdir, dir, e))
}

/// As uid 0 inside: make the job's root tmpfs (owned by that uid) in the anchor and
/// step into it.
pub fn enter_root() -> Result<(), SetupError> {
    let root = Path::new("root");
    mkdir_p(root)?;
    tmpfs(root, 1 << 20, 256, 0o755, MsFlags::empty())?;
    chdir(root).map_err(|e| SetupError::nix(Step::Chdir, root, e))
}

/// Execute the mount plan in the new root (the working directory), then make the root
/// read-only (as `layers` say). `owner` (uid, gid inside) owns the writable tmpfs mounts.
pub fn populate(steps: &[MountStep], owner: (u32, u32), layers: &Layers) -> Result<(), SetupError> {
    populate_as(steps, owner, Build::Job, layers)
}

/// What `populate_as` builds: a job's whole root, or a mount template's shared part.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Build {
    Job,
    Template,
}

fn populate_as(
    steps: &[MountStep],
    owner: (u32, u32),
    build: Build,
    layers: &Layers,
) -> Result<(), SetupError> {
    let new_root = Path::new(".");
    let mut masks = MaskSources::default();
    for step in steps {
        match step {
            // A template leaves each job's own mounts to the job (`populate_fresh`):
            // their mount points only, and a procfs that lets the job mount its own.
            MountStep::Tmpfs { path, .. } if build == Build::Template => {
                mkdir_p(&at(new_root, path))?;
            }
            MountStep::Mask { .. } if build == Build::Template => {}
            MountStep::BindRo { source, path } => {
                let target = at(new_root, path);
                if source.is_dir() {
                    if build == Build::Template {
                        refuse_covered(source)?;
                    }
                    mkdir_p(&target)?;
                } else {
                    placeholder_file(&target)?;
                }
                bind_ro(source, &target, MsFlags::MS_NODEV)?;
            }
            MountStep::Symlink { link, path } => {
                let target = at(new_root, path);
                if let Some(parent) = target.parent() {
                    mkdir_p(parent)?;
                }
                std::os::unix::fs::symlink(link, &target)
                    .map_err(|e| SetupError::io(Step::Symlink, &target, &e))?;
            }
            MountStep::File { path, contents } => {
                let target = at(new_root, path);
                if let Some(parent) = target.parent() {
                    mkdir_p(parent)?;
                }
                std::fs::write(&target, contents)
                    .map_err(|e| SetupError::io(Step::Write, &target, &e))?;
            }
            MountStep::Tmpfs {
                path,
                size,
                inodes,
                mode,
            } => {
                let target = at(new_root, path);
                mkdir_p(&target)?;
                scratch_tmpfs(&target, (*size, *inodes, *mode), owner, layers)?;
            }
            MountStep::Device { source, path } => {
                let target = at(new_root, path);
                placeholder_file(&target)?;
                // The host node keeps its own (devtmpfs) superblock, so it works even
                // though devices on filesystems mounted in a userns do not.
                let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | locked_flags(source)?;
                bind_file(source, &target, flags)?;
            }
            MountStep::Proc { path } => {
                let target = at(new_root, path);
                mkdir_p(&target)?;
                proc(&target, layers)?;
            }
            MountStep::HostProc { path } => {
                let target = at(new_root, path);
                mkdir_p(&target)?;
                mount(
                    Some("/proc"),
                    &target,
                    NONE,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    NONE,
                )
                .map_err(|e| SetupError::nix(Step::WeakBindProc, &target, e))?;
            }
            MountStep::Expose {
                source,
                path,
                writable,
            } => expose(source, &at(new_root, path), *writable)?,
            MountStep::Dir { path } => mkdir_p(&at(new_root, path))?,
            MountStep::Mask { path, contents } => {
                // The source lives in the anchor, outside the new root; the bind keeps
                // it reachable after the anchor is detached with the old root.
                let source =
                    masks.source(contents, |n| Path::new("..").join(format!("mask-{n}")))?;
                bind_file(&source, &at(new_root, path), MASK_FLAGS)?;
            }
        }
    }
    // The root itself becomes read-only; the tmpfs mounts on it stay writable.
    if !layers.read_only_root {
        return Ok(());
    }
    mount(
        NONE,
        new_root,
        NONE,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        NONE,
    )
    .map_err(|e| SetupError::nix(Step::RemountRootRo, new_root, e))
}

/// A mount template (see `vivariumd::spawner::template`): as host root, in a mount namespace of its
/// own, make the root tmpfs on `new_root`, execute the plan's shared steps in it (binds,
/// files, devices, symlinks; empty mount points for the tmpfs mounts; a procfs of the
/// builder's own pid namespace: a new procfs needs a fully visible one in the mount
/// namespace with the same nosuid/nodev/noexec flags, which the job's copy has locked),
/// make it read-only and pivot into it: the namespace then holds nothing but the root.
pub fn build_template(new_root: &Path, steps: &[MountStep]) -> Result<(), SetupError> {
    enter_private_tmpfs(new_root, (1 << 20, 256, 0o755), MsFlags::empty())?;
    populate_as(steps, (0, 0), Build::Template, &Layers::FULL)?;
    pivot()
}

/// Whose procfs a fresh job mount namespace has at the `Proc` step's path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum FreshProc {
    /// A zygote's (same user namespace, nothing locked): replaced.
    Zygote,
    /// A mount template's (locked in the job's copy): covered.
    Template,
}

/// A job forked from a zygote: the zygote's read-only root is already in place (the
/// binds, files, devices and symlinks of `steps`; empty directories where `steps` has
/// tmpfs mounts, see `crate::zygote::zygote_plan`); only the per-job mounts are made,
/// in a mount namespace of the job's own (a copy of the zygote's, owned by the same user
/// namespace, so nothing in it is locked yet): fresh tmpfs mounts, a procfs that takes
/// the place of the zygote's (detached), and the masks over it. A mask's source file is
/// written to the first fresh tmpfs, bound, and unlinked (the bind keeps it alive). The
/// caller's cwd must not matter (it is moved to `/`).
///
/// A cold job cloned from a mount template (`FreshProc::Template`) does the same in its
/// copy of the template, where every mount is locked: its procfs goes on top of the
/// template's instead of replacing it.
pub fn populate_fresh(
    steps: &[MountStep],
    owner: (u32, u32),
    under: FreshProc,
    layers: &Layers,
) -> Result<(), SetupError> {
    chdir("/").map_err(|e| SetupError::nix(Step::Chdir, Path::new("/"), e))?;
    let detach = |path: &Path| {
        umount2(path, MntFlags::MNT_DETACH).map_err(|e| SetupError::nix(Step::Umount, path, e))
    };
    let mut scratch: Option<&Path> = None;
    let mut masks = MaskSources::default();
    for step in steps {
        match step {
            MountStep::Tmpfs {
                path,
                size,
                inodes,
                mode,
            } => {
                scratch_tmpfs(path, (*size, *inodes, *mode), owner, layers)?;
                scratch.get_or_insert(path);
            }
            MountStep::Proc { path } if under == FreshProc::Template => proc(path, layers)?,
            MountStep::Proc { path } => {
                // A new procfs is allowed only while a fully visible one is mounted in
                // this namespace (the zygote's): mount it aside, detach the zygote's
                // (one unmount: it costs an RCU grace period), move the new one in.
                let dir = scratch.ok_or_else(|| SetupError::Other {
                    step: Step::Proc,
                    detail: "no tmpfs before /proc".into(),
                })?;
                let aside = dir.join(".vivarium-proc");
                mkdir_p(&aside)?;
                proc(&aside, layers)?;
                detach(path)?;
                mount(Some(&aside), path, NONE, MsFlags::MS_MOVE, NONE)
                    .map_err(|e| SetupError::nix(Step::MoveProc, path, e))?;
                std::fs::remove_dir(&aside).map_err(|e| SetupError::io(Step::Rmdir, &aside, &e))?;
            }
            MountStep::Mask { path, contents } => {
                let dir = scratch.ok_or_else(|| SetupError::Other {
                    step: Step::Mask,
                    detail: "no tmpfs before the mask".into(),
                })?;
                let source = masks.source(contents, |n| dir.join(format!(".vivarium-mask-{n}")))?;
                bind_file(&source, path, MASK_FLAGS)?;
            }
            // (Never in a fresh namespace: a plan with these is built on the spot.)
            MountStep::HostProc { .. } | MountStep::Expose { .. } => {}
            MountStep::BindRo { .. }
            | MountStep::Symlink { .. }
            | MountStep::File { .. }
            | MountStep::Device { .. }
            | MountStep::Dir { .. } => {}
        }
    }
    // The sources were in the job's scratch tmpfs: gone from it, kept by their binds.
    for source in masks.written {
        std::fs::remove_file(&source).map_err(|e| SetupError::io(Step::Unlink, &source, &e))?;
    }
    Ok(())
}

/// A mask's bind: read-only, and nothing on it can be a device, setuid or executable.
const MASK_FLAGS: MsFlags = MsFlags::MS_RDONLY
    .union(MsFlags::MS_NOSUID)
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);

/// The files the masks of one setup are bound from: one per distinct contents (most
/// masks are empty or share their text, as the pressure files do), each written once.
#[derive(Default)]
struct MaskSources {
    written: Vec<PathBuf>,
    contents: Vec<String>,
}

impl MaskSources {
    /// The source for `contents`: an earlier mask's with the same contents, or a new
    /// file, named by `name` from its number, with them.
    fn source(
        &mut self,
        contents: &str,
        name: impl FnOnce(usize) -> PathBuf,
    ) -> Result<PathBuf, SetupError> {
        if let Some(i) = self.contents.iter().position(|c| c == contents) {
            return Ok(self.written[i].clone());
        }
        let source = name(self.written.len());
        std::fs::write(&source, contents).map_err(|e| SetupError::io(Step::Write, &source, &e))?;
        self.written.push(source.clone());
        self.contents.push(contents.to_owned());
        Ok(source)
    }
}

/// The job's own cgroup, read-only at each of `view`'s paths (empty directories on the
/// read-only root, `MountStep::Dir`): a cgroup filesystem mounted in the caller's cgroup
/// namespace shows that namespace's cgroup as its root, so call it only once the job's
/// exists (never without one: the host's hierarchy would show). A failure fails the
/// job: the view was promised.
pub fn cgroup_view(view: &[ViewMount]) -> Result<(), SetupError> {
    for m in view {
        let data = Some(m.data.as_str()).filter(|d| !d.is_empty());
        mount(
            Some(m.fstype.as_str()),
            &m.path,
            Some(m.fstype.as_str()),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            data,
        )
        .map_err(|e| SetupError::nix(Step::CgroupView, &m.path, e))?;
    }
    Ok(())
}

/// A procfs for the caller's pid namespace at `target`.
fn proc(target: &Path, layers: &Layers) -> Result<(), SetupError> {
    // hidepid=invisible: the payload (uid 1000) cannot see init (uid 0 inside), whose
    // /proc/1/cmdline would name the daemon's binary.
    let hidepid = match layers.hidepid {
        true => "hidepid=invisible",
        false => "hidepid=0",
    };
    mount(
        Some("proc"),
        target,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(hidepid),
    )
    .map_err(|e| SetupError::nix(Step::Proc, target, e))
}

/// `MountStep::Expose`: bind the host path `source` at `target` (read-only unless
/// `writable`), making its mount point first (a directory or an empty file, as the
/// source is) if the root has none.
fn expose(source: &Path, target: &Path, writable: bool) -> Result<(), SetupError> {
    if std::fs::symlink_metadata(target).is_err() {
        if source.is_dir() {
            mkdir_p(target)?;
        } else {
            if let Some(parent) = target.parent() {
                mkdir_p(parent)?;
            }
            std::fs::File::create(target)
                .map_err(|err| SetupError::io(Step::WeakCreate, target, &err))?;
        }
    }
    if writable {
        mount(Some(source), target, NONE, MsFlags::MS_BIND, NONE)
            .map_err(|err| SetupError::nix(Step::WeakExpose, target, err))
    } else {
        bind_ro(source, target, MsFlags::MS_NODEV)
    }
}

/// Make the working directory (the new root, a tmpfs mount point) the root and detach
/// the old root: `pivot_root(".", ".")` stacks the old root on top of the new one, and
/// a lazy unmount of "." removes it (as firecracker's jailer and runc do).
pub fn pivot() -> Result<(), SetupError> {
    let here = Path::new(".");
    pivot_root(".", ".").map_err(|e| SetupError::nix(Step::PivotRoot, here, e))?;
    umount2(".", MntFlags::MNT_DETACH)
        .map_err(|e| SetupError::nix(Step::UmountOldRoot, here, e))?;
    chdir("/").map_err(|e| SetupError::nix(Step::Chdir, Path::new("/"), e))
}

/// Write the script where the payload will find it, owned by the sandbox user.
pub fn write_script(path: &Path, code: &[u8], owner: (u32, u32)) -> Result<(), SetupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(Mode::from_bits_truncate(0o600).bits())
        .open(path)
        .map_err(|e| SetupError::io(Step::CreateScript, path, &e))?;
    f.write_all(code)
        .map_err(|e| SetupError::io(Step::WriteScript, path, &e))?;
    chown(
        path,
        Some(Uid::from_raw(owner.0)),
        Some(Gid::from_raw(owner.1)),
    )
    .map_err(|e| SetupError::nix(Step::Chown, path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_beneath_a_bind_source() {
        // The unit's namespace under systemd with ProtectKernelModules=yes (Debian 12 guest).
        let mountinfo = "\
22 1 254:0 / / ro,relatime shared:1 - ext4 /dev/vda rw
30 22 0:5 /null /usr/lib/modules ro,nosuid,nodev,noexec shared:2 - devtmpfs udev rw
31 22 0:26 / /usr2 rw - tmpfs tmpfs rw
32 22 0:27 / /run/vivarium rw - tmpfs tmpfs rw
33 30 0:28 / /usr/lib/modules/x rw - tmpfs tmpfs rw
";
        assert_eq!(
            mounts_beneath(mountinfo, Path::new("/usr")),
            ["/usr/lib/modules", "/usr/lib/modules/x"]
        );
        assert_eq!(
            mounts_beneath(mountinfo, Path::new("/usr/lib/")),
            ["/usr/lib/modules", "/usr/lib/modules/x"]
        );
        // The mount point itself is not beneath, nor is a sibling sharing the prefix.
        assert!(mounts_beneath(mountinfo, Path::new("/usr/lib/modules/x")).is_empty());
        assert!(mounts_beneath(mountinfo, Path::new("/bin")).is_empty());
        assert!(mounts_beneath("garbage\n\n", Path::new("/usr")).is_empty());
    }
}
