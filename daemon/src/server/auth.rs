//! Who may talk to the daemon: SO_PEERCRED's uid and primary gid, and SO_PEERGROUPS'
//! supplementary groups, against the config.

/// The identity of a connected peer, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Root and the daemon's own uid are always admitted; others by uid or by any group.
pub fn admitted(peer: &Peer, own_uid: u32, allow_uids: &[u32], allow_gids: &[u32]) -> bool {
    peer.uid == 0
        || peer.uid == own_uid
        || allow_uids.contains(&peer.uid)
        || allow_gids.contains(&peer.gid)
        || peer.groups.iter().any(|g| allow_gids.contains(g))
}

/// A configured group name that is neither a gid nor a group of this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown group {name:?} in allow_groups")]
pub struct UnknownGroup {
    pub name: String,
}

/// Resolve configured group names (or numeric gids) to gids.
pub fn resolve_groups(names: &[String]) -> Result<Vec<u32>, UnknownGroup> {
    names
        .iter()
        .map(|n| {
            if let Ok(gid) = n.parse::<u32>() {
                return Ok(gid);
            }
            match nix::unistd::Group::from_name(n) {
                Ok(Some(g)) => Ok(g.gid.as_raw()),
                _ => Err(UnknownGroup { name: n.clone() }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn admission_rules() {
        assert!(admitted(&peer(0, 0, &[]), 1000, &[], &[]));
        assert!(admitted(&peer(1000, 1000, &[]), 1000, &[], &[]));
        assert!(!admitted(&peer(1001, 1001, &[]), 1000, &[], &[]));
        assert!(admitted(&peer(1001, 1001, &[]), 1000, &[1001], &[]));
        assert!(admitted(&peer(1001, 500, &[]), 1000, &[], &[500]));
        // Supplementary groups count (SO_PEERGROUPS), not only the primary gid.
        assert!(admitted(&peer(1001, 1001, &[20, 500]), 1000, &[], &[500]));
        assert!(!admitted(&peer(1001, 1001, &[20]), 1000, &[], &[500]));
    }

    #[test]
    fn groups_resolve_by_name_or_number() {
        assert_eq!(
            resolve_groups(&["0".into(), "root".into()]).unwrap(),
            vec![0, 0]
        );
        assert!(resolve_groups(&["no-such-group-xyz".into()]).is_err());
    }
}
