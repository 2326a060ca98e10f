//! The in-kernel generator and the counting sink on a `pair` lab: frames the generator sends
//! out of the client's veth reach the sink on the server's. Needs root (BPF, namespaces).

use std::time::Duration;

use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_testkit::csum;
use wirespeed_testkit::frame::{eth, ip_packet, ip_packet_with, IpHeader, Tcp, L4, SYN};
use wirespeed_xdpgen::{Expect, Gen};

/// Asked from inside the namespace (sysfs would show the host's devices).
fn ifindex(ns: &str, dev: &str) -> u32 {
    let dev = dev.to_string();
    wirespeed_sys::netns::in_netns(ns, move || wirespeed_sys::packet::if_index(&dev))
        .unwrap()
        .unwrap()
}

/// `f` grown to `N` bytes with zeros (Ethernet's minimum frame pads the IP packet).
fn padded<const N: usize>(f: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out[..f.len()].copy_from_slice(f);
    out
}

/// A TCP SYN from port 0 (the generator fills it in) to port 80, window 64240.
fn syn() -> L4 {
    L4::Tcp(Tcp {
        sport: 0,
        dport: 80,
        flags: SYN,
        seq: 0,
        window: 64240,
        ..Tcp::default()
    })
}

/// A 60-byte TCP SYN from 198.18.0.0 port 0 (the generator fills both in) to 198.18.0.2:80.
fn syn_frame(dst_mac: [u8; 6], src_mac: [u8; 6]) -> [u8; Gen::FRAME_LEN] {
    let h = IpHeader {
        dont_frag: false,
        ..IpHeader::default()
    };
    let p = ip_packet_with([198, 18, 0, 0].into(), [198, 18, 0, 2].into(), &syn(), &h);
    padded(&eth(dst_mac, src_mac, false, &p))
}

/// Whether the IPv4 header and TCP checksums of the padded 60-byte SYN `f` are right.
fn checksums_ok(f: &[u8]) -> bool {
    csum::checksums_ok(&f[..14 + 40])
}

