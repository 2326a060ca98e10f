//! Netfilter hooks of others on the forwarding path, besides nftables, the legacy x_tables and
//! conntrack (which the filter reads): IPVS's and SELinux's. Neither sends an event, so both
//! are polled with the rest of the state that has none. docs/FASTPATH.md, "What the
//! forwarding path consults" (nf).
//!
//! IPVS registers its hooks in a namespace, per family, while that family has a virtual
//! service (`ip_vs_add_service`, Linux 5.9+); its FORWARD hooks rewrite the replies of the
//! connections it NATs and the ICMP errors about them. SELinux registers a FORWARD hook in
//! every namespace, which acts only where peer controls are on and secmark or peer labeling
//! are in use (`selinux_ip_forward`); `always_check_network` turns both on.

use std::path::Path;

/// What the others' hooks would do to forwarded packets, as far as it can be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardHooks {
    /// IPVS virtual services, by family ([IPv4, IPv6]); a firewall-mark service, whose
    /// family /proc/net/ip_vs does not show, counts in both.
    pub ipvs: [u32; 2],
    /// SELinux checks every forwarded packet (policy capabilities `network_peer_controls`
    /// and `always_check_network`).
    pub selinux_checks_all: bool,
}

impl ForwardHooks {
    /// Reads this namespace's IPVS services and the host's SELinux policy capabilities.
    pub fn read() -> ForwardHooks {
        let ipvs = std::fs::read_to_string("/proc/thread-self/net/ip_vs")
            .map(|t| ipvs_services(&t))
            .unwrap_or_default();
        ForwardHooks {
            ipvs,
            selinux_checks_all: selinux_checks_all(Path::new("/sys/fs/selinux")),
        }
    }

    /// Why family `v6` (false: IPv4) must be forwarded by the kernel, if it must.
    pub fn hands_off(&self, v6: bool) -> Option<String> {
        let n = self.ipvs[usize::from(v6)];
        if n > 0 {
            return Some(format!(
                "{n} IPVS virtual services (its FORWARD hooks rewrite the replies it NATs)"
            ));
        }
        self.selinux_checks_all
            .then(|| "SELinux checks every forwarded packet (always_check_network)".to_string())
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

/// Whether SELinux, enabled, has both policy capabilities that make its FORWARD hook check
/// every packet (selinuxfs at `root`: absent where SELinux is off or not mounted).
pub fn selinux_checks_all(root: &Path) -> bool {
    let cap = |name: &str| {
        std::fs::read_to_string(root.join("policy_capabilities").join(name))
            .is_ok_and(|v| v.trim() == "1")
    };
    root.join("enforce").exists() && cap("network_peer_controls") && cap("always_check_network")
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
            selinux_checks_all: false,
        };
        assert!(h
            .hands_off(false)
            .unwrap()
            .contains("1 IPVS virtual services"));
        assert_eq!(h.hands_off(true), None);
    }

    #[test]
    fn selinux_hands_off_only_with_both_capabilities() {
        let root = std::env::temp_dir().join(format!("ws-selinuxfs-{}", std::process::id()));
        let caps = root.join("policy_capabilities");
        std::fs::create_dir_all(&caps).unwrap();
        let set = |name: &str, v: &str| std::fs::write(caps.join(name), v).unwrap();
        assert!(!selinux_checks_all(&root), "no enforce file: SELinux off");
        std::fs::write(root.join("enforce"), "1").unwrap();
        set("network_peer_controls", "1");
        set("always_check_network", "0");
        assert!(!selinux_checks_all(&root));
        set("always_check_network", "1");
        assert!(selinux_checks_all(&root));
        set("network_peer_controls", "0");
        assert!(!selinux_checks_all(&root));
        std::fs::remove_dir_all(&root).unwrap();
        assert!(!selinux_checks_all(Path::new("/nonexistent")));
    }
}
