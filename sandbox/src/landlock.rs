//! Landlock layer: filesystem, TCP and scoping rules for the payload, applied after
//! pivot_root (Landlock forbids later mounts) and before seccomp.

use crate::plan::LandlockPlan;
use crate::{SetupError, Step};
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use vivarium_proto::LandlockStatus;

fn err(step: Step, e: impl std::fmt::Display) -> SetupError {
    SetupError::Other {
        step,
        detail: e.to_string(),
    }
}

/// Restrict the calling thread (and its future children) to the plan.
///
/// The ABI comes from the profile, never from the running kernel, so the same profile
/// means the same rules everywhere. When the kernel is at least that ABI every
/// requested right is a hard requirement; below it (only profiles whose
/// `landlock_min_abi` allows it get here) the crate enforces what the kernel has and we
/// report `PartiallyEnforced`.
pub fn apply(plan: &LandlockPlan, kernel_abi: u32) -> Result<LandlockStatus, SetupError> {
    let abi = ABI::from(i32::from(plan.abi));
    let hard = kernel_abi >= u32::from(plan.abi);
    let level = if hard {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err(Step::LandlockFs, e))?;
    if plan.abi >= 4 && !plan.tcp_any {
        // Handled with no rule: every TCP bind and connect is denied (but the ports of
        // `tcp_connect`). Not for a private loopback (`tcp_any`): Landlock's TCP rules
        // name ports, not addresses, so there they could only forbid ports of the job's
        // own loopback; its network namespace is what keeps it there.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| err(Step::LandlockNet, e))?;
    }
    if plan.abi >= 6 {
        // Abstract unix sockets and signals only within this sandbox.
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| err(Step::LandlockScope, e))?;
    }
    let mut created = ruleset.create().map_err(|e| err(Step::LandlockCreate, e))?;
    let rule = |path: &std::path::Path, access| -> Result<_, SetupError> {
        let fd = PathFd::new(path).map_err(|e| err(Step::LandlockPath, e))?;
        Ok(PathBeneath::new(fd, access))
    };
    // Execute is granted only beneath the host binds: everywhere else (the writable
    // tmpfs mounts above all) Landlock backs up their noexec mount flag.
    let read = AccessFs::from_read(abi) & !AccessFs::Execute;
    for dir in &plan.read_dirs {
        created = created
            .add_rule(rule(dir, read)?)
            .map_err(|e| err(Step::LandlockRule, e))?;
    }
    for dir in &plan.exec_dirs {
        created = created
            .add_rule(rule(dir, AccessFs::from_read(abi))?)
            .map_err(|e| err(Step::LandlockRule, e))?;
    }
    for dir in &plan.write_dirs {
        created = created
            .add_rule(rule(dir, AccessFs::from_all(abi) & !AccessFs::Execute)?)
            .map_err(|e| err(Step::LandlockRule, e))?;
    }
    for file in &plan.write_files {
        created = created
            .add_rule(rule(file, AccessFs::ReadFile | AccessFs::WriteFile)?)
            .map_err(|e| err(Step::LandlockRule, e))?;
    }
    // A package install from an index: TCP connect to these ports only (the server
    // refuses such an install on a kernel below ABI 4, where this could not hold).
    for port in plan.tcp_connect.iter().filter(|_| !plan.tcp_any) {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| err(Step::LandlockNetRule, e))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| err(Step::LandlockRestrict, e))?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced if hard => LandlockStatus::FullyEnforced,
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => {
            LandlockStatus::PartiallyEnforced
        }
        RulesetStatus::NotEnforced => LandlockStatus::NotEnforced,
    })
}

/// What a profile written for `profile_abi` loses on a kernel with `kernel_abi`.
pub fn missing_features(profile_abi: u8, kernel_abi: u32) -> Vec<String> {
    const FEATURES: &[(u32, &str)] = &[
        (2, "landlock: file reparenting (refer) control (ABI 2)"),
        (3, "landlock: truncate control (ABI 3)"),
        (4, "landlock: TCP bind/connect rules (ABI 4)"),
        (5, "landlock: device ioctl control (ABI 5)"),
        (
            6,
            "landlock: abstract unix socket and signal scoping (ABI 6)",
        ),
    ];
    FEATURES
        .iter()
        .filter(|(abi, _)| *abi <= u32::from(profile_abi) && *abi > kernel_abi)
        .map(|(_, what)| (*what).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_features_by_abi() {
        assert!(missing_features(6, 7).is_empty());
        assert!(missing_features(6, 6).is_empty());
        assert_eq!(
            missing_features(6, 2),
            vec![
                "landlock: truncate control (ABI 3)",
                "landlock: TCP bind/connect rules (ABI 4)",
                "landlock: device ioctl control (ABI 5)",
                "landlock: abstract unix socket and signal scoping (ABI 6)",
            ]
        );
    }
}
