//! A measured value judged by its conditions under the evaluation bounds ([`judge_bounded`]): on the calling thread
//! when the conditions are cheap by construction, else on the [`Evaluator`](super::Evaluator). The conditions
//! themselves ([`crate::conditions::evaluate`]) know nothing of where they run.

use common::api::HookPhase;
use expr::Value;

use crate::conditions::evaluate::{EvalError, inline_safe, judge, show, to_json};

/// [`judge`] under the evaluation bounds: inline when [`inline_safe`], else on the evaluator (worker processes in
/// the operator, see [`crate::isolation`]), queued fairly with the other evaluations of `namespace`. Every way it
/// can fail (a bound, a panic) is an [`EvalError`].
pub async fn judge_bounded(
    evaluator: &crate::isolation::Evaluator,
    namespace: &str,
    success: Option<&str>,
    failure: Option<&str>,
    result: Value,
) -> Result<HookPhase, EvalError> {
    let limits = evaluator.limits();
    if inline_safe(success, failure, &result) {
        return judge_inline(success, failure, &result, limits);
    }
    let question = Question { namespace, success, failure, shown: show(&result), limits };
    if let crate::isolation::Evaluator::Threads(pool) = evaluator {
        return question.on_threads(pool, result).await;
    }
    question.on_worker(evaluator, result).await
}

/// A value whose conditions are not cheap by construction, as the evaluator takes it: the conditions, the
/// namespace its evaluation queues with, the value as an error shows it, and the bounds.
struct Question<'a> {
    namespace: &'a str,
    success: Option<&'a str>,
    failure: Option<&'a str>,
    shown: String,
    limits: crate::conditions::budget::Limits,
}

/// The error of an evaluation stopped at a bound (or failed inside the operator), naming the condition it ran.
fn stopped(
    success: Option<&str>,
    failure: Option<&str>,
    reason: String,
    shown: String,
) -> Result<HookPhase, EvalError> {
    let which = if failure.is_some_and(|f| !f.trim().is_empty()) { "failureCondition" } else { "successCondition" };
    let expression = crate::text::excerpt(failure.or(success).unwrap_or_default(), 200);
    Err(EvalError::Budget { which, expression, result: shown, reason })
}

/// On the calling thread, metered (the conditions are cheap by construction).
fn judge_inline(
    success: Option<&str>,
    failure: Option<&str>,
    result: &Value,
    limits: crate::conditions::budget::Limits,
) -> Result<HookPhase, EvalError> {
    let deadline = std::time::Instant::now() + limits.timeout;
    let outcome = crate::conditions::budget::metered(limits.memory, deadline, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| judge(success, failure, result)))
    });
    match outcome {
        Ok(verdict) => verdict,
        Err(panic) => stopped(
            success,
            failure,
            format!(
                "the evaluation failed inside the operator ({})",
                crate::conditions::budget::panic_message(panic.as_ref())
            ),
            show(result),
        ),
    }
}

impl Question<'_> {
    /// The error of this evaluation stopped at a bound, for `reason`.
    fn stopped(self, reason: String) -> Result<HookPhase, EvalError> {
        stopped(self.success, self.failure, reason, self.shown)
    }

    /// On the in-process evaluation threads (checkpoints, no hard bounds).
    async fn on_threads(self, pool: &crate::conditions::budget::Pool, result: Value) -> Result<HookPhase, EvalError> {
        let (success_text, failure_text) = (self.success.map(str::to_string), self.failure.map(str::to_string));
        let outcome = pool
            .run(self.namespace, move || {
                let verdict = judge(success_text.as_deref(), failure_text.as_deref(), &result);
                // Dropping a large result is part of the evaluation's work: do it here, not on the async worker.
                drop(result);
                verdict
            })
            .await;
        match outcome {
            Ok(verdict) => verdict,
            Err(crate::conditions::budget::Stopped::Panicked(message)) => {
                self.stopped(format!("the evaluation failed inside the operator ({message})"))
            }
            Err(crate::conditions::budget::Stopped::Late(_)) => {
                let timeout = self.limits.timeout;
                self.stopped(format!("no verdict within {}", crate::text::seconds(timeout)))
            }
        }
    }

    /// In an evaluation worker process (hard bounds), the value handed over as JSON.
    async fn on_worker(self, evaluator: &crate::isolation::Evaluator, result: Value) -> Result<HookPhase, EvalError> {
        let Some(json) = to_json(&result) else {
            return self.stopped("the value cannot be handed to an evaluation worker (not JSON)".into());
        };
        let job = crate::isolation::Job {
            reading: crate::isolation::Reading::Value { display: self.shown.clone() },
            success: self.success.map(str::to_string),
            failure: self.failure.map(str::to_string),
        };
        drop(result);
        let body = serde_json::to_vec(&json).unwrap_or_default();
        drop(json);
        match evaluator.run(self.namespace, job, body).await {
            Ok(crate::isolation::Outcome { verdict, .. }) => match verdict {
                crate::isolation::Verdict::Judged(phase) | crate::isolation::Verdict::Answered(phase, _) => Ok(phase),
                crate::isolation::Verdict::Error(message) => Err(EvalError::Reported(message)),
            },
            Err(e) => {
                let reason = stop_reason(&e, self.limits);
                self.stopped(reason)
            }
        }
    }
}

