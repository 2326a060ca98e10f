//! nftables rule events, decoded in process. The kernel's NFT_MSG_NEWRULE event carries the
//! whole rule (table, chain, handle, position and its expressions), so `iptables -A/-D` and
//! `nft add/insert/delete rule` can update the daemon's copy of the ruleset without reading it
//! back through libnftables (about 0.35 ms for even a small ruleset).
//!
//! The decoder knows exactly the expressions the filter compiler supports, and emits them as
//! the same typed tree (`expr::Expr`) that `nft -j list ruleset` is read into, so one rule
//! compiler serves both paths, with no JSON in between. Anything
//! else (another expression, a batch of several changes, a chain it has not seen) is left to a
//! full read. The daemon reads the ruleset back once the burst is over and counts any
//! difference, so a decoder mistake is visible and short-lived.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::filter::expr::{Datum, Expr, Key, Op, Rhs, Verdict, Xt};
use crate::kernel::netlink::{attrs, Msg};

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_NEWGEN: u16 = 15;
const NLM_F_APPEND: u16 = 0x800;

const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_POSITION: u16 = 6;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_REG_VERDICT: u32 = 0;
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;

/// One rule added or deleted, as the kernel announced it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleEvent {
    pub add: bool,
    /// nft family name: "ip", "ip6", "inet", ...
    pub family: &'static str,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// The handle of the rule now just before it. Kernels differ on when they give it: for
    /// any rule but the first (older kernels), or only in the middle of the chain (newer).
    pub after: Option<u64>,
    /// NLM_F_APPEND on the event: without `after`, the rule is the chain's last, else its
    /// first (the older kernels never set it and give `after` for all but the first).
    pub append: bool,
    /// The expressions; Err: why they are not decoded here.
    pub expr: Result<Vec<Expr>, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NftMsg {
    Rule(RuleEvent),
    /// NFT_MSG_NEWGEN: the end of one committed batch.
    Gen,
    /// Anything else: a table, chain, set, element or object change.
    Other,
}

fn family_name(f: u8) -> &'static str {
    match f {
        1 => "inet",
        2 => "ip",
        3 => "arp",
        5 => "netdev",
        7 => "bridge",
        10 => "ip6",
        _ => "unknown",
    }
}

fn be32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

fn be64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}

fn string(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

fn find<'a>(list: &[(u16, &'a [u8])], ty: u16) -> Option<&'a [u8]> {
    list.iter().find(|(t, _)| *t == ty).map(|(_, v)| *v)
}

/// Decodes one message of the NFNLGRP_NFTABLES group.
pub fn decode(m: &Msg) -> NftMsg {
    if m.ty >> 8 != NFNL_SUBSYS_NFTABLES {
        return NftMsg::Other;
    }
    let kind = m.ty & 0xff;
    if kind == NFT_MSG_NEWGEN {
        return NftMsg::Gen;
    }
    if kind != NFT_MSG_NEWRULE && kind != NFT_MSG_DELRULE {
        return NftMsg::Other;
    }
    // struct nfgenmsg: family, version, res_id
    let Some(&family) = m.payload.first() else {
        return NftMsg::Other;
    };
    let a = attrs(m.payload.get(4..).unwrap_or(&[]));
    let (Some(table), Some(chain), Some(handle)) = (
        find(&a, NFTA_RULE_TABLE),
        find(&a, NFTA_RULE_CHAIN),
        find(&a, NFTA_RULE_HANDLE).and_then(be64),
    ) else {
        return NftMsg::Other;
    };
    let family = family_name(family);
    let add = kind == NFT_MSG_NEWRULE;
    let expr = if !add {
        Ok(vec![])
    } else {
        match find(&a, NFTA_RULE_EXPRESSIONS) {
            Some(list) => expressions(family, list),
            None => Err("rule without expressions".into()),
        }
    };
    NftMsg::Rule(RuleEvent {
        add,
        family,
        table: string(table),
        chain: string(chain),
        handle,
        after: find(&a, NFTA_RULE_POSITION).and_then(be64),
        append: m.flags & NLM_F_APPEND != 0,
        expr,
    })
}

