//! A Prometheus API answer as the conditions see it. A scalar result is a number, an instant vector an array of
//! numbers (labels dropped); a NaN anywhere makes the measurement Inconclusive without the conditions.

use common::api::HookPhase;
use serde::Deserialize;

use super::{Observation, ProviderError, body_excerpt};

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<QueryData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

/// Prometheus writes sample values as strings: `"0.95"`, `"NaN"`, `"+Inf"`.
fn sample(value: &serde_json::Value) -> Result<f64, String> {
    let text = value.get(1).and_then(|v| v.as_str()).ok_or_else(|| format!("malformed sample {value}"))?;
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        other => other.parse().map_err(|_| format!("sample value {other:?} is not a number")),
    }
}

fn format_number(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        f.to_string()
    }
}

/// The query's answer as `result` and its display text.
pub fn interpret(body: &[u8], query: &str) -> Result<Observation, ProviderError> {
    let response: ApiResponse = serde_json::from_slice(body).map_err(|e| {
        ProviderError(format!(
            "query `{query}`: the answer is not a Prometheus API response ({e}): {}",
            body_excerpt(body)
        ))
    })?;
    if response.status != "success" {
        return Err(ProviderError(format!(
            "query `{query}` failed: {} ({})",
            response.error.unwrap_or_else(|| "no error message".into()),
            response.error_type.unwrap_or_else(|| response.status.clone())
        )));
    }
    let data = response.data.ok_or_else(|| ProviderError(format!("query `{query}`: the answer has no data")))?;
    let values: Vec<f64> = match data.result_type.as_str() {
        "scalar" => vec![sample(&data.result).map_err(|e| ProviderError(format!("query `{query}`: {e}")))?],
        "vector" => data
            .result
            .as_array()
            .ok_or_else(|| ProviderError(format!("query `{query}`: vector result is not an array")))?
            .iter()
            .map(|series| sample(series.get("value").unwrap_or(&serde_json::Value::Null)))
            .collect::<Result<_, _>>()
            .map_err(|e| ProviderError(format!("query `{query}`: {e}")))?,
        "matrix" => {
            return Err(ProviderError(format!(
                "query `{query}` returned a range vector (matrix), which is not supported: use an instant query"
            )));
        }
        other => {
            return Err(ProviderError(format!("query `{query}` returned a {other} result, which is not supported")));
        }
    };
    let scalar = data.result_type == "scalar";
    // Status keeps an excerpt: the first MAX_SHOWN series, then how many more there were.
    const MAX_SHOWN: usize = 100;
    let display = if scalar {
        format_number(values[0])
    } else {
        let shown: Vec<String> = values.iter().take(MAX_SHOWN).map(|v| format_number(*v)).collect();
        let more = values.len().saturating_sub(MAX_SHOWN);
        let more = if more > 0 { format!(",… ({more} more)") } else { String::new() };
        crate::text::excerpt(&format!("[{}{more}]", shown.join(",")), 1024)
    };
    let result = if scalar {
        expr::Value::Float(values[0])
    } else {
        expr::Value::Array(values.iter().map(|v| expr::Value::Float(*v)).collect())
    };
    let verdict =
        values.iter().any(|v| v.is_nan()).then(|| (HookPhase::Inconclusive, format!("query `{query}` returned NaN")));
    Ok(Observation { result, display, verdict })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Result<Observation, ProviderError> {
        interpret(text.as_bytes(), "q")
    }

    #[test]
    fn scalar_and_vector_results() {
        let o = answer(r#"{"status":"success","data":{"resultType":"scalar","result":[1.7e9,"0.95"]}}"#).unwrap();
        assert_eq!((o.result, o.display.as_str(), o.verdict), (expr::Value::Float(0.95), "0.95", None));
        let o = answer(
            r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"a":"b"},"value":[1.7e9,"1"]},{"metric":{},"value":[1.7e9,"0.5"]}]}}"#,
        )
        .unwrap();
        assert_eq!(o.result, expr::Value::Array(vec![expr::Value::Float(1.0), expr::Value::Float(0.5)]));
        assert_eq!(o.display, "[1,0.5]");
        let o = answer(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).unwrap();
        assert_eq!((o.result, o.display.as_str()), (expr::Value::Array(vec![]), "[]"));
    }

    #[test]
    fn huge_vectors_are_excerpted_in_the_display_but_judged_whole() {
        let series: Vec<String> =
            (0..5000).map(|i| format!(r#"{{"metric":{{"i":"{i}"}},"value":[1,"{i}"]}}"#)).collect();
        let body =
            format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#, series.join(","));
        let o = answer(&body).unwrap();
        assert!(o.display.len() < 1200, "{}", o.display.len());
        assert!(o.display.contains("(4900 more)"), "{}", o.display);
        assert!(matches!(&o.result, expr::Value::Array(a) if a.len() == 5000));
    }

    #[test]
    fn nan_is_inconclusive_and_infinities_are_numbers() {
        let o =
            answer(r#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"NaN"]}]}}"#).unwrap();
        assert_eq!(o.verdict.map(|v| v.0), Some(HookPhase::Inconclusive));
        let o = answer(r#"{"status":"success","data":{"resultType":"scalar","result":[1,"+Inf"]}}"#).unwrap();
        assert_eq!((o.result, o.verdict), (expr::Value::Float(f64::INFINITY), None));
    }

    #[test]
    fn errors_say_what_prometheus_said() {
        let e = answer(r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#).unwrap_err();
        assert_eq!(e.0, "query `q` failed: parse error at char 3 (bad_data)");
        let e = answer(r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#).unwrap_err();
        assert!(e.0.contains("range vector"), "{e}");
        let e = answer("<html>").unwrap_err();
        assert!(e.0.contains("not a Prometheus API response") && e.0.contains("<html>"), "{e}");
    }
}
