//! Stateless TCP: flag combinations to a listening and a closed port, and the options and
//! header fields of a SYN.

use super::{ipv4_frame, syn_with, tcp_frame, Case, Script};
use crate::craft::flag_letters;
use crate::craft::{self, opt, Ip4, Tcp, ACK, CWR, DUT_IP, ECE, FIN, PSH, RST, SYN, URG};
use wirespeed_testkit::rng::Rng;

/// Flag combinations worth naming; the rest are drawn bit by bit.
const NAMED: [u8; 18] = [
    SYN,
    SYN | ACK,
    ACK,
    RST,
    RST | ACK,
    FIN,
    FIN | ACK,
    0,
    0xff,
    SYN | FIN,
    SYN | RST,
    SYN | URG,
    SYN | PSH,
    SYN | ECE | CWR,
    SYN | ECE,
    SYN | CWR,
    FIN | PSH | URG,
    PSH | ACK,
];

/// A segment with flags drawn from `NAMED` or at random, to `dport` (over IPv6 in an IPv6
/// case).
pub(super) fn flags(c: &mut Case, r: &mut Rng, dport: u16) {
    c.dport = dport;
    let flags = if r.one_in(3) {
        r.u32() as u8
    } else {
        r.pick(&NAMED)
    };
    let ack = if r.one_in(4) { 0 } else { r.u32() };
    let payload = if r.one_in(4) {
        b"X-Pad: conformance\r\n".to_vec()
    } else {
        Vec::new()
    };
    let options = if flags & SYN != 0 {
        opt::linux_syn(1460, r.u32(), 7)
    } else {
        Vec::new()
    };
    let seg = Tcp {
        sport: c.sport,
        dport,
        seq: c.our_isn,
        ack,
        flags,
        window: r.pick(&[64240, 0, 1, 65535]),
        urgent: if flags & URG != 0 { 1 } else { 0 },
        options,
        payload: payload.clone(),
        doff: None,
    };
    c.what = format!(
        "flags {} to port {dport}, ack field {ack:#x}, window {}, {} bytes of data",
        flag_letters(flags),
        seg.window,
        payload.len()
    );
    let f = tcp_frame(c, &seg);
    c.script = Script::Frames(vec![f]);
}

/// The options of a SYN to the listening port: a valid set in some order, plus one edge.
pub(super) fn options(c: &mut Case, r: &mut Rng) {
    let mut valid: Vec<(Vec<u8>, &str)> = vec![
        (opt::mss(1460), "mss"),
        (vec![4, 2], "sackok"),
        (opt::ts(r.u32(), 0)[2..].to_vec(), "ts"),
        (vec![3, 3, 7], "ws7"),
    ];
    let keep: Vec<(Vec<u8>, &str)> = valid.drain(..).filter(|_| !r.one_in(3)).collect();
    let (edge, edge_name) = option_edge(r);
    let mut opts = Vec::new();
    let mut names = Vec::new();
    let edge_first = r.one_in(2);
    if edge_first {
        opts.extend_from_slice(&edge);
        names.push(edge_name.clone());
    }
    for (o, n) in &keep {
        opts.extend_from_slice(o);
        names.push(n.to_string());
    }
    if !edge_first {
        opts.extend_from_slice(&edge);
        names.push(edge_name.clone());
    }
    opts.truncate(40);
    c.what = format!("SYN options [{}]", names.join(", "));
    let mut seg = syn_with(c, opts);
    if let Some((doff, name)) = doff_edge(r, seg.len()) {
        seg[12] = doff << 4;
        let sum = wirespeed_wire::checksum::transport(
            wirespeed_wire::Ipv4Addr(c.peer_ip),
            wirespeed_wire::Ipv4Addr(DUT_IP),
            craft::PROTO_TCP,
            &{
                let mut z = seg.clone();
                z[16] = 0;
                z[17] = 0;
                z
            },
        );
        seg[16..18].copy_from_slice(&sum.to_be_bytes());
        c.what.push_str(&format!(", {name}"));
    } else if r.one_in(12) {
        seg[17] ^= 0x01;
        c.what.push_str(", bad TCP checksum");
    }
    let f = ipv4_frame(&Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_TCP), &seg);
    c.script = Script::Frames(vec![f]);
}

/// One option edge: raw bytes and a name.
fn option_edge(r: &mut Rng) -> (Vec<u8>, String) {
    let mss = r.pick(&[0u16, 1, 88, 216, 536, 1200, 1460, 1461, 9000, 65535]);
    let shift = r.pick(&[0u8, 1, 14, 15, 255]);
    let mut md5 = vec![19, 18];
    md5.extend_from_slice(&[0xab; 16]);
    let mut ao = vec![29, 16, 1, 1];
    ao.extend_from_slice(&[0xcd; 12]);
    let edges: Vec<(Vec<u8>, String)> = vec![
        (vec![], "no edge".into()),
        (opt::mss(mss), format!("mss {mss}")),
        (vec![3, 3, shift], format!("ws {shift}")),
        (vec![3, 2], "ws truncated (length 2)".into()),
        (vec![3, 4, 7, 0], "ws length 4".into()),
        (vec![2, 3, 5], "mss length 3".into()),
        (
            vec![2, 4, 0x01, 0x00, 2, 4, 0x05, 0xb4],
            "mss twice (256, 1460)".into(),
        ),
        (vec![4, 3, 0], "sackok length 3".into()),
        (vec![8, 8, 0, 0, 0, 1, 0, 0], "ts length 8".into()),
        (vec![253, 0], "unknown option length 0".into()),
        (vec![253, 1], "unknown option length 1".into()),
        (vec![253, 255, 0, 0], "unknown option length 255".into()),
        (vec![253, 4, 0x12, 0x34], "experimental option 253".into()),
        (md5, "MD5 signature (kind 19)".into()),
        (ao, "TCP-AO (kind 29)".into()),
        (
            vec![30, 12, 0, 0x81, 0, 0, 0, 0, 0, 0, 0, 1],
            "MPTCP MP_CAPABLE".into(),
        ),
        (vec![34, 2], "fast open cookie request".into()),
        (vec![0, 2, 4, 5, 0xb4], "EOL then an MSS after it".into()),
        (vec![1; 12], "12 NOPs".into()),
    ];
    r.pick(&edges)
}

/// Sometimes a data offset that lies: below 5, or past the segment.
fn doff_edge(r: &mut Rng, seg_len: usize) -> Option<(u8, String)> {
    match r.below(10) {
        0 => Some((4, "data offset 4".into())),
        1 => {
            let past = (seg_len / 4 + 1).min(15) as u8;
            Some((past, format!("data offset {past} (past the segment)")))
        }
        2 => Some((5, "data offset 5 (options read as data)".into())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{one, Class};

    #[test]
    fn option_cases_fit_the_header_and_carry_their_edge() {
        for i in 0..200 {
            let c = one(5, i, Class::TcpOptions);
            let Script::Frames(f) = &c.script else {
                panic!("stateless")
            };
            let tcp = &f[0][34..];
            assert!(tcp.len() <= 60, "{}", c.what);
            assert!(c.what.starts_with("SYN options"));
        }
        let c = one(5, 0, Class::TcpClosed);
        assert_eq!(c.dport, craft::CLOSED_PORT);
        assert_eq!(FIN, 1);
    }
}
