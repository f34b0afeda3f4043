//! Parsing and validation rules, one error path per rule.

use super::*;
use ::money::NanoUsd;
use std::collections::HashMap;

const VALID: &str = r#"
[server]
listen = "127.0.0.1:8080"

[admin]
embedded = true

[database]
url = "sqlite::memory:"

[security]
key_pepper = "0123456789abcdef"

[[models]]
id = "gpt-4o-mini"
family = "gpt-4o"
kind = "text"
author = "openai"
input_per_mtok = 0.15
output_per_mtok = "0.60"

[[models]]
id = "gpt-4o"
family = "gpt-4o"
kind = "text"
input_per_mtok = 2.5
output_per_mtok = 10
downgrade_to = "gpt-4o-mini"

[[accounts]]
id = "a"
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "env:KEY_A"
models = ["gpt-4o-mini"]

[[groups]]
id = 1
name = "Standard"
product_code = "std"
models = ["gpt-4o-mini", "gpt-4o"]
wholesale_rate_multiplier = 0.8
"#;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn parse(text: &str) -> Result<Settings, ConfigError> {
    Settings::parse(text, &env(&[("KEY_A", "sk-a")]))
}

fn error_of(text: &str) -> ConfigError {
    match parse(text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn valid_file_parses_into_exact_types() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.server.environment, Environment::Development);
    assert_eq!(s.server.public_base_url.as_str(), "http://127.0.0.1:8080/");
    assert_eq!(s.accounts[0].api_key, "sk-a");
    let mini = s.model("gpt-4o-mini").unwrap();
    assert_eq!(
        mini.prices.input_per_mtok,
        Some(NanoUsd::from_nanos(150_000_000))
    );
    assert_eq!(
        mini.prices.output_per_mtok,
        Some(NanoUsd::from_nanos(600_000_000))
    );
    assert_eq!(
        s.model("gpt-4o").unwrap().prices.output_per_mtok,
        Some(NanoUsd::from_nanos(10_000_000_000))
    );
    assert_eq!(
        s.group(1).unwrap().wholesale_rate_multiplier.to_string(),
        "0.8"
    );
    assert!(s.redis.is_none());
    assert!(
        !format!("{:?}", s.accounts[0]).contains("sk-a"),
        "debug output must redact keys"
    );
}

#[test]
fn unknown_key_is_named_with_its_path() {
    let e = error_of(&VALID.replace(
        "api_key = \"env:KEY_A\"",
        "api_key = \"env:KEY_A\"\nmax_conncurrency = 3",
    ));
    assert_eq!(e.path, "accounts[0].max_conncurrency");
    assert!(e.message.contains("unknown field"), "{e}");
    let e = error_of(&VALID.replace("[server]", "[server]\nlisten_port = 1"));
    assert_eq!(e.path, "server.listen_port");
}

#[test]
fn wrong_types_and_values_name_the_key() {
    let e = error_of(&VALID.replace("listen = \"127.0.0.1:8080\"", "listen = 8080"));
    assert_eq!(e.path, "server.listen");
    let e = error_of(&VALID.replace("listen = \"127.0.0.1:8080\"", "listen = \"localhost\""));
    assert_eq!(e.path, "server.listen");
    let e = error_of(&VALID.replace("provider = \"openai\"", "provider = \"azure\""));
    assert_eq!(e.path, "accounts[0].provider");
    let e = error_of(&VALID.replace("kind = \"text\"\nauthor", "kind = \"sound\"\nauthor"));
    assert_eq!(e.path, "models[0].kind");
    let e = error_of(&VALID.replace("input_per_mtok = 0.15", "input_per_mtok = -0.15"));
    assert_eq!(e.path, "models[0].input_per_mtok");
    let e = error_of(&VALID.replace("input_per_mtok = 0.15", "input_per_mtok = \"0.0000000001\""));
    assert_eq!(e.path, "models[0].input_per_mtok");
    let e = error_of(&VALID.replace(
        "wholesale_rate_multiplier = 0.8",
        "wholesale_rate_multiplier = 0",
    ));
    assert_eq!(e.path, "groups[0].wholesale_rate_multiplier");
    let e = error_of(&VALID.replace(
        "base_url = \"http://127.0.0.1:9/v1\"",
        "base_url = \"ftp://x/v1\"",
    ));
    assert_eq!(e.path, "accounts[0].base_url");
}

#[test]
fn references_must_resolve() {
    let e = error_of(&VALID.replace("models = [\"gpt-4o-mini\"]", "models = [\"gpt-5\"]"));
    assert_eq!(e.path, "accounts[0].models[0]");
    assert!(e.message.contains("gpt-5"));
    let e = error_of(&VALID.replace("downgrade_to = \"gpt-4o-mini\"", "downgrade_to = \"nope\""));
    assert_eq!(e.path, "models[1].downgrade_to");
    let e = error_of(&VALID.replace(
        "id = \"gpt-4o\"\nfamily = \"gpt-4o\"",
        "id = \"gpt-4o\"\nfamily = \"other\"",
    ));
    assert_eq!(e.path, "models[1].downgrade_to");
    assert!(e.message.contains("never crosses families"), "{e}");
}

