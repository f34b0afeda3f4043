//! The Redis key schema, in one place. Every key starts with the deployment's prefix (tests use a
//! unique prefix each). Per-organization keys (wallets, later) carry a `{org:ID}` hash tag so Redis
//! Cluster keeps one organization on one shard.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}{keydir}` | hash | key hash → JSON [`crate::KeyRecord`] |
//! | `{prefix}{keydir}:changes` | pub/sub channel | each change of the directory: the key hash, or `*` for all |
//! | `{prefix}{keydir}:loaded` | string | `1` once the key directory was loaded from the database |
//! | `{prefix}{rl:NAME}` | hash | fixed-window counter `NAME`: `w` window index, `c` count |
//! | `{prefix}{org:N}:wallet` | hash | wallet mirror of organization N: `balance`, `reserved` (nano-USD) |
//! | `{prefix}{org:N}:holds` | hash | open holds: hold id → `amount:deadline_ms` |
//! | `{prefix}{org:N}:adjusted` | set | references of balance adjustments already applied |
//! | `{prefix}{org:N}:holdmeta` | hash | hold id → the gateway's description of the call |
//! | `{prefix}{org:N}:confirmed` | sorted set | confirmed charges (hold id → ms), kept 10 minutes |
//! | `{prefix}{wallets}:holding` | set | organizations that have held money (reconciler work list) |
//! | `{prefix}{org:N}:session:S` | string with TTL | the account session S of organization N last used |
//! | `{prefix}{slots:ACCOUNT}` | sorted set | live capacity slots of the account (slot id → expiry ms) |
//! | `{prefix}{cd:ACCOUNT}` | string with TTL | the supplier account is cooling until the key expires |
//! | `{prefix}{media}:ID` | string with TTL | a hosted file: content type, NUL, bytes |
//! | `{prefix}{usage}` | stream | usage events (field `e`: JSON [`crate::UsageEvent`]), consumer group `settler` |
//!
//! The prefix must not contain `{` or `}`: the hash tags above decide the cluster slot.

/// Builds the keys of one deployment.
#[derive(Debug, Clone)]
pub struct KeySchema {
    prefix: String,
}

impl KeySchema {
    pub fn new(prefix: &str) -> KeySchema {
        KeySchema {
            prefix: prefix.to_string(),
        }
    }

    pub fn key_directory(&self) -> String {
        format!("{}{{keydir}}", self.prefix)
    }

    /// The pub/sub channel announcing each change of the key directory (the key hash, or `*`).
    pub fn key_changes(&self) -> String {
        format!("{}{{keydir}}:changes", self.prefix)
    }

    pub fn key_directory_loaded(&self) -> String {
        format!("{}{{keydir}}:loaded", self.prefix)
    }

    pub fn window_counter(&self, name: &str) -> String {
        format!("{}{{rl:{name}}}", self.prefix)
    }

    /// The keys of one organization's wallet (one hash slot).
    pub fn wallet(&self, org: i64) -> [String; 5] {
        let p = &self.prefix;
        [
            format!("{p}{{org:{org}}}:wallet"),
            format!("{p}{{org:{org}}}:holds"),
            format!("{p}{{org:{org}}}:adjusted"),
            format!("{p}{{org:{org}}}:holdmeta"),
            format!("{p}{{org:{org}}}:confirmed"),
        ]
    }

    pub fn holding_orgs(&self) -> String {
        format!("{}{{wallets}}:holding", self.prefix)
    }

    /// The sticky record of one session (the session id is hashed by the caller).
    pub fn session(&self, org: i64, session: &str) -> String {
        format!("{}{{org:{org}}}:session:{session}", self.prefix)
    }

    pub fn slots(&self, account: &str) -> String {
        format!("{}{{slots:{account}}}", self.prefix)
    }

    /// The slots of a gate (calls in flight under a limit's name; `crate::calls::Limits`).
    pub fn gate(&self, name: &str) -> String {
        format!("{}{{gate:{name}}}", self.prefix)
    }

    /// A per-minute limit's counter.
    pub fn minute_counter(&self, name: &str) -> String {
        format!("{}{{rpm:{name}}}", self.prefix)
    }

    /// A hosted media file.
    pub fn media(&self, id: &str) -> String {
        format!("{}{{media}}:{id}", self.prefix)
    }

    pub fn cooldown(&self, account: &str) -> String {
        format!("{}{{cd:{account}}}", self.prefix)
    }

    pub fn usage_stream(&self) -> String {
        format!("{}{{usage}}", self.prefix)
    }
}

/// Consumer group of the usage stream.
pub const USAGE_GROUP: &str = "settler";
