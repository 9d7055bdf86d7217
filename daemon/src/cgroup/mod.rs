//! TEMPORARY stub until the cgroup layer lands.
#![allow(dead_code, unused_variables)]
use std::os::fd::BorrowedFd;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
    Cpuacct,
}
pub struct Limits {
    pub memory_bytes: u64,
    pub pids: u32,
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: u64,
}
#[derive(Default)]
pub struct Stats {
    pub cpu_usage_ns: u64,
    pub peak_memory_bytes: u64,
    pub oom_kills: u64,
    pub pids_limit_hits: u64,
    pub memory_limit_hits: u64,
}
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("stub")]
    Stub,
}
pub struct Cgroups;
pub struct JobCgroup;
impl Cgroups {
    pub fn detect(subtree: &str) -> Result<Self, CgroupError> {
        Ok(Cgroups)
    }
    pub fn version(&self) -> Version {
        Version::V1
    }
    pub fn controllers(&self) -> Vec<Controller> {
        vec![
            Controller::Memory,
            Controller::Pids,
            Controller::Cpu,
            Controller::Cpuacct,
        ]
    }
    pub fn setup(&self) -> Result<(), CgroupError> {
        Ok(())
    }
    pub fn enter_home(&self) -> Result<(), CgroupError> {
        Ok(())
    }
    pub fn create_job(&self, name: &str, limits: &Limits) -> Result<JobCgroup, CgroupError> {
        Ok(JobCgroup)
    }
    pub fn reap_stale(&self) -> Result<usize, CgroupError> {
        Ok(0)
    }
    pub fn remove_subtree(&self) -> Result<(), CgroupError> {
        Ok(())
    }
}
impl JobCgroup {
    pub fn enter_self(&self) -> Result<(), CgroupError> {
        Ok(())
    }
    pub fn dir_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    pub fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        Ok(0)
    }
    pub fn stats(&self) -> Result<Stats, CgroupError> {
        Ok(Stats::default())
    }
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        Ok(())
    }
    pub fn remove(self) -> Result<(), CgroupError> {
        Ok(())
    }
}
