//! Netfilter hooks of others on the forwarding path, besides nftables, the legacy x_tables and
//! conntrack (which the filter reads): IPVS's and SELinux's. Neither sends an event, so both
//! are polled with the rest of the state that has none. docs/FASTPATH.md, "What the
//! forwarding path consults" (nf).
//!
//! IPVS registers its hooks in a namespace, per family, while that family has a virtual
//! service (`ip_vs_add_service`, Linux 5.9+); its FORWARD hooks rewrite the replies of the
//! connections it NATs and the ICMP errors about them. SELinux registers a FORWARD hook in
//! every namespace, which acts only where the policy's `network_peer_controls` is on and
//! secmark or peer labeling is in use (`selinux_ip_forward`); `always_check_network` turns
//! both on. Whether secmark rules (counted across every namespace), NetLabel labeling or
//! labeled IPsec are in use cannot be read, so with peer controls on, the families are the
//! kernel's unless the operator says none is (`fp run --assume-no-selinux-labels`).

use std::path::Path;

/// What the others' hooks would do to forwarded packets, as far as it can be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardHooks {
    /// IPVS virtual services, by family ([IPv4, IPv6]); a firewall-mark service, whose
    /// family /proc/net/ip_vs does not show, counts in both.
    pub ipvs: [u32; 2],
    /// What SELinux's FORWARD hook does.
    pub selinux: Selinux,
}

/// SELinux's FORWARD hook, as its policy capabilities say (selinuxfs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Selinux {
    /// Off, or peer controls off: the hook accepts every forwarded packet at once.
    #[default]
    Passes,
    /// `network_peer_controls`: it checks forwarded packets where secmark, NetLabel or
    /// labeled IPsec is in use, which cannot be read.
    ChecksIfLabeled,
    /// `network_peer_controls` and `always_check_network`: it checks every one.
    ChecksAll,
}

impl ForwardHooks {
    /// Reads this namespace's IPVS services and the host's SELinux policy capabilities.
    pub fn read() -> ForwardHooks {
        let ipvs = std::fs::read_to_string("/proc/thread-self/net/ip_vs")
            .map(|t| ipvs_services(&t))
            .unwrap_or_default();
        ForwardHooks {
            ipvs,
            selinux: selinux(Path::new("/sys/fs/selinux")),
        }
    }

    /// Why family `v6` (false: IPv4) must be forwarded by the kernel, if it must; the
    /// operator may have said no SELinux label is in use (`assume_no_labels`).
    pub fn hands_off(&self, v6: bool, assume_no_labels: bool) -> Option<String> {
        let n = self.ipvs[usize::from(v6)];
        if n > 0 {
            return Some(format!(
                "{n} IPVS virtual services (its FORWARD hooks rewrite the replies it NATs)"
            ));
        }
        match self.selinux {
            Selinux::Passes => None,
            Selinux::ChecksIfLabeled if assume_no_labels => None,
            Selinux::ChecksIfLabeled => Some(
                "SELinux's network_peer_controls may check forwarded packets (where secmark, NetLabel or labeled IPsec is in use, which fp cannot read: --assume-no-selinux-labels if none is)"
                    .into(),
            ),
            Selinux::ChecksAll => {
                Some("SELinux checks every forwarded packet (always_check_network)".into())
            }
        }
    }
}

/// Virtual services per family in `/proc/net/ip_vs` (`ip_vs_info_seq_show`: three header
/// lines, a line per service, `  -> ` lines for its real servers).
pub fn ipvs_services(text: &str) -> [u32; 2] {
    let mut n = [0, 0];
    for line in text.lines().skip(3) {
        let mut f = line.split_whitespace();
        match (f.next(), f.next()) {
            (Some("FWM"), _) => {
                n[0] += 1;
                n[1] += 1;
            }
            (Some("TCP" | "UDP" | "SCTP"), Some(addr)) => {
                n[usize::from(addr.starts_with('['))] += 1
            }
            _ => {}
        }
    }
    n
}

/// What SELinux's FORWARD hook does, from selinuxfs at `root` (absent where SELinux is off; a
/// mount namespace that hides it hides SELinux too: served as if it were off).
pub fn selinux(root: &Path) -> Selinux {
    let cap = |name: &str| {
        std::fs::read_to_string(root.join("policy_capabilities").join(name))
            .is_ok_and(|v| v.trim() == "1")
    };
    if !root.join("enforce").exists() || !cap("network_peer_controls") {
        Selinux::Passes
    } else if cap("always_check_network") {
        Selinux::ChecksAll
    } else {
        Selinux::ChecksIfLabeled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipvs_services_are_counted_by_family() {
        let proc = "IP Virtual Server version 1.2.1 (size=4096)\n\
            Prot LocalAddress:Port Scheduler Flags\n  \
            -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
            TCP  C6120001:0050 rr \n  \
            -> C6120102:0050      Masq    1      0          0         \n\
            UDP  [fd00:0001:0000:0000:0000:0000:0000:0001]:0035 rr \n\
            FWM  00000007 wlc \n";
        assert_eq!(ipvs_services(proc), [2, 2]);
        let header_only = proc.lines().take(3).collect::<Vec<_>>().join("\n");
        assert_eq!(ipvs_services(&header_only), [0, 0]);
        let h = ForwardHooks {
            ipvs: [1, 0],
            selinux: Selinux::Passes,
        };
        assert!(h
            .hands_off(false, false)
            .unwrap()
            .contains("1 IPVS virtual services"));
        assert_eq!(h.hands_off(true, false), None);
    }

    #[test]
    fn selinux_is_read_from_its_policy_capabilities() {
        let root = std::env::temp_dir().join(format!("ws-selinuxfs-{}", std::process::id()));
        let caps = root.join("policy_capabilities");
        std::fs::create_dir_all(&caps).unwrap();
        let set = |name: &str, v: &str| std::fs::write(caps.join(name), v).unwrap();
        set("network_peer_controls", "1");
        assert_eq!(
            selinux(&root),
            Selinux::Passes,
            "no enforce file: SELinux off"
        );
        std::fs::write(root.join("enforce"), "0").unwrap();
        set("always_check_network", "0");
        assert_eq!(
            selinux(&root),
            Selinux::ChecksIfLabeled,
            "permissive checks too"
        );
        set("always_check_network", "1");
        assert_eq!(selinux(&root), Selinux::ChecksAll);
        set("network_peer_controls", "0");
        assert_eq!(selinux(&root), Selinux::Passes);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(selinux(Path::new("/nonexistent")), Selinux::Passes);
        let h = |selinux| ForwardHooks {
            ipvs: [0, 0],
            selinux,
        };
        assert!(h(Selinux::ChecksIfLabeled).hands_off(true, false).is_some());
        assert_eq!(h(Selinux::ChecksIfLabeled).hands_off(true, true), None);
        assert!(h(Selinux::ChecksAll).hands_off(false, true).is_some());
    }
}
