//! Per-instance admission: calls per minute (sliding window), jobs at once, and a bounded
//! queue for calls that find every job slot taken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const WINDOW: Duration = Duration::from_secs(60);

/// Why a call was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("rate limit reached: this server allows {limit} run_python calls per minute; retry in {retry_after_s} s")]
    RateLimited { limit: u32, retry_after_s: u64 },
    #[error("too many calls at once: this server runs {running} run_python calls at a time and {queued} more are waiting, which is all its queue holds; retry in {retry_after_s} s")]
    QueueFull {
        running: usize,
        queued: usize,
        retry_after_s: u64,
    },
    #[error("waited {waited_s} s in the queue without a free job slot ({running} run_python calls at a time); retry in {retry_after_s} s")]
    QueueTimeout {
        waited_s: u64,
        running: usize,
        retry_after_s: u64,
    },
}

/// Admission control shared by every call of one server instance.
#[derive(Debug, Clone)]
pub struct Limiter {
    per_minute: u32,
    max_jobs: usize,
    max_queued: usize,
    calls: Arc<Mutex<VecDeque<Instant>>>,
    jobs: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
}

/// An admitted call: running now, or waiting in the queue.
#[derive(Debug)]
pub enum Admission {
    Run(OwnedSemaphorePermit),
    Queued(Ticket),
}

/// A place in the queue; leaving it (drop) frees the place.
#[derive(Debug)]
pub struct Ticket {
    jobs: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
    /// Calls ahead of this one when it joined (0: next).
    pub position: usize,
}

impl Ticket {
    /// Wait for a job slot (first come, first served).
    pub async fn wait(self) -> OwnedSemaphorePermit {
        Arc::clone(&self.jobs)
            .acquire_owned()
            .await
            .expect("the job semaphore is never closed")
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limiter {
    /// `per_minute` calls in any 60 s window (0: unlimited), `max_jobs` running at once and
    /// `max_queued` waiting for one of them.
    pub fn new(per_minute: u32, max_jobs: usize, max_queued: usize) -> Limiter {
        Limiter {
            per_minute,
            max_jobs,
            max_queued,
            calls: Arc::new(Mutex::new(VecDeque::new())),
            jobs: Arc::new(Semaphore::new(max_jobs)),
            queued: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn max_jobs(&self) -> usize {
        self.max_jobs
    }

    /// Admit one call now: a job slot, a place in the queue, or why not. A refused call
    /// does not count against the rate. `retry_after_s` goes into a full queue's refusal.
    pub fn admit(&self, retry_after_s: u64) -> Result<Admission, Refusal> {
        self.admit_at(Instant::now(), retry_after_s)
    }

    fn admit_at(&self, now: Instant, retry_after_s: u64) -> Result<Admission, Refusal> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        while calls
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= WINDOW)
        {
            calls.pop_front();
        }
        if self.per_minute > 0 && calls.len() >= self.per_minute as usize {
            let oldest = *calls.front().expect("non-empty when over the limit");
            let wait = WINDOW.saturating_sub(now.saturating_duration_since(oldest));
            return Err(Refusal::RateLimited {
                limit: self.per_minute,
                retry_after_s: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            });
        }
        // Nobody may jump the queue: a free slot goes to a waiting call first.
        let admission = match self.queued.load(Ordering::SeqCst) {
            0 => Arc::clone(&self.jobs).try_acquire_owned().ok(),
            _ => None,
        };
        let admission = match admission {
            Some(permit) => Admission::Run(permit),
            None => {
                let position = self
                    .queued
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                        (q < self.max_queued).then_some(q + 1)
                    })
                    .map_err(|queued| Refusal::QueueFull {
                        running: self.max_jobs,
                        queued,
                        retry_after_s,
                    })?;
                Admission::Queued(Ticket {
                    jobs: Arc::clone(&self.jobs),
                    queued: Arc::clone(&self.queued),
                    position,
                })
            }
        };
        calls.push_back(now);
        Ok(admission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(a: Admission) -> OwnedSemaphorePermit {
        match a {
            Admission::Run(p) => p,
            Admission::Queued(_) => panic!("queued"),
        }
    }

    #[test]
    fn rate_limit_slides() {
        let l = Limiter::new(2, 10, 0);
        let t0 = Instant::now();
        let _a = l.admit_at(t0, 1).unwrap();
        let _b = l.admit_at(t0 + Duration::from_secs(10), 1).unwrap();
        assert_eq!(
            l.admit_at(t0 + Duration::from_secs(20), 1).unwrap_err(),
            Refusal::RateLimited {
                limit: 2,
                retry_after_s: 40
            }
        );
        // The first call leaves the window after 60 s.
        assert!(l.admit_at(t0 + Duration::from_secs(60), 1).is_ok());
    }

    #[tokio::test]
    async fn calls_past_the_slots_queue_in_order_and_past_the_queue_are_refused() {
        let l = Limiter::new(0, 1, 2);
        let running = run(l.admit(30).unwrap());
        let Admission::Queued(first) = l.admit(30).unwrap() else {
            panic!("the second call queues")
        };
        let Admission::Queued(second) = l.admit(30).unwrap() else {
            panic!("the third call queues")
        };
        assert_eq!((first.position, second.position), (0, 1));
        let refusal = l.admit(30).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::QueueFull {
                running: 1,
                queued: 2,
                retry_after_s: 30
            }
        );
        assert!(refusal.to_string().contains("retry in 30 s"), "{refusal}");
        // A slot that frees goes to the queue, not to a newcomer.
        drop(running);
        assert!(matches!(l.admit(30), Err(Refusal::QueueFull { .. })));
        let permit = first.wait().await;
        drop(permit);
        let _permit = second.wait().await;
        // The queue is empty again: a newcomer waits for the running call.
        assert!(matches!(l.admit(30), Ok(Admission::Queued(_))));
    }

    #[test]
    fn refused_calls_do_not_count() {
        let l = Limiter::new(1, 1, 0);
        let t0 = Instant::now();
        let held = l.admit_at(t0, 1).unwrap();
        drop(held);
        assert!(matches!(
            l.admit_at(t0, 1),
            Err(Refusal::RateLimited { .. })
        ));
        let l = Limiter::new(2, 1, 0);
        let held = run(l.admit_at(t0, 1).unwrap());
        assert!(matches!(l.admit_at(t0, 1), Err(Refusal::QueueFull { .. })));
        drop(held);
        assert!(
            l.admit_at(t0, 1).is_ok(),
            "the refused call did not use the rate"
        );
    }
}
