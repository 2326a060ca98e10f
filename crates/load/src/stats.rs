//! Medians over rounds, and the min/median/max of per-round ratios.

use serde::{Deserialize, Serialize};

/// Median, min and max of the per-round ratios of a row against row 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Ratio {
    pub fn of(mut v: Vec<f64>) -> Option<Ratio> {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        Some(Ratio {
            median: median_sorted(&v),
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median of the finite values, if any.
pub fn median(v: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(median_sorted(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([]), None);
        assert_eq!(median([f64::NAN, 1.0]), Some(1.0));
    }
}
