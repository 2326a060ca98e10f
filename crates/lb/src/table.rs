//! The configured state: services, their reals and their full-NAT local addresses, changed
//! with ipvsadm's semantics and (where ipvsadm has one) its error text, each error one line
//! that says what to do.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::model::{
    Health, HealthCheck, Mode, Real, Scheduler, Service, ServiceKey, Tunnel, TunnelKind,
};
use crate::{Error, Result};

/// The highest weight ipvsadm accepts.
pub const MAX_WEIGHT: u32 = 65535;

/// `-A`/`-E`: what the command line said about a service; `None` is "not given".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSpec {
    pub key: ServiceKey,
    pub scheduler: Option<Scheduler>,
    pub check: Option<HealthCheck>,
    /// `--no-check` on `-E`: drop the service's health check.
    pub no_check: bool,
    /// `--no-toa`: full-NAT without the TOA option.
    pub no_toa: bool,
}

/// `-a`/`-e`: what the command line said about a real.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealSpec {
    /// Port 0: not given (the service's port).
    pub addr: SocketAddr,
    pub mode: Option<Mode>,
    pub weight: Option<u32>,
    /// `--tun-type`, `--tun-port`, `--tun-csum|--tun-nocsum`.
    #[serde(default)]
    pub tunnel: TunnelSpec,
}

/// What the command line said about a tunnel's encapsulation; `None` is "not given".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelSpec {
    pub kind: Option<TunnelKind>,
    pub port: Option<u16>,
    /// `--tun-csum` (true) or `--tun-nocsum` (false).
    pub csum: Option<bool>,
}

impl TunnelSpec {
    pub fn is_given(&self) -> bool {
        self.kind.is_some() || self.port.is_some() || self.csum.is_some()
    }
}

