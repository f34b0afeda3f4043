//! Wallets (`Wallets`): holds, settlement, confirmation, adjustments, and a model-based property test.

use super::*;
use opstate::{Adjustment, Confirmation, ExpiredHold, Reservation, Settlement, WalletSnapshot};
use proptest::prelude::*;

#[tokio::test]
async fn an_open_hold_can_be_extended_past_its_deadline() {
    for (name, s) in backends().await {
        let w = &s.wallets;
        w.load(5, nano(1_000)).await.unwrap();
        w.reserve(5, "long", nano(100), 0, "{}").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            w.expired(5).await.unwrap().len(),
            1,
            "{name}: past its deadline"
        );
        assert!(w.extend(5, "long", 60_000).await.unwrap(), "{name}");
        assert!(w.expired(5).await.unwrap().is_empty(), "{name}: extended");
        let snap = w.snapshot(5).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(100), "{name}: the amount stays");
        assert!(
            !w.extend(5, "nope", 60_000).await.unwrap(),
            "{name}: no such hold"
        );
        assert!(
            !w.extend(6, "long", 60_000).await.unwrap(),
            "{name}: no such wallet"
        );
        assert_eq!(
            w.settle(5, "long", nano(40)).await.unwrap(),
            Settlement::Settled {
                charged: nano(40),
                excess: nano(0),
                below_holds: false,
            },
            "{name}: settled as usual"
        );
    }
}

/// A mirror loaded below its open holds: a settlement charges nothing (never a credit, the
/// cost is excess), the mirror says it is unreconciled, and the next load from the ledger
/// clears that.
#[tokio::test]
async fn a_mirror_below_its_holds_never_credits_and_waits_for_a_reload() {
    for (name, s) in backends().await {
        let w = &s.wallets;
        w.load(8, nano(1_000)).await.unwrap();
        for h in ["a", "b"] {
            w.reserve(8, h, nano(400), 60_000, "").await.unwrap();
        }
        // The ledger dropped to 300 while 800 was held.
        w.load(8, nano(300)).await.unwrap();
        let snap = w.snapshot(8).await.unwrap().unwrap();
        assert!(
            snap.unreconciled,
            "{name}: balance below reserved is not reported"
        );
        assert_eq!(
            w.settle(8, "a", nano(100)).await.unwrap(),
            Settlement::Settled {
                charged: nano(0),
                excess: nano(100),
                below_holds: true,
            },
            "{name}: 300 - 400 held elsewhere: nothing payable, nothing credited"
        );
        let snap = w.snapshot(8).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.reserved, snap.unreconciled),
            (nano(300), nano(400), true),
            "{name}"
        );
        // The other hold is payable now (300 with none other held): charged as usual, and
        // the mirror stays marked until a load.
        assert_eq!(
            w.settle(8, "b", nano(50)).await.unwrap(),
            Settlement::Settled {
                charged: nano(50),
                excess: nano(0),
                below_holds: false,
            },
            "{name}"
        );
        assert!(w.snapshot(8).await.unwrap().unwrap().unreconciled, "{name}");
        w.load(8, nano(250)).await.unwrap();
        let snap = w.snapshot(8).await.unwrap().unwrap();
        assert!(!snap.unreconciled, "{name}: a reload clears the mark");
        assert_eq!(
            (snap.balance, snap.reserved),
            (nano(250), nano(0)),
            "{name}"
        );
    }
}

