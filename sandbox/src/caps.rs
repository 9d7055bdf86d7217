//! Capability layer: drop every capability (bounding set included) for the payload.

use crate::{SetupError, Step};
use caps::CapSet;

fn err(step: Step, e: caps::errors::CapsError) -> SetupError {
    SetupError::Other {
        step,
        detail: e.to_string(),
    }
}

/// Empty the bounding, ambient and inheritable sets. Must run while the thread still
/// holds CAP_SETPCAP (before the uid change), because dropping from the bounding set
/// needs it.
pub fn drop_bounding_ambient_inheritable() -> Result<(), SetupError> {
    caps::clear(None, CapSet::Bounding).map_err(|e| err(Step::CapsBounding, e))?;
    caps::clear(None, CapSet::Ambient).map_err(|e| err(Step::CapsAmbient, e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| err(Step::CapsInheritable, e))
}

/// Empty the effective and permitted sets (a no-op after a uid 0 -> non-zero change).
pub fn drop_permitted_effective() -> Result<(), SetupError> {
    caps::clear(None, CapSet::Effective).map_err(|e| err(Step::CapsEffective, e))?;
    caps::clear(None, CapSet::Permitted).map_err(|e| err(Step::CapsPermitted, e))
}

/// After setresuid to a non-zero uid the kernel clears the permitted and effective
/// sets; check that it did rather than trust it.
pub fn verify_none_left() -> Result<(), SetupError> {
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Bounding] {
        let held = caps::read(None, set).map_err(|e| err(Step::CapsVerify, e))?;
        if !held.is_empty() {
            return Err(SetupError::Other {
                step: Step::CapsVerify,
                detail: format!("{set:?} still holds {held:?}"),
            });
        }
    }
    Ok(())
}
