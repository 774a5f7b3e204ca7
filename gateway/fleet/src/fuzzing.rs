//! Entry points for the fuzz targets in `fuzz/`: the fleet's command rows, decoded as a
//! member decodes the rows it claims. Not an API (hidden from the docs); only `fuzz/`
//! calls it, and living here it reaches what is private and is compiled with the crate.

use serde_json::Value;
use tokio_postgres::types::{FromSql, Type};

/// Decodes a claimed command row: the first two bytes are its `priority` (a smallint,
/// big-endian as PostgreSQL sends it), the rest its `command` column as PostgreSQL sends a
/// `jsonb` value (a version byte, then JSON text). Any row may be refused, with a reason;
/// a panic is a bug, and so is a command that does not read back as itself from what
/// `submit_here` writes for it.
pub fn command_row(data: &[u8]) {
    let Some((priority, command)) = data.split_first_chunk::<2>() else {
        return;
    };
    let priority = crate::priority_of_rank(i16::from_be_bytes(*priority));
    assert_eq!(
        crate::priority_of_rank(crate::priority_rank(priority)),
        priority
    );
    let Ok(command) = Value::from_sql(&Type::JSONB, command) else {
        return;
    };
    match crate::member::commands::decode(1, &command) {
        Ok(decoded) => {
            let written = serde_json::to_value(&decoded).expect("a command serializes");
            let read =
                crate::member::commands::decode(1, &written).expect("a written command reads back");
            assert_eq!(read, decoded);
        }
        Err(reason) => assert!(reason.starts_with("command 1 cannot be run: ")),
    }
}
