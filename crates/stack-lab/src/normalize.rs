//! What a DUT sent, as named fields that compare across the twins.
//!
//! Normalization (docs/TCPIP.md, "Conformance against Linux"):
//! - sequence numbers relative: `d+N` from the DUT's ISN (its SYN-ACK in this case), `p+N`
//!   from ours (the same on both twins); a value near neither is shown raw, and equal raw
//!   values mean the DUT copied a field we chose (an RST's SEQ from our ACK);
//! - timestamps: the DUT's TSval is not compared (each side's clock); its TSecr is relative
//!   to our first TSval (`t+N`, ours are the same on both twins);
//! - window values by class (`zero` / `nonzero`), window scale by presence: both are the
//!   receiver's own sizing;
//! - IP ID not compared; header, TCP, UDP and ICMP checksums validated, not compared (a
//!   partial checksum, what a veth sender with TX offload leaves, counts as valid);
//! - the DUT's MAC is the same on both twins by construction, and compared anyway;
//! - IPv6: the flow label as `0`, `copied` (the label the case sent) or `auto` (another
//!   non-zero value: Linux's hash of the flow, auto_flowlabels); hop limit and traffic class
//!   as they are; extension headers by type; ICMPv6 checksums validated (pseudo-header), and
//!   neighbour discovery's target and options named (`nd.target`, `nd.opts`).

use wirespeed_wire::checksum::{self, TransportChecksum};
use wirespeed_wire::IpAddress;
use wirespeed_wire::Ipv4Addr as WireIp;
use wirespeed_wire::Ipv6Addr as WireIp6;

use crate::craft::flag_letters;
use crate::craft::{ETH_ARP, ETH_IPV4, ETH_IPV6, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};

/// The bases that relative values are taken from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bases {
    pub our_isn: Option<u32>,
    pub dut_isn: Option<u32>,
    pub our_ts: Option<u32>,
    /// A stateful case: our segments' ACK fields were taken from the DUT's sequence space,
    /// so a far SEQ the DUT sends (an RST's, copied from our ACK field) is still relative to
    /// its ISN, and a far ACK to ours. In a stateless case every field we sent is the same
    /// on both twins, and a far value is shown raw.
    pub flow: bool,
    /// The IPv6 flow label the case sent (0: none).
    pub flow6: u32,
}

/// One reply as ordered `(field, value)` pairs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    pub fields: Vec<(&'static str, String)>,
}

impl Reply {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    fn put(&mut self, key: &'static str, value: impl Into<String>) {
        self.fields.push((key, value.into()));
    }

    /// Replaces the value of an existing field (the table of known differences aligns a
    /// field it explains).
    pub fn set(&mut self, key: &str, value: String) {
        if let Some(f) = self.fields.iter_mut().find(|(k, _)| *k == key) {
            f.1 = value;
        }
    }

    /// True for a TCP segment that carries data or a FIN (what a retransmission repeats).
    pub fn carries_data_or_fin(&self) -> bool {
        self.get("tcp.len").is_some_and(|l| l != "0")
            || self.tcp_flags().is_some_and(|f| f.contains('F'))
    }