/// A 60-byte UDP frame from the client to the server, MACs as given.
fn udp_frame(dst_mac: [u8; 6], src_mac: [u8; 6]) -> [u8; Gen::FRAME_LEN] {
    let h = IpHeader {
        dont_frag: false,
        ..IpHeader::default()
    };
    let l4 = L4::Udp {
        sport: 1000,
        dport: 2000,
        payload: vec![0; 18],
    };
    let p = ip_packet_with([198, 18, 0, 1].into(), [198, 18, 0, 2].into(), &l4, &h);
    padded(&eth(dst_mac, src_mac, false, &p))
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

/// A 74-byte TCP SYN over IPv6 from `src` (fd00:1::/112 by default: the generator fills in
/// the low 16 bits and the port) to fd00::2 port 80.
fn syn6_frame_from(dst_mac: [u8; 6], src_mac: [u8; 6], src: &str) -> [u8; 74] {
    let p = ip_packet(src.parse().unwrap(), "fd00::2".parse().unwrap(), &syn());
    padded(&eth(dst_mac, src_mac, true, &p))
}

fn syn6_frame(dst_mac: [u8; 6], src_mac: [u8; 6]) -> [u8; 74] {
    syn6_frame_from(dst_mac, src_mac, "fd00:1::")
}

/// Whether the TCP checksum of the IPv6 SYN `f` is right (IPv6 has no header checksum).
fn checksum6_ok(f: &[u8]) -> bool {
    csum::checksums_ok(f)
}

#[test]
fn generator_varies_ipv6_sources() {
    assert!(
        wirespeed_sys::process::is_root(),
        "this test needs root (BPF, namespaces): run it as root, e.g. `sudo make test`"
    );
    // Frame lengths and offsets the generator refuses.
    assert!(Gen::load_frame(&[0u8; Gen::FRAME_LEN - 1]).is_err());
    assert!(Gen::load_frame(&[0u8; Gen::MAX_FRAME_LEN + 1]).is_err());
    let short = Gen::load(&[0u8; Gen::FRAME_LEN]).unwrap();
    assert!(
        short.distinct_sources(Some(70)).is_err(),
        "past a 60-byte frame"
    );
    drop(short);

    let lab = Lab::up(&LabSpec::new("xgen6", Topology::Pair)).unwrap();
    let (c, s) = (lab.ns("c").unwrap(), lab.ns("s").unwrap());
    c.exec("ethtool", &["-K", "eth0", "gro", "on"]).unwrap();
    let syn = syn6_frame([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    assert!(checksum6_ok(&syn));
    let gen = std::sync::Arc::new(Gen::load_frame(&syn).unwrap());
    assert_eq!(gen.frame_len(), 74);
    assert!(
        gen.set_frames(&[[0u8; Gen::FRAME_LEN]]).is_err(),
        "60 bytes"
    );
    let sink_if = ifindex(s.name(), "eth0");
    let g = gen.clone();
    let sink = wirespeed_sys::netns::in_netns(s.name(), move || g.attach_sink(sink_if))
        .unwrap()
        .unwrap();

    // Out of the client's veth, all 74 bytes as given.
    gen.expect(&[
        Expect::bytes(12, &[0x86, 0xdd, 0x60, 0]),
        Expect::bytes(70, &syn[70..72]),
    ])
    .unwrap();
    let src_if = ifindex(c.name(), "eth0");
    let g = gen.clone();
    let sent = wirespeed_sys::netns::in_netns(c.name(), move || {
        g.blast(&syn, src_if, Duration::from_millis(50))
    })
    .unwrap()
    .unwrap();
    assert!(sent > 0, "the generator ran no frames");
    assert!(
        gen.sink_matched().unwrap() > 0,
        "none of {sent} frames matched"
    );
    gen.expect(&[]).unwrap();

    // Distinct sources: each SYN its own low 16 bits of the address and its own port, the TCP
    // checksum still right; the table's frames (here two /64s) take turns (on each CPU: the
    // runs stay on CPU 0).
    let g = gen.clone();
    let run = move |frame: [u8; 74], n: u32| {
        let g = g.clone();
        wirespeed_sys::netns::in_netns(s.name(), move || {
            wirespeed_sys::process::set_affinity(&[0]).unwrap();
            g.receive_count(&frame, sink_if, n)
        })
        .unwrap()
        .unwrap()
    };
    let other = syn6_frame_from([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], "fd00:1:0:7::");
    gen.set_frame_table(&[syn, other]).unwrap();
    gen.distinct_sources(Some(70)).unwrap();
    gen.arm_sample().unwrap();
    run(syn, 3);
    let first = gen.sample().unwrap().expect("a sample");
    assert_eq!(first.len(), 74);
    assert_eq!(&first[22..36], &syn[22..36], "the address's upper 112 bits");
    assert_eq!(u16::from_be_bytes([first[36], first[37]]), 1, "low 16 bits");
    assert_eq!(
        u16::from_be_bytes([first[54], first[55]]),
        1024,
        "source port"
    );
    assert!(checksum6_ok(&first), "checksum of {first:02x?}");
    gen.arm_sample().unwrap();
    run(syn, 1);
    let next = gen.sample().unwrap().expect("a sample");
    assert_eq!(next[29], 7, "the fourth frame is the table's second");
    assert_eq!(u16::from_be_bytes([next[36], next[37]]), 4);
    assert!(checksum6_ok(&next), "checksum of {next:02x?}");
    // After 65535 frames the low bits come round again, with the next port.
    run(syn, 65535 - 1);
    gen.arm_sample().unwrap();
    run(syn, 1);
    let moved = gen.sample().unwrap().expect("a sample");
    assert_eq!(
        u16::from_be_bytes([moved[36], moved[37]]),
        4,
        "the 65539th frame"
    );
    assert_eq!(u16::from_be_bytes([moved[54], moved[55]]), 1025);
    assert!(checksum6_ok(&moved), "checksum of {moved:02x?}");
    gen.distinct_sources(None).unwrap();
    gen.set_frame_table::<[u8; 74]>(&[]).unwrap();

    // Every length from 60 to the longest arrives whole, from the loaded frame and from the
    // table (the sample: the frame as it reached this generator's sink).
    for len in [61, 62, 63, 67, 74, 79, 80, 95, Gen::MAX_FRAME_LEN] {
        let mut frame: Vec<u8> = (0..len as u8).map(|b| b ^ 0xa5).collect();
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        let other = std::sync::Arc::new(Gen::load_frame(&frame).unwrap());
        let mut table = frame.clone();
        table[len - 1] ^= 0xff;
        for expected in [&frame, &table] {
            if expected == &table {
                other.set_frame_table(&[&table]).unwrap();
            }
            gen.arm_sample().unwrap();
            let (g, f) = (other.clone(), frame.clone());
            wirespeed_sys::netns::in_netns(s.name(), move || g.receive_count(&f, sink_if, 1))
                .unwrap()
                .unwrap();
            let got = gen.sample().unwrap().expect("a sample");
            assert_eq!(&got, expected, "a {len}-byte frame");
        }
    }
    drop(sink);
}
