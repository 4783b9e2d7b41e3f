//! Hyper-parameters that cannot work are errors, not panics or meaningless numbers.

use aneforge::engine::Engine;
use aneforge::Target;
use aneforge_apps::char_lm::{CharLm, CharLmConfig};
use aneforge_apps::data::CharDataset;

fn tiny_lm() -> CharLm {
    let text = "to be, or not to be, that is the question. ".repeat(40);
    let data = CharDataset::new(&text, 0.1).unwrap();
    let cfg = CharLmConfig {
        context: 8,
        d_model: 16,
        heads: 2,
        layers: 1,
        mlp: 32,
        batch: 2,
        ..CharLmConfig::default()
    };
    CharLm::new(data, cfg, Target::Cpu, Engine::Cpu).unwrap()
}

#[test]
fn bad_temperatures_and_zero_validation_batches_are_errors() {
    let mut lm = tiny_lm();
    for t in [f32::NAN, f32::INFINITY, -0.5] {
        let err = lm.sample("to", 4, t, 1).unwrap_err().to_string();
        assert!(
            err.contains("temperature") && err.contains(&t.to_string()),
            "{err}"
        );
    }
    assert_eq!(lm.sample("to", 4, 0.8, 1).unwrap().chars().count(), 4);
    let err = lm.val_loss(0).unwrap_err().to_string();
    assert!(err.contains("validation batch"), "{err}");
    assert!(lm.val_loss(1).unwrap().is_finite());
}
