//! Protobuf field tables of the built-in kinds kube-sim decodes.
//!
//! `gen.py` writes them as data, `types.txt` (a message a line: definition, required JSON fields, then
//! `tag:json:kind` per field), rather than as Rust struct literals: the tables are long and alike line by line, and
//! as data they are read once, on the first protobuf request body, into [`MESSAGES`]. Their names are slices of the
//! embedded text, so nothing is copied.

use std::sync::LazyLock;

use super::{Field, Kind, Message};

/// The field tables as `gen.py` writes them.
const TABLES: &str = include_str!("types.txt");

/// The messages of [`TABLES`], in its order: a `Kind::Msg(n)` names `MESSAGES[n]`.
pub(super) static MESSAGES: LazyLock<Box<[Message]>> = LazyLock::new(|| {
    // Invariant: TABLES is generated and fixed at build time; `tables_parse_and_round_trip` parses every line.
    parse(TABLES).unwrap_or_else(|e| unreachable!("protobuf/types.txt does not parse: {e}"))
});

/// Reads the message lines of `text` (`#` lines are comments).
fn parse(text: &'static str) -> Result<Box<[Message]>, String> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| message(line).map_err(|e| format!("{e} in line `{line}`")))
        .collect()
}

/// `io.k8s.api.core.v1.Pod metadata 1:metadata:Msg(41) 2:spec:Msg(44) ...`: a definition, its required JSON fields
/// (comma-separated, `-` for none), then its fields.
fn message(line: &'static str) -> Result<Message, String> {
    let mut words = line.split(' ');
    let name = words.next().ok_or("no definition")?;
    let required = match words.next().ok_or("no required fields")? {
        "-" => Box::default(),
        names => names.split(',').collect(),
    };
    let fields = words.map(field).collect::<Result<_, _>>()?;
    Ok(Message { name, required, fields })
}

/// `3:status:Msg(45)`: a field's number, its JSON name and its kind.
fn field(word: &'static str) -> Result<Field, String> {
    let mut parts = word.split(':');
    let (Some(tag), Some(json), Some(kind), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(format!("field `{word}` is not tag:json:kind"));
    };
    let tag = tag.parse().map_err(|e| format!("field `{word}`: tag: {e}"))?;
    Ok(Field { tag, json, kind: kind_of(kind).ok_or_else(|| format!("field `{word}`: unknown kind"))? })
}

/// `Str`, `RepMsg(12)`: a [`Kind`] as `gen.py` names it.
fn kind_of(text: &str) -> Option<Kind> {
    let Some((name, index)) = text.strip_suffix(')').and_then(|t| t.split_once('(')) else {
        return match text {
            "Str" => Some(Kind::Str),
            "Int" => Some(Kind::Int),
            "Bool" => Some(Kind::Bool),
            "RepStr" => Some(Kind::RepStr),
            "RepInt" => Some(Kind::RepInt),
            "MapStr" => Some(Kind::MapStr),
            "MapBytes" => Some(Kind::MapBytes),
            _ => None,
        };
    };
    let index = index.parse().ok()?;
    match name {
        "Msg" => Some(Kind::Msg(index)),
        "RepMsg" => Some(Kind::RepMsg(index)),
        "MapMsg" => Some(Kind::MapMsg(index)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind as `gen.py` writes it: the inverse of [`kind_of`].
    fn kind_text(kind: Kind) -> String {
        match kind {
            Kind::Str => "Str".into(),
            Kind::Int => "Int".into(),
            Kind::Bool => "Bool".into(),
            Kind::RepStr => "RepStr".into(),
            Kind::RepInt => "RepInt".into(),
            Kind::MapStr => "MapStr".into(),
            Kind::MapBytes => "MapBytes".into(),
            Kind::Msg(i) => format!("Msg({i})"),
            Kind::RepMsg(i) => format!("RepMsg({i})"),
            Kind::MapMsg(i) => format!("MapMsg({i})"),
        }
    }

    fn named(name: &str) -> &'static Message {
        MESSAGES.iter().find(|m| m.name == name).unwrap()
    }

    #[test]
    fn tables_parse_and_round_trip() {
        let lines: Vec<&str> = TABLES.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(MESSAGES.len(), 344);
        assert_eq!(MESSAGES.len(), lines.len());
        for (m, line) in MESSAGES.iter().zip(lines) {
            let required = if m.required.is_empty() { "-".to_string() } else { m.required.join(",") };
            let fields = m.fields.iter().map(|f| format!(" {}:{}:{}", f.tag, f.json, kind_text(f.kind)));
            assert_eq!(format!("{} {required}{}", m.name, fields.collect::<String>()), line);
        }
    }

    #[test]
    fn every_message_index_is_in_range() {
        for m in MESSAGES.iter() {
            for f in m.fields.iter() {
                if let Kind::Msg(i) | Kind::RepMsg(i) | Kind::MapMsg(i) = f.kind {
                    assert!(i < MESSAGES.len(), "{}.{} names message {i}", m.name, f.json);
                }
            }
        }
    }

    #[test]
    fn known_messages_have_their_fields() {
        let pod = named("io.k8s.api.core.v1.Pod");
        assert_eq!(&*pod.required, ["metadata"]);
        let tags: Vec<(u64, &str)> = pod.fields.iter().map(|f| (f.tag, f.json)).collect();
        assert_eq!(tags, [(1, "metadata"), (2, "spec"), (3, "status")]);
        let Kind::Msg(meta) = pod.fields[0].kind else { panic!("Pod.metadata is not a message") };
        assert_eq!(MESSAGES[meta].name, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        let Kind::Msg(spec) = pod.fields[1].kind else { panic!("Pod.spec is not a message") };
        assert_eq!(MESSAGES[spec].name, "io.k8s.api.core.v1.PodSpec");

        let secret = named("io.k8s.api.core.v1.Secret");
        let data = secret.fields.iter().find(|f| f.json == "data").unwrap();
        assert!(data.tag == 2 && matches!(data.kind, Kind::MapBytes));
        assert!(named("io.k8s.apimachinery.pkg.apis.meta.v1.Time").fields.is_empty());
        // Kinds added later go last, so existing indices stay put.
        assert_eq!(MESSAGES.last().unwrap().name, "io.k8s.api.policy.v1.Eviction");
    }

    #[test]
    fn malformed_lines_are_refused() {
        assert!(parse("io.k8s.X - 1:name").is_err());
        assert!(parse("io.k8s.X - one:name:Str").is_err());
        assert!(parse("io.k8s.X - 1:name:Double").is_err());
        assert!(parse("io.k8s.X - 1:name:Msg(x)").is_err());
        assert!(parse("io.k8s.X").is_err());
    }
}