#[tokio::test]
async fn missing_wallet_fails_closed() {
    for (name, s) in backends().await {
        let w = &s.wallets;
        assert_eq!(w.snapshot(7).await.unwrap(), None, "{name}");
        assert_eq!(
            w.reserve(7, "h", nano(1), 60_000, "").await.unwrap(),
            Reservation::Missing,
            "{name}"
        );
        assert_eq!(
            w.adjust(7, nano(5), "r").await.unwrap(),
            Adjustment::Missing,
            "{name}"
        );
        assert_eq!(
            w.settle(7, "h", nano(1)).await.unwrap(),
            Settlement::Missing,
            "{name}"
        );
        assert!(!w.release(7, "h").await.unwrap(), "{name}");
        assert!(w.expired(7).await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn reserve_settle_release_adjust() {
    for (name, s) in backends().await {
        let w = &s.wallets;
        // A balance over 1e14 nano-USD (100 000 USD) stays exact.
        let big = 123_456_789_012_345_i64;
        w.load(1, nano(big)).await.unwrap();
        assert_eq!(
            w.snapshot(1).await.unwrap(),
            Some(WalletSnapshot {
                balance: nano(big),
                reserved: nano(0),
                pending: nano(0),
                unreconciled: false,
            }),
            "{name}"
        );
        w.load(1, nano(1_000)).await.unwrap();
        assert_eq!(
            w.reserve(1, "a", nano(600), 60_000, "").await.unwrap(),
            Reservation::Held {
                available: nano(400)
            },
            "{name}"
        );
        assert_eq!(
            w.reserve(1, "a", nano(600), 60_000, "").await.unwrap(),
            Reservation::AlreadyHeld,
            "{name}"
        );
        assert_eq!(
            w.reserve(1, "b", nano(500), 60_000, "").await.unwrap(),
            Reservation::Insufficient {
                available: nano(400)
            },
            "{name}"
        );
        // A debit may not take held money.
        assert_eq!(
            w.adjust(1, nano(-500), "dec-1").await.unwrap(),
            Adjustment::Insufficient {
                available: nano(400)
            },
            "{name}"
        );
        assert_eq!(
            w.adjust(1, nano(-100), "dec-2").await.unwrap(),
            Adjustment::Applied { balance: nano(900) },
            "{name}"
        );
        assert_eq!(
            w.adjust(1, nano(-100), "dec-2").await.unwrap(),
            Adjustment::Duplicate,
            "{name}"
        );
        assert_eq!(
            w.settle(1, "a", nano(250)).await.unwrap(),
            Settlement::Settled {
                charged: nano(250),
                excess: nano(0),
                below_holds: false,
            },
            "{name}"
        );
        assert_eq!(
            w.settle(1, "a", nano(250)).await.unwrap(),
            Settlement::Unknown,
            "{name}: at most once"
        );
        assert!(!w.release(1, "a").await.unwrap(), "{name}");
        assert_eq!(
            w.snapshot(1).await.unwrap(),
            Some(WalletSnapshot {
                balance: nano(650),
                reserved: nano(0),
                pending: nano(250),
                unreconciled: false,
            }),
            "{name}"
        );
        // Excess over what the wallet can pay is returned, never overdrawn.
        w.reserve(1, "c", nano(100), 60_000, "").await.unwrap();
        w.reserve(1, "d", nano(500), 60_000, "").await.unwrap();
        assert_eq!(
            w.settle(1, "c", nano(300)).await.unwrap(),
            Settlement::Settled {
                charged: nano(150),
                excess: nano(150),
                below_holds: false,
            },
            "{name}"
        );
        assert_eq!(
            w.snapshot(1).await.unwrap(),
            Some(WalletSnapshot {
                balance: nano(500),
                reserved: nano(500),
                pending: nano(400),
                unreconciled: false,
            }),
            "{name}"
        );
        assert!(w.release(1, "d").await.unwrap(), "{name}");
        assert_eq!(
            w.snapshot(1).await.unwrap().unwrap().available(),
            Some(nano(500)),
            "{name}"
        );
        assert!(w.holding_orgs().await.unwrap().contains(&1), "{name}");
    }
}

#[tokio::test]
async fn expired_holds_are_listed_until_resolved() {
    for (name, s) in backends().await {
        let w = &s.wallets;
        w.load(2, nano(100)).await.unwrap();
        w.reserve(2, "old", nano(30), 0, "{\"key_id\":1}")
            .await
            .unwrap();
        w.reserve(2, "new", nano(30), 60_000, "").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            w.expired(2).await.unwrap(),
            vec![ExpiredHold {
                hold_id: "old".into(),
                amount: nano(30),
                meta: "{\"key_id\":1}".into()
            }],
            "{name}"
        );
        assert_eq!(
            w.settle(2, "old", nano(10)).await.unwrap(),
            Settlement::Settled {
                charged: nano(10),
                excess: nano(0),
                below_holds: false,
            },
            "{name}"
        );
        assert!(w.expired(2).await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn concurrent_reserves_never_overdraw() {
    for (name, s) in backends().await {
        let w = s.wallets.clone();
        w.load(3, nano(1_000)).await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..64 {
            let w = w.clone();
            tasks.spawn(async move {
                w.reserve(3, &format!("h{i}"), nano(30), 60_000, "")
                    .await
                    .unwrap()
            });
        }
        let mut held = 0;
        while let Some(r) = tasks.join_next().await {
            if matches!(r.unwrap(), Reservation::Held { .. }) {
                held += 1;
            }
        }
        assert_eq!(held, 33, "{name}: exactly floor(1000 / 30) holds");
        let snap = w.snapshot(3).await.unwrap().unwrap();
        assert_eq!(
            (snap.reserved, snap.available()),
            (nano(990), Some(nano(10))),
            "{name}"
        );
    }
}

/// What a wallet should do, in plain Rust.
#[derive(Default, Clone, Debug)]
struct Model {
    present: bool,
    balance: i64,
    holds: std::collections::BTreeMap<String, i64>,
    adjusted: std::collections::BTreeSet<String>,
    pending: i64,
    charged: std::collections::BTreeMap<String, i64>,
    confirmed: std::collections::BTreeSet<String>,
    /// Holds reserved with a zero deadline (expired at once).
    expiring: std::collections::BTreeSet<String>,
    /// A settlement found the mirror below its holds (cleared by a load).
    unreconciled: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Load(i64),
    Adjust(i64, u8),
    Reserve(u8, i64),
    ReserveExpired(u8, i64),
    Settle(u8, i64),
    Release(u8),
    Confirm(u8, i64),
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0i64..10_000).prop_map(Op::Load),
        (-3_000i64..3_000, 0u8..6).prop_map(|(d, r)| Op::Adjust(d, r)),
        (0u8..8, 0i64..4_000).prop_map(|(h, a)| Op::Reserve(h, a)),
        (0u8..8, 0i64..6_000).prop_map(|(h, a)| Op::Settle(h, a)),
        (0u8..8).prop_map(Op::Release),
        (0u8..8, 0i64..2_000).prop_map(|(h, a)| Op::Confirm(h, a)),
        (0u8..8, 0i64..2_000).prop_map(|(h, a)| Op::ReserveExpired(h, a)),
        Just(Op::Crash),
    ]
}

/// `raw`: the Redis store behind `stores`, whose keys a crash deletes (a flush).
async fn run(ops: Vec<Op>, stores: Stores, raw: Option<RedisStore>) {
    let mut s = stores;
    let mut m = Model::default();
    let org = 42;
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Load(b) => {
                s.wallets.load(org, nano(b)).await.unwrap();
                m.present = true;
                m.balance = b;
                m.pending = 0;
                m.charged.clear();
                m.unreconciled = false;
            }
            Op::ReserveExpired(h, a) => {
                let hold = format!("h{h}");
                let got = s.wallets.reserve(org, &hold, nano(a), 0, "").await.unwrap();
                let available = m.balance - m.holds.values().sum::<i64>();
                let want = if !m.present {
                    Reservation::Missing
                } else if m.holds.contains_key(&hold) {
                    Reservation::AlreadyHeld
                } else if a > available {
                    Reservation::Insufficient {
                        available: nano(available),
                    }
                } else {
                    m.holds.insert(hold.clone(), a);
                    m.expiring.insert(hold);
                    Reservation::Held {
                        available: nano(available - a),
                    }
                };
                assert_eq!(got, want, "step {i}");
            }
            Op::Confirm(h, amount) => {
                let hold = format!("h{h}");
                let amount = m.charged.get(&hold).copied().unwrap_or(amount);
                let got = s.wallets.confirm(org, &hold, nano(amount)).await.unwrap();
                let want = if !m.present {
                    Confirmation::Missing
                } else if m.charged.remove(&hold).is_some() {
                    m.pending -= amount;
                    m.confirmed.insert(hold);
                    Confirmation::Confirmed
                } else if !m.confirmed.insert(hold) {
                    Confirmation::Duplicate
                } else {
                    m.balance -= amount;
                    Confirmation::Applied
                };
                assert_eq!(got, want, "step {i}");
            }
            Op::Adjust(delta, r) => {
                let got = s
                    .wallets
                    .adjust(org, nano(delta), &format!("r{r}"))
                    .await
                    .unwrap();
                let reserved: i64 = m.holds.values().sum();
                let want = if !m.present {
                    Adjustment::Missing
                } else if m.adjusted.contains(&format!("r{r}")) {
                    Adjustment::Duplicate
                } else if delta < 0 && m.balance + delta - reserved < 0 {
                    Adjustment::Insufficient {
                        available: nano(m.balance - reserved),
                    }
                } else {
                    m.adjusted.insert(format!("r{r}"));
                    m.balance += delta;
                    Adjustment::Applied {
                        balance: nano(m.balance),
                    }
                };
                assert_eq!(got, want, "step {i}");
            }
            Op::Reserve(h, a) => {
                let got = s
                    .wallets
                    .reserve(org, &format!("h{h}"), nano(a), 60_000, "")
                    .await
                    .unwrap();
                let available = m.balance - m.holds.values().sum::<i64>();
                let want = if !m.present {
                    Reservation::Missing
                } else {
                    match m.holds.entry(format!("h{h}")) {
                        std::collections::btree_map::Entry::Occupied(_) => Reservation::AlreadyHeld,
                        std::collections::btree_map::Entry::Vacant(_) if a > available => {
                            Reservation::Insufficient {
                                available: nano(available),
                            }
                        }
                        std::collections::btree_map::Entry::Vacant(slot) => {
                            m.expiring.remove(slot.key());
                            slot.insert(a);
                            Reservation::Held {
                                available: nano(available - a),
                            }
                        }
                    }
                };
                assert_eq!(got, want, "step {i}");
            }
            Op::Settle(h, actual) => {
                let got = s
                    .wallets
                    .settle(org, &format!("h{h}"), nano(actual))
                    .await
                    .unwrap();
                let want = if !m.present {
                    Settlement::Missing
                } else if m.holds.remove(&format!("h{h}")).is_none() {
                    Settlement::Unknown
                } else {
                    // Never a credit: a mirror below its other holds pays nothing and is
                    // marked unreconciled until the next load.
                    let payable = m.balance - m.holds.values().sum::<i64>();
                    let below_holds = payable < 0;
                    m.unreconciled |= below_holds;
                    let charged = actual.min(payable.max(0));
                    m.balance -= charged;
                    if charged > 0 {
                        m.pending += charged;
                        m.charged.insert(format!("h{h}"), charged);
                    }
                    Settlement::Settled {
                        charged: nano(charged),
                        excess: nano(actual - charged),
                        below_holds,
                    }
                };
                if let Settlement::Settled { charged, .. } = got {
                    assert!(charged >= nano(0), "step {i}: a settlement never credits");
                }
                assert_eq!(got, want, "step {i}");
            }
            Op::Release(h) => {
                let got = s.wallets.release(org, &format!("h{h}")).await.unwrap();
                let want = m.present && m.holds.remove(&format!("h{h}")).is_some();
                assert_eq!(got, want, "step {i}");
            }
            Op::Crash => {
                match &raw {
                    None => s = Stores::memory(),
                    Some(r) => {
                        let mut conn = r.connection();
                        let keys = r.schema().wallet(org);
                        let _: () = redis::cmd("DEL")
                            .arg(&keys[0])
                            .arg(&keys[1])
                            .arg(&keys[2])
                            .arg(&keys[3])
                            .arg(&keys[4])
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                }
                m = Model::default();
            }
        }
        // Exactly the open zero-deadline holds are expired (each still resolvable once).
        let expired: std::collections::BTreeSet<String> = s
            .wallets
            .expired(org)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.hold_id)
            .collect();
        let want: std::collections::BTreeSet<String> = m
            .expiring
            .iter()
            .filter(|h| m.holds.contains_key(*h))
            .cloned()
            .collect();
        assert_eq!(expired, want, "step {i}: expired holds");
        let snap = s.wallets.snapshot(org).await.unwrap();
        let reserved: i64 = m.holds.values().sum();
        match snap {
            None => assert!(!m.present, "step {i}: a present wallet vanished"),
            Some(w) => {
                assert!(m.present, "step {i}");
                assert_eq!(
                    (w.balance, w.reserved, w.pending),
                    (nano(m.balance), nano(reserved), nano(m.pending)),
                    "step {i}"
                );
                assert_eq!(
                    w.unreconciled,
                    m.unreconciled || m.balance < reserved,
                    "step {i}: unreconciled"
                );
                assert!(
                    w.available() >= Some(nano(0)) || m.balance < reserved,
                    "step {i}: available < 0 only if loaded below holds"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn memory_wallet_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
            .block_on(run(ops, Stores::memory(), None));
    }

    #[test]
    fn redis_wallet_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let Some(url) = testkit::redis_url() else { return Ok(()) };
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let prefix = format!("prop:{}:", uuid::Uuid::new_v4().simple());
            let stores = Stores::redis(&url, &prefix).await.unwrap();
            let raw = RedisStore::connect(&url, &prefix).await.unwrap();
            run(ops, stores, Some(raw)).await;
        });
    }

    #[test]
    fn redis_cluster_wallet_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let Some(seeds) = testkit::redis_cluster() else { return Ok(()) };
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let prefix = format!("prop:{}:", uuid::Uuid::new_v4().simple());
            let stores = Stores::redis_cluster(&seeds, &prefix).await.unwrap();
            let raw = RedisStore::connect_cluster(&seeds, &prefix).await.unwrap();
            run(ops, stores, Some(raw)).await;
        });
    }
}

