//! Partner pricing rules (SPEC "Pricing rules"), as pure functions over exact integers.
//!
//! - Retail floor of a group = max(agreement minimum multiplier, group wholesale multiplier).
//! - Funding a customer with X reserves X × wholesale / retail from partner funding, using the
//!   highest such ratio across the customer's groups, rounded up to the nano-USD.

use money::{NanoUsd, RateMultiplier};

/// The lowest retail multiplier a partner may set on a group.
pub fn retail_floor(
    agreement_minimum: RateMultiplier,
    wholesale: RateMultiplier,
) -> RateMultiplier {
    agreement_minimum.max(wholesale)
}

/// Partner funding reserved for an allocation `cap` over groups given as (wholesale, retail).
/// `None` on overflow. No groups reserve nothing.
pub fn reservation(cap: NanoUsd, groups: &[(RateMultiplier, RateMultiplier)]) -> Option<NanoUsd> {
    let mut best: Option<(i128, i128)> = None;
    for &(w, r) in groups {
        let (w, r) = (i128::from(w.ppm()), i128::from(r.ppm()));
        best = match best {
            Some((bw, br)) if bw * r >= w * br => Some((bw, br)),
            _ => Some((w, r)),
        };
    }
    let Some((w, r)) = best else {
        return Some(NanoUsd::ZERO);
    };
    let numerator = i128::from(cap.nanos()).checked_mul(w)?;
    NanoUsd::ceil_div(numerator, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(ppm: i64) -> RateMultiplier {
        RateMultiplier::from_ppm(ppm).unwrap()
    }

    #[test]
    fn highest_ratio_wins_and_rounds_up() {
        let groups = [(m(800_000), m(1_000_000)), (m(900_000), m(1_500_000))];
        // 100 USD × 0.8 / 1.0 = 80 USD.
        assert_eq!(
            reservation(NanoUsd::from_nanos(100_000_000_000), &groups),
            Some(NanoUsd::from_nanos(80_000_000_000))
        );
        // 1 nano × 1/3 rounds up to 1 nano.
        assert_eq!(
            reservation(NanoUsd::from_nanos(1), &[(m(1_000_000), m(3_000_000))]),
            Some(NanoUsd::from_nanos(1))
        );
        assert_eq!(
            reservation(NanoUsd::from_nanos(5), &[]),
            Some(NanoUsd::ZERO)
        );
        assert_eq!(reservation(NanoUsd::ZERO, &groups), Some(NanoUsd::ZERO));
    }

    #[test]
    fn floor_is_the_larger() {
        assert_eq!(retail_floor(m(1_100_000), m(900_000)), m(1_100_000));
        assert_eq!(retail_floor(m(800_000), m(900_000)), m(900_000));
    }
}
