//! The io_uring engine: multishot accept, multishot recv over a provided-buffer ring, send
//! from engine-owned buffers.
//!
//! Every operation's CQE is routed by `user_data = generation << 32 | slot << 3 | op`. A slot
//! outlives its `Socket` while operations are in flight: dropping a socket cancels them, and
//! the fd is closed and the slot reused only when the last CQE has arrived.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use wirespeed_sys::mmap::Mapping;
use wirespeed_sys::socket::SockAddr;

use super::Token;

const OP_ACCEPT: u64 = 0;
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_CONNECT: u64 = 3;
const OP_CANCEL: u64 = 4;
const DOORBELL: u64 = u64::MAX;
/// Pollers' wake-up fds ([`Uring::add_wake_fd`]), told apart by their index in `wake_fds`.
const WAKE_FD_BASE: u64 = u64::MAX - 1 - MAX_WAKE_FDS;
const MAX_WAKE_FDS: u64 = 64;

const RING_ENTRIES: u32 = 4096;
const BUF_GROUP: u16 = 0;
const BUF_COUNT: u16 = 4096;
const BUF_SIZE: usize = 4096;

/// Checks, once per process, that this kernel offers what the engine needs.
pub(crate) fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut p = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("cannot probe opcodes: {e}"))?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::AsyncCancel2::CODE, "async cancel"),
    ] {
        if !p.is_supported(code) {
            return Err(format!("kernel lacks the {name} opcode"));
        }
    }
    // Provided-buffer rings need 5.19; multishot recv 6.0.
    let bufs = BufRing::new(8, 64).map_err(|e| format!("cannot map a buffer ring: {e}"))?;
    // SAFETY: the ring memory lives in `bufs` until after unregistering below.
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(bufs.ring_addr(), 8, 0, 0)
    }
    .map_err(|e| format!("kernel lacks provided-buffer rings (needs 5.19+): {e}"))?;
    let _ = ring.submitter().unregister_buf_ring(0);
    Ok(())
}

/// Provided buffers: a ring of descriptors the kernel pops from, and the memory behind them.
struct BufRing {
    /// The descriptors, in memory the kernel reads (page-aligned, as it requires).
    mapping: Mapping,
    entries: u16,
    tail: u16,
    memory: Box<[u8]>,
    buf_size: usize,
}

impl BufRing {
    fn new(entries: u16, buf_size: usize) -> io::Result<BufRing> {
        let ring_len = entries as usize * std::mem::size_of::<types::BufRingEntry>();
        let mapping = Mapping::anonymous(ring_len, false)?;
        let mut r = BufRing {
            mapping,
            entries,
            tail: 0,
            memory: vec![0u8; entries as usize * buf_size].into_boxed_slice(),
            buf_size,
        };
        for bid in 0..entries {
            r.push(bid);
        }
        r.publish();
        Ok(r)
    }

    fn ring(&self) -> *mut types::BufRingEntry {
        self.mapping.as_ptr().cast()
    }

    fn ring_addr(&self) -> u64 {
        self.ring() as u64
    }

