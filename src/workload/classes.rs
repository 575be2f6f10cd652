//! The class draw of a mix (pure): which class each task of a run's stream
//! belongs to, and that class's task.
//!
//! Task `i`'s class depends only on the run's seed and `i` (one uniform
//! draw against the cumulative shares), so a run's sequence of classes is
//! the same whatever its timing, on every target and on every re-run, like
//! the tasks themselves. Each class draws its tasks from its own stream (the run's
//! seed mixed with the class name): a class's prompts do not depend on the
//! weights of the others.

use std::sync::Arc;

use rand::RngExt;

use super::{Task, TaskGenerator, hash_str, mix, seeded_rng};
use crate::config::Workload;

/// Stream of the class draw, apart from every task's own.
const CLASS_DRAW_STREAM: u64 = 0x0043_4C41_5353; // "CLASS"

/// What a mix class changes in its calls beyond the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskClass {
    pub name: Arc<str>,
    /// The model id its calls send instead of the target's.
    pub model: Option<Arc<str>>,
    /// Sent as the body's `priority`.
    pub priority: Option<i64>,
}

/// One class of a [`ClassedGenerator`]: its tag, workload and share.
#[derive(Debug, Clone)]
pub struct ClassStream<'a> {
    pub class: TaskClass,
    pub workload: &'a Workload,
    /// Relative weight (> 0); normalised over the classes.
    pub weight: f64,
}

/// Task `i` of a mix: its class by the seeded weights, then that class's
/// task `i`.
#[derive(Debug, Clone)]
pub struct ClassedGenerator {
    classes: Vec<(Arc<TaskClass>, TaskGenerator)>,
    /// Cumulative shares, the last exactly 1.
    cumulative: Vec<f64>,
    seed: u64,
}

