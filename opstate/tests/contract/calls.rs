//! A call's store steps (`Calls`): admission (slot, hold and limits together or nothing) and finish.

use super::*;

/// Admission in one step: cooling accounts are skipped and reported, the slot goes to the first
/// open account with room, and the hold opens with it; a refused hold leaves no slot taken; no
/// room anywhere asks nothing of the wallet.
#[tokio::test]
async fn admission_takes_slot_and_hold_together_or_neither() {
    use opstate::{CoolCause, HoldAsk, Limits, Reservation, SlotAsk};
    for (name, s) in backends().await {
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(1_000)).await.unwrap();
        s.cooldowns
            .cool("cold", Duration::from_secs(20), CoolCause::UsageLimit)
            .await
            .unwrap();
        assert!(s.slots.acquire("full", "other", 1, ttl).await.unwrap());
        let asks = [
            SlotAsk {
                account: "cold",
                max: 5,
            },
            SlotAsk {
                account: "full",
                max: 1,
            },
            SlotAsk {
                account: "open",
                max: 2,
            },
        ];
        let hold = |id: &'static str, amount: i64| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(amount),
            ttl_ms: 60_000,
            meta: "{\"route\":\"chat\"}",
            spend: None,
        };
        let a = s
            .calls
            .admit(
                &asks,
                "call-1",
                ttl,
                Limits::default(),
                Some(hold("call-1", 600)),
            )
            .await
            .unwrap();
        assert_eq!(a.taken, Some(2), "{name}");
        assert_eq!(
            a.reservation,
            Some(Reservation::Held {
                available: nano(400)
            }),
            "{name}"
        );
        let cold = a.cooldowns[0].expect("cold account reported");
        assert_eq!(cold.cause, CoolCause::UsageLimit, "{name}");
        assert!(cold.left > Duration::from_secs(15), "{name}: {cold:?}");
        assert_eq!(a.cooldowns[1..], [None, None], "{name}");
        assert_eq!(
            s.slots.in_use(&["open", "full", "cold"]).await.unwrap(),
            [1, 1, 0],
            "{name}"
        );
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(600), "{name}");

        // Not enough balance: refused, and the slot it would have taken is free again.
        let b = s
            .calls
            .admit(
                &asks,
                "call-2",
                ttl,
                Limits::default(),
                Some(hold("call-2", 500)),
            )
            .await
            .unwrap();
        assert_eq!(b.taken, None, "{name}");
        assert_eq!(
            b.reservation,
            Some(Reservation::Insufficient {
                available: nano(400)
            }),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [1], "{name}");

        // Every open account full: nothing asked of the wallet.
        let c = s
            .calls
            .admit(
                &asks[..2],
                "call-3",
                ttl,
                Limits::default(),
                Some(hold("call-3", 1)),
            )
            .await
            .unwrap();
        assert_eq!((c.taken, c.reservation), (None, None), "{name}");
        assert_eq!(
            s.wallets.snapshot(42).await.unwrap().unwrap().reserved,
            nano(600),
            "{name}"
        );

        // No mirror: fail closed, no slot kept.
        let d = s
            .calls
            .admit(
                &asks,
                "call-4",
                ttl,
                Limits::default(),
                Some(HoldAsk {
                    org: 4242,
                    ..hold("call-4", 1)
                }),
            )
            .await
            .unwrap();
        assert_eq!(
            (d.taken, d.reservation),
            (None, Some(Reservation::Missing)),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [1], "{name}");

        // Without a hold (a token count): the slot alone.
        let e = s
            .calls
            .admit(&asks, "call-5", ttl, Limits::default(), None)
            .await
            .unwrap();
        assert_eq!((e.taken, e.reservation), (Some(2), None), "{name}");
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [2], "{name}");
    }
}

