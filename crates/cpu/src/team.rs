//! Worker teams: the threads that run a plan's parallel loops.
//!
//! A team's workers spin while a run is in progress, so handing out the next parallel loop costs
//! an atomic store instead of waking a sleeping thread (a futex wake takes tens of microseconds in
//! a virtual machine, as long as a whole small kernel). Between runs they sleep on a condition
//! variable. A run takes a whole team for itself ([`acquire`]); runs on other threads at the same
//! time get their own teams, so no loop ever waits for another run's work.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long an idle worker spins for the next loop of a run before it sleeps. Kernels of a run
/// follow each other within microseconds; a loop after a longer serial stretch pays one wake-up.
const SPIN: Duration = Duration::from_micros(500);

thread_local! {
    /// Set while this thread runs a task of a loop: a loop started from inside a task runs
    /// inline on that thread instead of waiting for a team that is busy with its parent.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// One parallel loop, owned by the stack frame of [`Team::run`].
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    pending: AtomicUsize,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl Job {
    /// Runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: `f` outlives the job: `Team::run` returns only after every task finished
            // and no worker holds the job.
            let f = unsafe { &*self.f };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                self.panic
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(p);
            }
            self.pending.fetch_sub(1, Release);
        }
    }
}

struct Shared {
    /// Bumped for every loop and for every change of `awake`/`stop`.
    epoch: AtomicUsize,
    /// The loop in progress, or null.
    job: AtomicPtr<Job>,
    /// Workers between reading `job` and being done with it; a loop returns when this is zero.
    holding: AtomicUsize,
    /// True while a run owns the team: workers spin between loops instead of sleeping.
    awake: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    fn bump(&self) {
        self.epoch.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }

    fn worker(&self) {
        IN_TASK.with(|t| t.set(true));
        let mut seen = self.epoch.load(SeqCst);
        loop {
            let since = Instant::now();
            let mut spins = 0u32;
            loop {
                if self.stop.load(Relaxed) {
                    return;
                }
                let e = self.epoch.load(Acquire);
                if e != seen {
                    seen = e;
                    break;
                }
                spins = spins.wrapping_add(1);
                let spinning = self.awake.load(Relaxed)
                    && (!spins.is_multiple_of(64) || since.elapsed() < SPIN);
                if spinning {
                    std::hint::spin_loop();
                    continue;
                }
                let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.sleepers.fetch_add(1, SeqCst);
                while self.epoch.load(SeqCst) == seen && !self.stop.load(SeqCst) {
                    g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, SeqCst);
                drop(g);
                seen = self.epoch.load(SeqCst);
                break;
            }
            self.holding.fetch_add(1, SeqCst);
            let job = self.job.load(SeqCst);
            if !job.is_null() {
                // SAFETY: the publishing loop waits for `holding` to drop to zero after it
                // clears `job`, so a pointer read while holding stays valid until released.
                unsafe { (*job).work() };
            }
            self.holding.fetch_sub(1, SeqCst);
        }
    }
}

