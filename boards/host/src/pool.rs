//! The desktop's worker threads for `--threads`: a small pool whose workers spin briefly between
//! calls instead of sleeping.
//!
//! Decode calls [`runtime::kernels::linear_par`] ~50 times per token for GPT-2 124M, each a few
//! tens of microseconds of work. rayon's workers go to sleep between such calls, and waking one
//! (a futex round trip, more in a VM) cost about as much as the work saved: two-thread decode
//! was no faster than one thread (BENCHMARKS.md, the Zen 3 idle run). Here a worker that has
//! just finished a call spins for up to [`SPIN`] waiting for the next one, and only then parks
//! on a condition variable, so a pool left idle costs nothing.
//!
//! Which thread computes which output never changes a result (`linear_par` gives each task
//! disjoint outputs computed by the one-thread code), so any schedule is bit-identical.
//!
//! [`with_buffer`] lends each thread its own working memory (prefill's row split writes a
//! task's outputs there before copying them in).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker waits for the next call, spinning, before it parks.
const SPIN: Duration = Duration::from_millis(2);

type Task<'a> = &'a (dyn Fn(usize) + Sync);

struct State {
    /// Bumped once per `run`; a worker that sees it change joins that run.
    epoch: AtomicUsize,
    /// The next task index to hand out in the current run.
    next: AtomicUsize,
    /// Tasks in the current run.
    n: AtomicUsize,
    /// Workers that have not yet finished with the current run; `run` returns at 0.
    pending: AtomicUsize,
    /// Workers parked on `wake` (or about to park).
    sleepers: AtomicUsize,
    /// A task panicked on a worker during the current run.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// The current run's task, written only by `run` while no worker reads it (between runs
    /// every worker has checked out: `pending` is 0), read by workers only inside a run.
    task: UnsafeCell<Option<Task<'static>>>,
}

// SAFETY: `task` is only written by `run` when `pending == 0` (no worker is inside a run) and
// before the epoch bump that publishes it (SeqCst), and only read by workers after they see
// that bump and before they decrement `pending`.
unsafe impl Sync for State {}

/// `threads - 1` workers; the calling thread runs a share of every call too.
pub struct Pool {
    state: Arc<State>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

impl Pool {
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let state = Arc::new(State {
            epoch: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            n: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            task: UnsafeCell::new(None),
        });
        let mut workers = Vec::with_capacity(threads - 1);
        for w in 1..threads {
            let s = Arc::clone(&state);
            workers.push(std::thread::Builder::new().name(format!("linear-{w}")).spawn(move || worker(&s))?);
        }
        Ok(Self { state, workers, threads })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `task(i)` for every `i` in `0..n` on the pool's threads and this one; returns
    /// when all have finished and no worker holds `task` any more.
    pub fn run(&self, n: usize, task: Task<'_>) {
        let s = &*self.state;
        if self.workers.is_empty() || n <= 1 {
            (0..n).for_each(task);
            return;
        }
        // SAFETY: lifetime erased for the slot; every worker is done with it before this
        // returns (the wait for `pending == 0` below), and no worker reads it outside a run.
        let erased: Task<'static> = unsafe { std::mem::transmute::<Task<'_>, Task<'static>>(task) };
        // SAFETY: no run is in progress (the previous `run` waited for pending == 0).
        unsafe { *s.task.get() = Some(erased) };
        s.next.store(0, SeqCst);
        s.n.store(n, SeqCst);
        s.panicked.store(false, SeqCst);
        s.pending.store(self.workers.len(), SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        loop {
            let i = s.next.fetch_add(1, SeqCst);
            if i >= n {
                break;
            }
            task(i);
        }
        while s.pending.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        // SAFETY: every worker has checked out of this run.
        unsafe { *s.task.get() = None };
        if s.panicked.load(SeqCst) {
            panic!("a task panicked on a worker thread");
        }
    }
}

fn worker(s: &State) {
    let mut seen = 0usize;
    loop {
        // wait for the next run: spin, then park
        let start = Instant::now();
        let mut spins = 0u32;
        while s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, SeqCst);
                while s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
                    g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, SeqCst);
                break;
            }
        }
        if s.shutdown.load(SeqCst) {
            return;
        }
        seen = s.epoch.load(SeqCst);
        // SAFETY: inside a run (this worker has not decremented `pending` yet).
        let task = unsafe { *s.task.get() };
        let n = s.n.load(SeqCst);
        if let Some(task) = task {
            loop {
                let i = s.next.fetch_add(1, SeqCst);
                if i >= n {
                    break;
                }
                if catch_unwind(AssertUnwindSafe(|| task(i))).is_err() {
                    s.panicked.store(true, SeqCst);
                }
            }
        }
        s.pending.fetch_sub(1, SeqCst);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.state.shutdown.store(true, SeqCst);
        {
            let _g = self.state.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.state.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

thread_local! {
    /// This thread's [`with_buffer`] memory: grown to the largest request, then reused.
    static BUFFER: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Calls `f` with at least `len` values of the calling thread's own memory (the
/// [`runtime::kernels::Parallel::with_buffer`] of the pool's threads: prefill's row split
/// writes each thread's outputs there). Grown on first use and kept, so a steady run allocates
/// nothing; a nested call (none is made) would get an empty slice.
pub fn with_buffer(len: usize, f: &mut dyn FnMut(&mut [f32])) {
    BUFFER.with(|b| match b.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut []),
    })
}

#[cfg(test)]
mod tests {
    use super::Pool;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_index_runs_once_in_every_call() {
        for threads in [1, 2, 3, 5] {
            let pool = Pool::new(threads).expect("spawn");
            for n in [0usize, 1, 2, 3, 7, 64] {
                for _ in 0..50 {
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    pool.run(n, &|i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads} n {n}");
                }
            }
        }
    }

    #[test]
    fn parked_workers_wake_for_the_next_call() {
        let pool = Pool::new(2).expect("spawn");
        let count = AtomicUsize::new(0);
        pool.run(4, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        std::thread::sleep(super::SPIN * 3); // the worker parks
        pool.run(4, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 8);
    }
}
