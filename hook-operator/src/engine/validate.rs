//! Spec checks, shared by HookRuns (an invalid run ends `Error` with the first problem as its message) and
//! HookTemplates (every problem is reported as a Warning Event on the template).
//!
//! Unlike BCS, expressions, JSONPaths, URLs, durations and argument references are checked up front, so a
//! typo is reported when the template is applied rather than as an Error measurement minutes later.

use std::collections::HashSet;

use common::api::limits::*;
use common::api::{Argument, HookRunSpec, HookTemplateSpec, KubernetesMetric, Metric, PrometheusMetric, WebMetric};

use crate::conditions::{evaluate, jsonpath, template};

/// Argument names the workload operators inject into every HookRun they create; templates may use them
/// without declaring them. `PodContainer` and `ModifiedContainer` come indexed (`PodContainer[0]`).
pub const INJECTED_ARGS: &[&str] = &["PodName", "PodNamespace", "PodIP", "HostIP", "PodContainer", "ModifiedContainer"];

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Every problem of one metric, each a sentence a person can act on.
pub fn metric(metric: &Metric) -> Vec<String> {
    let mut problems = Vec::new();
    let mut problem = |text: String| problems.push(text);
    if metric.name.trim().is_empty() {
        problem("name must not be empty".into());
    }
    if let Some(oversized) = oversized(metric) {
        // Nothing else is checked: parsing text this long is exactly what the bound prevents.
        problem(oversized);
        return problems;
    }
    count(metric, &mut problem);
    limits(metric, &mut problem);
    conditions(metric, &mut problem);
    provider(metric, &mut problem);
    problems
}

/// `count`, `interval` and `initialDelay`.
fn count(metric: &Metric, problem: &mut impl FnMut(String)) {
    if metric.count < 0 {
        problem(format!("count must be >= 0, got {}", metric.count));
    }
    let interval = metric.interval.as_deref().map(str::trim).filter(|s| !s.is_empty());
    if metric.count > 1 && interval.is_none() {
        problem(format!("count {} needs an interval between measurements", metric.count));
    }
    if metric.count > 0 {
        for (name, limit) in [
            ("failureLimit", metric.failure_limit),
            ("successfulLimit", metric.successful_limit),
            ("inconclusiveLimit", metric.inconclusive_limit),
        ] {
            if limit > metric.count {
                problem(format!("{name} ({limit}) must not exceed count ({})", metric.count));
            }
        }
    }
    for (name, value) in [("interval", interval), ("initialDelay", metric.initial_delay.as_deref())] {
        if let Some(value) = value.map(str::trim).filter(|s| !s.is_empty())
            && let Err(e) = common::duration::parse_go(value)
        {
            problem(format!("{name}: {e}"));
        }
    }
}

/// The limits' own ranges.
fn limits(metric: &Metric, problem: &mut impl FnMut(String)) {
    if metric.failure_limit < -1 {
        problem(format!("failureLimit must be >= -1 (-1 disables it), got {}", metric.failure_limit));
    }
    for (name, value) in
        [("successfulLimit", metric.successful_limit), ("inconclusiveLimit", metric.inconclusive_limit)]
    {
        if value < 0 {
            problem(format!("{name} must be >= 0, got {value}"));
        }
    }
    if let Some(limit) = metric.consecutive_error_limit
        && limit < 0
    {
        problem(format!("consecutiveErrorLimit must be >= 0, got {limit}"));
    }
    if let Some(limit) = metric.consecutive_successful_limit
        && limit < 1
    {
        problem(format!("consecutiveSuccessfulLimit must be >= 1, got {limit}"));
    }
}

/// `successCondition` and `failureCondition` compile.
fn conditions(metric: &Metric, problem: &mut impl FnMut(String)) {
    for (which, condition) in [
        ("successCondition", metric.success_condition.as_deref()),
        ("failureCondition", metric.failure_condition.as_deref()),
    ] {
        if let Some(expression) = condition.map(str::trim).filter(|s| !s.is_empty())
            && let Err(e) = evaluate::compile(which, expression)
        {
            problem(e.to_string());
        }
    }
}

