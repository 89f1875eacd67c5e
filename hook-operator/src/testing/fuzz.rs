//! Hostile inputs for everything a tenant controls, used by the property tests (`tests/hostile.rs`, a few
//! hundred cases per target) and by `hook-fuzz` (as many as you like). Each case must end without a panic and
//! within [`CASE_DEADLINE`]; every rejection must be a message.
//!
//! Targets: conditions (`expr`), JSONPaths, `{{ args.X }}` templates, Go durations, HookTemplate validation and
//! web responses (huge, deeply nested, non-UTF-8 bodies through JSON parsing, the jsonPath and a condition), and
//! HTTP/1.x answers as the plain-HTTP path reads them (`providers::http::h1`: the same outcome whatever the reads' sizes).

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use common::api::{Argument, HookTemplateSpec, Metric, MetricProvider, PrometheusMetric, WebMetric, WebMetricHeader};

/// The longest one case may take (generous for a loaded 2-core machine and debug builds).
pub const CASE_DEADLINE: Duration = Duration::from_secs(5);

/// A small deterministic generator (xorshift64*), so a failing case is reproducible from its seed.
pub struct Gen(u64);

impl Gen {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// Mostly small numbers, sometimes huge ones.
    pub fn size(&mut self) -> usize {
        match self.below(10) {
            0 => 100_000 + self.below(2_000_000),
            1 | 2 => 100 + self.below(5_000),
            _ => self.below(40),
        }
    }

    fn chars(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n).map(|_| chars[self.below(chars.len())]).collect()
    }
}

const EXPR_TOKENS: &[&str] = &[
    "result",
    "reslt",
    "#",
    "#index",
    "#acc",
    "$env",
    "asInt(",
    "asFloat(",
    "len(",
    "all(",
    "any(",
    "map(",
    "filter(",
    "reduce(",
    "repeat(",
    "replace(",
    "join(",
    "toJSON(",
    "fromJSON(",
    "split(",
    "sum(",
    "count(",
    "none(",
    "let x = ",
    "; ",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    "..",
    "0..20000000",
    "0..1000000000000",
    "1..3",
    "-5..5",
    "0x7fffffffffffffff",
    "9223372036854775807",
    "1e308",
    "'x'",
    "\"\\u0000\"",
    "`raw`",
    " ? ",
    " : ",
    "??",
    "?.",
    "if ",
    " else ",
    "==",
    "!=",
    ">",
    "<=",
    "&&",
    "||",
    " and ",
    " not ",
    "!",
    "+",
    "-",
    "*",
    "/",
    "%",
    "**",
    " in ",
    " contains ",
    " matches ",
    "'(a+)+$'",
    "true",
    "false",
    "nil",
    "1",
    "45",
    "0.95",
    ".a",
    "[0]",
    "[1:]",
    "|",
    "upper(",
    "string(",
];

/// A condition: grammar fragments in random order, some deep nestings, long repeats and huge ranges.
pub fn expression(g: &mut Gen) -> String {
    match g.below(8) {
        0 => {
            let depth = g.size();
            format!("{}result{} > 1", "(".repeat(depth), ")".repeat(depth))
        }
        1 => {
            let depth = g.below(40);
            format!("{}1{}", "a[".repeat(depth), "]".repeat(depth))
        }
        2 => format!("len(0..{}) > 0", g.next_u64() >> g.below(64)),
        3 => "result ? ".repeat(g.below(60)) + "1" + &" : 0".repeat(g.below(60)),
        4 => {
            let n = g.size();
            g.chars("()[]{}#.,?:!|&'\"`0123456789abcdefresult $\\\n", n)
        }
        _ => {
            let n = 1 + g.below(30);
            (0..n).map(|_| g.pick(EXPR_TOKENS)).collect()
        }
    }
}

