//! Async mutual exclusion between the tasks of one shard. These types are `!Send` on purpose:
//! sharing across shards goes by message ([`crate::smp`]), never by lock.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::task::{Poll, Waker};

/// A counting semaphore, fair (FIFO) among waiters.
pub struct Semaphore {
    permits: Cell<usize>,
    waiters: RefCell<VecDeque<(u64, Option<Waker>)>>,
    next_ticket: Cell<u64>,
}

pub struct Permit<'a> {
    sem: &'a Semaphore,
}

impl Semaphore {
    pub fn new(permits: usize) -> Self {
        Semaphore {
            permits: Cell::new(permits),
            waiters: RefCell::new(VecDeque::new()),
            next_ticket: Cell::new(0),
        }
    }

    pub fn available(&self) -> usize {
        self.permits.get()
    }

    /// Takes a permit now if one is free and nobody is queued ahead.
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        if self.permits.get() > 0 && self.waiters.borrow().is_empty() {
            self.permits.set(self.permits.get() - 1);
            Some(Permit { sem: self })
        } else {
            None
        }
    }

    pub async fn acquire(&self) -> Permit<'_> {
        if let Some(p) = self.try_acquire() {
            return p;
        }
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        self.waiters.borrow_mut().push_back((ticket, None));
        let mut guard = QueueGuard {
            sem: self,
            ticket,
            done: false,
        };
        std::future::poll_fn(|cx| {
            let mut w = self.waiters.borrow_mut();
            let first = w.front().map(|(t, _)| *t) == Some(ticket);
            if first && self.permits.get() > 0 {
                w.pop_front();
                self.permits.set(self.permits.get() - 1);
                // Let the next waiter see a remaining permit too.
                if self.permits.get() > 0 {
                    if let Some((_, Some(next))) = w.front() {
                        next.wake_by_ref();
                    }
                }
                return Poll::Ready(());
            }
            if let Some(entry) = w.iter_mut().find(|(t, _)| *t == ticket) {
                entry.1 = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
        guard.done = true;
        Permit { sem: self }
    }

    fn release(&self) {
        self.permits.set(self.permits.get() + 1);
        if let Some((_, Some(w))) = self.waiters.borrow().front() {
            w.wake_by_ref();
        }
    }
}

struct QueueGuard<'a> {
    sem: &'a Semaphore,
    ticket: u64,
    done: bool,
}

impl Drop for QueueGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            // A cancelled waiter leaves the queue and passes on its turn.
            let mut w = self.sem.waiters.borrow_mut();
            w.retain(|(t, _)| *t != self.ticket);
            if self.sem.permits.get() > 0 {
                if let Some((_, Some(next))) = w.front() {
                    next.wake_by_ref();
                }
            }
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.sem.release();
    }
}

/// A mutex for the tasks of one shard, held across `.await` points.
pub struct Mutex<T> {
    sem: Semaphore,
    /// Borrowed only by the holder of the one permit, so a borrow never fails.
    value: RefCell<T>,
}

pub struct MutexGuard<'a, T> {
    // Declared first: the borrow ends before the permit goes back.
    value: RefMut<'a, T>,
    _permit: Permit<'a>,
}

impl<T> Mutex<T> {
    pub fn new(value: T) -> Self {
        Mutex {
            sem: Semaphore::new(1),
            value: RefCell::new(value),
        }
    }

    pub async fn lock(&self) -> MutexGuard<'_, T> {
        let permit = self.sem.acquire().await;
        MutexGuard {
            value: self.value.borrow_mut(),
            _permit: permit,
        }
    }

    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.sem.try_acquire().map(|p| MutexGuard {
            value: self.value.borrow_mut(),
            _permit: p,
        })
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

/// A one-shot notification between tasks of one shard.
#[derive(Clone, Default)]
pub struct Notify {
    inner: Rc<RefCell<(bool, Vec<Waker>)>>,
}

impl Notify {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn notify(&self) {
        let wakers = {
            let mut i = self.inner.borrow_mut();
            i.0 = true;
            std::mem::take(&mut i.1)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
    pub fn is_notified(&self) -> bool {
        self.inner.borrow().0
    }
    pub async fn notified(&self) {
        std::future::poll_fn(|cx| {
            let mut i = self.inner.borrow_mut();
            if i.0 {
                Poll::Ready(())
            } else {
                i.1.push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}