/// Redis only: confirmed charges live in their own pruned sorted set, never in the adjustment
/// set, and a reload removes the `confirmed:` members an earlier script version left there.
#[tokio::test]
async fn redis_confirmed_charges_stay_out_of_the_adjustment_set() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let prefix = format!("confirmed:{}:", uuid::Uuid::new_v4().simple());
    let raw = RedisStore::connect(&url, &prefix).await.unwrap();
    let s = Stores::redis(&url, &prefix).await.unwrap();
    let keys = raw.schema().wallet(7);
    let mut conn = raw.connection();
    s.wallets.load(7, nano(1_000)).await.unwrap();
    for h in ["a", "b"] {
        s.wallets
            .reserve(7, h, nano(100), 60_000, "")
            .await
            .unwrap();
        s.wallets.settle(7, h, nano(40)).await.unwrap();
        assert_eq!(
            s.wallets.confirm(7, h, nano(40)).await.unwrap(),
            opstate::Confirmation::Confirmed
        );
        assert_eq!(
            s.wallets.confirm(7, h, nano(40)).await.unwrap(),
            opstate::Confirmation::Duplicate
        );
    }
    let adjusted: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&keys[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(adjusted.is_empty(), "{adjusted:?}");
    let confirmed: u64 = redis::cmd("ZCARD")
        .arg(&keys[4])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(confirmed, 2);
    // A member written by wallet v1 is still recognised, and a reload clears it.
    let _: () = redis::cmd("SADD")
        .arg(&keys[2])
        .arg("confirmed:old")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        s.wallets.confirm(7, "old", nano(40)).await.unwrap(),
        opstate::Confirmation::Duplicate
    );
    s.wallets.load(7, nano(920)).await.unwrap();
    let adjusted: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&keys[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(adjusted.is_empty(), "{adjusted:?}");
    let snap = s.wallets.snapshot(7).await.unwrap().unwrap();
    assert_eq!((snap.balance, snap.pending), (nano(920), nano(0)));
}

