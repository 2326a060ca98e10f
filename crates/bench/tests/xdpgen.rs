//! The in-kernel generator and the counting sink on a `pair` lab: frames the generator sends
//! out of the client's veth reach the sink on the server's. Needs root (BPF, namespaces).

use std::time::Duration;

use wirespeed_bench::xdpgen::Gen;
use wirespeed_lab::topo::{Lab, LabSpec, Topology};

/// Asked from inside the namespace (sysfs would show the host's devices).
fn ifindex(ns: &str, dev: &str) -> u32 {
    let dev = dev.to_string();
    wirespeed_sys::netns::in_netns(ns, move || wirespeed_sys::packet::if_index(&dev))
        .unwrap()
        .unwrap()
}

/// A 60-byte UDP frame from the client to the server, MACs as given.
fn udp_frame(dst_mac: [u8; 6], src_mac: [u8; 6]) -> [u8; Gen::FRAME_LEN] {
    let mut f = [0u8; Gen::FRAME_LEN];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&46u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&1000u16.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

#[test]
fn generator_frames_reach_the_sink() {
    assert!(
        wirespeed_sys::process::is_root(),
        "this test needs root (BPF, namespaces): run it as root, e.g. `sudo make test`"
    );
    let lab = Lab::up(&LabSpec::new("xgen", Topology::Pair)).unwrap();
    let (c, s) = (lab.ns("c").unwrap(), lab.ns("s").unwrap());
    // The generator's XDP_TX needs NAPI on the sending veth; the sink's XDP program gives
    // the receiving one its own.
    c.exec("ethtool", &["-K", "eth0", "gro", "on"]).unwrap();
    let frame = udp_frame([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    let gen = std::sync::Arc::new(Gen::load(&frame).unwrap());
    let sink_if = ifindex(s.name(), "eth0");
    let g = gen.clone();
    let sink = wirespeed_sys::netns::in_netns(s.name(), move || g.attach_sink(sink_if))
        .unwrap()
        .unwrap();
    let src_if = ifindex(c.name(), "eth0");
    let g = gen.clone();
    let sent = wirespeed_sys::netns::in_netns(c.name(), move || {
        g.blast(&frame, src_if, Duration::from_millis(50))
    })
    .unwrap()
    .unwrap();
    let counted = gen.sink_count().unwrap();
    assert!(sent > 0, "the generator ran no frames");
    assert!(
        counted > 0 && counted <= sent,
        "the sink counted {counted} of {sent} frames sent"
    );
    drop(sink);
}
