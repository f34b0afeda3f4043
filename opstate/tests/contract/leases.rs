//! The settlers' leases on the usage streams (`StreamLeases`, `opstate::leases`; issue 48).

use super::*;
use opstate::leases::{fair_share, leave, round};

/// A lease is held by one settler at a time: taken when free, renewed by its holder only,
/// given back by its holder only, free again once it lapses.
#[tokio::test]
async fn a_lease_has_one_holder_until_it_lapses() {
    for (name, s) in backends().await {
        let l = s.leases.as_ref();
        let short = Duration::from_millis(300);
        assert_eq!(l.holder(0).await.unwrap(), None, "{name}");
        assert!(l.take(0, "a", short).await.unwrap(), "{name}");
        assert_eq!(l.holder(0).await.unwrap().as_deref(), Some("a"), "{name}");
        assert!(!l.take(0, "b", short).await.unwrap(), "{name}: held by a");
        assert!(l.take(0, "a", short).await.unwrap(), "{name}: renewed by a");
        l.give(0, "b").await.unwrap();
        assert!(
            !l.take(0, "b", short).await.unwrap(),
            "{name}: b cannot give a's lease back"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            l.take(0, "b", short).await.unwrap(),
            "{name}: a's lease lapsed"
        );
        l.give(0, "b").await.unwrap();
        assert!(l.take(0, "a", short).await.unwrap(), "{name}: given back");
        l.give(0, "a").await.unwrap();
    }
}

/// Heartbeats count the live settlers; one that leaves or stops beating is no longer counted.
#[tokio::test]
async fn heartbeats_count_the_live_settlers() {
    for (name, s) in backends().await {
        let l = s.leases.as_ref();
        let short = Duration::from_millis(300);
        assert_eq!(l.heartbeat("a", short).await.unwrap(), 1, "{name}");
        assert_eq!(l.heartbeat("b", short).await.unwrap(), 2, "{name}");
        assert_eq!(l.heartbeat("a", short).await.unwrap(), 2, "{name}: a again");
        l.leave("b").await.unwrap();
        assert_eq!(l.heartbeat("a", short).await.unwrap(), 1, "{name}: b left");
        assert_eq!(l.heartbeat("c", short).await.unwrap(), 2, "{name}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            l.heartbeat("a", short).await.unwrap(),
            1,
            "{name}: c lapsed"
        );
        l.leave("a").await.unwrap();
    }
}

/// Rounds share the streams out: each settler holds at most its fair share, together they hold
/// every stream once, a newcomer gets its share within two rounds, and a settler that leaves
/// hands its streams to the others in their next round.
#[tokio::test]
async fn rounds_share_the_streams_fairly() {
    for (name, s) in backends().await {
        let l = s.leases.as_ref();
        let count = l.stream_count();
        let alone = round(l, "s1", &[]).await.unwrap();
        assert_eq!(alone, (0..count).collect::<Vec<_>>(), "{name}: alone, all");
        let settlers = ["s1", "s2", "s3", "s4"];
        let mut held: Vec<Vec<usize>> = vec![alone, vec![], vec![], vec![]];
        for _ in 0..3 {
            for (i, me) in settlers.iter().enumerate() {
                held[i] = round(l, me, &held[i]).await.unwrap();
            }
        }
        let share = fair_share(count, settlers.len());
        let mut all: Vec<usize> = held.concat();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..count).collect::<Vec<_>>(),
            "{name}: each stream once: {held:?}"
        );
        for h in &held {
            assert!(
                h.len() <= share,
                "{name}: within the share {share}: {held:?}"
            );
            if count >= settlers.len() {
                assert!(!h.is_empty(), "{name}: every settler works: {held:?}");
            }
        }
        // s4 stops: its streams go to the others (its leases given back, its heartbeat gone).
        leave(l, "s4", &held[3]).await.unwrap();
        for _ in 0..2 {
            for (i, me) in settlers.iter().enumerate().take(3) {
                held[i] = round(l, me, &held[i]).await.unwrap();
            }
        }
        let mut all: Vec<usize> = held[..3].concat();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..count).collect::<Vec<_>>(),
            "{name}: s4's streams taken: {held:?}"
        );
        for (i, me) in settlers.iter().enumerate().take(3) {
            leave(l, me, &held[i]).await.unwrap();
        }
    }
}
