//! A key's spend and budget, checked in the hold's own step (`opstate::budget`).

use super::*;
use opstate::{
    BudgetPeriod, Finish, HoldAsk, KeyBudget, Limited, Limits, Reservation, SlotAsk, SpendAsk,
    Windows,
};

const ORG: i64 = 42;
const KEY: i64 = 7;

fn ask(budget: Option<i64>, period: BudgetPeriod) -> SpendAsk {
    SpendAsk {
        key_id: KEY,
        budget: budget.map(|b| KeyBudget {
            limit: nano(b),
            period,
        }),
    }
}

async fn admit(s: &Stores, id: &str, amount: i64, spend: Option<SpendAsk>) -> opstate::Admitted {
    let asks = [SlotAsk {
        account: "a",
        max: 1_000,
    }];
    s.calls
        .admit(
            &asks,
            id,
            Duration::from_secs(30),
            Limits::default(),
            Some(HoldAsk {
                org: ORG,
                hold_id: id,
                amount: nano(amount),
                ttl_ms: 60_000,
                meta: "",
                spend,
            }),
        )
        .await
        .unwrap()
}

async fn finish(s: &Stores, id: &str, cost: i64) {
    s.calls
        .finish(Finish {
            slot: Some(("a", id)),
            gates: &[],
            hold: Some((ORG, id)),
            cost: nano(cost),
            event: None,
        })
        .await
        .unwrap();
}

async fn spend(s: &Stores) -> opstate::KeySpend {
    s.wallets
        .key_spend(ORG, &[KEY])
        .await
        .unwrap()
        .unwrap()
        .keys[0]
}

/// A hold that would take the key past its budget is refused with nothing taken; what settles
/// counts in the day and the month; a refusal reports what is left and when the period ends.
#[tokio::test]
async fn a_budget_refuses_the_hold_that_would_pass_it_and_takes_nothing() {
    for (name, s) in backends().await {
        s.wallets.load(ORG, nano(1_000_000)).await.unwrap();
        let budget = Some(ask(Some(1_000), BudgetPeriod::Day));
        let a = admit(&s, "b-1", 600, budget).await;
        assert_eq!(a.taken, Some(0), "{name}");
        assert_eq!(spend(&s).await.held, nano(600), "{name}");

        let b = admit(&s, "b-2", 500, budget).await;
        let Some(Limited::Budget(over)) = b.limited else {
            panic!("{name}: {b:?}")
        };
        assert_eq!(over.remaining, nano(400), "{name}");
        assert!(
            over.resets_in > Duration::ZERO && over.resets_in <= Duration::from_secs(86_400),
            "{name}: {over:?}"
        );
        assert_eq!((b.taken, b.reservation), (None, None), "{name}");
        assert_eq!(s.slots.in_use(&["a"]).await.unwrap(), [1], "{name}");
        let snap = s.wallets.snapshot(ORG).await.unwrap().unwrap();
        assert_eq!(
            snap.reserved,
            nano(600),
            "{name}: the refused hold took nothing"
        );

        // The first call costs 250: spent 250, nothing held.
        finish(&s, "b-1", 250).await;
        let now = spend(&s).await;
        assert_eq!(
            (now.day, now.month, now.held),
            (nano(250), nano(250), nano(0)),
            "{name}"
        );
        // 250 + 750 = the budget exactly: admitted; one nano more is not.
        assert_eq!(admit(&s, "b-3", 750, budget).await.taken, Some(0), "{name}");
        let c = admit(&s, "b-4", 1, budget).await;
        assert!(
            matches!(c.limited, Some(Limited::Budget(o)) if o.remaining == nano(0)),
            "{name}: {c:?}"
        );
        // A month budget of the same key counts the same charges.
        let month = Some(ask(Some(2_000), BudgetPeriod::Month));
        let d = admit(&s, "b-5", 1_001, month).await;
        assert!(
            matches!(d.limited, Some(Limited::Budget(o)) if o.remaining == nano(2_000 - 250 - 750)),
            "{name}: {d:?}"
        );
        assert_eq!(
            admit(&s, "b-6", 1_000, month).await.taken,
            Some(0),
            "{name}"
        );
        // Released holds count nothing; settled ones what they charged.
        assert!(s.wallets.release(ORG, "b-6").await.unwrap(), "{name}");
        finish(&s, "b-3", 700).await;
        let now = spend(&s).await;
        assert_eq!(
            (now.day, now.month, now.held),
            (nano(950), nano(950), nano(0)),
            "{name}"
        );
    }
}

