//! `tune`: which settings of a sweep to measure, and in what order, instead
//! of all of them (pure state machine, like [`super::search`]). A coarse set
//! first (per varied name its first, middle and last value, crossed), then
//! the unmeasured neighbours of the best in the grid until none is left.
//! Racing on the verdicts' own ranges: while a setting is measured, its
//! Cr_open search stops as soon as a rate fails conclusively at or below
//! the best's conclusive lower bound ([`Tuner::prune_at_or_below`]), since
//! its Cr_open can then no longer beat the best.

use std::collections::BTreeMap;

/// Whether the objective is better high (Cr_open, tok/s) or low (cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Maximize,
    Minimize,
}

/// What one setting's card gave for the objective.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Outcome {
    /// The point value (`None`: not reached, e.g. no rate passed).
    pub value: Option<f64>,
    /// Conclusive bounds around it: Cr_open's highest conclusive pass and
    /// lowest conclusive failure. `None` where no run gave one.
    pub low: Option<f64>,
    pub high: Option<f64>,
}

/// The search over one sweep's settings, by index into its settings list.
#[derive(Debug, Clone)]
pub struct Tuner {
    /// Each varied name's number of values (the grid's axes, first
    /// slowest); empty for a `settings` list, which has no neighbours.
    shape: Vec<usize>,
    count: usize,
    goal: Goal,
    coarse: Vec<usize>,
    measured: BTreeMap<usize, Outcome>,
}

impl Tuner {
    pub fn new(shape: &[usize], count: usize, goal: Goal) -> Tuner {
        let grid = !shape.is_empty() && shape.iter().product::<usize>() == count;
        let shape = if grid { shape.to_vec() } else { Vec::new() };
        let coarse = if grid {
            coarse_set(&shape)
        } else {
            (0..count).collect()
        };
        Tuner {
            shape,
            count,
            goal,
            coarse,
            measured: BTreeMap::new(),
        }
    }

    /// The next setting to measure, or `None` when the search is done.
    pub fn next(&self) -> Option<usize> {
        if let Some(&i) = self.coarse.iter().find(|i| !self.measured.contains_key(i)) {
            return Some(i);
        }
        let best = self.best()?;
        self.neighbours(best)
            .into_iter()
            .find(|i| !self.measured.contains_key(i))
    }

    /// Record what setting `index` gave (pruned ones included: their bounds
    /// say why they cannot win).
    pub fn record(&mut self, index: usize, outcome: Outcome) {
        if index < self.count {
            self.measured.insert(index, outcome);
        }
    }

    /// The best setting so far by its point value.
    pub fn best(&self) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (&i, o) in &self.measured {
            let Some(v) = o.value else { continue };
            let better = match (best, self.goal) {
                (None, _) => true,
                (Some((_, b)), Goal::Maximize) => v > b,
                (Some((_, b)), Goal::Minimize) => v < b,
            };
            if better {
                best = Some((i, v));
            }
        }
        best.map(|(i, _)| i)
    }

    /// For a maximised objective with ranges (Cr_open): a setting whose
    /// search fails conclusively at or below this rate cannot beat the
    /// best, whose conclusive lower bound it is.
    pub fn prune_at_or_below(&self) -> Option<f64> {
        if self.goal != Goal::Maximize {
            return None;
        }
        let best = self.measured.get(&self.best()?)?;
        best.low.or(best.value)
    }

    /// The settings measured, in the order recorded by index.
    pub fn measured(&self) -> impl Iterator<Item = (usize, &Outcome)> {
        self.measured.iter().map(|(&i, o)| (i, o))
    }

    /// Grid neighbours of `index`: one step along one axis.
    fn neighbours(&self, index: usize) -> Vec<usize> {
        if self.shape.is_empty() {
            return Vec::new();
        }
        let coords = unravel(index, &self.shape);
        let mut out = Vec::new();
        for axis in 0..self.shape.len() {
            for step in [-1i64, 1] {
                let c = coords[axis] as i64 + step;
                if c >= 0 && (c as usize) < self.shape[axis] {
                    let mut n = coords.clone();
                    n[axis] = c as usize;
                    out.push(ravel(&n, &self.shape));
                }
            }
        }
        out
    }
}

/// Per axis the first, middle and last value, crossed: the middle first
/// (most often near the best, so that the others can be raced against it).
fn coarse_set(shape: &[usize]) -> Vec<usize> {
    let picks: Vec<Vec<usize>> = shape
        .iter()
        .map(|&n| {
            let mut p = vec![(n - 1) / 2, n - 1, 0];
            p.dedup();
            let mut seen = Vec::new();
            p.retain(|x| {
                let new = !seen.contains(x);
                seen.push(*x);
                new
            });
            p
        })
        .collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new()];
    for axis in &picks {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                axis.iter().map(move |&c| {
                    let mut v = prefix.clone();
                    v.push(c);
                    v
                })
            })
            .collect();
    }
    out.iter().map(|c| ravel(c, shape)).collect()
}

