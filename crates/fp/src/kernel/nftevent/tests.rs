//! Unit tests of the nftables rule event decoder, on hand-built messages.

use super::*;

use crate::filter::expr::list_from_json;
use crate::kernel::netlink::attr as nla;
use serde_json::{json, Value};

/// The tree `nft -j` shape `v` reads into.
fn tree(v: Value) -> Vec<Expr> {
    list_from_json(v.as_array().unwrap())
}

fn right(e: &Expr) -> &Rhs {
    match e {
        Expr::Match { right, .. } => right,
        other => panic!("not a match: {other:?}"),
    }
}

fn nest(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn expr(name: &str, data: &[Vec<u8>]) -> Vec<u8> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    nla(
        NFTA_LIST_ELEM,
        &nest(&[nla(NFTA_EXPR_NAME, &n), nla(NFTA_EXPR_DATA, &nest(data))]),
    )
}

fn u32a(ty: u16, v: u32) -> Vec<u8> {
    nla(ty, &v.to_be_bytes())
}

fn payload(base: u32, offset: u32, len: u32) -> Vec<u8> {
    expr(
        "payload",
        &[u32a(1, 1), u32a(2, base), u32a(3, offset), u32a(4, len)],
    )
}

fn cmp(op: u32, value: &[u8]) -> Vec<u8> {
    expr(
        "cmp",
        &[
            u32a(1, 1),
            u32a(2, op),
            nla(3, &nla(NFTA_DATA_VALUE, value)),
        ],
    )
}

fn verdict(code: i32) -> Vec<u8> {
    let v = nla(
        NFTA_DATA_VERDICT,
        &nla(NFTA_VERDICT_CODE, &code.to_be_bytes()),
    );
    expr("immediate", &[u32a(1, 0), nla(2, &v)])
}

fn rule_msg(family: u8, exprs: &[Vec<u8>], after: Option<u64>) -> Vec<u8> {
    let mut p = vec![family, 0, 0, 0];
    p.extend(nla(NFTA_RULE_TABLE, b"filter\0"));
    p.extend(nla(NFTA_RULE_CHAIN, b"FORWARD\0"));
    p.extend(nla(NFTA_RULE_HANDLE, &7u64.to_be_bytes()));
    if let Some(a) = after {
        p.extend(nla(NFTA_RULE_POSITION, &a.to_be_bytes()));
    }
    p.extend(nla(NFTA_RULE_EXPRESSIONS, &nest(exprs)));
    p
}

fn decode_rule(
    kind: u16,
    flags: u16,
    family: u8,
    exprs: &[Vec<u8>],
    after: Option<u64>,
) -> RuleEvent {
    let payload = rule_msg(family, exprs, after);
    let m = Msg {
        ty: NFNL_SUBSYS_NFTABLES << 8 | kind,
        flags,
        payload: &payload,
    };
    match decode(&m) {
        NftMsg::Rule(ev) => ev,
        other => panic!("not a rule: {other:?}"),
    }
}

#[test]
fn iptables_rules_decode_to_the_tree_nft_json_reads_into() {
    // iptables -A FORWARD -s 198.18.100.1 -d 198.19.5.0/24 -j DROP (byte-aligned prefix:
    // a 3-byte load), then the same with a /20 (a bitwise mask).
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        NLM_F_APPEND,
        2,
        &[
            payload(1, 12, 4),
            cmp(0, &[198, 18, 100, 1]),
            payload(1, 16, 3),
            cmp(0, &[198, 19, 5]),
            expr("counter", &[]),
            verdict(NF_DROP),
        ],
        None,
    );
    assert!(ev.add && ev.append && ev.after.is_none());
    assert_eq!((ev.family, ev.handle), ("ip", 7));
    let want: Value = serde_json::from_str(
        r#"[{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.100.1"}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "198.19.5.0", "len": 24}}}},
            {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]"#,
    )
    .unwrap();
    assert_eq!(ev.expr.unwrap(), tree(want));

    let masked = expr(
        "bitwise",
        &[
            u32a(1, 1),
            u32a(2, 1),
            u32a(3, 4),
            nla(4, &nla(NFTA_DATA_VALUE, &[255, 255, 240, 0])),
            nla(5, &nla(NFTA_DATA_VALUE, &[0, 0, 0, 0])),
        ],
    );
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        2,
        &[
            payload(1, 16, 4),
            masked.clone(),
            cmp(0, &[198, 19, 0, 0]),
            verdict(NF_ACCEPT),
        ],
        Some(3),
    );
    assert_eq!(ev.after, Some(3));
    assert_eq!(
        ev.expr.unwrap()[0],
        tree(
            json!([{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                               "right": {"prefix": {"addr": "198.19.0.0", "len": 20}}}}])
        )[0]
    );
    // A value with bits past its mask is printed otherwise by nft: not decoded here.
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        2,
        &[
            payload(1, 16, 4),
            masked,
            cmp(0, &[198, 19, 1, 0]),
            verdict(NF_ACCEPT),
        ],
        None,
    );
    assert!(ev.expr.is_err());
}

