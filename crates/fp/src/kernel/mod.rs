//! Reading and watching the kernel: the event sockets, the dumps and files read whole, and
//! the state the forwarding path consults beyond routes. See docs/FASTPATH.md, "How it works".

pub mod family;
pub mod forward_hooks;
pub mod genl;
pub mod neigh;
pub mod netlink;
pub mod nftevent;
pub mod reader;
pub mod routes;
pub mod sysctl_hook;
pub mod taps;
pub mod tc;
pub mod watch;
pub mod xfrm;