    /// Queues buffer `bid` for the kernel (visible after `publish`).
    fn push(&mut self, bid: u16) {
        let idx = (self.tail & (self.entries - 1)) as usize;
        // SAFETY: idx < entries; the kernel reads entries only below the published tail, and
        // this slot is past it.
        unsafe {
            let e = &mut *self.ring().add(idx);
            e.set_addr(self.memory.as_ptr().add(bid as usize * self.buf_size) as u64);
            e.set_len(self.buf_size as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field overlays entry 0's reserved field; the kernel reads it with
        // acquire semantics, so a release store publishes the entries written before it.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn buf(&self, bid: u16) -> &[u8] {
        let start = bid as usize * self.buf_size;
        &self.memory[start..start + self.buf_size]
    }
}

enum Chunk {
    Data { bid: u16, len: u32, off: u32 },
    Eof,
    Err(i32),
}

#[derive(Default)]
struct Slot {
    /// Dropping it closes the socket: only once no operation uses it any more.
    fd: Option<OwnedFd>,
    generation: u32,
    /// A `Socket` still refers to this slot.
    live: bool,
    in_use: bool,
    inflight: u32,
    accept_armed: bool,
    accepted: VecDeque<io::Result<OwnedFd>>,
    recv_armed: bool,
    received: VecDeque<Chunk>,
    reader: Option<Waker>,
    writer: Option<Waker>,
    send_buf: Vec<u8>,
    send_inflight: Option<u64>,
    send_done: Option<(u64, io::Result<usize>)>,
    next_ticket: u64,
    /// The address a connect SQE points at, kept until its CQE.
    connect_addr: Option<Box<SockAddr>>,
    connect_result: Option<io::Result<()>>,
}

pub(crate) struct Uring {
    ring: IoUring,
    slots: Vec<Slot>,
    free: Vec<u32>,
    bufs: BufRing,
    doorbell: RawFd,
    wake_fds: Vec<RawFd>,
    napi_busy_poll_us: u32,
}

fn user_data(t: Token, op: u64) -> u64 {
    ((t.generation as u64) << 32) | ((t.slot as u64) << 3) | op
}

impl Slot {
    fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

impl Uring {
    pub(crate) fn new(napi_busy_poll_us: u32) -> io::Result<Uring> {
        // Single issuer + deferred task work: completions are processed only when this thread
        // asks, so the kernel never interrupts the shard to run them.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_defer_taskrun()
            .build(RING_ENTRIES)
            .or_else(|_| IoUring::new(RING_ENTRIES))?;
        let bufs = BufRing::new(BUF_COUNT, BUF_SIZE)?;
        // SAFETY: the ring memory is owned by `bufs`, which lives as long as `ring` (both are
        // fields of Uring; the ring is dropped, and so unregistered, with it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.ring_addr(),
                BUF_COUNT,
                BUF_GROUP,
                0,
            )?
        };
        if napi_busy_poll_us > 0 {
            let mut napi = types::Napi::new()
                .set_busy_poll_timeout(napi_busy_poll_us)
                .set_prefer_busy_poll(true);
            if let Err(e) = ring.submitter().register_napi(&mut napi) {
                eprintln!("wirespeed-rt: io_uring NAPI busy polling unavailable ({e}); continuing without it");
            }
        }
        Ok(Uring {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            bufs,
            doorbell: -1,
            wake_fds: Vec::new(),
            napi_busy_poll_us,
        })
    }

    /// Busy-polls the NAPI `id` while the ring waits for completions (static tracking,
    /// Linux 6.13+), in place of the NAPIs of the ring's own sockets: for a queue that no
    /// socket of ours names, such as a copy-mode AF_XDP socket's.
    pub(crate) fn busy_poll_napi(&mut self, id: u32) -> io::Result<()> {
        if self.napi_busy_poll_us == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no busy-poll time was set for this shard",
            ));
        }
        let mut napi = types::Napi::new()
            .set_busy_poll_timeout(self.napi_busy_poll_us)
            .set_prefer_busy_poll(true)
            .set_tracking(types::NapiTracking::Static);
        self.ring.submitter().register_napi(&mut napi)?;
        self.ring.submitter().register_napi_add_id(id)
    }

    fn push(&mut self, e: squeue::Entry) {
        // SAFETY: every pointer in our SQEs refers to memory owned by a slot (send buffer,
        // connect address) or the buffer ring, all of which outlive the operation.
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            // SQ full: hand the batch to the kernel and retry.
            if let Err(err) = self.ring.submit() {
                if err.raw_os_error() != Some(libc::EBUSY) {
                    eprintln!("wirespeed-rt: io_uring submit failed: {err}");
                }
                self.drain();
            }
        }
    }

    pub(crate) fn add_doorbell(&mut self, fd: RawFd) -> io::Result<()> {
        self.doorbell = fd;
        self.arm_doorbell();
        Ok(())
    }

    fn arm_doorbell(&mut self) {
        let e = opcode::PollAdd::new(types::Fd(self.doorbell), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(DOORBELL);
        self.push(e);
    }

    /// A multishot poll: every wake-up of the fd posts a completion, so a frame that arrives
    /// between the poller's last look and the sleep ends the sleep.
    pub(crate) fn add_wake_fd(&mut self, fd: RawFd) -> io::Result<()> {
        if self.wake_fds.len() as u64 >= MAX_WAKE_FDS {
            return Err(io::Error::other("too many poller wake-up fds on one shard"));
        }
        self.wake_fds.push(fd);
        self.arm_wake_fd(self.wake_fds.len() - 1);
        Ok(())
    }

    fn arm_wake_fd(&mut self, i: usize) {
        let e = opcode::PollAdd::new(types::Fd(self.wake_fds[i]), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(WAKE_FD_BASE + i as u64);
        self.push(e);
    }

    pub(crate) fn register(&mut self, fd: OwnedFd) -> Token {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.fd = Some(fd);
        s.live = true;
        s.in_use = true;
        Token {
            slot,
            generation: s.generation,
        }
    }

    fn slot(&mut self, t: Token) -> Option<&mut Slot> {
        self.slots
            .get_mut(t.slot as usize)
            .filter(|s| s.in_use && s.generation == t.generation)
    }

    pub(crate) fn deregister(&mut self, t: Token) {
        let Some(s) = self.slot(t) else { return };
        if !s.live {
            return;
        }
        s.live = false;
        s.reader = None;
        s.writer = None;
        let fd = s.raw_fd();
        if s.inflight == 0 {
            self.finish(t.slot);
        } else {
            s.inflight += 1; // the cancel's own CQE
            let e = opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(fd)).all())
                .build()
                .user_data(user_data(t, OP_CANCEL));
            self.push(e);
        }
    }

    /// Closes the fd and frees the slot once nothing refers to it.
    fn finish(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        for c in s.received.drain(..) {
            if let Chunk::Data { bid, .. } = c {
                self.bufs.push(bid);
            }
        }
        // Accepted sockets no task took, and the slot's own, close here.
        s.accepted.clear();
        s.fd = None;
        let generation = s.generation.wrapping_add(1);
        let send_buf = std::mem::take(&mut s.send_buf);
        *s = Slot {
            generation,
            send_buf,
            ..Slot::default()
        };
        s.send_buf.clear();
        self.free.push(slot);
        self.bufs.publish();
    }

    pub(crate) fn poll_accept(&mut self, t: Token, cx: &Context<'_>) -> Poll<io::Result<OwnedFd>> {
        let Some(s) = self.slot(t) else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        if let Some(r) = s.accepted.pop_front() {
            return Poll::Ready(r);
        }
        s.reader = Some(cx.waker().clone());
        if !s.accept_armed {
            s.accept_armed = true;
            s.inflight += 1;
            let e = opcode::AcceptMulti::new(types::Fd(s.raw_fd()))
                .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
                .build()
                .user_data(user_data(t, OP_ACCEPT));
            self.push(e);
        }
        Poll::Pending
    }

    pub(crate) fn poll_recv(
        &mut self,
        t: Token,
        cx: &Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let Some(s) = self
            .slots
            .get_mut(t.slot as usize)
            .filter(|s| s.in_use && s.generation == t.generation)
        else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        let mut copied = 0;
        // Fill `out` from as many received chunks as fit: one task wake-up drains a burst.
        while copied < out.len() {
            match s.received.front_mut() {
                Some(Chunk::Data { bid, len, off }) => {
                    let avail = (*len - *off) as usize;
                    let n = avail.min(out.len() - copied);
                    let start = *off as usize;
                    out[copied..copied + n].copy_from_slice(&self.bufs.buf(*bid)[start..start + n]);
                    copied += n;
                    *off += n as u32;
                    if *off == *len {
                        let bid = *bid;
                        s.received.pop_front();
                        self.bufs.push(bid);
                    }
                }
                Some(Chunk::Eof) => {
                    if copied == 0 {
                        return Poll::Ready(Ok(0));
                    }
                    break;
                }
                Some(Chunk::Err(e)) => {
                    if copied == 0 {
                        let e = *e;
                        s.received.pop_front();
                        return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
                    }
                    break;
                }
                None => break,
            }
        }
        if copied > 0 {
            self.bufs.publish();
            return Poll::Ready(Ok(copied));
        }
        if out.is_empty() {
            return Poll::Ready(Ok(0));
        }
        s.reader = Some(cx.waker().clone());
        if !s.recv_armed {
            s.recv_armed = true;
            s.inflight += 1;
            let e = opcode::RecvMulti::new(types::Fd(s.raw_fd()), BUF_GROUP)
                .build()
                .user_data(user_data(t, OP_RECV));
            self.push(e);
        }
        Poll::Pending
    }

    pub(crate) fn poll_send(
        &mut self,
        t: Token,
        cx: &Context<'_>,
        bufs: &[IoSlice<'_>],
        ticket: &mut Option<u64>,
    ) -> Poll<io::Result<usize>> {
        let Some(s) = self.slot(t) else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        if let Some(mine) = *ticket {
            if let Some((done, _)) = &s.send_done {
                if *done == mine {
                    let (_, r) = s.send_done.take().expect("checked");
                    return Poll::Ready(r);
                }
            }
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if s.send_inflight.is_some() {
            // Another task's send is still in the kernel; sends on one socket go one at a time.
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        s.send_buf.clear();
        for b in bufs {
            s.send_buf.extend_from_slice(b);
        }
        let mine = s.next_ticket;
        s.next_ticket += 1;
        s.send_inflight = Some(mine);
        s.inflight += 1;
        *ticket = Some(mine);
        s.writer = Some(cx.waker().clone());
        let e = opcode::Send::new(
            types::Fd(s.raw_fd()),
            s.send_buf.as_ptr(),
            s.send_buf.len() as u32,
        )
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(user_data(t, OP_SEND));
        self.push(e);
        Poll::Pending
    }

    pub(crate) fn poll_connect(
        &mut self,
        t: Token,
        cx: &Context<'_>,
        addr: &SocketAddr,
        started: &mut bool,
    ) -> Poll<io::Result<()>> {
        let Some(s) = self.slot(t) else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        if *started {
            if let Some(r) = s.connect_result.take() {
                return Poll::Ready(r);
            }
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        *started = true;
        let boxed = Box::new(SockAddr::from(*addr));
        let (ptr, len) = (boxed.as_ptr(), boxed.len());
        s.connect_addr = Some(boxed);
        s.inflight += 1;
        s.writer = Some(cx.waker().clone());
        let e = opcode::Connect::new(types::Fd(s.raw_fd()), ptr, len)
            .build()
            .user_data(user_data(t, OP_CONNECT));
        self.push(e);
        Poll::Pending
    }

    pub(crate) fn poll(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let r = match timeout {
            Some(d) if d.is_zero() => self.ring.submit(),
            Some(d) => {
                let ts = types::Timespec::new()
                    .sec(d.as_secs())
                    .nsec(d.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submit_and_wait(1),
        };
        if let Err(e) = r {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => {}
                _ => return Err(e),
            }
        }
        Ok(self.drain())
    }

    fn drain(&mut self) -> usize {
        let mut n = 0;
        loop {
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            n += 1;
            self.complete(cqe.user_data(), cqe.result(), cqe.flags());
        }
        self.bufs.publish();
        n
    }

    fn complete(&mut self, ud: u64, res: i32, flags: u32) {
        if ud == DOORBELL {
            wirespeed_sys::eventfd::drain(&self.doorbell);
            if !cqueue::more(flags) {
                self.arm_doorbell();
            }
            return;
        }
        if (WAKE_FD_BASE..WAKE_FD_BASE + MAX_WAKE_FDS).contains(&ud) {
            if !cqueue::more(flags) && res >= 0 {
                self.arm_wake_fd((ud - WAKE_FD_BASE) as usize);
            }
            return;
        }
        let op = ud & 7;
        let slot = ((ud >> 3) & 0x1fff_ffff) as u32;
        let generation = (ud >> 32) as u32;
        let more = cqueue::more(flags);
        let Some(s) = self
            .slots
            .get_mut(slot as usize)
            .filter(|s| s.in_use && s.generation == generation)
        else {
            return;
        };
        let last = op == OP_CANCEL || !more || (op == OP_SEND || op == OP_CONNECT);
        if !s.live {
            // Draining a closed socket: give back buffers and fds, then free the slot.
            if let Some(bid) = cqueue::buffer_select(flags) {
                self.bufs.push(bid);
            }
            if op == OP_ACCEPT && res >= 0 {
                // SAFETY: the accept CQE's new descriptor, which nothing else owns; dropping
                // it closes it, as nobody will take it.
                drop(unsafe { OwnedFd::from_raw_fd(res) });
            }
            if last {
                s.inflight -= 1;
                if s.inflight == 0 {
                    self.finish(slot);
                }
            }
            return;
        }
        match op {
            OP_ACCEPT => {
                s.accepted.push_back(if res >= 0 {
                    // SAFETY: the accept CQE's new descriptor, which nothing else owns.
                    Ok(unsafe { OwnedFd::from_raw_fd(res) })
                } else {
                    Err(io::Error::from_raw_os_error(-res))
                });
                if !more {
                    s.accept_armed = false;
                    s.inflight -= 1;
                }
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
            }
            OP_RECV => {
                if res > 0 {
                    match cqueue::buffer_select(flags) {
                        Some(bid) => s.received.push_back(Chunk::Data {
                            bid,
                            len: res as u32,
                            off: 0,
                        }),
                        None => s.received.push_back(Chunk::Err(libc::EIO)),
                    }
                } else if res == 0 {
                    s.received.push_back(Chunk::Eof);
                } else if res != -libc::ENOBUFS {
                    // ENOBUFS only means the buffer ring ran dry: re-arm when the reader
                    // comes back, after other connections have returned buffers.
                    s.received.push_back(Chunk::Err(-res));
                }
                if !more {
                    s.recv_armed = false;
                    s.inflight -= 1;
                }
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
            }
            OP_SEND => {
                s.inflight -= 1;
                let ticket = s.send_inflight.take().unwrap_or(0);
                let r = if res >= 0 {
                    Ok(res as usize)
                } else {
                    Err(io::Error::from_raw_os_error(-res))
                };
                s.send_done = Some((ticket, r));
                if let Some(w) = s.writer.take() {
                    w.wake();
                }
            }
            OP_CONNECT => {
                s.inflight -= 1;
                s.connect_addr = None;
                s.connect_result = Some(if res >= 0 {
                    Ok(())
                } else {
                    Err(io::Error::from_raw_os_error(-res))
                });
                if let Some(w) = s.writer.take() {
                    w.wake();
                }
            }
            _ => {
                s.inflight -= 1;
            }
        }
    }
}
