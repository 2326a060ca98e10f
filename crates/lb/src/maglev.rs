//! Maglev hashing (Eisenbud et al., NSDI 2016) with proportional weights.
//!
//! Each real has a preference list over the table's `m` slots (a permutation, from two hashes
//! of its identity); the table is filled in turns, each real taking its next preferred slot
//! that is still free. With equal weights every real gets `m / n` slots, give or take one, and
//! removing a real moves little more than its own slots, because the others' preference lists
//! do not change.
//!
//! Weights: a real takes turns in proportion to its weight, by credit. Every round each real
//! earns its weight; a turn costs the largest weight. So over the fill a real of weight `w`
//! takes `w / w_max` turns per round, and its share of the table is `w / sum(w)` within one
//! slot per real. (Katran's first version gave weighted turns only in the first round, so
//! weights stopped mattering once the heaviest real was served.)

/// One real as Maglev sees it: a stable identity (its address bytes) and a weight.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub id: &'a [u8],
    pub weight: u32,
}

/// The lookup table: `m` entries, each an index into `entries`. Reals of weight 0 get no
/// entry; if every weight is 0 the table is empty. `m` must be prime (so every `skip` walks
/// the whole table); [`is_prime`] checks it.
pub fn table(entries: &[Entry], m: u32) -> Vec<u32> {
    assert!(is_prime(m), "Maglev table size {m} is not prime");
    let m64 = m as u64;
    let live: Vec<(usize, u64, u64, u64)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.weight > 0)
        .map(|(i, e)| {
            let offset = hash(e.id, 0x6d61_676c_6576_0001) % m64;
            let skip = hash(e.id, 0x6d61_676c_6576_0002) % (m64 - 1) + 1;
            (i, offset, skip, e.weight as u64)
        })
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    let max_weight = live.iter().map(|l| l.3).max().unwrap_or(1);
    const FREE: u32 = u32::MAX;
    let mut slots = vec![FREE; m as usize];
    let mut next = vec![0u64; live.len()];
    let mut credit = vec![0u64; live.len()];
    let mut filled = 0u64;
    while filled < m64 {
        for (k, &(index, offset, skip, weight)) in live.iter().enumerate() {
            credit[k] += weight;
            while credit[k] >= max_weight {
                credit[k] -= max_weight;
                // The real's next preferred slot that is still free.
                let slot = loop {
                    let c = ((offset + next[k] * skip) % m64) as usize;
                    next[k] += 1;
                    if slots[c] == FREE {
                        break c;
                    }
                };
                slots[slot] = index as u32;
                filled += 1;
                if filled == m64 {
                    return slots;
                }
            }
        }
    }
    slots
}

pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while (d as u64) * (d as u64) <= n as u64 {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// FNV-1a over the bytes with a seed, finished with a 64-bit mixer: stable across builds and
/// platforms (a real keeps its preference list when the daemon restarts or is upgraded).
fn hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finalizer: FNV alone leaves the low bits of short inputs correlated.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<[u8; 6]> {
        // Addresses as a service's reals would have them: 198.18.100.x port 6379.
        (0..n)
            .map(|i| {
                [
                    198,
                    18,
                    100 + (i / 250) as u8,
                    (i % 250) as u8 + 1,
                    0x18,
                    0xeb,
                ]
            })
            .collect()
    }

    fn counts(t: &[u32], n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for &i in t {
            c[i as usize] += 1;
        }
        c
    }

    #[test]
    fn equal_weights_balance_within_one_percent_at_m_100n() {
        for n in [2usize, 3, 10, 50, 148] {
            let m = (100 * n as u32..).find(|&m| is_prime(m)).unwrap();
            let ids = ids(n);
            let entries: Vec<Entry> = ids.iter().map(|id| Entry { id, weight: 1 }).collect();
            let t = table(&entries, m);
            assert_eq!(t.len(), m as usize);
            let ideal = m as f64 / n as f64;
            let worst = counts(&t, n)
                .iter()
                .map(|&c| (c as f64 - ideal).abs() / ideal)
                .fold(0.0, f64::max);
            println!("n={n} m={m}: worst deviation {:.3}%", worst * 100.0);
            assert!(worst <= 0.01, "n={n} m={m}: {worst}");
        }
    }

    #[test]
    fn weights_are_proportional_over_the_whole_table() {
        let ids = ids(4);
        for weights in [[1u32, 2, 3, 4], [1, 1, 1, 10], [100, 1, 50, 7]] {
            let entries: Vec<Entry> = ids
                .iter()
                .zip(weights)
                .map(|(id, weight)| Entry { id, weight })
                .collect();
            let m = 65537;
            let c = counts(&table(&entries, m), 4);
            let total: u32 = weights.iter().sum();
            for (i, &w) in weights.iter().enumerate() {
                let ideal = m as f64 * w as f64 / total as f64;
                let off = (c[i] as f64 - ideal).abs();
                println!(
                    "weights {weights:?}: real {i} has {} slots, ideal {ideal:.0}",
                    c[i]
                );
                // Credit rounding: at most one slot per real away from exact.
                assert!(
                    off <= 4.0,
                    "weights {weights:?}: real {i}: {} vs {ideal}",
                    c[i]
                );
            }
        }
    }

    #[test]
    fn removing_one_real_moves_about_its_share() {
        for n in [4usize, 10, 50] {
            let m = 65537;
            let ids = ids(n);
            let all: Vec<Entry> = ids.iter().map(|id| Entry { id, weight: 1 }).collect();
            let before = table(&all, m);
            // Remove the real in the middle; the others keep their indexes by mapping back.
            let gone = n / 2;
            let rest: Vec<Entry> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != gone)
                .map(|(_, e)| *e)
                .collect();
            let after: Vec<u32> = table(&rest, m)
                .into_iter()
                .map(|i| if (i as usize) < gone { i } else { i + 1 })
                .collect();
            let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            let own = before.iter().filter(|&&i| i as usize == gone).count();
            // Slots that moved although their real stayed: Maglev's disruption beyond the
            // minimum, which the paper measures as small.
            let extra = (moved - own) as f64 / m as f64;
            println!(
                "n={n}: removing one real moved {:.2}% of slots (its share {:.2}%, extra {:.2}%)",
                moved as f64 * 100.0 / m as f64,
                own as f64 * 100.0 / m as f64,
                extra * 100.0
            );
            assert!(after.iter().all(|&i| i as usize != gone));
            assert!(moved >= own);
            assert!(
                moved as f64 <= own as f64 * 1.5 + 0.01 * m as f64,
                "n={n}: moved {moved}, own {own}"
            );
        }
    }

    #[test]
    fn weight_zero_reals_get_nothing_and_all_zero_gives_an_empty_table() {
        let ids = ids(3);
        let e = [
            Entry {
                id: &ids[0],
                weight: 1,
            },
            Entry {
                id: &ids[1],
                weight: 0,
            },
            Entry {
                id: &ids[2],
                weight: 1,
            },
        ];
        let t = table(&e, 101);
        assert!(t.iter().all(|&i| i != 1));
        assert_eq!(counts(&t, 3)[0] + counts(&t, 3)[2], 101);
        let z = [Entry {
            id: &ids[0],
            weight: 0,
        }];
        assert!(table(&z, 101).is_empty());
    }

    #[test]
    fn the_table_depends_only_on_identities_and_weights() {
        let ids = ids(5);
        let e: Vec<Entry> = ids.iter().map(|id| Entry { id, weight: 2 }).collect();
        assert_eq!(table(&e, 65537), table(&e, 65537));
        // A known value pins the hash, so a change to it (which would move every flow on
        // upgrade) is a deliberate one.
        assert_eq!(hash(&ids[0], 0), PINNED);
        assert_ne!(hash(&ids[0], 1), hash(&ids[1], 1));
    }

    /// hash(198.18.100.1:6379, 0), as this implementation computes it.
    const PINNED: u64 = 17180076153247331988;

    #[test]
    fn primes() {
        assert!(is_prime(65537) && is_prime(2) && is_prime(101));
        assert!(!is_prime(1) && !is_prime(65536) && !is_prime(0) && !is_prime(100));
    }
}
