//! The Redis key schema, in one place. Every key starts with the deployment's prefix (tests use a
//! unique prefix each) and carries a hash tag (the part in braces decides a Redis Cluster's slot).
//! On one server the layout is the table below; on a cluster ([`KeySchema::cluster`]) an
//! organization's money (wallet, work list, usage stream) shares one of [`MONEY_SLOTS`] slots and
//! an account's cooldown and slots share one, so that every script touches one slot.
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
//! | `{prefix}{org:N}:spend` | hash | the organization's keys' spend: `K:d`/`K:ds` day and charged, `K:m`/`K:ms` month and charged, `K:h` held (see `budget.rs`) |
//! | `{prefix}{wallets}:holding` | set | organizations that have held money (reconciler work list) |
//! | `{prefix}{org:N}:session:S` | string with TTL | the account session S of organization N last used |
//! | `{prefix}{slots:ACCOUNT}` | sorted set | live capacity slots of the account (slot id → expiry ms) |
//! | `{prefix}{cd:ACCOUNT}` | string with TTL | the supplier account is cooling until the key expires |
//! | `{prefix}{media}:ID` | string with TTL | a hosted file: content type, NUL, bytes |
//! | `{prefix}{usage}` | stream | usage events (field `e`: JSON [`crate::UsageEvent`]), consumer group `settler` |
//! | `{prefix}{usage}:lease` | string with TTL | the settler reading the stream (`crate::leases`) |
//! | `{prefix}{settlers}` | sorted set | live settlers (id → when its heartbeat lapses, ms) |
//!
//! The prefix must not contain `{` or `}`: the hash tags above decide the cluster slot.

/// How many money slots a Redis Cluster deployment spreads its organizations over (see
/// [`KeySchema::cluster`]). Each is one hash slot; 16 spread evenly over any cluster of up to 16
/// masters, and the settler reads 16 streams.
pub const MONEY_SLOTS: u32 = 16;

/// Builds the keys of one deployment.
#[derive(Debug, Clone)]
pub struct KeySchema {
    prefix: String,
    cluster: bool,
}

impl KeySchema {
    /// The layout on one Redis server (the table above).
    pub fn new(prefix: &str) -> KeySchema {
        KeySchema {
            prefix: prefix.to_string(),
            cluster: false,
        }
    }

    /// The layout on a Redis Cluster, where every script must touch keys of one hash slot.
    /// Differences from [`KeySchema::new`]:
    ///
    /// | key | on a cluster |
    /// |---|---|
    /// | an organization's wallet keys | `{prefix}{m:K}:org:N:wallet` (…`:holds`, `:adjusted`, `:holdmeta`, `:confirmed`, `:spend`), K = N mod [`MONEY_SLOTS`] |
    /// | the reconciler's work list | `{prefix}{m:K}:holding`, one per money slot |
    /// | the usage stream | `{prefix}{m:K}:usage`, one per money slot: a call's end settles its hold and appends its usage event in one step, on its organization's money slot |
    /// | a usage stream's lease | `{prefix}{m:K}:lease` |
    /// | an account's cooldown and slots | `{prefix}{a:ACCOUNT}:cd`, `{prefix}{a:ACCOUNT}:slots`: one slot per account, so its cooldown is read and a slot taken in one step |
    ///
    /// Every other key is the same as on one server (each already alone on its slot).
    pub fn cluster(prefix: &str) -> KeySchema {
        KeySchema {
            prefix: prefix.to_string(),
            cluster: true,
        }
    }

    /// Whether this is the cluster layout.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The money slot of organization `org` (cluster layout).
    pub fn money_slot(org: i64) -> u32 {
        u32::try_from(org.rem_euclid(i64::from(MONEY_SLOTS))).unwrap_or(0)
    }

    /// `{prefix}{m:K}:name`: a key of money slot K (cluster layout).
    fn money_key(&self, slot: u32, name: &str) -> String {
        format!("{}{{m:{slot}}}:{name}", self.prefix)
    }

    /// Every money slot's key `name` on a cluster; on one server, the one key `single`.
    fn per_money_slot(&self, name: &str, single: String) -> Vec<String> {
        if self.cluster {
            (0..MONEY_SLOTS).map(|k| self.money_key(k, name)).collect()
        } else {
            vec![single]
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
    pub fn wallet(&self, org: i64) -> [String; 6] {
        let base = if self.cluster {
            self.money_key(Self::money_slot(org), &format!("org:{org}"))
        } else {
            format!("{}{{org:{org}}}", self.prefix)
        };
        [
            "wallet",
            "holds",
            "adjusted",
            "holdmeta",
            "confirmed",
            "spend",
        ]
        .map(|k| format!("{base}:{k}"))
    }

    /// The reconciler's work list that organization `org` is entered in when it holds money.
    pub fn holding(&self, org: i64) -> String {
        if self.cluster {
            self.money_key(Self::money_slot(org), "holding")
        } else {
            format!("{}{{wallets}}:holding", self.prefix)
        }
    }

    /// Every work list of organizations that held money (one, or one per money slot).
    pub fn holding_lists(&self) -> Vec<String> {
        self.per_money_slot("holding", self.holding(0))
    }

    /// The sticky record of one session (the session id is hashed by the caller).
    pub fn session(&self, org: i64, session: &str) -> String {
        format!("{}{{org:{org}}}:session:{session}", self.prefix)
    }

    pub fn slots(&self, account: &str) -> String {
        if self.cluster {
            format!("{}{{a:{account}}}:slots", self.prefix)
        } else {
            format!("{}{{slots:{account}}}", self.prefix)
        }
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
        if self.cluster {
            format!("{}{{a:{account}}}:cd", self.prefix)
        } else {
            format!("{}{{cd:{account}}}", self.prefix)
        }
    }

    /// The usage stream organization `org`'s events are appended to.
    pub fn usage_stream(&self, org: i64) -> String {
        if self.cluster {
            self.money_key(Self::money_slot(org), "usage")
        } else {
            format!("{}{{usage}}", self.prefix)
        }
    }

    /// Every usage stream (one, or one per money slot), in shard order: an entry id of shard `i`
    /// is written `i/ID` on a cluster.
    pub fn usage_streams(&self) -> Vec<String> {
        self.per_money_slot("usage", self.usage_stream(0))
    }

    /// The live settlers' heartbeats (`crate::leases`).
    pub fn settlers(&self) -> String {
        format!("{}{{settlers}}", self.prefix)
    }

    /// The lease of usage stream `i` (of [`KeySchema::usage_streams`]), on the stream's own slot.
    pub fn stream_lease(&self, i: usize) -> String {
        if self.cluster {
            self.money_key(u32::try_from(i).unwrap_or(0), "lease")
        } else {
            format!("{}{{usage}}:lease", self.prefix)
        }
    }

    /// A key in organization `org`'s money slot that nothing stores: the finish script's
    /// account-slot argument for a call's end on a cluster, whose slot is given back apart.
    pub fn money_placeholder(&self, org: i64) -> String {
        self.money_key(Self::money_slot(org), "none")
    }
}

/// Consumer group of the usage stream.
pub const USAGE_GROUP: &str = "settler";