/// A `result` for conditions: big arrays, long strings, nesting.
pub fn result(g: &mut Gen) -> serde_json::Value {
    match g.below(6) {
        0 => serde_json::Value::Array((0..g.size().min(50_000)).map(|i| serde_json::json!(i)).collect()),
        1 => serde_json::Value::String("x".repeat(g.size().min(200_000))),
        2 => {
            let mut v = serde_json::json!(45);
            for _ in 0..g.below(100) {
                v = serde_json::json!({"a": v, "b": [v.clone()]});
                if v.to_string().len() > 100_000 {
                    break;
                }
            }
            v
        }
        3 => serde_json::json!({"age": 45, "status": "Healthy", "items": [{"ok": true}, {"ok": false}]}),
        4 => serde_json::json!(f64::MAX),
        _ => serde_json::json!(g.next_u64() as i64),
    }
}

const PATH_TOKENS: &[&str] = &[
    "$",
    ".",
    "..",
    "*",
    "[",
    "]",
    "[*]",
    "[0]",
    "[-1]",
    "[1:3:-1]",
    "[?(@.a > 1)]",
    "[?(@.a =~ /x/)]",
    "{",
    "}",
    "'",
    "\"",
    "age",
    "items",
    "app-name",
    "range ",
    "end",
    "@",
    "length()",
    ",",
    "\\",
];

/// A JSONPath: deeply bracketed, very long, or a random string of path tokens.
pub fn json_path(g: &mut Gen) -> String {
    match g.below(4) {
        0 => format!("{{{}}}", "[".repeat(g.size())),
        1 => format!("{{$.{}}}", "a.".repeat(g.size()) + "b"),
        _ => {
            let n = 1 + g.below(20);
            (0..n).map(|_| g.pick(PATH_TOKENS)).collect()
        }
    }
}

const TEMPLATE_TOKENS: &[&str] = &[
    "{{",
    "}}",
    "{{{",
    "}}}",
    "\\{{",
    "args.",
    "PodIP",
    " ",
    "{{> p}}",
    "{{#each args}}",
    "{{/each}}",
    "{{#*inline \"p\"}}",
    "{{/inline}}",
    "{{lookup args 'x'}}",
    "{{!-- c --}}",
    "http://",
    ":9091/",
    "é",
    "\u{0}",
];

/// A templated text: many partials, many placeholders, or a random string of template tokens.
pub fn template_text(g: &mut Gen) -> String {
    match g.below(4) {
        0 => "{{> p}}".repeat(g.size()),
        1 => "{{ args.PodIP }}".repeat(g.size()),
        _ => {
            let n = 1 + g.below(30);
            (0..n).map(|_| g.pick(TEMPLATE_TOKENS)).collect()
        }
    }
}

/// A Go duration string: overflowing, very long, random characters, or huge numbers.
pub fn duration(g: &mut Gen) -> String {
    match g.below(4) {
        0 => format!("{}h", "9".repeat(g.below(40))),
        1 => "1h".repeat(g.size()),
        2 => {
            let n = g.below(30);
            g.chars("0123456789.hmsuµn-+ ", n)
        }
        _ => format!("{}.{}s", g.next_u64(), g.next_u64()),
    }
}

/// A body as an endpoint might send it: huge, deeply nested, not UTF-8, not JSON.
pub fn body(g: &mut Gen) -> Vec<u8> {
    match g.below(6) {
        0 => format!("{}1{}", "[".repeat(g.size()), "]".repeat(g.size())).into_bytes(),
        1 => format!("{{\"pad\":\"{}\",\"age\":45}}", "x".repeat(g.size())).into_bytes(),
        2 => (0..g.size()).map(|_| (g.next_u64() & 0xff) as u8).collect(),
        3 => {
            let keys: Vec<String> = (0..g.size().min(100_000)).map(|i| format!("\"k{i}\":{i}")).collect();
            format!("{{{}}}", keys.join(",")).into_bytes()
        }
        4 => b"{\"age\":45}".to_vec(),
        _ => format!("{{\"age\":\"{}\"}}", "\u{fffd}".repeat(g.below(1000))).into_bytes(),
    }
}

