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
    /// A configuration of `units` units, blocks up to `2^max_order` units, and **one core**.
    ///
    /// One core is the choice that is right everywhere, including `const` statics and
    /// `no_std` kernels before they know their core count: every allocator works with it, and
    /// `core` hints are then all the same slot. Allocators with per-core state (`nbbs`'s
    /// hints, LLFree's reservations, the per-core caches and lists) scale only with as many
    /// cores as threads use them, so say how many with [`with_cores`](Config::with_cores)
    /// or, under `std`, [`with_available_cores`](Config::with_available_cores).
    ///
    /// ```
    /// use buddyfree::Config;
    ///
    /// let config = Config::new(1 << 18, 9).with_cores(4);
    /// assert_eq!((config.units, config.max_order, config.cores), (1 << 18, 9, 4));
    /// assert!(config.validate().is_ok());
    /// ```
    #[must_use]
    pub const fn new(units: usize, max_order: u32) -> Self {
        Config {
            units,
            max_order,
            cores: 1,
        }
    }

    /// The same configuration with `cores` cores.
    #[must_use]
    pub const fn with_cores(self, cores: usize) -> Self {
        Config { cores, ..self }
    }

    /// The same configuration with as many cores as the machine offers this process
    /// ([`std::thread::available_parallelism`]; one if that is unknown).
    ///
    /// ```
    /// let config = buddyfree::Config::new(1 << 14, 9).with_available_cores();
    /// assert!(config.cores >= 1);
    /// ```
    #[cfg(feature = "std")]
    #[cfg_attr(docsrs, doc(cfg(feature = "std")))]
    #[must_use]
    pub fn with_available_cores(self) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.with_cores(cores)
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
