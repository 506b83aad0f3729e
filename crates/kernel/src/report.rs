//! Counting the kernel's checks and printing the failed ones.

use crate::println;

#[derive(Default)]
pub struct Report {
    pub passed: usize,
    pub failed: usize,
    section: &'static str,
}

impl Report {
    /// Names what the next checks are about.
    pub fn section(&mut self, name: &'static str) {
        self.section = name;
    }

    /// Counts a check; prints it if it failed.
    pub fn check(&mut self, what: &str, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            println!("{}: FAILED: {what}", self.section);
        }
    }
}
