//! Cross-shard messages.
//!
//! Every ordered pair of shards (from, to) has its own bounded single-producer,
//! single-consumer ring, so sending is one release store and receiving one acquire load: no
//! lock and no read-modify-write atomic. A full ring spills into a sender-local backlog that the
//! sender retries on its next loop turn. A shard that is about to block announces it in its
//! `sleeping` flag; a sender that sees the flag rings the shard's eventfd doorbell.

use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::VecDeque;
use std::future::Future;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::task::{Poll, Waker};

use std::sync::Arc;

pub(crate) type Message = Box<dyn FnOnce() + Send>;

const RING_CAPACITY: usize = 1024;

#[repr(align(64))]
struct CachePadded<T>(T);

/// A bounded SPSC ring. Exactly one thread pushes and exactly one thread pops.
pub(crate) struct Spsc<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    head: CachePadded<AtomicUsize>, // next slot to pop; written by the consumer
    tail: CachePadded<AtomicUsize>, // next slot to push; written by the producer
}

// SAFETY: the protocol (one producer, one consumer, acquire/release on head and tail) hands
// each slot to exactly one side at a time; T crosses threads, so T: Send is required.
unsafe impl<T: Send> Sync for Spsc<T> {}
unsafe impl<T: Send> Send for Spsc<T> {}

impl<T> Spsc<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(capacity.is_power_of_two());
        let slots = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Spsc {
            slots,
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
        }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Producer side. Gives the value back when the ring is full.
    pub(crate) fn push(&self, value: T) -> Result<(), T> {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        if tail.wrapping_sub(head) == self.slots.len() {
            return Err(value);
        }
        // SAFETY: slot `tail` is outside [head, tail), so the consumer does not touch it.
        unsafe { (*self.slots[tail & self.mask()].get()).write(value) };
        self.tail.0.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Consumer side.
    pub(crate) fn pop(&self) -> Option<T> {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        // SAFETY: slot `head` was published by the producer's release store of tail and is not
        // written again until we advance head.
        let v = unsafe { (*self.slots[head & self.mask()].get()).assume_init_read() };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.tail.0.load(Ordering::Acquire)
    }
}

impl<T> Drop for Spsc<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

/// The state all shards of one runtime share: rings, doorbells and sleep flags.
pub(crate) struct Mesh {
    n: usize,
    rings: Vec<Spsc<Message>>, // index from * n + to
    pub(crate) doorbells: Vec<OwnedFd>,
    sleeping: Vec<CachePadded<AtomicBool>>,
    pub(crate) shutdown: AtomicBool,
}

impl Mesh {
    pub(crate) fn new(n: usize) -> std::io::Result<Mesh> {
        Ok(Mesh {
            n,
            rings: (0..n * n).map(|_| Spsc::new(RING_CAPACITY)).collect(),
            doorbells: (0..n)
                .map(|_| wirespeed_sys::eventfd::create())
                .collect::<std::io::Result<_>>()?,
            sleeping: (0..n)
                .map(|_| CachePadded(AtomicBool::new(false)))
                .collect(),
            shutdown: AtomicBool::new(false),
        })
    }

    fn ring(&self, from: usize, to: usize) -> &Spsc<Message> {
        &self.rings[from * self.n + to]
    }

    pub(crate) fn ring_doorbell(&self, shard: usize) {
        wirespeed_sys::eventfd::ring(&self.doorbells[shard]);
    }

    /// Asks every shard to stop: sets the flag and wakes them all.
    pub(crate) fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for i in 0..self.n {
            self.ring_doorbell(i);
        }
    }

    fn wake_if_sleeping(&self, to: usize) {
        // Pairs with the fence in `prepare_sleep`: either we see the flag or the sleeper sees
        // our message.
        fence(Ordering::SeqCst);
        if self.sleeping[to].0.load(Ordering::Relaxed) {
            self.ring_doorbell(to);
        }
    }

    /// Marks `me` as about to block; returns false (and clears the mark) if a message is
    /// already waiting, in which case the caller must not block.
    pub(crate) fn prepare_sleep(&self, me: usize) -> bool {
        self.sleeping[me].0.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let pending = (0..self.n).any(|from| !self.ring(from, me).is_empty())
            || self.shutdown.load(Ordering::Relaxed);
        if pending {
            self.sleeping[me].0.store(false, Ordering::Relaxed);
        }
        !pending
    }

    pub(crate) fn woke(&self, me: usize) {
        self.sleeping[me].0.store(false, Ordering::Relaxed);
    }
}

thread_local! {
    static BACKLOG: RefCell<VecDeque<(usize, Message)>> = RefCell::new(VecDeque::new());
    static REPLIES: RefCell<Replies> = RefCell::new(Replies::default());
    /// The mesh this thread's shard belongs to, and its place in it.
    static MEMBER: RefCell<Option<(Arc<Mesh>, usize)>> = const { RefCell::new(None) };
}

/// Makes this thread shard `id` of `mesh` until [`clear_local`].
pub(crate) fn join(mesh: Arc<Mesh>, id: usize) {
    MEMBER.with(|m| *m.borrow_mut() = Some((mesh, id)));
}

