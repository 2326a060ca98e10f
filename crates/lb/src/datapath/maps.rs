//! The plan into the maps, ordered so that no packet ever sees a half-written service: reals
//! first, then local addresses and lookup rows, then the service entries; removals in the
//! reverse order (service entries, then the real slots no plan names any more).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};

use libbpf_rs::{MapCore, MapFlags};

use super::loader::{bpf, Maps, Program, Shape};
use crate::bpf::types;
use crate::consts::{
    AF_INET, AF_INET6, IPPROTO_ICMP, IPPROTO_ICMPV6, MAX_LADDRS, MODE_DR, MODE_FNAT, MODE_NAT,
    MODE_TUNNEL, SCHED_MH, SCHED_RR, TUN_CSUM, VIP_ECHO, VIP_TOA,
};
use crate::error::Error;
use crate::model::{Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey, Tunnel};
use crate::Result;
use wirespeed_sys::bpf::bytes_of;

/// An address as the maps hold it: family, IPv4 in the first four bytes.
pub fn addr_bytes(a: IpAddr) -> (u8, [u8; 16]) {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(v4) => {
            b[..4].copy_from_slice(&v4.octets());
            (AF_INET, b)
        }
        IpAddr::V6(v6) => (AF_INET6, v6.octets()),
    }
}

/// The data path's number for a mode (LB_MODE_* in bpf/lb_consts.h).
pub fn mode_number(m: Mode) -> u8 {
    match m {
        Mode::Dr => MODE_DR,
        Mode::Tunnel => MODE_TUNNEL,
        Mode::Nat => MODE_NAT,
        Mode::FullNat => MODE_FNAT,
    }
}

pub fn vip_key(proto: u8, addr: SocketAddr) -> types::lb_vip_key {
    let (family, a) = addr_bytes(addr.ip());
    types::lb_vip_key {
        addr: a,
        port: addr.port().to_be(),
        proto,
        family,
    }
}

fn echo_key(ip: IpAddr) -> types::lb_vip_key {
    let proto = if ip.is_ipv4() {
        IPPROTO_ICMP
    } else {
        IPPROTO_ICMPV6
    };
    vip_key(proto, SocketAddr::new(ip, 0))
}

fn real_value(r: &PlannedReal) -> types::lb_real {
    let (family, addr) = addr_bytes(r.addr.ip());
    let (gue_port, tun_flags) = match (r.mode, r.tunnel) {
        (Mode::Tunnel, Tunnel::Gue { port, csum }) => (port, if csum { TUN_CSUM } else { 0 }),
        _ => (0, 0),
    };
    types::lb_real {
        addr,
        port: r.addr.port().to_be(),
        family,
        mode: mode_number(r.mode),
        gue_port: gue_port.to_be(),
        tun_flags,
        pad: 0,
    }
}

fn vip_value(id: u32, s: &PlannedService) -> types::lb_vip {
    types::lb_vip {
        id,
        lookup_len: s.lookup.len() as u32,
        sched: match s.scheduler {
            Scheduler::Mh => SCHED_MH,
            Scheduler::Rr | Scheduler::Wrr => SCHED_RR,
        },
        flags: if s.toa { VIP_TOA } else { 0 },
        laddr_count: s.laddrs.len() as u8,
        pad: 0,
    }
}