/// Confirmations of a batch in one step: each as `confirm` would answer it.
#[tokio::test]
async fn confirm_many_answers_each_charge_like_confirm() {
    use opstate::Confirmation;
    for (name, s) in backends().await {
        s.wallets.load(42, nano(10_000)).await.unwrap();
        s.wallets
            .reserve(42, "h1", nano(100), 60_000, "")
            .await
            .unwrap();
        s.wallets.settle(42, "h1", nano(100)).await.unwrap();
        let got = s
            .wallets
            .confirm_many(&[
                (42, "h1", nano(100)),
                (42, "h1", nano(100)),
                (42, "h2", nano(50)),
                (99, "h3", nano(1)),
            ])
            .await
            .unwrap();
        assert_eq!(
            got,
            [
                Confirmation::Confirmed,
                Confirmation::Duplicate,
                Confirmation::Applied,
                Confirmation::Missing
            ],
            "{name}"
        );
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.pending),
            (nano(9_850), nano(0)),
            "{name}"
        );
        assert!(
            s.wallets.confirm_many(&[]).await.unwrap().is_empty(),
            "{name}"
        );
    }
}

/// A reload from a ledger that already holds charges booked but not yet confirmed (a settler
/// died between booking and confirming; `Wallets::load_booked`): their late confirmation is a
/// duplicate, not a second debit; any other charge is still taken.
#[tokio::test]
async fn a_reload_remembers_the_charges_the_ledger_already_has() {
    use opstate::Confirmation;
    for (name, s) in backends().await {
        let w = &s.wallets;
        w.load(42, nano(10_000)).await.unwrap();
        w.reserve(42, "booked", nano(3_000), 60_000, "")
            .await
            .unwrap();
        w.settle(42, "booked", nano(2_000)).await.unwrap();
        // The ledger booked it (8,000 left there); the settler died before confirming.
        w.load_booked(42, nano(8_000), &["booked".to_string()])
            .await
            .unwrap();
        let c = w.confirm(42, "booked", nano(2_000)).await.unwrap();
        assert_eq!(c, Confirmation::Duplicate, "{name}");
        let snap = w.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.pending),
            (nano(8_000), nano(0)),
            "{name}"
        );
        // A charge the loaded balance does not hold is taken at its confirmation.
        let c = w.confirm(42, "later", nano(500)).await.unwrap();
        assert_eq!(c, Confirmation::Applied, "{name}");
        let snap = w.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.balance, nano(7_500), "{name}");
    }
}
