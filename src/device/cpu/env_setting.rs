//! The environment variables that steer the CPU's measurements (`PAGEDKV_LLC`,
//! `PAGEDKV_CPU_KERNELS`): read one way, refused with one kind of error.

/// A setting whose value is none of those it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} must be {takes}, got '{got}'")]
pub struct EnvSettingError {
    pub name: &'static str,
    /// The values it takes, in words.
    pub takes: &'static str,
    /// The value, cut for quoting.
    pub got: String,
}

/// `name`'s value parsed by `parse`: `None` when unset, an error saying what it `takes` when
/// `parse` refuses it (a value that is no Unicode is refused as empty).
pub fn read<T>(
    name: &'static str,
    takes: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, EnvSettingError> {
    let text = match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => String::new(),
        Ok(text) => text,
    };
    match parse(&text) {
        Some(v) => Ok(Some(v)),
        None => Err(EnvSettingError {
            name,
            takes,
            got: crate::quote::clip(&text),
        }),
    }
}
