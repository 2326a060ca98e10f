//! Services in, a [`Plan`] for the data path out: every real gets a slot, kept from the
//! previous plan while the real stays in its service (so connection-table entries, which name
//! slots, stay right), and every service a lookup table over its reals' slots.
//!
//! A service's reals are scheduled in the order of their address and port, not the order they
//! were added, so nodes given the same reals build the same tables (docs/LB.md, "Several
//! nodes: tables that agree").

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::maglev;
use crate::model::{Plan, PlannedReal, PlannedService, Real, Scheduler, Service, ServiceKey};
use crate::sched;
use crate::{Error, Result};

/// The identity of a real inside the data path: its service and its address (with the port
/// resolved, so `RIP` and `RIP:VPORT` are one real).
fn identity(key: &ServiceKey, real: SocketAddr) -> (ServiceKey, SocketAddr) {
    (*key, resolved(key, real))
}

fn resolved(key: &ServiceKey, real: SocketAddr) -> SocketAddr {
    if real.port() == 0 {
        SocketAddr::new(real.ip(), key.vip.port())
    } else {
        real
    }
}

/// Builds the plan for `services` (their order is the services' ids). `ring_size` is the
/// Maglev table size and must be prime; it also caps a `wrr` sequence.
pub fn build(services: &[Service], ring_size: u32, previous: Option<&Plan>) -> Result<Plan> {
    if !maglev::is_prime(ring_size) {
        return Err(Error::Invalid(format!(
            "table size {ring_size} is not prime; use a prime such as 65537, 32749 or 251"
        )));
    }
    // The slots the previous plan gave, by identity.
    let mut kept: HashMap<(ServiceKey, SocketAddr), u32> = HashMap::new();
    if let Some(prev) = previous {
        for (slot, real) in prev.reals.iter().enumerate() {
            if let Some(r) = real {
                if let Some(s) = prev.services.get(r.service as usize) {
                    kept.insert((s.key, r.addr), slot as u32);
                }
            }
        }
    }
    let mut reals: Vec<Option<PlannedReal>> = Vec::new();
    let mut wanted: Vec<(u32, (ServiceKey, SocketAddr), PlannedReal)> = Vec::new();
    let mut fresh: Vec<(u32, usize, PlannedReal)> = Vec::new();
    for (sid, s) in services.iter().enumerate() {
        for (ri, r) in s.reals.iter().enumerate() {
            let id = identity(&s.key, r.addr);
            let planned = PlannedReal {
                service: sid as u32,
                addr: id.1,
                mode: r.mode,
                tunnel: r.tunnel,
            };
            match kept.get(&id) {
                Some(&slot) => wanted.push((slot, id, planned)),
                None => fresh.push((sid as u32, ri, planned)),
            }
        }
    }
    for (slot, _, planned) in wanted {
        let slot = slot as usize;
        if reals.len() <= slot {
            reals.resize(slot + 1, None);
        }
        reals[slot] = Some(planned);
    }
    // New reals take the lowest slot that is free now. A slot freed by this change is not
    // reused by it: the removed real's connection entries still name it, and a new real of the
    // same service would receive their packets (and reset them) instead of the kernel.
    let freed: Vec<bool> = previous
        .map(|p| p.reals.iter().map(|r| r.is_some()).collect())
        .unwrap_or_default();
    let mut slot_of: HashMap<(u32, usize), u32> = HashMap::new();
    let mut cursor = 0usize;
    for (sid, ri, planned) in fresh {
        while cursor < reals.len()
            && (reals[cursor].is_some() || freed.get(cursor).copied().unwrap_or(false))
        {
            cursor += 1;
        }
        if cursor == reals.len() {
            reals.push(None);
        }
        reals[cursor] = Some(planned);
        slot_of.insert((sid, ri), cursor as u32);
    }
    let slot_by_identity: HashMap<(ServiceKey, SocketAddr), u32> = reals
        .iter()
        .enumerate()
        .filter_map(|(slot, r)| {
            let r = r.as_ref()?;
            Some(((services[r.service as usize].key, r.addr), slot as u32))
        })
        .collect();

    let mut planned_services = Vec::with_capacity(services.len());
    for s in services {
        // Maglev gives a contested slot to the real whose turn comes first, and rr/wrr walk
        // the reals in order: by identity, the order is the same on every node.
        let mut by_identity: Vec<&Real> = s.reals.iter().collect();
        by_identity.sort_by_key(|r| resolved(&s.key, r.addr));
        let slots: Vec<u32> = by_identity
            .iter()
            .map(|r| slot_by_identity[&identity(&s.key, r.addr)])
            .collect();
        let weights: Vec<u32> = by_identity.iter().map(|r| r.effective_weight()).collect();
        let order: Vec<u32> = match s.scheduler {
            Scheduler::Mh => {
                let ids: Vec<Vec<u8>> = by_identity
                    .iter()
                    .map(|r| identity_bytes(resolved(&s.key, r.addr)))
                    .collect();
                let entries: Vec<maglev::Entry> = ids
                    .iter()
                    .zip(&weights)
                    .map(|(id, &weight)| maglev::Entry { id, weight })
                    .collect();
                maglev::table(&entries, ring_size)
            }
            Scheduler::Wrr => sched::wrr(&weights, ring_size as usize),
            Scheduler::Rr => sched::rr(&weights),
        };
        planned_services.push(PlannedService {
            key: s.key,
            scheduler: s.scheduler,
            lookup: order.into_iter().map(|i| slots[i as usize]).collect(),
            laddrs: s.laddrs.clone(),
            toa: s.toa,
        });
    }
    // Trailing free slots carry nothing.
    while matches!(reals.last(), Some(None)) {
        reals.pop();
    }
    Ok(Plan {
        ring_size,
        services: planned_services,
        reals,
    })
}

