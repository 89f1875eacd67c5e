//! The JSONPath subset CRD printer columns and scale paths use (client-go's `jsonpath` with
//! `{...}` implied): `.a.b`, `['a.b']`, `[0]`, `[*]`, `[?(@.type=="Ready")]`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter { path: Vec<String>, op: String, value: Value },
}

fn parse(path: &str) -> Result<Vec<Step>, String> {
    let p = path.trim();
    let p = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')).unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        name.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    name.push(chars[i]);
                    i += 1;
                }
                if name == "*" {
                    steps.push(Step::Wildcard);
                } else if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let end = find_close(&chars, i).ok_or_else(|| format!("unterminated [ in {path}"))?;
                let inner: String = chars[i + 1..end].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::Wildcard);
                } else if let Some(f) = inner.strip_prefix("?(").and_then(|s| s.strip_suffix(')')) {
                    steps.push(parse_filter(f)?);
                } else if (inner.starts_with('\'') && inner.ends_with('\''))
                    || (inner.starts_with('"') && inner.ends_with('"'))
                {
                    steps.push(Step::Field(inner[1..inner.len() - 1].to_string()));
                } else {
                    steps.push(Step::Index(inner.parse::<i64>().map_err(|_| format!("invalid array index {inner}"))?));
                }
                i = end + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                // A leading bare name (`spec.replicas`) is accepted like `.spec.replicas`.
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    name.push(chars[i]);
                    i += 1;
                }
                steps.push(Step::Field(name));
            }
        }
    }
    Ok(steps)
}

fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (j, c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_filter(f: &str) -> Result<Step, String> {
    for op in ["==", "!=", ">=", "<=", ">", "<"] {
        if let Some((l, r)) = f.split_once(op) {
            let l = l.trim().strip_prefix('@').ok_or_else(|| format!("unsupported filter {f}"))?;
            let path: Vec<String> = l.split('.').filter(|s| !s.is_empty()).map(str::to_string).collect();
            let r = r.trim();
            let value = if (r.starts_with('"') && r.ends_with('"')) || (r.starts_with('\'') && r.ends_with('\'')) {
                Value::String(r[1..r.len() - 1].to_string())
            } else {
                serde_json::from_str(r).unwrap_or(Value::String(r.to_string()))
            };
            return Ok(Step::Filter { path, op: op.to_string(), value });
        }
    }
    let l = f.trim().strip_prefix('@').ok_or_else(|| format!("unsupported filter {f}"))?;
    let path: Vec<String> = l.split('.').filter(|s| !s.is_empty()).map(str::to_string).collect();
    Ok(Step::Filter { path, op: "exists".into(), value: Value::Null })
}

fn compare(a: &Value, op: &str, b: &Value) -> bool {
    match op {
        "==" => a == b || (a.as_f64().is_some() && a.as_f64() == b.as_f64()),
        "!=" => a != b,
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => match op {
                ">" => x > y,
                "<" => x < y,
                ">=" => x >= y,
                "<=" => x <= y,
                _ => false,
            },
            _ => false,
        },
    }
}

/// Evaluates a path; returns every match (empty when nothing matches or the path is invalid).
pub(crate) fn find<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let Ok(steps) = parse(path) else { return vec![] };
    let mut cur: Vec<&Value> = vec![obj];
    for step in &steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => {
                    if let Some(x) = v.get(f) {
                        next.push(x);
                    }
                }
                Step::Index(i) => {
                    if let Some(a) = v.as_array() {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        if idx >= 0
                            && let Some(x) = a.get(idx as usize)
                        {
                            next.push(x);
                        }
                    }
                }
                Step::Wildcard => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter { path, op, value } => {
                    if let Some(a) = v.as_array() {
                        for item in a {
                            let mut target = Some(item);
                            for p in path {
                                target = target.and_then(|t| t.get(p));
                            }
                            let keep = match (target, op.as_str()) {
                                (Some(_), "exists") => true,
                                (Some(t), op) => compare(t, op, value),
                                (None, _) => false,
                            };
                            if keep {
                                next.push(item);
                            }
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn printer_column_paths() {
        let o = json!({"spec": {"replicas": 3}, "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]},
                       "metadata": {"labels": {"app.kubernetes.io/name": "web"}}});
        assert_eq!(find(&o, ".spec.replicas"), vec![&json!(3)]);
        assert_eq!(find(&o, ".status.conditions[?(@.type==\"Ready\")].status"), vec![&json!("True")]);
        assert_eq!(find(&o, ".status.conditions[*].type").len(), 2);
        assert_eq!(find(&o, ".metadata.labels['app.kubernetes.io/name']"), vec![&json!("web")]);
        assert_eq!(find(&o, "{.status.conditions[1].status}"), vec![&json!("False")]);
        assert!(find(&o, ".spec.missing").is_empty());
    }
}
