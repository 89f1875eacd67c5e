//! Label selectors (`labels.Parse` syntax, including set-based requirements) and field selectors
//! (`fields.ParseSelector`: `=`, `==`, `!=` on a per-resource set of supported fields).

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub key: String,
    pub op: Op,
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.key);
        match self.op {
            Op::Equals | Op::In => v.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotEquals | Op::NotIn => v.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let (Some(v), Some(bound)) =
                    (v.and_then(|v| v.parse::<i64>().ok()), self.values.first().and_then(|b| b.parse::<i64>().ok()))
                else {
                    return false;
                };
                if self.op == Op::GreaterThan { v > bound } else { v < bound }
            }
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub(crate) fn matches_object(&self, obj: &Value) -> bool {
        if self.is_empty() {
            return true;
        }
        self.matches(&object_labels(obj))
    }

    /// Parses the query-string syntax (`app=web,tier in (a,b),!legacy`).
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut p = Lexer { chars: s.chars().collect(), pos: 0 };
        let mut requirements = Vec::new();
        p.skip_ws();
        if p.at_end() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(p.requirement()?);
            p.skip_ws();
            if p.at_end() {
                break;
            }
            if !p.eat(',') {
                return Err(format!("found '{}', expected: ',' or 'end of string'", p.rest()));
            }
        }
        Ok(Self { requirements })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`).
    pub(crate) fn from_label_selector_object(sel: &Value) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in ml {
                requirements.push(Requirement {
                    key: k.clone(),
                    op: Op::Equals,
                    values: vec![v.as_str().unwrap_or_default().to_string()],
                });
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default().to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
                    "In" => Op::In,
                    "NotIn" => Op::NotIn,
                    "Exists" => Op::Exists,
                    "DoesNotExist" => Op::DoesNotExist,
                    other => return Err(format!("{other:?} is not a valid label selector operator")),
                };
                requirements.push(Requirement { key, op, values });
            }
        }
        Ok(Self { requirements })
    }
}

pub(crate) fn object_labels(obj: &Value) -> BTreeMap<String, String> {
    crate::meta::labels(obj)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default()
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
}

impl Lexer {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }
    fn rest(&self) -> String {
        self.chars[self.pos..].iter().collect()
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }
    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn eat_str(&mut self, s: &str) -> bool {
        self.skip_ws();
        let n = s.chars().count();
        if self.chars.len() >= self.pos + n && self.chars[self.pos..self.pos + n].iter().copied().eq(s.chars()) {
            self.pos += n;
            true
        } else {
            false
        }
    }
    fn ident(&mut self) -> String {
        self.skip_ws();
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')' | '<' | '>') {
                break;
            }
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        self.skip_ws();
        if self.eat('!') {
            let key = self.ident();
            validate_key(&key)?;
            return Ok(Requirement { key, op: Op::DoesNotExist, values: vec![] });
        }
        let key = self.ident();
        if key.is_empty() {
            return Err(format!("found '{}', expected: identifier", self.rest()));
        }
        validate_key(&key)?;
        self.skip_ws();
        if self.at_end() || self.peek() == Some(',') {
            return Ok(Requirement { key, op: Op::Exists, values: vec![] });
        }
        let op = if self.eat_str("==") || self.eat_str("=") {
            Op::Equals
        } else if self.eat_str("!=") {
            Op::NotEquals
        } else if self.eat_str(">") {
            Op::GreaterThan
        } else if self.eat_str("<") {
            Op::LessThan
        } else {
            let word = self.ident();
            match word.as_str() {
                "in" => Op::In,
                "notin" => Op::NotIn,
                other => return Err(format!("found '{other}', expected: in, notin, =, ==, !=, gt, lt")),
            }
        };
        let values = match op {
            Op::In | Op::NotIn => {
                if !self.eat('(') {
                    return Err("found '', expected: '('".to_string());
                }
                let mut vals = Vec::new();
                loop {
                    let v = self.ident();
                    validate_value(&v)?;
                    vals.push(v);
                    if self.eat(',') {
                        continue;
                    }
                    if self.eat(')') {
                        break;
                    }
                    return Err(format!("found '{}', expected: ',', ')' or identifier", self.rest()));
                }
                vals
            }
            _ => {
                let v = self.ident();
                validate_value(&v)?;
                if matches!(op, Op::GreaterThan | Op::LessThan) && v.parse::<i64>().is_err() {
                    return Err(format!("for 'Gt', 'Lt' operators, the value must be an integer: {v}"));
                }
                vec![v]
            }
        };
        Ok(Requirement { key, op, values })
    }
}

fn validate_key(key: &str) -> Result<(), String> {
    crate::validation::qualified_name_errors(key)
        .first()
        .map_or(Ok(()), |e| Err(format!("unable to parse requirement: <nil>: Invalid value: {key:?}: {e}")))
}

fn validate_value(v: &str) -> Result<(), String> {
    crate::validation::label_value_errors(v)
        .first()
        .map_or(Ok(()), |e| Err(format!("unable to parse requirement: <nil>: Invalid value: {v:?}: {e}")))
}

/// One `field=value` / `field!=value` term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_unescaped(s, ',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, value, negated) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{term}'"));
            };
            requirements.push(FieldRequirement {
                field: field.trim().to_string(),
                value: unescape(value.trim()),
                negated,
            });
        }
        Ok(Self { requirements })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value for `metadata.name=x` when the selector pins a single name (used by watches
    /// kubectl opens with `fieldSelector=metadata.name=...`).
    pub(crate) fn exact_name(&self) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == "metadata.name" && !r.negated).map(|r| r.value.as_str())
    }

    pub(crate) fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = fields.get(&r.field).map(String::as_str).unwrap_or("");
            (v == r.value) != r.negated
        })
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn equality_and_set_based_requirements() {
        let s = LabelSelector::parse("app=web, tier in (a,b),!legacy,env!=prod").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "b"), ("env", "prod")])));
        let exists = LabelSelector::parse("app").unwrap();
        assert!(exists.matches(&labels(&[("app", "")])));
        assert!(!exists.matches(&labels(&[])));
        let notin = LabelSelector::parse("app notin (x)").unwrap();
        assert!(notin.matches(&labels(&[])));
    }

    #[test]
    fn invalid_label_selectors_are_rejected() {
        assert!(LabelSelector::parse("app in a").is_err());
        assert!(LabelSelector::parse("a b").is_err());
        assert!(LabelSelector::parse("x>a").is_err());
    }

    #[test]
    fn field_selectors() {
        let s = FieldSelector::parse("metadata.name=a,spec.nodeName!=").unwrap();
        let mut f = BTreeMap::new();
        f.insert("metadata.name".to_string(), "a".to_string());
        assert!(!s.matches(&f));
        f.insert("spec.nodeName".to_string(), "n1".to_string());
        assert!(s.matches(&f));
        assert_eq!(s.exact_name(), Some("a"));
    }
}
