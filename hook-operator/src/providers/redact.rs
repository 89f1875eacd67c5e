//! Credentials never reach status, Events or logs: URL userinfo, query parameters that carry tokens, header
//! values and the values of arguments read from Secrets are replaced by `***` in every message a measurement
//! produces.

/// Query parameter names whose values are credentials (compared case-insensitively, also as a suffix such as
/// `x-api-key` or `access_token`).
const SENSITIVE_PARAMS: &[&str] =
    &["token", "key", "secret", "password", "passwd", "pwd", "auth", "signature", "sig", "credential", "session"];

/// What a credential is replaced with.
pub const MASK: &str = "***";

fn sensitive(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SENSITIVE_PARAMS
        .iter()
        .any(|s| name == *s || name.ends_with(&format!("_{s}")) || name.ends_with(&format!("-{s}")) || name.contains(s))
}

/// Headers whose values are credentials: `Authorization`, `Proxy-Authorization`, `Cookie` and any name
/// mentioning a token, key, secret, password, auth, signature or session.
pub fn sensitive_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "cookie" || sensitive(&name)
}

/// `url` with its password (or lone user token) and sensitive query values masked; text that is not a URL is
/// returned unchanged.
pub fn url(text: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(text) else { return text.to_string() };
    let mut changed = false;
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some(MASK));
        changed = true;
    } else if !parsed.username().is_empty() {
        // `https://TOKEN@host/`: a lone user name is often the credential itself.
        let _ = parsed.set_username(MASK);
        changed = true;
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> =
            parsed.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        if pairs.iter().any(|(k, _)| sensitive(k)) {
            let mut query = parsed.query_pairs_mut();
            query.clear();
            for (k, v) in &pairs {
                query.append_pair(k, if sensitive(k) { MASK } else { v });
            }
            drop(query);
            changed = true;
        }
    }
    if changed { parsed.to_string().replace("%2A%2A%2A", MASK) } else { text.to_string() }
}

/// [`text()`] in place: a text without a URL and without any of `secrets` is left as it is (not copied), as every
/// message and value of a healthy measurement is.
pub fn text_in_place(text: &mut String, secrets: &[String]) {
    let secret_inside = secrets.iter().any(|s| s.chars().count() >= 3 && text.contains(s.as_str()));
    if text.contains("://") || secret_inside {
        *text = self::text(text, secrets);
    }
}

/// Every URL inside `text` (a message) redacted with [`url()`], and every string of `secrets` (at least 3
/// characters long) replaced by `***`.
pub fn text(text: &str, secrets: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.contains("://") {
            // Keep trailing punctuation out of the URL.
            let end = word.trim_end_matches([',', ';', ':', ')', '`', '"', '\'']).len();
            let start = word.find("http").unwrap_or(0).min(end);
            out.push_str(&word[..start]);
            out.push_str(&url(&word[start..end]));
            out.push_str(&word[end..]);
        } else {
            out.push_str(word);
        }
    }
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| s.chars().count() >= 3).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_userinfo_and_token_parameters() {
        assert_eq!(url("http://user:hunter2@10.0.0.1:9091/x"), "http://user:***@10.0.0.1:9091/x");
        assert_eq!(url("https://ghp_abc@example.com/"), "https://***@example.com/");
        assert_eq!(
            url("http://h/q?query=up&access_token=abc&api_key=k&page=2"),
            "http://h/q?query=up&access_token=***&api_key=***&page=2"
        );
        assert_eq!(url("http://h:9091/age"), "http://h:9091/age");
        assert_eq!(url("not a url"), "not a url");
    }

    #[test]
    fn credential_headers() {
        for name in ["Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "PRIVATE-TOKEN"] {
            assert!(sensitive_header(name), "{name}");
        }
        for name in ["Accept", "Content-Type", "User-Agent", "X-Request-Id"] {
            assert!(!sensitive_header(name), "{name}");
        }
    }

    #[test]
    fn masks_urls_and_secret_values_inside_messages() {
        let message =
            "GET http://u:pw@10.0.0.1/x?token=t0k3n: cannot connect (`http://a/?sig=1`), header Bearer s3cr3t";
        let out = text(message, &["s3cr3t".to_string(), "x".to_string()]);
        assert_eq!(
            out,
            "GET http://u:***@10.0.0.1/x?token=***: cannot connect (`http://a/?sig=***`), header Bearer ***"
        );
    }
}
