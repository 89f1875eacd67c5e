//! One evaluation as data: what a worker is sent (an answer as the provider received it, how to read it, the
//! conditions) and what it sends back (the value as stored in status, and the verdict). [`Job::perform`] is the
//! whole work, the same in a worker process and on the in-process threads.

use std::io::{self, Read, Write};

use common::api::HookPhase;
use serde::{Deserialize, Serialize};

use crate::answer::{Observation, ProviderError};

/// How the answer's bytes become `result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reading {
    /// A web answer: JSON narrowed by `path` (without a path, a plain-text answer is the result itself). `what`
    /// (`GET <url>`) names the request in errors.
    Web {
        /// The request in words (`GET <url>`).
        what: String,
        /// The `jsonPath`, if any.
        path: Option<String>,
    },
    /// A Prometheus API answer to `query`.
    Prometheus {
        /// The PromQL query, for messages.
        query: String,
    },
    /// Already a value (the kubernetes provider's fields): its JSON text, and the text shown in status.
    Value {
        /// The value's text as status shows it.
        display: String,
    },
}

/// One evaluation: read `body` as [`Reading`] says, then judge it with the conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// How to read the answer.
    pub reading: Reading,
    /// `successCondition`, if set.
    pub success: Option<String>,
    /// `failureCondition`, if set.
    pub failure: Option<String>,
}

/// What an evaluation decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    /// The conditions decided this phase.
    Judged(HookPhase),
    /// The answer decided it without the conditions (Prometheus NaN), with its message.
    Answered(HookPhase, String),
    /// The measurement is an Error with this message (the answer could not be read, a condition failed).
    Error(String),
}

/// An evaluation's result: the value as stored in `measurement.value` (when the answer could be read) and the
/// verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// `measurement.value`: the value read, as text (`None` when the answer could not be read).
    pub display: Option<String>,
    /// The phase and message.
    pub verdict: Verdict,
}

impl Job {
    /// Reads the answer and judges it. Everything a tenant controls happens here: decoding, the jsonPath, the
    /// conditions.
    pub fn perform(&self, body: &[u8]) -> Outcome {
        let observation = match self.read(body) {
            Ok(observation) => observation,
            Err(e) => return Outcome { display: None, verdict: Verdict::Error(e.0) },
        };
        let display = Some(observation.display);
        if let Some((phase, message)) = observation.verdict {
            return Outcome { display, verdict: Verdict::Answered(phase, message) };
        }
        let verdict = match crate::conditions::evaluate::judge(
            self.success.as_deref(),
            self.failure.as_deref(),
            &observation.result,
        ) {
            Ok(phase) => Verdict::Judged(phase),
            Err(e) => Verdict::Error(e.to_string()),
        };
        // Dropping a large result is part of the evaluation's work.
        drop(observation.result);
        Outcome { display, verdict }
    }

    /// The answer as the conditions see it.
    pub fn read(&self, body: &[u8]) -> Result<Observation, ProviderError> {
        match &self.reading {
            Reading::Web { what, path } => {
                let path = path
                    .as_deref()
                    .map(crate::conditions::jsonpath::Path::cached)
                    .transpose()
                    .map_err(|e| ProviderError(e.to_string()))?;
                crate::answer::web::interpret(what, body, path.as_deref())
            }
            Reading::Prometheus { query } => crate::answer::prometheus::interpret(body, query),
            Reading::Value { display } => {
                let value: serde_json::Value = serde_json::from_slice(body)
                    .map_err(|e| ProviderError(format!("the value to judge is not JSON: {e}")))?;
                Ok(Observation::judged(crate::conditions::evaluate::to_expr(&value), display.clone()))
            }
        }
    }

    /// The conditions, for messages: the failure condition when set (it decides first), else the success one.
    pub fn condition(&self) -> (&'static str, String) {
        let set = |c: &Option<String>| c.as_deref().map(str::trim).filter(|c| !c.is_empty()).map(str::to_string);
        match (set(&self.success), set(&self.failure)) {
            (_, Some(f)) => ("failureCondition", crate::text::excerpt(&f, 200)),
            (Some(s), None) => ("successCondition", crate::text::excerpt(&s, 200)),
            (None, None) => ("answer", String::new()),
        }
    }

    /// What the evaluation read, for messages: the request and jsonPath, or the query.
    pub fn source(&self) -> String {
        match &self.reading {
            Reading::Web { what, path: Some(path) } => format!("the answer of {what} (jsonPath `{path}`)"),
            Reading::Web { what, path: None } => format!("the answer of {what}"),
            Reading::Prometheus { query } => format!("the answer to query `{query}`"),
            Reading::Value { display } => format!("the value {}", crate::text::excerpt(display, 200)),
        }
    }
}

/// Largest job header and outcome a worker reads or writes (the body has its own limit, the response size cap).
pub const MAX_FRAME_BYTES: u32 = 1 << 20;
/// The length a worker writes, instead of an outcome, when its memory cap refused an allocation (it then aborts).
pub const OVER_MEMORY: u32 = u32::MAX;
/// The length a worker writes once, before it reads its first job: it is started and its memory cap is set. The
/// operator starts a job's clock only after this, so a slow start (exec and loading on a busy node) is never
/// counted against a tenant's job.
pub const READY: u32 = u32::MAX - 1;

