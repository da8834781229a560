//! Every error the engine's API returns. Each has a stable [`EngineError::code`] that the web
//! edge puts on the JavaScript `Error`.

use super::schema::SchemaError;
use super::values::ValueError;
use crate::protocol::{BlobError, CryptoError, IdentityError};
use crate::store::StoreError;

/// An engine API error.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The declared schema is invalid or conflicts with the database.
    #[error("invalid schema: {0}")]
    Schema(#[from] SchemaError),
    /// The secret is invalid.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The database belongs to another owner.
    #[error("this database belongs to owner {stored}, but the secret derives owner {given}")]
    OwnerMismatch {
        /// Owner recorded in the database.
        stored: String,
        /// Owner of the given secret.
        given: String,
    },
    /// A table that the schema does not declare.
    #[error("unknown table {0:?}")]
    UnknownTable(String),
    /// A column that the table does not declare.
    #[error("unknown column {table}.{column}")]
    UnknownColumn {
        /// Table.
        table: String,
        /// Column.
        column: String,
    },
    /// A value of the wrong type.
    #[error(transparent)]
    InvalidValue(#[from] ValueError),
    /// A row argument that is not an object, or lacks its `id`.
    #[error("invalid row for {table}: {reason}")]
    InvalidRow {
        /// Table.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// An insert of an id that exists.
    #[error("{table} row {id:?} already exists (use update or upsert)")]
    AlreadyExists {
        /// Table.
        table: String,
        /// Row id.
        id: String,
    },
    /// An update or delete of a row that does not exist (or is deleted).
    #[error("{table} row {id:?} does not exist")]
    NotFound {
        /// Table.
        table: String,
        /// Row id.
        id: String,
    },
    /// A `query` that is not a single read-only statement, or an invalid list option.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// A relay URL that is not http(s), or not configured.
    #[error("invalid relay {url:?}: {reason}")]
    InvalidRelay {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A blob that is not in the `blob` table.
    #[error("no blob with id {0:?}")]
    BlobNotFound(String),
    /// A blob chunk that no relay could provide.
    #[error("blob {blob_id} chunk {index} is not available: {reason}")]
    BlobUnavailable {
        /// Blob id.
        blob_id: String,
        /// Chunk index.
        index: usize,
        /// Why.
        reason: String,
    },
    /// Blob sealing or verification failed.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// Sealing failed.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// A re-key that cannot proceed.
    #[error("re-key refused: {0}")]
    Rekey(String),
    /// The local database failed.
    #[error("local database: {0}")]
    Store(#[from] StoreError),
    /// A row version whose sealed event no relay would store (over `maxEventBytes`).
    #[error(
        "{table} row {id:?} would be a {size}-byte event, over the relays' limit of {limit} bytes \
         (maxEventBytes); nothing was written — keep large content in a blob (putBlob)"
    )]
    RowTooLarge {
        /// Table.
        table: String,
        /// Row id.
        id: String,
        /// The sealed event's size as stored JSON.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A blob chunk size whose stored chunks no relay would store (over `maxBlobBytes`).
    #[error(
        "chunkSize {chunk_size} makes stored chunks larger than the relays' limit of {limit} bytes \
         (maxBlobBytes); use a chunkSize of at most {max}"
    )]
    ChunkTooLarge {
        /// The chunk size asked for.
        chunk_size: usize,
        /// The largest chunk size that fits.
        max: usize,
        /// The limit on stored chunks.
        limit: usize,
    },
    /// An engine option out of range.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option's name, as JavaScript spells it.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// `confirmRekey()` without a re-key waiting for confirmation.
    #[error("no re-key is waiting for confirmation")]
    NoPendingRekey,
}

impl From<rusqlite::Error> for EngineError {
    fn from(e: rusqlite::Error) -> Self {
        EngineError::Store(StoreError::Sqlite(e))
    }
}

impl EngineError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Schema(_) | EngineError::Store(StoreError::Schema(_)) => "SCHEMA_INVALID",
            EngineError::Identity(e) => match e {
                IdentityError::Empty => "SECRET_EMPTY",
                IdentityError::WrongWordCount { .. } => "SECRET_WORD_COUNT",
                IdentityError::UnknownWord { .. } => "SECRET_UNKNOWN_WORD",
                IdentityError::BadChecksum => "SECRET_CHECKSUM",
                IdentityError::InvalidRecoveryKey { .. } => "SECRET_INVALID_KEY",
                IdentityError::InvalidPhrase { .. } => "SECRET_INVALID_PHRASE",
            },
            EngineError::OwnerMismatch { .. } => "OWNER_MISMATCH",
            EngineError::UnknownTable(_) => "UNKNOWN_TABLE",
            EngineError::UnknownColumn { .. } => "UNKNOWN_COLUMN",
            EngineError::InvalidValue(_) => "INVALID_VALUE",
            EngineError::InvalidRow { .. } => "INVALID_ROW",
            EngineError::AlreadyExists { .. } => "ALREADY_EXISTS",
            EngineError::NotFound { .. } => "NOT_FOUND",
            EngineError::InvalidQuery(_) => "INVALID_QUERY",
            EngineError::InvalidRelay { .. } => "INVALID_RELAY",
            EngineError::BlobNotFound(_) => "BLOB_NOT_FOUND",
            EngineError::BlobUnavailable { .. } => "BLOB_UNAVAILABLE",
            EngineError::Blob(_) => "BLOB_INVALID",
            EngineError::Crypto(_) => "CRYPTO",
            EngineError::Rekey(_) => "REKEY_REFUSED",
            EngineError::Store(_) => "STORAGE",
            EngineError::RowTooLarge { .. } => "ROW_TOO_LARGE",
            EngineError::ChunkTooLarge { .. } => "CHUNK_TOO_LARGE",
            EngineError::InvalidOption { .. } => "INVALID_ARGUMENT",
            EngineError::NoPendingRekey => "NO_PENDING_REKEY",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_bad_secret_has_its_own_code() {
        let code = |e: IdentityError| EngineError::Identity(e).code();
        assert_eq!(code(IdentityError::Empty), "SECRET_EMPTY");
        assert_eq!(code(IdentityError::WrongWordCount { count: 11 }), "SECRET_WORD_COUNT");
        assert_eq!(code(IdentityError::UnknownWord { position: 2, word: "zzz".into() }), "SECRET_UNKNOWN_WORD");
        assert_eq!(code(IdentityError::BadChecksum), "SECRET_CHECKSUM");
        assert_eq!(code(IdentityError::InvalidRecoveryKey { reason: "short".into() }), "SECRET_INVALID_KEY");
        // The bip39 crate's other errors (none reachable after the checks above) are not
        // reported as a bad sf1_ key.
        assert_eq!(code(IdentityError::InvalidPhrase { reason: "other".into() }), "SECRET_INVALID_PHRASE");
    }
}
