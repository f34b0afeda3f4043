//! Partner webhooks (issue 45): endpoints a partner registers (its URL, the events it wants, the
//! signing secret sealed at rest), the outbox of events (written in the transaction of the change
//! that causes them, each with a stable public id), one delivery per event and endpoint (claimed
//! by one admin-api process at a time, retried with backoff until its deadline) and the log of
//! every attempt (the receiver's status and the first bytes of its answer, or why it failed). An
//! event a sweep finds rather than a change makes (an invitation that expired, a statement that
//! became ready) carries a dedupe key, unique, so it is written once whoever finds it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    PartnerId,
    Url,
    Description,
    Events,
    SecretSealed,
    SecretPreview,
    Status,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookEvents {
    Table,
    Id,
    PublicId,
    PartnerId,
    EventType,
    Data,
    DedupeKey,
    CreatedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    EventId,
    EndpointId,
    PartnerId,
    Status,
    Attempts,
    NextAttemptAt,
    DeadlineAt,
    ClaimedUntil,
    ClaimedBy,
    LastStatus,
    LastError,
    SucceededAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookAttempts {
    Table,
    Id,
    DeliveryId,
    Attempt,
    StartedAt,
    DurationMs,
    StatusCode,
    Answer,
    Error,
    Worker,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookEndpoints::Table)
                    .col(big_pk_auto(WebhookEndpoints::Id))
                    .col(big_integer(WebhookEndpoints::PartnerId))
                    .col(string_len(WebhookEndpoints::Url, 2048))
                    .col(string_len_null(WebhookEndpoints::Description, 200))
                    .col(text(WebhookEndpoints::Events))
                    .col(string_len(WebhookEndpoints::SecretSealed, 512))
                    .col(string_len(WebhookEndpoints::SecretPreview, 32))
                    .col(string_len(WebhookEndpoints::Status, 16))
                    .col(timestamp_with_time_zone(WebhookEndpoints::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookEndpoints::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_webhook_endpoints_partner")
                    .table(WebhookEndpoints::Table)
                    .col(WebhookEndpoints::PartnerId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookEvents::Table)
                    .col(big_pk_auto(WebhookEvents::Id))
                    .col(string_len_uniq(WebhookEvents::PublicId, 64))
                    .col(big_integer(WebhookEvents::PartnerId))
                    .col(string_len(WebhookEvents::EventType, 64))
                    .col(text(WebhookEvents::Data))
                    .col(string_len_null(WebhookEvents::DedupeKey, 200).unique_key())
                    .col(timestamp_with_time_zone(WebhookEvents::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_webhook_events_partner_created")
                    .table(WebhookEvents::Table)
                    .col(WebhookEvents::PartnerId)
                    .col(WebhookEvents::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(big_pk_auto(WebhookDeliveries::Id))
                    .col(big_integer(WebhookDeliveries::EventId))
                    .col(big_integer(WebhookDeliveries::EndpointId))
                    .col(big_integer(WebhookDeliveries::PartnerId))
                    .col(string_len(WebhookDeliveries::Status, 16))
                    .col(integer(WebhookDeliveries::Attempts).default(0))
                    .col(timestamp_with_time_zone(WebhookDeliveries::NextAttemptAt))
                    .col(timestamp_with_time_zone(WebhookDeliveries::DeadlineAt))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::ClaimedUntil,
                    ))
                    .col(string_len_null(WebhookDeliveries::ClaimedBy, 64))
                    .col(integer_null(WebhookDeliveries::LastStatus))
                    .col(text_null(WebhookDeliveries::LastError))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::SucceededAt,
                    ))
                    .col(timestamp_with_time_zone(WebhookDeliveries::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookDeliveries::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        for (name, cols) in [
            (
                "ix_webhook_deliveries_due",
                vec![WebhookDeliveries::Status, WebhookDeliveries::NextAttemptAt],
            ),
            (
                "ix_webhook_deliveries_endpoint",
                vec![WebhookDeliveries::EndpointId, WebhookDeliveries::Id],
            ),
        ] {
            let mut index = Index::create();
            index.name(name).table(WebhookDeliveries::Table);
            for c in cols {
                index.col(c);
            }
            manager.create_index(index.to_owned()).await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("uq_webhook_deliveries_event_endpoint")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::EventId)
                    .col(WebhookDeliveries::EndpointId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .col(big_pk_auto(WebhookAttempts::Id))
                    .col(big_integer(WebhookAttempts::DeliveryId))
                    .col(integer(WebhookAttempts::Attempt))
                    .col(timestamp_with_time_zone(WebhookAttempts::StartedAt))
                    .col(big_integer(WebhookAttempts::DurationMs))
                    .col(integer_null(WebhookAttempts::StatusCode))
                    .col(text_null(WebhookAttempts::Answer))
                    .col(text_null(WebhookAttempts::Error))
                    .col(string_len(WebhookAttempts::Worker, 64))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_webhook_attempts_delivery")
                    .table(WebhookAttempts::Table)
                    .col(WebhookAttempts::DeliveryId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("partner webhooks are not removed".into()))
    }
}
