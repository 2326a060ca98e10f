//! A device's offload features by name, as `ethtool -k` shows them: the legacy SIOCETHTOOL
//! calls (ETHTOOL_GSSET_INFO and ETHTOOL_GSTRINGS for the names, ETHTOOL_GFEATURES for the
//! bits). The bit positions are the kernel's internal `netdev_features` order, which changes
//! between versions, so they are only ever read through the names. The calls need no
//! capability; the device is looked up in the calling thread's network namespace.

use std::collections::BTreeSet;
use std::io;

use crate::iface::ethtool;

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// The names of the features the kernel has, in bit order (the ETH_SS_FEATURES string set):
/// the same for every device of a kernel, so read once and kept.
#[derive(Debug, Clone)]
pub struct FeatureNames(Vec<String>);

impl FeatureNames {
    /// Reads the feature names through device `ifname` (any device will do).
    pub fn read(ifname: &str) -> io::Result<FeatureNames> {
        // struct ethtool_sset_info { cmd, reserved, u64 sset_mask, u32 data[] }
        let mut info = [ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0, 0];
        ethtool(ifname, &mut info)?;
        let count = info[4] as usize;
        // struct ethtool_gstrings { cmd, string_set, len, u8 data[len * 32] }
        let mut buf = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
        buf[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count as u32]);
        ethtool(ifname, &mut buf)?;
        let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let names = bytes
            .chunks(ETH_GSTRING_LEN)
            .map(|c| {
                let end = c.iter().position(|b| *b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect();
        Ok(FeatureNames(names))
    }

    /// The features active on `ifname`, by name (`rx-lro`, `rx-vlan-hw-parse`, ...).
    pub fn active(&self, ifname: &str) -> io::Result<BTreeSet<String>> {
        let blocks = self.0.len().div_ceil(32);
        // struct ethtool_gfeatures { cmd, size, { available, requested, active,
        // never_changed } [size] }
        let mut buf = vec![0u32; 2 + 4 * blocks];
        buf[..2].copy_from_slice(&[ETHTOOL_GFEATURES, blocks as u32]);
        ethtool(ifname, &mut buf)?;
        Ok(active_names(&self.0, &buf[2..]))
    }
}

/// The names whose bit is set in the `active` word of their block.
fn active_names(names: &[String], blocks: &[u32]) -> BTreeSet<String> {
    names
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            blocks
                .get(4 * (i / 32) + 2)
                .is_some_and(|active| active & (1 << (i % 32)) != 0)
        })
        .map(|(_, n)| n.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_active_where_its_blocks_active_word_says_so() {
        let names: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
        // Block 0: bit 3 available and requested but not active, bit 5 active; block 1: bit 1
        // (feature 33) active.
        let blocks = [1 << 3 | 1 << 5, 1 << 3, 1 << 5, 0, 0, 0, 1 << 1, 0];
        let on = active_names(&names, &blocks);
        assert_eq!(on.into_iter().collect::<Vec<_>>(), ["f33", "f5"]);
        assert!(
            active_names(&names, &blocks[..4]).contains("f5"),
            "short answer"
        );
    }

    #[test]
    fn loopback_reports_its_features_by_name() {
        let names = FeatureNames::read("lo").expect("ETHTOOL_GSSET_INFO on lo");
        let on = names.active("lo").unwrap();
        // The kernel's loopback always has these (NETIF_F_LOOPBACK is "loopback").
        assert!(on.contains("loopback"), "{on:?}");
        assert!(!on.contains("rx-lro"), "{on:?}");
        assert!(names.active("no-such-dev0").is_err());
    }
}
