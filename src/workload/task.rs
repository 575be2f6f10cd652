//! Tasks (single calls, conversations, agent loops) from a workload and seed.

use crate::config::Workload;

use super::Task;

/// Produces task `i` of a stream; task `i` depends only on (workload, seed, i).
#[derive(Debug, Clone)]
pub struct TaskGenerator {
    workload: Workload,
    seed: u64,
}

impl TaskGenerator {
    pub fn new(workload: &Workload, seed: u64) -> Self {
        TaskGenerator { workload: workload.clone(), seed }
    }

    pub fn task(&self, index: u64) -> Task {
        let _ = (&self.workload, self.seed, index);
        todo!("workload helper")
    }
}
