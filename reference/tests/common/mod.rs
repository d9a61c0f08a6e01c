//! Helpers shared by the reference's integration tests.

use std::path::PathBuf;

/// The oracle directory: `$TANDEM_ORACLE_DIR`, else `<repo>/../shared/oracle`. Panics (fails
/// the test) if it is missing: tests that need it must never silently skip.
pub fn oracle_dir() -> PathBuf {
    let dir = match std::env::var_os("TANDEM_ORACLE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/oracle"),
    };
    assert!(dir.is_dir(), "oracle dir {} is missing: check out shared/ beside the repo or set TANDEM_ORACLE_DIR", dir.display());
    dir
}
