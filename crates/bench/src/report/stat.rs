//! Median, minimum and maximum over repetitions: how the report gives a figure that every
//! repetition measured.

use serde::Serialize;

/// Median, minimum and maximum over repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stat {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Stat {
    /// The statistics of `values` (all zero when empty).
    pub fn of(values: &[f64]) -> Stat {
        if values.is_empty() {
            return Stat::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Stat {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_takes_median_min_max() {
        assert_eq!(
            Stat::of(&[3.0, 1.0, 2.0]),
            Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(Stat::of(&[]), Stat::default());
    }
}
