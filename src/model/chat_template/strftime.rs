//! `strftime_now(format)`, the function transformers gives chat templates (Llama 3.1–3.3 write "Today Date" with
//! `strftime_now("%d %b %Y")`; Granite and others use it too): Python's `datetime.now().strftime(format)`.
//!
//! ember formats the UTC date and time (a server's local time zone is not the user's either). The directives are
//! C's, in the "C" locale, as Python passes them on: `%a %A %b %B %d %H %I %j %m %M %p %S %y %Y %e %%`; any
//! other is an error naming it rather than text a model was never trained on.

use std::time::{SystemTime, UNIX_EPOCH};

const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `format` applied to the current UTC time.
pub fn strftime_now(format: &str) -> Result<String, String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    strftime(format, now)
}

/// `format` applied to `unix_seconds` (UTC).
pub fn strftime(format: &str, unix_seconds: i64) -> Result<String, String> {
    let days = unix_seconds.div_euclid(86_400);
    let seconds = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let directive = chars.next().ok_or("strftime_now: the format ends with a lone %")?;
        let text = match directive {
            'a' => WEEKDAYS[weekday][..3].to_owned(),
            'A' => WEEKDAYS[weekday].to_owned(),
            'b' => MONTHS[month as usize - 1][..3].to_owned(),
            'B' => MONTHS[month as usize - 1].to_owned(),
            'd' => format!("{day:02}"),
            'e' => format!("{day:>2}"),
            'H' => format!("{hour:02}"),
            'I' => format!("{:02}", (hour + 11) % 12 + 1),
            'j' => format!("{day_of_year:03}"),
            'm' => format!("{month:02}"),
            'M' => format!("{minute:02}"),
            'p' => (if hour < 12 { "AM" } else { "PM" }).to_owned(),
            'S' => format!("{second:02}"),
            'y' => format!("{:02}", year.rem_euclid(100)),
            'Y' => year.to_string(),
            '%' => "%".to_owned(),
            other => return Err(format!("strftime_now: the directive %{other} is not supported")),
        };
        out.push_str(&text);
    }
    Ok(out)
}

/// The proleptic Gregorian (year, month, day) of a day number counted from 1970-01-01 (the well-known era
/// arithmetic: 400-year eras of 146097 days, years starting in March so that leap days fall last).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected texts are Python's `datetime.fromtimestamp(t, timezone.utc).strftime(format)`.
    #[test]
    fn formats_as_python_does() {
        // 2024-07-26 13:05:09 UTC, a Friday, day 208 of a leap year.
        let t = 1_721_999_109;
        assert_eq!(strftime("%d %b %Y", t).unwrap(), "26 Jul 2024");
        assert_eq!(
            strftime("%A, %B %e, %y %H:%M:%S %I%p %j %a %m %%", t).unwrap(),
            "Friday, July 26, 24 13:05:09 01PM 208 Fri 07 %"
        );
        assert_eq!(strftime("%Y-%m-%d", 0).unwrap(), "1970-01-01");
        // 2000-02-29 (a leap day of a century divisible by 400) and 2100-03-01 (after a century's missing one).
        assert_eq!(strftime("%Y-%m-%d %a %j", 951_782_400).unwrap(), "2000-02-29 Tue 060");
        assert_eq!(strftime("%Y-%m-%d %a", 4_107_542_400).unwrap(), "2100-03-01 Mon");
        assert_eq!(strftime("%Y-%m-%d", -86_400).unwrap(), "1969-12-31");
        assert!(strftime("%Q", t).unwrap_err().contains("%Q"));
        assert!(strftime("100%", t).is_err());
    }

    #[test]
    fn day_numbers_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