/// Writes one job: its header as JSON, then the body, each behind its length (u32, little-endian). The operator
/// streams the body after [`write_header`] instead; this whole-job form is the tests'.
#[cfg(test)]
pub fn write_job(out: &mut impl Write, job: &Job, body: &[u8]) -> io::Result<()> {
    write_header(out, job, body.len())?;
    out.write_all(body)?;
    out.flush()
}

/// Everything of a job but its body's bytes: the header frame and the body's length. The body follows as it is.
pub fn write_header(out: &mut impl Write, job: &Job, body_len: usize) -> io::Result<()> {
    let header = serde_json::to_vec(job).map_err(io::Error::other)?;
    write_frame(out, &header)?;
    let len = u32::try_from(body_len).map_err(|_| io::Error::other("body too large"))?;
    out.write_all(&len.to_le_bytes())
}

/// Reads one job; `None` at a clean end of input.
pub fn read_job(input: &mut impl Read, max_body: u32) -> io::Result<Option<(Job, Vec<u8>)>> {
    let Some(header) = read_frame(input, MAX_FRAME_BYTES)? else { return Ok(None) };
    let job = serde_json::from_slice(&header).map_err(io::Error::other)?;
    let body = read_frame(input, max_body)?.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    Ok(Some((job, body)))
}

pub fn write_outcome(out: &mut impl Write, outcome: &Outcome) -> io::Result<()> {
    let bytes = serde_json::to_vec(outcome).map_err(io::Error::other)?;
    write_frame(out, &bytes)?;
    out.flush()
}

fn write_frame(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| io::Error::other("frame too large"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(bytes)
}

fn read_frame(input: &mut impl Read, max: u32) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(io::Error::other(format!("a frame of {len} bytes is over the {max} byte limit")));
    }
    let mut bytes = vec![0u8; len as usize];
    input.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(path: Option<&str>, success: &str) -> Job {
        Job {
            reading: Reading::Web { what: "GET http://x/".into(), path: path.map(str::to_string) },
            success: Some(success.into()),
            failure: None,
        }
    }

    #[test]
    fn a_job_reads_and_judges_as_the_providers_and_conditions_do() {
        let body = br#"{"name":"bryan","age":45}"#;
        let outcome = web(Some("{$.age}"), "asInt(result) > 30").perform(body);
        assert_eq!(outcome, Outcome { display: Some("45".into()), verdict: Verdict::Judged(HookPhase::Successful) });
        let outcome = web(Some("{$.age}"), "asInt(result) < 30").perform(body);
        assert_eq!(outcome.verdict, Verdict::Judged(HookPhase::Failed));
        let outcome = web(Some("{$.nope}"), "true").perform(body);
        assert!(matches!(&outcome.verdict, Verdict::Error(m) if m.contains("matched nothing")), "{outcome:?}");
        assert_eq!(outcome.display, None);
        let outcome = web(Some("{$.name}"), "asInt(result) > 1").perform(body);
        assert!(matches!(&outcome.verdict, Verdict::Error(m) if m.contains("not an integer")), "{outcome:?}");
        assert_eq!(outcome.display.as_deref(), Some("bryan"));
        let nan = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
        let job = Job { reading: Reading::Prometheus { query: "q".into() }, success: None, failure: None };
        assert!(matches!(job.perform(nan).verdict, Verdict::Answered(HookPhase::Inconclusive, _)));
        let job =
            Job { reading: Reading::Value { display: "3".into() }, success: Some("result == 3".into()), failure: None };
        assert_eq!(job.perform(b"3").verdict, Verdict::Judged(HookPhase::Successful));
    }

    #[test]
    fn jobs_and_outcomes_cross_the_pipe_intact() {
        let job = web(Some("{$.age}"), "asInt(result) > 30");
        let mut wire = Vec::new();
        write_job(&mut wire, &job, b"\x00\xffbody").unwrap();
        write_job(&mut wire, &job, b"").unwrap();
        let mut input = wire.as_slice();
        assert_eq!(read_job(&mut input, 100).unwrap(), Some((job.clone(), b"\x00\xffbody".to_vec())));
        assert_eq!(read_job(&mut input, 100).unwrap(), Some((job.clone(), Vec::new())));
        assert_eq!(read_job(&mut input, 100).unwrap(), None, "a clean end");
        let mut wire = Vec::new();
        write_job(&mut wire, &job, &[7; 200]).unwrap();
        assert!(read_job(&mut wire.as_slice(), 100).is_err(), "a body over the limit is refused before it is read");
        let outcome = Outcome { display: None, verdict: Verdict::Error("x".into()) };
        let mut wire = Vec::new();
        write_outcome(&mut wire, &outcome).unwrap();
        assert_eq!(
            read_frame(&mut wire.as_slice(), 100).unwrap().map(|b| serde_json::from_slice(&b).unwrap()),
            Some(outcome)
        );
    }
}
