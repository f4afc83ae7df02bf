//! The consistency levels of the settings, as the driver takes them, and read back from the
//! driver (so a test can see that the settings reached it).

use std::time::Duration;

use scylla::statement::{Consistency, SerialConsistency};

use crate::settings::{ConsistencyLevel, SerialConsistencyLevel};

/// The driver's level for `level`.
pub(super) fn consistency(level: ConsistencyLevel) -> Consistency {
    match level {
        ConsistencyLevel::One => Consistency::One,
        ConsistencyLevel::LocalOne => Consistency::LocalOne,
        ConsistencyLevel::Two => Consistency::Two,
        ConsistencyLevel::Three => Consistency::Three,
        ConsistencyLevel::Quorum => Consistency::Quorum,
        ConsistencyLevel::LocalQuorum => Consistency::LocalQuorum,
        ConsistencyLevel::EachQuorum => Consistency::EachQuorum,
        ConsistencyLevel::All => Consistency::All,
    }
}

/// The driver's serial level for `level`.
pub(in crate::store) fn serial(level: SerialConsistencyLevel) -> SerialConsistency {
    match level {
        SerialConsistencyLevel::Serial => SerialConsistency::Serial,
        SerialConsistencyLevel::LocalSerial => SerialConsistency::LocalSerial,
    }
}

/// A read at `level` sees in-progress lightweight transactions too.
pub(in crate::store) fn serial_read(level: SerialConsistencyLevel) -> Consistency {
    match level {
        SerialConsistencyLevel::Serial => Consistency::Serial,
        SerialConsistencyLevel::LocalSerial => Consistency::LocalSerial,
    }
}

/// The settings' level for the driver's `level`, when it is one of them.
fn consistency_level(level: Consistency) -> Option<ConsistencyLevel> {
    Some(match level {
        Consistency::One => ConsistencyLevel::One,
        Consistency::LocalOne => ConsistencyLevel::LocalOne,
        Consistency::Two => ConsistencyLevel::Two,
        Consistency::Three => ConsistencyLevel::Three,
        Consistency::Quorum => ConsistencyLevel::Quorum,
        Consistency::LocalQuorum => ConsistencyLevel::LocalQuorum,
        Consistency::EachQuorum => ConsistencyLevel::EachQuorum,
        Consistency::All => ConsistencyLevel::All,
        Consistency::Any | Consistency::Serial | Consistency::LocalSerial => return None,
    })
}

fn serial_level(level: SerialConsistency) -> SerialConsistencyLevel {
    match level {
        SerialConsistency::Serial => SerialConsistencyLevel::Serial,
        SerialConsistency::LocalSerial => SerialConsistencyLevel::LocalSerial,
    }
}

/// What the driver runs the store's statements with, read back from the session's default
/// execution profile and the ownership statements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLevels {
    /// Every read and write, unless a statement says otherwise.
    pub consistency: Option<ConsistencyLevel>,
    /// Lightweight transactions, unless a statement says otherwise.
    pub serial_consistency: Option<SerialConsistencyLevel>,
    /// The driver's wait for one request.
    pub request_timeout: Option<Duration>,
    /// The ownership claims' serial level.
    pub claim_serial_consistency: Option<SerialConsistencyLevel>,
    /// The ownership checks' read level (`None`: the session's).
    pub ownership_check_consistency: Option<ConsistencyLevel>,
}

impl StoreLevels {
    /// Reads the levels back from the session's profile and the ownership statements (the
    /// claim's compare-and-set and the ownership check's read).
    pub(in crate::store) fn read(
        session: &scylla::client::session::Session,
        claim: &scylla::statement::prepared::PreparedStatement,
        ownership_check: &scylla::statement::prepared::PreparedStatement,
    ) -> StoreLevels {
        let profile = session.get_default_execution_profile_handle().to_profile();
        StoreLevels {
            consistency: consistency_level(profile.get_consistency()),
            serial_consistency: profile.get_serial_consistency().map(serial_level),
            request_timeout: profile.get_request_timeout(),
            claim_serial_consistency: claim.get_serial_consistency().map(serial_level),
            ownership_check_consistency: ownership_check
                .get_consistency()
                .and_then(consistency_level),
        }
    }
}
