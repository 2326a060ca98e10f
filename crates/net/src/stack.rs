//! [`Stack`]: the one seam through which an application gets its TCP/IP stack.
//!
//! The application builds the stack once on the main thread, before the shards start:
//! [`Stack::kernel`] (Linux TCP, one SO_REUSEPORT listener per shard) or [`Stack::bypass`]
//! (our stack over AF_XDP or DPDK: the interface queries, queue checks, program attach and
//! per-shard queues all happen in there). Each shard then calls [`Shards::start`] and asks its
//! [`ShardStack`] for `listen` and `connect`, which work the same on both; the application
//! never sees how the stack was brought up.

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use wirespeed_tcpip as tcpip;

use crate::bypass::socket::BypassStack;
use crate::bypass::{self, Bypass, BypassConfig, BypassError, ShardDevice};
use crate::kernel::{self, BindError, ListenOptions};
use crate::{TcpListener, TcpStream};

/// How the kernel stack is set up.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// The CPU of each shard, in shard order (the locality program maps CPUs to shards).
    pub cpus: Vec<usize>,
    /// Where the shards listen (one SO_REUSEPORT group, bound now, in shard order); None for
    /// a stack that only connects.
    pub listen: Option<SocketAddr>,
    pub options: ListenOptions,
}

/// Errors of the bring-up, each one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Bypass(#[from] BypassError),
}

/// A TCP/IP stack, brought up for a number of shards. Keep it alive while the shards run (the
/// bypass stack's XDP program stays attached while it lives).
pub struct Stack {
    shards: Shards,
    description: String,
    notes: Vec<String>,
    listen: Option<SocketAddr>,
    _bypass: Option<Bypass>,
}

/// One shard's part of the stack, built on the main thread and moved to its shard.
#[allow(clippy::large_enum_variant)] // a handful, built once at start
enum ShardPart {
    Kernel {
        listener: Option<OwnedFd>,
        options: ListenOptions,
    },
    Bypass(ShardDevice),
}

/// What every shard of one stack shares.
struct Common {
    listen: Option<SocketAddr>,
    /// The bypass stack: the interface named in drop messages, and the messages' prefix.
    drops_on: Option<(String, &'static str)>,
    /// The bypass stack: the TCP ports steered to it (the only ones it can listen on).
    tcp_ports: Vec<u16>,
    /// The bypass stack: each listener's backlog (`BypassConfig::backlog`).
    backlog: u32,
}

/// The shards' parts of a [`Stack`], for the shard closures (cheap to clone, `Send + Sync`).
#[derive(Clone)]
pub struct Shards {
    parts: Arc<Mutex<Vec<Option<ShardPart>>>>,
    common: Arc<Common>,
}

impl Stack {
    /// Linux TCP on the shards' epoll or io_uring engines. With `cfg.listen`, binds the
    /// shards' SO_REUSEPORT group now (port 0 picks one free port for the whole group).
    pub fn kernel(cfg: &KernelConfig) -> Result<Stack, StackError> {
        let (listeners, listen) = match cfg.listen {
            Some(addr) => {
                let fds = kernel::bind_group(addr, &cfg.cpus, &cfg.options)?;
                let bound = wirespeed_sys::socket::local_addr(&fds[0]).unwrap_or(addr);
                (fds.into_iter().map(Some).collect(), Some(bound))
            }
            None => (cfg.cpus.iter().map(|_| None).collect::<Vec<_>>(), None),
        };
        let parts = listeners
            .into_iter()
            .map(|listener| {
                Some(ShardPart::Kernel {
                    listener,
                    options: cfg.options.clone(),
                })
            })
            .collect();
        Ok(Stack {
            shards: Shards::new(
                parts,
                Common {
                    listen,
                    drops_on: None,
                    tcp_ports: Vec::new(),
                    backlog: 0,
                },
            ),
            description: "kernel".into(),
            notes: Vec::new(),
            listen,
            _bypass: None,
        })
    }

    /// Our TCP/IP stack on a device taken over for it (AF_XDP or DPDK): one queue per shard,
    /// and (AF_XDP) the device's further rx queues shared out among the shards.
    pub fn bypass(cfg: &BypassConfig) -> Result<Stack, StackError> {
        let mut b = bypass::open(cfg)?;
        let parts = std::mem::take(&mut b.shards)
            .into_iter()
            .map(|d| Some(ShardPart::Bypass(d)))
            .collect();
        let listen = cfg
            .tcp_ports
            .first()
            .filter(|_| !cfg.opens_connections)
            .map(|&port| SocketAddr::new(cfg.ip.into(), port));
        Ok(Stack {
            shards: Shards::new(
                parts,
                Common {
                    listen,
                    drops_on: Some((b.iface.clone(), cfg.log_prefix)),
                    tcp_ports: cfg.tcp_ports.clone(),
                    backlog: cfg.backlog,
                },
            ),
            description: format!("bypass, {}", b.description),
            notes: std::mem::take(&mut b.notes),
            listen,
            _bypass: Some(b),
        })
    }

