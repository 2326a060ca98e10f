//! Fixed-capacity byte ring used for per-connection send and receive buffers.
//!
//! Allocated once per connection (and recycled through the stack's pool), so steady-state
//! traffic never allocates.

#[derive(Debug)]
pub(crate) struct Ring {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
}

impl Ring {
    pub(crate) fn new(cap: usize) -> Self {
        Ring {
            buf: vec![0u8; cap].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn from_box(buf: Box<[u8]>) -> Self {
        Ring {
            buf,
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn into_box(self) -> Box<[u8]> {
        self.buf
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn free(&self) -> usize {
        self.buf.len() - self.len
    }

    #[inline]
    fn phys(&self, logical: usize) -> usize {
        let cap = self.buf.len();
        let p = self.head + logical;
        if p >= cap {
            p - cap
        } else {
            p
        }
    }

    /// Writes `data` at logical offset `offset` (which may lie beyond `len`, for
    /// out-of-order data) without changing `len`. Returns bytes written (clipped to capacity).
    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let cap = self.buf.len();
        if offset >= cap {
            return 0;
        }
        let n = data.len().min(cap - offset);
        let start = self.phys(offset);
        let first = n.min(cap - start);
        self.buf[start..start + first].copy_from_slice(&data[..first]);
        if n > first {
            self.buf[..n - first].copy_from_slice(&data[first..n]);
        }
        n
    }

    /// Appends as much of `data` as fits; returns bytes appended.
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        let written = self.write_at(self.len, &data[..n]);
        self.len += written;
        written
    }

    /// Marks `n` bytes already written past `len` (by `write_at`) as contiguous data.
    pub(crate) fn extend(&mut self, n: usize) {
        self.len = (self.len + n).min(self.buf.len());
    }

    /// Copies up to `out.len()` bytes from logical offset `offset` without consuming.
    pub(crate) fn peek_at(&self, offset: usize, out: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = out.len().min(self.len - offset);
        let cap = self.buf.len();
        let start = self.phys(offset);
        let first = n.min(cap - start);
        out[..first].copy_from_slice(&self.buf[start..start + first]);
        if n > first {
            out[first..n].copy_from_slice(&self.buf[..n - first]);
        }
        n
    }

    /// The buffered bytes as (up to) two slices, in order.
    pub(crate) fn slices(&self) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        let first = self.len.min(cap - self.head);
        (
            &self.buf[self.head..self.head + first],
            &self.buf[..self.len - first],
        )
    }

    /// Drops `n` bytes from the front.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = self.phys(n);
        // No rewind to 0 when empty: out-of-order bytes may sit past the end.
        self.len -= n;
    }

    /// Copies out and consumes up to `out.len()` bytes.
    pub(crate) fn pop(&mut self, out: &mut [u8]) -> usize {
        let n = self.peek_at(0, out);
        self.consume(n);
        n
    }

    pub(crate) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_reads_back() {
        let mut r = Ring::new(8);
        assert_eq!(r.push(b"abcdef"), 6);
        let mut out = [0u8; 4];
        assert_eq!(r.pop(&mut out), 4);
        assert_eq!(&out, b"abcd");
        assert_eq!(r.push(b"ghijklmn"), 6); // only 6 free
        let mut all = [0u8; 16];
        assert_eq!(r.peek_at(0, &mut all), 8);
        assert_eq!(&all[..8], b"efghijkl");
        assert_eq!(r.peek_at(3, &mut all[..2]), 2);
        assert_eq!(&all[..2], b"hi");
        let (a, b) = r.slices();
        assert_eq!((a, b), (&b"efgh"[..], &b"ijkl"[..]));
    }

    #[test]
    fn out_of_order_write_then_extend() {
        let mut r = Ring::new(8);
        r.push(b"ab");
        r.consume(2);
        r.push(b"xy");
        assert_eq!(r.write_at(4, b"EF"), 2);
        assert_eq!(r.write_at(2, b"CD"), 2);
        r.extend(4);
        let mut out = [0u8; 8];
        assert_eq!(r.pop(&mut out), 6);
        assert_eq!(&out[..6], b"xyCDEF");
        assert_eq!(r.write_at(8, b"z"), 0);
    }
}