/// The rule changes of a drained set of messages, when that is all they say: whole batches
/// (each closed by its NEWGEN), each adding or each deleting rules, every rule decoded.
/// Anything else (a table, chain or set change, a replace, a batch cut short) needs a read.
///
/// A batch is applied in the order the kernel announced it; an added rule's position names
/// its neighbour as it stands after the whole batch, which `apply` may not know yet (then it
/// refuses, and the caller reads the ruleset). A replace announces the new rule before the
/// old one leaves, with a position that describes neither state: mixed batches are refused.
pub fn rule_changes(msgs: &[NftMsg]) -> Option<Vec<&RuleEvent>> {
    let mut out = Vec::new();
    let mut batch: Vec<&RuleEvent> = Vec::new();
    for m in msgs {
        match m {
            NftMsg::Rule(ev) if ev.expr.is_ok() => batch.push(ev),
            NftMsg::Gen => {
                if batch.iter().any(|e| e.add != batch[0].add) {
                    return None;
                }
                out.append(&mut batch);
            }
            _ => return None,
        }
    }
    (batch.is_empty() && !out.is_empty()).then_some(out)
}

/// What a register holds, as far as the filter cares.
#[derive(Debug, Clone)]
enum Reg {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        /// A prefix mask from a bitwise expression (as many bytes as `len`).
        mask: Option<Vec<u8>>,
    },
    Meta(u32),
}

fn data_value(nested: &[u8]) -> Option<&[u8]> {
    find(&attrs(nested), NFTA_DATA_VALUE)
}

/// Leading one bits of `mask`, if the rest are zeros (a prefix mask).
fn prefix_len(mask: &[u8]) -> Option<u32> {
    let bits: Vec<bool> = mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1 == 1))
        .collect();
    let ones = bits.iter().take_while(|b| **b).count();
    bits[ones..].iter().all(|b| !b).then_some(ones as u32)
}

/// An address match: the loaded bytes (from the field's first byte), an optional prefix
/// mask and the compared value, as the value nft lists (an address or a prefix).
fn address(width: u32, len: u32, mask: &Option<Vec<u8>>, value: &[u8]) -> Result<Datum, String> {
    if len == 0 || len > width || value.len() != len as usize {
        return Err("address compare of an odd length".into());
    }
    let plen = match mask {
        Some(m) if m.len() == len as usize => prefix_len(m).ok_or("non-prefix mask")?,
        Some(_) => return Err("mask of another length".into()),
        None => 8 * len,
    };
    if plen == 0 {
        return Err("zero-length prefix".into());
    }
    let mut full = vec![0u8; width as usize];
    full[..value.len()].copy_from_slice(value);
    // Bits past the prefix set in the value: a match nft prints in another form.
    let spill = full.iter().enumerate().any(|(i, b)| {
        let keep = plen.saturating_sub(8 * i as u32).min(8);
        let keep_mask = if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
        b & !keep_mask != 0
    });
    if spill {
        return Err("value bits outside the prefix".into());
    }
    let text = if width == 4 {
        Ipv4Addr::from(<[u8; 4]>::try_from(&full[..]).map_err(|_| "bad address")?).to_string()
    } else {
        Ipv6Addr::from(<[u8; 16]>::try_from(&full[..]).map_err(|_| "bad address")?).to_string()
    };
    Ok(if plen == 8 * width {
        Datum::Str(text)
    } else {
        Datum::Prefix {
            addr: Some(text),
            len: Some(u64::from(plen)),
        }
    })
}

fn matched(op: Op, key: Key, right: Rhs) -> Expr {
    Expr::Match { key, op, right }
}