/// The end of a call in one step: slot back, hold settled (at most what the wallet can pay), the
/// event appended with what was charged; a second end finds the hold resolved, charges nothing
/// and carries the cost as excess.
#[tokio::test]
async fn finish_releases_settles_and_appends_what_was_charged() {
    use opstate::{Finish, HoldAsk, Limits, Settlement, SlotAsk};
    for (name, s) in backends().await {
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(10_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "a",
            max: 4,
        }];
        let hold = HoldAsk {
            org: 42,
            hold_id: "req-1",
            amount: nano(9_000),
            ttl_ms: 60_000,
            meta: "",
            spend: None,
        };
        let admitted = s
            .calls
            .admit(&asks, "req-1", ttl, Limits::default(), Some(hold))
            .await
            .unwrap();
        assert_eq!(admitted.taken, Some(0), "{name}");
        let mut e = event(1);
        e.charged_nanos = nano(0);
        let end = Finish {
            slot: Some(("a", "req-1")),
            gates: &[],
            hold: Some((42, "req-1")),
            cost: nano(4_500),
            event: Some(&e),
        };
        let settled = s.calls.finish(end).await.unwrap();
        assert_eq!(
            settled,
            Some(Settlement::Settled {
                charged: nano(4_500),
                excess: nano(0),
                below_holds: false,
            }),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["a"]).await.unwrap(), [0], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.reserved),
            (nano(5_500), nano(0)),
            "{name}"
        );
        // Again (a retry after a lost answer): nothing charged, the event again with excess.
        let again = s.calls.finish(end).await.unwrap();
        assert_eq!(again, Some(Settlement::Unknown), "{name}");
        let got = s
            .usage
            .claim("c", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 2, "{name}");
        assert_eq!(
            (got[0].event.charged_nanos, got[0].event.excess_nanos),
            (nano(4_500), nano(0)),
            "{name}"
        );
        assert_eq!(
            (got[1].event.charged_nanos, got[1].event.excess_nanos),
            (nano(0), nano(4_500)),
            "{name}"
        );
        assert_eq!(got[0].event.request_id, "req-1", "{name}");
        // An event without a hold is appended as it is; nothing else moves.
        let plain = event(2);
        let none = Finish {
            slot: None,
            gates: &[],
            hold: None,
            cost: nano(0),
            event: Some(&plain),
        };
        assert_eq!(s.calls.finish(none).await.unwrap(), None, "{name}");
        let got = s
            .usage
            .claim("c", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0].event, plain, "{name}");
        assert_eq!(
            s.wallets.snapshot(42).await.unwrap().unwrap().balance,
            nano(5_500),
            "{name}"
        );
    }
}

