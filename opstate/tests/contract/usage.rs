//! The usage stream (`UsageStream`): order, acknowledgement, redelivery, concurrent appends, a flushed Redis.

use super::*;

#[tokio::test]
async fn usage_stream_delivers_in_order_and_acks_remove() {
    for (name, s) in backends().await {
        for n in 0..5 {
            s.usage.append(&event(n)).await.unwrap();
        }
        assert_eq!(s.usage.backlog().await.unwrap(), 5, "{name}");
        let first = s
            .usage
            .claim("c1", 3, Duration::from_secs(60))
            .await
            .unwrap();
        let ids: Vec<_> = first.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(ids, ["req-0", "req-1", "req-2"], "{name}");
        assert_eq!(
            first[1].event,
            event(1),
            "{name}: events round-trip exactly"
        );
        let rest = s
            .usage
            .claim("c1", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            rest.len(),
            2,
            "{name}: claimed entries are not delivered twice"
        );
        let all: Vec<String> = first
            .iter()
            .chain(rest.iter())
            .map(|e| e.id.clone())
            .collect();
        s.usage.ack(&all).await.unwrap();
        assert_eq!(s.usage.backlog().await.unwrap(), 0, "{name}");
        assert!(
            s.usage
                .claim("c1", 10, Duration::ZERO)
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
        s.usage.ack(&[]).await.unwrap();
    }
}

#[tokio::test]
async fn usage_stream_redelivers_entries_of_a_dead_consumer() {
    for (name, s) in backends().await {
        s.usage.append(&event(1)).await.unwrap();
        s.usage.append(&event(2)).await.unwrap();
        let dead = s
            .usage
            .claim("dead", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(dead.len(), 2, "{name}");
        // Not idle long enough yet: nothing for the survivor.
        let early = s
            .usage
            .claim("alive", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(early.is_empty(), "{name}");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let taken = s
            .usage
            .claim("alive", 10, Duration::from_millis(20))
            .await
            .unwrap();
        let got: HashSet<_> = taken.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(
            got,
            HashSet::from(["req-1".to_string(), "req-2".to_string()]),
            "{name}"
        );
        s.usage
            .ack(&taken.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
        assert_eq!(s.usage.backlog().await.unwrap(), 0, "{name}");
    }
}

#[tokio::test]
async fn concurrent_appends_lose_nothing() {
    for (name, s) in backends().await {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..64 {
            let usage = s.usage.clone();
            tasks.spawn(async move { usage.append(&event(n)).await });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
        let got = s
            .usage
            .claim("c", 100, Duration::from_secs(60))
            .await
            .unwrap();
        let ids: HashSet<_> = got.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(ids.len(), 64, "{name}");
    }
}

#[tokio::test]
async fn redis_flush_is_detected_and_the_group_recovers() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
    let store = RedisStore::connect(&url, &prefix).await.unwrap();
    use opstate::{KeyDirectory, UsageStream};
    store.load(&[("h".into(), record(1))]).await.unwrap();
    store.append(&event(1)).await.unwrap();
    // Simulate the loss of this deployment's keys (a flush, scoped to the test's prefix).
    let mut conn = store.connection();
    let schema = store.schema();
    let _: () = redis::cmd("DEL")
        .arg(schema.key_directory())
        .arg(schema.key_directory_loaded())
        .arg(schema.usage_stream(0))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        !store.is_loaded().await.unwrap(),
        "a lost directory reads as not loaded"
    );
    assert_eq!(store.lookup("h").await.unwrap(), None);
    // The consumer group vanished with the stream; claiming recreates it.
    assert!(
        store
            .claim("c", 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    store.append(&event(2)).await.unwrap();
    let got = store.claim("c", 10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.len(), 1);
}

/// A settler whose claim reply or acknowledgement was lost (a reply that timed out after Redis
/// ran the command) gets the entries delivered to it back on its next claim, instead of waiting
/// out the claim timeout before any settler takes them over. On one Redis and on a cluster.
#[tokio::test]
async fn entries_delivered_to_a_settler_whose_reply_was_lost_come_back_at_once() {
    let mut stores = Vec::new();
    if let Some(url) = testkit::redis_url() {
        let prefix = testkit::redis_prefix("lostreply");
        stores.push(("redis", RedisStore::connect(&url, &prefix).await.unwrap()));
    }
    if let Some(seeds) = testkit::redis_cluster() {
        let prefix = testkit::redis_prefix("lostreply");
        let store = RedisStore::connect_cluster(&seeds, &prefix).await.unwrap();
        stores.push(("redis-cluster", store));
    }
    use opstate::UsageStream;
    for (name, store) in stores {
        store.append(&event(1)).await.unwrap();
        store.append(&event(2)).await.unwrap();
        // The claim ran in Redis, its reply never reached the settler: delivered to "s1".
        let mut conn = store.connection();
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(opstate::schema::USAGE_GROUP)
            .arg("s1")
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg(store.schema().usage_stream(42))
            .arg(">")
            .query_async(&mut conn)
            .await
            .unwrap();
        // Nothing is new, nothing idle long enough: the entries wait under "s1".
        let claim = || store.claim("s1", 10, Duration::from_secs(30));
        assert!(claim().await.unwrap().is_empty(), "{name}");
        // A failed acknowledgement (or claim) makes the next claim read "s1"'s own entries.
        assert!(store.ack(&["not-an-id".into()]).await.is_err(), "{name}");
        let back = claim().await.unwrap();
        let got: HashSet<_> = back.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(
            got,
            HashSet::from(["req-1".to_string(), "req-2".to_string()]),
            "{name}"
        );
        let ids: Vec<String> = back.iter().map(|e| e.id.clone()).collect();
        store.ack(&ids).await.unwrap();
        assert_eq!(store.backlog().await.unwrap(), 0, "{name}");
        assert!(claim().await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn each_stream_names_the_server_process_that_keeps_it() {
    for (name, s) in backends().await {
        let homes = s.usage.homes().await.unwrap();
        match name {
            "memory" => assert!(
                homes.is_empty(),
                "{name}: a process's memory has no failover"
            ),
            "redis" => assert_eq!(homes.len(), 1, "{name}: one server"),
            _ => {
                assert_eq!(homes.len(), 16, "{name}: one per money slot");
                let distinct: std::collections::HashSet<_> = homes.iter().collect();
                assert!(
                    distinct.len() > 1,
                    "{name}: the money slots are spread over the masters: {homes:?}"
                );
                assert_eq!(
                    s.usage.home_of(21),
                    5,
                    "{name}: organization 21 is in money slot 5"
                );
            }
        }
        for id in &homes {
            let id = id
                .as_deref()
                .unwrap_or_else(|| panic!("{name}: every server answers"));
            assert!(
                id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "{name}: a run_id: {id}"
            );
        }
        assert_eq!(
            s.usage.homes().await.unwrap(),
            homes,
            "{name}: stable while nothing fails over"
        );
        if name != "redis-cluster" {
            assert_eq!(s.usage.home_of(21), 0, "{name}");
        }
    }
}

/// `pending`: the events delivered to a settler and not yet acknowledged, on their stream only
/// (what a wallet reload must know may be booked without the mirror told yet).
#[tokio::test]
async fn pending_lists_what_was_delivered_and_not_acknowledged() {
    for (name, s) in backends().await {
        let u = &s.usage;
        for n in 0..3 {
            u.append(&event(n)).await.unwrap();
        }
        let home = u.home_of(42);
        assert!(
            u.pending(home).await.unwrap().is_empty(),
            "{name}: nothing delivered"
        );
        let got = u.claim("c", 2, Duration::from_secs(60)).await.unwrap();
        assert_eq!(got.len(), 2, "{name}");
        let ids = |events: Vec<opstate::UsageEvent>| {
            let mut v: Vec<String> = events.into_iter().map(|e| e.request_id).collect();
            v.sort();
            v
        };
        assert_eq!(
            ids(u.pending(home).await.unwrap()),
            ["req-0", "req-1"],
            "{name}"
        );
        u.ack(&[got[0].id.clone()]).await.unwrap();
        assert_eq!(ids(u.pending(home).await.unwrap()), ["req-1"], "{name}");
        if home != 0 {
            assert!(
                u.pending(0).await.unwrap().is_empty(),
                "{name}: another stream"
            );
        }
    }
}
