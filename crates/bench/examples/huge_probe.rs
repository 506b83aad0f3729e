use buddyfree::{BlockAlloc, Config};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = &args[1];
    let units: usize = args[2].parse::<usize>().unwrap() << 18;
    let order: u32 = args[3].parse().unwrap();
    let n: usize = args[4].parse().unwrap();
    let reps: usize = args[5].parse().unwrap();
    let a = build(name, units);
    let mut held = Vec::with_capacity(n);
    for _ in 0..reps {
        for _ in 0..n { held.push(a.alloc(order, 0).unwrap()); }
        for &i in &held { a.free(i, order, 0).unwrap(); }
        held.clear();
    }
    let hold: Vec<usize> = (0..n).map(|_| a.alloc(order, 0).unwrap()).collect();
    for _ in 0..reps * n {
        let i = a.alloc(order, 0).unwrap();
        a.free(i, order, 0).unwrap();
    }
    std::hint::black_box(hold);
}
fn build(name: &str, units: usize) -> buddyfree::registry::DynAlloc {
    let e = buddyfree::registry::find(name).unwrap();
    (e.build)(Config::new(units, 10), buddyfree::magazine::Settings::new()).unwrap()
}
