//! A running deployment's life: health and readiness, a reload under traffic, SIGTERM with a
//! stream in flight, an upgrade under traffic, a key disabled on every proxy.

use super::*;

/// Health on the metrics listener of a real `proxy` process: `/healthz` while it answers,
/// `/readyz` 200 when it can serve, and 503 naming the failing check while the key directory of
/// a proxy on Redis has not been loaded by admin-api.
#[tokio::test]
async fn health_and_readiness_on_the_metrics_listener() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let (port, metrics) = (free_port(), free_port());
    let text = config_builder(&mock.base_url(), "http://127.0.0.1:9")
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .toml();
    let _proxy = spawn_proxy(&text, port, "health").await;
    let base = format!("http://127.0.0.1:{metrics}");
    let (status, body) = get_json(&format!("{base}/healthz")).await;
    assert_eq!((status, &body["status"]), (200, &json!("ok")), "{body}");
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["key_directory"], "loaded");
    assert_eq!(body["checks"]["operational_store"], "reachable");
    assert_eq!(body["checks"]["database"], "reachable");
    assert_eq!(body["checks"]["configuration"]["state"], "valid");

    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: the not-ready half skipped");
        return;
    };
    // A proxy on a Redis whose key directory nobody loaded yet: not ready, and says why.
    let prefix = format!("health:{}:{}:", std::process::id(), uuid_like());
    let (port, metrics) = (free_port(), free_port());
    let text = redis_deployment_builder(&redis_url, &prefix, port, &mock.base_url())
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .toml();
    let _fleet_proxy = spawn_proxy(&text, port, "health-redis").await;
    let base = format!("http://127.0.0.1:{metrics}");
    let (status, body) = get_json(&format!("{base}/healthz")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["key_directory"], "not_loaded");
    assert_eq!(body["checks"]["operational_store"], "reachable");
    // admin-api's keeper loads it: ready.
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    stores.keys.load(&[]).await.unwrap();
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{body}");
}

/// A reload's configuration: `gpt-4o-mini` at `input`/`output` USD per Mtok, and `gpt-4o` too
/// when `with_gpt_4o`.
fn reload_config(
    mock_url: &str,
    dir: &std::path::Path,
    (port, metrics): (u16, u16),
    (input, output): (f64, f64),
    with_gpt_4o: bool,
) -> TestConfig {
    let mut models = vec!["gpt-4o-mini"];
    if with_gpt_4o {
        models.push("gpt-4o");
    }
    let mut config = TestConfig::embedded()
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set(
            "server",
            "pid_file",
            dir.join("proxy.pid").display().to_string(),
        )
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .set(
            "mail",
            "outbox_dir",
            dir.join("outbox").display().to_string(),
        )
        .database(&format!(
            "sqlite://{}?mode=rwc",
            dir.join("ledger.db").display()
        ))
        .model(Model::text("gpt-4o-mini", input, output))
        .account(Account::openai("mock", mock_url, &models))
        .group(Group::new(1, &models));
    if with_gpt_4o {
        config = config.model(Model::text("gpt-4o", 2.5, 10.0));
    }
    config
}

