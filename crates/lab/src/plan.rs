//! What each named topology is made of, before anything is created: its roles (namespaces),
//! which of them forward, and the links between them with their subnets and host numbers
//! (docs/ARCHITECTURE.md, "The instruments"). `topo` builds a lab from this.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// client <-> server
    Pair,
    /// source <-> dut <-> sink
    Line,
    /// clients <-> lb <-> backends
    Lb,
    /// clients <-> router <-> rack bridge <-> lb nodes <-> reals bridge <-> backends, both
    /// bridges on the router (docs/LB.md, "A cluster lab")
    LbCluster,
}

impl Topology {
    pub fn parse(s: &str) -> Result<Topology> {
        match s {
            "pair" => Ok(Topology::Pair),
            "line" => Ok(Topology::Line),
            "lb" => Ok(Topology::Lb),
            "lb-cluster" => Ok(Topology::LbCluster),
            _ => Err(Error::Invalid(format!(
                "unknown topology `{s}` (pair, line, lb, lb-cluster)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Topology::Pair => "pair",
            Topology::Line => "line",
            Topology::Lb => "lb",
            Topology::LbCluster => "lb-cluster",
        }
    }
}

pub(crate) struct LinkPlan {
    pub(crate) a: usize,
    pub(crate) b: usize,
    /// third octet / v6 link number
    pub(crate) subnet: u32,
    /// host part of each end: 1 for leaves, 254 for the forwarder
    pub(crate) a_host: u32,
    pub(crate) b_host: u32,
    /// The b end is a port of this bridge of b's, which holds b's address on the subnet.
    pub(crate) bridge: Option<&'static str>,
}

/// The shared segments' bridges in `lb-cluster`'s router, and their subnets: the lb nodes'
/// uplinks (BGP and the VIPs' traffic), and the nodes' second arms with the reals.
pub const RACK: &str = "rack";
pub const RACK_SUBNET: u32 = 1;
pub const REALS: &str = "reals";
pub const REALS_SUBNET: u32 = 2;

pub(crate) fn bridge_subnet(bridge: &str) -> u32 {
    if bridge == RACK {
        RACK_SUBNET
    } else {
        REALS_SUBNET
    }
}

/// Roles, forwarding flags and links of a topology.
pub(crate) fn plan(
    topology: Topology,
    clients: usize,
    backends: usize,
    lb_nodes: usize,
) -> (Vec<(String, bool)>, Vec<LinkPlan>) {
    let mut roles = vec![];
    let mut links = vec![];
    match topology {
        Topology::Pair => {
            roles.push(("c".to_string(), false));
            roles.push(("s".to_string(), false));
            links.push(LinkPlan {
                a: 0,
                b: 1,
                subnet: 0,
                a_host: 1,
                b_host: 2,
                bridge: None,
            });
        }
        Topology::Line => {
            roles.push(("src".to_string(), false));
            roles.push(("dut".to_string(), true));
            roles.push(("snk".to_string(), false));
            links.push(LinkPlan {
                a: 0,
                b: 1,
                subnet: 1,
                a_host: 1,
                b_host: 254,
                bridge: None,
            });
            links.push(LinkPlan {
                a: 2,
                b: 1,
                subnet: 2,
                a_host: 1,
                b_host: 254,
                bridge: None,
            });
        }
        Topology::Lb => {
            roles.push(("lb".to_string(), true));
            for i in 0..clients.clamp(1, 8) {
                leaf(&mut roles, &mut links, format!("c{i}"), 10 + i as u32);
            }
            for j in 0..backends.clamp(1, 8) {
                leaf(&mut roles, &mut links, format!("b{j}"), 100 + j as u32);
            }
        }
        Topology::LbCluster => {
            roles.push(("rt".to_string(), true));
            for i in 0..clients.clamp(1, 8) {
                leaf(&mut roles, &mut links, format!("c{i}"), 10 + i as u32);
            }
            // Two arms per node: eth0 on the rack, eth1 on the reals' segment.
            let nodes = (0..lb_nodes.clamp(1, 8)).map(|n| (format!("lb{n}"), 10 + n as u32));
            let nodes = nodes.map(|(role, host)| (role, host, &[RACK, REALS][..]));
            let reals = (0..backends.clamp(1, 8)).map(|j| (format!("r{j}"), 100 + j as u32));
            let reals = reals.map(|(role, host)| (role, host, &[REALS][..]));
            for (role, host, bridges) in nodes.chain(reals) {
                // An lb node forwards: the data path's FIB lookup needs it (docs/LB.md, "Daemon").
                let forwards = role.starts_with("lb");
                roles.push((role, forwards));
                for &bridge in bridges {
                    links.push(LinkPlan {
                        a: roles.len() - 1,
                        b: 0,
                        subnet: bridge_subnet(bridge),
                        a_host: host,
                        b_host: 254,
                        bridge: Some(bridge),
                    });
                }
            }
        }
    }
    (roles, links)
}

/// A leaf `role` on a link of its own, `subnet`, to the hub (role 0), which it routes through.
fn leaf(roles: &mut Vec<(String, bool)>, links: &mut Vec<LinkPlan>, role: String, subnet: u32) {
    roles.push((role, false));
    links.push(LinkPlan {
        a: roles.len() - 1,
        b: 0,
        subnet,
        a_host: 1,
        b_host: 254,
        bridge: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NAME_PREFIX;

    #[test]
    fn plans_fit_interface_and_namespace_limits() {
        for t in [
            Topology::Pair,
            Topology::Line,
            Topology::Lb,
            Topology::LbCluster,
        ] {
            let (roles, links) = plan(t, 8, 8, 8);
            for (r, _) in &roles {
                assert!(format!("{NAME_PREFIX}abcdef-{r}").len() <= 15, "{r}");
            }
            for l in &links {
                assert!(l.a < roles.len() && l.b < roles.len());
                assert!(l.subnet < 255);
            }
        }
    }

    #[test]
    fn cluster_nodes_have_an_uplink_then_an_arm_to_the_reals() {
        let (roles, links) = plan(Topology::LbCluster, 1, 2, 3);
        let bridges = |role: &str| -> Vec<&str> {
            let i = roles.iter().position(|(r, _)| r == role).unwrap();
            links
                .iter()
                .filter(|l| l.a == i)
                .filter_map(|l| l.bridge)
                .collect()
        };
        assert_eq!(bridges("lb0"), [RACK, REALS]);
        assert_eq!(bridges("r0"), [REALS]);
        assert!(bridges("c0").is_empty());
    }
}
