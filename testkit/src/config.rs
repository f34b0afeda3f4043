//! A typed builder of test configurations. It renders the operator's TOML and parses it with the
//! real loader ([`TestConfig::settings`]), so a test configuration is always a valid file.

use settings::Settings;
use std::fmt::Write as _;
use std::sync::Arc;

/// One `[[models]]` entry.
#[derive(Debug, Clone)]
pub struct Model {
    pub id: String,
    pub family: String,
    pub kind: &'static str,
    pub author: Option<String>,
    /// Price keys and their USD values (`input_per_mtok`, `per_minute_audio`, …).
    pub prices: Vec<(&'static str, f64)>,
    pub downgrade_to: Option<String>,
    /// `image_aspect_ratios` and `image_sizes` (image models; `None`: the defaults).
    pub image_aspect_ratios: Option<Vec<String>>,
    pub image_sizes: Option<Vec<String>>,
    /// Further `key = value` lines, written as given (video options, for instance).
    pub extra: Vec<String>,
}

impl Model {
    /// A text model priced per million input and output tokens.
    pub fn text(id: &str, input_per_mtok: f64, output_per_mtok: f64) -> Model {
        Model {
            id: id.into(),
            family: id.into(),
            kind: "text",
            author: None,
            prices: vec![
                ("input_per_mtok", input_per_mtok),
                ("output_per_mtok", output_per_mtok),
            ],
            downgrade_to: None,
            image_aspect_ratios: None,
            image_sizes: None,
            extra: Vec::new(),
        }
    }

    /// `gpt-4o-mini` at its list price (0.15 / 0.60 USD per million tokens), family `gpt-4o`.
    pub fn gpt_4o_mini() -> Model {
        Model::text("gpt-4o-mini", 0.15, 0.6).family("gpt-4o")
    }

    /// An audio model priced per minute.
    pub fn audio(id: &str, per_minute: f64) -> Model {
        Model {
            id: id.into(),
            family: id.into(),
            kind: "audio",
            author: None,
            prices: vec![("per_minute_audio", per_minute)],
            downgrade_to: None,
            image_aspect_ratios: None,
            image_sizes: None,
            extra: Vec::new(),
        }
    }

    /// An image model priced per image.
    pub fn image(id: &str, per_image: f64) -> Model {
        Model {
            kind: "image",
            prices: vec![("per_image", per_image)],
            ..Model::audio(id, 0.0)
        }
    }

    /// A video model priced per second (the default durations and resolutions unless set with
    /// [`Model::line`]).
    pub fn video(id: &str, per_second: f64) -> Model {
        Model {
            kind: "video",
            prices: vec![("per_second", per_second)],
            ..Model::audio(id, 0.0)
        }
    }

    /// An embedding model priced per million input tokens.
    pub fn embedding(id: &str, input_per_mtok: f64) -> Model {
        Model {
            kind: "embedding",
            prices: vec![("input_per_mtok", input_per_mtok)],
            ..Model::audio(id, 0.0)
        }
    }

    /// Adds one `key = value` line to the entry (`video_durations = [4, 8]`).
    pub fn line(mut self, line: &str) -> Model {
        self.extra.push(line.to_string());
        self
    }

    /// The native aspect ratios of an image model (`image_aspect_ratios`).
    pub fn aspect_ratios(mut self, ratios: &[&str]) -> Model {
        self.image_aspect_ratios = Some(ratios.iter().map(|r| r.to_string()).collect());
        self
    }

    /// The native image sizes of an image model (`image_sizes`).
    pub fn image_sizes(mut self, sizes: &[&str]) -> Model {
        self.image_sizes = Some(sizes.iter().map(|r| r.to_string()).collect());
        self
    }

    pub fn family(mut self, family: &str) -> Model {
        self.family = family.into();
        self
    }

    pub fn author(mut self, author: &str) -> Model {
        self.author = Some(author.into());
        self
    }

    pub fn downgrade_to(mut self, id: &str) -> Model {
        self.downgrade_to = Some(id.into());
        self
    }
}

/// The request headers that steer the mock supplier (`mock-supplier`'s crate docs).
pub const MOCK_CONTROL_HEADERS: [&str; 7] = [
    "x-mock-usage",
    "x-mock-events",
    "x-mock-delay-ms",
    "x-mock-audio-seconds",
    "x-mock-images",
    "x-mock-video",
    "x-mock-pad-bytes",
];

/// One `[[accounts]]` entry.
#[derive(Debug, Clone)]
pub struct Account {
    pub id: String,
    pub provider: &'static str,
    pub base_url: String,
    pub api_key: String,
    pub models: Vec<String>,
    pub capabilities: Vec<String>,
    pub max_concurrency: Option<u32>,
    /// `forward_headers`: by default the mock supplier's control headers, so a test can steer the
    /// mock through the gateway (which forwards only an allowlist).
    pub forward_headers: Vec<String>,
    /// `forward_traceparent`.
    pub forward_traceparent: bool,
    /// `supplier_price_multiplier` (issue 47).
    pub supplier_price_multiplier: Option<f64>,
    /// Further `key = value` lines, written as given.
    pub extra: Vec<String>,
}

impl Account {
    /// An OpenAI-format account at `base_url` serving `models`.
    pub fn openai(id: &str, base_url: &str, models: &[&str]) -> Account {
        Account {
            id: id.into(),
            provider: "openai",
            base_url: base_url.into(),
            api_key: "sk-mock-supplier".into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            capabilities: Vec::new(),
            max_concurrency: None,
            forward_headers: MOCK_CONTROL_HEADERS.iter().map(|h| h.to_string()).collect(),
            forward_traceparent: false,
            supplier_price_multiplier: None,
            extra: Vec::new(),
        }
    }

