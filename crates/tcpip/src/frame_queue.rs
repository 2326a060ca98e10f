//! Frames queued outside connections: control frames and frames parked for neighbour resolution.

use wirespeed_wire::IpAddress;

/// A bounded FIFO of frame buffers. Buffers are allocated the first time the queue grows to
/// use them and reused after that, so steady state allocates nothing and a stack that never
/// queues much never pays for the full capacity.
pub(crate) struct FrameQueue {
    bufs: Vec<Box<[u8]>>,
    lens: Vec<usize>,
    hops: Vec<IpAddress>,
    head: usize,
    count: usize,
    capacity: usize,
    frame_len: usize,
}

impl FrameQueue {
    pub(crate) fn new(frames: usize, frame_len: usize) -> Self {
        FrameQueue {
            bufs: Vec::with_capacity(frames),
            lens: vec![0; frames],
            hops: vec![IpAddress::default(); frames],
            head: 0,
            count: 0,
            capacity: frames,
            frame_len,
        }
    }

    /// Builds a frame in place; `fill` returns its length, 0 to cancel. False when full.
    pub(crate) fn push_with(
        &mut self,
        hop: IpAddress,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        if self.count == self.capacity {
            return false;
        }
        let slot = (self.head + self.count) % self.capacity;
        while self.bufs.len() <= slot {
            self.bufs.push(vec![0u8; self.frame_len].into_boxed_slice());
        }
        let len = fill(&mut self.bufs[slot]);
        if len == 0 {
            return true;
        }
        self.lens[slot] = len;
        self.hops[slot] = hop;
        self.count += 1;
        true
    }

    pub(crate) fn front(&self) -> Option<(&[u8], IpAddress)> {
        (self.count > 0).then(|| {
            (
                &self.bufs[self.head][..self.lens[self.head]],
                self.hops[self.head],
            )
        })
    }

    pub(crate) fn pop(&mut self) {
        if self.count > 0 {
            self.head = (self.head + 1) % self.capacity;
            self.count -= 1;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }
}
