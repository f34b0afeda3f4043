//! Per-key window counters (`WindowCounters`).

use super::*;

#[tokio::test]
async fn window_counters_count_per_key_and_window() {
    for (name, s) in backends().await {
        let window = Duration::from_secs(60);
        // Stay clear of a window edge so the test cannot straddle two windows.
        let first = s.counters.hit("token:1:read", window).await.unwrap();
        if first.resets_in < Duration::from_secs(2) {
            tokio::time::sleep(first.resets_in + Duration::from_millis(50)).await;
        }
        let base = s.counters.hit("token:1:read", window).await.unwrap().count;
        for i in 1..=5 {
            let hit = s.counters.hit("token:1:read", window).await.unwrap();
            assert_eq!(hit.count, base + i, "{name}");
            assert!(
                hit.resets_in <= window && hit.resets_in > Duration::ZERO,
                "{name}"
            );
        }
        assert_eq!(
            s.counters.hit("token:1:write", window).await.unwrap().count,
            1,
            "{name}"
        );
        assert_eq!(
            s.counters.hit("token:2:read", window).await.unwrap().count,
            1,
            "{name}"
        );
    }
}

#[tokio::test]
async fn window_counters_reset_with_the_window() {
    for (name, s) in backends().await {
        let window = Duration::from_millis(200);
        let mut last = s.counters.hit("short", window).await.unwrap();
        while last.resets_in < Duration::from_millis(100) {
            tokio::time::sleep(last.resets_in + Duration::from_millis(5)).await;
            last = s.counters.hit("short", window).await.unwrap();
        }
        let start = last.count;
        assert_eq!(
            s.counters.hit("short", window).await.unwrap().count,
            start + 1,
            "{name}"
        );
        tokio::time::sleep(last.resets_in + Duration::from_millis(20)).await;
        assert_eq!(
            s.counters.hit("short", window).await.unwrap().count,
            1,
            "{name}: new window"
        );
    }
}

#[tokio::test]
async fn concurrent_hits_are_all_counted() {
    for (name, s) in backends().await {
        let window = Duration::from_secs(3600);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let c = s.counters.clone();
            tasks.spawn(async move { c.hit("burst", window).await.unwrap().count });
        }
        let mut counts = Vec::new();
        while let Some(r) = tasks.join_next().await {
            counts.push(r.unwrap());
        }
        counts.sort_unstable();
        let first = counts[0];
        assert_eq!(
            counts,
            (first..first + 50).collect::<Vec<_>>(),
            "{name}: each hit counted once"
        );
    }
}
