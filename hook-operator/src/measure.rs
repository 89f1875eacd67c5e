//! Taking one measurement: provider call under a timeout, then the verdict. Every failure becomes an `Error`
//! measurement whose message says what went wrong; nothing here can panic or hang.

use std::time::{Duration, Instant};

use common::api::{Argument, HookPhase, Measurement, Metric};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::conditions::evaluate;
use crate::isolation::{Job, Verdict};
use crate::providers::{Answer, Kept, Observation, Providers};

/// Extra time granted beyond a provider's own timeout before the measurement is abandoned, so the provider
/// reports its own (more precise) timeout message first.
const GRACE: Duration = Duration::from_secs(2);

/// A measurement as taken: the status entry plus what the metrics record about the call.
#[derive(Debug, Clone)]
pub struct Taken {
    /// The entry for `status.metricResults[].measurements`, phase and message set.
    pub measurement: Measurement,
    /// When it finished: the next measurement of the metric is scheduled from here.
    pub finished_at: Timestamp,
    /// How long the provider call took (the measurement latency histogram).
    pub latency: Duration,
    /// `web`, `prometheus` or `kubernetes` (the histogram's label).
    pub provider: &'static str,
}

fn verdict_message(metric: &Metric, phase: HookPhase) -> Option<String> {
    let success = metric.success_condition.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let failure = metric.failure_condition.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match (phase, success, failure) {
        // With a failure condition, Failed always means it held.
        (HookPhase::Failed, _, Some(f)) => Some(format!("failureCondition `{f}` is true")),
        (HookPhase::Failed, Some(s), None) => Some(format!("successCondition `{s}` is false")),
        (HookPhase::Inconclusive, Some(s), Some(f)) => {
            Some(format!("neither successCondition `{s}` nor failureCondition `{f}` is true"))
        }
        _ => None,
    }
}

/// An Error measurement that started at `started_at` and ends now.
pub fn failed(started_at: Timestamp, message: String) -> Taken {
    let finished_at = Timestamp::now();
    Taken {
        measurement: Measurement {
            phase: Some(HookPhase::Error),
            message: Some(message),
            started_at: Some(Time(started_at)),
            finished_at: Some(Time(finished_at)),
            resume_at: None,
            value: None,
        },
        finished_at,
        latency: std::time::Duration::ZERO,
        provider: "none",
    }
}

/// [`take_in`] for a run without a namespace (`check`, tests).
pub async fn take(providers: &Providers, metric: &Metric, args: &[Argument]) -> Taken {
    take_in(providers, "", metric, args).await
}

/// Takes one measurement of `metric` for a run in `namespace`: the provider call under its timeout, then the
/// conditions on the evaluation pool under their budget (queued fairly per namespace).
pub async fn take_in(providers: &Providers, namespace: &str, metric: &Metric, args: &[Argument]) -> Taken {
    take_kept(providers, namespace, metric, args, &mut Kept::default()).await
}

/// [`take_in`] with what the run kept from its previous measurement of `metric` (see [`Kept`]), left in `kept` for
/// its next one.
pub async fn take_kept(
    providers: &Providers,
    namespace: &str,
    metric: &Metric,
    args: &[Argument],
    kept: &mut Kept,
) -> Taken {
    let started_at = Timestamp::now();
    let (args, secrets) = match providers.resolve_args(namespace, args).await {
        Ok(resolved) => resolved,
        Err(e) => return failed(started_at, crate::providers::redact::text(&e.0, &[])),
    };
    // Args read from Secrets (then owned, not borrowed from the spec) may change between measurements: a request is
    // rendered with them for each measurement, and not kept after it.
    let from_secrets = matches!(args, std::borrow::Cow::Owned(_));
    if from_secrets {
        kept.forget_request();
    }
    let mut taken = measure(providers, namespace, metric, &args, started_at, kept).await;
    if from_secrets {
        kept.forget_request();
    }
    kept.tidy();
    // Credentials never reach status, Events or logs: values read from Secrets, credential headers (Authorization,
    // Cookie, *token*, *key*, …), URL userinfo and
    // token query parameters are masked in what the measurement says.
    let mut sensitive = secrets;
    if let Some(web) = &metric.provider.web {
        for header in web.headers.iter().filter(|h| crate::providers::redact::sensitive_header(&h.key)) {
            if let Ok(value) = crate::conditions::template::render("header", &header.value, &args) {
                sensitive.push(value);
            }
        }
    }
    for text in [&mut taken.measurement.message, &mut taken.measurement.value].into_iter().flatten() {
        crate::providers::redact::text_in_place(text, &sensitive);
    }
    taken
}

