//! Parsers for command-line values: sizes (`64M`) and durations in seconds (`2.5`).

/// A byte size: plain bytes, or a number (decimals allowed) with a binary unit suffix
/// `K`, `M`, `G` or `T`, optionally followed by `iB` or `B`, in any case: `512K`, `64M`,
/// `1.5GiB`, `4096`. Zero is refused: no limit can be zero.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "invalid size {text:?}: use bytes or a number with K, M, G or T (e.g. 64M)"
            ))
        }
    };
    let bytes = if number.contains('.') {
        let value: f64 = number
            .parse()
            .map_err(|_| format!("invalid size {text:?}: {number:?} is not a number"))?;
        let bytes = (value * (1u64 << shift) as f64).round();
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("size {text:?} is too large"));
        }
        bytes as u64
    } else {
        let value: u64 = number
            .parse()
            .map_err(|_| format!("invalid size {text:?}: {number:?} is not a number"))?;
        value
            .checked_mul(1u64 << shift)
            .ok_or_else(|| format!("size {text:?} is too large"))?
    };
    if bytes == 0 {
        return Err(format!("size {text:?} must be greater than zero"));
    }
    Ok(bytes)
}

/// Seconds as a decimal number (an `s` suffix is allowed), returned in milliseconds,
/// rounded, at least 1: `2.5` -> 2500.
pub fn parse_secs_to_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let number = t.strip_suffix('s').unwrap_or(t);
    let secs: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: give seconds, e.g. 2 or 0.5"))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
    let ms = (secs * 1000.0).round();
    if ms >= u64::MAX as f64 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok((ms as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2 MB"), Ok(2 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("100b"), Ok(100));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
    }

    #[test]
    fn bad_sizes() {
        for bad in [
            "",
            "M",
            "-1",
            "12X",
            "1.2.3M",
            "0",
            "0K",
            "99999999999T",
            "1e3",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs_to_ms("2"), Ok(2000));
        assert_eq!(parse_secs_to_ms("2.5"), Ok(2500));
        assert_eq!(parse_secs_to_ms("0.0001"), Ok(1));
        assert_eq!(parse_secs_to_ms("3s"), Ok(3000));
        for bad in ["", "0", "-1", "abc", "inf", "NaN"] {
            assert!(parse_secs_to_ms(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