#[test]
fn missing_price_is_an_error_not_free() {
    let e = error_of(&VALID.replace("output_per_mtok = \"0.60\"", ""));
    assert_eq!(e.path, "models[0].output_per_mtok");
}

#[test]
fn secrets_come_from_the_environment() {
    let e = Settings::parse(VALID, &env(&[])).unwrap_err();
    assert_eq!(e.path, "accounts[0].api_key");
    assert!(e.message.contains("KEY_A"));
    let s = Settings::parse(
        VALID,
        &env(&[
            ("KEY_A", "k"),
            ("TOLLGATE_KEY_PEPPER", "override-pepper-0123"),
        ]),
    )
    .unwrap();
    assert_eq!(s.security.key_pepper, b"override-pepper-0123");
    let e = error_of(&VALID.replace(
        "key_pepper = \"0123456789abcdef\"",
        "key_pepper = \"short\"",
    ));
    assert_eq!(e.path, "security.key_pepper");
}

#[test]
fn memory_store_requires_embedded() {
    let e = error_of(&VALID.replace(
        "embedded = true",
        "embedded = false\nlisten = \"127.0.0.1:8081\"",
    ));
    assert_eq!(e.path, "redis.url");
    let e = error_of(&VALID.replace("embedded = true", "embedded = false"));
    assert_eq!(e.path, "admin.listen");
}

#[test]
fn duplicates_are_refused() {
    let doubled = VALID.replace(
        "[[groups]]",
        "[[accounts]]\nid = \"a\"\nprovider = \"openai\"\nbase_url = \"http://x/v1\"\napi_key = \"k\"\nmodels = [\"gpt-4o\"]\n\n[[groups]]",
    );
    assert_eq!(error_of(&doubled).path, "accounts[1].id");
}

#[test]
fn shipped_configuration_files_are_valid() {
    let vars = env(&[
        ("DATABASE_URL", "postgres://postgres@127.0.0.1/test"),
        ("REDIS_URL", "redis://127.0.0.1:6379"),
        ("TOLLGATE_KEY_PEPPER", "a-long-enough-pepper"),
        ("OPENAI_KEY_PRIMARY", "sk-1"),
        ("OPENAI_KEY_SECONDARY", "sk-2"),
        ("GEMINI_KEY", "g-1"),
    ]);
    for (name, text) in [
        (
            "quickstart.toml",
            include_str!("../../conf/quickstart.toml"),
        ),
        ("example.toml", include_str!("../../conf/example.toml")),
        ("compose.toml", include_str!("../../conf/compose.toml")),
    ] {
        if let Err(e) = Settings::parse(text, &vars) {
            panic!("conf/{name}: {e}");
        }
    }
}

#[test]
fn forwarded_headers_are_names_and_never_credentials() {
    let with = |list: &str| {
        VALID.replace(
            "models = [\"gpt-4o-mini\"]\n\n[[groups]]",
            &format!("models = [\"gpt-4o-mini\"]\nforward_headers = {list}\n\n[[groups]]"),
        )
    };
    let s = Settings::parse(&with("[\"X-Route\"]"), &env(&[("KEY_A", "sk-a")])).unwrap();
    assert_eq!(s.accounts[0].forward_headers, vec!["x-route".to_string()]);
    let e = error_of(&with("[\"ok\", \"Authorization\"]"));
    assert_eq!(e.path, "accounts[0].forward_headers[1]");
    assert!(e.message.contains("never forwarded"), "{e}");
    let e = error_of(&with("[\"bad header\"]"));
    assert_eq!(e.path, "accounts[0].forward_headers[0]");
    assert!(e.message.contains("not a header name"), "{e}");
    let e = error_of(&VALID.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\nrequest_body_timeout_ms = 0",
    ));
    assert_eq!(e.path, "server.request_body_timeout_ms");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary text never panics the loader: settings or an error naming a key path.
        #[test]
        fn arbitrary_configuration_text(text in ".{0,400}") {
            let _ = Settings::parse(&text, &|_| None);
        }

        /// A valid file with one value replaced by arbitrary text: no panic.
        #[test]
        fn valid_file_with_an_arbitrary_value(value in "[ -~]{0,20}") {
            let text = VALID.replace("0.15", &value);
            let _ = Settings::parse(&text, &env(&[("KEY_A", "sk-a")]));
        }
    }
}

