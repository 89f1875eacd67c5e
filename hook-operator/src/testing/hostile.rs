//! The hostile-input corpus (`testdata/hostile.yaml`): inputs a template author can write that, unbounded, would
//! take the hook-operator past its memory limit or keep a CPU busy. The tests and `hook-fuzz --corpus` serve each
//! case's answer and check that its measurement ends `Error` with a message naming the bound it hit.

use serde::Deserialize;

/// The corpus, as shipped.
pub const CORPUS: &str = include_str!("../../testdata/hostile.yaml");

/// One hostile input.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    /// The case's name, in test output.
    pub name: String,
    /// The condition the template judges the answer with.
    pub success_condition: String,
    /// The web metric's `jsonPath`, if any.
    #[serde(default)]
    pub json_path: Option<String>,
    /// What the endpoint answers.
    pub answer: Answer,
    /// Text the measurement's message contains.
    pub expect: String,
}

/// What the endpoint answers: exactly one of the fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// This text.
    pub text: Option<String>,
    /// `{"k":[0,1,…,n-1]}`.
    pub numbers: Option<usize>,
    /// `[{"a":1,"b":[1,2]},…]`, n objects.
    pub objects: Option<usize>,
    /// `{"kkk…0":{"x":[1,…,8]},…}`: `count` keys of `bytes` bytes each.
    pub long_keys: Option<LongKeys>,
    /// `{"s":"aaa…"}` with n characters.
    pub string: Option<usize>,
    /// `[[[…]]]` nested n deep.
    pub deep: Option<usize>,
}

/// An object of many long keys (see [`Answer::long_keys`]).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongKeys {
    /// How many keys.
    pub count: usize,
    /// Bytes of each key.
    pub bytes: usize,
}

impl Answer {
    /// The answer's bytes, built from whichever field is set.
    pub fn body(&self) -> Vec<u8> {
        if let Some(text) = &self.text {
            return text.clone().into_bytes();
        }
        if let Some(n) = self.numbers {
            let numbers: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            return format!(r#"{{"k":[{}]}}"#, numbers.join(",")).into_bytes();
        }
        if let Some(n) = self.objects {
            return format!("[{}]", vec![r#"{"a":1,"b":[1,2]}"#; n].join(",")).into_bytes();
        }
        if let Some(LongKeys { count, bytes }) = self.long_keys {
            let keys: Vec<String> =
                (0..count).map(|i| format!(r#""{}{i}":{{"x":[1,2,3,4,5,6,7,8]}}"#, "k".repeat(bytes))).collect();
            return format!("{{{}}}", keys.join(",")).into_bytes();
        }
        if let Some(n) = self.string {
            return format!(r#"{{"s":"{}"}}"#, "a".repeat(n)).into_bytes();
        }
        if let Some(n) = self.deep {
            return format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
        }
        Vec::new()
    }
}

/// Resident memory of process `pid` and its children (an operator and its evaluation workers), in bytes, from
/// `/proc`: how the tests and `hook-fuzz --corpus` check that the bounds hold.
pub fn tree_rss(pid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| {
            status.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        };
        let own = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) == Some(pid);
        if own || field("PPid:") == Some(u64::from(pid)) {
            total += field("VmRSS:").unwrap_or(0) * 1024;
        }
    }
    total
}

/// The corpus' cases.
pub fn cases() -> Result<Vec<Case>, String> {
    serde_yaml::from_str(CORPUS).map_err(|e| format!("testdata/hostile.yaml: {e}"))
}

/// A HookTemplate measuring `case` against `url` once (its first Error ends the run).
pub fn template(case: &Case, url: &str) -> String {
    let path = case.json_path.as_deref().map(|p| format!("        jsonPath: {p:?}\n")).unwrap_or_default();
    format!(
        "apiVersion: tkex.tencent.com/v1alpha1\nkind: HookTemplate\nmetadata:\n  name: {name}\nspec:\n  metrics:\n  \
         - name: hostile\n    consecutiveErrorLimit: 0\n    successCondition: {condition:?}\n    provider:\n      web:\n        url: {url}\n{path}",
        name = case.name,
        condition = case.success_condition,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_loads_passes_validation_and_makes_its_answer() {
        let cases = cases().unwrap();
        assert!(cases.len() >= 10);
        for case in &cases {
            let text = template(case, "http://127.0.0.1:1/");
            let template: common::api::HookTemplate = serde_yaml::from_str(&text).unwrap();
            assert_eq!(crate::engine::validate::template(&template.spec), Vec::<String>::new(), "{}", case.name);
            assert!(!case.answer.body().is_empty());
        }
        let wide = Answer { numbers: Some(200_000), ..Answer::default() }.body();
        assert!(wide.len() > 1_000_000 && wide.len() < 2_000_000, "{}", wide.len());
    }
}
