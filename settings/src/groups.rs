//! `[[groups]]`: what keys are sold as — models, the partner's wholesale rate, features and
//! per-key limits.

use crate::error::{ConfigError, err};
use crate::models::known_models;
use crate::values::{RawPrice, multiplier, non_empty_id};
use money::RateMultiplier;
use serde::Deserialize;
use std::collections::HashSet;

/// A `[[groups]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGroup {
    pub id: i64,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub product_code: String,
    pub models: Vec<String>,
    pub wholesale_rate_multiplier: RawPrice,
    #[serde(default)]
    pub features: Vec<String>,
    pub key_max_concurrency: Option<u32>,
    pub key_requests_per_minute: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub product_code: String,
    pub models: Vec<String>,
    pub wholesale_rate_multiplier: RateMultiplier,
    /// What keys of the group may do besides calling its models (`[[groups]] features`).
    pub features: Vec<GroupFeature>,
    /// Calls in flight per key of the group at most (`key_max_concurrency`); `None`: no limit.
    pub key_max_concurrency: Option<u32>,
    /// Calls admitted per key of the group per minute at most (`key_requests_per_minute`).
    pub key_requests_per_minute: Option<u32>,
}

impl Group {
    pub fn has(&self, feature: GroupFeature) -> bool {
        self.features.contains(&feature)
    }
}

/// A feature a group's keys get (DESIGN §6b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupFeature {
    /// The video routes.
    Video,
    /// `google/<id>` is accepted for the group's gemini-served models.
    GoogleAlias,
    /// Codex-style payload adaptation on the responses route.
    Codex,
}

/// Validates `groups[i]` against the configured models.
pub(crate) fn validate(
    g: &RawGroup,
    i: usize,
    model_ids: &HashSet<&str>,
) -> Result<Group, ConfigError> {
    let p = |field: &str| format!("groups[{i}].{field}");
    if g.id <= 0 {
        return Err(err(p("id"), "must be a positive integer"));
    }
    if g.name.trim().is_empty() {
        return Err(err(p("name"), "must not be empty"));
    }
    non_empty_id(&g.product_code, &p("product_code"))?;
    known_models(&g.models, &p("models"), model_ids)?;
    for (field, value) in [
        ("key_max_concurrency", g.key_max_concurrency),
        ("key_requests_per_minute", g.key_requests_per_minute),
    ] {
        if value == Some(0) {
            return Err(err(
                p(field),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    Ok(Group {
        key_max_concurrency: g.key_max_concurrency,
        key_requests_per_minute: g.key_requests_per_minute,
        id: g.id,
        name: g.name.clone(),
        description: g.description.clone(),
        product_code: g.product_code.clone(),
        models: g.models.clone(),
        wholesale_rate_multiplier: multiplier(
            &g.wholesale_rate_multiplier,
            &p("wholesale_rate_multiplier"),
        )?,
        features: g
            .features
            .iter()
            .enumerate()
            .map(|(j, f)| match f.as_str() {
                "video" => Ok(GroupFeature::Video),
                "google_alias" => Ok(GroupFeature::GoogleAlias),
                "codex" => Ok(GroupFeature::Codex),
                other => Err(err(
                    format!("groups[{i}].features[{j}]"),
                    format!("{other:?} is not one of \"video\", \"google_alias\", \"codex\""),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
    })
}