/// An HTTP/1.x answer as a hostile or broken endpoint might send it: heads with odd, conflicting, huge or too many
/// fields, chunked bodies with wrong sizes, extensions and trailers, bodies cut short, not HTTP at all.
pub fn answer(g: &mut Gen) -> Vec<u8> {
    let mut out = g
        .pick(&[
            "HTTP/1.1 200 OK",
            "HTTP/1.0 200 OK",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK",
            "HTTP/1.1 204 No Content",
            "HTTP/1.1 302 Found",
            "HTTP/1.1 101 Switching Protocols",
            "HTTP/2 200",
            "HTTP/1.1 99999 x",
            "SSH-2.0-OpenSSH_9.6",
            "",
        ])
        .to_string();
    out.push_str("\r\n");
    let fields = if g.below(10) == 0 { 60 + g.below(10) } else { g.below(4) };
    for _ in 0..fields {
        let field = match g.below(10) {
            0 => format!("content-length: {}", g.size()),
            1 => g
                .pick(&["content-length: -1", "content-length: 1, 2", "content-length: 99999999999999999999999"])
                .into(),
            2 | 3 => g
                .pick(&["transfer-encoding: chunked", "transfer-encoding: gzip", "Transfer-Encoding: x, chunked"])
                .into(),
            4 => g.pick(&["connection: close", "connection: keep-alive", "location: /next", "location: \u{7f}"]).into(),
            5 => format!("x-pad: {}", "a".repeat(g.size())),
            _ => {
                let n = g.below(8);
                format!("x-{}: {}", g.below(100), g.chars("ab \t:\r\n\u{0}é", n))
            }
        };
        out.push_str(&field);
        out.push_str(if g.below(20) == 0 { "\n" } else { "\r\n" });
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    for _ in 0..g.below(5) {
        let data = g.size();
        let announced = if g.below(5) == 0 { g.size() } else { data };
        let extension = if g.below(4) == 0 { ";ext=\"v\"" } else { "" };
        bytes.extend_from_slice(format!("{announced:x}{extension}\r\n").as_bytes());
        bytes.extend((0..data).map(|i| b'a' + (i % 26) as u8));
        bytes.extend_from_slice(g.pick(&["\r\n", "", "\n", "xx"]).as_bytes());
    }
    bytes.extend_from_slice(g.pick(&["0\r\n\r\n", "0\r\ntrailer: t\r\n\r\n", "", "{\"age\":45}", "0\r\n"]).as_bytes());
    if g.below(4) == 0 {
        bytes.extend((0..g.size()).map(|_| (g.next_u64() & 0xff) as u8));
    }
    if g.below(4) == 0 {
        let keep = g.below(bytes.len() + 1);
        bytes.truncate(keep);
    }
    bytes
}

/// A HookTemplate spec with hostile metrics (sometimes very many, with hostile names, durations, conditions,
/// templates and limits).
pub fn template_spec(g: &mut Gen) -> HookTemplateSpec {
    let n = match g.below(10) {
        0 => 40 + g.below(100),
        _ => g.below(4),
    };
    let metrics = (0..n)
        .map(|i| Metric {
            name: if g.below(10) == 0 { String::new() } else { format!("m{}", i % 3) },
            interval: (g.below(2) == 0).then(|| duration(g)),
            initial_delay: (g.below(3) == 0).then(|| duration(g)),
            count: (g.next_u64() as i32) % 5,
            success_condition: (g.below(2) == 0).then(|| expression(g)),
            failure_condition: (g.below(4) == 0).then(|| expression(g)),
            failure_limit: (g.next_u64() as i32) % 4,
            provider: match g.below(3) {
                0 => MetricProvider {
                    prometheus: Some(PrometheusMetric { address: template_text(g), query: template_text(g) }),
                    ..MetricProvider::default()
                },
                _ => MetricProvider {
                    web: Some(WebMetric {
                        url: template_text(g),
                        json_path: (g.below(2) == 0).then(|| json_path(g)),
                        headers: vec![WebMetricHeader { key: g.chars("Ab-\n: ", 5), value: template_text(g) }],
                        timeout_seconds: Some(g.next_u64() as i64),
                        body: (g.below(4) == 0).then(|| template_text(g)),
                        method: Some(g.pick(&["GET", "POST", "TRACE", ""]).to_string()),
                        ..WebMetric::default()
                    }),
                    ..MetricProvider::default()
                },
            },
            ..Metric::default()
        })
        .collect();
    HookTemplateSpec {
        metrics,
        args: vec![Argument::new("PodIP", "127.0.0.1"), Argument { name: "x".into(), value: None, value_from: None }],
        policy: None,
    }
}

/// One failed case.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Which target (one of [`TARGETS`]).
    pub target: &'static str,
    /// The seed that reproduces it.
    pub seed: u64,
    /// The input, as text.
    pub input: String,
    /// What went wrong: a panic, or a case past [`CASE_DEADLINE`].
    pub problem: String,
}