/// Admission under limits: a full gate or a spent minute refuses the call and takes nothing (no
/// gate slot, no account slot, no hold, no count); an admitted call holds a slot in every gate
/// until its end gives them back, and counts once in its minute.
#[tokio::test]
async fn limits_refuse_before_anything_is_taken() {
    use opstate::{Finish, GateAsk, HoldAsk, Limited, Limits, RateAsk, Reservation, SlotAsk};
    for (name, s) in backends().await {
        // Redis counts minutes on its clock (this machine's): stay clear of a minute's end.
        let into = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 60_000;
        if into > 55_000 {
            tokio::time::sleep(Duration::from_millis(60_100 - into as u64)).await;
        }
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(1_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "acct",
            max: 10,
        }];
        let gates = [
            GateAsk {
                gate: "global",
                max: 3,
            },
            GateAsk {
                gate: "key:7",
                max: 2,
            },
        ];
        let limits = Limits {
            gates: &gates,
            per_minute: Some(RateAsk {
                counter: "key:7",
                limit: 3,
            }),
            key: None,
        };
        let hold = |id: &'static str| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(10),
            ttl_ms: 60_000,
            meta: "",
            spend: None,
        };
        for id in ["r1", "r2"] {
            let a = s
                .calls
                .admit(&asks, id, ttl, limits, Some(hold(id)))
                .await
                .unwrap();
            assert_eq!((a.taken, a.limited), (Some(0), None), "{name} {id}");
        }
        // The key's gate is full (2): refused, nothing taken.
        let c = s
            .calls
            .admit(&asks, "r3", ttl, limits, Some(hold("r3")))
            .await
            .unwrap();
        assert_eq!(c.limited, Some(Limited::Gate(1)), "{name}");
        assert_eq!((c.taken, c.reservation), (None, None), "{name}");
        assert_eq!(s.slots.in_use(&["acct"]).await.unwrap(), [2], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(20), "{name}");
        // Another key still fits under the global gate (3), then the global gate is full.
        let other = Limits {
            gates: &gates[..1],
            per_minute: None,
            key: None,
        };
        let d = s.calls.admit(&asks, "o1", ttl, other, None).await.unwrap();
        assert_eq!((d.taken, d.limited), (Some(0), None), "{name}");
        let e = s.calls.admit(&asks, "o2", ttl, other, None).await.unwrap();
        assert_eq!(
            (e.taken, e.limited),
            (None, Some(Limited::Gate(0))),
            "{name}"
        );
        // An end gives the gate slots back: r3 now fits (the global gate has o1, r2 and r3).
        let end = Finish {
            slot: Some(("acct", "r1")),
            gates: &["global", "key:7"],
            hold: Some((42, "r1")),
            cost: nano(10),
            event: None,
        };
        s.calls.finish(end).await.unwrap();
        let f = s
            .calls
            .admit(&asks, "r3", ttl, limits, Some(hold("r3")))
            .await
            .unwrap();
        assert_eq!((f.taken, f.limited), (Some(0), None), "{name}");
        assert!(
            matches!(f.reservation, Some(Reservation::Held { .. })),
            "{name}"
        );
        // Three calls counted this minute (r1, r2, r3): the fourth is refused for the minute
        // even with room in the gates, and says when the minute ends.
        for (gate_slot, gates_of) in [
            ("r2", &["global", "key:7"][..]),
            ("r3", &["global", "key:7"][..]),
        ] {
            let end = Finish {
                slot: Some(("acct", gate_slot)),
                gates: gates_of,
                hold: Some((42, gate_slot)),
                cost: nano(10),
                event: None,
            };
            s.calls.finish(end).await.unwrap();
        }
        let g = s
            .calls
            .admit(&asks, "r4", ttl, limits, Some(hold("r4")))
            .await
            .unwrap();
        match g.limited {
            Some(Limited::PerMinute { resets_in }) => {
                assert!(
                    resets_in <= Duration::from_secs(60),
                    "{name}: {resets_in:?}"
                )
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!((g.taken, g.reservation), (None, None), "{name}");
        assert_eq!(
            s.slots.in_use(&["acct"]).await.unwrap(),
            [1],
            "{name} (o1 only)"
        );
        // A refusal by the wallet gives the gate slots and the minute's count back.
        let poor = Limits {
            gates: &gates[..1],
            per_minute: Some(RateAsk {
                counter: "key:8",
                limit: 1,
            }),
            key: None,
        };
        let h = s
            .calls
            .admit(
                &asks,
                "p1",
                ttl,
                poor,
                Some(HoldAsk {
                    amount: nano(1_000_000),
                    ..hold("p1")
                }),
            )
            .await
            .unwrap();
        assert_eq!(h.taken, None, "{name}");
        assert!(
            matches!(h.reservation, Some(Reservation::Insufficient { .. })),
            "{name}"
        );
        let i = s.calls.admit(&asks, "p2", ttl, poor, None).await.unwrap();
        assert_eq!(
            (i.taken, i.limited),
            (Some(0), None),
            "{name}: count given back"
        );
    }
}

