use super::*;
use crate::cases::{one, Class, Script};
use crate::normalize::Reply;

fn reply(pairs: &[(&'static str, &str)]) -> Reply {
    Reply {
        fields: pairs.iter().map(|(k, v)| (*k, v.to_string())).collect(),
    }
}

fn outcome(replies: Vec<Reply>) -> Outcome {
    Outcome {
        replies,
        ..Outcome::default()
    }
}

fn tcp(flags: &str, seq: &str, ack: &str, len: &str) -> Reply {
    reply(&[
        ("eth.type", "ipv4"),
        ("ip.proto", "tcp"),
        ("tcp.ports", "8080>10001"),
        ("tcp.flags", flags),
        ("tcp.seq", seq),
        ("tcp.ack", ack),
        ("tcp.len", len),
    ])
}

#[test]
fn every_row_has_a_unique_id_and_a_reason() {
    for (i, k) in TABLE.iter().enumerate() {
        assert!(k.reason.len() > 40, "{}: say why", k.id);
        assert!(TABLE[..i].iter().all(|o| o.id != k.id), "{} twice", k.id);
    }
}

#[test]
fn docs_list_every_row_with_its_kind() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/TCPIP.md");
    let doc = std::fs::read_to_string(path).expect("docs/TCPIP.md");
    let section = doc
        .split("## Conformance against Linux")
        .nth(1)
        .expect("docs/TCPIP.md has a section \"Conformance against Linux\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    for k in TABLE {
        let line = section
            .lines()
            .find(|l| l.contains(&format!("`{}`", k.id)))
            .unwrap_or_else(|| panic!("docs/TCPIP.md does not list `{}`", k.id));
        let kind = if k.kind == Kind::Accepted {
            "accepted"
        } else {
            "known stack gap"
        };
        assert!(
            line.contains(kind),
            "docs/TCPIP.md: `{}` is {kind}: {line}",
            k.id
        );
    }
}

#[test]
fn a_row_explains_only_its_pattern() {
    let mut short = one(3, 8, Class::Udp6);
    short.what = "UDP to port 9, length shorter than the datagram".into();
    let unreachable = |len: &str, data: &str| {
        reply(&[
            ("eth.type", "ipv6"),
            ("ip.proto", "icmp6"),
            ("icmp6.type", "1"),
            ("icmp6.len", len),
            ("icmp6.data", data),
        ])
    };
    let v = |c: &Case, a: &Outcome, b: &Outcome| verdict(c, a, b, &compare::differences(a, b)).0;
    let (whole, cut) = (unreachable("80", "aa"), unreachable("60", "bb"));
    assert_eq!(
        v(
            &short,
            &outcome(vec![whole.clone()]),
            &outcome(vec![cut.clone()])
        ),
        Verdict::Accepted(vec!["udp6-short-length-quoted-whole"])
    );
    // The same difference in another class is not explained.
    let mut listen = one(3, 2, Class::TcpListen);
    listen.what = short.what.clone();
    assert_eq!(
        v(
            &listen,
            &outcome(vec![whole.clone()]),
            &outcome(vec![cut.clone()])
        ),
        Verdict::Unexplained
    );
    // Nor is our quote being the shorter one.
    assert_eq!(
        v(&short, &outcome(vec![cut.clone()]), &outcome(vec![whole])),
        Verdict::Unexplained
    );
    assert_eq!(
        v(&short, &outcome(vec![cut.clone()]), &outcome(vec![cut])),
        Verdict::Same
    );
}

#[test]
fn parts_combine_and_leave_the_rest_to_fail() {
    let c = one(3, 1, Class::Tcp6State);
    let flow = |mut r: Reply, label: &str| {
        r.fields[0].1 = "ipv6".into();
        r.fields.push(("ip6.flow", label.to_string()));
        r
    };
    let ack = tcp("A", "d+1", "p+2", "0");
    let fin = tcp("FA", "d+1", "p+2", "0");
    let ours = outcome(vec![flow(ack, "0"), flow(fin.clone(), "0")]);
    let linux = outcome(vec![flow(fin.clone(), "auto")]);
    let d = compare::differences(&ours, &linux);
    let (verdict_, rest) = verdict(&c, &ours, &linux, &d);
    assert_eq!(
        verdict_,
        Verdict::Accepted(vec!["fin-ack-timing", "flow-label-zero"]),
        "{rest:?}"
    );
    // An RST more on our side is not explained.
    let rst = tcp("R", "d+1", "-", "0");
    let ours = outcome(vec![flow(fin.clone(), "0"), flow(rst, "0")]);
    let d = compare::differences(&ours, &linux);
    assert_eq!(verdict(&c, &ours, &linux, &d).0, Verdict::Unexplained);
}

#[test]
fn a_fin_ack_split_by_the_scheduler_is_accepted_on_either_side() {
    let c = one(3, 1, Class::TcpState);
    let ack = tcp("A", "d+1", "p+2", "0");
    let fin = tcp("FA", "d+1", "p+2", "0");
    let split = outcome(vec![ack.clone(), fin.clone()]);
    let whole = outcome(vec![fin.clone()]);
    let v = |a: &Outcome, b: &Outcome| verdict(&c, a, b, &compare::differences(a, b)).0;
    assert_eq!(v(&split, &whole), Verdict::Accepted(vec!["fin-ack-timing"]));
    assert_eq!(v(&whole, &split), Verdict::Accepted(vec!["fin-ack-timing"]));
    // A pure ACK with no FIN beside it is no split.
    assert_eq!(v(&outcome(vec![ack]), &whole), Verdict::Unexplained);
}

fn v6(pairs: &[(&'static str, &str)]) -> Reply {
    let mut r = reply(&[("eth.type", "ipv6")]);
    r.fields
        .extend(pairs.iter().map(|(k, v)| (*k, v.to_string())));
    r
}

#[test]
fn v6_rows_explain_only_their_pattern() {
    let v = |c: &Case, a: &Outcome, b: &Outcome| verdict(c, a, b, &compare::differences(a, b)).0;
    let silent = outcome(vec![]);
    // A zero flow label against Linux's hash is accepted; the other way round is not.
    let echo = |flow: &str| {
        v6(&[
            ("ip6.flow", flow),
            ("ip.proto", "icmp6"),
            ("icmp6.type", "129"),
        ])
    };
    let c = one(3, 4, Class::Icmp6);
    assert_eq!(
        v(&c, &outcome(vec![echo("0")]), &outcome(vec![echo("auto")])),
        Verdict::Accepted(vec!["flow-label-zero"])
    );
    assert_eq!(
        v(&c, &outcome(vec![echo("auto")]), &outcome(vec![echo("0")])),
        Verdict::Unexplained
    );
    // Silence against an echo reply is unexplained, to all nodes as to us (the stack
    // answers both since the bifurcation program steers echo to all nodes).
    let mut to_all = one(3, 5, Class::Icmp6);
    let h = crate::craft::Ip6::new(
        crate::craft::peer_ip6(5),
        crate::craft::ALL_NODES6,
        crate::craft::PROTO_ICMPV6,
    );
    to_all.script = Script::Frames(vec![crate::cases::ipv6_frame(&h, &[128, 0, 0, 0])]);
    assert_eq!(
        v(&to_all, &silent, &outcome(vec![echo("0")])),
        Verdict::Unexplained
    );
    let mut to_us = to_all.clone();
    let h = crate::craft::Ip6::new(
        crate::craft::peer_ip6(5),
        crate::craft::DUT_IP6,
        crate::craft::PROTO_ICMPV6,
    );
    to_us.script = Script::Frames(vec![crate::cases::ipv6_frame(&h, &[128, 0, 0, 0])]);
    assert_eq!(
        v(&to_us, &silent, &outcome(vec![echo("0")])),
        Verdict::Unexplained
    );
}

#[test]
fn a_unicast_ns_answer_aligns_only_the_flags_and_option() {
    let mut c = one(3, 5, Class::Ndp);
    let h = crate::craft::Ip6::new(
        crate::craft::onlink_ip6(5),
        crate::craft::DUT_IP6,
        crate::craft::PROTO_ICMPV6,
    );
    c.script = Script::Frames(vec![crate::cases::ipv6_frame(&h, &[135, 0, 0, 0])]);
    let na = |rest: &str, opts: &str, dst: &str| {
        v6(&[
            ("ip6.dst", dst),
            ("ip.proto", "icmp6"),
            ("icmp6.type", "136"),
            ("icmp6.rest", rest),
            ("icmp6.len", if opts == "-" { "16" } else { "24" }),
            ("nd.target", "fd00::2"),
            ("nd.opts", opts),
            ("icmp6.data", if opts == "-" { "x" } else { "y" }),
        ])
    };
    let ours = outcome(vec![na(
        "60000000",
        "tll=02:77:73:00:00:02",
        "fd00::5a:0:5",
    )]);
    let linux = outcome(vec![na("40000000", "-", "fd00::5a:0:5")]);
    let d = compare::differences(&ours, &linux);
    assert_eq!(
        verdict(&c, &ours, &linux, &d).0,
        Verdict::Accepted(vec!["unicast-ns-answer-names-our-mac"])
    );
    // To another destination it is still a difference.
    let linux = outcome(vec![na("40000000", "-", "fd00::5a:0:6")]);
    let d = compare::differences(&ours, &linux);
    assert_eq!(verdict(&c, &ours, &linux, &d).0, Verdict::Unexplained);
}
