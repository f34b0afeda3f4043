//! The money path of one request: [`price`] (what usage costs, exactly), [`admit`] (reserve the
//! worst case before any supplier is contacted) and [`settle`] (close the hold once, at the price
//! of what was served, and emit the usage event); [`renew`] keeps the holds of calls in progress
//! open past their deadline; [`resend`] re-sends recent usage events when the store lost them.

pub mod admit;
pub(crate) mod price;
pub(crate) mod renew;
pub(crate) mod resend;
pub(crate) mod settle;
