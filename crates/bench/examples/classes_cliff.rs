//! Classes on a fragmented heap, one thread (issue 57, item 2): 130 trees of one 2 MiB frame
//! each (66 637 units), filled with order 0, then all but one unit per frame freed; then a
//! loop of mixed-order, mixed-class allocations that allocates until refused, frees a random
//! live block and asks for the last refused order again. Prints ns per allocation for each
//! policy and its ratio to `Policy::single` (same run).
//!
//! `cargo run --release -p buddybench --example classes_cliff -- [ops] [reps] [policy]`
//! (`policy`: run only the policies whose name contains it, for profiling one; ratios then
//! only where `single` ran too).

use std::hint::black_box;
use std::time::Instant;

use buddyfree::llfree::{Access, LLFree, Options, Policy};
use buddyfree::{BlockAlloc, Class, Config};

const UNITS: usize = 66_637;

fn five_classes() -> Policy {
    Policy::new(
        5,
        Class::MOVABLE,
        |c| Class::new(c.number() % 5),
        |_, _, free, capacity| match free == capacity {
            true => Access::Demote,
            false => Access::Fallback,
        },
    )
    .unwrap()
}

fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs the workload once; (allocation attempts, successes, seconds).
fn run(policy: Policy, classes: u8, ops: usize, seed: u64) -> (usize, usize, f64) {
    let options = Options::default().with_tree_children(1);
    let a = LLFree::builder(Config::new(UNITS, 9))
        .options(options)
        .policy(policy)
        .build()
        .unwrap();
    let mut s = seed;
    // Fill with order 0, keep one random unit per frame.
    let mut units = Vec::with_capacity(UNITS);
    while let Ok(i) = a.alloc(0, 0) {
        units.push(i);
    }
    let keep: Vec<usize> = (0..UNITS.div_ceil(512))
        .map(|f| f * 512 + rng(&mut s) as usize % 512.min(UNITS - f * 512))
        .collect();
    let mut live: Vec<(usize, u32)> = Vec::new();
    for i in units {
        if keep[i / 512] == i {
            live.push((i, 0));
        } else {
            a.free(i, 0, 0).unwrap();
        }
    }
    let pinned = live.len();
    let (mut attempts, mut got) = (0, 0);
    let mut refused: Option<(u32, Class)> = None;
    let start = Instant::now();
    while attempts < ops {
        let (order, class) = match refused.take() {
            Some(r) => r,
            None => {
                let r = rng(&mut s);
                match r % 16 {
                    0 => (9, Class::HUGE),
                    1..=3 => (
                        (r >> 8) as u32 % 4 + 1,
                        Class::new((r >> 16) as u8 % classes),
                    ),
                    _ => (0, Class::new((r >> 16) as u8 % classes)),
                }
            }
        };
        attempts += 1;
        match a.alloc_class(order, class, 0) {
            Ok(i) => {
                got += 1;
                live.push((black_box(i), order));
            }
            Err(_) => {
                if live.len() > pinned {
                    refused = Some((order, class));
                    let k = pinned + rng(&mut s) as usize % (live.len() - pinned);
                    let (i, o) = live.swap_remove(k);
                    a.free(i, o, 0).unwrap();
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    (attempts, got, secs)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let reps: usize = args.next().map_or(3, |a| a.parse().unwrap());
    let only = args.next().unwrap_or_default();
    let policies: [(&str, Policy, u8); 4] = [
        ("single", Policy::single(), 3),
        ("small_huge", Policy::small_huge(), 3),
        (
            "unmovable_movable_huge",
            Policy::unmovable_movable_huge(),
            3,
        ),
        ("five_classes", five_classes(), 5),
    ];
    for rep in 0..reps {
        let mut base = f64::NAN;
        for (name, policy, classes) in policies {
            if !name.contains(only.as_str()) {
                continue;
            }
            let (attempts, got, secs) = run(policy, classes, ops, 0x9E37_79B9 + rep as u64);
            let ns = secs * 1e9 / attempts as f64;
            if name == "single" {
                base = ns;
            }
            println!(
                "rep {rep} {name:<24} {ns:>9.1} ns/alloc  {:>5.2}x single  ({got} of {attempts} granted)",
                ns / base
            );
        }
    }
}
