//! More than one region (issue 48; docs/SCALE.md "More than one region"): the money rules of a
//! fleet with one ledger and one Redis deployment per region.
//!
//! An organization's wallet lives in the ledger, and its home region's mirror is the wallet's. The
//! money another region may spend is an **allowance** carved from the wallet in three steps, each
//! once per the carve's reference: out of the home mirror's available balance (a hold there is
//! never overdrawn), out of the ledger's wallet into `org:O:allowance:R`, then into region R's
//! mirror. No region can spend money the ledger did not move to it first, so no organization is
//! overdrawn by any number of regions, whatever the links between them do; a cut link costs
//! availability (an allowance is spendable only in its region), never money. Calls in R hold and
//! settle on R's mirror alone ([`Wallets::reserve`], [`Wallets::settle`]); their charges are
//! booked from R's allowance ([`book`]). An idle allowance goes back the same way in reverse
//! ([`sweep`]: R's mirror first).
//!
//! Built ahead of the regional top-up worker: `admin-api/tests/api/regions.rs` runs these rules as
//! a simulation (two Redis deployments as two regions, one database, a cut link).

use crate::ledger::{self, AccountRef, LedgerError};
use money::NanoUsd;
use opstate::{Adjustment, Confirmation, Wallets};
use sea_orm::ConnectionTrait;

/// One region's wallet mirrors; `home`: the organizations' home region (its mirrors are their
/// wallets').
pub struct Region<'a> {
    pub name: &'a str,
    pub wallets: &'a dyn Wallets,
    pub home: bool,
}

impl Region<'_> {
    /// Where this region's charges of `org` are booked from: the wallet at home, else the
    /// region's allowance.
    fn source(&self, org: i64) -> AccountRef {
        match self.home {
            true => AccountRef::org_wallet(org),
            false => allowance(org, self.name),
        }
    }
}