/// A service's lookup table as its reals' `RIP:PORT` in entry order, hashed (FNV-1a, 64 bits,
/// 16 hex digits). Slot numbers are each node's own, addresses are not: two nodes' digests
/// agree when their tables send every flow hash to the same real (docs/LB.md, "Several nodes:
/// tables that agree").
pub fn table_digest(plan: &Plan, service: &PlannedService) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &slot in &service.lookup {
        let addr = plan
            .reals
            .get(slot as usize)
            .and_then(Option::as_ref)
            .map_or_else(|| "free".to_string(), |r| r.addr.to_string());
        for &b in addr.as_bytes().iter().chain(b"\n") {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The bytes Maglev hashes for a real: its address and port, so a real keeps its preference
/// list (and its flows) across restarts and across changes to the other reals.
fn identity_bytes(a: SocketAddr) -> Vec<u8> {
    let mut v = match a.ip() {
        std::net::IpAddr::V4(ip) => ip.octets().to_vec(),
        std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    v.extend_from_slice(&a.port().to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Health, Mode, Proto, Real, Tunnel};

    fn service(vip: &str, reals: &[(&str, u32)], scheduler: Scheduler) -> Service {
        Service {
            key: ServiceKey {
                proto: Proto::Tcp,
                vip: vip.parse().unwrap(),
            },
            scheduler,
            reals: reals
                .iter()
                .map(|(a, w)| Real {
                    addr: a.parse().unwrap(),
                    mode: Mode::Dr,
                    tunnel: Tunnel::Ipip,
                    weight: *w,
                    health: Health::Unchecked,
                })
                .collect(),
            laddrs: vec![],
            toa: false,
            check: None,
        }
    }

    fn spread(p: &Plan, sid: usize) -> HashMap<u32, usize> {
        let mut m = HashMap::new();
        for &s in &p.services[sid].lookup {
            *m.entry(s).or_default() += 1;
        }
        m
    }

    #[test]
    fn slots_survive_changes_to_other_reals_and_services() {
        let a = service(
            "198.18.0.10:80",
            &[("198.18.100.1:0", 1), ("198.18.101.1:8080", 1)],
            Scheduler::Mh,
        );
        let b = service("198.18.0.11:53", &[("198.18.102.1:53", 1)], Scheduler::Rr);
        let p1 = build(&[a.clone(), b.clone()], 251, None).unwrap();
        assert_eq!(p1.reals.len(), 3);
        assert_eq!(
            p1.reals[0].as_ref().unwrap().addr,
            "198.18.100.1:80".parse().unwrap(),
            "port 0 is the service's port"
        );
        // Remove the first real of `a`, add one to `b`, drop nothing else.
        let mut a2 = a.clone();
        a2.reals.remove(0);
        let mut b2 = b.clone();
        b2.reals
            .push(service("1.1.1.1:1", &[("198.18.103.1:53", 1)], Scheduler::Rr).reals[0].clone());
        let p2 = build(&[a2, b2], 251, Some(&p1)).unwrap();
        assert!(
            p2.reals[0].is_none(),
            "the removed real's slot is not reused at once"
        );
        assert_eq!(p2.reals[1], p1.reals[1]);
        assert_eq!(p2.reals[2], p1.reals[2]);
        assert_eq!(
            p2.reals[3].as_ref().unwrap().addr,
            "198.18.103.1:53".parse().unwrap()
        );
        // The next change may reuse slot 0.
        let p3 = build(
            &[service(
                "198.18.0.12:80",
                &[("198.18.104.1:80", 1)],
                Scheduler::Mh,
            )],
            251,
            Some(&p2),
        )
        .unwrap();
        assert_eq!(p3.reals.len(), 1);
    }

    #[test]
    fn weight_zero_and_down_keep_their_slot_but_leave_the_table() {
        let mut s = service(
            "198.18.0.10:80",
            &[("198.18.100.1:80", 1), ("198.18.101.1:80", 1)],
            Scheduler::Mh,
        );
        let p1 = build(std::slice::from_ref(&s), 251, None).unwrap();
        s.reals[0].weight = 0;
        let p2 = build(std::slice::from_ref(&s), 251, Some(&p1)).unwrap();
        assert_eq!(p2.reals, p1.reals);
        assert!(p2.services[0].lookup.iter().all(|&slot| slot == 1));
        s.reals[0].weight = 1;
        s.reals[1].health = Health::Down;
        let p3 = build(std::slice::from_ref(&s), 251, Some(&p2)).unwrap();
        assert!(p3.services[0].lookup.iter().all(|&slot| slot == 0));
        s.reals[0].health = Health::Down;
        let p4 = build(&[s], 251, Some(&p3)).unwrap();
        assert!(p4.services[0].lookup.is_empty());
    }

    #[test]
    fn schedulers_fill_their_lookup() {
        let reals = [("198.18.100.1:80", 1), ("198.18.101.1:80", 3)];
        let mh = build(
            &[service("198.18.0.10:80", &reals, Scheduler::Mh)],
            251,
            None,
        )
        .unwrap();
        assert_eq!(mh.services[0].lookup.len(), 251);
        let s = spread(&mh, 0);
        assert!(s[&0] > 55 && s[&0] < 70, "{s:?}");
        let wrr = build(
            &[service("198.18.0.10:80", &reals, Scheduler::Wrr)],
            251,
            None,
        )
        .unwrap();
        assert_eq!(wrr.services[0].lookup, vec![1, 0, 1, 1]);
        let rr = build(
            &[service("198.18.0.10:80", &reals, Scheduler::Rr)],
            251,
            None,
        )
        .unwrap();
        assert_eq!(rr.services[0].lookup, vec![0, 1]);
    }

    #[test]
    fn a_real_carries_its_tunnel_to_the_plan_and_keeps_its_slot_when_it_changes() {
        let mut s = service(
            "198.18.0.10:80",
            &[("198.18.100.1:80", 1), ("198.18.101.1:80", 1)],
            Scheduler::Mh,
        );
        s.reals[1].mode = Mode::Tunnel;
        let p1 = build(std::slice::from_ref(&s), 251, None).unwrap();
        assert_eq!(p1.reals[1].as_ref().unwrap().tunnel, Tunnel::Ipip);
        let gue = Tunnel::Gue {
            port: 6080,
            csum: false,
        };
        s.reals[1].tunnel = gue;
        let p2 = build(std::slice::from_ref(&s), 251, Some(&p1)).unwrap();
        let r = p2.reals[1].as_ref().unwrap();
        assert_eq!(
            (r.addr, r.mode, r.tunnel),
            (s.reals[1].addr, Mode::Tunnel, gue)
        );
        assert_eq!(p2.services[0].lookup, p1.services[0].lookup);
    }

    /// A service's lookup table as its reals' addresses: slots are this node's own numbering,
    /// so two nodes compare addresses.
    fn table_by_address(p: &Plan, sid: usize) -> Vec<SocketAddr> {
        p.services[sid]
            .lookup
            .iter()
            .map(|&slot| p.reals[slot as usize].as_ref().unwrap().addr)
            .collect()
    }

    /// Every order of `items` (Heap's algorithm).
    fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
        fn heap<T: Clone>(k: usize, a: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
            if k <= 1 {
                out.push(a.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, a, out);
                let j = if k.is_multiple_of(2) { i } else { 0 };
                a.swap(j, k - 1);
            }
        }
        let mut out = Vec::new();
        heap(items.len(), &mut items.to_vec(), &mut out);
        out
    }

    const FIVE_REALS: [(&str, u32); 5] = [
        ("198.18.100.1:80", 1),
        ("198.18.100.2:80", 2),
        ("198.18.100.3:8080", 3),
        ("198.18.100.3:80", 5),
        ("198.18.99.200:0", 7),
    ];

    #[test]
    fn every_order_of_the_same_reals_gives_the_same_table() {
        for scheduler in [Scheduler::Mh, Scheduler::Wrr, Scheduler::Rr] {
            let orders = permutations(&FIVE_REALS);
            let distinct: std::collections::HashSet<_> = orders.iter().collect();
            assert_eq!((orders.len(), distinct.len()), (120, 120));
            let first = build(
                &[service("198.18.0.10:80", &orders[0], scheduler)],
                65537,
                None,
            )
            .unwrap();
            let want = table_by_address(&first, 0);
            for order in &orders[1..] {
                let p = build(&[service("198.18.0.10:80", order, scheduler)], 65537, None).unwrap();
                let got = table_by_address(&p, 0);
                let differ = want.iter().zip(&got).filter(|(a, b)| a != b).count();
                assert!(
                    got == want,
                    "{scheduler:?}: reals in the order {order:?} give a table that differs in {differ} of {} entries",
                    want.len()
                );
            }
        }
    }

    #[test]
    fn histories_that_end_in_the_same_reals_give_the_same_table() {
        let svc = |reals: &[(&str, u32)]| service("198.18.0.10:80", reals, Scheduler::Mh);
        let r = FIVE_REALS;
        let fresh = build(&[svc(&r)], 65537, None).unwrap();
        let want = table_by_address(&fresh, 0);
        // Each history: the configurations one node went through, one plan after another.
        let histories: Vec<Vec<Vec<(&str, u32)>>> = vec![
            // Added one by one, the first deleted and added again (now last).
            vec![
                r[..1].to_vec(),
                r[..3].to_vec(),
                r.to_vec(),
                r[1..].to_vec(),
                [&r[1..], &r[..1]].concat(),
            ],
            // Added in reverse, two deleted and re-added in another order.
            vec![
                vec![r[4], r[3]],
                vec![r[4], r[3], r[2], r[1], r[0]],
                vec![r[4], r[2], r[0]],
                vec![r[4], r[2], r[0], r[1], r[3]],
            ],
            // A weight changed and changed back, a real quiesced (weight 0) and restored.
            vec![
                r.to_vec(),
                vec![r[0], (r[1].0, 9), r[2], r[3], (r[4].0, 0)],
                vec![r[3], r[2], r[1], r[0], r[4]],
            ],
            // Emptied and built again from the middle out.
            vec![
                r.to_vec(),
                vec![],
                vec![r[2]],
                vec![r[1], r[2], r[3]],
                vec![r[0], r[1], r[2], r[3], r[4]],
            ],
        ];
        for (h, history) in histories.iter().enumerate() {
            let mut plan: Option<Plan> = None;
            for reals in history {
                plan = Some(build(&[svc(reals)], 65537, plan.as_ref()).unwrap());
            }
            let got = table_by_address(plan.as_ref().unwrap(), 0);
            let differ = want.iter().zip(&got).filter(|(a, b)| a != b).count();
            assert!(
                got == want,
                "history {h} ends with a table that differs from a fresh build's in {differ} of {} entries",
                want.len()
            );
        }
    }

    #[test]
    fn the_digest_follows_the_table_not_the_order_or_the_slots() {
        let r = FIVE_REALS;
        let digest = |reals: &[(&str, u32)], previous: Option<&Plan>| {
            let p = build(
                &[service("198.18.0.10:80", reals, Scheduler::Mh)],
                251,
                previous,
            )
            .unwrap();
            (table_digest(&p, &p.services[0]), p)
        };
        let (forward, _) = digest(&r, None);
        assert_eq!(forward.len(), 16, "{forward}");
        let reversed: Vec<_> = r.iter().rev().copied().collect();
        let (backward, _) = digest(&reversed, None);
        assert_eq!(forward, backward, "same reals in another order");
        // Other slot numbers, the same table: a node that held an extra real first.
        let (_, with_extra) = digest(&[&[("198.18.100.9:80", 1)][..], &r[..]].concat(), None);
        let (renumbered, p) = digest(&r, Some(&with_extra));
        assert!(p.reals[0].is_none(), "the reals kept their slots, 1 to 5");
        assert_eq!(forward, renumbered);
        let mut heavier = r;
        heavier[0].1 += 1;
        assert_ne!(forward, digest(&heavier, None).0, "a weight changed");
        let (fewer, _) = digest(&r[1..], None);
        assert_ne!(forward, fewer, "a real left");
    }

    #[test]
    fn a_table_size_that_is_not_prime_is_refused_with_advice() {
        let e = build(&[], 65536, None).unwrap_err().to_string();
        assert!(e.contains("not prime") && e.contains("65537"), "{e}");
    }
}