fn provider(metric: &Metric, problem: &mut impl FnMut(String)) {
    let p = &metric.provider;
    let set = [p.web.is_some(), p.prometheus.is_some(), p.kubernetes.is_some()].iter().filter(|s| **s).count();
    if p.exec.is_some() {
        problem(
            "provider.exec is not supported by this operator (BCS declares it but never implemented it): use a web \
             or kubernetes provider instead (or prometheus)"
                .into(),
        );
        return;
    }
    match set {
        0 => {
            return problem(
                "no provider: set exactly one of provider.web, provider.prometheus, provider.kubernetes".into(),
            );
        }
        1 => {}
        _ => {
            return problem(
                "several providers: set exactly one of provider.web, provider.prometheus, provider.kubernetes".into(),
            );
        }
    }
    if let Some(web) = &p.web {
        web_provider(web, problem);
    }
    if let Some(prometheus) = &p.prometheus {
        prometheus_provider(prometheus, problem);
    }
    if let Some(kubernetes) = &p.kubernetes {
        kubernetes_provider(kubernetes, problem);
    }
}

fn web_provider(web: &WebMetric, problem: &mut impl FnMut(String)) {
    if web.url.trim().is_empty() {
        problem("provider.web.url must not be empty".into());
    } else {
        url("provider.web.url", &web.url, problem);
    }
    if let Some(path) = web.json_path.as_deref()
        && let Err(e) = jsonpath::Path::cached(path)
    {
        problem(format!("provider.web.{e}"));
    }
    let method = web.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        problem(format!("provider.web.method {method:?} is not one of {}", METHODS.join(", ")));
    }
    if web.body.is_some() && (method == "GET" || method == "HEAD") {
        problem(format!("provider.web.body needs a method that sends a body (POST, PUT, PATCH), not {method}"));
    }
    if let Some(timeout) = web.timeout_seconds
        && !(0..=MAX_TIMEOUT_SECONDS).contains(&timeout)
    {
        problem(format!("provider.web.timeoutSeconds must be between 0 and {MAX_TIMEOUT_SECONDS}, got {timeout}"));
    }
    if web.headers.len() > MAX_ITEMS {
        problem(format!("provider.web.headers has {} entries; at most {MAX_ITEMS} are allowed", web.headers.len()));
    }
    for header in &web.headers {
        if reqwest::header::HeaderName::from_bytes(header.key.as_bytes()).is_err() {
            problem(format!("provider.web.headers: {:?} is not a valid header name", header.key));
        }
    }
}

fn prometheus_provider(prometheus: &PrometheusMetric, problem: &mut impl FnMut(String)) {
    if prometheus.query.trim().is_empty() {
        problem("provider.prometheus.query must not be empty".into());
    }
    if prometheus.address.trim().is_empty() {
        problem("provider.prometheus.address must not be empty".into());
    } else {
        url("provider.prometheus.address", &prometheus.address, problem);
    }
}

fn kubernetes_provider(kubernetes: &KubernetesMetric, problem: &mut impl FnMut(String)) {
    let function = kubernetes.function.as_str();
    if !matches!(function, "get" | "patch") {
        problem(format!("provider.kubernetes.function must be get or patch, got {function:?}"));
    }
    if kubernetes.fields.is_empty() {
        problem("provider.kubernetes.fields must not be empty".into());
    }
    if kubernetes.fields.len() > MAX_ITEMS {
        problem(format!(
            "provider.kubernetes.fields has {} entries; at most {MAX_ITEMS} are allowed",
            kubernetes.fields.len()
        ));
    }
    for field in &kubernetes.fields {
        if let Err(e) = crate::providers::kubernetes::FieldPath::parse(&field.path, function == "patch") {
            problem(format!("provider.kubernetes.fields: {e}"));
        }
    }
}

/// Characters of a Go duration (`1h30m`); longer ones are rejected before parsing.
const MAX_DURATION: usize = 64;