impl ClassedGenerator {
    /// `classes` must be non-empty with positive weights (the config checks
    /// it); a class of zero weight is never drawn.
    pub fn new(classes: &[ClassStream<'_>], seed: u64) -> Self {
        let total: f64 = classes.iter().map(|c| c.weight.max(0.0)).sum();
        let mut running = 0.0;
        let mut cumulative: Vec<f64> = classes
            .iter()
            .map(|c| {
                running += c.weight.max(0.0);
                if total > 0.0 { running / total } else { 1.0 }
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        ClassedGenerator {
            classes: classes
                .iter()
                .map(|c| {
                    let stream = mix(seed, hash_str(&c.class.name));
                    (
                        Arc::new(c.class.clone()),
                        TaskGenerator::new(c.workload, stream),
                    )
                })
                .collect(),
            cumulative,
            seed,
        }
    }

    /// See [`TaskGenerator::with_content_nonce`].
    pub fn with_content_nonce(mut self, nonce: u64) -> Self {
        self.classes = self
            .classes
            .into_iter()
            .map(|(class, generator)| (class, generator.with_content_nonce(nonce)))
            .collect();
        self
    }

    /// Index (in class order) of task `index`'s class.
    pub fn class_of(&self, index: u64) -> usize {
        let u: f64 = seeded_rng(mix(mix(self.seed, CLASS_DRAW_STREAM), index)).random();
        self.cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cumulative.len().saturating_sub(1))
    }

    pub fn task(&self, index: u64) -> Task {
        let (class, generator) = &self.classes[self.class_of(index)];
        Task {
            class: Some(Arc::clone(class)),
            ..generator.task(index)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Dist, Workload};

    fn workload(name: &str, input: f64) -> Workload {
        Workload::new(name, Dist::fixed(input), Dist::fixed(8.0))
    }

    fn class(name: &str) -> TaskClass {
        TaskClass {
            name: name.into(),
            model: None,
            priority: None,
        }
    }

    fn generator(seed: u64, weights: [f64; 2]) -> (Workload, Workload, ClassedGenerator) {
        let (short, long) = (workload("short", 10.0), workload("long", 1000.0));
        let g = ClassedGenerator::new(
            &[
                ClassStream {
                    class: class("short"),
                    workload: &short,
                    weight: weights[0],
                },
                ClassStream {
                    class: class("long"),
                    workload: &long,
                    weight: weights[1],
                },
            ],
            seed,
        );
        (short, long, g)
    }

    #[test]
    fn the_class_draw_is_seeded_and_keeps_the_shares() {
        let (_, _, a) = generator(7, [70.0, 30.0]);
        let (_, _, b) = generator(7, [70.0, 30.0]);
        let (_, _, other) = generator(8, [70.0, 30.0]);
        let draws = |g: &ClassedGenerator| (0..20_000).map(|i| g.class_of(i)).collect::<Vec<_>>();
        assert_eq!(draws(&a), draws(&b));
        assert_ne!(draws(&a), draws(&other));
        let long = draws(&a).iter().filter(|&&k| k == 1).count() as f64 / 20_000.0;
        assert!((long - 0.3).abs() < 0.015, "{long}");
        // The task follows its class: a long class's prompt is long.
        for i in 0..50 {
            let task = a.task(i);
            let name = task.class.as_ref().unwrap().name.to_string();
            let input = match &task.spec {
                crate::workload::TaskSpec::Single(call) => call.input_tokens,
                _ => unreachable!(),
            };
            assert_eq!(input, if name == "long" { 1000 } else { 10 });
            assert_eq!(a.task(i), b.task(i));
        }
    }

    #[test]
    fn the_draw_is_unbiased_seed_by_seed() {
        // Shares 7 : 2 : 3, as experiments/mix.kdl's what-if. Over 200 seeds
        // of 1,000 draws, each seed's chi-square (2 degrees of freedom) has
        // mean 2 (± 0.14 for the mean of 200), and the pooled shares hold
        // to about 0.1%.
        let (a, b, c) = (workload("a", 1.0), workload("b", 2.0), workload("c", 3.0));
        let weights = [7.0, 2.0, 3.0];
        let expected: Vec<f64> = weights.iter().map(|w| w / 12.0).collect();
        let (mut chi_sum, mut pooled) = (0.0, [0u64; 3]);
        for seed in 0..200u64 {
            let g = ClassedGenerator::new(
                &[
                    ClassStream {
                        class: class("a"),
                        workload: &a,
                        weight: weights[0],
                    },
                    ClassStream {
                        class: class("b"),
                        workload: &b,
                        weight: weights[1],
                    },
                    ClassStream {
                        class: class("c"),
                        workload: &c,
                        weight: weights[2],
                    },
                ],
                crate::hash::mix(0xC0FFEE, seed),
            );
            let mut counts = [0u64; 3];
            for i in 0..1000 {
                counts[g.class_of(i)] += 1;
            }
            chi_sum += counts
                .iter()
                .zip(&expected)
                .map(|(&n, p)| (n as f64 - 1000.0 * p).powi(2) / (1000.0 * p))
                .sum::<f64>();
            for (p, n) in pooled.iter_mut().zip(counts) {
                *p += n;
            }
        }
        let chi_mean = chi_sum / 200.0;
        assert!((1.5..2.5).contains(&chi_mean), "mean chi-square {chi_mean}");
        for (n, p) in pooled.iter().zip(&expected) {
            let share = *n as f64 / 200_000.0;
            assert!((share - p).abs() < 0.004, "{share} vs {p}");
        }
    }

    #[test]
    fn a_class_stream_does_not_depend_on_the_other_weights() {
        let (_, _, a) = generator(3, [50.0, 50.0]);
        let (_, _, b) = generator(3, [90.0, 10.0]);
        // Whenever both draw the long class for task i, it is the same task.
        let same = (0..500)
            .filter(|&i| a.class_of(i) == 1 && b.class_of(i) == 1)
            .all(|i| a.task(i) == b.task(i));
        assert!(same);
    }
}