fn mesh_and_id<R>(f: impl FnOnce(&Mesh, usize) -> R) -> R {
    MEMBER.with(|m| {
        let m = m.borrow();
        let (mesh, id) = m
            .as_ref()
            .expect("called outside a wirespeed shard (start one with Runtime::builder().run)");
        f(mesh, *id)
    })
}

#[derive(Default)]
struct Replies {
    slots: Vec<Option<ReplySlot>>,
    free: Vec<usize>,
}

enum ReplySlot {
    Waiting(Option<Waker>),
    Done(Box<dyn Any>),
}

/// Runs on the shard loop: delivers inbound messages and retries the local backlog.
/// Returns how many messages ran.
pub(crate) fn poll_mesh(mesh: &Mesh, me: usize) -> usize {
    let mut ran = 0;
    for from in 0..mesh.n {
        let ring = mesh.ring(from, me);
        // Bounded, so a chatty peer cannot starve this shard's own tasks.
        for _ in 0..RING_CAPACITY {
            match ring.pop() {
                Some(msg) => {
                    msg();
                    ran += 1;
                }
                None => break,
            }
        }
    }
    BACKLOG.with(|b| {
        let mut b = b.borrow_mut();
        let mut retry = b.len();
        while retry > 0 {
            retry -= 1;
            let (to, msg) = b.pop_front().expect("len checked");
            match mesh.ring(me, to).push(msg) {
                Ok(()) => mesh.wake_if_sleeping(to),
                Err(msg) => b.push_back((to, msg)),
            }
        }
    });
    ran
}

pub(crate) fn has_backlog() -> bool {
    BACKLOG.with(|b| !b.borrow().is_empty())
}

/// Runs `f` on shard `to` (fire and forget). Running it on the current shard just spawns it
/// through the same path, so ordering per (from, to) pair is FIFO.
pub fn send_to(to: usize, f: impl FnOnce() + Send + 'static) {
    let msg: Message = Box::new(f);
    mesh_and_id(|mesh, me| {
        assert!(
            to < mesh.n,
            "shard {to} does not exist (there are {})",
            mesh.n
        );
        let queued_behind = BACKLOG.with(|b| b.borrow().iter().any(|(t, _)| *t == to));
        if queued_behind {
            BACKLOG.with(|b| b.borrow_mut().push_back((to, msg)));
            return;
        }
        match mesh.ring(me, to).push(msg) {
            Ok(()) => mesh.wake_if_sleeping(to),
            Err(msg) => BACKLOG.with(|b| b.borrow_mut().push_back((to, msg))),
        }
    })
}

/// Runs `f` on shard `to` and returns its result to the calling task (Seastar's
/// `smp::submit_to`). The future `f` returns runs as a task on the target shard.
pub async fn submit_to<F, Fut, T>(to: usize, f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let me = mesh_and_id(|_, me| me);
    let id = REPLIES.with(|r| {
        let mut r = r.borrow_mut();
        let slot = Some(ReplySlot::Waiting(None));
        match r.free.pop() {
            Some(i) => {
                r.slots[i] = slot;
                i
            }
            None => {
                r.slots.push(slot);
                r.slots.len() - 1
            }
        }
    });
    send_to(to, move || {
        crate::spawn(async move {
            let value = f().await;
            send_to(me, move || complete_reply(id, Box::new(value)));
        });
    });
    let done = Cell::new(false);
    let out = std::future::poll_fn(|cx| {
        REPLIES.with(|r| {
            let mut r = r.borrow_mut();
            match r.slots[id].take() {
                Some(ReplySlot::Done(v)) => {
                    r.free.push(id);
                    done.set(true);
                    Poll::Ready(v)
                }
                Some(ReplySlot::Waiting(_)) | None => {
                    r.slots[id] = Some(ReplySlot::Waiting(Some(cx.waker().clone())));
                    Poll::Pending
                }
            }
        })
    })
    .await;
    *out.downcast::<T>().expect("reply type matches its request")
}

fn complete_reply(id: usize, value: Box<dyn Any>) {
    let waker = REPLIES.with(|r| {
        let mut r = r.borrow_mut();
        match r.slots.get_mut(id).and_then(Option::take) {
            Some(ReplySlot::Waiting(w)) => {
                r.slots[id] = Some(ReplySlot::Done(value));
                w
            }
            _ => None,
        }
    });
    if let Some(w) = waker {
        w.wake();
    }
}

pub(crate) fn clear_local() {
    MEMBER.with(|m| *m.borrow_mut() = None);
    BACKLOG.with(|b| b.borrow_mut().clear());
    REPLIES.with(|r| *r.borrow_mut() = Replies::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spsc_fifo_and_full() {
        let r = Spsc::new(4);
        for i in 0..4 {
            r.push(i).unwrap();
        }
        assert_eq!(r.push(9), Err(9));
        for i in 0..4 {
            assert_eq!(r.pop(), Some(i));
        }
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn spsc_across_threads_keeps_order() {
        let r = Arc::new(Spsc::new(64));
        let p = r.clone();
        let n = 200_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).is_ok() {
                    i += 1;
                }
            }
        });
        let mut expect = 0;
        while expect < n {
            if let Some(v) = r.pop() {
                assert_eq!(v, expect);
                expect += 1;
            }
        }
        t.join().unwrap();
    }
}
