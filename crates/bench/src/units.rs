//! Sizes: the 4 KiB unit every allocator counts in, and byte counts as users type them
//! (`4K`, `2M`, `1G`) and as tables print them.

/// Bytes in one unit.
pub const UNIT_BYTES: usize = 4096;

/// A byte count in the largest binary unit that divides it: `4K`, `2M`, `1G`.
pub fn bytes(b: usize) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (name, shift) in UNITS {
        if b >= 1 << shift && b.trailing_zeros() >= shift {
            return format!("{}{name}", b >> shift);
        }
    }
    format!("{b}B")
}

/// Parses a byte count with an optional binary suffix (`4096`, `4K`, `32KiB`, `2M`, `1G`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 4K, 2M, 1G)"))?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("`{s}` has an unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// The order of a block size in bytes: a power of two of at least 4 KiB.
pub fn size_to_order(b: u64) -> Result<u32, String> {
    if b < UNIT_BYTES as u64 || !b.is_power_of_two() {
        return Err(format!(
            "block size {b} bytes is not a power of two of at least 4K"
        ));
    }
    Ok(b.trailing_zeros() - UNIT_BYTES.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("32KiB"), Ok(32 << 10));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("4X").is_err());
        assert!(parse_bytes("").is_err());
        assert_eq!(size_to_order(4096), Ok(0));
        assert_eq!(size_to_order(256 << 10), Ok(6));
        assert!(size_to_order(3000).is_err());
        assert!(size_to_order(12288).is_err());
        assert_eq!(bytes(4096), "4K");
        assert_eq!(bytes(2 << 20), "2M");
        assert_eq!(bytes(3 << 30), "3G");
        assert_eq!(bytes(100), "100B");
    }
}