/// Live reload of a real `proxy` process under traffic: `proxy --reload` (and a plain `SIGHUP`)
/// re-reads the file; new prices and a new model apply to calls that start afterwards, a stream
/// in flight finishes on the configuration it started with and is charged at its old price, no
/// call fails meanwhile; an invalid file changes nothing (exit 2 naming the key, `/readyz` and
/// the metrics say it failed); a key that needs a restart is reported as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_traffic_applies_to_new_calls_only() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("reload");
    let ports = (free_port(), free_port());
    let path = dir.join("proxy.toml");
    let write = |config: &TestConfig| std::fs::write(&path, config.toml()).unwrap();
    write(&reload_config(
        &mock.base_url(),
        &dir,
        ports,
        (0.15, 0.6),
        false,
    ));
    let key = demo_key_cli(&path);
    let _proxy = proxy_process(&path, &[]);
    let base = format!("http://127.0.0.1:{}", ports.0);
    let readyz = format!("http://127.0.0.1:{}/readyz", ports.1);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_ready(&http, ports.1).await;
    let call = |model: &'static str, stream: bool, slow: bool| {
        let mut req = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-mock-usage", "prompt=1000,completion=100")
            .json(&chat(model, stream));
        if slow {
            req = req
                .header("x-mock-delay-ms", "300")
                .header("x-mock-events", "6");
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
            (status, id, resp.text().await.unwrap())
        }
    };
    let reload = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxy"))
            .arg("--config")
            .arg(&path)
            .arg("--reload")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let last_reload = || async {
        let v: Value = http
            .get(&readyz)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["checks"]["configuration"].clone()
    };
    let (status, _, _) = call("gpt-4o", false, false).await;
    assert_ne!(status, 200, "gpt-4o is not configured yet");

    // Traffic throughout, and one slow stream started before the reload.
    let mut traffic = JoinSet::new();
    let mut slow = JoinSet::new();
    slow.spawn(call("gpt-4o-mini", true, true));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..20u64 {
        traffic.spawn(call("gpt-4o-mini", i % 2 == 0, false));
        if i == 5 {
            write(&reload_config(
                &mock.base_url(),
                &dir,
                ports,
                (1.5, 6.0),
                true,
            ));
            let (code, err) = reload();
            assert_eq!(code, Some(0), "{err}");
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["last_reload"]["result"] != "ok" {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Some(r) = traffic.join_next().await {
        assert_eq!(r.unwrap().0, 200, "no call fails during a reload");
    }
    let (status, old_id, body) = slow.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("[DONE]"), "the stream in flight finished");
    let (status, new_id, _) = call("gpt-4o-mini", false, false).await;
    assert_eq!(status, 200);
    let (status, _, body) = call("gpt-4o", false, false).await;
    assert_eq!(status, 200, "the new model is served: {body}");

    // Charged at the price each call started with: 10× after the reload.
    let db = admin_api::db::connect(&format!(
        "sqlite://{}?mode=rwc",
        dir.join("ledger.db").display()
    ))
    .await
    .unwrap();
    let cost_of = |id: String| {
        let db = db.clone();
        async move {
            use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(r) = entities::usage_records::Entity::find()
                    .filter(entities::usage_records::Column::RequestId.eq(id.as_str()))
                    .one(&db)
                    .await
                    .unwrap()
                {
                    return r.cost_nanos;
                }
                assert!(Instant::now() < deadline, "{id} never settled");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // The demo customer pays its partner's retail rate, 1.25 (`demo::quickstart`).
    assert_eq!(
        cost_of(old_id).await,
        262_500,
        "(1000 × 0.15 + 100 × 0.6) / 1e6 USD × 1.25"
    );
    assert_eq!(cost_of(new_id).await, 2_625_000, "the new price, 10×");

    // An invalid file: refused by --reload (nothing signalled) and by a plain SIGHUP alike.
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        good.replace(
            "models = [\"gpt-4o-mini\", \"gpt-4o\"]\nwholesale",
            "models = [\"ghost\"]\nwholesale",
        ),
    )
    .unwrap();
    let (code, err) = reload();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("groups[0].models") && err.contains("ghost"),
        "{err}"
    );
    let pid = std::fs::read_to_string(dir.join("proxy.pid")).unwrap();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", pid.trim()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["last_reload"]["result"] != "failed" {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let state = last_reload().await;
    assert!(
        state["last_reload"]["error"]
            .as_str()
            .unwrap()
            .contains("ghost"),
        "{state}"
    );
    assert_eq!(
        state["state"], "valid",
        "the configuration in force is still the good one"
    );
    let (status, _, _) = call("gpt-4o", false, false).await;
    assert_eq!(status, 200, "nothing changed");
    let metrics = http
        .get(format!("http://127.0.0.1:{}/metrics", ports.1))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"failed\"} 1"),
        "{metrics}"
    );

    // A key that needs a restart: the rest applies, the key is reported.
    std::fs::write(
        &path,
        good.replace("[server]\n", "[server]\nmax_body_bytes = 1024\n"),
    )
    .unwrap();
    let (code, err) = reload();
    assert_eq!(code, Some(0), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["needs_restart"] != json!(["server"]) {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SIGTERM` with a stream in flight, on a real embedded `proxy`: it stops accepting at once, the
/// stream finishes whole, the process exits as soon as it has (well within the grace period), and
/// every call served is in the ledger (the embedded settler drained the in-memory stream before
/// the process ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_stream_finish_settles_it_and_exits() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("sigterm");
    let ports = (free_port(), free_port());
    let path = dir.join("proxy.toml");
    let config = reload_config(&mock.base_url(), &dir, ports, (0.15, 0.6), false).set(
        "server",
        "shutdown_grace_ms",
        20_000u64,
    );
    std::fs::write(&path, config.toml()).unwrap();
    let key = demo_key_cli(&path);
    let mut proxy = proxy_process(&path, &[]);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_ready(&http, ports.1).await;
    let url = format!("http://127.0.0.1:{}/compat/v1/chat/completions", ports.0);
    let resp = http
        .post(&url)
        .bearer_auth(&key)
        .json(&chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    resp.bytes().await.unwrap();
    // A stream of 6 events 300 ms apart, then SIGTERM while it runs.
    let stream = http
        .post(&url)
        .bearer_auth(&key)
        .header("x-mock-delay-ms", "300")
        .header("x-mock-events", "6")
        .json(&chat("gpt-4o-mini", true));
    let mut running = JoinSet::new();
    running.spawn(async move {
        let resp = stream.send().await.unwrap();
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        (resp.status().as_u16(), id, resp.text().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let stopped = Instant::now();
    // New connections are refused soon after (the listener is closed).
    let deadline = Instant::now() + Duration::from_secs(3);
    while tokio::net::TcpStream::connect(("127.0.0.1", ports.0))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, second, body) = running.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains("[DONE]"),
        "the stream in flight finished whole: {body}"
    );
    // The process exits once nothing is in flight, long before the 20 s grace period.
    let exited = loop {
        if let Some(status) = proxy.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(15),
            "the proxy did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exited.success(), "{exited:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopped.elapsed()
    );
    // Both calls are in the ledger: nothing was left in the in-memory stream.
    let db = admin_api::db::connect(&format!(
        "sqlite://{}?mode=rwc",
        dir.join("ledger.db").display()
    ))
    .await
    .unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let records = entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::RequestId.is_in([first, second]))
        .all(&db)
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records.iter().all(|r| r.charged_nanos > 0));
}

/// Zero-downtime upgrade of a real proxy on Redis, under traffic: `proxy --upgrade` takes over the
/// running proxy's listening sockets; no connection is refused and no call fails while the two
/// hand over, the old process finishes and exits, the new one serves, and every call served is
/// settled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_under_traffic_refuses_no_connection_and_loses_no_call() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: upgrade scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("upgrade");
    let prefix = format!("upgrade:{}:{}:", std::process::id(), uuid_like());
    let port = free_port();
    let text = redis_deployment_builder(&redis_url, &prefix, port, &mock.base_url())
        .set(
            "server",
            "pid_file",
            dir.join("proxy.pid").display().to_string(),
        )
        .set(
            "server",
            "upgrade_sock",
            dir.join("upgrade.sock").display().to_string(),
        )
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let demo = admin.demo_key().await;
    let path = dir.join("proxy.toml");
    std::fs::write(&path, &text).unwrap();
    let mut old = proxy_process(&path, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid_of = || std::fs::read_to_string(dir.join("proxy.pid")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_of().trim() != old.0.id().to_string() {
        assert!(Instant::now() < deadline, "no pid file");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Traffic: 4 clients, a new connection per call (a refused connection would show), for 9 s.
    let url = format!("http://127.0.0.1:{port}/compat/v1/chat/completions");
    let until = Instant::now() + Duration::from_secs(9);
    let mut clients = JoinSet::new();
    for _ in 0..4 {
        let (url, key) = (url.clone(), demo.api_key.clone());
        clients.spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let (mut ok, mut failed, mut ids) = (0u32, Vec::new(), Vec::new());
            while Instant::now() < until {
                match http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&chat("gpt-4o-mini", false))
                    .send()
                    .await
                {
                    Ok(resp) if resp.status() == 200 => {
                        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_string());
                        resp.bytes().await.unwrap();
                        ok += 1;
                    }
                    Ok(resp) => {
                        let status = resp.status();
                        let body = resp.text().await.unwrap_or_default();
                        failed.push(format!("status {status}: {body}"));
                    }
                    Err(e) => failed.push(format!("{e:?}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (ok, failed, ids)
        });
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut new = proxy_process(&path, &["--upgrade"]);
    // The old process hands its sockets over, finishes, and exits; the new one writes its pid.
    let exited = loop {
        if let Some(status) = old.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < until + Duration::from_secs(20),
            "the old proxy did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exited.success(), "{exited:?}");
    assert_eq!(pid_of().trim(), new.0.id().to_string());
    assert!(new.0.try_wait().unwrap().is_none(), "the new proxy runs");
    let mut served = Vec::new();
    while let Some(r) = clients.join_next().await {
        let (ok, failed, ids) = r.unwrap();
        assert!(
            failed.is_empty(),
            "calls failed during the upgrade: {failed:?}"
        );
        assert!(ok > 0);
        served.extend(ids);
    }
    // Every call served is settled once.
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::RequestId.is_in(served.clone()))
            .count(&admin.state.db)
            .await
            .unwrap();
        if n == served.len() as u64 {
            break;
        }
        if Instant::now() >= deadline {
            // Where the missing ones are: still in the stream, delivered and never
            // acknowledged, or never appended.
            let stream = opstate::schema::KeySchema::new(&prefix).usage_stream(0);
            let mut conn = redis::Client::open(redis_url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let length: redis::Value = redis::cmd("XLEN")
                .arg(&stream)
                .query_async(&mut conn)
                .await
                .unwrap();
            let pending: redis::Value = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(opstate::schema::USAGE_GROUP)
                .query_async(&mut conn)
                .await
                .unwrap();
            panic!(
                "{n} of {} settled; the stream holds {length:?}, pending {pending:?}; the proxies' logs are in {}",
                served.len(),
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = &mut new;
}

/// SPEC: a deleted key "stops authenticating once the call returns", on every proxy. Two proxy
/// processes on Redis and PostgreSQL keep key records for a minute (`redis.key_cache_ms`); the
/// first call after the partner's DELETE returns is refused on the other proxy too, while a
/// stream already in flight with the key finishes and is charged once. A revocation whose
/// announcement a proxy never received (the directory entry deleted without one) is refused at
/// admission all the same: the admission step checks the directory, with no round trip of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_key_stops_at_once_on_every_proxy() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: two-proxy revocation scenario skipped");
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = testkit::redis_prefix("revoke");
    let admin_port = free_port();
    let ports = [free_port(), free_port()];
    let texts: Vec<String> = ports
        .iter()
        .map(|p| {
            redis_deployment_builder(&redis_url, &prefix, *p, &mock.base_url())
                .database(&db_url)
                .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
                .set("redis", "key_cache_ms", 60_000u64)
                .set("money", "hold_ttl_ms", 60_000u64)
                .toml()
        })
        .collect();
    let settings = Arc::new(Settings::parse(&texts[0], &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let partner = admin_api::cli::partner_create(
        &admin.state,
        admin_api::cli::NewPartner::parse("Acme", "1.0", "100", "owner", &["partner:write".into()])
            .unwrap(),
    )
    .await
    .unwrap();
    let token = partner["token"].as_str().unwrap().to_string();
    let _a = spawn_proxy(&texts[0], ports[0], "revoke-a").await;
    let _b = spawn_proxy(&texts[1], ports[1], "revoke-b").await;
    let (a, b) = (
        format!("http://127.0.0.1:{}", ports[0]),
        format!("http://127.0.0.1:{}", ports[1]),
    );
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let partner_call = |method: reqwest::Method, path: String, body: Option<Value>, idem: &str| {
        let mut req = http
            .request(method, format!("{a}/partner/v1{path}"))
            .bearer_auth(&token)
            .header("idempotency-key", idem);
        if let Some(body) = body {
            req = req.json(&body);
        }
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (s, created) = partner_call(
        reqwest::Method::PUT,
        "/customers/by-external-id/rev-1".into(),
        Some(json!({"name": "Revoke Co", "contact_email": "ann@revoke.example", "initial_allocation_usd": 20, "retail_rate_multiplier": 1})),
        "c1",
    )
    .await;
    assert_eq!(s, 200, "{created}");
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let invite = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap();
    let path = &invite[invite.find("/invitations/").unwrap()..];
    let outbox = admin.state.settings.mail.outbox_dir.clone();
    let (status, accepted) = testkit::accept_invitation(
        &http,
        &format!("{a}{path}/accept"),
        "ann@revoke.example",
        &outbox,
    )
    .await;
    assert_eq!(status, 200, "{accepted}");
    let mut secrets = Vec::new();
    for n in 0..2 {
        let (s, key) = partner_call(
            reqwest::Method::POST,
            format!("/customers/{id}/api-keys"),
            Some(json!({"name": format!("k{n}"), "group_id": 1})),
            &format!("k{n}"),
        )
        .await;
        assert_eq!(s, 200, "{key}");
        secrets.push((
            key["data"]["key"].as_str().unwrap().to_string(),
            key["data"]["api_key_id"].as_i64().unwrap(),
        ));
    }
    let call = |base: String, secret: String, stream: bool| {
        let http = http.clone();
        async move {
            let resp = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .bearer_auth(secret)
                .header("x-mock-usage", "prompt=10,completion=5")
                .json(&chat("gpt-4o-mini", stream))
                .send()
                .await
                .unwrap();
            resp.status().as_u16()
        }
    };
    let (secret, key_id) = secrets[0].clone();
    // Both proxies have the key's record in their caches.
    assert_eq!(call(a.clone(), secret.clone(), false).await, 200);
    assert_eq!(call(b.clone(), secret.clone(), false).await, 200);
    // A stream with the key is in flight on B when the key is disabled.
    let mut in_flight = JoinSet::new();
    let (client, url, key) = (http.clone(), b.clone(), secret.clone());
    in_flight.spawn(async move {
        let resp = client
            .post(format!("{url}/compat/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-mock-usage", "prompt=10,completion=5")
            .header("x-mock-delay-ms", "300")
            .header("x-mock-events", "4")
            .json(&chat("gpt-4o-mini", true))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let mut body = resp.bytes_stream();
        let mut text = Vec::new();
        while let Some(chunk) = body.next().await {
            text.extend_from_slice(&chunk.unwrap());
        }
        (status, String::from_utf8_lossy(&text).contains("[DONE]"))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, v) = partner_call(
        reqwest::Method::DELETE,
        format!("/customers/{id}/api-keys/{key_id}"),
        None,
        "del",
    )
    .await;
    assert_eq!(s, 200, "{v}");
    // The first calls after the DELETE returned: refused on both proxies.
    assert_eq!(
        call(b.clone(), secret.clone(), false).await,
        401,
        "the other proxy"
    );
    assert_eq!(
        call(a.clone(), secret.clone(), false).await,
        401,
        "the proxy it went through"
    );
    assert_eq!(
        call(b.clone(), secret.clone(), true).await,
        401,
        "streams too"
    );
    // The stream in flight finished normally.
    assert_eq!(in_flight.join_next().await.unwrap().unwrap(), (200, true));
    // A revocation no proxy heard of: the directory entry removed without an announcement.
    let (other, other_id) = secrets[1].clone();
    assert_eq!(
        call(b.clone(), other.clone(), false).await,
        200,
        "cached on B"
    );
    let raw = opstate::RedisStore::connect(&redis_url, &prefix)
        .await
        .unwrap();
    let hash = entities::customer_api_keys::Entity::find_by_id(other_id)
        .one(&admin.state.db)
        .await
        .unwrap()
        .unwrap()
        .key_hash;
    let mut conn = raw.connection();
    let _: i64 = redis::cmd("HDEL")
        .arg(raw.schema().key_directory())
        .arg(&hash)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        call(b.clone(), other, false).await,
        401,
        "refused at admission"
    );
    // Every served call of the first key is charged exactly once: two calls and the stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::ApiKeyId.eq(key_id))
            .all(&admin.state.db)
            .await
            .unwrap();
        if records.len() == 3 {
            assert!(
                records
                    .iter()
                    .all(|r| r.status == 200 && r.charged_nanos > 0 && r.measurement == "exact"),
                "{records:?}"
            );
            assert!(records.iter().any(|r| r.stream));
            break;
        }
        assert!(
            records.len() < 3 && Instant::now() < deadline,
            "{records:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let w = settled_wallet(&admin.stores, created_org(&admin.state, id).await).await;
    assert!(w.reserved.is_zero(), "{w:?}");
}
