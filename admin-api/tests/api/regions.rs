//! Two regions, one ledger (issue 48; docs/SCALE.md "More than one region"): a simulation of the
//! design's money rules (`admin_api::regions`) on two Redis deployments (two key prefixes on the
//! test's Redis, one store each; in memory without one) and the suite's database. An organization
//! funded with 10 USD spends from its home region A and, through an allowance, from region B,
//! concurrently; B's link to the ledger is cut in the middle of the run (no top-up, no booking)
//! and restored. The bound the design claims holds: the organization is never charged more than
//! it was funded, the cut region stops at what it held when the link went, and once the link is
//! back every mirror equals the ledger, which balances.

use super::*;
use admin_api::ledger::{self, AccountRef};
use admin_api::regions::{self, Region};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Mutex;

fn usd(n: f64) -> NanoUsd {
    NanoUsd::from_nanos((n * 1e9) as i64)
}

async fn region_store(name: &str) -> Stores {
    match testkit::redis_url() {
        Some(url) => Stores::redis(&url, &testkit::redis_prefix(name))
            .await
            .unwrap(),
        None => Stores::memory(),
    }
}

/// One region's calls: hold, settle at a cost up to the hold, then book — at once, or queued
/// while the region's link is cut. Returns what its mirror charged; stops after `calls` or 20
/// refusals in a row (the mirror ran out).
async fn spend(
    db: sea_orm::DatabaseConnection,
    stores: Stores,
    (name, home, org): (&'static str, bool, i64),
    calls: std::ops::Range<usize>,
    cut: Arc<AtomicBool>,
    queued: Arc<Mutex<Vec<(String, NanoUsd)>>>,
) -> NanoUsd {
    let region = Region {
        name,
        wallets: stores.wallets.as_ref(),
        home,
    };
    let (mut charged, mut refused) = (NanoUsd::ZERO, 0);
    for i in calls {
        let hold_id = format!("{name}-{i}");
        let hold = usd(0.05);
        match region
            .wallets
            .reserve(org, &hold_id, hold, 60_000, "")
            .await
            .unwrap()
        {
            opstate::Reservation::Held { .. } => refused = 0,
            _ => {
                refused += 1;
                if refused >= 20 {
                    break;
                }
                tokio::task::yield_now().await;
                continue;
            }
        }
        tokio::task::yield_now().await;
        // A call never costs more than its hold (the gateway's rule).
        let actual = usd(0.01 + 0.04 * ((i * 37 % 30) as f64 / 29.0));
        let opstate::Settlement::Settled { charged: c, .. } =
            region.wallets.settle(org, &hold_id, actual).await.unwrap()
        else {
            panic!("{name}: the hold {hold_id} was open");
        };
        charged = charged.checked_add(c).unwrap();
        if cut.load(Ordering::SeqCst) {
            queued.lock().await.push((hold_id, c));
        } else {
            regions::book(&db, &region, org, &hold_id, c).await.unwrap();
        }
    }
    charged
}

#[tokio::test]
async fn two_regions_never_overdraw_under_a_cut_link() {
    let home_stores = region_store("region-a").await;
    let api = Api::start_on("", home_stores.clone()).await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "regions", 10.0, 1.0).await;
    let db = api.state.db.clone();
    let b_stores = region_store("region-b").await;
    let home = Region {
        name: "a",
        wallets: home_stores.wallets.as_ref(),
        home: true,
    };
    let b = Region {
        name: "b",
        wallets: b_stores.wallets.as_ref(),
        home: false,
    };
    let funded = ledger::balance(&db, &AccountRef::org_wallet(org).code)
        .await
        .unwrap();
    assert_eq!(funded, usd(10.0));
    if home.wallets.snapshot(org).await.unwrap().is_none() {
        // The home mirror is the wallet's (a gateway loads it at the organization's first call).
        home.wallets.load(org, funded).await.unwrap();
    }
    regions::open(&db, &b, org).await.unwrap();
    // B's first allowance: 2 USD carved from the wallet.
    let carve = regions::carve(&db, &home, "b", org, usd(2.0), "carve:b:1")
        .await
        .unwrap()
        .expect("the home mirror can spare it");
    regions::credit(&b, &carve).await.unwrap();
    // The same carve again (a retry) moves nothing more.
    let again = regions::carve(&db, &home, "b", org, usd(2.0), "carve:b:1")
        .await
        .unwrap()
        .unwrap();
    regions::credit(&b, &again).await.unwrap();
    assert_eq!(
        b.wallets.snapshot(org).await.unwrap().unwrap().balance,
        usd(2.0)
    );
    assert_eq!(
        regions::balance(&db, &[&home, &b], org).await.unwrap(),
        usd(10.0),
        "one balance across regions"
    );

    // Both regions spend at once, the link up: B's charges are booked as they happen.
    let cut = Arc::new(AtomicBool::new(false));
    let queued = Arc::new(Mutex::new(Vec::new()));
    let run = |stores: &Stores, name: &'static str, home: bool, from: usize, calls: usize| {
        let (cut, queued) = match home {
            true => (
                Arc::new(AtomicBool::new(false)),
                Arc::new(Mutex::new(Vec::new())),
            ),
            false => (cut.clone(), queued.clone()),
        };
        spend(
            db.clone(),
            stores.clone(),
            (name, home, org),
            from..from + calls,
            cut,
            queued,
        )
    };
    let (mut spent_a, mut spent_b) = tokio::join!(
        run(&home_stores, "a", true, 0, 60),
        run(&b_stores, "b", false, 0, 45),
    );
    // The top-up rule: below 1 USD available, B carves 1 USD more (when the wallet can spare it).
    let available = b
        .wallets
        .snapshot(org)
        .await
        .unwrap()
        .unwrap()
        .available()
        .unwrap();
    assert!(
        available < usd(1.0),
        "B spent from its allowance: {available:?} left"
    );
    let c = regions::carve(&db, &home, "b", org, usd(1.0), "carve:b:2")
        .await
        .unwrap()
        .expect("the wallet can spare it");
    regions::credit(&b, &c).await.unwrap();
    // The link is cut: B can neither top up nor book; it spends what its mirror holds and is
    // then refused, while A spends the rest of the wallet.
    cut.store(true, Ordering::SeqCst);
    let at_cut = b.wallets.snapshot(org).await.unwrap().unwrap();
    let (a2, spent_cut) = tokio::join!(
        run(&home_stores, "a", true, 60, 400),
        run(&b_stores, "b", false, 45, 400),
    );
    spent_a = spent_a.checked_add(a2).unwrap();
    spent_b = spent_b.checked_add(spent_cut).unwrap();
    let queued = std::mem::take(&mut *queued.lock().await);
    assert!(!queued.is_empty(), "B spent while cut");
    assert!(
        spent_cut <= at_cut.available().unwrap(),
        "the cut region spent {spent_cut:?} of the {:?} it held",
        at_cut.available()
    );
    let left_b = b.wallets.snapshot(org).await.unwrap().unwrap();
    assert!(
        left_b.available().unwrap() < usd(0.05),
        "B ran out: {left_b:?}"
    );
    let left_a = home.wallets.snapshot(org).await.unwrap().unwrap();
    assert!(
        left_a.available().unwrap() < usd(0.05),
        "A ran out: {left_a:?}"
    );
    // The link is back: B's charges are booked from its allowance.
    for (hold_id, c) in &queued {
        regions::book(&db, &b, org, hold_id, *c).await.unwrap();
    }
    // No overdraft: everything charged was funded, and the ledger says so.
    let spent = spent_a.checked_add(spent_b).unwrap();
    assert!(spent <= funded, "charged {spent:?} of {funded:?}");
    let ledger_spend = ledger::balance(&db, &AccountRef::org_spend(org).code)
        .await
        .unwrap();
    assert_eq!(ledger_spend, spent);
    assert_eq!(ledger::imbalance(&db).await.unwrap(), NanoUsd::ZERO);
    let wallet = ledger::balance(&db, &AccountRef::org_wallet(org).code)
        .await
        .unwrap();
    let allowance = ledger::balance(&db, &regions::allowance(org, "b").code)
        .await
        .unwrap();
    assert!(!wallet.is_negative() && !allowance.is_negative());
    // Every mirror equals the ledger (nothing pending once booked), and the one balance is what
    // was funded less what was spent.
    let (ha, hb) = (
        home.wallets.snapshot(org).await.unwrap().unwrap(),
        b.wallets.snapshot(org).await.unwrap().unwrap(),
    );
    assert_eq!(
        (ha.balance, ha.pending, ha.reserved),
        (wallet, NanoUsd::ZERO, NanoUsd::ZERO)
    );
    assert_eq!(
        (hb.balance, hb.pending, hb.reserved),
        (allowance, NanoUsd::ZERO, NanoUsd::ZERO)
    );
    assert_eq!(
        regions::balance(&db, &[&home, &b], org).await.unwrap(),
        funded.checked_sub(spent).unwrap()
    );
    // An idle allowance goes back to the wallet (B's mirror first: never more than it holds).
    assert!(
        regions::sweep(
            &db,
            &b,
            &home,
            org,
            allowance.checked_add(usd(1.0)).unwrap(),
            "sweep:b:0"
        )
        .await
        .is_err()
    );
    regions::sweep(&db, &b, &home, org, allowance, "sweep:b:1")
        .await
        .unwrap();
    assert_eq!(
        home.wallets.snapshot(org).await.unwrap().unwrap().balance,
        wallet.checked_add(allowance).unwrap()
    );
    assert_eq!(
        regions::balance(&db, &[&home, &b], org).await.unwrap(),
        funded.checked_sub(spent).unwrap()
    );
}
