//! Generation workers: a pool of threads, each owning one [`Runner`] (one sequence's KV caches;
//! runners are not `Sync`), all sharing one [`Llm`], fed from one first-come first-served queue.
//! A worker streams text back through the job's channel and checks after every piece of text
//! whether the receiver is gone (the client disconnected), which cancels the generation.
//!
//! Sequences run side by side on different workers, not batched into one program step: each
//! worker's steps are single-sequence programs on the CPU engine's shared thread pool.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use aneforge_models::llm::{
    generate, FinishReason, GenerateOptions, Llm, LlmError, Runner, RunnerOptions,
};
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// What a worker sends back for one job, in order: text pieces, then exactly one of `Done` or
/// `Failed`.
#[derive(Debug)]
pub enum Event {
    Text(String),
    Done(Finished),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish: FinishReason,
}

pub struct Job {
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    pub events: mpsc::UnboundedSender<Event>,
}

struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    jobs: VecDeque<Job>,
    closed: bool,
}

pub struct Scheduler {
    queue: Arc<Queue>,
    capacity: usize,
    context: usize,
    workers: Vec<JoinHandle<()>>,
    active: Arc<AtomicUsize>,
}

impl Scheduler {
    /// Compiles one runner per worker (on its thread) and starts the workers; fails with the
    /// first runner's error. `capacity` bounds the jobs waiting for a worker.
    pub fn start(
        llm: Arc<Llm>,
        options: RunnerOptions,
        workers: usize,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Scheduler> {
        anyhow::ensure!(workers > 0, "at least one generation worker is needed");
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
        });
        let active = Arc::new(AtomicUsize::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut handles = Vec::new();
        for i in 0..workers {
            let (llm, options, queue, metrics, active, ready_tx) = (
                llm.clone(),
                options.clone(),
                queue.clone(),
                metrics.clone(),
                active.clone(),
                ready_tx.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("generate-{i}"))
                .spawn(move || match Runner::new(llm, options) {
                    Ok(runner) => {
                        let _ = ready_tx.send(Ok(runner.max_context()));
                        work(runner, &queue, &metrics, &active);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                })?;
            handles.push(handle);
        }
        drop(ready_tx);
        let mut scheduler = Scheduler {
            queue,
            capacity,
            context: 0,
            workers: handles,
            active,
        };
        for _ in 0..workers {
            match ready_rx.recv() {
                Ok(Ok(context)) => scheduler.context = context,
                Ok(Err(e)) => {
                    return Err(anyhow::Error::new(e).context("compiling the model's step programs"))
                }
                Err(_) => anyhow::bail!("a generation worker stopped while starting"),
            }
        }
        Ok(scheduler)
    }

    /// The largest prompt plus output a sequence can hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        self.queue.state.lock().map_or(0, |s| s.jobs.len())
    }

    /// Sequences being generated.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Queues `job`; gives it back when the queue is full or closed.
    #[allow(clippy::result_large_err)]
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        let Ok(mut state) = self.queue.state.lock() else {
            return Err(job);
        };
        if state.closed || state.jobs.len() >= self.capacity {
            return Err(job);
        }
        state.jobs.push_back(job);
        drop(state);
        self.queue.ready.notify_one();
        Ok(())
    }
}

impl Drop for Scheduler {
    /// Workers finish their current job, drop what is still queued (its receivers see the
    /// channel close) and exit.
    fn drop(&mut self) {
        if let Ok(mut state) = self.queue.state.lock() {
            state.closed = true;
            state.jobs.clear();
        }
        self.queue.ready.notify_all();
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

fn next_job(queue: &Queue) -> Option<Job> {
    let mut state = queue.state.lock().ok()?;
    loop {
        if state.closed {
            return None;
        }
        if let Some(job) = state.jobs.pop_front() {
            return Some(job);
        }
        state = queue.ready.wait(state).ok()?;
    }
}

fn work(mut runner: Runner, queue: &Queue, metrics: &Metrics, active: &AtomicUsize) {
    while let Some(job) = next_job(queue) {
        if job.events.is_closed() {
            metrics.cancelled();
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let events = &job.events;
        let mut on_text = |text: &str| events.send(Event::Text(text.to_string())).is_ok();
        // a panic in a step is a bug; it fails this request, not the worker
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            generate(&mut runner, &job.prompt, &job.options, &mut on_text)
        }))
        .unwrap_or_else(|_| Err(LlmError::Internal("the generation step panicked".into())));
        active.fetch_sub(1, Ordering::Relaxed);
        match result {
            Ok(g) => {
                metrics.generated(g.prompt_tokens, g.tokens.len());
                if g.finish == FinishReason::Cancelled {
                    metrics.cancelled();
                }
                let _ = job.events.send(Event::Done(Finished {
                    prompt_tokens: g.prompt_tokens,
                    completion_tokens: g.tokens.len(),
                    finish: g.finish,
                }));
            }
            Err(e) => {
                // a failed step may leave the caches in any state
                runner.reset();
                let _ = job.events.send(Event::Failed(e.to_string()));
            }
        }
    }
}