/// A fixed set of worker threads; the thread that calls [`Team::run`] works as one of them.
pub struct Team {
    shared: Arc<Shared>,
    threads: usize,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Team {
    fn start(threads: usize) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            holding: AtomicUsize::new(0),
            awake: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut team = Team {
            shared: shared.clone(),
            threads,
            handles: Vec::new(),
        };
        for i in 1..threads {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("aneforge-cpu-{i}"))
                .spawn(move || s.worker())?;
            team.handles.push(h);
        }
        Ok(team)
    }

    /// Runs `f(0..n)`, on the workers and this thread; returns when every call has returned.
    /// A panic in any task is raised here after the others finished.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n <= 1 || self.handles.is_empty() || IN_TASK.with(|t| t.get()) {
            (0..n).for_each(f);
            return;
        }
        // SAFETY: only the lifetime is erased; this frame outlives every use of `f` (below).
        let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        let job = Job {
            f,
            n,
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(n),
            panic: Mutex::new(None),
        };
        let s = &*self.shared;
        s.job.store(&job as *const Job as *mut Job, SeqCst);
        s.bump();
        IN_TASK.with(|t| t.set(true));
        // `work` catches panics, so this frame always gets past it
        job.work();
        IN_TASK.with(|t| t.set(false));
        while job.pending.load(Acquire) > 0 {
            std::hint::spin_loop();
        }
        // no worker may still read the job once this frame is gone
        s.job.store(std::ptr::null_mut(), SeqCst);
        while s.holding.load(SeqCst) > 0 {
            std::hint::spin_loop();
        }
        let panic = job.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = panic {
            resume_unwind(p);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.shared.bump();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Teams not owned by a run, by thread count.
static IDLE: Mutex<Vec<Team>> = Mutex::new(Vec::new());

/// A team owned by one run; workers spin until it is dropped, then sleep and the team returns to
/// the idle set.
pub struct Lease(Option<Team>);

impl std::ops::Deref for Lease {
    type Target = Team;
    fn deref(&self) -> &Team {
        self.0
            .as_ref()
            .expect("a lease holds its team until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.shared.awake.store(false, SeqCst);
            IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(t);
        }
    }
}

fn take(threads: usize) -> std::io::Result<Team> {
    let idle = {
        let mut teams = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        teams
            .iter()
            .position(|t| t.threads == threads)
            .map(|i| teams.swap_remove(i))
    };
    match idle {
        Some(t) => Ok(t),
        None => Team::start(threads),
    }
}

/// A team of `threads` threads (this one and `threads - 1` workers) for one run: an idle one if
/// there is one, otherwise a new one. Its workers are woken now, so they are spinning by the time
/// the run's first parallel loop starts.
pub fn acquire(threads: usize) -> std::io::Result<Lease> {
    let team = take(threads)?;
    team.shared.awake.store(true, SeqCst);
    team.shared.bump();
    Ok(Lease(Some(team)))
}

/// Starts a team of `threads` threads ahead of the first run, so that a failure to create threads
/// is reported when a plan is compiled.
pub fn prepare(threads: usize) -> std::io::Result<()> {
    let team = take(threads)?;
    IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(team);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: usize) -> Vec<AtomicUsize> {
        (0..n).map(|_| AtomicUsize::new(0)).collect()
    }

    #[test]
    fn every_index_runs_once_on_both_threads_and_loops_follow_each_other() {
        let lease = acquire(2).unwrap();
        let seen = counts(1000);
        let threads = Mutex::new(std::collections::HashSet::new());
        for round in 0..200 {
            let n = 1 + round % 7 * 150;
            lease.run(n, &|i| {
                seen[i].fetch_add(1, Relaxed);
                threads.lock().unwrap().insert(std::thread::current().id());
                // long enough that the worker, spinning, takes part
                for x in 0..2000 {
                    std::hint::black_box(x);
                }
            });
        }
        let expect: Vec<usize> = (0..1000)
            .map(|i| (0..200).filter(|r| i < 1 + r % 7 * 150).count())
            .collect();
        let got: Vec<usize> = seen.iter().map(|c| c.load(Relaxed)).collect();
        assert_eq!(got, expect);
        assert_eq!(threads.lock().unwrap().len(), 2, "the worker took no task");
    }

    #[test]
    fn a_loop_inside_a_task_runs_inline() {
        let lease = acquire(2).unwrap();
        let seen = counts(64);
        lease.run(8, &|i| {
            let me = std::thread::current().id();
            lease.run(8, &|j| {
                assert_eq!(std::thread::current().id(), me);
                seen[i * 8 + j].fetch_add(1, Relaxed);
            });
        });
        assert!(seen.iter().all(|c| c.load(Relaxed) == 1));
    }

    #[test]
    fn a_panicking_task_is_raised_after_the_loop_and_the_team_keeps_working() {
        let lease = acquire(2).unwrap();
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            lease.run(100, &|i| {
                if i == 37 {
                    panic!("task 37");
                }
                done.fetch_add(1, Relaxed);
            })
        }));
        let msg = r.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"task 37"));
        assert_eq!(done.load(Relaxed), 99);
        let seen = counts(100);
        lease.run(100, &|i| {
            seen[i].fetch_add(1, Relaxed);
        });
        assert!(seen.iter().all(|c| c.load(Relaxed) == 1));
    }

    #[test]
    fn runs_on_several_threads_at_once_each_get_their_own_team() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let lease = acquire(3).unwrap();
                        let seen = counts(300);
                        lease.run(300, &|i| {
                            seen[i].fetch_add(1, Relaxed);
                        });
                        assert!(seen.iter().all(|c| c.load(Relaxed) == 1));
                    }
                });
            }
        });
    }
}
