//! The per-shard run queue. Tasks are `async-task` tasks whose schedule function pushes onto a
//! thread-local queue, so spawning and waking never synchronise with another thread.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_task::{Runnable, Task};

thread_local! {
    static RUN_QUEUE: RefCell<VecDeque<Runnable>> = RefCell::new(VecDeque::with_capacity(1024));
}

fn schedule(runnable: Runnable) {
    RUN_QUEUE.with(|q| q.borrow_mut().push_back(runnable));
}

/// Spawns a task on the current shard. Dropping the handle detaches the task; it keeps running.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let (runnable, task) = async_task::spawn_local(future, schedule);
    runnable.schedule();
    JoinHandle { task: Some(task) }
}

/// Runs up to `budget` ready tasks. Returns how many ran.
///
/// The budget bounds the time between two polls of the I/O engine; there is no preemption
/// timer, so a task that never yields starves its shard (as in Seastar).
pub(crate) fn run_ready(budget: usize) -> usize {
    let mut ran = 0;
    while ran < budget {
        let next = RUN_QUEUE.with(|q| q.borrow_mut().pop_front());
        match next {
            Some(r) => {
                r.run();
                ran += 1;
            }
            None => break,
        }
    }
    ran
}

pub(crate) fn has_ready() -> bool {
    RUN_QUEUE.with(|q| !q.borrow().is_empty())
}

/// Drops every queued task (used when a shard stops).
pub(crate) fn clear() {
    let drained: Vec<Runnable> = RUN_QUEUE.with(|q| q.borrow_mut().drain(..).collect());
    drop(drained);
}

/// A handle to a spawned task; await it for the output.
pub struct JoinHandle<T> {
    task: Option<Task<T>>,
}

impl<T> JoinHandle<T> {
    /// Cancels the task and waits until it is gone.
    pub async fn cancel(mut self) -> Option<T> {
        match self.task.take() {
            Some(t) => t.cancel().await,
            None => None,
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let task = self
            .task
            .as_mut()
            .expect("JoinHandle polled after completion");
        Pin::new(task).poll(cx)
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.detach();
        }
    }
}

/// Yields once to the other ready tasks of this shard.
pub async fn yield_now() {
    struct YieldNow(bool);
    impl Future for YieldNow {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    YieldNow(false).await
}

/// The output of [`select`]: which future finished first.
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls both futures, left first, and returns the first output; the other future is dropped.
pub async fn select<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(v));
        }
        Poll::Pending
    })
    .await
}