/// What the loaded program can carry out of `plan`, checked before any map is written.
pub fn check(sh: &Shape, plan: &Plan) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if plan.ring_size != sh.ring_size && plan.services.iter().any(|s| s.scheduler == Scheduler::Mh)
    {
        return bad(format!(
            "the plan's Maglev ring size {} is not the data path's {}: restart the daemon with the new size",
            plan.ring_size, sh.ring_size
        ));
    }
    if plan.services.len() > sh.max_services as usize {
        return bad(format!(
            "{} services exceed the data path's {}: restart the daemon with a larger --max-services",
            plan.services.len(),
            sh.max_services
        ));
    }
    if plan.reals.len() > sh.max_reals as usize {
        return bad(format!(
            "{} real slots exceed the data path's {}: restart the daemon with a larger --max-reals",
            plan.reals.len(),
            sh.max_reals
        ));
    }
    for s in &plan.services {
        if s.lookup.len() > sh.ring_size as usize {
            return bad(format!(
                "{}: lookup of {} slots exceeds the ring size {}",
                s.key,
                s.lookup.len(),
                sh.ring_size
            ));
        }
        if s.scheduler == Scheduler::Mh
            && !s.lookup.is_empty()
            && s.lookup.len() != sh.ring_size as usize
        {
            return bad(format!(
                "{}: a Maglev table must have {} entries",
                s.key, sh.ring_size
            ));
        }
        if s.laddrs.len() > MAX_LADDRS as usize {
            return bad(format!(
                "{}: at most {MAX_LADDRS} local addresses per service",
                s.key
            ));
        }
        if s.lookup
            .iter()
            .any(|&slot| plan.reals.get(slot as usize).is_none_or(|r| r.is_none()))
        {
            return bad(format!("{}: its lookup names a free real slot", s.key));
        }
        let fam_ok = if s.key.vip.is_ipv4() {
            sh.modes.v4
        } else {
            sh.modes.v6
        };
        if !fam_ok {
            return bad(format!(
                "{}: this address family is not built into the data path",
                s.key
            ));
        }
    }
    for r in plan.reals.iter().flatten() {
        let Some(s) = plan.services.get(r.service as usize) else {
            return bad(format!(
                "real {} names service {} that the plan lacks",
                r.addr, r.service
            ));
        };
        let m = sh.modes;
        let built = match r.mode {
            Mode::Dr => m.dr,
            Mode::Tunnel => m.tunnel,
            Mode::Nat => m.nat,
            Mode::FullNat => m.full_nat,
        };
        if !built {
            return bad(format!(
                "real {} uses {} ({}), which the data path was started without",
                r.addr,
                r.mode.ipvs_name(),
                r.mode.flag()
            ));
        }
        if r.mode != Mode::Tunnel && r.addr.is_ipv4() != s.key.vip.is_ipv4() {
            return bad(format!(
                "real {} and VIP {} differ in address family: only tunnel mode (-i) mixes them",
                r.addr, s.key.vip
            ));
        }
        if r.mode == Mode::FullNat && !s.laddrs.iter().any(|l| l.is_ipv4() == r.addr.is_ipv4()) {
            return bad(format!(
                "{}: full-NAT real {} needs a local address of its family: `wirespeed lb --add-laddr -z ADDR -t {}`",
                s.key, r.addr, s.key.vip
            ));
        }
        if r.mode == Mode::FullNat && s.laddrs.iter().any(|l| l.is_ipv4() != r.addr.is_ipv4()) {
            return bad(format!(
                "{}: its local addresses must all be of its reals' family",
                s.key
            ));
        }
    }
    Ok(())
}

fn upd(map: &libbpf_rs::MapHandle, k: &[u8], v: &[u8], what: &str) -> Result<()> {
    map.update(k, v, MapFlags::ANY)
        .map_err(bpf(format!("write {what}")))
}

fn svc_proto(p: Proto) -> u8 {
    p.number()
}

/// Zeroes one slot of a per-CPU counters map.
pub(crate) fn zero_percpu(
    prog: &Program,
    map: &libbpf_rs::MapHandle,
    key: u32,
    size: usize,
) -> Result<()> {
    let vals = vec![vec![0u8; size]; prog.shape.nr_cpus as usize];
    map.update_percpu(&key.to_ne_bytes(), &vals, MapFlags::ANY)
        .map_err(bpf("zero counters"))
}

/// Makes the maps carry out `plan`, given that they carry out `old` (None: fresh maps).
pub fn apply(prog: &Program, old: Option<&Plan>, plan: &Plan) -> Result<()> {
    check(&prog.shape, plan)?;
    // Service entries by key, old and new (ids are positions).
    let old_ids: HashMap<ServiceKey, u32> = old.map(service_ids).unwrap_or_default();
    let new_ids = service_ids(plan);

    // 1. A service that goes, or whose id moves, leaves first: its packets go to the kernel
    //    for the moment it takes, never through rows being rewritten under it.
    for (key, id) in &old_ids {
        if new_ids.get(key) != Some(id) {
            let _ = prog
                .maps
                .services
                .delete(bytes_of(&vip_key(svc_proto(key.proto), key.vip)));
        }
    }
    // 2. Reals: every slot the plan fills.
    write_reals(prog, old, plan)?;
    // 3. Local addresses and lookup rows, then the service entry.
    for (id, s) in plan.services.iter().enumerate() {
        let id = id as u32;
        let prev = old
            .and_then(|o| old_ids.get(&s.key).map(|&i| (i, o)))
            .filter(|(i, _)| *i == id)
            .map(|(i, o)| &o.services[i as usize]);
        write_service(prog, id, s, prev)?;
    }
    // 4. Address-only entries: echo answered for every VIP address.
    write_echo(&prog.maps, old, plan)?;
    // 5. Real slots no longer used: emptied last (family 0: the data path passes).
    if let Some(o) = old {
        for (slot, r) in o.reals.iter().enumerate() {
            if r.is_some() && plan.reals.get(slot).is_none_or(|n| n.is_none()) {
                let v = types::lb_real::default();
                upd(
                    &prog.maps.reals,
                    &(slot as u32).to_ne_bytes(),
                    bytes_of(&v),
                    "reals",
                )?;
            }
        }
    }
    Ok(())
}