/// Money the ledger moved to a region, to be credited to its mirror ([`credit`]; again after a
/// lost link: once per reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carve {
    pub org: i64,
    pub amount: NanoUsd,
    pub reference: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("ledger: {0}")]
    Ledger(#[from] LedgerError),
    #[error("database: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("store: {0}")]
    Store(#[from] opstate::StoreError),
    #[error("no wallet mirror of organization {0} in region {1}")]
    Missing(i64, String),
    #[error("region {0} cannot give back {1}: only {2} is available")]
    Insufficient(String, NanoUsd, NanoUsd),
}

/// The ledger account of `org`'s allowance in `region`.
pub fn allowance(org: i64, region: &str) -> AccountRef {
    AccountRef::org_allowance(org, region)
}

/// Opens `org`'s mirror in `region` when it has none: loaded with the ledger's allowance (a region
/// that lost its store starts again from what the ledger moved to it; charges it made and had not
/// booked are booked later from the same allowance).
pub async fn open(
    db: &impl ConnectionTrait,
    region: &Region<'_>,
    org: i64,
) -> Result<(), RegionError> {
    if region.wallets.snapshot(org).await?.is_none() {
        let balance = ledger::balance(db, &allowance(org, region.name).code).await?;
        region.wallets.load(org, balance).await?;
    }
    Ok(())
}

/// Carves `amount` of `org`'s wallet for region `to`: taken from the home mirror's available
/// balance, then moved in the ledger. `None`: the home mirror cannot spare it (nothing changed);
/// else the carve to [`credit`]. Retried with the same reference, each step happens once.
pub async fn carve(
    db: &impl ConnectionTrait,
    home: &Region<'_>,
    to: &str,
    org: i64,
    amount: NanoUsd,
    reference: &str,
) -> Result<Option<Carve>, RegionError> {
    let debit = amount.checked_neg().ok_or(LedgerError::Overflow)?;
    match home.wallets.adjust(org, debit, reference).await? {
        Adjustment::Applied { .. } | Adjustment::Duplicate => {}
        Adjustment::Insufficient { .. } => return Ok(None),
        Adjustment::Missing => return Err(RegionError::Missing(org, home.name.into())),
    }
    let wallet = AccountRef::org_wallet(org);
    ledger::transfer(
        db,
        reference,
        "allowance",
        &wallet,
        &allowance(org, to),
        amount,
    )
    .await?;
    Ok(Some(Carve {
        org,
        amount,
        reference: reference.into(),
    }))
}

/// Credits a carve to its region's mirror (once per reference).
pub async fn credit(region: &Region<'_>, carve: &Carve) -> Result<(), RegionError> {
    match region
        .wallets
        .adjust(carve.org, carve.amount, &carve.reference)
        .await?
    {
        Adjustment::Missing => Err(RegionError::Missing(carve.org, region.name.into())),
        _ => Ok(()),
    }
}

/// Gives `amount` of `org`'s allowance in `from` back to the wallet: out of the region's mirror
/// (at most its available balance), then the ledger, then the home mirror; once per reference.
pub async fn sweep(
    db: &impl ConnectionTrait,
    from: &Region<'_>,
    home: &Region<'_>,
    org: i64,
    amount: NanoUsd,
    reference: &str,
) -> Result<(), RegionError> {
    let debit = amount.checked_neg().ok_or(LedgerError::Overflow)?;
    match from.wallets.adjust(org, debit, reference).await? {
        Adjustment::Applied { .. } | Adjustment::Duplicate => {}
        Adjustment::Insufficient { available } => {
            return Err(RegionError::Insufficient(
                from.name.into(),
                amount,
                available,
            ));
        }
        Adjustment::Missing => return Err(RegionError::Missing(org, from.name.into())),
    }
    let wallet = AccountRef::org_wallet(org);
    ledger::transfer(
        db,
        reference,
        "allowance",
        &allowance(org, from.name),
        &wallet,
        amount,
    )
    .await?;
    credit(
        home,
        &Carve {
            org,
            amount,
            reference: reference.into(),
        },
    )
    .await
}

/// Books a call's charge made in `region` (its hold `hold_id`, `charged` by its settlement): from
/// the region's allowance (at home: the wallet, as the settler does) to the organization's spend,
/// once per call, then confirmed to the region's mirror (the charge stops being pending there).
pub async fn book(
    db: &impl ConnectionTrait,
    region: &Region<'_>,
    org: i64,
    hold_id: &str,
    charged: NanoUsd,
) -> Result<(), RegionError> {
    let reference = format!("spend:{}:{hold_id}", region.name);
    let from = region.source(org);
    ledger::transfer(
        db,
        &reference,
        "spend",
        &from,
        &AccountRef::org_spend(org),
        charged,
    )
    .await?;
    if region.wallets.confirm(org, hold_id, charged).await? == Confirmation::Missing {
        return Err(RegionError::Missing(org, region.name.into()));
    }
    Ok(())
}

/// `org`'s one balance across `regions` (the home region among them): the ledger's wallet and
/// every other region's allowance, less the charges still pending in the mirrors. A mirror that
/// cannot be read makes the balance unknown (an error), never a smaller figure.
pub async fn balance(
    db: &impl ConnectionTrait,
    regions: &[&Region<'_>],
    org: i64,
) -> Result<NanoUsd, RegionError> {
    let mut total = ledger::balance(db, &AccountRef::org_wallet(org).code).await?;
    for region in regions {
        let snapshot = region
            .wallets
            .snapshot(org)
            .await?
            .ok_or_else(|| RegionError::Missing(org, region.name.into()))?;
        if !region.home {
            let carved = ledger::balance(db, &allowance(org, region.name).code).await?;
            total = total.checked_add(carved).ok_or(LedgerError::Overflow)?;
        }
        total = total
            .checked_sub(snapshot.pending)
            .ok_or(LedgerError::Overflow)?;
    }
    Ok(total)
}
