//! The node filters `log`, `session get` and `search` share, and how times
//! are typed.

use super::{CmdResult, CommandError};
use clap::Args;
use convo_core::{Kind, Millis};
use convo_store::filter::NodeFilter;

/// Filters on nodes.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only nodes of these kinds (comma-separated: invoke,request,response,complete,fork,promote)
    #[arg(
        long,
        value_name = "KIND",
        value_delimiter = ',',
        help_heading = "Filters"
    )]
    pub kind: Vec<String>,
    /// Only nodes sent by this sender (exact name: cli, infer, the agent…)
    #[arg(long, value_name = "NAME", help_heading = "Filters")]
    pub from: Option<String>,
    /// Only nodes sent to this recipient
    #[arg(long, value_name = "NAME", help_heading = "Filters")]
    pub to: Option<String>,
    /// Only nodes recorded at or after TIME (2026-11-23, 2026-11-23T09:30:00Z, or an age: 2h, 3d, 30m)
    #[arg(long, value_name = "TIME", help_heading = "Filters")]
    pub since: Option<String>,
    /// Only nodes recorded before TIME (same forms as --since)
    #[arg(long, value_name = "TIME", help_heading = "Filters")]
    pub until: Option<String>,
}

impl FilterArgs {
    /// The filter, or a usage error naming the bad value.
    pub fn to_filter(&self, now: Millis) -> CmdResult<NodeFilter> {
        let kinds = self
            .kind
            .iter()
            .map(|k| {
                k.trim().parse::<Kind>().map_err(|e| {
                    CommandError::user(format!("--kind {k}: {e}"))
                        .with_hint("kinds are invoke, request, response, complete, fork, promote")
                })
            })
            .collect::<CmdResult<Vec<_>>>()?;
        Ok(NodeFilter {
            kinds,
            from: self.from.clone(),
            to: self.to.clone(),
            since: self
                .since
                .as_deref()
                .map(|t| {
                    parse_time(t, now).map_err(|e| CommandError::user(format!("--since: {e}")))
                })
                .transpose()?,
            until: self
                .until
                .as_deref()
                .map(|t| {
                    parse_time(t, now).map_err(|e| CommandError::user(format!("--until: {e}")))
                })
                .transpose()?,
            ..NodeFilter::default()
        })
    }
}

/// A time as typed: an RFC 3339 / RFC 9557 timestamp, a UTC date or date
/// and time (`2026-11-23`, `2026-11-23 09:30`), or an age before `now`
/// (`90s`, `30m`, `2h`, `3d`, `1w`, `2h30m`).
pub fn parse_time(s: &str, now: Millis) -> Result<Millis, String> {
    let t = s.trim();
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Ok(ts.as_millisecond());
    }
    if let Ok(dt) = t.parse::<jiff::civil::DateTime>()
        && let Ok(z) = dt.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(z.timestamp().as_millisecond());
    }
    if let Ok(d) = t.parse::<jiff::civil::Date>()
        && let Ok(z) = d.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(z.timestamp().as_millisecond());
    }
    if let Some(ms) = parse_age(t) {
        return Ok(now.saturating_sub(ms));
    }
    Err(format!(
        "`{s}` is not a time: give 2026-11-23, 2026-11-23T09:30:00Z, or an age such as 2h or 3d"
    ))
}

/// `2h30m` → milliseconds.
fn parse_age(t: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut num = String::new();
    let mut any = false;
    for c in t.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: i64 = num.parse().ok()?;
        num.clear();
        let unit = match c {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            'w' => 604_800_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        any = true;
    }
    (any && num.is_empty()).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times() {
        let now = 1_000_000_000_000;
        assert_eq!(parse_time("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_time("1h30m", now), Ok(now - 5_400_000));
        assert_eq!(parse_time("1970-01-02", now), Ok(86_400_000));
        assert_eq!(parse_time("1970-01-01T00:00:01Z", now), Ok(1000));
        assert_eq!(parse_time("1970-01-01 00:01", now), Ok(60_000));
        assert!(parse_time("yesterday", now).is_err());
        assert!(parse_time("2", now).is_err());
    }
}