#[test]
fn ports_need_their_protocol_and_unknown_expressions_are_refused() {
    let l4 = expr("meta", &[u32a(1, 1), u32a(2, NFT_META_L4PROTO)]);
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        2,
        &[
            l4.clone(),
            cmp(0, &[6]),
            payload(2, 2, 2),
            cmp(0, &80u16.to_be_bytes()),
            verdict(NF_ACCEPT),
        ],
        None,
    );
    let e = ev.expr.unwrap();
    assert_eq!(
        e[1..],
        tree(
            json!([{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                               "right": 80}}, {"accept": null}])
        )
    );
    assert_eq!(right(&e[0]), &Rhs::Value(Datum::Num(6)));
    // The port without the protocol in front.
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        2,
        &[
            payload(2, 2, 2),
            cmp(0, &80u16.to_be_bytes()),
            verdict(NF_ACCEPT),
        ],
        None,
    );
    assert!(ev.expr.is_err());
    // An ordered comparison (a port range), a jump, a conntrack expression.
    for bad in [
        vec![l4.clone(), cmp(0, &[6]), payload(2, 2, 2), cmp(5, &[0, 80])],
        vec![verdict(-3)],
        vec![expr("ct", &[u32a(1, 1), u32a(2, 0)])],
    ] {
        assert!(decode_rule(NFT_MSG_NEWRULE, 0, 2, &bad, None).expr.is_err());
    }
    // Garbage in the expression list is refused, never a panic.
    let ev = decode_rule(NFT_MSG_NEWRULE, 0, 2, &[vec![3, 0, 1, 0, 9, 9, 9, 9]], None);
    assert!(ev.expr.is_err() || ev.expr == Ok(vec![]));
}

#[test]
fn inet_rules_need_their_nfproto_and_named_sets_decode() {
    let nfproto = expr("meta", &[u32a(1, 1), u32a(2, NFT_META_NFPROTO)]);
    let lookup =
        |set: &[u8], flags: u32| expr("lookup", &[nla(1, set), u32a(2, 1), u32a(5, flags)]);
    // meta nfproto ipv4 ip saddr != @blk drop (an inet table)
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        1,
        &[
            nfproto.clone(),
            cmp(0, &[2]),
            payload(1, 12, 4),
            lookup(b"blk\0", 1),
            verdict(NF_DROP),
        ],
        None,
    );
    assert_eq!(ev.family, "inet");
    let e = ev.expr.unwrap();
    assert_eq!(
        e,
        tree(json!([
            {"match": {"op": "==", "left": {"meta": {"key": "nfproto"}}, "right": "ipv4"}},
            {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@blk"}},
            {"drop": null}
        ]))
    );
    // Without the nfproto in front, an inet table's header offsets mean nothing yet.
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        1,
        &[payload(1, 12, 4), cmp(0, &[1, 2, 3, 4])],
        None,
    );
    assert!(ev.expr.is_err());
    // Anonymous sets and maps are left to the read.
    let ev = decode_rule(
        NFT_MSG_NEWRULE,
        0,
        2,
        &[payload(1, 12, 4), lookup(b"__set0\0", 0)],
        None,
    );
    assert!(ev.expr.is_err());
}

fn event(add: bool, handle: u64, after: Option<u64>, append: bool) -> RuleEvent {
    RuleEvent {
        add,
        family: "ip",
        table: "filter".into(),
        chain: "FORWARD".into(),
        handle,
        after,
        append,
        expr: Ok(vec![]),
    }
}

#[test]
fn only_whole_batches_of_decoded_rule_changes_are_taken() {
    let add = NftMsg::Rule(event(true, 4, None, true));
    let del = NftMsg::Rule(event(false, 2, None, false));
    let mut bad = event(true, 4, None, true);
    bad.expr = Err("expression `ct`".into());
    let n = |m: &[NftMsg]| rule_changes(m).map(|v| v.len());
    assert_eq!(n(&[add.clone(), NftMsg::Gen]), Some(1));
    assert_eq!(
        n(&[
            add.clone(),
            add.clone(),
            NftMsg::Gen,
            del.clone(),
            NftMsg::Gen
        ]),
        Some(3)
    );
    // cut short, mixed with other objects, a replace, an undecoded rule, nothing at all
    assert_eq!(n(std::slice::from_ref(&add)), None);
    assert_eq!(n(&[add.clone(), NftMsg::Gen, del.clone()]), None);
    assert_eq!(n(&[NftMsg::Other, add.clone(), NftMsg::Gen]), None);
    assert_eq!(n(&[add.clone(), del.clone(), NftMsg::Gen]), None);
    assert_eq!(n(&[NftMsg::Rule(bad), NftMsg::Gen]), None);
    assert_eq!(n(&[NftMsg::Gen]), None);
}

#[test]
fn random_bytes_never_panic() {
    // Well-formed frames with random attribute soup inside, and plain noise.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pieces = [
        payload(1, 12, 4),
        payload(2, 2, 2),
        cmp(0, &[1, 2, 3, 4]),
        cmp(1, &[0; 16]),
        verdict(0),
        expr("bitwise", &[u32a(1, 1), u32a(2, 1), u32a(3, 4)]),
        expr("meta", &[u32a(1, 1), u32a(2, 6)]),
        expr("match", &[nla(1, b"set\0")]),
    ];
    for _ in 0..20_000 {
        let mut exprs = Vec::new();
        for _ in 0..next() % 6 {
            let mut p = pieces[(next() % pieces.len() as u64) as usize].clone();
            if next() % 3 == 0 && !p.is_empty() {
                let i = (next() as usize) % p.len();
                p[i] = next() as u8;
                p.truncate(p.len() - (next() as usize % 3).min(p.len()));
            }
            exprs.push(p);
        }
        let payload = rule_msg(2 + 8 * (next() % 2) as u8, &exprs, None);
        let kind = [NFT_MSG_NEWRULE, NFT_MSG_DELRULE, NFT_MSG_NEWGEN][(next() % 3) as usize];
        let _ = decode(&Msg {
            ty: NFNL_SUBSYS_NFTABLES << 8 | kind,
            flags: next() as u16,
            payload: &payload,
        });
        let noise: Vec<u8> = (0..next() % 64).map(|_| next() as u8).collect();
        let _ = decode(&Msg {
            ty: NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE,
            flags: 0,
            payload: &noise,
        });
    }
}
