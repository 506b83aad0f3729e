//! The persistent-zone allocators (`llfree-zone-*`): each builds over a file of its own in the
//! temporary folder, runs the workloads like the volatile LLFree, and closes and removes the
//! file when dropped. One test, so that no other test of this binary makes zone files while
//! it counts them.

use buddybench::allocs::{AllocSpec, Lock};
use buddybench::workloads::{self, Params, Workload};
use buddybench::zone::{ZoneAlloc, MODES, MSYNC_MAX_CALLS};
use buddyfree::llfree::persist::Durability;
use buddyfree::Config;

/// This process's zone files in the temporary folder.
fn zone_files() -> Vec<String> {
    let prefix = format!("buddybench-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".zone"))
        .collect()
}

#[test]
fn zones_run_the_workloads_and_remove_their_files() {
    assert!(zone_files().is_empty());
    // Small, for the zone whose every operation is a system call and a page write.
    let config = Config::new(1 << 10, 10);
    let p = Params {
        llfree_units: 1 << 9,
        ..Params::quick()
    };

    let zone = ZoneAlloc::new(config, Durability::None).unwrap();
    assert!(zone.path().exists());
    let path = zone.path().to_path_buf();
    let out = workloads::run(Workload::Bulk, &zone, 0, 2, &p);
    assert_eq!((out.failures, out.bad_frees), (0, 0));
    assert_eq!(out.allocs, out.frees);
    drop(zone);
    assert!(!path.exists(), "closed and removed");

    for mode in &MODES {
        let spec = AllocSpec::find(mode.name).expect("registered by name");
        assert!(spec.has_region(), "{}", mode.name);
        let a = spec.build(config, Lock::Ticket).unwrap();
        assert_eq!(
            zone_files().len(),
            1,
            "{}: one file while it lives",
            mode.name
        );
        for w in [Workload::Bulk, Workload::FullHeap] {
            let out = workloads::run(w, &*a, 0, 1, &p);
            assert_eq!(out.bad_frees, 0, "{} {}", mode.name, w.name());
            a.drain();
            assert_eq!(a.free_units(), config.units, "{} {}", mode.name, w.name());
        }
        drop(a);
        assert!(zone_files().is_empty(), "{}: file removed", mode.name);
        // Only the zone whose every operation is a system call is capped, and its
        // description says by how much.
        match mode.durability {
            Durability::Msync => {
                assert_eq!(spec.max_calls(), Some(MSYNC_MAX_CALLS));
                assert!(mode.about.contains(&MSYNC_MAX_CALLS.to_string()));
            }
            _ => assert_eq!(spec.max_calls(), None),
        }
    }
}
