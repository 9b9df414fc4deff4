//! The receive buffer between a UART's interrupt handler and the console: a single-producer,
//! single-consumer ring of bytes in a `static`, with no lock and no `unsafe`.
//!
//! The interrupt handler (the producer) calls [`ByteRing::push`] for each received byte; the
//! console's `read` (the consumer) calls [`ByteRing::pop`]. The two indices only ever grow (mod
//! 2^usize), each written by one side only, so the handler never waits for the console and the
//! console reads while the model is computing and while bytes keep arriving. A port whose
//! hardware cannot hold back the sender (no flow control) counts the bytes it had to drop with
//! [`ByteRing::note_lost`], and the console reports them ([`ByteRing::take_lost`]).
//!
//! Memory order: the producer stores the byte, then publishes the new head with `Release`; the
//! consumer reads the head with `Acquire` before the byte, and publishes the tail the same way,
//! so a slot is never rewritten before it has been read. On a single-core Cortex-M these are
//! plain loads and stores (with a `dmb`).

use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};

/// A ring of `N` bytes (`N` a power of two keeps the index arithmetic to a mask).
#[derive(Debug)]
pub struct ByteRing<const N: usize> {
    buf: [AtomicU8; N],
    /// Bytes ever pushed (written by the producer only).
    head: AtomicUsize,
    /// Bytes ever popped (written by the consumer only).
    tail: AtomicUsize,
    /// Bytes dropped because the ring was full (producer).
    lost: AtomicU32,
    /// `lost` as the consumer last reported it (consumer).
    lost_seen: AtomicU32,
}

impl<const N: usize> Default for ByteRing<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ByteRing<N> {
    /// Bytes the ring holds.
    pub const CAPACITY: usize = N;

    /// An empty ring (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            buf: [const { AtomicU8::new(0) }; N],
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lost: AtomicU32::new(0),
            lost_seen: AtomicU32::new(0),
        }
    }

    /// Producer: appends `byte`; false (and nothing stored) when the ring is full.
    pub fn push(&self, byte: u8) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= N {
            return false;
        }
        if let Some(slot) = self.buf.get(head % N) {
            slot.store(byte, Ordering::Relaxed);
        }
        self.head.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: the oldest byte, if any.
    pub fn pop(&self) -> Option<u8> {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let byte = self.buf.get(tail % N).map_or(0, |slot| slot.load(Ordering::Relaxed));
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(byte)
    }

    /// Consumer: moves up to `out.len()` bytes into `out`; returns how many.
    pub fn pop_into(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.pop() {
                Some(b) => *slot = b,
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Bytes waiting (either side).
    pub fn len(&self) -> usize {
        self.head.load(Ordering::Acquire).wrapping_sub(self.tail.load(Ordering::Acquire))
    }

    /// No byte waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Producer: one byte could not be stored (the ring was full and the hardware could not
    /// wait).
    pub fn note_lost(&self) {
        let n = self.lost.load(Ordering::Relaxed);
        self.lost.store(n.wrapping_add(1), Ordering::Release);
    }

    /// Consumer: bytes lost since the last call.
    pub fn take_lost(&self) -> u32 {
        let lost = self.lost.load(Ordering::Acquire);
        let seen = self.lost_seen.load(Ordering::Relaxed);
        self.lost_seen.store(lost, Ordering::Relaxed);
        lost.wrapping_sub(seen)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn fills_drains_and_refuses_when_full() {
        let r = ByteRing::<4>::new();
        assert!(r.is_empty());
        for b in 1..=4 {
            assert!(r.push(b));
        }
        assert!(!r.push(5));
        assert_eq!(r.len(), 4);
        assert_eq!(r.pop(), Some(1));
        assert!(r.push(5));
        let mut out = [0u8; 8];
        assert_eq!(r.pop_into(&mut out), 4);
        assert_eq!(&out[..4], &[2, 3, 4, 5]);
        assert_eq!(r.pop(), None);
        r.note_lost();
        r.note_lost();
        assert_eq!(r.take_lost(), 2);
        assert_eq!(r.take_lost(), 0);
    }

    #[test]
    fn a_producer_thread_and_a_consumer_thread_see_every_byte_in_order() {
        static RING: ByteRing<16> = ByteRing::new();
        const COUNT: u32 = 50_000;
        let producer = std::thread::spawn(|| {
            for i in 0..COUNT {
                while !RING.push(i as u8) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u32;
        while next < COUNT {
            if let Some(b) = RING.pop() {
                assert_eq!(b, next as u8, "byte {next}");
                next += 1;
            }
        }
        producer.join().unwrap();
        assert!(RING.is_empty());
    }
}
