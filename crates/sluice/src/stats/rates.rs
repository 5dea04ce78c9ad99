//! stats (beside ①–⑥): per-second rates of the global counters, from the last 61 one-second
//! samples.

use std::collections::VecDeque;
use std::time::Instant;

/// The windows rates are given over, in samples (one a second).
pub const WINDOWS: [usize; 3] = [1, 10, 60];
/// Enough samples for the widest window: its start and its end.
const KEEP: usize = 61;

#[derive(Default)]
pub(crate) struct RateRing {
    samples: VecDeque<(Instant, Vec<u64>)>,
}

impl RateRing {
    pub(crate) fn push(&mut self, at: Instant, values: Vec<u64>) {
        if self.samples.len() == KEEP {
            self.samples.pop_front();
        }
        self.samples.push_back((at, values));
    }

    /// Change per second of value `i` over the last `window` samples, or over all there are
    /// when fewer; 0 before two samples.
    pub(crate) fn rate(&self, i: usize, window: usize) -> f64 {
        let n = self.samples.len();
        if n < 2 || window == 0 {
            return 0.0;
        }
        let (Some((t1, new)), Some((t0, old))) = (self.samples.back(), self.samples.get(n - 1 - window.min(n - 1))) else {
            return 0.0;
        };
        let secs = t1.saturating_duration_since(*t0).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        let (Some(new), Some(old)) = (new.get(i), old.get(i)) else { return 0.0 };
        new.saturating_sub(*old) as f64 / secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_from_synthetic_samples() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut r = RateRing::default();
        assert_eq!(r.rate(0, 1), 0.0);
        r.push(at(0.0), vec![0, 5]);
        assert_eq!(r.rate(0, 1), 0.0, "one sample: no rate yet");
        r.push(at(1.0), vec![100, 5]);
        assert_eq!(r.rate(0, 1), 100.0);
        assert_eq!(r.rate(0, 10), 100.0, "fewer than 10: over what exists");
        assert_eq!(r.rate(1, 1), 0.0);
        // Counter 0 grows by 10·s² (value at second s); a late sample is divided by its real gap.
        for s in 2..=70u64 {
            r.push(at(s as f64), vec![10 * s * s, 5 + s]);
        }
        assert_eq!(r.rate(0, 1), (10.0 * (70.0 * 70.0 - 69.0 * 69.0)));
        assert_eq!(r.rate(0, 10), (10.0 * (70.0 * 70.0 - 60.0 * 60.0)) / 10.0);
        assert_eq!(r.rate(0, 60), (10.0 * (70.0 * 70.0 - 10.0 * 10.0)) / 60.0);
        assert_eq!(r.rate(1, 60), 1.0);
        r.push(at(72.0), vec![10 * 70 * 70 + 50, 75]);
        assert_eq!(r.rate(0, 1), 25.0, "a sample two seconds late");
        // A sample that does not move the clock forward gives no rate, never a division by 0.
        r.push(at(72.0), vec![0, 0]);
        assert_eq!(r.rate(0, 1), 0.0);
        assert_eq!(r.rate(9, 1), 0.0, "no such value");
    }
}
