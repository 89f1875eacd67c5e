//! Small helpers over the kube client that both operators need.

use kube::{Api, Client, Resource};

/// The API of a namespaced kind in one namespace, or across all namespaces (`None`).
pub fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