/// Every bounded text field of a metric with its limit (the CRD enforces the same; an old CRD does not).
fn lengths(metric: &Metric) -> Vec<(String, &str, usize)> {
    let mut fields: Vec<(String, &str, usize)> = vec![("name".into(), metric.name.as_str(), MAX_NAME)];
    for (name, value) in [("interval", &metric.interval), ("initialDelay", &metric.initial_delay)] {
        if let Some(value) = value {
            fields.push((name.into(), value.as_str(), MAX_DURATION));
        }
    }
    for (name, value) in
        [("successCondition", &metric.success_condition), ("failureCondition", &metric.failure_condition)]
    {
        if let Some(value) = value {
            fields.push((name.into(), value.as_str(), MAX_CONDITION));
        }
    }
    if let Some(web) = &metric.provider.web {
        fields.push(("provider.web.url".into(), web.url.as_str(), MAX_URL));
        if let Some(body) = &web.body {
            fields.push(("provider.web.body".into(), body.as_str(), MAX_BODY));
        }
        if let Some(path) = &web.json_path {
            fields.push(("provider.web.jsonPath".into(), path.as_str(), MAX_PATH));
        }
        for header in &web.headers {
            fields.push(("provider.web.headers[].key".into(), header.key.as_str(), MAX_NAME));
            fields.push((
                format!("provider.web.headers[{}]", excerpt_name(&header.key)),
                header.value.as_str(),
                MAX_TEXT,
            ));
        }
    }
    if let Some(prometheus) = &metric.provider.prometheus {
        fields.push(("provider.prometheus.address".into(), prometheus.address.as_str(), MAX_URL));
        fields.push(("provider.prometheus.query".into(), prometheus.query.as_str(), MAX_TEXT));
    }
    if let Some(kubernetes) = &metric.provider.kubernetes {
        for field in &kubernetes.fields {
            fields.push(("provider.kubernetes.fields[].path".into(), field.path.as_str(), MAX_PATH));
            fields.push(("provider.kubernetes.fields[].value".into(), field.value.as_str(), MAX_TEXT));
        }
    }
    fields
}

/// The first field of a metric over its length limit, as a problem.
pub fn oversized(metric: &Metric) -> Option<String> {
    lengths(metric).into_iter().find_map(|(field, value, max)| {
        let length = value.chars().count();
        (length > max).then(|| format!("{field} is {length} characters long; at most {max} are allowed"))
    })
}

fn excerpt_name(name: &str) -> String {
    crate::text::excerpt(name, 40)
}

/// Things worth a warning on a template that do not make a run invalid.
pub fn template_warnings(spec: &HookTemplateSpec, settings: &crate::settings::EngineSettings) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, m) in spec.metrics.iter().enumerate() {
        if let Some(interval) = crate::engine::schedule::interval(m)
            && interval < settings.min_interval
        {
            warnings.push(format!(
                "metrics[{i}] ({}): interval {} is below the operator's minimum of {}; measurements will be {} apart",
                m.name,
                m.interval.as_deref().unwrap_or_default().trim(),
                crate::text::seconds(settings.min_interval),
                crate::text::seconds(settings.min_interval)
            ));
        }
    }
    warnings
}

/// A URL must be http(s); when arguments are substituted into the host we can only check the scheme.
fn url(field: &str, text: &str, problem: &mut impl FnMut(String)) {
    if let Err(e) = template::referenced_args(field, text) {
        return problem(e.to_string());
    }
    let text = text.trim();
    if text.starts_with("{{") {
        return;
    }
    if !(text.starts_with("http://") || text.starts_with("https://")) {
        return problem(format!("{field} {text:?} must start with http:// or https://"));
    }
    if !text.contains("{{")
        && let Err(e) = reqwest::Url::parse(text)
    {
        problem(format!("{field} {text:?} is not a valid URL: {e}"));
    }
}

/// Fields whose `{{ args.X }}` placeholders are rendered, with the label used in messages.
pub fn templated_fields(metric: &Metric) -> Vec<(String, &str)> {
    let mut fields = Vec::new();
    if let Some(web) = &metric.provider.web {
        fields.push(("url".to_string(), web.url.as_str()));
        for header in &web.headers {
            fields.push((format!("headers[{}]", header.key), header.value.as_str()));
        }
        if let Some(body) = &web.body {
            fields.push(("body".to_string(), body.as_str()));
        }
    }
    if let Some(prometheus) = &metric.provider.prometheus {
        fields.push(("query".to_string(), prometheus.query.as_str()));
    }
    fields
}