    /// `k=v k=v ...`, the form printed and stored in JSON.
    pub fn line(&self) -> String {
        self.fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// TCP flags as letters, if a TCP reply.
    pub fn tcp_flags(&self) -> Option<&str> {
        self.get("tcp.flags")
    }

    pub fn is_arp(&self) -> bool {
        self.get("eth.type") == Some("arp")
    }

    pub fn icmp_type(&self) -> Option<u8> {
        self.get("icmp.type").and_then(|t| t.parse().ok())
    }

    pub fn icmp6_type(&self) -> Option<u8> {
        self.get("icmp6.type").and_then(|t| t.parse().ok())
    }

    pub fn is_v6(&self) -> bool {
        self.get("eth.type") == Some("ipv6")
    }
}

/// The TCP fields the harness itself follows (connection tracking, cleanup).
#[derive(Debug, Clone, Default)]
pub struct TcpSeen {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub payload_len: usize,
    pub tsval: Option<u32>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The IPv4 packet inside an Ethernet frame (no VLAN tag): (header length, packet bytes up
/// to the total length).
fn ipv4_of(frame: &[u8]) -> Option<(usize, &[u8])> {
    if frame.len() < 34 || be16(frame, 12) != ETH_IPV4 {
        return None;
    }
    let p = &frame[14..];
    let hl = ((p[0] & 0x0f) as usize) * 4;
    let total = (be16(p, 2) as usize).min(p.len());
    if hl < 20 || total < hl {
        return None;
    }
    Some((hl, &p[..total]))
}

/// The IPv6 packet inside an Ethernet frame: the packet up to its payload length, the
/// upper-layer protocol and where it starts (after the extension headers), and the
/// extension headers by name.
fn ipv6_of(frame: &[u8]) -> Option<(&[u8], u8, usize, Vec<String>)> {
    if frame.len() < 54 || be16(frame, 12) != ETH_IPV6 {
        return None;
    }
    let p = &frame[14..];
    let p = &p[..(40 + be16(p, 4) as usize).min(p.len())];
    let (mut nh, mut at) = (p[6], 40);
    let mut exts = Vec::new();
    while matches!(nh, 0 | 43 | 44 | 60) && p.len() >= at + 8 {
        let len = if nh == 44 {
            8
        } else {
            (p[at + 1] as usize + 1) * 8
        };
        exts.push(match nh {
            0 => "hbh".to_string(),
            43 => format!("rt{}/sl{}", p[at + 2], p[at + 3]),
            44 => format!("frag({:#06x})", be16(p, at + 2)),
            _ => "dst".to_string(),
        });
        nh = p[at];
        at += len;
    }
    (at <= p.len()).then_some((p, nh, at, exts))
}

/// The transport bytes of an IPv4 or IPv6 frame: (protocol, source, destination, bytes).
fn transport_of(frame: &[u8]) -> Option<(u8, IpAddress, IpAddress, &[u8])> {
    if let Some((hl, p)) = ipv4_of(frame) {
        let src = WireIp(p[12..16].try_into().ok()?);
        let dst = WireIp(p[16..20].try_into().ok()?);
        return Some((p[9], src.into(), dst.into(), &p[hl..]));
    }
    let (p, nh, at, _) = ipv6_of(frame)?;
    let src = WireIp6(p[8..24].try_into().ok()?);
    let dst = WireIp6(p[24..40].try_into().ok()?);
    Some((nh, src.into(), dst.into(), &p[at..]))
}

/// The TCP segment of an IPv4 or IPv6 frame, if it holds one whose header fits.
pub fn parse_tcp(frame: &[u8]) -> Option<TcpSeen> {
    let (proto, _, _, t) = transport_of(frame)?;
    if proto != PROTO_TCP || t.len() < 20 {
        return None;
    }
    let doff = ((t[12] >> 4) as usize) * 4;
    if doff < 20 || doff > t.len() {
        return None;
    }
    let tsval = tcp_options(&t[20..doff])
        .into_iter()
        .find(|(k, _)| *k == 8)
        .and_then(|(_, v)| (v.len() == 8).then(|| be32(&v, 0)));
    Some(TcpSeen {
        sport: be16(t, 0),
        dport: be16(t, 2),
        seq: be32(t, 4),
        ack: be32(t, 8),
        flags: t[13],
        window: be16(t, 14),
        payload_len: t.len() - doff,
        tsval,
    })
}

/// TCP options as (kind, body) pairs; stops at EOL or a malformed length.
fn tcp_options(mut o: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(&kind) = o.first() {
        match kind {
            0 => break,
            1 => o = &o[1..],
            _ => {
                let Some(&len) = o.get(1) else { break };
                let len = len as usize;
                if len < 2 || len > o.len() {
                    out.push((kind, Vec::new()));
                    break;
                }
                out.push((kind, o[2..len].to_vec()));
                o = &o[len..];
            }
        }
    }
    out
}

fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ip(b: &[u8]) -> String {
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
}

/// `prefix+N` when `v` is within 2^24 of `base`.
fn near(v: u32, base: Option<u32>, prefix: &str) -> Option<String> {
    let d = v.wrapping_sub(base?) as i32;
    (d.unsigned_abs() < 1 << 24).then(|| format!("{prefix}{d:+}"))
}

/// `prefix+N` for any distance (a flow's far values); not for 0, which an RST answering a
/// segment without ACK carries as such.
fn far(v: u32, base: Option<u32>, prefix: &str, flow: bool) -> Option<String> {
    if v == 0 {
        return None;
    }
    let d = v.wrapping_sub(base.filter(|_| flow)?) as i32;
    Some(format!("{prefix}{d:+}"))
}

fn seq_value(v: u32, b: &Bases) -> String {
    near(v, b.dut_isn, "d")
        .or_else(|| near(v, b.our_isn, "p"))
        .or_else(|| far(v, b.dut_isn, "d", b.flow))
        .unwrap_or_else(|| format!("{v:#010x}"))
}

fn ack_value(v: u32, b: &Bases) -> String {
    near(v, b.our_isn, "p")
        .or_else(|| near(v, b.dut_isn, "d"))
        .or_else(|| far(v, b.our_isn, "p", b.flow))
        .unwrap_or_else(|| format!("{v:#010x}"))
}

/// A received frame, normalized.
pub fn normalize(frame: &[u8], b: &Bases) -> Reply {
    let mut r = Reply::default();
    if frame.len() < 14 {
        r.put("eth.short", frame.len().to_string());
        return r;
    }
    r.put("eth.dst", mac(&frame[0..6]));
    r.put("eth.src", mac(&frame[6..12]));
    match be16(frame, 12) {
        ETH_ARP => {
            r.put("eth.type", "arp");
            arp_fields(&mut r, &frame[14..]);
        }
        ETH_IPV4 => {
            r.put("eth.type", "ipv4");
            ipv4_fields(&mut r, frame, b);
        }
        ETH_IPV6 => {
            r.put("eth.type", "ipv6");
            ipv6_fields(&mut r, frame, b);
        }
        t => r.put("eth.type", format!("{t:#06x}")),
    }
    r
}

fn arp_fields(r: &mut Reply, a: &[u8]) {
    if a.len() < 28 {
        r.put("arp.short", a.len().to_string());
        return;
    }
    r.put(
        "arp.hw",
        format!("{}/{}/{}/{}", be16(a, 0), be16(a, 2), a[4], a[5]),
    );
    r.put("arp.op", be16(a, 6).to_string());
    r.put("arp.sha", mac(&a[8..14]));
    r.put("arp.spa", ip(&a[14..18]));
    r.put("arp.tha", mac(&a[18..24]));
    r.put("arp.tpa", ip(&a[24..28]));
}

fn ipv4_fields(r: &mut Reply, frame: &[u8], b: &Bases) {
    let Some((hl, p)) = ipv4_of(frame) else {
        r.put("ip.malformed", "yes");
        return;
    };
    r.put("ip.src", ip(&p[12..16]));
    r.put("ip.dst", ip(&p[16..20]));
    r.put("ip.ttl", p[8].to_string());
    r.put("ip.tos", format!("{:#04x}", p[1]));
    r.put("ip.df", if p[6] & 0x40 != 0 { "1" } else { "0" });
    let frag = be16(p, 6) & 0x3fff;
    r.put(
        "ip.frag",
        if frag == 0 {
            "none".into()
        } else {
            format!("{frag:#06x}")
        },
    );
    r.put("ip.opts", ip_options(&p[20..hl]));
    r.put(
        "ip.csum",
        if checksum::checksum(&p[..hl]) == 0 {
            "ok"
        } else {
            "bad"
        },
    );
    let (src, dst) = (
        WireIp(p[12..16].try_into().unwrap_or([0; 4])),
        WireIp(p[16..20].try_into().unwrap_or([0; 4])),
    );
    let l4 = &p[hl..];
    match p[9] {
        PROTO_ICMP => {
            r.put("ip.proto", "icmp");
            icmp_fields(r, l4);
        }
        n => transport_fields(r, frame, n, l4, (src.into(), dst.into()), b),
    }
}

/// TCP, UDP or another protocol's fields (either family).
fn transport_fields(
    r: &mut Reply,
    frame: &[u8],
    proto: u8,
    l4: &[u8],
    (src, dst): (IpAddress, IpAddress),
    b: &Bases,
) {
    match proto {
        PROTO_TCP => {
            r.put("ip.proto", "tcp");
            tcp_fields(r, frame, l4, (src, dst), b);
        }
        PROTO_UDP => {
            r.put("ip.proto", "udp");
            if l4.len() >= 8 {
                r.put("udp.ports", format!("{}>{}", be16(l4, 0), be16(l4, 2)));
                r.put("udp.len", (l4.len() - 8).to_string());
                r.put(
                    "udp.csum",
                    csum_word(checksum::classify_trusting_partial(
                        src, dst, PROTO_UDP, l4, 6,
                    )),
                );
            }
        }
        n => {
            r.put("ip.proto", n.to_string());
            r.put("ip.payload", l4.len().to_string());
        }
    }
}

fn ip6_text(b: &[u8]) -> String {
    let a: [u8; 16] = b.try_into().unwrap_or([0; 16]);
    std::net::Ipv6Addr::from(a).to_string()
}

fn ipv6_fields(r: &mut Reply, frame: &[u8], b: &Bases) {
    let Some((p, nh, at, exts)) = ipv6_of(frame) else {
        r.put("ip6.malformed", "yes");
        return;
    };
    r.put("ip6.src", ip6_text(&p[8..24]));
    r.put("ip6.dst", ip6_text(&p[24..40]));
    r.put("ip6.hlim", p[7].to_string());
    let w = be32(p, 0);
    r.put("ip6.tclass", format!("{:#04x}", (w >> 20) & 0xff));
    let label = w & 0xf_ffff;
    r.put(
        "ip6.flow",
        match label {
            0 => "0",
            l if l == b.flow6 => "copied",
            _ => "auto",
        },
    );
    r.put(
        "ip6.ext",
        if exts.is_empty() {
            "-".to_string()
        } else {
            exts.join(",")
        },
    );
    let src = WireIp6(p[8..24].try_into().unwrap_or([0; 16]));
    let dst = WireIp6(p[24..40].try_into().unwrap_or([0; 16]));
    let l4 = &p[at..];
    match nh {
        PROTO_ICMPV6 => {
            r.put("ip.proto", "icmp6");
            icmp6_fields(r, l4, (src, dst));
        }
        n => transport_fields(r, frame, n, l4, (src.into(), dst.into()), b),
    }
}

fn icmp6_fields(r: &mut Reply, m: &[u8], (src, dst): (WireIp6, WireIp6)) {
    if m.len() < 8 {
        r.put("icmp6.short", m.len().to_string());
        return;
    }
    r.put("icmp6.type", m[0].to_string());
    r.put("icmp6.code", m[1].to_string());
    r.put(
        "icmp6.rest",
        format!("{:02x}{:02x}{:02x}{:02x}", m[4], m[5], m[6], m[7]),
    );
    r.put("icmp6.len", (m.len() - 8).to_string());
    if matches!(m[0], 135 | 136) && m.len() >= 24 {
        r.put("nd.target", ip6_text(&m[8..24]));
        r.put("nd.opts", nd_options(&m[24..]));
    }
    r.put("icmp6.data", format!("{:016x}", fnv(&m[8..])));
    r.put(
        "icmp6.csum",
        if checksum::transport(src, dst, PROTO_ICMPV6, m) == 0 {
            "ok"
        } else {
            "bad"
        },
    );
}

/// Neighbour discovery options: `sll=MAC`, `tll=MAC`, `kT/L` for the others (`-` none).
fn nd_options(mut o: &[u8]) -> String {
    let mut items = Vec::new();
    while o.len() >= 2 {
        let len = o[1] as usize * 8;
        if len == 0 || len > o.len() {
            items.push(format!("k{}/bad", o[0]));
            break;
        }
        items.push(match (o[0], len) {
            (1, 8) => format!("sll={}", mac(&o[2..8])),
            (2, 8) => format!("tll={}", mac(&o[2..8])),
            (k, l) => format!("k{k}/{l}"),
        });
        o = &o[len..];
    }
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

fn csum_word(c: TransportChecksum) -> &'static str {
    match c {
        TransportChecksum::Complete | TransportChecksum::Partial => "ok",
        TransportChecksum::Bad => "bad",
    }
}

/// IPv4 options as `type/length` items (`-` for none); of record route and timestamp
/// options also the pointer and the entries before it (addresses as written, a time of day
/// as `t`: each side's clock), and a timestamp's flag and overflow count.
fn ip_options(mut o: &[u8]) -> String {
    let mut items = Vec::new();
    while let Some(&t) = o.first() {
        match t {
            0 => break,
            1 => {
                items.push("nop".to_string());
                o = &o[1..];
            }
            _ => {
                let len = o.get(1).copied().unwrap_or(0) as usize;
                if len < 2 || len > o.len() {
                    items.push(format!("{t}/bad"));
                    break;
                }
                let ptr = if matches!(t, 7 | 68 | 131 | 137) && len > 2 {
                    format!("/ptr{}{}", o[2], recorded(&o[..len]))
                } else {
                    String::new()
                };
                items.push(format!("{t}/{len}{ptr}"));
                o = &o[len..];
            }
        }
    }
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// The entries of a record-route or timestamp option `o` before its pointer.
fn recorded(o: &[u8]) -> String {
    let end = (o[2] as usize).saturating_sub(1).min(o.len());
    let time = |w: &[u8]| {
        let v = be32(w, 0);
        if v < 86_400_000 {
            "t".to_string()
        } else {
            format!("{v:#x}")
        }
    };
    let (start, flag) = if o[0] == 68 && o.len() >= 4 {
        (4, Some(o[3]))
    } else {
        (3, None)
    };
    let words: Vec<&[u8]> = o
        .get(start..end.max(start))
        .unwrap_or(&[])
        .chunks(4)
        .collect();
    let items: Vec<String> = match flag {
        None => words.iter().map(|w| ip(w)).collect(),
        Some(f) if f & 0xf == 0 => words.iter().map(|w| time(w)).collect(),
        Some(_) => words
            .iter()
            .enumerate()
            .map(|(i, w)| if i % 2 == 0 { ip(w) } else { time(w) })
            .collect(),
    };
    let flag = flag.map_or(String::new(), |f| format!("/f{}o{}", f & 0xf, f >> 4));
    format!("{flag}[{}]", items.join(","))
}

fn tcp_fields(
    r: &mut Reply,
    frame: &[u8],
    l4: &[u8],
    (src, dst): (IpAddress, IpAddress),
    b: &Bases,
) {
    let Some(s) = parse_tcp(frame) else {
        r.put("tcp.malformed", l4.len().to_string());
        return;
    };
    r.put("tcp.ports", format!("{}>{}", s.sport, s.dport));
    r.put("tcp.flags", flag_letters(s.flags));
    let seq = match b.dut_isn {
        // A SYN-ACK with another ISN in a flow: a new connection on the same ports (after
        // the first one closed); the two ISN clocks differ, only the direction compares.
        Some(isn) if b.flow && s.flags & crate::craft::SYN != 0 && s.seq != isn => {
            let ahead = (s.seq.wrapping_sub(isn) as i32) > 0;
            format!("new-isn({})", if ahead { "ahead" } else { "behind" })
        }
        _ => seq_value(s.seq, b),
    };
    r.put("tcp.seq", seq);
    let ack = if s.flags & crate::craft::ACK != 0 {
        ack_value(s.ack, b)
    } else {
        "-".into()
    };
    r.put("tcp.ack", ack);
    r.put("tcp.win", if s.window == 0 { "zero" } else { "nonzero" });
    let urg = if s.flags & crate::craft::URG != 0 {
        be16(l4, 18).to_string()
    } else {
        "-".into()
    };
    r.put("tcp.urg", urg);
    let doff = ((l4[12] >> 4) as usize) * 4;
    r.put("tcp.opts", tcp_option_set(&l4[20..doff], b));
    r.put("tcp.len", s.payload_len.to_string());
    r.put(
        "tcp.csum",
        csum_word(checksum::classify_trusting_partial(
            src, dst, PROTO_TCP, l4, 16,
        )),
    );
}

/// The option kinds present, sorted (a set), with the values that mean something to the
/// peer: the MSS, the TSecr (relative), SACK blocks (relative).
fn tcp_option_set(o: &[u8], b: &Bases) -> String {
    let mut items: Vec<(u8, String)> = tcp_options(o)
        .into_iter()
        .map(|(k, v)| {
            let s = match (k, v.len()) {
                (2, 2) => format!("mss={}", be16(&v, 0)),
                (3, 1) => "ws".into(),
                (4, 0) => "sackok".into(),
                (8, 8) => {
                    let ecr = be32(&v, 4);
                    let e = near(ecr, b.our_ts, "t").unwrap_or_else(|| format!("{ecr:#x}"));
                    format!("ts(ecr={e})")
                }
                (5, n) if n % 8 == 0 => {
                    let blocks: Vec<String> = v
                        .chunks(8)
                        .map(|c| {
                            format!("{}..{}", ack_value(be32(c, 0), b), ack_value(be32(c, 4), b))
                        })
                        .collect();
                    format!("sack({})", blocks.join(","))
                }
                (k, n) => format!("k{k}/{n}"),
            };
            (k, s)
        })
        .collect();
    items.sort();
    if items.is_empty() {
        return "-".into();
    }
    items
        .into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(",")
}

fn icmp_fields(r: &mut Reply, m: &[u8]) {
    if m.len() < 8 {
        r.put("icmp.short", m.len().to_string());
        return;
    }
    r.put("icmp.type", m[0].to_string());
    r.put("icmp.code", m[1].to_string());
    r.put(
        "icmp.rest",
        format!("{:02x}{:02x}{:02x}{:02x}", m[4], m[5], m[6], m[7]),
    );
    r.put("icmp.len", (m.len() - 8).to_string());
    if m[0] == 14 && m.len() >= 20 {
        // A timestamp reply: the originate time is compared; receive and transmit are each
        // side's clock, compared with each other only.
        r.put("icmp.data", format!("{:016x}", fnv(&m[8..12])));
        let (rx, tx) = (be32(m, 12), be32(m, 16));
        let times = if rx == tx && rx < 86_400_000 {
            "rx=tx"
        } else {
            "odd"
        };
        r.put("icmp.times", times);
    } else {
        r.put("icmp.data", format!("{:016x}", fnv(&m[8..])));
    }
    r.put(
        "icmp.csum",
        if checksum::checksum(m) == 0 {
            "ok"
        } else {
            "bad"
        },
    );
}

/// FNV-1a, to compare echoed data without printing it.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::craft::{self, opt, Ip4, Tcp, ACK, DUT_IP, DUT_MAC, PEER_MAC, SYN};

    fn synack(isn: u32, ack: u32, ecr: u32) -> Vec<u8> {
        let t = Tcp {
            sport: 8080,
            dport: 10_000,
            seq: isn,
            ack,
            flags: SYN | ACK,
            window: 65160,
            options: opt::linux_syn(1460, 77, 7)
                .into_iter()
                .enumerate()
                .map(|(i, x)| {
                    if (12..16).contains(&i) {
                        ecr.to_be_bytes()[i - 12]
                    } else {
                        x
                    }
                })
                .collect(),
            ..Tcp::default()
        };
        let h = Ip4::new(DUT_IP, craft::peer_ip(0), craft::PROTO_TCP);
        craft::eth(
            PEER_MAC,
            DUT_MAC,
            craft::ETH_IPV4,
            &h.packet(&t.segment(DUT_IP, craft::peer_ip(0))),
        )
    }

    #[test]
    fn isns_and_timestamps_are_relative_per_side() {
        let a = synack(0x1000_0000, 501, 9);
        let b = synack(0xdead_0000, 501, 9);
        let bases = |dut| Bases {
            our_isn: Some(500),
            dut_isn: Some(dut),
            our_ts: Some(9),
            flow: false,
            flow6: 0,
        };
        let ra = normalize(&a, &bases(0x1000_0000));
        let rb = normalize(&b, &bases(0xdead_0000));
        assert_eq!(ra, rb);
        assert_eq!(ra.get("tcp.seq"), Some("d+0"));
        assert_eq!(ra.get("tcp.ack"), Some("p+1"));
        assert_eq!(ra.get("tcp.opts"), Some("mss=1460,ws,sackok,ts(ecr=t+0)"));
        assert_eq!(ra.get("tcp.csum"), Some("ok"));
        assert_eq!(ra.get("ip.csum"), Some("ok"));
        // Another ISN-relative value or another TSecr is a difference.
        let rc = normalize(&synack(0x1000_0001, 501, 9), &bases(0x1000_0000));
        assert_ne!(ra, rc);
        let rd = normalize(&synack(0x1000_0000, 501, 10), &bases(0x1000_0000));
        assert_ne!(ra, rd);
        // A far SEQ (an RST copying an ACK field we derived from the DUT's ISN) is relative
        // to the ISN in a flow, raw otherwise.
        let far = 0x1000_0000u32.wrapping_sub(0x4000_0000);
        let mut b = bases(0x1000_0000);
        assert_eq!(seq_value(far, &b), "0xd0000000");
        b.flow = true;
        assert_eq!(seq_value(far, &b), "d-1073741824");
        assert_eq!(
            super::far(0, Some(0x1000_0000), "d", true),
            None,
            "an RST's SEQ 0 stays 0"
        );
        // In a flow, a SYN-ACK with another ISN is a new connection: only its direction.
        let again = synack(0x1000_0000 + 5000, 501, 9);
        assert_eq!(normalize(&again, &b).get("tcp.seq"), Some("new-isn(ahead)"));
    }

    #[test]
    fn bad_checksums_are_seen_and_partial_ones_taken() {
        let mut f = synack(1, 2, 3);
        let n = f.len();
        f[n - 1] ^= 1;
        assert_eq!(
            normalize(&f, &Bases::default()).get("tcp.csum"),
            Some("bad")
        );
        let mut g = synack(1, 2, 3);
        let seg_len = (g.len() - 34) as u16;
        let partial = checksum::partial(WireIp(DUT_IP), WireIp(craft::peer_ip(0)), 6, seg_len);
        g[50..52].copy_from_slice(&partial.to_be_bytes());
        assert_eq!(normalize(&g, &Bases::default()).get("tcp.csum"), Some("ok"));
    }

    #[test]
    fn ipv6_replies_name_their_fields_and_labels() {
        let src = craft::DUT_IP6;
        let dst = craft::peer_ip6(4);
        let echo = craft::icmp6(129, 0, [1, 2, 0, 3], b"abc", src, dst);
        let mut h = craft::Ip6::new(src, dst, craft::PROTO_ICMPV6);
        h.flow = 0x12345;
        let f = craft::eth(PEER_MAC, DUT_MAC, craft::ETH_IPV6, &h.packet(&echo));
        let mut b = Bases::default();
        let r = normalize(&f, &b);
        assert_eq!(r.get("eth.type"), Some("ipv6"));
        assert_eq!(r.get("ip6.src"), Some("fd00::2"));
        assert_eq!(r.get("ip6.dst"), Some("fd01::10:0:4"));
        assert_eq!(r.get("ip6.flow"), Some("auto"));
        assert_eq!(r.get("ip6.hlim"), Some("64"));
        assert_eq!(r.get("icmp6.type"), Some("129"));
        assert_eq!(r.get("icmp6.csum"), Some("ok"));
        b.flow6 = 0x12345;
        assert_eq!(normalize(&f, &b).get("ip6.flow"), Some("copied"));
        h.flow = 0;
        let mut bad = craft::eth(PEER_MAC, DUT_MAC, craft::ETH_IPV6, &h.packet(&echo));
        assert_eq!(normalize(&bad, &b).get("ip6.flow"), Some("0"));
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(normalize(&bad, &b).get("icmp6.csum"), Some("bad"));
        // A neighbour advertisement names its target and options.
        let na = craft::na(0x60, src, &craft::nd_lladdr(2, DUT_MAC), src, dst);
        let h = craft::Ip6::new(src, dst, craft::PROTO_ICMPV6);
        let f = craft::eth(PEER_MAC, DUT_MAC, craft::ETH_IPV6, &h.packet(&na));
        let r = normalize(&f, &b);
        assert_eq!(r.get("nd.target"), Some("fd00::2"));
        assert_eq!(r.get("nd.opts"), Some("tll=02:77:73:00:00:02"));
        assert_eq!(r.get("icmp6.rest"), Some("60000000"));
        // TCP behind a destination options header.
        let t = Tcp {
            sport: 8080,
            dport: 10_000,
            seq: 7,
            flags: SYN | ACK,
            ack: 501,
            window: 1,
            ..Tcp::default()
        };
        let mut p = craft::ext::options(craft::PROTO_TCP, &[]);
        p.extend_from_slice(&t.segment6(src, dst));
        let h = craft::Ip6::new(src, dst, 60);
        let f = craft::eth(PEER_MAC, DUT_MAC, craft::ETH_IPV6, &h.packet(&p));
        let r = normalize(&f, &b);
        assert_eq!(r.get("ip6.ext"), Some("dst"));
        assert_eq!(r.get("tcp.flags"), Some("SA"));
        assert_eq!(r.get("tcp.csum"), Some("ok"));
        assert_eq!(parse_tcp(&f).map(|s| s.ack), Some(501));
    }

    #[test]
    fn arp_and_ip_options_read_back() {
        let a = craft::arp(2, DUT_MAC, DUT_IP, PEER_MAC, [198, 19, 0, 1]);
        let r = normalize(
            &craft::eth(PEER_MAC, DUT_MAC, craft::ETH_ARP, &a),
            &Bases::default(),
        );
        assert_eq!(r.get("arp.op"), Some("2"));
        assert_eq!(r.get("arp.tpa"), Some("198.19.0.1"));
        // Recorded entries: addresses as written, times of day as `t`.
        assert_eq!(ip_options(&[7, 7, 8, 1, 2, 3, 4, 0]), "7/7/ptr8[1.2.3.4]");
        assert_eq!(ip_options(&[7, 7, 4, 0, 0, 0, 0, 0]), "7/7/ptr4[]");
        let ts = [68, 12, 13, 0x21, 9, 9, 9, 9, 0, 0, 0, 5];
        assert_eq!(ip_options(&ts), "68/12/ptr13/f1o2[9.9.9.9,t]");
        assert_eq!(ip_options(&[1, 7, 0]), "nop,7/bad");
        assert_eq!(ip_options(&[]), "-");
    }
}