/// Each service's id in `plan`: its position.
fn service_ids(plan: &Plan) -> HashMap<ServiceKey, u32> {
    plan.services
        .iter()
        .enumerate()
        .map(|(i, s)| (s.key, i as u32))
        .collect()
}

/// Writes every real slot that `plan` fills and `old` did not fill alike; a new real in a
/// slot starts with zero counters.
fn write_reals(prog: &Program, old: Option<&Plan>, plan: &Plan) -> Result<()> {
    let counters = std::mem::size_of::<types::lb_counters>();
    for (slot, r) in plan.reals.iter().enumerate() {
        let Some(r) = r else { continue };
        let before = old.and_then(|o| o.reals.get(slot)).and_then(|r| r.as_ref());
        if before == Some(r) {
            continue;
        }
        if before.is_none_or(|b| b.addr != r.addr || b.service != r.service) {
            zero_percpu(prog, &prog.maps.real_stats, slot as u32, counters)?;
        }
        upd(
            &prog.maps.reals,
            &(slot as u32).to_ne_bytes(),
            bytes_of(&real_value(r)),
            "reals",
        )?;
    }
    Ok(())
}

/// Writes service `s` as id `id`: its local addresses, the lookup rows that differ from
/// `prev` (the same service at the same id before, if any), then its entry. A new
/// service starts with zero counters.
fn write_service(
    prog: &Program,
    id: u32,
    s: &PlannedService,
    prev: Option<&PlannedService>,
) -> Result<()> {
    let m = &prog.maps;
    let ring = prog.shape.ring_size;
    for (i, la) in s.laddrs.iter().enumerate() {
        let (family, addr) = addr_bytes(*la);
        let v = types::lb_laddr {
            addr,
            family,
            pad: [0; 3],
        };
        upd(
            &m.laddrs,
            &(id * MAX_LADDRS + i as u32).to_ne_bytes(),
            bytes_of(&v),
            "laddrs",
        )?;
    }
    for (i, slot) in s.lookup.iter().enumerate() {
        if prev.is_some_and(|p| p.lookup.get(i) == Some(slot)) {
            continue;
        }
        upd(
            &m.lookup,
            &(id * ring + i as u32).to_ne_bytes(),
            &slot.to_ne_bytes(),
            "lookup",
        )?;
    }
    if prev.is_none() {
        let counters = std::mem::size_of::<types::lb_counters>();
        zero_percpu(prog, &m.svc_stats, id, counters)?;
    }
    upd(
        &m.services,
        bytes_of(&vip_key(svc_proto(s.key.proto), s.key.vip)),
        bytes_of(&vip_value(id, s)),
        "services",
    )
}