fn payload_key(protocol: &str, field: &str) -> Key {
    Key::Payload {
        protocol: protocol.to_string(),
        field: field.to_string(),
    }
}

/// The rule's expressions, or why not.
fn expressions(family: &'static str, list: &[u8]) -> Result<Vec<Expr>, String> {
    let mut regs: HashMap<u32, Reg> = HashMap::new();
    let mut ctx = Context {
        family: (family != "inet").then_some(family),
        l4: None,
    };
    let mut out = Vec::new();
    for (ty, elem) in attrs(list) {
        if ty != NFTA_LIST_ELEM {
            return Err("unexpected attribute in the expression list".into());
        }
        let e = attrs(elem);
        let name = find(&e, NFTA_EXPR_NAME).map(string).unwrap_or_default();
        let d = attrs(find(&e, NFTA_EXPR_DATA).unwrap_or(&[]));
        match name.as_str() {
            "payload" => {
                let (dreg, reg) = payload_load(&d)?;
                regs.insert(dreg, reg);
            }
            "meta" => {
                let (dreg, reg) = meta_load(&d)?;
                regs.insert(dreg, reg);
            }
            "bitwise" => {
                let (dreg, reg) = bitwise(&d, &regs)?;
                regs.insert(dreg, reg);
            }
            "cmp" => out.push(cmp(&d, &regs, &mut ctx)?),
            "lookup" => out.push(lookup(&d, &regs, &ctx)?),
            "immediate" => out.push(immediate(&d)?),
            "counter" => out.push(Expr::Counter),
            // iptables-nft's compatibility match for `-m set`: resolved by handle later.
            "match" if find(&d, 1).map(string).as_deref() == Some("set") => {
                out.push(Expr::Xt(Xt::SetMatch))
            }
            other => return Err(format!("expression `{other}`")),
        }
    }
    Ok(out)
}

/// One expression's attributes (NFTA_EXPR_DATA, parsed).
type ExprData<'a> = [(u16, &'a [u8])];

/// Attribute `t` of an expression as a big-endian u32.
fn attr_u32(d: &ExprData, t: u16) -> Option<u32> {
    find(d, t).and_then(be32)
}

/// A payload load: (destination register, what it holds).
fn payload_load(d: &ExprData) -> Result<(u32, Reg), String> {
    let u = |t: u16| attr_u32(d, t);
    // NFTA_PAYLOAD_SREG (5) set: a payload write, not a load.
    if find(d, 5).is_some() {
        return Err("payload write".into());
    }
    let (Some(dreg), Some(base), Some(offset), Some(len)) = (u(1), u(2), u(3), u(4)) else {
        return Err("incomplete payload expression".into());
    };
    let reg = Reg::Payload {
        base,
        offset,
        len,
        mask: None,
    };
    Ok((dreg, reg))
}

/// A meta load: (destination register, what it holds).
fn meta_load(d: &ExprData) -> Result<(u32, Reg), String> {
    if find(d, 3).is_some() {
        return Err("meta set".into());
    }
    let (Some(dreg), Some(key)) = (attr_u32(d, 1), attr_u32(d, 2)) else {
        return Err("incomplete meta expression".into());
    };
    Ok((dreg, Reg::Meta(key)))
}

/// A prefix mask over a loaded payload: (destination register, the masked payload).
fn bitwise(d: &ExprData, regs: &HashMap<u32, Reg>) -> Result<(u32, Reg), String> {
    let u = |t: u16| attr_u32(d, t);
    let (Some(sreg), Some(dreg), Some(len)) = (u(1), u(2), u(3)) else {
        return Err("incomplete bitwise expression".into());
    };
    if u(6).unwrap_or(0) != 0 {
        return Err("bitwise shift".into());
    }
    let mask = find(d, 4)
        .and_then(data_value)
        .ok_or("bitwise without mask")?;
    let xor = find(d, 5)
        .and_then(data_value)
        .ok_or("bitwise without xor")?;
    if xor.iter().any(|b| *b != 0) || mask.len() != len as usize {
        return Err("bitwise other than a prefix mask".into());
    }
    match regs.get(&sreg).cloned() {
        Some(Reg::Payload {
            base,
            offset,
            len: plen,
            mask: None,
        }) if plen == len => {
            let reg = Reg::Payload {
                base,
                offset,
                len,
                mask: Some(mask.to_vec()),
            };
            Ok((dreg, reg))
        }
        _ => Err("bitwise on something other than a payload".into()),
    }
}

