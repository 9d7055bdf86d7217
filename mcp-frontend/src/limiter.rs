//! Per-instance admission: calls per minute (sliding window) and jobs at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const WINDOW: Duration = Duration::from_secs(60);

/// Why a call was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("rate limit reached: this server allows {limit} run_python calls per minute; retry in {retry_after_s} s")]
    RateLimited { limit: u32, retry_after_s: u64 },
    #[error("too many jobs at once: this server runs at most {limit} run_python calls concurrently; wait for one to finish and retry")]
    TooManyJobs { limit: usize },
}

/// Admission control shared by every call of one server instance.
#[derive(Debug, Clone)]
pub struct Limiter {
    per_minute: u32,
    max_jobs: usize,
    calls: Arc<Mutex<VecDeque<Instant>>>,
    jobs: Arc<Semaphore>,
}

impl Limiter {
    /// `per_minute` calls in any 60 s window (0: unlimited) and `max_jobs` running at once.
    pub fn new(per_minute: u32, max_jobs: usize) -> Limiter {
        Limiter {
            per_minute,
            max_jobs,
            calls: Arc::new(Mutex::new(VecDeque::new())),
            jobs: Arc::new(Semaphore::new(max_jobs)),
        }
    }

    /// Admit one call now: a permit held for the job's duration, or why not.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, Refusal> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Result<OwnedSemaphorePermit, Refusal> {
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
        let permit =
            Arc::clone(&self.jobs)
                .try_acquire_owned()
                .map_err(|_| Refusal::TooManyJobs {
                    limit: self.max_jobs,
                })?;
        calls.push_back(now);
        Ok(permit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_slides() {
        let l = Limiter::new(2, 10);
        let t0 = Instant::now();
        let _a = l.admit_at(t0).unwrap();
        let _b = l.admit_at(t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(
            l.admit_at(t0 + Duration::from_secs(20)).unwrap_err(),
            Refusal::RateLimited {
                limit: 2,
                retry_after_s: 40
            }
        );
        // The first call leaves the window after 60 s.
        assert!(l.admit_at(t0 + Duration::from_secs(60)).is_ok());
    }

    #[test]
    fn concurrency_limit_releases_on_drop() {
        let l = Limiter::new(0, 1);
        let permit = l.admit().unwrap();
        assert_eq!(l.admit().unwrap_err(), Refusal::TooManyJobs { limit: 1 });
        drop(permit);
        assert!(l.admit().is_ok());
    }

    #[test]
    fn refused_calls_do_not_count() {
        let l = Limiter::new(1, 1);
        let t0 = Instant::now();
        let held = l.admit_at(t0).unwrap();
        drop(held);
        assert!(matches!(l.admit_at(t0), Err(Refusal::RateLimited { .. })));
    }
}
