//! Asking a lab namespace about its devices, as tests repeat it.

use wirespeed_lab::Netns;

/// The ifindex of `ifname` in `ns` (from sysfs, read inside the namespace).
pub fn ifindex(ns: &Netns, ifname: &str) -> u32 {
    ns.exec("cat", &[&format!("/sys/class/net/{ifname}/ifindex")])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The MAC address of `ifname` in `ns`.
pub fn mac(ns: &Netns, ifname: &str) -> [u8; 6] {
    let s = ns
        .exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
        .unwrap();
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// `m` written aa:bb:cc:dd:ee:ff, as `ip` takes it.
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