/// An equality comparison of a register with a value.
fn cmp(d: &ExprData, regs: &HashMap<u32, Reg>, ctx: &mut Context) -> Result<Expr, String> {
    let (Some(sreg), Some(op)) = (attr_u32(d, 1), attr_u32(d, 2)) else {
        return Err("incomplete cmp expression".into());
    };
    let op = match op {
        NFT_CMP_EQ => Op::Eq,
        NFT_CMP_NEQ => Op::Neq,
        _ => return Err("ordered comparison".into()),
    };
    let value = find(d, 3).and_then(data_value).ok_or("cmp without data")?;
    let reg = regs.get(&sreg).ok_or("cmp of an unset register")?;
    compare(ctx, reg, op, value)
}

/// A named set (`ip daddr @blk`); anonymous sets come in the same batch as their elements,
/// which is never decoded here.
fn lookup(d: &ExprData, regs: &HashMap<u32, Reg>, ctx: &Context) -> Result<Expr, String> {
    let name = find(d, 1).map(string).ok_or("lookup without a set")?;
    if find(d, 3).is_some() || name.starts_with("__") {
        return Err("map or anonymous set lookup".into());
    }
    let reg = regs.get(&attr_u32(d, 2).ok_or("lookup without a register")?);
    let reg = reg.ok_or("lookup of an unset register")?;
    let op = if attr_u32(d, 5).unwrap_or(0) & 1 != 0 {
        Op::Neq
    } else {
        Op::Eq
    };
    Ok(matched(op, left_of(ctx, reg)?, Rhs::Named(name)))
}

/// An immediate verdict: accept or drop.
fn immediate(d: &ExprData) -> Result<Expr, String> {
    if attr_u32(d, 1) != Some(NFT_REG_VERDICT) {
        return Err("immediate data".into());
    }
    let verdict = find(d, 2)
        .map(attrs)
        .and_then(|v| find(&v, NFTA_DATA_VERDICT).map(attrs))
        .and_then(|v| find(&v, NFTA_VERDICT_CODE).and_then(be32))
        .ok_or("immediate without a verdict")? as i32;
    match verdict {
        NF_DROP => Ok(Expr::Verdict(Verdict::Drop)),
        NF_ACCEPT => Ok(Expr::Verdict(Verdict::Accept)),
        _ => Err("jump, goto, return or continue".into()),
    }
}

/// What the expressions so far have pinned: the address family (an inet table's rules start
/// with `meta nfproto`) and the transport protocol (`meta l4proto`), as nft itself infers
/// `ip daddr` and `tcp dport` from the raw header offsets.
struct Context {
    family: Option<&'static str>,
    l4: Option<u8>,
}

/// The left-hand side of a match on what `reg` holds, loaded whole (no mask, full length).
fn left_of(ctx: &Context, reg: &Reg) -> Result<Key, String> {
    match reg {
        Reg::Meta(NFT_META_L4PROTO) => Ok(Key::Meta("l4proto".into())),
        Reg::Meta(NFT_META_IIFNAME) => Ok(Key::Meta("iifname".into())),
        Reg::Meta(NFT_META_OIFNAME) => Ok(Key::Meta("oifname".into())),
        Reg::Payload {
            base: NFT_PAYLOAD_NETWORK_HEADER,
            offset,
            len,
            mask: None,
        } => {
            let (proto, field, width) = address_field(ctx, *offset)?;
            if *len != width {
                return Err("partial address in a set lookup".into());
            }
            Ok(payload_key(proto, field))
        }
        Reg::Payload {
            base: NFT_PAYLOAD_TRANSPORT_HEADER,
            offset,
            len: 2,
            mask: None,
        } => port_field(ctx, *offset),
        _ => Err("set lookup of an unsupported key".into()),
    }
}

