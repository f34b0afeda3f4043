//! Capacity slots (`Slots`).

use super::*;

#[tokio::test]
async fn slots_cap_concurrency_and_expire() {
    for (name, s) in backends().await {
        let sl = &s.slots;
        let ttl = Duration::from_millis(200);
        assert!(sl.acquire("acct", "r1", 2, ttl).await.unwrap(), "{name}");
        assert!(
            sl.acquire("acct", "r1", 2, ttl).await.unwrap(),
            "{name}: idempotent"
        );
        assert!(sl.acquire("acct", "r2", 2, ttl).await.unwrap(), "{name}");
        assert!(
            !sl.acquire("acct", "r3", 2, ttl).await.unwrap(),
            "{name}: full"
        );
        assert_eq!(
            sl.in_use(&["acct", "other"]).await.unwrap(),
            vec![2, 0],
            "{name}"
        );
        sl.release("acct", "r1").await.unwrap();
        assert!(
            sl.acquire("acct", "r3", 2, ttl).await.unwrap(),
            "{name}: a released slot is free"
        );
        // A dead proxy's slots stop counting after their TTL.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(sl.in_use(&["acct"]).await.unwrap(), vec![0], "{name}");
        assert!(sl.acquire("acct", "r4", 1, ttl).await.unwrap(), "{name}");
    }
}

#[tokio::test]
async fn concurrent_slot_takers_never_exceed_the_cap() {
    for (name, s) in backends().await {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..40 {
            let sl = s.slots.clone();
            tasks.spawn(async move {
                sl.acquire("hot", &format!("r{i}"), 7, Duration::from_secs(60))
                    .await
                    .unwrap()
            });
        }
        let mut taken = 0;
        while let Some(r) = tasks.join_next().await {
            taken += usize::from(r.unwrap());
        }
        assert_eq!(taken, 7, "{name}");
    }
}
