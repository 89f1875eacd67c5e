//! Property tests with hostile generators (see `hook_operator::testing::fuzz`): conditions, JSONPaths, templates,
//! durations, HookTemplate validation and web responses never panic and each case ends within
//! `fuzz::CASE_DEADLINE`. `hook-fuzz` runs the same targets for longer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use hook_operator::conditions::budget::Limits;
use hook_operator::isolation::{Evaluator, workers};
use hook_operator::testing::fuzz;
use proptest::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_never_panic_and_stay_bounded() {
    // On the evaluation workers, as in the operator.
    let pool = Evaluator::Processes(
        workers::Workers::start(workers::Settings {
            binary: env!("CARGO_BIN_EXE_hook-operator").into(),
            workers: 2,
            limits: Limits::default(),
            max_body_bytes: 1 << 20,
            penalty: std::time::Duration::from_secs(300),
            queue_timeout: std::time::Duration::from_secs(30),
        })
        .unwrap(),
    );
    let report = fuzz::run(&pool, 100, 1).await;
    assert_eq!(report.cases, 100 * fuzz::TARGETS.len());
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Arbitrary text as a condition: a verdict or a message, never a panic.
    #[test]
    fn any_text_as_a_condition(text in "\\PC{0,300}") {
        if let Err(problem) = hook_operator::conditions::syntax::check(&text) {
            prop_assert!(!problem.is_empty());
        }
        let _ = hook_operator::conditions::evaluate::compile("successCondition", &text);
    }

    #[test]
    fn any_text_as_a_template_jsonpath_or_duration(text in "[{}\\\\a-z. >#/*!\"'\\[\\]$@?()0-9]{0,200}") {
        let _ = hook_operator::conditions::template::render("url", &text, &[common::api::Argument::new("a", "1")]);
        let _ = hook_operator::conditions::jsonpath::Path::parse(&text);
        let _ = common::duration::parse_go(&text);
    }

    #[test]
    fn any_bytes_as_a_response(body in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let path = hook_operator::conditions::jsonpath::Path::parse("{$.age}").ok();
        let _ = hook_operator::answer::web::interpret("GET http://x/", &body, path.as_ref());
        let _ = hook_operator::answer::web::interpret("GET http://x/", &body, None);
        let _ = hook_operator::answer::prometheus::interpret(&body, "q");
    }
}