/// The address-only entries that answer echo requests: one per VIP address of `plan`
/// (with its first service's id), those of `old`'s addresses that went removed.
fn write_echo(m: &Maps, old: Option<&Plan>, plan: &Plan) -> Result<()> {
    let mut echo: BTreeMap<IpAddr, u32> = BTreeMap::new();
    for (id, s) in plan.services.iter().enumerate() {
        echo.entry(s.key.vip.ip()).or_insert(id as u32);
    }
    for (ip, id) in &echo {
        let v = types::lb_vip {
            id: *id,
            lookup_len: 0,
            sched: SCHED_MH,
            flags: VIP_ECHO,
            laddr_count: 0,
            pad: 0,
        };
        upd(
            &m.services,
            bytes_of(&echo_key(*ip)),
            bytes_of(&v),
            "services (echo)",
        )?;
    }
    for s in old.map_or(&[][..], |o| &o.services[..]) {
        if !echo.contains_key(&s.key.vip.ip()) {
            let _ = m.services.delete(bytes_of(&echo_key(s.key.vip.ip())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::ModeSet;
    use crate::model::ServiceKey;

    fn shape(modes: ModeSet) -> Shape {
        Shape {
            ring_size: 7,
            max_services: 2,
            max_reals: 4,
            nr_cpus: 2,
            modes,
            half_open_timeout_s: 60,
        }
    }

    fn plan(vip: &str, real: &str, mode: Mode, laddrs: &[&str]) -> Plan {
        Plan {
            ring_size: 7,
            services: vec![PlannedService {
                key: ServiceKey {
                    proto: Proto::Tcp,
                    vip: vip.parse().unwrap(),
                },
                scheduler: Scheduler::Mh,
                lookup: vec![0; 7],
                laddrs: laddrs.iter().map(|a| a.parse().unwrap()).collect(),
                toa: false,
            }],
            reals: vec![Some(PlannedReal {
                service: 0,
                addr: real.parse().unwrap(),
                mode,
                tunnel: Tunnel::Ipip,
            })],
        }
    }

    #[test]
    fn plans_the_data_path_cannot_carry_are_refused_before_any_write() {
        let all = shape(ModeSet::default());
        let v4 = "198.18.100.1:80";
        let v6 = "[fd00:100::1]:80";
        assert!(check(&all, &plan(v4, "198.18.2.10:80", Mode::Dr, &[])).is_ok());
        assert!(check(&all, &plan(v6, "198.18.2.10:80", Mode::Tunnel, &[])).is_ok());
        for (p, what) in [
            (plan(v6, "198.18.2.10:80", Mode::Nat, &[]), "family"),
            (
                plan(v4, "198.18.2.10:80", Mode::FullNat, &[]),
                "--add-laddr",
            ),
            (
                plan(v4, "198.18.2.10:80", Mode::FullNat, &["fd00:2::1"]),
                "--add-laddr",
            ),
        ] {
            let e = check(&all, &p).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
        let no_nat = shape(ModeSet {
            nat: false,
            ..ModeSet::default()
        });
        let e = check(&no_nat, &plan(v4, "198.18.2.10:80", Mode::Nat, &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("-m"), "{e}");
        let mut short = plan(v4, "198.18.2.10:80", Mode::Dr, &[]);
        short.services[0].lookup.truncate(3);
        assert!(check(&all, &short).is_err(), "a Maglev row is the ring");
        let mut free = plan(v4, "198.18.2.10:80", Mode::Dr, &[]);
        free.services[0].lookup[2] = 3;
        assert!(check(&all, &free).is_err(), "a lookup naming a free slot");
        let mut ring = plan(v4, "198.18.2.10:80", Mode::Dr, &[]);
        ring.ring_size = 11;
        assert!(check(&all, &ring)
            .unwrap_err()
            .to_string()
            .contains("restart"));
    }

    #[test]
    fn addresses_and_modes_as_the_data_path_reads_them() {
        let (f, a) = addr_bytes("198.18.0.1".parse().unwrap());
        assert_eq!((f, &a[..5]), (AF_INET, &[198, 18, 0, 1, 0][..]));
        let (f, a) = addr_bytes("fd00::1".parse().unwrap());
        assert_eq!((f, a[0], a[15]), (AF_INET6, 0xfd, 1));
        let k = vip_key(6, "198.18.0.1:80".parse().unwrap());
        assert_eq!(k.port, 80u16.to_be());
        let modes: Vec<u8> = [Mode::Dr, Mode::Tunnel, Mode::Nat, Mode::FullNat]
            .into_iter()
            .map(mode_number)
            .collect();
        assert_eq!(modes, [0, 1, 2, 3]);
    }

    #[test]
    fn a_gue_real_carries_its_port_and_checksum_flag_and_only_in_tunnel_mode() {
        let real = |mode, tunnel| PlannedReal {
            service: 0,
            addr: "198.18.1.1:80".parse().unwrap(),
            mode,
            tunnel,
        };
        let gue = Tunnel::Gue {
            port: 6080,
            csum: true,
        };
        let v = real_value(&real(Mode::Tunnel, gue));
        assert_eq!((u16::from_be(v.gue_port), v.tun_flags), (6080, TUN_CSUM));
        let v = real_value(&real(
            Mode::Tunnel,
            Tunnel::Gue {
                port: 6081,
                csum: false,
            },
        ));
        assert_eq!((u16::from_be(v.gue_port), v.tun_flags), (6081, 0));
        let v = real_value(&real(Mode::Tunnel, Tunnel::Ipip));
        assert_eq!((v.gue_port, v.tun_flags), (0, 0));
        let v = real_value(&real(Mode::Dr, gue));
        assert_eq!((v.gue_port, v.tun_flags), (0, 0));
    }

    #[test]
    fn map_types_are_their_fields_and_nothing_else() {
        use std::mem::size_of;
        assert_eq!(size_of::<types::lb_vip_key>(), 16 + 2 + 1 + 1);
        assert_eq!(size_of::<types::lb_vip>(), 4 + 4 + 4);
        assert_eq!(size_of::<types::lb_real>(), 16 + 2 + 1 + 1 + 2 + 1 + 1);
        assert_eq!(size_of::<types::lb_laddr>(), 16 + 4);
        assert_eq!(size_of::<types::lb_flow>(), 16 + 16 + 2 + 2 + 1 + 1 + 2);
        assert_eq!(size_of::<types::lb_conn>(), 4 + 2 + 1 + 1 + 4 + 4 + 8);
        assert_eq!(
            size_of::<types::lb_rev>(),
            16 + 16 + 2 + 2 + 4 + 4 + 4 + 8 + 4 + 4
        );
        assert_eq!(size_of::<types::lb_counters>(), 5 * 8);
    }
}