/// (protocol, field, width) of an address at `offset` in the network header.
fn address_field(ctx: &Context, offset: u32) -> Result<(&'static str, &'static str, u32), String> {
    match (ctx.family, offset) {
        (Some("ip"), 12) => Ok(("ip", "saddr", 4)),
        (Some("ip"), 16) => Ok(("ip", "daddr", 4)),
        (Some("ip6"), 8) => Ok(("ip6", "saddr", 16)),
        (Some("ip6"), 24) => Ok(("ip6", "daddr", 16)),
        (f, _) => Err(format!("{f:?} header offset {offset}")),
    }
}

fn port_field(ctx: &Context, offset: u32) -> Result<Key, String> {
    let proto = match ctx.l4 {
        Some(6) => "tcp",
        Some(17) => "udp",
        _ => return Err("transport header without a protocol".into()),
    };
    let field = match offset {
        0 => "sport",
        2 => "dport",
        _ => return Err(format!("{proto} header offset {offset}")),
    };
    Ok(payload_key(proto, field))
}

/// One `cmp` against what its register holds, as a match.
fn compare(ctx: &mut Context, reg: &Reg, op: Op, value: &[u8]) -> Result<Expr, String> {
    match reg {
        Reg::Meta(NFT_META_NFPROTO) => {
            let family = match value {
                [2] => "ip",
                [10] => "ip6",
                _ => return Err("nfproto other than ipv4 or ipv6".into()),
            };
            if op == Op::Eq {
                ctx.family = Some(family);
            }
            let name = if family == "ip" { "ipv4" } else { "ipv6" };
            Ok(matched(
                op,
                Key::Meta("nfproto".into()),
                Rhs::Value(Datum::Str(name.into())),
            ))
        }
        Reg::Meta(NFT_META_L4PROTO) => {
            let [p] = value else {
                return Err("l4proto of an odd length".into());
            };
            if op == Op::Eq {
                ctx.l4 = Some(*p);
            }
            let key = left_of(ctx, reg)?;
            Ok(matched(op, key, Rhs::Value(Datum::Num(u64::from(*p)))))
        }
        Reg::Meta(NFT_META_IIFNAME | NFT_META_OIFNAME) => {
            // An exact name is compared NUL-padded; a shorter compare is `eth+`.
            let Some(end) = value.iter().position(|b| *b == 0) else {
                return Err("interface name wildcard".into());
            };
            if value[end..].iter().any(|b| *b != 0) {
                return Err("bytes after the interface name".into());
            }
            let key = left_of(ctx, reg)?;
            Ok(matched(op, key, Rhs::Value(Datum::Str(string(value)))))
        }
        Reg::Payload {
            base: NFT_PAYLOAD_NETWORK_HEADER,
            offset,
            len,
            mask,
        } => {
            let (proto, field, width) = address_field(ctx, *offset)?;
            Ok(matched(
                op,
                payload_key(proto, field),
                Rhs::Value(address(width, *len, mask, value)?),
            ))
        }
        Reg::Payload {
            base: NFT_PAYLOAD_TRANSPORT_HEADER,
            offset,
            len: 2,
            mask: None,
        } => {
            let left = port_field(ctx, *offset)?;
            let port = u16::from_be_bytes(value.try_into().map_err(|_| "port of an odd length")?);
            Ok(matched(op, left, Rhs::Value(Datum::Num(u64::from(port)))))
        }
        _ => Err("compare of an unsupported key".into()),
    }
}

#[cfg(test)]
mod tests;