/// Admission checks the caller's key against the directory in its own step: a key revoked after
/// a proxy read (and cached) its record is refused and nothing is taken; a key still published is
/// admitted; a directory the store lost (not marked loaded) proves nothing and refuses no one.
#[tokio::test]
async fn admission_refuses_a_key_revoked_since_its_record_was_read() {
    use opstate::{HoldAsk, Limited, Limits, SlotAsk};
    for (name, s) in backends().await {
        s.keys.load(&[]).await.unwrap();
        s.keys.publish("hash-live", &record(1)).await.unwrap();
        s.keys.publish("hash-gone", &record(2)).await.unwrap();
        s.keys.revoke("hash-gone").await.unwrap();
        s.wallets.load(42, nano(1_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "acct-rev",
            max: 10,
        }];
        let ttl = Duration::from_secs(30);
        let hold = |id: &'static str| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(10),
            ttl_ms: 60_000,
            meta: "",
            spend: None,
        };
        let with_key = |key: &'static str| Limits {
            key: Some(key),
            ..Limits::default()
        };
        let refused = s
            .calls
            .admit(&asks, "r1", ttl, with_key("hash-gone"), Some(hold("r1")))
            .await
            .unwrap();
        assert_eq!(refused.limited, Some(Limited::Revoked), "{name}");
        assert_eq!((refused.taken, refused.reservation), (None, None), "{name}");
        assert_eq!(s.slots.in_use(&["acct-rev"]).await.unwrap(), [0], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(0), "{name}: nothing held");
        let admitted = s
            .calls
            .admit(&asks, "r2", ttl, with_key("hash-live"), Some(hold("r2")))
            .await
            .unwrap();
        assert_eq!(
            (admitted.limited, admitted.taken),
            (None, Some(0)),
            "{name}"
        );
        // Without a check (None) the directory is not consulted.
        let unchecked = s
            .calls
            .admit(&asks, "r3", ttl, Limits::default(), None)
            .await
            .unwrap();
        assert_eq!(unchecked.limited, None, "{name}");
    }
    // A directory that was never loaded (or was lost) proves nothing.
    let s = Stores::memory();
    s.wallets.load(42, nano(1_000)).await.unwrap();
    let asks = [SlotAsk {
        account: "a",
        max: 1,
    }];
    let limits = Limits {
        key: Some("hash-unknown"),
        ..Limits::default()
    };
    let admitted = s
        .calls
        .admit(&asks, "r", Duration::from_secs(30), limits, None)
        .await
        .unwrap();
    assert_eq!((admitted.limited, admitted.taken), (None, Some(0)));
}

/// The reconciler's resolution (`Calls::resolve`, issue 48): the expired hold settled and its
/// event appended with what was charged, in one step; a hold already settled (its gateway came
/// back first) appends nothing, so no second event of the call.
#[tokio::test]
async fn resolve_settles_and_appends_only_what_it_charged() {
    use opstate::Settlement;
    for (name, s) in backends().await {
        s.wallets.load(42, nano(10_000)).await.unwrap();
        s.wallets
            .reserve(42, "req-9", nano(3_000), 60_000, "")
            .await
            .unwrap();
        let e = event(9);
        let settled = s.calls.resolve(42, "req-9", nano(1_200), &e).await.unwrap();
        assert_eq!(
            settled,
            Settlement::Settled {
                charged: nano(1_200),
                excess: nano(0),
                below_holds: false,
            },
            "{name}"
        );
        let again = s.calls.resolve(42, "req-9", nano(1_200), &e).await.unwrap();
        assert_eq!(again, Settlement::Unknown, "{name}: already settled");
        let got = s
            .usage
            .claim("c", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            got.len(),
            1,
            "{name}: one event, of the settlement that charged"
        );
        assert_eq!(
            (got[0].event.charged_nanos, got[0].event.excess_nanos),
            (nano(1_200), nano(0)),
            "{name}"
        );
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.reserved),
            (nano(8_800), nano(0)),
            "{name}"
        );
        // No mirror (the store lost it): nothing settled, nothing appended.
        let missing = s
            .calls
            .resolve(77, "req-10", nano(5), &event(10))
            .await
            .unwrap();
        assert_eq!(missing, Settlement::Missing, "{name}");
        assert!(
            s.usage
                .claim("c", 10, Duration::from_secs(60))
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
    }
}
