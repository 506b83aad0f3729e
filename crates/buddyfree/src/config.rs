use crate::Error;

/// The shape of an allocator: how many units it manages, its largest order, and how many
/// cores share it (for per-core state; `core` hints are taken modulo this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Units managed in all.
    pub units: usize,
    /// The largest order that can be allocated; blocks have at most `2^max_order` units.
    pub max_order: u32,
    /// Cores (or threads) with their own per-core state.
    pub cores: usize,
}

impl Config {
    /// A configuration of `units` units, blocks up to `2^max_order` units, and one core.
    pub const fn new(units: usize, max_order: u32) -> Self {
        Config {
            units,
            max_order,
            cores: 1,
        }
    }

    /// The same configuration with `cores` cores.
    pub const fn with_cores(self, cores: usize) -> Self {
        Config { cores, ..self }
    }

    /// Checks what every allocator needs: at least one unit, at least one core, and room for
    /// one block of the largest order.
    pub fn validate(&self) -> Result<(), Error> {
        let fits = self.max_order < usize::BITS && (1usize << self.max_order) <= self.units;
        if self.units == 0 || self.cores == 0 || !fits {
            return Err(Error::InvalidConfig);
        }
        Ok(())
    }
}
