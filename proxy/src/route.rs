//! Phase 3, routing: which configured model a call names, whether the key may use it, and which
//! accounts could serve it (the plan). The order in which the plan is tried is `select`'s job.

use crate::errors::GatewayError;
use crate::upstreams::Upstream;
use settings::{Model, Settings};
use std::collections::HashMap;
use std::sync::Arc;

/// The model table, built once from the configuration.
pub struct Router {
    models: HashMap<String, Arc<ModelRoute>>,
    groups: HashMap<i64, Vec<String>>,
}

/// A model and the accounts (indexes into the upstream list) that serve it.
pub struct ModelRoute {
    pub model: Model,
    pub accounts: Vec<usize>,
}

impl Router {
    pub fn new(settings: &Settings, upstreams: &[Upstream]) -> Router {
        let models = settings
            .models
            .iter()
            .map(|m| {
                let accounts = upstreams
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.account.models.iter().any(|id| id == &m.id))
                    .map(|(i, _)| i)
                    .collect();
                (
                    m.id.clone(),
                    Arc::new(ModelRoute {
                        model: m.clone(),
                        accounts,
                    }),
                )
            })
            .collect();
        let groups = settings
            .groups
            .iter()
            .map(|g| (g.id, g.models.clone()))
            .collect();
        Router { models, groups }
    }

    /// The model ids a key of `group_id` may use, in configuration order. An unknown group
    /// exposes nothing.
    pub fn group_models(&self, group_id: i64) -> &[String] {
        self.groups.get(&group_id).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Resolves a requested id (`gpt-4o-mini` or `openai/gpt-4o-mini`) for a key's group.
    /// A model the key cannot use is answered exactly like a model that does not exist.
    pub fn resolve(&self, requested: &str, group_id: i64) -> Result<Arc<ModelRoute>, GatewayError> {
        let unknown = || GatewayError::UnknownModel(requested.to_string());
        let route = match self.models.get(requested) {
            Some(r) => r,
            None => {
                let (author, id) = requested.split_once('/').ok_or_else(unknown)?;
                let r = self.models.get(id).ok_or_else(unknown)?;
                if r.model.author.as_deref() != Some(author) {
                    return Err(unknown());
                }
                r
            }
        };
        if !self
            .group_models(group_id)
            .iter()
            .any(|m| m == &route.model.id)
        {
            return Err(unknown());
        }
        if route.accounts.is_empty() {
            return Err(GatewayError::NoAccount(route.model.id.clone()));
        }
        Ok(route.clone())
    }
}