/// `VALID` with an image model `img` (extra `[[models]]` lines `options`) served by accounts
/// of `providers` (each also naming the text model it already serves).
fn with_image(options: &str, providers: &[&str]) -> String {
    let mut text = VALID.replace(
        "[[accounts]]",
        &format!(
            "[[models]]\nid = \"img\"\nfamily = \"img\"\nkind = \"image\"\nper_image = 0.04\n{options}\n\n[[accounts]]"
        ),
    );
    for (i, p) in providers.iter().enumerate() {
        text.push_str(&format!(
            "\n[[accounts]]\nid = \"i{i}\"\nprovider = \"{p}\"\nbase_url = \"http://127.0.0.1:9\"\napi_key = \"k\"\nmodels = [\"img\"]\ncapabilities = [\"image_generation\"]\n"
        ));
    }
    text
}

#[test]
fn image_options_and_profiles() {
    let s = parse(&with_image("", &["gemini", "gemini"])).unwrap();
    let img = s.models.iter().find(|m| m.id == "img").unwrap();
    assert_eq!(img.image_aspect_ratios, ["1:1"]);
    assert_eq!(img.image_sizes, ["1K"]);
    let s = parse(&with_image(
        "image_aspect_ratios = [\"1:1\", \"16:9\"]\nimage_sizes = [\"1K\", \"2K\"]",
        &["gemini"],
    ))
    .unwrap();
    let img = s.models.iter().find(|m| m.id == "img").unwrap();
    assert_eq!(img.image_aspect_ratios, ["1:1", "16:9"]);
    assert!(parse(&with_image("", &["openai"])).is_ok());
    for (options, providers, path) in [
        (
            "image_aspect_ratios = [\"wide\"]",
            vec!["gemini"],
            "models[2].image_aspect_ratios[0]",
        ),
        (
            "image_aspect_ratios = [\"0:1\"]",
            vec!["gemini"],
            "models[2].image_aspect_ratios[0]",
        ),
        (
            "image_aspect_ratios = []",
            vec!["gemini"],
            "models[2].image_aspect_ratios",
        ),
        (
            "image_sizes = [\"1K\", \"1K\"]",
            vec!["gemini"],
            "models[2].image_sizes[1]",
        ),
        (
            "image_sizes = [\"8K\"]",
            vec!["gemini"],
            "models[2].image_sizes[0]",
        ),
        ("", vec!["gemini", "openai"], "accounts[2].models[0]"),
        ("", vec!["anthropic"], "accounts[1].models[0]"),
    ] {
        let e = error_of(&with_image(options, &providers));
        assert_eq!(e.path, path, "{options} {providers:?}: {e}");
    }
    let e = error_of(&VALID.replace(
        "output_per_mtok = \"0.60\"",
        "output_per_mtok = \"0.60\"\nimage_sizes = [\"1K\"]",
    ));
    assert_eq!(e.path, "models[0].image_sizes");
}

/// `VALID` plus an embedding model `emb` with `prices`, listed by one account per provider.
fn with_embedding(prices: &str, providers: &[&str]) -> String {
    let mut text = VALID.replace(
        "[[accounts]]",
        &format!(
            "[[models]]\nid = \"emb\"\nfamily = \"emb\"\nkind = \"embedding\"\n{prices}\n\n[[accounts]]"
        ),
    );
    for (i, p) in providers.iter().enumerate() {
        text.push_str(&format!(
            "\n[[accounts]]\nid = \"e{i}\"\nprovider = \"{p}\"\nbase_url = \"http://127.0.0.1:9\"\napi_key = \"k\"\nmodels = [\"emb\"]\n"
        ));
    }
    text
}

#[test]
fn embedding_models_are_priced_on_input_and_served_by_openai_or_gemini() {
    let s = parse(&with_embedding(
        "input_per_mtok = 0.02",
        &["openai", "gemini"],
    ))
    .unwrap();
    let emb = s.models.iter().find(|m| m.id == "emb").unwrap();
    assert_eq!(emb.kind, crate::ModelKind::Embedding);
    assert_eq!(emb.prices.output_per_mtok, None);
    for (prices, providers, path) in [
        ("", vec!["openai"], "models[2].input_per_mtok"),
        (
            "input_per_mtok = 0.02\noutput_per_mtok = 0.1",
            vec!["openai"],
            "models[2].output_per_mtok",
        ),
        (
            "input_per_mtok = 0.02",
            vec!["openai", "anthropic"],
            "accounts[2].models[0]",
        ),
    ] {
        let e = error_of(&with_embedding(prices, &providers));
        assert_eq!(e.path, path, "{prices} {providers:?}: {e}");
    }
}

#[test]
fn key_cache_defaults_and_is_bounded() {
    let with = |extra: &str| {
        VALID.replace(
            "[admin]",
            &format!("[redis]\nurl = \"redis://127.0.0.1:6379\"\n{extra}\n[admin]"),
        )
    };
    let s = parse(&with("")).unwrap();
    assert_eq!(s.redis.unwrap().key_cache_ms, crate::DEFAULT_KEY_CACHE_MS);
    assert_eq!(
        parse(&with("key_cache_ms = 0"))
            .unwrap()
            .redis
            .unwrap()
            .key_cache_ms,
        0
    );
    let e = error_of(&with("key_cache_ms = 60001"));
    assert_eq!(e.path, "redis.key_cache_ms");
    assert!(e.message.contains("60000"), "{}", e.message);
}

