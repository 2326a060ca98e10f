//! The in-kernel generator and the counting sink on a `pair` lab: frames the generator sends
//! out of the client's veth reach the sink on the server's. Needs root (BPF, namespaces).

use std::time::Duration;

use wirespeed_bench::xdpgen::{Expect, Gen};
use wirespeed_lab::topo::{Lab, LabSpec, Topology};

/// Asked from inside the namespace (sysfs would show the host's devices).
fn ifindex(ns: &str, dev: &str) -> u32 {
    let dev = dev.to_string();
    wirespeed_sys::netns::in_netns(ns, move || wirespeed_sys::packet::if_index(&dev))
        .unwrap()
        .unwrap()
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|w| u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32)
        .sum()
}

/// A 60-byte TCP SYN from 198.18.0.0 port 0 (the generator fills both in) to 198.18.0.2:80.
fn syn_frame(dst_mac: [u8; 6], src_mac: [u8; 6]) -> [u8; Gen::FRAME_LEN] {
    let mut f = [0u8; Gen::FRAME_LEN];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&40u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[198, 18, 0, 0]);
    f[30..34].copy_from_slice(&[198, 18, 0, 2]);
    let ip = !fold(sum16(&f[14..34]));
    f[24..26].copy_from_slice(&ip.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = 0x02; // SYN
    f[48..50].copy_from_slice(&64240u16.to_be_bytes());
    let l4 = !fold(sum16(&f[26..34]) + 6 + 20 + sum16(&f[34..54]));
    f[50..52].copy_from_slice(&l4.to_be_bytes());
    f
}

/// Whether the IPv4 header and TCP checksums of `f` are right.
fn checksums_ok(f: &[u8]) -> bool {
    fold(sum16(&f[14..34])) == 0xffff
        && fold(sum16(&f[26..34]) + 6 + 20 + sum16(&f[34..54])) == 0xffff
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
    // The kernel's own frames (IPv6 neighbour discovery) may reach the sink too.
    assert!(counted > 0, "the sink counted none of {sent} frames sent");
    assert_eq!(
        gen.sink_matched().unwrap(),
        counted,
        "with no expectation every frame matches"
    );

    // Exactly n frames, run on the sink's own interface: the sink sees each one.
    let g = gen.clone();
    let run = move |frame: [u8; Gen::FRAME_LEN], n: u32| {
        let g = g.clone();
        wirespeed_sys::netns::in_netns(s.name(), move || g.receive_count(&frame, sink_if, n))
            .unwrap()
            .unwrap()
    };
    gen.expect(&[Expect::bytes(30, &[198, 18, 0, 2])]).unwrap();
    let (c0, m0) = (gen.sink_count().unwrap(), gen.sink_matched().unwrap());
    run(frame, 100);
    let (c1, m1) = (gen.sink_count().unwrap(), gen.sink_matched().unwrap());
    assert_eq!(m1 - m0, 100, "matched ({} counted)", c1 - c0);

    // Frames that do not look as expected are counted, not matched.
    gen.expect(&[Expect::masked(30, [198, 19, 0, 0], [255, 255, 0, 0])])
        .unwrap();
    run(frame, 10);
    assert!(gen.sink_count().unwrap() - c1 >= 10);
    assert_eq!(gen.sink_matched().unwrap(), m1);

    // Distinct sources: each SYN gets its own source octet and port, checksums still right;
    // the sample is the first frame after arming. (The generator writes its own frames over
    // the one a run starts from.)
    gen.expect(&[]).unwrap();
    let syn = syn_frame([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    gen.set_frames(&[syn]).unwrap();
    gen.distinct_sources(Some(50)).unwrap();
    gen.arm_sample().unwrap();
    assert_eq!(gen.sample().unwrap(), None);
    run(syn, 3);
    let first = gen.sample().unwrap().expect("a sample");
    assert_eq!(first.len(), Gen::FRAME_LEN);
    assert_eq!(first[29], 1, "source octet of the first frame");
    assert_eq!(u16::from_be_bytes([first[34], first[35]]), 1024);
    assert!(checksums_ok(&first), "checksums of {first:02x?}");
    gen.arm_sample().unwrap();
    run(syn, 1);
    let next = gen.sample().unwrap().expect("a sample");
    assert_eq!(next[29], 4, "the fourth frame's source octet");
    assert!(checksums_ok(&next), "checksums of {next:02x?}");
    gen.distinct_sources(None).unwrap();
    gen.set_frames(&[]).unwrap();
    drop(sink);
}
