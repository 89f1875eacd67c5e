//! The manifests the end-to-end tests apply, one file each under `tests/e2e/manifests/`, loaded by name:
//!
//! ```ignore
//! let never = e2e::manifests::load!("hooktemplate-never", interval = "20s");
//! let quick: &str = e2e::manifests::load!("hooktemplate-quick");
//! ```
//!
//! [`load!`] compiles the file into the test binary (`include_str!`), so a name without a file is a build error,
//! not a test failure. Without values it gives the file's text (`&'static str`); with `key = value` pairs it gives
//! a `String` in which every `${key}` placeholder is replaced by the value's `Display` (names, addresses,
//! conditions, whole YAML lines such as an extra strategy field). [`render`] checks that every pair's placeholder
//! occurs and that none is left over, so a manifest and its callers cannot drift apart silently.

/// `load!("name")`: the text of `tests/e2e/manifests/name.yaml`; `load!("name", key = value, ...)`: the same with
/// its `${key}` placeholders replaced (see the module documentation).
#[doc(hidden)]
#[macro_export]
macro_rules! __e2e_load_manifest {
    ($name:literal $(,)?) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/", $name, ".yaml"))
    };
    ($name:literal, $($key:ident = $value:expr),+ $(,)?) => {
        $crate::manifests::render(
            $name,
            $crate::manifests::load!($name),
            &[$((stringify!($key), &$value as &dyn ::std::fmt::Display)),+],
        )
    };
}

pub use crate::__e2e_load_manifest as load;

/// `text` (the manifest `name`) with each `${key}` replaced by its value. Panics when a key has no placeholder in
/// the text or a placeholder is left without a value: both are mistakes in the test, not in the code under test.
pub fn render(name: &str, text: &str, values: &[(&str, &dyn std::fmt::Display)]) -> String {
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let end = rest[at..].find('}').map_or(rest.len(), |e| at + e + 1);
        let key = rest[at + 2..end].trim_end_matches('}');
        assert!(values.iter().any(|(k, _)| *k == key), "manifest {name}: no value for ${{{key}}}");
        rest = &rest[end..];
    }
    let mut out = text.to_string();
    for (key, value) in values {
        let placeholder = format!("${{{key}}}");
        assert!(text.contains(&placeholder), "manifest {name}: no placeholder {placeholder}");
        out = out.replace(&placeholder, &value.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_are_replaced() {
        let text = "name: ${name}\nport: ${port}\n";
        assert_eq!(super::render("t", text, &[("name", &"web"), ("port", &8000)]), "name: web\nport: 8000\n");
    }

    #[test]
    #[should_panic(expected = "no value for ${port}")]
    fn a_placeholder_without_a_value_panics() {
        super::render("t", "name: ${name}\nport: ${port}\n", &[("name", &"web")]);
    }

    #[test]
    #[should_panic(expected = "no placeholder ${image}")]
    fn a_value_without_a_placeholder_panics() {
        super::render("t", "name: ${name}\n", &[("name", &"web"), ("image", &"x")]);
    }
}