/// The supplier's usage report of an account: its admin key a secret (kept out of `Debug`), its
/// key id checked, refused on gemini accounts; `[reconciliation]`'s bounds.
#[test]
fn usage_reports_and_reconciliation_are_checked() {
    let s = parse(VALID).unwrap();
    assert!(s.accounts[0].usage_report.is_none());
    assert_eq!(s.reconciliation.supplier_interval_ms, 3_600_000);
    assert_eq!(s.reconciliation.supplier_days, 2);
    assert_eq!(s.reconciliation.drift_tolerance, 0.01);
    let account = |lines: &str| {
        VALID.replace(
            "api_key = \"env:KEY_A\"",
            &format!("api_key = \"env:KEY_A\"\n{lines}"),
        )
    };
    let a = parse(&account(
        "usage_report_key = \"sk-admin-secret\"\nusage_report_api_key_id = \"key_abc\"",
    ))
    .unwrap();
    let report = a.accounts[0].usage_report.as_ref().unwrap();
    assert_eq!(report.admin_key, "sk-admin-secret");
    assert_eq!(report.api_key_id.as_deref(), Some("key_abc"));
    assert!(!format!("{:?}", a.accounts[0]).contains("sk-admin-secret"));
    for (bad, path) in [
        (
            "usage_report_api_key_id = \"key_abc\"",
            "usage_report_api_key_id",
        ),
        ("usage_report_key = \"\"", "usage_report_key"),
        (
            "usage_report_key = \"k\"\nusage_report_api_key_id = \"a b\"",
            "usage_report_api_key_id",
        ),
    ] {
        let e = error_of(&account(bad));
        assert_eq!(e.path, format!("accounts[0].{path}"), "{bad}: {e}");
    }
    let gemini = account("usage_report_key = \"k\"").replacen(
        "provider = \"openai\"",
        "provider = \"gemini\"",
        1,
    );
    assert_eq!(error_of(&gemini).path, "accounts[0].usage_report_key");
    let with = |line: &str| format!("[reconciliation]\n{line}\n{VALID}");
    let r = parse(&with(
        "supplier_interval_ms = 0\nsupplier_days = 7\ndrift_tolerance = 0",
    ))
    .unwrap();
    assert_eq!(
        (
            r.reconciliation.supplier_interval_ms,
            r.reconciliation.supplier_days
        ),
        (0, 7)
    );
    for (bad, path) in [
        ("supplier_interval_ms = 5", "supplier_interval_ms"),
        ("supplier_days = 0", "supplier_days"),
        ("supplier_days = 32", "supplier_days"),
        ("drift_tolerance = 1.5", "drift_tolerance"),
    ] {
        assert_eq!(
            error_of(&with(bad)).path,
            format!("reconciliation.{path}"),
            "{bad}"
        );
    }
}

