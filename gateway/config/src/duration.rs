//! Durations in config files: humantime strings (`"500ms"`, `"2m"`) or whole seconds.

use std::time::Duration;

use super::tree::Value;

/// Longer than any sensible timeout, and short enough that adding it to an `Instant` can
/// never overflow (which would panic wherever the engine does `now + timeout`).
const LONGEST: Duration = Duration::from_secs(366 * 24 * 60 * 60);

const HOW: &str =
    "write a positive duration such as \"500ms\", \"30s\" or \"2m\", or a whole number of seconds";

/// A duration, or the message and fix for why `value` is not one.
pub(crate) fn parse(value: &Value) -> Result<Duration, (String, String)> {
    let duration = match value {
        Value::Integer(seconds) if *seconds <= 0 => {
            return Err((
                format!("{seconds} is not a positive number of seconds"),
                HOW.to_owned(),
            ))
        }
        Value::Integer(seconds) => Duration::from_secs(seconds.unsigned_abs()),
        Value::Float(number) => {
            return Err((
                format!("{number} is not a whole number of seconds"),
                "use a string with a smaller unit, such as \"1500ms\"".to_owned(),
            ))
        }
        Value::String(text) if text.trim_start().starts_with('-') => {
            return Err((format!("{text:?} is negative"), HOW.to_owned()))
        }
        Value::String(text) => humantime::parse_duration(text.trim()).map_err(|error| {
            (
                format!("{text:?} is not a duration ({error})"),
                HOW.to_owned(),
            )
        })?,
        other => {
            return Err((
                format!(
                    "expected a duration string or an integer, found {}",
                    other.type_name()
                ),
                HOW.to_owned(),
            ))
        }
    };
    if duration.is_zero() {
        return Err((
            "a zero duration would fail at once".to_owned(),
            HOW.to_owned(),
        ));
    }
    if duration > LONGEST {
        return Err((
            format!(
                "{} is longer than a year",
                humantime::format_duration(duration)
            ),
            "use a duration of at most one year".to_owned(),
        ));
    }
    Ok(duration)
}

/// A duration that may also be zero, for settings where zero means "do not wait".
pub(crate) fn parse_allowing_zero(value: &Value) -> Result<Duration, (String, String)> {
    let zero = match value {
        Value::Integer(0) => true,
        Value::String(text) => humantime::parse_duration(text.trim()).is_ok_and(|d| d.is_zero()),
        _ => false,
    };
    if zero {
        Ok(Duration::ZERO)
    } else {
        parse(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Result<Duration, (String, String)> {
        parse(&Value::String(text.to_owned()))
    }

    #[test]
    fn zero_is_a_duration_only_where_it_is_allowed() {
        assert!(text("0s").is_err());
        assert!(parse(&Value::Integer(0)).is_err());
        let zero = |value: &Value| parse_allowing_zero(value);
        assert_eq!(zero(&Value::String("0s".into())), Ok(Duration::ZERO));
        assert_eq!(zero(&Value::Integer(0)), Ok(Duration::ZERO));
        assert_eq!(
            zero(&Value::String("2s".into())),
            Ok(Duration::from_secs(2))
        );
        assert!(zero(&Value::String("-1s".into())).is_err());
    }

    #[test]
    fn humantime_strings_and_integer_seconds_are_durations() {
        assert_eq!(text("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(text("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(text(" 1h 30m "), Ok(Duration::from_secs(5400)));
        assert_eq!(parse(&Value::Integer(45)), Ok(Duration::from_secs(45)));
    }

    #[test]
    fn zero_negative_fractional_and_huge_durations_are_rejected() {
        assert!(text("0s").unwrap_err().0.contains("zero"));
        assert!(text("-5s").unwrap_err().0.contains("negative"));
        assert!(parse(&Value::Integer(0)).is_err());
        assert!(parse(&Value::Integer(-3)).unwrap_err().0.contains("-3"));
        assert!(parse(&Value::Float(1.5)).unwrap_err().1.contains("1500ms"));
        assert!(parse(&Value::Integer(i64::MAX))
            .unwrap_err()
            .0
            .contains("year"));
        assert!(text("60").unwrap_err().0.contains("not a duration"));
        assert!(parse(&Value::Boolean(true))
            .unwrap_err()
            .0
            .contains("boolean"));
    }
}