    /// For the start line: `kernel`, `bypass, AF_XDP on eth1`, `bypass, DPDK port ...`.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Facts the operator should see once at start (AF_XDP copy-mode fallbacks).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The address the shards listen on, as bound (the port port 0 picked), if any.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// The shards' parts, for the shard closures.
    pub fn shards(&self) -> Shards {
        self.shards.clone()
    }
}

impl Shards {
    fn new(parts: Vec<Option<ShardPart>>, common: Common) -> Shards {
        Shards {
            parts: Arc::new(Mutex::new(parts)),
            common: Arc::new(common),
        }
    }

    /// Starts the current shard's part of the stack (on the shard, once): for the bypass
    /// stack this registers the poller that drives its queue.
    pub fn start(&self) -> io::Result<ShardStack> {
        let shard = wirespeed_rt::shard_id();
        let part = self
            .parts
            .lock()
            .map_err(|_| io::Error::other("a shard panicked while taking its stack"))?
            .get_mut(shard)
            .and_then(Option::take)
            .ok_or_else(|| io::Error::other(format!("no stack part for shard {shard}")))?;
        let inner = match part {
            ShardPart::Kernel { listener, options } => Inner::Kernel {
                listener: RefCell::new(listener),
                options,
            },
            ShardPart::Bypass(ShardDevice {
                queue,
                rx_only,
                stack,
            }) => {
                let stack = BypassStack::start_with_rx_queues(&stack, queue, rx_only);
                if let Some((iface, prefix)) = self.common.drops_on.clone() {
                    stack.on_drop_cause(move |cause| {
                        bypass::tell_drop_cause_once(prefix, cause, &iface)
                    });
                }
                Inner::Bypass(stack)
            }
        };
        Ok(ShardStack {
            inner,
            common: self.common.clone(),
        })
    }
}

/// One shard's stack: its sockets are opened here and never leave the shard.
pub struct ShardStack {
    inner: Inner,
    common: Arc<Common>,
}

enum Inner {
    Kernel {
        listener: RefCell<Option<OwnedFd>>,
        options: ListenOptions,
    },
    Bypass(BypassStack),
}

impl ShardStack {
    /// This shard's listener on `addr`, which the stack was brought up for (the kernel
    /// stack's SO_REUSEPORT group, or a port the bypass stack's device steers to us).
    pub fn listen(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        let not_set_up = || {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("the stack was not brought up to listen on {addr}"),
            )
        };
        match &self.inner {
            Inner::Kernel { listener, options } => {
                if self.common.listen != Some(addr) {
                    return Err(not_set_up());
                }
                let fd = listener.borrow_mut().take().ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("already listening on {addr}"),
                    )
                })?;
                Ok(TcpListener::from(kernel::Listener::new(
                    fd,
                    options.clone(),
                )?))
            }
            Inner::Bypass(stack) => {
                let ours = stack.local_ip();
                let ip_ok = addr.ip().is_unspecified() || addr.ip() == IpAddr::V4(ours);
                if !ip_ok || !self.common.tcp_ports.contains(&addr.port()) {
                    return Err(not_set_up());
                }
                Ok(TcpListener::from(
                    stack.listen(addr.port(), self.common.backlog as usize)?,
                ))
            }
        }
    }

    /// Connects to `addr`. On the bypass stack the local port is one whose replies arrive on
    /// this shard's queue, and `addr`'s family needs an address of ours in it.
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        match &self.inner {
            Inner::Kernel { .. } => Ok(TcpStream::from(kernel::Stream::connect(addr).await?)),
            Inner::Bypass(stack) => Ok(TcpStream::from(stack.connect(addr).await?)),
        }
    }

    /// This shard's bypass stack, shared (None on the kernel stack).
    pub fn bypass(&self) -> Option<crate::bypass::socket::BypassStack> {
        match &self.inner {
            Inner::Kernel { .. } => None,
            Inner::Bypass(s) => Some(s.clone()),
        }
    }

    /// The bypass stack's counters (None on the kernel stack).
    pub fn bypass_stats(&self) -> Option<tcpip::Stats> {
        match &self.inner {
            Inner::Kernel { .. } => None,
            Inner::Bypass(s) => Some(s.stats()),
        }
    }
}