/// `conf/example.toml` (what `proxy --print-default-config` prints) lists every setting the file
/// format knows, in its section, set or commented out: a new key in a section's raw type without
/// its line in the example fails here.
#[test]
fn the_example_lists_every_setting() {
    let example = include_str!("../../conf/example.toml");
    // Each section's raw type is in its own file.
    let files = [
        include_str!("server.rs"),
        include_str!("admin.rs"),
        include_str!("metrics.rs"),
        include_str!("telemetry.rs"),
        include_str!("console.rs"),
        include_str!("database.rs"),
        include_str!("redis.rs"),
        include_str!("security.rs"),
        include_str!("routing.rs"),
        include_str!("money.rs"),
        include_str!("video.rs"),
        include_str!("mail.rs"),
        include_str!("payments.rs"),
        include_str!("batches.rs"),
        include_str!("reconciliation.rs"),
        include_str!("models.rs"),
        include_str!("accounts.rs"),
        include_str!("groups.rs"),
    ];
    // Section name → the example's text under it (every `[name]` / `[[name]]` block).
    let mut sections: HashMap<String, String> = HashMap::new();
    let mut current = String::new();
    for line in example.lines() {
        let t = line.trim();
        if t.starts_with('[') && !t.starts_with("[=") {
            current = t.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        sections
            .entry(current.clone())
            .or_default()
            .push_str(&format!("{t}\n"));
    }
    let structs = [
        ("RawServer", "server"),
        ("RawAdmin", "admin"),
        ("RawMetrics", "metrics"),
        ("RawTelemetry", "telemetry"),
        ("RawConsole", "console"),
        ("RawDatabase", "database"),
        ("RawRedis", "redis"),
        ("RawSecurity", "security"),
        ("RawRouting", "routing"),
        ("RawMoney", "money"),
        ("RawVideo", "video"),
        ("RawMail", "mail"),
        ("RawPayments", "payments"),
        ("RawBatches", "batches"),
        ("RawReconciliation", "reconciliation"),
        ("RawModel", "models"),
        ("RawAccount", "accounts"),
        ("RawGroup", "groups"),
    ];
    let mut missing = Vec::new();
    for ((name, section), raw) in structs.into_iter().zip(files) {
        let start = raw
            .find(&format!("pub(crate) struct {name} {{"))
            .unwrap_or_else(|| panic!("{name} not in the [{section}] section's file"));
        let body = &raw[start..start + raw[start..].find("\n}").unwrap()];
        let text = sections
            .get(section)
            .unwrap_or_else(|| panic!("no [{section}] in the example"));
        for field in body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub "))
            .filter_map(|l| l.split_once(':').map(|(f, _)| f.trim()))
        {
            let listed = text.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.starts_with(&format!("{field} =")) || l.starts_with(&format!("{field}="))
            });
            if !listed {
                missing.push(format!("{section}.{field}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in conf/example.toml: {missing:?}");
}

#[test]
fn a_redis_cluster_is_named_by_its_seeds_instead_of_a_url() {
    let with = |section: &str| VALID.replace("[admin]", &format!("[redis]\n{section}\n[admin]"));
    let s = parse(&with(
        r#"cluster = ["redis://127.0.0.1:7100", "redis://127.0.0.1:7101"]"#,
    ))
    .unwrap();
    let redis = s.redis.unwrap();
    assert_eq!(
        redis.cluster,
        ["redis://127.0.0.1:7100", "redis://127.0.0.1:7101"]
    );
    assert!(redis.url.is_empty());
    for (section, path) in [
        ("cluster = []", "redis.cluster"),
        (r#"cluster = ["127.0.0.1:7100"]"#, "redis.cluster"),
        (
            "url = \"redis://127.0.0.1:6379\"\ncluster = [\"redis://127.0.0.1:7100\"]",
            "redis.url",
        ),
        ("key_prefix = \"t:\"", "redis.url"),
    ] {
        assert_eq!(error_of(&with(section)).path, path, "{section}");
    }
    // TOLLGATE_REDIS_URL names one server: it cannot be combined with a cluster.
    let vars = env(&[
        ("KEY_A", "sk-a"),
        ("TOLLGATE_REDIS_URL", "redis://127.0.0.1:6379"),
    ]);
    let e = Settings::parse(&with(r#"cluster = ["redis://127.0.0.1:7100"]"#), &vars).unwrap_err();
    assert_eq!(e.path, "redis.cluster");
}

#[test]
fn usage_retention_is_a_bounded_number_of_days_or_absent() {
    let with = |line: &str| {
        VALID.replace(
            "url = \"sqlite::memory:\"",
            &format!("url = \"sqlite::memory:\"\n{line}"),
        )
    };
    assert_eq!(
        parse(VALID).unwrap().database.unwrap().usage_retention_days,
        None
    );
    let s = parse(&with("usage_retention_days = 400")).unwrap();
    assert_eq!(s.database.unwrap().usage_retention_days, Some(400));
    for bad in [
        "usage_retention_days = 0",
        "usage_retention_days = 36501",
        "usage_retention_days = -1",
        "usage_retention_days = \"a year\"",
    ] {
        assert_eq!(
            error_of(&with(bad)).path,
            "database.usage_retention_days",
            "{bad}"
        );
    }
}

#[test]
fn metrics_labels_are_capped_and_addresses_checked() {
    let with = |extra: &str| {
        VALID.replace(
            "[database]",
            &format!("[metrics]\nlisten = \"127.0.0.1:9090\"\n{extra}\n\n[database]"),
        )
    };
    let s = parse(&with("")).unwrap();
    let m = s.metrics.unwrap();
    assert_eq!((m.admin_listen, m.organization_labels), (None, 0));
    let s = parse(&with(
        "admin_listen = \"127.0.0.1:9091\"\norganization_labels = 50",
    ))
    .unwrap();
    let m = s.metrics.unwrap();
    assert_eq!(m.admin_listen, Some("127.0.0.1:9091".parse().unwrap()));
    assert_eq!(m.organization_labels, 50);
    let e = error_of(&with("organization_labels = 1001"));
    assert_eq!(e.path, "metrics.organization_labels");
    let e = error_of(&with("admin_listen = \"localhost:1\""));
    assert_eq!(e.path, "metrics.admin_listen");
}

#[test]
fn telemetry_is_off_by_default_and_checked_when_on() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.telemetry, Telemetry::default());
    assert_eq!(s.telemetry.traces_url(), None);
    let with =
        |body: &str| VALID.replace("[database]", &format!("[telemetry]\n{body}\n\n[database]"));
    let s = parse(&with(
        "otlp_endpoint = \"http://127.0.0.1:4318/\"\nsample_ratio = 0.25\nservice_name = \"edge-eu\"",
    ))
    .unwrap();
    assert_eq!(
        s.telemetry.traces_url().as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );
    assert_eq!(
        (s.telemetry.sample_ratio, s.telemetry.service_name.as_str()),
        (0.25, "edge-eu")
    );
    for (body, path) in [
        (
            "otlp_endpoint = \"127.0.0.1:4318\"",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"ftp://collector\"",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"http://user:pw@collector\"",
            "telemetry.otlp_endpoint",
        ),
        ("sample_ratio = 1.5", "telemetry.sample_ratio"),
        ("sample_ratio = -0.1", "telemetry.sample_ratio"),
        ("service_name = \"\"", "telemetry.service_name"),
        ("endpoint = \"http://x\"", "telemetry.endpoint"),
    ] {
        let e = error_of(&with(body));
        assert!(e.path.starts_with(path), "{body}: {e:?}");
    }
    assert!(
        !s.accounts[0].forward_traceparent,
        "off unless the account allows it"
    );
    let s = parse(&VALID.replace(
        "api_key = \"env:KEY_A\"",
        "api_key = \"env:KEY_A\"\nforward_traceparent = true",
    ))
    .unwrap();
    assert!(s.accounts[0].forward_traceparent);
}

#[test]
fn console_sessions_and_trusted_proxies_are_checked() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.console, Console::default());
    assert_eq!(s.console.session_idle_minutes, 30);
    assert_eq!(s.console.session_absolute_hours, 12);
    assert!(s.server.trusted_proxies.is_empty());
    let with =
        |body: &str| VALID.replace("[database]", &format!("[console]\n{body}\n\n[database]"));
    let s = parse(&with(
        "session_idle_minutes = 10\nsession_absolute_hours = 2\nrequire_two_factor = true",
    ))
    .unwrap();
    assert_eq!(
        (
            s.console.session_idle_minutes,
            s.console.session_absolute_hours,
            s.console.require_two_factor
        ),
        (10, 2, true)
    );
    for (body, path) in [
        ("session_idle_minutes = 0", "console.session_idle_minutes"),
        (
            "session_idle_minutes = 1441",
            "console.session_idle_minutes",
        ),
        (
            "session_absolute_hours = 0",
            "console.session_absolute_hours",
        ),
        (
            "session_idle_minutes = 600\nsession_absolute_hours = 2",
            "console.session_absolute_hours",
        ),
        ("sessions = 1", "console.sessions"),
    ] {
        let e = error_of(&with(body));
        assert!(e.path.starts_with(path), "{body}: {e:?}");
    }
    let proxies = |list: &str| {
        VALID.replace(
            "listen = \"127.0.0.1:8080\"",
            &format!("listen = \"127.0.0.1:8080\"\ntrusted_proxies = {list}"),
        )
    };
    let e = error_of(&proxies("[\"10.0.0.0/8\", \"not a network\"]"));
    assert_eq!(e.path, "server.trusted_proxies[1]", "{e:?}");
    let s = parse(&proxies(
        "[\"10.0.0.0/8\", \"192.0.2.1\", \"2001:db8::/32\"]",
    ))
    .unwrap();
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let server = &s.server;
    // Not from a trusted proxy: the peer, whatever it forwarded.
    assert_eq!(
        server.client_ip(ip("203.0.113.9"), ["1.1.1.1"].into_iter()),
        ip("203.0.113.9")
    );
    // From a trusted proxy: the right-most untrusted entry.
    assert_eq!(
        server.client_ip(
            ip("10.1.2.3"),
            ["6.6.6.6, 198.51.100.4, 10.9.9.9"].into_iter()
        ),
        ip("198.51.100.4")
    );
    assert_eq!(
        server.client_ip(ip("10.1.2.3"), ["6.6.6.6", "198.51.100.4"].into_iter()),
        ip("198.51.100.4")
    );
    // Every hop trusted: the left-most; nothing forwarded: the proxy itself.
    assert_eq!(
        server.client_ip(ip("10.1.2.3"), ["10.0.0.7, 192.0.2.1"].into_iter()),
        ip("10.0.0.7")
    );
    assert_eq!(
        server.client_ip(ip("10.1.2.3"), std::iter::empty()),
        ip("10.1.2.3")
    );
    // A forged, unparsable entry stops the walk at the last trusted hop.
    assert_eq!(
        server.client_ip(ip("10.1.2.3"), ["junk, 10.0.0.8"].into_iter()),
        ip("10.0.0.8")
    );
    // IPv4-mapped IPv6 peers are their IPv4 address.
    assert_eq!(
        server.client_ip(ip("::ffff:10.1.2.3"), ["198.51.100.4"].into_iter()),
        ip("198.51.100.4")
    );
}

#[test]
fn webhook_deliveries_have_safe_defaults_and_bounds() {
    let s = parse(VALID).unwrap();
    let w = &s.webhooks;
    assert!(
        !w.allow_private_addresses,
        "the SSRF defences are on by default"
    );
    assert_eq!(
        (w.timeout_ms, w.retry_base_ms, w.retry_window_hours),
        (10_000, 30_000, 72)
    );
    let fast = parse(&format!(
        "{VALID}\n[webhooks]\nallow_private_addresses = true\nretry_base_ms = 200\n"
    ))
    .unwrap();
    assert!(fast.webhooks.allow_private_addresses);
    for (extra, path) in [
        ("timeout_ms = 5", "webhooks.timeout_ms"),
        ("retry_base_ms = 0", "webhooks.retry_base_ms"),
        ("retry_max_ms = 100", "webhooks.retry_max_ms"),
        ("retry_window_hours = 0", "webhooks.retry_window_hours"),
        ("poll_interval_ms = 1", "webhooks.poll_interval_ms"),
        ("allow_private = true", "webhooks.allow_private"),
    ] {
        let e = error_of(&format!("{VALID}\n[webhooks]\n{extra}\n"));
        assert!(e.path.starts_with(path), "{extra}: {e}");
    }
    let production = VALID.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\nenvironment = \"production\"",
    );
    let e = error_of(&format!(
        "{production}\n[webhooks]\nallow_private_addresses = true\n"
    ));
    assert_eq!(e.path, "webhooks.allow_private_addresses", "{e}");
}

/// `[batches]` (issue 46): defaults, and every bound refused with its key; a model's
/// `batch_discount` is a fraction above 0 and at most 1 (default 0.5).
#[test]
fn batches_and_batch_discounts() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.batches.concurrency, 8);
    assert_eq!(s.batches.max_lines, 50_000);
    assert_eq!(s.batches.max_file_bytes, 100 * 1024 * 1024);
    assert_eq!(s.batches.retention_days, 30);
    assert_eq!(s.batches.supplier_lines, 5_000);
    assert_eq!(s.batches.supplier_poll_interval_ms, 30_000);
    assert!(s.batches.gateway_url.is_none());
    assert_eq!(s.batches.slots_of(10), 5);
    assert_eq!(s.batches.slots_of(1), 1);
    assert!(
        s.models
            .iter()
            .all(|m| m.batch_discount == ::money::RateMultiplier::from_ppm(500_000).unwrap())
    );
    for (extra, path) in [
        ("gateway_url = \"https://gw\"", "batches.gateway_url"),
        ("concurrency = 0", "batches.concurrency"),
        ("yield_above = 0.0", "batches.yield_above"),
        ("yield_above = 1.5", "batches.yield_above"),
        ("max_file_bytes = 10", "batches.max_file_bytes"),
        ("max_lines = 50001", "batches.max_lines"),
        ("retention_days = 0", "batches.retention_days"),
        ("poll_interval_ms = 1", "batches.poll_interval_ms"),
        ("supplier_lines = 0", "batches.supplier_lines"),
        ("supplier_lines = 50001", "batches.supplier_lines"),
        (
            "supplier_poll_interval_ms = 10",
            "batches.supplier_poll_interval_ms",
        ),
        ("unknown = 1", "batches.unknown"),
    ] {
        let e = error_of(&format!("{VALID}\n[batches]\n{extra}\n"));
        assert!(e.path.starts_with(path), "{extra}: {e}");
    }
    let first_model = VALID.find("[[models]]").unwrap();
    let with = |line: &str| {
        let mut text = VALID.to_string();
        let at = first_model + text[first_model..].find('\n').unwrap() + 1;
        text.insert_str(at, &format!("{line}\n"));
        text
    };
    let d = parse(&with("batch_discount = 0.25")).unwrap();
    assert_eq!(
        d.models[0].batch_discount,
        ::money::RateMultiplier::from_ppm(250_000).unwrap()
    );
    for bad in ["batch_discount = 0", "batch_discount = 1.5"] {
        let e = error_of(&with(bad));
        assert_eq!(e.path, "models[0].batch_discount", "{bad}: {e}");
    }
    // The supplier's own batch API: an openai account's capability, no other's.
    let account = |provider: &str| {
        VALID.replace(
            "models = [\"gpt-4o-mini\"]\n\n[[groups]]",
            &format!(
                "models = [\"gpt-4o-mini\"]\ncapabilities = [\"batch\"]\n\n[[accounts]]\nid = \"b\"\nprovider = \"{provider}\"\nbase_url = \"http://127.0.0.1:9\"\napi_key = \"k\"\nmodels = [\"gpt-4o-mini\"]\ncapabilities = [\"batch\"]\n\n[[groups]]"
            ),
        )
    };
    let e = error_of(&account("gemini"));
    assert_eq!(e.path, "accounts[1].capabilities[0]", "{e}");
    assert!(e.to_string().contains("openai and anthropic"), "{e}");
    parse(&account("anthropic")).unwrap();
    let ok = parse(&account("openai")).unwrap();
    assert!(
        ok.accounts
            .iter()
            .all(|a| a.capabilities == [crate::Capability::Batch])
    );
}

