//! The filter plan's unit tests: nftables JSON in, rules and classifications out.

use super::*;
use crate::filter::classify::{classify, Tables, FIELD_DST};

const RULESET: &str = r#"{"nftables": [
  {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
  {"table": {"family": "inet", "name": "gw", "handle": 1}},
  {"chain": {"family": "inet", "table": "gw", "name": "fwd", "handle": 1, "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
  {"chain": {"family": "inet", "table": "gw", "name": "in", "handle": 2, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
  {"set": {"family": "inet", "name": "bad", "table": "gw", "type": "ipv4_addr", "handle": 3, "flags": ["interval"],
           "elem": [{"prefix": {"addr": "198.19.5.0", "len": 24}}, "198.19.9.9", {"range": ["198.19.10.0", "198.19.10.3"]}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 4, "expr": [
     {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.66"}}, {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 5, "expr": [
     {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@bad"}}, {"drop": null}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 6, "expr": [
     {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [22, 23]}}}, {"drop": null}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 7, "expr": [
     {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established"]}}, {"accept": null}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 8, "expr": [
     {"match": {"op": "==", "left": {"payload": {"protocol": "ip6", "field": "saddr"}}, "right": {"prefix": {"addr": "fd00:66::", "len": 32}}}}, {"drop": null}]}},
  {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 9, "expr": [
     {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "d9"}},
     {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"accept": null}]}}
]}"#;

fn v4(s: &str) -> u128 {
    u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128
}

#[test]
fn parses_the_supported_subset_and_marks_the_rest_for_the_kernel() {
    let p = FilterPlan::from_nft_json(RULESET, false, false).unwrap();
    assert_eq!(
        p.v4,
        FamilyFilter::Compiled {
            policy_drop: false,
            rules: 5,
        }
    );
    assert_eq!(
        p.v6,
        FamilyFilter::Compiled {
            policy_drop: false,
            rules: 4,
        }
    );
    assert_eq!(p.rules_v4[1].dst4.as_ref().unwrap().len(), 3); // /24, /32, range -> /30
    assert_eq!(p.rules_v4[3].action, Action::Kernel);
    assert_eq!(p.rules_v4[2].dport, Some(vec![(6, 22), (6, 23)]));
    // Each rule knows where it came from (its counter's handle), in both families.
    assert_eq!(p.rules_v4[0].id.as_ref().map(|r| r.handle), Some(4));
    let v6 = p.rules_v6[0].id.as_ref();
    assert!(
        v6.is_some() && p.rules_v4.iter().any(|r| r.id.as_ref() == v6),
        "an inet rule is one rule, counted once, in both families"
    );
}

#[test]
fn a_negated_address_match_still_names_its_family() {
    let json = r#"{"nftables": [
      {"chain": {"family": "inet", "table": "t", "name": "fw", "hook": "forward", "type": "filter", "policy": "accept"}},
      {"rule": {"family": "inet", "table": "t", "chain": "fw", "expr": [
        {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.1"}},
        {"drop": null}]}}]}"#;
    let plan = FilterPlan::from_nft_json(json, false, false).unwrap();
    assert_eq!(plan.rules_v4.len(), 1);
    assert_eq!(plan.rules_v4[0].action, Action::Kernel);
    // IPv6 packets never match an `ip saddr` rule: no reason to send them to the kernel.
    assert!(plan.rules_v6.is_empty(), "{:?}", plan.rules_v6);
}

#[test]
fn classifies_in_chain_order() {
    let p = FilterPlan::from_nft_json(RULESET, false, false).unwrap();
    let t = p.tables("d0", &|n| (n == "d9").then_some(9));
    let c = |src: &str, dst: &str, proto, dport, oif| {
        classify(&t, false, v4(src), v4(dst), proto, 1000, dport, oif, false)
    };
    assert_eq!(c("198.18.0.66", "198.19.1.1", 17, 80, 3), Action::Drop);
    assert_eq!(c("198.18.0.1", "198.19.5.77", 17, 80, 3), Action::Drop);
    assert_eq!(c("198.18.0.1", "198.19.9.9", 17, 80, 3), Action::Drop);
    assert_eq!(c("198.18.0.1", "198.19.10.3", 17, 80, 3), Action::Drop);
    assert_eq!(c("198.18.0.1", "198.19.10.4", 6, 22, 3), Action::Drop);
    // reaches the ct rule: conntrack is the kernel's
    assert_eq!(c("198.18.0.1", "198.19.10.4", 6, 80, 3), Action::Kernel);
    let c6 = |src: &str, proto, dport, oif| {
        classify(
            &t,
            true,
            u128::from(src.parse::<Ipv6Addr>().unwrap()),
            1,
            proto,
            1,
            dport,
            oif,
            false,
        )
    };
    assert_eq!(
        c6("fd00:66::1", 17, 53, 9),
        Action::Kernel,
        "ct rule comes before"
    );
    assert_eq!(c6("fd00:66::1", 6, 22, 9), Action::Drop);
}

#[test]
fn other_hooks_and_legacy_tables_send_the_family_to_the_kernel() {
    let nat = r#"{"nftables": [{"chain": {"family": "ip", "table": "nat", "name": "post", "type": "nat", "hook": "postrouting", "prio": 100, "policy": "accept"}}]}"#;
    let p = FilterPlan::from_nft_json(nat, false, true).unwrap();
    assert!(matches!(p.v4, FamilyFilter::Kernel(_)));
    assert!(matches!(p.v6, FamilyFilter::Kernel(_)));
    let empty = r#"{"nftables": [{"metainfo": {}}]}"#;
    let p = FilterPlan::from_nft_json(empty, false, false).unwrap();
    assert_eq!((p.v4, p.v6), (FamilyFilter::Open, FamilyFilter::Open));
    assert!(FilterPlan::from_nft_json("not json", false, false).is_err());
}

#[test]
fn hundred_rules_compile_and_the_first_match_wins() {
    let mut items = vec![r#"{"chain": {"family": "ip", "table": "f", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}"#.to_string()];
    for i in 0..100 {
        items.push(format!(r#"{{"rule": {{"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "ip", "field": "daddr"}}}}, "right": "198.19.{}.{}"}}}}, {{"counter": null}}, {{"drop": null}}]}}}}"#, i / 250, i % 250 + 1));
    }
    let json = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
    let p = FilterPlan::from_nft_json(&json, false, false).unwrap();
    assert_eq!(
        p.v4,
        FamilyFilter::Compiled {
            policy_drop: false,
            rules: 100,
        }
    );
    let t = p.tables("d0", &|_| None);
    assert_eq!(
        classify(
            &t,
            false,
            v4("198.18.0.1"),
            v4("198.19.0.77"),
            17,
            1,
            2,
            3,
            false
        ),
        Action::Drop
    );
    assert_eq!(
        classify(
            &t,
            false,
            v4("198.18.0.1"),
            v4("198.19.0.101"),
            17,
            1,
            2,
            3,
            false
        ),
        Action::Accept
    );
    // only destinations are matched: the program skips every other lookup
    assert_eq!(p.fields(), FIELD_DST);
}

#[test]
fn a_rule_added_on_one_field_touches_that_field_and_the_wildcards_only() {
    let chain = r#"{"chain": {"family": "ip", "table": "f", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}"#;
    let rule = |field: &str, addr: &str| {
        format!(
            r#"{{"rule": {{"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "ip", "field": "{field}"}}}}, "right": "{addr}"}}}}, {{"drop": null}}]}}}}"#
        )
    };
    let mut items = vec![chain.to_string()];
    items.extend((0..100).map(|i| rule("saddr", &format!("198.18.1.{i}"))));
    items.push(r#"{"rule": {"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}, {"drop": null}]}}"#.to_string());
    let before = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
    items.push(rule("daddr", "198.19.44.1"));
    let after = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
    let compile = |json: &str| {
        FilterPlan::from_nft_json(json, false, false)
            .unwrap()
            .tables("d0", &|_| None)
    };
    let (a, b) = (compile(&before), compile(&after));
    // The 100 source entries, the 512 protocol slots and the port entries stay as they
    // are: only the destination trie gains the new prefix, the wildcards of the other
    // fields gain the rule, and its verdict is appended.
    assert_eq!(a.src4, b.src4);
    assert_eq!(a.proto, b.proto);
    assert_eq!(a.dport, b.dport);
    assert_eq!(b.dst4.len(), a.dst4.len() + 1);
    assert_eq!(b.actions.len(), a.actions.len() + 1);
    // Same verdicts as the chain: the new rule drops its destination, the old ones hold.
    let go = |t: &Tables, src: &str, dst: &str, dport: u16| {
        classify(t, false, v4(src), v4(dst), 6, 1000, dport, 3, false)
    };
    for t in [&a, &b] {
        assert_eq!(go(t, "198.18.1.7", "198.19.0.1", 80), Action::Drop);
        assert_eq!(go(t, "198.18.2.7", "198.19.0.1", 22), Action::Drop);
        assert_eq!(go(t, "198.18.2.7", "198.19.0.1", 80), Action::Accept);
    }
    assert_eq!(go(&a, "198.18.2.7", "198.19.44.1", 80), Action::Accept);
    assert_eq!(go(&b, "198.18.2.7", "198.19.44.1", 80), Action::Drop);
}

#[test]
fn iptables_set_matches_resolve_through_ipset() {
    let json = r#"{"nftables": [
      {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
      {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "198.19.0.1"}}, {"counter": null}, {"drop": null}]}},
      {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "expr": [{"xt": {"type": "match", "name": "set"}}, {"counter": null}, {"drop": null}]}}
    ]}"#;
    let save = "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 198.19.0.1/32 -j DROP\n-A FORWARD -m set --match-set blk dst -j DROP\nCOMMIT\n";
    let mut info = IpsetInfo::default();
    info.add_ipt_save("ip", save);
    // unresolved members: the rule goes to the kernel
    let p = FilterPlan::from_nft_json_with(json, false, false, &info).unwrap();
    assert_eq!(p.rules_v4[1].action, Action::Kernel);
    info.set_ipset_save("create blk hash:net family inet hashsize 1024 maxelem 65536\nadd blk 198.19.5.0/24\nadd blk 198.19.9.9\n");
    let p = FilterPlan::from_nft_json_with(json, false, false, &info).unwrap();
    assert_eq!(p.rules_v4[1].action, Action::Drop);
    assert_eq!(
        p.rules_v4[1].dst4,
        Some(vec![
            (u32::from(Ipv4Addr::new(198, 19, 5, 0)), 24),
            (u32::from(Ipv4Addr::new(198, 19, 9, 9)), 32)
        ])
    );
}

#[test]
fn ranges_split_into_aligned_prefixes() {
    assert_eq!(range_to_prefixes(8, 11, 32).unwrap(), vec![(8, 30)]);
    assert_eq!(range_to_prefixes(7, 8, 32).unwrap(), vec![(7, 32), (8, 32)]);
    assert_eq!(
        range_to_prefixes(0, u32::MAX as u128, 32).unwrap(),
        vec![(0, 0)]
    );
}

#[test]
fn a_conntrack_rule_in_any_chain_says_the_family_may_be_reassembled() {
    // An input chain only (the filter stays open) with the commonest host rule.
    let host = r#"{"nftables": [
      {"chain": {"family": "ip", "table": "host", "name": "in", "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
      {"rule": {"family": "ip", "table": "host", "chain": "in", "expr": [
        {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}, {"accept": null}]}}]}"#;
    let p = FilterPlan::from_nft_json(host, false, false).unwrap();
    assert_eq!((p.v4, p.v6), (FamilyFilter::Open, FamilyFilter::Open));
    let why = p.reassembly_v4.expect("a ct rule may reassemble IPv4");
    assert!(
        why.contains("ip table host chain in") && why.contains("ct"),
        "{why}"
    );
    assert_eq!(p.reassembly_v6, None, "an ip table does not touch IPv6");
    // inet: both families; in the forward chain as well.
    let p = FilterPlan::from_nft_json(RULESET, false, false).unwrap();
    assert!(p.reassembly_v4.is_some() && p.reassembly_v6.is_some());
    // Rules on addresses and ports only, in any chain: nothing reassembles.
    let plain = r#"{"nftables": [
      {"chain": {"family": "inet", "table": "t", "name": "in", "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
      {"rule": {"family": "inet", "table": "t", "chain": "in", "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}, {"accept": null}]}}]}"#;
    let p = FilterPlan::from_nft_json(plain, false, false).unwrap();
    assert_eq!((p.reassembly_v4, p.reassembly_v6), (None, None));
}