async fn measure(
    providers: &Providers,
    namespace: &str,
    metric: &Metric,
    args: &[Argument],
    started_at: Timestamp,
    kept: &mut Kept,
) -> Taken {
    let clock = Instant::now();
    let (phase, message, value, kind) = match Providers::choose(metric) {
        Err(e) => (HookPhase::Error, Some(e.0), None, "none"),
        Ok(which) => {
            let provider = providers.provider(which);
            let limit = provider.timeout(metric) + GRACE;
            let observed = if provider.bounds_itself() {
                // One timer per measurement: the provider's own.
                Ok(providers.measure(which, namespace, metric, args, kept).await)
            } else {
                tokio::time::timeout(limit, providers.measure(which, namespace, metric, args, kept)).await
            };
            match observed {
                Err(_) => (
                    HookPhase::Error,
                    Some(format!("no result within {}", crate::text::seconds(limit))),
                    None,
                    provider.kind(),
                ),
                Ok(Err(e)) => (HookPhase::Error, Some(e.0), None, provider.kind()),
                Ok(Ok(answer)) => {
                    let (phase, message, value) = settle(providers, namespace, metric, answer, kept).await;
                    (phase, message, value, provider.kind())
                }
            }
        }
    };
    let finished_at = Timestamp::now();
    Taken {
        measurement: Measurement {
            phase: Some(phase),
            message,
            started_at: Some(Time(started_at)),
            finished_at: Some(Time(finished_at)),
            resume_at: None,
            value,
        },
        finished_at,
        latency: clock.elapsed(),
        provider: kind,
    }
}

/// What an answer says: the phase, the measurement's message and the value stored in status. Cheap answers are
/// read and judged here (and their buffer goes back to `kept` for the next answer); everything else on the
/// evaluation workers, under their bounds (see [`crate::isolation`]).
async fn settle(
    providers: &Providers,
    namespace: &str,
    metric: &Metric,
    answer: Answer,
    kept: &mut Kept,
) -> (HookPhase, Option<String>, Option<String>) {
    let (success, failure) = (metric.success_condition.as_deref(), metric.failure_condition.as_deref());
    let raw = match answer {
        Answer::Observed(observation) => return judge(providers, namespace, metric, observation).await,
        Answer::Raw(raw) => raw,
    };
    if raw.cheap() {
        let observation = match raw.read() {
            Ok(observation) => observation,
            Err(e) => {
                kept.keep_answer(raw.response.body);
                return (HookPhase::Error, Some(e.0), None);
            }
        };
        if observation.verdict.is_some() || evaluate::inline_safe(success, failure, &observation.result) {
            let judged = judge(providers, namespace, metric, observation).await;
            kept.keep_answer(raw.response.body);
            return judged;
        }
    }
    let job =
        Job { reading: raw.reading(), success: success.map(str::to_string), failure: failure.map(str::to_string) };
    let mut response = raw.response;
    let body = std::mem::take(&mut response.body);
    let outcome = providers.conditions.run(namespace, job.clone(), body).await;
    // The answer's share of the buffered-bytes budget ends with its evaluation.
    drop(response);
    match outcome {
        Ok(outcome) => {
            let (phase, message) = match outcome.verdict {
                Verdict::Judged(phase) => (phase, verdict_message(metric, phase)),
                Verdict::Answered(phase, message) => (phase, Some(message)),
                Verdict::Error(message) => (HookPhase::Error, Some(message)),
            };
            (phase, message, outcome.display)
        }
        Err(stopped) => (HookPhase::Error, Some(providers.conditions.explain(&job, &stopped)), None),
    }
}

/// Judges a value already read: the provider's own verdict, or the conditions (inline when cheap, else on the
/// evaluation workers).
async fn judge(
    providers: &Providers,
    namespace: &str,
    metric: &Metric,
    observation: Observation,
) -> (HookPhase, Option<String>, Option<String>) {
    let value = Some(observation.display);
    if let Some((phase, message)) = observation.verdict {
        return (phase, Some(message), value);
    }
    match crate::isolation::judge::judge_bounded(
        &providers.conditions,
        namespace,
        metric.success_condition.as_deref(),
        metric.failure_condition.as_deref(),
        observation.result,
    )
    .await
    {
        Ok(phase) => (phase, verdict_message(metric, phase), value),
        Err(e) => (HookPhase::Error, Some(e.to_string()), value),
    }
}