#[test]
fn supplier_prices_are_optional_and_checked() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.models[0].supplier_prices, crate::ModelPrices::default());
    assert_eq!(
        s.accounts[0].supplier_price_multiplier,
        ::money::RateMultiplier::ONE
    );
    let first_model = VALID.find("[[models]]").unwrap();
    let with_model = |line: &str| {
        let mut text = VALID.to_string();
        let at = first_model + text[first_model..].find('\n').unwrap() + 1;
        text.insert_str(at, &format!("{line}\n"));
        text
    };
    let d = parse(&with_model(
        "supplier_input_per_mtok = 0.1\nsupplier_output_per_mtok = \"0.4\"\nsupplier_cache_read_per_mtok = 0.05\nsupplier_cache_write_per_mtok = 0.125\nsupplier_cache_write_1h_per_mtok = 0.2\ncache_write_1h_per_mtok = 0.3\nsupplier_per_image = 0.02\nsupplier_per_second = 0.3",
    ))
    .unwrap();
    let p = &d.models[0].supplier_prices;
    assert_eq!(
        p.input_per_mtok,
        Some(::money::NanoUsd::from_nanos(100_000_000))
    );
    assert_eq!(
        p.output_per_mtok,
        Some(::money::NanoUsd::from_nanos(400_000_000))
    );
    assert_eq!(
        p.cached_input_per_mtok,
        Some(::money::NanoUsd::from_nanos(50_000_000))
    );
    assert_eq!(
        p.cache_write_per_mtok,
        Some(::money::NanoUsd::from_nanos(125_000_000))
    );
    assert_eq!(p.per_image, Some(::money::NanoUsd::from_nanos(20_000_000)));
    assert_eq!(
        p.cache_write_1h_per_mtok,
        Some(::money::NanoUsd::from_nanos(200_000_000))
    );
    assert_eq!(
        d.models[0].prices.cache_write_1h_per_mtok,
        Some(::money::NanoUsd::from_nanos(300_000_000))
    );
    assert_eq!(
        p.per_second,
        Some(::money::NanoUsd::from_nanos(300_000_000))
    );
    assert_eq!(
        s.models[0].supplier_batch_discount,
        ::money::RateMultiplier::from_ppm(500_000).unwrap()
    );
    let d = parse(&with_model("supplier_batch_discount = 0.6")).unwrap();
    assert_eq!(
        d.models[0].supplier_batch_discount,
        ::money::RateMultiplier::from_ppm(600_000).unwrap()
    );
    for bad in [
        "supplier_input_per_mtok = -1",
        "supplier_per_image = \"x\"",
        "supplier_batch_discount = 1.5",
        "supplier_batch_discount = 0",
    ] {
        let e = error_of(&with_model(bad));
        assert!(e.path.starts_with("models[0].supplier_"), "{bad}: {e}");
    }
    let account = |line: &str| {
        VALID.replace(
            "api_key = \"env:KEY_A\"",
            &format!("api_key = \"env:KEY_A\"\n{line}"),
        )
    };
    let a = parse(&account("supplier_price_multiplier = 0.8")).unwrap();
    assert_eq!(
        a.accounts[0].supplier_price_multiplier,
        ::money::RateMultiplier::from_ppm(800_000).unwrap()
    );
    for bad in [
        "supplier_price_multiplier = 0",
        "supplier_price_multiplier = 11",
    ] {
        let e = error_of(&account(bad));
        assert_eq!(
            e.path, "accounts[0].supplier_price_multiplier",
            "{bad}: {e}"
        );
    }
}

#[test]
fn failover_hold_is_bounded() {
    let s = parse(VALID).unwrap();
    assert_eq!(
        (s.routing.failover_hold_bytes, s.routing.failover_hold_ms),
        (65_536, 1_000)
    );
    let with = |lines: &str| format!("{VALID}\n[routing]\n{lines}\n");
    let off = parse(&with("failover_hold_bytes = 0\nfailover_hold_ms = 0")).unwrap();
    assert_eq!(off.routing.failover_hold_bytes, 0);
    let e = error_of(&with("failover_hold_bytes = 1048577"));
    assert_eq!(e.path, "routing.failover_hold_bytes");
    let e = error_of(&with("failover_hold_ms = 60001"));
    assert_eq!(e.path, "routing.failover_hold_ms");
    let e = error_of(&with("failover_hold_ms = -1"));
    assert_eq!(e.path, "routing.failover_hold_ms");
}