    /// An Anthropic-format account at `base_url` (the mock's root, `http://ADDR`).
    pub fn anthropic(id: &str, base_url: &str, models: &[&str]) -> Account {
        Account {
            provider: "anthropic",
            ..Account::openai(id, base_url, models)
        }
    }

    /// A Gemini-format account at `base_url` (the mock's root, `http://ADDR`).
    pub fn gemini(id: &str, base_url: &str, models: &[&str]) -> Account {
        Account {
            provider: "gemini",
            ..Account::openai(id, base_url, models)
        }
    }

    pub fn api_key(mut self, key: &str) -> Account {
        self.api_key = key.into();
        self
    }

    pub fn capability(mut self, capability: &str) -> Account {
        self.capabilities.push(capability.into());
        self
    }

    pub fn max_concurrency(mut self, n: u32) -> Account {
        self.max_concurrency = Some(n);
        self
    }

    /// Adds one `key = value` line to the entry (`usage_report_key = "…"`).
    pub fn line(mut self, line: &str) -> Account {
        self.extra.push(line.to_string());
        self
    }

    /// The share of the models' supplier prices the account pays (`supplier_price_multiplier`).
    pub fn supplier_price_multiplier(mut self, m: f64) -> Account {
        self.supplier_price_multiplier = Some(m);
        self
    }

    /// The account receives a traced call's `traceparent`.
    pub fn forward_traceparent(mut self) -> Account {
        self.forward_traceparent = true;
        self
    }
}

/// One `[[groups]]` entry.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub models: Vec<String>,
    pub wholesale_rate_multiplier: f64,
    /// `features` (`video`, `google_alias`, `codex`).
    pub features: Vec<String>,
}

impl Group {
    /// Group `id` exposing `models`, wholesale at the official price.
    pub fn new(id: i64, models: &[&str]) -> Group {
        Group {
            id,
            name: format!("Group {id}"),
            models: models.iter().map(|m| m.to_string()).collect(),
            wholesale_rate_multiplier: 1.0,
            features: Vec::new(),
        }
    }

    pub fn feature(mut self, feature: &str) -> Group {
        self.features.push(feature.into());
        self
    }

    pub fn wholesale(mut self, multiplier: f64) -> Group {
        self.wholesale_rate_multiplier = multiplier;
        self
    }
}

/// A whole configuration file.
#[derive(Debug, Clone)]
pub struct TestConfig {
    /// Keys of the scalar sections, in order: (`section`, `key`, TOML value).
    values: Vec<(&'static str, &'static str, String)>,
    pub models: Vec<Model>,
    pub accounts: Vec<Account>,
    pub groups: Vec<Group>,
}

impl TestConfig {
    /// An embedded deployment on loopback port 0: in-memory store, in-memory SQLite, the test
    /// pepper, invitation mails into a temporary outbox, development keys.
    pub fn embedded() -> TestConfig {
        let outbox = crate::temp_dir("outbox");
        TestConfig {
            values: Vec::new(),
            models: Vec::new(),
            accounts: Vec::new(),
            groups: Vec::new(),
        }
        .set("server", "listen", "127.0.0.1:0")
        .set("server", "environment", "development")
        .set("admin", "embedded", true)
        .set("database", "url", "sqlite::memory:")
        .set("security", "key_pepper", crate::PEPPER)
        .set("mail", "outbox_dir", outbox.display().to_string())
    }

    /// Sets `[section] key = value` (replacing an earlier value of the same key).
    pub fn set(mut self, section: &'static str, key: &'static str, value: impl TomlValue) -> Self {
        let value = value.toml();
        match self
            .values
            .iter_mut()
            .find(|(s, k, _)| *s == section && *k == key)
        {
            Some(entry) => entry.2 = value,
            None => self.values.push((section, key, value)),
        }
        self
    }

    /// Removes `[section] key`.
    pub fn unset(mut self, section: &'static str, key: &'static str) -> Self {
        self.values
            .retain(|(s, k, _)| !(*s == section && *k == key));
        self
    }

    /// The ledger database (`[database] url`).
    pub fn database(self, url: &str) -> Self {
        self.set("database", "url", url)
    }

    /// The operational store on Redis under `prefix`.
    pub fn redis(self, url: &str, prefix: &str) -> Self {
        self.set("redis", "url", url)
            .set("redis", "key_prefix", prefix)
    }

