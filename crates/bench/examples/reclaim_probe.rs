use buddyfree::{BlockAlloc, Config};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = &args[1];
    let units: usize = args[2].parse::<usize>().unwrap() << 18;
    let tries: usize = args[3].parse().unwrap();
    let e = buddyfree::registry::find(name).unwrap();
    let a = (e.build)(Config::new(units, 10), buddyfree::magazine::Settings::new()).unwrap();
    let mut held = Vec::new();
    while let Ok(i) = a.alloc(0, 0) {
        held.push(i);
    }
    held.retain(|&i| {
        if i % 512 == 0 {
            a.free(i, 0, 0).unwrap();
            false
        } else {
            true
        }
    });
    let t = Instant::now();
    let r = a.alloc(9, 0);
    println!("first {:?} {:?}", t.elapsed(), r.is_ok());
    let t = Instant::now();
    for n in 0..tries {
        let at = n % 64;
        a.free(held[at], 0, 0).unwrap();
        if let Ok(i) = a.alloc(0, 0) {
            held[at] = i;
        }
        assert!(a.alloc(9, 0).is_err());
    }
    println!(
        "retake {:.1} ns",
        t.elapsed().as_nanos() as f64 / tries as f64
    );
}
