//! Counting checks and printing them without `std` or `alloc`.

use crate::sys;

/// Passed and failed checks, and the section they belong to.
#[derive(Default)]
pub struct Report {
    passed: usize,
    failed: usize,
    section: &'static str,
}

impl Report {
    /// Names the allocator the next checks are about.
    pub fn section(&mut self, name: &'static str) {
        self.section = name;
    }

    /// Counts a check; prints it if it failed.
    pub fn check(&mut self, what: &str, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            for part in [
                self.section.as_bytes(),
                b": FAILED: ",
                what.as_bytes(),
                b"\n",
            ] {
                sys::write(2, part);
            }
        }
    }

    /// Prints `N passed, M failed` and returns the exit code.
    pub fn finish(&self) -> i32 {
        let mut line = [0u8; 64];
        let mut len = 0;
        for part in [
            number(self.passed).as_slice(),
            b" passed, ",
            number(self.failed).as_slice(),
            b" failed\n",
        ] {
            let part = trim(part);
            line[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        sys::write(1, &line[..len]);
        i32::from(self.failed > 0)
    }
}

/// The decimal digits of `n`, right-aligned in 20 bytes (leading NULs).
fn number(mut n: usize) -> [u8; 20] {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return digits;
        }
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}
