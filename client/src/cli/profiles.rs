//! `viv profiles`: what the daemon offers, and what this host lets it enforce.

use std::fmt::Write as _;
use std::path::Path;

use vivarium_client::proto::{MaxLimits, ProfileInfo};
use vivarium_client::{format_bytes, format_ms, Client, EXIT_REFUSED};

use super::report_error;

pub(crate) async fn profiles(socket: &Path, json: bool) -> i32 {
    let profiles = match fetch(socket).await {
        Ok(profiles) => profiles,
        Err(e) => {
            report_error(&e);
            return EXIT_REFUSED;
        }
    };
    if json {
        match serde_json::to_string_pretty(&profiles) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("viv: cannot encode the profiles as JSON: {e}");
                return EXIT_REFUSED;
            }
        }
    } else {
        print!("{}", format_profiles(&profiles));
    }
    0
}

pub(crate) async fn fetch(socket: &Path) -> vivarium_client::Result<Vec<ProfileInfo>> {
    Client::connect(socket).await?.list_profiles().await
}

/// `enabled`, or `disabled: <why>`.
pub(crate) fn status(profile: &ProfileInfo) -> String {
    match &profile.disabled {
        None => "enabled".to_owned(),
        Some(why) => format!("disabled: {why}"),
    }
}

fn format_max(max: &MaxLimits) -> String {
    format!(
        "wall {}, cpu {}, memory {}, pids {}, output {}",
        format_ms(max.wall_ms),
        format_ms(max.cpu_ms),
        format_bytes(max.memory_bytes),
        max.pids,
        format_bytes(max.output_bytes)
    )
}

/// One block per profile: the name and status, then indented details.
pub(crate) fn format_profiles(profiles: &[ProfileInfo]) -> String {
    if profiles.is_empty() {
        return "no profiles configured\n".to_owned();
    }
    let width = profiles.iter().map(|p| p.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for p in profiles {
        let _ = writeln!(out, "{:<width$}  {}", p.name, status(p));
        let indent = " ".repeat(width + 2);
        if !p.description.is_empty() {
            let _ = writeln!(out, "{indent}{}", p.description);
        }
        let network = if p.network { "allowed" } else { "none" };
        let _ = writeln!(out, "{indent}network: {network}");
        let _ = writeln!(out, "{indent}max: {}", format_max(&p.max));
        if !p.not_enforced.is_empty() {
            let _ = writeln!(out, "{indent}not enforced: {}", p.not_enforced.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing() {
        let profiles = vec![
            ProfileInfo {
                name: "default".into(),
                description: "no network".into(),
                disabled: None,
                network: false,
                max: MaxLimits {
                    wall_ms: 30_000,
                    cpu_ms: 10_000,
                    memory_bytes: 512 << 20,
                    pids: 64,
                    output_bytes: 1 << 20,
                },
                not_enforced: vec![],
            },
            ProfileInfo {
                name: "net".into(),
                description: String::new(),
                disabled: Some("landlock ABI 4 needed".into()),
                network: true,
                max: MaxLimits::default(),
                not_enforced: vec!["disk quota".into()],
            },
        ];
        assert_eq!(
            format_profiles(&profiles),
            "default  enabled\n\
             \x20        no network\n\
             \x20        network: none\n\
             \x20        max: wall 30.0s, cpu 10.0s, memory 512M, pids 64, output 1M\n\
             net      disabled: landlock ABI 4 needed\n\
             \x20        network: allowed\n\
             \x20        max: wall 0.0s, cpu 0.0s, memory 0B, pids 0, output 0B\n\
             \x20        not enforced: disk quota\n"
        );
    }
}