/// The encapsulation of real `addr` in `mode`: what `spec` gives over what the real had
/// (`was`; ipvsadm's defaults for a new real).
fn resolve_tunnel(addr: SocketAddr, mode: Mode, spec: &TunnelSpec, was: Tunnel) -> Result<Tunnel> {
    if mode != Mode::Tunnel {
        if spec.is_given() {
            return Err(Error::Invalid(format!(
                "real {addr}: --tun-type, --tun-port and --tun-csum/--tun-nocsum go with tunnel mode; add -i"
            )));
        }
        return Ok(Tunnel::Ipip);
    }
    let (was_port, was_csum) = match was {
        Tunnel::Gue { port, csum } => (Some(port), Some(csum)),
        Tunnel::Ipip => (None, None),
    };
    match spec.kind.unwrap_or(was.kind()) {
        TunnelKind::Ipip => {
            if spec.port.is_some() || spec.csum.is_some() {
                return Err(Error::Invalid(format!(
                    "real {addr}: --tun-port and --tun-csum/--tun-nocsum are GUE's; add --tun-type gue"
                )));
            }
            Ok(Tunnel::Ipip)
        }
        TunnelKind::Gue => {
            let port = spec.port.or(was_port).ok_or_else(|| {
                Error::Invalid(format!(
                    "real {addr}: GUE needs the real's decapsulation port: add --tun-port 6080"
                ))
            })?;
            if port == 0 {
                return Err(Error::Invalid(format!(
                    "real {addr}: --tun-port 0 is not a port; give the real's GUE port in 1-65535"
                )));
            }
            let csum = if addr.is_ipv4() {
                spec.csum.or(was_csum).unwrap_or(false)
            } else if spec.csum == Some(false) {
                return Err(Error::Invalid(format!(
                    "real {addr}: UDP over IPv6 must carry a checksum, so GUE to an IPv6 real always has one: drop --tun-nocsum"
                )));
            } else {
                true
            };
            Ok(Tunnel::Gue { port, csum })
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub services: Vec<Service>,
}

/// A real's port as stored: the one given, or the service's.
pub fn resolve_port(key: &ServiceKey, addr: SocketAddr) -> SocketAddr {
    if addr.port() == 0 {
        SocketAddr::new(addr.ip(), key.vip.port())
    } else {
        addr
    }
}

fn check_vip(key: &ServiceKey) -> Result<()> {
    if key.vip.port() == 0 {
        return Err(Error::Invalid(format!(
            "service {}: port 0 is not a service port; give one in 1-65535",
            key.vip
        )));
    }
    Ok(())
}

fn check_weight(w: u32) -> Result<()> {
    if w > MAX_WEIGHT {
        return Err(Error::Invalid(format!(
            "weight {w} is out of range; give 0-{MAX_WEIGHT} (0 quiesces the real)"
        )));
    }
    Ok(())
}

fn check_family(key: &ServiceKey, addr: SocketAddr, mode: Mode) -> Result<()> {
    if key.vip.is_ipv4() != addr.is_ipv4() && mode != Mode::Tunnel {
        return Err(Error::Invalid(format!(
            "real {addr} is not of the family of VIP {}: only tunnel mode (-i) can carry it",
            key.vip.ip()
        )));
    }
    Ok(())
}

impl Table {
    pub fn find(&self, key: &ServiceKey) -> Option<&Service> {
        self.services.iter().find(|s| s.key == *key)
    }

    fn find_mut(&mut self, key: &ServiceKey) -> Result<&mut Service> {
        self.services
            .iter_mut()
            .find(|s| s.key == *key)
            .ok_or_else(|| no_such_service(key))
    }

    /// `-A`.
    pub fn add_service(&mut self, spec: &ServiceSpec) -> Result<()> {
        check_vip(&spec.key)?;
        if self.find(&spec.key).is_some() {
            return Err(Error::Invalid(format!(
                "Service already exists: {}; change it with -E or remove it with -D",
                spec.key
            )));
        }
        self.services.push(Service {
            key: spec.key,
            scheduler: spec.scheduler.unwrap_or(Scheduler::Mh),
            reals: Vec::new(),
            laddrs: Vec::new(),
            toa: !spec.no_toa,
            check: spec.check.clone(),
        });
        Ok(())
    }

    /// `-E`: what the command gives changes, the rest stays.
    pub fn edit_service(&mut self, spec: &ServiceSpec) -> Result<()> {
        let s = self.find_mut(&spec.key)?;
        if let Some(sched) = spec.scheduler {
            s.scheduler = sched;
        }
        if spec.no_check {
            s.check = None;
        } else if let Some(c) = &spec.check {
            if s.check.as_ref().map(|o| &o.kind) != Some(&c.kind) {
                // A different check: its verdicts so far say nothing about the new one.
                for r in &mut s.reals {
                    r.health = Health::Unchecked;
                }
            }
            s.check = Some(c.clone());
        }
        if s.check.is_none() {
            for r in &mut s.reals {
                r.health = Health::Unchecked;
            }
        }
        s.toa = !spec.no_toa;
        Ok(())
    }

    /// `-D`.
    pub fn del_service(&mut self, key: &ServiceKey) -> Result<()> {
        let before = self.services.len();
        self.services.retain(|s| s.key != *key);
        if self.services.len() == before {
            return Err(no_such_service(key));
        }
        Ok(())
    }

    /// `-a`. Returns warnings (a full-NAT real without a local address of its family).
    pub fn add_real(&mut self, key: &ServiceKey, spec: &RealSpec) -> Result<Vec<String>> {
        let addr = resolve_port(key, spec.addr);
        let mode = spec.mode.unwrap_or(Mode::Dr);
        let weight = spec.weight.unwrap_or(1);
        check_weight(weight)?;
        check_family(key, addr, mode)?;
        let tunnel = resolve_tunnel(addr, mode, &spec.tunnel, Tunnel::Ipip)?;
        let s = self.find_mut(key)?;
        if s.reals.iter().any(|r| r.addr == addr) {
            return Err(Error::Invalid(format!(
                "Destination already exists: {addr} in {key}; change it with -e or remove it with -d"
            )));
        }
        s.reals.push(Real {
            addr,
            mode,
            tunnel,
            weight,
            health: Health::Unchecked,
        });
        Ok(self.warnings_for(key))
    }

    /// `-e`: what the command gives changes, the rest stays.
    pub fn edit_real(&mut self, key: &ServiceKey, spec: &RealSpec) -> Result<Vec<String>> {
        let addr = resolve_port(key, spec.addr);
        if let Some(w) = spec.weight {
            check_weight(w)?;
        }
        let s = self.find_mut(key)?;
        let r = s
            .reals
            .iter_mut()
            .find(|r| r.addr == addr)
            .ok_or_else(|| no_such_destination(key, addr))?;
        let mode = spec.mode.unwrap_or(r.mode);
        check_family(key, addr, mode)?;
        // Another mode, or IPIP named again, starts from ipvsadm's defaults.
        let was = if mode == r.mode && spec.tunnel.kind != Some(TunnelKind::Ipip) {
            r.tunnel
        } else {
            Tunnel::Ipip
        };
        r.tunnel = resolve_tunnel(addr, mode, &spec.tunnel, was)?;
        r.mode = mode;
        if let Some(w) = spec.weight {
            r.weight = w;
        }
        Ok(self.warnings_for(key))
    }

    /// `-d`.
    pub fn del_real(&mut self, key: &ServiceKey, addr: SocketAddr) -> Result<()> {
        let addr = resolve_port(key, addr);
        let s = self.find_mut(key)?;
        let before = s.reals.len();
        s.reals.retain(|r| r.addr != addr);
        if s.reals.len() == before {
            return Err(no_such_destination(key, addr));
        }
        Ok(())
    }

    /// `--add-laddr -z ADDR`.
    pub fn add_laddr(&mut self, key: &ServiceKey, addr: IpAddr) -> Result<()> {
        let s = self.find_mut(key)?;
        if s.laddrs.contains(&addr) {
            return Err(Error::Invalid(format!(
                "local address {addr} is already in {key}; remove it with --del-laddr"
            )));
        }
        s.laddrs.push(addr);
        Ok(())
    }

    /// `--del-laddr -z ADDR`.
    pub fn del_laddr(&mut self, key: &ServiceKey, addr: IpAddr) -> Result<()> {
        let s = self.find_mut(key)?;
        let before = s.laddrs.len();
        s.laddrs.retain(|a| *a != addr);
        if s.laddrs.len() == before {
            return Err(Error::Invalid(format!(
                "No such local address: {addr} in {key}; list them with -L -n --json"
            )));
        }
        Ok(())
    }

    /// `-C`.
    pub fn clear(&mut self) {
        self.services.clear();
    }

    /// Sets a real's health; true when it changed.
    pub fn set_health(&mut self, key: &ServiceKey, addr: SocketAddr, health: Health) -> bool {
        let Some(s) = self.services.iter_mut().find(|s| s.key == *key) else {
            return false;
        };
        match s.reals.iter_mut().find(|r| r.addr == addr) {
            Some(r) if r.health != health => {
                r.health = health;
                true
            }
            _ => false,
        }
    }

    /// What stops a service from carrying traffic although it is configured: full-NAT reals
    /// with no local address of their family.
    pub fn warnings(&self) -> Vec<String> {
        self.services
            .iter()
            .flat_map(|s| self.warnings_for(&s.key))
            .collect()
    }

    fn warnings_for(&self, key: &ServiceKey) -> Vec<String> {
        let Some(s) = self.find(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for v4 in [true, false] {
            let needs = s
                .reals
                .iter()
                .any(|r| r.mode == Mode::FullNat && r.addr.is_ipv4() == v4);
            if needs && !s.laddrs.iter().any(|a| a.is_ipv4() == v4) {
                let (fam, example) = if v4 {
                    ("IPv4", "198.18.0.100")
                } else {
                    ("IPv6", "fd00::100")
                };
                let proto = key.proto.flag();
                out.push(format!(
                    "{key}: full-NAT reals need an {fam} local address before they get traffic: \
                     wirespeed lb --add-laddr -z {example} {proto} {}",
                    key.vip
                ));
            }
        }
        out
    }
}

fn no_such_service(key: &ServiceKey) -> Error {
    Error::Invalid(format!(
        "No such service: {key}; list them with wirespeed lb -L -n"
    ))
}

fn no_such_destination(key: &ServiceKey, addr: SocketAddr) -> Error {
    Error::Invalid(format!(
        "No such destination: {addr} in {key}; list them with wirespeed lb -L -n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Proto;

    fn key(s: &str) -> ServiceKey {
        ServiceKey {
            proto: Proto::Tcp,
            vip: s.parse().unwrap(),
        }
    }

    fn svc(k: &str) -> ServiceSpec {
        ServiceSpec {
            key: key(k),
            scheduler: None,
            check: None,
            no_check: false,
            no_toa: false,
        }
    }

    fn real(a: &str, mode: Option<Mode>, weight: Option<u32>) -> RealSpec {
        RealSpec {
            addr: a.parse().unwrap(),
            mode,
            weight,
            tunnel: TunnelSpec::default(),
        }
    }

    #[test]
    fn ipvsadm_errors_and_defaults() {
        let mut t = Table::default();
        let k = key("198.18.0.10:80");
        t.add_service(&svc("198.18.0.10:80")).unwrap();
        let e = t.add_service(&svc("198.18.0.10:80")).unwrap_err();
        assert!(e.to_string().starts_with("Service already exists"), "{e}");
        assert_eq!(t.services[0].scheduler, Scheduler::Mh);
        t.add_real(&k, &real("198.18.1.1:0", None, None)).unwrap();
        let r = &t.services[0].reals[0];
        assert_eq!(r.addr, "198.18.1.1:80".parse().unwrap());
        assert_eq!((r.mode, r.weight), (Mode::Dr, 1));
        let e = t
            .add_real(&k, &real("198.18.1.1:80", None, None))
            .unwrap_err();
        assert!(e.to_string().starts_with("Destination already exists"));
        let e = t
            .del_real(&k, "198.18.1.2:80".parse().unwrap())
            .unwrap_err();
        assert!(e.to_string().starts_with("No such destination"));
        let e = t.del_service(&key("198.18.0.11:80")).unwrap_err();
        assert!(e.to_string().starts_with("No such service"));
        t.edit_real(&k, &real("198.18.1.1:0", None, Some(0)))
            .unwrap();
        assert_eq!(t.services[0].reals[0].weight, 0);
        assert_eq!(t.services[0].reals[0].mode, Mode::Dr);
        let e = t
            .edit_real(&k, &real("198.18.1.1:0", None, Some(65536)))
            .unwrap_err();
        assert!(e.to_string().contains("0-65535"), "{e}");
        t.del_real(&k, "198.18.1.1:0".parse().unwrap()).unwrap();
        assert!(t.services[0].reals.is_empty());
        t.del_service(&k).unwrap();
        assert!(t.services.is_empty());
        let e = t.add_service(&svc("198.18.0.10:0")).unwrap_err();
        assert!(e.to_string().contains("1-65535"), "{e}");
    }

    #[test]
    fn mixed_families_only_in_tunnel_mode() {
        let mut t = Table::default();
        let k = key("[fd00::10]:80");
        t.add_service(&svc("[fd00::10]:80")).unwrap();
        let e = t
            .add_real(&k, &real("198.18.1.1:80", Some(Mode::Dr), None))
            .unwrap_err();
        assert!(e.to_string().contains("only tunnel mode"), "{e}");
        t.add_real(&k, &real("198.18.1.1:80", Some(Mode::Tunnel), None))
            .unwrap();
        let e = t
            .edit_real(&k, &real("198.18.1.1:80", Some(Mode::Nat), None))
            .unwrap_err();
        assert!(e.to_string().contains("only tunnel mode"), "{e}");
    }

    fn tun(kind: Option<TunnelKind>, port: Option<u16>, csum: Option<bool>) -> TunnelSpec {
        TunnelSpec { kind, port, csum }
    }

    #[test]
    fn gue_tunnels_resolve_with_ipvsadms_defaults_and_refuse_what_cannot_work() {
        let mut t = Table::default();
        let k = key("198.18.0.10:80");
        t.add_service(&svc("198.18.0.10:80")).unwrap();
        let gue = |a: &str, port, csum| RealSpec {
            tunnel: tun(Some(TunnelKind::Gue), port, csum),
            ..real(a, Some(Mode::Tunnel), None)
        };
        // IPv4 real: no checksum unless asked; IPv6 real: always one.
        t.add_real(&k, &gue("198.18.1.1:80", Some(6080), None))
            .unwrap();
        t.add_real(&k, &gue("198.18.1.2:80", Some(6080), Some(true)))
            .unwrap();
        t.add_real(&k, &gue("[fd00::2]:80", Some(6081), None))
            .unwrap();
        let tunnels: Vec<Tunnel> = t.services[0].reals.iter().map(|r| r.tunnel).collect();
        assert_eq!(
            tunnels,
            [
                Tunnel::Gue {
                    port: 6080,
                    csum: false
                },
                Tunnel::Gue {
                    port: 6080,
                    csum: true
                },
                Tunnel::Gue {
                    port: 6081,
                    csum: true
                },
            ]
        );
        let err = |spec: &RealSpec| t.clone().add_real(&k, spec).unwrap_err().to_string();
        assert!(
            err(&gue("[fd00::3]:80", Some(6080), Some(false))).contains("drop --tun-nocsum"),
            "v6 without checksum"
        );
        assert!(err(&gue("198.18.1.3:80", None, None)).contains("--tun-port 6080"));
        assert!(err(&gue("198.18.1.3:80", Some(0), None)).contains("1-65535"));
        let on_dr = RealSpec {
            tunnel: tun(Some(TunnelKind::Gue), Some(6080), None),
            ..real("198.18.1.3:80", Some(Mode::Dr), None)
        };
        assert!(err(&on_dr).contains("add -i"), "{}", err(&on_dr));
        let port_on_ipip = RealSpec {
            tunnel: tun(None, Some(6080), None),
            ..real("198.18.1.3:80", Some(Mode::Tunnel), None)
        };
        assert!(err(&port_on_ipip).contains("--tun-type gue"));

        // -e keeps what it is not given, changes what it is.
        t.edit_real(&k, &real("198.18.1.1:80", None, Some(5)))
            .unwrap();
        assert_eq!(t.services[0].reals[0].tunnel, tunnels[0]);
        let new_port = RealSpec {
            tunnel: tun(None, Some(7000), None),
            ..real("198.18.1.2:80", None, None)
        };
        t.edit_real(&k, &new_port).unwrap();
        assert_eq!(
            t.services[0].reals[1].tunnel,
            Tunnel::Gue {
                port: 7000,
                csum: true
            }
        );
        let back_to_ipip = RealSpec {
            tunnel: tun(Some(TunnelKind::Ipip), None, None),
            ..real("198.18.1.2:80", None, None)
        };
        t.edit_real(&k, &back_to_ipip).unwrap();
        assert_eq!(t.services[0].reals[1].tunnel, Tunnel::Ipip);
        // Leaving tunnel mode drops the encapsulation; coming back starts from IPIP.
        t.edit_real(&k, &real("198.18.1.1:80", Some(Mode::Dr), None))
            .unwrap();
        t.edit_real(&k, &real("198.18.1.1:80", Some(Mode::Tunnel), None))
            .unwrap();
        assert_eq!(t.services[0].reals[0].tunnel, Tunnel::Ipip);
    }

    #[test]
    fn full_nat_without_local_address_warns_until_one_is_added() {
        let mut t = Table::default();
        let k = key("198.18.0.10:80");
        t.add_service(&svc("198.18.0.10:80")).unwrap();
        let w = t
            .add_real(&k, &real("198.18.1.1:80", Some(Mode::FullNat), None))
            .unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("--add-laddr -z"), "{}", w[0]);
        assert_eq!(t.warnings(), w);
        t.add_laddr(&k, "198.18.0.100".parse().unwrap()).unwrap();
        assert!(t.warnings().is_empty());
        assert!(t.add_laddr(&k, "198.18.0.100".parse().unwrap()).is_err());
        t.del_laddr(&k, "198.18.0.100".parse().unwrap()).unwrap();
        assert_eq!(t.warnings().len(), 1);
    }

    #[test]
    fn health_changes_are_reported_once() {
        let mut t = Table::default();
        let k = key("198.18.0.10:80");
        t.add_service(&svc("198.18.0.10:80")).unwrap();
        t.add_real(&k, &real("198.18.1.1:80", None, None)).unwrap();
        let a = "198.18.1.1:80".parse().unwrap();
        assert!(t.set_health(&k, a, Health::Down));
        assert!(!t.set_health(&k, a, Health::Down));
        assert!(t.set_health(&k, a, Health::Up));
        assert!(!t.set_health(&k, "198.18.1.2:80".parse().unwrap(), Health::Down));
    }
}