/// Without a budget the key's spend is still counted (a budget set later starts exact); a call
/// without a key counts nowhere; the reconciler's settlement of an expired hold counts too; an
/// extended hold keeps its key.
#[tokio::test]
async fn spend_is_counted_on_every_path_that_closes_a_hold() {
    for (name, s) in backends().await {
        s.wallets.load(ORG, nano(1_000_000)).await.unwrap();
        let counted = Some(ask(None, BudgetPeriod::Day));
        assert_eq!(
            admit(&s, "t-1", 100, counted).await.taken,
            Some(0),
            "{name}"
        );
        assert_eq!(admit(&s, "t-2", 100, None).await.taken, Some(0), "{name}");
        assert_eq!(
            admit(&s, "t-3", 100, counted).await.taken,
            Some(0),
            "{name}"
        );
        assert_eq!(spend(&s).await.held, nano(200), "{name}");
        finish(&s, "t-1", 40).await;
        finish(&s, "t-2", 40).await;
        assert!(
            s.wallets.extend(ORG, "t-3", 60_000).await.unwrap(),
            "{name}"
        );
        assert_eq!(s.wallets.expired(ORG).await.unwrap(), vec![], "{name}");
        // The reconciler's path: a settlement through the wallet.
        let settled = s.wallets.settle(ORG, "t-3", nano(30)).await.unwrap();
        assert!(
            matches!(settled, opstate::Settlement::Settled { charged, .. } if charged == nano(30)),
            "{name}: {settled:?}"
        );
        let now = spend(&s).await;
        assert_eq!(
            (now.day, now.month, now.held),
            (nano(70), nano(70), nano(0)),
            "{name}"
        );
        // Another key of the organization is apart; an unknown organization is unknown.
        let both = s.wallets.key_spend(ORG, &[KEY, 8]).await.unwrap().unwrap();
        assert_eq!(both.keys[1], opstate::KeySpend::default(), "{name}");
        assert!(both.day_resets_in <= both.month_resets_in, "{name}");
        assert_eq!(
            s.wallets.key_spend(4_242, &[KEY]).await.unwrap(),
            None,
            "{name}"
        );
    }
}

/// After a loss the spend is restored from the ledger before the wallet is loaded; a window the
/// store already holds is not overwritten.
#[tokio::test]
async fn a_lost_spend_is_restored_and_a_kept_one_stays() {
    for (name, s) in backends().await {
        let now = Windows::at(chrono::Utc::now().timestamp_millis());
        s.wallets
            .load_key_spend(ORG, now, &[(KEY, nano(300), nano(900))])
            .await
            .unwrap();
        s.wallets.load(ORG, nano(1_000_000)).await.unwrap();
        let got = spend(&s).await;
        assert_eq!((got.day, got.month), (nano(300), nano(900)), "{name}");
        s.wallets
            .load_key_spend(ORG, now, &[(KEY, nano(1), nano(1))])
            .await
            .unwrap();
        let budget = Some(ask(Some(1_000), BudgetPeriod::Month));
        let a = admit(&s, "r-1", 101, budget).await;
        assert!(
            matches!(a.limited, Some(Limited::Budget(o)) if o.remaining == nano(100)),
            "{name}: the restored month counts: {a:?}"
        );
        assert_eq!(admit(&s, "r-2", 100, budget).await.taken, Some(0), "{name}");
    }
}

/// Many holds at once against one budget: exactly as many as fit are admitted (every backend's
/// check and hold are one step).
#[tokio::test]
async fn concurrent_holds_never_pass_the_budget() {
    for (name, s) in backends().await {
        s.wallets.load(ORG, nano(1_000_000)).await.unwrap();
        let budget = Some(ask(Some(1_000), BudgetPeriod::Day));
        let ids: Vec<String> = (0..40).map(|i| format!("c-{i}")).collect();
        let outcomes =
            futures_util::future::join_all(ids.iter().map(|id| admit(&s, id, 100, budget))).await;
        let held = outcomes
            .iter()
            .filter(|a| matches!(a.reservation, Some(Reservation::Held { .. })))
            .count();
        let refused = outcomes
            .iter()
            .filter(|a| matches!(a.limited, Some(Limited::Budget(_))))
            .count();
        assert_eq!((held, refused), (10, 30), "{name}");
        assert_eq!(spend(&s).await.held, nano(1_000), "{name}");
    }
}

/// The scripts' calendar (`hold.lua`'s `windows`) is the Rust one, at the edges that matter.
#[tokio::test]
async fn the_scripts_calendar_is_the_rust_calendar() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new(concat!(
        include_str!("../../src/lua/hold.lua"),
        "\nlocal d, m, de, me = windows(tonumber(ARGV[1]))\n",
        "return {string.format('%d', d), string.format('%d', m), string.format('%d', de), ",
        "string.format('%d', me)}\n"
    ));
    let mut at: Vec<i64> = vec![
        0,
        1,
        86_399_999,
        951_782_399_999, // 2000-02-28T23:59:59.999Z
        951_868_799_999, // 2000-02-29T23:59:59.999Z
        1_709_251_199_999,
        1_735_689_599_999, // 2024-12-31T23:59:59.999Z
        1_735_689_600_000,
        4_102_444_799_999, // 2099-12-31T23:59:59.999Z
    ];
    // Every month end of 2023–2026, and a millisecond either side.
    for month in (2023 * 12)..(2027 * 12) {
        let edge = Windows::month_start_day(month) * 86_400_000;
        at.extend([edge - 1, edge, edge + 1]);
    }
    for ms in at {
        let got: Vec<String> = script.arg(ms).invoke_async(&mut conn).await.unwrap();
        let w = Windows::at(ms);
        let want = [w.day, w.month, w.day_end_ms, w.month_end_ms].map(|v| v.to_string());
        assert_eq!(got, want, "at {ms}");
    }
}