    /// `[redis] cluster` (seed nodes) instead of `url`.
    pub fn redis_cluster(self, seeds: &[String], prefix: &str) -> Self {
        self.unset("redis", "url")
            .set("redis", "cluster", seeds.to_vec())
            .set("redis", "key_prefix", prefix)
    }

    pub fn model(mut self, model: Model) -> Self {
        self.models.push(model);
        self
    }

    pub fn account(mut self, account: Account) -> Self {
        self.accounts.push(account);
        self
    }

    pub fn group(mut self, group: Group) -> Self {
        self.groups.push(group);
        self
    }

    /// The TOML file.
    pub fn toml(&self) -> String {
        let mut out = String::new();
        let mut sections: Vec<&str> = Vec::new();
        for (s, _, _) in &self.values {
            if !sections.contains(s) {
                sections.push(s);
            }
        }
        for section in sections {
            let _ = writeln!(out, "[{section}]");
            for (_, k, v) in self.values.iter().filter(|(s, _, _)| *s == section) {
                let _ = writeln!(out, "{k} = {v}");
            }
        }
        for m in &self.models {
            let _ = writeln!(out, "\n[[models]]");
            let _ = writeln!(out, "id = {}", m.id.toml());
            let _ = writeln!(out, "family = {}", m.family.toml());
            let _ = writeln!(out, "kind = {}", m.kind.toml());
            if let Some(a) = &m.author {
                let _ = writeln!(out, "author = {}", a.toml());
            }
            for (k, v) in &m.prices {
                let _ = writeln!(out, "{k} = {v}");
            }
            if let Some(d) = &m.downgrade_to {
                let _ = writeln!(out, "downgrade_to = {}", d.toml());
            }
            if let Some(r) = &m.image_aspect_ratios {
                let _ = writeln!(out, "image_aspect_ratios = {}", r.toml());
            }
            if let Some(r) = &m.image_sizes {
                let _ = writeln!(out, "image_sizes = {}", r.toml());
            }
            for line in &m.extra {
                let _ = writeln!(out, "{line}");
            }
        }
        for a in &self.accounts {
            account_toml(&mut out, a);
        }
        for g in &self.groups {
            let _ = writeln!(out, "\n[[groups]]");
            let _ = writeln!(out, "id = {}", g.id);
            let _ = writeln!(out, "name = {}", g.name.toml());
            let _ = writeln!(out, "product_code = {}", format!("g{}", g.id).toml());
            let _ = writeln!(out, "models = {}", g.models.toml());
            let _ = writeln!(
                out,
                "wholesale_rate_multiplier = {}",
                g.wholesale_rate_multiplier
            );
            if !g.features.is_empty() {
                let _ = writeln!(out, "features = {}", g.features.toml());
            }
        }
        out
    }

    /// The validated settings (the file through the real loader; no environment overrides).
    pub fn settings(&self) -> Arc<Settings> {
        let text = self.toml();
        match Settings::parse(&text, &|_| None) {
            Ok(s) => Arc::new(s),
            Err(e) => panic!("test configuration refused: {e}\n{text}"),
        }
    }
}

/// A value written into the TOML file.
pub trait TomlValue {
    fn toml(&self) -> String;
}

impl TomlValue for &str {
    fn toml(&self) -> String {
        let mut s = String::from("\"");
        for c in self.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
        s
    }
}

impl TomlValue for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}

impl TomlValue for bool {
    fn toml(&self) -> String {
        self.to_string()
    }
}

impl TomlValue for u64 {
    fn toml(&self) -> String {
        self.to_string()
    }
}

impl TomlValue for f64 {
    fn toml(&self) -> String {
        self.to_string()
    }
}

impl TomlValue for Vec<String> {
    fn toml(&self) -> String {
        let items: Vec<String> = self.iter().map(TomlValue::toml).collect();
        format!("[{}]", items.join(", "))
    }
}

/// One `[[accounts]]` entry.
fn account_toml(out: &mut String, a: &Account) {
    let _ = writeln!(out, "\n[[accounts]]");
    let _ = writeln!(out, "id = {}", a.id.toml());
    let _ = writeln!(out, "provider = {}", a.provider.toml());
    let _ = writeln!(out, "base_url = {}", a.base_url.toml());
    let _ = writeln!(out, "api_key = {}", a.api_key.toml());
    let _ = writeln!(out, "models = {}", a.models.toml());
    if !a.capabilities.is_empty() {
        let _ = writeln!(out, "capabilities = {}", a.capabilities.toml());
    }
    if a.forward_traceparent {
        let _ = writeln!(out, "forward_traceparent = true");
    }
    if !a.forward_headers.is_empty() {
        let _ = writeln!(out, "forward_headers = {}", a.forward_headers.toml());
    }
    if let Some(n) = a.max_concurrency {
        let _ = writeln!(out, "max_concurrency = {n}");
    }
    if let Some(m) = a.supplier_price_multiplier {
        let _ = writeln!(out, "supplier_price_multiplier = {m}");
    }
    for line in &a.extra {
        let _ = writeln!(out, "{line}");
    }
}