fn metrics(metrics: &[Metric]) -> Vec<String> {
    let mut problems = Vec::new();
    if metrics.is_empty() {
        problems.push("no metrics: spec.metrics needs at least one".to_string());
    }
    if metrics.len() > MAX_METRICS {
        // Nothing else is checked: a spec this large is rejected as a whole.
        return vec![format!("spec.metrics has {} entries; at most {MAX_METRICS} are allowed", metrics.len())];
    }
    let mut seen = HashSet::new();
    for (i, m) in metrics.iter().enumerate() {
        if !seen.insert(m.name.as_str()) {
            problems.push(format!("metrics[{i}]: duplicate metric name {:?}", m.name));
        }
        problems.extend(metric(m).into_iter().map(|p| format!("metrics[{i}] ({}): {p}", m.name)));
    }
    problems
}

fn args(args: &[Argument]) -> Vec<String> {
    let mut problems = Vec::new();
    if args.len() > MAX_ARGS {
        return vec![format!("spec.args has {} entries; at most {MAX_ARGS} are allowed", args.len())];
    }
    for arg in args {
        if arg.name.chars().count() > MAX_NAME {
            problems.push(format!(
                "args: the name {:?} is longer than {MAX_NAME} characters",
                crate::text::excerpt(&arg.name, 40)
            ));
        }
        if arg.value.as_ref().is_some_and(|v| v.chars().count() > MAX_ARG_VALUE) {
            problems
                .push(format!("args.{}: the value is longer than {MAX_ARG_VALUE} characters", excerpt_name(&arg.name)));
        }
        if let Some(from) = &arg.value_from {
            match &from.secret_key_ref {
                Some(r) if r.name.trim().is_empty() || r.key.trim().is_empty() => problems
                    .push(format!("args.{}: valueFrom.secretKeyRef needs a name and a key", excerpt_name(&arg.name))),
                None => problems.push(format!("args.{}: valueFrom needs secretKeyRef", excerpt_name(&arg.name))),
                Some(_) => {}
            }
        }
    }
    problems
}

/// Why a HookTemplate is refused, as one sentence: every problem of [`template()`], after the template's name. The
/// words `hook-operator check` prints and the admission webhook answers (`kubectl apply`), so a template is judged
/// the same wherever it is checked. `None`: valid.
pub fn template_refusal(name: &str, spec: &HookTemplateSpec) -> Option<String> {
    let problems = template(spec);
    (!problems.is_empty()).then(|| format!("invalid HookTemplate {name}: {}", problems.join("; ")))
}

/// Why a HookRun is refused: the first problem of [`run`], after the run's name (as [`template_refusal`]). The
/// controller ends such a run `Error` with the same problem.
pub fn run_refusal(name: &str, spec: &HookRunSpec) -> Option<String> {
    run(spec).err().map(|problem| format!("invalid HookRun {name}: {problem}"))
}

