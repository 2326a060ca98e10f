//! Watchers: the kernel's change notifications (rtnetlink, netdev generic netlink, nftables,
//! xfrm),
//! read without blocking and yielded as typed changes. Nothing here changes the model; the
//! daemon applies the changes.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::error::Result;
use crate::kernel::genl::{self, NetdevFamily, NETLINK_GENERIC};
use crate::kernel::netlink::{self, Socket, NETLINK_NETFILTER, NETLINK_ROUTE};
use crate::kernel::nftevent::{self, NftMsg};
use crate::kernel::xfrm;
use crate::model::Event;

/// How long a drain that ended inside an nftables batch waits for the batch's end.
const NFT_BATCH_END: Duration = Duration::from_millis(5);

/// One change the kernel reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Links, addresses, routes, neighbours, policy rules, netconf, bridge ports, the FDB.
    Rtnl(Event),
    /// A device's XDP features (netdev genetlink): they change without an rtnetlink event
    /// (a veth peer's GRO or XDP program).
    XdpFeatures(Event),
    /// One nftables message (a rule added or deleted, the end of a batch, anything else).
    Nft(NftMsg),
    /// A socket's queue overflowed: events were lost, so everything is read again.
    Overrun,
    /// The nftables queue overflowed: the ruleset is read again.
    NftOverrun,
    /// An IPsec policy or default policy changed (or its events were lost): read them again.
    Xfrm,
}

/// The event sockets, subscribed before the first dump so that a change between the two is
/// seen as an event.
pub struct Watchers {
    rtnl: Socket,
    nft: Socket,
    netdev: Option<(Socket, NetdevFamily)>,
    /// None where the kernel has no xfrm_user.
    xfrm: Option<Socket>,
    buf: Vec<u8>,
}

impl Watchers {
    pub fn open(netdev: Option<NetdevFamily>) -> Result<Watchers> {
        let rtnl = Socket::open(NETLINK_ROUTE)?;
        for g in netlink::ROUTE_GROUPS {
            rtnl.join(g)?;
        }
        let nft = Socket::open(NETLINK_NETFILTER)?;
        nft.join(netlink::NFT_GROUP)?;
        let netdev = match netdev {
            Some(f) => {
                let s = Socket::open(NETLINK_GENERIC)?;
                s.join(f.mgmt_group)?;
                Some((s, f))
            }
            None => None,
        };
        let xfrm = match Socket::open(xfrm::NETLINK_XFRM) {
            Ok(s) => {
                s.join(xfrm::XFRMNLGRP_POLICY)?;
                Some(s)
            }
            Err(_) => None,
        };
        Ok(Watchers {
            rtnl,
            nft,
            netdev,
            xfrm,
            buf: vec![0u8; 256 * 1024],
        })
    }

    /// Waits until a socket (or one of `also`, e.g. the metrics endpoint's) has input or
    /// `timeout` passes.
    pub fn wait(&self, timeout: Duration, also: &[BorrowedFd<'_>]) {
        let mut fds = vec![
            Some(self.rtnl.as_fd()),
            Some(self.nft.as_fd()),
            self.netdev.as_ref().map(|(s, _)| s.as_fd()),
            self.xfrm.as_ref().map(|s| s.as_fd()),
        ];
        fds.extend(also.iter().map(|fd| Some(*fd)));
        wirespeed_sys::bpf::poll_readable(&fds, timeout);
    }

    /// Whether nftables events are waiting.
    pub fn nft_pending(&self) -> bool {
        wirespeed_sys::bpf::readable(self.nft.as_fd())
    }

    /// Every change queued now, rtnetlink first, then XDP features, xfrm, then nftables.
    pub fn drain(&mut self) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        while let Some(n) = self.rtnl.recv(&mut self.buf)? {
            if n == 0 {
                out.push(Change::Overrun);
                continue;
            }
            for m in netlink::messages(&self.buf[..n]) {
                out.extend(netlink::parse_event(&m).map(Change::Rtnl));
            }
        }
        if let Some((s, family)) = &self.netdev {
            while let Some(n) = s.recv(&mut self.buf)? {
                if n == 0 {
                    out.push(Change::Overrun);
                    continue;
                }
                for m in netlink::messages(&self.buf[..n]) {
                    out.extend(
                        genl::parse_netdev_msg(family.id, m.ty, m.payload).map(Change::XdpFeatures),
                    );
                }
            }
        }
        if let Some(s) = &self.xfrm {
            // What changed matters not: the policies are few, and read again whole.
            let mut any = false;
            while s.recv(&mut self.buf)?.is_some() {
                any = true;
            }
            if any {
                out.push(Change::Xfrm);
            }
        }
        let mut waited = false;
        loop {
            while let Some(n) = self.nft.recv(&mut self.buf)? {
                if n == 0 {
                    out.push(Change::NftOverrun);
                }
                out.extend(
                    netlink::messages(&self.buf[..n])
                        .iter()
                        .map(|m| Change::Nft(nftevent::decode(m))),
                );
            }
            // Drained between a batch's rules and its NEWGEN, which follows at once: wait for
            // the end of the batch (once, briefly), so that it is applied from its events
            // rather than by reading the whole ruleset.
            let mid_batch = matches!(out.last(), Some(Change::Nft(NftMsg::Rule(_))));
            if !mid_batch || waited {
                return Ok(out);
            }
            waited = true;
            wirespeed_sys::bpf::poll_readable(&[Some(self.nft.as_fd())], NFT_BATCH_END);
        }
    }
}