fn unravel(mut index: usize, shape: &[usize]) -> Vec<usize> {
    let mut coords = vec![0; shape.len()];
    for axis in (0..shape.len()).rev() {
        coords[axis] = index % shape[axis];
        index /= shape[axis];
    }
    coords
}

fn ravel(coords: &[usize], shape: &[usize]) -> usize {
    coords
        .iter()
        .zip(shape)
        .fold(0, |acc, (&c, &n)| acc * n + c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drive the tuner with a known truth (Cr_open per setting, ranges of
    /// ±10%), as the runner does, pruning a setting whose truth lies below
    /// the best's lower bound the moment a rate would fail there.
    fn tune(shape: &[usize], truth: &[f64]) -> (Option<usize>, usize, usize) {
        let mut tuner = Tuner::new(shape, truth.len(), Goal::Maximize);
        let (mut cards, mut pruned) = (0, 0);
        while let Some(i) = tuner.next() {
            cards += 1;
            let t = truth[i];
            let outcome = match tuner.prune_at_or_below() {
                // A failure at the threshold: stopped there.
                Some(threshold) if t * 1.1 <= threshold => {
                    pruned += 1;
                    Outcome {
                        value: None,
                        low: None,
                        high: Some(t * 1.1),
                    }
                }
                _ => Outcome {
                    value: Some(t),
                    low: Some(t * 0.95),
                    high: Some(t * 1.1),
                },
            };
            tuner.record(i, outcome);
        }
        (tuner.best(), cards, pruned)
    }

    #[test]
    fn a_unimodal_grid_is_solved_with_fewer_cards_than_the_grid() {
        // max-num-seqs 2 4 8 16 32 64 128: the best at 32.
        let truth = [2.0, 4.0, 7.0, 11.0, 14.0, 12.0, 9.0];
        let (best, cards, _) = tune(&[7], &truth);
        assert_eq!(best, Some(4));
        assert!(cards < truth.len(), "{cards} cards");
    }

    #[test]
    fn the_best_of_a_crossed_grid_is_found_as_brute_force_finds_it() {
        // 3 × 4 grid with a single peak; brute force is the argmax.
        let shape = [3, 4];
        let truth: Vec<f64> = (0..12)
            .map(|i| {
                let (a, b) = (i / 4, i % 4);
                10.0 - (a as f64 - 2.0).powi(2) - (b as f64 - 1.0).powi(2)
            })
            .collect();
        let brute = (0..12)
            .max_by(|&x, &y| truth[x].total_cmp(&truth[y]))
            .unwrap();
        let (best, cards, _) = tune(&shape, &truth);
        assert_eq!(best, Some(brute));
        assert!(cards < 12, "{cards} cards");
    }

    #[test]
    fn racing_prunes_settings_that_cannot_win() {
        // A list (no grid): every setting is measured, but the clearly
        // worse ones stop as soon as a rate fails below the best.
        let truth = [20.0, 3.0, 4.0, 19.0];
        let (best, cards, pruned) = tune(&[], &truth);
        assert_eq!((best, cards), (Some(0), 4));
        assert_eq!(pruned, 2, "3 and 4 req/s lose to 20 req/s");
    }

    #[test]
    fn cost_is_minimised_and_never_raced() {
        let mut tuner = Tuner::new(&[3], 3, Goal::Minimize);
        assert_eq!(tuner.next(), Some(1));
        tuner.record(
            1,
            Outcome {
                value: Some(2.0),
                ..Outcome::default()
            },
        );
        assert_eq!(tuner.prune_at_or_below(), None);
        tuner.record(
            2,
            Outcome {
                value: Some(1.5),
                ..Outcome::default()
            },
        );
        tuner.record(
            0,
            Outcome {
                value: Some(3.0),
                ..Outcome::default()
            },
        );
        assert_eq!((tuner.best(), tuner.next()), (Some(2), None));
    }

    #[test]
    fn grid_indices_round_trip() {
        let shape = [3, 4, 2];
        for i in 0..24 {
            assert_eq!(ravel(&unravel(i, &shape), &shape), i);
        }
        assert_eq!(coarse_set(&[3]), vec![1, 2, 0]);
        assert_eq!(coarse_set(&[1]), vec![0]);
        assert_eq!(coarse_set(&[2]).len(), 2);
    }
}
