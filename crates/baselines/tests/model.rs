//! The battery run on the reference model behind a lock: it checks the harness itself.

mod common;

use buddyfree::{Config, Locked};
use buddyfree_baselines::model::Model;
use proptest::prelude::*;

proptest! {
    #[test]
    fn locked_model_matches_model(ops in common::ops(64, 4, 200)) {
        let config = Config::new(64, 4);
        common::check_against_model(&Locked::<Model>::new(Model::new(config).unwrap()), config, &ops);
    }
}

#[test]
fn locked_model_survives_stress() {
    let alloc = Locked::<Model>::new(Model::new(Config::new(256, 4)).unwrap());
    assert!(common::stress(&alloc, 4, 2_000, 4) > 0);
}

#[test]
fn locked_model_frees_each_block_once_under_racing_double_frees() {
    let alloc = Locked::<Model>::new(Model::new(Config::new(256, 4)).unwrap());
    common::double_free_race(&alloc, 4, 128, 1);
}
