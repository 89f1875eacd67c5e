//! What the claims of `spec.volumeClaimTemplates` are called — `<template>-<gamedeployment>-<instance id>` — and
//! whether the templates can name one ([`validate`], a settings problem that stops scaling). Below the settings
//! that validate them and the scaling that creates them ([`super::scale::volumes`]).

use std::collections::BTreeSet;

use common::api::GameDeployment;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// Length of the instance id (and pod-name suffix), as BCS and ReplicaSets.
pub const ID_LEN: usize = 5;

/// Longest Kubernetes object name (DNS subdomain).
const MAX_NAME: usize = 253;

/// The claim of template `template` for the pod with instance id `id`.
pub fn claim_name(template: &str, gd_name: &str, id: &str) -> String {
    format!("{template}-{gd_name}-{id}")
}

/// The template's name: the pod volume's and the claims' prefix.
pub(crate) fn template_name(template: &PersistentVolumeClaim) -> &str {
    template.metadata.name.as_deref().unwrap_or("")
}

/// Checks `spec.volumeClaimTemplates` (the CRD checks the same; this covers a CRD installed before the field
/// existed). A problem stops scaling: pods without their claims must not be created.
pub fn validate(gd: &GameDeployment) -> Result<(), String> {
    let templates = &gd.spec.volume_claim_templates;
    let max = common::api::gamedeployment::MAX_VOLUME_CLAIM_TEMPLATES;
    if templates.len() > max {
        return Err(format!("spec.volumeClaimTemplates has {} templates, above the maximum {max}", templates.len()));
    }
    let gd_name = gd.metadata.name.as_deref().unwrap_or("");
    let mut seen = BTreeSet::new();
    for (i, template) in templates.iter().enumerate() {
        let name = template_name(template);
        if !is_dns_label(name) {
            return Err(format!(
                "spec.volumeClaimTemplates[{i}].metadata.name {name:?} must be a DNS label (lower-case letters, digits and '-', at most 63)"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("spec.volumeClaimTemplates[{i}].metadata.name {name:?} is used twice"));
        }
        let longest = claim_name(name, gd_name, &"x".repeat(ID_LEN));
        if longest.len() > MAX_NAME {
            return Err(format!(
                "spec.volumeClaimTemplates[{i}]: claim names ({name}-{gd_name}-<id>) would be longer than {MAX_NAME} characters"
            ));
        }
    }
    Ok(())
}

fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}