/// Cases run and failures, per target.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases run.
    pub cases: usize,
    /// The cases that failed.
    pub failures: Vec<Failure>,
    /// The longest a case took.
    pub slowest: Duration,
}

fn case(report: &mut Report, target: &'static str, seed: u64, input: String, f: impl FnOnce()) {
    report.cases += 1;
    let start = Instant::now();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(f));
    let took = start.elapsed();
    report.slowest = report.slowest.max(took);
    let problem = match outcome {
        Err(panic) => Some(format!("panicked: {}", crate::conditions::budget::panic_message(panic.as_ref()))),
        Ok(()) if took > CASE_DEADLINE => Some(format!("took {took:?}")),
        Ok(()) => None,
    };
    if let Some(problem) = problem {
        report.failures.push(Failure { target, seed, input: crate::text::excerpt(&input, 300), problem });
    }
}

/// The targets `run` knows.
pub const TARGETS: &[&str] = &["expression", "jsonpath", "template", "duration", "validation", "response", "answer"];

/// Runs `cases` cases of each target, seeds `seed..seed+cases`. Conditions run on `pool` like measurements do.
pub async fn run(pool: &crate::isolation::Evaluator, cases: u64, seed: u64) -> Report {
    let mut report = Report::default();
    for s in seed..seed + cases {
        let mut g = Gen::new(s);
        let condition = expression(&mut g);
        let value = result(&mut g);
        let started = Instant::now();
        let verdict = crate::isolation::judge::judge_bounded(
            pool,
            "fuzz",
            Some(&condition),
            None,
            crate::conditions::evaluate::to_expr(&value),
        )
        .await;
        let took = started.elapsed();
        case(&mut report, "expression", s, condition.clone(), || {
            if took > CASE_DEADLINE {
                panic!("evaluation took {took:?}");
            }
            if let Err(e) = verdict {
                assert!(!e.to_string().is_empty());
            }
        });

        let path = json_path(&mut g);
        let body = body(&mut g);
        case(&mut report, "jsonpath", s, path.clone(), || {
            if let Ok(parsed) = crate::conditions::jsonpath::Path::parse(&path)
                && let Ok(document) = serde_json::from_slice::<serde_json::Value>(&body)
            {
                let _ = parsed.extract(&document);
            }
        });
        let text = template_text(&mut g);
        case(&mut report, "template", s, text.clone(), || {
            let _ = crate::conditions::template::referenced_args("url", &text);
            let _ = crate::conditions::template::render("url", &text, &[Argument::new("PodIP", "127.0.0.1")]);
        });
        let d = duration(&mut g);
        case(&mut report, "duration", s, d.clone(), || {
            let _ = common::duration::parse_go(&d);
        });
        let spec = template_spec(&mut g);
        let summary = format!("{} metric(s)", spec.metrics.len());
        case(&mut report, "validation", s, summary, || {
            let _ = crate::engine::validate::template(&spec);
            let run = common::api::HookRunSpec {
                metrics: spec.metrics.clone(),
                args: spec.args.clone(),
                ..Default::default()
            };
            let _ = crate::engine::validate::run(&run);
        });
        let path = (g.below(2) == 0).then(|| crate::conditions::jsonpath::Path::parse("{$.age}").ok()).flatten();
        let mut observation = None;
        case(&mut report, "response", s, format!("{} bytes", body.len()), || {
            let o = crate::answer::web::interpret("GET http://fuzz/", &body, path.as_ref());
            if let Ok(o) = &o {
                assert!(o.display.chars().count() <= 1100, "display of {} characters", o.display.chars().count());
            }
            observation = Some(o);
        });
        let bytes = answer(&mut g);
        // Reads as a socket might deliver them: tiny pieces for small answers, larger ones for large answers (a
        // partial chunk-size line or trailer section is searched again per piece, like the connection does).
        let piece = if bytes.len() < 4096 { 1 + g.below(16) } else { 512 + g.below(4096) };
        let pieces = [piece, 1 + g.below(3), piece * 2];
        let head_request = g.below(8) == 0;
        let limit = [16, 1 << 20][g.below(2)];
        case(&mut report, "answer", s, format!("{} bytes", bytes.len()), || {
            use crate::providers::http::h1::read_answer;
            let whole = read_answer(&bytes, &[bytes.len().max(1)], head_request, limit);
            let split = read_answer(&bytes, &pieces, head_request, limit);
            assert_eq!(whole, split, "the same answer read in pieces of {pieces:?}");
            if let Ok((_, body)) = &whole {
                assert!(body.len() <= limit, "a body of {} bytes over the {limit} byte limit", body.len());
            }
        });
        if let Some(Ok(o)) = observation {
            let verdict =
                crate::isolation::judge::judge_bounded(pool, "fuzz", Some("asInt(result) > 30"), None, o.result).await;
            let _ = verdict;
        }
    }
    report
}

