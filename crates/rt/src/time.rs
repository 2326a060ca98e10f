//! Timers: a per-shard binary heap of deadlines, with lazy rescheduling.
//!
//! Moving a deadline later (an idle timer pushed back on every request) does not touch the
//! heap: when the old entry comes due, the timer finds its slot's newer deadline and re-queues
//! once. So a busy connection's idle timer costs one heap operation per idle period, not one
//! per request, and nothing allocates once the heap and slot table have grown.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

struct Slot {
    deadline: Instant,
    waker: Option<Waker>,
    generation: u32,
    /// A heap entry due no later than `deadline` exists for this slot.
    queued: bool,
}

#[derive(Default)]
pub(crate) struct TimerHeap {
    slots: Vec<Slot>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<(Instant, u32, u32)>>,
}

thread_local! {
    static TIMERS: RefCell<TimerHeap> = RefCell::new(TimerHeap::default());
}

impl TimerHeap {
    fn insert(&mut self, deadline: Instant, waker: Waker) -> (u32, u32) {
        let idx = match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                s.deadline = deadline;
                s.waker = Some(waker);
                s.queued = true;
                i
            }
            None => {
                self.slots.push(Slot {
                    deadline,
                    waker: Some(waker),
                    generation: 0,
                    queued: true,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[idx as usize].generation;
        self.heap.push(Reverse((deadline, idx, generation)));
        (idx, generation)
    }

    fn remove(&mut self, idx: u32, generation: u32) {
        let s = &mut self.slots[idx as usize];
        if s.generation == generation {
            s.generation = s.generation.wrapping_add(1);
            s.waker = None;
            self.free.push(idx);
        }
    }

    fn fire(&mut self, now: Instant, woken: &mut Vec<Waker>) {
        while let Some(Reverse((deadline, idx, generation))) = self.heap.peek().copied() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            let s = &mut self.slots[idx as usize];
            if s.generation != generation {
                continue; // the Sleep was dropped
            }
            if s.deadline > deadline {
                self.heap.push(Reverse((s.deadline, idx, generation)));
                continue;
            }
            s.queued = false;
            if let Some(w) = s.waker.take() {
                woken.push(w);
            }
        }
    }
}

/// Wakes every timer due at `now`. Wakers run after the heap is released, because a woken
/// task may be polled later and touch the heap again.
pub(crate) fn fire_due(now: Instant) {
    let mut woken = Vec::new();
    TIMERS.with(|t| t.borrow_mut().fire(now, &mut woken));
    for w in woken {
        w.wake();
    }
}

pub(crate) fn next_deadline() -> Option<Instant> {
    TIMERS.with(|t| t.borrow().heap.peek().map(|Reverse((d, _, _))| *d))
}

pub(crate) fn clear() {
    TIMERS.with(|t| *t.borrow_mut() = TimerHeap::default());
    NOW.with(|n| n.set(None));
}

thread_local! {
    /// The shard's clock, set once per loop turn; none outside a shard.
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The shard's clock, read once per loop turn (cheaper than `Instant::now()` per request).
/// Outside a shard it is the real time.
pub fn now() -> Instant {
    NOW.with(|n| n.get()).unwrap_or_else(Instant::now)
}

/// Sets the clock [`now`] reads for the turn that begins.
pub(crate) fn set_now(t: Instant) {
    NOW.with(|n| n.set(Some(t)));
}

/// A future that completes at a deadline. Created by [`sleep`] and [`sleep_until`].
pub struct Sleep {
    deadline: Instant,
    slot: Option<(u32, u32)>,
}

impl Sleep {
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline. Later is cheap; earlier pushes one heap entry.
    pub fn reset(&mut self, deadline: Instant) {
        let earlier = deadline < self.deadline;
        self.deadline = deadline;
        if let Some((idx, generation)) = self.slot {
            TIMERS.with(|t| {
                let mut t = t.borrow_mut();
                let s = &mut t.slots[idx as usize];
                if s.generation == generation {
                    s.deadline = deadline;
                    if earlier && s.queued {
                        t.heap.push(Reverse((deadline, idx, generation)));
                    }
                }
            });
        }
    }

    pub fn is_elapsed(&self) -> bool {
        now() >= self.deadline
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if now() >= self.deadline {
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        match self.slot {
            None => {
                let slot = TIMERS.with(|t| t.borrow_mut().insert(deadline, cx.waker().clone()));
                self.slot = Some(slot);
            }
            Some((idx, generation)) => TIMERS.with(|t| {
                let mut t = t.borrow_mut();
                let s = &mut t.slots[idx as usize];
                if s.generation == generation {
                    let stale = s.waker.as_ref().is_none_or(|w| !w.will_wake(cx.waker()));
                    if stale {
                        s.waker = Some(cx.waker().clone());
                    }
                    s.deadline = deadline;
                    // A slot that fired and was then reset needs a heap entry again.
                    if !s.queued {
                        s.queued = true;
                        t.heap.push(Reverse((deadline, idx, generation)));
                    }
                }
            }),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((idx, generation)) = self.slot.take() {
            // try_with: the thread-local may already be gone when a shard tears down.
            let _ = TIMERS.try_with(|t| t.borrow_mut().remove(idx, generation));
        }
    }
}

/// Completes after `duration`, measured from the shard's clock.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(now() + duration)
}

pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        slot: None,
    }
}

/// The error of a [`timeout`] whose deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline elapsed")
    }
}
impl std::error::Error for Elapsed {}

/// Runs `future` with a deadline.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Result<F::Output, Elapsed> {
    let mut sleep = std::pin::pin!(sleep(duration));
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// A periodic tick that does not drift: each tick is due one period after the previous
/// deadline, not after the moment it was observed.
pub struct Interval {
    period: Duration,
    sleep: Sleep,
}

pub fn interval(period: Duration) -> Interval {
    Interval {
        period,
        sleep: sleep_until(now() + period),
    }
}

impl Interval {
    pub async fn tick(&mut self) -> Instant {
        std::future::poll_fn(|cx| Pin::new(&mut self.sleep).poll(cx)).await;
        let due = self.sleep.deadline();
        let mut next = due + self.period;
        let now = now();
        if next <= now {
            // Fell behind by more than a period: skip the missed ticks rather than burst.
            next = now + self.period;
        }
        self.sleep.reset(next);
        due
    }
}

/// Runs `future` until it completes or `sleep` fires, leaving `sleep` usable afterwards (an
/// idle timer that the caller pushes back with [`Sleep::reset`] after each success).
pub async fn race<F: Future>(sleep: &mut Sleep, future: F) -> Result<F::Output, Elapsed> {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(&mut *sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}
