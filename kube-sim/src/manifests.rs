//! Loading manifests from files and directories and applying them, like
//! `kubectl apply -f <dir>`: YAML (multi-document) and JSON, `List` objects flattened,
//! CustomResourceDefinitions first so the custom resources after them resolve.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::patch::PatchType;
use crate::registry::{Endpoint, Registry, WriteCtx};

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("parsing {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error(
        "{path}: {kind} {name}: no resource for apiVersion {api_version:?} kind {kind:?} (are its CRDs installed?)"
    )]
    UnknownKind { path: PathBuf, api_version: String, kind: String, name: String },
    #[error("{path}: applying {kind} {name}: {source}")]
    Apply { path: PathBuf, kind: String, name: String, source: Box<crate::status::ApiError> },
}

/// A manifest object and the file it came from.
pub(crate) struct Manifest {
    pub path: PathBuf,
    pub object: Value,
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let meta = std::fs::metadata(path).map_err(|source| ManifestError::Read { path: path.to_path_buf(), source })?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| ManifestError::Read { path: path.to_path_buf(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            let is_manifest =
                e.extension().and_then(|x| x.to_str()).is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
            if e.is_file() && is_manifest {
                out.push(e);
            }
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}

fn flatten(v: Value, path: &Path, out: &mut Vec<Manifest>) {
    if v.is_null() {
        return;
    }
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind == "List" || (kind.ends_with("List") && v.get("items").is_some()) {
        if let Some(items) = v.get("items").and_then(Value::as_array) {
            for i in items {
                flatten(i.clone(), path, out);
            }
        }
        return;
    }
    out.push(Manifest { path: path.to_path_buf(), object: v });
}

/// Reads every manifest under the given files/directories.
pub(crate) fn load(paths: &[PathBuf]) -> Result<Vec<Manifest>, ManifestError> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, &mut files)?;
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| ManifestError::Read { path: f.clone(), source })?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc)
                .map_err(|e| ManifestError::Parse { path: f.clone(), message: e.to_string() })?;
            flatten(v, &f, &mut out);
        }
    }
    // CRDs (and namespaces) first, like the order `kubectl apply` users rely on.
    out.sort_by_key(|m| match m.object.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    });
    Ok(out)
}

/// Applies manifests through the registry with server-side apply (field manager `kube-sim`).
pub(crate) fn apply(registry: &Registry, manifests: &[Manifest]) -> Result<Vec<String>, ManifestError> {
    let mut applied = Vec::new();
    for m in manifests {
        let api_version = m.object.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = m.object.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        let name = crate::meta::name(&m.object).to_string();
        let rd =
            registry.catalog.by_api_version_kind(&api_version, &kind).ok_or_else(|| ManifestError::UnknownKind {
                path: m.path.clone(),
                api_version: api_version.clone(),
                kind: kind.clone(),
                name: name.clone(),
            })?;
        let ns = if rd.namespaced {
            let n = crate::meta::namespace(&m.object);
            if n.is_empty() { "default".to_string() } else { n.to_string() }
        } else {
            String::new()
        };
        let mut obj = m.object.clone();
        if rd.namespaced {
            crate::meta::metadata_mut(&mut obj).insert("namespace".into(), Value::String(ns.clone()));
        }
        let body = serde_json::to_vec(&obj).unwrap_or_default();
        let mut ctx = WriteCtx::new("kube-sim");
        ctx.field_validation = crate::registry::FieldValidation::Strict;
        registry.patch(&rd, &ns, &name, PatchType::Apply, &body, Endpoint::Main, true, &mut ctx).map_err(|source| {
            ManifestError::Apply {
                path: m.path.clone(),
                kind: kind.clone(),
                name: name.clone(),
                source: Box::new(source),
            }
        })?;
        let resource = if rd.group.is_empty() { rd.singular.clone() } else { format!("{}.{}", rd.singular, rd.group) };
        applied.push(format!("{resource}/{name}"));
    }
    Ok(applied)
}