/// Why an evaluation was stopped, naming the bound.
fn stop_reason(stopped: &crate::isolation::Stopped, limits: crate::conditions::budget::Limits) -> String {
    use crate::isolation::Stopped;
    match stopped {
        Stopped::Memory => format!(
            "it needed more than {} of memory, the memory bound (--condition-memory-bytes)",
            crate::text::bytes(limits.memory)
        ),
        Stopped::Time => {
            format!("no verdict within {}, the time bound (--condition-timeout)", crate::text::seconds(limits.timeout))
        }
        Stopped::Crashed(how) => format!("the evaluation failed inside the operator ({how})"),
        Stopped::Unavailable(why) => format!("it could not be evaluated: {why}"),
        Stopped::Queued(waited) => format!(
            "no evaluation worker within {}: this namespace's evaluations hit their bounds recently and run one at \
             a time",
            crate::text::seconds(*waited)
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conditions::evaluate::to_expr;

    fn threads(timeout_ms: u64) -> std::sync::Arc<crate::conditions::budget::Pool> {
        crate::conditions::budget::Pool::new(
            1,
            crate::conditions::budget::Limits {
                timeout: std::time::Duration::from_millis(timeout_ms),
                memory: 32 << 20,
            },
        )
    }

    fn pool(timeout_ms: u64) -> crate::isolation::Evaluator {
        crate::isolation::Evaluator::Threads(threads(timeout_ms))
    }

    fn big_result(n: i64) -> Value {
        Value::Array((0..n).map(Value::Integer).collect())
    }

    #[tokio::test]
    async fn inline_and_pool_evaluations_give_the_same_verdicts_and_messages() {
        let cases: &[(Option<&str>, Option<&str>, serde_json::Value)] = &[
            (Some("asInt(result) > 30"), None, json!(45)),
            (Some("asInt(result) > 30"), None, json!("bryan")),
            (Some("asInt(result) < 30"), Some("asInt(result) > 100"), json!(45)),
            (None, Some("result == 'down'"), json!("down")),
            (Some("result"), None, json!(3)),
            (Some("asInt(reslt) > 30"), None, json!(45)),
        ];
        for (success, failure, result) in cases {
            let value = to_expr(result);
            let threads = threads(1000);
            let (s, f, v) = (success.map(str::to_string), failure.map(str::to_string), value.clone());
            let pooled = threads.run("ns", move || judge(s.as_deref(), f.as_deref(), &v)).await.unwrap();
            assert!(inline_safe(*success, *failure, &value));
            let inline = judge_bounded(&pool(1000), "ns", *success, *failure, value).await;
            assert_eq!(inline, pooled, "{success:?} {failure:?} on {result}");
        }
    }

    #[tokio::test]
    async fn hostile_ranges_are_refused_before_anything_is_built() {
        let start = std::time::Instant::now();
        for condition in ["len(0..20000000) > 0", "len(0..1000000000000) > 0", "all(0..9999, {all(0..9999, {true})})"] {
            let err = judge_bounded(&pool(1000), "ns", Some(condition), None, Value::Nil).await.unwrap_err();
            assert!(matches!(err, EvalError::Rejected { .. }), "{condition}: {err}");
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_condition_that_grows_a_value_is_stopped_by_the_memory_budget() {
        // Each element maps to a copy of the whole result: 20,000 copies of 20,000 values (~12 GiB) unbounded.
        let err = judge_bounded(&pool(60_000), "ns", Some("len(map(result, {result})) > 0"), None, big_result(20_000))
            .await
            .unwrap_err();
        assert!(matches!(&err, EvalError::Budget { reason, .. } if reason.contains("more memory")), "{err}");
        let err = judge_bounded(&pool(1000), "ns", Some("len(repeat('ab', 100000000)) > 0"), None, Value::Nil)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("repeat() would build a string of 200000000 bytes"), "{err}");
        let err = judge_bounded(
            &pool(1000),
            "ns",
            Some("len(replace(result, '', result)) > 0"),
            None,
            Value::String("x".repeat(10_000)),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("replace() would build"), "{err}");
    }

    #[tokio::test]
    async fn a_condition_that_runs_too_long_is_stopped_at_its_deadline() {
        let start = std::time::Instant::now();
        let err = judge_bounded(
            &pool(200),
            "ns",
            Some("all(result, {all(result, {all(result, {true})})})"),
            None,
            big_result(5_000),
        )
        .await
        .unwrap_err();
        assert!(matches!(&err, EvalError::Budget { reason, .. } if reason.contains("ran longer")), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "{:?}", start.elapsed());
        // The pool is free again for the next condition.
        assert_eq!(
            judge_bounded(&pool(200), "ns", Some("result == 1"), None, Value::Integer(1)).await,
            Ok(HookPhase::Successful)
        );
    }
}