/// The hostile corpus ([`crate::testing::hostile`]) through `pool`: each case must end with an error that says what its
/// `expect` says, within `deadline`, with this process and its workers under `max_rss` bytes the whole time
/// (sampled every 10 ms). Prints one line per case.
pub async fn corpus(pool: &crate::isolation::Evaluator, deadline: Duration, max_rss: u64) -> Report {
    let mut report = Report::default();
    let cases = match crate::testing::hostile::cases() {
        Ok(cases) => cases,
        Err(e) => {
            report.failures.push(Failure { target: "corpus", seed: 0, input: String::new(), problem: e });
            return report;
        }
    };
    for (i, case) in cases.iter().enumerate() {
        report.cases += 1;
        let job = crate::isolation::Job {
            reading: crate::isolation::Reading::Web { what: "GET http://corpus/".into(), path: case.json_path.clone() },
            success: Some(case.success_condition.clone()),
            failure: None,
        };
        let body = case.answer.body();
        let started = Instant::now();
        let evaluation = pool.run("corpus", job.clone(), body);
        tokio::pin!(evaluation);
        let mut peak = crate::testing::hostile::tree_rss(std::process::id());
        let outcome = loop {
            tokio::select! {
                outcome = &mut evaluation => break outcome,
                () = tokio::time::sleep(Duration::from_millis(10)) => peak = peak.max(crate::testing::hostile::tree_rss(std::process::id())),
            }
        };
        let took = started.elapsed();
        report.slowest = report.slowest.max(took);
        let message = match &outcome {
            Ok(crate::isolation::Outcome { verdict: crate::isolation::Verdict::Error(m), .. }) => m.clone(),
            Ok(other) => format!("no error: {other:?}"),
            Err(stopped) => pool.explain(&job, stopped),
        };
        let ended = ["memory bound", "time bound", "recursion limit"]
            .into_iter()
            .find(|b| message.contains(b))
            .map_or_else(|| crate::text::excerpt(&message, 80), str::to_string);
        println!("  {:40} {:>5} MiB {:>7.0} ms  {ended}", case.name, peak >> 20, took.as_secs_f64() * 1e3);
        let problem = if !message.contains(&case.expect) {
            Some(format!("the message {message:?} does not say {:?}", case.expect))
        } else if took > deadline {
            Some(format!("took {took:?}, more than {deadline:?}"))
        } else if peak > max_rss {
            Some(format!("{} MiB resident, more than {} MiB", peak >> 20, max_rss >> 20))
        } else {
            None
        };
        if let Some(problem) = problem {
            report.failures.push(Failure { target: "corpus", seed: i as u64, input: case.name.clone(), problem });
        }
    }
    report
}