/// A run is valid when its metrics are and every referenced argument has a value.
pub fn run(spec: &HookRunSpec) -> Result<(), String> {
    let mut problems = args(&spec.args);
    problems.extend(metrics(&spec.metrics));
    if spec.metrics.len() > MAX_METRICS {
        return Err(problems.remove(0));
    }
    for (i, m) in spec.metrics.iter().enumerate().filter(|(_, m)| oversized(m).is_none()) {
        for (field, text) in templated_fields(m) {
            if let Err(e) = check_args(&field, text, &spec.args) {
                problems.push(format!("metrics[{i}] ({}): {e}", m.name));
            }
        }
    }
    match problems.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

fn check_args(field: &str, text: &str, args: &[Argument]) -> Result<(), template::TemplateError> {
    for name in template::referenced_args(field, text)? {
        match args.iter().find(|a| a.name == name) {
            None => {
                return Err(template::TemplateError::Missing {
                    field: field.to_string(),
                    name,
                    declared: if args.is_empty() {
                        "none".into()
                    } else {
                        args.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
                    },
                });
            }
            Some(arg) if !arg.is_set() => {
                return Err(template::TemplateError::NoValue { field: field.to_string(), name });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Every problem of a template. Arguments may be declared without a value (the HookRun's creator supplies
/// it); referencing an argument that is neither declared nor injected by the workload operators is a problem.
pub fn template(spec: &HookTemplateSpec) -> Vec<String> {
    let mut problems = args(&spec.args);
    problems.extend(metrics(&spec.metrics));
    let declared: HashSet<&str> = spec.args.iter().map(|a| a.name.as_str()).collect();
    if spec.metrics.len() > MAX_METRICS {
        return problems;
    }
    for (i, m) in spec.metrics.iter().enumerate().filter(|(_, m)| oversized(m).is_none()) {
        for (field, text) in templated_fields(m) {
            let Ok(names) = template::referenced_args(&field, text) else { continue };
            for name in names {
                let injected = INJECTED_ARGS.iter().any(|base| name == *base || name.starts_with(&format!("{base}[")));
                if !declared.contains(name.as_str()) && !injected {
                    problems.push(format!(
                        "metrics[{i}] ({}): {field} uses {{{{ args.{name} }}}} but spec.args does not declare {name:?}",
                        m.name
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::api::{ExecMetric, KubernetesField, KubernetesMetric, MetricProvider, PrometheusMetric, WebMetric};

    fn web(url: &str) -> Metric {
        Metric {
            name: "webtest".into(),
            provider: MetricProvider {
                web: Some(WebMetric { url: url.into(), json_path: Some("{$.age}".into()), ..WebMetric::default() }),
                ..MetricProvider::default()
            },
            ..Metric::default()
        }
    }

    fn first(m: Metric) -> String {
        metric(&m).into_iter().next().unwrap_or_default()
    }

    #[test]
    fn the_bcs_example_templates_are_valid() {
        for file in [
            "hook-template-success.yaml",
            "hook-template-fail.yaml",
            "hook-template-args.yaml",
            "canary-hooktemplate.yaml",
        ] {
            let path = format!("{}/../examples/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let template: common::api::HookTemplate = serde_yaml::from_str(&text).unwrap();
            assert_eq!(super::template(&template.spec), Vec::<String>::new(), "{file}");
        }
    }

    #[test]
    fn each_rule_reports_a_readable_problem() {
        let cases: Vec<(Metric, &str)> = vec![
            (Metric { name: String::new(), ..web("http://x") }, "name must not be empty"),
            (Metric { count: 3, ..web("http://x") }, "count 3 needs an interval"),
            (Metric { count: -1, ..web("http://x") }, "count must be >= 0"),
            (
                Metric { count: 2, interval: Some("1s".into()), failure_limit: 3, ..web("http://x") },
                "failureLimit (3) must not exceed count (2)",
            ),
            (Metric { interval: Some("5".into()), ..web("http://x") }, "interval: invalid duration \"5\""),
            (Metric { initial_delay: Some("soon".into()), ..web("http://x") }, "initialDelay: invalid duration"),
            (Metric { failure_limit: -2, ..web("http://x") }, "failureLimit must be >= -1"),
            (Metric { consecutive_error_limit: Some(-1), ..web("http://x") }, "consecutiveErrorLimit must be >= 0"),
            (
                Metric { consecutive_successful_limit: Some(0), ..web("http://x") },
                "consecutiveSuccessfulLimit must be >= 1",
            ),
            (
                Metric { success_condition: Some("asInt(result) >".into()), ..web("http://x") },
                "successCondition `asInt(result) >` does not parse",
            ),
            (Metric { failure_condition: Some("(".into()), ..web("http://x") }, "failureCondition `(` does not parse"),
            (Metric { provider: MetricProvider::default(), ..web("http://x") }, "no provider"),
            (web("1.1.1.1:9091"), "must start with http:// or https://"),
            (web("http://{{ args.PodIP :9091"), "never closed"),
        ];
        for (m, want) in cases {
            let got = first(m);
            assert!(got.contains(want), "want {want:?}, got {got:?}");
        }
        let mut bad_path = web("http://x");
        bad_path.provider.web.as_mut().unwrap().json_path = Some("{.a}{.b}".into());
        assert!(first(bad_path).contains("jsonPath"));
        let mut both = web("http://x");
        both.provider.prometheus = Some(PrometheusMetric { address: "http://p".into(), query: "up".into() });
        assert!(first(both).contains("several providers"));
        let exec = Metric {
            provider: MetricProvider {
                exec: Some(ExecMetric { container: "c".into(), command: vec!["true".into()] }),
                ..MetricProvider::default()
            },
            ..web("http://x")
        };
        let refused = first(exec);
        assert!(refused.contains("provider.exec is not supported"), "{refused}");
        // Says what to use instead, in the words of the CRD's rule (common/tests/exec_provider.rs).
        assert!(refused.contains("use a web or kubernetes provider instead"), "{refused}");
        let kube = Metric {
            provider: MetricProvider {
                kubernetes: Some(KubernetesMetric {
                    function: "delete".into(),
                    fields: vec![KubernetesField { path: "spec.replicas".into(), value: "1".into() }],
                }),
                ..MetricProvider::default()
            },
            ..web("http://x")
        };
        let problems = metric(&kube);
        assert!(problems[0].contains("must be get or patch"), "{problems:?}");
        let mut post_get = web("http://x");
        post_get.provider.web.as_mut().unwrap().body = Some("{}".into());
        assert!(first(post_get).contains("needs a method that sends a body"));
        // Every method the CRD accepts is valid (OPTIONS was accepted by the schema but refused here).
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "options"] {
            let mut m = web("http://x");
            m.provider.web.as_mut().unwrap().method = Some(method.into());
            assert!(metric(&m).is_empty(), "{method}: {:?}", metric(&m));
        }
    }

    #[test]
    fn runs_need_unique_names_and_resolved_args() {
        let spec = HookRunSpec { metrics: vec![web("http://x"), web("http://y")], ..HookRunSpec::default() };
        assert!(run(&spec).unwrap_err().contains("duplicate metric name \"webtest\""));
        let spec = HookRunSpec { metrics: vec![], ..HookRunSpec::default() };
        assert!(run(&spec).unwrap_err().contains("no metrics"));
        let spec = HookRunSpec { metrics: vec![web("http://{{ args.PodIP }}:9091")], ..HookRunSpec::default() };
        let err = run(&spec).unwrap_err();
        assert!(err.contains("argument \"PodIP\" is referenced but not declared"), "{err}");
        let spec = HookRunSpec {
            metrics: vec![web("http://{{ args.PodIP }}:9091")],
            args: vec![Argument { name: "PodIP".into(), value: None, value_from: None }],
            ..HookRunSpec::default()
        };
        assert!(run(&spec).unwrap_err().contains("\"PodIP\" has no value"));
        let spec = HookRunSpec {
            metrics: vec![web("http://{{ args.PodIP }}:9091")],
            args: vec![
                Argument::new("PodIP", "127.0.0.1"),
                Argument { name: "unused".into(), value: None, value_from: None },
            ],
            ..HookRunSpec::default()
        };
        assert_eq!(run(&spec), Ok(()));
    }

    #[test]
    fn sizes_and_counts_are_bounded_even_without_the_crd() {
        let long = |n: usize| "a".repeat(n);
        let cases: Vec<(Metric, &str)> = vec![
            (
                Metric { success_condition: Some(format!("result == '{}'", long(2000))), ..web("http://x") },
                "successCondition is 2012 characters long; at most 1024",
            ),
            (web(&format!("http://x/{}", long(3000))), "provider.web.url is 3009 characters long"),
            (
                Metric {
                    provider: MetricProvider {
                        web: Some(WebMetric {
                            url: "http://x".into(),
                            method: Some("POST".into()),
                            body: Some(long(20_000)),
                            ..WebMetric::default()
                        }),
                        ..MetricProvider::default()
                    },
                    ..web("http://x")
                },
                "provider.web.body is 20000 characters long",
            ),
            (
                Metric {
                    provider: MetricProvider {
                        prometheus: Some(PrometheusMetric { address: "http://p".into(), query: long(5000) }),
                        ..MetricProvider::default()
                    },
                    ..web("http://x")
                },
                "provider.prometheus.query is 5000 characters long",
            ),
        ];
        for (m, want) in cases {
            let problems = metric(&m);
            assert!(problems.iter().any(|p| p.contains(want)), "want {want:?} in {problems:?}");
        }
        let mut slow = web("http://x");
        slow.provider.web.as_mut().unwrap().timeout_seconds = Some(86_400);
        assert!(first(slow).contains("timeoutSeconds must be between 0 and 300"));
        let many = HookRunSpec {
            metrics: (0..40).map(|i| Metric { name: format!("m{i}"), ..web("http://x") }).collect(),
            ..HookRunSpec::default()
        };
        assert!(run(&many).unwrap_err().contains("spec.metrics has 40 entries; at most 32"));
        let spec = HookRunSpec {
            metrics: vec![web("http://x")],
            args: (0..200).map(|i| Argument::new(format!("a{i}"), "v")).collect(),
            ..HookRunSpec::default()
        };
        assert!(run(&spec).unwrap_err().contains("spec.args has 200 entries"));
    }

    #[test]
    fn secret_args_count_as_values() {
        let secret = Argument {
            name: "token".into(),
            value: None,
            value_from: Some(common::api::ArgumentValueFrom {
                secret_key_ref: Some(common::api::SecretKeyRef { name: "creds".into(), key: "token".into() }),
            }),
        };
        let mut m = web("http://x");
        m.provider.web.as_mut().unwrap().headers =
            vec![common::api::WebMetricHeader { key: "Authorization".into(), value: "Bearer {{ args.token }}".into() }];
        let spec = HookRunSpec { metrics: vec![m], args: vec![secret], ..HookRunSpec::default() };
        assert_eq!(run(&spec), Ok(()));
    }

    #[test]
    fn conditions_with_unknown_names_or_huge_ranges_are_reported_when_the_template_is_applied() {
        let spec = HookTemplateSpec {
            metrics: vec![
                Metric { success_condition: Some("asInt(reslt) > 30".into()), ..web("http://x") },
                Metric { name: "b".into(), success_condition: Some("len(0..20000000) > 0".into()), ..web("http://x") },
                Metric { name: "c".into(), ..web("http://{{> evil}}") },
            ],
            ..HookTemplateSpec::default()
        };
        let problems = template(&spec);
        assert!(problems[0].contains("unknown name `reslt` at column 7 (did you mean `result`?)"), "{problems:?}");
        assert!(problems[1].contains("has 20000001 elements"), "{problems:?}");
        assert!(problems[2].contains("only {{ args.NAME }} is supported"), "{problems:?}");
        let warnings = template_warnings(
            &HookTemplateSpec {
                metrics: vec![Metric { interval: Some("1ms".into()), ..web("http://x") }],
                ..HookTemplateSpec::default()
            },
            &crate::settings::EngineSettings::default(),
        );
        assert!(warnings[0].contains("interval 1ms is below the operator's minimum of 1s"), "{warnings:?}");
    }

    #[test]
    fn a_refusal_names_the_object_and_lists_every_problem() {
        let spec = HookTemplateSpec {
            metrics: vec![
                Metric { success_condition: Some("asInt(reslt) > 30".into()), ..web("http://x") },
                Metric { name: "b".into(), success_condition: Some("asInt(result) >".into()), ..web("http://x") },
            ],
            ..HookTemplateSpec::default()
        };
        let refusal = template_refusal("bad", &spec).unwrap();
        assert!(refusal.starts_with("invalid HookTemplate bad: metrics[0] (webtest): successCondition"), "{refusal}");
        assert!(refusal.contains("unknown name `reslt`"), "{refusal}");
        assert!(refusal.contains("; metrics[1] (b): successCondition `asInt(result) >` does not parse"), "{refusal}");
        assert_eq!(
            template_refusal(
                "good",
                &HookTemplateSpec { metrics: vec![web("http://x")], ..HookTemplateSpec::default() }
            ),
            None
        );
        let run = HookRunSpec { metrics: vec![web("http://{{ args.PodIP }}:9091")], ..HookRunSpec::default() };
        let refusal = run_refusal("r", &run).unwrap();
        assert!(refusal.starts_with("invalid HookRun r: metrics[0] (webtest): "), "{refusal}");
        assert_eq!(run_refusal("r", &HookRunSpec { metrics: vec![web("http://x")], ..HookRunSpec::default() }), None);
    }

    #[test]
    fn templates_may_use_injected_args_but_not_unknown_ones() {
        let spec = HookTemplateSpec {
            metrics: vec![web("http://{{ args.PodIP }}:9091/{{ args.PodContainer[0] }}/{{ args.port }}")],
            ..HookTemplateSpec::default()
        };
        let problems = template(&spec);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("does not declare \"port\""), "{problems:?}");
    }
}
