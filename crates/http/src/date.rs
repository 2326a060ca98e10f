//! IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) without a calendar crate.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

pub const DATE_LEN: usize = 29;

/// Formats seconds since the Unix epoch as an IMF-fixdate.
pub fn format_imf(secs: u64) -> [u8; DATE_LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from day count (Howard Hinnant's algorithm), valid for all u64 days we meet.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);

    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[0..3].copy_from_slice(DAYS[(days % 7) as usize]);
    let two = |v: u64| [b'0' + (v / 10) as u8, b'0' + (v % 10) as u8];
    out[5..7].copy_from_slice(&two(d as u64));
    out[8..11].copy_from_slice(MONTHS[(m - 1) as usize]);
    let y = y.clamp(0, 9999) as u64;
    out[12..16].copy_from_slice(&[
        b'0' + (y / 1000) as u8,
        b'0' + (y / 100 % 10) as u8,
        b'0' + (y / 10 % 10) as u8,
        b'0' + (y % 10) as u8,
    ]);
    out[17..19].copy_from_slice(&two(hh));
    out[20..22].copy_from_slice(&two(mm));
    out[23..25].copy_from_slice(&two(ss));
    out
}

/// The current Date value of this shard; refreshed by [`refresh`] from a 1 s interval task.
pub struct DateCache {
    value: Cell<[u8; DATE_LEN]>,
}

impl Default for DateCache {
    fn default() -> Self {
        let c = DateCache {
            value: Cell::new([0; DATE_LEN]),
        };
        c.refresh();
        c
    }
}

impl DateCache {
    pub fn refresh(&self) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.value.set(format_imf(secs));
    }

    pub fn get(&self) -> [u8; DATE_LEN] {
        self.value.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(&format_imf(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format_imf(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format_imf(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format_imf(1_798_761_600), b"Fri, 01 Jan 2027 00:00:00 GMT");
        assert_eq!(&format_imf(4_133_980_799), b"Fri, 31 Dec 2100 23:59:59 GMT");
    }
}
