//! `rr` and `wrr` as sequences: the control plane writes one sequence of reals per service,
//! and each CPU of the data path walks it with its own cursor. No counter is shared between
//! CPUs, so the packet path takes no lock and bounces no cache line; over all CPUs the spread
//! is the sequence's, which is exactly proportional over every full walk.

/// The weighted sequence of `weights` (indexes into it), interleaved so that no real gets a
/// long run of turns (the "smooth" weighted round robin: each step, every real earns its
/// weight and the richest pays the total). Its length is `sum / gcd` of the nonzero weights,
/// capped at `max_len`, where a cut walk stays within one turn per real of proportional.
/// Weight-0 reals (quiesced) never appear; all zero gives an empty sequence.
pub fn wrr(weights: &[u32], max_len: usize) -> Vec<u32> {
    let g = weights
        .iter()
        .copied()
        .filter(|&w| w > 0)
        .fold(0u64, |g, w| gcd(g, w as u64));
    if g == 0 {
        return Vec::new();
    }
    let scaled: Vec<i64> = weights.iter().map(|&w| (w as u64 / g) as i64).collect();
    let total: i64 = scaled.iter().sum();
    let len = (total as usize).min(max_len.max(1));
    let mut current = vec![0i64; weights.len()];
    let mut seq = Vec::with_capacity(len);
    for _ in 0..len {
        let mut best = usize::MAX;
        for (i, &w) in scaled.iter().enumerate() {
            if w == 0 {
                continue;
            }
            current[i] += w;
            if best == usize::MAX || current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        seq.push(best as u32);
    }
    seq
}

/// Plain round robin: every real with a nonzero weight once, in order (IPVS's `rr` also skips
/// quiesced reals).
pub fn rr(weights: &[u32]) -> Vec<u32> {
    weights
        .iter()
        .enumerate()
        .filter(|(_, &w)| w > 0)
        .map(|(i, _)| i as u32)
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(seq: &[u32], n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for &i in seq {
            c[i as usize] += 1;
        }
        c
    }

    #[test]
    fn wrr_is_exactly_proportional_and_interleaved() {
        let seq = wrr(&[5, 1, 1], 1000);
        assert_eq!(seq.len(), 7);
        assert_eq!(counts(&seq, 3), vec![5, 1, 1]);
        // Smooth: the heavy real never takes more than its weight's worth in a row.
        assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0]);
        let seq = wrr(&[2, 4, 6, 8], 1000);
        assert_eq!(seq.len(), 10, "weights reduced by their gcd");
        assert_eq!(counts(&seq, 4), vec![1, 2, 3, 4]);
    }

    #[test]
    fn wrr_skips_weight_zero_and_is_empty_when_all_are() {
        let seq = wrr(&[3, 0, 1], 1000);
        assert_eq!(counts(&seq, 3), vec![3, 0, 1]);
        assert!(wrr(&[0, 0], 1000).is_empty());
        assert!(wrr(&[], 1000).is_empty());
    }

    #[test]
    fn a_capped_wrr_stays_proportional() {
        // 1 + 65535 + 2 needs 65538 steps; the cap cuts the walk.
        let w = [1u32, 65535, 2];
        let seq = wrr(&w, 4096);
        assert_eq!(seq.len(), 4096);
        let c = counts(&seq, 3);
        let total: u32 = w.iter().sum();
        for i in 0..3 {
            let ideal = 4096.0 * w[i] as f64 / total as f64;
            assert!(
                (c[i] as f64 - ideal).abs() <= 1.0,
                "{i}: {} vs {ideal}",
                c[i]
            );
        }
    }

    #[test]
    fn rr_takes_each_live_real_once() {
        assert_eq!(rr(&[1, 0, 7, 1]), vec![0, 2, 3]);
        assert!(rr(&[0]).is_empty());
    }
}
