//! `print!`/`println!` over the firmware console, one line at a time across harts.

use core::fmt::{self, Write};

use crate::sbi;

/// Serialises whole messages, so that lines of different harts do not interleave. Never taken
/// in an interrupt handler (which prints nothing).
static CONSOLE: spin::Mutex<()> = spin::Mutex::new(());

struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.bytes().for_each(sbi::putchar);
        Ok(())
    }
}

pub fn print(args: fmt::Arguments) {
    let _line = CONSOLE.lock();
    let _ = Console.write_fmt(args);
}

#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::console::print(format_args!($($arg)*)) };
}

#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints without waiting for the console: for the panic handler, which may run while its
/// own hart holds the lock.
pub fn print_unlocked(args: fmt::Arguments) {
    let _ = Console.write_fmt(args);
}
